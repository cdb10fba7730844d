//! Stage 1½: key-level endorsement policies (Fabric's state-based
//! endorsement), the part of endorsement validation that depends on the
//! world state.
//!
//! A key whose metadata holds a `VALIDATION_PARAMETER` (a chaincode's
//! `SetStateValidationParameter`) may be written, or have its metadata
//! changed, only by a transaction whose endorsements satisfy that policy
//! instead of its chaincode's. Stage 1 runs without the state (blocks are
//! checked in parallel, ahead of their commit) and checks every namespace
//! against its chaincode's rule. This pass runs serially, after the
//! duplicate check and before MVCC, against the state the block commits
//! on, and judges again the transactions that write a key with such a
//! policy, with stage 1's rules (`checks::endorsement_verdict`) given the
//! keys' own, as Fabric's validator (`statebased`, v2.0 rules) judges them:
//!
//! - in each namespace the transaction writes (and the chaincode it
//!   invokes), every public key written or whose metadata is written needs
//!   its own policy if it has one, and the chaincode's rule otherwise
//!   (checked once); likewise every private key, found by its hash (its
//!   metadata is kept under the hash on every peer, in the metadata
//!   namespace of the collection's hashed namespace), needs its own policy
//!   or else its collection's rule; a namespace where no rule was checked
//!   at all needs the chaincode's;
//! - a key whose metadata an earlier transaction of the same block wrote,
//!   that transaction having passed its endorsement checks, cannot be
//!   written by a later one (Fabric's `ValidationParameterUpdatedError`):
//!   nothing is judged by a policy that was about to change.
//!
//! Either failure is ENDORSEMENT_POLICY_FAILURE, as is a policy that does
//! not decode (where Fabric's peer would stop validating the block). A
//! transaction that touches no such key keeps its stage-1 code, so a state
//! without key-level policies costs one lookup per namespace written.
//!
//! One departure: Fabric judges the endorsements of a transaction whose
//! TxID repeats an earlier one of the same block before marking it
//! DUPLICATE_TXID, so its metadata write can still invalidate later
//! transactions; here a duplicate is never judged and never counts.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use prost::Message;
use weft_msp::UnixTime;
use weft_policy::SignaturePolicy;
use weft_protos::kvrwset::KvMetadataWrite;
use weft_protos::tx::VALIDATION_PARAMETER;
use weft_protos::view::{DecodedBlock, NamespaceRwSet, TxBody};
use weft_statedb::{StateReader, hashed_namespace, key_metadata_namespace};

use crate::checks::{
    KeyRule, KeyRules, StateKey, endorsement_verdict, verified_endorsers, written_hashes,
    written_keys,
};
use crate::{ChannelContext, TxValidationCode};

/// Judges again, in block order, the transactions of `block` still valid
/// (or refused only by their chaincodes' rules in stage 1) that write a
/// key with a key-level policy, updating `codes` in place.
pub fn check_key_level_policies(
    block: &DecodedBlock,
    codes: &mut [TxValidationCode],
    state: &dyn StateReader,
    context: &ChannelContext,
    now: UnixTime,
) -> weft_statedb::Result<()> {
    let mut policies = KeyPolicies::new(state);
    // Keys whose metadata an earlier transaction of the block, valid so
    // far, wrote.
    let mut changed: HashSet<StateKey<'static>> = HashSet::new();
    for (transaction, code) in block.transactions.iter().zip(codes.iter_mut()) {
        if !matches!(
            *code,
            TxValidationCode::Valid | TxValidationCode::EndorsementPolicyFailure
        ) {
            continue;
        }
        let Ok(transaction) = transaction else {
            continue;
        };
        let TxBody::Endorser(endorser) = &transaction.body else {
            continue;
        };
        let [action] = endorser.actions.as_slice() else {
            continue;
        };
        let mut rules = KeyRules::new();
        for key in action.namespaces.iter().flat_map(written_state_keys) {
            let rule = if changed.contains(&key) {
                Some(KeyRule::ChangedInBlock)
            } else {
                policies.of(&key.0, &key.1)?.map(KeyRule::Policy)
            };
            if let Some(rule) = rule {
                rules.insert(key, rule);
            }
        }
        if !rules.is_empty() {
            let chaincode = endorser
                .chaincode_id
                .as_ref()
                .map_or("", |id| id.name.as_str());
            let endorsers = verified_endorsers(action, context, now);
            *code = endorsement_verdict(action, chaincode, &rules, &endorsers, context);
            if *code != TxValidationCode::Valid {
                tracing::info!(
                    tx_id = transaction.tx_id(),
                    "the endorsements do not satisfy a key-level endorsement policy"
                );
            }
        }
        if *code == TxValidationCode::Valid {
            changed.extend(
                action
                    .namespaces
                    .iter()
                    .flat_map(metadata_state_keys)
                    .map(|(namespace, key)| {
                        (namespace.into_owned().into(), key.into_owned().into())
                    }),
            );
        }
    }
    Ok(())
}

