//! Wire compatibility with Hyperledger Fabric's own JavaScript protobufs.
//!
//! `tests/js` builds five Fabric messages with `@hyperledger/fabric-protos`
//! (Fabric's generated google-protobuf code) and reduces each to a small
//! `summary` (see `tests/js/summary.js`). These tests prove both directions:
//! weft's prost types decode what Fabric's JavaScript writes, every nested
//! layer included, to the same summaries and re-encode it byte for byte; and
//! Fabric's JavaScript decodes what weft writes to the summaries weft
//! computes. The transaction id and block header hash are compared too.
//!
//! The summaries are computed by ONE Rust function per message kind
//! ([`decode`] then [`summarize`]), mirroring `summary.js`, and both
//! directions use it. Node.js and npm are required (CI installs them); the
//! tests fail, rather than skip, without them.
//!
//! `mango` checks weft's CouchDB JSON queries against PouchDB, which
//! implements CouchDB's query language.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/node.rs"]
mod node;

#[path = "fabric_compat/mango.rs"]
mod mango;

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bytes::Bytes;
use prost::Message;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use weft_protos::common::{
    Block, BlockData, BlockHeader, BlockMetadata, BlockMetadataIndex, ChannelHeader, Config,
    ConfigEnvelope, ConfigGroup, ConfigPolicy, ConfigValue, Envelope, Header, HeaderType,
    ImplicitMetaPolicy, LastConfig, Metadata, MetadataSignature, MspPrincipal, MspRole,
    OrdererBlockMetadata, Payload, Policy, SignatureHeader, SignaturePolicy,
    SignaturePolicyEnvelope, implicit_meta_policy, msp_principal, msp_role, policy,
    signature_policy,
};
use weft_protos::hash::{block_data_hash, block_header_hash, compute_tx_id};
use weft_protos::kvrwset::{KvRead, KvWrite, KvrwSet, Version};
use weft_protos::msp::{FabricMspConfig, MspConfig, SerializedIdentity};
use weft_protos::orderer::BatchSize;
use weft_protos::protos::{
    ChaincodeAction, ChaincodeActionPayload, ChaincodeEndorsedAction, ChaincodeEvent,
    ChaincodeHeaderExtension, ChaincodeId, ChaincodeInput, ChaincodeInvocationSpec,
    ChaincodeProposalPayload, ChaincodeSpec, Endorsement, Proposal, ProposalResponse,
    ProposalResponsePayload, Response, SignedProposal, Transaction, TransactionAction,
    chaincode_spec,
};
use weft_protos::rwset::{NsReadWriteSet, TxReadWriteSet, tx_read_write_set};

#[test]
fn weft_decodes_fabric_js_messages_to_the_same_summaries_and_bytes() {
    // Goal: for each of the five messages Fabric's JavaScript wrote, weft
    // decodes every nested layer that summary.js decodes (the same set of
    // layer names), computes the same summary, and re-encodes every layer to
    // exactly the bytes it was decoded from.
    let produced = produce();
    for kind in Kind::ALL {
        let name = kind.name();
        let bytes = read_bytes(&produced.path().join(format!("{name}.bin")));
        let json: serde_json::Value = read_json(&produced.path().join(format!("{name}.json")));

        let layers = decode(kind, &bytes);
        assert_eq!(
            layers.mismatches,
            Vec::<String>::new(),
            "{name}: layers that do not re-encode byte-identically"
        );
        let js_layers: BTreeSet<String> = json["layers"]
            .as_object()
            .unwrap_or_else(|| panic!("{name}.json: no `layers` object"))
            .keys()
            .cloned()
            .collect();
        let weft_layers: BTreeSet<String> = layers.names.iter().skip(1).cloned().collect();
        assert_eq!(
            weft_layers.len(),
            layers.names.len() - 1,
            "{name}: weft decoded a layer name twice: {:?}",
            layers.names
        );
        assert_eq!(weft_layers, js_layers, "{name}: nested layers decoded");
        assert!(!js_layers.is_empty(), "{name}: no nested layers");

        let expected = Summary::parse(kind, json["summary"].clone());
        assert_eq!(summarize(kind, &layers), expected, "{name}: summary");
    }

    // summaries.json is what consume.js would print for the same files.
    let all: BTreeMap<String, serde_json::Value> =
        read_json(&produced.path().join("summaries.json"));
    assert_eq!(all.len(), Kind::ALL.len(), "summaries.json entries");
    for kind in Kind::ALL {
        let bytes = read_bytes(&produced.path().join(format!("{}.bin", kind.name())));
        assert_eq!(
            summarize(kind, &decode(kind, &bytes)),
            Summary::parse(kind, all[kind.name()].clone()),
            "summaries.json: {}",
            kind.name()
        );
    }
}

