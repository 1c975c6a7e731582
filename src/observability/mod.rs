//! Request ids, metrics and logs.

pub mod logging;
pub mod metrics;

use std::time::Duration;

/// How long the upstream took to answer with headers; attached to the answer as an extension so
/// the observing middleware can tell upstream time from memgate's own.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamLatency(pub Duration);
