//! Private data at commit: the values behind a block's hashes, for the
//! collections this peer's organisation is a member of.
//!
//! A transaction carries only hashes of its private writes (every peer
//! commits those). The values travel beside the chain: the endorsing peer
//! keeps them in its transient store (and hands them to other members'
//! peers), and when the block holding the transaction arrives a member peer
//! takes them from there, checks each collection's write set against the
//! hash the transaction carries (`pvt_rwset_hash`), and commits the writes
//! into the collection's private namespace (`<chaincode>$$p<collection>`)
//! at the transaction's version, the version its hashes get. What it
//! committed is stored with the block ([`weft_ledger::BlockPrivateData`]),
//! so that replaying the block after a restart applies the same values.
//!
//! Only valid transactions commit private data. A collection whose values
//! are not in the transient store, or do not match their hash, is missing
//! on this peer: its hashes commit as on any other peer, a read of the
//! key answers that the value is not available, and a warning names the
//! transaction and collection, and the block store records it as missing
//! (Fabric's missing private data), for the reconciler to ask for again
//! later (`reconcile.rs`; what it finds, [`complete`] commits with a later
//! block).
//!
//! **blockToLive.** A write to a collection with a `blockToLive` of `k`,
//! committed in block `b`, expires when block `b + k + 1` commits, as in
//! Fabric: that block's state update deletes the key's hash (on every
//! peer) and its value (on members), unless a later write replaced them.
//! The schedule lives in the world state itself, in [`EXPIRY_NAMESPACE`]
//! (key `<expiring block, 16 hex digits>/<h|p|s>/<chaincode>/<collection>/<key>`,
//! value the version that expires), written by the update that commits
//! the write: checkpoints, replays and stream rollbacks carry it with the
//! state. The block store's copy of what the transaction committed loses
//! the collection in the batch of the expiring block too (`s` entries,
//! whose key is the transaction's version), so that no pull answers it
//! after that (Fabric purges its private data store likewise).

use std::collections::HashMap;

use bytes::Bytes;
use prost::Message;
use weft_ledger::{BlockPrivateData, MissingPrivateData, PrivateKeyRef, PurgedValue};
use weft_protos::kvrwset::{KvWrite, KvrwSet};
use weft_protos::privatedata::MissingWrites;
use weft_protos::protos::TxValidationCode;
use weft_protos::rwset::{
    CollectionPvtReadWriteSet, NsPvtReadWriteSet, TxPvtReadWriteSet, tx_read_write_set,
};
use weft_protos::view::{DecodedBlock, TxEnvelope};
use weft_statedb::{
    Height, StateReader, UpdateBatch, VersionedValue, hashed_namespace, private_namespace,
};

use crate::channel::ChannelContext;
use crate::lifecycle::ChaincodeDefinitions;

/// Where the world state keeps the schedule of private data expiring
/// (see the module's docs). No chaincode's namespace starts with `$`.
pub const EXPIRY_NAMESPACE: &str = "$$expiry";

/// Where a transaction's private writes may be found: the transient
/// store, and the peers of other members.
pub trait PrivateWritesSource {
    /// The serialized `TxPvtReadWriteSet` kept for `tx_id`, if any.
    fn private_writes(&self, tx_id: &str) -> Option<Bytes>;

    /// Asks other members' peers for `missing`; returns what was found, by
    /// TxID (each set checked against its hash afterwards). Called at most
    /// once per block; the default asks no one.
    fn pull(&self, missing: &[Missing]) -> Vec<(String, TxPvtReadWriteSet)> {
        let _ = missing;
        Vec::new()
    }
}

/// One collection's writes of one transaction that a member peer is
/// missing at commit, as a pull asks for them, with the organisations
/// whose peers may hold them.
pub type Missing = (MissingWrites, Vec<String>);

/// The transient store of the block store.
impl PrivateWritesSource for weft_ledger::BlockStore {
    fn private_writes(&self, tx_id: &str) -> Option<Bytes> {
        self.transient(tx_id).unwrap_or_else(|error| {
            tracing::error!(tx_id, %error, "reading the transient store failed");
            None
        })
    }
}

