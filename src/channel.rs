//! `weft channel genesis`: a channel's genesis block from a configtx.yaml
//! profile, as Fabric's configtxgen builds it.
//!
//! The block holds one CONFIG envelope whose `ConfigEnvelope.config` is the
//! channel's config tree: the `Channel` group (hashing, capabilities,
//! orderer addresses, Readers/Writers/Admins), an `Orderer` group (consensus
//! type, batch size and timeout, the orderer organisations) and an
//! `Application` group (the peer organisations with their MSPs and
//! policies). Values, policies and groups are laid out as configtxgen lays
//! them out, so Fabric's tools read our blocks and we read theirs.

pub mod consenter;
pub mod profile;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use prost::Message;
use ring::rand::SecureRandom;
use weft_protos::common::{
    Block, BlockDataHashingStructure, BlockMetadataIndex, ChannelHeader, Config, ConfigEnvelope,
    ConfigGroup, ConfigPolicy, ConfigValue, Envelope, HashingAlgorithm, Header, HeaderType,
    ImplicitMetaPolicy, LastConfig, Metadata, OrdererAddresses, OrdererBlockMetadata, Payload,
    Policy, SignatureHeader, implicit_meta_policy, policy::PolicyType,
};
use weft_protos::duration::parse_go_duration;
use weft_protos::msp::MspConfig;
use weft_protos::{etcdraft, orderer, protos};

use profile::{OrganizationSpec, PolicySpec};

const ADMINS: &str = "Admins";
/// Channel header version configtxgen writes for config transactions.
const CONFIG_HEADER_VERSION: i32 = 1;

/// Builds the genesis block of `channel` from the configtx.yaml `config_path`.
pub fn genesis_block(
    config_path: &Path,
    profile_name: Option<&str>,
    channel: &str,
) -> Result<Block> {
    genesis_block_with(config_path, profile_name, channel, |_| {})
}

/// [`genesis_block`] with a change to the profile before it is built (a
/// benchmark's endorsement policy, for instance).
pub fn genesis_block_with(
    config_path: &Path,
    profile_name: Option<&str>,
    channel: &str,
    adjust: impl FnOnce(&mut profile::Profile),
) -> Result<Block> {
    check_channel_name(channel)?;
    let (mut profile, key_path) = profile::load(config_path, profile_name)?;
    adjust(&mut profile);
    let base_dir = config_path.parent().unwrap_or(Path::new("."));
    let channel_group = channel_group(&profile, base_dir, &key_path)
        .with_context(|| format!("{}", config_path.display()))?;
    genesis_block_of(channel, channel_group)
}

/// Wraps a channel config tree into an unsigned genesis block.
pub fn genesis_block_of(channel: &str, channel_group: ConfigGroup) -> Result<Block> {
    let config_envelope = ConfigEnvelope {
        config: Some(Config {
            sequence: 0,
            channel_group: Some(channel_group),
        }),
        last_update: None,
    };
    let mut nonce = [0u8; 24];
    ring::rand::SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| anyhow!("the system random generator failed"))?;
    let signature_header = SignatureHeader {
        creator: Bytes::new(),
        nonce: Bytes::copy_from_slice(&nonce),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("system clock is before 1970")?;
    let channel_header = ChannelHeader {
        r#type: HeaderType::Config as i32,
        version: CONFIG_HEADER_VERSION,
        timestamp: Some(prost_types::Timestamp {
            seconds: i64::try_from(now.as_secs()).context("system clock out of range")?,
            nanos: 0,
        }),
        channel_id: channel.to_owned(),
        tx_id: weft_protos::hash::compute_tx_id(&nonce, &[]),
        epoch: 0,
        extension: Bytes::new(),
        tls_cert_hash: Bytes::new(),
    };
    let envelope = Envelope {
        payload: Payload {
            header: Some(Header {
                channel_header: channel_header.encode_to_vec().into(),
                signature_header: signature_header.encode_to_vec().into(),
            }),
            data: config_envelope.encode_to_vec().into(),
        }
        .encode_to_vec()
        .into(),
        signature: Bytes::new(),
    };
    let mut block = weft_protos::block::new_block(0, &[], vec![envelope.encode_to_vec().into()]);
    let signatures_slot = Metadata {
        value: OrdererBlockMetadata {
            last_config: Some(LastConfig { index: 0 }),
            consenter_metadata: Bytes::new(),
        }
        .encode_to_vec()
        .into(),
        signatures: Vec::new(),
    };
    weft_protos::block::set_metadata_slot(
        &mut block,
        BlockMetadataIndex::Signatures,
        signatures_slot.encode_to_vec().into(),
    );
    Ok(block)
}

