//! Building Fabric transactions as a client and an endorser do.
//!
//! The flow of an endorser transaction, in Fabric's encoding:
//!
//! 1. [`Proposal::new`]: a client names a channel, chaincode and arguments;
//!    the TxID is derived from a fresh nonce and the creator.
//! 2. [`Proposal::signed`]: the client signs it (`SignedProposal`).
//! 3. [`endorse`]: an endorser simulates it and signs the result
//!    (`ProposalResponse` with the read/write set, as ESCC does): the
//!    endorsement covers the proposal response payload followed by the
//!    endorser's identity.
//! 4. [`Proposal::transaction`]: the client assembles the endorsements into
//!    a transaction envelope and signs it for the orderer.
//!
//! Signing is delegated to a [`Sign`] implementation (weft's MSP signer
//! implements it), so this module stays free of key handling and I/O.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use prost::Message;

use crate::common::{ChannelHeader, Envelope, Header, HeaderType, Payload, SignatureHeader};
use crate::hash::{compute_tx_id, sha256};
use crate::kvrwset::{
    HashedRwSet, KvMetadataEntry, KvMetadataWrite, KvMetadataWriteHash, KvRead, KvReadHash,
    KvWrite, KvWriteHash, KvrwSet, RangeQueryInfo, Version,
};
use crate::orderer::{SeekInfo, SeekPosition, SeekSpecified, seek_info, seek_position};
use crate::protos::{
    ChaincodeAction, ChaincodeActionPayload, ChaincodeEndorsedAction, ChaincodeHeaderExtension,
    ChaincodeId, ChaincodeInput, ChaincodeInvocationSpec, ChaincodeProposalPayload, ChaincodeSpec,
    Endorsement, ProposalResponse, ProposalResponsePayload, Response, SignedProposal, Transaction,
    TransactionAction,
};
use crate::rwset::{
    CollectionHashedReadWriteSet, CollectionPvtReadWriteSet, NsPvtReadWriteSet, NsReadWriteSet,
    TxPvtReadWriteSet, TxReadWriteSet, tx_read_write_set,
};
use crate::{DecodeError, Layer};

/// Something that signs with an identity: a client, an endorser.
pub trait Sign {
    /// The serialized `msp.SerializedIdentity` of the signer.
    fn identity(&self) -> Bytes;
    /// A signature over `message`, in the form the channel's MSPs accept.
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignError>;
}

/// The signer could not sign.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signing failed: {0}")]
pub struct SignError(pub String);

/// A chaincode invocation proposal, kept with the bytes that were signed.
#[derive(Debug, Clone)]
pub struct Proposal {
    pub tx_id: String,
    pub channel_header: Bytes,
    pub signature_header: Bytes,
    /// The `ChaincodeProposalPayload` (without transient data).
    pub chaincode_proposal_payload: Bytes,
    /// The serialized `protos.Proposal`.
    pub bytes: Bytes,
}

/// What is needed to propose an invocation.
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    pub channel_id: &'a str,
    pub chaincode: &'a str,
    pub args: Vec<Bytes>,
    /// A fresh random nonce (Fabric uses 24 bytes).
    pub nonce: Bytes,
    /// Seconds since the Unix epoch.
    pub timestamp_seconds: i64,
}

impl Proposal {
    /// A proposal by `creator` (serialized identity) for `invocation`.
    pub fn new(invocation: &Invocation<'_>, creator: Bytes) -> Self {
        Self::build(invocation, creator, false)
    }

    /// A proposal to run the chaincode's `Init` (`ChaincodeInput.is_init`),
    /// for a chaincode whose definition requires initialisation.
    pub fn new_init(invocation: &Invocation<'_>, creator: Bytes) -> Self {
        Self::build(invocation, creator, true)
    }

