//! The block store: one RocksDB database per channel ledger.
//!
//! Appends are serialized by a writer lock and each is one `WriteBatch`
//! (block bytes, the block's tx index entries, the tail record), so RocksDB's
//! atomic batches are the unit of recovery: its WAL replay on open stops at
//! the first incomplete record (point-in-time recovery), and a batch is
//! either wholly replayed or not at all. After the write, the new height is
//! published (an atomic plus the watch channel); readers see a block only
//! once the height covers it, never half of it.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};
use prost::Message;
use rocksdb::{
    BlockBasedOptions, ColumnFamily, ColumnFamilyDescriptor, DB, DBCompressionType, Direction,
    IteratorMode, Options, WriteBatch, WriteOptions,
};
use tokio::sync::watch;
use weft_protos::common::{Block, BlockHeader, BlockMetadataIndex};
use weft_protos::hash::{Hash, block_data_hash, block_header_hash, data_hash_of};
use weft_protos::queryresult::KeyModification;

use crate::config::{Durability, StoreConfig};
use crate::error::{Error, Hex, Result};
use crate::history::{
    CF_HISTORY, HISTORY_HEIGHT_KEY, HistoryWrites, decode_height, encode_height, entry_key,
    indexed_writes, key_prefix, modification, position_of,
};
use crate::keys::{
    CF_BLOCKS, CF_TX_IDS, TAIL_KEY, TailRecord, TxLocation, block_key, decode_block_key,
    decode_tail, decode_tx_location, encode_tail, encode_tx_location,
};
use crate::private::{
    CF_PRIVATE, CF_PRIVATE_KEYS, CF_PRIVATE_MISSING, CF_PRIVATE_PURGED, CF_PRIVATE_RECONCILED,
    CF_TRANSIENT, MissingPrivateData, PrivateKeyRef, PurgedValue, TRANSIENT_RETENTION_BLOCKS,
    by_height_key, by_height_start, encode_entry, entry_writes, private_key, reconciled_key,
    tx_id_of_by_height, tx_index_of,
};

/// A channel's blocks in RocksDB, with the TxID index, the tail record and
/// the durability policy. Shared between threads by reference (`&self`
/// everywhere); appends are serialized internally.
///
/// Dropping the store stops the group-commit flusher and syncs whatever is
/// not yet durable; [`BlockStore::close`] does the same and reports a
/// failed sync.
pub struct BlockStore {
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
}

/// What the flusher thread shares with the store.
struct Shared {
    db: DB,
    path: PathBuf,
    durability: Durability,
    index_tx_ids: bool,
    /// Whether appends index their writes for history queries.
    history: bool,
    /// The writer's view of the tail; holding it serializes appends.
    writer: Mutex<Tail>,
    /// Number of blocks readers may see. Stored after the block's batch is
    /// written, under the writer lock.
    height: AtomicU64,
    /// The header hash of block `height - 1`, published with `height`.
    last_header_hash: RwLock<Option<Hash>>,
    /// Blocks below this height have been synced to disk.
    durable_height: AtomicU64,
    /// Serializes WAL syncs, so concurrent readers share one fsync.
    sync_lock: Mutex<()>,
    /// Set when a sync failed; the store then refuses to go on.
    poisoned: OnceLock<String>,
    flush_state: Mutex<FlushState>,
    flush_wake: Condvar,
    height_tx: watch::Sender<u64>,
    durable_tx: watch::Sender<u64>,
    /// The last few blocks appended, as stored, oldest first: Deliver
    /// streams at the tip send them without a read from the disk (and
    /// without a hand-off to a blocking thread).
    recent: Mutex<VecDeque<(u64, Bytes)>>,
}

/// Blocks kept in [`Shared::recent`].
const RECENT_BLOCKS: usize = 8;
/// A block larger than this is not kept in [`Shared::recent`].
const RECENT_BLOCK_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Unsynced write-ahead log bytes handed to the disk in the background.
const WAL_BYTES_PER_SYNC: u64 = 512 * 1024;
/// Write-ahead log bytes after which the memtables are flushed and the
/// log recycled, before [`crate::staggered`] stretches it per store.
const WAL_BYTES_MAX: u64 = 16 << 20;

#[derive(Debug, Clone, Copy)]
struct Tail {
    height: u64,
    header_hash: Option<Hash>,
}

/// The group-commit flusher's bookkeeping.
#[derive(Debug, Default)]
struct FlushState {
    /// When the oldest not-yet-synced block was appended.
    first_pending_at: Option<Instant>,
    shutdown: bool,
}

/// What a block commits of private data, stored with it (see `private.rs`).
#[derive(Debug, Clone, Default)]
pub struct BlockPrivateData {
    /// The private writes each transaction committed on this peer:
    /// (transaction index, serialized writes).
    pub committed: Vec<(u64, Bytes)>,
    /// The block's TxIDs whose transient entries are no longer needed.
    pub settled: Vec<String>,
    /// Earlier blocks' committed private data to replace, because some of
    /// it expired with this block: (block, transaction index, what is
    /// left; `None` removes the entry).
    pub rewritten: Vec<(u64, u64, Option<Bytes>)>,
    /// The private keys committed writes write (or whose metadata they
    /// write): (block, transaction index, key), indexed for purges. The
    /// block's own, and those of earlier blocks' copies it completes.
    pub key_writes: Vec<(u64, u64, PrivateKeyRef)>,
    /// What the block should have committed on this peer but could not
    /// find: recorded for the reconciler.
    pub missing: Vec<MissingPrivateData>,
    /// Earlier blocks' missing data found since and merged into their
    /// copies (in `rewritten`): their entries are deleted, and the block
    /// records that it completed those copies.
    pub reconciled: Vec<MissingPrivateData>,
    /// Missing data given up on (its collection's `blockToLive` has
    /// passed): the entries are deleted.
    pub abandoned: Vec<MissingPrivateData>,
    /// The keys purged, each with the (block, transaction index) of its
    /// purge: the key's index entries below that are removed (the
    /// committer rewrote the copies they point to).
    pub purged_keys: Vec<(u64, u64, PrivateKeyRef)>,
    /// The private values the block's purges removed on this peer, for
    /// replays.
    pub purged_values: Vec<PurgedValue>,
}

