//! How every weft node serves gRPC, and what it bounds so that a flood of
//! clients slows them down instead of growing the node (docs/security.md,
//! "Limits"):
//!
//! - [`server`]: the HTTP/2 settings (streams per connection, [`Keepalive`]);
//! - [`incoming`]: the accept loop, which keeps at most
//!   [`ConnectionLimits::connections_max`] connections open (the next
//!   waits in the kernel's queue until one closes) and closes a connection
//!   that sends nothing within [`CONNECTION_ESTABLISH_MAX`], as Fabric's
//!   gRPC servers close one that does not finish its handshake in time;
//! - [`CallLimits`]: a layer refusing a call to a service that already
//!   runs as many as its limit allows, across all connections (Fabric's
//!   `peer.limits.concurrency`), and ending a Deliver call whose client
//!   sends no request within [`REQUEST_START_MAX`] of opening it;
//! - [`client_certificate`], [`unreadable_request`] and
//!   [`oversized_request_status`]: which certificate a caller presented,
//!   and what to answer a request that could not be read;
//! - [`one_write_per_answer`]: a small answer and its trailers in one
//!   socket write.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Sleep;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::{Body as HttpBody, Service};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Requests one client connection may have under way at once: a client
/// that opens more waits for one to end (HTTP/2 flow control), so a flood
/// on one connection slows its sender instead of growing the node.
pub const STREAMS_PER_CONNECTION_MAX: u32 = 1024;

/// HTTP/2 keepalive: how long a connection may go without hearing from
/// the other side before it is probed with a PING, and how long the PING
/// may go unanswered before the connection is closed. A server closes the
/// connection of a client that vanished (its machine died, a network
/// cut, a stopped process), freeing its streams; a client leaves a server
/// that stopped answering for the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    pub interval: Duration,
    pub timeout: Duration,
}

impl Keepalive {
    /// Fabric's server defaults (`peer.keepalive.interval`, `timeout`;
    /// the orderer's `General.Keepalive.ServerInterval`, `ServerTimeout`).
    pub const SERVER_DEFAULT: Self = Self {
        interval: Duration::from_secs(7200),
        timeout: Duration::from_secs(20),
    };

    /// Fabric's client defaults (`peer.keepalive.client` and
    /// `deliveryClient`: every 60 s, answered within 20 s), which Fabric's
    /// servers accept (they refuse PINGs more often than every 60 s).
    pub const CLIENT_DEFAULT: Self = Self {
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(20),
    };
}

/// How long a new connection may stay silent, and a TLS handshake may
/// take: Fabric's gRPC servers' `ConnectionTimeout` default.
pub const CONNECTION_ESTABLISH_MAX: Duration = Duration::from_secs(5);

/// How long a call may wait for its client's first request message: a
/// Deliver stream opened and never told what to send holds a place of its
/// service's limit for nothing.
pub const REQUEST_START_MAX: Duration = Duration::from_secs(10);

/// Client connections a node keeps open at once unless configured: about
/// 64 MiB of idle connections (docs/security.md, "Memory under a flood").
pub const CONNECTIONS_MAX_DEFAULT: usize = 4096;

/// A gRPC server with the limits every weft node serves with
/// ([`STREAMS_PER_CONNECTION_MAX`]), probing its connections as
/// `keepalive` says. Serve it with [`incoming`] to bound its connections
/// too.
pub fn server(keepalive: Keepalive) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .max_concurrent_streams(Some(STREAMS_PER_CONNECTION_MAX))
        .http2_keepalive_interval(Some(keepalive.interval))
        .http2_keepalive_timeout(Some(keepalive.timeout))
}

/// Bounds on the connections of one listener.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once; the next waits to be accepted.
    pub connections_max: usize,
    /// How long a new connection may go without sending a byte.
    pub establish_within: Duration,
}

impl ConnectionLimits {
    /// [`CONNECTION_ESTABLISH_MAX`] for each of at most `connections_max`
    /// connections.
    pub fn new(connections_max: usize) -> Self {
        Self {
            connections_max,
            establish_within: CONNECTION_ESTABLISH_MAX,
        }
    }
}

