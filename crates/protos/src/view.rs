//! A typed view of a Fabric envelope with every layer decoded exactly once.
//!
//! Fabric nests serialized messages inside `bytes` fields many levels deep
//! (envelope → payload → header → transaction → action → proposal response
//! payload → chaincode action → read/write set). Fabric's peer unmarshals the
//! same layers again in each validation step; FastFabric showed that decoding
//! them once and sharing the result removes a large share of the CPU cost.
//! [`TxEnvelope::decode`] does that decode, and every later stage (signature
//! checks, endorsement policy, MVCC, commit, events) reads the view.
//!
//! Bytes that are signed or hashed are kept as the original slices (as
//! [`Bytes`], so nothing is copied): signature checks must run over the bytes
//! that were signed, never over a re-encoding.

use bytes::Bytes;
use prost::Message;

use crate::common::{
    Block, BlockHeader, BlockMetadata, ChannelHeader, ConfigEnvelope, ConfigUpdateEnvelope,
    Envelope, HeaderType, Payload, SignatureHeader,
};
use crate::hash::compute_tx_id;
use crate::kvrwset::{HashedRwSet, KvrwSet};
use crate::protos::{
    ChaincodeAction, ChaincodeActionPayload, ChaincodeEvent, ChaincodeHeaderExtension, ChaincodeId,
    Endorsement, ProposalResponsePayload, Transaction,
};
use crate::rwset::{CollectionHashedReadWriteSet, TxReadWriteSet};
use crate::{DecodeError, Layer};

/// Size limits applied while decoding untrusted bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest envelope accepted, in bytes.
    pub envelope_bytes_max: usize,
}

impl Default for Limits {
    /// Fabric's default `AbsoluteMaxBytes` for a whole batch is 99 MB; no
    /// single envelope can be larger than that and still be ordered.
    fn default() -> Self {
        Self {
            envelope_bytes_max: 99 * 1024 * 1024,
        }
    }
}

/// A block with each envelope decoded into its typed view.
///
/// A transaction that does not decode does not make the block undecodable:
/// the committer marks it invalid (BAD_PAYLOAD and friends) and goes on.
#[derive(Debug, Clone)]
pub struct DecodedBlock {
    pub header: BlockHeader,
    pub metadata: BlockMetadata,
    /// The envelopes exactly as they appear in `BlockData.data`.
    pub raw_envelopes: Vec<Bytes>,
    pub transactions: Vec<Result<TxEnvelope, DecodeError>>,
}

impl DecodedBlock {
    /// Decodes a block and every envelope in it.
    pub fn decode(bytes: Bytes, limits: Limits) -> Result<Self, DecodeError> {
        let block = Block::decode(bytes).map_err(|e| DecodeError::malformed(Layer::Block, e))?;
        Self::from_block(block, limits)
    }

    /// Decodes every envelope of an already decoded block.
    pub fn from_block(block: Block, limits: Limits) -> Result<Self, DecodeError> {
        let header = block.header.ok_or(DecodeError::Missing {
            layer: Layer::Block,
        })?;
        let raw_envelopes = block.data.map(|data| data.data).unwrap_or_default();
        let transactions = raw_envelopes
            .iter()
            .map(|raw| TxEnvelope::decode(raw.clone(), limits))
            .collect();
        Ok(Self {
            header,
            metadata: block.metadata.unwrap_or_default(),
            raw_envelopes,
            transactions,
        })
    }
}

/// One envelope, decoded down to what its header type carries.
#[derive(Debug, Clone)]
pub struct TxEnvelope {
    /// The envelope as received, e.g. an entry of `BlockData.data`.
    pub raw: Bytes,
    /// `Envelope.payload`: the bytes the creator signed.
    pub payload_bytes: Bytes,
    /// `Envelope.signature`: the creator's signature over `payload_bytes`.
    pub signature: Bytes,
    /// `Payload.header.channel_header` as sent (hashed into the proposal hash).
    pub channel_header_bytes: Bytes,
    /// `Payload.header.signature_header` as sent.
    pub signature_header_bytes: Bytes,
    pub channel_header: ChannelHeader,
    pub signature_header: SignatureHeader,
    pub body: TxBody,
}

/// What an envelope carries, by its channel header type.
#[derive(Debug, Clone)]
pub enum TxBody {
    /// `ENDORSER_TRANSACTION`: a chaincode invocation with its endorsements.
    Endorser(EndorserTransaction),
    /// `ENDORSER_TRANSACTION` as an orderer reads it
    /// ([`TxEnvelope::decode_for_ordering`]): the payload data left
    /// undecoded, since ordering checks only the headers and the creator's
    /// signature, as Fabric's orderer does.
    EndorserUnread(Bytes),
    /// `CONFIG`: a new channel configuration.
    Config(ConfigEnvelope),
    /// `CONFIG_UPDATE`: a request to change the channel configuration.
    ConfigUpdate(ConfigUpdateEnvelope),
    /// Any other header type; the payload data is left undecoded.
    Other(Bytes),
}

