//! Tests against the real model that scripts/fetch-assets puts in `.assets/`. Without the
//! assets they print why and pass; CI runs scripts/fetch-assets (and sources .assets/env.sh)
//! first, so there they run for real (and with CI set, a missing ORT_DYLIB_PATH fails them).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::model;
use super::*;

pub(super) fn assets_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".assets")
}

/// The default config for the fetched assets, or `None` (with a message) when they are missing.
/// `MEMGATE_MODEL_DIR`, when set, names the model folder (e.g. the float32 one).
pub(super) fn real_config() -> Option<EmbedConfig> {
    let mut config = EmbedConfig::default_for(&assets_dir());
    if let Some(dir) = std::env::var_os("MEMGATE_MODEL_DIR").filter(|d| !d.is_empty()) {
        config.model_dir = PathBuf::from(dir);
    }
    let library = config.ort_dylib_path.clone().unwrap_or_default();
    if !config.model_dir.join("model.onnx").exists() || !library.exists() {
        eprintln!(
            "skipping: embedding assets missing under {} (run scripts/fetch-assets)",
            assets_dir().display()
        );
        return None;
    }
    // ort reads the library only from ORT_DYLIB_PATH, and a test cannot set it safely (other
    // tests run on other threads), so it must come from the environment. On a developer's
    // machine a missing export skips; in CI (CI=true) it fails, so CI cannot pass without them.
    if std::env::var_os("ORT_DYLIB_PATH").is_none_or(|v| v.is_empty()) {
        let message = format!(
            "the embedding assets are fetched but ORT_DYLIB_PATH is not set: run `source .assets/env.sh` first \
             (or ORT_DYLIB_PATH={} cargo test)",
            library.display()
        );
        assert!(std::env::var_os("CI").is_none(), "{message}");
        eprintln!("skipping: {message}");
        return None;
    }
    // Whatever library the environment names (checked by Embedder::load) is the one ort loads.
    config.ort_dylib_path = None;
    Some(config)
}

/// One shared embedder (with its cache) for the tests that do not care about sharing it.
fn shared() -> Option<&'static Embedder> {
    static SHARED: OnceLock<Option<Embedder>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let config = real_config()?;
            match Embedder::load(&config) {
                Ok(embedder) => Some(embedder),
                Err(e) => panic!("loading the real model failed: {e}"),
            }
        })
        .as_ref()
}

fn uncached() -> Option<Embedder> {
    let config = EmbedConfig { cache_entries: 0, ..real_config()? };
    match Embedder::load(&config) {
        Ok(embedder) => Some(embedder),
        Err(e) => panic!("loading the real model failed: {e}"),
    }
}

/// Three support notes in three languages: a shipping delay, a refund policy, a password reset.
pub(super) const PASSAGES: [(&str, &str, &str); 9] = [
    (
        "en",
        "shipping",
        "Shipping delay: orders placed after June 10 ship next week because of a backlog at the Rotterdam warehouse.",
    ),
    (
        "en",
        "refund",
        "Refund policy: refunds are issued within 14 days of the return, to the original payment method.",
    ),
    (
        "en",
        "password",
        "Password reset SOP: verify the customer's email, send the reset link, and remind them it expires in one hour.",
    ),
    ("zh", "shipping", "发货延迟：由于鹿特丹仓库积压，6月10日之后下的订单将在下周发货。"),
    ("zh", "refund", "退款政策：退货后14天内将款项退回原支付方式。"),
    ("zh", "password", "重置密码流程：核实客户邮箱，发送重置链接，并提醒链接一小时后失效。"),
    (
        "ru",
        "shipping",
        "Задержка доставки: заказы, оформленные после 10 июня, будут отправлены на следующей неделе из-за завала на складе в Роттердаме.",
    ),
    (
        "ru",
        "refund",
        "Политика возврата: деньги возвращаются в течение 14 дней после возврата товара тем же способом оплаты.",
    ),
    (
        "ru",
        "password",
        "Регламент сброса пароля: проверьте электронную почту клиента, отправьте ссылку для сброса и предупредите, что она действует один час.",
    ),
];

