//! The upstream client: a pooled `reqwest::Client` for each server worker and one for the rest
//! of the process, three timeouts and no total one. Connect and first-byte timeouts bound the
//! wait for an answer's headers; the body is relayed chunk by chunk as it arrives, and only a
//! silence longer than the idle timeout ends it, so a long stream is never cut while events
//! (Anthropic's `ping`s included) keep coming.
//!
//! Cancellation: the answer body owns the upstream response. When the client goes away, hyper
//! drops that body, which drops the upstream response, which closes the upstream connection
//! (HTTP/1) or resets the stream (HTTP/2), so the upstream stops generating for nobody.

pub mod headers;
pub mod wire;

use crate::config::UpstreamConfig;
use crate::error::{ApiError, ErrorKind, StartupError};
use crate::observability::UpstreamLatency;
use crate::workers;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use headers::downstream_response_headers;
use std::time::{Duration, Instant};

pub struct Upstream {
    /// One client, with its own pool of connections, per server worker (`workers::current`),
    /// then one for every other thread. A pooled connection is served by a task on the runtime
    /// that opened it: a request that took one opened by another worker would wake that
    /// worker's thread for each of its reads and writes, which is what the workers avoid.
    clients: Box<[reqwest::Client]>,
    /// The upstream's base URL, parsed once; `base_path` is its path without the trailing `/`.
    base: reqwest::Url,
    base_path: String,
    first_byte_timeout: Duration,
    stream_idle_timeout: Duration,
}

/// What goes upstream: the caller's method, path and query, filtered headers and a body.
pub struct UpstreamRequest {
    pub method: Method,
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Option<reqwest::Body>,
}

