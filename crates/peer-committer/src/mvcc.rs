//! Stage 2: multi-version concurrency control, the only serial step.
//!
//! Transactions are taken in block order. A transaction that passed stage 1
//! stays valid when every key it read still has the version it read, in
//! the committed state and with no earlier valid transaction of the same
//! block having written it, and when every range it scanned would still
//! return the same keys and versions (no phantoms: compared read by read,
//! or, for long results, through Fabric's Merkle summary rebuilt with
//! [`weft_protos::range_summary`]). Its writes then join the
//! block's update batch at height (block, transaction index), and become
//! "earlier writes" for the transactions after it.
//!
//! Committed versions are fetched for the whole block with one bulk read
//! (Thakkar et al.) before the serial pass.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;

use prost::Message;
use weft_protos::kvrwset::range_query_info::ReadsInfo;
use weft_protos::kvrwset::{KvMetadataEntry, KvMetadataWrite, KvRead, RangeQueryInfo, Version};
use weft_protos::range_summary::{RangeReads, RangeSummarizer};
use weft_protos::view::{DecodedBlock, NamespaceRwSet, TxEnvelope};
use weft_statedb::{
    Height, StateReader, UpdateBatch, VersionedValue, hashed_namespace, key_metadata_namespace,
};

use crate::TxValidationCode;

/// The writes of the valid transactions seen so far in a block, by
/// (namespace, key): `Some(height)` for a put, `None` for a delete.
type BlockWrites = BTreeMap<(String, String), Option<Height>>;

/// Marks as `DuplicateTxid` every transaction, valid so far, whose TxID is
/// already committed (`is_committed`), is in `in_flight` (the TxIDs of
/// blocks ahead of this one in the pipeline), or was claimed earlier in
/// this block by a transaction also valid so far. The TxIDs of this block
/// are added to `in_flight`.
///
/// The two sides differ as Fabric's do: every TxID of an earlier block
/// counts, whatever its code, because the ledger indexes them all; within a
/// block only transactions that passed stage 1 claim their TxID (Fabric's
/// `markTXIdDuplicates`), so a corrupted copy placed before the original
/// cannot invalidate it.
pub fn mark_duplicate_tx_ids(
    block: &DecodedBlock,
    codes: &mut [TxValidationCode],
    is_committed: impl Fn(&str) -> bool,
    in_flight: &mut HashSet<String>,
) {
    let mut claimed = HashSet::new();
    for (transaction, code) in block.transactions.iter().zip(codes.iter_mut()) {
        let Ok(transaction) = transaction else {
            continue;
        };
        let tx_id = transaction.tx_id();
        if tx_id.is_empty() || *code != TxValidationCode::Valid {
            continue;
        }
        if in_flight.contains(tx_id) || is_committed(tx_id) || !claimed.insert(tx_id) {
            *code = TxValidationCode::DuplicateTxid;
        }
    }
    for transaction in block.transactions.iter().flatten() {
        let tx_id = transaction.tx_id();
        if !tx_id.is_empty() {
            in_flight.insert(tx_id.to_owned());
        }
    }
}

/// Runs MVCC over a block whose stage-1 codes are `codes`, updating them in
/// place, against committed `state`.
pub fn validate_block(
    block: &DecodedBlock,
    codes: &mut [TxValidationCode],
    state: &dyn StateReader,
) -> weft_statedb::Result<()> {
    let committed = bulk_read(block, codes, state)?;
    let block_num = block.header.number;
    let mut writes = BlockWrites::new();
    for (index, (transaction, code)) in block.transactions.iter().zip(codes.iter_mut()).enumerate()
    {
        if *code != TxValidationCode::Valid {
            continue;
        }
        let Ok(transaction) = transaction else {
            continue;
        };
        let outcome = check_reads(transaction, &committed, &writes, state)?;
        if outcome != TxValidationCode::Valid {
            *code = outcome;
            continue;
        }
        let height = Height::new(block_num, index as u64);
        for write in writes_of(transaction) {
            let put = write.value.is_some();
            writes.insert(
                (write.namespace.into_owned(), write.key.into_owned()),
                put.then_some(height),
            );
        }
        // Metadata written alone moves an existing key to this height
        // (namespaces without metadata writes are not looked at further).
        let with_metadata = transaction.namespaces().filter(|namespace| {
            !namespace.kv.metadata_writes.is_empty()
                || namespace
                    .collection_hashed
                    .iter()
                    .any(|collection| !collection.rwset.metadata_writes.is_empty())
        });
        for keyed in with_metadata.flat_map(keyed_writes) {
            for (key, _) in keyed.metadata_alone() {
                let key = (keyed.namespace.clone().into_owned(), key.into_owned());
                let exists = match writes.get(&key) {
                    Some(written) => written.is_some(),
                    None => state.get(&key.0, &key.1)?.is_some(),
                };
                if exists {
                    writes.insert(key, Some(height));
                }
            }
        }
    }
    Ok(())
}

