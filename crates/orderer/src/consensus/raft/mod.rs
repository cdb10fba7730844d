//! The Raft consenter (Fabric's etcdraft): the orderers named in a
//! channel's `ConsensusType` metadata order it together with raft-rs.
//!
//! **Who is who.** Each consenter of the channel's etcdraft
//! `ConfigMetadata` has a Raft ID, which every block records in config
//! order (`etcdraft.BlockMetadata.consenter_ids`, with the next ID to give
//! out): 1, 2, … for a channel's first consenters. A node finds itself by
//! its cluster endpoint (`host:port`, as the config names it). With TLS
//! on, a cluster caller must present a consenter's client TLS certificate
//! (see `super::cluster`), and a dialled node the server certificate the
//! config names (`super::pinned`).
//!
//! **Membership.** A config update may add or remove one consenter
//! (Fabric's rule). The leader proposes such a config as a raft-rs
//! membership change carrying the config entry, so every node writes the
//! config block and changes its voters at the same index; the new
//! consenter gets the next ID, a removed one's is never given again. A
//! removed node stops ordering the channel there. A new node joins from
//! the config block that added it (`join`): it pulls the chain up to it,
//! then starts with an empty log, skipping the entries its blocks hold as
//! the leader sends them; membership changes are applied to raft-rs's
//! voters even then, which changes nothing the second time.
//!
//! **What the log holds.** One entry per block: the leader runs the
//! [`BlockCutter`] and proposes each cut batch (or a config envelope,
//! alone) as one entry. Every node, leader included, turns each committed
//! entry into the next block with its [`BlockWriter`], in log order, so
//! all nodes store the same headers and data (the same header hashes);
//! only the SIGNATURES metadata differs, each orderer signing its own
//! copy as in Fabric. Each block records the Raft index it was decided at
//! (`etcdraft.BlockMetadata.raft_index`), so a restarted node knows which
//! entries it has applied: the block store is the state machine, and
//! applying an entry twice is impossible.
//!
//! **When a client hears SUCCESS.** Only once the envelope's block is
//! decided (its entry committed by a majority and applied here), so an
//! envelope answered SUCCESS survives the loss of any minority of nodes,
//! the leader included. A follower checks an envelope as Broadcast does,
//! forwards it to the leader (`super::cluster`) and relays the leader's
//! answer; with no leader known it answers SERVICE_UNAVAILABLE, as
//! Fabric does. Broadcast finds the leader through the channel's
//! [`Route`], which this task keeps current, and forwards without passing
//! through this task, which spends much of its time persisting entries
//! and writing blocks.
//!
//! **Determinism.** Nothing is checked when an entry is applied: the
//! leader checks before proposing. It takes new envelopes only once it
//! has applied every entry of earlier terms, and proposes nothing while
//! a config entry is in flight, so the configuration an envelope was
//! checked against is the one in force when its block is written.
//!
//! **Snapshots.** After `SnapshotIntervalSize` bytes of entries, a node
//! compacts its log into a snapshot that only says how many blocks the
//! chain has (`SnapshotData`), on a thread of its own: the block store is
//! synced first, and ordering goes on meanwhile. A node that receives a
//! snapshot pulls the missing blocks from another consenter before taking
//! it.
//!
//! The task drives raft-rs as designed: it ticks the `RawNode`, steps
//! messages, proposes; each `Ready` is handled where the loop runs
//! (persist, send, apply), then `advance`d, and its messages to the other
//! consenters leave from there too. On a node runtime of one worker the
//! loop is one of its tasks; beside more workers, it has a thread and a
//! runtime of its own.

mod acks;
mod join;
mod storage;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message as _;
use raft::eraftpb::{Entry, EntryType, MessageType, Snapshot};
use raft::{RawNode, StateRole};
use tokio::sync::{mpsc, oneshot};
use weft_protos::cluster::{Batch as LogBatch, LogEntry, SnapshotData, log_entry};
use weft_protos::common::Status;
use weft_protos::etcdraft;
use weft_protos::tx::Sign;

use super::{ChainTask, Mailbox, Submission, ordered_config, reconfigure, single_worker};
use crate::admission::{Admitted, Refusal, readmit};
use crate::channel::Channel;
use crate::channel_config::ChannelConfig;
use crate::checkpoint::{Checkpoints, Load, Seal};
use crate::config::Consensus;
use crate::cutter::{Batch, BlockCutter, CutReason};
use crate::error::{Error, Result};
use crate::metrics::RaftGauges;
use crate::writer::{BlockContent, BlockWriter};
use weft_protos::block::config_of_block;

use super::cluster::Transport;
use acks::Acknowledgements;
pub(crate) use join::pull_chain_to;
pub(crate) use storage::LogStore;

/// Fabric's etcdraft defaults (configtxgen), for options left at zero.
const TICK_INTERVAL_DEFAULT: Duration = Duration::from_millis(500);
const ELECTION_TICK_DEFAULT: u32 = 10;
const HEARTBEAT_TICK_DEFAULT: u32 = 1;
const MAX_INFLIGHT_BLOCKS_DEFAULT: u32 = 5;
const SNAPSHOT_INTERVAL_BYTES_DEFAULT: u64 = 16 * 1024 * 1024;
/// The largest append message Raft builds (it always holds one entry).
const RAFT_MESSAGE_BYTES_MAX: u64 = 1024 * 1024;
/// Append messages in flight to one follower.
const RAFT_INFLIGHT_MESSAGES_MAX: usize = 256;
/// Entries kept in the log behind a snapshot, so that a follower a little
/// behind catches up from the log rather than a snapshot (Fabric's
/// `SnapshotCatchUpEntries`).
const SNAPSHOT_CATCH_UP_ENTRIES: usize = 4;
/// Raft messages stepped before their `Ready` is handled, at most.
const INBOX_DRAINED_MAX: usize = 256;
/// How often a node missing blocks retries pulling them.
const PULL_RETRY: Duration = Duration::from_millis(500);
/// How many rounds of pulling from every peer before giving up.
const PULL_ROUNDS_MAX: u32 = 120;

/// This node's place in a channel's consenter set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Members {
    /// Raft ID → endpoint `host:port`.
    pub endpoints: BTreeMap<u64, String>,
    /// The Raft IDs in the order the config lists the consenters, as
    /// blocks record them.
    pub in_config_order: Vec<u64>,
    pub self_id: u64,
}

impl Members {
    /// The consenters of `metadata` with Raft IDs 1, 2, … in config order
    /// (a channel's first consenters), with this node found by its cluster
    /// endpoint.
    #[cfg(test)]
    pub fn new(metadata: &etcdraft::ConfigMetadata, self_endpoint: &str) -> Result<Self, String> {
        let ids: Vec<u64> = (1..=metadata.consenters.len() as u64).collect();
        Self::with_ids(metadata, &ids, self_endpoint)
    }

    /// The consenters of `metadata` with the Raft IDs `ids`, in the same
    /// order (as each block's etcdraft metadata records them), with this
    /// node found by its cluster endpoint.
    pub fn with_ids(
        metadata: &etcdraft::ConfigMetadata,
        ids: &[u64],
        self_endpoint: &str,
    ) -> Result<Self, String> {
        if ids.len() != metadata.consenters.len() {
            return Err(format!(
                "{} consenters but {} raft IDs recorded for them",
                metadata.consenters.len(),
                ids.len()
            ));
        }
        let endpoints: BTreeMap<u64, String> = ids
            .iter()
            .zip(&metadata.consenters)
            .map(|(id, consenter)| (*id, endpoint_of(consenter)))
            .collect();
        if endpoints.is_empty() {
            return Err("the etcdraft metadata names no consenter".to_owned());
        }
        if endpoints.len() != ids.len() || endpoints.contains_key(&0) {
            return Err(format!(
                "the raft IDs {ids:?} are not distinct and positive"
            ));
        }
        let mut distinct: Vec<&String> = endpoints.values().collect();
        distinct.sort();
        distinct.dedup();
        if distinct.len() != endpoints.len() {
            return Err("two consenters have the same host:port".to_owned());
        }
        let self_id = endpoints
            .iter()
            .find(|(_, endpoint)| endpoint.as_str() == self_endpoint)
            .map(|(id, _)| *id)
            .ok_or_else(|| {
                format!(
                    "this node's cluster endpoint {self_endpoint} is not among the channel's \
                     consenters [{}]",
                    endpoints.values().cloned().collect::<Vec<_>>().join(", ")
                )
            })?;
        Ok(Self {
            endpoints,
            in_config_order: ids.to_vec(),
            self_id,
        })
    }

