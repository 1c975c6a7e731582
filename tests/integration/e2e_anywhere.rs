//! One binary, anywhere: the schemas and templates ship inside the binary, and the model
//! and ONNX Runtime are found by a documented search order (`src/assets.rs`), so `memgate serve`
//! runs from any directory with only the model folder configured, and says what is missing and
//! what fetches it when the model is nowhere.

use crate::support::{BIN, Proc, TempDir, client};
use serde_json::{Value, json};
use std::process::Command;

const ADMIN_TOKEN: &str = "anywhere-admin-token-0123456789";

fn model_dir() -> String {
    let dir = std::env::var("MEMGATE_MODEL_DIR")
        .unwrap_or_else(|_| format!("{}/.assets/models/multilingual-e5-small", env!("CARGO_MANIFEST_DIR")));
    std::fs::canonicalize(dir).unwrap().display().to_string()
}

/// The binary, from an empty directory, with no ORT_DYLIB_PATH and no config: only the model.
fn bare_command(cwd: &std::path::Path) -> Command {
    let mut command = Command::new(BIN);
    command.current_dir(cwd).env_remove("ORT_DYLIB_PATH").env_remove("MEMGATE_MODEL_DIR");
    command
}

#[tokio::test]
async fn the_binary_serves_from_any_directory_with_only_the_model_folder_configured() {
    let mock = Proc::mock(&[]);
    let cwd = TempDir::new("anywhere");
    let model = model_dir();
    let gateway = Proc::start_with(
        bare_command(&cwd.path),
        &["serve", "--listen", "127.0.0.1:0", "--upstream-url", &mock.base],
        &[("MEMGATE_MODEL_DIR", model.as_str()), ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN)],
    );
    let http = client();
    let record = json!({"type": "fact", "scope": ["public"], "aliases": ["ORD-4412"],
        "content": {"statement": "Order ORD-4412 ships from the Hamburg warehouse."}});
    let created = http
        .post(gateway.url("/admin/v1/memories"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&record)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    let answer = http
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", "sk-ant-anything")
        .json(&json!({"model": "claude-test", "max_tokens": 8,
            "messages": [{"role": "user", "content": "Where does ORD-4412 ship from?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // The default release's built-in template rendered the block (no templates/ folder anywhere near).
    let sent: Vec<Value> = mock.recorded().await;
    let body = sent.iter().rev().find(|r| r["path"] == "/v1/messages").unwrap()["body"].to_string();
    assert!(body.contains("MEMORY_CONTEXT version=\\\"v4\\\"") && body.contains("Hamburg"), "{body}");
    // The SQLite file landed in the working directory.
    assert!(cwd.path.join("memgate.db").exists());
}

#[test]
fn without_a_model_anywhere_the_error_says_where_it_looked_and_what_fetches_it() {
    // A copy of the binary away from the checkout, so no `.assets` is found above it.
    let dir = TempDir::new("no-model");
    let bin = dir.path.join("memgate");
    std::fs::copy(BIN, &bin).unwrap();
    let output = Command::new(&bin)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(&dir.path)
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("MEMGATE_MODEL_DIR")
        .env("HOME", &dir.path)
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("scripts/fetch-assets") && stderr.contains("MEMGATE_MODEL_DIR"), "{stderr}");
    assert!(stderr.contains(".local/share/memgate"), "the search order is named: {stderr}");
}

/// The commands that neither serve nor embed open the database alone. Where no model is
/// installed (a bare copy of the binary, as above), `key create` issues a key and `memory export`
/// prints the records a gateway stored earlier in the same database; before, both built the whole
/// gateway and failed on the missing model.
#[tokio::test]
async fn key_create_and_memory_export_run_without_the_model() {
    let dir = TempDir::new("cli-no-model");
    let db = format!("sqlite://{}/cli.db?mode=rwc", dir.path.display());
    // A gateway with the model stores a record, then stops.
    let mock = Proc::mock(&[]);
    let mut gateway = Proc::start_with(
        bare_command(&dir.path),
        &["serve", "--listen", "127.0.0.1:0", "--upstream-url", &mock.base],
        &[
            ("MEMGATE_MODEL_DIR", model_dir().as_str()),
            ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ("MEMGATE_DATABASE_URL", &db),
        ],
    );
    let record = json!({"id": "fact-hamburg", "type": "fact", "scope": ["public"],
        "content": {"statement": "Order ORD-4412 ships from the Hamburg warehouse."}});
    let created = client()
        .post(gateway.url("/admin/v1/memories"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&record)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    gateway.terminate();
    assert!(gateway.wait_exit(std::time::Duration::from_secs(30)).is_some());

    let bin = dir.path.join("memgate");
    std::fs::copy(crate::support::gateway_bin(), &bin).unwrap();
    let run = |args: &[&str]| {
        Command::new(&bin)
            .args(args)
            .current_dir(&dir.path)
            .env_remove("ORT_DYLIB_PATH")
            .env_remove("MEMGATE_MODEL_DIR")
            .env("HOME", &dir.path)
            .env_remove("XDG_DATA_HOME")
            .env("MEMGATE_DATABASE_URL", &db)
            .output()
            .unwrap()
    };
    let issued = run(&["key", "create", "--name", "ops", "--scope", "team:support"]);
    assert!(issued.status.success(), "{}", String::from_utf8_lossy(&issued.stderr));
    let key: Value = serde_json::from_slice(&issued.stdout).unwrap();
    assert!(key["key"].as_str().unwrap().starts_with("mgk_"), "{key}");
    assert_eq!(key["scopes"], json!(["team:support"]));

    let exported = run(&["memory", "export"]);
    assert!(exported.status.success(), "{}", String::from_utf8_lossy(&exported.stderr));
    let lines: Vec<Value> =
        String::from_utf8_lossy(&exported.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["id"], "fact-hamburg");
    assert_eq!(lines[0]["content"], record["content"]);
    // Importing embeds, so it is the memory command that still needs the model, and says so.
    let import = run(&["memory", "import", "-"]);
    assert!(!import.status.success());
    assert!(String::from_utf8_lossy(&import.stderr).contains("scripts/fetch-assets"));
}
