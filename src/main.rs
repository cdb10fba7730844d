//! The `weft` command: node roles, network tooling and benchmarks.
//!
//! Each subcommand lives in its own module under `cli/`; this file only
//! parses the command line and dispatches. Errors reach the user as one
//! line naming the file, field or position at fault, and a non-zero exit.

mod channel;
mod cli;
mod cryptogen;
mod orderer;
mod settings;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let command = cli::Cli::parse();
    match cli::run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
