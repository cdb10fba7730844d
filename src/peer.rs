//! `weft peer start`: a peer process, committer and endorser. For every
//! configured channel it fetches blocks from the orderers, validates and
//! commits them, and serves them over `protos.Deliver`; it endorses
//! proposals with the built-in chaincodes over `protos.Endorser` and serves
//! Fabric's `gateway.Gateway` for client SDKs; an operations endpoint
//! serves `/metrics` and `/healthz`.
//!
//! Channels are independent: each has its own block store, world state,
//! intake and committer thread, side by side in one process.
//!
//! With `committer.blockSource: peers` the process is an endorser replica:
//! it takes blocks already validated by peers of its organisation and
//! applies them without validating again, keeping its state current for
//! endorsing (FastFabric's endorser/committer separation).

pub(crate) mod config;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use prost::Message;
use tokio::sync::watch;
use weft_ledger::{BlockStore, StoreConfig};
use weft_msp::UnixTime;
use weft_msp::{RememberingSigner, Signer, own};
use weft_peer_committer::{
    BlockSource, ChannelCommitter, ChannelHandle, Channels, CommitterMetrics, DeclaredIndex,
    DeclaredIndexes, DeliverService, Intake, IntakeConfig, Missing, PrivateWritesSource,
    ReconciledQueue, Reconciler,
};
use weft_peer_endorser::dissemination::{
    DisseminationConfig, Disseminator, ImplicitCollectionPolicy, PrivateDataService,
};
use weft_peer_endorser::package::InstalledPackages;
use weft_peer_endorser::{
    Chaincode, ChannelView, Endorser, EndorserMetrics, EndorserService, ExternalChaincode,
    ExternalConfig, GatewayConfig, GatewayService, JoinedChannel, Lifecycle, PrivateWrites,
    builtin,
};
use weft_protos::common::Block;
use weft_protos::dial::EndpointChoice;
use weft_protos::gateway::gateway_server::GatewayServer;
use weft_protos::privatedata::private_data_server::PrivateDataServer;
use weft_protos::protos::deliver_server::DeliverServer;
use weft_protos::protos::endorser_server::EndorserServer;
use weft_protos::rwset::TxPvtReadWriteSet;
use weft_protos::serve::{CallLimits, ConnectionLimits, REQUEST_START_MAX};
use weft_statedb::VersionedState;
use weft_statedb::memory::{MemoryOptions, MemoryState};
use weft_statedb::rocks::{RocksOptions, RocksState};

pub use config::PeerConfig;
use config::{BlockSourceMode, CommitStatusMode, StateDatabase};

use crate::ops::{self, FailedCheck};

/// The largest gRPC message received or sent: whole blocks go out on
/// Deliver (Fabric's default limit, 100 MiB).
const MESSAGE_BYTES_MAX: usize = 100 * 1024 * 1024;

/// Runs a peer with the configuration in `config_path` until Ctrl-C or
/// SIGTERM.
pub fn start(config_path: &Path) -> Result<()> {
    let config = PeerConfig::load(config_path)?;
    // Stage 1 (signatures, policies) of every channel runs on rayon's
    // global pool.
    crate::node_pool(
        "validate",
        config.committer.validation_threads,
        "committer.validationThreads: starting the validation pool",
    )?;
    let runtime = crate::node_runtime("peer", config.peer.worker_threads)?;
    runtime.block_on(run(config, crate::shutdown_signal()))
}

/// The built-in chaincodes and the external ones the configuration names.
fn chaincodes(config: &PeerConfig) -> Vec<(String, Arc<dyn Chaincode>)> {
    let mut chaincodes: Vec<(String, Arc<dyn Chaincode>)> = builtin::builtins()
        .into_iter()
        .map(|(name, chaincode)| (name.to_owned(), chaincode))
        .collect();
    chaincodes.push((
        weft_peer_endorser::lifecycle::LIFECYCLE.to_owned(),
        Arc::new(Lifecycle::new(&config.peer.local_msp_id)),
    ));
    for external in &config.chaincode.external {
        let external_config = ExternalConfig {
            execute_timeout: config.chaincode.execute_timeout.0,
            tls: external.tls.clone(),
            ..ExternalConfig::new(&external.name, &external.address)
        };
        let chaincode = ExternalChaincode::new(external_config, tokio::runtime::Handle::current());
        chaincodes.push((external.name.clone(), Arc::new(chaincode)));
    }
    chaincodes
}

