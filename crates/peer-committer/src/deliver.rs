//! The peer's Deliver service (`protos.Deliver`): committed blocks, filtered
//! blocks with each transaction's validation code, and blocks with the
//! private data the client may read, with Fabric's seek semantics and
//! access control.
//!
//! Each request is a signed envelope whose payload is an `orderer.SeekInfo`
//! and whose channel header (type DELIVER_SEEK_INFO) names the channel and
//! carries a timestamp within the configured window of this peer's clock.
//! The creator must validate against the channel's MSPs, its signature
//! must verify, and it must satisfy the channel's application Readers
//! policy (Fabric's `event/Block` and `event/FilteredBlock` ACLs), checked
//! again before each block as Fabric's `SessionAccessControl` does: once
//! the creator's certificate has expired, or when a new channel config no
//! longer lets it read, the request ends FORBIDDEN. A stream may carry
//! several requests, answered one after the other; each ends with a status
//! message, and one that is not SUCCESS ends the stream, as on Fabric.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::RwLock;
use prost::Message;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status as GrpcStatus, Streaming};
use weft_ledger::deliver::{SeekRequest, SessionAccess, StreamEnd, TlsBinding, stream_range};
use weft_ledger::{BlockStore, resolve_seek};
use weft_policy::SignedData;
use weft_protos::common::{
    Block, BlockMetadataIndex, ChannelHeader, Envelope, HeaderType, Payload, Status,
};
use weft_protos::protos::deliver_response::Type as ResponseType;
use weft_protos::protos::deliver_server::Deliver;
use weft_protos::protos::filtered_transaction::Data as FilteredData;
use weft_protos::protos::{
    BlockAndPrivateData, ChaincodeAction, ChaincodeActionPayload, ChaincodeEvent, DeliverResponse,
    FilteredBlock, FilteredChaincodeAction, FilteredTransaction, FilteredTransactionActions,
    ProposalResponsePayload, Transaction,
};
use weft_protos::rwset::TxPvtReadWriteSet;

use crate::ChannelContext;

/// Requests buffered per stream before the client must read.
const RESPONSES_IN_FLIGHT_MAX: usize = 16;
/// The policy a Deliver client must satisfy on a peer.
const READERS_POLICY: &str = "/Channel/Application/Readers";

/// What the peer's services need to serve one channel.
#[derive(Clone)]
pub struct ChannelHandle {
    pub ledger: Arc<BlockStore>,
    /// The channel's world state, for simulation.
    pub state: Arc<dyn weft_statedb::VersionedState>,
    /// The height of the blocks committed to both the block store and the
    /// state: readers must not see a block before its state.
    pub committed: tokio::sync::watch::Receiver<u64>,
    /// The height of the blocks applied to the state, including a stream
    /// channel's blocks staged until their checkpoint (and so possibly
    /// rolled back): what a peer that answers commit status at *applied*
    /// follows. Equal to `committed` on a block channel.
    pub applied: tokio::sync::watch::Receiver<u64>,
    /// The channel's current configuration, replaced by its committer when
    /// a config block commits.
    pub context: Arc<RwLock<Arc<ChannelContext>>>,
}

impl std::fmt::Debug for ChannelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelHandle")
            .field("height", &self.ledger.height())
            .finish_non_exhaustive()
    }
}

/// The channels a peer serves, by channel ID.
#[derive(Debug, Clone, Default)]
pub struct Channels {
    channels: Arc<RwLock<HashMap<String, ChannelHandle>>>,
}

impl Channels {
    pub fn insert(&self, channel_id: &str, handle: ChannelHandle) {
        self.channels.write().insert(channel_id.to_owned(), handle);
    }

    pub fn get(&self, channel_id: &str) -> Option<ChannelHandle> {
        self.channels.read().get(channel_id).cloned()
    }
}

/// The shape of the blocks a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Block,
    Filtered,
    WithPrivateData,
}

/// `protos.Deliver` over the peer's channels.
#[derive(Debug, Clone)]
pub struct DeliverService {
    channels: Channels,
    now: fn() -> weft_msp::UnixTime,
    /// How far a request's timestamp may be from `now`.
    time_window: Duration,
    /// Clients present TLS certificates, and requests must be bound to
    /// them.
    client_auth_required: bool,
}

