//! How a node or client names the gRPC endpoint of another node: in
//! plaintext (`http://host:port`) or over TLS (`https://host:port`, checked
//! against the given CA certificates and the host's name or IP address, as
//! Fabric's clients check a node's TLS certificate).
//!
//! Building an [`Endpoint`] does no I/O; connecting to it does.
//! [`server`], [`client_certificate`], [`unreadable_request`] and
//! [`oversized_request_status`] are the server's side: the limits a node
//! serves with, which certificate the caller presented, and what to answer
//! a request that could not be read.

use tonic::transport::{ClientTlsConfig, Endpoint};

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

/// Requests one client connection may have under way at once: a client
/// that opens more waits for one to end (HTTP/2 flow control), so a flood
/// on one connection slows its sender instead of growing the node.
pub const STREAMS_PER_CONNECTION_MAX: u32 = 1024;

/// How often an idle connection is probed, and how long the probe may go
/// unanswered before the connection is closed: a client that vanished
/// (its machine died, a network cut) stops holding its streams. Fabric's
/// defaults (`peer.keepalive.interval`, `timeout`).
pub const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(7200);
pub const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// A gRPC server with the limits every weft node serves with
/// ([`STREAMS_PER_CONNECTION_MAX`], keepalive probes).
pub fn server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .max_concurrent_streams(Some(STREAMS_PER_CONNECTION_MAX))
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_keepalive(Some(KEEPALIVE_INTERVAL))
}

/// The DER of the TLS certificate the caller of `request` presented, if
/// it came over TLS with one.
pub fn client_certificate<T>(request: &tonic::Request<T>) -> Option<bytes::Bytes> {
    let certificates = request.peer_certs()?;
    let leaf = certificates.first()?;
    Some(bytes::Bytes::copy_from_slice(leaf.as_ref()))
}

/// The status a streaming service ends a call with when a request of it
/// could not be read (`error`, from reading the request stream), as
/// Fabric's gRPC server does: RESOURCE_EXHAUSTED for a request over the
/// message size limit, INTERNAL for bytes that are not the `expected`
/// message; each with the reason.
pub fn unreadable_request(error: &tonic::Status, expected: &str) -> tonic::Status {
    match error.code() {
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => {
            tonic::Status::resource_exhausted(format!(
                "the request is too large: {}",
                error.message()
            ))
        }
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
pub fn oversized_request_status<B>(
    mut response: tonic::codegen::http::Response<B>,
) -> tonic::codegen::http::Response<B> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_follows_tls() {
        let plain = endpoint("127.0.0.1:7051", None).unwrap();
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let tls = endpoint("127.0.0.1:7051", Some(&ClientTlsConfig::new())).unwrap();
        assert_eq!(tls.uri().scheme_str(), Some("https"));
        assert_eq!(tls.uri().authority().unwrap().as_str(), "127.0.0.1:7051");
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
    }
}
