//! Private data beside the chain: the transient store, where an endorsed
//! transaction's private writes wait for their block, and the private data
//! store, where the writes a block committed stay (Fabric's transient store
//! and pvtdata store, in the block store's database).
//!
//! Both hold opaque bytes (the committer's serialized private write sets);
//! this crate only keeps them in step with the chain:
//!
//! - A block's committed private data is written in the batch that appends
//!   the block, so a restart that replays blocks into the world state finds
//!   the private writes of every block it replays, and a block is never on
//!   disk without them (or they without it). A truncation removes them with
//!   their blocks.
//! - A transient entry is written when a peer endorses (or receives another
//!   peer's endorsement data), not synced: a process crash keeps it, a
//!   machine crash may lose it, and the committer then records the data as
//!   missing. The batch that appends the block holding its transaction
//!   deletes it; an entry whose transaction never commits is purged once
//!   the chain has grown [`TRANSIENT_RETENTION_BLOCKS`] past the height it
//!   was kept at, at heights that are multiples of it (Fabric's
//!   `transientstoreMaxBlockRetention`).
//!
//! - Each private key a block's committed data writes is indexed by its
//!   chaincode, collection and hash, so that a purge (Fabric 2.5's
//!   `PurgePrivateData`) finds every committed copy holding the key and
//!   the committer can rewrite them without it. The block that purges a
//!   key drops its entries below it. A truncation leaves the entries of
//!   the blocks it removes: a purge that follows one to a copy without
//!   the key (or to no copy) changes nothing.
//!
//! - What a block should have committed of private data on this peer but
//!   could not find is recorded as missing (Fabric's missing data
//!   entries), for the peer's reconciler to pull later. Found data is
//!   merged into its block's committed copy by a later block, whose batch
//!   also deletes the missing entries and records which copies it
//!   completed, so that replaying that later block applies them again.
//!
//! | column family | key | value |
//! |---|---|---|
//! | `private` | block u64 BE ‖ tx index u64 BE | the transaction's committed private writes |
//! | `private_keys` | chaincode ‖ 0 ‖ collection ‖ 0 ‖ SHA-256 of the key ‖ block u64 BE ‖ tx index u64 BE | empty |
//! | `private_missing` | block u64 BE ‖ tx index u64 BE ‖ chaincode ‖ 0 ‖ collection | TxID |
//! | `private_reconciled` | completing block u64 BE ‖ block u64 BE ‖ tx index u64 BE | empty |
//! | `private_purged` | block u64 BE ‖ tx index u64 BE ‖ chaincode ‖ 0 ‖ collection ‖ 0 ‖ key | empty |
//!
//! The last records the private values a block's purges removed on this
//! peer, so that replaying the block removes them again: the copies that
//! named them were rewritten with the block.
//! | `transient` | `t` ‖ TxID | height u64 BE ‖ the private writes |
//! | `transient` | `h` ‖ height u64 BE ‖ TxID | empty: what to purge, by height |

/// Column family of the private data committed with each block.
pub(crate) const CF_PRIVATE: &str = "private";
/// Column family of the transient store.
pub(crate) const CF_TRANSIENT: &str = "transient";
/// Column family of the index of committed private keys.
pub(crate) const CF_PRIVATE_KEYS: &str = "private_keys";
/// Column family of the private data missing on this peer.
pub(crate) const CF_PRIVATE_MISSING: &str = "private_missing";
/// Column family of the committed copies later blocks completed.
pub(crate) const CF_PRIVATE_RECONCILED: &str = "private_reconciled";

/// One collection's private writes of a committed transaction that this
/// peer's organisation keeps but this peer could not find when the block
/// committed (Fabric's missing private data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPrivateData {
    pub block: u64,
    pub tx_index: u64,
    pub tx_id: String,
    pub namespace: String,
    pub collection: String,
}

impl MissingPrivateData {
    /// Its key in [`CF_PRIVATE_MISSING`].
    pub(crate) fn key(&self) -> Vec<u8> {
        let mut key = private_key(self.block, self.tx_index).to_vec();
        key.extend_from_slice(self.namespace.as_bytes());
        key.push(0);
        key.extend_from_slice(self.collection.as_bytes());
        key
    }

