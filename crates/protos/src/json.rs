//! Fabric messages as JSON, with nested layers expanded.
//!
//! Output follows the protobuf JSON mapping with the original field names
//! (as Fabric's `configtxlator` prints them): 64-bit integers as strings,
//! enums by name, timestamps in RFC 3339, bytes in base64. On top of the
//! plain mapping, a `bytes` field that Fabric uses to carry another
//! serialized message (an envelope's payload, a config value, a signature
//! header's creator, a read/write set, …) is decoded and printed as that
//! message, so that a person can read a block top to bottom. A field whose
//! bytes do not decode as expected is printed as base64, never dropped.

use std::sync::OnceLock;

use base64::Engine as _;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage, Value,
};
use serde_json::{Map, Value as Json};

use crate::FILE_DESCRIPTOR_SET;

/// A message could not be rendered as JSON.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    #[error("unknown message type {0}")]
    UnknownMessage(String),
    #[error("bytes are not a valid {message}: {reason}")]
    Malformed { message: String, reason: String },
}

/// Renders the serialized message `full_name` (e.g. `common.Block`) as JSON.
pub fn to_json(full_name: &str, bytes: &[u8]) -> Result<Json, JsonError> {
    let descriptor = pool()
        .get_message_by_name(full_name)
        .ok_or_else(|| JsonError::UnknownMessage(full_name.to_owned()))?;
    let message = DynamicMessage::decode(descriptor, bytes).map_err(|e| JsonError::Malformed {
        message: full_name.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(render_message(&message, None))
}

/// Renders any generated message as JSON.
pub fn message_to_json<M: prost::Name>(message: &M) -> Result<Json, JsonError> {
    to_json(&M::full_name(), &message.encode_to_vec())
}

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        // The descriptor set is produced by our own build script from our own
        // schema; failing to read it is a build defect, not an input error.
        #[allow(clippy::expect_used)]
        DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("descriptor set built by build.rs")
    })
}

/// How the bytes of a field are to be read.
enum Expansion {
    Message(&'static str),
    Text,
    ValidationCodes,
    /// An entry of `BlockMetadata.metadata`, by its `BlockMetadataIndex`.
    BlockMetadataEntry(usize),
}

/// Renders a message; `key` is the map key it is stored under, if any, since
/// some Fabric messages (`ConfigValue`) are typed by that key.
fn render_message(message: &DynamicMessage, key: Option<&str>) -> Json {
    let descriptor = message.descriptor();
    if descriptor.full_name() == "google.protobuf.Timestamp" {
        return render_timestamp(message);
    }
    let mut object = Map::new();
    for (field, value) in message.fields() {
        let rendered = match value {
            Value::List(items) => Json::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| {
                        render_value(message, key, &field, item, Context::Index(index))
                    })
                    .collect(),
            ),
            Value::Map(entries) => {
                let mut keys: Vec<_> = entries.keys().collect();
                keys.sort_by_key(|key| map_key_string(key));
                let mut object = Map::new();
                for key in keys {
                    let key_string = map_key_string(key);
                    let rendered = render_value(
                        message,
                        None,
                        &field,
                        &entries[key],
                        Context::Key(&key_string),
                    );
                    object.insert(key_string, rendered);
                }
                Json::Object(object)
            }
            single => render_value(message, key, &field, single, Context::None),
        };
        object.insert(field.name().to_owned(), rendered);
    }
    Json::Object(object)
}

/// Where a value sits within its field: a list index or a map key.
#[derive(Clone, Copy)]
enum Context<'a> {
    None,
    Index(usize),
    Key(&'a str),
}