    pub fn ids(&self) -> Vec<u64> {
        self.endpoints.keys().copied().collect()
    }

    fn self_endpoint(&self) -> &str {
        self.endpoints.get(&self.self_id).map_or("", String::as_str)
    }
}

/// A consenter's cluster endpoint, `host:port`.
pub(crate) fn endpoint_of(consenter: &etcdraft::Consenter) -> String {
    format!("{}:{}", consenter.host, consenter.port)
}

/// The Raft IDs of a channel's consenters, in config order, and the ID the
/// next consenter added gets: as the tip block's etcdraft metadata records
/// them (Fabric's `consenter_ids`, `next_consenter_id`), or 1, 2, … for a
/// chain whose blocks record none yet (a new channel).
pub(crate) fn consenter_ids(
    tip: &weft_protos::common::Block,
    metadata: &etcdraft::ConfigMetadata,
) -> (Vec<u64>, u64) {
    let recorded = weft_protos::block::consenter_metadata(tip)
        .and_then(|bytes| etcdraft::BlockMetadata::decode(bytes).ok())
        .filter(|recorded| recorded.consenter_ids.len() == metadata.consenters.len());
    match recorded {
        Some(recorded) => {
            let highest = recorded.consenter_ids.iter().copied().max().unwrap_or(0);
            let next = recorded.next_consenter_id.max(highest + 1);
            (recorded.consenter_ids, next)
        }
        None => {
            let count = metadata.consenters.len() as u64;
            ((1..=count).collect(), count + 1)
        }
    }
}

/// How a config changes a Raft channel's consenter set: Fabric's rule of
/// at most one consenter added or removed per config update (a consenter
/// whose certificates change but whose endpoint stays is the same one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MembershipChange {
    Unchanged,
    /// The consenter at this endpoint joins.
    Add(String),
    /// The consenter with this Raft ID leaves.
    Remove(u64),
}

impl MembershipChange {
    /// The change from `members` to the consenters of `next`, or why it is
    /// not allowed.
    pub fn between(members: &Members, next: &etcdraft::ConfigMetadata) -> Result<Self, String> {
        let next_endpoints: Vec<String> = next.consenters.iter().map(endpoint_of).collect();
        let mut distinct = next_endpoints.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() != next_endpoints.len() {
            return Err("two consenters have the same host:port".to_owned());
        }
        if next_endpoints.is_empty() {
            return Err("the config names no consenter".to_owned());
        }
        let added: Vec<&String> = next_endpoints
            .iter()
            .filter(|endpoint| !members.endpoints.values().any(|known| known == *endpoint))
            .collect();
        let removed: Vec<u64> = members
            .endpoints
            .iter()
            .filter(|(_, endpoint)| !next_endpoints.contains(endpoint))
            .map(|(id, _)| *id)
            .collect();
        match (added.as_slice(), removed.as_slice()) {
            ([], []) => Ok(Self::Unchanged),
            ([endpoint], []) => Ok(Self::Add((*endpoint).clone())),
            ([], [id]) => Ok(Self::Remove(*id)),
            _ => Err(format!(
                "the config adds {} and removes {} consenters; a config update may add or \
                 remove one consenter at a time",
                added.len(),
                removed.len()
            )),
        }
    }
}

/// The Raft timing and limits of a channel, from its etcdraft options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Options {
    pub tick_interval: Duration,
    pub election_tick: u32,
    pub heartbeat_tick: u32,
    pub max_inflight_blocks: u32,
    pub snapshot_interval_bytes: u64,
}

impl Options {
    /// Reads `options`, with Fabric's defaults for values left at zero.
    pub fn new(options: Option<&etcdraft::Options>) -> Result<Self, String> {
        let options = options.cloned().unwrap_or_default();
        let tick_interval = if options.tick_interval.is_empty() {
            TICK_INTERVAL_DEFAULT
        } else {
            weft_protos::duration::parse_go_duration(&options.tick_interval)
                .map_err(|e| format!("Options.TickInterval {:?}: {e}", options.tick_interval))?
        };
        if tick_interval.is_zero() {
            return Err("Options.TickInterval must be positive".to_owned());
        }
        let or = |value: u32, default: u32| if value == 0 { default } else { value };
        let parsed = Self {
            tick_interval,
            election_tick: or(options.election_tick, ELECTION_TICK_DEFAULT),
            heartbeat_tick: or(options.heartbeat_tick, HEARTBEAT_TICK_DEFAULT),
            max_inflight_blocks: or(options.max_inflight_blocks, MAX_INFLIGHT_BLOCKS_DEFAULT),
            snapshot_interval_bytes: if options.snapshot_interval_size == 0 {
                SNAPSHOT_INTERVAL_BYTES_DEFAULT
            } else {
                u64::from(options.snapshot_interval_size)
            },
        };
        if parsed.election_tick <= parsed.heartbeat_tick {
            return Err(format!(
                "Options.ElectionTick ({}) must be greater than Options.HeartbeatTick ({})",
                parsed.election_tick, parsed.heartbeat_tick
            ));
        }
        Ok(parsed)
    }
}

/// The etcdraft metadata of a channel configuration, or why there is none.
pub(crate) fn raft_metadata(config: &ChannelConfig) -> Option<&etcdraft::ConfigMetadata> {
    match &config.orderer.consensus {
        Consensus::EtcdRaft(metadata) => Some(metadata),
        Consensus::Solo | Consensus::Kafka(_) => None,
    }
}

/// The Raft index a block records (0 for blocks without one: the genesis
/// block, solo blocks).
fn raft_index_of(block: &weft_protos::common::Block) -> u64 {
    weft_protos::block::consenter_metadata(block)
        .and_then(|bytes| etcdraft::BlockMetadata::decode(bytes).ok())
        .map_or(0, |metadata| metadata.raft_index)
}

/// Where a Raft channel's Broadcast sends the envelopes it accepted: to
/// this node's Raft task while this node leads, straight onto the leader's
/// `Forward` stream otherwise (not through the task, which spends much of
/// its time persisting entries and writing blocks), nowhere while no
/// leader is known. The task keeps the leader up to date; an envelope
/// routed to a node that just lost the leadership is refused there.
#[derive(Debug)]
pub(crate) struct Route {
    /// The leader's Raft ID; 0 while none is known.
    leader: AtomicU64,
    self_id: u64,
    /// The consenters' cluster endpoints by Raft ID, as the task last
    /// applied a membership change.
    endpoints: parking_lot::RwLock<BTreeMap<u64, Arc<str>>>,
    transport: Arc<Transport>,
}

/// Who leads, as a [`Route`] knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leader {
    Unknown,
    ThisNode,
    /// Another node, at this cluster endpoint.
    Other(Arc<str>),
}

impl Route {
    pub fn new(members: &Members, transport: Arc<Transport>) -> Self {
        let route = Self {
            leader: AtomicU64::new(0),
            self_id: members.self_id,
            endpoints: parking_lot::RwLock::default(),
            transport,
        };
        route.set_members(members);
        route
    }

    pub fn leader(&self) -> Leader {
        let leader = self.leader.load(Ordering::Acquire);
        if leader == self.self_id {
            return Leader::ThisNode;
        }
        match self.endpoints.read().get(&leader) {
            Some(endpoint) => Leader::Other(endpoint.clone()),
            None => Leader::Unknown,
        }
    }

    fn set_leader(&self, leader: u64) {
        self.leader.store(leader, Ordering::Release);
    }

    fn set_members(&self, members: &Members) {
        *self.endpoints.write() = members
            .endpoints
            .iter()
            .map(|(id, endpoint)| (*id, Arc::from(endpoint.as_str())))
            .collect();
    }

    pub fn transport(&self) -> &Transport {
        &self.transport
    }
}