/// The connections `listener` accepts, for tonic's
/// `serve_with_incoming`, at most `limits.connections_max` open at once.
/// `server` names the listener in log lines. The listener is closed as
/// soon as the stream is dropped (the server stopped).
pub fn incoming(
    listener: TcpListener,
    limits: ConnectionLimits,
    server: &'static str,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Connection>> {
    let (accepted, stream) = mpsc::channel(1);
    let slots = Arc::new(Semaphore::new(limits.connections_max.max(1)));
    tokio::spawn(async move {
        loop {
            let slot = match slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    tracing::warn!(
                        server,
                        limit = limits.connections_max,
                        "all connections in use: new connections wait until one closes"
                    );
                    tokio::select! {
                        slot = slots.clone().acquire_owned() => match slot {
                            Ok(slot) => slot,
                            Err(_) => return,
                        },
                        () = accepted.closed() => return,
                    }
                }
            };
            let connection = tokio::select! {
                connection = listener.accept() => connection,
                () = accepted.closed() => return,
            };
            let connection = connection.map(|(stream, _)| {
                // Latency matters more than packet count for gRPC.
                let _ = stream.set_nodelay(true);
                Connection::new(stream, slot, limits.establish_within)
            });
            if let Err(error) = &connection {
                // Out of file descriptors, most often: wait a little
                // instead of spinning on the error.
                tracing::warn!(server, %error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if accepted.send(connection).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(stream)
}

/// An accepted connection: it holds its place among the listener's
/// connections until it is dropped, and fails its first read if the
/// client sent nothing in time.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    first_byte: FirstArrival,
}

impl Connection {
    fn new(stream: TcpStream, slot: OwnedSemaphorePermit, establish_within: Duration) -> Self {
        Self {
            stream,
            _slot: slot,
            first_byte: FirstArrival::within(establish_within),
        }
    }
}

/// A deadline for the first thing a source yields: met once it yields
/// anything, missed once it passes before.
#[derive(Debug)]
struct FirstArrival(Option<Pin<Box<Sleep>>>);

impl FirstArrival {
    fn within(limit: Duration) -> Self {
        Self(Some(Box::pin(tokio::time::sleep(limit))))
    }

    /// Whether the deadline passed first, told once, after the source was
    /// polled (`arrived`: whether it was ready); registers `cx` for the
    /// deadline while it waits.
    fn missed(&mut self, arrived: bool, cx: &mut Context<'_>) -> bool {
        let missed = !arrived
            && self
                .0
                .as_mut()
                .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
        if arrived || missed {
            self.0 = None;
        }
        missed
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if this.first_byte.missed(read.is_ready(), cx) {
            tracing::debug!(
                peer = ?this.stream.peer_addr().ok(),
                "closing a connection that sent nothing"
            );
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client sent nothing in time",
            )));
        }
        read
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.stream.local_addr().ok(),
            remote_addr: self.stream.peer_addr().ok(),
        }
    }
}

/// Per-service limits on calls under way across all connections, and how
/// long a call may wait for its client's requests: a `tower` layer for a
/// tonic server (`Server::layer`).
#[derive(Debug, Clone)]
pub struct CallLimits {
    limits: Arc<Vec<ServiceLimit>>,
    /// The services (or methods) whose calls must send a first request
    /// within `request_start_max` of opening.
    must_start: Arc<Vec<String>>,
    request_start_max: Duration,
    /// The services (or methods) whose calls are ended when no request
    /// arrives for `idle_max`.
    idle_ended: Arc<Vec<String>>,
    idle_max: Duration,
}

#[derive(Debug)]
struct ServiceLimit {
    /// A service (`/protos.Deliver`) or one method of it
    /// (`/orderer.AtomicBroadcast/Deliver`), as the request path starts.
    prefix: String,
    limit: usize,
    slots: Arc<Semaphore>,
    /// The second of the last refusal logged: one line a second at most.
    last_logged: AtomicU64,
}