    fn build(invocation: &Invocation<'_>, creator: Bytes, is_init: bool) -> Self {
        let tx_id = compute_tx_id(&invocation.nonce, &creator);
        let chaincode_id = ChaincodeId {
            name: invocation.chaincode.to_owned(),
            ..ChaincodeId::default()
        };
        let channel_header = ChannelHeader {
            r#type: HeaderType::EndorserTransaction as i32,
            version: 0,
            timestamp: Some(prost_types::Timestamp {
                seconds: invocation.timestamp_seconds,
                nanos: 0,
            }),
            channel_id: invocation.channel_id.to_owned(),
            tx_id: tx_id.clone(),
            epoch: 0,
            extension: ChaincodeHeaderExtension {
                chaincode_id: Some(chaincode_id.clone()),
            }
            .encode_to_vec()
            .into(),
            tls_cert_hash: Bytes::new(),
        }
        .encode_to_vec();
        let signature_header = SignatureHeader {
            creator,
            nonce: invocation.nonce.clone(),
        }
        .encode_to_vec();
        let spec = ChaincodeInvocationSpec {
            chaincode_spec: Some(ChaincodeSpec {
                r#type: 0,
                chaincode_id: Some(chaincode_id),
                input: Some(ChaincodeInput {
                    args: invocation.args.clone(),
                    is_init,
                    ..ChaincodeInput::default()
                }),
                timeout: 0,
            }),
        };
        let chaincode_proposal_payload = ChaincodeProposalPayload {
            input: spec.encode_to_vec().into(),
            transient_map: Default::default(),
        }
        .encode_to_vec();
        let header = Header {
            channel_header: channel_header.clone().into(),
            signature_header: signature_header.clone().into(),
        };
        let bytes = crate::protos::Proposal {
            header: header.encode_to_vec().into(),
            payload: chaincode_proposal_payload.clone().into(),
            extension: Bytes::new(),
        }
        .encode_to_vec();
        Self {
            tx_id,
            channel_header: channel_header.into(),
            signature_header: signature_header.into(),
            chaincode_proposal_payload: chaincode_proposal_payload.into(),
            bytes: bytes.into(),
        }
    }

    /// Fabric's proposal hash: SHA-256 over channel header, signature header
    /// and chaincode proposal payload. Endorsements bind to it.
    pub fn hash(&self) -> [u8; 32] {
        let mut bytes = Vec::with_capacity(
            self.channel_header.len()
                + self.signature_header.len()
                + self.chaincode_proposal_payload.len(),
        );
        bytes.extend_from_slice(&self.channel_header);
        bytes.extend_from_slice(&self.signature_header);
        bytes.extend_from_slice(&self.chaincode_proposal_payload);
        sha256(&bytes)
    }

    /// The proposal signed by its creator.
    pub fn signed(&self, creator: &dyn Sign) -> Result<SignedProposal, SignError> {
        Ok(SignedProposal {
            proposal_bytes: self.bytes.clone(),
            signature: creator.sign(&self.bytes)?.into(),
        })
    }

    /// The transaction envelope carrying the endorsed result, signed by the
    /// creator. All `responses` must carry the same payload.
    pub fn transaction(
        &self,
        responses: &[ProposalResponse],
        creator: &dyn Sign,
    ) -> Result<Envelope, SignError> {
        let payload = self.transaction_payload(responses)?;
        Ok(Envelope {
            signature: creator.sign(&payload)?.into(),
            payload,
        })
    }

    /// The serialized `common.Payload` of the transaction carrying the
    /// endorsed result: what the creator signs (a Gateway prepares it and
    /// lets the client sign). All `responses` must carry the same payload.
    pub fn transaction_payload(&self, responses: &[ProposalResponse]) -> Result<Bytes, SignError> {
        let first = responses
            .first()
            .ok_or_else(|| SignError("a transaction needs at least one endorsement".to_owned()))?;
        if responses
            .iter()
            .any(|response| response.payload != first.payload)
        {
            return Err(SignError(
                "endorsements disagree on the proposal response payload".to_owned(),
            ));
        }
        let action = ChaincodeActionPayload {
            chaincode_proposal_payload: self.chaincode_proposal_payload.clone(),
            action: Some(ChaincodeEndorsedAction {
                proposal_response_payload: first.payload.clone(),
                endorsements: responses
                    .iter()
                    .filter_map(|response| response.endorsement.clone())
                    .collect(),
            }),
        };
        let transaction = Transaction {
            actions: vec![TransactionAction {
                header: self.signature_header.clone(),
                payload: action.encode_to_vec().into(),
            }],
        };
        Ok(Payload {
            header: Some(Header {
                channel_header: self.channel_header.clone(),
                signature_header: self.signature_header.clone(),
            }),
            data: transaction.encode_to_vec().into(),
        }
        .encode_to_vec()
        .into())
    }
}

