//! Accepting and serving connections with hyper's server (HTTP/1 and HTTP/2), and the two
//! deadlines `axum::serve` does not offer. A connection is always in one of three phases:
//!
//! - idle: nothing in flight and no byte of a next request yet (also just after it opened).
//!   After `limits.connection_idle_timeout_ms` it is closed gracefully: an HTTP/1 connection at
//!   once, an HTTP/2 one with GOAWAY. Longer than a load balancer's own idle timeout (60 s for
//!   most), so the balancer closes first and never sends on a connection memgate is closing.
//! - reading a head: the first byte of an HTTP/1 request arrived, the end of its headers has not.
//!   Cut after `limits.header_read_timeout_ms`: a client that sends its headers a byte at a time
//!   (slowloris) holds a connection no longer than that. HTTP/2 frames carry no request until
//!   whole, so an HTTP/2 connection stays idle until its first stream opens.
//! - busy: a request is in flight, from the end of its headers until its answer's body has been
//!   sent. No connection deadline then: the body has its own (`body`), the upstream its own, and
//!   a stream may run for many minutes.
//!
//! Each request carries the client's address (`ConnectInfo`) and the hosts its listener answers
//! for (`allowed_hosts`). Shutdown: when `signal` resolves the listener stops accepting, every
//! connection is asked to finish (HTTP/1 closes after the answer in flight, HTTP/2 sends GOAWAY),
//! and `serve` returns once the last one has closed.

use crate::allowed_hosts::AllowedHosts;
use crate::workers::Workers;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The two connection deadlines (see the module comment).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header_read: Duration,
    pub idle: Duration,
}

/// Serves `app` on `listener` until `signal` resolves, then lets the open connections finish.
/// Each connection is served on one of `workers`, in turn.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    hosts: AllowedHosts,
    timeouts: Timeouts,
    signal: impl Future<Output = ()>,
    workers: Arc<Workers>,
) {
    let connections = TaskTracker::new();
    let finish = CancellationToken::new();
    let mut signal = pin!(signal);
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    accept_failed(err).await;
                    continue;
                }
            },
            () = &mut signal => break,
        };
        no_delay(&tcp);
        // Accepted on this runtime, served on a worker's: the socket leaves this runtime's
        // reactor and joins the worker's there.
        let tcp = match tcp.into_std() {
            Ok(tcp) => tcp,
            Err(err) => {
                tracing::debug!(error = %err, %remote, "could not hand a connection to a worker");
                continue;
            }
        };
        let connection = Connection { app: app.clone(), hosts: hosts.clone(), remote, timeouts };
        let finish = finish.clone();
        workers.spawn(&connections, async move {
            match TcpStream::from_std(tcp) {
                Ok(tcp) => connection.serve(tcp, finish).await,
                Err(err) => tracing::debug!(error = %err, %remote, "a worker could not take a connection"),
            }
        });
    }
    drop(listener);
    finish.cancel();
    connections.close();
    connections.wait().await;
}

/// Small writes go out at once: an SSE event is a few hundred bytes, and Nagle's algorithm would
/// hold each one back until the client's delayed ACK (~40 ms added to time to first token,
/// measured in docs/benchmarks-load.md).
fn no_delay(tcp: &TcpStream) {
    if let Err(err) = tcp.set_nodelay(true) {
        tracing::debug!(error = %err, "could not set TCP_NODELAY on a connection");
    }
}

/// A connection the peer gave up on before it was accepted is the peer's affair; anything else
/// (out of file descriptors) is waited out, so the loop does not spin on it.
async fn accept_failed(err: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(err.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::warn!(error = %err, "could not accept a connection; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

struct Connection {
    app: Router,
    hosts: AllowedHosts,
    remote: SocketAddr,
    timeouts: Timeouts,
}

impl Connection {
    async fn serve(self, tcp: TcpStream, finish: CancellationToken) {
        let Connection { app, hosts, remote, timeouts } = self;
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched { tcp, activity: activity.clone() });
        let app = TowerToHyperService::new(app);
        let watch = activity.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(remote));
            request.extensions_mut().insert(hosts.clone());
            let in_flight = InFlight::begin(&watch);
            let answer = hyper::service::Service::call(&app, request);
            async move {
                let response: Response<Body> = answer.await?;
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _in_flight: in_flight }))
            }
        });
        let builder = auto::Builder::new(TokioExecutor::new());
        let mut conn = pin!(builder.serve_connection(io, service));
        let mut closing = false;
        loop {
            let changed = activity.changed.notified();
            let deadline = activity.deadline(timeouts);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(err) = result {
                        tracing::debug!(error = %err, %remote, "connection ended with an error");
                    }
                    return;
                }
                () = finish.cancelled(), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                () = changed => {}
                () = at(deadline.map(|(when, _)| when)) => match deadline.map(|(_, phase)| phase) {
                    Some(Phase::ReadingHead) => {
                        tracing::debug!(%remote, "request headers did not arrive in time; closing");
                        return;
                    }
                    // Asked once to close and still open an idle period later: cut.
                    _ if closing => return,
                    _ => {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                        activity.restart_idle();
                    }
                },
            }
        }
    }
}

async fn at(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Idle,
    ReadingHead,
}

/// What a connection is doing, as its reads and its requests tell.
struct Activity {
    state: Mutex<State>,
    changed: Notify,
}

struct State {
    in_flight: usize,
    /// Since when nothing has been in flight (the connection's start, or its last answer's end).
    idle_since: Instant,
    /// When the first byte of the next request's head arrived.
    head_since: Option<Instant>,
    /// The connection's first three bytes: `PRI` opens HTTP/2's preface.
    first: [u8; 3],
    first_len: usize,
}

impl Activity {
    fn new() -> Activity {
        let state =
            State { in_flight: 0, idle_since: Instant::now(), head_since: None, first: [0; 3], first_len: 0 };
        Activity { state: Mutex::new(state), changed: Notify::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn received(&self, bytes: &[u8]) {
        let mut state = self.lock();
        let taken = bytes.len().min(3 - state.first_len);
        let at = state.first_len;
        state.first[at..at + taken].copy_from_slice(&bytes[..taken]);
        state.first_len += taken;
        let http2 = state.first_len == 3 && state.first == *b"PRI";
        if state.in_flight == 0 && state.head_since.is_none() && !http2 {
            state.head_since = Some(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }

    /// When the connection's current phase ends, if it is idle or reading a head.
    fn deadline(&self, timeouts: Timeouts) -> Option<(Instant, Phase)> {
        let state = self.lock();
        if state.in_flight > 0 {
            return None;
        }
        Some(match state.head_since {
            Some(since) => (since + timeouts.header_read, Phase::ReadingHead),
            None => (state.idle_since + timeouts.idle, Phase::Idle),
        })
    }

    fn restart_idle(&self) {
        self.lock().idle_since = Instant::now();
    }
}

/// A request in flight on its connection, from its headers until its answer is sent (or dropped).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(activity: &Arc<Activity>) -> InFlight {
        let mut state = activity.lock();
        state.in_flight += 1;
        state.head_since = None;
        drop(state);
        activity.changed.notify_one();
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
            state.head_since = None;
        }
        drop(state);
        self.0.changed.notify_one();
    }
}

/// An answer's body that keeps its request in flight until it has been sent.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The client's socket, telling `Activity` when bytes arrive.
struct Watched {
    tcp: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.received(&buf.filled()[before..]);
        }
        poll
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
