//! An envelope (any bytes) sent to the orderer's Broadcast on the fixture
//! channel: decode, size, the Writers policy, and for config updates the
//! computation of the channel's next configuration.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weft_fuzz::{NOW, orderer_channel};

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("broadcast"),
    |data: &[u8]| {
        let _ = orderer_channel().admit(Bytes::copy_from_slice(data), weft_fuzz::peer0().as_ref(), NOW);
    }
);