fn render_value(
    parent: &DynamicMessage,
    parent_key: Option<&str>,
    field: &FieldDescriptor,
    value: &Value,
    at: Context,
) -> Json {
    match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(n) => Json::from(*n),
        Value::U32(n) => Json::from(*n),
        Value::I64(n) => Json::String(n.to_string()),
        Value::U64(n) => Json::String(n.to_string()),
        Value::F32(n) => Json::from(f64::from(*n)),
        Value::F64(n) => Json::from(*n),
        Value::String(s) => Json::String(s.clone()),
        Value::EnumNumber(number) => render_enum(field, *number),
        Value::Message(message) => match at {
            Context::Key(key) => render_message(message, Some(key)),
            _ => render_message(message, None),
        },
        Value::Bytes(bytes) => render_bytes(parent, parent_key, field, bytes, at),
        Value::List(_) | Value::Map(_) => Json::Null,
    }
}

fn render_enum(field: &FieldDescriptor, number: i32) -> Json {
    let enum_descriptor = match field.kind() {
        Kind::Enum(descriptor) => Some(descriptor),
        Kind::Message(entry) if field.is_map() => match entry.map_entry_value_field().kind() {
            Kind::Enum(descriptor) => Some(descriptor),
            _ => None,
        },
        _ => None,
    };
    enum_descriptor
        .and_then(|descriptor| descriptor.get_value(number))
        .map_or_else(
            || Json::from(number),
            |value| Json::String(value.name().to_owned()),
        )
}

fn render_bytes(
    parent: &DynamicMessage,
    parent_key: Option<&str>,
    field: &FieldDescriptor,
    bytes: &[u8],
    at: Context,
) -> Json {
    let base64 = || Json::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    if bytes.is_empty() {
        return Json::String(String::new());
    }
    match expansion(parent, parent_key, field, at) {
        Some(Expansion::Message(name)) => to_json(name, bytes).unwrap_or_else(|_| base64()),
        Some(Expansion::Text) => std::str::from_utf8(bytes)
            .map(|text| Json::String(text.to_owned()))
            .unwrap_or_else(|_| base64()),
        Some(Expansion::ValidationCodes) => render_validation_codes(bytes),
        Some(Expansion::BlockMetadataEntry(index)) => {
            render_metadata_entry(index, bytes).unwrap_or_else(base64)
        }
        None if bytes.starts_with(b"-----BEGIN") => std::str::from_utf8(bytes)
            .map(|text| Json::String(text.to_owned()))
            .unwrap_or_else(|_| base64()),
        None => base64(),
    }
}

/// A `common.Metadata` entry of a block, with its `value` read according to
/// the slot it sits in: SIGNATURES holds `OrdererBlockMetadata`, the
/// deprecated LAST_CONFIG slot a `LastConfig`; other slots stay base64.
fn render_metadata_entry(index: usize, bytes: &[u8]) -> Option<Json> {
    let mut rendered = to_json("common.Metadata", bytes).ok()?;
    let value_type = match index {
        0 => "common.OrdererBlockMetadata",
        1 => "common.LastConfig",
        _ => return Some(rendered),
    };
    let metadata = crate::common::Metadata::decode(bytes).ok()?;
    if !metadata.value.is_empty()
        && let Ok(value) = to_json(value_type, &metadata.value)
    {
        rendered["value"] = value;
    }
    Some(rendered)
}

/// The TRANSACTIONS_FILTER metadata: one validation code per transaction.
fn render_validation_codes(bytes: &[u8]) -> Json {
    let codes = pool().get_enum_by_name("protos.TxValidationCode");
    Json::Array(
        bytes
            .iter()
            .map(|&code| {
                codes
                    .as_ref()
                    .and_then(|codes| codes.get_value(i32::from(code)))
                    .map_or_else(
                        || Json::from(code),
                        |value| Json::String(value.name().to_owned()),
                    )
            })
            .collect(),
    )
}

