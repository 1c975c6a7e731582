//! `[records]`: where extra schemas are, and how large a record's content may be. The schema
//! files are read and compiled by `memory::checks` when the state is built.

use super::invalid;
use crate::error::StartupError;
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecords {
    pub schemas_dir: Option<PathBuf>,
    pub max_content_bytes: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct RecordsConfig {
    /// Extra or overriding schema files (`<dir>/<schema_version>/<type>.json`); built-ins always load.
    pub schemas_dir: Option<PathBuf>,
    pub max_content_bytes: usize,
}

impl Default for RecordsConfig {
    fn default() -> Self {
        RecordsConfig { schemas_dir: None, max_content_bytes: 64 * 1024 }
    }
}

impl RawRecords {
    pub fn settle(self) -> Result<RecordsConfig, StartupError> {
        let records = RecordsConfig {
            schemas_dir: self.schemas_dir,
            max_content_bytes: self.max_content_bytes.unwrap_or(RecordsConfig::default().max_content_bytes),
        };
        if records.max_content_bytes < 256 {
            return Err(invalid("records.max_content_bytes", "use at least 256 bytes"));
        }
        Ok(records)
    }
}
