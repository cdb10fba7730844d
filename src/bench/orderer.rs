//! `weft bench orderer`: FastFabric's orderer experiment on weft.
//!
//! Envelopes of a chosen size are signed up front by a client of the
//! channel (a Fabric ENDORSER_TRANSACTION whose padding rides in the
//! chaincode arguments; the orderer checks the creator, not endorsements,
//! so the envelopes carry none). Several concurrent Broadcast streams then
//! send them to a `weft orderer start` process as fast as it accepts them,
//! while a Deliver stream watches the blocks come out. Reported per
//! envelope size: ordered envelopes per second (first send to the last
//! envelope delivered in a block), the latency of the Broadcast answer and
//! of ordering (send → delivered in a block), and the orderer process's
//! CPU time per envelope.
//!
//! The bench channel cuts a partial block after 100 ms rather than Fabric's
//! default 2 s, so that the tail of a run is not a two-second wait; full
//! blocks are cut by count (500) or size (2 MB), as by default.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use prost::Message;
use rayon::prelude::*;
use serde::Serialize;
use tokio_stream::wrappers::ReceiverStream;
use weft_msp::Signer;
use weft_protos::common::{ChannelHeader, Envelope, HeaderType, Payload, Status};
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;
use weft_protos::orderer::deliver_response::Type as DeliverType;
use weft_protos::tx::{Invocation, Proposal, SimulationResult, endorse, seek_range};

use super::{BenchChannel, NodeProcess, WorkDir, quantile, summary_line, write_json};

const CHANNEL: &str = "bench";
/// How long the bench channel waits before cutting a partial block.
const BATCH_TIMEOUT: &str = "100ms";
/// The largest message the bench's gRPC clients accept (whole blocks).
const MESSAGE_BYTES_MAX: usize = 100 * 1024 * 1024;

