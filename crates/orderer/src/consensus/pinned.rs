//! Dialling the other consenters over TLS, pinned both ways as Fabric's
//! cluster is: the other side of every connection must present the very
//! certificate the channel configuration names for it. Callers are pinned
//! on the server side (`cluster.rs`, `ChannelConfig::is_consenter`); this
//! is the dialling side: a consenter's server certificate must chain to
//! the node's TLS CAs, match the host dialled, and be the `ServerTLSCert`
//! that a channel's config names for that endpoint.
//!
//! The pins are looked up when a connection is made, so a config block
//! that changes a consenter's certificate applies at the next connection.
//! An endpoint no channel names (a Kafka channel's orderers named without
//! certificates) is checked against the CAs and host only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use parking_lot::RwLock;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tonic::transport::{Channel, Endpoint};

/// A consenter's endpoint (`host:port`) and the DER of the server
/// certificate its channel config names.
pub(crate) type ServerPin = (String, Vec<u8>);

/// The server certificates the channel configs name, by channel.
#[derive(Debug, Default)]
pub(crate) struct ServerPins {
    by_channel: RwLock<HashMap<String, Vec<ServerPin>>>,
}

impl ServerPins {
    /// Makes `servers` (endpoint and server certificate of each
    /// consenter) the pins of `channel`, replacing its earlier ones.
    pub fn set(&self, channel: &str, servers: &[ServerPin]) {
        self.by_channel
            .write()
            .insert(channel.to_owned(), servers.to_vec());
    }

    /// The certificates some channel names for `endpoint`; `None` if no
    /// channel names a consenter there.
    pub fn expected(&self, endpoint: &str) -> Option<Vec<Vec<u8>>> {
        let expected: Vec<Vec<u8>> = self
            .by_channel
            .read()
            .values()
            .flatten()
            .filter(|(at, _)| at == endpoint)
            .map(|(_, certificate)| certificate.clone())
            .collect();
        (!expected.is_empty()).then_some(expected)
    }
}

/// What a node dials the other consenters with: its TLS CAs, its own
/// certificate and key (the other side asks for them), and the pins.
#[derive(Debug, Clone)]
pub(crate) struct PinnedDialer {
    verifier: Arc<WebPkiServerVerifier>,
    certificates: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
    pins: Arc<ServerPins>,
}

impl PinnedDialer {
    /// A dialer trusting `roots` (PEM certificates) and presenting
    /// `certificate` with its `key` (PEM); the error says which is bad.
    pub fn new(
        roots: &[Vec<u8>],
        certificate: &[u8],
        key: &[u8],
        pins: Arc<ServerPins>,
    ) -> Result<Self, String> {
        let mut store = RootCertStore::empty();
        for pem in roots {
            for root in CertificateDer::pem_slice_iter(pem) {
                let root = root.map_err(|e| format!("a TLS root CA certificate: {e}"))?;
                store
                    .add(root)
                    .map_err(|e| format!("a TLS root CA certificate: {e}"))?;
            }
        }
        let verifier = WebPkiServerVerifier::builder_with_provider(
            Arc::new(store),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .map_err(|e| format!("the TLS root CAs: {e}"))?;
        let certificates = CertificateDer::pem_slice_iter(certificate)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the TLS certificate: {e}"))?;
        let key =
            PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("the TLS private key: {e}"))?;
        Ok(Self {
            verifier,
            certificates,
            key: Arc::new(key),
            pins,
        })
    }

    /// A connection to the consenter at `endpoint` (`host:port`), made
    /// when first used (and again after it fails).
    pub fn channel(&self, endpoint: &str, connect_timeout: Duration) -> Result<Channel, String> {
        let (connector, server_name) = self.connector(endpoint)?;
        let address = endpoint.to_owned();
        let connect = tower::service_fn(move |_: http::Uri| {
            let (connector, server_name, address) =
                (connector.clone(), server_name.clone(), address.clone());
            async move {
                handshake(&connector, server_name, &address)
                    .await
                    .map(TokioIo::new)
            }
        });
        // TLS is done by the connector: the endpoint itself is plain.
        let plain = Endpoint::from_shared(format!("http://{endpoint}"))
            .map_err(|e| format!("consenter endpoint {endpoint:?}: {e}"))?;
        Ok(
            weft_protos::dial::with_keepalive(plain, weft_protos::serve::Keepalive::CLIENT_DEFAULT)
                .connect_timeout(connect_timeout)
                .connect_with_connector_lazy(connect),
        )
    }

    /// A TLS connection to the consenter at `endpoint`, its certificate
    /// checked and pinned.
    #[cfg(test)]
    async fn connect(
        &self,
        endpoint: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let (connector, server_name) = self.connector(endpoint).map_err(std::io::Error::other)?;
        handshake(&connector, server_name, endpoint).await
    }

    /// The TLS client of `endpoint`, and the name its certificate must
    /// carry (the host part: a DNS name or an IP address).
    fn connector(
        &self,
        endpoint: &str,
    ) -> Result<(tokio_rustls::TlsConnector, ServerName<'static>), String> {
        let unusable = |e: &dyn std::fmt::Display| format!("consenter endpoint {endpoint:?}: {e}");
        let (host, _) = endpoint
            .rsplit_once(':')
            .ok_or_else(|| unusable(&"not host:port"))?;
        let server_name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
            .map_err(|e| unusable(&e))?;
        let verifier = Arc::new(PinnedVerifier {
            webpki: self.verifier.clone(),
            endpoint: endpoint.to_owned(),
            pins: self.pins.clone(),
        });
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| unusable(&e))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(self.certificates.clone(), self.key.clone_key())
        .map_err(|e| unusable(&e))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok((
            tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name,
        ))
    }
}

