//! Fabric's block cutter: which ordered envelopes go into which block.
//!
//! The rules are those of Fabric's `blockcutter.Ordered` and `Cut`, applied
//! to each envelope in order, where an envelope's size is
//! `len(payload) + len(signature)`:
//!
//! 1. An envelope larger than `PreferredMaxBytes` cuts the pending batch
//!    (if any) and then goes into a batch of its own.
//! 2. An envelope that would take the pending batch past
//!    `PreferredMaxBytes` cuts the pending batch first, then starts the
//!    next one.
//! 3. A batch that reaches `MaxMessageCount` envelopes is cut.
//! 4. A pending batch is cut `BatchTimeout` after its first envelope
//!    arrived (the envelope that entered an empty batch), if nothing else
//!    cut it first.
//!
//! Config transactions always go alone in their block; the chain cuts the
//! pending batch with [`BlockCutter::cut`] before one (see `chain`).
//!
//! The cutter is pure: the time is an argument, so tests drive it with a
//! fake clock and the chain task owns the real timer.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::BatchSize;

/// A batch: the envelopes of one block, in order.
pub type Batch = Vec<Bytes>;

/// Why a batch was cut (the `reason` label of the blocks-cut metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutReason {
    /// It reached `MaxMessageCount`.
    Count,
    /// One more envelope would pass `PreferredMaxBytes`, or the envelope
    /// alone is larger than that.
    Bytes,
    /// `BatchTimeout` passed since its first envelope.
    Timeout,
    /// A config transaction follows, which is a block of its own (the
    /// config block itself counts here too).
    Config,
    /// The consenter stopped or lost the Raft leadership.
    Halt,
    /// A stream channel: the consenter was free, so the envelopes that
    /// arrived meanwhile became a block at once.
    Stream,
    /// A stream channel's checkpoint interval ran out with no block to
    /// carry the signature: an empty, signed block.
    Checkpoint,
}

impl CutReason {
    /// The reason as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Count => "count",
            Self::Bytes => "bytes",
            Self::Timeout => "timeout",
            Self::Config => "config",
            Self::Halt => "halt",
            Self::Stream => "stream",
            Self::Checkpoint => "checkpoint",
        }
    }
}

/// What ordering one envelope produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ordered {
    /// Batches cut by this envelope, in order (at most two).
    pub batches: Vec<Batch>,
    /// Why each of `batches` was cut, in the same order.
    pub reasons: Vec<CutReason>,
    /// Whether envelopes are left pending after it.
    pub pending: bool,
}

/// Fabric's block cutter over one channel's batch parameters.
#[derive(Debug)]
pub struct BlockCutter {
    batch_size: BatchSize,
    batch_timeout: Duration,
    pending: Batch,
    pending_bytes: u64,
    /// When the first envelope of the pending batch arrived.
    pending_since: Option<Instant>,
}

impl BlockCutter {
    pub fn new(batch_size: BatchSize, batch_timeout: Duration) -> Self {
        Self {
            batch_size,
            batch_timeout,
            pending: Vec::new(),
            pending_bytes: 0,
            pending_since: None,
        }
    }

    /// New batch parameters (after a config change); they apply from the
    /// next envelope on. The pending batch is kept.
    pub fn reconfigure(&mut self, batch_size: BatchSize, batch_timeout: Duration) {
        self.batch_size = batch_size;
        self.batch_timeout = batch_timeout;
    }

    /// Orders one envelope of `size_bytes` (its payload plus signature
    /// length) arriving at `now`.
    pub fn ordered(&mut self, envelope: Bytes, size_bytes: u64, now: Instant) -> Ordered {
        let preferred = u64::from(self.batch_size.preferred_max_bytes);
        let mut ordered = Ordered::default();
        let mut push = |batch: Batch, reason: CutReason| {
            ordered.batches.push(batch);
            ordered.reasons.push(reason);
        };
        if size_bytes > preferred {
            if !self.pending.is_empty() {
                push(self.cut(), CutReason::Bytes);
            }
            push(vec![envelope], CutReason::Bytes);
            return ordered;
        }
        if self.pending_bytes + size_bytes > preferred {
            push(self.cut(), CutReason::Bytes);
        }
        if self.pending.is_empty() {
            self.pending_since = Some(now);
        }
        self.pending.push(envelope);
        self.pending_bytes += size_bytes;
        if self.pending.len() >= self.batch_size.max_message_count as usize {
            push(self.cut(), CutReason::Count);
        }
        ordered.pending = !self.pending.is_empty();
        debug_assert_eq!(ordered.batches.len(), ordered.reasons.len());
        ordered
    }

