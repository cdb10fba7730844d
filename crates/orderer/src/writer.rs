//! From decided batches to signed, stored blocks.
//!
//! Whatever the consensus, a channel's blocks follow from the sequence of
//! batches it decided: block `n + 1` holds the next batch, links to block
//! `n`'s header hash, and records the number of the last config block.
//! [`BlockWriter::assemble`] is that function and nothing else, so every
//! orderer of a Raft cluster writes byte-identical headers and data for
//! the same batches; only the SIGNATURES metadata (each node's own
//! signature and nonce) differs, as in Fabric.
//!
//! The metadata is laid out as Fabric 2.5's orderers lay it out (see the
//! orderer copies in `tests/fixtures/fabric-2.5`): the last config index
//! travels in the SIGNATURES slot's `OrdererBlockMetadata`, and the
//! deprecated LAST_CONFIG slot is left empty, as are the others. Solo
//! writes no consenter metadata.
//!
//! A batch's envelopes whose TxID the chain ordered lately, or an earlier
//! envelope of the batch carries, are left out of its block
//! ([`crate::replays`]): that too is a function of the chain, so every
//! orderer leaves out the same ones.

use std::sync::Arc;

use bytes::Bytes;
use ring::rand::SecureRandom;
use weft_ledger::BlockStore;
use weft_protos::block::{
    last_config_index, new_block, seal_block_unsigned, sign_block_with_consenter_metadata,
    signature_count,
};
use weft_protos::common::{Block, BlockHeader};
use weft_protos::hash::{Hash, block_header_hash};
use weft_protos::tx::Sign;

use crate::checkpoint::Seal;
use crate::cutter::Batch;
use crate::error::{Error, Result};
use crate::replays::{OrderedTxIds, ReplayWindow, TxKey, envelope_key, tx_keys};

/// Fabric's orderers sign blocks with a fresh 24-byte nonce.
const NONCE_BYTES: usize = 24;

/// What one block carries: a batch of transactions, or a config
/// transaction alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockContent {
    Transactions(Batch),
    Config(Bytes),
}

impl BlockContent {
    /// How many transactions the block holds.
    pub fn len(&self) -> usize {
        match self {
            Self::Transactions(batch) => batch.len(),
            Self::Config(_) => 1,
        }
    }

    /// Whether the block holds no transaction (a stream channel's empty
    /// checkpoint block).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which appends go to disk as the block store's durability setting says
/// (by default a synced write), and which are left unsynced. Not to be
/// confused with that setting ([`weft_ledger::Durability`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SyncRule {
    /// Signed blocks are appended with the store's durability: the block
    /// store is the consenter's only record (solo). A stream channel's
    /// unsigned blocks are left unsynced; the next checkpoint's write
    /// covers them.
    SyncSigned,
    /// No block is synced on its own: the consenter's log (Raft's synced
    /// log, Kafka's partition) can write every block again after a crash,
    /// and the consenter syncs the store before it lets go of that log's
    /// records (Raft compacting, Kafka's TxID mode dropping envelopes).
    BackedByLog,
}

/// Writes a channel's blocks: assembles each decided batch into the next
/// block, signs it as this orderer and appends it to the block store.
pub struct BlockWriter {
    channel_id: String,
    store: Arc<BlockStore>,
    signer: Arc<dyn Sign + Send + Sync>,
    next_number: u64,
    previous_hash: Hash,
    last_config: u64,
    /// Whether the last block written carries a signature.
    tip_signed: bool,
    sync_rule: SyncRule,
    rng: ring::rand::SystemRandom,
    /// The TxIDs the latest blocks ordered.
    ordered: Arc<parking_lot::RwLock<ReplayWindow>>,
}

impl std::fmt::Debug for BlockWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockWriter")
            .field("channel_id", &self.channel_id)
            .field("next_number", &self.next_number)
            .field("last_config", &self.last_config)
            .finish_non_exhaustive()
    }
}

