//! The streaming half of Fabric's Deliver, shared by the peer's and the
//! orderer's Deliver services: send the blocks of a resolved [`SeekRange`]
//! as they become available, and say how the request ended.
//!
//! Services decode the request with [`SeekRequest::decode`], check its
//! freshness ([`SeekRequest::check_time_window`]) and the requester's
//! access, shape each block into their response type and report the
//! returned status to the client. Access is checked again before each
//! block ([`stream_range`]'s `admit`), as Fabric's `SessionAccessControl`
//! does: a stream ends once its requester's certificate expires or a new
//! channel config no longer lets it read.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use weft_protos::block::is_config_block;
use weft_protos::common::{
    Block, ChannelHeader, Envelope, HeaderType, Payload, SignatureHeader, Status,
};
use weft_protos::orderer::SeekInfo;
use weft_protos::orderer::seek_info::SeekContentType;

use crate::{BlockStore, Error, Result, SeekRange, SeekStep};

/// The largest seek request accepted, in bytes of payload.
pub const SEEK_REQUEST_BYTES_MAX: usize = 1024 * 1024;

/// How far a request's timestamp may be from the node's clock unless
/// configured otherwise: Fabric's default, 15 minutes.
pub const TIME_WINDOW_DEFAULT: Duration = Duration::from_secs(15 * 60);

/// Whether a Deliver service binds requests to their connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsBinding {
    /// Clients need not present TLS certificates: nothing to check.
    Unbound,
    /// Clients must present TLS certificates; the one this connection
    /// presented (DER), if any.
    Required(Option<Bytes>),
}

impl TlsBinding {
    /// `Required` with the certificate `presented` returns when the
    /// server asks clients for certificates; `Unbound` otherwise.
    pub fn when(client_auth_required: bool, presented: impl FnOnce() -> Option<Bytes>) -> Self {
        if client_auth_required {
            Self::Required(presented())
        } else {
            Self::Unbound
        }
    }
}

/// A Deliver request as received: a signed envelope of type
/// DELIVER_SEEK_INFO whose payload data is an `orderer.SeekInfo`. Decoded
/// but not yet authorised: the service checks that `creator` signed the
/// envelope and satisfies its Readers policy.
#[derive(Debug, Clone)]
pub struct SeekRequest {
    pub channel_id: String,
    /// The requester's serialized identity.
    pub creator: Bytes,
    pub seek: SeekInfo,
    /// The SHA-256 of the TLS certificate the requester says it connects
    /// with (`ChannelHeader.tls_cert_hash`); empty if it says none.
    pub tls_cert_hash: Bytes,
    /// When the requester says it made the request
    /// (`ChannelHeader.timestamp`), in seconds since the Unix epoch.
    pub timestamp: Option<i64>,
}

