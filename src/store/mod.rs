//! The store: records, their history, keys and releases, on SQLite (the embedded default, a file)
//! or PostgreSQL. One implementation in portable SQL serves both through sqlx's `Any` driver —
//! the schema and queries are plain SQL both databases speak (`$n` parameters, BIGINT times in
//! milliseconds, JSON kept as text), so there is one code path to test, and the same test bodies
//! run against each database. Domain operations live beside their types: `memories`. Every query
//! of the crate is here: the layers above call these functions and never SQL themselves.

pub mod data_health;
pub mod dormancy;
pub mod embeddings;
pub mod history;
pub mod imports;
pub mod keys;
pub mod memories;
pub mod observer;
pub mod outbox;
pub mod releases;
pub mod sessions;
pub mod trigger_limits;

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{AnyPool, Executor};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("revision conflict: expected {expected}, the record is at {actual}")]
    RevisionConflict { expected: i64, actual: i64 },
    #[error("a record with id `{0}` already exists")]
    IdTaken(String),
    #[error("another live record already has this key and scope")]
    TopicTaken,
    /// A status change found the record in a status it does not take (`set_record_status`).
    #[error("the record is {}, a status this change does not take", .actual.as_str())]
    StatusConflict { actual: crate::record::Status },
    /// The observer's claim on the exchange it writes for is gone (its scope was forgotten, or
    /// another replica took it over): nothing was written (`observer::Claim`).
    #[error("the exchange this write came from is no longer claimed by this worker")]
    Fenced,
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// The database could not be reached (down, restarting, refusing connections, out of
    /// connections), as opposed to a query it answered with an error: worth retrying later.
    pub fn is_unavailable(&self) -> bool {
        let StoreError::Database(err) = self else { return false };
        match err {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_) => true,
            sqlx::Error::WorkerCrashed => true,
            // PostgreSQL's "connection exception" (08…) and "operator intervention" (57P…: shutting
            // down, cannot connect now) classes.
            sqlx::Error::Database(db) => {
                db.code().is_some_and(|code| code.starts_with("08") || code.starts_with("57P"))
            }
            _ => false,
        }
    }
}

/// A store error as a client sees it: an unreachable database is a 503 to retry (`Retry-After`),
/// a missing row a 404; anything else is memgate's own failure, logged and answered without
/// details. Callers that can name what was missing, or what the conflict was, say so themselves.
impl crate::error::ErrorCode for StoreError {
    fn error_code(&self) -> crate::error::Code {
        use crate::error::Code;
        if self.is_unavailable() {
            Code::StoreUnavailable
        } else if matches!(self, StoreError::NotFound) {
            Code::NotFound
        } else {
            Code::Internal
        }
    }

    fn public_message(&self) -> String {
        if self.is_unavailable() {
            "the database is unreachable; nothing was changed. Retry shortly".to_owned()
        } else {
            "no such item in this tenant".to_owned()
        }
    }

