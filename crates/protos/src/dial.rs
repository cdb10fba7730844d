//! How a node or client names the gRPC endpoint of another node: in
//! plaintext (`http://host:port`) or over TLS (`https://host:port`, checked
//! against the given CA certificates and the host's name or IP address, as
//! Fabric's clients check a node's TLS certificate).
//!
//! Building an [`Endpoint`] does no I/O; connecting to it does. The
//! server's side is [`crate::serve`].

use tonic::transport::{ClientTlsConfig, Endpoint};

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
