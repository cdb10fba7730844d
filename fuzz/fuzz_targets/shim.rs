//! A chaincode's messages to the peer during one transaction
//! (length-delimited `ChaincodeMessage`s, any bytes), served as a chaincode
//! connection serves them: state reads and writes, composite-key and paged
//! ranges, query iteration, history and JSON queries, over a world state
//! with JSON and plain values.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weft_fuzz::{kv_proposal, kv_state, length_delimited};
use weft_peer_endorser::Stub;
use weft_peer_endorser::external::serve_for_fuzzing;
use weft_protos::protos::ChaincodeMessage;
use weft_protos::protos::chaincode_message::Type as MessageType;
use weft_protos::tx::ReceivedProposal;
use weft_statedb::memory::MemoryState;
use weft_statedb::{Height, VersionedState};

fn state() -> &'static MemoryState {
    static STATE: OnceLock<MemoryState> = OnceLock::new();
    STATE.get_or_init(|| {
        let entries = (0..8u64).flat_map(|n| {
            let value = if n % 2 == 0 {
                format!("{{\"size\":{n},\"owner\":\"o{}\"}}", n % 3)
            } else {
                format!("v{n}")
            };
            let version = Height::new(1, n);
            [
                (format!("k{n:03}"), Bytes::from(value), version),
                (format!("\u{0}asset\u{0}k{n}\u{0}"), Bytes::new(), version),
            ]
        });
        kv_state(entries, Height::new(1, 8))
    })
}

fn proposal() -> &'static ReceivedProposal {
    static PROPOSAL: OnceLock<ReceivedProposal> = OnceLock::new();
    PROPOSAL.get_or_init(|| {
        let signed = weft_fuzz::signed_proposal(&kv_proposal("k1", "v1"));
        ReceivedProposal::decode(&signed).unwrap()
    })
}

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("shim"),
    |data: &[u8]| {
        let requests: Vec<ChaincodeMessage> = length_delimited(data);
        let snapshot = state().snapshot();
        let mut stub = Stub::new(proposal(), "kv", snapshot.as_ref());
        let answers = serve_for_fuzzing(&mut stub, requests.iter().cloned());
        assert_eq!(answers.len(), requests.len());
        for (request, answer) in requests.iter().zip(&answers) {
            assert_eq!(answer.txid, request.txid, "an answer names another transaction");
            assert!(
                answer.r#type == MessageType::Response as i32
                    || answer.r#type == MessageType::Error as i32
            );
        }
    }
);
