//! Memory records: what may go into a record's `content`.
//!
//! A write is checked in two ways before it is stored. `schemas` holds the JSON Schemas, one per
//! schema version and record type, compiled once at startup; `secrets` finds credentials that
//! must never become memory. Both name every problem by its JSON path (`json_path`), so a 422
//! can tell the writer exactly which value to fix.

pub mod json_path;
pub mod schemas;
pub mod secrets;