/// The writes of one state namespace of a transaction that has metadata
/// written or keys deleted: a namespace's public keys, or one collection's
/// private keys by their hashes (in the collection's hashed namespace).
struct KeyedWrites<'a> {
    namespace: Cow<'a, str>,
    /// Each key whose value is written, and whether it is deleted (or
    /// purged).
    values: Vec<(Cow<'a, str>, bool)>,
    /// Each key whose metadata is written, with its new entries (none:
    /// the metadata is removed).
    metadata: Vec<(Cow<'a, str>, &'a [KvMetadataEntry])>,
}

impl<'a> KeyedWrites<'a> {
    /// The keys deleted.
    fn deleted(&self) -> impl Iterator<Item = &Cow<'a, str>> + '_ {
        self.values
            .iter()
            .filter(|(_, deleted)| *deleted)
            .map(|(key, _)| key)
    }

    /// The metadata writes of keys whose value is not written.
    fn metadata_alone(&self) -> impl Iterator<Item = (Cow<'a, str>, &'a [KvMetadataEntry])> + '_ {
        self.metadata
            .iter()
            .filter(|(key, _)| !self.values.iter().any(|(written, _)| written == key))
            .cloned()
    }
}

/// The state namespaces of `namespace`'s write set where metadata is
/// written or a key deleted; namespaces with neither are skipped without
/// building anything.
fn keyed_writes(namespace: &NamespaceRwSet) -> impl Iterator<Item = KeyedWrites<'_>> {
    let name = namespace.namespace.as_str();
    let kv = &namespace.kv;
    let public =
        (!kv.metadata_writes.is_empty() || kv.writes.iter().any(|w| w.is_delete)).then(|| {
            KeyedWrites {
                namespace: Cow::Borrowed(name),
                values: kv
                    .writes
                    .iter()
                    .map(|write| (Cow::Borrowed(write.key.as_str()), write.is_delete))
                    .collect(),
                metadata: kv
                    .metadata_writes
                    .iter()
                    .map(|write| (Cow::Borrowed(write.key.as_str()), write.entries.as_slice()))
                    .collect(),
            }
        });
    let hashed = namespace
        .collection_hashed
        .iter()
        .filter_map(move |collection| {
            let rwset = &collection.rwset;
            let deletes = rwset
                .hashed_writes
                .iter()
                .any(|w| w.is_delete || w.is_purge);
            if rwset.metadata_writes.is_empty() && !deletes {
                return None;
            }
            Some(KeyedWrites {
                namespace: Cow::Owned(hashed_namespace(name, &collection.collection)),
                values: rwset
                    .hashed_writes
                    .iter()
                    .map(|write| {
                        let key = Cow::Owned(hex::encode(&write.key_hash));
                        (key, write.is_delete || write.is_purge)
                    })
                    .collect(),
                metadata: rwset
                    .metadata_writes
                    .iter()
                    .map(|write| {
                        let key = Cow::Owned(hex::encode(&write.key_hash));
                        (key, write.entries.as_slice())
                    })
                    .collect(),
            })
        });
    public.into_iter().chain(hashed)
}