/// Runs a peer until `stop` completes, then stops it cleanly: the servers
/// stop, each channel commits what it received and checkpoints its state.
pub async fn run(config: PeerConfig, stop: impl Future<Output = ()>) -> Result<()> {
    let signer = load_signer(&config)?;
    let registry = ops::registry()?;
    let metrics = Arc::new(CommitterMetrics::register(&registry).context("registering metrics")?);
    let channels = Channels::default();
    let intake_config = IntakeConfig {
        pipeline_depth: config.committer.pipeline_depth,
        queue_blocks: config.committer.queue_blocks,
        backoff_max: config.committer.reconnect_backoff_max.0,
        checkpoint_interval: config.ledger.checkpoint_interval.0,
        keepalive: config.peer.keepalive.delivery_client.keepalive(),
        tls: config.tls.as_ref().map(|tls| tls.client.clone()),
        tls_cert_hash: config
            .tls
            .as_ref()
            .map(|tls| tls.certificate_hash.clone())
            .unwrap_or_default(),
        endpoint_choice: config.orderer_choice,
        ..IntakeConfig::new(config.orderers.clone())
    };
    let intake_config = match config.committer.block_source {
        BlockSourceMode::Orderers => intake_config,
        BlockSourceMode::Peers => IntakeConfig {
            source: BlockSource::ValidatingPeers,
            endpoints: config.committer.validating_peers.clone(),
            endpoint_choice: EndpointChoice::Listed,
            ..intake_config
        },
    };
    let endorser_metrics = EndorserMetrics::register(&registry).context("registering metrics")?;
    let endorsement_signer = RememberingSigner::new(signer.clone(), own::DEFAULT_CAPACITY);
    // Packages installed through `_lifecycle`, where Fabric's peer keeps
    // them.
    let packages_dir = config.peer.file_system_path.join("lifecycle/chaincodes");
    let packages = Arc::new(
        InstalledPackages::open(&packages_dir)
            .with_context(|| format!("peer.fileSystemPath: {}", packages_dir.display()))?,
    );
    let declared_indexes: Arc<dyn DeclaredIndexes> = Arc::new(InstalledIndexes {
        packages: packages.clone(),
        local_msp_id: config.peer.local_msp_id.clone(),
    });
    let endorser = Arc::new(
        Endorser::new(Arc::new(endorsement_signer.clone()), chaincodes(&config))
            .with_metrics(endorser_metrics)
            .with_catch_up_timeout(config.gateway.catch_up_timeout.0)
            .with_installed_packages(
                packages,
                load_local_msp(&config)?,
                tokio::runtime::Handle::current(),
            ),
    );
    // The network's other peers: (MSP ID, address). A list shared by an
    // organisation's peers may name this one, which is left out.
    let own_address = config.peer.listen_address.to_string();
    let other_peers: Vec<(String, String)> = config
        .gateway
        .peers
        .iter()
        .filter(|peer| peer.address != own_address)
        .map(|peer| (peer.msp_id.clone(), peer.address.clone()))
        .collect();
    let implicit = &config.private_data.implicit_collection_dissemination_policy;
    let disseminator = Arc::new(Disseminator::new(
        DisseminationConfig {
            local_msp_id: config.peer.local_msp_id.clone(),
            peers: other_peers.clone(),
            own_implicit_collection: ImplicitCollectionPolicy {
                required_peer_count: implicit.required_peer_count,
                maximum_peer_count: implicit.max_peer_count,
            },
            tls: config.tls.as_ref().map(|tls| tls.client.clone()),
            keepalive: config.peer.keepalive.client.keepalive(),
            dial_timeout: config.gateway.dial_timeout.0,
            ack_timeout: config.private_data.push_ack_timeout.0,
        },
        signer.clone(),
    ));
    let mut intakes = Vec::new();
    let mut reconcilers = Vec::new();
    for channel in &config.channels {
        let mut committer = open_channel(&config, &channel.genesis_block)?
            .with_declared_indexes(declared_indexes.clone());
        // A replica applies blocks its validating peers committed, without
        // their private data (docs/chaincode.md, "Private data").
        if config.committer.block_source == BlockSourceMode::Orderers {
            let source = Arc::new(PrivateDataSource {
                ledger: committer.handle().ledger.clone(),
                disseminator: disseminator.clone(),
                channel_id: committer.channel_id().to_owned(),
                runtime: tokio::runtime::Handle::current(),
                patience: config.private_data.pull_retry_threshold.0,
            });
            committer = committer.keeping_private_data_of(config.peer.local_msp_id.clone(), source);
            if config.private_data.reconciliation_enabled {
                let queue = Arc::new(ReconciledQueue::new());
                committer = committer.reconciling(queue.clone());
                let source = Arc::new(ReconcileSource {
                    disseminator: disseminator.clone(),
                    channel_id: committer.channel_id().to_owned(),
                    runtime: tokio::runtime::Handle::current(),
                });
                let reconciler = Reconciler::new(
                    &committer.handle(),
                    source,
                    queue,
                    config.private_data.reconcile_batch_size,
                );
                reconcilers.push(ReconcilerThread::start(
                    committer.channel_id(),
                    reconciler,
                    config.private_data.reconcile_sleep_interval.0,
                )?);
            }
        }
        if config.committer.recognise_own_endorsements {
            committer.recognise_own_signatures(endorsement_signer.memory().clone());
        }
        let channel_id = committer.channel_id().to_owned();
        tracing::info!(channel = %channel_id, height = committer.height(), "channel opened");
        channels.insert(&channel_id, committer.handle());
        endorser.join(
            &channel_id,
            Arc::new(CommittedChannel {
                handle: committer.handle(),
                commit_status: config.gateway.commit_status,
                disseminator: disseminator.clone(),
                runtime: tokio::runtime::Handle::current(),
            }),
        );
        let intake = Intake::start(
            committer,
            signer.clone(),
            intake_config.clone(),
            Some(metrics.clone()),
        )
        .with_context(|| format!("starting channel {channel_id}"))?;
        intakes.push(intake);
    }

    let (shutdown, shutdown_seen) = watch::channel(false);
    let grpc_listener = tokio::net::TcpListener::bind(config.peer.listen_address)
        .await
        .with_context(|| format!("peer.listenAddress: binding {}", config.peer.listen_address))?;
    let grpc_address = grpc_listener.local_addr()?;
    let gateway_config = GatewayConfig {
        local_msp_id: config.peer.local_msp_id.clone(),
        local_address: grpc_address.to_string(),
        peers: other_peers,
        orderers: config.orderers.clone(),
        orderer_choice: config.orderer_choice,
        tls: config.tls.as_ref().map(|tls| tls.client.clone()),
        timeouts: weft_peer_endorser::gateway::Timeouts {
            endorsement: config.gateway.endorsement_timeout.0,
            broadcast: config.gateway.broadcast_timeout.0,
            dial: config.gateway.dial_timeout.0,
        },
        keepalive: config.peer.keepalive.client.keepalive(),
    };
    let mut grpc_server = weft_protos::serve::server(config.peer.keepalive.server());
    if let Some(tls) = &config.tls {
        grpc_server = grpc_server
            .tls_config(tls.server.clone())
            .context("peer.tls")?;
    }
    let mut deliver =
        DeliverService::new(channels).with_time_window(config.peer.authentication.time_window.0);
    if config
        .tls
        .as_ref()
        .is_some_and(|tls| tls.client_auth_required)
    {
        deliver = deliver.binding_requests_to_client_certificates();
    }
    let grpc = tokio::spawn(
        grpc_server
            .layer(tower::util::MapResponseLayer::new(
                weft_protos::serve::oversized_request_status,
            ))
            // The peer answers unary calls (proposals, the Gateway's) on
            // every transaction: each in one write with its trailers.
            .layer(tower::util::MapResponseLayer::new(
                weft_protos::serve::one_write_per_answer,
            ))
            .layer(
                CallLimits::new(&config.peer.limits.concurrency.by_service())
                    .ending_calls_without_a_request(&["/protos.Deliver"], REQUEST_START_MAX),
            )
            .add_service(
                DeliverServer::new(deliver)
                    .max_decoding_message_size(MESSAGE_BYTES_MAX)
                    .max_encoding_message_size(MESSAGE_BYTES_MAX),
            )
            .add_service(
                GatewayServer::new(GatewayService::new(endorser.clone(), gateway_config))
                    .max_decoding_message_size(MESSAGE_BYTES_MAX)
                    .max_encoding_message_size(MESSAGE_BYTES_MAX),
            )
            .add_service(
                PrivateDataServer::new(PrivateDataService::new(
                    endorser.clone(),
                    config.peer.local_msp_id.clone(),
                ))
                .max_decoding_message_size(MESSAGE_BYTES_MAX)
                .max_encoding_message_size(MESSAGE_BYTES_MAX),
            )
            .add_service(
                EndorserServer::new(EndorserService::new(endorser))
                    .max_decoding_message_size(MESSAGE_BYTES_MAX)
                    .max_encoding_message_size(MESSAGE_BYTES_MAX),
            )
            .serve_with_incoming_shutdown(
                weft_protos::serve::incoming(
                    grpc_listener,
                    ConnectionLimits::new(config.peer.limits.connections),
                    "peer",
                ),
                stopped(shutdown_seen.clone()),
            ),
    );
    let ops_listener = tokio::net::TcpListener::bind(config.operations.listen_address)
        .await
        .with_context(|| {
            format!(
                "operations.listenAddress: binding {}",
                config.operations.listen_address
            )
        })?;
    let ops_address = ops_listener.local_addr()?;
    let statuses: Vec<_> = intakes
        .iter()
        .map(|intake| (intake.channel_id().to_owned(), intake.status().clone()))
        .collect();
    let health: ops::HealthChecks = Arc::new(move || {
        statuses
            .iter()
            .filter_map(|(channel, status)| {
                status.fatal_error().map(|reason| FailedCheck {
                    component: format!("committer/{channel}"),
                    reason,
                })
            })
            .collect()
    });
    let operations = tokio::spawn(ops::serve(
        ops_listener,
        registry,
        health,
        stopped(shutdown_seen),
    ));
    let channel_ids: Vec<&str> = intakes.iter().map(Intake::channel_id).collect();
    println!(
        "peer {} ready: grpc {grpc_address}, operations {ops_address}, channels [{}]",
        config.peer.id,
        channel_ids.join(", ")
    );

    stop.await;
    tracing::info!("stopping");
    let _ = shutdown.send(true);
    for reconciler in reconcilers {
        reconciler.stop().await;
    }
    for intake in intakes {
        intake.stop().await;
    }
    grpc.await
        .context("the gRPC server task failed")?
        .context("serving gRPC")?;
    operations
        .await
        .context("the operations server task failed")??;
    Ok(())
}