/// A proposal as an endorser receives it: every layer decoded once, and the
/// [`Proposal`] an endorsement binds to (its chaincode proposal payload
/// without the transient data, as Fabric hashes it).
#[derive(Debug, Clone)]
pub struct ReceivedProposal {
    pub proposal: Proposal,
    pub channel_header: ChannelHeader,
    pub signature_header: SignatureHeader,
    /// The chaincode named in the channel header's extension.
    pub chaincode_id: ChaincodeId,
    /// The invocation's arguments; the first is the function name by
    /// convention.
    pub args: Vec<Bytes>,
    /// Whether the client asked for the chaincode's `Init` (a chaincode
    /// whose definition requires initialisation).
    pub is_init: bool,
    /// Data for the chaincode that is not recorded on the ledger.
    pub transient: BTreeMap<String, Bytes>,
    /// The creator's signature over the proposal bytes.
    pub signature: Bytes,
}

impl ReceivedProposal {
    /// Decodes a signed proposal; it checks structure only, not signatures.
    pub fn decode(signed: &SignedProposal) -> Result<Self, DecodeError> {
        let decoded = crate::protos::Proposal::decode(signed.proposal_bytes.clone())
            .map_err(|e| DecodeError::malformed(Layer::Proposal, e))?;
        let header =
            Header::decode(decoded.header).map_err(|e| DecodeError::malformed(Layer::Header, e))?;
        let channel_header_bytes = header.channel_header;
        let signature_header_bytes = header.signature_header;
        let channel_header = ChannelHeader::decode(channel_header_bytes.clone())
            .map_err(|e| DecodeError::malformed(Layer::ChannelHeader, e))?;
        let signature_header = SignatureHeader::decode(signature_header_bytes.clone())
            .map_err(|e| DecodeError::malformed(Layer::SignatureHeader, e))?;
        let extension = ChaincodeHeaderExtension::decode(channel_header.extension.clone())
            .map_err(|e| DecodeError::malformed(Layer::ChaincodeHeaderExtension, e))?;
        let chaincode_id = extension.chaincode_id.unwrap_or_default();
        let payload = ChaincodeProposalPayload::decode(decoded.payload)
            .map_err(|e| DecodeError::malformed(Layer::ChaincodeProposalPayload, e))?;
        let spec = ChaincodeInvocationSpec::decode(payload.input.clone())
            .map_err(|e| DecodeError::malformed(Layer::ChaincodeInvocationSpec, e))?;
        let input = spec
            .chaincode_spec
            .and_then(|spec| spec.input)
            .unwrap_or_default();
        let without_transient = ChaincodeProposalPayload {
            input: payload.input,
            transient_map: BTreeMap::new(),
        }
        .encode_to_vec();
        Ok(Self {
            proposal: Proposal {
                tx_id: channel_header.tx_id.clone(),
                channel_header: channel_header_bytes,
                signature_header: signature_header_bytes,
                chaincode_proposal_payload: without_transient.into(),
                bytes: signed.proposal_bytes.clone(),
            },
            channel_header,
            signature_header,
            chaincode_id,
            args: input.args,
            is_init: input.is_init,
            transient: payload.transient_map,
            signature: signed.signature.clone(),
        })
    }
}

