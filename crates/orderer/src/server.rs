//! The orderer process: channels opened from a data directory, their
//! consenters, and the AtomicBroadcast gRPC service, started and stopped
//! as one [`Orderer`].
//!
//! Layout of the data directory: `ledgers/<channel>/` holds each channel's
//! RocksDB block store, `raft/<channel>/` the Raft log of each etcdraft
//! channel, `kafka/<channel>/` the envelopes of each Kafka channel that
//! orders only TxIDs. On first start a channel is created from its
//! genesis (bootstrap) block; on later starts it is reopened from its
//! store, with the configuration of its last config block, and a genesis
//! block still given for it must be the one stored.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::{ClientTlsConfig, ServerTlsConfig};
use tonic::{Request, Response, Status as GrpcStatus, Streaming};
use weft_ledger::deliver::TlsBinding;
use weft_ledger::{BlockStore, Durability, StoreConfig};
use weft_protos::common::{Block, Envelope};
use weft_protos::orderer::atomic_broadcast_server::{AtomicBroadcast, AtomicBroadcastServer};
use weft_protos::serve::{CallLimits, ConnectionLimits, Keepalive, REQUEST_START_MAX};
use weft_protos::tx::Sign;
use weft_protos::view::Limits;

use weft_protos::cluster::cluster_server::ClusterServer;

use crate::broadcast;

use crate::channel::{self, Channel, Channels, RequestContext};
use crate::channel_config::ChannelConfig;
use crate::config::{Consensus, KafkaConsensus, KafkaPayloads};
use crate::consensus::cluster::{self, ClusterService, Transport};
use crate::consensus::pinned::{PinnedDialer, ServerPins};
use crate::consensus::raft::{self, LogStore, Members, Options as RaftOptions, Route};
use crate::consensus::{self, ChainTask, Consenter, solo};
use crate::deliver;
use crate::error::{Error, Result};
use crate::metrics::OrdererMetrics;
use crate::writer::BlockWriter;

/// How long a shutdown waits for open streams to end before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The directory of the channels' block stores, under the data directory.
const LEDGERS_DIR: &str = "ledgers";
/// The directory of the channels' Raft logs, under the data directory.
const RAFT_DIR: &str = "raft";
/// Where a Kafka channel that orders TxIDs keeps its envelopes.
const KAFKA_DIR: &str = "kafka";
/// The request paths [`ClientLimits`] counts.
const BROADCAST_PATH: &str = "/orderer.AtomicBroadcast/Broadcast";
const DELIVER_PATH: &str = "/orderer.AtomicBroadcast/Deliver";

/// Which consenter this node runs for its channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsensusMode {
    /// Each channel's `ConsensusType` decides: solo, or etcdraft (Raft
    /// among the consenters it names; the node needs a [`ClusterConfig`]).
    #[default]
    FollowChannel,
    /// Every channel is ordered by this node alone, whatever its config
    /// names: for single-node development networks whose genesis block
    /// was made for Raft.
    Solo,
}

/// How an orderer node runs.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Where the channels' block stores live.
    pub data_dir: PathBuf,
    /// When appended blocks are synced to disk.
    pub durability: Durability,
    pub consensus: ConsensusMode,
    /// The largest gRPC message accepted or sent, in bytes; also the
    /// largest envelope decoded (channels apply `AbsoluteMaxBytes` on top).
    pub message_bytes_max: usize,
    /// TLS on both listeners and towards the other consenters; `None`
    /// serves and dials in plaintext.
    pub tls: Option<NodeTls>,
    pub limits: ClientLimits,
    /// How far a Deliver request's timestamp may be from this node's
    /// clock (Fabric's `General.Authentication.TimeWindow`).
    pub time_window: Duration,
}

/// What a node serves at once, and for how long (docs/security.md,
/// "Limits"): connections on each listener (the next waits to be
/// accepted), Broadcast and Deliver streams open across all connections
/// (the next is refused RESOURCE_EXHAUSTED; 0 lifts the limit), how
/// connections are probed, and how long a Broadcast stream may go without
/// an envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    pub connections: usize,
    pub broadcast_streams: usize,
    pub deliver_streams: usize,
    /// Probes of both listeners' connections.
    pub keepalive: Keepalive,
    /// A Broadcast stream that sends no envelope for this long is ended
    /// DEADLINE_EXCEEDED; `None` leaves idle streams open.
    pub broadcast_idle_max: Option<Duration>,
}