/// Everything a channel's Raft task starts from.
pub(crate) struct Setup {
    pub channel: Arc<Channel>,
    pub mailbox: Mailbox,
    pub inbox: mpsc::Receiver<raft::eraftpb::Message>,
    pub writer: BlockWriter,
    pub signer: Arc<dyn Sign + Send + Sync>,
    pub transport: Arc<Transport>,
    pub members: Members,
    /// The Raft ID the next consenter added gets.
    pub next_consenter_id: u64,
    pub options: Options,
    pub store: LogStore,
    pub route: Arc<Route>,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("channel", &self.channel.id)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

/// Opens a channel's Raft log and starts its task. Blocks from a snapshot
/// the chain lacks are pulled first.
pub(crate) async fn start(setup: Setup) -> Result<ChainTask> {
    let channel_id = setup.channel.id.clone();
    let raft_error = |reason: String| Error::Raft {
        channel: channel_id.clone(),
        reason,
    };
    let Setup {
        channel,
        mailbox,
        inbox,
        mut writer,
        signer,
        transport,
        members,
        next_consenter_id,
        options,
        store,
        route,
    } = setup;
    // A node that has just joined the channel has its blocks (pulled from
    // the others) but no log: raft-rs starts it from nothing, and the
    // entries its blocks hold are skipped as they come.
    let joined = store.is_empty();
    // A snapshot taken before a crash may be ahead of the block store.
    let snapshot = store.snapshot_now();
    let (writer_back, pulled) = {
        let channel = channel.clone();
        let transport = transport.clone();
        let members = members.clone();
        // Appending what it pulls blocks the thread for as long as that
        // takes: not a worker's.
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let result = runtime.block_on(catch_up(
                &channel,
                &mut writer,
                &transport,
                &members,
                &snapshot,
            ));
            (writer, result)
        })
        .await
        .map_err(|e| raft_error(format!("catching up failed: {e}")))?
    };
    pulled?;
    // Raft's synced log is this node's record: block writes need no fsync.
    let writer = writer_back.backed_by_log();
    let snapshot_index = store.snapshot_now().get_metadata().index;
    let tip = channel
        .store
        .height()
        .checked_sub(1)
        .ok_or_else(|| raft_error("the block store is empty".to_owned()))?;
    let tip_block = channel
        .store
        .block(tip)
        .map_err(|source| Error::Ledger {
            channel: channel_id.clone(),
            source,
        })?
        .ok_or_else(|| raft_error(format!("block {tip} is missing")))?;
    let applied = raft_index_of(&tip_block).max(snapshot_index);
    let raft_applied = if joined { 0 } else { applied };
    store.commit_at_least(raft_applied);
    let config = raft::Config {
        id: members.self_id,
        election_tick: options.election_tick as usize,
        heartbeat_tick: options.heartbeat_tick as usize,
        applied: raft_applied,
        max_size_per_msg: RAFT_MESSAGE_BYTES_MAX,
        max_inflight_msgs: RAFT_INFLIGHT_MESSAGES_MAX,
        check_quorum: true,
        pre_vote: true,
        ..raft::Config::default()
    };
    config
        .validate()
        .map_err(|e| raft_error(format!("raft config: {e}")))?;
    let logger = slog::Logger::root(
        TracingDrain,
        slog::o!("channel" => channel_id.clone(), "raft_id" => members.self_id),
    );
    let node = RawNode::new(&config, store.clone(), &logger)
        .map_err(|e| raft_error(format!("starting the raft node: {e}")))?;
    let batch = channel.config().orderer.clone();
    tracing::info!(
        channel = %channel_id,
        raft_id = members.self_id,
        consenters = members.endpoints.len(),
        applied,
        "raft node started"
    );
    let shared = channel.clone();
    let node_transport = transport.clone();
    // The loop's state, once its thread has a runtime to send from.
    let core = move |steps: Transport| Core {
        cutter: BlockCutter::new(batch.batch_size, batch.batch_timeout),
        checkpoints: Checkpoints::new(batch.stream),
        channel,
        node,
        store,
        writer,
        signer,
        transport,
        steps,
        next_consenter_id,
        members,
        options,
        applied,
        bytes_since_snapshot: 0,
        recent: std::collections::VecDeque::new(),
        pending_waiters: Vec::new(),
        proposed: BTreeMap::new(),
        config_in_flight: None,
        leader_since: None,
        leader_known: 0,
        route,
        compaction: None,
        acks: Acknowledgements::default(),
    };
    let (halt, halted) = oneshot::channel();
    // Where the loop runs: each `Ready` (log writes, block writes) is
    // handled right there, since a hop to a blocking thread and back per
    // `Ready` cost more than the Raft logic, and its messages leave from
    // there too. On a runtime with one worker the loop is one of its
    // tasks: a thread of its own would trade the worker a wake-up for
    // every envelope submitted, message stepped and block delivered, and
    // 7–10 context switches per streamed block cost an orderer more than
    // the worker waiting out the loop's syncs (docs/benchmarks.md,
    // eighteenth slice). With more workers the loop gets a thread and a
    // runtime of its own, so that its syncs hold up no worker's tasks.
    let task = if single_worker() {
        tokio::spawn(async move {
            let core = core(node_transport.on_runtime(tokio::runtime::Handle::current()));
            // raft-rs panics on a log that breaks Raft's rules; the
            // channel stops and says why, as on any other failure.
            let result = tokio::spawn(run(core, mailbox.0, inbox, halted))
                .await
                .unwrap_or_else(|joined| {
                    let reason = match joined.try_into_panic() {
                        Ok(panic) => panic_reason(panic.as_ref()).to_owned(),
                        Err(joined) => joined.to_string(),
                    };
                    Err(raft_failed(&channel_id, &reason))
                });
            stopped(&shared, result)
        })
    } else {
        tokio::task::spawn_blocking(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Error::Task {
                    channel: channel_id.clone(),
                    reason: format!("starting the raft loop's runtime: {e}"),
                })
                .and_then(|runtime| {
                    let core = core(node_transport.on_runtime(runtime.handle().clone()));
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        runtime.block_on(run(core, mailbox.0, inbox, halted))
                    }))
                    .unwrap_or_else(|panic| {
                        Err(raft_failed(&channel_id, panic_reason(panic.as_ref())))
                    })
                });
            stopped(&shared, result)
        })
    };
    Ok(ChainTask { halt, task })
}

/// What a panic of the Raft loop said.
fn panic_reason(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a panic")
}

fn raft_failed(channel_id: &str, reason: &str) -> Error {
    Error::Raft {
        channel: channel_id.to_owned(),
        reason: format!("the raft node failed: {reason}"),
    }
}

/// Marks the channel failed when its Raft loop ended in an error.
fn stopped(channel: &Channel, result: Result<()>) -> Result<()> {
    if let Err(error) = &result {
        tracing::error!(channel = %channel.id, %error, "raft chain stopped");
        channel.failed(error.to_string());
    }
    result
}

/// Pulls the blocks a snapshot says the chain has and the store lacks.
async fn catch_up(
    channel: &Channel,
    writer: &mut BlockWriter,
    transport: &Arc<Transport>,
    members: &Members,
    snapshot: &Snapshot,
) -> Result<()> {
    if snapshot.get_metadata().index == 0 {
        return Ok(());
    }
    let data = SnapshotData::decode(snapshot.get_data()).map_err(|e| Error::Raft {
        channel: channel.id.clone(),
        reason: format!("a snapshot's data does not decode: {e}"),
    })?;
    let mut rounds = 0;
    while writer.next_number() < data.height {
        let mut progressed = false;
        for (id, endpoint) in &members.endpoints {
            if *id == members.self_id {
                continue;
            }
            let start = writer.next_number();
            let pulled = transport
                .pull(endpoint, &channel.id, start, data.height)
                .await;
            match pulled {
                Ok(blocks) => {
                    for block in &blocks {
                        let pulled = writer.check_pulled(block)?;
                        // In force before its block is visible, as when an
                        // entry is applied: a reader waiting on this node
                        // is checked under the config before it is sent
                        // the block that carries it.
                        install_if_config(channel, block)?;
                        writer.append_pulled(pulled)?;
                        progressed = true;
                    }
                    channel.metrics.height(&channel.id, writer.next_number());
                    tracing::info!(
                        channel = %channel.id,
                        from = %endpoint,
                        blocks = blocks.len(),
                        height = writer.next_number(),
                        target = data.height,
                        "pulled blocks to catch up with a snapshot"
                    );
                }
                Err(error) => {
                    tracing::warn!(channel = %channel.id, peer = %endpoint, %error, "pulling blocks failed");
                }
            }
            if writer.next_number() >= data.height {
                break;
            }
        }
        if !progressed {
            rounds += 1;
            if rounds >= PULL_ROUNDS_MAX {
                return Err(Error::Raft {
                    channel: channel.id.clone(),
                    reason: format!(
                        "no consenter could give blocks {}..{}",
                        writer.next_number(),
                        data.height
                    ),
                });
            }
            tokio::time::sleep(PULL_RETRY).await;
        }
    }
    if writer.next_number() == data.height
        && channel.store.last_header_hash().map(|hash| hash.to_vec())
            != Some(data.last_header_hash.to_vec())
    {
        return Err(Error::BadChain {
            channel: channel.id.clone(),
            block: data.height.saturating_sub(1),
            reason: "the chain differs from the one the raft snapshot describes".to_owned(),
        });
    }
    Ok(())
}

