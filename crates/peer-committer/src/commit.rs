//! One channel's committer: validates blocks in order and commits them to
//! the world state and the block store.
//!
//! Order of writes, for crash safety: the block (with its validation codes
//! in TRANSACTIONS_FILTER) is appended to the block store first, then the
//! update batch is applied to the world state. On open, any block above the
//! state's durable height is replayed from the store using its stored codes,
//! without validating it again; the result is the same state.
//!
//! Stream channels (docs/stream-mode.md): a block the orderers left
//! unsigned is validated and applied at once, like any other, but *staged*:
//! appended unsynced, visible to endorsers through the state, and not yet
//! committed to readers (Deliver, commit status). The next checkpoint, a
//! block whose orderer signature satisfies BlockValidation, commits the
//! staged blocks with it, since its signature covers them through the hash
//! chain. A checkpoint is appended unsynced too, applied, announced
//! *applied*, and only then synced (with the store's durability) and
//! announced committed: the sync is on the path of durable, not of applied.
//! A checkpoint (or any block) that fails its integrity checks while
//! blocks are staged rolls them back: the state to the last checkpoint, the
//! block store truncated to it ([`Error::RolledBack`]), so that the intake
//! fetches them again from another orderer. The world state is only made
//! durable while nothing is staged, and a restart drops an unconfirmed
//! (unsigned) tail before replaying.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use std::time::{Duration, Instant};
use tokio::sync::watch;

use parking_lot::RwLock;

use bytes::Bytes;
use prost::Message;
use rayon::prelude::*;
use weft_ledger::{BlockPrivateData, BlockStore};
use weft_msp::UnixTime;
use weft_protos::common::{Block, BlockMetadataIndex, Config, Metadata};
use weft_protos::view::{DecodedBlock, Limits, TxBody, TxEnvelope};
use weft_statedb::json_index::IndexMaintainer;
use weft_statedb::{Height, VersionedState};

use crate::checks::{check_block, worth_parallel};
use crate::indexes::ChannelIndexes;
use crate::key_policies::check_key_level_policies;
use crate::lifecycle::{ChaincodeDefinitions, LIFECYCLE_NAMESPACE};
use crate::mvcc::{mark_duplicate_tx_ids, update_batch, validate_block};
use crate::private::{self, PrivateWritesSource};
use crate::{ChannelContext, DeclaredIndexes, Error, ReconciledQueue, Result, TxValidationCode};

/// What committing a block produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedBlock {
    pub number: u64,
    /// One code per transaction, as stored in TRANSACTIONS_FILTER.
    pub codes: Vec<TxValidationCode>,
    /// Whether the block carried a valid config transaction (the channel's
    /// MSPs and policies changed).
    pub reconfigured: bool,
    /// A stream channel's block applied before the orderers' checkpoint
    /// confirmed it: not committed to readers yet.
    pub staged: bool,
    /// Where the time went, stage by stage.
    pub timings: StageTimings,
}

/// Wall-clock time one block spent in each stage of the committer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimings {
    /// Decode, block integrity (hashes, orderer signatures) and the
    /// per-transaction checks: signatures and endorsement policies (Fabric's
    /// VSCC). Runs ahead of the commits on the rayon pool, overlapping
    /// other blocks' stages, unless nothing could overlap it (the pool has
    /// one thread, or a small block arrived alone): then on the committing
    /// thread, just before its commit.
    pub validate: Duration,
    /// Duplicate TxIDs against the ledger, MVCC and the update batch.
    pub mvcc: Duration,
    /// Appending the block to the block store.
    pub block_store: Duration,
    /// Applying the update batch to the world state.
    pub state: Duration,
}

/// Validates and commits the blocks of one channel, in order.
pub struct ChannelCommitter {
    channel_id: String,
    context: Arc<ChannelContext>,
    /// The current context, for services that read the channel (Deliver).
    published: Arc<RwLock<Arc<ChannelContext>>>,
    state: Arc<dyn VersionedState>,
    ledger: Arc<BlockStore>,
    /// The height whose blocks are appended *and* applied to the state:
    /// what readers (Deliver, endorsers) may see as committed.
    committed: Arc<watch::Sender<u64>>,
    /// The height whose blocks are applied to the state, staged or not:
    /// ahead of `committed` while a stream channel's blocks are staged,
    /// back to it when they are rolled back.
    applied: Arc<watch::Sender<u64>>,
    /// A stream channel's first block applied and not confirmed by a
    /// checkpoint yet; `None` when nothing is staged.
    staged_from: Option<u64>,
    /// The transactions of the staged blocks.
    staged_transactions: u64,
    /// The TxIDs of the staged blocks' transactions whose transient
    /// entries the next checkpoint settles (a rolled-back block is fetched
    /// again and needs them).
    staged_settled: Vec<String>,
    /// The staged blocks' purges, whose rewrites of the block store's
    /// copies the next checkpoint makes.
    staged_purges: Vec<private::Purge>,
    limits: Limits,
    /// The chaincodes' JSON indexes, built and kept in the state.
    indexes: ChannelIndexes,
    /// The organisation whose collections' private values this peer
    /// commits, and where it finds them; `None`: it commits only their
    /// hashes.
    private_data_of: Option<(String, Arc<dyn PrivateWritesSource + Send + Sync>)>,
    /// Earlier blocks' private data found since, to commit with the next
    /// signed block (see `reconcile.rs`).
    reconciled: Option<Arc<ReconciledQueue>>,
}

