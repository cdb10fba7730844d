//! The history index: where each committed write of a key is, so that a
//! chaincode's `GetHistoryForKey` can list them, newest first (Fabric's
//! history database, `ledger.history.enableHistoryDatabase`).
//!
//! As in Fabric, the index holds positions only: one entry per public
//! write of every valid endorser transaction, keyed by namespace, key,
//! block number and transaction index, with an empty value. A query reads
//! each position's transaction from the block store for the value, TxID,
//! timestamp and whether it was a delete. Private data hashes are not
//! indexed (Fabric's history has only public writes either).
//!
//! Unlike Fabric's separate database with its own savepoint, the entries
//! of a block are written in the batch that appends the block, so the two
//! never disagree after a crash. A store that appended blocks without the
//! index (history switched off, or a store older than the index) records
//! the height its index covers under [`HISTORY_HEIGHT_KEY`]; opening it
//! with history on indexes the blocks above, from the blocks themselves.
//!
//! Entry key: `u32 BE len(namespace) ‖ namespace ‖ u32 BE len(key) ‖ key ‖
//! u64 BE block ‖ u64 BE tx index`. The lengths keep keys that extend
//! another key (composite keys contain U+0000) out of its prefix; the
//! big-endian position sorts a key's entries oldest first.

use bytes::Bytes;
use weft_protos::common::{Block, BlockMetadataIndex};
use weft_protos::queryresult::KeyModification;
use weft_protos::view::{DecodedBlock, Limits, TxBody, TxEnvelope};

/// Column family of the history entries.
pub(crate) const CF_HISTORY: &str = "history";
/// Key, in the default column family, of the height below which every
/// block's history is indexed: u64 BE.
pub(crate) const HISTORY_HEIGHT_KEY: &[u8] = b"history_height";

const POSITION_LEN: usize = 16;

/// One write the index records: `key` of `namespace` written by the
/// transaction at `tx_index` of its block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexedWrite {
    pub(crate) namespace: String,
    pub(crate) key: String,
    pub(crate) tx_index: u64,
}

/// The prefix every entry of `key` in `namespace` starts with.
pub(crate) fn key_prefix(namespace: &str, key: &str) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(8 + namespace.len() + key.len() + POSITION_LEN);
    for part in [namespace, key] {
        // Keys and namespaces are far below 4 GiB: a transaction is at
        // most Fabric's 99 MB.
        let length = u32::try_from(part.len()).unwrap_or(u32::MAX);
        prefix.extend_from_slice(&length.to_be_bytes());
        prefix.extend_from_slice(part.as_bytes());
    }
    prefix
}

/// The entry of `write` in block `block_number`.
pub(crate) fn entry_key(write: &IndexedWrite, block_number: u64) -> Vec<u8> {
    let mut key = key_prefix(&write.namespace, &write.key);
    key.extend_from_slice(&block_number.to_be_bytes());
    key.extend_from_slice(&write.tx_index.to_be_bytes());
    key
}

/// The block number and transaction index an entry key ends with.
pub(crate) fn position_of(entry: &[u8]) -> Option<(u64, u64)> {
    let position = entry.get(entry.len().checked_sub(POSITION_LEN)?..)?;
    let (block, tx) = position.split_at(8);
    Some((
        u64::from_be_bytes(block.try_into().ok()?),
        u64::from_be_bytes(tx.try_into().ok()?),
    ))
}

pub(crate) fn encode_height(height: u64) -> [u8; 8] {
    height.to_be_bytes()
}

