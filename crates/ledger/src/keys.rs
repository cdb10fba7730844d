//! The on-disk layout: column families, keys and the encoded values.
//!
//! | column family | key | value |
//! |---|---|---|
//! | `blocks` | block number, u64 big-endian (so keys sort by number) | the serialized `common.Block`, metadata included |
//! | `tx_ids` | the TxID's UTF-8 bytes | block number u64 BE ‖ tx index u64 BE ‖ optional validation code byte |
//! | `default` | `tail` | format 1u8 ‖ height u64 BE ‖ header hash of block height-1 (32 bytes) |
//! | `history` | see `history.rs`: namespace, key, block, tx index | empty |
//! | `default` | `history_height` | u64 BE: blocks below it have their history indexed |
//!
//! Every value is written by the one batch that appends its block, so the
//! records always agree. Changing any of these encodings changes the disk
//! format: bump [`TAIL_FORMAT`] and say how old stores are read.

use weft_protos::hash::Hash;

/// Column family of the blocks by number.
pub(crate) const CF_BLOCKS: &str = "blocks";
/// Column family of the transaction index by TxID.
pub(crate) const CF_TX_IDS: &str = "tx_ids";
/// Key of the tail record in the default column family.
pub(crate) const TAIL_KEY: &[u8] = b"tail";
/// Version byte leading the tail record.
pub(crate) const TAIL_FORMAT: u8 = 1;

const TAIL_LEN: usize = 1 + 8 + 32;
const TX_LOCATION_LEN: usize = 8 + 8;

/// Where a transaction was first recorded, as the tx index holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxLocation {
    /// The block holding the transaction's first occurrence.
    pub block_number: u64,
    /// The transaction's position in that block's data.
    pub tx_index: u64,
    /// The byte of the block's TRANSACTIONS_FILTER (metadata index 2) for
    /// this transaction, if the block carried one that long: a
    /// `protos.TxValidationCode`, 0 = VALID. Orderer blocks carry none.
    pub validation_code: Option<u8>,
}

/// The persisted tail: how many blocks there are and the last one's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TailRecord {
    pub(crate) height: u64,
    pub(crate) header_hash: Hash,
}

pub(crate) fn block_key(number: u64) -> [u8; 8] {
    number.to_be_bytes()
}

pub(crate) fn decode_block_key(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

pub(crate) fn encode_tail(tail: &TailRecord) -> [u8; TAIL_LEN] {
    let mut out = [0; TAIL_LEN];
    out[0] = TAIL_FORMAT;
    out[1..9].copy_from_slice(&tail.height.to_be_bytes());
    out[9..].copy_from_slice(&tail.header_hash);
    out
}

/// Decodes a tail record, or says why it cannot.
pub(crate) fn decode_tail(bytes: &[u8]) -> Result<TailRecord, String> {
    if bytes.len() != TAIL_LEN {
        return Err(format!("{} bytes, expected {TAIL_LEN}", bytes.len()));
    }
    if bytes[0] != TAIL_FORMAT {
        return Err(format!("unknown format {}", bytes[0]));
    }
    let height = u64::from_be_bytes(bytes[1..9].try_into().map_err(|_| "height")?);
    let header_hash: Hash = bytes[9..].try_into().map_err(|_| "hash")?;
    if height == 0 {
        return Err("height 0 (a tail record is only written with a block)".into());
    }
    Ok(TailRecord {
        height,
        header_hash,
    })
}

pub(crate) fn encode_tx_location(location: &TxLocation) -> Vec<u8> {
    let mut out = Vec::with_capacity(TX_LOCATION_LEN + 1);
    out.extend_from_slice(&location.block_number.to_be_bytes());
    out.extend_from_slice(&location.tx_index.to_be_bytes());
    if let Some(code) = location.validation_code {
        out.push(code);
    }
    out
}

pub(crate) fn decode_tx_location(bytes: &[u8]) -> Option<TxLocation> {
    if bytes.len() != TX_LOCATION_LEN && bytes.len() != TX_LOCATION_LEN + 1 {
        return None;
    }
    Some(TxLocation {
        block_number: u64::from_be_bytes(bytes[0..8].try_into().ok()?),
        tx_index: u64::from_be_bytes(bytes[8..16].try_into().ok()?),
        validation_code: bytes.get(TX_LOCATION_LEN).copied(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_keys_sort_by_number() {
        assert!(block_key(255) < block_key(256));
        assert!(block_key(0) < block_key(u64::MAX));
        assert_eq!(decode_block_key(&block_key(1234)), Some(1234));
        assert_eq!(decode_block_key(b"short"), None);
    }

    #[test]
    fn tail_round_trips_and_rejects_garbage() {
        let tail = TailRecord {
            height: 7,
            header_hash: [9; 32],
        };
        assert_eq!(decode_tail(&encode_tail(&tail)), Ok(tail));
        assert!(decode_tail(&[]).is_err());
        let mut wrong_format = encode_tail(&tail);
        wrong_format[0] = 2;
        assert!(decode_tail(&wrong_format).is_err());
        let zero = encode_tail(&TailRecord {
            height: 0,
            header_hash: [0; 32],
        });
        assert!(decode_tail(&zero).is_err());
    }

    #[test]
    fn tx_locations_round_trip_with_and_without_code() {
        for validation_code in [None, Some(0), Some(11)] {
            let location = TxLocation {
                block_number: 3,
                tx_index: 9,
                validation_code,
            };
            assert_eq!(
                decode_tx_location(&encode_tx_location(&location)),
                Some(location)
            );
        }
        assert_eq!(decode_tx_location(&[0; 15]), None);
        assert_eq!(decode_tx_location(&[0; 18]), None);
    }
}
