//! An approximate nearest-neighbour index for large candidate sets: an inverted file (IVF). The
//! vectors are clustered by k-means into about √n lists; a query scores the list centroids and scans
//! only the `probes` nearest lists. It supports inserts (a new vector joins its nearest list) and
//! removals (by slot), and is rebuilt when the set has doubled since the last build, so the lists
//! stay balanced. Vectors are L2-normalized, so similarity is the dot product.

use std::collections::HashMap;

/// Dot product; with normalized vectors this is the cosine similarity.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Fixed-size chunks let the compiler drop bounds checks and keep eight lanes busy (SIMD)
    // without `unsafe`: about 4× faster than indexing (loadtest/bench/funnel_bench.rs).
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut sums = [0.0f32; 8];
    let mut a_chunks = a.chunks_exact(8);
    let mut b_chunks = b.chunks_exact(8);
    for (x, y) in (&mut a_chunks).zip(&mut b_chunks) {
        for lane in 0..8 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    sums.iter().sum::<f32>() + tail
}

struct List {
    slots: Vec<u32>,
    /// `slots.len() × dims` floats, row-major, so a scan reads memory in order.
    vectors: Vec<f32>,
}

pub struct Ivf {
    dims: usize,
    centroids: Vec<f32>,
    lists: Vec<List>,
    /// slot → (list, position in list), for removal.
    where_is: HashMap<u32, (usize, usize)>,
    /// How many vectors the index was built with.
    pub built_with: usize,
}

impl Ivf {
    /// Builds from `(slot, vector)` pairs with `sqrt(n)` lists and a few k-means rounds on a sample.
    pub fn build(dims: usize, items: &[(u32, &[f32])]) -> Ivf {
        let n = items.len();
        let nlist = ((n as f64).sqrt() as usize).clamp(1, 4096);
        // Deterministic spread-out seeds: every (n / nlist)-th vector.
        let step = (n / nlist).max(1);
        let mut centroids: Vec<f32> = Vec::with_capacity(nlist * dims);
        for i in 0..nlist {
            centroids.extend_from_slice(items[(i * step).min(n - 1)].1);
        }
        let sample: Vec<&[f32]> = items.iter().step_by((n / 16_384).max(1)).map(|(_, v)| *v).collect();
        for _round in 0..4 {
            let mut sums = vec![0.0f32; nlist * dims];
            let mut counts = vec![0usize; nlist];
            for v in &sample {
                let c = nearest(&centroids, dims, v);
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
                let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                for (dst, s) in centroids[c * dims..(c + 1) * dims].iter_mut().zip(row.iter()) {
                    *dst = s / norm;
                }
            }
        }
        let mut ivf = Ivf {
            dims,
            centroids,
            lists: (0..nlist).map(|_| List { slots: Vec::new(), vectors: Vec::new() }).collect(),
            where_is: HashMap::with_capacity(n),
            built_with: n,
        };
        for (slot, v) in items {
            ivf.insert(*slot, v);
        }
        ivf
    }

    pub fn len(&self) -> usize {
        self.where_is.len()
    }

    pub fn is_empty(&self) -> bool {
        self.where_is.is_empty()
    }

    pub fn insert(&mut self, slot: u32, vector: &[f32]) {
        if vector.len() != self.dims {
            return;
        }
        self.remove(slot);
        let c = nearest(&self.centroids, self.dims, vector);
        let list = &mut self.lists[c];
        list.slots.push(slot);
        list.vectors.extend_from_slice(vector);
        self.where_is.insert(slot, (c, list.slots.len() - 1));
    }

    /// Removes by swapping the list's last entry into the hole.
    pub fn remove(&mut self, slot: u32) {
        let Some((c, pos)) = self.where_is.remove(&slot) else { return };
        let dims = self.dims;
        let list = &mut self.lists[c];
        let last = list.slots.len() - 1;
        if pos != last {
            list.slots.swap(pos, last);
            let (head, tail) = list.vectors.split_at_mut(last * dims);
            head[pos * dims..(pos + 1) * dims].copy_from_slice(&tail[..dims]);
            self.where_is.insert(list.slots[pos], (c, pos));
        }
        list.slots.pop();
        list.vectors.truncate(last * dims);
    }

    /// Slots whose similarity to `query` is at least `threshold`, among the `probes` nearest lists.
    pub fn search(
        &self,
        query: &[f32],
        probes: usize,
        threshold: f32,
        mut keep: impl FnMut(u32) -> bool,
    ) -> Vec<(u32, f32)> {
        let mut order: Vec<(usize, f32)> = (0..self.lists.len())
            .map(|c| (c, dot(&self.centroids[c * self.dims..(c + 1) * self.dims], query)))
            .collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut hits = Vec::new();
        for (c, _) in order.into_iter().take(probes.max(1)) {
            let list = &self.lists[c];
            for (i, slot) in list.slots.iter().enumerate() {
                let score = dot(&list.vectors[i * self.dims..(i + 1) * self.dims], query);
                if score >= threshold && keep(*slot) {
                    hits.push((*slot, score));
                }
            }
        }
        hits
    }
}

fn nearest(centroids: &[f32], dims: usize, v: &[f32]) -> usize {
    let mut best = (0, f32::MIN);
    for (c, row) in centroids.chunks_exact(dims).enumerate() {
        let score = dot(row, v);
        if score > best.1 {
            best = (c, score);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u64, dims: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut v: Vec<f32> = (0..dims)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect();
        let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.iter_mut().for_each(|a| *a /= norm);
        v
    }

    #[test]
    fn finds_the_exact_top_hits_with_enough_probes_and_handles_removal() {
        let dims = 32;
        let vectors: Vec<Vec<f32>> = (0..2000).map(|i| unit(i, dims)).collect();
        let items: Vec<(u32, &[f32])> =
            vectors.iter().enumerate().map(|(i, v)| (i as u32, v.as_slice())).collect();
        let mut ivf = Ivf::build(dims, &items);
        let query = &vectors[42];
        let hits = ivf.search(query, ivf.lists.len(), 0.99, |_| true);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [42]);
        let few = ivf.search(query, 4, 0.99, |_| true);
        assert_eq!(few.len(), 1, "the query's own list is always probed first");
        ivf.remove(42);
        assert!(ivf.search(query, ivf.lists.len(), 0.99, |_| true).is_empty());
        ivf.insert(42, query);
        assert_eq!(ivf.len(), 2000);
        assert_eq!(ivf.search(query, 4, 0.99, |slot| slot != 42).len(), 0, "keep() filters");
    }

    #[test]
    fn dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..13).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..13).map(|i| (i * 2) as f32).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(dot(&a, &b), plain);
    }
}
