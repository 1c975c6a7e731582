//! Int8 copies of the embeddings, for the semantic layer's scans.
//!
//! At 100,000 records the scans are limited by memory, not arithmetic: a 384-dim f32 vector is
//! 1.5 KB, and the tenant's vectors far exceed the CPU caches. An int8 copy is a quarter of that.
//! Each vector `v` is stored as `scale · codes` (`scale = max|vᵢ| / 127`) with two numbers that
//! bound what was lost: `residual ≥ ‖v − scale·codes‖` and `norm ≥ ‖v‖`. The row `v̂` is the
//! index's one copy of the embedding, and a record's score is the f32 query's dot product with
//! it (`Rows::score`), off the f32 dot product with `v` by the row's rounding alone
//! (docs/benchmarks.md, "Index and funnel").
//!
//! A scan first bounds that score cheaply: the query is quantized too, to 16-bit codes `q̂`, and
//! the integer dot product of the codes is exact, so by Cauchy–Schwarz
//!
//! `q·v̂ ≤ q̂·v̂ + ‖q − q̂‖·‖v̂‖`,
//!
//! plus a little for f32 rounding (`QuantizedQuery::upper_bound`). A record whose bound is below
//! the bar cannot reach it; the others are scored on their row, and only that score decides and
//! is reported. For 384-dim unit vectors the bound is within ~2·10⁻⁴ of the score, so a scan
//! scores about the records it keeps. (It was within ~0.015 with an int8 query and a bound on
//! the f32 vector's score, and a low bar then had most candidates scored.) The IVF's centroid
//! ranking reads the int8 query (`QuantizedQuery::approx`).

/// How one quantized vector relates to the original: `v ≈ scale · codes`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Row {
    pub scale: f32,
    /// At least `‖v − scale·codes‖`; infinite when `v` is not finite (never ruled out then).
    pub residual: f32,
    /// At least `‖v‖`.
    pub norm: f32,
}

/// Absolute slack for f32 rounding, per unit of `‖q‖·‖v̂‖`, in `Rows::score` (products summed
/// in 8 lanes of `dims / 8` terms, then the lanes: at most `(dims/8 + 10)` roundings of
/// 6·10⁻⁸ of `Σ|qⱼ·v̂ⱼ| ≤ ‖q‖·‖v̂‖`) and in the bound's own product (three roundings): 1·10⁻⁴
/// covers up to 8,192 dims with room; at 384 dims the rounding is under 4·10⁻⁶.
const ROUNDING_SLACK: f32 = 1e-4;

/// Quantizes `v` into `out` (same length).
pub fn quantize(v: &[f32], out: &mut [i8]) -> Row {
    encode(v, 127.0, |i, code| out[i] = code as i8)
}

/// `v` as `scale · codes` with codes in `-levels..=levels`, each handed to `put` with its index
/// (every one 0 for a vector that is not finite).
fn encode(v: &[f32], levels: f32, mut put: impl FnMut(usize, f32)) -> Row {
    if !v.iter().all(|x| x.is_finite()) {
        (0..v.len()).for_each(|i| put(i, 0.0));
        return Row { scale: 0.0, residual: f32::INFINITY, norm: f32::INFINITY };
    }
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / levels } else { 1.0 };
    let (mut residual_sq, mut norm_sq) = (0.0f64, 0.0f64);
    for (i, x) in v.iter().enumerate() {
        let c = (x / scale).round().clamp(-levels, levels);
        put(i, c);
        let r = f64::from(*x) - f64::from(scale) * f64::from(c);
        residual_sq += r * r;
        norm_sq += f64::from(*x) * f64::from(*x);
    }
    Row { scale, residual: round_up(residual_sq.sqrt()), norm: round_up(norm_sq.sqrt()) }
}

