//! Fabric's Deliver seek semantics, as pure functions of a `SeekInfo` and
//! the ledger height.
//!
//! Both Deliver services (the orderer's `AtomicBroadcast/Deliver` and the
//! peer's `Deliver`) answer the same `orderer.SeekInfo`; this module is the
//! part they share, so the orderer does not depend on the committer. The
//! services do the envelope checks, access control and streaming; they call
//! [`resolve_seek`] once per request and [`SeekRange::step`] before each
//! block.
//!
//! The rules follow Fabric v2.5 (`common/deliver`'s handler over
//! `fileledger`'s iterator, which both the orderer and the peer use):
//!
//! | position | as start | as stop |
//! |---|---|---|
//! | absent | BAD_REQUEST | BAD_REQUEST |
//! | `oldest` | 0 | the start (one block) |
//! | `newest` | height − 1 | the start if start is also `newest`, else height − 1 at request time |
//! | `specified n` | n; NOT_FOUND if n > height | n; BAD_REQUEST if n < start |
//! | `next_commit` | height | see below |
//! | no type | NOT_FOUND | see below |
//!
//! Fabric's loop ends after sending the block whose number equals the stop,
//! so a stop below the start never ends the stream: a `newest` stop below
//! the start (e.g. start `next_commit`, stop `newest`) and a `next_commit`
//! or untyped stop (which Fabric leaves at 0) with a start above 0 stream
//! until the client hangs up. We resolve those to [`SeekRange::UNBOUNDED`],
//! which makes Fabric's behaviour explicit.
//!
//! Behaviour: `FAIL_IF_NOT_READY` answers NOT_FOUND when the next block to
//! send does not exist yet, at the start or in the middle of the range
//! (after the blocks that did exist were sent); any other value, including
//! unknown ones, is `BLOCK_UNTIL_READY`, as in Fabric (prost's
//! `SeekInfo::behavior()` already maps unknown values to the default).
//!
//! Deviations, where Fabric's answer is an accident of unsigned arithmetic
//! on an empty ledger: a `newest` start at height 0 is NOT_FOUND (Fabric
//! would compute 2^64 − 1), and a `newest` stop at height 0 is unbounded.
//! A channel's ledger always holds its genesis block, so neither arises in
//! service. Fabric's snapshot-bootstrapped peers (newest = height when the
//! last block is the snapshot's) have no equivalent here.

use weft_protos::orderer::seek_info::SeekBehavior;
use weft_protos::orderer::seek_position::Type as Position;
use weft_protos::orderer::{SeekInfo, SeekPosition};

use crate::error::SeekError;

/// The blocks a Deliver request asks for, resolved against the height at
/// request time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeekRange {
    /// The first block to send.
    pub start: u64,
    /// The last block to send, inclusive; [`SeekRange::UNBOUNDED`] streams
    /// until the client hangs up.
    pub stop: u64,
    /// What to do when the next block does not exist yet.
    pub behavior: SeekBehavior,
}

/// What a Deliver loop does next, from [`SeekRange::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekStep {
    /// The block exists: send it.
    Deliver,
    /// The block does not exist yet: wait for the height to grow
    /// (`BLOCK_UNTIL_READY`).
    Wait,
    /// The block does not exist yet and the client asked not to wait:
    /// answer NOT_FOUND (`FAIL_IF_NOT_READY`).
    NotFound,
    /// Every block of the range was sent: answer SUCCESS.
    Finished,
}

impl SeekRange {
    /// A stop that is never reached.
    pub const UNBOUNDED: u64 = u64::MAX;

    /// What to do about block `next` (the next one to send; starts at
    /// `self.start`) when the ledger height is `height`.
    pub fn step(&self, next: u64, height: u64) -> SeekStep {
        if next > self.stop {
            SeekStep::Finished
        } else if next < height {
            SeekStep::Deliver
        } else if self.behavior == SeekBehavior::FailIfNotReady {
            SeekStep::NotFound
        } else {
            SeekStep::Wait
        }
    }

    /// Whether `number` is the last block of the range: after sending it
    /// the request is finished (SUCCESS).
    pub fn is_last(&self, number: u64) -> bool {
        number == self.stop
    }
}

/// Resolves a Deliver request's start, stop and behaviour at ledger height
/// `height`, or the error (and so the status) Fabric answers with.
pub fn resolve_seek(seek: &SeekInfo, height: u64) -> Result<SeekRange, SeekError> {
    let start_position = seek.start.as_ref().ok_or(SeekError::MissingStart)?;
    let stop_position = seek.stop.as_ref().ok_or(SeekError::MissingStop)?;
    let behavior = seek.behavior();

    let start = match start_position.r#type {
        Some(Position::Oldest(_)) => 0,
        Some(Position::Newest(_)) => height.checked_sub(1).ok_or(SeekError::NoNewestBlock)?,
        Some(Position::Specified(specified)) => {
            if specified.number > height {
                return Err(SeekError::StartBeyondHeight {
                    start: specified.number,
                    height,
                });
            }
            specified.number
        }
        Some(Position::NextCommit(_)) => height,
        None => return Err(SeekError::UnknownStart),
    };

    let stop = resolve_stop(start_position, stop_position, start, height)?;

    if behavior == SeekBehavior::FailIfNotReady && start >= height {
        return Err(SeekError::NotReady {
            number: start,
            height,
        });
    }
    Ok(SeekRange {
        start,
        stop,
        behavior,
    })
}

