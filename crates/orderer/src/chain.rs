//! The seam between the services that accept envelopes and the consenters
//! that order them: a channel's [`Chain`] (Fabric's name for it).
//!
//! Broadcast (and the cluster service, for envelopes another orderer
//! forwards) hands each admitted envelope to the channel's chain and
//! learns from the [`Ack`] when the client may hear SUCCESS. Every
//! consenter (`consensus::solo`, `raft`, `kafka`) is a chain through the
//! sending end of its mailbox, `ChainHandle`; the channel holds it as a
//! trait object, so neither the channel nor the services depend on a
//! consenter, and a new consenter plugs in here.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::oneshot;
use weft_protos::common::Status;

use crate::admission::{Admitted, Refusal};

/// Where a channel's admitted envelopes go to be ordered.
pub(crate) trait Chain: std::fmt::Debug + Send + Sync {
    /// Hands an accepted envelope to the consenter, waiting while its
    /// mailbox is full; the [`Ack`] tells when the client may hear
    /// SUCCESS.
    fn submit(&self, input: Admitted) -> Submitting<'_>;

    /// [`Chain::submit`] for an envelope another orderer forwarded: it
    /// is ordered here, never forwarded again.
    fn submit_forwarded(&self, input: Admitted) -> Submitting<'_>;
}

/// A submission under way.
pub(crate) type Submitting<'a> =
    Pin<Box<dyn Future<Output = Result<Ack, Unavailable>> + Send + 'a>>;

/// The consenter refused an envelope: it is halted or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the consenter of channel {channel} is not running")]
pub(crate) struct Unavailable {
    pub channel: String,
}

/// When a client may be told SUCCESS for a submitted envelope.
#[derive(Debug)]
pub(crate) enum Ack {
    /// Now: the consenter holds it (solo, whose mailbox survives until
    /// ordered, as Fabric's solo answers).
    Now,
    /// Once the consenter answers: Raft answers when the envelope's block
    /// is decided, Kafka once its record is in Kafka; or either refuses it
    /// (no leader, leadership lost, brokers away).
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
pub(crate) fn stopped() -> Refusal {
    Refusal::new(
        Status::ServiceUnavailable,
        "the consenter stopped before the envelope was ordered",
    )
}
