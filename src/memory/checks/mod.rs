//! What a record must satisfy before it is stored: its envelope (`envelope`: fields, dates,
//! scopes, sizes), its content against the JSON Schema of its type and version (`schemas`,
//! compiled once at startup), and no secrets anywhere in it (`secrets`).
//!
//! Every check names each problem by its JSON path (`json_path`), so a 422 can tell the writer
//! exactly which value to fix.

pub mod envelope;
pub mod json_path;
pub mod schemas;
pub mod secrets;
