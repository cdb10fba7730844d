//! `weft bench`: a load generator that is itself a Fabric client.
//!
//! For every transaction it signs a proposal, collects endorsements from
//! the peers of the organisations the endorsement policy needs
//! (`protos.Endorser/ProcessProposal`), assembles and signs the
//! transaction, broadcasts it (`orderer.AtomicBroadcast/Broadcast`) and
//! waits for the commit events of the peers (`protos.Deliver/
//! DeliverFiltered`). It runs against the network of a connection file
//! (`--connect`, as written by `weft network up`) or starts one of its own.
//!
//! Load is a closed loop (`--clients` clients, each with one transaction
//! in flight; a client's next transaction is proposed once every watched
//! peer has committed the last, so it simulates on current state) or an
//! open loop (`--rate` arrivals per second, at most `--clients` in flight;
//! an arrival that finds every client busy is counted as dropped).
//!
//! The workloads are the papers': Thakkar's 1w/3w/5w and 1rw/3rw/5rw with
//! 20-byte values, FastFabric's transfer at 2.9 KB per transaction,
//! StreamChain's 10% read / 90% insert of 1 KB values and 50% read / 50%
//! update over a small key space (for goodput), and Caliper's smallbank.
//!
//! Measured over `--duration`: transactions whose first commit event
//! arrived in the window. Reported as a Markdown table, optionally JSON,
//! and a last line scripts read (see [`super::summary_line`]).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use weft_msp::Signer;
use weft_protos::broadcast_line::BroadcastLine;
use weft_protos::common::{Envelope, Status};
use weft_protos::dial::Connection;
use weft_protos::gateway::gateway_client::GatewayClient;
use weft_protos::gateway::{
    CommitStatusRequest, EndorseRequest, SignedCommitStatusRequest, SubmitRequest,
};
use weft_protos::protos::endorser_client::EndorserClient;
use weft_protos::protos::{SignedProposal, TxValidationCode};
use weft_protos::tx::{Invocation, Proposal};

use super::{quantile, summary_line};
use crate::client::{follow_headers, next_block, next_block_number, subscribe};
use crate::network::CommitStatus;
use crate::network::connection::ConnectionFile;

/// The failure of a transaction given up on after `--tx-timeout`.
const UNCONFIRMED: &str = "unconfirmed: no commit event within --tx-timeout";
/// How often the progress line is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// Keys created per transaction when a key space is prepared.
const PREPARE_KEYS_PER_TX: u64 = 100;

/// The workloads of the papers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// FastFabric: move money between two accounts, 2.9 KB transactions.
    #[value(name = "transfer")]
    Transfer,
    /// Thakkar: write 1 new key (20-byte value).
    #[value(name = "1w")]
    Write1,
    /// Thakkar: write 3 new keys.
    #[value(name = "3w")]
    Write3,
    /// Thakkar: write 5 new keys.
    #[value(name = "5w")]
    Write5,
    /// Thakkar: read and write 1 key of the client's own.
    #[value(name = "1rw")]
    ReadWrite1,
    /// Thakkar: read and write 3 keys.
    #[value(name = "3rw")]
    ReadWrite3,
    /// Thakkar: read and write 5 keys.
    #[value(name = "5rw")]
    ReadWrite5,
    /// StreamChain: 10% reads of a key, 90% inserts of 1 KB values.
    #[value(name = "read-insert")]
    ReadInsert,
    /// StreamChain's goodput experiment: 50% reads, 50% updates of keys
    /// drawn from `--keys` shared keys (conflicts grow as keys shrink).
    #[value(name = "read-update")]
    ReadUpdate,
    /// Caliper's smallbank: random deposits, checks, savings transactions,
    /// payments and queries on each client's two customers.
    #[value(name = "smallbank")]
    Smallbank,
}

impl Workload {
    fn chaincode(self) -> &'static str {
        match self {
            Self::Transfer => "transfer",
            Self::Smallbank => "smallbank",
            _ => "kv",
        }
    }

    /// The name `--workload` takes.
    fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default()
    }
}

/// Options of `weft bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Run against the network of this connection file (as `weft network
    /// up` writes). Without it, the bench starts a network of its own.
    #[arg(long)]
    pub connect: Option<PathBuf>,
    /// What the transactions do.
    #[arg(long, value_enum, default_value_t = Workload::Transfer)]
    pub workload: Workload,
    /// How long to measure (Go notation: 10s, 1m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Closed loop: clients, each with one transaction in flight. Open
    /// loop: transactions in flight at most.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Open loop: transactions offered per second; a list (500,1000,2000)
    /// measures each rate in turn. Without it, the loop is closed.
    #[arg(long = "rate", value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// read-update: the number of shared keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// transfer: a memo each transfer carries, in bytes, to make
    /// transactions larger (without one they are about 3 KB, FastFabric's
    /// 2.9 KB: the client's and endorser's certificates dominate).
    #[arg(long, default_value_t = 0)]
    pub memo_bytes: usize,
    /// Also ask the creator's peer's Gateway for each transaction's status
    /// (`CommitStatus`, as Fabric's Gateway clients do) and report that
    /// latency beside the commit events'. Against peers whose Gateway
    /// reports at applied (`--commit-status applied`), it is a stream
    /// channel's applied latency, the commit events' its durable one. On
    /// with --commit-status applied.
    #[arg(long)]
    pub gateway_commit_status: bool,
    /// Give up on a transaction not committed this long after its proposal
    /// (Go notation): it counts as unconfirmed, and the run still ends
    /// with its results.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub tx_timeout: Duration,
    /// Shape the client as Fabric's common load tools do (tape): this many
    /// gRPC connections to each endorsing peer, each with a Broadcast
    /// stream of its own (connection k to orderer k mod orderers), client
    /// i on connection i mod N. Without it, every client shares one
    /// connection per peer and one Broadcast stream per orderer.
    #[arg(long)]
    pub connections: Option<usize>,
    /// The Fabric client API the clients use: `direct` asks each
    /// endorsing peer's Endorser and broadcasts to the orderers on the
    /// bench's own streams (as tape and Fabric's older SDKs do); `gateway`
    /// sends each transaction through the Gateway of the creator's peer
    /// (`Endorse`, naming the organisations that endorse, then `Submit`),
    /// as Fabric's Gateway client libraries do.
    #[arg(long, default_value = "direct", value_parser = ["direct", "gateway"])]
    pub api: String,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write one line per transaction committed in the measured window to
    /// this file (CSV, with a header): when its proposal started, the
    /// time of each phase in milliseconds, its block and its validation
    /// code. Percentiles say how long the tail is; this says when it
    /// happened and in which phase. A sweep writes every run's, numbered.
    #[arg(long)]
    pub transactions: Option<PathBuf>,
    /// The network the bench starts: refused with --connect, whose
    /// network is already made (except --channels).
    #[command(flatten)]
    pub network: OwnNetworkArgs,
}

/// The network `weft bench` starts when no connection file is given.
#[derive(Debug, Clone, clap::Args)]
#[command(
    next_help_heading = "The network the bench starts (not with --connect, except --channels)"
)]
pub struct OwnNetworkArgs {
    /// Orderers (3: a Raft cluster; 1: solo).
    #[arg(long, default_value_t = 3, conflicts_with = "connect")]
    pub orderers: usize,
    /// Peer organisations.
    #[arg(long, default_value_t = 2, conflicts_with = "connect")]
    pub orgs: usize,
    /// The chaincodes' endorsement policy [default: any one organisation].
    #[arg(long, conflicts_with = "connect")]
    pub policy: Option<String>,
    /// Channels: with --connect, the first N of the connection file's
    /// [default: all]; otherwise the channels of the network the bench
    /// starts [default: 1]. Client i transacts on channel i mod N.
    #[arg(long)]
    pub channels: Option<usize>,
    /// Transactions per block at most [default: 500]; a list (10,100,500)
    /// starts a network for each and measures every rate on each.
    #[arg(long = "block-size", value_delimiter = ',', conflicts_with = "connect")]
    pub block_sizes: Vec<u32>,
    /// How long the orderers wait to fill a block.
    #[arg(long, default_value = "10ms", conflicts_with = "connect")]
    pub batch_timeout: String,
    #[command(flatten)]
    pub stream: crate::network::StreamArgs,
    #[command(flatten)]
    pub consensus: crate::network::ConsensusArgs,
    /// Keep the network in this directory instead of a temporary one.
    #[arg(long, conflicts_with = "connect")]
    pub dir: Option<PathBuf>,
    /// Every endpoint of the network serves TLS, and the bench dials it
    /// over TLS.
    #[arg(long, conflicts_with = "connect")]
    pub tls: bool,
    /// Like --tls, and every node asks its clients for a TLS certificate
    /// (mutual TLS); the bench presents one and binds its requests to it.
    #[arg(long, conflicts_with = "connect")]
    pub mutual_tls: bool,
}

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    weft_protos::duration::parse_go_duration(text).map_err(|e| e.to_string())
}

