//! The `weft` command as a user runs it: channel genesis, block inspect,
//! crypto generate, and their errors on bad input.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use prost::Message;
use weft_protos::common::{Block, ConfigEnvelope, Envelope, Payload};

fn weft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .output()
        .expect("weft runs")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fabric-2.5")
}

/// The fixture's configtx.yaml names its MSP folders relative to the folder
/// it was used from, which held `crypto/`; recreate that layout.
fn configtx_beside_crypto(dir: &Path) -> PathBuf {
    let config = dir.join("configtx.yaml");
    std::fs::copy(fixtures().join("config/configtx.yaml"), &config).unwrap();
    std::os::unix::fs::symlink(fixtures().join("crypto"), dir.join("crypto")).unwrap();
    config
}

fn config_envelope_of(block: &Block) -> (weft_protos::common::ChannelHeader, ConfigEnvelope) {
    let envelope = Envelope::decode(block.data.as_ref().unwrap().data[0].clone()).unwrap();
    let payload = Payload::decode(envelope.payload).unwrap();
    let header = payload.header.unwrap();
    let channel_header = weft_protos::common::ChannelHeader::decode(header.channel_header).unwrap();
    (
        channel_header,
        ConfigEnvelope::decode(payload.data).unwrap(),
    )
}

/// The paths of groups, values and policies that differ between two config
/// trees (values and policies compared as bytes).
fn differing_paths(
    path: &str,
    ours: &weft_protos::common::ConfigGroup,
    theirs: &weft_protos::common::ConfigGroup,
) -> Vec<String> {
    let mut differences = Vec::new();
    if (ours.version, &ours.mod_policy) != (theirs.version, &theirs.mod_policy) {
        differences.push(format!("{path} (version or mod_policy)"));
    }
    let keys = |a: Vec<&String>, b: Vec<&String>| {
        let mut all: Vec<String> = a.into_iter().chain(b).cloned().collect();
        all.sort();
        all.dedup();
        all
    };
    for key in keys(ours.values.keys().collect(), theirs.values.keys().collect()) {
        if ours.values.get(&key) != theirs.values.get(&key) {
            differences.push(format!("{path}/values/{key}"));
        }
    }
    for key in keys(
        ours.policies.keys().collect(),
        theirs.policies.keys().collect(),
    ) {
        if ours.policies.get(&key) != theirs.policies.get(&key) {
            differences.push(format!("{path}/policies/{key}"));
        }
    }
    for key in keys(ours.groups.keys().collect(), theirs.groups.keys().collect()) {
        match (ours.groups.get(&key), theirs.groups.get(&key)) {
            (Some(a), Some(b)) => {
                differences.extend(differing_paths(&format!("{path}/{key}"), a, b))
            }
            _ => differences.push(format!("{path}/{key} (missing on one side)")),
        }
    }
    differences
}

fn read_block(path: &Path) -> Block {
    Block::decode(std::fs::read(path).unwrap().as_slice()).unwrap()
}

