//! Cluster traffic between orderers: the `weft.cluster.Cluster` gRPC
//! service (server side) and the connections to the other consenters
//! (client side), shared by all Raft channels of the node.
//!
//! - Raft messages go out through one sender task per peer endpoint with
//!   a bounded queue; it sends whatever is queued as one `Step` call.
//!   A full queue or a failed call drops messages, which Raft tolerates
//!   (it retries by itself), so a dead peer never blocks the others.
//! - A follower forwards each envelope it accepted to the leader
//!   (`Submit`), which answers once the envelope's block is decided.
//! - A node catching up from a snapshot pulls the blocks it lacks from a
//!   peer (`Pull`), as Fabric's etcdraft pulls them through Deliver.
//!
//! Nothing here is authenticated yet: the consenters' TLS certificates
//! in the channel config are carried but not checked until mutual TLS
//! arrives, so the cluster port must only be reachable by the orderers.
//! Raft messages are decoded with raft-rs's codec (rust-protobuf 2), which
//! is another reason the port must not face clients.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use prost::Message as _;
use protobuf::Message as _;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::transport::{Channel as GrpcChannel, Endpoint};
use tonic::{Request, Response, Status as GrpcStatus};
use weft_protos::cluster::cluster_client::ClusterClient;
use weft_protos::cluster::cluster_server::Cluster;
use weft_protos::cluster::{
    PullRequest, PulledBlock, RaftMessage, StepRequest, StepResponse, SubmitRequest, SubmitResponse,
};
use weft_protos::common::{Block, Status};

use crate::broadcast::Refusal;
use crate::chain::ChainInput;
use crate::server::Channels;

/// Raft messages queued for one peer before new ones are dropped.
const PEER_QUEUE_MAX: usize = 4096;
/// Raft messages sent in one `Step` call at most.
const STEP_BATCH_MAX: usize = 256;
/// Raft messages queued for one channel's Raft node before new ones are
/// dropped.
pub(crate) const INBOX_MAX: usize = 4096;
/// How long connecting to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a `Step` call may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a forwarded envelope may wait for its block.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Blocks pulled in one `Pull` call at most.
pub(crate) const PULL_BLOCKS_MAX: u64 = 1000;

/// One peer endpoint: its gRPC client and the queue of its sender task.
#[derive(Debug, Clone)]
struct Peer {
    client: ClusterClient<GrpcChannel>,
    steps: mpsc::Sender<RaftMessage>,
}

/// The client side: connections to the other consenters, by endpoint
/// (`host:port` as the channel config names them).
#[derive(Debug)]
pub(crate) struct Transport {
    peers: Mutex<HashMap<String, Peer>>,
    message_bytes_max: usize,
}

impl Transport {
    pub fn new(message_bytes_max: usize) -> Self {
        Self {
            peers: Mutex::new(HashMap::new()),
            message_bytes_max,
        }
    }

