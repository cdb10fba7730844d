//! `weft network up`: a whole network on this machine from one command.
//!
//! On the first run in a data directory it generates the crypto material
//! (as cryptogen does) and the channel's genesis block (as configtxgen
//! does), writes a configuration file for every node, starts a Raft
//! cluster of orderers (or one solo orderer) and the peers of the
//! organisations (two by default), each peer a committer, endorser and Gateway, and defines
//! the built-in chaincodes (`kv`, `transfer`, `smallbank`) on the channel
//! through `_lifecycle` with the chosen endorsement policy. It then prints
//! `network ready`, the endpoints, and the path of a client connection file
//! (see [`connection`]) and runs until Ctrl-C or SIGTERM, when it stops the
//! peers, then the orderers. A later run on the same directory resumes the
//! network with its ledgers.
//!
//! Everything is created in a temporary folder beside the data directory
//! and renamed into place once complete, so a failed creation leaves
//! nothing behind.

pub mod connection;
mod layout;
mod nodes;
mod supervisor;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use prost::Message;
use tokio::sync::watch;

use layout::BUILTIN_CHAINCODES;
pub use layout::Plan;
pub use nodes::Role;
use nodes::RunningNode;
use supervisor::NodeState;
pub use supervisor::RestartPolicy;

/// The file in the data directory that holds the network's [`Plan`].
const PLAN_FILE: &str = "network.yaml";
/// The client connection file in the data directory.
pub const CONNECTION_FILE: &str = "connection.yaml";
/// How long a Raft cluster may take to elect its leader.
const LEADER_WAIT_MAX: Duration = Duration::from_secs(60);

/// Whether Ctrl-C or SIGTERM has arrived, for the commands that start
/// networks (`network up`, `weft bench`). Its nodes run in process groups
/// of their own, so the terminal's Ctrl-C does not reach them: the command
/// must stop them. Start-up checks at each wait and gives up, the nodes
/// started so far stopping as the half-started network is dropped; a
/// running network or bench awaits [`interrupted`].
///
/// The first call starts the thread that watches for the signals. From
/// then on they no longer end the process by themselves.
fn interruption() -> watch::Receiver<bool> {
    static INTERRUPTION: OnceLock<watch::Receiver<bool>> = OnceLock::new();
    INTERRUPTION
        .get_or_init(|| {
            let (interrupt, interruption) = watch::channel(false);
            let watcher = std::thread::Builder::new()
                .name("weft-signals".into())
                .spawn(move || {
                    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    else {
                        return;
                    };
                    runtime.block_on(async {
                        loop {
                            crate::shutdown_signal().await;
                            interrupt.send_replace(true);
                        }
                    });
                });
            if let Err(error) = watcher {
                tracing::warn!(%error, "cannot watch for Ctrl-C and SIGTERM");
            }
            interruption
        })
        .clone()
}

/// Fails once Ctrl-C or SIGTERM has arrived.
pub(crate) fn check_not_interrupted() -> Result<()> {
    if *interruption().borrow() {
        bail!("interrupted while the network was starting; the nodes started so far are stopped");
    }
    Ok(())
}

/// Completes once Ctrl-C or SIGTERM has arrived (at once if it already
/// has); never, if the signals cannot be watched.
pub(crate) async fn interrupted() {
    if interruption()
        .wait_for(|interrupted| *interrupted)
        .await
        .is_err()
    {
        std::future::pending::<()>().await;
    }
}