/// Fabric's channel name rule: lowercase letters, digits, `.` and `-`,
/// starting with a letter, under 250 characters.
/// Fabric's rule for channel names: `[a-z][a-z0-9.-]*`, under 250
/// characters. Channel names also become directory names.
pub fn check_channel_name(channel: &str) -> Result<()> {
    let valid = channel.len() < 250
        && channel.starts_with(|c: char| c.is_ascii_lowercase())
        && channel
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    if !valid {
        bail!(
            "invalid channel name {channel:?}: use lowercase letters, digits, '.' and '-', starting with a letter"
        );
    }
    Ok(())
}

fn channel_group(
    profile: &profile::Profile,
    base_dir: &Path,
    key_path: &str,
) -> Result<ConfigGroup> {
    let mut group = group_with_policies(&profile.policies, &format!("{key_path}.Policies"))?;
    group.values.insert(
        "HashingAlgorithm".to_owned(),
        value(HashingAlgorithm {
            name: "SHA256".to_owned(),
        }),
    );
    group.values.insert(
        "BlockDataHashingStructure".to_owned(),
        value(BlockDataHashingStructure { width: u32::MAX }),
    );
    insert_capabilities(&mut group, &profile.capabilities);

    let orderer = profile.orderer.as_ref().ok_or_else(|| {
        anyhow!("{key_path}.Orderer: missing; a channel needs an orderer section")
    })?;
    if !orderer.addresses.is_empty() {
        let mut addresses = value(OrdererAddresses {
            addresses: orderer.addresses.clone(),
        });
        addresses.mod_policy = "/Channel/Orderer/Admins".to_owned();
        group
            .values
            .insert("OrdererAddresses".to_owned(), addresses);
    }
    group.groups.insert(
        "Orderer".to_owned(),
        orderer_group(orderer, base_dir, &format!("{key_path}.Orderer"))?,
    );
    if let Some(application) = &profile.application {
        group.groups.insert(
            "Application".to_owned(),
            application_group(application, base_dir, &format!("{key_path}.Application"))?,
        );
    }
    Ok(group)
}

fn orderer_group(
    section: &profile::OrdererSection,
    base_dir: &Path,
    key_path: &str,
) -> Result<ConfigGroup> {
    let mut group = group_with_policies(&section.policies, &format!("{key_path}.Policies"))?;
    let metadata = match section.orderer_type.as_str() {
        "etcdraft" => raft_metadata(section, base_dir, key_path)?,
        "solo" => Bytes::new(),
        "kafka" => {
            let kafka = kafka_settings(section, key_path)?;
            group.values.insert(
                "KafkaBrokers".to_owned(),
                value(orderer::KafkaBrokers {
                    brokers: kafka.brokers.clone(),
                }),
            );
            let consenters = read_consenters(
                &kafka.consenters,
                base_dir,
                &format!("{key_path}.Kafka.Consenters"),
            )?;
            kafka_metadata(&kafka, consenters)
        }
        other => {
            bail!("{key_path}.OrdererType: {other:?} is not supported; use etcdraft, solo or kafka")
        }
    };
    group.values.insert(
        "ConsensusType".to_owned(),
        value(orderer::ConsensusType {
            r#type: section.orderer_type.clone(),
            metadata,
            state: orderer::consensus_type::State::Normal as i32,
        }),
    );
    let batch = &section.batch_size;
    if batch.max_message_count == 0 {
        bail!("{key_path}.BatchSize.MaxMessageCount: must be at least 1");
    }
    if batch.preferred_max_bytes.0 > batch.absolute_max_bytes.0 {
        bail!("{key_path}.BatchSize.PreferredMaxBytes: larger than AbsoluteMaxBytes");
    }
    let bytes_u32 = |field: &str, size: profile::ByteSize| {
        u32::try_from(size.0).map_err(|_| {
            anyhow!(
                "{key_path}.BatchSize.{field}: {} bytes is over 4 GB",
                size.0
            )
        })
    };
    group.values.insert(
        "BatchSize".to_owned(),
        value(orderer::BatchSize {
            max_message_count: batch.max_message_count,
            absolute_max_bytes: bytes_u32("AbsoluteMaxBytes", batch.absolute_max_bytes)?,
            preferred_max_bytes: bytes_u32("PreferredMaxBytes", batch.preferred_max_bytes)?,
        }),
    );
    parse_go_duration(&section.batch_timeout)
        .map_err(|e| anyhow!("{key_path}.BatchTimeout: {e}"))?;
    group.values.insert(
        "BatchTimeout".to_owned(),
        value(orderer::BatchTimeout {
            timeout: section.batch_timeout.clone(),
        }),
    );
    if let Some(stream) = &section.stream_mode {
        if stream.checkpoint_transactions == 0 {
            bail!("{key_path}.StreamMode.CheckpointTransactions: must be at least 1");
        }
        let interval = parse_go_duration(&stream.checkpoint_interval)
            .map_err(|e| anyhow!("{key_path}.StreamMode.CheckpointInterval: {e}"))?;
        if interval.is_zero() {
            bail!("{key_path}.StreamMode.CheckpointInterval: must be positive");
        }
        group.values.insert(
            weft_protos::STREAM_MODE_KEY.to_owned(),
            value(weft_protos::stream::StreamMode {
                checkpoint_transactions: stream.checkpoint_transactions,
                checkpoint_interval: stream.checkpoint_interval.clone(),
            }),
        );
    }
    group.values.insert(
        "ChannelRestrictions".to_owned(),
        value(orderer::ChannelRestrictions {
            max_count: section.max_channels,
        }),
    );
    insert_capabilities(&mut group, &section.capabilities);
    for (index, organization) in section.organizations.iter().enumerate() {
        let org_path = format!("{key_path}.Organizations[{index}]");
        let mut org_group = organization_group(organization, base_dir, &org_path)?;
        if !organization.orderer_endpoints.is_empty() {
            org_group.values.insert(
                "Endpoints".to_owned(),
                value(OrdererAddresses {
                    addresses: organization.orderer_endpoints.clone(),
                }),
            );
        }
        insert_group(&mut group, organization, org_group, &org_path)?;
    }
    Ok(group)
}

