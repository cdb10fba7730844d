//! Which blocks of a stream channel the orderer signs (StreamChain's
//! periodic signatures).
//!
//! A stream channel cuts a block whenever its consenter is free, so at low
//! load each block holds one transaction. Signing each would cost every
//! peer a signature verification per transaction; instead the orderer
//! signs *checkpoints*: a block is signed once `checkpoint_transactions`
//! transactions have gone unsigned, or `checkpoint_interval` after the
//! first of them. Since a signature covers its block's header, and each
//! header carries the hash of the one before, a checkpoint authenticates
//! every block since the last one.
//!
//! A block cut when the consenter is about to go idle ([`Load::Idle`]:
//! nothing else waits, no earlier block is still being decided) is signed
//! too: otherwise the checkpoint interval would run out with no block to
//! carry the signature, and an empty checkpoint block costs every node far
//! more than one signature does. So at low load every block is signed and
//! durable at once; only under load, when blocks follow each other, do
//! signatures spread out to every N transactions or T. The empty
//! checkpoint block ([`Checkpoints::deadline`]) remains for the rare tip
//! left unsigned when load stops.
//!
//! Config blocks are always signed: peers must authenticate a new
//! configuration before they use it. Block channels sign every block.
//!
//! Pure: the time is an argument, as for the block cutter.

use std::time::Instant;

use crate::config::StreamMode;

/// Whether a block carries the orderer's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// Signed: every block of a block channel, a stream channel's
    /// checkpoints and config blocks.
    Signed,
    /// A stream channel's block between checkpoints.
    Unsigned,
}

/// What follows the block being sealed, as its consenter sees it at the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// Nothing else waits to be cut and no earlier block is still being
    /// decided: the consenter goes idle after this block.
    Idle,
    /// More blocks follow or are in flight.
    Busy,
}

/// The checkpoint state of one channel: what went unsigned since the last
/// signed block, under the channel's stream settings (`None`: a block
/// channel, every block signed).
#[derive(Debug, Clone)]
pub struct Checkpoints {
    mode: Option<StreamMode>,
    /// Transactions in unsigned blocks since the last signed block.
    unsigned_transactions: u64,
    /// When the first of them was cut.
    unsigned_since: Option<Instant>,
}

impl Checkpoints {
    pub fn new(mode: Option<StreamMode>) -> Self {
        Self {
            mode,
            unsigned_transactions: 0,
            unsigned_since: None,
        }
    }

    /// New settings (after a config block, which is itself signed).
    pub fn reconfigure(&mut self, mode: Option<StreamMode>) {
        self.mode = mode;
        self.signed();
    }

    /// Whether the channel streams.
    pub fn streams(&self) -> bool {
        self.mode.is_some()
    }

    /// The seal of the next block, of `transactions` transactions, cut at
    /// `now` under `load`; records it. An empty block is only cut as a
    /// checkpoint.
    pub fn seal(&mut self, transactions: usize, now: Instant, load: Load) -> Seal {
        let Some(mode) = self.mode else {
            return Seal::Signed;
        };
        let unsigned = self.unsigned_transactions + transactions as u64;
        let since = self.unsigned_since.unwrap_or(now);
        let due = transactions == 0
            || load == Load::Idle
            || unsigned >= u64::from(mode.checkpoint_transactions)
            || now.saturating_duration_since(since) >= mode.checkpoint_interval;
        if due {
            self.signed();
            Seal::Signed
        } else {
            self.unsigned_transactions = unsigned;
            self.unsigned_since = Some(since);
            Seal::Unsigned
        }
    }

    /// Makes a checkpoint due now: a new Raft leader whose chain ends on
    /// an unsigned block does not know since when it is unsigned.
    pub fn overdue(&mut self, now: Instant) {
        if let Some(mode) = self.mode {
            self.unsigned_since = Some(now.checked_sub(mode.checkpoint_interval).unwrap_or(now));
            self.unsigned_transactions = u64::from(mode.checkpoint_transactions);
        }
    }

    /// Records a signed block written for another reason (a config block).
    pub fn signed(&mut self) {
        self.unsigned_transactions = 0;
        self.unsigned_since = None;
    }

    /// When an empty checkpoint block must be cut if no block comes first;
    /// `None` while nothing is unsigned.
    pub fn deadline(&self) -> Option<Instant> {
        let mode = self.mode?;
        self.unsigned_since
            .map(|since| since + mode.checkpoint_interval)
    }

