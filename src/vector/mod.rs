//! The vector maths of the index: the dot product, int8 copies of the embeddings with an exact
//! bound on what they can score (`quant`), and the approximate index of inverted lists (`ivf`).
//! Below the funnel and the embedder, which both use it; it uses no other module of the crate.

pub mod ivf;
pub mod quant;

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
