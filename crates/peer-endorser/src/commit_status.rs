//! The answers to the Gateway's `CommitStatus` calls.
//!
//! A Fabric Gateway client asks for the status of every transaction it
//! submits, and the call waits until the peer has committed it. Looking
//! the transaction up again after every block would cost each waiting call
//! a ledger read per block: hundreds of calls in flight against hundreds of
//! blocks a second (a stream channel's) would read the index tens of
//! thousands of times a second. Instead, one task per channel reads each
//! newly committed block once and answers the calls waiting for its
//! transactions; a call looks its transaction up only once, when it
//! starts, for one committed before it asked.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};
use weft_ledger::BlockStore;
use weft_protos::block::metadata_slot;
use weft_protos::common::BlockMetadataIndex;
use weft_protos::gateway::CommitStatusResponse;

/// Waiting calls are swept of abandoned ones (clients gone) once there are
/// this many transactions waited for, and then each time their number has
/// doubled since the last sweep, so that a sweep's cost stays spread over
/// the calls that grew the map.
const SWEEP_WAITING_ABOVE: usize = 4096;

/// The code answered for a transaction its block records no code for.
const NO_CODE: i32 = 255;

/// Calls one channel holds waiting at most; more are refused, to be asked
/// again, so that a flood of calls cannot grow the peer without bound.
pub(crate) const WAITING_CALLS_MAX: usize = 100_000;

/// Why a call could not wait.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{waiting} CommitStatus calls are waiting on this channel, the most it holds; retry")]
pub(crate) struct TooManyWaiting {
    waiting: usize,
}

/// The calls waiting on one channel, by TxID.
#[derive(Debug, Default)]
pub(crate) struct CommitWaiters {
    waiting: Mutex<Waiting>,
}

/// The answers owed, by TxID, how many, and when the next sweep is due.
#[derive(Debug, Default)]
struct Waiting {
    answers: HashMap<String, Vec<oneshot::Sender<CommitStatusResponse>>>,
    /// The answers owed, gone callers included until a sweep.
    calls: usize,
    sweep_above: usize,
}

impl CommitWaiters {
    /// Starts answering the calls of a channel whose blocks are in `store`
    /// and whose committed height (or applied height, when the peer
    /// reports commit status at applied) `heights` follows.
    pub fn start(store: Arc<BlockStore>, mut heights: watch::Receiver<u64>) -> Arc<Self> {
        let waiters = Arc::new(Self::default());
        // Blocks below the height now are found by each call's own
        // lookup; the task reads every block from here on.
        let next = *heights.borrow_and_update();
        tokio::spawn(follow(waiters.clone(), store, heights, next));
        waiters
    }

    /// The answer for `tx_id`, once a block after the current one commits
    /// it (the receiver fails if the channel's ledger closes first); an
    /// error if [`WAITING_CALLS_MAX`] calls wait already.
    pub fn wait(
        &self,
        tx_id: &str,
    ) -> Result<oneshot::Receiver<CommitStatusResponse>, TooManyWaiting> {
        self.wait_at_most(tx_id, WAITING_CALLS_MAX)
    }

    fn wait_at_most(
        &self,
        tx_id: &str,
        limit: usize,
    ) -> Result<oneshot::Receiver<CommitStatusResponse>, TooManyWaiting> {
        let (answer, answered) = oneshot::channel();
        let mut waiting = self.waiting.lock();
        if waiting.answers.len() > waiting.sweep_above.max(SWEEP_WAITING_ABOVE)
            || waiting.calls >= limit
        {
            waiting.answers.retain(|_, answers| {
                answers.retain(|answer| !answer.is_closed());
                !answers.is_empty()
            });
            waiting.calls = waiting.answers.values().map(Vec::len).sum();
            waiting.sweep_above = waiting.answers.len() * 2;
        }
        if waiting.calls >= limit {
            return Err(TooManyWaiting {
                waiting: waiting.calls,
            });
        }
        waiting.calls += 1;
        waiting
            .answers
            .entry(tx_id.to_owned())
            .or_default()
            .push(answer);
        Ok(answered)
    }