impl SeekRequest {
    /// Decodes `envelope`; the error says what is wrong with it, for the
    /// log (clients are answered BAD_REQUEST).
    pub fn decode(envelope: &Envelope) -> std::result::Result<Self, String> {
        if envelope.payload.len() > SEEK_REQUEST_BYTES_MAX {
            return Err(format!(
                "the request is {} bytes, over the limit of {SEEK_REQUEST_BYTES_MAX}",
                envelope.payload.len()
            ));
        }
        let payload = Payload::decode(envelope.payload.clone())
            .map_err(|e| format!("malformed payload: {e}"))?;
        let header = payload.header.ok_or("the payload has no header")?;
        let channel_header = ChannelHeader::decode(header.channel_header)
            .map_err(|e| format!("malformed channel header: {e}"))?;
        if channel_header.r#type != HeaderType::DeliverSeekInfo as i32 {
            return Err(format!(
                "header type {} is not DELIVER_SEEK_INFO",
                channel_header.r#type
            ));
        }
        let signature_header = SignatureHeader::decode(header.signature_header)
            .map_err(|e| format!("malformed signature header: {e}"))?;
        let seek =
            SeekInfo::decode(payload.data).map_err(|e| format!("malformed seek info: {e}"))?;
        Ok(Self {
            channel_id: channel_header.channel_id,
            creator: signature_header.creator,
            seek,
            tls_cert_hash: channel_header.tls_cert_hash,
            timestamp: channel_header.timestamp.map(|timestamp| timestamp.seconds),
        })
    }

    /// Checks, as Fabric's Deliver does, that the request carries a
    /// timestamp at most `window` away from `now` (seconds since the Unix
    /// epoch), either way: a captured request stops being accepted once
    /// the window has passed. Fabric's default window is 15 minutes
    /// (`peer.authentication.timewindow`, the orderer's
    /// `General.Authentication.TimeWindow`).
    pub fn check_time_window(&self, now: i64, window: Duration) -> std::result::Result<(), String> {
        let timestamp = self
            .timestamp
            .ok_or("the request's channel header carries no timestamp")?;
        let apart = now.abs_diff(timestamp);
        if apart > window.as_secs() {
            return Err(format!(
                "the request's timestamp ({timestamp}) is {apart} s from this node's clock \
                 ({now}), more than the {} s allowed",
                window.as_secs()
            ));
        }
        Ok(())
    }

    /// Checks the request's binding to its connection, as Fabric does
    /// when clients must present TLS certificates: the request names the
    /// hash of the very certificate (DER) the client presented, so a
    /// request signed for one connection cannot be replayed on another.
    pub fn check_tls_binding(&self, binding: &TlsBinding) -> std::result::Result<(), String> {
        let TlsBinding::Required(presented) = binding else {
            return Ok(());
        };
        let certificate = presented
            .as_ref()
            .ok_or("the connection carries no client TLS certificate")?;
        let actual = weft_protos::hash::sha256(certificate);
        if self.tls_cert_hash.is_empty() {
            return Err(
                "the request names no TLS certificate hash (ChannelHeader.tls_cert_hash), \
                 which mutual TLS requires"
                    .to_owned(),
            );
        }
        if self.tls_cert_hash.as_ref() != actual.as_slice() {
            return Err(format!(
                "the request names TLS certificate hash {}, but the client connected with {}",
                hex::encode(&self.tls_cert_hash),
                hex::encode(actual)
            ));
        }
        Ok(())
    }

    /// `block` as the request asked for it (`SeekInfo.content_type`):
    /// whole for BLOCK; for HEADER_WITH_SIG only its header and metadata
    /// (the orderers' signatures), as Fabric sends them to clients that
    /// follow a chain without its transactions. Config blocks always go
    /// whole, since such clients still follow the channel's config.
    pub fn content(&self, mut block: Block) -> Block {
        if self.seek.content_type == SeekContentType::HeaderWithSig as i32
            && !is_config_block(&block)
        {
            block.data = None;
        }
        block
    }
}

/// Fabric's `SessionAccessControl`: what a Deliver request's reader was
/// admitted under, checked again before each block. The reader is refused
/// once its certificate has expired, and its access is evaluated again
/// whenever the channel's config sequence has moved since it was last
/// checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionAccess {
    /// When the reader's certificate (or its chain) expires, in seconds
    /// since the Unix epoch.
    expires_at: i64,
    /// The config sequence the reader's access was last evaluated under.
    checked_sequence: u64,
}

impl SessionAccess {
    /// A reader whose certificate expires at `expires_at`, admitted under
    /// config sequence `sequence`.
    pub fn new(expires_at: i64, sequence: u64) -> Self {
        Self {
            expires_at,
            checked_sequence: sequence,
        }
    }

