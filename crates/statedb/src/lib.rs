//! Versioned world state: the key-value state that chaincode reads and
//! writes, with the version (block, transaction) of every value, as MVCC
//! validation needs it.
//!
//! The interface is [`VersionedState`]: consistent snapshots for simulation
//! ([`VersionedState::snapshot`]), reads of the latest committed state for
//! MVCC, and an atomic [`VersionedState::apply`] of a block's (or, in stream
//! mode, a transaction's) writes. It knows nothing of how state is stored.
//! Two engines implement it and pass one conformance suite:
//!
//! - [`memory::MemoryState`], the fast one (FastFabric P-I): a concurrent
//!   hash table of per-key version chains with an ordered key index for
//!   range scans. Readers never block writers and never see half a block:
//!   a snapshot reads only versions at or below the height it was taken at.
//!   Durability comes from periodic checkpoints into RocksDB, each recording
//!   its height; after a restart the committer replays later blocks from
//!   the block store.
//! - [`rocks::RocksState`], the Fabric-like baseline: every key in RocksDB,
//!   snapshots from RocksDB snapshots.
//!
//! This crate does not know about blocks, transactions or the block store
//! (`weft-ledger`); it stores what it is given at the height it is told.

mod codec;
mod disk;
mod error;
pub mod json_index;
pub mod memory;
pub mod rocks;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use bytes::Bytes;

pub use error::{Error, Result};

/// A position in the ledger: transaction `tx_num` of block `block_num`.
/// This is Fabric's `kvrwset.Version`; heights order lexicographically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Height {
    pub block_num: u64,
    pub tx_num: u64,
}

impl Height {
    pub const fn new(block_num: u64, tx_num: u64) -> Self {
        Self { block_num, tx_num }
    }
}

/// A value with the height of the transaction that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedValue {
    pub value: Bytes,
    pub version: Height,
}

/// One write of an update batch: a new value, or a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// `None` deletes the key.
    pub value: Option<Bytes>,
    /// The height of the transaction that made the write.
    pub version: Height,
}

/// The writes of one or more transactions, applied atomically. Later
/// writes to the same key replace earlier ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateBatch {
    writes: BTreeMap<(String, String), Write>,
}