/// Gathers what block `decoded` commits of private data on a peer of
/// organisation `msp_id`: for each valid transaction, the write sets of the
/// collections the organisation keeps, found in the transient store or
/// else pulled from other members' peers through `source`, and matching
/// their hashes. Every transaction of the block that wrote private data
/// has its transient entry settled, kept by this peer or not.
pub(crate) fn gather(
    decoded: &DecodedBlock,
    codes: &[TxValidationCode],
    context: &ChannelContext,
    msp_id: &str,
    source: &dyn PrivateWritesSource,
) -> BlockPrivateData {
    let number = decoded.header.number;
    let mut private = BlockPrivateData::default();
    // Per transaction index: its TxID, the sets it keeps, the collections
    // still without a matching set.
    let mut found: Vec<(u64, String, TxPvtReadWriteSet, Vec<Expected>)> = Vec::new();
    for (index, (transaction, code)) in decoded.transactions.iter().zip(codes).enumerate() {
        let Ok(transaction) = transaction else {
            continue;
        };
        let writes_private = transaction
            .namespaces()
            .flat_map(|namespace| &namespace.collection_hashed)
            .any(|collection| !collection.pvt_rwset_hash.is_empty());
        if !writes_private {
            continue;
        }
        let tx_id = transaction.tx_id();
        private.settled.push(tx_id.to_owned());
        let expected = expected_collections(transaction, context, msp_id);
        if expected.is_empty() || *code != TxValidationCode::Valid {
            continue;
        }
        let kept = source
            .private_writes(tx_id)
            .and_then(|bytes| TxPvtReadWriteSet::decode(bytes).ok())
            .unwrap_or_default();
        let mut committed = empty_set();
        let still = take_matching(&kept, expected, &mut committed);
        found.push((index as u64, tx_id.to_owned(), committed, still));
    }

    let missing: Vec<Missing> = found
        .iter()
        .flat_map(|(index, tx_id, _, still)| {
            still.iter().map(|expected| {
                let wanted = MissingWrites {
                    tx_id: tx_id.clone(),
                    block_number: number,
                    tx_index: *index,
                    namespace: expected.namespace.clone(),
                    collection: expected.collection.clone(),
                };
                let members = context.collection_members(&expected.namespace, &expected.collection);
                (wanted, members)
            })
        })
        .collect();
    if !missing.is_empty() {
        let pulled = source.pull(&missing);
        for (_, tx_id, committed, still) in &mut found {
            for (pulled_id, set) in &pulled {
                if pulled_id == tx_id && !still.is_empty() {
                    *still = take_matching(set, std::mem::take(still), committed);
                }
            }
        }
    }

    for (index, tx_id, committed, still) in found {
        for expected in still {
            tracing::warn!(
                channel = %context.channel_id,
                block = number,
                %tx_id,
                namespace = %expected.namespace,
                collection = %expected.collection,
                "private data missing on this peer (not received, or not matching its hash); \
                 the reconciler will ask for it again"
            );
            private.missing.push(MissingPrivateData {
                block: number,
                tx_index: index,
                tx_id: tx_id.clone(),
                namespace: expected.namespace,
                collection: expected.collection,
            });
        }
        if !committed.ns_pvt_rwset.is_empty() {
            private
                .committed
                .push((index, committed.encode_to_vec().into()));
        }
    }
    private
}

/// A collection of a transaction whose plaintext this peer keeps.
#[derive(Debug, Clone)]
pub(crate) struct Expected {
    pub(crate) namespace: String,
    pub(crate) collection: String,
    /// The hash of its write set, as the transaction carries it.
    pub(crate) hash: Bytes,
}

pub(crate) fn empty_set() -> TxPvtReadWriteSet {
    TxPvtReadWriteSet {
        data_model: tx_read_write_set::DataModel::Kv as i32,
        ns_pvt_rwset: Vec::new(),
    }
}

/// Moves into `committed` the sets of `candidates` that match an
/// `expected` collection's hash; returns the expected collections left
/// without one.
pub(crate) fn take_matching(
    candidates: &TxPvtReadWriteSet,
    expected: Vec<Expected>,
    committed: &mut TxPvtReadWriteSet,
) -> Vec<Expected> {
    let mut still = Vec::new();
    for wanted in expected {
        let matching = candidates
            .ns_pvt_rwset
            .iter()
            .filter(|ns| ns.namespace == wanted.namespace)
            .flat_map(|ns| &ns.collection_pvt_rwset)
            .find(|set| {
                set.collection_name == wanted.collection
                    && weft_protos::hash::sha256(&set.rwset).as_slice() == wanted.hash.as_ref()
            });
        let Some(set) = matching else {
            still.push(wanted);
            continue;
        };
        let entry = match committed
            .ns_pvt_rwset
            .iter()
            .position(|ns| ns.namespace == wanted.namespace)
        {
            Some(position) => &mut committed.ns_pvt_rwset[position],
            None => {
                committed.ns_pvt_rwset.push(NsPvtReadWriteSet {
                    namespace: wanted.namespace.clone(),
                    collection_pvt_rwset: Vec::new(),
                });
                let last = committed.ns_pvt_rwset.len() - 1;
                &mut committed.ns_pvt_rwset[last]
            }
        };
        entry.collection_pvt_rwset.push(set.clone());
    }
    still
}

