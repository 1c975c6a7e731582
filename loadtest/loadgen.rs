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
//! Build: `cargo build --release --example loadgen`; see `loadtest/README.md`.
#![allow(clippy::print_stdout)]

use clap::Parser;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::error::Error;
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
    /// File whose bytes are the request body (sent with `content-type: application/json`).
    #[arg(long)]
    body_file: std::path::PathBuf,
    /// Extra request header, `name: value`; repeatable.
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
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

/// What happened to one request.
enum Outcome {
    /// A 2xx answer, fully read: latency from the scheduled send time, in microseconds.
    Ok { latency_us: u64 },
    /// A non-2xx answer, fully read.
    Status { status: u16 },
    /// Connect, send, read or timeout failure.
    Transport { message: String },
}

struct Sample {
    outcome: Outcome,
    /// How late the request actually started compared with its schedule, in microseconds.
    send_lag_us: u64,
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

async fn one_request(
    client: reqwest::Client,
    url: Arc<str>,
    body: bytes::Bytes,
    headers: HeaderMap,
    scheduled: Instant,
) -> Sample {
    let send_lag_us = micros(Instant::now().saturating_duration_since(scheduled));
    let result = async {
        let response = client.post(&*url).headers(headers).body(body).send().await?;
        let status = response.status();
        // Read the whole body: the latency is the time to the last byte.
        let _ = response.bytes().await?;
        Ok::<_, reqwest::Error>(status)
    }
    .await;
    let latency_us = micros(Instant::now().saturating_duration_since(scheduled));
    let outcome = match result {
        Ok(status) if status.is_success() => Outcome::Ok { latency_us },
        Ok(status) => Outcome::Status { status: status.as_u16() },
        Err(err) => Outcome::Transport { message: error_chain(&err) },
    };
    Sample { outcome, send_lag_us }
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

#[derive(Default)]
struct Report {
    label: String,
    url: String,
    target_rate: f64,
    duration_s: f64,
    scheduled: u64,
    sent: u64,
    ok: u64,
    errors: u64,
    errors_status: u64,
    errors_transport: u64,
    errors_skipped: u64,
    errors_unfinished: u64,
    status_counts: std::collections::BTreeMap<u16, u64>,
    first_transport_error: Option<String>,
    latencies_us: Vec<u64>,
    send_lag_max_us: u64,
    send_lag_p50_us: u64,
    send_lag_p99_us: u64,
    send_phase_s: f64,
    elapsed_s: f64,
}

impl Report {
    fn to_json(&self) -> serde_json::Value {
        let ms = |us: u64| us as f64 / 1000.0;
        let lat = &self.latencies_us;
        let statuses: serde_json::Map<String, serde_json::Value> = self
            .status_counts
            .iter()
            .map(|(status, count)| (status.to_string(), serde_json::Value::from(*count)))
            .collect();
        serde_json::json!({
            "label": self.label,
            "url": self.url,
            "target_rate": self.target_rate,
            "duration_s": self.duration_s,
            "scheduled": self.scheduled,
            "sent": self.sent,
            "count": self.ok,
            "errors": self.errors,
            "errors_by_kind": {
                "status": self.errors_status,
                "transport": self.errors_transport,
                "skipped": self.errors_skipped,
                "unfinished": self.errors_unfinished,
            },
            "error_statuses": statuses,
            "first_transport_error": self.first_transport_error,
            "latency_ms": {
                "p50": ms(quantile(lat, 0.50)),
                "p90": ms(quantile(lat, 0.90)),
                "p99": ms(quantile(lat, 0.99)),
                "p99.9": ms(quantile(lat, 0.999)),
                "max": ms(lat.last().copied().unwrap_or(0)),
                "min": ms(lat.first().copied().unwrap_or(0)),
            },
            "achieved_rate": rate(self.sent, self.send_phase_s),
            "ok_throughput": rate(self.ok, self.elapsed_s),
            "send_lag_ms": {
                "p50": ms(self.send_lag_p50_us),
                "p99": ms(self.send_lag_p99_us),
                "max": ms(self.send_lag_max_us),
            },
            "send_phase_s": self.send_phase_s,
            "elapsed_s": self.elapsed_s,
        })
    }

    fn print_text(&self) {
        let ms = |us: u64| us as f64 / 1000.0;
        let lat = &self.latencies_us;
        if !self.label.is_empty() {
            println!("== {} ==", self.label);
        }
        println!("target        {}", self.url);
        println!(
            "schedule      {:.1} req/s for {:.1} s ({} requests)",
            self.target_rate, self.duration_s, self.scheduled
        );
        println!(
            "achieved rate {:.1} req/s sent; {:.1} req/s answered 2xx",
            rate(self.sent, self.send_phase_s),
            rate(self.ok, self.elapsed_s)
        );
        println!("count         {} (2xx)", self.ok);
        println!(
            "errors        {} (non-2xx {}, transport {}, skipped {}, unfinished {})",
            self.errors,
            self.errors_status,
            self.errors_transport,
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
        println!("latency (ms, from scheduled send time to last body byte, 2xx only)");
        println!("  p50   {:>10.3}", ms(quantile(lat, 0.50)));
        println!("  p90   {:>10.3}", ms(quantile(lat, 0.90)));
        println!("  p99   {:>10.3}", ms(quantile(lat, 0.99)));
        println!("  p99.9 {:>10.3}", ms(quantile(lat, 0.999)));
        println!("  max   {:>10.3}", ms(lat.last().copied().unwrap_or(0)));
        println!(
            "send lag      p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (driver start delay vs schedule)",
            ms(self.send_lag_p50_us),
            ms(self.send_lag_p99_us),
            ms(self.send_lag_max_us)
        );
    }
}

fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 { count as f64 / seconds } else { 0.0 }
}

fn record(report: &mut Report, lags: &mut Vec<u64>, sample: Sample) {
    lags.push(sample.send_lag_us);
    match sample.outcome {
        Outcome::Ok { latency_us } => {
            report.ok += 1;
            report.latencies_us.push(latency_us);
        }
        Outcome::Status { status } => {
            report.errors += 1;
            report.errors_status += 1;
            *report.status_counts.entry(status).or_insert(0) += 1;
        }
        Outcome::Transport { message } => {
            report.errors += 1;
            report.errors_transport += 1;
            if report.first_transport_error.is_none() {
                report.first_transport_error = Some(message);
            }
        }
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
    let url: Arc<str> = Arc::from(args.url.as_str());
    reqwest::Url::parse(&url).map_err(|err| format!("--url {:?}: {err}", args.url))?;
    let body = bytes::Bytes::from(
        std::fs::read(&args.body_file)
            .map_err(|err| format!("--body-file {}: {err}", args.body_file.display()))?,
    );
    let headers = parse_headers(&args.headers)?;
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
        scheduled: total,
        latencies_us: Vec::with_capacity(usize::try_from(total).unwrap_or(0)),
        ..Report::default()
    };
    let mut lags: Vec<u64> = Vec::with_capacity(usize::try_from(total).unwrap_or(0));

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
                let (client, url, body, headers, results) =
                    (client.clone(), url.clone(), body.clone(), headers.clone(), results_tx.clone());
                runtime.spawn(async move {
                    let sample = one_request(client, url, body, headers, scheduled).await;
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
