//! `ann_build_bench`: how long a tenant's readers wait for its lock while a large scope's IVF is
//! rebuilt, at the CRM's size.
//!
//! One tenant in a `MemoryIndex`: `--profiles` customer profiles, each in its own `user:` scope,
//! and `--public` − 1 public records (their IVF built by the builder thread at 8,192, 16,384, …
//! on the way), all with synthetic 384-dim unit vectors. Then, while a reader thread takes the
//! tenant's read lock again and again and notes how long each took to get, one more public record
//! makes the scope's IVF due again (it doubled): the writer's own time, the build's wall time and
//! the reader's waits are what a request of that tenant would see. Last, the same rebuild done in
//! place under the write lock (as every write that found an IVF due did before), timed as the
//! lock's hold: what each of those requests waited then.
//!
//! Run: `cargo run --release --example ann_build_bench -- [--profiles 1000000] [--public 65536] [--json]`.
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{BoxError, Rng, ms, noise, normalize};
use memgate::index::{MemoryIndex, StoredRecord, TenantIndex, index_records};
use memgate::record::Record;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 1_000_000)]
    profiles: usize,
    /// About the public scope's size when its IVF is rebuilt (its first build's size, doubled).
    #[arg(long, default_value_t = 65_536)]
    public: usize,
    #[arg(long)]
    json: bool,
}

const DIMS: usize = 384;
const TENANT: &str = "crm";

fn record(id: String, scope: String, statement: String) -> Record {
    let mut record = common::record_fact(TENANT, &id, json!({ "statement": statement }), 0);
    record.scope = vec![scope];
    record
}

fn vector(rng: &mut Rng) -> Arc<[f32]> {
    let mut v = noise(rng, DIMS);
    normalize(&mut v);
    Arc::from(v)
}

/// Indexes `records` as an import does: made on every core, inserted one by one.
fn add(index: &MemoryIndex, rng: &mut Rng, records: impl Iterator<Item = Record>) {
    let stored: Vec<StoredRecord> = records
        .map(|record| StoredRecord { record, vector: Some(vector(rng)), line_tokens: Some(20) })
        .collect();
    for item in index_records(stored) {
        index.upsert(item);
    }
}

/// The public IVF's `built_with` and its size now.
fn public_ivf(tenant: &RwLock<TenantIndex>) -> (usize, usize) {
    let locked = tenant.read().unwrap_or_else(|p| p.into_inner());
    locked.ann.get("public").map_or((0, 0), |ann| (ann.built_with, ann.len()))
}

/// Waits (polling) until the public IVF was built with at least `records`.
fn wait_built(tenant: &RwLock<TenantIndex>, records: usize) -> Duration {
    let started = Instant::now();
    while public_ivf(tenant).0 < records {
        assert!(started.elapsed() < Duration::from_secs(600), "no IVF of {records} records after 10 minutes");
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

/// Waits until no build is due or running.
fn wait_idle(tenant: &RwLock<TenantIndex>) {
    while tenant.read().unwrap_or_else(|p| p.into_inner()).ann_build_pending() {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let mut rng = Rng::new(0xa11);
    let index = MemoryIndex::default();
    let started = Instant::now();
    for from in (0..args.profiles).step_by(50_000) {
        let to = (from + 50_000).min(args.profiles);
        add(
            &index,
            &mut rng,
            (from..to).map(|i| record(format!("cust-{i}"), format!("user:u{i}"), format!("Customer {i}"))),
        );
    }
    let public = |i: usize| record(format!("kb-{i}"), "public".into(), format!("Article {i} on parcels"));
    add(&index, &mut rng, (0..args.public / 2 + 1).map(public));
    let tenant = index.tenant(TENANT).ok_or("the tenant was not indexed")?;
    wait_built(&tenant, memgate::index::ANN_MIN_RECORDS);
    wait_idle(&tenant);
    // Up to one record short of the doubling that makes the IVF due again (the builder took its
    // copy wherever the scope then was: `built_with`).
    let (built, size) = public_ivf(&tenant);
    let next = args.public / 2 + 1;
    add(&index, &mut rng, (next..next + (2 * built).saturating_sub(size + 1)).map(public));
    wait_idle(&tenant);
    let (built, size) = public_ivf(&tenant);
    assert_eq!(size + 1, 2 * built, "one record short of the doubling");
    let loaded_s = started.elapsed().as_secs_f64();

    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (tenant, stop) = (Arc::clone(&tenant), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut waits = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let locked = tenant.read().unwrap_or_else(|p| p.into_inner());
                waits.push(asked.elapsed());
                drop(locked);
                std::thread::sleep(Duration::from_micros(200));
            }
            waits
        })
    };
    let write = Instant::now();
    add(&index, &mut rng, std::iter::once(public(usize::MAX)));
    let writer = write.elapsed();
    let build = wait_built(&tenant, 2 * built);
    stop.store(true, Ordering::Relaxed);
    let mut waits = reader.join().map_err(|_| "the reader panicked")?;
    waits.sort_unstable();

    // The same rebuild in place, as a write that found it due did before: the lock's hold.
    let in_place = {
        let mut locked = tenant.write().unwrap_or_else(|p| p.into_inner());
        let held = Instant::now();
        locked.rebuild_ann("public");
        held.elapsed()
    };

    let over = |limit: Duration| waits.iter().filter(|w| **w > limit).count();
    let figures = json!({
        "profiles": args.profiles, "public_built_with": 2 * built, "loaded_s": loaded_s,
        "writer_ms": ms(writer), "build_wall_ms": ms(build),
        "reader": {"reads": waits.len(), "max_wait_ms": waits.last().map_or(0.0, |w| ms(*w)),
                   "waits_over_1_ms": over(Duration::from_millis(1)), "waits_over_10_ms": over(Duration::from_millis(10)),
                   "waits_over_100_ms": over(Duration::from_millis(100))},
        "in_place_lock_held_ms": ms(in_place),
        "machine": common::machine(),
    });
    if args.json {
        println!("{figures}");
    } else {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    }
    Ok(())
}