/// Completes once `shutdown` turns true.
async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// A channel as the endorser sees it: the committer's block store, world
/// state and current configuration, and the height its commit status
/// follows.
struct CommittedChannel {
    handle: ChannelHandle,
    commit_status: CommitStatusMode,
    /// Hands endorsed private data to other members' peers.
    disseminator: Arc<Disseminator>,
    runtime: tokio::runtime::Handle,
}

impl ChannelView for CommittedChannel {
    fn organisations(&self) -> Vec<String> {
        self.handle
            .context
            .read()
            .application_orgs()
            .keys()
            .cloned()
            .collect()
    }

    fn is_admin(&self, creator: &Bytes, msp_id: &str) -> bool {
        let context = self.handle.context.read().clone();
        context.is_admin(creator, msp_id, weft_msp::now())
    }

    fn creator_satisfies(&self, creator: &Bytes, policy: &weft_policy::SignaturePolicy) -> bool {
        let context = self.handle.context.read().clone();
        context.creator_satisfies(creator, policy, weft_msp::now())
    }
}

impl JoinedChannel for CommittedChannel {
    fn check_signer(
        &self,
        policy: &str,
        creator: &Bytes,
        data: &Bytes,
        signature: &Bytes,
        now: UnixTime,
    ) -> std::result::Result<(), String> {
        let context = self.handle.context.read().clone();
        context.check_signer(policy, creator, data, signature, now)
    }

