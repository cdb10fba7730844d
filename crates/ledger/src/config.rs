//! How a block store is opened: where, how durable, how much to verify.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// When appended blocks are made durable against a machine crash.
///
/// Every append is one RocksDB write of one batch, and with RocksDB's
/// default options (`manual_wal_flush` off) each write hands its WAL record
/// to the operating system before it returns. So after a *process* crash
/// (`kill -9`, panic, OOM kill) nothing that `append` returned for is lost,
/// in any mode: the WAL bytes are in the page cache and RocksDB replays
/// them on open. A *machine* crash (power loss, kernel panic) loses what
/// the page cache had not written back; only blocks below
/// [`crate::BlockStore::durable_height`] — synced with fsync — are sure to
/// survive it. The modes choose when that sync happens:
///
/// The default is `EveryBlock`, Fabric's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Each append is a synced write: when `append` returns, the block
    /// survives a machine crash. Costs one fsync (~0.2 ms) per block, as
    /// Fabric's peer does.
    #[default]
    EveryBlock,
    /// Appends are unsynced; a flusher thread syncs the WAL once
    /// `blocks_max` blocks are pending or `interval_ms` has passed since
    /// the first pending one, whichever comes first. Reading a block that
    /// is not yet durable (by number, by TxID, its validation code, or
    /// through the Deliver iterator) syncs first, so nothing a reader was
    /// served can be lost in a machine crash. A machine crash can lose the
    /// unread blocks appended since the last sync.
    GroupCommit { blocks_max: u32, interval_ms: u64 },
    /// No syncs on the write or read path; RocksDB syncs only what it syncs
    /// on its own (SST files when it flushes memtables). [`crate::BlockStore::sync`]
    /// and a clean close still sync. For tests and for benchmarks that
    /// measure everything but the disk.
    None,
}

/// The configuration of one block store (one channel's ledger).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The RocksDB directory; created if missing.
    pub path: PathBuf,
    /// When appended blocks are synced.
    pub durability: Durability,
    /// How many blocks at the tail `open` decodes and checks: each block's
    /// number, data hash and link to its predecessor, and the tail block's
    /// header hash against the tail record. At least the tail block is
    /// always checked.
    pub verify_tail_blocks: u32,
    /// Whether each transaction's TxID is indexed to its block, position
    /// and validation code (true by default). A peer needs the index for
    /// its duplicate-TxID check and for queries by TxID; an orderer, like
    /// Fabric's, needs neither and saves a read and a write per
    /// transaction. Lookups on a store without it are
    /// [`Error::NotIndexed`].
    pub index_tx_ids: bool,
    /// Whether every committed write is indexed for key history queries
    /// (Fabric's `ledger.history.enableHistoryDatabase`; off by default
    /// here, since orderers have no use for it). Turned on for a store
    /// that has blocks, `open` indexes them.
    pub history: bool,
}

impl StoreConfig {
    /// Default number of tail blocks verified on open.
    pub const VERIFY_TAIL_BLOCKS_DEFAULT: u32 = 10;

    /// A store at `path` with the default durability (every block) and
    /// verification depth.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            durability: Durability::default(),
            verify_tail_blocks: Self::VERIFY_TAIL_BLOCKS_DEFAULT,
            index_tx_ids: true,
            history: false,
        }
    }

    /// The same configuration with the history index on or off.
    pub fn with_history(mut self, history: bool) -> Self {
        self.history = history;
        self
    }

    /// The same configuration without the TxID index.
    pub fn without_tx_index(mut self) -> Self {
        self.index_tx_ids = false;
        self
    }

    /// The same configuration with another durability mode.
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if let Durability::GroupCommit { blocks_max, .. } = self.durability
            && blocks_max == 0
        {
            return Err(Error::InvalidConfig {
                reason: "group commit blocks_max must be at least 1",
            });
        }
        Ok(())
    }
}
