//! How a node or client names the gRPC endpoint of another node: in
//! plaintext (`http://host:port`) or over TLS (`https://host:port`, checked
//! against the given CA certificates and the host's name or IP address, as
//! Fabric's clients check a node's TLS certificate).
//!
//! Building an [`Endpoint`] does no I/O; connecting to it does. The
//! server's side is [`crate::serve`].
//!
//! Which of several nodes to dial first is [`EndpointChoice`]'s business:
//! Fabric's peers pick orderers at random, so that a network's peers spread
//! their streams over the ordering service.
//!
//! A connection that makes unary calls should be wrapped in
//! [`ending_with_last_message`]: its requests then end the HTTP/2 stream
//! on their message's DATA frame, as Go's gRPC client (tape's, Fabric's Go
//! SDK's) sends them, instead of in an empty frame that goes out in a
//! write (and a wake-up of the server) of its own.

use std::hash::{BuildHasher, RandomState};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body as HttpBody, Frame};
use serde::Deserialize;
use tonic::body::Body;
use tonic::codegen::http::Request;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::serve::Keepalive;

/// The endpoint of `address` (`host:port`), over TLS when `tls` is given.
pub fn endpoint(
    address: &str,
    tls: Option<&ClientTlsConfig>,
) -> Result<Endpoint, tonic::transport::Error> {
    match tls {
        None => Endpoint::from_shared(format!("http://{address}")),
        Some(tls) => Endpoint::from_shared(format!("https://{address}"))?.tls_config(tls.clone()),
    }
}

/// `endpoint`, probing its connection as `keepalive` says, also while no
/// call is under way: a node that stopped answering (a stopped process, a
/// dead machine behind a live network) fails the calls on it instead of
/// leaving them waiting forever.
pub fn with_keepalive(endpoint: Endpoint, keepalive: Keepalive) -> Endpoint {
    endpoint
        .http2_keep_alive_interval(keepalive.interval)
        .keep_alive_timeout(keepalive.timeout)
        .keep_alive_while_idle(true)
}

/// A gRPC connection whose requests end their stream with their last
/// message ([`ending_with_last_message`]).
pub type Connection = tower::util::MapRequest<Channel, fn(Request<Body>) -> Request<Body>>;

/// `channel`, its requests' bodies looking one frame ahead so that the
/// frame of a unary call's only message says the stream ends there.
///
/// tonic yields a request's message and only on the next poll learns that
/// nothing follows; hyper then sends an empty DATA frame to end the stream.
/// h2 writes a message over 256 bytes straight from its buffer, before any
/// frame queued after it, so that empty frame took a socket write of its
/// own: one more write per call for the client and, when it arrives alone,
/// one more wake-up for the server.
pub fn ending_with_last_message(channel: Channel) -> Connection {
    tower::ServiceExt::map_request(channel, look_ahead as fn(_) -> _)
}

fn look_ahead(request: Request<Body>) -> Request<Body> {
    request.map(|body| Body::new(LookAhead::new(body)))
}

/// A body that, having yielded a frame, polls the next one at once, so
/// that `is_end_stream` is already true beside a body's last frame.
#[derive(Debug)]
struct LookAhead<B: HttpBody> {
    inner: B,
    /// A frame polled ahead, yielded next.
    ahead: Option<Result<Frame<B::Data>, B::Error>>,
    /// Whether `inner` ended (it is not polled again).
    ended: bool,
}

impl<B: HttpBody> LookAhead<B> {
    fn new(inner: B) -> Self {
        Self {
            inner,
            ahead: None,
            ended: false,
        }
    }
}

impl<B> HttpBody for LookAhead<B>
where
    B: HttpBody + Unpin,
    B::Data: Unpin,
    B::Error: Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = match this.ahead.take() {
            Some(frame) => frame,
            None if this.ended => return Poll::Ready(None),
            None => match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(frame) => frame,
                None => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
            },
        };
        if frame.is_ok() {
            // A look-ahead that is not ready leaves the waker with the
            // inner body: the task wakes when that frame is ready, as it
            // would for the next poll.
            if let Poll::Ready(next) = Pin::new(&mut this.inner).poll_frame(cx) {
                match next {
                    Some(next) => this.ahead = Some(next),
                    None => this.ended = true,
                }
            }
        }
        Poll::Ready(Some(frame))
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_none() && (self.ended || self.inner.is_end_stream())
    }
}