/// A customer's question in each language, and the topic it is about.
pub(super) const QUERIES: [(&str, &str, &str); 6] = [
    ("en", "shipping", "My order still hasn't shipped, when will it be sent?"),
    ("zh", "shipping", "我的订单什么时候发货？"),
    ("ru", "password", "Я забыл пароль и не могу войти, что делать?"),
    ("en", "refund", "How long until I get my money back for the returned item?"),
    ("zh", "password", "我忘记密码了，怎么重新设置？"),
    ("ru", "shipping", "Когда отправят мой заказ? Он задерживается."),
];

fn passages() -> Vec<String> {
    PASSAGES.iter().map(|(_, _, text)| (*text).to_owned()).collect()
}

#[tokio::test]
async fn vectors_are_normalized_and_the_model_id_is_stable() {
    let Some(embedder) = shared() else { return };
    assert_eq!(embedder.dimensions(), 384);
    let v = embedder.embed_query("hello world").await.unwrap();
    assert_eq!(v.len(), 384);
    let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    assert!((cosine(&v, &v) - 1.0).abs() < 1e-4);
    let (name, rest) = embedder.model_id().split_once(':').unwrap();
    assert!(name.starts_with("multilingual-e5-small"), "{}", embedder.model_id());
    let centered = format!("+centered-{}", super::centering::fingerprint());
    assert!(rest.ends_with(&centered), "{}", embedder.model_id());
    assert_eq!(rest.len(), 16 + centered.len(), "{}", embedder.model_id());
}

/// The same text gives the same vector: bit for bit from a run of the same shape, and to
/// within float rounding whatever the run it shares (passage runs are cut by measured time, so
/// two calls may group texts differently; int8 activations are scaled per token, so a text's
/// neighbours in a run do not change its quantization).
#[tokio::test]
async fn output_is_deterministic() {
    let Some(embedder) = uncached() else { return };
    let texts = passages();
    let first = embedder.embed_passages(&texts).await.unwrap();
    let second = embedder.embed_passages(&texts).await.unwrap();
    let alone = embedder.embed_passages(&texts[4..5]).await.unwrap();
    let worst = first
        .iter()
        .zip(&second)
        .chain(std::iter::once((&first[4], &alone[0])))
        .flat_map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x - y).abs()))
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-6, "the same texts gave vectors {worst} apart");
    let a = embedder.embed_query("当订单延迟时我会收到通知吗？").await.unwrap();
    let b = embedder.embed_query("当订单延迟时我会收到通知吗？").await.unwrap();
    assert!(!Arc::ptr_eq(&a, &b), "the cache is off here, so this ran the model twice");
    assert_eq!(a, b);
}

/// Every query ranks its own topic's passage in its own language above every passage of
/// another topic, in any language.
#[tokio::test]
async fn each_language_ranks_its_relevant_passage_first() {
    let Some(embedder) = shared() else { return };
    let vectors = embedder.embed_passages(&passages()).await.unwrap();
    for (lang, topic, query) in QUERIES {
        let q = embedder.embed_query(query).await.unwrap();
        let score = |i: usize| cosine(&q, &vectors[i]);
        let Some(relevant) = PASSAGES.iter().position(|(l, t, _)| *l == lang && *t == topic) else {
            panic!("no {lang} {topic} passage")
        };
        for (i, (other_lang, other_topic, _)) in PASSAGES.iter().enumerate() {
            if *other_topic != topic {
                assert!(
                    score(relevant) > score(i),
                    "{lang} query {query:?}: relevant {:.3} <= {other_lang}/{other_topic} {:.3}",
                    score(relevant),
                    score(i)
                );
            }
        }
    }
}

/// What language centering is for: a query's own topic written in another language should score
/// above another topic written in the query's own language. Counted over every such pair of the
/// sample, with centering and without.
#[tokio::test]
async fn centering_lets_topic_beat_language() {
    let Some(centered) = shared() else { return };
    let raw = Embedder::load(&EmbedConfig { language_centering: false, ..real_config().unwrap() }).unwrap();
    let mut right = Vec::new();
    for embedder in [centered, &raw] {
        let vectors = embedder.embed_passages(&passages()).await.unwrap();
        let (mut ordered, mut pairs) = (0, 0);
        for (lang, topic, query) in QUERIES {
            let q = embedder.embed_query(query).await.unwrap();
            let score = |i: usize| cosine(&q, &vectors[i]);
            for (i, (l, t, _)) in PASSAGES.iter().enumerate() {
                for (j, (other_l, other_t, _)) in PASSAGES.iter().enumerate() {
                    if *t == topic && *l != lang && *other_t != topic && *other_l == lang {
                        pairs += 1;
                        ordered += usize::from(score(i) > score(j));
                    }
                }
            }
        }
        right.push((ordered, pairs));
    }
    eprintln!("topic over language: centered {:?}, raw {:?}", right[0], right[1]);
    let ((centered_right, pairs), (raw_right, _)) = (right[0], right[1]);
    assert!(centered_right > raw_right, "centering should order more pairs by topic: {right:?}");
    assert!(centered_right * 10 >= pairs * 9, "centered: {centered_right} of {pairs} pairs by topic");
}

