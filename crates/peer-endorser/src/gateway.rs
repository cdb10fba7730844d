//! Fabric's Gateway service (`gateway.Gateway`) on the peer, so that
//! Fabric's own Gateway client libraries drive weft unchanged:
//!
//! - `Endorse`: the proposal is endorsed by this peer and by one peer of
//!   every other organisation the client names (or, if it names none, of
//!   the fewest organisations configured that satisfy the endorsement
//!   policy), their results must agree, and the transaction is prepared
//!   for the client to sign. An organisation's configured peers are asked
//!   in turn until one endorses, as Fabric's Gateway moves on to the next
//!   peer of an organisation, those that last failed to answer last (for
//!   this peer's organisation, once this peer has refused). The
//!   other peers are told how many blocks this peer has committed, and a
//!   weft peer that is behind catches up before it endorses, so that a
//!   client reading what it just saw committed here gets endorsements
//!   that agree (Fabric's peers ignore the header); one too far behind
//!   refuses, and the organisation's next peer is asked, or, when none has
//!   caught up, the one furthest along without the height. A proposal
//!   carrying transient data whose client names no organisations is
//!   endorsed here first, and the others are chosen among the members of
//!   the private data collections it touched, as Fabric's Gateway keeps
//!   transient data;
//! - `Submit`: the signed transaction goes to the first orderer that takes
//!   it (those that last failed to answer tried last), over a Broadcast
//!   stream to that orderer that every submit shares (`broadcast_lines`;
//!   Fabric's Gateway opens one per transaction);
//! - `CommitStatus`: waits until this peer has committed the transaction
//!   and answers its validation code and block;
//! - `Evaluate`: the proposal is run and its result returned, nothing
//!   submitted: here first, then, as Fabric's Gateway plans it, at this
//!   organisation's other peers and those of the other organisations (of
//!   the organisations the client names, if it names any; of this one
//!   alone when the proposal carries transient data and names none),
//!   moving on after a peer's refusal or silence and stopping at a
//!   chaincode's error;
//! - `ChaincodeEvents`: the events of one chaincode's valid transactions,
//!   block by block, from a start position.
//!
//! Requests that name an identity (commit status, events) must be signed by
//! it and satisfy the channel's `/Channel/Application/Readers`, as Fabric's
//! Gateway ACLs require. Errors are gRPC statuses with a message. Failures
//! of endorsers and orderers also come as Fabric sends them: the status
//! code Fabric's Gateway answers, and one `gateway.ErrorDetail` (address,
//! MSP ID, message) per endpoint that failed, in the status details, which
//! Fabric's client libraries hand to applications as `err.details`. The
//! message names the reasons too, for clients that only print it.
//!
//! Calls to other nodes are bounded in time as Fabric's Gateway bounds
//! them ([`Timeouts`]): a peer that does not endorse in time, or an
//! orderer that does not answer, becomes an error detail like any other
//! failure, and the next orderer is tried.
//!
//! Endorsement plans come from the organisations of the configured peers
//! and the chaincode's endorsement policy (Fabric's Gateway asks its
//! discovery service): the fewest organisations whose peers satisfy it,
//! this one first. Peers' heights are not known here, so organisations'
//! peers are asked in their configured order, not highest first.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, ClientTlsConfig};
use tonic::{Code, Request, Response, Status};
use weft_ledger::BlockStore;
use weft_protos::common::{BlockMetadataIndex, ChannelHeader, Envelope, Payload};
use weft_protos::gateway::gateway_server::Gateway;
use weft_protos::gateway::{
    ChaincodeEventsRequest, ChaincodeEventsResponse, CommitStatusRequest, CommitStatusResponse,
    EndorseRequest, EndorseResponse, ErrorDetail, EvaluateRequest, EvaluateResponse,
    SignedChaincodeEventsRequest, SignedCommitStatusRequest, SubmitRequest, SubmitResponse,
};
use weft_protos::orderer::seek_position::Type as SeekType;
use weft_protos::protos::endorser_client::EndorserClient;
use weft_protos::protos::{
    ChaincodeAction, ChaincodeEvent, ProposalResponse, ProposalResponsePayload, SignedProposal,
};
use weft_protos::rwset::TxReadWriteSet;
use weft_protos::tx::ReceivedProposal;
use weft_protos::view::{DecodedBlock, Limits, TxBody};

use crate::broadcast_lines::BroadcastLines;
use crate::commit_status::CommitWaiters;
use crate::service::COMMITTED_HEIGHT_HEADER;
use crate::silent_nodes::SilentNodes;
use crate::{Endorser, JoinedChannel};

