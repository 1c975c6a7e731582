//! `[records]`: where extra schemas are, how large a record's content may be, and dormancy per
//! type (`[records.dormancy] <type> = "90d"`). The schema files are read and compiled by
//! `memory::checks` when the state is built; that a dormancy rule names a known type is checked
//! there too, once the schemas are known.

use super::invalid;
use crate::error::StartupError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecords {
    pub schemas_dir: Option<PathBuf>,
    pub max_content_bytes: Option<usize>,
    /// `<type> = "90d"` (days; `h` for hours): records of that type unused that long go dormant.
    #[serde(default)]
    pub dormancy: BTreeMap<String, String>,
    /// How often the dormancy rules are applied, in seconds (default 3600).
    pub dormancy_check_every_secs: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct RecordsConfig {
    /// Extra or overriding schema files (`<dir>/<schema_version>/<type>.json`); built-ins always load.
    pub schemas_dir: Option<PathBuf>,
    pub max_content_bytes: usize,
    /// Per type, how long a record may go unused before it becomes dormant. Empty: off.
    pub dormancy: BTreeMap<String, Duration>,
    /// The period of the dormancy sweep; the first runs one period after start.
    pub dormancy_check_every: Duration,
}

impl Default for RecordsConfig {
    fn default() -> Self {
        RecordsConfig {
            schemas_dir: None,
            max_content_bytes: 64 * 1024,
            dormancy: BTreeMap::new(),
            dormancy_check_every: Duration::from_secs(3600),
        }
    }
}

/// `"90d"` or `"12h"`: a whole number of days or hours, at least one.
fn idle_period(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit_secs) = match (text.strip_suffix('d'), text.strip_suffix('h')) {
        (Some(days), _) => (days, 86_400),
        (_, Some(hours)) => (hours, 3_600),
        _ => return None,
    };
    let n: u64 = number.parse().ok().filter(|n| *n >= 1 && *n <= 36_500)?;
    Some(Duration::from_secs(n * unit_secs))
}

impl RawRecords {
    pub fn settle(self) -> Result<RecordsConfig, StartupError> {
        let default = RecordsConfig::default();
        let mut dormancy = BTreeMap::new();
        for (record_type, text) in self.dormancy {
            let period = idle_period(&text).ok_or_else(|| {
                invalid(
                    &format!("records.dormancy.{record_type}"),
                    format!("`{text}`: use a number of days or hours, e.g. \"90d\" or \"12h\""),
                )
            })?;
            dormancy.insert(record_type, period);
        }
        let dormancy_check_every = match self.dormancy_check_every_secs {
            None => default.dormancy_check_every,
            Some(0) => return Err(invalid("records.dormancy_check_every_secs", "use at least 1 (s)")),
            Some(secs) => Duration::from_secs(secs),
        };
        let records = RecordsConfig {
            schemas_dir: self.schemas_dir,
            max_content_bytes: self.max_content_bytes.unwrap_or(default.max_content_bytes),
            dormancy,
            dormancy_check_every,
        };
        if records.max_content_bytes < 256 {
            return Err(invalid("records.max_content_bytes", "use at least 256 bytes"));
        }
        Ok(records)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn idle_periods_are_days_or_hours() {
        assert_eq!(idle_period("90d"), Some(Duration::from_secs(90 * 86_400)));
        assert_eq!(idle_period("12h"), Some(Duration::from_secs(12 * 3_600)));
        for bad in ["", "d", "0d", "90", "90m", "-3d", "1.5d", "99999999d", "9éd", "é"] {
            assert_eq!(idle_period(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn dormancy_is_off_by_default_and_a_bad_period_names_its_key() {
        assert!(RawRecords::default().settle().unwrap().dormancy.is_empty());
        let raw =
            RawRecords { dormancy: BTreeMap::from([("fact".into(), "soon".into())]), ..Default::default() };
        let err = raw.settle().unwrap_err().to_string();
        assert!(err.contains("records.dormancy.fact"), "{err}");
    }
}
