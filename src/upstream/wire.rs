//! The HTTP vocabulary of an exchange with the upstream: the request and answer types the
//! upstream client sends and returns. The turn runs upstream rounds (memgate's tool loop) and
//! hands their answers to the edge; it handles them in these types, which belong to the
//! upstream client, and names no web framework of its own.

pub use axum::Error as BodyError;
pub use axum::body::{Body, to_bytes};
pub use axum::http::response::Parts as ResponseParts;
pub use axum::http::{HeaderMap, HeaderValue, Method, Response, header};
