//! Chaincode definitions agreed through Fabric's `_lifecycle`, as the
//! committer needs them: which policy a chaincode's endorsements must
//! satisfy.
//!
//! A committed definition lives in the `_lifecycle` namespace of the world
//! state; its `namespaces/fields/<name>/ValidationInfo` holds a
//! `StateData` whose bytes are a `ChaincodeValidationInfo`, whose
//! validation parameter is an `ApplicationPolicy`: a signature policy of
//! its own, or a reference to a policy of the channel config (see
//! docs/fabric-lifecycle.md). The definitions are read from the state a
//! block is validated against, so a definition committed in block N
//! applies from block N + 1, as in Fabric.
//!
//! A chaincode without a definition is validated against the channel's
//! `/Channel/Application/Endorsement`, so that weft's built-in chaincodes
//! work before anything is deployed (Fabric would mark such transactions
//! INVALID_CHAINCODE).

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;
use weft_policy::SignaturePolicy;
use weft_policy::collection::{Collection, Collections};
use weft_protos::lifecycle::{ChaincodeValidationInfo, StateData, state_data};
use weft_protos::protos::ApplicationPolicy;
use weft_protos::protos::application_policy::Type as PolicyType;
use weft_statedb::StateReader;

/// The namespace of the lifecycle system chaincode.
pub const LIFECYCLE_NAMESPACE: &str = "_lifecycle";
/// The policy of `_lifecycle` itself.
pub const LIFECYCLE_POLICY: &str = "/Channel/Application/LifecycleEndorsement";
/// The policy of a chaincode without a definition.
pub const DEFAULT_POLICY: &str = "/Channel/Application/Endorsement";
pub use weft_policy::collection::IMPLICIT_COLLECTION_PREFIX;

const FIELDS_PREFIX: &str = "namespaces/fields/";
const VALIDATION_INFO: &str = "/ValidationInfo";
const COLLECTIONS: &str = "/Collections";
/// More chaincodes than one channel defines in practice.
const DEFINITIONS_MAX: usize = 100_000;

/// What the endorsements of a write must satisfy.
#[derive(Debug, Clone)]
pub enum EndorsementRule {
    /// A policy of the channel config, by absolute path.
    Channel(String),
    /// A signature policy carried by a chaincode definition.
    Signature(Arc<SignaturePolicy>),
    /// A stored definition that cannot be read: nothing satisfies it.
    Unreadable(String),
}

/// The endorsement rules and private data collections of the chaincodes
/// defined on a channel.
#[derive(Debug, Clone, Default)]
pub struct ChaincodeDefinitions {
    rules: HashMap<String, EndorsementRule>,
    /// Each defined chaincode's declared collections (implicit ones are
    /// not listed); `Err` for a stored package that cannot be read.
    collections: HashMap<String, Result<Arc<Collections>, String>>,
}

impl ChaincodeDefinitions {
    /// Reads every committed definition from `state`.
    pub fn load(state: &dyn StateReader) -> weft_statedb::Result<Self> {
        let end = format!("{}0", FIELDS_PREFIX.trim_end_matches('/'));
        let fields = state.range(LIFECYCLE_NAMESPACE, FIELDS_PREFIX, &end, DEFINITIONS_MAX)?;
        let mut definitions = Self::default();
        for (key, value) in fields {
            let Some(field) = key.strip_prefix(FIELDS_PREFIX) else {
                continue;
            };
            if let Some(name) = field.strip_suffix(VALIDATION_INFO) {
                let rule = rule_of(name, &value.value).unwrap_or_else(|reason| {
                    tracing::warn!(chaincode = %name, %reason, "unreadable chaincode definition");
                    EndorsementRule::Unreadable(reason)
                });
                definitions.rules.insert(name.to_owned(), rule);
            } else if let Some(name) = field.strip_suffix(COLLECTIONS) {
                let collections = collections_of(&value.value).inspect_err(|reason| {
                    tracing::warn!(chaincode = %name, %reason, "unreadable collection config");
                });
                definitions.collections.insert(name.to_owned(), collections);
            }
        }
        Ok(definitions)
    }

    /// Whether `namespace` has a committed definition.
    pub fn is_defined(&self, namespace: &str) -> bool {
        self.rules.contains_key(namespace)
    }

    /// The collection `collection` that the definition of `namespace`
    /// declares: `Ok(None)` when it declares no such collection (implicit
    /// collections are never declared), `Err` when its collection config
    /// cannot be read.
    pub fn collection(
        &self,
        namespace: &str,
        collection: &str,
    ) -> Result<Option<&Arc<Collection>>, &str> {
        match self.collections.get(namespace) {
            None => Ok(None),
            Some(Ok(collections)) => Ok(collections.get(collection)),
            Some(Err(reason)) => Err(reason.as_str()),
        }
    }

    /// The rule for writes to `namespace` (a chaincode's public state).
    pub fn rule(&self, namespace: &str) -> EndorsementRule {
        if namespace == LIFECYCLE_NAMESPACE {
            return EndorsementRule::Channel(LIFECYCLE_POLICY.to_owned());
        }
        self.rules
            .get(namespace)
            .cloned()
            .unwrap_or_else(|| EndorsementRule::Channel(DEFAULT_POLICY.to_owned()))
    }

