//! A proposal (any bytes), signed by the fixture's client and answered by
//! an endorser joined to the fixture channel: decode, TxID, the channel's
//! Writers policy, replay check, then simulation by the built-in
//! chaincodes and the signed endorsement.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weft_fuzz::harness::endorser;
use weft_fuzz::user1;
use weft_protos::protos::SignedProposal;

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("proposal"),
    |data: &[u8]| {
        let signed = SignedProposal {
            proposal_bytes: Bytes::copy_from_slice(data),
            signature: user1().sign(data).unwrap().into(),
        };
        let (endorser, runtime) = endorser();
        let response = runtime.block_on(endorser.answer(signed));
        let status = response.response.map_or(0, |response| response.status);
        assert!(
            response.endorsement.is_none() || (200..400).contains(&status),
            "an endorsement came with status {status}"
        );
    }
);
