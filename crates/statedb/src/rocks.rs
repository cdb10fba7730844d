//! [`RocksState`]: the Fabric-like baseline, with every key in RocksDB.
//!
//! A key `k` of namespace `ns` is stored under
//! `'s' ‖ varint(len(ns)) ‖ ns ‖ k` (unambiguous whatever bytes `ns` and `k`
//! hold, and in key order within a namespace) with the value
//! `varint(block_num) ‖ varint(tx_num) ‖ value`; a deleted key is not
//! stored. The private `codec` module defines the layout. An apply is one
//! RocksDB write batch holding the writes and the savepoint (the height),
//! so the files always hold a whole number of updates, and the height they
//! describe. A snapshot is a RocksDB snapshot and reads its height from the
//! savepoint it contains, so its height and its data always agree.

use std::fmt;
use std::path::Path;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use rocksdb::{DB, DBPinnableSlice, IteratorMode, ReadOptions, SnapshotWithThreadMode, WriteBatch};

use crate::disk::Disk;
use crate::{
    Error, Height, Result, StateReader, UpdateBatch, VersionedState, VersionedValue, codec,
};

/// How a [`RocksState`] writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RocksOptions {
    /// Sync every apply to stable storage before it returns. Without it an
    /// apply reaches the operating system, not the disk, until the next
    /// [`checkpoint`](VersionedState::checkpoint): a process crash loses
    /// nothing, a power loss may lose the updates since.
    pub sync: bool,
}

/// The world state in RocksDB. See the [module documentation](self).
pub struct RocksState {
    disk: Disk,
    options: RocksOptions,
    /// Held by an apply from its height check to its write.
    writer: Mutex<()>,
    /// The height of the last update written.
    height: RwLock<Option<Height>>,
    /// The height found on disk by [`RocksState::open`].
    recovered: Option<Height>,
}

impl RocksState {
    /// Opens the database in `dir`, creating it if missing.
    pub fn open(dir: &Path, options: RocksOptions) -> Result<Self> {
        let disk = Disk::open(dir)?;
        let recovered = disk.savepoint()?;
        Ok(Self {
            disk,
            options,
            writer: Mutex::new(()),
            height: RwLock::new(recovered),
            recovered,
        })
    }

    fn view(&self) -> View<'_> {
        View {
            disk: &self.disk,
            snapshot: None,
        }
    }
}

impl StateReader for RocksState {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<VersionedValue>> {
        self.view().get(namespace, key)
    }

    fn get_many(&self, keys: &[(&str, &str)]) -> Result<Vec<Option<VersionedValue>>> {
        self.view().get_many(keys)
    }

    fn range(
        &self,
        namespace: &str,
        start: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, VersionedValue)>> {
        self.view().range(namespace, start, end, limit)
    }

    fn height(&self) -> Option<Height> {
        *self.height.read()
    }
}

impl VersionedState for RocksState {
    fn snapshot(&self) -> Box<dyn StateReader + Send + Sync + '_> {
        let snapshot = self.disk.db.snapshot();
        let height = snapshot
            .get_pinned(codec::SAVEPOINT_KEY)
            .map_err(|error| self.disk.error(error))
            .and_then(|encoded| {
                encoded
                    .map(|encoded| codec::decode_height(&encoded))
                    .transpose()
            })
            // A snapshot cannot report an error when it is taken, so it
            // reports it on every read instead.
            .map_err(|error| error.to_string());
        Box::new(Snapshot {
            disk: &self.disk,
            snapshot,
            height,
        })
    }

    fn apply(&self, batch: &UpdateBatch, height: Height) -> Result<()> {
        let _writer = self.writer.lock();
        if let Some(current) = *self.height.read()
            && height <= current
        {
            return Err(Error::HeightNotIncreasing {
                current,
                new: height,
            });
        }
        let mut records = WriteBatch::default();
        for (namespace, key, write) in batch.iter() {
            let key = codec::state_key(namespace, key);
            match &write.value {
                Some(value) => records.put(key, codec::encode_value(write.version, value)),
                None => records.delete(key),
            }
        }
        records.put(codec::SAVEPOINT_KEY, codec::encode_height(height));
        self.disk.write(records, self.options.sync)?;
        *self.height.write() = Some(height);
        Ok(())
    }

    fn checkpoint(&self) -> Result<Option<Height>> {
        // Every apply that set this height is already in the write-ahead
        // log; syncing the log makes it, and anything after, durable.
        let height = *self.height.read();
        self.disk
            .db
            .flush_wal(true)
            .map_err(|error| self.disk.error(error))?;
        Ok(height)
    }

    fn durable_height(&self) -> Option<Height> {
        self.recovered
    }

    fn rollback_to(&self, _height: Height) -> Result<()> {
        Err(Error::RollbackUnsupported)
    }
}