impl BlockWriter {
    /// A writer continuing the chain in `store`, whose last config block
    /// is `last_config`. The store must hold at least the genesis block.
    pub fn new(
        channel_id: &str,
        store: Arc<BlockStore>,
        signer: Arc<dyn Sign + Send + Sync>,
        last_config: u64,
    ) -> Result<Self> {
        let next_number = store.height();
        let previous_hash = store.last_header_hash().ok_or_else(|| Error::BadChain {
            channel: channel_id.to_owned(),
            block: 0,
            reason: "the block store is empty; a channel starts from its genesis block".to_owned(),
        })?;
        if last_config >= next_number {
            return Err(Error::BadChain {
                channel: channel_id.to_owned(),
                block: last_config,
                reason: format!("the last config block is beyond the height {next_number}"),
            });
        }
        let tip = store
            .block(next_number - 1)
            .map_err(|source| Error::Ledger {
                channel: channel_id.to_owned(),
                source,
            })?;
        // A genesis block from a configuration tool may be unsigned; it is
        // authenticated by being configured, not by a signature.
        let tip_signed = next_number == 1 || tip.is_some_and(|tip| signature_count(&tip) > 0);
        let ordered =
            ReplayWindow::load(&store, ReplayWindow::CAPACITY).map_err(|source| Error::Ledger {
                channel: channel_id.to_owned(),
                source,
            })?;
        Ok(Self {
            channel_id: channel_id.to_owned(),
            store,
            signer,
            next_number,
            previous_hash,
            last_config,
            tip_signed,
            sync_rule: SyncRule::SyncSigned,
            rng: ring::rand::SystemRandom::new(),
            ordered: Arc::new(parking_lot::RwLock::new(ordered)),
        })
    }

    /// The TxIDs this writer ordered lately, as it records them.
    pub(crate) fn ordered_tx_ids(&self) -> OrderedTxIds {
        OrderedTxIds(self.ordered.clone())
    }

    /// The writer of a consenter backed by a log (Raft's, or a Kafka
    /// partition): appends are never synced on their own, since that log
    /// can write every block again after a crash; the consenter syncs the
    /// store before it lets go of the log's records.
    pub fn backed_by_log(mut self) -> Self {
        self.sync_rule = SyncRule::BackedByLog;
        self
    }

    /// Whether the last block written is signed: a stream channel whose
    /// tip is not owes its peers a checkpoint.
    pub fn tip_signed(&self) -> bool {
        self.tip_signed
    }

    /// The number the next block will have.
    pub fn next_number(&self) -> u64 {
        self.next_number
    }

    /// The number of the last config block.
    pub fn last_config(&self) -> u64 {
        self.last_config
    }

    /// The next block for `content`, unsigned: a function of the chain so
    /// far and `content` only. Envelopes whose TxID was ordered lately, or
    /// repeats one earlier in the batch, are left out.
    pub fn assemble(&self, content: &BlockContent) -> Block {
        self.assemble_keyed(content).0
    }

    /// [`BlockWriter::assemble`], with the TxID keys the block orders.
    fn assemble_keyed(&self, content: &BlockContent) -> (Block, Vec<TxKey>) {
        let (envelopes, keys) = match content {
            BlockContent::Transactions(batch) => self.first_orderings(batch),
            BlockContent::Config(envelope) => (
                vec![envelope.clone()],
                envelope_key(envelope).into_iter().collect(),
            ),
        };
        (
            new_block(self.next_number, &self.previous_hash, envelopes),
            keys,
        )
    }

