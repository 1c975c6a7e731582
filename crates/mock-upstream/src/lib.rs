//! `memgate mock-upstream`: a stand-in Anthropic API for tests, demos and load tests.
//!
//! The contract is docs/mock-upstream.md. A request travels like this:
//!
//! 1. `record::Recorded` (an extractor on every `/v1/` route) reads the whole body, takes the next
//!    sequence number and appends an entry to the shared `Recorder`, before any delay, so a test
//!    can see a request that is still waiting (with `--no-record` it only counts it).
//! 2. `handlers` waits `--latency-ms` (and the slow model's delay), parses the body, applies
//!    `--fail-marker` and the fault models (`reply::ApiError` holds the status/type table).
//! 3. `answer::Answer` is the deterministic message (id hashed from the body, text, usage); it
//!    renders either the complete JSON or the SSE script (`stream::Step`s).
//! 4. `stream::body` plays the script with real delays. It owns a `record::StreamGuard` that
//!    counts events as they are handed to hyper and, when the body is dropped before its end,
//!    marks the entry `client_closed`: that is how tests learn the client went away.
//!
//! `run` adds the listener and a graceful shutdown: on SIGTERM or Ctrl-C the long streams end
//! early and cleanly, and connections get `SHUTDOWN_GRACE` to finish.

mod answer;
mod handlers;
mod memory;
mod memory_file;
mod observe;
mod record;
mod reply;
mod stream;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_streams;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use record::Recorder;

/// How long `run` waits for open connections after the shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

const DEFAULT_LISTEN: &str = "127.0.0.1:9090";
const DEFAULT_DELTAS: usize = 5;
const DEFAULT_SLOW_FIRST_BYTE_MS: u64 = 3000;
const DEFAULT_PAUSE_MS: u64 = 2000;
const DEFAULT_FLAKY_FAILURES: usize = 2;

/// CLI flags of `memgate mock-upstream` (see docs/mock-upstream.md).
#[derive(clap::Args, Debug, Clone)]
pub struct MockArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Delay before the answer's headers, every model.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Streaming: delay between `message_start` and the first content delta.
    #[arg(long, default_value_t = 0)]
    pub ttft_ms: u64,
    /// Streaming: delay between deltas.
    #[arg(long, default_value_t = 0)]
    pub delta_interval_ms: u64,
    /// How many text deltas the answer text is split into.
    #[arg(long, default_value_t = DEFAULT_DELTAS)]
    pub deltas: usize,
    /// The answer text repeated to at least this many bytes (0: as it is), so that `--deltas`
    /// can split it into tens of thousands of deltas.
    #[arg(long, default_value_t = 0)]
    pub text_bytes: usize,
    /// The delay of the `mock-slow-first-byte` model.
    #[arg(long, default_value_t = DEFAULT_SLOW_FIRST_BYTE_MS)]
    pub slow_first_byte_ms: u64,
    /// The pause of the `mock-pause` model.
    #[arg(long, default_value_t = DEFAULT_PAUSE_MS)]
    pub pause_ms: u64,
    /// Answer 500 `api_error` to any Messages request whose `system` contains this text.
    #[arg(long)]
    pub fail_marker: Option<String>,
    /// The only keys accepted (`x-api-key` or `Authorization: Bearer`), as Anthropic accepts only
    /// its own: any other gets 401 `authentication_error`. Repeatable; none: every key is fine.
    #[arg(long = "api-key", value_name = "KEY")]
    pub api_keys: Vec<String>,
    /// Count requests without keeping them (`/_mock/requests` lists none): for long load tests,
    /// where a recording mock grows by every request it answered.
    #[arg(long)]
    pub no_record: bool,
    /// How many requests each `mock-flaky-*` model fails before it answers normally.
    #[arg(long, default_value_t = DEFAULT_FLAKY_FAILURES)]
    pub flaky_failures: usize,
}

impl Default for MockArgs {
    /// The documented defaults, with `listen` on 127.0.0.1:9090.
    fn default() -> Self {
        MockArgs {
            listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            latency_ms: 0,
            ttft_ms: 0,
            delta_interval_ms: 0,
            deltas: DEFAULT_DELTAS,
            text_bytes: 0,
            slow_first_byte_ms: DEFAULT_SLOW_FIRST_BYTE_MS,
            pause_ms: DEFAULT_PAUSE_MS,
            fail_marker: None,
            api_keys: Vec::new(),
            no_record: false,
            flaky_failures: DEFAULT_FLAKY_FAILURES,
        }
    }
}

/// What every handler shares: the settings, the recording and the shutdown signal.
#[derive(Clone)]
struct MockState {
    args: Arc<MockArgs>,
    recorder: Recorder,
    /// Cancelled when `run` is asked to stop, so that `mock-long-stream` ends early.
    shutdown: CancellationToken,
    /// Requests seen per `mock-flaky-*` model.
    flaky: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

impl MockState {
    fn new(args: MockArgs) -> Self {
        let recorder = Recorder::new(!args.no_record);
        MockState {
            args: Arc::new(args),
            recorder,
            shutdown: CancellationToken::new(),
            flaky: Arc::default(),
        }
    }
}

/// The mock's axum Router, for in-process tests.
pub fn router(args: MockArgs) -> Router {
    build_router(MockState::new(args))
}

fn build_router(state: MockState) -> Router {
    let echo = handlers::echo;
    Router::new()
        .route("/v1/messages", post(handlers::messages).fallback(echo))
        .route("/v1/messages/count_tokens", post(handlers::count_tokens).fallback(echo))
        .route("/v1/models", get(handlers::models).fallback(echo))
        .route("/_mock/requests", get(handlers::list_requests).delete(handlers::forget_requests))
        .fallback(handlers::fallback)
        .with_state(state)
}

/// Binds `args.listen`, calls `on_ready(bound_addr)` once listening, serves until SIGTERM or
/// Ctrl-C (graceful), then returns.
pub async fn run(args: MockArgs, on_ready: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    on_ready(listener.local_addr()?);
    serve(listener, MockState::new(args), shutdown_signal()).await
}

/// Serves until `stop` completes, then lets open connections finish for at most
/// `SHUTDOWN_GRACE` (long streams are told to end at once).
async fn serve(
    listener: tokio::net::TcpListener,
    state: MockState,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let token = state.shutdown.clone();
    // TCP_NODELAY: spaced SSE events must not wait for the client's delayed ACK (as memgate).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, build_router(state))
        .with_graceful_shutdown(token.clone().cancelled_owned())
        .into_future();
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => return result,
        () = stop => token.cancel(),
    }
    tracing::info!("mock-upstream: stopping, waiting for open connections");
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!("mock-upstream: connections still open after {SHUTDOWN_GRACE:?}, stopping anyway");
            Ok(())
        }
    }
}

/// Completes on Ctrl-C or (on Unix) SIGTERM. A signal that cannot be watched is logged and
/// ignored; the other one still works.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::warn!("mock-upstream: cannot watch Ctrl-C: {err}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(err) => {
                tracing::warn!("mock-upstream: cannot watch SIGTERM: {err}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
