//! The records of a channel's Kafka partition, as pure functions: what an
//! orderer publishes for an admitted envelope or an expired batch timer,
//! and what a record read back means.
//!
//! Records are Fabric's `orderer.KafkaMessage`. A regular record's payload
//! is the whole envelope (Fabric 1.x, [`KafkaPayloads::Full`]) or, when
//! only IDs go through Kafka ([`KafkaPayloads::TxId`]), a
//! `weft.kafka.EnvelopeRef`: the TxID, the SHA-256 of the envelope and its
//! size, so that every orderer cuts the same blocks before it holds the
//! envelopes. A config envelope always travels whole: it is rare, and an
//! orderer must be able to apply it from the partition alone.

use bytes::Bytes;
use prost::Message;
use weft_protos::kafka::EnvelopeRef;
use weft_protos::orderer::kafka_message::Type;
use weft_protos::orderer::kafka_message_regular::Class;
use weft_protos::orderer::{
    KafkaMessage, KafkaMessageConnect, KafkaMessageRegular, KafkaMessageTimeToCut, KafkaMetadata,
};

use crate::config::KafkaPayloads;

/// The SHA-256 of an envelope's bytes: how an ID record names it.
pub(crate) type Digest = [u8; 32];

/// A normal envelope as its record carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The envelope itself.
    Envelope(Bytes),
    /// A reference to an envelope the orderers hold.
    Reference {
        tx_id: String,
        digest: Digest,
        size_bytes: u64,
    },
}

/// What one record of the partition means to the consenter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// A normal transaction to order, checked under `config_sequence`.
    Normal { entry: Entry, config_sequence: u64 },
    /// A CONFIG envelope, made under `config_sequence`.
    Config {
        envelope: Bytes,
        config_sequence: u64,
    },
    /// Cut block `block_number` if it is the next one and holds anything.
    TimeToCut { block_number: u64 },
    /// An orderer connected; nothing to order.
    Connect,
}

/// A record that cannot be read as one of the channel's: skipped by every
/// orderer alike.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable record: {0}")]
pub(crate) struct Unreadable(String);

/// The SHA-256 of `envelope`.
pub(crate) fn digest(envelope: &[u8]) -> Digest {
    let hash = ring::digest::digest(&ring::digest::SHA256, envelope);
    let mut digest = [0u8; 32];
    digest.copy_from_slice(hash.as_ref());
    digest
}

/// The record of a normal envelope, whole (Fabric 1.x).
pub(crate) fn envelope(envelope: Bytes, config_sequence: u64) -> Vec<u8> {
    regular(envelope, config_sequence, Class::Normal)
}

/// The record of a normal envelope by reference (TxID mode): its TxID,
/// the SHA-256 of its bytes and its size.
pub(crate) fn reference(
    tx_id: &str,
    digest: &Digest,
    size_bytes: u64,
    config_sequence: u64,
) -> Vec<u8> {
    let reference = EnvelopeRef {
        tx_id: tx_id.to_owned(),
        digest: Bytes::copy_from_slice(digest),
        size_bytes,
    };
    regular(
        reference.encode_to_vec().into(),
        config_sequence,
        Class::Normal,
    )
}

/// The record of a CONFIG envelope, whole in either mode.
pub(crate) fn config(envelope: Bytes, config_sequence: u64) -> Vec<u8> {
    regular(envelope, config_sequence, Class::Config)
}

/// The record that cuts block `block_number` once its batch timed out.
pub(crate) fn time_to_cut(block_number: u64) -> Vec<u8> {
    KafkaMessage {
        r#type: Some(Type::TimeToCut(KafkaMessageTimeToCut { block_number })),
    }
    .encode_to_vec()
}

/// The record an orderer posts when it connects (Fabric 1.x posts one
/// too): it proves the partition writable before the orderer serves.
pub(crate) fn connect() -> Vec<u8> {
    KafkaMessage {
        r#type: Some(Type::Connect(KafkaMessageConnect {
            payload: Bytes::new(),
        })),
    }
    .encode_to_vec()
}

fn regular(payload: Bytes, config_sequence: u64, class: Class) -> Vec<u8> {
    KafkaMessage {
        r#type: Some(Type::Regular(KafkaMessageRegular {
            payload,
            config_seq: config_sequence,
            class: class as i32,
            original_offset: 0,
        })),
    }
    .encode_to_vec()
}

/// Reads a record of a channel ordering in `payloads` mode.
pub(crate) fn read(payloads: KafkaPayloads, bytes: &[u8]) -> Result<Record, Unreadable> {
    let message =
        KafkaMessage::decode(bytes).map_err(|e| Unreadable(format!("not a KafkaMessage: {e}")))?;
    match message.r#type {
        Some(Type::Regular(regular)) => match Class::try_from(regular.class) {
            Ok(Class::Config) => Ok(Record::Config {
                envelope: regular.payload,
                config_sequence: regular.config_seq,
            }),
            // Fabric 1.x orderers before v1.1 wrote no class: normal.
            Ok(Class::Normal | Class::Unknown) => Ok(Record::Normal {
                entry: entry(payloads, regular.payload)?,
                config_sequence: regular.config_seq,
            }),
            Err(_) => Err(Unreadable(format!("unknown class {}", regular.class))),
        },
        Some(Type::TimeToCut(ttc)) => Ok(Record::TimeToCut {
            block_number: ttc.block_number,
        }),
        Some(Type::Connect(_)) => Ok(Record::Connect),
        None => Err(Unreadable("a KafkaMessage of no type".to_owned())),
    }
}

