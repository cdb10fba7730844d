//! [`MemoryState`]: the world state held in memory (FastFabric P-I), made
//! durable by checkpoints into RocksDB.
//!
//! Every key has a short *version chain*: the values it took, each tagged
//! with the height of the update that applied it, oldest first. A reader at
//! height `H` sees, for each key, the newest entry applied at or below `H`.
//! [`apply`](VersionedState::apply) (one writer at a time) first appends the
//! whole batch to the chains and only then publishes its height as the
//! committed height, so a reader never sees half a batch, and neither side
//! waits for the other beyond a per-shard lock held for one chain
//! operation.
//!
//! Chains are pruned after each apply: a touched chain keeps only the
//! entries some reader can still see, that is, the newest entry at or
//! below each height a snapshot is pinned at (snapshots register their
//! height for this) and at the committed height. A chain is so never
//! longer than the number of distinct live snapshot heights plus one, and
//! is usually a single entry. A key left with nothing but a delete is
//! dropped from memory altogether.
//!
//! The state keeps its own copy of every value. A value decoded from a
//! block is a slice of the buffer the block arrived in, which holds the
//! whole block and often its neighbours; kept as it is, a key written once
//! and never again would keep that buffer in memory for as long as the key
//! lives, and a peer would grow by the size of its blocks.
//!
//! A key index (a skip list of the same encoded keys) serves range scans in
//! key order; a key enters it before its first version and leaves it only
//! when pruning drops the key, so every readable key is always indexed.
//!
//! [`checkpoint`](VersionedState::checkpoint) writes the keys changed since
//! the previous checkpoint, read at one height, together with that height,
//! in one synced RocksDB batch: after a crash the files hold the old
//! checkpoint or the new one, never a mix. Applies continue while it
//! writes. The block store replays what came after.
//!
//! Stream mode applies transactions before the orderer's checkpoint
//! signature confirms them, and must undo them if it does not:
//! [`MemoryState::rollback_to`], with
//! [`MemoryOptions::keep_versions_since_checkpoint`] so that pruning keeps
//! what a rollback needs.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use crossbeam_skiplist::SkipSet;
use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};
use rocksdb::{IteratorMode, ReadOptions, WriteBatch};

use crate::disk::Disk;
use crate::{
    Error, Height, Result, StateReader, UpdateBatch, VersionedState, VersionedValue, codec,
};

/// How a [`MemoryState`] keeps history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryOptions {
    /// Keep every version applied since the last checkpoint, so that
    /// [`MemoryState::rollback_to`] can return to any height from the last
    /// checkpoint on (stream mode). Memory then grows with the updates
    /// between two checkpoints. Without it, only versions that a reader
    /// can still see are kept.
    pub keep_versions_since_checkpoint: bool,
}

/// A state key, encoded by [`codec::state_key`]; shared by the map, the
/// index and the dirty set.
type Key = Arc<[u8]>;

/// The world state in memory, with versions, snapshots, checkpoints and
/// rollback. See the [module documentation](self).
pub struct MemoryState {
    options: MemoryOptions,
    chains: DashMap<Key, Chain>,
    /// Every key of `chains` (and, during an apply, keys about to enter it)
    /// in key order.
    index: SkipSet<Key>,
    /// The height of the last update whose writes are all in `chains`.
    committed: RwLock<Option<Height>>,
    /// How many readers read at each height.
    pins: Mutex<BTreeMap<Option<Height>, usize>>,
    writer: Mutex<Writer>,
    /// Serializes checkpoints with each other and with rollbacks.
    checkpointing: Mutex<()>,
    /// The height of the checkpoint loaded by [`MemoryState::open`].
    recovered: Option<Height>,
    disk: Disk,
}

/// What only the writer (an apply, a rollback, the end of a checkpoint)
/// touches.
struct Writer {
    /// Keys written since the last checkpoint: what the next one must store.
    dirty: HashSet<Key>,
    last_checkpoint: Option<Height>,
    /// The lowest height from which pruning has kept the state of every
    /// height. The state at a lower height may have lost versions, so it
    /// cannot be rolled back to.
    prune_floor: Option<Height>,
}

/// A key's versions, oldest first.
struct Chain(Vec<Version>);

struct Version {
    /// The height of the update that applied it: what decides visibility.
    applied_at: Height,
    /// The height of the transaction that wrote it: what readers are told.
    version: Height,
    /// `None` for a delete.
    value: Option<Bytes>,
}