/// Every key of the world state `namespace`'s writes and metadata writes
/// touch: its public keys, and its collections' private keys by hash.
fn written_state_keys(namespace: &NamespaceRwSet) -> impl Iterator<Item = StateKey<'_>> {
    let name = namespace.namespace.as_str();
    let public = written_keys(namespace).map(move |key| (Cow::Borrowed(name), Cow::Borrowed(key)));
    let private = namespace
        .collection_hashed
        .iter()
        .flat_map(move |collection| {
            let hashed = hashed_namespace(name, &collection.collection);
            written_hashes(collection)
                .map(move |hash| (Cow::Owned(hashed.clone()), Cow::Owned(hex::encode(hash))))
        });
    public.chain(private)
}

/// The keys of the world state whose metadata `namespace` writes.
fn metadata_state_keys(namespace: &NamespaceRwSet) -> impl Iterator<Item = StateKey<'_>> {
    let name = namespace.namespace.as_str();
    let public = namespace
        .kv
        .metadata_writes
        .iter()
        .map(move |write| (Cow::Borrowed(name), Cow::Borrowed(write.key.as_str())));
    let private = namespace
        .collection_hashed
        .iter()
        .flat_map(move |collection| {
            let hashed = hashed_namespace(name, &collection.collection);
            collection.rwset.metadata_writes.iter().map(move |write| {
                (
                    Cow::Owned(hashed.clone()),
                    Cow::Owned(hex::encode(&write.key_hash)),
                )
            })
        });
    public.chain(private)
}

/// The committed key-level policies, looked up key by key, skipping
/// namespaces that hold no key metadata at all.
struct KeyPolicies<'a> {
    state: &'a dyn StateReader,
    /// Whether each namespace looked at holds any key metadata.
    has_metadata: HashMap<String, bool>,
}

impl<'a> KeyPolicies<'a> {
    fn new(state: &'a dyn StateReader) -> Self {
        Self {
            state,
            has_metadata: HashMap::new(),
        }
    }

    /// The committed key-level policy of `key` in `namespace`, if it has
    /// one.
    fn of(
        &mut self,
        namespace: &str,
        key: &str,
    ) -> weft_statedb::Result<Option<Result<Arc<SignaturePolicy>, String>>> {
        let metadata_namespace = key_metadata_namespace(namespace);
        let has_metadata = match self.has_metadata.get(namespace) {
            Some(has) => *has,
            None => {
                let has = !self.state.range(&metadata_namespace, "", "", 1)?.is_empty();
                self.has_metadata.insert(namespace.to_owned(), has);
                has
            }
        };
        if !has_metadata {
            return Ok(None);
        }
        let Some(stored) = self.state.get(&metadata_namespace, key)? else {
            return Ok(None);
        };
        Ok(validation_parameter(namespace, key, &stored.value))
    }
}

/// The key-level policy in a key's stored metadata, if it holds one.
fn validation_parameter(
    namespace: &str,
    key: &str,
    metadata: &[u8],
) -> Option<Result<Arc<SignaturePolicy>, String>> {
    let name = format!("key-level policy of {key:?} in {namespace}");
    let metadata = match KvMetadataWrite::decode(metadata) {
        Ok(metadata) => metadata,
        Err(e) => return Some(Err(format!("{name}: the metadata does not decode: {e}"))),
    };
    let entry = metadata
        .entries
        .into_iter()
        .find(|entry| entry.name == VALIDATION_PARAMETER)?;
    if entry.value.is_empty() {
        return None;
    }
    Some(
        SignaturePolicy::decode(&name, &entry.value)
            .map(Arc::new)
            .map_err(|e| e.to_string()),
    )
}