/// The result of simulating a proposal, as an endorser reports it.
#[derive(Debug, Clone, Default)]
pub struct SimulationResult {
    /// The serialized `rwset.TxReadWriteSet`.
    pub results: Bytes,
    /// The serialized `protos.ChaincodeEvent`, if any.
    pub events: Bytes,
    pub response: Response,
    pub chaincode_id: ChaincodeId,
}

/// An endorser's signed response to `proposal` (what ESCC produces): the
/// signature covers the proposal response payload followed by the
/// endorser's serialized identity.
pub fn endorse(
    proposal: &Proposal,
    result: &SimulationResult,
    endorser: &dyn Sign,
) -> Result<ProposalResponse, SignError> {
    let payload: Bytes = ProposalResponsePayload {
        proposal_hash: Bytes::copy_from_slice(&proposal.hash()),
        extension: ChaincodeAction {
            results: result.results.clone(),
            events: result.events.clone(),
            response: Some(result.response.clone()),
            chaincode_id: Some(result.chaincode_id.clone()),
        }
        .encode_to_vec()
        .into(),
    }
    .encode_to_vec()
    .into();
    let identity = endorser.identity();
    let mut signed = Vec::with_capacity(payload.len() + identity.len());
    signed.extend_from_slice(&payload);
    signed.extend_from_slice(&identity);
    Ok(ProposalResponse {
        version: 1,
        timestamp: None,
        response: Some(result.response.clone()),
        payload,
        endorsement: Some(Endorsement {
            signature: endorser.sign(&signed)?.into(),
            endorser: identity,
        }),
        interest: None,
    })
}

/// A signed envelope of `header_type` on `channel_id` carrying `data`, as
/// clients send to Deliver (`DELIVER_SEEK_INFO` with a `SeekInfo`) and to
/// Broadcast (`CONFIG_UPDATE`). The channel header carries the TxID derived
/// from `nonce` and the signer, and `timestamp_seconds`.
pub fn signed_envelope(
    header_type: HeaderType,
    channel_id: &str,
    data: Bytes,
    signer: &dyn Sign,
    nonce: Bytes,
    timestamp_seconds: i64,
) -> Result<Envelope, SignError> {
    signed_envelope_bound(
        header_type,
        channel_id,
        data,
        signer,
        nonce,
        timestamp_seconds,
        Bytes::new(),
    )
}

/// [`signed_envelope`] bound to the client's TLS connection: the channel
/// header names `tls_cert_hash`, the SHA-256 of the TLS certificate the
/// client presents, which Deliver services require under mutual TLS.
pub fn signed_envelope_bound(
    header_type: HeaderType,
    channel_id: &str,
    data: Bytes,
    signer: &dyn Sign,
    nonce: Bytes,
    timestamp_seconds: i64,
    tls_cert_hash: Bytes,
) -> Result<Envelope, SignError> {
    let creator = signer.identity();
    let channel_header = ChannelHeader {
        r#type: header_type as i32,
        channel_id: channel_id.to_owned(),
        tx_id: compute_tx_id(&nonce, &creator),
        timestamp: Some(prost_types::Timestamp {
            seconds: timestamp_seconds,
            nanos: 0,
        }),
        tls_cert_hash,
        ..ChannelHeader::default()
    };
    let payload = Payload {
        header: Some(Header {
            channel_header: channel_header.encode_to_vec().into(),
            signature_header: SignatureHeader { creator, nonce }.encode_to_vec().into(),
        }),
        data,
    }
    .encode_to_vec();
    Ok(Envelope {
        signature: signer.sign(&payload)?.into(),
        payload: payload.into(),
    })
}

