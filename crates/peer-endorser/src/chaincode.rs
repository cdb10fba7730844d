//! The native chaincode interface: what a chaincode sees of a proposal and
//! of the world state while it is simulated.
//!
//! A [`Chaincode`] gets a [`Stub`] per proposal. Reads come from one
//! snapshot of the world state taken when simulation starts, so a
//! simulation neither waits for nor holds up commits (the whole-database
//! lock Thakkar et al. found in Fabric does not exist here). Every read,
//! range scan and write is recorded as Fabric records it, into the
//! read/write set the endorsement signs. As in Fabric, a chaincode does not
//! read its own writes: `get_state` after `put_state` still returns the
//! committed value.
//!
//! **Keys.** The stub serves keys as Fabric's peer does: simple keys and
//! composite keys (`U+0000 objectType U+0000 attr U+0000 …`, built by the
//! shims) alike. What tells them apart is the shims' work: they refuse a
//! composite key where a simple one is meant, start a simple-key range at
//! U+0001 (past every composite key) when asked for the whole namespace,
//! and query a partial composite key as the range from it to it followed by
//! U+10FFFF. The stub only refuses the empty key for writes.
//!
//! **Pages.** A range query may ask for one page (Fabric's
//! `QueryMetadata`): at most `size` results from the bookmark on, and the
//! bookmark of the next page. As in Fabric, pages are for read-only
//! transactions: a paged query after a write, or a write after a paged
//! query, is refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use weft_ledger::BlockStore;
use weft_policy::SignaturePolicy;
use weft_policy::collection::Collections;
use weft_protos::kvrwset::RangeQueryInfo;
use weft_protos::kvrwset::range_query_info::ReadsInfo;
use weft_protos::kvrwset::{KvMetadataWrite, KvRead, QueryReads, Version};
use weft_protos::protos::{ChaincodeEvent, Response};
use weft_protos::queryresult::KeyModification;
use weft_protos::range_summary::{MAX_DEGREE_DEFAULT, RangeReads, RangeSummarizer};
use weft_protos::tx::{ReadWriteSetBuilder, ReceivedProposal};
use weft_statedb::{StateReader, key_metadata_namespace};

use crate::mango::Query;

mod private;

pub(crate) use private::key_hash;

/// A document found by a JSON query: its key, stored value and JSON.
type Document = (String, weft_statedb::VersionedValue, serde_json::Value);

/// The most results one range query may return, as Fabric's
/// `totalQueryLimit`.
pub const RANGE_RESULTS_MAX: usize = 100_000;
/// Keys read from the state at a time by a JSON query's scan.
const SCAN_CHUNK: usize = 1_000;

/// A chaincode compiled into the peer.
pub trait Chaincode: Send + Sync {
    /// Runs one invocation. A response status of 400 or more is an error:
    /// the proposal is not endorsed.
    fn invoke(&self, stub: &mut Stub<'_>) -> Response;

    /// Whether `invoke` blocks its thread waiting on a process outside the
    /// peer (an external chaincode server), so must run where blocking is
    /// allowed (see [`Endorser::answer`](crate::Endorser::answer)).
    fn runs_remotely(&self) -> bool {
        false
    }
}

/// A successful response carrying `payload`.
pub fn success(payload: impl Into<Bytes>) -> Response {
    Response {
        status: 200,
        message: String::new(),
        payload: payload.into(),
    }
}

/// An error response with `message` (status 500, as Fabric's shim).
pub fn error(message: impl Into<String>) -> Response {
    Response {
        status: 500,
        message: message.into(),
        payload: Bytes::new(),
    }
}

/// A state access the chaincode asked for could not be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The key is not one Fabric allows.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    /// A paged query in a transaction that has written (Fabric's words).
    #[error(
        "txid [{tx_id}]: unsupported transaction. Paginated queries are supported only in a read-only transaction"
    )]
    PagedQueryAfterWrite { tx_id: String },
    /// A write in a transaction that has run a paged query (Fabric's
    /// words).
    #[error(
        "txid [{tx_id}]: unsupported transaction. Transaction has already performed a paginated query. Writes are not allowed"
    )]
    WriteAfterPagedQuery { tx_id: String },
    /// A range query returned more than [`RANGE_RESULTS_MAX`] results.
    #[error("the range query returned more than {RANGE_RESULTS_MAX} results")]
    TooManyResults,
    /// The state database failed.
    #[error("reading the world state failed: {0}")]
    Storage(String),
    /// A JSON query that is not one, or a bookmark weft did not give.
    #[error("{0}")]
    Query(String),
    /// A chaincode-to-chaincode call that cannot be made.
    #[error("calling chaincode {chaincode}: {reason}")]
    Call { chaincode: String, reason: String },
    /// A history query on a peer that keeps no history (Fabric's words).
    #[error("history database is not enabled")]
    NoHistory,
    /// Reading a key's history from the block store failed.
    #[error("reading the key's history failed: {0}")]
    History(String),
    /// A private data call Fabric refuses, in Fabric's words.
    #[error("{0}")]
    Private(String),
}

/// One page of a range query, as Fabric's `QueryMetadata` asks for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// The most results in the page; 0 for no limit but
    /// [`RANGE_RESULTS_MAX`].
    pub size: u32,
    /// Where the page starts: a bookmark from the previous page, or empty
    /// for the query's start key.
    pub bookmark: String,
}

/// One page of range results.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangePage {
    /// The keys and values, in key order.
    pub results: Vec<(String, Bytes)>,
    /// The key the next page starts at; empty when the range is drained.
    pub bookmark: String,
}

/// What a system chaincode (`_lifecycle`) needs to know of its channel
/// beyond the world state.
pub trait ChannelView {
    /// The MSP IDs of the channel's application organisations.
    fn organisations(&self) -> Vec<String>;

    /// Whether `creator` (a serialized identity) is a valid admin of the
    /// organisation `msp_id`.
    fn is_admin(&self, creator: &Bytes, msp_id: &str) -> bool;

    /// Whether `creator` (a serialized identity) is a valid identity of
    /// the channel that satisfies `policy`: a private data collection's
    /// membership.
    fn creator_satisfies(&self, creator: &Bytes, policy: &SignaturePolicy) -> bool;
}