#[test]
fn weft_hashes_match_fabric_js() {
    // Goal: weft's TxID (over the signed proposal's nonce and creator) and
    // block header hash equal the values Fabric's JavaScript computed, and
    // the JavaScript block's data hash is weft's block_data_hash.
    let produced = produce();
    let hashes: BTreeMap<String, String> = read_json(&produced.path().join("hashes.json"));

    let layers = decode(
        Kind::SignedProposal,
        &read_bytes(&produced.path().join("signed_proposal.bin")),
    );
    let signature_header: &SignatureHeader = layers.get("signatureHeader");
    let tx_id = compute_tx_id(&signature_header.nonce, &signature_header.creator);
    assert_eq!(tx_id, hashes["tx_id"], "signed_proposal: TxID");
    let channel_header: &ChannelHeader = layers.get("channelHeader");
    assert_eq!(
        channel_header.tx_id, tx_id,
        "signed_proposal: TxID in the channel header"
    );

    let block = Block::decode(read_bytes(&produced.path().join("block.bin"))).unwrap();
    let header = block.header.as_ref().expect("block header");
    assert_eq!(
        hex::encode(block_header_hash(header)),
        hashes["header_hash_hex"],
        "block: header hash"
    );
    assert_eq!(
        header.data_hash.as_ref(),
        block_data_hash(block.data.as_ref().expect("block data")),
        "block: data hash"
    );
}

