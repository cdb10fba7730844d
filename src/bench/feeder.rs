//! The ordering service of `weft bench committer`: pre-generated blocks
//! served over `orderer.AtomicBroadcast/Deliver`, released one by one.
//!
//! FastFabric measured its peer with blocks produced in advance and fed
//! from another machine, so that nothing but the committer was under test.
//! The feeder does the same from the bench process: the bench appends the
//! blocks it has generated to the feeder's block store when it wants the
//! peer to see them, and the peer pulls them with the same Deliver client
//! it uses against a real orderer. Requests are checked as an orderer
//! checks them (a signed DELIVER_SEEK_INFO envelope from a member
//! satisfying `/Channel/Readers`); Broadcast is not offered.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status as GrpcStatus, Streaming};
use weft_ledger::deliver::{SeekRequest, StreamEnd, stream_range};
use weft_ledger::{BlockStore, Durability, StoreConfig, resolve_seek};
use weft_policy::{ChannelAuthority, SignedData};
use weft_protos::common::{Block, Envelope, Status};
use weft_protos::orderer::atomic_broadcast_server::{AtomicBroadcast, AtomicBroadcastServer};
use weft_protos::orderer::deliver_response::Type as ResponseType;
use weft_protos::orderer::{BroadcastResponse, DeliverResponse};

use super::BenchChannel;

/// The policy a Deliver client must satisfy, as on an orderer.
const READERS_POLICY: &str = "/Channel/Readers";
/// The largest message sent: blocks of 500 padded transactions and more.
const MESSAGE_BYTES_MAX: usize = 100 * 1024 * 1024;
const RESPONSES_BUFFERED_MAX: usize = 16;

/// A Deliver endpoint over a block store the bench appends to.
#[derive(Debug)]
pub struct Feeder {
    store: Arc<BlockStore>,
    address: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Feeder {
    /// Creates the feeder's block store in `dir` holding `channel`'s
    /// genesis block and serves it on a free port of 127.0.0.1.
    pub async fn start(channel: &BenchChannel, dir: &Path) -> Result<Self> {
        // The feeder stands in for an orderer whose disk is not under test.
        let store = Arc::new(
            BlockStore::open(&StoreConfig::new(dir).with_durability(Durability::None))
                .with_context(|| {
                    format!("opening the feeder's block store in {}", dir.display())
                })?,
        );
        store.append(&channel.genesis)?;
        let (_, config) = weft_protos::block::config_of_block(&channel.genesis)
            .ok_or_else(|| anyhow!("the bench's genesis block carries no config"))?;
        let authority = ChannelAuthority::from_config(&config)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (shutdown, shutdown_seen) = watch::channel(false);
        let service = FeedService {
            channel_id: channel.channel_id.clone(),
            store: store.clone(),
            authority: Arc::new(authority),
            shutdown: shutdown_seen.clone(),
        };
        let mut stopped = shutdown_seen;
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(
                    AtomicBroadcastServer::new(service)
                        .max_encoding_message_size(MESSAGE_BYTES_MAX),
                )
                .serve_with_incoming_shutdown(
                    TcpIncoming::from(listener).with_nodelay(Some(true)),
                    async move {
                        let _ = stopped.wait_for(|stop| *stop).await;
                    },
                ),
        );
        Ok(Self {
            store,
            address,
            shutdown,
            server,
        })
    }

    /// Where the feeder serves `orderer.AtomicBroadcast`.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Makes `block` (the next one of the chain) available to the peer.
    pub fn append(&self, block: &Block) -> Result<()> {
        self.store
            .append(block)
            .context("the feeder refused a block")
    }

    /// Ends every stream and stops serving.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "feeder: the server failed"),
            Err(error) => tracing::warn!(%error, "feeder: the server task failed"),
        }
    }
}

#[derive(Debug, Clone)]
struct FeedService {
    channel_id: String,
    store: Arc<BlockStore>,
    authority: Arc<ChannelAuthority>,
    shutdown: watch::Receiver<bool>,
}

type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, GrpcStatus>> + Send>>;

impl FeedService {
    /// Answers the requests of one stream in turn, each with its blocks
    /// and a closing status.
    async fn answer_all(
        &self,
        mut requests: Streaming<Envelope>,
        sender: mpsc::Sender<Result<DeliverResponse, GrpcStatus>>,
    ) {
        while let Ok(Some(envelope)) = requests.message().await {
            let status = match self.answer(&envelope, &sender).await {
                Ok(StreamEnd::Status(status)) => status,
                Ok(StreamEnd::Disconnected) => return,
                Ok(StreamEnd::Revoked(reason)) => {
                    tracing::warn!(%reason, "feeder: request ended");
                    Status::Forbidden
                }
                Err((status, reason)) => {
                    tracing::warn!(status = status.as_str_name(), %reason, "feeder: request refused");
                    status
                }
            };
            let message = DeliverResponse {
                r#type: Some(ResponseType::Status(status as i32)),
            };
            if sender.send(Ok(message)).await.is_err() {
                return;
            }
        }
    }

    async fn answer(
        &self,
        envelope: &Envelope,
        sender: &mpsc::Sender<Result<DeliverResponse, GrpcStatus>>,
    ) -> Result<StreamEnd, (Status, String)> {
        let request =
            SeekRequest::decode(envelope).map_err(|reason| (Status::BadRequest, reason))?;
        if request.channel_id != self.channel_id {
            return Err((
                Status::NotFound,
                format!("channel {:?} is not fed here", request.channel_id),
            ));
        }
        let signed = [SignedData {
            data: envelope.payload.clone(),
            identity: request.creator.clone(),
            signature: envelope.signature.clone(),
        }];
        self.authority
            .evaluate(READERS_POLICY, &signed, weft_msp::now())
            .map_err(|e| (Status::Forbidden, e.to_string()))?;
        let range = resolve_seek(&request.seek, self.store.height())
            .map_err(|e| (e.status(), e.to_string()))?;
        stream_range(
            self.store.clone(),
            range,
            self.store.subscribe(),
            // The feed's config never changes, and its one reader is the
            // bench's own peer: access checked once is enough.
            || Ok(()),
            |_, bytes| {
                let response = Block::decode(bytes).map(|block| DeliverResponse {
                    r#type: Some(ResponseType::Block(block)),
                });
                async move {
                    match response {
                        Ok(response) => sender.send(Ok(response)).await.is_ok(),
                        Err(_) => false,
                    }
                }
            },
        )
        .await
        .map_err(|e| (Status::InternalServerError, e.to_string()))
    }
}

#[tonic::async_trait]
impl AtomicBroadcast for FeedService {
    type BroadcastStream = ResponseStream<BroadcastResponse>;
    type DeliverStream = ResponseStream<DeliverResponse>;

    async fn broadcast(
        &self,
        _request: Request<Streaming<Envelope>>,
    ) -> Result<Response<Self::BroadcastStream>, GrpcStatus> {
        Err(GrpcStatus::unimplemented(
            "the bench feeder serves pre-generated blocks and orders nothing",
        ))
    }

    async fn deliver(
        &self,
        request: Request<Streaming<Envelope>>,
    ) -> Result<Response<Self::DeliverStream>, GrpcStatus> {
        let (sender, receiver) = mpsc::channel(RESPONSES_BUFFERED_MAX);
        let service = self.clone();
        let requests = request.into_inner();
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => {}
                () = service.answer_all(requests, sender) => {}
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }
}