/// The update batch of a block: the writes of its valid transactions, in
/// block order, each at height (block, transaction index), with their key
/// metadata applied as Fabric applies it (`tx_ops.go`): a delete removes
/// the key's metadata too; a value written alone keeps the key's metadata;
/// metadata written alone keeps the key's value, now at the writer's
/// height; metadata of a key that does not exist is dropped. The metadata
/// of private keys is kept likewise, under their hashes, on every peer. `state` is
/// the state the block commits on, read only for keys with metadata
/// written or deleted. Used after MVCC, and to replay a committed block
/// from its stored validation codes.
pub fn update_batch(
    block: &DecodedBlock,
    codes: &[TxValidationCode],
    state: &dyn StateReader,
) -> weft_statedb::Result<UpdateBatch> {
    let mut batch = UpdateBatch::new();
    for (index, (transaction, code)) in block.transactions.iter().zip(codes).enumerate() {
        let Ok(transaction) = transaction else {
            continue;
        };
        if *code != TxValidationCode::Valid {
            continue;
        }
        let height = Height::new(block.header.number, index as u64);
        for write in writes_of(transaction) {
            match write.value {
                Some(value) => batch.put(&write.namespace, &write.key, value, height),
                None => batch.delete(&write.namespace, &write.key, height),
            }
        }
        for keyed in transaction.namespaces().flat_map(keyed_writes) {
            apply_key_metadata(&mut batch, &keyed, height, state)?;
        }
    }
    Ok(batch)
}

/// Adds to `batch` what one transaction's writes in a state namespace
/// (already in `batch`) do to its keys' metadata.
fn apply_key_metadata(
    batch: &mut UpdateBatch,
    keyed: &KeyedWrites<'_>,
    height: Height,
    state: &dyn StateReader,
) -> weft_statedb::Result<()> {
    let name = keyed.namespace.as_ref();
    let metadata_namespace = key_metadata_namespace(name);
    // A delete removes the key, metadata and all.
    for key in keyed.deleted() {
        if batch.latest(state, &metadata_namespace, key)?.is_some() {
            batch.delete(&metadata_namespace, key, height);
        }
    }
    for (key, entries) in &keyed.metadata {
        match keyed.values.iter().find(|(written, _)| written == key) {
            Some((_, true)) => continue,
            Some((_, false)) => {}
            None => {
                // Metadata alone: the value stays, at the new height.
                let Some(kept) = batch.latest(state, name, key)? else {
                    continue;
                };
                batch.put(name, key, kept.value, height);
            }
        }
        if entries.is_empty() {
            if batch.latest(state, &metadata_namespace, key)?.is_some() {
                batch.delete(&metadata_namespace, key, height);
            }
        } else {
            // Stored as Fabric stores it: the entries alone.
            let stored = KvMetadataWrite {
                key: String::new(),
                entries: entries.to_vec(),
            };
            batch.put(
                &metadata_namespace,
                key,
                stored.encode_to_vec().into(),
                height,
            );
        }
    }
    Ok(())
}

/// A key of the world state a transaction read: a public key, or the
/// hash of a private one.
struct StateRead<'a> {
    namespace: Cow<'a, str>,
    key: Cow<'a, str>,
    version: Option<&'a Version>,
}

/// A key of the world state a transaction writes; `value` `None` deletes.
struct StateWrite<'a> {
    namespace: Cow<'a, str>,
    key: Cow<'a, str>,
    value: Option<Bytes>,
}

/// The point reads of a transaction, public and hashed, in rwset order.
fn reads_of(transaction: &TxEnvelope) -> impl Iterator<Item = StateRead<'_>> {
    transaction.namespaces().flat_map(|namespace| {
        let public = namespace.kv.reads.iter().map(|read| StateRead {
            namespace: Cow::Borrowed(namespace.namespace.as_str()),
            key: Cow::Borrowed(read.key.as_str()),
            version: read.version.as_ref(),
        });
        let hashed = namespace.collection_hashed.iter().flat_map(|collection| {
            let state_namespace = hashed_namespace(&namespace.namespace, &collection.collection);
            collection
                .rwset
                .hashed_reads
                .iter()
                .map(move |read| StateRead {
                    namespace: Cow::Owned(state_namespace.clone()),
                    key: Cow::Owned(hex::encode(&read.key_hash)),
                    version: read.version.as_ref(),
                })
        });
        public.chain(hashed)
    })
}

/// The writes of a transaction, public and hashed, in rwset order. A purge
/// of private data deletes its hash.
fn writes_of(transaction: &TxEnvelope) -> impl Iterator<Item = StateWrite<'_>> {
    transaction.namespaces().flat_map(|namespace| {
        let public = namespace.kv.writes.iter().map(|write| StateWrite {
            namespace: Cow::Borrowed(namespace.namespace.as_str()),
            key: Cow::Borrowed(write.key.as_str()),
            value: (!write.is_delete).then(|| write.value.clone()),
        });
        let hashed = namespace.collection_hashed.iter().flat_map(|collection| {
            let state_namespace = hashed_namespace(&namespace.namespace, &collection.collection);
            collection
                .rwset
                .hashed_writes
                .iter()
                .map(move |write| StateWrite {
                    namespace: Cow::Owned(state_namespace.clone()),
                    key: Cow::Owned(hex::encode(&write.key_hash)),
                    value: (!write.is_delete && !write.is_purge).then(|| write.value_hash.clone()),
                })
        });
        public.chain(hashed)
    })
}

