//! Changing a Raft channel's consenters (Fabric's rule: one added or
//! removed per config update), as an operator replaces an orderer whose
//! log can no longer be trusted (docs/security.md, "Disk faults"): remove
//! it, wipe it, add it back, start it from the config block that added
//! it. Three `weft orderer start` processes, a fourth joining.

use weft_protos::etcdraft::{ConfigMetadata, Consenter};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consenters_are_added_and_removed_one_at_a_time_and_a_wiped_node_rejoins() {
    let network = Network::with_batch_timeout("100ms");
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, genesis) = raft_cluster(&network, dir.path());
    for node in &mut nodes {
        node.spawn();
    }
    let reader = &network.orderer.clone_signer();
    let admin = network.orderer_org.signer(NodeRole::Admin);
    let mut ordered = Vec::new();
    ordered.push(order(&network, &nodes, &[0, 1, 2], "three").await);

    // Two consenters added at once: refused, nothing written.
    let (fourth, fifth) = ((free_port(), free_port()), (free_port(), free_port()));
    let config = current_config(&nodes[0], reader).await;
    let update = consenters_update(&config, |consenters| {
        consenters.push(consenter(fourth.1));
        consenters.push(consenter(fifth.1));
    });
    let height = height_of(&nodes[0], reader).await;
    let refusal = nodes[0]
        .broadcast_one(config_update_envelope(&update, &[&admin], &admin))
        .await;
    assert_eq!(refusal.status, Status::BadRequest as i32, "{refusal:?}");
    assert!(
        refusal.info.contains("one consenter at a time"),
        "{refusal:?}"
    );
    assert_eq!(height_of(&nodes[0], reader).await, height);
    // Removing an endpoint that is no consenter: the command says so.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["channel", "consenter", "remove", "--channel", CHANNEL])
        .args(["--orderer", &nodes[0].grpc, "--endpoint", "127.0.0.1:1"])
        .arg("--admin-msp")
        .arg(write_admin_msp(&network, dir.path()))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--endpoint 127.0.0.1:1: not a consenter of orders"),
        "{stderr}"
    );

    // A fourth consenter: added by a config update, started from the
    // config block that added it, it pulls the chain and orders with the
    // others.
    let join_block =
        change_consenters(&network, &nodes, &[0, 1, 2], dir.path(), "add", fourth.1).await;
    nodes.push(joining_node(dir.path(), "joined3", fourth, &join_block));
    nodes[3].spawn();
    ordered.push(order(&network, &nodes, &[3], "four").await);
    same_chains(&nodes, &[0, 1, 2, 3], reader, &genesis, &ordered).await;
    check_recorded_ids(&nodes[3], reader, &[1, 2, 3, 4]).await;
    // Restarted with its join block still configured, it resumes from its
    // own chain and log.
    nodes[3].kill();
    nodes[3].spawn();
    client_when_serving(&nodes[3]).await;
    ordered.push(order(&network, &nodes, &[3], "four-again").await);
    same_chains(&nodes, &[0, 1, 2, 3], reader, &genesis, &ordered).await;

    // The second node removed: it stops ordering the channel and says
    // why; the other three order on.
    let removed_endpoint = consenter_endpoint(&nodes[1]);
    let port: u16 = removed_endpoint
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    change_consenters(&network, &nodes, &[0, 2, 3], dir.path(), "remove", port).await;
    let refusal = eventually_refused(&network, &nodes[1]).await;
    assert!(
        refusal
            .info
            .contains("removed this node from the channel's consenters"),
        "{refusal:?}"
    );
    ordered.push(order(&network, &nodes, &[0, 2, 3], "without-two").await);
    same_chains(&nodes, &[0, 2, 3], reader, &genesis, &ordered).await;
    check_recorded_ids(&nodes[0], reader, &[1, 3, 4]).await;

    // Restarted, the removed node serves the blocks it has and still
    // orders nothing.
    let removed_height = height_of(&nodes[1], reader).await;
    nodes[1].kill();
    nodes[1].spawn();
    client_when_serving(&nodes[1]).await;
    let refusal = eventually_refused(&network, &nodes[1]).await;
    assert!(
        refusal
            .info
            .contains("is not among the channel's consenters"),
        "{refusal:?}"
    );
    assert_eq!(height_of(&nodes[1], reader).await, removed_height);

    // Replaced as after a disk fault: its data wiped, it is added back
    // (under a new Raft ID) and started from the config block that did
    // it, as a new node would be.
    nodes[1].kill();
    std::fs::remove_dir_all(dir.path().join("data1")).unwrap();
    let join_block = change_consenters(&network, &nodes, &[0, 2, 3], dir.path(), "add", port).await;
    let grpc_port: u16 = nodes[1].grpc.rsplit_once(':').unwrap().1.parse().unwrap();
    nodes[1] = joining_node(dir.path(), "rejoined1", (grpc_port, port), &join_block);
    nodes[1].spawn();
    ordered.push(order(&network, &nodes, &[1], "replaced").await);
    same_chains(&nodes, &[0, 1, 2, 3], reader, &genesis, &ordered).await;
    // Added at the end of the list, under the next Raft ID.
    check_recorded_ids(&nodes[1], reader, &[1, 3, 4, 5]).await;
}

