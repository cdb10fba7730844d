//! The envelopes a Kafka channel's orderer holds when only their IDs go
//! through Kafka (FastFabric): those it received from clients or from the
//! other orderers, until they are in a block, and then the most recent
//! ones for a while, for orderers that read the partition later (a
//! restarted one catching up).

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use parking_lot::Mutex;

use super::records::Digest;

/// Envelopes kept after their block was written, for orderers that lag.
const WRITTEN_KEPT_MAX: usize = 65_536;
/// Bytes of written envelopes kept at most.
const WRITTEN_BYTES_MAX: usize = 256 * 1024 * 1024;

/// A channel's envelopes, by the SHA-256 of their bytes.
#[derive(Debug, Default)]
pub(crate) struct Payloads {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_digest: HashMap<Digest, Bytes>,
    /// Digests of envelopes already in a block, oldest first.
    written: VecDeque<Digest>,
    written_bytes: usize,
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

    /// Marks the envelope of `digest` as written in a block: it is kept
    /// among the most recent ones and dropped once older than the
    /// retention allows.
    pub fn written(&self, digest: Digest) {
        let mut inner = self.inner.lock();
        let Some(size) = inner.by_digest.get(&digest).map(Bytes::len) else {
            return;
        };
        inner.written.push_back(digest);
        inner.written_bytes += size;
        while inner.written.len() > WRITTEN_KEPT_MAX || inner.written_bytes > WRITTEN_BYTES_MAX {
            let Some(oldest) = inner.written.pop_front() else {
                break;
            };
            if let Some(dropped) = inner.by_digest.remove(&oldest) {
                inner.written_bytes -= dropped.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::kafka::records::digest;

    #[test]
    fn written_envelopes_are_kept_for_a_while_then_dropped_oldest_first() {
        // Goal: an envelope stays fetchable after its block is written, so
        // a lagging orderer can still get it; memory stays bounded.
        let payloads = Payloads::default();
        let first = Bytes::from_static(b"first");
        payloads.keep(digest(&first), first.clone());
        payloads.written(digest(&first));
        assert_eq!(payloads.get(&digest(&first)), Some(first.clone()));
        for n in 0..WRITTEN_KEPT_MAX {
            let envelope = Bytes::from(n.to_le_bytes().to_vec());
            payloads.keep(digest(&envelope), envelope.clone());
            payloads.written(digest(&envelope));
        }
        assert_eq!(payloads.get(&digest(&first)), None);
        let newest = Bytes::from((WRITTEN_KEPT_MAX - 1).to_le_bytes().to_vec());
        assert_eq!(payloads.get(&digest(&newest)), Some(newest));
        // Not yet written: never dropped.
        let pending = Bytes::from_static(b"pending");
        payloads.keep(digest(&pending), pending.clone());
        let last = Bytes::from_static(b"last");
        payloads.keep(digest(&last), last.clone());
        payloads.written(digest(&last));
        assert_eq!(payloads.get(&digest(&pending)), Some(pending));
    }
}
