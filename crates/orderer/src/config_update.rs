//! Config updates: a `CONFIG_UPDATE` envelope turned into the channel's
//! next configuration, with Fabric's rules (`configtx`'s validator).
//!
//! A `ConfigUpdate` names a read set (elements and the versions it was
//! computed against) and a write set (the elements as they should be).
//! Elements are groups, values and policies, addressed by kind and path.
//!
//! 1. Every read-set element must exist in the current config at the
//!    version read.
//! 2. The delta is the write-set elements whose version differs from the
//!    read set's (or that the read set lacks); an empty delta is refused.
//! 3. A delta element that exists must be at the current version + 1, and
//!    the update's signatures must satisfy its current `mod_policy`
//!    (relative to the group for a group, to the containing group for a
//!    value or policy); a new element must be at version 0 (its parent
//!    group's change is what authorises it).
//! 4. The new config is the current one with the delta laid over it: a
//!    changed group takes its member list from the write set, an
//!    unchanged one keeps its own; the sequence goes up by one. It must
//!    still be a config an orderer can run (`ChannelConfig::new`).

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message;
use weft_msp::UnixTime;
use weft_policy::SignedData;
use weft_protos::common::{
    Config, ConfigGroup, ConfigPolicy, ConfigUpdate, ConfigUpdateEnvelope, ConfigValue,
    SignatureHeader,
};

use crate::channel_config::ChannelConfig;

/// Why a config update was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UpdateError {
    /// The update is malformed or does not fit the current config.
    #[error("{0}")]
    Invalid(String),
    /// The signatures do not satisfy a modified element's mod policy.
    #[error("{0}")]
    Forbidden(String),
}

/// The kind of a config element; part of its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Group,
    Value,
    Policy,
}

/// One element of a flattened config, with its members for groups.
#[derive(Debug, Clone)]
enum Element {
    Group(ConfigGroup),
    Value(ConfigValue),
    Policy(ConfigPolicy),
}

impl Element {
    fn version(&self) -> u64 {
        match self {
            Self::Group(group) => group.version,
            Self::Value(value) => value.version,
            Self::Policy(policy) => policy.version,
        }
    }

    fn mod_policy(&self) -> &str {
        match self {
            Self::Group(group) => &group.mod_policy,
            Self::Value(value) => &value.mod_policy,
            Self::Policy(policy) => &policy.mod_policy,
        }
    }
}

/// A config flattened by (kind, path), e.g. (Value, "/Channel/Orderer/BatchSize").
type Flat = BTreeMap<(Kind, String), Element>;

fn flatten(group: &ConfigGroup, path: &str, out: &mut Flat) {
    for (name, child) in &group.groups {
        flatten(child, &format!("{path}/{name}"), out);
    }
    for (name, value) in &group.values {
        out.insert(
            (Kind::Value, format!("{path}/{name}")),
            Element::Value(value.clone()),
        );
    }
    for (name, policy) in &group.policies {
        out.insert(
            (Kind::Policy, format!("{path}/{name}")),
            Element::Policy(policy.clone()),
        );
    }
    out.insert(
        (Kind::Group, path.to_owned()),
        Element::Group(group.clone()),
    );
}

fn flat(group: Option<&ConfigGroup>) -> Flat {
    let mut out = Flat::new();
    if let Some(group) = group {
        flatten(group, "/Channel", &mut out);
    }
    out
}

