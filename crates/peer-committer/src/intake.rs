//! Block intake: keeps one channel's committer fed with blocks from the
//! ordering service, as a Fabric peer's deliver client does.
//!
//! An endorser replica (FastFabric's endorser/committer separation) takes
//! its blocks instead from validating peers of its organisation, over
//! `protos.Deliver/Deliver`, and applies them with the codes they carry
//! ([`ChannelCommitter::apply_validated`]) rather than validating again.
//!
//! A fetch task asks an orderer's `AtomicBroadcast/Deliver`, with a seek
//! request signed by the peer, for every block from the next one the peer
//! needs, and queues what arrives; a committer thread runs the pipelined
//! [`ChannelCommitter::commit_stream`] over that queue. The queue is bounded,
//! so a slow committer slows the fetch rather than filling memory.
//!
//! On a runtime of one worker (as `weft network up` gives each node that
//! shares a small machine) the fetch task commits a small block itself
//! when the committer thread has nothing to do: handing it over would cost
//! a wake-up of that thread, and two of the worker's to announce the block
//! applied and committed, more than the commit itself (docs/benchmarks.md,
//! nineteenth slice). A stream checkpoint is announced applied, the worker
//! answers those waiting for it, and only then does the fetch task wait
//! for the sync. Large blocks, a backlog, and the periodic world-state
//! checkpoint stay with the thread.
//!
//! Failures:
//! - A connection that cannot be made, fails or ends: reconnect to the next
//!   orderer endpoint (failover), after an exponential backoff that resets
//!   once a connection delivers, seeking from the next block wanted. Each
//!   round over the endpoints takes them in a fresh random order, as
//!   Fabric's peers pick an orderer at random (or in the listed order).
//! - A block the committer refuses (it does not extend the chain, its data
//!   hash is wrong, or the orderers' signatures do not satisfy the channel's
//!   BlockValidation policy): nothing of it is written; everything queued
//!   after it is dropped, and the fetch starts again from the peer's height
//!   at the next orderer endpoint. On a stream channel the blocks staged
//!   before it are rolled back first, so the fetch starts again from the
//!   last checkpoint.
//! - A failure of the block store or world state stops the channel: the
//!   error is kept in [`IntakeStatus`] for the health check.
//!
//! Blocks queued before a refusal are told apart from those fetched after
//! it by a generation number that the refusal increments.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::{Notify, mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::ClientTlsConfig;
use weft_ledger::BlockStore;
use weft_msp::Signer;
use weft_protos::common::{Block, HeaderType};
use weft_protos::dial::EndpointChoice;
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;
use weft_protos::orderer::deliver_response::Type as Response;
use weft_protos::protos::deliver_client::DeliverClient;
use weft_protos::protos::deliver_response::Type as PeerResponse;
use weft_protos::serve::Keepalive;

/// Blocks from a Deliver stream, or why it stopped.
type BlockStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<Block, String>> + Send>>;

use crate::checks::is_small;
use crate::commit::{Applied, BlockFeed, Checkpointer};
use crate::metrics::CommitterMetrics;
use crate::{ChannelCommitter, ChannelHandle, CommittedBlock, Error};

/// The largest block accepted from an orderer (Fabric's default gRPC
/// message limit).
const BLOCK_BYTES_MAX: usize = 100 * 1024 * 1024;

/// Where a channel's blocks come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BlockSource {
    /// Orderers (`orderer.AtomicBroadcast/Deliver`); every block is
    /// validated here.
    #[default]
    Orderers,
    /// Peers that validate (`protos.Deliver/Deliver`); their blocks carry
    /// validation codes, which are applied as they are.
    ValidatingPeers,
}

impl BlockSource {
    fn noun(self) -> &'static str {
        match self {
            Self::Orderers => "orderer",
            Self::ValidatingPeers => "validating peer",
        }
    }
}

