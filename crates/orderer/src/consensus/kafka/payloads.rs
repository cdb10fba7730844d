//! The envelopes a Kafka channel's orderer holds when only their IDs go
//! through Kafka (FastFabric): those it received from clients or from the
//! other orderers, until their ID is read back from the partition, and
//! then the most recent ones for a while, for orderers that read the
//! partition later (a restarted one catching up).

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use parking_lot::Mutex;

use super::records::Digest;

/// Envelopes kept after they were ordered, for orderers that lag.
const ORDERED_KEPT_MAX: usize = 65_536;
/// Bytes of ordered envelopes kept at most.
const ORDERED_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Bytes of envelopes not ordered yet kept at most: an envelope whose ID
/// is never published (its orderer failed to publish it after sharing
/// it) must not stay forever. Far above what is in flight.
const UNORDERED_BYTES_MAX: usize = 512 * 1024 * 1024;

/// A channel's envelopes, by the SHA-256 of their bytes.
#[derive(Debug, Default)]
pub(crate) struct Payloads {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Held {
    envelope: Bytes,
    ordered: bool,
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
}

impl Payloads {
    /// Keeps `envelope`, whose digest is `digest`.
    pub fn keep(&self, digest: Digest, envelope: Bytes) {
        let mut inner = self.inner.lock();
        if inner.by_digest.contains_key(&digest) {
            return;
        }
        inner.unordered.push_back(digest);
        inner.unordered_count += 1;
        inner.unordered_bytes += envelope.len();
        inner.by_digest.insert(
            digest,
            Held {
                envelope,
                ordered: false,
            },
        );
        while inner.unordered_bytes > UNORDERED_BYTES_MAX {
            let Some(oldest) = inner.unordered.pop_front() else {
                break;
            };
            let unordered = inner
                .by_digest
                .get(&oldest)
                .is_some_and(|held| !held.ordered);
            if unordered && let Some(dropped) = inner.by_digest.remove(&oldest) {
                inner.unordered_count -= 1;
                inner.unordered_bytes -= dropped.envelope.len();
                tracing::warn!(
                    "dropping an envelope whose ID was never ordered, the oldest of more than {UNORDERED_BYTES_MAX} bytes held"
                );
            }
        }
    }

    /// The envelope of `digest`, if held.
    pub fn get(&self, digest: &Digest) -> Option<Bytes> {
        self.inner
            .lock()
            .by_digest
            .get(digest)
            .map(|held| held.envelope.clone())
    }

    /// Marks the envelope of `digest` as ordered (its ID was read from the
    /// partition): it is kept among the most recent ones and dropped once
    /// older than the retention allows.
    pub fn ordered(&self, digest: Digest) {
        let mut inner = self.inner.lock();
        let Some(held) = inner.by_digest.get_mut(&digest) else {
            return;
        };
        if held.ordered {
            return;
        }
        held.ordered = true;
        let size = held.envelope.len();
        inner.unordered_count -= 1;
        inner.unordered_bytes -= size;
        inner.ordered.push_back(digest);
        inner.ordered_bytes += size;
        while inner.ordered.len() > ORDERED_KEPT_MAX || inner.ordered_bytes > ORDERED_BYTES_MAX {
            let Some(oldest) = inner.ordered.pop_front() else {
                break;
            };
            if let Some(dropped) = inner.by_digest.remove(&oldest) {
                inner.ordered_bytes -= dropped.envelope.len();
            }
        }
        // The queue of unordered digests, swept of ordered ones once they
        // are most of it.
        if inner.unordered.len() > 2 * inner.unordered_count + 1024 {
            let Inner {
                unordered,
                by_digest,
                ..
            } = &mut *inner;
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
}
