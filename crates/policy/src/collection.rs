//! Private data collections: who may hold, read and write a chaincode's
//! private data, as its definition says.
//!
//! A chaincode definition carries a `CollectionConfigPackage` of static
//! collections (name, member organisations as a signature policy, how many
//! peers the endorser must hand the data to, how long it lives, who may
//! read and write it through the chaincode, and an optional endorsement
//! policy of its own). A chaincode defined through `_lifecycle` also has one
//! implicit collection per organisation of the channel,
//! `_implicit_org_<MSP ID>`, whose only member is that organisation. This
//! module turns both into [`Collections`], the form the endorser (access
//! checks, dissemination) and the committer (which peers keep which
//! values, endorsement rules) consult.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use prost::Message;
use weft_protos::common::SignaturePolicyEnvelope;
use weft_protos::protos::collection_config::Payload as CollectionPayload;
use weft_protos::protos::collection_policy_config::Payload as MemberPolicy;
use weft_protos::protos::{ApplicationPolicy, CollectionConfigPackage, StaticCollectionConfig};

use crate::signature::{Principal, SignaturePolicy};

/// The name prefix of an organisation's implicit collection.
pub const IMPLICIT_COLLECTION_PREFIX: &str = "_implicit_org_";

/// The implicit collection of organisation `msp_id`.
pub fn implicit_collection(msp_id: &str) -> String {
    format!("{IMPLICIT_COLLECTION_PREFIX}{msp_id}")
}

/// A chaincode's collection config that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectionError {
    /// The bytes are not a `CollectionConfigPackage`.
    #[error("the collection config does not decode: {0}")]
    Malformed(String),
    /// A collection without the member policy every collection needs.
    #[error("collection {0:?} has no member organisations policy")]
    NoMemberPolicy(String),
    /// A member policy that does not compile.
    #[error("collection {name:?}: {reason}")]
    BadMemberPolicy { name: String, reason: String },
}

/// One collection of a chaincode.
#[derive(Debug, Clone)]
pub struct Collection {
    pub name: String,
    /// The organisations whose peers keep the collection's values: the
    /// MSP IDs its member policy names (Fabric's `MemberOrgs`).
    pub member_orgs: BTreeSet<String>,
    /// Who is a member, for the `memberOnlyRead` / `memberOnlyWrite`
    /// checks of a proposal's creator.
    pub member_policy: Arc<SignaturePolicy>,
    /// Peers besides the endorser that must receive the data before the
    /// endorsement is answered.
    pub required_peer_count: u32,
    /// Peers besides the endorser the data is sent to at most.
    pub maximum_peer_count: u32,
    /// Blocks after which a value is purged (0: kept for ever).
    pub block_to_live: u64,
    pub member_only_read: bool,
    pub member_only_write: bool,
    /// The policy writes to the collection need instead of the
    /// chaincode's; `None`: the chaincode's.
    pub endorsement_policy: Option<ApplicationPolicy>,
    /// Whether this is an organisation's implicit collection.
    pub implicit: bool,
}

impl Collection {
    /// Whether an organisation's peers keep this collection's values.
    pub fn has_member(&self, msp_id: &str) -> bool {
        self.member_orgs.contains(msp_id)
    }

    /// The implicit collection of `msp_id`: its only member, no
    /// dissemination required (Fabric's default for another organisation's
    /// implicit collection; its own peers are not sent the data either).
    pub fn implicit(msp_id: &str) -> Result<Self, CollectionError> {
        let name = implicit_collection(msp_id);
        let policy = crate::dsl::parse(&format!("OR('{msp_id}.member')")).map_err(|e| {
            CollectionError::BadMemberPolicy {
                name: name.clone(),
                reason: e.to_string(),
            }
        })?;
        Self::from_static(
            StaticCollectionConfig {
                name,
                member_orgs_policy: Some(weft_protos::protos::CollectionPolicyConfig {
                    payload: Some(MemberPolicy::SignaturePolicy(policy)),
                }),
                ..StaticCollectionConfig::default()
            },
            true,
        )
    }

    fn from_static(
        config: StaticCollectionConfig,
        implicit: bool,
    ) -> Result<Self, CollectionError> {
        let envelope: SignaturePolicyEnvelope = match config.member_orgs_policy {
            Some(weft_protos::protos::CollectionPolicyConfig {
                payload: Some(MemberPolicy::SignaturePolicy(envelope)),
            }) => envelope,
            _ => return Err(CollectionError::NoMemberPolicy(config.name)),
        };
        let policy = SignaturePolicy::compile(&format!("collection {}", config.name), &envelope)
            .map_err(|e| CollectionError::BadMemberPolicy {
                name: config.name.clone(),
                reason: e.to_string(),
            })?;
        let mut member_orgs = BTreeSet::new();
        for principal in policy.principals() {
            principal_orgs(principal, &mut member_orgs);
        }
        Ok(Self {
            name: config.name,
            member_orgs,
            member_policy: Arc::new(policy),
            required_peer_count: u32::try_from(config.required_peer_count).unwrap_or(0),
            maximum_peer_count: u32::try_from(config.maximum_peer_count).unwrap_or(0),
            block_to_live: config.block_to_live,
            member_only_read: config.member_only_read,
            member_only_write: config.member_only_write,
            endorsement_policy: config.endorsement_policy,
            implicit,
        })
    }
}

