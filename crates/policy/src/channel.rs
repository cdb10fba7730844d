//! Who may do what on a channel: the MSPs and the policy tree of one
//! channel configuration, built together from a `common.Config`.
//!
//! Orderers (Broadcast Writers, Deliver Readers, BlockValidation) and peers
//! (endorsement, Deliver, block signatures) both ask the same questions of
//! the same config, so both build this one value from it.

use std::collections::BTreeMap;

use prost::Message;
use weft_msp::{Msp, MspManager, UnixTime};
use weft_protos::common::{Config, ConfigGroup};
use weft_protos::msp::{FabricMspConfig, MspConfig};

use crate::{PolicyError, PolicyTree, SignedData};

/// The config groups whose organisations contribute MSPs.
const ORG_SECTIONS: [&str; 2] = ["Orderer", APPLICATION];
const APPLICATION: &str = "Application";

/// A channel configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("channel config: {0}")]
pub struct ConfigError(pub String);

/// The MSPs (with their identity cache) and policies of one channel config.
/// Immutable: a config change builds a new one, and with it a fresh cache.
#[derive(Debug)]
pub struct ChannelAuthority {
    pub msps: MspManager,
    pub policies: PolicyTree,
    /// The application organisations: MSP ID → name of its config group
    /// (under `/Channel/Application`).
    pub application_orgs: BTreeMap<String, String>,
}

impl ChannelAuthority {
    /// Builds the authority of a channel config.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let root = config
            .channel_group
            .as_ref()
            .ok_or_else(|| ConfigError("the config has no channel group".to_owned()))?;
        Self::from_channel_group(root)
    }

    /// Builds the authority of a channel's root config group.
    pub fn from_channel_group(root: &ConfigGroup) -> Result<Self, ConfigError> {
        let mut msps = Vec::new();
        let mut application_orgs = BTreeMap::new();
        for section in ORG_SECTIONS {
            let Some(group) = root.groups.get(section) else {
                continue;
            };
            for (name, org) in &group.groups {
                let msp = org_msp(org)
                    .map_err(|reason| ConfigError(format!("{section}/{name}: {reason}")))?;
                if section == APPLICATION {
                    application_orgs.insert(msp.id().to_owned(), name.clone());
                }
                msps.push(msp);
            }
        }
        let policies = PolicyTree::from_config(root).map_err(|e| ConfigError(e.to_string()))?;
        Ok(Self {
            msps: MspManager::new(msps),
            policies,
            application_orgs,
        })
    }

    /// Evaluates the policy at `path` (such as `/Channel/Writers`) against
    /// `signatures` at time `now`.
    pub fn evaluate(
        &self,
        path: &str,
        signatures: &[SignedData],
        now: UnixTime,
    ) -> Result<(), PolicyError> {
        self.policies.evaluate(path, signatures, &self.msps, now)
    }
}

/// The MSP of an organisation's config group (its `MSP` value).
fn org_msp(org: &ConfigGroup) -> Result<Msp, String> {
    let value = org.values.get("MSP").ok_or("no MSP value")?;
    let msp_config =
        MspConfig::decode(value.value.clone()).map_err(|e| format!("MSP value: {e}"))?;
    if msp_config.r#type != 0 {
        return Err(format!(
            "MSP type {} is not supported (X.509 only)",
            msp_config.r#type
        ));
    }
    let fabric =
        FabricMspConfig::decode(msp_config.config).map_err(|e| format!("FabricMSPConfig: {e}"))?;
    Msp::from_config(fabric).map_err(|e| e.to_string())
}