/// The decoded content of an endorser transaction.
#[derive(Debug, Clone)]
pub struct EndorserTransaction {
    /// The chaincode named in the channel header's extension.
    pub chaincode_id: Option<ChaincodeId>,
    pub actions: Vec<EndorsedAction>,
}

/// One transaction action: a proposal's result with its endorsements.
#[derive(Debug, Clone)]
pub struct EndorsedAction {
    /// The action's signature header (Fabric requires it to match the
    /// envelope's creator).
    pub signature_header: SignatureHeader,
    /// `TransactionAction.header` as sent: the proposal hash covers it.
    pub signature_header_bytes: Bytes,
    /// `ChaincodeActionPayload.chaincode_proposal_payload`, as sent.
    pub chaincode_proposal_payload: Bytes,
    /// `ChaincodeEndorsedAction.proposal_response_payload`: every endorser
    /// signed these bytes followed by its own serialized identity.
    pub proposal_response_payload_bytes: Bytes,
    /// `ProposalResponsePayload.proposal_hash`.
    pub proposal_hash: Bytes,
    pub endorsements: Vec<Endorsement>,
    /// The chaincode action with its `results` and `events` bytes kept.
    pub chaincode_action: ChaincodeAction,
    /// The read/write set, one entry per namespace, decoded.
    pub namespaces: Vec<NamespaceRwSet>,
    /// The chaincode event, if the chaincode set one.
    pub event: Option<ChaincodeEvent>,
}

/// The reads and writes of one namespace (one chaincode).
#[derive(Debug, Clone)]
pub struct NamespaceRwSet {
    pub namespace: String,
    pub kv: KvrwSet,
    /// The hashes of the private data read and written, per collection.
    pub collection_hashed: Vec<CollectionHashes>,
}

/// The hashed reads and writes of one private data collection, as every
/// peer of the channel sees them (the cleartext goes only to members).
#[derive(Debug, Clone, Default)]
pub struct CollectionHashes {
    pub collection: String,
    pub rwset: HashedRwSet,
    /// The hash of the cleartext `CollectionPvtReadWriteSet`.
    pub pvt_rwset_hash: Bytes,
}

/// How far [`TxEnvelope`] decodes an endorser transaction.
#[derive(Clone, Copy)]
enum Depth {
    Whole,
    Headers,
}

impl TxEnvelope {
    /// Decodes every layer of an envelope once.
    pub fn decode(raw: Bytes, limits: Limits) -> Result<Self, DecodeError> {
        Self::decode_to(raw, limits, Depth::Whole)
    }

    /// Decodes the layers an orderer checks: the headers, and the body of
    /// a config or config update envelope; an endorser transaction's data
    /// stays bytes ([`TxBody::EndorserUnread`]).
    pub fn decode_for_ordering(raw: Bytes, limits: Limits) -> Result<Self, DecodeError> {
        Self::decode_to(raw, limits, Depth::Headers)
    }

    fn decode_to(raw: Bytes, limits: Limits, depth: Depth) -> Result<Self, DecodeError> {
        if raw.len() > limits.envelope_bytes_max {
            return Err(DecodeError::TooLarge {
                layer: Layer::Envelope,
                size: raw.len(),
                limit: limits.envelope_bytes_max,
            });
        }
        let envelope = decode_layer::<Envelope>(Layer::Envelope, raw.clone())?;
        let payload = decode_layer::<Payload>(Layer::Payload, envelope.payload.clone())?;
        let header = payload.header.ok_or(DecodeError::Missing {
            layer: Layer::Header,
        })?;
        let channel_header_bytes = header.channel_header;
        let signature_header_bytes = header.signature_header;
        let channel_header =
            decode_required::<ChannelHeader>(Layer::ChannelHeader, channel_header_bytes.clone())?;
        let signature_header = decode_required::<SignatureHeader>(
            Layer::SignatureHeader,
            signature_header_bytes.clone(),
        )?;

        let body = match HeaderType::try_from(channel_header.r#type) {
            Ok(HeaderType::EndorserTransaction) => match depth {
                Depth::Whole => {
                    TxBody::Endorser(decode_endorser_transaction(&channel_header, payload.data)?)
                }
                Depth::Headers => TxBody::EndorserUnread(payload.data),
            },
            Ok(HeaderType::Config) => {
                TxBody::Config(decode_required(Layer::ConfigEnvelope, payload.data)?)
            }
            Ok(HeaderType::ConfigUpdate) => {
                TxBody::ConfigUpdate(decode_required(Layer::ConfigUpdateEnvelope, payload.data)?)
            }
            _ => TxBody::Other(payload.data),
        };

        Ok(Self {
            raw,
            payload_bytes: envelope.payload,
            signature: envelope.signature,
            channel_header_bytes,
            signature_header_bytes,
            channel_header,
            signature_header,
            body,
        })
    }

