//! The embedding thread, `memgate-embed`: the one owner of the model.
//!
//! Lifecycle: [`spawn`] starts it when an `Embedder` is loaded. It sleeps on the job channel;
//! when a job arrives it also takes every job already waiting (up to `max_batch` texts), runs
//! the model once over their texts (identical texts computed once), and answers each job on its
//! oneshot channel. Jobs whose caller has gone away (a cancelled request) are skipped. When the
//! last `Embedder` clone is dropped, the channel closes and the thread ends after the run in
//! hand, dropping the model; nobody joins it, so a drop never blocks an async worker.
//!
//! Supervision: a panic inside a model run is caught, logged, and answered as an error to the
//! jobs of that run; the thread goes on. Should the thread die anyway, callers get
//! `EmbedError::Stopped` (the channel closes), which the funnel treats as a degraded embedder.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot};

use super::model::Model;
use super::{Counters, EmbedError};

pub(super) struct Job {
    /// Already prefixed.
    pub(super) texts: Vec<String>,
    pub(super) reply: oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>,
}

pub(super) fn spawn(
    model: Model,
    jobs: mpsc::Receiver<Job>,
    max_batch: usize,
    counters: Arc<Counters>,
) -> Result<(), EmbedError> {
    std::thread::Builder::new()
        .name("memgate-embed".into())
        .spawn(move || serve(model, jobs, max_batch, &counters))
        .map(drop)
        .map_err(|e| EmbedError::Model(format!("cannot start the embedding thread: {e}")))
}

fn serve(mut model: Model, mut jobs: mpsc::Receiver<Job>, max_batch: usize, counters: &Counters) {
    // A job that did not fit in the previous run starts the next one.
    let mut carried: Option<Job> = None;
    loop {
        let first = match carried.take() {
            Some(job) => job,
            None => match jobs.blocking_recv() {
                Some(job) => job,
                None => break, // every Embedder is gone
            },
        };
        let mut batch = vec![first];
        let mut texts = batch[0].texts.len();
        while texts < max_batch {
            let Ok(job) = jobs.try_recv() else { break };
            if texts + job.texts.len() > max_batch {
                carried = Some(job);
                break;
            }
            texts += job.texts.len();
            batch.push(job);
        }
        batch.retain(|job| !job.reply.is_closed());
        if !batch.is_empty() {
            run(&mut model, batch, counters);
        }
    }
    tracing::debug!("embedding thread stopped: no embedder left");
}

fn run(model: &mut Model, batch: Vec<Job>, counters: &Counters) {
    // Each distinct text once; `slots` maps every job's texts to their row in the run.
    let mut unique: Vec<String> = Vec::new();
    let mut row_of: HashMap<&str, usize> = HashMap::new();
    let mut slots: Vec<Vec<usize>> = Vec::with_capacity(batch.len());
    for job in &batch {
        let rows = job
            .texts
            .iter()
            .map(|text| {
                *row_of.entry(text.as_str()).or_insert_with(|| {
                    unique.push(text.clone());
                    unique.len() - 1
                })
            })
            .collect();
        slots.push(rows);
    }
    drop(row_of);
    counters.runs.fetch_add(1, Ordering::Relaxed);
    counters.texts.fetch_add(unique.len() as u64, Ordering::Relaxed);

    let outcome = match catch_unwind(AssertUnwindSafe(|| model.embed(&unique))) {
        Ok(Ok(vectors)) if vectors.len() == unique.len() => Ok(vectors),
        Ok(Ok(vectors)) => {
            Err(format!("the model returned {} embeddings for {} texts", vectors.len(), unique.len()))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the model panicked".to_owned()),
    };
    match outcome {
        Ok(vectors) => {
            for (job, rows) in batch.into_iter().zip(slots) {
                let answer = rows.into_iter().map(|row| vectors[row].clone()).collect();
                // The caller may have gone away meanwhile; nothing to do then.
                let _ = job.reply.send(Ok(answer));
            }
        }
        Err(message) => {
            tracing::error!(error = %message, texts = unique.len(), "embedding run failed");
            for job in batch {
                let _ = job.reply.send(Err(EmbedError::Model(message.clone())));
            }
        }
    }
}