impl ClientLimits {
    /// How long a Broadcast stream may stay idle unless configured.
    pub const BROADCAST_IDLE_MAX_DEFAULT: Duration = Duration::from_secs(300);
}

impl Default for ClientLimits {
    fn default() -> Self {
        Self {
            connections: weft_protos::serve::CONNECTIONS_MAX_DEFAULT,
            broadcast_streams: 2500,
            deliver_streams: 2500,
            keepalive: Keepalive::SERVER_DEFAULT,
            broadcast_idle_max: Some(Self::BROADCAST_IDLE_MAX_DEFAULT),
        }
    }
}

/// The PEM files an orderer dials the other consenters with.
#[derive(Debug, Clone, Default)]
pub struct ClusterDial {
    /// The TLS CA certificates trusted.
    pub root_cas: Vec<Vec<u8>>,
    /// The node's TLS certificate and private key.
    pub certificate: Vec<u8>,
    pub private_key: Vec<u8>,
}

/// A node's TLS: how it serves its clients, how it dials other nodes,
/// and how it serves the other consenters.
#[derive(Debug, Clone)]
pub struct NodeTls {
    /// The node's certificate and key, and the client certificates asked
    /// for, if any (Broadcast and Deliver, or a peer's services).
    pub server: ServerTlsConfig,
    /// The CA certificates trusted when dialing other nodes, and the
    /// node's certificate and key, presented to servers that ask.
    pub client: ClientTlsConfig,
    /// Serving the other consenters (orderers only): the node's
    /// certificate and key, and the CA certificates a caller's certificate
    /// must come from; callers must present one.
    pub cluster: ServerTlsConfig,
    /// Whether `server` asks clients for certificates. Deliver requests
    /// must then name the hash of the certificate their client presented.
    pub client_auth_required: bool,
    /// The same material as `client`, in PEM, for dialling the other
    /// consenters with their server certificates pinned (tonic's client
    /// configuration cannot pin one).
    pub cluster_dial: ClusterDial,
    /// The SHA-256 of the node's certificate (DER), which its own Deliver
    /// requests name to bind them to its connection.
    pub certificate_hash: bytes::Bytes,
}

impl NodeConfig {
    /// Fabric's default gRPC message limit (`General.MaxRecvMsgSize`).
    pub const MESSAGE_BYTES_MAX_DEFAULT: usize = 100 * 1024 * 1024;

    /// A node keeping its data in `data_dir`, with the defaults: every
    /// block synced, consensus as each channel's config says, 100 MiB
    /// messages.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            durability: Durability::EveryBlock,
            consensus: ConsensusMode::FollowChannel,
            message_bytes_max: Self::MESSAGE_BYTES_MAX_DEFAULT,
            tls: None,
            limits: ClientLimits::default(),
            time_window: weft_ledger::deliver::TIME_WINDOW_DEFAULT,
        }
    }
}

/// A gRPC server builder probing connections as `keepalive` says,
/// serving `tls` when the node has it.
fn grpc_server(
    tls: Option<&ServerTlsConfig>,
    keepalive: Keepalive,
) -> Result<tonic::transport::Server> {
    let builder = weft_protos::serve::server(keepalive);
    Ok(match tls {
        None => builder,
        Some(tls) => builder.tls_config(tls.clone())?,
    })
}

/// How a node takes part in Raft clusters: where it serves cluster
/// traffic (`weft.cluster.Cluster`) and the endpoint by which channel
/// configs name it among their consenters.
#[derive(Debug)]
pub struct ClusterConfig {
    pub listener: TcpListener,
    /// `host:port` exactly as in the consenters of the channels' etcdraft
    /// metadata (it need not be the listener's own address, e.g. behind
    /// a NAT or when listening on 0.0.0.0).
    pub endpoint: String,
}

