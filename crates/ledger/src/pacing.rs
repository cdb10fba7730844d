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
//!
//! Pacing shortens a burst; [`staggered`] keeps the nodes' bursts apart.
//! Nodes that write the same chain (every orderer's Raft log, every
//! node's block store) fill equal memtables and write-ahead logs at the
//! same rate, so they flush at the same moments: measured on a stream
//! network at 500 tx/s, the three orderers' Raft logs within 5 ms of each
//! other every 2.5 s, and all five block stores together every 8 s. A
//! size stretched by a factor each database's path decides gives each
//! node its own period, and their flushes drift apart.

use std::hash::{Hash, Hasher};
use std::path::Path;

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

/// `bytes` stretched by a factor from 1 up to 1.5, fixed for the database
/// at `path` (the same on every open by one build of weft) and different
/// for most other paths:
/// a memtable or write-ahead-log size that makes nodes of one machine
/// flush at different moments (see the module's doc).
pub fn staggered(bytes: u64, path: &Path) -> u64 {
    // SipHash with fixed keys: the same factor for the same path on
    // every run (the standard library may change its hasher between
    // releases, which moves only when flushes fall).
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut hasher);
    let sixteenths = hasher.finish() % 9;
    bytes + bytes / 16 * sixteenths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staggered_sizes_stay_within_half_again_and_differ_between_nodes() {
        let base = 16 << 20;
        let sizes: Vec<u64> = (0..5)
            .map(|node| staggered(base, Path::new(&format!("/var/weft/node{node}/blocks"))))
            .collect();
        assert!(
            sizes
                .iter()
                .all(|&size| (base..=base + base / 2).contains(&size))
        );
        let mut distinct = sizes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() >= 3, "five nodes' sizes: {sizes:?}");
        assert_eq!(
            staggered(base, Path::new("/var/weft/node0/blocks")),
            sizes[0],
            "a path keeps its size from one open to the next"
        );
    }
}
