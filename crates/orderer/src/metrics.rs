//! The orderer's Prometheus metrics, named after Fabric's where Fabric
//! has one (`broadcast_*`, `blockcutter_*`, `consensus_etcdraft_*`,
//! `ledger_blockchain_height`), so that dashboards built for Fabric
//! orderers find most of what they expect.
//!
//! The orderer updates them as it works; the binary registers them with
//! the registry its operations endpoint serves ([`OrdererMetrics::register`]).
//! Every series carries the channel; per-envelope updates touch one
//! histogram only.

use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};
use weft_protos::common::Status;

use crate::cutter::CutReason;

/// Buckets of the Broadcast latency, in seconds: from a fraction of a
/// millisecond (solo answers at once) to seconds (Raft answers once the
/// block is decided, under load or during an election).
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of a synced Raft log write, in seconds: 0.1–0.5 ms on a good
/// disk, up to the seconds that cost a cluster its leader.
const PERSIST_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The label of envelopes refused before their channel was known
/// (malformed, or for a channel not served here).
const NO_CHANNEL: &str = "";

/// The orderer's metrics; clones share the series.
#[derive(Debug, Clone)]
pub struct OrdererMetrics {
    broadcast_seconds: HistogramVec,
    blocks_cut: IntCounterVec,
    height: IntGaugeVec,
    raft_term: IntGaugeVec,
    raft_leader: IntGaugeVec,
    raft_commit_index: IntGaugeVec,
    raft_is_leader: IntGaugeVec,
    raft_leader_changes: IntCounterVec,
    raft_persist_seconds: HistogramVec,
}

impl OrdererMetrics {
    /// Creates the metrics, not registered anywhere yet.
    pub fn new() -> Result<Self, prometheus::Error> {
        let channel = &["channel"];
        let gauge = |name: &str, help: &str| IntGaugeVec::new(Opts::new(name, help), channel);
        Ok(Self {
            broadcast_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "broadcast_processed_seconds",
                    "Broadcast: from reading an envelope to its answer (with Raft, SUCCESS \
                     once its block is decided), by channel and answer status.",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
                &["channel", "status"],
            )?,
            blocks_cut: IntCounterVec::new(
                Opts::new(
                    "blockcutter_blocks_cut_total",
                    "Blocks cut, by reason: count (MaxMessageCount), bytes (PreferredMaxBytes), \
                     timeout (BatchTimeout), config (a config transaction, alone), halt (the \
                     consenter stopped or lost the Raft leadership). With Raft, counted by the \
                     leader that cut them.",
                ),
                &["channel", "reason"],
            )?,
            height: gauge(
                "ledger_blockchain_height",
                "Height of the channel's chain in blocks.",
            )?,
            raft_term: gauge("consensus_etcdraft_term", "The node's current Raft term.")?,
            raft_leader: gauge(
                "consensus_etcdraft_leader_id",
                "The Raft ID of the leader this node knows (0: none).",
            )?,
            raft_commit_index: gauge(
                "consensus_etcdraft_commit_index",
                "The highest Raft log index this node knows to be committed.",
            )?,
            raft_is_leader: gauge(
                "consensus_etcdraft_is_leader",
                "1 while this node leads the channel's Raft cluster, else 0.",
            )?,
            raft_leader_changes: IntCounterVec::new(
                Opts::new(
                    "consensus_etcdraft_leader_changes",
                    "Times this node saw the leader change.",
                ),
                channel,
            )?,
            raft_persist_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "consensus_etcdraft_data_persist_duration",
                    "The time taken for Raft entries and state to be persisted (a synced \
                     write of the Raft log), in seconds.",
                )
                .buckets(PERSIST_BUCKETS.to_vec()),
                channel,
            )?,
        })
    }

    /// Registers every series with `registry`.
    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.broadcast_seconds.clone()))?;
        registry.register(Box::new(self.blocks_cut.clone()))?;
        registry.register(Box::new(self.height.clone()))?;
        registry.register(Box::new(self.raft_term.clone()))?;
        registry.register(Box::new(self.raft_leader.clone()))?;
        registry.register(Box::new(self.raft_commit_index.clone()))?;
        registry.register(Box::new(self.raft_is_leader.clone()))?;
        registry.register(Box::new(self.raft_leader_changes.clone()))?;
        registry.register(Box::new(self.raft_persist_seconds.clone()))?;
        Ok(())
    }

    /// One Broadcast envelope answered `status` after `elapsed`.
    pub(crate) fn broadcast(&self, channel: Option<&str>, status: Status, elapsed: Duration) {
        self.broadcast_seconds
            .with_label_values(&[channel.unwrap_or(NO_CHANNEL), status.as_str_name()])
            .observe(elapsed.as_secs_f64());
    }

    /// A batch was cut for `reason`.
    pub(crate) fn block_cut(&self, channel: &str, reason: CutReason) {
        self.blocks_cut
            .with_label_values(&[channel, reason.as_str()])
            .inc();
    }

    /// The channel's chain is `height` blocks high.
    pub(crate) fn height(&self, channel: &str, height: u64) {
        self.height
            .with_label_values(&[channel])
            .set(i64::try_from(height).unwrap_or(i64::MAX));
    }

    /// The Raft state of the channel's node after a `Ready`.
    pub(crate) fn raft(&self, channel: &str, state: RaftGauges) {
        let set = |gauge: &IntGaugeVec, value: u64| {
            gauge
                .with_label_values(&[channel])
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set(&self.raft_term, state.term);
        set(&self.raft_leader, state.leader_id);
        set(&self.raft_commit_index, state.commit_index);
        set(&self.raft_is_leader, u64::from(state.is_leader));
    }

    /// A synced write of the channel's Raft log took `elapsed`.
    pub(crate) fn raft_persisted(&self, channel: &str, elapsed: Duration) {
        self.raft_persist_seconds
            .with_label_values(&[channel])
            .observe(elapsed.as_secs_f64());
    }

    /// The node saw a new leader (or lost the one it knew).
    pub(crate) fn leader_changed(&self, channel: &str) {
        self.raft_leader_changes.with_label_values(&[channel]).inc();
    }
}