/// Connects to `address` and makes the TLS handshake as `connector`
/// checks it (the pin is looked up now, not when the connector was made).
async fn handshake(
    connector: &tokio_rustls::TlsConnector,
    server_name: ServerName<'static>,
    address: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(address).await?;
    tcp.set_nodelay(true)?;
    connector.connect(server_name, tcp).await
}

/// The web PKI's checks, then the pin of the endpoint.
#[derive(Debug)]
struct PinnedVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    endpoint: String,
    pins: Arc<ServerPins>,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        match self.pins.expected(&self.endpoint) {
            Some(expected) if !expected.iter().any(|pin| pin == end_entity.as_ref()) => {
                tracing::warn!(
                    endpoint = %self.endpoint,
                    "a consenter presented a TLS certificate other than the ServerTLSCert \
                     its channel config names; not connecting"
                );
                Err(rustls::Error::General(format!(
                    "the consenter at {} presented a TLS certificate other than the \
                     ServerTLSCert its channel config names",
                    self.endpoint
                )))
            }
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki
            .verify_tls12_signature(message, certificate, signature)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki
            .verify_tls13_signature(message, certificate, signature)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, PKCS_ECDSA_P256_SHA256,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn pins_are_looked_up_by_endpoint_across_channels() {
        let pins = ServerPins::default();
        assert_eq!(pins.expected("o1:7050"), None);
        pins.set(
            "a",
            &[
                ("o1:7050".to_owned(), vec![1]),
                ("o2:7050".to_owned(), vec![2]),
            ],
        );
        pins.set("b", &[("o1:7050".to_owned(), vec![3])]);
        let mut o1 = pins.expected("o1:7050").unwrap();
        o1.sort();
        assert_eq!(o1, [vec![1], vec![3]]);
        // A config block replaces the channel's pins.
        pins.set("a", &[("o2:7050".to_owned(), vec![4])]);
        assert_eq!(pins.expected("o1:7050").unwrap(), [vec![3]]);
        assert_eq!(pins.expected("o2:7050").unwrap(), [vec![4]]);
    }

    /// A TLS CA and the certificates it issues for 127.0.0.1.
    struct Ca {
        params: CertificateParams,
        key: KeyPair,
    }

    impl Ca {
        fn new() -> Self {
            let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            Self { params, key }
        }

        fn pem(&self) -> Vec<u8> {
            self.params
                .self_signed(&self.key)
                .unwrap()
                .pem()
                .into_bytes()
        }

        /// A certificate for 127.0.0.1 and its key, PEM.
        fn issue(&self) -> (String, String) {
            let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
            let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
            let issuer = Issuer::from_params(&self.params, &self.key);
            let certificate = params.signed_by(&key, &issuer).unwrap();
            (certificate.pem(), key.serialize_pem())
        }
    }

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    /// A TLS server on 127.0.0.1 presenting `certificate`, answering each
    /// connection with "ok"; its endpoint.
    async fn server(certificate: &str, key: &str) -> String {
        let chain = vec![CertificateDer::from_pem_slice(certificate.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let _ = tls.write_all(b"ok").await;
                        let _ = tls.shutdown().await;
                    }
                });
            }
        });
        endpoint
    }

    async fn reach(dialer: &PinnedDialer, endpoint: &str) -> Result<(), String> {
        let mut tls = dialer.connect(endpoint).await.map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        tls.read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        assert_eq!(answer, b"ok");
        Ok(())
    }

    #[tokio::test]
    async fn a_consenter_is_reached_only_with_the_server_certificate_its_channel_names() {
        // Goal: the dialling side of Fabric's two-way pinning. A server
        // whose certificate the node's TLS CA issued for the host dialled
        // is still refused unless it is the one a channel config names for
        // that endpoint; an endpoint no channel names is checked against
        // the CA and host only; a certificate of another CA never passes.
        let ca = Ca::new();
        let (presented, presented_key) = ca.issue();
        let (other, _) = ca.issue();
        let (client, client_key) = ca.issue();
        let endpoint = server(&presented, &presented_key).await;
        let pins = Arc::new(ServerPins::default());
        let dialer = PinnedDialer::new(
            &[ca.pem()],
            client.as_bytes(),
            client_key.as_bytes(),
            pins.clone(),
        )
        .unwrap();

        pins.set("ch", &[(endpoint.clone(), der(&presented))]);
        reach(&dialer, &endpoint).await.unwrap();

        pins.set("ch", &[(endpoint.clone(), der(&other))]);
        let refused = reach(&dialer, &endpoint).await.unwrap_err();
        assert!(
            refused.contains("other than the ServerTLSCert its channel config names"),
            "{refused}"
        );

        pins.set("ch", &[]);
        reach(&dialer, &endpoint).await.unwrap();

        let stranger = Ca::new();
        let (foreign, foreign_key) = stranger.issue();
        let impostor = server(&foreign, &foreign_key).await;
        pins.set("ch", &[(impostor.clone(), der(&foreign))]);
        let refused = reach(&dialer, &impostor).await.unwrap_err();
        assert!(
            refused.contains("invalid peer certificate") && !refused.contains("ServerTLSCert"),
            "{refused}"
        );
    }
}