/// The collections of `transaction` with a private write set that an
/// organisation `msp_id` keeps.
fn expected_collections(
    transaction: &TxEnvelope,
    context: &ChannelContext,
    msp_id: &str,
) -> Vec<Expected> {
    let mut expected = Vec::new();
    for namespace in transaction.namespaces() {
        for collection in &namespace.collection_hashed {
            if collection.pvt_rwset_hash.is_empty()
                || !context.keeps_collection(&namespace.namespace, &collection.collection, msp_id)
            {
                continue;
            }
            expected.push(Expected {
                namespace: namespace.namespace.clone(),
                collection: collection.collection.clone(),
                hash: collection.pvt_rwset_hash.clone(),
            });
        }
    }
    expected
}

/// One collection's private writes committed by a transaction of a
/// block, decoded once for everything the commit does with them.
#[derive(Debug, Clone)]
pub(crate) struct CommittedWrites {
    /// The block and transaction that committed them: their version.
    pub(crate) block: u64,
    pub(crate) tx_index: u64,
    pub(crate) namespace: String,
    pub(crate) collection: String,
    pub(crate) rwset: KvrwSet,
}

/// Decodes block `block`'s committed private data (as [`gather`] found
/// it, or as the block store kept it). A stored set that does not decode
/// is skipped with an error logged; it was checked against its hash
/// before it was stored.
pub(crate) fn decode_committed(block: u64, private: &[(u64, Bytes)]) -> Vec<CommittedWrites> {
    let mut decoded = Vec::new();
    for (tx_index, bytes) in private {
        let Ok(set) = TxPvtReadWriteSet::decode(bytes.clone()) else {
            tracing::error!(block, tx_index, "stored private data does not decode");
            continue;
        };
        decoded.extend(committed_writes(block, *tx_index, set));
    }
    decoded
}

/// The collections of `set`, the private writes of transaction
/// `tx_index` of block `block`, each write set decoded (one that does not
/// is skipped with an error logged).
fn committed_writes(block: u64, tx_index: u64, set: TxPvtReadWriteSet) -> Vec<CommittedWrites> {
    let mut decoded = Vec::new();
    for namespace in set.ns_pvt_rwset {
        for collection in namespace.collection_pvt_rwset {
            let Ok(rwset) = KvrwSet::decode(collection.rwset) else {
                tracing::error!(block, tx_index, "stored private write set does not decode");
                continue;
            };
            decoded.push(CommittedWrites {
                block,
                tx_index,
                namespace: namespace.namespace.clone(),
                collection: collection.collection_name,
                rwset,
            });
        }
    }
    decoded
}

/// Adds a block's committed private writes to `batch` (block `block`'s
/// update, made by [`crate::mvcc::update_batch`] first): each write at its
/// transaction's version; a key whose metadata alone is written keeps its
/// value at the new version, as its hash does (the metadata itself is kept
/// under the hash, on every peer).
pub(crate) fn apply(
    batch: &mut UpdateBatch,
    committed: &[CommittedWrites],
    state: &dyn StateReader,
) -> weft_statedb::Result<()> {
    for writes in committed {
        let height = Height::new(writes.block, writes.tx_index);
        let state_namespace = private_namespace(&writes.namespace, &writes.collection);
        for write in &writes.rwset.writes {
            if write.is_delete {
                batch.delete(&state_namespace, &write.key, height);
            } else {
                batch.put(&state_namespace, &write.key, write.value.clone(), height);
            }
        }
        // Fabric's rule: the value moves with its hash only if it is the
        // value the hash is of (a peer missing the latest value must not
        // pass an older one off as current).
        let hashed = hashed_namespace(&writes.namespace, &writes.collection);
        for metadata in &writes.rwset.metadata_writes {
            let key = metadata.key.as_str();
            if writes.rwset.writes.iter().any(|write| write.key == key) {
                continue;
            }
            let key_hash = hex::encode(weft_protos::hash::sha256(key.as_bytes()));
            let Some(hash) = batch
                .get(&hashed, &key_hash)
                .filter(|moved| moved.version == height)
                .and_then(|moved| moved.value.clone())
            else {
                continue;
            };
            if let Some(held) = batch.latest(state, &state_namespace, key)?
                && weft_protos::hash::sha256(&held.value).as_slice() == hash.as_ref()
            {
                batch.put(&state_namespace, key, held.value, height);
            }
        }
    }
    Ok(())
}

/// The private keys a block's committed writes touch (values or
/// metadata), for the block store's index of them.
pub(crate) fn key_writes(committed: &[CommittedWrites]) -> Vec<(u64, u64, PrivateKeyRef)> {
    let mut keys = Vec::new();
    for writes in committed {
        let rwset = &writes.rwset;
        let touched = rwset
            .writes
            .iter()
            .map(|write| &write.key)
            .chain(rwset.metadata_writes.iter().map(|write| &write.key));
        for key in touched {
            keys.push((
                writes.block,
                writes.tx_index,
                PrivateKeyRef {
                    namespace: writes.namespace.clone(),
                    collection: writes.collection.clone(),
                    key_hash: weft_protos::hash::sha256(key.as_bytes()),
                },
            ));
        }
    }
    keys
}

