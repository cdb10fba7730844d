//! The consensus seam: one task per channel takes accepted envelopes in
//! order and turns them into blocks.
//!
//! Every consenter has the same two ends. At the front, a bounded mailbox
//! ([`ChainHandle`], the [`Chain`] a [`Channel`] holds) into which
//! Broadcast puts accepted envelopes, in the
//! order of their streams; a full mailbox pushes back on clients. At the
//! back, a [`BlockWriter`] that turns each *decided* batch into the next
//! signed block, deterministically. What lies between is the consenter:
//!
//! - **solo** ([`solo`]): the task itself is the only decider; it runs the
//!   [`BlockCutter`] and its timer and hands each batch to the writer.
//! - **Raft** ([`raft`]): the leader's task runs the cutter and
//!   proposes each batch as a Raft log entry; every node, leader included,
//!   hands entries to its writer once Raft has decided them. Because
//!   [`BlockWriter::assemble`] is a function of the batch sequence, all
//!   nodes store the same blocks, each with its own signature. Raft
//!   answers each submission ([`Ack::Later`]) only once its block is
//!   decided, so a client's SUCCESS survives the loss of any minority.
//! - **Kafka** ([`kafka`]): every orderer publishes what it accepted to
//!   the channel's Kafka partition and cuts blocks from what it reads
//!   back, by rules that depend on the partition alone. It answers each
//!   submission once Kafka holds its record (`acks=all`).
//!
//! [`Consenter`] names the choice; [`solo::start`], [`raft::start`] and
//! [`kafka::start`] spawn the matching task. Orderers of a Raft or Kafka
//! channel talk to each other through [`cluster`] (`weft.cluster.Cluster`).
//!
//! Every consenter follows the same rules: config transactions are blocks
//! of their own (the pending batch is cut and written first); envelopes
//! admitted under an older configuration than the current one are
//! admitted again before they are ordered (`crate::admission::readmit`),
//! as Fabric does; on halt, the task orders what is already in its mailbox
//! and cuts the pending batch, so nothing a client was told SUCCESS for is
//! dropped by a clean shutdown.

pub(crate) mod cluster;
pub(crate) mod kafka;
pub(crate) mod pinned;
pub(crate) mod raft;
pub(crate) mod solo;

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use weft_protos::block::config_of_envelope;
use weft_protos::common::{Block, Status};

use self::raft::{Leader, Route};
use crate::admission::{Admitted, Refusal};
use crate::chain::{Ack, Chain, Submitting, Unavailable};
use crate::channel::Channel;
use crate::channel_config::ChannelConfig;
use crate::checkpoint::{Checkpoints, Seal};
use crate::cutter::BlockCutter;
use crate::error::{Error, Result};
use crate::writer::{BlockContent, BlockWriter};

/// Accepted envelopes a channel's mailbox holds before Broadcast waits.
const MAILBOX_CAPACITY: usize = 4096;

/// Which consensus orders a channel on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consenter {
    Solo,
    /// Raft (etcdraft) among the consenters the channel config names.
    Raft,
    /// A Kafka partition, through the brokers the channel config names.
    Kafka,
}

/// What the mailbox carries: an accepted envelope and, when the consenter
/// answers only once the envelope is ordered (Raft), where to answer.
#[derive(Debug)]
pub(crate) struct Submission {
    pub input: Admitted,
    /// Forwarded by another orderer of the cluster: a node that is not the
    /// leader refuses it rather than forwarding it again.
    pub forwarded: bool,
    pub done: Option<oneshot::Sender<Result<(), Refusal>>>,
}

/// The configuration a CONFIG envelope brings, as block `number` of
/// `channel_id`, checked as the orderer must be able to run it.
pub(crate) fn ordered_config(
    channel_id: &str,
    number: u64,
    envelope: &Bytes,
) -> Result<ChannelConfig> {
    let (_, config) = config_of_envelope(envelope.clone()).ok_or_else(|| Error::BadChain {
        channel: channel_id.to_owned(),
        block: number,
        reason: "an ordered CONFIG envelope holds no config".to_owned(),
    })?;
    ChannelConfig::new(channel_id, number, config)
}

/// Takes up `config`'s cutting rules: the batch parameters and, for a
/// stream channel, its checkpoints (a config block is itself signed).
pub(crate) fn reconfigure(
    cutter: &mut BlockCutter,
    checkpoints: &mut Checkpoints,
    config: &ChannelConfig,
) {
    cutter.reconfigure(config.orderer.batch_size, config.orderer.batch_timeout);
    checkpoints.reconfigure(config.orderer.stream);
}

/// Whether the current runtime has a single worker, as `weft network up`
/// gives each node sharing a small machine. Work that blocks (a block
/// write, a Raft loop's log syncs) then waits on that worker: handing the
/// worker's tasks to another thread and back costs context switches that,
/// on a shared machine, outweigh the wait (docs/benchmarks.md, eighteenth
/// slice).
pub(crate) fn single_worker() -> bool {
    tokio::runtime::Handle::current().metrics().num_workers() == 1
}

