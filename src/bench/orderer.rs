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
//! With `--consensus raft --nodes N` the channel is an etcdraft channel of
//! N consenters, each a `weft orderer start` process on loopback; the
//! bench waits for a leader (from the nodes' `/metrics`), spreads the
//! streams over all nodes (`--send-to all`: followers forward to the
//! leader, SUCCESS once the block is decided) or sends them to the leader,
//! watches the blocks on the leader and counts the CPU of every node.
//!
//! With `--consensus kafka --nodes N` the channel orders through the Kafka
//! brokers of `--kafka-brokers` (which the bench does not start: `bash
//! deploy/kafka.sh start` runs one), each envelope size measured twice,
//! with only TxIDs through Kafka and with whole envelopes (FastFabric's
//! Figure 4), on a new channel (and so a new topic, deleted after the run)
//! per run. With
//! `--kafka-pid` the broker's CPU is reported apart from the orderers'.
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

use crate::channel::profile::{KafkaPayloadsSpec, KafkaSpec};

use super::{
    BenchChannel, NodeProcess, WorkDir, http_get, metric_sum, quantile, summary_line, write_json,
};

const CHANNEL: &str = "bench";
/// How long the bench channel waits before cutting a partial block.
const BATCH_TIMEOUT: &str = "100ms";
/// How long a Raft cluster may take to elect its first leader.
const LEADER_WAIT_MAX: Duration = Duration::from_secs(30);
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
    /// Who orders: one solo orderer, a Raft (etcdraft) cluster of
    /// `--nodes` orderer processes, or `--nodes` orderers on Kafka.
    #[arg(long, default_value = "solo", value_parser = ["solo", "raft", "kafka"])]
    consensus: String,
    /// Orderer processes of a Raft cluster or on Kafka (1 to 3: the
    /// consenters of the default channel profile).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// With Kafka: the brokers, host:port, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:9092")]
    kafka_brokers: Vec<String>,
    /// With Kafka: what goes through it, measured one after the other for
    /// each envelope size: only TxIDs, whole envelopes, or both.
    #[arg(long, default_value = "both", value_parser = ["both", "tx-id", "full"])]
    kafka_payloads: String,
    /// With Kafka: the broker's process ID, to report its CPU apart from
    /// the orderers' (`cat ~/.cache/weft/kafka/run-9092/broker.pid`).
    #[arg(long)]
    kafka_pid: Option<i32>,
    /// With Raft: send every stream to the leader, or spread the streams
    /// over all nodes (followers forward to the leader, as a Fabric client
    /// talking to any orderer would have them).
    #[arg(long, default_value = "all", value_parser = ["all", "leader"])]
    send_to: String,
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
    consensus: String,
    /// Orderer processes.
    nodes: usize,
    /// Where the streams went (solo: the only node).
    send_to: String,
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
    /// The orderer processes' CPU time over the run, all nodes together.
    cpu_seconds: f64,
    /// Each node's share of it; the Raft leader first.
    cpu_seconds_by_node: Vec<f64>,
    /// That CPU time over wall time and cores: 1.0 is every core busy.
    cpu_utilisation: f64,
    cpu_us_per_envelope: f64,
    /// The Kafka broker's CPU time per envelope, when its process is known.
    broker_cpu_us_per_envelope: Option<f64>,
    summary: String,
}

