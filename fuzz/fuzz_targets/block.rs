//! A block from an orderer, committed by a peer of the fixture channel:
//! decode, hash chain, orderer signature, every transaction's checks,
//! MVCC and the writes to the block store and world state on disk.
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use prost::Message;
use weft_fuzz::{NOW, genesis, scratch};
use weft_ledger::{BlockStore, StoreConfig};
use weft_peer_committer::ChannelCommitter;
use weft_protos::common::Block;
use weft_statedb::memory::{MemoryOptions, MemoryState};

fn committer() -> &'static Mutex<ChannelCommitter> {
    static COMMITTER: OnceLock<Mutex<ChannelCommitter>> = OnceLock::new();
    COMMITTER.get_or_init(|| {
        let dir = scratch().join("committer");
        let state = MemoryState::open(&dir.join("state"), MemoryOptions::default()).unwrap();
        let blocks = BlockStore::open(&StoreConfig::new(dir.join("blocks"))).unwrap();
        let committer =
            ChannelCommitter::create(genesis().clone(), Arc::new(state), Arc::new(blocks)).unwrap();
        Mutex::new(committer)
    })
}

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("block"),
    |data: &[u8]| {
        let Ok(block) = Block::decode(data) else {
            return;
        };
        let mut committer = committer().lock().unwrap();
        let _ = committer.commit(block, NOW);
    }
);