    fn satisfies_endorsement(&self, chaincode: &str, organisations: &[String]) -> bool {
        let context = self.handle.context.read().clone();
        context.satisfied_by_organisations(chaincode, organisations)
    }

    fn state(&self) -> &dyn VersionedState {
        self.handle.state.as_ref()
    }

    fn blocks(&self) -> &Arc<BlockStore> {
        &self.handle.ledger
    }

    fn committed_height(&self) -> watch::Receiver<u64> {
        match self.commit_status {
            CommitStatusMode::Durable => self.handle.committed.clone(),
            CommitStatusMode::Applied => self.handle.applied.clone(),
        }
    }

    fn keep_private_writes(
        &self,
        tx_id: &str,
        writes: &PrivateWrites,
    ) -> std::result::Result<(), String> {
        writes.keep_in(tx_id, &self.handle.ledger)?;
        let plan = self.disseminator.plan(writes)?;
        if plan.sends.is_empty() {
            return Ok(());
        }
        // Endorsements that write private data run on the blocking pool
        // (external chaincodes), or else on a worker of the runtime.
        let channel_id = self.handle.context.read().channel_id.clone();
        wait_for(
            &self.runtime,
            self.disseminator
                .disseminate(&channel_id, tx_id, writes, &plan),
        )
    }

