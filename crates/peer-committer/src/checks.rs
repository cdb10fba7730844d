//! Stage 1: the checks of a transaction that need no other transaction, so
//! that all transactions of a block (and of several blocks) run in parallel.
//!
//! For each envelope, in Fabric's order: it decoded; its channel header
//! names this channel and a supported type; the creator is a valid identity
//! of a channel MSP and signed the payload; for endorser transactions, the
//! TxID is the hash of nonce and creator, there is exactly one action, the
//! proposal hash matches the action's header and proposal payload, and the
//! endorsements satisfy the endorsement policy of the invoked chaincode and
//! of every namespace the transaction writes. Each endorsement signature is
//! verified once, however many policies are consulted. Key-level policies
//! need the state, so they are checked later (`key_policies.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use weft_msp::{Identity, UnixTime};
use weft_policy::{SignedData, valid_identities_checked_by};
use weft_protos::view::{DecodedBlock, EndorsedAction, EndorserTransaction, TxBody, TxEnvelope};
use weft_protos::{DecodeError, Layer};

use crate::{ChannelContext, TxValidationCode};

/// Blocks of fewer transactions are handled on the calling thread: handing
/// one or two transactions to the rayon pool costs more in thread wake-ups
/// than it saves, and a stream channel's blocks are mostly that small.
pub(crate) const PARALLEL_MIN_TRANSACTIONS: usize = 4;

/// Checks every transaction of a block, in parallel unless the block is
/// small; one code per transaction, `Valid` meaning "passed stage 1".
pub fn check_block(
    block: &DecodedBlock,
    context: &ChannelContext,
    now: UnixTime,
) -> Vec<TxValidationCode> {
    let check = |(transaction, raw): (&Result<TxEnvelope, DecodeError>, &Bytes)| {
        if raw.is_empty() {
            return TxValidationCode::NilEnvelope;
        }
        match transaction {
            Ok(transaction) => check_transaction(transaction, context, now),
            Err(error) => code_for_decode_error(error),
        }
    };
    if block.transactions.len() < PARALLEL_MIN_TRANSACTIONS {
        return block
            .transactions
            .iter()
            .zip(&block.raw_envelopes)
            .map(check)
            .collect();
    }
    block
        .transactions
        .par_iter()
        .zip(block.raw_envelopes.par_iter())
        .map(check)
        .collect()
}

/// Stage 1 for one decoded transaction.
pub fn check_transaction(
    tx: &TxEnvelope,
    context: &ChannelContext,
    now: UnixTime,
) -> TxValidationCode {
    if tx.channel_header.channel_id != context.channel_id {
        return TxValidationCode::TargetChainNotFound;
    }
    let endorser = match &tx.body {
        TxBody::Endorser(endorser) => Some(endorser),
        TxBody::Config(_) => None,
        TxBody::ConfigUpdate(_) | TxBody::Other(_) => return TxValidationCode::UnknownTxType,
    };
    if tx.signature_header.nonce.is_empty() {
        return TxValidationCode::BadCommonHeader;
    }
    let Ok(creator) = context.msps.deserialize(tx.creator(), now) else {
        return TxValidationCode::BadCreatorSignature;
    };
    if creator.verify(&tx.payload_bytes, &tx.signature).is_err() {
        return TxValidationCode::BadCreatorSignature;
    }
    match endorser {
        Some(endorser) => check_endorser_transaction(tx, endorser, context, now),
        // A config transaction's content was checked against the channel's
        // policies by the orderer, whose block signature covers it.
        None => TxValidationCode::Valid,
    }
}