/// Committed values of every key read by a transaction still valid, in one
/// bulk read.
fn bulk_read(
    block: &DecodedBlock,
    codes: &[TxValidationCode],
    state: &dyn StateReader,
) -> weft_statedb::Result<HashMap<(String, String), Option<VersionedValue>>> {
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    for (transaction, code) in block.transactions.iter().zip(codes) {
        if *code != TxValidationCode::Valid {
            continue;
        }
        let Ok(transaction) = transaction else {
            continue;
        };
        for read in reads_of(transaction) {
            let key = (read.namespace.into_owned(), read.key.into_owned());
            if !seen.contains(&key) {
                seen.insert(key.clone());
                keys.push(key);
            }
        }
    }
    let borrowed: Vec<(&str, &str)> = keys
        .iter()
        .map(|(namespace, key)| (namespace.as_str(), key.as_str()))
        .collect();
    let values = state.get_many(&borrowed)?;
    Ok(keys.into_iter().zip(values).collect())
}

fn check_reads(
    transaction: &TxEnvelope,
    committed: &HashMap<(String, String), Option<VersionedValue>>,
    writes: &BlockWrites,
    state: &dyn StateReader,
) -> weft_statedb::Result<TxValidationCode> {
    for read in reads_of(transaction) {
        let key = (read.namespace.into_owned(), read.key.into_owned());
        let current = committed.get(&key).and_then(Option::as_ref);
        if writes.contains_key(&key) || !same_version(read.version, current) {
            return Ok(TxValidationCode::MvccReadConflict);
        }
    }
    for namespace in transaction.namespaces() {
        for range in &namespace.kv.range_queries_info {
            if !range_unchanged(&namespace.namespace, range, writes, state)? {
                return Ok(TxValidationCode::PhantomReadConflict);
            }
        }
    }
    Ok(TxValidationCode::Valid)
}

fn same_version(read: Option<&Version>, current: Option<&VersionedValue>) -> bool {
    match (read, current) {
        (None, None) => true,
        (Some(read), Some(current)) => Height::new(read.block_num, read.tx_num) == current.version,
        _ => false,
    }
}

/// Whether re-running a range query over committed state plus the block's
/// earlier writes yields what the endorser recorded, as Fabric checks it.
/// When the chaincode stopped before the end of the range
/// (`itr_exhausted` false), the recorded `end_key` is the last key it saw
/// and the range includes it. Raw reads must match key for key and version
/// for version, with nothing more in the range; a Merkle summary must
/// equal the one rebuilt over the keys the range holds now.
fn range_unchanged(
    namespace: &str,
    range: &RangeQueryInfo,
    writes: &BlockWrites,
    state: &dyn StateReader,
) -> weft_statedb::Result<bool> {
    let end = if range.itr_exhausted || range.end_key.is_empty() {
        range.end_key.clone()
    } else {
        // The smallest key after `end_key`: the range's end becomes
        // inclusive.
        format!("{}\0", range.end_key)
    };
    let current = |limit| current_range(namespace, &range.start_key, &end, limit, writes, state);
    match &range.reads_info {
        Some(ReadsInfo::ReadsMerkleHashes(recorded)) => {
            let Some(mut summarizer) = RangeSummarizer::new(recorded.max_degree) else {
                return Ok(false);
            };
            for (key, height) in current(usize::MAX)? {
                summarizer.add(KvRead {
                    key,
                    version: Some(Version {
                        block_num: height.block_num,
                        tx_num: height.tx_num,
                    }),
                });
            }
            Ok(summarizer.finish() == RangeReads::Summary(recorded.clone()))
        }
        Some(ReadsInfo::RawReads(reads)) => {
            let recorded: Vec<(&str, Height)> = reads
                .kv_reads
                .iter()
                .map(|read| {
                    let version = read
                        .version
                        .as_ref()
                        .map_or(Height::default(), |v| Height::new(v.block_num, v.tx_num));
                    (read.key.as_str(), version)
                })
                .collect();
            let actual = current(recorded.len() + 1)?;
            Ok(actual.len() == recorded.len()
                && actual.iter().zip(&recorded).all(
                    |((key, height), (recorded_key, recorded_height))| {
                        key == recorded_key && height == recorded_height
                    },
                ))
        }
        None => Ok(current(1)?.is_empty()),
    }
}