/// Tells whether the node's channels are healthy. It does not keep the
/// channels alive: an operations endpoint that outlives the orderer's
/// shutdown must not hold its block stores open (their close waits for
/// every holder to let go).
#[derive(Debug, Clone)]
pub struct Health {
    channels: Weak<Channels>,
}

impl Health {
    /// The channels whose consenter stopped on a failure or cannot order
    /// for now (a Kafka channel whose brokers do not answer), with the
    /// reason; empty when all run.
    pub fn failed_channels(&self) -> Vec<(String, String)> {
        // Gone: the orderer has shut down.
        let Some(channels) = self.channels.upgrade() else {
            return Vec::new();
        };
        let mut failed: Vec<(String, String)> = channels
            .iter()
            .filter_map(|channel| Some((channel.id.clone(), channel.failure()?)))
            .collect();
        failed.sort();
        failed
    }
}

/// A running orderer: its channels, their consenters and the gRPC server.
#[derive(Debug)]
pub struct Orderer {
    address: SocketAddr,
    metrics: OrdererMetrics,
    channels: Arc<Channels>,
    stores: Vec<(String, Arc<BlockStore>)>,
    tasks: Vec<(String, ChainTask)>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    cluster_server: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl Orderer {
    /// Opens every channel in `config.data_dir`, creates those of
    /// `genesis_blocks` not there yet, starts their consenters (blocks
    /// are signed by `signer`) and serves `orderer.AtomicBroadcast` on
    /// `listener` until [`Orderer::shutdown`].
    ///
    /// A node started this way orders no etcdraft channel: see
    /// [`Orderer::start_with_cluster`].
    pub async fn start(
        config: NodeConfig,
        signer: impl Sign + Send + Sync + 'static,
        genesis_blocks: Vec<Block>,
        listener: TcpListener,
    ) -> Result<Self> {
        Self::start_with_cluster(config, signer, genesis_blocks, listener, None).await
    }

    /// [`Orderer::start`], also serving cluster traffic as `cluster` says
    /// and ordering etcdraft channels with their other consenters.
    pub async fn start_with_cluster(
        config: NodeConfig,
        signer: impl Sign + Send + Sync + 'static,
        genesis_blocks: Vec<Block>,
        listener: TcpListener,
        cluster: Option<ClusterConfig>,
    ) -> Result<Self> {
        let address = listener.local_addr().map_err(|source| Error::Io {
            path: PathBuf::from("<listener>"),
            source,
        })?;
        let signer: Arc<dyn Sign + Send + Sync> = Arc::new(signer);
        let metrics = OrdererMetrics::new().map_err(|e| Error::Task {
            channel: String::new(),
            reason: format!("creating the metrics: {e}"),
        })?;
        let server_pins = Arc::new(ServerPins::default());
        let dialer = match &config.tls {
            None => None,
            Some(tls) => Some(
                PinnedDialer::new(
                    &tls.cluster_dial.root_cas,
                    &tls.cluster_dial.certificate,
                    &tls.cluster_dial.private_key,
                    server_pins.clone(),
                )
                .map_err(|reason| Error::Task {
                    channel: String::new(),
                    reason: format!("the cluster's TLS: {reason}"),
                })?,
            ),
        };
        let transport = Arc::new(Transport::new(config.message_bytes_max, dialer));
        let opening = config.clone();
        // A channel joined from a later config block pulls its chain from
        // the other consenters, through this node's cluster transport.
        let joining = cluster
            .as_ref()
            .map(|cluster| (transport.clone(), cluster.endpoint.clone()));
        let opened = tokio::task::spawn_blocking(move || {
            open_channels(&opening, &genesis_blocks, joining.as_ref())
        })
        .await
        .map_err(|e| Error::Task {
            channel: String::new(),
            reason: format!("opening the channels failed: {e}"),
        })??;
        let mut by_id = HashMap::new();
        let mut stores = Vec::new();
        let mut starts = Vec::new();
        let mut inboxes = HashMap::new();
        let mut payload_pools = HashMap::new();
        for (channel_id, store, channel_config) in opened {
            let consenter = consenter_for(&channel_id, &channel_config, config.consensus)?;
            let mut not_a_consenter = None;
            let raft = match consenter {
                Consenter::Solo | Consenter::Kafka => None,
                Consenter::Raft => match raft_parts(
                    &config,
                    &channel_id,
                    &store,
                    &channel_config,
                    cluster.as_ref(),
                )? {
                    RaftRole::Consenter(parts) => Some(parts),
                    RaftRole::NotAConsenter(reason) => {
                        not_a_consenter = Some(reason);
                        None
                    }
                },
            };
            let kafka = match (consenter, &channel_config.orderer.consensus) {
                (Consenter::Kafka, Consensus::Kafka(settings)) => {
                    let endpoint = kafka_endpoint(&channel_id, settings, cluster.as_ref())?;
                    let payloads = if settings.payloads == KafkaPayloads::TxId {
                        let path = config.data_dir.join(KAFKA_DIR).join(&channel_id);
                        let payloads =
                            consensus::kafka::Payloads::open(&path).map_err(|reason| {
                                Error::Consensus {
                                    channel: channel_id.clone(),
                                    reason,
                                }
                            })?;
                        let payloads = Arc::new(payloads);
                        payload_pools.insert(channel_id.clone(), payloads.clone());
                        payloads
                    } else {
                        Arc::new(consensus::kafka::Payloads::default())
                    };
                    Some((settings.clone(), endpoint, payloads))
                }
                _ => None,
            };
            let writer = BlockWriter::new(
                &channel_id,
                store.clone(),
                signer.clone(),
                channel_config.block,
            )?;
            tracing::info!(
                channel = %channel_id,
                height = store.height(),
                config_block = channel_config.block,
                consenter = ?consenter,
                "channel opened"
            );
            let route = raft
                .as_ref()
                .map(|parts| Arc::new(Route::new(&parts.members, transport.clone())));
            let (handle, mailbox) = consensus::mailbox(&channel_id, consenter, route.clone());
            let channel = Arc::new(
                Channel::new(
                    channel_id.clone(),
                    store.clone(),
                    channel_config,
                    Arc::new(handle),
                    metrics.clone(),
                )
                .pinning_servers_in(server_pins.clone())
                .answering_replays_from(writer.ordered_tx_ids()),
            );
            by_id.insert(channel_id.clone(), channel.clone());
            stores.push((channel_id.clone(), store));
            if let Some(reason) = not_a_consenter {
                // Its blocks stay readable; nothing orders it here.
                tracing::warn!(channel = %channel_id, %reason, "the channel is served, not ordered");
                channel.failed(reason);
                continue;
            }
            let raft = raft.zip(route).map(|(parts, route)| {
                let (inbox, inbox_out) = tokio::sync::mpsc::channel(cluster::INBOX_MAX);
                inboxes.insert(channel_id.clone(), inbox);
                (parts, inbox_out, route)
            });
            starts.push((channel, mailbox, writer, raft, kafka));
        }
        let channels = Arc::new(Channels::new(by_id));
        let (shutdown, shutdown_signal) = watch::channel(false);

        // The cluster service first: starting Raft channels may pull
        // blocks from the other consenters, which may pull from us.
        let cluster_server = match cluster {
            Some(cluster) => {
                let cluster_address =
                    cluster.listener.local_addr().map_err(|source| Error::Io {
                        path: PathBuf::from("<cluster listener>"),
                        source,
                    })?;
                let service = ClusterService {
                    channels: channels.clone(),
                    inboxes: Arc::new(inboxes),
                    payloads: Arc::new(payload_pools),
                    shutdown: shutdown_signal.clone(),
                    authenticate: config.tls.is_some(),
                };
                let mut stop = shutdown_signal.clone();
                tracing::info!(address = %cluster_address, endpoint = %cluster.endpoint, "orderer serving cluster traffic");
                Some(tokio::spawn(
                    grpc_server(
                        config.tls.as_ref().map(|tls| &tls.cluster),
                        config.limits.keepalive,
                    )?
                    .add_service(
                        ClusterServer::new(service)
                            .max_decoding_message_size(config.message_bytes_max)
                            .max_encoding_message_size(config.message_bytes_max),
                    )
                    .serve_with_incoming_shutdown(
                        weft_protos::serve::incoming(
                            cluster.listener,
                            ConnectionLimits::new(config.limits.connections),
                            "cluster",
                        ),
                        async move {
                            let _ = stop.wait_for(|stop| *stop).await;
                        },
                    ),
                ))
            }
            None => None,
        };

        let mut tasks = Vec::new();
        for (channel, mailbox, writer, raft, kafka) in starts {
            let id = channel.id.clone();
            let task = match (raft, kafka) {
                (None, Some((settings, endpoint, payloads))) => {
                    consensus::kafka::start(consensus::kafka::Setup {
                        channel,
                        mailbox,
                        writer,
                        signer: signer.clone(),
                        settings,
                        transport: transport.clone(),
                        endpoint,
                        payloads,
                    })
                }
                (None, None) => solo::start(channel, mailbox, writer, signer.clone()),
                (Some((parts, inbox, route)), _) => {
                    raft::start(raft::Setup {
                        channel,
                        mailbox,
                        inbox,
                        writer,
                        signer: signer.clone(),
                        transport: transport.clone(),
                        members: parts.members,
                        next_consenter_id: parts.next_consenter_id,
                        options: parts.options,
                        store: parts.log,
                        route,
                    })
                    .await?
                }
            };
            tasks.push((id, task));
        }

        let service = Service {
            context: RequestContext {
                channels: channels.clone(),
                limits: Limits {
                    envelope_bytes_max: config.message_bytes_max,
                },
                now: weft_msp::now,
                time_window: config.time_window,
                signer: signer.clone(),
                metrics: metrics.clone(),
            },
            shutdown: shutdown_signal.clone(),
            client_auth_required: config
                .tls
                .as_ref()
                .is_some_and(|tls| tls.client_auth_required),
        };
        let mut call_limits = CallLimits::new(&[
            (BROADCAST_PATH, config.limits.broadcast_streams),
            (DELIVER_PATH, config.limits.deliver_streams),
        ])
        .ending_calls_without_a_request(&[DELIVER_PATH], REQUEST_START_MAX);
        if let Some(idle_max) = config.limits.broadcast_idle_max {
            call_limits = call_limits.ending_idle_calls(&[BROADCAST_PATH], idle_max);
        }
        let mut stop = shutdown_signal;
        let server = tokio::spawn(
            grpc_server(
                config.tls.as_ref().map(|tls| &tls.server),
                config.limits.keepalive,
            )?
            .layer(call_limits)
            .add_service(
                AtomicBroadcastServer::new(service)
                    .max_decoding_message_size(config.message_bytes_max)
                    .max_encoding_message_size(config.message_bytes_max),
            )
            .serve_with_incoming_shutdown(
                weft_protos::serve::incoming(
                    listener,
                    ConnectionLimits::new(config.limits.connections),
                    "orderer",
                ),
                async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                },
            ),
        );
        tracing::info!(%address, "orderer serving AtomicBroadcast");
        Ok(Self {
            address,
            metrics,
            channels,
            stores,
            tasks,
            shutdown,
            server,
            cluster_server,
        })
    }