/// The finest code range a query can have so that its integer dot product with any int8 row of
/// `dims` codes fits an i32 (`|Σ| ≤ 127 · levels · dims`): the full 16 bits up to 516 dims,
/// 16,512 levels at 1,024.
fn fine_levels(dims: usize) -> f32 {
    (f64::from(i32::MAX) / (127.0 * dims.max(1) as f64)).floor().min(32767.0) as f32
}

fn round_up(x: f64) -> f32 {
    (x as f32) * (1.0 + 1e-5) + 1e-7
}

/// Integer dot product of a stored row with a query (its codes widened to i16 once per query).
/// The sum is exact: |codes| ≤ 127, so no overflow for any realistic dimension.
pub fn dot_i8(row: &[i8], query: &[i16]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `dot_i8_avx2` only requires a CPU with AVX2, which was just checked (the check
        // is cached by std; it also verifies the OS saves the AVX registers).
        return unsafe { dot_i8_avx2(row, query) };
    }
    dot_i8_portable(row, query)
}

/// The same sum compiled for AVX2: 16 codes sign-extended per instruction and `vpmaddwd`, about
/// 3× faster than baseline x86-64 (SSE2, which can widen only by unpacking): 21 vs 64 ns per
/// 384-dim row. The release build targets baseline x86-64, so this is chosen at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_i8_avx2(row: &[i8], query: &[i16]) -> i32 {
    dot_i8_portable(row, query)
}

/// Written as a plain sum so the compiler vectorizes it with the 16-bit multiply-add (`pmaddwd`)
/// of whatever instruction set the caller is compiled for.
#[inline(always)]
fn dot_i8_portable(row: &[i8], query: &[i16]) -> i32 {
    row.iter().zip(query).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum()
}

/// Σ code · query over a row's codes: eight lanes, each summed in order, then the lanes in order
/// and the tail. The order is fixed, so every instruction set gives the same bits (a score decides
/// ties, and a bound is held against it).
fn codes_dot(codes: &[i8], query: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `codes_dot_avx2` only requires a CPU with AVX2, which was just checked.
        return unsafe { codes_dot_avx2(codes, query) };
    }
    codes_dot_portable(codes, query)
}

/// The same sum compiled for AVX2, which widens eight codes to f32 in two instructions where
/// baseline x86-64 (SSE2) unpacks them step by step. Without FMA: each product is rounded
/// before it is added, as in the portable build.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn codes_dot_avx2(codes: &[i8], query: &[f32]) -> f32 {
    codes_dot_portable(codes, query)
}

#[inline(always)]
fn codes_dot_portable(codes: &[i8], query: &[f32]) -> f32 {
    let n = codes.len().min(query.len());
    let (codes, query) = (&codes[..n], &query[..n]);
    let mut sums = [0.0f32; 8];
    let mut c_chunks = codes.chunks_exact(8);
    let mut q_chunks = query.chunks_exact(8);
    for (c, q) in (&mut c_chunks).zip(&mut q_chunks) {
        for lane in 0..8 {
            sums[lane] += f32::from(c[lane]) * q[lane];
        }
    }
    let tail: f32 =
        c_chunks.remainder().iter().zip(q_chunks.remainder()).map(|(c, q)| f32::from(*c) * q).sum();
    sums.iter().sum::<f32>() + tail
}

/// A query vector with its quantized forms, made once per query.
pub struct QuantizedQuery<'a> {
    pub vector: &'a [f32],
    /// Its int8 codes (widened to i16 for the dot product): what `approx` reads.
    codes: Vec<i16>,
    row: Row,
    /// Its 16-bit codes (`fine_levels`), which `upper_bound` reads: their rounding is ~250
    /// times smaller than the int8 codes', so the bound is about as tight as f32 rounding.
    fine: Vec<i16>,
    fine_row: Row,
}

