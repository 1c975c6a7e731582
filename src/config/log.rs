//! `[log]`: the log's format and level (a `tracing` filter).

use super::invalid;
use crate::error::StartupError;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub format: Option<String>,
    pub level: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A level or an `EnvFilter` directive (`info`, `memgate=debug`).
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { format: LogFormat::default(), level: "info".to_owned() }
    }
}

impl RawLog {
    pub fn settle(self) -> Result<LogConfig, StartupError> {
        let default = LogConfig::default();
        let format = match self.format.as_deref() {
            None => default.format,
            Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(invalid(
                    "log.format",
                    format!("`{other}` is not a format; use `text` or `json` (MEMGATE_LOG_FORMAT)"),
                ));
            }
        };
        let level = self.level.unwrap_or(default.level);
        if tracing_subscriber::EnvFilter::try_new(&level).is_err() {
            return Err(invalid(
                "log.level",
                format!("`{level}` is not a level or filter; use e.g. `info` or `memgate=debug`"),
            ));
        }
        Ok(LogConfig { format, level })
    }
}
