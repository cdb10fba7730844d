//! The TxIDs a channel ordered lately, so that an envelope ordered once is
//! not ordered again.
//!
//! Clients and Gateways send an envelope again when an orderer accepted it
//! but fell silent before answering (it died, stalled, lost the Raft
//! leadership); the first copy may still reach a block. Fabric's orderer
//! orders both and the peers mark the second DUPLICATE_TXID, which keeps
//! the state right but fills blocks with dead copies. weft's block writer
//! leaves out of each block the envelopes whose TxID the window holds, or
//! that an earlier envelope of the same block carries; and Broadcast
//! answers an envelope whose TxID the receiving orderer's window already
//! holds at once, ordering nothing ([`OrderedTxIds`]).
//!
//! The window is a function of the chain alone: the shortest run of latest
//! blocks that holds at least [`ReplayWindow::CAPACITY`] TxIDs (or the
//! whole chain). Every orderer of a channel writes the same chain, so every
//! orderer leaves out the same envelopes, whoever cut the batch; a restarted
//! orderer reads its window back from its block store. A copy older than
//! the window is ordered, and the peers mark it DUPLICATE_TXID as Fabric's
//! do.
//!
//! Admission makes sure a TxID is the hash of its envelope's nonce and
//! creator (`admission.rs`), so nobody can claim another client's TxID
//! without its signing key.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::RwLock;

use weft_ledger::BlockStore;
use weft_protos::block::channel_header_of;
use weft_protos::common::Block;
use weft_protos::hash::sha256;

/// A TxID as the window keeps it: the 32 bytes a hex SHA-256 TxID spells,
/// or the SHA-256 of any other string.
pub(crate) type TxKey = [u8; 32];

/// The TxIDs of the latest blocks of a channel.
#[derive(Debug)]
pub(crate) struct ReplayWindow {
    capacity: usize,
    /// The blocks in the window, oldest first, with their TxIDs.
    blocks: VecDeque<(u64, Vec<TxKey>)>,
    held: usize,
    /// Each TxID in the window and the latest block that ordered it.
    ordered_in: HashMap<TxKey, u64>,
}

impl ReplayWindow {
    /// TxIDs the window holds at least, once the chain has as many:
    /// about 9 MB per channel, half a minute of traffic at 3,000 tx/s.
    pub const CAPACITY: usize = 100_000;

    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            blocks: VecDeque::new(),
            held: 0,
            ordered_in: HashMap::new(),
        }
    }

    /// The window of the chain in `store`, read back from its latest
    /// blocks.
    pub fn load(store: &BlockStore, capacity: usize) -> weft_ledger::Result<Self> {
        let mut newest_first = Vec::new();
        let mut held = 0;
        let mut number = store.height();
        while number > 0 && held < capacity {
            number -= 1;
            let Some(block) = store.block(number)? else {
                break;
            };
            let keys = tx_keys(&block);
            held += keys.len();
            newest_first.push((number, keys));
        }
        let mut window = Self::new(capacity);
        for (number, keys) in newest_first.into_iter().rev() {
            window.record(number, keys);
        }
        Ok(window)
    }

    /// Whether the window holds the TxID whose key is `key`.
    pub fn holds(&self, key: &TxKey) -> bool {
        self.ordered_in.contains_key(key)
    }

    /// The latest block in the window that ordered the TxID of `key`.
    pub fn block_of(&self, key: &TxKey) -> Option<u64> {
        self.ordered_in.get(key).copied()
    }

    /// Adds block `number` (the chain's next) with the TxIDs it ordered,
    /// then lets go of the oldest blocks the window no longer needs.
    pub fn record(&mut self, number: u64, keys: Vec<TxKey>) {
        for key in &keys {
            self.ordered_in.insert(*key, number);
        }
        self.held += keys.len();
        self.blocks.push_back((number, keys));
        while let Some((oldest, keys)) = self.blocks.front() {
            if self.held - keys.len() < self.capacity {
                break;
            }
            for key in keys {
                if self.ordered_in.get(key) == Some(oldest) {
                    self.ordered_in.remove(key);
                }
            }
            self.held -= keys.len();
            self.blocks.pop_front();
        }
    }
}

/// A channel's window as its block writer keeps it, for Broadcast to
/// answer an envelope already ordered without ordering it again.
#[derive(Debug, Clone)]
pub(crate) struct OrderedTxIds(pub(crate) Arc<RwLock<ReplayWindow>>);

impl OrderedTxIds {
    /// The block that ordered `tx_id`, if the window holds it.
    pub fn block_of(&self, tx_id: &str) -> Option<u64> {
        self.0.read().block_of(&key_of(tx_id))
    }
}

/// The window's key of `tx_id`.
pub(crate) fn key_of(tx_id: &str) -> TxKey {
    let mut key = [0u8; 32];
    match hex::decode_to_slice(tx_id, &mut key) {
        Ok(()) => key,
        Err(_) => sha256(tx_id.as_bytes()),
    }
}

/// The key of the TxID of an envelope, if it names one.
pub(crate) fn envelope_key(envelope: &bytes::Bytes) -> Option<TxKey> {
    let header = channel_header_of(envelope.clone())?;
    (!header.tx_id.is_empty()).then(|| key_of(&header.tx_id))
}

/// The keys of the TxIDs a block's envelopes name.
pub(crate) fn tx_keys(block: &Block) -> Vec<TxKey> {
    block
        .data
        .as_ref()
        .map(|data| data.data.iter().filter_map(envelope_key).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ids: &[&str]) -> Vec<TxKey> {
        ids.iter().map(|id| key_of(id)).collect()
    }

    #[test]
    fn a_hex_txid_is_kept_as_its_bytes_and_any_other_as_its_hash() {
        let hex_id = "ab".repeat(32);
        assert_eq!(key_of(&hex_id), [0xab; 32]);
        assert_eq!(key_of("tx1"), sha256(b"tx1"));
    }

    #[test]
    fn the_window_is_the_shortest_run_of_latest_blocks_holding_its_capacity() {
        let mut window = ReplayWindow::new(3);
        window.record(1, keys(&["a", "b"]));
        window.record(2, keys(&["c"]));
        // Blocks 1 and 2 hold 3 TxIDs: both are needed.
        assert!(window.holds(&key_of("a")) && window.holds(&key_of("c")));
        window.record(3, keys(&["d", "e"]));
        // Blocks 2 and 3 hold 3: block 1 goes.
        assert!(!window.holds(&key_of("a")) && !window.holds(&key_of("b")));
        assert!(window.holds(&key_of("c")) && window.holds(&key_of("e")));
        window.record(4, keys(&["f", "g", "h"]));
        assert_eq!(window.blocks.len(), 1);
        assert_eq!(window.held, 3);
    }

    #[test]
    fn a_txid_in_an_evicted_block_stays_while_a_later_block_holds_it() {
        let mut window = ReplayWindow::new(2);
        window.record(1, keys(&["a", "b"]));
        window.record(2, keys(&["a", "c"]));
        assert!(!window.holds(&key_of("b")));
        assert!(window.holds(&key_of("a")), "block 2 still orders a");
    }
}