/// Runs the bench and prints its report.
pub fn run(args: &OrdererBenchArgs) -> Result<()> {
    if args.clients == 0 || args.transactions == 0 {
        bail!("--clients and --transactions must be at least 1");
    }
    let consensus = match args.consensus.as_str() {
        "raft" => Consensus::Raft,
        "kafka" => Consensus::Kafka,
        _ => Consensus::Solo,
    };
    if consensus != Consensus::Solo && !(1..=3).contains(&args.nodes) {
        bail!(
            "--nodes {}: the bench channel has 3 consenters; use 1 to 3",
            args.nodes
        );
    }
    let nodes = if consensus == Consensus::Solo {
        1
    } else {
        args.nodes
    };
    let kafka_modes: Vec<Option<KafkaPayloadsSpec>> =
        match (consensus, args.kafka_payloads.as_str()) {
            (Consensus::Kafka, "tx-id") => vec![Some(KafkaPayloadsSpec::TxId)],
            (Consensus::Kafka, "full") => vec![Some(KafkaPayloadsSpec::Full)],
            (Consensus::Kafka, _) => {
                vec![Some(KafkaPayloadsSpec::TxId), Some(KafkaPayloadsSpec::Full)]
            }
            _ => vec![None],
        };
    let work = WorkDir::new(args.dir.as_deref())?;
    let dir = work.path().to_owned();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "weft bench orderer: {cores} cores, working in {}",
        dir.display()
    );
    if consensus == Consensus::Kafka {
        crate::network::check_brokers(&args.kafka_brokers)?;
    }

    let mut results = Vec::new();
    let mut run = 0;
    for &size in &args.envelope_bytes {
        for &kafka in &kafka_modes {
            run += 1;
            // Each node's cluster port, as the channel config names it.
            let cluster_ports = (0..nodes)
                .map(|_| free_port())
                .collect::<Result<Vec<u16>>>()?;
            // A Kafka channel's topic keeps its records: every run orders
            // on a channel of its own, whose topic is deleted after it.
            let channel_id = match kafka {
                Some(_) => format!("{CHANNEL}-{}-{run}", std::process::id()),
                None => CHANNEL.to_owned(),
            };
            let network_dir = dir.join(format!("network-{run}"));
            let channel = BenchChannel::create(&network_dir, &channel_id, |profile| {
                adjust_profile(
                    profile,
                    consensus,
                    kafka,
                    &cluster_ports,
                    &args.kafka_brokers,
                );
            })?;
            let client = channel.user("org1", "User1")?;
            let started = Instant::now();
            let envelopes = generate(&client, &channel_id, args.transactions, size)?;
            println!(
                "signed {} envelopes of {size} bytes in {:.1?}",
                envelopes.len(),
                started.elapsed()
            );
            let cluster = (consensus != Consensus::Solo).then_some(cluster_ports.as_slice());
            let point = Point {
                consensus,
                label: match kafka {
                    Some(KafkaPayloadsSpec::TxId) => "kafka-txid".to_owned(),
                    Some(KafkaPayloadsSpec::Full) => "kafka-full".to_owned(),
                    None => args.consensus.clone(),
                },
                cluster,
                size,
            };
            let result = run_point(
                &channel,
                &client,
                args,
                &point,
                envelopes,
                &dir.join(format!("run-{run}")),
                cores,
            );
            if kafka.is_some() {
                delete_topic(&args.kafka_brokers, &channel_id);
            }
            let result = result
                .with_context(|| format!("run with {size}-byte envelopes ({})", point.label))?;
            println!(
                "  {} x{}, {size:>5} B, {} clients: {:>7.0} tx/s, ordered p50 {:>6.1} ms, orderer cpu {:>5.1} µs/tx ({:.0}% of {cores} cores){}",
                result.consensus,
                result.nodes,
                args.clients,
                result.tx_per_second,
                result.ordered_p50_ms,
                result.cpu_us_per_envelope,
                result.cpu_utilisation * 100.0,
                result
                    .broker_cpu_us_per_envelope
                    .map_or(String::new(), |broker| format!(
                        ", broker cpu {broker:.1} µs/tx"
                    ))
            );
            results.push(result);
        }
    }
    print_table(&results, cores);
    write_json(args.json.as_deref(), &results)?;
    if let Some(last) = results.last() {
        println!("{}", last.summary);
    }
    Ok(())
}

/// Which consensus a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Consensus {
    Solo,
    Raft,
    Kafka,
}

/// One point of the bench: who orders, and envelopes of which size.
struct Point<'a> {
    consensus: Consensus,
    /// The consensus as the report names it (`kafka-txid`, `raft`, ...).
    label: String,
    /// Each node's cluster port (Raft, Kafka); `None`: one solo node.
    cluster: Option<&'a [u16]>,
    size: usize,
}