impl Upstream {
    pub fn new(config: &UpstreamConfig) -> Result<Upstream, StartupError> {
        let clients = (0..=workers::count())
            .map(|_| {
                reqwest::Client::builder()
                    .connect_timeout(config.connect_timeout)
                    .pool_idle_timeout(config.pool_idle_timeout)
                    .pool_max_idle_per_host(config.pool_max_idle_per_host)
                    .tcp_nodelay(true)
                    // A gateway relays answers as they are; a redirect is the client's to follow.
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|err| StartupError::UpstreamClient(err.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let base = reqwest::Url::parse(&config.base_url)
            .map_err(|err| StartupError::UpstreamClient(format!("{}: {err}", config.base_url)))?;
        let base_path = base.path().trim_end_matches('/').to_owned();
        Ok(Upstream {
            clients,
            base,
            base_path,
            first_byte_timeout: config.first_byte_timeout,
            stream_idle_timeout: config.stream_idle_timeout,
        })
    }

    /// Sends the request and returns the upstream's answer — status, headers and a body that is
    /// relayed as it arrives — unmodified but for hop-by-hop headers.
    pub async fn send(&self, request: UpstreamRequest) -> Result<Response<Body>, ApiError> {
        let url = self.url_for(&request.path_and_query);
        let started = Instant::now();
        let mut builder = self.client().request(request.method, url).headers(request.headers);
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        let pending = builder.send();
        let upstream = match tokio::time::timeout(self.first_byte_timeout, pending).await {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => return Err(classify_send_error(&err)),
            Err(_) => {
                return Err(ApiError::new(
                    ErrorKind::UpstreamTimeout,
                    format!(
                        "the upstream sent no answer within {} ms (upstream.first_byte_timeout_ms)",
                        self.first_byte_timeout.as_millis()
                    ),
                ));
            }
        };
        let latency = started.elapsed();

        let status = upstream.status();
        let mut headers = downstream_response_headers(upstream.headers());
        let is_event_stream = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_event_stream {
            // Tells nginx-like proxies in front of memgate not to buffer the stream either.
            headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        }
        let body = Body::from_stream(with_idle_timeout(upstream.bytes_stream(), self.stream_idle_timeout));
        let mut response = Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        response.extensions_mut().insert(UpstreamLatency(latency));
        Ok(response)
    }
}

impl Upstream {
    /// This thread's client: its worker's, or the one for every other thread.
    fn client(&self) -> &reqwest::Client {
        let last = self.clients.len() - 1;
        &self.clients[workers::current().map_or(last, |worker| worker.min(last))]
    }

    /// The upstream URL of a caller's path and query: the base URL with its path and query set.
    /// The same URL as parsing the two joined, without parsing the scheme and host (and their
    /// IDNA rules) again on every request (2 % of a pass-through's CPU in its profile).
    fn url_for(&self, path_and_query: &str) -> reqwest::Url {
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path_and_query, None),
        };
        let mut url = self.base.clone();
        if self.base_path.is_empty() {
            url.set_path(path);
        } else {
            url.set_path(&format!("{}{path}", self.base_path));
        }
        url.set_query(query);
        url
    }

    /// Sends `request` and returns only the answer's status (a probe: its body is dropped
    /// unread, which closes or returns the connection).
    pub async fn status_of(&self, request: UpstreamRequest) -> Result<u16, ApiError> {
        self.send(request).await.map(|answer| answer.status().as_u16())
    }
}

fn classify_send_error(err: &reqwest::Error) -> ApiError {
    tracing::warn!(error = %err, "upstream request failed");
    if err.is_timeout() {
        ApiError::new(
            ErrorKind::UpstreamTimeout,
            "the upstream did not answer in time (upstream.connect_timeout_ms)",
        )
    } else if err.is_connect() {
        ApiError::new(
            ErrorKind::UpstreamUnreachable,
            "the upstream is unreachable: memgate could not connect to it (check MEMGATE_UPSTREAM_URL)",
        )
    } else {
        ApiError::new(ErrorKind::UpstreamUnreachable, "the upstream closed the connection before answering")
    }
}

/// Relays `body` chunk by chunk, ending it with an error when no chunk arrives for `idle`.
fn with_idle_timeout(
    body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let body = Box::pin(body);
    futures_util::stream::unfold(Some(body), move |state| async move {
        let mut body = state?;
        match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(body))),
            Ok(Some(Err(err))) => {
                tracing::warn!(error = %err, "upstream body broke off");
                Some((Err(std::io::Error::other("the upstream broke off the answer")), None))
            }
            Ok(None) => None,
            Err(_) => {
                tracing::warn!(idle_ms = idle.as_millis() as u64, "upstream stream idle timeout");
                let err = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the upstream stream went silent (upstream.stream_idle_timeout_ms)",
                );
                Some((Err(err), None))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{Upstream, UpstreamRequest};
    use crate::config::UpstreamConfig;
    use crate::workers::{self, Workers};
    use axum::http::{HeaderMap, Method};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_util::task::TaskTracker;

    /// An upstream that answers every request head with a short 200 and counts its connections.
    async fn counting_upstream(tasks: &TaskTracker) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let (count, inner) = (accepted.clone(), tasks.clone());
        tasks.spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                inner.spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while let Ok(read @ 1..) = tcp.read(&mut buf).await {
                        head.extend_from_slice(&buf[..read]);
                        if head.windows(4).any(|w| w == b"\r\n\r\n") {
                            head.clear();
                            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if tcp.write_all(answer).await.is_err() {
                                break;
                            }
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    #[tokio::test]
    async fn each_worker_sends_through_connections_of_its_own_and_keeps_them() {
        let tasks = TaskTracker::new();
        let (base_url, accepted) = counting_upstream(&tasks).await;
        let upstream =
            Arc::new(Upstream::new(&UpstreamConfig { base_url, ..UpstreamConfig::default() }).unwrap());
        let workers = Workers::start().unwrap();
        let sent = TaskTracker::new();
        // One request at a time, each worker in turn, twice round: a pool shared by the workers
        // would open one connection and lend it to all of them.
        for _ in 0..workers::count() * 2 {
            let upstream = upstream.clone();
            let (done, finished) = tokio::sync::oneshot::channel();
            workers.spawn(&sent, async move {
                let request = UpstreamRequest {
                    method: Method::GET,
                    path_and_query: "/v1/models".to_owned(),
                    headers: HeaderMap::new(),
                    body: None,
                };
                let answer = upstream.send(request).await.unwrap();
                let body = axum::body::to_bytes(answer.into_body(), 1024).await.unwrap();
                done.send(body).unwrap();
            });
            assert_eq!(finished.await.unwrap(), "ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), workers::count());
    }

    #[test]
    fn a_request_goes_to_the_url_that_joining_base_path_and_query_names() {
        let paths = [
            "/v1/messages",
            "/v1/messages?beta=true",
            "/v1/messages?beta=true&x=a%20b",
            "/v1/files/a%2Fb/content",
            "/v1/models?limit=5&after_id=m%C3%A9",
            "/v1/caf%C3%A9",
            "/v1/../v1/models",
            "/v1/messages?",
            "/",
        ];
        for base in ["https://api.anthropic.com", "http://127.0.0.1:9", "http://gw.example/anthropic/v2"] {
            let config = UpstreamConfig { base_url: base.to_owned(), ..UpstreamConfig::default() };
            let upstream = Upstream::new(&config).unwrap();
            for path in paths {
                let joined = reqwest::Url::parse(&format!("{base}{path}")).unwrap();
                assert_eq!(upstream.url_for(path), joined, "{base} + {path}");
            }
        }
    }
}
