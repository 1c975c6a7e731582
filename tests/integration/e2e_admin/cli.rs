//! The CLI.

use super::transfer::seed_varied_records;
use super::*;

fn cli(args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new(BIN);
    command.args(args);
    for var in [
        "MEMGATE_DATABASE_URL",
        "MEMGATE_ADMIN_TOKEN",
        "MEMGATE_UPSTREAM_URL",
        "MEMGATE_LISTEN",
        "MEMGATE_AUTH_MODE",
        "ANTHROPIC_API_KEY",
        "MEMGATE_LOG_FORMAT",
        "MEMGATE_LOG_LEVEL",
    ] {
        command.env_remove(var);
    }
    command.output().unwrap()
}

fn cli_ok(args: &[&str]) -> String {
    let output = cli(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "memgate {args:?} failed: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn cli_export_and_import_round_trip_records_between_databases() {
    let db_a = TestDb::sqlite();
    let source = Admin::start_with(&["--database-url", &db_a.url], &[]);
    let ids = seed_varied_records(&source).await;
    let over_http = source.export(Some("acme"), "").await;

    let exported = cli_ok(&["memory", "export", "--tenant", "acme", "--database-url", &db_a.url]);
    assert_eq!(exported, over_http, "the CLI and the API export differently");
    let with_vectors =
        cli_ok(&["memory", "export", "--tenant", "acme", "--embeddings", "--database-url", &db_a.url]);
    assert_eq!(with_vectors, source.export(Some("acme"), "?embeddings=true").await);
    assert!(with_vectors.contains("\"embedding\":{\"model\":"), "{with_vectors}");
    assert_eq!(export_ids(&exported), ids.iter().cloned().collect());
    let scoped =
        cli_ok(&["memory", "export", "--tenant", "acme", "--scope", "public", "--database-url", &db_a.url]);
    assert_eq!(scoped, source.export(Some("acme"), "?scope=public").await);
    assert_eq!(scoped.lines().count(), 2);

    let dir = TempDir::new("cli-import");
    let file = dir.path.join("acme.jsonl");
    std::fs::write(&file, &exported).unwrap();
    let file = file.to_str().unwrap();
    let db_b = TestDb::sqlite();

    let preview: Value = serde_json::from_str(&cli_ok(&[
        "memory",
        "import",
        file,
        "--dry-run",
        "--tenant",
        "acme",
        "--database-url",
        &db_b.url,
    ]))
    .unwrap();
    assert_eq!(preview["counts"], json!({"new": ids.len(), "existing": 0, "invalid": 0}), "{preview}");
    assert_eq!(preview["applied"], false);
    assert_eq!(cli_ok(&["memory", "export", "--tenant", "acme", "--database-url", &db_b.url]), "");

    let imported = cli(&["memory", "import", file, "--tenant", "acme", "--database-url", &db_b.url]);
    let stderr = String::from_utf8_lossy(&imported.stderr);
    assert!(imported.status.success(), "{stderr}");
    // The command returns once the records are findable by meaning, and shows its progress.
    assert!(stderr.contains("embedding [") && stderr.contains("ready for semantic search"), "{stderr}");
    let report: Value = serde_json::from_slice(&imported.stdout).unwrap();
    assert_eq!(report["applied"], true, "{report}");
    assert!(report["import_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(cli_ok(&["memory", "export", "--tenant", "acme", "--database-url", &db_b.url]), exported);
    assert_eq!(
        cli_ok(&["memory", "export", "--database-url", &db_b.url]),
        "",
        "imported into the default tenant"
    );

    // The imported records serve over HTTP from the second database, embedded already.
    let target = Admin::start_with(&["--database-url", &db_b.url], &[]);
    assert_eq!(target.export(Some("acme"), "").await, exported);
    let import_id = report["import_id"].as_str().unwrap();
    let progress = send(target.req(Method::GET, &format!("/imports/{import_id}"), Some("acme"))).await;
    let progress = progress.expect(200, "import progress").clone();
    assert_eq!(progress["state"], "ready", "{progress}");
    assert_eq!(progress["embedded"], progress["present"], "{progress}");
    // 6 records, of which one paused and one archived: 4 to embed.
    assert_eq!((progress["added"].as_i64(), progress["present"].as_i64()), (Some(6), Some(4)), "{progress}");
    let history = target.history(Some("acme"), "mem-cust-1").await;
    let change = &history.expect(200, "history")["data"][0];
    assert_eq!((change["action"].as_str(), change["actor"].as_str()), (Some("import"), Some("cli")));

    // A file with a bad line imports nothing and fails.
    let bad = dir.path.join("bad.jsonl");
    std::fs::write(&bad, format!("{}\nnot json\n", fact("fine", &["public"]))).unwrap();
    let output =
        cli(&["memory", "import", bad.to_str().unwrap(), "--tenant", "other", "--database-url", &db_b.url]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("invalid line"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(target.export(Some("other"), "").await, "");
}
