//! Releases of the memory rules and which one a request gets.

pub mod release;

pub use release::Release;