impl fmt::Debug for RocksState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksState")
            .field("path", &self.disk.path)
            .field("height", &*self.height.read())
            .field("durable_height", &self.recovered)
            .field("options", &self.options)
            .finish()
    }
}

struct Snapshot<'a> {
    disk: &'a Disk,
    snapshot: SnapshotWithThreadMode<'a, DB>,
    /// The savepoint in the snapshot, or why it could not be read.
    height: std::result::Result<Option<Height>, String>,
}

impl Snapshot<'_> {
    fn view(&self) -> Result<View<'_>> {
        match &self.height {
            Ok(_) => Ok(View {
                disk: self.disk,
                snapshot: Some(&self.snapshot),
            }),
            Err(reason) => Err(Error::Storage {
                path: self.disk.path.clone(),
                reason: format!("snapshot unusable: {reason}"),
            }),
        }
    }
}

impl StateReader for Snapshot<'_> {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<VersionedValue>> {
        self.view()?.get(namespace, key)
    }

    fn get_many(&self, keys: &[(&str, &str)]) -> Result<Vec<Option<VersionedValue>>> {
        self.view()?.get_many(keys)
    }

    fn range(
        &self,
        namespace: &str,
        start: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, VersionedValue)>> {
        self.view()?.range(namespace, start, end, limit)
    }

    fn height(&self) -> Option<Height> {
        self.height.as_ref().ok().copied().flatten()
    }
}

/// Reads through a snapshot, or the latest state when there is none. Each
/// call of the latest state reads one consistent state: RocksDB gives a
/// multi-get or an iterator an implicit snapshot.
struct View<'a> {
    disk: &'a Disk,
    snapshot: Option<&'a SnapshotWithThreadMode<'a, DB>>,
}

impl View<'_> {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<VersionedValue>> {
        let key = codec::state_key(namespace, key);
        let found: std::result::Result<Option<DBPinnableSlice<'_>>, rocksdb::Error> =
            match self.snapshot {
                Some(snapshot) => snapshot.get_pinned(&key),
                None => self.disk.db.get_pinned(&key),
            };
        let found = found.map_err(|error| self.disk.error(error))?;
        found.map(|encoded| decode(&encoded)).transpose()
    }

    fn get_many(&self, keys: &[(&str, &str)]) -> Result<Vec<Option<VersionedValue>>> {
        let keys = keys
            .iter()
            .map(|(namespace, key)| codec::state_key(namespace, key));
        let found = match self.snapshot {
            Some(snapshot) => snapshot.multi_get(keys),
            None => self.disk.db.multi_get(keys),
        };
        found
            .into_iter()
            .map(|found| {
                let found = found.map_err(|error| self.disk.error(error))?;
                found.map(|encoded| decode(&encoded)).transpose()
            })
            .collect()
    }

    fn range(
        &self,
        namespace: &str,
        start: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, VersionedValue)>> {
        let mut found = Vec::new();
        if limit == 0 || (!end.is_empty() && start >= end) {
            return Ok(found);
        }
        let range = codec::namespace_range(namespace, start, end);
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_lower_bound(range.lower);
        if let Some(upper) = range.upper {
            read_options.set_iterate_upper_bound(upper);
        }
        let entries = match self.snapshot {
            Some(snapshot) => snapshot.iterator_opt(IteratorMode::Start, read_options),
            None => self.disk.db.iterator_opt(IteratorMode::Start, read_options),
        };
        for entry in entries {
            let (key, value) = entry.map_err(|error| self.disk.error(error))?;
            found.push((
                codec::key_after_prefix(&key, range.prefix_len)?,
                decode(&value)?,
            ));
            if found.len() == limit {
                break;
            }
        }
        Ok(found)
    }
}

fn decode(encoded: &[u8]) -> Result<VersionedValue> {
    let (version, value) = codec::decode_value(encoded)?;
    Ok(VersionedValue {
        value: Bytes::copy_from_slice(value),
        version,
    })
}