/// Runs the bench and prints what it measured: one measurement, or one
/// per block size and rate of a sweep, then a table of them all.
pub fn run(args: &LoadArgs) -> Result<()> {
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    if args.connections == Some(0) {
        bail!("--connections must be at least 1");
    }
    if args
        .rates
        .iter()
        .any(|rate| !(*rate > 0.0 && rate.is_finite()))
    {
        bail!("--rate must be a positive number of transactions per second");
    }
    if args.workload == Workload::ReadUpdate && args.keys == 0 {
        bail!("--keys must be at least 1");
    }
    if args.connect.is_some() && args.network.stream.stream {
        bail!(
            "--stream shapes the network the bench starts; with --connect the network's own \
             channel config decides (weft network up --stream)"
        );
    }
    let rates: Vec<Option<f64>> = if args.rates.is_empty() {
        vec![None]
    } else {
        args.rates.iter().copied().map(Some).collect()
    };
    let work_dir = super::WorkDir::new(args.network.dir.as_deref())?;
    let mut runs = Vec::new();
    match &args.connect {
        Some(path) => {
            let connection = ConnectionFile::load(path)?;
            for rate in &rates {
                runs.push(measure(args, *rate, &connection, None)?);
            }
        }
        None => {
            let block_sizes = match args.network.block_sizes.as_slice() {
                [] => vec![DEFAULT_BLOCK_SIZE],
                sizes => sizes.to_vec(),
            };
            for &block_size in &block_sizes {
                // A sweep gives each block size a network of its own.
                let folder = match block_sizes.len() {
                    1 => "network".to_owned(),
                    _ => format!("network-block-size-{block_size}"),
                };
                let mut network =
                    start_network(&args.network, block_size, &work_dir.path().join(folder))?;
                let connection = ConnectionFile::load(&network.connection_file())?;
                let measured: Result<Vec<Results>> = rates
                    .iter()
                    .map(|rate| measure(args, *rate, &connection, Some(block_size)))
                    .collect();
                network.stop()?;
                runs.extend(measured?);
            }
        }
    }
    if let Some(path) = &args.transactions {
        write_transactions(path, &runs)?;
    }
    match runs.as_slice() {
        [one] => super::write_json(args.json.as_deref(), one)?,
        all => {
            print!("{}", sweep_markdown(all));
            super::write_json(args.json.as_deref(), &all)?;
        }
    }
    if let Some(last) = runs.last() {
        // Scripts read the last line: the last measurement's.
        println!("{}", last.summary());
    }
    if runs.iter().any(|run| run.committed == 0) {
        bail!("no transaction committed");
    }
    Ok(())
}

/// `--transactions`: the timeline of each transaction of the window, in
/// the order their proposals started.
fn transaction_rows(
    in_window: &[&TxRecord],
    ordered_at: &HashMap<(usize, u64), Instant>,
    started: Instant,
    channels: &[String],
) -> Vec<TransactionRow> {
    let mut rows: Vec<TransactionRow> = in_window
        .iter()
        .map(|r| {
            // Within the order-and-commit span, so the phases add up.
            let ordered = ordered_at
                .get(&(r.channel, r.block))
                .map(|at| (*at).clamp(r.acknowledged_at, r.committed_at.max(r.acknowledged_at)));
            let proposed = r.acknowledged_at.checked_sub(r.broadcast + r.endorse);
            TransactionRow {
                started: proposed
                    .map_or(Duration::ZERO, |at| at.saturating_duration_since(started)),
                endorse: r.endorse,
                broadcast: r.broadcast,
                ordering: ordered.map(|at| at.saturating_duration_since(r.acknowledged_at)),
                commit: ordered.map(|at| r.committed_at.saturating_duration_since(at)),
                latency: r.latency(),
                channel: channels.get(r.channel).cloned().unwrap_or_default(),
                block: r.block,
                code: code_name(r.code),
            }
        })
        .collect();
    rows.sort_by_key(|row| row.started);
    rows
}

/// `--transactions`: every run's transactions, one CSV line each.
fn write_transactions(path: &Path, runs: &[Results]) -> Result<()> {
    let mut text = String::from(
        "run,started_s,endorse_ms,broadcast_ms,ordering_ms,commit_ms,latency_ms,channel,block,code\n",
    );
    let ms = |duration: Duration| format!("{:.3}", duration.as_secs_f64() * 1000.0);
    for (run, results) in runs.iter().enumerate() {
        for row in &results.transactions {
            text.push_str(&format!(
                "{run},{:.6},{},{},{},{},{},{},{},{}\n",
                row.started.as_secs_f64(),
                ms(row.endorse),
                ms(row.broadcast),
                row.ordering.map(ms).unwrap_or_default(),
                row.commit.map(ms).unwrap_or_default(),
                ms(row.latency),
                row.channel,
                row.block,
                row.code,
            ));
        }
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The client's async workers: half the machine's cores, at least one.
/// The client shares the machine with the network it measures, when that
/// runs here; every worker beyond what its load needs only wakes the
/// others to steal tasks (on two cores, two workers cost the client 0.52
/// ms of CPU per transaction at 500 tx/s against 0.45 with one, and
/// ordered no more at full load: docs/benchmarks.md, eighth slice).
fn client_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (cores / 2).max(1)
}

/// Block size of the network the bench starts, unless told.
const DEFAULT_BLOCK_SIZE: u32 = 500;

/// One measurement at `rate` (closed loop without one); prints its
/// table.
fn measure(
    args: &LoadArgs,
    rate: Option<f64>,
    connection: &ConnectionFile,
    block_size: Option<u32>,
) -> Result<Results> {
    super::settle_page_cache();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_workers())
        .enable_all()
        .build()?;
    // Ctrl-C ends the measurement with an error, so that the caller stops
    // the network the bench started instead of leaving its nodes behind.
    let mut results = runtime.block_on(async {
        tokio::select! {
            results = drive(args, rate, connection) => results,
            () = crate::network::interrupted() => bail!("interrupted"),
        }
    })?;
    results.block_size = block_size;
    print!("{}", results.markdown());
    Ok(results)
}

/// The measurements of a sweep, one row each.
fn sweep_markdown(runs: &[Results]) -> String {
    let mut text = String::from(
        "\n| block size | offered (tx/s) | committed (tx/s) | goodput (tx/s) | p50 / p95 / p99 (ms) | server CPU per tx (ms) |\n\
         |---|---|---|---|---|---|\n",
    );
    for run in runs {
        text.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.1} / {:.1} / {:.1} | {:.3} |\n",
            run.block_size
                .map_or("the network's".to_owned(), |size| size.to_string()),
            run.offered_rate
                .map_or("closed loop".to_owned(), |rate| format!("{rate}")),
            run.throughput,
            run.goodput,
            run.latency_ms.p50,
            run.latency_ms.p95,
            run.latency_ms.p99,
            run.server_cpu_ms_per_tx,
        ));
    }
    text.push('\n');
    text
}