impl BlockStore {
    /// Opens (or creates) the store at `config.path` and checks its tail.
    ///
    /// Reads the tail record, checks that no block is stored beyond it, and
    /// verifies the last `config.verify_tail_blocks` blocks: each decodes,
    /// has the number of its key and the data hash of its data, links to its
    /// predecessor, and the tail block's header hash equals the tail
    /// record's. Any contradiction is [`Error::Corrupt`] naming the block
    /// (or [`Error::CorruptTail`]). Because every block was written in one
    /// batch with its tail record, a crash cannot leave them disagreeing;
    /// a disagreement means the disk or a bug damaged the data.
    ///
    /// Everything found is then synced (memtables flushed, WAL synced), so
    /// `durable_height() == height()` after open.
    pub fn open(config: &StoreConfig) -> Result<Self> {
        config.validate()?;
        let db = open_db(&config.path)?;
        let tail = read_tail(&db, &config.path)?;
        verify_tail(&db, &config.path, tail, config.verify_tail_blocks)?;
        let height = tail.map_or(0, |tail| tail.height);
        make_everything_durable(&db, height)?;

        let header_hash = tail.map(|tail| tail.header_hash);
        let shared = Arc::new(Shared {
            db,
            path: config.path.clone(),
            durability: config.durability,
            index_tx_ids: config.index_tx_ids,
            history: config.history,
            writer: Mutex::new(Tail {
                height,
                header_hash,
            }),
            height: AtomicU64::new(height),
            last_header_hash: RwLock::new(header_hash),
            durable_height: AtomicU64::new(height),
            sync_lock: Mutex::new(()),
            poisoned: OnceLock::new(),
            flush_state: Mutex::new(FlushState::default()),
            flush_wake: Condvar::new(),
            height_tx: watch::Sender::new(height),
            durable_tx: watch::Sender::new(height),
            recent: Mutex::new(VecDeque::with_capacity(RECENT_BLOCKS)),
        });

        if config.history {
            shared.index_history_to(height)?;
        }
        let flusher = match config.durability {
            Durability::GroupCommit {
                blocks_max,
                interval_ms,
            } => {
                let shared = Arc::clone(&shared);
                let interval = Duration::from_millis(interval_ms);
                let handle = std::thread::Builder::new()
                    .name("weft-ledger-flusher".into())
                    .spawn(move || run_flusher(&shared, u64::from(blocks_max), interval))
                    .map_err(|source| Error::Flusher { source })?;
                Some(handle)
            }
            Durability::EveryBlock | Durability::None => None,
        };
        Ok(Self { shared, flusher })
    }

    /// Appends the next block, with its metadata, in one atomic batch.
    ///
    /// Checks first, writing nothing if any fails: the header is present,
    /// its number is the height, its previous hash is the tail's header hash
    /// (for blocks after 0; block 0's previous hash is not checked), and its
    /// data hash is the SHA-256 of the data. These are the only checks: the
    /// store does not validate transactions, signatures or metadata.
    ///
    /// The batch holds the serialized block, one tx index entry per TxID
    /// not indexed before (see [`BlockStore::tx_location`]) and the new
    /// tail record. When this returns, the block survives a process crash;
    /// whether it survives a machine crash depends on [`Durability`].
    pub fn append(&self, block: &Block) -> Result<()> {
        self.append_as(block, self.shared.durability, DataHash::Check, None, None)
    }

    /// [`BlockStore::append`] of a block whose data hash its caller
    /// computed from this very data: it assembled the block, or checked the
    /// hash when the block arrived. The store checks the number and the
    /// previous hash, and does not hash the data a second time (for a block
    /// of large envelopes, that hash is a real share of the cost of writing
    /// it).
    ///
    /// With `unsynced`, the write is never synced, whatever the store's
    /// [`Durability`]: a stream channel's block applied before the
    /// orderer's checkpoint confirms it, or a Raft orderer's block, which
    /// its synced log backs. The next [`BlockStore::sync`] makes it
    /// durable; [`BlockStore::truncate`] removes it if the checkpoint
    /// fails.
    pub fn append_assembled(&self, block: &Block, unsynced: bool) -> Result<()> {
        let durability = self.durability(unsynced);
        self.append_as(block, durability, DataHash::CheckedByCaller, None, None)
    }

    /// [`BlockStore::append_assembled`] of a block whose caller has decoded
    /// it already: `writes` gives its history writes
    /// ([`crate::history_writes`]), so that the store does not decode the
    /// block again; called only if the store keeps history.
    /// `private` is what the block committed of private data, written in
    /// the same batch, and the transient entries it settles. The caller
    /// validated the block, its data hash included, as
    /// [`BlockStore::append_assembled`] says.
    pub fn append_with_history(
        &self,
        block: &Block,
        writes: impl FnOnce() -> HistoryWrites,
        private: &BlockPrivateData,
        unsynced: bool,
    ) -> Result<()> {
        let durability = self.durability(unsynced);
        let writes = self.shared.history.then(writes);
        self.append_as(
            block,
            durability,
            DataHash::CheckedByCaller,
            writes,
            Some(private),
        )
    }

    /// The store's durability, or none for an `unsynced` append.
    fn durability(&self, unsynced: bool) -> Durability {
        if unsynced {
            Durability::None
        } else {
            self.shared.durability
        }
    }

    fn append_as(
        &self,
        block: &Block,
        durability: Durability,
        data_hash: DataHash,
        writes: Option<HistoryWrites>,
        private: Option<&BlockPrivateData>,
    ) -> Result<()> {
        let shared = &*self.shared;
        shared.check_not_poisoned()?;
        let mut tail = shared.writer.lock();
        let number = tail.height;
        let header = block.header.as_ref().ok_or(Error::MissingHeader {
            expected_number: number,
        })?;
        check_links(header, block, &tail, data_hash)?;
        let header_hash = block_header_hash(header);
        let encoded = Bytes::from(block.encode_to_vec());
        let mut batch = shared.batch_for(block, &encoded, number, header_hash, writes)?;
        if let Some(private) = private {
            shared.add_private(&mut batch, number, private)?;
        }

        let every_block = durability == Durability::EveryBlock;
        let mut options = WriteOptions::default();
        options.set_sync(every_block);
        if let Err(source) = shared.db.write_opt(batch, &options) {
            if every_block {
                // The WAL sync may have failed: see `Error::Poisoned`.
                shared.poison(format!("synced write of block {number}: {source}"));
            }
            return Err(Error::Write {
                block_number: number,
                source,
            });
        }

        let height = number + 1;
        *tail = Tail {
            height,
            header_hash: Some(header_hash),
        };
        shared.remember(number, encoded);
        *shared.last_header_hash.write() = Some(header_hash);
        shared.height.store(height, Ordering::Release);
        if every_block {
            shared.mark_durable(height);
        }
        // Under the writer lock, so the watch never goes backwards.
        shared.height_tx.send_replace(height);
        drop(tail);

        if let Durability::GroupCommit { blocks_max, .. } = durability {
            shared.note_pending(u64::from(blocks_max));
        }
        Ok(())
    }

    /// Removes the blocks at and above `height`, with their TxID index
    /// entries, in one synced batch: a stream channel's blocks whose
    /// checkpoint never came or did not verify. Block `height - 1` becomes
    /// the tail. At least the genesis block stays; a `height` at or above
    /// the current one removes nothing.
    pub fn truncate(&self, height: u64) -> Result<()> {
        let shared = &*self.shared;
        shared.check_not_poisoned()?;
        let mut tail = shared.writer.lock();
        if height >= tail.height {
            return Ok(());
        }
        let Some(last) = height.checked_sub(1) else {
            return Err(Error::TruncateGenesis);
        };
        let last_block = shared.decode_block(last, shared.read_block_bytes(last)?)?;
        let header = last_block
            .header
            .as_ref()
            .ok_or_else(|| shared.corrupt(last, "stored without a header".into()))?;
        let header_hash = block_header_hash(header);
        let blocks = shared.cf(CF_BLOCKS)?;
        let history = shared.cf(CF_HISTORY)?;
        let history_height = shared.history_height()?;
        let mut batch = WriteBatch::default();
        for family in [CF_PRIVATE, CF_PRIVATE_MISSING, CF_PRIVATE_PURGED] {
            batch.delete_range_cf(
                shared.cf(family)?,
                private_key(height, 0),
                private_key(tail.height, 0),
            );
        }
        batch.delete_range_cf(
            shared.cf(CF_PRIVATE_RECONCILED)?,
            height.to_be_bytes(),
            tail.height.to_be_bytes(),
        );
        for number in height..tail.height {
            let block = shared.decode_block(number, shared.read_block_bytes(number)?)?;
            if shared.index_tx_ids {
                shared.unindex_block(&block, height, &mut batch)?;
            }
            if number < history_height {
                for write in &indexed_writes(&block).0 {
                    batch.delete_cf(history, entry_key(write, number));
                }
            }
            batch.delete_cf(blocks, block_key(number));
        }
        if history_height > height {
            batch.put(HISTORY_HEIGHT_KEY, encode_height(height));
        }
        batch.put(
            TAIL_KEY,
            encode_tail(&TailRecord {
                height,
                header_hash,
            }),
        );
        let mut options = WriteOptions::default();
        options.set_sync(true);
        if let Err(source) = shared.db.write_opt(batch, &options) {
            shared.poison(format!("synced truncation to height {height}: {source}"));
            return Err(Error::Write {
                block_number: height,
                source,
            });
        }
        *tail = Tail {
            height,
            header_hash: Some(header_hash),
        };
        shared.recent.lock().retain(|(number, _)| *number < height);
        *shared.last_header_hash.write() = Some(header_hash);
        shared.height.store(height, Ordering::Release);
        shared.durable_height.fetch_min(height, Ordering::AcqRel);
        shared.height_tx.send_replace(height);
        shared.durable_tx.send_if_modified(|durable| {
            let lowered = *durable > height;
            if lowered {
                *durable = height;
            }
            lowered
        });
        Ok(())
    }

