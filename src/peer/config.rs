//! `peer.yaml`: what a peer process needs to know. Every key and its
//! default is documented in `config/peer.yaml`; key names follow Fabric's
//! `core.yaml` where Fabric has the setting.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use serde::Deserialize;
use weft_ledger::Durability;

use crate::settings::{AuthenticationSection, GoDuration, load_yaml, resolve};
use crate::tls::TlsSection;
use weft_orderer::NodeTls;
use weft_peer_endorser::ChaincodeTls;
use weft_protos::dial::EndpointChoice;
use weft_protos::serve::Keepalive;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PeerConfig {
    pub peer: PeerSection,
    /// Channels to serve; each is joined from its genesis block on the
    /// first start and reopened from the ledger afterwards.
    #[serde(default)]
    pub channels: Vec<ChannelSection>,
    /// Orderer endpoints (`host:port`) to fetch blocks from and to submit
    /// the Gateway's transactions to.
    pub orderers: Vec<String>,
    /// In which order the peer tries `orderers`: random (Fabric's way) or
    /// as listed.
    #[serde(default)]
    pub orderer_choice: EndpointChoice,
    #[serde(default)]
    pub ledger: LedgerSection,
    #[serde(default)]
    pub committer: CommitterSection,
    #[serde(default)]
    pub chaincode: ChaincodeSection,
    #[serde(default)]
    pub gateway: GatewaySection,
    #[serde(default)]
    pub private_data: PrivateDataSection,
    #[serde(default)]
    pub operations: OperationsSection,
    /// `peer.tls`, its files read: set by [`PeerConfig::load`].
    #[serde(skip)]
    pub tls: Option<NodeTls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PeerSection {
    pub id: String,
    pub listen_address: SocketAddr,
    pub local_msp_id: String,
    pub msp_config_path: PathBuf,
    pub file_system_path: PathBuf,
    #[serde(default)]
    pub tls: TlsSection,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub keepalive: KeepaliveSection,
    #[serde(default)]
    pub authentication: AuthenticationSection,
    /// Threads of the node's async runtime (gRPC, endorsement, the
    /// Gateway, deliveries); 0 = one per core. Validation has its pool
    /// (`committer.validationThreads`) and each channel its committing
    /// thread.
    #[serde(default)]
    pub worker_threads: usize,
}

/// Fabric's `peer.keepalive`: how the peer probes the connections of its
/// clients (`interval`, `timeout`), its connections to other peers and
/// orderers for the Gateway (`client`), and to the orderers it fetches
/// blocks from (`deliveryClient`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct KeepaliveSection {
    pub interval: GoDuration,
    pub timeout: GoDuration,
    pub client: KeepaliveProbes,
    pub delivery_client: KeepaliveProbes,
}

/// How often a connection is probed, and how long a probe may go
/// unanswered.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct KeepaliveProbes {
    pub interval: GoDuration,
    pub timeout: GoDuration,
}

impl Default for KeepaliveSection {
    fn default() -> Self {
        let server = Keepalive::SERVER_DEFAULT;
        Self {
            interval: GoDuration(server.interval),
            timeout: GoDuration(server.timeout),
            client: KeepaliveProbes::default(),
            delivery_client: KeepaliveProbes::default(),
        }
    }
}

impl Default for KeepaliveProbes {
    fn default() -> Self {
        let client = Keepalive::CLIENT_DEFAULT;
        Self {
            interval: GoDuration(client.interval),
            timeout: GoDuration(client.timeout),
        }
    }
}

impl KeepaliveProbes {
    pub fn keepalive(&self) -> Keepalive {
        Keepalive {
            interval: self.interval.0,
            timeout: self.timeout.0,
        }
    }
}

impl KeepaliveSection {
    /// How the peer's gRPC server probes its clients.
    pub fn server(&self) -> Keepalive {
        Keepalive {
            interval: self.interval.0,
            timeout: self.timeout.0,
        }
    }

