//! Property tests with hostile generated input, for everything that reads untrusted bytes: the
//! Messages body checks, placement and query extraction, the secret scanner, record envelopes (the
//! admin API and every import line), and both JSON merge patches. The properties are the
//! promises to a client: no input panics, a refusal is an error value, and what is accepted
//! comes out well-formed.
//!
//! Each property runs `CASES` generated cases per test run (a few seconds in all). A failing case
//! is shrunk and stored by proptest in its regressions file (`proptest-regressions/`), which is committed and
//! replayed first on every later run; cases found before this module existed (a long run of
//! blanks after `password`) live as named tests beside their code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use memgate::body::check_messages_request;
use memgate::inject::{Placement, inject};
use memgate::memory::checks::envelope::{self, Rules};
use memgate::memory::checks::schemas::SchemaSet;
use memgate::memory::checks::secrets;
use memgate::query::{QueryRule, extract};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const CASES: u32 = 256;

/// Pieces that have broken parsers before, or that the scanner and renderer treat specially.
const PIECES: &[&str] = &[
    "password",
    "PWD",
    "pin",
    "token",
    "_token",
    "bot_token",
    "Token",
    "next_page_token",
    "=",
    ":",
    "：",
    "\"",
    "'",
    "\\",
    " ",
    "  ",
    "\n",
    "\t",
    "is ",
    "sk-",
    "sk-ant-",
    "sk_live_",
    "mgk_",
    "ghp_",
    "github_pat_",
    "glpat-",
    "hf_",
    "npm_",
    "AIza",
    "xoxb-",
    "AKIA",
    "eyJ",
    ".",
    "-----BEGIN ",
    "PRIVATE KEY",
    "-----",
    "://",
    "@",
    "${",
    "}",
    "{{",
    "<",
    ">",
    "[",
    "]",
    "&",
    "</MEMORY_CONTEXT>",
    "＜",
    "＞",
    "⟨/MEMORY_CONTEXT⟩",
    "⟨",
    "⟩",
    "‹",
    "›",
    "〈",
    "〉",
    "〈",
    "〉",
    "˂",
    "˃",
    "≮",
    "≯",
    "ᐸ",
    "<system-reminder>",
    "</system-reminder>",
    "Bearer ",
    "hooks.slack.com/services/",
    "aws_secret_access_key",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "密码",
    "пароль",
    "é",
    "🙂",
    "\u{0}",
    "\u{2028}",
    "\u{a0}",
    "\u{3000}",
    "\u{85}",
    "a",
    "Z",
    "7",
];