/// How a channel's intake reaches the ordering service.
#[derive(Debug, Clone)]
pub struct IntakeConfig {
    /// Where blocks come from.
    pub source: BlockSource,
    /// Endpoints (`host:port`) of the source, tried in turn.
    pub endpoints: Vec<String>,
    /// In which order: a fresh random one each round (Fabric's peers pick
    /// their orderer at random), or as listed.
    pub endpoint_choice: EndpointChoice,
    /// Blocks prepared (decoded, checked) ahead of the one committing.
    pub pipeline_depth: usize,
    /// Blocks received and waiting for the committer.
    pub queue_blocks: usize,
    /// The first wait before reconnecting; doubled per failure.
    pub backoff_initial: Duration,
    /// The longest wait before reconnecting.
    pub backoff_max: Duration,
    pub connect_timeout: Duration,
    /// Probes of the connection blocks come over: a source that stops
    /// answering (a stopped process, a dead machine) is left for the next
    /// endpoint after `interval` + `timeout` instead of being waited for.
    pub keepalive: Keepalive,
    /// TLS towards the source's endpoints (their CA certificates); `None`
    /// dials in plaintext.
    pub tls: Option<ClientTlsConfig>,
    /// The SHA-256 of the TLS certificate the peer presents, named in its
    /// Deliver requests so that a source requiring client certificates
    /// accepts them; empty without TLS.
    pub tls_cert_hash: Bytes,
    /// How often the world state is made durable (a checkpoint); on restart
    /// the blocks after the last checkpoint are replayed from the block
    /// store.
    pub checkpoint_interval: Duration,
}

impl IntakeConfig {
    /// Defaults for fetching from `orderers`, in a random order: depth 4,
    /// 64 queued blocks, backoff 100 ms up to 10 s, connect timeout 5 s,
    /// Fabric's client keepalive, a state checkpoint every second.
    pub fn new(orderers: Vec<String>) -> Self {
        Self {
            source: BlockSource::Orderers,
            endpoints: orderers,
            endpoint_choice: EndpointChoice::Random,
            pipeline_depth: 4,
            queue_blocks: 64,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            keepalive: Keepalive::CLIENT_DEFAULT,
            tls: None,
            tls_cert_hash: Bytes::new(),
            checkpoint_interval: Duration::from_secs(1),
        }
    }
}

/// What an operator wants to know about a channel's intake.
#[derive(Debug, Default)]
pub struct IntakeStatus {
    /// The orderer endpoint blocks currently come from.
    orderer: Mutex<Option<String>>,
    /// Why the channel stopped committing, if it did.
    fatal: Mutex<Option<String>>,
    refused_blocks: AtomicU64,
}

impl IntakeStatus {
    /// The orderer endpoint currently delivering, if connected.
    pub fn orderer(&self) -> Option<String> {
        self.orderer.lock().clone()
    }

    /// Why the channel stopped committing; `None` while healthy.
    pub fn fatal_error(&self) -> Option<String> {
        self.fatal.lock().clone()
    }

    /// Blocks refused since start.
    pub fn refused_blocks(&self) -> u64 {
        self.refused_blocks.load(Ordering::Relaxed)
    }
}

/// A running intake for one channel.
#[derive(Debug)]
pub struct Intake {
    channel_id: String,
    status: Arc<IntakeStatus>,
    shutdown: watch::Sender<bool>,
    fetch: tokio::task::JoinHandle<()>,
    committer: std::thread::JoinHandle<()>,
}

/// What fetch and commit share.
#[derive(Debug, Default)]
struct Shared {
    /// Incremented by each refusal; blocks queued under an older value are
    /// dropped.
    generation: AtomicU64,
    /// Wakes the fetch when a block was refused.
    refused: Notify,
}

/// A block in the queue, with the generation it was fetched in.
#[derive(Debug)]
struct Queued {
    generation: u64,
    block: Block,
}