    /// Cuts the pending batch, which may be empty.
    pub fn cut(&mut self) -> Batch {
        self.pending_bytes = 0;
        self.pending_since = None;
        std::mem::take(&mut self.pending)
    }

    /// When the pending batch must be cut by the batch timeout; `None`
    /// when nothing is pending.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending_since.map(|since| since + self.batch_timeout)
    }

    /// Cuts the pending batch if its deadline has passed at `now`.
    pub fn expire(&mut self, now: Instant) -> Option<Batch> {
        match self.deadline() {
            Some(deadline) if deadline <= now => Some(self.cut()),
            _ => None,
        }
    }

    /// The number of envelopes pending.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock the test moves by hand.
    struct FakeClock {
        start: Instant,
        elapsed: Duration,
    }

    impl FakeClock {
        fn new() -> Self {
            Self {
                start: Instant::now(),
                elapsed: Duration::ZERO,
            }
        }
        fn now(&self) -> Instant {
            self.start + self.elapsed
        }
        fn advance(&mut self, by: Duration) {
            self.elapsed += by;
        }
    }

    const TIMEOUT: Duration = Duration::from_secs(2);

    fn cutter(count: u32, preferred: u32) -> BlockCutter {
        BlockCutter::new(
            BatchSize {
                max_message_count: count,
                absolute_max_bytes: 10 * preferred,
                preferred_max_bytes: preferred,
            },
            TIMEOUT,
        )
    }

    /// An envelope named `name`; the cutter is told its size separately.
    fn envelope(name: &str) -> Bytes {
        Bytes::copy_from_slice(name.as_bytes())
    }

    /// Orders `(name, size)` envelopes at the clock's time and returns the
    /// batches cut, as names.
    fn order(
        cutter: &mut BlockCutter,
        clock: &FakeClock,
        envelopes: &[(&str, u64)],
    ) -> Vec<Vec<String>> {
        let mut batches = Vec::new();
        for (name, size) in envelopes {
            batches.extend(cutter.ordered(envelope(name), *size, clock.now()).batches);
        }
        names(batches)
    }

    fn names(batches: Vec<Batch>) -> Vec<Vec<String>> {
        batches
            .into_iter()
            .map(|batch| {
                batch
                    .iter()
                    .map(|e| String::from_utf8(e.to_vec()).unwrap())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn reaching_the_message_count_cuts() {
        let clock = FakeClock::new();
        let mut cutter = cutter(3, 1000);
        assert!(order(&mut cutter, &clock, &[("a", 1), ("b", 1)]).is_empty());
        assert_eq!(cutter.pending_count(), 2);
        let ordered = cutter.ordered(envelope("c"), 1, clock.now());
        assert_eq!(ordered.reasons, [CutReason::Count]);
        assert_eq!(names(ordered.batches), [["a", "b", "c"]]);
        assert!(!ordered.pending);
        assert_eq!(cutter.deadline(), None);
        assert_eq!(
            order(
                &mut cutter,
                &clock,
                &[("d", 1), ("e", 1), ("f", 1), ("g", 1)]
            ),
            [["d", "e", "f"]]
        );
        assert_eq!(cutter.pending_count(), 1);
    }

    #[test]
    fn a_message_over_preferred_size_goes_alone_after_the_pending_batch() {
        let clock = FakeClock::new();
        let mut cutter = cutter(10, 100);
        assert!(order(&mut cutter, &clock, &[("a", 10), ("b", 10)]).is_empty());
        let ordered = cutter.ordered(envelope("big"), 101, clock.now());
        assert_eq!(ordered.reasons, [CutReason::Bytes, CutReason::Bytes]);
        assert_eq!(names(ordered.batches), vec![vec!["a", "b"], vec!["big"]]);
        assert!(!ordered.pending);
        assert_eq!(cutter.pending_count(), 0);
        assert_eq!(cutter.deadline(), None);
        // With nothing pending, it is one batch of its own.
        let ordered = cutter.ordered(envelope("big2"), 5000, clock.now());
        assert_eq!(names(ordered.batches), [["big2"]]);
        // Exactly the preferred size is not "larger than".
        let ordered = cutter.ordered(envelope("edge"), 100, clock.now());
        assert!(ordered.batches.is_empty());
        assert!(ordered.pending);
    }

    #[test]
    fn a_message_that_would_overflow_cuts_the_pending_batch_first() {
        let clock = FakeClock::new();
        let mut cutter = cutter(10, 100);
        assert!(order(&mut cutter, &clock, &[("a", 40), ("b", 40)]).is_empty());
        // 80 + 20 = 100 fits exactly.
        assert!(order(&mut cutter, &clock, &[("c", 20)]).is_empty());
        let ordered = cutter.ordered(envelope("d"), 1, clock.now());
        assert_eq!(ordered.reasons, [CutReason::Bytes]);
        assert_eq!(names(ordered.batches), [["a", "b", "c"]]);
        assert!(ordered.pending);
        assert_eq!(cutter.pending_count(), 1);
    }

    #[test]
    fn overflow_and_count_can_cut_twice_for_one_message() {
        // A message that overflows the pending batch and then fills a
        // batch of count 1 yields two batches.
        let clock = FakeClock::new();
        let mut cutter = cutter(1, 100);
        assert_eq!(order(&mut cutter, &clock, &[("a", 60)]), [["a"]]);
        let mut cutter = self::cutter(2, 100);
        assert!(order(&mut cutter, &clock, &[("a", 60)]).is_empty());
        cutter.reconfigure(
            BatchSize {
                max_message_count: 1,
                absolute_max_bytes: 1000,
                preferred_max_bytes: 100,
            },
            TIMEOUT,
        );
        let ordered = cutter.ordered(envelope("b"), 60, clock.now());
        assert_eq!(ordered.reasons, [CutReason::Bytes, CutReason::Count]);
        assert_eq!(names(ordered.batches), vec![vec!["a"], vec!["b"]]);
        assert!(!ordered.pending);
    }

    #[test]
    fn the_timeout_runs_from_the_first_message_of_a_batch() {
        let mut clock = FakeClock::new();
        let mut cutter = cutter(10, 100);
        assert_eq!(cutter.deadline(), None);
        assert_eq!(cutter.expire(clock.now()), None);
        let first = clock.now();
        order(&mut cutter, &clock, &[("a", 1)]);
        assert_eq!(cutter.deadline(), Some(first + TIMEOUT));
        clock.advance(Duration::from_secs(1));
        // A later message does not move the deadline.
        order(&mut cutter, &clock, &[("b", 1)]);
        assert_eq!(cutter.deadline(), Some(first + TIMEOUT));
        clock.advance(Duration::from_millis(999));
        assert_eq!(cutter.expire(clock.now()), None);
        clock.advance(Duration::from_millis(1));
        let batch = cutter.expire(clock.now()).unwrap();
        assert_eq!(names(vec![batch]), [["a", "b"]]);
        assert_eq!(cutter.deadline(), None);
        assert_eq!(cutter.expire(clock.now() + TIMEOUT), None);
    }

    #[test]
    fn a_batch_started_by_an_overflow_gets_a_fresh_deadline() {
        let mut clock = FakeClock::new();
        let mut cutter = cutter(10, 100);
        order(&mut cutter, &clock, &[("a", 60)]);
        clock.advance(Duration::from_secs(1));
        let second = clock.now();
        assert_eq!(order(&mut cutter, &clock, &[("b", 60)]), [["a"]]);
        assert_eq!(cutter.deadline(), Some(second + TIMEOUT));
    }

    #[test]
    fn a_count_cut_clears_the_deadline_and_cut_empties() {
        let clock = FakeClock::new();
        let mut cutter = cutter(2, 100);
        order(&mut cutter, &clock, &[("a", 1), ("b", 1)]);
        assert_eq!(cutter.deadline(), None);
        assert!(cutter.cut().is_empty());
        order(&mut cutter, &clock, &[("c", 1)]);
        assert_eq!(names(vec![cutter.cut()]), [["c"]]);
        assert_eq!(cutter.deadline(), None);
        assert_eq!(cutter.pending_count(), 0);
    }

    #[test]
    fn new_parameters_apply_to_the_next_message() {
        let clock = FakeClock::new();
        let mut cutter = cutter(10, 100);
        order(&mut cutter, &clock, &[("a", 1), ("b", 1), ("c", 1)]);
        cutter.reconfigure(
            BatchSize {
                max_message_count: 2,
                absolute_max_bytes: 1000,
                preferred_max_bytes: 100,
            },
            Duration::from_millis(10),
        );
        assert_eq!(
            cutter.deadline(),
            Some(clock.now() + Duration::from_millis(10))
        );
        assert_eq!(
            order(&mut cutter, &clock, &[("d", 1)]),
            [["a", "b", "c", "d"]]
        );
    }
}