/// `Orderer.Kafka` of a kafka profile, checked.
fn kafka_settings(section: &profile::OrdererSection, key_path: &str) -> Result<profile::KafkaSpec> {
    let kafka = section
        .kafka
        .clone()
        .ok_or_else(|| anyhow!("{key_path}.Kafka: missing; a kafka orderer needs its brokers"))?;
    if kafka.brokers.is_empty() {
        bail!("{key_path}.Kafka.Brokers: empty; name at least one broker as host:port");
    }
    for (field, list) in [("Brokers", &kafka.brokers), ("Orderers", &kafka.orderers)] {
        if let Some(bad) = list
            .iter()
            .find(|entry| !weft_orderer::config::is_host_port(entry))
        {
            bail!("{key_path}.Kafka.{field}: {bad:?} is not host:port");
        }
    }
    Ok(kafka)
}

/// The `ConsensusType` metadata of a kafka channel: none for Fabric 1.x's
/// whole envelopes (a Fabric orderer reads the same config), weft's
/// `KafkaOptions` otherwise, with the `consenters` read from the profile.
fn kafka_metadata(kafka: &profile::KafkaSpec, consenters: Vec<etcdraft::Consenter>) -> Bytes {
    use weft_protos::kafka::{KafkaOptions, kafka_options::Payloads};
    if kafka.payloads == profile::KafkaPayloadsSpec::Full
        && kafka.orderers.is_empty()
        && consenters.is_empty()
    {
        return Bytes::new();
    }
    let payloads = match kafka.payloads {
        profile::KafkaPayloadsSpec::Full => Payloads::Full,
        profile::KafkaPayloadsSpec::TxId => Payloads::TxId,
    };
    KafkaOptions {
        payloads: payloads as i32,
        orderers: kafka.orderers.clone(),
        consenters,
    }
    .encode_to_vec()
    .into()
}

/// The consenters of `specs` (at `field_path` in the profile), their
/// certificates read from files relative to `base_dir`.
fn read_consenters(
    specs: &[profile::ConsenterSpec],
    base_dir: &Path,
    field_path: &str,
) -> Result<Vec<etcdraft::Consenter>> {
    let read_cert = |index: usize, field: &str, path: &Path| -> Result<Bytes> {
        let full = base_dir.join(path);
        std::fs::read(&full)
            .map(Bytes::from)
            .with_context(|| format!("{field_path}[{index}].{field}: reading {}", full.display()))
    };
    specs
        .iter()
        .enumerate()
        .map(|(index, consenter)| {
            Ok(etcdraft::Consenter {
                host: consenter.host.clone(),
                port: consenter.port,
                client_tls_cert: read_cert(index, "ClientTLSCert", &consenter.client_tls_cert)?,
                server_tls_cert: read_cert(index, "ServerTLSCert", &consenter.server_tls_cert)?,
            })
        })
        .collect()
}