impl DeliverService {
    pub fn new(channels: Channels) -> Self {
        Self {
            channels,
            now: weft_msp::now,
            time_window: weft_ledger::deliver::TIME_WINDOW_DEFAULT,
            client_auth_required: false,
        }
    }

    /// How far a request's timestamp may be from this peer's clock
    /// (Fabric's `peer.authentication.timewindow`); further, it is
    /// answered BAD_REQUEST.
    pub fn with_time_window(mut self, window: Duration) -> Self {
        self.time_window = window;
        self
    }

    /// For a server that asks clients for TLS certificates: every request
    /// must then name the hash of its client's certificate
    /// (`ChannelHeader.tls_cert_hash`), as Fabric requires under mutual
    /// TLS, or it is answered BAD_REQUEST.
    pub fn binding_requests_to_client_certificates(mut self) -> Self {
        self.client_auth_required = true;
        self
    }

    fn serve(&self, request: Request<Streaming<Envelope>>, shape: Shape) -> ResponseStream {
        let binding = TlsBinding::when(self.client_auth_required, || {
            weft_protos::serve::client_certificate(&request)
        });
        let requests = request.into_inner();
        let (sender, receiver) = tokio::sync::mpsc::channel(RESPONSES_IN_FLIGHT_MAX);
        let service = self.clone();
        tokio::spawn(async move { service.answer_all(requests, binding, shape, sender).await });
        Box::pin(ReceiverStream::new(receiver))
    }

    async fn answer_all(
        &self,
        mut requests: Streaming<Envelope>,
        binding: TlsBinding,
        shape: Shape,
        sender: tokio::sync::mpsc::Sender<Result<DeliverResponse, GrpcStatus>>,
    ) {
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
            let status = match self.answer(envelope, &binding, shape, &sender).await {
                Ok(StreamEnd::Status(status)) => status,
                Ok(StreamEnd::Revoked(reason)) => {
                    tracing::warn!(%reason, "deliver: the reader's access was revoked, ending its request");
                    Status::Forbidden
                }
                Ok(StreamEnd::Disconnected) => return,
                Err(status) => status,
            };
            if status != Status::Success {
                tracing::info!(
                    status = status.as_str_name(),
                    "deliver: request refused or ended early"
                );
            }
            let message = DeliverResponse {
                r#type: Some(ResponseType::Status(status as i32)),
            };
            // As Fabric's handler: a request that did not end in SUCCESS
            // ends the stream.
            if sender.send(Ok(message)).await.is_err() || status != Status::Success {
                return;
            }
        }
    }

    /// Answers one seek request; `Err` is the status that refuses it.
    async fn answer(
        &self,
        envelope: Envelope,
        binding: &TlsBinding,
        shape: Shape,
        sender: &tokio::sync::mpsc::Sender<Result<DeliverResponse, GrpcStatus>>,
    ) -> Result<StreamEnd, Status> {
        let request = SeekRequest::decode(&envelope).map_err(|reason| {
            tracing::info!(%reason, "deliver: malformed request");
            Status::BadRequest
        })?;
        request
            .check_time_window((self.now)(), self.time_window)
            .map_err(|reason| {
                tracing::info!(%reason, "deliver: request outside the time window");
                Status::BadRequest
            })?;
        request.check_tls_binding(binding).map_err(|reason| {
            tracing::warn!(%reason, "deliver: request not bound to its TLS connection");
            Status::BadRequest
        })?;
        let channel = self
            .channels
            .get(&request.channel_id)
            .ok_or(Status::NotFound)?;
        let context = channel.context.read().clone();
        let signed = [SignedData {
            data: envelope.payload.clone(),
            identity: request.creator.clone(),
            signature: envelope.signature.clone(),
        }];
        let now = (self.now)();
        context
            .policies
            .evaluate(READERS_POLICY, &signed, &context.msps, now)
            .map_err(|_| Status::Forbidden)?;
        let expires_at = context
            .msps
            .deserialize(&request.creator, now)
            .map_err(|_| Status::Forbidden)?
            .expires_at();
        let mut session = SessionAccess::new(expires_at, context.config_sequence);
        let admit = || {
            let now = (self.now)();
            let current = channel.context.read().clone();
            session.admit(now, current.config_sequence, || {
                current
                    .policies
                    .evaluate(READERS_POLICY, &signed, &current.msps, now)
                    .map_err(|e| e.to_string())
            })
        };
        let range =
            resolve_seek(&request.seek, *channel.committed.borrow()).map_err(|e| e.status())?;
        let private = (shape == Shape::WithPrivateData).then(|| ReadablePrivateData {
            ledger: channel.ledger.clone(),
            context: channel.context.clone(),
            reader: request.creator.clone(),
            now: self.now,
        });
        stream_range(
            channel.ledger.clone(),
            range,
            channel.committed.clone(),
            admit,
            |number, bytes| {
                let private_data = private.as_ref().map(|private| private.of_block(number));
                let response = shape_block(&request, bytes, shape, private_data);
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
            tracing::error!(%error, "deliver: reading the block store failed");
            Status::InternalServerError
        })
    }
}