    /// The envelopes of `batch` whose TxIDs neither the window nor an
    /// earlier envelope of the batch holds, and their TxID keys. An
    /// envelope naming no TxID is kept: the peers judge it.
    fn first_orderings(&self, batch: &Batch) -> (Vec<Bytes>, Vec<TxKey>) {
        let mut keys = Vec::with_capacity(batch.len());
        let mut in_batch = std::collections::HashSet::new();
        let ordered = self.ordered.read();
        let kept: Vec<Bytes> = batch
            .iter()
            .filter(|envelope| match envelope_key(envelope) {
                Some(key) => {
                    let first = !ordered.holds(&key) && in_batch.insert(key);
                    if first {
                        keys.push(key);
                    }
                    first
                }
                None => true,
            })
            .cloned()
            .collect();
        if kept.len() < batch.len() {
            tracing::info!(
                channel = %self.channel_id,
                block = self.next_number,
                left_out = batch.len() - kept.len(),
                "envelopes whose TxID was already ordered are left out of the block"
            );
        }
        (kept, keys)
    }

    /// Assembles, seals (signs, unless `seal` says otherwise) and appends
    /// the next block; returns it as stored. A config block is always
    /// signed. Blocking: signing and the (possibly synced) write take a
    /// while, so async callers run it on a blocking thread.
    pub fn write(&mut self, content: &BlockContent, seal: Seal) -> Result<Block> {
        self.write_with_consenter_metadata(content, Bytes::new(), seal)
    }

    /// [`BlockWriter::write`], recording `consenter_metadata` in the
    /// orderer metadata (Raft records the log index the block was decided
    /// at, so that a restarted node knows what it has applied).
    pub fn write_with_consenter_metadata(
        &mut self,
        content: &BlockContent,
        consenter_metadata: Bytes,
        seal: Seal,
    ) -> Result<Block> {
        let (mut block, keys) = self.assemble_keyed(content);
        let number = self.next_number;
        let (last_config, seal) = match content {
            BlockContent::Config(_) => (number, Seal::Signed),
            BlockContent::Transactions(_) => (self.last_config, seal),
        };
        match seal {
            Seal::Signed => self.sign(&mut block, last_config, consenter_metadata)?,
            Seal::Unsigned => seal_block_unsigned(&mut block, last_config, consenter_metadata),
        }
        // A process crash loses no write, synced or not. A machine crash
        // may lose unsynced ones: Raft writes them again from its log;
        // solo's were unsigned blocks, never durable for a peer, which
        // waits for the checkpoint whose write covers them.
        let unsynced = match (seal, self.sync_rule) {
            (Seal::Signed, SyncRule::SyncSigned) => false,
            (Seal::Unsigned, _) | (_, SyncRule::BackedByLog) => true,
        };
        self.store
            .append_assembled(&block, unsynced)
            .map_err(|source| Error::Ledger {
                channel: self.channel_id.clone(),
                source,
            })?;
        let header = block.header.as_ref().ok_or_else(|| Error::BadChain {
            channel: self.channel_id.clone(),
            block: number,
            reason: "an assembled block has no header".to_owned(),
        })?;
        self.previous_hash = block_header_hash(header);
        self.next_number = number + 1;
        self.last_config = last_config;
        self.tip_signed = seal == Seal::Signed;
        self.ordered.write().record(number, keys);
        debug_assert_eq!(self.store.height(), self.next_number);
        Ok(block)
    }
}

impl BlockWriter {
    fn sign(&self, block: &mut Block, last_config: u64, consenter_metadata: Bytes) -> Result<()> {
        let number = self.next_number;
        let mut nonce = [0u8; NONCE_BYTES];
        self.rng.fill(&mut nonce).map_err(|_| Error::Sign {
            channel: self.channel_id.clone(),
            block: number,
            reason: "the system random generator failed".to_owned(),
        })?;
        sign_block_with_consenter_metadata(
            block,
            last_config,
            consenter_metadata,
            self.signer.as_ref(),
            Bytes::copy_from_slice(&nonce),
        )
        .map_err(|e| Error::Sign {
            channel: self.channel_id.clone(),
            block: number,
            reason: e.to_string(),
        })
    }

