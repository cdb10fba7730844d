//! `weft bench committer`: FastFabric's peer experiment on weft.
//!
//! Signed blocks of transfer transactions (two accounts read and written,
//! one endorsement, ~2.9 KB each) are generated up front. This process then
//! plays the ordering service: it serves the blocks over
//! `orderer.AtomicBroadcast/Deliver` from a block store of its own, while a
//! separate `weft peer start` process fetches, validates and commits them.
//! Blocks are released to the peer a window ahead of its commits, so the
//! peer is never idle and the latency of a block (released → committed, as
//! seen on the peer's own filtered Deliver stream) stays meaningful.
//!
//! Every transaction is valid by construction: the accounts of a block are
//! disjoint, and each transaction reads the versions the previous block
//! wrote. The bench checks that the peer agrees.
//!
//! Per-stage figures come from the peer's `/metrics`: the serial stages
//! (MVCC, block store, state) are single-threaded, so their time is CPU
//! time; validation (decode, signatures, policies) runs on every core and is
//! reported as the rest of the process's CPU time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use prost::Message;
use rayon::prelude::*;
use serde::Serialize;
use weft_msp::Signer;
use weft_protos::block::{new_block, sign_block};
use weft_protos::common::{Block, HeaderType};
use weft_protos::hash::block_header_hash;
use weft_protos::protos::deliver_client::DeliverClient;
use weft_protos::protos::deliver_response::Type as PeerResponse;

use super::{
    BenchChannel, NodeProcess, Transfer, WorkDir, http_get, metric_sum, summary_line, write_json,
};

const CHANNEL: &str = "bench";
/// Transactions per run, whatever the block size.
const TRANSACTIONS_PER_RUN: usize = 30_000;

