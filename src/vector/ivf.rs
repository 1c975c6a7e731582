//! An approximate nearest-neighbour index for large candidate sets: an inverted file (IVF). The
//! vectors are clustered by k-means into about 2√n lists; a query scores the list centroids and scans
//! only the nearest lists (`Probes`: a share of them). It supports inserts (a new vector joins its
//! nearest list) and removals (by slot), and is rebuilt when the set has doubled since the last
//! build, so the lists stay balanced. Vectors are L2-normalized, so similarity is the dot product.
//!
//! The centroids are f32; the lists hold slots and where each slot's row is (`Entry`). The
//! vectors a scan reads are the tenant's one int8 copy (`quant::Rows`), which the caller owns: a
//! list of its own copies cost another 38 MB at 100,000 records. The caller lays the rows out in
//! list order after a build (`slots_in_list_order`, `quant::Rows::relayout`, then `relocate`), so
//! a probed list is one sequential read of the rows rather than a cache miss per row; a vector
//! inserted since goes to the end of its list and wherever its row was put, until the next build.
//! `probe` names the lists a query scans; the caller reads their rows and decides
//! (`funnel::semantic`).

use super::dot;
use super::quant::{QuantizedQuery, Rows};
use std::collections::HashMap;

/// Lists per √n vectors. With even lists (see `build`), recall depends on the share of vectors a
/// query scans; at a given share, smaller lists found more of the exact top 5 (100,000 records,
/// 10 % scanned: 0.896 with √n lists, 0.943 with 2√n), but every list adds a centroid to score per
/// query (loadtest/bench/funnel_bench.rs).
const LISTS_PER_SQRT_N: f64 = 2.0;

/// k-means rounds on the sample: 4 left recall at 0.89 (24 of √n lists), 10 gave 0.93.
const KMEANS_ROUNDS: usize = 10;

/// How many lists a query scans.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Probes {
    /// This many (all of them if fewer).
    Lists(usize),
    /// This share of the lists, rounded up, and at least `min` lists. With about 2√n lists of
    /// even size, a share of the lists is about that share of the vectors, whatever n, and so is
    /// the recall; a fixed count scans a shrinking share as the set grows (64 of 423 lists at
    /// 100,000 vectors read 15 % of them, 64 of 181 at 8,192 read 35 %).
    Share { share: f32, min: usize },
}

impl Probes {
    /// Every list: the exact scan of the index's vectors.
    pub const ALL: Probes = Probes::Lists(usize::MAX);

    /// How many of `lists` lists to scan (at least one of a non-empty index).
    pub fn of(self, lists: usize) -> usize {
        let n = match self {
            Probes::Lists(n) => n,
            Probes::Share { share, min } => ((share * lists as f32).ceil() as usize).max(min),
        };
        n.clamp(1, lists.max(1)).min(lists)
    }
}

impl std::fmt::Display for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Probes::Lists(n) if *n == usize::MAX => write!(f, "every list"),
            Probes::Lists(n) => write!(f, "{n} lists"),
            Probes::Share { share, min } => write!(f, "{:.1} % of the lists (at least {min})", share * 100.0),
        }
    }
}

/// A list's member: its slot, and the position of its row in the caller's `Rows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub slot: u32,
    pub position: u32,
}

struct List {
    entries: Vec<Entry>,
}

pub struct Ivf {
    dims: usize,
    centroids: Vec<f32>,
    /// Per centroid, `dot(mean, centroid)` (see `build`).
    bias: Vec<f32>,
    /// The centroids as int8, for ranking them per query: 2√n f32 centroids are ~1 MB at 100,000
    /// records, read from memory on every query; the int8 copy is a quarter. The ranking only
    /// chooses which lists to scan, so its small error (~0.01) costs no correctness.
    centroid_rows: Rows,
    lists: Vec<List>,
    /// slot → (list, position in list), for removal. As `u32`s: lists and their lengths are
    /// counted in slots, which are `u32`s.
    where_is: HashMap<u32, (u32, u32)>,
    /// How many vectors the index was built with.
    pub built_with: usize,
}

