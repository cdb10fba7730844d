//! A transaction's payload, signed by the fixture's client and committed
//! in a block of its own: decode of every layer, the stage-1 checks
//! (header, creator, TxID, proposal hash, endorsements against the
//! channel's policies), duplicate TxIDs, MVCC against a world state, and
//! the update batch.
#![no_main]

use std::collections::HashSet;
use std::sync::OnceLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use weft_fuzz::{NOW, context, kv_state, signed_envelope, user1};
use weft_peer_committer::TxValidationCode;
use weft_peer_committer::checks::check_block;
use weft_peer_committer::key_policies::check_key_level_policies;
use weft_peer_committer::mvcc::{mark_duplicate_tx_ids, update_batch, validate_block};
use weft_protos::block::new_block;
use weft_protos::view::{DecodedBlock, Limits};
use weft_statedb::Height;
use weft_statedb::memory::MemoryState;

fn state() -> &'static MemoryState {
    static STATE: OnceLock<MemoryState> = OnceLock::new();
    STATE.get_or_init(|| {
        let entries = (0..16).map(|n| {
            let value = Bytes::from(format!("v{n}"));
            (format!("k{n}"), value, Height::new(1, n))
        });
        kv_state(entries, Height::new(1, 16))
    })
}

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("envelope"),
    |data: &[u8]| {
        let envelope = signed_envelope(data, user1());
        let block = new_block(2, &[0; 32], vec![Bytes::from(envelope.encode_to_vec())]);
        let Ok(decoded) = DecodedBlock::from_block(block, Limits::default()) else {
            return;
        };
        let mut codes = check_block(&decoded, context(), NOW);
        mark_duplicate_tx_ids(&decoded, &mut codes, |_| false, &mut HashSet::new());
        check_key_level_policies(&decoded, &mut codes, state(), context(), NOW).unwrap();
        validate_block(&decoded, &mut codes, state()).unwrap();
        let batch = update_batch(&decoded, &codes, state()).unwrap();
        if codes[0] != TxValidationCode::Valid {
            assert!(batch.is_empty(), "an invalid transaction's writes reached the batch");
        }
    }
);
