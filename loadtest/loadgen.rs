//! `loadgen`: an open-loop, constant-rate HTTP load driver.
//!
//! Every request has a scheduled send time, `start + i / rate`, and is started at that time
//! whether or not earlier requests have finished. Latency is measured from the *scheduled* time
//! to the end of the response body, so a slow server cannot hide its slowness by slowing the
//! driver down (no coordinated omission). The run is bounded: it sends for `--duration` seconds,
//! then waits at most `--drain-timeout` seconds for the answers still in flight.
//!
//! A dedicated OS thread paces the schedule with the kernel's sleep (tokio's timer wheel ticks in
//! whole milliseconds, which would add up to 1 ms of driver delay to every figure); the requests
//! themselves run on the tokio runtime. The "send lag" figures say how late the driver actually
//! started requests: when they grow, the driver (or the machine) is the bottleneck.
//!
//! Bodies: one file, several files or a JSON Lines file, sent in turn (request `i` gets body
//! `i mod n`); with `--unique`, every `{n}` in a body becomes a string no other request of any
//! run has, so a server that caches by content (memgate's query-embedding cache) misses every
//! time. With `--ttft` the answer is read as Server-Sent Events and the time to the first
//! `content_block_delta` is measured as well (time to first token).
//!
//! Build: `cargo build --release --example loadgen`; see `loadtest/README.md`.
#![allow(clippy::print_stdout)]

use bytes::Bytes;
use clap::Parser;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

type BoxError = Box<dyn Error + Send + Sync>;

/// Open-loop constant-rate load driver: latency is measured from each request's scheduled send time.
#[derive(Parser, Debug)]
#[command(name = "loadgen")]
struct Args {
    /// Target URL (POST). Only loopback targets are meant: this is a local benchmark tool.
    #[arg(long)]
    url: String,
    /// Requests per second, spread evenly over each second.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Seconds of sending.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// File whose bytes are a request body (sent with `content-type: application/json`);
    /// repeatable: the bodies are sent in turn.
    #[arg(long = "body-file")]
    body_files: Vec<PathBuf>,
    /// A JSON Lines file: every non-empty line is one request body; sent in turn, after any
    /// `--body-file`.
    #[arg(long)]
    body_lines: Option<PathBuf>,
    /// Replace every `{n}` in the bodies with a string unique to the request and to this run
    /// (`<run nonce>-<request number>`).
    #[arg(long)]
    unique: bool,
    /// Read answers as Server-Sent Events: also measure the time to the first
    /// `content_block_delta` event, and count a 2xx stream without `message_stop` as an error.
    #[arg(long)]
    ttft: bool,
    /// Count the values of this response header (e.g. `x-memory-status`); repeatable.
    #[arg(long = "count-header")]
    count_headers: Vec<String>,
    /// Also report figures per window of this many seconds of schedule (0: not).
    #[arg(long, default_value_t = 0.0)]
    window: f64,
    /// Extra request header, `name: value`; repeatable.
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// With `--body-lines`: every line is `VALUE<TAB>BODY`, and VALUE is sent in this header with
    /// that body (one subject per request, e.g. `x-memory-subject`).
    #[arg(long)]
    line_header: Option<String>,
    /// Per-request timeout in seconds (connect to last body byte); a timeout counts as an error.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// After the sending phase, wait at most this many seconds for answers still in flight;
    /// those still missing then count as errors.
    #[arg(long, default_value_t = 10.0)]
    drain_timeout: f64,
    /// At most this many requests in flight; a request whose turn comes while the cap is reached
    /// is not sent and counts as an error (`skipped`), so the schedule is never delayed.
    #[arg(long, default_value_t = 8192)]
    max_in_flight: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// A label for the report (e.g. `direct`, `memgate`).
    #[arg(long, default_value = "")]
    label: String,
}

/// The request bodies of a run, sent in turn.
struct Bodies {
    bodies: Vec<Bytes>,
    /// With `--line-header`: each body's value of that header, by the body's position.
    line_values: Vec<Option<HeaderValue>>,
    /// With `--unique`: the run's nonce, put with the request number in place of each `{n}`.
    nonce: Option<String>,
}

