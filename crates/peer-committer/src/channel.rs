//! What validation needs to know about a channel, built from its config.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use weft_msp::{Identity, MspManager, OwnSignatures, UnixTime};
use weft_policy::collection::Collection;
use weft_policy::{ChannelAuthority, PeerOf, PolicyTree, Signatory, SignaturePolicy};
use weft_protos::common::Config;

use crate::lifecycle::{
    ChaincodeDefinitions, EndorsementRule, IMPLICIT_COLLECTION_PREFIX, LIFECYCLE_NAMESPACE,
};
use crate::{Error, Result};

/// For a stream channel, the most transactions its orderers may leave
/// unsigned; `None` for a block channel. A value that does not decode
/// counts as the strictest (every block signed): the orderers refuse such
/// a config, so it only reaches a peer from a forged chain.
fn stream_checkpoint(config: &Config) -> Option<u32> {
    let value = config
        .channel_group
        .as_ref()?
        .groups
        .get("Orderer")?
        .values
        .get(weft_protos::STREAM_MODE_KEY)?;
    let mode = weft_protos::stream::StreamMode::decode(value.value.clone()).unwrap_or_default();
    Some(mode.checkpoint_transactions.max(1))
}

/// A channel's identity and policy context: its MSPs (with their identity
/// cache), its policy tree, and the chaincode definitions committed on it.
/// Immutable; a config block produces a new context with a fresh identity
/// cache, a committed chaincode definition a new context sharing the MSPs.
pub struct ChannelContext {
    pub channel_id: String,
    pub msps: Arc<MspManager>,
    pub policies: Arc<PolicyTree>,
    pub definitions: Arc<ChaincodeDefinitions>,
    /// Application organisations: MSP ID → config group name.
    application_orgs: Arc<BTreeMap<String, String>>,
    /// The endorsements this peer signed recently: recognised by their
    /// bytes instead of verified (see `weft_msp::own`).
    own_signatures: Option<Arc<OwnSignatures>>,
    /// A stream channel (docs/stream-mode.md): blocks between the orderers'
    /// checkpoints come unsigned, are applied at once and commit with the
    /// next checkpoint, which comes at the latest when this many
    /// transactions have gone unsigned. `None` for a block channel.
    pub stream_checkpoint: Option<u32>,
    /// The sequence of the config this context was built from: how many
    /// config updates led to it.
    pub config_sequence: u64,
}

impl std::fmt::Debug for ChannelContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelContext")
            .field("channel_id", &self.channel_id)
            .field("msps", &self.msps.msp_ids())
            .finish_non_exhaustive()
    }
}

impl ChannelContext {
    /// Builds the context of `config`, found in block `block` of
    /// `channel_id`, with no chaincode definitions yet.
    pub fn from_config(channel_id: &str, block: u64, config: &Config) -> Result<Self> {
        let ChannelAuthority {
            msps,
            policies,
            application_orgs,
        } = ChannelAuthority::from_config(config).map_err(|e| Error::BadConfig {
            channel: channel_id.to_owned(),
            block,
            reason: e.0,
        })?;
        Ok(Self {
            channel_id: channel_id.to_owned(),
            msps: Arc::new(msps),
            policies: Arc::new(policies),
            definitions: Arc::new(ChaincodeDefinitions::default()),
            application_orgs: Arc::new(application_orgs),
            own_signatures: None,
            stream_checkpoint: stream_checkpoint(config),
            config_sequence: config.sequence,
        })
    }

    /// `self`'s successor after a config block: `config`'s context, with
    /// the chaincode definitions and own signatures of `self`.
    pub fn reconfigured(&self, block: u64, config: &Config) -> Result<Self> {
        let mut next = Self::from_config(&self.channel_id, block, config)?;
        next.definitions = self.definitions.clone();
        next.own_signatures = self.own_signatures.clone();
        Ok(next)
    }

    /// This context recognising the signatures in `own` as good.
    pub fn with_own_signatures(&self, own: Arc<OwnSignatures>) -> Self {
        let mut context = self.with_definitions(self.definitions.clone());
        context.own_signatures = Some(own);
        context
    }