    /// The address the orderer serves on.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// The node's metrics, for an operations endpoint to register.
    pub fn metrics(&self) -> &OrdererMetrics {
        &self.metrics
    }

    /// A probe of the node's health that outlives this handle's borrow
    /// (for `/healthz`).
    pub fn health(&self) -> Health {
        Health {
            channels: Arc::downgrade(&self.channels),
        }
    }

    /// The IDs of the channels served, sorted.
    pub fn channel_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .channels
            .iter()
            .map(|channel| channel.id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// The number of blocks of `channel_id`, if served.
    pub fn height(&self, channel_id: &str) -> Option<u64> {
        self.channels
            .get(channel_id)
            .map(|channel| channel.store.height())
    }

    /// Stops serving (open streams end), lets each consenter order what
    /// it accepted and write its pending batch, then closes the block
    /// stores (synced). Reports the first failure.
    pub async fn shutdown(self) -> Result<()> {
        let Self {
            channels,
            stores,
            tasks,
            shutdown,
            mut server,
            cluster_server,
            ..
        } = self;
        // Receivers may all be gone if the server already stopped.
        let _ = shutdown.send(true);
        let mut first_error = None;
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => first_error = Some(Error::Serve(error)),
            Ok(Err(error)) => {
                first_error = Some(Error::Task {
                    channel: String::new(),
                    reason: format!("the gRPC server task died: {error}"),
                });
            }
            Err(_) => {
                tracing::warn!("streams still open after the grace period; closing them");
                server.abort();
            }
        }
        for (channel_id, task) in tasks {
            if let Err(error) = task.halt(&channel_id).await {
                first_error.get_or_insert(error);
            }
        }
        if let Some(cluster_server) = cluster_server {
            // Forwarded submissions end with the channel tasks.
            match tokio::time::timeout(SHUTDOWN_GRACE, cluster_server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => {
                    first_error.get_or_insert(Error::Serve(error));
                }
                Ok(Err(error)) => {
                    first_error.get_or_insert(Error::Task {
                        channel: String::new(),
                        reason: format!("the cluster server task died: {error}"),
                    });
                }
                Err(_) => tracing::warn!("cluster streams still open after the grace period"),
            }
        }
        drop(channels);
        // Stores close side by side: a node of many channels waits one
        // grace period at most, not one per channel.
        let mut closing = tokio::task::JoinSet::new();
        for (channel_id, store) in stores {
            closing.spawn(async move { close_store(&channel_id, store).await });
        }
        while let Some(closed) = closing.join_next().await {
            let closed = closed.unwrap_or_else(|error| {
                Err(Error::Task {
                    channel: String::new(),
                    reason: format!("closing a block store failed: {error}"),
                })
            });
            if let Err(error) = closed {
                first_error.get_or_insert(error);
            }
        }
        tracing::info!("orderer stopped");
        first_error.map_or(Ok(()), Err)
    }
}