/// The first `limit` keys of `namespace` in `[start, end)` (an empty `end`:
/// no bound) with their versions, as committed state plus the block's
/// earlier writes show them.
fn current_range(
    namespace: &str,
    start: &str,
    end: &str,
    limit: usize,
    writes: &BlockWrites,
    state: &dyn StateReader,
) -> weft_statedb::Result<Vec<(String, Height)>> {
    let in_range = |key: &str| key >= start && (end.is_empty() || key < end);
    let local: Vec<(&str, Option<Height>)> = writes
        .range((namespace.to_owned(), start.to_owned())..)
        .take_while(|((ns, key), _)| ns == namespace && in_range(key))
        .map(|((_, key), height)| (key.as_str(), *height))
        .collect();
    // Deletes may hide committed keys: fetch enough to fill `limit` anyway.
    let deletes = local.iter().filter(|(_, height)| height.is_none()).count();
    let committed = state.range(namespace, start, end, limit.saturating_add(deletes))?;
    let mut merged: BTreeMap<String, Height> = committed
        .into_iter()
        .map(|(key, value)| (key, value.version))
        .collect();
    for (key, height) in local {
        match height {
            Some(height) => merged.insert(key.to_owned(), height),
            None => merged.remove(key),
        };
    }
    Ok(merged.into_iter().take(limit).collect())
}

#[cfg(test)]
mod tests {
    //! MVCC is a pure function of the read/write sets and the committed
    //! state, so these tests build read/write sets directly (stage 2 looks at
    //! nothing else) and commit to a real in-memory state engine.

    use bytes::Bytes;
    use weft_protos::common::{BlockHeader, ChannelHeader, SignatureHeader};
    use weft_protos::kvrwset::{
        HashedRwSet, KvRead, KvReadHash, KvWrite, KvWriteHash, KvrwSet, QueryReads, RangeQueryInfo,
        Version,
    };
    use weft_protos::view::{
        CollectionHashes, DecodedBlock, EndorsedAction, EndorserTransaction, NamespaceRwSet,
        TxBody, TxEnvelope,
    };
    use weft_statedb::memory::{MemoryOptions, MemoryState};
    use weft_statedb::{Height, StateReader, UpdateBatch, VersionedState};

    use weft_protos::range_summary::{MAX_DEGREE_DEFAULT, RangeReads, RangeSummarizer};

    use super::{update_batch, validate_block};
    use crate::TxValidationCode::{self, MvccReadConflict, PhantomReadConflict, Valid};

    const NS: &str = "cc";

    fn read(key: &str, version: Option<(u64, u64)>) -> KvRead {
        KvRead {
            key: key.to_owned(),
            version: version.map(|(block_num, tx_num)| Version { block_num, tx_num }),
        }
    }

    fn put(key: &str, value: &str) -> KvWrite {
        KvWrite {
            key: key.to_owned(),
            is_delete: false,
            value: Bytes::copy_from_slice(value.as_bytes()),
        }
    }

    fn delete(key: &str) -> KvWrite {
        KvWrite {
            key: key.to_owned(),
            is_delete: true,
            value: Bytes::new(),
        }
    }

    fn range(
        start: &str,
        end: &str,
        exhausted: bool,
        results: &[(&str, (u64, u64))],
    ) -> RangeQueryInfo {
        RangeQueryInfo {
            start_key: start.to_owned(),
            end_key: end.to_owned(),
            itr_exhausted: exhausted,
            reads_info: Some(ReadsInfo::RawReads(QueryReads {
                kv_reads: results
                    .iter()
                    .map(|(key, version)| read(key, Some(*version)))
                    .collect(),
            })),
        }
    }

    use weft_protos::kvrwset::range_query_info::ReadsInfo;

    fn tx(kv: KvrwSet) -> Result<TxEnvelope, weft_protos::DecodeError> {
        tx_with_hashes(kv, Vec::new())
    }

