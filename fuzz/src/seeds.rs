//! Each target's seed inputs, from the fixture network's real blocks and
//! keys: libFuzzer mutates these, so they decide how deep it starts.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message;
use weft_protos::common::{ConfigGroup, ConfigUpdate, ConfigValue, HeaderType};
use weft_protos::protos::chaincode_message::Type as MessageType;
use weft_protos::protos::{
    ChaincodeMessage, DelState, GetHistoryForKey, GetQueryResult, GetState, GetStateByRange,
    PutState, QueryMetadata, QueryStateNext,
};
use weft_protos::tx::seek_range;

use crate::*;
use std::path::PathBuf;

/// The seeds of `target`, one input each.
pub fn of(target: &str) -> Vec<Vec<u8>> {
    match target {
        "block" => fixture_blocks()
            .into_iter()
            .skip(1)
            .map(|block| block.encode_to_vec())
            .collect(),
        "envelope" => fixture_payloads().into_iter().map(Vec::from).collect(),
        "proposal" => [("k1", "v1"), ("", ""), ("a\u{0}b", "x")]
            .into_iter()
            .map(|(key, value)| kv_proposal(key, value).bytes.to_vec())
            .collect(),
        "proposal_response" => {
            let proposal = kv_proposal("k1", "v1");
            let one = kv_endorsement(&proposal, "k1", "v1");
            vec![
                encode_length_delimited(std::slice::from_ref(&one)),
                encode_length_delimited(&[one.clone(), one]),
            ]
        }
        "policy" => [
            "AND('Org1MSP.member', 'Org2MSP.peer')",
            "OR('Org1MSP.admin', AND('Org2MSP.client', 'Org3MSP.orderer'))",
            "OutOf(2, 'A.member', 'B.member', 'C.member')",
            "OR(AND('A.peer','B.peer'),OutOf(1,'C.admin'))",
        ]
        .into_iter()
        .map(|text| text.as_bytes().to_vec())
        .collect(),
        "signature" => {
            // Genuine signatures over a few messages, and one over nothing.
            [&b"a transaction's payload"[..], b"", &[0xff; 300]]
                .into_iter()
                .map(|message| {
                    let signature = user1().sign(message).unwrap();
                    let mut input = vec![u8::try_from(signature.len()).unwrap()];
                    input.extend_from_slice(&signature);
                    input.extend_from_slice(message);
                    input
                })
                .collect()
        }
        "identity" => fixture_payloads()
            .into_iter()
            .filter_map(|payload| {
                let payload = weft_protos::common::Payload::decode(payload).ok()?;
                let header =
                    weft_protos::common::SignatureHeader::decode(payload.header?.signature_header)
                        .ok()?;
                Some(header.creator.to_vec())
            })
            .collect(),
        "broadcast" => {
            let mut seeds: Vec<Vec<u8>> = fixture_envelopes()
                .into_iter()
                .skip(1)
                .map(Vec::from)
                .collect();
            seeds.push(config_update_envelope(&anchor_peer_update()).encode_to_vec());
            seeds
        }
        "config_update" => vec![anchor_peer_update(), no_op_update()],
        "seek" => {
            let positions = [(0, 0), (0, u64::MAX), (3, 7), (u64::MAX, u64::MAX)];
            positions
                .into_iter()
                .map(|(start, stop)| {
                    weft_protos::tx::signed_envelope(
                        HeaderType::DeliverSeekInfo,
                        CHANNEL,
                        seek_range(start, stop).encode_to_vec().into(),
                        user1().as_ref(),
                        Bytes::from_static(b"seek nonce"),
                        NOW,
                    )
                    .unwrap()
                    .encode_to_vec()
                })
                .collect()
        }
        "shim" => vec![shim_session()],
        "config_yaml" => config_files(),
        other => panic!("no seeds for target {other:?}"),
    }
}