    /// The number of blocks stored: the number the next block must have.
    pub fn height(&self) -> u64 {
        self.shared.height.load(Ordering::Acquire)
    }

    /// The number of blocks synced to disk: blocks below it survive a
    /// machine crash. Equal to `height()` after open and after
    /// [`BlockStore::sync`]; with `EveryBlock`, always.
    pub fn durable_height(&self) -> u64 {
        self.shared.durable_height.load(Ordering::Acquire)
    }

    /// The header hash of the last block (the next block's previous hash),
    /// or `None` for an empty store.
    pub fn last_header_hash(&self) -> Option<Hash> {
        *self.shared.last_header_hash.read()
    }

    /// A watch of [`BlockStore::height`], updated after each append: a
    /// Deliver stream waiting for block `n` awaits
    /// `receiver.wait_for(|height| *height > n)`.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.height_tx.subscribe()
    }

    /// A watch of [`BlockStore::durable_height`]: what a commit event that
    /// promises durability should wait for.
    pub fn subscribe_durable(&self) -> watch::Receiver<u64> {
        self.shared.durable_tx.subscribe()
    }

    /// Gives the blocks appended unsynced the store's own [`Durability`],
    /// as if they had been appended with it: synced now under
    /// `EveryBlock`, handed to the flusher under group commit, left to
    /// RocksDB under `None`. For a caller that appends unsynced to do
    /// other work before paying for the sync (a stream channel's peer
    /// announces a checkpoint *applied* before its block is durable).
    pub fn settle_unsynced(&self) -> Result<()> {
        let shared = &*self.shared;
        match shared.durability {
            Durability::EveryBlock => shared.sync_through(self.height()),
            Durability::GroupCommit { blocks_max, .. } => {
                if shared.durable_height.load(Ordering::Acquire) < self.height() {
                    shared.note_pending(u64::from(blocks_max));
                }
                Ok(())
            }
            Durability::None => Ok(()),
        }
    }

    /// Syncs every appended block to disk now, in any durability mode.
    pub fn sync(&self) -> Result<()> {
        self.shared.sync_through(self.height())
    }

    /// The stored bytes of block `number` (a serialized `common.Block`),
    /// for Deliver to send without re-encoding; `None` at or beyond the
    /// height. Under group commit, syncs first if the block is not yet
    /// durable.
    pub fn block_bytes(&self, number: u64) -> Result<Option<Bytes>> {
        if number >= self.height() {
            return Ok(None);
        }
        self.shared.ensure_durable(number + 1)?;
        self.shared.read_block_bytes(number).map(Some)
    }

    /// The stored bytes of block `number` if it is one of the last few
    /// appended and may be served at once: below the height and, under
    /// group commit, already durable. Never touches the disk, so an async
    /// task may call it; `None` means read it with
    /// [`BlockStore::block_bytes`].
    pub fn recent_block_bytes(&self, number: u64) -> Option<Bytes> {
        let shared = &*self.shared;
        if number >= self.height() {
            return None;
        }
        if self.read_syncs(number) {
            return None;
        }
        let recent = shared.recent.lock();
        let oldest = recent.front()?.0;
        let (found, bytes) = recent.get(usize::try_from(number.checked_sub(oldest)?).ok()?)?;
        (*found == number).then(|| bytes.clone())
    }

    /// [`BlockStore::block_bytes`] for an async task: a recent block
    /// straight from memory ([`BlockStore::recent_block_bytes`]), any other
    /// read on a blocking thread, since it may read the disk or, under
    /// group commit, sync it first.
    pub async fn block_bytes_from_task(self: &Arc<Self>, number: u64) -> Result<Option<Bytes>> {
        if let Some(bytes) = self.recent_block_bytes(number) {
            return Ok(Some(bytes));
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.block_bytes(number))
            .await
            .map_err(|e| Error::ReadTask {
                reason: e.to_string(),
            })?
    }

    /// [`BlockStore::block_bytes_from_task`], decoded.
    pub async fn block_from_task(self: &Arc<Self>, number: u64) -> Result<Option<Block>> {
        match self.block_bytes_from_task(number).await? {
            Some(bytes) => self.shared.decode_block(number, bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Block `number`, decoded; `None` at or beyond the height. Under group
    /// commit, syncs first if the block is not yet durable.
    pub fn block(&self, number: u64) -> Result<Option<Block>> {
        match self.block_bytes(number)? {
            Some(bytes) => self.shared.decode_block(number, bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Reads the blocks from `start` onward, up to whatever the height is
    /// when the iterator reaches it (see [`Blocks`]).
    pub fn blocks_from(&self, start: u64) -> Blocks<'_> {
        Blocks {
            store: self,
            next: start,
        }
    }

    /// Where the transaction `tx_id` is recorded, or `None` if no stored
    /// block carries it.
    ///
    /// Only the *first* occurrence of a TxID is indexed: the lowest block,
    /// and within it the lowest position. A later envelope with the same
    /// TxID (which the committer marks DUPLICATE_TXID) is stored in its
    /// block but not indexed, so lookups keep answering with the original
    /// transaction, as Fabric's index does. Transactions of every
    /// validation code are indexed, so a client can learn why its
    /// transaction failed; envelopes whose channel header does not decode,
    /// or whose TxID is empty, are not.
    ///
    /// Under group commit, syncs first if the block is not yet durable.
    pub fn tx_location(&self, tx_id: &str) -> Result<Option<TxLocation>> {
        let location = self.tx_location_unsynced(tx_id)?;
        if let Some(location) = location {
            self.shared.ensure_durable(location.block_number + 1)?;
        }
        Ok(location)
    }

    /// [`BlockStore::tx_location`] without the sync: under group commit
    /// the block found may not be durable yet ([`BlockStore::read_syncs`]
    /// says). It never waits for the disk to sync, so an async task may
    /// call it, as the endorser's duplicate check does.
    pub fn tx_location_unsynced(&self, tx_id: &str) -> Result<Option<TxLocation>> {
        self.shared.index_lookup(tx_id)
    }

    /// Whether reading block `number` ([`BlockStore::block_bytes`],
    /// [`BlockStore::tx_location`]) syncs the disk first: under group
    /// commit, when the block is stored but not yet durable.
    pub fn read_syncs(&self, number: u64) -> bool {
        matches!(self.shared.durability, Durability::GroupCommit { .. })
            && number < self.height()
            && self.durable_height() <= number
    }

    /// The block holding the (first) transaction `tx_id`.
    pub fn block_by_tx_id(&self, tx_id: &str) -> Result<Option<Block>> {
        match self.tx_location(tx_id)? {
            Some(location) => self.block(location.block_number),
            None => Ok(None),
        }
    }

    /// The validation code (`protos.TxValidationCode` as a byte) of the
    /// transaction `tx_id`, from its block's TRANSACTIONS_FILTER; `None` if
    /// the TxID is unknown or its block carries no filter entry for it
    /// (orderer blocks carry none).
    pub fn tx_validation_code(&self, tx_id: &str) -> Result<Option<u8>> {
        Ok(self
            .tx_location(tx_id)?
            .and_then(|location| location.validation_code))
    }

    /// Whether a stored block carries `tx_id`: the committer's duplicate
    /// TxID check. Unlike the other reads it never syncs, since it reports
    /// nothing to clients.
    pub fn contains_tx_id(&self, tx_id: &str) -> Result<bool> {
        Ok(self.shared.index_lookup(tx_id)?.is_some())
    }

    /// Those of `tx_ids` a stored block carries: [`BlockStore::contains_tx_id`]
    /// for a whole block's transactions in one batched lookup.
    pub fn stored_tx_ids<'a>(&self, tx_ids: &[&'a str]) -> Result<HashSet<&'a str>> {
        let locations = self.shared.index_lookups(tx_ids)?;
        Ok(tx_ids
            .iter()
            .zip(locations)
            .filter_map(|(tx_id, location)| location.map(|_| *tx_id))
            .collect())
    }

    /// Keeps `private`, the serialized private writes of transaction
    /// `tx_id` endorsed when the chain was `height` blocks high, until the
    /// block holding the transaction settles it or the chain outgrows it
    /// (see `private.rs`). Not synced: a process crash keeps it.
    pub fn keep_transient(&self, tx_id: &str, height: u64, private: &[u8]) -> Result<()> {
        let shared = &*self.shared;
        let transient = shared.cf(CF_TRANSIENT)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(
            transient,
            crate::private::entry_key(tx_id),
            encode_entry(height, private),
        );
        batch.put_cf(transient, by_height_key(height, tx_id), []);
        shared
            .db
            .write(batch)
            .map_err(|source| Error::PrivateData { source })
    }

    /// The private writes kept for `tx_id` by [`BlockStore::keep_transient`],
    /// if they are still there.
    pub fn transient(&self, tx_id: &str) -> Result<Option<Bytes>> {
        let shared = &*self.shared;
        let stored = shared
            .db
            .get_pinned_cf(shared.cf(CF_TRANSIENT)?, crate::private::entry_key(tx_id))
            .map_err(|source| Error::PrivateData { source })?;
        Ok(stored
            .as_deref()
            .and_then(entry_writes)
            .map(Bytes::copy_from_slice))
    }

    /// The private writes transaction `tx_index` of block `number`
    /// committed, serialized, if it committed any on this peer.
    pub fn private_data_of(&self, number: u64, tx_index: u64) -> Result<Option<Bytes>> {
        let shared = &*self.shared;
        let stored = shared
            .db
            .get_pinned_cf(shared.cf(CF_PRIVATE)?, private_key(number, tx_index))
            .map_err(|source| Error::PrivateData { source })?;
        Ok(stored.as_deref().map(Bytes::copy_from_slice))
    }

    /// The private data block `number` committed: (transaction index,
    /// serialized private writes), in transaction order.
    pub fn private_data(&self, number: u64) -> Result<Vec<(u64, Bytes)>> {
        let shared = &*self.shared;
        let from = private_key(number, 0);
        let until = private_key(number.saturating_add(1), 0);
        let mut found = Vec::new();
        let entries = shared.db.iterator_cf(
            shared.cf(CF_PRIVATE)?,
            IteratorMode::From(&from, Direction::Forward),
        );
        for entry in entries {
            let (key, value) = entry.map_err(|source| Error::PrivateData { source })?;
            if key.as_ref() >= until.as_slice() {
                break;
            }
            let tx_index = tx_index_of(&key)
                .ok_or_else(|| shared.corrupt(number, "a private data key is malformed".into()))?;
            found.push((tx_index, Bytes::copy_from_slice(&value)));
        }
        Ok(found)
    }

    /// At most `limit` entries of private data missing on this peer (see
    /// `private.rs`), in chain order, from the first after `after` (from
    /// the oldest without one).
    pub fn missing_private_data(
        &self,
        after: Option<&MissingPrivateData>,
        limit: usize,
    ) -> Result<Vec<MissingPrivateData>> {
        let shared = &*self.shared;
        let mut start = after.map(MissingPrivateData::key).unwrap_or_default();
        if after.is_some() {
            // The smallest key above `after`'s.
            start.push(0);
        }
        let entries = shared.db.iterator_cf(
            shared.cf(CF_PRIVATE_MISSING)?,
            IteratorMode::From(&start, Direction::Forward),
        );
        let mut found = Vec::new();
        for entry in entries.take(limit) {
            let (key, tx_id) = entry.map_err(|source| Error::PrivateData { source })?;
            let missing = MissingPrivateData::from_entry(&key, &tx_id).ok_or_else(|| {
                let block = key.get(..8).and_then(|bytes| bytes.try_into().ok());
                shared.corrupt(
                    block.map_or(0, u64::from_be_bytes),
                    "a missing private data entry is malformed".into(),
                )
            })?;
            found.push(missing);
        }
        Ok(found)
    }

    /// The private values block `number`'s purges removed on this peer.
    pub fn purged_values(&self, number: u64) -> Result<Vec<PurgedValue>> {
        let shared = &*self.shared;
        shared
            .keys_with_prefix(CF_PRIVATE_PURGED, &number.to_be_bytes())?
            .iter()
            .map(|record| {
                PurgedValue::from_record(record).ok_or_else(|| {
                    shared.corrupt(number, "a purged private value record is malformed".into())
                })
            })
            .collect()
    }

    /// The committed copies block `completing` completed with data found
    /// later: (block, transaction index) of each.
    pub fn reconciled_with(&self, completing: u64) -> Result<Vec<(u64, u64)>> {
        let shared = &*self.shared;
        shared
            .keys_with_prefix(CF_PRIVATE_RECONCILED, &completing.to_be_bytes())?
            .iter()
            .map(|key| {
                key.get(8..)
                    .and_then(|rest| {
                        let block: [u8; 8] = rest.get(..8)?.try_into().ok()?;
                        Some((u64::from_be_bytes(block), tx_index_of(rest)?))
                    })
                    .ok_or_else(|| {
                        shared.corrupt(completing, "a completed-copy record is malformed".into())
                    })
            })
            .collect()
    }

    /// Where committed private data holds `key`: the (block, transaction
    /// index) of every committed write set the index names for it, in
    /// chain order (see `private.rs`: entries of truncated blocks may
    /// remain).
    pub fn private_key_writes(&self, key: &PrivateKeyRef) -> Result<Vec<(u64, u64)>> {
        let shared = &*self.shared;
        let prefix = key.index_prefix();
        shared
            .keys_with_prefix(CF_PRIVATE_KEYS, &prefix)?
            .iter()
            .map(|entry| {
                crate::private::indexed_position(&prefix, entry).ok_or_else(|| {
                    shared.corrupt(0, "an entry of the private key index is malformed".into())
                })
            })
            .collect()
    }

    /// Every committed write of `key` in `namespace`, newest first, at
    /// most `limit` of them: each with the writing transaction's TxID and
    /// timestamp, the value written and whether it was a delete (Fabric's
    /// `GetHistoryForKey`). Only blocks below the height count.
    /// [`Error::NoHistory`] if the store keeps no history index.
    pub fn history(
        &self,
        namespace: &str,
        key: &str,
        limit: usize,
    ) -> Result<Vec<KeyModification>> {
        let shared = &*self.shared;
        if !shared.history {
            return Err(Error::NoHistory {
                path: shared.path.clone(),
            });
        }
        let height = self.height();
        let prefix = key_prefix(namespace, key);
        let mut last = prefix.clone();
        last.extend_from_slice(&[0xff; 16]);
        let entries = shared.db.iterator_cf(
            shared.cf(CF_HISTORY)?,
            IteratorMode::From(&last, Direction::Reverse),
        );
        let mut positions = Vec::new();
        for entry in entries {
            let (entry, _) = entry.map_err(|source| Error::ReadHistory { source })?;
            if !entry.starts_with(&prefix) || positions.len() == limit {
                break;
            }
            match position_of(&entry) {
                Some((block, tx)) if block < height => positions.push((block, tx)),
                _ => {}
            }
        }
        let mut found = Vec::with_capacity(positions.len());
        let mut current: Option<(u64, Block)> = None;
        for (number, tx_index) in positions {
            if current.as_ref().is_none_or(|(held, _)| *held != number) {
                let block = self.block(number)?.ok_or(Error::MissingBlock {
                    block_number: number,
                })?;
                current = Some((number, block));
            }
            if let Some((_, block)) = &current
                && let Some(modification) = modification(block, tx_index, namespace, key)
            {
                found.push(modification);
            }
        }
        Ok(found)
    }

    /// Stops the flusher and syncs what is not yet durable, reporting a
    /// failed sync (dropping the store does the same, silently).
    pub fn close(mut self) -> Result<()> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<()> {
        if let Some(flusher) = self.flusher.take() {
            self.shared.flush_state.lock().shutdown = true;
            self.shared.flush_wake.notify_all();
            // A panicking flusher has nothing left to sync for us; the
            // final sync below covers its work either way.
            let _ = flusher.join();
        }
        self.shared.sync_through(self.height())
    }
}

impl Drop for BlockStore {
    fn drop(&mut self) {
        // Nowhere to report a failure from drop; `close` reports it.
        let _ = self.shut_down();
    }
}

impl fmt::Debug for BlockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockStore")
            .field("path", &self.shared.path)
            .field("durability", &self.shared.durability)
            .field("height", &self.height())
            .field("durable_height", &self.durable_height())
            .finish_non_exhaustive()
    }
}

