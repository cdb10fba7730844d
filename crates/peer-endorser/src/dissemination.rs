//! Private data dissemination: an endorsing peer hands a transaction's
//! private writes to peers of the collections' member organisations
//! before it answers, a peer receives what others hand it, and a member
//! peer missing data at commit asks the others for it.
//!
//! Fabric does this over gossip, with each collection's
//! `requiredPeerCount` (peers that must have acknowledged the data before
//! the endorsement is given) and `maximumPeerCount` (peers it is sent to
//! at most). weft's peers speak `weft.privatedata.PrivateData/Push` to each
//! other instead; which peers it reaches are those the peer's Gateway
//! knows (`gateway.peers`: the other organisations' peers and its own
//! organisation's others), in their configured order. Each peer is sent
//! only the collections its organisation is a member of, in one signed
//! envelope; the receiver checks the signature and its own membership,
//! and keeps the writes in its transient store until the transaction's
//! block commits them. The endorsement waits for the acknowledgements
//! the collections require and no more: the other pushes go on without
//! it, as Fabric's gossip waits for `requiredPeerCount` acknowledgements.
//!
//! An organisation's implicit collection (`_implicit_org_<MSP ID>`) is
//! sent to no one by other organisations' peers; its own peers send it
//! as the peer's `privateData.implicitCollectionDisseminationPolicy`
//! says (Fabric's `peer.gossip.pvtData.implicitCollectionDisseminationPolicy`:
//! by default to one other peer of the organisation, none required).
//!
//! A member peer that did not receive a transaction's data (it was down,
//! or beyond `maximumPeerCount`) asks the known peers of the collection's
//! members for it when the block arrives (`Pull`), retrying for up to
//! `privateData.pullRetryThreshold`, as Fabric's peers pull at commit. A
//! peer answers only for collections the asking peer's organisation is a
//! member of, from what it committed or still holds in its transient
//! store.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message;
use tonic::transport::{Channel, ClientTlsConfig};
use tonic::{Request, Response, Status};
use weft_msp::Signer;
use weft_protos::common::{ChannelHeader, Envelope, HeaderType, Payload, SignatureHeader};
use weft_protos::msp::SerializedIdentity;
use weft_protos::privatedata::private_data_client::PrivateDataClient;
use weft_protos::privatedata::private_data_server::PrivateData;
use weft_protos::privatedata::{
    MissingWrites, PrivateDataPull, PrivateDataPush, PullResult, PulledWrites, PushAck,
};
use weft_protos::rwset::{CollectionPvtReadWriteSet, NsPvtReadWriteSet, TxPvtReadWriteSet};

use crate::chaincode::PrivateWrites;
use crate::{Endorser, JoinedChannel};

/// The policy a pushing peer must satisfy: a member of the channel.
const SENDER_POLICY: &str = "/Channel/Application/Readers";

/// The most collections one pull may ask for.
const PULL_ITEMS_MAX: usize = 100_000;
/// The longest pause between two rounds of pulls.
const PULL_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Who a peer hands private data to, and how.
#[derive(Debug, Clone)]
pub struct DisseminationConfig {
    /// This peer's organisation.
    pub local_msp_id: String,
    /// The network's other peers, this peer's organisation's included:
    /// (MSP ID, `host:port`), in order of preference; never this peer.
    pub peers: Vec<(String, String)>,
    /// How this peer's organisation's implicit collection is sent.
    pub own_implicit_collection: ImplicitCollectionPolicy,
    /// TLS towards them; `None` dials in plaintext.
    pub tls: Option<ClientTlsConfig>,
    pub keepalive: weft_protos::serve::Keepalive,
    pub dial_timeout: Duration,
    /// How long a push or a pull waits for a peer's answer (Fabric's
    /// `peer.gossip.pvtData.pushAckTimeout`).
    pub ack_timeout: Duration,
}

/// How many peers of its organisation an endorsing peer sends the
/// organisation's implicit collection to (Fabric's
/// `implicitCollectionDisseminationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImplicitCollectionPolicy {
    /// Peers that must acknowledge before the endorsement is given.
    pub required_peer_count: u32,
    /// Peers it is sent to at most.
    pub maximum_peer_count: u32,
}