/// The bench channel's profile for `consensus`, with the cluster ports of
/// its nodes and, for Kafka, what goes through the brokers.
fn adjust_profile(
    profile: &mut crate::channel::profile::Profile,
    consensus: Consensus,
    kafka: Option<KafkaPayloadsSpec>,
    cluster_ports: &[u16],
    brokers: &[String],
) {
    let Some(orderer) = &mut profile.orderer else {
        return;
    };
    orderer.batch_timeout = BATCH_TIMEOUT.to_owned();
    match consensus {
        Consensus::Solo => {}
        Consensus::Raft => {
            orderer.orderer_type = "etcdraft".to_owned();
            if let Some(etcd_raft) = &mut orderer.etcd_raft {
                etcd_raft.consenters.truncate(cluster_ports.len());
                for (consenter, port) in etcd_raft.consenters.iter_mut().zip(cluster_ports) {
                    consenter.host = "127.0.0.1".to_owned();
                    consenter.port = u32::from(*port);
                }
            }
        }
        Consensus::Kafka => {
            orderer.orderer_type = "kafka".to_owned();
            orderer.kafka = Some(KafkaSpec {
                brokers: brokers.to_vec(),
                payloads: kafka.unwrap_or_default(),
                orderers: cluster_ports
                    .iter()
                    .map(|port| format!("127.0.0.1:{port}"))
                    .collect(),
                consenters: Vec::new(),
            });
        }
    }
}

/// `count` envelopes of `channel_id` of about `size` bytes, signed by
/// `client`, with their TxIDs.
fn generate(
    client: &Signer,
    channel_id: &str,
    count: usize,
    size: usize,
) -> Result<Vec<(String, Envelope)>> {
    let unpadded = envelope(client, channel_id, 0, &Bytes::new())?
        .1
        .encoded_len();
    if size < unpadded {
        bail!("--envelope-bytes {size}: envelopes of this channel are at least {unpadded} bytes");
    }
    // The length prefix of the padding argument takes a few bytes too.
    let padding = Bytes::from(vec![b'x'; size.saturating_sub(unpadded + 3)]);
    (0..count)
        .into_par_iter()
        .map(|index| envelope(client, channel_id, index, &padding))
        .collect()
}

