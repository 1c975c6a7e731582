//! Int8 copies of the embeddings, for the semantic layer's scans.
//!
//! At 100,000 records the scans are limited by memory, not arithmetic: a 384-dim f32 vector is
//! 1.5 KB, and the tenant's vectors far exceed the CPU caches. An int8 copy is a quarter of that.
//! Each vector `v` is stored as `scale · codes` (`scale = max|vᵢ| / 127`) with two numbers that
//! bound what was lost: `residual ≥ ‖v − scale·codes‖` and `norm ≥ ‖v‖`. For a query `a` and a
//! record `b`, Cauchy–Schwarz gives
//!
//! `|a·b − â·b̂| ≤ ‖a − â‖·‖b‖ + ‖â‖·‖b − b̂‖`,
//!
//! so a record whose approximate score plus this bound (and a little for f32 rounding) is below
//! the threshold cannot reach it. The others — a few dozen per query — are scored again with the
//! f32 query against the row (`Rows::score`), and only that score decides and is reported: the
//! int8 pass only skips records that provably fail. For 384-dim unit vectors the bound is about
//! 0.02. The row is the index's one copy of the embedding; `Rows::score` is off the f32 dot
//! product by the row's rounding alone (docs/benchmarks.md, "Index and funnel").

/// How one quantized vector relates to the original: `v ≈ scale · codes`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Row {
    pub scale: f32,
    /// At least `‖v − scale·codes‖`; infinite when `v` is not finite (never ruled out then).
    pub residual: f32,
    /// At least `‖v‖`.
    pub norm: f32,
}

/// Absolute slack for f32 rounding in both the exact dot product and the bound, per unit of
/// `‖a‖·‖b‖`. The exact dot's own rounding error is below 1e-5 for 384 dims.
const ROUNDING_SLACK: f32 = 1e-3;

/// Quantizes `v` into `out` (same length).
pub fn quantize(v: &[f32], out: &mut [i8]) -> Row {
    if !v.iter().all(|x| x.is_finite()) {
        out.fill(0);
        return Row { scale: 0.0, residual: f32::INFINITY, norm: f32::INFINITY };
    }
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    let (mut residual_sq, mut norm_sq) = (0.0f64, 0.0f64);
    for (code, x) in out.iter_mut().zip(v) {
        let c = (x / scale).round().clamp(-127.0, 127.0);
        *code = c as i8;
        let r = f64::from(*x) - f64::from(scale) * f64::from(c);
        residual_sq += r * r;
        norm_sq += f64::from(*x) * f64::from(*x);
    }
    Row { scale, residual: round_up(residual_sq.sqrt()), norm: round_up(norm_sq.sqrt()) }
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

/// A query vector with its int8 form, made once per query.
pub struct QuantizedQuery<'a> {
    pub vector: &'a [f32],
    codes: Vec<i16>,
    row: Row,
}

impl<'a> QuantizedQuery<'a> {
    pub fn new(vector: &'a [f32]) -> QuantizedQuery<'a> {
        let mut codes = vec![0i8; vector.len()];
        let row = quantize(vector, &mut codes);
        QuantizedQuery { vector, codes: codes.into_iter().map(i16::from).collect(), row }
    }

    pub fn dims(&self) -> usize {
        self.vector.len()
    }

    /// The similarity to the vector stored as (`codes`, `row`), from the int8 forms only.
    pub fn approx(&self, codes: &[i8], row: &Row) -> f32 {
        self.row.scale * row.scale * dot_i8(codes, &self.codes) as f32
    }

    /// Whether the record stored as (`codes`, `row`) may score at least `threshold` exactly;
    /// `false` means it certainly does not. `codes` must have the query's length.
    pub fn may_reach(&self, codes: &[i8], row: &Row, threshold: f32) -> bool {
        let approx = self.approx(codes, row);
        let q = &self.row;
        let bound =
            q.residual * row.norm + (q.norm + q.residual) * row.residual + ROUNDING_SLACK * q.norm * row.norm;
        // Written so that a NaN (a vector that is not finite) keeps the record.
        (approx + bound).partial_cmp(&threshold) != Some(std::cmp::Ordering::Less)
    }
}

/// Rows of int8 codes of one dimension, contiguous, addressed by position.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    dims: usize,
    codes: Vec<i8>,
    rows: Vec<Row>,
}