    /// Checks a block another orderer of the cluster wrote (a node
    /// catching up from a Raft snapshot), as it was signed there, before
    /// [`append_pulled`](Self::append_pulled) writes it: it must be the
    /// next block and link to the last one, its header must hash its data,
    /// and its last config block must be possible.
    pub fn check_pulled<'a>(&self, block: &'a Block) -> Result<PulledBlock<'a>> {
        let number = self.next_number;
        let bad = |reason: String| Error::BadChain {
            channel: self.channel_id.clone(),
            block: number,
            reason: format!("a pulled block: {reason}"),
        };
        let header = block
            .header
            .as_ref()
            .ok_or_else(|| bad("no header".to_owned()))?;
        if header.number != number {
            return Err(bad(format!("it is block {}", header.number)));
        }
        if header.previous_hash.as_ref() != self.previous_hash {
            return Err(bad("it does not link to the last block".to_owned()));
        }
        let data = block
            .data
            .as_ref()
            .ok_or_else(|| bad("no data".to_owned()))?;
        if header.data_hash.as_ref() != weft_protos::hash::block_data_hash(data) {
            return Err(bad("its data hash does not match its data".to_owned()));
        }
        let last_config = last_config_index(block)
            .ok_or_else(|| bad("it records no last config block".to_owned()))?;
        if last_config > number || last_config < self.last_config {
            return Err(bad(format!(
                "its last config block {last_config} is impossible"
            )));
        }
        Ok(PulledBlock {
            block,
            header,
            last_config,
        })
    }

    /// Appends a pulled block [`check_pulled`](Self::check_pulled) passed,
    /// with nothing appended since.
    pub fn append_pulled(&mut self, pulled: PulledBlock<'_>) -> Result<()> {
        let PulledBlock {
            block,
            header,
            last_config,
        } = pulled;
        let number = header.number;
        if number != self.next_number {
            return Err(Error::BadChain {
                channel: self.channel_id.clone(),
                block: self.next_number,
                reason: format!("a pulled block checked as block {number} came late"),
            });
        }
        self.store
            .append_assembled(block, false)
            .map_err(|source| Error::Ledger {
                channel: self.channel_id.clone(),
                source,
            })?;
        self.previous_hash = block_header_hash(header);
        self.next_number = number + 1;
        self.last_config = last_config;
        self.tip_signed = signature_count(block) > 0;
        self.ordered.write().record(number, tx_keys(block));
        Ok(())
    }
}

/// A pulled block fit to be appended next: what
/// [`BlockWriter::check_pulled`] read of it.
#[derive(Debug)]
pub struct PulledBlock<'a> {
    block: &'a Block,
    header: &'a BlockHeader,
    last_config: u64,
}

#[cfg(test)]
mod tests {
    // An envelope naming a TxID (its channel header is all the writer
    // reads); the padding tells copies apart.
    use weft_ledger::testing::envelope;
    use weft_ledger::{Durability, StoreConfig};
    use weft_msp::NodeRole;
    use weft_msp::testing::TestOrg;
    use weft_protos::block::last_config_index;
    use weft_protos::common::{BlockMetadataIndex, Metadata};
    use weft_protos::hash::block_data_hash;

    use super::*;
    use prost::Message;

    fn store(dir: &std::path::Path) -> Arc<BlockStore> {
        let store =
            BlockStore::open(&StoreConfig::new(dir).with_durability(Durability::None)).unwrap();
        store
            .append(&new_block(0, &[], vec![Bytes::from_static(b"genesis")]))
            .unwrap();
        Arc::new(store)
    }

    fn envelopes_of(block: &Block) -> Vec<Bytes> {
        block.data.as_ref().unwrap().data.clone()
    }