    /// The peer at `endpoint`, connected lazily; its sender task starts
    /// with it. Must run inside the Tokio runtime.
    fn peer(&self, endpoint: &str) -> Result<Peer, String> {
        let mut peers = self.peers.lock();
        if let Some(peer) = peers.get(endpoint) {
            return Ok(peer.clone());
        }
        let channel = Endpoint::from_shared(format!("http://{endpoint}"))
            .map_err(|e| format!("consenter endpoint {endpoint:?} is not usable: {e}"))?
            .connect_timeout(CONNECT_TIMEOUT)
            .connect_lazy();
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
        let peer = Peer { client, steps };
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

    /// Hands an envelope to the leader at `endpoint`; its answer.
    pub async fn forward(
        &self,
        endpoint: &str,
        channel: &str,
        input: ChainInput,
    ) -> Result<(), Refusal> {
        let unavailable = |reason: String| Refusal::new(Status::ServiceUnavailable, reason);
        let mut client = self.peer(endpoint).map_err(unavailable)?.client;
        let request = match input {
            ChainInput::Normal {
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
            ChainInput::Config {
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
        };
        let mut request = Request::new(request);
        request.set_timeout(SUBMIT_TIMEOUT);
        let response = client.submit(request).await.map_err(|status| {
            unavailable(format!(
                "forwarding to the leader at {endpoint} failed: {}",
                status.message()
            ))
        })?;
        let response = response.into_inner();
        if response.status == Status::Success as i32 {
            Ok(())
        } else {
            Err(Refusal::new(
                Status::try_from(response.status).unwrap_or(Status::ServiceUnavailable),
                response.info,
            ))
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

/// Sends the queued Raft messages of one peer, a batch per call (at most
/// `batch_bytes_max` bytes of messages, or one larger message), until the
/// transport is dropped.
async fn send_steps(
    endpoint: String,
    mut client: ClusterClient<GrpcChannel>,
    mut queue: mpsc::Receiver<RaftMessage>,
    batch_bytes_max: usize,
) {
    let mut failing = false;
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(message) => message,
            None => match queue.recv().await {
                Some(message) => message,
                None => return,
            },
        };
        let mut batch_bytes = first.message.len();
        let mut messages = vec![first];
        while messages.len() < STEP_BATCH_MAX {
            match queue.try_recv() {
                Ok(message) if batch_bytes + message.message.len() > batch_bytes_max => {
                    next = Some(message);
                    break;
                }
                Ok(message) => {
                    batch_bytes += message.message.len();
                    messages.push(message);
                }
                Err(_) => break,
            }
        }
        let mut request = Request::new(StepRequest { messages });
        request.set_timeout(STEP_TIMEOUT);
        match client.step(request).await {
            Ok(_) => {
                if failing {
                    tracing::info!(peer = %endpoint, "consenter reachable again");
                    failing = false;
                }
            }
            Err(status) => {
                if !failing {
                    tracing::warn!(peer = %endpoint, error = %status.message(), "consenter unreachable; raft messages dropped");
                    failing = true;
                }
                // Raft resends; do not spin on a dead peer.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A channel's Raft node as the cluster service reaches it.
pub(crate) type Inbox = mpsc::Sender<raft::eraftpb::Message>;

/// The server side: `weft.cluster.Cluster` over the node's channels.
#[derive(Debug, Clone)]
pub(crate) struct ClusterService {
    pub channels: Arc<Channels>,
    pub inboxes: Arc<HashMap<String, Inbox>>,
}

type BlockStream = Pin<Box<dyn Stream<Item = Result<PulledBlock, GrpcStatus>> + Send>>;

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn step(
        &self,
        request: Request<StepRequest>,
    ) -> Result<Response<StepResponse>, GrpcStatus> {
        for message in request.into_inner().messages {
            let Some(inbox) = self.inboxes.get(&message.channel) else {
                tracing::debug!(channel = %message.channel, "a raft message for a channel not ordered by raft here");
                continue;
            };
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
        Ok(Response::new(StepResponse {}))
    }

    async fn submit(
        &self,
        request: Request<SubmitRequest>,
    ) -> Result<Response<SubmitResponse>, GrpcStatus> {
        let request = request.into_inner();
        let answer = |result: Result<(), Refusal>| {
            Ok(Response::new(match result {
                Ok(()) => SubmitResponse {
                    status: Status::Success as i32,
                    info: String::new(),
                },
                Err(refusal) => SubmitResponse {
                    status: refusal.status as i32,
                    info: refusal.info,
                },
            }))
        };
        let Some(channel) = self.channels.get(&request.channel) else {
            return answer(Err(Refusal::new(
                Status::NotFound,
                format!(
                    "channel {:?} does not exist on this orderer",
                    request.channel
                ),
            )));
        };
        // The follower checked the envelope as Broadcast does; the leader
        // checks it again only if the config changed since (in the chain).
        let input = if request.is_config {
            ChainInput::Config {
                envelope: request.envelope,
                update: request.config_update,
                config_sequence: request.config_sequence,
            }
        } else {
            ChainInput::Normal {
                envelope: request.envelope,
                size_bytes: request.size_bytes,
                config_sequence: request.config_sequence,
            }
        };
        let result = match channel.chain.submit_forwarded(input).await {
            Ok(ack) => ack.outcome().await,
            Err(unavailable) => Err(Refusal::new(
                Status::ServiceUnavailable,
                unavailable.to_string(),
            )),
        };
        answer(result)
    }

    type PullStream = BlockStream;

    async fn pull(
        &self,
        request: Request<PullRequest>,
    ) -> Result<Response<Self::PullStream>, GrpcStatus> {
        let request = request.into_inner();
        let channel = self
            .channels
            .get(&request.channel)
            .ok_or_else(|| GrpcStatus::not_found(format!("no channel {:?}", request.channel)))?;
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
