//! What this replica remembers of the limits the database keeps (`crate::store::trigger_limits`),
//! so that the usual case costs no round trip:
//!
//! - `Cooling`: the cooldowns this replica started. A firing inside one is not decided at all,
//!   so the answer's `X-Memory-Triggered` says 0. A firing that another replica's cooldown
//!   covers is not known here: it is decided, and refused when written (the database is the
//!   authority; this is only the shortcut).
//! - `Paces`: the endpoints this replica found at their pace, and the next slot it handed out
//!   for each, so that a backlog is spread over the coming slots (one action per slot) instead of
//!   coming back all at once to be deferred again.
//!
//! Both are bounded: `Cooling` forgets what ran out when it fills, and everything when that is
//! not enough (the database still holds); `Paces` has one entry per configured endpoint.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// Cooldowns remembered at most.
const COOLING_ENTRIES: usize = 50_000;

/// Who a cooldown is for, as the database keeps it: a hash of the subject, or of the caller's
/// key when the request names no subject. No personal data is stored for it, and erasing a
/// subject can still find its cooldowns (`for_subject`).
pub fn cooled_for(tenant: &str, subject: Option<&str>, key: &str) -> String {
    let (kind, who) = match subject {
        Some(subject) => ("subject", subject),
        None => ("key", key),
    };
    let mut hash = Sha256::new();
    hash.update(b"memgate-cooldown-v1");
    for part in [tenant.as_bytes(), kind.as_bytes(), who.as_bytes()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// `cooled_for` of an end user, for erasure.
pub fn for_subject(tenant: &str, subject: &str) -> String {
    cooled_for(tenant, Some(subject), "")
}

/// (tenant, record id, cooled_for) → (until, the turn that started it).
type CoolingMap = HashMap<(String, String, String), (i64, String)>;

/// The cooldowns this replica started.
#[derive(Default)]
pub struct Cooling {
    entries: Mutex<CoolingMap>,
}

impl Cooling {
    /// `None` when the record may fire for `cooled_for` in turn `request_id` now (and then its
    /// cooldown runs until `until_ms`); else when the cooldown another turn started runs out.
    /// The same turn again (a client's retry) fires again: it decides the same ids.
    pub fn check(
        &self,
        (tenant, record_id, cooled_for): (&str, &str, &str),
        request_id: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Option<i64> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant.to_owned(), record_id.to_owned(), cooled_for.to_owned());
        if let Some((until, turn)) = entries.get(&key)
            && *until > now_ms
        {
            return (turn != request_id).then_some(*until);
        }
        if entries.len() >= COOLING_ENTRIES {
            entries.retain(|_, (until, _)| *until > now_ms);
            // Still mostly full of live cooldowns: start over rather than sweep on every insert.
            if entries.len() >= COOLING_ENTRIES / 2 {
                entries.clear();
            }
        }
        entries.insert(key, (until_ms, request_id.to_owned()));
        None
    }

    /// Forgets the cooldown turn `request_id` started for this key (its firing was not written
    /// after all); one another turn started since is kept.
    pub fn release(&self, (tenant, record_id, cooled_for): (&str, &str, &str), request_id: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant.to_owned(), record_id.to_owned(), cooled_for.to_owned());
        if entries.get(&key).is_some_and(|(_, turn)| turn == request_id) {
            entries.remove(&key);
        }
    }

    /// Erasure: forgets `tenant`'s cooldowns of `record_ids`, and those for `cooled_for` (a
    /// subject's hash) when given.
    pub fn forget(&self, tenant: &str, record_ids: &[String], cooled_for: Option<&str>) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|(t, record, who), _| {
            t != tenant || !(record_ids.contains(record) || cooled_for == Some(who.as_str()))
        });
    }
}

/// An endpoint's pace as this replica last found it.
#[derive(Debug, Clone, Copy)]
struct LocalPace {
    /// Until when the database said no delivery may go.
    full_until: i64,
    /// The next slot to hand a deferred action.
    next_slot: i64,
}

/// The endpoints this replica found at their pace.
#[derive(Default)]
pub struct Paces {
    by_endpoint: Mutex<HashMap<String, LocalPace>>,
}