/// Options of `weft bench committer`.
#[derive(Debug, Clone, clap::Args)]
pub struct CommitterBenchArgs {
    /// Transactions per block.
    #[arg(long, default_value_t = 100)]
    block_size: usize,
    /// Transactions per run (rounded up to whole blocks).
    #[arg(long, default_value_t = TRANSACTIONS_PER_RUN)]
    transactions: usize,
    /// Size each transaction envelope is padded to, in bytes.
    #[arg(long, default_value_t = 2900)]
    tx_bytes: usize,
    /// The peer's pipeline depth (committer.pipelineDepth).
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// The peer's validation threads (committer.validationThreads; 0 =
    /// one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// The peer's world state (ledger.stateDatabase).
    #[arg(long, default_value = "memory", value_parser = ["memory", "rocksdb"])]
    state: String,
    /// The peer's block store durability (ledger.durability).
    #[arg(long, default_value = "every-block", value_parser = ["every-block", "group-commit", "none"])]
    durability: String,
    /// Whether the peer indexes key history
    /// (ledger.history.enableHistoryDatabase).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    history: String,
    /// Blocks released to the peer ahead of its last commit.
    #[arg(long, default_value_t = 16)]
    window: usize,
    /// Run the sweep (pipeline depth, validation threads, block size, state database,
    /// durability, history, one at a time around the options given)
    /// instead of one run.
    #[arg(long)]
    sweep: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Work in this directory and keep it (default: a temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// One point of a run: what the peer was configured with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct RunPoint {
    block_size: usize,
    depth: usize,
    threads: usize,
    state: String,
    durability: String,
    history: String,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
struct RunResult {
    #[serde(flatten)]
    point: RunPoint,
    transactions: u64,
    valid: u64,
    seconds: f64,
    tx_per_second: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    /// Peer CPU time over the run.
    cpu_seconds: f64,
    /// Peer CPU time over wall time and cores: 1.0 is every core busy.
    cpu_utilisation: f64,
    cpu_us_per_tx: f64,
    /// Wall time per transaction of the serial stages (single-threaded,
    /// so also CPU time).
    mvcc_us_per_tx: f64,
    block_store_us_per_tx: f64,
    state_us_per_tx: f64,
    /// The rest of the peer's CPU per transaction: decode, signatures,
    /// policies (all cores), gRPC.
    validate_cpu_us_per_tx: f64,
    summary: String,
}

/// Runs the bench and prints its report.
pub fn run(args: &CommitterBenchArgs) -> Result<()> {
    let work = WorkDir::new(args.dir.as_deref())?;
    let dir = work.path().to_owned();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "weft bench committer: {cores} cores, working in {}",
        dir.display()
    );
    let channel = BenchChannel::create(&dir.join("network"), CHANNEL, |profile| {
        super::set_endorsement(profile, "ANY Endorsement");
    })?;
    let parties = Parties::load(&channel)?;

    let baseline = RunPoint {
        block_size: args.block_size,
        depth: args.depth,
        threads: args.threads,
        state: args.state.clone(),
        durability: args.durability.clone(),
        history: args.history.clone(),
    };
    let points = if args.sweep {
        sweep_points(&baseline)
    } else {
        vec![baseline]
    };
    let mut chains: HashMap<usize, Arc<Vec<Block>>> = HashMap::new();
    let mut results = Vec::new();
    for (index, point) in points.iter().enumerate() {
        let blocks = match chains.get(&point.block_size) {
            Some(blocks) => blocks.clone(),
            None => {
                let started = Instant::now();
                let block_count = args.transactions.div_ceil(point.block_size);
                let blocks = Arc::new(generate_chain(
                    &channel,
                    &parties,
                    point.block_size,
                    block_count,
                    args.tx_bytes,
                )?);
                println!(
                    "generated {} signed blocks of {} transactions in {:.1?}",
                    blocks.len(),
                    point.block_size,
                    started.elapsed()
                );
                chains.insert(point.block_size, blocks.clone());
                blocks
            }
        };
        let run_dir = dir.join(format!("run-{index}"));
        let result = run_point(
            &channel,
            &parties,
            point,
            &blocks,
            args.window,
            &run_dir,
            cores,
        )
        .with_context(|| format!("run {index} ({point:?})"))?;
        println!(
            "  depth {:>2}, threads {:>2}, block {:>3}, {:>7}, {:>12}: {:>7.0} tx/s, p50 {:>6.1} ms, cpu {:>4.0}% of {cores} cores",
            point.depth,
            threads_label(point.threads),
            point.block_size,
            point.state,
            point.durability,
            result.tx_per_second,
            result.p50_ms,
            result.cpu_utilisation * 100.0
        );
        results.push(result);
    }
    print_table(&results, cores);
    write_json(args.json.as_deref(), &results)?;
    if let Some(first) = results.first() {
        println!("{}", first.summary);
    }
    Ok(())
}

/// The sweep: each factor varied alone around `baseline`.
fn sweep_points(baseline: &RunPoint) -> Vec<RunPoint> {
    let mut points = vec![baseline.clone()];
    let mut add = |point: RunPoint| {
        if !points.contains(&point) {
            points.push(point);
        }
    };
    for depth in [1, 2, 4, 8] {
        add(RunPoint {
            depth,
            ..baseline.clone()
        });
    }
    for threads in [1, 2, 4] {
        add(RunPoint {
            threads,
            ..baseline.clone()
        });
    }
    for block_size in [10, 50, 100, 250, 500] {
        add(RunPoint {
            block_size,
            ..baseline.clone()
        });
    }
    for state in ["memory", "rocksdb"] {
        add(RunPoint {
            state: state.to_owned(),
            ..baseline.clone()
        });
    }
    for durability in ["every-block", "group-commit", "none"] {
        add(RunPoint {
            durability: durability.to_owned(),
            ..baseline.clone()
        });
    }
    for history in ["on", "off"] {
        add(RunPoint {
            history: history.to_owned(),
            ..baseline.clone()
        });
    }
    points
}

/// Who signs what in the bench's transactions.
struct Parties {
    client: Signer,
    endorser: Signer,
    orderer: Signer,
}

impl Parties {
    fn load(channel: &BenchChannel) -> Result<Self> {
        Ok(Self {
            client: channel.user("org1", "User1")?,
            endorser: channel.peer("org1", "peer0")?,
            orderer: channel.orderer(0)?,
        })
    }
}

/// The chain the peer will commit after genesis: block 1 creates two
/// accounts per transaction slot, and each later block moves one unit
/// between the same two accounts per slot, reading the versions the block
/// before wrote.
fn generate_chain(
    channel: &BenchChannel,
    parties: &Parties,
    block_size: usize,
    transfer_blocks: usize,
    tx_bytes: usize,
) -> Result<Vec<Block>> {
    let padding = padding_for(parties, block_size, tx_bytes)?;
    let numbers: Vec<u64> = (1..=transfer_blocks as u64 + 1).collect();
    let envelopes: Vec<Vec<Bytes>> = numbers
        .par_iter()
        .map(|&number| {
            (0..block_size)
                .map(|slot| transfer(parties, number, slot, &padding))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<_>>()?;
    let mut previous = block_header_hash(
        channel
            .genesis
            .header
            .as_ref()
            .ok_or_else(|| anyhow!("the genesis block has no header"))?,
    );
    let mut blocks = Vec::with_capacity(envelopes.len());
    for (number, envelopes) in numbers.iter().zip(envelopes) {
        let block = new_block(*number, &previous, envelopes);
        if let Some(header) = &block.header {
            previous = block_header_hash(header);
        }
        blocks.push(block);
    }
    blocks.par_iter_mut().try_for_each(|block| {
        let nonce = parties.orderer.new_nonce()?;
        sign_block(block, 0, &parties.orderer, nonce).map_err(anyhow::Error::from)
    })?;
    Ok(blocks)
}

/// The padding argument that brings a transaction to `tx_bytes`.
fn padding_for(parties: &Parties, block_size: usize, tx_bytes: usize) -> Result<Bytes> {
    let unpadded = transfer(parties, 2, block_size.saturating_sub(1), &Bytes::new())?.len();
    Ok(Bytes::from(vec![b'x'; tx_bytes.saturating_sub(unpadded)]))
}

/// Transaction `slot` of block `number`, as a serialized envelope.
fn transfer(parties: &Parties, number: u64, slot: usize, padding: &Bytes) -> Result<Bytes> {
    let transfer = Transfer {
        channel_id: CHANNEL,
        from: format!("account{:07}", 2 * slot),
        to: format!("account{:07}", 2 * slot + 1),
        moved: i64::try_from(number).unwrap_or(i64::MAX) - 1,
        read_at: (number > 1).then(|| (number - 1, slot as u64)),
        padding: padding.clone(),
    };
    let (_, envelope) = transfer.transaction(&parties.client, &[&parties.endorser])?;
    Ok(envelope.encode_to_vec().into())
}

/// One run: a fresh peer process commits `blocks` fed from this process.
fn run_point(
    channel: &BenchChannel,
    parties: &Parties,
    point: &RunPoint,
    blocks: &Arc<Vec<Block>>,
    window: usize,
    dir: &Path,
    cores: usize,
) -> Result<RunResult> {
    std::fs::create_dir_all(dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let feeder = super::feeder::Feeder::start(channel, &dir.join("orderer")).await?;
        let config = write_peer_config(channel, point, feeder.address(), dir)?;
        let mut peer = NodeProcess::start("peer", &config, &dir.join("peer.log"))?;
        let outcome = measure(channel, parties, &feeder, &peer, blocks, window).await;
        peer.stop();
        feeder.stop().await;
        let measured = outcome?;
        Ok(measured.into_result(point, cores))
    })
}

/// Raw measurements of one run.
struct Measured {
    transactions: u64,
    valid: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    cpu_seconds: f64,
    mvcc_seconds: f64,
    block_store_seconds: f64,
    state_seconds: f64,
}

impl Measured {
    fn into_result(mut self, point: &RunPoint, cores: usize) -> RunResult {
        let seconds = self.elapsed.as_secs_f64();
        let per_tx = |total: f64| total * 1e6 / self.transactions.max(1) as f64;
        let serial = self.mvcc_seconds + self.block_store_seconds + self.state_seconds;
        let summary = summary_line(
            "committed",
            self.transactions,
            self.elapsed,
            &mut self.latencies,
        );
        let quantile_ms = |q| super::quantile(&self.latencies, q).as_secs_f64() * 1000.0;
        RunResult {
            point: point.clone(),
            transactions: self.transactions,
            valid: self.valid,
            seconds,
            tx_per_second: self.transactions as f64 / seconds.max(f64::MIN_POSITIVE),
            p50_ms: quantile_ms(0.50),
            p95_ms: quantile_ms(0.95),
            p99_ms: quantile_ms(0.99),
            cpu_seconds: self.cpu_seconds,
            cpu_utilisation: self.cpu_seconds / seconds.max(f64::MIN_POSITIVE) / cores as f64,
            cpu_us_per_tx: per_tx(self.cpu_seconds),
            mvcc_us_per_tx: per_tx(self.mvcc_seconds),
            block_store_us_per_tx: per_tx(self.block_store_seconds),
            state_us_per_tx: per_tx(self.state_seconds),
            validate_cpu_us_per_tx: per_tx((self.cpu_seconds - serial).max(0.0)),
            summary,
        }
    }
}

/// Feeds `blocks` to the peer a window ahead of its commits and times each
/// block from release to commit. The clock starts when the peer commits
/// block 1 (the accounts), so that the transfers alone are measured.
async fn measure(
    channel: &BenchChannel,
    parties: &Parties,
    feeder: &super::feeder::Feeder,
    peer: &NodeProcess,
    blocks: &Arc<Vec<Block>>,
    window: usize,
) -> Result<Measured> {
    let last = blocks.len() as u64;
    let mut commits = subscribe(peer.grpc, &channel.channel_id, &parties.client, last).await?;
    let mut released = vec![Instant::now(); blocks.len() + 1];
    let mut next_release = 0usize;
    let mut committed_height = 1u64;
    let mut latencies = Vec::with_capacity(blocks.len());
    let mut transactions = 0u64;
    let mut valid = 0u64;
    let mut start: Option<(Instant, String)> = None;
    while committed_height <= last {
        while next_release < blocks.len()
            && (next_release as u64 + 1) < committed_height + window as u64
        {
            feeder.append(&blocks[next_release])?;
            released[next_release + 1] = Instant::now();
            next_release += 1;
        }
        let block = commits
            .message()
            .await
            .context("the peer's Deliver stream failed")?
            .ok_or_else(|| {
                anyhow!("the peer's Deliver stream ended at block {committed_height}")
            })?;
        let filtered = match block.r#type {
            Some(PeerResponse::FilteredBlock(filtered)) => filtered,
            other => bail!("the peer answered {other:?} where block {committed_height} was due"),
        };
        if filtered.number != committed_height {
            bail!(
                "the peer delivered block {} where {committed_height} was due",
                filtered.number
            );
        }
        let now = Instant::now();
        let number = filtered.number as usize;
        if number == 1 {
            start = Some((now, http_get(peer.operations()?, "/metrics")?));
        } else {
            latencies.push(now - released[number]);
            transactions += filtered.filtered_transactions.len() as u64;
            valid += filtered
                .filtered_transactions
                .iter()
                .filter(|tx| tx.tx_validation_code == 0)
                .count() as u64;
        }
        committed_height += 1;
    }
    let end = Instant::now();
    let metrics_after = http_get(peer.operations()?, "/metrics")?;
    let (started, metrics_before) = start.ok_or_else(|| anyhow!("block 1 was never committed"))?;
    if valid != transactions {
        bail!(
            "the peer marked {} of {transactions} transactions invalid; every one is valid by construction",
            transactions - valid
        );
    }
    let delta = |name: &str| metric_sum(&metrics_after, name) - metric_sum(&metrics_before, name);
    Ok(Measured {
        transactions,
        valid,
        elapsed: end - started,
        latencies,
        cpu_seconds: delta("process_cpu_seconds_total"),
        mvcc_seconds: delta("weft_committer_mvcc_seconds_sum"),
        block_store_seconds: delta("ledger_blockstorage_commit_time_sum"),
        state_seconds: delta("ledger_statedb_commit_time_sum"),
    })
}

/// The peer's filtered blocks 1..=`last`, as the client sees commits.
async fn subscribe(
    peer: SocketAddr,
    channel_id: &str,
    client: &Signer,
    last: u64,
) -> Result<tonic::Streaming<weft_protos::protos::DeliverResponse>> {
    let connection = tonic::transport::Endpoint::from_shared(format!("http://{peer}"))?
        .connect()
        .await
        .with_context(|| format!("connecting to the peer at {peer}"))?;
    let request = weft_protos::tx::signed_envelope(
        HeaderType::DeliverSeekInfo,
        channel_id,
        weft_protos::tx::seek_range(1, last).encode_to_vec().into(),
        client,
        client.new_nonce()?,
        weft_msp::now(),
    )?;
    let stream = DeliverClient::new(connection)
        .deliver_filtered(tokio_stream::iter([request]))
        .await
        .context("the peer refused the Deliver request")?
        .into_inner();
    Ok(stream)
}

/// Writes the peer's config for `point`, listening on free ports.
fn write_peer_config(
    channel: &BenchChannel,
    point: &RunPoint,
    orderer: SocketAddr,
    dir: &Path,
) -> Result<PathBuf> {
    let path = dir.join("peer.yaml");
    let text = format!(
        "peer:\n  id: bench-peer\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
         mspConfigPath: {msp}\n  fileSystemPath: {data}\n\
         channels:\n  - genesisBlock: {genesis}\n\
         orderers: [\"{orderer}\"]\n\
         ledger:\n  stateDatabase: {state}\n  durability: {durability}\n  \
         history:\n    enableHistoryDatabase: {history}\n\
         committer:\n  pipelineDepth: {depth}\n  validationThreads: {threads}\n\
         operations:\n  listenAddress: 127.0.0.1:0\n",
        msp = channel.peer_msp("org1", "peer0").display(),
        data = dir.join("peer").display(),
        genesis = channel.genesis_path.display(),
        state = point.state,
        durability = point.durability,
        history = point.history == "on",
        depth = point.depth,
        threads = point.threads,
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

fn print_table(results: &[RunResult], cores: usize) {
    println!();
    println!(
        "| depth | threads | block | state | durability | history | tx/s | p50 ms | p99 ms | CPU % of {cores} cores | CPU µs/tx | validate µs/tx | MVCC µs/tx | block store µs/tx | state µs/tx |"
    );
    println!("|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r.point.depth,
            threads_label(r.point.threads),
            r.point.block_size,
            r.point.state,
            r.point.durability,
            r.point.history,
            r.tx_per_second,
            r.p50_ms,
            r.p99_ms,
            r.cpu_utilisation * 100.0,
            r.cpu_us_per_tx,
            r.validate_cpu_us_per_tx,
            r.mvcc_us_per_tx,
            r.block_store_us_per_tx,
            r.state_us_per_tx,
        );
    }
    println!();
}

/// How a run's validation thread count reads: 0 means one per core.
fn threads_label(threads: usize) -> String {
    if threads == 0 {
        "auto".to_owned()
    } else {
        threads.to_string()
    }
}
