//! Fabric client plumbing shared by the commands that act as a client
//! (`weft bench`, `weft chaincode deploy`): connections, commit events and
//! the orderers' chain of block headers.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use prost::Message;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use weft_msp::Signer;
use weft_protos::common::{Block, HeaderType};
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;
use weft_protos::orderer::deliver_response::Type as OrdererResponse;
use weft_protos::orderer::seek_info::{SeekBehavior, SeekContentType};
use weft_protos::orderer::seek_position::Type as SeekType;
use weft_protos::orderer::{SeekInfo, SeekNewest, SeekPosition, SeekSpecified};
use weft_protos::protos::FilteredBlock;
use weft_protos::protos::deliver_client::DeliverClient;
use weft_protos::protos::deliver_response::Type as PeerResponse;

use crate::settings::read_file;

/// The largest block a client reads (Fabric's default message limit).
const BLOCK_BYTES_MAX: usize = 100 * 1024 * 1024;

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

/// How a command reaches the nodes: in plaintext, or over TLS.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct TlsArgs {
    /// A TLS CA certificate (PEM) of the peers or the orderer; repeat for
    /// each. With any, every connection is made over TLS trusting these.
    #[arg(long = "tls-ca")]
    tls_cas: Vec<PathBuf>,
    /// A client TLS certificate (PEM) to present to nodes that require
    /// mutual TLS (their `tls.clientAuthRequired`), with --tls-key.
    #[arg(long = "tls-cert", requires_all = ["tls_key", "tls_cas"])]
    tls_cert: Option<PathBuf>,
    /// The private key (PKCS#8 PEM) of --tls-cert.
    #[arg(long = "tls-key", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// How to reach the nodes: in plaintext without --tls-ca; over TLS
    /// trusting those CAs, presenting --tls-cert if given.
    pub fn dialer(&self) -> Result<Dialer> {
        if self.tls_cas.is_empty() {
            return Ok(Dialer::default());
        }
        let roots = self
            .tls_cas
            .iter()
            .map(|path| read_file("--tls-ca", path))
            .collect::<Result<Vec<_>>>()?;
        let dialer = Dialer::tls(roots);
        match (&self.tls_cert, &self.tls_key) {
            (Some(certificate), Some(key)) => dialer
                .presenting(
                    read_file("--tls-cert", certificate)?,
                    read_file("--tls-key", key)?,
                )
                .context("--tls-cert"),
            _ => Ok(dialer),
        }
    }
}

/// Block `number` of `channel` from `orderer` (the newest with `None`),
/// asked for by `reader`.
pub(crate) async fn fetch_block(
    dialer: &Dialer,
    orderer: SocketAddr,
    channel: &str,
    reader: &Signer,
    number: Option<u64>,
) -> Result<Block> {
    let position = SeekPosition {
        r#type: Some(match number {
            Some(number) => SeekType::Specified(SeekSpecified { number }),
            None => SeekType::Newest(SeekNewest {}),
        }),
    };
    let seek = SeekInfo {
        start: Some(position),
        stop: Some(position),
        behavior: SeekBehavior::FailIfNotReady as i32,
        ..SeekInfo::default()
    };
    let request = signed_seek(dialer, channel, reader, &seek)?;
    let mut blocks = AtomicBroadcastClient::new(dialer.connect(orderer).await?)
        .max_decoding_message_size(BLOCK_BYTES_MAX)
        .deliver(tokio_stream::iter([request]))
        .await
        .context("the orderer refused the Deliver request")?
        .into_inner();
    let response = blocks
        .message()
        .await
        .context("the orderer's Deliver stream failed")?
        .ok_or_else(|| anyhow!("the orderer ended its Deliver stream without a block"))?;
    match response.r#type {
        Some(OrdererResponse::Block(block)) => Ok(block),
        Some(OrdererResponse::Status(status)) => bail!(
            "the orderer answered {} for block {} of {channel}",
            weft_protos::common::Status::try_from(status).map_or_else(
                |_| status.to_string(),
                |status| status.as_str_name().to_owned()
            ),
            number.map_or_else(|| "newest".to_owned(), |number| number.to_string())
        ),
        None => bail!("the orderer sent an empty Deliver response"),
    }
}

