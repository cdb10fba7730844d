//! A peer whose data disk turns read-only while it commits (issue 21 item
//! 3; docs/security.md), on a disk of `tests/support/disk.rs`.

use super::*;
use crate::failing_disk::Ext4Disk;

/// Transactions the client sends, one a block; the disk fails partway.
const TRANSACTIONS: u64 = 300;
/// The block after which the disk fails.
const FAIL_AFTER: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_disk_turns_read_only_under_load_refuses_writes_and_recovers_after_repair() {
    // Goal: when its disk turns read-only under load, the peer stops
    // committing, says why on /healthz naming the path, keeps serving what
    // it has, and exits cleanly on SIGTERM; once the filesystem is checked
    // and mounted again, the restarted peer catches up to the very chain,
    // codes and state of a peer whose disk never failed.
    let dir = tempfile::tempdir().unwrap();
    let network = Network::create(dir.path());
    let disk = Ext4Disk::create(&dir.path().join("disk.img"), &dir.path().join("disk"));
    let orderer = network.start_solo_orderer();
    let witness = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    let data = disk.path().join("org1");
    let peer = network.start_org_peer("org1", &data, &[orderer.grpc], &[]);

    // Mostly fresh keys; every seventh transaction updates one key read
    // as absent, so later ones fail MVCC: codes a replay must reproduce.
    let both: &[&Signer] = &[&network.org1_peer, &network.org2_peer];
    let transactions: Vec<Envelope> = (0..TRANSACTIONS)
        .map(|index| match index % 7 {
            6 => network.put("contended", Some(None), both),
            _ => network.put(&format!("key-{index}"), None, both),
        })
        .collect();
    let address = orderer.grpc;
    let load = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for envelope in transactions {
            statuses.extend(broadcast(address, &[envelope]).await);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        statuses
    });
    committed_codes(peer.grpc, &network.client, FAIL_AFTER).await;
    disk.fail();
    let statuses = load.await.unwrap();
    assert!(statuses.iter().all(|status| *status == Status::Success));

    // The peer on the good disk commits everything; the other stops short,
    // saying why and where, and still serves the blocks it has.
    let expected = committed_codes(witness.grpc, &network.client, TRANSACTIONS).await;
    let operations = peer.operations.unwrap();
    let started = Instant::now();
    let health = loop {
        let (status, health) = http_get(operations, "/healthz");
        if status == 503 {
            break health;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the peer stayed healthy on a read-only disk: {health}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The kernel reports the failed filesystem to the write that meets
    // it as read-only or, for a sync already under way, as an I/O error.
    assert!(
        (health.contains("Read-only file system") || health.contains("Input/output error"))
            && health.contains(&data.display().to_string()),
        "/healthz does not say why and where: {health}"
    );
    let height = metric(
        &http_get(operations, "/metrics").1,
        "ledger_blockchain_height{channel=\"ledger\"}",
    ) as u64;
    assert!(
        (FAIL_AFTER + 1..=TRANSACTIONS).contains(&height),
        "height {height} on a disk that failed after block {FAIL_AFTER}"
    );
    let kept = peer_blocks(peer.grpc, &network.client, height - 1).await;
    assert_eq!(kept.len() as u64, height - 1);
    let data = peer.stop();

    // Checked and mounted again, the disk holds a ledger the peer reopens
    // and catches up from: the same chain, codes and state as the witness.
    disk.repair();
    let peer = network.start_peer_in(&data, &[orderer.grpc]);
    let codes = committed_codes(peer.grpc, &network.client, TRANSACTIONS).await;
    assert_eq!(codes, expected);
    assert!(codes.contains(&TxValidationCode::MvccReadConflict));
    assert_eq!(
        header_hashes(&peer_blocks(peer.grpc, &network.client, TRANSACTIONS).await),
        header_hashes(&orderer_blocks(orderer.grpc, &network.client, TRANSACTIONS).await),
    );
    for key in ["key-0", "key-298", "contended"] {
        let read = |peer| read_key(&network, peer, key);
        assert_eq!(read(peer.grpc).await, read(witness.grpc).await, "{key}");
        assert_eq!(read(peer.grpc).await, b"value", "{key}");
    }
}

/// The value of `key` in `kv` on `peer`, as its chaincode reads it.
async fn read_key(network: &Network, peer: SocketAddr, key: &str) -> Vec<u8> {
    let proposal = network.proposal(CHANNEL, &["kv", "get", key]);
    let response = EndorserClient::new(connect(peer).await)
        .process_proposal(proposal.signed(&network.client).unwrap())
        .await
        .unwrap()
        .into_inner()
        .response
        .unwrap();
    assert_eq!(response.status, 200, "{response:?}");
    response.payload.to_vec()
}
