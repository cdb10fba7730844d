//! Golden-fixture tests on real Hyperledger Fabric v2.5.16 data.
//!
//! The blocks and crypto material under `tests/fixtures/fabric-2.5/` were
//! produced by a real Fabric network (its README describes it). These tests
//! prove that weft reads them exactly as Fabric wrote them: the prost types
//! re-encode every layer byte for byte (with one documented exception in the
//! channel config), the hashes chain, every TxID recomputes, the decode-once
//! view decodes every transaction, and every signature in the blocks verifies
//! against the MSPs of the channel's own genesis block. Negative checks show
//! that tampering is caught.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;
use weft_msp::{IdentityError, Msp, MspManager, NodeRole, SignatureError};
use weft_protos::common::{
    Block, BlockDataHashingStructure, BlockMetadataIndex, Capabilities, ChannelHeader, Config,
    ConfigEnvelope, ConfigGroup, Envelope, HashingAlgorithm, HeaderType, ImplicitMetaPolicy,
    Metadata, MspRole, OrdererAddresses, OrdererBlockMetadata, Payload, SignatureHeader,
    SignaturePolicyEnvelope, policy::PolicyType,
};
use weft_protos::hash::{block_data_hash, block_header_bytes, block_header_hash, sha256};
use weft_protos::kvrwset::{HashedRwSet, KvrwSet};
use weft_protos::lifecycle::{
    ApproveChaincodeDefinitionForMyOrgArgs, CommitChaincodeDefinitionArgs,
};
use weft_protos::msp::{FabricMspConfig, MspConfig, SerializedIdentity};
use weft_protos::orderer::{BatchSize, BatchTimeout, ChannelRestrictions, ConsensusType};
use weft_protos::protos::{
    ApplicationPolicy, ChaincodeAction, ChaincodeActionPayload, ChaincodeEvent,
    ChaincodeHeaderExtension, ChaincodeInvocationSpec, ChaincodeProposalPayload,
    ProposalResponsePayload, Transaction,
};
use weft_protos::rwset::TxReadWriteSet;
use weft_protos::view::{DecodedBlock, Limits, TxBody, TxEnvelope};

// ---------------------------------------------------------------------------------------------
// The fixtures, as the README's table describes them

/// Which service the block was fetched from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Orderer,
    /// The peer's deliver service: same header, data and metadata[0], plus
    /// TRANSACTIONS_FILTER and COMMIT_HASH.
    Peer,
}

