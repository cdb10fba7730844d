//! Private data dissemination: an endorsing peer hands a transaction's
//! private writes to peers of the collections' member organisations
//! before it answers, and a peer receives what others hand it.
//!
//! Fabric does this over gossip, with each collection's
//! `requiredPeerCount` (peers that must have acknowledged the data before
//! the endorsement is given) and `maximumPeerCount` (peers it is sent to
//! at most). weft's peers speak `weft.privatedata.PrivateData/Push` to each
//! other instead; which peers it reaches are those the peer's Gateway
//! knows (`gateway.peers`: one peer of each other organisation), in their
//! configured order, and a peer's own organisation's other peers are not
//! known to it. Each peer is sent only the collections its organisation
//! is a member of, in one signed envelope; the receiver checks the
//! signature and its own membership, and keeps the writes in its
//! transient store until the transaction's block commits them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message;
use tonic::transport::{Channel, ClientTlsConfig};
use tonic::{Request, Response, Status};
use weft_msp::Signer;
use weft_protos::common::{ChannelHeader, Envelope, HeaderType, Payload, SignatureHeader};
use weft_protos::privatedata::private_data_client::PrivateDataClient;
use weft_protos::privatedata::private_data_server::PrivateData;
use weft_protos::privatedata::{PrivateDataPush, PushAck};
use weft_protos::rwset::{NsPvtReadWriteSet, TxPvtReadWriteSet};

use crate::chaincode::PrivateWrites;
use crate::{Endorser, JoinedChannel};

/// The policy a pushing peer must satisfy: a member of the channel.
const SENDER_POLICY: &str = "/Channel/Application/Readers";

/// How long a push waits for a peer's acknowledgement (Fabric's
/// `peer.gossip.pvtData.pushAckTimeout`).
pub const PUSH_ACK_TIMEOUT: Duration = Duration::from_secs(3);

/// Who a peer hands private data to, and how.
#[derive(Debug, Clone)]
pub struct DisseminationConfig {
    /// This peer's organisation.
    pub local_msp_id: String,
    /// Peers of other organisations: (MSP ID, `host:port`), in order of
    /// preference.
    pub peers: Vec<(String, String)>,
    /// TLS towards them; `None` dials in plaintext.
    pub tls: Option<ClientTlsConfig>,
    pub keepalive: weft_protos::serve::Keepalive,
    pub dial_timeout: Duration,
    pub ack_timeout: Duration,
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
    /// member organisations; refused when fewer are known than its
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
                    .filter(|(msp_id, _)| {
                        *msp_id != self.config.local_msp_id && collection.has_member(msp_id)
                    })
                    .collect();
                let required = collection.required_peer_count;
                if eligible.len() < required as usize {
                    return Err(format!(
                        "required to disseminate to at least {required} peers, but know of \
                         only {} eligible peers",
                        eligible.len()
                    ));
                }
                let key = (namespace.namespace.clone(), set.collection_name.clone());
                let chosen = collection.maximum_peer_count.max(required) as usize;
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
    /// of `plan`, all at once, and waits for the acknowledgements its
    /// collections require (each peer's for at most the ack timeout).
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
                .envelope(channel_id, tx_id, &only(&writes.rwset, collections))
                .and_then(|envelope| Ok((envelope, self.link(address)?)));
            let (envelope, link) = match sent {
                Ok(sent) => sent,
                Err(reason) => {
                    failures.push(format!("{address}: {reason}"));
                    continue;
                }
            };
            let timeout = self.config.ack_timeout;
            let address = address.clone();
            pushes.spawn(async move {
                let result = push(link, envelope, timeout).await;
                (address, result)
            });
        }
        let mut acknowledged: BTreeMap<&(String, String), u32> = BTreeMap::new();
        while let Some(joined) = pushes.join_next().await {
            let Ok((address, result)) = joined else {
                failures.push("a push task failed".to_owned());
                continue;
            };
            match result {
                Ok(()) => {
                    for key in plan
                        .sends
                        .get(&address)
                        .map_or(&[][..], |send| send.1.as_slice())
                    {
                        *acknowledged.entry(key).or_default() += 1;
                    }
                }
                Err(reason) => {
                    tracing::warn!(%tx_id, peer = %address, %reason, "private data push failed");
                    failures.push(format!("{address}: {reason}"));
                }
            }
        }
        for (key, required) in &plan.required {
            let got = acknowledged.get(key).copied().unwrap_or(0);
            if got < *required {
                return Err(format!(
                    "collection {} of {} reached {got} of the {required} peers it requires ({})",
                    key.1,
                    key.0,
                    failures.join("; ")
                ));
            }
        }
        Ok(())
    }

    /// The signed envelope carrying `writes` of `tx_id`.
    fn envelope(
        &self,
        channel_id: &str,
        tx_id: &str,
        writes: &TxPvtReadWriteSet,
    ) -> Result<Envelope, String> {
        let push = PrivateDataPush {
            tx_id: tx_id.to_owned(),
            private_writes: Some(writes.clone()),
        };
        let nonce = self.signer.new_nonce().map_err(|e| e.to_string())?;
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs() as i64);
        weft_protos::tx::signed_envelope(
            HeaderType::Message,
            channel_id,
            push.encode_to_vec().into(),
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
}

