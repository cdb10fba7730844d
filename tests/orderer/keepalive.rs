//! Connections and streams nobody uses (issue 21, limits): the orderer
//! probes its clients' connections and closes those whose client stopped
//! answering (`orderer.keepalive`), ends Broadcast streams that send
//! nothing for too long (`orderer.limits.broadcastIdleTimeout`), and a
//! peer whose orderer stopped answering (a stopped process, as a hung
//! machine looks from the network) moves to another orderer of the
//! channel (`peer.keepalive.deliveryClient`) instead of waiting for it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weft_protos::serve::Keepalive;

use super::*;

/// A client's HTTP/2 connection preface and an empty SETTINGS frame: what
/// every client sends first.
const CLIENT_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// HTTP/2 frame types (RFC 9113, section 6).
const PING: u8 = 0x6;

/// Keepalive fast enough for a test: a silent connection is probed after
/// 1 s and closed 1 s later.
const FAST_KEEPALIVE: Keepalive = Keepalive {
    interval: Duration::from_secs(1),
    timeout: Duration::from_secs(1),
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_closes_a_connection_that_stops_answering_and_keeps_a_live_one() {
    // Goal: a client that stops answering the orderer's PINGs has its
    // connection closed after interval + timeout, so its streams stop
    // holding places; a client that answers keeps its connection however
    // long it waits, and its Deliver stream still gets the next block.
    let network = Network::new();
    let data = tempfile::tempdir().unwrap();
    let mut config = node_config(data.path());
    config.limits.keepalive = FAST_KEEPALIVE;
    let orderer = start_with(&network, config, vec![network.genesis.clone()]).await;

    // A live client waits for block 1 on a Deliver stream.
    let seek = seek_envelope(
        CHANNEL,
        &network.client1,
        Position::Specified(SeekSpecified { number: 1 }),
        Position::Specified(SeekSpecified { number: 1 }),
        SeekBehavior::BlockUntilReady,
    );
    let mut waiting = connect(&orderer)
        .await
        .deliver(tokio_stream::iter([seek]))
        .await
        .unwrap()
        .into_inner();

    // A client that opens its connection, then reads and answers nothing
    // (as a stopped process would).
    let mut silent = tokio::net::TcpStream::connect(orderer.local_addr())
        .await
        .unwrap();
    silent.write_all(CLIENT_PREFACE).await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut received = Vec::new();
    let closed =
        tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut received)).await;
    assert!(
        closed.is_ok(),
        "the connection of a client that answers no PING is still open"
    );
    assert!(
        frame_types(&received).contains(&PING),
        "the connection was closed without a probe: {received:?}"
    );

    // The live client kept its connection and its stream.
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "after-idle", 0);
    let answer = first_broadcast_answer(&orderer, &envelope)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.status, Status::Success as i32, "{answer:?}");
    let delivered = tokio::time::timeout(DELIVER_TIME_MAX, waiting.message())
        .await
        .expect("the waiting stream gets block 1")
        .unwrap()
        .unwrap();
    let Some(Delivered::Block(block)) = delivered.r#type else {
        panic!("{delivered:?}")
    };
    assert_eq!(tx_id_of(&block.data.unwrap().data[0]), tx_id);
    orderer.shutdown().await.unwrap();
}

