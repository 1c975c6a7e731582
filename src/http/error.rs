//! An `ApiError` as an HTTP answer: the status and Anthropic type of its code's kind, the error
//! object in Anthropic's shape, and the headers SDKs read (`x-should-retry`, `retry-after`). The
//! table itself is in `crate::error`; this is the one place it meets axum.

use crate::error::ApiError;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, _) = self.kind().status_and_type();
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::json!({"type": "error", "error": self.error_object()});
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        if self.kind().should_retry() {
            headers.insert("x-should-retry", HeaderValue::from_static("true"));
        }
        if let Some(secs) = self.retry_after_secs() {
            headers.insert("retry-after", HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::error::{Code, ErrorKind};

    async fn answer(err: ApiError) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let response = err.into_response();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        (parts.status, parts.headers, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn every_code_answers_its_kinds_status_and_type() {
        for &code in Code::ALL {
            let (status, _, body) = answer(ApiError::coded(code, "x")).await;
            let (expected_status, expected_type) = code.kind().status_and_type();
            assert_eq!(status.as_u16(), expected_status, "{code:?}");
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], expected_type, "{code:?}");
            assert_eq!(body["error"]["code"], code.as_str(), "{code:?}");
        }
        let (status, _, _) = answer(ApiError::coded(Code::MethodNotAllowed, "x")).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    }

    #[tokio::test]
    async fn retries_are_announced() {
        let (_, headers, _) = answer(ApiError::new(ErrorKind::Overloaded, "busy").with_retry_after(1)).await;
        assert_eq!(headers["x-should-retry"], "true");
        assert_eq!(headers["retry-after"], "1");
        let (_, headers, body) =
            answer(ApiError::invalid_request("bad").with_detail("problems", serde_json::json!([1]))).await;
        assert!(headers.get("x-should-retry").is_none() && headers.get("retry-after").is_none());
        assert_eq!(body["error"]["problems"], serde_json::json!([1]));
    }
}
