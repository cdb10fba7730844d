//! `orderer.AtomicBroadcast/Deliver`: the orderer's blocks, with Fabric's
//! seek semantics and access control.
//!
//! Each request is a signed envelope of type DELIVER_SEEK_INFO whose
//! payload data is an `orderer.SeekInfo`. Malformed requests, and those
//! whose timestamp is further from this node's clock than the configured
//! window, are BAD_REQUEST, an unknown channel NOT_FOUND, a creator that
//! is not a valid member with a verifying signature satisfying
//! `/Channel/Readers` FORBIDDEN. The range is resolved by
//! [`weft_ledger::resolve_seek`] and streamed by
//! [`weft_ledger::deliver::stream_range`], the same code the peer's
//! Deliver runs; before each block the creator's access is checked again,
//! as Fabric's `SessionAccessControl` does: once its certificate has
//! expired, or when a new channel config no longer lets it read, the
//! request ends FORBIDDEN. Each request ends with a status message. A
//! stream may carry several requests, answered in turn while each ends in
//! SUCCESS; any other status ends the stream after it, as Fabric's
//! handler returns after a failed request.

use std::net::SocketAddr;
use std::pin::Pin;

use bytes::Bytes;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status as GrpcStatus, Streaming};
use weft_ledger::deliver::{SeekRequest, SessionAccess, StreamEnd, TlsBinding, stream_range};
use weft_ledger::resolve_seek;
use weft_policy::SignedData;
use weft_protos::common::{Block, Envelope, Status};
use weft_protos::orderer::DeliverResponse;
use weft_protos::orderer::deliver_response::Type as ResponseType;

use crate::channel::RequestContext;

/// Responses buffered per stream before the client must read.
const RESPONSES_BUFFERED_MAX: usize = 16;
/// The policy a Deliver client must satisfy on an orderer.
const READERS_POLICY: &str = "/Channel/Readers";

/// The response stream of one Deliver call.
pub(crate) type ResponseStream =
    Pin<Box<dyn Stream<Item = Result<DeliverResponse, GrpcStatus>> + Send>>;

/// Serves one Deliver stream: its requests one after the other, until the
/// client hangs up or the node shuts down.
pub(crate) fn serve(
    requests: Streaming<Envelope>,
    remote: Option<SocketAddr>,
    binding: TlsBinding,
    context: RequestContext,
    mut shutdown: watch::Receiver<bool>,
) -> ResponseStream {
    let (sender, receiver) = mpsc::channel(RESPONSES_BUFFERED_MAX);
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => {}
            () = answer_all(requests, remote, &binding, &context, &sender) => {}
        }
    });
    Box::pin(ReceiverStream::new(receiver))
}

async fn answer_all(
    mut requests: Streaming<Envelope>,
    remote: Option<SocketAddr>,
    binding: &TlsBinding,
    context: &RequestContext,
    sender: &mpsc::Sender<Result<DeliverResponse, GrpcStatus>>,
) {
    let remote = remote.map_or_else(|| "unknown".to_owned(), |address| address.to_string());
    loop {
        let envelope = match requests.message().await {
            Ok(Some(envelope)) => envelope,
            Ok(None) => return,
            Err(error) => {
                // As Fabric's gRPC server: the call ends with the reason.
                tracing::warn!(%error, "deliver: a request could not be read");
                let status = weft_protos::serve::unreadable_request(&error, "an Envelope");
                let _ = sender.send(Err(status)).await;
                return;
            }
        };
        let status = match answer(&envelope, binding, context, sender).await {
            Ok(StreamEnd::Status(status)) => status,
            Ok(StreamEnd::Revoked(reason)) => {
                tracing::warn!(client = %remote, %reason, "deliver: the reader's access was revoked, ending its request");
                Status::Forbidden
            }
            Ok(StreamEnd::Disconnected) => return,
            Err((status, info)) => {
                tracing::warn!(client = %remote, status = status.as_str_name(), %info, "deliver: request refused");
                status
            }
        };
        let message = DeliverResponse {
            r#type: Some(ResponseType::Status(status as i32)),
        };
        if sender.send(Ok(message)).await.is_err() || status != Status::Success {
            return;
        }
    }
}

/// Answers one seek request; `Err` is the status that refuses it, with
/// the reason for the log.
async fn answer(
    envelope: &Envelope,
    binding: &TlsBinding,
    context: &RequestContext,
    sender: &mpsc::Sender<Result<DeliverResponse, GrpcStatus>>,
) -> Result<StreamEnd, (Status, String)> {
    let request = SeekRequest::decode(envelope).map_err(|reason| (Status::BadRequest, reason))?;
    request
        .check_time_window((context.now)(), context.time_window)
        .map_err(|reason| (Status::BadRequest, reason))?;
    request
        .check_tls_binding(binding)
        .map_err(|reason| (Status::BadRequest, reason))?;
    let channel = context.channels.get(&request.channel_id).ok_or_else(|| {
        (
            Status::NotFound,
            format!(
                "channel {:?} does not exist on this orderer",
                request.channel_id
            ),
        )
    })?;
    let config = channel.config();
    let signed = [SignedData {
        data: envelope.payload.clone(),
        identity: request.creator.clone(),
        signature: envelope.signature.clone(),
    }];
    let now = (context.now)();
    config
        .authority
        .evaluate(READERS_POLICY, &signed, now)
        .map_err(|e| (Status::Forbidden, e.to_string()))?;
    let expires_at = config
        .authority
        .msps
        .deserialize(&request.creator, now)
        .map_err(|e| (Status::Forbidden, e.to_string()))?
        .expires_at();
    let mut session = SessionAccess::new(expires_at, config.sequence());
    let admit = || {
        let now = (context.now)();
        let config = channel.config();
        session.admit(now, config.sequence(), || {
            config
                .authority
                .evaluate(READERS_POLICY, &signed, now)
                .map_err(|e| e.to_string())
        })
    };
    let range = resolve_seek(&request.seek, channel.store.height())
        .map_err(|e| (e.status(), e.to_string()))?;
    stream_range(
        channel.store.clone(),
        range,
        channel.store.subscribe(),
        admit,
        |_, bytes| {
            let response = block_response(&request, bytes);
            async move {
                match response {
                    Some(response) => sender.send(Ok(response)).await.is_ok(),
                    None => false,
                }
            }
        },
    )
    .await
    .map_err(|error| {
        tracing::error!(channel = %request.channel_id, %error, "deliver: reading the block store failed");
        (Status::InternalServerError, error.to_string())
    })
}

fn block_response(request: &SeekRequest, bytes: Bytes) -> Option<DeliverResponse> {
    match Block::decode(bytes) {
        Ok(block) => Some(DeliverResponse {
            r#type: Some(ResponseType::Block(request.content(block))),
        }),
        Err(error) => {
            tracing::error!(%error, "deliver: a stored block does not decode");
            None
        }
    }
}
