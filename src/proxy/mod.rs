//! The proxy: what SDKs call. `/v1/messages` and `/v1/messages/count_tokens` are read whole and
//! checked (they are where memory will be injected); every other `/v1/*` path and method streams
//! through untouched. Either way the upstream's answer comes back as it is.

pub mod paths;
pub mod verify;

use crate::error::{ApiError, Code};
use crate::observability::UpstreamLatency;
use crate::recall::{self, Recalled};
use crate::rollout::Release;
use crate::rollout::stats::Outcome;
use crate::state::AppState;
use crate::upstream::UpstreamRequest;
use crate::upstream::headers::upstream_request_headers;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use http_body::Body as _;
use std::time::{Duration, Instant};

/// `POST /v1/messages`, streaming or not.
pub async fn messages(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    forward_messages_request(&state, request).await
}

/// `POST /v1/messages/count_tokens`.
pub async fn count_tokens(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    forward_messages_request(&state, request).await
}

/// Any other `/v1/*` path and method: body streamed through, nothing read.
pub async fn passthrough(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let client = state.client_addr(&parts);
    let caller = state.identity().authenticate(&parts.headers, client).await?;
    paths::check_upstream_path(&caller, parts.uri.path())?;
    // A request without a body (GET /v1/models) must not grow a chunked empty one on the way.
    let body =
        (body.size_hint().exact() != Some(0)).then(|| reqwest::Body::wrap_stream(body.into_data_stream()));
    let headers = upstream_request_headers(&parts.headers, &caller.upstream_credential);
    let response = state.upstream().send(upstream_request(&parts, headers, body)).await?;
    state.identity().upstream_answered(&caller, response.status().as_u16());
    Ok(response)
}

async fn forward_messages_request(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let client = state.client_addr(&parts);
    let mut caller = state.identity().authenticate(&parts.headers, client).await?;
    let limits = state.limits();
    // Held until the request has left for the upstream: see `budget`.
    let (bytes, budget_permit) = crate::body::read_budgeted(
        &parts.headers,
        body,
        limits.max_body_bytes,
        limits.body_read_timeout,
        state.body_budget(),
    )
    .await?;
    let facts = crate::body::check_messages_request(&bytes)?;
    let mut wish = recall::wish(&parts.headers, &caller)?;
    // Passthrough: no memory work for a key the upstream has not accepted (`verify`), and no
    // check of the key at all while no record could be recalled for it anyway (recall then
    // finds nothing without running the model, and there is nothing to tell).
    let nothing_to_recall = !state.index().has_visible(&caller.tenant, &caller.scopes);
    if !wish.off && !caller.memory_allowed && !nothing_to_recall {
        caller.memory_allowed = verify::key_accepted(state, &parts.headers, &caller).await;
    }
    let memory_allowed = caller.memory_allowed || nothing_to_recall;
    wish.off |= !memory_allowed;
    // The request keeps this release to the end, whatever the rollout does meanwhile.
    let release = state.rollout().route(&caller, &parts.headers, client)?;
    // Memory turned off for this request: there is nothing to compare a candidate with.
    let shadows = if wish.off { Vec::new() } else { state.rollout().shadows_for(&release) };
    let original = (!shadows.is_empty()).then(|| bytes.clone());
    let recalled = state.recaller().recall(&caller, &release, bytes, &wish).await?;
    // A degraded active run injected nothing for want of time or an embedder: comparing a
    // candidate with it would count a difference the candidate did not make.
    if let (Some(original), false) = (original, recalled.status == recall::MemoryStatus::Degraded) {
        recall::shadow::spawn(state.recaller(), state.rollout(), &caller, &recalled, shadows, original);
    }
    let headers = upstream_request_headers(&parts.headers, &caller.upstream_credential);
    // Without injection the caller's bytes go up as they came: no re-serialization, so field
    // order, number formatting and unknown fields are exactly the client's. With injection only
    // the block is added (see `inject::placement`).
    let body = Some(reqwest::Body::from(recalled.body.clone()));
    let mut response = match state.upstream().send(upstream_request(&parts, headers, body)).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    };
    drop(budget_permit);
    let status = response.status();
    state.identity().upstream_answered(&caller, status.as_u16());
    let upstream_time = response.extensions().get::<UpstreamLatency>().map_or(Duration::ZERO, |l| l.0);
    // A call the upstream refused for its credential says nothing about the release, nor does
    // one memory was not allowed to touch: counted, a flood of bad keys would dilute a bad
    // canary's error rate until the guard never fired. Nor does it say anything about memory to
    // the caller: the headers would tell whoever holds a refused key whether a record matched.
    let told = memory_allowed && !matches!(status.as_u16(), 401 | 403);
    let added_latency = started.elapsed().saturating_sub(upstream_time);
    if told {
        state.rollout().record(
            &release.name,
            &Outcome {
                upstream_error: status.is_server_error(),
                memory_error: recalled.status == recall::MemoryStatus::Degraded,
                injected_records: recalled.injected_ids.len(),
                injected_tokens: recalled.tokens,
                added_latency,
            },
        );
    }
    let is_messages = parts.uri.path() == "/v1/messages";
    // Records reached the model only when it answered a Messages request (count_tokens counts).
    if status.is_success() && is_messages {
        state.memories().note_accesses(&caller.tenant, &recalled.injected_ids);
    }
    // Trigger actions only for a Messages request the model answered: a refused or failed one is
    // retried by the client, and the retry decides the same ids (`turn_id`).
    let triggered = if told && is_messages && status.is_success() {
        fire_triggers(state, &caller, &recalled, &wish)
    } else {
        0
    };
    if is_messages {
        record_for_console(state, &caller, &release, &recalled, &response, &facts, added_latency);
    }
    let stale = state.index_staleness();
    add_memory_headers(response.headers_mut(), &release, &recalled, wish.trace.is_on() && told, told, stale);
    if triggered > 0 {
        response.headers_mut().insert("x-memory-triggered", HeaderValue::from(triggered));
    }
    Ok(response)
}