    /// Every duration with its key under `peer.keepalive`.
    fn durations(&self) -> [(&'static str, Duration); 6] {
        [
            ("interval", self.interval.0),
            ("timeout", self.timeout.0),
            ("client.interval", self.client.interval.0),
            ("client.timeout", self.client.timeout.0),
            ("deliveryClient.interval", self.delivery_client.interval.0),
            ("deliveryClient.timeout", self.delivery_client.timeout.0),
        ]
    }
}

/// What the peer serves at once (`peer.limits`; docs/security.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LimitsSection {
    /// Client connections open at once; the next waits to be accepted.
    pub connections: usize,
    pub concurrency: ConcurrencySection,
}

impl Default for LimitsSection {
    fn default() -> Self {
        Self {
            connections: weft_protos::serve::CONNECTIONS_MAX_DEFAULT,
            concurrency: ConcurrencySection::default(),
        }
    }
}

/// Fabric's `peer.limits.concurrency`: calls a service runs at once,
/// across all connections; 0 lifts the limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ConcurrencySection {
    pub endorser_service: usize,
    pub deliver_service: usize,
    pub gateway_service: usize,
}

impl Default for ConcurrencySection {
    fn default() -> Self {
        Self {
            endorser_service: 2500,
            deliver_service: 2500,
            gateway_service: 2500,
        }
    }
}

