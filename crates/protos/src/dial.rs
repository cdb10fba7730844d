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

use std::hash::{BuildHasher, RandomState};

use serde::Deserialize;
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

    #[test]
    fn the_scheme_follows_tls() {
        let plain = endpoint("127.0.0.1:7051", None).unwrap();
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let tls = endpoint("127.0.0.1:7051", Some(&ClientTlsConfig::new())).unwrap();
        assert_eq!(tls.uri().scheme_str(), Some("https"));
        assert_eq!(tls.uri().authority().unwrap().as_str(), "127.0.0.1:7051");
    }
}