impl<'a> QuantizedQuery<'a> {
    pub fn new(vector: &'a [f32]) -> QuantizedQuery<'a> {
        let mut codes = vec![0i8; vector.len()];
        let row = quantize(vector, &mut codes);
        let mut fine = vec![0i16; vector.len()];
        let fine_row = encode(vector, fine_levels(vector.len()), |i, code| fine[i] = code as i16);
        QuantizedQuery { vector, codes: codes.into_iter().map(i16::from).collect(), row, fine, fine_row }
    }

    pub fn dims(&self) -> usize {
        self.vector.len()
    }

    /// The similarity to the vector stored as (`codes`, `row`), from the int8 forms only.
    pub fn approx(&self, codes: &[i8], row: &Row) -> f32 {
        self.row.scale * row.scale * dot_i8(codes, &self.codes) as f32
    }

    /// Whether the record stored as (`codes`, `row`) may score at least `threshold` on its row
    /// (`Rows::score`); `false` means it certainly does not. `codes` must have the query's
    /// length.
    pub fn may_reach(&self, codes: &[i8], row: &Row, threshold: f32) -> bool {
        reaches(self.upper_bound(codes, row), threshold)
    }

    /// The highest score the f32 query can have against the row (`codes`, `row`) — what
    /// `Rows::score` computes, and what decides — from the 16-bit query's exact integer dot
    /// product with the codes, plus what the query's rounding can move it (Cauchy–Schwarz:
    /// `|q·v̂ − q̂·v̂| ≤ ‖q − q̂‖·‖v̂‖`, with `‖v̂‖ ≤ ‖v‖ + ‖v − v̂‖`) and the f32 rounding of both
    /// sums. NaN or infinite for a vector that is not finite.
    pub fn upper_bound(&self, codes: &[i8], row: &Row) -> f32 {
        let q = &self.fine_row;
        let approx = q.scale * row.scale * dot_i8(codes, &self.fine) as f32;
        let row_norm = row.norm + row.residual;
        approx + q.residual * row_norm + ROUNDING_SLACK * q.norm * row_norm
    }
}

/// Whether an `upper_bound` may reach `threshold`. Written so that a NaN (a vector that is not
/// finite) keeps the record.
pub fn reaches(upper_bound: f32, threshold: f32) -> bool {
    upper_bound.partial_cmp(&threshold) != Some(std::cmp::Ordering::Less)
}

/// No position: the key has no row.
const NONE: u32 = u32::MAX;

/// Rows of int8 codes of one dimension, addressed by key (the index's slot) through one
/// indirection, `position`: a key's row lives at some position of one contiguous array, and
/// `relayout` can move the rows so that those a scan reads together (an IVF's lists) lie one
/// after another.
///
/// Why an indirection rather than rows in key order: slots are handed out in insertion order (and
/// reused), so a scope's records are spread over the tenant's slots, and an IVF list's members
/// are spread over the whole array. At 100,000 records the probed lists' rows were each a cache
/// miss (~440 ns a row, docs/benchmarks.md "A million customers"). Laid out in list order, a list
/// is one sequential read the prefetcher follows. The alternative, a list-ordered second copy of
/// the rows for large scopes, costs 396 B a record; renumbering the slots themselves would move
/// every structure that holds a slot (scopes, terms, postings, bitsets). The indirection costs
/// 8 B a row (`position` and its inverse `key_at`) and moves only the rows.
///
/// A removed row's position is free until a new row takes it or `relayout` compacts the array;
/// nothing else moves a row, so a position handed out stays valid until the next `relayout`.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    dims: usize,
    /// By position.
    codes: Vec<i8>,
    rows: Vec<Row>,
    /// By position: the key whose row it is, `NONE` for a free position.
    key_at: Vec<u32>,
    /// By key: its row's position, `NONE` for none.
    position: Vec<u32>,
    /// Free positions, reused by `set` before the array grows.
    free: Vec<u32>,
    len: usize,
}

