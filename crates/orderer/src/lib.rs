//! The orderer: takes signed transactions from clients (Broadcast), puts
//! them in order, cuts them into blocks, signs the blocks and serves them
//! to peers (Deliver), speaking Fabric v2.5's `orderer.AtomicBroadcast`.
//!
//! Start at [`Orderer::start`]: it opens or creates the channels of a data
//! directory (from genesis blocks on first start), runs one consenter task
//! per channel, and serves gRPC until [`Orderer::shutdown`]. A request
//! flows through:
//!
//! 1. `broadcast`: per envelope, decode (once), channel, header type, size
//!    and the creator's right to write (`/Channel/Writers`), concurrently
//!    within a stream but answered and ordered in request order; a config
//!    update (`config_update`) becomes the channel's next config, in a
//!    CONFIG envelope the orderer signs;
//! 2. `chain`: the consensus seam; a channel's task takes accepted
//!    envelopes from its bounded mailbox, and the solo consenter cuts
//!    them with the [`BlockCutter`] (Fabric's rules, a pure function of
//!    the envelopes and the time);
//! 3. [`BlockWriter`]: each decided batch becomes the next block (a
//!    deterministic function of the batch sequence), signed by the
//!    orderer and appended to the channel's `weft_ledger::BlockStore`;
//!    with Raft (`raft`), the leader cuts and proposes each batch as a
//!    log entry, and every consenter writes the block once Raft decides
//!    it; cluster traffic travels on `weft.cluster.Cluster`;
//! 4. `deliver`: blocks back to readers (`/Channel/Readers`) with Fabric's
//!    seek semantics, shared with the peer through `weft_ledger`.
//!
//! [`ChannelOrdererConfig`] reads a channel config's orderer values.
//!
//! The orderer never imports the committer, the endorser or the world
//! state; it sees transactions only as far as their headers and creator.

mod broadcast;
mod chain;
mod channel;
pub mod config;
mod config_update;
pub mod cutter;
mod deliver;
mod error;
mod metrics;
mod raft;
mod server;
pub mod writer;

pub use broadcast::CHECKS_IN_FLIGHT_MAX;
pub use chain::Consenter;
pub use config::{BatchSize, ChannelOrdererConfig, ConfigError, Consensus};
pub use cutter::{BlockCutter, CutReason};
pub use error::{Error, Result};
pub use metrics::OrdererMetrics;
pub use server::{ClusterConfig, ConsensusMode, Health, NodeConfig, NodeTls, Orderer};
pub use writer::{BlockContent, BlockWriter};
