//! Evaluating signature policies with Fabric's semantics.

use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use weft_msp::{Certificate, Identity, MspManager, NodeRole, UnixTime};
use weft_protos::common::msp_principal::Classification;
use weft_protos::common::msp_role::MspRoleType;
use weft_protos::common::signature_policy::Type as Rule;
use weft_protos::common::{
    CombinedPrincipal, MspIdentityAnonymity, MspPrincipal, MspRole, OrganizationUnit,
    SignaturePolicyEnvelope,
};
use weft_protos::msp::SerializedIdentity;

use crate::PolicyError;

/// Depth limit for nested rules and combined principals of a decoded policy.
const NESTING_MAX: usize = 32;

/// One signature over some data by some identity, as Fabric's
/// `protoutil.SignedData`.
#[derive(Debug, Clone)]
pub struct SignedData {
    /// The bytes that were signed.
    pub data: Bytes,
    /// The signer's serialized `msp.SerializedIdentity`.
    pub identity: Bytes,
    /// DER ECDSA signature.
    pub signature: Bytes,
}

/// A principal of a signature policy, decoded once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A member of an MSP with a role.
    Role { msp_id: String, role: MspRoleType },
    /// An identity of an MSP carrying an OU certified by a given chain.
    OrganizationUnit {
        msp_id: String,
        organizational_unit: String,
        certifiers_id: Bytes,
    },
    /// One specific certificate.
    Identity {
        msp_id: String,
        certificate_der: Vec<u8>,
    },
    /// X.509 identities are nominal, never anonymous.
    Anonymity { anonymous: bool },
    /// Every one of the sub-principals.
    Combined(Vec<Principal>),
    /// A principal that no identity can satisfy (undecodable, or a
    /// classification Fabric does not define).
    Unsatisfiable(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum CompiledRule {
    SignedBy(usize),
    OutOf {
        required: usize,
        rules: Vec<CompiledRule>,
    },
}

/// A compiled `common.SignaturePolicyEnvelope`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignaturePolicy {
    name: String,
    rule: CompiledRule,
    principals: Vec<Principal>,
}

impl SignaturePolicy {
    /// Compiles an envelope. `name` identifies the policy in errors (e.g. its
    /// path in the channel config).
    pub fn compile(name: &str, envelope: &SignaturePolicyEnvelope) -> Result<Self, PolicyError> {
        let malformed = |reason: String| PolicyError::Malformed {
            name: name.to_owned(),
            reason,
        };
        let rule = envelope
            .rule
            .as_ref()
            .ok_or_else(|| malformed("the envelope has no rule".to_owned()))?;
        let principals: Vec<Principal> = envelope
            .identities
            .iter()
            .map(|p| decode_principal(p, 0))
            .collect();
        let rule = compile_rule(rule, principals.len(), 0).map_err(malformed)?;
        Ok(Self {
            name: name.to_owned(),
            rule,
            principals,
        })
    }

