//! Cluster traffic between orderers: the `weft.cluster.Cluster` gRPC
//! service (server side) and the connections to the other consenters
//! (client side), shared by every Raft and Kafka channel of the node.
//!
//! - Raft messages go out through one sender task per peer endpoint with
//!   a bounded queue; it sends whatever is queued as one request on a
//!   long-lived `Step` stream. A full queue or a broken stream drops
//!   messages, which Raft tolerates (it retries by itself), so a dead
//!   peer never blocks the others.
//! - A follower forwards the envelopes it accepted to the leader on one
//!   long-lived `Forward` stream per leader endpoint, in batches of
//!   whatever is queued; the leader answers each once its block is decided,
//!   in the order received, also in batches (a decided block answers
//!   hundreds at once). A unary call per envelope cost more CPU than the
//!   envelope's signature check.
//! - A node catching up from a snapshot pulls the blocks it lacks from a
//!   peer (`Pull`), as Fabric's etcdraft pulls them through Deliver.
//! - Kafka channels that order only TxIDs hand each other envelopes
//!   (`Share`, `Fetch`; `crate::consensus::kafka`).
//!
//! With TLS on, the cluster runs mutual TLS as Fabric's does: the server
//! asks every caller for a certificate from a trusted TLS CA, and each
//! call may only touch channels that name that very certificate as a
//! consenter's client TLS certificate in their current config (anything
//! else is `PERMISSION_DENIED`, or `FORBIDDEN` for a forwarded envelope).
//! In plaintext nothing is authenticated, so the cluster port must then
//! only be reachable by the orderers. Raft messages are decoded with
//! raft-rs's codec (rust-protobuf 2), which is another reason the port
//! must not face clients.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use prost::Message as _;
use protobuf::Message as _;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tonic::transport::Channel as GrpcChannel;
use tonic::{Request, Response, Status as GrpcStatus, Streaming};
use weft_protos::cluster::cluster_client::ClusterClient;
use weft_protos::cluster::cluster_server::Cluster;
use weft_protos::cluster::{
    FetchRequest, FetchResponse, ForwardRequest, ForwardResponse, PullRequest, PulledBlock,
    RaftMessage, ShareRequest, ShareResponse, StepRequest, StepResponse, SubmitRequest,
    SubmitResponse,
};
use weft_protos::common::{Block, Status};

use crate::admission::{Admitted, Refusal};
use crate::chain::Ack;
use crate::channel::{Channel, Channels};
use crate::consensus::kafka::{Payloads, digest};
use crate::consensus::pinned::PinnedDialer;

/// Raft messages queued for one peer before new ones are dropped.
const PEER_QUEUE_MAX: usize = 4096;
/// Raft messages sent in one `Step` call at most.
const STEP_BATCH_MAX: usize = 256;
/// Raft messages queued for one channel's Raft node before new ones are
/// dropped.
pub(crate) const INBOX_MAX: usize = 4096;
/// How long connecting to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Batches of Raft messages buffered for a peer's `Step` stream before
/// new ones are dropped.
const STEP_REQUESTS_BUFFERED: usize = 64;
/// How long a node waits before opening a `Step` stream that ended again.
const STEP_RETRY: Duration = Duration::from_millis(50);
/// How long a node waits before trying a peer found unreachable again.
const STEP_RETRY_UNREACHABLE: Duration = Duration::from_millis(500);
/// A `Step` stream open this long reached its peer.
const STEP_STREAM_HEALTHY_AFTER: Duration = Duration::from_secs(1);
/// Envelopes queued for forwarding to one leader before new ones are
/// refused (SERVICE_UNAVAILABLE): more than a channel's mailbox holds.
const FORWARD_QUEUE_MAX: usize = 8192;
/// Envelopes in one `ForwardRequest` at most.
const FORWARD_BATCH_MAX: usize = 256;
/// `ForwardRequest`s buffered for the stream.
const FORWARD_REQUESTS_BUFFERED: usize = 64;
/// Forwarded envelopes the leader holds unanswered per stream before it
/// stops reading the stream.
const FORWARDED_IN_FLIGHT_MAX: usize = 4096;
/// Answers in one `ForwardResponse` at most.
const ANSWER_BATCH_MAX: usize = 1024;
/// How long a follower waits before opening a failed stream again.
const FORWARD_RETRY: Duration = Duration::from_millis(100);
/// Envelopes or digests in one `Share` or `Fetch` call at most.
pub(crate) const SHARE_BATCH_MAX: usize = 4096;
/// How long a `Share` or `Fetch` call may take.
const SHARE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a forwarded envelope may wait for the leader's answer before
/// the follower gives up on the stream (a leader that hangs rather than
/// failing would otherwise hold its followers' clients forever).
const FORWARD_ANSWER_MAX: Duration = Duration::from_secs(30);
/// Blocks pulled in one `Pull` call at most.
pub(crate) const PULL_BLOCKS_MAX: u64 = 1000;