/// A CONFIG_UPDATE envelope carrying `update` for `channel_id`, signed by
/// each of `signers` as Fabric's `peer channel signconfigtx` signs (a
/// `ConfigSignature`: the signer's `SignatureHeader`, and its signature
/// over that header's bytes followed by the update's), and submitted by
/// `submitter` (the envelope's creator). `nonce` gives each signature
/// header and the envelope a fresh nonce, or fails.
pub fn config_update_envelope(
    channel_id: &str,
    update: &crate::common::ConfigUpdate,
    signers: &[&dyn Sign],
    submitter: &dyn Sign,
    mut nonce: impl FnMut() -> Result<Bytes, SignError>,
    timestamp_seconds: i64,
) -> Result<Envelope, SignError> {
    let config_update: Bytes = update.encode_to_vec().into();
    let signatures = signers
        .iter()
        .map(|signer| {
            let signature_header: Bytes = SignatureHeader {
                creator: signer.identity(),
                nonce: nonce()?,
            }
            .encode_to_vec()
            .into();
            let mut signed = signature_header.to_vec();
            signed.extend_from_slice(&config_update);
            Ok(crate::common::ConfigSignature {
                signature: signer.sign(&signed)?.into(),
                signature_header,
            })
        })
        .collect::<Result<Vec<_>, SignError>>()?;
    let envelope = crate::common::ConfigUpdateEnvelope {
        config_update,
        signatures,
    };
    signed_envelope(
        HeaderType::ConfigUpdate,
        channel_id,
        envelope.encode_to_vec().into(),
        submitter,
        nonce()?,
        timestamp_seconds,
    )
}

/// A Deliver request for blocks `start..` up to `stop` (inclusive;
/// `u64::MAX` for "forever"), waiting for blocks not yet written.
pub fn seek_range(start: u64, stop: u64) -> SeekInfo {
    let specified = |number| SeekPosition {
        r#type: Some(seek_position::Type::Specified(SeekSpecified { number })),
    };
    SeekInfo {
        start: Some(specified(start)),
        stop: Some(specified(stop)),
        behavior: seek_info::SeekBehavior::BlockUntilReady as i32,
        ..SeekInfo::default()
    }
}

/// A transaction's read/write set under construction, encoded as Fabric's
/// simulator encodes it: namespaces in name order, and within each the
/// reads and the writes in key order.
#[derive(Debug, Clone, Default)]
pub struct ReadWriteSetBuilder {
    namespaces: BTreeMap<String, NamespaceSets>,
}

#[derive(Debug, Clone, Default)]
struct NamespaceSets {
    reads: BTreeMap<String, Option<Version>>,
    range_queries: Vec<RangeQueryInfo>,
    writes: BTreeMap<String, Option<Bytes>>,
    /// Each key's new metadata, entries by name (empty: the key's
    /// metadata is removed).
    metadata_writes: BTreeMap<String, BTreeMap<String, Bytes>>,
    /// Private data collections, by name.
    collections: BTreeMap<String, CollectionSets>,
}

/// A collection's reads and writes in plaintext: the transaction carries
/// only their hashes, in plaintext key order as Fabric sorts them.
#[derive(Debug, Clone, Default)]
struct CollectionSets {
    reads: BTreeMap<String, Option<Version>>,
    writes: BTreeMap<String, Option<Bytes>>,
    /// The deleted keys of `writes` that are purges (their past values
    /// are removed too).
    purges: BTreeSet<String>,
    /// Each key's new metadata, entries by name, as for public keys.
    metadata_writes: BTreeMap<String, BTreeMap<String, Bytes>>,
}

