//! `weft orderer start`: an orderer process serving
//! `orderer.AtomicBroadcast` for the channels of its data directory,
//! bootstrapped from genesis blocks on the first start.
//!
//! The configuration file (see `config/orderer.yaml`) is read into
//! [`OrdererFile`]; an unknown key or a bad value is an error naming the
//! file and the key. The process runs until Ctrl-C or SIGTERM, then stops
//! cleanly: open streams end, each channel orders what it accepted, and
//! the block stores are synced. An operations endpoint
//! (`operations.listenAddress`) serves `/metrics` (the orderer's series
//! and the process's CPU time) and `/healthz` (failing while a channel's
//! consenter has stopped).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use prost::Message;
use serde::Deserialize;
use weft_ledger::Durability;
use weft_orderer::{ClientLimits, ClusterConfig, ConsensusMode, NodeConfig, Orderer};
use weft_protos::common::Block;
use weft_protos::serve::Keepalive;

use crate::ops::{self, FailedCheck};
use crate::settings::{AuthenticationSection, GoDuration, load_yaml, read_file, resolve};
use crate::tls::TlsSection;

/// `config/orderer.yaml`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OrdererFile {
    pub orderer: NodeSection,
    #[serde(default)]
    pub channels: Vec<ChannelSection>,
    #[serde(default)]
    pub ledger: LedgerSection,
    #[serde(default)]
    pub consensus: ConsensusSection,
    #[serde(default)]
    pub cluster: Option<ClusterSection>,
    #[serde(default)]
    pub operations: OperationsSection,
}

/// The operations endpoint: `/metrics`, `/healthz`, `/version`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OperationsSection {
    #[serde(default = "default_operations_address")]
    pub listen_address: SocketAddr,
}

impl Default for OperationsSection {
    fn default() -> Self {
        Self {
            listen_address: default_operations_address(),
        }
    }
}

/// Any free port on loopback: several orderers of one machine (a local
/// Raft cluster, tests) never collide; a deployment names its port.
fn default_operations_address() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Where the node serves Raft cluster traffic, and how channel configs
/// name it among their consenters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSection {
    pub listen_address: SocketAddr,
    #[serde(default)]
    pub endpoint: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeSection {
    pub id: String,
    pub listen_address: SocketAddr,
    pub local_msp_id: String,
    pub msp_config_path: PathBuf,
    pub file_system_path: PathBuf,
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    #[serde(default)]
    pub tls: TlsSection,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub keepalive: KeepaliveSection,
    #[serde(default)]
    pub authentication: AuthenticationSection,
    /// Threads of the node's async runtime (gRPC, consensus, block
    /// writes) and of its pool checking Broadcast envelopes; 0 = one per
    /// core.
    #[serde(default)]
    pub worker_threads: usize,
}

/// How the orderer probes its clients' and the other consenters'
/// connections (Fabric's `General.Keepalive.ServerInterval` and
/// `ServerTimeout`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct KeepaliveSection {
    pub interval: GoDuration,
    pub timeout: GoDuration,
}

impl Default for KeepaliveSection {
    fn default() -> Self {
        let defaults = Keepalive::SERVER_DEFAULT;
        Self {
            interval: GoDuration(defaults.interval),
            timeout: GoDuration(defaults.timeout),
        }
    }
}

/// What the orderer serves at once (`orderer.limits`; docs/security.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LimitsSection {
    /// Connections open at once on each listener.
    pub connections: usize,
    pub concurrency: ConcurrencySection,
    /// How long a Broadcast stream may go without an envelope; 0 leaves
    /// idle streams open.
    pub broadcast_idle_timeout: GoDuration,
}

/// Streams open at once across all connections; 0 lifts the limit.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ConcurrencySection {
    pub broadcast: usize,
    pub deliver: usize,
}

impl Default for LimitsSection {
    fn default() -> Self {
        Self {
            connections: ClientLimits::default().connections,
            concurrency: ConcurrencySection::default(),
            broadcast_idle_timeout: GoDuration(ClientLimits::BROADCAST_IDLE_MAX_DEFAULT),
        }
    }
}