/// A purge (Fabric 2.5's `PurgePrivateData`) of a valid transaction:
/// transaction `tx_index` of block `block` purges `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Purge {
    pub(crate) block: u64,
    pub(crate) tx_index: u64,
    pub(crate) key: PrivateKeyRef,
}

/// The purges of block `decoded`'s valid transactions.
pub(crate) fn purges_in(decoded: &DecodedBlock, codes: &[TxValidationCode]) -> Vec<Purge> {
    let block = decoded.header.number;
    let mut purges = Vec::new();
    for (index, (transaction, code)) in decoded.transactions.iter().zip(codes).enumerate() {
        let (Ok(transaction), TxValidationCode::Valid) = (transaction, code) else {
            continue;
        };
        for namespace in transaction.namespaces() {
            for collection in &namespace.collection_hashed {
                for write in collection.rwset.hashed_writes.iter().filter(|w| w.is_purge) {
                    let Ok(key_hash) = write.key_hash.as_ref().try_into() else {
                        continue;
                    };
                    purges.push(Purge {
                        block,
                        tx_index: index as u64,
                        key: PrivateKeyRef {
                            namespace: namespace.namespace.clone(),
                            collection: collection.collection.clone(),
                            key_hash,
                        },
                    });
                }
            }
        }
    }
    purges
}

/// Carries out `purges` on this peer in block `number`'s update. The
/// committed copies of each purged key from before its purge, in earlier
/// blocks (found through the block store's index) and in this block's
/// transactions before it, lose the key; a purge of this block also
/// removes the key's value from the private namespace, unless a later
/// transaction of the block writes it again. The key's hash and metadata
/// leave the state as for any delete (`crate::mvcc::update_batch`).
///
/// With `rewrite` false (a stream channel's staged block, which may be
/// rolled back) the earlier blocks' copies and the index are left as they
/// are: the caller keeps the purges and passes them again with the next
/// signed block, whose batch rewrites them. The values removed are
/// recorded with the block for replays.
pub(crate) fn purge_keys(
    batch: &mut UpdateBatch,
    number: u64,
    purges: &[Purge],
    rewrite: bool,
    private: &mut BlockPrivateData,
    ledger: &weft_ledger::BlockStore,
    state: &dyn StateReader,
) -> crate::Result<()> {
    if purges.is_empty() {
        return Ok(());
    }
    let expired = (!rewrite).then(|| private.rewritten.clone());
    // Earlier blocks' copies as this block leaves them: (block, tx index)
    // → the set (`None` when gone) and whether it changed. Expiry may have
    // pruned some already.
    let mut copies: HashMap<(u64, u64), (Option<TxPvtReadWriteSet>, bool)> = private
        .rewritten
        .drain(..)
        .map(|(block, tx, left)| {
            let set = left.and_then(|bytes| TxPvtReadWriteSet::decode(bytes).ok());
            ((block, tx), (set, true))
        })
        .collect();
    for purge in purges {
        let key = &purge.key;
        let position = (purge.block, purge.tx_index);
        let mut plaintext: Vec<String> = Vec::new();
        for (block, tx) in ledger.private_key_writes(key)? {
            if (block, tx) >= position || block >= number {
                continue;
            }
            let (copy, changed) = match copies.entry((block, tx)) {
                std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::hash_map::Entry::Vacant(entry) => {
                    let stored = ledger
                        .private_data_of(block, tx)?
                        .and_then(|bytes| TxPvtReadWriteSet::decode(bytes).ok());
                    entry.insert((stored, false))
                }
            };
            if let Some(set) = copy {
                let removed = without_key(set, key);
                *changed |= !removed.is_empty();
                plaintext.extend(removed);
            }
        }
        if purge.block != number {
            // A staged block's purge, its value removed from the state
            // then: the copies and the index now.
            private
                .purged_keys
                .push((purge.block, purge.tx_index, key.clone()));
            continue;
        }
        for (tx_index, bytes) in &mut private.committed {
            if *tx_index >= purge.tx_index {
                continue;
            }
            let Ok(mut set) = TxPvtReadWriteSet::decode(bytes.clone()) else {
                continue;
            };
            let removed = without_key(&mut set, key);
            if !removed.is_empty() {
                *bytes = set.encode_to_vec().into();
                plaintext.extend(removed);
                private.key_writes.retain(|(block, index, written)| {
                    (*block, *index) != (number, *tx_index) || written != key
                });
            }
        }
        let height = Height::new(number, purge.tx_index);
        let state_namespace = private_namespace(&key.namespace, &key.collection);
        plaintext.sort();
        plaintext.dedup();
        for plaintext_key in plaintext {
            let written = batch.get(&state_namespace, &plaintext_key);
            if written.is_some_and(|write| write.version > height) {
                continue; // written again later in the block
            }
            if batch
                .latest(state, &state_namespace, &plaintext_key)?
                .is_some()
            {
                batch.delete(&state_namespace, &plaintext_key, height);
            }
            private.purged_values.push(PurgedValue {
                block: number,
                tx_index: purge.tx_index,
                namespace: key.namespace.clone(),
                collection: key.collection.clone(),
                key: plaintext_key,
            });
        }
        if rewrite {
            private
                .purged_keys
                .push((purge.block, purge.tx_index, key.clone()));
        }
    }
    if let Some(expired) = expired {
        // The copies and the index wait for the checkpoint; expiry's
        // rewrites stay.
        private.rewritten = expired;
        return Ok(());
    }
    private.rewritten = copies
        .into_iter()
        .filter(|(_, (_, changed))| *changed)
        .map(|((block, tx), (set, _))| {
            let left = set
                .filter(|set| !set.ns_pvt_rwset.is_empty())
                .map(|set| Bytes::from(set.encode_to_vec()));
            (block, tx, left)
        })
        .collect();
    Ok(())
}