    fn tx_with_hashes(
        kv: KvrwSet,
        collection_hashed: Vec<CollectionHashes>,
    ) -> Result<TxEnvelope, weft_protos::DecodeError> {
        let action = EndorsedAction {
            signature_header: SignatureHeader::default(),
            signature_header_bytes: Bytes::new(),
            chaincode_proposal_payload: Bytes::new(),
            proposal_response_payload_bytes: Bytes::new(),
            proposal_hash: Bytes::new(),
            endorsements: Vec::new(),
            chaincode_action: Default::default(),
            namespaces: vec![NamespaceRwSet {
                namespace: NS.to_owned(),
                kv,
                collection_hashed,
            }],
            event: None,
        };
        Ok(TxEnvelope {
            raw: Bytes::new(),
            payload_bytes: Bytes::new(),
            signature: Bytes::new(),
            channel_header_bytes: Bytes::new(),
            signature_header_bytes: Bytes::new(),
            channel_header: ChannelHeader::default(),
            signature_header: SignatureHeader::default(),
            body: TxBody::Endorser(EndorserTransaction {
                chaincode_id: None,
                actions: vec![action],
            }),
        })
    }

    fn rwset(reads: Vec<KvRead>, ranges: Vec<RangeQueryInfo>, writes: Vec<KvWrite>) -> KvrwSet {
        KvrwSet {
            reads,
            range_queries_info: ranges,
            writes,
            metadata_writes: Vec::new(),
        }
    }

    fn block(number: u64, transactions: Vec<KvrwSet>) -> DecodedBlock {
        DecodedBlock {
            header: BlockHeader {
                number,
                ..BlockHeader::default()
            },
            metadata: Default::default(),
            raw_envelopes: vec![Bytes::from_static(b"x"); transactions.len()],
            transactions: transactions.into_iter().map(tx).collect(),
        }
    }

    /// A state holding `a`@(1,0), `b`@(1,1), `c`@(2,0) and `e`@(2,1).
    fn state() -> (tempfile::TempDir, MemoryState) {
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let mut first = UpdateBatch::new();
        first.put(NS, "a", Bytes::from_static(b"1"), Height::new(1, 0));
        first.put(NS, "b", Bytes::from_static(b"1"), Height::new(1, 1));
        state.apply(&first, Height::new(1, 1)).unwrap();
        let mut second = UpdateBatch::new();
        second.put(NS, "c", Bytes::from_static(b"1"), Height::new(2, 0));
        second.put(NS, "e", Bytes::from_static(b"1"), Height::new(2, 1));
        state.apply(&second, Height::new(2, 1)).unwrap();
        (dir, state)
    }

    fn run(block: &DecodedBlock, state: &dyn StateReader) -> Vec<TxValidationCode> {
        let mut codes = vec![Valid; block.transactions.len()];
        validate_block(block, &mut codes, state).unwrap();
        codes
    }

    #[test]
    fn reads_must_see_the_committed_version() {
        let (_dir, state) = state();
        let block = block(
            3,
            vec![
                rwset(vec![read("a", Some((1, 0)))], vec![], vec![put("a", "2")]),
                rwset(vec![read("b", Some((1, 0)))], vec![], vec![]),
                rwset(vec![read("zz", None)], vec![], vec![put("zz", "new")]),
                rwset(vec![read("c", None)], vec![], vec![]),
            ],
        );
        assert_eq!(
            run(&block, &state),
            [Valid, MvccReadConflict, Valid, MvccReadConflict]
        );
    }

    #[test]
    fn earlier_valid_writes_in_the_block_conflict_with_later_reads() {
        let (_dir, state) = state();
        let block = block(
            3,
            vec![
                rwset(vec![read("a", Some((1, 0)))], vec![], vec![put("a", "2")]),
                rwset(vec![read("a", Some((1, 0)))], vec![], vec![put("a", "3")]),
                // An invalid transaction's writes do not count.
                rwset(vec![read("b", Some((9, 9)))], vec![], vec![delete("c")]),
                rwset(vec![read("c", Some((2, 0)))], vec![], vec![]),
            ],
        );
        let codes = run(&block, &state);
        assert_eq!(codes, [Valid, MvccReadConflict, MvccReadConflict, Valid]);
        let batch = update_batch(&block, &codes, &state).unwrap();
        let writes: Vec<_> = batch
            .iter()
            .map(|(ns, key, write)| (ns, key, write.version))
            .collect();
        assert_eq!(writes, [(NS, "a", Height::new(3, 0))]);
    }