impl std::fmt::Debug for ChannelCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelCommitter")
            .field("channel_id", &self.channel_id)
            .field("height", &self.ledger.height())
            .finish_non_exhaustive()
    }
}

impl ChannelCommitter {
    /// Starts a channel from its genesis block on an empty block store and
    /// state.
    pub fn create(
        genesis: Block,
        state: Arc<dyn VersionedState>,
        ledger: Arc<BlockStore>,
    ) -> Result<Self> {
        let channel_id = channel_of_genesis(&genesis)?;
        if ledger.height() != 0 {
            return Err(Error::BadBlock {
                channel: channel_id,
                block: 0,
                reason: format!("the block store already holds {} blocks", ledger.height()),
            });
        }
        let decoded = decode(genesis.clone(), Limits::default());
        let config = config_of(&decoded).ok_or_else(|| Error::BadBlock {
            channel: channel_id.clone(),
            block: 0,
            reason: "the genesis block holds no config transaction".to_owned(),
        })?;
        let context = ChannelContext::from_config(&channel_id, 0, &config)?;
        let mut genesis = genesis;
        set_filter(&mut genesis, &[TxValidationCode::Valid]);
        ledger.append(&genesis)?;
        state.apply(&weft_statedb::UpdateBatch::new(), Height::new(0, 0))?;
        let context = Arc::new(context);
        Ok(Self {
            channel_id,
            published: Arc::new(RwLock::new(context.clone())),
            context,
            state,
            committed: Arc::new(watch::Sender::new(ledger.height())),
            applied: Arc::new(watch::Sender::new(ledger.height())),
            ledger,
            staged_from: None,
            staged_transactions: 0,
            staged_settled: Vec::new(),
            staged_purges: Vec::new(),
            limits: Limits::default(),
            indexes: ChannelIndexes::default(),
            private_data_of: None,
            reconciled: None,
        })
    }

    /// Opens a channel whose block store already holds its chain: finds the
    /// current configuration and replays blocks the state has not made
    /// durable.
    pub fn open(
        channel_id: &str,
        state: Arc<dyn VersionedState>,
        ledger: Arc<BlockStore>,
    ) -> Result<Self> {
        let height = ledger.height();
        let corrupt = |block: u64, reason: String| Error::Corrupt {
            channel: channel_id.to_owned(),
            block,
            reason,
        };
        if height == 0 {
            return Err(corrupt(
                0,
                "the block store is empty; create the channel from its genesis block".to_owned(),
            ));
        }
        let tip = ledger
            .block(height - 1)?
            .ok_or_else(|| corrupt(height - 1, "missing".to_owned()))?;
        let config_number = weft_protos::block::last_config_index(&tip)
            .ok_or_else(|| corrupt(height - 1, "no last-config index".to_owned()))?;
        let config_block = ledger
            .block(config_number)?
            .ok_or_else(|| corrupt(config_number, "the last config block is missing".to_owned()))?;
        let config = config_of(&decode(config_block, Limits::default()))
            .ok_or_else(|| corrupt(config_number, "holds no config transaction".to_owned()))?;
        let context = ChannelContext::from_config(channel_id, config_number, &config)?;
        let height = if context.stream_checkpoint.is_some() {
            drop_unconfirmed_tail(channel_id, &ledger, config_number)?
        } else {
            height
        };

        let replay_from = state.height().map_or(0, |applied| applied.block_num + 1);
        if replay_from > height {
            return Err(corrupt(
                replay_from - 1,
                format!(
                    "the world state is at block {} but the chain ends at {}",
                    replay_from - 1,
                    height - 1
                ),
            ));
        }
        let mut indexes = IndexMaintainer::new();
        let mut definitions = ChaincodeDefinitions::load(state.as_ref())?;
        for number in replay_from..height {
            let block = ledger
                .block(number)?
                .ok_or_else(|| corrupt(number, "missing".to_owned()))?;
            let codes = stored_codes(&block)
                .ok_or_else(|| corrupt(number, "no TRANSACTIONS_FILTER".to_owned()))?;
            let decoded = decode(block, Limits::default());
            if codes.len() != decoded.transactions.len() {
                return Err(corrupt(
                    number,
                    "TRANSACTIONS_FILTER does not match the transactions".to_owned(),
                ));
            }
            let mut batch = update_batch(&decoded, &codes, state.as_ref())?;
            let private = private::decode_committed(number, &ledger.private_data(number)?);
            private::apply(&mut batch, &private, state.as_ref())?;
            private::purge_again(&mut batch, &ledger.purged_values(number)?);
            // The block store lost the expired and purged writes when the
            // block was first committed.
            private::purge_expired(&mut batch, state.as_ref(), number)?;
            private::schedule_expiry(&mut batch, &decoded, &codes, &definitions, &private);
            // Earlier blocks' copies this block completed, as stored then.
            let mut completed = Vec::new();
            for (block, tx_index) in ledger.reconciled_with(number)? {
                let copy = ledger.private_data_of(block, tx_index)?.into_iter();
                let copy: Vec<(u64, Bytes)> = copy.map(|bytes| (tx_index, bytes)).collect();
                completed.extend(private::decode_committed(block, &copy));
            }
            private::apply_completed(&mut batch, state.as_ref(), number, &definitions, &completed)?;
            indexes.maintain(&mut batch, state.as_ref())?;
            state.apply(&batch, last_height(number, codes.len()))?;
            let redefined = decoded
                .transactions
                .iter()
                .zip(&codes)
                .any(|(transaction, code)| {
                    *code == TxValidationCode::Valid && writes_definitions(transaction)
                });
            if redefined {
                definitions = ChaincodeDefinitions::load(state.as_ref())?;
            }
        }
        let context = Arc::new(context.with_definitions(Arc::new(definitions)));
        Ok(Self {
            channel_id: channel_id.to_owned(),
            published: Arc::new(RwLock::new(context.clone())),
            context,
            state,
            committed: Arc::new(watch::Sender::new(ledger.height())),
            applied: Arc::new(watch::Sender::new(ledger.height())),
            ledger,
            staged_from: None,
            staged_transactions: 0,
            staged_settled: Vec::new(),
            staged_purges: Vec::new(),
            limits: Limits::default(),
            indexes: ChannelIndexes::new(indexes),
            private_data_of: None,
            reconciled: None,
        })
    }