#[test]
fn fabric_js_decodes_weft_messages_to_the_same_summaries() {
    // Goal: the other direction. weft builds the five kinds of message from
    // its own fixed values; Fabric's JavaScript (consume.js) decodes every
    // layer of each and reports the same summary that weft computes from
    // what it wrote, and google-protobuf re-encodes every layer to weft's
    // exact bytes (consume.js warns on stderr otherwise).
    let written = tempfile::tempdir().unwrap();
    let mut weft_summaries = BTreeMap::new();
    for kind in Kind::ALL {
        let bytes = build(kind);
        let summary = summarize(kind, &decode(kind, &bytes));
        assert_eq!(
            summary,
            expected_summary(kind),
            "{}: what weft built",
            kind.name()
        );
        std::fs::write(written.path().join(format!("{}.bin", kind.name())), &bytes).unwrap();
        weft_summaries.insert(kind.name(), summary);
    }

    let (stdout, stderr) = run_node("consume.js", written.path());
    assert!(
        !stderr.contains("warning"),
        "consume.js: google-protobuf does not re-encode weft's bytes identically:\n{stderr}"
    );
    let js: BTreeMap<String, serde_json::Value> = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("consume.js printed invalid JSON ({e}):\n{stdout}"));
    assert_eq!(
        js.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        weft_summaries.keys().copied().collect::<BTreeSet<_>>(),
        "consume.js summarised a different set of messages"
    );
    for kind in Kind::ALL {
        assert_eq!(
            Summary::parse(kind, js[kind.name()].clone()),
            weft_summaries[kind.name()],
            "{}: Fabric's JavaScript reads weft's bytes differently",
            kind.name()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The five messages and their summaries (the fields summary.js's SUMMARIZERS return)

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SignedProposal,
    ProposalResponse,
    EndorserTxEnvelope,
    ConfigEnvelope,
    Block,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::SignedProposal,
        Kind::ProposalResponse,
        Kind::EndorserTxEnvelope,
        Kind::ConfigEnvelope,
        Kind::Block,
    ];

    /// The file and JSON name, as summary.js's NAMES.
    fn name(self) -> &'static str {
        match self {
            Kind::SignedProposal => "signed_proposal",
            Kind::ProposalResponse => "proposal_response",
            Kind::EndorserTxEnvelope => "endorser_tx_envelope",
            Kind::ConfigEnvelope => "config_envelope",
            Kind::Block => "block",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignedProposalSummary {
    channel_id: String,
    tx_id: String,
    mspid: String,
    chaincode: String,
    args: Vec<String>,
    nonce_hex: String,
    signature_hex: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProposalResponseSummary {
    status: i32,
    payload_utf8: String,
    namespace: String,
    read_key: String,
    read_block: u64,
    read_tx: u64,
    write_keys: Vec<String>,
    event_name: String,
    endorser_mspid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndorserTxEnvelopeSummary {
    tx_id: String,
    channel_id: String,
    header_type: i32,
    n_actions: usize,
    n_endorsements: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigEnvelopeSummary {
    sequence: u64,
    groups: Vec<String>,
    org_msp_name: String,
    batch_max_message_count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockSummary {
    number: u64,
    previous_hash_hex: String,
    data_hash_hex: String,
    header_hash_hex: String,
    n_data: usize,
    filter_hex: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Summary {
    SignedProposal(SignedProposalSummary),
    ProposalResponse(ProposalResponseSummary),
    EndorserTxEnvelope(EndorserTxEnvelopeSummary),
    ConfigEnvelope(ConfigEnvelopeSummary),
    Block(BlockSummary),
}

impl Summary {
    /// A summary as JSON from produce.js or consume.js; unknown or missing
    /// fields are errors.
    fn parse(kind: Kind, json: serde_json::Value) -> Summary {
        fn typed<T: DeserializeOwned>(kind: Kind, json: serde_json::Value) -> T {
            serde_json::from_value(json)
                .unwrap_or_else(|e| panic!("{}: summary JSON: {e}", kind.name()))
        }
        match kind {
            Kind::SignedProposal => Summary::SignedProposal(typed(kind, json)),
            Kind::ProposalResponse => Summary::ProposalResponse(typed(kind, json)),
            Kind::EndorserTxEnvelope => Summary::EndorserTxEnvelope(typed(kind, json)),
            Kind::ConfigEnvelope => Summary::ConfigEnvelope(typed(kind, json)),
            Kind::Block => Summary::Block(typed(kind, json)),
        }
    }
}

/// The summary of an already decoded message, field for field as
/// summary.js's SUMMARIZERS compute it from the same layers.
fn summarize(kind: Kind, l: &Layers) -> Summary {
    match kind {
        Kind::SignedProposal => {
            let invocation: &ChaincodeInvocationSpec = l.get("invocationSpec");
            let spec = invocation.chaincode_spec.as_ref().expect("chaincode_spec");
            let channel_header: &ChannelHeader = l.get("channelHeader");
            let signature_header: &SignatureHeader = l.get("signatureHeader");
            let signed_proposal: &SignedProposal = l.get("signedProposal");
            Summary::SignedProposal(SignedProposalSummary {
                channel_id: channel_header.channel_id.clone(),
                tx_id: channel_header.tx_id.clone(),
                mspid: l.get::<SerializedIdentity>("creator").mspid.clone(),
                chaincode: spec
                    .chaincode_id
                    .as_ref()
                    .expect("chaincode_id")
                    .name
                    .clone(),
                args: spec
                    .input
                    .as_ref()
                    .expect("chaincode input")
                    .args
                    .iter()
                    .map(|arg| utf8(arg))
                    .collect(),
                nonce_hex: hex::encode(&signature_header.nonce),
                signature_hex: hex::encode(&signed_proposal.signature),
            })
        }
        Kind::ProposalResponse => {
            let response = l
                .get::<ProposalResponse>("proposalResponse")
                .response
                .as_ref()
                .expect("response");
            let ns = l
                .get::<TxReadWriteSet>("results")
                .ns_rwset
                .first()
                .expect("ns_rwset[0]");
            let kv: &KvrwSet = l.get("results.nsRwset[0].rwset");
            let read = kv.reads.first().expect("reads[0]");
            let version = read.version.as_ref().expect("read version");
            Summary::ProposalResponse(ProposalResponseSummary {
                status: response.status,
                payload_utf8: utf8(&response.payload),
                namespace: ns.namespace.clone(),
                read_key: read.key.clone(),
                read_block: version.block_num,
                read_tx: version.tx_num,
                write_keys: kv.writes.iter().map(|w| w.key.clone()).collect(),
                event_name: l.get::<ChaincodeEvent>("events").event_name.clone(),
                endorser_mspid: l.get::<SerializedIdentity>("endorser").mspid.clone(),
            })
        }
        Kind::EndorserTxEnvelope => {
            let channel_header: &ChannelHeader = l.get("channelHeader");
            let actions = &l.get::<Transaction>("transaction").actions;
            let n_endorsements = (0..actions.len())
                .map(|i| {
                    let payload: &ChaincodeActionPayload =
                        l.get(&format!("actions[{i}].actionPayload"));
                    payload.action.as_ref().expect("action").endorsements.len()
                })
                .sum();
            Summary::EndorserTxEnvelope(EndorserTxEnvelopeSummary {
                tx_id: channel_header.tx_id.clone(),
                channel_id: channel_header.channel_id.clone(),
                header_type: channel_header.r#type,
                n_actions: actions.len(),
                n_endorsements,
            })
        }
        Kind::ConfigEnvelope => {
            let config = l
                .get::<ConfigEnvelope>("configEnvelope")
                .config
                .as_ref()
                .expect("config");
            let groups = &config.channel_group.as_ref().expect("channel_group").groups;
            let application = groups.get("Application").expect("Application group");
            let org = application
                .groups
                .keys()
                .next()
                .expect("an Application org group");
            Summary::ConfigEnvelope(ConfigEnvelopeSummary {
                sequence: config.sequence,
                // A BTreeMap's keys are already sorted, as summary.js sorts them.
                groups: groups.keys().cloned().collect(),
                org_msp_name: l
                    .get::<FabricMspConfig>(&format!("Channel/Application/{org}/values/MSP/config"))
                    .name
                    .clone(),
                batch_max_message_count: l
                    .get::<BatchSize>("Channel/Orderer/values/BatchSize")
                    .max_message_count,
            })
        }
        Kind::Block => {
            let block: &Block = l.get("block");
            let header = block.header.as_ref().expect("block header");
            let metadata = &block.metadata.as_ref().expect("block metadata").metadata;
            Summary::Block(BlockSummary {
                number: header.number,
                previous_hash_hex: hex::encode(&header.previous_hash),
                data_hash_hex: hex::encode(&header.data_hash),
                header_hash_hex: hex::encode(block_header_hash(header)),
                n_data: block.data.as_ref().expect("block data").data.len(),
                filter_hex: metadata
                    .get(BlockMetadataIndex::TransactionsFilter as usize)
                    .map(hex::encode)
                    .unwrap_or_default(),
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What weft builds for the other direction: its own fixed values, none shared with produce.js

const CHANNEL_ID: &str = "weft-compat";
const CHAINCODE: &str = "assets";
const ARGS: [&str; 4] = ["transfer", "asset7", "alice", "bob"];
const CREATOR_MSP: &str = "Org2MSP";
const ENDORSER_MSPS: [&str; 3] = ["Org2MSP", "Org3MSP", "Org1MSP"];
const BLOCK_NUMBER: u64 = 42;
const TRANSACTIONS_FILTER: [u8; 3] = [0, 11, 0];

/// Builds the message `kind` with weft's types and encoding.
fn build(kind: Kind) -> Bytes {
    let bytes = match kind {
        Kind::SignedProposal => build_signed_proposal(),
        Kind::ProposalResponse => build_proposal_response(),
        Kind::EndorserTxEnvelope => build_endorser_tx_envelope(&nonce(0)),
        Kind::ConfigEnvelope => build_config_envelope(),
        Kind::Block => build_block(),
    };
    bytes.into()
}

/// The summary of what [`build`] writes, stated from the inputs.
fn expected_summary(kind: Kind) -> Summary {
    let tx_id = compute_tx_id(&nonce(0), &creator());
    match kind {
        Kind::SignedProposal => Summary::SignedProposal(SignedProposalSummary {
            channel_id: CHANNEL_ID.to_owned(),
            tx_id,
            mspid: CREATOR_MSP.to_owned(),
            chaincode: CHAINCODE.to_owned(),
            args: ARGS.map(str::to_owned).to_vec(),
            nonce_hex: hex::encode(nonce(0)),
            signature_hex: hex::encode(fixed_bytes(71, 0xa1)),
        }),
        Kind::ProposalResponse => Summary::ProposalResponse(ProposalResponseSummary {
            status: 200,
            payload_utf8: "moved asset7 to bob".to_owned(),
            namespace: CHAINCODE.to_owned(),
            read_key: "asset7".to_owned(),
            read_block: 1234,
            read_tx: 56,
            write_keys: vec!["asset7".to_owned(), "owner~alice~asset7".to_owned()],
            event_name: "AssetTransferred".to_owned(),
            endorser_mspid: ENDORSER_MSPS[0].to_owned(),
        }),
        Kind::EndorserTxEnvelope => Summary::EndorserTxEnvelope(EndorserTxEnvelopeSummary {
            tx_id,
            channel_id: CHANNEL_ID.to_owned(),
            header_type: HeaderType::EndorserTransaction as i32,
            n_actions: 1,
            n_endorsements: ENDORSER_MSPS.len(),
        }),
        Kind::ConfigEnvelope => Summary::ConfigEnvelope(ConfigEnvelopeSummary {
            sequence: 9,
            groups: vec![
                "Application".to_owned(),
                "Consortiums".to_owned(),
                "Orderer".to_owned(),
            ],
            org_msp_name: CREATOR_MSP.to_owned(),
            batch_max_message_count: 500,
        }),
        Kind::Block => {
            let data: Vec<Bytes> = (0..3)
                .map(|i| build_endorser_tx_envelope(&nonce(i)).into())
                .collect();
            let header = BlockHeader {
                number: BLOCK_NUMBER,
                previous_hash: previous_hash(),
                data_hash: block_data_hash(&BlockData { data: data.clone() })
                    .to_vec()
                    .into(),
            };
            Summary::Block(BlockSummary {
                number: BLOCK_NUMBER,
                previous_hash_hex: hex::encode(previous_hash()),
                data_hash_hex: hex::encode(&header.data_hash),
                header_hash_hex: hex::encode(block_header_hash(&header)),
                n_data: data.len(),
                filter_hex: hex::encode(TRANSACTIONS_FILTER),
            })
        }
    }
}

fn build_signed_proposal() -> Vec<u8> {
    let proposal = Proposal {
        header: endorser_header(&nonce(0)).encode_to_vec().into(),
        payload: chaincode_proposal_payload(),
        extension: Bytes::new(),
    };
    SignedProposal {
        proposal_bytes: proposal.encode_to_vec().into(),
        signature: fixed_bytes(71, 0xa1),
    }
    .encode_to_vec()
}

fn build_proposal_response() -> Vec<u8> {
    ProposalResponse {
        version: 1,
        timestamp: Some(timestamp()),
        response: Some(ok_response()),
        payload: proposal_response_payload(&nonce(0)),
        endorsement: Some(endorsement(0)),
        interest: None,
    }
    .encode_to_vec()
}

fn build_endorser_tx_envelope(nonce: &Bytes) -> Vec<u8> {
    let action_payload = ChaincodeActionPayload {
        chaincode_proposal_payload: chaincode_proposal_payload(),
        action: Some(ChaincodeEndorsedAction {
            proposal_response_payload: proposal_response_payload(nonce),
            endorsements: (0..ENDORSER_MSPS.len()).map(endorsement).collect(),
        }),
    };
    let transaction = Transaction {
        actions: vec![TransactionAction {
            header: signature_header(nonce).encode_to_vec().into(),
            payload: action_payload.encode_to_vec().into(),
        }],
    };
    let payload = Payload {
        header: Some(endorser_header(nonce)),
        data: transaction.encode_to_vec().into(),
    };
    Envelope {
        payload: payload.encode_to_vec().into(),
        signature: fixed_bytes(72, 0xb2),
    }
    .encode_to_vec()
}

fn build_config_envelope() -> Vec<u8> {
    let role = MspRole {
        msp_identifier: CREATOR_MSP.to_owned(),
        role: msp_role::MspRoleType::Admin as i32,
    };
    let admins = SignaturePolicyEnvelope {
        version: 0,
        rule: Some(SignaturePolicy {
            r#type: Some(signature_policy::Type::NOutOf(signature_policy::NOutOf {
                n: 1,
                rules: vec![SignaturePolicy {
                    r#type: Some(signature_policy::Type::SignedBy(0)),
                }],
            })),
        }),
        identities: vec![MspPrincipal {
            principal_classification: msp_principal::Classification::Role as i32,
            principal: role.encode_to_vec().into(),
        }],
    };
    let msp = MspConfig {
        r#type: 0,
        config: FabricMspConfig {
            name: CREATOR_MSP.to_owned(),
            root_certs: vec![pem("ca.org2.weft.test")],
            ..FabricMspConfig::default()
        }
        .encode_to_vec()
        .into(),
    };
    let org = ConfigGroup {
        values: BTreeMap::from([("MSP".to_owned(), config_value(msp.encode_to_vec()))]),
        policies: BTreeMap::from([(
            "Admins".to_owned(),
            config_policy(policy::PolicyType::Signature, admins.encode_to_vec()),
        )]),
        mod_policy: "Admins".to_owned(),
        ..ConfigGroup::default()
    };
    let batch_size = BatchSize {
        max_message_count: 500,
        absolute_max_bytes: 10 * 1024 * 1024,
        preferred_max_bytes: 2 * 1024 * 1024,
    };
    let majority_admins = ImplicitMetaPolicy {
        sub_policy: "Admins".to_owned(),
        rule: implicit_meta_policy::Rule::Majority as i32,
    };
    // Every map value is non-default: google-protobuf writes a default map
    // value explicitly and prost omits it, which consume.js would report.
    let channel_group = ConfigGroup {
        version: 2,
        groups: BTreeMap::from([
            (
                "Application".to_owned(),
                ConfigGroup {
                    groups: BTreeMap::from([(CREATOR_MSP.to_owned(), org)]),
                    mod_policy: "Admins".to_owned(),
                    ..ConfigGroup::default()
                },
            ),
            (
                "Consortiums".to_owned(),
                ConfigGroup {
                    mod_policy: "/Channel/Orderer/Admins".to_owned(),
                    ..ConfigGroup::default()
                },
            ),
            (
                "Orderer".to_owned(),
                ConfigGroup {
                    values: BTreeMap::from([(
                        "BatchSize".to_owned(),
                        config_value(batch_size.encode_to_vec()),
                    )]),
                    mod_policy: "Admins".to_owned(),
                    ..ConfigGroup::default()
                },
            ),
        ]),
        policies: BTreeMap::from([(
            "Admins".to_owned(),
            config_policy(
                policy::PolicyType::ImplicitMeta,
                majority_admins.encode_to_vec(),
            ),
        )]),
        mod_policy: "Admins".to_owned(),
        ..ConfigGroup::default()
    };
    let last_update = Envelope {
        payload: Payload {
            header: Some(Header {
                channel_header: channel_header(HeaderType::ConfigUpdate, "", Bytes::new())
                    .encode_to_vec()
                    .into(),
                signature_header: signature_header(&nonce(7)).encode_to_vec().into(),
            }),
            data: fixed_bytes(40, 0xc3),
        }
        .encode_to_vec()
        .into(),
        signature: fixed_bytes(70, 0xc4),
    };
    let config_envelope = ConfigEnvelope {
        config: Some(Config {
            sequence: 9,
            channel_group: Some(channel_group),
        }),
        last_update: Some(last_update),
    };
    let payload = Payload {
        header: Some(Header {
            channel_header: channel_header(HeaderType::Config, "", Bytes::new())
                .encode_to_vec()
                .into(),
            signature_header: orderer_signature_header().encode_to_vec().into(),
        }),
        data: config_envelope.encode_to_vec().into(),
    };
    Envelope {
        payload: payload.encode_to_vec().into(),
        signature: fixed_bytes(71, 0xc5),
    }
    .encode_to_vec()
}

fn build_block() -> Vec<u8> {
    let data = BlockData {
        data: (0..3)
            .map(|i| build_endorser_tx_envelope(&nonce(i)).into())
            .collect(),
    };
    let header = BlockHeader {
        number: BLOCK_NUMBER,
        previous_hash: previous_hash(),
        data_hash: block_data_hash(&data).to_vec().into(),
    };
    let signatures = Metadata {
        value: OrdererBlockMetadata {
            last_config: Some(LastConfig { index: 40 }),
            consenter_metadata: fixed_bytes(9, 0xd1),
        }
        .encode_to_vec()
        .into(),
        signatures: vec![MetadataSignature {
            signature_header: orderer_signature_header().encode_to_vec().into(),
            signature: fixed_bytes(70, 0xd2),
            identifier_header: Bytes::new(),
        }],
    };
    let mut metadata = vec![Bytes::new(); 5];
    metadata[BlockMetadataIndex::Signatures as usize] = signatures.encode_to_vec().into();
    metadata[BlockMetadataIndex::TransactionsFilter as usize] =
        Bytes::from_static(&TRANSACTIONS_FILTER);
    Block {
        header: Some(header),
        data: Some(data),
        metadata: Some(BlockMetadata { metadata }),
    }
    .encode_to_vec()
}

// ---------------------------------------------------------------------------------------------
// Helpers: decoding layer by layer, as summary.js does

/// Every message decoded from one input, by the layer names summary.js uses,
/// with the names of the layers whose re-encoding differs from their bytes.
#[derive(Default)]
struct Layers {
    /// In decoding order; the first is the whole message.
    names: Vec<String>,
    messages: BTreeMap<String, Box<dyn Any>>,
    mismatches: Vec<String>,
}

impl Layers {
    /// Decodes `bytes` as `M` under `name`, noting whether it re-encodes
    /// byte-identically, and returns it.
    fn take<M: Message + Default + Clone + 'static>(&mut self, name: &str, bytes: &Bytes) -> M {
        let message = M::decode(bytes.clone()).unwrap_or_else(|e| panic!("layer {name}: {e}"));
        if message.encode_to_vec() != bytes.as_ref() {
            self.mismatches.push(name.to_owned());
        }
        self.names.push(name.to_owned());
        self.messages
            .insert(name.to_owned(), Box::new(message.clone()));
        message
    }

    /// The layer `name`, which must have been decoded as `M`.
    fn get<M: 'static>(&self, name: &str) -> &M {
        self.messages
            .get(name)
            .unwrap_or_else(|| panic!("missing layer {name}"))
            .downcast_ref()
            .unwrap_or_else(|| panic!("layer {name} has another type"))
    }
}

/// Decodes the message `kind` and every nested layer summary.js decodes.
fn decode(kind: Kind, bytes: &Bytes) -> Layers {
    let mut d = Layers::default();
    match kind {
        Kind::SignedProposal => {
            let signed: SignedProposal = d.take("signedProposal", bytes);
            let proposal: Proposal = d.take("proposal", &signed.proposal_bytes);
            let header: Header = d.take("header", &proposal.header);
            decode_header_layers(&mut d, "", &header);
            decode_proposal_payload_layers(&mut d, "", &proposal.payload);
        }
        Kind::ProposalResponse => {
            let response: ProposalResponse = d.take("proposalResponse", bytes);
            decode_proposal_response_payload_layers(&mut d, "", &response.payload);
            let endorsement = response.endorsement.as_ref().expect("endorsement");
            d.take::<SerializedIdentity>("endorser", &endorsement.endorser);
        }
        Kind::EndorserTxEnvelope | Kind::ConfigEnvelope => {
            decode_envelope_layers(&mut d, "", bytes);
        }
        Kind::Block => {
            let block: Block = d.take("block", bytes);
            assert!(block.header.is_some(), "block header");
            for (i, entry) in block
                .data
                .as_ref()
                .expect("block data")
                .data
                .iter()
                .enumerate()
            {
                decode_envelope_layers(&mut d, &format!("data[{i}]."), entry);
            }
            let metadata = &block.metadata.as_ref().expect("block metadata").metadata;
            if let Some(signatures) = metadata
                .get(BlockMetadataIndex::Signatures as usize)
                .filter(|s| !s.is_empty())
            {
                let signatures: Metadata = d.take("metadata[SIGNATURES]", signatures);
                d.take::<OrdererBlockMetadata>("metadata[SIGNATURES].value", &signatures.value);
                for (i, signature) in signatures.signatures.iter().enumerate() {
                    d.take::<SignatureHeader>(
                        &format!("metadata[SIGNATURES].signatures[{i}].signatureHeader"),
                        &signature.signature_header,
                    );
                }
            }
        }
    }
    d
}

fn decode_header_layers(d: &mut Layers, prefix: &str, header: &Header) {
    let channel_header: ChannelHeader =
        d.take(&format!("{prefix}channelHeader"), &header.channel_header);
    if channel_header.r#type == HeaderType::EndorserTransaction as i32
        && !channel_header.extension.is_empty()
    {
        d.take::<ChaincodeHeaderExtension>(
            &format!("{prefix}chaincodeHeaderExtension"),
            &channel_header.extension,
        );
    }
    let signature_header: SignatureHeader = d.take(
        &format!("{prefix}signatureHeader"),
        &header.signature_header,
    );
    d.take::<SerializedIdentity>(&format!("{prefix}creator"), &signature_header.creator);
}

fn decode_proposal_payload_layers(d: &mut Layers, prefix: &str, bytes: &Bytes) {
    let payload: ChaincodeProposalPayload = d.take(&format!("{prefix}proposalPayload"), bytes);
    d.take::<ChaincodeInvocationSpec>(&format!("{prefix}invocationSpec"), &payload.input);
}

fn decode_proposal_response_payload_layers(d: &mut Layers, prefix: &str, bytes: &Bytes) {
    let payload: ProposalResponsePayload =
        d.take(&format!("{prefix}proposalResponsePayload"), bytes);
    let action: ChaincodeAction = d.take(&format!("{prefix}chaincodeAction"), &payload.extension);
    let results: TxReadWriteSet = d.take(&format!("{prefix}results"), &action.results);
    for (i, ns) in results.ns_rwset.iter().enumerate() {
        d.take::<KvrwSet>(&format!("{prefix}results.nsRwset[{i}].rwset"), &ns.rwset);
    }
    if !action.events.is_empty() {
        d.take::<ChaincodeEvent>(&format!("{prefix}events"), &action.events);
    }
}

fn decode_transaction_layers(d: &mut Layers, prefix: &str, bytes: &Bytes) {
    let transaction: Transaction = d.take(&format!("{prefix}transaction"), bytes);
    for (i, action) in transaction.actions.iter().enumerate() {
        let p = format!("{prefix}actions[{i}].");
        let signature_header: SignatureHeader =
            d.take(&format!("{p}signatureHeader"), &action.header);
        d.take::<SerializedIdentity>(&format!("{p}creator"), &signature_header.creator);
        let action_payload: ChaincodeActionPayload =
            d.take(&format!("{p}actionPayload"), &action.payload);
        decode_proposal_payload_layers(d, &p, &action_payload.chaincode_proposal_payload);
        let endorsed = action_payload
            .action
            .as_ref()
            .expect("actionPayload.action");
        decode_proposal_response_payload_layers(d, &p, &endorsed.proposal_response_payload);
        for (j, endorsement) in endorsed.endorsements.iter().enumerate() {
            d.take::<SerializedIdentity>(
                &format!("{p}endorsements[{j}].endorser"),
                &endorsement.endorser,
            );
        }
    }
}

/// The values and policies the config tree holds as bytes (those the test uses).
fn decode_config_group_layers(d: &mut Layers, prefix: &str, group: &ConfigGroup) {
    for (key, value) in &group.values {
        let p = format!("{prefix}/values/{key}");
        match key.as_str() {
            "MSP" => {
                let msp: MspConfig = d.take(&p, &value.value);
                if msp.r#type == 0 {
                    d.take::<FabricMspConfig>(&format!("{p}/config"), &msp.config);
                }
            }
            "BatchSize" => {
                d.take::<BatchSize>(&p, &value.value);
            }
            _ => {}
        }
    }
    for (key, config_policy) in &group.policies {
        let p = format!("{prefix}/policies/{key}");
        let policy = config_policy.policy.as_ref().expect("policy");
        if policy.r#type == policy::PolicyType::Signature as i32 {
            let envelope: SignaturePolicyEnvelope = d.take(&p, &policy.value);
            for (i, principal) in envelope.identities.iter().enumerate() {
                if principal.principal_classification == msp_principal::Classification::Role as i32
                {
                    d.take::<MspRole>(&format!("{p}/identities[{i}]"), &principal.principal);
                }
            }
        } else if policy.r#type == policy::PolicyType::ImplicitMeta as i32 {
            d.take::<ImplicitMetaPolicy>(&p, &policy.value);
        }
    }
    for (key, child) in &group.groups {
        decode_config_group_layers(d, &format!("{prefix}/{key}"), child);
    }
}

fn decode_config_layers(d: &mut Layers, prefix: &str, bytes: &Bytes) {
    let config_envelope: ConfigEnvelope = d.take(&format!("{prefix}configEnvelope"), bytes);
    let config = config_envelope.config.as_ref().expect("config");
    let channel_group = config.channel_group.as_ref().expect("channel_group");
    decode_config_group_layers(d, &format!("{prefix}Channel"), channel_group);
    if let Some(last_update) = &config_envelope.last_update {
        d.take::<Payload>(&format!("{prefix}lastUpdate.payload"), &last_update.payload);
    }
}

/// Any envelope; the payload's data is decoded by the channel header's type.
fn decode_envelope_layers(d: &mut Layers, prefix: &str, bytes: &Bytes) {
    let envelope: Envelope = d.take(&format!("{prefix}envelope"), bytes);
    let payload: Payload = d.take(&format!("{prefix}payload"), &envelope.payload);
    decode_header_layers(d, prefix, payload.header.as_ref().expect("payload header"));
    let header_type = d
        .get::<ChannelHeader>(&format!("{prefix}channelHeader"))
        .r#type;
    if header_type == HeaderType::EndorserTransaction as i32 {
        decode_transaction_layers(d, prefix, &payload.data);
    } else if header_type == HeaderType::Config as i32 {
        decode_config_layers(d, prefix, &payload.data);
    }
}

/// summary.js's utf8(): invalid sequences become U+FFFD.
fn utf8(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Helpers: weft's building blocks

/// `length` bytes of a fixed pattern; `seed` tells patterns apart.
fn fixed_bytes(length: usize, seed: u8) -> Bytes {
    (0..length)
        .map(|i| {
            seed.wrapping_mul(3)
                .wrapping_add((i as u8).wrapping_mul(13))
        })
        .collect::<Vec<u8>>()
        .into()
}

fn nonce(index: u8) -> Bytes {
    fixed_bytes(24, 0x10 + index)
}

fn previous_hash() -> Bytes {
    fixed_bytes(32, 0xe7)
}

/// A fixed, PEM-looking certificate (never parsed as X.509 here).
fn pem(label: &str) -> Bytes {
    let body: String = format!("weft compat certificate for {label}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n").into()
}

fn serialized_identity(msp_id: &str, label: &str) -> Bytes {
    SerializedIdentity {
        mspid: msp_id.to_owned(),
        id_bytes: pem(label),
    }
    .encode_to_vec()
    .into()
}

fn creator() -> Bytes {
    serialized_identity(CREATOR_MSP, "Client7@org2.weft.test")
}

fn timestamp() -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: 1_800_000_123,
        nanos: 456_789_000,
    }
}

fn signature_header(nonce: &Bytes) -> SignatureHeader {
    SignatureHeader {
        creator: creator(),
        nonce: nonce.clone(),
    }
}

fn orderer_signature_header() -> SignatureHeader {
    SignatureHeader {
        creator: serialized_identity("OrdererMSP", "orderer1.weft.test"),
        nonce: fixed_bytes(24, 0x77),
    }
}

fn channel_header(header_type: HeaderType, tx_id: &str, extension: Bytes) -> ChannelHeader {
    ChannelHeader {
        r#type: header_type as i32,
        version: 0,
        timestamp: Some(timestamp()),
        channel_id: CHANNEL_ID.to_owned(),
        tx_id: tx_id.to_owned(),
        epoch: 0,
        extension,
        tls_cert_hash: Bytes::new(),
    }
}

fn chaincode_id(version: &str) -> ChaincodeId {
    ChaincodeId {
        path: String::new(),
        name: CHAINCODE.to_owned(),
        version: version.to_owned(),
    }
}

fn endorser_header(nonce: &Bytes) -> Header {
    let extension = ChaincodeHeaderExtension {
        chaincode_id: Some(chaincode_id("")),
    };
    let tx_id = compute_tx_id(nonce, &creator());
    Header {
        channel_header: channel_header(
            HeaderType::EndorserTransaction,
            &tx_id,
            extension.encode_to_vec().into(),
        )
        .encode_to_vec()
        .into(),
        signature_header: signature_header(nonce).encode_to_vec().into(),
    }
}

fn chaincode_proposal_payload() -> Bytes {
    let invocation = ChaincodeInvocationSpec {
        chaincode_spec: Some(ChaincodeSpec {
            r#type: chaincode_spec::Type::Golang as i32,
            chaincode_id: Some(chaincode_id("")),
            input: Some(ChaincodeInput {
                args: ARGS
                    .iter()
                    .map(|arg| Bytes::from_static(arg.as_bytes()))
                    .collect(),
                ..ChaincodeInput::default()
            }),
            timeout: 0,
        }),
    };
    ChaincodeProposalPayload {
        input: invocation.encode_to_vec().into(),
        transient_map: BTreeMap::new(),
    }
    .encode_to_vec()
    .into()
}

fn ok_response() -> Response {
    Response {
        status: 200,
        message: String::new(),
        payload: Bytes::from_static(b"moved asset7 to bob"),
    }
}

fn proposal_response_payload(nonce: &Bytes) -> Bytes {
    let kv = KvrwSet {
        reads: vec![KvRead {
            key: "asset7".to_owned(),
            version: Some(Version {
                block_num: 1234,
                tx_num: 56,
            }),
        }],
        writes: vec![
            KvWrite {
                key: "asset7".to_owned(),
                is_delete: false,
                value: Bytes::from_static(br#"{"owner":"bob"}"#),
            },
            KvWrite {
                key: "owner~alice~asset7".to_owned(),
                is_delete: true,
                value: Bytes::new(),
            },
        ],
        ..KvrwSet::default()
    };
    let results = TxReadWriteSet {
        data_model: tx_read_write_set::DataModel::Kv as i32,
        ns_rwset: vec![NsReadWriteSet {
            namespace: CHAINCODE.to_owned(),
            rwset: kv.encode_to_vec().into(),
            collection_hashed_rwset: Vec::new(),
        }],
    };
    let event = ChaincodeEvent {
        chaincode_id: CHAINCODE.to_owned(),
        tx_id: compute_tx_id(nonce, &creator()),
        event_name: "AssetTransferred".to_owned(),
        payload: Bytes::from_static(b"asset7"),
    };
    let action = ChaincodeAction {
        results: results.encode_to_vec().into(),
        events: event.encode_to_vec().into(),
        response: Some(ok_response()),
        chaincode_id: Some(chaincode_id("2.1")),
    };
    ProposalResponsePayload {
        proposal_hash: fixed_bytes(32, 0x99),
        extension: action.encode_to_vec().into(),
    }
    .encode_to_vec()
    .into()
}

fn endorsement(index: usize) -> Endorsement {
    let msp_id = ENDORSER_MSPS[index];
    Endorsement {
        endorser: serialized_identity(msp_id, &format!("peer{index}.{msp_id}.weft.test")),
        signature: fixed_bytes(70 + index, 0x60 + index as u8),
    }
}

fn config_value(value: Vec<u8>) -> ConfigValue {
    ConfigValue {
        version: 1,
        value: value.into(),
        mod_policy: "Admins".to_owned(),
    }
}

fn config_policy(policy_type: policy::PolicyType, value: Vec<u8>) -> ConfigPolicy {
    ConfigPolicy {
        version: 0,
        policy: Some(Policy {
            r#type: policy_type as i32,
            value: value.into(),
        }),
        mod_policy: "Admins".to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers: running Fabric's JavaScript

/// Runs `node tests/js/SCRIPT DIR`; returns its stdout and stderr.
fn run_node(script: &str, dir: &Path) -> (String, String) {
    let output = node::node()
        .arg(script)
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node {script}: {e}"));
    let stdout = String::from_utf8(output.stdout).expect("utf-8 stdout");
    let stderr = String::from_utf8(output.stderr).expect("utf-8 stderr");
    assert!(
        output.status.success(),
        "node {script} {} failed ({}):\n{stderr}",
        dir.display(),
        output.status
    );
    (stdout, stderr)
}

/// Runs produce.js into a fresh temporary directory.
fn produce() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    run_node("produce.js", dir.path());
    dir
}

fn read_bytes(path: &Path) -> Bytes {
    std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into()
}

fn read_json<T: DeserializeOwned>(path: &Path) -> T {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