    #[test]
    fn range_queries_detect_phantoms() {
        let (_dir, state) = state();
        let full = [("a", (1, 0)), ("b", (1, 1)), ("c", (2, 0))];
        let block = block(
            3,
            vec![
                // Unchanged range: valid.
                rwset(vec![], vec![range("a", "d", true, &full)], vec![]),
                // A key the endorser did not see: phantom.
                rwset(vec![], vec![range("a", "d", true, &full[..2])], vec![]),
                // The chaincode stopped after "b": the recorded end key is
                // the last key it saw, and the range includes it.
                rwset(
                    vec![],
                    vec![range("a", "b", false, &full[..2])],
                    vec![put("bb", "new")],
                ),
                // An earlier valid transaction inserted "bb" into the range.
                rwset(vec![], vec![range("a", "d", true, &full)], vec![]),
                // Open-ended range over everything.
                rwset(
                    vec![],
                    vec![range(
                        "",
                        "",
                        true,
                        &[("a", (1, 0)), ("b", (1, 1)), ("c", (2, 0)), ("e", (2, 1))],
                    )],
                    vec![],
                ),
            ],
        );
        let codes = run(&block, &state);
        assert_eq!(
            codes,
            [
                Valid,
                PhantomReadConflict,
                Valid,
                PhantomReadConflict,
                PhantomReadConflict
            ]
        );
    }

    #[test]
    fn deletes_by_earlier_transactions_are_phantoms_too() {
        let (_dir, state) = state();
        let full = [("a", (1, 0)), ("b", (1, 1)), ("c", (2, 0))];
        let block = block(
            3,
            vec![
                rwset(vec![], vec![], vec![delete("b")]),
                rwset(vec![], vec![range("a", "d", true, &full)], vec![]),
                rwset(
                    vec![],
                    vec![range("a", "d", true, &[("a", (1, 0)), ("c", (2, 0))])],
                    vec![],
                ),
            ],
        );
        assert_eq!(run(&block, &state), [Valid, PhantomReadConflict, Valid]);
    }

    /// A state holding `k000`..`k119`, all at version (1, n).
    fn long_state() -> (tempfile::TempDir, MemoryState) {
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let mut batch = UpdateBatch::new();
        for n in 0..120 {
            batch.put(
                NS,
                &format!("k{n:03}"),
                Bytes::from_static(b"1"),
                Height::new(1, n),
            );
        }
        state.apply(&batch, Height::new(1, 119)).unwrap();
        (dir, state)
    }

    /// The range query info an endorser records for `results` over
    /// `[start, end)`, summarised as Fabric's endorsers do.
    fn summarised(start: &str, end: &str, results: &[(String, (u64, u64))]) -> RangeQueryInfo {
        let mut summarizer = RangeSummarizer::new(MAX_DEGREE_DEFAULT).unwrap();
        for (key, version) in results {
            summarizer.add(read(key, Some(*version)));
        }
        let RangeReads::Summary(summary) = summarizer.finish() else {
            panic!("{} results are too few to summarise", results.len());
        };
        RangeQueryInfo {
            start_key: start.to_owned(),
            end_key: end.to_owned(),
            itr_exhausted: true,
            reads_info: Some(ReadsInfo::ReadsMerkleHashes(summary)),
        }
    }

    #[test]
    fn merkle_summarised_ranges_are_rebuilt_and_compared() {
        let (_dir, state) = long_state();
        let all: Vec<(String, (u64, u64))> =
            (0..120).map(|n| (format!("k{n:03}"), (1, n))).collect();
        let mut missing_one = all.clone();
        missing_one.remove(70);
        let mut stale = all.clone();
        stale[3].1 = (0, 9);
        let block = block(
            2,
            vec![
                // What the range holds: valid.
                rwset(vec![], vec![summarised("k", "l", &all)], vec![]),
                // The endorser saw one key fewer, or an older version.
                rwset(vec![], vec![summarised("k", "l", &missing_one)], vec![]),
                rwset(vec![], vec![summarised("k", "l", &stale)], vec![]),
                // A sub-range: keys outside it do not matter.
                rwset(
                    vec![],
                    vec![summarised("k010", "k090", &all[10..90])],
                    vec![],
                ),
                // An earlier valid transaction changes k100; the full range
                // now differs, the sub-range does not.
                rwset(vec![], vec![], vec![put("k100", "2")]),
                rwset(vec![], vec![summarised("k", "l", &all)], vec![]),
                rwset(
                    vec![],
                    vec![summarised("k010", "k090", &all[10..90])],
                    vec![],
                ),
            ],
        );
        assert_eq!(
            run(&block, &state),
            [
                Valid,
                PhantomReadConflict,
                PhantomReadConflict,
                Valid,
                Valid,
                PhantomReadConflict,
                Valid
            ]
        );
    }