/// The private data a `DeliverWithPrivateData` client may read, as
/// Fabric's peer filters it: of each transaction's committed private
/// writes, the collections whose member policy the request's signer
/// satisfies (an organisation's implicit collection: a member of that
/// organisation). The channel's config and the collection's definition in
/// force when the block is sent decide (Fabric takes the definition as it
/// stood when the block committed: the two differ only for a block sent
/// after the collection was defined again).
struct ReadablePrivateData {
    ledger: Arc<BlockStore>,
    /// The channel's current context, replaced as config blocks and
    /// chaincode definitions commit.
    context: Arc<RwLock<Arc<ChannelContext>>>,
    /// The request's creator.
    reader: Bytes,
    now: fn() -> weft_msp::UnixTime,
}

impl ReadablePrivateData {
    /// What block `number` committed of private data that the reader may
    /// read, by transaction index (empty on a peer that keeps none); `None`
    /// if it cannot be read, which ends the stream, as Fabric's does.
    fn of_block(&self, number: u64) -> Option<BTreeMap<u64, TxPvtReadWriteSet>> {
        let committed = match self.ledger.private_data(number) {
            Ok(committed) => committed,
            Err(error) => {
                tracing::error!(block = number, %error, "deliver: reading private data failed");
                return None;
            }
        };
        let context = self.context.read().clone();
        let now = (self.now)();
        let mut readable = BTreeMap::new();
        for (tx_index, bytes) in committed {
            let Ok(mut set) = TxPvtReadWriteSet::decode(bytes) else {
                tracing::error!(
                    block = number,
                    tx_index,
                    "stored private data does not decode"
                );
                continue;
            };
            for namespace in &mut set.ns_pvt_rwset {
                let name = namespace.namespace.as_str();
                namespace.collection_pvt_rwset.retain(|collection| {
                    context.may_read_collection(
                        name,
                        &collection.collection_name,
                        &self.reader,
                        now,
                    )
                });
            }
            set.ns_pvt_rwset
                .retain(|namespace| !namespace.collection_pvt_rwset.is_empty());
            if !set.ns_pvt_rwset.is_empty() {
                readable.insert(tx_index, set);
            }
        }
        Some(readable)
    }
}

/// The response for one stored block, in the shape the client asked for
/// (`private_data`: what a `WithPrivateData` client may read of it, `None`
/// inside when it could not be read); `None` ends the stream.
fn shape_block(
    request: &SeekRequest,
    bytes: Bytes,
    shape: Shape,
    private_data: Option<Option<BTreeMap<u64, TxPvtReadWriteSet>>>,
) -> Option<DeliverResponse> {
    let block = match Block::decode(bytes) {
        Ok(block) => block,
        Err(error) => {
            tracing::error!(%error, "deliver: a stored block does not decode");
            return None;
        }
    };
    let r#type = match shape {
        Shape::Block => ResponseType::Block(request.content(block)),
        Shape::WithPrivateData => ResponseType::BlockAndPrivateData(BlockAndPrivateData {
            block: Some(request.content(block)),
            private_data_map: private_data.flatten()?,
        }),
        Shape::Filtered => ResponseType::FilteredBlock(filtered(&request.channel_id, block)),
    };
    Some(DeliverResponse {
        r#type: Some(r#type),
    })
}

