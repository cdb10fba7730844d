//! `weft bench endorser`: how many proposals a peer's endorser answers.
//!
//! A solo orderer and one peer run as `weft` processes; the transfer
//! accounts are created through them first (committed transactions), so
//! that transfer proposals read real state. For each workload and client
//! count, proposals are signed up front by org1's User1, then `--clients`
//! concurrent clients, each on its own connection, send them to
//! `protos.Endorser/ProcessProposal` as fast as they are answered. Every
//! answer must be an endorsement. Nothing is submitted: this measures the
//! endorser alone.
//!
//! Workloads: `kv` puts a fresh key with a 20-byte value (Thakkar's 1w);
//! `transfer` moves 1 between two existing accounts, reading and writing
//! both (FastFabric); `shim` is `kv` through an external chaincode server
//! at `--external` that serves `put <key> <value>` as
//! `tests/js/chaincode.js` (Fabric's Node.js shim) does.
//!
//! Reported per run: proposals per second (first send to last answer),
//! latency percentiles, and the peer process's CPU time per proposal split
//! by the endorser's phases (check, simulate, sign, from its metrics).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use rayon::prelude::*;
use serde::Serialize;
use weft_msp::Signer;
use weft_protos::common::Status;
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;
use weft_protos::protos::SignedProposal;
use weft_protos::protos::endorser_client::EndorserClient;
use weft_protos::tx::{Invocation, Proposal};

use super::orderer::write_orderer_config;
use super::{
    BenchChannel, NodeProcess, TRANSFER_CHAINCODE, Transfer, WorkDir, http_get, metric_sum,
    quantile, set_endorsement, summary_line, write_json,
};
use crate::client::Dialer;

const CHANNEL: &str = "bench";
/// The name the peer knows the `--external` chaincode by.
const SHIM_CHAINCODE: &str = "kvshim";
/// Accounts created for the transfer workload.
const ACCOUNTS: usize = 1000;
/// How long the bench waits for the accounts to commit.
const SEEDING_MAX: Duration = Duration::from_secs(120);

/// A workload of `weft bench endorser`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Put a fresh key with a 20-byte value (built-in `kv`).
    Kv,
    /// Move 1 between two existing accounts (built-in `transfer`).
    Transfer,
    /// Put a fresh key through the external chaincode at `--external`.
    Shim,
}

/// Options of `weft bench endorser`.
#[derive(Debug, Clone, clap::Args)]
pub struct EndorserBenchArgs {
    /// Workloads to run (comma-separated): kv, transfer, shim (needs
    /// --external).
    #[arg(long, value_delimiter = ',', default_value = "kv,transfer")]
    workloads: Vec<Workload>,
    /// Concurrent clients (comma-separated): one run per count.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    clients: Vec<usize>,
    /// Proposals per run.
    #[arg(long, default_value_t = 20_000)]
    proposals: usize,
    /// host:port of a chaincode server (chaincode as a service) that
    /// serves `put <key> <value>`, for the shim workload, such as
    /// `node tests/js/chaincode.js 127.0.0.1:9999 kvshim:1`.
    #[arg(long)]
    external: Option<String>,
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
    workload: Workload,
    clients: usize,
    proposals: u64,
    seconds: f64,
    proposals_per_second: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    /// Peer process CPU time per proposal.
    cpu_us_per_proposal: f64,
    /// Time in each endorser phase per proposal.
    check_us_per_proposal: f64,
    simulate_us_per_proposal: f64,
    sign_us_per_proposal: f64,
    #[serde(skip)]
    latencies: Vec<Duration>,
}

