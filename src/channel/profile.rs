//! The input of `weft channel genesis`: Fabric's `configtx.yaml` format.
//!
//! Operators coming from Fabric keep their `configtx.yaml`: the same
//! top-level sections, YAML anchors and `<<:` merge keys, and `Profiles`, of
//! which one is chosen. Keys are Fabric's (PascalCase); a key we do not know
//! is an error naming its path, so a typo is not silently ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

/// One channel profile, after anchors and merges are resolved.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Profile {
    #[serde(default)]
    pub policies: BTreeMap<String, PolicySpec>,
    #[serde(default)]
    pub capabilities: BTreeMap<String, bool>,
    pub orderer: Option<OrdererSection>,
    pub application: Option<ApplicationSection>,
    /// System-channel keys of older configtx.yaml files: accepted, unused.
    #[serde(rename = "Consortium", default)]
    _consortium: Option<serde::de::IgnoredAny>,
    #[serde(rename = "Consortiums", default)]
    _consortiums: Option<serde::de::IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct OrdererSection {
    #[serde(default = "default_orderer_type")]
    pub orderer_type: String,
    #[serde(default)]
    pub addresses: Vec<String>,
    #[serde(default = "default_batch_timeout")]
    pub batch_timeout: String,
    #[serde(default)]
    pub batch_size: BatchSizeSpec,
    #[serde(default)]
    pub max_channels: u64,
    pub etcd_raft: Option<EtcdRaftSpec>,
    /// weft's stream mode (docs/stream-mode.md); absent: block mode.
    pub stream_mode: Option<StreamModeSpec>,
    #[serde(default)]
    pub organizations: Vec<OrganizationSpec>,
    #[serde(default)]
    pub policies: BTreeMap<String, PolicySpec>,
    #[serde(default)]
    pub capabilities: BTreeMap<String, bool>,
    /// Fabric 1.x's Kafka settings, with weft's TxID-only ordering; read
    /// when `OrdererType` is `kafka`.
    pub kafka: Option<KafkaSpec>,
}

/// `Orderer.Kafka`: the brokers (Fabric 1.x), and what goes through them
/// (weft, docs/kafka.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct KafkaSpec {
    #[serde(default)]
    pub brokers: Vec<String>,
    /// `Full` (whole envelopes, Fabric 1.x's way; the default) or `TxId`
    /// (only each envelope's ID, FastFabric's way).
    #[serde(default)]
    pub payloads: KafkaPayloadsSpec,
    /// The cluster endpoints (`host:port`) of the orderers that hand each
    /// other envelopes in `TxId` mode, over a plaintext cluster.
    #[serde(default)]
    pub orderers: Vec<String>,
    /// The same orderers with their TLS certificates, as `EtcdRaft`
    /// names its consenters: needed when the cluster runs mutual TLS.
    #[serde(default)]
    pub consenters: Vec<ConsenterSpec>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum KafkaPayloadsSpec {
    #[default]
    Full,
    TxId,
}

/// `Orderer.StreamMode`: when the orderers sign a stream channel's
/// checkpoints.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct StreamModeSpec {
    #[serde(default = "default_checkpoint_transactions")]
    pub checkpoint_transactions: u32,
    #[serde(default = "default_checkpoint_interval")]
    pub checkpoint_interval: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct BatchSizeSpec {
    #[serde(default = "default_max_message_count")]
    pub max_message_count: u32,
    #[serde(default = "default_absolute_max_bytes")]
    pub absolute_max_bytes: ByteSize,
    #[serde(default = "default_preferred_max_bytes")]
    pub preferred_max_bytes: ByteSize,
}