impl Chain {
    /// The value a reader at height `at` sees.
    fn visible_at(&self, at: Height) -> Option<VersionedValue> {
        let newest = self.0.iter().rev().find(|entry| entry.applied_at <= at)?;
        Some(VersionedValue {
            value: newest.value.clone()?,
            version: newest.version,
        })
    }

    /// Drops the entries that none of `readers` can see. Returns whether
    /// the key is dead: all that is left is a delete, which every reader
    /// sees, now and later.
    fn prune(&mut self, readers: &Readers) -> bool {
        // Compacts in place, in order; an entry is visible from its own
        // height until the next entry's, which is still in place when the
        // entry is judged.
        let mut kept = 0;
        for index in 0..self.0.len() {
            let until = self.0.get(index + 1).map(|next| next.applied_at);
            if readers.see(self.0[index].applied_at, until) {
                self.0.swap(kept, index);
                kept += 1;
            }
        }
        self.0.truncate(kept);
        matches!(self.0.as_slice(), [] | [Version { value: None, .. }])
    }
}

/// The heights at which readers may read a chain from now on.
struct Readers {
    /// Pinned heights and the committed height, sorted.
    heights: Vec<Height>,
    /// Every height from this one on (rollback targets).
    all_from: Option<Height>,
}

impl Readers {
    /// Whether a reader reads at a height in `[from, until)`, `None` meaning
    /// no upper bound.
    fn see(&self, from: Height, until: Option<Height>) -> bool {
        if let Some(all_from) = self.all_from
            && until.is_none_or(|until| until > all_from)
        {
            return true;
        }
        let first_at_or_above = self.heights.partition_point(|&height| height < from);
        self.heights
            .get(first_at_or_above)
            .is_some_and(|&height| until.is_none_or(|until| height < until))
    }
}

impl MemoryState {
    /// Opens the checkpoint database in `dir` (creating it if missing) and
    /// loads the last checkpoint into memory.
    pub fn open(dir: &Path, options: MemoryOptions) -> Result<Self> {
        let disk = Disk::open(dir)?;
        let recovered = disk.savepoint()?;
        let chains = DashMap::new();
        let index = SkipSet::new();
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_lower_bound(codec::STATE_START);
        read_options.set_iterate_upper_bound(codec::STATE_END);
        for entry in disk.db.iterator_opt(IteratorMode::Start, read_options) {
            let (key, value) = entry.map_err(|error| disk.error(error))?;
            // Every checkpoint batch writes the savepoint with its state.
            let Some(applied_at) = recovered else {
                return Err(Error::Corrupt {
                    what: format!("checkpoint in {}", disk.path),
                    reason: "state entries without a savepoint".to_owned(),
                });
            };
            codec::decode_state_key(&key)?;
            let (version, body) = codec::decode_value(&value)?;
            let header_len = value.len() - body.len();
            let value = Bytes::from(value).slice(header_len..);
            let key = Key::from(key);
            index.insert(key.clone());
            chains.insert(
                key,
                Chain(vec![Version {
                    applied_at,
                    version,
                    value: Some(value),
                }]),
            );
        }
        Ok(Self {
            options,
            chains,
            index,
            committed: RwLock::new(recovered),
            pins: Mutex::new(BTreeMap::new()),
            writer: Mutex::new(Writer {
                dirty: HashSet::new(),
                last_checkpoint: recovered,
                prune_floor: None,
            }),
            checkpointing: Mutex::new(()),
            recovered,
            disk,
        })
    }

    /// Discards every update applied above `height`, making `height` the
    /// state's height; nothing changes if `height` is not below it. Stream
    /// mode calls this when a checkpoint's signature fails.
    ///
    /// Only heights from the last checkpoint on can be restored, and only
    /// with [`MemoryOptions::keep_versions_since_checkpoint`] (otherwise,
    /// only heights no pruning has passed); others fail with
    /// [`Error::RollbackUnavailable`] and change nothing. Snapshots taken
    /// above `height` read discarded state: they see the rollback, and
    /// later updates, take effect.
    pub fn rollback_to(&self, height: Height) -> Result<()> {
        let _checkpointing = self.checkpointing.lock();
        let writer = self.writer.lock();
        if (*self.committed.read()).is_none_or(|committed| height >= committed) {
            return Ok(());
        }
        if let Some(floor) = writer.prune_floor.max(writer.last_checkpoint)
            && height < floor
        {
            return Err(Error::RollbackUnavailable {
                target: height,
                floor,
            });
        }
        // Everything applied above the last checkpoint, and so above
        // `height`, is in a dirty key.
        for key in &writer.dirty {
            let emptied = self.chains.get_mut(key).is_some_and(|mut chain| {
                chain.0.retain(|entry| entry.applied_at <= height);
                chain.0.is_empty()
            });
            if emptied {
                self.chains.remove(key);
                self.index.remove(key);
            }
        }
        *self.committed.write() = Some(height);
        Ok(())
    }