/// The MSP folder of an admin of the orderer organisation, written in
/// `dir` (`admin-msp`).
fn write_admin_msp(network: &Network, dir: &std::path::Path) -> std::path::PathBuf {
    let admin_msp = dir.join("admin-msp");
    let admin = network.orderer_org.identity(NodeRole::Admin);
    for (folder, file, pem) in [
        ("signcerts", "cert.pem", &admin.certificate_pem),
        ("keystore", "key_sk", &admin.key_pem),
    ] {
        std::fs::create_dir_all(admin_msp.join(folder)).unwrap();
        std::fs::write(admin_msp.join(folder).join(file), pem).unwrap();
    }
    admin_msp
}

/// A consenter of the test cluster at `127.0.0.1:port` (plaintext).
fn consenter(port: u16) -> Consenter {
    Consenter {
        host: "127.0.0.1".to_owned(),
        port: u32::from(port),
        ..Default::default()
    }
}

/// The consenter endpoint `node` serves the cluster on.
fn consenter_endpoint(node: &OrdererNode) -> String {
    let config = std::fs::read_to_string(&node.config).unwrap();
    let address = config
        .split("cluster:\n  listenAddress: ")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap();
    address.trim().to_owned()
}

/// Orders a transaction of its own through any of the nodes `through`;
/// its TxID.
async fn order(network: &Network, nodes: &[OrdererNode], through: &[usize], key: &str) -> String {
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, key, 0);
    ordered_by_any(nodes, through, envelope).await;
    tx_id
}

/// The channel's configuration as `node` has it last.
async fn current_config(node: &OrdererNode, reader: &Signer) -> Config {
    let height = height_of(node, reader).await;
    let blocks = blocks_of(node, reader, height).await;
    let tip = blocks.last().unwrap();
    let last = weft_protos::block::last_config_index(tip).unwrap_or(0);
    weft_protos::block::config_of_block(&blocks[last as usize])
        .unwrap()
        .1
}