/// The policy a client must satisfy to read commit status and events.
const READERS_POLICY: &str = "/Channel/Application/Readers";
/// Events are buffered per stream before the client must read.
const EVENTS_BUFFERED_MAX: usize = 16;

/// Where the Gateway finds the rest of the network.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// This peer's organisation.
    pub local_msp_id: String,
    /// This peer's address, as error details name it.
    pub local_address: String,
    /// The network's other peers: (MSP ID, `host:port`). Those of other
    /// organisations endorse for this one (of an organisation listed more
    /// than once, the first that endorses); this peer endorses for its
    /// own organisation, whose other peers it lists for private data.
    pub peers: Vec<(String, String)>,
    /// Orderers to submit to (`host:port`).
    pub orderers: Vec<String>,
    /// In which order each submit tries them: a fresh random one, as
    /// Fabric's Gateway does, or as listed.
    pub orderer_choice: weft_protos::dial::EndpointChoice,
    /// TLS towards those peers and orderers (their CA certificates);
    /// `None` dials in plaintext.
    pub tls: Option<ClientTlsConfig>,
    pub timeouts: Timeouts,
    /// Probes of the connections to those peers and orderers (Fabric's
    /// `peer.keepalive.client`).
    pub keepalive: weft_protos::serve::Keepalive,
}

/// How long the Gateway waits for other nodes (Fabric's
/// `peer.gateway.endorsementTimeout`, `broadcastTimeout`, `dialTimeout`).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// For another peer's endorsement of one proposal.
    pub endorsement: Duration,
    /// For an orderer's answer to one transaction.
    pub broadcast: Duration,
    /// To connect to a peer or orderer.
    pub dial: Duration,
}

impl Default for Timeouts {
    /// The defaults of Fabric's `core.yaml`.
    fn default() -> Self {
        Self {
            endorsement: Duration::from_secs(30),
            broadcast: Duration::from_secs(30),
            dial: Duration::from_secs(120),
        }
    }
}

/// The Gateway of one peer.
#[derive(Debug, Clone)]
pub struct GatewayService {
    endorser: Arc<Endorser>,
    config: Arc<GatewayConfig>,
    /// One HTTP/2 connection per peer or orderer, opened on first use and
    /// shared by every request (tonic reconnects it when it drops): a
    /// connection, let alone a TLS handshake, per transaction would cost
    /// more than the transaction.
    links: Arc<Mutex<HashMap<String, Channel>>>,
    /// One Broadcast stream per orderer, shared by every Submit.
    broadcasts: Arc<BroadcastLines>,
    /// The `CommitStatus` calls waiting, by channel.
    commit_waiters: Arc<Mutex<HashMap<String, Arc<CommitWaiters>>>>,
    /// Peers of other organisations and orderers whose last call got no
    /// answer, asked after the others for a while.
    silent: Arc<SilentNodes>,
}

impl GatewayService {
    pub fn new(endorser: Arc<Endorser>, config: GatewayConfig) -> Self {
        Self {
            endorser,
            config: Arc::new(config),
            links: Arc::default(),
            broadcasts: Arc::default(),
            commit_waiters: Arc::default(),
            silent: Arc::default(),
        }
    }

    /// The waiting `CommitStatus` calls of `channel`, answered by a task
    /// started on the first call.
    fn commit_waiters(&self, channel_id: &str, channel: &dyn JoinedChannel) -> Arc<CommitWaiters> {
        self.commit_waiters
            .lock()
            .entry(channel_id.to_owned())
            .or_insert_with(|| {
                CommitWaiters::start(channel.blocks().clone(), channel.committed_height())
            })
            .clone()
    }

    /// The connection to the node at `address`.
    fn link(&self, address: &str) -> Result<Channel, Status> {
        let mut links = self.links.lock();
        if let Some(channel) = links.get(address) {
            return Ok(channel.clone());
        }
        let endpoint = weft_protos::dial::endpoint(address, self.config.tls.as_ref())
            .map_err(|e| Status::internal(format!("{address}: {e}")))?;
        let channel = weft_protos::dial::with_keepalive(endpoint, self.config.keepalive)
            .connect_timeout(self.config.timeouts.dial)
            .connect_lazy();
        links.insert(address.to_owned(), channel.clone());
        Ok(channel)
    }

    fn channel(&self, channel_id: &str) -> Result<Arc<dyn JoinedChannel>, Status> {
        self.endorser
            .channel(channel_id)
            .ok_or_else(|| Status::not_found(format!("channel {channel_id:?} not found")))
    }

