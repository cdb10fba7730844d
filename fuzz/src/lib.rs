//! What weft's fuzz targets share: the real Fabric 2.5 network of
//! `tests/fixtures/fabric-2.5` (its channel `ch10`, its MSPs and signing
//! keys) and each target's seed inputs, derived from that network's blocks.
//!
//! The targets sign what they are given with the fixture's real keys where
//! weft would check a signature first, so that mutated inputs get past the
//! signature into the code behind it; everything else is as a node runs it.
//!
//! `fuzz/run.sh` builds and runs the targets; `fuzz/run.sh seeds` writes
//! every target's seeds into `fuzz/seeds/<target>/`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use prost::Message;
use weft_msp::{MspManager, Signer, UnixTime};
use weft_peer_committer::ChannelContext;
use weft_protos::block::config_of_block;
use weft_protos::common::{Block, Envelope, HeaderType, Payload};
use weft_protos::protos::{ProposalResponse, SignedProposal};
use weft_protos::tx::{Invocation, Proposal, ReadWriteSetBuilder, SimulationResult, endorse};
use weft_statedb::memory::{MemoryOptions, MemoryState};
use weft_statedb::{Height, UpdateBatch, VersionedState};

pub mod harness;
pub mod seeds;

/// The channel of the fixture network the targets run against.
pub const CHANNEL: &str = "ch10";

/// A fixed clock, within every fixture certificate's validity, so that a
/// run is repeatable.
pub const NOW: UnixTime = 1_795_400_000;

/// The fixture network's folder.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/fabric-2.5")
}

fn org1(path: &str) -> PathBuf {
    fixtures()
        .join("crypto/peerOrganizations/org1.example.com")
        .join(path)
}

/// A fixture block by file name.
pub fn block(name: &str) -> Block {
    let bytes = std::fs::read(fixtures().join(name)).unwrap();
    Block::decode(bytes.as_slice()).unwrap()
}

/// The genesis block of [`CHANNEL`].
pub fn genesis() -> &'static Block {
    static GENESIS: OnceLock<Block> = OnceLock::new();
    GENESIS.get_or_init(|| block("ch10-block-0.block"))
}

/// [`CHANNEL`]'s context as its genesis block configures it: its MSPs and
/// policies.
pub fn context() -> &'static ChannelContext {
    static CONTEXT: OnceLock<ChannelContext> = OnceLock::new();
    CONTEXT.get_or_init(|| {
        let (channel_id, config) = config_of_block(genesis()).unwrap();
        ChannelContext::from_config(&channel_id, 0, &config).unwrap()
    })
}

/// The channel's MSPs.
pub fn msps() -> &'static Arc<MspManager> {
    &context().msps
}

fn signer_of(msp_dir: PathBuf) -> Arc<Signer> {
    let signer = weft_msp::folder::load(&msp_dir, "Org1MSP")
        .unwrap()
        .signer
        .unwrap();
    Arc::new(signer)
}

/// `User1@org1.example.com`, the fixture's submitting client.
pub fn user1() -> &'static Arc<Signer> {
    static USER1: OnceLock<Arc<Signer>> = OnceLock::new();
    USER1.get_or_init(|| signer_of(org1("users/User1@org1.example.com/msp")))
}

/// `Admin@org1.example.com`.
pub fn admin1() -> &'static Arc<Signer> {
    static ADMIN1: OnceLock<Arc<Signer>> = OnceLock::new();
    ADMIN1.get_or_init(|| signer_of(org1("users/Admin@org1.example.com/msp")))
}

/// `peer0.org1.example.com`, the fixture's endorser.
pub fn peer0() -> &'static Arc<Signer> {
    static PEER0: OnceLock<Arc<Signer>> = OnceLock::new();
    PEER0.get_or_init(|| signer_of(org1("peers/peer0.org1.example.com/msp")))
}

/// The Org1 MSP folder of peer0 (its `config.yaml` enables NodeOUs).
pub fn peer0_msp_folder() -> PathBuf {
    org1("peers/peer0.org1.example.com/msp")
}

/// `payload` as a client signs it into an envelope.
pub fn signed_envelope(payload: &[u8], signer: &Signer) -> Envelope {
    Envelope {
        signature: signer.sign(payload).unwrap().into(),
        payload: Bytes::copy_from_slice(payload),
    }
}

/// The proposal User1 sends to run `kv put key value` on [`CHANNEL`]; its
/// nonce is fixed so that the TxID is too.
pub fn kv_proposal(key: &str, value: &str) -> Proposal {
    let invocation = Invocation {
        channel_id: CHANNEL,
        chaincode: "kv",
        args: ["put", key, value]
            .into_iter()
            .map(|arg| Bytes::copy_from_slice(arg.as_bytes()))
            .collect(),
        nonce: Bytes::from_static(b"a fixed fuzzing nonce of 24b"),
        timestamp_seconds: NOW,
    };
    use weft_protos::tx::Sign;
    Proposal::new(&invocation, user1().identity())
}

