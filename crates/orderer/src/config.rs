//! The orderer's part of a channel configuration: the values of the
//! `/Channel/Orderer` config group that decide how blocks are cut and who
//! orders them.
//!
//! - `BatchSize` (`orderer.BatchSize`): at most `MaxMessageCount`
//!   envelopes per block; a block is cut once it would grow past
//!   `PreferredMaxBytes`; no envelope larger than `AbsoluteMaxBytes` is
//!   accepted.
//! - `BatchTimeout` (`orderer.BatchTimeout`): a Go duration string such as
//!   `"2s"` or `"250ms"`; a non-full block is cut this long after its first
//!   envelope arrived.
//! - `ConsensusType` (`orderer.ConsensusType`): `solo`, `etcdraft` (with
//!   its `etcdraft.ConfigMetadata`) or `kafka` (with weft's
//!   `weft.kafka.KafkaOptions`, or none: whole envelopes, as Fabric 1.x),
//!   and the normal/maintenance state.
//! - `KafkaBrokers` (`orderer.KafkaBrokers`): a Kafka channel's brokers,
//!   as Fabric 1.x writes them.
//! - `StreamMode` (`weft.stream.StreamMode`, weft's own, optional): the
//!   channel streams; a checkpoint at the latest every
//!   `checkpoint_transactions` transactions or `checkpoint_interval` after
//!   the first unsigned one, whichever comes first (docs/stream-mode.md).
//!
//! The checks are Fabric's (`channelconfig`'s orderer values): a zero
//! message count or absolute size, a preferred size above the absolute
//! size, and a non-positive timeout are refused. Every error names the
//! config key and the value at fault.

use std::time::Duration;

use prost::Message;
use weft_protos::STREAM_MODE_KEY;
use weft_protos::common::{Config, ConfigGroup};
use weft_protos::etcdraft;
use weft_protos::kafka::KafkaOptions;
use weft_protos::kafka::kafka_options::Payloads;
use weft_protos::orderer::consensus_type::State;
use weft_protos::orderer::{
    BatchSize as BatchSizeValue, BatchTimeout, ConsensusType, KafkaBrokers,
};
use weft_protos::stream::StreamMode as StreamModeValue;

/// The config path of the orderer group, for messages.
const ORDERER_GROUP: &str = "/Channel/Orderer";

/// A channel configuration whose orderer values cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A group or value the orderer needs is absent.
    #[error("{key} is missing")]
    Missing { key: String },
    /// A value's bytes do not decode as its message type.
    #[error("{key} is malformed: {reason}")]
    Malformed { key: String, reason: String },
    /// A value decodes but cannot work.
    #[error("{key} = {value}: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
}

/// How blocks are sized, from `/Channel/Orderer/BatchSize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSize {
    /// A block holds at most this many envelopes.
    pub max_message_count: u32,
    /// No envelope (payload plus signature) may be larger than this.
    pub absolute_max_bytes: u32,
    /// A block is cut before it would grow past this many bytes.
    pub preferred_max_bytes: u32,
}

/// Which consensus orders a channel, from `/Channel/Orderer/ConsensusType`.
#[derive(Debug, Clone, PartialEq)]
pub enum Consensus {
    /// One orderer cuts and signs every block.
    Solo,
    /// A Raft cluster; the metadata names its consenters and options.
    EtcdRaft(etcdraft::ConfigMetadata),
    /// A Kafka partition orders the channel's records.
    Kafka(KafkaConsensus),
}

impl Consensus {
    /// The name the config uses for this type.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Solo => "solo",
            Self::EtcdRaft(_) => "etcdraft",
            Self::Kafka(_) => "kafka",
        }
    }
}

/// What goes through a Kafka channel's partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaPayloads {
    /// Whole envelopes (Fabric 1.x).
    Full,
    /// Only each envelope's TxID, digest and size; the orderers keep the
    /// envelopes and hand them to each other (FastFabric).
    TxId,
}

