//! The funnel: which records this caller may see and that fit this request.
//!
//! Four layers, run cheapest first on the caller's tenant index:
//! 1. `scope` — the tenant's records sharing a scope with the caller (deny by default);
//! 2. `temporal` — valid now, active, of a schema version the release reads;
//! 3. `semantic` — named exactly by the query, or similar enough to it;
//! 4. `density` — best first until the token budget or item cap; high-priority overflow as stubs.
//!
//! Each layer reports what it removed in the `trace`. The funnel itself never waits: the query
//! embedding is computed before (see `recall`), so a funnel run is pure CPU on in-memory data.

pub mod density;
pub mod index;
pub mod ivf;
pub mod scope;
pub mod semantic;
pub mod temporal;
pub mod terms;
pub mod trace;

use crate::identity::Caller;
use density::{Budget, Packed};
use index::TenantIndex;
use semantic::SemanticQuery;
use trace::Trace;

/// The release's funnel settings.
#[derive(Debug, Clone)]
pub struct FunnelSettings {
    pub schema_versions: Vec<String>,
    pub threshold: f32,
    pub budget_tokens: usize,
    pub max_items: usize,
    pub max_stubs: usize,
    pub probes: usize,
}

pub struct FunnelOutput {
    pub packed: Packed,
    pub trace: Trace,
}

/// Runs the four layers over one tenant's index.
pub fn run(
    index: &TenantIndex,
    caller: &Caller,
    query: &SemanticQuery<'_>,
    settings: &FunnelSettings,
    now_ms: i64,
    detailed: bool,
) -> FunnelOutput {
    let mut trace = Trace::default();
    let visible = scope::visible(index, caller, detailed, &mut trace);
    let current = temporal::current(index, visible, now_ms, &settings.schema_versions, detailed, &mut trace);
    let hits = semantic::matching(index, &current, query, detailed, &mut trace);
    let budget = Budget {
        tokens: settings.budget_tokens,
        max_items: settings.max_items,
        max_stubs: settings.max_stubs,
    };
    let packed = density::pack(index, hits, &budget, detailed, &mut trace);
    FunnelOutput { packed, trace }
}