    /// The endorsement of `signed` by a peer of organisation `msp_id`, told
    /// that this peer has committed `committed` blocks: its known peers
    /// are asked one after another until one endorses, as Fabric's Gateway
    /// moves on to the next peer of an organisation whatever the failure.
    /// Peers whose last call got no answer, or that refused as behind
    /// that height, are asked last for a while ([`SilentNodes`]), so that
    /// a peer that is down or catching up does not hold up every
    /// endorsement. When none endorsed and some refused as behind, the
    /// one of those furthest along is asked again without the height and
    /// endorses where it is, as Fabric's peers do. The error holds one
    /// detail per peer asked.
    async fn endorse_in_organisation(
        &self,
        msp_id: &str,
        signed: SignedProposal,
        committed: u64,
    ) -> Result<ProposalResponse, Vec<ErrorDetail>> {
        let mut failures = Vec::new();
        let mut furthest_behind: Option<(&String, u64)> = None;
        for address in self.peers_in_turn(msp_id, Instant::now()) {
            let answer = self
                .ask_noting_silence(address, signed.clone(), Some(committed))
                .await;
            match answer.map(|response| (endorsement_failure(&response), response)) {
                Ok((None, response)) => return Ok(response),
                Ok((Some(reason), _)) => failures.push(detail(address, msp_id, reason)),
                Err(status) => {
                    if let Some(reached) = crate::service::behind(&status)
                        && furthest_behind.is_none_or(|(_, furthest)| reached > furthest)
                    {
                        furthest_behind = Some((address, reached));
                    }
                    failures.push(detail(address, msp_id, status.message()));
                }
            }
        }
        if let Some((address, _)) = furthest_behind {
            match self.endorse_at(address, signed, None).await {
                Ok(response) => match endorsement_failure(&response) {
                    None => return Ok(response),
                    Some(reason) => failures.push(detail(address, msp_id, reason)),
                },
                Err(status) => failures.push(detail(address, msp_id, status.message())),
            }
        }
        if failures.is_empty() {
            failures.push(detail("", msp_id, "no peer of this organisation is known"));
        }
        Err(failures)
    }

    /// The known peers of organisation `msp_id`, in configured order,
    /// those whose last call got no answer at `now` last.
    fn peers_in_turn(&self, msp_id: &str, now: Instant) -> Vec<&String> {
        let known = self.config.peers.iter().filter(|(id, _)| id == msp_id);
        self.silent
            .answering_first(known.map(|(_, address)| address), now)
    }

    /// [`Self::endorse_at`], noting whether the peer answered, so that one
    /// that did not is asked last for a while.
    async fn ask_noting_silence(
        &self,
        address: &str,
        signed: SignedProposal,
        committed: Option<u64>,
    ) -> Result<ProposalResponse, Status> {
        let answer = self.endorse_at(address, signed, committed).await;
        self.silent.note(address, answer.is_ok(), Instant::now());
        answer
    }

    /// The answer of the peer at `address` to `signed`, within the
    /// endorsement timeout; told that this peer has committed `committed`
    /// blocks, if given.
    async fn endorse_at(
        &self,
        address: &str,
        signed: SignedProposal,
        committed: Option<u64>,
    ) -> Result<ProposalResponse, Status> {
        let channel = self.link(address)?;
        let within = self.config.timeouts.endorsement;
        let mut request = Request::new(signed);
        if let Some(committed) = committed {
            request
                .metadata_mut()
                .insert(COMMITTED_HEIGHT_HEADER, committed.into());
        }
        tokio::time::timeout(
            within,
            EndorserClient::new(weft_protos::dial::ending_with_last_message(channel))
                .process_proposal(request),
        )
        .await
        .unwrap_or_else(|_| Err(timed_out("endorsement", within)))
        .map(Response::into_inner)
    }

    /// The organisations to endorse with: those the client named, or the
    /// fewest of those this gateway knows whose peers satisfy the
    /// chaincode's endorsement policy (this peer's own first), as Fabric's
    /// gateway plans with its discovery service.
    fn endorsing_organisations(
        &self,
        channel: &dyn JoinedChannel,
        chaincode: &str,
        named: &[String],
    ) -> Result<Vec<String>, Status> {
        if !named.is_empty() {
            return Ok(named.to_vec());
        }
        let known = self.known_organisations();
        weft_policy::smallest_satisfying(&known, |organisations| {
            channel.satisfies_endorsement(chaincode, organisations)
        })
        .ok_or_else(|| no_plan(&known, chaincode))
    }

