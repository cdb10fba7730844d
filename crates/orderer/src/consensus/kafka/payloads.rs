//! The envelopes a Kafka channel's orderer holds when only their IDs go
//! through Kafka (FastFabric): those it received from clients or from the
//! other orderers, until their ID is read back from the partition, and
//! then the most recent ones for a while, for orderers that read the
//! partition later (a restarted one catching up).
//!
//! Those that must survive a crash are also on disk (a RocksDB at
//! `kafka/<channel>/` in the data directory): an envelope a client is
//! about to hear SUCCESS for, and one another orderer hands over, are
//! written with an fsync ([`Payloads::keep_durably`]) and stay there until
//! this orderer has written the block that holds them
//! ([`Payloads::written`]), when its block store has them. So an envelope
//! is lost only if every orderer that took it loses its disk. Deletions
//! are not synced: one lost in a crash only keeps an envelope a while
//! longer. Most envelopes are deleted before RocksDB flushes its memtable,
//! so they cost the disk a write-ahead log entry and no more.
//!
//! On disk, each envelope is the value of its key: the sequence number in
//! which it was kept (big-endian) then its digest, so that the order in
//! which envelopes are dropped survives a restart.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use bytes::Bytes;
use parking_lot::Mutex;

use super::records::Digest;

/// Envelopes kept after they were ordered, for orderers that lag.
const ORDERED_KEPT_MAX: usize = 65_536;
/// Bytes of ordered envelopes kept at most.
const ORDERED_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Bytes of envelopes not ordered yet kept at most: an envelope whose ID
/// is never published (its orderer refused it after keeping it, or failed
/// before publishing) must not stay forever. Far above what is in flight.
const UNORDERED_BYTES_MAX: usize = 512 * 1024 * 1024;

/// A channel's envelopes, by the SHA-256 of their bytes.
#[derive(Default)]
pub(crate) struct Payloads {
    inner: Mutex<Inner>,
    /// `None` only in tests of the bookkeeping.
    disk: Option<rocksdb::DB>,
}

