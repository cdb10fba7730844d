//! One Broadcast stream to an orderer that many senders share, each
//! waiting for the answer to its own envelope.
//!
//! An orderer answers a stream's envelopes in the order they were sent
//! (Fabric's Broadcast contract), so a client needs no stream per
//! transaction: it queues each envelope together with a waiter, and hands
//! each answer to the waiter at the head of the queue. A stream per
//! transaction costs both ends HTTP/2 headers and trailers each way, and
//! an orderer the tasks that check and answer a stream; one shared stream
//! costs them once. The Gateway's Submit and `weft bench` share their
//! streams this way.
//!
//! A stream that ends (the orderer stopped, restarted, or closed it at its
//! idle limit) fails every sender still waiting with the reason, and
//! takes no more envelopes: whoever holds the line opens a new one.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::common::Envelope;
use crate::orderer::BroadcastResponse;
use crate::orderer::atomic_broadcast_client::AtomicBroadcastClient;

/// An orderer's answer to one envelope, or why the stream ended first.
pub type Answer = Result<BroadcastResponse, Status>;

/// A Broadcast stream shared by many senders.
pub struct BroadcastLine {
    state: Mutex<LineState>,
}

struct LineState {
    /// The stream's envelopes, in the order their waiters are queued.
    outbox: mpsc::UnboundedSender<Envelope>,
    waiting: VecDeque<oneshot::Sender<Answer>>,
    ended: bool,
}

impl std::fmt::Debug for BroadcastLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("BroadcastLine")
            .field("waiting", &state.waiting.len())
            .field("ended", &state.ended)
            .finish()
    }
}

impl BroadcastLine {
    /// Starts a stream on `channel` without waiting for the orderer:
    /// envelopes sent before it accepts the call go out once it does, and
    /// a refused call fails them.
    pub fn open(channel: Channel) -> Arc<Self> {
        Self::start(channel).0
    }

    /// Starts a stream on `channel` and waits until the orderer accepts
    /// the call; its refusal (or an unreachable orderer) is the error.
    pub async fn open_accepted(channel: Channel) -> Result<Arc<Self>, Status> {
        let (line, accepted) = Self::start(channel);
        match accepted.await {
            Ok(Ok(())) => Ok(line),
            Ok(Err(refused)) => Err(refused),
            Err(_) => Err(Status::unavailable(
                "the Broadcast stream ended before the orderer answered the call",
            )),
        }
    }

    fn start(channel: Channel) -> (Arc<Self>, oneshot::Receiver<Result<(), Status>>) {
        let (outbox, outgoing) = mpsc::unbounded_channel();
        let line = Arc::new(Self {
            state: Mutex::new(LineState {
                outbox,
                waiting: VecDeque::new(),
                ended: false,
            }),
        });
        let (accepted, on_accepted) = oneshot::channel();
        let reader = line.clone();
        tokio::spawn(async move {
            let call = AtomicBroadcastClient::new(channel)
                .broadcast(UnboundedReceiverStream::new(outgoing))
                .await;
            let why = match call {
                Ok(answers) => {
                    let _ = accepted.send(Ok(()));
                    reader.read(answers.into_inner()).await
                }
                Err(refused) => {
                    let _ = accepted.send(Err(refused.clone()));
                    refused
                }
            };
            reader.end(&why);
        });
        (line, on_accepted)
    }

    /// Sends `envelope` on the stream and waits for the orderer's answer
    /// to it; an error says why the stream ended first (or had already).
    pub async fn broadcast(&self, envelope: Envelope) -> Answer {
        let answer = {
            let mut state = self.state.lock();
            if state.ended || state.outbox.send(envelope).is_err() {
                return Err(Status::unavailable("the Broadcast stream ended"));
            }
            let (done, answer) = oneshot::channel();
            state.waiting.push_back(done);
            answer
        };
        // Every waiter is answered or failed with the reason (`end`);
        // only a reader task that died drops one unanswered.
        answer.await.unwrap_or_else(|_| {
            Err(Status::unavailable(
                "the Broadcast stream's reader stopped before the orderer answered",
            ))
        })
    }

    /// Whether the stream has ended (a new one is needed).
    pub fn has_ended(&self) -> bool {
        self.state.lock().ended
    }

    /// Hands each answer to the sender waiting first; returns why the
    /// stream ended.
    async fn read(&self, mut answers: Streaming<BroadcastResponse>) -> Status {
        loop {
            match answers.message().await {
                Ok(Some(answer)) => {
                    let Some(waiter) = self.state.lock().waiting.pop_front() else {
                        return Status::internal("the orderer answered an envelope never sent");
                    };
                    // A sender that gave up waiting dropped its receiver.
                    let _ = waiter.send(Ok(answer));
                }
                Ok(None) => return Status::unavailable("the orderer ended the Broadcast stream"),
                Err(status) => return status,
            }
        }
    }

    /// Fails every sender still waiting, with why the stream ended.
    fn end(&self, why: &Status) {
        let mut state = self.state.lock();
        state.ended = true;
        for waiter in state.waiting.drain(..) {
            let _ = waiter.send(Err(Status::new(why.code(), why.message())));
        }
    }
}