impl Default for ConcurrencySection {
    fn default() -> Self {
        let defaults = ClientLimits::default();
        Self {
            broadcast: defaults.broadcast_streams,
            deliver: defaults.deliver_streams,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChannelSection {
    pub genesis_block: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LedgerSection {
    #[serde(default)]
    pub durability: DurabilityName,
    #[serde(default = "default_group_commit_blocks")]
    pub group_commit_blocks: u32,
    #[serde(default = "default_group_commit_interval")]
    pub group_commit_interval: GoDuration,
}

impl Default for LedgerSection {
    fn default() -> Self {
        Self {
            durability: DurabilityName::default(),
            group_commit_blocks: default_group_commit_blocks(),
            group_commit_interval: default_group_commit_interval(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DurabilityName {
    #[default]
    EveryBlock,
    GroupCommit,
    None,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConsensusSection {
    #[serde(default, rename = "type")]
    pub kind: ConsensusName,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ConsensusName {
    #[default]
    Channel,
    Solo,
}

fn default_max_message_bytes() -> usize {
    NodeConfig::MESSAGE_BYTES_MAX_DEFAULT
}
fn default_group_commit_blocks() -> u32 {
    16
}
fn default_group_commit_interval() -> GoDuration {
    GoDuration(std::time::Duration::from_millis(10))
}

/// What `weft orderer start` runs, with paths resolved and files read.
pub(crate) struct Settings {
    id: String,
    listen_address: SocketAddr,
    node: NodeConfig,
    signer: weft_msp::Signer,
    genesis_blocks: Vec<Block>,
    /// The cluster listen address and this node's consenter endpoint.
    cluster: Option<(SocketAddr, String)>,
    operations_address: SocketAddr,
    /// `orderer.workerThreads` (0: one per core).
    worker_threads: usize,
}

impl Settings {
    pub(crate) fn load(path: &Path) -> Result<Self> {
        let file: OrdererFile = load_yaml(path, "ORDERER_")?;
        let base = path.parent().unwrap_or(Path::new("."));
        let at = |key: &str| format!("{}: {key}", path.display());
        let msp_dir = resolve(base, &file.orderer.msp_config_path);
        let signer = weft_msp::folder::load_signer(&msp_dir, &file.orderer.local_msp_id)
            .with_context(|| at("orderer.mspConfigPath"))?
            .ok_or_else(|| {
                anyhow!(
                    "{}: {} holds no signing identity (signcerts/ and keystore/)",
                    at("orderer.mspConfigPath"),
                    msp_dir.display()
                )
            })?;
        let genesis_blocks = file
            .channels
            .iter()
            .enumerate()
            .map(|(index, channel)| {
                let key = at(&format!("channels[{index}].genesisBlock"));
                let block_path = resolve(base, &channel.genesis_block);
                let bytes = read_file(&key, &block_path)?;
                Block::decode(bytes.as_slice())
                    .with_context(|| format!("{key}: {} is not a block", block_path.display()))
            })
            .collect::<Result<Vec<_>>>()?;
        let ledger = &file.ledger;
        let durability = match ledger.durability {
            DurabilityName::EveryBlock => Durability::EveryBlock,
            DurabilityName::None => Durability::None,
            DurabilityName::GroupCommit => {
                if ledger.group_commit_blocks == 0 {
                    bail!("{}: must be at least 1", at("ledger.groupCommitBlocks"));
                }
                Durability::GroupCommit {
                    blocks_max: ledger.group_commit_blocks,
                    interval_ms: u64::try_from(ledger.group_commit_interval.0.as_millis())
                        .unwrap_or(u64::MAX),
                }
            }
        };
        let cluster = match &file.cluster {
            Some(cluster) => {
                let endpoint = cluster
                    .endpoint
                    .clone()
                    .unwrap_or_else(|| cluster.listen_address.to_string());
                let valid = endpoint
                    .rsplit_once(':')
                    .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
                if !valid {
                    bail!("{}: {endpoint:?} is not host:port", at("cluster.endpoint"));
                }
                Some((cluster.listen_address, endpoint))
            }
            None => None,
        };
        if file.orderer.max_message_bytes == 0 {
            bail!("{}: must be at least 1", at("orderer.maxMessageBytes"));
        }
        let limits = &file.orderer.limits;
        if limits.connections == 0 {
            bail!("{}: must be at least 1", at("orderer.limits.connections"));
        }
        let keepalive = &file.orderer.keepalive;
        for (key, duration) in [
            ("interval", keepalive.interval),
            ("timeout", keepalive.timeout),
        ] {
            if duration.0.is_zero() {
                bail!(
                    "{}: must be more than zero",
                    at(&format!("orderer.keepalive.{key}"))
                );
            }
        }
        Ok(Self {
            worker_threads: file.orderer.worker_threads,
            id: file.orderer.id,
            listen_address: file.orderer.listen_address,
            node: NodeConfig {
                data_dir: resolve(base, &file.orderer.file_system_path),
                durability,
                consensus: match file.consensus.kind {
                    ConsensusName::Channel => ConsensusMode::FollowChannel,
                    ConsensusName::Solo => ConsensusMode::Solo,
                },
                message_bytes_max: file.orderer.max_message_bytes,
                tls: file
                    .orderer
                    .tls
                    .load(base, |key| at(&format!("orderer.{key}")))?,
                limits: ClientLimits {
                    connections: limits.connections,
                    broadcast_streams: limits.concurrency.broadcast,
                    deliver_streams: limits.concurrency.deliver,
                    keepalive: Keepalive {
                        interval: keepalive.interval.0,
                        timeout: keepalive.timeout.0,
                    },
                    broadcast_idle_max: Some(limits.broadcast_idle_timeout.0)
                        .filter(|idle| !idle.is_zero()),
                },
                time_window: file.orderer.authentication.time_window.0,
            },
            signer,
            genesis_blocks,
            cluster,
            operations_address: file.operations.listen_address,
        })
    }
}

/// Runs an orderer with the configuration in `config_path` until Ctrl-C
/// or SIGTERM.
pub fn start(config_path: &Path) -> Result<()> {
    let settings = Settings::load(config_path)?;
    // Envelopes arriving together are checked on rayon's global pool: an
    // orderer given a share of the cores keeps to it there too.
    crate::node_pool(
        "check",
        settings.worker_threads,
        "orderer.workerThreads: starting the check pool",
    )?;
    let runtime = crate::node_runtime("orderer", settings.worker_threads)?;
    runtime.block_on(run(settings, crate::shutdown_signal()))
}

/// Runs the orderer configured in `config_path` on the current runtime
/// until `stop` completes (`weft network up --in-process`).
pub async fn run_until(config_path: &Path, stop: impl Future<Output = ()>) -> Result<()> {
    run(Settings::load(config_path)?, stop).await
}

async fn run(settings: Settings, stop: impl Future<Output = ()>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(settings.listen_address)
        .await
        .with_context(|| format!("orderer.listenAddress: binding {}", settings.listen_address))?;
    let ops_listener = tokio::net::TcpListener::bind(settings.operations_address)
        .await
        .with_context(|| {
            format!(
                "operations.listenAddress: binding {}",
                settings.operations_address
            )
        })?;
    let ops_address = ops_listener.local_addr()?;
    let cluster = match &settings.cluster {
        Some((address, endpoint)) => Some(ClusterConfig {
            listener: tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cluster.listenAddress: binding {address}"))?,
            endpoint: endpoint.clone(),
        }),
        None => None,
    };
    let cluster_address = match &cluster {
        Some(cluster) => Some(
            cluster
                .listener
                .local_addr()
                .context("cluster.listenAddress")?,
        ),
        None => None,
    };
    let orderer = Orderer::start_with_cluster(
        settings.node,
        settings.signer,
        settings.genesis_blocks,
        listener,
        cluster,
    )
    .await
    .context("starting the orderer")?;
    let registry = ops::registry()?;
    orderer
        .metrics()
        .register(&registry)
        .context("registering the orderer's metrics")?;
    let health = orderer.health();
    let checks: ops::HealthChecks = Arc::new(move || {
        health
            .failed_channels()
            .into_iter()
            .map(|(channel, reason)| FailedCheck {
                component: format!("consenter/{channel}"),
                reason,
            })
            .collect()
    });
    let (stop_operations, operations_stopped) = tokio::sync::oneshot::channel::<()>();
    let operations = tokio::spawn(ops::serve(ops_listener, registry, checks, async move {
        let _ = operations_stopped.await;
    }));
    let cluster_note =
        cluster_address.map_or_else(String::new, |address| format!(", cluster {address}"));
    println!(
        "orderer {} ready: grpc {}, operations {ops_address}{cluster_note}, channels [{}]",
        settings.id,
        orderer.local_addr(),
        orderer.channel_ids().join(", ")
    );
    stop.await;
    tracing::info!("stopping");
    let stopped = orderer.shutdown().await.context("stopping the orderer");
    let _ = stop_operations.send(());
    operations
        .await
        .context("the operations server task failed")??;
    stopped
}
