//! An approximate nearest-neighbour index for large candidate sets: an inverted file (IVF). The
//! vectors are clustered by k-means into about 2√n lists; a query scores the list centroids and scans
//! only the `probes` nearest lists. It supports inserts (a new vector joins its nearest list) and
//! removals (by slot), and is rebuilt when the set has doubled since the last build, so the lists
//! stay balanced. Vectors are L2-normalized, so similarity is the dot product.
//!
//! The centroids are f32; the lists hold only slots. The vectors a scan reads are the tenant's one
//! int8 copy, addressed by slot (`quant::Rows`), which the caller owns: a list of its own copies
//! cost another 38 MB at 100,000 records. `probe` names the lists a query scans; the caller reads
//! their slots' rows and decides (`funnel::semantic`).

use super::dot;
use super::quant::{QuantizedQuery, Rows};
use std::collections::HashMap;

/// Lists per √n vectors. With even lists (see `build`), recall depends on the share of vectors a
/// query scans; at a given share, smaller lists found more of the exact top 5 (100,000 records,
/// 10 % scanned: 0.896 with √n lists, 0.943 with 2√n), but every list adds a centroid to score per
/// query. 2√n lists at 64 probes scan ~10 % of a 100,000-record tenant (loadtest/bench/funnel_bench.rs).
const LISTS_PER_SQRT_N: f64 = 2.0;

/// k-means rounds on the sample: 4 left recall at 0.89 (24 of √n lists), 10 gave 0.93.
const KMEANS_ROUNDS: usize = 10;

struct List {
    slots: Vec<u32>,
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
    /// slot → (list, position in list), for removal.
    where_is: HashMap<u32, (usize, usize)>,
    /// How many vectors the index was built with.
    pub built_with: usize,
}