    #[test]
    fn a_summary_over_a_range_that_shrank_below_the_degree_is_a_phantom() {
        let (_dir, state) = long_state();
        let all: Vec<(String, (u64, u64))> =
            (0..120).map(|n| (format!("k{n:03}"), (1, n))).collect();
        let deletes = (0..100).map(|n| delete(&format!("k{n:03}"))).collect();
        let block = block(
            2,
            vec![
                rwset(vec![], vec![], deletes),
                rwset(vec![], vec![summarised("k", "l", &all)], vec![]),
            ],
        );
        assert_eq!(run(&block, &state), [Valid, PhantomReadConflict]);
    }

    /// A transaction touching only the hash of private key `key` of
    /// collection `secrets`: reading it at `read` (if given) and writing
    /// (`Some(true)`), purging (`Some(false)`) or leaving it.
    fn private(
        key: &str,
        read: Option<Option<(u64, u64)>>,
        write: Option<bool>,
    ) -> Result<TxEnvelope, weft_protos::DecodeError> {
        let key_hash = Bytes::copy_from_slice(&weft_protos::hash::sha256(key.as_bytes()));
        let mut hashes = HashedRwSet::default();
        if let Some(version) = read {
            hashes.hashed_reads.push(KvReadHash {
                key_hash: key_hash.clone(),
                version: version.map(|(block_num, tx_num)| Version { block_num, tx_num }),
            });
        }
        if let Some(put) = write {
            hashes.hashed_writes.push(KvWriteHash {
                key_hash,
                is_delete: !put,
                value_hash: if put {
                    Bytes::from_static(b"value hash")
                } else {
                    Bytes::new()
                },
                is_purge: !put,
            });
        }
        let collection = CollectionHashes {
            collection: "secrets".to_owned(),
            rwset: hashes,
            pvt_rwset_hash: Bytes::new(),
        };
        tx_with_hashes(rwset(vec![], vec![], vec![]), vec![collection])
    }

    #[test]
    fn private_data_hashes_are_versioned_like_public_keys() {
        let (_dir, state) = state();
        let mut codes = vec![Valid; 3];
        let first = DecodedBlock {
            header: BlockHeader {
                number: 3,
                ..BlockHeader::default()
            },
            metadata: Default::default(),
            raw_envelopes: vec![Bytes::from_static(b"x"); 3],
            transactions: vec![
                private("k", Some(None), Some(true)),
                // Read as absent, but written just before in this block.
                private("k", Some(None), None),
                private("other", None, Some(true)),
            ],
        };
        validate_block(&first, &mut codes, &state).unwrap();
        assert_eq!(codes, [Valid, MvccReadConflict, Valid]);
        state
            .apply(
                &update_batch(&first, &codes, &state).unwrap(),
                Height::new(3, 2),
            )
            .unwrap();
        let hashed_key = hex::encode(weft_protos::hash::sha256(b"k"));
        let stored = state.get("cc$$hsecrets", &hashed_key).unwrap().unwrap();
        assert_eq!(stored.version, Height::new(3, 0));
        assert_eq!(&stored.value[..], b"value hash");

        let second = DecodedBlock {
            header: BlockHeader {
                number: 4,
                ..BlockHeader::default()
            },
            metadata: Default::default(),
            raw_envelopes: vec![Bytes::from_static(b"x"); 4],
            transactions: vec![
                private("k", Some(Some((3, 0))), None),
                private("k", Some(None), None),
                // A purge deletes the hash; a later read of it conflicts.
                private("k", Some(Some((3, 0))), Some(false)),
                private("k", Some(Some((3, 0))), None),
            ],
        };
        let mut codes = vec![Valid; 4];
        validate_block(&second, &mut codes, &state).unwrap();
        assert_eq!(codes, [Valid, MvccReadConflict, Valid, MvccReadConflict]);
        state
            .apply(
                &update_batch(&second, &codes, &state).unwrap(),
                Height::new(4, 3),
            )
            .unwrap();
        assert!(state.get("cc$$hsecrets", &hashed_key).unwrap().is_none());
    }
}
