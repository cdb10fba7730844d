//! The Kafka consenter: a channel's Kafka partition decides the order, and
//! every orderer cuts the same blocks from it (Fabric 1.x), optionally
//! with only transaction IDs in the partition (FastFabric's O-I).
//!
//! Two tasks per channel:
//!
//! - the **publisher** takes admitted envelopes from the mailbox and
//!   publishes a record for each (`records`) with `acks=all` and an
//!   idempotent producer; the client hears SUCCESS once Kafka has the
//!   record on every in-sync replica. When only IDs go through Kafka, the
//!   publisher first keeps each envelope on its disk (`Payloads`) and
//!   hands it to the other orderers (`Share` on the cluster service),
//!   which keep it on theirs before they answer; an ID is published only
//!   once one of them has taken it, so that a SUCCESS means two disks hold
//!   the envelope (one, when the channel has a single orderer). An
//!   envelope no other orderer takes within [`SHARE_WAIT_MAX`] is refused
//!   with SERVICE_UNAVAILABLE and never published. Until the partition
//!   has taken one of its `Connect` probe records (at start, where the
//!   idempotent producer first waits for a producer ID, and whenever the
//!   brokers could not be reached), it refuses envelopes with
//!   SERVICE_UNAVAILABLE, the channel fails `/healthz`, and it probes the
//!   partition every second;
//! - the **sequencer** reads the partition from the offset after its last
//!   block and applies Fabric 1.x's rules: regular records go through the
//!   [`BlockCutter`]; a config record cuts what is pending and forms a
//!   block of its own; an expiring batch timer does not cut, it publishes
//!   `TimeToCut{next block}`, and the first such record for the next
//!   block cuts it on every orderer. Blocks are therefore a function of
//!   the partition alone, and every orderer writes the same ones, each
//!   signed by itself. Each block records the offset of its last record
//!   (`orderer.KafkaMetadata` as its consenter metadata), where a
//!   restarted orderer resumes. An ID whose envelope this orderer lacks is
//!   fetched from the others (`Fetch`) before the block is written, or
//!   taken from the blocks they wrote (`Pull`) when none keeps it.
//!
//! The publisher stays at most [`BACKLOG_RECORDS_MAX`] records ahead of
//! its own sequencer: past that, it takes no more envelopes until this
//! orderer has written the blocks of what it published (the mailbox
//! fills, and Broadcast waits, as it does for a Raft leader). Without the
//! bound, an orderer whose block writing lags would keep answering
//! SUCCESS and pile up envelopes it has yet to write: in TxID mode those
//! outgrow the envelope store's memtable and are written twice more
//! (flushed to tables, then compacted) before their blocks drop them.
//!
//! Whether an envelope can be had is never decided: a sequencer that
//! reads an ID whose envelope no orderer holds waits for it, so every
//! orderer stops before the same block, and none writes one that the
//! others could not. With envelopes secured as above that takes two lost
//! disks; the envelope sent again by its client (or anyone holding it) to
//! any orderer supplies it, and the chain goes on (its second record is
//! left out of the block, its TxID being ordered already).
//!
//! Envelopes admitted under an older config are checked again as every
//! consenter does; a config envelope made under an older config is
//! dropped on every orderer alike (its client may submit the update
//! again), since processing it again would have each orderer sign a
//! different CONFIG envelope. Kafka is trusted as Raft's peers are: a
//! record is not checked again unless its config is stale. (A stale
//! envelope is checked against each orderer's clock, as in Fabric, so a
//! certificate expiring at that very moment could be judged differently.)

mod payloads;
mod records;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use prost::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{Message as _, Offset, TopicPartitionList};
use tokio::sync::{mpsc, oneshot, watch};
use weft_protos::common::{Envelope, Status};
use weft_protos::tx::Sign;

pub(crate) use self::payloads::Payloads;
pub(crate) use self::records::digest;
use self::records::{Digest, Entry, Record};
use super::cluster::{Done, SHARE_BATCH_MAX, Transport};
use super::{ChainTask, Mailbox, Submission, ordered_config, write_block};
use crate::admission::{Admitted, Refusal, readmit};
use crate::channel::Channel;
use crate::checkpoint::Seal;
use crate::config::{KafkaConsensus, KafkaPayloads};
use crate::cutter::{BlockCutter, CutReason};
use crate::error::{Error, Result};
use crate::writer::{BlockContent, BlockWriter};

/// The only partition of a channel's topic.
const PARTITION: i32 = 0;
/// How long Kafka may take to acknowledge a record before its envelope is
/// refused (SERVICE_UNAVAILABLE).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an orderer whose brokers went away tries the partition.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// How often a topic that could not be created is tried again.
const TOPIC_RETRY: Duration = Duration::from_secs(1);
/// Submissions published as one batch at most.
const PUBLISH_BATCH_MAX: usize = 1024;
/// Batches whose envelopes are being handed to the other orderers at once
/// (TxID mode), before the publisher waits.
const SHARES_IN_FLIGHT_MAX: usize = 16;
/// How long the publisher waits for another orderer to take envelopes
/// before it publishes their IDs all the same.
const SHARE_WAIT_MAX: Duration = Duration::from_secs(2);
/// Records this orderer's publisher may be ahead of its sequencer: the
/// offset of its newest acknowledged record less the offset of the last
/// record in a block it wrote. About a second of work at full load, many
/// blocks' worth, so the pipeline stays full.
const BACKLOG_RECORDS_MAX: i64 = 4096;
/// How long the sequencer waits between rounds of asking the other
/// orderers for an envelope it lacks.
const FETCH_RETRY: Duration = Duration::from_millis(100);
/// A `TimeToCut` not followed by its block is published again after this
/// long at least (its first publication may have been lost).
const TIME_TO_CUT_RETRY_MIN: Duration = Duration::from_millis(100);