impl Ivf {
    /// Builds from `(slot, vector)` pairs with `2·sqrt(n)` lists and k-means rounds on a sample.
    ///
    /// The clustering runs on the vectors minus their mean. Embeddings share a large common
    /// direction (e5's anisotropy: unrelated texts score ~0.7), and k-means on them as they are
    /// grows a few huge lists near that direction — at 100,000 synthetic records list sizes ranged
    /// from 1 to 2,517 around a mean of 316, and queries landed in the huge ones, scanning ~4×
    /// the rows `probes` suggests. Centred, the lists come out even. A vector's list and a query's
    /// probe order both use `dot(v − mean, centroid)`, computed as `dot(v, centroid) − bias`.
    ///
    /// `vector(slot, out)` writes a slot's vector into `out`; it is asked once per slot for the
    /// mean, once per sampled slot, and once per slot to place it, so no copy of all the vectors
    /// is ever made.
    pub fn build(dims: usize, slots: &[u32], vector: impl Fn(u32, &mut [f32])) -> Ivf {
        let n = slots.len();
        let nlist = ((LISTS_PER_SQRT_N * (n as f64).sqrt()) as usize).clamp(1, 4096);
        let mut buf = vec![0.0f32; dims];
        let mut sums = vec![0.0f64; dims];
        for slot in slots {
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
            let mut seed = centred(slots[(i * step).min(n.saturating_sub(1))]);
            normalize(&mut seed);
            centroids.extend_from_slice(&seed);
        }
        let sample: Vec<Vec<f32>> = slots.iter().step_by((n / 16_384).max(1)).map(|s| centred(*s)).collect();
        let no_bias = vec![0.0f32; nlist];
        for _round in 0..KMEANS_ROUNDS {
            let mut sums = vec![0.0f32; nlist * dims];
            let mut counts = vec![0usize; nlist];
            for v in &sample {
                let c = nearest(&centroids, &no_bias, dims, v);
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
            lists: (0..nlist).map(|_| List { slots: Vec::new() }).collect(),
            where_is: HashMap::with_capacity(n),
            built_with: n,
        };
        for slot in slots {
            vector(*slot, &mut buf);
            ivf.insert(*slot, &buf);
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

    /// How many vectors each list holds (for benchmarks: how balanced the lists are).
    pub fn list_lens(&self) -> Vec<usize> {
        self.lists.iter().map(|l| l.slots.len()).collect()
    }

    pub fn insert(&mut self, slot: u32, vector: &[f32]) {
        if vector.len() != self.dims {
            return;
        }
        self.remove(slot);
        let c = nearest(&self.centroids, &self.bias, self.dims, vector);
        let list = &mut self.lists[c];
        list.slots.push(slot);
        self.where_is.insert(slot, (c, list.slots.len() - 1));
    }

    /// Removes by swapping the list's last entry into the hole.
    pub fn remove(&mut self, slot: u32) {
        let Some((c, pos)) = self.where_is.remove(&slot) else { return };
        let list = &mut self.lists[c];
        list.slots.swap_remove(pos);
        if let Some(moved) = list.slots.get(pos) {
            self.where_is.insert(*moved, (c, pos));
        }
    }

    /// The slots of the `probes` lists nearest to `query`, list by list (nearest first is not
    /// promised). The caller reads their rows and decides which may pass.
    pub fn probe(&self, query: &QuantizedQuery<'_>, probes: usize) -> impl Iterator<Item = &[u32]> + '_ {
        let mut order: Vec<(usize, f32)> = if query.dims() != self.dims {
            Vec::new()
        } else {
            (0..self.lists.len()).map(|c| (c, self.centroid_rows.approx(c, query) - self.bias[c])).collect()
        };
        let probes = probes.clamp(1, order.len().max(1)).min(order.len());
        if probes > 0 {
            order.select_nth_unstable_by(probes - 1, |a, b| b.1.total_cmp(&a.1));
        }
        order.truncate(probes);
        order.into_iter().map(move |(c, _)| self.lists[c].slots.as_slice())
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
        probes: usize,
        threshold: f32,
        mut keep: impl FnMut(u32) -> bool,
    ) -> Vec<u32> {
        let mut found: Vec<u32> = ivf
            .probe(&QuantizedQuery::new(query), probes)
            .flatten()
            .copied()
            .filter(|slot| keep(*slot))
            .filter(|slot| dot(&vectors[*slot as usize], query) >= threshold)
            .collect();
        found.sort_unstable();
        found
    }

    #[test]
    fn finds_the_exact_top_hits_with_enough_probes_and_handles_removal() {
        let dims = 32;
        let vectors: Vec<Vec<f32>> = (0..2000).map(|i| unit(i, dims)).collect();
        let slots: Vec<u32> = (0..vectors.len() as u32).collect();
        let mut ivf = Ivf::build(dims, &slots, |s, out| out.copy_from_slice(&vectors[s as usize]));
        let all = ivf.lists.len();
        let query = &vectors[42];
        assert_eq!(search_exact(&ivf, &vectors, query, all, 0.99, |_| true), [42]);
        let few = search_exact(&ivf, &vectors, query, 4, 0.99, |_| true);
        assert_eq!(few.len(), 1, "the query's own list is always probed first");
        ivf.remove(42);
        assert!(search_exact(&ivf, &vectors, query, all, 0.99, |_| true).is_empty());
        ivf.insert(42, query);
        assert_eq!(ivf.len(), 2000);
        assert!(search_exact(&ivf, &vectors, query, 4, 0.99, |slot| slot != 42).is_empty(), "keep() filters");
    }

    #[test]
    fn searching_every_list_misses_nothing_an_f32_scan_finds() {
        let dims = 48;
        let mut vectors: Vec<Vec<f32>> = (0..3000).map(|i| unit(i, dims)).collect();
        let slots: Vec<u32> = (0..vectors.len() as u32).collect();
        let mut ivf = Ivf::build(dims, &slots, |s, out| out.copy_from_slice(&vectors[s as usize]));
        // Removals and re-inserts move rows around inside the lists.
        for slot in (0..3000u32).step_by(7) {
            ivf.remove(slot);
        }
        for slot in (0..3000u32).step_by(14) {
            vectors[slot as usize] = unit(50_000 + u64::from(slot), dims);
            ivf.insert(slot, &vectors[slot as usize]);
        }
        let present = |slot: u32| !slot.is_multiple_of(7) || slot.is_multiple_of(14);
        for q in 0..40u64 {
            let query = unit(90_000 + q, dims);
            for threshold in [0.0, 0.2, 0.35, 0.5] {
                let expected: Vec<u32> = (0..3000u32)
                    .filter(|s| present(*s) && s % 3 != 0)
                    .filter(|s| dot(&vectors[*s as usize], &query) >= threshold)
                    .collect();
                let got = search_exact(&ivf, &vectors, &query, ivf.lists.len(), threshold, |s| s % 3 != 0);
                assert_eq!(got, expected, "query {q} threshold {threshold}");
            }
        }
    }

    #[test]
    fn dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..13).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..13).map(|i| (i * 2) as f32).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(dot(&a, &b), plain);
    }
}