/// Closes a store once the streams that still read it have let go.
async fn close_store(channel_id: &str, mut store: Arc<BlockStore>) -> Result<()> {
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    loop {
        match Arc::try_unwrap(store) {
            Ok(owned) => {
                return tokio::task::spawn_blocking(move || owned.close())
                    .await
                    .map_err(|e| Error::Task {
                        channel: channel_id.to_owned(),
                        reason: format!("closing the block store failed: {e}"),
                    })?
                    .map_err(|source| Error::Ledger {
                        channel: channel_id.to_owned(),
                        source,
                    });
            }
            Err(shared) if tokio::time::Instant::now() < deadline => {
                store = shared;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // A reader still holds it; dropping the last handle syncs.
            Err(_) => {
                tracing::warn!(channel = %channel_id, "block store still in use at shutdown");
                return Ok(());
            }
        }
    }
}

/// Which consenter orders a channel with this configuration on this node.
fn consenter_for(
    channel_id: &str,
    config: &ChannelConfig,
    mode: ConsensusMode,
) -> Result<Consenter> {
    match (&config.orderer.consensus, mode) {
        (Consensus::Solo, _) => Ok(Consenter::Solo),
        (Consensus::EtcdRaft(_), ConsensusMode::Solo) => {
            tracing::warn!(
                channel = %channel_id,
                "the channel names etcdraft; ordering it alone (solo), as the node config asks"
            );
            Ok(Consenter::Solo)
        }
        (Consensus::EtcdRaft(_), ConsensusMode::FollowChannel) => Ok(Consenter::Raft),
        (Consensus::Kafka(_), ConsensusMode::Solo) => {
            tracing::warn!(
                channel = %channel_id,
                "the channel names kafka; ordering it alone (solo), as the node config asks"
            );
            Ok(Consenter::Solo)
        }
        (Consensus::Kafka(_), ConsensusMode::FollowChannel) => Ok(Consenter::Kafka),
    }
}

/// This node's cluster endpoint for a Kafka channel: needed when only
/// TxIDs go through Kafka and the channel names several orderers, which
/// hand each other envelopes; the node must be one of them.
fn kafka_endpoint(
    channel_id: &str,
    settings: &KafkaConsensus,
    cluster: Option<&ClusterConfig>,
) -> Result<Option<String>> {
    if settings.payloads == KafkaPayloads::Full || settings.orderers.is_empty() {
        return Ok(cluster.map(|cluster| cluster.endpoint.clone()));
    }
    let consensus_error = |reason: String| Error::Consensus {
        channel: channel_id.to_owned(),
        reason,
    };
    let cluster = cluster.ok_or_else(|| {
        consensus_error(
            "the channel orders TxIDs through Kafka among several orderers, which hand each \
             other envelopes over the cluster service; this node has no cluster settings \
             (cluster.listenAddress in orderer.yaml)"
                .to_owned(),
        )
    })?;
    if !settings.orderers.contains(&cluster.endpoint) {
        return Err(consensus_error(format!(
            "this node's cluster endpoint {:?} is not among the channel's Kafka orderers {:?}",
            cluster.endpoint, settings.orderers
        )));
    }
    Ok(Some(cluster.endpoint.clone()))
}

/// What a Raft channel needs besides the channel.
struct RaftParts {
    /// The consenters with their Raft IDs, as the chain's tip records them.
    members: Members,
    next_consenter_id: u64,
    options: RaftOptions,
    /// The channel's log (`<data dir>/raft/<channel>/`), opened.
    log: LogStore,
}

/// This node's part in a Raft channel.
enum RaftRole {
    Consenter(RaftParts),
    /// The channel's consenters do not name this node (any more): why.
    NotAConsenter(String),
}

/// The [`RaftParts`] of the channel whose chain is in `store`, unless the
/// channel's consenters do not name this node.
fn raft_parts(
    config: &NodeConfig,
    channel_id: &str,
    store: &BlockStore,
    channel_config: &ChannelConfig,
    cluster: Option<&ClusterConfig>,
) -> Result<RaftRole> {
    let consensus_error = |reason: String| Error::Consensus {
        channel: channel_id.to_owned(),
        reason,
    };
    let cluster = cluster.ok_or_else(|| {
        consensus_error(
            "the channel is ordered by etcdraft, but this node has no cluster settings \
             (cluster.listenAddress in orderer.yaml); or set the node's consensus to solo to \
             order it alone"
                .to_owned(),
        )
    })?;
    let metadata = raft::raft_metadata(channel_config).ok_or_else(|| {
        consensus_error("the channel config names no etcdraft metadata".to_owned())
    })?;
    let tip = store
        .height()
        .checked_sub(1)
        .and_then(|number| store.block(number).ok().flatten())
        .ok_or_else(|| consensus_error("the chain's last block cannot be read".to_owned()))?;
    let named = metadata
        .consenters
        .iter()
        .any(|consenter| raft::endpoint_of(consenter) == cluster.endpoint);
    if !named {
        return Ok(RaftRole::NotAConsenter(format!(
            "this node's cluster endpoint {} is not among the channel's consenters as of config \
             block {}: a config update removed it, or never added it; it orders the channel no \
             more (its blocks stay readable)",
            cluster.endpoint, channel_config.block
        )));
    }
    let (ids, next_consenter_id) = raft::consenter_ids(&tip, metadata);
    let members = Members::with_ids(metadata, &ids, &cluster.endpoint).map_err(&consensus_error)?;
    let options = RaftOptions::new(metadata.options.as_ref())
        .map_err(|reason| consensus_error(format!("etcdraft {reason}")))?;
    let path = config.data_dir.join(RAFT_DIR).join(channel_id);
    std::fs::create_dir_all(&path).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    let log = LogStore::open(&path, &members.ids()).map_err(|reason| Error::Raft {
        channel: channel_id.to_owned(),
        reason,
    })?;
    Ok(RaftRole::Consenter(RaftParts {
        members,
        next_consenter_id,
        options,
        log,
    }))
}

/// Opens the stores of every channel on disk and of every bootstrap
/// block: a genesis block, or a later config block to join a Raft channel
/// from, whose chain is pulled through `joining` (the cluster transport
/// and this node's consenter endpoint).
fn open_channels(
    config: &NodeConfig,
    genesis_blocks: &[Block],
    joining: Option<&(Arc<Transport>, String)>,
) -> Result<Vec<(String, Arc<BlockStore>, ChannelConfig)>> {
    let ledgers = config.data_dir.join(LEDGERS_DIR);
    std::fs::create_dir_all(&ledgers).map_err(|source| Error::Io {
        path: ledgers.clone(),
        source,
    })?;
    let mut genesis_by_channel: HashMap<String, &Block> = HashMap::new();
    for genesis in genesis_blocks {
        let (channel_id, _) = channel::bootstrap_channel(genesis)?;
        if genesis_by_channel
            .insert(channel_id.clone(), genesis)
            .is_some()
        {
            return Err(Error::BadChain {
                channel: channel_id,
                block: 0,
                reason: "two genesis blocks were given for the channel".to_owned(),
            });
        }
    }
    let mut channel_ids: Vec<String> = existing_channels(&ledgers)?;
    for channel_id in genesis_by_channel.keys() {
        if !channel_ids.contains(channel_id) {
            channel_ids.push(channel_id.clone());
        }
    }
    channel_ids.sort();
    // An orderer serves blocks by number only, as Fabric's does.
    let store_config = StoreConfig::new(&ledgers)
        .with_durability(config.durability)
        .without_tx_index();
    channel_ids
        .into_iter()
        .map(|channel_id| {
            let bootstrap = genesis_by_channel.get(&channel_id).copied();
            let pull = |from: u64| match (joining, bootstrap) {
                (Some((transport, endpoint)), Some(join)) => {
                    raft::pull_chain_to(&channel_id, join, from, transport, endpoint)
                }
                _ => Err(Error::BadChain {
                    channel: channel_id.clone(),
                    block: from,
                    reason: "no cluster to join the channel through".to_owned(),
                }),
            };
            let (store, channel_config) = channel::open_store(
                &channel_id,
                &ledgers.join(&channel_id),
                &store_config,
                bootstrap,
                joining.map(|_| &pull as channel::JoinPull<'_>),
            )?;
            Ok((channel_id, store, channel_config))
        })
        .collect()
}

/// The channels whose stores are in `ledgers`.
fn existing_channels(ledgers: &Path) -> Result<Vec<String>> {
    let io_error = |source| Error::Io {
        path: ledgers.to_owned(),
        source,
    };
    let mut channel_ids = Vec::new();
    for entry in std::fs::read_dir(ledgers).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().map_err(io_error)?.is_dir()
            && channel::check_channel_name(&name).is_ok()
        {
            channel_ids.push(name);
        }
    }
    Ok(channel_ids)
}

/// `orderer.AtomicBroadcast` over the node's channels.
#[derive(Debug, Clone)]
struct Service {
    context: RequestContext,
    shutdown: watch::Receiver<bool>,
    /// Clients present TLS certificates, and Deliver requests are bound
    /// to them.
    client_auth_required: bool,
}

#[tonic::async_trait]
impl AtomicBroadcast for Service {
    type BroadcastStream = broadcast::ResponseStream;
    type DeliverStream = deliver::ResponseStream;

    async fn broadcast(
        &self,
        request: Request<Streaming<Envelope>>,
    ) -> Result<Response<Self::BroadcastStream>, GrpcStatus> {
        let remote = request.remote_addr();
        Ok(Response::new(broadcast::serve(
            request.into_inner(),
            remote,
            self.context.clone(),
            self.shutdown.clone(),
        )))
    }

    async fn deliver(
        &self,
        request: Request<Streaming<Envelope>>,
    ) -> Result<Response<Self::DeliverStream>, GrpcStatus> {
        let remote = request.remote_addr();
        let binding = TlsBinding::when(self.client_auth_required, || {
            weft_protos::serve::client_certificate(&request)
        });
        Ok(Response::new(deliver::serve(
            request.into_inner(),
            remote,
            binding,
            self.context.clone(),
            self.shutdown.clone(),
        )))
    }
}