impl PrivateDataService {
    pub fn new(endorser: Arc<Endorser>) -> Self {
        Self { endorser }
    }

    /// Checks a pushed envelope and keeps its writes; the status says why
    /// not.
    fn receive(&self, envelope: &Envelope) -> Result<(), Status> {
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
        let push = PrivateDataPush::decode(payload.data)
            .map_err(|e| Status::invalid_argument(format!("malformed push: {e}")))?;
        let writes = push.private_writes.unwrap_or_default();
        for namespace in &writes.ns_pvt_rwset {
            for set in &namespace.collection_pvt_rwset {
                if !channel.keeps_collection(&namespace.namespace, &set.collection_name) {
                    return Err(Status::permission_denied(format!(
                        "this peer's organisation is not a member of collection {} of {}",
                        set.collection_name, namespace.namespace
                    )));
                }
            }
        }
        let blocks = channel.blocks();
        blocks
            .keep_transient(&push.tx_id, blocks.height(), &writes.encode_to_vec())
            .map_err(|e| Status::internal(format!("keeping the private data failed: {e}")))?;
        tracing::debug!(tx_id = %push.tx_id, channel = %channel_id, "private data received");
        Ok(())
    }
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
    use weft_protos::rwset::CollectionPvtReadWriteSet;

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
                tls: None,
                keepalive: weft_protos::serve::Keepalive::CLIENT_DEFAULT,
                dial_timeout: Duration::from_secs(1),
                ack_timeout: PUSH_ACK_TIMEOUT,
            },
            Arc::new(org.signer(weft_msp::NodeRole::Peer)),
        )
    }

    #[test]
    fn each_peer_gets_the_collections_of_its_organisation_up_to_the_maximum() {
        let writes = writes(
            &["shared", "org1only", "_implicit_org_Org1MSP"],
            vec![
                collection(
                    "shared",
                    "OR('Org1MSP.member','Org2MSP.member','Org3MSP.member')",
                    1,
                    1,
                ),
                collection("org1only", "OR('Org1MSP.member')", 0, 3),
            ],
        );
        let peers = disseminator(&[("Org2MSP", "peer2:7051"), ("Org3MSP", "peer3:7051")]);
        let plan = peers.plan(&writes).unwrap();
        // One peer for `shared` (its maximum), none for the others: Org1's
        // other peers are not known, and an implicit collection is not sent.
        assert_eq!(
            plan.sends,
            BTreeMap::from([(
                "peer2:7051".to_owned(),
                (
                    "Org2MSP".to_owned(),
                    vec![("cc".to_owned(), "shared".to_owned())]
                )
            )])
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