    /// The entry stored under `key` with value `tx_id`, if well formed.
    pub(crate) fn from_entry(key: &[u8], tx_id: &[u8]) -> Option<Self> {
        let block: [u8; 8] = key.get(..8)?.try_into().ok()?;
        let tx_index = tx_index_of(key)?;
        let names = std::str::from_utf8(key.get(16..)?).ok()?;
        let (namespace, collection) = names.split_once('\0')?;
        Some(Self {
            block: u64::from_be_bytes(block),
            tx_index,
            tx_id: String::from_utf8(tx_id.to_vec()).ok()?,
            namespace: namespace.to_owned(),
            collection: collection.to_owned(),
        })
    }
}

/// Column family of the private values purges removed.
pub(crate) const CF_PRIVATE_PURGED: &str = "private_purged";

/// A private value that transaction `tx_index` of block `block` purged
/// on this peer: key `key` of `collection` of chaincode `namespace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgedValue {
    pub block: u64,
    pub tx_index: u64,
    pub namespace: String,
    pub collection: String,
    pub key: String,
}

impl PurgedValue {
    /// Its key in [`CF_PRIVATE_PURGED`].
    pub(crate) fn record_key(&self) -> Vec<u8> {
        let mut record = private_key(self.block, self.tx_index).to_vec();
        for part in [&self.namespace, &self.collection] {
            record.extend_from_slice(part.as_bytes());
            record.push(0);
        }
        record.extend_from_slice(self.key.as_bytes());
        record
    }

    /// The value recorded under `record`, if well formed.
    pub(crate) fn from_record(record: &[u8]) -> Option<Self> {
        let block: [u8; 8] = record.get(..8)?.try_into().ok()?;
        let tx_index = tx_index_of(record)?;
        let names = std::str::from_utf8(record.get(16..)?).ok()?;
        let mut parts = names.splitn(3, '\0');
        Some(Self {
            block: u64::from_be_bytes(block),
            tx_index,
            namespace: parts.next()?.to_owned(),
            collection: parts.next()?.to_owned(),
            key: parts.next()?.to_owned(),
        })
    }
}

/// The [`CF_PRIVATE_RECONCILED`] record that block `completing`
/// completed the copy of transaction `tx_index` of block `block`.
pub(crate) fn reconciled_key(completing: u64, block: u64, tx_index: u64) -> [u8; 24] {
    let mut key = [0; 24];
    key[..8].copy_from_slice(&completing.to_be_bytes());
    key[8..].copy_from_slice(&private_key(block, tx_index));
    key
}

/// A private key as the index of committed private keys names it: its
/// chaincode, its collection, and the SHA-256 of the key (every peer
/// knows the hash; only members know the key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PrivateKeyRef {
    pub namespace: String,
    pub collection: String,
    pub key_hash: [u8; 32],
}

impl PrivateKeyRef {
    /// The prefix of the key's index entries: chaincode ‖ 0 ‖ collection
    /// ‖ 0 ‖ hash (names never hold a NUL, and the hash has a fixed
    /// length, so no key's prefix is another's).
    pub(crate) fn index_prefix(&self) -> Vec<u8> {
        let mut prefix =
            Vec::with_capacity(self.namespace.len() + self.collection.len() + 2 + 32 + 16);
        prefix.extend_from_slice(self.namespace.as_bytes());
        prefix.push(0);
        prefix.extend_from_slice(self.collection.as_bytes());
        prefix.push(0);
        prefix.extend_from_slice(&self.key_hash);
        prefix
    }

    /// The index entry of the key written by transaction `tx_index` of
    /// block `block`.
    pub(crate) fn index_key(&self, block: u64, tx_index: u64) -> Vec<u8> {
        let mut key = self.index_prefix();
        key.extend_from_slice(&private_key(block, tx_index));
        key
    }
}

/// The (block, transaction index) of an index entry under `prefix`.
pub(crate) fn indexed_position(prefix: &[u8], key: &[u8]) -> Option<(u64, u64)> {
    let position = key.strip_prefix(prefix)?;
    let block: [u8; 8] = position.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(block), tx_index_of(position)?))
}

/// Blocks a transient entry is kept for at least, past the height at which
/// it was kept (Fabric's default `transientstoreMaxBlockRetention`).
pub const TRANSIENT_RETENTION_BLOCKS: u64 = 20_000;

const ENTRY_PREFIX: u8 = b't';
const BY_HEIGHT_PREFIX: u8 = b'h';

