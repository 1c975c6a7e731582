//! What each layer of the funnel took in, let through and removed — and why. Counts are always
//! kept; the ids and reasons of removed records only when a trace was asked for (`X-Memory-Debug`,
//! `/admin/v1/explain`), and then at most `MAX_LISTED` per layer.

use serde::Serialize;

pub const MAX_LISTED: usize = 50;

/// How much a trace tells, and to whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Counts only, for metrics and logs.
    Off,
    /// For the caller itself (`X-Memory-Debug` on the proxy path): ids and reasons of records it
    /// may see, nothing of the others — not even how many the tenant holds.
    Visible,
    /// For an admin (`/admin/v1/explain`): every layer in full, the scope layer's removals too.
    Full,
}

impl Detail {
    pub fn is_on(self) -> bool {
        self != Detail::Off
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Removed {
    pub id: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct LayerTrace {
    pub layer: &'static str,
    pub input: usize,
    pub output: usize,
    pub removed_count: usize,
    /// Set only for detailed traces; at most `MAX_LISTED` entries.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<Removed>,
    /// The survivors, in the layer's order (detailed traces only; at most `MAX_LISTED`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<Kept>,
}

/// A record a layer let through: the semantic layer says with which score, the token-density
/// layer what it cost.
#[derive(Debug, Clone, Serialize)]
pub struct Kept {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    /// Passed as the neighbour of a hit in its thread (`funnel::neighbours`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neighbour: Option<bool>,
}

impl Kept {
    pub fn id(id: &str) -> Kept {
        Kept { id: id.to_owned(), score: None, exact: None, tokens: None, neighbour: None }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Trace {
    pub layers: Vec<LayerTrace>,
    /// Every survivor with each ranking's part (detailed traces only), best first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranked: Vec<Ranked>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// How many int8 rows the semantic layer read: what a request's scan cost, which follows what
    /// the caller may see (benchmarks and tests read it; not part of a trace's JSON).
    #[serde(skip)]
    pub scanned: usize,
    /// How many of them the semantic layer scored exactly, past their bound (benchmarks and
    /// tests read it; not part of a trace's JSON).
    #[serde(skip)]
    pub scored: usize,
    /// Whether the bounded semantic layer's hits could not show that they pack what every hit
    /// packs, so every hit was packed (benchmarks and tests read it; not part of a trace's JSON).
    #[serde(skip)]
    pub packed_every_hit: bool,
}

/// A survivor of the funnel and why it ranked where it did.
#[derive(Debug, Clone, Serialize)]
pub struct Ranked {
    pub id: String,
    /// What the density layer ranked by: the similarity, or a hybrid release's fused score
    /// (capped at 2.0 for an exact match, which always ranks first).
    pub score: f32,
    /// Named exactly by the query (key, alias, identifier).
    pub exact: bool,
    /// The dense ranking's part: cosine similarity (1.0 for an exact match).
    pub similarity: f32,
    /// The lexical ranking's part (hybrid releases): rank among the word hits, BM25 score and its
    /// normalized form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical: Option<LexicalRank>,
    /// What its neighbours in its thread added to its score, and whether it passed only as one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neighbours: Option<NeighbourRank>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NeighbourRank {
    pub lift: f32,
    pub admitted: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LexicalRank {
    pub rank: u32,
    pub bm25: f32,
    pub normalized: f32,
}

/// Collects one layer's removals.
pub struct LayerLog {
    layer: &'static str,
    input: usize,
    detailed: bool,
    removed_count: usize,
    removed: Vec<Removed>,
}

impl LayerLog {
    pub fn new(layer: &'static str, input: usize, detailed: bool) -> LayerLog {
        LayerLog { layer, input, detailed, removed_count: 0, removed: Vec::new() }
    }

    pub fn wants_detail(&self) -> bool {
        self.detailed && self.removed.len() < MAX_LISTED
    }

    /// Counts a removal; `reason` is only called when the detail will be kept.
    pub fn remove(&mut self, id: &str, reason: impl FnOnce() -> String) {
        self.removed_count += 1;
        if self.wants_detail() {
            self.removed.push(Removed { id: id.to_owned(), reason: reason() });
        }
    }

    pub fn add_uncounted_removals(&mut self, count: usize) {
        self.removed_count += count;
    }

    /// Finishes a layer that removes exactly `input − output` records but names only those it
    /// passed to `remove` (the first `MAX_LISTED` of a detailed trace): the others are counted
    /// without being looked at one by one.
    pub fn finish_by_difference(mut self, output: usize, trace: &mut Trace) {
        debug_assert!(self.removed_count <= self.input.saturating_sub(output));
        self.removed_count = self.input.saturating_sub(output);
        self.finish(output, trace);
    }

    pub fn finish(self, output: usize, trace: &mut Trace) {
        trace.layers.push(LayerTrace {
            layer: self.layer,
            input: self.input,
            output,
            removed_count: self.removed_count,
            removed: self.removed,
            kept: Vec::new(),
        });
    }
}