impl Bodies {
    fn load(args: &Args) -> Result<Bodies, BoxError> {
        let mut bodies = Vec::new();
        for path in &args.body_files {
            let bytes =
                std::fs::read(path).map_err(|err| format!("--body-file {}: {err}", path.display()))?;
            bodies.push(Bytes::from(bytes));
        }
        let mut line_values = vec![None; bodies.len()];
        if let Some(path) = &args.body_lines {
            let text = std::fs::read_to_string(path)
                .map_err(|err| format!("--body-lines {}: {err}", path.display()))?;
            for (n, line) in text.lines().filter(|line| !line.trim().is_empty()).enumerate() {
                let (value, body) = match &args.line_header {
                    None => (None, line),
                    Some(_) => {
                        let (value, body) = line.split_once('\t').ok_or_else(|| {
                            format!("--body-lines line {}: --line-header wants VALUE<TAB>BODY", n + 1)
                        })?;
                        let value = HeaderValue::from_str(value)
                            .map_err(|err| format!("--body-lines line {}: bad header value: {err}", n + 1))?;
                        (Some(value), body)
                    }
                };
                bodies.push(Bytes::from(body.to_owned()));
                line_values.push(value);
            }
        }
        if bodies.is_empty() {
            return Err("no request body: give --body-file or a non-empty --body-lines".into());
        }
        // The nonce keeps two runs' "unique" bodies apart: nanoseconds since the epoch.
        let nonce = args.unique.then(|| {
            let since =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            format!("{:x}", since.as_nanos())
        });
        Ok(Bodies { bodies, line_values, nonce })
    }

    /// Request `i`'s `--line-header` value, if its body came with one.
    fn line_value(&self, i: u64) -> Option<&HeaderValue> {
        let len = self.bodies.len() as u64;
        usize::try_from(i % len).ok().and_then(|k| self.line_values.get(k)).and_then(Option::as_ref)
    }

    fn get(&self, i: u64) -> Bytes {
        let len = self.bodies.len() as u64;
        let body =
            usize::try_from(i % len).ok().and_then(|k| self.bodies.get(k)).cloned().unwrap_or_default();
        match &self.nonce {
            None => body,
            Some(nonce) => {
                let text = String::from_utf8_lossy(&body);
                Bytes::from(text.replace("{n}", &format!("{nonce}-{i}")))
            }
        }
    }
}

/// What every request of the run shares.
struct Plan {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    /// `--line-header`'s name.
    line_header: Option<HeaderName>,
    bodies: Bodies,
    ttft: bool,
    count_headers: Vec<HeaderName>,
}

/// What happened to one request.
enum Outcome {
    /// A 2xx answer, fully read: latency from the scheduled send time, in microseconds.
    Ok { latency_us: u64 },
    /// A non-2xx answer, fully read.
    Status { status: u16 },
    /// Connect, send, read or timeout failure.
    Transport { message: String },
    /// `--ttft`: a 2xx stream that ended without `message_stop`.
    Stream,
}

struct Sample {
    outcome: Outcome,
    /// How late the request actually started compared with its schedule, in microseconds.
    send_lag_us: u64,
    /// The scheduled send time, from the start of the run, in microseconds.
    offset_us: u64,
    /// `--ttft`: from the scheduled send time to the chunk holding the first content delta.
    ttft_us: Option<u64>,
    /// The values of the `--count-header` headers, by their position in that list.
    header_values: Vec<String>,
}

/// Finds, across chunk boundaries, the first content delta and the end of an SSE stream.
#[derive(Default)]
struct SseScan {
    tail: Vec<u8>,
    delta_seen: bool,
    stopped: bool,
}

impl SseScan {
    /// Longer than either marker, so that a marker split between two chunks is still found.
    const KEEP: usize = 32;

    /// Feeds one chunk; true when it holds the stream's first content delta.
    fn feed(&mut self, chunk: &[u8]) -> bool {
        let mut window = std::mem::take(&mut self.tail);
        window.extend_from_slice(chunk);
        let first = !self.delta_seen && contains(&window, b"content_block_delta");
        self.delta_seen |= first;
        self.stopped |= contains(&window, b"message_stop");
        let keep = window.len().saturating_sub(Self::KEEP);
        self.tail = window.split_off(keep);
        first
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn parse_headers(raw: &[String]) -> Result<HeaderMap, BoxError> {
    let mut map = HeaderMap::new();
    map.insert(reqwest::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for line in raw {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("--header {line:?}: expected `name: value`").into());
        };
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|err| format!("--header {line:?}: bad name: {err}"))?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|err| format!("--header {line:?}: bad value: {err}"))?;
        map.append(name, value);
    }
    Ok(map)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

