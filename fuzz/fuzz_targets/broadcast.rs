//! An envelope (any bytes) sent to the orderer's Broadcast on the fixture
//! channel: decode, size, the Writers policy, and for config updates the
//! computation of the channel's next configuration.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weft_fuzz::{NOW, genesis};
use weft_orderer::fuzzing::FuzzedChannel;

fn channel() -> &'static FuzzedChannel {
    static CHANNEL: OnceLock<FuzzedChannel> = OnceLock::new();
    CHANNEL.get_or_init(|| FuzzedChannel::from_genesis(genesis()).unwrap())
}

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("broadcast"),
    |data: &[u8]| {
        let _ = channel().admit(Bytes::copy_from_slice(data), weft_fuzz::peer0().as_ref(), NOW);
    }
);