    /// A reader at the committed height; pruning keeps what it reads until
    /// it is dropped.
    fn pin(&self) -> Snapshot<'_> {
        let mut pins = self.pins.lock();
        // Read under the pin lock, so that `readers` either sees this pin
        // or reads the same committed height.
        let height = *self.committed.read();
        *pins.entry(height).or_insert(0) += 1;
        Snapshot {
            state: self,
            height,
        }
    }

    fn unpin(&self, height: Option<Height>) {
        let mut pins = self.pins.lock();
        if let Some(count) = pins.get_mut(&height) {
            *count -= 1;
            if *count == 0 {
                pins.remove(&height);
            }
        }
    }

    /// The heights readers may read at from now on, until the writer lock
    /// (held by the caller) is released; `None` if nothing is committed.
    fn readers(&self, writer: &Writer) -> Option<Readers> {
        let pins = self.pins.lock();
        // The committed height cannot change while the writer lock is
        // held, so a reader pinning after this reads at this height.
        let committed = (*self.committed.read())?;
        // Readers of the empty state (`None`) need no version.
        let mut heights: Vec<Height> = pins.keys().flatten().copied().collect();
        heights.push(committed);
        heights.sort_unstable();
        heights.dedup();
        let all_from = self
            .options
            .keep_versions_since_checkpoint
            .then(|| writer.last_checkpoint.unwrap_or_default());
        Some(Readers { heights, all_from })
    }

    /// Prunes the chains of `keys`; the caller holds the writer lock.
    fn prune<'a>(&self, writer: &mut Writer, keys: impl IntoIterator<Item = &'a Key>) {
        let Some(readers) = self.readers(writer) else {
            return;
        };
        // Versions visible only between reader heights below the committed
        // height go, so older states may no longer be whole.
        let intact_from = readers.all_from.or(*self.committed.read());
        writer.prune_floor = writer.prune_floor.max(intact_from);
        for key in keys {
            let dead = self
                .chains
                .get_mut(key)
                .is_some_and(|mut chain| chain.prune(&readers));
            if dead {
                // A reader that still finds the key in the index finds no
                // chain and skips it, which is right: it is dead to all.
                self.chains.remove(key);
                self.index.remove(key);
            }
        }
    }

    fn read_at(&self, key: &[u8], at: Option<Height>) -> Option<VersionedValue> {
        self.chains.get(key)?.visible_at(at?)
    }

    fn range_at(
        &self,
        namespace: &str,
        start: &str,
        end: &str,
        limit: usize,
        at: Option<Height>,
    ) -> Result<Vec<(String, VersionedValue)>> {
        let mut found = Vec::new();
        if limit == 0 || (!end.is_empty() && start >= end) {
            return Ok(found);
        }
        let range = codec::namespace_range(namespace, start, end);
        let upper = range
            .upper
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Excluded);
        let bounds = (Bound::Included(range.lower.as_slice()), upper);
        for entry in self.index.range::<[u8], _>(bounds) {
            let key = entry.value();
            if let Some(value) = self.read_at(key, at) {
                found.push((codec::key_after_prefix(key, range.prefix_len)?, value));
                if found.len() == limit {
                    break;
                }
            }
        }
        Ok(found)
    }

    /// How many versions of a key are kept.
    #[cfg(test)]
    pub(crate) fn versions_kept(&self, namespace: &str, key: &str) -> usize {
        let key = codec::state_key(namespace, key);
        self.chains
            .get(key.as_slice())
            .map_or(0, |chain| chain.0.len())
    }
}