/// Removes, on replay, the private values block `number`'s purges removed
/// when it was first committed (the copies that named them were rewritten
/// then), unless the replayed batch writes them again later in the block.
pub(crate) fn purge_again(batch: &mut UpdateBatch, purged: &[PurgedValue]) {
    for value in purged {
        let height = Height::new(value.block, value.tx_index);
        let state_namespace = private_namespace(&value.namespace, &value.collection);
        if batch
            .get(&state_namespace, &value.key)
            .is_some_and(|write| write.version > height)
        {
            continue;
        }
        batch.delete(&state_namespace, &value.key, height);
    }
}

/// Removes from `set` the writes (values and metadata) of `key`'s
/// collection whose key hashes to `key`'s hash, dropping the collection
/// and its namespace if nothing is left; returns the key of each write
/// removed (empty: `set` is unchanged).
fn without_key(set: &mut TxPvtReadWriteSet, key: &PrivateKeyRef) -> Vec<String> {
    let mut removed = Vec::new();
    let hashes_to =
        |plaintext: &str| weft_protos::hash::sha256(plaintext.as_bytes()) == key.key_hash;
    for namespace in &mut set.ns_pvt_rwset {
        if namespace.namespace != key.namespace {
            continue;
        }
        let mut emptied = false;
        for collection in &mut namespace.collection_pvt_rwset {
            if collection.collection_name != key.collection {
                continue;
            }
            let Ok(mut rwset) = KvrwSet::decode(collection.rwset.clone()) else {
                continue;
            };
            let before = rwset.writes.len() + rwset.metadata_writes.len();
            rwset.writes.retain(|write| {
                let matches = hashes_to(&write.key);
                if matches {
                    removed.push(write.key.clone());
                }
                !matches
            });
            rwset.metadata_writes.retain(|write| {
                let matches = hashes_to(&write.key);
                if matches {
                    removed.push(write.key.clone());
                }
                !matches
            });
            let after = rwset.writes.len() + rwset.metadata_writes.len();
            if after != before {
                collection.rwset = rwset.encode_to_vec().into();
                emptied |= after == 0;
            }
        }
        if emptied {
            namespace
                .collection_pvt_rwset
                .retain(|collection| collection.collection_name != key.collection);
        }
    }
    set.ns_pvt_rwset
        .retain(|namespace| !namespace.collection_pvt_rwset.is_empty());
    removed
}

/// Earlier blocks' private writes found since those blocks committed (by
/// the reconciler, `crate::reconcile`), checked against their hashes: the
/// collections found of transaction `tx_index` of block `block`, and the
/// missing entries they settle.
#[derive(Debug, Clone)]
pub struct Reconciled {
    pub(crate) block: u64,
    pub(crate) tx_index: u64,
    pub(crate) set: TxPvtReadWriteSet,
    pub(crate) found: Vec<MissingPrivateData>,
}