/// What a Kafka channel's consenter needs.
pub(crate) struct Setup {
    pub channel: Arc<Channel>,
    pub mailbox: Mailbox,
    pub writer: BlockWriter,
    pub signer: Arc<dyn Sign + Send + Sync>,
    pub settings: KafkaConsensus,
    pub transport: Arc<Transport>,
    /// This node's cluster endpoint, if it serves cluster traffic: the
    /// other orderers of `settings.orderers` are those it shares with.
    pub endpoint: Option<String>,
    pub payloads: Arc<Payloads>,
}

/// Starts the Kafka consenter of a channel.
pub(crate) fn start(setup: Setup) -> ChainTask {
    let (halt, halted) = oneshot::channel();
    let channel = setup.channel.clone();
    let task = tokio::spawn(async move {
        let result = run(setup, halted).await;
        if let Err(error) = &result {
            tracing::error!(channel = %channel.id, %error, "Kafka chain stopped");
            channel.failed(error.to_string());
        }
        result
    });
    ChainTask { halt, task }
}

async fn run(setup: Setup, mut halted: oneshot::Receiver<()>) -> Result<()> {
    let Setup {
        channel,
        mailbox,
        writer,
        signer,
        settings,
        transport,
        endpoint,
        payloads,
    } = setup;
    let kafka_error = |what: &str, error: KafkaError| Error::Consensus {
        channel: channel.id.clone(),
        reason: format!("Kafka {what}: {error}"),
    };
    let others: Vec<String> = settings
        .orderers
        .iter()
        .filter(|other| Some(*other) != endpoint.as_ref())
        .cloned()
        .collect();
    let available = Arc::new(AtomicBool::new(false));
    let partition_ready = Arc::new(AtomicBool::new(false));
    let producer: Producer = client_config(&settings.brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "1")
        .set(
            "message.timeout.ms",
            DELIVERY_TIMEOUT.as_millis().to_string(),
        )
        .create_with_context(BrokerWatch {
            channel: channel.clone(),
            available: available.clone(),
        })
        .map_err(|e| kafka_error("producer", e))?;
    let producer = Arc::new(producer);
    let key = record_key(&channel)?;
    channel.set_unavailable(Some(format!(
        "the channel's Kafka topic is not ready yet (brokers {})",
        settings.brokers.join(",")
    )));
    // The sequencer resumes after the last record of the last block, or at
    // the partition's start for a chain of only its genesis block.
    let last_written = last_written_offset(&channel)?;
    let resume = last_written.map_or(Offset::Beginning, |offset| Offset::Offset(offset + 1));
    let backlog = Arc::new(Backlog::new(last_written.unwrap_or(-1)));
    let publisher = tokio::spawn(
        Arc::new(Publisher {
            channel: channel.clone(),
            producer: producer.clone(),
            mode: settings.payloads,
            payloads: payloads.clone(),
            transport: transport.clone(),
            others: others.clone(),
            available: available.clone(),
            partition_ready: partition_ready.clone(),
            key: key.clone(),
            backlog: backlog.clone(),
        })
        .run(mailbox.0),
    );

    let admin: AdminClient<DefaultClientContext> = client_config(&settings.brokers)
        .create()
        .map_err(|e| kafka_error("admin client", e))?;
    loop {
        tokio::select! {
            _ = &mut halted => {
                publisher.abort();
                return Ok(());
            }
            created = create_topic(&admin, &channel.id) => match created {
                Ok(()) => break,
                Err(reason) => {
                    tracing::warn!(channel = %channel.id, brokers = ?settings.brokers, %reason, "cannot create the channel's topic yet; retrying");
                    tokio::time::sleep(TOPIC_RETRY).await;
                }
            }
        }
    }
    let consumer: StreamConsumer = client_config(&settings.brokers)
        .set("group.id", format!("weft-orderer-{}", channel.id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .map_err(|e| kafka_error("consumer", e))?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&channel.id, PARTITION, resume)
        .map_err(|e| kafka_error("assignment", e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| kafka_error("assignment", e))?;
    // Envelopes are taken once the publisher's first probe record is:
    // until the idempotent producer holds a producer ID from the brokers
    // (which can take seconds while they load their coordinator state),
    // every record would wait, and time out, in its queue.
    channel.set_unavailable(Some(format!(
        "the channel's Kafka partition has not yet taken a record from this orderer \
         (brokers {})",
        settings.brokers.join(",")
    )));
    partition_ready.store(true, Ordering::Release);
    tracing::info!(channel = %channel.id, ?resume, payloads = ?settings.payloads, others = ?others, "ordering through Kafka once the partition takes a probe record");

    let config = channel.config();
    let sequencer = Sequencer {
        cutter: BlockCutter::new(config.orderer.batch_size, config.orderer.batch_timeout),
        channel,
        signer,
        writer: Arc::new(Mutex::new(writer.backed_by_log())),
        mode: settings.payloads,
        payloads,
        transport,
        others,
        producer,
        time_to_cut: None,
        key,
        foreign: 0,
        unwritten: VecDeque::new(),
        unsynced: Vec::new(),
        written_since_sync: false,
        syncing: None,
        backlog,
        halted,
    };
    let result = sequencer.run(&consumer).await;
    publisher.abort();
    result
}

/// The settings every Kafka client of the channel shares. Reconnection
/// backs off to a second at most (librdkafka's default is ten), so that
/// ordering resumes within a second of a broker coming back.
fn client_config(brokers: &[String]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers.join(","))
        .set("client.id", "weft-orderer")
        .set("socket.nagle.disable", "true")
        .set("reconnect.backoff.max.ms", "1000");
    config
}

/// Creates the channel's topic of one partition, with the brokers'
/// default replication; an existing topic is fine.
async fn create_topic(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> std::result::Result<(), String> {
    let new_topic = NewTopic::new(topic, 1, TopicReplication::Fixed(-1));
    let options =
        AdminOptions::new().operation_timeout(Some(Timeout::After(Duration::from_secs(10))));
    let results = admin
        .create_topics([&new_topic], &options)
        .await
        .map_err(|e| e.to_string())?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => return Err(format!("topic {name}: {code}")),
        }
    }
    Ok(())
}

