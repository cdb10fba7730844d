//! The Gateway's Broadcast streams: one long-lived stream to each orderer,
//! shared by every Submit, where Fabric's Gateway opens a stream for each
//! transaction.
//!
//! A stream costs both ends more than the one envelope it would carry:
//! HTTP/2 headers and trailers each way, and on a weft orderer the tasks
//! that check and answer a stream's envelopes. An orderer answers a
//! stream's envelopes in the order they were sent (Fabric's Broadcast
//! contract, which weft's orderer keeps while it checks them in parallel),
//! so one stream carries any number of submits at once, each waiting for
//! the answer in its place. What an orderer sees is what it sees from an
//! SDK that keeps its Broadcast stream open.
//!
//! A stream that ends (the orderer stopped, restarted, or closed it after
//! its idle limit) fails the submits still waiting on it; each tries a new
//! stream to that orderer once, then the next orderer as before. The one envelope that can end a stream by itself is one over
//! the orderer's gRPC message limit, so an envelope above
//! [`SHARED_ENVELOPE_BYTES_MAX`] goes on a stream of its own, as on
//! Fabric, and cannot take other clients' answers down with it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};
use weft_protos::common::Envelope;
use weft_protos::orderer::BroadcastResponse;
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;

type Answer = Result<BroadcastResponse, Status>;

/// The largest envelope sent on the shared stream; larger ones get a
/// stream each. Far below any gRPC limit an orderer is configured with
/// (Fabric's default is 100 MiB), far above a transaction's few kilobytes.
const SHARED_ENVELOPE_BYTES_MAX: usize = 1024 * 1024;

/// The open Broadcast stream to each orderer, by address.
#[derive(Default)]
pub(crate) struct BroadcastLines {
    lines: Mutex<HashMap<String, Arc<Line>>>,
}

impl std::fmt::Debug for BroadcastLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines = self.lines.lock();
        f.debug_struct("BroadcastLines")
            .field("orderers", &lines.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl BroadcastLines {
    /// Sends `envelope` to the orderer at `address` (over `channel`, its
    /// connection, when a stream must be opened) and waits for its answer.
    pub(crate) async fn broadcast(
        &self,
        address: &str,
        channel: impl Fn() -> Result<Channel, Status>,
        envelope: Envelope,
    ) -> Answer {
        if envelope.encoded_len() > SHARED_ENVELOPE_BYTES_MAX {
            let mut answers = AtomicBroadcastClient::new(channel()?)
                .broadcast(tokio_stream::iter([envelope]))
                .await?
                .into_inner();
            return answers
                .message()
                .await?
                .ok_or_else(|| Status::unavailable("the orderer ended the Broadcast stream"));
        }
        // A stream that ends before answering, as the envelope goes out
        // (the orderer closed it at its idle limit just then, or stopped),
        // is replaced once: an orderer that is gone refuses the new one at
        // once, and the submit tries the next orderer.
        let mut ended = Status::unavailable("the Broadcast stream ended");
        for _ in 0..2 {
            let line = self.line(address, &channel)?;
            let Some(answer) = line.send(envelope.clone()) else {
                continue;
            };
            match answer.await {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(why)) => ended = why,
                Err(_) => {}
            }
        }
        Err(ended)
    }

    /// The stream to `address`, opened if there is none or it ended.
    fn line(
        &self,
        address: &str,
        channel: impl Fn() -> Result<Channel, Status>,
    ) -> Result<Arc<Line>, Status> {
        let mut lines = self.lines.lock();
        if let Some(line) = lines.get(address)
            && !line.has_ended()
        {
            return Ok(line.clone());
        }
        let line = Line::open(channel()?);
        lines.insert(address.to_owned(), line.clone());
        Ok(line)
    }
}

/// One Broadcast stream and the submits waiting for its answers.
struct Line {
    state: Mutex<LineState>,
}

struct LineState {
    /// The stream's envelopes, in the order their waiters are queued.
    outbox: mpsc::UnboundedSender<Envelope>,
    waiting: VecDeque<oneshot::Sender<Answer>>,
    ended: bool,
}

impl Line {
    /// Starts the stream on `channel`; envelopes queued before the
    /// orderer answers the call go out once it does.
    fn open(channel: Channel) -> Arc<Self> {
        let (outbox, outgoing) = mpsc::unbounded_channel();
        let line = Arc::new(Self {
            state: Mutex::new(LineState {
                outbox,
                waiting: VecDeque::new(),
                ended: false,
            }),
        });
        let reader = line.clone();
        tokio::spawn(async move {
            let call = AtomicBroadcastClient::new(channel)
                .broadcast(UnboundedReceiverStream::new(outgoing))
                .await;
            let why = match call {
                Ok(answers) => reader.read(answers.into_inner()).await,
                Err(status) => status,
            };
            reader.end(&why);
        });
        line
    }

    /// Hands each answer to the submit waiting first; returns why the
    /// stream ended.
    async fn read(&self, mut answers: Streaming<BroadcastResponse>) -> Status {
        loop {
            match answers.message().await {
                Ok(Some(answer)) => {
                    let Some(waiter) = self.state.lock().waiting.pop_front() else {
                        return Status::internal("the orderer answered an envelope never sent");
                    };
                    // A submit that gave up waiting dropped its receiver.
                    let _ = waiter.send(Ok(answer));
                }
                Ok(None) => return Status::unavailable("the orderer ended the Broadcast stream"),
                Err(status) => return status,
            }
        }
    }

    /// Fails every submit still waiting, with why the stream ended.
    fn end(&self, why: &Status) {
        let mut state = self.state.lock();
        state.ended = true;
        for waiter in state.waiting.drain(..) {
            let _ = waiter.send(Err(Status::new(why.code(), why.message())));
        }
    }

    fn has_ended(&self) -> bool {
        self.state.lock().ended
    }

    /// Queues `envelope`; its answer comes on the receiver. `None` when
    /// the stream has ended.
    fn send(&self, envelope: Envelope) -> Option<oneshot::Receiver<Answer>> {
        let mut state = self.state.lock();
        if state.ended || state.outbox.send(envelope).is_err() {
            return None;
        }
        let (done, answer) = oneshot::channel();
        state.waiting.push_back(done);
        Some(answer)
    }
}
