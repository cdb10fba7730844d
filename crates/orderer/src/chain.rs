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
//! - **Raft** (to come): the leader's task runs the cutter and proposes
//!   each batch as a Raft log entry; every node, leader included, hands
//!   entries to its writer once Raft has ordered them. Because
//!   [`BlockWriter::assemble`] is a function of the batch sequence, all
//!   nodes store the same blocks, each with its own signature.
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

use crate::channel::{Channel, ChannelConfig};
use crate::cutter::{Batch, BlockCutter};
use crate::error::{Error, Result};
use crate::writer::{BlockContent, BlockWriter};

/// Accepted envelopes a channel's mailbox holds before Broadcast waits.
const MAILBOX_CAPACITY: usize = 4096;

/// Which consensus orders a channel on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consenter {
    Solo,
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

/// The sending end of a channel's mailbox.
#[derive(Debug, Clone)]
pub(crate) struct ChainHandle {
    channel_id: String,
    mailbox: mpsc::Sender<ChainInput>,
}

impl ChainHandle {
    /// Hands an accepted envelope to the consenter, waiting while the
    /// mailbox is full.
    pub async fn submit(&self, input: ChainInput) -> Result<(), Unavailable> {
        self.mailbox.send(input).await.map_err(|_| Unavailable {
            channel: self.channel_id.clone(),
        })
    }
}

/// The receiving end, until the task takes it.
#[derive(Debug)]
pub(crate) struct Mailbox(mpsc::Receiver<ChainInput>);

/// A new mailbox for `channel_id`.
pub(crate) fn mailbox(channel_id: &str) -> (ChainHandle, Mailbox) {
    let (sender, receiver) = mpsc::channel(MAILBOX_CAPACITY);
    (
        ChainHandle {
            channel_id: channel_id.to_owned(),
            mailbox: sender,
        },
        Mailbox(receiver),
    )
}

/// A running channel task.
#[derive(Debug)]
pub(crate) struct ChainTask {
    halt: oneshot::Sender<()>,
    task: JoinHandle<Result<()>>,
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

/// Starts the consenter task of `channel`, writing with `writer`.
pub(crate) fn start(
    consenter: Consenter,
    channel: Arc<Channel>,
    mailbox: Mailbox,
    writer: BlockWriter,
    signer: Arc<dyn Sign + Send + Sync>,
) -> ChainTask {
    let (halt, halted) = oneshot::channel();
    let task = match consenter {
        Consenter::Solo => tokio::spawn(async move {
            let channel_id = channel.id.clone();
            let result = Solo::new(channel, writer, signer)
                .run(mailbox.0, halted)
                .await;
            if let Err(error) = &result {
                tracing::error!(channel = %channel_id, %error, "solo chain stopped");
            }
            result
        }),
    };
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
        mut mailbox: mpsc::Receiver<ChainInput>,
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
                    Some(input) => self.order(input).await?,
                    None => break,
                },
                () = timer => {
                    if let Some(batch) = self.cutter.expire(Instant::now()) {
                        self.write_batch(batch).await?;
                    }
                }
            }
        }
        // Order what clients were already told SUCCESS for, then stop.
        mailbox.close();
        while let Some(input) = mailbox.recv().await {
            self.order(input).await?;
        }
        let batch = self.cutter.cut();
        self.write_batch(batch).await
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
                for batch in ordered.batches {
                    self.write_batch(batch).await?;
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
                self.write_batch(pending).await?;
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

    async fn write_batch(&self, batch: Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
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
        tracing::debug!(
            channel = %self.channel.id,
            block = block.header.as_ref().map_or(0, |header| header.number),
            transactions = block.data.as_ref().map_or(0, |data| data.data.len()),
            "block written"
        );
        Ok(block)
    }
}