impl Intake {
    /// Starts fetching and committing blocks for `committer`'s channel,
    /// asking the orderers as `signer`. Must be called within a Tokio
    /// runtime.
    pub fn start(
        committer: ChannelCommitter,
        signer: Arc<Signer>,
        config: IntakeConfig,
        metrics: Option<Arc<CommitterMetrics>>,
    ) -> std::io::Result<Self> {
        let channel_id = committer.channel_id().to_owned();
        let ledger = committer.handle().ledger;
        if let Some(metrics) = &metrics {
            // A reopened ledger reports its height before any new block.
            metrics.set_height(&channel_id, ledger.height());
        }
        let status = Arc::new(IntakeStatus::default());
        let shared = Arc::new(Shared::default());
        let (queue, queued) = mpsc::channel(config.queue_blocks.max(1));
        let (shutdown, shutdown_seen) = watch::channel(false);

        let feed = Feed {
            queued,
            shared: shared.clone(),
            taken: 0,
        };
        let outcomes = Outcomes {
            channel: channel_id.clone(),
            handle: committer.handle(),
            checkpointer: committer.checkpointer(),
            checkpoint_interval: config.checkpoint_interval,
            source: config.source,
            shared: shared.clone(),
            status: status.clone(),
            metrics: metrics.clone(),
        };
        let committing = Arc::new(Committing {
            state: Mutex::new(CommitState {
                committer,
                last_checkpoint: Instant::now(),
                unsettled: None,
            }),
            with_thread: AtomicUsize::new(0),
            inline: config.source == BlockSource::Orderers
                && tokio::runtime::Handle::current().metrics().num_workers() == 1,
            outcomes,
        });
        let committer = {
            let committing = committing.clone();
            let depth = config.pipeline_depth;
            std::thread::Builder::new()
                .name(format!("commit-{channel_id}"))
                .spawn(move || run_committer(&committing, feed, depth))?
        };
        let fetcher = Fetcher {
            committing,
            channel_id: channel_id.clone(),
            ledger,
            signer,
            config,
            shared,
            status: status.clone(),
            metrics,
            queue,
        };
        let fetch = tokio::spawn(fetcher.run(shutdown_seen));
        Ok(Self {
            channel_id,
            status,
            shutdown,
            fetch,
            committer,
        })
    }

    pub fn channel_id(&self) -> &str {
        &self.channel_id
    }

    pub fn status(&self) -> &Arc<IntakeStatus> {
        &self.status
    }

    /// Stops fetching, commits what was already received, and waits for
    /// the committer to finish.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        if let Err(error) = self.fetch.await {
            tracing::error!(channel = %self.channel_id, %error, "intake: the fetch task failed");
        }
        let committer = self.committer;
        let joined = tokio::task::spawn_blocking(move || committer.join()).await;
        if !matches!(joined, Ok(Ok(()))) {
            tracing::error!(channel = %self.channel_id, "intake: the committer thread failed");
        }
    }
}

/// The committer's view of the queue: blocks of the current generation, in
/// order, until the fetch stops.
struct Feed {
    queued: mpsc::Receiver<Queued>,
    shared: Arc<Shared>,
    /// Blocks taken from the queue, those of an older generation too.
    taken: usize,
}

impl Feed {
    fn current(&self, queued: Queued) -> Option<Block> {
        (queued.generation == self.shared.generation.load(Ordering::Acquire))
            .then_some(queued.block)
    }
}

impl BlockFeed for Feed {
    fn next_block(&mut self) -> Option<Block> {
        loop {
            let queued = self.queued.blocking_recv()?;
            self.taken += 1;
            if let Some(block) = self.current(queued) {
                return Some(block);
            }
        }
    }

    fn arrived(&mut self) -> Option<Block> {
        loop {
            let queued = self.queued.try_recv().ok()?;
            self.taken += 1;
            if let Some(block) = self.current(queued) {
                return Some(block);
            }
        }
    }
}

/// A block that has arrived, then those queued behind it: what the
/// committer thread commits in one hold of the committer.
struct Backlog<'a> {
    first: Option<Block>,
    feed: &'a mut Feed,
}

impl BlockFeed for Backlog<'_> {
    fn next_block(&mut self) -> Option<Block> {
        self.arrived()
    }

    fn arrived(&mut self) -> Option<Block> {
        self.first.take().or_else(|| self.feed.arrived())
    }
}