/// A query in one language finds the right note written in another.
#[tokio::test]
async fn cross_lingual_queries_find_the_right_note() {
    let Some(embedder) = shared() else { return };
    let vectors = embedder.embed_passages(&passages()).await.unwrap();
    let pairs = [
        ("When will my delayed order ship?", "zh", "shipping"),
        ("Как вернуть деньги за товар?", "en", "refund"),
        ("忘记密码怎么办？", "ru", "password"),
    ];
    for (query, lang, topic) in pairs {
        let q = embedder.embed_query(query).await.unwrap();
        let best = PASSAGES
            .iter()
            .zip(&vectors)
            .filter(|((l, _, _), _)| *l == lang)
            .max_by(|(_, a), (_, b)| cosine(&q, a).total_cmp(&cosine(&q, b)))
            .map(|((_, t, _), _)| *t);
        assert_eq!(best, Some(topic), "{query:?} among the {lang} notes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_queries_match_sequential_ones_and_share_runs() {
    let Some(embedder) = uncached() else { return };
    let queries: Vec<String> = QUERIES.iter().map(|(_, _, q)| (*q).to_owned()).collect();
    let mut sequential = Vec::new();
    for q in &queries {
        sequential.push(embedder.embed_query(q).await.unwrap());
    }
    let before = embedder.stats();
    let handles: Vec<_> = queries
        .iter()
        .cycle()
        .take(queries.len() * 4)
        .map(|q| {
            let embedder = embedder.clone();
            let q = q.clone();
            tokio::spawn(async move { embedder.embed_query(&q).await })
        })
        .collect();
    let mut concurrent = Vec::new();
    for handle in handles {
        concurrent.push(handle.await.unwrap().unwrap());
    }
    for (i, v) in concurrent.iter().enumerate() {
        let s = &sequential[i % queries.len()];
        // Batching pads texts to the longest in the run, which may change the last bits.
        let diff = v.iter().zip(s.iter()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff < 1e-5, "query {i}: max difference {diff}");
    }
    let after = embedder.stats();
    assert!(
        after.runs - before.runs < (queries.len() * 4) as u64,
        "24 concurrent queries took {} runs: nothing was batched",
        after.runs - before.runs
    );
}

#[tokio::test]
async fn a_cache_hit_returns_the_same_arc() {
    let Some(embedder) = shared() else { return };
    let first = embedder.embed_query("cache me: 缓存 кэш").await.unwrap();
    let hits = embedder.stats().cache_hits;
    let second = embedder.embed_query("cache me: 缓存 кэш").await.unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    assert!(embedder.stats().cache_hits > hits);
}

#[tokio::test]
async fn empty_inputs_are_fine() {
    let Some(embedder) = shared() else { return };
    assert!(embedder.embed_passages(&[]).await.unwrap().is_empty());
    assert_eq!(embedder.embed_query("").await.unwrap().len(), embedder.dimensions());
}

#[tokio::test]
async fn many_passages_come_back_in_order() {
    let Some(embedder) = shared() else { return };
    // Several passage runs (each about 20 ms of model time), sorted by length inside.
    let texts: Vec<String> = (0..40).map(|i| format!("note {i}: {}", PASSAGES[i % 9].2)).collect();
    let all = embedder.embed_passages(&texts).await.unwrap();
    assert_eq!(all.len(), 40);
    let one = embedder.embed_passages(&texts[37..38]).await.unwrap();
    assert!(cosine(&all[37], &one[0]) > 0.9999);
}

#[test]
fn a_missing_model_says_to_fetch_it() {
    let config = EmbedConfig {
        model_dir: PathBuf::from("/nonexistent/memgate-model"),
        ort_dylib_path: None,
        ..EmbedConfig::default_for(Path::new("/nonexistent"))
    };
    let err = Embedder::load(&config).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, EmbedError::ModelFileMissing(_) | EmbedError::OrtLibraryMissing(_)), "{message}");
    assert!(message.contains("scripts/fetch-assets"), "{message}");
}