    /// This committer committing, besides every collection's hashes, the
    /// private values of the collections `msp_id` (this peer's
    /// organisation) is a member of, found through `source`: the
    /// transient store, then other members' peers (see `private.rs`).
    pub fn keeping_private_data_of(
        mut self,
        msp_id: impl Into<String>,
        source: Arc<dyn PrivateWritesSource + Send + Sync>,
    ) -> Self {
        self.private_data_of = Some((msp_id.into(), source));
        self
    }

    /// This committer completing earlier blocks' private data with what a
    /// [`crate::Reconciler`] finds and puts in `queue`, in the update of
    /// each signed block it commits.
    pub fn reconciling(mut self, queue: Arc<ReconciledQueue>) -> Self {
        self.reconciled = Some(queue);
        self
    }

    /// Builds and keeps the JSON indexes `declared` names for the
    /// channel's chaincodes (see [`DeclaredIndexes`]).
    pub fn with_declared_indexes(mut self, declared: Arc<dyn DeclaredIndexes>) -> Self {
        self.indexes.declared_by(declared);
        self
    }

    pub fn channel_id(&self) -> &str {
        &self.channel_id
    }

    /// The number of blocks committed.
    pub fn height(&self) -> u64 {
        self.ledger.height()
    }

    /// The channel's current MSPs and policies.
    pub fn context(&self) -> &Arc<ChannelContext> {
        &self.context
    }

    /// Recognises the signatures in `own` (the endorsements this peer
    /// signed) by their bytes instead of verifying them, from the next
    /// block on. Verdicts do not change.
    pub fn recognise_own_signatures(&mut self, own: Arc<weft_msp::OwnSignatures>) {
        self.context = Arc::new(self.context.with_own_signatures(own));
        *self.published.write() = self.context.clone();
    }

    /// What the peer's services need to serve this channel: its block store
    /// and its current configuration, kept up to date by this committer.
    pub fn handle(&self) -> crate::ChannelHandle {
        crate::ChannelHandle {
            ledger: self.ledger.clone(),
            state: self.state.clone(),
            committed: self.committed.subscribe(),
            applied: self.applied.subscribe(),
            context: self.published.clone(),
        }
    }

    /// Makes the world state durable up to the last committed block. The
    /// block store is synced first, so a durable state never runs ahead of
    /// the durable chain it is replayed from.
    ///
    /// While blocks of a stream channel are staged, nothing is made durable
    /// (`Ok(None)`): a rollback must be able to return to the last
    /// checkpoint.
    pub fn checkpoint(&self) -> Result<Option<Height>> {
        if self.staged_from.is_some() {
            return Ok(None);
        }
        self.checkpointer().checkpoint()
    }

    /// Checkpoints this channel from the sink of
    /// [`commit_stream`](Self::commit_stream), between two commits.
    pub(crate) fn checkpointer(&self) -> Checkpointer {
        Checkpointer {
            ledger: self.ledger.clone(),
            state: self.state.clone(),
        }
    }

    /// Validates `block` and commits it. Invalid transactions are committed
    /// with their codes; an error means the block itself was refused (wrong
    /// number, broken chain, bad orderer signature, storage failure) and
    /// nothing was written.
    pub fn commit(&mut self, block: Block, now: UnixTime) -> Result<CommittedBlock> {
        let applied = self.apply(block, now)?;
        self.settle(applied)
    }

    /// The first half of [`commit`](Self::commit): `block` validated,
    /// appended, applied and announced applied. [`settle`](Self::settle)
    /// finishes it; nothing else may be committed in between.
    pub(crate) fn apply(&mut self, block: Block, now: UnixTime) -> Result<Applied> {
        let prepared = prepare(
            block,
            self.context.clone(),
            self.previous_hash(),
            now,
            self.limits,
        );
        self.apply_prepared(prepared, now)
    }