/// Deletes a channel's topic, and with it every record the channel's
/// orderers published: for a channel that is gone for good (a benchmark's
/// channel; a live channel's orderers resume from its records). A topic
/// that does not exist is fine.
pub async fn delete_channel_topic(brokers: &[String], channel: &str) -> Result<()> {
    let failed = |reason: String| Error::Consensus {
        channel: channel.to_owned(),
        reason: format!(
            "cannot delete the channel's topic on {}: {reason}",
            brokers.join(",")
        ),
    };
    let admin: AdminClient<DefaultClientContext> = client_config(brokers)
        .create()
        .map_err(|e| failed(e.to_string()))?;
    let options =
        AdminOptions::new().operation_timeout(Some(Timeout::After(Duration::from_secs(10))));
    let results = admin
        .delete_topics(&[channel], &options)
        .await
        .map_err(|e| failed(e.to_string()))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((_, code)) => return Err(failed(code.to_string())),
        }
    }
    Ok(())
}

/// The Kafka key of the channel's records: the hash of its genesis block
/// header, which tells them from the records of an earlier channel of the
/// same name left on the brokers (the topic is named after the channel).
fn record_key(channel: &Channel) -> Result<Bytes> {
    let genesis = channel.store.block(0).map_err(|source| Error::Ledger {
        channel: channel.id.clone(),
        source,
    })?;
    let header = genesis
        .as_ref()
        .and_then(|block| block.header.as_ref())
        .ok_or_else(|| Error::BadChain {
            channel: channel.id.clone(),
            block: 0,
            reason: "no genesis block header".to_owned(),
        })?;
    Ok(Bytes::copy_from_slice(
        &weft_protos::hash::block_header_hash(header),
    ))
}

/// The offset of the last record in the channel's last block; `None` for
/// a chain of only its genesis block.
fn last_written_offset(channel: &Channel) -> Result<Option<i64>> {
    let height = channel.store.height();
    let tip = channel
        .store
        .block(height.saturating_sub(1))
        .map_err(|source| Error::Ledger {
            channel: channel.id.clone(),
            source,
        })?;
    Ok(tip
        .as_ref()
        .and_then(weft_protos::block::consenter_metadata)
        .and_then(|metadata| records::last_offset(&metadata)))
}

/// The channel's producer, watching its brokers.
type Producer = FutureProducer<BrokerWatch>;

/// What the producer's client reports about the brokers: when librdkafka
/// finds every broker down, the channel refuses envelopes at once (with
/// SERVICE_UNAVAILABLE) until a probe record is taken again. A record
/// that merely took too long (a broker under load) is refused on its own
/// and changes nothing for the others.
struct BrokerWatch {
    channel: Arc<Channel>,
    available: Arc<AtomicBool>,
}

impl rdkafka::ClientContext for BrokerWatch {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            if self.available.swap(false, Ordering::AcqRel) {
                tracing::warn!(channel = %self.channel.id, %reason, "every Kafka broker is down; refusing envelopes until one answers again");
                self.channel.set_unavailable(Some(format!(
                    "the Kafka brokers cannot be reached: {reason}"
                )));
            }
        } else if error.rdkafka_error_code() == Some(RDKafkaErrorCode::BrokerTransportFailure) {
            // Each reconnection attempt to a broker that is away says so.
            tracing::debug!(channel = %self.channel.id, %reason, "a Kafka broker connection failed");
        } else {
            tracing::warn!(channel = %self.channel.id, %error, %reason, "Kafka client error");
        }
    }
}

