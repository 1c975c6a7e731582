//! A rolling restart behind a load balancer (Debian's nginx): every replica in turn is sent
//! SIGTERM, drains (`/readyz` 503, every answer closing its connection), finishes its streams
//! and exits; a new one starts on its port. A load running through nginx all the while sees no
//! failed request, and every stream it opened ends with `message_stop`.

use super::{fleet_config, free_port, replica};
use crate::e2e_identity::issue_key;
use crate::support::{Proc, TempDir, TestDb, client};
use futures_util::StreamExt;
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// nginx in the foreground in front of `ports`, as deploy/nginx.conf sets it up: buffering off
/// for answers (SSE flows), keep-alive to the replicas, and a request that could not reach one
/// replica (connection refused or reset before it was sent) tried on the next.
struct Nginx {
    port: u16,
    child: Child,
    _dir: TempDir,
}

impl Nginx {
    fn start(ports: &[u16]) -> Nginx {
        let dir = TempDir::new("nginx");
        let port = free_port();
        let servers: String =
            ports.iter().map(|p| format!("        server 127.0.0.1:{p} max_fails=0;\n")).collect();
        let prefix = dir.path.display();
        let conf = format!(
            "worker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
             http {{\n    access_log off;\n    client_body_temp_path {prefix}/body;\n    proxy_temp_path {prefix}/proxy;\n\
                 fastcgi_temp_path {prefix}/fastcgi;\n    uwsgi_temp_path {prefix}/uwsgi;\n    scgi_temp_path {prefix}/scgi;\n\
                 upstream memgate {{\n{servers}        keepalive 32;\n    }}\n\
                 server {{\n        listen 127.0.0.1:{port};\n        location / {{\n            proxy_pass http://memgate;\n\
                     proxy_http_version 1.1;\n            proxy_set_header Connection \"\";\n            proxy_buffering off;\n\
                     proxy_read_timeout 120s;\n            proxy_next_upstream error timeout;\n            proxy_next_upstream_tries 3;\n        }}\n    }}\n}}\n"
        );
        std::fs::write(dir.path.join("nginx.conf"), conf).unwrap();
        let child = Command::new("nginx")
            .args([
                "-p",
                &prefix.to_string(),
                "-c",
                &format!("{prefix}/nginx.conf"),
                "-e",
                &format!("{prefix}/error.log"),
                "-g",
                "daemon off;",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx (apt-get install nginx; scripts/test-tools installs it)");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "nginx did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx { port, child, _dir: dir }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_rolling_restart_behind_nginx_fails_no_request_and_cuts_no_stream() {
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&["--delta-interval-ms", "100"]);
    let (_dir, config) = fleet_config("");
    let redis = "redis://127.0.0.1:6379";
    let ports = [free_port(), free_port(), free_port()];
    let mut replicas: Vec<Proc> = ports.iter().map(|p| replica(&mock, &db.url, redis, &config, *p)).collect();
    let nginx = Nginx::start(&ports);
    let (key, _) =
        issue_key(&replicas[0], "default", json!({"name": "load", "rate_limit_per_minute": 1000000})).await;

    // The load: four clients, each sending one request after the other through nginx, every
    // third one a stream (each ~0.5 s long), until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut load = Vec::new();
    for worker in 0..4 {
        let (stop, sent, failed, failures) = (stop.clone(), sent.clone(), failed.clone(), failures.clone());
        let (url, key) = (nginx.url("/v1/messages"), key.clone());
        load.push(tokio::spawn(async move {
            let http = client();
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let stream = (n + worker) % 3 == 0;
                let body = json!({"model": "claude-test", "max_tokens": 16, "stream": stream,
                    "messages": [{"role": "user", "content": format!("question {worker}-{n}")}]});
                let outcome = async {
                    let response = http
                        .post(&url)
                        .header("x-api-key", &key)
                        .json(&body)
                        .send()
                        .await
                        .map_err(|e| e.to_string())?;
                    let status = response.status();
                    if !status.is_success() {
                        return Err(format!("{status}: {}", response.text().await.unwrap_or_default()));
                    }
                    let mut text = String::new();
                    let mut chunks = response.bytes_stream();
                    while let Some(chunk) = chunks.next().await {
                        text.push_str(&String::from_utf8_lossy(&chunk.map_err(|e| format!("cut: {e}"))?));
                    }
                    if stream && !text.contains("event: message_stop") {
                        return Err(format!("a stream ended without message_stop: {text}"));
                    }
                    Ok(())
                }
                .await;
                sent.fetch_add(1, Ordering::SeqCst);
                if let Err(why) = outcome {
                    failed.fetch_add(1, Ordering::SeqCst);
                    failures.lock().unwrap().push(why);
                }
            }
        }));
    }

    for i in 0..replicas.len() {
        let before = sent.load(Ordering::SeqCst);
        replicas[i].terminate();
        let status =
            replicas[i].wait_exit(Duration::from_secs(30)).expect("a replica did not exit after draining");
        assert!(status.success(), "{status:?}");
        replicas[i] = replica(&mock, &db.url, redis, &config, ports[i]);
        crate::support::eventually(
            Duration::from_secs(30),
            "the load to reach the restarted replica",
            || async { (sent.load(Ordering::SeqCst) > before + 20).then_some(()) },
        )
        .await;
    }
    stop.store(true, Ordering::SeqCst);
    for worker in load {
        worker.await.unwrap();
    }
    let failures = failures.lock().unwrap();
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "{} of {} requests failed: {:?}",
        failures.len(),
        sent.load(Ordering::SeqCst),
        &failures[..failures.len().min(5)]
    );
    assert!(sent.load(Ordering::SeqCst) > 60, "too little load to show anything");
}
