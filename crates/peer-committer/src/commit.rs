//! One channel's committer: validates blocks in order and commits them to
//! the world state and the block store.
//!
//! Order of writes, for crash safety: the block (with its validation codes
//! in TRANSACTIONS_FILTER) is appended to the block store first, then the
//! update batch is applied to the world state. On open, any block above the
//! state's durable height is replayed from the store using its stored codes,
//! without validating it again; the result is the same state.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use rayon::prelude::*;
use weft_ledger::BlockStore;
use weft_msp::UnixTime;
use weft_protos::common::{Block, BlockMetadataIndex, Config, Metadata, OrdererBlockMetadata};
use weft_protos::view::{DecodedBlock, Limits, TxBody, TxEnvelope};
use weft_statedb::{Height, VersionedState};

use crate::checks::check_block;
use crate::mvcc::{mark_duplicate_tx_ids, update_batch, validate_block};
use crate::{ChannelContext, Error, Result, TxValidationCode};

/// Fabric's block metadata has five slots.
const METADATA_SLOTS: usize = 5;

/// What committing a block produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedBlock {
    pub number: u64,
    /// One code per transaction, as stored in TRANSACTIONS_FILTER.
    pub codes: Vec<TxValidationCode>,
    /// Whether the block carried a valid config transaction (the channel's
    /// MSPs and policies changed).
    pub reconfigured: bool,
}

