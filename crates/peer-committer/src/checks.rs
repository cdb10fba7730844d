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

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use weft_msp::{Identity, UnixTime};
use weft_policy::{SignaturePolicy, SignedData, valid_identities_checked_by};
use weft_protos::view::{
    CollectionHashes, DecodedBlock, EndorsedAction, EndorserTransaction, NamespaceRwSet, TxBody,
    TxEnvelope,
};
use weft_protos::{DecodeError, Layer};
use weft_statedb::hashed_namespace;

use crate::lifecycle::EndorsementRule;
use crate::{ChannelContext, TxValidationCode};

/// Blocks of fewer transactions are handled on the calling thread: handing
/// one or two transactions to the rayon pool costs more in thread wake-ups
/// than it saves, and a stream channel's blocks are mostly that small.
const PARALLEL_MIN_TRANSACTIONS: usize = 4;

/// Whether `transactions` of one block are worth spreading over the rayon
/// pool. Never with a pool of one thread (`committer.validationThreads: 1`,
/// as `weft network up` sizes peers that share a machine's cores): it would
/// hand the work to that thread, which then spins and yields before it
/// sleeps, for no parallelism at all.
pub(crate) fn worth_parallel(transactions: usize) -> bool {
    !is_small(transactions) && rayon::current_num_threads() > 1
}

/// Whether a block of `transactions` is small: checked and committed in
/// less time than handing it to another thread costs.
pub(crate) fn is_small(transactions: usize) -> bool {
    transactions < PARALLEL_MIN_TRANSACTIONS
}

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
    if !worth_parallel(block.transactions.len()) {
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
        TxBody::ConfigUpdate(_) | TxBody::EndorserUnread(_) | TxBody::Other(_) => {
            return TxValidationCode::UnknownTxType;
        }
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
    let Some(chaincode) = endorser
        .chaincode_id
        .as_ref()
        .filter(|id| !id.name.is_empty())
    else {
        return TxValidationCode::BadHeaderExtension;
    };
    let endorsers = verified_endorsers(action, context, now);
    endorsement_verdict(
        action,
        &chaincode.name,
        &KeyRules::new(),
        &endorsers,
        context,
    )
}

/// What a written key must satisfy instead of its chaincode's (or its
/// collection's) rule, as the serial pass over key-level policies
/// (`key_policies.rs`) finds it.
pub(crate) enum KeyRule {
    /// Its key-level policy (`Err`: a policy that does not decode, which
    /// nothing satisfies).
    Policy(Result<Arc<SignaturePolicy>, String>),
    /// An earlier transaction of the block changed its policy: nothing
    /// satisfies it (Fabric's `ValidationParameterUpdatedError`).
    ChangedInBlock,
}

/// The rules of the written keys that need more than their chaincode's
/// or collection's rule, by [`StateKey`].
pub(crate) type KeyRules<'a> = HashMap<StateKey<'a>, KeyRule>;

/// A key of the world state: a public key in its chaincode's namespace,
/// or the hash (lowercase hex) of a private key in its collection's
/// hashed namespace (`weft_statedb::hashed_namespace`).
pub(crate) type StateKey<'a> = (Cow<'a, str>, Cow<'a, str>);

