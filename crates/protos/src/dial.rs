//! How a node or client names the gRPC endpoint of another node: in
//! plaintext (`http://host:port`) or over TLS (`https://host:port`, checked
//! against the given CA certificates and the host's name or IP address, as
//! Fabric's clients check a node's TLS certificate).
//!
//! Building an [`Endpoint`] does no I/O; connecting to it does. The
//! server's side is [`crate::serve`].

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
}