impl Paces {
    /// While `endpoint` is known to be full at `now_ms`: the slot for one more deferred action.
    pub fn known_full(&self, endpoint: &str, now_ms: i64, interval_ms: i64) -> Option<i64> {
        let mut paces = self.by_endpoint.lock().unwrap_or_else(|p| p.into_inner());
        let pace = paces.get_mut(endpoint).filter(|p| now_ms < p.full_until)?;
        let slot = pace.next_slot.max(pace.full_until);
        pace.next_slot = slot + interval_ms;
        Some(slot)
    }

    /// The database said `endpoint` is full until `allowed_at_ms`: the slot for the action that
    /// asked, and whether the endpoint was not known to be full before (worth a log line).
    pub fn full(&self, endpoint: &str, now_ms: i64, allowed_at_ms: i64, interval_ms: i64) -> (i64, bool) {
        let mut paces = self.by_endpoint.lock().unwrap_or_else(|p| p.into_inner());
        let pace = paces
            .entry(endpoint.to_owned())
            .or_insert(LocalPace { full_until: i64::MIN, next_slot: i64::MIN });
        let newly = pace.full_until <= now_ms;
        pace.full_until = pace.full_until.max(allowed_at_ms);
        let slot = pace.next_slot.max(allowed_at_ms);
        pace.next_slot = slot + interval_ms;
        (slot, newly)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_cooldown_holds_for_other_turns_and_lets_the_same_turn_through() {
        let cooling = Cooling::default();
        let who = cooled_for("t", Some("cust-1"), "key:1");
        let at = ("t", "sop", who.as_str());
        assert_eq!(cooling.check(at, "turn-1", 1_000, 61_000), None, "the first fires");
        assert_eq!(cooling.check(at, "turn-1", 2_000, 62_000), None, "a retry of the same turn too");
        assert_eq!(cooling.check(at, "turn-2", 3_000, 63_000), Some(61_000), "another turn waits");
        let other = cooled_for("t", Some("cust-2"), "key:1");
        assert_eq!(cooling.check(("t", "sop", &other), "turn-2", 3_000, 63_000), None);
        assert_eq!(cooling.check(at, "turn-3", 61_000, 121_000), None, "and fires once it ran out");
        cooling.forget("t", &[], Some(&who));
        assert_eq!(cooling.check(at, "turn-4", 62_000, 122_000), None, "forgotten with its subject");
        // A firing the database did not write releases its cooldown; another turn's stays.
        cooling.release(at, "turn-3");
        assert_eq!(cooling.check(at, "turn-5", 63_000, 123_000), Some(122_000));
        cooling.release(at, "turn-4");
        assert_eq!(cooling.check(at, "turn-5", 63_000, 123_000), None);
    }

    #[test]
    fn whom_a_cooldown_is_for() {
        let subject = cooled_for("t", Some("u-1"), "key:1");
        assert_eq!(subject, cooled_for("t", Some("u-1"), "key:2"), "a subject's, whatever key asks");
        assert_eq!(subject, for_subject("t", "u-1"));
        assert_ne!(cooled_for("t", None, "key:1"), cooled_for("t", None, "key:2"));
        assert_ne!(cooled_for("t", None, "u-1"), subject, "a key is never taken for a subject");
        assert_ne!(cooled_for("u", Some("u-1"), ""), subject);
        assert_eq!(subject.len(), 32);
    }

    #[test]
    fn the_cooling_map_stays_bounded() {
        let cooling = Cooling::default();
        for i in 0..(COOLING_ENTRIES * 3) {
            let who = i.to_string();
            assert_eq!(cooling.check(("t", "sop", &who), "turn", 0, 60_000), None);
        }
        assert!(cooling.entries.lock().unwrap().len() <= COOLING_ENTRIES);
    }

    #[test]
    fn a_backlog_is_spread_over_the_coming_slots() {
        let paces = Paces::default();
        assert_eq!(paces.known_full("t", 0, 1_000), None);
        assert_eq!(paces.full("t", 0, 5_000, 1_000), (5_000, true));
        assert_eq!(paces.known_full("t", 10, 1_000), Some(6_000));
        assert_eq!(paces.known_full("t", 20, 1_000), Some(7_000));
        assert_eq!(paces.full("t", 30, 5_000, 1_000), (8_000, false), "known already");
        assert_eq!(paces.known_full("t", 5_000, 1_000), None, "free again: ask the database");
        assert_eq!(paces.full("t", 9_500, 9_600, 1_000), (9_600, true));
    }
}
