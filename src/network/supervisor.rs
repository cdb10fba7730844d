//! What `weft network up` does when one of its nodes exits on its own:
//! it logs the exit and starts the node again after a pause that doubles
//! with each failure in a row, while the other nodes keep serving. A node
//! that fails [`RestartPolicy::attempts_max`] times in a row is reported
//! and left stopped; one that then ran long enough to count as healthy
//! starts its count again.
//!
//! A Raft cluster keeps ordering without one of its three orderers, and a
//! restarted orderer or peer catches up from the others, so a crash of one
//! node costs the network nothing it cannot recover. Ctrl-C stops
//! everything, restarts pending or not.
//!
//! Pure: the time is an argument, so the policy is tested without waiting.

use std::time::{Duration, Instant};

/// When and how often a node that exited is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The pause before the first restart; each failure in a row doubles
    /// it.
    pub first_delay: Duration,
    /// The longest pause.
    pub delay_max: Duration,
    /// Failures in a row after which the node is left stopped.
    pub attempts_max: u32,
    /// A node that ran this long before it exited starts its count again.
    pub healthy_after: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            first_delay: Duration::from_secs(1),
            delay_max: Duration::from_secs(30),
            attempts_max: 5,
            healthy_after: Duration::from_secs(60),
        }
    }
}

/// Where a supervised node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Running since `since`, after `failures` failures in a row.
    Running { since: Instant, failures: u32 },
    /// Exited; to be started again at `at`, as restart number `attempt`
    /// (1 for the first) of this run of failures.
    Waiting { at: Instant, attempt: u32 },
    /// Failed too often in a row; left stopped.
    GivenUp { failures: u32 },
}

impl NodeState {
    /// A node started at `now`.
    pub fn started(now: Instant) -> Self {
        Self::Running {
            since: now,
            failures: 0,
        }
    }
}

impl RestartPolicy {
    /// The state of a node found exited at `now`, from its state before.
    /// Only a running node can exit; any other state is kept.
    pub fn exited(&self, state: NodeState, now: Instant) -> NodeState {
        let NodeState::Running { since, failures } = state else {
            return state;
        };
        let failures = if now.saturating_duration_since(since) >= self.healthy_after {
            1
        } else {
            failures + 1
        };
        if failures > self.attempts_max {
            return NodeState::GivenUp {
                failures: failures - 1,
            };
        }
        let doublings = failures.saturating_sub(1).min(16);
        let delay = self
            .first_delay
            .saturating_mul(1 << doublings)
            .min(self.delay_max);
        NodeState::Waiting {
            at: now + delay,
            attempt: failures,
        }
    }

    /// The state of a node restarted at `now` as restart `attempt`.
    pub fn restarted(&self, attempt: u32, now: Instant) -> NodeState {
        NodeState::Running {
            since: now,
            failures: attempt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_then_the_node_is_left_stopped() {
        let policy = RestartPolicy {
            first_delay: Duration::from_secs(1),
            delay_max: Duration::from_secs(5),
            attempts_max: 4,
            healthy_after: Duration::from_secs(60),
        };
        let start = Instant::now();
        let mut now = start;
        let mut state = NodeState::started(now);
        let mut pauses = Vec::new();
        for _ in 0..4 {
            now += Duration::from_secs(2);
            state = policy.exited(state, now);
            let NodeState::Waiting { at, attempt } = state else {
                panic!("expected a restart, found {state:?}");
            };
            pauses.push((at - now).as_secs());
            now = at;
            state = policy.restarted(attempt, now);
        }
        assert_eq!(pauses, [1, 2, 4, 5]);
        now += Duration::from_secs(2);
        assert_eq!(
            policy.exited(state, now),
            NodeState::GivenUp { failures: 4 }
        );
    }

    #[test]
    fn a_node_that_ran_long_enough_starts_its_count_again() {
        let policy = RestartPolicy::default();
        let start = Instant::now();
        let state = policy.restarted(4, start);
        let later = start + policy.healthy_after;
        assert_eq!(
            policy.exited(state, later),
            NodeState::Waiting {
                at: later + policy.first_delay,
                attempt: 1
            }
        );
        // Only a running node exits.
        let given_up = NodeState::GivenUp { failures: 5 };
        assert_eq!(policy.exited(given_up, later), given_up);
    }
}