/// Makes a pulled config block's configuration current.
fn install_if_config(channel: &Channel, block: &weft_protos::common::Block) -> Result<()> {
    let number = block.header.as_ref().map_or(0, |header| header.number);
    if weft_protos::block::last_config_index(block) != Some(number) {
        return Ok(());
    }
    if let Some((_, config)) = config_of_block(block) {
        channel.install(ChannelConfig::new(&channel.id, number, config)?);
    }
    Ok(())
}

/// Envelopes of one proposed entry waiting for their answer.
#[derive(Debug)]
struct Proposed {
    term: u64,
    waiters: Vec<Option<oneshot::Sender<Result<(), Refusal>>>>,
}

/// The state of one channel's Raft node: everything but the receivers
/// the loop waits on, which `run` holds.
struct Core {
    channel: Arc<Channel>,
    node: RawNode<LogStore>,
    store: LogStore,
    writer: BlockWriter,
    signer: Arc<dyn Sign + Send + Sync>,
    /// The node's transport: forwards to the leader, pulls of blocks.
    transport: Arc<Transport>,
    /// Raft messages to the other consenters, sent from this loop's own
    /// runtime.
    steps: Transport,
    members: Members,
    /// The Raft ID the next consenter added gets.
    next_consenter_id: u64,
    options: Options,
    /// The last entry turned into a block (or covered by a snapshot).
    applied: u64,
    bytes_since_snapshot: u64,
    /// The chain after each of the last block entries applied: (Raft
    /// index, height, last header hash), the candidates for a snapshot.
    recent: std::collections::VecDeque<(u64, u64, Bytes)>,
    /// Leader only: the cutter's pending envelopes and their waiters, in
    /// the same order.
    cutter: BlockCutter,
    pending_waiters: Vec<Option<oneshot::Sender<Result<(), Refusal>>>>,
    /// Leader only: which proposed batches are checkpoints (stream
    /// channels; block channels sign every block).
    checkpoints: Checkpoints,
    /// Entries proposed by this node and not applied yet, by index.
    proposed: BTreeMap<u64, Proposed>,
    /// The index of a proposed config entry not applied yet.
    config_in_flight: Option<u64>,
    /// Leader only: the last index when it became leader; it takes new
    /// envelopes once it has applied that far.
    leader_since: Option<u64>,
    /// The leader as this node last knew it (0: none), for the metric of
    /// leader changes.
    leader_known: u64,
    /// Tells Broadcast where the leader is.
    route: Arc<Route>,
    /// The log compaction under way, if any.
    compaction: Option<std::thread::JoinHandle<Result<()>>>,
    /// Follower: which acknowledgements the leader already has.
    acks: Acknowledgements,
}

fn answer(waiter: Option<oneshot::Sender<Result<(), Refusal>>>, result: Result<(), Refusal>) {
    if let Some(waiter) = waiter {
        // The client may have gone.
        let _ = waiter.send(result);
    }
}

fn unavailable(info: &str) -> Result<(), Refusal> {
    Err(Refusal::new(Status::ServiceUnavailable, info))
}

async fn run(
    mut core: Core,
    mut mailbox: mpsc::Receiver<Submission>,
    mut inbox: mpsc::Receiver<raft::eraftpb::Message>,
    mut halted: oneshot::Receiver<()>,
) -> Result<()> {
    let mut ticks = tokio::time::interval(core.options.tick_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let deadline = match (core.is_leader(), core.checkpoints.streams()) {
            (false, _) => None,
            (true, false) => core.cutter.deadline(),
            // A checkpoint is proposed only when the leader may propose: a
            // deadline that passed meanwhile fires once it can.
            (true, true) => core
                .checkpoints
                .deadline()
                .filter(|_| core.takes_submissions()),
        };
        let timer = async {
            match deadline {
                Some(deadline) => {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
                }
                None => std::future::pending().await,
            }
        };
        let takes = core.takes_submissions();
        tokio::select! {
            biased;
            _ = &mut halted => break,
            message = inbox.recv() => match message {
                Some(message) => {
                    core.step(message)?;
                    // Whatever else arrived goes into the same `Ready`: one
                    // log write and one round of sends for all of it.
                    for _ in 1..INBOX_DRAINED_MAX {
                        match inbox.try_recv() {
                            Ok(message) => core.step(message)?,
                            Err(_) => break,
                        }
                    }
                }
                None => break,
            },
            _ = ticks.tick() => {
                core.node.tick();
            }
            submission = mailbox.recv(), if takes => match submission {
                Some(submission) => core.submit(submission),
                None => break,
            },
            () = timer => {
                if core.checkpoints.streams() {
                    core.propose_checkpoint();
                } else if let Some(batch) = core.cutter.expire(Instant::now()) {
                    core.propose_batch(batch, CutReason::Timeout);
                }
            }
        }
        // A stream channel's leader cuts as soon as it has taken all it
        // can: nothing waits for a batch timeout.
        if core.is_leader()
            && core.checkpoints.streams()
            && core.takes_submissions()
            && mailbox.is_empty()
        {
            let batch = core.cutter.cut();
            core.propose_batch(batch, CutReason::Stream);
        }
        if core.node.has_ready() {
            core.handle_ready().await?;
        }
    }
    // Envelopes not decided yet get no SUCCESS; their clients hear the
    // consenter stopped (the waiters are dropped).
    core.finish_compaction()?;
    tracing::info!(channel = %core.channel.id, "raft chain halted");
    Ok(())
}

impl Core {
    fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// Whether the task takes envelopes from its mailbox now: a follower
    /// always does (it forwards them or refuses them); a leader once it
    /// may propose and while it has room for more blocks in flight.
    fn takes_submissions(&self) -> bool {
        if !self.is_leader() {
            return true;
        }
        self.leader_since.is_some_and(|since| self.applied >= since)
            && self.config_in_flight.is_none()
            && self.proposed.len() < self.options.max_inflight_blocks as usize
    }

    /// Steps a message from another node. Fails when a leader's heartbeat
    /// shows that this node's log lost entries it had acknowledged: the
    /// leader sends a commit index only up to what this node said it
    /// holds, so one past the end of the log means the disk lost writes
    /// it had reported synced. Such a node can no longer vote safely
    /// (Raft counts on acknowledged entries staying), so the channel
    /// stops here, as etcd and Fabric's etcdraft halt, instead of raft-rs
    /// panicking on it.
    fn step(&mut self, message: raft::eraftpb::Message) -> Result<()> {
        if !self.members.endpoints.contains_key(&message.from) {
            tracing::warn!(channel = %self.channel.id, from = message.from, "a raft message from an unknown node");
            return Ok(());
        }
        let last_index = self.node.raft.raft_log.last_index();
        if commits_past_the_log(&message, self.node.raft.term, last_index) {
            return Err(Error::Raft {
                channel: self.channel.id.clone(),
                reason: format!(
                    "this node's raft log lost entries it had acknowledged: it ends at entry \
                     {last_index}, and the leader (node {}) counts entries up to {} as held here; \
                     its disk lost writes it had reported synced, and the node stops ordering \
                     the channel rather than vote on a log it cannot trust",
                    message.from, message.commit
                ),
            });
        }
        if let Err(error) = acks::step(&mut self.node, &mut self.acks, message) {
            tracing::debug!(channel = %self.channel.id, %error, "raft message not stepped");
        }
        Ok(())
    }