impl Default for ImplicitCollectionPolicy {
    /// Fabric's `core.yaml` defaults: one peer, none required.
    fn default() -> Self {
        Self {
            required_peer_count: 0,
            maximum_peer_count: 1,
        }
    }
}

/// Hands endorsed private writes to other members' peers.
pub struct Disseminator {
    config: DisseminationConfig,
    signer: Arc<Signer>,
    /// One connection per peer, opened on first use.
    links: Mutex<HashMap<String, Channel>>,
}

impl std::fmt::Debug for Disseminator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disseminator")
            .field("peers", &self.config.peers)
            .finish_non_exhaustive()
    }
}

/// Which peers get which collections of one transaction.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Per peer address: its organisation and the (namespace, collection)
    /// pairs it is sent.
    pub sends: BTreeMap<String, (String, Vec<(String, String)>)>,
    /// Per (namespace, collection): how many of its peers must
    /// acknowledge.
    pub required: BTreeMap<(String, String), u32>,
}

impl Disseminator {
    pub fn new(config: DisseminationConfig, signer: Arc<Signer>) -> Self {
        Self {
            config,
            signer,
            links: Mutex::new(HashMap::new()),
        }
    }

    /// Which peers the collections written in `writes` send to: for each
    /// collection, up to its `maximumPeerCount` of the known peers of its
    /// member organisations (this peer's own implicit collection: as
    /// configured); refused when fewer are known than its
    /// `requiredPeerCount` (Fabric's words).
    pub fn plan(&self, writes: &PrivateWrites) -> Result<Plan, String> {
        let mut plan = Plan::default();
        for namespace in &writes.rwset.ns_pvt_rwset {
            let Some(collections) = writes.collections.get(&namespace.namespace) else {
                continue;
            };
            for set in &namespace.collection_pvt_rwset {
                let Some(collection) = collections.get(&set.collection_name) else {
                    continue;
                };
                let eligible: Vec<&(String, String)> = self
                    .config
                    .peers
                    .iter()
                    .filter(|(msp_id, _)| collection.has_member(msp_id))
                    .collect();
                let (required, maximum) =
                    if collection.implicit && collection.has_member(&self.config.local_msp_id) {
                        let own = self.config.own_implicit_collection;
                        (own.required_peer_count, own.maximum_peer_count)
                    } else {
                        (
                            collection.required_peer_count,
                            collection.maximum_peer_count,
                        )
                    };
                if eligible.len() < required as usize {
                    return Err(format!(
                        "required to disseminate to at least {required} peers, but know of \
                         only {} eligible peers",
                        eligible.len()
                    ));
                }
                let key = (namespace.namespace.clone(), set.collection_name.clone());
                let chosen = maximum.max(required) as usize;
                for (msp_id, address) in eligible.into_iter().take(chosen) {
                    plan.sends
                        .entry(address.clone())
                        .or_insert_with(|| (msp_id.clone(), Vec::new()))
                        .1
                        .push(key.clone());
                }
                if required > 0 {
                    plan.required.insert(key, required);
                }
            }
        }
        Ok(plan)
    }