/// The types of the HTTP/2 frames in `bytes`, a server's side of a
/// connection from its first frame (RFC 9113, section 4.1: a 24-bit
/// length, the type, flags and stream, then the payload).
fn frame_types(bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 9 {
        let length =
            (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
        types.push(rest[3]);
        rest = rest.get(9 + length..).unwrap_or_default();
    }
    types
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_stream_that_sends_nothing_for_too_long_is_ended() {
    // Goal: `orderer.limits.broadcastIdleTimeout`: a Broadcast stream
    // whose client sends no envelope for the idle limit, after opening it
    // or after its last envelope, is ended DEADLINE_EXCEEDED with the
    // reason and its place freed; a stream that keeps sending, for longer
    // than the limit in all, stays open.
    let network = Network::new();
    let data = tempfile::tempdir().unwrap();
    let mut config = node_config(data.path());
    config.limits.broadcast_idle_max = Some(Duration::from_secs(2));
    let orderer = start_with(&network, config, vec![network.genesis.clone()]).await;

    // Opened, never used.
    let mut unused = connect(&orderer)
        .await
        .broadcast(tokio_stream::pending::<Envelope>())
        .await
        .unwrap()
        .into_inner();
    // Used once, then left.
    let (left, requests) = tokio::sync::mpsc::channel::<Envelope>(1);
    let (_, envelope) = network.transaction(CHANNEL, &network.client1, "then-left", 0);
    left.send(envelope).await.unwrap();
    let mut used_once = connect(&orderer)
        .await
        .broadcast(tokio_stream::wrappers::ReceiverStream::new(requests))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        used_once.message().await.unwrap().unwrap().status,
        Status::Success as i32
    );
    // Sending every second, for five seconds.
    let (busy, requests) = tokio::sync::mpsc::channel::<Envelope>(1);
    let mut busy_answers = connect(&orderer)
        .await
        .broadcast(tokio_stream::wrappers::ReceiverStream::new(requests))
        .await
        .unwrap()
        .into_inner();
    for second in 0..5 {
        let (_, envelope) =
            network.transaction(CHANNEL, &network.client1, &format!("busy-{second}"), 0);
        busy.send(envelope).await.unwrap();
        let answer = busy_answers.message().await.unwrap().unwrap();
        assert_eq!(answer.status, Status::Success as i32, "{answer:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Both ended long ago; a limit that failed would leave them waiting.
    let patience = Duration::from_secs(10);
    let ended = tokio::time::timeout(patience, unused.message())
        .await
        .expect("the unused stream is still open")
        .unwrap_err();
    assert_eq!(ended.code(), tonic::Code::DeadlineExceeded, "{ended:?}");
    assert_eq!(
        ended.message(),
        "no request arrived within 2s of opening the call"
    );
    let ended = tokio::time::timeout(patience, used_once.message())
        .await
        .expect("the stream left after one envelope is still open")
        .unwrap_err();
    assert_eq!(ended.code(), tonic::Code::DeadlineExceeded, "{ended:?}");
    assert_eq!(
        ended.message(),
        "no request arrived within 2s of the last one"
    );
    drop(left);
    // The busy stream is still open and answers.
    let (_, envelope) = network.transaction(CHANNEL, &network.client1, "busy-last", 0);
    busy.send(envelope).await.unwrap();
    let answer = busy_answers.message().await.unwrap().unwrap();
    assert_eq!(answer.status, Status::Success as i32, "{answer:?}");
    orderer.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_peer_whose_orderer_stops_answering_fetches_from_another() {
    // Goal: a peer fetching blocks from an orderer that stops answering
    // (SIGSTOP: the kernel keeps its connections open, nothing answers on
    // them) notices by keepalive and fetches from the next orderer of the
    // channel; the blocks the other two order while it is stopped reach
    // the peer.
    let network = Network::with_batch_timeout("100ms");
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, _) = raft_cluster(&network, dir.path());
    for node in &mut nodes {
        node.spawn();
    }
    // The peer lists a follower first, so the cluster keeps its leader
    // while that follower is stopped.
    let (leader, _) = wait_for_leader(&nodes, &[0, 1, 2], 0).await;
    let follower = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let peer = PeerProcess::start(
        &network,
        dir.path(),
        &[&nodes[follower], &nodes[leader], &nodes[other]],
    );
    let reader = &network.orderer.clone_signer();

    let (_, envelope) = network.transaction(CHANNEL, &network.client1, "before", 0);
    ordered_by_any(&nodes, &[leader], envelope).await;
    peer.wait_for_height(2).await;
    assert_eq!(height_of(&nodes[follower], reader).await, 2);

    // The peer fetches from the first orderer it lists.
    let stopped = &nodes[follower];
    signal(stopped, "-STOP");
    let (_, envelope) = network.transaction(CHANNEL, &network.client1, "while-stopped", 0);
    ordered_by_any(&nodes, &[leader], envelope).await;
    peer.wait_for_height(3).await;
    signal(stopped, "-CONT");
    let log = std::fs::read_to_string(&peer.log).unwrap();
    assert!(
        log.contains("deliver from the orderer ended"),
        "the peer did not say why it left the orderer:\n{log}"
    );
}

/// A `weft peer start` process of Org1 fetching the test channel from
/// the orderers `nodes`, in that order, probing its connection to them as
/// [`FAST_KEEPALIVE`] says; killed when dropped.
struct PeerProcess {
    child: Child,
    operations: SocketAddr,
    log: std::path::PathBuf,
}

impl PeerProcess {
    fn start(network: &Network, dir: &std::path::Path, nodes: &[&OrdererNode]) -> Self {
        let msp = dir.join("peer-msp");
        let identity = network.org1.identity(NodeRole::Peer);
        for (folder, file, pem) in [
            ("cacerts", "ca.pem", network.org1.ca_pem()),
            ("signcerts", "cert.pem", &identity.certificate_pem),
            ("keystore", "key_sk", &identity.key_pem),
        ] {
            std::fs::create_dir_all(msp.join(folder)).unwrap();
            std::fs::write(msp.join(folder).join(file), pem).unwrap();
        }
        let orderers: Vec<String> = nodes
            .iter()
            .map(|node| format!("\"{}\"", node.grpc))
            .collect();
        let seconds = |duration: Duration| format!("{}s", duration.as_secs());
        let config = dir.join("peer.yaml");
        std::fs::write(
            &config,
            format!(
                "peer:\n  id: peer0.org1\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
                 mspConfigPath: peer-msp\n  fileSystemPath: peer-data\n  \
                 keepalive:\n    deliveryClient:\n      interval: {interval}\n      \
                 timeout: {timeout}\n\
                 channels:\n  - genesisBlock: orders.block\n\
                 orderers: [{orderers}]\n\
                 ordererChoice: listed\n\
                 committer:\n  reconnectBackoffMax: 200ms\n\
                 operations:\n  listenAddress: 127.0.0.1:0\n",
                interval = seconds(FAST_KEEPALIVE.interval),
                timeout = seconds(FAST_KEEPALIVE.timeout),
                orderers = orderers.join(", "),
            ),
        )
        .unwrap();
        let log = dir.join("peer.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["peer", "start", "--config"])
            .arg(&config)
            .env("NO_COLOR", "1")
            .env("WEFT_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert!(
            ready.contains("ready"),
            "the peer did not start: {ready:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Self {
            child,
            operations: address_in(&ready, "operations ").parse().unwrap(),
            log,
        }
    }

    /// Waits until the peer's chain is `height` blocks high.
    async fn wait_for_height(&self, height: u64) {
        let series = format!("ledger_blockchain_height{{channel=\"{CHANNEL}\"}}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (_, metrics) = http_get(&self.operations.to_string(), "/metrics").await;
            if metric_value(&metrics, &series).is_some_and(|got| got >= height as f64) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the peer never reached height {height}:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
