//! What `explain` tells about a request: the person's words it matched (not the
//! harness text around them), and, for every record it would inject, what each ranking gave it —
//! the meaning's similarity and, on a hybrid release, the words' BM25 — so an operator can see
//! why a record is there.

use super::*;

#[tokio::test]
async fn explain_shows_the_matched_words_and_each_rankings_part_for_every_survivor() {
    // A `dense` release beside the default (hybrid) v1, with templates of its own name.
    let dir = TempDir::new("ranking-templates");
    let v1 = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/v1");
    std::fs::create_dir_all(dir.path.join("dense")).unwrap();
    for file in ["memory.j2", "contract.txt"] {
        std::fs::copy(v1.join(file), dir.path.join("dense").join(file)).unwrap();
    }
    let toml = format!(
        "[memory]\nfunnel_timeout_ms = 10000\ndefault_release = \"v1\"\ntemplates_dir = \"{}\"\n\n[releases.dense]\nschema_versions = [\"v1\"]\nretrieval = \"dense\"\n",
        dir.path.display()
    );
    let memgate = Memgate::start(&toml);
    let refunds = memgate
        .remember(TENANT, &json!({"type": "fact", "scope": ["public"],
            "content": {"statement": "Custom-made sofas cannot be refunded; we repair or exchange them instead."}}))
        .await;
    memgate
        .remember(
            TENANT,
            &json!({"type": "fact", "scope": ["public"],
            "content": {"statement": "The coffee grinder has forty grind settings."}}),
        )
        .await;
    // A harness-wrapped question: only the person's words are matched.
    let request = json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>The date is Monday. Skills: code-review, git-commit.</system-reminder>"},
        {"type": "text", "text": "Can I get a refund for my custom-made sofa?"}
    ]}]});
    let explained = eventually(Duration::from_secs(30), "the records to be embedded", || async {
        let answer = memgate.explain(TENANT, &request, json!({}), None).await;
        (answer["injected"].as_array().is_some_and(|ids| ids.iter().any(|id| id == refunds.as_str())))
            .then_some(answer)
    })
    .await;
    assert_eq!(explained["query"]["text"], "Can I get a refund for my custom-made sofa?");
    assert_eq!(explained["query"]["from"], json!(["messages.0.content.1"]));
    assert_eq!(explained["query"]["left_out"]["harness_blocks"], 1);
    let ranked = explained["trace"]["ranked"].as_array().unwrap();
    let injected: BTreeSet<&str> =
        explained["injected"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let ranked_ids: BTreeSet<&str> = ranked.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ranked_ids, injected, "every survivor is explained: {ranked:?}");
    let sofa = ranked.iter().find(|r| r["id"] == refunds.as_str()).unwrap();
    assert!(sofa["similarity"].as_f64().unwrap() > 0.0, "{sofa}");
    let words = &sofa["lexical"];
    assert!(words["rank"] == 1 && words["normalized"].as_f64().unwrap() > 0.0, "{sofa}");
    let fused = sofa["similarity"].as_f64().unwrap() + words["normalized"].as_f64().unwrap();
    assert!(
        (sofa["score"].as_f64().unwrap() - fused).abs() < 1e-4,
        "score = similarity + normalized BM25: {sofa}"
    );

    // A dense release ranks by meaning alone: no word part.
    let dense = memgate.explain(TENANT, &request, json!({}), Some("dense")).await;
    for survivor in dense["trace"]["ranked"].as_array().unwrap() {
        assert!(survivor.get("lexical").is_none(), "{survivor}");
        assert_eq!(survivor["score"], survivor["similarity"]);
    }
}
