//! The allocator every binary built on this crate uses (memgate, the tests, the benchmarks alike,
//! so what they measure is what runs): mimalloc instead of the system's glibc malloc.
//!
//! A replica's index is millions of small allocations (heads, names, term lists, slot lists), made
//! on the threads that index a load's pages and freed on others. glibc spent a fifth of a
//! 1.11M-record startup in its own bookkeeping (`_int_malloc`, `unlink_chunk`,
//! `malloc_consolidate`) and arena locks, and kept the pages a load freed; mimalloc's size-class
//! pages and thread-local free lists made the same load a sixth faster, the requests on it a
//! fifth cheaper and the replica 13 % smaller (docs/benchmarks.md, "A million customers"), for
//! ~25 MB more at idle.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hands the allocator's free pages back to the system now, rather than when it next gets to
/// it: after a full load, which frees about as much as it keeps (each page's parsed rows).
pub fn release_free_memory() {
    // SAFETY: mi_collect takes no pointer; it only returns memory no allocation uses.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