#[test]
fn a_missing_runtime_library_says_where_it_looked() {
    let config = EmbedConfig::default_for(Path::new("/nonexistent/assets"));
    let err = Embedder::load(&config).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, EmbedError::OrtLibraryMissing(_)), "{message}");
    assert!(message.contains("/nonexistent/assets/onnxruntime/libonnxruntime.so.1.31.1"), "{message}");
    assert!(message.contains("ORT_DYLIB_PATH"), "{message}");
}

#[test]
fn bad_sizes_are_refused() {
    let config = EmbedConfig { threads: 0, ..EmbedConfig::default_for(Path::new("/nonexistent")) };
    assert!(matches!(Embedder::load(&config), Err(EmbedError::InvalidConfig(_))));
}

#[test]
fn cosine_of_different_lengths_is_zero() {
    assert_eq!(cosine(&[1.0, 0.0], &[1.0]), 0.0);
    assert!((cosine(&[0.6, 0.8], &[0.6, 0.8]) - 1.0).abs() < 1e-6);
}

/// Texts for the tokenizer comparison: the support records and questions of the tests, the
/// reference sentences, and awkward text (special tokens written out, full-width forms,
/// combining marks, emoji sequences, scripts without spaces, control characters, runs of
/// spaces, a text longer than 512 tokens), plus deterministic random strings over many scripts.
fn tokenizer_corpus() -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    let records: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/data/support_records.json")).unwrap();
    for record in records.as_array().unwrap() {
        let mut text = String::new();
        crate::record::collect_text(&record["content"], &mut text);
        texts.push(text);
    }
    texts.extend(PASSAGES.iter().chain(QUERIES.iter()).map(|(_, _, t)| (*t).to_owned()));
    texts.extend(super::centering::reference_texts());
    for awkward in [
        "",
        " ",
        "   multiple   spaces   ",
        "\ttabs\tand\nnew\r\nlines\u{3000}ideographic space",
        "<s>hello</s> <pad> <unk> <mask> x<s>y",
        "＜ｓ＞ full-width ＡＢＣ１２３ ｶﾀｶﾅ",
        "cafe\u{301} naïve résumé Ångström",
        "👍🏽 family 👨‍👩‍👧 flags 🇫🇷🇯🇵 ✔️",
        "नमस्ते दुनिया, यह एक परीक्षण है।",
        "สวัสดีครับ นี่คือการทดสอบ",
        "مرحبا بكم في متجرنا، الطلب رقم ٤٥٦",
        "안녕하세요 주문 번호 ORD-4411 확인 부탁드립니다",
        "こんにちは、注文はいつ届きますか？",
        "Γειά σου Κόσμε – ελληνικά",
        "a\u{200b}b\u{200d}c\u{feff}d \u{0}\u{7}\u{1b}[0m",
        "ﬁﬂ ligatures, ℌ𝔢𝔩𝔩𝔬 𝐁𝐨𝐥𝐝, ½ ² ™ ①",
        "https://example.com/a/b?c=d&e=f#g user@example.org +1-555-0100",
        "fn main() { println!(\"{}\", 42); } // code",
        "0123456789 3.14159 -273.15 1e-9 ¥1,000 €12,50",
    ] {
        texts.push(awkward.to_owned());
    }
    texts.push(PASSAGES.iter().map(|(_, _, t)| *t).collect::<Vec<_>>().join(" ").repeat(6));
    // Random strings over Latin, Latin-1, Cyrillic, Greek, CJK, Hangul, kana, Arabic, Devanagari,
    // Thai, punctuation, digits, spaces and emoji, with words of random length.
    let ranges: [(u32, u32); 14] = [
        (0x61, 0x7a),
        (0xc0, 0xff),
        (0x410, 0x44f),
        (0x391, 0x3c9),
        (0x4e00, 0x9fff),
        (0xac00, 0xd7a3),
        (0x3041, 0x30ff),
        (0x621, 0x64a),
        (0x905, 0x939),
        (0xe01, 0xe30),
        (0x21, 0x2f),
        (0x30, 0x39),
        (0x20, 0x20),
        (0x1f600, 0x1f64f),
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u32| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % u64::from(n)) as u32
    };
    for _ in 0..3000 {
        let len = 1 + next(60);
        let (mut text, mut range) = (String::new(), ranges[next(14) as usize]);
        for _ in 0..len {
            if next(5) == 0 {
                range = ranges[next(14) as usize];
            }
            text.extend(char::from_u32(range.0 + next(range.1 - range.0 + 1)));
        }
        texts.push(text);
    }
    texts
}