    /// The second half of [`commit`](Self::commit): syncs a stream
    /// checkpoint that was appended unsynced, then announces the block
    /// committed (or, unsigned, counts it staged).
    pub(crate) fn settle(&mut self, applied: Applied) -> Result<CommittedBlock> {
        let Applied {
            mut written,
            validate,
            mvcc,
        } = applied;
        self.settle_written(&mut written)?;
        Ok(written.committed(validate, mvcc))
    }

    /// Commits a stream of blocks, in order, on the calling thread, with up
    /// to `depth` blocks being prepared (decoded, integrity-checked, stage-1
    /// checked) meanwhile on the rayon pool. A block is prepared right here
    /// when nothing could overlap it: the pool has one thread, or the block
    /// is small and arrived alone, as a stream channel's blocks do at low
    /// load. A thread of its own for the preparing cost such a block two
    /// wake-ups and about a context switch more (docs/benchmarks.md,
    /// eighteenth slice). `sink` receives each outcome in order and returns
    /// whether to go on. After a refused block the blocks already prepared
    /// behind it are refused too (they do not extend the chain); a sink
    /// that goes on lets the source offer the refused block again, from
    /// another orderer.
    pub fn commit_stream(
        &mut self,
        mut blocks: impl BlockFeed,
        depth: usize,
        now: impl Fn() -> UnixTime,
        mut sink: impl FnMut(&Result<CommittedBlock>) -> bool,
    ) {
        let depth = depth.max(1);
        let pool = rayon::current_num_threads() > 1;
        let mut previous = self.previous_hash();
        let mut under_way: VecDeque<Preparing> = VecDeque::with_capacity(depth);
        let mut arrived = Vec::with_capacity(depth);
        loop {
            if under_way.is_empty() {
                match blocks.next_block() {
                    Some(block) => arrived.push(block),
                    None => break,
                }
            }
            while under_way.len() + arrived.len() < depth {
                match blocks.arrived() {
                    Some(block) => arrived.push(block),
                    None => break,
                }
            }
            let others = under_way.len() + arrived.len() > 1;
            for block in arrived.drain(..) {
                let expected_previous = previous;
                previous = block
                    .header
                    .as_ref()
                    .map(weft_protos::hash::block_header_hash);
                let transactions = block.data.as_ref().map_or(0, |data| data.data.len());
                let (context, at, limits) = (self.context.clone(), now(), self.limits);
                if pool && (others || worth_parallel(transactions)) {
                    let (done, result) = std::sync::mpsc::sync_channel(1);
                    rayon::spawn(move || {
                        // The receiver is gone only when the committer stopped.
                        let _ = done.send(prepare(block, context, expected_previous, at, limits));
                    });
                    under_way.push_back(Preparing::OnPool(result));
                } else {
                    let prepared = prepare(block, context, expected_previous, at, limits);
                    under_way.push_back(Preparing::Ready(Box::new(prepared)));
                }
            }
            let prepared = match under_way.pop_front() {
                Some(Preparing::Ready(prepared)) => *prepared,
                Some(Preparing::OnPool(result)) => match result.recv() {
                    Ok(prepared) => prepared,
                    Err(_) => break,
                },
                None => break,
            };
            // A config block or a chaincode definition changes the context
            // later blocks are checked against: those prepared before it are
            // prepared again (`apply_prepared`).
            let outcome = self
                .apply_prepared(prepared, now())
                .and_then(|applied| self.settle(applied));
            if !sink(&outcome) {
                break;
            }
        }
    }

    /// The header hash the next block must name as its previous hash.
    fn previous_hash(&self) -> Option<weft_protos::hash::Hash> {
        self.ledger.last_header_hash()
    }

    /// The serial part of committing: duplicates, MVCC, append, apply.
    fn apply_prepared(&mut self, prepared: Prepared, now: UnixTime) -> Result<Applied> {
        let number = prepared.decoded.header.number;
        if number != self.ledger.height() {
            return Err(Error::BadBlock {
                channel: self.channel_id.clone(),
                block: number,
                reason: format!("expected block {}", self.ledger.height()),
            });
        }
        // A block prepared before a config change, or against a chain tip
        // that has moved, is prepared again with what holds now.
        let stale = !Arc::ptr_eq(&prepared.context, &self.context)
            || prepared.expected_previous != self.previous_hash();
        let Prepared {
            mut block,
            decoded,
            mut codes,
            integrity,
            validate_time,
            ..
        } = if stale {
            prepare(
                prepared.block,
                self.context.clone(),
                self.previous_hash(),
                now,
                self.limits,
            )
        } else {
            prepared
        };
        let signed = match integrity {
            Ok(signed) => signed,
            Err(reason) => return Err(self.refuse(number, reason)?),
        };
        if !signed {
            let limit = self.context.stream_checkpoint.unwrap_or(1);
            let unsigned = self.staged_transactions + decoded.transactions.len() as u64;
            if unsigned >= u64::from(limit) {
                let reason = format!(
                    "{unsigned} transactions unsigned since the last checkpoint: the orderers \
                     sign at the latest every {limit}"
                );
                return Err(self.refuse(number, reason)?);
            }
        }
        let mvcc_started = Instant::now();
        let tx_ids: Vec<&str> = decoded
            .transactions
            .iter()
            .flatten()
            .map(|transaction| transaction.tx_id())
            .collect();
        let committed = self.ledger.stored_tx_ids(&tx_ids)?;
        mark_duplicate_tx_ids(
            &decoded,
            &mut codes,
            |tx_id| committed.contains(tx_id),
            &mut HashSet::new(),
        );
        check_key_level_policies(
            &decoded,
            &mut codes,
            self.state.as_ref(),
            &self.context,
            now,
        )?;
        validate_block(&decoded, &mut codes, self.state.as_ref())?;
        let mvcc = mvcc_started.elapsed();
        set_filter(&mut block, &codes);
        let written = self.write(&block, &decoded, codes, signed)?;
        Ok(Applied {
            written,
            validate: validate_time,
            mvcc,
        })
    }