impl Ivf {
    /// Builds from the rows of `slots` (a slot without a row is left out) with `2·sqrt(n)` lists
    /// and k-means rounds on a sample.
    ///
    /// The clustering runs on the vectors minus their mean. Embeddings share a large common
    /// direction (e5's anisotropy: unrelated texts score ~0.7), and k-means on them as they are
    /// grows a few huge lists near that direction — at 100,000 synthetic records list sizes ranged
    /// from 1 to 2,517 around a mean of 316, and queries landed in the huge ones, scanning ~4×
    /// the rows `probes` suggests. Centred, the lists come out even. A vector's list and a query's
    /// probe order both use `dot(v − mean, centroid)`, computed as `dot(v, centroid) − bias`.
    ///
    /// Each row is read back as f32 once for the mean, once per sampled slot, and once to place
    /// it, so no copy of all the vectors is ever made.
    pub fn build(rows: &Rows, slots: &[u32]) -> Ivf {
        let dims = rows.dims();
        let slots: Vec<u32> =
            slots.iter().copied().filter(|s| rows.position(*s as usize).is_some()).collect();
        let vector = |slot: u32, out: &mut [f32]| {
            rows.dequantize_into(slot as usize, out);
        };
        let n = slots.len();
        let nlist = ((LISTS_PER_SQRT_N * (n as f64).sqrt()) as usize).clamp(1, 4096);
        let mut buf = vec![0.0f32; dims];
        let mut sums = vec![0.0f64; dims];
        for slot in &slots {
            vector(*slot, &mut buf);
            for (s, x) in sums.iter_mut().zip(buf.iter()) {
                *s += f64::from(*x);
            }
        }
        let mean: Vec<f32> = sums.iter().map(|s| (s / n.max(1) as f64) as f32).collect();
        let centred = |slot: u32| -> Vec<f32> {
            let mut v = vec![0.0f32; dims];
            vector(slot, &mut v);
            v.iter_mut().zip(&mean).for_each(|(x, m)| *x -= m);
            v
        };
        // Deterministic spread-out seeds: every (n / nlist)-th vector.
        let step = (n / nlist).max(1);
        let mut centroids: Vec<f32> = Vec::with_capacity(nlist * dims);
        for i in 0..nlist {
            let mut seed = match slots.get((i * step).min(n.saturating_sub(1))) {
                Some(slot) => centred(*slot),
                None => vec![0.0; dims],
            };
            normalize(&mut seed);
            centroids.extend_from_slice(&seed);
        }
        let sample: Vec<Vec<f32>> = slots.iter().step_by((n / 16_384).max(1)).map(|s| centred(*s)).collect();
        let no_bias = vec![0.0f32; nlist];
        // Finding each vector's nearest centroid is the build's cost (a startup builds the IVF of
        // a 100,000-record scope in seconds): done on every core, then summed in order, so the
        // lists are what one thread would make.
        for _round in 0..KMEANS_ROUNDS {
            let mut sums = vec![0.0f32; nlist * dims];
            let mut counts = vec![0usize; nlist];
            let assigned =
                crate::cpu::map_on_cores(sample.iter().collect(), |v| nearest(&centroids, &no_bias, dims, v));
            for (v, c) in sample.iter().zip(assigned) {
                counts[c] += 1;
                for (s, x) in sums[c * dims..(c + 1) * dims].iter_mut().zip(v.iter()) {
                    *s += x;
                }
            }
            for c in 0..nlist {
                if counts[c] == 0 {
                    continue; // keep the old centroid for an empty cluster
                }
                let row = &mut sums[c * dims..(c + 1) * dims];
                normalize(row);
                centroids[c * dims..(c + 1) * dims].copy_from_slice(row);
            }
        }
        let bias = centroids.chunks_exact(dims).map(|c| dot(c, &mean)).collect();
        let mut centroid_rows = Rows::new(dims);
        for c in centroids.chunks_exact(dims) {
            centroid_rows.push(c);
        }
        let mut ivf = Ivf {
            dims,
            centroids,
            bias,
            centroid_rows,
            lists: (0..nlist).map(|_| List { entries: Vec::new() }).collect(),
            where_is: HashMap::with_capacity(n),
            built_with: n,
        };
        let nearest_lists = crate::cpu::map_on_cores(slots.clone(), |slot| {
            let mut buf = vec![0.0f32; dims];
            vector(slot, &mut buf);
            nearest(&ivf.centroids, &ivf.bias, dims, &buf)
        });
        for (slot, c) in slots.into_iter().zip(nearest_lists) {
            if let Some(position) = rows.position(slot as usize) {
                ivf.push(slot, position as u32, c);
            }
        }
        ivf
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    pub fn len(&self) -> usize {
        self.where_is.len()
    }

    pub fn is_empty(&self) -> bool {
        self.where_is.is_empty()
    }

    pub fn lists(&self) -> usize {
        self.lists.len()
    }

    /// How many vectors each list holds (for benchmarks: how balanced the lists are).
    pub fn list_lens(&self) -> Vec<usize> {
        self.lists.iter().map(|l| l.entries.len()).collect()
    }

    /// Adds `slot`, whose row is at `position` of the caller's rows and whose vector is `vector`.
    pub fn insert(&mut self, slot: u32, position: u32, vector: &[f32]) {
        if vector.len() != self.dims {
            return;
        }
        self.remove(slot);
        let c = nearest(&self.centroids, &self.bias, self.dims, vector);
        self.push(slot, position, c);
    }

    /// Puts a slot not in any list at the end of list `c`.
    fn push(&mut self, slot: u32, position: u32, c: usize) {
        let list = &mut self.lists[c];
        list.entries.push(Entry { slot, position });
        self.where_is.insert(slot, (c as u32, (list.entries.len() - 1) as u32));
    }

    /// Removes by swapping the list's last entry into the hole.
    pub fn remove(&mut self, slot: u32) {
        let Some((c, pos)) = self.where_is.remove(&slot) else { return };
        let list = &mut self.lists[c as usize];
        list.entries.swap_remove(pos as usize);
        if let Some(moved) = list.entries.get(pos as usize) {
            self.where_is.insert(moved.slot, (c, pos));
        }
    }

    /// Every slot, list by list, each list in its order: the order to lay the rows out in, so
    /// that a probed list reads them sequentially.
    pub fn slots_in_list_order(&self) -> impl Iterator<Item = u32> + '_ {
        self.lists.iter().flat_map(|l| l.entries.iter().map(|e| e.slot))
    }