    /// Whether the reader may still read at `now`, the channel's config
    /// being at `sequence`: `evaluate` (its access under that config)
    /// decides only when the sequence has moved. `Err` says why not.
    pub fn admit(
        &mut self,
        now: i64,
        sequence: u64,
        evaluate: impl FnOnce() -> std::result::Result<(), String>,
    ) -> std::result::Result<(), String> {
        if now > self.expires_at {
            return Err(format!(
                "the reader's certificate expired at {} (now {now})",
                self.expires_at
            ));
        }
        if sequence != self.checked_sequence {
            evaluate().map_err(|reason| format!("under config sequence {sequence}: {reason}"))?;
            self.checked_sequence = sequence;
        }
        Ok(())
    }
}

/// How a Deliver request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// Every block of the range was sent, or the client asked not to wait
    /// for a block that does not exist yet: report this status.
    Status(Status),
    /// The requester lost its access before the next block (the reason,
    /// for the log): report FORBIDDEN, as Fabric does.
    Revoked(String),
    /// The client went away; report nothing.
    Disconnected,
}

/// Sends the blocks of `range` from `store`, in order, as raw block bytes.
/// `send` returns `false` when the client has gone away. A block counts as
/// existing once `heights` (the store's own [`BlockStore::subscribe`], or a
/// peer's committed height, which trails it until the state is applied)
/// passes it; blocks that do not exist yet are awaited
/// (`BLOCK_UNTIL_READY`) or end the request with NOT_FOUND
/// (`FAIL_IF_NOT_READY`). `admit` is asked before each block is sent
/// whether the requester may still read; its refusal ends the request
/// ([`StreamEnd::Revoked`]).
pub async fn stream_range<F, Fut>(
    store: Arc<BlockStore>,
    range: SeekRange,
    mut heights: tokio::sync::watch::Receiver<u64>,
    mut admit: impl FnMut() -> std::result::Result<(), String>,
    mut send: F,
) -> Result<StreamEnd>
where
    F: FnMut(u64, Bytes) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut next = range.start;
    loop {
        let height = *heights.borrow_and_update();
        match range.step(next, height) {
            SeekStep::Deliver => {
                let bytes = store
                    .block_bytes_from_task(next)
                    .await?
                    .ok_or(Error::MissingBlock { block_number: next })?;
                if let Err(reason) = admit() {
                    return Ok(StreamEnd::Revoked(reason));
                }
                if !send(next, bytes).await {
                    return Ok(StreamEnd::Disconnected);
                }
                if range.is_last(next) {
                    return Ok(StreamEnd::Status(Status::Success));
                }
                next += 1;
            }
            SeekStep::Wait => {
                if heights.wait_for(|height| *height > next).await.is_err() {
                    // The store was closed.
                    return Ok(StreamEnd::Status(Status::ServiceUnavailable));
                }
            }
            SeekStep::NotFound => return Ok(StreamEnd::Status(Status::NotFound)),
            SeekStep::Finished => return Ok(StreamEnd::Status(Status::Success)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn request(tls_cert_hash: &[u8]) -> SeekRequest {
        SeekRequest {
            channel_id: "mychannel".to_owned(),
            creator: Bytes::new(),
            seek: SeekInfo::default(),
            tls_cert_hash: Bytes::copy_from_slice(tls_cert_hash),
            timestamp: None,
        }
    }

    #[test]
    fn a_request_must_carry_a_timestamp_within_the_window_of_the_clock() {
        let window = Duration::from_secs(15 * 60);
        let now = 1_800_000_000;
        let at = |timestamp: Option<i64>| SeekRequest {
            timestamp,
            ..request(b"")
        };
        for fresh in [now, now - 900, now + 900] {
            assert_eq!(at(Some(fresh)).check_time_window(now, window), Ok(()));
        }
        for stale in [now - 901, now + 901, 0] {
            let refused = at(Some(stale)).check_time_window(now, window).unwrap_err();
            assert!(refused.contains("more than the 900 s allowed"), "{refused}");
        }
        let refused = at(None).check_time_window(now, window).unwrap_err();
        assert!(refused.contains("no timestamp"), "{refused}");
    }

    #[test]
    fn a_session_ends_at_expiry_and_is_evaluated_again_only_after_a_config_change() {
        let mut session = SessionAccess::new(1_000, 3);
        let mut evaluated = 0;
        let mut evaluate = |verdict: std::result::Result<(), String>| {
            evaluated += 1;
            verdict
        };
        // The same config: access stands without an evaluation.
        assert_eq!(session.admit(999, 3, || evaluate(Err("no".into()))), Ok(()));
        assert_eq!(session.admit(1_000, 3, || evaluate(Ok(()))), Ok(()));
        // A new config: evaluated once, then it stands again.
        assert_eq!(session.admit(1_000, 4, || evaluate(Ok(()))), Ok(()));
        assert_eq!(
            session.admit(1_000, 4, || evaluate(Err("no".into()))),
            Ok(())
        );
        let refused = session.admit(1_000, 5, || evaluate(Err("not a reader".into())));
        assert_eq!(
            refused,
            Err("under config sequence 5: not a reader".to_owned())
        );
        assert_eq!(evaluated, 2);
        // Past the certificate's expiry, whatever the config.
        let expired = session.admit(1_001, 4, || Ok(())).unwrap_err();
        assert!(expired.contains("expired at 1000"), "{expired}");
    }

    #[test]
    fn a_request_decodes_with_its_timestamp() {
        let seek = SeekInfo::default();
        let payload = Payload {
            header: Some(weft_protos::common::Header {
                channel_header: ChannelHeader {
                    r#type: HeaderType::DeliverSeekInfo as i32,
                    channel_id: "mychannel".to_owned(),
                    timestamp: Some(prost_types::Timestamp {
                        seconds: 1_800_000_123,
                        nanos: 5,
                    }),
                    ..ChannelHeader::default()
                }
                .encode_to_vec()
                .into(),
                signature_header: SignatureHeader::default().encode_to_vec().into(),
            }),
            data: seek.encode_to_vec().into(),
        };
        let envelope = Envelope {
            payload: payload.encode_to_vec().into(),
            signature: Bytes::new(),
        };
        let decoded = SeekRequest::decode(&envelope).unwrap();
        assert_eq!(decoded.timestamp, Some(1_800_000_123));
        assert_eq!(decoded.channel_id, "mychannel");
    }

    #[test]
    fn under_mutual_tls_a_request_must_name_its_clients_certificate() {
        let certificate = Bytes::from_static(b"the client's certificate, DER");
        let hash = weft_protos::hash::sha256(&certificate);
        let binding = TlsBinding::Required(Some(certificate));
        assert!(request(&hash).check_tls_binding(&binding).is_ok());
        let other = request(&weft_protos::hash::sha256(b"another certificate"))
            .check_tls_binding(&binding)
            .unwrap_err();
        assert!(other.contains("but the client connected with"), "{other}");
        assert!(request(b"").check_tls_binding(&binding).is_err());
        assert!(
            request(&hash)
                .check_tls_binding(&TlsBinding::Required(None))
                .is_err()
        );
        // Without mutual TLS nothing is checked.
        assert!(request(b"").check_tls_binding(&TlsBinding::Unbound).is_ok());
    }

    #[test]
    fn headers_only_requests_get_transaction_blocks_without_their_data() {
        let transactions = crate::testing::fixture("ch10-block-3.block");
        let config = crate::testing::fixture("ch10-block-0.block");
        let mut headers_only = request(b"");
        headers_only.seek.content_type = SeekContentType::HeaderWithSig as i32;

        let stripped = headers_only.content(transactions.clone());
        assert_eq!(stripped.data, None);
        assert_eq!(stripped.header, transactions.header);
        assert_eq!(stripped.metadata, transactions.metadata);
        assert_eq!(headers_only.content(config.clone()), config);
        assert_eq!(request(b"").content(transactions.clone()), transactions);
    }
}