    /// Decodes and compiles a serialized envelope.
    pub fn decode(name: &str, bytes: &[u8]) -> Result<Self, PolicyError> {
        let envelope =
            SignaturePolicyEnvelope::decode(bytes).map_err(|e| PolicyError::Malformed {
                name: name.to_owned(),
                reason: format!("not a SignaturePolicyEnvelope: {e}"),
            })?;
        Self::compile(name, &envelope)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn principals(&self) -> &[Principal] {
        &self.principals
    }

    /// Evaluates the policy against signatures: the identities are validated
    /// (through the manager's cache), de-duplicated and their signatures
    /// verified once, then the rule is evaluated.
    pub fn evaluate(
        &self,
        signatures: &[SignedData],
        msps: &MspManager,
        now: UnixTime,
    ) -> Result<(), PolicyError> {
        let identities = valid_identities(signatures, msps, now);
        if self.is_satisfied_by(&identities) {
            Ok(())
        } else {
            Err(PolicyError::NotSatisfied(self.name.clone()))
        }
    }

    /// Evaluates the rule against identities whose signatures were already
    /// verified (see [`valid_identities`]), or against hypothetical
    /// signers such as [`PeerOf`].
    pub fn is_satisfied_by<S: Signatory>(&self, identities: &[S]) -> bool {
        let mut used = vec![false; identities.len()];
        self.evaluate_rule(&self.rule, identities, &mut used)
    }

    /// Fabric's greedy evaluation: `SignedBy(i)` takes the first unused
    /// identity that satisfies principal i; an n-out-of gate tries each
    /// sub-rule on a scratch copy of the used set and keeps the copy when
    /// the sub-rule is satisfied. An identity thus satisfies at most one
    /// principal.
    fn evaluate_rule<S: Signatory>(
        &self,
        rule: &CompiledRule,
        identities: &[S],
        used: &mut [bool],
    ) -> bool {
        match rule {
            CompiledRule::SignedBy(index) => {
                let principal = &self.principals[*index];
                for (slot, identity) in identities.iter().enumerate() {
                    if !used[slot] && identity.satisfies(principal) {
                        used[slot] = true;
                        return true;
                    }
                }
                false
            }
            CompiledRule::OutOf { required, rules } => {
                let mut satisfied = 0;
                let mut scratch = used.to_vec();
                for sub_rule in rules {
                    scratch.copy_from_slice(used);
                    if self.evaluate_rule(sub_rule, identities, &mut scratch) {
                        satisfied += 1;
                        used.copy_from_slice(&scratch);
                    }
                }
                satisfied >= *required
            }
        }
    }
}

/// The identities of a signature set whose identity validates and whose
/// signature verifies, de-duplicated as Fabric does: an identity counts once,
/// the first time it appears with a valid signature. Each signature is
/// verified at most once, and a repeated identity is not verified again.
pub fn valid_identities(
    signatures: &[SignedData],
    msps: &MspManager,
    now: UnixTime,
) -> Vec<Arc<Identity>> {
    valid_identities_checked_by(signatures, msps, now, |identity, signed| {
        identity.verify(&signed.data, &signed.signature).is_ok()
    })
}

/// [`valid_identities`], with `signature_holds` deciding whether an
/// identity's signature is good: a caller may recognise signatures it
/// knows to be good (`weft_msp::OwnSignatures`) before verifying the rest.
/// It must answer as verification would.
pub fn valid_identities_checked_by(
    signatures: &[SignedData],
    msps: &MspManager,
    now: UnixTime,
    signature_holds: impl Fn(&Identity, &SignedData) -> bool,
) -> Vec<Arc<Identity>> {
    let mut identities: Vec<Arc<Identity>> = Vec::with_capacity(signatures.len());
    for signed in signatures {
        let Ok(identity) = msps.deserialize(&signed.identity, now) else {
            continue;
        };
        let seen = identities.iter().any(|other| {
            other.msp_id() == identity.msp_id()
                && other.certificate().der() == identity.certificate().der()
        });
        if seen || !signature_holds(&identity, signed) {
            continue;
        }
        identities.push(identity);
    }
    identities
}

fn compile_rule(
    rule: &weft_protos::common::SignaturePolicy,
    principal_count: usize,
    depth: usize,
) -> Result<CompiledRule, String> {
    if depth > NESTING_MAX {
        return Err("rule is nested too deeply".to_owned());
    }
    match &rule.r#type {
        Some(Rule::SignedBy(index)) => usize::try_from(*index)
            .ok()
            .filter(|&index| index < principal_count)
            .map(CompiledRule::SignedBy)
            .ok_or_else(|| {
                format!("signed_by {index} names no identity (there are {principal_count})")
            }),
        Some(Rule::NOutOf(gate)) => {
            let required = usize::try_from(gate.n)
                .map_err(|_| format!("n_out_of has negative n {}", gate.n))?;
            let rules = gate
                .rules
                .iter()
                .map(|sub_rule| compile_rule(sub_rule, principal_count, depth + 1))
                .collect::<Result<_, _>>()?;
            Ok(CompiledRule::OutOf { required, rules })
        }
        None => Err("a rule has no type".to_owned()),
    }
}