    /// The error for block `number`, refused for `reason`. With blocks
    /// staged, they are rolled back first: they came from the same stream
    /// as a block that does not verify.
    fn refuse(&mut self, number: u64, reason: String) -> Result<Error> {
        let Some(from) = self.staged_from else {
            return Ok(Error::BadBlock {
                channel: self.channel_id.clone(),
                block: number,
                reason,
            });
        };
        self.roll_back_staged(from)?;
        tracing::warn!(
            channel = %self.channel_id,
            block = number,
            %reason,
            rolled_back = number - from,
            "a stream block failed its checks: rolled back to the last checkpoint"
        );
        Ok(Error::RolledBack {
            channel: self.channel_id.clone(),
            block: number,
            to: from,
            reason,
        })
    }

    /// Undoes the staged blocks `from..`: the state returns to the last
    /// checkpoint (block `from - 1`), the block store is truncated to it,
    /// and chaincode definitions staged with them are forgotten.
    fn roll_back_staged(&mut self, from: u64) -> Result<()> {
        let corrupt = |reason: &str| Error::Corrupt {
            channel: self.channel_id.clone(),
            block: from - 1,
            reason: reason.to_owned(),
        };
        let checkpoint = self
            .ledger
            .block(from - 1)?
            .ok_or_else(|| corrupt("the last checkpoint is missing"))?;
        let transactions = checkpoint.data.as_ref().map_or(0, |data| data.data.len());
        self.state
            .rollback_to(last_height(from - 1, transactions))?;
        self.ledger.truncate(from)?;
        self.applied.send_replace(from);
        self.staged_from = None;
        self.staged_transactions = 0;
        self.staged_settled.clear();
        self.staged_purges.clear();
        self.indexes.rolled_back();
        let definitions = ChaincodeDefinitions::load(self.state.as_ref())?;
        self.context = Arc::new(self.context.with_definitions(Arc::new(definitions)));
        *self.published.write() = self.context.clone();
        Ok(())
    }

    /// Commits a block another peer of this organisation has already
    /// validated, with its codes in TRANSACTIONS_FILTER, without validating
    /// it again: an endorser replica's way of keeping its state current
    /// (FastFabric's endorser/committer separation). The chain is still
    /// checked (number, previous hash, data hash), so a replica never
    /// stores a block that does not extend its chain; signatures, policies
    /// and MVCC are the validating peer's word.
    pub fn apply_validated(&mut self, block: Block) -> Result<CommittedBlock> {
        let started = Instant::now();
        let decoded = decode(block.clone(), self.limits);
        let number = decoded.header.number;
        let refuse = |reason: String| Error::BadBlock {
            channel: self.channel_id.clone(),
            block: number,
            reason,
        };
        if number != self.ledger.height() {
            return Err(refuse(format!("expected block {}", self.ledger.height())));
        }
        if self.previous_hash().map(|hash| hash.to_vec())
            != Some(decoded.header.previous_hash.to_vec())
        {
            return Err(refuse("previous hash does not match the chain".to_owned()));
        }
        let data_hash =
            weft_protos::hash::data_hash_of(decoded.raw_envelopes.iter().map(|e| e.as_ref()));
        if data_hash.as_slice() != decoded.header.data_hash.as_ref() {
            return Err(refuse(
                "data hash does not match the block's data".to_owned(),
            ));
        }
        let codes = stored_codes(&block)
            .filter(|codes| codes.len() == decoded.transactions.len())
            .ok_or_else(|| {
                refuse("no validation codes (TRANSACTIONS_FILTER) for its transactions".to_owned())
            })?;
        let mvcc = started.elapsed();
        let written = self.write(&block, &decoded, codes, true)?;
        self.settle(Applied {
            written,
            validate: Duration::ZERO,
            mvcc,
        })
    }