/// Completes, in block `number`'s update, earlier blocks' committed copies
/// with the `found` data: each collection is merged into its
/// transaction's copy (in `private.rewritten`), its writes that are still
/// current are applied ([`apply_completed`]) and indexed, and its missing
/// entries are settled. A collection some of whose keys have changed since
/// (written again, deleted, purged or expired) is kept with its current
/// writes only, so that nothing purged or expired comes back.
pub(crate) fn complete(
    batch: &mut UpdateBatch,
    private: &mut BlockPrivateData,
    state: &dyn StateReader,
    ledger: &weft_ledger::BlockStore,
    number: u64,
    definitions: &ChaincodeDefinitions,
    found: Vec<Reconciled>,
) -> crate::Result<()> {
    let mut completed = Vec::new();
    for reconciled in found {
        let (block, tx_index) = (reconciled.block, reconciled.tx_index);
        let mut kept = Vec::new();
        for mut writes in committed_writes(block, tx_index, reconciled.set) {
            let all = writes.rwset.writes.len();
            let mut current = Vec::with_capacity(all);
            for write in std::mem::take(&mut writes.rwset.writes) {
                if current_version(batch, state, &writes, &write)?.is_some() {
                    current.push(write);
                }
            }
            if current.is_empty() && all > 0 {
                continue;
            }
            writes.rwset.writes = current;
            kept.push(writes);
        }
        let position = private
            .rewritten
            .iter()
            .position(|(b, t, _)| (*b, *t) == (block, tx_index));
        let stored = match position {
            Some(index) => private.rewritten[index].2.clone(),
            None => ledger.private_data_of(block, tx_index)?,
        };
        let mut copy = stored
            .and_then(|bytes| TxPvtReadWriteSet::decode(bytes).ok())
            .unwrap_or_else(empty_set);
        for writes in &kept {
            add_collection(&mut copy, writes);
        }
        let merged = Some(Bytes::from(copy.encode_to_vec()));
        match position {
            Some(index) => private.rewritten[index].2 = merged,
            None => private.rewritten.push((block, tx_index, merged)),
        }
        completed.extend(kept);
        private.reconciled.extend(reconciled.found);
    }
    apply_completed(batch, state, number, definitions, &completed)?;
    private.key_writes.extend(key_writes(&completed));
    Ok(())
}

/// Adds the collection of `writes` to `copy` unless it holds it already.
fn add_collection(copy: &mut TxPvtReadWriteSet, writes: &CommittedWrites) {
    let set = CollectionPvtReadWriteSet {
        collection_name: writes.collection.clone(),
        rwset: writes.rwset.encode_to_vec().into(),
    };
    match copy
        .ns_pvt_rwset
        .iter_mut()
        .find(|namespace| namespace.namespace == writes.namespace)
    {
        Some(namespace) => {
            if !namespace
                .collection_pvt_rwset
                .iter()
                .any(|held| held.collection_name == writes.collection)
            {
                namespace.collection_pvt_rwset.push(set);
            }
        }
        None => copy.ns_pvt_rwset.push(NsPvtReadWriteSet {
            namespace: writes.namespace.clone(),
            collection_pvt_rwset: vec![set],
        }),
    }
}

/// The version at which `write`, of the collection and transaction of
/// `writes` (found after its block committed), is current, if it is: its
/// own, when the key's hash still has that version; the hash's, when the
/// hash moved since (its metadata changed) but is still the hash of this
/// value (Fabric's rule); for a delete, its own, when the key has no hash
/// and this peer holds an older value of it.
fn current_version(
    batch: &UpdateBatch,
    state: &dyn StateReader,
    writes: &CommittedWrites,
    write: &KvWrite,
) -> weft_statedb::Result<Option<Height>> {
    let key = write.key.as_str();
    let version = Height::new(writes.block, writes.tx_index);
    let hashed = hashed_namespace(&writes.namespace, &writes.collection);
    let key_hash = hex::encode(weft_protos::hash::sha256(key.as_bytes()));
    let hash = batch.latest(state, &hashed, &key_hash)?;
    if !write.is_delete {
        return Ok(match hash {
            Some(hash) if hash.version == version => Some(version),
            Some(hash)
                if hash.value.as_ref() == weft_protos::hash::sha256(&write.value).as_slice() =>
            {
                Some(hash.version)
            }
            _ => None,
        });
    }
    let private = private_namespace(&writes.namespace, &writes.collection);
    let held_older = batch
        .latest(state, &private, key)?
        .is_some_and(|held| held.version < version);
    Ok((hash.is_none() && held_older).then_some(version))
}

/// Applies in `batch` (block `number`'s update) the writes of `completed`
/// (earlier blocks' data found since, already reduced to what is still
/// current) at their own transactions' versions, and schedules their
/// expiry. Used when the data is found and when the completing block is
/// replayed.
pub(crate) fn apply_completed(
    batch: &mut UpdateBatch,
    state: &dyn StateReader,
    number: u64,
    definitions: &ChaincodeDefinitions,
    completed: &[CommittedWrites],
) -> weft_statedb::Result<()> {
    for writes in completed {
        let private = private_namespace(&writes.namespace, &writes.collection);
        for write in &writes.rwset.writes {
            let Some(version) = current_version(batch, state, writes, write)? else {
                continue;
            };
            if write.is_delete {
                batch.delete(&private, &write.key, version);
            } else {
                batch.put(&private, &write.key, write.value.clone(), version);
            }
        }
    }
    schedule_value_expiry(batch, number, definitions, completed);
    Ok(())
}

