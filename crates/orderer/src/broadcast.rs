//! `orderer.AtomicBroadcast/Broadcast`: clients submit signed envelopes;
//! each gets a `BroadcastResponse` with Fabric's status and info text.
//!
//! The checks, in Fabric's order (`broadcast.Handler` with the standard
//! channel's filters), each refusal naming what failed: the envelope
//! decodes, every layer, through the decode-once view (else BAD_REQUEST);
//! its channel is served here (else NOT_FOUND); then `crate::admission`
//! checks it under the channel's current configuration (header type,
//! maintenance, size, the creator's right to write, a config update's
//! validity); last, the consenter takes it (else SERVICE_UNAVAILABLE).
//!
//! Deviations from Fabric 2.5, all stricter or clearer: an unknown channel
//! is NOT_FOUND (Fabric 2.5 without a system channel answers BAD_REQUEST,
//! "channel creation request not allowed because the orderer system
//! channel is not defined"); header types other than endorser transactions
//! and config updates are refused (Fabric orders them and lets peers mark
//! them invalid); an envelope whose transaction body does not decode is
//! refused (Fabric orders it, peers mark it BAD_PAYLOAD); an update whose
//! signatures do not meet a mod policy is FORBIDDEN (Fabric: BAD_REQUEST).
//!
//! A request that cannot be read at all (bytes that are not an `Envelope`,
//! or over the gRPC message limit) ends the call with a gRPC status saying
//! why, INTERNAL or RESOURCE_EXHAUSTED as Fabric's gRPC server answers,
//! once the envelopes before it are answered.
//!
//! One stream's envelopes are checked concurrently on the rayon pool (the
//! signature verification dominates), at most
//! [`CHECKS_IN_FLIGHT_MAX`] at a time, when several have arrived together;
//! fewer than [`PARALLEL_MIN_ENVELOPES`] are checked on the stream's own
//! task, since waking a pool thread for one envelope costs more than it
//! saves, and so is every envelope when the pool has a single thread (an
//! orderer given one core, `orderer.workerThreads: 1`). Outcomes are taken
//! in request order: each accepted envelope enters its channel's mailbox,
//! and each response is sent, in the order the client sent them
//! (FastFabric O-II).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prost::Message;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status as GrpcStatus, Streaming};
use weft_protos::common::{Envelope, Status};
use weft_protos::orderer::BroadcastResponse;
use weft_protos::view::TxEnvelope;

use crate::admission::{self, Admitted, Refusal};
use crate::chain::Ack;
use crate::channel::{Channel, RequestContext};
use crate::metrics::OrdererMetrics;

/// Envelopes of one stream being checked at once.
pub const CHECKS_IN_FLIGHT_MAX: usize = 64;
/// Envelopes read from one stream together from which they are checked on
/// the rayon pool; fewer are checked on the stream's task.
const PARALLEL_MIN_ENVELOPES: usize = 4;
/// Envelopes of one stream submitted to the consenter and not answered
/// yet (Raft answers once a block is decided: enough for several blocks).
const SUBMITTED_IN_FLIGHT_MAX: usize = 1024;
/// Responses buffered per stream before the client must read.
const RESPONSES_BUFFERED_MAX: usize = 64;
/// An envelope that passed the checks, for its channel's consenter.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub channel: Arc<Channel>,
    pub input: Admitted,
    /// The block that already ordered the envelope's TxID: it is answered
    /// SUCCESS without being ordered again (a client or Gateway resending
    /// it after an orderer fell silent).
    pub ordered_in: Option<u64>,
}

/// Checks one envelope as received.
pub(crate) fn check(envelope: &Envelope, context: &RequestContext) -> Result<Accepted, Refusal> {
    let raw: Bytes = envelope.encode_to_vec().into();
    let view = TxEnvelope::decode_for_ordering(raw, context.limits)
        .map_err(|e| Refusal::new(Status::BadRequest, format!("malformed envelope: {e}")))?;
    let channel_id = &view.channel_header.channel_id;
    let channel = context.channels.get(channel_id).ok_or_else(|| {
        Refusal::new(
            Status::NotFound,
            format!("channel {channel_id:?} does not exist on this orderer"),
        )
    })?;
    let input = admission::admit(
        &view,
        &channel.config(),
        context.signer.as_ref(),
        (context.now)(),
    )?;
    let ordered_in = match &input {
        Admitted::Normal { .. } => channel.ordered_in(view.tx_id()),
        Admitted::Config { .. } => None,
    };
    Ok(Accepted {
        channel,
        input,
        ordered_in,
    })
}