/// The MSP IDs a principal names, as Fabric's `MemberOrgs` collects them.
fn principal_orgs(principal: &Principal, orgs: &mut BTreeSet<String>) {
    match principal {
        Principal::Role { msp_id, .. }
        | Principal::OrganizationUnit { msp_id, .. }
        | Principal::Identity { msp_id, .. } => {
            orgs.insert(msp_id.clone());
        }
        Principal::Combined(principals) => {
            for principal in principals {
                principal_orgs(principal, orgs);
            }
        }
        Principal::Anonymity { .. } | Principal::Unsatisfiable(_) => {}
    }
}

/// The collections of one chaincode, by name.
#[derive(Debug, Clone, Default)]
pub struct Collections {
    by_name: BTreeMap<String, Arc<Collection>>,
}

impl Collections {
    /// The collections of a definition whose `Collections` field holds
    /// `package` (a serialized `CollectionConfigPackage`; empty for none),
    /// with the implicit collections of `organisations` when the chaincode
    /// is defined through `_lifecycle`, as Fabric adds them.
    pub fn decode(package: &[u8], organisations: &[String]) -> Result<Self, CollectionError> {
        let package = CollectionConfigPackage::decode(package)
            .map_err(|e| CollectionError::Malformed(e.to_string()))?;
        let mut by_name = BTreeMap::new();
        for config in package.config {
            let Some(CollectionPayload::StaticCollectionConfig(config)) = config.payload else {
                continue;
            };
            let collection = Collection::from_static(config, false)?;
            by_name.insert(collection.name.clone(), Arc::new(collection));
        }
        for msp_id in organisations {
            let collection = Collection::implicit(msp_id)?;
            by_name.insert(collection.name.clone(), Arc::new(collection));
        }
        Ok(Self { by_name })
    }

    /// The collection named `name`, if the definition has it.
    pub fn get(&self, name: &str) -> Option<&Arc<Collection>> {
        self.by_name.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Collection>> {
        self.by_name.values()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::PeerOf;
    use weft_protos::protos::{CollectionConfig, CollectionPolicyConfig};

    fn config(name: &str, policy: &str, required: i32, member_only_read: bool) -> CollectionConfig {
        CollectionConfig {
            payload: Some(CollectionPayload::StaticCollectionConfig(
                StaticCollectionConfig {
                    name: name.to_owned(),
                    member_orgs_policy: Some(CollectionPolicyConfig {
                        payload: Some(MemberPolicy::SignaturePolicy(
                            crate::dsl::parse(policy).unwrap(),
                        )),
                    }),
                    required_peer_count: required,
                    maximum_peer_count: 3,
                    block_to_live: 100,
                    member_only_read,
                    ..StaticCollectionConfig::default()
                },
            )),
        }
    }

    #[test]
    fn explicit_and_implicit_collections_name_their_member_organisations() {
        let package = CollectionConfigPackage {
            config: vec![
                config(
                    "assetCollection",
                    "OR('Org1MSP.member', 'Org2MSP.member')",
                    1,
                    true,
                ),
                config("Org1MSPPrivateCollection", "OR('Org1MSP.member')", 0, true),
            ],
        }
        .encode_to_vec();
        let orgs = ["Org1MSP".to_owned(), "Org2MSP".to_owned()];
        let collections = Collections::decode(&package, &orgs).unwrap();

        let shared = collections.get("assetCollection").unwrap();
        assert_eq!(
            shared.member_orgs.iter().collect::<Vec<_>>(),
            ["Org1MSP", "Org2MSP"]
        );
        assert_eq!(
            (shared.required_peer_count, shared.maximum_peer_count),
            (1, 3)
        );
        assert_eq!(shared.block_to_live, 100);
        assert!(shared.member_only_read && !shared.member_only_write);
        assert!(!shared.implicit);

        let own = collections.get("Org1MSPPrivateCollection").unwrap();
        assert!(own.has_member("Org1MSP") && !own.has_member("Org2MSP"));
        assert!(
            own.member_policy
                .is_satisfied_by(&[PeerOf("Org1MSP".to_owned())])
        );
        assert!(
            !own.member_policy
                .is_satisfied_by(&[PeerOf("Org2MSP".to_owned())])
        );

        let implicit = collections.get("_implicit_org_Org2MSP").unwrap();
        assert!(implicit.implicit && implicit.has_member("Org2MSP"));
        assert!(!implicit.has_member("Org1MSP"));
        assert!(!implicit.member_only_read && !implicit.member_only_write);
        assert!(collections.get("nope").is_none());
    }

    #[test]
    fn an_empty_package_leaves_the_implicit_collections_and_a_bad_one_is_an_error() {
        let collections = Collections::decode(&[], &["Org1MSP".to_owned()]).unwrap();
        assert_eq!(
            collections
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["_implicit_org_Org1MSP"]
        );
        assert!(matches!(
            Collections::decode(b"\xff\xff", &[]),
            Err(CollectionError::Malformed(_))
        ));
        let no_policy = CollectionConfigPackage {
            config: vec![CollectionConfig {
                payload: Some(CollectionPayload::StaticCollectionConfig(
                    StaticCollectionConfig {
                        name: "c".to_owned(),
                        ..StaticCollectionConfig::default()
                    },
                )),
            }],
        }
        .encode_to_vec();
        assert_eq!(
            Collections::decode(&no_policy, &[]).unwrap_err(),
            CollectionError::NoMemberPolicy("c".to_owned())
        );
    }
}
