//! The `memgate` command line: parses arguments and calls into the library.
#![allow(clippy::print_stdout)]

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "memgate",
    version,
    about = "Long-term memory for every Anthropic Messages request"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(memgate::config::ConfigFlags),
    /// A stand-in Anthropic API for tests, demos and load tests (see docs/mock-upstream.md).
    MockUpstream(memgate::mock_upstream::MockArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("memgate: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(flags) => serve(flags).await,
            Command::MockUpstream(args) => memgate::mock_upstream::run(args, |addr| {
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

async fn serve(flags: memgate::config::ConfigFlags) -> Result<(), String> {
    let config = memgate::config::Config::load(&flags, |name| std::env::var(name).ok())
        .map_err(|err| err.to_string())?;
    memgate::observability::logging::init(config.log_format, &config.log_level);
    memgate::server::run(config, |addr| {
        println!("memgate listening on http://{addr}")
    })
    .await
    .map_err(|err| err.to_string())
}