/// Options of `weft network up`. The shape options apply when the network
/// is created; resuming a network with different ones is an error.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UpArgs {
    /// The data directory: crypto material, configs, ledgers, logs.
    #[arg(long, default_value = "weft-network")]
    pub dir: PathBuf,
    /// Orderers: a Raft cluster of 3 by default; 1 runs a solo orderer.
    #[arg(long)]
    pub orderers: Option<usize>,
    /// Peer organisations, org1 to orgN [default: 2].
    #[arg(long)]
    pub orgs: Option<usize>,
    /// Peers of each organisation [default: 1]. Each peer's Gateway knows
    /// every peer of the other organisations, the one of its own place
    /// first, and moves on to the next when one fails.
    #[arg(long)]
    pub peers_per_org: Option<usize>,
    /// The first of the network's ports [default: 7050]: orderers on 7050,
    /// 7060, ..., peer0.org1 on 7051, peer0.org2 on 9051.
    #[arg(long)]
    pub base_port: Option<u16>,
    /// The channel's name [default: mychannel]; further channels are
    /// named with 2, 3, ... appended.
    #[arg(long)]
    pub channel: Option<String>,
    /// Channels, each with its own orderer chain, ledgers and chaincode
    /// definitions, every peer joined to all [default: 1].
    #[arg(long)]
    pub channels: Option<usize>,
    /// The built-in chaincodes' endorsement policy, in Fabric's language,
    /// or a preset of Thakkar et al.'s Table III over the organisations'
    /// peers: any, all, outof-K, and-or-K [default: any: any one
    /// organisation's peer].
    #[arg(long)]
    pub policy: Option<String>,
    /// How long the orderers wait to fill a block [default: 10ms].
    #[arg(long)]
    pub batch_timeout: Option<String>,
    /// Transactions per block at most [default: 500].
    #[arg(long)]
    pub block_size: Option<u32>,
    #[command(flatten)]
    pub stream: StreamArgs,
    #[command(flatten)]
    pub consensus: ConsensusArgs,
    /// Run every node as a thread of this process instead of a process
    /// of its own.
    #[arg(long)]
    pub in_process: bool,
    /// Serve every endpoint over TLS, with the nodes' cryptogen TLS
    /// certificates (the connection file then says `tls: true`); nodes dial
    /// each other over TLS too. Fixed when the network is created.
    #[arg(long)]
    pub tls: bool,
    /// Like --tls, and every node also asks its clients for a TLS
    /// certificate from one of the network's TLS CAs (mutual TLS); the
    /// connection file names org1's user's TLS certificate for clients.
    /// Fixed when the network is created.
    #[arg(long)]
    pub mutual_tls: bool,
}

/// Stream mode's options, for `weft network up` and `weft bench`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StreamArgs {
    /// The channels stream (docs/stream-mode.md): each transaction is
    /// ordered and committed at once, the orderers sign checkpoints.
    /// Fixed when the network is created.
    #[arg(long)]
    pub stream: bool,
    /// With --stream and several channels: only the first N stream, the
    /// others cut blocks [default: all stream].
    #[arg(long, requires = "stream")]
    pub stream_channels: Option<usize>,
    /// With --stream: a checkpoint at the latest every N transactions
    /// [default: 100].
    #[arg(long, requires = "stream")]
    pub checkpoint_transactions: Option<u32>,
    /// With --stream: a checkpoint at the latest this long after the first
    /// unsigned transaction [default: 2ms].
    #[arg(long, requires = "stream")]
    pub checkpoint_interval: Option<String>,
    /// With --stream: when the peers' Gateways report a transaction
    /// committed: once a checkpoint covers it, or once applied, before its
    /// checkpoint (and rolled back should that checkpoint fail).
    /// [default: durable]
    #[arg(long, value_enum, requires = "stream")]
    pub commit_status: Option<CommitStatus>,
}

/// How the orderers of a new network agree on the order.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConsensusArgs {
    /// raft: a Raft cluster (solo with --orderers 1); kafka: a topic per
    /// channel on Kafka brokers the network does not start (run one with
    /// `bash deploy/kafka.sh start`; docs/kafka.md) [default: raft].
    /// Fixed when the network is created.
    #[arg(long, value_enum)]
    pub consensus: Option<ConsensusKind>,
    /// With --consensus kafka: the brokers, host:port, comma-separated
    /// [default: 127.0.0.1:9092].
    #[arg(long, value_delimiter = ',')]
    pub kafka_brokers: Vec<String>,
    /// With --consensus kafka: whole envelopes through Kafka, Fabric 1.x's
    /// way, instead of only transaction IDs (FastFabric's).
    #[arg(long)]
    pub kafka_full_payloads: bool,
}

/// `--consensus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConsensusKind {
    Raft,
    Kafka,
}

impl ConsensusArgs {
    /// The Kafka settings these options ask for; `None`: solo or Raft.
    fn plan(&self) -> Result<Option<layout::KafkaPlan>> {
        if self.consensus != Some(ConsensusKind::Kafka) {
            if !self.kafka_brokers.is_empty() || self.kafka_full_payloads {
                bail!("--kafka-brokers and --kafka-full-payloads need --consensus kafka");
            }
            return Ok(None);
        }
        let brokers = if self.kafka_brokers.is_empty() {
            vec![DEFAULT_KAFKA_BROKER.to_owned()]
        } else {
            self.kafka_brokers.clone()
        };
        Ok(Some(layout::KafkaPlan {
            brokers,
            tx_ids_only: !self.kafka_full_payloads,
        }))
    }

