//! The `memgate` command line: parses arguments and calls into the library.
#![allow(clippy::print_stdout)]

use clap::{Args, Parser, Subcommand};
use futures_util::TryStreamExt;
use memgate::config::{Config, ConfigFlags};
use memgate::fanout::Topic;
use memgate::store::memories::ListFilter;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "memgate", version, about = "Long-term memory for every Anthropic Messages request")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(ConfigFlags),
    /// Create or upgrade the database schema, then exit.
    Migrate(ConfigFlags),
    /// Import or export memory records as JSON Lines.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// List, promote or roll back releases of the memory rules.
    #[command(subcommand)]
    Release(ReleaseCommand),
    /// Issue gateway keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Trigger actions in the outbox: list, replay, deliver what is due (docs/triggers.md).
    #[command(subcommand)]
    Actions(ActionsCommand),
    /// The console's sessions (docs/console.md).
    #[command(subcommand)]
    Console(ConsoleCommand),
    /// A stand-in Anthropic API for tests, demos and load tests (see docs/mock-upstream.md).
    MockUpstream(memgate_mock_upstream::MockArgs),
}

#[derive(Subcommand)]
enum MemoryCommand {
    /// Import records from a JSON Lines file (`-` for standard input).
    Import {
        file: PathBuf,
        /// Only report what would be added, existing and invalid.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Export records as JSON Lines to standard output.
    Export {
        #[arg(long)]
        scope: Option<String>,
        #[arg(long = "type")]
        record_type: Option<String>,
        /// Each line with its stored embedding (model id and vector), for an import that need
        /// not embed again.
        #[arg(long)]
        embeddings: bool,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Subcommand)]
enum ReleaseCommand {
    /// Every release with its rollout state.
    List(ConfigFlags),
    /// Make a release the active one.
    Promote {
        name: String,
        #[arg(long, default_value = "")]
        reason: String,
        #[command(flatten)]
        config: ConfigFlags,
    },
    /// Withdraw a canary or shadow release.
    Rollback {
        name: String,
        #[arg(long, default_value = "")]
        reason: String,
        #[command(flatten)]
        config: ConfigFlags,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Issue a key; its secret is printed once and never stored.
    Create {
        /// A label for people, e.g. `support-bot`.
        #[arg(long)]
        name: String,
        /// A scope the key may read (repeatable), e.g. `team:support`; `public` is always included.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// `pin_release`, `assert_subject` or `debug` (repeatable).
        #[arg(long = "permission")]
        permissions: Vec<String>,
        /// Requests a minute; default: auth.rate_limit_per_minute.
        #[arg(long)]
        rate_limit_per_minute: Option<u32>,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Subcommand)]
enum ActionsCommand {
    /// A tenant's actions, newest first, one JSON object a line.
    List {
        /// pending, retrying, delivered or dead.
        #[arg(long)]
        state: Option<String>,
        /// Decided since: a time (RFC 3339) or an age such as 30m, 1h, 7d.
        #[arg(long)]
        since: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
        #[command(flatten)]
        target: Target,
    },
    /// Send a dead or delivered action again (same id and body).
    Replay {
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Deliver what is due once, without a server (every tenant), and print how many were tried.
    Deliver(ConfigFlags),
}

#[derive(Subcommand)]
enum ConsoleCommand {
    /// End every console session at once, on every replica; prints how many there were.
    LogoutAll(ConfigFlags),
}

#[derive(Args)]
struct Target {
    #[arg(long, default_value = memgate::identity::DEFAULT_TENANT)]
    tenant: String,
    #[command(flatten)]
    config: ConfigFlags,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // ort loads ONNX Runtime from ORT_DYLIB_PATH only. When it is unset, point it at the library
    // found by the search order of `memgate::assets` (beside MEMGATE_MODEL_DIR, in .assets/ here
    // or above the binary, /opt/memgate, the user's data folder), so `memgate serve` runs from
    // anywhere without sourcing .assets/env.sh. Only here is this sound: no other thread exists yet.
    if let (None, Some(fetched)) = (std::env::var_os("ORT_DYLIB_PATH"), memgate::assets::runtime()) {
        if let Ok(absolute) = fetched.canonicalize() {
            // SAFETY: single-threaded — the Tokio runtime is built below.
            unsafe { memgate::embed::export_ort_dylib_path(&absolute) };
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("memgate: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(flags) => serve(flags).await,
            Command::Migrate(flags) => migrate(flags).await,
            Command::Memory(command) => memory(command).await,
            Command::Key(command) => key(command).await,
            Command::Actions(command) => actions(command).await,
            Command::Console(command) => console(command).await,
            Command::Release(command) => release(command).await,
            Command::MockUpstream(args) => memgate_mock_upstream::run(args, |addr| {
                println!("mock-upstream listening on http://{addr}");
            })
            .await
            .map_err(|err| format!("mock-upstream: {err}")),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("memgate: {message}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(flags: &ConfigFlags) -> Result<Config, String> {
    Config::load(flags, |name| std::env::var(name).ok()).map_err(|err| err.to_string())
}

async fn serve(flags: ConfigFlags) -> Result<(), String> {
    let config = load_config(&flags)?;
    memgate::observability::logging::init(config.log.format, &config.log.level);
    memgate::http::server::run(config, |addr, admin| {
        println!("memgate listening on http://{addr}");
        if let Some(admin) = admin {
            println!("memgate admin API listening on http://{admin}");
        }
    })
    .await
    .map_err(|err| err.to_string())
}

async fn migrate(flags: ConfigFlags) -> Result<(), String> {
    let config = load_config(&flags)?;
    open_store(&config).await?;
    println!("migrated {}", memgate::store::redact_url(&config.database.url));
    Ok(())
}

/// The store alone, migrated: what the commands that neither embed nor serve need. They start in
/// a moment and run where the model is not installed.
async fn open_store(config: &Config) -> Result<memgate::store::Store, String> {
    let store = memgate::store::Store::connect(&config.database.url).await.map_err(|e| e.to_string())?;
    store.migrate().await.map_err(|e| e.to_string())?;
    Ok(store)
}

async fn memory(command: MemoryCommand) -> Result<(), String> {
    let (target, config_flags) = match &command {
        MemoryCommand::Import { target, .. } | MemoryCommand::Export { target, .. } => {
            (target, &target.config)
        }
    };
    let config = load_config(config_flags)?;
    match &command {
        MemoryCommand::Import { file, dry_run, .. } => {
            // Importing embeds the records: the one memory command that loads the model.
            let state = memgate::AppState::new(&config).await.map_err(|e| e.to_string())?;
            let memories = state.memories();
            let dry_run = *dry_run;
            let mut text = String::new();
            let read = if file.as_os_str() == "-" {
                std::io::stdin().read_to_string(&mut text)
            } else {
                std::fs::File::open(&file).and_then(|mut f| f.read_to_string(&mut text))
            };
            read.map_err(|err| format!("cannot read {}: {err}", file.display()))?;
            let report = memories
                .import(&target.tenant, &text, dry_run, "cli")
                .await
                .map_err(|err| err.to_string())?;
            if report.applied {
                // The background publish may not finish before this process exits: wait for one.
                state.fanout().publish(Topic::Memories).await;
            }
            println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
            if let Some(import_id) = &report.import_id {
                wait_until_embedded(memories, &target.tenant, import_id).await?;
            }
            if !dry_run && !report.applied {
                return Err(format!("{} invalid line(s); nothing was imported", report.counts.invalid));
            }
            Ok(())
        }
        MemoryCommand::Export { scope, record_type, embeddings, .. } => {
            let filter = ListFilter {
                scope: scope.clone(),
                record_type: record_type.clone(),
                ..ListFilter::default()
            };
            let store = open_store(&config).await?;
            let mut pages = std::pin::pin!(memgate::memory::transfer::export_pages_with(
                store,
                target.tenant.clone(),
                filter,
                *embeddings,
            ));
            while let Some(lines) = pages.try_next().await.map_err(|err| err.to_string())? {
                print!("{lines}");
            }
            Ok(())
        }
    }
}

/// Shows, on stderr, the import's records being embedded (this process has the model loaded and
/// embeds them), and returns once every one is findable by meaning.
async fn wait_until_embedded(
    memories: &memgate::memory::MemoryService,
    tenant: &str,
    import_id: &str,
) -> Result<(), String> {
    use std::io::{IsTerminal, Write};
    let tty = std::io::stderr().is_terminal();
    let mut last_line = std::time::Instant::now();
    loop {
        let progress = memories.import_progress(tenant, import_id).await.map_err(|e| e.to_string())?;
        let done = progress.state != "embedding";
        let width = 30usize;
        let filled = if progress.present > 0 {
            (progress.embedded as usize * width) / progress.present as usize
        } else {
            width
        };
        let pace = match (progress.records_per_second, progress.eta_seconds) {
            (Some(rate), Some(eta)) => format!(" {rate:.0}/s, {eta:.0} s left"),
            (Some(rate), None) => format!(" {rate:.0}/s"),
            _ => String::new(),
        };
        let line = format!(
            "embedding [{}{}] {}/{}{pace}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            progress.embedded,
            progress.present
        );
        if tty {
            eprint!("\r{line}   ");
            let _ = std::io::stderr().flush();
        } else if done || last_line.elapsed() >= std::time::Duration::from_secs(5) {
            eprintln!("{line}");
            last_line = std::time::Instant::now();
        }
        if done {
            if tty {
                eprintln!();
            }
            eprintln!("memgate: import {import_id}: {} records ready for semantic search", progress.embedded);
            return Ok(());
        }
        if !memories.is_backfilling() {
            // Embedding stopped short (the log says why): a running gateway embeds the rest.
            let progress = memories.import_progress(tenant, import_id).await.map_err(|e| e.to_string())?;
            if progress.state == "embedding" {
                return Err(format!(
                    "import {import_id}: embedding stopped at {}/{}; a running memgate embeds the rest",
                    progress.embedded, progress.present
                ));
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

async fn key(command: KeyCommand) -> Result<(), String> {
    let KeyCommand::Create { name, scopes, permissions, rate_limit_per_minute, target } = command;
    let config = load_config(&target.config)?;
    let keys = memgate::identity::keys::GatewayKeys::new(open_store(&config).await?);
    let new = memgate::identity::keys::NewKey {
        tenant: target.tenant,
        name,
        scopes,
        permissions,
        rate_limit_per_minute,
    };
    let (record, secret) = keys.issue(&new).await.map_err(|e| e.to_string())?;
    let answer = serde_json::json!({
        "id": record.id,
        "tenant": record.tenant,
        "scopes": record.scopes,
        "permissions": record.permissions,
        "key": secret,
    });
    println!("{answer}");
    eprintln!("memgate: keep the key now; it is not stored and cannot be shown again");
    Ok(())
}

async fn console(command: ConsoleCommand) -> Result<(), String> {
    let ConsoleCommand::LogoutAll(flags) = command;
    let config = load_config(&flags)?;
    let store = open_store(&config).await?;
    let ended = memgate::console::session::end_all(&store).await.map_err(|e| e.to_string())?;
    println!("{ended}");
    eprintln!("memgate: ended {ended} console session(s); every console logs in again");
    Ok(())
}

async fn release(command: ReleaseCommand) -> Result<(), String> {
    let flags = match &command {
        ReleaseCommand::List(flags) => flags,
        ReleaseCommand::Promote { config, .. } | ReleaseCommand::Rollback { config, .. } => config,
    };
    let config = load_config(flags)?;
    let state = memgate::AppState::new(&config).await.map_err(|e| e.to_string())?;
    let rollout = state.rollout();
    match &command {
        ReleaseCommand::List(_) => {}
        ReleaseCommand::Promote { name, reason, .. } => {
            rollout.promote(name, "cli", reason).await.map_err(|e| e.to_string())?;
            state.fanout().publish(Topic::Releases).await;
        }
        ReleaseCommand::Rollback { name, reason, .. } => {
            rollout.rollback(name, "cli", reason).await.map_err(|e| e.to_string())?;
            state.fanout().publish(Topic::Releases).await;
        }
    }
    for release in rollout.list() {
        println!("{release}");
    }
    Ok(())
}

async fn actions(command: ActionsCommand) -> Result<(), String> {
    use memgate::store::outbox::{OutboxFilter, OutboxState, Replay};
    let flags = match &command {
        ActionsCommand::List { target, .. } | ActionsCommand::Replay { target, .. } => &target.config,
        ActionsCommand::Deliver(flags) => flags,
    };
    let config = load_config(flags)?;
    // The outbox needs the store alone: no model, no index.
    let store = open_store(&config).await?;
    let triggers = memgate::triggers::Triggers::new(
        config.triggers.clone(),
        store,
        tokio_util::task::TaskTracker::new(),
        memgate::triggers::TriggerMetrics::default(),
    )
    .map_err(|errors| {
        errors.into_iter().map(|e| format!("{}: {}", e.key, e.message)).collect::<Vec<_>>().join("; ")
    })?;
    match command {
        ActionsCommand::List { state, since, limit, target } => {
            let state =
                match state.as_deref() {
                    None => None,
                    Some(text) => Some(OutboxState::parse(text).ok_or_else(|| {
                        format!("--state `{text}`: use pending, retrying, delivered or dead")
                    })?),
                };
            let since_ms = match since.as_deref() {
                None => None,
                Some(text) => {
                    Some(memgate::http::admin::actions::parse_since(text, memgate::clock::now_ms()).map_err(
                        |_| format!("--since `{text}`: a time (RFC 3339) or an age such as 30m, 1h, 7d"),
                    )?)
                }
            };
            let filter = OutboxFilter { state, since_ms, ..OutboxFilter::default() };
            let actions = triggers
                .list(&target.tenant, filter, None, limit.clamp(1, 10_000))
                .await
                .map_err(|e| e.to_string())?;
            for action in actions {
                println!("{}", action.to_json());
            }
            Ok(())
        }
        ActionsCommand::Replay { id, target } => {
            match triggers.replay(&target.tenant, &id).await.map_err(|e| e.to_string())? {
                Replay::Replayed(action) => {
                    println!("{}", action.to_json());
                    eprintln!(
                        "memgate: {id} is due again; a running memgate (or `memgate actions deliver`) sends it"
                    );
                    Ok(())
                }
                Replay::AlreadyQueued(action) => Err(format!(
                    "{id} is still {}: it will be delivered without a replay",
                    action.state.as_str()
                )),
            }
        }
        ActionsCommand::Deliver(_) => {
            let tried = triggers.delivery().deliver_due(1_000).await.map_err(|e| e.to_string())?;
            println!("{tried}");
            Ok(())
        }
    }
}