/// One peer endpoint: its gRPC client and the queues of its sender tasks.
#[derive(Debug, Clone)]
struct Peer {
    client: ClusterClient<GrpcChannel>,
    steps: mpsc::Sender<RaftMessage>,
    forwards: mpsc::Sender<Forward>,
}

/// The answer to a forwarded envelope, for the client's Broadcast stream.
pub(crate) type Done = Option<oneshot::Sender<Result<(), Refusal>>>;

/// An envelope on its way to the leader, and where its answer goes.
#[derive(Debug)]
struct Forward {
    submission: SubmitRequest,
    done: Done,
}

/// The client side: connections to the other consenters, by endpoint
/// (`host:port` as the channel config names them).
#[derive(Debug)]
pub(crate) struct Transport {
    peers: Mutex<HashMap<String, Peer>>,
    message_bytes_max: usize,
    /// TLS towards the other consenters, their server certificates
    /// pinned; `None` dials in plaintext.
    tls: Option<PinnedDialer>,
    /// Where connections and sender tasks run: the node's runtime, or a
    /// Raft loop's own ([`Transport::on_runtime`]).
    runtime: tokio::runtime::Handle,
}

impl Transport {
    /// The transport of a node whose runtime is the current one.
    pub fn new(message_bytes_max: usize, tls: Option<PinnedDialer>) -> Self {
        Self {
            peers: Mutex::new(HashMap::new()),
            message_bytes_max,
            tls,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// A transport with the same limits and TLS whose connections and
    /// sender tasks run on `runtime`. Each Raft loop sends its messages
    /// through one on the runtime it runs on, so that a message leaves
    /// from the thread that made it instead of waking the node's workers
    /// when the loop has a thread of its own (its forwards and pulls still
    /// go through the node's transport).
    pub fn on_runtime(&self, runtime: tokio::runtime::Handle) -> Self {
        Self {
            peers: Mutex::new(HashMap::new()),
            message_bytes_max: self.message_bytes_max,
            tls: self.tls.clone(),
            runtime,
        }
    }

    /// The node's runtime.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// The peer at `endpoint`, connected lazily; its sender task starts
    /// with it, on the node's runtime.
    fn peer(&self, endpoint: &str) -> Result<Peer, String> {
        let mut peers = self.peers.lock();
        if let Some(peer) = peers.get(endpoint) {
            return Ok(peer.clone());
        }
        let _runtime = self.runtime.enter();
        let channel = match &self.tls {
            Some(dialer) => dialer.channel(endpoint, CONNECT_TIMEOUT)?,
            None => weft_protos::dial::with_keepalive(
                weft_protos::dial::endpoint(endpoint, None)
                    .map_err(|e| format!("consenter endpoint {endpoint:?} is not usable: {e}"))?,
                weft_protos::serve::Keepalive::CLIENT_DEFAULT,
            )
            .connect_timeout(CONNECT_TIMEOUT)
            .connect_lazy(),
        };
        let client = ClusterClient::new(channel)
            .max_decoding_message_size(self.message_bytes_max)
            .max_encoding_message_size(self.message_bytes_max);
        let (steps, queue) = mpsc::channel(PEER_QUEUE_MAX);
        tokio::spawn(send_steps(
            endpoint.to_owned(),
            client.clone(),
            queue,
            self.message_bytes_max / 2,
        ));
        let (forwards, forward_queue) = mpsc::channel(FORWARD_QUEUE_MAX);
        tokio::spawn(forward_envelopes(
            endpoint.to_owned(),
            client.clone(),
            forward_queue,
        ));
        let peer = Peer {
            client,
            steps,
            forwards,
        };
        peers.insert(endpoint.to_owned(), peer.clone());
        Ok(peer)
    }

    /// Queues a Raft message of `channel` for the node at `endpoint`;
    /// drops it if the peer's queue is full.
    pub fn send(&self, endpoint: &str, channel: &str, message: &raft::eraftpb::Message) {
        let bytes = match message.write_to_bytes() {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::error!(%channel, %error, "a raft message does not encode");
                return;
            }
        };
        match self.peer(endpoint) {
            Ok(peer) => {
                let _ = peer.steps.try_send(RaftMessage {
                    channel: channel.to_owned(),
                    message: bytes.into(),
                });
            }
            Err(error) => tracing::warn!(%channel, %error, "raft message not sent"),
        }
    }

    /// Queues an envelope for the leader at `endpoint`, waiting while its
    /// queue is full; `done` gets the leader's answer, or
    /// SERVICE_UNAVAILABLE if the leader cannot be reached.
    pub async fn forward(&self, endpoint: &str, channel: &str, input: Admitted, done: Done) {
        let forward = Forward {
            submission: submission(channel, input),
            done,
        };
        match self.peer(endpoint) {
            Ok(peer) => {
                if let Err(mpsc::error::SendError(forward)) = peer.forwards.send(forward).await {
                    refuse(forward.done, "the node is stopping".to_owned());
                }
            }
            Err(reason) => refuse(forward.done, reason),
        }
    }

    /// [`Transport::forward`] for a caller that cannot wait (the channel's
    /// Raft task): a full queue refuses the envelope.
    pub fn try_forward(&self, endpoint: &str, channel: &str, input: Admitted, done: Done) {
        let forward = Forward {
            submission: submission(channel, input),
            done,
        };
        let peer = match self.peer(endpoint) {
            Ok(peer) => peer,
            Err(reason) => return refuse(forward.done, reason),
        };
        if let Err(error) = peer.forwards.try_send(forward) {
            let forward = match error {
                mpsc::error::TrySendError::Full(forward)
                | mpsc::error::TrySendError::Closed(forward) => forward,
            };
            refuse(
                forward.done,
                format!("the Raft leader at {endpoint} is not keeping up; retry"),
            );
        }
    }

    /// Blocks `start..end` (at most [`PULL_BLOCKS_MAX`]) of `channel` from
    /// the node at `endpoint`, in order; fewer if it has fewer.
    pub async fn pull(
        &self,
        endpoint: &str,
        channel: &str,
        start: u64,
        end: u64,
    ) -> Result<Vec<Block>, String> {
        let mut client = self.peer(endpoint)?.client;
        let end = end.min(start.saturating_add(PULL_BLOCKS_MAX));
        let mut stream = client
            .pull(PullRequest {
                channel: channel.to_owned(),
                start,
                end,
            })
            .await
            .map_err(|status| format!("pulling from {endpoint}: {}", status.message()))?
            .into_inner();
        let mut blocks = Vec::new();
        while let Some(pulled) = stream
            .message()
            .await
            .map_err(|status| format!("pulling from {endpoint}: {}", status.message()))?
        {
            let block = Block::decode(pulled.block)
                .map_err(|e| format!("a block pulled from {endpoint} does not decode: {e}"))?;
            blocks.push(block);
            if blocks.len() as u64 >= end - start {
                break;
            }
        }
        Ok(blocks)
    }
}

impl Transport {
    /// Hands `envelopes` of `channel` to the node at `endpoint`, which
    /// keeps them until they are ordered.
    pub async fn share(
        &self,
        endpoint: &str,
        channel: &str,
        envelopes: Vec<Bytes>,
    ) -> Result<(), String> {
        let mut client = self.peer(endpoint)?.client;
        let mut request = Request::new(ShareRequest {
            channel: channel.to_owned(),
            envelopes,
        });
        request.set_timeout(SHARE_TIMEOUT);
        client
            .share(request)
            .await
            .map(drop)
            .map_err(|status| format!("sharing envelopes with {endpoint}: {}", status.message()))
    }