async fn one_request(plan: Arc<Plan>, i: u64, start: Instant, scheduled: Instant) -> Sample {
    let send_lag_us = micros(Instant::now().saturating_duration_since(scheduled));
    let body = plan.bodies.get(i);
    let mut ttft_us = None;
    let mut header_values = Vec::with_capacity(plan.count_headers.len());
    let mut complete = true;
    let result = async {
        let mut request = plan.client.post(&plan.url).headers(plan.headers.clone());
        if let (Some(name), Some(value)) = (&plan.line_header, plan.bodies.line_value(i)) {
            request = request.header(name.clone(), value.clone());
        }
        let mut response = request.body(body).send().await?;
        let status = response.status();
        for name in &plan.count_headers {
            let value =
                response.headers().get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            header_values.push(value.unwrap_or_else(|| "(absent)".to_owned()));
        }
        // Read the whole body: the latency is the time to the last byte.
        if plan.ttft {
            let mut scan = SseScan::default();
            while let Some(chunk) = response.chunk().await? {
                if scan.feed(&chunk) {
                    ttft_us = Some(micros(Instant::now().saturating_duration_since(scheduled)));
                }
            }
            complete = scan.stopped;
        } else {
            let _ = response.bytes().await?;
        }
        Ok::<_, reqwest::Error>(status)
    }
    .await;
    let latency_us = micros(Instant::now().saturating_duration_since(scheduled));
    let outcome = match result {
        Ok(status) if status.is_success() && !complete => Outcome::Stream,
        Ok(status) if status.is_success() => Outcome::Ok { latency_us },
        Ok(status) => Outcome::Status { status: status.as_u16() },
        Err(err) => Outcome::Transport { message: error_chain(&err) },
    };
    Sample {
        outcome,
        send_lag_us,
        offset_us: micros(scheduled.saturating_duration_since(start)),
        ttft_us,
        header_values,
    }
}