/// The next configuration of the channel whose current configuration is
/// `current`, from a config update envelope.
pub(crate) fn next_config(
    channel_id: &str,
    current: &ChannelConfig,
    envelope: &ConfigUpdateEnvelope,
    now: UnixTime,
) -> Result<Config, UpdateError> {
    let invalid = |reason: String| UpdateError::Invalid(reason);
    let update = ConfigUpdate::decode(envelope.config_update.clone())
        .map_err(|e| invalid(format!("malformed config update: {e}")))?;
    if update.channel_id != channel_id {
        return Err(invalid(format!(
            "config update for channel {:?} sent to channel {channel_id:?}",
            update.channel_id
        )));
    }
    let existing = flat(current.config.channel_group.as_ref());
    let read_set = flat(update.read_set.as_ref());
    let write_set = flat(update.write_set.as_ref());

    for ((kind, path), element) in &read_set {
        match existing.get(&(*kind, path.clone())) {
            Some(found) if found.version() == element.version() => {}
            Some(found) => {
                return Err(invalid(format!(
                    "proposed update requires that {kind:?} {path} be at version {}, but it is at version {}",
                    element.version(),
                    found.version()
                )));
            }
            None => {
                return Err(invalid(format!(
                    "existing config does not contain {kind:?} {path}, which is in the read set"
                )));
            }
        }
    }

    let delta: Vec<(&(Kind, String), &Element)> = write_set
        .iter()
        .filter(|(key, element)| {
            read_set
                .get(key)
                .is_none_or(|read| read.version() != element.version())
        })
        .collect();
    if delta.is_empty() {
        return Err(invalid(
            "delta set was empty -- update would have no effect".to_owned(),
        ));
    }

    let signatures = signed_data(envelope)?;
    for ((kind, path), element) in &delta {
        if element.mod_policy().is_empty() {
            return Err(invalid(format!("{kind:?} {path} has no mod_policy")));
        }
        let Some(found) = existing.get(&(*kind, path.clone())) else {
            if element.version() != 0 {
                return Err(invalid(format!(
                    "attempted to set {kind:?} {path} to version {}, but it does not exist",
                    element.version()
                )));
            }
            continue;
        };
        if element.version() != found.version() + 1 {
            return Err(invalid(format!(
                "attempted to set {kind:?} {path} to version {}, but it is at version {}",
                element.version(),
                found.version()
            )));
        }
        let policy = mod_policy_path(*kind, path, found.mod_policy());
        current
            .authority
            .evaluate(&policy, &signatures, now)
            .map_err(|e| {
                UpdateError::Forbidden(format!("policy for {kind:?} {path} not satisfied: {e}"))
            })?;
    }

    let mut merged = existing;
    for ((kind, path), element) in delta {
        merged.insert((*kind, path.clone()), element.clone());
    }
    let root = rebuild(&merged, "/Channel")?;
    Ok(Config {
        sequence: current.sequence() + 1,
        channel_group: Some(root),
    })
}

/// The absolute path of an element's mod policy.
fn mod_policy_path(kind: Kind, path: &str, mod_policy: &str) -> String {
    if mod_policy.starts_with('/') {
        return mod_policy.to_owned();
    }
    let base = match kind {
        Kind::Group => path,
        Kind::Value | Kind::Policy => path.rsplit_once('/').map_or(path, |(parent, _)| parent),
    };
    format!("{base}/{mod_policy}")
}

/// The group at `path` of a flattened config, its members rebuilt from
/// the map by the names its own entry lists.
fn rebuild(elements: &Flat, path: &str) -> Result<ConfigGroup, UpdateError> {
    let missing = |kind: Kind, path: &str| {
        UpdateError::Invalid(format!(
            "the update names {kind:?} {path} but does not define it"
        ))
    };
    let Some(Element::Group(entry)) = elements.get(&(Kind::Group, path.to_owned())) else {
        return Err(missing(Kind::Group, path));
    };
    let mut group = ConfigGroup {
        version: entry.version,
        mod_policy: entry.mod_policy.clone(),
        ..ConfigGroup::default()
    };
    for name in entry.groups.keys() {
        let child = format!("{path}/{name}");
        group
            .groups
            .insert(name.clone(), rebuild(elements, &child)?);
    }
    for name in entry.values.keys() {
        let child = format!("{path}/{name}");
        match elements.get(&(Kind::Value, child.clone())) {
            Some(Element::Value(value)) => {
                group.values.insert(name.clone(), value.clone());
            }
            _ => return Err(missing(Kind::Value, &child)),
        }
    }
    for name in entry.policies.keys() {
        let child = format!("{path}/{name}");
        match elements.get(&(Kind::Policy, child.clone())) {
            Some(Element::Policy(policy)) => {
                group.policies.insert(name.clone(), policy.clone());
            }
            _ => return Err(missing(Kind::Policy, &child)),
        }
    }
    Ok(group)
}

/// The update's signatures as policy input: each covers its signature
/// header followed by the config update bytes.
fn signed_data(envelope: &ConfigUpdateEnvelope) -> Result<Vec<SignedData>, UpdateError> {
    envelope
        .signatures
        .iter()
        .map(|signature| {
            let header =
                SignatureHeader::decode(signature.signature_header.clone()).map_err(|e| {
                    UpdateError::Invalid(format!("malformed config signature header: {e}"))
                })?;
            let mut data =
                Vec::with_capacity(signature.signature_header.len() + envelope.config_update.len());
            data.extend_from_slice(&signature.signature_header);
            data.extend_from_slice(&envelope.config_update);
            Ok(SignedData {
                data: Bytes::from(data),
                identity: header.creator,
                signature: signature.signature.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mod_policies_resolve_as_fabric_resolves_them() {
        assert_eq!(
            mod_policy_path(Kind::Value, "/Channel/Orderer/BatchSize", "Admins"),
            "/Channel/Orderer/Admins"
        );
        assert_eq!(
            mod_policy_path(Kind::Group, "/Channel/Application/Org1MSP", "Admins"),
            "/Channel/Application/Org1MSP/Admins"
        );
        assert_eq!(
            mod_policy_path(Kind::Policy, "/Channel/Writers", "/Channel/Orderer/Admins"),
            "/Channel/Orderer/Admins"
        );
    }
}
