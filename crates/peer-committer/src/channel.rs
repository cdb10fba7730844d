//! What validation needs to know about a channel, built from its config.

use std::sync::Arc;

use weft_msp::MspManager;
use weft_policy::{ChannelAuthority, PolicyTree};
use weft_protos::common::Config;

use crate::{Error, Result};

/// Where the endorsement policy of a namespace (a chaincode) is found.
///
/// Chaincode definitions agreed on the channel name their policies; until
/// a namespace has one, Fabric's defaults apply: `_lifecycle` needs
/// `/Channel/Application/LifecycleEndorsement` and every chaincode needs
/// `/Channel/Application/Endorsement`.
pub trait EndorsementPolicies: Send + Sync {
    /// The channel-config path of the policy that endorsements of writes to
    /// `namespace` must satisfy.
    fn policy_path(&self, namespace: &str) -> String;
}

/// Fabric's default endorsement policies (see [`EndorsementPolicies`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultEndorsementPolicies;

impl EndorsementPolicies for DefaultEndorsementPolicies {
    fn policy_path(&self, namespace: &str) -> String {
        if namespace == "_lifecycle" {
            "/Channel/Application/LifecycleEndorsement".to_owned()
        } else {
            "/Channel/Application/Endorsement".to_owned()
        }
    }
}

/// A channel's identity and policy context at one configuration: its MSPs
/// (with their identity cache) and its policy tree. Immutable; a config
/// block produces a new context, and with it a fresh identity cache.
pub struct ChannelContext {
    pub channel_id: String,
    pub msps: MspManager,
    pub policies: PolicyTree,
    pub endorsement: Arc<dyn EndorsementPolicies>,
}

impl std::fmt::Debug for ChannelContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelContext")
            .field("channel_id", &self.channel_id)
            .field("msps", &self.msps.msp_ids())
            .finish_non_exhaustive()
    }
}

impl ChannelContext {
    /// Builds the context of `config`, found in block `block` of `channel_id`.
    pub fn from_config(channel_id: &str, block: u64, config: &Config) -> Result<Self> {
        let ChannelAuthority { msps, policies } =
            ChannelAuthority::from_config(config).map_err(|e| Error::BadConfig {
                channel: channel_id.to_owned(),
                block,
                reason: e.0,
            })?;
        Ok(Self {
            channel_id: channel_id.to_owned(),
            msps,
            policies,
            endorsement: Arc::new(DefaultEndorsementPolicies),
        })
    }
}