impl Rows {
    pub fn new(dims: usize) -> Rows {
        Rows { dims, ..Rows::default() }
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    /// How many keys have a row.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where `key`'s row is, if it has one.
    pub fn position(&self, key: usize) -> Option<usize> {
        match self.position.get(key) {
            Some(&p) if p != NONE => Some(p as usize),
            _ => None,
        }
    }

    /// The key whose row is at `position`, if any.
    pub fn key_at(&self, position: usize) -> Option<usize> {
        self.key_at.get(position).filter(|k| **k != NONE).map(|k| *k as usize)
    }

    /// Stores `v` (of length `dims`) as `key`'s row: in place if it has one, else at a free
    /// position or at the end.
    pub fn set(&mut self, key: usize, v: &[f32]) {
        let position = match self.position(key) {
            Some(p) => p,
            None => {
                let p = match self.free.pop() {
                    Some(p) => p as usize,
                    None => {
                        self.key_at.push(NONE);
                        self.rows.push(Row::default());
                        self.codes.resize(self.codes.len() + self.dims, 0);
                        self.key_at.len() - 1
                    }
                };
                if key >= self.position.len() {
                    self.position.resize(key + 1, NONE);
                }
                self.position[key] = p as u32;
                self.key_at[p] = key as u32;
                self.len += 1;
                p
            }
        };
        let dims = self.dims;
        self.rows[position] = quantize(v, &mut self.codes[position * dims..(position + 1) * dims]);
    }

    /// The rows of `keys` alone, under the same keys and with the same codes: what an index built
    /// elsewhere reads (`index::ann_builds`), a few hundred bytes a key rather than every row.
    pub fn subset(&self, keys: &[u32]) -> Rows {
        let mut subset = Rows::new(self.dims);
        for &key in keys {
            let (Some(p), Some(row)) = (self.position(key as usize), self.row(key as usize)) else {
                continue;
            };
            if key as usize >= subset.position.len() {
                subset.position.resize(key as usize + 1, NONE);
            }
            subset.position[key as usize] = subset.key_at.len() as u32;
            subset.key_at.push(key);
            subset.rows.push(*row);
            subset.codes.extend_from_slice(self.codes_at(p));
            subset.len += 1;
        }
        subset
    }

    /// Stores `v` under the next key (`len`: for rows that are never removed).
    pub fn push(&mut self, v: &[f32]) {
        self.set(self.position.len(), v);
    }

    /// Removes `key`'s row; its position is free for the next `set`.
    pub fn remove(&mut self, key: usize) {
        let Some(p) = self.position(key) else { return };
        self.position[key] = NONE;
        self.key_at[p] = NONE;
        self.codes[p * self.dims..(p + 1) * self.dims].fill(0);
        self.rows[p] = Row::default();
        self.free.push(p as u32);
        self.len -= 1;
    }

    /// Moves the rows so that the keys of `first` (in that order; a key without a row, or met
    /// again, is skipped) take positions 0, 1, 2, …, and every other key's row follows in key
    /// order; free positions are dropped. In place: each row moves once along the cycles of the
    /// permutation, through one row's buffer, so no second copy of the rows is made, even
    /// briefly. O(rows · dims).
    pub fn relayout(&mut self, first: impl IntoIterator<Item = usize>) {
        let slots = self.key_at.len();
        let mut order: Vec<u32> = Vec::with_capacity(self.len);
        let mut placed = vec![false; self.position.len()];
        for key in first {
            if self.position(key).is_some() && !placed[key] {
                placed[key] = true;
                order.push(key as u32);
            }
        }
        for key in 0..self.position.len() {
            if self.position(key).is_some() && !placed[key] {
                order.push(key as u32);
            }
        }
        drop(placed);
        // source[new] = the old position whose row goes to `new`; the free positions fill the
        // tail, so that `source` is a permutation of 0..slots.
        let mut source: Vec<u32> = order.iter().map(|k| self.position[*k as usize]).collect();
        source.extend(self.key_at.iter().enumerate().filter(|(_, k)| **k == NONE).map(|(p, _)| p as u32));
        debug_assert_eq!(source.len(), slots);
        let dims = self.dims;
        let mut done = vec![false; slots];
        let mut held = vec![0i8; dims];
        for start in 0..slots {
            if done[start] || source[start] as usize == start {
                continue;
            }
            held.copy_from_slice(&self.codes[start * dims..(start + 1) * dims]);
            let held_row = self.rows[start];
            let mut at = start;
            loop {
                done[at] = true;
                let from = source[at] as usize;
                if from == start {
                    self.codes[at * dims..(at + 1) * dims].copy_from_slice(&held);
                    self.rows[at] = held_row;
                    break;
                }
                self.codes.copy_within(from * dims..(from + 1) * dims, at * dims);
                self.rows[at] = self.rows[from];
                at = from;
            }
        }
        let live = order.len();
        self.codes.truncate(live * dims);
        self.codes.shrink_to_fit();
        self.rows.truncate(live);
        self.rows.shrink_to_fit();
        for (p, key) in order.iter().enumerate() {
            self.position[*key as usize] = p as u32;
        }
        self.key_at = order;
        self.free = Vec::new();
    }

    /// The codes at `position`.
    pub fn codes_at(&self, position: usize) -> &[i8] {
        &self.codes[position * self.dims..(position + 1) * self.dims]
    }

    /// `key`'s codes, if it has a row.
    pub fn codes(&self, key: usize) -> Option<&[i8]> {
        self.position(key).map(|p| self.codes_at(p))
    }

    /// `key`'s scale and bounds, if it has a row.
    pub fn row(&self, key: usize) -> Option<&Row> {
        self.position(key).map(|p| &self.rows[p])
    }

    /// The similarity of the f32 `query` to `key`'s row (`None` without one):
    /// `scale · Σ qⱼ·codeⱼ`. The only error is the row's own rounding,
    /// `|q·v − q·v̂| ≤ ‖q‖·residual` (~5·10⁻⁴ typical for 384-dim unit vectors), and `may_reach`'s
    /// bound covers it, so a row it rules out cannot score its threshold here either.
    pub fn score(&self, key: usize, query: &[f32]) -> Option<f32> {
        self.position(key).map(|p| self.score_at(p, query))
    }

    /// `score` of the row at `position`.
    pub fn score_at(&self, position: usize, query: &[f32]) -> f32 {
        self.rows[position].scale * codes_dot(self.codes_at(position), query)
    }

    /// `key`'s row as f32 (`scale · codes`) into `out` (of length `dims`); `false` without one.
    pub fn dequantize_into(&self, key: usize, out: &mut [f32]) -> bool {
        let Some(p) = self.position(key) else { return false };
        let scale = self.rows[p].scale;
        for (o, c) in out.iter_mut().zip(self.codes_at(p)) {
            *o = scale * f32::from(*c);
        }
        true
    }

    /// `key`'s row as f32.
    pub fn dequantize(&self, key: usize) -> Option<Vec<f32>> {
        let mut out = vec![0.0; self.dims];
        self.dequantize_into(key, &mut out).then_some(out)
    }

    /// `QuantizedQuery::approx` for `key`'s row (`None` without one).
    pub fn approx(&self, key: usize, query: &QuantizedQuery<'_>) -> Option<f32> {
        self.position(key).map(|p| query.approx(self.codes_at(p), &self.rows[p]))
    }

    /// `QuantizedQuery::may_reach` for `key`'s row; `false` without one (there is nothing to
    /// score).
    pub fn may_reach(&self, key: usize, query: &QuantizedQuery<'_>, threshold: f32) -> bool {
        self.position(key).is_some_and(|p| self.may_reach_at(p, query, threshold))
    }

    /// `QuantizedQuery::may_reach` for the row at `position`.
    pub fn may_reach_at(&self, position: usize, query: &QuantizedQuery<'_>, threshold: f32) -> bool {
        query.may_reach(self.codes_at(position), &self.rows[position], threshold)
    }

    /// `QuantizedQuery::upper_bound` for the row at `position`.
    pub fn upper_bound_at(&self, position: usize, query: &QuantizedQuery<'_>) -> f32 {
        query.upper_bound(self.codes_at(position), &self.rows[position])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vector::dot;

    use crate::vector::testing::unit;

    /// A query near `base`: scores then spread from ~0 to ~1.
    fn near(base: &[f32], seed: u64) -> Vec<f32> {
        let noise = unit(seed, base.len());
        let mut v: Vec<f32> = base.iter().zip(&noise).map(|(a, b)| a + 0.3 * b).collect();
        let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.iter_mut().for_each(|a| *a /= n);
        v
    }

    /// A row's score has the same bits whichever instruction set computes it: the AVX2 build
    /// of the sum adds in the portable build's order and rounds each product the same way.
    #[test]
    fn a_rows_score_has_the_same_bits_on_every_instruction_set() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            for dims in [1, 7, 8, 15, 384, 1027] {
                let mut rows = Rows::new(dims);
                let records: Vec<Vec<f32>> = (0..50).map(|i| unit(i, dims)).collect();
                for r in &records {
                    rows.push(r);
                }
                for q in 0..20 {
                    let query = unit(5_000 + q, dims);
                    for p in 0..records.len() {
                        let codes = rows.codes_at(p);
                        // SAFETY: AVX2 was just checked.
                        let fast = unsafe { codes_dot_avx2(codes, &query) };
                        assert_eq!(
                            fast.to_bits(),
                            codes_dot_portable(codes, &query).to_bits(),
                            "{dims} dims"
                        );
                    }
                }
            }
        }
    }

