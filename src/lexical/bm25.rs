//! `LexicalIndex`: BM25 over one tenant's records, kept by slot beside the funnel's `TenantIndex`.
//!
//! An inverted index in plain vectors: a term dictionary (`term → id`), per term a posting list
//! of `slot << 8 | term frequency` (4 bytes a posting; frequencies saturate at 255, where BM25
//! has long stopped growing), per slot its term ids with where each of its postings is (to take
//! a record out again) and its length. A record is replaced by taking its postings out and
//! putting the new ones in; a posting list is unordered, so taking one out is a `swap_remove` at
//! the position the record kept, and the posting moved into the hole has its record's position
//! updated. Nothing is ever rebuilt or merged: a write costs what analyzing its text costs (a few
//! µs for a short record) plus, per distinct term, a push (add) or a swap (remove), whatever the
//! length of the term's list: a common word's list holds every record of the tenant, and a
//! search of it per removal made removing many records cost the square of the tenant.
//!
//! A search scores only the postings of the query's terms, and only those of candidate slots
//! (one bit test each), into a per-thread accumulator that is reset through the list of slots it
//! touched, so no allocation or clearing depends on the tenant's size. Scores are Lucene's BM25
//! (`idf = ln(1 + (N − df + 0.5) / (df + 0.5))`, k1 1.2, b 0.75) with N and the mean length over
//! all the tenant's records, not the caller's: a caller's scores, like its candidates, do not
//! depend on what it may not see, but neither do they reveal it.
//!
//! Sizes and times at 10,000 and 100,000 records: docs/hybrid-retrieval.md.

use super::analyzer::Analyzer;
use super::postings::PostingLists;
use crate::slots::SlotSet;
use crate::texts::TextIds;
use smallvec::SmallVec;
use std::cell::RefCell;

/// A record's distinct terms, as bytes. A shared record's: per term its id, then where the
/// record's posting is in that term's list, each a little-endian `u32` (`shared_pairs`). A
/// personal record's (no postings): its term ids in ascending order, each as the LEB128 varint of
/// its distance from the one before, shifted left by a bit that, set, says a frequency other than
/// 1 follows in one byte (`personal_terms`). Most of a customer profile's ~25 distinct terms are
/// words every profile has, given small ids early, and its own few (a name, an order number)
/// got their ids together: ~2 bytes a term instead of 4.
type DocTerms = Box<[u8]>;