    /// Appends a block whose codes are settled, applies its valid writes,
    /// takes up its configuration, and announces it applied;
    /// [`settle_written`](Self::settle_written) then shows it to readers.
    /// An unsigned block of a stream channel is staged instead (appended
    /// unsynced, applied, shown to readers with the next checkpoint).
    fn write(
        &mut self,
        block: &Block,
        decoded: &DecodedBlock,
        settled_codes: Vec<TxValidationCode>,
        signed: bool,
    ) -> Result<Written> {
        let codes = settled_codes.as_slice();
        let number = decoded.header.number;
        let mut batch = update_batch(decoded, codes, self.state.as_ref())?;
        let mut private = match &self.private_data_of {
            Some((msp_id, source)) => {
                private::gather(decoded, codes, &self.context, msp_id, source.as_ref())
            }
            None => BlockPrivateData::default(),
        };
        if signed {
            // The checkpoint confirms the blocks staged before it.
            private.settled.append(&mut self.staged_settled);
        } else {
            // A staged block may be rolled back and fetched again: its
            // transactions' transient entries stay until the checkpoint.
            self.staged_settled.append(&mut private.settled);
        }
        let committed = private::decode_committed(number, &private.committed);
        private::apply(&mut batch, &committed, self.state.as_ref())?;
        let expired = private::purge_expired(&mut batch, self.state.as_ref(), number)?;
        private.rewritten = private::pruned(&self.ledger, &expired)?;
        private.key_writes = private::key_writes(&committed);
        // A staged block's purges rewrite the block store's copies with
        // the checkpoint (a rolled-back block must find them as they were).
        let own_purges = private::purges_in(decoded, codes);
        let purges = if signed {
            let mut purges = std::mem::take(&mut self.staged_purges);
            purges.extend(own_purges);
            purges
        } else {
            own_purges
        };
        private::purge_keys(
            &mut batch,
            number,
            &purges,
            signed,
            &mut private,
            &self.ledger,
            self.state.as_ref(),
        )?;
        if !signed {
            self.staged_purges.extend(purges);
        }
        private::schedule_expiry(
            &mut batch,
            decoded,
            codes,
            &self.context.definitions,
            &committed,
        );
        // Data found since for earlier blocks, with a signed block only: a
        // staged one may be rolled back.
        if let Some(queue) = self.reconciled.as_ref().filter(|_| signed) {
            let waiting = queue.take();
            private.abandoned.extend(waiting.abandoned);
            if !waiting.found.is_empty() {
                private::complete(
                    &mut batch,
                    &mut private,
                    self.state.as_ref(),
                    &self.ledger,
                    number,
                    &self.context.definitions,
                    waiting.found,
                )?;
            }
        }
        self.indexes.update(
            &mut batch,
            self.state.as_ref(),
            &self.context.definitions,
            last_height(number, codes.len()),
            &self.channel_id,
        )?;
        // A stream channel's checkpoint is announced applied before its
        // block is synced: the sync is what durable waits for, not applied.
        let settle_after_apply = signed && self.context.stream_checkpoint.is_some();
        let append_started = Instant::now();
        // The block's history writes come from this decoded copy, not from
        // the store decoding the block again.
        let history = || {
            weft_ledger::history_writes(decoded, |index| {
                codes.get(index) == Some(&TxValidationCode::Valid)
            })
        };
        self.ledger
            .append_with_history(block, history, &private, !signed || settle_after_apply)?;
        let block_store = append_started.elapsed();
        let apply_started = Instant::now();
        self.state.apply(&batch, last_height(number, codes.len()))?;
        let state = apply_started.elapsed();

        let new_config = config_in(
            decoded
                .transactions
                .iter()
                .zip(codes)
                .filter(|(_, code)| **code == TxValidationCode::Valid)
                .map(|(transaction, _)| transaction),
        );
        let reconfigured = new_config.is_some();
        if let Some(config) = new_config {
            self.context = Arc::new(self.context.reconfigured(number, &config)?);
        }
        let redefined = decoded
            .transactions
            .iter()
            .zip(codes)
            .any(|(transaction, code)| {
                *code == TxValidationCode::Valid && writes_definitions(transaction)
            });
        if redefined {
            self.indexes.redefined();
            let definitions = ChaincodeDefinitions::load(self.state.as_ref())?;
            self.context = Arc::new(self.context.with_definitions(Arc::new(definitions)));
        }
        if reconfigured || redefined {
            *self.published.write() = self.context.clone();
        }
        self.applied.send_replace(number + 1);
        Ok(Written {
            number,
            codes: settled_codes,
            staged: !signed,
            syncs: settle_after_apply,
            reconfigured,
            block_store,
            state,
        })
    }

    /// Finishes [`write`](Self::write): syncs a stream checkpoint appended
    /// unsynced, and only then shows the block to readers (its writes are
    /// in the state and its configuration is current). A staged block
    /// waits for the checkpoint that covers it.
    fn settle_written(&mut self, written: &mut Written) -> Result<()> {
        if written.syncs {
            let settle_started = Instant::now();
            self.ledger.settle_unsynced()?;
            written.block_store += settle_started.elapsed();
        }
        if written.staged {
            self.staged_from.get_or_insert(written.number);
            self.staged_transactions += written.codes.len() as u64;
        } else {
            self.staged_from = None;
            self.staged_transactions = 0;
            self.committed.send_replace(written.number + 1);
        }
        Ok(())
    }
}

/// A block validated, appended, applied and announced applied, on its way
/// to [`ChannelCommitter::settle`].
#[must_use = "a block applied is committed only once settled"]
pub(crate) struct Applied {
    written: Written,
    validate: Duration,
    mvcc: Duration,
}

impl Applied {
    /// Whether settling waits for the disk: a stream checkpoint announced
    /// applied before its sync.
    pub(crate) fn syncs(&self) -> bool {
        self.written.syncs
    }
}

/// What writing a block did.
struct Written {
    number: u64,
    codes: Vec<TxValidationCode>,
    staged: bool,
    /// A stream checkpoint appended unsynced: settling syncs it.
    syncs: bool,
    reconfigured: bool,
    block_store: Duration,
    state: Duration,
}

