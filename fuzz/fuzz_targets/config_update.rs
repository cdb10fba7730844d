//! A config update (`common.ConfigUpdate`, any bytes) signed by Org1's
//! admin and broadcast to the fixture channel: read-set versions, the
//! write set's modification policies, and the next configuration built
//! and parsed as the channel's new config.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use weft_fuzz::{NOW, config_update_envelope, orderer_channel};

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("config_update"),
    |data: &[u8]| {
        let envelope = config_update_envelope(data).encode_to_vec().into();
        let _ = orderer_channel().admit(envelope, weft_fuzz::peer0().as_ref(), NOW);
    }
);
