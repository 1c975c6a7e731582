//! Layer: temporal. `valid_from <= now < valid_until`, status active, and a schema version the
//! release reads.

use super::index::TenantIndex;
use super::trace::{LayerLog, Trace};
use crate::memory::record::{Status, format_ms};

pub fn current(
    index: &TenantIndex,
    candidates: Vec<u32>,
    now_ms: i64,
    schema_versions: &[String],
    detailed: bool,
    trace: &mut Trace,
) -> Vec<u32> {
    let mut log = LayerLog::new("temporal", candidates.len(), detailed);
    let mut kept = Vec::with_capacity(candidates.len());
    for slot in candidates {
        let Some(item) = index.slots[slot as usize].as_ref() else { continue };
        let record = &item.record;
        if record.status != Status::Active {
            log.remove(&record.id, || format!("status {}", record.status.as_str()));
        } else if now_ms < record.valid_from_ms {
            log.remove(&record.id, || format!("not valid before {}", format_ms(record.valid_from_ms)));
        } else if now_ms >= record.valid_until_ms {
            log.remove(&record.id, || format!("expired at {}", format_ms(record.valid_until_ms)));
        } else if !schema_versions.iter().any(|v| *v == record.schema_version) {
            log.remove(&record.id, || {
                format!("schema {} is not read by this release", record.schema_version)
            });
        } else {
            kept.push(slot);
        }
    }
    log.finish(kept.len(), trace);
    kept
}