fn error_chain(err: &dyn Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// The value at quantile `q` (0..=1) of sorted `values`, nearest-rank; 0 when empty.
fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let len = sorted.len();
    // Nearest rank: ceil(q * n), 1-based.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let rank = ((q * len as f64).ceil() as usize).clamp(1, len);
    sorted.get(rank - 1).copied().unwrap_or(0)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// p50 … max of sorted microseconds, in milliseconds.
fn percentiles_json(sorted: &[u64]) -> serde_json::Value {
    serde_json::json!({
        "p50": ms(quantile(sorted, 0.50)),
        "p90": ms(quantile(sorted, 0.90)),
        "p99": ms(quantile(sorted, 0.99)),
        "p99.9": ms(quantile(sorted, 0.999)),
        "max": ms(sorted.last().copied().unwrap_or(0)),
        "min": ms(sorted.first().copied().unwrap_or(0)),
    })
}

/// One `--window` of the schedule.
#[derive(Default)]
struct Window {
    ok: u64,
    errors: u64,
    latencies_us: Vec<u64>,
}

#[derive(Default)]
struct Report {
    label: String,
    url: String,
    target_rate: f64,
    duration_s: f64,
    bodies: usize,
    unique: bool,
    scheduled: u64,
    sent: u64,
    ok: u64,
    errors: u64,
    errors_status: u64,
    errors_transport: u64,
    errors_stream: u64,
    errors_skipped: u64,
    errors_unfinished: u64,
    status_counts: BTreeMap<u16, u64>,
    first_transport_error: Option<String>,
    latencies_us: Vec<u64>,
    /// `--ttft`: time to first token of the 2xx streams that had a content delta.
    ttft: bool,
    ttfts_us: Vec<u64>,
    /// Per `--count-header` name: value → count.
    header_counts: Vec<(String, BTreeMap<String, u64>)>,
    window_s: f64,
    windows: Vec<Window>,
    send_lag_max_us: u64,
    send_lag_p50_us: u64,
    send_lag_p99_us: u64,
    send_phase_s: f64,
    elapsed_s: f64,
}

impl Report {
    fn to_json(&self) -> serde_json::Value {
        let statuses: serde_json::Map<String, serde_json::Value> = self
            .status_counts
            .iter()
            .map(|(status, count)| (status.to_string(), serde_json::Value::from(*count)))
            .collect();
        let header_counts: serde_json::Map<String, serde_json::Value> = self
            .header_counts
            .iter()
            .map(|(name, counts)| (name.clone(), serde_json::json!(counts)))
            .collect();
        let mut json = serde_json::json!({
            "label": self.label,
            "url": self.url,
            "target_rate": self.target_rate,
            "duration_s": self.duration_s,
            "bodies": self.bodies,
            "unique": self.unique,
            "scheduled": self.scheduled,
            "sent": self.sent,
            "count": self.ok,
            "errors": self.errors,
            "errors_by_kind": {
                "status": self.errors_status,
                "transport": self.errors_transport,
                "stream": self.errors_stream,
                "skipped": self.errors_skipped,
                "unfinished": self.errors_unfinished,
            },
            "error_statuses": statuses,
            "first_transport_error": self.first_transport_error,
            "latency_ms": percentiles_json(&self.latencies_us),
            "header_counts": header_counts,
            "achieved_rate": rate(self.sent, self.send_phase_s),
            "ok_throughput": rate(self.ok, self.elapsed_s),
            "send_lag_ms": {
                "p50": ms(self.send_lag_p50_us),
                "p99": ms(self.send_lag_p99_us),
                "max": ms(self.send_lag_max_us),
            },
            "send_phase_s": self.send_phase_s,
            "elapsed_s": self.elapsed_s,
        });
        if self.ttft {
            let mut ttft = percentiles_json(&self.ttfts_us);
            ttft["count"] = serde_json::Value::from(self.ttfts_us.len());
            json["ttft_ms"] = ttft;
        }
        if self.window_s > 0.0 {
            let windows: Vec<serde_json::Value> = self
                .windows
                .iter()
                .enumerate()
                .map(|(k, w)| {
                    serde_json::json!({
                        "start_s": k as f64 * self.window_s,
                        "ok": w.ok,
                        "errors": w.errors,
                        "p50_ms": ms(quantile(&w.latencies_us, 0.50)),
                        "p99_ms": ms(quantile(&w.latencies_us, 0.99)),
                        "max_ms": ms(w.latencies_us.last().copied().unwrap_or(0)),
                    })
                })
                .collect();
            json["window_s"] = serde_json::Value::from(self.window_s);
            json["windows"] = serde_json::Value::from(windows);
        }
        json
    }

    fn print_text(&self) {
        let lat = &self.latencies_us;
        if !self.label.is_empty() {
            println!("== {} ==", self.label);
        }
        println!("target        {}", self.url);
        println!(
            "schedule      {:.1} req/s for {:.1} s ({} requests, {} bodies{})",
            self.target_rate,
            self.duration_s,
            self.scheduled,
            self.bodies,
            if self.unique { ", unique" } else { "" }
        );
        println!(
            "achieved rate {:.1} req/s sent; {:.1} req/s answered 2xx",
            rate(self.sent, self.send_phase_s),
            rate(self.ok, self.elapsed_s)
        );
        println!("count         {} (2xx)", self.ok);
        println!(
            "errors        {} (non-2xx {}, transport {}, stream {}, skipped {}, unfinished {})",
            self.errors,
            self.errors_status,
            self.errors_transport,
            self.errors_stream,
            self.errors_skipped,
            self.errors_unfinished
        );
        if !self.status_counts.is_empty() {
            let list: Vec<String> =
                self.status_counts.iter().map(|(status, count)| format!("{status}\u{d7}{count}")).collect();
            println!("statuses      {}", list.join(", "));
        }
        if let Some(err) = &self.first_transport_error {
            println!("first error   {err}");
        }
        for (name, counts) in &self.header_counts {
            let list: Vec<String> =
                counts.iter().map(|(value, count)| format!("{value}\u{d7}{count}")).collect();
            println!("{name}: {}", list.join(", "));
        }
        println!("latency (ms, from scheduled send time to last body byte, 2xx only)");
        print_percentiles(lat);
        if self.ttft {
            println!(
                "time to first token (ms, to the first content_block_delta; {} streams)",
                self.ttfts_us.len()
            );
            print_percentiles(&self.ttfts_us);
        }
        println!(
            "send lag      p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (driver start delay vs schedule)",
            ms(self.send_lag_p50_us),
            ms(self.send_lag_p99_us),
            ms(self.send_lag_max_us)
        );
        for (k, w) in self.windows.iter().enumerate() {
            println!(
                "window {:>7.1} s  ok {:>7}  errors {:>5}  p50 {:>9.3}  p99 {:>9.3} ms",
                k as f64 * self.window_s,
                w.ok,
                w.errors,
                ms(quantile(&w.latencies_us, 0.50)),
                ms(quantile(&w.latencies_us, 0.99))
            );
        }
    }
}

fn print_percentiles(sorted: &[u64]) {
    println!("  p50   {:>10.3}", ms(quantile(sorted, 0.50)));
    println!("  p90   {:>10.3}", ms(quantile(sorted, 0.90)));
    println!("  p99   {:>10.3}", ms(quantile(sorted, 0.99)));
    println!("  p99.9 {:>10.3}", ms(quantile(sorted, 0.999)));
    println!("  max   {:>10.3}", ms(sorted.last().copied().unwrap_or(0)));
}

fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 { count as f64 / seconds } else { 0.0 }
}