/// Schedules in `batch` the expiry of what the valid transactions of block
/// `number` write to collections with a `blockToLive`: each key's hash,
/// and where `committed` (the block's committed private data) holds the
/// key's value, the value. A key whose metadata alone is written counts
/// as written by that transaction (its hash, and a member's value, moved
/// to its version), as Fabric's expiry keeper counts it.
pub(crate) fn schedule_expiry(
    batch: &mut UpdateBatch,
    decoded: &DecodedBlock,
    codes: &[TxValidationCode],
    definitions: &ChaincodeDefinitions,
    committed: &[CommittedWrites],
) {
    let number = decoded.header.number;
    for (index, (transaction, code)) in decoded.transactions.iter().zip(codes).enumerate() {
        let (Ok(transaction), TxValidationCode::Valid) = (transaction, code) else {
            continue;
        };
        let version = Height::new(number, index as u64);
        for namespace in transaction.namespaces() {
            for collection in &namespace.collection_hashed {
                let lifetime =
                    match definitions.collection(&namespace.namespace, &collection.collection) {
                        Ok(Some(declared)) if declared.block_to_live > 0 => declared.block_to_live,
                        _ => continue,
                    };
                let expiring = number.saturating_add(lifetime).saturating_add(1);
                let rwset = &collection.rwset;
                let written = rwset.hashed_writes.iter().filter(|w| !w.is_delete);
                let metadata_alone = rwset.metadata_writes.iter().filter(|metadata| {
                    !rwset
                        .hashed_writes
                        .iter()
                        .any(|write| write.key_hash == metadata.key_hash)
                });
                let hashes = written
                    .map(|write| &write.key_hash)
                    .chain(metadata_alone.map(|metadata| &metadata.key_hash));
                for key_hash in hashes {
                    let entry = format!(
                        "{expiring:016x}/h/{}/{}/{}",
                        namespace.namespace,
                        collection.collection,
                        hex::encode(key_hash)
                    );
                    batch.put(EXPIRY_NAMESPACE, &entry, encode_version(version), version);
                }
            }
        }
    }
    schedule_value_expiry(batch, number, definitions, committed);
}

/// Schedules in `batch` (block `number`'s update) the expiry of the
/// committed private values `committed` (of block `number`, or of an
/// earlier block whose copy it completes) in collections with a
/// `blockToLive`: each value, and the committed copy's collection. What
/// expires at or before `number` is not scheduled (it expired before it
/// was found).
fn schedule_value_expiry(
    batch: &mut UpdateBatch,
    number: u64,
    definitions: &ChaincodeDefinitions,
    committed: &[CommittedWrites],
) {
    for writes in committed {
        let lifetime = match definitions.collection(&writes.namespace, &writes.collection) {
            Ok(Some(declared)) if declared.block_to_live > 0 => declared.block_to_live,
            _ => continue,
        };
        let expiring = writes.block.saturating_add(lifetime).saturating_add(1);
        if expiring <= number {
            continue;
        }
        let version = Height::new(writes.block, writes.tx_index);
        let mut schedule = |kind: char, key: &str| {
            let entry = format!(
                "{expiring:016x}/{kind}/{}/{}/{key}",
                writes.namespace, writes.collection
            );
            batch.put(EXPIRY_NAMESPACE, &entry, encode_version(version), version);
        };
        schedule(
            's',
            &format!("{:016x}{:016x}", writes.block, writes.tx_index),
        );
        let rwset = &writes.rwset;
        for write in rwset.writes.iter().filter(|w| !w.is_delete) {
            schedule('p', &write.key);
        }
        for metadata in &rwset.metadata_writes {
            if !rwset.writes.iter().any(|write| write.key == metadata.key) {
                schedule('p', &metadata.key);
            }
        }
    }
}

/// A collection's writes of one committed transaction, expired: to be
/// removed from the block store's copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExpiredWrites {
    pub(crate) block: u64,
    pub(crate) tx_index: u64,
    pub(crate) namespace: String,
    pub(crate) collection: String,
}

