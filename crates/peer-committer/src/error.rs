//! Errors of the committer. Invalid transactions are not errors: they get a
//! validation code. These are failures that stop a block from committing.

/// A block could not be validated or committed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The channel configuration in a config block is unusable.
    #[error("channel {channel}: bad configuration in block {block}: {reason}")]
    BadConfig {
        channel: String,
        block: u64,
        reason: String,
    },
    /// The world state failed.
    #[error("world state: {0}")]
    State(#[from] weft_statedb::Error),
    /// The block store failed or refused the block.
    #[error("block store: {0}")]
    Ledger(#[from] weft_ledger::Error),
    /// A block does not fit the chain or cannot be read.
    #[error("channel {channel}: block {block}: {reason}")]
    BadBlock {
        channel: String,
        block: u64,
        reason: String,
    },
    /// A stream channel's block failed its checks while earlier blocks were
    /// staged: they were rolled back, and the chain now ends below `to`.
    #[error(
        "channel {channel}: block {block}: {reason}; the blocks staged since block {to} were rolled back"
    )]
    RolledBack {
        channel: String,
        block: u64,
        to: u64,
        reason: String,
    },
    /// A stored block failed to decode during recovery.
    #[error("channel {channel}: stored block {block} is unreadable: {reason}")]
    Corrupt {
        channel: String,
        block: u64,
        reason: String,
    },
}

/// Result with the committer's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