/// Envelope `index`: an ENDORSER_TRANSACTION of chaincode `bench` carrying
/// `padding`, signed by `client`, without endorsements.
fn envelope(
    client: &Signer,
    channel_id: &str,
    index: usize,
    padding: &Bytes,
) -> Result<(String, Envelope)> {
    let invocation = Invocation {
        channel_id,
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

/// One run: fresh orderer processes (one solo node, or a Raft node per
/// port of `cluster`) order `envelopes`.
#[allow(clippy::too_many_arguments)]
fn run_point(
    channel: &BenchChannel,
    client: &Signer,
    args: &OrdererBenchArgs,
    point: &Point,
    envelopes: Vec<(String, Envelope)>,
    dir: &Path,
    cores: usize,
) -> Result<RunResult> {
    std::fs::create_dir_all(dir)?;
    let mut orderers = Vec::new();
    match point.cluster {
        None => {
            let config = write_orderer_config(channel, &args.durability, dir)?;
            orderers.push(NodeProcess::start(
                "orderer",
                &config,
                &dir.join("orderer.log"),
            )?);
        }
        Some(ports) => {
            for (index, port) in ports.iter().enumerate() {
                let config = write_cluster_config(channel, &args.durability, dir, index, *port)?;
                orderers.push(NodeProcess::start(
                    "orderer",
                    &config,
                    &dir.join(format!("orderer{index}.log")),
                )?);
            }
            if point.consensus == Consensus::Raft {
                // The leader first: it gets the streams when they all go
                // to the leader, and the block watcher.
                let leader = wait_for_leader(&orderers)?;
                orderers.swap(0, leader);
            }
        }
    }
    if point.consensus == Consensus::Kafka {
        for orderer in &orderers {
            wait_until_healthy(orderer)?;
        }
    }
    super::settle_page_cache();
    let broker_cpu_before = args
        .kafka_pid
        .filter(|_| point.consensus == Consensus::Kafka)
        .map(process_cpu_seconds)
        .transpose()?;
    let targets: Vec<&NodeProcess> = if args.send_to == "leader" {
        vec![&orderers[0]]
    } else {
        orderers.iter().collect()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let measured = runtime.block_on(measure(
        &orderers,
        &targets,
        client,
        &channel.channel_id,
        args.clients,
        envelopes,
    ));
    let broker_cpu_seconds = match (broker_cpu_before, args.kafka_pid) {
        (Some(before), Some(pid)) => Some(process_cpu_seconds(pid)? - before),
        _ => None,
    };
    for orderer in &mut orderers {
        orderer.stop();
    }
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
        consensus: point.label.clone(),
        nodes: orderers.len(),
        send_to: if orderers.len() == 1 {
            "leader".to_owned()
        } else {
            args.send_to.clone()
        },
        envelope_bytes: point.size,
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
        cpu_seconds_by_node: measured.cpu_seconds_by_node,
        cpu_utilisation: measured.cpu_seconds / seconds.max(f64::MIN_POSITIVE) / cores as f64,
        cpu_us_per_envelope: measured.cpu_seconds * 1e6 / transactions.max(1) as f64,
        broker_cpu_us_per_envelope: broker_cpu_seconds
            .map(|seconds| seconds * 1e6 / transactions.max(1) as f64),
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
    cpu_seconds_by_node: Vec<f64>,
}

/// Sends `envelopes` over `clients` streams spread over `targets`, and
/// watches the blocks on the first of `orderers`.
async fn measure(
    orderers: &[NodeProcess],
    targets: &[&NodeProcess],
    client: &Signer,
    channel_id: &str,
    clients: usize,
    envelopes: Vec<(String, Envelope)>,
) -> Result<Measured> {
    let total = envelopes.len();
    let mut connections = Vec::new();
    for orderer in targets {
        connections.push(
            tonic::transport::Endpoint::from_shared(format!("http://{}", orderer.grpc))?
                .connect()
                .await
                .with_context(|| format!("connecting to the orderer at {}", orderer.grpc))?,
        );
    }
    let watched = &orderers[0];
    let connection = tonic::transport::Endpoint::from_shared(format!("http://{}", watched.grpc))?
        .connect()
        .await
        .with_context(|| format!("connecting to the orderer at {}", watched.grpc))?;
    let request = weft_protos::tx::signed_envelope(
        HeaderType::DeliverSeekInfo,
        channel_id,
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

    let cpu_before = cpu_by_node(orderers)?;
    let started = Instant::now();
    let mut shares: Vec<Vec<(String, Envelope)>> = (0..clients).map(|_| Vec::new()).collect();
    for (index, envelope) in envelopes.into_iter().enumerate() {
        shares[index % clients].push(envelope);
    }
    let senders: Vec<_> = shares
        .into_iter()
        .enumerate()
        .map(|(index, share)| {
            tokio::spawn(broadcast_all(
                AtomicBroadcastClient::new(connections[index % connections.len()].clone()),
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
    let cpu_seconds_by_node: Vec<f64> = cpu_by_node(orderers)?
        .into_iter()
        .zip(cpu_before)
        .map(|(after, before)| after - before)
        .collect();
    let cpu_seconds = cpu_seconds_by_node.iter().sum();
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
        cpu_seconds_by_node,
    })
}

fn cpu_by_node(orderers: &[NodeProcess]) -> Result<Vec<f64>> {
    orderers.iter().map(NodeProcess::cpu_seconds).collect()
}

/// The CPU time process `pid` has used, in seconds.
fn process_cpu_seconds(pid: i32) -> Result<f64> {
    let stat = procfs::process::Process::new(pid)
        .and_then(|process| process.stat())
        .with_context(|| format!("--kafka-pid {pid}: reading the process's CPU time"))?;
    Ok(super::stat_cpu_seconds(&stat))
}

/// Deletes a finished run's topic (its orderers stopped), so that a sweep
/// does not leave every envelope it ordered on the broker's disk. A broker
/// that refuses is named with the way to clean up by hand; the run's
/// figures stand.
fn delete_topic(brokers: &[String], topic: &str) {
    let deleted = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| {
            runtime
                .block_on(weft_orderer::delete_channel_topic(brokers, topic))
                .map_err(anyhow::Error::from)
        });
    if let Err(error) = deleted {
        eprintln!(
            "warning: the run's topic {topic} stays on the broker ({error:#}); \
             `bash deploy/kafka.sh clean` deletes every topic of a broker it started"
        );
    }
}

/// How long Kafka orderers may take to create their topic and answer.
const KAFKA_READY_MAX: Duration = Duration::from_secs(60);

/// Waits until `orderer` reports every channel healthy: a Kafka channel is
/// not until its partition has taken a record from the orderer.
fn wait_until_healthy(orderer: &NodeProcess) -> Result<()> {
    let deadline = Instant::now() + KAFKA_READY_MAX;
    loop {
        match http_get(orderer.operations()?, "/healthz") {
            Ok(_) => return Ok(()),
            Err(error) if Instant::now() > deadline => {
                bail!("the orderer at {} is not healthy: {error:#}", orderer.grpc)
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// A port free on loopback now (for a Raft node's cluster listener, which
/// the channel config must name before the node starts), outside the
/// ephemeral ports that outgoing connections could take before the node
/// binds it.
fn free_port() -> Result<u16> {
    crate::network::free_port()
}

/// The index of the Raft leader among `orderers`, once every node knows
/// it (a follower that knows no leader refuses what it is sent), as their
/// metrics say.
fn wait_for_leader(orderers: &[NodeProcess]) -> Result<usize> {
    let deadline = Instant::now() + LEADER_WAIT_MAX;
    loop {
        let mut leader = None;
        let mut known = Vec::new();
        for (index, orderer) in orderers.iter().enumerate() {
            let metrics = http_get(orderer.operations()?, "/metrics")?;
            if metric_sum(&metrics, "consensus_etcdraft_is_leader") >= 1.0 {
                leader = Some(index);
            }
            known.push(metric_sum(&metrics, "consensus_etcdraft_leader_id"));
        }
        if let Some(leader) = leader
            && known.iter().all(|id| *id == (leader + 1) as f64)
        {
            return Ok(leader);
        }
        if Instant::now() > deadline {
            bail!("no Raft leader after {LEADER_WAIT_MAX:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
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

/// Writes the solo orderer's config, listening on a free port.
pub(super) fn write_orderer_config(
    channel: &BenchChannel,
    durability: &str,
    dir: &Path,
) -> Result<PathBuf> {
    write_node_config(channel, durability, dir, None)
}

/// Writes the config of a Raft or Kafka node: orderer `index` of the
/// channel, serving cluster traffic on `cluster_port`.
fn write_cluster_config(
    channel: &BenchChannel,
    durability: &str,
    dir: &Path,
    index: usize,
    cluster_port: u16,
) -> Result<PathBuf> {
    write_node_config(channel, durability, dir, Some((index, cluster_port)))
}

/// An orderer's config, listening on a free port: solo, or Raft node
/// `index` with its cluster port.
fn write_node_config(
    channel: &BenchChannel,
    durability: &str,
    dir: &Path,
    raft: Option<(usize, u16)>,
) -> Result<PathBuf> {
    let (name, consensus) = match raft {
        None => (String::new(), "consensus:\n  type: solo\n".to_owned()),
        Some((index, port)) => (
            index.to_string(),
            format!("consensus:\n  type: channel\ncluster:\n  listenAddress: 127.0.0.1:{port}\n"),
        ),
    };
    let index = raft.map_or(0, |(index, _)| index);
    let path = dir.join(format!("orderer{name}.yaml"));
    let text = format!(
        "orderer:\n  id: bench-orderer{name}\n  listenAddress: 127.0.0.1:0\n  localMspId: OrdererMSP\n  \
         mspConfigPath: {msp}\n  fileSystemPath: {data}\n\
         channels:\n  - genesisBlock: {genesis}\n\
         ledger:\n  durability: {durability}\n\
         {consensus}",
        msp = channel.orderer_msp(index).display(),
        data = dir.join(format!("data{name}")).display(),
        genesis = channel.genesis_path.display(),
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

fn print_table(results: &[RunResult], cores: usize) {
    println!();
    println!(
        "| consensus | nodes | sent to | envelope bytes | clients | durability | tx/s | blocks | answer p50 ms | answer p99 ms | ordered p50 ms | ordered p99 ms | orderer CPU % of {cores} cores | orderer CPU µs/tx | broker CPU µs/tx |"
    );
    println!("|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.0} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {} |",
            r.consensus,
            r.nodes,
            r.send_to,
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
            r.broker_cpu_us_per_envelope
                .map_or_else(|| "-".to_owned(), |broker| format!("{broker:.1}")),
        );
    }
    println!();
}