    /// How a plan's consensus reads in a mismatch message.
    fn describe(kafka: Option<&layout::KafkaPlan>) -> String {
        kafka.map_or_else(
            || "raft".to_owned(),
            |kafka| {
                format!(
                    "kafka ({} through {})",
                    if kafka.tx_ids_only {
                        "TxIDs"
                    } else {
                        "whole envelopes"
                    },
                    kafka.brokers.join(",")
                )
            },
        )
    }
}

/// Where `--consensus kafka` looks for a broker by default: where
/// `deploy/kafka.sh start` runs one.
const DEFAULT_KAFKA_BROKER: &str = "127.0.0.1:9092";

/// `--commit-status`: when a stream network's peers report a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CommitStatus {
    Durable,
    Applied,
}

impl StreamArgs {
    /// The stream settings these options ask for; `None`: block mode.
    pub fn plan(&self) -> Option<layout::StreamPlan> {
        self.stream.then(|| layout::StreamPlan {
            checkpoint_transactions: self.checkpoint_transactions.unwrap_or(100),
            checkpoint_interval: self
                .checkpoint_interval
                .clone()
                .unwrap_or_else(|| "2ms".to_owned()),
            commit_status_applied: self.commit_status == Some(CommitStatus::Applied),
            channels: self.stream_channels,
        })
    }

    /// How the plan's stream settings read in a mismatch message.
    fn describe(plan: Option<&layout::StreamPlan>) -> String {
        plan.map_or_else(
            || "off".to_owned(),
            |stream| {
                format!(
                    "on ({}checkpoint every {} transactions or {}, commit status at {})",
                    stream.channels.map_or(String::new(), |count| format!(
                        "the first {count} channel(s), "
                    )),
                    stream.checkpoint_transactions,
                    stream.checkpoint_interval,
                    if stream.commit_status_applied {
                        "applied"
                    } else {
                        "durable"
                    }
                )
            },
        )
    }
}

impl UpArgs {
    /// The plan of a new network with these options.
    fn new_plan(&self) -> Result<Plan> {
        let organisations = self.orgs.unwrap_or(2);
        Ok(Plan {
            channel: self
                .channel
                .clone()
                .unwrap_or_else(|| "mychannel".to_owned()),
            channels: self.channels.unwrap_or(1),
            orderers: self.orderers.unwrap_or(3),
            organisations,
            peers_per_org: self.peers_per_org.unwrap_or(1),
            base_port: self.base_port.unwrap_or(7050),
            policy: layout::expand_policy(self.policy.as_deref().unwrap_or("any"), organisations)?,
            batch_timeout: self
                .batch_timeout
                .clone()
                .unwrap_or_else(|| "10ms".to_owned()),
            block_size: self.block_size.unwrap_or(500),
            stream: self.stream.plan(),
            kafka: self.consensus.plan()?,
            tls: self.tls || self.mutual_tls,
            mutual_tls: self.mutual_tls,
            deployed: Vec::new(),
        })
    }

    /// Refuses options that contradict the saved plan of a network.
    fn check_against(&self, plan: &Plan, dir: &Path) -> Result<()> {
        let mismatch = |option: &str, asked: String, saved: String| {
            anyhow!(
                "{} holds a network with {option} {saved}; {option} {asked} asks for another \
                 (name a new directory, or remove this one to start afresh)",
                dir.display()
            )
        };
        let checks = [
            (
                "--orderers",
                self.orderers.map(|v| v.to_string()),
                plan.orderers.to_string(),
            ),
            (
                "--orgs",
                self.orgs.map(|v| v.to_string()),
                plan.organisations.to_string(),
            ),
            (
                "--peers-per-org",
                self.peers_per_org.map(|v| v.to_string()),
                plan.peers_per_org.to_string(),
            ),
            (
                "--base-port",
                self.base_port.map(|v| v.to_string()),
                plan.base_port.to_string(),
            ),
            ("--channel", self.channel.clone(), plan.channel.clone()),
            (
                "--channels",
                self.channels.map(|v| v.to_string()),
                plan.channels.to_string(),
            ),
            (
                "--policy",
                self.policy
                    .as_deref()
                    .map(|policy| layout::expand_policy(policy, plan.organisations))
                    .transpose()?,
                plan.policy.clone(),
            ),
            (
                "--batch-timeout",
                self.batch_timeout.clone(),
                plan.batch_timeout.clone(),
            ),
            (
                "--block-size",
                self.block_size.map(|v| v.to_string()),
                plan.block_size.to_string(),
            ),
            (
                "--stream",
                self.stream
                    .stream
                    .then(|| StreamArgs::describe(self.stream.plan().as_ref())),
                StreamArgs::describe(plan.stream.as_ref()),
            ),
            (
                "--consensus",
                self.consensus
                    .consensus
                    .is_some()
                    .then(|| self.consensus.plan())
                    .transpose()?
                    .map(|kafka| ConsensusArgs::describe(kafka.as_ref())),
                ConsensusArgs::describe(plan.kafka.as_ref()),
            ),
            (
                "--tls",
                self.tls.then(|| "on".to_owned()),
                if plan.tls { "on" } else { "off" }.to_owned(),
            ),
            (
                "--mutual-tls",
                self.mutual_tls.then(|| "on".to_owned()),
                if plan.mutual_tls { "on" } else { "off" }.to_owned(),
            ),
        ];
        for (option, asked, saved) in checks {
            if let Some(asked) = asked
                && asked != saved
            {
                return Err(mismatch(option, asked, saved));
            }
        }
        Ok(())
    }
}

