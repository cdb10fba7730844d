//! The committer's Prometheus metrics, for the peer's operations endpoint.
//!
//! Names follow Fabric's peer where Fabric has the metric
//! (`ledger_blockchain_height`, `ledger_transaction_count`,
//! `ledger_blockstorage_commit_time`, `ledger_statedb_commit_time`), so
//! existing dashboards keep working; the stages Fabric does not expose are
//! `weft_committer_*`. Every series carries the channel.

use std::collections::HashMap;

use parking_lot::Mutex;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};
use weft_msp::CacheStats;

use crate::CommittedBlock;

/// Histogram buckets for per-block stage times, in seconds: 100 µs to 10 s.
const STAGE_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0,
];

/// The committer's metrics, registered once per process and shared by the
/// channels.
#[derive(Debug)]
pub struct CommitterMetrics {
    height: IntGaugeVec,
    transactions: IntCounterVec,
    validate_seconds: HistogramVec,
    mvcc_seconds: HistogramVec,
    block_store_seconds: HistogramVec,
    state_seconds: HistogramVec,
    queued_blocks: IntGaugeVec,
    refused_blocks: IntCounterVec,
    cache_hits: IntCounterVec,
    cache_misses: IntCounterVec,
    /// The identity-cache counts last reported per channel; a config change
    /// starts a new cache, whose counts start again from zero.
    cache_seen: Mutex<HashMap<String, CacheStats>>,
}