impl ReadWriteSetBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a read of `key` at the version `(block, tx)` it was written
    /// at, or `None` if the key did not exist.
    pub fn read(&mut self, namespace: &str, key: &str, version: Option<(u64, u64)>) -> &mut Self {
        self.namespace(namespace).reads.insert(
            key.to_owned(),
            version.map(|(block_num, tx_num)| Version { block_num, tx_num }),
        );
        self
    }

    /// Records a range query and what it returned, in the order queries
    /// were made.
    pub fn range_query(&mut self, namespace: &str, query: RangeQueryInfo) -> &mut Self {
        self.namespace(namespace).range_queries.push(query);
        self
    }

    /// Records a write of `value` to `key`.
    pub fn write(&mut self, namespace: &str, key: &str, value: Bytes) -> &mut Self {
        self.namespace(namespace)
            .writes
            .insert(key.to_owned(), Some(value));
        self
    }

    /// Records a delete of `key`.
    pub fn delete(&mut self, namespace: &str, key: &str) -> &mut Self {
        self.namespace(namespace)
            .writes
            .insert(key.to_owned(), None);
        self
    }

    /// Records `entries` (name → value; `VALIDATION_PARAMETER` holds a
    /// key-level endorsement policy) as the whole new metadata of `key`,
    /// replacing what an earlier call of the transaction recorded for it,
    /// as Fabric's simulator does. No entries removes the key's metadata.
    pub fn write_metadata(
        &mut self,
        namespace: &str,
        key: &str,
        entries: BTreeMap<String, Bytes>,
    ) -> &mut Self {
        self.namespace(namespace)
            .metadata_writes
            .insert(key.to_owned(), entries);
        self
    }

    /// Records a read of private `key` of `collection`, whose hash was
    /// found at version `(block, tx)` (`None`: absent).
    pub fn read_private_hash(
        &mut self,
        namespace: &str,
        collection: &str,
        key: &str,
        version: Option<(u64, u64)>,
    ) -> &mut Self {
        self.collection(namespace, collection).reads.insert(
            key.to_owned(),
            version.map(|(block_num, tx_num)| Version { block_num, tx_num }),
        );
        self
    }

    /// Records a write of private `value` to `key` of `collection`: the
    /// transaction carries the hashes of both, and the hash of the
    /// collection's private write set.
    pub fn write_private(
        &mut self,
        namespace: &str,
        collection: &str,
        key: &str,
        value: Bytes,
    ) -> &mut Self {
        let sets = self.collection(namespace, collection);
        sets.writes.insert(key.to_owned(), Some(value));
        sets.purges.remove(key);
        self
    }

    /// Records a delete of private `key` of `collection`.
    pub fn delete_private(&mut self, namespace: &str, collection: &str, key: &str) -> &mut Self {
        let sets = self.collection(namespace, collection);
        sets.writes.insert(key.to_owned(), None);
        sets.purges.remove(key);
        self
    }

    /// Records a purge of private `key` of `collection`: a delete that
    /// also removes every earlier value of the key from the members'
    /// private data (Fabric 2.5's `PurgePrivateData`).
    pub fn purge_private(&mut self, namespace: &str, collection: &str, key: &str) -> &mut Self {
        let sets = self.collection(namespace, collection);
        sets.writes.insert(key.to_owned(), None);
        sets.purges.insert(key.to_owned());
        self
    }

    /// Records `entries` as the whole new metadata of private `key` of
    /// `collection` (see [`ReadWriteSetBuilder::write_metadata`]): the
    /// transaction carries them under the key's hash, the private write
    /// set names the key alone.
    pub fn write_private_metadata(
        &mut self,
        namespace: &str,
        collection: &str,
        key: &str,
        entries: BTreeMap<String, Bytes>,
    ) -> &mut Self {
        self.collection(namespace, collection)
            .metadata_writes
            .insert(key.to_owned(), entries);
        self
    }

    /// The private writes in plaintext, as the endorsing peer keeps and
    /// hands them to the collections' members: a `TxPvtReadWriteSet` of
    /// every collection written, each set the bytes whose hash
    /// [`ReadWriteSetBuilder::encode`] puts in the transaction. `None` when
    /// nothing private was written.
    pub fn private_writes(&self) -> Option<TxPvtReadWriteSet> {
        let ns_pvt_rwset: Vec<NsPvtReadWriteSet> = self
            .namespaces
            .iter()
            .filter_map(|(namespace, sets)| {
                let collection_pvt_rwset: Vec<CollectionPvtReadWriteSet> = sets
                    .collections
                    .iter()
                    .filter(|(_, collection)| collection.writes_anything())
                    .map(|(name, collection)| CollectionPvtReadWriteSet {
                        collection_name: name.clone(),
                        rwset: collection.private_rwset(),
                    })
                    .collect();
                (!collection_pvt_rwset.is_empty()).then(|| NsPvtReadWriteSet {
                    namespace: namespace.clone(),
                    collection_pvt_rwset,
                })
            })
            .collect();
        (!ns_pvt_rwset.is_empty()).then(|| TxPvtReadWriteSet {
            data_model: tx_read_write_set::DataModel::Kv as i32,
            ns_pvt_rwset,
        })
    }

    /// The serialized `rwset.TxReadWriteSet`.
    pub fn encode(&self) -> Bytes {
        let ns_rwset = self
            .namespaces
            .iter()
            .map(|(namespace, sets)| {
                let kv = KvrwSet {
                    reads: sets
                        .reads
                        .iter()
                        .map(|(key, version)| KvRead {
                            key: key.clone(),
                            version: *version,
                        })
                        .collect(),
                    range_queries_info: sets.range_queries.clone(),
                    writes: kv_writes(&sets.writes),
                    metadata_writes: sets
                        .metadata_writes
                        .iter()
                        .map(|(key, entries)| metadata_write(key, entries))
                        .collect(),
                };
                NsReadWriteSet {
                    namespace: namespace.clone(),
                    rwset: kv.encode_to_vec().into(),
                    collection_hashed_rwset: sets
                        .collections
                        .iter()
                        .map(|(name, collection)| collection.hashed(name))
                        .collect(),
                }
            })
            .collect();
        TxReadWriteSet {
            data_model: tx_read_write_set::DataModel::Kv as i32,
            ns_rwset,
        }
        .encode_to_vec()
        .into()
    }

    fn namespace(&mut self, namespace: &str) -> &mut NamespaceSets {
        self.namespaces.entry(namespace.to_owned()).or_default()
    }

    fn collection(&mut self, namespace: &str, collection: &str) -> &mut CollectionSets {
        self.namespace(namespace)
            .collections
            .entry(collection.to_owned())
            .or_default()
    }
}

