//! `weft bench floor`: what this machine charges for a stream transaction's
//! protocol alone, with nothing of weft's in between.
//!
//! A streamed transaction costs the default network (three Raft orderers,
//! two peers) about 2 ms of server CPU at 500 tx/s on a 2-core machine,
//! against a target of 1 ms (docs/benchmarks.md). Some of that cost is not
//! weft's to cut: the messages the protocol sends between nodes, the
//! synced writes that make a transaction durable, and the ECDSA signatures
//! Fabric's formats require. This bench pays exactly those and nothing
//! else, so that what a node spends above it is known to be its own
//! software (gRPC and HTTP/2, protobuf, RocksDB, raft-rs, the ledger).
//!
//! Six threads stand for the six processes of `weft bench --stream`: a
//! client, three orderers (the first leads) and two peers, each a tokio
//! runtime of one thread, exchanging length-prefixed frames over loopback
//! TCP. Per transaction, as weft's stream mode at low load:
//!
//! - the client signs a ~3 KB proposal and sends it to a peer (the two
//!   alternate), which verifies it, signs an endorsement and answers;
//! - the client signs the envelope and sends it to an orderer picked by
//!   the transaction's number; a follower verifies it and forwards it to
//!   the leader, the leader verifies what reaches it directly;
//! - the leader sends the entry to both followers and appends it to its
//!   log with a synced write; each follower appends it, syncs and
//!   acknowledges; with one acknowledgement the leader commits and tells
//!   both followers;
//! - every orderer hashes the block, signs it (at low load every stream
//!   block is a checkpoint), sends it to the peer attached to it (peer 0
//!   to the leader, peer 1 to a follower) and, on one orderer, to the
//!   client's block observer, and answers SUCCESS to the client if the
//!   envelope came to it;
//! - each peer verifies the block's signature, the creator's signature and
//!   the other peer's endorsement, appends the block, answers the client's
//!   signed commit-status request (which it verifies) once the block is
//!   applied, as weft's peers answer with `gateway.commitStatus: applied`,
//!   then syncs the block and sends the client a block event.
//!
//! So five synced writes, eight verifications and four signatures per
//! transaction on the servers, and some fifteen messages, as weft counts
//! them (docs/benchmarks.md, twelfth slice). The logs and block files are
//! written in advance and overwritten, as a recycled RocksDB log is.
//! Threads cost the machine a little less than processes (no change of
//! address space on a switch), so this is a floor in that respect too.
//!
//! Reported: each thread's CPU time per transaction over the middle half
//! of the run (from `/proc`), the servers' sum, and the client's latency
//! from proposal to commit-status answer (applied).