/// The response stream of one Broadcast call.
pub(crate) type ResponseStream =
    Pin<Box<dyn Stream<Item = Result<BroadcastResponse, GrpcStatus>> + Send>>;

/// Serves one Broadcast stream until the client closes it, the node shuts
/// down, or the client stops reading.
pub(crate) fn serve(
    requests: Streaming<Envelope>,
    remote: Option<SocketAddr>,
    context: RequestContext,
    shutdown: watch::Receiver<bool>,
) -> ResponseStream {
    let (responses, responses_out) = mpsc::channel(RESPONSES_BUFFERED_MAX);
    let (checks, checks_out) = mpsc::channel(CHECKS_IN_FLIGHT_MAX);
    let (failed, failure) = oneshot::channel();
    let metrics = context.metrics.clone();
    let remote = remote.map_or_else(|| "unknown".to_owned(), |address| address.to_string());
    tokio::spawn(read_requests(
        requests,
        context,
        checks,
        shutdown,
        remote.clone(),
        failed,
    ));
    tokio::spawn(answer_in_order(
        checks_out, responses, remote, metrics, failure,
    ));
    Box::pin(ReceiverStream::new(responses_out))
}

/// A check under way, with the time its envelope was read.
type CheckOutcome = (Instant, oneshot::Receiver<Result<Accepted, Refusal>>);

/// A submission under way: when its envelope was read, its channel (once
/// known), and the consenter's promise or the refusal.
type Submitted = (Instant, Option<String>, Result<Ack, Refusal>);

/// Starts a check for each request as it arrives; the bounded `checks`
/// queue limits how many are in flight.
async fn read_requests(
    mut requests: Streaming<Envelope>,
    context: RequestContext,
    checks: mpsc::Sender<CheckOutcome>,
    mut shutdown: watch::Receiver<bool>,
    remote: String,
    failed: oneshot::Sender<GrpcStatus>,
) {
    // A request that cannot be read ends the stream with a status saying
    // why, after the answers to the envelopes before it.
    let fail = |error: GrpcStatus| {
        let status = weft_protos::serve::unreadable_request(&error, "an Envelope");
        tracing::warn!(client = %remote, %error, "broadcast: a request could not be read");
        let _ = failed.send(status);
    };
    loop {
        let envelope = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            message = requests.message() => match message {
                Ok(Some(envelope)) => envelope,
                Ok(None) => return,
                Err(error) => return fail(error),
            },
        };
        // Whatever else the client has already sent is read too: enough
        // of them are worth checking in parallel.
        let mut arrived = vec![(Instant::now(), envelope)];
        // How the stream ended, if it did while reading ahead: closed by
        // the client, or failed.
        let mut ended: Option<Result<(), GrpcStatus>> = None;
        while arrived.len() < CHECKS_IN_FLIGHT_MAX {
            match already_sent(&mut requests) {
                None => break,
                Some(Ok(Some(envelope))) => arrived.push((Instant::now(), envelope)),
                Some(Ok(None)) => {
                    ended = Some(Ok(()));
                    break;
                }
                Some(Err(error)) => {
                    ended = Some(Err(error));
                    break;
                }
            }
        }
        // A pool of one thread (an orderer given one core) would only
        // hand the work over: check on this task then.
        let parallel = arrived.len() >= PARALLEL_MIN_ENVELOPES && rayon::current_num_threads() > 1;
        for (read_at, envelope) in arrived {
            let (outcome, outcome_out) = oneshot::channel();
            if parallel {
                let context = context.clone();
                rayon::spawn(move || {
                    // The receiver is gone only if the stream was abandoned.
                    let _ = outcome.send(check(&envelope, &context));
                });
            } else {
                let _ = outcome.send(check(&envelope, &context));
            }
            if checks.send((read_at, outcome_out)).await.is_err() {
                return;
            }
        }
        match ended {
            None => {}
            Some(Ok(())) => return,
            Some(Err(error)) => return fail(error),
        }
    }
}