    /// The bound is on the score that decides (the f32 query against the row), never below it,
    /// and within f32 rounding of it: a bar a thousandth above a record's score rules it out.
    /// Flat vectors (every code at its largest) and spikes are the extremes of rounding; at
    /// 1,024 dims a flat query against a flat row is the largest integer sum there can be.
    #[test]
    fn the_bound_holds_on_the_rows_score_and_is_within_rounding_of_it() {
        for dims in [16, 384, 1024] {
            let mut rows = Rows::new(dims);
            let flat = vec![1.0 / (dims as f32).sqrt(); dims];
            let mut spike = vec![0.0; dims];
            spike[dims / 2] = 1.0;
            let mut records: Vec<Vec<f32>> = (0..300).map(|i| unit(i, dims)).collect();
            records.extend([flat.clone(), spike.clone()]);
            for r in &records {
                rows.push(r);
            }
            let mut queries: Vec<Vec<f32>> =
                (0..40).map(|q| near(&records[q * 7], 10_000 + q as u64)).collect();
            queries.extend([flat.clone(), flat.iter().map(|x| -x).collect(), spike]);
            for (q, v) in queries.iter().enumerate() {
                let query = QuantizedQuery::new(v);
                for i in 0..records.len() {
                    let score = rows.score(i, v).unwrap_or(f32::NAN);
                    let bound = rows.upper_bound_at(rows.position(i).unwrap_or(usize::MAX), &query);
                    assert!(
                        rows.may_reach(i, &query, score),
                        "dims {dims} query {q} record {i}: {bound} < {score}"
                    );
                    assert!(
                        !rows.may_reach(i, &query, score + 1e-3),
                        "dims {dims} query {q} record {i}: the bound {bound} is loose for {score}"
                    );
                }
            }
        }
    }