impl ConcurrencySection {
    /// The limits by gRPC service, as [`weft_protos::serve::CallLimits`]
    /// takes them.
    pub fn by_service(&self) -> [(&'static str, usize); 3] {
        [
            ("/protos.Endorser", self.endorser_service),
            ("/protos.Deliver", self.deliver_service),
            ("/gateway.Gateway", self.gateway_service),
        ]
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChannelSection {
    pub genesis_block: PathBuf,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StateDatabase {
    /// DashMap world state with periodic checkpoints in RocksDB.
    #[default]
    Memory,
    /// Every block's updates written to RocksDB (Fabric's LevelDB model).
    Rocksdb,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DurabilityMode {
    #[default]
    EveryBlock,
    GroupCommit,
    None,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LedgerSection {
    pub state_database: StateDatabase,
    pub durability: DurabilityMode,
    pub group_commit_blocks: u32,
    pub group_commit_interval: GoDuration,
    pub checkpoint_interval: GoDuration,
    pub history: HistorySection,
}

/// `ledger.history`, as Fabric names it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct HistorySection {
    /// Whether the peer indexes every committed write for chaincode's
    /// `GetHistoryForKey`. Default true, as in Fabric.
    pub enable_history_database: bool,
}

impl Default for HistorySection {
    fn default() -> Self {
        Self {
            enable_history_database: true,
        }
    }
}

impl Default for LedgerSection {
    fn default() -> Self {
        Self {
            state_database: StateDatabase::Memory,
            durability: DurabilityMode::EveryBlock,
            group_commit_blocks: 16,
            group_commit_interval: GoDuration(std::time::Duration::from_millis(10)),
            checkpoint_interval: GoDuration(std::time::Duration::from_secs(1)),
            history: HistorySection::default(),
        }
    }
}

impl LedgerSection {
    pub fn durability(&self) -> Durability {
        match self.durability {
            DurabilityMode::EveryBlock => Durability::EveryBlock,
            DurabilityMode::GroupCommit => Durability::GroupCommit {
                blocks_max: self.group_commit_blocks,
                interval_ms: u64::try_from(self.group_commit_interval.0.as_millis())
                    .unwrap_or(u64::MAX),
            },
            DurabilityMode::None => Durability::None,
        }
    }
}

/// Where a peer's blocks come from (`committer.blockSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockSourceMode {
    /// Fetch from the orderers and validate: a full peer.
    Orderers,
    /// Fetch validated blocks from `validatingPeers`: an endorser replica.
    Peers,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CommitterSection {
    pub block_source: BlockSourceMode,
    pub validating_peers: Vec<String>,
    pub pipeline_depth: usize,
    /// Threads of the validation pool; 0 = one per core.
    pub validation_threads: usize,
    pub queue_blocks: usize,
    pub reconnect_backoff_max: GoDuration,
    /// Recognise this peer's own endorsements by their bytes instead of
    /// verifying them again.
    pub recognise_own_endorsements: bool,
}

impl Default for CommitterSection {
    fn default() -> Self {
        Self {
            block_source: BlockSourceMode::Orderers,
            validating_peers: Vec::new(),
            pipeline_depth: 4,
            validation_threads: 0,
            queue_blocks: 64,
            reconnect_backoff_max: GoDuration(std::time::Duration::from_secs(10)),
            recognise_own_endorsements: true,
        }
    }
}

/// Chaincodes beyond the built-ins, and how long an invocation may take.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ChaincodeSection {
    pub execute_timeout: GoDuration,
    pub external: Vec<ExternalChaincodeEntry>,
}

impl Default for ChaincodeSection {
    fn default() -> Self {
        Self {
            execute_timeout: GoDuration(std::time::Duration::from_secs(30)),
            external: Vec::new(),
        }
    }
}

/// A chaincode server (chaincode as a service) the peer dials.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExternalChaincodeEntry {
    pub name: String,
    pub address: String,
    /// With it, the peer dials over TLS: the CA certificate (PEM file) the
    /// server's certificate must chain to.
    #[serde(default)]
    pub tls_root_cert: Option<PathBuf>,
    /// The client certificate and key (PEM files) the peer presents to a
    /// server that requires one.
    #[serde(default)]
    pub tls_client_cert: Option<PathBuf>,
    #[serde(default)]
    pub tls_client_key: Option<PathBuf>,
    /// The TLS settings those files make, read when the config is loaded.
    #[serde(skip)]
    pub tls: Option<ChaincodeTls>,
}

impl ExternalChaincodeEntry {
    /// The TLS the entry asks for, its files read; `key` names the entry
    /// in errors.
    fn read_tls(&self, key: &str) -> Result<Option<ChaincodeTls>> {
        let read = |field: &str, path: &Path| -> Result<String> {
            let bytes = crate::settings::read_file(&format!("{key}.{field}"), path)?;
            String::from_utf8(bytes)
                .map_err(|_| anyhow!("{key}.{field}: {} is not PEM text", path.display()))
        };
        let Some(root) = &self.tls_root_cert else {
            if self.tls_client_cert.is_some() || self.tls_client_key.is_some() {
                bail!("{key}.tlsRootCert: a client certificate needs TLS, so a root certificate");
            }
            return Ok(None);
        };
        let client = match (&self.tls_client_cert, &self.tls_client_key) {
            (Some(certificate), Some(private_key)) => Some((
                read("tlsClientCert", certificate)?,
                read("tlsClientKey", private_key)?,
            )),
            (None, None) => None,
            _ => bail!("{key}.tlsClientCert: name the client certificate and its key together"),
        };
        Ok(Some(ChaincodeTls {
            root_cert: read("tlsRootCert", root)?,
            client,
        }))
    }
}

/// The network's other peers (those of other organisations endorse for
/// the Gateway; all of them share private data), when the Gateway reports
/// a transaction committed, and how long it waits for other nodes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct GatewaySection {
    pub peers: Vec<GatewayPeer>,
    pub commit_status: CommitStatusMode,
    /// How long the Gateway waits for another peer's endorsement.
    pub endorsement_timeout: GoDuration,
    /// How long the Gateway waits for an orderer's answer to a Submit.
    pub broadcast_timeout: GoDuration,
    /// How long the Gateway waits to connect to a peer or orderer.
    pub dial_timeout: GoDuration,
    /// How long this peer, asked to endorse by another organisation's weft
    /// Gateway, first waits to have committed as far as that Gateway's own
    /// peer had, before it refuses; zero refuses at once.
    pub catch_up_timeout: GoDuration,
}

impl Default for GatewaySection {
    /// The Gateway's own defaults, Fabric's `core.yaml` ones.
    fn default() -> Self {
        let timeouts = weft_peer_endorser::gateway::Timeouts::default();
        Self {
            peers: Vec::new(),
            commit_status: CommitStatusMode::default(),
            endorsement_timeout: GoDuration(timeouts.endorsement),
            broadcast_timeout: GoDuration(timeouts.broadcast),
            dial_timeout: GoDuration(timeouts.dial),
            catch_up_timeout: GoDuration(weft_peer_endorser::CATCH_UP_TIMEOUT_DEFAULT),
        }
    }
}

/// How private data moves between peers (Fabric's
/// `peer.gossip.pvtData`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct PrivateDataSection {
    /// How long an endorsing peer waits for another peer to acknowledge
    /// the private data it pushed.
    pub push_ack_timeout: GoDuration,
    /// How long a block whose private data this peer is missing waits
    /// while the data is asked of other members' peers; then it commits
    /// without it.
    pub pull_retry_threshold: GoDuration,
    /// Whether private data still missing after a block committed is
    /// asked for again later (Fabric's reconciliation).
    pub reconciliation_enabled: bool,
    /// How long the reconciler sleeps between rounds.
    pub reconcile_sleep_interval: GoDuration,
    /// Missing collections asked for per round.
    pub reconcile_batch_size: usize,
    /// How many of its organisation's other peers an endorsing peer sends
    /// the organisation's implicit collection to.
    pub implicit_collection_dissemination_policy: ImplicitCollectionSection,
}

/// Fabric's `peer.gossip.pvtData.implicitCollectionDisseminationPolicy`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ImplicitCollectionSection {
    /// Peers that must acknowledge before the endorsement is given.
    pub required_peer_count: u32,
    /// Peers it is sent to at most.
    pub max_peer_count: u32,
}

