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
use weft_protos::view::Limits;

/// Waiting calls are swept of abandoned ones (clients gone) once there are
/// this many transactions waited for, and then each time their number has
/// doubled since the last sweep, so that a sweep's cost stays spread over
/// the calls that grew the map.
const SWEEP_WAITING_ABOVE: usize = 4096;

/// The code answered for a transaction its block records no code for.
const NO_CODE: i32 = 255;

/// The calls waiting on one channel, by TxID.
#[derive(Debug, Default)]
pub(crate) struct CommitWaiters {
    waiting: Mutex<Waiting>,
}

/// The answers owed, by TxID, and when the next sweep is due.
#[derive(Debug, Default)]
struct Waiting {
    answers: HashMap<String, Vec<oneshot::Sender<CommitStatusResponse>>>,
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
    /// it; an error if the channel's ledger closes first.
    pub fn wait(&self, tx_id: &str) -> oneshot::Receiver<CommitStatusResponse> {
        let (answer, answered) = oneshot::channel();
        let mut waiting = self.waiting.lock();
        if waiting.answers.len() > waiting.sweep_above.max(SWEEP_WAITING_ABOVE) {
            waiting.answers.retain(|_, answers| {
                answers.retain(|answer| !answer.is_closed());
                !answers.is_empty()
            });
            waiting.sweep_above = waiting.answers.len() * 2;
        }
        waiting
            .answers
            .entry(tx_id.to_owned())
            .or_default()
            .push(answer);
        answered
    }

    /// Drops the answers owed for `tx_id` whose calls have gone (a call
    /// that found its transaction by its own lookup).
    pub fn forget_gone(&self, tx_id: &str) {
        let mut waiting = self.waiting.lock();
        if let Some(answers) = waiting.answers.get_mut(tx_id) {
            answers.retain(|answer| !answer.is_closed());
            if answers.is_empty() {
                waiting.answers.remove(tx_id);
            }
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

/// The TxID in an envelope's channel header; `None` for an envelope that
/// does not decode (its block was committed with a code saying so).
fn tx_id_of(raw: &bytes::Bytes) -> Option<String> {
    weft_protos::view::TxEnvelope::decode(raw.clone(), Limits::default())
        .ok()
        .map(|envelope| envelope.channel_header.tx_id)
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
                match store.block(next) {
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
    waiters.waiting.lock().answers.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_that_does_not_decode_has_no_tx_id() {
        assert_eq!(tx_id_of(&bytes::Bytes::from_static(b"\xff\xff")), None);
    }
}
