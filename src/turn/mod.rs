//! One Messages turn, owned here and nowhere else: the HTTP edge (`http::proxy`) reads the
//! request, hands this module a typed `TurnRequest`, sends what `Turn::body` says upstream and
//! renders the `Report` that `Turns::settle` returns. Nothing here knows HTTP.
//!
//! A turn's life:
//! 1. `Turns::begin` — whether memory may work for this caller at all (in passthrough mode a key
//!    the upstream has not accepted yet is first checked with the probe the edge built:
//!    `verify`), the release the request keeps to its end (`rollout`), recall (`recall`: the
//!    person's words, the funnel, the block placed in the body), and shadow runs of candidate
//!    releases in the background. `explain` begins a turn the same way, with its own release
//!    and a full trace, and never sends it.
//!    Where the caller, the release and the request allow memgate's memory tools, their
//!    definitions are added to the body's `tools` (and the caller reads its own write scope);
//!    where the body declares Anthropic's memory tool and the caller opts in, memgate is its
//!    backend (`tools::files`), and the body is left as the client sent it.
//! 2. `Turns::converse` sends the body upstream: once, or — with the tools offered — in as many
//!    rounds as the model's calls of them take (`rounds`: memgate runs the calls and continues;
//!    the client gets one answer). The edge relays the answer; the body's share of the budget
//!    (`body::budget::Hold`) is held until the body has left, and the rounds grow it for each
//!    body they build.
//! 3. `Turns::settle` — once the upstream's status is known: the release's outcome (`rollout`'s
//!    stats, which the canary guard reads), the records' access counts, trigger actions, the
//!    console's history and recent requests (`settle`), and the report: which release served,
//!    what was injected, the status and trace, and how many actions were decided.
//!
//! What a caller is told about memory is decided once, in `settle` (`Report::told`): a caller
//! whose credential the upstream refused, or one memory was not allowed to touch, learns nothing
//! about records, and its call counts in no release's figures.

pub mod rounds;
mod settle;
mod verify;

use crate::body::MessagesFacts;
use crate::console::{MetricsRecorder, RecentRequests};
use crate::error::{ApiError, ErrorKind};
use crate::funnel::trace::Detail;
use crate::identity::{Authenticator, Caller};
use crate::observability::UpstreamLatency;
use crate::observability::metrics::Metrics;
use crate::observer::{Observer, Watch};
use crate::recall::{self, MemoryStatus, Recalled, Recaller, Wish};
use crate::rollout::{Release, Rollout};
use crate::tools::{Level, MemoryTools, ToolCaller};
use crate::upstream::wire::Body;
use crate::upstream::wire::Response;
use crate::upstream::{Upstream, UpstreamRequest};
use bytes::Bytes;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The handles a turn works with; built once with the application's state, cheap to clone.
#[derive(Clone)]
pub struct Turns {
    inner: Arc<Handles>,
}

struct Handles {
    recaller: Recaller,
    rollout: Arc<Rollout>,
    identity: Arc<Authenticator>,
    upstream: Arc<Upstream>,
    recorder: Arc<MetricsRecorder>,
    recent: Arc<RecentRequests>,
    /// memgate's memory tools, run in the turn's rounds (`rounds`).
    tools: MemoryTools,
    metrics: Arc<Metrics>,
    /// Learning from finished exchanges, where the caller and the release opt in.
    observer: Observer,
    /// An index older than this is stale (its store unreachable): the report says so.
    stale_after: Duration,
}

/// What the request asked of memory, as its `X-Memory-*` headers said it (read by the edge,
/// judged here against what the caller may do).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ask {
    /// `X-Memory-Mode: off`: no memory for this request.
    pub off: bool,
    /// `X-Memory-Debug: 1`: the trace, for callers with the debug permission.
    pub debug: bool,
    /// `X-Memory-Version`: a release pinned, for callers with the pin permission.
    pub pin: Option<String>,
    /// `X-Memory-Tools`: the memory tools narrowed for this request (`None`: as permitted).
    pub tools: Option<crate::tools::Level>,
    /// `X-Memory-Tool-Backend: memgate`: memgate executes Anthropic's memory tool, where the
    /// caller holds `memory_tool_backend` and the body declares the tool.
    pub tool_backend: bool,
    /// `X-Memory-Values`: numbers and strings for trigger comparisons.
    pub values: BTreeMap<String, Value>,
}