fn raft_metadata(
    section: &profile::OrdererSection,
    base_dir: &Path,
    key_path: &str,
) -> Result<Bytes> {
    let raft = section
        .etcd_raft
        .as_ref()
        .ok_or_else(|| anyhow!("{key_path}.EtcdRaft: missing; etcdraft needs its consenters"))?;
    if raft.consenters.is_empty() {
        bail!("{key_path}.EtcdRaft.Consenters: at least one consenter is required");
    }
    let consenters = read_consenters(
        &raft.consenters,
        base_dir,
        &format!("{key_path}.EtcdRaft.Consenters"),
    )?;
    let options = &raft.options;
    parse_go_duration(&options.tick_interval)
        .map_err(|e| anyhow!("{key_path}.EtcdRaft.Options.TickInterval: {e}"))?;
    let snapshot_interval_size = u32::try_from(options.snapshot_interval_size.0)
        .map_err(|_| anyhow!("{key_path}.EtcdRaft.Options.SnapshotIntervalSize: over 4 GB"))?;
    Ok(etcdraft::ConfigMetadata {
        consenters,
        options: Some(etcdraft::Options {
            tick_interval: options.tick_interval.clone(),
            election_tick: options.election_tick,
            heartbeat_tick: options.heartbeat_tick,
            max_inflight_blocks: options.max_inflight_blocks,
            snapshot_interval_size,
        }),
    }
    .encode_to_vec()
    .into())
}

fn application_group(
    section: &profile::ApplicationSection,
    base_dir: &Path,
    key_path: &str,
) -> Result<ConfigGroup> {
    let mut group = group_with_policies(&section.policies, &format!("{key_path}.Policies"))?;
    insert_capabilities(&mut group, &section.capabilities);
    if !section.acls.is_empty() {
        let acls = section
            .acls
            .iter()
            .map(|(api, policy_ref)| {
                (
                    api.clone(),
                    protos::ApiResource {
                        policy_ref: policy_ref.clone(),
                    },
                )
            })
            .collect();
        group
            .values
            .insert("ACLs".to_owned(), value(protos::AcLs { acls }));
    }
    for (index, organization) in section.organizations.iter().enumerate() {
        let org_path = format!("{key_path}.Organizations[{index}]");
        let mut org_group = organization_group(organization, base_dir, &org_path)?;
        if !organization.anchor_peers.is_empty() {
            let anchor_peers = organization
                .anchor_peers
                .iter()
                .map(|peer| protos::AnchorPeer {
                    host: peer.host.clone(),
                    port: i32::try_from(peer.port).unwrap_or(i32::MAX),
                })
                .collect();
            org_group.values.insert(
                "AnchorPeers".to_owned(),
                value(protos::AnchorPeers { anchor_peers }),
            );
        }
        insert_group(&mut group, organization, org_group, &org_path)?;
    }
    Ok(group)
}

fn insert_group(
    parent: &mut ConfigGroup,
    organization: &OrganizationSpec,
    group: ConfigGroup,
    key_path: &str,
) -> Result<()> {
    if parent
        .groups
        .insert(organization.name.clone(), group)
        .is_some()
    {
        bail!(
            "{key_path}.Name: organisation {:?} appears twice",
            organization.name
        );
    }
    Ok(())
}

/// An organisation's group: its MSP (read from `MSPDir`) and its policies.
fn organization_group(
    organization: &OrganizationSpec,
    base_dir: &Path,
    key_path: &str,
) -> Result<ConfigGroup> {
    if organization.msp_type != "bccsp" {
        bail!(
            "{key_path}.MSPType: {:?} is not supported; weft supports X.509 (bccsp) MSPs",
            organization.msp_type
        );
    }
    if organization.id.is_empty() {
        bail!("{key_path}.ID: the MSP ID is empty");
    }
    let msp_dir = base_dir.join(&organization.msp_dir);
    let msp_config = weft_msp::folder::load_config(&msp_dir, &organization.id)
        .with_context(|| format!("{key_path}.MSPDir"))?;
    weft_msp::Msp::from_config(msp_config.clone()).with_context(|| format!("{key_path}.MSPDir"))?;
    let mut group = group_with_policies(&organization.policies, &format!("{key_path}.Policies"))?;
    group.values.insert(
        "MSP".to_owned(),
        value(MspConfig {
            r#type: 0,
            config: msp_config.encode_to_vec().into(),
        }),
    );
    Ok(group)
}

