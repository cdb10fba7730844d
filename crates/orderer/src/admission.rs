//! Admission: what the orderer checks of an envelope before ordering it,
//! as pure functions of the envelope and one configuration of its channel.
//!
//! Broadcast admits each envelope under the channel's current
//! configuration ([`admit`]); a consenter that finds the configuration
//! changed before it orders the envelope admits it again under the new one
//! ([`readmit`]), as Fabric's consenters do. Both ends share this module,
//! so every consenter applies the same rules and none depends on the gRPC
//! service: solo and Raft below `crate::consensus`, Broadcast above.
//!
//! | check | refusal |
//! |---|---|
//! | its header type is ENDORSER_TRANSACTION or CONFIG_UPDATE | BAD_REQUEST |
//! | the channel is not in maintenance | SERVICE_UNAVAILABLE |
//! | payload + signature ≤ `AbsoluteMaxBytes` | BAD_REQUEST |
//! | the creator is valid in the channel's MSPs, its signature verifies, and it satisfies `/Channel/Writers` | FORBIDDEN |
//! | a config update applies to the current config (`config_update`) | BAD_REQUEST, or FORBIDDEN when a mod policy is not met |
//!
//! An admitted config update becomes a CONFIG envelope signed by this
//! orderer, `ConfigEnvelope{config, last_update}`.

use bytes::Bytes;
use prost::Message;
use weft_msp::UnixTime;
use weft_protos::common::{
    ChannelHeader, ConfigEnvelope, ConfigUpdateEnvelope, Envelope, Header, HeaderType, Payload,
    SignatureHeader, Status,
};
use weft_protos::tx::Sign;
use weft_protos::view::{Limits, TxBody, TxEnvelope};

use crate::channel_config::ChannelConfig;
use crate::config_update::{UpdateError, next_config};

/// The policy a Broadcast client must satisfy.
const WRITERS_POLICY: &str = "/Channel/Writers";

/// Why an envelope was refused, as the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: Status,
    pub info: String,
}

impl Refusal {
    pub fn new(status: Status, info: impl Into<String>) -> Self {
        Self {
            status,
            info: info.into(),
        }
    }
}

/// An envelope that passed the checks, on its way to the consenter.
#[derive(Debug)]
pub(crate) enum Admitted {
    /// A normal (endorser) transaction.
    Normal {
        envelope: Bytes,
        /// Payload plus signature length, for the block cutter.
        size_bytes: u64,
        /// The config sequence it was validated under.
        config_sequence: u64,
    },
    /// A CONFIG envelope made from an accepted config update.
    Config {
        envelope: Bytes,
        /// The CONFIG_UPDATE envelope it was made from, to process again
        /// if the config changes before it is ordered.
        update: Bytes,
        config_sequence: u64,
    },
}

/// Admits a decoded envelope under `config`, its channel's current
/// configuration: a normal transaction as it is, a config update as the
/// CONFIG envelope of the channel's next configuration, signed by `signer`.
pub(crate) fn admit(
    view: &TxEnvelope,
    config: &ChannelConfig,
    signer: &dyn Sign,
    now: UnixTime,
) -> Result<Admitted, Refusal> {
    match &view.body {
        TxBody::ConfigUpdate(update) => check_config_update(view, update, config, signer, now),
        _ => check_in_channel(view, config, now),
    }
}

/// An admitted envelope as a consenter orders it under `current`: as it is
/// when the configuration it was admitted under is still in force,
/// otherwise admitted again: a normal transaction checked under the newer
/// configuration, a config update computed again against it (another
/// update was ordered in between).
pub(crate) fn readmit(
    admitted: Admitted,
    current: &ChannelConfig,
    signer: &dyn Sign,
) -> Result<Admitted, Refusal> {
    let stale = match &admitted {
        Admitted::Normal {
            envelope,
            config_sequence,
            ..
        } => (*config_sequence < current.sequence()).then_some(envelope),
        Admitted::Config {
            update,
            config_sequence,
            ..
        } => (*config_sequence != current.sequence()).then_some(update),
    };
    let Some(raw) = stale else {
        return Ok(admitted);
    };
    let view = TxEnvelope::decode_for_ordering(raw.clone(), Limits::default())
        .map_err(|e| Refusal::new(Status::BadRequest, format!("malformed envelope: {e}")))?;
    admit(&view, current, signer, weft_msp::now())
}

/// Checks a decoded envelope against one configuration of its channel.
fn check_in_channel(
    view: &TxEnvelope,
    config: &ChannelConfig,
    now: UnixTime,
) -> Result<Admitted, Refusal> {
    match &view.body {
        TxBody::Endorser(_) | TxBody::EndorserUnread(_) => {}
        TxBody::Config(_) | TxBody::ConfigUpdate(_) => {
            return Err(Refusal::new(
                Status::BadRequest,
                "message is of type that cannot be processed directly",
            ));
        }
        TxBody::Other(_) => {
            let name = HeaderType::try_from(view.channel_header.r#type).map_or_else(
                |_| view.channel_header.r#type.to_string(),
                |t| t.as_str_name().to_owned(),
            );
            let info = if view.channel_header.r#type == HeaderType::OrdererTransaction as i32 {
                "message is of type that cannot be processed directly".to_owned()
            } else {
                format!(
                    "header type {name} is not accepted; send ENDORSER_TRANSACTION or CONFIG_UPDATE"
                )
            };
            return Err(Refusal::new(Status::BadRequest, info));
        }
    }
    if config.orderer.maintenance {
        return Err(Refusal::new(
            Status::ServiceUnavailable,
            "normal transactions are rejected: maintenance mode",
        ));
    }
    let size_bytes = check_size(view, config)?;
    check_tx_id(view)?;
    authorize(view, config, now)?;
    Ok(Admitted::Normal {
        envelope: view.raw.clone(),
        size_bytes,
        config_sequence: config.sequence(),
    })
}

