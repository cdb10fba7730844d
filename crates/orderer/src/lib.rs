//! The orderer: takes signed transactions from clients (Broadcast), puts
//! them in order, cuts them into blocks, signs the blocks and serves them
//! to peers (Deliver), speaking Fabric v2.5's `orderer.AtomicBroadcast`.
//!
//! Start at [`Orderer::start`]: it opens or creates the channels of a data
//! directory (from genesis blocks on first start), runs one consenter task
//! per channel, and serves gRPC until [`Orderer::shutdown`]. A request
//! flows through:
//!
//! 1. `broadcast`: per envelope, decode (once) and find its channel, then
//!    `admission`: header type, size and the creator's right to write
//!    (`/Channel/Writers`), the pure checks every consenter applies again
//!    when the config changed; a config update (`config_update`) becomes
//!    the channel's next config, in a CONFIG envelope the orderer signs.
//!    Envelopes of a stream are checked concurrently, but answered and
//!    ordered in request order;
//! 2. `consensus`: the seam; a channel's task takes admitted envelopes
//!    from its bounded mailbox and decides their order: `consensus::solo`
//!    cuts them with the [`BlockCutter`] (Fabric's rules, a pure function
//!    of the envelopes and the time), `consensus::raft` has the leader cut
//!    and propose each batch as a Raft log entry, cluster traffic on
//!    `weft.cluster.Cluster`;
//! 3. [`BlockWriter`]: each decided batch becomes the next block (a
//!    deterministic function of the batch sequence), signed by the
//!    orderer and appended to the channel's `weft_ledger::BlockStore`;
//!    with Raft every consenter writes the block once Raft decides it;
//! 4. `deliver`: blocks back to readers (`/Channel/Readers`) with Fabric's
//!    seek semantics, shared with the peer through `weft_ledger`.
//!
//! `admission` sits below everything that orders: Broadcast and every
//! consenter use it, and it uses only the pure parts (`channel_config`,
//! `config`, `config_update`), so a new consenter is a module under
//! `consensus` that never reaches up into the gRPC services.
//!
//! [`ChannelOrdererConfig`] reads a channel config's orderer values.
//!
//! The orderer never imports the committer, the endorser or the world
//! state; it sees transactions only as far as their headers and creator.

mod admission;
mod broadcast;
mod chain;
mod channel;
mod channel_config;
pub mod checkpoint;
pub mod config;
mod config_update;
mod consensus;
pub mod cutter;
mod deliver;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod metrics;
mod replays;
mod server;
pub mod writer;

pub use broadcast::CHECKS_IN_FLIGHT_MAX;
pub use checkpoint::{Checkpoints, Load, Seal};
pub use config::{
    BatchSize, ChannelOrdererConfig, ConfigError, Consensus, KafkaConsensus, KafkaPayloads,
    StreamMode,
};
pub use consensus::Consenter;
pub use consensus::kafka::delete_channel_topic;
pub use cutter::{BlockCutter, CutReason};
pub use error::{Error, Result};
pub use metrics::OrdererMetrics;
pub use server::{
    ClientLimits, ClusterConfig, ClusterDial, ConsensusMode, Health, NodeConfig, NodeTls, Orderer,
};
pub use writer::{BlockContent, BlockWriter};
