//! Signatures this process made, remembered briefly so that it need not
//! verify them again.
//!
//! A peer that hosts both an endorser and a committer signs an endorsement
//! and, a moment later, finds that endorsement in a block and verifies it:
//! an ECDSA verification, the most expensive step of validation, spent on
//! a signature the peer made itself. [`OwnSignatures`] remembers each
//! signature a [`RememberingSigner`] produces, keyed by the signature's
//! bytes, with the SHA-256 digest of the message it signed. A signature is
//! *recognised* when the same bytes come back over a message with the same
//! digest and with an identity holding the signer's public key: then it is
//! exactly a signature this key made over this message, and verifying it
//! would succeed. Anything else is verified as usual, so every peer reaches
//! the same verdict, whether it endorsed the transaction or not.
//!
//! Memory is bounded: signatures live in two generations of at most half
//! the capacity each; when the newer one fills up, the older is dropped.
//! At the default capacity a peer remembers its last 32,768 to 65,536
//! endorsements, several seconds of its busiest endorsing, far longer than
//! an endorsement takes to reach a block.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use weft_protos::tx::{Sign, SignError};

use crate::{Identity, Signer};

/// Signatures remembered by default.
pub const DEFAULT_CAPACITY: usize = 65_536;

/// The signatures one key made recently; see the [module docs](self).
#[derive(Debug)]
pub struct OwnSignatures {
    public_key: Vec<u8>,
    generation_size: usize,
    generations: Mutex<Generations>,
    recognised: AtomicU64,
}

#[derive(Debug, Default)]
struct Generations {
    newer: HashMap<Box<[u8]>, [u8; 32]>,
    older: HashMap<Box<[u8]>, [u8; 32]>,
}

impl OwnSignatures {
    /// An empty memory for the signatures of `signer`'s key, holding up
    /// to `capacity` of them (at least 2).
    pub fn new(signer: &Signer, capacity: usize) -> Self {
        Self {
            public_key: signer.certificate().public_key().to_vec(),
            generation_size: (capacity / 2).max(1),
            generations: Mutex::new(Generations::default()),
            recognised: AtomicU64::new(0),
        }
    }

    /// Remembers that `signature` was made over `message` by this key.
    pub fn remember(&self, message: &[u8], signature: &[u8]) {
        let digest: [u8; 32] = Sha256::digest(message).into();
        let mut generations = self.generations.lock();
        if generations.newer.len() >= self.generation_size {
            // The older generation's table is reused, not grown again from
            // nothing (a rehash at every doubling, under this lock).
            let generations = &mut *generations;
            std::mem::swap(&mut generations.newer, &mut generations.older);
            generations.newer.clear();
        }
        generations.newer.insert(signature.into(), digest);
    }

    /// Whether `signature` by `identity` over `message` is one this key
    /// made and still remembered; if so, it verifies.
    pub fn recognises(&self, identity: &Identity, message: &[u8], signature: &[u8]) -> bool {
        if identity.certificate().public_key() != self.public_key.as_slice() {
            return false;
        }
        let remembered = {
            let generations = self.generations.lock();
            generations
                .newer
                .get(signature)
                .or_else(|| generations.older.get(signature))
                .copied()
        };
        let recognised =
            remembered.is_some_and(|digest| digest == <[u8; 32]>::from(Sha256::digest(message)));
        if recognised {
            self.recognised.fetch_add(1, Ordering::Relaxed);
        }
        recognised
    }

    /// How many signatures were recognised so far.
    pub fn recognised(&self) -> u64 {
        self.recognised.load(Ordering::Relaxed)
    }
}

/// A [`Signer`] that remembers what it signs in an [`OwnSignatures`].
#[derive(Debug, Clone)]
pub struct RememberingSigner {
    signer: Arc<Signer>,
    memory: Arc<OwnSignatures>,
}

impl RememberingSigner {
    /// `signer`, remembering its signatures in a new memory of `capacity`.
    pub fn new(signer: Arc<Signer>, capacity: usize) -> Self {
        let memory = Arc::new(OwnSignatures::new(&signer, capacity));
        Self { signer, memory }
    }

    /// The memory its signatures go to, for a validator to consult.
    pub fn memory(&self) -> &Arc<OwnSignatures> {
        &self.memory
    }
}

impl Sign for RememberingSigner {
    fn identity(&self) -> Bytes {
        self.signer.serialized_identity().clone()
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignError> {
        let signature = Sign::sign(self.signer.as_ref(), message)?;
        self.memory.remember(message, &signature);
        Ok(signature)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::testing::TestOrg;
    use crate::{MspManager, NodeRole};

    struct Fixture {
        manager: MspManager,
        peer: RememberingSigner,
        peer_identity: Arc<Identity>,
        other: Signer,
    }

    fn fixture(capacity: usize) -> Fixture {
        let org = TestOrg::new("Org1MSP");
        let manager = MspManager::new([org.msp()]);
        let peer = RememberingSigner::new(Arc::new(org.signer(NodeRole::Peer)), capacity);
        let peer_identity = manager
            .deserialize(&Sign::identity(&peer), crate::now())
            .unwrap();
        Fixture {
            manager,
            peer,
            peer_identity,
            other: org.signer(NodeRole::Peer),
        }
    }

    #[test]
    fn recognises_exactly_the_signatures_it_made_over_the_same_message() {
        let fixture = fixture(DEFAULT_CAPACITY);
        let memory = fixture.peer.memory();
        let signature = Sign::sign(&fixture.peer, b"endorsed response").unwrap();
        assert!(memory.recognises(&fixture.peer_identity, b"endorsed response", &signature));
        // Recognised signatures are ones verification accepts.
        fixture
            .peer_identity
            .verify(b"endorsed response", &signature)
            .unwrap();

        assert!(!memory.recognises(&fixture.peer_identity, b"another response", &signature));
        let other_identity = fixture
            .manager
            .deserialize(fixture.other.serialized_identity(), crate::now())
            .unwrap();
        assert!(!memory.recognises(&other_identity, b"endorsed response", &signature));
        // The same key signing outside the memory: not remembered.
        let unremembered = fixture.peer_signer_plain_signature(b"endorsed response");
        assert!(!memory.recognises(&fixture.peer_identity, b"endorsed response", &unremembered));
        assert_eq!(memory.recognised(), 1);
    }

    #[test]
    fn forgets_the_oldest_signatures_beyond_its_capacity() {
        let fixture = fixture(4);
        let memory = fixture.peer.memory();
        let messages: Vec<Vec<u8>> = (0..7)
            .map(|i| format!("response {i}").into_bytes())
            .collect();
        let signatures: Vec<Vec<u8>> = messages
            .iter()
            .map(|message| Sign::sign(&fixture.peer, message).unwrap())
            .collect();
        let recognised: Vec<bool> = messages
            .iter()
            .zip(&signatures)
            .map(|(message, signature)| {
                memory.recognises(&fixture.peer_identity, message, signature)
            })
            .collect();
        // Two generations of two: the last three or four are remembered.
        assert_eq!(recognised, [false, false, false, false, true, true, true]);
    }

    impl Fixture {
        fn peer_signer_plain_signature(&self, message: &[u8]) -> Vec<u8> {
            self.peer.signer.sign(message).unwrap()
        }
    }
}
