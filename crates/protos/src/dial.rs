//! How a node or client names the gRPC endpoint of another node: in
//! plaintext (`http://host:port`) or over TLS (`https://host:port`, checked
//! against the given CA certificates and the host's name or IP address, as
//! Fabric's clients check a node's TLS certificate).
//!
//! Building an [`Endpoint`] does no I/O; connecting to it does.
//! [`client_certificate`] and [`unreadable_request`] are the server's side:
//! which certificate the caller presented, and what to answer a request
//! that could not be read.

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