/// Blocks from a starting number onward, as raw bytes with their numbers.
///
/// Each `next` reads the block at the current height, so blocks appended
/// while iterating are included; `None` means the iterator has caught up
/// (call `next` again after the height grows, or start a new one at
/// [`Blocks::next_number`]). Under group commit, reaching a block that is
/// not yet durable syncs first, so nothing served can be lost.
#[derive(Debug)]
pub struct Blocks<'a> {
    store: &'a BlockStore,
    next: u64,
}

impl Blocks<'_> {
    /// The number of the block the next call to `next` returns.
    pub fn next_number(&self) -> u64 {
        self.next
    }
}

impl Iterator for Blocks<'_> {
    type Item = Result<(u64, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.store.block_bytes(self.next) {
            Ok(Some(bytes)) => {
                let number = self.next;
                self.next += 1;
                Some(Ok((number, bytes)))
            }
            Ok(None) => None,
            Err(error) => Some(Err(error)),
        }
    }
}

impl Shared {
    fn cf(&self, name: &'static str) -> Result<&ColumnFamily> {
        column_family(&self.db, &self.path, name)
    }

    /// The batch that appends `block` (serialized: `encoded`) as number
    /// `number`; with history on, its history `writes` (decoded from the
    /// block when the caller gave none).
    fn batch_for(
        &self,
        block: &Block,
        encoded: &[u8],
        number: u64,
        header_hash: Hash,
        writes: Option<HistoryWrites>,
    ) -> Result<WriteBatch> {
        let blocks = self.cf(CF_BLOCKS)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(blocks, block_key(number), encoded);
        batch.put(
            TAIL_KEY,
            encode_tail(&TailRecord {
                height: number + 1,
                header_hash,
            }),
        );
        if self.index_tx_ids {
            self.index_block(block, number, &mut batch)?;
        }
        if self.history {
            let history = self.cf(CF_HISTORY)?;
            let writes = writes.unwrap_or_else(|| indexed_writes(block));
            for write in &writes.0 {
                batch.put_cf(history, entry_key(write, number), []);
            }
            batch.put(HISTORY_HEIGHT_KEY, encode_height(number + 1));
        }
        Ok(batch)
    }