pub(crate) fn decode_height(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

/// The writes of a block that the history index records: every public
/// write of every valid endorser transaction. Made by [`history_writes`]
/// from a block its caller has decoded (the committer), or by the store
/// from the block itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryWrites(pub(crate) Vec<IndexedWrite>);

/// The writes of `block` that the history index records: the public
/// writes of its endorser transactions that `valid(index)` says are valid
/// (the codes the block's TRANSACTIONS_FILTER will carry).
pub fn history_writes(block: &DecodedBlock, valid: impl Fn(usize) -> bool) -> HistoryWrites {
    let transactions = block
        .transactions
        .iter()
        .enumerate()
        .filter(|(index, _)| valid(*index))
        .filter_map(|(index, transaction)| Some((index, transaction.as_ref().ok()?)));
    HistoryWrites(writes_of(transactions))
}

/// The writes of `block` the index records, decoded from the block: those
/// of the transactions its TRANSACTIONS_FILTER marks valid (code 0). A
/// block without a filter (an orderer's) records none; so does a
/// transaction that does not decode.
pub(crate) fn indexed_writes(block: &Block) -> HistoryWrites {
    let filter = weft_protos::block::metadata_slot(block, BlockMetadataIndex::TransactionsFilter)
        .map_or(&[][..], |filter| &filter[..]);
    let envelopes = block.data.as_ref().map_or(&[][..], |data| &data.data[..]);
    let decoded: Vec<(usize, TxEnvelope)> = envelopes
        .iter()
        .enumerate()
        .filter(|(index, _)| filter.get(*index) == Some(&0))
        .filter_map(|(index, raw)| {
            Some((
                index,
                TxEnvelope::decode(raw.clone(), Limits::default()).ok()?,
            ))
        })
        .collect();
    HistoryWrites(writes_of(
        decoded
            .iter()
            .map(|(index, transaction)| (*index, transaction)),
    ))
}

/// The public writes of endorser `transactions`, each with its index in
/// the block.
fn writes_of<'a>(transactions: impl Iterator<Item = (usize, &'a TxEnvelope)>) -> Vec<IndexedWrite> {
    let mut writes = Vec::new();
    for (index, transaction) in transactions {
        for namespace in transaction.namespaces() {
            for write in &namespace.kv.writes {
                writes.push(IndexedWrite {
                    namespace: namespace.namespace.clone(),
                    key: write.key.clone(),
                    tx_index: index as u64,
                });
            }
        }
    }
    writes
}

/// What transaction `tx_index` of `block` did to `key` of `namespace`, as
/// Fabric's history answers it; `None` if it wrote no such key (the index
/// and the block disagree) or does not decode.
pub(crate) fn modification(
    block: &Block,
    tx_index: u64,
    namespace: &str,
    key: &str,
) -> Option<KeyModification> {
    let raw: &Bytes = block
        .data
        .as_ref()?
        .data
        .get(usize::try_from(tx_index).ok()?)?;
    let transaction = TxEnvelope::decode(raw.clone(), Limits::default()).ok()?;
    let TxBody::Endorser(endorser) = &transaction.body else {
        return None;
    };
    // The last write of the key in the transaction is the one that
    // counts (a read/write set holds one per key).
    let write = endorser
        .actions
        .iter()
        .flat_map(|action| &action.namespaces)
        .filter(|written| written.namespace == namespace)
        .flat_map(|written| &written.kv.writes)
        .rfind(|write| write.key == key)?;
    Some(KeyModification {
        tx_id: transaction.channel_header.tx_id.clone(),
        value: write.value.clone(),
        timestamp: transaction.channel_header.timestamp,
        is_delete: write.is_delete,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_key_that_extends_another_is_not_under_its_prefix() {
        let short = key_prefix("cc", "\0color\0");
        let write = IndexedWrite {
            namespace: "cc".to_owned(),
            key: "\0color\0blue\0".to_owned(),
            tx_index: 3,
        };
        assert!(!entry_key(&write, 7).starts_with(&short));
        let own = IndexedWrite {
            key: "\0color\0".to_owned(),
            ..write
        };
        let entry = entry_key(&own, 7);
        assert!(entry.starts_with(&short));
        assert_eq!(position_of(&entry), Some((7, 3)));
    }

    #[test]
    fn entries_of_a_key_sort_by_block_then_transaction() {
        let write = |tx_index| IndexedWrite {
            namespace: "cc".to_owned(),
            key: "k".to_owned(),
            tx_index,
        };
        let mut entries = [
            entry_key(&write(0), 256),
            entry_key(&write(9), 2),
            entry_key(&write(1), 2),
        ];
        entries.sort();
        let positions: Vec<_> = entries.iter().map(|e| position_of(e).unwrap()).collect();
        assert_eq!(positions, [(2, 1), (2, 9), (256, 0)]);
    }
}