/// What the block's transactions are.
#[derive(Debug, Clone, Copy)]
enum Content {
    /// The genesis block: one unsigned CONFIG envelope from configtxgen.
    Genesis,
    /// One `_lifecycle` transaction by Org1's admin, calling this function.
    Lifecycle(&'static str),
    /// This many `kv put(<uuid4>, <8 alphanumerics>)` transactions from tape, by User1.
    TapePuts(usize),
    /// One `kv put(key, value)` by Org1's admin through the CLI.
    CliPut(&'static str, &'static str),
}

#[derive(Debug)]
struct Fixture {
    file: &'static str,
    channel: &'static str,
    number: u64,
    source: Source,
    content: Content,
}

/// The README's table of blocks. Fetched from the orderer unless marked Peer.
#[rustfmt::skip]
const FIXTURES: [Fixture; 12] = [
    fixture("ch10-block-0.block",                 "ch10",  0, Source::Orderer, Content::Genesis),
    fixture("ch10-block-1.block",                 "ch10",  1, Source::Orderer, APPROVE),
    fixture("ch10-block-2.block",                 "ch10",  2, Source::Orderer, COMMIT),
    fixture("ch10-block-3.block",                 "ch10",  3, Source::Orderer, Content::TapePuts(10)),
    fixture("ch10-block-4.block",                 "ch10",  4, Source::Orderer, Content::TapePuts(10)),
    fixture("ch100-block-0.block",                "ch100", 0, Source::Orderer, Content::Genesis),
    fixture("ch100-block-1.block",                "ch100", 1, Source::Orderer, APPROVE),
    fixture("ch100-block-2.block",                "ch100", 2, Source::Orderer, COMMIT),
    fixture("ch10-block-1.from-peer.block",       "ch10",  1, Source::Peer,    APPROVE),
    fixture("extra/ch10-block-3.from-peer.block", "ch10",  3, Source::Peer,    Content::TapePuts(10)),
    fixture("extra/ch100-block-3.block",          "ch100", 3, Source::Orderer, Content::CliPut("k1", "hello")),
    fixture("extra/ch100-block-4.block",          "ch100", 4, Source::Orderer, Content::TapePuts(100)),
];

const APPROVE: Content = Content::Lifecycle("ApproveChaincodeDefinitionForMyOrg");
const COMMIT: Content = Content::Lifecycle("CommitChaincodeDefinition");

/// The orderer-fetched blocks 0–4 of each channel, in chain order.
const CHAINS: [(&str, [&str; 5]); 2] = [
    (
        "ch10",
        [
            "ch10-block-0.block",
            "ch10-block-1.block",
            "ch10-block-2.block",
            "ch10-block-3.block",
            "ch10-block-4.block",
        ],
    ),
    (
        "ch100",
        [
            "ch100-block-0.block",
            "ch100-block-1.block",
            "ch100-block-2.block",
            "extra/ch100-block-3.block",
            "extra/ch100-block-4.block",
        ],
    ),
];

const ADMIN: &str = "Admin@org1.example.com";
const USER1: &str = "User1@org1.example.com";
const PEER0: &str = "peer0.org1.example.com";
const ORDERER: &str = "orderer.example.com";

// ---------------------------------------------------------------------------------------------
// Wire format

#[test]
fn blocks_and_every_layer_inside_reencode_byte_identically() {
    // Goal: prost's encoding of every message Fabric wrote into these blocks is
    // byte-identical to Go's, layer by layer: the block, each envelope, and
    // every serialized message nested in a bytes field below it (headers,
    // identities, transactions, actions, proposal payloads, read/write sets,
    // events, lifecycle arguments, block metadata). Only the CONFIG payload's
    // data is left to the next test, because there it is not.
    for fixture in &FIXTURES {
        let (bytes, block) = load(fixture);
        assert_eq!(
            block.encode_to_vec(),
            bytes.as_ref(),
            "{}: Block does not re-encode byte-identically",
            fixture.file
        );
        let mut layers = 1;
        for (index, raw) in envelopes(&block).iter().enumerate() {
            let at = format!("{} tx {index}", fixture.file);
            layers += check_envelope_layers(raw, &at);
        }
        layers += check_metadata_layers(&block, fixture);
        let minimum = 1 + envelopes(&block).len() * 5;
        assert!(
            layers >= minimum,
            "{}: only {layers} layers were checked",
            fixture.file
        );
    }
}

#[test]
fn config_reencodes_identically_except_where_go_encodes_maps_differently() {
    // Goal: state exactly how far prost's re-encoding of Fabric's channel
    // config (configtxgen output, Go protobuf) is byte-identical, and prove
    // that where it is not, the messages are still equal.
    //
    // Two Go behaviours differ from prost, and neither matters to weft,
    // which verifies signatures and hashes over the original bytes (the view
    // keeps them) and never re-encodes a config it received:
    // 1. Go's `proto.Marshal` writes map entries in Go's randomised map
    //    iteration order; prost writes a BTreeMap in key order. The
    //    ConfigGroup maps (groups, values, policies) are therefore permuted:
    //    same length, same entries, different order.
    // 2. Go writes a map entry's value even when it is the default message:
    //    `Capabilities{"V2_0": Capability{}}` has the entry `0a 04 "V2_0" 12 00`;
    //    prost omits the default value (`0a 04 "V2_0"`), 2 bytes shorter per
    //    capability. Both decode to the same message.
    // Everything else in the config tree (MSP configs, policies, batch
    // settings, consensus metadata) re-encodes byte-identically. (So a weft
    // tool that writes config blocks with prost cannot match configtxgen's
    // bytes: Go's map order is random, and its Capabilities are 2 bytes
    // longer per entry.)
    for fixture in FIXTURES
        .iter()
        .filter(|f| matches!(f.content, Content::Genesis))
    {
        let (_, block) = load(fixture);
        let envelope = Envelope::decode(envelopes(&block)[0].clone()).unwrap();
        let payload = Payload::decode(envelope.payload).unwrap();
        let original = payload.data;
        let config_envelope = ConfigEnvelope::decode(original.clone()).unwrap();
        let reencoded = config_envelope.encode_to_vec();

        assert_eq!(
            reencoded.len(),
            original.len(),
            "{}: ConfigEnvelope re-encodes to a different length",
            fixture.file
        );
        assert_ne!(
            reencoded,
            original.as_ref(),
            "{}: ConfigEnvelope is byte-identical; Go's map order happened to be sorted: \
             update this test's comment",
            fixture.file
        );
        assert_eq!(
            ConfigEnvelope::decode(reencoded.as_slice()).unwrap(),
            config_envelope,
            "{}: re-encoded ConfigEnvelope decodes to a different message",
            fixture.file
        );
        assert!(
            config_envelope.last_update.is_none(),
            "{}: a genesis config has no last update",
            fixture.file
        );
        let config = config_envelope.config.as_ref().expect("config");
        let channel_group = config.channel_group.as_ref().expect("channel group");
        // Every leaf entry (a value or a policy, which hold no maps) appears in
        // the original bytes exactly as prost encodes it: only the order of
        // the entries differs.
        let mut leaves = 0;
        for_each_group(channel_group, "Channel", &mut |path, group| {
            for (key, value) in &group.values {
                let entry = map_entry(3, key, &value.encode_to_vec());
                assert!(
                    contains(&original, &entry),
                    "{}: {path}/values/{key} is not in the original bytes verbatim",
                    fixture.file
                );
                leaves += 1;
            }
            for (key, policy) in &group.policies {
                let entry = map_entry(4, key, &policy.encode_to_vec());
                assert!(
                    contains(&original, &entry),
                    "{}: {path}/policies/{key} is not in the original bytes verbatim",
                    fixture.file
                );
                leaves += 1;
            }
        });
        assert!(leaves > 30, "{}: only {leaves} config leaves", fixture.file);

        let capabilities = check_config_values(channel_group, fixture.file);
        assert_eq!(
            capabilities,
            ["Channel", "Channel/Application", "Channel/Orderer"],
            "{}: the groups that carry Capabilities",
            fixture.file
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Hashes and transaction ids

#[test]
fn header_hashes_chain_blocks_0_to_4_of_each_channel() {
    // Goal: Fabric's header hash (SHA-256 of the DER SEQUENCE {number,
    // previous_hash, data_hash}) as weft computes it is what the next block
    // names as its previous hash, for both channels.
    for (channel, files) in CHAINS {
        let blocks: Vec<Block> = files.iter().map(|file| load_file(file).1).collect();
        let first = blocks[0].header.as_ref().expect("header");
        assert!(
            first.previous_hash.is_empty(),
            "{channel} block 0 has a previous hash"
        );
        for (index, pair) in blocks.windows(2).enumerate() {
            let previous = pair[0].header.as_ref().expect("header");
            let next = pair[1].header.as_ref().expect("header");
            assert_eq!(previous.number, index as u64, "{}: number", files[index]);
            assert_eq!(
                next.number,
                index as u64 + 1,
                "{}: number",
                files[index + 1]
            );
            assert_eq!(
                next.previous_hash.as_ref(),
                block_header_hash(previous),
                "{}: previous_hash is not the header hash of {}",
                files[index + 1],
                files[index]
            );
        }
    }
}

#[test]
fn data_hash_is_the_hash_of_the_concatenated_envelopes() {
    // Goal: every block's header data_hash equals weft's block_data_hash.
    for fixture in &FIXTURES {
        let (_, block) = load(fixture);
        let header = block.header.as_ref().expect("header");
        let data = block.data.as_ref().expect("data");
        assert_eq!(
            header.data_hash.as_ref(),
            block_data_hash(data),
            "{}: data_hash mismatch",
            fixture.file
        );
        assert_eq!(header.number, fixture.number, "{}: number", fixture.file);
    }
}

#[test]
fn every_tx_id_recomputes_from_nonce_and_creator() {
    // Goal: each transaction's channel-header tx_id is hex(SHA-256(nonce ‖
    // creator)) as weft computes it, including the genesis config envelope
    // (whose creator is empty, so its TxID hashes the nonce alone).
    let mut checked = 0;
    for fixture in &FIXTURES {
        let (_, block) = load(fixture);
        for (index, raw) in envelopes(&block).iter().enumerate() {
            let tx = TxEnvelope::decode(raw.clone(), Limits::default())
                .unwrap_or_else(|e| panic!("{} tx {index}: {e}", fixture.file));
            assert_eq!(tx.tx_id().len(), 64, "{} tx {index}: tx_id", fixture.file);
            assert_eq!(
                tx.computed_tx_id(),
                tx.tx_id(),
                "{} tx {index}: TxID does not recompute",
                fixture.file
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 2 + 5 + 3 * 10 + 1 + 100, "transactions checked");
}

// ---------------------------------------------------------------------------------------------
// The decode-once view

#[test]
fn decode_once_view_decodes_every_transaction_as_the_readme_describes() {
    // Goal: weft's DecodedBlock decodes every transaction of every block with
    // no error, and what it decodes matches the README's table: header
    // types, transaction counts, chaincodes, functions, writes, creators,
    // and the channel's batch settings in the genesis config.
    for fixture in &FIXTURES {
        let (bytes, _) = load(fixture);
        let decoded = DecodedBlock::decode(bytes, Limits::default())
            .unwrap_or_else(|e| panic!("{}: {e}", fixture.file));
        assert_eq!(decoded.header.number, fixture.number, "{}", fixture.file);
        assert_eq!(
            decoded.metadata.metadata.len(),
            5,
            "{}: metadata entries",
            fixture.file
        );
        let expected_txs = match fixture.content {
            Content::Genesis | Content::Lifecycle(_) | Content::CliPut(..) => 1,
            Content::TapePuts(count) => count,
        };
        assert_eq!(
            decoded.transactions.len(),
            expected_txs,
            "{}: transactions",
            fixture.file
        );
        assert_eq!(
            decoded.raw_envelopes.len(),
            expected_txs,
            "{}: envelopes",
            fixture.file
        );

        for (index, tx) in decoded.transactions.iter().enumerate() {
            let at = format!("{} tx {index}", fixture.file);
            let tx = tx.as_ref().unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(
                tx.channel_header.channel_id, fixture.channel,
                "{at}: channel"
            );
            assert_eq!(tx.raw, decoded.raw_envelopes[index], "{at}: raw envelope");
            match fixture.content {
                Content::Genesis => check_genesis_view(tx, fixture, &at),
                Content::Lifecycle(function) => {
                    let write = check_endorser_view(tx, "_lifecycle", function, ADMIN, &at);
                    assert!(
                        write.is_none(),
                        "{at}: _lifecycle writes no public kv key here"
                    );
                }
                Content::TapePuts(_) => {
                    let (key, value) =
                        check_endorser_view(tx, "kv", "put", USER1, &at).expect("a kv write");
                    assert!(is_uuid4(&key), "{at}: key {key:?} is not a uuid4");
                    assert_eq!(value.len(), 8, "{at}: value {value:?}");
                    assert!(
                        value.bytes().all(|b| b.is_ascii_alphanumeric()),
                        "{at}: value {value:?} is not alphanumeric"
                    );
                }
                Content::CliPut(key, value) => {
                    let write = check_endorser_view(tx, "kv", "put", ADMIN, &at);
                    assert_eq!(
                        write,
                        Some((key.to_owned(), value.to_owned())),
                        "{at}: write"
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Signatures and identities, checked against the MSPs of each channel's genesis block

#[test]
fn every_creator_signature_verifies_with_the_expected_role() {
    // Goal: every signed envelope's signature verifies over its payload bytes
    // with the key of signature_header.creator, and the creator validates
    // against the channel's genesis MSPs with the role the README names
    // (Org1's admin ran the lifecycle and CLI transactions, User1 the tape
    // puts). The genesis config envelopes are unsigned: configtxgen has no
    // signer, so their signature and creator are empty.
    let now = weft_msp::now();
    let mut verified = 0;
    for fixture in &FIXTURES {
        let manager = channel_msps(fixture.channel);
        let (_, block) = load(fixture);
        for (index, raw) in envelopes(&block).iter().enumerate() {
            let at = format!("{} tx {index}", fixture.file);
            let tx = TxEnvelope::decode(raw.clone(), Limits::default()).unwrap();
            if matches!(fixture.content, Content::Genesis) {
                assert!(tx.signature.is_empty(), "{at}: genesis envelope is signed");
                assert!(
                    tx.creator().is_empty(),
                    "{at}: genesis envelope has a creator"
                );
                continue;
            }
            let identity = manager
                .deserialize(tx.creator(), now)
                .unwrap_or_else(|e| panic!("{at}: creator rejected: {e}"));
            identity
                .verify(&tx.payload_bytes, &tx.signature)
                .unwrap_or_else(|e| panic!("{at}: creator signature: {e}"));
            let (name, role) = match fixture.content {
                Content::TapePuts(_) => (USER1, NodeRole::Client),
                _ => (ADMIN, NodeRole::Admin),
            };
            assert_eq!(identity.msp_id(), "Org1MSP", "{at}: creator MSP");
            assert_eq!(
                identity.certificate().common_name(),
                Some(name),
                "{at}: creator"
            );
            assert_eq!(identity.node_role(), Some(role), "{at}: creator role");
            assert_eq!(
                identity.is_admin(),
                role == NodeRole::Admin,
                "{at}: is_admin"
            );
            verified += 1;
        }
    }
    assert_eq!(
        verified,
        5 + 3 * 10 + 1 + 100,
        "creator signatures verified"
    );
}

#[test]
fn every_endorsement_signature_verifies_and_comes_from_peer0() {
    // Goal: every endorsement verifies over proposal_response_payload ‖
    // endorser, and every endorser is peer0 of Org1 with the peer role.
    let now = weft_msp::now();
    let mut verified = 0;
    for fixture in &FIXTURES {
        let manager = channel_msps(fixture.channel);
        let (bytes, _) = load(fixture);
        let decoded = DecodedBlock::decode(bytes, Limits::default()).unwrap();
        for (index, tx) in decoded.transactions.iter().enumerate() {
            let at = format!("{} tx {index}", fixture.file);
            let TxBody::Endorser(transaction) = &tx.as_ref().unwrap().body else {
                continue;
            };
            for (action_index, action) in transaction.actions.iter().enumerate() {
                assert_eq!(
                    action.endorsements.len(),
                    1,
                    "{at}: one endorsement per action"
                );
                for endorsement in &action.endorsements {
                    let at = format!("{at} action {action_index}");
                    let endorser = manager
                        .deserialize(&endorsement.endorser, now)
                        .unwrap_or_else(|e| panic!("{at}: endorser rejected: {e}"));
                    let signed = [
                        action.proposal_response_payload_bytes.as_ref(),
                        &endorsement.endorser,
                    ]
                    .concat();
                    endorser
                        .verify(&signed, &endorsement.signature)
                        .unwrap_or_else(|e| panic!("{at}: endorsement signature: {e}"));
                    assert_eq!(endorser.msp_id(), "Org1MSP", "{at}: endorser MSP");
                    assert_eq!(endorser.certificate().common_name(), Some(PEER0), "{at}");
                    assert_eq!(endorser.node_role(), Some(NodeRole::Peer), "{at}: role");
                    assert!(!endorser.is_admin(), "{at}: peer0 is not an admin");
                    verified += 1;
                }
            }
        }
    }
    assert_eq!(verified, 5 + 3 * 10 + 1 + 100, "endorsements verified");
}

#[test]
fn every_orderer_block_signature_verifies() {
    // Goal: metadata[SIGNATURES] of every non-genesis block holds one
    // signature by orderer.example.com (orderer role, OrdererMSP) that
    // verifies over metadata.value ‖ signature_header ‖ header DER. The
    // genesis blocks carry the metadata value but no signature.
    let now = weft_msp::now();
    for fixture in &FIXTURES {
        let manager = channel_msps(fixture.channel);
        let (_, block) = load(fixture);
        let header = block.header.as_ref().expect("header");
        let metadata = signatures_metadata(&block, fixture.file);
        let last_config = OrdererBlockMetadata::decode(metadata.value.clone()).unwrap();
        assert_eq!(
            last_config.last_config.map(|l| l.index),
            Some(0),
            "{}: last config index",
            fixture.file
        );
        if matches!(fixture.content, Content::Genesis) {
            assert!(
                metadata.signatures.is_empty(),
                "{}: genesis is signed",
                fixture.file
            );
            continue;
        }
        assert_eq!(
            metadata.signatures.len(),
            1,
            "{}: orderer signatures",
            fixture.file
        );
        let signature = &metadata.signatures[0];
        let signature_header = SignatureHeader::decode(signature.signature_header.clone()).unwrap();
        let orderer = manager
            .deserialize(&signature_header.creator, now)
            .unwrap_or_else(|e| panic!("{}: orderer identity rejected: {e}", fixture.file));
        let signed = [
            metadata.value.as_ref(),
            &signature.signature_header,
            &block_header_bytes(header),
        ]
        .concat();
        orderer
            .verify(&signed, &signature.signature)
            .unwrap_or_else(|e| panic!("{}: orderer block signature: {e}", fixture.file));
        assert_eq!(
            orderer.msp_id(),
            "OrdererMSP",
            "{}: orderer MSP",
            fixture.file
        );
        assert_eq!(
            orderer.certificate().common_name(),
            Some(ORDERER),
            "{}",
            fixture.file
        );
        assert_eq!(
            orderer.node_role(),
            Some(NodeRole::Orderer),
            "{}: role",
            fixture.file
        );
    }
}

#[test]
fn peer_copies_mark_every_transaction_valid_and_match_the_orderer_copies() {
    // Goal: the blocks fetched from the peer carry a TRANSACTIONS_FILTER of
    // one byte per transaction, all VALID (0), and a COMMIT_HASH; their
    // header, data and metadata[SIGNATURES] are byte-identical to the
    // orderer's copies, whose metadata[1..4] are empty.
    let pairs = [
        ("ch10-block-1.from-peer.block", "ch10-block-1.block"),
        ("extra/ch10-block-3.from-peer.block", "ch10-block-3.block"),
    ];
    for (peer_file, orderer_file) in pairs {
        let (_, peer) = load_file(peer_file);
        let (_, orderer) = load_file(orderer_file);
        assert_eq!(peer.header, orderer.header, "{peer_file}: header");
        assert_eq!(peer.data, orderer.data, "{peer_file}: data");
        let peer_metadata = &peer.metadata.as_ref().expect("metadata").metadata;
        let orderer_metadata = &orderer.metadata.as_ref().expect("metadata").metadata;
        assert_eq!(peer_metadata.len(), 5, "{peer_file}: metadata entries");
        assert_eq!(
            peer_metadata[0], orderer_metadata[0],
            "{peer_file}: SIGNATURES"
        );
        for (index, entry) in orderer_metadata.iter().enumerate().skip(1) {
            assert!(
                entry.is_empty(),
                "{orderer_file}: metadata[{index}] is not empty"
            );
        }

        let transactions = envelopes(&peer).len();
        let filter = &peer_metadata[BlockMetadataIndex::TransactionsFilter as usize];
        assert_eq!(filter.len(), transactions, "{peer_file}: filter length");
        for (index, code) in filter.iter().enumerate() {
            assert_eq!(*code, 0, "{peer_file} tx {index}: not VALID");
        }
        let commit_hash = &peer_metadata[BlockMetadataIndex::CommitHash as usize];
        assert_eq!(commit_hash.len(), 34, "{peer_file}: COMMIT_HASH size");
        let commit_hash = Metadata::decode(commit_hash.clone()).unwrap();
        assert_eq!(commit_hash.value.len(), 32, "{peer_file}: commit hash");
        assert!(
            commit_hash.signatures.is_empty(),
            "{peer_file}: commit hash signatures"
        );
        assert!(
            peer_metadata[BlockMetadataIndex::LastConfig as usize].is_empty(),
            "{peer_file}: LAST_CONFIG"
        );
    }
    // Every Peer-sourced fixture is covered above.
    let peer_fixtures = FIXTURES.iter().filter(|f| f.source == Source::Peer).count();
    assert_eq!(peer_fixtures, pairs.len());
}

#[test]
fn every_msp_folder_loads_and_its_signer_signs_verifiably() {
    // Goal: weft's folder reader loads every MSP folder of the cryptogen
    // output (org-level and per node or user), the org folders give the very
    // FabricMSPConfig configtxgen put into the genesis block, and every
    // signing identity validates against its org's MSP with the expected
    // role and makes fresh low-S signatures that verify.
    let now = weft_msp::now();
    let crypto = fixture_dir().join("crypto");
    let org_msps = [
        ("OrdererMSP", "ordererOrganizations/example.com/msp"),
        ("Org1MSP", "peerOrganizations/org1.example.com/msp"),
    ];
    let genesis_configs = channel_msp_configs("ch10");
    let mut org_manager_msps = Vec::new();
    for (msp_id, folder) in org_msps {
        let local = weft_msp::folder::load(&crypto.join(folder), msp_id)
            .unwrap_or_else(|e| panic!("{folder}: {e}"));
        assert!(local.signer.is_none(), "{folder}: org MSP has a signer");
        assert_eq!(
            Some(&local.config),
            genesis_configs.get(msp_id),
            "{folder}: differs from the genesis block's {msp_id} config"
        );
        org_manager_msps.push(local.msp().unwrap());
    }
    let org_manager = MspManager::new(org_manager_msps);

    let expected_signers: BTreeMap<&str, (&str, NodeRole)> = BTreeMap::from([
        (
            "ordererOrganizations/example.com/orderers/orderer.example.com/msp",
            (ORDERER, NodeRole::Orderer),
        ),
        (
            "ordererOrganizations/example.com/users/Admin@example.com/msp",
            ("Admin@example.com", NodeRole::Admin),
        ),
        (
            "peerOrganizations/org1.example.com/peers/peer0.org1.example.com/msp",
            (PEER0, NodeRole::Peer),
        ),
        (
            "peerOrganizations/org1.example.com/users/Admin@org1.example.com/msp",
            (ADMIN, NodeRole::Admin),
        ),
        (
            "peerOrganizations/org1.example.com/users/User1@org1.example.com/msp",
            (USER1, NodeRole::Client),
        ),
    ]);
    let folders = msp_folders(&crypto);
    assert_eq!(folders.len(), 7, "MSP folders: {folders:?}");
    let mut signers = 0;
    for folder in &folders {
        let relative = folder
            .strip_prefix(&crypto)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let msp_id = if relative.starts_with("ordererOrganizations/") {
            "OrdererMSP"
        } else {
            "Org1MSP"
        };
        let local = weft_msp::folder::load(folder, msp_id)
            .unwrap_or_else(|e| panic!("{relative}: does not load: {e}"));
        assert_eq!(local.config.name, msp_id, "{relative}: MSP ID");
        assert!(
            local
                .config
                .fabric_node_ous
                .as_ref()
                .is_some_and(|n| n.enable),
            "{relative}: NodeOUs"
        );
        // The verifying part of every folder of an org is the org's.
        let org_config = &genesis_configs[msp_id];
        assert_eq!(
            local.config.root_certs, org_config.root_certs,
            "{relative}: root certs"
        );
        let Some(signer) = &local.signer else {
            assert!(
                org_msps.iter().any(|(_, org)| *org == relative),
                "{relative}: no signer"
            );
            continue;
        };
        let (name, role) = expected_signers
            .get(relative.as_str())
            .unwrap_or_else(|| panic!("{relative}: unexpected signer"));
        let identity = org_manager
            .deserialize(signer.serialized_identity(), now)
            .unwrap_or_else(|e| panic!("{relative}: signer identity rejected: {e}"));
        assert_eq!(identity.msp_id(), msp_id, "{relative}");
        assert_eq!(
            identity.certificate().common_name(),
            Some(*name),
            "{relative}"
        );
        assert_eq!(identity.node_role(), Some(*role), "{relative}: role");
        // ECDSA signing is randomised and about half of raw signatures are
        // high-S, so a few signatures exercise the low-S normalisation.
        for round in 0..8 {
            let message = format!("weft fixture test {relative} {round}");
            let signature = signer.sign(message.as_bytes()).unwrap();
            identity
                .verify(message.as_bytes(), &signature)
                .unwrap_or_else(|e| panic!("{relative}: fresh signature {round}: {e}"));
            assert_eq!(
                weft_msp::crypto::has_low_s(&signature),
                Ok(true),
                "{relative}: signature {round} is not low-S"
            );
        }
        signers += 1;
    }
    assert_eq!(signers, expected_signers.len(), "signers found");
}

#[test]
fn fixtures_match_their_checksums() {
    // Goal: the copied fixtures are the files the network's SHA256SUMS lists,
    // unchanged, and nothing else. Two deliberate differences: the chaincode
    // package was not copied, and the README starts with one added line (and
    // a blank line) saying where the copy came from.
    let dir = fixture_dir();
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    let mut listed = Vec::new();
    for line in sums.lines() {
        let (hash, path) = line.split_once("  ./").expect("`HASH  ./PATH` line");
        if path == "config/kv-ccaas-package.tgz" {
            continue;
        }
        let mut bytes = std::fs::read(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        if path == "README.md" {
            let text = String::from_utf8(bytes).unwrap();
            let (added, original) = text.split_once("\n\n").unwrap();
            assert!(
                added.contains("Copied into weft"),
                "README.md: first line {added:?}"
            );
            bytes = original.as_bytes().to_vec();
        }
        assert_eq!(hex::encode(sha256(&bytes)), hash, "{path}: checksum");
        listed.push(path.to_owned());
    }
    let mut present: Vec<String> = files_under(&dir)
        .iter()
        .map(|p| p.strip_prefix(&dir).unwrap().to_str().unwrap().to_owned())
        .filter(|p| p != "SHA256SUMS")
        .collect();
    present.sort();
    listed.sort();
    assert_eq!(present, listed, "files present vs. listed in SHA256SUMS");
}

// ---------------------------------------------------------------------------------------------
// Negative checks: tampering must be caught

#[test]
fn a_flipped_byte_in_an_envelope_signature_or_payload_fails_verification() {
    // Goal: the creator-signature check rejects a signature with one byte
    // changed, and a payload with one byte changed.
    let manager = channel_msps("ch10");
    let (_, block) = load_file("ch10-block-3.block");
    let tx = TxEnvelope::decode(envelopes(&block)[0].clone(), Limits::default()).unwrap();
    let identity = manager.deserialize(tx.creator(), weft_msp::now()).unwrap();
    identity.verify(&tx.payload_bytes, &tx.signature).unwrap();

    // The last byte is inside S, so the signature stays well-formed DER.
    let mut signature = tx.signature.to_vec();
    *signature.last_mut().unwrap() ^= 0x01;
    assert_eq!(
        identity.verify(&tx.payload_bytes, &signature),
        Err(SignatureError::Invalid),
        "ch10-block-3 tx 0: tampered signature verified"
    );
    let mut payload = tx.payload_bytes.to_vec();
    let middle = payload.len() / 2;
    payload[middle] ^= 0x01;
    assert_eq!(
        identity.verify(&payload, &tx.signature),
        Err(SignatureError::Invalid),
        "ch10-block-3 tx 0: tampered payload verified"
    );
}

#[test]
fn an_orderer_reads_a_transactions_headers_and_leaves_its_data() {
    // Goal: the orderer's decode gives the same headers as the whole decode
    // of a Fabric transaction and keeps the transaction itself as bytes; a
    // transaction whose data does not decode still reaches ordering, as on
    // Fabric's orderer (the peers mark it invalid).
    let (_, block) = load_file("ch10-block-3.block");
    let raw = envelopes(&block)[0].clone();
    let whole = TxEnvelope::decode(raw.clone(), Limits::default()).unwrap();
    let headers = TxEnvelope::decode_for_ordering(raw.clone(), Limits::default()).unwrap();
    assert_eq!(headers.channel_header, whole.channel_header);
    assert_eq!(headers.signature_header, whole.signature_header);
    assert_eq!(headers.payload_bytes, whole.payload_bytes);
    assert_eq!(headers.signature, whole.signature);
    let payload = Payload::decode(whole.payload_bytes.clone()).unwrap();
    let TxBody::EndorserUnread(data) = &headers.body else {
        panic!("ch10-block-3 tx 0: the orderer's decode read the transaction");
    };
    assert_eq!(data, &payload.data);

    let garbled = Envelope {
        payload: Payload {
            data: Bytes::from_static(&[0xff, 0xff, 0xff]),
            ..payload
        }
        .encode_to_vec()
        .into(),
        signature: whole.signature.clone(),
    };
    let garbled = Bytes::from(garbled.encode_to_vec());
    assert!(TxEnvelope::decode(garbled.clone(), Limits::default()).is_err());
    let headers = TxEnvelope::decode_for_ordering(garbled, Limits::default()).unwrap();
    assert_eq!(headers.tx_id(), whole.tx_id());
}

#[test]
fn a_modified_data_entry_no_longer_matches_the_data_hash() {
    // Goal: changing one byte of one envelope in a block makes its data hash
    // differ from the header's, and so does dropping or reordering entries.
    let (_, block) = load_file("ch10-block-3.block");
    let header = block.header.clone().expect("header");
    let data = block.data.clone().expect("data");
    assert_eq!(header.data_hash.as_ref(), block_data_hash(&data));

    let mut modified = data.clone();
    let mut entry = modified.data[4].to_vec();
    let last = entry.len() - 1;
    entry[last] ^= 0x01;
    modified.data[4] = entry.into();
    assert_ne!(
        header.data_hash.as_ref(),
        block_data_hash(&modified),
        "modified entry"
    );

    let mut dropped = data.clone();
    dropped.data.pop();
    assert_ne!(
        header.data_hash.as_ref(),
        block_data_hash(&dropped),
        "dropped entry"
    );

    let mut swapped = data;
    swapped.data.swap(0, 1);
    assert_ne!(
        header.data_hash.as_ref(),
        block_data_hash(&swapped),
        "swapped entries"
    );
}

#[test]
fn an_identity_presented_under_another_msp_id_is_rejected() {
    // Goal: a certificate only validates under the MSP whose CA issued it:
    // Org1's User1 claimed as OrdererMSP, and the orderer claimed as Org1MSP,
    // are both rejected; an MSP ID the channel does not know is rejected too.
    let now = weft_msp::now();
    let manager = channel_msps("ch10");
    let (_, block) = load_file("ch10-block-3.block");
    let tx = TxEnvelope::decode(envelopes(&block)[0].clone(), Limits::default()).unwrap();
    let user1 = SerializedIdentity::decode(tx.creator().clone()).unwrap();
    assert_eq!(user1.mspid, "Org1MSP");
    manager
        .deserialize(tx.creator(), now)
        .expect("User1 under Org1MSP");

    let as_orderer_msp = reserialize(&user1, "OrdererMSP");
    assert_eq!(
        manager.deserialize(&as_orderer_msp, now).map(|_| ()),
        Err(IdentityError::UntrustedIssuer("OrdererMSP".to_owned())),
        "User1 presented as OrdererMSP"
    );
    let as_unknown_msp = reserialize(&user1, "Org2MSP");
    assert_eq!(
        manager.deserialize(&as_unknown_msp, now).map(|_| ()),
        Err(IdentityError::UnknownMsp("Org2MSP".to_owned())),
        "User1 presented as Org2MSP"
    );

    let metadata = signatures_metadata(&block, "ch10-block-3.block");
    let signature_header =
        SignatureHeader::decode(metadata.signatures[0].signature_header.clone()).unwrap();
    let orderer = SerializedIdentity::decode(signature_header.creator).unwrap();
    assert_eq!(orderer.mspid, "OrdererMSP");
    assert_eq!(
        manager
            .deserialize(&reserialize(&orderer, "Org1MSP"), now)
            .map(|_| ()),
        Err(IdentityError::UntrustedIssuer("Org1MSP".to_owned())),
        "the orderer presented as Org1MSP"
    );
}

#[test]
fn a_truncated_block_is_a_decode_error_not_a_panic() {
    // Goal: every truncation of a block file fails to decode cleanly (an
    // error, never a panic), except where protobuf cannot tell: a cut that
    // falls exactly between two top-level fields decodes as a block without
    // its later fields. For this block that means a block without data and
    // metadata, or without metadata; without metadata there is no orderer
    // signature, so such a block can never pass signature validation.
    // The same holds for the envelopes inside the block.
    let file = "ch10-block-1.block";
    let (bytes, block) = load_file(file);
    let header_end = field_len(block.header.as_ref().unwrap().encoded_len());
    let data_end = header_end + field_len(block.data.as_ref().unwrap().encoded_len());
    for cut in 0..bytes.len() {
        let result = DecodedBlock::decode(bytes.slice(..cut), Limits::default());
        match cut {
            0 => assert!(result.is_err(), "{file} cut at 0: no header, must fail"),
            _ if cut == header_end => {
                let partial = result.unwrap_or_else(|e| panic!("{file} cut at {cut}: {e}"));
                assert!(partial.transactions.is_empty(), "{file} cut at {cut}");
                assert!(partial.metadata.metadata.is_empty(), "{file} cut at {cut}");
            }
            _ if cut == data_end => {
                let partial = result.unwrap_or_else(|e| panic!("{file} cut at {cut}: {e}"));
                assert_eq!(partial.transactions.len(), 1, "{file} cut at {cut}");
                assert!(partial.metadata.metadata.is_empty(), "{file} cut at {cut}");
            }
            _ => assert!(result.is_err(), "{file} truncated to {cut} bytes decoded"),
        }
    }

    let raw = &envelopes(&block)[0];
    let envelope = Envelope::decode(raw.clone()).unwrap();
    let payload_end = field_len(envelope.payload.len());
    for cut in 0..raw.len() {
        let result = TxEnvelope::decode(raw.slice(..cut), Limits::default());
        if cut == payload_end {
            let unsigned = result.unwrap_or_else(|e| panic!("{file} tx 0 cut at {cut}: {e}"));
            assert!(unsigned.signature.is_empty(), "{file} tx 0 cut at {cut}");
        } else {
            assert!(
                result.is_err(),
                "{file} tx 0 truncated to {cut} bytes decoded"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers: loading

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fabric-2.5")
}

const fn fixture(
    file: &'static str,
    channel: &'static str,
    number: u64,
    source: Source,
    content: Content,
) -> Fixture {
    Fixture {
        file,
        channel,
        number,
        source,
        content,
    }
}

fn load(fixture: &Fixture) -> (Bytes, Block) {
    load_file(fixture.file)
}

fn load_file(file: &str) -> (Bytes, Block) {
    let bytes = Bytes::from(
        std::fs::read(fixture_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}")),
    );
    let block = Block::decode(bytes.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
    (bytes, block)
}

fn envelopes(block: &Block) -> &[Bytes] {
    &block.data.as_ref().expect("block data").data
}

fn signatures_metadata(block: &Block, file: &str) -> Metadata {
    let metadata = &block.metadata.as_ref().expect("metadata").metadata;
    Metadata::decode(metadata[BlockMetadataIndex::Signatures as usize].clone())
        .unwrap_or_else(|e| panic!("{file}: metadata[SIGNATURES]: {e}"))
}

/// The FabricMSPConfig of every org in a channel's genesis config, by MSP ID:
/// Channel → Orderer/Application → org groups → values["MSP"].
fn channel_msp_configs(channel: &str) -> BTreeMap<String, FabricMspConfig> {
    let file = format!("{channel}-block-0.block");
    let (_, block) = load_file(&file);
    let tx = TxEnvelope::decode(envelopes(&block)[0].clone(), Limits::default()).unwrap();
    let TxBody::Config(config_envelope) = tx.body else {
        panic!("{file}: not a config block");
    };
    let channel_group = config_envelope
        .config
        .and_then(|config| config.channel_group)
        .expect("channel group");
    let mut configs = BTreeMap::new();
    for section in ["Orderer", "Application"] {
        let section_group = &channel_group.groups[section];
        for (org, group) in &section_group.groups {
            let msp_config = MspConfig::decode(group.values["MSP"].value.clone()).unwrap();
            assert_eq!(
                msp_config.r#type, 0,
                "{file}: {section}/{org}: not an X.509 MSP"
            );
            let config = FabricMspConfig::decode(msp_config.config).unwrap();
            configs.insert(config.name.clone(), config);
        }
    }
    assert_eq!(
        configs.keys().collect::<Vec<_>>(),
        ["OrdererMSP", "Org1MSP"],
        "{file}: MSPs"
    );
    configs
}

/// An MSP manager holding the MSPs of a channel's genesis config.
fn channel_msps(channel: &str) -> MspManager {
    MspManager::new(
        channel_msp_configs(channel)
            .into_values()
            .map(|config| Msp::from_config(config).unwrap()),
    )
}

/// Every directory named `msp` below `root`, sorted.
fn msp_folders(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name == "msp") {
                    found.push(path.clone());
                }
                pending.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Every regular file below `root`.
fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

fn reserialize(identity: &SerializedIdentity, msp_id: &str) -> Bytes {
    SerializedIdentity {
        mspid: msp_id.to_owned(),
        id_bytes: identity.id_bytes.clone(),
    }
    .encode_to_vec()
    .into()
}

// ---------------------------------------------------------------------------------------------
// Helpers: re-encoding layer by layer

/// Decodes `bytes` as `M` and asserts that prost re-encodes it to the same bytes.
fn reencoded<M: Message + Default>(bytes: &Bytes, at: &str, layer: &str) -> M {
    let message = M::decode(bytes.clone()).unwrap_or_else(|e| panic!("{at}: {layer}: {e}"));
    assert_eq!(
        message.encode_to_vec(),
        bytes.as_ref(),
        "{at}: {layer} does not re-encode byte-identically"
    );
    message
}

/// Checks every layer of one envelope; returns how many layers were checked.
fn check_envelope_layers(raw: &Bytes, at: &str) -> usize {
    let envelope: Envelope = reencoded(raw, at, "Envelope");
    let payload: Payload = reencoded(&envelope.payload, at, "Payload");
    let header = payload.header.as_ref().expect("payload header");
    let channel_header: ChannelHeader = reencoded(&header.channel_header, at, "ChannelHeader");
    let signature_header: SignatureHeader =
        reencoded(&header.signature_header, at, "SignatureHeader");
    let mut layers = 4;
    if !signature_header.creator.is_empty() {
        reencoded::<SerializedIdentity>(&signature_header.creator, at, "creator");
        layers += 1;
    }
    match HeaderType::try_from(channel_header.r#type) {
        Ok(HeaderType::EndorserTransaction) => {
            layers + check_endorser_layers(&channel_header, &payload.data, at)
        }
        Ok(HeaderType::Config) => {
            // Decodes; its re-encoding is the subject of its own test.
            ConfigEnvelope::decode(payload.data.clone()).unwrap_or_else(|e| panic!("{at}: {e}"));
            layers + 1
        }
        other => panic!("{at}: unexpected header type {other:?}"),
    }
}

fn check_endorser_layers(channel_header: &ChannelHeader, data: &Bytes, at: &str) -> usize {
    reencoded::<ChaincodeHeaderExtension>(
        &channel_header.extension,
        at,
        "ChaincodeHeaderExtension",
    );
    let transaction: Transaction = reencoded(data, at, "Transaction");
    let mut layers = 2;
    for (index, action) in transaction.actions.iter().enumerate() {
        let at = format!("{at} action {index}");
        let signature_header: SignatureHeader =
            reencoded(&action.header, &at, "action SignatureHeader");
        reencoded::<SerializedIdentity>(&signature_header.creator, &at, "action creator");
        let action_payload: ChaincodeActionPayload =
            reencoded(&action.payload, &at, "ChaincodeActionPayload");
        let proposal_payload: ChaincodeProposalPayload = reencoded(
            &action_payload.chaincode_proposal_payload,
            &at,
            "ChaincodeProposalPayload",
        );
        let invocation: ChaincodeInvocationSpec =
            reencoded(&proposal_payload.input, &at, "ChaincodeInvocationSpec");
        layers += 5 + check_lifecycle_args(&invocation, &at);

        let endorsed = action_payload.action.as_ref().expect("endorsed action");
        let response_payload: ProposalResponsePayload = reencoded(
            &endorsed.proposal_response_payload,
            &at,
            "ProposalResponsePayload",
        );
        let chaincode_action: ChaincodeAction =
            reencoded(&response_payload.extension, &at, "ChaincodeAction");
        let results: TxReadWriteSet = reencoded(&chaincode_action.results, &at, "TxReadWriteSet");
        layers += 3;
        for ns in &results.ns_rwset {
            let at = format!("{at} namespace {}", ns.namespace);
            reencoded::<KvrwSet>(&ns.rwset, &at, "KVRWSet");
            layers += 1;
            for collection in &ns.collection_hashed_rwset {
                let layer = format!("HashedRWSet of {}", collection.collection_name);
                reencoded::<HashedRwSet>(&collection.hashed_rwset, &at, &layer);
                layers += 1;
            }
        }
        if !chaincode_action.events.is_empty() {
            reencoded::<ChaincodeEvent>(&chaincode_action.events, &at, "ChaincodeEvent");
            layers += 1;
        }
        for endorsement in &endorsed.endorsements {
            reencoded::<SerializedIdentity>(&endorsement.endorser, &at, "endorser");
            layers += 1;
        }
    }
    layers
}

/// A `_lifecycle` call's second argument is its serialized arguments message,
/// whose (here empty) validation parameter would be a serialized
/// ApplicationPolicy.
fn check_lifecycle_args(invocation: &ChaincodeInvocationSpec, at: &str) -> usize {
    let spec = invocation.chaincode_spec.as_ref().expect("chaincode spec");
    if spec.chaincode_id.as_ref().map(|id| id.name.as_str()) != Some("_lifecycle") {
        return 0;
    }
    let args = &spec.input.as_ref().expect("chaincode input").args;
    let validation_parameter = match args[0].as_ref() {
        b"ApproveChaincodeDefinitionForMyOrg" => {
            let args: ApproveChaincodeDefinitionForMyOrgArgs =
                reencoded(&args[1], at, "ApproveChaincodeDefinitionForMyOrgArgs");
            assert_eq!(
                (args.name.as_str(), args.version.as_str()),
                ("kv", "1.0"),
                "{at}"
            );
            assert_eq!(args.sequence, 1, "{at}: sequence");
            args.validation_parameter
        }
        b"CommitChaincodeDefinition" => {
            let args: CommitChaincodeDefinitionArgs =
                reencoded(&args[1], at, "CommitChaincodeDefinitionArgs");
            assert_eq!(
                (args.name.as_str(), args.version.as_str()),
                ("kv", "1.0"),
                "{at}"
            );
            assert_eq!(args.sequence, 1, "{at}: sequence");
            args.validation_parameter
        }
        other => panic!("{at}: unexpected _lifecycle function {other:?}"),
    };
    // The CLI was given no endorsement policy, so the definition carries
    // none and `_lifecycle` applies the channel's default,
    // /Channel/Application/Endorsement (the README's "default endorsement
    // policy").
    assert!(
        validation_parameter.is_empty(),
        "{at}: unexpected validation parameter {:?}",
        ApplicationPolicy::decode(validation_parameter.clone())
    );
    1
}

/// metadata[SIGNATURES] → Metadata → OrdererBlockMetadata → consenter
/// metadata (a Metadata wrapping etcdraft.BlockMetadata), and each
/// signature's header and signer; COMMIT_HASH in the peer's copies.
fn check_metadata_layers(block: &Block, fixture: &Fixture) -> usize {
    let at = fixture.file;
    let metadata = &block.metadata.as_ref().expect("metadata").metadata;
    assert_eq!(metadata.len(), 5, "{at}: metadata entries");
    let signatures: Metadata = reencoded(
        &metadata[BlockMetadataIndex::Signatures as usize],
        at,
        "metadata[SIGNATURES]",
    );
    let orderer_metadata: OrdererBlockMetadata =
        reencoded(&signatures.value, at, "OrdererBlockMetadata");
    let mut layers = 2;
    if matches!(fixture.content, Content::Genesis) {
        assert!(
            orderer_metadata.consenter_metadata.is_empty(),
            "{at}: consenter metadata"
        );
    } else {
        let consenter: Metadata = reencoded(
            &orderer_metadata.consenter_metadata,
            at,
            "consenter Metadata",
        );
        let raft: weft_protos::etcdraft::BlockMetadata =
            reencoded(&consenter.value, at, "etcdraft.BlockMetadata");
        assert_eq!(raft.consenter_ids, [1], "{at}: Raft consenters");
        assert_eq!(
            orderer_metadata.consenter_metadata.len(),
            9,
            "{at}: README's 9 bytes"
        );
        layers += 2;
    }
    for signature in &signatures.signatures {
        let header: SignatureHeader =
            reencoded(&signature.signature_header, at, "block SignatureHeader");
        reencoded::<SerializedIdentity>(&header.creator, at, "block signer");
        layers += 2;
    }
    if fixture.source == Source::Peer {
        reencoded::<Metadata>(
            &metadata[BlockMetadataIndex::CommitHash as usize],
            at,
            "metadata[COMMIT_HASH]",
        );
        layers += 1;
    }
    layers
}

/// Decodes the values and policies of the config tree (each once), asserts
/// they re-encode byte-identically except `Capabilities`, and for those
/// asserts that the only difference is Go's explicit empty map value.
/// Returns the paths of the groups that carry Capabilities.
fn check_config_values(channel_group: &ConfigGroup, file: &str) -> Vec<String> {
    let mut capabilities_at = Vec::new();
    for_each_group(channel_group, "Channel", &mut |path, group| {
        for (key, value) in &group.values {
            let at = format!("{file}: {path}/values/{key}");
            let bytes = &value.value;
            match key.as_str() {
                "MSP" => {
                    let msp: MspConfig = reencoded(bytes, &at, "MSPConfig");
                    reencoded::<FabricMspConfig>(&msp.config, &at, "FabricMSPConfig");
                }
                "BatchSize" => {
                    reencoded::<BatchSize>(bytes, &at, "BatchSize");
                }
                "BatchTimeout" => {
                    reencoded::<BatchTimeout>(bytes, &at, "BatchTimeout");
                }
                "ConsensusType" => {
                    let consensus: ConsensusType = reencoded(bytes, &at, "ConsensusType");
                    assert_eq!(consensus.r#type, "etcdraft", "{at}");
                    reencoded::<weft_protos::etcdraft::ConfigMetadata>(
                        &consensus.metadata,
                        &at,
                        "etcdraft.ConfigMetadata",
                    );
                }
                "ChannelRestrictions" => {
                    reencoded::<ChannelRestrictions>(bytes, &at, "ChannelRestrictions");
                }
                "HashingAlgorithm" => {
                    let algorithm: HashingAlgorithm = reencoded(bytes, &at, "HashingAlgorithm");
                    assert_eq!(algorithm.name, "SHA256", "{at}");
                }
                "BlockDataHashingStructure" => {
                    reencoded::<BlockDataHashingStructure>(bytes, &at, "BlockDataHashing");
                }
                "OrdererAddresses" | "Endpoints" => {
                    reencoded::<OrdererAddresses>(bytes, &at, "OrdererAddresses");
                }
                "Capabilities" => {
                    let capabilities = Capabilities::decode(bytes.clone()).unwrap();
                    assert!(!capabilities.capabilities.is_empty(), "{at}: no capability");
                    assert_eq!(
                        go_encoded_capabilities(&capabilities),
                        bytes.as_ref(),
                        "{at}: not Go's encoding of {capabilities:?}"
                    );
                    let reencoded = capabilities.encode_to_vec();
                    assert_eq!(
                        reencoded.len() + 2 * capabilities.capabilities.len(),
                        bytes.len(),
                        "{at}: prost should omit exactly the empty values"
                    );
                    assert_eq!(
                        Capabilities::decode(reencoded.as_slice()).unwrap(),
                        capabilities,
                        "{at}: prost's encoding decodes differently"
                    );
                    capabilities_at.push(path.to_owned());
                }
                other => panic!("{at}: unexpected config value {other}"),
            }
        }
        for (key, config_policy) in &group.policies {
            let at = format!("{file}: {path}/policies/{key}");
            let policy = config_policy.policy.as_ref().expect("policy");
            match PolicyType::try_from(policy.r#type) {
                Ok(PolicyType::Signature) => {
                    let envelope: SignaturePolicyEnvelope =
                        reencoded(&policy.value, &at, "SignaturePolicyEnvelope");
                    for principal in &envelope.identities {
                        reencoded::<MspRole>(&principal.principal, &at, "MSPRole");
                    }
                }
                Ok(PolicyType::ImplicitMeta) => {
                    reencoded::<ImplicitMetaPolicy>(&policy.value, &at, "ImplicitMetaPolicy");
                }
                other => panic!("{at}: unexpected policy type {other:?}"),
            }
        }
    });
    capabilities_at
}

/// Go's encoding of Capabilities: each map entry carries its (empty)
/// Capability value explicitly as `12 00`.
fn go_encoded_capabilities(capabilities: &Capabilities) -> Vec<u8> {
    let mut out = Vec::new();
    for name in capabilities.capabilities.keys() {
        let mut entry = vec![0x0a, name.len() as u8];
        entry.extend_from_slice(name.as_bytes());
        entry.extend_from_slice(&[0x12, 0x00]);
        out.extend_from_slice(&[0x0a, entry.len() as u8]);
        out.extend_from_slice(&entry);
    }
    out
}

/// Calls `visit(path, group)` for `group` and every group below it.
fn for_each_group(group: &ConfigGroup, path: &str, visit: &mut dyn FnMut(&str, &ConfigGroup)) {
    visit(path, group);
    for (key, child) in &group.groups {
        for_each_group(child, &format!("{path}/{key}"), visit);
    }
}

/// The encoding of one map entry `key → value` (value already encoded) as
/// field `tag` of its parent, the way both Go and prost write a non-empty one.
fn map_entry(tag: u32, key: &str, value: &[u8]) -> Vec<u8> {
    let mut entry = Vec::new();
    prost::encoding::string::encode(1, &key.to_owned(), &mut entry);
    prost::encoding::bytes::encode(2, &value.to_vec(), &mut entry);
    let mut field = Vec::new();
    prost::encoding::bytes::encode(tag, &entry, &mut field);
    field
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// The size of a length-delimited field with a one-byte tag and `len` bytes of content.
fn field_len(len: usize) -> usize {
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

// ---------------------------------------------------------------------------------------------
// Helpers: the view

fn check_genesis_view(tx: &TxEnvelope, fixture: &Fixture, at: &str) {
    assert_eq!(
        tx.header_type(),
        Some(HeaderType::Config),
        "{at}: header type"
    );
    let TxBody::Config(config_envelope) = &tx.body else {
        panic!("{at}: not decoded as a config");
    };
    let config: &Config = config_envelope.config.as_ref().expect("config");
    assert_eq!(config.sequence, 0, "{at}: genesis config sequence");
    let channel_group = config.channel_group.as_ref().expect("channel group");
    assert_eq!(
        channel_group.groups.keys().collect::<Vec<_>>(),
        ["Application", "Orderer"],
        "{at}: top-level groups"
    );
    let orderer = &channel_group.groups["Orderer"];
    let batch_size = BatchSize::decode(orderer.values["BatchSize"].value.clone()).unwrap();
    let max_message_count = if fixture.channel == "ch10" { 10 } else { 100 };
    assert_eq!(
        batch_size.max_message_count, max_message_count,
        "{at}: MaxMessageCount"
    );
    assert_eq!(
        batch_size.preferred_max_bytes,
        512 * 1024,
        "{at}: PreferredMaxBytes"
    );
    assert_eq!(
        batch_size.absolute_max_bytes,
        99 * 1024 * 1024,
        "{at}: AbsoluteMaxBytes"
    );
    let timeout = BatchTimeout::decode(orderer.values["BatchTimeout"].value.clone()).unwrap();
    assert_eq!(timeout.timeout, "1s", "{at}: BatchTimeout");
}

/// Checks an endorser transaction's view: chaincode, function, creator, one
/// endorsed action with a 200 response. Returns the single write in the
/// chaincode's namespace, if any.
fn check_endorser_view(
    tx: &TxEnvelope,
    chaincode: &str,
    function: &str,
    creator: &str,
    at: &str,
) -> Option<(String, String)> {
    assert_eq!(
        tx.header_type(),
        Some(HeaderType::EndorserTransaction),
        "{at}: header type"
    );
    let TxBody::Endorser(transaction) = &tx.body else {
        panic!("{at}: not decoded as an endorser transaction");
    };
    assert_eq!(
        transaction.chaincode_id.as_ref().map(|id| id.name.as_str()),
        Some(chaincode),
        "{at}: chaincode in the channel header"
    );
    let creator_identity = SerializedIdentity::decode(tx.creator().clone()).unwrap();
    let certificate = weft_msp::Certificate::from_pem(&creator_identity.id_bytes).unwrap();
    assert_eq!(certificate.common_name(), Some(creator), "{at}: creator");

    assert_eq!(transaction.actions.len(), 1, "{at}: actions");
    let action = &transaction.actions[0];
    assert_eq!(
        action.signature_header.creator, tx.signature_header.creator,
        "{at}: action creator differs from the envelope's"
    );
    assert_eq!(action.endorsements.len(), 1, "{at}: endorsements");
    let response = action.chaincode_action.response.as_ref().expect("response");
    assert_eq!(response.status, 200, "{at}: response status");
    let invocation = ChaincodeProposalPayload::decode(action.chaincode_proposal_payload.clone())
        .and_then(|payload| ChaincodeInvocationSpec::decode(payload.input))
        .unwrap();
    let args = &invocation
        .chaincode_spec
        .as_ref()
        .and_then(|spec| spec.input.as_ref())
        .expect("chaincode input")
        .args;
    assert_eq!(args[0].as_ref(), function.as_bytes(), "{at}: function");

    let namespace = action
        .namespaces
        .iter()
        .find(|ns| ns.namespace == chaincode)
        .unwrap_or_else(|| panic!("{at}: no {chaincode} namespace in the rwset"));
    if chaincode != "kv" {
        return None;
    }
    assert_eq!(response.payload.as_ref(), b"ok", "{at}: put returns ok");
    assert_eq!(namespace.kv.writes.len(), 1, "{at}: kv writes");
    let write = &namespace.kv.writes[0];
    assert!(!write.is_delete, "{at}: a put is not a delete");
    assert_eq!(args.len(), 3, "{at}: put(key, value)");
    assert_eq!(
        args[1].as_ref(),
        write.key.as_bytes(),
        "{at}: written key is the argument"
    );
    assert_eq!(args[2], write.value, "{at}: written value is the argument");
    Some((
        write.key.clone(),
        String::from_utf8(write.value.to_vec()).expect("utf-8 value"),
    ))
}

fn is_uuid4(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
        && groups[2].starts_with('4')
}