/// Adds to `batch` (block `number`'s update) the deletion of what expires
/// at block `number`: each scheduled key whose stored version is still the
/// one scheduled and that the block does not write again, and the
/// schedule's entries. Returns the committed write sets that expire, for
/// the block store.
pub(crate) fn purge_expired(
    batch: &mut UpdateBatch,
    state: &dyn StateReader,
    number: u64,
) -> weft_statedb::Result<Vec<ExpiredWrites>> {
    let mut stored = Vec::new();
    let start = format!("{number:016x}/");
    let end = format!("{number:016x}0");
    let due = state.range(EXPIRY_NAMESPACE, &start, &end, usize::MAX)?;
    let height = Height::new(number, 0);
    for (entry, scheduled) in due {
        batch.delete(EXPIRY_NAMESPACE, &entry, height);
        let mut parts = entry.splitn(5, '/').skip(1);
        let (Some(kind), Some(namespace), Some(collection), Some(key)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let target = match kind {
            "h" => hashed_namespace(namespace, collection),
            "p" => private_namespace(namespace, collection),
            "s" => {
                let position = |range: std::ops::Range<usize>| {
                    key.get(range)
                        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                };
                if let (Some(block), Some(tx_index)) = (position(0..16), position(16..32)) {
                    stored.push(ExpiredWrites {
                        block,
                        tx_index,
                        namespace: namespace.to_owned(),
                        collection: collection.to_owned(),
                    });
                }
                continue;
            }
            _ => continue,
        };
        if batch.get(&target, key).is_some() {
            continue;
        }
        let still = state
            .get(&target, key)?
            .is_some_and(|stored: VersionedValue| {
                Some(stored.version) == decode_version(&scheduled.value)
            });
        if still {
            batch.delete(&target, key, height);
        }
    }
    Ok(stored)
}

/// The block store's copies of committed write sets without the
/// `expired` collections: (block, transaction index, what is left, `None`
/// when nothing is).
pub(crate) fn pruned(
    ledger: &weft_ledger::BlockStore,
    expired: &[ExpiredWrites],
) -> weft_ledger::Result<Vec<(u64, u64, Option<Bytes>)>> {
    let mut pruned: Vec<(u64, u64, TxPvtReadWriteSet)> = Vec::new();
    for gone in expired {
        let position = pruned
            .iter()
            .position(|(block, tx, _)| (*block, *tx) == (gone.block, gone.tx_index));
        let index = match position {
            Some(index) => index,
            None => {
                let stored = ledger
                    .private_data_of(gone.block, gone.tx_index)?
                    .and_then(|bytes| TxPvtReadWriteSet::decode(bytes).ok());
                let Some(set) = stored else {
                    continue;
                };
                pruned.push((gone.block, gone.tx_index, set));
                pruned.len() - 1
            }
        };
        let set = &mut pruned[index].2;
        for namespace in &mut set.ns_pvt_rwset {
            if namespace.namespace == gone.namespace {
                namespace
                    .collection_pvt_rwset
                    .retain(|collection| collection.collection_name != gone.collection);
            }
        }
        set.ns_pvt_rwset
            .retain(|namespace| !namespace.collection_pvt_rwset.is_empty());
    }
    Ok(pruned
        .into_iter()
        .map(|(block, tx, set)| {
            let left = (!set.ns_pvt_rwset.is_empty()).then(|| set.encode_to_vec().into());
            (block, tx, left)
        })
        .collect())
}

fn encode_version(version: Height) -> Bytes {
    let mut bytes = Vec::with_capacity(16);
    bytes.extend_from_slice(&version.block_num.to_be_bytes());
    bytes.extend_from_slice(&version.tx_num.to_be_bytes());
    bytes.into()
}

fn decode_version(bytes: &[u8]) -> Option<Height> {
    let block = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    let tx = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
    Some(Height::new(block, tx))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use weft_statedb::VersionedState;
    use weft_statedb::memory::{MemoryOptions, MemoryState};

    use super::*;

    #[test]
    fn what_expires_is_purged_unless_written_again_and_the_rest_waits() {
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let hashed = hashed_namespace("cc", "c");
        let private = private_namespace("cc", "c");
        let written = Height::new(3, 1);
        let value = |text: &'static str| Bytes::from_static(text.as_bytes());
        let mut batch = UpdateBatch::new();
        batch.put(&hashed, "aa", value("hash"), written);
        batch.put(&private, "k", value("v"), written);
        batch.put(&private, "later", value("v"), written);
        // Replaced in block 5 by a write that lives longer.
        batch.put(&private, "rewritten", value("new"), Height::new(5, 0));
        for (expiring, entry) in [
            (7u64, "h/cc/c/aa"),
            (7, "p/cc/c/k"),
            (7, "p/cc/c/rewritten"),
            (7, "p/cc/c/again"),
            (8, "p/cc/c/later"),
        ] {
            let key = format!("{expiring:016x}/{entry}");
            batch.put(EXPIRY_NAMESPACE, &key, encode_version(written), written);
        }
        state.apply(&batch, Height::new(5, 0)).unwrap();

        // Block 7 writes `again` itself, and purges what expires with it.
        let mut batch = UpdateBatch::new();
        batch.put(&private, "again", value("fresh"), Height::new(7, 0));
        assert!(purge_expired(&mut batch, &state, 7).unwrap().is_empty());
        state.apply(&batch, Height::new(7, 0)).unwrap();

        assert!(state.get(&hashed, "aa").unwrap().is_none());
        assert!(state.get(&private, "k").unwrap().is_none());
        assert_eq!(
            state.get(&private, "rewritten").unwrap().unwrap().value,
            value("new")
        );
        assert_eq!(
            state.get(&private, "again").unwrap().unwrap().value,
            value("fresh")
        );
        assert!(state.get(&private, "later").unwrap().is_some());
        let left: Vec<String> = state
            .range(EXPIRY_NAMESPACE, "", "", 10)
            .unwrap()
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(left, [format!("{:016x}/p/cc/c/later", 8)]);
    }
}