/// Runs the bench and prints its report.
pub fn run(args: &EndorserBenchArgs) -> Result<()> {
    if args.proposals == 0 || args.clients.contains(&0) || args.clients.is_empty() {
        bail!("--proposals and every --clients count must be at least 1");
    }
    if args.workloads.contains(&Workload::Shim) && args.external.is_none() {
        bail!("--workloads shim: name the chaincode server with --external host:port");
    }
    let work = WorkDir::new(args.dir.as_deref())?;
    let dir = work.path().to_owned();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "weft bench endorser: {cores} cores, working in {}",
        dir.display()
    );
    let channel = BenchChannel::create(&dir.join("network"), CHANNEL, |profile| {
        set_endorsement(profile, "ANY Endorsement");
        if let Some(orderer) = &mut profile.orderer {
            orderer.batch_timeout = "100ms".to_owned();
        }
    })?;
    let client = channel.user("org1", "User1")?;
    let orderer_dir = dir.join("orderer");
    std::fs::create_dir_all(&orderer_dir)?;
    let orderer_config = write_orderer_config(&channel, "every-block", &orderer_dir)?;
    let orderer = NodeProcess::start("orderer", &orderer_config, &orderer_dir.join("orderer.log"))?;
    let peer_dir = dir.join("peer");
    std::fs::create_dir_all(&peer_dir)?;
    let peer_config =
        write_peer_config(&channel, orderer.grpc, args.external.as_deref(), &peer_dir)?;
    let peer = NodeProcess::start("peer", &peer_config, &peer_dir.join("peer.log"))?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let accounts: Vec<String> = (0..ACCOUNTS).map(|n| format!("account{n:05}")).collect();
    if args.workloads.contains(&Workload::Transfer) {
        let started = Instant::now();
        runtime.block_on(create_accounts(
            &channel,
            &client,
            &accounts,
            orderer.grpc,
            &peer,
        ))?;
        println!(
            "created {} accounts in {:.1?}",
            accounts.len(),
            started.elapsed()
        );
    }

    let mut results = Vec::new();
    for (run_index, &workload) in args.workloads.iter().enumerate() {
        for &clients in &args.clients {
            let proposals =
                sign_proposals(&client, workload, args.proposals, run_index, &accounts)?;
            let result = runtime
                .block_on(measure(&peer, workload, clients, proposals))
                .with_context(|| format!("{workload:?} with {clients} clients"))?;
            println!(
                "{:?}, {clients} clients: {:.0} proposals/s, p50 {:.2} ms, p99 {:.2} ms, \
                 peer CPU {:.0} µs/proposal (check {:.0}, simulate {:.0}, sign {:.0})",
                workload,
                result.proposals_per_second,
                result.p50_ms,
                result.p99_ms,
                result.cpu_us_per_proposal,
                result.check_us_per_proposal,
                result.simulate_us_per_proposal,
                result.sign_us_per_proposal,
            );
            results.push(result);
        }
    }
    print_table(&results, cores);
    write_json(args.json.as_deref(), &results)?;
    // The best run's figures, in the line every bench ends with.
    let best = results
        .iter_mut()
        .max_by(|a, b| a.proposals_per_second.total_cmp(&b.proposals_per_second))
        .ok_or_else(|| anyhow!("no run"))?;
    let line = summary_line(
        "endorsed",
        best.proposals,
        Duration::from_secs_f64(best.seconds),
        &mut best.latencies,
    );
    println!("{line}");
    Ok(())
}

/// Creates `accounts` (pairs at the initial balance) with committed
/// transactions endorsed by the peer, and waits until the peer has them.
async fn create_accounts(
    channel: &BenchChannel,
    client: &Signer,
    accounts: &[String],
    orderer: SocketAddr,
    peer: &NodeProcess,
) -> Result<()> {
    let endorser = channel.peer("org1", "peer0")?;
    let envelopes = accounts
        .chunks(2)
        .map(|pair| {
            let transfer = Transfer {
                channel_id: CHANNEL,
                from: pair[0].clone(),
                to: pair
                    .get(1)
                    .cloned()
                    .unwrap_or_else(|| format!("{}-b", pair[0])),
                moved: 0,
                read_at: None,
                padding: Bytes::new(),
            };
            Ok(transfer.transaction(client, &[&endorser])?.1)
        })
        .collect::<Result<Vec<_>>>()?;
    let created = envelopes.len();
    let mut answers = AtomicBroadcastClient::new(Dialer::default().connect(orderer).await?)
        .broadcast(tokio_stream::iter(envelopes))
        .await
        .context("the orderer refused the Broadcast stream")?
        .into_inner();
    while let Some(answer) = answers.message().await? {
        if answer.status != Status::Success as i32 {
            bail!("creating accounts: the orderer answered {}", answer.info);
        }
    }
    let operations = peer.operations()?;
    let valid =
        format!("ledger_transaction_count{{channel=\"{CHANNEL}\",validation_code=\"VALID\"}}");
    let started = Instant::now();
    loop {
        let metrics =
            tokio::task::spawn_blocking(move || http_get(operations, "/metrics")).await??;
        if metric_sum(&metrics, &valid) >= created as f64 {
            return Ok(());
        }
        if started.elapsed() > SEEDING_MAX {
            bail!("the peer did not commit the {created} account creations within {SEEDING_MAX:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `count` proposals of `workload`, signed by `client`, on all cores.
fn sign_proposals(
    client: &Signer,
    workload: Workload,
    count: usize,
    run_index: usize,
    accounts: &[String],
) -> Result<Vec<SignedProposal>> {
    let value = "v".repeat(20);
    (0..count)
        .into_par_iter()
        .map(|n| {
            let (chaincode, args) = match workload {
                Workload::Kv | Workload::Shim => {
                    let chaincode = if workload == Workload::Kv {
                        "kv"
                    } else {
                        SHIM_CHAINCODE
                    };
                    (
                        chaincode,
                        [
                            "put".to_owned(),
                            format!("key{run_index}-{n}"),
                            value.clone(),
                        ],
                    )
                }
                Workload::Transfer => {
                    let from = &accounts[(2 * n) % accounts.len()];
                    let to = &accounts[(2 * n + 1) % accounts.len()];
                    (
                        TRANSFER_CHAINCODE,
                        ["transfer".to_owned(), from.clone(), to.clone()],
                    )
                }
            };
            let mut args: Vec<Bytes> = args.into_iter().map(Bytes::from).collect();
            if workload == Workload::Transfer {
                args.push(Bytes::from_static(b"1"));
            }
            let invocation = Invocation {
                channel_id: CHANNEL,
                chaincode,
                args,
                nonce: client.new_nonce()?,
                timestamp_seconds: weft_msp::now(),
            };
            let proposal = Proposal::new(&invocation, client.serialized_identity().clone());
            Ok(proposal.signed(client)?)
        })
        .collect()
}

/// Sends every proposal with `clients` concurrent clients; what it took.
async fn measure(
    peer: &NodeProcess,
    workload: Workload,
    clients: usize,
    proposals: Vec<SignedProposal>,
) -> Result<RunResult> {
    let operations = peer.operations()?;
    let phases_before = phase_seconds(operations).await?;
    let cpu_before = peer.cpu_seconds()?;
    let proposals = Arc::new(proposals);
    let next = Arc::new(AtomicUsize::new(0));
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(EndorserClient::new(
            weft_protos::dial::ending_with_last_message(
                Dialer::default().connect(peer.grpc).await?,
            ),
        ));
    }
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for mut endorser in connections {
        let proposals = proposals.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(signed) = proposals.get(index) else {
                    return Ok::<_, anyhow::Error>(latencies);
                };
                let sent = Instant::now();
                let response = endorser
                    .process_proposal(signed.clone())
                    .await
                    .context("ProcessProposal failed")?
                    .into_inner();
                latencies.push(sent.elapsed());
                if response.endorsement.is_none() {
                    let answer = response.response.unwrap_or_default();
                    bail!(
                        "proposal {index} not endorsed: status {}: {}",
                        answer.status,
                        answer.message
                    );
                }
            }
        }));
    }
    let mut latencies = Vec::with_capacity(proposals.len());
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    let cpu = peer.cpu_seconds()? - cpu_before;
    let phases_after = phase_seconds(operations).await?;
    latencies.sort_unstable();
    let count = latencies.len() as f64;
    let ms = |q: f64| quantile(&latencies, q).as_secs_f64() * 1000.0;
    let per_proposal_us = |seconds: f64| seconds / count * 1e6;
    Ok(RunResult {
        workload,
        clients,
        proposals: latencies.len() as u64,
        seconds: elapsed.as_secs_f64(),
        proposals_per_second: count / elapsed.as_secs_f64(),
        p50_ms: ms(0.50),
        p95_ms: ms(0.95),
        p99_ms: ms(0.99),
        cpu_us_per_proposal: per_proposal_us(cpu),
        check_us_per_proposal: per_proposal_us(phases_after[0] - phases_before[0]),
        simulate_us_per_proposal: per_proposal_us(phases_after[1] - phases_before[1]),
        sign_us_per_proposal: per_proposal_us(phases_after[2] - phases_before[2]),
        latencies,
    })
}

