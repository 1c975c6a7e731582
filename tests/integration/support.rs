//! Shared test plumbing: real `memgate` processes on port 0 and a client for them.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_memgate");

/// The gateway under test: this build's binary, or another one named by `MEMGATE_TEST_BIN` (to
/// show that a test fails on an older memgate; the stand-in upstream stays this build's).
pub fn gateway_bin() -> String {
    std::env::var("MEMGATE_TEST_BIN").unwrap_or_else(|_| BIN.to_owned())
}

/// A running `memgate` process (gateway or mock), killed when dropped.
pub struct Proc {
    child: Child,
    pub base: String,
    stderr: Arc<Mutex<String>>,
    /// The database a gateway uses, removed with it.
    db: Option<TestDb>,
    /// Further "listening on" lines (the admin listener's).
    more_addrs: Mutex<mpsc::Receiver<String>>,
}

impl Proc {
    /// Starts `memgate <args>` and waits for its "listening on http://ADDR" line.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Proc {
        let bin = if args.first() == Some(&"mock-upstream") { BIN.to_owned() } else { gateway_bin() };
        Proc::start_with(Command::new(bin), args, env)
    }

    /// Starts `command` (a memgate binary, set up by the caller: another working directory, say)
    /// with `args` and `env`, and waits for its "listening on" line.
    pub fn start_with(mut command: Command, args: &[&str], env: &[(&str, &str)]) -> Proc {
        command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for var in [
            "MEMGATE_LISTEN",
            "MEMGATE_UPSTREAM_URL",
            "ANTHROPIC_API_KEY",
            "MEMGATE_AUTH_MODE",
            "MEMGATE_DATABASE_URL",
            "MEMGATE_ADMIN_TOKEN",
            "MEMGATE_ADMIN_LISTEN",
            "MEMGATE_LOG_FORMAT",
            "MEMGATE_LOG_LEVEL",
        ] {
            command.env_remove(var);
        }
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("spawn memgate");

        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });

        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some((_, addr)) = line.split_once("listening on ") {
                    let _ = tx.send(addr.trim().to_owned());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(base) => Proc { child, base, stderr, db: None, more_addrs: Mutex::new(rx) },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("memgate {args:?} did not start; stderr:\n{}", stderr.lock().unwrap());
            }
        }
    }

    pub fn mock(extra: &[&str]) -> Proc {
        let mut args = vec!["mock-upstream", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Proc::start(&args, &[])
    }

    /// A gateway in front of `upstream`, on a SQLite database of its own unless `extra` names one.
    pub fn gateway(upstream: &Proc, extra: &[&str], env: &[(&str, &str)]) -> Proc {
        Proc::gateway_to(&upstream.base, extra, env)
    }

    pub fn gateway_to(upstream_url: &str, extra: &[&str], env: &[(&str, &str)]) -> Proc {
        let db = TestDb::sqlite();
        let mut args = vec!["serve", "--upstream-url", upstream_url];
        if !extra.contains(&"--listen") {
            args.extend_from_slice(&["--listen", "127.0.0.1:0"]);
        }
        if !extra.contains(&"--database-url") {
            args.extend_from_slice(&["--database-url", db.url.as_str()]);
        }
        // The default 50 ms memory budget is for release builds on a quiet machine; a debug build
        // on a loaded 2-core CI machine can need more, and a degraded answer would make tests
        // about memory flaky. Tests of the budget itself pass their own --config.
        let relaxed = db.dir().map(|dir| dir.join("relaxed.toml"));
        if let (false, Some(path)) = (extra.contains(&"--config"), &relaxed) {
            std::fs::write(path, "[memory]\nfunnel_timeout_ms = 5000\ndefault_release = \"v1\"\n").unwrap();
            args.extend_from_slice(&["--config", path.to_str().unwrap()]);
        }
        args.extend_from_slice(extra);
        let mut proc = Proc::start(&args, env);
        proc.db = Some(db);
        proc
    }

    /// The next address the process announced after its first (`admin.listen`'s).
    pub fn next_addr(&self) -> String {
        self.more_addrs.lock().unwrap().recv_timeout(Duration::from_secs(10)).expect("a second listener")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit on its own, up to `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// What the mock has recorded.
    pub async fn recorded(&self) -> Vec<Value> {
        let body: Value =
            client().get(self.url("/_mock/requests")).send().await.unwrap().json().await.unwrap();
        body["requests"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap()
}

/// Polls `check` until it returns Some, or panics after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn messages_body(model: &str, stream: bool) -> Value {
    serde_json::json!({
        "model": model,
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
    })
}

/// Replaces the mock's per-request sequence numbers (`req_mock_12`), which differ between two
/// otherwise identical answers, so answers can be compared whole.
pub fn without_request_seq(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("req_mock_") {
        out.push_str(&rest[..at + "req_mock_".len()]);
        rest = rest[at + "req_mock_".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('N');
    }
    out.push_str(rest);
    out
}

/// A database of its own for one test: a SQLite file in a temp dir, or a fresh PostgreSQL
/// database (dropped, with its connections, when the test ends).
pub struct TestDb {
    pub url: String,
    pg_name: Option<String>,
    _dir: Option<TempDir>,
}

/// Where the test suite may create databases.
pub fn postgres_admin_url() -> String {
    std::env::var("MEMGATE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

impl TestDb {
    /// The temp directory of a SQLite test database.
    pub fn dir(&self) -> Option<&std::path::Path> {
        self._dir.as_ref().map(|d| d.path.as_path())
    }

    pub fn sqlite() -> TestDb {
        let dir = TempDir::new("sqlite");
        TestDb { url: format!("sqlite://{}/memgate.db", dir.path.display()), pg_name: None, _dir: Some(dir) }
    }

    pub async fn postgres() -> TestDb {
        sqlx::any::install_default_drivers();
        let name = format!("memgate_test_{}", uuid::Uuid::new_v4().simple());
        let admin = postgres_admin_url();
        let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&admin)
            .await
            .expect("PostgreSQL must be running for the store tests (scripts/services starts it)");
        sqlx::Executor::execute(&mut conn, sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap();
        let base = admin.rsplit_once('/').map(|(b, _)| b.to_owned()).unwrap();
        TestDb { url: format!("{base}/{name}"), pg_name: Some(name), _dir: None }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(name) = &self.pg_name {
            let _ = Command::new("psql")
                .args([&postgres_admin_url(), "-qc", &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A temporary directory, removed when dropped.
pub struct TempDir {
    pub path: std::path::PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("memgate-{label}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The real embedding model from .assets/ (scripts/fetch-assets puts it there).
pub fn embedder() -> memgate::embed::Embedder {
    let config = memgate::embed::EmbedConfig::default_for(std::path::Path::new(".assets"));
    memgate::embed::Embedder::load(&config).expect("the embedding model; run scripts/fetch-assets")
}

/// A `MemoryService` on the migrated store at `url`, with the built-in schemas, 64 KiB records,
/// the real model and a 0.95 near-duplicate threshold.
pub async fn memory_service(url: &str) -> memgate::memory::MemoryService {
    let store = memgate::store::Store::connect(url).await.unwrap();
    store.migrate().await.unwrap();
    memgate::memory::MemoryService::new(
        store,
        std::sync::Arc::new(memgate::memory::checks::schemas::SchemaSet::load(None).unwrap()),
        64 * 1024,
        embedder(),
        0.95,
    )
}

/// Runs each listed body on SQLite and on PostgreSQL: `on_both_stores!(a_test, another)` over
/// `async fn a_test(db: TestDb)`, one `sqlite::a_test` and one `postgres::a_test` each.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name(crate::support::TestDb::sqlite()).await })*
        }
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name(crate::support::TestDb::postgres().await).await })*
        }
    };
}
pub(crate) use on_both_stores;