/// Which message (if any) a `bytes` field carries, by Fabric's conventions.
fn expansion(
    parent: &DynamicMessage,
    parent_key: Option<&str>,
    field: &FieldDescriptor,
    at: Context,
) -> Option<Expansion> {
    use Expansion::{BlockMetadataEntry, Message, Text, ValidationCodes};
    let owner = parent.descriptor();
    Some(match (owner.full_name(), field.name()) {
        ("common.Envelope", "payload") => Message("common.Payload"),
        ("common.Payload", "data") => return payload_data_type(parent).map(Message),
        ("common.Header", "channel_header") => Message("common.ChannelHeader"),
        ("common.Header", "signature_header") => Message("common.SignatureHeader"),
        ("protos.Proposal", "header") => Message("common.Header"),
        ("common.ChannelHeader", "extension") => {
            let endorser = int_field(parent, "type") == Some(3);
            return endorser.then_some(Message("protos.ChaincodeHeaderExtension"));
        }
        ("common.SignatureHeader", "creator") => Message("msp.SerializedIdentity"),
        ("msp.SerializedIdentity", "id_bytes") => Text,
        ("common.BlockData", "data") => Message("common.Envelope"),
        ("common.BlockMetadata", "metadata") => match at {
            Context::Index(2) => ValidationCodes,
            Context::Index(index) => BlockMetadataEntry(index),
            _ => return None,
        },
        ("common.MetadataSignature" | "common.ConfigSignature", "signature_header") => {
            Message("common.SignatureHeader")
        }
        ("common.MetadataSignature", "identifier_header") => Message("common.IdentifierHeader"),
        ("common.OrdererBlockMetadata", "consenter_metadata") => Message("etcdraft.BlockMetadata"),
        ("common.ConfigValue", "value") => {
            return parent_key.and_then(config_value_type).map(Message);
        }
        ("common.ConfigUpdateEnvelope", "config_update") => Message("common.ConfigUpdate"),
        ("common.Policy", "value") => {
            return match int_field(parent, "type") {
                Some(1) => Some(Message("common.SignaturePolicyEnvelope")),
                Some(3) => Some(Message("common.ImplicitMetaPolicy")),
                _ => None,
            };
        }
        ("msp.MSPConfig", "config") => {
            return (int_field(parent, "type").unwrap_or(0) == 0)
                .then_some(Message("msp.FabricMSPConfig"));
        }
        ("common.MSPPrincipal", "principal") => match int_field(parent, "principal_classification")
        {
            Some(0) | None => Message("common.MSPRole"),
            Some(1) => Message("common.OrganizationUnit"),
            Some(2) => Message("msp.SerializedIdentity"),
            _ => return None,
        },
        ("orderer.ConsensusType", "metadata") => {
            let raft = string_field(parent, "type").as_deref() == Some("etcdraft");
            return raft.then_some(Message("etcdraft.ConfigMetadata"));
        }
        ("protos.TransactionAction", "header") => Message("common.SignatureHeader"),
        ("protos.TransactionAction", "payload") => Message("protos.ChaincodeActionPayload"),
        ("protos.ChaincodeActionPayload", "chaincode_proposal_payload")
        | ("protos.Proposal", "payload") => Message("protos.ChaincodeProposalPayload"),
        ("protos.ChaincodeProposalPayload", "input") => Message("protos.ChaincodeInvocationSpec"),
        ("protos.ChaincodeEndorsedAction", "proposal_response_payload")
        | ("protos.ProposalResponse", "payload") => Message("protos.ProposalResponsePayload"),
        ("protos.ProposalResponsePayload", "extension") => Message("protos.ChaincodeAction"),
        ("protos.ChaincodeAction", "results") => Message("rwset.TxReadWriteSet"),
        ("protos.ChaincodeAction", "events") => Message("protos.ChaincodeEvent"),
        ("protos.Endorsement", "endorser") => Message("msp.SerializedIdentity"),
        ("protos.SignedProposal", "proposal_bytes") => Message("protos.Proposal"),
        ("protos.ChaincodeInput", "args") => return printable(parent, field, at).then_some(Text),
        ("rwset.NsReadWriteSet", "rwset") => Message("kvrwset.KVRWSet"),
        ("rwset.CollectionHashedReadWriteSet", "hashed_rwset") => Message("kvrwset.HashedRWSet"),
        ("kvrwset.KVWrite", "value") => return printable(parent, field, at).then_some(Text),
        _ => return None,
    })
}