/// Writes the next block of `channel` with `writer`, recording
/// `consenter_metadata`, and updates the channel's height metric.
///
/// Signing and a synced append take a while, so the write runs where it
/// may block: in place on a multi-thread runtime, whose other tasks move
/// to another worker meanwhile (`block_in_place`), otherwise on the
/// blocking pool. In place is what keeps a busy consenter fed: after a
/// hop to the blocking pool its task waits to be polled again behind
/// every task the runtime has queued meanwhile (a Kafka orderer answers
/// each record from a task of its own, thousands a second), and a block
/// of 500 envelopes took 66–100 ms instead of 10–20 (docs/benchmarks.md).
/// On a [`single_worker`] the write waits on that worker: handing its
/// tasks to another thread and back cost two context switches per block,
/// a tenth of a solo orderer's CPU at 1,000 tx/s.
pub(crate) async fn write_block(
    channel: &Channel,
    writer: &Arc<Mutex<BlockWriter>>,
    content: BlockContent,
    consenter_metadata: Bytes,
    seal: Seal,
) -> Result<Block> {
    let write = {
        let writer = writer.clone();
        move || {
            writer
                .lock()
                .write_with_consenter_metadata(&content, consenter_metadata, seal)
        }
    };
    let block = match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread if single_worker() => write()?,
        tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(write)?,
        _ => tokio::task::spawn_blocking(write)
            .await
            .map_err(|e| Error::Task {
                channel: channel.id.clone(),
                reason: format!("a block write task died: {e}"),
            })??,
    };
    let number = block.header.as_ref().map_or(0, |header| header.number);
    channel.metrics.height(&channel.id, number + 1);
    tracing::debug!(
        channel = %channel.id,
        block = number,
        transactions = block.data.as_ref().map_or(0, |data| data.data.len()),
        "block written"
    );
    Ok(block)
}

impl Chain for ChainHandle {
    fn submit(&self, input: Admitted) -> Submitting<'_> {
        Box::pin(self.submit_as(input, false))
    }

    fn submit_forwarded(&self, input: Admitted) -> Submitting<'_> {
        Box::pin(self.submit_as(input, true))
    }
}

/// The sending end of a channel's mailbox.
#[derive(Debug, Clone)]
pub(crate) struct ChainHandle {
    channel_id: String,
    mailbox: mpsc::Sender<Submission>,
    /// Whether the consenter answers each envelope (Raft, Kafka) or
    /// holding it is enough (solo).
    answers: bool,
    /// Raft: where the leader is; envelopes go to the task only while this
    /// node leads.
    route: Option<Arc<Route>>,
}

impl ChainHandle {
    async fn submit_as(&self, input: Admitted, forwarded: bool) -> Result<Ack, Unavailable> {
        if let (Some(route), false) = (&self.route, forwarded) {
            match route.leader() {
                Leader::ThisNode => {}
                Leader::Unknown => {
                    let (done, answer) = oneshot::channel();
                    let _ = done.send(Err(Refusal::new(
                        Status::ServiceUnavailable,
                        "no Raft leader: the cluster is electing one; retry",
                    )));
                    return Ok(Ack::Later(answer));
                }
                Leader::Other(endpoint) => {
                    let (done, answer) = oneshot::channel();
                    route
                        .transport()
                        .forward(&endpoint, &self.channel_id, input, Some(done))
                        .await;
                    return Ok(Ack::Later(answer));
                }
            }
        }
        let (done, ack) = if self.answers {
            let (done, answer) = oneshot::channel();
            (Some(done), Ack::Later(answer))
        } else {
            (None, Ack::Now)
        };
        self.mailbox
            .send(Submission {
                input,
                forwarded,
                done,
            })
            .await
            .map_err(|_| Unavailable {
                channel: self.channel_id.clone(),
            })?;
        Ok(ack)
    }
}

/// The receiving end, until the task takes it.
#[derive(Debug)]
pub(crate) struct Mailbox(pub(crate) mpsc::Receiver<Submission>);

/// A new mailbox for `channel_id`, ordered by `consenter`; a Raft
/// channel's handle forwards by `route` while another node leads.
pub(crate) fn mailbox(
    channel_id: &str,
    consenter: Consenter,
    route: Option<Arc<Route>>,
) -> (ChainHandle, Mailbox) {
    let (sender, receiver) = mpsc::channel(MAILBOX_CAPACITY);
    (
        ChainHandle {
            channel_id: channel_id.to_owned(),
            mailbox: sender,
            answers: consenter != Consenter::Solo,
            route,
        },
        Mailbox(receiver),
    )
}

/// A running channel task.
#[derive(Debug)]
pub(crate) struct ChainTask {
    pub(crate) halt: oneshot::Sender<()>,
    pub(crate) task: JoinHandle<Result<()>>,
}

impl ChainTask {
    /// Stops the task after it has ordered what its mailbox holds and
    /// written the pending batch.
    pub async fn halt(self, channel_id: &str) -> Result<()> {
        // The task may have stopped on its own (after a failure).
        let _ = self.halt.send(());
        self.task.await.map_err(|e| Error::Task {
            channel: channel_id.to_owned(),
            reason: format!("the chain task died: {e}"),
        })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_is_known_once_answered_and_refused_once_abandoned() {
        // Goal: the batched answers of a Forward stream take only answers
        // already known, and an abandoned promise is a refusal, not a
        // SUCCESS.
        assert_eq!(Ack::Now.try_outcome().unwrap(), Ok(()));
        let (done, answer) = oneshot::channel();
        let ack = Ack::Later(answer).try_outcome().unwrap_err();
        done.send(Ok(())).unwrap();
        assert_eq!(ack.try_outcome().unwrap(), Ok(()));
        let (done, answer) = oneshot::channel::<Result<(), Refusal>>();
        drop(done);
        let refused = Ack::Later(answer).try_outcome().unwrap().unwrap_err();
        assert_eq!(refused.status, Status::ServiceUnavailable);
    }
}
