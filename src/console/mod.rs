//! The console: a web app for the people who own memgate's memory and releases, served by
//! memgate itself at `/console/`, and what the server keeps for it. The contract with the front
//! end is `console/API.md`; how it is wired and secured is `docs/console.md`. Nothing here speaks
//! HTTP or SQL: the files, the `/console` routes and the admin API's check are the edge's
//! (`http::console`), the rows are the store's (`store::sessions`, `store::history`,
//! `store::data_health`).
//!
//! - `tokens` and `session`: the admin and viewer tokens, their fingerprints, and the sessions a
//!   login opens, bound to the token that opened them and ended by time, idleness or rotation.
//! - `counters`, `recorder` and `history`: each replica adds every answered Messages request to
//!   an in-memory per-minute accumulator (well under a microsecond) and writes it to
//!   `metric_buckets` once a minute; the charts' queries sum the replicas' rows.
//! - `data_health`, `recent`, `schemas`: the other read-only endpoints of API.md §3.

pub mod counters;
pub mod data_health;
pub mod history;
pub mod recent;
pub mod recorder;
pub mod schemas;
pub mod session;
pub mod tokens;

pub use counters::{CallError, CallOutcome, MemoryOutcome};
pub use history::{HistoryParams, HistoryRetention, Window};
pub use recent::{RecentCaller, RecentRequest, RecentRequests};
pub use recorder::MetricsRecorder;
pub use session::{ConsoleAuth, SessionPolicy};
pub use tokens::{AdminTokens, Role};