/// What a chaincode sees of one proposal and of the world state.
pub struct Stub<'a> {
    proposal: &'a ReceivedProposal,
    namespace: &'a str,
    state: &'a dyn StateReader,
    channel: Option<&'a dyn ChannelView>,
    /// The channel's blocks, for key history.
    blocks: Option<&'a BlockStore>,
    rwset: ReadWriteSetBuilder,
    event: Option<ChaincodeEvent>,
    /// Whether the transaction has written (Fabric's `writePerformed`).
    written: bool,
    /// Whether it has run a paged query.
    paged: bool,
    /// The chaincodes a chaincode may call in the same transaction.
    callees: Option<&'a dyn Callees>,
    /// The arguments of a chaincode called by another; `None`: the
    /// proposal's.
    call_args: Option<Vec<Bytes>>,
    /// How deep in chaincode-to-chaincode calls this stub is (0: the
    /// chaincode the proposal invoked).
    depth: usize,
    /// Whether this invocation runs where it may block its thread (see
    /// [`Chaincode::runs_remotely`]), so may call an external chaincode.
    may_block: bool,
    /// The private data collections of the chaincodes read so far, by
    /// chaincode.
    collections: BTreeMap<String, Arc<Collections>>,
}

/// The chaincodes of a channel, as one chaincode calls another
/// (`InvokeChaincode`).
pub trait Callees {
    /// The chaincode installed as `name`, if any.
    fn callee(&self, name: &str) -> Option<Arc<dyn Chaincode>>;
}

/// A fixed set of chaincodes, by name.
impl Callees for std::collections::HashMap<String, Arc<dyn Chaincode>> {
    fn callee(&self, name: &str) -> Option<Arc<dyn Chaincode>> {
        self.get(name).cloned()
    }
}

/// The deepest chain of chaincode-to-chaincode calls served.
pub const CALL_DEPTH_MAX: usize = 8;

