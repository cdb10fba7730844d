//! A signature and a message (any bytes) checked by a key that has earned
//! its verification table (weft_msp's own P-256 arithmetic) and by ring:
//! both must give the same answer, or peers whose keys are tabled and
//! peers whose keys are not would disagree on a transaction.
//!
//! Input: one byte giving the signature's length, the signature, then the
//! message.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use weft_fuzz::{NOW, msps, user1};
use weft_msp::{Identity, crypto};

/// user1's cached identity, after enough verifications to own a table.
fn tabled_user1() -> &'static Arc<Identity> {
    static IDENTITY: OnceLock<Arc<Identity>> = OnceLock::new();
    IDENTITY.get_or_init(|| {
        let identity = msps()
            .deserialize(user1().serialized_identity(), NOW)
            .unwrap();
        let signature = user1().sign(b"warm-up").unwrap();
        for _ in 0..crypto::TABLE_AFTER_USES {
            identity.verify(b"warm-up", &signature).unwrap();
        }
        identity
    })
}

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("signature"),
    |data: &[u8]| {
        let Some((&length, rest)) = data.split_first() else {
            return;
        };
        let (signature, message) = rest.split_at(usize::from(length).min(rest.len()));
        let identity = tabled_user1();
        let by_table = identity.verify(message, signature);
        let by_ring = crypto::verify(identity.certificate().public_key(), message, signature);
        assert_eq!(by_table, by_ring, "the table and ring disagree");
    }
);