    /// Adds to `batch` (appending block `number`) the block's committed
    /// private data, the deletion of the transient entries it settles, and
    /// at heights that are multiples of [`TRANSIENT_RETENTION_BLOCKS`] the
    /// purge of transient entries kept more than that many blocks ago.
    fn add_private(
        &self,
        batch: &mut WriteBatch,
        number: u64,
        private: &BlockPrivateData,
    ) -> Result<()> {
        let committed = self.cf(CF_PRIVATE)?;
        for (tx_index, writes) in &private.committed {
            batch.put_cf(committed, private_key(number, *tx_index), writes);
        }
        for (block, tx_index, left) in &private.rewritten {
            match left {
                Some(writes) => batch.put_cf(committed, private_key(*block, *tx_index), writes),
                None => batch.delete_cf(committed, private_key(*block, *tx_index)),
            }
        }
        let keys = self.cf(CF_PRIVATE_KEYS)?;
        for (block, tx_index, purged) in &private.purged_keys {
            batch.delete_range_cf(
                keys,
                purged.index_key(0, 0),
                purged.index_key(*block, *tx_index),
            );
        }
        let purged_values = self.cf(CF_PRIVATE_PURGED)?;
        for value in &private.purged_values {
            batch.put_cf(purged_values, value.record_key(), []);
        }
        for (block, tx_index, key) in &private.key_writes {
            batch.put_cf(keys, key.index_key(*block, *tx_index), []);
        }
        let missing = self.cf(CF_PRIVATE_MISSING)?;
        for entry in &private.missing {
            batch.put_cf(missing, entry.key(), entry.tx_id.as_bytes());
        }
        let reconciled = self.cf(CF_PRIVATE_RECONCILED)?;
        for entry in &private.abandoned {
            batch.delete_cf(missing, entry.key());
        }
        for entry in &private.reconciled {
            batch.delete_cf(missing, entry.key());
            batch.put_cf(
                reconciled,
                reconciled_key(number, entry.block, entry.tx_index),
                [],
            );
        }
        let transient = self.cf(CF_TRANSIENT)?;
        for tx_id in &private.settled {
            batch.delete_cf(transient, crate::private::entry_key(tx_id));
        }
        if number > 0 && number.is_multiple_of(TRANSIENT_RETENTION_BLOCKS) {
            let below = by_height_start(number - TRANSIENT_RETENTION_BLOCKS);
            let entries = self.db.iterator_cf(
                transient,
                IteratorMode::From(&by_height_start(0), Direction::Forward),
            );
            for entry in entries {
                let (key, _) = entry.map_err(|source| Error::PrivateData { source })?;
                if key.as_ref() >= below.as_slice() {
                    break;
                }
                if let Some(tx_id) = tx_id_of_by_height(&key) {
                    batch.delete_cf(transient, crate::private::entry_key(tx_id));
                }
                batch.delete_cf(transient, key);
            }
        }
        Ok(())
    }

