//! Proposal responses from endorsing peers (length-delimited, any bytes),
//! assembled by the Gateway into the transaction the client signs, then
//! checked as a committer checks it: the response payloads, the
//! endorsements' identities and signatures against the endorsement
//! policy, and the read/write set.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weft_fuzz::{NOW, context, kv_proposal, length_delimited, signed_envelope, user1};
use weft_peer_committer::checks::check_transaction;
use weft_protos::protos::ProposalResponse;
use weft_protos::tx::Proposal;
use weft_protos::view::{Limits, TxEnvelope};

fn proposal() -> &'static Proposal {
    static PROPOSAL: OnceLock<Proposal> = OnceLock::new();
    PROPOSAL.get_or_init(|| kv_proposal("k1", "v1"))
}

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("proposal_response"),
    |data: &[u8]| {
        let responses: Vec<ProposalResponse> = length_delimited(data);
        let Ok(payload) = proposal().transaction_payload(&responses) else {
            return;
        };
        let envelope = signed_envelope(&payload, user1());
        let raw = prost::Message::encode_to_vec(&envelope).into();
        if let Ok(transaction) = TxEnvelope::decode(raw, Limits::default()) {
            check_transaction(&transaction, context(), NOW);
        }
    }
);