/// A group with mod_policy Admins and the given policies.
fn group_with_policies(
    policies: &BTreeMap<String, PolicySpec>,
    key_path: &str,
) -> Result<ConfigGroup> {
    let mut group = ConfigGroup {
        mod_policy: ADMINS.to_owned(),
        ..ConfigGroup::default()
    };
    for (name, spec) in policies {
        let policy = compile_policy(spec).map_err(|e| anyhow!("{key_path}.{name}.Rule: {e}"))?;
        group.policies.insert(
            name.clone(),
            ConfigPolicy {
                version: 0,
                policy: Some(policy),
                mod_policy: ADMINS.to_owned(),
            },
        );
    }
    Ok(group)
}

fn compile_policy(spec: &PolicySpec) -> Result<Policy> {
    match spec.kind.as_str() {
        "Signature" => {
            let envelope = weft_policy::dsl::parse(&spec.rule)?;
            Ok(Policy {
                r#type: PolicyType::Signature as i32,
                value: envelope.encode_to_vec().into(),
            })
        }
        "ImplicitMeta" => {
            let mut words = spec.rule.split_whitespace();
            let (Some(rule), Some(sub_policy), None) = (words.next(), words.next(), words.next())
            else {
                bail!("{:?} must be '<ANY|ALL|MAJORITY> <policy name>'", spec.rule);
            };
            let rule = match rule {
                "ANY" => implicit_meta_policy::Rule::Any,
                "ALL" => implicit_meta_policy::Rule::All,
                "MAJORITY" => implicit_meta_policy::Rule::Majority,
                other => bail!("unknown implicit-meta rule {other:?}; use ANY, ALL or MAJORITY"),
            };
            Ok(Policy {
                r#type: PolicyType::ImplicitMeta as i32,
                value: ImplicitMetaPolicy {
                    sub_policy: sub_policy.to_owned(),
                    rule: rule as i32,
                }
                .encode_to_vec()
                .into(),
            })
        }
        other => bail!("unknown policy type {other:?}; use Signature or ImplicitMeta"),
    }
}

fn insert_capabilities(group: &mut ConfigGroup, capabilities: &BTreeMap<String, bool>) {
    let enabled: Vec<&str> = capabilities
        .iter()
        .filter(|(_, on)| **on)
        .map(|(name, _)| name.as_str())
        .collect();
    if !enabled.is_empty() {
        group.values.insert(
            "Capabilities".to_owned(),
            ConfigValue {
                version: 0,
                value: encode_capabilities(&enabled),
                mod_policy: ADMINS.to_owned(),
            },
        );
    }
}

/// Encodes `common.Capabilities` exactly as Fabric (Go) does.
///
/// `Capabilities` is a `map<string, Capability>` whose values are empty
/// messages. Go's encoder writes each map entry's value even when it is
/// empty (`12 00`); prost leaves it out. Both decode to the same thing, but
/// config values are compared and hashed as bytes across nodes, so we write
/// Go's form: entry = field 1 { key = field 1 string, value = field 2 {} }.
fn encode_capabilities(names: &[&str]) -> Bytes {
    let mut out = Vec::new();
    for name in names {
        let mut entry = Vec::with_capacity(name.len() + 4);
        prost::encoding::string::encode(1, &(*name).to_owned(), &mut entry);
        prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut entry);
        prost::encoding::encode_varint(0, &mut entry);
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(entry.len() as u64, &mut out);
        out.extend_from_slice(&entry);
    }
    Bytes::from(out)
}

/// A config value with mod_policy Admins.
fn value(message: impl Message) -> ConfigValue {
    ConfigValue {
        version: 0,
        value: message.encode_to_vec().into(),
        mod_policy: ADMINS.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_decode_as_the_map_they_encode() {
        let bytes = encode_capabilities(&["V2_0", "V2_5"]);
        let decoded = weft_protos::common::Capabilities::decode(bytes.clone()).unwrap();
        let names: Vec<&String> = decoded.capabilities.keys().collect();
        assert_eq!(names, ["V2_0", "V2_5"]);
        // Go's form: each entry carries an explicit empty value.
        assert_eq!(&bytes[..10], b"\x0a\x08\x0a\x04V2_0\x12\x00");
    }
}