    /// Hands `writes` of transaction `tx_id` on `channel_id` to the peers
    /// of `plan`, all at once, and waits until its collections have the
    /// acknowledgements they require (each peer's for at most the ack
    /// timeout); pushes beyond those finish on their own.
    pub async fn disseminate(
        &self,
        channel_id: &str,
        tx_id: &str,
        writes: &PrivateWrites,
        plan: &Plan,
    ) -> Result<(), String> {
        let mut pushes = tokio::task::JoinSet::new();
        let mut failures = Vec::new();
        for (address, (_, collections)) in &plan.sends {
            let sent = self
                .push_envelope(channel_id, tx_id, &only(&writes.rwset, collections))
                .and_then(|envelope| Ok((envelope, self.link(address)?)));
            let (envelope, link) = match sent {
                Ok(sent) => sent,
                Err(reason) => {
                    failures.push(format!("{address}: {reason}"));
                    continue;
                }
            };
            let timeout = self.config.ack_timeout;
            let (address, tx_id) = (address.clone(), tx_id.to_owned());
            pushes.spawn(async move {
                let result = push(link, envelope, timeout).await;
                if let Err(reason) = &result {
                    tracing::warn!(%tx_id, peer = %address, %reason, "private data push failed");
                }
                (address, result)
            });
        }
        let mut acknowledged: BTreeMap<&(String, String), u32> = BTreeMap::new();
        let short_of = |acknowledged: &BTreeMap<&(String, String), u32>| {
            plan.required.iter().find_map(|(key, required)| {
                let got = acknowledged.get(key).copied().unwrap_or(0);
                (got < *required).then_some((key, got, *required))
            })
        };
        while let Some((key, got, required)) = short_of(&acknowledged) {
            let Some(joined) = pushes.join_next().await else {
                return Err(format!(
                    "collection {} of {} reached {got} of the {required} peers it requires ({})",
                    key.1,
                    key.0,
                    failures.join("; ")
                ));
            };
            match joined {
                Ok((address, Ok(()))) => {
                    for key in plan
                        .sends
                        .get(&address)
                        .map_or(&[][..], |send| send.1.as_slice())
                    {
                        *acknowledged.entry(key).or_default() += 1;
                    }
                }
                Ok((address, Err(reason))) => failures.push(format!("{address}: {reason}")),
                Err(_) => failures.push("a push task failed".to_owned()),
            }
        }
        pushes.detach_all();
        Ok(())
    }

    /// Asks the known peers of the member organisations of each of
    /// `missing` (with those organisations) for it, round after round
    /// until all is found or `patience` has passed; returns what was
    /// found, by TxID. The caller checks each set against its hash.
    pub async fn pull(
        &self,
        channel_id: &str,
        missing: &[(MissingWrites, Vec<String>)],
        patience: Duration,
    ) -> Vec<(String, TxPvtReadWriteSet)> {
        let deadline = tokio::time::Instant::now() + patience;
        let mut found: Vec<(String, TxPvtReadWriteSet)> = Vec::new();
        let mut wanted: Vec<&(MissingWrites, Vec<String>)> = missing.iter().collect();
        let mut pause = Duration::from_millis(100);
        loop {
            for (msp_id, address) in &self.config.peers {
                let asked: Vec<MissingWrites> = wanted
                    .iter()
                    .filter(|(_, members)| members.contains(msp_id))
                    .map(|(writes, _)| writes.clone())
                    .collect();
                if asked.is_empty() {
                    continue;
                }
                match self.pull_from(channel_id, address, asked).await {
                    Ok(pulled) => found.extend(pulled),
                    Err(reason) => {
                        tracing::debug!(peer = %address, %reason, "private data pull failed");
                    }
                }
                wanted.retain(|(writes, _)| !holds(&found, writes));
            }
            let eligible = wanted.iter().any(|(_, members)| {
                self.config
                    .peers
                    .iter()
                    .any(|(msp_id, _)| members.contains(msp_id))
            });
            if wanted.is_empty() || !eligible || tokio::time::Instant::now() + pause > deadline {
                return found;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(PULL_BACKOFF_MAX);
        }
    }

    /// One pull of `asked` from the peer at `address`.
    async fn pull_from(
        &self,
        channel_id: &str,
        address: &str,
        asked: Vec<MissingWrites>,
    ) -> Result<Vec<(String, TxPvtReadWriteSet)>, String> {
        let request = PrivateDataPull { missing: asked };
        let envelope = self.envelope(channel_id, request.encode_to_vec().into())?;
        let mut client = PrivateDataClient::new(self.link(address)?);
        let answer = tokio::time::timeout(self.config.ack_timeout, client.pull(envelope))
            .await
            .map_err(|_| format!("no answer within {:?}", self.config.ack_timeout))?
            .map_err(|status| status.message().to_owned())?;
        Ok(answer
            .into_inner()
            .found
            .into_iter()
            .map(|pulled| (pulled.tx_id, pulled.private_writes.unwrap_or_default()))
            .collect())
    }

    /// The signed envelope of a push of `writes` of `tx_id`.
    fn push_envelope(
        &self,
        channel_id: &str,
        tx_id: &str,
        writes: &TxPvtReadWriteSet,
    ) -> Result<Envelope, String> {
        let push = PrivateDataPush {
            tx_id: tx_id.to_owned(),
            private_writes: Some(writes.clone()),
        };
        self.envelope(channel_id, push.encode_to_vec().into())
    }

    /// An envelope on `channel_id` carrying `data`, signed by this peer.
    fn envelope(&self, channel_id: &str, data: bytes::Bytes) -> Result<Envelope, String> {
        let nonce = self.signer.new_nonce().map_err(|e| e.to_string())?;
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs() as i64);
        weft_protos::tx::signed_envelope(
            HeaderType::Message,
            channel_id,
            data,
            self.signer.as_ref(),
            nonce,
            seconds,
        )
        .map_err(|e| e.to_string())
    }

