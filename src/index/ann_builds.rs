//! Approximate indexes built off the tenant's lock, on a thread of their own.
//!
//! A scope's IVF is (re)built when it reaches `ANN_MIN_RECORDS` and each time it doubles: seconds
//! of k-means at tens of thousands of records. Built inside the write that crossed the line, it
//! held the tenant's write lock all that time, and on the async worker that ran the write: every
//! request of the tenant waited for the lock, and every connection that worker served waited
//! with it, whatever its tenant (docs/benchmarks.md, "An index built beside the requests").
//!
//! For `MemoryIndex`'s tenants a write only marks the scope due (`State::due`) and starts the
//! tenant's builder thread if none runs. The builder, in turn:
//! 1. under the write lock, briefly: takes the due scopes and a copy of their int8 rows (a few
//!    hundred bytes a record), and starts noting every slot written from then on;
//! 2. with no lock: builds each scope's IVF from the copy, as the write would have (the same rows
//!    make the same index);
//! 3. under the write lock: brings each index up to date with the slots written meanwhile (taken
//!    out, and put back where their record still is in the scope with an int8 row), swaps it in
//!    and lays the rows out in its lists' order.
//!
//! Meanwhile requests read the scope as before: through its previous IVF, kept in step as
//! always, or by the exact scan before the first. A change of the rows' length while building
//! (`TenantIndex::requantize`) makes the build stale: it is dropped, and the scopes are due again.

use super::{ANN_MIN_RECORDS, TenantIndex, VectorKind};
use crate::slots::SlotSet;
use crate::vector::ivf::Ivf;
use crate::vector::quant::Rows;
use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, PoisonError, RwLock};

/// A tenant's off-lock builds, kept under the tenant's lock (`TenantIndex::ann_builds`).
#[derive(Default)]
pub(super) struct State {
    /// Scopes whose index a write found due.
    due: BTreeSet<String>,
    /// While a build runs: the slots written since its rows were copied.
    touched: Option<Vec<u32>>,
    /// Whether a builder thread runs for this tenant (or is about to).
    builder: bool,
    /// Bumped whenever the int8 rows are made anew: a build from older rows is stale.
    pub(super) rows_generation: u64,
}

impl State {
    pub(super) fn mark_due(&mut self, scope: &str) {
        if !self.due.contains(scope) {
            self.due.insert(scope.to_owned());
        }
    }

    /// Notes a slot written while a build runs (`TenantIndex::insert`, `remove`, a new vector).
    pub(super) fn touch(&mut self, slot: u32) {
        if let Some(touched) = &mut self.touched {
            touched.push(slot);
        }
    }

    pub(super) fn forget_due(&mut self) {
        self.due.clear();
    }
}

/// What the builder builds without the lock: the due scopes' int8 slots and a copy of their rows.
pub(crate) struct Job {
    rows: Rows,
    scopes: Vec<(String, Vec<u32>)>,
    rows_generation: u64,
}

/// A job's indexes, to install.
pub(crate) struct Built {
    scopes: Vec<(String, Ivf)>,
    rows_generation: u64,
}

impl Job {
    pub(crate) fn build(self) -> Built {
        let scopes =
            self.scopes.into_iter().map(|(scope, slots)| (scope, Ivf::build(&self.rows, &slots))).collect();
        Built { scopes, rows_generation: self.rows_generation }
    }
}

impl TenantIndex {
    /// Whether a builder thread should start for this tenant: something is due and none runs.
    /// Claims the builder when so: the caller starts it (`spawn`), after letting go of the lock.
    pub(crate) fn claim_ann_builder(&mut self) -> bool {
        let state = &mut self.ann_builds;
        let claim = !state.due.is_empty() && !state.builder;
        state.builder |= claim;
        claim
    }

    /// Takes what is due (step 1): `None` when nothing is left to build, which ends the builder.
    pub(crate) fn take_ann_job(&mut self) -> Option<Job> {
        let due = std::mem::take(&mut self.ann_builds.due);
        let mut scopes = Vec::new();
        for scope in due {
            if !self.ann_is_due(&scope) {
                continue;
            }
            let slots = self.int8_slots_of(&scope);
            if slots.len() < ANN_MIN_RECORDS {
                // As a build in place would: too few rows for an index (the rest await their
                // embedding), so the scope is scanned exactly.
                self.ann.remove(&scope);
                self.ann_members.remove(&scope);
                continue;
            }
            scopes.push((scope, slots));
        }
        if scopes.is_empty() {
            return None;
        }
        let mut keys: Vec<u32> = scopes.iter().flat_map(|(_, slots)| slots.iter().copied()).collect();
        keys.sort_unstable();
        keys.dedup();
        let rows = self.int8_rows.as_ref()?.subset(&keys);
        self.ann_builds.touched = Some(Vec::new());
        Some(Job { rows, scopes, rows_generation: self.ann_builds.rows_generation })
    }