/// The message in `Payload.data`, chosen by the channel header's type.
fn payload_data_type(payload: &DynamicMessage) -> Option<&'static str> {
    let header = payload.get_field_by_name("header")?;
    let channel_header_bytes = header.as_message()?.get_field_by_name("channel_header")?;
    let channel_header =
        crate::common::ChannelHeader::decode(channel_header_bytes.as_bytes()?.clone()).ok()?;
    match channel_header.r#type {
        1 => Some("common.ConfigEnvelope"),
        2 => Some("common.ConfigUpdateEnvelope"),
        3 => Some("protos.Transaction"),
        _ => None,
    }
}

/// The message in a `ConfigValue`, by the key it is stored under.
fn config_value_type(key: &str) -> Option<&'static str> {
    Some(match key {
        "MSP" => "msp.MSPConfig",
        "BatchSize" => "orderer.BatchSize",
        "BatchTimeout" => "orderer.BatchTimeout",
        "ConsensusType" => "orderer.ConsensusType",
        "ChannelRestrictions" => "orderer.ChannelRestrictions",
        "Capabilities" => "common.Capabilities",
        "HashingAlgorithm" => "common.HashingAlgorithm",
        "BlockDataHashingStructure" => "common.BlockDataHashingStructure",
        "OrdererAddresses" | "Endpoints" => "common.OrdererAddresses",
        "Consortium" => "common.Consortium",
        "AnchorPeers" => "protos.AnchorPeers",
        "ACLs" => "protos.ACLs",
        _ => return None,
    })
}

fn printable(parent: &DynamicMessage, field: &FieldDescriptor, at: Context) -> bool {
    let value = parent.get_field(field);
    let bytes = match (value.as_ref(), at) {
        (Value::List(items), Context::Index(index)) => items.get(index).and_then(Value::as_bytes),
        (single, _) => single.as_bytes(),
    };
    bytes.is_some_and(|bytes| {
        std::str::from_utf8(bytes)
            .is_ok_and(|text| text.chars().all(|c| !c.is_control() || c.is_whitespace()))
    })
}

fn int_field(message: &DynamicMessage, name: &str) -> Option<i64> {
    let value = message.get_field_by_name(name)?;
    match value.as_ref() {
        Value::I32(n) | Value::EnumNumber(n) => Some(i64::from(*n)),
        Value::U32(n) => Some(i64::from(*n)),
        Value::I64(n) => Some(*n),
        _ => None,
    }
}

fn string_field(message: &DynamicMessage, name: &str) -> Option<String> {
    message.get_field_by_name(name)?.as_str().map(str::to_owned)
}

fn map_key_string(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

fn render_timestamp(message: &DynamicMessage) -> Json {
    let seconds = int_field(message, "seconds").unwrap_or(0);
    let nanos = int_field(message, "nanos").unwrap_or(0);
    Json::String(format_rfc3339(seconds, nanos))
}

/// Formats seconds and nanoseconds since the Unix epoch as RFC 3339 in UTC,
/// with fractional seconds only when they are non-zero.
fn format_rfc3339(seconds: i64, nanos: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60,
    );
    let fraction = if nanos == 0 {
        String::new()
    } else {
        format!(".{:09}", nanos).trim_end_matches('0').to_owned()
    };
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}{fraction}Z")
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_format_as_rfc3339_utc() {
        assert_eq!(format_rfc3339(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_rfc3339(1_700_000_000, 123_000_000),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(format_rfc3339(951_782_400, 0), "2000-02-29T00:00:00Z");
    }
}