fn record(report: &mut Report, lags: &mut Vec<u64>, sample: Sample) {
    lags.push(sample.send_lag_us);
    for ((_, counts), value) in report.header_counts.iter_mut().zip(sample.header_values) {
        *counts.entry(value).or_insert(0) += 1;
    }
    let window = if report.window_s > 0.0 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        let k = (sample.offset_us as f64 / 1e6 / report.window_s) as usize;
        if report.windows.len() <= k {
            report.windows.resize_with(k + 1, Window::default);
        }
        report.windows.get_mut(k)
    } else {
        None
    };
    match sample.outcome {
        Outcome::Ok { latency_us } => {
            report.ok += 1;
            report.latencies_us.push(latency_us);
            if let Some(ttft) = sample.ttft_us {
                report.ttfts_us.push(ttft);
            }
            if let Some(w) = window {
                w.ok += 1;
                w.latencies_us.push(latency_us);
            }
            return;
        }
        Outcome::Status { status } => {
            report.errors_status += 1;
            *report.status_counts.entry(status).or_insert(0) += 1;
        }
        Outcome::Transport { message } => {
            report.errors_transport += 1;
            if report.first_transport_error.is_none() {
                report.first_transport_error = Some(message);
            }
        }
        Outcome::Stream => report.errors_stream += 1,
    }
    report.errors += 1;
    if let Some(w) = window {
        w.errors += 1;
    }
}

