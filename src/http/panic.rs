//! A handler that panics answers 500 `api_error` in Anthropic's shape, and the connection and the
//! process go on serving. Without this layer hyper drops the connection of a panicking handler,
//! and the client sees a reset it cannot tell from a network failure (its SDK would not know
//! whether to retry). The panic's message goes to the log, never to the client.
//!
//! What it cannot catch: a panic inside a streamed answer body after its headers went out (the
//! stream then ends early, as an upstream that broke off does).

use crate::error::ApiError;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;

pub async fn catch_panics(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    // Unwind safety: the handler's state is its own request's; what it shares (`AppState`) is
    // behind locks that recover from poisoning (`unwrap_or_else(PoisonError::into_inner)`).
    match AssertUnwindSafe(next.run(request)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            ApiError::internal(format!("handler for {method} {path} panicked: {message}")).into_response()
        }
    }
}

/// `GET /_test/panic`: a handler that panics, mounted only in debug builds started with
/// `MEMGATE_TEST_PANIC_ROUTE=1`, so the end-to-end tests can show the layer above at work in
/// the real binary. A release build has no such route whatever its environment says.
pub fn test_route_enabled() -> bool {
    cfg!(debug_assertions) && std::env::var("MEMGATE_TEST_PANIC_ROUTE").is_ok_and(|v| v == "1")
}

pub async fn panicking_handler() -> Response {
    panic!("the test route panicked, as it was asked to")
}