    /// The endorsements of `organisations`, asked side by side, as
    /// Fabric's Gateway asks them: this peer on a task of its own (its
    /// organisation's other peers in turn if it refuses; `local` when it
    /// has answered already), each other organisation on one that tries
    /// its known peers in turn; the answers in the plan's order.
    async fn endorse_by(
        &self,
        organisations: Vec<String>,
        signed: SignedProposal,
        committed: u64,
        local: Option<ProposalResponse>,
    ) -> Result<Vec<ProposalResponse>, Status> {
        let mut local = local;
        let mut asked = Vec::new();
        for msp_id in organisations {
            let (organisation, signed) = (msp_id.clone(), signed.clone());
            let gateway = self.clone();
            let endorsement = if msp_id == self.config.local_msp_id {
                let answered = local.take();
                tokio::spawn(async move {
                    match answered {
                        Some(response) => Ok(response),
                        None => gateway.endorse_here(signed, committed).await,
                    }
                })
            } else {
                tokio::spawn(async move {
                    gateway
                        .endorse_in_organisation(&organisation, signed, committed)
                        .await
                })
            };
            asked.push((msp_id, endorsement));
        }
        let mut failures = Vec::new();
        let mut responses = Vec::new();
        for (msp_id, endorsement) in asked {
            match endorsement.await {
                Ok(Ok(response)) => responses.push(response),
                Ok(Err(details)) => failures.extend(details),
                Err(error) => failures.push(detail(
                    "",
                    &msp_id,
                    format!("the endorsement task failed: {error}"),
                )),
            }
        }
        if !failures.is_empty() || responses.is_empty() {
            return Err(failed(
                Code::Aborted,
                "failed to collect enough transaction endorsements, see attached details for more info",
                &failures,
            ));
        }
        Ok(responses)
    }

    /// This organisation's endorsement: this peer's, or if it refuses,
    /// one of the organisation's other known peers', as Fabric's Gateway
    /// moves on within the organisation.
    async fn endorse_here(
        &self,
        signed: SignedProposal,
        committed: u64,
    ) -> Result<ProposalResponse, Vec<ErrorDetail>> {
        let local = &self.config.local_msp_id;
        let response = self.endorser.answer(signed.clone()).await;
        let Some(reason) = endorsement_failure(&response) else {
            return Ok(response);
        };
        let mut failures = vec![detail(&self.config.local_address, local, reason)];
        if self.config.peers.iter().any(|(id, _)| id == local) {
            match self.endorse_in_organisation(local, signed, committed).await {
                Ok(response) => return Ok(response),
                Err(others) => failures.extend(others),
            }
        }
        Err(failures)
    }

    /// The endorsements of a proposal carrying transient data whose
    /// client named no organisations, planned as Fabric's Gateway plans
    /// them so that the data reaches only peers of the organisations
    /// entitled to the private data it touches: this organisation
    /// endorses first, and its answer names the collections the
    /// chaincode read or wrote; the others are chosen among the members
    /// of all of them. When only organisations outside a collection could
    /// satisfy the endorsement policy, the client is told to name the
    /// organisations it trusts (FAILED_PRECONDITION, Fabric's words).
    async fn endorse_keeping_transient_data(
        &self,
        channel: &dyn JoinedChannel,
        proposal: &ReceivedProposal,
        signed: SignedProposal,
        committed: u64,
    ) -> Result<Vec<ProposalResponse>, Status> {
        let first = self
            .endorse_here(signed.clone(), committed)
            .await
            .map_err(|details| {
                failed(
                    Code::Aborted,
                    "failed to endorse transaction, see attached details for more info",
                    &details,
                )
            })?;
        let touched = touched_collections(&first);
        let known = self.known_organisations();
        let members: Vec<String> = known
            .iter()
            .filter(|msp_id| {
                touched.iter().all(|(namespace, collection)| {
                    channel.is_collection_member(namespace, collection, msp_id)
                })
            })
            .cloned()
            .collect();
        let chaincode = &proposal.chaincode_id.name;
        let satisfied =
            |organisations: &[String]| channel.satisfies_endorsement(chaincode, organisations);
        let Some(plan) = weft_policy::smallest_satisfying(&members, satisfied) else {
            if weft_policy::smallest_satisfying(&known, satisfied).is_some() {
                let names: Vec<&str> = touched.iter().map(|(_, name)| name.as_str()).collect();
                return Err(Status::failed_precondition(format!(
                    "requires endorsement from organisation(s) that are not in the distribution \
                     policy of the private data collection(s): [{}]; retry specifying trusted \
                     endorsing organizations to protect transient data",
                    names.join(" ")
                )));
            }
            return Err(no_plan(&known, chaincode));
        };
        let local = plan.contains(&self.config.local_msp_id).then_some(first);
        self.endorse_by(plan, signed, committed, local).await
    }

