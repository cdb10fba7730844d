//! One channel as the orderer holds it: its block store, its current
//! configuration, and the mailbox of the task that orders it; the
//! [`Channels`] a node serves, and what serving a client request needs
//! ([`RequestContext`]).
//!
//! A channel starts from its genesis block (bootstrap, on an empty store)
//! or from its store (restart): then the last config block is found
//! through the tip's last-config index and its configuration is current
//! again. Each configuration is an immutable [`ChannelConfig`]; a config
//! block replaces it as a whole, and with it the identity cache.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use prost::Message;
use weft_ledger::{BlockStore, StoreConfig};
use weft_msp::UnixTime;
use weft_protos::block::{config_of_block, last_config_index};
use weft_protos::common::{Block, Config};
use weft_protos::tx::Sign;
use weft_protos::view::Limits;

use crate::chain::Chain;
use crate::channel_config::ChannelConfig;
use crate::consensus::pinned::ServerPins;
use crate::error::{Error, Result};
use crate::metrics::OrdererMetrics;
use crate::replays::OrderedTxIds;

/// A channel being served.
#[derive(Debug)]
pub(crate) struct Channel {
    pub id: String,
    pub store: Arc<BlockStore>,
    config: RwLock<Arc<ChannelConfig>>,
    /// Where admitted envelopes go to be ordered.
    pub chain: Arc<dyn Chain>,
    pub metrics: OrdererMetrics,
    /// Why the channel's consenter stopped, once it failed (`/healthz`).
    failure: Mutex<Option<String>>,
    /// Why the consenter cannot order for now, while it cannot (a Kafka
    /// channel whose brokers do not answer; `/healthz`).
    unavailable: Mutex<Option<String>>,
    /// Where the consenters' server certificates of each configuration
    /// go, for the node's cluster client to pin (TLS only).
    server_pins: Option<Arc<ServerPins>>,
    /// The TxIDs the channel's block writer ordered lately.
    ordered: Option<OrderedTxIds>,
}

impl Channel {
    pub fn new(
        id: String,
        store: Arc<BlockStore>,
        config: ChannelConfig,
        chain: Arc<dyn Chain>,
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
            unavailable: Mutex::new(None),
            server_pins: None,
            ordered: None,
        }
    }

    /// This channel, answering envelopes whose TxID `ordered` holds as
    /// ordered, without ordering them again.
    pub fn answering_replays_from(mut self, ordered: OrderedTxIds) -> Self {
        self.ordered = Some(ordered);
        self
    }

    /// The block that ordered `tx_id`, if it was ordered lately.
    pub fn ordered_in(&self, tx_id: &str) -> Option<u64> {
        self.ordered.as_ref()?.block_of(tx_id)
    }

    /// This channel, publishing its consenters' server certificates to
    /// `pins` now and at every config block.
    pub fn pinning_servers_in(mut self, pins: Arc<ServerPins>) -> Self {
        pins.set(&self.id, &self.config.read().consenter_servers);
        self.server_pins = Some(pins);
        self
    }

    /// Records why the consenter cannot order for now (`Some`), or that
    /// it can again (`None`).
    pub fn set_unavailable(&self, reason: Option<String>) {
        *self.unavailable.lock() = reason;
    }

    /// Records that the channel's consenter stopped with `reason`.
    pub fn failed(&self, reason: String) {
        *self.failure.lock() = Some(reason);
    }

    /// Why the channel's consenter stopped, if it failed.
    pub fn stopped(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// Why the channel's consenter stopped, if it failed, or else why it
    /// cannot order for now.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .clone()
            .or_else(|| self.unavailable.lock().clone())
    }

    /// The current configuration.
    pub fn config(&self) -> Arc<ChannelConfig> {
        self.config.read().clone()
    }

    /// Makes `config` current (after its block was written).
    pub fn install(&self, config: ChannelConfig) {
        if let Some(pins) = &self.server_pins {
            pins.set(&self.id, &config.consenter_servers);
        }
        *self.config.write() = Arc::new(config);
    }
}

/// The channels a node serves, by ID.
#[derive(Debug, Default)]
pub(crate) struct Channels {
    by_id: HashMap<String, Arc<Channel>>,
}

impl Channels {
    pub fn new(by_id: HashMap<String, Arc<Channel>>) -> Self {
        Self { by_id }
    }