    /// The envelopes of `digests` of `channel` that the node at
    /// `endpoint` holds.
    pub async fn fetch(
        &self,
        endpoint: &str,
        channel: &str,
        digests: Vec<Bytes>,
    ) -> Result<Vec<Bytes>, String> {
        let mut client = self.peer(endpoint)?.client;
        let mut request = Request::new(FetchRequest {
            channel: channel.to_owned(),
            digests,
        });
        request.set_timeout(SHARE_TIMEOUT);
        client
            .fetch(request)
            .await
            .map(|response| response.into_inner().envelopes)
            .map_err(|status| format!("fetching envelopes from {endpoint}: {}", status.message()))
    }
}

/// What the leader is sent for an accepted envelope of `channel`.
fn submission(channel: &str, input: Admitted) -> SubmitRequest {
    match input {
        Admitted::Normal {
            envelope,
            size_bytes,
            config_sequence,
        } => SubmitRequest {
            channel: channel.to_owned(),
            envelope,
            size_bytes,
            config_sequence,
            config_update: Bytes::new(),
            is_config: false,
        },
        Admitted::Config {
            envelope,
            update,
            config_sequence,
        } => SubmitRequest {
            channel: channel.to_owned(),
            envelope,
            size_bytes: 0,
            config_sequence,
            config_update: update,
            is_config: true,
        },
    }
}

/// Answers SERVICE_UNAVAILABLE for an envelope that cannot be forwarded.
fn refuse(done: Done, reason: String) {
    if let Some(done) = done {
        let _ = done.send(Err(Refusal::new(Status::ServiceUnavailable, reason)));
    }
}

/// Forwards the envelopes queued for one leader endpoint on a `Forward`
/// stream, opened when the first envelope comes and again after a
/// failure; matches the answers, which come in order, to the envelopes.
/// When the stream fails, the envelopes it had not answered are refused
/// (they may still be ordered: SERVICE_UNAVAILABLE never promises they
/// are not).
async fn forward_envelopes(
    endpoint: String,
    mut client: ClusterClient<GrpcChannel>,
    mut queue: mpsc::Receiver<Forward>,
) {
    let mut waiting: VecDeque<(Instant, Done)> = VecDeque::new();
    loop {
        // Open a stream once there is something to send.
        let Some(first) = queue.recv().await else {
            return;
        };
        let (requests, requests_out) = mpsc::channel(FORWARD_REQUESTS_BUFFERED);
        let mut outgoing = Some(batch_from(first, &mut queue, &mut waiting));
        // The first batch goes in before the call: tonic sends the request
        // stream while the call waits for the response headers.
        if let Some(batch) = outgoing.take() {
            let _ = requests.try_send(batch);
        }
        let call = client.forward(tokio_stream::wrappers::ReceiverStream::new(requests_out));
        // A leader that stopped answering (a stalled process) never opens
        // the stream: its envelopes' clients hear so within the bound, not
        // once the connection's keepalive gives up.
        let failure = match tokio::time::timeout(FORWARD_ANSWER_MAX, call).await {
            Err(_) => format!("the leader did not answer in {FORWARD_ANSWER_MAX:?}"),
            Ok(Ok(response)) => {
                relay_answers(
                    response.into_inner(),
                    &requests,
                    &mut queue,
                    &mut waiting,
                    &mut outgoing,
                )
                .await
            }
            Ok(Err(status)) => status.message().to_owned(),
        };
        tracing::debug!(leader = %endpoint, %failure, unanswered = waiting.len(), "forward stream ended");
        for done in waiting.drain(..).filter_map(|(_, done)| done) {
            let _ = done.send(Err(Refusal::new(
                Status::ServiceUnavailable,
                format!("forwarding to the Raft leader at {endpoint} failed: {failure}; retry"),
            )));
        }
        tokio::time::sleep(FORWARD_RETRY).await;
    }
}

/// A `ForwardRequest` of `first` and whatever else is queued; their
/// answers are awaited in `waiting`, in order.
fn batch_from(
    first: Forward,
    queue: &mut mpsc::Receiver<Forward>,
    waiting: &mut VecDeque<(Instant, Done)>,
) -> ForwardRequest {
    let mut submissions = Vec::with_capacity(FORWARD_BATCH_MAX.min(queue.len() + 1));
    let mut next = Some(first);
    let now = Instant::now();
    while let Some(forward) = next.take() {
        submissions.push(forward.submission);
        waiting.push_back((now, forward.done));
        if submissions.len() < FORWARD_BATCH_MAX {
            next = queue.try_recv().ok();
        }
    }
    ForwardRequest { submissions }
}

/// Sends batches and takes answers on one open stream until it fails or
/// the transport goes; why it ended.
async fn relay_answers(
    mut answers: Streaming<ForwardResponse>,
    requests: &mpsc::Sender<ForwardRequest>,
    queue: &mut mpsc::Receiver<Forward>,
    waiting: &mut VecDeque<(Instant, Done)>,
    outgoing: &mut Option<ForwardRequest>,
) -> String {
    loop {
        let overdue = waiting
            .front()
            .map(|(since, _)| tokio::time::Instant::from_std(*since + FORWARD_ANSWER_MAX));
        let overdue = async move {
            match overdue {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        // Never wait to send while answers are due: sending and reading
        // are branches of one select, and a batch is only taken from the
        // queue once the previous one is in the stream.
        tokio::select! {
            biased;
            answer = answers.message() => match answer {
                Ok(Some(response)) => {
                    for answer in response.answers {
                        let Some((_, done)) = waiting.pop_front() else {
                            return "the leader answered more envelopes than it was sent".to_owned();
                        };
                        if let Some(done) = done {
                            let _ = done.send(refusal_of(answer));
                        }
                    }
                }
                Ok(None) => return "the leader ended the stream".to_owned(),
                Err(status) => return status.message().to_owned(),
            },
            permit = requests.reserve(), if outgoing.is_some() => match permit {
                Ok(permit) => {
                    if let Some(batch) = outgoing.take() {
                        permit.send(batch);
                    }
                }
                Err(_) => return "the stream closed".to_owned(),
            },
            () = overdue => {
                return format!("no answer from the leader in {FORWARD_ANSWER_MAX:?}");
            }
            forward = queue.recv(), if outgoing.is_none() => match forward {
                Some(forward) => *outgoing = Some(batch_from(forward, queue, waiting)),
                None => return "the node is stopping".to_owned(),
            },
        }
    }
}

/// A leader's answer as the client hears it.
fn refusal_of(answer: SubmitResponse) -> Result<(), Refusal> {
    if answer.status == Status::Success as i32 {
        Ok(())
    } else {
        Err(Refusal::new(
            Status::try_from(answer.status).unwrap_or(Status::ServiceUnavailable),
            answer.info,
        ))
    }
}

/// Sends the queued Raft messages of one peer, a batch per call (at most
/// `batch_bytes_max` bytes of messages, or one larger message), until the
/// transport is dropped.
async fn send_steps(
    endpoint: String,
    client: ClusterClient<GrpcChannel>,
    mut queue: mpsc::Receiver<RaftMessage>,
    batch_bytes_max: usize,
) {
    let mut failing = false;
    let mut next = None;
    loop {
        // One long-lived `Step` stream; a new one once it ends.
        let (requests, requests_out) = mpsc::channel(STEP_REQUESTS_BUFFERED);
        let opened = Instant::now();
        let mut call = {
            let mut client = client.clone();
            Box::pin(async move {
                client
                    .step(tokio_stream::wrappers::ReceiverStream::new(requests_out))
                    .await
            })
        };
        let ended = loop {
            let first = match next.take() {
                Some(message) => message,
                None => tokio::select! {
                    ended = &mut call => break ended.err(),
                    message = queue.recv() => match message {
                        Some(message) => message,
                        None => return,
                    },
                },
            };
            let messages = take_batch(first, &mut queue, &mut next, batch_bytes_max);
            match requests.try_send(StepRequest { messages }) {
                // A queued request says nothing of the peer (the stream may
                // still fail to connect); a stream that lasts does.
                Ok(()) => {
                    if failing && opened.elapsed() >= STEP_STREAM_HEALTHY_AFTER {
                        tracing::info!(peer = %endpoint, "consenter reachable again");
                        failing = false;
                    }
                }
                // The stream is backed up: Raft resends what it lost.
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::debug!(peer = %endpoint, "raft messages dropped: the stream is full");
                }
                Err(mpsc::error::TrySendError::Closed(_)) => break (&mut call).await.err(),
            }
        };
        if let Some(status) = ended
            && !failing
        {
            tracing::warn!(peer = %endpoint, error = %status.message(), "consenter unreachable; raft messages dropped");
            failing = true;
        }
        // Raft resends; do not spin on a dead peer.
        tokio::time::sleep(if failing {
            STEP_RETRY_UNREACHABLE
        } else {
            STEP_RETRY
        })
        .await;
    }
}

/// The first message and whatever else is queued, up to a batch's count
/// and bytes; a message that would overflow the bytes waits in `next`.
fn take_batch(
    first: RaftMessage,
    queue: &mut mpsc::Receiver<RaftMessage>,
    next: &mut Option<RaftMessage>,
    batch_bytes_max: usize,
) -> Vec<RaftMessage> {
    let mut batch_bytes = first.message.len();
    let mut messages = vec![first];
    while messages.len() < STEP_BATCH_MAX {
        match queue.try_recv() {
            Ok(message) if batch_bytes + message.message.len() > batch_bytes_max => {
                *next = Some(message);
                break;
            }
            Ok(message) => {
                batch_bytes += message.message.len();
                messages.push(message);
            }
            Err(_) => break,
        }
    }
    messages
}

/// A channel's Raft node as the cluster service reaches it.
pub(crate) type Inbox = mpsc::Sender<raft::eraftpb::Message>;

/// The server side: `weft.cluster.Cluster` over the node's channels.
#[derive(Debug, Clone)]
pub(crate) struct ClusterService {
    pub channels: Arc<Channels>,
    pub inboxes: Arc<HashMap<String, Inbox>>,
    /// The envelopes held by each Kafka channel that orders only TxIDs.
    pub payloads: Arc<HashMap<String, Arc<Payloads>>>,
    /// Turns true when the orderer stops: open `Forward` streams end then,
    /// letting go of the channels (and their block stores).
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Whether callers are authenticated: true when the cluster serves
    /// mutual TLS.
    pub authenticate: bool,
}

/// Who called the cluster service.
#[derive(Debug, Clone)]
enum Caller {
    /// Plaintext: anyone who reaches the port.
    Anyone,
    /// Mutual TLS: the DER of the certificate the caller presented.
    Certified(Bytes),
}

impl Caller {
    fn of<T>(request: &Request<T>, authenticate: bool) -> Result<Self, GrpcStatus> {
        if !authenticate {
            return Ok(Self::Anyone);
        }
        // The handshake already refused callers without a certificate from
        // a trusted CA; this only guards against a server set up otherwise.
        weft_protos::serve::client_certificate(request)
            .map(Self::Certified)
            .ok_or_else(|| {
                GrpcStatus::unauthenticated("cluster calls need a consenter's client certificate")
            })
    }

    /// Whether the caller is one of `channel`'s consenters (always, in
    /// plaintext).
    fn is_consenter_of(&self, channel: &Channel) -> bool {
        match self {
            Self::Anyone => true,
            Self::Certified(der) => channel.config().is_consenter(der),
        }
    }
}

/// The refusal of a call touching `channel` by a caller who is not one of
/// its consenters, logged.
fn not_a_consenter(channel: &str) -> String {
    tracing::warn!(
        channel,
        "refused cluster traffic from a TLS client that is not one of the channel's consenters"
    );
    format!("the caller's TLS certificate is not a consenter's of channel {channel:?}")
}

type BlockStream = Pin<Box<dyn Stream<Item = Result<PulledBlock, GrpcStatus>> + Send>>;
type AnswerStream = Pin<Box<dyn Stream<Item = Result<ForwardResponse, GrpcStatus>> + Send>>;

/// The leader's side of a `Forward` stream: hands each forwarded envelope
/// to its channel's consenter, in order, and queues its promise.
async fn take_forwarded(
    channels: Arc<Channels>,
    caller: Caller,
    mut requests: Streaming<ForwardRequest>,
    acks: mpsc::Sender<Result<Ack, Refusal>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let request = tokio::select! {
            request = requests.message() => match request {
                Ok(Some(request)) => request,
                Ok(None) | Err(_) => return,
            },
            _ = shutdown.wait_for(|stopping| *stopping) => return,
        };
        for submission in request.submissions {
            let Some(channel) = channels.get(&submission.channel) else {
                let refusal = Refusal::new(
                    Status::NotFound,
                    format!(
                        "channel {:?} does not exist on this orderer",
                        submission.channel
                    ),
                );
                if acks.send(Err(refusal)).await.is_err() {
                    return;
                }
                continue;
            };
            if !caller.is_consenter_of(&channel) {
                let refusal = Refusal::new(Status::Forbidden, not_a_consenter(&channel.id));
                if acks.send(Err(refusal)).await.is_err() {
                    return;
                }
                continue;
            }
            // The follower checked the envelope as Broadcast does; the
            // leader checks it again only if the config changed since.
            let input = if submission.is_config {
                Admitted::Config {
                    envelope: submission.envelope,
                    update: submission.config_update,
                    config_sequence: submission.config_sequence,
                }
            } else {
                Admitted::Normal {
                    envelope: submission.envelope,
                    size_bytes: submission.size_bytes,
                    config_sequence: submission.config_sequence,
                }
            };
            let ack = channel
                .chain
                .submit_forwarded(input)
                .await
                .map_err(|e| Refusal::new(Status::ServiceUnavailable, e.to_string()));
            if acks.send(ack).await.is_err() {
                return;
            }
        }
    }
}

/// Sends the answers of a `Forward` stream in order, each batch holding
/// the first answer awaited and every following one already known.
async fn answer_forwarded(
    mut acks: mpsc::Receiver<Result<Ack, Refusal>>,
    answers: mpsc::Sender<Result<ForwardResponse, GrpcStatus>>,
) {
    let as_answer = |result: Result<(), Refusal>| match result {
        Ok(()) => SubmitResponse {
            status: Status::Success as i32,
            info: String::new(),
        },
        Err(refusal) => SubmitResponse {
            status: refusal.status as i32,
            info: refusal.info,
        },
    };
    let mut held: Option<Result<Ack, Refusal>> = None;
    loop {
        let first = match held.take() {
            Some(ack) => ack,
            None => match acks.recv().await {
                Some(ack) => ack,
                None => return,
            },
        };
        let first = match first {
            Ok(ack) => ack.outcome().await,
            Err(refusal) => Err(refusal),
        };
        let mut batch = vec![as_answer(first)];
        while batch.len() < ANSWER_BATCH_MAX {
            let Ok(next) = acks.try_recv() else { break };
            match next {
                Err(refusal) => batch.push(as_answer(Err(refusal))),
                Ok(ack) => match ack.try_outcome() {
                    Ok(result) => batch.push(as_answer(result)),
                    Err(ack) => {
                        held = Some(Ok(ack));
                        break;
                    }
                },
            }
        }
        if answers
            .send(Ok(ForwardResponse { answers: batch }))
            .await
            .is_err()
        {
            return;
        }
    }
}

impl ClusterService {
    /// The envelope pool of `channel` for a caller that may touch it.
    fn payloads_for<T>(
        &self,
        request: &Request<T>,
        channel: &str,
        count: usize,
    ) -> Result<Arc<Payloads>, GrpcStatus> {
        let caller = Caller::of(request, self.authenticate)?;
        let served = self
            .channels
            .get(channel)
            .ok_or_else(|| GrpcStatus::not_found(format!("no channel {channel:?}")))?;
        if !caller.is_consenter_of(&served) {
            return Err(GrpcStatus::permission_denied(not_a_consenter(channel)));
        }
        if count > SHARE_BATCH_MAX {
            return Err(GrpcStatus::invalid_argument(format!(
                "{count} items in one call; at most {SHARE_BATCH_MAX}"
            )));
        }
        self.payloads.get(channel).cloned().ok_or_else(|| {
            GrpcStatus::failed_precondition(format!(
                "channel {channel:?} does not order TxIDs through Kafka here"
            ))
        })
    }

