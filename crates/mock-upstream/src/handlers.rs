//! The mock's handlers: Messages and count_tokens (with the model-chosen behaviours), models,
//! the echo of any other `/v1/` request, and the recording endpoints.

use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use super::MockState;
use super::answer::{self, Answer};
use super::record::Recorded;
use super::reply::{ApiError, json_response, ok_headers, wire_json};
use super::stream;

/// The model `GET /v1/models` lists.
const LISTED_MODEL: &str = "claude-mock-1";

/// What the `model` name asks for (docs/mock-upstream.md, "Behaviour chosen by model name").
enum Behaviour {
    Normal,
    ToolUse,
    Fail(ApiError),
    SlowFirstByte,
    ErrorMidStream,
    DropConnection,
    Pause,
    LongStream,
}

fn behaviour(model: &str) -> Behaviour {
    match model {
        "mock-tool-use" => Behaviour::ToolUse,
        "mock-overloaded" => Behaviour::Fail(ApiError::Overloaded),
        "mock-500" => Behaviour::Fail(ApiError::Api("Internal server error (mock-500)".into())),
        "mock-429" => Behaviour::Fail(ApiError::RateLimited),
        "mock-slow-first-byte" => Behaviour::SlowFirstByte,
        "mock-error-mid-stream" => Behaviour::ErrorMidStream,
        "mock-drop-connection" => Behaviour::DropConnection,
        "mock-pause" => Behaviour::Pause,
        "mock-long-stream" => Behaviour::LongStream,
        _ => Behaviour::Normal,
    }
}

/// `POST /v1/messages`.
pub(super) async fn messages(State(state): State<MockState>, req: Recorded) -> Response {
    let args = &state.args;
    let seq = req.seq;
    sleep_ms(args.latency_ms).await;
    let (body, model) = match parse_body(&req) {
        Ok(parsed) => parsed,
        Err(err) => return err.into_response_with(seq),
    };
    if let Some(marker) = &args.fail_marker
        && answer::system_contains(body, marker)
    {
        let message = "Internal server error (the system prompt holds the --fail-marker)";
        return ApiError::Api(message.to_owned()).into_response_with(seq);
    }
    let wants_stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    if let Some(kind) = model.strip_prefix("mock-flaky-") {
        let seen = {
            let mut flaky = state.flaky.lock().unwrap_or_else(|p| p.into_inner());
            let count = flaky.entry(model.to_owned()).or_insert(0);
            *count += 1;
            *count
        };
        if seen <= args.flaky_failures {
            match kind {
                "429" => return ApiError::RateLimited.into_response_with(seq),
                "529" => return ApiError::Overloaded.into_response_with(seq),
                _ => return cut_json(&state, seq, &json!({"type": "message"})),
            }
        }
    }
    let behaviour = behaviour(model);
    let mut answer = Answer::new(body, model, matches!(behaviour, Behaviour::ToolUse));
    answer.lengthen(args.text_bytes);
    let steps = match behaviour {
        Behaviour::Fail(err) => return err.into_response_with(seq),
        Behaviour::SlowFirstByte => {
            sleep_ms(args.slow_first_byte_ms).await;
            None
        }
        Behaviour::ErrorMidStream if wants_stream => {
            let error = ("error", ApiError::Overloaded.body(seq));
            Some(stream::error_mid_stream_script(&answer, args, error))
        }
        Behaviour::ErrorMidStream => return ApiError::Overloaded.into_response_with(seq),
        Behaviour::DropConnection if wants_stream => Some(stream::drop_connection_script(&answer, args)),
        Behaviour::DropConnection => return cut_json(&state, seq, &answer.to_json()),
        Behaviour::Pause => {
            let pause = Duration::from_millis(args.pause_ms);
            Some(stream::normal_script(&answer, args, Some(pause)))
        }
        Behaviour::LongStream => Some(stream::long_stream_script(&answer, args)),
        Behaviour::Normal | Behaviour::ToolUse => None,
    };
    if !wants_stream {
        return ok_json(seq, answer.to_json());
    }
    let steps = steps.unwrap_or_else(|| stream::normal_script(&answer, args, None));
    let mut headers = ok_headers(seq);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    let body = stream::body(steps, Some(req.start_stream()), state.shutdown.clone());
    (StatusCode::OK, headers, body).into_response()
}