/// The stream's next message if the client has already sent it, without
/// waiting for one.
fn already_sent(
    requests: &mut Streaming<Envelope>,
) -> Option<Result<Option<Envelope>, GrpcStatus>> {
    let mut next = std::pin::pin!(requests.message());
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match next.as_mut().poll(&mut context) {
        std::task::Poll::Ready(message) => Some(message),
        std::task::Poll::Pending => None,
    }
}

/// Takes the outcomes in request order and submits accepted envelopes to
/// their consenter; the answers follow in the same order (`answer`), so a
/// consenter that answers once an envelope is ordered (Raft) still has
/// many envelopes of one stream in flight.
async fn answer_in_order(
    mut checks: mpsc::Receiver<CheckOutcome>,
    responses: mpsc::Sender<Result<BroadcastResponse, GrpcStatus>>,
    remote: String,
    metrics: OrdererMetrics,
    failure: oneshot::Receiver<GrpcStatus>,
) {
    let (acks, acks_out) = mpsc::channel(SUBMITTED_IN_FLIGHT_MAX);
    let answering = tokio::spawn(answer(
        acks_out,
        responses,
        remote.clone(),
        metrics,
        failure,
    ));
    while let Some((read_at, outcome)) = checks.recv().await {
        let outcome = outcome.await.unwrap_or_else(|_| {
            Err(Refusal::new(
                Status::InternalServerError,
                "the envelope check failed unexpectedly",
            ))
        });
        let submitted = match outcome {
            Ok(Accepted {
                channel,
                ordered_in: Some(block),
                ..
            }) => {
                tracing::info!(
                    client = %remote,
                    channel = %channel.id,
                    block,
                    "broadcast: an envelope already ordered is answered without ordering it again"
                );
                (read_at, Some(channel.id.clone()), Ok(Ack::Now))
            }
            // A node whose consenter stopped (its disk failed) orders
            // nothing more, not even by forwarding to a Raft leader.
            Ok(accepted) => {
                let channel = &accepted.channel;
                let ordered = match channel.stopped() {
                    Some(reason) => Err(Refusal::new(
                        Status::ServiceUnavailable,
                        format!(
                            "channel {} cannot order on this node: its consenter stopped: {reason}",
                            channel.id
                        ),
                    )),
                    None => channel
                        .chain
                        .submit(accepted.input)
                        .await
                        .map_err(|e| Refusal::new(Status::ServiceUnavailable, e.to_string())),
                };
                (read_at, Some(channel.id.clone()), ordered)
            }
            Err(refusal) => (read_at, None, Err(refusal)),
        };
        if acks.send(submitted).await.is_err() {
            break;
        }
    }
    drop(acks);
    // The answering task ends once every answer is sent or the client left.
    let _ = answering.await;
}

/// Sends each submission's answer, in request order, and records its
/// latency.
async fn answer(
    mut acks: mpsc::Receiver<Submitted>,
    responses: mpsc::Sender<Result<BroadcastResponse, GrpcStatus>>,
    remote: String,
    metrics: OrdererMetrics,
    mut failure: oneshot::Receiver<GrpcStatus>,
) {
    while let Some((read_at, channel, submitted)) = acks.recv().await {
        let result = match submitted {
            Ok(ack) => ack.outcome().await,
            Err(refusal) => Err(refusal),
        };
        let status = match &result {
            Ok(()) => Status::Success,
            Err(refusal) => refusal.status,
        };
        metrics.broadcast(channel.as_deref(), status, read_at.elapsed());
        let response = match result {
            Ok(()) => BroadcastResponse {
                status: Status::Success as i32,
                info: String::new(),
            },
            Err(refusal) => {
                tracing::warn!(
                    client = %remote,
                    status = refusal.status.as_str_name(),
                    info = %refusal.info,
                    "broadcast: envelope refused"
                );
                BroadcastResponse {
                    status: refusal.status as i32,
                    info: refusal.info,
                }
            }
        };
        if responses.send(Ok(response)).await.is_err() {
            return;
        }
    }
    // Every envelope read before an unreadable request is answered: the
    // stream ends with the reason it could not go on.
    if let Ok(status) = failure.try_recv() {
        let _ = responses.send(Err(status)).await;
    }
}
