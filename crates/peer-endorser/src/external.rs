//! External chaincode: a chaincode server written with one of Fabric's
//! shims (Go, Node.js, Java) and run as a service, which the peer dials.
//!
//! **The conversation.** The peer opens `protos.Chaincode/Connect` to the
//! chaincode's address. The chaincode speaks first with REGISTER (naming
//! its package ID); the peer answers REGISTERED, then READY. From then on
//! the stream carries many transactions at once, each keyed by channel and
//! TxID: the peer sends TRANSACTION, or INIT for a proposal marked
//! `is_init` (the invocation's `ChaincodeInput` and the signed proposal); the chaincode asks for state (GET_STATE,
//! GET_STATE_MULTIPLE, PUT_STATE, DEL_STATE, WRITE_BATCH_STATE,
//! GET_STATE_BY_RANGE then QUERY_STATE_NEXT / QUERY_STATE_CLOSE), each
//! answered with RESPONSE or ERROR; it ends with COMPLETED (a `Response`,
//! perhaps a chaincode event) or ERROR. READY tells the chaincode, as
//! Fabric 3's peer does, that it may batch writes and multi-key reads
//! (Fabric 2.5's shims ignore it and send one request per key).
//!
//! **Where the answers come from.** Every state request is served by the
//! proposal's [`Stub`], so reads come from the same snapshot and the
//! read/write set is recorded exactly as for a native chaincode. A range
//! query is read whole when asked (and recorded as exhausted) and handed
//! to the chaincode [`QUERY_PAGE_RESULTS`] at a time. A range query that
//! asks for a page (`QueryMetadata`) is answered in one RESPONSE with the
//! page's results and `QueryResponseMetadata` (the count and the next
//! page's bookmark), as Fabric answers it.
//!
//! **Threads.** [`Chaincode::invoke`] runs on the async runtime's
//! blocking pool ([`Chaincode::runs_remotely`]): it sends TRANSACTION and
//! then waits on its own queue for the chaincode's requests, which a task
//! reading the stream routes by TxID. One stream thus serves as many
//! concurrent proposals as there are blocking threads.
//!
//! **Failures.** An unreachable chaincode, one that disconnects or errors
//! mid-transaction, or one that takes longer than the execute timeout
//! gives an error response, never a panic; the next proposal dials again.
//! A chaincode may call another on the same channel (INVOKE_CHAINCODE):
//! the callee runs on the same [`Stub`], its reads and writes recorded
//! under its own namespace, and its COMPLETED message is handed back.
//! JSON queries (GET_QUERY_RESULT, CouchDB's Mango) are answered from the
//! world state ([`crate::mango`]), whole or a page at a time.
//! Key metadata (GET_STATE_METADATA, PUT_STATE_METADATA: key-level
//! endorsement policies) is served for public and private keys, and
//! PURGE_PRIVATE_DATA for private ones. A request weft cannot serve is
//! answered with an ERROR naming it, which the shim raises in the
//! chaincode.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use prost::Message;
use tokio::runtime::Handle;
use tokio::sync::mpsc as async_mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use weft_protos::protos::chaincode_client::ChaincodeClient;
use weft_protos::protos::chaincode_message::Type as MessageType;
use weft_protos::protos::write_record::Type as WriteType;
use weft_protos::protos::{
    ChaincodeAdditionalParams, ChaincodeId, ChaincodeInput, ChaincodeMessage, ChaincodeSpec,
    DelState, GetHistoryForKey, GetQueryResult, GetState, GetStateByRange, GetStateMetadata,
    GetStateMultiple, GetStateMultipleResult, PurgePrivateState, PutState, PutStateMetadata,
    QueryMetadata, QueryResponse, QueryResponseMetadata, QueryResultBytes, QueryStateClose,
    QueryStateNext, Response, SignedProposal, StateMetadata, StateMetadataResult, WriteBatchState,
};
use weft_protos::queryresult::Kv;

use crate::chaincode::{Chaincode, PageRequest, StateError, Stub, error};

/// Results handed to the chaincode per RESPONSE to a range query (Fabric's
/// `internalQueryLimit`).
pub const QUERY_PAGE_RESULTS: usize = 1000;
/// The most writes one WRITE_BATCH_STATE may carry, and keys one
/// GET_STATE_MULTIPLE may ask for, as READY tells the chaincode (Fabric
/// 3's defaults).
const BATCH_MAX: u32 = 1000;
/// The largest message exchanged with a chaincode (Fabric's default).
const MESSAGE_BYTES_MAX: usize = 100 * 1024 * 1024;
/// Messages of one transaction the chaincode may send ahead of the peer's
/// answers. Fabric's shims send one request and wait for its answer; a
/// chaincode that sends more than this without waiting breaks the
/// protocol, and its stream is closed rather than queue without bound.
const REQUESTS_AHEAD_MAX: usize = 16;

/// How the peer reaches an external chaincode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalConfig {
    /// The chaincode's name on the channel (what proposals invoke).
    pub name: String,
    /// The chaincode server's `host:port`.
    pub address: String,
    /// How long connecting and the REGISTER handshake may take.
    pub dial_timeout: Duration,
    /// How long one invocation may take (Fabric's
    /// `chaincode.executetimeout`, default 30 s).
    pub execute_timeout: Duration,
    /// TLS to the chaincode server; `None`: plaintext.
    pub tls: Option<ChaincodeTls>,
}

/// How the peer secures its connection to a chaincode server: Fabric's
/// `connection.json` fields `root_cert` (with `tls_required`) and
/// `client_cert`, `client_key` (with `client_auth_required`), in PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct ChaincodeTls {
    /// The CA certificates the server's certificate must chain to; the
    /// server must be named in it as it is in the address (a host name or
    /// an IP address).
    pub root_cert: String,
    /// The certificate and key the peer presents, for a server that
    /// requires clients to authenticate.
    pub client: Option<(String, String)>,
}