    fn link(&self, address: &str) -> Result<Channel, String> {
        let mut links = self.links.lock();
        if let Some(channel) = links.get(address) {
            return Ok(channel.clone());
        }
        let endpoint = weft_protos::dial::endpoint(address, self.config.tls.as_ref())
            .map_err(|e| format!("{address}: {e}"))?;
        let channel = weft_protos::dial::with_keepalive(endpoint, self.config.keepalive)
            .connect_timeout(self.config.dial_timeout)
            .connect_lazy();
        links.insert(address.to_owned(), channel.clone());
        Ok(channel)
    }
}

/// Pushes `envelope` over `link`, waiting at most `timeout` for the
/// acknowledgement.
async fn push(link: Channel, envelope: Envelope, timeout: Duration) -> Result<(), String> {
    let mut client = PrivateDataClient::new(link);
    match tokio::time::timeout(timeout, client.push(envelope)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(status.message().to_owned()),
        Err(_) => Err(format!("no acknowledgement within {timeout:?}")),
    }
}

/// Whether `found` holds the writes of `missing`'s collection.
fn holds(found: &[(String, TxPvtReadWriteSet)], missing: &MissingWrites) -> bool {
    found.iter().any(|(tx_id, set)| {
        *tx_id == missing.tx_id
            && set
                .ns_pvt_rwset
                .iter()
                .filter(|ns| ns.namespace == missing.namespace)
                .flat_map(|ns| &ns.collection_pvt_rwset)
                .any(|collection| collection.collection_name == missing.collection)
    })
}

/// The sets of `writes` for the (namespace, collection) pairs `wanted`.
fn only(writes: &TxPvtReadWriteSet, wanted: &[(String, String)]) -> TxPvtReadWriteSet {
    TxPvtReadWriteSet {
        data_model: writes.data_model,
        ns_pvt_rwset: writes
            .ns_pvt_rwset
            .iter()
            .filter_map(|namespace| {
                let collection_pvt_rwset: Vec<_> = namespace
                    .collection_pvt_rwset
                    .iter()
                    .filter(|set| {
                        wanted.iter().any(|(ns, collection)| {
                            *ns == namespace.namespace && *collection == set.collection_name
                        })
                    })
                    .cloned()
                    .collect();
                (!collection_pvt_rwset.is_empty()).then(|| NsPvtReadWriteSet {
                    namespace: namespace.namespace.clone(),
                    collection_pvt_rwset,
                })
            })
            .collect(),
    }
}

/// The receiving side: `weft.privatedata.PrivateData`.
#[derive(Debug, Clone)]
pub struct PrivateDataService {
    endorser: Arc<Endorser>,
    /// This peer's organisation.
    local_msp_id: String,
}

/// An envelope from another peer, checked.
struct Opened {
    channel_id: String,
    channel: Arc<dyn JoinedChannel>,
    /// The sending peer's organisation.
    sender_msp_id: String,
    data: bytes::Bytes,
}

impl PrivateDataService {
    pub fn new(endorser: Arc<Endorser>, local_msp_id: String) -> Self {
        Self {
            endorser,
            local_msp_id,
        }
    }