fn check_endorser_transaction(
    tx: &TxEnvelope,
    endorser: &EndorserTransaction,
    context: &ChannelContext,
    now: UnixTime,
) -> TxValidationCode {
    if tx.computed_tx_id() != tx.tx_id() {
        return TxValidationCode::BadProposalTxid;
    }
    let [action] = endorser.actions.as_slice() else {
        return if endorser.actions.is_empty() {
            TxValidationCode::NilTxaction
        } else {
            // Fabric supports exactly one action per transaction.
            TxValidationCode::InvalidEndorserTransaction
        };
    };
    if proposal_hash(tx, action) != action.proposal_hash.as_ref() {
        return TxValidationCode::InvalidEndorserTransaction;
    }
    if sets_private_key_metadata(action) {
        // The metadata of private keys carries key-level endorsement
        // policies that later writes of the hashed keys must satisfy. weft
        // enforces those of public keys only (`key_policies.rs`), so it
        // refuses to record private ones rather than let later writes skip
        // them.
        tracing::warn!(
            tx_id = tx.tx_id(),
            "private key metadata writes are not supported; transaction marked INVALID_OTHER_REASON"
        );
        return TxValidationCode::InvalidOtherReason;
    }
    let Some(chaincode) = endorser
        .chaincode_id
        .as_ref()
        .filter(|id| !id.name.is_empty())
    else {
        return TxValidationCode::BadHeaderExtension;
    };
    let endorsers = verified_endorsers(action, context, now);
    // As Fabric's validator: the invoked chaincode and every namespace
    // written are checked; a namespace's public writes need its rule, each
    // private collection written needs the collection's rule, and a
    // namespace with neither (a read-only invocation) its own rule.
    let mut namespaces: BTreeSet<&str> = action
        .namespaces
        .iter()
        .filter(|ns| {
            !ns.kv.writes.is_empty()
                || !ns.kv.metadata_writes.is_empty()
                || ns
                    .collection_hashed
                    .iter()
                    .any(|collection| !collection.rwset.hashed_writes.is_empty())
        })
        .map(|ns| ns.namespace.as_str())
        .collect();
    namespaces.insert(chaincode.name.as_str());
    for namespace in namespaces {
        let mut rules = Vec::new();
        if let Some(written) = action
            .namespaces
            .iter()
            .find(|ns| ns.namespace == namespace)
        {
            if !written.kv.writes.is_empty() || !written.kv.metadata_writes.is_empty() {
                rules.push(context.endorsement_rule(namespace));
            }
            for collection in &written.collection_hashed {
                if !collection.rwset.hashed_writes.is_empty() {
                    rules.push(context.collection_rule(namespace, &collection.collection));
                }
            }
        }
        if rules.is_empty() {
            rules.push(context.endorsement_rule(namespace));
        }
        if !rules.iter().all(|rule| context.satisfies(rule, &endorsers)) {
            return TxValidationCode::EndorsementPolicyFailure;
        }
    }
    TxValidationCode::Valid
}

/// Whether the action writes metadata of private (hashed) keys.
fn sets_private_key_metadata(action: &EndorsedAction) -> bool {
    action.namespaces.iter().any(|ns| {
        ns.collection_hashed
            .iter()
            .any(|collection| !collection.rwset.metadata_writes.is_empty())
    })
}

/// The endorsers whose identity validates and whose signature over the
/// proposal response payload (followed by their identity) verifies.
pub(crate) fn verified_endorsers(
    action: &EndorsedAction,
    context: &ChannelContext,
    now: UnixTime,
) -> Vec<Arc<Identity>> {
    let signed: Vec<SignedData> = action
        .endorsements
        .iter()
        .map(|endorsement| {
            let mut data = Vec::with_capacity(
                action.proposal_response_payload_bytes.len() + endorsement.endorser.len(),
            );
            data.extend_from_slice(&action.proposal_response_payload_bytes);
            data.extend_from_slice(&endorsement.endorser);
            SignedData {
                data: data.into(),
                identity: endorsement.endorser.clone(),
                signature: endorsement.signature.clone(),
            }
        })
        .collect();
    valid_identities_checked_by(&signed, &context.msps, now, |identity, signed| {
        context.signature_holds(identity, &signed.data, &signed.signature)
    })
}

/// Fabric's proposal hash of a transaction action: SHA-256 over the channel
/// header, the action's signature header and the chaincode proposal
/// payload, as sent. It binds the endorsed result to the proposal.
fn proposal_hash(tx: &TxEnvelope, action: &EndorsedAction) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(&tx.channel_header_bytes);
    hasher.update(&action.signature_header_bytes);
    hasher.update(&action.chaincode_proposal_payload);
    hasher.finalize().into()
}

/// The validation code Fabric gives a transaction whose `layer` is malformed.
pub fn code_for_decode_error(error: &DecodeError) -> TxValidationCode {
    let layer = match error {
        DecodeError::Malformed { layer, .. }
        | DecodeError::Missing { layer }
        | DecodeError::TooLarge { layer, .. } => *layer,
        DecodeError::UnsupportedHeaderType(_) => return TxValidationCode::UnknownTxType,
    };
    match layer {
        Layer::Block | Layer::Envelope | Layer::Payload => TxValidationCode::BadPayload,
        Layer::Header | Layer::SignatureHeader | Layer::SerializedIdentity => {
            TxValidationCode::BadCommonHeader
        }
        Layer::ChannelHeader => TxValidationCode::BadChannelHeader,
        Layer::ChaincodeHeaderExtension => TxValidationCode::BadHeaderExtension,
        Layer::Transaction
        | Layer::TransactionAction
        | Layer::ChaincodeActionPayload
        | Layer::ChaincodeProposalPayload
        | Layer::Proposal
        | Layer::ChaincodeInvocationSpec => TxValidationCode::InvalidEndorserTransaction,
        Layer::ProposalResponsePayload | Layer::ChaincodeAction | Layer::ChaincodeEvent => {
            TxValidationCode::BadResponsePayload
        }
        Layer::TxReadWriteSet | Layer::KvReadWriteSet | Layer::HashedReadWriteSet => {
            TxValidationCode::BadRwset
        }
        Layer::ConfigEnvelope | Layer::ConfigUpdateEnvelope => {
            TxValidationCode::InvalidConfigTransaction
        }
    }
}
