//! Linear time as a property: every parser of untrusted text costs CPU time proportional to the
//! size of its input, whatever the input's shape. A parser that is quadratic in some shape (a
//! scan restarted at every `<`, a duplicate check that walks every earlier finding) is a way to
//! stop the gateway with one request, and it hides until someone sends that shape.
//!
//! Each test builds its worst shapes at 1, 4 and 16 MiB and measures the CPU time of the calling
//! thread (not wall time, so other tests running beside it do not count). The cost per byte at
//! 16 MiB may be at most `SLACK` times the cost per byte at 1 MiB: a linear parser stays near 1
//! (cache misses on larger inputs lift it a little), a quadratic one is at 16. The best of
//! `RUNS` runs is taken at each size, so one preempted or cold run does not decide.
//!
//! Checks that a debug build runs at about a megabyte a second (the secret scanner's seventeen
//! detectors, and the record and import checks that call it) use `SMALL_SIZES`, 64 KiB to 1 MiB:
//! at 16 MiB one shape would take minutes. The sizes still grow sixteenfold, so a quadratic cost
//! still shows as sixteen times the cost per byte.

mod conditions;
mod envelope;
mod imports;
mod index;
mod lexical;
mod query;
mod render;
mod secrets;

use std::time::Duration;

pub const MIB: usize = 1 << 20;
/// The sizes every shape runs at.
pub const SIZES: [usize; 3] = [MIB, 4 * MIB, 16 * MIB];
/// The sizes for checks a debug build runs at about a megabyte a second.
pub const SMALL_SIZES: [usize; 3] = [MIB / 16, MIB / 4, MIB];
/// How much more a byte may cost at 16 MiB than at 1 MiB.
const SLACK: f64 = 4.0;
const RUNS: usize = 3;

/// CPU time the calling thread has used so far.
fn thread_cpu() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The least CPU time `run(input)` took over `RUNS` runs.
fn best_of<T>(input: &T, run: &impl Fn(&T)) -> Duration {
    (0..RUNS)
        .map(|_| {
            let started = thread_cpu();
            run(input);
            thread_cpu() - started
        })
        .min()
        .unwrap_or_default()
}

/// Asserts that `run` costs linear CPU time over `make(n)` for every size in `SIZES`, where
/// `make(n)` builds an input of about `n` bytes of the shape named `shape`.
pub fn assert_linear<T>(shape: &str, make: impl Fn(usize) -> T, run: impl Fn(&T)) {
    assert_linear_at(&SIZES, shape, make, run);
}

/// `assert_linear` at `sizes` (each four times the one before) instead of `SIZES`.
pub fn assert_linear_at<T>(sizes: &[usize], shape: &str, make: impl Fn(usize) -> T, run: impl Fn(&T)) {
    let mut per_byte = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let input = make(size);
        let took = best_of(&input, &run);
        per_byte.push((size, took, took.as_secs_f64() / size as f64));
    }
    // Fixed costs (a first allocation, a lazily built table, a parser that stops reading at a
    // limit) make small inputs dear per byte; each size is compared with the cheapest per byte of
    // the sizes up to it, so only growth with size counts against the parser: a cost that falls
    // per byte as the input grows (flat past a limit) passes, one that rises fails.
    let report: Vec<String> =
        per_byte.iter().map(|(size, took, _)| format!("{} KiB: {took:?}", size / 1024)).collect();
    let mut base = f64::INFINITY;
    for (size, _, cost) in &per_byte {
        base = base.min(cost.max(1e-12));
        assert!(
            *cost <= base * SLACK,
            "{shape}: a byte costs {:.1}x more at {} KiB than at the cheapest smaller size ({})",
            cost / base,
            size / 1024,
            report.join(", ")
        );
    }
}

/// `piece` repeated until the text holds at least `size` bytes.
pub fn repeat_to(piece: &str, size: usize) -> String {
    piece.repeat(size.div_ceil(piece.len().max(1)))
}