/// A shared record's (term id, posting position) pairs.
fn shared_pairs(doc: &[u8]) -> impl Iterator<Item = (u32, u32)> + '_ {
    doc.chunks_exact(8).map(|pair| (le_u32(&pair[..4]), le_u32(&pair[4..])))
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// A personal record's terms, `(id, tf)` with ids ascending and distinct, packed as `DocTerms`
/// says.
fn pack_personal(terms: &[(u32, u32)]) -> DocTerms {
    let mut out = Vec::with_capacity(terms.len() * 2);
    let mut previous = 0u32;
    for &(id, tf) in terms {
        let odd = tf != 1;
        let mut value = (u64::from(id - previous) << 1) | u64::from(odd);
        while value >= 0x80 {
            out.push((value as u8 & 0x7f) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
        if odd {
            out.push(tf.min(255) as u8);
        }
        previous = id;
    }
    out.into_boxed_slice()
}

/// The `(id, tf)` pairs `pack_personal` packed, in its order.
fn personal_terms(doc: &[u8]) -> impl Iterator<Item = (u32, u32)> + '_ {
    let mut bytes = doc.iter().copied();
    let mut previous = 0u64;
    std::iter::from_fn(move || {
        let (mut value, mut shift) = (0u64, 0);
        loop {
            let byte = bytes.next()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        let id = previous + (value >> 1);
        previous = id;
        let tf = if value & 1 == 1 { u32::from(bytes.next()?) } else { 1 };
        Some((id as u32, tf))
    })
}

/// The largest slot a posting can hold (24 bits; the low 8 hold the term frequency).
pub const MAX_SLOT: u32 = (1 << 24) - 1;

/// A query scores with at most this many of its distinct terms, the rarest in the tenant: a
/// pasted document as a question must not read every posting list of the index.
pub const MAX_QUERY_TERMS: usize = 64;

/// Who a record's words can be found for: a `Shared` record (public, a team's, a role's) by
/// many callers, through the postings; a `Personal` one (scoped to one person or agent) by one,
/// so it is scored only when it is among a query's candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Shared,
    Personal,
}

impl Reach {
    /// `Personal` when every scope is a `user:` or `agent:` one.
    pub fn of<S: AsRef<str>>(scopes: impl IntoIterator<Item = S>) -> Reach {
        let mut scopes = scopes.into_iter().peekable();
        let personal = scopes.peek().is_some()
            && scopes.all(|scope| {
                let scope = scope.as_ref();
                scope.starts_with("user:") || scope.starts_with("agent:")
            });
        if personal { Reach::Personal } else { Reach::Shared }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalization: 0 ignores a record's length, 1 divides by it fully.
    pub b: f32,
}

impl Default for Bm25Params {
    fn default() -> Bm25Params {
        Bm25Params { k1: 1.2, b: 0.75 }
    }
}

/// A query, analyzed: its distinct terms. Independent of any index, so it can be built before a
/// tenant's lock is taken, and used on several indexes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LexicalQuery {
    pub terms: Vec<String>,
}

impl LexicalQuery {
    pub fn new(analyzer: &Analyzer, text: &str) -> LexicalQuery {
        let mut terms = analyzer.terms(text);
        terms.sort();
        terms.dedup();
        LexicalQuery { terms }
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// A record the query's words found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LexicalHit {
    pub slot: u32,
    /// BM25 score.
    pub score: f32,
    /// `score` over the most any record could score for this query (every query term, at
    /// saturation): in `[0, 1)`, comparable across queries, for gating and score fusion.
    pub normalized: f32,
    /// How many of the query's distinct terms the record holds.
    pub matched_terms: u16,
}

#[derive(Default)]
pub struct LexicalIndex {
    analyzer: Analyzer,
    params: Bm25Params,
    /// Term ↔ id: each term's text once, in one buffer (most of a CRM's terms are one
    /// customer's name, email or order number). An id goes when its postings and personal count
    /// empty, and is reused.
    dictionary: TextIds,
    /// Term id → postings, `slot << 8 | tf`, unordered; none for most terms of a CRM (its
    /// customers' words are personal).
    postings: PostingLists,
    /// Slot → its distinct term ids, each with where its posting is in that term's list (so a
    /// removal takes it out without scanning a list every record of a common word is in);
    /// `None` for a slot without a record.
    docs: Vec<Option<DocTerms>>,
    /// Slot → its length in terms (repeats counted).
    lengths: Vec<u32>,
    /// Personal records: indexed without postings, found through the caller's candidates
    /// instead. A tenant's million customer profiles each say "order", "customer" and the name of
    /// a product; in the postings they made every query that used such a word walk a million
    /// entries its caller may not see. A caller sees its own few, so each query scores those
    /// from their own terms (`DocTerms` then hold frequencies): the cost follows what the caller
    /// may see, and every score is what the postings would have given, term by term in the same
    /// order.
    personal: SlotSet,
    /// Term id → how many personal records hold it (their share of its document frequency).
    personal_df: Vec<u32>,
    live: usize,
    total_length: u64,
}

impl std::fmt::Debug for LexicalIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LexicalIndex")
            .field("records", &self.live)
            .field("terms", &self.dictionary.len())
            .field("params", &self.params)
            .finish()
    }
}

/// Per thread: the score, the matched-term count and whether it was touched, by slot.
struct Scratch {
    scores: Vec<f32>,
    matched: Vec<u16>,
    touched: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> =
        const { RefCell::new(Scratch { scores: Vec::new(), matched: Vec::new(), touched: Vec::new() }) };
}