    #[test]
    fn dot_i8_is_the_exact_integer_sum() {
        let row: Vec<i8> = (0..389).map(|i| ((i * 37) % 255) as i8).map(|c| c.max(-127)).collect();
        let query: Vec<i16> =
            (0..389).map(|i| ((i * 91) % 255) as i8).map(|c| i16::from(c.max(-127))).collect();
        let plain: i64 = row.iter().zip(&query).map(|(a, b)| i64::from(*a) * i64::from(*b)).sum();
        assert_eq!(i64::from(dot_i8(&row, &query)), plain);
        assert_eq!(i64::from(dot_i8_portable(&row, &query)), plain);
    }

    #[test]
    fn rows_remove_reuse_and_degenerate_vectors() {
        let mut rows = Rows::new(4);
        rows.push(&[1.0, 0.0, 0.0, 0.0]);
        rows.push(&[0.0, 1.0, 0.0, 0.0]);
        rows.push(&[0.0, 0.0, 1.0, 0.0]);
        rows.remove(0);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows.codes(0), None);
        assert_eq!(rows.codes(2), Some(&[0, 0, 127, 0][..]));
        let zero = [0.0f32; 4];
        rows.set(5, &zero);
        assert_eq!((rows.len(), rows.position(5)), (3, Some(0)), "the free position is reused");
        let query = QuantizedQuery::new(&[0.5, 0.5, 0.5, 0.5]);
        assert!(rows.may_reach(5, &query, 0.0) && !rows.may_reach(5, &query, 0.01));
        assert!(!rows.may_reach(0, &query, -1.0), "a key without a row has nothing to reach");
        rows.set(1, &[f32::NAN, 0.0, 0.0, 0.0]);
        assert!(rows.may_reach(1, &query, 1e9), "a vector that is not finite is never ruled out");
    }

    /// Every key's row, as (codes, row), for comparing layouts.
    fn snapshot(rows: &Rows, keys: usize) -> Vec<Option<(Vec<i8>, Row)>> {
        (0..keys).map(|k| Some((rows.codes(k)?.to_vec(), *rows.row(k)?))).collect()
    }

    #[test]
    fn relayout_moves_rows_into_the_given_order_and_keeps_every_keys_row() {
        let dims = 24;
        let mut rows = Rows::new(dims);
        let vectors: Vec<Vec<f32>> = (0..600).map(|i| unit(i, dims)).collect();
        for (k, v) in vectors.iter().enumerate() {
            rows.set(k, v);
        }
        // Holes, reused holes and rows past the end, as inserts and removes leave them.
        for k in (0..600).step_by(5) {
            rows.remove(k);
        }
        for k in (0..600).step_by(10) {
            rows.set(k, &vectors[k]);
        }
        for k in 600..640 {
            rows.set(k, &unit(k as u64, dims));
        }
        let before = snapshot(&rows, 700);
        let first: Vec<usize> = (0..700).rev().step_by(3).chain([1, 1, 650]).collect();
        rows.relayout(first.iter().copied());
        assert_eq!(snapshot(&rows, 700), before, "every key keeps its own row");
        let mut expected: Vec<usize> = Vec::new();
        for k in first.iter().copied().chain(0..700) {
            if before[k].is_some() && !expected.contains(&k) {
                expected.push(k);
            }
        }
        let laid_out: Vec<usize> = (0..rows.len()).filter_map(|p| rows.key_at(p)).collect();
        assert_eq!(laid_out, expected, "the given keys first, in order, then the rest by key");
        assert_eq!(rows.len(), expected.len());
        for (k, v) in vectors.iter().enumerate().filter(|(k, _)| before[*k].is_some()) {
            let q = unit(9_999, dims);
            let mut dequantized = vec![0.0; dims];
            assert!(rows.dequantize_into(k, &mut dequantized));
            let f32_dot = dot(&dequantized, &q);
            let score = rows.score(k, &q).unwrap_or(f32::NAN);
            assert!((score - f32_dot).abs() < 1e-5, "key {k}: {score} vs {f32_dot}");
            assert!((score - dot(v, &q)).abs() < 0.05, "key {k} is still its own vector");
        }
        // And it keeps working: new rows go to the end, removed ones free their position.
        rows.remove(expected[0]);
        rows.set(900, &vectors[3]);
        assert_eq!(rows.position(900), Some(0));
    }
}