use std::collections::{HashMap, HashSet};
use std::io::{Seek, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use ring::digest::{Context as Digest, SHA256, digest};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use weft_msp::{Identity, MspManager, Signer};

use super::{BenchChannel, WorkDir, quantile, stat_cpu_seconds, summary_line, write_json};
use crate::bench::load::parse_duration;

/// Options of `weft bench floor`.
#[derive(Debug, Clone, clap::Args)]
pub struct FloorBenchArgs {
    /// Transactions per second, started at even intervals (open loop).
    #[arg(long, default_value_t = 500)]
    rate: u32,
    /// How long the client sends; CPU is counted over the middle half.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    duration: Duration,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What `--json` holds.
#[derive(Debug, Serialize)]
struct FloorResults {
    rate: u32,
    committed: u64,
    /// Each thread's CPU per transaction, by thread name.
    cpu_ms_per_tx: HashMap<&'static str, f64>,
    servers_cpu_ms_per_tx: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// The size of a proposal's payload, about a transfer transaction's.
const PAYLOAD_BYTES: usize = 3000;
/// What each node's log or block file is written to before the run, per
/// transaction the run sends: more than an entry or a block takes.
const FILE_BYTES_PER_TX: u64 = 4 << 10;
/// How long the nodes' connections get to settle before the first send.
const SETTLE: Duration = Duration::from_secs(2);
/// How long after the last send the client waits for the last answer.
const ANSWERS_WAIT_MAX: Duration = Duration::from_secs(30);

/// The six threads: orderers 0..3 (0 leads), peers 3..5, the client.
const ORDERERS: [usize; 3] = [0, 1, 2];
const LEADER: usize = 0;
const PEERS: [usize; 2] = [3, 4];
const CLIENT: usize = 5;
const NAMES: [&str; 6] = [
    "floor-orderer0",
    "floor-orderer1",
    "floor-orderer2",
    "floor-peer0",
    "floor-peer1",
    "floor-client",
];
/// The orderer whose blocks the client also watches, as `weft bench`
/// watches one orderer's Deliver stream.
const OBSERVED: usize = 2;

/// The peer that endorses transaction `tx`, and answers its status.
fn endorser_of(tx: u64) -> usize {
    PEERS[(tx % 2) as usize]
}

/// The orderer the client sends transaction `tx` to: spread evenly, in an
/// order that does not follow the endorsing peer's.
fn orderer_of(tx: u64) -> usize {
    ORDERERS[((tx.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % 3) as usize]
}

/// The orderer that delivers blocks to `peer`.
fn source_of(peer: usize) -> usize {
    if peer == PEERS[0] { LEADER } else { 1 }
}

/// What a frame carries; its number on the wire is its place in [`KINDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Proposal,
    Endorsement,
    Envelope,
    Success,
    Forward,
    Append,
    Ack,
    Commit,
    Block,
    Event,
    Status,
    StatusAnswer,
}

/// Every kind, in the order of their numbers.
const KINDS: [Kind; 12] = [
    Kind::Proposal,
    Kind::Endorsement,
    Kind::Envelope,
    Kind::Success,
    Kind::Forward,
    Kind::Append,
    Kind::Ack,
    Kind::Commit,
    Kind::Block,
    Kind::Event,
    Kind::Status,
    Kind::StatusAnswer,
];

/// A message: its kind, a number (a transaction's, or a log index), bytes.
#[derive(Debug)]
struct Frame {
    kind: Kind,
    number: u64,
    body: Vec<u8>,
}

/// Wire form: `[u32 length][u8 kind][u64 number][body]`, length counting
/// kind, number and body.
async fn send(to: &mut OwnedWriteHalf, kind: Kind, number: u64, body: &[u8]) -> Result<()> {
    let length = u32::try_from(body.len() + 9).context("a frame over 4 GiB")?;
    let mut bytes = Vec::with_capacity(body.len() + 13);
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.push(kind as u8);
    bytes.extend_from_slice(&number.to_le_bytes());
    bytes.extend_from_slice(body);
    to.write_all(&bytes).await.context("sending a frame")
}

async fn receive(from: &mut OwnedReadHalf) -> Result<Option<Frame>> {
    let mut length = [0u8; 4];
    if from.read_exact(&mut length).await.is_err() {
        return Ok(None);
    }
    let length = u32::from_le_bytes(length) as usize;
    if length < 9 {
        bail!("a frame of {length} bytes");
    }
    let mut bytes = vec![0u8; length];
    from.read_exact(&mut bytes)
        .await
        .context("reading a frame")?;
    let kind = *KINDS
        .get(bytes[0] as usize)
        .ok_or_else(|| anyhow!("unknown frame kind {}", bytes[0]))?;
    let number = u64::from_le_bytes(bytes[1..9].try_into()?);
    bytes.drain(..9);
    Ok(Some(Frame {
        kind,
        number,
        body: bytes,
    }))
}

/// Parts, each after its `u32` length.
fn join(parts: &[&[u8]]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(parts.iter().map(|part| 4 + part.len()).sum());
    for part in parts {
        bytes.extend_from_slice(&(part.len() as u32).to_le_bytes());
        bytes.extend_from_slice(part);
    }
    bytes
}

/// The `N` parts of what [`join`] made.
fn split<const N: usize>(mut bytes: &[u8]) -> Result<[&[u8]; N]> {
    let mut parts = [&bytes[..0]; N];
    for part in &mut parts {
        let length = bytes
            .get(..4)
            .ok_or_else(|| anyhow!("a message cut short"))?;
        let length = u32::from_le_bytes(length.try_into()?) as usize;
        if bytes.len() < 4 + length {
            bail!("a message cut short");
        }
        (*part, bytes) = bytes[4..].split_at(length);
    }
    Ok(parts)
}

/// Every signer of the run and the verifying identity of each, from the
/// default network's crypto material.
struct Keys {
    client: Signer,
    client_identity: Arc<Identity>,
    peers: Vec<Signer>,
    peer_identities: Vec<Arc<Identity>>,
    orderers: Vec<Signer>,
    orderer_identities: Vec<Arc<Identity>>,
}

impl Keys {
    fn load(channel: &BenchChannel) -> Result<Self> {
        let crypto = channel.dir.join("crypto");
        let msp = |dir: &str, msp_id: &str| -> Result<weft_msp::Msp> {
            Ok(weft_msp::folder::load(&crypto.join(dir).join("msp"), msp_id)?.msp()?)
        };
        let manager = MspManager::new([
            msp("peerOrganizations/org1.example.com", "Org1MSP")?,
            msp("peerOrganizations/org2.example.com", "Org2MSP")?,
            msp("ordererOrganizations/example.com", "OrdererMSP")?,
        ]);
        let now = weft_msp::now();
        let identity = |signer: &Signer| -> Result<Arc<Identity>> {
            Ok(manager.deserialize(signer.serialized_identity(), now)?)
        };
        let client = channel.user("org1", "User1")?;
        let peers = vec![
            channel.peer("org1", "peer0")?,
            channel.peer("org2", "peer0")?,
        ];
        let orderers = ORDERERS
            .iter()
            .map(|index| channel.orderer(*index))
            .collect::<Result<Vec<_>>>()?;
        let keys = Self {
            client_identity: identity(&client)?,
            peer_identities: peers.iter().map(identity).collect::<Result<_>>()?,
            orderer_identities: orderers.iter().map(identity).collect::<Result<_>>()?,
            client,
            peers,
            orderers,
        };
        keys.warm()?;
        Ok(keys)
    }

    /// Verifies enough with each key that it earns its table, as the keys
    /// of a running network have.
    fn warm(&self) -> Result<()> {
        let signers = std::iter::once(&self.client)
            .chain(&self.peers)
            .chain(&self.orderers);
        let identities = std::iter::once(&self.client_identity)
            .chain(&self.peer_identities)
            .chain(&self.orderer_identities);
        for (signer, identity) in signers.zip(identities) {
            let signature = signer.sign(b"warm")?;
            for _ in 0..=weft_msp::crypto::TABLE_AFTER_USES {
                identity.verify(b"warm", &signature)?;
            }
        }
        Ok(())
    }
}

/// A node's connections: where it writes to each other node, and one
/// queue of every frame it receives.
struct Links {
    to: HashMap<usize, OwnedWriteHalf>,
    inbox: mpsc::UnboundedReceiver<Frame>,
}

impl Links {
    /// Dials `dial` (each learns who called from a first byte) and accepts
    /// `accept` connections on `listener`.
    async fn open(
        me: usize,
        listener: TcpListener,
        addresses: &[SocketAddr],
        dial: &[usize],
        accept: usize,
    ) -> Result<Self> {
        let (frames, inbox) = mpsc::unbounded_channel();
        let mut to = HashMap::new();
        for &node in dial {
            let stream = TcpStream::connect(addresses[node]).await?;
            stream.set_nodelay(true)?;
            let (read, mut write) = stream.into_split();
            write.write_all(&[me as u8]).await?;
            spawn_reader(read, frames.clone());
            to.insert(node, write);
        }
        for _ in 0..accept {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let (mut read, write) = stream.into_split();
            let mut caller = [0u8; 1];
            read.read_exact(&mut caller).await?;
            spawn_reader(read, frames.clone());
            to.insert(caller[0] as usize, write);
        }
        Ok(Self { to, inbox })
    }

    async fn send(&mut self, node: usize, kind: Kind, number: u64, body: &[u8]) -> Result<()> {
        let to = self
            .to
            .get_mut(&node)
            .ok_or_else(|| anyhow!("no connection to node {node}"))?;
        send(to, kind, number, body).await
    }
}

fn spawn_reader(mut read: OwnedReadHalf, frames: mpsc::UnboundedSender<Frame>) {
    tokio::task::spawn_local(async move {
        while let Ok(Some(frame)) = receive(&mut read).await {
            if frames.send(frame).is_err() {
                return;
            }
        }
    });
}

/// Where a node's file goes, and how large it is written before the run.
#[derive(Debug, Clone)]
struct Files {
    dir: PathBuf,
    bytes: u64,
}

/// A file written to its full size and synced before the run, then
/// overwritten from its start: appends to it sync no change of size.
struct SyncedFile(std::fs::File);

impl Files {
    fn create(&self, name: &str) -> Result<SyncedFile> {
        let path = self.dir.join(name);
        let mut file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..self.bytes.div_ceil(chunk.len() as u64) {
            file.write_all(&chunk)?;
        }
        file.sync_all()?;
        file.rewind()?;
        Ok(SyncedFile(file))
    }
}

impl SyncedFile {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.0.write_all(bytes).context("writing")
    }

    fn sync(&mut self) -> Result<()> {
        self.0.sync_data().context("syncing")
    }
}

/// What a server thread starts with.
struct Node {
    me: usize,
    listener: TcpListener,
    addresses: Arc<Vec<SocketAddr>>,
    keys: Arc<Keys>,
    files: Files,
}

/// One orderer: Raft's messages and synced log writes without Raft's
/// elections or terms, then a signed block per entry.
async fn orderer(node: Node) -> Result<()> {
    let (me, keys) = (node.me, node.keys);
    let mut log = node.files.create(&format!("raft{me}"))?;
    let followers = [ORDERERS[1], ORDERERS[2]];
    let attached: Vec<usize> = PEERS.into_iter().filter(|p| source_of(*p) == me).collect();
    let (dial, accept) = if me == LEADER {
        (vec![], followers.len() + 1 + attached.len())
    } else {
        (vec![LEADER], 1 + attached.len())
    };
    let mut links = Links::open(me, node.listener, &node.addresses, &dial, accept).await?;
    let signer = &keys.orderers[me];
    let mut entries: HashMap<u64, (u64, Vec<u8>)> = HashMap::new();
    let mut received_here = HashSet::new();
    let (mut last_index, mut synced, mut acknowledged, mut committed, mut applied) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut previous_hash = [0u8; 32];
    while let Some(first) = links.inbox.recv().await {
        // Whatever else has arrived goes into the same synced write.
        let mut frames = vec![first];
        while let Ok(frame) = links.inbox.try_recv() {
            frames.push(frame);
        }
        let mut appended = false;
        for frame in frames {
            match frame.kind {
                Kind::Envelope | Kind::Forward => {
                    if frame.kind == Kind::Envelope {
                        let [payload, signature] = split(&frame.body)?;
                        keys.client_identity.verify(payload, signature)?;
                        received_here.insert(frame.number);
                    }
                    if me != LEADER {
                        links
                            .send(LEADER, Kind::Forward, frame.number, &frame.body)
                            .await?;
                        continue;
                    }
                    last_index += 1;
                    let mut entry = last_index.to_le_bytes().to_vec();
                    entry.extend_from_slice(&frame.body);
                    for follower in followers {
                        links
                            .send(follower, Kind::Append, frame.number, &entry)
                            .await?;
                    }
                    log.write(&frame.body)?;
                    entries.insert(last_index, (frame.number, frame.body));
                    appended = true;
                }
                Kind::Append => {
                    let index = u64::from_le_bytes(
                        frame
                            .body
                            .get(..8)
                            .ok_or_else(|| anyhow!("a short entry"))?
                            .try_into()?,
                    );
                    log.write(&frame.body[8..])?;
                    last_index = last_index.max(index);
                    entries.insert(index, (frame.number, frame.body[8..].to_vec()));
                    appended = true;
                }
                Kind::Ack => acknowledged = acknowledged.max(frame.number),
                Kind::Commit => committed = committed.max(frame.number),
                other => bail!("orderer {me} received a {other:?}"),
            }
        }
        if appended {
            log.sync()?;
            synced = last_index;
            if me != LEADER {
                links.send(LEADER, Kind::Ack, synced, &[]).await?;
            }
        }
        if me == LEADER && synced.min(acknowledged) > committed {
            committed = synced.min(acknowledged);
            for follower in followers {
                links.send(follower, Kind::Commit, committed, &[]).await?;
            }
        }
        while applied < committed.min(synced) {
            applied += 1;
            let (tx, envelope) = entries
                .remove(&applied)
                .ok_or_else(|| anyhow!("entry {applied} missing"))?;
            let mut header = Digest::new(&SHA256);
            header.update(&applied.to_le_bytes());
            header.update(&previous_hash);
            header.update(digest(&SHA256, &envelope).as_ref());
            previous_hash = header.finish().as_ref().try_into()?;
            // The envelope is already two parts: payload and signature.
            let signature = signer.sign(&previous_hash)?;
            let block = [join(&[&previous_hash, &signature]), envelope].concat();
            for peer in &attached {
                links.send(*peer, Kind::Block, tx, &block).await?;
            }
            if me == OBSERVED {
                links.send(CLIENT, Kind::Block, tx, &block).await?;
            }
            if received_here.remove(&tx) {
                links.send(CLIENT, Kind::Success, tx, &[]).await?;
            }
        }
    }
    Ok(())
}

/// One peer: endorses, then validates and durably appends each block.
async fn peer(node: Node) -> Result<()> {
    let (me, keys) = (node.me, node.keys);
    let mut blocks = node.files.create(&format!("blocks{me}"))?;
    let mut links = Links::open(me, node.listener, &node.addresses, &[source_of(me)], 1).await?;
    let index = me - PEERS[0];
    let mut applied = HashSet::new();
    let mut waiting = HashSet::new();
    while let Some(frame) = links.inbox.recv().await {
        match frame.kind {
            Kind::Proposal => {
                let [proposal, signature] = split(&frame.body)?;
                keys.client_identity.verify(proposal, signature)?;
                let endorsement = keys.peers[index].sign(proposal)?;
                links
                    .send(CLIENT, Kind::Endorsement, frame.number, &endorsement)
                    .await?;
            }
            Kind::Block => {
                let [header, signature, payload, creator_signature] = split(&frame.body)?;
                keys.orderer_identities[source_of(me)].verify(header, signature)?;
                keys.client_identity.verify(payload, creator_signature)?;
                let endorser = endorser_of(frame.number);
                if endorser != me {
                    // A peer recognises its own endorsements.
                    let [proposal, endorsement] = split(payload)?;
                    keys.peer_identities[endorser - PEERS[0]].verify(proposal, endorsement)?;
                }
                // Applied: the commit status is answered before the sync,
                // as a peer with `gateway.commitStatus: applied` answers
                // it; the block event (durable) after.
                blocks.write(&frame.body)?;
                if waiting.remove(&frame.number) {
                    links
                        .send(CLIENT, Kind::StatusAnswer, frame.number, &[])
                        .await?;
                } else if endorser == me {
                    applied.insert(frame.number);
                }
                blocks.sync()?;
                links
                    .send(
                        CLIENT,
                        Kind::Event,
                        frame.number,
                        &frame.number.to_le_bytes(),
                    )
                    .await?;
            }
            Kind::Status => {
                let [request, signature] = split(&frame.body)?;
                keys.client_identity.verify(request, signature)?;
                if applied.remove(&frame.number) {
                    links
                        .send(CLIENT, Kind::StatusAnswer, frame.number, &[])
                        .await?;
                } else {
                    waiting.insert(frame.number);
                }
            }
            other => bail!("peer {me} received a {other:?}"),
        }
    }
    Ok(())
}

/// The client: an open loop at `rate`, each transaction from its proposal
/// to its commit-status answer. The latency of each.
async fn client(
    addresses: Arc<Vec<SocketAddr>>,
    keys: Arc<Keys>,
    rate: u32,
    duration: Duration,
) -> Result<Vec<Duration>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let nodes: Vec<usize> = ORDERERS.into_iter().chain(PEERS).collect();
    let mut links = Links::open(CLIENT, listener, &addresses, &nodes, 0).await?;
    tokio::time::sleep(SETTLE).await;
    let total = (f64::from(rate) * duration.as_secs_f64()) as u64;
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let started = tokio::time::Instant::now();
    let give_up = started + duration + ANSWERS_WAIT_MAX;
    let mut proposals: HashMap<u64, (Instant, Vec<u8>)> = HashMap::new();
    let mut latencies = Vec::with_capacity(total as usize);
    let mut next = 0u64;
    let mut payload = vec![0u8; PAYLOAD_BYTES];
    while (latencies.len() as u64) < total {
        let due = started + interval.mul_f64(next as f64);
        tokio::select! {
            biased;
            frame = links.inbox.recv() => {
                let frame = frame.ok_or_else(|| anyhow!("every node closed its connection"))?;
                let tx = frame.number;
                match frame.kind {
                    Kind::Endorsement => {
                        let (_, proposal) = proposals
                            .get(&tx)
                            .ok_or_else(|| anyhow!("an endorsement of no proposal"))?;
                        let payload = join(&[proposal, &frame.body]);
                        let envelope = join(&[&payload, &keys.client.sign(&payload)?]);
                        links.send(orderer_of(tx), Kind::Envelope, tx, &envelope).await?;
                    }
                    Kind::Success => {
                        let mut request = [0u8; 64];
                        request[..8].copy_from_slice(&tx.to_le_bytes());
                        let request = join(&[&request, &keys.client.sign(&request)?]);
                        links.send(endorser_of(tx), Kind::Status, tx, &request).await?;
                    }
                    Kind::StatusAnswer => {
                        let (sent, _) = proposals
                            .remove(&tx)
                            .ok_or_else(|| anyhow!("a status of no proposal"))?;
                        latencies.push(sent.elapsed());
                    }
                    Kind::Event | Kind::Block => {}
                    other => bail!("the client received a {other:?}"),
                }
            }
            () = tokio::time::sleep_until(due), if next < total => {
                // Each payload differs from the last, as transactions do.
                payload[..8].copy_from_slice(&next.to_le_bytes());
                let proposal = join(&[&payload, &keys.client.sign(&payload)?]);
                proposals.insert(next, (Instant::now(), payload.clone()));
                links.send(endorser_of(next), Kind::Proposal, next, &proposal).await?;
                next += 1;
            }
            () = tokio::time::sleep_until(give_up) => {
                bail!(
                    "{} of {total} transactions unanswered {ANSWERS_WAIT_MAX:?} after the last \
                     was sent",
                    total - latencies.len() as u64
                );
            }
        }
    }
    Ok(latencies)
}

/// The CPU seconds of each of this process's threads, by thread name.
fn threads_cpu_seconds() -> Result<HashMap<String, f64>> {
    let mut seconds = HashMap::new();
    for task in procfs::process::Process::myself()?.tasks()? {
        let stat = task?.stat()?;
        seconds.insert(stat.comm.clone(), stat_cpu_seconds(&stat));
    }
    Ok(seconds)
}

pub fn run(args: &FloorBenchArgs) -> Result<()> {
    if args.rate == 0 || args.duration < Duration::from_secs(4) {
        bail!("--rate must be at least 1 and --duration at least 4s");
    }
    let work = WorkDir::new(None)?;
    let channel = BenchChannel::create(work.path(), "floor", |_| {})?;
    let keys = Arc::new(Keys::load(&channel)?);
    let listeners = (0..NAMES.len())
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let addresses = Arc::new(
        listeners
            .iter()
            .map(std::net::TcpListener::local_addr)
            .collect::<std::io::Result<Vec<_>>>()?,
    );
    println!(
        "weft bench floor: a stream transaction's messages, synced writes and signatures between \
         six threads over loopback TCP, open loop at {} tx/s for {:?}",
        args.rate, args.duration
    );
    let files = Files {
        dir: work.path().to_owned(),
        bytes: (f64::from(args.rate) * args.duration.as_secs_f64()) as u64 * FILE_BYTES_PER_TX,
    };
    let mut threads = Vec::new();
    for (me, listener) in listeners.into_iter().enumerate() {
        let (addresses, keys, files) = (addresses.clone(), keys.clone(), files.clone());
        let (rate, duration) = (args.rate, args.duration);
        let thread = std::thread::Builder::new()
            .name(NAMES[me].to_owned())
            .spawn(move || -> Result<Vec<Duration>> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, async move {
                    if me == CLIENT {
                        return client(addresses, keys, rate, duration).await;
                    }
                    listener.set_nonblocking(true)?;
                    let node = Node {
                        me,
                        listener: TcpListener::from_std(listener)?,
                        addresses,
                        keys,
                        files,
                    };
                    if ORDERERS.contains(&me) {
                        orderer(node).await?;
                    } else {
                        peer(node).await?;
                    }
                    Ok(Vec::new())
                })
            })?;
        threads.push(thread);
    }
    let client = threads.pop().ok_or_else(|| anyhow!("no client thread"))?;
    // The middle half of the sending, after the files are written and the
    // connections settled.
    std::thread::sleep(SETTLE + args.duration / 4 + Duration::from_secs(1));
    let before = threads_cpu_seconds()?;
    std::thread::sleep(args.duration / 2);
    let after = threads_cpu_seconds()?;
    let outcome = client
        .join()
        .map_err(|_| anyhow!("the client thread panicked"))?;
    let mut latencies = match outcome {
        Ok(latencies) => latencies,
        Err(error) => {
            // A node that failed closed its connections: its error says why.
            for (thread, name) in threads.into_iter().zip(NAMES) {
                if thread.is_finished()
                    && let Ok(Err(node_error)) = thread.join()
                {
                    return Err(node_error.context(format!("in {name}")));
                }
            }
            return Err(error);
        }
    };
    let counted = f64::from(args.rate) * (args.duration / 2).as_secs_f64();
    let mut cpu_ms_per_tx = HashMap::new();
    let mut servers = 0.0;
    println!("| thread | CPU per tx (ms) |\n|---|---|");
    for (index, name) in NAMES.into_iter().enumerate() {
        let (Some(before), Some(after)) = (before.get(name), after.get(name)) else {
            bail!("the {name} thread ended before the run did");
        };
        let per_tx = (after - before) * 1e3 / counted;
        if index != CLIENT {
            servers += per_tx;
        }
        cpu_ms_per_tx.insert(name, per_tx);
        println!("| {name} | {per_tx:.3} |");
    }
    latencies.sort_unstable();
    let (p50_ms, p99_ms) = (
        quantile(&latencies, 0.5).as_secs_f64() * 1e3,
        quantile(&latencies, 0.99).as_secs_f64() * 1e3,
    );
    println!("| the five servers | {servers:.3} |");
    println!("latency, proposal to commit-status answer: p50 {p50_ms:.2} ms, p99 {p99_ms:.2} ms");
    let total = latencies.len() as u64;
    write_json(
        args.json.as_deref(),
        &FloorResults {
            rate: args.rate,
            committed: total,
            cpu_ms_per_tx,
            servers_cpu_ms_per_tx: servers,
            p50_ms,
            p99_ms,
        },
    )?;
    println!(
        "{}",
        summary_line("committed", total, args.duration, &mut latencies)
    );
    // The node threads wait on each other's connections forever; the
    // process ends with the command.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_parts_split_back_and_a_cut_message_is_refused() {
        let joined = join(&[b"payload", b"", b"signature"]);
        let [payload, empty, signature] = split(&joined).unwrap();
        assert_eq!(
            (payload, empty, signature),
            (&b"payload"[..], &b""[..], &b"signature"[..])
        );
        // Fewer parts may be read than were joined; the rest is ignored.
        let [payload] = split(&joined).unwrap();
        assert_eq!(payload, b"payload");
        for cut in [0, 3, 4, 10, joined.len() - 1] {
            assert!(split::<3>(&joined[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn each_kind_is_read_back_from_its_number() {
        for (number, kind) in KINDS.into_iter().enumerate() {
            assert_eq!(kind as usize, number);
        }
    }

    #[test]
    fn transactions_spread_over_both_peers_and_all_orderers() {
        let mut peers = [0; 2];
        let mut orderers = [0; 3];
        for tx in 0..3000 {
            peers[endorser_of(tx) - PEERS[0]] += 1;
            orderers[orderer_of(tx)] += 1;
        }
        assert_eq!(peers, [1500, 1500]);
        for count in orderers {
            assert!((900..=1100).contains(&count), "{orderers:?}");
        }
    }
}
