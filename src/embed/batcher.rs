//! The embedding thread, `memgate-embed`: the one owner of the model, and the scheduler that keeps
//! live queries ahead of background work.
//!
//! Two queues. Queries: a request waits for each one inside the funnel's time budget. Passages:
//! record writes, imports and the background backfill, where throughput is what counts.
//!
//! Each turn the thread:
//! 1. takes every waiting query (up to `max_batch` texts), runs them in one model run (identical
//!    texts once) and answers each;
//! 2. only when no query waits, runs one slice of passage work: the next texts of the passage
//!    jobs in hand, shortest first (each job is tokenized in slices of [`PREPARE_SLICE`] texts
//!    and a slice sorted by length, so a run pads little), as many as fit in about
//!    [`PASSAGE_RUN_TARGET`] of model time. The time per padded token is measured on every
//!    passage run (a moving average), so the slice fits the machine. A job that has texts left
//!    goes to the back of the line, so a one-record write waits for one slice of a large import,
//!    not for all of it.
//!
//! So a query waits at most for the passage run in progress (~[`PASSAGE_RUN_TARGET`]) plus its
//! own, and background embedding has every intra-op thread whenever no query is there.
//!
//! Lifecycle: [`spawn`] starts the thread when an `Embedder` is loaded. It sleeps on a condition
//! variable while both queues are empty. Callers hold a [`Queue`]; when the last `Embedder` is
//! dropped, [`Queue::close`] wakes the thread, which ends after the run in hand and drops the
//! model. Nobody joins it, so a drop never blocks an async worker. Jobs whose caller has gone
//! away (a cancelled request) are dropped unrun.
//!
//! Supervision: a panic inside a model run is caught, logged and answered as an error to the jobs
//! of that run; the thread goes on. Should the thread end anyway, it closes the queue and drops
//! every waiting job, so callers get `EmbedError::Stopped`, which the funnel treats as a degraded
//! embedder.

use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, oneshot};

use super::model::{Model, Prepared};
use super::{Counters, EmbedError};

/// About how long one passage run may take, so that a query arriving meanwhile waits no more.
/// 20 ms keeps the query step inside the funnel's default 50 ms budget during an import; longer
/// runs gain little throughput (docs/embedding.md, "Throughput").
pub(super) const PASSAGE_RUN_TARGET: Duration = Duration::from_millis(20);
/// Bounds of a passage run, in padded tokens (texts × longest text of the run). Two or three
/// short texts at least: a single 30-token text costs 6.8 ms of CPU alone and 4.9 ms four at a
/// time (int8), but on a busy machine a higher floor makes a query wait longer (on the 2-core
/// machine at load 5, a floor of 128 tokens gave query p99 82 ms during an import; 64 gives
/// 27–47 ms at load 3–5, docs/embedding.md "Throughput").
const MIN_RUN_TOKENS: usize = 64;
const MAX_RUN_TOKENS: usize = 16_384;
/// The first guess of model time per padded token, before any passage run was measured.
const FIRST_SECS_PER_TOKEN: f64 = 100e-6;
/// How many texts of a passage job are tokenized (and sorted by length) at a time.
const PREPARE_SLICE: usize = 128;

pub(super) type Reply = oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>;

pub(super) struct Job {
    /// Already prefixed.
    pub(super) texts: Vec<String>,
    pub(super) reply: Reply,
    /// A place in the bounded queue, given back when the job is answered or dropped.
    pub(super) permit: OwnedSemaphorePermit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Query,
    Passage,
}

/// The two queues, shared by the callers and the embedding thread.
#[derive(Clone)]
pub(super) struct Queue {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    queries: VecDeque<Job>,
    passages: VecDeque<Job>,
    closed: bool,
}