impl LexicalIndex {
    pub fn new(analyzer: Analyzer, params: Bm25Params) -> LexicalIndex {
        LexicalIndex { analyzer, params, ..LexicalIndex::default() }
    }

    pub fn analyzer(&self) -> &Analyzer {
        &self.analyzer
    }

    pub fn params(&self) -> Bm25Params {
        self.params
    }

    /// Records indexed.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Distinct terms indexed.
    pub fn terms(&self) -> usize {
        self.dictionary.len()
    }

    /// How many records hold `term` (an analyzed term).
    pub fn document_frequency(&self, term: &str) -> usize {
        self.term(term).map_or(0, |id| self.df(id))
    }

    /// How many records hold the term `id`: its postings and the personal records.
    fn df(&self, id: u32) -> usize {
        self.postings.get(id).len() + self.personal_df[id as usize] as usize
    }

    /// The id of `term`, if a record holds it.
    fn term(&self, term: &str) -> Option<u32> {
        self.dictionary.get(term)
    }

    pub fn contains(&self, slot: u32) -> bool {
        self.docs.get(slot as usize).is_some_and(Option::is_some)
    }

    /// Adds the record at `slot`, or replaces what the slot held. `false` (and nothing indexed)
    /// for a slot above `MAX_SLOT`.
    pub fn upsert(&mut self, slot: u32, text: &str) -> bool {
        let terms = self.analyzer.terms(text);
        self.upsert_terms(slot, terms)
    }

    /// Adds or replaces a record by its fields: key and aliases weighted above the content
    /// (`super::record_terms`).
    pub fn upsert_record(&mut self, slot: u32, record: &crate::record::Record) -> bool {
        let (terms, length) = super::record_terms(&self.analyzer, record);
        self.upsert_weighted(slot, terms, length)
    }

    /// As `upsert`, with the text already analyzed (by an `Analyzer` with this index's options):
    /// analysis, the costly part of a write, can then run before the tenant's write lock is
    /// taken, or on several threads at startup.
    pub fn upsert_terms(&mut self, slot: u32, terms: Vec<String>) -> bool {
        let length = terms.len() as u32;
        self.upsert_weighted(slot, terms, length)
    }

    /// As `upsert_terms`, with the record's length for BM25 given: terms repeated for a field's
    /// weight count in the frequency, not in the length (`super::record_terms` makes both).
    pub fn upsert_weighted(&mut self, slot: u32, terms: Vec<String>, length: u32) -> bool {
        self.upsert_reached(slot, terms, length, Reach::Shared)
    }

    /// As `upsert_weighted`, for a record of the given reach: a `Personal` one (seen by one
    /// person or agent) is kept out of the postings and scored only when it is a candidate.
    pub fn upsert_reached(&mut self, slot: u32, mut terms: Vec<String>, length: u32, reach: Reach) -> bool {
        if slot > MAX_SLOT {
            return false;
        }
        self.remove(slot);
        terms.sort_unstable();
        let (mut pairs, mut personal) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < terms.len() {
            let run = terms[i..].iter().take_while(|t| **t == terms[i]).count();
            let Some(id) = self.term_id(&terms[i]) else {
                i += run;
                continue;
            };
            let tf = run.min(255) as u32;
            match reach {
                Reach::Shared => {
                    let at = self.postings.push(id, slot << 8 | tf);
                    pairs.extend(id.to_le_bytes().into_iter().chain(at.to_le_bytes()));
                }
                Reach::Personal => {
                    self.personal_df[id as usize] += 1;
                    personal.push((id, tf));
                }
            }
            i += run;
        }
        let ids = match reach {
            Reach::Shared => pairs.into_boxed_slice(),
            Reach::Personal => {
                self.personal.insert_growing(slot);
                personal.sort_unstable();
                pack_personal(&personal)
            }
        };
        let s = slot as usize;
        if self.docs.len() <= s {
            self.docs.resize(s + 1, None);
            self.lengths.resize(s + 1, 0);
        }
        self.docs[s] = Some(ids);
        self.lengths[s] = length;
        self.live += 1;
        self.total_length += u64::from(length);
        true
    }