impl std::fmt::Debug for Payloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("Payloads")
            .field("held", &inner.by_digest.len())
            .field("on_disk", &self.disk.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Held {
    /// The bytes, unless the envelope was kept before this process
    /// started and not ordered since: those are read from disk.
    envelope: Option<Bytes>,
    size: usize,
    ordered: bool,
    /// Its place on disk, while it is there.
    on_disk: Option<u64>,
}

#[derive(Debug, Default)]
struct Inner {
    by_digest: HashMap<Digest, Held>,
    /// Digests in the order they were kept; entries ordered since are
    /// skipped, and swept out once they are most of the queue.
    unordered: VecDeque<Digest>,
    unordered_count: usize,
    unordered_bytes: usize,
    /// Digests of envelopes already ordered, oldest first.
    ordered: VecDeque<Digest>,
    ordered_bytes: usize,
    next_sequence: u64,
}

/// What changes on disk after the bookkeeping decided it.
#[derive(Default)]
struct Changes {
    /// Envelopes newly kept, with their sequence numbers.
    kept: Vec<(u64, Digest, Bytes)>,
    /// Entries no longer needed on disk.
    dropped: Vec<(u64, Digest)>,
}

/// The key of the envelope of `digest` kept `sequence`-th.
fn envelope_key(sequence: u64, digest: &Digest) -> [u8; 40] {
    let mut key = [0u8; 40];
    key[..8].copy_from_slice(&sequence.to_be_bytes());
    key[8..].copy_from_slice(digest);
    key
}

impl Payloads {
    /// The store at `path`, created if new, with the envelopes an earlier
    /// run kept there.
    pub fn open(path: &Path) -> Result<Self, String> {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        // Most envelopes are deleted before a flush; those flushed are
        // signatures and certificates, not worth compressing.
        options.set_compression_type(rocksdb::DBCompressionType::None);
        // Envelopes kept durably are synced: a recycled write-ahead log is
        // overwritten within its size, so a sync need not write the inode.
        options.set_recycle_log_file_num(2);
        weft_ledger::pace_background_writes(&mut options);
        let db = rocksdb::DB::open(&options, path)
            .map_err(|e| format!("opening the envelope store at {}: {e}", path.display()))?;
        let mut inner = Inner::default();
        let mut unreadable = Vec::new();
        for item in db.iterator(rocksdb::IteratorMode::Start) {
            let (key, value) =
                item.map_err(|e| format!("reading the envelope store at {}: {e}", path.display()))?;
            let (Ok(sequence), Ok(digest)) = (
                key.get(..8)
                    .unwrap_or_default()
                    .try_into()
                    .map(u64::from_be_bytes),
                Digest::try_from(key.get(8..).unwrap_or_default()),
            ) else {
                unreadable.push(key.to_vec());
                continue;
            };
            inner.next_sequence = sequence + 1;
            if inner.by_digest.contains_key(&digest) {
                unreadable.push(key.to_vec());
                continue;
            }
            inner.hold(digest, None, value.len(), Some(sequence));
        }
        let payloads = Self {
            inner: Mutex::new(inner),
            disk: Some(db),
        };
        let mut changes = Changes::default();
        {
            let mut inner = payloads.inner.lock();
            inner.enforce_bounds(&mut changes);
            tracing::info!(
                path = %path.display(),
                envelopes = inner.unordered_count,
                "envelope store opened"
            );
        }
        if let Some(disk) = &payloads.disk {
            for key in unreadable {
                let _ = disk.delete(key);
            }
        }
        payloads.write(changes, false)?;
        Ok(payloads)
    }

    /// Keeps `envelope`, whose digest is `digest`, in memory only: for an
    /// envelope fetched from another orderer, which holds it.
    pub fn keep(&self, digest: Digest, envelope: Bytes) {
        let changes = self.inner.lock().keep([(digest, envelope)], false);
        self.write_or_warn(changes);
    }

    /// Keeps `envelopes` (with their digests), returning once they are on
    /// disk: what a SUCCESS, or another orderer, counts on. Blocks on the
    /// fsync.
    pub fn keep_durably(&self, envelopes: &[(Digest, Bytes)]) -> Result<(), String> {
        let changes = self.inner.lock().keep(envelopes.iter().cloned(), true);
        self.write(changes, true)
    }

    /// The envelope of `digest`, if held.
    pub fn get(&self, digest: &Digest) -> Option<Bytes> {
        let sequence = match self.inner.lock().by_digest.get(digest)? {
            Held {
                envelope: Some(envelope),
                ..
            } => return Some(envelope.clone()),
            Held { on_disk, .. } => (*on_disk)?,
        };
        let disk = self.disk.as_ref()?;
        match disk.get(envelope_key(sequence, digest)) {
            Ok(found) => found.map(Bytes::from),
            Err(error) => {
                tracing::warn!(%error, "reading an envelope from the envelope store");
                None
            }
        }
    }

    /// Marks the envelope of `digest` as ordered (its ID was read from the
    /// partition): it is kept in memory among the most recent ones, for
    /// orderers that lag, and dropped once older than the retention
    /// allows. `envelope` is its bytes, held in memory from now on.
    pub fn ordered(&self, digest: Digest, envelope: &Bytes) {
        let changes = self.inner.lock().mark_ordered(digest, envelope);
        self.write_or_warn(changes);
    }

    /// Drops from disk the envelopes of `digests`, now in a block this
    /// orderer wrote: its block store holds them.
    pub fn written(&self, digests: impl IntoIterator<Item = Digest>) {
        let mut changes = Changes::default();
        {
            let mut inner = self.inner.lock();
            for digest in digests {
                if let Some(held) = inner.by_digest.get_mut(&digest)
                    && let Some(sequence) = held.on_disk.take()
                {
                    changes.dropped.push((sequence, digest));
                }
            }
        }
        self.write_or_warn(changes);
    }

    fn write_or_warn(&self, changes: Changes) {
        if let Err(error) = self.write(changes, false) {
            tracing::warn!(%error, "updating the envelope store");
        }
    }

    fn write(&self, changes: Changes, sync: bool) -> Result<(), String> {
        let Some(disk) = &self.disk else {
            return Ok(());
        };
        let mut batch = rocksdb::WriteBatch::default();
        for (sequence, digest, envelope) in &changes.kept {
            batch.put(envelope_key(*sequence, digest), envelope);
        }
        for (sequence, digest) in &changes.dropped {
            batch.delete(envelope_key(*sequence, digest));
        }
        if batch.is_empty() {
            return Ok(());
        }
        let mut options = rocksdb::WriteOptions::default();
        options.set_sync(sync);
        disk.write_opt(batch, &options)
            .map_err(|e| format!("writing the envelope store: {e}"))
    }
}

impl Inner {
    /// Holds what is not held yet, `on_disk` or in memory only; the
    /// changes to write. An envelope held in memory only is put on disk
    /// when kept durably, and one on disk already is written again, so
    /// that the caller's fsync covers it whoever kept it first.
    fn keep(
        &mut self,
        envelopes: impl IntoIterator<Item = (Digest, Bytes)>,
        on_disk: bool,
    ) -> Changes {
        let mut changes = Changes::default();
        for (digest, envelope) in envelopes {
            match self.by_digest.get_mut(&digest) {
                Some(_) if !on_disk => continue,
                Some(Held {
                    on_disk: Some(sequence),
                    ..
                }) => changes.kept.push((*sequence, digest, envelope)),
                Some(held) => {
                    let sequence = self.next_sequence;
                    self.next_sequence += 1;
                    held.on_disk = Some(sequence);
                    changes.kept.push((sequence, digest, envelope));
                }
                None => {
                    let sequence = on_disk.then_some(self.next_sequence);
                    if let Some(sequence) = sequence {
                        self.next_sequence += 1;
                        changes.kept.push((sequence, digest, envelope.clone()));
                    }
                    self.hold(digest, Some(envelope.clone()), envelope.len(), sequence);
                }
            }
        }
        self.enforce_bounds(&mut changes);
        changes
    }

    fn hold(&mut self, digest: Digest, envelope: Option<Bytes>, size: usize, on_disk: Option<u64>) {
        self.unordered.push_back(digest);
        self.unordered_count += 1;
        self.unordered_bytes += size;
        self.by_digest.insert(
            digest,
            Held {
                envelope,
                size,
                ordered: false,
                on_disk,
            },
        );
    }

    /// Marks `digest` ordered, holding `envelope` in memory; the changes
    /// to write.
    fn mark_ordered(&mut self, digest: Digest, envelope: &Bytes) -> Changes {
        let mut changes = Changes::default();
        let Some(held) = self.by_digest.get_mut(&digest) else {
            return changes;
        };
        if held.envelope.is_none() {
            held.envelope = Some(envelope.clone());
        }
        if held.ordered {
            return changes;
        }
        held.ordered = true;
        let size = held.size;
        self.unordered_count -= 1;
        self.unordered_bytes -= size;
        self.ordered.push_back(digest);
        self.ordered_bytes += size;
        self.enforce_bounds(&mut changes);
        changes
    }

    /// Drops the oldest envelopes past the bounds, recording in `changes`
    /// those on disk.
    fn enforce_bounds(&mut self, changes: &mut Changes) {
        while self.unordered_bytes > UNORDERED_BYTES_MAX {
            let Some(oldest) = self.unordered.pop_front() else {
                break;
            };
            let unordered = self
                .by_digest
                .get(&oldest)
                .is_some_and(|held| !held.ordered);
            if unordered && let Some(dropped) = self.by_digest.remove(&oldest) {
                self.unordered_count -= 1;
                self.unordered_bytes -= dropped.size;
                if let Some(sequence) = dropped.on_disk {
                    changes.dropped.push((sequence, oldest));
                }
                tracing::warn!(
                    "dropping an envelope whose ID was never ordered, the oldest of more than {UNORDERED_BYTES_MAX} bytes held"
                );
            }
        }
        while self.ordered.len() > ORDERED_KEPT_MAX || self.ordered_bytes > ORDERED_BYTES_MAX {
            let Some(oldest) = self.ordered.pop_front() else {
                break;
            };
            if let Some(dropped) = self.by_digest.remove(&oldest) {
                self.ordered_bytes -= dropped.size;
                if let Some(sequence) = dropped.on_disk {
                    changes.dropped.push((sequence, oldest));
                }
            }
        }
        // The queue of unordered digests, swept of ordered ones once they
        // are most of it.
        if self.unordered.len() > 2 * self.unordered_count + 1024 {
            let Self {
                unordered,
                by_digest,
                ..
            } = self;
            unordered.retain(|digest| by_digest.get(digest).is_some_and(|held| !held.ordered));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::kafka::records::digest;

    #[test]
    fn ordered_envelopes_are_kept_for_a_while_then_dropped_oldest_first() {
        // Goal: an envelope stays fetchable after it was ordered, so
        // a lagging orderer can still get it; memory stays bounded.
        let payloads = Payloads::default();
        let first = Bytes::from_static(b"first");
        payloads.keep(digest(&first), first.clone());
        payloads.ordered(digest(&first), &first);
        assert_eq!(payloads.get(&digest(&first)), Some(first.clone()));
        for n in 0..ORDERED_KEPT_MAX {
            let envelope = Bytes::from(n.to_le_bytes().to_vec());
            payloads.keep(digest(&envelope), envelope.clone());
            payloads.ordered(digest(&envelope), &envelope);
        }
        assert_eq!(payloads.get(&digest(&first)), None);
        let newest = Bytes::from((ORDERED_KEPT_MAX - 1).to_le_bytes().to_vec());
        assert_eq!(payloads.get(&digest(&newest)), Some(newest));
        // Not yet ordered: never dropped.
        let pending = Bytes::from_static(b"pending");
        payloads.keep(digest(&pending), pending.clone());
        let last = Bytes::from_static(b"last");
        payloads.keep(digest(&last), last.clone());
        payloads.ordered(digest(&last), &last);
        assert_eq!(payloads.get(&digest(&pending)), Some(pending.clone()));
        // Kept or ordered twice (a resubmitted envelope): counted once.
        payloads.keep(digest(&last), last.clone());
        payloads.ordered(digest(&last), &last);
        let inner = payloads.inner.lock();
        assert_eq!(inner.unordered_count, 1);
        assert_eq!(inner.unordered_bytes, pending.len());
        assert_eq!(inner.ordered.len(), ORDERED_KEPT_MAX);
        // The queue of unordered digests was swept of ordered ones.
        assert!(inner.unordered.len() < 2048, "{}", inner.unordered.len());
    }

    #[test]
    fn envelopes_never_ordered_are_dropped_oldest_first_past_the_bound() {
        // Goal: envelopes whose IDs never come back (their orderer failed
        // after sharing them) do not grow the pool without bound.
        let payloads = Payloads::default();
        let size = 1024 * 1024;
        let count = UNORDERED_BYTES_MAX / size + 2;
        let envelopes: Vec<Bytes> = (0..count)
            .map(|n| {
                let mut bytes = vec![0u8; size];
                bytes[..8].copy_from_slice(&n.to_le_bytes());
                Bytes::from(bytes)
            })
            .collect();
        for envelope in &envelopes {
            payloads.keep(digest(envelope), envelope.clone());
        }
        assert_eq!(payloads.get(&digest(&envelopes[0])), None);
        assert_eq!(payloads.get(&digest(&envelopes[1])), None);
        assert!(payloads.get(&digest(&envelopes[2])).is_some());
        assert!(payloads.get(&digest(&envelopes[count - 1])).is_some());
        assert!(payloads.inner.lock().unordered_bytes <= UNORDERED_BYTES_MAX);
    }

    #[test]
    fn envelopes_kept_durably_survive_a_restart_until_their_block_is_written() {
        // Goal: an orderer started again still holds what it took and has
        // not yet written into a block; what it fetched (others hold it)
        // and what its blocks hold are gone from disk.
        let dir = tempfile::tempdir().unwrap();
        let envelopes: Vec<(Digest, Bytes)> = (0..5u8)
            .map(|n| {
                let envelope = Bytes::from(vec![n; 100 + usize::from(n)]);
                (digest(&envelope), envelope)
            })
            .collect();
        {
            let payloads = Payloads::open(dir.path()).unwrap();
            payloads.keep_durably(&envelopes[..3]).unwrap();
            // Fetched: memory only.
            payloads.keep(envelopes[3].0, envelopes[3].1.clone());
            // Ordered, still on disk until its block is written.
            payloads.ordered(envelopes[1].0, &envelopes[1].1);
            payloads.ordered(envelopes[0].0, &envelopes[0].1);
            payloads.written([envelopes[0].0]);
            // Kept again durably (a client sent it twice): once on disk.
            payloads.keep_durably(&envelopes[1..2]).unwrap();
            // Still served from memory after its block was written.
            assert_eq!(payloads.get(&envelopes[0].0), Some(envelopes[0].1.clone()));
        }
        let payloads = Payloads::open(dir.path()).unwrap();
        for (digest, envelope) in &envelopes[1..3] {
            assert_eq!(payloads.get(digest).as_ref(), Some(envelope));
        }
        for (digest, _) in [&envelopes[0], &envelopes[3], &envelopes[4]] {
            assert_eq!(payloads.get(digest), None);
        }
        {
            let inner = payloads.inner.lock();
            assert_eq!(inner.unordered_count, 2);
            assert_eq!(
                inner.unordered_bytes,
                envelopes[1].1.len() + envelopes[2].1.len()
            );
            assert_eq!(inner.next_sequence, 3);
        }
        // Kept after the restart: numbered after the earlier ones.
        payloads.keep_durably(&envelopes[4..]).unwrap();
        drop(payloads);
        let payloads = Payloads::open(dir.path()).unwrap();
        assert_eq!(payloads.get(&envelopes[4].0), Some(envelopes[4].1.clone()));
        assert_eq!(payloads.inner.lock().next_sequence, 4);
    }

    #[test]
    fn envelopes_dropped_past_the_bounds_leave_the_disk_too() {
        // Goal: the store on disk is bounded as memory is: an ordered
        // envelope dropped from memory before its block was written does
        // not come back after a restart.
        let dir = tempfile::tempdir().unwrap();
        let payloads = Payloads::open(dir.path()).unwrap();
        let first = Bytes::from_static(b"first");
        payloads
            .keep_durably(&[(digest(&first), first.clone())])
            .unwrap();
        payloads.ordered(digest(&first), &first);
        for n in 0..ORDERED_KEPT_MAX {
            let envelope = Bytes::from(n.to_le_bytes().to_vec());
            payloads.keep(digest(&envelope), envelope.clone());
            payloads.ordered(digest(&envelope), &envelope);
        }
        assert_eq!(payloads.get(&digest(&first)), None);
        drop(payloads);
        let payloads = Payloads::open(dir.path()).unwrap();
        assert_eq!(payloads.get(&digest(&first)), None);
        assert_eq!(payloads.inner.lock().by_digest.len(), 0);
    }
}