#[test]
fn genesis_from_fabrics_configtx_matches_fabrics_genesis_block() {
    // Goal: from the very configtx.yaml and MSP folders that produced the
    // real Fabric 2.5 channel ch10, weft writes the same channel config
    // tree (every group, value and policy, byte for byte) as configtxgen did.
    let dir = tempfile::tempdir().unwrap();
    let config = configtx_beside_crypto(dir.path());
    let output = dir.path().join("ch10.block");
    let run = weft(&[
        "channel",
        "genesis",
        "--config",
        config.to_str().unwrap(),
        "--profile",
        "Ch10",
        "--channel",
        "ch10",
        "--output",
        output.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let ours = read_block(&output);
    let fabric = read_block(&fixtures().join("ch10-block-0.block"));
    let (our_header, our_config) = config_envelope_of(&ours);
    let (fabric_header, fabric_config) = config_envelope_of(&fabric);
    let ours_tree = our_config.config.as_ref().unwrap();
    let fabric_tree = fabric_config.config.as_ref().unwrap();
    assert_eq!(ours_tree.sequence, fabric_tree.sequence);
    let differences = differing_paths(
        "/Channel",
        ours_tree.channel_group.as_ref().unwrap(),
        fabric_tree.channel_group.as_ref().unwrap(),
    );
    assert!(
        differences.is_empty(),
        "config differs from Fabric's at {differences:?}"
    );
    assert_eq!(our_config.config, fabric_config.config);
    assert_eq!(our_header.r#type, fabric_header.r#type);
    assert_eq!(our_header.version, fabric_header.version);
    assert_eq!(our_header.channel_id, "ch10");
    assert_eq!(ours.metadata, fabric.metadata, "genesis metadata slots");

    let header = ours.header.as_ref().unwrap();
    assert_eq!(header.number, 0);
    assert!(header.previous_hash.is_empty());
    assert_eq!(
        header.data_hash.as_ref(),
        weft_protos::hash::block_data_hash(ours.data.as_ref().unwrap())
    );
}

#[test]
fn the_shipped_configs_make_a_channel_whose_policies_admit_its_users() {
    // Goal: config/crypto.yaml and config/channel.yaml, as a newcomer runs
    // them, give crypto material and a genesis block that agree: the MSPs in
    // the block validate the generated identities, and the channel's Writers
    // policy admits a generated client's signature but not a peer's.
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crypto = dir.path().join("crypto");
    let run = weft(&[
        "crypto",
        "generate",
        "--config",
        root.join("config/crypto.yaml").to_str().unwrap(),
        "--output",
        crypto.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let channel_yaml = dir.path().join("channel.yaml");
    std::fs::copy(root.join("config/channel.yaml"), &channel_yaml).unwrap();
    let block_path = dir.path().join("mychannel.block");
    // An environment variable overrides a key the profile inherits, as
    // configtxgen's CONFIGTX_ variables do.
    let run = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["channel", "genesis", "--config"])
        .arg(&channel_yaml)
        .args(["--channel", "mychannel", "--output"])
        .arg(&block_path)
        .env(
            "CONFIGTX_PROFILES_TWOORGS_ORDERER_BATCHSIZE_MAXMESSAGECOUNT",
            "7",
        )
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let (_, config) = config_envelope_of(&read_block(&block_path));
    let channel_group = config.config.unwrap().channel_group.unwrap();
    let batch_size = weft_protos::orderer::BatchSize::decode(
        channel_group.groups["Orderer"].values["BatchSize"]
            .value
            .clone(),
    )
    .unwrap();
    assert_eq!(batch_size.max_message_count, 7);
    let mut msps = Vec::new();
    for section in ["Orderer", "Application"] {
        for org in channel_group.groups[section].groups.values() {
            let value =
                weft_protos::msp::MspConfig::decode(org.values["MSP"].value.clone()).unwrap();
            let fabric = weft_protos::msp::FabricMspConfig::decode(value.config).unwrap();
            msps.push(weft_msp::Msp::from_config(fabric).unwrap());
        }
    }
    let manager = weft_msp::MspManager::new(msps);
    let tree = weft_policy::PolicyTree::from_config(&channel_group).unwrap();

    let org1 = crypto.join("peerOrganizations/org1.example.com");
    let user =
        weft_msp::folder::load(&org1.join("users/User1@org1.example.com/msp"), "Org1MSP").unwrap();
    let peer =
        weft_msp::folder::load(&org1.join("peers/peer0.org1.example.com/msp"), "Org1MSP").unwrap();
    let signed_by = |local: &weft_msp::folder::LocalMsp| {
        let signer = local.signer.as_ref().unwrap();
        let data = bytes::Bytes::from_static(b"an envelope payload");
        vec![weft_policy::SignedData {
            signature: signer.sign(&data).unwrap().into(),
            identity: signer.serialized_identity().clone(),
            data,
        }]
    };
    let now = weft_msp::now();
    tree.evaluate(
        "/Channel/Application/Writers",
        &signed_by(&user),
        &manager,
        now,
    )
    .unwrap();
    tree.evaluate("/Channel/Writers", &signed_by(&user), &manager, now)
        .unwrap();
    assert!(
        tree.evaluate(
            "/Channel/Application/Writers",
            &signed_by(&peer),
            &manager,
            now
        )
        .is_err()
    );
    tree.evaluate(
        "/Channel/Application/Org1MSP/Endorsement",
        &signed_by(&peer),
        &manager,
        now,
    )
    .unwrap();
    let orderer = weft_msp::folder::load(
        &crypto.join("ordererOrganizations/example.com/orderers/orderer0.example.com/msp"),
        "OrdererMSP",
    )
    .unwrap();
    tree.evaluate(
        "/Channel/Orderer/BlockValidation",
        &signed_by(&orderer),
        &manager,
        now,
    )
    .unwrap();
}

#[test]
fn genesis_errors_name_the_file_and_key() {
    // Goal: a bad configtx.yaml is reported with the file and the key path
    // at fault, and no block is written.
    let dir = tempfile::tempdir().unwrap();
    let config = configtx_beside_crypto(dir.path());
    let original = std::fs::read_to_string(&config).unwrap();
    let output = dir.path().join("out.block");
    let cases = [
        (
            original.replace("MaxMessageCount: 10\n", "MaxMessageCount: ten\n"),
            "Profiles.Ch10.Orderer.BatchSize.MaxMessageCount",
        ),
        (
            original.replace("OR('Org1MSP.peer')", "OR('Org1MSP.peeer')"),
            "Profiles.Ch10.Application.Organizations[0].Policies.Endorsement.Rule",
        ),
        (
            original.replace("BatchTimeout: 1s", "BatchTimeout: soon"),
            "Profiles.Ch10.Orderer.BatchTimeout",
        ),
        (
            original.replace(
                "MSPDir: crypto/peerOrganizations",
                "MSPDir: nowhere/peerOrganizations",
            ),
            "Profiles.Ch10.Application.Organizations[0].MSPDir",
        ),
        (
            original.replace("  Ch10:\n", "  Ch10:\n    Colour: blue\n"),
            "unknown field `Colour`",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(&config, &text).unwrap();
        let run = weft(&[
            "channel",
            "genesis",
            "--config",
            config.to_str().unwrap(),
            "--profile",
            "Ch10",
            "--channel",
            "ch10",
            "--output",
            output.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{expected}: succeeded");
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in: {stderr}"
        );
        assert!(stderr.contains("configtx.yaml"), "file not named: {stderr}");
        assert!(!output.exists(), "{expected}: a block was written");
    }

    std::fs::write(&config, &original).unwrap();
    let run = weft(&[
        "channel",
        "genesis",
        "--config",
        config.to_str().unwrap(),
        "--channel",
        "ch10",
        "--output",
        output.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("--profile") && stderr.contains("Ch10") && stderr.contains("Ch100"),
        "{stderr}"
    );
    let run = weft(&[
        "channel",
        "genesis",
        "--config",
        config.to_str().unwrap(),
        "--profile",
        "Ch10",
        "--channel",
        "Bad_Name",
        "--output",
        output.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&run.stderr).contains("invalid channel name"));
}

#[test]
fn block_inspect_prints_every_fixture_block_with_layers_decoded() {
    // Goal: `weft block inspect` reads every real Fabric block and shows
    // the nested layers a person needs: channel header, config values,
    // chaincode read/write sets, validation codes of peer copies.
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [fixtures(), fixtures().join("extra")] {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "block") {
                files.push(path);
            }
        }
    }
    assert_eq!(files.len(), 12);
    for file in &files {
        let run = weft(&["block", "inspect", file.to_str().unwrap()]);
        assert!(
            run.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&run.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
        let first = &json["data"]["data"][0]["payload"];
        let channel_id = first["header"]["channel_header"]["channel_id"]
            .as_str()
            .unwrap();
        assert!(
            channel_id == "ch10" || channel_id == "ch100",
            "{}",
            file.display()
        );
        let name = file.file_name().unwrap().to_str().unwrap();
        if name.ends_with("block-0.block") {
            let orderer = &first["data"]["config"]["channel_group"]["groups"]["Orderer"];
            assert_eq!(
                orderer["values"]["ConsensusType"]["value"]["type"], "etcdraft",
                "{name}"
            );
            let msp = &first["data"]["config"]["channel_group"]["groups"]["Application"]["groups"]
                ["Org1MSP"]["values"]["MSP"]["value"]["config"];
            assert_eq!(msp["name"], "Org1MSP", "{name}");
        }
        if name.contains("block-3") || name.contains("block-4") {
            let action = &first["data"]["actions"][0]["payload"]["action"];
            let extension = &action["proposal_response_payload"]["extension"];
            let namespaces = extension["results"]["ns_rwset"].as_array().unwrap();
            assert!(
                namespaces.iter().any(|ns| ns["namespace"] == "kv"),
                "{name}"
            );
            assert_eq!(
                first["header"]["signature_header"]["creator"]["mspid"], "Org1MSP",
                "{name}"
            );
        }
        if name.contains("from-peer") {
            let filter = json["metadata"]["metadata"][2].as_array().unwrap();
            assert!(filter.iter().all(|code| code == "VALID"), "{name}");
        }
    }
}

#[test]
fn block_inspect_rejects_what_is_not_a_block() {
    // Goal: a truncated or foreign file is an error naming the file, not a panic.
    let dir = tempfile::tempdir().unwrap();
    let truncated = dir.path().join("truncated.block");
    let bytes = std::fs::read(fixtures().join("ch10-block-3.block")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let run = weft(&["block", "inspect", truncated.to_str().unwrap()]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("truncated.block") && stderr.contains("not a Fabric block"),
        "{stderr}"
    );
    let run = weft(&["block", "inspect", "/nonexistent/file.block"]);
    assert!(String::from_utf8_lossy(&run.stderr).contains("/nonexistent/file.block"));
}
