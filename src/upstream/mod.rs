//! The upstream client: one pooled `reqwest::Client` for the process, three timeouts and no
//! total one. Connect and first-byte timeouts bound the wait for an answer's headers; the body is
//! relayed chunk by chunk as it arrives, and only a silence longer than the idle timeout ends it,
//! so a long stream is never cut while events (Anthropic's `ping`s included) keep coming.
//!
//! Cancellation: the answer body owns the upstream response. When the client goes away, hyper
//! drops that body, which drops the upstream response, which closes the upstream connection
//! (HTTP/1) or resets the stream (HTTP/2), so the upstream stops generating for nobody.

pub mod headers;
pub mod wire;

use crate::config::UpstreamConfig;
use crate::error::{ApiError, ErrorKind, StartupError};
use crate::observability::UpstreamLatency;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use headers::downstream_response_headers;
use std::time::{Duration, Instant};

pub struct Upstream {
    client: reqwest::Client,
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
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_max_idle_per_host(config.pool_max_idle_per_host)
            .tcp_nodelay(true)
            // A gateway relays answers as they are; a redirect is the client's to follow.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| StartupError::UpstreamClient(err.to_string()))?;
        let base = reqwest::Url::parse(&config.base_url)
            .map_err(|err| StartupError::UpstreamClient(format!("{}: {err}", config.base_url)))?;
        let base_path = base.path().trim_end_matches('/').to_owned();
        Ok(Upstream {
            client,
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
        let mut builder = self.client.request(request.method, url).headers(request.headers);
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
    use super::Upstream;
    use crate::config::UpstreamConfig;

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
