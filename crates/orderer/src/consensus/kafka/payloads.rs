//! The envelopes a Kafka channel's orderer holds when only their IDs go
//! through Kafka (FastFabric): those it received from clients or from the
//! other orderers, until their ID is read back from the partition, and
//! then the most recent ones for a while, for orderers that read the
//! partition later (a restarted one catching up).
//!
//! They are kept on disk (a RocksDB at `kafka/<channel>/` in the data
//! directory) as well as in memory, so that an orderer killed after it
//! took an envelope still has it when it starts again: an envelope is
//! lost only if every orderer that took it loses its disk. Envelopes that
//! must survive a crash (those a client is about to hear SUCCESS for, and
//! those another orderer hands over) are written with an fsync
//! ([`Payloads::keep_durably`]); the bookkeeping (which are ordered, which
//! were dropped) is written without one, since a lost update only keeps
//! an envelope a while longer.
//!
//! On disk: `e<digest>` holds an envelope; `q<sequence>` the digest, size
//! and ordered flag of the envelope kept `sequence`-th, so that the order
//! in which envelopes are dropped survives a restart without reading
//! them.

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

/// The prefix of an envelope's key (then its digest).
const ENVELOPE: u8 = b'e';
/// The prefix of a kept envelope's place in the order of keeping (then
/// the sequence number, big-endian).
const SEQUENCE: u8 = b'q';

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
    /// started: those are read from disk when asked for.
    envelope: Option<Bytes>,
    size: usize,
    ordered: bool,
    sequence: u64,
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
    /// Entries whose ordered flag turned on.
    ordered: Vec<(u64, Digest, usize)>,
    /// Entries dropped.
    dropped: Vec<(u64, Digest)>,
}

fn envelope_key(digest: &Digest) -> [u8; 33] {
    let mut key = [ENVELOPE; 33];
    key[1..].copy_from_slice(digest);
    key
}

fn sequence_key(sequence: u64) -> [u8; 9] {
    let mut key = [SEQUENCE; 9];
    key[1..].copy_from_slice(&sequence.to_be_bytes());
    key
}

/// A `q` entry's value: digest, size (little-endian u64), ordered flag.
fn sequence_value(digest: &Digest, size: usize, ordered: bool) -> [u8; 41] {
    let mut value = [0u8; 41];
    value[..32].copy_from_slice(digest);
    value[32..40].copy_from_slice(&(size as u64).to_le_bytes());
    value[40] = u8::from(ordered);
    value
}