fn start_network(
    options: &OwnNetworkArgs,
    block_size: u32,
    dir: &std::path::Path,
) -> Result<crate::network::Network> {
    let mut up = crate::network::UpArgs {
        dir: dir.to_owned(),
        orderers: Some(options.orderers),
        orgs: Some(options.orgs),
        channels: options.channels,
        policy: options.policy.clone(),
        block_size: Some(block_size),
        batch_timeout: Some(options.batch_timeout.clone()),
        stream: options.stream.clone(),
        consensus: options.consensus.clone(),
        tls: options.tls,
        mutual_tls: options.mutual_tls,
        ..crate::network::UpArgs::default()
    };
    if !up.dir.join("network.yaml").exists() {
        up.base_port = Some(crate::network::free_base_port(&up)?);
    }
    let network = crate::network::Network::up(&up)?;
    println!(
        "network ready in {} ({} orderers, {} organisations)",
        network.dir.display(),
        network.plan.orderers,
        network.plan.organisations
    );
    Ok(network)
}

/// An organisation as the bench uses it.
struct Org {
    msp_id: String,
    user: Arc<Signer>,
    /// The client's connections to the organisation's peer.
    links: Vec<PeerLink>,
    peer: SocketAddr,
}

/// One gRPC connection to a peer.
struct PeerLink {
    endorser: EndorserClient<Connection>,
    gateway: GatewayClient<Connection>,
}

impl Org {
    /// The connection client slot `slot` uses.
    fn link(&self, slot: usize) -> &PeerLink {
        &self.links[slot % self.links.len()]
    }
}

/// A transaction waiting for its commit events.
struct Awaited {
    peers_left: usize,
    first: Option<Commit>,
    done: Option<oneshot::Sender<Commit>>,
}

/// A transaction's first commit event.
#[derive(Debug, Clone, Copy)]
struct Commit {
    at: Instant,
    code: i32,
    block: u64,
}

/// Commit events of every watched peer, routed to the transactions that
/// wait for them.
#[derive(Default)]
struct CommitRouter {
    waiting: std::sync::Mutex<HashMap<String, Awaited>>,
}

impl CommitRouter {
    fn expect(&self, tx_id: &str, peers: usize) -> oneshot::Receiver<Commit> {
        let (done, committed) = oneshot::channel();
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.insert(
                tx_id.to_owned(),
                Awaited {
                    peers_left: peers,
                    first: None,
                    done: Some(done),
                },
            );
        }
        committed
    }

    fn forget(&self, tx_id: &str) {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.remove(tx_id);
        }
    }

    fn committed(&self, tx_id: &str, commit: Commit) {
        let Ok(mut waiting) = self.waiting.lock() else {
            return;
        };
        let Some(awaited) = waiting.get_mut(tx_id) else {
            return;
        };
        awaited.first.get_or_insert(commit);
        awaited.peers_left = awaited.peers_left.saturating_sub(1);
        if awaited.peers_left == 0
            && let Some(mut awaited) = waiting.remove(tx_id)
            && let (Some(done), Some(first)) = (awaited.done.take(), awaited.first)
        {
            let _ = done.send(first);
        }
    }
}

/// What happened to one transaction.
#[derive(Debug, Clone)]
struct TxRecord {
    endorse: Duration,
    broadcast: Duration,
    acknowledged_at: Instant,
    committed_at: Instant,
    code: i32,
    bytes: usize,
    /// Index of its channel in the client's channels.
    channel: usize,
    block: u64,
    /// When its Gateway `CommitStatus` answered, if asked.
    status_at: Option<Instant>,
}

impl TxRecord {
    /// From the orderer's acknowledgement to the first commit event.
    fn order_and_commit(&self) -> Duration {
        self.committed_at
            .saturating_duration_since(self.acknowledged_at)
    }

    /// From the proposal to the first commit event.
    fn latency(&self) -> Duration {
        self.endorse + self.broadcast + self.order_and_commit()
    }
}

/// When each block (channel index, number) left the orderer the bench
/// follows: where ordering ends and commit begins.
type OrderedAt = std::sync::Mutex<HashMap<(usize, u64), Instant>>;

/// Everything a transaction needs, shared by all clients.
struct Client {
    /// Slot `i` transacts on channel `i mod n`.
    channels: Vec<String>,
    chaincode: &'static str,
    orgs: Vec<Org>,
    /// For each client slot, the organisations (indices) that endorse.
    plans: Vec<Vec<usize>>,
    /// Slot `i` broadcasts on stream `i mod n`.
    broadcasters: Vec<Arc<BroadcastLine>>,
    router: Arc<CommitRouter>,
    watched_peers: usize,
    /// Whether transactions go through the creator's peer's Gateway
    /// (`Endorse`, `Submit`) instead of the endorsers and a Broadcast
    /// stream of the bench's.
    through_gateway: bool,
    /// Whether each transaction also waits for its Gateway `CommitStatus`.
    ask_commit_status: bool,
    /// How long a transaction may take from proposal to commit.
    tx_timeout: Duration,
}

impl Client {
    /// [`Client::transact`], given up after `tx_timeout`: the transaction
    /// is then unconfirmed. (Should its commit event come later, its
    /// router entry finds no one waiting.)
    async fn transact_within(&self, slot: usize, args: Vec<Bytes>) -> Result<TxRecord, String> {
        tokio::time::timeout(self.tx_timeout, self.transact(slot, args))
            .await
            .unwrap_or_else(|_| Err(UNCONFIRMED.to_owned()))
    }

    /// Proposes, endorses, broadcasts and waits for the commit of one
    /// transaction of slot `slot`.
    async fn transact(&self, slot: usize, args: Vec<Bytes>) -> Result<TxRecord, String> {
        let plan = &self.plans[slot % self.plans.len()];
        let creator: &Signer = &self.orgs[plan[0]].user;
        let started = Instant::now();
        let invocation = Invocation {
            channel_id: &self.channels[slot % self.channels.len()],
            chaincode: self.chaincode,
            args,
            nonce: creator.new_nonce().map_err(|e| e.to_string())?,
            timestamp_seconds: weft_msp::now(),
        };
        let proposal = Proposal::new(&invocation, creator.serialized_identity().clone());
        let signed = proposal.signed(creator).map_err(|e| e.to_string())?;
        let envelope = if self.through_gateway {
            self.endorse_through_gateway(slot, plan, &proposal, signed, invocation.channel_id)
                .await?
        } else {
            self.endorse(slot, plan, &proposal, signed).await?
        };
        let bytes = prost::Message::encoded_len(&envelope);
        let endorsed = Instant::now();
        let committed = self.router.expect(&proposal.tx_id, self.watched_peers);
        let status = if self.through_gateway {
            let request = SubmitRequest {
                transaction_id: proposal.tx_id.clone(),
                channel_id: invocation.channel_id.to_owned(),
                prepared_transaction: Some(envelope),
            };
            let mut gateway = self.orgs[plan[0]].link(slot).gateway.clone();
            // The Gateway answers an orderer's refusal as an error, and
            // success as SUCCESS's empty answer.
            gateway
                .submit(request)
                .await
                .map(|_| (Status::Success as i32, String::new()))
                .map_err(|e| format!("Submit: {}", e.message()))
        } else {
            self.broadcasters[slot % self.broadcasters.len()]
                .broadcast(envelope)
                .await
                .map(|answer| (answer.status, answer.info))
                .map_err(|ended| format!("Broadcast: {}", ended.message()))
        };
        let (status, info) = match status {
            Ok(answer) => answer,
            Err(error) => {
                self.router.forget(&proposal.tx_id);
                return Err(error);
            }
        };
        if status != Status::Success as i32 {
            self.router.forget(&proposal.tx_id);
            let name = Status::try_from(status).map_or("an unknown status", |s| s.as_str_name());
            return Err(format!("the orderer answered {name}: {info}"));
        }
        let acknowledged_at = Instant::now();
        let status_answer = if self.ask_commit_status {
            let request =
                signed_commit_status_request(&proposal.tx_id, invocation.channel_id, creator)?;
            let mut gateway = self.orgs[plan[0]].link(slot).gateway.clone();
            Some(tokio::spawn(async move {
                let answer = gateway.commit_status(request).await;
                (Instant::now(), answer)
            }))
        } else {
            None
        };
        let commit = committed
            .await
            .map_err(|_| "the commit event streams ended".to_owned())?;
        let status_at = match status_answer {
            None => None,
            Some(answer) => {
                let (at, answer) = answer.await.map_err(|e| e.to_string())?;
                let answer = answer.map_err(|e| format!("CommitStatus: {}", e.message()))?;
                if answer.into_inner().result != commit.code {
                    return Err("CommitStatus and the commit events disagree".to_owned());
                }
                Some(at)
            }
        };
        Ok(TxRecord {
            endorse: endorsed - started,
            broadcast: acknowledged_at - endorsed,
            acknowledged_at,
            committed_at: commit.at,
            code: commit.code,
            bytes,
            channel: slot % self.channels.len(),
            block: commit.block,
            status_at,
        })
    }
}