impl std::fmt::Debug for Stub<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stub")
            .field("tx_id", &self.tx_id())
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl<'a> Stub<'a> {
    /// A stub for `proposal`, invoking the chaincode `namespace`, reading
    /// `state`.
    pub fn new(
        proposal: &'a ReceivedProposal,
        namespace: &'a str,
        state: &'a dyn StateReader,
    ) -> Self {
        Self {
            proposal,
            namespace,
            state,
            channel: None,
            blocks: None,
            rwset: ReadWriteSetBuilder::new(),
            event: None,
            written: false,
            paged: false,
            callees: None,
            call_args: None,
            depth: 0,
            may_block: false,
            collections: BTreeMap::new(),
        }
    }

    /// This stub with the chaincodes its chaincode may call; `may_block`
    /// says whether the invocation runs where it may wait on an external
    /// chaincode.
    pub fn with_callees(mut self, callees: &'a dyn Callees, may_block: bool) -> Self {
        self.callees = Some(callees);
        self.may_block = may_block;
        self
    }

    /// This stub with what system chaincodes see of the channel.
    pub fn with_channel(mut self, channel: &'a dyn ChannelView) -> Self {
        self.channel = Some(channel);
        self
    }

    /// This stub with the channel's blocks, where key history comes from.
    pub fn with_blocks(mut self, blocks: &'a BlockStore) -> Self {
        self.blocks = Some(blocks);
        self
    }

    /// The channel, for system chaincodes; `None` when not given.
    pub fn channel(&self) -> Option<&'a dyn ChannelView> {
        self.channel
    }

    /// The proposal being simulated.
    pub fn proposal(&self) -> &ReceivedProposal {
        self.proposal
    }

    /// The chaincode invoked: the namespace its state lives in.
    pub fn namespace(&self) -> &str {
        self.namespace
    }

    /// The invocation's arguments, function name first: the proposal's,
    /// or those of the call when another chaincode called this one.
    pub fn args(&self) -> &[Bytes] {
        self.call_args.as_deref().unwrap_or(&self.proposal.args)
    }

    /// Whether this invocation is a proposal's `Init` (never a call from
    /// another chaincode).
    pub fn is_init(&self) -> bool {
        self.proposal.is_init && self.depth == 0
    }

    /// Records the read of this chaincode's definition sequence, when it
    /// is defined through `_lifecycle`: as in Fabric, a transaction
    /// simulated before a redefinition committed in the same block then
    /// fails MVCC rather than run under the old definition.
    pub fn read_definition(&mut self) -> Result<(), StateError> {
        if self.namespace == crate::lifecycle::LIFECYCLE {
            return Ok(());
        }
        let sequence = format!("namespaces/fields/{}/Sequence", self.namespace);
        let defined = self
            .state
            .get(crate::lifecycle::LIFECYCLE, &sequence)
            .map_err(|e| StateError::Storage(e.to_string()))?
            .is_some();
        if defined {
            self.get_state_of(crate::lifecycle::LIFECYCLE, &sequence)?;
        }
        Ok(())
    }

    /// Runs chaincode `target` (`name`, or Fabric's `name:version/channel`
    /// with this channel) with `args` inside this transaction, as Fabric's
    /// `InvokeChaincode`: its reads and writes go into this transaction's
    /// read/write set under its own namespace (so its endorsement policy
    /// applies at commit), its chaincode event is dropped, and its
    /// response is returned whatever its status. A call to another
    /// channel, to a chaincode not installed, or deeper than
    /// [`CALL_DEPTH_MAX`] is refused.
    pub fn invoke_chaincode(
        &mut self,
        target: &str,
        args: Vec<Bytes>,
    ) -> Result<Response, StateError> {
        let (name, channel) = match target.split_once('/') {
            Some((name, channel)) => (name, channel),
            None => (target, ""),
        };
        let name = name.split_once(':').map_or(name, |(name, _version)| name);
        let refused = |reason: String| StateError::Call {
            chaincode: name.to_owned(),
            reason,
        };
        if !channel.is_empty() && channel != self.channel_id() {
            return Err(refused(format!(
                "calls to another channel ({channel}) are not supported by weft"
            )));
        }
        if self.depth >= CALL_DEPTH_MAX {
            return Err(refused(format!(
                "more than {CALL_DEPTH_MAX} nested chaincode calls"
            )));
        }
        let callee = self
            .callees
            .and_then(|callees| callees.callee(name))
            .ok_or_else(|| refused("no such chaincode is installed on this peer".to_owned()))?;
        if callee.runs_remotely() && !self.may_block {
            return Err(refused(
                "a built-in chaincode cannot call an external one".to_owned(),
            ));
        }
        let mut called = Stub {
            proposal: self.proposal,
            namespace: name,
            state: self.state,
            channel: self.channel,
            blocks: self.blocks,
            rwset: std::mem::replace(&mut self.rwset, ReadWriteSetBuilder::new()),
            event: None,
            written: self.written,
            paged: self.paged,
            callees: self.callees,
            call_args: Some(args),
            depth: self.depth + 1,
            may_block: self.may_block,
            collections: std::mem::take(&mut self.collections),
        };
        let response = called
            .read_definition()
            .map(|()| callee.invoke(&mut called));
        self.rwset = called.rwset;
        self.written = called.written;
        self.paged = called.paged;
        self.collections = called.collections;
        response
    }

    /// The function name: the first argument, as text.
    pub fn function(&self) -> &str {
        self.args()
            .first()
            .and_then(|name| std::str::from_utf8(name).ok())
            .unwrap_or_default()
    }

    /// The arguments after the function name.
    pub fn parameters(&self) -> &[Bytes] {
        self.args().get(1..).unwrap_or_default()
    }

    pub fn tx_id(&self) -> &str {
        &self.proposal.channel_header.tx_id
    }

    pub fn channel_id(&self) -> &str {
        &self.proposal.channel_header.channel_id
    }

    /// The proposer's serialized identity.
    pub fn creator(&self) -> &Bytes {
        &self.proposal.signature_header.creator
    }

    /// Data passed to the chaincode that is not recorded on the ledger.
    pub fn transient(&self) -> &BTreeMap<String, Bytes> {
        &self.proposal.transient
    }

    /// The committed value of `key`, recorded as read at its version.
    pub fn get_state(&mut self, key: &str) -> Result<Option<Bytes>, StateError> {
        let current = self
            .state
            .get(self.namespace, key)
            .map_err(|e| StateError::Storage(e.to_string()))?;
        let version = current
            .as_ref()
            .map(|value| (value.version.block_num, value.version.tx_num));
        self.rwset.read(self.namespace, key, version);
        Ok(current.map(|value| value.value))
    }

    /// The metadata of `key` (name → value: `VALIDATION_PARAMETER` holds
    /// its key-level endorsement policy), the key recorded as read at its
    /// version, as Fabric's simulator records it.
    pub fn get_state_metadata(&mut self, key: &str) -> Result<BTreeMap<String, Bytes>, StateError> {
        self.get_state(key)?;
        self.stored_metadata(&key_metadata_namespace(self.namespace), key, key)
    }

    /// The metadata entries stored under `stored_key` in
    /// `metadata_namespace` (the metadata of `key`), not recorded.
    fn stored_metadata(
        &self,
        metadata_namespace: &str,
        stored_key: &str,
        key: &str,
    ) -> Result<BTreeMap<String, Bytes>, StateError> {
        let stored = self
            .state
            .get(metadata_namespace, stored_key)
            .map_err(|e| StateError::Storage(e.to_string()))?;
        let Some(stored) = stored else {
            return Ok(BTreeMap::new());
        };
        let metadata = KvMetadataWrite::decode(stored.value)
            .map_err(|e| StateError::Storage(format!("the metadata of key {key:?}: {e}")))?;
        Ok(metadata
            .entries
            .into_iter()
            .map(|entry| (entry.name, entry.value))
            .collect())
    }

    /// Sets the metadata entry `name` of `key` to `value` when the
    /// transaction commits: the key's whole metadata becomes that one
    /// entry, as Fabric's `PUT_STATE_METADATA` makes it.
    pub fn put_state_metadata(
        &mut self,
        key: &str,
        name: &str,
        value: impl Into<Bytes>,
    ) -> Result<(), StateError> {
        self.check_write(key)?;
        let entries = BTreeMap::from([(name.to_owned(), value.into())]);
        self.rwset.write_metadata(self.namespace, key, entries);
        Ok(())
    }

    /// Records a read of `key` in another namespace (as Fabric's
    /// `_lifecycle` reads the legacy `lscc`), returning its value.
    pub fn get_state_of(
        &mut self,
        namespace: &str,
        key: &str,
    ) -> Result<Option<Bytes>, StateError> {
        let current = self
            .state
            .get(namespace, key)
            .map_err(|e| StateError::Storage(e.to_string()))?;
        let version = current
            .as_ref()
            .map(|value| (value.version.block_num, value.version.tx_num));
        self.rwset.read(namespace, key, version);
        Ok(current.map(|value| value.value))
    }

    /// The committed values of `keys`, in their order, each recorded as a
    /// read (Fabric 3's `GET_STATE_MULTIPLE`).
    pub fn get_states(&mut self, keys: &[String]) -> Result<Vec<Option<Bytes>>, StateError> {
        keys.iter().map(|key| self.get_state(key)).collect()
    }

    /// Writes `value` to `key` when the transaction commits.
    pub fn put_state(&mut self, key: &str, value: impl Into<Bytes>) -> Result<(), StateError> {
        self.check_write(key)?;
        self.rwset.write(self.namespace, key, value.into());
        Ok(())
    }

    /// Deletes `key` when the transaction commits.
    pub fn del_state(&mut self, key: &str) -> Result<(), StateError> {
        self.check_write(key)?;
        self.rwset.delete(self.namespace, key);
        Ok(())
    }

    /// Fabric's preconditions of a write: a key, and no paged query before.
    fn check_write(&mut self, key: &str) -> Result<(), StateError> {
        if key.is_empty() {
            return Err(StateError::InvalidKey {
                key: String::new(),
                reason: "a key must not be empty",
            });
        }
        if self.paged {
            return Err(StateError::WriteAfterPagedQuery {
                tx_id: self.tx_id().to_owned(),
            });
        }
        self.written = true;
        Ok(())
    }

    /// Fabric's precondition of a paged query: no write before. Marks the
    /// transaction as having run one.
    fn check_paged_query(&mut self) -> Result<(), StateError> {
        if self.written {
            return Err(StateError::PagedQueryAfterWrite {
                tx_id: self.tx_id().to_owned(),
            });
        }
        self.paged = true;
        Ok(())
    }

    /// The committed keys in `[start, end)` (an empty `end`: to the end of
    /// the namespace) with their values, in key order. The query and its
    /// results are recorded so that the committer can detect phantoms: as
    /// raw reads, or as Fabric's Merkle summary when there are more than 50.
    pub fn get_state_by_range(
        &mut self,
        start: &str,
        end: &str,
    ) -> Result<Vec<(String, Bytes)>, StateError> {
        let results = self.scan(start, end, None)?;
        Ok(results
            .into_iter()
            .map(|(key, value)| (key, value.value))
            .collect())
    }

    /// One `page` of the keys in `[start, end)`: at most `page.size` from
    /// the page's bookmark (or `start`) on, and the bookmark of the next.
    /// Recorded as Fabric records it: a full page as a range that ends at
    /// its last key, not exhausted.
    pub fn get_state_by_range_paged(
        &mut self,
        start: &str,
        end: &str,
        page: &PageRequest,
    ) -> Result<RangePage, StateError> {
        self.check_paged_query()?;
        let from = if page.bookmark.is_empty() {
            start
        } else {
            page.bookmark.as_str()
        };
        let size = usize::try_from(page.size)
            .ok()
            .filter(|&size| size > 0 && size <= RANGE_RESULTS_MAX);
        let mut results = self.scan(from, end, size)?;
        let bookmark = match size {
            Some(size) if results.len() > size => results.pop().map(|(key, _)| key),
            _ => None,
        };
        Ok(RangePage {
            results: results
                .into_iter()
                .map(|(key, value)| (key, value.value))
                .collect(),
            bookmark: bookmark.unwrap_or_default(),
        })
    }

    /// Reads the keys in `[start, end)`, at most `page` of them (and one
    /// more, past the page, to tell where the next starts) or all up to
    /// [`RANGE_RESULTS_MAX`], and records the query for the committer's
    /// phantom check. A full page is recorded as Fabric's iterator leaves
    /// it: ending at the page's last key, not exhausted.
    fn scan(
        &mut self,
        start: &str,
        end: &str,
        page: Option<usize>,
    ) -> Result<Vec<(String, weft_statedb::VersionedValue)>, StateError> {
        let limit = page.unwrap_or(RANGE_RESULTS_MAX) + 1;
        let results = self
            .state
            .range(self.namespace, start, end, limit)
            .map_err(|e| StateError::Storage(e.to_string()))?;
        let (in_page, exhausted) = match page {
            None if results.len() > RANGE_RESULTS_MAX => return Err(StateError::TooManyResults),
            None => (results.len(), true),
            Some(size) => (results.len().min(size), results.len() < size),
        };
        let end_key = if exhausted {
            end.to_owned()
        } else {
            results[in_page - 1].0.clone()
        };
        let Some(mut summarizer) = RangeSummarizer::new(MAX_DEGREE_DEFAULT) else {
            return Err(StateError::Storage("bad Merkle degree".to_owned()));
        };
        for (key, value) in &results[..in_page] {
            summarizer.add(KvRead {
                key: key.clone(),
                version: Some(Version {
                    block_num: value.version.block_num,
                    tx_num: value.version.tx_num,
                }),
            });
        }
        let reads_info = match summarizer.finish() {
            RangeReads::Raw(kv_reads) => ReadsInfo::RawReads(QueryReads { kv_reads }),
            RangeReads::Summary(summary) => ReadsInfo::ReadsMerkleHashes(summary),
        };
        self.rwset.range_query(
            self.namespace,
            RangeQueryInfo {
                start_key: start.to_owned(),
                end_key,
                itr_exhausted: exhausted,
                reads_info: Some(reads_info),
            },
        );
        Ok(results)
    }

    /// The documents (JSON object values) of this chaincode's namespace
    /// that match the Mango `query` ([`crate::mango`]), or one `page` of
    /// them: Fabric's `GetQueryResult` on CouchDB, answered from the world
    /// state through one of the chaincode's JSON indexes when one is usable
    /// (in its order, as CouchDB answers), or else by a scan of the
    /// namespace in key order (or the query's sort order, ties by key).
    /// Values come back as Fabric's CouchDB path returns them:
    /// re-serialized with their keys sorted, only the `fields` asked for.
    /// Each key returned is recorded as a read at its version; as in
    /// Fabric, the query itself is not checked again at commit (no
    /// phantom protection). A page's bookmark counts the documents before
    /// the next page, and like CouchDB's is never empty.
    pub fn get_query_result(
        &mut self,
        query: &str,
        page: Option<&PageRequest>,
    ) -> Result<RangePage, StateError> {
        if page.is_some() {
            self.check_paged_query()?;
        }
        let query = Query::parse(query).map_err(|e| StateError::Query(e.to_string()))?;
        let offset = match page.map(|page| page.bookmark.as_str()) {
            None | Some("") => 0,
            Some(bookmark) => bookmark.parse::<usize>().map_err(|_| {
                StateError::Query(format!("bookmark {bookmark:?} is not one weft gave"))
            })?,
        };
        // A page size overrides the query's limit, as in Fabric.
        let wanted = match page {
            Some(page) if page.size > 0 => page.size as usize,
            _ => query.limit.unwrap_or(RANGE_RESULTS_MAX),
        }
        .min(RANGE_RESULTS_MAX);
        let first = query.skip.saturating_add(offset);
        let enough = first.saturating_add(wanted);

        let indexes = weft_statedb::json_index::built(self.state, self.namespace)
            .map_err(|e| StateError::Storage(e.to_string()))?;
        let mut matched = match query.plan(&indexes) {
            Some(scan) => self.documents_by_index(self.namespace, &query, &scan, first, enough)?,
            None => self.documents_by_scan(self.namespace, &query, first, enough)?,
        };
        let end = matched.len().min(enough);
        let start = first.min(end);
        let mut results = Vec::with_capacity(end - start);
        for (key, value, document) in matched.drain(start..end) {
            self.rwset.read(
                self.namespace,
                &key,
                Some((value.version.block_num, value.version.tx_num)),
            );
            let shown = serde_json::to_vec(&query.project(&document))
                .map_err(|e| StateError::Query(e.to_string()))?;
            results.push((key, Bytes::from(shown)));
        }
        Ok(RangePage {
            bookmark: page
                .map(|_| (offset + results.len()).to_string())
                .unwrap_or_default(),
            results,
        })
    }

    /// The documents of state namespace `namespace` matching `query`, in
    /// key order (or sorted, ties by key), by a scan of the whole
    /// namespace: at least `enough` of them when there are, the first
    /// `first` among them to be skipped.
    fn documents_by_scan(
        &self,
        namespace: &str,
        query: &Query,
        first: usize,
        enough: usize,
    ) -> Result<Vec<Document>, StateError> {
        let mut matched = Vec::new();
        let mut from = String::new();
        'scan: loop {
            let chunk = self
                .state
                .range(namespace, &from, "", SCAN_CHUNK)
                .map_err(|e| StateError::Storage(e.to_string()))?;
            let drained = chunk.len() < SCAN_CHUNK;
            if let Some((last, _)) = chunk.last() {
                from = format!("{last}\0");
            }
            for (key, value) in chunk {
                let Ok(document) = serde_json::from_slice::<serde_json::Value>(&value.value) else {
                    continue;
                };
                if !query.matches(&document) || (query.sorts() && !query.sortable(&document)) {
                    continue;
                }
                matched.push((key, value, document));
                if !query.sorts() && matched.len() >= enough {
                    break 'scan;
                }
                if matched.len() > RANGE_RESULTS_MAX.saturating_add(first) {
                    return Err(StateError::TooManyResults);
                }
            }
            if drained {
                break;
            }
        }
        if query.sorts() {
            matched.sort_by(|(a_key, _, a), (b_key, _, b)| query.order((a_key, a), (b_key, b)));
        }
        Ok(matched)
    }

    /// The documents of state namespace `namespace` matching `query`
    /// among those `scan` (an index of `namespace`) points at, in the
    /// index's order (backwards for a descending sort): at least
    /// `enough` of them when there are, as [`Self::documents_by_scan`].
    /// Going forwards, entries are read until enough documents match;
    /// backwards, the entries of the range are read first (an entry is
    /// only a key), then documents from the last entry on until enough
    /// match, so a descending sort with a limit reads few documents.
    fn documents_by_index(
        &self,
        namespace: &str,
        query: &Query,
        scan: &crate::mango::IndexScan<'_>,
        first: usize,
        enough: usize,
    ) -> Result<Vec<Document>, StateError> {
        let storage = |e: weft_statedb::Error| StateError::Storage(e.to_string());
        let most = RANGE_RESULTS_MAX.saturating_add(first);
        let entries = weft_statedb::json_index::entries_namespace(namespace, scan.index);
        let matching = |key: String| -> Result<Option<Document>, StateError> {
            let Some(value) = self.state.get(namespace, &key).map_err(storage)? else {
                return Ok(None);
            };
            let Ok(document) = serde_json::from_slice::<serde_json::Value>(&value.value) else {
                return Ok(None);
            };
            Ok(query.matches(&document).then_some((key, value, document)))
        };
        let mut matched = Vec::new();
        let mut keys = Vec::new();
        let mut from = scan.start.clone();
        loop {
            let chunk = self
                .state
                .range(&entries, &from, &scan.end, SCAN_CHUNK)
                .map_err(storage)?;
            let drained = chunk.len() < SCAN_CHUNK;
            if let Some((last, _)) = chunk.last() {
                from = format!("{last}\0");
            }
            for (_, entry) in chunk {
                let key = String::from_utf8_lossy(&entry.value).into_owned();
                if scan.descending {
                    keys.push(key);
                    if keys.len() > most {
                        return Err(StateError::TooManyResults);
                    }
                    continue;
                }
                if let Some(document) = matching(key)? {
                    matched.push(document);
                    if matched.len() >= enough {
                        return Ok(matched);
                    }
                }
            }
            if drained {
                break;
            }
        }
        for key in keys.into_iter().rev() {
            if let Some(document) = matching(key)? {
                matched.push(document);
                if matched.len() >= enough {
                    break;
                }
            }
        }
        Ok(matched)
    }

    /// Every committed write of `key` in this chaincode's namespace,
    /// newest first, at most [`RANGE_RESULTS_MAX`]: Fabric's
    /// `GetHistoryForKey`. As in Fabric, it reads the blocks committed by
    /// now (not the simulation's snapshot) and records nothing in the
    /// read/write set: the committer does not check it again.
    pub fn get_history_for_key(&self, key: &str) -> Result<Vec<KeyModification>, StateError> {
        let blocks = self.blocks.ok_or(StateError::NoHistory)?;
        blocks
            .history(self.namespace, key, RANGE_RESULTS_MAX)
            .map_err(|error| match error {
                weft_ledger::Error::NoHistory { .. } => StateError::NoHistory,
                other => StateError::History(other.to_string()),
            })
    }

    /// Sets the transaction's chaincode event (the last one set wins, as in
    /// Fabric).
    pub fn set_event(&mut self, name: &str, payload: impl Into<Bytes>) {
        self.event = Some(ChaincodeEvent {
            chaincode_id: self.namespace.to_owned(),
            tx_id: self.tx_id().to_owned(),
            event_name: name.to_owned(),
            payload: payload.into(),
        });
    }

    /// The serialized read/write set and chaincode event.
    pub(crate) fn results(&self) -> (Bytes, Bytes) {
        let events = self
            .event
            .as_ref()
            .map(|event| Bytes::from(event.encode_to_vec()))
            .unwrap_or_default();
        (self.rwset.encode(), events)
    }

    /// The private writes of the invocation (and of the chaincodes it
    /// called), with the collection of each: what the endorsing peer keeps
    /// and hands to the collections' members. `None` when nothing private
    /// was written.
    pub(crate) fn private_writes(&self) -> Option<PrivateWrites> {
        let rwset = self.rwset.private_writes()?;
        Some(PrivateWrites {
            rwset,
            collections: self.collections.clone(),
        })
    }
}