/// The answer of `orderer` to `envelope`, sent on a Broadcast stream of
/// its own.
pub(crate) async fn broadcast_one(
    dialer: &Dialer,
    orderer: SocketAddr,
    envelope: weft_protos::common::Envelope,
) -> Result<weft_protos::orderer::BroadcastResponse> {
    let mut answers = AtomicBroadcastClient::new(dialer.connect(orderer).await?)
        .broadcast(tokio_stream::iter([envelope]))
        .await
        .context("the orderer refused the Broadcast stream")?
        .into_inner();
    answers
        .message()
        .await
        .context("the orderer's Broadcast stream failed")?
        .ok_or_else(|| anyhow!("the orderer closed the stream without answering"))
}

/// The peer's filtered blocks from the newest on.
pub(crate) async fn subscribe(
    dialer: &Dialer,
    peer: SocketAddr,
    channel: &str,
    client: &Signer,
) -> Result<tonic::Streaming<weft_protos::protos::DeliverResponse>> {
    let request = seek_from_newest(dialer, channel, client, SeekContentType::Block)?;
    Ok(DeliverClient::new(dialer.connect(peer).await?)
        .deliver_filtered(tokio_stream::iter([request]))
        .await
        .context("the peer refused the DeliverFiltered request")?
        .into_inner())
}

/// The orderer's blocks from the newest on, headers and signatures only
/// (Fabric's HEADER_WITH_SIG): when each block left the orderer.
pub(crate) async fn follow_headers(
    dialer: &Dialer,
    orderer: SocketAddr,
    channel: &str,
    client: &Signer,
) -> Result<tonic::Streaming<weft_protos::orderer::DeliverResponse>> {
    let request = seek_from_newest(dialer, channel, client, SeekContentType::HeaderWithSig)?;
    Ok(AtomicBroadcastClient::new(dialer.connect(orderer).await?)
        .deliver(tokio_stream::iter([request]))
        .await
        .context("the orderer refused the Deliver request")?
        .into_inner())
}

/// The number of the next block of an orderer's Deliver stream.
pub(crate) async fn next_block_number(
    blocks: &mut tonic::Streaming<weft_protos::orderer::DeliverResponse>,
) -> Result<u64> {
    let response = blocks
        .message()
        .await
        .context("an orderer's block stream failed")?
        .ok_or_else(|| anyhow!("an orderer ended its block stream"))?;
    match response.r#type {
        Some(OrdererResponse::Block(block)) => block
            .header
            .map(|header| header.number)
            .ok_or_else(|| anyhow!("an orderer sent a block without a header")),
        other => bail!("an orderer answered {other:?} where a block was due"),
    }
}

/// A signed request for every block from the newest on, as they come,
/// bound to the dialer's client TLS certificate.
fn seek_from_newest(
    dialer: &Dialer,
    channel: &str,
    client: &Signer,
    content_type: SeekContentType,
) -> Result<weft_protos::common::Envelope> {
    let seek = SeekInfo {
        start: Some(SeekPosition {
            r#type: Some(SeekType::Newest(SeekNewest {})),
        }),
        stop: Some(SeekPosition {
            r#type: Some(SeekType::Specified(SeekSpecified { number: u64::MAX })),
        }),
        behavior: SeekBehavior::BlockUntilReady as i32,
        content_type: content_type as i32,
        ..SeekInfo::default()
    };
    signed_seek(dialer, channel, client, &seek)
}

/// `seek` as a Deliver request signed by `client`, bound to the dialer's
/// client TLS certificate.
fn signed_seek(
    dialer: &Dialer,
    channel: &str,
    client: &Signer,
    seek: &SeekInfo,
) -> Result<weft_protos::common::Envelope> {
    Ok(weft_protos::tx::signed_envelope_bound(
        HeaderType::DeliverSeekInfo,
        channel,
        seek.encode_to_vec().into(),
        client,
        client.new_nonce()?,
        weft_msp::now(),
        dialer.tls_cert_hash.clone(),
    )?)
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