    /// Hands one request's Raft messages to their channels' Raft nodes.
    fn take_steps(&self, caller: &Caller, request: StepRequest) -> Result<(), GrpcStatus> {
        // The channel last found to be the caller's: a batch is mostly one
        // channel's messages.
        let mut checked: Option<String> = None;
        for message in request.messages {
            let Some(inbox) = self.inboxes.get(&message.channel) else {
                tracing::debug!(channel = %message.channel, "a raft message for a channel not ordered by raft here");
                continue;
            };
            if checked.as_deref() != Some(message.channel.as_str()) {
                let Some(channel) = self.channels.get(&message.channel) else {
                    continue;
                };
                if !caller.is_consenter_of(&channel) {
                    return Err(GrpcStatus::permission_denied(not_a_consenter(
                        &message.channel,
                    )));
                }
                checked = Some(message.channel.clone());
            }
            match raft::eraftpb::Message::parse_from_bytes(&message.message) {
                // A full inbox drops the message; Raft resends.
                Ok(decoded) => {
                    let _ = inbox.try_send(decoded);
                }
                Err(error) => {
                    tracing::warn!(channel = %message.channel, %error, "a malformed raft message");
                    return Err(GrpcStatus::invalid_argument(format!(
                        "a raft message does not decode: {error}"
                    )));
                }
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn step(
        &self,
        request: Request<Streaming<StepRequest>>,
    ) -> Result<Response<StepResponse>, GrpcStatus> {
        let caller = Caller::of(&request, self.authenticate)?;
        let mut requests = request.into_inner();
        let mut shutdown = self.shutdown.clone();
        loop {
            let request = tokio::select! {
                request = requests.message() => request?,
                _ = shutdown.wait_for(|stopping| *stopping) => None,
            };
            match request {
                Some(request) => self.take_steps(&caller, request)?,
                None => return Ok(Response::new(StepResponse {})),
            }
        }
    }

    type ForwardStream = AnswerStream;

    async fn forward(
        &self,
        request: Request<Streaming<ForwardRequest>>,
    ) -> Result<Response<Self::ForwardStream>, GrpcStatus> {
        let caller = Caller::of(&request, self.authenticate)?;
        let (acks, acks_out) = mpsc::channel(FORWARDED_IN_FLIGHT_MAX);
        let (answers, answers_out) = mpsc::channel(FORWARD_REQUESTS_BUFFERED);
        tokio::spawn(take_forwarded(
            self.channels.clone(),
            caller,
            request.into_inner(),
            acks,
            self.shutdown.clone(),
        ));
        tokio::spawn(answer_forwarded(acks_out, answers));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(answers_out),
        )))
    }