/// Checks a config update as a writer's envelope, then computes the
/// channel's next configuration from it and wraps that in a CONFIG
/// envelope signed by this orderer (`ConfigEnvelope{config, last_update}`).
fn check_config_update(
    view: &TxEnvelope,
    update: &ConfigUpdateEnvelope,
    config: &ChannelConfig,
    signer: &dyn Sign,
    now: UnixTime,
) -> Result<Admitted, Refusal> {
    check_size(view, config)?;
    authorize(view, config, now)?;
    let channel_id = &view.channel_header.channel_id;
    let next = next_config(channel_id, config, update, now).map_err(|e| match e {
        UpdateError::Invalid(reason) => Refusal::new(Status::BadRequest, reason),
        UpdateError::Forbidden(reason) => {
            Refusal::new(Status::Forbidden, format!("{reason}: permission denied"))
        }
    })?;
    // The new config must be one the orderer can run.
    ChannelConfig::new(channel_id, 0, next.clone()).map_err(|e| {
        Refusal::new(
            Status::BadRequest,
            format!("the updated config is unusable: {e}"),
        )
    })?;
    let config_envelope = ConfigEnvelope {
        config: Some(next),
        last_update: Some(Envelope {
            payload: view.payload_bytes.clone(),
            signature: view.signature.clone(),
        }),
    };
    let envelope = signed_config_envelope(channel_id, config_envelope, signer)
        .map_err(|reason| Refusal::new(Status::InternalServerError, reason))?;
    Ok(Admitted::Config {
        envelope,
        update: view.raw.clone(),
        config_sequence: config.sequence(),
    })
}

/// A CONFIG envelope carrying `config`, signed by the orderer.
fn signed_config_envelope(
    channel_id: &str,
    config: ConfigEnvelope,
    signer: &dyn Sign,
) -> Result<Bytes, String> {
    use ring::rand::SecureRandom;
    let mut nonce = [0u8; 24];
    ring::rand::SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| "the system random generator failed".to_owned())?;
    let creator = signer.identity();
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        });
    let payload = Payload {
        header: Some(Header {
            channel_header: ChannelHeader {
                r#type: HeaderType::Config as i32,
                version: 0,
                timestamp: Some(prost_types::Timestamp { seconds, nanos: 0 }),
                channel_id: channel_id.to_owned(),
                tx_id: weft_protos::hash::compute_tx_id(&nonce, &creator),
                epoch: 0,
                extension: Bytes::new(),
                tls_cert_hash: Bytes::new(),
            }
            .encode_to_vec()
            .into(),
            signature_header: SignatureHeader {
                creator,
                nonce: Bytes::copy_from_slice(&nonce),
            }
            .encode_to_vec()
            .into(),
        }),
        data: config.encode_to_vec().into(),
    }
    .encode_to_vec();
    let signature = signer.sign(&payload).map_err(|e| e.to_string())?;
    Ok(Envelope {
        payload: payload.into(),
        signature: signature.into(),
    }
    .encode_to_vec()
    .into())
}

/// Fabric's size filter: payload plus signature within `AbsoluteMaxBytes`.
fn check_size(view: &TxEnvelope, config: &ChannelConfig) -> Result<u64, Refusal> {
    let size_bytes = (view.payload_bytes.len() + view.signature.len()) as u64;
    let limit = u64::from(config.orderer.batch_size.absolute_max_bytes);
    if size_bytes > limit {
        return Err(Refusal::new(
            Status::BadRequest,
            format!(
                "message payload is {size_bytes} bytes and exceeds maximum allowed {limit} bytes"
            ),
        ));
    }
    Ok(size_bytes)
}

/// The TxID is the hash of the nonce and creator, as peers require: the
/// orderers leave out of blocks the envelopes whose TxID they ordered
/// lately (`replays.rs`), so a TxID must be one only its creator can
/// claim. (Fabric's orderer leaves this to the peers.)
fn check_tx_id(view: &TxEnvelope) -> Result<(), Refusal> {
    let computed = view.computed_tx_id();
    if view.tx_id() == computed {
        return Ok(());
    }
    Err(Refusal::new(
        Status::BadRequest,
        format!(
            "the TxID {:?} is not the hash of the transaction's nonce and creator ({computed})",
            view.tx_id()
        ),
    ))
}

/// The creator is a valid member of the channel, signed the payload, and
/// satisfies the Writers policy. The signature is verified once.
fn authorize(view: &TxEnvelope, config: &ChannelConfig, now: UnixTime) -> Result<(), Refusal> {
    let forbidden =
        |reason: String| Refusal::new(Status::Forbidden, format!("{reason}: permission denied"));
    let identity = config
        .authority
        .msps
        .deserialize(view.creator(), now)
        .map_err(|e| forbidden(format!("the creator's identity is not valid: {e}")))?;
    identity
        .verify(&view.payload_bytes, &view.signature)
        .map_err(|e| forbidden(format!("the creator's signature is not valid: {e}")))?;
    config
        .authority
        .policies
        .is_satisfied_by(WRITERS_POLICY, &[identity])
        .map_err(|e| forbidden(e.to_string()))
}