impl CallLimits {
    /// Calls to each `(service or method, limit)` at most `limit` at once
    /// (a limit of 0 lifts it).
    pub fn new(limits: &[(&str, usize)]) -> Self {
        Self {
            limits: Arc::new(
                limits
                    .iter()
                    .filter(|(_, limit)| *limit > 0)
                    .map(|(prefix, limit)| ServiceLimit {
                        prefix: (*prefix).to_owned(),
                        limit: *limit,
                        slots: Arc::new(Semaphore::new(*limit)),
                        last_logged: AtomicU64::new(0),
                    })
                    .collect(),
            ),
            must_start: Arc::default(),
            request_start_max: REQUEST_START_MAX,
            idle_ended: Arc::default(),
            idle_max: Duration::MAX,
        }
    }

    /// The same limits, and calls to `services` (or methods) ended with
    /// DEADLINE_EXCEEDED when their client sends no request within
    /// `within` of opening them. For services whose clients always send
    /// at once (a Deliver stream is useless until it is told what to
    /// send); not for Broadcast, whose clients may open a stream ahead of
    /// their first transaction.
    pub fn ending_calls_without_a_request(self, services: &[&str], within: Duration) -> Self {
        Self {
            must_start: Arc::new(services.iter().map(|&service| service.to_owned()).collect()),
            request_start_max: within,
            ..self
        }
    }

    /// The same limits, and calls to `services` (or methods) ended with
    /// DEADLINE_EXCEEDED once no request of theirs arrived for `idle_max`
    /// (since the call opened or since the last one): a stream a client
    /// forgot stops holding its place among its service's calls. For
    /// services whose clients send as long as they use the stream
    /// (Broadcast), not for those that wait for the server (Deliver).
    pub fn ending_idle_calls(self, services: &[&str], idle_max: Duration) -> Self {
        Self {
            idle_ended: Arc::new(services.iter().map(|&service| service.to_owned()).collect()),
            idle_max,
            ..self
        }
    }

    /// A place for a call to `path`, or the status refusing it.
    fn admit(&self, path: &str) -> Result<Option<OwnedSemaphorePermit>, tonic::Status> {
        let Some(service) = self
            .limits
            .iter()
            .find(|service| is_under(path, &service.prefix))
        else {
            return Ok(None);
        };
        match service.slots.clone().try_acquire_owned() {
            Ok(slot) => Ok(Some(slot)),
            Err(_) => {
                // Fabric's words, with a code a client can act on.
                let message = format!(
                    "too many requests for {}, exceeding concurrency limit ({})",
                    service.prefix, service.limit
                );
                let second = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| since.as_secs());
                if service.last_logged.swap(second, Ordering::Relaxed) != second {
                    tracing::warn!("{message}: refused, the client should retry");
                }
                Err(tonic::Status::resource_exhausted(message))
            }
        }
    }
}

/// Whether request `path` is a call to `service` (`/protos.Deliver`) or
/// is the method `service` names (`/orderer.AtomicBroadcast/Deliver`).
fn is_under(path: &str, service: &str) -> bool {
    path.strip_prefix(service)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

impl<S> tower::Layer<S> for CallLimits {
    type Service = LimitedCalls<S>;

    fn layer(&self, inner: S) -> LimitedCalls<S> {
        LimitedCalls {
            inner,
            limits: self.clone(),
        }
    }
}

/// A service behind [`CallLimits`].
#[derive(Debug, Clone)]
pub struct LimitedCalls<S> {
    inner: S,
    limits: CallLimits,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<Request<Body>> for LimitedCalls<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Send + 'static,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let slot = match self.limits.admit(request.uri().path()) {
            Ok(slot) => slot,
            Err(status) => return Box::pin(std::future::ready(Ok(status.into_http()))),
        };
        let path = request.uri().path();
        let named = |services: &[String]| services.iter().any(|service| is_under(path, service));
        let pacing = RequestPacing {
            first_within: named(&self.limits.must_start).then_some(self.limits.request_start_max),
            idle_max: named(&self.limits.idle_ended).then_some(self.limits.idle_max),
        };
        let request = if pacing.first_within.is_some() || pacing.idle_max.is_some() {
            request.map(|body| Body::new(PacedRequests::new(body, pacing)))
        } else {
            request
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            // A stream keeps its place until its last message is sent.
            Ok(response.map(|body| Body::new(HoldingSlot { body, _slot: slot })))
        })
    }
}