    async fn share(
        &self,
        request: Request<ShareRequest>,
    ) -> Result<Response<ShareResponse>, GrpcStatus> {
        let payloads = self.payloads_for(
            &request,
            &request.get_ref().channel,
            request.get_ref().envelopes.len(),
        )?;
        // Taken once on disk: the sharing orderer publishes the IDs then.
        let envelopes: Vec<_> = request
            .into_inner()
            .envelopes
            .into_iter()
            .map(|envelope| (digest(&envelope), envelope))
            .collect();
        tokio::task::spawn_blocking(move || payloads.keep_durably(&envelopes))
            .await
            .map_err(|e| GrpcStatus::internal(format!("the envelope store failed: {e}")))?
            .map_err(|reason| {
                tracing::error!(%reason, "cannot keep shared envelopes");
                GrpcStatus::unavailable(reason)
            })?;
        Ok(Response::new(ShareResponse {}))
    }

    async fn fetch(
        &self,
        request: Request<FetchRequest>,
    ) -> Result<Response<FetchResponse>, GrpcStatus> {
        let payloads = self.payloads_for(
            &request,
            &request.get_ref().channel,
            request.get_ref().digests.len(),
        )?;
        let envelopes = request
            .into_inner()
            .digests
            .iter()
            .filter_map(|wanted| {
                let wanted: [u8; 32] = wanted.as_ref().try_into().ok()?;
                payloads.get(&wanted)
            })
            .collect();
        Ok(Response::new(FetchResponse { envelopes }))
    }