/// An endorsed transaction's private writes in plaintext, and the
/// collections of the chaincodes that wrote them.
#[derive(Debug, Clone)]
pub struct PrivateWrites {
    pub rwset: weft_protos::rwset::TxPvtReadWriteSet,
    /// Each chaincode's collections (implicit ones included), by
    /// chaincode name; `_lifecycle`'s own writes have none here.
    pub collections: BTreeMap<String, Arc<Collections>>,
}

impl PrivateWrites {
    /// Keeps the writes of transaction `tx_id` in the transient store of
    /// `blocks` until the transaction's block commits them.
    pub fn keep_in(&self, tx_id: &str, blocks: &BlockStore) -> Result<(), String> {
        blocks
            .keep_transient(tx_id, blocks.height(), &self.rwset.encode_to_vec())
            .map_err(|e| format!("keeping it in the transient store failed: {e}"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use weft_protos::kvrwset::KvrwSet;
    use weft_protos::rwset::TxReadWriteSet;
    use weft_protos::tx::{Invocation, Proposal};
    use weft_statedb::memory::{MemoryOptions, MemoryState};
    use weft_statedb::{Height, UpdateBatch, VersionedState};

    use super::*;

    /// A state with `count` keys `k000`.. in namespace `cc`, key n at
    /// version (1, n).
    pub(crate) fn state(count: u64) -> (tempfile::TempDir, MemoryState) {
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let mut batch = UpdateBatch::new();
        for n in 0..count {
            batch.put(
                "cc",
                &format!("k{n:03}"),
                Bytes::from(format!("v{n}")),
                Height::new(1, n),
            );
        }
        state.apply(&batch, Height::new(1, count)).unwrap();
        (dir, state)
    }

    pub(crate) fn proposal() -> ReceivedProposal {
        let client = weft_msp::testing::TestOrg::new("Org1MSP").signer(weft_msp::NodeRole::Client);
        let invocation = Invocation {
            channel_id: "ch",
            chaincode: "cc",
            args: vec![Bytes::from_static(b"f")],
            nonce: Bytes::from_static(b"nonce"),
            timestamp_seconds: 0,
        };
        let proposal = Proposal::new(&invocation, client.serialized_identity().clone());
        ReceivedProposal::decode(&proposal.signed(&client).unwrap()).unwrap()
    }

    pub(crate) fn kv_of(stub: &Stub<'_>) -> KvrwSet {
        let (results, _) = stub.results();
        let rwset = TxReadWriteSet::decode(results).unwrap();
        assert_eq!(rwset.ns_rwset.len(), 1);
        assert_eq!(rwset.ns_rwset[0].namespace, "cc");
        KvrwSet::decode(rwset.ns_rwset[0].rwset.clone()).unwrap()
    }

    #[test]
    fn reads_writes_and_deletes_are_recorded_as_fabric_records_them() {
        let (_dir, state) = state(3);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        assert_eq!(
            stub.get_state("k001").unwrap(),
            Some(Bytes::from_static(b"v1"))
        );
        assert_eq!(stub.get_state("absent").unwrap(), None);
        stub.put_state("k002", "new").unwrap();
        // No read-your-writes, as in Fabric.
        assert_eq!(
            stub.get_state("k002").unwrap(),
            Some(Bytes::from_static(b"v2"))
        );
        stub.del_state("k000").unwrap();
        stub.set_event("moved", "payload");
        let kv = kv_of(&stub);
        let reads: Vec<(&str, Option<(u64, u64)>)> = kv
            .reads
            .iter()
            .map(|read| {
                (
                    read.key.as_str(),
                    read.version.map(|v| (v.block_num, v.tx_num)),
                )
            })
            .collect();
        // Sorted by key, the version each key had in the snapshot.
        assert_eq!(
            reads,
            [
                ("absent", None),
                ("k001", Some((1, 1))),
                ("k002", Some((1, 2)))
            ]
        );
        let writes: Vec<(&str, bool, &[u8])> = kv
            .writes
            .iter()
            .map(|write| (write.key.as_str(), write.is_delete, write.value.as_ref()))
            .collect();
        assert_eq!(
            writes,
            [("k000", true, &b""[..]), ("k002", false, &b"new"[..])]
        );
        let (_, events) = stub.results();
        let event = ChaincodeEvent::decode(events).unwrap();
        assert_eq!(
            (event.event_name.as_str(), event.chaincode_id.as_str()),
            ("moved", "cc")
        );
        assert_eq!(event.tx_id, proposal.channel_header.tx_id);
    }

    #[test]
    fn range_queries_record_raw_reads_or_a_merkle_summary() {
        let (_dir, state) = state(120);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let short = stub.get_state_by_range("k010", "k013").unwrap();
        assert_eq!(
            short
                .iter()
                .map(|(key, _)| key.as_str())
                .collect::<Vec<_>>(),
            ["k010", "k011", "k012"]
        );
        let long = stub.get_state_by_range("", "").unwrap();
        assert_eq!(long.len(), 120);
        let kv = kv_of(&stub);
        assert_eq!(kv.range_queries_info.len(), 2);
        let Some(ReadsInfo::RawReads(raw)) = &kv.range_queries_info[0].reads_info else {
            panic!("three results are kept raw");
        };
        assert_eq!(raw.kv_reads.len(), 3);
        assert!(kv.range_queries_info[0].itr_exhausted);
        let Some(ReadsInfo::ReadsMerkleHashes(summary)) = &kv.range_queries_info[1].reads_info
        else {
            panic!("120 results are summarised");
        };
        // 120 reads in runs of 51: three level-1 hashes.
        assert_eq!((summary.max_degree, summary.max_level), (50, 1));
        assert_eq!(summary.max_level_hashes.len(), 3);
    }

    #[test]
    fn composite_keys_are_stored_and_queried_as_the_shims_ask() {
        let (_dir, state) = state(2);
        let mut batch = UpdateBatch::new();
        for (n, key) in ["\0color~name\0blue\0car\0", "\0color~name\0red\0bike\0"]
            .iter()
            .enumerate()
        {
            batch.put(
                "cc",
                key,
                Bytes::from_static(b"x"),
                Height::new(2, n as u64),
            );
        }
        state.apply(&batch, Height::new(2, 2)).unwrap();
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        stub.put_state("\0color~name\0green\0bus\0", "x").unwrap();
        assert_eq!(
            stub.get_state("\0color~name\0red\0bike\0").unwrap(),
            Some(Bytes::from_static(b"x"))
        );
        // A partial composite key: the range to it followed by U+10FFFF.
        let blue = stub
            .get_state_by_range("\0color~name\0blue\0", "\0color~name\0blue\0\u{10ffff}")
            .unwrap();
        assert_eq!(blue.len(), 1);
        assert_eq!(blue[0].0, "\0color~name\0blue\0car\0");
        // The shims' whole-namespace range of simple keys starts at U+0001:
        // no composite key.
        let simple: Vec<String> = stub
            .get_state_by_range("\u{1}", "")
            .unwrap()
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(simple, ["k000", "k001"]);
        // Only the empty key is refused, and nothing is recorded for it.
        assert!(matches!(
            stub.put_state("", "v"),
            Err(StateError::InvalidKey { .. })
        ));
        let kv = kv_of(&stub);
        assert_eq!(kv.writes.len(), 1);
        assert_eq!(kv.range_queries_info.len(), 2);
    }

    #[test]
    fn range_pages_resume_at_their_bookmark_and_record_where_they_stopped() {
        let (_dir, state) = state(7);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let keys = |page: &RangePage| {
            page.results
                .iter()
                .map(|(key, _)| key.clone())
                .collect::<Vec<_>>()
        };
        let mut request = PageRequest {
            size: 3,
            bookmark: String::new(),
        };
        let first = stub.get_state_by_range_paged("k001", "", &request).unwrap();
        assert_eq!(keys(&first), ["k001", "k002", "k003"]);
        assert_eq!(first.bookmark, "k004");
        request.bookmark = first.bookmark;
        let second = stub.get_state_by_range_paged("k001", "", &request).unwrap();
        assert_eq!(keys(&second), ["k004", "k005", "k006"]);
        // A full page with nothing after it has no bookmark.
        assert_eq!(second.bookmark, "");
        request.size = 10;
        request.bookmark = "k005".to_owned();
        let last = stub.get_state_by_range_paged("k001", "", &request).unwrap();
        assert_eq!(
            (keys(&last), last.bookmark.as_str()),
            (vec!["k005".to_owned(), "k006".to_owned()], "")
        );

        let ranges: Vec<(String, String, bool, usize)> = kv_of(&stub)
            .range_queries_info
            .into_iter()
            .map(|range| {
                let Some(ReadsInfo::RawReads(raw)) = range.reads_info else {
                    panic!("a short page is kept raw");
                };
                (
                    range.start_key,
                    range.end_key,
                    range.itr_exhausted,
                    raw.kv_reads.len(),
                )
            })
            .collect();
        assert_eq!(
            ranges,
            [
                ("k001".to_owned(), "k003".to_owned(), false, 3),
                ("k004".to_owned(), "k006".to_owned(), false, 3),
                ("k005".to_owned(), String::new(), true, 2),
            ]
        );
    }

    #[test]
    fn json_queries_read_the_documents_they_return() {
        let (_dir, state) = state(0);
        let mut batch = UpdateBatch::new();
        for (n, value) in [
            r#"{"size": 3, "color": "red"}"#,
            r#"{"size": 1, "color": "red"}"#,
            "not json",
            r#"{"size": 2, "color": "blue"}"#,
            r#"{"size": 5, "color": "red"}"#,
        ]
        .iter()
        .enumerate()
        {
            let key = format!("d{n}");
            batch.put("cc", &key, Bytes::from(*value), Height::new(1, n as u64));
        }
        state.apply(&batch, Height::new(1, 5)).unwrap();
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let query = r#"{"selector": {"color": "red"}, "sort": [{"size": "asc"}], "skip": 1}"#;
        let found = stub.get_query_result(query, None).unwrap();
        let keys: Vec<&str> = found.results.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(keys, ["d0", "d4"]);
        // Values come back with sorted keys, as Fabric's CouchDB path
        // re-serializes them.
        assert_eq!(&found.results[0].1[..], br#"{"color":"red","size":3}"#);
        let reads: Vec<(String, u64)> = kv_of(&stub)
            .reads
            .iter()
            .map(|read| (read.key.clone(), read.version.unwrap().tx_num))
            .collect();
        assert_eq!(reads, [("d0".to_owned(), 0), ("d4".to_owned(), 4)]);

        // Pages: the bookmark counts what came before.
        let mut page = PageRequest {
            size: 2,
            bookmark: String::new(),
        };
        let mut pages = Vec::new();
        loop {
            let found = stub
                .get_query_result(r#"{"selector": {"size": {"$gt": 0}}}"#, Some(&page))
                .unwrap();
            pages.push(found.results.len());
            if found.results.len() < 2 {
                break;
            }
            page.bookmark = found.bookmark;
        }
        assert_eq!(pages, [2, 2, 0]);
        assert!(matches!(
            stub.get_query_result("{}", None),
            Err(StateError::Query(_))
        ));
    }

    /// Keys in query order.
    fn query_keys(state: &MemoryState, query: &str) -> Vec<String> {
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let found = stub.get_query_result(query, None).unwrap();
        found.results.into_iter().map(|(key, _)| key).collect()
    }

    #[test]
    fn json_queries_through_an_index_answer_as_a_scan_does() {
        use weft_statedb::json_index::{IndexMaintainer, JsonIndex, built};

        let colors = ["red", "blue", "green"];
        let documents: Vec<String> = (0..90u64)
            .map(|n| {
                let mut document = serde_json::Map::new();
                if n % 7 != 0 {
                    document.insert("color".into(), colors[n as usize % 3].into());
                }
                match n % 5 {
                    0 => {}
                    1 => {
                        document.insert("size".into(), format!("s{}", n % 4).into());
                    }
                    _ => {
                        document.insert("size".into(), ((n * 37) % 11).into());
                    }
                }
                if n % 2 == 0 {
                    document.insert(
                        "owner".into(),
                        serde_json::json!({"name": format!("o{}", n % 6)}),
                    );
                }
                serde_json::Value::Object(document).to_string()
            })
            .collect();
        let load = |indexed: bool| {
            let (dir, state) = state(0);
            let mut batch = UpdateBatch::new();
            for (n, document) in documents.iter().enumerate() {
                let key = format!("d{:02}", (n * 53) % 90);
                batch.put(
                    "cc",
                    &key,
                    Bytes::from(document.clone()),
                    Height::new(1, n as u64),
                );
            }
            state.apply(&batch, Height::new(1, 90)).unwrap();
            if indexed {
                let mut maintainer = IndexMaintainer::new();
                let mut build = UpdateBatch::new();
                for definition in [
                    r#"{"index":{"fields":["color","size"]},"ddoc":"bySize","name":"colorSize"}"#,
                    r#"{"index":{"fields":["size"]},"ddoc":"bySize","name":"size"}"#,
                    r#"{"index":{"fields":["owner.name"]},"name":"owner"}"#,
                ] {
                    let index = JsonIndex::parse("i.json", definition.as_bytes()).unwrap();
                    maintainer
                        .build(&mut build, &state, "cc", &index, Height::new(2, 0))
                        .unwrap();
                }
                state.apply(&build, Height::new(2, 0)).unwrap();
            }
            (dir, state)
        };
        let (_plain_dir, plain) = load(false);
        let (_indexed_dir, indexed) = load(true);
        let indexes = built(&indexed, "cc").unwrap();
        assert_eq!(indexes.len(), 3);

        // (query, the index it must be answered from, whether the order
        // must equal the scan's)
        for (query, index, ordered) in [
            (
                r#"{"selector": {"color": "red", "size": {"$gt": 3}}}"#,
                "bySize/colorSize",
                false,
            ),
            (
                r#"{"selector": {"color": "blue", "size": {"$exists": true}}, "sort": ["size"]}"#,
                "bySize/colorSize",
                true,
            ),
            (
                r#"{"selector": {"color": "red", "size": {"$gte": 2, "$lte": 8}}, "sort": [{"size": "desc"}]}"#,
                "bySize/colorSize",
                true,
            ),
            (
                r#"{"selector": {"size": {"$lt": 5}}}"#,
                "bySize/size",
                false,
            ),
            (
                r#"{"selector": {"size": {"$gt": 4}}, "sort": [{"size": "desc"}], "skip": 3, "limit": 7}"#,
                "bySize/size",
                true,
            ),
            (
                r#"{"selector": {"size": {"$gt": "s1"}}, "sort": ["size"]}"#,
                "bySize/size",
                true,
            ),
            (
                r#"{"selector": {"owner.name": "o2", "color": {"$ne": "red"}}}"#,
                "/owner",
                false,
            ),
            (
                r#"{"selector": {"owner": {"name": {"$in": ["o0", "o4"]}}}}"#,
                "/owner",
                false,
            ),
            (
                r#"{"selector": {"color": "red", "size": 4}, "use_index": ["_design/bySize", "size"]}"#,
                "bySize/size",
                false,
            ),
        ] {
            let parsed = crate::mango::Query::parse(query).unwrap();
            let scan = parsed.plan(&indexes).expect(query);
            assert_eq!(scan.index.id(), index, "{query}");
            let mut by_scan = query_keys(&plain, query);
            let mut by_index = query_keys(&indexed, query);
            assert!(!by_scan.is_empty(), "{query}");
            if !ordered {
                by_scan.sort();
                by_index.sort();
            }
            assert_eq!(by_index, by_scan, "{query}");
        }
        // Without an index the selector requires, the namespace is scanned.
        for query in [
            r#"{"selector": {"color": {"$exists": false}}}"#,
            r#"{"selector": {"$or": [{"color": "red"}, {"size": 3}]}}"#,
            r#"{"selector": {"size": 3}, "sort": [{"size": "asc"}, {"color": "desc"}]}"#,
        ] {
            let parsed = crate::mango::Query::parse(query).unwrap();
            assert_eq!(parsed.plan(&indexes), None, "{query}");
            assert_eq!(
                query_keys(&indexed, query),
                query_keys(&plain, query),
                "{query}"
            );
        }
    }

    #[test]
    fn paged_queries_are_for_read_only_transactions() {
        let (_dir, state) = state(3);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let page = PageRequest {
            size: 2,
            bookmark: String::new(),
        };
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        stub.get_state_by_range_paged("", "", &page).unwrap();
        assert!(matches!(
            stub.put_state("k000", "v"),
            Err(StateError::WriteAfterPagedQuery { .. })
        ));
        assert!(matches!(
            stub.del_state("k000"),
            Err(StateError::WriteAfterPagedQuery { .. })
        ));

        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        stub.put_state("k000", "v").unwrap();
        let refused = stub.get_state_by_range_paged("", "", &page).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("supported only in a read-only transaction"),
            "{refused}"
        );
        // Unpaged queries still run.
        assert_eq!(stub.get_state_by_range("", "").unwrap().len(), 3);
    }

    /// Writes its arguments, joined, to key `called` of its namespace, sets
    /// an event and answers its namespace.
    struct Recorder;

    impl Chaincode for Recorder {
        fn invoke(&self, stub: &mut Stub<'_>) -> Response {
            let joined = stub.args().join(&b","[..]);
            stub.put_state("called", joined).unwrap();
            stub.set_event("dropped", "by the caller");
            success(stub.namespace().to_owned())
        }
    }

    #[test]
    fn a_called_chaincode_writes_under_its_namespace_in_the_same_transaction() {
        let (_dir, state) = state(1);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let callees: std::collections::HashMap<String, Arc<dyn Chaincode>> =
            [("other".to_owned(), Arc::new(Recorder) as Arc<dyn Chaincode>)].into();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref()).with_callees(&callees, false);
        stub.get_state("k000").unwrap();
        let args = vec![Bytes::from_static(b"f"), Bytes::from_static(b"x")];
        let response = stub.invoke_chaincode("other:1.0/ch", args).unwrap();
        assert_eq!(
            (response.status, &response.payload[..]),
            (200, &b"other"[..])
        );
        // The caller goes on writing in its own namespace.
        stub.put_state("after", "call").unwrap();
        let (results, events) = stub.results();
        assert!(events.is_empty(), "the callee's event is dropped");
        let rwset = TxReadWriteSet::decode(results).unwrap();
        let written: Vec<(String, Vec<String>)> = rwset
            .ns_rwset
            .iter()
            .map(|namespace| {
                let kv = KvrwSet::decode(namespace.rwset.clone()).unwrap();
                (
                    namespace.namespace.clone(),
                    kv.writes
                        .iter()
                        .map(|w| format!("{}={}", w.key, String::from_utf8_lossy(&w.value)))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            written,
            [
                ("cc".to_owned(), vec!["after=call".to_owned()]),
                ("other".to_owned(), vec!["called=f,x".to_owned()]),
            ]
        );

        for (target, reason) in [
            ("other/elsewhere", "another channel"),
            ("missing", "no such chaincode"),
        ] {
            let refused = stub.invoke_chaincode(target, Vec::new()).unwrap_err();
            assert!(refused.to_string().contains(reason), "{refused}");
        }
    }

    pub(crate) fn kv_of_empty(stub: &Stub<'_>) -> bool {
        let (results, _) = stub.results();
        TxReadWriteSet::decode(results).unwrap().ns_rwset.is_empty()
    }
}
