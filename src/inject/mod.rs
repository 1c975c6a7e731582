//! Injection: render the funnel's survivors into a `<MEMORY_CONTEXT>` block (`render`) and put
//! that block into the client's Messages request without costing it its prompt cache
//! (`placement`).
//!
//! Why placement is delicate: Anthropic caches a request's prefix in the order tools → system →
//! messages, and a `cache_control` breakpoint hits only when every byte up to it matches what was
//! cached. Memory differs from request to request, so a block inserted in front of a breakpoint
//! would turn the client's cache reads (0.1× input price) into cache writes (1.25× or 2×) on every
//! call. The block therefore goes after the client's last breakpoint: at the end of `system` when
//! no message carries one, otherwise as a trailing block of the last user turn. Nothing else in
//! the body changes: the client's blocks keep their bytes, and no breakpoint is added or moved.
//!
//! Why rendering is strict: records are data written by many hands, and the block sits in front of
//! a model that follows instructions. Each record is one line of JSON with `<`, `>` and `&`
//! escaped, so no record can close the block or open a forged one; the contract in front tells
//! the model that the records are reference notes, never instructions.

pub mod placement;
pub mod render;
pub mod scan;

#[cfg(test)]
mod placement_props;
#[cfg(test)]
mod placement_tests;
#[cfg(test)]
mod render_tests;

pub use placement::{InjectError, Injected, Placement, inject};
pub use render::{
    DEFAULT_RELEASE, ReleaseSource, RenderError, RenderItem, Templates, compact_line, record_line,
};