    #[test]
    fn envelopes_whose_txid_was_ordered_lately_are_left_out_of_blocks() {
        // Goal: a TxID reaches a block once: a copy in a later batch, or a
        // second copy in the same batch, is left out; a writer reopened on
        // the store (a restarted orderer) leaves out the same copies, so
        // every orderer writes the same blocks.
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let signer: Arc<dyn Sign + Send + Sync> =
            Arc::new(TestOrg::new("OrdererMSP").signer(NodeRole::Orderer));
        let mut writer = BlockWriter::new("ch", store.clone(), signer.clone(), 0).unwrap();
        let (a, b, c) = (envelope("a", 1), envelope("b", 1), envelope("c", 1));
        let batch = |envelopes: &[&Bytes]| {
            BlockContent::Transactions(envelopes.iter().map(|e| (*e).clone()).collect())
        };
        let first = writer.write(&batch(&[&a, &b]), Seal::Signed).unwrap();
        assert_eq!(envelopes_of(&first), [a.clone(), b.clone()]);
        // A resent copy of a (other bytes, same TxID), and c twice.
        let again = envelope("a", 2);
        let second = writer
            .write(&batch(&[&again, &c, &envelope("c", 2)]), Seal::Signed)
            .unwrap();
        assert_eq!(envelopes_of(&second), std::slice::from_ref(&c));
        // A block whose every envelope was ordered already is empty.
        let third = writer.write(&batch(&[&b]), Seal::Signed).unwrap();
        assert!(envelopes_of(&third).is_empty());

        let reopened = BlockWriter::new("ch", store, signer, 0).unwrap();
        let replayed = reopened.assemble(&batch(&[&a, &envelope("d", 1)]));
        assert_eq!(envelopes_of(&replayed), [envelope("d", 1)]);
    }

    #[test]
    fn pulled_blocks_are_checked_before_they_are_appended_in_order() {
        // Goal: a node catching up takes another orderer's blocks as they
        // were signed there, in order: a block out of turn, or one whose
        // header does not hash its data, is refused by the check; a
        // checked block is appended as it came; a check outlived by
        // another append is refused rather than written out of turn.
        let ahead_dir = tempfile::tempdir().unwrap();
        let signer: Arc<dyn Sign + Send + Sync> =
            Arc::new(TestOrg::new("OrdererMSP").signer(NodeRole::Orderer));
        let mut ahead = BlockWriter::new("ch", store(ahead_dir.path()), signer.clone(), 0).unwrap();
        let written: Vec<Block> = ["a", "b"]
            .iter()
            .map(|tx| {
                let content = BlockContent::Transactions(vec![envelope(tx, 1)]);
                ahead.write(&content, Seal::Signed).unwrap()
            })
            .collect();

        let behind_dir = tempfile::tempdir().unwrap();
        let behind_store = store(behind_dir.path());
        let mut behind = BlockWriter::new("ch", behind_store.clone(), signer, 0).unwrap();
        let out_of_turn = behind.check_pulled(&written[1]).unwrap_err();
        assert!(
            out_of_turn.to_string().contains("it is block 2"),
            "{out_of_turn}"
        );
        let mut altered = written[0].clone();
        altered.data.as_mut().unwrap().data.push(envelope("c", 1));
        let altered = behind.check_pulled(&altered).unwrap_err();
        assert!(altered.to_string().contains("data hash"), "{altered}");

        let first = behind.check_pulled(&written[0]).unwrap();
        behind.append_pulled(first).unwrap();
        assert_eq!(behind_store.block(1).unwrap().unwrap(), written[0]);
        assert_eq!(behind.next_number(), 2);

        let checked = behind.check_pulled(&written[1]).unwrap();
        let checked_again = behind.check_pulled(&written[1]).unwrap();
        behind.append_pulled(checked).unwrap();
        let late = behind.append_pulled(checked_again).unwrap_err();
        assert!(late.to_string().contains("came late"), "{late}");
        assert_eq!(behind.next_number(), 3);
        assert_eq!(behind_store.height(), 3);
    }

