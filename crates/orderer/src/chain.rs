//! The consensus seam: one task per channel takes accepted envelopes in
//! order and turns them into blocks.
//!
//! Every consenter has the same two ends. At the front, a bounded mailbox
//! ([`ChainHandle`]) into which Broadcast puts accepted envelopes, in the
//! order of their streams; a full mailbox pushes back on clients. At the
//! back, a [`BlockWriter`] that turns each *decided* batch into the next
//! signed block, deterministically. What lies between is the consenter:
//!
//! - **solo** (here): the task itself is the only decider; it runs the
//!   [`BlockCutter`] and its timer and hands each batch to the writer.
//! - **Raft** (`crate::raft`): the leader's task runs the cutter and
//!   proposes each batch as a Raft log entry; every node, leader included,
//!   hands entries to its writer once Raft has decided them. Because
//!   [`BlockWriter::assemble`] is a function of the batch sequence, all
//!   nodes store the same blocks, each with its own signature. Raft
//!   answers each submission ([`Ack::Later`]) only once its block is
//!   decided, so a client's SUCCESS survives the loss of any minority.
//!
//! [`Consenter`] names the choice; [`start`] spawns the matching task.
//!
//! Config transactions are blocks of their own: the pending batch is cut
//! and written first. Envelopes validated under an older configuration
//! than the current one are checked again before they are ordered, as
//! Fabric does. On halt, the task orders what is already in its mailbox
//! and cuts the pending batch, so nothing a client was told SUCCESS for is
//! dropped by a clean shutdown.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use weft_protos::tx::Sign;

use weft_protos::block::config_of_envelope;
use weft_protos::common::Status;

use crate::broadcast::Refusal;
use crate::channel::{Channel, ChannelConfig};
use crate::cutter::{Batch, BlockCutter, CutReason};
use crate::error::{Error, Result};
use crate::raft::{Leader, Route};
use crate::writer::{BlockContent, BlockWriter};

/// Accepted envelopes a channel's mailbox holds before Broadcast waits.
const MAILBOX_CAPACITY: usize = 4096;

/// Which consensus orders a channel on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consenter {
    Solo,
    /// Raft (etcdraft) among the consenters the channel config names.
    Raft,
}

/// An envelope accepted by Broadcast, on its way to the consenter.
#[derive(Debug)]
pub(crate) enum ChainInput {
    /// A normal (endorser) transaction.
    Normal {
        envelope: Bytes,
        /// Payload plus signature length, for the block cutter.
        size_bytes: u64,
        /// The config sequence it was validated under.
        config_sequence: u64,
    },
    /// A CONFIG envelope made from an accepted config update.
    Config {
        envelope: Bytes,
        /// The CONFIG_UPDATE envelope it was made from, to process again
        /// if the config changes before it is ordered.
        update: Bytes,
        config_sequence: u64,
    },
}

/// The consenter refused an envelope: it is halted or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the consenter of channel {channel} is not running")]
pub(crate) struct Unavailable {
    pub channel: String,
}

/// What the mailbox carries: an accepted envelope and, when the consenter
/// answers only once the envelope is ordered (Raft), where to answer.
#[derive(Debug)]
pub(crate) struct Submission {
    pub input: ChainInput,
    /// Forwarded by another orderer of the cluster: a node that is not the
    /// leader refuses it rather than forwarding it again.
    pub forwarded: bool,
    pub done: Option<oneshot::Sender<Result<(), Refusal>>>,
}

/// When a client may be told SUCCESS for a submitted envelope.
#[derive(Debug)]
pub(crate) enum Ack {
    /// Now: the consenter holds it (solo, whose mailbox survives until
    /// ordered, as Fabric's solo answers).
    Now,
    /// Once the consenter answers: Raft answers when the envelope's block
    /// is decided, or refuses it (no leader, leadership lost).
    Later(oneshot::Receiver<Result<(), Refusal>>),
}