fn resolve_stop(
    start_position: &SeekPosition,
    stop_position: &SeekPosition,
    start: u64,
    height: u64,
) -> Result<u64, SeekError> {
    // Fabric stops after the block numbered `stop`; a stop below the start
    // is never met, so the stream is unbounded.
    let at_least_start = |stop: u64| {
        if stop < start {
            SeekRange::UNBOUNDED
        } else {
            stop
        }
    };
    match stop_position.r#type {
        Some(Position::Oldest(_)) => Ok(start),
        Some(Position::Newest(_)) => {
            // Seeking exactly the newest block must not re-read the height,
            // or a block appended meanwhile would make it two blocks.
            if start_position == stop_position {
                Ok(start)
            } else {
                Ok(height
                    .checked_sub(1)
                    .map_or(SeekRange::UNBOUNDED, at_least_start))
            }
        }
        Some(Position::Specified(specified)) => {
            if specified.number < start {
                return Err(SeekError::StopBeforeStart {
                    start,
                    stop: specified.number,
                });
            }
            Ok(specified.number)
        }
        // Fabric leaves the stop at 0 for these.
        Some(Position::NextCommit(_)) | None => Ok(at_least_start(0)),
    }
}

#[cfg(test)]
mod tests {
    use weft_protos::common::Status;
    use weft_protos::orderer::{SeekNewest, SeekNextCommit, SeekOldest, SeekSpecified};

    use super::*;

