//! Manual measurements, never run by the test suite (`#[ignore]`), asserting nothing: the
//! figures in docs/embedding.md come from
//!
//! ```text
//! source .assets/env.sh
//! cargo test --release --lib embed::bench -- --ignored --nocapture --test-threads 1
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use super::tests::{PASSAGES, QUERIES, real_config};
use super::*;

/// Distinct short support questions, so that the cache (off here anyway) never helps.
fn questions(n: usize) -> Vec<String> {
    let stems = [
        "When will order {} ship?",
        "订单 {} 什么时候发货？",
        "Когда придёт заказ {}?",
        "How do I reset the password for account {}?",
        "Can I get a refund for invoice {}?",
    ];
    (0..n).map(|i| stems[i % stems.len()].replace("{}", &format!("{}", 10_000 + i))).collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn load(threads: usize) -> Option<Embedder> {
    let config = EmbedConfig { threads, cache_entries: 0, ..real_config()? };
    Some(Embedder::load(&config).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn latency_and_throughput() {
    for threads in [1, 2] {
        let Some(embedder) = load(threads) else { return };
        // warm-up
        for q in questions(20) {
            embedder.embed_query(&q).await.unwrap();
        }
        let mut times = Vec::new();
        for q in questions(300).into_iter().map(|q| format!("{q} (seq)")) {
            let start = Instant::now();
            embedder.embed_query(&q).await.unwrap();
            times.push(start.elapsed());
        }
        times.sort();
        eprintln!(
            "threads={threads}: one caller: p50 {:.1} ms, p99 {:.1} ms",
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            percentile(&times, 0.99).as_secs_f64() * 1e3
        );

        let callers = 8;
        let per_caller = 100;
        let all = questions(callers * per_caller);
        let before = embedder.stats();
        let start = Instant::now();
        let tasks: Vec<_> = all
            .chunks(per_caller)
            .map(|chunk| {
                let embedder = embedder.clone();
                let chunk = chunk.to_vec();
                tokio::spawn(async move {
                    let mut times = Vec::new();
                    for q in chunk {
                        let t = Instant::now();
                        embedder.embed_query(&format!("{q} (par)")).await.unwrap();
                        times.push(t.elapsed());
                    }
                    times
                })
            })
            .collect();
        let mut times = Vec::new();
        for task in tasks {
            times.extend(task.await.unwrap());
        }
        let elapsed = start.elapsed();
        times.sort();
        let stats = embedder.stats();
        eprintln!(
            "threads={threads}: {callers} callers: {:.0} queries/s, p50 {:.1} ms, p99 {:.1} ms, {:.1} texts per run",
            all.len() as f64 / elapsed.as_secs_f64(),
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            percentile(&times, 0.99).as_secs_f64() * 1e3,
            (stats.texts - before.texts) as f64 / (stats.runs - before.runs) as f64
        );
    }
}

/// Two more topics for the calibration, beside the tests' shipping/refund/password notes.
const MORE_PASSAGES: [(&str, &str, &str); 6] = [
    (
        "en",
        "address",
        "To change a delivery address, the customer must confirm it before the parcel leaves the warehouse.",
    ),
    ("zh", "address", "修改收货地址：包裹出库前，客户需要确认新的地址。"),
    (
        "ru",
        "address",
        "Изменить адрес доставки можно только до отправки посылки со склада, после подтверждения клиентом.",
    ),
    (
        "en",
        "invoice",
        "Invoices with VAT are issued on request for business customers within three working days.",
    ),
    ("zh", "invoice", "企业客户可申请开具增值税发票，三个工作日内开出。"),
    (
        "ru",
        "invoice",
        "Счёт-фактуру с НДС юридическим лицам выставляем по запросу в течение трёх рабочих дней.",
    ),
];
const MORE_QUERIES: [(&str, &str, &str); 6] = [
    ("en", "address", "I moved, can you send my order to my new address?"),
    ("zh", "address", "我搬家了，能把订单寄到新地址吗？"),
    ("ru", "address", "Можно поменять адрес доставки?"),
    ("en", "invoice", "I need a VAT invoice for my company."),
    ("zh", "invoice", "公司报销需要增值税发票。"),
    ("ru", "invoice", "Нужен счёт с НДС для бухгалтерии."),
];

/// Cosine scores of relevant and unrelated query/passage pairs, and of near-duplicate and
/// different passage pairs, to calibrate the funnel's and the dedup's thresholds.
#[tokio::test]
#[ignore = "a measurement, run by hand"]
async fn calibration() {
    for centering in [true, false] {
        eprintln!("--- language centering {}", if centering { "on" } else { "off" });
        let Some(config) = real_config() else { return };
        let config = EmbedConfig { cache_entries: 0, language_centering: centering, ..config };
        calibrate(&Embedder::load(&config).unwrap(), centering).await;
    }
}

async fn calibrate(embedder: &Embedder, centering: bool) {
    let all_passages: Vec<_> = PASSAGES.iter().chain(MORE_PASSAGES.iter()).copied().collect();
    let texts: Vec<String> = all_passages.iter().map(|p| p.2.to_owned()).collect();
    let passages = embedder.embed_passages(&texts).await.unwrap();
    let (mut relevant, mut same_lang_unrelated, mut unrelated) = (Vec::new(), Vec::new(), Vec::new());
    let mut cross_lingual_relevant = Vec::new();
    let (mut ranked_first, mut queries) = (0, 0);
    // Per query: (same topic?, score) of every passage, for the threshold-and-margin table.
    let mut rows: Vec<Vec<(bool, f32)>> = Vec::new();
    for (lang, topic, query) in QUERIES.iter().chain(MORE_QUERIES.iter()).copied() {
        let q = embedder.embed_query(query).await.unwrap();
        queries += 1;
        let best = all_passages
            .iter()
            .zip(&passages)
            .max_by(|(_, a), (_, b)| cosine(&q, a).total_cmp(&cosine(&q, b)))
            .map(|((_, t, _), _)| *t);
        if best == Some(topic) {
            ranked_first += 1;
        }
        rows.push(
            all_passages.iter().zip(&passages).map(|((_, t, _), p)| (*t == topic, cosine(&q, p))).collect(),
        );
        for ((l, t, _), p) in all_passages.iter().zip(&passages) {
            let s = cosine(&q, p);
            match (*l == lang, *t == topic) {
                (true, true) => relevant.push(s),
                (false, true) => cross_lingual_relevant.push(s),
                (true, false) => same_lang_unrelated.push(s),
                (false, false) => unrelated.push(s),
            }
        }
    }
    let range = |v: &[f32]| {
        let min = v.iter().copied().fold(f32::MAX, f32::min);
        let max = v.iter().copied().fold(f32::MIN, f32::max);
        format!("{min:.3}..{max:.3} (n={})", v.len())
    };
    eprintln!("query -> relevant passage, same language:   {}", range(&relevant));
    eprintln!("query -> relevant passage, other language:  {}", range(&cross_lingual_relevant));
    eprintln!("query -> unrelated passage, same language:  {}", range(&same_lang_unrelated));
    eprintln!("query -> unrelated passage, other language: {}", range(&unrelated));
    eprintln!("queries whose best passage is of their own topic (any language): {ranked_first}/{queries}");
    let thresholds: &[f32] = if centering {
        &[0.10, 0.12, 0.14, 0.16, 0.18, 0.19, 0.20, 0.22, 0.25, 0.30]
    } else {
        &[0.78, 0.80, 0.82, 0.84, 0.86]
    };
    for &threshold in thresholds {
        let kept = relevant.iter().filter(|s| **s >= threshold).count();
        let kept_x = cross_lingual_relevant.iter().filter(|s| **s >= threshold).count();
        let leaked = same_lang_unrelated.iter().chain(&unrelated).filter(|s| **s >= threshold).count();
        eprintln!(
            "threshold {threshold:.2}: keeps {kept}/{} relevant, {kept_x}/{} cross-lingual relevant, lets {leaked}/{} unrelated through",
            relevant.len(),
            cross_lingual_relevant.len(),
            same_lang_unrelated.len() + unrelated.len()
        );
    }

    // A relative margin on top: keep only passages within `margin` of the query's best score.
    let margins: &[f32] = if centering { &[0.05, 0.08, 0.10, 0.15, 1.0] } else { &[0.02, 0.03, 0.05, 1.0] };
    for &threshold in thresholds {
        let line: Vec<String> = margins
            .iter()
            .map(|&margin| {
                let (mut kept, mut leaked, mut clean) = (0, 0, 0);
                for row in &rows {
                    let best = row.iter().map(|r| r.1).fold(f32::MIN, f32::max);
                    let pass = |s: f32| s >= threshold && s >= best - margin;
                    let k = row.iter().filter(|(rel, s)| *rel && pass(*s)).count();
                    let l = row.iter().filter(|(rel, s)| !*rel && pass(*s)).count();
                    kept += k;
                    leaked += l;
                    clean += usize::from(k > 0 && l == 0);
                }
                format!("margin {margin:.2}: {kept} rel, {leaked} unrel, {clean} clean")
            })
            .collect();
        eprintln!("threshold {threshold:.2}: {}", line.join(" | "));
    }

    // Near-duplicates (a record rewritten) vs different records of the same kind.
    let rewrites = [
        (
            "Shipping delay: orders placed after June 10 ship next week because of a backlog at the Rotterdam warehouse.",
            "Because the Rotterdam warehouse is backlogged, orders made after 10 June will ship next week.",
        ),
        ("退款政策：退货后14天内将款项退回原支付方式。", "退款规则：商品退回后，14天内原路退款。"),
        (
            "Регламент сброса пароля: проверьте электронную почту клиента, отправьте ссылку для сброса и предупредите, что она действует один час.",
            "Сброс пароля: сверьте e-mail клиента, вышлите ссылку для сброса; ссылка действует час.",
        ),
        (
            "Customer prefers delivery on weekdays before noon.",
            "The customer wants deliveries on weekday mornings.",
        ),
    ];
    let mut dup = Vec::new();
    for (a, b) in rewrites {
        let v = embedder.embed_passages(&[a.to_owned(), b.to_owned()]).await.unwrap();
        dup.push(cosine(&v[0], &v[1]));
    }
    let mut different = Vec::new();
    for i in 0..passages.len() {
        for j in i + 1..passages.len() {
            if all_passages[i].0 == all_passages[j].0 {
                different.push(cosine(&passages[i], &passages[j]));
            }
        }
    }
    eprintln!("passage rewrites (near-duplicates):          {}", range(&dup));
    eprintln!("different passages, same language:          {}", range(&different));
}
