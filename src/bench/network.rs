//! `weft bench network`: the transfer workload against a running network,
//! the way a Fabric client drives one. Transactions go to the orderer over
//! `orderer.AtomicBroadcast/Broadcast`; their fate is read from a peer's
//! filtered block events (`protos.Deliver/DeliverFiltered`), the commit
//! events Fabric's SDKs wait for.
//!
//! Closed loop: `--concurrency` pairs of accounts each move money in turn;
//! a pair's next transfer is sent as soon as its previous one is committed,
//! reading the accounts at the version that commit gave them. Reported:
//! committed transfers per second and the latency from sending a transfer
//! to seeing it committed.
//!
//! Until weft's endorsers exist, the bench simulates each transfer itself
//! and has it endorsed with the keys of the organisations' peer0 found in
//! the network's crypto folder: the endorsement those peers would sign.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use prost::Message;
use rayon::prelude::*;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use weft_msp::Signer;
use weft_protos::common::{Envelope, HeaderType, Status};
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;
use weft_protos::orderer::seek_info::SeekBehavior;
use weft_protos::orderer::seek_position::Type as SeekType;
use weft_protos::orderer::{SeekInfo, SeekNewest, SeekPosition, SeekSpecified};
use weft_protos::protos::deliver_client::DeliverClient;
use weft_protos::protos::deliver_response::Type as PeerResponse;
use weft_protos::protos::{FilteredBlock, TxValidationCode};

use super::{Transfer, load_signer, org_msp_id, summary_line};

/// Options of `weft bench network`.
#[derive(Debug, Clone, clap::Args)]
pub struct NetworkBenchArgs {
    /// The orderer to broadcast to.
    #[arg(long, default_value = "127.0.0.1:7050")]
    orderer: SocketAddr,
    /// The peer whose commit events are watched.
    #[arg(long, default_value = "127.0.0.1:7051")]
    peer: SocketAddr,
    /// The network's crypto folder (the output of `weft crypto generate`).
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
    /// The organisations whose peer0 endorses each transfer
    /// (comma-separated), enough for the channel's endorsement policy.
    #[arg(long, value_delimiter = ',', default_value = "org1,org2")]
    endorsers: Vec<String>,
}

/// Who signs what.
struct Parties {
    client: Signer,
    endorsers: Vec<Signer>,
}

impl Parties {
    fn load(crypto: &Path, endorsers: &[String]) -> Result<Self> {
        let org_dir = |org: &str| crypto.join(format!("peerOrganizations/{org}.example.com"));
        Ok(Self {
            client: load_signer(
                &org_dir("org1").join("users/User1@org1.example.com/msp"),
                &org_msp_id("org1"),
            )?,
            endorsers: endorsers
                .iter()
                .map(|org| {
                    load_signer(
                        &org_dir(org).join(format!("peers/peer0.{org}.example.com/msp")),
                        &org_msp_id(org),
                    )
                })
                .collect::<Result<_>>()?,
        })
    }
}

/// One pair of accounts and where its last transfer stands.
struct Pair {
    from: String,
    to: String,
    /// Transfers made so far (0: the accounts are being created).
    moved: i64,
}

/// A transaction sent and not yet seen committed.
struct InFlight {
    pair: usize,
    sent: Instant,
    creates_accounts: bool,
}

/// Runs the workload and prints what it measured.
pub fn run(args: &NetworkBenchArgs) -> Result<()> {
    if args.concurrency == 0 || args.transactions == 0 {
        bail!("--concurrency and --transactions must be at least 1");
    }
    let parties = Parties::load(&args.crypto, &args.endorsers)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(drive(args, &parties))
}