    /// Takes the rows' positions again after the caller moved them (`Rows::relayout`). A slot
    /// whose row is gone is removed.
    pub fn relocate(&mut self, rows: &Rows) {
        let gone: Vec<u32> = self
            .lists
            .iter_mut()
            .flat_map(|l| l.entries.iter_mut())
            .filter_map(|e| match rows.position(e.slot as usize) {
                Some(p) => {
                    e.position = p as u32;
                    None
                }
                None => Some(e.slot),
            })
            .collect();
        for slot in gone {
            self.remove(slot);
        }
    }

    /// The entries of the lists nearest to `query`, list by list (nearest first is not
    /// promised). The caller reads their rows and decides which may pass.
    pub fn probe(&self, query: &QuantizedQuery<'_>, probes: Probes) -> impl Iterator<Item = &[Entry]> + '_ {
        let mut order: Vec<(usize, f32)> = if query.dims() != self.dims {
            Vec::new()
        } else {
            (0..self.lists.len())
                .map(|c| (c, self.centroid_rows.approx(c, query).unwrap_or(f32::MIN) - self.bias[c]))
                .collect()
        };
        let probes = probes.of(order.len());
        if probes > 0 {
            order.select_nth_unstable_by(probes - 1, |a, b| b.1.total_cmp(&a.1));
        }
        order.truncate(probes);
        // In list order: after a relayout the lists lie in that order in the rows, so the scan
        // moves forward through memory.
        order.sort_unstable_by_key(|(c, _)| *c);
        order.into_iter().map(move |(c, _)| self.lists[c].entries.as_slice())
    }
}

fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

/// The list whose centroid is nearest to `v − mean` (see `build`).
fn nearest(centroids: &[f32], bias: &[f32], dims: usize, v: &[f32]) -> usize {
    let mut best = (0, f32::MIN);
    for ((c, row), b) in centroids.chunks_exact(dims).enumerate().zip(bias) {
        let score = dot(row, v) - b;
        if score > best.1 {
            best = (c, score);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::vector::testing::unit;

    /// `Ivf::probe` followed by the scoring the semantic layer does.
    fn search_exact(
        ivf: &Ivf,
        vectors: &[Vec<f32>],
        query: &[f32],
        probes: Probes,
        threshold: f32,
        mut keep: impl FnMut(u32) -> bool,
    ) -> Vec<u32> {
        let mut found: Vec<u32> = ivf
            .probe(&QuantizedQuery::new(query), probes)
            .flatten()
            .map(|e| e.slot)
            .filter(|slot| keep(*slot))
            .filter(|slot| dot(&vectors[*slot as usize], query) >= threshold)
            .collect();
        found.sort_unstable();
        found
    }

    fn rows_of(vectors: &[Vec<f32>]) -> Rows {
        let mut rows = Rows::new(vectors[0].len());
        for v in vectors {
            rows.push(v);
        }
        rows
    }

    #[test]
    fn finds_the_exact_top_hits_with_enough_probes_and_handles_removal() {
        let dims = 32;
        let vectors: Vec<Vec<f32>> = (0..2000).map(|i| unit(i, dims)).collect();
        let slots: Vec<u32> = (0..vectors.len() as u32).collect();
        let rows = rows_of(&vectors);
        let mut ivf = Ivf::build(&rows, &slots);
        let query = &vectors[42];
        assert_eq!(search_exact(&ivf, &vectors, query, Probes::ALL, 0.99, |_| true), [42]);
        let few = search_exact(&ivf, &vectors, query, Probes::Lists(4), 0.99, |_| true);
        assert_eq!(few.len(), 1, "the query's own list is always probed first");
        ivf.remove(42);
        assert!(search_exact(&ivf, &vectors, query, Probes::ALL, 0.99, |_| true).is_empty());
        ivf.insert(42, 42, query);
        assert_eq!(ivf.len(), 2000);
        assert!(
            search_exact(&ivf, &vectors, query, Probes::Lists(4), 0.99, |slot| slot != 42).is_empty(),
            "keep() filters"
        );
    }

    #[test]
    fn searching_every_list_misses_nothing_an_f32_scan_finds() {
        let dims = 48;
        let mut vectors: Vec<Vec<f32>> = (0..3000).map(|i| unit(i, dims)).collect();
        let slots: Vec<u32> = (0..vectors.len() as u32).collect();
        let mut ivf = Ivf::build(&rows_of(&vectors), &slots);
        // Removals and re-inserts move rows around inside the lists.
        for slot in (0..3000u32).step_by(7) {
            ivf.remove(slot);
        }
        for slot in (0..3000u32).step_by(14) {
            vectors[slot as usize] = unit(50_000 + u64::from(slot), dims);
            ivf.insert(slot, slot, &vectors[slot as usize]);
        }
        let present = |slot: u32| !slot.is_multiple_of(7) || slot.is_multiple_of(14);
        for q in 0..40u64 {
            let query = unit(90_000 + q, dims);
            for threshold in [0.0, 0.2, 0.35, 0.5] {
                let expected: Vec<u32> = (0..3000u32)
                    .filter(|s| present(*s) && s % 3 != 0)
                    .filter(|s| dot(&vectors[*s as usize], &query) >= threshold)
                    .collect();
                let got = search_exact(&ivf, &vectors, &query, Probes::ALL, threshold, |s| s % 3 != 0);
                assert_eq!(got, expected, "query {q} threshold {threshold}");
            }
        }
    }

    #[test]
    fn after_a_relayout_each_list_is_one_run_of_consecutive_rows() {
        let dims = 16;
        let vectors: Vec<Vec<f32>> = (0..3000).map(|i| unit(i, dims)).collect();
        let mut rows = rows_of(&vectors);
        // Every other slot belongs to the indexed set; the others stay where the layout puts them.
        let slots: Vec<u32> = (0..3000u32).step_by(2).collect();
        let mut ivf = Ivf::build(&rows, &slots);
        rows.relayout(ivf.slots_in_list_order().map(|s| s as usize).collect::<Vec<_>>());
        ivf.relocate(&rows);
        let mut next = 0u32;
        for list in &ivf.lists {
            for e in &list.entries {
                assert_eq!(e.position, next, "list entries are consecutive rows, list after list");
                assert_eq!(rows.key_at(e.position as usize), Some(e.slot as usize));
                next += 1;
            }
        }
        assert_eq!(next as usize, slots.len());
    }

    #[test]
    fn a_share_of_the_lists_grows_with_them() {
        let share = Probes::Share { share: 0.1, min: 8 };
        assert_eq!([share.of(0), share.of(20), share.of(181), share.of(423)], [0, 8, 19, 43]);
        assert_eq!([Probes::Lists(64).of(20), Probes::Lists(0).of(20), Probes::ALL.of(423)], [20, 1, 423]);
    }

    #[test]
    fn dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..13).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..13).map(|i| (i * 2) as f32).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(dot(&a, &b), plain);
    }
}