impl CommitterMetrics {
    /// Creates the metrics and registers them with `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let channel = &["channel"];
        let stage = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(STAGE_BUCKETS.to_vec()),
                channel,
            )
        };
        let metrics = Self {
            height: IntGaugeVec::new(
                Opts::new("ledger_blockchain_height", "Height of the chain in blocks."),
                channel,
            )?,
            transactions: IntCounterVec::new(
                Opts::new(
                    "ledger_transaction_count",
                    "Committed transactions by validation code.",
                ),
                &["channel", "validation_code"],
            )?,
            validate_seconds: stage(
                "weft_committer_validate_seconds",
                "Per block: decode, block integrity, signatures and endorsement policies (VSCC).",
            )?,
            mvcc_seconds: stage(
                "weft_committer_mvcc_seconds",
                "Per block: duplicate TxIDs, MVCC and the update batch.",
            )?,
            block_store_seconds: stage(
                "ledger_blockstorage_commit_time",
                "Per block: appending the block to the block store.",
            )?,
            state_seconds: stage(
                "ledger_statedb_commit_time",
                "Per block: applying the update batch to the world state.",
            )?,
            queued_blocks: IntGaugeVec::new(
                Opts::new(
                    "weft_committer_queued_blocks",
                    "Blocks received from the orderer and not yet committed.",
                ),
                channel,
            )?,
            refused_blocks: IntCounterVec::new(
                Opts::new(
                    "weft_committer_refused_blocks_total",
                    "Blocks refused: broken chain, data hash or orderer signatures.",
                ),
                channel,
            )?,
            cache_hits: IntCounterVec::new(
                Opts::new(
                    "weft_msp_identity_cache_hits_total",
                    "Creator and endorser identities found already validated.",
                ),
                channel,
            )?,
            cache_misses: IntCounterVec::new(
                Opts::new(
                    "weft_msp_identity_cache_misses_total",
                    "Identities validated against the channel's MSPs.",
                ),
                channel,
            )?,
            cache_seen: Mutex::new(HashMap::new()),
        };
        registry.register(Box::new(metrics.height.clone()))?;
        registry.register(Box::new(metrics.transactions.clone()))?;
        registry.register(Box::new(metrics.validate_seconds.clone()))?;
        registry.register(Box::new(metrics.mvcc_seconds.clone()))?;
        registry.register(Box::new(metrics.block_store_seconds.clone()))?;
        registry.register(Box::new(metrics.state_seconds.clone()))?;
        registry.register(Box::new(metrics.queued_blocks.clone()))?;
        registry.register(Box::new(metrics.refused_blocks.clone()))?;
        registry.register(Box::new(metrics.cache_hits.clone()))?;
        registry.register(Box::new(metrics.cache_misses.clone()))?;
        Ok(metrics)
    }

    /// Sets the height of `channel`'s chain (as when it is opened).
    pub fn set_height(&self, channel: &str, height: u64) {
        self.height
            .with_label_values(&[channel])
            .set(i64::try_from(height).unwrap_or(i64::MAX));
    }

    /// Records a committed block of `channel`.
    pub fn block_committed(&self, channel: &str, block: &CommittedBlock) {
        self.set_height(channel, block.number + 1);
        for code in &block.codes {
            self.transactions
                .with_label_values(&[channel, code.as_str_name()])
                .inc();
        }
        let timings = &block.timings;
        for (histogram, duration) in [
            (&self.validate_seconds, timings.validate),
            (&self.mvcc_seconds, timings.mvcc),
            (&self.block_store_seconds, timings.block_store),
            (&self.state_seconds, timings.state),
        ] {
            histogram
                .with_label_values(&[channel])
                .observe(duration.as_secs_f64());
        }
    }

    /// Records a refused block of `channel`.
    pub fn block_refused(&self, channel: &str) {
        self.refused_blocks.with_label_values(&[channel]).inc();
    }

    /// Sets the number of blocks of `channel` waiting to be committed.
    pub fn set_queued(&self, channel: &str, blocks: u64) {
        self.queued_blocks
            .with_label_values(&[channel])
            .set(i64::try_from(blocks).unwrap_or(i64::MAX));
    }

    /// Reports the identity-cache counts of `channel`'s current MSPs.
    pub fn identity_cache(&self, channel: &str, stats: CacheStats) {
        let mut seen = self.cache_seen.lock();
        let last = seen.entry(channel.to_owned()).or_default();
        // A new config brings a new cache whose counts restart from zero.
        let restarted = stats.hits < last.hits || stats.misses < last.misses;
        let base = if restarted {
            CacheStats::default()
        } else {
            *last
        };
        self.cache_hits
            .with_label_values(&[channel])
            .inc_by(stats.hits - base.hits);
        self.cache_misses
            .with_label_values(&[channel])
            .inc_by(stats.misses - base.misses);
        *last = stats;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use prometheus::Encoder;

    use super::*;
    use crate::{StageTimings, TxValidationCode};

    fn exposition(registry: &Registry) -> String {
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut text)
            .unwrap();
        String::from_utf8(text).unwrap()
    }

    #[test]
    fn a_committed_block_shows_in_the_exposition() {
        // Goal: an operator scraping /metrics sees height, transactions by
        // code and the stage histograms of the channel.
        let registry = Registry::new();
        let metrics = CommitterMetrics::register(&registry).unwrap();
        metrics.block_committed(
            "ch1",
            &CommittedBlock {
                number: 4,
                staged: false,
                codes: vec![
                    TxValidationCode::Valid,
                    TxValidationCode::Valid,
                    TxValidationCode::MvccReadConflict,
                ],
                reconfigured: false,
                timings: StageTimings {
                    validate: Duration::from_millis(3),
                    ..StageTimings::default()
                },
            },
        );
        let text = exposition(&registry);
        assert!(text.contains("ledger_blockchain_height{channel=\"ch1\"} 5"));
        assert!(
            text.contains("ledger_transaction_count{channel=\"ch1\",validation_code=\"VALID\"} 2")
        );
        assert!(text.contains(
            "ledger_transaction_count{channel=\"ch1\",validation_code=\"MVCC_READ_CONFLICT\"} 1"
        ));
        assert!(
            text.contains("weft_committer_validate_seconds_bucket{channel=\"ch1\",le=\"0.005\"} 1")
        );
        assert!(
            text.contains(
                "weft_committer_validate_seconds_bucket{channel=\"ch1\",le=\"0.0025\"} 0"
            )
        );
    }

    #[test]
    fn identity_cache_counts_survive_a_config_change() {
        // Goal: the counters only grow, also when a config block replaces
        // the channel's cache with an empty one.
        let registry = Registry::new();
        let metrics = CommitterMetrics::register(&registry).unwrap();
        metrics.identity_cache(
            "ch1",
            CacheStats {
                hits: 10,
                misses: 2,
                entries: 2,
            },
        );
        metrics.identity_cache(
            "ch1",
            CacheStats {
                hits: 15,
                misses: 3,
                entries: 3,
            },
        );
        metrics.identity_cache(
            "ch1",
            CacheStats {
                hits: 1,
                misses: 1,
                entries: 1,
            },
        );
        let text = exposition(&registry);
        assert!(text.contains("weft_msp_identity_cache_hits_total{channel=\"ch1\"} 16"));
        assert!(text.contains("weft_msp_identity_cache_misses_total{channel=\"ch1\"} 4"));
    }
}