/// A channel's committer, shared by the committer thread and, on a
/// runtime of one worker, the fetch task.
struct Committing {
    state: Mutex<CommitState>,
    /// Blocks the fetch queued that the committer thread has not finished
    /// with: while there are any, every block goes to the queue behind
    /// them.
    with_thread: AtomicUsize,
    /// Whether the fetch task may commit small blocks itself.
    inline: bool,
    outcomes: Outcomes,
}

struct CommitState {
    committer: ChannelCommitter,
    last_checkpoint: Instant,
    /// A block the fetch task applied and was stopped before it settled:
    /// whoever takes the committer next settles it first.
    unsettled: Option<Applied>,
}

impl CommitState {
    /// Settles a block left applied, if there is one, and records the
    /// outcome ([`Outcomes::record`]).
    fn settle_unsettled(&mut self, outcomes: &Outcomes, may_checkpoint: bool) -> Verdict {
        let Some(applied) = self.unsettled.take() else {
            return Verdict::GoOn;
        };
        let outcome = self.committer.settle(applied);
        outcomes.record(&outcome, &mut self.last_checkpoint, may_checkpoint)
    }
}

/// What a commit's outcome asks of the intake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    GoOn,
    /// The block the chain needed next was refused: fetch from the chain's
    /// height again.
    Refetch,
    /// The channel stopped committing.
    Stop,
}

/// Records commit outcomes: logs, metrics, the periodic world-state
/// checkpoint, and why a channel stopped.
struct Outcomes {
    channel: String,
    handle: ChannelHandle,
    checkpointer: Checkpointer,
    checkpoint_interval: Duration,
    source: BlockSource,
    shared: Arc<Shared>,
    status: Arc<IntakeStatus>,
    metrics: Option<Arc<CommitterMetrics>>,
}

impl Outcomes {
    /// Records `outcome`; with `may_checkpoint`, makes the world state
    /// durable if `last_checkpoint` is older than the interval.
    fn record(
        &self,
        outcome: &crate::Result<CommittedBlock>,
        last_checkpoint: &mut Instant,
        may_checkpoint: bool,
    ) -> Verdict {
        let channel = &self.channel;
        match outcome {
            Ok(block) => {
                tracing::debug!(%channel, block = block.number, "committed");
                if let Some(metrics) = &self.metrics {
                    metrics.block_committed(channel, block);
                    metrics.identity_cache(channel, self.handle.context.read().msps.cache_stats());
                }
                // A stream channel's staged block may still be rolled
                // back: the state is made durable only at a checkpoint.
                if block.staged || !may_checkpoint || !self.checkpoint_due(*last_checkpoint) {
                    return Verdict::GoOn;
                }
                *last_checkpoint = Instant::now();
                match self.checkpointer.checkpoint() {
                    Ok(_) => Verdict::GoOn,
                    Err(error) => {
                        tracing::error!(%channel, %error, "checkpointing the world state failed");
                        *self.status.fatal.lock() = Some(error.to_string());
                        Verdict::Stop
                    }
                }
            }
            Err(error) if refetches(error, self.handle.ledger.height()) => {
                tracing::warn!(%channel, %error, source = self.source.noun(), "refused a block");
                self.status.refused_blocks.fetch_add(1, Ordering::Relaxed);
                if let Some(metrics) = &self.metrics {
                    metrics.block_refused(channel);
                }
                self.shared.generation.fetch_add(1, Ordering::AcqRel);
                Verdict::Refetch
            }
            Err(Error::BadBlock { block, .. }) => {
                // Queued behind a refused block; it will be fetched again.
                tracing::debug!(%channel, block, "dropped a block queued behind a refused one");
                Verdict::GoOn
            }
            Err(error) => {
                tracing::error!(%channel, %error, "the channel stopped committing");
                *self.status.fatal.lock() = Some(error.to_string());
                Verdict::Stop
            }
        }
    }

    fn checkpoint_due(&self, last_checkpoint: Instant) -> bool {
        last_checkpoint.elapsed() >= self.checkpoint_interval
    }
}