/// Fabric 2.x's endorsement rules (its `statebased` validator) for one
/// action whose `endorsers` were verified, `key_rules` naming the keys
/// written that need more than their chaincode's rule (none in stage 1).
/// The invoked `chaincode` and every namespace written are checked: in
/// each, a key (public, or private by its hash) with a rule of its own
/// needs that rule; any other public key written needs the chaincode's
/// rule, any other private key its collection's (each checked once); and
/// a namespace where nothing was checked (a read-only invocation) needs
/// the chaincode's.
pub(crate) fn endorsement_verdict(
    action: &EndorsedAction,
    chaincode: &str,
    key_rules: &KeyRules<'_>,
    endorsers: &[Arc<Identity>],
    context: &ChannelContext,
) -> TxValidationCode {
    let mut namespaces: BTreeSet<&str> = action
        .namespaces
        .iter()
        .filter(|namespace| writes_anything(namespace))
        .map(|namespace| namespace.namespace.as_str())
        .collect();
    namespaces.insert(chaincode);
    for name in namespaces {
        let chaincode_rule = context.endorsement_rule(name);
        let Some(namespace) = action.namespaces.iter().find(|ns| ns.namespace == name) else {
            if !context.satisfies(&chaincode_rule, endorsers) {
                return TxValidationCode::EndorsementPolicyFailure;
            }
            continue;
        };
        let mut judge = Judge {
            key_rules,
            endorsers,
            context,
            any_checked: false,
        };
        let mut chaincode_checked = false;
        for key in written_keys(namespace) {
            let key = (Cow::Borrowed(name), Cow::Borrowed(key));
            if !judge.key(&key, &chaincode_rule, &mut chaincode_checked) {
                return TxValidationCode::EndorsementPolicyFailure;
            }
        }
        for collection in &namespace.collection_hashed {
            let mut hashes = written_hashes(collection).peekable();
            if hashes.peek().is_none() {
                continue;
            }
            let rule = context.collection_rule(name, &collection.collection);
            let mut collection_checked = false;
            let state_namespace = if key_rules.is_empty() {
                String::new()
            } else {
                hashed_namespace(name, &collection.collection)
            };
            for hash in hashes {
                let key = if key_rules.is_empty() {
                    (Cow::Borrowed(""), Cow::Borrowed(""))
                } else {
                    (
                        Cow::Borrowed(state_namespace.as_str()),
                        Cow::Owned(hex::encode(hash)),
                    )
                };
                if !judge.key(&key, &rule, &mut collection_checked) {
                    return TxValidationCode::EndorsementPolicyFailure;
                }
            }
        }
        if !judge.any_checked && !context.satisfies(&chaincode_rule, endorsers) {
            return TxValidationCode::EndorsementPolicyFailure;
        }
    }
    TxValidationCode::Valid
}

/// Judges the written keys of one namespace for [`endorsement_verdict`].
struct Judge<'r, 'k> {
    key_rules: &'r KeyRules<'k>,
    endorsers: &'r [Arc<Identity>],
    context: &'r ChannelContext,
    /// Whether any rule was checked in the namespace.
    any_checked: bool,
}

impl Judge<'_, '_> {
    /// Whether the endorsements satisfy `key`'s own rule, or if it has
    /// none, `fallback` (checked once: `fallback_checked` remembers).
    fn key(
        &mut self,
        key: &StateKey<'_>,
        fallback: &EndorsementRule,
        fallback_checked: &mut bool,
    ) -> bool {
        let own = if self.key_rules.is_empty() {
            None
        } else {
            self.key_rules.get(key)
        };
        let holds = match own {
            Some(KeyRule::ChangedInBlock) => false,
            Some(KeyRule::Policy(policy)) => {
                let rule = match policy {
                    Ok(policy) => EndorsementRule::Signature(policy.clone()),
                    Err(reason) => EndorsementRule::Unreadable(reason.clone()),
                };
                self.context.satisfies(&rule, self.endorsers)
            }
            None if *fallback_checked => return true,
            None => {
                *fallback_checked = true;
                self.context.satisfies(fallback, self.endorsers)
            }
        };
        self.any_checked = true;
        holds
    }
}

/// Whether a namespace's write set writes any value or metadata, public
/// or private.
fn writes_anything(namespace: &NamespaceRwSet) -> bool {
    written_keys(namespace).next().is_some()
        || namespace
            .collection_hashed
            .iter()
            .any(|collection| written_hashes(collection).next().is_some())
}

/// The public keys a namespace's writes and metadata writes touch.
pub(crate) fn written_keys(namespace: &NamespaceRwSet) -> impl Iterator<Item = &str> + '_ {
    namespace
        .kv
        .writes
        .iter()
        .map(|write| write.key.as_str())
        .chain(
            namespace
                .kv
                .metadata_writes
                .iter()
                .map(|write| write.key.as_str()),
        )
}

/// The hashes of the private keys a collection's writes and metadata
/// writes touch.
pub(crate) fn written_hashes(collection: &CollectionHashes) -> impl Iterator<Item = &Bytes> + '_ {
    let rwset = &collection.rwset;
    rwset
        .hashed_writes
        .iter()
        .map(|write| &write.key_hash)
        .chain(rwset.metadata_writes.iter().map(|write| &write.key_hash))
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