    /// This organisation and those of the known peers, this one first.
    fn known_organisations(&self) -> Vec<String> {
        let mut known = vec![self.config.local_msp_id.clone()];
        for (msp_id, _) in &self.config.peers {
            if !known.contains(msp_id) {
                known.push(msp_id.clone());
            }
        }
        known
    }

    /// Who evaluates a proposal, in turn, as Fabric's Gateway plans it:
    /// the peers of `named` organisations (with none named, of every
    /// organisation known, or of this one alone when the proposal carries
    /// transient data, which Fabric keeps in the Gateway's organisation),
    /// this organisation's first, this peer (`None`) before its other
    /// peers; within an organisation, peers that last failed to answer
    /// last.
    fn evaluators(&self, named: &[String], has_transient: bool) -> Vec<(String, Option<&String>)> {
        let local = &self.config.local_msp_id;
        let organisations = if !named.is_empty() {
            let mut named = named.to_vec();
            let mut seen = std::collections::HashSet::new();
            named.retain(|msp_id| seen.insert(msp_id.clone()));
            if let Some(at) = named.iter().position(|msp_id| msp_id == local) {
                named[..=at].rotate_right(1);
            }
            named
        } else if has_transient {
            vec![local.clone()]
        } else {
            self.known_organisations()
        };
        let now = Instant::now();
        let mut evaluators = Vec::new();
        for msp_id in organisations {
            if msp_id == *local {
                evaluators.push((msp_id.clone(), None));
            }
            let in_turn = self.peers_in_turn(&msp_id, now);
            evaluators.extend(
                in_turn
                    .into_iter()
                    .map(|address| (msp_id.clone(), Some(address))),
            );
        }
        evaluators
    }

    /// Checks that `identity` signed `request` and may read the channel.
    fn check_reader(
        channel: &dyn JoinedChannel,
        identity: &Bytes,
        request: &Bytes,
        signature: &Bytes,
    ) -> Result<(), Status> {
        let now = weft_msp::now();
        channel
            .check_signer(READERS_POLICY, identity, request, signature, now)
            .map_err(|reason| Status::permission_denied(format!("access denied: {reason}")))
    }
}

/// No organisations among `known` satisfy `chaincode`'s policy.
fn no_plan(known: &[String], chaincode: &str) -> Status {
    Status::failed_precondition(format!(
        "no combination of the peers of {} satisfies the endorsement policy of chaincode \
         {chaincode}",
        known.join(", ")
    ))
}

/// The private data collections an endorsed proposal read or wrote, as
/// (namespace, collection), from the simulation its response carries.
fn touched_collections(response: &ProposalResponse) -> Vec<(String, String)> {
    let results = ProposalResponsePayload::decode(response.payload.clone())
        .and_then(|payload| ChaincodeAction::decode(payload.extension))
        .and_then(|action| TxReadWriteSet::decode(action.results));
    let Ok(results) = results else {
        return Vec::new();
    };
    results
        .ns_rwset
        .into_iter()
        .flat_map(|namespace| {
            let name = namespace.namespace;
            namespace
                .collection_hashed_rwset
                .into_iter()
                .map(move |collection| (name.clone(), collection.collection_name))
        })
        .collect()
}

/// Why a proposal response's status is a failure, and the code Fabric's
/// Gateway gives it: a 500 without payload was refused by the peer
/// (ABORTED: another peer might do better), any other error status came
/// from the chaincode (UNKNOWN). `None` for a success.
fn response_failure(response: &ProposalResponse) -> Option<(Code, String)> {
    let answer = response.response.clone().unwrap_or_default();
    if answer.status == 500 && response.payload.is_empty() {
        return Some((Code::Aborted, answer.message));
    }
    (!(200..400).contains(&answer.status)).then(|| {
        let reason = format!("chaincode response {}, {}", answer.status, answer.message);
        (Code::Unknown, reason)
    })
}

/// Why a proposal response is not an endorsement.
fn endorsement_failure(response: &ProposalResponse) -> Option<String> {
    match response_failure(response) {
        Some((_, reason)) => Some(reason),
        None => response
            .endorsement
            .is_none()
            .then(|| "the response carries no endorsement".to_owned()),
    }
}

/// The error of a call to another node that took longer than `within`.
fn timed_out(what: &str, within: Duration) -> Status {
    Status::deadline_exceeded(format!("{what} timeout expired after {within:?}"))
}