impl Rows {
    pub fn new(dims: usize) -> Rows {
        Rows { dims, codes: Vec::new(), rows: Vec::new() }
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Grows (with empty rows) or shrinks to `len` rows.
    pub fn resize(&mut self, len: usize) {
        self.codes.resize(len * self.dims, 0);
        self.rows.resize(len, Row::default());
    }

    /// Stores `v` (of length `dims`) at `i`, growing as needed.
    pub fn set(&mut self, i: usize, v: &[f32]) {
        if i >= self.len() {
            self.resize(i + 1);
        }
        let dims = self.dims;
        self.rows[i] = quantize(v, &mut self.codes[i * dims..(i + 1) * dims]);
    }

    pub fn push(&mut self, v: &[f32]) {
        self.set(self.len(), v);
    }

    /// Removes row `i` by moving the last row into its place.
    pub fn swap_remove(&mut self, i: usize) {
        let dims = self.dims;
        let last = self.len() - 1;
        if i != last {
            self.codes.copy_within(last * dims..(last + 1) * dims, i * dims);
        }
        self.rows.swap_remove(i);
        self.codes.truncate(last * dims);
    }

    pub fn codes(&self, i: usize) -> &[i8] {
        &self.codes[i * self.dims..(i + 1) * self.dims]
    }

    pub fn row(&self, i: usize) -> &Row {
        &self.rows[i]
    }

    /// The similarity of the f32 `query` to row `i`: `scale · Σ qⱼ·codeⱼ`. The only error is the
    /// row's own rounding, `|q·v − q·v̂| ≤ ‖q‖·residual` (~5·10⁻⁴ typical for 384-dim unit
    /// vectors), and `may_reach`'s bound covers it, so a row it rules out cannot score its
    /// threshold here either.
    pub fn score(&self, i: usize, query: &[f32]) -> f32 {
        let codes = self.codes(i);
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
        self.rows[i].scale * (sums.iter().sum::<f32>() + tail)
    }

    /// Row `i` as f32 (`scale · codes`) into `out` (of length `dims`).
    pub fn dequantize_into(&self, i: usize, out: &mut [f32]) {
        let scale = self.rows[i].scale;
        for (o, c) in out.iter_mut().zip(self.codes(i)) {
            *o = scale * f32::from(*c);
        }
    }

    /// Row `i` as f32.
    pub fn dequantize(&self, i: usize) -> Vec<f32> {
        let mut out = vec![0.0; self.dims];
        self.dequantize_into(i, &mut out);
        out
    }

    /// `QuantizedQuery::approx` for row `i`.
    pub fn approx(&self, i: usize, query: &QuantizedQuery<'_>) -> f32 {
        query.approx(self.codes(i), &self.rows[i])
    }

    /// `QuantizedQuery::may_reach` for row `i`.
    pub fn may_reach(&self, i: usize, query: &QuantizedQuery<'_>, threshold: f32) -> bool {
        query.may_reach(self.codes(i), &self.rows[i], threshold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vector::dot;

    use crate::vector::testing::unit;

    #[test]
    fn the_bound_holds_and_is_tight_enough_to_rule_out_most_records() {
        let dims = 384;
        let mut rows = Rows::new(dims);
        let records: Vec<Vec<f32>> = (0..500).map(|i| unit(i, dims)).collect();
        for r in &records {
            rows.push(r);
        }
        let mut ruled_out = 0;
        for q in 0..50 {
            // Queries near a record, so scores spread from ~0 to ~1.
            let base = &records[q * 7];
            let noise = unit(10_000 + q as u64, dims);
            let mut v: Vec<f32> = base.iter().zip(&noise).map(|(a, b)| a + 0.3 * b).collect();
            let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
            v.iter_mut().for_each(|a| *a /= n);
            let query = QuantizedQuery::new(&v);
            for (i, r) in records.iter().enumerate() {
                let exact = dot(&v, r);
                // The largest threshold the record still reaches must never be ruled out.
                assert!(rows.may_reach(i, &query, exact), "query {q} record {i} score {exact}");
                if !rows.may_reach(i, &query, exact + 0.05) {
                    ruled_out += 1;
                }
            }
        }
        assert!(ruled_out > 50 * 500 * 9 / 10, "the bound is too loose: {ruled_out}");
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
    fn rows_swap_remove_and_degenerate_vectors() {
        let mut rows = Rows::new(4);
        rows.push(&[1.0, 0.0, 0.0, 0.0]);
        rows.push(&[0.0, 1.0, 0.0, 0.0]);
        rows.push(&[0.0, 0.0, 1.0, 0.0]);
        rows.swap_remove(0);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows.codes(0), [0, 0, 127, 0]);
        let zero = [0.0f32; 4];
        rows.set(5, &zero);
        assert_eq!(rows.len(), 6);
        let query = QuantizedQuery::new(&[0.5, 0.5, 0.5, 0.5]);
        assert!(rows.may_reach(5, &query, 0.0) && !rows.may_reach(5, &query, 0.01));
        rows.set(1, &[f32::NAN, 0.0, 0.0, 0.0]);
        assert!(rows.may_reach(1, &query, 1e9), "a vector that is not finite is never ruled out");
    }
}