    /// The height below which every block's writes are in the history
    /// index (0 if the index never ran).
    fn history_height(&self) -> Result<u64> {
        let stored = self
            .db
            .get(HISTORY_HEIGHT_KEY)
            .map_err(|source| Error::ReadHistory { source })?;
        Ok(stored.as_deref().and_then(decode_height).unwrap_or(0))
    }

    /// Indexes the history of the blocks from the index's height up to
    /// `height` (a store that appended them with history off), a
    /// thousand blocks to a synced batch.
    fn index_history_to(&self, height: u64) -> Result<()> {
        const BLOCKS_PER_BATCH: u64 = 1000;
        let history = self.cf(CF_HISTORY)?;
        let mut next = self.history_height()?;
        while next < height {
            let end = height.min(next + BLOCKS_PER_BATCH);
            let mut batch = WriteBatch::default();
            for number in next..end {
                let block = self.decode_block(number, self.read_block_bytes(number)?)?;
                for write in &indexed_writes(&block).0 {
                    batch.put_cf(history, entry_key(write, number), []);
                }
            }
            batch.put(HISTORY_HEIGHT_KEY, encode_height(end));
            let mut options = WriteOptions::default();
            options.set_sync(true);
            self.db
                .write_opt(batch, &options)
                .map_err(|source| Error::Write {
                    block_number: end - 1,
                    source,
                })?;
            next = end;
        }
        Ok(())
    }

    /// Adds the TxID index entries of block `number` to `batch`.
    fn index_block(&self, block: &Block, number: u64, batch: &mut WriteBatch) -> Result<()> {
        let tx_ids = self.cf(CF_TX_IDS)?;
        let envelopes = block.data.as_ref().map_or(&[][..], |data| &data.data[..]);
        let filter =
            weft_protos::block::metadata_slot(block, BlockMetadataIndex::TransactionsFilter);

        // First occurrences within this block...
        let ids: Vec<Option<String>> = envelopes.iter().map(tx_id_of).collect();
        let mut seen = HashSet::with_capacity(ids.len());
        let candidates: Vec<(usize, &str)> = ids
            .iter()
            .enumerate()
            .filter_map(|(index, id)| Some((index, id.as_deref()?)))
            .filter(|(_, id)| seen.insert(*id))
            .collect();
        // ... and not in any earlier block.
        let existing = self.db.batched_multi_get_cf(
            tx_ids,
            candidates.iter().map(|(_, id)| id.as_bytes()),
            false,
        );

        for (&(index, id), found) in candidates.iter().zip(existing) {
            let found = found.map_err(|source| Error::ReadTx {
                tx_id: id.to_owned(),
                source,
            })?;
            if found.is_some() {
                continue;
            }
            let location = TxLocation {
                block_number: number,
                tx_index: index as u64,
                validation_code: filter.and_then(|filter| filter.get(index).copied()),
            };
            batch.put_cf(tx_ids, id.as_bytes(), encode_tx_location(&location));
        }
        Ok(())
    }

    /// Adds to `batch` the deletion of the TxID index entries that point
    /// at `block` or any later one (at or above `from`).
    fn unindex_block(&self, block: &Block, from: u64, batch: &mut WriteBatch) -> Result<()> {
        let tx_ids = self.cf(CF_TX_IDS)?;
        let envelopes = block.data.as_ref().map_or(&[][..], |data| &data.data[..]);
        for tx_id in envelopes.iter().filter_map(tx_id_of) {
            let value =
                self.db
                    .get_cf(tx_ids, tx_id.as_bytes())
                    .map_err(|source| Error::ReadTx {
                        tx_id: tx_id.clone(),
                        source,
                    })?;
            let indexed_here = value
                .as_deref()
                .and_then(decode_tx_location)
                .is_some_and(|location| location.block_number >= from);
            if indexed_here {
                batch.delete_cf(tx_ids, tx_id.as_bytes());
            }
        }
        Ok(())
    }

    fn read_block_bytes(&self, number: u64) -> Result<Bytes> {
        match read_block_bytes(&self.db, &self.path, number)? {
            Some(bytes) => Ok(bytes),
            None => Err(self.corrupt(number, "missing below the height".into())),
        }
    }

    /// Decodes a stored block and checks it is the block of its key.
    fn decode_block(&self, number: u64, bytes: Bytes) -> Result<Block> {
        let block = Block::decode(bytes)
            .map_err(|error| self.corrupt(number, format!("does not decode: {error}")))?;
        let found = block.header.as_ref().map(|header| header.number);
        if found != Some(number) {
            return Err(self.corrupt(number, format!("stored block has number {found:?}")));
        }
        Ok(block)
    }

    /// The tx index entry of `tx_id`, if its block is visible.
    fn index_lookup(&self, tx_id: &str) -> Result<Option<TxLocation>> {
        let tx_ids = self.tx_id_index()?;
        let height = self.height.load(Ordering::Acquire);
        let value = self
            .db
            .get_pinned_cf(tx_ids, tx_id.as_bytes())
            .map_err(|source| Error::ReadTx {
                tx_id: tx_id.to_owned(),
                source,
            })?;
        self.committed_location(tx_id, value.as_deref(), height)
    }

    /// [`Shared::index_lookup`] of each of `tx_ids`, in one batched read.
    fn index_lookups(&self, tx_ids: &[&str]) -> Result<Vec<Option<TxLocation>>> {
        let index = self.tx_id_index()?;
        let height = self.height.load(Ordering::Acquire);
        let values =
            self.db
                .batched_multi_get_cf(index, tx_ids.iter().map(|tx_id| tx_id.as_bytes()), false);
        tx_ids
            .iter()
            .zip(values)
            .map(|(tx_id, value)| {
                let value = value.map_err(|source| Error::ReadTx {
                    tx_id: (*tx_id).to_owned(),
                    source,
                })?;
                self.committed_location(tx_id, value.as_deref(), height)
            })
            .collect()
    }

    fn tx_id_index(&self) -> Result<&ColumnFamily> {
        if !self.index_tx_ids {
            return Err(Error::NotIndexed {
                path: self.path.clone(),
            });
        }
        self.cf(CF_TX_IDS)
    }

    /// The location an index entry of `tx_id` records, if its block is
    /// below `height`: an append's entries are readable a moment before its
    /// height is published, and the block is not committed until then.
    fn committed_location(
        &self,
        tx_id: &str,
        value: Option<&[u8]>,
        height: u64,
    ) -> Result<Option<TxLocation>> {
        let Some(value) = value else {
            return Ok(None);
        };
        let location = decode_tx_location(value).ok_or_else(|| Error::CorruptIndex {
            path: self.path.clone(),
            tx_id: tx_id.to_owned(),
        })?;
        Ok((location.block_number < height).then_some(location))
    }

