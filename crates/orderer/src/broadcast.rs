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
//! | its header type is ENDORSER_TRANSACTION or CONFIG_UPDATE | BAD_REQUEST |
//! | the channel is not in maintenance | SERVICE_UNAVAILABLE |
//! | payload + signature ≤ `AbsoluteMaxBytes` | BAD_REQUEST |
//! | the creator is valid in the channel's MSPs, its signature verifies, and it satisfies `/Channel/Writers` | FORBIDDEN |
//! | a config update applies to the current config (`config_update`) | BAD_REQUEST, or FORBIDDEN when a mod policy is not met |
//! | the consenter takes it | SERVICE_UNAVAILABLE |
//!
//! An accepted config update becomes a CONFIG envelope signed by this
//! orderer, `ConfigEnvelope{config, last_update}`, which the consenter
//! writes as a block of its own; if another update was ordered in between,
//! the consenter processes it again against the new config.
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
//! One stream's envelopes are checked concurrently on the rayon pool (the
//! signature verification dominates), at most
//! [`CHECKS_IN_FLIGHT_MAX`] at a time, while their outcomes are taken in
//! request order: each accepted envelope enters its channel's mailbox, and
//! each response is sent, in the order the client sent them (FastFabric
//! O-II).

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
use weft_msp::UnixTime;
use weft_protos::common::{
    ChannelHeader, ConfigEnvelope, ConfigUpdateEnvelope, Envelope, Header, HeaderType, Payload,
    SignatureHeader, Status,
};
use weft_protos::orderer::BroadcastResponse;
use weft_protos::tx::Sign;
use weft_protos::view::{Limits, TxBody, TxEnvelope};

use crate::chain::{Ack, ChainInput};
use crate::channel::{Channel, ChannelConfig};
use crate::config_update::{UpdateError, next_config};
use crate::metrics::OrdererMetrics;
use crate::server::Channels;

/// Envelopes of one stream being checked at once.
pub const CHECKS_IN_FLIGHT_MAX: usize = 64;
/// Envelopes of one stream submitted to the consenter and not answered
/// yet (Raft answers once a block is decided: enough for several blocks).
const SUBMITTED_IN_FLIGHT_MAX: usize = 1024;
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
#[derive(Clone)]
pub(crate) struct CheckContext {
    pub channels: Arc<Channels>,
    /// The node-wide decode limit; channels apply their own
    /// `AbsoluteMaxBytes` on top.
    pub limits: Limits,
    pub now: fn() -> UnixTime,
    /// The orderer's identity, which signs the CONFIG envelopes made from
    /// config updates.
    pub signer: Arc<dyn Sign + Send + Sync>,
    pub metrics: OrdererMetrics,
}