impl Ack {
    /// The consenter's answer if it is known now; the `Ack` again if not.
    pub fn try_outcome(self) -> Result<Result<(), Refusal>, Self> {
        match self {
            Self::Now => Ok(Ok(())),
            Self::Later(mut answer) => match answer.try_recv() {
                Ok(result) => Ok(result),
                Err(oneshot::error::TryRecvError::Empty) => Err(Self::Later(answer)),
                Err(oneshot::error::TryRecvError::Closed) => Ok(Err(stopped())),
            },
        }
    }

    /// Waits for the consenter's answer.
    pub async fn outcome(self) -> Result<(), Refusal> {
        match self {
            Self::Now => Ok(()),
            Self::Later(answer) => answer.await.unwrap_or_else(|_| Err(stopped())),
        }
    }
}

/// The answer to an envelope whose consenter went away without answering.
fn stopped() -> Refusal {
    Refusal::new(
        Status::ServiceUnavailable,
        "the consenter stopped before the envelope was ordered",
    )
}

/// The sending end of a channel's mailbox.
#[derive(Debug, Clone)]
pub(crate) struct ChainHandle {
    channel_id: String,
    mailbox: mpsc::Sender<Submission>,
    /// Whether the consenter answers each envelope (Raft) or holding it is
    /// enough (solo).
    answers: bool,
    /// Raft: where the leader is; envelopes go to the task only while this
    /// node leads.
    route: Option<Arc<Route>>,
}

impl ChainHandle {
    /// Hands an accepted envelope to the consenter, waiting while the
    /// mailbox is full; the [`Ack`] tells when the client may hear SUCCESS.
    pub async fn submit(&self, input: ChainInput) -> Result<Ack, Unavailable> {
        self.submit_as(input, false).await
    }

    /// [`ChainHandle::submit`] for an envelope another orderer forwarded.
    pub async fn submit_forwarded(&self, input: ChainInput) -> Result<Ack, Unavailable> {
        self.submit_as(input, true).await
    }