/// Adds or removes (`action`) the consenter at `127.0.0.1:port` with
/// `weft channel consenter`, as an operator does, through the first of the
/// nodes `through`, signed by the orderer organisation's admin (its MSP
/// folder written in `dir`); the config block the command wrote, once
/// every node of `through` has it.
async fn change_consenters(
    network: &Network,
    nodes: &[OrdererNode],
    through: &[usize],
    dir: &std::path::Path,
    action: &str,
    port: u16,
) -> Block {
    let admin_msp = write_admin_msp(network, dir);
    let output = dir.join(format!("{action}-{port}.block"));
    let command = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["channel", "consenter", action, "--channel", CHANNEL])
        .args(["--orderer", &nodes[through[0]].grpc])
        .args(["--endpoint", &format!("127.0.0.1:{port}")])
        .arg("--admin-msp")
        .arg(&admin_msp)
        .arg("--output")
        .arg(&output)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&command.stdout);
    assert!(
        command.status.success(),
        "weft channel consenter {action}: {stdout}{}",
        String::from_utf8_lossy(&command.stderr)
    );
    let verb = if action == "add" { "added" } else { "removed" };
    assert!(
        stdout.contains(&format!(
            "{verb} consenter 127.0.0.1:{port} on channel {CHANNEL}"
        )),
        "{stdout}"
    );
    let written = Block::decode(std::fs::read(&output).unwrap().as_slice()).unwrap();
    let reader = &network.orderer.clone_signer();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut everywhere = true;
        for &index in through {
            let height = height_of(&nodes[index], reader).await;
            let blocks = blocks_of(&nodes[index], reader, height).await;
            let last = weft_protos::block::last_config_index(blocks.last().unwrap()).unwrap();
            everywhere &= blocks[last as usize].header == written.header;
        }
        if everywhere {
            return written;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the consenter change never reached every node"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A config update that rewrites the etcdraft consenters of `current` as
/// `change` says: the Orderer group read at its version, its
/// ConsensusType written at the next one.
fn consenters_update(current: &Config, change: impl FnOnce(&mut Vec<Consenter>)) -> ConfigUpdate {
    let root = current.channel_group.as_ref().unwrap();
    let orderer = &root.groups["Orderer"];
    let mut consensus_type = orderer.values["ConsensusType"].clone();
    let mut value = ConsensusType::decode(consensus_type.value.clone()).unwrap();
    let mut metadata = ConfigMetadata::decode(value.metadata.clone()).unwrap();
    change(&mut metadata.consenters);
    value.metadata = metadata.encode_to_vec().into();
    consensus_type.value = value.encode_to_vec().into();
    consensus_type.version += 1;
    let stub = |group: &ConfigGroup| ConfigGroup {
        version: group.version,
        ..ConfigGroup::default()
    };
    let mut written = stub(orderer);
    written
        .values
        .insert("ConsensusType".to_owned(), consensus_type);
    ConfigUpdate {
        channel_id: CHANNEL.to_owned(),
        read_set: Some(ConfigGroup {
            groups: BTreeMap::from([("Orderer".to_owned(), stub(orderer))]),
            ..stub(root)
        }),
        write_set: Some(ConfigGroup {
            groups: BTreeMap::from([("Orderer".to_owned(), written)]),
            ..stub(root)
        }),
        isolated_data: BTreeMap::new(),
    }
}

/// An orderer process (not started) serving on `ports` (Broadcast and
/// Deliver, cluster) that joins the channel from `join_block`, with a
/// data directory `dir/<name>` of its own.
fn joining_node(
    dir: &std::path::Path,
    name: &str,
    ports: (u16, u16),
    join_block: &Block,
) -> OrdererNode {
    let block = format!("{name}.block");
    std::fs::write(dir.join(&block), join_block.encode_to_vec()).unwrap();
    orderer_node(dir, name, name, &block, ports, 1)
}

/// Waits until the nodes `which` have the same chain, holding each of
/// `ordered` exactly once.
async fn same_chains(
    nodes: &[OrdererNode],
    which: &[usize],
    reader: &Signer,
    genesis: &Block,
    ordered: &[String],
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let chains = loop {
        let mut heights = Vec::new();
        for &index in which {
            heights.push(try_height_of(&nodes[index], reader).await.unwrap_or(0));
        }
        let height = heights[0];
        if heights.iter().all(|&other| other == height) {
            let mut chains = Vec::new();
            for &index in which {
                chains.push(blocks_of(&nodes[index], reader, height).await);
            }
            if chains
                .iter()
                .all(|chain| hashes(chain) == hashes(&chains[0]))
            {
                break chains;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the nodes {which:?} never had the same chain: heights {heights:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    check_same_chain(&[chains[0].clone(), chains[1].clone()], genesis, ordered);
}

/// Checks the Raft IDs of the consenters, in config order, that `node`'s
/// last block records.
async fn check_recorded_ids(node: &OrdererNode, reader: &Signer, expected: &[u64]) {
    let height = height_of(node, reader).await;
    let tip = blocks_of(node, reader, height).await.pop().unwrap();
    let recorded = weft_protos::etcdraft::BlockMetadata::decode(
        weft_protos::block::consenter_metadata(&tip).unwrap(),
    )
    .unwrap();
    assert_eq!(recorded.consenter_ids, expected);
}

/// The answer of a node that stopped ordering the channel, once it has
/// applied the change that removed it.
async fn eventually_refused(network: &Network, node: &OrdererNode) -> BroadcastResponse {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, envelope) = network.transaction(CHANNEL, &network.client1, "to-the-removed", 0);
        let answer = node.broadcast_one(envelope).await;
        if answer.status == Status::ServiceUnavailable as i32 && answer.info.contains("removed") {
            return answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the removed node still answers {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
