//! Reconciliation: private data a member peer could not find when its
//! block committed, asked for again later (Fabric's reconciler).
//!
//! The committer records each collection of a valid transaction that this
//! peer's organisation keeps but whose values were neither in the
//! transient store nor pulled in time as missing, in the block store
//! ([`weft_ledger::MissingPrivateData`]). A [`Reconciler`] round takes the
//! next entries in chain order (each round goes on after the last, and
//! starts again from the oldest at the end, so entries that are never
//! found do not hold up the rest), asks the members' peers for them (the
//! same pull as at commit, [`PrivateWritesSource::pull`]), and checks what
//! comes back against the hashes the transaction carries, reading the
//! transaction from the block store. An entry whose collection's
//! `blockToLive` has passed is settled without asking: its data is gone
//! everywhere. What matches waits in the
//! [`ReconciledQueue`] for the committer, which applies it in the update
//! of the next block it commits (a checkpoint block on a stream channel):
//! the world state and the block store change only on the committer's
//! thread, in the same batches as blocks, so a crash or a replay sees the
//! found data exactly where a block put it (see `private::complete`).
//! On a channel where no block comes, found data waits for one.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use weft_ledger::{BlockStore, MissingPrivateData};
use weft_protos::privatedata::MissingWrites;
use weft_protos::view::{Limits, TxEnvelope};

use crate::ChannelContext;
use crate::private::{
    Expected, Missing, PrivateWritesSource, Reconciled, empty_set, take_matching,
};

/// Found private data, and missing entries given up on, waiting for the
/// committer; shared by a channel's [`Reconciler`] and its committer.
#[derive(Debug, Default)]
pub struct ReconciledQueue {
    waiting: Mutex<Waiting>,
}

/// What waits in a [`ReconciledQueue`].
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    /// Data found, to commit.
    pub(crate) found: Vec<Reconciled>,
    /// Entries whose collection's `blockToLive` has passed: their data is
    /// gone everywhere, and the entries are to be deleted.
    pub(crate) abandoned: Vec<MissingPrivateData>,
}