/// The committer thread: commits what the fetch queues, each arrival and
/// the backlog behind it in one hold of the committer, until the fetch
/// stops; then makes the world state durable a last time.
fn run_committer(committing: &Committing, mut feed: Feed, depth: usize) {
    let outcomes = &committing.outcomes;
    while let Some(first) = feed.next_block() {
        let mut state = committing.state.lock();
        let mut go_on = state.settle_unsettled(outcomes, true) != Verdict::Stop;
        if go_on {
            let CommitState {
                committer,
                last_checkpoint,
                ..
            } = &mut *state;
            let mut backlog = Backlog {
                first: Some(first),
                feed: &mut feed,
            };
            // Whether to go on; a refusal wakes the fetch to fetch again.
            let mut sink = |outcome: &crate::Result<CommittedBlock>| {
                let verdict = outcomes.record(outcome, last_checkpoint, true);
                if verdict == Verdict::Refetch {
                    outcomes.shared.refused.notify_one();
                }
                go_on = verdict != Verdict::Stop;
                go_on
            };
            match outcomes.source {
                BlockSource::Orderers => {
                    committer.commit_stream(backlog, depth, weft_msp::now, sink);
                }
                BlockSource::ValidatingPeers => {
                    while let Some(block) = backlog.next_block() {
                        if !sink(&committer.apply_validated(block)) {
                            break;
                        }
                    }
                }
            }
        }
        drop(state);
        committing
            .with_thread
            .fetch_sub(std::mem::take(&mut feed.taken), Ordering::AcqRel);
        if !go_on {
            break;
        }
    }
    let mut state = committing.state.lock();
    if state.settle_unsettled(outcomes, true) != Verdict::Stop
        && outcomes.status.fatal_error().is_none()
        && let Err(error) = state.committer.checkpoint()
    {
        let channel = &outcomes.channel;
        tracing::error!(%channel, %error, "the last checkpoint failed");
        *outcomes.status.fatal.lock() = Some(error.to_string());
    }
}

/// Whether the committer refused the block the chain needed next, so that
/// the fetch must start again from the chain's height: a block at the
/// height that failed its checks, or one whose failure rolled back a
/// stream channel's staged blocks (the height is lower now).
fn refetches(error: &Error, height: u64) -> bool {
    match error {
        Error::BadBlock { block, .. } => *block == height,
        Error::RolledBack { .. } => true,
        _ => false,
    }
}

/// How a session with one orderer ended.
#[derive(Debug)]
enum SessionEnd {
    /// The committer refused a block: fetch again from the chain's height.
    Refused,
    /// The committer stopped; nothing more to fetch for.
    CommitterGone,
    /// The connection failed or the orderer ended the stream.
    Failed { reason: String, delivered: bool },
}

/// The async half: fetches blocks and queues them, or commits them itself
/// ([`Committing::inline`]).
struct Fetcher {
    committing: Arc<Committing>,
    channel_id: String,
    ledger: Arc<BlockStore>,
    signer: Arc<Signer>,
    config: IntakeConfig,
    shared: Arc<Shared>,
    status: Arc<IntakeStatus>,
    metrics: Option<Arc<CommitterMetrics>>,
    queue: mpsc::Sender<Queued>,
}