/// Runs `weft network up` until Ctrl-C or SIGTERM. A node that exits on
/// its own is started again (`supervisor`), while the others keep serving.
pub fn up(args: &UpArgs) -> Result<()> {
    let mut network = Network::up(args)?;
    network.print_ready();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut watch = tokio::time::interval(SUPERVISE_EVERY);
        let stop = interrupted();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = watch.tick() => {
                    for event in network.supervise(Instant::now()) {
                        println!("{event}");
                    }
                }
            }
        }
    });
    println!("stopping the network");
    network.stop()?;
    println!(
        "network stopped; `weft network up --dir {}` resumes it",
        network.dir.display()
    );
    Ok(())
}

/// Refuses to start a Kafka network whose brokers do not answer: its
/// orderers would refuse every transaction.
pub fn check_brokers(brokers: &[String]) -> Result<()> {
    let answers = |broker: &String| {
        use std::net::ToSocketAddrs as _;
        broker.to_socket_addrs().is_ok_and(|mut addresses| {
            addresses.any(|address| {
                std::net::TcpStream::connect_timeout(&address, Duration::from_secs(2)).is_ok()
            })
        })
    };
    if brokers.iter().any(answers) {
        return Ok(());
    }
    bail!(
        "no Kafka broker answers at {}: start one with `bash deploy/kafka.sh start` \
         (docs/kafka.md), or name yours with --kafka-brokers",
        brokers.join(", ")
    )
}

/// How often `weft network up` looks at its nodes.
const SUPERVISE_EVERY: Duration = Duration::from_millis(500);

/// Ports are reserved in blocks of [`PORT_BLOCK`] from [`FIRST_PORT_BLOCK`]
/// (where the bases [`free_base_port`] tries start), each by a lock file,
/// so that processes started side by side (tests run benches and nodes
/// concurrently) never hand out the same port: a network's ports span
/// several blocks, and a port free when probed can be taken by another
/// process before the node binds it.
const PORT_BLOCK: u16 = 1_000;
const FIRST_PORT_BLOCK: u16 = 10_050;

/// The block `port` belongs to, if any.
fn port_block(port: u16) -> Option<u16> {
    port.checked_sub(FIRST_PORT_BLOCK)
        .map(|offset| FIRST_PORT_BLOCK + offset / PORT_BLOCK * PORT_BLOCK)
}

/// The blocks no port of which the kernel gives outgoing connections.
fn usable_port_blocks() -> Vec<u16> {
    let ephemeral = ephemeral_ports();
    (FIRST_PORT_BLOCK..=u16::MAX - PORT_BLOCK)
        .step_by(usize::from(PORT_BLOCK))
        .filter(|block| {
            let last = block + (PORT_BLOCK - 1);
            last < *ephemeral.start() || *block > *ephemeral.end()
        })
        .collect()
}

