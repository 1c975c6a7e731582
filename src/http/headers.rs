//! Every `X-Memory-*` header memgate reads or writes, in one place: a request's are parsed into
//! typed values here (what it presents as its identity, what it asks of memory), and a turn's
//! report is written back as headers here. Below the edge nothing reads a header.

use crate::error::{ApiError, Code};
use crate::identity::{Credentials, Presented};
use crate::turn::{Ask, Report};
use axum::http::{HeaderMap, HeaderValue};

/// The end user a key allowed to assert one is answering for (request).
pub const SUBJECT: &str = "x-memory-subject";
/// A pinned release (request), the release that served (answer).
pub const VERSION: &str = "x-memory-version";
/// `off` skips memory for one request; `read`, the default, does not.
pub const MODE: &str = "x-memory-mode";
/// `1` asks for the trace (callers with the debug permission).
pub const DEBUG: &str = "x-memory-debug";
/// `off`, `read` or `write`: narrows the memory tools one request gets (never widens them).
pub const TOOLS: &str = "x-memory-tools";
/// `memgate`: memgate executes Anthropic's memory tool (`memory_20250818`) for the request, where
/// the caller may; `client`, the default, leaves it to the client.
pub const TOOL_BACKEND: &str = "x-memory-tool-backend";
/// Numbers and strings for trigger comparisons (`satisfaction=1`, or JSON).
pub const VALUES: &str = "x-memory-values";
/// The admin API's tenant and actor.
pub const TENANT: &str = "x-memory-tenant";
pub const ACTOR: &str = "x-memory-actor";
/// memgate's own id for a request, on every answer.
pub const REQUEST_ID: &str = "x-memory-request-id";
/// Answers: records injected, memory's status, the trace, trigger actions decided, and how old
/// the index is when its store is unreachable.
pub const INJECTED: &str = "x-memory-injected";
pub const STATUS: &str = "x-memory-status";
pub const TRACE: &str = "x-memory-trace";
pub const TRIGGERED: &str = "x-memory-triggered";
pub const STALE: &str = "x-memory-stale";

/// The most bytes of `X-Memory-Trace`: proxies and clients refuse responses whose headers pass
/// 8–16 KiB in all, and a refused answer would be worse than a shorter trace.
const MAX_TRACE_BYTES: usize = 6 * 1024;

/// What a request presents as its identity: the first `x-api-key`, `Authorization` and
/// `X-Memory-Subject`.
pub fn credentials(headers: &HeaderMap) -> Credentials<'_> {
    let presented = |name: &str| {
        headers.get(name).map(|value| match value.to_str() {
            Ok(text) => Presented::Text(text),
            Err(_) => Presented::Unreadable,
        })
    };
    Credentials {
        api_key: presented("x-api-key"),
        authorization: presented("authorization"),
        subject: presented(SUBJECT),
    }
}

/// What a request asks of memory: `X-Memory-Mode` (`off` or `read`), `X-Memory-Debug` (`1` or
/// `0`), `X-Memory-Version`, `X-Memory-Tools` (`off`, `read` or `write`),
/// `X-Memory-Tool-Backend` (`memgate` or `client`) and `X-Memory-Values`. Whether the caller may
/// ask it is the turn's to judge; a value these headers do not take is refused here.
pub fn ask(headers: &HeaderMap) -> Result<Ask, ApiError> {
    let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or(""));
    let off = match text(MODE) {
        None | Some("read") => false,
        Some("off") => true,
        Some(_) => return Err(ApiError::coded(Code::InvalidHeader, "X-Memory-Mode must be `off` or `read`")),
    };
    let debug = match text(DEBUG) {
        None | Some("0") => false,
        Some("1") => true,
        Some(_) => return Err(ApiError::coded(Code::InvalidHeader, "X-Memory-Debug must be 1 or 0")),
    };
    let tools = match text(TOOLS) {
        None => None,
        Some(value) => Some(crate::tools::Level::parse(value).ok_or_else(|| {
            ApiError::coded(Code::InvalidHeader, "X-Memory-Tools must be `off`, `read` or `write`")
        })?),
    };
    let tool_backend = match text(TOOL_BACKEND) {
        None | Some("client") => false,
        Some("memgate") => true,
        Some(_) => {
            return Err(ApiError::coded(
                Code::InvalidHeader,
                "X-Memory-Tool-Backend must be `memgate` or `client`",
            ));
        }
    };
    let values = match headers.get(VALUES) {
        None => Default::default(),
        Some(value) => {
            let text = value.to_str().map_err(|_| {
                ApiError::coded(
                    Code::InvalidHeader,
                    "X-Memory-Values must be visible ASCII (JSON or k=v pairs)",
                )
            })?;
            crate::triggers::parse_values(text).map_err(|message| {
                ApiError::coded(Code::InvalidHeader, format!("X-Memory-Values: {message}"))
            })?
        }
    };
    Ok(Ask { off, debug, pin: text(VERSION).map(str::to_owned), tools, tool_backend, values })
}

/// The turn's report as headers: `X-Memory-Version` on every answer (which release served says
/// nothing about records); the rest only when the caller is told (`Report::told`).
pub fn write_report(headers: &mut HeaderMap, report: &Report) {
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    };
    set(VERSION, report.release.clone());
    if !report.told {
        return;
    }
    if let Some(age) = report.stale {
        // The database has been unreachable: memory came from this replica's index as it was.
        set(STALE, age.as_secs().to_string());
    }
    set(INJECTED, report.injected.to_string());
    set(STATUS, report.status.as_str().to_owned());
    if let Some(trace) = report.trace(MAX_TRACE_BYTES) {
        set(TRACE, trace);
    }
    if report.triggered > 0 {
        set(TRIGGERED, report.triggered.to_string());
    }
}