/// A block reduced to what event listeners need, shaped as Fabric's peer
/// shapes it: per transaction its ID, type and validation code; an endorser
/// transaction also carries its actions' chaincode events, without
/// payloads, one entry per action that set an event (an action without
/// one, or whose event names no chaincode, is left out); other
/// transactions (config) carry no actions at all.
pub(crate) fn filtered(channel_id: &str, block: Block) -> FilteredBlock {
    let number = block.header.as_ref().map_or(0, |header| header.number);
    let codes = weft_protos::block::metadata_slot(&block, BlockMetadataIndex::TransactionsFilter)
        .cloned()
        .unwrap_or_default();
    let envelopes = block.data.map(|data| data.data).unwrap_or_default();
    let filtered_transactions = envelopes
        .into_iter()
        .enumerate()
        .filter_map(|(index, raw)| {
            let code = codes.get(index).map_or(0, |code| i32::from(*code));
            filtered_transaction(raw, code)
        })
        .collect();
    FilteredBlock {
        channel_id: channel_id.to_owned(),
        number,
        filtered_transactions,
    }
}

/// One transaction of a filtered block. Only the layers it shows are
/// decoded, as Fabric's peer decodes them: the channel header and, for an
/// endorser transaction, each action's chaincode event; never the
/// read/write sets, which are most of a transaction's bytes. An envelope
/// whose layers do not decode is left out.
fn filtered_transaction(raw: Bytes, tx_validation_code: i32) -> Option<FilteredTransaction> {
    let payload = Payload::decode(Envelope::decode(raw).ok()?.payload).ok()?;
    let channel_header = ChannelHeader::decode(payload.header?.channel_header).ok()?;
    let data = if channel_header.r#type == HeaderType::EndorserTransaction as i32 {
        let events = Transaction::decode(payload.data)
            .ok()?
            .actions
            .into_iter()
            .map(|action| chaincode_event(action.payload))
            .collect::<Option<Vec<_>>>()?;
        let chaincode_actions = events
            .into_iter()
            .flatten()
            .filter(|event| !event.chaincode_id.is_empty())
            .map(|event| FilteredChaincodeAction {
                chaincode_event: Some(ChaincodeEvent {
                    payload: Bytes::new(),
                    ..event
                }),
            })
            .collect();
        Some(FilteredData::TransactionActions(
            FilteredTransactionActions { chaincode_actions },
        ))
    } else {
        None
    };
    Some(FilteredTransaction {
        txid: channel_header.tx_id,
        r#type: channel_header.r#type,
        tx_validation_code,
        data,
    })
}

/// The chaincode event of one transaction action (`TransactionAction.
/// payload`): `Some(None)` if its chaincode set none or it carries no
/// endorsed action (Fabric skips such an action), `None` if a layer does
/// not decode.
fn chaincode_event(action_payload: Bytes) -> Option<Option<ChaincodeEvent>> {
    let Some(endorsed) = ChaincodeActionPayload::decode(action_payload).ok()?.action else {
        return Some(None);
    };
    let response = ProposalResponsePayload::decode(endorsed.proposal_response_payload).ok()?;
    let action = ChaincodeAction::decode(response.extension).ok()?;
    if action.events.is_empty() {
        return Some(None);
    }
    ChaincodeEvent::decode(action.events).ok().map(Some)
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<DeliverResponse, GrpcStatus>> + Send>>;

#[tonic::async_trait]
impl Deliver for DeliverService {
    type DeliverStream = ResponseStream;
    type DeliverFilteredStream = ResponseStream;
    type DeliverWithPrivateDataStream = ResponseStream;

    async fn deliver(
        &self,
        request: Request<Streaming<Envelope>>,
    ) -> Result<Response<Self::DeliverStream>, GrpcStatus> {
        Ok(Response::new(self.serve(request, Shape::Block)))
    }

    async fn deliver_filtered(
        &self,
        request: Request<Streaming<Envelope>>,
    ) -> Result<Response<Self::DeliverFilteredStream>, GrpcStatus> {
        Ok(Response::new(self.serve(request, Shape::Filtered)))
    }

    async fn deliver_with_private_data(
        &self,
        request: Request<Streaming<Envelope>>,
    ) -> Result<Response<Self::DeliverWithPrivateDataStream>, GrpcStatus> {
        Ok(Response::new(self.serve(request, Shape::WithPrivateData)))
    }
}
