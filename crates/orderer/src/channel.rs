//! One channel as the orderer holds it: its block store, its current
//! configuration, and the mailbox of the task that orders it.
//!
//! A channel starts from its genesis block (bootstrap, on an empty store)
//! or from its store (restart): then the last config block is found
//! through the tip's last-config index and its configuration is current
//! again. Each configuration is an immutable [`ChannelConfig`]; a config
//! block replaces it as a whole, and with it the identity cache.

use std::path::Path;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use prost::Message;
use weft_ledger::{BlockStore, StoreConfig};
use weft_policy::ChannelAuthority;
use weft_protos::block::{config_of_block, last_config_index};
use weft_protos::common::{Block, Config};

use crate::chain::ChainHandle;
use crate::config::{ChannelOrdererConfig, Consensus};
use crate::error::{Error, Result};
use crate::metrics::OrdererMetrics;

/// A channel's configuration at one sequence, as the orderer uses it.
#[derive(Debug)]
pub(crate) struct ChannelConfig {
    pub config: Config,
    /// The block that carries this configuration.
    pub block: u64,
    pub authority: ChannelAuthority,
    pub orderer: ChannelOrdererConfig,
    /// The DER of each Raft consenter's client TLS certificate: who may
    /// send this channel cluster traffic when the cluster runs mutual TLS.
    /// A consenter whose certificate does not parse is left out (it cannot
    /// be authenticated); empty for solo.
    pub consenter_certificates: Vec<Vec<u8>>,
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
        let consenter_certificates = match &orderer.consensus {
            Consensus::Solo => Vec::new(),
            Consensus::EtcdRaft(metadata) => metadata
                .consenters
                .iter()
                .filter_map(|consenter| weft_msp::certificate_der(&consenter.client_tls_cert).ok())
                .collect(),
        };
        Ok(Self {
            config,
            block,
            authority,
            orderer,
            consenter_certificates,
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

/// A channel being served.
#[derive(Debug)]
pub(crate) struct Channel {
    pub id: String,
    pub store: Arc<BlockStore>,
    config: RwLock<Arc<ChannelConfig>>,
    pub chain: ChainHandle,
    pub metrics: OrdererMetrics,
    /// Why the channel's consenter stopped, once it failed (`/healthz`).
    failure: Mutex<Option<String>>,
}

impl Channel {
    pub fn new(
        id: String,
        store: Arc<BlockStore>,
        config: ChannelConfig,
        chain: ChainHandle,
        metrics: OrdererMetrics,
    ) -> Self {
        metrics.height(&id, store.height());
        Self {
            id,
            store,
            config: RwLock::new(Arc::new(config)),
            chain,
            metrics,
            failure: Mutex::new(None),
        }
    }

    /// Records that the channel's consenter stopped with `reason`.
    pub fn failed(&self, reason: String) {
        *self.failure.lock() = Some(reason);
    }

    /// Why the channel's consenter stopped, if it failed.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// The current configuration.
    pub fn config(&self) -> Arc<ChannelConfig> {
        self.config.read().clone()
    }

    /// Makes `config` current (after its block was written).
    pub fn install(&self, config: ChannelConfig) {
        *self.config.write() = Arc::new(config);
    }
}

/// Fabric's channel name rule: lowercase letters, digits, `.` and `-`,
/// starting with a letter, under 250 characters. The name becomes a
/// directory name, so nothing else may pass.
pub(crate) fn check_channel_name(channel_id: &str) -> std::result::Result<(), String> {
    let valid = channel_id.len() < 250
        && channel_id.starts_with(|c: char| c.is_ascii_lowercase())
        && channel_id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "invalid channel name {channel_id:?}: use lowercase letters, digits, '.' and '-', starting with a letter"
        ))
    }
}