    /// Whether blocks are unsigned since the last signed one.
    pub fn pending(&self) -> bool {
        self.unsigned_since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn stream(transactions: u32, interval_ms: u64) -> Checkpoints {
        Checkpoints::new(Some(StreamMode {
            checkpoint_transactions: transactions,
            checkpoint_interval: Duration::from_millis(interval_ms),
        }))
    }

    #[test]
    fn block_channels_sign_every_block() {
        let mut checkpoints = Checkpoints::new(None);
        let now = Instant::now();
        assert!(!checkpoints.streams());
        for transactions in [1, 10, 0] {
            assert_eq!(
                checkpoints.seal(transactions, now, Load::Busy),
                Seal::Signed
            );
        }
        assert_eq!(checkpoints.deadline(), None);
    }

    #[test]
    fn the_count_signs_the_block_that_reaches_it() {
        // Goal: with a checkpoint every 5 transactions and a long interval,
        // blocks of 1, 2, 1 go unsigned and the block that brings the
        // count to 5 or more is signed; the count then starts again.
        let mut checkpoints = stream(5, 60_000);
        let now = Instant::now();
        let seals: Vec<Seal> = [1, 2, 1, 3, 1]
            .into_iter()
            .map(|transactions| checkpoints.seal(transactions, now, Load::Busy))
            .collect();
        assert_eq!(
            seals,
            [
                Seal::Unsigned,
                Seal::Unsigned,
                Seal::Unsigned,
                Seal::Signed,
                Seal::Unsigned
            ]
        );
        assert!(checkpoints.pending());
    }

    #[test]
    fn the_interval_runs_from_the_first_unsigned_transaction() {
        // Goal: the deadline is the interval after the first unsigned
        // block, not after the latest; a block cut at or after it is
        // signed, and an empty block is always a checkpoint.
        let mut checkpoints = stream(1000, 10);
        let start = Instant::now();
        assert_eq!(checkpoints.deadline(), None);
        assert_eq!(checkpoints.seal(1, start, Load::Busy), Seal::Unsigned);
        let deadline = start + Duration::from_millis(10);
        assert_eq!(checkpoints.deadline(), Some(deadline));
        assert_eq!(
            checkpoints.seal(1, start + Duration::from_millis(4), Load::Busy),
            Seal::Unsigned
        );
        assert_eq!(checkpoints.deadline(), Some(deadline));
        assert_eq!(checkpoints.seal(1, deadline, Load::Busy), Seal::Signed);
        assert_eq!(checkpoints.deadline(), None);
        assert_eq!(checkpoints.seal(0, deadline, Load::Busy), Seal::Signed);
    }

    #[test]
    fn a_block_cut_as_the_consenter_goes_idle_is_signed() {
        // Goal: at low load no transaction waits for an empty checkpoint
        // block: the block after which nothing follows is signed at once,
        // whatever the count and interval say, and the count starts again.
        let mut checkpoints = stream(100, 60_000);
        let now = Instant::now();
        assert_eq!(checkpoints.seal(1, now, Load::Busy), Seal::Unsigned);
        assert_eq!(checkpoints.seal(2, now, Load::Idle), Seal::Signed);
        assert!(!checkpoints.pending());
        assert_eq!(checkpoints.deadline(), None);
        assert_eq!(checkpoints.seal(1, now, Load::Idle), Seal::Signed);
        let mut blocks = Checkpoints::new(None);
        assert_eq!(blocks.seal(1, now, Load::Busy), Seal::Signed);
    }

    #[test]
    fn a_config_block_is_a_checkpoint_and_may_end_streaming() {
        let mut checkpoints = stream(100, 1000);
        let now = Instant::now();
        assert_eq!(checkpoints.seal(3, now, Load::Busy), Seal::Unsigned);
        checkpoints.reconfigure(None);
        assert!(!checkpoints.pending());
        assert_eq!(checkpoints.seal(1, now, Load::Busy), Seal::Signed);
    }

    #[test]
    fn an_overdue_checkpoint_is_due_at_once() {
        let mut checkpoints = stream(100, 1000);
        let now = Instant::now();
        checkpoints.overdue(now);
        assert!(checkpoints.pending());
        assert!(
            checkpoints
                .deadline()
                .is_some_and(|deadline| deadline <= now)
        );
        assert_eq!(checkpoints.seal(1, now, Load::Busy), Seal::Signed);
        let mut blocks = Checkpoints::new(None);
        blocks.overdue(now);
        assert!(!blocks.pending());
    }
}