impl Written {
    /// The whole account of the block, given the earlier stages' times.
    fn committed(self, validate: Duration, mvcc: Duration) -> CommittedBlock {
        CommittedBlock {
            number: self.number,
            codes: self.codes,
            reconfigured: self.reconfigured,
            staged: self.staged,
            timings: StageTimings {
                validate,
                mvcc,
                block_store: self.block_store,
                state: self.state,
            },
        }
    }
}

/// Makes a channel's world state durable, after its block store. Only
/// between two commits: a checkpoint taken while a block is being applied
/// could make durable a state ahead of the synced chain.
pub(crate) struct Checkpointer {
    ledger: Arc<BlockStore>,
    state: Arc<dyn VersionedState>,
}

impl Checkpointer {
    pub(crate) fn checkpoint(&self) -> Result<Option<Height>> {
        self.ledger.sync()?;
        Ok(self.state.checkpoint()?)
    }
}

/// A block with the work done that needs no other block: decoded,
/// integrity checked and through stage 1, against `context`.
struct Prepared {
    block: Block,
    decoded: DecodedBlock,
    codes: Vec<TxValidationCode>,
    /// Hashes and orderer signatures: `Err` holds why the block is refused.
    /// Whether the block is signed (`Ok(false)`: a stream channel's block
    /// between checkpoints), or why it is refused.
    integrity: std::result::Result<bool, String>,
    context: Arc<ChannelContext>,
    /// The chain tip this block was checked against.
    expected_previous: Option<weft_protos::hash::Hash>,
    validate_time: Duration,
}

/// A block of [`ChannelCommitter::commit_stream`] on its way to commit.
enum Preparing {
    Ready(Box<Prepared>),
    OnPool(std::sync::mpsc::Receiver<Prepared>),
}

/// Where [`ChannelCommitter::commit_stream`] takes its blocks from, in
/// order: waiting for the next one, or taking one only if it has arrived.
pub trait BlockFeed {
    /// The next block, once it arrives; `None` when the feed has ended.
    fn next_block(&mut self) -> Option<Block>;
    /// The next block if it has arrived already.
    fn arrived(&mut self) -> Option<Block>;
}

/// Blocks at hand: every one has arrived.
impl<I: Iterator<Item = Block>> BlockFeed for I {
    fn next_block(&mut self) -> Option<Block> {
        self.next()
    }

    fn arrived(&mut self) -> Option<Block> {
        self.next()
    }
}

/// Prepares a block for commit; runs on any thread.
fn prepare(
    block: Block,
    context: Arc<ChannelContext>,
    expected_previous: Option<weft_protos::hash::Hash>,
    now: UnixTime,
    limits: Limits,
) -> Prepared {
    let started = Instant::now();
    let decoded = decode(block.clone(), limits);
    let integrity =
        check_block_integrity(&block, &decoded, expected_previous.as_ref(), &context, now);
    let codes = if integrity.is_ok() {
        check_block(&decoded, &context, now)
    } else {
        vec![TxValidationCode::NotValidated; decoded.transactions.len()]
    };
    Prepared {
        block,
        decoded,
        codes,
        integrity,
        context,
        expected_previous,
        validate_time: started.elapsed(),
    }
}

/// Refuses a block that does not extend the chain or that the orderers did
/// not sign: previous hash, data hash, and the SIGNATURES metadata against
/// the channel's `/Channel/Orderer/BlockValidation` policy. A stream
/// channel's block may carry no signature (`Ok(false)`), unless it holds a
/// config transaction: config blocks are always checkpoints.
fn check_block_integrity(
    block: &Block,
    decoded: &DecodedBlock,
    expected_previous: Option<&weft_protos::hash::Hash>,
    context: &ChannelContext,
    now: UnixTime,
) -> std::result::Result<bool, String> {
    if expected_previous.map(|hash| hash.as_slice()) != Some(decoded.header.previous_hash.as_ref())
    {
        return Err("previous hash does not match the chain".to_owned());
    }
    let data_hash =
        weft_protos::hash::data_hash_of(decoded.raw_envelopes.iter().map(|e| e.as_ref()));
    if data_hash.as_slice() != decoded.header.data_hash.as_ref() {
        return Err("data hash does not match the block's data".to_owned());
    }
    let signatures = block_signatures(block, &decoded.header)?;
    if signatures.is_empty() && context.stream_checkpoint.is_some() {
        let holds_config = decoded.transactions.iter().flatten().any(|transaction| {
            matches!(
                transaction.body,
                TxBody::Config(_) | TxBody::ConfigUpdate(_)
            )
        });
        if holds_config {
            return Err("an unsigned block holds a config transaction".to_owned());
        }
        return Ok(false);
    }
    context
        .policies
        .evaluate(BLOCK_VALIDATION_POLICY, &signatures, &context.msps, now)
        .map_err(|e| format!("orderer signatures: {e}"))?;
    Ok(true)
}