/// The channel a genesis block starts, with its configuration; checks
/// that it is one.
pub(crate) fn genesis_channel(genesis: &Block) -> Result<(String, Config)> {
    let not_genesis = |reason: &str| Error::BadChain {
        channel: String::new(),
        block: genesis.header.as_ref().map_or(0, |header| header.number),
        reason: format!("not a genesis block: {reason}"),
    };
    let header = genesis
        .header
        .as_ref()
        .ok_or_else(|| not_genesis("no header"))?;
    if header.number != 0 {
        return Err(not_genesis("its number is not 0"));
    }
    let (channel_id, config) =
        config_of_block(genesis).ok_or_else(|| not_genesis("it holds no config transaction"))?;
    check_channel_name(&channel_id).map_err(|reason| Error::BadChain {
        channel: channel_id.clone(),
        block: 0,
        reason,
    })?;
    Ok((channel_id, config))
}

/// Opens the store of `channel_id` at `path`, appending `genesis` when the
/// store is new. Returns the store and the channel's current
/// configuration.
pub(crate) fn open_store(
    channel_id: &str,
    path: &Path,
    store_config: &StoreConfig,
    genesis: Option<&Block>,
) -> Result<(Arc<BlockStore>, ChannelConfig)> {
    let ledger_error = |source| Error::Ledger {
        channel: channel_id.to_owned(),
        source,
    };
    let mut store_config = store_config.clone();
    store_config.path = path.to_owned();
    let store = BlockStore::open(&store_config).map_err(ledger_error)?;
    if store.height() == 0 {
        let genesis = genesis.ok_or_else(|| Error::BadChain {
            channel: channel_id.to_owned(),
            block: 0,
            reason: "the block store is empty and no genesis block was given".to_owned(),
        })?;
        store.append(genesis).map_err(ledger_error)?;
    } else if let Some(genesis) = genesis {
        // A restart with the bootstrap block still configured: it must be
        // this channel's genesis block, not another channel's of that name.
        let stored = store.block_bytes(0).map_err(ledger_error)?;
        if stored.as_deref() != Some(genesis.encode_to_vec().as_slice()) {
            return Err(Error::BadChain {
                channel: channel_id.to_owned(),
                block: 0,
                reason: "the stored genesis block differs from the bootstrap block given"
                    .to_owned(),
            });
        }
    }
    let config = current_config(channel_id, &store)?;
    Ok((Arc::new(store), config))
}

/// The configuration in force at the tip of `store`.
fn current_config(channel_id: &str, store: &BlockStore) -> Result<ChannelConfig> {
    let corrupt = |block: u64, reason: String| Error::BadChain {
        channel: channel_id.to_owned(),
        block,
        reason,
    };
    let ledger_error = |source| Error::Ledger {
        channel: channel_id.to_owned(),
        source,
    };
    let tip_number = store
        .height()
        .checked_sub(1)
        .ok_or_else(|| corrupt(0, "the block store is empty".to_owned()))?;
    let tip = store
        .block(tip_number)
        .map_err(ledger_error)?
        .ok_or_else(|| corrupt(tip_number, "missing below the height".to_owned()))?;
    // A genesis block from a configuration tool may carry no last-config
    // index; it is its own config block.
    let config_number = match last_config_index(&tip) {
        Some(number) => number,
        None if tip_number == 0 => 0,
        None => {
            return Err(corrupt(
                tip_number,
                "the block records no last config block".to_owned(),
            ));
        }
    };
    let config_block = store
        .block(config_number)
        .map_err(ledger_error)?
        .ok_or_else(|| corrupt(config_number, "the last config block is missing".to_owned()))?;
    let (found_id, config) = config_of_block(&config_block).ok_or_else(|| {
        corrupt(
            config_number,
            "the last config block holds no config".to_owned(),
        )
    })?;
    if found_id != channel_id {
        return Err(corrupt(
            config_number,
            format!("the config block belongs to channel {found_id:?}"),
        ));
    }
    ChannelConfig::new(channel_id, config_number, config)
}