    fn submit(&mut self, submission: Submission) {
        let Submission {
            input,
            forwarded,
            done,
        } = submission;
        if self.is_leader() {
            self.order(input, done);
            return;
        }
        if forwarded {
            answer(
                done,
                unavailable("this orderer is not the Raft leader any more; retry"),
            );
            return;
        }
        let leader = self.node.raft.leader_id;
        let Some(endpoint) = self.members.endpoints.get(&leader).cloned() else {
            answer(
                done,
                unavailable("no Raft leader: the cluster is electing one; retry"),
            );
            return;
        };
        self.transport
            .try_forward(&endpoint, &self.channel.id, input, done);
    }

    /// The leader orders an envelope: checks it again if the config
    /// changed since it was checked, cuts, proposes.
    fn order(&mut self, input: Admitted, done: Option<oneshot::Sender<Result<(), Refusal>>>) {
        let input = match readmit(input, &self.channel.config(), self.signer.as_ref()) {
            Ok(input) => input,
            Err(refusal) => return answer(done, Err(refusal)),
        };
        match input {
            Admitted::Normal {
                envelope,
                size_bytes,
                ..
            } => {
                let ordered = self.cutter.ordered(envelope, size_bytes, Instant::now());
                self.pending_waiters.push(done);
                for (batch, reason) in ordered.batches.into_iter().zip(ordered.reasons) {
                    self.propose_batch(batch, reason);
                }
            }
            Admitted::Config { envelope, .. } => {
                let change = match self.membership_change(&envelope) {
                    Ok(change) => change,
                    Err(refusal) => return answer(done, Err(refusal)),
                };
                let pending = self.cutter.cut();
                self.propose_batch(pending, CutReason::Config);
                self.channel
                    .metrics
                    .block_cut(&self.channel.id, CutReason::Config);
                let entry = LogEntry {
                    content: Some(log_entry::Content::Config(envelope)),
                };
                self.config_in_flight = match change {
                    MembershipChange::Unchanged => self.propose(&entry, vec![done]),
                    change => self.propose_membership(&entry, &change, done),
                };
            }
        }
    }

    /// Proposes a config that adds or removes a consenter as a Raft
    /// membership change carrying the config (its context), so that every
    /// node writes the config block and changes its voters at the same
    /// entry. Its index, or `None` (the waiter refused) when Raft drops it
    /// (one membership change at a time).
    fn propose_membership(
        &mut self,
        entry: &LogEntry,
        change: &MembershipChange,
        done: Option<oneshot::Sender<Result<(), Refusal>>>,
    ) -> Option<u64> {
        let mut conf_change = raft::eraftpb::ConfChange::default();
        match change {
            MembershipChange::Unchanged => return None,
            MembershipChange::Add(_) => {
                conf_change.set_change_type(raft::eraftpb::ConfChangeType::AddNode);
                conf_change.node_id = self.next_consenter_id;
            }
            MembershipChange::Remove(id) => {
                conf_change.set_change_type(raft::eraftpb::ConfChangeType::RemoveNode);
                conf_change.node_id = *id;
            }
        }
        match self
            .node
            .propose_conf_change(entry.encode_to_vec(), conf_change)
        {
            Ok(()) => {
                let index = self.node.raft.raft_log.last_index();
                let term = self.node.raft.term;
                self.proposed.insert(
                    index,
                    Proposed {
                        term,
                        waiters: vec![done],
                    },
                );
                tracing::info!(channel = %self.channel.id, ?change, index, "membership change proposed");
                Some(index)
            }
            Err(error) => {
                tracing::warn!(channel = %self.channel.id, %error, "a membership change was dropped");
                answer(
                    done,
                    unavailable(&format!(
                        "the consenter set cannot change now ({error}); retry"
                    )),
                );
                None
            }
        }
    }

    /// How a config envelope changes the consenter set, or why it is
    /// refused: leaving Raft, or changing more than one consenter at once.
    fn membership_change(&self, envelope: &Bytes) -> Result<MembershipChange, Refusal> {
        let bad = |info: String| Err(Refusal::new(Status::BadRequest, info));
        let block = weft_protos::block::new_block(0, &[], vec![envelope.clone()]);
        let Some((_, config)) = config_of_block(&block) else {
            return bad("the config envelope holds no config".to_owned());
        };
        let next = match ChannelConfig::new(&self.channel.id, 0, config) {
            Ok(next) => next,
            Err(error) => return bad(format!("the updated config is unusable: {error}")),
        };
        let Some(metadata) = raft_metadata(&next) else {
            return bad(
                "changing the consensus type of a Raft channel is not supported".to_owned(),
            );
        };
        MembershipChange::between(&self.members, metadata)
            .map_err(|reason| Refusal::new(Status::BadRequest, reason))
    }

    fn propose_batch(&mut self, batch: Batch, reason: CutReason) {
        if batch.is_empty() {
            return;
        }
        self.channel.metrics.block_cut(&self.channel.id, reason);
        let waiters: Vec<_> = self
            .pending_waiters
            .drain(..batch.len().min(self.pending_waiters.len()))
            .collect();
        // A stream block cut with no other block in flight is the last
        // before the leader goes idle: it carries the checkpoint.
        let load = if reason == CutReason::Stream && self.proposed.is_empty() {
            Load::Idle
        } else {
            Load::Busy
        };
        let checkpoint = self.checkpoints.seal(batch.len(), Instant::now(), load) == Seal::Signed
            && self.checkpoints.streams();
        let entry = LogEntry {
            content: Some(log_entry::Content::Transactions(LogBatch {
                envelopes: batch,
                checkpoint,
            })),
        };
        self.propose(&entry, waiters);
    }

    /// A stream channel's checkpoint interval ran out with blocks unsigned:
    /// proposes an empty checkpoint block.
    fn propose_checkpoint(&mut self) {
        if !self.checkpoints.pending() || !self.takes_submissions() {
            return;
        }
        let batch = self.cutter.cut();
        if !batch.is_empty() {
            self.checkpoints.overdue(Instant::now());
            self.propose_batch(batch, CutReason::Checkpoint);
            return;
        }
        self.checkpoints.signed();
        self.channel
            .metrics
            .block_cut(&self.channel.id, CutReason::Checkpoint);
        let entry = LogEntry {
            content: Some(log_entry::Content::Transactions(LogBatch {
                envelopes: Vec::new(),
                checkpoint: true,
            })),
        };
        self.propose(&entry, Vec::new());
    }

    /// Proposes one entry; its index, or `None` (waiters refused) when
    /// Raft drops it.
    fn propose(
        &mut self,
        entry: &LogEntry,
        waiters: Vec<Option<oneshot::Sender<Result<(), Refusal>>>>,
    ) -> Option<u64> {
        match self.node.propose(Vec::new(), entry.encode_to_vec()) {
            Ok(()) => {
                let index = self.node.raft.raft_log.last_index();
                let term = self.node.raft.term;
                self.proposed.insert(index, Proposed { term, waiters });
                Some(index)
            }
            Err(error) => {
                tracing::warn!(channel = %self.channel.id, %error, "a proposal was dropped");
                for waiter in waiters {
                    answer(waiter, unavailable("the Raft leader changed; retry"));
                }
                None
            }
        }
    }