    /// A position from its short name: `oldest`, `newest`, `next`, `none`
    /// (no type), `-` (absent) or a number (specified).
    fn position(name: &str) -> Option<SeekPosition> {
        let kind = match name {
            "-" => return None,
            "none" => None,
            "oldest" => Some(Position::Oldest(SeekOldest {})),
            "newest" => Some(Position::Newest(SeekNewest {})),
            "next" => Some(Position::NextCommit(SeekNextCommit {})),
            number => Some(Position::Specified(SeekSpecified {
                number: number.parse().expect("position number"),
            })),
        };
        Some(SeekPosition { r#type: kind })
    }

    /// Resolves `start stop behaviour` at `height` and renders the outcome
    /// as `start..=stop`, `start..` (unbounded) or `STATUS: error`.
    fn check(request: &str, height: u64) -> String {
        let words: Vec<&str> = request.split_whitespace().collect();
        let behavior = match words[2] {
            "wait" => SeekBehavior::BlockUntilReady,
            "fail" => SeekBehavior::FailIfNotReady,
            other => panic!("behaviour {other}"),
        };
        let seek = SeekInfo {
            start: position(words[0]),
            stop: position(words[1]),
            behavior: behavior as i32,
            ..SeekInfo::default()
        };
        match resolve_seek(&seek, height) {
            Ok(range) if range.stop == SeekRange::UNBOUNDED => format!("{}..", range.start),
            Ok(range) => format!("{}..={}", range.start, range.stop),
            Err(error) => format!("{}: {error}", error.status().as_str_name()),
        }
    }

    #[test]
    fn seek_resolution_follows_fabric() {
        // (request "start stop behaviour", height, expected)
        let table: &[(&str, u64, &str)] = &[
            // Oldest start.
            ("oldest oldest wait", 5, "0..=0"),
            ("oldest newest wait", 5, "0..=4"),
            ("oldest 3 wait", 5, "0..=3"),
            ("oldest 9 wait", 5, "0..=9"),
            ("oldest 9 fail", 5, "0..=9"),
            ("oldest max wait", 5, "0.."),
            // Newest start.
            ("newest newest wait", 5, "4..=4"),
            ("newest newest fail", 5, "4..=4"),
            ("newest oldest wait", 5, "4..=4"),
            ("newest 4 wait", 5, "4..=4"),
            (
                "newest 3 wait",
                5,
                "BAD_REQUEST: seek stop 3 is before the start 4",
            ),
            ("newest newest wait", 1, "0..=0"),
            (
                "newest newest wait",
                0,
                "NOT_FOUND: seek start is newest but the ledger is empty",
            ),
            // Specified start.
            ("2 2 wait", 5, "2..=2"),
            ("2 newest wait", 5, "2..=4"),
            ("2 oldest wait", 5, "2..=2"),
            ("4 newest fail", 5, "4..=4"),
            ("5 5 wait", 5, "5..=5"),
            ("5 newest wait", 5, "5.."),
            (
                "5 5 fail",
                5,
                "NOT_FOUND: block 5 is not ready: the ledger height is 5",
            ),
            (
                "6 6 wait",
                5,
                "NOT_FOUND: seek start 6 is beyond the ledger height 5",
            ),
            // A start beyond the height wins over a stop before the start.
            (
                "6 1 wait",
                5,
                "NOT_FOUND: seek start 6 is beyond the ledger height 5",
            ),
            (
                "3 1 wait",
                5,
                "BAD_REQUEST: seek stop 1 is before the start 3",
            ),
            // Next-commit start.
            ("next 5 wait", 5, "5..=5"),
            ("next newest wait", 5, "5.."),
            ("next max wait", 5, "5.."),
            ("next next wait", 5, "5.."),
            (
                "next 4 wait",
                5,
                "BAD_REQUEST: seek stop 4 is before the start 5",
            ),
            (
                "next max fail",
                5,
                "NOT_FOUND: block 5 is not ready: the ledger height is 5",
            ),
            // Next-commit and untyped stops are Fabric's stop 0.
            ("oldest next wait", 5, "0..=0"),
            ("oldest none wait", 5, "0..=0"),
            ("2 none wait", 5, "2.."),
            // Missing or untyped positions.
            (
                "- 3 wait",
                5,
                "BAD_REQUEST: seek info has no start position",
            ),
            (
                "oldest - wait",
                5,
                "BAD_REQUEST: seek info has no stop position",
            ),
            (
                "- - wait",
                5,
                "BAD_REQUEST: seek info has no start position",
            ),
            (
                "none 3 wait",
                5,
                "NOT_FOUND: seek start position has no type",
            ),
            // An empty ledger (never served in practice: see module docs).
            ("oldest newest wait", 0, "0.."),
            ("next max wait", 0, "0.."),
            (
                "oldest oldest fail",
                0,
                "NOT_FOUND: block 0 is not ready: the ledger height is 0",
            ),
        ];
        for &(request, height, expected) in table {
            let request = request.replace("max", &u64::MAX.to_string());
            assert_eq!(
                check(&request, height),
                expected,
                "{request} at height {height}"
            );
        }
    }

    #[test]
    fn unknown_behaviour_blocks_until_ready() {
        // Fabric compares with FAIL_IF_NOT_READY only; anything else waits.
        let seek = SeekInfo {
            start: position("next"),
            stop: position("next"),
            behavior: 7,
            ..SeekInfo::default()
        };
        let range = resolve_seek(&seek, 3).expect("resolves");
        assert_eq!(range.behavior, SeekBehavior::BlockUntilReady);
        assert_eq!(range.step(3, 3), SeekStep::Wait);
    }

    #[test]
    fn steps_deliver_wait_fail_and_finish() {
        let waiting = SeekRange {
            start: 2,
            stop: 4,
            behavior: SeekBehavior::BlockUntilReady,
        };
        assert_eq!(waiting.step(2, 4), SeekStep::Deliver);
        assert_eq!(waiting.step(3, 4), SeekStep::Deliver);
        assert_eq!(waiting.step(4, 4), SeekStep::Wait);
        assert_eq!(waiting.step(4, 5), SeekStep::Deliver);
        assert!(waiting.is_last(4));
        assert_eq!(waiting.step(5, 9), SeekStep::Finished);

        // FAIL_IF_NOT_READY fails in the middle of a range too, after the
        // blocks that existed were sent.
        let failing = SeekRange {
            behavior: SeekBehavior::FailIfNotReady,
            ..waiting
        };
        assert_eq!(failing.step(3, 4), SeekStep::Deliver);
        assert_eq!(failing.step(4, 4), SeekStep::NotFound);
        assert_eq!(failing.step(5, 4), SeekStep::Finished);

        let unbounded = SeekRange {
            stop: SeekRange::UNBOUNDED,
            ..waiting
        };
        assert_eq!(unbounded.step(1_000_000, 10), SeekStep::Wait);
        assert!(!unbounded.is_last(1_000_000));
    }

    #[test]
    fn statuses_map_as_fabric_answers() {
        assert_eq!(SeekError::MissingStart.status(), Status::BadRequest);
        assert_eq!(SeekError::MissingStop.status(), Status::BadRequest);
        assert_eq!(
            SeekError::StopBeforeStart { start: 2, stop: 1 }.status(),
            Status::BadRequest
        );
        assert_eq!(SeekError::UnknownStart.status(), Status::NotFound);
        assert_eq!(SeekError::NoNewestBlock.status(), Status::NotFound);
        assert_eq!(
            SeekError::StartBeyondHeight {
                start: 9,
                height: 2
            }
            .status(),
            Status::NotFound
        );
        assert_eq!(
            SeekError::NotReady {
                number: 2,
                height: 2
            }
            .status(),
            Status::NotFound
        );
    }
}
