//! The console's metrics history as stored (`metric_buckets`): rows per tenant, release, time
//! bucket and replica, whose figures are added to (never replaced), and the two sums the charts
//! read. What goes into a row, and why the rows are shaped so, is `console::history`'s.
//!
//! A row's figures are 12 counters and a 40-bin latency histogram (`lat_00`…`lat_39`), all
//! BIGINT, all summed alike.

use super::{Store, StoreError};
use sqlx::Row;
use std::sync::LazyLock;

/// The scalar counter columns, in the order of `BucketFigures::scalars`.
pub const COUNTER_COLUMNS: [&str; 12] = [
    "calls",
    "err_upstream",
    "err_memory",
    "err_rate_limited",
    "err_client",
    "err_internal",
    "mem_ok",
    "mem_skipped",
    "mem_degraded",
    "injected_records",
    "injected_tokens",
    "visible_tokens",
];

/// The latency histogram's columns: `lat_00` … `lat_39`.
pub const LATENCY_COLUMNS: usize = 40;

/// Every counter column: the scalars, then `lat_00` … `lat_39`.
static VALUE_COLUMNS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut columns: Vec<String> = COUNTER_COLUMNS.iter().map(|c| (*c).to_owned()).collect();
    columns.extend((0..LATENCY_COLUMNS).map(|i| format!("lat_{i:02}")));
    columns
});

/// `CAST(SUM(c) AS BIGINT) AS c, …` for every counter column (PostgreSQL's SUM of a BIGINT is a
/// NUMERIC, which the `Any` driver does not read as an integer).
static SUMS: LazyLock<String> = LazyLock::new(|| {
    VALUE_COLUMNS.iter().map(|c| format!("CAST(SUM({c}) AS BIGINT) AS {c}")).collect::<Vec<_>>().join(", ")
});

/// A row's figures, or a sum of rows': the counters in `COUNTER_COLUMNS` order and the histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketFigures {
    pub scalars: [u64; 12],
    pub latency: [u64; LATENCY_COLUMNS],
}

/// One row to add to: its key and figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketRow<'a> {
    pub tenant: &'a str,
    pub release: &'a str,
    pub bucket_secs: i64,
    pub bucket_start: i64,
    /// The replica's name for a minute row; `""` for a 5-minute row every replica adds into.
    pub replica: &'a str,
    pub figures: BucketFigures,
}

/// Rows per INSERT: 100 × 57 bound values stays under SQLite's and PostgreSQL's limits.
const ROWS_PER_STATEMENT: usize = 100;

/// `INSERT … VALUES (…), … ON CONFLICT (key) DO UPDATE SET c = metric_buckets.c + excluded.c, …`
/// for `rows` rows. Built from the fixed column list only; every value is a bound parameter.
fn upsert_sql(rows: usize) -> String {
    let columns = VALUE_COLUMNS.len() + 5;
    let mut sql = format!(
        "INSERT INTO metric_buckets (tenant, release, bucket_secs, bucket_start, replica, {}) VALUES ",
        VALUE_COLUMNS.join(", ")
    );
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..columns {
            if column > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${}", row * columns + column + 1));
        }
        sql.push(')');
    }
    sql.push_str(" ON CONFLICT (tenant, bucket_secs, bucket_start, release, replica) DO UPDATE SET ");
    let updates: Vec<String> =
        VALUE_COLUMNS.iter().map(|c| format!("{c} = metric_buckets.{c} + excluded.{c}")).collect();
    sql.push_str(&updates.join(", "));
    sql
}