/// What the Raft gauges show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RaftGauges {
    pub term: u64,
    pub leader_id: u64,
    pub commit_index: u64,
    pub is_leader: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Encoder;

    #[test]
    fn every_series_is_exported_with_its_labels() {
        // Goal: the names and labels operators scrape are the ones
        // documented, and values land where they are put.
        let metrics = OrdererMetrics::new().unwrap();
        let registry = Registry::new();
        metrics.register(&registry).unwrap();
        metrics.broadcast(Some("orders"), Status::Success, Duration::from_millis(3));
        metrics.broadcast(None, Status::BadRequest, Duration::from_micros(200));
        metrics.block_cut("orders", CutReason::Timeout);
        metrics.block_cut("orders", CutReason::Count);
        metrics.block_cut("orders", CutReason::Count);
        metrics.height("orders", 7);
        metrics.raft(
            "orders",
            RaftGauges {
                term: 3,
                leader_id: 2,
                commit_index: 41,
                is_leader: true,
            },
        );
        metrics.leader_changed("orders");
        metrics.raft_persisted("orders", Duration::from_micros(300));
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut text)
            .unwrap();
        let text = String::from_utf8(text).unwrap();
        for line in [
            r#"broadcast_processed_seconds_count{channel="orders",status="SUCCESS"} 1"#,
            r#"broadcast_processed_seconds_count{channel="",status="BAD_REQUEST"} 1"#,
            r#"blockcutter_blocks_cut_total{channel="orders",reason="count"} 2"#,
            r#"blockcutter_blocks_cut_total{channel="orders",reason="timeout"} 1"#,
            r#"ledger_blockchain_height{channel="orders"} 7"#,
            r#"consensus_etcdraft_term{channel="orders"} 3"#,
            r#"consensus_etcdraft_leader_id{channel="orders"} 2"#,
            r#"consensus_etcdraft_commit_index{channel="orders"} 41"#,
            r#"consensus_etcdraft_is_leader{channel="orders"} 1"#,
            r#"consensus_etcdraft_leader_changes{channel="orders"} 1"#,
            r#"consensus_etcdraft_data_persist_duration_bucket{channel="orders",le="0.00025"} 0"#,
            r#"consensus_etcdraft_data_persist_duration_bucket{channel="orders",le="0.0005"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