    /// Handles one `Ready`: persist, send, apply, advance. Blocks the
    /// loop's thread (the log's synced write), but lets the messages it
    /// sends leave first: the loop's runtime writes them out only when
    /// the loop awaits.
    async fn handle_ready(&mut self) -> Result<()> {
        let channel_id = self.channel.id.clone();
        let raft_error = move |reason: String| Error::Raft {
            channel: channel_id.clone(),
            reason,
        };
        let mut ready = self.node.ready();
        if let Some(soft) = ready.ss() {
            let role = soft.raft_state;
            let leader = soft.leader_id;
            self.on_role(role, leader);
        }
        // A leader may send before persisting (Raft thesis 10.2.1), so
        // that the followers' syncs overlap its own.
        if self.send(ready.take_messages()) && !ready.entries().is_empty() {
            tokio::task::yield_now().await;
        }
        if !ready.snapshot().is_empty() {
            let snapshot = ready.snapshot().clone();
            self.install_snapshot(&snapshot).await?;
        }
        if let Some(took) = self
            .store
            .persist(ready.entries(), ready.hs(), true)
            .map_err(&raft_error)?
        {
            self.note_persisted(took);
        }
        let mut sent = self.send(ready.take_persisted_messages());
        let committed = ready.take_committed_entries();
        self.apply(committed)?;
        let mut light = self.node.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.store.set_commit(commit);
        }
        sent |= self.send(light.take_messages());
        let committed = light.take_committed_entries();
        self.apply(committed)?;
        self.node.advance_apply();
        let raft = &self.node.raft;
        self.channel.metrics.raft(
            &self.channel.id,
            RaftGauges {
                term: raft.term,
                leader_id: raft.leader_id,
                commit_index: raft.raft_log.committed,
                is_leader: raft.state == StateRole::Leader,
            },
        );
        self.maybe_compact()?;
        // The acknowledgements leave before the loop takes its next
        // message, which may mean another synced write.
        if sent {
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// Records how long a synced write of the Raft log took, and warns,
    /// as Fabric's etcdraft does, when it took more than half the election
    /// timeout: followers that wait that long for the leader's log to sync
    /// may start an election. A slow disk shows here first.
    fn note_persisted(&self, took: Duration) {
        self.channel.metrics.raft_persisted(&self.channel.id, took);
        let election_timeout = self.options.tick_interval * self.options.election_tick;
        if took > election_timeout / 2 {
            tracing::warn!(
                channel = %self.channel.id,
                took_ms = took.as_millis(),
                election_timeout_ms = election_timeout.as_millis(),
                "a synced Raft log write took more than half the election timeout: the disk is \
                 too slow, and the cluster may lose its leader"
            );
        }
    }

    fn on_role(&mut self, role: StateRole, leader: u64) {
        if leader != self.leader_known {
            self.leader_known = leader;
            self.channel.metrics.leader_changed(&self.channel.id);
        }
        self.route.set_leader(leader);
        let was_leader = self.leader_since.is_some();
        if role == StateRole::Leader && !was_leader {
            self.leader_since = Some(self.node.raft.raft_log.last_index());
            let config = self.channel.config();
            self.cutter = BlockCutter::new(config.orderer.batch_size, config.orderer.batch_timeout);
            self.checkpoints = Checkpoints::new(config.orderer.stream);
            // The last leader may have left blocks unsigned, some of them
            // perhaps not applied here yet: a stream channel's new leader
            // starts with a checkpoint, once it has applied them.
            self.checkpoints.overdue(Instant::now());
            tracing::info!(channel = %self.channel.id, term = self.node.raft.term, "this node leads the channel's raft cluster");
        } else if role != StateRole::Leader && was_leader {
            self.leader_since = None;
            // Envelopes not proposed yet were never answered: refuse them.
            self.cutter.cut();
            for waiter in self.pending_waiters.drain(..) {
                answer(waiter, unavailable("the Raft leader changed; retry"));
            }
            tracing::info!(channel = %self.channel.id, leader, "this node no longer leads");
        } else {
            tracing::info!(channel = %self.channel.id, leader, ?role, "raft role");
        }
    }

    /// Queues `messages` on their peers' `Step` streams; whether there
    /// were any.
    fn send(&mut self, messages: Vec<raft::eraftpb::Message>) -> bool {
        let any = !messages.is_empty();
        for message in messages {
            self.acks.note_sent(&message);
            match self.members.endpoints.get(&message.to) {
                Some(endpoint) => self.steps.send(endpoint, &self.channel.id, &message),
                None => {
                    tracing::warn!(channel = %self.channel.id, to = message.to, "a raft message to an unknown node");
                }
            }
        }
        any
    }

    /// Turns committed entries into blocks, in order, skipping those the
    /// chain already holds.
    fn apply(&mut self, entries: Vec<Entry>) -> Result<()> {
        let mut removed = None;
        for entry in entries {
            if entry.get_entry_type() == EntryType::EntryConfChange {
                // Voters change even where the block is already written
                // (a node that joined replays the changes before it).
                removed = removed.or(self.apply_membership(&entry)?);
            }
            if entry.index <= self.applied {
                continue;
            }
            if entry.get_entry_type() == EntryType::EntryNormal && !entry.get_data().is_empty() {
                let consenter_ids = self.members.in_config_order.clone();
                self.apply_entry(&entry, entry.get_data(), consenter_ids)?;
                self.bytes_since_snapshot += entry.get_data().len() as u64;
            }
            self.applied = entry.index;
            if let Some(proposed) = self.proposed.remove(&entry.index) {
                let result = if proposed.term == entry.term {
                    Ok(())
                } else {
                    unavailable("the Raft leader changed before the envelope was ordered; retry")
                };
                for waiter in proposed.waiters {
                    answer(waiter, result.clone());
                }
            }
            if self
                .config_in_flight
                .is_some_and(|index| index <= entry.index)
            {
                self.config_in_flight = None;
            }
        }
        match removed {
            // Every waiter is answered; the channel stops here.
            Some(block) => Err(Error::Raft {
                channel: self.channel.id.clone(),
                reason: format!(
                    "config block {block} removed this node from the channel's consenters; it \
                     orders the channel no more (its blocks stay readable)"
                ),
            }),
            None => Ok(()),
        }
    }

    /// Applies a committed membership change: raft-rs's voters, then (if
    /// the chain does not hold it yet) the config block it carries, with
    /// the consenters' new Raft IDs in its metadata. The config block's
    /// number when it removed this node.
    fn apply_membership(&mut self, entry: &Entry) -> Result<Option<u64>> {
        let bad = |reason: String| Error::Raft {
            channel: self.channel.id.clone(),
            reason: format!("committed membership change {}: {reason}", entry.index),
        };
        let change =
            <raft::eraftpb::ConfChange as protobuf::Message>::parse_from_bytes(entry.get_data())
                .map_err(|e| bad(format!("does not decode: {e}")))?;
        let voters = self
            .node
            .apply_conf_change(&change)
            .map_err(|e| bad(format!("raft refused it: {e}")))?;
        // Before the block: a node that stops between the two applies the
        // change again on restart, which changes nothing the second time.
        self.store.set_conf_state(&voters).map_err(&bad)?;
        if entry.index <= self.applied {
            return Ok(None);
        }
        let decoded = LogEntry::decode(entry.get_context())
            .map_err(|e| bad(format!("does not decode: {e}")))?;
        let Some(log_entry::Content::Config(envelope)) = &decoded.content else {
            return Err(bad("carries no config".to_owned()));
        };
        let number = self.writer.next_number();
        let config = ordered_config(&self.channel.id, number, envelope)?;
        let metadata = raft_metadata(&config)
            .ok_or_else(|| bad("its config does not name etcdraft".to_owned()))?;
        let ids: Vec<u64> = metadata
            .consenters
            .iter()
            .map(|consenter| {
                let endpoint = endpoint_of(consenter);
                self.members
                    .endpoints
                    .iter()
                    .find(|(_, known)| **known == endpoint)
                    .map_or(change.node_id, |(id, _)| *id)
            })
            .collect();
        let self_endpoint = self.members.self_endpoint().to_owned();
        let removed = !metadata
            .consenters
            .iter()
            .any(|consenter| endpoint_of(consenter) == self_endpoint);
        if !removed {
            self.members = Members::with_ids(metadata, &ids, &self_endpoint).map_err(&bad)?;
            self.route.set_members(&self.members);
        }
        if change.get_change_type() == raft::eraftpb::ConfChangeType::AddNode {
            self.next_consenter_id = self.next_consenter_id.max(change.node_id + 1);
        }
        self.apply_entry(entry, entry.get_context(), ids.clone())?;
        self.bytes_since_snapshot += entry.get_context().len() as u64;
        tracing::info!(
            channel = %self.channel.id,
            block = number,
            change = ?change.get_change_type(),
            raft_id = change.node_id,
            consenters = ?ids,
            "the consenter set changed"
        );
        Ok(removed.then_some(number))
    }

    /// Turns the log entry `data` (decided at `entry`) into the next block,
    /// recording the consenters' Raft IDs `consenter_ids`.
    fn apply_entry(&mut self, entry: &Entry, data: &[u8], consenter_ids: Vec<u64>) -> Result<()> {
        let bad = |reason: String| Error::Raft {
            channel: self.channel.id.clone(),
            reason: format!("committed entry {}: {reason}", entry.index),
        };
        let decoded = LogEntry::decode(data).map_err(|e| bad(format!("does not decode: {e}")))?;
        // Block channels sign every block; a stream channel the blocks
        // its leader marked as checkpoints (config blocks always).
        let streams = self.channel.config().orderer.stream.is_some();
        let (content, seal) = match decoded.content {
            Some(log_entry::Content::Transactions(batch)) => {
                let seal = if streams && !batch.checkpoint {
                    Seal::Unsigned
                } else {
                    Seal::Signed
                };
                (BlockContent::Transactions(batch.envelopes), seal)
            }
            Some(log_entry::Content::Config(envelope)) => {
                (BlockContent::Config(envelope), Seal::Signed)
            }
            None => return Err(bad("holds nothing".to_owned())),
        };
        if let BlockContent::Config(envelope) = &content {
            let number = self.writer.next_number();
            let config = ordered_config(&self.channel.id, number, envelope)?;
            reconfigure(&mut self.cutter, &mut self.checkpoints, &config);
            tracing::info!(
                channel = %self.channel.id,
                block = number,
                sequence = config.sequence(),
                "channel reconfigured"
            );
            // In force before its block is visible (as solo does), so that
            // a client who sees the block can transact under it; the leader
            // takes nothing new while a config entry is in flight, so what
            // is checked under it is ordered after it.
            self.channel.install(config);
        }
        let metadata = etcdraft::BlockMetadata {
            consenter_ids,
            next_consenter_id: self.next_consenter_id,
            raft_index: entry.index,
        }
        .encode_to_vec();
        let block = self
            .writer
            .write_with_consenter_metadata(&content, metadata.into(), seal)?;
        let number = block.header.as_ref().map_or(0, |header| header.number);
        self.channel.metrics.height(&self.channel.id, number + 1);
        if let Some(header) = &block.header {
            let hash = weft_protos::hash::block_header_hash(header);
            self.recent
                .push_back((entry.index, number + 1, Bytes::copy_from_slice(&hash)));
            if self.recent.len() > SNAPSHOT_CATCH_UP_ENTRIES + 1 {
                self.recent.pop_front();
            }
        }
        tracing::debug!(
            channel = %self.channel.id,
            block = number,
            raft_index = entry.index,
            transactions = block.data.as_ref().map_or(0, |data| data.data.len()),
            "block written"
        );
        Ok(())
    }

    /// Takes a snapshot from the leader: pulls the blocks it covers, then
    /// replaces the log.
    async fn install_snapshot(&mut self, snapshot: &Snapshot) -> Result<()> {
        let index = snapshot.get_metadata().index;
        tracing::info!(channel = %self.channel.id, index, "installing a raft snapshot");
        catch_up(
            &self.channel,
            &mut self.writer,
            &self.transport,
            &self.members,
            snapshot,
        )
        .await?;
        self.store
            .apply_snapshot(snapshot)
            .map_err(|reason| Error::Raft {
                channel: self.channel.id.clone(),
                reason,
            })?;
        self.applied = self.applied.max(index);
        self.recent.clear();
        // Proposals the snapshot covers have an unknown fate here.
        let later = self.proposed.split_off(&(index + 1));
        for (_, proposed) in std::mem::replace(&mut self.proposed, later) {
            for waiter in proposed.waiters {
                answer(waiter, unavailable("the Raft leader changed; retry"));
            }
        }
        Ok(())
    }

    /// Compacts the log once enough has been applied since the last
    /// snapshot, keeping the last [`SNAPSHOT_CATCH_UP_ENTRIES`] block
    /// entries. The compaction runs on a thread of its own: it syncs the
    /// block store first, which would otherwise hold up ordering for as
    /// long as the disk takes. One runs at a time; its failure stops the
    /// channel when the next `Ready` is handled.
    fn maybe_compact(&mut self) -> Result<()> {
        if self
            .compaction
            .as_ref()
            .is_some_and(|running| !running.is_finished())
        {
            return Ok(());
        }
        self.finish_compaction()?;
        if self.bytes_since_snapshot < self.options.snapshot_interval_bytes
            || self.recent.len() <= SNAPSHOT_CATCH_UP_ENTRIES
        {
            return Ok(());
        }
        let Some((index, height, hash)) = self.recent.pop_front() else {
            return Ok(());
        };
        let data = SnapshotData {
            height,
            last_header_hash: hash,
        }
        .encode_to_vec();
        let channel = self.channel.clone();
        let log = self.store.clone();
        let thread = std::thread::Builder::new()
            .name(format!("compact-{}", self.channel.id))
            .spawn(move || compact(&channel, &log, index, height, data))
            .map_err(|error| Error::Raft {
                channel: self.channel.id.clone(),
                reason: format!("starting the log compaction: {error}"),
            })?;
        self.compaction = Some(thread);
        self.bytes_since_snapshot = 0;
        Ok(())
    }

    /// Waits for the compaction under way, if any, and reports its failure.
    fn finish_compaction(&mut self) -> Result<()> {
        match self.compaction.take().map(std::thread::JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(error))) => Err(error),
            Some(Err(_)) => Err(Error::Raft {
                channel: self.channel.id.clone(),
                reason: "the log compaction thread panicked".to_owned(),
            }),
        }
    }
}