/// A base port from which every port of a new network with `args` is
/// free on this machine (for networks that need not be found at Fabric's
/// usual ports, such as the one `weft bench` starts), and outside the
/// ports the kernel gives outgoing connections: a port in that range that
/// is free when probed may be taken by any client's connection before the
/// node binds it. Every block the network's ports touch is reserved.
pub fn free_base_port(args: &UpArgs) -> Result<u16> {
    let ephemeral = ephemeral_ports();
    let mut candidates = Vec::new();
    for base in usable_port_blocks() {
        let plan = Plan {
            base_port: base,
            ..args.new_plan()?
        };
        if let Ok(ports) = plan.ports()
            && ports
                .iter()
                .all(|address| !ephemeral.contains(&address.port()))
        {
            candidates.push((base, ports));
        }
    }
    // Where the search starts depends on the process, so that benches
    // started at the same moment seldom probe the same range first.
    let first = std::process::id() as usize % candidates.len().max(1);
    let chosen = candidates[first..]
        .iter()
        .chain(&candidates[..first])
        .find(|(_, ports)| {
            let blocks: std::collections::BTreeSet<u16> = ports
                .iter()
                .filter_map(|address| port_block(address.port()))
                .collect();
            ports
                .iter()
                .all(|address| std::net::TcpListener::bind(address).is_ok())
                && reserve_port_blocks(&blocks)
        });
    match chosen {
        Some((base, _)) => Ok(*base),
        None => bail!(
            "no range of free ports found between {FIRST_PORT_BLOCK} and 65535 outside the ephemeral ports {}-{}",
            ephemeral.start(),
            ephemeral.end()
        ),
    }
}

/// Takes the blocks `ports` fall in for this process (see
/// [`free_base_port`]): `false` when another process holds one of them.
/// For callers that choose their own ports, such as tests that start a
/// network at a base of their choosing.
pub fn reserve_ports(ports: impl IntoIterator<Item = u16>) -> bool {
    reserve_port_blocks(&ports.into_iter().filter_map(port_block).collect())
}

/// The port blocks this process holds, with their lock files.
static HELD_PORT_BLOCKS: std::sync::Mutex<Vec<(u16, std::fs::File)>> =
    std::sync::Mutex::new(Vec::new());

/// Takes `blocks` for this process, for as long as it lives (exclusive
/// locks on files named after them, which the system releases when the
/// process ends, however it ends): all of them, or none when another
/// process holds one. Blocks this process holds already count as taken.
/// Where no lock file can be made, the blocks are taken on the bind probe
/// alone.
fn reserve_port_blocks(blocks: &std::collections::BTreeSet<u16>) -> bool {
    let mut held = HELD_PORT_BLOCKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = std::env::temp_dir().join("weft-port-ranges");
    let mut taken = Vec::new();
    for &block in blocks {
        if held.iter().any(|(mine, _)| *mine == block) {
            continue;
        }
        let lock = std::fs::create_dir_all(&dir).and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(block.to_string()))
        });
        let Ok(file) = lock else {
            return true;
        };
        if file.try_lock().is_err() {
            // Dropping `taken` releases what this call locked.
            return false;
        }
        taken.push((block, file));
    }
    held.extend(taken);
    true
}

/// A port free on loopback now, outside the ports the kernel gives
/// outgoing connections (see [`free_base_port`]), for a listener whose
/// address must be written down before it binds. Ports come from a block
/// this process reserved, one after the other, so no other process hands
/// them out.
pub fn free_port() -> Result<u16> {
    static NEXT: std::sync::Mutex<Option<(u16, u16)>> = std::sync::Mutex::new(None);
    let mut next = NEXT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let blocks = usable_port_blocks();
    // Where the search for a block starts depends on the process, as
    // above.
    let first = std::process::id() as usize * 7 % blocks.len().max(1);
    let mut fresh_blocks = blocks[first..].iter().chain(&blocks[..first]);
    loop {
        if let Some((block, offset)) = next.as_mut() {
            while *offset < PORT_BLOCK {
                let port = *block + *offset;
                *offset += 1;
                if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                    return Ok(port);
                }
            }
        }
        // A block this process reserved for a network is that network's.
        let block = fresh_blocks
            .find(|block| {
                let mine = HELD_PORT_BLOCKS
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .iter()
                    .any(|(held, _)| held == *block);
                !mine && reserve_port_blocks(&std::collections::BTreeSet::from([**block]))
            })
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no block of free ports on 127.0.0.1 outside the ephemeral ports {}-{}",
                    ephemeral_ports().start(),
                    ephemeral_ports().end()
                )
            })?;
        *next = Some((*block, 0));
    }
}