/// A response body holding its call's place among its service's calls.
struct HoldingSlot<B> {
    body: B,
    _slot: Option<OwnedSemaphorePermit>,
}

impl<B: HttpBody + Unpin> HttpBody for HoldingSlot<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// How long a call's client may take to send: its first request within
/// `first_within` of opening the call (or within `idle_max` when that is
/// not set), and each next one within `idle_max` of the last.
#[derive(Debug, Clone, Copy)]
struct RequestPacing {
    first_within: Option<Duration>,
    idle_max: Option<Duration>,
}

/// A request body that fails with DEADLINE_EXCEEDED when a frame does not
/// arrive within its [`RequestPacing`].
struct PacedRequests {
    body: Body,
    pacing: RequestPacing,
    /// When the next frame is due; `None` once none is.
    deadline: Option<Pin<Box<Sleep>>>,
    received: bool,
}

impl PacedRequests {
    fn new(body: Body, pacing: RequestPacing) -> Self {
        let deadline = pacing
            .first_within
            .or(pacing.idle_max)
            .map(|within| Box::pin(tokio::time::sleep(within)));
        Self {
            body,
            pacing,
            deadline,
            received: false,
        }
    }

    /// The status a missed deadline ends the call with.
    fn missed(&self) -> tonic::Status {
        let seconds = |within: Option<Duration>| within.map_or(0.0, |within| within.as_secs_f64());
        tonic::Status::deadline_exceeded(if self.received {
            format!(
                "no request arrived within {}s of the last one",
                seconds(self.pacing.idle_max)
            )
        } else {
            format!(
                "no request arrived within {}s of opening the call",
                seconds(self.pacing.first_within.or(self.pacing.idle_max))
            )
        })
    }
}