/// Which endpoint the turn answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/messages`: the model answers; records are accessed and triggers may fire.
    Messages,
    /// `POST /v1/messages/count_tokens`: counted with the injection, nothing else happens.
    CountTokens,
}

/// Why the turn is begun.
pub enum Purpose {
    /// A client's request, sent upstream.
    Serve,
    /// `explain`: the same recall with a full trace and `release` (else the active one), never
    /// sent, counted in no figure, with no shadow run.
    Explain { release: Option<Arc<Release>> },
}

/// One request, as the edge read it.
pub struct TurnRequest {
    pub caller: Caller,
    pub ask: Ask,
    /// The client's address (behind trusted proxies, the one they name), for allow-lists.
    pub client: Option<IpAddr>,
    pub endpoint: Endpoint,
    /// The checked Messages body, as the client sent it.
    pub body: Bytes,
    pub facts: MessagesFacts,
    /// Passthrough mode: the cheapest authenticated upstream call, with the caller's own
    /// credential, for a key the upstream has not accepted yet (`verify`). `None` elsewhere.
    pub key_probe: Option<UpstreamRequest>,
    /// When the edge began reading the request: the turn's added latency counts from here.
    pub started: Instant,
    pub purpose: Purpose,
}

/// A turn that has begun: what goes upstream, and what `settle` needs afterwards.
pub struct Turn {
    caller: Caller,
    release: Arc<Release>,
    recalled: Recalled,
    wish: Wish,
    /// Whether memory could work for this caller (a passthrough key not refused, or nothing
    /// visible to recall anyway): only then is the caller told about memory.
    memory_allowed: bool,
    endpoint: Endpoint,
    facts: MessagesFacts,
    started: Instant,
    /// The caller as memgate's tools see it, when they are offered in this turn's body.
    tools: Option<ToolCaller>,
    /// Observation of this turn's exchange, when the caller and its release opt in.
    watch: Option<Watch>,
}

impl Turn {
    /// The body to send upstream: the client's own bytes, or with the block placed in them.
    pub fn body(&self) -> Bytes {
        self.recalled.body.clone()
    }

    pub fn release(&self) -> &Arc<Release> {
        &self.release
    }

    /// What recall did (for `explain`).
    pub fn recalled(&self) -> &Recalled {
        &self.recalled
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Which of memgate's tools the body offers.
    pub fn tools(&self) -> Level {
        self.tools.as_ref().map_or(Level::Off, |tools| tools.level)
    }
}

/// How the upstream answered a turn.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub status: u16,
    /// The upstream's time to its answer's headers; `None` when it never answered (unreachable,
    /// timed out).
    pub upstream_time: Option<Duration>,
    /// The upstream's `request-id`.
    pub request_id: Option<String>,
}

/// What the edge tells the client about the turn.
pub struct Report {
    /// The release that served (`X-Memory-Version`): on every answer.
    pub release: String,
    /// Whether the caller is told anything about memory (see the module comment).
    pub told: bool,
    pub injected: usize,
    pub status: MemoryStatus,
    /// How long the index has been cut off from its store, when it has been for a while.
    pub stale: Option<Duration>,
    /// Trigger actions decided (`X-Memory-Triggered`).
    pub triggered: usize,
    /// The trace, when the caller asked for it and may be told.
    trace: Option<Recalled>,
}

impl Report {
    /// The trace as a header value of at most `max` bytes (`Recalled::trace_header`).
    pub fn trace(&self, max: usize) -> Option<String> {
        self.trace.as_ref().map(|recalled| recalled.trace_header(max))
    }
}

