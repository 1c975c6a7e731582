//! Dormancy, never silent decay: an operator may say, per type (`[records.dormancy]`), that a
//! record nobody used for a while goes `dormant` — out of injection, still listed by the admin
//! API and found by the memory tools, and active again on a tool's read or one `activate`. Each
//! change is an ordinary status change in the record's history (actor `dormancy`), so nothing is
//! lost and every step can be undone. Both changes name the status they start from (compared and
//! set in the store's transaction: `MemoryService::change_status`): the sweep makes only an
//! `active` record dormant, a read wakes only a `dormant` one, so neither undoes a pause or an
//! archive an operator made after the sweep read its page or the reader its index.
//!
//! "Used" is the record's `last_accessed_at`: injections and tool reads, counted in memory on the
//! request path and written in batches by the ticker (`access`), not a write per request. A
//! record written (created, edited, approved, reactivated) since the cutoff is not idle either.
//! Pinned records (priority 5) are exempt.
//!
//! A sweep reads the store a page at a time, per type, and changes at most `MAX_PER_SWEEP`
//! records per type; the report says when there was more, and the next sweep takes the rest.

use super::{MemoryError, MemoryService};
use crate::clock::now_ms;
use crate::record::{Record, Status};
use std::collections::BTreeMap;
use std::time::Duration;

/// Who the history names for a change dormancy made.
pub const ACTOR: &str = "dormancy";

/// The most records one sweep (or dry run) lists per type.
pub const MAX_PER_SWEEP: usize = 1000;

const PAGE: u32 = 200;

/// Per type, how long a record may go unused.
pub type Rules = BTreeMap<String, Duration>;

/// One record a sweep reaches.
#[derive(Debug, Clone)]
pub struct Idle {
    pub record: Record,
    /// When it was last used or written (ms).
    pub idle_since_ms: i64,
    /// The type's period, in whole days (rounded down; `0` for a period in hours below a day).
    pub after_days: u64,
}

/// What a sweep found, and did unless it was a dry run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub records: Vec<Idle>,
    /// Some type had more than `MAX_PER_SWEEP` idle records: the next sweep takes the rest.
    pub truncated: bool,
    /// How many were made dormant (0 in a dry run).
    pub applied: usize,
}

impl MemoryService {
    /// The dormancy rules in force (empty: dormancy is off).
    pub fn dormancy_rules(&self) -> &Rules {
        &self.dormancy
    }

    /// Finds the records the rules make dormant now, in `tenant` or (`None`) in every tenant, and
    /// unless `dry_run`, makes them dormant. Pending access counts are written first, so a
    /// record used a moment ago counts as used.
    pub async fn sweep_dormant(&self, tenant: Option<&str>, dry_run: bool) -> Result<Report, MemoryError> {
        let mut report = Report::default();
        if self.dormancy.is_empty() {
            return Ok(report);
        }
        self.flush_accesses().await.map_err(MemoryError::Store)?;
        let now = now_ms();
        for (record_type, period) in self.dormancy.iter() {
            let cutoff = now.saturating_sub(i64::try_from(period.as_millis()).unwrap_or(i64::MAX));
            let after_days = period.as_secs() / 86_400;
            let mut found = 0;
            let mut cursor: Option<(String, String)> = None;
            loop {
                let after = cursor.as_ref().map(|(t, i)| (t.as_str(), i.as_str()));
                let page = self
                    .store
                    .dormancy_candidates(tenant, record_type, cutoff, after, PAGE)
                    .await
                    .map_err(MemoryError::Store)?;
                let full = page.len() == PAGE as usize;
                cursor = page.last().map(|r| (r.tenant.clone(), r.id.clone()));
                for record in page {
                    if found == MAX_PER_SWEEP {
                        report.truncated = true;
                        break;
                    }
                    found += 1;
                    let idle_since_ms =
                        record.updated_at_ms.max(record.last_accessed_at_ms.unwrap_or(i64::MIN));
                    report.records.push(Idle { record, idle_since_ms, after_days });
                }
                if !full || found == MAX_PER_SWEEP {
                    break;
                }
            }
        }
        if dry_run {
            return Ok(report);
        }
        for idle in &mut report.records {
            let record = &idle.record;
            // Only from `active`: a record paused, archived or woken since the page was read keeps
            // what happened to it since.
            match self
                .change_status(&record.tenant, &record.id, &[Status::Active], Status::Dormant, ACTOR)
                .await
            {
                Ok(changed) => {
                    idle.record = changed;
                    report.applied += 1;
                }
                // Deleted or changed meanwhile: nothing to do.
                Err(MemoryError::NotFound(_) | MemoryError::StatusConflict { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(report)
    }

    /// Makes these dormant records active again: a memory tool read them. Only `dormant` wakes
    /// on use: a record the reader saw dormant that an operator paused or archived since (another
    /// replica's index may lag a moment) stays as the operator left it. Rare on a request's path
    /// (once read, a record is active); a failure is logged and the next read tries again.
    pub async fn wake(&self, tenant: &str, ids: &[String], actor: &str) {
        for id in ids {
            match self.change_status(tenant, id, &[Status::Dormant], Status::Active, actor).await {
                Ok(_) | Err(MemoryError::NotFound(_) | MemoryError::StatusConflict { .. }) => {}
                Err(err) => tracing::warn!(error = %err, %id, "could not make a dormant record active again"),
            }
        }
    }
}