fn entry(payloads: KafkaPayloads, payload: Bytes) -> Result<Entry, Unreadable> {
    match payloads {
        KafkaPayloads::Full => Ok(Entry::Envelope(payload)),
        KafkaPayloads::TxId => {
            let reference = EnvelopeRef::decode(payload)
                .map_err(|e| Unreadable(format!("not an EnvelopeRef: {e}")))?;
            let digest = Digest::try_from(reference.digest.as_ref()).map_err(|_| {
                Unreadable(format!(
                    "an EnvelopeRef digest of {} bytes, not 32",
                    reference.digest.len()
                ))
            })?;
            Ok(Entry::Reference {
                tx_id: reference.tx_id,
                digest,
                size_bytes: reference.size_bytes,
            })
        }
    }
}

/// The consenter metadata of a block whose last record is at `offset`.
pub(crate) fn block_metadata(offset: i64) -> Bytes {
    KafkaMetadata {
        last_offset_persisted: offset,
        last_original_offset_processed: 0,
        last_resubmitted_config_offset: 0,
    }
    .encode_to_vec()
    .into()
}

/// The offset of the last record a block covers, from its consenter
/// metadata; `None` when the block records none (a genesis block, or a
/// block ordered by another consenter before a migration).
pub(crate) fn last_offset(consenter_metadata: &[u8]) -> Option<i64> {
    if consenter_metadata.is_empty() {
        return None;
    }
    KafkaMetadata::decode(consenter_metadata)
        .ok()
        .map(|metadata| metadata.last_offset_persisted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written_in_either_mode() {
        // Goal: what an orderer publishes reads back as the same record on
        // every orderer; an ID record carries the digest of the envelope
        // and never the envelope.
        let envelope = Bytes::from_static(b"an envelope's bytes");
        let full = super::envelope(envelope.clone(), 3);
        assert_eq!(
            read(KafkaPayloads::Full, &full).unwrap(),
            Record::Normal {
                entry: Entry::Envelope(envelope.clone()),
                config_sequence: 3
            }
        );
        let by_id = reference("tx1", &digest(&envelope), 19, 3);
        assert!(
            !by_id
                .windows(envelope.len())
                .any(|window| window == envelope.as_ref())
        );
        assert_eq!(
            read(KafkaPayloads::TxId, &by_id).unwrap(),
            Record::Normal {
                entry: Entry::Reference {
                    tx_id: "tx1".to_owned(),
                    digest: digest(&envelope),
                    size_bytes: 19
                },
                config_sequence: 3
            }
        );
        let config_record = config(envelope.clone(), 4);
        for payloads in [KafkaPayloads::Full, KafkaPayloads::TxId] {
            assert_eq!(
                read(payloads, &config_record).unwrap(),
                Record::Config {
                    envelope: envelope.clone(),
                    config_sequence: 4
                }
            );
        }
        assert_eq!(
            read(KafkaPayloads::TxId, &time_to_cut(9)).unwrap(),
            Record::TimeToCut { block_number: 9 }
        );
        assert_eq!(
            read(KafkaPayloads::Full, &connect()).unwrap(),
            Record::Connect
        );
    }

    #[test]
    fn unreadable_records_are_named() {
        // Goal: garbage on the partition is refused with a reason, never
        // ordered, whatever the mode.
        assert!(read(KafkaPayloads::Full, b"\xff\xff\xff").is_err());
        assert!(read(KafkaPayloads::Full, &[]).is_err());
        // A full envelope read by a channel that orders IDs.
        let full = super::envelope(Bytes::from_static(b"\x08\x01"), 0);
        assert!(read(KafkaPayloads::TxId, &full).is_err());
        let short = KafkaMessage {
            r#type: Some(Type::Regular(KafkaMessageRegular {
                payload: EnvelopeRef {
                    tx_id: "t".to_owned(),
                    digest: Bytes::from_static(b"short"),
                    size_bytes: 1,
                }
                .encode_to_vec()
                .into(),
                config_seq: 0,
                class: Class::Normal as i32,
                original_offset: 0,
            })),
        }
        .encode_to_vec();
        assert!(read(KafkaPayloads::TxId, &short).is_err());
    }

    #[test]
    fn block_metadata_records_the_offset_to_resume_after() {
        assert_eq!(last_offset(&block_metadata(41)), Some(41));
        assert_eq!(last_offset(&[]), None);
        assert_eq!(last_offset(b"\xff"), None);
    }
}
