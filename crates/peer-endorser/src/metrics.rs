//! The endorser's Prometheus metrics, for the peer's operations endpoint.
//!
//! Names follow Fabric's peer (`endorser_proposals_received`,
//! `endorser_successful_proposals`, `endorser_proposal_validation_failures`,
//! `endorser_endorsement_failures`, `endorser_proposal_duration`), so
//! existing dashboards keep working. weft adds where a proposal's time
//! goes, `weft_endorser_phase_seconds_total` by phase: `check` (decode,
//! creator, signature, ACL, replay), `simulate` (the chaincode, including
//! the wait for an external one) and `sign` (the endorsement).

use std::time::Duration;

use prometheus::{
    CounterVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};

/// Histogram buckets for one proposal, in seconds: 50 µs to 10 s.
const PROPOSAL_BUCKETS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 10.0,
];

/// What became of one proposal, and where its time went.
#[derive(Debug, Default, Clone)]
pub(crate) struct ProposalTrace {
    pub channel: String,
    pub chaincode: String,
    pub check: Duration,
    pub simulate: Option<Duration>,
    pub sign: Option<Duration>,
}

/// The endorser's metrics, registered once per process.
#[derive(Debug, Clone)]
pub struct EndorserMetrics {
    received: IntCounter,
    successful: IntCounter,
    validation_failures: IntCounter,
    endorsement_failures: IntCounterVec,
    duration: HistogramVec,
    phase_seconds: CounterVec,
}

impl EndorserMetrics {
    /// Creates the metrics and registers them with `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            received: IntCounter::new("endorser_proposals_received", "Proposals received.")?,
            successful: IntCounter::new("endorser_successful_proposals", "Proposals endorsed.")?,
            validation_failures: IntCounter::new(
                "endorser_proposal_validation_failures",
                "Proposals refused before simulation: malformed, bad creator or signature, \
                 access denied, replayed, unknown channel or chaincode.",
            )?,
            endorsement_failures: IntCounterVec::new(
                Opts::new(
                    "endorser_endorsement_failures",
                    "Proposals whose chaincode failed or answered an error.",
                ),
                &["channel", "chaincode"],
            )?,
            duration: HistogramVec::new(
                HistogramOpts::new(
                    "endorser_proposal_duration",
                    "Seconds from receiving a proposal to answering it.",
                )
                .buckets(PROPOSAL_BUCKETS.to_vec()),
                &["channel", "chaincode", "success"],
            )?,
            phase_seconds: CounterVec::new(
                Opts::new(
                    "weft_endorser_phase_seconds_total",
                    "Seconds spent per phase of endorsement: check, simulate, sign.",
                ),
                &["phase"],
            )?,
        };
        registry.register(Box::new(metrics.received.clone()))?;
        registry.register(Box::new(metrics.successful.clone()))?;
        registry.register(Box::new(metrics.validation_failures.clone()))?;
        registry.register(Box::new(metrics.endorsement_failures.clone()))?;
        registry.register(Box::new(metrics.duration.clone()))?;
        registry.register(Box::new(metrics.phase_seconds.clone()))?;
        Ok(metrics)
    }

    /// Records one answered proposal.
    pub(crate) fn proposal_answered(&self, trace: &ProposalTrace, endorsed: bool, took: Duration) {
        self.received.inc();
        if endorsed {
            self.successful.inc();
        } else if trace.simulate.is_none() {
            self.validation_failures.inc();
        } else {
            self.endorsement_failures
                .with_label_values(&[&trace.channel, &trace.chaincode])
                .inc();
        }
        self.duration
            .with_label_values(&[
                trace.channel.as_str(),
                trace.chaincode.as_str(),
                if endorsed { "true" } else { "false" },
            ])
            .observe(took.as_secs_f64());
        for (phase, spent) in [
            ("check", Some(trace.check)),
            ("simulate", trace.simulate),
            ("sign", trace.sign),
        ] {
            if let Some(spent) = spent {
                self.phase_seconds
                    .with_label_values(&[phase])
                    .inc_by(spent.as_secs_f64());
            }
        }
    }
}