/// Hands `record` of channel `topic` to the producer, keyed `key`.
fn send(
    producer: &Producer,
    topic: &str,
    key: &[u8],
    record: &[u8],
) -> std::result::Result<DeliveryFuture, KafkaError> {
    producer
        .send_result(
            FutureRecord::to(topic)
                .partition(PARTITION)
                .key(key)
                .payload(record),
        )
        .map_err(|(error, _)| error)
}

/// How far this orderer's blocks trail the records it published.
struct Backlog {
    /// The offset of this orderer's newest record Kafka acknowledged.
    published: AtomicI64,
    /// The offset of the last record in a block this orderer wrote.
    written: watch::Sender<i64>,
}

impl Backlog {
    fn new(written: i64) -> Self {
        Self {
            published: AtomicI64::new(-1),
            written: watch::Sender::new(written),
        }
    }

    fn published(&self, offset: i64) {
        self.published.fetch_max(offset, Ordering::AcqRel);
    }

    fn written(&self, offset: i64) {
        self.written.send_if_modified(|written| {
            let advanced = offset > *written;
            *written = (*written).max(offset);
            advanced
        });
    }

    /// Returns once the blocks written trail this orderer's records by
    /// [`BACKLOG_RECORDS_MAX`] at most.
    async fn within_bound(&self) {
        let mut written = self.written.subscribe();
        let _ = written
            .wait_for(|&written| {
                self.published.load(Ordering::Acquire) - written <= BACKLOG_RECORDS_MAX
            })
            .await;
    }
}

/// The refusal of an envelope Kafka did not take.
fn unavailable(channel: &str, reason: impl std::fmt::Display) -> Refusal {
    Refusal::new(
        Status::ServiceUnavailable,
        format!(
            "the Kafka brokers of channel {channel} did not take the envelope ({reason}); retry"
        ),
    )
}

/// The refusal of an envelope that could not be made safe to order.
fn unsecured(channel: &str, reason: &str) -> Refusal {
    Refusal::new(
        Status::ServiceUnavailable,
        format!(
            "channel {channel} orders TxIDs through Kafka, which needs the envelope on this \
             orderer's disk and another orderer's first; not ordered ({reason}); retry"
        ),
    )
}

fn answer(done: Done, outcome: std::result::Result<(), Refusal>) {
    if let Some(done) = done {
        let _ = done.send(outcome);
    }
}

/// Publishes the channel's admitted envelopes.
struct Publisher {
    channel: Arc<Channel>,
    producer: Arc<Producer>,
    mode: KafkaPayloads,
    payloads: Arc<Payloads>,
    transport: Arc<Transport>,
    others: Vec<String>,
    /// Whether the brokers took the last record: while not, envelopes are
    /// refused at once.
    available: Arc<AtomicBool>,
    /// Whether the channel's topic exists and the sequencer reads it:
    /// probing starts then.
    partition_ready: Arc<AtomicBool>,
    /// The key of every record: the channel's genesis block header hash.
    key: Bytes,
    backlog: Arc<Backlog>,
}

/// A batch on its way to Kafka: its records, in order, once the
/// envelopes the references name are on disk here and held by another
/// orderer.
struct Staged {
    secured: Option<tokio::task::JoinHandle<std::result::Result<(), String>>>,
    records: Vec<Staging>,
}

/// One record of a staged batch.
struct Staging {
    record: Vec<u8>,
    /// Whether it names an envelope instead of holding it: then it is
    /// published only if the batch's envelopes were secured.
    reference: bool,
    done: Done,
}