    /// The keys of column family `family` that start with `prefix`, in
    /// order.
    fn keys_with_prefix(&self, family: &'static str, prefix: &[u8]) -> Result<Vec<Box<[u8]>>> {
        let entries = self.db.iterator_cf(
            self.cf(family)?,
            IteratorMode::From(prefix, Direction::Forward),
        );
        let mut keys = Vec::new();
        for entry in entries {
            let (key, _) = entry.map_err(|source| Error::PrivateData { source })?;
            if !key.starts_with(prefix) {
                break;
            }
            keys.push(key);
        }
        Ok(keys)
    }

    fn corrupt(&self, block_number: u64, reason: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            block_number,
            reason,
        }
    }

    fn check_not_poisoned(&self) -> Result<()> {
        match self.poisoned.get() {
            Some(reason) => Err(Error::Poisoned {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn poison(&self, reason: String) {
        // The first failure is the one worth reporting.
        let _ = self.poisoned.set(reason);
    }

    /// Keeps block `number`, just appended, among the recent blocks.
    fn remember(&self, number: u64, encoded: Bytes) {
        let mut recent = self.recent.lock();
        // Contiguous numbers only: after a truncation, or a block too large
        // to keep, start again from this one.
        if recent.back().is_some_and(|(last, _)| last + 1 != number) {
            recent.clear();
        }
        if encoded.len() > RECENT_BLOCK_BYTES_MAX {
            recent.clear();
            return;
        }
        if recent.len() == RECENT_BLOCKS {
            recent.pop_front();
        }
        recent.push_back((number, encoded));
    }

    /// Under group commit, makes blocks below `height` durable before a
    /// reader is served them.
    fn ensure_durable(&self, height: u64) -> Result<()> {
        match self.durability {
            Durability::GroupCommit { .. } => self.sync_through(height),
            Durability::EveryBlock | Durability::None => Ok(()),
        }
    }

    /// Makes blocks below `height` durable, syncing the WAL if they are not
    /// yet. One sync covers every block appended before it started.
    fn sync_through(&self, height: u64) -> Result<()> {
        if self.durable_height.load(Ordering::Acquire) >= height {
            return Ok(());
        }
        let _sync = self.sync_lock.lock();
        if self.durable_height.load(Ordering::Acquire) >= height {
            // Another reader's (or the flusher's) sync covered it.
            return Ok(());
        }
        self.check_not_poisoned()?;
        // Every block below this height has been written to the WAL.
        let target = self.height.load(Ordering::Acquire);
        if let Err(source) = self.db.flush_wal(true) {
            self.poison(format!("WAL sync below height {target}: {source}"));
            return Err(Error::Sync {
                height: target,
                source,
            });
        }
        self.mark_durable(target);
        Ok(())
    }

    fn mark_durable(&self, height: u64) {
        self.durable_height.fetch_max(height, Ordering::AcqRel);
        self.durable_tx.send_if_modified(|durable| {
            let advanced = height > *durable;
            if advanced {
                *durable = height;
            }
            advanced
        });
    }

    fn pending_blocks(&self) -> u64 {
        let height = self.height.load(Ordering::Acquire);
        height.saturating_sub(self.durable_height.load(Ordering::Acquire))
    }

    /// Tells the flusher a block was appended unsynced.
    fn note_pending(&self, blocks_max: u64) {
        let mut state = self.flush_state.lock();
        let first = state.first_pending_at.is_none();
        if first {
            state.first_pending_at = Some(Instant::now());
        }
        if first || self.pending_blocks() >= blocks_max {
            self.flush_wake.notify_one();
        }
    }
}

/// The group-commit flusher: syncs when `blocks_max` blocks are pending or
/// `interval` has passed since the first pending one; exits on shutdown
/// (the store's drop syncs the rest) or after a failed sync (the store is
/// poisoned then).
fn run_flusher(shared: &Shared, blocks_max: u64, interval: Duration) {
    loop {
        {
            let mut state = shared.flush_state.lock();
            loop {
                if state.shutdown {
                    return;
                }
                let pending = shared.pending_blocks();
                if pending == 0 {
                    state.first_pending_at = None;
                    shared.flush_wake.wait(&mut state);
                    continue;
                }
                let first = *state.first_pending_at.get_or_insert_with(Instant::now);
                if pending >= blocks_max {
                    break;
                }
                match first.checked_add(interval) {
                    Some(deadline) if Instant::now() >= deadline => break,
                    Some(deadline) => {
                        shared.flush_wake.wait_until(&mut state, deadline);
                    }
                    // An interval too long to represent never expires.
                    None => shared.flush_wake.wait(&mut state),
                }
            }
            // Blocks appended from here on start a new interval.
            state.first_pending_at = None;
        }
        let height = shared.height.load(Ordering::Acquire);
        if shared.sync_through(height).is_err() {
            return;
        }
    }
}

/// Whether appending a block hashes its data to check its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DataHash {
    Check,
    /// The caller computed or checked it from the same bytes.
    CheckedByCaller,
}

/// The checks `append` makes before writing anything.
fn check_links(
    header: &BlockHeader,
    block: &Block,
    tail: &Tail,
    data_hash: DataHash,
) -> Result<()> {
    let number = header.number;
    if number != tail.height {
        return Err(Error::UnexpectedNumber {
            expected: tail.height,
            found: number,
        });
    }
    if let Some(expected) = tail.header_hash
        && header.previous_hash.as_ref() != expected.as_slice()
    {
        return Err(Error::PreviousHashMismatch {
            block_number: number,
            expected,
            found: header.previous_hash.clone(),
        });
    }
    if data_hash == DataHash::CheckedByCaller {
        return Ok(());
    }
    let envelopes = block.data.as_ref().map_or(&[][..], |data| &data.data[..]);
    let computed = data_hash_of(envelopes.iter().map(|envelope| envelope.as_ref()));
    if header.data_hash.as_ref() != computed.as_slice() {
        return Err(Error::DataHashMismatch {
            block_number: number,
            in_header: header.data_hash.clone(),
            computed,
        });
    }
    Ok(())
}

/// The TxID in an envelope's channel header, if it decodes and is not
/// empty. Decodes only the layers down to the channel header.
pub(crate) fn tx_id_of(envelope: &Bytes) -> Option<String> {
    let channel_header = weft_protos::block::channel_header_of(envelope.clone())?;
    Some(channel_header.tx_id).filter(|tx_id| !tx_id.is_empty())
}

fn open_db(path: &Path) -> Result<DB> {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    options.set_compression_type(DBCompressionType::Lz4);
    // RocksDB's info log, not data: keep a few files.
    options.set_keep_log_file_num(4);
    // Blocks are synced (every block, or every stream checkpoint). A
    // write-ahead log that grows makes each fdatasync write the file's
    // inode as well (its size changed); a recycled log is overwritten
    // within its size, so a sync writes the data alone. A log is recycled
    // once every family holding writes in it has flushed, which the total
    // size below forces every 16 MiB of writes (up to 24 MiB, depending on
    // the path, so that nodes holding the same chain flush apart).
    options.set_recycle_log_file_num(2);
    options.set_max_total_wal_size(crate::staggered(WAL_BYTES_MAX, path));
    // Blocks written unsynced (a Raft orderer's, a stream channel's between
    // checkpoints) are handed to the disk in the background as they
    // accumulate, so that the sync that makes them durable finds little
    // left to write: a Raft orderer syncs before compacting its log, on the
    // thread that orders.
    options.set_wal_bytes_per_sync(WAL_BYTES_PER_SYNC);
    crate::pace_background_writes(&mut options);

    // Blocks carry repeated PEM certificates, which LZ4 shrinks; keys are
    // appended in order, so compactions mostly move files.
    let mut blocks = Options::default();
    blocks.set_compression_type(DBCompressionType::Lz4);
    // TxIDs are random: a bloom filter answers "not present" (the common
    // case of the duplicate check) without reading data blocks, and one
    // over the memtable's whole keys without searching its skip list
    // (each proposal and each committed transaction asks once).
    let mut tx_ids = Options::default();
    tx_ids.set_compression_type(DBCompressionType::Lz4);
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    tx_ids.set_block_based_table_factory(&table);
    tx_ids.set_memtable_prefix_bloom_ratio(0.05);
    tx_ids.set_memtable_whole_key_filtering(true);

    // History entries are written key by key, all over the key space,
    // and read by prefix.
    let mut history = Options::default();
    history.set_compression_type(DBCompressionType::Lz4);

    let families = [
        ColumnFamilyDescriptor::new(CF_BLOCKS, blocks),
        ColumnFamilyDescriptor::new(CF_TX_IDS, tx_ids),
        ColumnFamilyDescriptor::new(CF_HISTORY, history),
        ColumnFamilyDescriptor::new(CF_PRIVATE, Options::default()),
        ColumnFamilyDescriptor::new(CF_TRANSIENT, Options::default()),
        ColumnFamilyDescriptor::new(CF_PRIVATE_KEYS, Options::default()),
        ColumnFamilyDescriptor::new(CF_PRIVATE_MISSING, Options::default()),
        ColumnFamilyDescriptor::new(CF_PRIVATE_RECONCILED, Options::default()),
        ColumnFamilyDescriptor::new(CF_PRIVATE_PURGED, Options::default()),
    ];
    DB::open_cf_descriptors(&options, path, families).map_err(|source| Error::Open {
        path: path.to_owned(),
        source,
    })
}

fn column_family<'a>(db: &'a DB, path: &Path, name: &'static str) -> Result<&'a ColumnFamily> {
    db.cf_handle(name).ok_or_else(|| Error::CorruptTail {
        path: path.to_owned(),
        reason: format!("column family {name} is missing"),
    })
}

fn read_tail(db: &DB, path: &Path) -> Result<Option<TailRecord>> {
    let value = db.get(TAIL_KEY).map_err(|source| Error::Open {
        path: path.to_owned(),
        source,
    })?;
    value
        .map(|bytes| {
            decode_tail(&bytes).map_err(|reason| Error::CorruptTail {
                path: path.to_owned(),
                reason,
            })
        })
        .transpose()
}

fn read_block_bytes(db: &DB, path: &Path, number: u64) -> Result<Option<Bytes>> {
    let blocks = column_family(db, path, CF_BLOCKS)?;
    let value = db
        .get_cf(blocks, block_key(number))
        .map_err(|source| Error::ReadBlock {
            block_number: number,
            source,
        })?;
    Ok(value.map(Bytes::from))
}

/// The number of the first stored block at or after `number`.
fn first_block_at_or_after(db: &DB, path: &Path, number: u64) -> Result<Option<u64>> {
    let blocks = column_family(db, path, CF_BLOCKS)?;
    let from = block_key(number);
    let mut iterator = db.iterator_cf(blocks, IteratorMode::From(&from, Direction::Forward));
    match iterator.next() {
        None => Ok(None),
        Some(Err(source)) => Err(Error::ReadBlock {
            block_number: number,
            source,
        }),
        Some(Ok((key, _))) => match decode_block_key(&key) {
            Some(found) => Ok(Some(found)),
            None => Err(Error::CorruptTail {
                path: path.to_owned(),
                reason: format!("block key of {} bytes", key.len()),
            }),
        },
    }
}

/// The checks of [`BlockStore::open`], on the tail and the last
/// `depth` blocks.
fn verify_tail(db: &DB, path: &Path, tail: Option<TailRecord>, depth: u32) -> Result<()> {
    let corrupt = |block_number: u64, reason: String| Error::Corrupt {
        path: path.to_owned(),
        block_number,
        reason,
    };
    let Some(tail) = tail else {
        return match first_block_at_or_after(db, path, 0)? {
            Some(number) => Err(Error::CorruptTail {
                path: path.to_owned(),
                reason: format!("absent, but block {number} is stored"),
            }),
            None => Ok(()),
        };
    };
    if let Some(number) = first_block_at_or_after(db, path, tail.height)? {
        return Err(corrupt(
            number,
            format!("stored beyond the tail record's height {}", tail.height),
        ));
    }

    let last = tail.height - 1;
    let first = tail.height.saturating_sub(u64::from(depth.max(1)));
    // Walking down from the tail: the header of the block above `number`.
    let mut above: Option<BlockHeader> = None;
    for number in (first..=last).rev() {
        let bytes = read_block_bytes(db, path, number)?
            .ok_or_else(|| corrupt(number, "missing below the height".into()))?;
        let block = Block::decode(bytes)
            .map_err(|error| corrupt(number, format!("does not decode: {error}")))?;
        let header = block
            .header
            .clone()
            .ok_or_else(|| corrupt(number, "has no header".into()))?;
        if header.number != number {
            return Err(corrupt(
                number,
                format!("header says number {}", header.number),
            ));
        }
        let data_hash = block_data_hash(&block.data.unwrap_or_default());
        if header.data_hash.as_ref() != data_hash.as_slice() {
            return Err(corrupt(
                number,
                format!(
                    "data hash {} is not the hash of its data {}",
                    Hex(&header.data_hash),
                    Hex(&data_hash)
                ),
            ));
        }
        let header_hash = block_header_hash(&header);
        if number == last && header_hash != tail.header_hash {
            return Err(corrupt(
                number,
                format!(
                    "header hash {} is not the tail record's {}",
                    Hex(&header_hash),
                    Hex(&tail.header_hash)
                ),
            ));
        }
        if let Some(above) = &above
            && above.previous_hash.as_ref() != header_hash.as_slice()
        {
            return Err(corrupt(
                number + 1,
                format!(
                    "previous hash {} is not block {number}'s header hash {}",
                    Hex(&above.previous_hash),
                    Hex(&header_hash)
                ),
            ));
        }
        above = Some(header);
    }
    Ok(())
}

/// Syncs everything RocksDB recovered, so that what `open` reports is
/// durable: flushes the memtables (RocksDB writes and syncs the SST files
/// and the manifest) and syncs the live WAL. After a process crash the
/// recovered WAL may have been in the page cache only.
fn make_everything_durable(db: &DB, height: u64) -> Result<()> {
    let sync_error = |source| Error::Sync { height, source };
    for name in [
        rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
        CF_BLOCKS,
        CF_TX_IDS,
        CF_HISTORY,
        CF_PRIVATE,
        CF_TRANSIENT,
        CF_PRIVATE_KEYS,
        CF_PRIVATE_MISSING,
        CF_PRIVATE_RECONCILED,
        CF_PRIVATE_PURGED,
    ] {
        if let Some(family) = db.cf_handle(name) {
            db.flush_cf(family).map_err(sync_error)?;
        }
    }
    db.flush_wal(true).map_err(sync_error)
}

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod tests;