/// The endorser's seconds so far in its check, simulate and sign phases.
async fn phase_seconds(operations: SocketAddr) -> Result<[f64; 3]> {
    let metrics = tokio::task::spawn_blocking(move || http_get(operations, "/metrics")).await??;
    Ok(["check", "simulate", "sign"].map(|phase| {
        metric_sum(
            &metrics,
            &format!("weft_endorser_phase_seconds_total{{phase=\"{phase}\"}}"),
        )
    }))
}

/// Writes the peer's config, listening on free ports; it dials `external`
/// as the `kvshim` chaincode.
fn write_peer_config(
    channel: &BenchChannel,
    orderer: SocketAddr,
    external: Option<&str>,
    dir: &Path,
) -> Result<PathBuf> {
    let path = dir.join("peer.yaml");
    let chaincode = external.map_or_else(String::new, |address| {
        format!(
            "chaincode:\n  external:\n    - name: {SHIM_CHAINCODE}\n      address: \"{address}\"\n"
        )
    });
    let text = format!(
        "peer:\n  id: bench-peer\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
         mspConfigPath: {msp}\n  fileSystemPath: {data}\n\
         channels:\n  - genesisBlock: {genesis}\n\
         orderers: [\"{orderer}\"]\n\
         {chaincode}\
         operations:\n  listenAddress: 127.0.0.1:0\n",
        msp = channel.peer_msp("org1", "peer0").display(),
        data = dir.join("data").display(),
        genesis = channel.genesis_path.display(),
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

fn print_table(results: &[RunResult], cores: usize) {
    println!();
    println!(
        "| workload | clients | proposals/s | p50 ms | p95 ms | p99 ms | peer CPU µs/proposal ({cores} cores) | check µs | simulate µs | sign µs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        println!(
            "| {:?} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} |",
            r.workload,
            r.clients,
            r.proposals_per_second,
            r.p50_ms,
            r.p95_ms,
            r.p99_ms,
            r.cpu_us_per_proposal,
            r.check_us_per_proposal,
            r.simulate_us_per_proposal,
            r.sign_us_per_proposal,
        );
    }
    println!();
}