/// Decides the actions of the records whose conditions this request met and hands them to the
/// outbox's writer, off the answer's path. Returns how many were decided (`X-Memory-Triggered`).
fn fire_triggers(
    state: &AppState,
    caller: &crate::identity::Caller,
    recalled: &Recalled,
    wish: &recall::Wish,
) -> usize {
    let Some((words, turn)) = &recalled.trigger_words else { return 0 };
    let triggers = state.triggers();
    let subject = caller.subject.as_deref();
    let input = crate::triggers::TriggerInput::new(words, &wish.values);
    let request_id = crate::triggers::turn_id(&caller.tenant, subject, *turn, words);
    let decisions =
        triggers.decide(&caller.tenant, &request_id, subject, &caller.rate_key, &input, &recalled.fired);
    let count = decisions.len();
    triggers.enqueue(decisions);
    count
}

/// The console's history and its recent requests: one answered `POST /v1/messages`.
fn record_for_console(
    state: &AppState,
    caller: &crate::identity::Caller,
    release: &Release,
    recalled: &Recalled,
    response: &Response,
    facts: &crate::body::MessagesFacts,
    added_latency: Duration,
) {
    use crate::console::{CallError, CallOutcome, MemoryOutcome, RecentCaller, RecentRequest};
    let status = response.status().as_u16();
    let upstream_answered = response.extensions().get::<UpstreamLatency>().is_some();
    let memory = match recalled.status {
        recall::MemoryStatus::Ok => MemoryOutcome::Ok,
        recall::MemoryStatus::Skipped => MemoryOutcome::Skipped,
        recall::MemoryStatus::Degraded => MemoryOutcome::Degraded,
    };
    let injected_records = recalled.injected_ids.len() + recalled.stub_ids.len();
    state.console_recorder().record(
        &caller.tenant,
        &release.name,
        &CallOutcome {
            error: CallError::classify(status, upstream_answered, memory),
            memory,
            injected_records: injected_records as u32,
            injected_tokens: u32::try_from(recalled.tokens).unwrap_or(u32::MAX),
            visible_tokens: recalled.visible_tokens,
            added_latency,
        },
    );
    let (kind, key_id) = match caller.rate_key.split_once(':') {
        Some(("key", id)) => ("key", Some(id.to_owned())),
        Some(("jwt", _)) => ("jwt", None),
        _ => ("passthrough", None),
    };
    let request_id = response
        .headers()
        .get("request-id")
        .and_then(|v| v.to_str().ok())
        .map(|id| id.chars().take(100).collect())
        .unwrap_or_else(|| format!("req_memgate_{}", uuid::Uuid::new_v4().simple()));
    state.recent_requests().push(
        &caller.tenant,
        RecentRequest {
            request_id,
            at_ms: crate::clock::now_ms(),
            release: release.name.clone(),
            caller: RecentCaller {
                kind,
                key_id,
                name: caller.key_name.clone(),
                subject: caller.subject.clone(),
                scopes: caller.scopes.iter().cloned().collect(),
            },
            model: Some(facts.model.clone()),
            stream: facts.stream,
            memory_status: recalled.status.as_str(),
            injected_ids: recalled.injected_ids.iter().chain(&recalled.stub_ids).cloned().collect(),
            tokens: recalled.tokens as u64,
            status,
            query_preview: None,
        },
    );
}

/// The most bytes of `X-Memory-Trace`: proxies and clients refuse responses whose headers pass
/// 8–16 KiB in all, and a refused answer would be worse than a shorter trace.
const MAX_TRACE_HEADER_BYTES: usize = 6 * 1024;

/// `X-Memory-Version` on every answer (which release served says nothing about records), and
/// `X-Memory-Injected`, `X-Memory-Status` and the trace (when asked for) only when `told`: to a
/// caller whose credential was accepted.
fn add_memory_headers(
    headers: &mut HeaderMap,
    release: &Release,
    recalled: &Recalled,
    debug: bool,
    told: bool,
    stale: Option<Duration>,
) {
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    };
    set("x-memory-version", release.name.clone());
    if !told {
        return;
    }
    if let Some(age) = stale {
        // The database has been unreachable: memory came from this replica's index as it was.
        set("x-memory-stale", age.as_secs().to_string());
    }
    set("x-memory-injected", recalled.injected_ids.len().to_string());
    set("x-memory-status", recalled.status.as_str().to_owned());
    if debug {
        set("x-memory-trace", recalled.trace_header(MAX_TRACE_HEADER_BYTES));
    }
}

fn upstream_request(
    parts: &Parts,
    headers: axum::http::HeaderMap,
    body: Option<reqwest::Body>,
) -> UpstreamRequest {
    let path_and_query =
        parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
    UpstreamRequest { method: parts.method.clone(), path_and_query, headers, body }
}

/// For anything outside `/v1` and the operational endpoints.
pub async fn not_found(request: Request<Body>) -> ApiError {
    ApiError::coded(
        Code::NoRoute,
        format!(
            "memgate has no route {} {}; the Anthropic API lives under /v1/",
            request.method(),
            request.uri().path()
        ),
    )
}

/// A known path with a method it does not take.
pub async fn method_not_allowed(request: Request<Body>) -> Response {
    let mut response = ApiError::coded(
        Code::MethodNotAllowed,
        format!("{} is not allowed on {}", request.method(), request.uri().path()),
    )
    .into_response();
    *response.status_mut() = axum::http::StatusCode::METHOD_NOT_ALLOWED;
    response
}
