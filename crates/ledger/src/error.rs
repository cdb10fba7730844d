//! Errors of the block store and of Deliver seek resolution.

use std::fmt;
use std::path::PathBuf;

use bytes::Bytes;
use weft_protos::common::Status;
use weft_protos::hash::Hash;

/// What can go wrong opening, appending to or reading the block store.
///
/// Chain violations (`UnexpectedNumber`, `PreviousHashMismatch`,
/// `DataHashMismatch`, `MissingHeader`) are returned before anything is
/// written. `Corrupt*` means the stored data contradicts itself; the store
/// refuses to guess and names what it found.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// RocksDB could not open (or create) the store's directory.
    #[error("cannot open block store at {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rocksdb::Error,
    },

    /// A configuration value cannot work.
    #[error("invalid block store configuration: {reason}")]
    InvalidConfig { reason: &'static str },

    /// The block offered for block number `expected_number` has no header.
    #[error("block offered as number {expected_number} has no header")]
    MissingHeader { expected_number: u64 },

    /// The block's number is not the store's height (the next number).
    #[error("block number {found} does not follow the tail: expected {expected}")]
    UnexpectedNumber { expected: u64, found: u64 },

    /// The block's previous hash is not the header hash of the tail block.
    #[error(
        "block {block_number}: previous hash {} is not the tail's header hash {}",
        Hex(found),
        Hex(expected)
    )]
    PreviousHashMismatch {
        block_number: u64,
        expected: Hash,
        found: Bytes,
    },

    /// The header's data hash is not the SHA-256 of the block's data.
    #[error(
        "block {block_number}: header data hash {} is not the hash of the data {}",
        Hex(in_header),
        Hex(computed)
    )]
    DataHashMismatch {
        block_number: u64,
        in_header: Bytes,
        computed: Hash,
    },

    /// Writing a block's batch failed; nothing of the block was stored.
    #[error("block {block_number}: write failed: {source}")]
    Write {
        block_number: u64,
        #[source]
        source: rocksdb::Error,
    },

    /// A truncation would remove the genesis block.
    #[error("a block store keeps at least its genesis block")]
    TruncateGenesis,

    /// Reading a block failed.
    #[error("block {block_number}: read failed: {source}")]
    ReadBlock {
        block_number: u64,
        #[source]
        source: rocksdb::Error,
    },

    /// Reading the transaction index failed.
    #[error("transaction {tx_id}: index read failed: {source}")]
    ReadTx {
        tx_id: String,
        #[source]
        source: rocksdb::Error,
    },

    /// A TxID lookup on a store opened without the TxID index
    /// ([`crate::StoreConfig::index_tx_ids`]).
    #[error("block store at {} keeps no TxID index", path.display())]
    NotIndexed { path: PathBuf },

    /// Syncing the write-ahead log (or flushing memtables at open) failed.
    /// The store is unusable afterwards: see [`Error::Poisoned`].
    #[error("sync of blocks below {height} failed: {source}")]
    Sync {
        height: u64,
        #[source]
        source: rocksdb::Error,
    },

    /// An earlier sync failed. After a failed fsync the kernel may already
    /// have dropped the dirty pages, so retrying could report data durable
    /// that is not; the store refuses further appends and tail reads until
    /// it is reopened from what is on disk.
    #[error("block store unusable after a failed sync: {reason}")]
    Poisoned { reason: String },

    /// A stored block contradicts the tail record or the hash chain.
    #[error("block store at {}: block {block_number} is corrupt: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        block_number: u64,
        reason: String,
    },

    /// The tail record (height and last header hash) is malformed, or
    /// absent while blocks are present.
    /// A history query on a store that keeps no history index.
    #[error("block store at {} keeps no history index (history database disabled)", path.display())]
    NoHistory { path: PathBuf },

    /// A history index read failed.
    #[error("history index read failed: {source}")]
    ReadHistory {
        #[source]
        source: rocksdb::Error,
    },

    /// Reading or writing private data (transient or committed) failed.
    #[error("private data store: {source}")]
    PrivateData {
        #[source]
        source: rocksdb::Error,
    },

    #[error("block store at {}: tail record is corrupt: {reason}", path.display())]
    CorruptTail { path: PathBuf, reason: String },

    /// A transaction index entry cannot be decoded.
    #[error("block store at {}: index entry of transaction {tx_id} is corrupt", path.display())]
    CorruptIndex { path: PathBuf, tx_id: String },

    /// The group-commit flusher thread could not be started.
    #[error("cannot start the group-commit flusher thread: {source}")]
    Flusher {
        #[source]
        source: std::io::Error,
    },
    /// A block below the height is not in the store: the store is damaged.
    #[error("block {block_number} is below the height but missing")]
    MissingBlock { block_number: u64 },
    /// A blocking read task died before answering.
    #[error("a block read task failed: {reason}")]
    ReadTask { reason: String },
}

/// The block store's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a Deliver request's `SeekInfo` cannot be served, each mapped to the
/// `common.Status` Fabric answers with ([`SeekError::status`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeekError {
    /// `SeekInfo.start` is absent.
    #[error("seek info has no start position")]
    MissingStart,
    /// `SeekInfo.stop` is absent.
    #[error("seek info has no stop position")]
    MissingStop,
    /// The start position names none of oldest, newest, specified or
    /// next-commit.
    #[error("seek start position has no type")]
    UnknownStart,
    /// Start is `newest` but the ledger holds no block.
    #[error("seek start is newest but the ledger is empty")]
    NoNewestBlock,
    /// A specified start lies beyond the height (start == height is allowed:
    /// it is the next block to come).
    #[error("seek start {start} is beyond the ledger height {height}")]
    StartBeyondHeight { start: u64, height: u64 },
    /// A specified stop lies before the start.
    #[error("seek stop {stop} is before the start {start}")]
    StopBeforeStart { start: u64, stop: u64 },
    /// FAIL_IF_NOT_READY and the block to deliver does not exist yet.
    #[error("block {number} is not ready: the ledger height is {height}")]
    NotReady { number: u64, height: u64 },
}

impl SeekError {
    /// The status Fabric's Deliver handler answers with for this error.
    pub fn status(&self) -> Status {
        match self {
            Self::MissingStart | Self::MissingStop | Self::StopBeforeStart { .. } => {
                Status::BadRequest
            }
            Self::UnknownStart
            | Self::NoNewestBlock
            | Self::StartBeyondHeight { .. }
            | Self::NotReady { .. } => Status::NotFound,
        }
    }
}

/// Lowercase hex of a byte string, for error messages.
pub(crate) struct Hex<'a>(pub(crate) &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(empty)");
        }
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}