impl Payloads {
    /// The store at `path`, created if new, with the envelopes an earlier
    /// run kept there.
    pub fn open(path: &Path) -> Result<Self, String> {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        let db = rocksdb::DB::open(&options, path)
            .map_err(|e| format!("opening the envelope store at {}: {e}", path.display()))?;
        let mut inner = Inner::default();
        let mut unreadable = Vec::new();
        for item in db.prefix_iterator([SEQUENCE]) {
            let (key, value) =
                item.map_err(|e| format!("reading the envelope store at {}: {e}", path.display()))?;
            if key.first() != Some(&SEQUENCE) {
                break;
            }
            let (Ok(sequence), Ok(digest), Ok(size)) = (
                key[1..].try_into().map(u64::from_be_bytes),
                Digest::try_from(value.get(..32).unwrap_or_default()),
                value
                    .get(32..40)
                    .unwrap_or_default()
                    .try_into()
                    .map(u64::from_le_bytes),
            ) else {
                unreadable.push(key.to_vec());
                continue;
            };
            let ordered = value.get(40) == Some(&1);
            inner.next_sequence = sequence + 1;
            if inner.by_digest.contains_key(&digest) {
                unreadable.push(key.to_vec());
                continue;
            }
            inner.hold(digest, None, size as usize, sequence);
            if ordered {
                inner.mark_ordered(digest);
            }
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
                unordered = inner.unordered_count,
                ordered = inner.ordered.len(),
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

    /// Keeps `envelope`, whose digest is `digest`, without waiting for the
    /// disk: for an envelope fetched from another orderer, which holds it.
    pub fn keep(&self, digest: Digest, envelope: Bytes) {
        let changes = self.inner.lock().keep([(digest, envelope)]);
        if let Err(error) = self.write(changes, false) {
            tracing::warn!(%error, "keeping a fetched envelope on disk");
        }
    }

    /// Keeps `envelopes` (with their digests), returning once they are on
    /// disk: what a SUCCESS, or another orderer, counts on. Blocks on the
    /// fsync.
    pub fn keep_durably(&self, envelopes: &[(Digest, Bytes)]) -> Result<(), String> {
        let changes = self.inner.lock().keep(envelopes.iter().cloned());
        // An envelope held already is written again, so that the fsync
        // covers it whoever kept it first.
        let fresh: std::collections::HashSet<Digest> =
            changes.kept.iter().map(|(_, digest, _)| *digest).collect();
        let again = envelopes
            .iter()
            .filter(|(digest, _)| !fresh.contains(digest));
        let mut batch = rocksdb::WriteBatch::default();
        for (digest, envelope) in again {
            batch.put(envelope_key(digest), envelope);
        }
        self.write_with(changes, batch, true)
    }

    /// The envelope of `digest`, if held.
    pub fn get(&self, digest: &Digest) -> Option<Bytes> {
        match self.inner.lock().by_digest.get(digest) {
            None => return None,
            Some(Held {
                envelope: Some(envelope),
                ..
            }) => return Some(envelope.clone()),
            Some(Held { envelope: None, .. }) => {}
        }
        let disk = self.disk.as_ref()?;
        match disk.get(envelope_key(digest)) {
            Ok(found) => found.map(Bytes::from),
            Err(error) => {
                tracing::warn!(%error, "reading an envelope from the envelope store");
                None
            }
        }
    }

    /// Marks the envelope of `digest` as ordered (its ID was read from the
    /// partition): it is kept among the most recent ones and dropped once
    /// older than the retention allows.
    pub fn ordered(&self, digest: Digest) {
        let mut changes = Changes::default();
        {
            let mut inner = self.inner.lock();
            if let Some(held) = inner.mark_ordered(digest) {
                changes.ordered.push(held);
            }
            inner.enforce_bounds(&mut changes);
        }
        if let Err(error) = self.write(changes, false) {
            tracing::warn!(%error, "recording an ordered envelope in the envelope store");
        }
    }

    fn write(&self, changes: Changes, sync: bool) -> Result<(), String> {
        self.write_with(changes, rocksdb::WriteBatch::default(), sync)
    }

    fn write_with(
        &self,
        changes: Changes,
        mut batch: rocksdb::WriteBatch,
        sync: bool,
    ) -> Result<(), String> {
        let Some(disk) = &self.disk else {
            return Ok(());
        };
        for (sequence, digest, envelope) in &changes.kept {
            batch.put(envelope_key(digest), envelope);
            batch.put(
                sequence_key(*sequence),
                sequence_value(digest, envelope.len(), false),
            );
        }
        for (sequence, digest, size) in &changes.ordered {
            batch.put(sequence_key(*sequence), sequence_value(digest, *size, true));
        }
        for (sequence, digest) in &changes.dropped {
            batch.delete(envelope_key(digest));
            batch.delete(sequence_key(*sequence));
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
    /// Holds what is not held yet; the changes to write.
    fn keep(&mut self, envelopes: impl IntoIterator<Item = (Digest, Bytes)>) -> Changes {
        let mut changes = Changes::default();
        for (digest, envelope) in envelopes {
            if self.by_digest.contains_key(&digest) {
                continue;
            }
            let sequence = self.next_sequence;
            self.next_sequence += 1;
            self.hold(digest, Some(envelope.clone()), envelope.len(), sequence);
            changes.kept.push((sequence, digest, envelope));
        }
        self.enforce_bounds(&mut changes);
        changes
    }

    fn hold(&mut self, digest: Digest, envelope: Option<Bytes>, size: usize, sequence: u64) {
        self.unordered.push_back(digest);
        self.unordered_count += 1;
        self.unordered_bytes += size;
        self.by_digest.insert(
            digest,
            Held {
                envelope,
                size,
                ordered: false,
                sequence,
            },
        );
    }

    /// Marks `digest` ordered; its sequence, digest and size if it was
    /// held and not ordered yet.
    fn mark_ordered(&mut self, digest: Digest) -> Option<(u64, Digest, usize)> {
        let held = self.by_digest.get_mut(&digest)?;
        if held.ordered {
            return None;
        }
        held.ordered = true;
        let (size, sequence) = (held.size, held.sequence);
        self.unordered_count -= 1;
        self.unordered_bytes -= size;
        self.ordered.push_back(digest);
        self.ordered_bytes += size;
        Some((sequence, digest, size))
    }

    /// Drops the oldest envelopes past the bounds, recording them in
    /// `changes`.
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
                changes.dropped.push((dropped.sequence, oldest));
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
                changes.dropped.push((dropped.sequence, oldest));
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
        payloads.ordered(digest(&first));
        assert_eq!(payloads.get(&digest(&first)), Some(first.clone()));
        for n in 0..ORDERED_KEPT_MAX {
            let envelope = Bytes::from(n.to_le_bytes().to_vec());
            payloads.keep(digest(&envelope), envelope.clone());
            payloads.ordered(digest(&envelope));
        }
        assert_eq!(payloads.get(&digest(&first)), None);
        let newest = Bytes::from((ORDERED_KEPT_MAX - 1).to_le_bytes().to_vec());
        assert_eq!(payloads.get(&digest(&newest)), Some(newest));
        // Not yet ordered: never dropped.
        let pending = Bytes::from_static(b"pending");
        payloads.keep(digest(&pending), pending.clone());
        let last = Bytes::from_static(b"last");
        payloads.keep(digest(&last), last.clone());
        payloads.ordered(digest(&last));
        assert_eq!(payloads.get(&digest(&pending)), Some(pending.clone()));
        // Kept or ordered twice (a resubmitted envelope): counted once.
        payloads.keep(digest(&last), last.clone());
        payloads.ordered(digest(&last));
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
    fn envelopes_kept_on_disk_survive_a_restart_with_their_order_and_flags() {
        // Goal: an orderer started again still holds what it took, knows
        // which were ordered, and drops in the same order as before.
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
            payloads.keep(envelopes[3].0, envelopes[3].1.clone());
            payloads.ordered(envelopes[1].0);
            // Kept again durably (a client sent it twice): once on disk.
            payloads.keep_durably(&envelopes[1..2]).unwrap();
        }
        let payloads = Payloads::open(dir.path()).unwrap();
        for (digest, envelope) in &envelopes[..4] {
            assert_eq!(payloads.get(digest).as_ref(), Some(envelope));
        }
        assert_eq!(payloads.get(&envelopes[4].0), None);
        {
            let inner = payloads.inner.lock();
            assert_eq!(inner.unordered_count, 3);
            assert_eq!(
                inner.unordered_bytes,
                [0, 2, 3]
                    .map(|n| envelopes[n].1.len())
                    .iter()
                    .sum::<usize>()
            );
            assert_eq!(inner.ordered, [envelopes[1].0]);
            assert_eq!(inner.next_sequence, 4);
        }
        // Kept after the restart: numbered after the earlier ones.
        payloads.keep_durably(&envelopes[4..]).unwrap();
        drop(payloads);
        let payloads = Payloads::open(dir.path()).unwrap();
        assert_eq!(payloads.get(&envelopes[4].0), Some(envelopes[4].1.clone()));
        assert_eq!(payloads.inner.lock().next_sequence, 5);
    }

    #[test]
    fn envelopes_dropped_past_the_bounds_leave_the_disk_too() {
        // Goal: the store on disk is bounded as memory is; a dropped
        // envelope does not come back after a restart.
        let dir = tempfile::tempdir().unwrap();
        let payloads = Payloads::open(dir.path()).unwrap();
        let first = Bytes::from_static(b"first");
        payloads
            .keep_durably(&[(digest(&first), first.clone())])
            .unwrap();
        payloads.ordered(digest(&first));
        for n in 0..ORDERED_KEPT_MAX {
            let envelope = Bytes::from(n.to_le_bytes().to_vec());
            payloads.keep(digest(&envelope), envelope.clone());
            payloads.ordered(digest(&envelope));
        }
        drop(payloads);
        let payloads = Payloads::open(dir.path()).unwrap();
        assert_eq!(payloads.get(&digest(&first)), None);
        assert_eq!(payloads.inner.lock().ordered.len(), ORDERED_KEPT_MAX);
    }
}
