//! `orderer.AtomicBroadcast/Broadcast`: clients submit signed envelopes;
//! each gets a `BroadcastResponse` with Fabric's status and info text.
//!
//! The checks, in Fabric's order (`broadcast.Handler` with the standard
//! channel's filters), each refusal naming what failed:
//!
//! | check | refusal |
//! |---|---|
//! | the envelope decodes (every layer, through the decode-once view) | BAD_REQUEST |
//! | its channel is served here | NOT_FOUND |
//! | its header type is ENDORSER_TRANSACTION (CONFIG_UPDATE: see `config_update`) | BAD_REQUEST |
//! | the channel is not in maintenance | SERVICE_UNAVAILABLE |
//! | payload + signature ≤ `AbsoluteMaxBytes` | BAD_REQUEST |
//! | the creator is valid in the channel's MSPs, its signature verifies, and it satisfies `/Channel/Writers` | FORBIDDEN |
//! | the consenter takes it | SERVICE_UNAVAILABLE |
//!
//! Deviations from Fabric 2.5, all stricter or clearer: an unknown channel
//! is NOT_FOUND (Fabric 2.5 without a system channel answers BAD_REQUEST,
//! "channel creation request not allowed because the orderer system
//! channel is not defined"); header types other than endorser transactions
//! and config updates are refused (Fabric orders them and lets peers mark
//! them invalid); an envelope whose transaction body does not decode is
//! refused (Fabric orders it, peers mark it BAD_PAYLOAD).
//!
//! One stream's envelopes are checked concurrently on the rayon pool (the
//! signature verification dominates), at most
//! [`CHECKS_IN_FLIGHT_MAX`] at a time, while their outcomes are taken in
//! request order: each accepted envelope enters its channel's mailbox, and
//! each response is sent, in the order the client sent them (FastFabric
//! O-II).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status as GrpcStatus, Streaming};
use weft_msp::UnixTime;
use weft_protos::common::{Envelope, HeaderType, Status};
use weft_protos::orderer::BroadcastResponse;
use weft_protos::view::{Limits, TxBody, TxEnvelope};

use crate::chain::ChainInput;
use crate::channel::{Channel, ChannelConfig};
use crate::server::Channels;

/// Envelopes of one stream being checked at once.
pub const CHECKS_IN_FLIGHT_MAX: usize = 64;
/// Responses buffered per stream before the client must read.
const RESPONSES_BUFFERED_MAX: usize = 64;
/// The policy a Broadcast client must satisfy.
pub(crate) const WRITERS_POLICY: &str = "/Channel/Writers";

/// Why an envelope was refused, as the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: Status,
    pub info: String,
}

impl Refusal {
    pub fn new(status: Status, info: impl Into<String>) -> Self {
        Self {
            status,
            info: info.into(),
        }
    }
}

/// An envelope that passed the checks, for its channel's consenter.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub channel: Arc<Channel>,
    pub input: ChainInput,
}

/// Everything a check needs besides the envelope.
#[derive(Debug, Clone)]
pub(crate) struct CheckContext {
    pub channels: Arc<Channels>,
    /// The node-wide decode limit; channels apply their own
    /// `AbsoluteMaxBytes` on top.
    pub limits: Limits,
    pub now: fn() -> UnixTime,
}

/// Checks one envelope as received.
pub(crate) fn check(envelope: &Envelope, context: &CheckContext) -> Result<Accepted, Refusal> {
    let raw: Bytes = envelope.encode_to_vec().into();
    let view = TxEnvelope::decode(raw, context.limits)
        .map_err(|e| Refusal::new(Status::BadRequest, format!("malformed envelope: {e}")))?;
    let channel_id = &view.channel_header.channel_id;
    let channel = context.channels.get(channel_id).ok_or_else(|| {
        Refusal::new(
            Status::NotFound,
            format!("channel {channel_id:?} does not exist on this orderer"),
        )
    })?;
    let config = channel.config();
    let input = check_in_channel(&view, &config, (context.now)())?;
    Ok(Accepted { channel, input })
}

/// Checks a decoded envelope against one configuration of its channel.
fn check_in_channel(
    view: &TxEnvelope,
    config: &ChannelConfig,
    now: UnixTime,
) -> Result<ChainInput, Refusal> {
    match &view.body {
        TxBody::Endorser(_) => {}
        TxBody::ConfigUpdate(_) => {
            return Err(Refusal::new(
                Status::BadRequest,
                "config updates (CONFIG_UPDATE) are not supported by this orderer yet",
            ));
        }
        TxBody::Config(_) => {
            return Err(Refusal::new(
                Status::BadRequest,
                "message is of type that cannot be processed directly",
            ));
        }
        TxBody::Other(_) => {
            let name = HeaderType::try_from(view.channel_header.r#type).map_or_else(
                |_| view.channel_header.r#type.to_string(),
                |t| t.as_str_name().to_owned(),
            );
            let info = if view.channel_header.r#type == HeaderType::OrdererTransaction as i32 {
                "message is of type that cannot be processed directly".to_owned()
            } else {
                format!(
                    "header type {name} is not accepted; send ENDORSER_TRANSACTION or CONFIG_UPDATE"
                )
            };
            return Err(Refusal::new(Status::BadRequest, info));
        }
    }
    if config.orderer.maintenance {
        return Err(Refusal::new(
            Status::ServiceUnavailable,
            "normal transactions are rejected: maintenance mode",
        ));
    }
    let size_bytes = check_size(view, config)?;
    authorize(view, config, now)?;
    Ok(ChainInput::Normal {
        envelope: view.raw.clone(),
        size_bytes,
        config_sequence: config.sequence(),
    })
}

