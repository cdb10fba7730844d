//! The fuzz targets' way in (`fuzz/`, with the `fuzzing` feature): what
//! Broadcast does with one envelope's bytes before a consenter sees it.

use bytes::Bytes;
use weft_msp::UnixTime;
use weft_protos::block::config_of_block;
use weft_protos::common::Block;
use weft_protos::tx::Sign;
use weft_protos::view::{Limits, TxEnvelope};

use crate::admission::admit;
use crate::channel_config::ChannelConfig;

/// A channel as its genesis block configures it.
#[derive(Debug)]
pub struct FuzzedChannel {
    config: ChannelConfig,
}

impl FuzzedChannel {
    /// The channel of `genesis`, or why its config is not usable.
    pub fn from_genesis(genesis: &Block) -> Result<Self, String> {
        let (channel_id, config) =
            config_of_block(genesis).ok_or("the block holds no config transaction")?;
        let config = ChannelConfig::new(&channel_id, 0, config).map_err(|e| e.to_string())?;
        Ok(Self { config })
    }

    /// Decodes and admits one Broadcast envelope as the orderer would
    /// (normal transactions and config updates alike); the refusal's words
    /// on failure.
    pub fn admit(&self, envelope: Bytes, signer: &dyn Sign, now: UnixTime) -> Result<(), String> {
        let view = TxEnvelope::decode_for_ordering(envelope, Limits::default())
            .map_err(|e| format!("malformed envelope: {e}"))?;
        admit(&view, &self.config, signer, now)
            .map(drop)
            .map_err(|refusal| format!("{:?}: {}", refusal.status, refusal.info))
    }
}