impl ReconciledQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything waiting, for the committer.
    pub(crate) fn take(&self) -> Waiting {
        std::mem::take(&mut *self.waiting.lock())
    }

    fn push(&self, reconciled: Reconciled) {
        self.waiting.lock().found.push(reconciled);
    }

    fn abandon(&self, entries: Vec<MissingPrivateData>) {
        self.waiting.lock().abandoned.extend(entries);
    }

    /// Whether `missing` waits for the committer.
    fn holds(&self, missing: &MissingPrivateData) -> bool {
        let waiting = self.waiting.lock();
        waiting.abandoned.contains(missing)
            || waiting
                .found
                .iter()
                .any(|reconciled| reconciled.found.contains(missing))
    }

    /// How many transactions' found data wait for the committer.
    pub fn len(&self) -> usize {
        self.waiting.lock().found.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Asks for one channel's missing private data, a round at a time.
pub struct Reconciler {
    ledger: Arc<BlockStore>,
    context: Arc<RwLock<Arc<ChannelContext>>>,
    source: Arc<dyn PrivateWritesSource + Send + Sync>,
    queue: Arc<ReconciledQueue>,
    /// Missing entries asked for per round (Fabric's
    /// `reconcileBatchSize`).
    batch_size: usize,
    /// The last entry the previous round looked at.
    cursor: Mutex<Option<MissingPrivateData>>,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl Reconciler {
    /// A reconciler of the channel whose committer `handle` and `queue`
    /// belong to, asking `source` for at most `batch_size` missing entries
    /// a round.
    pub fn new(
        handle: &crate::ChannelHandle,
        source: Arc<dyn PrivateWritesSource + Send + Sync>,
        queue: Arc<ReconciledQueue>,
        batch_size: usize,
    ) -> Self {
        Self {
            ledger: handle.ledger.clone(),
            context: handle.context.clone(),
            source,
            queue,
            batch_size: batch_size.max(1),
            cursor: Mutex::new(None),
        }
    }

    /// The next `batch_size` missing entries after the last round's, not
    /// found yet (from the oldest again once all were looked at).
    fn next_entries(&self) -> crate::Result<Vec<MissingPrivateData>> {
        let mut cursor = self.cursor.lock();
        let mut entries = self
            .ledger
            .missing_private_data(cursor.as_ref(), self.batch_size)?;
        if entries.is_empty() && cursor.is_some() {
            entries = self.ledger.missing_private_data(None, self.batch_size)?;
        }
        *cursor = if entries.len() < self.batch_size {
            None
        } else {
            entries.last().cloned()
        };
        entries.retain(|entry| !self.queue.holds(entry));
        Ok(entries)
    }

    /// One round: asks for the next missing entries not found yet (see
    /// the module's docs); returns how many were found (and queued for the
    /// committer), not counting those given up.
    pub fn round(&self) -> crate::Result<usize> {
        let mut missing = self.next_entries()?;
        if missing.is_empty() {
            return Ok(0);
        }
        let context = self.context.read().clone();
        // Data past its collection's blockToLive is gone everywhere.
        let height = self.ledger.height();
        let (expired, live): (Vec<_>, Vec<_>) =
            missing.into_iter().partition(|entry| {
                match context
                    .definitions
                    .collection(&entry.namespace, &entry.collection)
                {
                    Ok(Some(declared)) if declared.block_to_live > 0 => {
                        entry
                            .block
                            .saturating_add(declared.block_to_live)
                            .saturating_add(1)
                            <= height
                    }
                    _ => false,
                }
            });
        if !expired.is_empty() {
            self.queue.abandon(expired);
        }
        missing = live;
        if missing.is_empty() {
            return Ok(0);
        }
        let wanted: Vec<Missing> = missing
            .iter()
            .map(|entry| {
                let request = MissingWrites {
                    tx_id: entry.tx_id.clone(),
                    block_number: entry.block,
                    tx_index: entry.tx_index,
                    namespace: entry.namespace.clone(),
                    collection: entry.collection.clone(),
                };
                let members = context.collection_members(&entry.namespace, &entry.collection);
                (request, members)
            })
            .collect();
        let pulled = self.source.pull(&wanted);
        if pulled.is_empty() {
            return Ok(0);
        }
        // The missing entries of each transaction, by position.
        let mut by_transaction: BTreeMap<(u64, u64), Vec<MissingPrivateData>> = BTreeMap::new();
        for entry in missing {
            by_transaction
                .entry((entry.block, entry.tx_index))
                .or_default()
                .push(entry);
        }
        let mut found_count = 0;
        for ((block, tx_index), entries) in by_transaction {
            let Some((_, set)) = pulled
                .iter()
                .find(|(tx_id, _)| entries.iter().any(|entry| entry.tx_id == *tx_id))
            else {
                continue;
            };
            let Some(transaction) = self.transaction(block, tx_index)? else {
                continue;
            };
            let expected: Vec<Expected> = entries
                .iter()
                .filter_map(|entry| {
                    let hash = transaction
                        .namespaces()
                        .filter(|namespace| namespace.namespace == entry.namespace)
                        .flat_map(|namespace| &namespace.collection_hashed)
                        .find(|collection| collection.collection == entry.collection)?
                        .pvt_rwset_hash
                        .clone();
                    Some(Expected {
                        namespace: entry.namespace.clone(),
                        collection: entry.collection.clone(),
                        hash,
                    })
                })
                .collect();
            let mut matched = empty_set();
            let still = take_matching(set, expected, &mut matched);
            let found: Vec<MissingPrivateData> = entries
                .into_iter()
                .filter(|entry| {
                    !still.iter().any(|left| {
                        left.namespace == entry.namespace && left.collection == entry.collection
                    })
                })
                .collect();
            if found.is_empty() {
                continue;
            }
            tracing::info!(
                channel = %context.channel_id,
                block,
                tx_index,
                collections = found.len(),
                "missing private data found; committed with the next block"
            );
            found_count += found.len();
            self.queue.push(Reconciled {
                block,
                tx_index,
                set: matched,
                found,
            });
        }
        Ok(found_count)
    }

    /// Transaction `tx_index` of stored block `block`, decoded.
    fn transaction(&self, block: u64, tx_index: u64) -> crate::Result<Option<TxEnvelope>> {
        let Some(stored) = self.ledger.block(block)? else {
            return Ok(None);
        };
        let envelope = stored
            .data
            .and_then(|data| data.data.into_iter().nth(tx_index as usize));
        Ok(envelope.and_then(|raw| TxEnvelope::decode(raw, Limits::default()).ok()))
    }
}