impl UpdateBatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, namespace: &str, key: &str, value: Bytes, version: Height) {
        self.writes.insert(
            (namespace.to_owned(), key.to_owned()),
            Write {
                value: Some(value),
                version,
            },
        );
    }

    pub fn delete(&mut self, namespace: &str, key: &str, version: Height) {
        self.writes.insert(
            (namespace.to_owned(), key.to_owned()),
            Write {
                value: None,
                version,
            },
        );
    }

    /// The write of `key` in `namespace` this batch holds, if any.
    pub fn get(&self, namespace: &str, key: &str) -> Option<&Write> {
        self.writes.get(&(namespace.to_owned(), key.to_owned()))
    }

    /// `key` of `namespace` as applying this batch would leave `state`:
    /// this batch's write of it (`None` for a delete), else what `state`
    /// holds.
    pub fn latest(
        &self,
        state: &dyn StateReader,
        namespace: &str,
        key: &str,
    ) -> Result<Option<VersionedValue>> {
        match self.get(namespace, key) {
            Some(write) => Ok(write.value.clone().map(|value| VersionedValue {
                value,
                version: write.version,
            })),
            None => state.get(namespace, key),
        }
    }

    /// The writes in (namespace, key) order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Write)> {
        self.writes
            .iter()
            .map(|((namespace, key), write)| (namespace.as_str(), key.as_str(), write))
    }

    pub fn len(&self) -> usize {
        self.writes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

/// Where the metadata of the keys of `namespace` is kept: Fabric's
/// key-level endorsement policies (`VALIDATION_PARAMETER`), as a serialized
/// `kvrwset.KVMetadataWrite` under the same key. Fabric keeps metadata
/// beside each value; weft keeps it in this companion namespace of the
/// same state, so that snapshots, checkpoints and rollbacks cover it, and
/// states without metadata pay nothing for it. Chaincode names cannot
/// hold `$`, so no chaincode's namespace is ever one of these (Fabric's
/// private-data hashes live in `<namespace>$$h<collection>` likewise).
pub fn key_metadata_namespace(namespace: &str) -> String {
    format!("{namespace}$$m")
}

/// Where every peer keeps the hashes of the private data of `collection`
/// of chaincode `namespace`: Fabric's `<namespace>$$h<collection>`, keyed
/// by the lowercase hex SHA-256 of each private key.
pub fn hashed_namespace(namespace: &str, collection: &str) -> String {
    format!("{namespace}$$h{collection}")
}

/// Where the peers of the collection's member organisations keep its
/// private values, under their own keys: Fabric's
/// `<namespace>$$p<collection>`. A value carries the version of its hash,
/// so that a reader can tell whether it holds the value the hash is of.
/// These namespaces differ between peers of different organisations, so
/// anything that compares peers' states must leave them out.
pub fn private_namespace(namespace: &str, collection: &str) -> String {
    format!("{namespace}$$p{collection}")
}

/// Whether `namespace` holds documents a chaincode reads: a chaincode's
/// own namespace, or one of its collections' private namespaces (not the
/// hashes, key metadata, indexes or schedules kept beside them).
pub fn holds_documents(namespace: &str) -> bool {
    match namespace.split_once("$$") {
        None => true,
        Some((chaincode, rest)) => {
            !chaincode.is_empty() && rest.starts_with('p') && !rest.contains("$$")
        }
    }
}

/// A consistent, read-only view of the state.
pub trait StateReader {
    /// The value of `key` in `namespace`, with its version.
    fn get(&self, namespace: &str, key: &str) -> Result<Option<VersionedValue>>;

    /// Several keys at once (bulk read for MVCC); results in request order.
    fn get_many(&self, keys: &[(&str, &str)]) -> Result<Vec<Option<VersionedValue>>> {
        keys.iter()
            .map(|(namespace, key)| self.get(namespace, key))
            .collect()
    }

    /// The live keys of `namespace` in `[start, end)` in key order, at most
    /// `limit` of them. An empty `end` means no upper bound.
    fn range(
        &self,
        namespace: &str,
        start: &str,
        end: &str,
        limit: usize,
    ) -> Result<Vec<(String, VersionedValue)>>;

    /// The height of the last update this view reflects, if any.
    fn height(&self) -> Option<Height>;
}

/// A versioned state database.
///
/// Reading through the database itself (its [`StateReader`] impl) sees the
/// latest committed state, which is what MVCC validation compares against.
pub trait VersionedState: StateReader + Send + Sync {
    /// A consistent view at the current height. It neither blocks nor is
    /// blocked by [`apply`](Self::apply): later updates stay invisible to it.
    fn snapshot(&self) -> Box<dyn StateReader + Send + Sync + '_>;

    /// Applies `batch` atomically and records `height` as the state's
    /// height: a reader sees all of the batch or none of it. Heights must
    /// increase from one call to the next.
    fn apply(&self, batch: &UpdateBatch, height: Height) -> Result<()>;

    /// Makes everything applied so far durable and returns the height that
    /// is now durable. Engines that are durable on every apply just report it.
    fn checkpoint(&self) -> Result<Option<Height>>;

    /// The height recovered from disk when the database was opened: blocks
    /// above it must be replayed from the block store.
    fn durable_height(&self) -> Option<Height>;

    /// Undoes every update applied above `height`: a stream channel's
    /// transactions that the orderer's checkpoint did not confirm. Engines
    /// that cannot (RocksDB writes each apply through) answer
    /// [`Error::RollbackUnsupported`] and change nothing.
    fn rollback_to(&self, height: Height) -> Result<()>;
}