impl std::fmt::Debug for ChaincodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client key stays out of logs.
        f.debug_struct("ChaincodeTls")
            .field("client_auth", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

impl ChaincodeTls {
    /// The client TLS settings of a connection to the server.
    fn client_config(&self) -> tonic::transport::ClientTlsConfig {
        let config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.root_cert));
        match &self.client {
            Some((certificate, key)) => {
                config.identity(tonic::transport::Identity::from_pem(certificate, key))
            }
            None => config,
        }
    }
}

impl ExternalConfig {
    /// `name` served at `address`, with Fabric's default timeouts.
    pub fn new(name: impl Into<String>, address: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            address: address.into(),
            dial_timeout: Duration::from_secs(10),
            execute_timeout: Duration::from_secs(30),
            tls: None,
        }
    }
}

/// Why an invocation of an external chaincode failed.
#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    #[error("chaincode {name} at {address} is unreachable: {reason}")]
    Unreachable {
        name: String,
        address: String,
        reason: String,
    },
    #[error("chaincode {name} broke the shim protocol: {reason}")]
    Protocol { name: String, reason: String },
    #[error("chaincode {name} disconnected during the transaction")]
    Disconnected { name: String },
    #[error("chaincode {name} did not complete within {timeout:?}")]
    Timeout { name: String, timeout: Duration },
    #[error("transaction {tx_id} is already executing on chaincode {name}")]
    AlreadyExecuting { name: String, tx_id: String },
    #[error("transaction returned with failure: {message}")]
    Failed { message: String },
}

/// A chaincode served by a separate process, reached over Fabric's
/// chaincode shim protocol.
pub struct ExternalChaincode {
    config: ExternalConfig,
    runtime: Handle,
    connection: Mutex<Option<Arc<Connection>>>,
}

impl std::fmt::Debug for ExternalChaincode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalChaincode")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ExternalChaincode {
    /// An external chaincode dialled through `runtime` when first invoked.
    pub fn new(config: ExternalConfig, runtime: Handle) -> Self {
        Self {
            config,
            runtime,
            connection: Mutex::new(None),
        }
    }

    /// The open stream to the chaincode, dialled anew if there is none or
    /// the last one broke.
    fn connection(&self) -> Result<Arc<Connection>, ExternalError> {
        let mut slot = self.connection.lock();
        if let Some(connection) = slot.as_ref().filter(|c| c.is_open()) {
            return Ok(connection.clone());
        }
        let connection = self.runtime.block_on(Connection::open(&self.config))?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    fn execute(&self, stub: &mut Stub<'_>) -> Result<Response, ExternalError> {
        let name = &self.config.name;
        let connection = self.connection()?;
        let key = TxKey {
            channel_id: stub.channel_id().to_owned(),
            tx_id: stub.tx_id().to_owned(),
        };
        let requests = connection
            .begin(&key)
            .ok_or_else(|| ExternalError::AlreadyExecuting {
                name: name.clone(),
                tx_id: key.tx_id.clone(),
            })?;
        let _executing = Executing {
            connection: &connection,
            key: &key,
        };
        let is_init = stub.is_init();
        let proposal = stub.proposal();
        // The shim runs the chaincode's Init for INIT, Invoke otherwise.
        let kind = if is_init {
            MessageType::Init
        } else {
            MessageType::Transaction
        };
        connection.send(
            ChaincodeMessage {
                r#type: kind as i32,
                payload: ChaincodeInput {
                    args: stub.args().to_vec(),
                    is_init,
                    ..ChaincodeInput::default()
                }
                .encode_to_vec()
                .into(),
                proposal: Some(SignedProposal {
                    proposal_bytes: proposal.proposal.bytes.clone(),
                    signature: proposal.signature.clone(),
                }),
                ..reply_to(&key)
            },
            name,
        )?;
        let deadline = Instant::now() + self.config.execute_timeout;
        let mut session = Session::default();
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            let message = requests.recv_timeout(wait).map_err(|e| match e {
                RecvTimeoutError::Timeout => ExternalError::Timeout {
                    name: name.clone(),
                    timeout: self.config.execute_timeout,
                },
                RecvTimeoutError::Disconnected => match connection.broken.lock().clone() {
                    Some(reason) => ExternalError::Protocol {
                        name: name.clone(),
                        reason,
                    },
                    None => ExternalError::Disconnected { name: name.clone() },
                },
            })?;
            match MessageType::try_from(message.r#type) {
                Ok(MessageType::Completed) => return completed(stub, message, name),
                Ok(MessageType::Error) => {
                    return Err(ExternalError::Failed {
                        message: String::from_utf8_lossy(&message.payload).into_owned(),
                    });
                }
                _ => {
                    let answer = session.answer(stub, &message);
                    connection.send(answer, name)?;
                }
            }
        }
    }
}

impl Chaincode for ExternalChaincode {
    fn invoke(&self, stub: &mut Stub<'_>) -> Response {
        self.execute(stub).unwrap_or_else(|failure| {
            tracing::warn!(chaincode = %self.config.name, tx_id = stub.tx_id(), %failure, "external chaincode failed");
            error(failure.to_string())
        })
    }

    fn runs_remotely(&self) -> bool {
        true
    }
}