    /// The id of `term`, given one if it is new; `None` when the dictionary can take no more
    /// text (4 GiB of distinct terms): the term is then left out of the record.
    fn term_id(&mut self, term: &str) -> Option<u32> {
        let id = self.dictionary.intern(term)?;
        if id as usize == self.personal_df.len() {
            self.personal_df.push(0);
            self.postings.cover(self.personal_df.len());
        }
        Some(id)
    }

    /// Takes the record at `slot` out; nothing if the slot holds none.
    pub fn remove(&mut self, slot: u32) {
        let Some(ids) = self.docs.get_mut(slot as usize).and_then(Option::take) else { return };
        if self.personal.contains(slot) {
            self.personal.remove(slot);
            for (id, _) in personal_terms(&ids) {
                self.personal_df[id as usize] -= 1;
                self.drop_if_unheld(id);
            }
        } else {
            for (id, at) in shared_pairs(&ids) {
                self.take_posting(id, at as usize, slot);
                self.drop_if_unheld(id);
            }
        }
        self.live -= 1;
        self.total_length -= u64::from(self.lengths[slot as usize]);
        self.lengths[slot as usize] = 0;
    }

    /// Frees term `id` once no record holds it.
    fn drop_if_unheld(&mut self, id: u32) {
        if self.postings.get(id).is_empty() && self.personal_df[id as usize] == 0 {
            self.dictionary.remove(id);
        }
    }

    /// Takes `slot`'s posting at `at` out of term `id`'s list; the list's last posting moves into
    /// the hole, and its record's entry follows it.
    fn take_posting(&mut self, id: u32, at: usize, slot: u32) {
        if let Some(moved) = self.postings.take(id, at, slot) {
            let theirs = self.docs.get_mut((moved >> 8) as usize).and_then(Option::as_mut);
            let id = id.to_le_bytes();
            if let Some(pair) = theirs.and_then(|t| t.chunks_exact_mut(8).find(|pair| pair[..4] == id)) {
                pair[4..].copy_from_slice(&(at as u32).to_le_bytes());
            }
        }
    }