impl StateReader for MemoryState {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<VersionedValue>> {
        let key = codec::state_key(namespace, key);
        let Some(chain) = self.chains.get(key.as_slice()) else {
            return Ok(None);
        };
        // No pin needed: pruning and rollback change a chain only under its
        // lock, which `chain` holds, and never drop what a reader at the
        // committed height of the moment needs.
        let committed = *self.committed.read();
        Ok(committed.and_then(|at| chain.visible_at(at)))
    }

    fn get_many(&self, keys: &[(&str, &str)]) -> Result<Vec<Option<VersionedValue>>> {
        self.pin().get_many(keys)
    }

    fn range(
        &self,
        namespace: &str,
        start: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, VersionedValue)>> {
        self.pin().range(namespace, start, end, limit)
    }

    fn height(&self) -> Option<Height> {
        *self.committed.read()
    }
}

impl VersionedState for MemoryState {
    fn snapshot(&self) -> Box<dyn StateReader + Send + Sync + '_> {
        Box::new(self.pin())
    }

    fn apply(&self, batch: &UpdateBatch, height: Height) -> Result<()> {
        let mut writer = self.writer.lock();
        if let Some(current) = *self.committed.read()
            && height <= current
        {
            return Err(Error::HeightNotIncreasing {
                current,
                new: height,
            });
        }
        let mut touched = Vec::with_capacity(batch.len());
        for (namespace, key, write) in batch.iter() {
            let key = Key::from(codec::state_key(namespace, key));
            self.index.get_or_insert(key.clone());
            // Most keys keep one version: a new chain has room for one, not
            // the four a first push would reserve.
            self.chains
                .entry(key.clone())
                .or_insert_with(|| Chain(Vec::with_capacity(1)))
                .0
                .push(Version {
                    applied_at: height,
                    version: write.version,
                    value: write.value.as_deref().map(Bytes::copy_from_slice),
                });
            writer.dirty.insert(key.clone());
            touched.push(key);
        }
        // Readers see the batch from here on, all of it at once.
        *self.committed.write() = Some(height);
        self.prune(&mut writer, &touched);
        Ok(())
    }

    fn checkpoint(&self) -> Result<Option<Height>> {
        let _checkpointing = self.checkpointing.lock();
        let (height, dirty, pin) = {
            let mut writer = self.writer.lock();
            let committed = *self.committed.read();
            let Some(height) = committed.filter(|&height| Some(height) != writer.last_checkpoint)
            else {
                return Ok(writer.last_checkpoint);
            };
            // The pin keeps the versions at `height` while applies go on.
            (height, std::mem::take(&mut writer.dirty), self.pin())
        };
        let mut batch = WriteBatch::default();
        for key in &dirty {
            match self.read_at(key, pin.height) {
                Some(value) => batch.put(key, codec::encode_value(value.version, &value.value)),
                None => batch.delete(key),
            }
        }
        batch.put(codec::SAVEPOINT_KEY, codec::encode_height(height));
        let written = self.disk.write(batch, true);
        drop(pin);

        let mut writer = self.writer.lock();
        if let Err(error) = written {
            writer.dirty.extend(dirty);
            return Err(error);
        }
        writer.last_checkpoint = Some(height);
        // The checkpoint's pin is gone, and with
        // keep_versions_since_checkpoint the rollback floor has moved.
        self.prune(&mut writer, &dirty);
        Ok(Some(height))
    }

    fn durable_height(&self) -> Option<Height> {
        self.recovered
    }

    fn rollback_to(&self, height: Height) -> Result<()> {
        MemoryState::rollback_to(self, height)
    }
}

impl fmt::Debug for MemoryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryState")
            .field("path", &self.disk.path)
            .field("height", &*self.committed.read())
            .field("durable_height", &self.recovered)
            .field("keys", &self.chains.len())
            .field("options", &self.options)
            .finish()
    }
}

/// A reader pinned at one height.
struct Snapshot<'a> {
    state: &'a MemoryState,
    height: Option<Height>,
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        self.state.unpin(self.height);
    }
}

impl StateReader for Snapshot<'_> {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<VersionedValue>> {
        let key = codec::state_key(namespace, key);
        Ok(self.state.read_at(&key, self.height))
    }

    fn range(
        &self,
        namespace: &str,
        start: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, VersionedValue)>> {
        self.state
            .range_at(namespace, start, end, limit, self.height)
    }

    fn height(&self) -> Option<Height> {
        self.height
    }
}