impl Turns {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        recaller: Recaller,
        rollout: Arc<Rollout>,
        identity: Arc<Authenticator>,
        upstream: Arc<Upstream>,
        recorder: Arc<MetricsRecorder>,
        recent: Arc<RecentRequests>,
        tools: MemoryTools,
        metrics: Arc<Metrics>,
        observer: Observer,
        stale_after: Duration,
    ) -> Turns {
        Turns {
            inner: Arc::new(Handles {
                recaller,
                rollout,
                identity,
                upstream,
                recorder,
                recent,
                tools,
                metrics,
                observer,
                stale_after,
            }),
        }
    }

    /// Begins a turn: see the module comment. Errors are the client's (a header it may not send,
    /// a release it may not pin) or memory failing closed.
    pub async fn begin(&self, request: TurnRequest) -> Result<Turn, ApiError> {
        let TurnRequest { mut caller, ask, client, endpoint, body, facts, key_probe, started, purpose } =
            request;
        let handles = &self.inner;
        let explain = match purpose {
            Purpose::Serve => None,
            Purpose::Explain { release } => Some(release),
        };
        let mut wish = match explain {
            None => serving_wish(ask.clone(), &caller)?,
            Some(_) => Wish {
                off: false,
                trace: Detail::Full,
                budget: Some(Duration::from_secs(10)),
                shadow: true,
                triggers: true,
                values: ask.values.clone(),
            },
        };
        // Passthrough: no memory work for a key the upstream has not accepted (`verify`), and no
        // check of the key at all while no record could be recalled for it anyway (recall then
        // finds nothing without running the model, and there is nothing to tell).
        let nothing_to_recall =
            !handles.recaller.memories().index().has_visible(&caller.tenant, &caller.scopes);
        if !wish.off && !caller.memory_allowed && !nothing_to_recall {
            caller.memory_allowed = match key_probe {
                Some(probe) => {
                    verify::key_accepted(&handles.upstream, &handles.identity, &caller, probe).await
                }
                None => false,
            };
        }
        let memory_allowed = caller.memory_allowed || nothing_to_recall;
        wish.off |= !memory_allowed;
        // The request keeps this release to the end, whatever the rollout does meanwhile.
        let release = match &explain {
            None => handles.rollout.route(&caller, ask.pin.as_deref(), client)?,
            Some(Some(release)) => release.clone(),
            Some(None) => handles.rollout.active(),
        };
        // Memory turned off for this request, or nothing of it is sent: there is nothing to
        // compare a candidate with.
        let shadows =
            if wish.off || explain.is_some() { Vec::new() } else { handles.rollout.shadows_for(&release) };
        let original = (!shadows.is_empty()).then(|| body.clone());
        // memgate's tools, where the caller, the release and the request allow them; their caller
        // reads its own write scope too, and so does recall for it.
        let level = match &explain {
            None if !wish.off => Level::for_request(&caller, &release, ask.tools),
            _ => Level::Off,
        };
        // Anthropic's memory tool, executed here on the subject's `/memories` tree: where the
        // request declares it and asks and the caller holds the permission, at the level the
        // release's cap and `X-Memory-Tools` leave (`read`: `view` only), as for the six tools.
        let file_level = if explain.is_none()
            && !wish.off
            && ask.tool_backend
            && rounds::body::declares_memory_tool(&body)
        {
            Level::for_memory_tool(&caller, &release, ask.tools)
        } else {
            Level::Off
        };
        let tool_caller = (level > Level::Off || file_level > Level::Off)
            .then(|| ToolCaller::new(&caller, level).with_file_level(file_level));
        if let Some(tools) = &tool_caller {
            caller.scopes = tools.caller.scopes.clone();
        }
        // Observation reads the client's own body (memgate's block is never in it) after the
        // answer; here it only decides whether this turn is observed.
        let mut watch = match (&explain, endpoint) {
            (None, Endpoint::Messages) if !wish.off => {
                handles.observer.watch(&caller, &release, &body, facts.stream)
            }
            _ => None,
        };
        let mut recalled = handles.recaller.recall(&caller, &release, body, &wish).await?;
        if let Some(watch) = watch.as_mut() {
            watch.injected_ids = recalled.injected_ids.clone();
        }
        let tools = tool_caller.and_then(|mut tools| {
            if level > Level::Off {
                let names = crate::tools::definitions::names(level);
                let elements = crate::tools::definitions::array_elements(level);
                match rounds::body::offer_tools(&recalled.body, elements, names) {
                    Ok(offered) => recalled.body = Bytes::from(offered),
                    Err(why) => {
                        tracing::debug!(?why, "memgate's tools not offered in this request");
                        tools.level = Level::Off;
                    }
                }
            }
            (tools.level > Level::Off || tools.file_tool()).then_some(tools)
        });
        // A degraded active run injected nothing for want of time or an embedder: comparing a
        // candidate with it would count a difference the candidate did not make.
        if let (Some(original), false) = (original, recalled.status == MemoryStatus::Degraded) {
            recall::shadow::spawn(&handles.recaller, &handles.rollout, &caller, &recalled, shadows, original);
        }
        Ok(Turn { caller, release, recalled, wish, memory_allowed, endpoint, facts, started, tools, watch })
    }

    /// Sends the turn's body upstream with `request`'s method, path and headers: once, or —
    /// when memgate's tools are offered in a Messages request — in as many rounds as the model's
    /// calls of them take (`rounds`). The answer carries the first round's status and headers
    /// and, as `UpstreamLatency`, the time spent waiting on the upstream.
    pub async fn converse(
        &self,
        turn: &Turn,
        mut request: UpstreamRequest,
        hold: crate::body::budget::Hold,
    ) -> Result<Response<Body>, ApiError> {
        let handles = &self.inner;
        let tools = match (&turn.tools, turn.endpoint) {
            (Some(tools), Endpoint::Messages) => tools.clone(),
            _ => {
                request.body = Some(reqwest::Body::from(turn.body()));
                let response = handles.upstream.send(request).await;
                drop(hold);
                return response;
            }
        };
        let rounds = rounds::Rounds::new(
            handles.tools.clone(),
            handles.upstream.clone(),
            handles.metrics.clone(),
            tools,
            turn.release.clone(),
            request,
            hold,
        );
        let (mut response, outcome) = rounds.run(turn.body(), turn.facts.stream).await?;
        response.extensions_mut().insert(UpstreamLatency(outcome.upstream_time));
        Ok(response)
    }

    /// Settles a turn once the upstream has answered (or failed to): see the module comment.
    /// `body` is the answer's body: an observed turn's is tapped (`observer::capture`), relayed
    /// unchanged; any other is left alone.
    pub fn settle(&self, mut turn: Turn, answer: &Answer, body: &mut Body) -> Report {
        let handles = &self.inner;
        handles.identity.upstream_answered(&turn.caller, answer.status);
        // A call the upstream refused for its credential says nothing about the release, nor does
        // one memory was not allowed to touch: counted, a flood of bad keys would dilute a bad
        // canary's error rate until the guard never fired. Nor does it say anything about memory
        // to the caller: the headers would tell whoever holds a refused key whether a record
        // matched.
        let told = turn.memory_allowed && !matches!(answer.status, 401 | 403);
        let added_latency = turn.started.elapsed().saturating_sub(answer.upstream_time.unwrap_or_default());
        let success = (200..300).contains(&answer.status);
        if told {
            handles
                .rollout
                .record(&turn.release.name, &settle::outcome(&turn.recalled, answer, added_latency));
        }
        let is_messages = turn.endpoint == Endpoint::Messages;
        // Records reached the model only when it answered a Messages request (count_tokens counts).
        if success && is_messages {
            handles.recaller.memories().note_accesses(&turn.caller.tenant, &turn.recalled.injected_ids);
        }
        // Trigger actions only for a Messages request the model answered: a refused or failed one
        // is retried by the client, and the retry decides the same ids (`triggers::turn_id`).
        let triggered = if told && is_messages && success {
            settle::fire_triggers(handles.recaller.triggers(), &turn.caller, &turn.recalled, &turn.wish)
        } else {
            0
        };
        if is_messages {
            settle::record_for_console(&handles.recorder, &handles.recent, &turn, answer, added_latency);
        }
        let Turn { watch, .. } = &mut turn;
        if let (Some(watch), true) = (watch.take(), told && is_messages && success) {
            settle::observe(watch, answer, body);
        }
        let age = handles.recaller.memories().index_age();
        let debug = turn.wish.trace.is_on() && told;
        let Turn { release, mut recalled, .. } = turn;
        recalled.body = Bytes::new();
        Report {
            release: release.name.clone(),
            told,
            injected: recalled.injected_ids.len(),
            status: recalled.status,
            stale: (age > handles.stale_after).then_some(age),
            triggered,
            trace: debug.then_some(recalled),
        }
    }
}

/// The wish of a client's own request: its headers judged against what the caller may do.
fn serving_wish(ask: Ask, caller: &Caller) -> Result<Wish, ApiError> {
    if ask.debug && !caller.permissions.debug {
        return Err(ApiError::new(
            ErrorKind::Permission,
            "X-Memory-Debug needs a caller with the debug permission",
        ));
    }
    let trace = if ask.debug { Detail::Visible } else { Detail::Off };
    Ok(Wish { off: ask.off, trace, budget: None, shadow: false, triggers: true, values: ask.values })
}