    /// Drops the answers owed for `tx_id` whose calls have gone (a call
    /// that found its transaction by its own lookup).
    pub fn forget_gone(&self, tx_id: &str) {
        let mut waiting = self.waiting.lock();
        if let Some(answers) = waiting.answers.get_mut(tx_id) {
            let before = answers.len();
            answers.retain(|answer| !answer.is_closed());
            let gone = before - answers.len();
            if answers.is_empty() {
                waiting.answers.remove(tx_id);
            }
            waiting.calls -= gone;
        }
    }

    /// Answers the calls waiting for the transactions of `block`.
    fn answer(&self, number: u64, block: &weft_protos::common::Block) {
        let mut waiting = self.waiting.lock();
        if waiting.answers.is_empty() {
            return;
        }
        let codes = metadata_slot(block, BlockMetadataIndex::TransactionsFilter)
            .cloned()
            .unwrap_or_default();
        let envelopes = block
            .data
            .as_ref()
            .map(|data| data.data.as_slice())
            .unwrap_or_default();
        for (index, raw) in envelopes.iter().enumerate() {
            let Some(tx_id) = tx_id_of(raw) else { continue };
            let Some(answers) = waiting.answers.remove(&tx_id) else {
                continue;
            };
            waiting.calls -= answers.len();
            let result = codes.get(index).map_or(NO_CODE, |code| i32::from(*code));
            for answer in answers {
                // The client may have gone.
                let _ = answer.send(CommitStatusResponse {
                    result,
                    block_number: number,
                });
            }
        }
    }
}

/// The TxID in an envelope's channel header, as the ledger indexes it;
/// `None` for an envelope whose headers do not decode (its block was
/// committed with a code saying so).
fn tx_id_of(raw: &bytes::Bytes) -> Option<String> {
    weft_protos::block::channel_header_of(raw.clone()).map(|header| header.tx_id)
}

/// Reads each block as it commits and answers its waiting calls; when the
/// ledger closes, the waiting calls get an error (their senders drop).
async fn follow(
    waiters: Arc<CommitWaiters>,
    store: Arc<BlockStore>,
    mut heights: watch::Receiver<u64>,
    mut next: u64,
) {
    while heights.changed().await.is_ok() {
        let committed = *heights.borrow_and_update();
        // A rolled-back stream lowers the height: its blocks come again.
        next = next.min(committed);
        while next < committed {
            if !waiters.waiting.lock().answers.is_empty() {
                // From the store's memory when this task keeps up; under
                // group commit a read from the disk syncs it first, so no
                // answer reports a block that could still be lost.
                match store.block_from_task(next).await {
                    Ok(Some(block)) => waiters.answer(next, &block),
                    Ok(None) => break,
                    Err(error) => {
                        tracing::warn!(block = next, %error, "commit status: reading a block failed");
                        break;
                    }
                }
            }
            next += 1;
        }
    }
    let mut waiting = waiters.waiting.lock();
    waiting.answers.clear();
    waiting.calls = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_beyond_the_limit_are_refused_until_some_end() {
        // Goal: a flood of CommitStatus calls is held at the limit: the
        // next call is refused with a reason to retry, and once callers
        // go (or are answered) new calls wait again.
        let waiters = CommitWaiters::default();
        let mut held: Vec<_> = (0..3)
            .map(|n| waiters.wait_at_most(&format!("tx{n}"), 3).unwrap())
            .collect();
        let refused = waiters.wait_at_most("tx3", 3).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "3 CommitStatus calls are waiting on this channel, the most it holds; retry"
        );
        // A caller that hung up frees its place at the next call.
        drop(held.pop());
        let again = waiters.wait_at_most("tx3", 3);
        assert!(again.is_ok());
        // A caller that found its transaction by its own lookup is dropped
        // from the count too.
        drop(held.pop());
        waiters.forget_gone("tx1");
        assert!(waiters.wait_at_most("tx4", 3).is_ok());
        assert_eq!(waiters.waiting.lock().calls, 3);
    }

    #[test]
    fn an_envelope_that_does_not_decode_has_no_tx_id() {
        assert_eq!(tx_id_of(&bytes::Bytes::from_static(b"\xff\xff")), None);
    }
}