    async fn submit_as(&self, input: ChainInput, forwarded: bool) -> Result<Ack, Unavailable> {
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
                        .forward(endpoint, &self.channel_id, input, Some(done))
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
            answers: consenter == Consenter::Raft,
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

/// Starts the solo consenter task of `channel`, writing with `writer`
/// (Raft channels start with `crate::raft::start`).
pub(crate) fn start_solo(
    channel: Arc<Channel>,
    mailbox: Mailbox,
    writer: BlockWriter,
    signer: Arc<dyn Sign + Send + Sync>,
) -> ChainTask {
    let (halt, halted) = oneshot::channel();
    let task = tokio::spawn(async move {
        let shared = channel.clone();
        let result = Solo::new(channel, writer, signer)
            .run(mailbox.0, halted)
            .await;
        if let Err(error) = &result {
            tracing::error!(channel = %shared.id, %error, "solo chain stopped");
            shared.failed(error.to_string());
        }
        result
    });
    ChainTask { halt, task }
}

/// The solo consenter of one channel.
struct Solo {
    channel: Arc<Channel>,
    /// Signs CONFIG envelopes of config updates processed again.
    signer: Arc<dyn Sign + Send + Sync>,
    cutter: BlockCutter,
    writer: Arc<Mutex<BlockWriter>>,
}

impl Solo {
    fn new(
        channel: Arc<Channel>,
        writer: BlockWriter,
        signer: Arc<dyn Sign + Send + Sync>,
    ) -> Self {
        let config = channel.config();
        Self {
            signer,
            cutter: BlockCutter::new(config.orderer.batch_size, config.orderer.batch_timeout),
            channel,
            writer: Arc::new(Mutex::new(writer)),
        }
    }

    async fn run(
        mut self,
        mut mailbox: mpsc::Receiver<Submission>,
        mut halted: oneshot::Receiver<()>,
    ) -> Result<()> {
        loop {
            let deadline = self.cutter.deadline();
            let timer = async {
                match deadline {
                    Some(deadline) => {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = &mut halted => break,
                input = mailbox.recv() => match input {
                    Some(submission) => self.order(submission.input).await?,
                    None => break,
                },
                () = timer => {
                    if let Some(batch) = self.cutter.expire(Instant::now()) {
                        self.write_batch(batch, CutReason::Timeout).await?;
                    }
                }
            }
        }
        // Order what clients were already told SUCCESS for, then stop.
        mailbox.close();
        while let Some(submission) = mailbox.recv().await {
            self.order(submission.input).await?;
        }
        let batch = self.cutter.cut();
        self.write_batch(batch, CutReason::Halt).await
    }

    async fn order(&mut self, input: ChainInput) -> Result<()> {
        match input {
            ChainInput::Normal {
                envelope,
                size_bytes,
                config_sequence,
            } => {
                let config = self.channel.config();
                if config_sequence < config.sequence()
                    && let Err(refusal) = crate::broadcast::recheck(&config, &envelope)
                {
                    tracing::warn!(
                        channel = %self.channel.id,
                        status = refusal.status.as_str_name(),
                        info = %refusal.info,
                        "discarding an envelope the new config refuses"
                    );
                    return Ok(());
                }
                let ordered = self.cutter.ordered(envelope, size_bytes, Instant::now());
                for (batch, reason) in ordered.batches.into_iter().zip(ordered.reasons) {
                    self.write_batch(batch, reason).await?;
                }
                Ok(())
            }
            ChainInput::Config {
                mut envelope,
                update,
                config_sequence,
            } => {
                let current = self.channel.config();
                if config_sequence != current.sequence() {
                    // Another update was ordered since this one was
                    // checked: process it again against the current config.
                    match crate::broadcast::recheck_config_update(
                        &current,
                        &update,
                        self.signer.as_ref(),
                    ) {
                        Ok(ChainInput::Config {
                            envelope: fresh, ..
                        }) => envelope = fresh,
                        Ok(ChainInput::Normal { .. }) => return Ok(()),
                        Err(refusal) => {
                            tracing::warn!(
                                channel = %self.channel.id,
                                status = refusal.status.as_str_name(),
                                info = %refusal.info,
                                "discarding a config update the new config refuses"
                            );
                            return Ok(());
                        }
                    }
                }
                let pending = self.cutter.cut();
                self.write_batch(pending, CutReason::Config).await?;
                self.channel
                    .metrics
                    .block_cut(&self.channel.id, CutReason::Config);
                let number = self.writer.lock().next_number();
                let (_, config) =
                    config_of_envelope(envelope.clone()).ok_or_else(|| Error::BadChain {
                        channel: self.channel.id.clone(),
                        block: number,
                        reason: "a CONFIG envelope to order holds no config".to_owned(),
                    })?;
                let config = ChannelConfig::new(&self.channel.id, number, config)?;
                self.cutter
                    .reconfigure(config.orderer.batch_size, config.orderer.batch_timeout);
                // In force before its block is visible, so that a client who
                // sees the block can transact under it; anything checked
                // under it is ordered after the block anyway.
                self.channel.install(config);
                self.write(BlockContent::Config(envelope)).await?;
                tracing::info!(channel = %self.channel.id, block = number, "channel reconfigured");
                Ok(())
            }
        }
    }

    async fn write_batch(&self, batch: Batch, reason: CutReason) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.channel.metrics.block_cut(&self.channel.id, reason);
        self.write(BlockContent::Transactions(batch))
            .await
            .map(drop)
    }

    async fn write(&self, content: BlockContent) -> Result<weft_protos::common::Block> {
        let writer = self.writer.clone();
        let block = tokio::task::spawn_blocking(move || writer.lock().write(&content))
            .await
            .map_err(|e| Error::Task {
                channel: self.channel.id.clone(),
                reason: format!("a block write task died: {e}"),
            })??;
        let number = block.header.as_ref().map_or(0, |header| header.number);
        self.channel.metrics.height(&self.channel.id, number + 1);
        tracing::debug!(
            channel = %self.channel.id,
            block = number,
            transactions = block.data.as_ref().map_or(0, |data| data.data.len()),
            "block written"
        );
        Ok(block)
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