/// peer0's endorsement of `proposal`: a write of `key`.
pub fn kv_endorsement(proposal: &Proposal, key: &str, value: &str) -> ProposalResponse {
    let mut rwset = ReadWriteSetBuilder::new();
    rwset.read("kv", key, None);
    rwset.write("kv", key, Bytes::copy_from_slice(value.as_bytes()));
    let result = SimulationResult {
        results: rwset.encode(),
        response: weft_protos::protos::Response {
            status: 200,
            message: String::new(),
            payload: Bytes::from_static(b"ok"),
        },
        chaincode_id: weft_protos::protos::ChaincodeId {
            name: "kv".to_owned(),
            version: "1.0".to_owned(),
            path: String::new(),
        },
        ..SimulationResult::default()
    };
    endorse(proposal, &result, peer0().as_ref()).unwrap()
}

/// `proposal` signed by User1.
pub fn signed_proposal(proposal: &Proposal) -> SignedProposal {
    proposal.signed(user1().as_ref()).unwrap()
}

/// The serialized payloads of every envelope of the fixture blocks.
pub fn fixture_payloads() -> Vec<Bytes> {
    fixture_envelopes()
        .into_iter()
        .map(|raw| Envelope::decode(raw).unwrap().payload)
        .collect()
}

/// Every envelope of the fixture blocks of [`CHANNEL`], as bytes.
pub fn fixture_envelopes() -> Vec<Bytes> {
    fixture_blocks()
        .into_iter()
        .flat_map(|block| block.data.map(|data| data.data).unwrap_or_default())
        .collect()
}

/// The fixture blocks of [`CHANNEL`], genesis first.
pub fn fixture_blocks() -> Vec<Block> {
    (0..5)
        .map(|n| block(&format!("ch10-block-{n}.block")))
        .collect()
}

/// Whether `payload`'s header says `kind`.
pub fn is_header_type(payload: &Bytes, kind: HeaderType) -> bool {
    Payload::decode(payload.clone())
        .ok()
        .and_then(|payload| payload.header)
        .and_then(|header| weft_protos::common::ChannelHeader::decode(header.channel_header).ok())
        .is_some_and(|header| header.r#type == kind as i32)
}

/// A world state in the scratch directory holding `entries` (key, value,
/// version) of the `kv` namespace, applied at `height`.
pub fn kv_state(
    entries: impl IntoIterator<Item = (String, Bytes, Height)>,
    height: Height,
) -> MemoryState {
    let state = MemoryState::open(&scratch().join("state"), MemoryOptions::default()).unwrap();
    let mut batch = UpdateBatch::new();
    for (key, value, version) in entries {
        batch.put("kv", &key, value, version);
    }
    state.apply(&batch, height).unwrap();
    state
}

/// The fixture channel as the orderer's Broadcast admits envelopes into
/// it.
pub fn orderer_channel() -> &'static weft_orderer::fuzzing::FuzzedChannel {
    static CHANNEL: OnceLock<weft_orderer::fuzzing::FuzzedChannel> = OnceLock::new();
    CHANNEL.get_or_init(|| weft_orderer::fuzzing::FuzzedChannel::from_genesis(genesis()).unwrap())
}

/// A scratch directory that lives as long as the process.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// Splits `data` into the length-delimited protobuf messages it starts
/// with (a target's way to take several messages from one input); stops at
/// the first that does not decode.
pub fn length_delimited<M: Message + Default>(mut data: &[u8]) -> Vec<M> {
    let mut messages = Vec::new();
    while !data.is_empty() {
        match M::decode_length_delimited(&mut data) {
            Ok(message) => messages.push(message),
            Err(_) => break,
        }
    }
    messages
}

/// `messages` in the form [`length_delimited`] reads.
pub fn encode_length_delimited<M: Message>(messages: &[M]) -> Vec<u8> {
    let mut out = Vec::new();
    for message in messages {
        message.encode_length_delimited(&mut out).unwrap();
    }
    out
}

/// A CONFIG_UPDATE envelope on [`CHANNEL`] carrying `config_update` (the
/// serialized `common.ConfigUpdate`) signed by Org1's admin, who also
/// submits it.
pub fn config_update_envelope(config_update: &[u8]) -> Envelope {
    use weft_protos::common::{ConfigSignature, ConfigUpdateEnvelope, SignatureHeader};
    use weft_protos::tx::Sign;
    let admin = admin1();
    let signature_header: Bytes = SignatureHeader {
        creator: admin.identity(),
        nonce: Bytes::from_static(b"config signature nonce"),
    }
    .encode_to_vec()
    .into();
    let mut signed = signature_header.to_vec();
    signed.extend_from_slice(config_update);
    let envelope = ConfigUpdateEnvelope {
        config_update: Bytes::copy_from_slice(config_update),
        signatures: vec![ConfigSignature {
            signature: admin.sign(&signed).unwrap().into(),
            signature_header,
        }],
    };
    weft_protos::tx::signed_envelope(
        HeaderType::ConfigUpdate,
        CHANNEL,
        envelope.encode_to_vec().into(),
        admin.as_ref(),
        Bytes::from_static(b"config update nonce"),
        NOW,
    )
    .unwrap()
}

/// Writes `target`'s seeds into the directory `WEFT_FUZZ_WRITE_SEEDS`
/// names and exits, when it is set (`fuzz/run.sh seeds`); otherwise does
/// nothing. Called from each target's `init`.
pub fn write_seeds_if_asked(target: &str) {
    let Some(dir) = std::env::var_os("WEFT_FUZZ_WRITE_SEEDS") else {
        return;
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (index, seed) in seeds::of(target).iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{index:03}")), seed).unwrap();
    }
    std::process::exit(0);
}