/// The key of transaction `tx_index` of block `block` in [`CF_PRIVATE`].
pub(crate) fn private_key(block: u64, tx_index: u64) -> [u8; 16] {
    let mut key = [0; 16];
    key[..8].copy_from_slice(&block.to_be_bytes());
    key[8..].copy_from_slice(&tx_index.to_be_bytes());
    key
}

/// The transaction index of a [`CF_PRIVATE`] key.
pub(crate) fn tx_index_of(key: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = key.get(8..16)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// The transient entry of `tx_id`.
pub(crate) fn entry_key(tx_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + tx_id.len());
    key.push(ENTRY_PREFIX);
    key.extend_from_slice(tx_id.as_bytes());
    key
}

/// The purge index entry of `tx_id`, kept at `height`.
pub(crate) fn by_height_key(height: u64, tx_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(9 + tx_id.len());
    key.push(BY_HEIGHT_PREFIX);
    key.extend_from_slice(&height.to_be_bytes());
    key.extend_from_slice(tx_id.as_bytes());
    key
}

/// The first purge index key at or above `height`.
pub(crate) fn by_height_start(height: u64) -> [u8; 9] {
    let mut key = [BY_HEIGHT_PREFIX; 9];
    key[1..].copy_from_slice(&height.to_be_bytes());
    key
}

/// The TxID of a purge index key, if it is one.
pub(crate) fn tx_id_of_by_height(key: &[u8]) -> Option<&str> {
    if key.first() != Some(&BY_HEIGHT_PREFIX) {
        return None;
    }
    std::str::from_utf8(key.get(9..)?).ok()
}

/// A transient entry's value.
pub(crate) fn encode_entry(height: u64, private: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(8 + private.len());
    value.extend_from_slice(&height.to_be_bytes());
    value.extend_from_slice(private);
    value
}

/// The private writes of a transient entry's value.
pub(crate) fn entry_writes(value: &[u8]) -> Option<&[u8]> {
    value.get(8..)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_block_then_transaction_and_decode() {
        assert!(private_key(1, 9) < private_key(2, 0));
        assert!(private_key(2, 0) < private_key(2, 1));
        assert_eq!(tx_index_of(&private_key(7, 3)), Some(3));
        assert_eq!(tx_index_of(b"short"), None);
        assert!(by_height_start(5)[..] <= by_height_key(5, "a")[..]);
        assert!(by_height_key(5, "zz") < by_height_key(6, "a"));
        assert_eq!(tx_id_of_by_height(&by_height_key(5, "tx1")), Some("tx1"));
        assert_eq!(tx_id_of_by_height(&entry_key("tx1")), None);
        assert_eq!(entry_writes(&encode_entry(4, b"abc")), Some(&b"abc"[..]));
    }

    #[test]
    fn missing_entries_sort_by_position_and_read_back() {
        let missing = |block: u64, collection: &str| MissingPrivateData {
            block,
            tx_index: 3,
            tx_id: "tx".to_owned(),
            namespace: "cc".to_owned(),
            collection: collection.to_owned(),
        };
        assert!(missing(1, "zz").key() < missing(2, "a").key());
        let entry = missing(7, "c");
        assert_eq!(
            MissingPrivateData::from_entry(&entry.key(), b"tx"),
            Some(entry)
        );
        assert_eq!(MissingPrivateData::from_entry(b"short", b"tx"), None);
        assert!(reconciled_key(5, 9, 9) < reconciled_key(6, 0, 0));
        let purged = PurgedValue {
            block: 4,
            tx_index: 1,
            namespace: "cc".to_owned(),
            collection: "c".to_owned(),
            key: "a key\0with a NUL".to_owned(),
        };
        assert_eq!(PurgedValue::from_record(&purged.record_key()), Some(purged));
    }

    #[test]
    fn a_private_keys_index_entries_share_its_prefix_alone_and_sort_by_position() {
        let key = |namespace: &str, collection: &str, byte: u8| PrivateKeyRef {
            namespace: namespace.to_owned(),
            collection: collection.to_owned(),
            key_hash: [byte; 32],
        };
        let k = key("cc", "c", 1);
        let prefix = k.index_prefix();
        assert!(k.index_key(1, 9) < k.index_key(2, 0));
        assert_eq!(indexed_position(&prefix, &k.index_key(7, 3)), Some((7, 3)));
        // Neither a longer collection name nor another hash shares it.
        for other in [key("cc", "cc", 1), key("cc", "c", 2), key("c", "cc", 1)] {
            assert!(!other.index_key(0, 0).starts_with(&prefix));
        }
    }
}
