//! Errors of the orderer: what stops a channel or the node from running.
//!
//! Refused client requests are not errors: Broadcast and Deliver answer
//! them with a Fabric status and an info text.

use std::path::PathBuf;

use crate::config::ConfigError;

/// A channel could not be opened, created or extended, or the node could
/// not serve.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The channel's configuration cannot be used by an orderer.
    #[error("channel {channel}: config block {block}: {source}")]
    Config {
        channel: String,
        block: u64,
        #[source]
        source: ConfigError,
    },
    /// The channel's MSPs or policies cannot be built.
    #[error("channel {channel}: config block {block}: {reason}")]
    Authority {
        channel: String,
        block: u64,
        reason: String,
    },
    /// The channel's block store failed or refused a block.
    #[error("channel {channel}: block store: {source}")]
    Ledger {
        channel: String,
        #[source]
        source: weft_ledger::Error,
    },
    /// A genesis block or a stored block is not what the chain needs.
    #[error("channel {channel}: block {block}: {reason}")]
    BadChain {
        channel: String,
        block: u64,
        reason: String,
    },
    /// A block could not be signed.
    #[error("channel {channel}: signing block {block}: {reason}")]
    Sign {
        channel: String,
        block: u64,
        reason: String,
    },
    /// The channel's consensus type cannot run on this node.
    #[error("channel {channel}: {reason}")]
    Consensus { channel: String, reason: String },
    /// A file or directory of the node could not be used.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The channel's Raft node, its log store or its cluster failed.
    #[error("channel {channel}: raft: {reason}")]
    Raft { channel: String, reason: String },
    /// A channel task failed or panicked.
    #[error("channel {channel}: {reason}")]
    Task { channel: String, reason: String },
}

/// Result with the orderer's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