/// The ports the kernel gives outgoing connections
/// (`net.ipv4.ip_local_port_range`; Linux's default where it cannot be
/// read).
fn ephemeral_ports() -> std::ops::RangeInclusive<u16> {
    let configured = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(str::parse::<u16>);
            Some(bounds.next()?.ok()?..=bounds.next()?.ok()?)
        });
    configured.unwrap_or(32_768..=60_999)
}

/// A local network, running.
pub struct Network {
    pub dir: PathBuf,
    pub plan: Plan,
    /// Orderers first, then peers, in start order.
    nodes: Vec<RunningNode>,
    /// Where each node stands, by the index of `nodes`, once it runs.
    states: Vec<NodeState>,
    restarts: RestartPolicy,
    in_process: bool,
}

impl Network {
    /// Creates the network in `args.dir` unless it exists, then starts it
    /// and defines the built-in chaincodes not yet defined.
    pub fn up(args: &UpArgs) -> Result<Self> {
        // Ctrl-C from here on stops the nodes this starts.
        interruption();
        let plan_path = args.dir.join(PLAN_FILE);
        let plan = if plan_path.exists() {
            let plan = Plan::load(&plan_path)?;
            args.check_against(&plan, &args.dir)?;
            println!("resuming the network in {}", args.dir.display());
            plan
        } else {
            let plan = args.new_plan()?;
            create(&args.dir, &plan)?;
            println!("created a network in {}", args.dir.display());
            plan
        };
        if let Some(kafka) = &plan.kafka {
            check_brokers(&kafka.brokers)?;
        }
        let dir = std::fs::canonicalize(&args.dir)
            .with_context(|| format!("locating {}", args.dir.display()))?;
        let mut network = Self {
            dir,
            plan,
            nodes: Vec::new(),
            states: Vec::new(),
            restarts: RestartPolicy::default(),
            in_process: args.in_process,
        };
        network.start()?;
        network.states = vec![NodeState::started(Instant::now()); network.nodes.len()];
        network.deploy_builtins()?;
        network
            .plan
            .connection_file(&network.dir)?
            .save(&network.dir.join(CONNECTION_FILE))?;
        Ok(network)
    }

    fn start(&mut self) -> Result<()> {
        let spawn = if self.in_process {
            RunningNode::spawn_thread
        } else {
            RunningNode::spawn_process
        };
        for orderer in self.plan.orderer_nodes()? {
            let config = self.dir.join(&orderer.name).join("orderer.yaml");
            self.nodes.push(spawn(
                Role::Orderer,
                &orderer.name,
                &config,
                orderer.operations,
            )?);
        }
        for node in &mut self.nodes {
            node.wait_ready()?;
        }
        // Kafka orderers are ready once healthy (their partition takes records).
        if self.plan.orderers > 1 && self.plan.kafka.is_none() {
            self.wait_for_raft_leader()?;
        }
        let first_peer = self.nodes.len();
        for peer in self.plan.peer_nodes()? {
            let config = self.dir.join(&peer.name).join("peer.yaml");
            self.nodes
                .push(spawn(Role::Peer, &peer.name, &config, peer.operations)?);
        }
        for node in &mut self.nodes[first_peer..] {
            node.wait_ready()?;
        }
        Ok(())
    }