/// One endpoint's failure, as Fabric's Gateway reports it.
fn detail(address: &str, msp_id: &str, message: impl Into<String>) -> ErrorDetail {
    ErrorDetail {
        address: address.to_owned(),
        msp_id: msp_id.to_owned(),
        message: message.into(),
    }
}

/// A gRPC error of `code` whose message is `summary` followed by every
/// detail's reason, with the `details` attached as Fabric's Gateway
/// attaches them (a `google.rpc.Status` of `gateway.ErrorDetail`s).
fn failed(code: Code, summary: &str, details: &[ErrorDetail]) -> Status {
    let reasons: Vec<String> = details
        .iter()
        .map(
            |detail| match (detail.msp_id.is_empty(), detail.address.is_empty()) {
                (false, false) => format!(
                    "{} at {}: {}",
                    detail.msp_id, detail.address, detail.message
                ),
                (false, true) => format!("{}: {}", detail.msp_id, detail.message),
                (true, _) => format!("{}: {}", detail.address, detail.message),
            },
        )
        .collect();
    let message = if reasons.is_empty() {
        summary.to_owned()
    } else {
        format!("{summary}: {}", reasons.join("; "))
    };
    let status = weft_protos::rpc::Status {
        code: code as i32,
        message: message.clone(),
        details: details
            .iter()
            .map(|detail| prost_types::Any {
                type_url: "type.googleapis.com/gateway.ErrorDetail".to_owned(),
                value: detail.encode_to_vec(),
            })
            .collect(),
    };
    Status::with_details(code, message, status.encode_to_vec().into())
}

