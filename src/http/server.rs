//! `memgate serve`: bind, serve, and shut down gracefully.
//!
//! Shutdown lifecycle: on SIGTERM or Ctrl-C, `/readyz` turns 503 and, for `shutdown.drain_delay_ms`,
//! memgate goes on accepting but closes every connection after its answer, so a load balancer
//! stops sending and keeps no idle connection that could be closed under a request. Then the
//! listener stops accepting; requests and streams in flight run on. When the last one ends the
//! process exits; if some are still running after `shutdown.grace_ms`, they are cut and the
//! process exits anyway.
//!
//! Connections (`connection`): hyper's server, HTTP/1 and HTTP/2, with TCP_NODELAY, the client's
//! address on each request, and deadlines on a request's headers and on an idle connection;
//! each served on one of the `workers`, a single-threaded runtime per core.

mod connection;

use crate::config::Config;
use crate::error::StartupError;
use crate::fanout::Topic;
use crate::http::{build_admin_app, build_app, build_public_app};
use crate::state::AppState;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub async fn run(
    config: Config,
    on_ready: impl FnOnce(SocketAddr, Option<SocketAddr>),
) -> Result<(), StartupError> {
    let state = AppState::new(&config).await?;
    // Sessions opened by a token no longer configured (rotated, or a viewer token removed) end
    // here, before the first request; every check refuses them as well (`console::session`).
    let tokens = &state.console_auth().tokens;
    match crate::console::session::end_unbound(state.store(), tokens).await {
        Ok(0) => {}
        Ok(ended) => tracing::info!(ended, "ended console sessions of tokens no longer configured"),
        Err(err) => {
            tracing::warn!(error = %err, "could not delete console sessions of old tokens; each is refused when used")
        }
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartupError::Bind { addr: config.listen, source })?;
    let addr = listener.local_addr()?;
    let admin_listener = match config.admin.listen {
        Some(admin_addr) => {
            let admin_listener = TcpListener::bind(admin_addr)
                .await
                .map_err(|source| StartupError::Bind { addr: admin_addr, source })?;
            Some(admin_listener)
        }
        None => None,
    };
    let admin_addr = admin_listener.as_ref().map(TcpListener::local_addr).transpose()?;
    let workers = std::sync::Arc::new(crate::workers::Workers::start()?);
    tracing::info!(%addr, ?admin_addr, upstream = %config.upstream.base_url, auth_mode = ?config.identity.mode, "memgate listening");
    on_ready(addr, admin_addr);

    // The ticker: every poll interval (1 s by default), pick up rollout and record changes made
    // on other replicas, let the canary guards judge, and write the records' access counts. With
    // Redis, other replicas' changes also wake the two listeners below at once (`fanout`). They
    // all live until shutdown is signalled.
    let stop_ticking = CancellationToken::new();
    // The server's own loops (the ticker, the listeners, the history, the admin listener):
    // shutdown stops them and waits for each to end.
    let loops = TaskTracker::new();
    {
        let state = state.clone();
        let stop = stop_ticking.clone();
        let every = config.database.poll_interval;
        let retention = config.database.tombstone_retention;
        loops.spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut pruned_at = std::time::Instant::now();
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = interval.tick() => {
                        state.rollout().tick().await;
                        sync_records(&state).await;
                        if let Err(err) = state.memories().flush_accesses().await {
                            tracing::warn!(error = %err, "could not write records' access counts; retrying");
                        }
                        // Tombstones name removed (and forgotten) records: kept only as long as a
                        // replica may need them. Every replica prunes; the work is idempotent.
                        if pruned_at.elapsed() >= retention / 10 {
                            pruned_at = std::time::Instant::now();
                            let before = crate::clock::now_ms() - retention.as_millis() as i64;
                            if let Err(err) = state.store().prune_tombstones(before).await {
                                tracing::warn!(error = %err, "could not prune tombstones; retrying later");
                            }
                        }
                    }
                }
            }
        });
    }
    for topic in Topic::ALL {
        loops.spawn(listen_for(&state, &stop_ticking, topic));
    }
    // The console's metrics history: this replica's minute rows, written once a minute.
    {
        let state = state.clone();
        let stop = stop_ticking.clone();
        loops.spawn(async move {
            let mut interval = tokio::time::interval(std::time::Duration::from_secs(60));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = interval.tick() => flush_history(&state).await,
                }
            }
        });
    }
    // Dormancy (`[records.dormancy]`; no loop when off): every period, the records of the named
    // types unused that long go dormant, in every tenant. Every replica sweeps; a record already
    // dormant is no longer a candidate, so sweeps racing on two replicas change it once or twice
    // to the same status, harmlessly.
    if !state.memories().dormancy_rules().is_empty() {
        let memories = state.memories().clone();
        let stop = stop_ticking.clone();
        let every = config.records.dormancy_check_every;
        loops.spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = interval.tick() => match memories.sweep_dormant(None, false).await {
                        Ok(report) if report.applied > 0 => {
                            tracing::info!(records = report.applied, more = report.truncated, "records went dormant");
                        }
                        Ok(_) => {}
                        Err(err) => tracing::warn!(error = %err, "the dormancy sweep failed; the next period retries"),
                    },
                }
            }
        });
    }
    // Trigger actions: delivered by a worker on the background tracker (none without endpoints);
    // at shutdown it claims nothing more and finishes what it sends.
    let stop_delivering = CancellationToken::new();
    let deliveries = state.triggers().spawn_worker(stop_delivering.clone());
    // Observation: the extraction worker, the same way (none without an extraction key).
    let extractions = state.observer().spawn_worker(stop_delivering.clone());

    let (signalled_tx, signalled_rx) = oneshot::channel::<()>();
    let draining_state = state.clone();
    let background = state.memories().tasks().clone();
    let memories = state.memories().clone();
    let history_state = state.clone();
    let stop_accepting = CancellationToken::new();
    let stop_admin = stop_accepting.clone();
    let drain_delay = config.shutdown.drain_delay;
    let signalled = async move {
        shutdown_signal().await;
        // First the load balancers learn: /readyz turns 503 and every answer closes its
        // connection, while new connections are still served. Only then does the listener close.
        draining_state.begin_draining();
        tracing::info!(
            drain_ms = drain_delay.as_millis() as u64,
            "shutdown requested: draining; still accepting meanwhile"
        );
        tokio::time::sleep(drain_delay).await;
        tracing::info!("no new connections; finishing in-flight requests");
        let _ = signalled_tx.send(());
        stop_accepting.cancel();
    };
    let timeouts = connection::Timeouts {
        header_read: config.limits.header_read_timeout,
        idle: config.limits.connection_idle_timeout,
    };
    // `/admin` and `/metrics` on a listener of their own, off the public one, when configured.
    let (app, admin_server) = match (admin_listener, admin_addr) {
        (Some(admin_listener), Some(admin_addr)) => {
            let hosts = config.allowed_hosts.for_listener(admin_addr);
            let admin_server = connection::serve(
                admin_listener,
                build_admin_app(state.clone()),
                hosts,
                timeouts,
                async move { stop_admin.cancelled().await },
                workers.clone(),
            );
            (build_public_app(state), Some(loops.spawn(admin_server)))
        }
        _ => (build_app(state), None),
    };
    let server = connection::serve(
        listener,
        app,
        config.allowed_hosts.for_listener(addr),
        timeouts,
        signalled,
        workers.clone(),
    );

    let grace = config.shutdown.grace;
    let deadline = async move {
        if signalled_rx.await.is_ok() {
            tokio::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = server => {}
        () = deadline => {
            tracing::warn!(grace_ms = grace.as_millis() as u64, "grace period over; cutting the requests still in flight");
        }
    }
    stop_ticking.cancel();
    stop_delivering.cancel();
    if let Some(admin_server) = admin_server {
        admin_server.abort();
    }
    loops.close();
    loops.wait().await;
    if let Err(err) = memories.flush_accesses().await {
        tracing::warn!(error = %err, "could not write the last access counts");
    }
    flush_history(&history_state).await;
    // Background embedding and shadow runs: give them what is left of the grace period; what
    // does not finish is redone at the next start.
    background.close();
    let _ = tokio::time::timeout(grace, background.wait()).await;
    drop(deliveries);
    drop(extractions);
    // Last: what is still on the workers now is detached work that ends with what it serves.
    drop(workers);
    tracing::info!("memgate stopped");
    Ok(())
}

/// Takes in, until `stop`, every change another replica announces on `topic`.
fn listen_for(state: &AppState, stop: &CancellationToken, topic: Topic) -> impl Future<Output = ()> + use<> {
    let (state, stop) = (state.clone(), stop.clone());
    async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = state.fanout().changed(topic) => match topic {
                    Topic::Memories => sync_records(&state).await,
                    Topic::Releases => {
                        if let Err(err) = state.rollout().refresh().await {
                            tracing::warn!(error = %err, "could not take in another replica's rollout change; the poll retries");
                        }
                    }
                    Topic::Keys => state.identity().keys().forget_cached(),
                },
            }
        }
    }
}

/// Writes this replica's minute rows of the console's history (and prunes past retention).
async fn flush_history(state: &AppState) {
    if let Err(err) = state.console_recorder().flush(state.store()).await {
        tracing::warn!(error = %err, "could not write the console's metrics history; the next minute retries");
    }
}

/// Takes in other replicas' record changes from the store.
async fn sync_records(state: &AppState) {
    if let Err(err) = state.memories().sync_from_store().await {
        tracing::warn!(error = %err, "could not take in other replicas' record changes; retrying");
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
