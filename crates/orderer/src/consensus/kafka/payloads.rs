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

/// A channel's envelopes, by the SHA-256 of their bytes.
#[derive(Debug, Default)]
pub(crate) struct Payloads {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_digest: HashMap<Digest, Bytes>,
    /// Digests of envelopes already ordered, oldest first.
    ordered: VecDeque<Digest>,
    ordered_bytes: usize,
}

impl Payloads {
    /// Keeps `envelope`, whose digest is `digest`.
    pub fn keep(&self, digest: Digest, envelope: Bytes) {
        self.inner.lock().by_digest.insert(digest, envelope);
    }

    /// The envelope of `digest`, if held.
    pub fn get(&self, digest: &Digest) -> Option<Bytes> {
        self.inner.lock().by_digest.get(digest).cloned()
    }

    /// Marks the envelope of `digest` as ordered (its ID was read from the
    /// partition): it is kept among the most recent ones and dropped once
    /// older than the retention allows.
    pub fn ordered(&self, digest: Digest) {
        let mut inner = self.inner.lock();
        let Some(size) = inner.by_digest.get(&digest).map(Bytes::len) else {
            return;
        };
        inner.ordered.push_back(digest);
        inner.ordered_bytes += size;
        while inner.ordered.len() > ORDERED_KEPT_MAX || inner.ordered_bytes > ORDERED_BYTES_MAX {
            let Some(oldest) = inner.ordered.pop_front() else {
                break;
            };
            if let Some(dropped) = inner.by_digest.remove(&oldest) {
                inner.ordered_bytes -= dropped.len();
            }
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
        assert_eq!(payloads.get(&digest(&pending)), Some(pending));
    }
}