impl Publisher {
    /// Publishes what the mailbox brings until it closes. Batches are
    /// shared with the other orderers side by side (up to
    /// [`SHARES_IN_FLIGHT_MAX`]) and produced in mailbox order.
    async fn run(self: Arc<Self>, mut mailbox: mpsc::Receiver<Submission>) {
        let (staged, mut to_produce) = mpsc::channel::<Staged>(SHARES_IN_FLIGHT_MAX);
        let producer = self.clone();
        tokio::spawn(async move {
            while let Some(batch) = to_produce.recv().await {
                producer.produce(batch).await;
            }
        });
        let mut probe = tokio::time::interval(PROBE_INTERVAL);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                submission = mailbox.recv() => {
                    let Some(first) = submission else { return };
                    self.backlog.within_bound().await;
                    let mut batch = vec![first];
                    while batch.len() < PUBLISH_BATCH_MAX {
                        match mailbox.try_recv() {
                            Ok(submission) => batch.push(submission),
                            Err(_) => break,
                        }
                    }
                    if let Some(batch) = self.stage(batch)
                        && staged.send(batch).await.is_err()
                    {
                        return;
                    }
                }
                _ = probe.tick() => {
                    if !self.available.load(Ordering::Acquire)
                        && self.partition_ready.load(Ordering::Acquire)
                    {
                        self.probe().await;
                    }
                }
            }
        }
    }

    /// The records of a batch, its envelopes being handed to the other
    /// orderers in TxID mode; `None` when the batch was refused (the
    /// brokers are away).
    fn stage(self: &Arc<Self>, batch: Vec<Submission>) -> Option<Staged> {
        if !self.available.load(Ordering::Acquire) {
            for submission in batch {
                answer(
                    submission.done,
                    Err(unavailable(
                        &self.channel.id,
                        "the brokers cannot be reached",
                    )),
                );
            }
            return None;
        }
        // Each envelope's record; in TxID mode the envelope is kept here
        // and handed to the other orderers before its ID is published.
        let mut secured = Vec::new();
        let mut records = Vec::with_capacity(batch.len());
        for Submission { input, done, .. } in batch {
            let (record, reference) = match input {
                Admitted::Normal {
                    envelope,
                    config_sequence,
                    ..
                } if self.mode == KafkaPayloads::Full => {
                    (records::envelope(envelope, config_sequence), false)
                }
                Admitted::Normal {
                    envelope,
                    size_bytes,
                    config_sequence,
                } => {
                    let tx_id = weft_protos::block::channel_header_of(envelope.clone())
                        .map(|header| header.tx_id)
                        .unwrap_or_default();
                    let digest = digest(&envelope);
                    secured.push((digest, envelope));
                    (
                        records::reference(&tx_id, &digest, size_bytes, config_sequence),
                        true,
                    )
                }
                Admitted::Config {
                    envelope,
                    config_sequence,
                    ..
                } => (records::config(envelope, config_sequence), false),
            };
            records.push(Staging {
                record,
                reference,
                done,
            });
        }
        let secured = (!secured.is_empty()).then(|| {
            let publisher = self.clone();
            tokio::spawn(async move { publisher.secure(secured).await })
        });
        Some(Staged { secured, records })
    }

    /// Publishes a staged batch's records once its envelopes were
    /// secured; each is answered once Kafka has it. References to
    /// envelopes that could not be secured are refused, not published.
    async fn produce(&self, batch: Staged) {
        let secured = match batch.secured {
            None => Ok(()),
            Some(task) => task
                .await
                .unwrap_or_else(|e| Err(format!("securing the envelopes failed: {e}"))),
        };
        for Staging {
            record,
            reference,
            done,
        } in batch.records
        {
            if reference && let Err(reason) = &secured {
                answer(done, Err(unsecured(&self.channel.id, reason)));
                continue;
            }
            let sent = send(&self.producer, &self.channel.id, &self.key, &record);
            let delivery = match sent {
                Ok(delivery) => delivery,
                Err(error) => {
                    answer(done, Err(unavailable(&self.channel.id, error)));
                    continue;
                }
            };
            let available = self.available.clone();
            let channel = self.channel.clone();
            let backlog = self.backlog.clone();
            tokio::spawn(async move {
                let outcome = match delivery.await {
                    Ok(Ok(delivered)) => {
                        backlog.published(delivered.offset);
                        Ok(())
                    }
                    Ok(Err((error, _))) => {
                        // Not acknowledged in time is this record's
                        // refusal; brokers that are down are reported
                        // apart (`BrokerWatch`).
                        let timed_out =
                            error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageTimedOut);
                        if !timed_out && available.swap(false, Ordering::AcqRel) {
                            tracing::warn!(channel = %channel.id, %error, "Kafka refused a record; refusing envelopes until the brokers answer again");
                            channel.set_unavailable(Some(format!(
                                "the Kafka brokers do not take records: {error}"
                            )));
                        }
                        Err(unavailable(&channel.id, error))
                    }
                    Err(_) => Err(unavailable(&channel.id, "the producer stopped")),
                };
                answer(done, outcome);
            });
        }
    }

    /// Makes `envelopes` safe to name in the partition: on this orderer's
    /// disk, and, when the channel has other orderers, on one of theirs
    /// too. A TxID is published only then, so that its envelope is lost
    /// only if two disks are.
    async fn secure(&self, envelopes: Vec<(Digest, Bytes)>) -> std::result::Result<(), String> {
        let payloads = self.payloads.clone();
        let stored = envelopes.clone();
        tokio::task::spawn_blocking(move || payloads.keep_durably(&stored))
            .await
            .map_err(|e| format!("the envelope store failed: {e}"))??;
        if self.others.is_empty() {
            return Ok(());
        }
        self.share(
            envelopes
                .into_iter()
                .map(|(_, envelope)| envelope)
                .collect(),
        )
        .await
    }

    /// Hands `envelopes` to the other orderers, waiting until one has
    /// taken them (stored them on its disk); why not, if none did within
    /// [`SHARE_WAIT_MAX`].
    async fn share(&self, envelopes: Vec<Bytes>) -> std::result::Result<(), String> {
        let (taken, mut answers) = mpsc::channel(self.others.len());
        for other in &self.others {
            let (transport, other, channel, taken) = (
                self.transport.clone(),
                other.clone(),
                self.channel.id.clone(),
                taken.clone(),
            );
            let envelopes = envelopes.clone();
            tokio::spawn(async move {
                let mut outcome = Ok(());
                for chunk in envelopes.chunks(SHARE_BATCH_MAX) {
                    outcome = transport.share(&other, &channel, chunk.to_vec()).await;
                    if outcome.is_err() {
                        break;
                    }
                }
                let _ = taken
                    .send(outcome.map_err(|reason| format!("{other}: {reason}")))
                    .await;
            });
        }
        drop(taken);
        let first_taken = async {
            let mut failures = Vec::new();
            while let Some(outcome) = answers.recv().await {
                match outcome {
                    Ok(()) => return Ok(()),
                    Err(reason) => failures.push(reason),
                }
            }
            Err(failures.join("; "))
        };
        let outcome = match tokio::time::timeout(SHARE_WAIT_MAX, first_taken).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("none answered within {SHARE_WAIT_MAX:?}")),
        };
        if let Err(reason) = &outcome {
            tracing::warn!(channel = %self.channel.id, envelopes = envelopes.len(), %reason, "no other orderer took the envelopes; refusing them");
        }
        outcome
    }

    /// Tries the partition with a `Connect` record; the brokers are
    /// available (at start, or again) once it is taken.
    async fn probe(&self) {
        let record = records::connect();
        let taken = match send(&self.producer, &self.channel.id, &self.key, &record) {
            Ok(delivery) => match delivery.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err((error, _))) => Err(error.to_string()),
                Err(_) => Err("the producer stopped".to_owned()),
            },
            Err(error) => Err(error.to_string()),
        };
        match taken {
            Ok(()) if !self.available.swap(true, Ordering::AcqRel) => {
                self.channel.set_unavailable(None);
                tracing::info!(channel = %self.channel.id, "the Kafka partition takes this orderer's records; taking envelopes");
            }
            Ok(()) => {}
            Err(reason) => {
                tracing::debug!(channel = %self.channel.id, %reason, "the Kafka partition did not take a probe record")
            }
        }
    }
}