fn hostile_string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => proptest::sample::select(PIECES).prop_map(str::to_owned),
        2 => "[a-zA-Z0-9 ]{1,12}",
        1 => any::<char>().prop_map(String::from),
        1 => (0usize..700).prop_map(|n| " ".repeat(n)),
        // Runs of mixed blanks, which the password detector reads as one space.
        1 => (0usize..300).prop_map(|n| "\t \u{a0}\u{3000}".repeat(n)),
    ];
    proptest::collection::vec(piece, 0..16).prop_map(|pieces| pieces.concat())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        hostile_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((hostile_string(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn cache_control() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![Just(None), Just(Some(json!({"type": "ephemeral"}))), Just(Some(Value::Null))]
}

fn content_block() -> impl Strategy<Value = Value> {
    let text = (hostile_string(), cache_control()).prop_map(|(text, cc)| {
        let mut block = json!({"type": "text", "text": text});
        if let Some(cc) = cc {
            block["cache_control"] = cc;
        }
        block
    });
    let tool_result = (hostile_string(), cache_control()).prop_map(|(text, cc)| {
        let mut block = json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": text}]});
        if let Some(cc) = cc {
            block["cache_control"] = cc;
        }
        block
    });
    prop_oneof![4 => text, 1 => tool_result, 1 => json_value()]
}

fn message() -> impl Strategy<Value = Value> {
    let role = prop_oneof![Just("user"), Just("assistant"), Just("system"), Just("tool")];
    let content = prop_oneof![
        hostile_string().prop_map(Value::String),
        proptest::collection::vec(content_block(), 0..5).prop_map(Value::Array),
        json_value(),
    ];
    (role, content, cache_control()).prop_map(|(role, content, cc)| {
        let mut message = json!({"role": role, "content": content});
        if let Some(cc) = cc {
            message["cache_control"] = cc;
        }
        message
    })
}

/// A Messages request as a client might send it, with everything placement reads made up.
fn messages_body() -> impl Strategy<Value = Value> {
    let system = prop_oneof![
        Just(None),
        hostile_string().prop_map(|s| Some(Value::String(s))),
        proptest::collection::vec(content_block(), 0..4).prop_map(|b| Some(Value::Array(b))),
        json_value().prop_map(Some),
    ];
    (proptest::collection::vec(message(), 0..6), system, cache_control(), json_value()).prop_map(
        |(messages, system, cc, extra)| {
            let mut body =
                json!({"model": "claude-test", "max_tokens": 16, "messages": messages, "extra": extra});
            if let Some(system) = system {
                body["system"] = system;
            }
            if let Some(cc) = cc {
                body["cache_control"] = cc;
            }
            body
        },
    )
}

fn schemas() -> &'static SchemaSet {
    static SCHEMAS: std::sync::OnceLock<SchemaSet> = std::sync::OnceLock::new();
    SCHEMAS.get_or_init(|| SchemaSet::load(None).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_get_an_answer_from_the_body_check(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = check_messages_request(&bytes);
        let _ = extract(&bytes, &QueryRule::default());
    }

    #[test]
    fn any_accepted_body_takes_the_block_and_stays_well_formed(
        body in messages_body(),
        block in hostile_string(),
        placement in prop_oneof![Just(Placement::Auto), Just(Placement::System), Just(Placement::LastUserTurn)],
        pretty in any::<bool>(),
    ) {
        let bytes = if pretty { serde_json::to_vec_pretty(&body).unwrap() } else { serde_json::to_vec(&body).unwrap() };
        prop_assert!(check_messages_request(&bytes).is_ok());
        let _ = extract(&bytes, &QueryRule::default());
        if let Ok(injected) = inject(&bytes, &block, placement) {
            let out: Value = serde_json::from_slice(&injected.body).expect("the injected body is JSON");
            // Nothing of the client's but `system` or one user turn changed.
            prop_assert_eq!(&out["model"], &body["model"]);
            prop_assert_eq!(&out["extra"], &body["extra"]);
            prop_assert_eq!(out["messages"].as_array().map(Vec::len), body["messages"].as_array().map(Vec::len));
            prop_assert!(injected.body.len() > bytes.len());
        }
    }

    #[test]
    fn a_mangled_body_is_refused_or_handled_never_a_panic(
        body in messages_body(),
        cuts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = serde_json::to_vec(&body).unwrap();
        for (at, byte) in cuts {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        if check_messages_request(&bytes).is_ok() {
            let _ = extract(&bytes, &QueryRule::default());
            let _ = inject(&bytes, "<MEMORY_CONTEXT version=\"v1\">\n</MEMORY_CONTEXT>", Placement::Auto);
        }
    }

    #[test]
    fn the_secret_scanner_answers_any_json_and_names_paths_under_its_base(value in json_value()) {
        for finding in secrets::scan(&value, "$.content") {
            prop_assert!(finding.path.starts_with("$.content"), "{}", finding.path);
        }
    }

    #[test]
    fn any_envelope_is_checked_or_refused_with_problems(
        fields in proptest::collection::vec((
            prop_oneof![
                Just("type".to_owned()), Just("scope".to_owned()), Just("content".to_owned()),
                Just("valid_from".to_owned()), Just("valid_until".to_owned()), Just("priority".to_owned()),
                Just("key".to_owned()), Just("aliases".to_owned()), Just("metadata".to_owned()),
                Just("id".to_owned()), Just("schema_version".to_owned()), hostile_string(),
            ],
            json_value(),
        ), 0..10),
        record_type in prop_oneof![Just("fact"), Just("customer_profile"), Just("internal_sop"), Just("nope")],
    ) {
        let mut map: Map<String, Value> = fields.into_iter().collect();
        map.entry("type".to_owned()).or_insert_with(|| json!(record_type));
        let rules = Rules { schemas: schemas(), max_content_bytes: 64 * 1024, now_ms: 1_767_225_600_000 };
        match envelope::check(&Value::Object(map), &rules) {
            Ok(_) => {}
            Err(problems) => prop_assert!(!problems.is_empty()),
        }
    }

    #[test]
    fn any_import_line_is_parsed_or_refused(line in hostile_string(), max_line in 0usize..2048) {
        if let Ok(value) = memgate::memory::transfer::parse_line(&line, max_line) {
            prop_assert!(line.len() <= max_line);
            let rules = Rules { schemas: schemas(), max_content_bytes: 64 * 1024, now_ms: 0 };
            if let Err(problems) = envelope::check(&value, &rules) {
                prop_assert!(problems.len() <= memgate::memory::checks::problems::MAX_PROBLEMS + 1);
            }
        }
    }

    #[test]
    fn any_record_renders_as_one_line_with_no_bracket_a_model_reads_as_a_tag(content in json_value(), id in hostile_string()) {
        let item = memgate::inject::RenderItem {
            id: id.as_str().into(),
            record_type: "fact".into(),
            priority: 3,
            updated_at: "2024-06-15T09:00:00Z".to_owned(),
            content: std::borrow::Cow::Borrowed(&content),
            stub: None,
            written_by: None,
        };
        let line = memgate::inject::record_line(&item);
        prop_assert!(!line.contains(['<', '>', '&', '\n', '\r', '＜', '＞', '⟨', '⟩', '‹', '›', '〈', '〉', '〈', '〉', '˂', '˃', '≮', '≯', 'ᐸ']), "{}", line);
        let back: Value = serde_json::from_str(&line).expect("a record line is JSON");
        prop_assert_eq!(&back["id"], &json!(id));
        prop_assert_eq!(&back["content"], &content);
    }

    #[test]
    fn merge_patches_answer_anything_and_a_patch_applied_twice_changes_nothing_more(
        target in json_value(),
        patch in json_value(),
    ) {
        let _ = envelope::merge_patch(&target, &patch);
        let mut once = target.clone();
        memgate::rollout::merge_patch(&mut once, &patch);
        let mut twice = once.clone();
        memgate::rollout::merge_patch(&mut twice, &patch);
        prop_assert_eq!(once, twice);
    }
}
