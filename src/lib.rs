//! The `weft` command's library: node roles, network tooling and
//! benchmarks, each subcommand in its own module under `cli/`.
//!
//! The binary (`src/main.rs`) only parses the command line and dispatches
//! through [`cli::run`]. The library exists so that the fuzz targets
//! (`fuzz/`) reach the configuration readers the binary uses, through
//! [`fuzzing`] when the `fuzzing` feature is on; it is not an API.

mod bench;
mod chaincode;
mod channel;
mod chaos;
pub mod cli;
mod client;
mod cryptogen;
mod network;
mod ops;
mod orderer;
mod peer;
mod settings;
mod tls;

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

/// A free loopback port outside the kernel's ephemeral range, for the
/// integration tests' nodes, as `weft bench` takes its own.
pub use network::{free_port, reserve_ports};

/// Completes on Ctrl-C or SIGTERM: how a node is asked to stop.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