    fn retry_after_secs(&self) -> Option<u64> {
        self.is_unavailable().then_some(5)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

impl Store {
    /// Connects to `sqlite://…` (the file is created if missing) or `postgres://…`.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            return Err(StoreError::Corrupt(format!(
                "unsupported database URL scheme in `{}`; use sqlite://FILE or postgres://…",
                redact_url(url)
            )));
        };
        let url = match backend {
            Backend::Sqlite if !url.contains("mode=") => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}mode=rwc")
            }
            _ => url.to_owned(),
        };
        // An unreachable database answers a write with a 503 after this long, not a hang.
        let options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(3));
        let pool = match backend {
            // SQLite: one writer at a time; WAL lets readers go on meanwhile, and busy_timeout
            // makes a second writer wait for the lock instead of failing at once.
            Backend::Sqlite => {
                options
                    .max_connections(4)
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA busy_timeout = 10000").await?;
                            conn.execute("PRAGMA synchronous = NORMAL").await?;
                            Ok(())
                        })
                    })
                    .connect(&url)
                    .await?
            }
            Backend::Postgres => options.max_connections(16).connect(&url).await?,
        };
        Ok(Store { pool, backend })
    }

    /// Applies pending migrations (`memgate migrate`, and at every start).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await.map_err(|err| StoreError::Database(err.into()))?;
        if self.backend == Backend::Postgres {
            self.keep_vectors_inline().await?;
            let bytes = self.vectors_out_of_line().await?;
            if bytes > 0 {
                tracing::warn!(
                    mb = bytes.div_ceil(1 << 20),
                    "memory_embeddings keeps vectors written before this version out of their rows, \
                     which slows every start's load; docs/operations.md (\"Vectors in their rows\") \
                     gives the two statements that move them"
                );
            }
        }
        Ok(())
    }

    /// Bytes of `memory_embeddings`' vectors PostgreSQL keeps out of line (its TOAST table's
    /// heap): 0 once every vector is in its row (`keep_vectors_inline`); 0 on SQLite.
    pub async fn vectors_out_of_line(&self) -> Result<u64, StoreError> {
        if self.backend != Backend::Postgres {
            return Ok(0);
        }
        let bytes: i64 = sqlx::query_scalar(
            "SELECT COALESCE(pg_relation_size(NULLIF(reltoastrelid, 0)), 0) FROM pg_class \
             WHERE oid = 'memory_embeddings'::regclass",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(bytes).unwrap_or(0))
    }

    /// Keeps each embedding in its row on PostgreSQL. A vector is 2,048 base64 characters, so a
    /// row of `memory_embeddings` is just over the 2 KB at which PostgreSQL moves a row's largest
    /// value out of line (TOAST): every vector a startup reads was then a second lookup, in the
    /// TOAST table's index and heap, on the one backend that sends the load's pages (measured in
    /// docs/benchmarks.md). With a row target of 4 KB the rows are written whole; rows written
    /// before keep their place until their values are written again (`VACUUM FULL` alone copies
    /// them as they are: docs/operations.md gives the rewrite), or restored into a fresh store.
    /// A storage parameter, not schema, and PostgreSQL's own syntax: not a shared migration.
    async fn keep_vectors_inline(&self) -> Result<(), StoreError> {
        let set: bool = sqlx::query_scalar(
            "SELECT COALESCE('toast_tuple_target=4096' = ANY(reloptions), FALSE) FROM pg_class \
             WHERE oid = 'memory_embeddings'::regclass",
        )
        .fetch_one(&self.pool)
        .await?;
        if !set {
            sqlx::query("ALTER TABLE memory_embeddings SET (toast_tuple_target = 4096)")
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// A transaction that will write. On SQLite it takes the write lock up front (`BEGIN
    /// IMMEDIATE`): two deferred transactions that both read and then write would deadlock on the
    /// lock upgrade and one would fail with "database is locked" instead of waiting its turn.
    pub(crate) async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        })
    }

    /// A write transaction that changes records: the first statement advances the sync
    /// sequence (see migrations/…_sync_sequence.sql), so every record write takes the counter's
    /// row lock in the same order — first — and hands out numbers in commit order.
    pub(crate) async fn begin_record_write(
        &self,
    ) -> Result<(sqlx::Transaction<'static, sqlx::Any>, i64), StoreError> {
        let mut tx = self.begin_write().await?;
        let row =
            sqlx::query("UPDATE sync_sequence SET value = value + 1 WHERE name = 'memories' RETURNING value")
                .fetch_one(&mut *tx)
                .await?;
        let seq: i64 = sqlx::Row::try_get(&row, 0)?;
        Ok((tx, seq))
    }

    /// The deployment's secret `name`, made (256 random bits, hex) by the first caller that asks:
    /// every replica on this database gets the same one.
    pub async fn shared_secret(&self, name: &str) -> Result<String, StoreError> {
        let fresh = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        sqlx::query("INSERT INTO server_secrets (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(&fresh)
            .bind(crate::clock::now_ms())
            .execute(&self.pool)
            .await?;
        let row = sqlx::query("SELECT value FROM server_secrets WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await?;
        Ok(sqlx::Row::try_get(&row, 0)?)
    }

    /// The tenants that hold records or keys, in no order. Records are walked by their primary
    /// key's first column one tenant at a time (a recursive query: one index seek per tenant), so
    /// a store of a million records answers as fast as one of ten.
    pub async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "WITH RECURSIVE t(tenant) AS ( \
                 SELECT MIN(tenant) FROM memories \
                 UNION ALL \
                 SELECT (SELECT MIN(m.tenant) FROM memories m WHERE m.tenant > t.tenant) FROM t WHERE t.tenant IS NOT NULL \
             ) \
             SELECT tenant FROM t WHERE tenant IS NOT NULL \
             UNION SELECT DISTINCT tenant FROM gateway_keys",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|row| Ok(sqlx::Row::try_get(row, 0)?)).collect()
    }

    /// A cheap round trip, for `/readyz`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

/// A unique-index violation (the topic index) becomes `TopicTaken`; other errors pass.
pub(crate) fn topic_conflict(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::TopicTaken,
        _ => StoreError::Database(err),
    }
}

/// A database URL with any password replaced, for messages and logs.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}