impl Client {
    /// Asks each organisation of `plan` to endorse `signed` (at the peer
    /// of slot `slot`'s connection), side by side; the transaction their
    /// endorsements make, signed by the creator.
    async fn endorse(
        &self,
        slot: usize,
        plan: &[usize],
        proposal: &Proposal,
        signed: SignedProposal,
    ) -> Result<Envelope, String> {
        let endorsements = plan.iter().map(|&org| {
            let mut endorser = self.orgs[org].link(slot).endorser.clone();
            let signed = signed.clone();
            async move { endorser.process_proposal(signed).await }
        });
        let mut responses = Vec::with_capacity(plan.len());
        for response in endorse_side_by_side(endorsements).await {
            let response = response.map_err(|e| e.message().to_owned())?.into_inner();
            let status = response.response.as_ref().map_or(0, |r| r.status);
            if status != 200 {
                let message = response.response.map(|r| r.message).unwrap_or_default();
                return Err(format!("endorsement refused ({status}): {message}"));
            }
            responses.push(response);
        }
        proposal
            .transaction(&responses, self.orgs[plan[0]].user.as_ref())
            .map_err(|e| e.to_string())
    }

    /// Has the creator's peer's Gateway endorse `signed` at the
    /// organisations of `plan`; the prepared transaction, signed by the
    /// creator, as a Fabric Gateway client signs it.
    async fn endorse_through_gateway(
        &self,
        slot: usize,
        plan: &[usize],
        proposal: &Proposal,
        signed: SignedProposal,
        channel_id: &str,
    ) -> Result<Envelope, String> {
        let creator = &self.orgs[plan[0]];
        let request = EndorseRequest {
            transaction_id: proposal.tx_id.clone(),
            channel_id: channel_id.to_owned(),
            proposed_transaction: Some(signed),
            endorsing_organizations: plan
                .iter()
                .map(|&org| self.orgs[org].msp_id.clone())
                .collect(),
        };
        let prepared = creator
            .link(slot)
            .gateway
            .clone()
            .endorse(request)
            .await
            .map_err(|e| format!("Endorse: {}", e.message()))?
            .into_inner()
            .prepared_transaction
            .ok_or("Endorse: no prepared transaction")?;
        let signature = creator
            .user
            .sign(&prepared.payload)
            .map_err(|e| e.to_string())?;
        Ok(Envelope {
            payload: prepared.payload,
            signature: signature.into(),
        })
    }
}

/// A `CommitStatus` request for `tx_id`, signed by its creator.
pub(crate) fn signed_commit_status_request(
    tx_id: &str,
    channel_id: &str,
    creator: &Signer,
) -> Result<SignedCommitStatusRequest, String> {
    let request = CommitStatusRequest {
        channel_id: channel_id.to_owned(),
        transaction_id: tx_id.to_owned(),
        identity: creator.serialized_identity().clone(),
    };
    let request = prost::Message::encode_to_vec(&request);
    let signature = creator.sign(&request).map_err(|e| e.to_string())?;
    Ok(SignedCommitStatusRequest {
        request: request.into(),
        signature: signature.into(),
    })
}

/// Runs the endorsement requests of one transaction side by side.
async fn endorse_side_by_side<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        if let Ok(output) = handle.await {
            outputs.push(output);
        }
    }
    outputs
}

/// The transactions of one client slot.
struct SlotWorkload {
    workload: Workload,
    run_id: String,
    slot: usize,
    keys: u64,
    memo: Bytes,
    sequence: u64,
    random: u64,
}

/// A 20-byte value (Thakkar's).
const VALUE_20: &[u8; 20] = b"weft-value-20-bytes!";

impl SlotWorkload {
    fn new(workload: Workload, run_id: &str, slot: usize, keys: u64, memo_bytes: usize) -> Self {
        Self {
            workload,
            run_id: run_id.to_owned(),
            slot,
            keys,
            memo: Bytes::from(vec![b'm'; memo_bytes]),
            sequence: 0,
            random: 0x9E37_79B9_7F4A_7C15 ^ (slot as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9),
        }
    }