impl Queue {
    fn new() -> Queue {
        Queue { shared: Arc::new(Shared { state: Mutex::default(), wake: Condvar::new() }) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The queues hold no invariant a panic could break halfway.
        self.shared.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands a job to the embedding thread; `Stopped` if it has ended.
    pub(super) fn push(&self, kind: Kind, job: Job) -> Result<(), EmbedError> {
        let mut state = self.lock();
        if state.closed {
            return Err(EmbedError::Stopped);
        }
        match kind {
            Kind::Query => state.queries.push_back(job),
            Kind::Passage => state.passages.push_back(job),
        }
        drop(state);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// No more jobs: the thread ends after the run in hand.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

pub(super) fn spawn(model: Model, max_batch: usize, counters: Arc<Counters>) -> Result<Queue, EmbedError> {
    let queue = Queue::new();
    let thread_queue = queue.clone();
    std::thread::Builder::new()
        .name("memgate-embed".into())
        .spawn(move || {
            let _closes = ClosesOnExit(thread_queue.clone());
            Scheduler::new(model, max_batch).serve(&thread_queue, &counters);
        })
        .map_err(|e| EmbedError::Model(format!("cannot start the embedding thread: {e}")))?;
    Ok(queue)
}

/// Whatever ends the thread, callers stop waiting: the queue refuses new jobs and the waiting
/// ones are dropped (their callers get `Stopped`).
struct ClosesOnExit(Queue);

impl Drop for ClosesOnExit {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.closed = true;
        state.queries.clear();
        state.passages.clear();
    }
}

/// What the thread takes from the queues in one turn.
enum Turn {
    Queries(Vec<Job>),
    Passages(Vec<Job>),
    Stop,
}

struct Scheduler {
    model: Model,
    max_batch: usize,
    /// Passage jobs in hand, in turn order.
    work: VecDeque<Work>,
    /// Moving average of model time per padded token over passage runs.
    secs_per_token: f64,
    /// Passage jobs taken so far (the next `Work::id`).
    taken: u64,
}

/// A passage job in progress.
struct Work {
    /// In arrival order, to know which job led a run.
    id: u64,
    /// Set when tokenizing or running its texts failed: the job is answered with it.
    failed: Option<EmbedError>,
    /// Texts not yet tokenized, with their index in the job.
    raw: VecDeque<(usize, String)>,
    /// Tokenized texts not yet run, shortest first.
    ready: VecDeque<(usize, Prepared)>,
    vectors: Vec<Option<Vec<f32>>>,
    left: usize,
    reply: Reply,
    _permit: OwnedSemaphorePermit,
}

impl Work {
    fn new(id: u64, job: Job) -> Work {
        let n = job.texts.len();
        Work {
            id,
            failed: None,
            raw: job.texts.into_iter().enumerate().collect(),
            ready: VecDeque::new(),
            vectors: vec![None; n],
            left: n,
            reply: job.reply,
            _permit: job.permit,
        }
    }

    /// Tokenizes the next slice, shortest first.
    fn prepare(&mut self, model: &Model) -> Result<(), EmbedError> {
        let take = self.raw.len().min(PREPARE_SLICE);
        let mut slice = Vec::with_capacity(take);
        for (index, text) in self.raw.drain(..take) {
            slice.push((index, model.prepare(text)?));
        }
        slice.sort_by_key(|(_, p)| p.tokens);
        self.ready.extend(slice);
        Ok(())
    }
}

impl Scheduler {
    fn new(model: Model, max_batch: usize) -> Scheduler {
        Scheduler { model, max_batch, work: VecDeque::new(), secs_per_token: FIRST_SECS_PER_TOKEN, taken: 0 }
    }

    fn serve(mut self, queue: &Queue, counters: &Counters) {
        loop {
            match self.next_turn(queue) {
                Turn::Stop => break,
                Turn::Queries(jobs) => self.run_queries(jobs, counters),
                Turn::Passages(jobs) => {
                    for job in jobs {
                        self.taken += 1;
                        self.work.push_back(Work::new(self.taken, job));
                    }
                    self.run_passages(counters);
                }
            }
        }
        tracing::debug!("embedding thread stopped: no embedder left");
    }

    /// Waits for work: queries first; passages only when no query waits.
    fn next_turn(&self, queue: &Queue) -> Turn {
        let mut state = queue.lock();
        loop {
            if state.closed {
                return Turn::Stop;
            }
            if !state.queries.is_empty() {
                let mut jobs = Vec::new();
                let mut texts = 0;
                while let Some(job) = state.queries.front() {
                    if !jobs.is_empty() && texts + job.texts.len() > self.max_batch {
                        break;
                    }
                    texts += job.texts.len();
                    jobs.extend(state.queries.pop_front());
                }
                return Turn::Queries(jobs);
            }
            if !state.passages.is_empty() || !self.work.is_empty() {
                return Turn::Passages(state.passages.drain(..).collect());
            }
            state = self.wait(queue, state);
        }
    }

    fn wait<'a>(&self, queue: &'a Queue, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        queue.shared.wake.wait(state).unwrap_or_else(PoisonError::into_inner)
    }

    fn run_queries(&mut self, mut jobs: Vec<Job>, counters: &Counters) {
        jobs.retain(|job| !job.reply.is_closed());
        if jobs.is_empty() {
            return;
        }
        // Each distinct text once; `rows` maps every job's texts to their row in the run.
        let mut unique: Vec<String> = Vec::new();
        let mut row_of: HashMap<&str, usize> = HashMap::new();
        let mut rows: Vec<Vec<usize>> = Vec::with_capacity(jobs.len());
        for job in &jobs {
            let job_rows = job
                .texts
                .iter()
                .map(|text| {
                    *row_of.entry(text.as_str()).or_insert_with(|| {
                        unique.push(text.clone());
                        unique.len() - 1
                    })
                })
                .collect();
            rows.push(job_rows);
        }
        drop(row_of);
        let texts = unique.len();
        let outcome = guarded(texts, || {
            let prepared =
                unique.into_iter().map(|t| self.model.prepare(t)).collect::<Result<Vec<_>, _>>()?;
            counters.runs.fetch_add(1, Ordering::Relaxed);
            counters.texts.fetch_add(prepared.len() as u64, Ordering::Relaxed);
            self.model.run(&prepared.iter().collect::<Vec<_>>())
        });
        match outcome {
            Ok(vectors) => {
                for (job, rows) in jobs.into_iter().zip(rows) {
                    let answer = rows.into_iter().map(|row| vectors[row].clone()).collect();
                    // The caller may have gone away meanwhile; nothing to do then.
                    let _ = job.reply.send(Ok(answer));
                }
            }
            Err(message) => {
                tracing::error!(error = %message, "embedding run failed");
                for job in jobs {
                    let _ = job.reply.send(Err(EmbedError::Model(message.clone())));
                }
            }
        }
    }

    /// The padded tokens one passage run may hold.
    fn run_budget(&self) -> usize {
        let tokens = PASSAGE_RUN_TARGET.as_secs_f64() / self.secs_per_token.max(1e-9);
        (tokens as usize).clamp(MIN_RUN_TOKENS, MAX_RUN_TOKENS)
    }

    /// One passage run: the next texts of the jobs in hand, front job first.
    fn run_passages(&mut self, counters: &Counters) {
        self.work.retain(|w| !w.reply.is_closed());
        let budget = self.run_budget();
        let leader = self.work.front().map(|w| w.id);
        // (position in `work`, index in its job, prepared text)
        let mut picked: Vec<(usize, usize, Prepared)> = Vec::new();
        let mut longest = 0;
        'jobs: for position in 0..self.work.len() {
            let work = &mut self.work[position];
            loop {
                if work.ready.is_empty()
                    && !work.raw.is_empty()
                    && let Err(e) = work.prepare(&self.model)
                {
                    work.failed = Some(e);
                    continue 'jobs;
                }
                let Some((_, next)) = work.ready.front() else { continue 'jobs };
                let padded = (picked.len() + 1) * longest.max(next.tokens);
                if !picked.is_empty() && (padded > budget || picked.len() >= self.max_batch) {
                    break 'jobs;
                }
                longest = longest.max(next.tokens);
                if let Some((index, prepared)) = work.ready.pop_front() {
                    picked.push((position, index, prepared));
                }
            }
        }
        if !picked.is_empty() {
            counters.runs.fetch_add(1, Ordering::Relaxed);
            counters.texts.fetch_add(picked.len() as u64, Ordering::Relaxed);
            let started = Instant::now();
            let batch: Vec<&Prepared> = picked.iter().map(|(_, _, p)| p).collect();
            let outcome = guarded(batch.len(), || self.model.run(&batch));
            let elapsed = started.elapsed().as_secs_f64();
            match outcome {
                Ok(vectors) => {
                    let padded = (picked.len() * longest).max(1) as f64;
                    self.secs_per_token = 0.7 * self.secs_per_token + 0.3 * elapsed / padded;
                    for ((position, index, _), vector) in picked.into_iter().zip(vectors) {
                        let work = &mut self.work[position];
                        work.vectors[index] = Some(vector);
                        work.left -= 1;
                    }
                }
                Err(message) => {
                    tracing::error!(error = %message, texts = picked.len(), "embedding run failed");
                    for (position, _, _) in picked {
                        self.work[position].failed.get_or_insert(EmbedError::Model(message.clone()));
                    }
                }
            }
        }
        self.answer_finished();
        // Round robin: the job that led this run goes to the back if it has texts left.
        if leader.is_some() && self.work.front().map(|w| w.id) == leader {
            self.work.rotate_left(1);
        }
    }

    /// Answers every job that failed or whose texts are all embedded, and lets it go.
    fn answer_finished(&mut self) {
        let (finished, going_on): (VecDeque<Work>, VecDeque<Work>) =
            std::mem::take(&mut self.work).into_iter().partition(|w| w.failed.is_some() || w.left == 0);
        self.work = going_on;
        for work in finished {
            let answer = match work.failed {
                Some(error) => Err(error),
                None => Ok(work.vectors.into_iter().map(Option::unwrap_or_default).collect()),
            };
            let _ = work.reply.send(answer);
        }
    }
}

/// Runs one model step, turning an error or a panic into a message for every job of the run.
fn guarded(
    texts: usize,
    step: impl FnOnce() -> Result<Vec<Vec<f32>>, EmbedError>,
) -> Result<Vec<Vec<f32>>, String> {
    match catch_unwind(AssertUnwindSafe(step)) {
        Ok(Ok(vectors)) if vectors.len() == texts => Ok(vectors),
        Ok(Ok(vectors)) => Err(format!("the model returned {} embeddings for {texts} texts", vectors.len())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the model panicked".to_owned()),
    }
}