    /// The slots of `scope` whose embedding is an int8 row, in the order they were listed.
    pub(super) fn int8_slots_of(&self, scope: &str) -> Vec<u32> {
        let listed = self.by_scope.get(scope).into_iter().flatten().copied();
        listed.filter(|slot| self.meta[*slot as usize].vector == VectorKind::Int8).collect()
    }

    /// Installs what was built (step 3), brought up to date with the slots written meanwhile.
    pub(crate) fn install_ann(&mut self, built: Built) {
        let mut touched = self.ann_builds.touched.take().unwrap_or_default();
        if built.rows_generation != self.ann_builds.rows_generation {
            return;
        }
        touched.sort_unstable();
        touched.dedup();
        let Some(rows) = self.int8_rows.as_ref() else { return };
        let mut installed = Vec::new();
        for (scope, mut ivf) in built.scopes {
            for &slot in &touched {
                ivf.remove(slot);
                let listed = self.slots[slot as usize]
                    .as_ref()
                    .is_some_and(|item| item.head.scopes().any(|s| s == scope));
                if listed && self.meta[slot as usize].vector == VectorKind::Int8 {
                    let (Some(position), Some(vector)) =
                        (rows.position(slot as usize), rows.dequantize(slot as usize))
                    else {
                        continue;
                    };
                    ivf.insert(slot, position as u32, &vector);
                }
            }
            let mut members = SlotSet::new(self.slots.len());
            for slot in ivf.slots_in_list_order() {
                members.insert(slot);
            }
            self.ann.insert(scope.clone(), ivf);
            self.ann_members.insert(scope.clone(), members);
            self.ann_builds.due.remove(&scope);
            installed.push(scope);
        }
        self.lay_out_rows();
        // A scope that doubled again while it was built is due again.
        for scope in installed {
            self.maybe_rebuild_ann(&scope);
        }
    }

    /// Whether an approximate index is due or being built (benchmarks wait for quiet).
    pub fn ann_build_pending(&self) -> bool {
        self.ann_builds.builder || !self.ann_builds.due.is_empty()
    }

    /// An index that leaves due builds to a builder, as `MemoryIndex`'s tenants do.
    #[cfg(test)]
    pub(crate) fn deferring_ann() -> TenantIndex {
        TenantIndex { defer_ann: true, ..TenantIndex::default() }
    }

    /// The scopes a write found due, not yet taken by a build.
    #[cfg(test)]
    pub(crate) fn ann_due(&self) -> Vec<&str> {
        self.ann_builds.due.iter().map(String::as_str).collect()
    }
}

/// The builder: builds every due index off the lock until nothing is due, then ends (it runs
/// for the one who claimed it, `claim_ann_builder`).
fn run(index: &RwLock<TenantIndex>) {
    loop {
        let job = {
            let mut locked = write(index);
            match locked.take_ann_job() {
                Some(job) => job,
                None => {
                    locked.ann_builds.builder = false;
                    return;
                }
            }
        };
        match catch_unwind(AssertUnwindSafe(|| job.build())) {
            Ok(built) => write(index).install_ann(built),
            Err(_) => {
                let mut locked = write(index);
                locked.ann_builds.touched = None;
                locked.ann_builds.builder = false;
                tracing::error!("building an approximate index failed; its scope is scanned as it was");
                return;
            }
        }
    }
}

fn write(index: &RwLock<TenantIndex>) -> std::sync::RwLockWriteGuard<'_, TenantIndex> {
    index.write().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the tenant's builder thread (claimed with `claim_ann_builder`); builds in the calling
/// thread if no thread can be started. Call without holding the tenant's lock.
pub(super) fn spawn(index: Arc<RwLock<TenantIndex>>) {
    let thread = Arc::clone(&index);
    let started = std::thread::Builder::new().name("memgate-ann".into()).spawn(move || run(&thread));
    if let Err(err) = started {
        tracing::warn!(error = %err, "no thread for an approximate index build: built in place");
        run(&index);
    }
}