/// A config update that gives Org1 anchor peers: the Org1 group read at
/// its version and written at the next.
fn anchor_peer_update() -> Vec<u8> {
    let (_, config) = weft_protos::block::config_of_block(genesis()).unwrap();
    let root = config.channel_group.unwrap();
    let application = &root.groups["Application"];
    let org1 = application.groups["Org1MSP"].clone();
    let mut written = org1.clone();
    written.version += 1;
    written.values.insert(
        "AnchorPeers".to_owned(),
        ConfigValue {
            version: 0,
            value: weft_protos::protos::AnchorPeers {
                anchor_peers: vec![weft_protos::protos::AnchorPeer {
                    host: "peer0.org1.example.com".to_owned(),
                    port: 7051,
                }],
            }
            .encode_to_vec()
            .into(),
            mod_policy: "Admins".to_owned(),
        },
    );
    let group = |org: ConfigGroup| ConfigGroup {
        version: root.version,
        groups: BTreeMap::from([(
            "Application".to_owned(),
            ConfigGroup {
                version: application.version,
                groups: BTreeMap::from([("Org1MSP".to_owned(), org)]),
                ..ConfigGroup::default()
            },
        )]),
        ..ConfigGroup::default()
    };
    ConfigUpdate {
        channel_id: CHANNEL.to_owned(),
        read_set: Some(group(ConfigGroup {
            version: org1.version,
            ..ConfigGroup::default()
        })),
        write_set: Some(group(written)),
        isolated_data: BTreeMap::new(),
    }
    .encode_to_vec()
}

/// A config update that reads and writes the whole config unchanged.
fn no_op_update() -> Vec<u8> {
    let (_, config) = weft_protos::block::config_of_block(genesis()).unwrap();
    let root = config.channel_group.unwrap();
    ConfigUpdate {
        channel_id: CHANNEL.to_owned(),
        read_set: Some(root.clone()),
        write_set: Some(root),
        isolated_data: BTreeMap::new(),
    }
    .encode_to_vec()
}

/// A chaincode's requests during one transaction: reads, writes, a range
/// query drained page by page, a paged range, history and a JSON query.
fn shim_session() -> Vec<u8> {
    let message = |kind: MessageType, payload: Vec<u8>| ChaincodeMessage {
        r#type: kind as i32,
        payload: payload.into(),
        txid: "tx1".to_owned(),
        channel_id: CHANNEL.to_owned(),
        ..ChaincodeMessage::default()
    };
    let get = |key: &str| GetState {
        key: key.to_owned(),
        collection: String::new(),
    };
    let range = |metadata: Bytes| GetStateByRange {
        start_key: "k".to_owned(),
        end_key: "l".to_owned(),
        collection: String::new(),
        metadata,
    };
    let messages = [
        message(MessageType::GetState, get("k001").encode_to_vec()),
        message(
            MessageType::PutState,
            PutState {
                key: "k002".to_owned(),
                value: Bytes::from_static(b"{\"size\":3}"),
                collection: String::new(),
            }
            .encode_to_vec(),
        ),
        message(
            MessageType::DelState,
            DelState {
                key: "k003".to_owned(),
                collection: String::new(),
            }
            .encode_to_vec(),
        ),
        message(
            MessageType::GetStateByRange,
            range(Bytes::new()).encode_to_vec(),
        ),
        message(
            MessageType::QueryStateNext,
            QueryStateNext { id: "1".to_owned() }.encode_to_vec(),
        ),
        message(
            MessageType::GetStateByRange,
            range(
                QueryMetadata {
                    page_size: 2,
                    bookmark: "k001".to_owned(),
                }
                .encode_to_vec()
                .into(),
            )
            .encode_to_vec(),
        ),
        message(
            MessageType::GetHistoryForKey,
            GetHistoryForKey {
                key: "k001".to_owned(),
            }
            .encode_to_vec(),
        ),
        message(
            MessageType::GetQueryResult,
            GetQueryResult {
                query: r#"{"selector":{"size":{"$gt":1}},"sort":[{"size":"desc"}],"limit":5}"#
                    .to_owned(),
                collection: String::new(),
                metadata: Bytes::new(),
            }
            .encode_to_vec(),
        ),
    ];
    encode_length_delimited(&messages)
}

/// The configuration files weft reads, each prefixed by the byte that
/// picks its reader in the `config_yaml` target.
fn config_files() -> Vec<Vec<u8>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = [
        (0u8, root.join("config/peer.yaml")),
        (1, root.join("config/orderer.yaml")),
        (2, root.join("config/channel.yaml")),
        (3, root.join("config/crypto.yaml")),
        (6, peer0_msp_folder().join("config.yaml")),
    ];
    files
        .into_iter()
        .filter_map(|(kind, path)| {
            let text = std::fs::read(&path).ok()?;
            Some([vec![kind], text].concat())
        })
        .collect()
}
