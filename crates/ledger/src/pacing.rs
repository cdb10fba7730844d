//! How fast RocksDB's background work may write, for the databases a node
//! keeps beside its block store: a Raft orderer's log and the Kafka
//! envelope store use it too (the world state, in `weft-statedb`, which
//! does not import this crate, sets the same two options).
//!
//! A node's latency hangs on small synced writes: a Raft entry is
//! answered once its log record is synced, a stream checkpoint once the
//! peer's block store is. RocksDB's background work writes in bursts: a
//! memtable flush writes a whole table file (a block store's is about 10
//! MB) as fast as it can encode it, then syncs it. A small `fdatasync`
//! issued meanwhile waits behind those megabytes in the disk's queue.
//! On one disk shared by several nodes, all of them holding the same
//! chain, their flushes fall at the same moment, and measured on weft's
//! stream channels, Raft log syncs that normally take 0.2 ms took 20–70 ms
//! for a quarter of a second, which gave p99 latencies of 100–200 ms.
//!
//! Pacing the background writes keeps those bursts short: table files
//! are handed to the disk every [`BACKGROUND_BYTES_PER_SYNC`] as they are
//! written, and flushes and compactions together write at most
//! [`BACKGROUND_WRITE_BYTES_PER_SEC`]. That rate is several times what a
//! saturated node writes (a block store takes in under 10 MB/s at weft's
//! peak), so the background keeps up; a flush of a full memtable takes
//! about a third of a second instead of 60 ms. Foreground writes (the
//! write-ahead log, and so every synced append) are never throttled.

/// The most RocksDB's flushes and compactions write per second, per
/// database.
pub const BACKGROUND_WRITE_BYTES_PER_SEC: i64 = 32 << 20;

/// How often the rate limiter refills, in microseconds: small, so that a
/// flush writes a little at a time rather than a tenth of a second's worth
/// at once (RocksDB's default is 100 ms).
const REFILL_PERIOD_MICROS: i64 = 10_000;

/// RocksDB's default fairness between high-priority (flush) and
/// low-priority (compaction) writes.
const FAIRNESS: i32 = 10;

/// Table-file bytes written before RocksDB asks the kernel to start
/// writing them out, so that the sync at the end of a flush finds little
/// left.
pub const BACKGROUND_BYTES_PER_SYNC: u64 = 1 << 20;

/// Sets `options` to pace RocksDB's background writes, as this module
/// describes.
pub fn pace_background_writes(options: &mut rocksdb::Options) {
    options.set_bytes_per_sync(BACKGROUND_BYTES_PER_SYNC);
    options.set_ratelimiter(
        BACKGROUND_WRITE_BYTES_PER_SEC,
        REFILL_PERIOD_MICROS,
        FAIRNESS,
    );
}
