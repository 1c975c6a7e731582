//! A core module that speaks HTTP.
use axum::http::StatusCode;
pub fn status() -> StatusCode { StatusCode::OK }
