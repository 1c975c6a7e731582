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
//!
//! A tenant may hold 100,000 records, of which a caller typically sees half, and the whole run
//! should stay within about 2 ms. So the passes over every candidate read flat, slot-indexed
//! data rather than records: the candidates travel between layers as a bitset (`slots`), the
//! temporal layer reads per-slot validity arrays (`index::SlotMeta`), and the semantic layer's
//! scans read int8 copies of the embeddings (`quant`), re-scoring only the few near the threshold
//! in f32. Records are read for the hits, and for the ids and reasons of a detailed trace.

pub mod density;
pub mod index;
pub mod ivf;
pub mod quant;
pub mod scope;
pub mod semantic;
pub mod slots;
pub mod temporal;
pub mod terms;
pub mod trace;

#[cfg(test)]
pub(crate) mod tests;

use crate::identity::Caller;
use density::{Budget, Packed};
use index::TenantIndex;
use semantic::SemanticQuery;
use trace::{Detail, Trace};

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
    detail: Detail,
) -> FunnelOutput {
    let mut trace = Trace::default();
    let detailed = detail.is_on();
    let visible = scope::visible(index, caller, detail, &mut trace);
    let current = temporal::current(index, &visible, now_ms, &settings.schema_versions, detailed, &mut trace);
    let hits = semantic::matching(index, &current, query, detailed, &mut trace);
    let budget = Budget {
        tokens: settings.budget_tokens,
        max_items: settings.max_items,
        max_stubs: settings.max_stubs,
    };
    let packed = density::pack(index, hits, &budget, detailed, &mut trace);
    FunnelOutput { packed, trace }
}