/// A Kafka channel's ordering settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConsensus {
    /// `host:port` of the brokers to bootstrap from.
    pub brokers: Vec<String>,
    pub payloads: KafkaPayloads,
    /// The cluster endpoints of the channel's orderers, which hand each
    /// other envelopes when only IDs go through Kafka: those named alone
    /// and those of `consenters`.
    pub orderers: Vec<String>,
    /// The orderers named with their TLS certificates, as etcdraft names
    /// its consenters: who may hand the channel's envelopes over a
    /// mutual-TLS cluster.
    pub consenters: Vec<etcdraft::Consenter>,
}

/// A stream channel's checkpoints, from `/Channel/Orderer/StreamMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamMode {
    /// A checkpoint at the latest after this many transactions.
    pub checkpoint_transactions: u32,
    /// A checkpoint at the latest this long after the first transaction
    /// it covers.
    pub checkpoint_interval: Duration,
}

/// The orderer values of one channel configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelOrdererConfig {
    pub batch_size: BatchSize,
    pub batch_timeout: Duration,
    pub consensus: Consensus,
    /// In maintenance (consensus-type migration), normal transactions are
    /// refused with SERVICE_UNAVAILABLE, as Fabric does.
    pub maintenance: bool,
    /// Set for a stream channel; `None` orders in blocks.
    pub stream: Option<StreamMode>,
}

impl ChannelOrdererConfig {
    /// Reads and checks the orderer values of a channel configuration.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let root = config
            .channel_group
            .as_ref()
            .ok_or_else(|| ConfigError::Missing {
                key: "/Channel".to_owned(),
            })?;
        Self::from_channel_group(root)
    }

    /// Reads and checks the orderer values under a channel's root group.
    pub fn from_channel_group(root: &ConfigGroup) -> Result<Self, ConfigError> {
        let orderer = root
            .groups
            .get("Orderer")
            .ok_or_else(|| ConfigError::Missing {
                key: ORDERER_GROUP.to_owned(),
            })?;
        let batch_size = batch_size(&decode_value::<BatchSizeValue>(orderer, "BatchSize")?)?;
        let timeout = decode_value::<BatchTimeout>(orderer, "BatchTimeout")?;
        let batch_timeout =
            positive_duration("BatchTimeout", &timeout.timeout, "the batch timeout")?;
        let consensus_type = decode_value::<ConsensusType>(orderer, "ConsensusType")?;
        let consensus = match consensus_type.r#type.as_str() {
            "solo" => Consensus::Solo,
            "etcdraft" => Consensus::EtcdRaft(
                etcdraft::ConfigMetadata::decode(consensus_type.metadata.clone()).map_err(|e| {
                    ConfigError::Malformed {
                        key: format!("{ORDERER_GROUP}/ConsensusType.metadata"),
                        reason: format!("not an etcdraft ConfigMetadata: {e}"),
                    }
                })?,
            ),
            "kafka" => Consensus::Kafka(kafka_consensus(orderer, &consensus_type)?),
            other => {
                return Err(invalid(
                    "ConsensusType",
                    other,
                    "weft orders with solo, etcdraft or kafka".to_owned(),
                ));
            }
        };
        let maintenance = match State::try_from(consensus_type.state) {
            Ok(State::Normal) => false,
            Ok(State::Maintenance) => true,
            Err(_) => {
                return Err(invalid(
                    "ConsensusType.state",
                    &consensus_type.state.to_string(),
                    "neither NORMAL nor MAINTENANCE".to_owned(),
                ));
            }
        };
        let stream = match orderer.values.get(STREAM_MODE_KEY) {
            None => None,
            Some(_) => Some(stream_mode(&decode_value::<StreamModeValue>(
                orderer,
                STREAM_MODE_KEY,
            )?)?),
        };
        if stream.is_some() && matches!(consensus, Consensus::Kafka(_)) {
            return Err(invalid(
                STREAM_MODE_KEY,
                "present",
                "stream mode is ordered by solo or etcdraft, not kafka".to_owned(),
            ));
        }
        Ok(Self {
            batch_size,
            batch_timeout,
            consensus,
            maintenance,
            stream,
        })
    }
}