    /// Whether `identity`'s `signature` over `data` holds: recognised as
    /// one of this peer's own, else verified.
    pub fn signature_holds(&self, identity: &Identity, data: &[u8], signature: &[u8]) -> bool {
        self.own_signatures
            .as_ref()
            .is_some_and(|own| own.recognises(identity, data, signature))
            || identity.verify(data, signature).is_ok()
    }

    /// This context with `definitions` in force; the MSPs and their cache
    /// are shared.
    pub fn with_definitions(&self, definitions: Arc<ChaincodeDefinitions>) -> Self {
        Self {
            channel_id: self.channel_id.clone(),
            msps: self.msps.clone(),
            policies: self.policies.clone(),
            definitions,
            application_orgs: self.application_orgs.clone(),
            own_signatures: self.own_signatures.clone(),
            stream_checkpoint: self.stream_checkpoint,
            config_sequence: self.config_sequence,
        }
    }

    /// The application organisations: MSP ID → config group name.
    pub fn application_orgs(&self) -> &BTreeMap<String, String> {
        &self.application_orgs
    }

    /// The rule for writes to the public state of `namespace`.
    pub fn endorsement_rule(&self, namespace: &str) -> EndorsementRule {
        self.definitions.rule(namespace)
    }

    /// The rule for writes to the private collection `collection` of
    /// `namespace`, as Fabric's validator rules: an organisation's implicit
    /// collection (`_implicit_org_<MSP ID>`, of `_lifecycle` or of a
    /// chaincode defined through it) needs that organisation's
    /// `Endorsement` policy, else any member of it; a declared collection
    /// its own endorsement policy, else the chaincode's; a collection the
    /// definition does not declare cannot be written. Chaincodes without a
    /// definition (weft's built-ins) follow their chaincode's rule.
    pub fn collection_rule(&self, namespace: &str, collection: &str) -> EndorsementRule {
        let defined = namespace == LIFECYCLE_NAMESPACE || self.definitions.is_defined(namespace);
        if !defined {
            return self.endorsement_rule(namespace);
        }
        if let Some(msp_id) = collection.strip_prefix(IMPLICIT_COLLECTION_PREFIX) {
            return self.organisation_endorsement(msp_id);
        }
        if namespace == LIFECYCLE_NAMESPACE {
            return self.endorsement_rule(namespace);
        }
        match self.definitions.collection(namespace, collection) {
            Ok(Some(declared)) => match &declared.endorsement_policy {
                Some(policy) => crate::lifecycle::policy_rule(
                    &format!("collection {collection} of {namespace}"),
                    policy.clone(),
                )
                .unwrap_or_else(EndorsementRule::Unreadable),
                None => self.endorsement_rule(namespace),
            },
            Ok(None) => EndorsementRule::Unreadable(format!("no such collection '{collection}'")),
            Err(reason) => EndorsementRule::Unreadable(reason.to_owned()),
        }
    }

    /// What an organisation's approval needs: its `Endorsement` policy,
    /// else a signature by any member of it.
    fn organisation_endorsement(&self, msp_id: &str) -> EndorsementRule {
        let Some(group) = self.application_orgs.get(msp_id) else {
            return EndorsementRule::Unreadable(format!(
                "{msp_id} is not an organisation of the channel"
            ));
        };
        let path = format!("/Channel/Application/{group}/Endorsement");
        if self.policies.get(&path).is_some() {
            return EndorsementRule::Channel(path);
        }
        // Any member of the organisation: its implicit collection's members.
        match Collection::implicit(msp_id) {
            Ok(collection) => EndorsementRule::Signature(collection.member_policy),
            Err(reason) => EndorsementRule::Unreadable(reason.to_string()),
        }
    }

    /// Whether the peers of organisation `msp_id` keep the private values
    /// of `collection` of `namespace`: it is the organisation's implicit
    /// collection, or a declared collection that names it a member.
    pub fn keeps_collection(&self, namespace: &str, collection: &str, msp_id: &str) -> bool {
        let defined = namespace == LIFECYCLE_NAMESPACE || self.definitions.is_defined(namespace);
        if let Some(owner) = collection.strip_prefix(IMPLICIT_COLLECTION_PREFIX) {
            return defined && owner == msp_id;
        }
        matches!(
            self.definitions.collection(namespace, collection),
            Ok(Some(declared)) if declared.has_member(msp_id)
        )
    }

