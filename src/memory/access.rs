//! Access tracking: `access_count` and `last_accessed_at` of the records injected into answered
//! requests.
//!
//! The request path only adds to a map in memory (one short lock per request); the ticker writes
//! the sums to the store once a second, one UPDATE per record touched, so a busy gateway does not
//! write to its database on every request. The UPDATE adds to the stored count and never moves
//! `last_accessed_at` back, so replicas flushing in any order agree. These are statistics, not
//! records: they change no revision, `updated_at` or changelog, and what a replica had not yet
//! flushed when it died is lost.

use crate::record::Access;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct AccessLog {
    pending: Mutex<HashMap<(String, String), (i64, i64)>>,
}

impl AccessLog {
    /// Counts one access of each record at `at_ms`.
    pub fn note(&self, tenant: &str, ids: &[String], at_ms: i64) {
        if ids.is_empty() {
            return;
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            let entry = pending.entry((tenant.to_owned(), id.clone())).or_insert((0, at_ms));
            entry.0 += 1;
            entry.1 = entry.1.max(at_ms);
        }
    }

    /// Everything counted since the last call, emptying the log.
    pub fn take(&self) -> Vec<Access> {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        pending
            .into_iter()
            .map(|((tenant, id), (count, last_ms))| Access { tenant, id, count, last_ms })
            .collect()
    }

    /// Puts back what could not be written, so the next flush tries again.
    pub fn restore(&self, accesses: Vec<Access>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        for a in accesses {
            let entry = pending.entry((a.tenant, a.id)).or_insert((0, a.last_ms));
            entry.0 += a.count;
            entry.1 = entry.1.max(a.last_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn accesses_add_up_per_record_and_keep_the_latest_time() {
        let log = AccessLog::default();
        log.note("acme", &ids(&["a", "b"]), 100);
        log.note("acme", &ids(&["a"]), 50);
        log.note("other", &ids(&["a"]), 70);
        let mut taken = log.take();
        taken.sort_by(|x, y| (&x.tenant, &x.id).cmp(&(&y.tenant, &y.id)));
        let row =
            |t: &str, id: &str, count, last_ms| Access { tenant: t.into(), id: id.into(), count, last_ms };
        assert_eq!(taken, [row("acme", "a", 2, 100), row("acme", "b", 1, 100), row("other", "a", 1, 70)]);
        assert!(log.take().is_empty(), "take empties the log");
    }

    #[test]
    fn what_could_not_be_written_comes_back_with_the_next_flush() {
        let log = AccessLog::default();
        log.note("acme", &ids(&["a"]), 100);
        let failed = log.take();
        log.note("acme", &ids(&["a"]), 90);
        log.restore(failed);
        assert_eq!(log.take(), [Access { tenant: "acme".into(), id: "a".into(), count: 2, last_ms: 100 }]);
    }
}