impl std::fmt::Debug for CheckContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckContext")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
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
    let now = (context.now)();
    let input = match &view.body {
        TxBody::ConfigUpdate(update) => {
            check_config_update(&view, update, &config, context.signer.as_ref(), now)?
        }
        _ => check_in_channel(&view, &config, now)?,
    };
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
        TxBody::Config(_) | TxBody::ConfigUpdate(_) => {
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

/// Checks a config update as a writer's envelope, then computes the
/// channel's next configuration from it and wraps that in a CONFIG
/// envelope signed by this orderer (`ConfigEnvelope{config, last_update}`).
fn check_config_update(
    view: &TxEnvelope,
    update: &ConfigUpdateEnvelope,
    config: &ChannelConfig,
    signer: &dyn Sign,
    now: UnixTime,
) -> Result<ChainInput, Refusal> {
    check_size(view, config)?;
    authorize(view, config, now)?;
    let channel_id = &view.channel_header.channel_id;
    let next = next_config(channel_id, config, update, now).map_err(|e| match e {
        UpdateError::Invalid(reason) => Refusal::new(Status::BadRequest, reason),
        UpdateError::Forbidden(reason) => {
            Refusal::new(Status::Forbidden, format!("{reason}: permission denied"))
        }
    })?;
    // The new config must be one the orderer can run.
    ChannelConfig::new(channel_id, 0, next.clone()).map_err(|e| {
        Refusal::new(
            Status::BadRequest,
            format!("the updated config is unusable: {e}"),
        )
    })?;
    let config_envelope = ConfigEnvelope {
        config: Some(next),
        last_update: Some(Envelope {
            payload: view.payload_bytes.clone(),
            signature: view.signature.clone(),
        }),
    };
    let envelope = signed_config_envelope(channel_id, config_envelope, signer)
        .map_err(|reason| Refusal::new(Status::InternalServerError, reason))?;
    Ok(ChainInput::Config {
        envelope,
        update: view.raw.clone(),
        config_sequence: config.sequence(),
    })
}

/// Processes an accepted config update again against a newer
/// configuration of its channel (another update was ordered since it was
/// checked), as Fabric does; returns the new CONFIG input.
pub(crate) fn recheck_config_update(
    config: &ChannelConfig,
    raw: &Bytes,
    signer: &dyn Sign,
) -> Result<ChainInput, Refusal> {
    let view = TxEnvelope::decode(raw.clone(), Limits::default())
        .map_err(|e| Refusal::new(Status::BadRequest, format!("malformed envelope: {e}")))?;
    let TxBody::ConfigUpdate(update) = &view.body else {
        return Err(Refusal::new(Status::BadRequest, "not a config update"));
    };
    check_config_update(&view, update, config, signer, weft_msp::now())
}

/// A CONFIG envelope carrying `config`, signed by the orderer.
fn signed_config_envelope(
    channel_id: &str,
    config: ConfigEnvelope,
    signer: &dyn Sign,
) -> Result<Bytes, String> {
    use ring::rand::SecureRandom;
    let mut nonce = [0u8; 24];
    ring::rand::SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| "the system random generator failed".to_owned())?;
    let creator = signer.identity();
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        });
    let payload = Payload {
        header: Some(Header {
            channel_header: ChannelHeader {
                r#type: HeaderType::Config as i32,
                version: 0,
                timestamp: Some(prost_types::Timestamp { seconds, nanos: 0 }),
                channel_id: channel_id.to_owned(),
                tx_id: weft_protos::hash::compute_tx_id(&nonce, &creator),
                epoch: 0,
                extension: Bytes::new(),
                tls_cert_hash: Bytes::new(),
            }
            .encode_to_vec()
            .into(),
            signature_header: SignatureHeader {
                creator,
                nonce: Bytes::copy_from_slice(&nonce),
            }
            .encode_to_vec()
            .into(),
        }),
        data: config.encode_to_vec().into(),
    }
    .encode_to_vec();
    let signature = signer.sign(&payload).map_err(|e| e.to_string())?;
    Ok(Envelope {
        payload: payload.into(),
        signature: signature.into(),
    }
    .encode_to_vec()
    .into())
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
    let metrics = context.metrics.clone();
    tokio::spawn(read_requests(requests, context, checks, shutdown));
    tokio::spawn(answer_in_order(checks_out, responses, remote, metrics));
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
        let read_at = Instant::now();
        let (outcome, outcome_out) = oneshot::channel();
        let context = context.clone();
        rayon::spawn(move || {
            // The receiver is gone only if the stream was abandoned.
            let _ = outcome.send(check(&envelope, &context));
        });
        if checks.send((read_at, outcome_out)).await.is_err() {
            return;
        }
    }
}

/// Takes the outcomes in request order and submits accepted envelopes to
/// their consenter; the answers follow in the same order (`answer`), so a
/// consenter that answers once an envelope is ordered (Raft) still has
/// many envelopes of one stream in flight.
async fn answer_in_order(
    mut checks: mpsc::Receiver<CheckOutcome>,
    responses: mpsc::Sender<Result<BroadcastResponse, GrpcStatus>>,
    remote: Option<SocketAddr>,
    metrics: OrdererMetrics,
) {
    let remote = remote.map_or_else(|| "unknown".to_owned(), |address| address.to_string());
    let (acks, acks_out) = mpsc::channel(SUBMITTED_IN_FLIGHT_MAX);
    let answering = tokio::spawn(answer(acks_out, responses, remote, metrics));
    while let Some((read_at, outcome)) = checks.recv().await {
        let outcome = outcome.await.unwrap_or_else(|_| {
            Err(Refusal::new(
                Status::InternalServerError,
                "the envelope check failed unexpectedly",
            ))
        });
        let submitted = match outcome {
            Ok(accepted) => (
                read_at,
                Some(accepted.channel.id.clone()),
                accepted
                    .channel
                    .chain
                    .submit(accepted.input)
                    .await
                    .map_err(|e| Refusal::new(Status::ServiceUnavailable, e.to_string())),
            ),
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
}
