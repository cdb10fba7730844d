//! `weft bench network`: the transfer workload against a running network,
//! driven as a Fabric client drives one. For each transaction the client
//! sends a signed proposal to every endorsing peer
//! (`protos.Endorser/ProcessProposal`), checks that they agree, assembles
//! and signs the transaction, broadcasts it to the orderer
//! (`orderer.AtomicBroadcast/Broadcast`), and waits for the peers' commit
//! events (`protos.Deliver/DeliverFiltered`).
//!
//! Closed loop: `--concurrency` pairs of accounts are created with the
//! built-in `transfer` chaincode, then each pair moves money in turn: its
//! next transfer is proposed once every endorsing peer has committed the
//! previous one, so that all of them simulate on the same state. Reported:
//! committed transfers per second, and the latency from proposing a
//! transfer to the first peer's commit event, the moment a Fabric client
//! learns its transaction committed.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use weft_msp::Signer;
use weft_protos::common::{Envelope, Status};
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;
use weft_protos::protos::endorser_client::EndorserClient;
use weft_protos::protos::{FilteredBlock, TxValidationCode};
use weft_protos::tx::{Invocation, Proposal};

use super::{TRANSFER_CHAINCODE, load_signer, org_msp_id, summary_line};
use crate::client::{connect, next_block, subscribe};

/// How long the bench waits for any progress before giving up.
const IDLE_MAX: Duration = Duration::from_secs(60);
/// Each account's balance when created.
const OPENING_BALANCE: u64 = 1_000_000;

/// Options of `weft bench network`.
#[derive(Debug, Clone, clap::Args)]
pub struct NetworkBenchArgs {
    /// The orderer to broadcast to.
    #[arg(long, default_value = "127.0.0.1:7050")]
    orderer: SocketAddr,
    /// The endorsing peers (comma-separated): enough of them for the
    /// channel's endorsement policy. Their commit events are watched.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:7051")]
    peers: Vec<SocketAddr>,
    /// The network's crypto folder (the output of `weft crypto generate`);
    /// the client is org1's User1.
    #[arg(long)]
    crypto: PathBuf,
    /// The channel to run on.
    #[arg(long, default_value = "mychannel")]
    channel: String,
    /// Transfers to commit.
    #[arg(long, default_value_t = 20_000)]
    transactions: usize,
    /// Account pairs moving money at once: transfers in flight.
    #[arg(long, default_value_t = 1000)]
    concurrency: usize,
}

/// A transaction being endorsed, ordered or committed.
struct InFlight {
    pair: usize,
    proposed: Instant,
    is_transfer: bool,
    /// Peers that have not reported its commit yet.
    peers_pending: usize,
    /// The first commit event's code.
    code: Option<i32>,
}

/// A transaction endorsed and ready to broadcast.
struct Endorsed {
    tx_id: String,
    pair: usize,
    proposed: Instant,
    is_transfer: bool,
    outcome: Result<Envelope, String>,
}