    /// The `k` best records among `candidates` for `query`, best first (ties: lower slot first).
    /// Only candidates are ever scored or returned.
    ///
    /// Shared records are found through the postings, the personal ones among the candidates
    /// (what the candidates hold of them, word by word: the caller's own).
    pub fn search(&self, query: &LexicalQuery, candidates: &SlotSet, k: usize) -> Vec<LexicalHit> {
        if k == 0 || self.live == 0 || query.is_empty() {
            return Vec::new();
        }
        let n = self.live as f32;
        let mean_length = (self.total_length as f32 / n).max(1.0);
        let Bm25Params { k1, b } = self.params;
        let idf = |df: usize| (1.0 + (n - df as f32 + 0.5) / (df as f32 + 0.5)).ln();
        // Each term with its postings (none for a term no record holds); when there are too many,
        // the rarest of those some record holds.
        let mut terms: Vec<(usize, Option<u32>)> = query
            .terms
            .iter()
            .map(|t| {
                let id = self.term(t);
                (id.map_or(0, |id| self.df(id)), id)
            })
            .collect();
        if terms.len() > MAX_QUERY_TERMS {
            terms.sort_by_key(|(df, _)| (*df == 0, *df));
            terms.truncate(MAX_QUERY_TERMS);
        }
        // The most a record could score: every query term (unknown ones at df 0) at saturation.
        let ceiling: f32 = terms.iter().map(|(df, _)| idf(*df)).sum::<f32>() * (k1 + 1.0);
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let Scratch { scores, matched, touched } = &mut *scratch;
            if scores.len() < self.docs.len() {
                scores.resize(self.docs.len(), 0.0);
                matched.resize(self.docs.len(), 0);
            }
            // One term's part of one record's score: the same sum, in the same order (term by
            // term), whether the record is met through a posting or among the candidates.
            let mut add = |slot: u32, tf: u32, weight: f32| {
                let (s, tf) = (slot as usize, tf as f32);
                let norm = k1 * (1.0 - b + b * self.lengths[s] as f32 / mean_length);
                if matched[s] == 0 {
                    touched.push(slot);
                }
                scores[s] += weight * tf * (k1 + 1.0) / (tf + norm);
                matched[s] = matched[s].saturating_add(1);
            };
            for (df, id) in &terms {
                let Some(id) = id else { continue };
                let weight = idf(*df);
                for posting in self.postings.get(*id) {
                    let slot = posting >> 8;
                    if candidates.contains(slot) {
                        add(slot, posting & 0xff, weight);
                    }
                }
            }
            for slot in candidates.iter_and(&self.personal) {
                let Some(doc) = &self.docs[slot as usize] else { continue };
                let held: SmallVec<[(u32, u32); 32]> = personal_terms(doc).collect();
                for (df, id) in &terms {
                    let Some(id) = id else { continue };
                    if let Some((_, tf)) = held.iter().find(|(held, _)| held == id) {
                        add(slot, *tf, idf(*df));
                    }
                }
            }
            let mut hits: Vec<LexicalHit> = touched
                .iter()
                .map(|slot| {
                    let s = *slot as usize;
                    LexicalHit {
                        slot: *slot,
                        score: scores[s],
                        normalized: if ceiling > 0.0 { scores[s] / ceiling } else { 0.0 },
                        matched_terms: matched[s],
                    }
                })
                .collect();
            for slot in touched.drain(..) {
                scores[slot as usize] = 0.0;
                matched[slot as usize] = 0;
            }
            let order =
                |a: &LexicalHit, b: &LexicalHit| b.score.total_cmp(&a.score).then(a.slot.cmp(&b.slot));
            if hits.len() > k {
                hits.select_nth_unstable_by(k - 1, order);
                hits.truncate(k);
            }
            hits.sort_unstable_by(order);
            hits
        })
    }

    /// Bytes held by the index's own structures (capacities, not what the allocator rounds to).
    pub fn heap_bytes(&self) -> usize {
        let dictionary = self.dictionary.heap_bytes();
        let postings = self.postings.heap_bytes();
        let docs: usize = self.docs.iter().flatten().map(|d| d.len()).sum::<usize>()
            + self.docs.capacity() * size_of::<Option<DocTerms>>();
        let personal = self.personal_df.capacity() * 4 + self.personal.heap_bytes();
        dictionary + postings + docs + personal + self.lengths.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(texts: &[&str]) -> LexicalIndex {
        let mut index = LexicalIndex::default();
        for (slot, text) in texts.iter().enumerate() {
            assert!(index.upsert(slot as u32, text));
        }
        index
    }

    fn all(index: &LexicalIndex) -> SlotSet {
        let mut set = SlotSet::new(index.docs.len());
        (0..index.docs.len() as u32).for_each(|s| set.insert(s));
        set
    }

    fn slots(hits: &[LexicalHit]) -> Vec<u32> {
        hits.iter().map(|h| h.slot).collect()
    }

    fn query(text: &str) -> LexicalQuery {
        LexicalQuery::new(&Analyzer::default(), text)
    }

    /// Shared records (in the postings) and personal ones (no postings, scored among the
    /// candidates), through any mix of writes, moves between the two and removals: every posting
    /// a shared record's entry points at is that record's, the personal counts stay exact, and
    /// every search over any candidates gives bit for bit what an index built afresh with every
    /// live record in the postings gives — the same hits, scores, normalized scores, matched terms
    /// and order.
    #[test]
    fn postings_and_personal_records_score_exactly_as_a_fresh_index_through_any_changes() {
        let words = ["order", "refund", "shipped", "monday", "express", "return", "delay", "parcel"];
        let mut rng = crate::vector::testing::Rng(0x9e37_79b9_7f4a_7c15);
        let mut next = move |n: u64| rng.below(n as usize) as u64;
        let mut index = LexicalIndex::default();
        let mut live: std::collections::BTreeMap<u32, String> = std::collections::BTreeMap::new();
        for _ in 0..3_000 {
            let slot = next(200) as u32;
            if next(3) == 0 {
                index.remove(slot);
                live.remove(&slot);
            } else {
                let text: Vec<&str> = (0..1 + next(6)).map(|_| words[next(8) as usize]).collect();
                let text = format!("{} customer{slot}", text.join(" "));
                let reach = if next(2) == 0 { Reach::Personal } else { Reach::Shared };
                let terms = index.analyzer().terms(&text);
                let length = terms.len() as u32;
                assert!(index.upsert_reached(slot, terms, length, reach));
                live.insert(slot, text);
            }
            let mut personal_df = vec![0u32; index.personal_df.len()];
            let mut shared_terms = 0;
            for (slot, doc) in index.docs.iter().enumerate() {
                let Some(doc) = doc else { continue };
                if index.personal.contains(slot as u32) {
                    personal_terms(doc).for_each(|(id, _)| personal_df[id as usize] += 1);
                } else {
                    shared_terms += doc.len() / 8;
                    for (id, at) in shared_pairs(doc) {
                        assert_eq!(index.postings.get(id)[at as usize] >> 8, slot as u32);
                    }
                }
            }
            assert_eq!(personal_df, index.personal_df);
            let lists = (0..index.personal_df.len() as u32).map(|id| index.postings.get(id).len());
            assert_eq!(lists.clone().sum::<usize>(), shared_terms);
            assert_eq!(
                index.postings.in_use(),
                lists.filter(|n| *n > 0).count(),
                "a list a term with postings"
            );
        }
        assert!(index.personal.iter().count() > 20, "the mix holds personal records");
        let mut everyone = LexicalIndex::default();
        for (slot, text) in &live {
            everyone.upsert(*slot, text);
        }
        for round in 0..40 {
            let mut candidates = SlotSet::new(200);
            for slot in 0..200 {
                if round == 0 || next(3) != 0 {
                    candidates.insert(slot);
                }
            }
            for q in [
                "order refund",
                "parcel delay express",
                "customer17 monday",
                "return",
                "shipped order express",
            ] {
                let k = 1 + next(40) as usize;
                let got = index.search(&query(q), &candidates, k);
                assert_eq!(got, everyone.search(&query(q), &candidates, k), "{q}, round {round}");
                assert!(got.iter().all(|h| candidates.contains(h.slot)));
            }
        }
        for word in words {
            assert_eq!(index.document_frequency(word), everyone.document_frequency(word), "{word}");
        }
    }

    #[test]
    fn a_record_is_personal_when_only_one_person_or_agent_sees_it() {
        let scopes = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(Reach::of(&scopes(&["user:u-1"])), Reach::Personal);
        assert_eq!(Reach::of(&scopes(&["agent:k-1", "user:u-1"])), Reach::Personal);
        assert_eq!(Reach::of(&scopes(&["user:u-1", "team:sales"])), Reach::Shared);
        assert_eq!(Reach::of(&scopes(&["public"])), Reach::Shared);
        assert_eq!(Reach::of(&scopes(&[])), Reach::Shared);
    }

    #[test]
    fn rare_terms_and_more_matches_rank_first() {
        let index = index(&[
            "The order shipped on Monday.",                        // 0: order, ship
            "Refunds are paid within five days of the return.",    // 1: refund, return
            "Your order ORD-2024-0615 was shipped by express.",    // 2: order, id, ship, express
            "The order is late.",                                  // 3: order
            "Express delivery costs extra on every order placed.", // 4: express, order
        ]);
        let hits = index.search(&query("When was order ORD-2024-0615 shipped?"), &all(&index), 10);
        assert_eq!(hits[0].slot, 2, "{hits:?}");
        assert_eq!(hits[0].matched_terms, 6, "order, the id whole, ord, 2024, 0615, ship");
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
        assert!(!slots(&hits).contains(&1));
        assert!(hits.iter().all(|h| h.normalized > 0.0 && h.normalized < 1.0));
        // k cuts the list.
        assert_eq!(slots(&index.search(&query("order"), &all(&index), 2)).len(), 2);
        // Shorter records win on the same single term (length normalization).
        assert_eq!(index.search(&query("order"), &all(&index), 10)[0].slot, 3);
    }

    #[test]
    fn only_candidates_are_scored_and_returned() {
        let index = index(&["secret refund rule", "refund policy", "refund", "refund refund"]);
        let mut candidates = SlotSet::new(4);
        candidates.insert(1);
        candidates.insert(3);
        let hits = index.search(&query("secret refund"), &candidates, 10);
        assert_eq!(slots(&hits), [3, 1]);
        // A query naming only what the caller may not see finds nothing.
        assert!(index.search(&query("secret"), &candidates, 10).is_empty());
        assert!(index.search(&query("refund"), &SlotSet::new(4), 10).is_empty());
        // Scores do not depend on the candidates (N and df are the tenant's).
        let alone = index.search(&query("refund"), &all(&index), 10);
        let filtered = index.search(&query("refund"), &candidates, 10);
        for hit in &filtered {
            assert_eq!(Some(hit), alone.iter().find(|a| a.slot == hit.slot));
        }
    }

    #[test]
    fn records_are_replaced_and_removed_by_slot() {
        let mut index = index(&["shipping to Berlin", "refund policy", "shipping to Paris"]);
        let berlin = query("Berlin");
        assert_eq!(slots(&index.search(&berlin, &all(&index), 10)), [0]);
        index.upsert(0, "pickup in Hamburg");
        assert!(index.search(&berlin, &all(&index), 10).is_empty());
        assert_eq!(slots(&index.search(&query("hamburg"), &all(&index), 10)), [0]);
        assert_eq!(slots(&index.search(&query("shipped"), &all(&index), 10)), [2]);
        index.remove(2);
        index.remove(2); // twice is harmless
        assert!(index.search(&query("shipped"), &all(&index), 10).is_empty());
        assert_eq!(index.len(), 2);
        // Terms no record holds any more leave the dictionary; their ids are reused.
        assert!(index.term("pari").is_none() && index.term("berlin").is_none());
        let terms = index.terms();
        index.upsert(7, "Paris Texas");
        assert_eq!(index.terms(), terms + 2);
        assert_eq!(slots(&index.search(&query("paris"), &all(&index), 10)), [7]);
        assert!(index.contains(7) && !index.contains(2) && !index.contains(100));
        assert!(!index.upsert(MAX_SLOT + 1, "too far"));
        // Analyzed beforehand: the same as from the text.
        let terms = index.analyzer().terms("Paris Texas");
        assert!(index.upsert_terms(8, terms));
        assert_eq!(slots(&index.search(&query("paris"), &all(&index), 10)), [7, 8]);
        index.remove(8);
        // Emptied: lengths and counts back to nothing.
        for slot in [0, 1, 7] {
            index.remove(slot);
        }
        assert!(index.is_empty() && index.terms() == 0 && index.total_length == 0);
    }

    #[test]
    fn chinese_russian_and_english_records_are_found_by_their_own_words() {
        let index = index(&[
            "退款政策：客户签收后30天内可以申请全额退款。",
            "Сброс пароля учётной записи: ссылка для сброса приходит на почту.",
            "Li Wei's standing desk delivery moved from Monday to Friday.",
            "公司年会将于十二月在杭州举行。",
        ]);
        let best = |q: &str| index.search(&query(q), &all(&index), 1).first().map(|h| h.slot);
        assert_eq!(best("我想退货，退款多久能到账？"), Some(0));
        assert_eq!(best("Я забыл пароль, как его сбросить?"), Some(1));
        assert_eq!(best("When will my desk be delivered?"), Some(2));
        assert_eq!(best("ＤＥＳＫ"), Some(2));
        assert_eq!(best("nothing here matches"), None);
    }

    #[test]
    fn a_long_query_scores_with_its_rarest_terms() {
        let mut texts: Vec<String> = (0..200).map(|i| format!("common filler word{i}")).collect();
        texts.push("needle common".into());
        let index = index(&texts.iter().map(String::as_str).collect::<Vec<_>>());
        // 100 rare known terms, the rare "needle", "common" (in every record) and 200 unknown ones.
        let words: String = (0..100).map(|i| format!("word{i} unknown{i} unknown{i}x ")).collect();
        let q = query(&format!("{words} common needle"));
        assert!(q.terms.len() > MAX_QUERY_TERMS);
        let hits = index.search(&q, &all(&index), 1000);
        assert_eq!(hits[0].slot, 200, "{hits:?}");
        // The 64 rarest known terms: the needle and 63 of the words; "common" is not among them,
        // so no record is found by it alone.
        assert_eq!(hits.len(), MAX_QUERY_TERMS);
        assert!(hits.iter().all(|h| h.matched_terms == 1));
    }

    #[test]
    fn term_frequency_saturates_and_the_accumulator_is_left_clean() {
        let many = "refund ".repeat(1000);
        let index = index(&[&many, "refund"]);
        let hits = index.search(&query("refund"), &all(&index), 10);
        assert_eq!(hits.len(), 2);
        assert!(hits.iter().all(|h| h.normalized < 1.0));
        // A second search on the same thread starts from zero.
        assert_eq!(index.search(&query("refund"), &all(&index), 10), hits);
    }

    /// A record's key and aliases are a field of their own: a query naming a record by one of
    /// its names finds it by words, and ranks it above a record that only mentions the name in
    /// its content as often (same length: the weight, not the length, decides); the whole key
    /// finds its record too.
    #[test]
    fn aliases_and_key_are_matched_by_words_and_weigh_more_than_content() {
        let fact = |id: &str, key: Option<&str>, aliases: &[&str], statement: &str| crate::record::Record {
            key: key.map(str::to_owned),
            aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
            ..crate::record::Record::test_fact(id, serde_json::json!({"statement": statement}))
        };
        let named = fact(
            "named",
            Some("plan:enterprise-2024"),
            &["Falcon tier"],
            "Includes phone support and a named contact.",
        );
        let mentioned =
            fact("mentioned", None, &[], "Falcon tier includes phone support and a named contact.");
        let other = fact("other", None, &[], "Orders ship within two working days.");
        let mut index = LexicalIndex::default();
        for (slot, record) in [&named, &mentioned, &other].into_iter().enumerate() {
            assert!(index.upsert_record(slot as u32, record));
        }
        let hits = index.search(&query("what does the falcon tier include?"), &all(&index), 10);
        assert_eq!(slots(&hits)[..2], [0, 1], "{hits:?}");
        assert!(hits[0].score > hits[1].score * 1.1, "the name field outweighs the content: {hits:?}");
        let by_key = index.search(&query("status of plan:enterprise-2024"), &all(&index), 10);
        assert_eq!(slots(&by_key), [0], "{by_key:?}");
    }

    proptest::proptest! {
        /// Whatever the ids (the largest included) and frequencies, a personal record's packed
        /// terms give back exactly what was packed, in order.
        #[test]
        fn personal_terms_unpack_to_what_was_packed(
            terms in proptest::collection::btree_map(proptest::prelude::any::<u32>(), 1u32..=255, 0..64)
        ) {
            let terms: Vec<(u32, u32)> = terms.into_iter().collect();
            let packed = pack_personal(&terms);
            proptest::prop_assert_eq!(personal_terms(&packed).collect::<Vec<_>>(), terms);
        }
    }

    #[test]
    fn a_profile_s_terms_take_about_two_bytes_each() {
        // Common words with small ids, then a customer's own few with ids given together.
        let terms: Vec<(u32, u32)> =
            [3, 17, 40, 41, 95, 130, 244, 610, 1_900, 2_480_113, 2_480_114, 2_480_115]
                .map(|id| (id, 1))
                .into();
        // Distances below 64 take a byte, below 8,192 two, the jump to the customer's own four.
        assert_eq!(pack_personal(&terms).len(), 6 + 2 + 2 + 2 + 4 + 1 + 1);
    }
}