    /// Checks an envelope another peer sent: a payload whose header names
    /// a channel this peer has joined, signed by a member of it.
    fn open(&self, envelope: &Envelope) -> Result<Opened, Status> {
        let payload = Payload::decode(envelope.payload.clone())
            .map_err(|e| Status::invalid_argument(format!("malformed payload: {e}")))?;
        let header = payload
            .header
            .ok_or_else(|| Status::invalid_argument("the payload has no header"))?;
        let channel_header = ChannelHeader::decode(header.channel_header)
            .map_err(|e| Status::invalid_argument(format!("malformed channel header: {e}")))?;
        let signature_header = SignatureHeader::decode(header.signature_header)
            .map_err(|e| Status::invalid_argument(format!("malformed signature header: {e}")))?;
        let channel_id = channel_header.channel_id;
        let channel: Arc<dyn JoinedChannel> = self
            .endorser
            .channel(&channel_id)
            .ok_or_else(|| Status::not_found(format!("channel {channel_id:?} not found")))?;
        channel
            .check_signer(
                SENDER_POLICY,
                &signature_header.creator,
                &envelope.payload,
                &envelope.signature,
                weft_msp::now(),
            )
            .map_err(|reason| {
                Status::permission_denied(format!("access denied: channel {channel_id}: {reason}"))
            })?;
        // The identity validated against its MSP: its MSP ID is its own.
        let sender_msp_id = SerializedIdentity::decode(signature_header.creator)
            .map_err(|e| Status::invalid_argument(format!("malformed creator: {e}")))?
            .mspid;
        Ok(Opened {
            channel_id,
            channel,
            sender_msp_id,
            data: payload.data,
        })
    }

    /// Keeps the writes a checked push carries; the status says why not.
    fn receive(&self, envelope: &Envelope) -> Result<(), Status> {
        let opened = self.open(envelope)?;
        let push = PrivateDataPush::decode(opened.data)
            .map_err(|e| Status::invalid_argument(format!("malformed push: {e}")))?;
        let writes = push.private_writes.unwrap_or_default();
        for namespace in &writes.ns_pvt_rwset {
            for set in &namespace.collection_pvt_rwset {
                let member = opened.channel.is_collection_member(
                    &namespace.namespace,
                    &set.collection_name,
                    &self.local_msp_id,
                );
                if !member {
                    return Err(Status::permission_denied(format!(
                        "this peer's organisation is not a member of collection {} of {}",
                        set.collection_name, namespace.namespace
                    )));
                }
            }
        }
        let blocks = opened.channel.blocks();
        blocks
            .keep_transient(&push.tx_id, blocks.height(), &writes.encode_to_vec())
            .map_err(|e| Status::internal(format!("keeping the private data failed: {e}")))?;
        tracing::debug!(tx_id = %push.tx_id, channel = %opened.channel_id, "private data received");
        Ok(())
    }

    /// What this peer holds of a checked pull's collections, each asked by
    /// a peer of one of its member organisations.
    fn answer_pull(&self, envelope: &Envelope) -> Result<PullResult, Status> {
        let opened = self.open(envelope)?;
        let pull = PrivateDataPull::decode(opened.data)
            .map_err(|e| Status::invalid_argument(format!("malformed pull: {e}")))?;
        if pull.missing.len() > PULL_ITEMS_MAX {
            return Err(Status::invalid_argument(format!(
                "a pull may ask for at most {PULL_ITEMS_MAX} collections"
            )));
        }
        let blocks = opened.channel.blocks();
        let mut found: BTreeMap<String, TxPvtReadWriteSet> = BTreeMap::new();
        for wanted in &pull.missing {
            let member = opened.channel.is_collection_member(
                &wanted.namespace,
                &wanted.collection,
                &opened.sender_msp_id,
            );
            if !member {
                return Err(Status::permission_denied(format!(
                    "{} is not a member of collection {} of {}",
                    opened.sender_msp_id, wanted.collection, wanted.namespace
                )));
            }
            let held = blocks
                .private_data_of(wanted.block_number, wanted.tx_index)
                .map_err(|e| Status::internal(e.to_string()))?
                .or_else(|| blocks.transient(&wanted.tx_id).ok().flatten());
            let Some(set) = held
                .and_then(|bytes| TxPvtReadWriteSet::decode(bytes).ok())
                .and_then(|set| collection_of(&set, &wanted.namespace, &wanted.collection))
            else {
                continue;
            };
            let answer = found.entry(wanted.tx_id.clone()).or_default();
            match answer
                .ns_pvt_rwset
                .iter_mut()
                .find(|ns| ns.namespace == wanted.namespace)
            {
                Some(namespace) => namespace.collection_pvt_rwset.push(set),
                None => answer.ns_pvt_rwset.push(NsPvtReadWriteSet {
                    namespace: wanted.namespace.clone(),
                    collection_pvt_rwset: vec![set],
                }),
            }
        }
        Ok(PullResult {
            found: found
                .into_iter()
                .map(|(tx_id, private_writes)| PulledWrites {
                    tx_id,
                    private_writes: Some(private_writes),
                })
                .collect(),
        })
    }
}