/// Reads the partition and writes the blocks it decides.
struct Sequencer {
    channel: Arc<Channel>,
    signer: Arc<dyn Sign + Send + Sync>,
    writer: Arc<Mutex<BlockWriter>>,
    cutter: BlockCutter,
    mode: KafkaPayloads,
    payloads: Arc<Payloads>,
    transport: Arc<Transport>,
    others: Vec<String>,
    producer: Arc<Producer>,
    /// The block a `TimeToCut` was published for, and when to publish it
    /// again if the block is still not cut.
    time_to_cut: Option<(u64, Instant)>,
    /// The key of this channel's records (its genesis block header hash);
    /// records of another key were left by an earlier channel of the same
    /// name and are skipped.
    key: Bytes,
    /// Records skipped for their key.
    foreign: u64,
    /// The offsets and digests of references read whose envelopes are not
    /// in a written block yet, oldest first.
    unwritten: VecDeque<(i64, Digest)>,
    /// Envelopes in blocks written since the last sync of the block store
    /// began: they leave the envelope store once a sync covers them.
    unsynced: Vec<Digest>,
    /// Whether blocks were written since the last sync began.
    written_since_sync: bool,
    /// The sync of the block store under way, if any.
    syncing: Option<tokio::task::JoinHandle<()>>,
    backlog: Arc<Backlog>,
    halted: oneshot::Receiver<()>,
}

impl Sequencer {
    /// Orders the partition's records into blocks until halted, then
    /// syncs what it wrote.
    async fn run(mut self, consumer: &StreamConsumer) -> Result<()> {
        let ordered = self.order(consumer).await;
        self.sync_written().await;
        ordered
    }

    async fn order(&mut self, consumer: &StreamConsumer) -> Result<()> {
        loop {
            let deadline = self.timer();
            let timer = async {
                match deadline {
                    Some(deadline) => {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await
                    }
                    None => std::future::pending().await,
                }
            };
            let received = tokio::select! {
                biased;
                _ = &mut self.halted => return Ok(()),
                received = consumer.recv() => received.map(|message| {
                    (
                        message.offset(),
                        message.key() == Some(self.key.as_ref()),
                        Bytes::copy_from_slice(message.payload().unwrap_or_default()),
                    )
                }),
                () = timer => {
                    self.publish_time_to_cut();
                    continue;
                }
            };
            match received {
                Ok((offset, false, _)) => {
                    if self.foreign.is_multiple_of(1000) {
                        tracing::warn!(channel = %self.channel.id, offset, skipped = self.foreign + 1, "skipping records of an earlier channel of this name (another genesis block) left on the topic");
                    }
                    self.foreign += 1;
                }
                Ok((offset, true, bytes)) => {
                    if !self.record(offset, &bytes).await? {
                        return Ok(());
                    }
                }
                Err(error) => {
                    tracing::warn!(channel = %self.channel.id, %error, "reading the channel's partition");
                    tokio::time::sleep(FETCH_RETRY).await;
                }
            }
        }
    }

    fn next_number(&self) -> u64 {
        self.writer.lock().next_number()
    }

    /// When to publish a `TimeToCut`: when the pending batch times out, or
    /// again when the one published did not cut it.
    fn timer(&self) -> Option<Instant> {
        let next = self.next_number();
        match self.time_to_cut {
            Some((number, again)) if number == next => Some(again),
            _ => self.cutter.deadline(),
        }
    }

    fn publish_time_to_cut(&mut self) {
        let next = self.next_number();
        let record = records::time_to_cut(next);
        let sent = send(&self.producer, &self.channel.id, &self.key, &record);
        if let Err(error) = sent {
            tracing::warn!(channel = %self.channel.id, block = next, %error, "cannot publish TimeToCut");
        }
        let again = self
            .channel
            .config()
            .orderer
            .batch_timeout
            .max(TIME_TO_CUT_RETRY_MIN);
        self.time_to_cut = Some((next, Instant::now() + again));
    }