/// The COMPLETED message's response, its event recorded in the stub.
fn completed(
    stub: &mut Stub<'_>,
    message: ChaincodeMessage,
    name: &str,
) -> Result<Response, ExternalError> {
    let response = Response::decode(message.payload).map_err(|e| ExternalError::Protocol {
        name: name.to_owned(),
        reason: format!("COMPLETED does not carry a Response: {e}"),
    })?;
    if let Some(event) = message.chaincode_event.filter(|e| !e.event_name.is_empty()) {
        stub.set_event(&event.event_name, event.payload);
    }
    Ok(response)
}

/// A transaction on a chaincode stream: Fabric keys them by channel and
/// TxID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TxKey {
    channel_id: String,
    tx_id: String,
}

/// A message for the transaction `key`, to fill in.
fn reply_to(key: &TxKey) -> ChaincodeMessage {
    ChaincodeMessage {
        txid: key.tx_id.clone(),
        channel_id: key.channel_id.clone(),
        ..ChaincodeMessage::default()
    }
}

/// One registered stream to a chaincode server.
struct Connection {
    outgoing: async_mpsc::UnboundedSender<ChaincodeMessage>,
    /// Where the chaincode's messages for each executing transaction go.
    executing: Mutex<HashMap<TxKey, mpsc::SyncSender<ChaincodeMessage>>>,
    open: AtomicBool,
    /// Why the peer closed the stream, when the chaincode broke the
    /// protocol.
    broken: Mutex<Option<String>>,
}

impl Connection {
    /// Dials the chaincode, takes its REGISTER, answers REGISTERED and
    /// READY, and starts routing what it sends.
    async fn open(config: &ExternalConfig) -> Result<Arc<Self>, ExternalError> {
        let unreachable = |reason: String| ExternalError::Unreachable {
            name: config.name.clone(),
            address: config.address.clone(),
            reason,
        };
        let tls = config.tls.as_ref().map(ChaincodeTls::client_config);
        let endpoint = weft_protos::dial::endpoint(&config.address, tls.as_ref())
            .map_err(|e| unreachable(format!("bad address or TLS settings: {e}")))?
            .connect_timeout(config.dial_timeout);
        let channel = tokio::time::timeout(config.dial_timeout, endpoint.connect())
            .await
            .map_err(|_| unreachable("timed out connecting".to_owned()))?
            .map_err(|e| unreachable(e.to_string()))?;
        let mut client = ChaincodeClient::new(channel)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX);
        let (outgoing, to_send) = async_mpsc::unbounded_channel();
        let handshake = async {
            let mut incoming = client
                .connect(UnboundedReceiverStream::new(to_send))
                .await
                .map_err(|status| unreachable(status.message().to_owned()))?
                .into_inner();
            let register = incoming
                .message()
                .await
                .map_err(|status| unreachable(status.message().to_owned()))?
                .ok_or_else(|| unreachable("the stream closed before REGISTER".to_owned()))?;
            Ok::<_, ExternalError>((incoming, register))
        };
        let (incoming, register) = tokio::time::timeout(config.dial_timeout, handshake)
            .await
            .map_err(|_| unreachable("no REGISTER within the dial timeout".to_owned()))??;
        if register.r#type != MessageType::Register as i32 {
            return Err(ExternalError::Protocol {
                name: config.name.clone(),
                reason: format!(
                    "the first message is of type {}, not REGISTER",
                    register.r#type
                ),
            });
        }
        let package_id = ChaincodeId::decode(register.payload)
            .map(|id| id.name)
            .unwrap_or_default();
        tracing::info!(chaincode = %config.name, address = %config.address, %package_id, "external chaincode registered");
        let _ = outgoing.send(ChaincodeMessage {
            r#type: MessageType::Registered as i32,
            ..ChaincodeMessage::default()
        });
        let _ = outgoing.send(ChaincodeMessage {
            r#type: MessageType::Ready as i32,
            payload: ChaincodeAdditionalParams {
                use_write_batch: true,
                max_size_write_batch: BATCH_MAX,
                use_get_multiple_keys: true,
                max_size_get_multiple_keys: BATCH_MAX,
            }
            .encode_to_vec()
            .into(),
            ..ChaincodeMessage::default()
        });
        let connection = Arc::new(Self {
            outgoing,
            executing: Mutex::new(HashMap::new()),
            open: AtomicBool::new(true),
            broken: Mutex::new(None),
        });
        tokio::spawn(connection.clone().route(incoming, config.name.clone()));
        Ok(connection)
    }

    /// Hands every message to the transaction it belongs to, until the
    /// stream ends; then every executing transaction learns of it.
    async fn route(
        self: Arc<Self>,
        mut incoming: tonic::codec::Streaming<ChaincodeMessage>,
        name: String,
    ) {
        loop {
            let message = match incoming.message().await {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err(status) => {
                    tracing::warn!(chaincode = %name, error = %status.message(), "chaincode stream failed");
                    break;
                }
            };
            if message.r#type == MessageType::Keepalive as i32 {
                continue;
            }
            let key = TxKey {
                channel_id: message.channel_id.clone(),
                tx_id: message.txid.clone(),
            };
            let delivered = match self.executing.lock().get(&key) {
                Some(requests) => requests.try_send(message),
                None => Err(mpsc::TrySendError::Disconnected(message)),
            };
            match delivered {
                Ok(()) => {}
                Err(mpsc::TrySendError::Disconnected(_)) => {
                    tracing::warn!(chaincode = %name, tx_id = %key.tx_id, "message for a transaction that is not executing, dropped");
                }
                Err(mpsc::TrySendError::Full(_)) => {
                    let reason = format!(
                        "it sent more than {REQUESTS_AHEAD_MAX} messages for transaction {} \
                         without waiting for answers",
                        key.tx_id
                    );
                    tracing::warn!(chaincode = %name, %reason, "closing the chaincode's stream");
                    *self.broken.lock() = Some(reason);
                    break;
                }
            }
        }
        self.open.store(false, Ordering::Release);
        self.executing.lock().clear();
        tracing::info!(chaincode = %name, "chaincode stream closed");
    }

    fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire) && !self.outgoing.is_closed()
    }

    /// Registers `key` as executing; `None` if it already is. On a stream
    /// that has closed, the receiver reports the disconnection at once.
    fn begin(&self, key: &TxKey) -> Option<mpsc::Receiver<ChaincodeMessage>> {
        let mut executing = self.executing.lock();
        if executing.contains_key(key) {
            return None;
        }
        let (sender, receiver) = mpsc::sync_channel(REQUESTS_AHEAD_MAX);
        if self.is_open() {
            executing.insert(key.clone(), sender);
        }
        Some(receiver)
    }

    fn send(&self, message: ChaincodeMessage, name: &str) -> Result<(), ExternalError> {
        self.outgoing
            .send(message)
            .map_err(|_| ExternalError::Disconnected {
                name: name.to_owned(),
            })
    }
}

