//! A joined channel for the endorser targets: [`crate::CHANNEL`] with its
//! real MSPs and policies, checked through the same `ChannelContext`
//! methods the peer uses, and a world state and a block store on disk.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use weft_ledger::{BlockStore, StoreConfig};
use weft_msp::UnixTime;
use weft_peer_endorser::{ChannelView, Endorser, JoinedChannel, PrivateWrites};
use weft_policy::SignaturePolicy;
use weft_statedb::VersionedState;
use weft_statedb::memory::{MemoryOptions, MemoryState};

use crate::{context, peer0, scratch};

/// [`crate::CHANNEL`] as the endorser sees it, checked as the peer checks
/// it.
pub struct FuzzChannel {
    state: MemoryState,
    blocks: Arc<BlockStore>,
    committed: tokio::sync::watch::Sender<u64>,
}

impl ChannelView for FuzzChannel {
    fn organisations(&self) -> Vec<String> {
        context().application_orgs().keys().cloned().collect()
    }

    fn is_admin(&self, creator: &Bytes, msp_id: &str) -> bool {
        context().is_admin(creator, msp_id, crate::NOW)
    }

    fn creator_satisfies(&self, creator: &Bytes, policy: &SignaturePolicy) -> bool {
        context().creator_satisfies(creator, policy, crate::NOW)
    }
}

impl JoinedChannel for FuzzChannel {
    fn check_signer(
        &self,
        policy: &str,
        creator: &Bytes,
        data: &Bytes,
        signature: &Bytes,
        now: UnixTime,
    ) -> Result<(), String> {
        context().check_signer(policy, creator, data, signature, now)
    }

    fn satisfies_endorsement(&self, chaincode: &str, organisations: &[String]) -> bool {
        context().satisfied_by_organisations(chaincode, organisations)
    }

    fn state(&self) -> &dyn VersionedState {
        &self.state
    }

    fn blocks(&self) -> &Arc<BlockStore> {
        &self.blocks
    }

    fn committed_height(&self) -> tokio::sync::watch::Receiver<u64> {
        self.committed.subscribe()
    }

    fn keep_private_writes(&self, tx_id: &str, writes: &PrivateWrites) -> Result<(), String> {
        writes.keep_in(tx_id, &self.blocks)
    }

    fn is_collection_member(&self, namespace: &str, collection: &str, msp_id: &str) -> bool {
        context().keeps_collection(namespace, collection, msp_id)
    }
}

/// An endorser signing as peer0 with the built-in chaincodes, joined to
/// [`FuzzChannel`], and the runtime it answers on.
pub fn endorser() -> &'static (Arc<Endorser>, tokio::runtime::Runtime) {
    static ENDORSER: OnceLock<(Arc<Endorser>, tokio::runtime::Runtime)> = OnceLock::new();
    ENDORSER.get_or_init(|| {
        let dir = scratch().join("endorser");
        let channel = FuzzChannel {
            state: MemoryState::open(&dir.join("state"), MemoryOptions::default()).unwrap(),
            blocks: Arc::new(BlockStore::open(&StoreConfig::new(dir.join("blocks"))).unwrap()),
            committed: tokio::sync::watch::Sender::new(0),
        };
        let endorser = Endorser::new(peer0().clone(), weft_peer_endorser::builtin::builtins());
        endorser.join(crate::CHANNEL, Arc::new(channel));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        (Arc::new(endorser), runtime)
    })
}
