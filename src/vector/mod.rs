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

/// Deterministic pseudo-random vectors for the tests of the vector maths, the index and the funnel.
#[cfg(test)]
pub(crate) mod testing {
    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        pub fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        /// Roughly normal (sum of uniforms).
        pub fn gauss(&mut self) -> f32 {
            (0..4).map(|_| (self.next() % 10_000) as f32 / 10_000.0).sum::<f32>() - 2.0
        }
    }

    /// A deterministic pseudo-random unit vector (xorshift), for the ivf and quant unit tests.
    pub(crate) fn unit(seed: u64, dims: usize) -> Vec<f32> {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        normalized((0..dims).map(|_| (rng.next() % 2000) as f32 / 1000.0 - 1.0).collect())
    }

    pub(crate) fn normalized(mut v: Vec<f32>) -> Vec<f32> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        v
    }
}