/// The set of `collection` of `namespace` in `writes`, if there.
fn collection_of(
    writes: &TxPvtReadWriteSet,
    namespace: &str,
    collection: &str,
) -> Option<CollectionPvtReadWriteSet> {
    writes
        .ns_pvt_rwset
        .iter()
        .filter(|ns| ns.namespace == namespace)
        .flat_map(|ns| &ns.collection_pvt_rwset)
        .find(|set| set.collection_name == collection)
        .cloned()
}

#[tonic::async_trait]
impl PrivateData for PrivateDataService {
    async fn push(&self, request: Request<Envelope>) -> Result<Response<PushAck>, Status> {
        let envelope = request.into_inner();
        self.receive(&envelope).inspect_err(|status| {
            tracing::info!(message = status.message(), "private data push refused");
        })?;
        Ok(Response::new(PushAck {}))
    }

    async fn pull(&self, request: Request<Envelope>) -> Result<Response<PullResult>, Status> {
        let envelope = request.into_inner();
        let answer = self.answer_pull(&envelope).inspect_err(|status| {
            tracing::info!(message = status.message(), "private data pull refused");
        })?;
        Ok(Response::new(answer))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use bytes::Bytes;
    use weft_policy::collection::Collections;
    use weft_protos::protos::collection_config::Payload as CollectionPayload;
    use weft_protos::protos::collection_policy_config::Payload as MemberPolicy;
    use weft_protos::protos::{
        CollectionConfig, CollectionConfigPackage, CollectionPolicyConfig, StaticCollectionConfig,
    };

    use super::*;

    fn collection(name: &str, policy: &str, required: i32, maximum: i32) -> CollectionConfig {
        CollectionConfig {
            payload: Some(CollectionPayload::StaticCollectionConfig(
                StaticCollectionConfig {
                    name: name.to_owned(),
                    member_orgs_policy: Some(CollectionPolicyConfig {
                        payload: Some(MemberPolicy::SignaturePolicy(
                            weft_policy::dsl::parse(policy).unwrap(),
                        )),
                    }),
                    required_peer_count: required,
                    maximum_peer_count: maximum,
                    ..StaticCollectionConfig::default()
                },
            )),
        }
    }

    fn writes(collections: &[&str], package: Vec<CollectionConfig>) -> PrivateWrites {
        let orgs = [
            "Org1MSP".to_owned(),
            "Org2MSP".to_owned(),
            "Org3MSP".to_owned(),
        ];
        let package = CollectionConfigPackage { config: package }.encode_to_vec();
        PrivateWrites {
            rwset: TxPvtReadWriteSet {
                data_model: 0,
                ns_pvt_rwset: vec![NsPvtReadWriteSet {
                    namespace: "cc".to_owned(),
                    collection_pvt_rwset: collections
                        .iter()
                        .map(|name| CollectionPvtReadWriteSet {
                            collection_name: (*name).to_owned(),
                            rwset: Bytes::from_static(b"set"),
                        })
                        .collect(),
                }],
            },
            collections: BTreeMap::from([(
                "cc".to_owned(),
                Arc::new(Collections::decode(&package, &orgs).unwrap()),
            )]),
        }
    }

    fn disseminator(peers: &[(&str, &str)]) -> Disseminator {
        let org = weft_msp::testing::TestOrg::new("Org1MSP");
        Disseminator::new(
            DisseminationConfig {
                local_msp_id: "Org1MSP".to_owned(),
                peers: peers
                    .iter()
                    .map(|(msp, address)| ((*msp).to_owned(), (*address).to_owned()))
                    .collect(),
                own_implicit_collection: ImplicitCollectionPolicy::default(),
                tls: None,
                keepalive: weft_protos::serve::Keepalive::CLIENT_DEFAULT,
                dial_timeout: Duration::from_secs(1),
                ack_timeout: Duration::from_secs(3),
            },
            Arc::new(org.signer(weft_msp::NodeRole::Peer)),
        )
    }

    #[test]
    fn each_peer_gets_the_collections_of_its_organisation_up_to_the_maximum() {
        let writes = writes(
            &[
                "shared",
                "org1only",
                "_implicit_org_Org1MSP",
                "_implicit_org_Org2MSP",
            ],
            vec![
                collection(
                    "shared",
                    "OR('Org1MSP.member','Org2MSP.member','Org3MSP.member')",
                    1,
                    2,
                ),
                collection("org1only", "OR('Org1MSP.member')", 0, 3),
            ],
        );
        let peers = disseminator(&[
            ("Org2MSP", "peer2:7051"),
            ("Org1MSP", "peer1b:7051"),
            ("Org1MSP", "peer1c:7051"),
            ("Org3MSP", "peer3:7051"),
        ]);
        let plan = peers.plan(&writes).unwrap();
        let sent = |collections: &[&str]| -> Vec<(String, String)> {
            collections
                .iter()
                .map(|name| ("cc".to_owned(), (*name).to_owned()))
                .collect()
        };
        // `shared` to its first two known members' peers (its maximum),
        // Org1's own collection to both of Org1's other peers, Org1's
        // implicit collection to one of them (the default policy), Org2's
        // implicit collection to no one: it is Org2's peers' to send.
        assert_eq!(
            plan.sends,
            BTreeMap::from([
                (
                    "peer2:7051".to_owned(),
                    ("Org2MSP".to_owned(), sent(&["shared"]))
                ),
                (
                    "peer1b:7051".to_owned(),
                    (
                        "Org1MSP".to_owned(),
                        sent(&["shared", "org1only", "_implicit_org_Org1MSP"])
                    )
                ),
                (
                    "peer1c:7051".to_owned(),
                    ("Org1MSP".to_owned(), sent(&["org1only"]))
                ),
            ])
        );
        assert_eq!(
            plan.required,
            BTreeMap::from([(("cc".to_owned(), "shared".to_owned()), 1)])
        );
        let filtered = only(&writes.rwset, &plan.sends["peer2:7051"].1);
        assert_eq!(filtered.ns_pvt_rwset[0].collection_pvt_rwset.len(), 1);
        assert_eq!(
            filtered.ns_pvt_rwset[0].collection_pvt_rwset[0].collection_name,
            "shared"
        );
    }

    #[test]
    fn the_own_implicit_collection_follows_the_configured_policy() {
        let writes = writes(&["_implicit_org_Org1MSP"], Vec::new());
        let mut peers = disseminator(&[("Org2MSP", "peer2:7051"), ("Org1MSP", "peer1b:7051")]);
        peers.config.own_implicit_collection = ImplicitCollectionPolicy {
            required_peer_count: 2,
            maximum_peer_count: 2,
        };
        assert_eq!(
            peers.plan(&writes).unwrap_err(),
            "required to disseminate to at least 2 peers, but know of only 1 eligible peers"
        );
        peers.config.own_implicit_collection = ImplicitCollectionPolicy {
            required_peer_count: 0,
            maximum_peer_count: 0,
        };
        assert_eq!(peers.plan(&writes).unwrap(), Plan::default());
    }

    #[test]
    fn too_few_known_members_refuse_the_endorsement_in_fabrics_words() {
        let writes = writes(
            &["shared"],
            vec![collection(
                "shared",
                "OR('Org1MSP.member','Org2MSP.member')",
                2,
                3,
            )],
        );
        let peers = disseminator(&[("Org2MSP", "peer2:7051"), ("Org3MSP", "peer3:7051")]);
        assert_eq!(
            peers.plan(&writes).unwrap_err(),
            "required to disseminate to at least 2 peers, but know of only 1 eligible peers"
        );
    }
}