    fn is_collection_member(&self, namespace: &str, collection: &str, msp_id: &str) -> bool {
        let context = self.handle.context.read().clone();
        context.keeps_collection(namespace, collection, msp_id)
    }
}

/// Where a channel's committer finds the private data of a block: the
/// transient store, then the peers of the other members, asked from the
/// committer's own thread or, on a peer of one worker, from that worker.
struct PrivateDataSource {
    ledger: Arc<BlockStore>,
    disseminator: Arc<Disseminator>,
    channel_id: String,
    runtime: tokio::runtime::Handle,
    /// How long a block waits for what it misses.
    patience: std::time::Duration,
}

impl PrivateWritesSource for PrivateDataSource {
    fn private_writes(&self, tx_id: &str) -> Option<Bytes> {
        self.ledger.private_writes(tx_id)
    }

    fn pull(&self, missing: &[Missing]) -> Vec<(String, TxPvtReadWriteSet)> {
        if self.patience.is_zero() {
            return Vec::new();
        }
        wait_for(
            &self.runtime,
            self.disseminator
                .pull(&self.channel_id, missing, self.patience),
        )
    }
}

/// Runs `work` on `runtime` to its end and returns its output, blocking
/// the calling thread: a thread of its own (a channel's committer or
/// reconciler), or a worker of this multi-thread runtime (an endorsement,
/// a small block committed where it was fetched), which `block_in_place`
/// first hands its other tasks over from. `block_on` alone panics there.
fn wait_for<F: std::future::Future>(runtime: &tokio::runtime::Handle, work: F) -> F::Output {
    tokio::task::block_in_place(|| runtime.block_on(work))
}

/// Where a channel's reconciler asks for missing private data: the
/// members' peers in `gateway.peers`, once per round.
struct ReconcileSource {
    disseminator: Arc<Disseminator>,
    channel_id: String,
    runtime: tokio::runtime::Handle,
}

impl PrivateWritesSource for ReconcileSource {
    fn private_writes(&self, _tx_id: &str) -> Option<Bytes> {
        None
    }

    fn pull(&self, missing: &[Missing]) -> Vec<(String, TxPvtReadWriteSet)> {
        wait_for(
            &self.runtime,
            self.disseminator
                .pull(&self.channel_id, missing, std::time::Duration::ZERO),
        )
    }
}

/// A channel's [`Reconciler`], run a round every interval on a thread of
/// its own (its pulls block) until stopped.
struct ReconcilerThread {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl ReconcilerThread {
    fn start(
        channel_id: &str,
        reconciler: Reconciler,
        interval: std::time::Duration,
    ) -> Result<Self> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let channel = channel_id.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("reconcile-{channel_id}"))
            .spawn(move || {
                // Anything sent, or the sender dropped, stops the loop.
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(interval)
                {
                    if let Err(error) = reconciler.round() {
                        tracing::error!(%channel, %error, "reconciling private data failed");
                    }
                }
            })
            .with_context(|| format!("starting the reconciler of channel {channel_id}"))?;
        Ok(Self { stop, thread })
    }

    async fn stop(self) {
        drop(self.stop);
        let thread = self.thread;
        if !matches!(
            tokio::task::spawn_blocking(move || thread.join()).await,
            Ok(Ok(()))
        ) {
            tracing::error!("a reconciler thread failed");
        }
    }
}