/// Options of `weft bench orderer`.
#[derive(Debug, Clone, clap::Args)]
pub struct OrdererBenchArgs {
    /// Envelope sizes to measure, in bytes (comma-separated). A Fabric
    /// transaction carries its creator's certificate twice, so one signed
    /// with the default identities is about 2 KB at least.
    #[arg(long, value_delimiter = ',', default_value = "2048,3072,4096")]
    envelope_bytes: Vec<usize>,
    /// Envelopes per run.
    #[arg(long, default_value_t = 40_000)]
    transactions: usize,
    /// Concurrent Broadcast streams.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// The orderer's block store durability (ledger.durability).
    #[arg(long, default_value = "every-block", value_parser = ["every-block", "group-commit", "none"])]
    durability: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Work in this directory and keep it (default: a temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
struct RunResult {
    envelope_bytes: usize,
    clients: usize,
    durability: String,
    transactions: u64,
    blocks: u64,
    seconds: f64,
    tx_per_second: f64,
    /// Send → SUCCESS answer.
    ack_p50_ms: f64,
    ack_p99_ms: f64,
    /// Send → delivered in a block.
    ordered_p50_ms: f64,
    ordered_p99_ms: f64,
    /// The orderer process's CPU time over the run.
    cpu_seconds: f64,
    /// That CPU time over wall time and cores: 1.0 is every core busy.
    cpu_utilisation: f64,
    cpu_us_per_envelope: f64,
    summary: String,
}

/// Runs the bench and prints its report.
pub fn run(args: &OrdererBenchArgs) -> Result<()> {
    if args.clients == 0 || args.transactions == 0 {
        bail!("--clients and --transactions must be at least 1");
    }
    let work = WorkDir::new(args.dir.as_deref())?;
    let dir = work.path().to_owned();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "weft bench orderer: {cores} cores, working in {}",
        dir.display()
    );
    let channel = BenchChannel::create(&dir.join("network"), CHANNEL, |profile| {
        if let Some(orderer) = &mut profile.orderer {
            orderer.batch_timeout = BATCH_TIMEOUT.to_owned();
        }
    })?;
    let client = channel.user("org1", "User1")?;

    let mut results = Vec::new();
    for (index, &size) in args.envelope_bytes.iter().enumerate() {
        let started = Instant::now();
        let envelopes = generate(&client, args.transactions, size)?;
        println!(
            "signed {} envelopes of {size} bytes in {:.1?}",
            envelopes.len(),
            started.elapsed()
        );
        let run_dir = dir.join(format!("run-{index}"));
        let result = run_point(&channel, &client, args, size, envelopes, &run_dir, cores)
            .with_context(|| format!("run with {size}-byte envelopes"))?;
        println!(
            "  {size:>5} B, {} clients: {:>7.0} tx/s, ordered p50 {:>6.1} ms, orderer cpu {:>5.1} µs/tx ({:.0}% of {cores} cores)",
            args.clients,
            result.tx_per_second,
            result.ordered_p50_ms,
            result.cpu_us_per_envelope,
            result.cpu_utilisation * 100.0
        );
        results.push(result);
    }
    print_table(&results, cores);
    write_json(args.json.as_deref(), &results)?;
    if let Some(last) = results.last() {
        println!("{}", last.summary);
    }
    Ok(())
}

/// `count` envelopes of about `size` bytes, signed by `client`, with their
/// TxIDs.
fn generate(client: &Signer, count: usize, size: usize) -> Result<Vec<(String, Envelope)>> {
    let unpadded = envelope(client, 0, &Bytes::new())?.1.encoded_len();
    if size < unpadded {
        bail!("--envelope-bytes {size}: envelopes of this channel are at least {unpadded} bytes");
    }
    // The length prefix of the padding argument takes a few bytes too.
    let padding = Bytes::from(vec![b'x'; size.saturating_sub(unpadded + 3)]);
    (0..count)
        .into_par_iter()
        .map(|index| envelope(client, index, &padding))
        .collect()
}

/// Envelope `index`: an ENDORSER_TRANSACTION of chaincode `bench` carrying
/// `padding`, signed by `client`, without endorsements.
fn envelope(client: &Signer, index: usize, padding: &Bytes) -> Result<(String, Envelope)> {
    let invocation = Invocation {
        channel_id: CHANNEL,
        chaincode: "bench",
        args: vec![
            Bytes::from_static(b"put"),
            Bytes::from(format!("key{index}")),
            padding.clone(),
        ],
        nonce: client.new_nonce()?,
        timestamp_seconds: weft_msp::now(),
    };
    let proposal = Proposal::new(&invocation, client.serialized_identity().clone());
    let mut response = endorse(&proposal, &SimulationResult::default(), client)?;
    response.endorsement = None;
    let envelope = proposal.transaction(&[response], client)?;
    Ok((proposal.tx_id.clone(), envelope))
}

/// One run: a fresh orderer process orders `envelopes`.
fn run_point(
    channel: &BenchChannel,
    client: &Signer,
    args: &OrdererBenchArgs,
    size: usize,
    envelopes: Vec<(String, Envelope)>,
    dir: &Path,
    cores: usize,
) -> Result<RunResult> {
    std::fs::create_dir_all(dir)?;
    let config = write_orderer_config(channel, &args.durability, dir)?;
    let mut orderer = NodeProcess::start("orderer", &config, &dir.join("orderer.log"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let measured = runtime.block_on(measure(&orderer, client, args.clients, envelopes));
    orderer.stop();
    let mut measured = measured?;
    let seconds = measured.elapsed.as_secs_f64();
    let transactions = measured.ordered.len() as u64;
    let summary = summary_line(
        "ordered",
        transactions,
        measured.elapsed,
        &mut measured.ordered,
    );
    measured.acks.sort_unstable();
    let ms = |values: &[Duration], q| quantile(values, q).as_secs_f64() * 1000.0;
    Ok(RunResult {
        envelope_bytes: size,
        clients: args.clients,
        durability: args.durability.clone(),
        transactions,
        blocks: measured.blocks,
        seconds,
        tx_per_second: transactions as f64 / seconds.max(f64::MIN_POSITIVE),
        ack_p50_ms: ms(&measured.acks, 0.50),
        ack_p99_ms: ms(&measured.acks, 0.99),
        ordered_p50_ms: ms(&measured.ordered, 0.50),
        ordered_p99_ms: ms(&measured.ordered, 0.99),
        cpu_seconds: measured.cpu_seconds,
        cpu_utilisation: measured.cpu_seconds / seconds.max(f64::MIN_POSITIVE) / cores as f64,
        cpu_us_per_envelope: measured.cpu_seconds * 1e6 / transactions.max(1) as f64,
        summary,
    })
}

/// Raw measurements of one run.
struct Measured {
    elapsed: Duration,
    blocks: u64,
    acks: Vec<Duration>,
    /// Send → delivered in a block, per envelope (sorted by the summary).
    ordered: Vec<Duration>,
    cpu_seconds: f64,
}

async fn measure(
    orderer: &NodeProcess,
    client: &Signer,
    clients: usize,
    envelopes: Vec<(String, Envelope)>,
) -> Result<Measured> {
    let total = envelopes.len();
    let connection = tonic::transport::Endpoint::from_shared(format!("http://{}", orderer.grpc))?
        .connect()
        .await
        .with_context(|| format!("connecting to the orderer at {}", orderer.grpc))?;
    let request = weft_protos::tx::signed_envelope(
        HeaderType::DeliverSeekInfo,
        CHANNEL,
        seek_range(1, u64::MAX).encode_to_vec().into(),
        client,
        client.new_nonce()?,
        weft_msp::now(),
    )?;
    let watcher = tokio::spawn(watch_blocks(
        AtomicBroadcastClient::new(connection.clone()).max_decoding_message_size(MESSAGE_BYTES_MAX),
        request,
        total,
    ));

    let cpu_before = orderer.cpu_seconds()?;
    let started = Instant::now();
    let mut shares: Vec<Vec<(String, Envelope)>> = (0..clients).map(|_| Vec::new()).collect();
    for (index, envelope) in envelopes.into_iter().enumerate() {
        shares[index % clients].push(envelope);
    }
    let senders: Vec<_> = shares
        .into_iter()
        .map(|share| {
            tokio::spawn(broadcast_all(
                AtomicBroadcastClient::new(connection.clone()),
                share,
            ))
        })
        .collect();
    let mut sent_at: HashMap<String, Instant> = HashMap::with_capacity(total);
    let mut acks = Vec::with_capacity(total);
    for sender in senders {
        let (sent, acked) = sender
            .await
            .map_err(|e| anyhow!("a client failed: {e}"))??;
        for ((tx_id, sent), acked) in sent.into_iter().zip(acked) {
            acks.push(acked - sent);
            sent_at.insert(tx_id, sent);
        }
    }
    let (delivered, blocks, finished) = watcher
        .await
        .map_err(|e| anyhow!("the block watcher failed: {e}"))??;
    let cpu_seconds = orderer.cpu_seconds()? - cpu_before;
    let ordered = delivered
        .iter()
        .map(|(tx_id, at)| {
            sent_at
                .get(tx_id)
                .map(|sent| *at - *sent)
                .ok_or_else(|| anyhow!("the orderer delivered {tx_id}, which was never sent"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Measured {
        elapsed: finished - started,
        blocks,
        acks,
        ordered,
        cpu_seconds,
    })
}

/// Sends `share` on one Broadcast stream, as fast as the orderer takes
/// it; returns each envelope's TxID with its send time, and the answer
/// times in order. Anything but SUCCESS fails the run.
async fn broadcast_all(
    mut client: AtomicBroadcastClient<tonic::transport::Channel>,
    share: Vec<(String, Envelope)>,
) -> Result<(Vec<(String, Instant)>, Vec<Instant>)> {
    let (sender, receiver) = tokio::sync::mpsc::channel(256);
    let count = share.len();
    let feeding = tokio::spawn(async move {
        let mut sent = Vec::with_capacity(share.len());
        for (tx_id, envelope) in share {
            sent.push((tx_id, Instant::now()));
            if sender.send(envelope).await.is_err() {
                break;
            }
        }
        sent
    });
    let mut answers = client
        .broadcast(ReceiverStream::new(receiver))
        .await
        .context("the orderer refused the Broadcast stream")?
        .into_inner();
    let mut acked = Vec::with_capacity(count);
    while acked.len() < count {
        let answer = answers
            .message()
            .await
            .context("the Broadcast stream failed")?
            .ok_or_else(|| anyhow!("the orderer ended the Broadcast stream early"))?;
        if answer.status != Status::Success as i32 {
            bail!(
                "the orderer answered {} ({})",
                Status::try_from(answer.status).map_or("an unknown status", |s| s.as_str_name()),
                answer.info
            );
        }
        acked.push(Instant::now());
    }
    let sent = feeding.await.map_err(|e| anyhow!("feeding failed: {e}"))?;
    Ok((sent, acked))
}

/// Follows the channel's blocks (`request`: a seek from block 1) until `total` envelopes were
/// delivered; returns each TxID with its delivery time, the block count
/// and the time the last envelope arrived.
async fn watch_blocks(
    mut orderer: AtomicBroadcastClient<tonic::transport::Channel>,
    request: Envelope,
    total: usize,
) -> Result<(Vec<(String, Instant)>, u64, Instant)> {
    let mut stream = orderer
        .deliver(tokio_stream::iter([request]))
        .await
        .context("the orderer refused the Deliver request")?
        .into_inner();
    let mut delivered = Vec::with_capacity(total);
    let mut blocks = 0;
    while delivered.len() < total {
        let response = stream
            .message()
            .await
            .context("the Deliver stream failed")?
            .ok_or_else(|| anyhow!("the Deliver stream ended"))?;
        let block = match response.r#type {
            Some(DeliverType::Block(block)) => block,
            other => bail!("the orderer answered {other:?} on Deliver"),
        };
        let arrived = Instant::now();
        blocks += 1;
        for raw in block.data.map(|data| data.data).unwrap_or_default() {
            delivered.push((tx_id_of(raw)?, arrived));
        }
    }
    Ok((delivered, blocks, Instant::now()))
}

fn tx_id_of(raw: Bytes) -> Result<String> {
    let envelope = Envelope::decode(raw)?;
    let header = Payload::decode(envelope.payload)?
        .header
        .ok_or_else(|| anyhow!("a delivered envelope has no header"))?;
    Ok(ChannelHeader::decode(header.channel_header)?.tx_id)
}

/// Writes the orderer's config, listening on a free port.
pub(super) fn write_orderer_config(
    channel: &BenchChannel,
    durability: &str,
    dir: &Path,
) -> Result<PathBuf> {
    let path = dir.join("orderer.yaml");
    let text = format!(
        "orderer:\n  id: bench-orderer\n  listenAddress: 127.0.0.1:0\n  localMspId: OrdererMSP\n  \
         mspConfigPath: {msp}\n  fileSystemPath: {data}\n\
         channels:\n  - genesisBlock: {genesis}\n\
         ledger:\n  durability: {durability}\n\
         consensus:\n  type: solo\n",
        msp = channel.orderer_msp(0).display(),
        data = dir.join("data").display(),
        genesis = channel.genesis_path.display(),
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

fn print_table(results: &[RunResult], cores: usize) {
    println!();
    println!(
        "| envelope bytes | clients | durability | tx/s | blocks | answer p50 ms | answer p99 ms | ordered p50 ms | ordered p99 ms | orderer CPU % of {cores} cores | orderer CPU µs/tx |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        println!(
            "| {} | {} | {} | {:.0} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} |",
            r.envelope_bytes,
            r.clients,
            r.durability,
            r.tx_per_second,
            r.blocks,
            r.ack_p50_ms,
            r.ack_p99_ms,
            r.ordered_p50_ms,
            r.ordered_p99_ms,
            r.cpu_utilisation * 100.0,
            r.cpu_us_per_envelope,
        );
    }
    println!();
}