/// A Kafka channel's settings: the brokers from `KafkaBrokers`, the
/// options from the consensus metadata (none: whole envelopes).
fn kafka_consensus(
    orderer: &ConfigGroup,
    consensus_type: &ConsensusType,
) -> Result<KafkaConsensus, ConfigError> {
    let brokers = decode_value::<KafkaBrokers>(orderer, "KafkaBrokers")?.brokers;
    if brokers.is_empty() {
        return Err(invalid(
            "KafkaBrokers",
            "[]",
            "a Kafka channel needs at least one broker".to_owned(),
        ));
    }
    if let Some(broker) = brokers.iter().find(|broker| !is_host_port(broker)) {
        return Err(invalid(
            "KafkaBrokers",
            broker,
            "a broker is named as host:port".to_owned(),
        ));
    }
    let options = KafkaOptions::decode(consensus_type.metadata.clone()).map_err(|e| {
        ConfigError::Malformed {
            key: format!("{ORDERER_GROUP}/ConsensusType.metadata"),
            reason: format!("not a weft.kafka.KafkaOptions: {e}"),
        }
    })?;
    let payloads = match Payloads::try_from(options.payloads) {
        Ok(Payloads::Full) => KafkaPayloads::Full,
        Ok(Payloads::TxId) => KafkaPayloads::TxId,
        Err(_) => {
            return Err(invalid(
                "ConsensusType.metadata.payloads",
                &options.payloads.to_string(),
                "neither FULL nor TX_ID".to_owned(),
            ));
        }
    };
    if let Some(endpoint) = options.orderers.iter().find(|e| !is_host_port(e)) {
        return Err(invalid(
            "ConsensusType.metadata.orderers",
            endpoint,
            "an orderer's cluster endpoint is named as host:port".to_owned(),
        ));
    }
    let mut orderers = options.orderers;
    for consenter in &options.consenters {
        let endpoint = format!("{}:{}", consenter.host, consenter.port);
        if consenter.host.is_empty() || u16::try_from(consenter.port).is_err() {
            return Err(invalid(
                "ConsensusType.metadata.consenters",
                &endpoint,
                "a consenter needs a host and a port below 65536".to_owned(),
            ));
        }
        if !orderers.contains(&endpoint) {
            orderers.push(endpoint);
        }
    }
    Ok(KafkaConsensus {
        brokers,
        payloads,
        orderers,
        consenters: options.consenters,
    })
}

/// Whether `text` reads as `host:port` with a port number, as a Kafka
/// broker or an orderer's cluster endpoint is named.
pub fn is_host_port(text: &str) -> bool {
    text.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
}

fn stream_mode(value: &StreamModeValue) -> Result<StreamMode, ConfigError> {
    if value.checkpoint_transactions == 0 {
        return Err(invalid(
            "StreamMode.checkpoint_transactions",
            "0",
            "a checkpoint must cover at least one transaction".to_owned(),
        ));
    }
    let checkpoint_interval = positive_duration(
        "StreamMode.checkpoint_interval",
        &value.checkpoint_interval,
        "the checkpoint interval",
    )?;
    Ok(StreamMode {
        checkpoint_transactions: value.checkpoint_transactions,
        checkpoint_interval,
    })
}

/// `text` read as a Go duration that must be positive; errors name `key`
/// and say "`what` must be positive".
fn positive_duration(key: &str, text: &str, what: &str) -> Result<Duration, ConfigError> {
    let duration = weft_protos::duration::parse_go_duration(text)
        .map_err(|reason| invalid(key, text, reason))?;
    if duration.is_zero() {
        return Err(invalid(key, text, format!("{what} must be positive")));
    }
    Ok(duration)
}

fn batch_size(value: &BatchSizeValue) -> Result<BatchSize, ConfigError> {
    if value.max_message_count == 0 {
        return Err(invalid(
            "BatchSize.MaxMessageCount",
            "0",
            "a block must be allowed at least one message".to_owned(),
        ));
    }
    if value.absolute_max_bytes == 0 {
        return Err(invalid(
            "BatchSize.AbsoluteMaxBytes",
            "0",
            "must be at least one byte".to_owned(),
        ));
    }
    if value.preferred_max_bytes > value.absolute_max_bytes {
        return Err(invalid(
            "BatchSize.PreferredMaxBytes",
            &value.preferred_max_bytes.to_string(),
            format!(
                "larger than AbsoluteMaxBytes ({})",
                value.absolute_max_bytes
            ),
        ));
    }
    Ok(BatchSize {
        max_message_count: value.max_message_count,
        absolute_max_bytes: value.absolute_max_bytes,
        preferred_max_bytes: value.preferred_max_bytes,
    })
}