impl Default for ImplicitCollectionSection {
    fn default() -> Self {
        let policy = weft_peer_endorser::dissemination::ImplicitCollectionPolicy::default();
        Self {
            required_peer_count: policy.required_peer_count,
            max_peer_count: policy.maximum_peer_count,
        }
    }
}

impl Default for PrivateDataSection {
    /// Fabric's `core.yaml` defaults.
    fn default() -> Self {
        Self {
            push_ack_timeout: GoDuration(std::time::Duration::from_secs(3)),
            pull_retry_threshold: GoDuration(std::time::Duration::from_secs(60)),
            reconciliation_enabled: true,
            reconcile_sleep_interval: GoDuration(std::time::Duration::from_secs(60)),
            reconcile_batch_size: 10,
            implicit_collection_dissemination_policy: ImplicitCollectionSection::default(),
        }
    }
}

/// When the Gateway's `CommitStatus` and chaincode events report a
/// transaction (`gateway.commitStatus`); only stream channels tell the two
/// apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommitStatusMode {
    /// Once a verified checkpoint covers it: it is never rolled back.
    #[default]
    Durable,
    /// Once it is validated and applied, before its checkpoint: sooner,
    /// but a checkpoint that fails to verify rolls it back after the
    /// client heard of it.
    Applied,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatewayPeer {
    pub msp_id: String,
    pub address: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct OperationsSection {
    pub listen_address: SocketAddr,
}

impl Default for OperationsSection {
    fn default() -> Self {
        Self {
            listen_address: SocketAddr::from(([127, 0, 0, 1], 9443)),
        }
    }
}

impl PeerConfig {
    /// Reads and checks `path`; relative paths in it become relative to its
    /// directory.
    pub fn load(path: &Path) -> Result<Self> {
        let mut config: Self = load_yaml(path, "CORE_")?;
        let dir = path.parent().unwrap_or(Path::new("."));
        config.peer.msp_config_path = resolve(dir, &config.peer.msp_config_path);
        config.peer.file_system_path = resolve(dir, &config.peer.file_system_path);
        for channel in &mut config.channels {
            channel.genesis_block = resolve(dir, &channel.genesis_block);
        }
        for external in &mut config.chaincode.external {
            for path in [
                &mut external.tls_root_cert,
                &mut external.tls_client_cert,
                &mut external.tls_client_key,
            ]
            .into_iter()
            .flatten()
            {
                *path = resolve(dir, path);
            }
        }
        let file = path.display();
        if config.orderers.is_empty() {
            bail!("{file}: orderers: name at least one orderer endpoint");
        }
        if config.committer.block_source == BlockSourceMode::Peers
            && config.committer.validating_peers.is_empty()
        {
            bail!(
                "{file}: committer.validatingPeers: blockSource peers needs at least one \
                 validating peer endpoint"
            );
        }
        if config.committer.pipeline_depth == 0 {
            bail!("{file}: committer.pipelineDepth: must be at least 1");
        }
        if config.committer.queue_blocks == 0 {
            bail!("{file}: committer.queueBlocks: must be at least 1");
        }
        let mut names = std::collections::BTreeSet::new();
        let mut tls_of = Vec::new();
        for (index, external) in config.chaincode.external.iter().enumerate() {
            let name = &external.name;
            if name.is_empty() {
                bail!("{file}: chaincode.external[{index}].name: must not be empty");
            }
            if name.starts_with('_') {
                bail!(
                    "{file}: chaincode.external[{index}].name: {name}: names starting with _ are system chaincodes"
                );
            }
            let builtins = weft_peer_endorser::builtin::builtins();
            if builtins.iter().any(|(builtin, _)| builtin == name) {
                bail!("{file}: chaincode.external[{index}].name: {name} is a built-in chaincode");
            }
            if !names.insert(name) {
                bail!("{file}: chaincode.external[{index}].name: {name} is named twice");
            }
            if external.address.parse::<SocketAddr>().is_err()
                && external.address.rsplit_once(':').is_none()
            {
                bail!(
                    "{file}: chaincode.external[{index}].address: {:?} is not host:port",
                    external.address
                );
            }
            let tls = external
                .read_tls(&format!("chaincode.external[{index}]"))
                .map_err(|e| anyhow!("{file}: {e:#}"))?;
            tls_of.push(tls);
        }
        for (external, tls) in config.chaincode.external.iter_mut().zip(tls_of) {
            external.tls = tls;
        }
        if config.peer.limits.connections == 0 {
            bail!("{file}: peer.limits.connections: must be at least 1");
        }
        for (key, duration) in config.peer.keepalive.durations() {
            if duration.is_zero() {
                bail!("{file}: peer.keepalive.{key}: must be more than zero");
            }
        }
        for (key, timeout) in [
            ("endorsementTimeout", &config.gateway.endorsement_timeout),
            ("broadcastTimeout", &config.gateway.broadcast_timeout),
            ("dialTimeout", &config.gateway.dial_timeout),
        ] {
            if timeout.0.is_zero() {
                bail!("{file}: gateway.{key}: must be more than zero");
            }
        }
        if config.chaincode.execute_timeout.0.is_zero() {
            bail!("{file}: chaincode.executeTimeout: must be more than zero");
        }
        if config.private_data.push_ack_timeout.0.is_zero() {
            bail!("{file}: privateData.pushAckTimeout: must be more than zero");
        }
        if config.private_data.reconcile_sleep_interval.0.is_zero() {
            bail!("{file}: privateData.reconcileSleepInterval: must be more than zero");
        }
        if config.private_data.reconcile_batch_size == 0 {
            bail!("{file}: privateData.reconcileBatchSize: must be at least 1");
        }
        let implicit = &config.private_data.implicit_collection_dissemination_policy;
        if implicit.required_peer_count > implicit.max_peer_count {
            bail!(
                "{file}: privateData.implicitCollectionDisseminationPolicy.requiredPeerCount: \
                 {} is more than its maxPeerCount {}",
                implicit.required_peer_count,
                implicit.max_peer_count
            );
        }
        if config.ledger.durability == DurabilityMode::GroupCommit
            && config.ledger.group_commit_blocks == 0
        {
            bail!("{file}: ledger.groupCommitBlocks: must be at least 1");
        }
        config.tls = config
            .peer
            .tls
            .load(dir, |key| format!("{file}: peer.{key}"))?;
        Ok(config)
    }
}