/// Removes a transaction from the stream's routing when it ends, however
/// it ends.
struct Executing<'a> {
    connection: &'a Connection,
    key: &'a TxKey,
}

impl Drop for Executing<'_> {
    fn drop(&mut self) {
        self.connection.executing.lock().remove(self.key);
    }
}

/// The state requests of one transaction: its open queries, each the
/// encoded results (`queryresult.KV`s or `KeyModification`s) not yet
/// handed over.
#[derive(Default)]
struct Session {
    queries: HashMap<String, VecDeque<Bytes>>,
    next_query_id: u64,
}

impl Session {
    /// The RESPONSE or ERROR answering one request of the chaincode.
    fn answer(&mut self, stub: &mut Stub<'_>, request: &ChaincodeMessage) -> ChaincodeMessage {
        let key = TxKey {
            channel_id: request.channel_id.clone(),
            tx_id: request.txid.clone(),
        };
        let (r#type, payload) = match self.serve(stub, request) {
            Ok(payload) => (MessageType::Response, payload),
            Err(reason) => (MessageType::Error, Bytes::from(reason)),
        };
        ChaincodeMessage {
            r#type: r#type as i32,
            payload,
            ..reply_to(&key)
        }
    }

    fn serve(&mut self, stub: &mut Stub<'_>, request: &ChaincodeMessage) -> Result<Bytes, String> {
        let payload = request.payload.clone();
        let kind = MessageType::try_from(request.r#type)
            .map_err(|_| format!("unknown message type {}", request.r#type))?;
        let malformed =
            |e: prost::DecodeError| format!("malformed {} payload: {e}", kind.as_str_name());
        match kind {
            MessageType::GetState => {
                let request = GetState::decode(payload).map_err(malformed)?;
                let value = if request.collection.is_empty() {
                    stub.get_state(&request.key)
                } else {
                    stub.get_private_data(&request.collection, &request.key)
                }
                .map_err(|e| e.to_string())?;
                Ok(value.unwrap_or_default())
            }
            MessageType::PutState => {
                let request = PutState::decode(payload).map_err(malformed)?;
                if request.collection.is_empty() {
                    stub.put_state(&request.key, request.value)
                } else {
                    stub.put_private_data(&request.collection, &request.key, request.value)
                }
                .map_err(|e| e.to_string())?;
                Ok(Bytes::new())
            }
            MessageType::DelState => {
                let request = DelState::decode(payload).map_err(malformed)?;
                if request.collection.is_empty() {
                    stub.del_state(&request.key)
                } else {
                    stub.del_private_data(&request.collection, &request.key)
                }
                .map_err(|e| e.to_string())?;
                Ok(Bytes::new())
            }
            MessageType::GetStateMultiple => {
                let request = GetStateMultiple::decode(payload).map_err(malformed)?;
                if request.keys.len() > BATCH_MAX as usize {
                    return Err(format!(
                        "GET_STATE_MULTIPLE asks for {} keys; at most {BATCH_MAX}",
                        request.keys.len()
                    ));
                }
                let values = if request.collection.is_empty() {
                    stub.get_states(&request.keys)
                } else {
                    request
                        .keys
                        .iter()
                        .map(|key| stub.get_private_data(&request.collection, key))
                        .collect()
                }
                .map_err(|e| e.to_string())?;
                Ok(GetStateMultipleResult {
                    values: values.into_iter().map(Option::unwrap_or_default).collect(),
                }
                .encode_to_vec()
                .into())
            }
            MessageType::WriteBatchState => {
                let batch = WriteBatchState::decode(payload).map_err(malformed)?;
                for record in batch.rec {
                    let private = !record.collection.is_empty();
                    match WriteType::try_from(record.r#type) {
                        Ok(WriteType::PutState) if private => {
                            stub.put_private_data(&record.collection, &record.key, record.value)
                        }
                        Ok(WriteType::PutState) => stub.put_state(&record.key, record.value),
                        Ok(WriteType::DelState) if private => {
                            stub.del_private_data(&record.collection, &record.key)
                        }
                        Ok(WriteType::DelState) => stub.del_state(&record.key),
                        Ok(WriteType::PutStateMetadata) => {
                            let metadata = record.metadata.unwrap_or_default();
                            put_metadata(stub, &record.collection, &record.key, metadata)
                        }
                        Ok(WriteType::PurgePrivateData) => {
                            purge(stub, &record.collection, &record.key)
                        }
                        _ => return Err(format!("unknown write type {}", record.r#type)),
                    }
                    .map_err(|e| e.to_string())?;
                }
                Ok(Bytes::new())
            }
            MessageType::GetStateByRange => {
                let request = GetStateByRange::decode(payload).map_err(malformed)?;
                if !request.collection.is_empty() {
                    let results = stub
                        .get_private_data_by_range(
                            &request.collection,
                            &request.start_key,
                            &request.end_key,
                        )
                        .map_err(|e| e.to_string())?;
                    return Ok(self.open_query(records(stub.namespace(), results)));
                }
                if let Some(page) = page_request(&request.metadata).map_err(malformed)? {
                    let found = stub
                        .get_state_by_range_paged(&request.start_key, &request.end_key, &page)
                        .map_err(|e| e.to_string())?;
                    let records = records(stub.namespace(), found.results);
                    return Ok(self.answer_page(records, found.bookmark));
                }
                let results = stub
                    .get_state_by_range(&request.start_key, &request.end_key)
                    .map_err(|e| e.to_string())?;
                Ok(self.open_query(records(stub.namespace(), results)))
            }
            MessageType::GetHistoryForKey => {
                let request = GetHistoryForKey::decode(payload).map_err(malformed)?;
                let history = stub
                    .get_history_for_key(&request.key)
                    .map_err(|e| e.to_string())?;
                Ok(self.open_query(
                    history
                        .iter()
                        .map(|modification| Bytes::from(modification.encode_to_vec()))
                        .collect(),
                ))
            }
            MessageType::QueryStateNext => {
                let request = QueryStateNext::decode(payload).map_err(malformed)?;
                if !self.queries.contains_key(&request.id) {
                    return Err(format!("query {:?} is not open", request.id));
                }
                Ok(self.page(request.id))
            }
            MessageType::QueryStateClose => {
                let request = QueryStateClose::decode(payload).map_err(malformed)?;
                self.queries.remove(&request.id);
                Ok(QueryResponse {
                    id: request.id,
                    ..QueryResponse::default()
                }
                .encode_to_vec()
                .into())
            }
            MessageType::GetQueryResult => {
                let request = GetQueryResult::decode(payload).map_err(malformed)?;
                if !request.collection.is_empty() {
                    let results = stub
                        .get_private_data_query_result(&request.collection, &request.query)
                        .map_err(|e| e.to_string())?;
                    return Ok(self.open_query(records(stub.namespace(), results)));
                }
                let page = page_request(&request.metadata).map_err(malformed)?;
                let found = stub
                    .get_query_result(&request.query, page.as_ref())
                    .map_err(|e| e.to_string())?;
                let records = records(stub.namespace(), found.results);
                Ok(match page {
                    Some(_) => self.answer_page(records, found.bookmark),
                    None => self.open_query(records),
                })
            }
            MessageType::InvokeChaincode => {
                let spec = ChaincodeSpec::decode(payload).map_err(malformed)?;
                let target = spec.chaincode_id.map(|id| id.name).unwrap_or_default();
                let args = spec.input.map(|input| input.args).unwrap_or_default();
                let response = stub
                    .invoke_chaincode(&target, args)
                    .map_err(|e| e.to_string())?;
                // The called chaincode's last message, as Fabric's peer
                // hands it to the caller's shim.
                Ok(ChaincodeMessage {
                    r#type: MessageType::Completed as i32,
                    payload: response.encode_to_vec().into(),
                    ..reply_to(&TxKey {
                        channel_id: request.channel_id.clone(),
                        tx_id: request.txid.clone(),
                    })
                }
                .encode_to_vec()
                .into())
            }
            MessageType::GetStateMetadata => {
                let request = GetStateMetadata::decode(payload).map_err(malformed)?;
                let entries = if request.collection.is_empty() {
                    stub.get_state_metadata(&request.key)
                } else {
                    stub.get_private_data_metadata(&request.collection, &request.key)
                }
                .map_err(|e| e.to_string())?;
                Ok(StateMetadataResult {
                    entries: entries
                        .into_iter()
                        .map(|(metakey, value)| StateMetadata { metakey, value })
                        .collect(),
                }
                .encode_to_vec()
                .into())
            }
            MessageType::PutStateMetadata => {
                let request = PutStateMetadata::decode(payload).map_err(malformed)?;
                let metadata = request
                    .metadata
                    .ok_or_else(|| "PUT_STATE_METADATA carries no metadata".to_owned())?;
                put_metadata(stub, &request.collection, &request.key, metadata)
                    .map_err(|e| e.to_string())?;
                Ok(Bytes::new())
            }
            MessageType::GetPrivateDataHash => {
                let request = GetState::decode(payload).map_err(malformed)?;
                let hash = stub
                    .get_private_data_hash(&request.collection, &request.key)
                    .map_err(|e| e.to_string())?;
                Ok(hash.unwrap_or_default())
            }
            MessageType::PurgePrivateData => {
                let request = PurgePrivateState::decode(payload).map_err(malformed)?;
                purge(stub, &request.collection, &request.key).map_err(|e| e.to_string())?;
                Ok(Bytes::new())
            }
            other => Err(format!(
                "a chaincode does not send {} during a transaction",
                other.as_str_name()
            )),
        }
    }

    /// The one RESPONSE to a query that asked for a page: its `records`
    /// and Fabric's `QueryResponseMetadata`; the query is closed with it.
    fn answer_page(&mut self, records: VecDeque<Bytes>, bookmark: String) -> Bytes {
        self.next_query_id += 1;
        let metadata = QueryResponseMetadata {
            fetched_records_count: i32::try_from(records.len()).unwrap_or(i32::MAX),
            bookmark,
        };
        QueryResponse {
            results: records
                .into_iter()
                .map(|result_bytes| QueryResultBytes { result_bytes })
                .collect(),
            has_more: false,
            id: self.next_query_id.to_string(),
            metadata: metadata.encode_to_vec().into(),
        }
        .encode_to_vec()
        .into()
    }

    /// Opens a query over `results` and answers its first page.
    fn open_query(&mut self, results: VecDeque<Bytes>) -> Bytes {
        self.next_query_id += 1;
        let id = self.next_query_id.to_string();
        self.queries.insert(id.clone(), results);
        self.page(id)
    }

    /// The next page of query `id`, closed once it is drained.
    fn page(&mut self, id: String) -> Bytes {
        let Some(remaining) = self.queries.get_mut(&id) else {
            return Bytes::new();
        };
        let take = remaining.len().min(QUERY_PAGE_RESULTS);
        let results = remaining
            .drain(..take)
            .map(|result_bytes| QueryResultBytes { result_bytes })
            .collect();
        let has_more = !remaining.is_empty();
        if !has_more {
            self.queries.remove(&id);
        }
        QueryResponse {
            results,
            has_more,
            id,
            metadata: Bytes::new(),
        }
        .encode_to_vec()
        .into()
    }
}

/// The page a range query's `QueryMetadata` asks for; `None` when it asks
/// for none (no metadata, or page size 0 and no bookmark, as Fabric's
/// peer reads it). A page size below 1 means no limit.
fn page_request(metadata: &[u8]) -> Result<Option<PageRequest>, prost::DecodeError> {
    if metadata.is_empty() {
        return Ok(None);
    }
    let metadata = QueryMetadata::decode(metadata)?;
    if metadata.page_size == 0 && metadata.bookmark.is_empty() {
        return Ok(None);
    }
    Ok(Some(PageRequest {
        size: u32::try_from(metadata.page_size).unwrap_or(0),
        bookmark: metadata.bookmark,
    }))
}

/// Range results as the shims read them: encoded `queryresult.KV`s of
/// `namespace`.
fn records(namespace: &str, results: impl IntoIterator<Item = (String, Bytes)>) -> VecDeque<Bytes> {
    results
        .into_iter()
        .map(|(key, value)| {
            Kv {
                namespace: namespace.to_owned(),
                key,
                value,
            }
            .encode_to_vec()
            .into()
        })
        .collect()
}

/// PUT_STATE_METADATA (alone or in a write batch): of a public key, or
/// of a private one when `collection` is named.
fn put_metadata(
    stub: &mut Stub<'_>,
    collection: &str,
    key: &str,
    metadata: StateMetadata,
) -> Result<(), StateError> {
    if collection.is_empty() {
        stub.put_state_metadata(key, &metadata.metakey, metadata.value)
    } else {
        stub.put_private_data_metadata(collection, key, &metadata.metakey, metadata.value)
    }
}

/// PURGE_PRIVATE_DATA (alone or in a write batch), with Fabric's refusal
/// of a purge that names no collection.
fn purge(stub: &mut Stub<'_>, collection: &str, key: &str) -> Result<(), StateError> {
    if collection.is_empty() {
        return Err(StateError::Private(
            "only applicable for private data".to_owned(),
        ));
    }
    stub.purge_private_data(collection, key)
}

/// Serves a chaincode's requests during one transaction as a connection
/// does, one answer per request: the fuzz targets' way in (`fuzz/`).
#[cfg(feature = "fuzzing")]
pub fn serve_for_fuzzing(
    stub: &mut Stub<'_>,
    requests: impl IntoIterator<Item = ChaincodeMessage>,
) -> Vec<ChaincodeMessage> {
    let mut session = Session::default();
    requests
        .into_iter()
        .map(|request| session.answer(stub, &request))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use weft_statedb::VersionedState;

    use super::*;
    use crate::chaincode::tests::{kv_of, kv_of_empty, proposal, state};

    fn request(kind: MessageType, payload: impl Message) -> ChaincodeMessage {
        ChaincodeMessage {
            r#type: kind as i32,
            payload: payload.encode_to_vec().into(),
            txid: "tx1".to_owned(),
            channel_id: "ch".to_owned(),
            ..ChaincodeMessage::default()
        }
    }

    /// The answer's type and payload; the answer names the request's
    /// transaction.
    fn answer(
        session: &mut Session,
        stub: &mut Stub<'_>,
        request: &ChaincodeMessage,
    ) -> (MessageType, Bytes) {
        let answer = session.answer(stub, request);
        assert_eq!(
            (answer.txid.as_str(), answer.channel_id.as_str()),
            ("tx1", "ch")
        );
        (
            MessageType::try_from(answer.r#type).unwrap(),
            answer.payload,
        )
    }

    #[test]
    fn state_requests_are_served_by_the_stub_and_recorded() {
        let (_dir, state) = state(3);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let mut session = Session::default();
        let get = |key: &str| {
            request(
                MessageType::GetState,
                GetState {
                    key: key.to_owned(),
                    collection: String::new(),
                },
            )
        };
        assert_eq!(
            answer(&mut session, &mut stub, &get("k001")),
            (MessageType::Response, Bytes::from_static(b"v1"))
        );
        // An absent key is an empty value, as Fabric's peer answers.
        assert_eq!(
            answer(&mut session, &mut stub, &get("absent")),
            (MessageType::Response, Bytes::new())
        );
        let put = request(
            MessageType::PutState,
            PutState {
                key: "k002".to_owned(),
                value: Bytes::from_static(b"new"),
                collection: String::new(),
            },
        );
        assert_eq!(
            answer(&mut session, &mut stub, &put).0,
            MessageType::Response
        );
        let del = request(
            MessageType::DelState,
            DelState {
                key: "k000".to_owned(),
                collection: String::new(),
            },
        );
        assert_eq!(
            answer(&mut session, &mut stub, &del).0,
            MessageType::Response
        );
        let kv = kv_of(&stub);
        assert_eq!(
            kv.reads.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
            ["absent", "k001"]
        );
        assert_eq!(
            kv.writes
                .iter()
                .map(|w| (w.key.as_str(), w.is_delete))
                .collect::<Vec<_>>(),
            [("k000", true), ("k002", false)]
        );
    }

    #[test]
    fn range_results_come_in_pages_until_drained_or_closed() {
        let (_dir, state) = state(1500);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let mut session = Session::default();
        let range = request(
            MessageType::GetStateByRange,
            GetStateByRange {
                start_key: "k".to_owned(),
                end_key: String::new(),
                ..GetStateByRange::default()
            },
        );
        let (kind, payload) = answer(&mut session, &mut stub, &range);
        assert_eq!(kind, MessageType::Response);
        let first = QueryResponse::decode(payload).unwrap();
        assert_eq!(
            (first.results.len(), first.has_more),
            (QUERY_PAGE_RESULTS, true)
        );
        let record = Kv::decode(first.results[0].result_bytes.clone()).unwrap();
        assert_eq!(
            (
                record.namespace.as_str(),
                record.key.as_str(),
                &record.value[..]
            ),
            ("cc", "k000", &b"v0"[..])
        );
        let next = request(
            MessageType::QueryStateNext,
            QueryStateNext {
                id: first.id.clone(),
            },
        );
        let (_, payload) = answer(&mut session, &mut stub, &next);
        let second = QueryResponse::decode(payload).unwrap();
        assert_eq!((second.results.len(), second.has_more), (500, false));
        // Drained, the query is closed: asking for more is an error.
        assert_eq!(answer(&mut session, &mut stub, &next).0, MessageType::Error);

        // A query closed early is forgotten.
        let (_, payload) = answer(&mut session, &mut stub, &range);
        let id = QueryResponse::decode(payload).unwrap().id;
        assert_ne!(id, first.id);
        let close = request(
            MessageType::QueryStateClose,
            QueryStateClose { id: id.clone() },
        );
        assert_eq!(
            answer(&mut session, &mut stub, &close).0,
            MessageType::Response
        );
        let next = request(MessageType::QueryStateNext, QueryStateNext { id });
        assert_eq!(answer(&mut session, &mut stub, &next).0, MessageType::Error);
        // Both range queries were recorded for the committer's phantom check.
        assert_eq!(kv_of(&stub).range_queries_info.len(), 2);
    }

    #[test]
    fn a_paged_range_query_is_answered_in_one_response_with_its_bookmark() {
        let (_dir, state) = state(5);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let mut session = Session::default();
        let paged = |bookmark: &str| {
            request(
                MessageType::GetStateByRange,
                GetStateByRange {
                    start_key: "k001".to_owned(),
                    end_key: String::new(),
                    metadata: QueryMetadata {
                        page_size: 2,
                        bookmark: bookmark.to_owned(),
                    }
                    .encode_to_vec()
                    .into(),
                    ..GetStateByRange::default()
                },
            )
        };
        let mut bookmark = String::new();
        let mut pages = Vec::new();
        loop {
            let (kind, payload) = answer(&mut session, &mut stub, &paged(&bookmark));
            assert_eq!(kind, MessageType::Response);
            let response = QueryResponse::decode(payload).unwrap();
            assert!(!response.has_more);
            let metadata = QueryResponseMetadata::decode(response.metadata).unwrap();
            let keys: Vec<String> = response
                .results
                .iter()
                .map(|result| Kv::decode(result.result_bytes.clone()).unwrap().key)
                .collect();
            assert_eq!(metadata.fetched_records_count as usize, keys.len());
            pages.push(keys);
            if metadata.bookmark.is_empty() {
                break;
            }
            bookmark = metadata.bookmark;
        }
        assert_eq!(pages, [vec!["k001", "k002"], vec!["k003", "k004"]]);
        // Paged queries make the transaction read-only.
        let put = request(
            MessageType::PutState,
            PutState {
                key: "k000".to_owned(),
                value: Bytes::from_static(b"v"),
                collection: String::new(),
            },
        );
        let (kind, message) = answer(&mut session, &mut stub, &put);
        assert_eq!(kind, MessageType::Error);
        assert!(
            String::from_utf8_lossy(&message).contains("Writes are not allowed"),
            "{message:?}"
        );
    }

    #[test]
    fn multi_key_reads_and_write_batches_are_served_key_by_key() {
        let (_dir, state) = state(3);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let mut session = Session::default();
        let multiple = request(
            MessageType::GetStateMultiple,
            GetStateMultiple {
                keys: vec!["k002".to_owned(), "absent".to_owned(), "k000".to_owned()],
                collection: String::new(),
            },
        );
        let (kind, payload) = answer(&mut session, &mut stub, &multiple);
        assert_eq!(kind, MessageType::Response);
        let values = GetStateMultipleResult::decode(payload).unwrap().values;
        assert_eq!(values, [&b"v2"[..], b"", b"v0"]);
        let write = |kind: WriteType, key: &str| weft_protos::protos::WriteRecord {
            key: key.to_owned(),
            value: Bytes::from_static(b"batched"),
            r#type: kind as i32,
            ..weft_protos::protos::WriteRecord::default()
        };
        let batch = request(
            MessageType::WriteBatchState,
            WriteBatchState {
                rec: vec![
                    write(WriteType::PutState, "k001"),
                    write(WriteType::DelState, "k002"),
                    write(WriteType::PutState, "new"),
                ],
            },
        );
        assert_eq!(
            answer(&mut session, &mut stub, &batch).0,
            MessageType::Response
        );
        let kv = kv_of(&stub);
        assert_eq!(
            kv.reads.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
            ["absent", "k000", "k002"]
        );
        assert_eq!(
            kv.writes
                .iter()
                .map(|w| (w.key.as_str(), w.is_delete))
                .collect::<Vec<_>>(),
            [("k001", false), ("k002", true), ("new", false)]
        );
    }

    #[test]
    fn key_metadata_is_read_as_stored_and_written_into_the_rwset() {
        // Goal: GET_STATE_METADATA answers the entries the state holds for
        // a key (recording a read of the key, as Fabric's simulator does);
        // PUT_STATE_METADATA, alone or in a write batch, becomes the key's
        // whole metadata in the transaction's metadata writes.
        let (_dir, state) = state(2);
        let stored = weft_protos::tx::metadata_write(
            "",
            &std::collections::BTreeMap::from([(
                weft_protos::tx::VALIDATION_PARAMETER.to_owned(),
                Bytes::from_static(b"policy"),
            )]),
        );
        let mut batch = weft_statedb::UpdateBatch::new();
        batch.put(
            &weft_statedb::key_metadata_namespace("cc"),
            "k001",
            stored.encode_to_vec().into(),
            weft_statedb::Height::new(2, 0),
        );
        weft_statedb::VersionedState::apply(&state, &batch, weft_statedb::Height::new(2, 0))
            .unwrap();
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let mut session = Session::default();
        let get = |key: &str| {
            request(
                MessageType::GetStateMetadata,
                GetStateMetadata {
                    key: key.to_owned(),
                    collection: String::new(),
                },
            )
        };
        let (kind, payload) = answer(&mut session, &mut stub, &get("k001"));
        assert_eq!(kind, MessageType::Response);
        let entries = StateMetadataResult::decode(payload).unwrap().entries;
        assert_eq!(
            entries,
            [StateMetadata {
                metakey: "VALIDATION_PARAMETER".to_owned(),
                value: Bytes::from_static(b"policy"),
            }]
        );
        let (_, payload) = answer(&mut session, &mut stub, &get("k000"));
        assert!(
            StateMetadataResult::decode(payload)
                .unwrap()
                .entries
                .is_empty()
        );

        let metadata = |value: &'static [u8]| StateMetadata {
            metakey: "VALIDATION_PARAMETER".to_owned(),
            value: Bytes::from_static(value),
        };
        let put = request(
            MessageType::PutStateMetadata,
            PutStateMetadata {
                key: "k000".to_owned(),
                collection: String::new(),
                metadata: Some(metadata(b"first")),
            },
        );
        assert_eq!(
            answer(&mut session, &mut stub, &put).0,
            MessageType::Response
        );
        let batch = request(
            MessageType::WriteBatchState,
            WriteBatchState {
                rec: vec![weft_protos::protos::WriteRecord {
                    key: "k000".to_owned(),
                    metadata: Some(metadata(b"second")),
                    r#type: WriteType::PutStateMetadata as i32,
                    ..weft_protos::protos::WriteRecord::default()
                }],
            },
        );
        assert_eq!(
            answer(&mut session, &mut stub, &batch).0,
            MessageType::Response
        );

        let kv = kv_of(&stub);
        assert_eq!(
            kv.reads.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
            ["k000", "k001"]
        );
        assert_eq!(kv.metadata_writes.len(), 1);
        assert_eq!(kv.metadata_writes[0].key, "k000");
        assert_eq!(
            kv.metadata_writes[0].entries,
            [weft_protos::kvrwset::KvMetadataEntry {
                name: "VALIDATION_PARAMETER".to_owned(),
                value: Bytes::from_static(b"second"),
            }]
        );
    }

    #[test]
    fn what_weft_does_not_serve_is_an_error_naming_it() {
        let (_dir, state) = state(1);
        let proposal = proposal();
        let snapshot = state.snapshot();
        let mut stub = Stub::new(&proposal, "cc", snapshot.as_ref());
        let mut session = Session::default();
        let private = request(
            MessageType::GetState,
            GetState {
                key: "k000".to_owned(),
                collection: "secrets".to_owned(),
            },
        );
        let garbage = ChaincodeMessage {
            payload: Bytes::from_static(b"\xff\xff\xff"),
            ..request(MessageType::PutState, PutState::default())
        };
        let bad_key = request(
            MessageType::PutState,
            PutState {
                key: String::new(),
                ..PutState::default()
            },
        );
        for (request, expected) in [
            (
                private,
                "collection config not defined for chaincode [cc], pass the collection \
                 configuration upon chaincode definition/instantiation",
            ),
            (garbage, "malformed PUT_STATE payload"),
            (
                request(
                    MessageType::PurgePrivateData,
                    PurgePrivateState {
                        key: "k000".to_owned(),
                        collection: String::new(),
                    },
                ),
                "only applicable for private data",
            ),
            (bad_key, "must not be empty"),
            (
                request(MessageType::GetHistoryForKey, GetState::default()),
                "history database is not enabled",
            ),
            (
                request(MessageType::GetQueryResult, GetState::default()),
                "invalid JSON query",
            ),
            (
                request(MessageType::InvokeChaincode, GetState::default()),
                "no such chaincode is installed",
            ),
            (
                request(MessageType::Register, GetState::default()),
                "does not send REGISTER",
            ),
        ] {
            let (kind, payload) = answer(&mut session, &mut stub, &request);
            assert_eq!(kind, MessageType::Error);
            let message = String::from_utf8(payload.to_vec()).unwrap();
            assert!(message.contains(expected), "{message}");
        }
        // Nothing was read or written.
        assert!(kv_of_empty(&stub));
    }
}