type EventStream = Pin<Box<dyn Stream<Item = Result<ChaincodeEventsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Gateway for GatewayService {
    async fn endorse(
        &self,
        request: Request<EndorseRequest>,
    ) -> Result<Response<EndorseResponse>, Status> {
        let request = request.into_inner();
        let signed = request
            .proposed_transaction
            .ok_or_else(|| Status::invalid_argument("a proposed transaction is required"))?;
        let proposal = ReceivedProposal::decode(&signed)
            .map_err(|e| Status::invalid_argument(format!("malformed proposal: {e}")))?;
        let channel = self.channel(&proposal.channel_header.channel_id)?;
        // The others are told how far this peer has committed, and a weft
        // peer behind it catches up before it simulates: the client may
        // have seen its last transaction committed here and now read what
        // it wrote (Fabric's Gateway endorses at a lagging peer all the
        // same, and the endorsements disagree).
        let committed = *channel.committed_height().borrow();
        let responses =
            if request.endorsing_organizations.is_empty() && !proposal.transient.is_empty() {
                self.endorse_keeping_transient_data(channel.as_ref(), &proposal, signed, committed)
                    .await?
            } else {
                let organisations = self.endorsing_organisations(
                    channel.as_ref(),
                    &proposal.chaincode_id.name,
                    &request.endorsing_organizations,
                )?;
                self.endorse_by(organisations, signed, committed, None)
                    .await?
            };
        let payload = proposal
            .proposal
            .transaction_payload(&responses)
            .map_err(|e| Status::aborted(e.to_string()))?;
        Ok(Response::new(EndorseResponse {
            prepared_transaction: Some(Envelope {
                payload,
                signature: Bytes::new(),
            }),
        }))
    }

    async fn submit(
        &self,
        request: Request<SubmitRequest>,
    ) -> Result<Response<SubmitResponse>, Status> {
        let request = request.into_inner();
        let envelope = request
            .prepared_transaction
            .ok_or_else(|| Status::invalid_argument("a prepared transaction is required"))?;
        if envelope.signature.is_empty() {
            return Err(Status::invalid_argument(
                "the prepared transaction is not signed",
            ));
        }
        // The orderers order it on the channel its header names: a request
        // naming another would have the client wait on the wrong channel.
        let header = Payload::decode(envelope.payload.clone())
            .ok()
            .and_then(|payload| payload.header)
            .and_then(|header| ChannelHeader::decode(header.channel_header).ok())
            .ok_or_else(|| {
                Status::invalid_argument("the prepared transaction has no readable channel header")
            })?;
        if header.channel_id != request.channel_id {
            return Err(Status::invalid_argument(format!(
                "the prepared transaction is for channel {:?}, not the requested {:?}",
                header.channel_id, request.channel_id
            )));
        }
        let mut failures = Vec::new();
        let orderers = &self.config.orderers;
        let chosen = self.config.orderer_choice.order(orderers.len());
        let in_turn = self.silent.answering_first(
            chosen.into_iter().map(|index| &orderers[index]),
            Instant::now(),
        );
        for orderer in in_turn {
            let within = self.config.timeouts.broadcast;
            let answer = tokio::time::timeout(
                within,
                self.broadcasts
                    .broadcast(orderer, || self.link(orderer), envelope.clone()),
            )
            .await
            .unwrap_or_else(|_| Err(timed_out("broadcast", within)));
            self.silent.note(orderer, answer.is_ok(), Instant::now());
            match answer {
                Ok(answer) if answer.status == weft_protos::common::Status::Success as i32 => {
                    return Ok(Response::new(SubmitResponse {}));
                }
                Ok(answer) => {
                    // The orderer refused the transaction itself: another
                    // orderer would refuse it too.
                    let status = weft_protos::common::Status::try_from(answer.status).map_or_else(
                        |_| answer.status.to_string(),
                        |s| s.as_str_name().to_owned(),
                    );
                    return Err(Status::aborted(format!(
                        "received unsuccessful response from orderer {orderer}: status={status}, info={}",
                        answer.info
                    )));
                }
                Err(status) => failures.push(detail(orderer, "", status.message())),
            }
        }
        Err(failed(
            Code::Unavailable,
            "no orderers could successfully process transaction",
            &failures,
        ))
    }

    async fn commit_status(
        &self,
        request: Request<SignedCommitStatusRequest>,
    ) -> Result<Response<CommitStatusResponse>, Status> {
        let signed = request.into_inner();
        let request = CommitStatusRequest::decode(signed.request.clone())
            .map_err(|e| Status::invalid_argument(format!("malformed request: {e}")))?;
        let channel = self.channel(&request.channel_id)?;
        Self::check_reader(
            channel.as_ref(),
            &request.identity,
            &signed.request,
            &signed.signature,
        )?;
        // Waiting first, then looking up, leaves no gap for a block to
        // commit the transaction unseen.
        let waiters = self.commit_waiters(&request.channel_id, channel.as_ref());
        let answer = waiters
            .wait(&request.transaction_id)
            .map_err(|e| Status::resource_exhausted(e.to_string()))?;
        let committed = *channel.committed_height().borrow();
        // The lookup stays on this task unless the block it finds must be
        // synced before it is reported (group commit).
        let blocks = channel.blocks();
        let read_failed = |e| Status::internal(format!("reading the ledger failed: {e}"));
        let location = match blocks
            .tx_location_unsynced(&request.transaction_id)
            .map_err(read_failed)?
        {
            Some(found) if blocks.read_syncs(found.block_number) => {
                let store = blocks.clone();
                let tx_id = request.transaction_id.clone();
                tokio::task::spawn_blocking(move || store.tx_location(&tx_id))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?
                    .map_err(read_failed)?
            }
            found => found,
        };
        if let Some(location) = location.filter(|l| l.block_number < committed) {
            drop(answer);
            waiters.forget_gone(&request.transaction_id);
            return Ok(Response::new(CommitStatusResponse {
                // Blocks this peer committed always carry their codes.
                result: location.validation_code.map_or(255, i32::from),
                block_number: location.block_number,
            }));
        }
        answer
            .await
            .map(Response::new)
            .map_err(|_| Status::unavailable("the channel's ledger closed"))
    }

    async fn evaluate(
        &self,
        request: Request<EvaluateRequest>,
    ) -> Result<Response<EvaluateResponse>, Status> {
        let request = request.into_inner();
        let signed = request
            .proposed_transaction
            .ok_or_else(|| Status::invalid_argument("a proposed transaction is required"))?;
        let proposal = ReceivedProposal::decode(&signed).map_err(|e| {
            Status::invalid_argument(format!("failed to unpack transaction proposal: {e}"))
        })?;
        let evaluators = self.evaluators(
            &request.target_organizations,
            !proposal.transient.is_empty(),
        );
        let mut failures = Vec::new();
        let mut last_code = Code::Aborted;
        for (msp_id, address) in evaluators {
            let answer = match address {
                None => Ok(self.endorser.answer(signed.clone()).await),
                Some(address) => self.ask_noting_silence(address, signed.clone(), None).await,
            };
            let shown = address.unwrap_or(&self.config.local_address);
            // Evaluation needs a result, not an endorsement.
            match answer.map(|response| (response_failure(&response), response)) {
                Ok((None, response)) => {
                    return Ok(Response::new(EvaluateResponse {
                        result: response.response,
                    }));
                }
                // The peer refused (ABORTED): another peer may not.
                Ok((Some((Code::Aborted, reason)), _)) => {
                    failures.push(detail(shown, &msp_id, reason));
                    last_code = Code::Aborted;
                }
                // The chaincode's own error: every peer would answer it.
                Ok((Some((code, reason)), _)) => {
                    failures.push(detail(shown, &msp_id, reason));
                    return Err(failed(
                        code,
                        "evaluate call to endorser returned error",
                        &failures,
                    ));
                }
                Err(status) => {
                    failures.push(detail(shown, &msp_id, status.message()));
                    last_code = Code::Unavailable;
                }
            }
        }
        if failures.is_empty() {
            return Err(Status::failed_precondition(format!(
                "no peers available to evaluate chaincode {} in channel {}",
                proposal.chaincode_id.name, proposal.channel_header.channel_id
            )));
        }
        Err(failed(
            last_code,
            "failed to evaluate transaction, see attached details for more info",
            &failures,
        ))
    }

    type ChaincodeEventsStream = EventStream;

    async fn chaincode_events(
        &self,
        request: Request<SignedChaincodeEventsRequest>,
    ) -> Result<Response<Self::ChaincodeEventsStream>, Status> {
        let signed = request.into_inner();
        let request = ChaincodeEventsRequest::decode(signed.request.clone())
            .map_err(|e| Status::invalid_argument(format!("malformed request: {e}")))?;
        let channel = self.channel(&request.channel_id)?;
        Self::check_reader(
            channel.as_ref(),
            &request.identity,
            &signed.request,
            &signed.signature,
        )?;
        let blocks = channel.blocks().clone();
        let start = match request.start_position.and_then(|position| position.r#type) {
            Some(SeekType::Oldest(_)) => 0,
            Some(SeekType::Specified(specified)) => specified.number,
            Some(SeekType::Newest(_)) => channel.committed_height().borrow().saturating_sub(1),
            Some(SeekType::NextCommit(_)) | None => *channel.committed_height().borrow(),
        };
        let (sender, receiver) = mpsc::channel(EVENTS_BUFFERED_MAX);
        tokio::spawn(stream_events(
            blocks,
            channel.committed_height(),
            start,
            request.chaincode_id,
            request.after_transaction_id,
            sender,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }
}

/// Sends the events of `chaincode` block by block from `start`, skipping
/// those up to `after_tx_id` if it is given, until the client goes away.
async fn stream_events(
    blocks: Arc<BlockStore>,
    mut heights: tokio::sync::watch::Receiver<u64>,
    start: u64,
    chaincode: String,
    after_tx_id: String,
    sender: mpsc::Sender<Result<ChaincodeEventsResponse, Status>>,
) {
    let mut skipping = !after_tx_id.is_empty();
    let mut number = start;
    loop {
        if number >= *heights.borrow_and_update() {
            tokio::select! {
                changed = heights.changed() => if changed.is_err() { return },
                () = sender.closed() => return,
            }
            continue;
        }
        let block = match blocks.block_from_task(number).await {
            Ok(Some(block)) => block,
            Ok(None) => return,
            Err(error) => {
                let _ = sender
                    .send(Err(Status::internal(format!(
                        "reading block {number}: {error}"
                    ))))
                    .await;
                return;
            }
        };
        let mut events = Vec::new();
        for (tx_id, event) in chaincode_events(block, &chaincode) {
            if skipping {
                skipping = tx_id != after_tx_id;
                continue;
            }
            events.push(event);
        }
        if !events.is_empty() {
            let response = ChaincodeEventsResponse {
                events,
                block_number: number,
            };
            if sender.send(Ok(response)).await.is_err() {
                return;
            }
        }
        number += 1;
    }
}

/// The events of `chaincode` set by the valid transactions of `block`, in
/// order, with their TxIDs.
fn chaincode_events(
    block: weft_protos::common::Block,
    chaincode: &str,
) -> Vec<(String, ChaincodeEvent)> {
    let filter = weft_protos::block::metadata_slot(&block, BlockMetadataIndex::TransactionsFilter)
        .cloned()
        .unwrap_or_default();
    let Ok(decoded) = DecodedBlock::from_block(block, Limits::default()) else {
        return Vec::new();
    };
    let mut found = BTreeMap::new();
    for (index, transaction) in decoded.transactions.iter().enumerate() {
        let valid = filter.get(index) == Some(&0);
        let Ok(transaction) = transaction else {
            continue;
        };
        let TxBody::Endorser(endorser) = &transaction.body else {
            continue;
        };
        if !valid {
            continue;
        }
        for action in &endorser.actions {
            if let Some(event) = action
                .event
                .as_ref()
                .filter(|e| e.chaincode_id == chaincode)
            {
                found.insert(index, (transaction.tx_id().to_owned(), event.clone()));
            }
        }
    }
    found.into_values().collect()
}
