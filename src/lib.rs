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

/// A node's async runtime, named after the node's kind, with
/// `worker_threads` workers (0: tokio's default, one per core). Nodes
/// sharing a machine's cores each take a share of them (`weft network
/// up`): with more workers than cores, a task woken on one worker makes
/// tokio wake another to steal work, context switches the cores pay for.
fn node_runtime(kind: &str, worker_threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name(kind);
    if worker_threads > 0 {
        builder.worker_threads(worker_threads);
    }
    anyhow::Context::context(builder.build(), "starting the async runtime")
}

/// Sizes rayon's global pool, where a node's parallel checks run, to
/// `threads` named `<name>-<index>` (0: rayon's default, one per core);
/// `failure` says which setting failed to apply. A pool of one thread is
/// not handed work at all: the checks then run where they arrive.
fn node_pool(name: &'static str, threads: usize, failure: &'static str) -> anyhow::Result<()> {
    if threads == 0 {
        return Ok(());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |index| format!("{name}-{index}"))
        .build_global();
    anyhow::Context::context(pool, failure)
}

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