/// The figures of `row` from column `first` on (`COUNTER_COLUMNS`, then the histogram).
fn figures_from_row(row: &sqlx::any::AnyRow, first: usize) -> Result<BucketFigures, StoreError> {
    let get = |i: usize| -> Result<u64, StoreError> {
        let value: Option<i64> = row.try_get(first + i)?;
        Ok(u64::try_from(value.unwrap_or(0)).unwrap_or(0))
    };
    let mut figures = BucketFigures { scalars: [0; 12], latency: [0; LATENCY_COLUMNS] };
    for (i, slot) in figures.scalars.iter_mut().enumerate() {
        *slot = get(i)?;
    }
    for (i, slot) in figures.latency.iter_mut().enumerate() {
        *slot = get(COUNTER_COLUMNS.len() + i)?;
    }
    Ok(figures)
}

impl Store {
    /// Adds each row's figures to its row (made at zero if missing), in the order given, in one
    /// transaction: nothing is written if it fails. Returns how many rows.
    pub async fn add_to_metric_buckets(&self, rows: &[BucketRow<'_>]) -> Result<usize, StoreError> {
        let mut tx = self.begin_write().await?;
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let sql = upsert_sql(chunk.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for row in chunk {
                query = query
                    .bind(row.tenant.to_owned())
                    .bind(row.release.to_owned())
                    .bind(row.bucket_secs)
                    .bind(row.bucket_start)
                    .bind(row.replica.to_owned());
                for value in row.figures.scalars.into_iter().chain(row.figures.latency) {
                    query = query.bind(i64::try_from(value).unwrap_or(i64::MAX));
                }
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(rows.len())
    }

    /// Deletes the rows of `bucket_secs` buckets that start before `before_ms`; returns how many.
    pub async fn delete_metric_buckets_before(
        &self,
        bucket_secs: i64,
        before_ms: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM metric_buckets WHERE bucket_secs = $1 AND bucket_start < $2")
            .bind(bucket_secs)
            .bind(before_ms)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }

    /// The tenant's `bucket_secs` buckets starting in `[from_ms, to_ms)`, of one release or of
    /// all, summed over releases and replicas per bucket start. Starts without rows are absent.
    pub async fn metric_sums_by_start(
        &self,
        tenant: &str,
        bucket_secs: i64,
        (from_ms, to_ms): (i64, i64),
        release: Option<&str>,
    ) -> Result<Vec<(i64, BucketFigures)>, StoreError> {
        let release_filter = if release.is_some() { " AND release = $5" } else { "" };
        let sql = format!(
            "SELECT bucket_start, {} FROM metric_buckets \
             WHERE tenant = $1 AND bucket_secs = $2 AND bucket_start >= $3 AND bucket_start < $4{release_filter} \
             GROUP BY bucket_start",
            *SUMS
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.to_owned())
            .bind(bucket_secs)
            .bind(from_ms)
            .bind(to_ms);
        if let Some(release) = release {
            query = query.bind(release.to_owned());
        }
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter().map(|row| Ok((row.try_get(0)?, figures_from_row(row, 1)?))).collect()
    }

    /// The tenant's `bucket_secs` buckets starting in `[from_ms, to_ms)`, summed per release over
    /// buckets and replicas. Releases without rows are absent.
    pub async fn metric_sums_by_release(
        &self,
        tenant: &str,
        bucket_secs: i64,
        (from_ms, to_ms): (i64, i64),
    ) -> Result<Vec<(String, BucketFigures)>, StoreError> {
        let sql = format!(
            "SELECT release, {} FROM metric_buckets \
             WHERE tenant = $1 AND bucket_secs = $2 AND bucket_start >= $3 AND bucket_start < $4 \
             GROUP BY release",
            *SUMS
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.to_owned())
            .bind(bucket_secs)
            .bind(from_ms)
            .bind(to_ms)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(|row| Ok((row.try_get(0)?, figures_from_row(row, 1)?))).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_upsert_binds_every_value() {
        let sql = upsert_sql(2);
        assert!(sql.contains("$114)"), "{sql}");
        assert!(!sql.contains("$115"));
        assert!(sql.contains("lat_39 = metric_buckets.lat_39 + excluded.lat_39"));
    }
}