impl Fetcher {
    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        if self.config.endpoints.is_empty() {
            tracing::error!(channel = %self.channel_id, "intake: no endpoints configured");
            return;
        }
        let mut next = self.ledger.height();
        let mut backoff = self.config.backoff_initial;
        // Endpoints that failed since one last delivered: once all have,
        // wait before the next round.
        let mut failed_in_round = 0;
        let count = self.config.endpoints.len();
        let mut order = self.config.endpoint_choice.order(count);
        for attempt in 0.. {
            if attempt > 0 && attempt % count == 0 {
                order = self.config.endpoint_choice.order(count);
            }
            let endpoint = &self.config.endpoints[order[attempt % count]];
            let end = tokio::select! {
                end = self.session(endpoint, &mut next) => end,
                _ = self.shared.refused.notified() => SessionEnd::Refused,
                _ = shutdown.changed() => return,
            };
            *self.status.orderer.lock() = None;
            failed_in_round += 1;
            match end {
                SessionEnd::CommitterGone => return,
                SessionEnd::Refused => {
                    next = self.ledger.height();
                    tracing::warn!(
                        channel = %self.channel_id,
                        orderer = %endpoint,
                        block = next,
                        "fetching again from another orderer after a refused block"
                    );
                }
                SessionEnd::Failed { reason, delivered } => {
                    if delivered {
                        backoff = self.config.backoff_initial;
                        failed_in_round = 1;
                    }
                    tracing::warn!(
                        channel = %self.channel_id,
                        orderer = %endpoint,
                        %reason,
                        "deliver from the orderer ended"
                    );
                }
            }
            if failed_in_round < self.config.endpoints.len() {
                continue;
            }
            failed_in_round = 0;
            tracing::info!(
                channel = %self.channel_id,
                retry_in_ms = backoff.as_millis(),
                "no orderer is delivering; waiting before the next round"
            );
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => return,
            }
            backoff = (backoff * 2).min(self.config.backoff_max);
        }
    }

    /// Streams blocks `next..` from one orderer into the queue.
    async fn session(&self, endpoint: &str, next: &mut u64) -> SessionEnd {
        let generation = self.shared.generation.load(Ordering::Acquire);
        let failed = |reason: String| SessionEnd::Failed {
            reason,
            delivered: false,
        };
        let connection = match weft_protos::dial::endpoint(endpoint, self.config.tls.as_ref()) {
            Ok(endpoint) => weft_protos::dial::with_keepalive(endpoint, self.config.keepalive)
                .connect_timeout(self.config.connect_timeout),
            Err(error) => return failed(format!("bad endpoint: {error}")),
        };
        let connection = match connection.connect().await {
            Ok(connection) => connection,
            Err(error) => return failed(format!("connect: {}", error_chain(&error))),
        };
        let request = match self.seek_request(*next) {
            Ok(request) => request,
            Err(reason) => return failed(reason),
        };
        // The request stream stays open for the session: closing it would
        // read as the client going away.
        let (requests, request_stream) = mpsc::channel(1);
        if requests.send(request).await.is_err() {
            return failed("request stream closed".to_owned());
        }
        let mut blocks = match self.deliver(connection, request_stream).await {
            Ok(blocks) => blocks,
            Err(reason) => return failed(reason),
        };
        *self.status.orderer.lock() = Some(endpoint.to_owned());
        let source = self.config.source.noun();
        tracing::info!(channel = %self.channel_id, %endpoint, source, from = *next, "fetching blocks");
        let mut delivered = false;
        let reason = loop {
            let block = match blocks.next().await {
                Some(Ok(block)) => block,
                Some(Err(reason)) => break reason,
                None => break format!("the {source} closed the stream"),
            };
            let number = block.header.as_ref().map(|header| header.number);
            if number != Some(*next) {
                break format!("the {source} sent block {number:?} where {next} was due");
            }
            let block = match self.commit_here(block).await {
                Ok(Verdict::GoOn) => None,
                Ok(Verdict::Refetch) => return SessionEnd::Refused,
                Ok(Verdict::Stop) => return SessionEnd::CommitterGone,
                Err(block) => Some(block),
            };
            if let Some(block) = block {
                self.committing.with_thread.fetch_add(1, Ordering::AcqRel);
                if self.queue.send(Queued { generation, block }).await.is_err() {
                    return SessionEnd::CommitterGone;
                }
            }
            delivered = true;
            *next += 1;
            if let Some(metrics) = &self.metrics {
                metrics.set_queued(&self.channel_id, next.saturating_sub(self.ledger.height()));
            }
        };
        drop(requests);
        SessionEnd::Failed { reason, delivered }
    }

    /// Commits `block` on this task if it may ([`Committing::inline`]): a
    /// small block, nothing queued for the committer thread, and no world
    /// state checkpoint due (the thread makes those). A stream checkpoint
    /// is announced applied, the worker runs what waited for that, and
    /// only then is the block synced. The block back if the thread is to
    /// commit it.
    async fn commit_here(&self, block: Block) -> Result<Verdict, Block> {
        let committing = &*self.committing;
        let outcomes = &committing.outcomes;
        let transactions = block.data.as_ref().map_or(0, |data| data.data.len());
        if !committing.inline
            || !is_small(transactions)
            || committing.with_thread.load(Ordering::Acquire) != 0
        {
            return Err(block);
        }
        let syncs = {
            let mut state = committing.state.lock();
            if outcomes.checkpoint_due(state.last_checkpoint) {
                return Err(block);
            }
            if state.settle_unsettled(outcomes, false) == Verdict::Stop {
                return Ok(Verdict::Stop);
            }
            match state.committer.apply(block, weft_msp::now()) {
                Ok(applied) => {
                    let syncs = applied.syncs();
                    state.unsettled = Some(applied);
                    syncs
                }
                Err(error) => {
                    let state = &mut *state;
                    return Ok(outcomes.record(&Err(error), &mut state.last_checkpoint, false));
                }
            }
        };
        if syncs {
            // Those waiting for applied (the Gateway's commit status) are
            // answered before the sync; cancelled here, the block is
            // settled by whoever takes the committer next.
            tokio::task::yield_now().await;
        }
        Ok(committing.state.lock().settle_unsettled(outcomes, false))
    }

    /// Opens the source's Deliver stream with `requests`; the blocks it
    /// sends, or why it stopped.
    async fn deliver(
        &self,
        connection: tonic::transport::Channel,
        requests: mpsc::Receiver<weft_protos::common::Envelope>,
    ) -> Result<BlockStream, String> {
        let requests = ReceiverStream::new(requests);
        let source = self.config.source.noun();
        Ok(match self.config.source {
            BlockSource::Orderers => {
                let mut client = AtomicBroadcastClient::new(connection)
                    .max_decoding_message_size(BLOCK_BYTES_MAX);
                let responses = client
                    .deliver(requests)
                    .await
                    .map_err(|status| format!("deliver: {}", status.message()))?
                    .into_inner();
                Box::pin(responses.map(move |response| {
                    match response
                        .map_err(|status| format!("deliver: {}", status.message()))?
                        .r#type
                    {
                        Some(Response::Block(block)) => Ok(block),
                        Some(Response::Status(status)) => {
                            Err(format!("the {source} answered {status}"))
                        }
                        None => Err("an empty response".to_owned()),
                    }
                }))
            }
            BlockSource::ValidatingPeers => {
                let mut client =
                    DeliverClient::new(connection).max_decoding_message_size(BLOCK_BYTES_MAX);
                let responses = client
                    .deliver(requests)
                    .await
                    .map_err(|status| format!("deliver: {}", status.message()))?
                    .into_inner();
                Box::pin(responses.map(move |response| {
                    match response
                        .map_err(|status| format!("deliver: {}", status.message()))?
                        .r#type
                    {
                        Some(PeerResponse::Block(block)) => Ok(block),
                        Some(PeerResponse::Status(status)) => {
                            Err(format!("the {source} answered {status}"))
                        }
                        _ => Err("a response that is not a block".to_owned()),
                    }
                }))
            }
        })
    }

    /// A Deliver request for blocks `start..` forever, signed by the peer.
    fn seek_request(&self, start: u64) -> Result<weft_protos::common::Envelope, String> {
        let nonce = self.signer.new_nonce().map_err(|e| e.to_string())?;
        weft_protos::tx::signed_envelope_bound(
            HeaderType::DeliverSeekInfo,
            &self.channel_id,
            weft_protos::tx::seek_range(start, u64::MAX)
                .encode_to_vec()
                .into(),
            self.signer.as_ref(),
            nonce,
            weft_msp::now(),
            self.config.tls_cert_hash.clone(),
        )
        .map_err(|e| e.to_string())
    }
}

/// An error with its causes, `outer: inner: root`; transport errors say
/// little at the top level.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