    /// splitmix64: reproducible choices per slot.
    fn next_random(&mut self) -> u64 {
        self.random = self.random.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.random;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn key(&self, suffix: impl std::fmt::Display) -> String {
        format!("{}-{}-{suffix}", self.run_id, self.slot)
    }

    fn shared_key(&self, index: u64) -> String {
        format!("{}-shared-{index}", self.run_id)
    }

    fn customer(&self, which: u8) -> String {
        self.key(format!("c{which}"))
    }

    /// The transactions that create what this slot's transactions read.
    fn preparation(&self) -> Vec<Vec<Bytes>> {
        let args = |items: Vec<String>| items.into_iter().map(Bytes::from).collect();
        let value20 = String::from_utf8_lossy(VALUE_20).into_owned();
        match self.workload {
            Workload::Transfer => ["a", "b"]
                .iter()
                .map(|account| {
                    args(vec![
                        "create".into(),
                        self.key(account),
                        super::INITIAL_BALANCE.to_string(),
                    ])
                })
                .collect(),
            Workload::ReadWrite1 | Workload::ReadWrite3 | Workload::ReadWrite5 => {
                let mut put = vec!["put".to_owned()];
                for index in 0..self.rw_keys() {
                    put.push(self.key(format!("k{index}")));
                    put.push(value20.clone());
                }
                vec![args(put)]
            }
            Workload::ReadInsert => {
                vec![args(vec!["put".into(), self.key("read"), "r".repeat(1024)])]
            }
            // Slot 0 creates the shared key space.
            Workload::ReadUpdate if self.slot == 0 => (0..self.keys)
                .step_by(PREPARE_KEYS_PER_TX as usize)
                .map(|first| {
                    let mut put = vec!["put".to_owned()];
                    for index in first..(first + PREPARE_KEYS_PER_TX).min(self.keys) {
                        put.push(self.shared_key(index));
                        put.push(value20.clone());
                    }
                    args(put)
                })
                .collect(),
            Workload::Smallbank => (0..2)
                .map(|which| {
                    args(vec![
                        "create_account".into(),
                        self.customer(which),
                        "1000000".into(),
                        "1000000".into(),
                    ])
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn rw_keys(&self) -> usize {
        match self.workload {
            Workload::ReadWrite1 | Workload::Write1 => 1,
            Workload::ReadWrite3 | Workload::Write3 => 3,
            _ => 5,
        }
    }

    /// The arguments of the slot's next transaction.
    fn next(&mut self) -> Vec<Bytes> {
        self.sequence += 1;
        let sequence = self.sequence;
        let value20 = Bytes::from_static(VALUE_20);
        match self.workload {
            Workload::Transfer => {
                let mut args = vec![
                    Bytes::from_static(b"transfer"),
                    Bytes::from(self.key("a")),
                    Bytes::from(self.key("b")),
                    Bytes::from_static(b"1"),
                ];
                if !self.memo.is_empty() {
                    args.push(self.memo.clone());
                }
                args
            }
            Workload::Write1 | Workload::Write3 | Workload::Write5 => {
                let mut args = vec![Bytes::from_static(b"put")];
                for index in 0..self.rw_keys() {
                    args.push(Bytes::from(self.key(format!("w{sequence}-{index}"))));
                    args.push(value20.clone());
                }
                args
            }
            Workload::ReadWrite1 | Workload::ReadWrite3 | Workload::ReadWrite5 => {
                let mut args = vec![Bytes::from_static(b"update"), value20];
                for index in 0..self.rw_keys() {
                    args.push(Bytes::from(self.key(format!("k{index}"))));
                }
                args
            }
            Workload::ReadInsert => {
                if self.next_random().is_multiple_of(10) {
                    vec![Bytes::from_static(b"get"), Bytes::from(self.key("read"))]
                } else {
                    vec![
                        Bytes::from_static(b"put"),
                        Bytes::from(self.key(format!("i{sequence}"))),
                        Bytes::from(vec![b'v'; 1024]),
                    ]
                }
            }
            Workload::ReadUpdate => {
                let read = self.next_random().is_multiple_of(2);
                let index = self.next_random() % self.keys;
                let key = Bytes::from(self.shared_key(index));
                if read {
                    vec![Bytes::from_static(b"get"), key]
                } else {
                    vec![Bytes::from_static(b"update"), value20, key]
                }
            }
            Workload::Smallbank => {
                let (one, other) = (self.customer(0), self.customer(1));
                let (one, other) = if self.next_random().is_multiple_of(2) {
                    (one, other)
                } else {
                    (other, one)
                };
                // Amalgamate is left out: it empties an account, and the
                // payments from it that follow would fail (Caliper counts
                // them as failed transactions).
                let op = self.next_random() % 5;
                let text =
                    |items: &[&str]| items.iter().map(|s| Bytes::from(s.to_string())).collect();
                match op {
                    0 => text(&["deposit_checking", &one, "5"]),
                    1 => text(&["write_check", &one, "5"]),
                    2 => text(&["transact_savings", &one, "5"]),
                    3 => text(&["send_payment", &one, &other, "5"]),
                    _ => text(&["query", &one]),
                }
            }
        }
    }
}

/// Counters shared by the clients while the bench runs.
#[derive(Default)]
struct Progress {
    committed: AtomicU64,
    in_flight: AtomicU64,
}

/// Runs the workload on the network of `connection`, in open loop at
/// `rate` or else in closed loop.
async fn drive(args: &LoadArgs, rate: Option<f64>, connection: &ConnectionFile) -> Result<Results> {
    let dialer = connection.dialer()?;
    let connections = args.connections.unwrap_or(1);
    let mut orgs = Vec::new();
    for organization in &connection.organizations {
        let user = Arc::new(
            organization
                .user
                .signer(&organization.msp_id)
                .with_context(|| format!("the user of {}", organization.name))?,
        );
        let peer = organization.peers[0].address()?;
        let mut links = Vec::new();
        for _ in 0..connections {
            let link = weft_protos::dial::ending_with_last_message(dialer.connect(peer).await?);
            links.push(PeerLink {
                endorser: EndorserClient::new(link.clone()),
                gateway: GatewayClient::new(link),
            });
        }
        orgs.push(Org {
            msp_id: organization.msp_id.clone(),
            user,
            links,
            peer,
        });
    }
    let plans = endorsement_plans(connection, &orgs, args.clients)?;
    let channels = bench_channels(args, connection)?;
    let router = Arc::new(CommitRouter::default());
    for org in &orgs {
        for channel in &channels {
            let mut stream = subscribe(&dialer, org.peer, channel, &org.user).await?;
            let router = router.clone();
            tokio::spawn(async move {
                while let Ok(block) = next_block(&mut stream).await {
                    let at = Instant::now();
                    for tx in &block.filtered_transactions {
                        let commit = Commit {
                            at,
                            code: tx.tx_validation_code,
                            block: block.number,
                        };
                        router.committed(&tx.txid, commit);
                    }
                }
            });
        }
    }
    // Block headers from the first orderer, to split ordering from commit.
    let ordered_at = Arc::new(OrderedAt::default());
    let orderers = connection.orderer_addresses()?;
    let first_orderer = *orderers
        .first()
        .context("the connection file lists no orderer")?;
    for (index, channel) in channels.iter().enumerate() {
        let mut stream = follow_headers(&dialer, first_orderer, channel, &orgs[0].user).await?;
        let ordered_at = ordered_at.clone();
        tokio::spawn(async move {
            while let Ok(number) = next_block_number(&mut stream).await {
                if let Ok(mut ordered_at) = ordered_at.lock() {
                    ordered_at.insert((index, number), Instant::now());
                }
            }
        });
    }
    // One stream per orderer, or one per connection in the load tools'
    // shape; none when the Gateway submits.
    let streams = if args.api == "gateway" {
        0
    } else {
        args.connections.unwrap_or(orderers.len())
    };
    let mut broadcasters = Vec::new();
    for &orderer in orderers.iter().cycle().take(streams) {
        let line = BroadcastLine::open_accepted(dialer.connect(orderer).await?)
            .await
            .map_err(|refused| {
                anyhow!(
                    "{orderer} refused the Broadcast stream: {}",
                    refused.message()
                )
            })?;
        broadcasters.push(line);
    }
    let client = Arc::new(Client {
        channels,
        chaincode: args.workload.chaincode(),
        watched_peers: orgs.len(),
        orgs,
        plans,
        broadcasters,
        router,
        through_gateway: args.api == "gateway",
        ask_commit_status: args.gateway_commit_status
            || args.network.stream.commit_status == Some(CommitStatus::Applied),
        tx_timeout: args.tx_timeout,
    });
    let run_id = hex::encode(&client.orgs[0].user.new_nonce()?[..4]);
    let slots: Vec<SlotWorkload> = (0..args.clients)
        .map(|slot| SlotWorkload::new(args.workload, &run_id, slot, args.keys, args.memo_bytes))
        .collect();
    println!(
        "weft bench: workload {}, {}, {} {}, {} organisations, {} orderers; {}",
        args.workload.name(),
        match rate {
            Some(rate) => format!(
                "open loop at {rate} tx/s, at most {} in flight",
                args.clients
            ),
            None => format!("closed loop with {} clients", args.clients),
        },
        if client.channels.len() == 1 {
            "channel"
        } else {
            "channels"
        },
        client.channels.join(", "),
        client.orgs.len(),
        orderers.len(),
        client_shape(args),
    );
    prepare(&client, &slots).await?;

    let before = scrape(connection);
    let client_cpu_before = own_cpu_seconds();
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let deadline = started + args.duration;
    let reporter = tokio::spawn(report_progress(progress.clone(), started, deadline));
    let (records, failures, dropped) = match rate {
        None => closed_loop(&client, slots, deadline, &progress).await,
        Some(rate) => open_loop(&client, slots, deadline, rate, &progress).await,
    };
    reporter.abort();
    let after = scrape(connection);
    let client_cpu = own_cpu_seconds() - client_cpu_before;
    Ok(Results::new(
        args,
        rate,
        connection,
        &client.channels,
        &records,
        started,
        failures,
        dropped,
        &before,
        &after,
        client_cpu,
        &ordered_at.lock().map(|map| map.clone()).unwrap_or_default(),
    ))
}

/// How the bench's clients reach the network, for reports.
fn client_shape(args: &LoadArgs) -> String {
    let plural = |count: usize| if count == 1 { "" } else { "s" };
    match (args.connections, args.api == "gateway") {
        (None, false) => "one connection per peer, one Broadcast stream per orderer".to_owned(),
        (Some(connections), false) => format!(
            "{connections} connection{} to each peer with a Broadcast stream each",
            plural(connections)
        ),
        (connections, true) => format!(
            "{} to each peer, through the creator's peer's Gateway (Endorse, Submit)",
            connections.map_or("one connection".to_owned(), |count| format!(
                "{count} connection{}",
                plural(count)
            ))
        ),
    }
}

/// The channels the bench transacts on: the connection file's, or the
/// first `--channels` of them.
fn bench_channels(args: &LoadArgs, connection: &ConnectionFile) -> Result<Vec<String>> {
    let mut channels = connection.all_channels();
    if let Some(wanted) = args.network.channels {
        if wanted == 0 || wanted > channels.len() {
            bail!(
                "--channels {wanted}: the network has {} channel(s)",
                channels.len()
            );
        }
        channels.truncate(wanted);
    }
    Ok(channels)
}

/// For each client slot, the organisations that endorse its
/// transactions: the fewest satisfying the policy, slot `i` preferring
/// organisation `i mod n` first so that load spreads.
fn endorsement_plans(
    connection: &ConnectionFile,
    orgs: &[Org],
    clients: usize,
) -> Result<Vec<Vec<usize>>> {
    let policy = match &connection.endorsement_policy {
        Some(expression) => Some(
            weft_policy::SignaturePolicy::compile(
                "endorsement",
                &weft_policy::dsl::parse(expression)
                    .with_context(|| format!("the connection file's policy {expression:?}"))?,
            )
            .map_err(|e| anyhow!("the connection file's policy: {e}"))?,
        ),
        None => None,
    };
    (0..clients.min(orgs.len()))
        .map(|first| {
            let order: Vec<usize> = (0..orgs.len()).map(|i| (first + i) % orgs.len()).collect();
            let Some(policy) = &policy else {
                return Ok(order);
            };
            let names: Vec<String> = order.iter().map(|&i| orgs[i].msp_id.clone()).collect();
            let chosen = weft_policy::smallest_satisfying(&names, |subset| {
                let peers: Vec<weft_policy::PeerOf> =
                    subset.iter().cloned().map(weft_policy::PeerOf).collect();
                policy.is_satisfied_by(&peers)
            })
            .ok_or_else(|| {
                anyhow!("no set of the organisations satisfies the endorsement policy")
            })?;
            Ok(chosen
                .iter()
                .filter_map(|name| orgs.iter().position(|org| &org.msp_id == name))
                .collect())
        })
        .collect()
}

/// Runs every slot's preparation transactions, `clients` at a time.
async fn prepare(client: &Arc<Client>, slots: &[SlotWorkload]) -> Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    let mut prepared = 0usize;
    for slot in slots {
        let transactions = slot.preparation();
        if transactions.is_empty() {
            continue;
        }
        let client = client.clone();
        let index = slot.slot;
        tasks.spawn(async move {
            for args in transactions {
                let record = client.transact_within(index, args).await?;
                if record.code != TxValidationCode::Valid as i32 {
                    return Err(format!("committed as {}", code_name(record.code)));
                }
            }
            Ok::<(), String>(())
        });
        prepared += 1;
    }
    while let Some(outcome) = tasks.join_next().await {
        outcome
            .map_err(|e| anyhow!("a preparation task failed: {e}"))?
            .map_err(|e| anyhow!("preparing the workload's state: {e}"))?;
    }
    if prepared > 0 {
        println!("prepared the state of {prepared} clients");
    }
    Ok(())
}

type Outcome = (Vec<TxRecord>, BTreeMap<String, u64>, u64);

async fn closed_loop(
    client: &Arc<Client>,
    slots: Vec<SlotWorkload>,
    deadline: Instant,
    progress: &Arc<Progress>,
) -> Outcome {
    let mut tasks = tokio::task::JoinSet::new();
    for mut slot in slots {
        let client = client.clone();
        let progress = progress.clone();
        tasks.spawn(async move {
            let mut records = Vec::new();
            let mut failures: BTreeMap<String, u64> = BTreeMap::new();
            while Instant::now() < deadline {
                progress.in_flight.fetch_add(1, Ordering::Relaxed);
                let outcome = client.transact_within(slot.slot, slot.next()).await;
                progress.in_flight.fetch_sub(1, Ordering::Relaxed);
                match outcome {
                    Ok(record) => {
                        progress.committed.fetch_add(1, Ordering::Relaxed);
                        records.push(record);
                    }
                    Err(reason) => {
                        *failures.entry(failure_kind(&reason)).or_default() += 1;
                        tracing::debug!(%reason, "transaction failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (records, failures)
        });
    }
    let mut records = Vec::new();
    let mut failures = BTreeMap::new();
    while let Some(Ok((mine, failed))) = tasks.join_next().await {
        records.extend(mine);
        merge(&mut failures, failed);
    }
    (records, failures, 0)
}

async fn open_loop(
    client: &Arc<Client>,
    slots: Vec<SlotWorkload>,
    deadline: Instant,
    rate: f64,
    progress: &Arc<Progress>,
) -> Outcome {
    let (free_tx, mut free) = mpsc::unbounded_channel::<SlotWorkload>();
    for slot in slots {
        let _ = free_tx.send(slot);
    }
    let (done_tx, mut done) = mpsc::unbounded_channel::<Result<TxRecord, String>>();
    let interval = Duration::from_secs_f64(1.0 / rate);
    let started = Instant::now();
    let mut arrivals = 0u64;
    let mut dropped = 0u64;
    let mut records = Vec::new();
    let mut failures = BTreeMap::new();
    let mut outstanding = 0u64;
    let collect = |outcome: Result<TxRecord, String>,
                   records: &mut Vec<TxRecord>,
                   failures: &mut BTreeMap<String, u64>| match outcome {
        Ok(record) => records.push(record),
        Err(reason) => *failures.entry(failure_kind(&reason)).or_default() += 1,
    };
    while Instant::now() < deadline {
        let due = started + interval.mul_f64(arrivals as f64);
        tokio::time::sleep_until(due.into()).await;
        while let Ok(outcome) = done.try_recv() {
            outstanding -= 1;
            collect(outcome, &mut records, &mut failures);
        }
        arrivals += 1;
        let Ok(mut slot) = free.try_recv() else {
            dropped += 1;
            continue;
        };
        let client = client.clone();
        let free_tx = free_tx.clone();
        let done_tx = done_tx.clone();
        let progress = progress.clone();
        outstanding += 1;
        tokio::spawn(async move {
            progress.in_flight.fetch_add(1, Ordering::Relaxed);
            let outcome = client.transact_within(slot.slot, slot.next()).await;
            progress.in_flight.fetch_sub(1, Ordering::Relaxed);
            if outcome.is_ok() {
                progress.committed.fetch_add(1, Ordering::Relaxed);
            }
            let _ = free_tx.send(slot);
            let _ = done_tx.send(outcome);
        });
    }
    while outstanding > 0 {
        let Some(outcome) = done.recv().await else {
            break;
        };
        outstanding -= 1;
        collect(outcome, &mut records, &mut failures);
    }
    (records, failures, dropped)
}

fn merge(into: &mut BTreeMap<String, u64>, from: BTreeMap<String, u64>) {
    for (kind, count) in from {
        *into.entry(kind).or_default() += count;
    }
}

/// A failure's reason without the parts that differ per transaction.
fn failure_kind(reason: &str) -> String {
    reason.chars().take(80).collect()
}

fn code_name(code: i32) -> &'static str {
    TxValidationCode::try_from(code).map_or("UNKNOWN", |code| code.as_str_name())
}

async fn report_progress(progress: Arc<Progress>, started: Instant, deadline: Instant) {
    let mut last = 0;
    loop {
        tokio::time::sleep(PROGRESS_EVERY).await;
        let committed = progress.committed.load(Ordering::Relaxed);
        let now = Instant::now();
        if now > deadline {
            eprintln!(
                "  draining {} in flight",
                progress.in_flight.load(Ordering::Relaxed)
            );
            return;
        }
        eprintln!(
            "  {:5.1} s: {committed} committed, {:.0} tx/s, {} in flight",
            (now - started).as_secs_f64(),
            (committed - last) as f64 / PROGRESS_EVERY.as_secs_f64(),
            progress.in_flight.load(Ordering::Relaxed)
        );
        last = committed;
    }
}

/// Counters read from the nodes' `/metrics` before and after the window.
/// One node's counters, as its metrics read.
#[derive(Debug, Clone, Copy, Default)]
struct NodeScrape {
    orderer: bool,
    cpu: f64,
    validate: f64,
    mvcc: f64,
    ledger: f64,
}

/// Every node's metrics at one moment.
#[derive(Debug, Default)]
struct Scrape {
    nodes: BTreeMap<String, NodeScrape>,
    /// Blocks on the first orderer, over every channel, if it answered.
    blocks: Option<f64>,
    /// Nodes whose metrics could not be read (a node that went away).
    unreachable: Vec<String>,
}

/// Every node's metrics: each peer of every organisation (not only the
/// ones the bench sends proposals to) and each orderer. A node that does
/// not answer is listed, not an error: the bench still reports.
fn scrape(connection: &ConnectionFile) -> Scrape {
    let mut scrape = Scrape::default();
    let first_orderer = connection.orderers.first().map(|orderer| &orderer.name);
    let peers = connection.organizations.iter().flat_map(|org| &org.peers);
    let nodes = peers
        .map(|peer| (&peer.name, peer.operations_address(), false))
        .chain(
            connection
                .orderers
                .iter()
                .map(|orderer| (&orderer.name, orderer.operations_address(), true)),
        );
    for (name, address, orderer) in nodes {
        let metrics = address.and_then(|address| super::http_get(address, "/metrics"));
        let metrics = match metrics {
            Ok(metrics) => metrics,
            Err(error) => {
                tracing::warn!(node = %name, "metrics unreadable: {error:#}");
                scrape.unreachable.push(name.clone());
                continue;
            }
        };
        let sum = |metric: &str| super::metric_sum(&metrics, metric);
        scrape.nodes.insert(
            name.clone(),
            NodeScrape {
                orderer,
                cpu: sum("process_cpu_seconds_total"),
                validate: sum("weft_committer_validate_seconds_sum"),
                mvcc: sum("weft_committer_mvcc_seconds_sum"),
                ledger: sum("ledger_blockstorage_commit_time_sum")
                    + sum("ledger_statedb_commit_time_sum"),
            },
        );
        if Some(name) == first_orderer {
            scrape.blocks = Some(sum("ledger_blockchain_height"));
        }
    }
    scrape
}

impl Scrape {
    /// What each node read in both scrapes spent between them.
    fn since(&self, before: &Scrape) -> BTreeMap<String, NodeScrape> {
        self.nodes
            .iter()
            .filter_map(|(name, after)| {
                let before = before.nodes.get(name)?;
                Some((
                    name.clone(),
                    NodeScrape {
                        orderer: after.orderer,
                        cpu: after.cpu - before.cpu,
                        validate: after.validate - before.validate,
                        mvcc: after.mvcc - before.mvcc,
                        ledger: after.ledger - before.ledger,
                    },
                ))
            })
            .collect()
    }
}

fn own_cpu_seconds() -> f64 {
    procfs::process::Process::myself()
        .and_then(|me| me.stat())
        .map(|stat| super::stat_cpu_seconds(&stat))
        .unwrap_or(0.0)
}

/// Milliseconds, for reports.
#[derive(Debug, Clone, Copy, Serialize)]
struct Percentiles {
    p50: f64,
    p95: f64,
    p99: f64,
}

impl Percentiles {
    fn of(mut values: Vec<Duration>) -> Self {
        values.sort_unstable();
        let ms = |q| quantile(&values, q).as_secs_f64() * 1000.0;
        Self {
            p50: ms(0.50),
            p95: ms(0.95),
            p99: ms(0.99),
        }
    }
}

/// What `weft bench` reports.
#[derive(Debug, Serialize)]
struct Results {
    workload: String,
    loop_kind: String,
    clients: usize,
    offered_rate: Option<f64>,
    organisations: usize,
    orderers: usize,
    channels: usize,
    /// The block size of the network the bench started.
    block_size: Option<u32>,
    endorsement_policy: Option<String>,
    seconds: f64,
    /// Transactions whose first commit event came in the window.
    committed: u64,
    committed_by_channel: BTreeMap<String, u64>,
    valid: u64,
    throughput: f64,
    goodput: f64,
    latency_ms: Percentiles,
    endorse_ms: Percentiles,
    broadcast_ms: Percentiles,
    /// From the orderer's acknowledgement until the block holding the
    /// transaction leaves the orderer (with Raft, the acknowledgement
    /// already waits until the block is decided).
    ordering_ms: Percentiles,
    /// From the block leaving the orderer to the first commit event.
    commit_ms: Percentiles,
    /// From the proposal to the Gateway's `CommitStatus` answer, if asked.
    commit_status_latency_ms: Option<Percentiles>,
    /// Per committed transaction and peer, from the peers' metrics.
    peer_validate_ms: f64,
    peer_mvcc_ms: f64,
    peer_ledger_ms: f64,
    cpu_seconds: BTreeMap<String, f64>,
    server_cpu_ms_per_tx: f64,
    /// How the clients reach the network (`--connections`).
    client_shape: String,
    /// Blocks cut while the bench ran (and drained), over its channels.
    blocks: u64,
    transactions_per_block: f64,
    /// CPU of each node per transaction and per block, in milliseconds.
    node_cpu_ms_per_tx: BTreeMap<String, f64>,
    node_cpu_ms_per_block: BTreeMap<String, f64>,
    transaction_bytes: f64,
    codes: BTreeMap<String, u64>,
    failures: BTreeMap<String, u64>,
    /// Transactions given up on after `--tx-timeout` (also in `failures`).
    unconfirmed: u64,
    /// Nodes whose metrics could not be read before or after the run:
    /// the CPU figures leave them out.
    unreachable_nodes: Vec<String>,
    dropped_arrivals: u64,
    #[serde(skip)]
    latencies: Vec<Duration>,
    /// For `--transactions`, in the order their proposals started.
    #[serde(skip)]
    transactions: Vec<TransactionRow>,
}

/// One committed transaction's timeline, for `--transactions`.
#[derive(Debug)]
struct TransactionRow {
    /// When its proposal started, since the measurement began.
    started: Duration,
    endorse: Duration,
    broadcast: Duration,
    /// From the orderer's answer until its block left the orderer the
    /// bench follows, and from there to the first commit event (the
    /// moment the block left taken within that span, so that the phases
    /// add up to the latency); unknown when the bench did not see the
    /// block leave.
    ordering: Option<Duration>,
    commit: Option<Duration>,
    latency: Duration,
    channel: String,
    block: u64,
    code: &'static str,
}

impl Results {
    #[allow(clippy::too_many_arguments)]
    fn new(
        args: &LoadArgs,
        rate: Option<f64>,
        connection: &ConnectionFile,
        channels: &[String],
        records: &[TxRecord],
        started: Instant,
        failures: BTreeMap<String, u64>,
        dropped: u64,
        before: &Scrape,
        after: &Scrape,
        client_cpu: f64,
        ordered_at: &HashMap<(usize, u64), Instant>,
    ) -> Self {
        let window_end = started + args.duration;
        let in_window: Vec<&TxRecord> = records
            .iter()
            .filter(|record| record.committed_at <= window_end)
            .collect();
        let seconds = args.duration.as_secs_f64();
        let committed = in_window.len() as u64;
        let mut committed_by_channel: BTreeMap<String, u64> =
            channels.iter().map(|name| (name.clone(), 0)).collect();
        for record in &in_window {
            if let Some(count) = channels
                .get(record.channel)
                .and_then(|name| committed_by_channel.get_mut(name))
            {
                *count += 1;
            }
        }
        let mut codes: BTreeMap<String, u64> = BTreeMap::new();
        for record in &in_window {
            *codes.entry(code_name(record.code).to_owned()).or_default() += 1;
        }
        let valid = codes.get("VALID").copied().unwrap_or(0);
        let total = |pick: fn(&TxRecord) -> Duration| -> Vec<Duration> {
            in_window.iter().map(|record| pick(record)).collect()
        };
        let latencies = total(TxRecord::latency);
        // Only if asked: a row per committed transaction.
        let transactions = match args.transactions {
            Some(_) => transaction_rows(&in_window, ordered_at, started, channels),
            None => Vec::new(),
        };
        // Ordering ends when the transaction's block leaves the orderer.
        let split = |phase: fn(&TxRecord, Instant) -> Duration| -> Vec<Duration> {
            in_window
                .iter()
                .filter_map(|record| {
                    let ordered = ordered_at.get(&(record.channel, record.block))?;
                    Some(phase(record, *ordered))
                })
                .collect()
        };
        // Metrics cover every transaction of the window and the drain.
        let all_committed = records.len().max(1) as f64;
        // Only nodes read both before and after count.
        let spent = after.since(before);
        let peers: Vec<&NodeScrape> = spent.values().filter(|node| !node.orderer).collect();
        let peer_sum = |pick: fn(&NodeScrape) -> f64| peers.iter().map(|node| pick(node)).sum();
        let per_tx_peer =
            |seconds: f64| seconds * 1000.0 / all_committed / peers.len().max(1) as f64;
        let orderer_cpu: f64 = spent
            .values()
            .filter(|node| node.orderer)
            .map(|node| node.cpu)
            .sum();
        let peer_cpu: f64 = peer_sum(|node| node.cpu);
        let blocks = match (before.blocks, after.blocks) {
            (Some(before), Some(after)) => (after - before).max(0.0),
            _ => 0.0,
        };
        let per = |count: f64| -> BTreeMap<String, f64> {
            spent
                .iter()
                .map(|(node, spent)| (node.clone(), spent.cpu * 1000.0 / count.max(1.0)))
                .collect()
        };
        let mut unreachable: Vec<String> = before
            .unreachable
            .iter()
            .chain(&after.unreachable)
            .cloned()
            .collect();
        unreachable.sort();
        unreachable.dedup();
        let cpu_seconds = BTreeMap::from([
            ("orderers".to_owned(), orderer_cpu),
            ("peers".to_owned(), peer_cpu),
            ("bench client".to_owned(), client_cpu),
        ]);
        Self {
            workload: args.workload.name(),
            loop_kind: if rate.is_some() { "open" } else { "closed" }.to_owned(),
            clients: args.clients,
            offered_rate: rate,
            organisations: connection.organizations.len(),
            orderers: connection.orderers.len(),
            channels: channels.len(),
            block_size: None,
            endorsement_policy: connection.endorsement_policy.clone(),
            seconds,
            committed,
            committed_by_channel,
            valid,
            throughput: committed as f64 / seconds,
            goodput: valid as f64 / seconds,
            latency_ms: Percentiles::of(latencies.clone()),
            endorse_ms: Percentiles::of(total(|r| r.endorse)),
            broadcast_ms: Percentiles::of(total(|r| r.broadcast)),
            ordering_ms: Percentiles::of(split(|r, ordered| {
                ordered.saturating_duration_since(r.acknowledged_at)
            })),
            commit_ms: Percentiles::of(split(|r, ordered| {
                r.committed_at.saturating_duration_since(ordered)
            })),
            commit_status_latency_ms: in_window
                .iter()
                .map(|r| {
                    let answered = r.status_at?.saturating_duration_since(r.acknowledged_at);
                    Some(r.endorse + r.broadcast + answered)
                })
                .collect::<Option<Vec<Duration>>>()
                .filter(|latencies| !latencies.is_empty())
                .map(Percentiles::of),
            peer_validate_ms: per_tx_peer(peer_sum(|node| node.validate)),
            peer_mvcc_ms: per_tx_peer(peer_sum(|node| node.mvcc)),
            peer_ledger_ms: per_tx_peer(peer_sum(|node| node.ledger)),
            unreachable_nodes: unreachable,
            unconfirmed: failures.get(UNCONFIRMED).copied().unwrap_or(0),
            server_cpu_ms_per_tx: (orderer_cpu + peer_cpu) * 1000.0 / all_committed,
            cpu_seconds,
            client_shape: client_shape(args),
            blocks: blocks as u64,
            transactions_per_block: all_committed / blocks.max(1.0),
            node_cpu_ms_per_tx: per(all_committed),
            node_cpu_ms_per_block: per(blocks),
            transaction_bytes: in_window.iter().map(|r| r.bytes as f64).sum::<f64>()
                / committed.max(1) as f64,
            codes,
            failures,
            dropped_arrivals: dropped,
            latencies,
            transactions,
        }
    }

    /// `committed <N> tx in <S> s: <X> tx/s, p50 ...`.
    fn summary(&self) -> String {
        summary_line(
            "committed",
            self.committed,
            Duration::from_secs_f64(self.seconds),
            &mut self.latencies.clone(),
        )
    }

    fn markdown(&self) -> String {
        let mut text = String::new();
        let row = |text: &mut String, name: &str, value: String| {
            text.push_str(&format!("| {name} | {value} |\n"));
        };
        let pct = |p: &Percentiles| format!("{:.1} / {:.1} / {:.1}", p.p50, p.p95, p.p99);
        text.push_str("\n| measure | value |\n|---|---|\n");
        row(
            &mut text,
            "workload",
            format!(
                "{} ({} loop, {} clients{})",
                self.workload,
                self.loop_kind,
                self.clients,
                self.offered_rate
                    .map_or(String::new(), |r| format!(", {r} tx/s offered"))
            ),
        );
        row(
            &mut text,
            "network",
            format!(
                "{} orderers, {} organisations, {} channel{}{}, policy {}",
                self.orderers,
                self.organisations,
                self.channels,
                if self.channels == 1 { "" } else { "s" },
                self.block_size
                    .map_or(String::new(), |size| format!(", blocks of {size}")),
                self.endorsement_policy
                    .as_deref()
                    .unwrap_or("every organisation")
            ),
        );
        row(&mut text, "client", self.client_shape.clone());
        row(
            &mut text,
            "committed",
            format!("{} in {:.1} s", self.committed, self.seconds),
        );
        row(
            &mut text,
            "throughput (tx/s)",
            format!("{:.0}", self.throughput),
        );
        row(
            &mut text,
            "goodput (VALID tx/s)",
            format!("{:.0}", self.goodput),
        );
        row(
            &mut text,
            "latency p50 / p95 / p99 (ms)",
            pct(&self.latency_ms),
        );
        row(&mut text, "endorsement (ms)", pct(&self.endorse_ms));
        row(&mut text, "broadcast (ms)", pct(&self.broadcast_ms));
        row(&mut text, "ordering (ms)", pct(&self.ordering_ms));
        row(&mut text, "commit (ms)", pct(&self.commit_ms));
        if let Some(latency) = &self.commit_status_latency_ms {
            row(
                &mut text,
                "latency to Gateway CommitStatus p50 / p95 / p99 (ms)",
                pct(latency),
            );
        }
        row(
            &mut text,
            "peer VSCC / MVCC / ledger per tx (ms)",
            format!(
                "{:.3} / {:.3} / {:.3}",
                self.peer_validate_ms, self.peer_mvcc_ms, self.peer_ledger_ms
            ),
        );
        let cpu: Vec<String> = self
            .cpu_seconds
            .iter()
            .map(|(k, v)| format!("{k} {v:.1}"))
            .collect();
        row(&mut text, "CPU seconds", cpu.join(", "));
        row(
            &mut text,
            "server CPU per tx (ms)",
            format!("{:.3}", self.server_cpu_ms_per_tx),
        );
        row(
            &mut text,
            "blocks (tx per block)",
            format!("{} ({:.1})", self.blocks, self.transactions_per_block),
        );
        let by_node: Vec<String> = self
            .node_cpu_ms_per_tx
            .iter()
            .map(|(node, per_tx)| {
                let per_block = self.node_cpu_ms_per_block.get(node).unwrap_or(&0.0);
                format!("{node} {per_tx:.3} / {per_block:.2}")
            })
            .collect();
        row(
            &mut text,
            "CPU per tx / per block by node (ms)",
            by_node.join(", "),
        );
        row(
            &mut text,
            "transaction size (bytes)",
            format!("{:.0}", self.transaction_bytes),
        );
        let codes: Vec<String> = self.codes.iter().map(|(k, v)| format!("{v} {k}")).collect();
        row(&mut text, "validation codes", codes.join(", "));
        if !self.failures.is_empty() {
            let failures: Vec<String> = self
                .failures
                .iter()
                .map(|(k, v)| format!("{v}× {k}"))
                .collect();
            row(&mut text, "failed", failures.join("; "));
        }
        if self.unconfirmed > 0 {
            row(
                &mut text,
                "unconfirmed (no commit event within --tx-timeout)",
                self.unconfirmed.to_string(),
            );
        }
        if !self.unreachable_nodes.is_empty() {
            row(
                &mut text,
                "metrics unreadable (left out of the CPU figures)",
                self.unreachable_nodes.join(", "),
            );
        }
        if self.dropped_arrivals > 0 {
            row(
                &mut text,
                "arrivals dropped (every client busy)",
                self.dropped_arrivals.to_string(),
            );
        }
        text.push('\n');
        text
    }
}
