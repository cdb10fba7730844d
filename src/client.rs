//! Fabric client plumbing shared by the commands that act as a client
//! (`weft bench`, `weft chaincode deploy`): connections and commit events.

use std::net::SocketAddr;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use prost::Message;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use weft_msp::Signer;
use weft_protos::common::HeaderType;
use weft_protos::orderer::seek_info::SeekBehavior;
use weft_protos::orderer::seek_position::Type as SeekType;
use weft_protos::orderer::{SeekInfo, SeekNewest, SeekPosition, SeekSpecified};
use weft_protos::protos::FilteredBlock;
use weft_protos::protos::deliver_client::DeliverClient;
use weft_protos::protos::deliver_response::Type as PeerResponse;

/// How a client reaches the network's nodes: in plaintext, or over TLS
/// trusting the network's TLS CA certificates.
#[derive(Debug, Clone, Default)]
pub(crate) struct Dialer {
    tls: Option<ClientTlsConfig>,
    /// The SHA-256 of the client TLS certificate presented, if any, which
    /// Deliver requests name (mutual TLS binds them to the connection).
    tls_cert_hash: Bytes,
}

impl Dialer {
    /// Dials over TLS, trusting exactly `roots` (PEM certificates).
    pub fn tls(roots: Vec<Vec<u8>>) -> Self {
        Self {
            tls: Some(crate::tls::client_config(
                roots.into_iter().map(Certificate::from_pem),
            )),
            tls_cert_hash: Bytes::new(),
        }
    }

    /// Presents `certificate` with its PKCS#8 `private_key` (PEM) to
    /// servers that ask for client certificates; only over TLS.
    pub fn presenting(self, certificate: Vec<u8>, private_key: Vec<u8>) -> Result<Self> {
        let tls = self
            .tls
            .context("a client certificate is only presented over TLS")?;
        let der = weft_msp::certificate_der(&certificate).context("the client TLS certificate")?;
        Ok(Self {
            tls: Some(tls.identity(Identity::from_pem(certificate, private_key))),
            tls_cert_hash: weft_protos::hash::sha256(&der).to_vec().into(),
        })
    }

    /// A gRPC connection to `address`.
    pub async fn connect(&self, address: SocketAddr) -> Result<Channel> {
        weft_protos::dial::endpoint(&address.to_string(), self.tls.as_ref())
            .with_context(|| format!("the TLS settings for {address}"))?
            .connect()
            .await
            .with_context(|| format!("connecting to {address}"))
    }
}

/// The peer's filtered blocks from the newest on.
pub(crate) async fn subscribe(
    dialer: &Dialer,
    peer: SocketAddr,
    channel: &str,
    client: &Signer,
) -> Result<tonic::Streaming<weft_protos::protos::DeliverResponse>> {
    let seek = SeekInfo {
        start: Some(SeekPosition {
            r#type: Some(SeekType::Newest(SeekNewest {})),
        }),
        stop: Some(SeekPosition {
            r#type: Some(SeekType::Specified(SeekSpecified { number: u64::MAX })),
        }),
        behavior: SeekBehavior::BlockUntilReady as i32,
        ..SeekInfo::default()
    };
    let request = weft_protos::tx::signed_envelope_bound(
        HeaderType::DeliverSeekInfo,
        channel,
        seek.encode_to_vec().into(),
        client,
        client.new_nonce()?,
        weft_msp::now(),
        dialer.tls_cert_hash.clone(),
    )?;
    Ok(DeliverClient::new(dialer.connect(peer).await?)
        .deliver_filtered(tokio_stream::iter([request]))
        .await
        .context("the peer refused the DeliverFiltered request")?
        .into_inner())
}

/// The next filtered block of a peer's event stream.
pub(crate) async fn next_block(
    commits: &mut tonic::Streaming<weft_protos::protos::DeliverResponse>,
) -> Result<FilteredBlock> {
    let response = commits
        .message()
        .await
        .context("a peer's event stream failed")?
        .ok_or_else(|| anyhow!("a peer ended its event stream"))?;
    match response.r#type {
        Some(PeerResponse::FilteredBlock(block)) => Ok(block),
        other => bail!("a peer answered {other:?} where a block was due"),
    }
}