impl Default for BatchSizeSpec {
    fn default() -> Self {
        Self {
            max_message_count: default_max_message_count(),
            absolute_max_bytes: default_absolute_max_bytes(),
            preferred_max_bytes: default_preferred_max_bytes(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct EtcdRaftSpec {
    #[serde(default)]
    pub consenters: Vec<ConsenterSpec>,
    #[serde(default)]
    pub options: RaftOptionsSpec,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ConsenterSpec {
    pub host: String,
    pub port: u32,
    #[serde(rename = "ClientTLSCert")]
    pub client_tls_cert: PathBuf,
    #[serde(rename = "ServerTLSCert")]
    pub server_tls_cert: PathBuf,
}

/// Raft options; the defaults are configtxgen's.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct RaftOptionsSpec {
    #[serde(default = "default_tick_interval")]
    pub tick_interval: String,
    #[serde(default = "default_election_tick")]
    pub election_tick: u32,
    #[serde(default = "default_heartbeat_tick")]
    pub heartbeat_tick: u32,
    #[serde(default = "default_max_inflight_blocks")]
    pub max_inflight_blocks: u32,
    #[serde(default = "default_snapshot_interval_size")]
    pub snapshot_interval_size: ByteSize,
}

impl Default for RaftOptionsSpec {
    fn default() -> Self {
        Self {
            tick_interval: default_tick_interval(),
            election_tick: default_election_tick(),
            heartbeat_tick: default_heartbeat_tick(),
            max_inflight_blocks: default_max_inflight_blocks(),
            snapshot_interval_size: default_snapshot_interval_size(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ApplicationSection {
    #[serde(default)]
    pub organizations: Vec<OrganizationSpec>,
    #[serde(default)]
    pub policies: BTreeMap<String, PolicySpec>,
    #[serde(default)]
    pub capabilities: BTreeMap<String, bool>,
    /// API name → policy path, e.g. `_lifecycle/CommitChaincodeDefinition: /Channel/Application/Writers`.
    #[serde(rename = "ACLs", default)]
    pub acls: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct OrganizationSpec {
    /// The name of the organisation's config group.
    pub name: String,
    /// The MSP ID.
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "MSPDir")]
    pub msp_dir: PathBuf,
    #[serde(rename = "MSPType", default = "default_msp_type")]
    pub msp_type: String,
    #[serde(default)]
    pub policies: BTreeMap<String, PolicySpec>,
    #[serde(default)]
    pub orderer_endpoints: Vec<String>,
    #[serde(default)]
    pub anchor_peers: Vec<AnchorPeerSpec>,
    /// Settings of Fabric's system channel and 1.x MSPs: accepted, unused.
    #[serde(rename = "SkipAsForeign", default)]
    _skip_as_foreign: Option<serde::de::IgnoredAny>,
    #[serde(rename = "AdminPrincipal", default)]
    _admin_principal: Option<serde::de::IgnoredAny>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct AnchorPeerSpec {
    pub host: String,
    pub port: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct PolicySpec {
    /// `Signature` or `ImplicitMeta`.
    #[serde(rename = "Type")]
    pub kind: String,
    /// A policy expression (`OR('Org1MSP.member')`) or `ANY|ALL|MAJORITY <name>`.
    pub rule: String,
}

/// A byte count written as a number or with a unit (`99 MB`, `512 KB`),
/// where KB, MB and GB are powers of 1024 as in configtxgen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(n) => Ok(Self(n)),
            Raw::Text(text) => parse_byte_size(&text)
                .map(Self)
                .map_err(serde::de::Error::custom),
        }
    }
}

fn parse_byte_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size like \"512 KB\""))?;
    let multiplier = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {text:?}; use B, KB, MB or GB"
            ));
        }
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn default_orderer_type() -> String {
    "etcdraft".to_owned()
}
fn default_batch_timeout() -> String {
    "2s".to_owned()
}
fn default_checkpoint_transactions() -> u32 {
    100
}
fn default_checkpoint_interval() -> String {
    "2ms".to_owned()
}
fn default_max_message_count() -> u32 {
    500
}
fn default_absolute_max_bytes() -> ByteSize {
    ByteSize(10 << 20)
}
fn default_preferred_max_bytes() -> ByteSize {
    ByteSize(2 << 20)
}
fn default_tick_interval() -> String {
    "500ms".to_owned()
}
fn default_election_tick() -> u32 {
    10
}
fn default_heartbeat_tick() -> u32 {
    1
}
fn default_max_inflight_blocks() -> u32 {
    5
}
fn default_snapshot_interval_size() -> ByteSize {
    ByteSize(16 << 20)
}
fn default_msp_type() -> String {
    "bccsp".to_owned()
}

/// The prefix of the environment variables that override keys of the
/// file (configtxgen's): `CONFIGTX_PROFILES_TWOORGS_ORDERER_BATCHTIMEOUT`.
const ENV_PREFIX: &str = "CONFIGTX_";

/// Reads `path`, resolves anchors and merge keys, applies environment
/// overrides, and picks the profile `name` (or the only profile when `name`
/// is `None`). Returns the profile and the key path it was found at, for
/// error messages.
pub fn load(path: &Path, name: Option<&str>) -> Result<(Profile, String)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut document: serde_yaml::Value = serde_yaml::from_str(&text)
        .with_context(|| format!("{}: not valid YAML", path.display()))?;
    document
        .apply_merge()
        .with_context(|| format!("{}: resolving `<<:` merge keys", path.display()))?;
    // After merging, so that a profile's inherited keys can be overridden
    // through it, as configtxgen's CONFIGTX_ variables do.
    crate::settings::override_from_environment(&mut document, ENV_PREFIX, path)?;
    let profiles = document
        .get("Profiles")
        .and_then(serde_yaml::Value::as_mapping)
        .ok_or_else(|| anyhow!("{}: no `Profiles` section", path.display()))?;
    let names: Vec<&str> = profiles
        .keys()
        .filter_map(serde_yaml::Value::as_str)
        .collect();
    let chosen = match name {
        Some(name) => name,
        None if names.len() == 1 => names[0],
        None => bail!(
            "{}: choose a profile with --profile: {}",
            path.display(),
            names.join(", ")
        ),
    };
    let mut value = profiles.get(chosen).cloned().ok_or_else(|| {
        anyhow!(
            "{}: no profile {chosen:?} (profiles: {})",
            path.display(),
            names.join(", ")
        )
    })?;
    // Merging can leave nested merge keys inside the chosen profile.
    value
        .apply_merge()
        .with_context(|| format!("{}: resolving `<<:` merge keys", path.display()))?;
    let key_path = format!("Profiles.{chosen}");
    let profile: Profile = serde_path_to_error::deserialize(value).map_err(|error| {
        let inner = error.path().to_string();
        let at = if inner == "." {
            key_path.clone()
        } else {
            format!("{key_path}.{inner}")
        };
        anyhow!("{}: {at}: {}", path.display(), error.inner())
    })?;
    Ok((profile, key_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(parse_byte_size("99 MB"), Ok(103_809_024));
        assert_eq!(parse_byte_size("512 KB"), Ok(524_288));
        assert_eq!(parse_byte_size("10"), Ok(10));
        assert!(parse_byte_size("12 XB").unwrap_err().contains("unit"));
        assert!(parse_byte_size("MB").is_err());
    }
}