/// The peer's own organisation, as its MSP folder defines it.
fn load_local_msp(config: &PeerConfig) -> Result<weft_msp::Msp> {
    let dir = &config.peer.msp_config_path;
    weft_msp::folder::load_config(dir, &config.peer.local_msp_id)
        .and_then(weft_msp::Msp::from_config)
        .with_context(|| format!("peer.mspConfigPath: {}", dir.display()))
}

fn load_signer(config: &PeerConfig) -> Result<Arc<Signer>> {
    let dir = &config.peer.msp_config_path;
    weft_msp::folder::load_signer(dir, &config.peer.local_msp_id)
        .with_context(|| format!("peer.mspConfigPath: {}", dir.display()))?
        .map(Arc::new)
        .ok_or_else(|| {
            anyhow!(
                "peer.mspConfigPath: {} holds no signing identity (signcerts/ and keystore/)",
                dir.display()
            )
        })
}

/// Opens a channel's ledger, or creates it from its genesis block on the
/// first start.
fn open_channel(config: &PeerConfig, genesis_path: &Path) -> Result<ChannelCommitter> {
    let genesis_bytes = crate::settings::read_file("channels.genesisBlock", genesis_path)?;
    let genesis = Block::decode(genesis_bytes.as_slice()).map_err(|error| {
        anyhow!(
            "channels.genesisBlock: {} is not a block: {error}",
            genesis_path.display()
        )
    })?;
    let channel_id = channel_of(&genesis).ok_or_else(|| {
        anyhow!(
            "channels.genesisBlock: {} is not a channel's genesis block",
            genesis_path.display()
        )
    })?;
    crate::channel::check_channel_name(&channel_id)
        .with_context(|| format!("channels.genesisBlock: {}", genesis_path.display()))?;
    let dir = config
        .peer
        .file_system_path
        .join("ledgers")
        .join(&channel_id);
    let ledger = Arc::new(
        BlockStore::open(
            &StoreConfig::new(dir.join("blocks"))
                .with_durability(config.ledger.durability())
                .with_history(config.ledger.history.enable_history_database),
        )
        .with_context(|| format!("opening the block store of {channel_id}"))?,
    );
    let state_dir = dir.join("state");
    let state: Arc<dyn VersionedState> = match config.ledger.state_database {
        // Versions since the last checkpoint are kept so that a stream
        // channel can roll back what a failed orderer checkpoint did not
        // confirm (the state is checkpointed every second or so).
        StateDatabase::Memory => Arc::new(
            MemoryState::open(
                &state_dir,
                MemoryOptions {
                    keep_versions_since_checkpoint: true,
                },
            )
            .with_context(|| format!("opening the world state of {channel_id}"))?,
        ),
        StateDatabase::Rocksdb => Arc::new(
            RocksState::open(&state_dir, RocksOptions::default())
                .with_context(|| format!("opening the world state of {channel_id}"))?,
        ),
    };
    let committer = if ledger.height() == 0 {
        ChannelCommitter::create(genesis, state, ledger)
    } else {
        ChannelCommitter::open(&channel_id, state, ledger)
    };
    committer.with_context(|| format!("opening channel {channel_id}"))
}

/// The JSON indexes of the chaincodes this peer runs: those in the
/// package its organisation approved for each chaincode, when installed.
struct InstalledIndexes {
    packages: Arc<InstalledPackages>,
    local_msp_id: String,
}

impl DeclaredIndexes for InstalledIndexes {
    fn generation(&self) -> u64 {
        self.packages.installs()
    }

    fn declared(
        &self,
        state: &dyn weft_statedb::StateReader,
        chaincode: &str,
    ) -> Vec<DeclaredIndex> {
        let Some((_, package)) = weft_peer_endorser::lifecycle::approved_package(
            state,
            &self.local_msp_id,
            chaincode,
            &self.packages.all(),
        ) else {
            return Vec::new();
        };
        let public = package.indexes.into_iter().map(|index| DeclaredIndex {
            collection: None,
            index,
        });
        let private = package
            .collection_indexes
            .into_iter()
            .map(|(collection, index)| DeclaredIndex {
                collection: Some(collection),
                index,
            });
        public.chain(private).collect()
    }
}

/// The channel a genesis block creates.
fn channel_of(genesis: &Block) -> Option<String> {
    if genesis.header.as_ref()?.number != 0 {
        return None;
    }
    let envelope = genesis.data.as_ref()?.data.first()?.clone();
    Some(weft_protos::block::channel_header_of(envelope)?.channel_id)
}