/// Validates and commits the blocks of one channel, in order.
pub struct ChannelCommitter {
    channel_id: String,
    context: Arc<ChannelContext>,
    state: Arc<dyn VersionedState>,
    ledger: Arc<BlockStore>,
    limits: Limits,
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
        Ok(Self {
            channel_id,
            context: Arc::new(context),
            state,
            ledger,
            limits: Limits::default(),
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
        let config_number = last_config_index(&tip)
            .ok_or_else(|| corrupt(height - 1, "no last-config index".to_owned()))?;
        let config_block = ledger
            .block(config_number)?
            .ok_or_else(|| corrupt(config_number, "the last config block is missing".to_owned()))?;
        let config = config_of(&decode(config_block, Limits::default()))
            .ok_or_else(|| corrupt(config_number, "holds no config transaction".to_owned()))?;
        let context = ChannelContext::from_config(channel_id, config_number, &config)?;

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
            let batch = update_batch(&decoded, &codes);
            state.apply(&batch, last_height(number, codes.len()))?;
        }
        Ok(Self {
            channel_id: channel_id.to_owned(),
            context: Arc::new(context),
            state,
            ledger,
            limits: Limits::default(),
        })
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

    /// Makes the world state durable up to the last committed block. The
    /// block store is synced first, so a durable state never runs ahead of
    /// the durable chain it is replayed from.
    pub fn checkpoint(&self) -> Result<Option<Height>> {
        self.ledger.sync()?;
        Ok(self.state.checkpoint()?)
    }

    /// Validates `block` and commits it. Invalid transactions are committed
    /// with their codes; an error means the block itself was refused (wrong
    /// number or previous hash, storage failure) and nothing was written.
    pub fn commit(&mut self, block: Block, now: UnixTime) -> Result<CommittedBlock> {
        let mut block = block;
        let decoded = decode(block.clone(), self.limits);
        let number = decoded.header.number;
        if number != self.ledger.height() {
            return Err(Error::BadBlock {
                channel: self.channel_id.clone(),
                block: number,
                reason: format!("expected block {}", self.ledger.height()),
            });
        }
        self.check_block_integrity(&block, &decoded, now)?;
        let mut codes = check_block(&decoded, &self.context, now);
        let mut committed = HashSet::new();
        for transaction in decoded.transactions.iter().flatten() {
            if self.ledger.contains_tx_id(transaction.tx_id())? {
                committed.insert(transaction.tx_id().to_owned());
            }
        }
        mark_duplicate_tx_ids(
            &decoded,
            &mut codes,
            |tx_id| committed.contains(tx_id),
            &mut HashSet::new(),
        );
        validate_block(&decoded, &mut codes, self.state.as_ref())?;
        let batch = update_batch(&decoded, &codes);

        set_filter(&mut block, &codes);
        self.ledger.append(&block)?;
        self.state.apply(&batch, last_height(number, codes.len()))?;

        let new_config = decoded
            .transactions
            .iter()
            .zip(&codes)
            .filter(|(_, code)| **code == TxValidationCode::Valid)
            .find_map(|(transaction, _)| match transaction {
                Ok(TxEnvelope {
                    body: TxBody::Config(envelope),
                    ..
                }) => envelope.config.clone(),
                _ => None,
            });
        let reconfigured = new_config.is_some();
        if let Some(config) = new_config {
            self.context = Arc::new(ChannelContext::from_config(
                &self.channel_id,
                number,
                &config,
            )?);
        }
        Ok(CommittedBlock {
            number,
            codes,
            reconfigured,
        })
    }
}

impl ChannelCommitter {
    /// Refuses a block that does not extend the chain or that the orderers
    /// did not sign: previous hash, data hash, and the SIGNATURES metadata
    /// against the channel's `/Channel/Orderer/BlockValidation` policy.
    fn check_block_integrity(
        &self,
        block: &Block,
        decoded: &DecodedBlock,
        now: UnixTime,
    ) -> Result<()> {
        let refuse = |reason: String| Error::BadBlock {
            channel: self.channel_id.clone(),
            block: decoded.header.number,
            reason,
        };
        let expected_previous = self.ledger.last_header_hash();
        if expected_previous.as_ref().map(|hash| hash.as_slice())
            != Some(decoded.header.previous_hash.as_ref())
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
        let signatures = block_signatures(block, &decoded.header).map_err(refuse)?;
        self.context
            .policies
            .evaluate(
                BLOCK_VALIDATION_POLICY,
                &signatures,
                &self.context.msps,
                now,
            )
            .map_err(|e| refuse(format!("orderer signatures: {e}")))
    }
}

/// The policy a block's orderer signatures must satisfy.
const BLOCK_VALIDATION_POLICY: &str = "/Channel/Orderer/BlockValidation";

/// The orderer signatures of a block as signed data: each signature covers
/// the SIGNATURES metadata value, the signature header and the header's DER.
fn block_signatures(
    block: &Block,
    header: &weft_protos::common::BlockHeader,
) -> std::result::Result<Vec<weft_policy::SignedData>, String> {
    let slot = block
        .metadata
        .as_ref()
        .and_then(|metadata| {
            metadata
                .metadata
                .get(BlockMetadataIndex::Signatures as usize)
        })
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

/// Decodes a block's envelopes in parallel (a block's transactions are
/// independent until MVCC).
fn decode(block: Block, limits: Limits) -> DecodedBlock {
    let raw_envelopes: Vec<Bytes> = block.data.map(|data| data.data).unwrap_or_default();
    let transactions = raw_envelopes
        .par_iter()
        .map(|raw| TxEnvelope::decode(raw.clone(), limits))
        .collect();
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
    let metadata = block.metadata.get_or_insert_with(Default::default);
    if metadata.metadata.len() < METADATA_SLOTS {
        metadata.metadata.resize(METADATA_SLOTS, Bytes::new());
    }
    // Validation codes are below 256 by Fabric's definition.
    let filter: Vec<u8> = codes.iter().map(|code| *code as i32 as u8).collect();
    metadata.metadata[BlockMetadataIndex::TransactionsFilter as usize] = filter.into();
}

fn stored_codes(block: &Block) -> Option<Vec<TxValidationCode>> {
    let filter = block
        .metadata
        .as_ref()?
        .metadata
        .get(BlockMetadataIndex::TransactionsFilter as usize)?;
    filter
        .iter()
        .map(|&code| TxValidationCode::try_from(i32::from(code)).ok())
        .collect()
}

/// The block number of the last config block, from the SIGNATURES metadata.
fn last_config_index(block: &Block) -> Option<u64> {
    let slot = block
        .metadata
        .as_ref()?
        .metadata
        .get(BlockMetadataIndex::Signatures as usize)?;
    let metadata = Metadata::decode(slot.clone()).ok()?;
    let orderer = OrdererBlockMetadata::decode(metadata.value).ok()?;
    Some(orderer.last_config?.index)
}

fn config_of(block: &DecodedBlock) -> Option<Config> {
    block
        .transactions
        .iter()
        .find_map(|transaction| match transaction {
            Ok(TxEnvelope {
                body: TxBody::Config(envelope),
                ..
            }) => envelope.config.clone(),
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