    pub fn get(&self, channel_id: &str) -> Option<Arc<Channel>> {
        self.by_id.get(channel_id).cloned()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Channel>> {
        self.by_id.values()
    }
}

/// What serving a client request (Broadcast, Deliver) needs besides the
/// request.
#[derive(Clone)]
pub(crate) struct RequestContext {
    pub channels: Arc<Channels>,
    /// The node-wide decode limit; channels apply their own
    /// `AbsoluteMaxBytes` on top.
    pub limits: Limits,
    pub now: fn() -> UnixTime,
    /// How far a Deliver request's timestamp may be from `now`.
    pub time_window: std::time::Duration,
    /// The orderer's identity, which signs the CONFIG envelopes made from
    /// config updates.
    pub signer: Arc<dyn Sign + Send + Sync>,
    pub metrics: OrdererMetrics,
}

impl std::fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestContext")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
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

/// The channel a bootstrap block belongs to, with its configuration:
/// a genesis block, or a later config block of the channel to join it
/// from (see [`open_store`]); checks that it is one.
pub(crate) fn bootstrap_channel(bootstrap: &Block) -> Result<(String, Config)> {
    let number = bootstrap.header.as_ref().map(|header| header.number);
    let unusable = |reason: &str| Error::BadChain {
        channel: String::new(),
        block: number.unwrap_or(0),
        reason: format!("not a genesis or config block: {reason}"),
    };
    let number = number.ok_or_else(|| unusable("no header"))?;
    let (channel_id, config) =
        config_of_block(bootstrap).ok_or_else(|| unusable("it holds no config transaction"))?;
    if number > 0 && last_config_index(bootstrap) != Some(number) {
        return Err(unusable(
            "its metadata does not name it as the channel's last config block",
        ));
    }
    check_channel_name(&channel_id).map_err(|reason| Error::BadChain {
        channel: channel_id.clone(),
        block: number,
        reason,
    })?;
    Ok((channel_id, config))
}

/// Fetches the blocks of a channel from a given number up to the join
/// block's, checked against it (a node joining a running channel).
pub(crate) type JoinPull<'a> = &'a dyn Fn(u64) -> Result<Vec<Block>>;

/// Opens the store of `channel_id` at `path`, starting it from
/// `bootstrap` when it is new: a genesis block is appended; from a later
/// config block (joining a running channel), `pull` fetches every block
/// up to it, which resumes after a crash. Returns the store and the
/// channel's current configuration.
pub(crate) fn open_store(
    channel_id: &str,
    path: &Path,
    store_config: &StoreConfig,
    bootstrap: Option<&Block>,
    pull: Option<JoinPull<'_>>,
) -> Result<(Arc<BlockStore>, ChannelConfig)> {
    let ledger_error = |source| Error::Ledger {
        channel: channel_id.to_owned(),
        source,
    };
    let mut store_config = store_config.clone();
    store_config.path = path.to_owned();
    let store = BlockStore::open(&store_config).map_err(ledger_error)?;
    let join = bootstrap
        .and_then(|block| block.header.as_ref())
        .map_or(0, |header| header.number);
    if join > 0 {
        let join_block = bootstrap.ok_or_else(|| Error::BadChain {
            channel: channel_id.to_owned(),
            block: join,
            reason: "no join block".to_owned(),
        })?;
        if store.height() <= join {
            let pull = pull.ok_or_else(|| Error::BadChain {
                channel: channel_id.to_owned(),
                block: join,
                reason: "joining a channel from a config block needs the cluster service \
                         (cluster.listenAddress in orderer.yaml)"
                    .to_owned(),
            })?;
            for block in pull(store.height())? {
                store.append(&block).map_err(ledger_error)?;
            }
            tracing::info!(channel = %channel_id, height = store.height(), "joined the channel");
        } else {
            // A restart with the join block still configured: it must be
            // this chain's block of that number.
            let stored = store.block(join).map_err(ledger_error)?;
            let same = stored
                .as_ref()
                .and_then(|block| block.header.as_ref())
                .zip(join_block.header.as_ref())
                .is_some_and(|(stored, given)| stored == given);
            if !same {
                return Err(Error::BadChain {
                    channel: channel_id.to_owned(),
                    block: join,
                    reason: "the stored block differs from the join block given".to_owned(),
                });
            }
        }
    } else if store.height() == 0 {
        let genesis = bootstrap.ok_or_else(|| Error::BadChain {
            channel: channel_id.to_owned(),
            block: 0,
            reason: "the block store is empty and no genesis block was given".to_owned(),
        })?;
        store.append(genesis).map_err(ledger_error)?;
    } else if let Some(genesis) = bootstrap {
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
