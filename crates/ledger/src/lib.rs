//! weft's block store: a channel's blocks in RocksDB, with the TxID index,
//! crash recovery and the durability policy, used by both the peer's
//! committer and the orderer.
//!
//! Start at [`BlockStore`]: [`BlockStore::open`] takes a [`StoreConfig`]
//! (directory, [`Durability`], how many tail blocks to verify), and
//! [`BlockStore::append`] stores one block, with its metadata, in one atomic
//! RocksDB batch. Reads are by number ([`BlockStore::block`], or
//! [`BlockStore::block_bytes`] for Deliver to send the stored bytes as they
//! are), by TxID ([`BlockStore::block_by_tx_id`],
//! [`BlockStore::tx_validation_code`], [`BlockStore::contains_tx_id`]) and
//! in order ([`BlockStore::blocks_from`]), and a key's committed writes,
//! newest first, when the history index is on ([`BlockStore::history`]);
//! private data: what a transaction's endorsement leaves until its block
//! commits ([`BlockStore::keep_transient`]) and what each block committed
//! ([`BlockStore::private_data`]), kept in step with the chain;
//! [`BlockStore::subscribe`] watches
//! the height for Deliver's BLOCK_UNTIL_READY. [`seek`] is the pure part of
//! Fabric's Deliver request semantics, shared by both Deliver services.
//! The disk layout is in `keys.rs`.
//!
//! # What this crate owns, and what it must not do
//!
//! It owns the chain's integrity on disk: numbers follow the height, each
//! previous hash is the last header hash, each data hash matches the data,
//! and a block, its index entries and the tail record are written together
//! or not at all. It does not validate transactions (signatures,
//! policies, MVCC, duplicate TxIDs: that is the committer, which sets the
//! TRANSACTIONS_FILTER this store records) and does not know the world
//! state: it never imports `weft-statedb` (nor the committer or orderer),
//! so both node roles can use it.
//!
//! # Durability: process crash versus machine crash
//!
//! Each append is one RocksDB write; with RocksDB's default options
//! (`manual_wal_flush` off) the write hands its WAL record to the operating
//! system before `append` returns. A **process crash** (kill -9, panic,
//! OOM kill) therefore loses nothing `append` returned for, in every mode:
//! the bytes are in the kernel's page cache and RocksDB replays the WAL on
//! open. A **machine crash** (power loss, kernel panic) loses whatever the
//! page cache had not written back; only synced blocks, those below
//! [`BlockStore::durable_height`], are sure to survive. [`Durability`]
//! chooses when to sync: every block (Fabric's behaviour, the default),
//! group commit (a flusher syncs every N blocks or T ms, and any read that
//! would serve a not-yet-durable block syncs first, so nothing served is
//! lost), or never (tests, benchmarks). [`BlockStore::open`] syncs what it
//! recovered, and a clean close syncs in every mode.

mod config;
pub mod deliver;
mod error;
mod history;
mod keys;
mod pacing;
mod private;
pub mod seek;
mod store;

pub use config::{Durability, StoreConfig};
pub use error::{Error, Result, SeekError};
pub use history::{HistoryWrites, history_writes};
pub use keys::TxLocation;
pub use pacing::{pace_background_writes, staggered};
pub use private::{MissingPrivateData, PrivateKeyRef, PurgedValue, TRANSIENT_RETENTION_BLOCKS};
pub use seek::{SeekRange, SeekStep, resolve_seek};
pub use store::{BlockPrivateData, BlockStore, Blocks};

#[cfg(any(test, feature = "testing"))]
pub mod testing;