    /// Waits until every orderer knows the Raft leader of every channel,
    /// so that the first transactions are not refused for want of one.
    fn wait_for_raft_leader(&self) -> Result<()> {
        let deadline = Instant::now() + LEADER_WAIT_MAX;
        loop {
            let leaders_known = self
                .nodes
                .iter()
                .filter(|node| node.role == Role::Orderer)
                .all(|node| {
                    crate::bench::http_get(node.operations, "/metrics").is_ok_and(|metrics| {
                        let channels_led =
                            crate::bench::metric_values(&metrics, "consensus_etcdraft_leader_id")
                                .filter(|leader| *leader > 0.0)
                                .count();
                        channels_led >= self.plan.channels
                    })
                });
            if leaders_known {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the orderers elected no Raft leader within {LEADER_WAIT_MAX:?}");
            }
            check_not_interrupted()?;
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Defines the built-in chaincodes with the plan's policy, each
    /// organisation's admin approving through its first peer.
    fn deploy_builtins(&mut self) -> Result<()> {
        let pending: Vec<&str> = BUILTIN_CHAINCODES
            .into_iter()
            .filter(|name| !self.plan.deployed.iter().any(|done| done == name))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let orderer = self.plan.orderer_nodes()?[0].grpc;
        let peers = self.plan.peer_nodes()?;
        let crypto = self.dir.join("crypto");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let validation_parameter = crate::chaincode::validation_parameter(Some(&self.plan.policy))?;
        let dialer = self.plan.connection_file(&self.dir)?.dialer()?;
        for name in pending {
            // The channels are independent: their definitions are agreed
            // on at the same time.
            let mut deployments = tokio::task::JoinSet::new();
            for channel in self.plan.channel_names() {
                let approvers = peers
                    .iter()
                    .filter(|peer| peer.is_first())
                    .map(|peer| {
                        crate::chaincode::Approver::from_crypto(&crypto, &peer.org, peer.grpc)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let deployment = crate::chaincode::Deployment {
                    channel,
                    name: name.to_owned(),
                    version: "1.0".to_owned(),
                    sequence: 1,
                    validation_parameter: validation_parameter.clone(),
                    collections: None,
                    approvers,
                    orderer,
                    dialer: dialer.clone(),
                    package: None,
                };
                deployments.spawn_on(async move { deployment.run().await }, runtime.handle());
            }
            runtime.block_on(async {
                let mut interruption = tokio::time::interval(Duration::from_millis(100));
                loop {
                    tokio::select! {
                        outcome = deployments.join_next() => match outcome {
                            Some(outcome) => {
                                outcome.context("a chaincode deployment task failed")??;
                            }
                            None => return Ok::<(), anyhow::Error>(()),
                        },
                        _ = interruption.tick() => check_not_interrupted()?,
                    }
                }
            })?;
            self.plan.deployed.push(name.to_owned());
            self.plan.save(&self.dir.join(PLAN_FILE))?;
        }
        Ok(())
    }

    fn print_ready(&self) {
        println!("network ready");
        println!(
            "  {} {}, chaincodes {}",
            if self.plan.channels == 1 {
                "channel"
            } else {
                "channels"
            },
            self.plan
                .channel_names()
                .iter()
                .enumerate()
                .map(|(index, name)| match self.plan.streams(index) {
                    true => format!("{name} (stream)"),
                    false => name.clone(),
                })
                .collect::<Vec<_>>()
                .join(", "),
            self.plan.deployed.join(", ")
        );
        if let Some(kafka) = &self.plan.kafka {
            println!(
                "  ordering through Kafka at {} ({})",
                kafka.brokers.join(", "),
                if kafka.tx_ids_only {
                    "TxIDs only"
                } else {
                    "whole envelopes"
                }
            );
        }
        let orderers = self.plan.orderer_nodes().unwrap_or_default();
        for orderer in &orderers {
            println!(
                "  orderer {}: grpc {}, operations {}",
                orderer.name, orderer.grpc, orderer.operations
            );
        }
        for peer in self.plan.peer_nodes().unwrap_or_default() {
            println!(
                "  peer {} ({}): grpc {}, operations {}",
                peer.name, peer.msp_id, peer.grpc, peer.operations
            );
        }
        if self.in_process {
            println!("  logs: standard error (every node runs in this process)");
        } else {
            println!("  logs: {}/<node>/node.log", self.dir.display());
        }
        println!("  connection file: {}", self.connection_file().display());
        println!("Ctrl-C stops the network");
    }

    /// The client connection file.
    pub fn connection_file(&self) -> PathBuf {
        self.dir.join(CONNECTION_FILE)
    }

    /// Looks at every node once: one that exited is logged and given a
    /// time to start again, one whose time has come is started again, one
    /// that failed too often in a row is left stopped. What happened, for
    /// the operator.
    pub fn supervise(&mut self, now: Instant) -> Vec<String> {
        let mut events = Vec::new();
        for (node, state) in self.nodes.iter_mut().zip(&mut self.states) {
            match *state {
                NodeState::Running { .. } => {
                    let Some(reason) = node.exited() else {
                        continue;
                    };
                    tracing::warn!(node = %node.name, "{reason}");
                    *state = self.restarts.exited(*state, now);
                    let log = if node.log().as_os_str().is_empty() {
                        String::new()
                    } else {
                        format!(" (its log: {})", node.log().display())
                    };
                    events.push(match *state {
                        NodeState::Waiting { at, attempt } => format!(
                            "{} stopped: {reason}{log}; starting it again in {:.0?} \
                             (restart {attempt} of at most {} in a row)",
                            node.name,
                            at.saturating_duration_since(now),
                            self.restarts.attempts_max
                        ),
                        _ => format!(
                            "{} stopped: {reason}{log}; it failed {} times in a row, so it \
                             stays stopped while the rest of the network serves (Ctrl-C and \
                             `weft network up` again to retry)",
                            node.name, self.restarts.attempts_max
                        ),
                    });
                }
                NodeState::Waiting { at, attempt } if at <= now => match node.respawn() {
                    Ok(()) => {
                        *state = self.restarts.restarted(attempt, now);
                        events.push(format!("{} started again", node.name));
                    }
                    Err(error) => {
                        // As if it had exited at once.
                        *state = self
                            .restarts
                            .exited(self.restarts.restarted(attempt, now), now);
                        events.push(format!("{} could not be started: {error:#}", node.name));
                    }
                },
                NodeState::Waiting { .. } | NodeState::GivenUp { .. } => {}
            }
        }
        events
    }

    /// Restarts nodes that exit under `policy` from now on.
    pub fn set_restart_policy(&mut self, policy: RestartPolicy) {
        self.restarts = policy;
    }

    /// The nodes, in start order: name, role and operations endpoint.
    pub fn nodes(&self) -> impl Iterator<Item = (&str, Role, std::net::SocketAddr)> {
        self.nodes
            .iter()
            .map(|node| (node.name.as_str(), node.role, node.operations))
    }

    /// Sends `signal` (KILL, STOP, CONT) to the process of node `name`;
    /// false if there is no such running process.
    pub fn signal(&self, name: &str, signal: &str) -> bool {
        self.nodes
            .iter()
            .find(|node| node.name == name)
            .is_some_and(|node| node.signal(signal))
    }

    /// Whether node `name` runs (it has not exited, or was started again).
    pub fn is_running(&self, name: &str) -> bool {
        self.nodes
            .iter()
            .zip(&self.states)
            .any(|(node, state)| node.name == name && matches!(state, NodeState::Running { .. }))
    }

    /// Stops the peers (all at once), then the orderers.
    pub fn stop(&mut self) -> Result<()> {
        let mut first_error = None;
        for role in [Role::Peer, Role::Orderer] {
            let (stopping, running): (Vec<_>, Vec<_>) =
                self.nodes.drain(..).partition(|node| node.role == role);
            self.nodes = running;
            stopping.iter().for_each(RunningNode::request_stop);
            for mut node in stopping {
                if let Err(error) = node.stop() {
                    tracing::warn!("{error:#}");
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Generates a network's files into a temporary folder beside `dir`, then
/// renames it to `dir`.
fn create(dir: &Path, plan: &Plan) -> Result<()> {
    plan.check()?;
    if dir.exists() {
        let empty = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_none();
        if !empty {
            bail!(
                "{} exists and holds no {PLAN_FILE}: name a new or empty directory",
                dir.display()
            );
        }
        std::fs::remove_dir(dir).with_context(|| format!("replacing {}", dir.display()))?;
    }
    let parent = match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".weft-network-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a folder in {}", parent.display()))?;
    let root = staging.path();
    let crypto_config = root.join("crypto.yaml");
    std::fs::write(&crypto_config, plan.crypto_yaml())?;
    crate::cryptogen::generate(&crypto_config, &root.join("crypto"))?;
    let channel_config = root.join("channel.yaml");
    std::fs::write(&channel_config, plan.channel_yaml()?)?;
    for (index, channel) in plan.channel_names().into_iter().enumerate() {
        let profile = plan.channel_profile(index);
        let genesis = crate::channel::genesis_block(&channel_config, Some(profile), &channel)?;
        std::fs::write(
            root.join(format!("{channel}.block")),
            genesis.encode_to_vec(),
        )?;
    }
    for orderer in plan.orderer_nodes()? {
        write_node_config(
            root,
            &orderer.name,
            "orderer.yaml",
            &plan.orderer_yaml(&orderer),
        )?;
    }
    for peer in plan.peer_nodes()? {
        write_node_config(root, &peer.name, "peer.yaml", &plan.peer_yaml(&peer)?)?;
    }
    plan.save(&root.join(PLAN_FILE))?;
    let staged = staging.keep();
    std::fs::rename(&staged, dir)
        .with_context(|| format!("moving {} to {}", staged.display(), dir.display()))?;
    Ok(())
}

fn write_node_config(root: &Path, name: &str, file: &str, text: &str) -> Result<()> {
    let folder = root.join(name);
    std::fs::create_dir_all(&folder)?;
    std::fs::write(folder.join(file), text)?;
    Ok(())
}