async fn drive(args: &NetworkBenchArgs, parties: &Parties) -> Result<()> {
    let mut commits = subscribe(args.peer, &args.channel, &parties.client).await?;
    let orderer = tonic::transport::Endpoint::from_shared(format!("http://{}", args.orderer))?
        .connect()
        .await
        .with_context(|| format!("connecting to the orderer at {}", args.orderer))?;
    let (outbox, outgoing) = mpsc::channel::<Envelope>(4096);
    let mut answers = AtomicBroadcastClient::new(orderer)
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

    // Accounts unique to this run, so runs can follow each other on one
    // ledger.
    let run_id = hex::encode(&parties.client.new_nonce()?[..4]);
    let mut pairs: Vec<Pair> = (0..args.concurrency)
        .map(|index| Pair {
            from: format!("{run_id}-{index:06}-a"),
            to: format!("{run_id}-{index:06}-b"),
            moved: 0,
        })
        .collect();
    println!(
        "weft bench network: {} transfers on channel {}, {} account pairs, orderer {}, peer {}",
        args.transactions, args.channel, args.concurrency, args.orderer, args.peer
    );

    let mut in_flight: HashMap<String, InFlight> = HashMap::new();
    let creations: Vec<(usize, Option<(u64, u64)>)> = (0..pairs.len()).map(|p| (p, None)).collect();
    send(
        &args.channel,
        parties,
        &pairs,
        &creations,
        &outbox,
        &mut in_flight,
    )
    .await?;

    let mut sent_transfers = 0usize;
    let mut latencies: Vec<Duration> = Vec::with_capacity(args.transactions);
    let mut codes: BTreeMap<String, u64> = BTreeMap::new();
    let mut started: Option<Instant> = None;
    while latencies.len() < args.transactions && !in_flight.is_empty() {
        let block = next_block(&mut commits).await?;
        let arrived = Instant::now();
        let mut next = Vec::new();
        for (index, transaction) in block.filtered_transactions.iter().enumerate() {
            let Some(flight) = in_flight.remove(&transaction.txid) else {
                continue;
            };
            let code = TxValidationCode::try_from(transaction.tx_validation_code)
                .map_or("UNKNOWN", |code| code.as_str_name());
            if !flight.creates_accounts {
                latencies.push(arrived - flight.sent);
                *codes.entry(code.to_owned()).or_default() += 1;
            }
            if transaction.tx_validation_code == TxValidationCode::Valid as i32
                && sent_transfers < args.transactions
            {
                sent_transfers += 1;
                next.push((flight.pair, Some((block.number, index as u64))));
            }
        }
        if started.is_none() && !next.is_empty() {
            started = Some(Instant::now());
        }
        for &(pair, _) in &next {
            pairs[pair].moved += 1;
        }
        send(
            &args.channel,
            parties,
            &pairs,
            &next,
            &outbox,
            &mut in_flight,
        )
        .await?;
    }
    drop(outbox);
    if refusals.is_finished() {
        refusals.await.map_err(|e| anyhow!("{e}"))??;
    }
    let elapsed = started.map_or(Duration::ZERO, |started| started.elapsed());
    let committed = latencies.len() as u64;
    let summary: Vec<String> = codes
        .iter()
        .map(|(code, n)| format!("{n} {code}"))
        .collect();
    println!("validation codes: {}", summary.join(", "));
    let valid = codes.get("VALID").copied().unwrap_or(0);
    println!(
        "{}",
        summary_line("committed", valid, elapsed, &mut latencies)
    );
    if valid != committed {
        bail!(
            "{} of {committed} transfers were not VALID",
            committed - valid
        );
    }
    Ok(())
}

/// Signs the transfers of `batch` (pair, version its accounts were last
/// written at) in parallel, records them as in flight and queues them for
/// the orderer.
async fn send(
    channel: &str,
    parties: &Parties,
    pairs: &[Pair],
    batch: &[(usize, Option<(u64, u64)>)],
    outbox: &mpsc::Sender<Envelope>,
    in_flight: &mut HashMap<String, InFlight>,
) -> Result<()> {
    let endorsers: Vec<&Signer> = parties.endorsers.iter().collect();
    let transactions = tokio::task::block_in_place(|| {
        batch
            .par_iter()
            .map(|&(pair, read_at)| {
                let transfer = Transfer {
                    channel_id: channel,
                    from: pairs[pair].from.clone(),
                    to: pairs[pair].to.clone(),
                    moved: pairs[pair].moved,
                    read_at,
                    padding: Bytes::new(),
                };
                transfer
                    .transaction(&parties.client, &endorsers)
                    .map(|(tx_id, envelope)| (pair, read_at, tx_id, envelope))
            })
            .collect::<Result<Vec<_>>>()
    })?;
    for (pair, read_at, tx_id, envelope) in transactions {
        in_flight.insert(
            tx_id,
            InFlight {
                pair,
                sent: Instant::now(),
                creates_accounts: read_at.is_none(),
            },
        );
        outbox
            .send(envelope)
            .await
            .map_err(|_| anyhow!("the Broadcast stream closed"))?;
    }
    Ok(())
}

/// The peer's filtered blocks from the newest on.
async fn subscribe(
    peer: SocketAddr,
    channel: &str,
    client: &Signer,
) -> Result<tonic::Streaming<weft_protos::protos::DeliverResponse>> {
    let connection = tonic::transport::Endpoint::from_shared(format!("http://{peer}"))?
        .connect()
        .await
        .with_context(|| format!("connecting to the peer at {peer}"))?;
    let seek = SeekInfo {
        start: Some(SeekPosition {
            r#type: Some(SeekType::Newest(SeekNewest {})),
        }),
        stop: Some(SeekPosition {
            r#type: Some(SeekType::Specified(SeekSpecified { number: u64::MAX })),
        }),
        behavior: SeekBehavior::BlockUntilReady as i32,
        ..SeekInfo::default()
    };
    let request = weft_protos::tx::signed_envelope(
        HeaderType::DeliverSeekInfo,
        channel,
        seek.encode_to_vec().into(),
        client,
        client.new_nonce()?,
        weft_msp::now(),
    )?;
    Ok(DeliverClient::new(connection)
        .deliver_filtered(tokio_stream::iter([request]))
        .await
        .context("the peer refused the DeliverFiltered request")?
        .into_inner())
}

async fn next_block(
    commits: &mut tonic::Streaming<weft_protos::protos::DeliverResponse>,
) -> Result<FilteredBlock> {
    let response = commits
        .message()
        .await
        .context("the peer's event stream failed")?
        .ok_or_else(|| anyhow!("the peer ended the event stream"))?;
    match response.r#type {
        Some(PeerResponse::FilteredBlock(block)) => Ok(block),
        other => bail!("the peer answered {other:?} where a block was due"),
    }
}