/// The name of the key metadata entry that holds a key-level endorsement
/// policy (a serialized `common.SignaturePolicyEnvelope`): Fabric's
/// `MetaDataKeys.VALIDATION_PARAMETER`.
pub const VALIDATION_PARAMETER: &str = "VALIDATION_PARAMETER";

/// A key's metadata as a `KVRWSet` and Fabric's state hold it: entries
/// in name order.
pub fn metadata_write(key: &str, entries: &BTreeMap<String, Bytes>) -> KvMetadataWrite {
    KvMetadataWrite {
        key: key.to_owned(),
        entries: entries
            .iter()
            .map(|(name, value)| KvMetadataEntry {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
    }
}

/// Writes in key order as a `KVRWSet` holds them (`None`: a delete).
fn kv_writes(writes: &BTreeMap<String, Option<Bytes>>) -> Vec<KvWrite> {
    writes
        .iter()
        .map(|(key, value)| KvWrite {
            key: key.clone(),
            is_delete: value.is_none(),
            value: value.clone().unwrap_or_default(),
        })
        .collect()
}

impl CollectionSets {
    /// The collection as a transaction carries it: hashed reads and writes,
    /// and (when it writes) the SHA-256 of its private write set, a
    /// `KVRWSet` of the writes alone.
    fn hashed(&self, name: &str) -> CollectionHashedReadWriteSet {
        let hash = |bytes: &[u8]| Bytes::copy_from_slice(&sha256(bytes));
        let hashed = HashedRwSet {
            hashed_reads: self
                .reads
                .iter()
                .map(|(key, version)| KvReadHash {
                    key_hash: hash(key.as_bytes()),
                    version: *version,
                })
                .collect(),
            hashed_writes: self
                .writes
                .iter()
                .map(|(key, value)| KvWriteHash {
                    key_hash: hash(key.as_bytes()),
                    is_delete: value.is_none(),
                    value_hash: value.as_ref().map(|v| hash(v)).unwrap_or_default(),
                    is_purge: self.purges.contains(key),
                })
                .collect(),
            metadata_writes: self
                .metadata_writes
                .iter()
                .map(|(key, entries)| KvMetadataWriteHash {
                    key_hash: hash(key.as_bytes()),
                    entries: metadata_write(key, entries).entries,
                })
                .collect(),
        };
        CollectionHashedReadWriteSet {
            collection_name: name.to_owned(),
            hashed_rwset: hashed.encode_to_vec().into(),
            pvt_rwset_hash: if self.writes_anything() {
                hash(&self.private_rwset())
            } else {
                Bytes::new()
            },
        }
    }

    /// Whether the collection has a private write set: values or
    /// metadata written.
    fn writes_anything(&self) -> bool {
        !self.writes.is_empty() || !self.metadata_writes.is_empty()
    }

    /// The collection's private write set: a `KVRWSet` of the writes and,
    /// for each key whose metadata is written, the key alone (Fabric keeps
    /// the metadata itself under the key's hash only).
    fn private_rwset(&self) -> Bytes {
        KvrwSet {
            writes: kv_writes(&self.writes),
            metadata_writes: self
                .metadata_writes
                .keys()
                .map(|key| KvMetadataWrite {
                    key: key.clone(),
                    entries: Vec::new(),
                })
                .collect(),
            ..KvrwSet::default()
        }
        .encode_to_vec()
        .into()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn private_purges_and_metadata_are_encoded_as_fabrics_simulator_encodes_them() {
        // Goal: a purge is a delete marked `is_purge` in the hashed set;
        // a private key's metadata travels in the clear under the key's
        // hash, while the private write set names the key alone; the
        // collection's hash covers that private set.
        let mut builder = ReadWriteSetBuilder::new();
        builder
            .write_private("cc", "c", "kept", Bytes::from_static(b"v"))
            .purge_private("cc", "c", "gone")
            .write_private_metadata(
                "cc",
                "c",
                "guarded",
                BTreeMap::from([(VALIDATION_PARAMETER.to_owned(), Bytes::from_static(b"p"))]),
            );
        let rwset = TxReadWriteSet::decode(builder.encode()).unwrap();
        let collection = &rwset.ns_rwset[0].collection_hashed_rwset[0];
        let hashed = HashedRwSet::decode(collection.hashed_rwset.clone()).unwrap();
        let hash = |text: &str| Bytes::copy_from_slice(&sha256(text.as_bytes()));
        let writes: Vec<(Bytes, bool, bool)> = hashed
            .hashed_writes
            .iter()
            .map(|w| (w.key_hash.clone(), w.is_delete, w.is_purge))
            .collect();
        // In plaintext key order: "gone", then "kept".
        assert_eq!(
            writes,
            [(hash("gone"), true, true), (hash("kept"), false, false)]
        );
        assert_eq!(hashed.metadata_writes[0].key_hash, hash("guarded"));
        assert_eq!(hashed.metadata_writes[0].entries[0].value, "p");

        let private = builder.private_writes().unwrap();
        let set = &private.ns_pvt_rwset[0].collection_pvt_rwset[0];
        assert_eq!(collection.pvt_rwset_hash, hash_bytes(&set.rwset));
        let kv = KvrwSet::decode(set.rwset.clone()).unwrap();
        assert_eq!(kv.metadata_writes[0].key, "guarded");
        assert!(kv.metadata_writes[0].entries.is_empty());

        // Written again after the purge, the key is an ordinary write.
        builder.write_private("cc", "c", "gone", Bytes::from_static(b"back"));
        let rwset = TxReadWriteSet::decode(builder.encode()).unwrap();
        let collection = &rwset.ns_rwset[0].collection_hashed_rwset[0];
        let hashed = HashedRwSet::decode(collection.hashed_rwset.clone()).unwrap();
        assert!(!hashed.hashed_writes[0].is_purge);
    }

    fn hash_bytes(bytes: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&sha256(bytes))
    }
}