fn decode_principal(principal: &MspPrincipal, depth: usize) -> Principal {
    let bytes = principal.principal.clone();
    let undecodable =
        |what: &str, e: prost::DecodeError| Principal::Unsatisfiable(format!("{what}: {e}"));
    match Classification::try_from(principal.principal_classification) {
        Ok(Classification::Role) => match MspRole::decode(bytes) {
            Ok(role) => match MspRoleType::try_from(role.role) {
                Ok(role_type) => Principal::Role {
                    msp_id: role.msp_identifier,
                    role: role_type,
                },
                Err(_) => Principal::Unsatisfiable(format!("unknown role {}", role.role)),
            },
            Err(e) => undecodable("MSPRole", e),
        },
        Ok(Classification::OrganizationUnit) => match OrganizationUnit::decode(bytes) {
            Ok(ou) => Principal::OrganizationUnit {
                msp_id: ou.msp_identifier,
                organizational_unit: ou.organizational_unit_identifier,
                certifiers_id: ou.certifiers_identifier,
            },
            Err(e) => undecodable("OrganizationUnit", e),
        },
        Ok(Classification::Identity) => match SerializedIdentity::decode(bytes) {
            Ok(identity) => match Certificate::from_pem(&identity.id_bytes) {
                Ok(certificate) => Principal::Identity {
                    msp_id: identity.mspid,
                    certificate_der: certificate.der().to_vec(),
                },
                Err(e) => Principal::Unsatisfiable(format!("identity principal: {e}")),
            },
            Err(e) => undecodable("SerializedIdentity", e),
        },
        Ok(Classification::Anonymity) => match MspIdentityAnonymity::decode(bytes) {
            Ok(anonymity) => Principal::Anonymity {
                anonymous: anonymity.anonymity_type != 0,
            },
            Err(e) => undecodable("MSPIdentityAnonymity", e),
        },
        Ok(Classification::Combined) if depth < NESTING_MAX => {
            match CombinedPrincipal::decode(bytes) {
                Ok(combined) => Principal::Combined(
                    combined
                        .principals
                        .iter()
                        .map(|p| decode_principal(p, depth + 1))
                        .collect(),
                ),
                Err(e) => undecodable("CombinedPrincipal", e),
            }
        }
        _ => Principal::Unsatisfiable(format!(
            "unsupported principal classification {}",
            principal.principal_classification
        )),
    }
}

/// Whether a validated identity satisfies a principal, as Fabric's X.509
/// MSP decides it.
/// Who may stand behind a signature when a policy is evaluated.
pub trait Signatory {
    /// Whether this signer satisfies `principal`.
    fn satisfies(&self, principal: &Principal) -> bool;
}

impl Signatory for Arc<Identity> {
    fn satisfies(&self, principal: &Principal) -> bool {
        identity_satisfies(self, principal)
    }
}

/// A peer of an organisation, known by its MSP ID only: what a gateway
/// knows of the peers it may ask to endorse, when it plans which
/// organisations' endorsements a policy needs (as Fabric's discovery
/// does). It satisfies an MSP's member and peer roles; principals that
/// need more than the MSP ID (admin or client roles, OUs, a certificate)
/// it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerOf(pub String);

impl Signatory for PeerOf {
    fn satisfies(&self, principal: &Principal) -> bool {
        match principal {
            Principal::Role { msp_id, role } => {
                *msp_id == self.0 && matches!(role, MspRoleType::Member | MspRoleType::Peer)
            }
            Principal::Anonymity { anonymous } => !anonymous,
            Principal::Combined(principals) => principals.iter().all(|p| self.satisfies(p)),
            Principal::OrganizationUnit { .. }
            | Principal::Identity { .. }
            | Principal::Unsatisfiable(_) => false,
        }
    }
}

fn identity_satisfies(identity: &Identity, principal: &Principal) -> bool {
    match principal {
        Principal::Role { msp_id, role } => {
            identity.msp_id() == msp_id
                && match role {
                    MspRoleType::Member => true,
                    MspRoleType::Admin => identity.is_admin(),
                    MspRoleType::Client => identity.node_role() == Some(NodeRole::Client),
                    MspRoleType::Peer => identity.node_role() == Some(NodeRole::Peer),
                    MspRoleType::Orderer => identity.node_role() == Some(NodeRole::Orderer),
                }
        }
        Principal::OrganizationUnit {
            msp_id,
            organizational_unit,
            certifiers_id,
        } => {
            identity.msp_id() == msp_id
                && identity.has_organizational_unit(organizational_unit, certifiers_id)
        }
        Principal::Identity {
            msp_id,
            certificate_der,
        } => {
            identity.msp_id() == msp_id
                && identity.certificate().der() == certificate_der.as_slice()
        }
        Principal::Anonymity { anonymous } => !anonymous,
        Principal::Combined(principals) => {
            principals.iter().all(|p| identity_satisfies(identity, p))
        }
        Principal::Unsatisfiable(_) => false,
    }
}
