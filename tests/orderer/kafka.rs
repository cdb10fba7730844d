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
    let ports: Vec<(u16, u16)> = (0..2).map(|_| (free_port(), free_port())).collect();
    let options = KafkaOptions {
        payloads: payloads as i32,
        orderers: ports
            .iter()
            .map(|(_, cluster)| format!("127.0.0.1:{cluster}"))
            .collect(),
    };
    network.genesis = network.genesis_with_kafka(&[broker.address()], &options);
    let genesis = network.genesis.clone();
    let mut nodes = orderer_processes(&network, dir.path(), &genesis, &ports);
    for node in &mut nodes {
        node.spawn();
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
