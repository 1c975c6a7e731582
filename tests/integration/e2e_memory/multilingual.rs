//! Multilingual recall and precision: records and questions in English, Chinese and Russian.

use super::*;

/// The support knowledge of one tenant: four topics, each written in one language, and three
/// records about nothing a customer asks (shared with the SDK test, `tests/sdk/test_memory.py`).
fn support_records() -> Vec<Value> {
    serde_json::from_str(include_str!("../../data/support_records.json")).unwrap()
}

/// Queries a customer might send, in three languages, and the record that answers each.
const QUERIES: &[(&str, &str)] = &[
    ("Hi, my standing desk still hasn't arrived. When will it be delivered?", "conv-desk-delay"),
    ("我的升降桌怎么还没送到？什么时候能到货？", "conv-desk-delay"),
    ("Здравствуйте, мой стол до сих пор не доставили. Когда его привезут?", "conv-desk-delay"),
    ("I want to return the lamp I bought last week. How long does the refund take?", "sop-refund-zh"),
    ("我想退货，退款多久能到账？", "sop-refund-zh"),
    ("Я хочу вернуть товар. Как быстро мне вернут деньги?", "sop-refund-zh"),
    ("I forgot my password and can't log in to my account. How do I reset it?", "sop-password-ru"),
    ("我忘记密码了，登录不了账户，怎么重置？", "sop-password-ru"),
    ("Я забыл пароль и не могу войти в личный кабинет. Как его сбросить?", "sop-password-ru"),
    ("Which language should I use when replying to this customer?", "profile-li-wei"),
    ("这位客户希望我们用什么语言回复？", "profile-li-wei"),
    ("На каком языке лучше отвечать этому клиенту?", "profile-li-wei"),
];

/// What one support query got.
struct Outcome {
    query: &'static str,
    relevant: &'static str,
    /// The ids the upstream received in the block.
    got: BTreeSet<String>,
    /// Every record's similarity to the query, best first.
    scores: Vec<(String, f32)>,
}

/// Sends every query of `QUERIES` as customer u-789 of a support bot, against `support_records`,
/// and measures each query's similarities on the side.
async fn ask_the_support_queries() -> Vec<Outcome> {
    // The release memgate ships as the default (v4: compact lines, the standout cut), not the v1 the
    // other memory tests pin.
    let gate = Memgate::start(&CONFIG.replace("default_release = \"v1\"\n", ""));
    for record in support_records() {
        gate.remember(TENANT, &record).await;
    }
    let key = gate.key(TENANT, &["team:support"], &["assert_subject"]).await;
    let caller = json!({"scopes": ["team:support"], "subject": "u-789"});
    let mut outcomes = Vec::new();
    for (query, relevant) in QUERIES {
        let body = support_bot(query);
        let answer = gate.ask(&key, &[("x-memory-subject", "u-789")], &body).await;
        let got = injected_ids(&gate.last_upstream().await["body"]);
        answer.assert_ok(got.len(), query);
        let scores = similarity_table(&gate, TENANT, &body, caller.clone()).await;
        outcomes.push(Outcome { query, relevant, got, scores });
    }
    outcomes
}

/// The outcomes as a table, for failure messages and the test log.
fn similarity_report(outcomes: &[Outcome]) -> String {
    let mut report = String::from(
        "cosine to each record (default threshold, multilingual-e5-small, language centering):\n",
    );
    for o in outcomes {
        let row: Vec<String> = o.scores.iter().map(|(id, s)| format!("{id} {s:.3}")).collect();
        report.push_str(&format!(
            "{}\n    wanted {}; got {:?}\n    {}\n",
            o.query,
            o.relevant,
            o.got,
            row.join(", ")
        ));
    }
    report
}

/// The records no customer question is about.
const OFF_TOPIC: [&str; 3] = ["fact-party-zh", "fact-office-ru", "spec-grinder"];

/// Multilingual retrieval as the support bot sees it, through the default release (v4): a record
/// passes when its similarity stands out from the seven this customer may see, and the customer's
/// own records (the late desk, the profile) weigh 0.1 more. Measured with the int8 model, all 12
/// queries get exactly their record (docs/benchmarks.md, "Retrieval": 17 of 17 with the set's
/// two-record questions), the Russian question about the late desk included: its English record
/// scores 0.132, below two SOPs at 0.18, and the customer's own conversation summary outranks
/// them. Under v1's threshold alone that query got nothing, and "Which language should I use…"
/// also got the Chinese refund policy. The bar below allows one query off by an int8 model
/// quantized afresh on another machine (scripts/fetch-assets), whose scores move by ~0.01.
/// Without language centering the same sample gave 2 of 12 exact, and the office move, the staff
/// party and the grinder were injected for some queries: this test fails then.
#[tokio::test]
async fn queries_in_english_chinese_and_russian_get_their_record_and_no_off_topic_one() {
    let outcomes = ask_the_support_queries().await;
    let report = similarity_report(&outcomes);
    eprintln!("{report}");
    let off_topic: Vec<String> = outcomes
        .iter()
        .filter(|o| OFF_TOPIC.iter().any(|id| o.got.contains(*id)))
        .map(|o| format!("{}: got {:?}", o.query, o.got))
        .collect();
    assert!(off_topic.is_empty(), "off-topic records were injected:\n{}\n\n{report}", off_topic.join("\n"));
    let exact = outcomes.iter().filter(|o| o.got == set(&[o.relevant])).count();
    let found = outcomes.iter().filter(|o| o.got.contains(o.relevant)).count();
    assert_eq!(found, outcomes.len(), "{found} of {} queries got their record\n\n{report}", outcomes.len());
    assert!(exact >= 11, "{exact} of {} queries got exactly their record\n\n{report}", outcomes.len());
}
