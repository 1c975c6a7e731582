//! A fleet on this machine: three memgate processes on loopback sharing PostgreSQL and
//! Redis, which the tests stop and start again under them — private instances of both, so that
//! the rest of the suite, which shares the machine's own, never notices.

mod faults;
mod rolling;

use crate::e2e_identity::{ADMIN_TOKEN, UPSTREAM_KEY};
use crate::support::{Proc, TempDir, client};
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL cluster of this test's own, run as the `postgres` user, in a temp dir.
pub struct PrivatePostgres {
    pub port: u16,
    data: std::path::PathBuf,
    _dir: TempDir,
}

impl PrivatePostgres {
    pub fn start() -> PrivatePostgres {
        let dir = TempDir::new("pg");
        let data = dir.path.join("data");
        run(Command::new("chown").args(["-R", "postgres:postgres", dir.path.to_str().unwrap()]));
        run(Command::new("runuser").args(["-u", "postgres", "--"]).arg(format!("{PG_BIN}/initdb")).args([
            "-D",
            data.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        ]));
        let pg = PrivatePostgres { port: free_port(), data, _dir: dir };
        pg.resume();
        run(Command::new("psql").args([&pg.admin_url(), "-qc", "CREATE DATABASE memgate"]));
        pg
    }

    fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/memgate", self.port)
    }

    /// Starts (again) and waits until it accepts connections.
    pub fn resume(&self) {
        let options =
            format!("-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off", self.port, self.data.display());
        run(Command::new("runuser").args(["-u", "postgres", "--"]).arg(format!("{PG_BIN}/pg_ctl")).args([
            "-D",
            self.data.to_str().unwrap(),
            "-o",
            &options,
            "-l",
            self.data.join("log").to_str().unwrap(),
            "-w",
            "start",
        ]));
    }

    /// Stops it (fast: open connections are cut), as a crash or a failover would.
    pub fn stop(&self) {
        run(Command::new("runuser").args(["-u", "postgres", "--"]).arg(format!("{PG_BIN}/pg_ctl")).args([
            "-D",
            self.data.to_str().unwrap(),
            "-m",
            "fast",
            "-w",
            "stop",
        ]));
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(format!("{PG_BIN}/pg_ctl"))
            .args(["-D", self.data.to_str().unwrap(), "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A Redis server of this test's own; `stop` and `resume` keep its port.
pub struct PrivateRedis {
    pub port: u16,
    child: Option<Child>,
}

impl PrivateRedis {
    pub fn start() -> PrivateRedis {
        let mut redis = PrivateRedis { port: free_port(), child: None };
        redis.resume();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn resume(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "redis did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(output.status.success(), "{command:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// A replica of the fleet: managed mode, the shared database and Redis, on `port` (0: any).
pub fn replica(mock: &Proc, db_url: &str, redis_url: &str, config: &str, port: u16) -> Proc {
    let listen = format!("127.0.0.1:{port}");
    Proc::gateway(
        mock,
        &["--auth-mode", "managed", "--listen", &listen, "--database-url", db_url, "--config", config],
        &[
            ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ("ANTHROPIC_API_KEY", UPSTREAM_KEY),
            ("MEMGATE_REDIS_URL", redis_url),
        ],
    )
}

/// The fleet's config file: its own Redis key prefix.
pub fn fleet_config(extra: &str) -> (TempDir, String) {
    let dir = TempDir::new("fleet-config");
    let prefix = format!("memgate-fleet-{}", uuid::Uuid::new_v4().simple());
    let path = dir.path.join("memgate.toml");
    std::fs::write(
        &path,
        format!("[memory]\nfunnel_timeout_ms = 10000\ndefault_release = \"v1\"\n[redis]\nkey_prefix = \"{prefix}\"\n[shutdown]\ndrain_delay_ms = 1500\n{extra}"),
    )
    .unwrap();
    let path = path.to_str().unwrap().to_owned();
    (dir, path)
}

/// An admin call; its status and JSON.
pub async fn admin(
    gateway: &Proc,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut request =
        client().request(method, gateway.url(&format!("/admin/v1{path}"))).bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}
