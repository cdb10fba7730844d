//! The policies of a channel configuration, by path.
//!
//! A channel config is a tree of `common.ConfigGroup`s (`Channel` →
//! `Application`/`Orderer` → one group per organisation), each with named
//! policies. A policy is either a signature policy or an implicit-meta
//! policy that refers to the policies of the same name one level down:
//! `/Channel/Application/Writers` = "ANY Writers" is satisfied when any
//! organisation's `Writers` policy is.

use std::collections::BTreeMap;

use prost::Message;
use weft_msp::{MspManager, UnixTime};
use weft_protos::common::implicit_meta_policy::Rule as MetaRule;
use weft_protos::common::policy::PolicyType;
use weft_protos::common::{ConfigGroup, ImplicitMetaPolicy};

use crate::signature::valid_identities;
use crate::{PolicyError, Signatory, SignaturePolicy, SignedData};

/// The name of the root group of a channel configuration.
pub const ROOT_GROUP: &str = "Channel";

/// A compiled policy of a config group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    Signature(SignaturePolicy),
    /// Satisfied when enough of the sub-groups' policies named `sub_policy`
    /// are.
    ImplicitMeta {
        sub_policy: String,
        rule: MetaRule,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Group {
    policies: BTreeMap<String, Policy>,
    groups: BTreeMap<String, Group>,
}

/// Every policy of a channel configuration, addressed by absolute path
/// (`/Channel/Application/Org1MSP/Admins`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTree {
    root: Group,
}

impl PolicyTree {
    /// Compiles the policies of a channel's root config group.
    pub fn from_config(channel_group: &ConfigGroup) -> Result<Self, PolicyError> {
        Ok(Self {
            root: compile_group(&format!("/{ROOT_GROUP}"), channel_group)?,
        })
    }

    /// The policy at an absolute path.
    pub fn get(&self, path: &str) -> Option<&Policy> {
        let (group_path, name) = path.rsplit_once('/')?;
        self.group(group_path)?.policies.get(name)
    }

    /// Evaluates the policy at `path` against a set of signatures. Identities
    /// are validated and signatures verified once for the whole evaluation,
    /// however many sub-policies an implicit-meta policy consults.
    pub fn evaluate(
        &self,
        path: &str,
        signatures: &[SignedData],
        msps: &MspManager,
        now: UnixTime,
    ) -> Result<(), PolicyError> {
        if self.get(path).is_none() {
            return Err(PolicyError::NotFound(path.to_owned()));
        }
        let identities = valid_identities(signatures, msps, now);
        self.is_satisfied_by(path, &identities)
    }

    /// Evaluates the policy at `path` against identities whose signatures
    /// were already verified (see [`crate::valid_identities`]), so that a
    /// caller checking several policies over one signature set verifies each
    /// signature once.
    pub fn is_satisfied_by<S: Signatory>(
        &self,
        path: &str,
        identities: &[S],
    ) -> Result<(), PolicyError> {
        let (group_path, name) = path
            .rsplit_once('/')
            .ok_or_else(|| PolicyError::NotFound(path.to_owned()))?;
        let group = self
            .group(group_path)
            .filter(|group| group.policies.contains_key(name))
            .ok_or_else(|| PolicyError::NotFound(path.to_owned()))?;
        if group.is_satisfied(name, identities) {
            Ok(())
        } else {
            Err(PolicyError::NotSatisfied(path.to_owned()))
        }
    }

    fn group(&self, path: &str) -> Option<&Group> {
        let mut segments = path.split('/');
        if segments.next() != Some("") || segments.next() != Some(ROOT_GROUP) {
            return None;
        }
        segments.try_fold(&self.root, |group, name| group.groups.get(name))
    }
}

impl Group {
    fn is_satisfied<S: Signatory>(&self, name: &str, identities: &[S]) -> bool {
        match self.policies.get(name) {
            Some(Policy::Signature(policy)) => policy.is_satisfied_by(identities),
            Some(Policy::ImplicitMeta { sub_policy, rule }) => {
                // As Fabric: only sub-groups that define the policy count.
                let subs: Vec<&Group> = self
                    .groups
                    .values()
                    .filter(|group| group.policies.contains_key(sub_policy))
                    .collect();
                let threshold = match rule {
                    MetaRule::Any => 1,
                    MetaRule::All => subs.len(),
                    MetaRule::Majority => subs.len() / 2 + 1,
                };
                let mut remaining = threshold;
                for group in subs {
                    if remaining == 0 {
                        break;
                    }
                    if group.is_satisfied(sub_policy, identities) {
                        remaining -= 1;
                    }
                }
                remaining == 0
            }
            None => false,
        }
    }
}

fn compile_group(path: &str, config: &ConfigGroup) -> Result<Group, PolicyError> {
    let mut group = Group::default();
    for (name, config_policy) in &config.policies {
        let policy_path = format!("{path}/{name}");
        let malformed = |reason: String| PolicyError::Malformed {
            name: policy_path.clone(),
            reason,
        };
        let Some(policy) = &config_policy.policy else {
            return Err(malformed("the config policy is empty".to_owned()));
        };
        let compiled = match PolicyType::try_from(policy.r#type) {
            Ok(PolicyType::Signature) => {
                Policy::Signature(SignaturePolicy::decode(&policy_path, &policy.value)?)
            }
            Ok(PolicyType::ImplicitMeta) => {
                let meta = ImplicitMetaPolicy::decode(policy.value.clone())
                    .map_err(|e| malformed(format!("not an ImplicitMetaPolicy: {e}")))?;
                let rule = MetaRule::try_from(meta.rule)
                    .map_err(|_| malformed(format!("unknown implicit-meta rule {}", meta.rule)))?;
                Policy::ImplicitMeta {
                    sub_policy: meta.sub_policy,
                    rule,
                }
            }
            _ => {
                return Err(malformed(format!(
                    "unsupported policy type {}",
                    policy.r#type
                )));
            }
        };
        group.policies.insert(name.clone(), compiled);
    }
    for (name, sub_group) in &config.groups {
        group.groups.insert(
            name.clone(),
            compile_group(&format!("{path}/{name}"), sub_group)?,
        );
    }
    Ok(group)
}
