//! A channel's configuration at one sequence, as the orderer uses it: the
//! config itself, the MSPs and policies built from it, and its orderer
//! values. Immutable; a config block replaces it as a whole.

use weft_policy::ChannelAuthority;
use weft_protos::common::Config;

use crate::config::{ChannelOrdererConfig, Consensus};
use crate::error::{Error, Result};

/// A channel's configuration at one sequence.
#[derive(Debug)]
pub(crate) struct ChannelConfig {
    pub config: Config,
    /// The block that carries this configuration.
    pub block: u64,
    pub authority: ChannelAuthority,
    pub orderer: ChannelOrdererConfig,
    /// The DER of each consenter's client TLS certificate (Raft's, or a
    /// Kafka channel's orderers named with their certificates): who may
    /// send this channel cluster traffic when the cluster runs mutual TLS.
    /// A consenter whose certificate does not parse is left out (it cannot
    /// be authenticated); empty for solo.
    pub consenter_certificates: Vec<Vec<u8>>,
    /// Each consenter's endpoint (`host:port`) and the DER of its
    /// server TLS certificate: what a node dialling it must find there.
    /// A certificate that does not parse is kept empty, which no server
    /// presents: that consenter cannot be dialled over TLS.
    pub consenter_servers: Vec<crate::consensus::pinned::ServerPin>,
}

impl ChannelConfig {
    pub fn new(channel_id: &str, block: u64, config: Config) -> Result<Self> {
        let orderer =
            ChannelOrdererConfig::from_config(&config).map_err(|source| Error::Config {
                channel: channel_id.to_owned(),
                block,
                source,
            })?;
        let authority = ChannelAuthority::from_config(&config).map_err(|e| Error::Authority {
            channel: channel_id.to_owned(),
            block,
            reason: e.to_string(),
        })?;
        let consenters = match &orderer.consensus {
            Consensus::Solo => &[][..],
            Consensus::Kafka(kafka) => kafka.consenters.as_slice(),
            Consensus::EtcdRaft(metadata) => metadata.consenters.as_slice(),
        };
        let consenter_certificates = consenters
            .iter()
            .filter_map(|consenter| weft_msp::certificate_der(&consenter.client_tls_cert).ok())
            .collect();
        let consenter_servers = consenters
            .iter()
            .map(|consenter| {
                (
                    format!("{}:{}", consenter.host, consenter.port),
                    weft_msp::certificate_der(&consenter.server_tls_cert).unwrap_or_default(),
                )
            })
            .collect();
        Ok(Self {
            config,
            block,
            authority,
            orderer,
            consenter_certificates,
            consenter_servers,
        })
    }

    /// Whether `der` is the client TLS certificate of one of the
    /// channel's consenters.
    pub fn is_consenter(&self, der: &[u8]) -> bool {
        self.consenter_certificates
            .iter()
            .any(|certificate| certificate == der)
    }

    /// The configuration's sequence number: how many updates led to it.
    pub fn sequence(&self) -> u64 {
        self.config.sequence
    }
}