async fn run(args: Args) -> Result<Report, BoxError> {
    if !(args.rate.is_finite() && args.rate > 0.0) {
        return Err("--rate must be a positive number".into());
    }
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err("--duration must be a positive number of seconds".into());
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err("--timeout must be a positive number of seconds".into());
    }
    if !(args.drain_timeout.is_finite() && args.drain_timeout >= 0.0) {
        return Err("--drain-timeout must be zero or more seconds".into());
    }
    if !(args.window.is_finite() && args.window >= 0.0) {
        return Err("--window must be zero or more seconds".into());
    }
    reqwest::Url::parse(&args.url).map_err(|err| format!("--url {:?}: {err}", args.url))?;
    let bodies = Bodies::load(&args)?;
    let headers = parse_headers(&args.headers)?;
    let count_headers = args
        .count_headers
        .iter()
        .map(|name| {
            HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|err| format!("--count-header {name:?}: {err}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(args.max_in_flight)
        .pool_idle_timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs_f64(args.timeout))
        .timeout(Duration::from_secs_f64(args.timeout))
        .build()?;

    // Total number of requests in the schedule.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let total = (args.rate * args.duration).round().max(1.0) as u64;
    let interval_ns = 1e9 / args.rate;

    let mut report = Report {
        label: args.label.clone(),
        url: args.url.clone(),
        target_rate: args.rate,
        duration_s: args.duration,
        bodies: bodies.bodies.len(),
        unique: args.unique,
        scheduled: total,
        latencies_us: Vec::with_capacity(usize::try_from(total).unwrap_or(0)),
        ttft: args.ttft,
        header_counts: count_headers.iter().map(|name| (name.as_str().to_owned(), BTreeMap::new())).collect(),
        window_s: args.window,
        ..Report::default()
    };
    let mut lags: Vec<u64> = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    let line_header = args
        .line_header
        .as_deref()
        .map(|name| {
            HeaderName::from_bytes(name.as_bytes()).map_err(|err| format!("--line-header {name:?}: {err}"))
        })
        .transpose()?;
    let plan = Arc::new(Plan {
        client,
        url: args.url.clone(),
        headers,
        line_header,
        bodies,
        ttft: args.ttft,
        count_headers,
    });

    // The pacer: a plain OS thread that sleeps to each scheduled instant (the kernel's timers are
    // far finer than tokio's 1 ms wheel) and hands the request to the runtime. It never waits for
    // an answer, so the schedule does not bend to the server.
    let (results_tx, mut results_rx) = tokio::sync::mpsc::unbounded_channel::<Sample>();
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<Duration>();
    let sent = Arc::new(AtomicU64::new(0));
    let skipped = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let in_flight = Arc::new(Semaphore::new(args.max_in_flight.max(1)));
    let runtime = tokio::runtime::Handle::current();
    let start = Instant::now();
    {
        let (sent, skipped, stop) = (sent.clone(), skipped.clone(), stop.clone());
        std::thread::Builder::new().name("loadgen-pacer".to_owned()).spawn(move || {
            for i in 0..total {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss
                )]
                let scheduled = start + Duration::from_nanos((i as f64 * interval_ns) as u64);
                let now = Instant::now();
                if scheduled > now {
                    std::thread::sleep(scheduled - now);
                }
                let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                    skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                sent.fetch_add(1, Ordering::Relaxed);
                let (plan, results) = (plan.clone(), results_tx.clone());
                runtime.spawn(async move {
                    let sample = one_request(plan, i, start, scheduled).await;
                    drop(permit);
                    let _ = results.send(sample);
                });
            }
            let _ = done_tx.send(start.elapsed());
            // `results_tx` drops here: once every request task has answered too, the
            // results channel closes.
        })?;
    }

    // Collect until every request has answered, or until --drain-timeout after the send phase
    // (with a safety bound in case the pacer itself is starved of CPU).
    let drain = Duration::from_secs_f64(args.drain_timeout);
    let safety =
        tokio::time::Instant::from_std(start + Duration::from_secs_f64(args.duration * 2.0 + 10.0) + drain);
    let mut deadline = safety;
    let mut send_phase: Option<Duration> = None;
    let mut received: u64 = 0;
    loop {
        tokio::select! {
            sample = results_rx.recv() => match sample {
                Some(sample) => {
                    received += 1;
                    record(&mut report, &mut lags, sample);
                }
                None => break,
            },
            phase = &mut done_rx, if send_phase.is_none() => {
                let phase = phase.unwrap_or_else(|_| start.elapsed());
                send_phase = Some(phase);
                deadline = (tokio::time::Instant::now() + drain).min(safety);
            }
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let send_phase = match send_phase {
        Some(phase) => phase,
        None => done_rx.try_recv().unwrap_or_else(|_| start.elapsed()),
    };
    // The last request owns the slot of one interval too: n requests span n intervals.
    report.send_phase_s = send_phase.as_secs_f64() + 1.0 / args.rate;
    report.sent = sent.load(Ordering::Relaxed);
    let skipped = skipped.load(Ordering::Relaxed);
    report.errors_skipped = skipped;
    report.errors_unfinished = report.sent.saturating_sub(received);
    report.errors += skipped + report.errors_unfinished;
    report.elapsed_s = start.elapsed().as_secs_f64();

    report.latencies_us.sort_unstable();
    report.ttfts_us.sort_unstable();
    for window in &mut report.windows {
        window.latencies_us.sort_unstable();
    }
    lags.sort_unstable();
    report.send_lag_p50_us = quantile(&lags, 0.50);
    report.send_lag_p99_us = quantile(&lags, 0.99);
    report.send_lag_max_us = lags.last().copied().unwrap_or(0);
    Ok(report)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let json = args.json;
    match run(args).await {
        Ok(report) => {
            if json {
                println!("{}", report.to_json());
            } else {
                report.print_text();
            }
            std::process::ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("loadgen: {}", error_chain(&*err));
            std::process::ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_scan_finds_markers_split_across_chunks() {
        let mut scan = SseScan::default();
        assert!(!scan.feed(b"event: message_start\ndata: {}\n\nevent: content_blo"));
        assert!(scan.feed(b"ck_delta\ndata: {}\n\n"));
        assert!(!scan.feed(b"event: content_block_delta\ndata: {}\n\nevent: message_st"));
        assert!(!scan.stopped);
        assert!(!scan.feed(b"op\ndata: {}\n\n"));
        assert!(scan.stopped);
    }

    #[test]
    fn unique_bodies_differ_per_request() {
        let bodies = Bodies {
            bodies: vec![Bytes::from_static(b"{\"q\":\"order {n}\"}")],
            line_values: vec![None],
            nonce: Some("ab".into()),
        };
        assert_eq!(bodies.get(7), Bytes::from_static(b"{\"q\":\"order ab-7\"}"));
        let plain = Bodies {
            bodies: vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")],
            line_values: vec![Some(HeaderValue::from_static("u-1")), None],
            nonce: None,
        };
        assert_eq!(plain.get(3), Bytes::from_static(b"b"));
        assert_eq!(plain.line_value(2), Some(&HeaderValue::from_static("u-1")));
        assert_eq!(plain.line_value(3), None);
    }
}