/// Runs the workload and prints what it measured.
pub fn run(args: &NetworkBenchArgs) -> Result<()> {
    if args.concurrency == 0 || args.transactions == 0 || args.peers.is_empty() {
        bail!("--concurrency, --transactions and --peers must not be zero or empty");
    }
    let client = load_signer(
        &args
            .crypto
            .join("peerOrganizations/org1.example.com/users/User1@org1.example.com/msp"),
        &org_msp_id("org1"),
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(drive(args, Arc::new(client)))
}

async fn drive(args: &NetworkBenchArgs, client: Arc<Signer>) -> Result<()> {
    // Commit events of every peer, merged.
    let (events, mut commits) = mpsc::channel::<Result<FilteredBlock>>(64);
    for peer in &args.peers {
        let mut stream = subscribe(*peer, &args.channel, &client).await?;
        let events = events.clone();
        tokio::spawn(async move {
            loop {
                let block = next_block(&mut stream).await;
                let failed = block.is_err();
                if events.send(block).await.is_err() || failed {
                    return;
                }
            }
        });
    }
    drop(events);
    let mut endorsers = Vec::new();
    for peer in &args.peers {
        endorsers.push(EndorserClient::new(connect(*peer).await?));
    }
    let (outbox, outgoing) = mpsc::channel::<Envelope>(4096);
    let mut answers = AtomicBroadcastClient::new(connect(args.orderer).await?)
        .broadcast(ReceiverStream::new(outgoing))
        .await
        .context("the orderer refused the Broadcast stream")?
        .into_inner();
    let refusals = tokio::spawn(async move {
        while let Some(answer) = answers.message().await? {
            if answer.status != Status::Success as i32 {
                bail!(
                    "the orderer answered {} ({})",
                    Status::try_from(answer.status)
                        .map_or("an unknown status", |s| s.as_str_name()),
                    answer.info
                );
            }
        }
        Ok::<(), anyhow::Error>(())
    });
    let (endorsed_tx, mut endorsed) = mpsc::channel::<Endorsed>(4096);
    let proposer = Proposer {
        channel: args.channel.clone(),
        client,
        endorsers,
        done: endorsed_tx,
    };

    // Accounts unique to this run, so runs can follow each other on one
    // ledger.
    let run_id = hex::encode(&proposer.client.new_nonce()?[..4]);
    let accounts: Vec<[String; 2]> = (0..args.concurrency)
        .map(|index| {
            [
                format!("{run_id}-{index:06}-a"),
                format!("{run_id}-{index:06}-b"),
            ]
        })
        .collect();
    println!(
        "weft bench network: {} transfers on channel {}, {} account pairs, orderer {}, peers {:?}",
        args.transactions, args.channel, args.concurrency, args.orderer, args.peers
    );
    for (pair, names) in accounts.iter().enumerate() {
        for name in names {
            let args = ["create", name.as_str(), &OPENING_BALANCE.to_string()].map(str::to_owned);
            proposer.propose(pair, false, args);
        }
    }

    let mut in_flight: HashMap<String, InFlight> = HashMap::new();
    let mut creations_left = vec![2u8; accounts.len()];
    let mut proposed_transfers = 0usize;
    let mut latencies: Vec<Duration> = Vec::with_capacity(args.transactions);
    let mut codes: BTreeMap<String, u64> = BTreeMap::new();
    let mut refused_endorsements = 0u64;
    let mut started: Option<Instant> = None;
    let mut outstanding = 2 * accounts.len();
    while outstanding > 0 {
        if refusals.is_finished() {
            refusals.await.map_err(|e| anyhow!("{e}"))??;
            bail!("the orderer closed the Broadcast stream");
        }
        let idle = tokio::time::sleep(IDLE_MAX);
        tokio::select! {
            () = idle => bail!("nothing happened for {IDLE_MAX:?}: {outstanding} transactions outstanding"),
            Some(ready) = endorsed.recv() => match ready.outcome {
                Ok(envelope) => {
                    in_flight.insert(ready.tx_id, InFlight {
                        pair: ready.pair,
                        proposed: ready.proposed,
                        is_transfer: ready.is_transfer,
                        peers_pending: args.peers.len(),
                        code: None,
                    });
                    outbox.send(envelope).await.map_err(|_| anyhow!("the Broadcast stream closed"))?;
                }
                Err(reason) => {
                    refused_endorsements += 1;
                    outstanding -= 1;
                    tracing::warn!(pair = ready.pair, %reason, "endorsement failed");
                }
            },
            block = commits.recv() => {
                let block = block.ok_or_else(|| anyhow!("every peer's event stream ended"))??;
                let arrived = Instant::now();
                for transaction in &block.filtered_transactions {
                    let Some(flight) = in_flight.get_mut(&transaction.txid) else {
                        continue;
                    };
                    if flight.code.is_none() {
                        flight.code = Some(transaction.tx_validation_code);
                        if flight.is_transfer {
                            latencies.push(arrived - flight.proposed);
                            let code = TxValidationCode::try_from(transaction.tx_validation_code)
                                .map_or("UNKNOWN", |code| code.as_str_name());
                            *codes.entry(code.to_owned()).or_default() += 1;
                        }
                    }
                    flight.peers_pending -= 1;
                    if flight.peers_pending > 0 {
                        continue;
                    }
                    let Some(flight) = in_flight.remove(&transaction.txid) else {
                        continue;
                    };
                    outstanding -= 1;
                    let valid = flight.code == Some(TxValidationCode::Valid as i32);
                    let pair = flight.pair;
                    let next = if flight.is_transfer {
                        valid
                    } else {
                        creations_left[pair] -= 1;
                        valid && creations_left[pair] == 0
                    };
                    if next && proposed_transfers < args.transactions {
                        proposed_transfers += 1;
                        outstanding += 1;
                        started.get_or_insert_with(Instant::now);
                        let [from, to] = &accounts[pair];
                        proposer.propose(pair, true, ["transfer", from, to, "1"].map(str::to_owned));
                    }
                }
            }
        }
    }
    drop(outbox);
    let elapsed = started.map_or(Duration::ZERO, |started| started.elapsed());
    let committed = latencies.len() as u64;
    let summary: Vec<String> = codes
        .iter()
        .map(|(code, n)| format!("{n} {code}"))
        .collect();
    println!("validation codes: {}", summary.join(", "));
    if refused_endorsements > 0 {
        println!("endorsements refused or disagreeing: {refused_endorsements}");
    }
    let valid = codes.get("VALID").copied().unwrap_or(0);
    println!(
        "{}",
        summary_line("committed", valid, elapsed, &mut latencies)
    );
    if valid != committed || refused_endorsements > 0 || committed < args.transactions as u64 {
        bail!("{valid} of {} transfers committed VALID", args.transactions);
    }
    Ok(())
}

/// Proposes transactions to every endorser in the background and hands
/// the endorsed envelopes back.
struct Proposer {
    channel: String,
    client: Arc<Signer>,
    endorsers: Vec<EndorserClient<Channel>>,
    done: mpsc::Sender<Endorsed>,
}

impl Proposer {
    fn propose<const N: usize>(&self, pair: usize, is_transfer: bool, args: [String; N]) {
        let channel = self.channel.clone();
        let client = self.client.clone();
        let endorsers = self.endorsers.clone();
        let done = self.done.clone();
        tokio::spawn(async move {
            let proposed = Instant::now();
            let (tx_id, outcome) = endorse(&channel, &client, endorsers, &args).await;
            let _ = done
                .send(Endorsed {
                    tx_id,
                    pair,
                    proposed,
                    is_transfer,
                    outcome,
                })
                .await;
        });
    }
}

/// Proposes `args` to the `transfer` chaincode on every endorser and
/// assembles the transaction.
async fn endorse(
    channel: &str,
    client: &Signer,
    endorsers: Vec<EndorserClient<Channel>>,
    args: &[String],
) -> (String, Result<Envelope, String>) {
    let nonce = match client.new_nonce() {
        Ok(nonce) => nonce,
        Err(error) => return (String::new(), Err(error.to_string())),
    };
    let invocation = Invocation {
        channel_id: channel,
        chaincode: TRANSFER_CHAINCODE,
        args: args.iter().map(|arg| Bytes::from(arg.clone())).collect(),
        nonce,
        timestamp_seconds: weft_msp::now(),
    };
    let proposal = Proposal::new(&invocation, client.serialized_identity().clone());
    let tx_id = proposal.tx_id.clone();
    let outcome = async {
        let signed = proposal.signed(client).map_err(|e| e.to_string())?;
        let mut responses = Vec::with_capacity(endorsers.len());
        for mut endorser in endorsers {
            let response = endorser
                .process_proposal(signed.clone())
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let status = response.response.as_ref().map_or(0, |r| r.status);
            if status != 200 {
                let message = response.response.map(|r| r.message).unwrap_or_default();
                return Err(format!("status {status}: {message}"));
            }
            responses.push(response);
        }
        proposal
            .transaction(&responses, client)
            .map_err(|e| e.to_string())
    }
    .await;
    (tx_id, outcome)
}
