//! The solo consenter: one orderer, the only decider. Its task takes
//! admitted envelopes from the channel's mailbox in order, runs the
//! [`BlockCutter`] and its timer, and hands each batch to the
//! [`BlockWriter`]. A client hears SUCCESS once the envelope is in the
//! mailbox ([`crate::chain::Ack::Now`]), as Fabric's solo answers: the mailbox is
//! ordered to the end on a clean shutdown.
//!
//! A stream channel waits for no batch: once the mailbox is empty, what
//! the task took since the last block becomes the next one, so a block
//! holds one transaction at low load and grows only with what arrives
//! while the previous block is written. Its timer is the checkpoint
//! interval ([`Checkpoints`]), which cuts an empty signed block when
//! unsigned blocks would otherwise wait for their signature.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use weft_protos::tx::Sign;

use super::{ChainTask, Mailbox, Submission, ordered_config, reconfigure, write_block};
use crate::admission::{Admitted, readmit};
use crate::channel::Channel;
use crate::checkpoint::{Checkpoints, Load, Seal};
use crate::cutter::{Batch, BlockCutter, CutReason};
use crate::error::Result;
use crate::writer::{BlockContent, BlockWriter};

/// Starts the solo consenter task of `channel`, writing with `writer`.
pub(crate) fn start(
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
    checkpoints: Checkpoints,
    writer: Arc<Mutex<BlockWriter>>,
}

impl Solo {
    fn new(
        channel: Arc<Channel>,
        writer: BlockWriter,
        signer: Arc<dyn Sign + Send + Sync>,
    ) -> Self {
        let config = channel.config();
        let mut checkpoints = Checkpoints::new(config.orderer.stream);
        // A stream channel stopped by a crash may end on unsigned blocks.
        if !writer.tip_signed() {
            checkpoints.overdue(Instant::now());
        }
        Self {
            signer,
            cutter: BlockCutter::new(config.orderer.batch_size, config.orderer.batch_timeout),
            checkpoints,
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
            let deadline = if self.checkpoints.streams() {
                self.checkpoints.deadline()
            } else {
                self.cutter.deadline()
            };
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
                    Some(submission) => {
                        self.order(submission.input).await?;
                        if self.checkpoints.streams() {
                            self.stream_block(&mut mailbox).await?;
                        }
                    }
                    None => break,
                },
                () = timer => {
                    if self.checkpoints.streams() {
                        self.checkpoint().await?;
                    } else if let Some(batch) = self.cutter.expire(Instant::now()) {
                        self.write_batch(batch, CutReason::Timeout, Load::Busy).await?;
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
        self.write_batch(batch, CutReason::Halt, Load::Idle).await?;
        // A stream channel stops on a signed block, so that peers need not
        // wait for this orderer's next start to make its last blocks
        // durable.
        self.checkpoint().await
    }

    async fn order(&mut self, input: Admitted) -> Result<()> {
        let input = match readmit(input, &self.channel.config(), self.signer.as_ref()) {
            Ok(input) => input,
            Err(refusal) => {
                tracing::warn!(
                    channel = %self.channel.id,
                    status = refusal.status.as_str_name(),
                    info = %refusal.info,
                    "discarding an envelope the new config refuses"
                );
                return Ok(());
            }
        };
        match input {
            Admitted::Normal {
                envelope,
                size_bytes,
                ..
            } => {
                let ordered = self.cutter.ordered(envelope, size_bytes, Instant::now());
                for (batch, reason) in ordered.batches.into_iter().zip(ordered.reasons) {
                    self.write_batch(batch, reason, Load::Busy).await?;
                }
                Ok(())
            }
            Admitted::Config { envelope, .. } => {
                let pending = self.cutter.cut();
                self.write_batch(pending, CutReason::Config, Load::Busy)
                    .await?;
                self.channel
                    .metrics
                    .block_cut(&self.channel.id, CutReason::Config);
                let number = self.writer.lock().next_number();
                let config = ordered_config(&self.channel.id, number, &envelope)?;
                reconfigure(&mut self.cutter, &mut self.checkpoints, &config);
                // In force before its block is visible, so that a client who
                // sees the block can transact under it; anything checked
                // under it is ordered after the block anyway.
                self.channel.install(config);
                self.write(BlockContent::Config(envelope), Load::Idle)
                    .await?;
                tracing::info!(channel = %self.channel.id, block = number, "channel reconfigured");
                Ok(())
            }
        }
    }

    /// A stream channel: orders what else the mailbox holds now (at most
    /// a block's worth), then cuts what is pending as the next block,
    /// signed if nothing arrived meanwhile.
    async fn stream_block(&mut self, mailbox: &mut mpsc::Receiver<Submission>) -> Result<()> {
        let most = self.channel.config().orderer.batch_size.max_message_count as usize;
        for _ in 1..most {
            match mailbox.try_recv() {
                Ok(submission) => self.order(submission.input).await?,
                Err(_) => break,
            }
        }
        let batch = self.cutter.cut();
        let load = if mailbox.is_empty() {
            Load::Idle
        } else {
            Load::Busy
        };
        self.write_batch(batch, CutReason::Stream, load).await
    }

    /// A stream channel whose checkpoint interval ran out: an empty signed
    /// block, if blocks are still unsigned.
    async fn checkpoint(&mut self) -> Result<()> {
        if !self.checkpoints.pending() {
            return Ok(());
        }
        self.channel
            .metrics
            .block_cut(&self.channel.id, CutReason::Checkpoint);
        self.write(BlockContent::Transactions(Vec::new()), Load::Idle)
            .await
            .map(drop)
    }

    async fn write_batch(&mut self, batch: Batch, reason: CutReason, load: Load) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.channel.metrics.block_cut(&self.channel.id, reason);
        self.write(BlockContent::Transactions(batch), load)
            .await
            .map(drop)
    }

    async fn write(
        &mut self,
        content: BlockContent,
        load: Load,
    ) -> Result<weft_protos::common::Block> {
        let seal = match content {
            BlockContent::Config(_) => {
                self.checkpoints.signed();
                Seal::Signed
            }
            BlockContent::Transactions(ref batch) => {
                self.checkpoints.seal(batch.len(), Instant::now(), load)
            }
        };
        write_block(&self.channel, &self.writer, content, Bytes::new(), seal).await
    }
}