/// A stream channel reopened after a stop: removes the blocks after the
/// last signed one (or the last config block), which no checkpoint
/// confirmed; they are fetched again. Returns the new height.
fn drop_unconfirmed_tail(channel_id: &str, ledger: &BlockStore, config_number: u64) -> Result<u64> {
    let height = ledger.height();
    let mut confirmed = height;
    while confirmed - 1 > config_number {
        let number = confirmed - 1;
        let block = ledger.block(number)?.ok_or_else(|| Error::Corrupt {
            channel: channel_id.to_owned(),
            block: number,
            reason: "missing below the height".to_owned(),
        })?;
        if weft_protos::block::signature_count(&block) > 0 {
            break;
        }
        confirmed = number;
    }
    if confirmed < height {
        ledger.truncate(confirmed)?;
        tracing::warn!(
            channel = channel_id,
            dropped = height - confirmed,
            height = confirmed,
            "dropped stream blocks no checkpoint had confirmed; they are fetched again"
        );
    }
    Ok(confirmed)
}

/// The policy a block's orderer signatures must satisfy.
const BLOCK_VALIDATION_POLICY: &str = "/Channel/Orderer/BlockValidation";

/// The orderer signatures of a block as signed data: each signature covers
/// the SIGNATURES metadata value, the signature header and the header's DER.
fn block_signatures(
    block: &Block,
    header: &weft_protos::common::BlockHeader,
) -> std::result::Result<Vec<weft_policy::SignedData>, String> {
    let slot = weft_protos::block::metadata_slot(block, BlockMetadataIndex::Signatures)
        .ok_or("the block has no SIGNATURES metadata")?;
    let metadata =
        Metadata::decode(slot.clone()).map_err(|e| format!("SIGNATURES metadata: {e}"))?;
    let header_der = weft_protos::hash::block_header_bytes(header);
    metadata
        .signatures
        .iter()
        .map(|signature| {
            let signature_header =
                weft_protos::common::SignatureHeader::decode(signature.signature_header.clone())
                    .map_err(|e| format!("signature header: {e}"))?;
            let mut data = Vec::with_capacity(
                metadata.value.len() + signature.signature_header.len() + header_der.len(),
            );
            data.extend_from_slice(&metadata.value);
            data.extend_from_slice(&signature.signature_header);
            data.extend_from_slice(&header_der);
            Ok(weft_policy::SignedData {
                data: data.into(),
                identity: signature_header.creator,
                signature: signature.signature.clone(),
            })
        })
        .collect()
}

/// Decodes a block's envelopes, in parallel unless the block is small (a
/// block's transactions are independent until MVCC).
fn decode(block: Block, limits: Limits) -> DecodedBlock {
    let raw_envelopes: Vec<Bytes> = block.data.map(|data| data.data).unwrap_or_default();
    let decode_one = |raw: &Bytes| TxEnvelope::decode(raw.clone(), limits);
    let transactions = if worth_parallel(raw_envelopes.len()) {
        raw_envelopes.par_iter().map(decode_one).collect()
    } else {
        raw_envelopes.iter().map(decode_one).collect()
    };
    DecodedBlock {
        header: block.header.unwrap_or_default(),
        metadata: block.metadata.unwrap_or_default(),
        raw_envelopes,
        transactions,
    }
}

/// The height recorded for a block: its last transaction.
fn last_height(number: u64, transactions: usize) -> Height {
    Height::new(number, transactions.saturating_sub(1) as u64)
}

fn set_filter(block: &mut Block, codes: &[TxValidationCode]) {
    // Validation codes are below 256 by Fabric's definition.
    let filter: Vec<u8> = codes.iter().map(|code| *code as i32 as u8).collect();
    weft_protos::block::set_metadata_slot(
        block,
        BlockMetadataIndex::TransactionsFilter,
        filter.into(),
    );
}

fn stored_codes(block: &Block) -> Option<Vec<TxValidationCode>> {
    let filter = weft_protos::block::metadata_slot(block, BlockMetadataIndex::TransactionsFilter)?;
    filter
        .iter()
        .map(|&code| TxValidationCode::try_from(i32::from(code)).ok())
        .collect()
}

/// Whether a transaction writes to `_lifecycle`'s public state: commits
/// (or changes) a chaincode definition.
fn writes_definitions(
    transaction: &std::result::Result<TxEnvelope, weft_protos::DecodeError>,
) -> bool {
    let Ok(TxEnvelope {
        body: TxBody::Endorser(endorser),
        ..
    }) = transaction
    else {
        return false;
    };
    endorser.actions.iter().any(|action| {
        action
            .namespaces
            .iter()
            .any(|ns| ns.namespace == LIFECYCLE_NAMESPACE && !ns.kv.writes.is_empty())
    })
}

fn config_of(block: &DecodedBlock) -> Option<Config> {
    config_in(block.transactions.iter())
}

/// The config carried by the first config transaction among `transactions`.
fn config_in<'a>(
    transactions: impl Iterator<Item = &'a std::result::Result<TxEnvelope, weft_protos::DecodeError>>,
) -> Option<Config> {
    transactions
        .flatten()
        .find_map(|transaction| match &transaction.body {
            TxBody::Config(envelope) => envelope.config.clone(),
            _ => None,
        })
}

fn channel_of_genesis(genesis: &Block) -> Result<String> {
    let decoded = decode(genesis.clone(), Limits::default());
    match decoded.transactions.first() {
        Some(Ok(transaction)) if decoded.header.number == 0 => {
            Ok(transaction.channel_header.channel_id.clone())
        }
        _ => Err(Error::BadBlock {
            channel: String::new(),
            block: decoded.header.number,
            reason: "not a genesis block".to_owned(),
        }),
    }
}
