//! A serialized identity (`msp.SerializedIdentity`, any bytes) as a
//! channel's MSPs read it: the PEM and X.509 certificate, its chain to the
//! MSP's CAs, NodeOUs and validity, through the identity cache; then a
//! signature check and the role queries.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weft_fuzz::{NOW, msps};

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("identity"),
    |data: &[u8]| {
        let serialized = Bytes::copy_from_slice(data);
        let cached = msps().deserialize(&serialized, NOW);
        let uncached = msps().validate_uncached(&serialized, NOW);
        assert_eq!(
            cached.is_ok(),
            uncached.is_ok(),
            "the identity cache and a fresh validation disagree"
        );
        if let Ok(identity) = cached {
            let _ = identity.verify(b"message", data);
            let _ = identity.is_admin();
            let _ = identity.node_role();
        }
    }
);
