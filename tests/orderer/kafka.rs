//! Kafka ordering (issue 22) against a real broker: a single-node Kafka in
//! KRaft mode started by the project's own `deploy/kafka.sh` from Kafka's
//! jars, on 127.0.0.1, one per test, and two `weft orderer start`
//! processes on one channel topic, each with Broadcast streams of its own.
//! Checked as an operator would: both orderers write the same chain,
//! every envelope answered SUCCESS is in exactly one block, an orderer
//! killed with SIGKILL under load catches up to the same hashes, and only
//! IDs (not envelopes) reach Kafka in TxID mode; a broker that goes away
//! makes Broadcast answer SERVICE_UNAVAILABLE until it is back.

use weft_protos::kafka::KafkaOptions;
use weft_protos::kafka::kafka_options::Payloads;
use weft_protos::orderer::KafkaMetadata;

use super::*;
use crate::kafka_broker::Broker;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_orderers_on_one_kafka_topic_write_the_same_chain_in_either_mode() {
    let broker = Broker::start();
    let first = orders_through_kafka(&broker, Payloads::Full, &HashSet::new()).await;
    // The channel created again under the same name (another genesis
    // block), on the topic the first one left: none of its records.
    orders_through_kafka(&broker, Payloads::TxId, &first).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_txid_is_published_only_once_two_orderers_hold_its_envelope_on_disk() {
    // Goal (TxID mode): SUCCESS means two orderers' disks hold the
    // envelope. An orderer that dies before handing an envelope over never
    // publishes its ID, and both go on with the same chain; both orderers
    // killed after SUCCESS still order it from their disks; and with both
    // disks lost, every orderer stops before the same block until the
    // envelope is sent again (docs/kafka.md).
    let broker = Broker::start();
    // Blocks are cut by the batch timeout only, long after a test step.
    let mut network = Network::with_batch_timeout("8s");
    let transactor = Arc::new(network.transactor());
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = kafka_orderers(&mut network, &broker, dir.path(), 2, Payloads::TxId);
    let genesis = network.genesis.clone();
    let reader = &network.orderer.clone_signer();
    let mut ordered = Vec::new();
    for key in ["warm-0", "warm-1"] {
        let (tx_id, envelope) = transactor.transaction(key);
        ordered_by(&nodes[0], envelope).await;
        ordered.push(tx_id);
    }
    let chains = chains_holding(&nodes, reader, &ordered).await;
    check_same_chain(&chains, &genesis, &ordered);

    // The other orderer stalls, so the first cannot hand envelopes over:
    // it refuses one after waiting, and is killed while it waits for the
    // next. No SUCCESS, no ID published.
    signal(&nodes[1], "-STOP");
    let (refused, envelope) = transactor.transaction("refused");
    let refusal = nodes[0].broadcast_one(envelope).await;
    assert_eq!(
        refusal.status,
        Status::ServiceUnavailable as i32,
        "{refusal:?}"
    );
    assert!(refusal.info.contains("another orderer"), "{refusal:?}");
    let (lost, envelope) = transactor.transaction("never-shared");
    let mut client = nodes[0].client().await;
    let answer = tokio::spawn(async move {
        let mut answers = client
            .broadcast(tokio_stream::iter([envelope]))
            .await?
            .into_inner();
        answers.message().await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    nodes[0].kill();
    signal(&nodes[1], "-CONT");
    if let Ok(Some(response)) = answer.await.unwrap() {
        assert_ne!(response.status, Status::Success as i32, "{response:?}");
    }
    nodes[0].spawn();
    let (tx_id, envelope) = transactor.transaction("after-restart");
    ordered_by(&nodes[1], envelope).await;
    ordered.push(tx_id);
    let chains = chains_holding(&nodes, reader, &ordered).await;
    check_same_chain(&chains, &genesis, &ordered);
    assert!(
        chains[0].iter().skip(1).all(|block| block
            .data
            .as_ref()
            .unwrap()
            .data
            .iter()
            .all(|envelope| ![&lost, &refused].contains(&&tx_id_of(envelope)))),
        "an envelope no other orderer took was ordered"
    );

    // Both orderers killed after SUCCESS, before the block is cut: the
    // envelopes come back from their disks.
    let height = same_height(&nodes, reader).await;
    let (tx_ids, envelopes) = four_transactions(&transactor, "crash");
    broadcast_all(&nodes[0], &envelopes).await;
    for node in &mut nodes {
        node.kill();
    }
    assert_eq!(
        height_after_restart(&mut nodes, reader).await,
        height,
        "a block was cut before the kill; the step tested nothing"
    );
    ordered.extend(tx_ids);
    let chains = chains_holding(&nodes, reader, &ordered).await;
    check_same_chain(&chains, &genesis, &ordered);

    // Both disks lost after SUCCESS: both orderers stop before the same
    // block, and say why.
    let height = same_height(&nodes, reader).await;
    let (tx_ids, envelopes) = four_transactions(&transactor, "lost");
    broadcast_all(&nodes[0], &envelopes).await;
    for (index, node) in nodes.iter_mut().enumerate() {
        node.kill();
        std::fs::remove_dir_all(dir.path().join(format!("data{index}")).join("kafka")).unwrap();
    }
    assert_eq!(height_after_restart(&mut nodes, reader).await, height);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        same_height(&nodes, reader).await,
        height,
        "a block without its envelopes"
    );
    for node in &nodes {
        let log = node.log.lock().unwrap();
        assert!(
            log.iter()
                .any(|line| line.contains("no orderer holds the envelope")
                    && line.contains(&tx_ids[0])),
            "the orderer at {} does not say what it waits for",
            node.grpc
        );
    }
    // Sent again (to the other orderer): the chain goes on, the same on
    // both, each of those TxIDs in it once (the references read before;
    // the second submission's are left out as already ordered).
    broadcast_all(&nodes[1], &envelopes).await;
    // A marker published after them: once it is in a block, so are they.
    let (marker, envelope) = transactor.transaction("marker");
    ordered_by(&nodes[1], envelope).await;
    let chains = chains_holding(&nodes, reader, &[marker]).await;
    assert_eq!(hashes(&chains[0]), hashes(&chains[1]));
    let mut counts: HashMap<String, usize> = HashMap::new();
    for block in &chains[0][1..] {
        for envelope in &block.data.as_ref().unwrap().data {
            *counts.entry(tx_id_of(envelope)).or_default() += 1;
        }
    }
    for tx_id in &tx_ids {
        assert_eq!(counts.get(tx_id), Some(&1), "{tx_id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_orderer_back_after_the_others_ordered_and_restarted_takes_envelopes_from_their_blocks()
{
    // Goal (TxID mode): an orderer that was down while the others ordered
    // envelopes and then restarted (so that none keeps them any more, on
    // disk or in memory) catches up all the same, from their blocks.
    let broker = Broker::start();
    let mut network = Network::with_batch_timeout("200ms");
    let transactor = Arc::new(network.transactor());
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = kafka_orderers(&mut network, &broker, dir.path(), 3, Payloads::TxId);
    let reader = &network.orderer.clone_signer();
    let (warm, envelope) = transactor.transaction("warm");
    ordered_by(&nodes[0], envelope).await;
    chains_holding(&nodes[..2], reader, &[warm]).await;
    nodes[2].kill();

    let mut ordered = Vec::new();
    for n in 0..5 {
        let (tx_id, envelope) = transactor.transaction(&format!("while-away-{n}"));
        ordered_by(&nodes[0], envelope).await;
        ordered.push(tx_id);
    }
    let chains = chains_holding(&nodes[..2], reader, &ordered).await;
    for node in &mut nodes[..2] {
        node.kill();
        node.spawn();
    }
    nodes[2].spawn();
    let height = chains[0].len() as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while try_height_of(&nodes[2], reader).await.unwrap_or_default() < height {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the orderer that was away never caught up to height {height}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let caught_up = blocks_of(&nodes[2], reader, height).await;
    assert_eq!(hashes(&caught_up), hashes(&chains[0]));
    assert!(
        nodes[2]
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains("from another orderer's blocks")),
        "the envelopes came from somewhere else"
    );
}

/// `count` orderer processes (configs in `dir`) started on a channel of
/// `network` ordered through `broker` with `payloads`, every orderer
/// named by its cluster endpoint; `network.genesis` becomes its genesis
/// block.
fn kafka_orderers(
    network: &mut Network,
    broker: &Broker,
    dir: &std::path::Path,
    count: usize,
    payloads: Payloads,
) -> Vec<OrdererNode> {
    let ports: Vec<(u16, u16)> = (0..count).map(|_| (free_port(), free_port())).collect();
    let options = KafkaOptions {
        payloads: payloads as i32,
        orderers: ports
            .iter()
            .map(|(_, cluster)| format!("127.0.0.1:{cluster}"))
            .collect(),
        ..Default::default()
    };
    network.genesis = network.genesis_with_kafka(&[broker.address()], &options);
    let mut nodes = orderer_processes(network, dir, &network.genesis, &ports);
    for node in &mut nodes {
        node.spawn();
    }
    nodes
}

/// Sends `envelope` to `node` until it answers SUCCESS, while it answers
/// SERVICE_UNAVAILABLE (starting, its Kafka topic not serving yet).
async fn ordered_by(node: &OrdererNode, envelope: Envelope) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let expected = [(envelope, Expected::ordered(String::new(), false))];
    loop {
        let answers = broadcast(&mut client_when_serving(node).await, &expected).await;
        if answers[0].0 == Status::Success {
            return;
        }
        assert!(
            answers[0].0 == Status::ServiceUnavailable && tokio::time::Instant::now() < deadline,
            "{answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Four transactions and their TxIDs.
fn four_transactions(transactor: &Transactor, name: &str) -> (Vec<String>, Vec<Envelope>) {
    (0..4)
        .map(|n| transactor.transaction(&format!("{name}-{n}")))
        .unzip()
}

/// Broadcasts `envelopes` to `node` on one stream; each must be SUCCESS.
async fn broadcast_all(node: &OrdererNode, envelopes: &[Envelope]) {
    let mut client = node.client().await;
    let expected: Vec<(Envelope, Expected)> = envelopes
        .iter()
        .map(|envelope| (envelope.clone(), Expected::ordered(String::new(), false)))
        .collect();
    let answers = broadcast(&mut client, &expected).await;
    assert_eq!(answers.len(), envelopes.len());
    for (status, info) in answers {
        assert_eq!(status, Status::Success, "{info}");
    }
}

/// Starts the killed `nodes` again; the height they agree on.
async fn height_after_restart(nodes: &mut [OrdererNode], reader: &Signer) -> u64 {
    for node in nodes.iter_mut() {
        node.spawn();
    }
    same_height(nodes, reader).await
}

/// Runs a channel of two orderers on `broker` ordering `payloads`; none
/// of the `earlier` TxIDs may show up in it. Returns its TxIDs.
async fn orders_through_kafka(
    broker: &Broker,
    payloads: Payloads,
    earlier: &HashSet<String>,
) -> HashSet<String> {
    let bytes_before = broker.partition_bytes(CHANNEL);
    let partition_bytes = || broker.partition_bytes(CHANNEL) - bytes_before;
    let mut network = Network::with_batch_timeout("200ms");
    let transactor = Arc::new(network.transactor());
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = kafka_orderers(&mut network, broker, dir.path(), 2, payloads);
    let genesis = network.genesis.clone();

    // An orderer that says it is healthy (its channel's partition took a
    // record from it) takes an envelope at once.
    for (index, node) in nodes.iter().enumerate() {
        let operations = node.operations().await;
        health_once(&operations, 200, Duration::from_secs(60), "never healthy").await;
        let (_, envelope) = transactor.transaction(&format!("{payloads:?}-healthy-{index}"));
        let answer = node.broadcast_one(envelope).await;
        assert_eq!(answer.status, Status::Success as i32, "{}", answer.info);
    }

    // Both orderers take broadcasts; the second is killed under load and
    // started again while the load goes on.
    let loads = Loads::start(&transactor, &nodes, &format!("{payloads:?}-node")).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    nodes[1].kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    nodes[1].spawn();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let succeeded = loads.stop().await;

    // The restarted orderer catches up; both hold the same chain, with
    // every SUCCESS in exactly one block.
    let reader = &network.orderer.clone_signer();
    let chains = chains_holding(&nodes, reader, &succeeded).await;
    let ordered = check_same_chain(&chains, &genesis, &succeeded);
    check_chain(&genesis, &chains[0]);
    let tx_ids: HashSet<String> = chains[0][1..]
        .iter()
        .flat_map(|block| block.data.as_ref().unwrap().data.iter().map(tx_id_of))
        .collect();
    assert!(
        tx_ids.is_disjoint(earlier),
        "an earlier channel's transaction"
    );
    // Each block records the offset of its last record, where a restart
    // resumes: offsets only grow.
    let offsets: Vec<i64> = chains[0][1..]
        .iter()
        .map(|block| {
            let metadata = weft_protos::block::consenter_metadata(block).unwrap();
            KafkaMetadata::decode(metadata)
                .unwrap()
                .last_offset_persisted
        })
        .collect();
    assert!(
        offsets.windows(2).all(|pair| pair[0] < pair[1]),
        "{offsets:?}"
    );

    // Whole envelopes in Fabric's mode, only IDs in FastFabric's.
    let per_transaction = partition_bytes() / ordered as u64;
    let envelope_bytes = chains[0][1].data.as_ref().unwrap().data[0].len() as u64;
    match payloads {
        Payloads::Full => assert!(
            per_transaction > envelope_bytes,
            "{per_transaction} bytes per transaction in the partition"
        ),
        Payloads::TxId => assert!(
            per_transaction < envelope_bytes / 4,
            "{per_transaction} bytes per transaction in the partition, envelopes of {envelope_bytes}"
        ),
    }

    match payloads {
        Payloads::Full => reconfigured_through_kafka(&network, &nodes, reader).await,
        Payloads::TxId => broker_away_and_back(broker, &nodes, &transactor, reader, &genesis).await,
    }
    tx_ids
}

/// A config update sent to one orderer is ordered alone in a block both
/// write, and both cut the next blocks by the new MaxMessageCount.
async fn reconfigured_through_kafka(network: &Network, nodes: &[OrdererNode], reader: &Signer) {
    let before = same_height(nodes, reader).await;
    let mut client = nodes[1].client().await;
    batch_size_3_then_7_transactions(network, &mut client).await;
    let height = same_height(nodes, reader).await;
    let chains = [
        blocks_of(&nodes[0], reader, height).await,
        blocks_of(&nodes[1], reader, height).await,
    ];
    check_same_chain(&chains, &network.genesis, &[]);
    let after = &chains[0][before as usize..];
    assert!(
        weft_protos::block::is_config_block(&after[0]),
        "not a config block"
    );
    let sizes: Vec<usize> = after[1..]
        .iter()
        .map(|block| block.data.as_ref().unwrap().data.len())
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), 7, "{sizes:?}");
    assert!(sizes.iter().all(|&size| size <= 3), "{sizes:?}");
}

/// While the broker is stopped Broadcast refuses with SERVICE_UNAVAILABLE;
/// once it is back, envelopes are ordered again, once, on both orderers.
async fn broker_away_and_back(
    broker: &Broker,
    nodes: &[OrdererNode],
    transactor: &Transactor,
    reader: &Signer,
    genesis: &Block,
) {
    broker.run("stop");
    let mut client = nodes[0].client().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let refusal = loop {
        let (tx_id, envelope) = transactor.transaction("while-away");
        let answers = broadcast(&mut client, &[(envelope, Expected::ordered(tx_id, false))]).await;
        if answers[0].0 != Status::Success {
            break answers[0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "SUCCESS answered with the broker stopped"
        );
    };
    assert_eq!(refusal.0, Status::ServiceUnavailable, "{refusal:?}");
    assert!(refusal.1.contains("Kafka"), "{refusal:?}");
    // Its health says so too (once librdkafka finds the broker down; a
    // record that merely timed out refuses only itself).
    let operations = nodes[0].operations().await;
    let health = health_once(
        &operations,
        503,
        Duration::from_secs(30),
        "still healthy with its broker stopped",
    )
    .await;
    assert!(health.contains("Kafka"), "{health}");

    broker.run("start");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let tx_id = loop {
        let (tx_id, envelope) = transactor.transaction("after-return");
        let expected = Expected::ordered(tx_id.clone(), false);
        let answers = broadcast(&mut client, &[(envelope, expected)]).await;
        if answers[0].0 == Status::Success {
            break tx_id;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never SUCCESS again after the broker came back: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Ordered once, in the same chain on both orderers.
    let succeeded = [tx_id];
    let chains = chains_holding(nodes, reader, &succeeded).await;
    check_same_chain(&chains, genesis, &succeeded);
}

/// Both orderers' chains, once they agree on a height whose blocks hold
/// every one of `tx_ids`. A SUCCESS means the record is in Kafka; the
/// block that holds it may come a moment later (a sequencer reconnecting
/// to a broker that came back), so a height that stands still is not yet
/// proof that something is missing: that takes a minute.
async fn chains_holding(
    nodes: &[OrdererNode],
    reader: &Signer,
    tx_ids: &[String],
) -> [Vec<Block>; 2] {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let height = same_height(nodes, reader).await;
        let chains = [
            blocks_of(&nodes[0], reader, height).await,
            blocks_of(&nodes[1], reader, height).await,
        ];
        let held: HashSet<String> = chains[0][1..]
            .iter()
            .flat_map(|block| block.data.as_ref().unwrap().data.iter().map(tx_id_of))
            .collect();
        let missing: Vec<&String> = tx_ids.iter().filter(|id| !held.contains(*id)).collect();
        if missing.is_empty() {
            return chains;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "answered SUCCESS, still in no block at height {height}: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The height both orderers reach and keep for a second.
async fn same_height(nodes: &[OrdererNode], reader: &Signer) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut last = None;
    loop {
        let mut heights = Vec::new();
        for node in nodes {
            heights.push(try_height_of(node, reader).await);
        }
        let agreed = heights
            .iter()
            .all(|height| height.is_some() && *height == heights[0]);
        match (agreed, last) {
            (true, Some(previous)) if heights[0] == Some(previous) => return previous,
            (true, _) => last = heights[0],
            (false, _) => last = None,
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the orderers never agreed on a height: {heights:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