    /// The organisations whose peers keep the private values of
    /// `collection` of `namespace` (none for an undeclared collection).
    pub fn collection_members(&self, namespace: &str, collection: &str) -> Vec<String> {
        if let Some(owner) = collection.strip_prefix(IMPLICIT_COLLECTION_PREFIX) {
            return vec![owner.to_owned()];
        }
        match self.definitions.collection(namespace, collection) {
            Ok(Some(declared)) => declared.member_orgs.iter().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Whether `reader` (a serialized identity, already a reader of the
    /// channel) may read the private data of `collection` of `namespace`:
    /// anyone, for a collection without `memberOnlyRead`; else a valid
    /// identity of the channel that satisfies the collection's member
    /// policy (for an organisation's implicit collection: a member of that
    /// organisation). Fabric's check of `DeliverWithPrivateData` clients.
    pub fn may_read_collection(
        &self,
        namespace: &str,
        collection: &str,
        reader: &Bytes,
        now: UnixTime,
    ) -> bool {
        if let Some(owner) = collection.strip_prefix(IMPLICIT_COLLECTION_PREFIX) {
            return weft_policy::collection::Collection::implicit(owner).is_ok_and(|implicit| {
                self.creator_satisfies(reader, &implicit.member_policy, now)
            });
        }
        match self.definitions.collection(namespace, collection) {
            Ok(Some(declared)) => {
                !declared.member_only_read
                    || self.creator_satisfies(reader, &declared.member_policy, now)
            }
            _ => false,
        }
    }

    /// Whether `creator` is a valid identity of the channel that satisfies
    /// `policy` at `now` (a collection's membership, for the chaincode
    /// access checks).
    pub fn creator_satisfies(
        &self,
        creator: &Bytes,
        policy: &SignaturePolicy,
        now: UnixTime,
    ) -> bool {
        self.msps
            .deserialize(creator, now)
            .is_ok_and(|identity| policy.is_satisfied_by(&[identity]))
    }

    /// Whether `signers` satisfy `rule`.
    pub fn satisfies<S: Signatory>(&self, rule: &EndorsementRule, signers: &[S]) -> bool {
        match rule {
            EndorsementRule::Channel(path) => self.policies.is_satisfied_by(path, signers).is_ok(),
            EndorsementRule::Signature(policy) => policy.is_satisfied_by(signers),
            EndorsementRule::Unreadable(_) => false,
        }
    }

    /// Whether endorsements by one peer of each of `organisations` (MSP
    /// IDs) would satisfy the endorsement rule of `chaincode`.
    pub fn satisfied_by_organisations(&self, chaincode: &str, organisations: &[String]) -> bool {
        let peers: Vec<PeerOf> = organisations.iter().cloned().map(PeerOf).collect();
        self.satisfies(&self.endorsement_rule(chaincode), &peers)
    }

    /// Checks that `creator` is a valid member of the channel at `now`,
    /// that its signature over `data` verifies and that it satisfies the
    /// channel policy at `policy` (the signature is verified once); the
    /// error says why not.
    pub fn check_signer(
        &self,
        policy: &str,
        creator: &Bytes,
        data: &[u8],
        signature: &[u8],
        now: UnixTime,
    ) -> std::result::Result<(), String> {
        let identity = self
            .msps
            .deserialize(creator, now)
            .map_err(|e| format!("the creator is not a valid member: {e}"))?;
        identity
            .verify(data, signature)
            .map_err(|e| format!("the creator's signature does not verify: {e}"))?;
        self.policies
            .is_satisfied_by(policy, &[identity])
            .map_err(|e| e.to_string())
    }

    /// Whether `creator` is a valid admin of the organisation `msp_id` at
    /// `now`.
    pub fn is_admin(&self, creator: &Bytes, msp_id: &str, now: UnixTime) -> bool {
        self.msps
            .deserialize(creator, now)
            .is_ok_and(|identity| identity.msp_id() == msp_id && identity.is_admin())
    }
}