/// Fabric's size filter: payload plus signature within `AbsoluteMaxBytes`.
fn check_size(view: &TxEnvelope, config: &ChannelConfig) -> Result<u64, Refusal> {
    let size_bytes = (view.payload_bytes.len() + view.signature.len()) as u64;
    let limit = u64::from(config.orderer.batch_size.absolute_max_bytes);
    if size_bytes > limit {
        return Err(Refusal::new(
            Status::BadRequest,
            format!(
                "message payload is {size_bytes} bytes and exceeds maximum allowed {limit} bytes"
            ),
        ));
    }
    Ok(size_bytes)
}

/// The creator is a valid member of the channel, signed the payload, and
/// satisfies the Writers policy. The signature is verified once.
fn authorize(view: &TxEnvelope, config: &ChannelConfig, now: UnixTime) -> Result<(), Refusal> {
    let forbidden =
        |reason: String| Refusal::new(Status::Forbidden, format!("{reason}: permission denied"));
    let identity = config
        .authority
        .msps
        .deserialize(view.creator(), now)
        .map_err(|e| forbidden(format!("the creator's identity is not valid: {e}")))?;
    identity
        .verify(&view.payload_bytes, &view.signature)
        .map_err(|e| forbidden(format!("the creator's signature is not valid: {e}")))?;
    config
        .authority
        .policies
        .is_satisfied_by(WRITERS_POLICY, &[identity])
        .map_err(|e| forbidden(e.to_string()))
}

/// Checks an accepted envelope again under a newer configuration of its
/// channel (the consenter does this before ordering it).
pub(crate) fn recheck(config: &ChannelConfig, raw: &Bytes) -> Result<(), Refusal> {
    let view = TxEnvelope::decode(raw.clone(), Limits::default())
        .map_err(|e| Refusal::new(Status::BadRequest, format!("malformed envelope: {e}")))?;
    check_in_channel(&view, config, weft_msp::now()).map(drop)
}

/// The response stream of one Broadcast call.
pub(crate) type ResponseStream =
    Pin<Box<dyn Stream<Item = Result<BroadcastResponse, GrpcStatus>> + Send>>;

/// Serves one Broadcast stream until the client closes it, the node shuts
/// down, or the client stops reading.
pub(crate) fn serve(
    requests: Streaming<Envelope>,
    remote: Option<SocketAddr>,
    context: CheckContext,
    shutdown: watch::Receiver<bool>,
) -> ResponseStream {
    let (responses, responses_out) = mpsc::channel(RESPONSES_BUFFERED_MAX);
    let (checks, checks_out) = mpsc::channel(CHECKS_IN_FLIGHT_MAX);
    tokio::spawn(read_requests(requests, context, checks, shutdown));
    tokio::spawn(answer_in_order(checks_out, responses, remote));
    Box::pin(ReceiverStream::new(responses_out))
}

type CheckOutcome = oneshot::Receiver<Result<Accepted, Refusal>>;

/// Starts a check for each request as it arrives; the bounded `checks`
/// queue limits how many are in flight.
async fn read_requests(
    mut requests: Streaming<Envelope>,
    context: CheckContext,
    checks: mpsc::Sender<CheckOutcome>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let envelope = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            message = requests.message() => match message {
                Ok(Some(envelope)) => envelope,
                Ok(None) => return,
                Err(error) => {
                    tracing::debug!(%error, "broadcast: request stream failed");
                    return;
                }
            },
        };
        let (outcome, outcome_out) = oneshot::channel();
        let context = context.clone();
        rayon::spawn(move || {
            // The receiver is gone only if the stream was abandoned.
            let _ = outcome.send(check(&envelope, &context));
        });
        if checks.send(outcome_out).await.is_err() {
            return;
        }
    }
}

/// Takes the outcomes in request order: submits accepted envelopes to
/// their consenter, then answers.
async fn answer_in_order(
    mut checks: mpsc::Receiver<CheckOutcome>,
    responses: mpsc::Sender<Result<BroadcastResponse, GrpcStatus>>,
    remote: Option<SocketAddr>,
) {
    let remote = remote.map_or_else(|| "unknown".to_owned(), |address| address.to_string());
    while let Some(outcome) = checks.recv().await {
        let outcome = outcome.await.unwrap_or_else(|_| {
            Err(Refusal::new(
                Status::InternalServerError,
                "the envelope check failed unexpectedly",
            ))
        });
        let result = match outcome {
            Ok(accepted) => accepted
                .channel
                .chain
                .submit(accepted.input)
                .await
                .map_err(|e| Refusal::new(Status::ServiceUnavailable, e.to_string())),
            Err(refusal) => Err(refusal),
        };
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
}