    /// The transaction ID as claimed in the channel header.
    pub fn tx_id(&self) -> &str {
        &self.channel_header.tx_id
    }

    /// The transaction ID recomputed from the signature header; a valid
    /// transaction has `tx_id() == computed_tx_id()`.
    pub fn computed_tx_id(&self) -> String {
        compute_tx_id(&self.signature_header.nonce, &self.signature_header.creator)
    }

    /// The serialized identity of the envelope's creator.
    pub fn creator(&self) -> &Bytes {
        &self.signature_header.creator
    }

    /// The header type, if it is one Fabric defines.
    pub fn header_type(&self) -> Option<HeaderType> {
        HeaderType::try_from(self.channel_header.r#type).ok()
    }

    /// The read/write sets of an endorser transaction's actions, namespace
    /// by namespace; none for other transactions.
    pub fn namespaces(&self) -> impl Iterator<Item = &NamespaceRwSet> {
        let actions = match &self.body {
            TxBody::Endorser(endorser) => endorser.actions.as_slice(),
            _ => &[],
        };
        actions.iter().flat_map(|action| action.namespaces.iter())
    }
}

fn decode_endorser_transaction(
    channel_header: &ChannelHeader,
    data: Bytes,
) -> Result<EndorserTransaction, DecodeError> {
    let chaincode_id = if channel_header.extension.is_empty() {
        None
    } else {
        decode_layer::<ChaincodeHeaderExtension>(
            Layer::ChaincodeHeaderExtension,
            channel_header.extension.clone(),
        )?
        .chaincode_id
    };
    let transaction = decode_required::<Transaction>(Layer::Transaction, data)?;
    let actions = transaction
        .actions
        .into_iter()
        .map(|action| {
            let signature_header =
                decode_layer::<SignatureHeader>(Layer::SignatureHeader, action.header.clone())?;
            let action_payload = decode_required::<ChaincodeActionPayload>(
                Layer::ChaincodeActionPayload,
                action.payload,
            )?;
            let endorsed = action_payload.action.ok_or(DecodeError::Missing {
                layer: Layer::ChaincodeActionPayload,
            })?;
            let response_payload = decode_required::<ProposalResponsePayload>(
                Layer::ProposalResponsePayload,
                endorsed.proposal_response_payload.clone(),
            )?;
            let chaincode_action = decode_required::<ChaincodeAction>(
                Layer::ChaincodeAction,
                response_payload.extension,
            )?;
            let namespaces = decode_rwset(chaincode_action.results.clone())?;
            let event = if chaincode_action.events.is_empty() {
                None
            } else {
                Some(decode_layer::<ChaincodeEvent>(
                    Layer::ChaincodeEvent,
                    chaincode_action.events.clone(),
                )?)
            };
            Ok(EndorsedAction {
                signature_header,
                signature_header_bytes: action.header,
                chaincode_proposal_payload: action_payload.chaincode_proposal_payload,
                proposal_response_payload_bytes: endorsed.proposal_response_payload,
                proposal_hash: response_payload.proposal_hash,
                endorsements: endorsed.endorsements,
                chaincode_action,
                namespaces,
                event,
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    Ok(EndorserTransaction {
        chaincode_id,
        actions,
    })
}

/// Decodes a `TxReadWriteSet` and the `KVRWSet` of each namespace in it.
pub fn decode_rwset(results: Bytes) -> Result<Vec<NamespaceRwSet>, DecodeError> {
    if results.is_empty() {
        return Ok(Vec::new());
    }
    let tx_rwset = decode_layer::<TxReadWriteSet>(Layer::TxReadWriteSet, results)?;
    tx_rwset
        .ns_rwset
        .into_iter()
        .map(|ns| {
            Ok(NamespaceRwSet {
                kv: decode_layer::<KvrwSet>(Layer::KvReadWriteSet, ns.rwset)?,
                namespace: ns.namespace,
                collection_hashed: ns
                    .collection_hashed_rwset
                    .into_iter()
                    .map(decode_collection_hashes)
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect()
}

fn decode_collection_hashes(
    collection: CollectionHashedReadWriteSet,
) -> Result<CollectionHashes, DecodeError> {
    Ok(CollectionHashes {
        rwset: decode_layer::<HashedRwSet>(Layer::HashedReadWriteSet, collection.hashed_rwset)?,
        collection: collection.collection_name,
        pvt_rwset_hash: collection.pvt_rwset_hash,
    })
}

fn decode_layer<M: Message + Default>(layer: Layer, bytes: Bytes) -> Result<M, DecodeError> {
    M::decode(bytes).map_err(|e| DecodeError::malformed(layer, e))
}

/// Like [`decode_layer`], for layers Fabric requires to be present.
fn decode_required<M: Message + Default>(layer: Layer, bytes: Bytes) -> Result<M, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Missing { layer });
    }
    decode_layer(layer, bytes)
}
