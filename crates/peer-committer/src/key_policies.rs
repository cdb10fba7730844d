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
//! policy, as Fabric's validator (`statebased`, v2.0 rules) judges them:
//!
//! - in each namespace the transaction writes (and the chaincode it
//!   invokes), every public key written or whose metadata is written needs
//!   its own policy if it has one, and the chaincode's rule otherwise
//!   (checked once); each private collection written needs its
//!   collection's rule; a namespace where no rule was checked at all needs
//!   the chaincode's;
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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use prost::Message;
use weft_msp::{Identity, UnixTime};
use weft_policy::SignaturePolicy;
use weft_protos::kvrwset::KvMetadataWrite;
use weft_protos::tx::VALIDATION_PARAMETER;
use weft_protos::view::{DecodedBlock, EndorsedAction, TxBody};
use weft_statedb::{StateReader, key_metadata_namespace};

use crate::checks::verified_endorsers;
use crate::lifecycle::EndorsementRule;
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
    // far, wrote, by namespace.
    let mut changed: HashMap<String, HashSet<String>> = HashMap::new();
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
        let mut rules: HashMap<(&str, &str), KeyRule> = HashMap::new();
        for namespace in &action.namespaces {
            let name = namespace.namespace.as_str();
            for key in written_keys(namespace) {
                let rule = if changed.get(name).is_some_and(|keys| keys.contains(key)) {
                    Some(KeyRule::ChangedInBlock)
                } else {
                    policies.of(name, key)?.map(KeyRule::Policy)
                };
                if let Some(rule) = rule {
                    rules.insert((name, key), rule);
                }
            }
        }
        if !rules.is_empty() {
            let chaincode = endorser
                .chaincode_id
                .as_ref()
                .map_or("", |id| id.name.as_str());
            let endorsers = verified_endorsers(action, context, now);
            *code = judge(action, chaincode, &rules, &endorsers, context);
            if *code != TxValidationCode::Valid {
                tracing::info!(
                    tx_id = transaction.tx_id(),
                    "the endorsements do not satisfy a key-level endorsement policy"
                );
            }
        }
        if *code == TxValidationCode::Valid {
            for namespace in &action.namespaces {
                if namespace.kv.metadata_writes.is_empty() {
                    continue;
                }
                let keys = changed.entry(namespace.namespace.clone()).or_default();
                keys.extend(namespace.kv.metadata_writes.iter().map(|w| w.key.clone()));
            }
        }
    }
    Ok(())
}

/// What a written key must satisfy beyond stage 1.
enum KeyRule {
    /// Its key-level policy (`Err`: a policy that does not decode, which
    /// nothing satisfies).
    Policy(Result<Arc<SignaturePolicy>, String>),
    /// An earlier transaction of the block changed its metadata.
    ChangedInBlock,
}

/// Fabric's v2.0 rules for one transaction whose keys in `rules` carry
/// key-level policies (or were changed in the block).
fn judge(
    action: &EndorsedAction,
    chaincode: &str,
    rules: &HashMap<(&str, &str), KeyRule>,
    endorsers: &[Arc<Identity>],
    context: &ChannelContext,
) -> TxValidationCode {
    let mut namespaces: BTreeSet<&str> = action
        .namespaces
        .iter()
        .filter(|namespace| {
            written_keys(namespace).next().is_some()
                || namespace
                    .collection_hashed
                    .iter()
                    .any(|collection| !collection.rwset.hashed_writes.is_empty())
        })
        .map(|namespace| namespace.namespace.as_str())
        .collect();
    namespaces.insert(chaincode);
    for name in namespaces {
        let chaincode_rule = context.endorsement_rule(name);
        // Whether the chaincode's rule was checked, and whether any rule was.
        let mut chaincode_checked = false;
        let mut any_checked = false;
        let Some(namespace) = action.namespaces.iter().find(|ns| ns.namespace == name) else {
            if !context.satisfies(&chaincode_rule, endorsers) {
                return TxValidationCode::EndorsementPolicyFailure;
            }
            continue;
        };
        for key in written_keys(namespace) {
            match rules.get(&(name, key)) {
                Some(KeyRule::ChangedInBlock) => {
                    return TxValidationCode::EndorsementPolicyFailure;
                }
                Some(KeyRule::Policy(policy)) => {
                    let rule = match policy {
                        Ok(policy) => EndorsementRule::Signature(policy.clone()),
                        Err(reason) => EndorsementRule::Unreadable(reason.clone()),
                    };
                    if !context.satisfies(&rule, endorsers) {
                        return TxValidationCode::EndorsementPolicyFailure;
                    }
                    any_checked = true;
                }
                None if chaincode_checked => {}
                None => {
                    if !context.satisfies(&chaincode_rule, endorsers) {
                        return TxValidationCode::EndorsementPolicyFailure;
                    }
                    chaincode_checked = true;
                    any_checked = true;
                }
            }
        }
        for collection in &namespace.collection_hashed {
            if collection.rwset.hashed_writes.is_empty() {
                continue;
            }
            let rule = context.collection_rule(name, &collection.collection);
            if !context.satisfies(&rule, endorsers) {
                return TxValidationCode::EndorsementPolicyFailure;
            }
            any_checked = true;
        }
        if !any_checked && !context.satisfies(&chaincode_rule, endorsers) {
            return TxValidationCode::EndorsementPolicyFailure;
        }
    }
    TxValidationCode::Valid
}

/// The public keys a namespace's writes and metadata writes touch.
fn written_keys(namespace: &weft_protos::view::NamespaceRwSet) -> impl Iterator<Item = &str> + '_ {
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