impl HttpBody for PacedRequests {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.received = true;
                match (this.pacing.idle_max, this.deadline.as_mut()) {
                    (Some(idle_max), Some(deadline)) => {
                        deadline
                            .as_mut()
                            .reset(tokio::time::Instant::now() + idle_max);
                    }
                    (Some(idle_max), None) => {
                        this.deadline = Some(Box::pin(tokio::time::sleep(idle_max)));
                    }
                    (None, _) => this.deadline = None,
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => {
                // The client ended its side, or it failed: nothing is due.
                this.deadline = None;
                Poll::Ready(other)
            }
            Poll::Pending => {
                let due = this
                    .deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if due {
                    this.deadline = None;
                    return Poll::Ready(Some(Err(this.missed())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The DER of the TLS certificate the caller of `request` presented, if
/// it came over TLS with one.
pub fn client_certificate<T>(request: &tonic::Request<T>) -> Option<Bytes> {
    let certificates = request.peer_certs()?;
    let leaf = certificates.first()?;
    Some(Bytes::copy_from_slice(leaf.as_ref()))
}

/// The status a streaming service ends a call with when a request of it
/// could not be read (`error`, from reading the request stream), as
/// Fabric's gRPC server does: RESOURCE_EXHAUSTED for a request over the
/// message size limit, INTERNAL for bytes that are not the `expected`
/// message; each with the reason. A call whose first request did not come
/// in time ends with the DEADLINE_EXCEEDED [`CallLimits`] gave it.
pub fn unreadable_request(error: &tonic::Status, expected: &str) -> tonic::Status {
    match error.code() {
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => {
            tonic::Status::resource_exhausted(format!(
                "the request is too large: {}",
                error.message()
            ))
        }
        tonic::Code::DeadlineExceeded => tonic::Status::deadline_exceeded(error.message()),
        _ => tonic::Status::internal(format!(
            "the request is not {expected}: {}",
            error.message()
        )),
    }
}

/// Rewrites the status tonic answers a unary request over the message
/// size limit with (OUT_OF_RANGE, before any handler runs) into the one
/// [`unreadable_request`] gives streaming calls and Fabric's gRPC server
/// gives every call: RESOURCE_EXHAUSTED, "the request is too large: …".
/// For a server's response map (`tower::util::MapResponseLayer`); every
/// other response passes unchanged.
pub fn oversized_request_status<B>(mut response: Response<B>) -> Response<B> {
    use tonic::codegen::http::HeaderValue;
    let headers = response.headers_mut();
    // tonic's grpc-message is percent-encoded: a space is %20.
    let oversized = headers.get("grpc-status").is_some_and(|code| code == "11")
        && headers
            .get("grpc-message")
            .and_then(|message| message.to_str().ok())
            .is_some_and(|message| message.contains("length%20too%20large"));
    if oversized {
        let reason = headers
            .get("grpc-message")
            .and_then(|message| message.to_str().ok())
            .unwrap_or_default();
        let message = format!("the%20request%20is%20too%20large:%20{reason}");
        if let Ok(message) = HeaderValue::from_str(&message) {
            headers.insert("grpc-status", HeaderValue::from_static("8"));
            headers.insert("grpc-message", message);
        }
    }
    response
}

/// h2 copies a DATA payload shorter than 256 bytes into its write buffer
/// and writes a longer one straight from the message, before any frame
/// queued after it (its `CHAIN_THRESHOLD` with vectored writes).
const COPIED_PAYLOAD_MAX: usize = 255;

/// Messages up to this size are cut into payloads h2 copies.
const ONE_WRITE_MESSAGE_MAX: usize = 4096;

/// `response`, its messages of up to 4 KiB cut into DATA frames short
/// enough for h2 to copy, so that a unary answer leaves in one socket
/// write with its trailers.
///
/// h2 writes a longer payload from the message itself, which must go out
/// before the next frame is buffered: an answer's HEADERS and DATA left in
/// one write and its trailers (`grpc-status`) in a second, which woke the
/// client a second time, on the server's CPU when the client sleeps on
/// another core. Cut, the answer costs a few frame headers (9 bytes per
/// 255) and one write. Larger messages (blocks on a Deliver stream) are
/// left whole: their copy would cost more than the write it saves.
pub fn one_write_per_answer(response: Response<Body>) -> Response<Body> {
    response.map(|body| Body::new(CutSmallMessages::new(body)))
}

/// A body whose data frames of up to [`ONE_WRITE_MESSAGE_MAX`] bytes are
/// yielded in pieces of at most [`COPIED_PAYLOAD_MAX`].
#[derive(Debug)]
struct CutSmallMessages<B> {
    inner: B,
    /// What is left of the message being cut.
    rest: Option<Bytes>,
}

impl<B> CutSmallMessages<B> {
    fn new(inner: B) -> Self {
        Self { inner, rest: None }
    }
}

impl<B> HttpBody for CutSmallMessages<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let mut data = match this.rest.take() {
            Some(rest) => rest,
            None => match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.len() <= ONE_WRITE_MESSAGE_MAX => data,
                    Ok(data) => return Poll::Ready(Some(Ok(http_body::Frame::data(data)))),
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return Poll::Ready(other),
            },
        };
        if data.len() > COPIED_PAYLOAD_MAX {
            this.rest = Some(data.split_off(COPIED_PAYLOAD_MAX));
        }
        Poll::Ready(Some(Ok(http_body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of the given frames, each ready at once.
    struct Frames(std::collections::VecDeque<http_body::Frame<Bytes>>);

    impl HttpBody for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.get_mut().0.pop_front().map(Ok))
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    /// The data frames' lengths `body` yields, and their bytes joined;
    /// whether a trailers frame came last.
    fn drain(mut body: CutSmallMessages<Frames>) -> (Vec<usize>, Vec<u8>, bool) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (mut lengths, mut joined, mut trailers) = (Vec::new(), Vec::new(), false);
        while let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) {
            match frame.unwrap().into_data() {
                Ok(data) => {
                    lengths.push(data.len());
                    joined.extend_from_slice(&data);
                }
                Err(frame) => trailers = frame.is_trailers(),
            }
        }
        assert!(body.is_end_stream());
        (lengths, joined, trailers)
    }

    #[test]
    fn a_small_answer_is_cut_into_payloads_h2_copies_and_keeps_its_trailers() {
        let message: Bytes = (0..1000).map(|i| i as u8).collect::<Vec<_>>().into();
        let frames = [
            http_body::Frame::data(message.clone()),
            http_body::Frame::trailers(tonic::codegen::http::HeaderMap::new()),
        ];
        let (lengths, joined, trailers) = drain(CutSmallMessages::new(Frames(frames.into())));
        assert_eq!(lengths, vec![255, 255, 255, 235]);
        assert_eq!(joined, message);
        assert!(trailers, "the trailers follow the message");
    }

    #[test]
    fn a_large_message_and_a_short_one_stay_whole() {
        let block = Bytes::from(vec![7u8; ONE_WRITE_MESSAGE_MAX + 1]);
        let status = Bytes::from_static(b"a short message");
        let frames = [
            http_body::Frame::data(block.clone()),
            http_body::Frame::data(status.clone()),
        ];
        let (lengths, joined, _) = drain(CutSmallMessages::new(Frames(frames.into())));
        assert_eq!(lengths, vec![block.len(), status.len()]);
        assert_eq!(joined, [&block[..], &status[..]].concat());
    }

    #[test]
    fn an_oversized_unary_request_is_answered_resource_exhausted() {
        let oversized = tonic::Status::out_of_range(
            "Error, decoded message length too large: found 105 bytes, the limit is: 100 bytes",
        )
        .into_http::<()>();
        let answer =
            tonic::Status::from_header_map(oversized_request_status(oversized).headers()).unwrap();
        assert_eq!(answer.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            answer.message(),
            "the request is too large: Error, decoded message length too large: found 105 bytes, \
             the limit is: 100 bytes"
        );
        // Any other status passes as it is.
        let other = tonic::Status::out_of_range("past the end").into_http::<()>();
        let answer =
            tonic::Status::from_header_map(oversized_request_status(other).headers()).unwrap();
        assert_eq!(answer.code(), tonic::Code::OutOfRange);
        assert_eq!(answer.message(), "past the end");
    }

    #[test]
    fn unreadable_requests_are_answered_as_grpc_answers_them() {
        let large = tonic::Status::out_of_range("found 105 bytes, the limit is 100");
        let answer = unreadable_request(&large, "an Envelope");
        assert_eq!(answer.code(), tonic::Code::ResourceExhausted);
        assert!(answer.message().contains("found 105 bytes"));
        let garbage = tonic::Status::internal("invalid wire type");
        let answer = unreadable_request(&garbage, "an Envelope");
        assert_eq!(answer.code(), tonic::Code::Internal);
        assert_eq!(
            answer.message(),
            "the request is not an Envelope: invalid wire type"
        );
        let late = tonic::Status::deadline_exceeded("no request arrived within 10s");
        let answer = unreadable_request(&late, "an Envelope");
        assert_eq!(answer.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(answer.message(), "no request arrived within 10s");
    }

    #[test]
    fn a_service_limit_refuses_the_call_past_it_and_frees_its_place_when_a_call_ends() {
        let limits = CallLimits::new(&[
            ("/protos.Deliver", 2),
            ("/orderer.AtomicBroadcast/Deliver", 1),
            ("/gateway.Gateway", 0),
        ]);
        let first = limits.admit("/protos.Deliver/Deliver").unwrap();
        let second = limits.admit("/protos.Deliver/DeliverFiltered").unwrap();
        assert!(first.is_some() && second.is_some());
        let refused = limits.admit("/protos.Deliver/Deliver").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            refused.message(),
            "too many requests for /protos.Deliver, exceeding concurrency limit (2)"
        );
        drop(first);
        assert!(limits.admit("/protos.Deliver/Deliver").unwrap().is_some());
        // A method limit leaves the service's other methods alone; a
        // service with no limit (0), or not named, is not counted.
        let deliver = limits.admit("/orderer.AtomicBroadcast/Deliver").unwrap();
        assert!(deliver.is_some());
        assert!(limits.admit("/orderer.AtomicBroadcast/Deliver").is_err());
        assert!(
            limits
                .admit("/orderer.AtomicBroadcast/Broadcast")
                .unwrap()
                .is_none()
        );
        assert!(limits.admit("/gateway.Gateway/Submit").unwrap().is_none());
        // A prefix matches whole path segments only.
        assert!(
            limits
                .admit("/protos.DeliverMore/Deliver")
                .unwrap()
                .is_none()
        );
    }
}