fn decode_value<M: Message + Default>(group: &ConfigGroup, name: &str) -> Result<M, ConfigError> {
    let value = group.values.get(name).ok_or_else(|| ConfigError::Missing {
        key: format!("{ORDERER_GROUP}/{name}"),
    })?;
    M::decode(value.value.clone()).map_err(|e| ConfigError::Malformed {
        key: format!("{ORDERER_GROUP}/{name}"),
        reason: e.to_string(),
    })
}

fn invalid(key: &str, value: &str, reason: String) -> ConfigError {
    ConfigError::Invalid {
        key: format!("{ORDERER_GROUP}/{key}"),
        value: format!("{value:?}"),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use weft_protos::common::ConfigValue;

    use super::*;

    fn value(message: &impl Message) -> ConfigValue {
        ConfigValue {
            version: 0,
            value: message.encode_to_vec().into(),
            mod_policy: "Admins".to_owned(),
        }
    }

    /// A channel group whose orderer group carries the given values.
    fn channel(batch: BatchSizeValue, timeout: &str, consensus: ConsensusType) -> Config {
        let orderer = ConfigGroup {
            values: BTreeMap::from([
                ("BatchSize".to_owned(), value(&batch)),
                (
                    "BatchTimeout".to_owned(),
                    value(&BatchTimeout {
                        timeout: timeout.to_owned(),
                    }),
                ),
                ("ConsensusType".to_owned(), value(&consensus)),
            ]),
            ..ConfigGroup::default()
        };
        Config {
            sequence: 0,
            channel_group: Some(ConfigGroup {
                groups: BTreeMap::from([("Orderer".to_owned(), orderer)]),
                ..ConfigGroup::default()
            }),
        }
    }

    fn batch(count: u32, absolute: u32, preferred: u32) -> BatchSizeValue {
        BatchSizeValue {
            max_message_count: count,
            absolute_max_bytes: absolute,
            preferred_max_bytes: preferred,
        }
    }

    fn solo() -> ConsensusType {
        ConsensusType {
            r#type: "solo".to_owned(),
            ..ConsensusType::default()
        }
    }

    #[test]
    fn a_solo_channel_parses() {
        let config = channel(batch(10, 1000, 500), "250ms", solo());
        let parsed = ChannelOrdererConfig::from_config(&config).unwrap();
        assert_eq!(
            parsed,
            ChannelOrdererConfig {
                batch_size: BatchSize {
                    max_message_count: 10,
                    absolute_max_bytes: 1000,
                    preferred_max_bytes: 500,
                },
                batch_timeout: Duration::from_millis(250),
                consensus: Consensus::Solo,
                maintenance: false,
                stream: None,
            }
        );
    }

    /// The orderer group of a test config.
    fn orderer_group(config: &mut Config) -> &mut ConfigGroup {
        config
            .channel_group
            .as_mut()
            .unwrap()
            .groups
            .get_mut("Orderer")
            .unwrap()
    }

    fn streaming(config: &mut Config, checkpoint_transactions: u32, interval: &str) {
        orderer_group(config).values.insert(
            STREAM_MODE_KEY.to_owned(),
            value(&StreamModeValue {
                checkpoint_transactions,
                checkpoint_interval: interval.to_owned(),
            }),
        );
    }

    #[test]
    fn a_stream_channel_parses_and_bad_checkpoints_are_named() {
        let mut config = channel(batch(10, 1000, 500), "250ms", solo());
        streaming(&mut config, 100, "5ms");
        let parsed = ChannelOrdererConfig::from_config(&config).unwrap();
        assert_eq!(
            parsed.stream,
            Some(StreamMode {
                checkpoint_transactions: 100,
                checkpoint_interval: Duration::from_millis(5),
            })
        );
        let cases = [
            (
                0,
                "5ms",
                "/Channel/Orderer/StreamMode.checkpoint_transactions = \"0\"",
            ),
            (
                10,
                "0s",
                "/Channel/Orderer/StreamMode.checkpoint_interval = \"0s\"",
            ),
            (
                10,
                "often",
                "/Channel/Orderer/StreamMode.checkpoint_interval = \"often\"",
            ),
        ];
        for (count, interval, expected) in cases {
            streaming(&mut config, count, interval);
            let error = ChannelOrdererConfig::from_config(&config)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(expected), "{error:?} vs {expected:?}");
        }
    }

    fn kafka(options: &KafkaOptions) -> ConsensusType {
        ConsensusType {
            r#type: "kafka".to_owned(),
            metadata: options.encode_to_vec().into(),
            ..ConsensusType::default()
        }
    }

    fn with_brokers(mut config: Config, brokers: &[&str]) -> Config {
        orderer_group(&mut config).values.insert(
            "KafkaBrokers".to_owned(),
            value(&KafkaBrokers {
                brokers: brokers.iter().map(|b| (*b).to_owned()).collect(),
            }),
        );
        config
    }

    #[test]
    fn a_kafka_channel_parses_and_bad_brokers_are_named() {
        // Goal: Fabric 1.x's Kafka config (no metadata) orders whole
        // envelopes; weft's options choose TxID-only ordering; brokers
        // and endpoints that are not host:port are named.
        let fabric = with_brokers(
            channel(batch(10, 1000, 500), "1s", kafka(&KafkaOptions::default())),
            &["127.0.0.1:9092"],
        );
        assert_eq!(
            ChannelOrdererConfig::from_config(&fabric)
                .unwrap()
                .consensus,
            Consensus::Kafka(KafkaConsensus {
                brokers: vec!["127.0.0.1:9092".to_owned()],
                payloads: KafkaPayloads::Full,
                orderers: Vec::new(),
                consenters: Vec::new(),
            })
        );
        let options = KafkaOptions {
            payloads: Payloads::TxId as i32,
            orderers: vec!["127.0.0.1:7051".to_owned(), "o2:7051".to_owned()],
            consenters: vec![
                etcdraft::Consenter {
                    host: "o2".to_owned(),
                    port: 7051,
                    ..Default::default()
                },
                etcdraft::Consenter {
                    host: "o3".to_owned(),
                    port: 7051,
                    ..Default::default()
                },
            ],
        };
        let weft = with_brokers(
            channel(batch(10, 1000, 500), "1s", kafka(&options)),
            &["127.0.0.1:9092"],
        );
        let Consensus::Kafka(parsed) = ChannelOrdererConfig::from_config(&weft).unwrap().consensus
        else {
            panic!("not kafka")
        };
        assert_eq!(parsed.payloads, KafkaPayloads::TxId);
        // Named alone or as consenters, each orderer once.
        assert_eq!(parsed.orderers, ["127.0.0.1:7051", "o2:7051", "o3:7051"]);
        assert_eq!(parsed.consenters.len(), 2);

        let cases = [
            (
                with_brokers(channel(batch(10, 1000, 500), "1s", kafka(&options)), &[]),
                "/Channel/Orderer/KafkaBrokers = \"[]\"",
            ),
            (
                with_brokers(
                    channel(batch(10, 1000, 500), "1s", kafka(&options)),
                    &["localhost"],
                ),
                "/Channel/Orderer/KafkaBrokers = \"localhost\"",
            ),
            (
                channel(batch(10, 1000, 500), "1s", kafka(&options)),
                "/Channel/Orderer/KafkaBrokers is missing",
            ),
            (
                with_brokers(
                    channel(
                        batch(10, 1000, 500),
                        "1s",
                        kafka(&KafkaOptions {
                            payloads: 7,
                            ..Default::default()
                        }),
                    ),
                    &["b:1"],
                ),
                "/Channel/Orderer/ConsensusType.metadata.payloads = \"7\"",
            ),
        ];
        for (config, expected) in cases {
            let error = ChannelOrdererConfig::from_config(&config)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(expected), "{error:?} vs {expected:?}");
        }
        let mut streaming_kafka = weft;
        streaming(&mut streaming_kafka, 10, "5ms");
        let error = ChannelOrdererConfig::from_config(&streaming_kafka)
            .unwrap_err()
            .to_string();
        assert!(error.contains("not kafka"), "{error}");
    }

    #[test]
    fn fabrics_genesis_blocks_parse() {
        // Goal: the orderer values of real Fabric 2.5 genesis blocks (Raft
        // with one consenter) read as the fixture README describes them.
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/fabric-2.5/ch10-block-0.block");
        let block =
            weft_protos::common::Block::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
        let raw = block.data.unwrap().data[0].clone();
        let envelope = weft_protos::view::TxEnvelope::decode(raw, Default::default()).unwrap();
        let weft_protos::view::TxBody::Config(config) = envelope.body else {
            panic!("genesis holds a config")
        };
        let parsed = ChannelOrdererConfig::from_config(&config.config.unwrap()).unwrap();
        assert_eq!(parsed.batch_size.max_message_count, 10);
        assert_eq!(parsed.batch_size.preferred_max_bytes, 512 * 1024);
        assert_eq!(parsed.batch_size.absolute_max_bytes, 99 * 1024 * 1024);
        assert_eq!(parsed.batch_timeout, Duration::from_secs(1));
        let Consensus::EtcdRaft(metadata) = parsed.consensus else {
            panic!("{:?}", parsed.consensus)
        };
        assert_eq!(metadata.consenters.len(), 1);
    }

    #[test]
    fn bad_values_are_named() {
        let cases = [
            (
                channel(batch(0, 1000, 500), "1s", solo()),
                "/Channel/Orderer/BatchSize.MaxMessageCount = \"0\"",
            ),
            (
                channel(batch(10, 0, 0), "1s", solo()),
                "/Channel/Orderer/BatchSize.AbsoluteMaxBytes = \"0\"",
            ),
            (
                channel(batch(10, 1000, 2000), "1s", solo()),
                "/Channel/Orderer/BatchSize.PreferredMaxBytes = \"2000\": larger than AbsoluteMaxBytes (1000)",
            ),
            (
                channel(batch(10, 1000, 500), "soon", solo()),
                "/Channel/Orderer/BatchTimeout = \"soon\"",
            ),
            (
                channel(batch(10, 1000, 500), "0s", solo()),
                "/Channel/Orderer/BatchTimeout = \"0s\": the batch timeout must be positive",
            ),
            (
                channel(
                    batch(10, 1000, 500),
                    "1s",
                    ConsensusType {
                        r#type: "BFT".to_owned(),
                        ..ConsensusType::default()
                    },
                ),
                "/Channel/Orderer/ConsensusType = \"BFT\"",
            ),
            (
                channel(
                    batch(10, 1000, 500),
                    "1s",
                    ConsensusType {
                        r#type: "etcdraft".to_owned(),
                        metadata: bytes::Bytes::from_static(b"\xff\xff"),
                        ..ConsensusType::default()
                    },
                ),
                "/Channel/Orderer/ConsensusType.metadata is malformed",
            ),
        ];
        for (config, expected) in cases {
            let error = ChannelOrdererConfig::from_config(&config)
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with(expected),
                "{error:?} does not start with {expected:?}"
            );
        }

        let mut missing = channel(batch(10, 1000, 500), "1s", solo());
        let orderer = missing
            .channel_group
            .as_mut()
            .unwrap()
            .groups
            .get_mut("Orderer")
            .unwrap();
        orderer.values.remove("BatchTimeout");
        assert_eq!(
            ChannelOrdererConfig::from_config(&missing).unwrap_err(),
            ConfigError::Missing {
                key: "/Channel/Orderer/BatchTimeout".to_owned()
            }
        );
        orderer_value_garbage();
    }

    fn orderer_value_garbage() {
        let mut config = channel(batch(10, 1000, 500), "1s", solo());
        let orderer = orderer_group(&mut config);
        orderer.values.get_mut("BatchSize").unwrap().value = bytes::Bytes::from_static(b"\x08");
        let error = ChannelOrdererConfig::from_config(&config).unwrap_err();
        assert!(
            matches!(&error, ConfigError::Malformed { key, .. } if key == "/Channel/Orderer/BatchSize"),
            "{error:?}"
        );
        let no_orderer = Config {
            sequence: 0,
            channel_group: Some(ConfigGroup::default()),
        };
        assert_eq!(
            ChannelOrdererConfig::from_config(&no_orderer)
                .unwrap_err()
                .to_string(),
            "/Channel/Orderer is missing"
        );
    }
}