/// Takes a snapshot of `channel`'s log at entry `index` (block height
/// `height`), once the block store holds every block up to it durably: the
/// entries compacted away can no longer rewrite their blocks (a stream
/// channel's unsigned blocks, a Raft orderer's unsynced ones).
fn compact(
    channel: &Channel,
    log: &LogStore,
    index: u64,
    height: u64,
    data: Vec<u8>,
) -> Result<()> {
    let started = Instant::now();
    channel.store.sync().map_err(|source| Error::Ledger {
        channel: channel.id.clone(),
        source,
    })?;
    log.compact(index, data).map_err(|reason| Error::Raft {
        channel: channel.id.clone(),
        reason,
    })?;
    tracing::info!(
        channel = %channel.id,
        index,
        height,
        took_ms = started.elapsed().as_secs_f64() * 1e3,
        "raft log compacted"
    );
    Ok(())
}

/// Forwards raft-rs's slog records to `tracing`.
struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(
        &self,
        record: &slog::Record<'_>,
        values: &slog::OwnedKVList,
    ) -> std::result::Result<(), slog::Never> {
        let mut fields = KeyValues(String::new());
        let _ = slog::KV::serialize(&record.kv(), record, &mut fields);
        let _ = slog::KV::serialize(values, record, &mut fields);
        let message = record.msg();
        let fields = fields.0;
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{message}{fields}");
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{message}{fields}"),
            slog::Level::Info => tracing::info!(target: "raft", "{message}{fields}"),
            slog::Level::Debug => tracing::debug!(target: "raft", "{message}{fields}"),
            slog::Level::Trace => tracing::trace!(target: "raft", "{message}{fields}"),
        }
        Ok(())
    }
}

/// slog key-value pairs as ` key=value` text.
struct KeyValues(String);

impl slog::Serializer for KeyValues {
    fn emit_arguments(&mut self, key: slog::Key, value: &std::fmt::Arguments<'_>) -> slog::Result {
        use std::fmt::Write as _;
        let _ = write!(self.0, " {key}={value}");
        Ok(())
    }
}