    #[test]
    fn blocks_chain_and_record_the_last_config() {
        // Goal: written blocks link to their predecessor, hash their data,
        // carry one orderer signature naming the last config block (which
        // moves to a config block when one is written), and leave the
        // LAST_CONFIG slot empty as Fabric 2.5 does.
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let org = TestOrg::new("OrdererMSP");
        let signer: Arc<dyn Sign + Send + Sync> = Arc::new(org.signer(NodeRole::Orderer));
        let mut writer = BlockWriter::new("ch", store.clone(), signer.clone(), 0).unwrap();
        let contents = [
            BlockContent::Transactions(vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]),
            BlockContent::Config(Bytes::from_static(b"config")),
            BlockContent::Transactions(vec![Bytes::from_static(b"c")]),
        ];
        let mut previous =
            block_header_hash(store.block(0).unwrap().unwrap().header.as_ref().unwrap());
        for (offset, content) in contents.iter().enumerate() {
            let unsigned = writer.assemble(content);
            let block = writer.write(content, Seal::Signed).unwrap();
            let number = offset as u64 + 1;
            let header = block.header.clone().unwrap();
            assert_eq!(header.number, number);
            assert_eq!(header.previous_hash.as_ref(), previous);
            assert_eq!(
                header.data_hash.as_ref(),
                block_data_hash(block.data.as_ref().unwrap())
            );
            // Signing changes nothing but the metadata.
            assert_eq!(unsigned.header, block.header);
            assert_eq!(unsigned.data, block.data);
            assert_eq!(store.block(number).unwrap().unwrap(), block);
            let metadata = &block.metadata.as_ref().unwrap().metadata;
            assert!(metadata[BlockMetadataIndex::LastConfig as usize].is_empty());
            let signatures =
                Metadata::decode(metadata[BlockMetadataIndex::Signatures as usize].clone())
                    .unwrap();
            assert_eq!(signatures.signatures.len(), 1);
            previous = block_header_hash(&header);
        }
        let indexes: Vec<Option<u64>> = (1..4)
            .map(|n| last_config_index(&store.block(n).unwrap().unwrap()))
            .collect();
        assert_eq!(indexes, [Some(0), Some(2), Some(2)]);
        assert_eq!(writer.last_config(), 2);

        // A writer reopened on the same store continues the chain.
        let writer = BlockWriter::new("ch", store.clone(), signer.clone(), 2).unwrap();
        assert_eq!(writer.next_number(), 4);
        assert_eq!(
            writer
                .assemble(&contents[2])
                .header
                .unwrap()
                .previous_hash
                .as_ref(),
            previous
        );
        assert!(BlockWriter::new("ch", store, signer, 9).is_err());
    }

    #[test]
    fn unsigned_blocks_chain_like_signed_ones_and_config_blocks_are_always_signed() {
        // Goal: a stream channel's unsigned block has the header and data a
        // signed one would have and records the last config; a config
        // block asked to go unsigned is signed all the same.
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let org = TestOrg::new("OrdererMSP");
        let signer: Arc<dyn Sign + Send + Sync> = Arc::new(org.signer(NodeRole::Orderer));
        let mut writer = BlockWriter::new("ch", store.clone(), signer, 0).unwrap();
        let content = BlockContent::Transactions(vec![Bytes::from_static(b"a")]);
        let expected = writer.assemble(&content);
        let block = writer.write(&content, Seal::Unsigned).unwrap();
        assert_eq!((block.header, block.data), (expected.header, expected.data));
        assert_eq!(
            weft_protos::block::signature_count(&store.block(1).unwrap().unwrap()),
            0
        );
        assert_eq!(
            last_config_index(&store.block(1).unwrap().unwrap()),
            Some(0)
        );
        let config = writer
            .write(
                &BlockContent::Config(Bytes::from_static(b"config")),
                Seal::Unsigned,
            )
            .unwrap();
        assert_eq!(weft_protos::block::signature_count(&config), 1);
        let empty = writer
            .write(&BlockContent::Transactions(Vec::new()), Seal::Signed)
            .unwrap();
        assert_eq!(empty.data.as_ref().unwrap().data.len(), 0);
        assert_eq!(weft_protos::block::signature_count(&empty), 1);
    }
}
