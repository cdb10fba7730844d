//! The faults of a chaos run, drawn from a seed: the same seed and network
//! give the same faults in the same order, so a failing run can be
//! replayed. Pure: no clock, no processes.

use std::time::Duration;

/// What happens to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL; the supervisor starts it again.
    Kill,
    /// SIGSTOP, then SIGCONT after the pause: a node that stalls.
    Pause(Duration),
}

/// One round: after `wait` (counted from the network's recovery from the
/// round before), `kind` happens to node `node` (an index into the node
/// list the schedule was drawn for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub wait: Duration,
    pub node: usize,
    pub kind: FaultKind,
}

/// The shape of the faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The longest wait before a fault.
    pub wait_max: Duration,
    /// The longest pause of a stalled node.
    pub pause_max: Duration,
    /// Out of 100 faults, how many are kills (the rest are pauses).
    pub kills_per_hundred: u64,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            wait_max: Duration::from_secs(4),
            pause_max: Duration::from_secs(3),
            kills_per_hundred: 70,
        }
    }
}

/// `rounds` faults over `nodes` nodes, drawn from `seed`.
pub fn draw(seed: u64, rounds: u32, nodes: usize, shape: Shape) -> Vec<Fault> {
    let mut random = SplitMix64(seed);
    (0..rounds)
        .map(|_| {
            let wait = fraction_of(shape.wait_max, random.next());
            let node = (random.next() % nodes.max(1) as u64) as usize;
            let kind = if random.next() % 100 < shape.kills_per_hundred {
                FaultKind::Kill
            } else {
                // At least a tenth of the longest pause: a stall worth
                // the name.
                let pause = fraction_of(shape.pause_max, random.next());
                FaultKind::Pause(pause.max(shape.pause_max / 10))
            };
            Fault { wait, node, kind }
        })
        .collect()
}

/// `whole` scaled by `random / 2^64`.
fn fraction_of(whole: Duration, random: u64) -> Duration {
    let nanos = (whole.as_nanos() * u128::from(random)) >> 64;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Steele, Lea and Flood's SplitMix64: small, fast, and every seed gives a
/// full-period sequence. Not for secrets.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_draws_one_schedule_and_another_seed_another() {
        let shape = Shape::default();
        assert_eq!(draw(7, 50, 5, shape), draw(7, 50, 5, shape));
        assert_ne!(draw(7, 50, 5, shape), draw(8, 50, 5, shape));
    }

    #[test]
    fn faults_stay_within_the_shape_and_reach_every_node_and_kind() {
        let shape = Shape::default();
        let faults = draw(42, 400, 5, shape);
        assert_eq!(faults.len(), 400);
        let mut nodes_hit = [false; 5];
        let mut kills = 0;
        for fault in &faults {
            assert!(fault.wait <= shape.wait_max);
            nodes_hit[fault.node] = true;
            match fault.kind {
                FaultKind::Kill => kills += 1,
                FaultKind::Pause(pause) => {
                    assert!(pause >= shape.pause_max / 10 && pause <= shape.pause_max);
                }
            }
        }
        assert!(nodes_hit.iter().all(|hit| *hit), "{nodes_hit:?}");
        // 70 in 100 are kills: far from 0 and from 400 either way.
        assert!((200..360).contains(&kills), "{kills} kills of 400");
    }

    #[test]
    fn no_kills_when_the_shape_asks_for_none() {
        let shape = Shape {
            kills_per_hundred: 0,
            ..Shape::default()
        };
        assert!(
            draw(1, 100, 3, shape)
                .iter()
                .all(|fault| matches!(fault.kind, FaultKind::Pause(_)))
        );
    }
}