/// The compact tokenizer (`tokenizer.rs`) gives exactly the ids of the `tokenizers` crate on the
/// model's own tokenizer.json, for every text of the corpus, prefixes included.
#[test]
fn compact_tokenizer_matches_tokenizers() {
    let Some(config) = real_config() else { return };
    let loaded = model::load(&EmbedConfig { language_centering: false, ..config.clone() }).unwrap();
    let json = std::fs::read(config.model_dir.join("tokenizer.json")).unwrap();
    let (reference, compact) = loaded.model.tokenizer_pair(&json).unwrap();
    let corpus = tokenizer_corpus();
    let mut differ = Vec::new();
    for text in &corpus {
        for prefix in ["", "query: ", "passage: "] {
            let text = format!("{prefix}{text}");
            let (want, got) = (reference(&text), compact(&text));
            assert!(want.len() >= 2, "tokenizers failed on {text:?}");
            if want != got {
                differ.push(format!("{text:?}\n  tokenizers {want:?}\n  compact    {got:?}"));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} texts differ:\n{}",
        differ.len(),
        corpus.len() * 3,
        differ[..differ.len().min(5)].join("\n")
    );
    let long = reference(corpus.iter().max_by_key(|t| t.len()).unwrap());
    assert_eq!(long.len(), 512, "the long text is cut at 512 tokens");
}

/// A query arriving during a large import is answered before the import ends: it waits for
/// the passage run in progress, not for the whole queue (`batcher.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_go_ahead_of_a_large_import() {
    let Some(embedder) = uncached() else { return };
    let texts: Vec<String> = (0..600).map(|i| format!("import line {i}: {}", PASSAGES[i % 9].2)).collect();
    let runs_before = embedder.stats().runs;
    let import = {
        let embedder = embedder.clone();
        tokio::spawn(async move { embedder.embed_passages(&texts).await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while embedder.stats().runs == runs_before {
        assert!(std::time::Instant::now() < deadline, "the import never started");
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let query = embedder.embed_query("When will my order ship?").await.unwrap();
    assert_eq!(query.len(), embedder.dimensions());
    assert!(!import.is_finished(), "the query was answered only after the whole import");
    let vectors = import.await.unwrap().unwrap();
    assert_eq!(vectors.len(), 600);
    let again = embedder.embed_passages(&[format!("import line 7: {}", PASSAGES[7].2)]).await.unwrap();
    assert!(cosine(&vectors[7], &again[0]) > 0.9999, "sorting by length keeps every vector in its place");
}

/// The multilingual support set of the end-to-end and SDK tests: each question and its record.
const SUPPORT_QUESTIONS: [(&str, &str); 12] = [
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

/// The support records' ids and their texts as `memory::passage_text` writes them (type, key,
/// aliases, then every string and number of the content, one per line).
pub(super) fn support_records() -> Vec<(String, String)> {
    let records: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/data/support_records.json")).unwrap();
    let records = records.as_array().unwrap();
    records
        .iter()
        .map(|r| {
            let mut text = format!("{}\n", r["type"].as_str().unwrap().replace('_', " "));
            if let Some(key) = r["key"].as_str() {
                text.push_str(key);
                text.push('\n');
            }
            for alias in r["aliases"].as_array().into_iter().flatten() {
                text.push_str(alias.as_str().unwrap());
                text.push('\n');
            }
            crate::record::collect_text(&r["content"], &mut text);
            (r["id"].as_str().unwrap().to_owned(), text)
        })
        .collect()
}

/// The float32 folder and the int8 one under `.assets/models/`, when both are there: memgate's
/// int8 build (the default folder) has a `memgate.json`; the float32 one is the `-f32` folder.
pub(super) fn f32_and_int8_dirs() -> Option<(PathBuf, PathBuf)> {
    let models = assets_dir().join("models");
    let candidates = [DEFAULT_MODEL.to_owned(), format!("{DEFAULT_MODEL}-f32")];
    let dirs: Vec<PathBuf> =
        candidates.iter().map(|c| models.join(c)).filter(|d| d.join("model.onnx").exists()).collect();
    let int8 = dirs.iter().find(|d| d.join("memgate.json").exists())?;
    let f32 = dirs.iter().find(|d| !d.join("memgate.json").exists())?;
    Some((f32.clone(), int8.clone()))
}

/// The int8 model against the float32 one it was quantized from, on the multilingual support
/// set: per-text cosine of the two vectors (raw and centered), and every question still ranks
/// its own record first. Prints the figures (docs/embedding.md, "Parity").
#[tokio::test]
async fn int8_vectors_follow_the_f32_model() {
    let Some(config) = real_config() else { return };
    let Some((f32_dir, int8_dir)) = f32_and_int8_dirs() else {
        eprintln!("skipping: no float32 and int8 model folders side by side (run scripts/fetch-assets)");
        return;
    };
    let records = support_records();
    let passages: Vec<String> = records
        .iter()
        .map(|(_, t)| t.clone())
        .chain(PASSAGES.iter().map(|(_, _, t)| (*t).to_owned()))
        .collect();
    let questions: Vec<&str> =
        SUPPORT_QUESTIONS.iter().map(|(q, _)| *q).chain(QUERIES.iter().map(|(_, _, q)| *q)).collect();
    for centering in [false, true] {
        let load = |dir: &PathBuf| {
            let config = EmbedConfig {
                model_dir: dir.clone(),
                cache_entries: 0,
                language_centering: centering,
                ..config.clone()
            };
            Embedder::load(&config).unwrap()
        };
        let (reference, int8) = (load(&f32_dir), load(&int8_dir));
        let (p_ref, p_int8) = (
            reference.embed_passages(&passages).await.unwrap(),
            int8.embed_passages(&passages).await.unwrap(),
        );
        let mut cosines: Vec<f32> = p_ref.iter().zip(&p_int8).map(|(a, b)| cosine(a, b)).collect();
        let mut decided_otherwise = Vec::new();
        for (i, question) in questions.iter().enumerate() {
            let (q_ref, q_int8) =
                (reference.embed_query(question).await.unwrap(), int8.embed_query(question).await.unwrap());
            cosines.push(cosine(&q_ref, &q_int8));
            let Some((_, relevant)) = SUPPORT_QUESTIONS.get(i) else { continue };
            // Every record, best first: (score, id).
            let ranked = |q: &[f32], p: &[Vec<f32>]| {
                let mut scored: Vec<(f32, &str)> =
                    (0..records.len()).map(|r| (cosine(q, &p[r]), records[r].0.as_str())).collect();
                scored.sort_by(|a, b| b.0.total_cmp(&a.0));
                scored
            };
            let (f32_ranks, int8_ranks) = (ranked(&q_ref, &p_ref), ranked(&q_int8, &p_int8));
            let top3 = |r: &[(f32, &str)]| {
                r.iter().take(3).map(|(s, id)| format!("{id} {s:.3}")).collect::<Vec<_>>().join(", ")
            };
            eprintln!(
                "{question} (wants {relevant})\n  f32:  {}\n  int8: {}",
                top3(&f32_ranks),
                top3(&int8_ranks)
            );
            // Where float32 decides clearly (its best leads by 0.02 or more), int8 decides the same.
            if f32_ranks[0].0 - f32_ranks[1].0 >= 0.02 && f32_ranks[0].1 != int8_ranks[0].1 {
                decided_otherwise.push(*question);
            }
        }
        let min = cosines.iter().copied().fold(f32::MAX, f32::min);
        let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
        eprintln!(
            "int8 vs f32, {} texts, {}: cosine min {min:.4}, mean {mean:.4}",
            cosines.len(),
            if centering { "centered" } else { "raw" }
        );
        assert!(decided_otherwise.is_empty(), "int8 ranks another record first for {decided_otherwise:?}");
        assert!(min >= if centering { 0.99 } else { 0.998 }, "int8 drifts from f32: min cosine {min}");
    }
}