/// Whether `message` is a heartbeat of a current leader whose commit
/// index lies past `last_index`, the end of this node's log: the leader
/// sends a heartbeat's commit index only up to what this node acknowledged
/// holding, so the log lost acknowledged entries. (An append carries its
/// own entries and raft-rs commits only up to them.)
fn commits_past_the_log(message: &raft::eraftpb::Message, term: u64, last_index: u64) -> bool {
    message.get_msg_type() == MessageType::MsgHeartbeat
        && message.term >= term
        && message.commit > last_index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_past_the_end_of_the_log_shows_lost_entries() {
        let message = |kind: MessageType, term: u64, commit: u64| {
            let mut message = raft::eraftpb::Message::default();
            message.set_msg_type(kind);
            message.term = term;
            message.commit = commit;
            message
        };
        // The log ends at 155 in term 3.
        assert!(commits_past_the_log(
            &message(MessageType::MsgHeartbeat, 3, 158),
            3,
            155
        ));
        assert!(commits_past_the_log(
            &message(MessageType::MsgHeartbeat, 4, 156),
            3,
            155
        ));
        assert!(!commits_past_the_log(
            &message(MessageType::MsgHeartbeat, 3, 155),
            3,
            155
        ));
        // A stale leader's heartbeat is refused by raft-rs anyway.
        assert!(!commits_past_the_log(
            &message(MessageType::MsgHeartbeat, 2, 158),
            3,
            155
        ));
        // An append's commit index goes no further than its entries.
        assert!(!commits_past_the_log(
            &message(MessageType::MsgAppend, 3, 158),
            3,
            155
        ));
    }

    fn consenter(host: &str, port: u32) -> etcdraft::Consenter {
        etcdraft::Consenter {
            host: host.to_owned(),
            port,
            ..Default::default()
        }
    }

    #[test]
    fn consenters_get_ids_in_config_order_and_self_is_found_by_endpoint() {
        let metadata = etcdraft::ConfigMetadata {
            consenters: vec![
                consenter("o0.example.com", 7050),
                consenter("o1.example.com", 7050),
                consenter("127.0.0.1", 7052),
            ],
            options: None,
        };
        let members = Members::new(&metadata, "o1.example.com:7050").unwrap();
        assert_eq!(members.self_id, 2);
        assert_eq!(members.ids(), [1, 2, 3]);
        assert_eq!(members.endpoints[&3], "127.0.0.1:7052");
        let error = Members::new(&metadata, "o9.example.com:7050").unwrap_err();
        assert!(
            error.contains("o9.example.com:7050 is not among"),
            "{error}"
        );
        let twice = etcdraft::ConfigMetadata {
            consenters: vec![consenter("a", 1), consenter("a", 1)],
            options: None,
        };
        assert!(Members::new(&twice, "a:1").is_err());
        assert!(Members::new(&etcdraft::ConfigMetadata::default(), "a:1").is_err());
    }

    #[tokio::test]
    async fn the_route_says_who_leads() {
        // Goal: Broadcast sends to the task only while this node leads,
        // to the leader's endpoint while another node leads, and nowhere
        // while none is known (an ID outside the consenters included).
        let metadata = etcdraft::ConfigMetadata {
            consenters: vec![consenter("a", 1), consenter("b", 2), consenter("c", 3)],
            options: None,
        };
        let members = Members::new(&metadata, "b:2").unwrap();
        let route = Route::new(&members, Arc::new(Transport::new(1024, None)));
        assert_eq!(route.leader(), Leader::Unknown);
        route.set_leader(2);
        assert_eq!(route.leader(), Leader::ThisNode);
        route.set_leader(3);
        assert_eq!(route.leader(), Leader::Other(Arc::from("c:3")));
        route.set_leader(9);
        assert_eq!(route.leader(), Leader::Unknown);
        route.set_leader(0);
        assert_eq!(route.leader(), Leader::Unknown);
        // After a membership change, the new consenter (ID 4) can lead and
        // the removed one (ID 3) is nobody.
        let changed = etcdraft::ConfigMetadata {
            consenters: vec![consenter("a", 1), consenter("b", 2), consenter("d", 4)],
            options: None,
        };
        route.set_members(&Members::with_ids(&changed, &[1, 2, 4], "b:2").unwrap());
        route.set_leader(4);
        assert_eq!(route.leader(), Leader::Other(Arc::from("d:4")));
        route.set_leader(3);
        assert_eq!(route.leader(), Leader::Unknown);
    }

    #[test]
    fn a_config_may_add_or_remove_one_consenter_at_a_time() {
        let metadata = |consenters: &[(&str, u32)]| etcdraft::ConfigMetadata {
            consenters: consenters
                .iter()
                .map(|(host, port)| consenter(host, *port))
                .collect(),
            options: None,
        };
        let members = Members::with_ids(
            &metadata(&[("a", 1), ("b", 2), ("c", 3)]),
            &[1, 2, 5],
            "a:1",
        )
        .unwrap();
        let change =
            |consenters: &[(&str, u32)]| MembershipChange::between(&members, &metadata(consenters));
        // Reordered, or the same endpoints (new certificates): unchanged.
        assert_eq!(
            change(&[("c", 3), ("a", 1), ("b", 2)]),
            Ok(MembershipChange::Unchanged)
        );
        assert_eq!(
            change(&[("a", 1), ("b", 2), ("c", 3), ("d", 4)]),
            Ok(MembershipChange::Add("d:4".to_owned()))
        );
        // The consenter at c:3 has Raft ID 5.
        assert_eq!(
            change(&[("a", 1), ("b", 2)]),
            Ok(MembershipChange::Remove(5))
        );
        for (consenters, expected) in [
            (
                &[("a", 1), ("b", 2), ("d", 4), ("e", 5)][..],
                "adds 2 and removes 1",
            ),
            (&[("a", 1), ("b", 2), ("d", 4)][..], "adds 1 and removes 1"),
            (&[("a", 1)][..], "adds 0 and removes 2"),
            (&[][..], "names no consenter"),
            (
                &[("a", 1), ("a", 1), ("b", 2), ("c", 3)][..],
                "same host:port",
            ),
        ] {
            let refused = change(consenters).unwrap_err();
            assert!(refused.contains(expected), "{consenters:?}: {refused}");
        }
    }

    #[test]
    fn raft_ids_come_from_the_tip_block_or_follow_config_order() {
        let metadata = etcdraft::ConfigMetadata {
            consenters: vec![consenter("a", 1), consenter("b", 2), consenter("d", 4)],
            options: None,
        };
        let mut block = weft_protos::block::new_block(7, &[], Vec::new());
        // No etcdraft metadata: the genesis block of a new channel.
        assert_eq!(consenter_ids(&block, &metadata), (vec![1, 2, 3], 4));
        let recorded = etcdraft::BlockMetadata {
            consenter_ids: vec![1, 2, 4],
            next_consenter_id: 5,
            raft_index: 12,
        };
        weft_protos::block::seal_block_unsigned(&mut block, 0, recorded.encode_to_vec().into());
        assert_eq!(consenter_ids(&block, &metadata), (vec![1, 2, 4], 5));
    }

    #[test]
    fn options_default_as_fabric_and_are_checked() {
        let defaults = Options::new(None).unwrap();
        assert_eq!(
            defaults,
            Options {
                tick_interval: Duration::from_millis(500),
                election_tick: 10,
                heartbeat_tick: 1,
                max_inflight_blocks: 5,
                snapshot_interval_bytes: 16 * 1024 * 1024,
            }
        );
        let set = etcdraft::Options {
            tick_interval: "100ms".to_owned(),
            election_tick: 5,
            heartbeat_tick: 1,
            max_inflight_blocks: 2,
            snapshot_interval_size: 1024,
        };
        let parsed = Options::new(Some(&set)).unwrap();
        assert_eq!(parsed.tick_interval, Duration::from_millis(100));
        assert_eq!(parsed.snapshot_interval_bytes, 1024);
        let slow_heartbeat = etcdraft::Options {
            election_tick: 2,
            heartbeat_tick: 2,
            ..set.clone()
        };
        assert!(Options::new(Some(&slow_heartbeat)).is_err());
        let bad_tick = etcdraft::Options {
            tick_interval: "soon".to_owned(),
            ..set
        };
        assert!(
            Options::new(Some(&bad_tick))
                .unwrap_err()
                .contains("TickInterval")
        );
    }
}