    type PullStream = BlockStream;

    async fn pull(
        &self,
        request: Request<PullRequest>,
    ) -> Result<Response<Self::PullStream>, GrpcStatus> {
        let caller = Caller::of(&request, self.authenticate)?;
        let request = request.into_inner();
        let channel = self
            .channels
            .get(&request.channel)
            .ok_or_else(|| GrpcStatus::not_found(format!("no channel {:?}", request.channel)))?;
        if !caller.is_consenter_of(&channel) {
            return Err(GrpcStatus::permission_denied(not_a_consenter(&channel.id)));
        }
        let end = request
            .end
            .min(request.start.saturating_add(PULL_BLOCKS_MAX))
            .min(channel.store.height());
        let (blocks, blocks_out) = mpsc::channel(16);
        tokio::task::spawn_blocking(move || {
            for number in request.start..end {
                let item = match channel.store.block_bytes(number) {
                    Ok(Some(bytes)) => Ok(PulledBlock { block: bytes }),
                    Ok(None) => Err(GrpcStatus::not_found(format!("no block {number}"))),
                    Err(error) => Err(GrpcStatus::internal(error.to_string())),
                };
                let stop = item.is_err();
                if blocks.blocking_send(item).is_err() || stop {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(blocks_out),
        )))
    }
}