/// In which order a client tries the nodes it may use for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointChoice {
    /// A fresh random order each time, as Fabric's peers choose orderers
    /// (their deliver client and their Gateway's Submit).
    #[default]
    Random,
    /// The order the nodes are listed in: a preference (a nearby node
    /// first), or a predictable order for a test.
    Listed,
}

impl EndpointChoice {
    /// The indexes `0..count` in the order to try them.
    pub fn order(self, count: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..count).collect();
        if self == Self::Random {
            // Each `RandomState` has keys of its own, so each call shuffles
            // anew (Fisher-Yates); nothing here needs unpredictability.
            let hashes = RandomState::new();
            for last in (1..count).rev() {
                let pick = hashes.hash_one(last) % (last as u64 + 1);
                order.swap(last, pick as usize);
            }
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_random_choice_is_a_permutation_that_starts_anywhere() {
        assert_eq!(EndpointChoice::Listed.order(4), vec![0, 1, 2, 3]);
        assert!(EndpointChoice::Random.order(0).is_empty());
        let mut firsts = [0; 3];
        for _ in 0..300 {
            let mut order = EndpointChoice::Random.order(3);
            firsts[order[0]] += 1;
            order.sort_unstable();
            assert_eq!(order, vec![0, 1, 2]);
        }
        // Each of the three comes first about 100 times in 300; fewer
        // than 50 would mean the choice is far from uniform.
        assert!(firsts.iter().all(|&first| first >= 50), "{firsts:?}");
    }

    /// A body that answers its polls from a script: `None` in the script
    /// is a poll that is not ready yet.
    struct Scripted(std::collections::VecDeque<Option<Option<&'static str>>>);

    impl HttpBody for Scripted {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
            match self.get_mut().0.pop_front() {
                Some(Some(frame)) => Poll::Ready(frame.map(|data| Ok(Frame::data(data.into())))),
                Some(None) => Poll::Pending,
                None => panic!("polled after its end"),
            }
        }
    }

    /// Polls `body` once: the data of the frame it yields, or `Err(())`
    /// when it is not ready; `Ok(None)` at its end.
    fn poll(body: &mut LookAhead<Scripted>) -> Result<Option<bytes::Bytes>, ()> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match Pin::new(body).poll_frame(&mut cx) {
            Poll::Ready(frame) => Ok(frame.map(|frame| frame.unwrap().into_data().unwrap())),
            Poll::Pending => Err(()),
        }
    }

    #[test]
    fn the_only_message_of_a_request_ends_its_stream() {
        let mut body = LookAhead::new(Scripted([Some(Some("proposal")), Some(None)].into()));
        assert!(!body.is_end_stream());
        assert_eq!(poll(&mut body), Ok(Some("proposal".into())));
        assert!(
            body.is_end_stream(),
            "the stream ends with the message's frame"
        );
        // Never polled again past its end.
        assert_eq!(poll(&mut body), Ok(None));
        assert_eq!(poll(&mut body), Ok(None));
    }

    #[test]
    fn a_stream_of_messages_keeps_its_order_and_ends_with_the_last() {
        let script = [
            Some(Some("first")),
            Some(Some("second")),
            None,
            Some(Some("third")),
            Some(None),
        ];
        let mut body = LookAhead::new(Scripted(script.into()));
        assert_eq!(poll(&mut body), Ok(Some("first".into())));
        assert!(!body.is_end_stream());
        // The frame polled ahead comes next; the one after it is not ready.
        assert_eq!(poll(&mut body), Ok(Some("second".into())));
        assert!(!body.is_end_stream());
        assert_eq!(poll(&mut body), Ok(Some("third".into())));
        assert!(body.is_end_stream());
        assert_eq!(poll(&mut body), Ok(None));
    }

    #[test]
    fn the_scheme_follows_tls() {
        let plain = endpoint("127.0.0.1:7051", None).unwrap();
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let tls = endpoint("127.0.0.1:7051", Some(&ClientTlsConfig::new())).unwrap();
        assert_eq!(tls.uri().scheme_str(), Some("https"));
        assert_eq!(tls.uri().authority().unwrap().as_str(), "127.0.0.1:7051");
    }
}