    /// The chaincodes with a definition.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.rules.keys().map(String::as_str)
    }
}

/// The rule a stored `ValidationInfo` field value names.
fn rule_of(name: &str, stored: &[u8]) -> Result<EndorsementRule, String> {
    let data = StateData::decode(stored).map_err(|e| format!("ValidationInfo: {e}"))?;
    let Some(state_data::Type::Bytes(bytes)) = data.r#type else {
        return Err("ValidationInfo does not hold bytes".to_owned());
    };
    let info = ChaincodeValidationInfo::decode(bytes)
        .map_err(|e| format!("ChaincodeValidationInfo: {e}"))?;
    let policy = ApplicationPolicy::decode(info.validation_parameter)
        .map_err(|e| format!("ApplicationPolicy: {e}"))?;
    policy_rule(&format!("chaincode {name}"), policy)
}

/// The rule an `ApplicationPolicy` names (`name` says whose, in errors).
pub(crate) fn policy_rule(
    name: &str,
    policy: ApplicationPolicy,
) -> Result<EndorsementRule, String> {
    match policy.r#type {
        Some(PolicyType::SignaturePolicy(envelope)) => SignaturePolicy::compile(name, &envelope)
            .map(|policy| EndorsementRule::Signature(Arc::new(policy)))
            .map_err(|e| e.to_string()),
        Some(PolicyType::ChannelConfigPolicyReference(path)) if path.starts_with('/') => {
            Ok(EndorsementRule::Channel(path))
        }
        Some(PolicyType::ChannelConfigPolicyReference(path)) => Ok(EndorsementRule::Channel(
            format!("/Channel/Application/{path}"),
        )),
        None => Err("the ApplicationPolicy is empty".to_owned()),
    }
}

/// The collections a stored `Collections` field value declares.
fn collections_of(stored: &[u8]) -> Result<Arc<Collections>, String> {
    let data = StateData::decode(stored).map_err(|e| format!("Collections: {e}"))?;
    let bytes = match data.r#type {
        Some(state_data::Type::Bytes(bytes)) => bytes,
        None => bytes::Bytes::new(),
        Some(_) => return Err("Collections does not hold bytes".to_owned()),
    };
    Collections::decode(&bytes, &[])
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use bytes::Bytes;
    use weft_statedb::memory::{MemoryOptions, MemoryState};
    use weft_statedb::{Height, UpdateBatch, VersionedState};

    use super::*;

    fn validation_info(policy: ApplicationPolicy) -> Bytes {
        let info = ChaincodeValidationInfo {
            validation_plugin: "vscc".to_owned(),
            validation_parameter: policy.encode_to_vec().into(),
        };
        StateData {
            r#type: Some(state_data::Type::Bytes(info.encode_to_vec().into())),
        }
        .encode_to_vec()
        .into()
    }

    #[test]
    fn definitions_name_their_policies_and_the_rest_fall_back_to_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let mut batch = UpdateBatch::new();
        let envelope = weft_policy::dsl::parse("OR('Org1MSP.peer')").unwrap();
        for (key, value) in [
            (
                "namespaces/fields/mine/ValidationInfo",
                validation_info(ApplicationPolicy {
                    r#type: Some(PolicyType::SignaturePolicy(envelope)),
                }),
            ),
            (
                "namespaces/fields/shared/ValidationInfo",
                validation_info(ApplicationPolicy {
                    r#type: Some(PolicyType::ChannelConfigPolicyReference(
                        "/Channel/Application/Readers".to_owned(),
                    )),
                }),
            ),
            (
                "namespaces/fields/broken/ValidationInfo",
                Bytes::from_static(b"\xff"),
            ),
            (
                "namespaces/fields/mine/Sequence",
                Bytes::from_static(b"\x08\x01"),
            ),
        ] {
            batch.put(LIFECYCLE_NAMESPACE, key, value, Height::new(1, 0));
        }
        state.apply(&batch, Height::new(1, 0)).unwrap();
        let definitions = ChaincodeDefinitions::load(&state).unwrap();
        let mut names: Vec<&str> = definitions.names().collect();
        names.sort_unstable();
        assert_eq!(names, ["broken", "mine", "shared"]);
        assert!(matches!(
            definitions.rule("mine"),
            EndorsementRule::Signature(_)
        ));
        assert!(matches!(
            definitions.rule("shared"),
            EndorsementRule::Channel(path) if path == "/Channel/Application/Readers"
        ));
        assert!(matches!(
            definitions.rule("broken"),
            EndorsementRule::Unreadable(_)
        ));
        assert!(matches!(
            definitions.rule("undefined"),
            EndorsementRule::Channel(path) if path == DEFAULT_POLICY
        ));
        assert!(matches!(
            definitions.rule(LIFECYCLE_NAMESPACE),
            EndorsementRule::Channel(path) if path == LIFECYCLE_POLICY
        ));
    }
}
