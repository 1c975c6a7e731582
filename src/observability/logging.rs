//! Log setup: human-readable text or one JSON object per line, always on stderr (stdout carries
//! only the "listening on" line that scripts and tests read).

use crate::config::LogFormat;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call (tests) is a no-op.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only for a person at a terminal: in a file or a pipe the escape codes are noise
    // around every field, and their formatting was work on every request's log line.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
