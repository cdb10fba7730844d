//! The `weft` command: node roles, network tooling and benchmarks.
//!
//! Each subcommand lives in its own module under `cli/`; this file only
//! parses the command line and dispatches. Errors reach the user as one
//! line naming the file, field or position at fault, and a non-zero exit.

use std::process::ExitCode;

use clap::Parser;
use weft::cli;

/// mimalloc instead of glibc's malloc: the nodes allocate on one thread and
/// free on another all the time (a request decoded on a connection's task,
/// dropped after a block is written), and at moderate load glibc's arenas
/// spent twice the CPU per transaction that they do at full load,
/// consolidating and trimming (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let command = cli::Cli::parse();
    init_logging();
    match cli::run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to standard error; `WEFT_LOG` (or `RUST_LOG`) sets the filter in
/// `tracing`'s syntax, `info` by default.
fn init_logging() {
    let filter = std::env::var("WEFT_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_owned());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
}