/// `POST /v1/messages/count_tokens`: the estimate, after the same fault models (taken in their
/// non-streaming form).
pub(super) async fn count_tokens(State(state): State<MockState>, req: Recorded) -> Response {
    let seq = req.seq;
    sleep_ms(state.args.latency_ms).await;
    let (body, model) = match parse_body(&req) {
        Ok(parsed) => parsed,
        Err(err) => return err.into_response_with(seq),
    };
    let count = json!({ "input_tokens": answer::estimate_input_tokens(body) });
    match behaviour(model) {
        Behaviour::Fail(err) => err.into_response_with(seq),
        Behaviour::ErrorMidStream => ApiError::Overloaded.into_response_with(seq),
        Behaviour::DropConnection => cut_json(&state, seq, &count),
        Behaviour::SlowFirstByte => {
            sleep_ms(state.args.slow_first_byte_ms).await;
            ok_json(seq, count)
        }
        _ => ok_json(seq, count),
    }
}

/// `GET /v1/models`: one model, in Anthropic's list shape.
pub(super) async fn models(req: Recorded) -> Response {
    let model = json!({
        "type": "model",
        "id": LISTED_MODEL,
        "display_name": "Claude Mock 1",
        "created_at": "2025-01-01T00:00:00Z",
    });
    let list = json!({
        "data": [model],
        "has_more": false,
        "first_id": LISTED_MODEL,
        "last_id": LISTED_MODEL,
    });
    ok_json(req.seq, list)
}

/// Any other `/v1/` path or method: what arrived.
pub(super) async fn echo(req: Recorded) -> Response {
    let echo = json!({
        "echo": {
            "method": req.method,
            "path": req.path,
            "query": req.query,
            "body_bytes": req.body_bytes,
        }
    });
    ok_json(req.seq, echo)
}

/// Unrouted paths: echoed (and recorded) under `/v1/`, 404 elsewhere.
pub(super) async fn fallback(State(state): State<MockState>, req: Request) -> Response {
    if req.uri().path().starts_with("/v1/") {
        return match Recorded::from_request(req, &state).await {
            Ok(recorded) => echo(recorded).await,
            Err(rejection) => rejection,
        };
    }
    let message = format!("Not found: {} (mock-upstream serves /v1/...)", req.uri().path());
    ApiError::NotFound(message).into_response_with(state.recorder.next_seq())
}

/// `GET /_mock/requests`.
pub(super) async fn list_requests(State(state): State<MockState>) -> Json<Value> {
    Json(state.recorder.to_json())
}

/// `DELETE /_mock/requests`.
pub(super) async fn forget_requests(State(state): State<MockState>) -> StatusCode {
    state.recorder.forget_all();
    StatusCode::NO_CONTENT
}

/// The body as a JSON object with a string `model`, or the 400 Anthropic would answer.
fn parse_body(req: &Recorded) -> Result<(&Map<String, Value>, &str), ApiError> {
    let invalid = |message: &str| ApiError::InvalidRequest(message.to_owned());
    let body = match &req.json {
        Some(Value::Object(body)) => body,
        Some(_) => return Err(invalid("The request body must be a JSON object.")),
        None if req.body_bytes == 0 => return Err(invalid("The request body is empty.")),
        None => {
            return Err(invalid(
                "There was an error parsing the body of your request: it is not valid JSON.",
            ));
        }
    };
    match body.get("model") {
        Some(Value::String(model)) => Ok((body, model)),
        Some(_) => Err(invalid("model: Input should be a valid string")),
        None => Err(invalid("model: Field required")),
    }
}

fn ok_json(seq: u64, body: Value) -> Response {
    json_response(StatusCode::OK, ok_headers(seq), &body)
}

/// 200 with the headers and half of `body`, then the connection is cut.
fn cut_json(state: &MockState, seq: u64, body: &Value) -> Response {
    let bytes = wire_json(body).into_bytes();
    let mut headers = ok_headers(seq);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let body = stream::body(stream::half_body_script(&bytes), None, state.shutdown.clone());
    (StatusCode::OK, headers, body).into_response()
}

async fn sleep_ms(millis: u64) {
    if millis > 0 {
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }
}