    /// Applies the record at `offset`. `false` when the consenter was
    /// halted meanwhile.
    async fn record(&mut self, offset: i64, bytes: &[u8]) -> Result<bool> {
        let record = match records::read(self.mode, bytes) {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(channel = %self.channel.id, offset, %error, "skipping a record of the partition");
                return Ok(true);
            }
        };
        match record {
            Record::Connect => {}
            Record::TimeToCut { block_number } => {
                let next = self.next_number();
                if block_number == next && self.cutter.pending_count() > 0 {
                    let batch = self.cutter.cut();
                    self.write(
                        BlockContent::Transactions(batch),
                        offset,
                        CutReason::Timeout,
                    )
                    .await?;
                } else if block_number > next {
                    tracing::warn!(channel = %self.channel.id, offset, block_number, next, "a TimeToCut for a block beyond the next; ignored");
                }
            }
            Record::Normal {
                entry,
                config_sequence,
            } => {
                let Some((envelope, size_bytes)) = self.resolve(offset, entry).await? else {
                    return Ok(false);
                };
                let admitted = Admitted::Normal {
                    envelope,
                    size_bytes,
                    config_sequence,
                };
                let (envelope, size_bytes) = match readmit(
                    admitted,
                    &self.channel.config(),
                    self.signer.as_ref(),
                ) {
                    Ok(Admitted::Normal {
                        envelope,
                        size_bytes,
                        ..
                    }) => (envelope, size_bytes),
                    Ok(Admitted::Config { .. }) => return Ok(true),
                    Err(refusal) => {
                        tracing::warn!(channel = %self.channel.id, offset, status = refusal.status.as_str_name(), info = %refusal.info, "discarding an envelope the new config refuses");
                        return Ok(true);
                    }
                };
                let ordered = self.cutter.ordered(envelope, size_bytes, Instant::now());
                let cut = ordered.batches.len();
                for (index, (batch, reason)) in
                    ordered.batches.into_iter().zip(ordered.reasons).enumerate()
                {
                    // A batch cut before this envelope ends at the record
                    // before; a restart reads this one again.
                    let covers_this = !ordered.pending && index + 1 == cut;
                    let last = if covers_this { offset } else { offset - 1 };
                    self.write(BlockContent::Transactions(batch), last, reason)
                        .await?;
                }
            }
            Record::Config {
                envelope,
                config_sequence,
            } => {
                let sequence = self.channel.config().sequence();
                if config_sequence != sequence {
                    tracing::warn!(channel = %self.channel.id, offset, config_sequence, sequence, "discarding a config update made under an older config; its client may submit it again");
                    return Ok(true);
                }
                let pending = self.cutter.cut();
                if !pending.is_empty() {
                    self.write(
                        BlockContent::Transactions(pending),
                        offset - 1,
                        CutReason::Config,
                    )
                    .await?;
                }
                let number = self.next_number();
                let config = ordered_config(&self.channel.id, number, &envelope)?;
                self.cutter
                    .reconfigure(config.orderer.batch_size, config.orderer.batch_timeout);
                self.channel.install(config);
                self.write(BlockContent::Config(envelope), offset, CutReason::Config)
                    .await?;
                tracing::info!(channel = %self.channel.id, block = number, "channel reconfigured");
            }
        }
        Ok(true)
    }

    /// The envelope of a normal record and its size; `None` when halted
    /// while waiting for an envelope no orderer handed over yet.
    async fn resolve(&mut self, offset: i64, entry: Entry) -> Result<Option<(Bytes, u64)>> {
        match entry {
            Entry::Envelope(envelope) => {
                let size_bytes = Envelope::decode(envelope.clone())
                    .map(|decoded| (decoded.payload.len() + decoded.signature.len()) as u64)
                    .unwrap_or(envelope.len() as u64);
                Ok(Some((envelope, size_bytes)))
            }
            Entry::Reference {
                tx_id,
                digest,
                size_bytes,
            } => {
                let Some(envelope) = self.envelope_of(offset, &tx_id, digest).await else {
                    return Ok(None);
                };
                // Kept in memory a while longer for orderers that lag, and
                // on disk until a block holds it.
                self.payloads.ordered(digest, &envelope);
                self.unwritten.push_back((offset, digest));
                Ok(Some((envelope, size_bytes)))
            }
        }
    }

    /// The envelope of `digest`: held, or fetched from another orderer,
    /// asking again until one has it. `None` when halted meanwhile.
    async fn envelope_of(&mut self, offset: i64, tx_id: &str, wanted: Digest) -> Option<Bytes> {
        let mut rounds = 0u64;
        loop {
            if let Some(envelope) = self.payloads.get(&wanted) {
                return Some(envelope);
            }
            for other in &self.others {
                match self
                    .transport
                    .fetch(
                        other,
                        &self.channel.id,
                        vec![Bytes::copy_from_slice(&wanted)],
                    )
                    .await
                {
                    Ok(envelopes) => {
                        if let Some(envelope) = envelopes.into_iter().find(|e| digest(e) == wanted)
                        {
                            self.payloads.keep(wanted, envelope.clone());
                            return Some(envelope);
                        }
                    }
                    Err(reason) => {
                        tracing::debug!(channel = %self.channel.id, %reason, "fetching an envelope")
                    }
                }
            }
            if self.take_from_written_blocks(&wanted).await {
                continue;
            }
            if rounds.is_multiple_of(50) {
                tracing::warn!(channel = %self.channel.id, offset, tx_id, "no orderer holds the envelope of an ordered TxID; every orderer waits for it before this block; sending the envelope again to any orderer supplies it");
            }
            rounds += 1;
            tokio::select! {
                _ = &mut self.halted => return None,
                () = tokio::time::sleep(FETCH_RETRY) => {}
            }
        }
    }

    /// Takes the envelopes of the next blocks from another orderer that
    /// wrote them (`Pull`): an envelope its holders no longer keep (they
    /// ordered it long ago, or restarted since) is still in their blocks,
    /// and the block this orderer is building holds the same envelopes on
    /// every orderer. Each is kept under its own digest, so a block that
    /// is not what it should be cannot supply a wrong envelope. Whether
    /// `wanted` is now held.
    async fn take_from_written_blocks(&self, wanted: &Digest) -> bool {
        let next = self.next_number();
        for other in &self.others {
            let blocks = match self
                .transport
                .pull(other, &self.channel.id, next, next + 2)
                .await
            {
                Ok(blocks) => blocks,
                Err(reason) => {
                    tracing::debug!(channel = %self.channel.id, %reason, "pulling blocks for their envelopes");
                    continue;
                }
            };
            for envelope in blocks
                .into_iter()
                .filter_map(|block| block.data)
                .flat_map(|data| data.data)
            {
                self.payloads.keep(digest(&envelope), envelope);
            }
            if self.payloads.get(wanted).is_some() {
                tracing::info!(channel = %self.channel.id, block = next, from = %other, "took envelopes no orderer keeps from another orderer's blocks");
                return true;
            }
        }
        false
    }

    /// Writes the next block, recording `offset` as its last record.
    async fn write(&mut self, content: BlockContent, offset: i64, reason: CutReason) -> Result<()> {
        self.channel.metrics.block_cut(&self.channel.id, reason);
        let metadata = records::block_metadata(offset);
        write_block(&self.channel, &self.writer, content, metadata, Seal::Signed).await?;
        // The envelopes of the records up to `offset` are in blocks now
        // (or were discarded): the block store holds them.
        let written = self
            .unwritten
            .iter()
            .take_while(|(at, _)| *at <= offset)
            .count();
        self.unsynced
            .extend(self.unwritten.drain(..written).map(|(_, digest)| digest));
        self.written_since_sync = true;
        self.backlog.written(offset);
        self.sync_in_background();
        Ok(())
    }

    /// Starts a sync of the block store unless one is under way; once it is
    /// done, the envelopes of the blocks it covers leave the envelope
    /// store. Blocks are appended unsynced: the partition (and, in TxID
    /// mode, the envelope store, which keeps each envelope until a synced
    /// block holds it) can write them again after a machine crash. One sync
    /// at a time, beside the ordering, covers every block written before
    /// it started.
    fn sync_in_background(&mut self) {
        if !self.written_since_sync
            || self
                .syncing
                .as_ref()
                .is_some_and(|sync| !sync.is_finished())
        {
            return;
        }
        self.written_since_sync = false;
        let digests = std::mem::take(&mut self.unsynced);
        let (store, payloads, channel) = (
            self.channel.store.clone(),
            self.payloads.clone(),
            self.channel.id.clone(),
        );
        // The sync and the envelope store's deletions are disk work: both
        // run on the blocking pool.
        self.syncing = Some(tokio::task::spawn_blocking(move || match store.sync() {
            Ok(()) => payloads.written(digests),
            // The envelopes stay on disk: a restart orders them again if
            // their blocks were lost, and drops them if not.
            Err(error) => {
                tracing::warn!(channel = %channel, %error, "syncing the block store failed")
            }
        }));
    }

    /// Waits for the sync under way, then syncs what was written since.
    async fn sync_written(&mut self) {
        if let Some(sync) = self.syncing.take() {
            let _ = sync.await;
        }
        self.sync_in_background();
        if let Some(sync) = self.syncing.take() {
            let _ = sync.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_publisher_waits_while_its_records_are_too_far_ahead_of_the_blocks() {
        // Goal: an orderer stops taking envelopes while it has published
        // more than the bound beyond the blocks it wrote, and goes on as
        // soon as its blocks catch up.
        let backlog = Arc::new(Backlog::new(99));
        backlog.published(99 + BACKLOG_RECORDS_MAX);
        tokio::time::timeout(Duration::from_secs(1), backlog.within_bound())
            .await
            .expect("within the bound");

        backlog.published(100 + BACKLOG_RECORDS_MAX);
        let waiting = tokio::spawn({
            let backlog = backlog.clone();
            async move { backlog.within_bound().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "ahead by one record too many");
        // An older acknowledgement arriving late changes nothing.
        backlog.published(120);
        backlog.written(100);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("released once a block is written")
            .unwrap();
    }
}
