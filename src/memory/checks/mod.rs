//! What a record must satisfy before it is stored: its envelope (`envelope`: fields, dates,
//! scopes, sizes), its content against the JSON Schema of its type and version (`schemas`,
//! compiled once at startup), and no secrets anywhere in it (`secrets`).
//!
//! Every check names each problem by its JSON path (`json_path`), so a 422 can tell the writer
//! exactly which value to fix; one answer names at most `problems::MAX_PROBLEMS` of them. Sizes
//! are checked before anything reads the values: a record over the size limit is refused
//! unread, so no check's cost grows past what the limit allows.

pub mod envelope;
pub mod json_path;
pub mod problems;
pub mod schemas;
pub mod secrets;
