//! A peer as an operator runs it: `weft peer start` in a process of its own,
//! fed over gRPC by `weft orderer start` processes, watched through its
//! Deliver service, `/metrics` and `/healthz`.
//!
//! The network is made by the `weft` command from the repository's default
//! crypto and channel configs (one transaction per block, so that two
//! orderers given the same broadcasts write the same chain), with two
//! channels. One of the two orderers is a forger: it serves the first
//! channel only, and signs its blocks with a peer's key, which the
//! channel's `/Channel/Orderer/BlockValidation` policy does not accept.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/busy.rs"]
mod busy;
#[path = "peer/disk.rs"]
mod disk;
#[path = "support/disk.rs"]
mod failing_disk;
#[path = "peer/hostile.rs"]
mod hostile;
#[path = "peer/limits.rs"]
mod limits;
#[path = "support/node.rs"]
mod node;
#[path = "peer/other_nodes.rs"]
mod other_nodes;
#[path = "support/raw.rs"]
mod raw;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use tonic::transport::Channel;
use weft_msp::Signer;
use weft_protos::common::{Block, BlockMetadataIndex, Envelope, HeaderType, Status};
use weft_protos::hash::block_header_hash;
use weft_protos::orderer::SeekInfo;
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;
use weft_protos::orderer::deliver_response::Type as OrdererResponse;
use weft_protos::orderer::seek_info::SeekBehavior;
use weft_protos::protos::deliver_client::DeliverClient;
use weft_protos::protos::deliver_response::Type as PeerResponse;
use weft_protos::protos::endorser_client::EndorserClient;
use weft_protos::protos::{ChaincodeId, Response, TxValidationCode};
use weft_protos::tx::{
    Invocation, Proposal, ReadWriteSetBuilder, SimulationResult, endorse, seek_range,
    signed_envelope,
};

const CHANNEL: &str = "ledger";
/// A stream channel (docs/stream-mode.md) only the honest orderer serves.
const SECOND_CHANNEL: &str = "second";
const CHAINCODE: &str = "kv";
/// How long a node may take to start or to commit what it was given.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_process_commits_what_the_orderer_orders_and_refuses_forged_blocks() {
    // Goal: the peer fetches blocks from its first orderer, refuses the
    // forged block it is given there, fails over to the honest orderer,
    // and commits every transaction with the code Fabric would give it; it
    // reports this on /metrics and /healthz, stops on SIGTERM and resumes
    // from its own ledger. It runs on one worker, as `weft network up`
    // sizes a peer sharing two cores, where small blocks are validated and
    // committed on the task that fetched them, refusals included.
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    network.extra_peer_keys = "  workerThreads: 1\n".to_owned();
    let honest = network.start_orderer(
        "honest",
        &network.orderer_msp(),
        "OrdererMSP",
        &["ledger.block", "second.block"],
    );
    let forger = network.start_orderer(
        "forger",
        &network.peer_msp("org2"),
        "Org2MSP",
        &["ledger.block"],
    );

    // Both orderers get the same transactions in the same order.
    let transactions = network.workload();
    for orderer in [&honest, &forger] {
        let statuses = broadcast(orderer.grpc, &transactions).await;
        assert!(
            statuses.iter().all(|status| *status == Status::Success),
            "{statuses:?}"
        );
    }
    let last = transactions.len() as u64;
    let honest_chain = orderer_blocks(honest.grpc, &network.client, last).await;
    let forged_chain = orderer_blocks(forger.grpc, &network.client, last).await;
    assert_eq!(
        header_hashes(&honest_chain),
        header_hashes(&forged_chain),
        "one transaction per block: both orderers write the same chain"
    );

    let peer = network.start_peer(&[forger.grpc, honest.grpc]);
    let codes = committed_codes(peer.grpc, &network.client, last).await;
    assert_eq!(codes, expected_codes());

    // The peer's chain is the honest orderer's, signatures and all.
    let peer_chain = peer_blocks(peer.grpc, &network.client, last).await;
    assert_eq!(header_hashes(&peer_chain), header_hashes(&honest_chain));
    for (ours, theirs) in peer_chain.iter().zip(&honest_chain) {
        assert_eq!(
            signatures_of(ours),
            signatures_of(theirs),
            "block {} came from the forger",
            header_of(ours).number
        );
    }

    // The second channel, a stream channel, commits side by side, from
    // the honest orderer alone (the forger does not know it).
    let both: &[&Signer] = &[&network.org1_peer, &network.org2_peer];
    let second = [
        network.put_on(SECOND_CHANNEL, "counter", None, both),
        network.put_on(SECOND_CHANNEL, "counter", Some(None), both),
    ];
    assert_eq!(
        broadcast(honest.grpc, &second).await,
        [Status::Success, Status::Success]
    );
    assert_eq!(
        committed_codes_on(SECOND_CHANNEL, peer.grpc, &network.client, 2).await,
        [TxValidationCode::Valid, TxValidationCode::MvccReadConflict]
    );

    let operations = peer.operations.unwrap();
    let metrics = http_get(operations, "/metrics").1;
    assert!(
        metric(
            &metrics,
            "weft_committer_refused_blocks_total{channel=\"ledger\"}"
        ) >= 1.0
    );
    assert_eq!(
        metric(&metrics, "ledger_blockchain_height{channel=\"ledger\"}"),
        (last + 1) as f64
    );
    let valid = expected_codes()
        .iter()
        .filter(|code| **code == TxValidationCode::Valid)
        .count();
    assert_eq!(
        metric(
            &metrics,
            "ledger_transaction_count{channel=\"ledger\",validation_code=\"VALID\"}"
        ),
        valid as f64
    );
    assert!(metric(&metrics, "process_cpu_seconds_total") > 0.0);
    let (status, health) = http_get(operations, "/healthz");
    assert_eq!(status, 200, "{health}");
    assert!(health.contains("\"status\":\"OK\""), "{health}");

    // SIGTERM, then a restart from the peer's own ledger, now fed by the
    // honest orderer alone: nothing is committed twice, and new blocks
    // keep coming.
    let data = peer.stop();
    let peer = network.start_peer_in(&data, &[honest.grpc]);
    let again = committed_codes(peer.grpc, &network.client, last).await;
    assert_eq!(again, expected_codes());
    let extra = network.put(
        "after-restart",
        None,
        &[&network.org1_peer, &network.org2_peer],
    );
    assert_eq!(broadcast(honest.grpc, &[extra]).await, [Status::Success]);
    let codes = committed_codes(peer.grpc, &network.client, last + 1).await;
    assert_eq!(codes.last(), Some(&TxValidationCode::Valid));
    assert_eq!(codes.len() as u64, last + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_endorse_proposals_with_builtin_chaincode_and_commit_them() {
    // Goal: a client gets proposals endorsed by the peers of both
    // organisations (the channel's MAJORITY Endorsement policy), submits
    // the transaction to the orderer and sees it committed; later
    // proposals read the committed state. Refusals come back as Fabric
    // sends them: a ProposalResponse with status 500 and a message.
    let dir = tempfile::tempdir().unwrap();
    let network = Network::create(dir.path());
    let orderer = network.start_solo_orderer();
    let (org1, org2) = network.start_two_orgs(dir.path(), orderer.grpc);
    let peers = [org1.grpc, org2.grpc];

    let mut height = 0;
    for args in [
        &["kv", "put", "greeting", "hello"][..],
        &["transfer", "create", "alice", "100"],
        &["transfer", "create", "bob", "5"],
        &["transfer", "transfer", "alice", "bob", "30"],
        &["smallbank", "create_account", "c1", "50", "70"],
        &["smallbank", "write_check", "c1", "200"],
    ] {
        let proposal = network.proposal(CHANNEL, args);
        let responses = endorse_all(&peers, &proposal.signed(&network.client).unwrap()).await;
        for response in &responses {
            assert_eq!(
                response.response.as_ref().unwrap().status,
                200,
                "{args:?}: {response:?}"
            );
        }
        height += 1;
        submit(
            &network,
            orderer.grpc,
            &peers,
            &proposal,
            &responses,
            height,
        )
        .await;
    }

    for (args, expected) in [
        (&["kv", "get", "greeting"][..], "hello"),
        (&["transfer", "balance", "alice"], "70"),
        (&["transfer", "balance", "bob"], "35"),
        // Writing a check over the total costs a penalty of 1.
        (
            &["smallbank", "query", "c1"],
            r#"{"checking":-151,"savings":70}"#,
        ),
    ] {
        let proposal = network.proposal(CHANNEL, args);
        let response = endorse_all(&peers[..1], &proposal.signed(&network.client).unwrap()).await;
        let response = response[0].response.clone().unwrap();
        assert_eq!(response.status, 200, "{args:?}: {response:?}");
        assert_eq!(
            String::from_utf8_lossy(&response.payload),
            expected,
            "{args:?}"
        );
    }

    // Refusals, each with Fabric's status and a message saying why.
    let valid = network.proposal(CHANNEL, &["kv", "get", "greeting"]);
    let mut forged = valid.signed(&network.client).unwrap();
    let mut signature = forged.signature.to_vec();
    let last = signature.len() - 2;
    signature[last] ^= 1;
    forged.signature = signature.into();
    let committed = network.proposal(CHANNEL, &["kv", "put", "greeting", "again"]);
    let committed_signed = committed.signed(&network.client).unwrap();
    let responses = endorse_all(&peers, &committed_signed).await;
    let envelope = committed.transaction(&responses, &network.client).unwrap();
    assert_eq!(
        broadcast(orderer.grpc, &[envelope]).await,
        [Status::Success]
    );
    for peer in peers {
        committed_codes(peer, &network.client, height + 1).await;
    }
    for (signed, status, message) in [
        (forged, 500, "signature"),
        (
            network
                .proposal(CHANNEL, &["nosuch", "f"])
                .signed(&network.client)
                .unwrap(),
            500,
            "chaincode definition for \"nosuch\" not found",
        ),
        (
            network
                .proposal("nochannel", &["kv", "get", "k"])
                .signed(&network.client)
                .unwrap(),
            500,
            "channel \"nochannel\" not found",
        ),
        (committed_signed, 500, "duplicate transaction"),
        (
            network
                .proposal(CHANNEL, &["kv", "get", "absent"])
                .signed(&network.client)
                .unwrap(),
            500,
            "key \"absent\" not found",
        ),
        (
            weft_protos::protos::SignedProposal {
                proposal_bytes: Bytes::from_static(b"\xff\xffgarbage"),
                signature: Bytes::new(),
            },
            500,
            "malformed proposal",
        ),
    ] {
        let response = endorse_all(&peers[..1], &signed).await.remove(0);
        let answer = response.response.unwrap();
        assert_eq!(answer.status, status, "{answer:?}");
        assert!(answer.message.contains(message), "{answer:?}");
        assert!(response.endorsement.is_none());
    }
    // The operations endpoint counts them as Fabric's peer does.
    let metrics = http_get(org1.operations.unwrap(), "/metrics").1;
    for (name, count) in [
        ("endorser_proposals_received", 17.0),
        ("endorser_successful_proposals", 11.0),
        ("endorser_proposal_validation_failures", 5.0),
        (
            "endorser_endorsement_failures{chaincode=\"kv\",channel=\"ledger\"}",
            1.0,
        ),
    ] {
        assert_eq!(metric(&metrics, name), count, "{name}");
    }
    assert!(
        metric(
            &metrics,
            "weft_endorser_phase_seconds_total{phase=\"sign\"}"
        ) > 0.0
    );

    // Fabric's own Gateway client (Node.js) submits, evaluates, waits for
    // commit status and listens to chaincode events through org1's peer,
    // whose Gateway gets org2's endorsement too: on the block channel, and
    // the same on the stream channel beside it, where commit status comes
    // with the checkpoint that covers the transaction.
    for (channel, blocks_before) in [(CHANNEL, height), (SECOND_CHANNEL, 0)] {
        let seen = gateway_client(&network, "gateway.js", org1.grpc, channel);
        let key = seen["key"].as_str().unwrap();
        assert_eq!(seen["value"], "from the Fabric gateway client", "{seen}");
        assert_eq!(seen["status"]["successful"], true, "{seen}");
        assert_eq!(seen["status"]["code"], 0, "{seen}");
        assert_eq!(seen["status"]["transactionId"], true, "{seen}");
        assert!(
            seen["status"]["blockNumber"].as_u64().unwrap() > blocks_before,
            "{channel}: {seen}"
        );
        assert_eq!(seen["events"][0]["name"], "put", "{seen}");
        assert_eq!(seen["events"][0]["payload"], key, "{seen}");
        assert_eq!(seen["events"][1]["payload"], format!("{key}-2"), "{seen}");
        assert_eq!(seen["events"][0]["chaincode"], "kv", "{seen}");
        assert!(
            seen["missing"].as_str().unwrap().contains("not found"),
            "{seen}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chaincode_written_with_fabric_shim_serves_proposals_as_a_service() {
    // Goal: an unmodified Node.js chaincode written with Fabric's
    // `fabric-shim`, run as chaincode-as-a-service, is dialled by both
    // organisations' peers; its puts, gets, range queries, deletes and
    // events go through weft's endorsers into committed blocks. When it
    // fails or goes away, proposals get error responses and the peers keep
    // serving; when it comes back, the peers dial it again.
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    let mut chaincode = ShimChaincode::start(&network.dir);
    // The same chaincode served over mutual TLS too, named in peer.yaml's
    // chaincode.external list with its CA and the peers' client
    // certificate.
    let (secured, client_tls) = ShimChaincode::mutual_tls(&network);
    network.external_chaincodes = vec![
        ("notes".to_owned(), chaincode.address),
        ("vault".to_owned(), secured.address),
    ];
    network.external_tls = vec![("vault".to_owned(), client_tls)];
    let orderer = network.start_solo_orderer();
    let org2 = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    let org1 = network.start_org_peer("org1", &dir.path().join("org1"), &[orderer.grpc], &[]);
    let peers = [org1.grpc, org2.grpc];
    let over_tls = network.proposal(CHANNEL, &["vault", "put", "v1", "over TLS"]);
    for response in endorse_all(&peers, &over_tls.signed(&network.client).unwrap()).await {
        let answer = response.response.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.message);
    }

    let mut height = 0;
    let mut tx_ids = Vec::new();
    for args in [
        &["notes", "put", "n1", "first"][..],
        &["notes", "put", "n2", "second"],
        &["notes", "put", "n3", "third"],
        &["notes", "range", "n1", "n3"],
        &["notes", "del", "n1"],
    ] {
        let proposal = network.proposal(CHANNEL, args);
        let responses = endorse_all(&peers, &proposal.signed(&network.client).unwrap()).await;
        for response in &responses {
            let answer = response.response.as_ref().unwrap();
            assert_eq!(answer.status, 200, "{args:?}: {response:?}");
            if args[1] == "put" {
                // The chaincode answers with its TxID and sets an event.
                assert_eq!(answer.payload, proposal.tx_id.as_bytes(), "{args:?}");
                let event = event_of(response).expect("a put sets an event");
                assert_eq!(
                    (event.chaincode_id.as_str(), event.event_name.as_str()),
                    ("notes", "put")
                );
                assert_eq!(event.payload, args[2].as_bytes());
                assert_eq!(event.tx_id, proposal.tx_id);
            }
        }
        height += 1;
        submit(
            &network,
            orderer.grpc,
            &peers,
            &proposal,
            &responses,
            height,
        )
        .await;
        tx_ids.push(proposal.tx_id.clone());
    }

    let evaluate = |args: &[&str]| {
        let proposal = network.proposal(CHANNEL, args);
        let signed = proposal.signed(&network.client).unwrap();
        async move { endorse_all(&peers[..1], &signed).await.remove(0) }
    };
    let answer = |response: weft_protos::protos::ProposalResponse| {
        let answer = response.response.clone().unwrap();
        (
            answer.status,
            String::from_utf8_lossy(&answer.payload).into_owned(),
            answer.message,
            response.endorsement.is_some(),
        )
    };
    // A proposal marked is_init reaches the chaincode's Init (INIT).
    let invocation = Invocation {
        channel_id: CHANNEL,
        chaincode: "notes",
        args: vec![Bytes::from_static(b"setup")],
        nonce: network.client.new_nonce().unwrap(),
        timestamp_seconds: weft_msp::now(),
    };
    let init = Proposal::new_init(&invocation, network.client.serialized_identity().clone());
    let (status, payload, _, _) = answer(
        endorse_all(&peers[..1], &init.signed(&network.client).unwrap())
            .await
            .remove(0),
    );
    assert_eq!((status, payload.as_str()), (200, "initialised by setup"));
    let (status, payload, _, endorsed) = answer(evaluate(&["notes", "get", "n2"]).await);
    assert_eq!((status, payload.as_str(), endorsed), (200, "second", true));
    let (status, payload, _, _) = answer(evaluate(&["notes", "range", "", ""]).await);
    assert_eq!(status, 200);
    assert_eq!(
        payload,
        r#"[{"key":"n2","value":"second"},{"key":"n3","value":"third"}]"#
    );
    // The deleted note's history: the delete, then the put, by TxID.
    let (status, payload, _, _) = answer(evaluate(&["notes", "history", "n1"]).await);
    assert_eq!(status, 200);
    let history: serde_json::Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(
        history,
        serde_json::json!([
            {"txId": tx_ids[4], "isDelete": true},
            {"txId": tx_ids[0], "isDelete": false},
        ])
    );
    // The deleted note, a chaincode error and an unsupported request are
    // error responses with the chaincode's message, not endorsed.
    for (args, message) in [
        (&["notes", "get", "n1"][..], "note n1 not found"),
        (&["notes", "fail", "on purpose"], "on purpose"),
        (&["notes", "rich", "{}"], "a query needs a selector"),
    ] {
        let (status, _, got, endorsed) = answer(evaluate(args).await);
        assert_eq!((status, endorsed), (500, false), "{args:?}: {got}");
        assert!(got.contains(message), "{args:?}: {got}");
    }

    // The chaincode process ends in the middle of a call: an error
    // response, and the peer still endorses with its built-ins.
    let (status, _, message, _) = answer(evaluate(&["notes", "exit"]).await);
    assert_eq!(status, 500, "{message}");
    assert!(message.contains("disconnected"), "{message}");
    chaincode.wait_exit();
    let (status, _, message, _) = answer(evaluate(&["notes", "get", "n2"]).await);
    assert_eq!(status, 500);
    assert!(message.contains("unreachable"), "{message}");
    let (status, _, _, _) = answer(evaluate(&["kv", "put", "still", "serving"]).await);
    assert_eq!(status, 200);

    // Back on its address, it is dialled again.
    let _chaincode = ShimChaincode::start_at(&network.dir, chaincode.address);
    let (status, payload, message, _) = answer(evaluate(&["notes", "get", "n3"]).await);
    assert_eq!((status, payload.as_str()), (200, "third"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fabric_contract_keeps_private_data_in_collections_only_their_members_read() {
    // Goal: private data as Fabric's asset-transfer-private-data sample
    // uses it, through Fabric's Gateway client and contract API. Org1's
    // user creates assets from transient data; the shared collection's
    // values reach Org2's peer (pushed at endorsement, committed with the
    // block), Org1's peer pulls what Org2's user writes to a collection
    // pushed to no one when the block arrives, while Org1's own
    // collections stay on Org1's peer; every peer holds the hashes;
    // Fabric's access checks and messages hold; blockToLive purges; a
    // JSON index the package declares for a collection orders queries.
    // Org1's second peer, which endorses nothing, ends up holding all
    // Org1's first peer holds: pushed to it (Org1's own collection, Org1's
    // implicit collection of the `_lifecycle` approvals) or pulled at
    // commit from either peer. The peers run on one worker, as `weft network up` sizes a peer
    // sharing two cores, so a small block's pull at commit is asked from
    // the task that fetched the block.
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    network.extra_peer_keys = "  workerThreads: 1\n".to_owned();
    // Missing data waits a second at commit, and is asked for again every
    // second after.
    network.extra_sections =
        "privateData:\n  pullRetryThreshold: 1s\n  reconcileSleepInterval: 1s\n".to_owned();
    let chaincode = ShimChaincode::contract(&network.dir, "secrets");
    let orderer = network.start_solo_orderer();
    // Org2's peer; Org1's first, knowing Org2's and Org1's second, which
    // knows the other two.
    let second_address = format!("127.0.0.1:{}", weft::free_port().unwrap());
    let org2 = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    let org1 = network.start_org_peer(
        "org1",
        &dir.path().join("org1"),
        &[orderer.grpc],
        &[
            ("Org2MSP", org2.grpc),
            ("Org1MSP", second_address.parse().unwrap()),
        ],
    );
    let org1_second = network.start_org_peer_at(
        "org1",
        &dir.path().join("org1-second"),
        &second_address,
        &[orderer.grpc],
        &[("Org2MSP", org2.grpc), ("Org1MSP", org1.grpc)],
    );
    let collections = dir.path().join("collections.json");
    std::fs::write(
        &collections,
        r#"[{"name": "assetCollection", "policy": "OR('Org1MSP.member','Org2MSP.member')",
             "requiredPeerCount": 1, "maxPeerCount": 1, "blockToLive": 1000000,
             "memberOnlyRead": true, "memberOnlyWrite": true},
            {"name": "Org1MSPPrivateCollection", "policy": "OR('Org1MSP.member')",
             "requiredPeerCount": 0, "maxPeerCount": 1, "blockToLive": 4,
             "memberOnlyRead": true, "memberOnlyWrite": false,
             "endorsementPolicy": {"signaturePolicy": "OR('Org1MSP.member')"}},
            {"name": "pulledCollection", "policy": "OR('Org1MSP.member','Org2MSP.member')",
             "requiredPeerCount": 0, "maxPeerCount": 0, "blockToLive": 0,
             "memberOnlyRead": false, "memberOnlyWrite": false},
            {"name": "org1Notes", "policy": "OR('Org1MSP.member')",
             "requiredPeerCount": 0, "maxPeerCount": 0, "blockToLive": 0,
             "memberOnlyRead": false, "memberOnlyWrite": false}]"#,
    )
    .unwrap();
    // The shared collection's package declares an index on `color`
    // (Fabric's META-INF/statedb/couchdb/collections/<name>/indexes).
    let collection_indexes = dir.path().join("collection-indexes");
    let color_index = collection_indexes.join("assetCollection/indexes");
    std::fs::create_dir_all(&color_index).unwrap();
    std::fs::write(
        color_index.join("color.json"),
        r#"{"index": {"fields": ["color"]}, "ddoc": "byColor", "name": "color", "type": "json"}"#,
    )
    .unwrap();
    // The contract defined as `name` with `policy` and the collections
    // of `collections` (the definition's `sequence`), run by the chaincode
    // server.
    let define_secrets = |name: &str, policy: &str, sequence: u32, collections: &Path| {
        let mut command = chaincode_deploy(&network, orderer.grpc, [org1.grpc, org2.grpc]);
        command
            .args(["--name", name, "--sequence", &sequence.to_string()])
            .args(["--address", &chaincode.address.to_string()])
            .args(["--policy", policy])
            .arg("--collections-config")
            .arg(collections);
        command
    };
    let deployed = |mut command: Command| {
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let mut secrets_deploy = define_secrets(
        "secrets",
        "OR('Org1MSP.peer','Org2MSP.peer')",
        1,
        &collections,
    );
    secrets_deploy
        .arg("--collection-indexes")
        .arg(&collection_indexes);
    deployed(secrets_deploy);

    // tests/js/secrets.js as User1 of `org` at `peer`, with `env`; in the
    // part `part`.
    let secrets_with = |org: &str, peer: SocketAddr, env: &[(&str, &str)]| {
        gateway_client_as(&network, org, "secrets.js", peer, CHANNEL, env)
    };
    let secrets =
        |org: &str, peer: SocketAddr, part: &str| secrets_with(org, peer, &[("SECRETS_AS", part)]);
    let creator = secrets("org1", org1.grpc, "creator");
    let ok = |seen: &serde_json::Value, what: &str| -> serde_json::Value {
        let text = seen[what]["ok"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {seen}"));
        serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
    };
    let error = |seen: &serde_json::Value, what: &str| -> String {
        seen[what]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{what} did not fail: {seen}"))
            .to_owned()
    };
    for created in ["created_s1", "created_s2"] {
        assert_eq!(creator[created]["valid"], true, "{creator}");
    }
    let asset = serde_json::json!({"id": "s1", "color": "yellow", "size": 5, "owner": "Org1MSP"});
    assert_eq!(ok(&creator, "asset"), asset, "{creator}");
    assert_eq!(
        ok(&creator, "appraisal"),
        serde_json::json!({"id": "s1", "appraisedValue": 300})
    );
    assert_eq!(ok(&creator, "verified"), true, "the hash is the value's");
    assert_eq!(ok(&creator, "ids"), serde_json::json!(["s1", "s2"]));
    assert_eq!(
        ok(&creator, "query"),
        serde_json::json!([{"key": "s2", "value": {"id": "s2", "color": "red"}}]),
        "{creator}"
    );
    // In the index's order (red before yellow), not the keys'.
    assert_eq!(
        ok(&creator, "byColor"),
        serde_json::json!([{"key": "s2", "value": {"id": "s2"}}, {"key": "s1", "value": {"id": "s1"}}]),
        "{creator}"
    );
    assert_eq!(creator["deleted"], true, "{creator}");
    assert!(
        error(&creator, "afterDelete").contains("s2 does not exist in assetCollection"),
        "{creator}"
    );
    assert_eq!(ok(&creator, "idsAfterDelete"), serde_json::json!(["s1"]));
    assert!(
        error(&creator, "undeclared").contains(&format!(
            "collection {CHANNEL}/secrets/nope could not be found"
        )),
        "{creator}"
    );
    assert!(
        error(&creator, "undeclaredHash").contains(
            "collection [nope] not defined in the collection config for chaincode [secrets]"
        ),
        "{creator}"
    );
    assert_eq!(ok(&creator, "note"), "for org1 only");

    // Org2's peer got the shared collection and only its hashes of
    // Org1's: its user may read the first, is refused the appraisal
    // (member only) and finds no value behind the note's hash.
    let other = secrets("org2", org2.grpc, "other");
    assert_eq!(ok(&other, "asset"), asset, "{other}");
    assert!(
        error(&other, "appraisal").contains(
            "tx creator does not have read access permission on privatedata in \
             chaincodeName:secrets collectionName: Org1MSPPrivateCollection"
        ),
        "{other}"
    );
    assert_eq!(
        other["appraisalHash"], creator["appraisalHash"],
        "every peer holds the hashes"
    );
    assert!(
        error(&other, "note").contains(
            "private data matching public hash version is not available. Public hash version = \
             {BlockNum: "
        ) && error(&other, "note").contains("Private data version = <nil>"),
        "{other}"
    );
    assert!(
        error(&other, "afterDelete").contains("s2 does not exist"),
        "{other}"
    );

    // Peers answer a pull only for collections the asking peer's
    // organisation is a member of: Org2's peer may have the shared asset
    // from Org1's peer, never Org1's notes.
    let created = creator["created_s1"]["block"].as_u64().unwrap();
    let pull = |collection: &str, block_number: u64| {
        let missing = weft_protos::privatedata::MissingWrites {
            tx_id: "by its place in the chain".to_owned(),
            block_number,
            tx_index: 0,
            namespace: "secrets".to_owned(),
            collection: collection.to_owned(),
        };
        let request = weft_protos::privatedata::PrivateDataPull {
            missing: vec![missing],
        };
        weft_protos::tx::signed_envelope(
            HeaderType::Message,
            CHANNEL,
            request.encode_to_vec().into(),
            &network.org2_peer,
            network.org2_peer.new_nonce().unwrap(),
            weft_msp::now(),
        )
        .unwrap()
    };
    let mut private_data = weft_protos::privatedata::private_data_client::PrivateDataClient::new(
        connect(org1.grpc).await,
    );
    let found = private_data
        .pull(pull("assetCollection", created))
        .await
        .unwrap()
        .into_inner()
        .found;
    let set = &found[0].private_writes.as_ref().unwrap().ns_pvt_rwset[0].collection_pvt_rwset[0];
    assert_eq!(set.collection_name, "assetCollection");
    let writes = weft_protos::kvrwset::KvrwSet::decode(set.rwset.clone())
        .unwrap()
        .writes;
    assert_eq!(writes[0].key, "s1");
    let refused = private_data
        .pull(pull("org1Notes", created + 3))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert!(
        refused
            .message()
            .contains("Org2MSP is not a member of collection org1Notes of secrets"),
        "{refused:?}"
    );

    // DeliverWithPrivateData answers each reader the collections it is a
    // member of: Org1's user both of the created asset's, Org2's peer
    // the shared one alone.
    let readable_at = |peer: SocketAddr, reader: &Signer, block: u64| {
        let request = seek(CHANNEL, reader, block, block);
        async move {
            let mut stream = DeliverClient::new(connect(peer).await)
                .deliver_with_private_data(tokio_stream::iter([request]))
                .await
                .unwrap()
                .into_inner();
            next_collections_read(&mut stream).await.1
        }
    };
    let readable = |reader: &Signer| readable_at(org1.grpc, reader, created);
    let org1_user = signer(
        &network
            .dir
            .join("crypto/peerOrganizations/org1.example.com/users/User1@org1.example.com/msp"),
        "Org1MSP",
    );
    assert_eq!(
        readable(&org1_user).await,
        [(
            0,
            vec![
                "Org1MSPPrivateCollection".to_owned(),
                "assetCollection".to_owned()
            ]
        )]
    );
    assert_eq!(
        readable(&network.org2_peer).await,
        [(0, vec!["assetCollection".to_owned()])]
    );

    // Org1's second peer holds, block by block, the private data Org1's
    // first holds, its organisation's implicit collection included, and
    // never found any missing.
    let mut implicit_seen = false;
    for block in 1..=created + 3 {
        let first = readable_at(org1.grpc, &org1_user, block).await;
        let second = readable_at(org1_second.grpc, &org1_user, block).await;
        assert_eq!(second, first, "block {block}");
        implicit_seen |= first
            .iter()
            .any(|(_, collections)| collections.contains(&"_implicit_org_Org1MSP".to_owned()));
    }
    assert!(implicit_seen, "the approvals' implicit collection");
    let second_log =
        std::fs::read_to_string(network.dir.join("peer-org1-org1-second.log")).unwrap();
    assert!(!second_log.contains("private data missing"), "{second_log}");

    // Both peers agree on the chain.
    let last = created + 3;
    let org1_codes = committed_codes(org1.grpc, &network.client, last).await;
    let org2_codes = committed_codes(org2.grpc, &network.client, last).await;
    assert_eq!(org1_codes, org2_codes);
    assert!(
        org1_codes
            .iter()
            .all(|code| *code == TxValidationCode::Valid)
    );

    // The appraisal's collection keeps values for 4 blocks: once block
    // created + 5 commits, its value and hash are gone; the shared
    // collection's stay.
    let tick = network.put("tick", None, &[&network.org1_peer]);
    assert_eq!(broadcast(orderer.grpc, &[tick]).await, [Status::Success]);
    committed_codes(org1.grpc, &network.client, created + 5).await;
    let expired = secrets("org1", org1.grpc, "expired");
    assert_eq!(ok(&expired, "asset"), asset, "{expired}");
    assert!(
        error(&expired, "appraisal").contains("s1 does not exist in Org1MSPPrivateCollection"),
        "{expired}"
    );
    assert_eq!(expired["appraisalHash"]["ok"], "", "{expired}");
    assert_eq!(ok(&expired, "pulled"), "pulled at commit", "{expired}");

    // A key-level endorsement policy on Org2's user's note (Fabric's
    // setPrivateDataValidationParameter) holds at commit on both peers:
    // written, or purged, with one organisation's endorsement the note
    // stays as it was; with both, it changes. Once purged, neither peer
    // holds its value, hash or policy, and no pull finds a copy of it.
    let guarded = secrets("org1", org1.grpc, "guarded");
    let code = |what: &str| {
        let code = guarded[what]["code"].as_i64();
        code.and_then(|code| TxValidationCode::try_from(code as i32).ok())
            .unwrap_or_else(|| panic!("{what}: {guarded}"))
    };
    let block = |what: &str| guarded[what]["block"].as_u64().unwrap();
    assert_eq!(code("guard"), TxValidationCode::Valid, "{guarded}");
    assert_eq!(
        ok(&guarded, "guardOf"),
        serde_json::json!(["Org1MSP", "Org2MSP"]),
        "{guarded}"
    );
    assert_eq!(
        code("writtenByOne"),
        TxValidationCode::EndorsementPolicyFailure
    );
    assert_eq!(code("writtenByBoth"), TxValidationCode::Valid);
    assert_eq!(ok(&guarded, "note"), "by both", "{guarded}");
    assert_eq!(
        code("purgedByOne"),
        TxValidationCode::EndorsementPolicyFailure
    );
    assert_eq!(code("purgedByBoth"), TxValidationCode::Valid);
    let last = block("purgedByBoth");
    assert_eq!(
        committed_codes(org1.grpc, &network.client, last).await,
        committed_codes(org2.grpc, &network.client, last).await
    );
    for (org, peer) in [("org1", org1.grpc), ("org2", org2.grpc)] {
        let purged = secrets(org, peer, "read");
        assert!(
            error(&purged, "note").contains("p1 does not exist in pulledCollection"),
            "{purged}"
        );
        assert_eq!(purged["hash"]["ok"], "", "{purged}");
        assert_eq!(ok(&purged, "guardOf"), serde_json::json!([]), "{purged}");
    }
    for written in [block("guard"), block("writtenByBoth")] {
        let found = private_data
            .pull(pull("pulledCollection", written))
            .await
            .unwrap()
            .into_inner()
            .found;
        assert!(found.is_empty(), "block {written}: {found:?}");
    }

    // Reconciliation: a transaction whose private write no peer received
    // (endorsed with Org2's peer's identity, as a peer that crashed after
    // endorsing would leave it) commits on Org1's peer with the value
    // missing. Once Org2's peer holds the value, Org1's reconciler finds
    // it, checks it against the transaction's hash, and commits it with
    // the next block.
    let mut rwset = ReadWriteSetBuilder::new();
    rwset.write_private(
        "secrets",
        "pulledCollection",
        "r1",
        Bytes::from_static(b"found later"),
    );
    let call = (
        CHANNEL,
        "secrets",
        vec![Bytes::from_static(b"writeTo"), Bytes::from_static(b"r1")],
    );
    let unseen = network.transaction_as(&network.client, call, &rwset, &[&network.org2_peer]);
    let unseen_id = weft_protos::block::channel_header_of(unseen.encode_to_vec().into())
        .unwrap()
        .tx_id;
    assert_eq!(broadcast(orderer.grpc, &[unseen]).await, [Status::Success]);
    let committed_at = last + 1;
    let codes = committed_codes(org1.grpc, &network.client, committed_at).await;
    assert_eq!(codes.last(), Some(&TxValidationCode::Valid));
    let reads_r1 = |org: &str, peer: SocketAddr| {
        secrets_with(org, peer, &[("SECRETS_AS", "read"), ("SECRETS_KEY", "r1")])
    };
    let missing = reads_r1("org1", org1.grpc);
    assert!(
        error(&missing, "note")
            .contains("private data matching public hash version is not available"),
        "{missing}"
    );
    let push = weft_protos::privatedata::PrivateDataPush {
        tx_id: unseen_id,
        private_writes: rwset.private_writes(),
    };
    let push = weft_protos::tx::signed_envelope(
        HeaderType::Message,
        CHANNEL,
        push.encode_to_vec().into(),
        &network.org1_peer,
        network.org1_peer.new_nonce().unwrap(),
        weft_msp::now(),
    )
    .unwrap();
    weft_protos::privatedata::private_data_client::PrivateDataClient::new(connect(org2.grpc).await)
        .push(push)
        .await
        .unwrap();
    let mut height = committed_at;
    let found = loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let tick = network.put("tick", None, &[&network.org1_peer]);
        assert_eq!(broadcast(orderer.grpc, &[tick]).await, [Status::Success]);
        height += 1;
        committed_codes(org1.grpc, &network.client, height).await;
        let seen = reads_r1("org1", org1.grpc);
        if seen["note"]["ok"].is_string() || height > committed_at + 10 {
            break seen;
        }
    };
    assert_eq!(ok(&found, "note"), "found later", "{found}");

    // Transient data reaches only the organisations of the collections a
    // proposal touches, as Fabric's Gateway plans it: the same contract
    // defined again with a policy that needs both organisations, written
    // to with transient data, the client naming no endorsers. Org1's own
    // notes would need Org2's endorsement: refused, in Fabric's words; a
    // collection of both is endorsed by both; a client that names both
    // organisations takes the choice on itself.
    // Its org1Notes is read by members only, so that the definitions in
    // force decide who reads it below.
    let org1_notes_of_one = r#"{"name": "org1Notes", "policy": "OR('Org1MSP.member')",
             "requiredPeerCount": 0, "maxPeerCount": 0, "blockToLive": 0,
             "memberOnlyRead": false"#;
    let definitions = std::fs::read_to_string(&collections).unwrap();
    assert!(definitions.contains(org1_notes_of_one));
    let members_read_notes = definitions.replace(
        org1_notes_of_one,
        &org1_notes_of_one.replace(r#""memberOnlyRead": false"#, r#""memberOnlyRead": true"#),
    );
    let both_collections = dir.path().join("both-collections.json");
    std::fs::write(&both_collections, &members_read_notes).unwrap();
    deployed(define_secrets(
        "secrets-both",
        "AND('Org1MSP.peer','Org2MSP.peer')",
        1,
        &both_collections,
    ));
    let protected = secrets_with(
        "org1",
        org1.grpc,
        &[
            ("SECRETS_AS", "protected"),
            ("SECRETS_CONTRACT", "secrets-both"),
        ],
    );
    assert_eq!(protected["org1Only"]["code"], 9, "{protected}");
    assert!(
        protected["org1Only"]["error"].as_str().unwrap().contains(
            "requires endorsement from organisation(s) that are not in the distribution policy \
             of the private data collection(s): [org1Notes]; retry specifying trusted endorsing \
             organizations to protect transient data"
        ),
        "{protected}"
    );
    assert_eq!(protected["shared"]["valid"], true, "{protected}");
    assert_eq!(protected["named"]["valid"], true, "{protected}");

    // The collections in force when each block is sent decide what a
    // DeliverWithPrivateData reader gets, as Fabric's peer reads its
    // collection store per block: Org2's peer, asking Org1's peer for
    // the blocks to come while org1Notes is Org1's alone, gets org1Notes'
    // writes once a new definition makes Org2 a member. The Gateway plans
    // under the new definition too: a write to org1Notes naming no
    // endorsers is now endorsed by both organisations.
    let next = protected["named"]["block"].as_u64().unwrap() + 1;
    let mut waiting = DeliverClient::new(connect(org1.grpc).await)
        .deliver_with_private_data(tokio_stream::iter([seek(
            CHANNEL,
            &network.org2_peer,
            next,
            u64::MAX,
        )]))
        .await
        .unwrap()
        .into_inner();
    let shared_notes = dir.path().join("shared-notes.json");
    std::fs::write(
        &shared_notes,
        members_read_notes.replace(
            r#"{"name": "org1Notes", "policy": "OR('Org1MSP.member')""#,
            r#"{"name": "org1Notes", "policy": "OR('Org1MSP.member','Org2MSP.member')""#,
        ),
    )
    .unwrap();
    deployed(define_secrets(
        "secrets-both",
        "AND('Org1MSP.peer','Org2MSP.peer')",
        2,
        &shared_notes,
    ));
    let shared = secrets_with(
        "org1",
        org1.grpc,
        &[
            ("SECRETS_AS", "protected"),
            ("SECRETS_CONTRACT", "secrets-both"),
        ],
    );
    for write in ["org1Only", "shared", "named"] {
        assert_eq!(shared[write]["valid"], true, "{write}: {shared}");
    }
    let last = shared["named"]["block"].as_u64().unwrap();
    let mut notes_read = Vec::new();
    loop {
        let (number, collections) = next_collections_read(&mut waiting).await;
        if collections
            .iter()
            .any(|(_, names)| names.iter().any(|name| name == "org1Notes"))
        {
            notes_read.push(number);
        }
        if number == last {
            break;
        }
    }
    let org1_only = shared["org1Only"]["block"].as_u64().unwrap();
    assert_eq!(
        notes_read,
        [org1_only, last],
        "the blocks whose org1Notes writes Org2's peer read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fabric_contract_uses_keys_pages_history_json_queries_and_calls_through_the_gateway() {
    // Goal: a Fabric contract (fabric-contract-api, run by Fabric's own
    // `fabric-chaincode-node server`) that indexes its assets under
    // composite keys works unchanged through Fabric's Gateway client:
    // partial-composite-key queries, split keys, simple-key ranges that
    // never see the index, pages with bookmarks as Fabric answers them,
    // a key's history newest first, CouchDB JSON queries whole and paged,
    // Fabric's refusal of a write after a paged query, key-level
    // endorsement policies, and a call from one chaincode to another.
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    let chaincode = ShimChaincode::contract(&network.dir, "assets");
    // The same contract is also installed as `mirror`, for calls from
    // one chaincode to another.
    network.external_chaincodes = vec![
        ("assets".to_owned(), chaincode.address),
        ("mirror".to_owned(), chaincode.address),
    ];
    let orderer = network.start_solo_orderer();
    let (org1, _org2) = network.start_two_orgs(dir.path(), orderer.grpc);
    let seen = gateway_client(&network, "assets.js", org1.grpc, CHANNEL);
    let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();

    assert_eq!(seen["read"]["color"], "red", "{seen}");
    assert_eq!(seen["blue"], json(r#"["a1","a3","a5"]"#), "{seen}");
    // splitCompositeKey gives back what createCompositeKey was given, in
    // the index's key order (color, then ID).
    let index: Vec<(String, String)> = seen["index"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            assert_eq!(entry["objectType"], "color~name", "{entry}");
            let attributes = entry["attributes"].as_array().unwrap();
            (
                attributes[0].as_str().unwrap().to_owned(),
                attributes[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("blue", "a1"),
        ("blue", "a3"),
        ("blue", "a5"),
        ("green", "a4"),
        ("red", "a2"),
    ]
    .iter()
    .map(|(color, id)| (color.to_string(), id.to_string()))
    .collect();
    assert_eq!(index, expected);
    // The whole namespace as simple keys: the assets, no index entry.
    assert_eq!(
        seen["simpleKeys"],
        json(r#"["a1","a2","a3","a4","a5"]"#),
        "{seen}"
    );
    // Pages of two, each naming the next page's first key as bookmark; a
    // full last page with nothing after it names none, as Fabric's does.
    let pages = |name: &str, field: &str| -> Vec<(serde_json::Value, i64, bool)> {
        seen[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|page| {
                (
                    page[field].clone(),
                    page["fetched"].as_i64().unwrap(),
                    page["bookmark"].as_str().unwrap().is_empty(),
                )
            })
            .collect()
    };
    assert_eq!(
        pages("bluePages", "ids"),
        [
            (json(r#"["a1","a3"]"#), 2, false),
            (json(r#"["a5"]"#), 1, true)
        ],
        "{seen}"
    );
    assert_eq!(
        pages("rangePages", "keys"),
        [
            (json(r#"["a2","a3"]"#), 2, false),
            (json(r#"["a4","a5"]"#), 2, true)
        ],
        "{seen}"
    );
    assert_eq!(seen["blueAfterDelete"], json(r#"["a1","a5"]"#), "{seen}");
    // Every committed write of a key, newest first, with its TxID; a
    // delete is marked and carries no value.
    let history = |id: &str| -> Vec<(String, bool, serde_json::Value)> {
        seen[format!("{id}History")]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| {
                assert!(entry["seconds"].as_i64().unwrap() > 0, "{entry}");
                (
                    entry["txId"].as_str().unwrap().to_owned(),
                    entry["isDelete"].as_bool().unwrap(),
                    entry["value"]["size"].clone(),
                )
            })
            .collect()
    };
    let resizes: Vec<String> = seen["resizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|resize| {
            assert_eq!(resize["valid"], true, "{resize}");
            resize["txId"].as_str().unwrap().to_owned()
        })
        .collect();
    let a1 = history("a1");
    assert_eq!(a1.len(), 3, "{a1:?}");
    assert_eq!(
        a1[..2],
        [
            (resizes[1].clone(), false, json("30")),
            (resizes[0].clone(), false, json("20"))
        ]
    );
    assert_eq!((a1[2].1, &a1[2].2), (false, &json("10")));
    // A CouchDB JSON query: selected, sorted by size descending (ties by
    // key, descending too, as CouchDB reads its index backwards), only the
    // fields asked for; and the same assets a page at a time.
    assert_eq!(
        seen["query"],
        json(
            r#"[{"key":"a1","value":{"id":"a1","size":30}},
                {"key":"a5","value":{"id":"a5","size":10}},
                {"key":"a4","value":{"id":"a4","size":10}},
                {"key":"a2","value":{"id":"a2","size":10}}]"#
        ),
        "{seen}"
    );
    assert_eq!(
        seen["queryPages"],
        json(r#"[["a1","a2"],["a4","a5"],[]]"#),
        "{seen}"
    );
    let a3 = history("a3");
    assert_eq!(a3.len(), 2, "{a3:?}");
    assert_eq!(a3[0].0, seen["a3Deleted"].as_str().unwrap());
    assert_eq!((a3[0].1, &a3[0].2), (true, &serde_json::Value::Null));
    assert_eq!((a3[1].1, &a3[1].2), (false, &json("10")));
    // A write after a paged query is refused at endorsement with
    // Fabric's reason: ABORTED, and one ErrorDetail per organisation's
    // peer, which the client reads from `err.details`. The asset is
    // unchanged.
    let refusal = &seen["writeAfterPage"];
    assert_eq!(refusal["code"], 10, "{refusal}");
    let mut organisations = Vec::new();
    for detail in refusal["details"].as_array().unwrap() {
        let message = detail["message"].as_str().unwrap();
        assert!(message.contains("Writes are not allowed"), "{detail}");
        assert!(!detail["address"].as_str().unwrap().is_empty(), "{detail}");
        organisations.push(detail["mspId"].as_str().unwrap().to_owned());
    }
    organisations.sort();
    assert_eq!(organisations, ["Org1MSP", "Org2MSP"]);
    assert_eq!(seen["a1"]["size"], 30, "{seen}");
    // A key-level endorsement policy (setStateValidationParameter) reads
    // back as set; a change endorsed by Org1 alone, which the chaincode's
    // policy would not accept either, commits as ENDORSEMENT_POLICY_FAILURE
    // (10); one endorsed by Org2 alone satisfies the key's policy, which
    // replaces the chaincode's, and commits.
    assert_eq!(seen["guards"], json(r#"["Org2MSP"]"#), "{seen}");
    assert_eq!(
        seen["guarded"],
        json(
            r#"[{"orgs":["Org1MSP"],"code":10,"valid":false},
                {"orgs":["Org2MSP"],"code":0,"valid":true}]"#
        ),
        "{seen}"
    );
    assert_eq!(seen["a1Guarded"]["size"], 60, "{seen}");
    // A chaincode-to-chaincode call writes in the callee's namespace, in
    // the caller's transaction; the caller gets the callee's answer.
    assert_eq!(seen["called"]["owner"], "bob", "{seen}");
    assert_eq!(seen["mirrored"], seen["here"], "{seen}");
    assert_eq!(seen["mirrored"]["color"], "black", "{seen}");
    let nowhere = seen["callNowhere"].as_str().unwrap();
    assert!(nowhere.contains("no such chaincode"), "{nowhere}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endorser_replica_follows_its_validating_peer_without_validating_again() {
    // Goal: FastFabric's endorser/committer separation. An endorser-only
    // peer process of org1 takes its blocks from org1's validating peer,
    // applies them with the codes that peer gave (it spends no time in
    // validation), holds the same chain, and endorses from the same state.
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    let orderer = network.start_solo_orderer();
    let committer = network.start_peer(&[orderer.grpc]);
    network.replica_of = Some(committer.grpc);
    let replica = network.start_org_peer("org1", &dir.path().join("replica"), &[orderer.grpc], &[]);

    let transactions = network.workload();
    let statuses = broadcast(orderer.grpc, &transactions).await;
    assert!(
        statuses.iter().all(|s| *s == Status::Success),
        "{statuses:?}"
    );
    let last = transactions.len() as u64;
    assert_eq!(
        committed_codes(replica.grpc, &network.client, last).await,
        expected_codes()
    );
    let ours = peer_blocks(replica.grpc, &network.client, last).await;
    let theirs = peer_blocks(committer.grpc, &network.client, last).await;
    assert_eq!(
        ours, theirs,
        "the replica stores its committer's blocks, codes and all"
    );

    // It endorses reads of the committed state with its own identity.
    let proposal = network.proposal(CHANNEL, &["kv", "get", "counter"]);
    let response = endorse_all(&[replica.grpc], &proposal.signed(&network.client).unwrap())
        .await
        .remove(0);
    let answer = response.response.clone().unwrap();
    assert_eq!(
        (answer.status, &answer.payload[..]),
        (200, &b"value"[..]),
        "{answer:?}"
    );
    let endorser = response.endorsement.unwrap().endorser;
    assert_eq!(endorser, network.org1_peer.serialized_identity().clone());

    // The validating peer spent time validating; the replica none.
    let validation = "weft_committer_validate_seconds_sum{channel=\"ledger\"}";
    let committer_metrics = http_get(committer.operations.unwrap(), "/metrics").1;
    let replica_metrics = http_get(replica.operations.unwrap(), "/metrics").1;
    assert!(metric(&committer_metrics, validation) > 0.0);
    assert_eq!(metric(&replica_metrics, validation), 0.0);
    assert_eq!(
        metric(
            &replica_metrics,
            "ledger_blockchain_height{channel=\"ledger\"}"
        ),
        (last + 1) as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_node_configs_run_an_orderer_and_a_peer_that_commits_what_it_orders() {
    // Goal: config/orderer.yaml and config/peer.yaml work as they are,
    // beside the crypto folder and genesis block that the README's
    // commands make, with only their ports moved by environment variables
    // (as an operator does on a machine whose ports are taken): the
    // orderer orders mychannel and org1's peer commits what it orders.
    let dir = tempfile::tempdir().unwrap();
    let network = Network::create(dir.path());
    genesis(dir.path(), "mychannel", "mychannel.block");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ["orderer.yaml", "peer.yaml"] {
        std::fs::copy(root.join("config").join(file), config.join(file)).unwrap();
    }
    let orderer = Node::start_with_env(
        "orderer",
        &config.join("orderer.yaml"),
        &dir.path().join("orderer0.log"),
        &[
            ("ORDERER_ORDERER_LISTENADDRESS", "127.0.0.1:0"),
            ("ORDERER_OPERATIONS_LISTENADDRESS", "127.0.0.1:0"),
        ],
    );
    let orderers = format!("[\"{}\"]", orderer.grpc);
    let peer = Node::start_with_env(
        "peer",
        &config.join("peer.yaml"),
        &dir.path().join("peer0.org1.log"),
        &[
            ("CORE_PEER_LISTENADDRESS", "127.0.0.1:0"),
            ("CORE_OPERATIONS_LISTENADDRESS", "127.0.0.1:0"),
            ("CORE_ORDERERS", &orderers),
        ],
    );

    let both = [&network.org1_peer, &network.org2_peer];
    let put = network.put_on("mychannel", "shipped", None, &both);
    assert_eq!(broadcast(orderer.grpc, &[put]).await, [Status::Success]);
    let codes = committed_codes_on("mychannel", peer.grpc, &network.client, 1).await;
    assert_eq!(codes, [TxValidationCode::Valid]);
    for node in ["orderer0", "peer0.org1"] {
        assert!(
            dir.path()
                .join("data")
                .join(node)
                .join("ledgers/mychannel")
                .is_dir(),
            "{node} keeps its ledgers where its config says"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_chaincode_deploy_agrees_a_definition_whose_policy_every_peer_enforces() {
    // Goal: Fabric's lifecycle end to end. Each organisation's admin
    // approves a definition of `kv` with its own endorsement policy, the
    // definition is committed, and from then on both peers validate `kv`
    // with that policy instead of the channel's default (a majority of
    // the two organisations).
    let dir = tempfile::tempdir().unwrap();
    let network = Network::create(dir.path());
    let orderer = network.start_solo_orderer();
    let org1 = network.start_org_peer("org1", &dir.path().join("org1"), &[orderer.grpc], &[]);
    let org2 = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    let only_org1: &[&Signer] = &[&network.org1_peer];

    let before = network.put("before", None, only_org1);
    assert_eq!(broadcast(orderer.grpc, &[before]).await, [Status::Success]);
    assert_eq!(
        committed_codes(org2.grpc, &network.client, 1).await,
        [TxValidationCode::EndorsementPolicyFailure]
    );

    // A private data collection in Fabric's JSON, carried by the
    // definition.
    let collections = dir.path().join("collections.json");
    std::fs::write(
        &collections,
        r#"[{"name": "assetCollection", "policy": "OR('Org1MSP.member','Org2MSP.member')",
            "requiredPeerCount": 0, "maxPeerCount": 1, "blockToLive": 1000000,
            "memberOnlyRead": true, "memberOnlyWrite": true,
            "endorsementPolicy": {"signaturePolicy": "OR('Org1MSP.peer')"}}]"#,
    )
    .unwrap();
    let deploy = |sequence: &str| {
        chaincode_deploy(&network, orderer.grpc, [org1.grpc, org2.grpc])
            .args(["--name", "kv", "--sequence", sequence])
            .args(["--policy", "OR('Org1MSP.peer')"])
            .arg("--collections-config")
            .arg(&collections)
            .output()
            .unwrap()
    };
    let output = deploy("1");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("org1 approved kv in block 2"), "{stdout}");
    assert!(stdout.contains("org2 approved kv in block 3"), "{stdout}");
    assert!(
        stdout
            .contains("chaincode kv version 1.0 sequence 1 committed on channel ledger in block 4"),
        "{stdout}"
    );

    // Org1's endorsement alone now suffices, on both peers.
    let after = network.put("after", None, only_org1);
    assert_eq!(broadcast(orderer.grpc, &[after]).await, [Status::Success]);
    for peer in [org1.grpc, org2.grpc] {
        let codes = committed_codes(peer, &network.client, 5).await;
        assert_eq!(codes[1..], [TxValidationCode::Valid; 4], "{codes:?}");
    }
    // A kv proposal now reads the definition's sequence, as in Fabric.
    let proposal = network.proposal(CHANNEL, &["kv", "put", "k", "v"]);
    let response = endorse_all(&[org1.grpc], &proposal.signed(&network.client).unwrap())
        .await
        .remove(0);
    let payload =
        weft_protos::protos::ProposalResponsePayload::decode(response.payload.clone()).unwrap();
    let action = weft_protos::protos::ChaincodeAction::decode(payload.extension).unwrap();
    let rwset = weft_protos::rwset::TxReadWriteSet::decode(action.results).unwrap();
    let lifecycle = rwset
        .ns_rwset
        .iter()
        .find(|ns| ns.namespace == "_lifecycle")
        .expect("a read of _lifecycle");
    let reads = weft_protos::kvrwset::KvrwSet::decode(lifecycle.rwset.clone())
        .unwrap()
        .reads;
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0].key, "namespaces/fields/kv/Sequence");
    assert_eq!(reads[0].version.map(|v| v.block_num), Some(4));
    // The definition is there to query; the same sequence again is refused.
    let query = weft_protos::lifecycle::QueryChaincodeDefinitionArgs {
        name: "kv".to_owned(),
    };
    let proposal = network.proposal_with(
        CHANNEL,
        "_lifecycle",
        vec![
            Bytes::from_static(b"QueryChaincodeDefinition"),
            query.encode_to_vec().into(),
        ],
    );
    let response = endorse_one(org2.grpc, &proposal.signed(&network.client).unwrap()).await;
    assert_eq!(response.status, 200, "{}", response.message);
    let definition =
        weft_protos::lifecycle::QueryChaincodeDefinitionResult::decode(response.payload).unwrap();
    assert_eq!(
        (definition.sequence, definition.version.as_str()),
        (1, "1.0")
    );
    let collection = match definition
        .collections
        .and_then(|package| package.config.into_iter().next())
        .and_then(|config| config.payload)
    {
        Some(weft_protos::protos::collection_config::Payload::StaticCollectionConfig(c)) => c,
        None => panic!("the definition carries no collection"),
    };
    assert_eq!(collection.name, "assetCollection");
    assert_eq!(
        (
            collection.maximum_peer_count,
            collection.block_to_live,
            collection.member_only_read,
            collection.member_only_write
        ),
        (1, 1_000_000, true, true)
    );
    assert!(collection.member_orgs_policy.is_some() && collection.endorsement_policy.is_some());
    let output = deploy("1");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("new definition must be sequence 2"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chaincode_service_installed_through_lifecycle_runs_without_a_restart() {
    // Goal: Fabric's chaincode-as-a-service path. The peers are started
    // knowing nothing of `notes`; `weft chaincode deploy --address`
    // installs a ccaas package (connection.json) on each organisation's
    // peer as its admin, approves the definition with the package ID and
    // commits it; the peers then dial the chaincode, with no restart; a
    // package may require mutual TLS to its server.
    let dir = tempfile::tempdir().unwrap();
    let network = Network::create(dir.path());
    let chaincode = ShimChaincode::start(&network.dir);
    let orderer = network.start_solo_orderer();
    let org1 = network.start_org_peer("org1", &dir.path().join("org1"), &[orderer.grpc], &[]);
    let org2 = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    let peers = [org1.grpc, org2.grpc];

    let get = |key: &str| {
        let proposal = network.proposal(CHANNEL, &["notes", "get", key]);
        let signed = proposal.signed(&network.client).unwrap();
        async move { endorse_all(&[org1.grpc], &signed).await.remove(0) }
    };
    let before = get("n1").await.response.unwrap();
    assert_eq!(before.status, 500);
    assert!(before.message.contains("not found"), "{}", before.message);

    let stdout = node::stdout_of(chaincode_deploy(&network, orderer.grpc, peers).args([
        "--name",
        "notes",
        "--address",
        &chaincode.address.to_string(),
    ]));
    for org in ["org1", "org2"] {
        assert!(
            stdout.contains(&format!("{org} installed notes_1.0:")),
            "{stdout}"
        );
    }
    assert!(stdout.contains("committed on channel ledger"), "{stdout}");

    // Both peers run it now: a put is endorsed by both and committed.
    let proposal = network.proposal(CHANNEL, &["notes", "put", "n1", "installed"]);
    let responses = endorse_all(&peers, &proposal.signed(&network.client).unwrap()).await;
    for response in &responses {
        let answer = response.response.as_ref().unwrap();
        assert_eq!(answer.status, 200, "{}", answer.message);
    }
    submit(&network, orderer.grpc, &peers, &proposal, &responses, 4).await;
    let after = get("n1").await.response.unwrap();
    assert_eq!((after.status, &after.payload[..]), (200, &b"installed"[..]));

    // The installed package, as `peer lifecycle chaincode
    // queryinstalled` asks for it outside any channel: for an admin only.
    let query =
        |signer: &Signer| outside_channels(signer, "QueryInstalledChaincodes", Bytes::new());
    let admin = network.org1_admin();
    let answer = endorse_one(org1.grpc, &query(&admin)).await;
    assert_eq!(answer.status, 200, "{}", answer.message);
    let installed =
        weft_protos::lifecycle::QueryInstalledChaincodesResult::decode(answer.payload).unwrap();
    let labels: Vec<&str> = installed
        .installed_chaincodes
        .iter()
        .map(|package| package.label.as_str())
        .collect();
    assert_eq!(labels, ["notes_1.0"]);
    // Used by the definition of notes 1.0 on the channel.
    let used_by: Vec<(&str, &str, &str)> = installed.installed_chaincodes[0]
        .references
        .iter()
        .flat_map(|(channel, references)| {
            references
                .chaincodes
                .iter()
                .map(move |cc| (channel.as_str(), cc.name.as_str(), cc.version.as_str()))
        })
        .collect();
    assert_eq!(used_by, [(CHANNEL, "notes", "1.0")]);

    // JSON indexes declared by a package (Fabric's
    // META-INF/statedb/couchdb/indexes): `catalog` 1.0 has none, so a
    // query scans in key order; 2.0's package declares an index on
    // `color`, which the peers build over the documents already there with
    // the next block and keep current, so the same query comes back in
    // the index's order, as CouchDB answers it.
    let put = |key: &'static str, color: &'static str, height: u64| {
        let document = format!(r#"{{"color": "{color}"}}"#);
        let proposal = network.proposal(CHANNEL, &["catalog", "put", key, &document]);
        let network = &network;
        async move {
            let responses = endorse_all(&peers, &proposal.signed(&network.client).unwrap()).await;
            submit(network, orderer.grpc, &peers, &proposal, &responses, height).await;
        }
    };
    let by_color = |peer: SocketAddr| {
        let proposal = network.proposal(
            CHANNEL,
            &["catalog", "rich", r#"{"selector": {"color": {"$gt": ""}}}"#],
        );
        let signed = proposal.signed(&network.client).unwrap();
        async move {
            let answer = endorse_one(peer, &signed).await;
            assert_eq!(answer.status, 200, "{}", answer.message);
            serde_json::from_slice::<Vec<String>>(&answer.payload).unwrap()
        }
    };
    node::stdout_of(chaincode_deploy(&network, orderer.grpc, peers).args([
        "--name",
        "catalog",
        "--address",
        &chaincode.address.to_string(),
    ]));
    put("k1", "red", 8).await;
    put("k2", "blue", 9).await;
    put("k3", "green", 10).await;
    assert_eq!(by_color(org1.grpc).await, ["k1", "k2", "k3"]);
    let indexes = dir.path().join("indexes");
    std::fs::create_dir(&indexes).unwrap();
    std::fs::write(
        indexes.join("color.json"),
        r#"{"index": {"fields": ["color"]}, "ddoc": "byColor", "name": "color", "type": "json"}"#,
    )
    .unwrap();
    let stdout = node::stdout_of(
        chaincode_deploy(&network, orderer.grpc, peers)
            .args(["--name", "catalog", "--version", "2.0", "--sequence", "2"])
            .args(["--address", &chaincode.address.to_string()])
            .arg("--indexes")
            .arg(&indexes),
    );
    assert!(
        stdout.contains("committed on channel ledger in block 13"),
        "{stdout}"
    );
    put("k4", "amber", 14).await;
    for peer in peers {
        assert_eq!(by_color(peer).await, ["k4", "k2", "k3", "k1"]);
    }
    // An index definition Fabric would refuse is refused before anything
    // is installed, naming its file.
    std::fs::write(
        indexes.join("size.json"),
        r#"{"index": {"fields": ["size"]}, "type": "text"}"#,
    )
    .unwrap();
    let refused = chaincode_deploy(&network, orderer.grpc, peers)
        .args(["--name", "catalog", "--version", "3.0", "--sequence", "3"])
        .args(["--address", &chaincode.address.to_string()])
        .arg("--indexes")
        .arg(&indexes)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains(
            "META-INF/statedb/couchdb/indexes/size.json: the index type must be \"json\""
        ),
        "{stderr}"
    );

    // A chaincode server that serves TLS only, and only to clients with a
    // certificate from org1's TLS CA: its package carries the CA to trust
    // and the client certificate and key to present (connection.json's
    // root_cert, client_cert, client_key), and both peers reach it.
    let (secured, [ca, cert, key]) = ShimChaincode::mutual_tls(&network);
    let stdout = node::stdout_of(
        chaincode_deploy(&network, orderer.grpc, peers)
            .args(["--name", "vault", "--address", &secured.address.to_string()])
            .arg("--chaincode-tls-ca")
            .arg(ca)
            .arg("--chaincode-tls-cert")
            .arg(cert)
            .arg("--chaincode-tls-key")
            .arg(key),
    );
    assert!(stdout.contains("committed on channel ledger"), "{stdout}");
    let proposal = network.proposal(CHANNEL, &["vault", "put", "v1", "over TLS"]);
    let responses = endorse_all(&peers, &proposal.signed(&network.client).unwrap()).await;
    for response in &responses {
        let answer = response.response.as_ref().unwrap();
        assert_eq!(answer.status, 200, "{}", answer.message);
    }
    // The same server named without TLS: the peers cannot talk to it, and
    // say so.
    let stdout = node::stdout_of(chaincode_deploy(&network, orderer.grpc, peers).args([
        "--name",
        "plainvault",
        "--address",
        &secured.address.to_string(),
    ]));
    assert!(stdout.contains("committed on channel ledger"), "{stdout}");
    let proposal = network.proposal(CHANNEL, &["plainvault", "get", "v1"]);
    let refused = endorse_one(org1.grpc, &proposal.signed(&network.client).unwrap()).await;
    assert_eq!(refused.status, 500);
    assert!(
        refused.message.contains("unreachable"),
        "{}",
        refused.message
    );
    let refused = endorse_one(org1.grpc, &query(&network.client)).await;
    assert_eq!(refused.status, 500);
    assert!(
        refused.message.contains("needs an admin"),
        "{}",
        refused.message
    );
}

/// A `_lifecycle` proposal outside any channel, as `peer lifecycle
/// chaincode install` and `queryinstalled` send: `function` with
/// `argument`, signed by `signer`.
fn outside_channels(
    signer: &Signer,
    function: &'static str,
    argument: Bytes,
) -> weft_protos::protos::SignedProposal {
    let invocation = Invocation {
        channel_id: "",
        chaincode: "_lifecycle",
        args: vec![Bytes::from_static(function.as_bytes()), argument],
        nonce: signer.new_nonce().unwrap(),
        timestamp_seconds: weft_msp::now(),
    };
    Proposal::new(&invocation, signer.serialized_identity().clone())
        .signed(signer)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_package_is_installed_before_the_peer_joins_a_channel() {
    // Goal: as with Fabric, an operator installs a chaincode on a peer
    // that has joined no channel yet (the admin is checked against the
    // peer's own MSP folder); once the peer joins, the package is there to
    // approve and run.
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    let chaincode = ShimChaincode::start(&network.dir);
    let orderer = network.start_solo_orderer();
    network.joins_channels = false;
    let alone = network.start_org_peer("org1", &dir.path().join("org1"), &[orderer.grpc], &[]);

    let package = weft_peer_endorser::package::Package::ccaas(
        "notes_1.0",
        &chaincode.address.to_string(),
        None,
        &[],
    )
    .unwrap();
    let install = |signer: &Signer| {
        let argument = weft_protos::lifecycle::InstallChaincodeArgs {
            chaincode_install_package: package.clone(),
        };
        outside_channels(signer, "InstallChaincode", argument.encode_to_vec().into())
    };
    let refused = endorse_one(alone.grpc, &install(&network.client)).await;
    assert_eq!(refused.status, 500);
    assert_eq!(
        refused.message,
        "access denied: installing and querying chaincode packages needs an admin of Org1MSP"
    );
    let admin = network.org1_admin();
    let answer = endorse_one(alone.grpc, &install(&admin)).await;
    assert_eq!(answer.status, 200, "{}", answer.message);
    let installed = weft_protos::lifecycle::InstallChaincodeResult::decode(answer.payload).unwrap();
    assert_eq!(installed.label, "notes_1.0");

    // The peer joins the channel (restarted with it in its configuration),
    // and the definition approves the package installed before.
    drop(alone);
    network.joins_channels = true;
    let org1 = network.start_org_peer("org1", &dir.path().join("org1"), &[orderer.grpc], &[]);
    let org2 = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    let peers = [org1.grpc, org2.grpc];
    let stdout = node::stdout_of(chaincode_deploy(&network, orderer.grpc, peers).args([
        "--name",
        "notes",
        "--address",
        &chaincode.address.to_string(),
    ]));
    assert!(
        stdout.contains(&format!("org1 installed {} on", installed.package_id)),
        "{stdout}"
    );
    let proposal = network.proposal(CHANNEL, &["notes", "put", "n1", "joined"]);
    let responses = endorse_all(&peers, &proposal.signed(&network.client).unwrap()).await;
    for response in &responses {
        let answer = response.response.as_ref().unwrap();
        assert_eq!(answer.status, 200, "{}", answer.message);
    }
    submit(&network, orderer.grpc, &peers, &proposal, &responses, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_answers_each_of_many_submits_at_once_as_the_orderer_answered_it() {
    // Goal: a peer's Gateway passes submits that arrive together to the
    // orderer side by side (over one Broadcast stream it keeps open), and
    // each client hears its own transaction's answer: refusals among
    // successes go to the clients whose envelopes were refused, and every
    // transaction answered SUCCESS commits VALID. When the orderer closes
    // an idle stream, or restarts, the next submit reaches it again.
    let dir = tempfile::tempdir().unwrap();
    let network = Network::create(dir.path());
    let port = weft::free_port().unwrap().to_string();
    let address = format!("127.0.0.1:{port}");
    let start_orderer = || {
        let orderer = network.start_solo_orderer_with(
            "  limits:\n    broadcastIdleTimeout: 1s\n",
            &[("ORDERER_ORDERER_LISTENADDRESS", &address)],
        );
        assert_eq!(orderer.grpc.to_string(), address);
        orderer
    };
    let orderer = start_orderer();
    let (org1, _org2) = network.start_two_orgs(dir.path(), orderer.grpc);
    let endorsers = [&network.org1_peer, &network.org2_peer];

    // Every third envelope's signature covers other bytes: the orderer
    // refuses it (FORBIDDEN) between the others.
    let envelopes: Vec<(Envelope, bool)> = (0..45)
        .map(|index| {
            let envelope = network.put_as(
                &network.client,
                CHANNEL,
                &format!("together-{index}"),
                None,
                &endorsers,
            );
            if index % 3 == 2 {
                (hostile::resigned(envelope, &network.client), false)
            } else {
                (envelope, true)
            }
        })
        .collect();
    let gateway =
        weft_protos::gateway::gateway_client::GatewayClient::new(connect(org1.grpc).await);
    let submits: Vec<_> = envelopes
        .iter()
        .map(|(envelope, _)| {
            let mut gateway = gateway.clone();
            let request = gateway_submit_request(envelope);
            tokio::spawn(async move { gateway.submit(request).await })
        })
        .collect();
    let mut answers = Vec::new();
    for submit in submits {
        answers.push(submit.await.unwrap());
    }
    for ((envelope, good), answer) in envelopes.iter().zip(&answers) {
        let tx_id = tx_id_of(envelope);
        match answer {
            Ok(_) => assert!(good, "{tx_id}: a refused envelope was answered SUCCESS"),
            Err(status) => {
                assert!(!good, "{tx_id}: {status:?}");
                assert_eq!(status.code(), tonic::Code::Aborted, "{tx_id}");
                assert!(
                    status.message().contains("status=FORBIDDEN"),
                    "{tx_id}: {status:?}"
                );
            }
        }
    }
    for (envelope, _) in envelopes.iter().filter(|(_, good)| *good) {
        assert_eq!(
            commit_status(&gateway, &network.client, &tx_id_of(envelope)).await,
            TxValidationCode::Valid as i32
        );
    }

    // The orderer closes Broadcast streams idle for a second: the next
    // submit after a pause gets a new one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after_pause = network.put_as(&network.client, CHANNEL, "after-pause", None, &endorsers);
    gateway
        .clone()
        .submit(gateway_submit_request(&after_pause))
        .await
        .unwrap();

    // The orderer restarts on its address; the Gateway's stream to it
    // ended with it, and the next submit opens another.
    drop(orderer);
    let _orderer = start_orderer();
    let again = network.put_as(&network.client, CHANNEL, "after-restart", None, &endorsers);
    let mut client = gateway.clone();
    client.submit(gateway_submit_request(&again)).await.unwrap();
    assert_eq!(
        commit_status(&gateway, &network.client, &tx_id_of(&again)).await,
        TxValidationCode::Valid as i32
    );
}

/// A Gateway `Submit` of `envelope` on its channel.
fn gateway_submit_request(envelope: &Envelope) -> weft_protos::gateway::SubmitRequest {
    weft_protos::gateway::SubmitRequest {
        transaction_id: tx_id_of(envelope),
        channel_id: CHANNEL.to_owned(),
        prepared_transaction: Some(envelope.clone()),
    }
}

/// A Gateway `Endorse` of `proposal` on `CHANNEL`, signed by `client`,
/// with both organisations endorsing.
fn endorse_by_both(proposal: &Proposal, client: &Signer) -> weft_protos::gateway::EndorseRequest {
    weft_protos::gateway::EndorseRequest {
        transaction_id: proposal.tx_id.clone(),
        channel_id: CHANNEL.to_owned(),
        proposed_transaction: Some(proposal.signed(client).unwrap()),
        endorsing_organizations: vec!["Org1MSP".to_owned(), "Org2MSP".to_owned()],
    }
}

/// The `gateway.ErrorDetail`s a Gateway attached to `status`.
fn error_details(status: &tonic::Status) -> Vec<weft_protos::gateway::ErrorDetail> {
    weft_protos::rpc::Status::decode(status.details())
        .unwrap()
        .details
        .iter()
        .map(|any| weft_protos::gateway::ErrorDetail::decode(any.value.as_slice()).unwrap())
        .collect()
}

/// The transaction ID in `envelope`'s channel header.
fn tx_id_of(envelope: &Envelope) -> String {
    let payload = weft_protos::common::Payload::decode(envelope.payload.clone()).unwrap();
    let header = payload.header.unwrap();
    weft_protos::common::ChannelHeader::decode(header.channel_header)
        .unwrap()
        .tx_id
}

/// The validation code the Gateway's `CommitStatus` answers for `tx_id`
/// on `CHANNEL`, asked as `client`.
async fn commit_status(
    gateway: &weft_protos::gateway::gateway_client::GatewayClient<Channel>,
    client: &Signer,
    tx_id: &str,
) -> i32 {
    let signed = hostile::commit_status_request(client, CHANNEL, tx_id, false);
    tokio::time::timeout(PATIENCE, gateway.clone().commit_status(signed))
        .await
        .expect("commit status in time")
        .unwrap()
        .into_inner()
        .result
}

/// `weft chaincode deploy` on `CHANNEL` of `network`, approved by org1's
/// and org2's `peers`, submitted to `orderer`; the chaincode to name.
fn chaincode_deploy(network: &Network, orderer: SocketAddr, peers: [SocketAddr; 2]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weft"));
    command
        .args(["chaincode", "deploy", "--channel", CHANNEL])
        .arg("--peers")
        .arg(format!("org1={},org2={}", peers[0], peers[1]))
        .args(["--orderer", &orderer.to_string()])
        .arg("--crypto")
        .arg(network.dir.join("crypto"));
    command
}

#[test]
fn a_bad_peer_config_names_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("peer.yaml");
    for (text, expected) in [
        ("peer:\n  id: p\n", "peer.yaml"),
        (
            "peer:\n  id: p\n  listenAddress: nowhere\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\norderers: []\n",
            "peer.listenAddress",
        ),
        (
            "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\norderers: [\"127.0.0.1:1\"]\n\
             chaincode:\n  external:\n    - name: kv\n      address: 127.0.0.1:9999\n",
            "chaincode.external[0].name: kv is a built-in chaincode",
        ),
        (
            "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\norderers: [\"127.0.0.1:1\"]\n\
             chaincode:\n  external:\n    - name: notes\n      address: nowhere\n",
            "chaincode.external[0].address",
        ),
        (
            "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\norderers: [\"127.0.0.1:1\"]\n\
             chaincode:\n  external:\n    - name: notes\n      address: 127.0.0.1:9999\n      \
             tlsRootCert: missing-ca.pem\n",
            "chaincode.external[0].tlsRootCert: reading",
        ),
        (
            "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\norderers: [\"127.0.0.1:1\"]\n\
             chaincode:\n  external:\n    - name: notes\n      address: 127.0.0.1:9999\n      \
             tlsClientCert: client.pem\n",
            "chaincode.external[0].tlsRootCert: a client certificate needs TLS",
        ),
        (
            "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\n  keepalive:\n    deliveryClient:\n      \
             timeout: 0s\norderers: [\"127.0.0.1:1\"]\n",
            "peer.keepalive.deliveryClient.timeout: must be more than zero",
        ),
        (
            "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\norderers: [\"127.0.0.1:1\"]\n\
             privateData:\n  pushAckTimeout: 0s\n",
            "privateData.pushAckTimeout: must be more than zero",
        ),
        (
            "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\norderers: [\"127.0.0.1:1\"]\n\
             privateData:\n  reconcileBatchSize: 0\n",
            "privateData.reconcileBatchSize: must be at least 1",
        ),
        (
            "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\norderers: [\"127.0.0.1:1\"]\n\
             privateData:\n  implicitCollectionDisseminationPolicy:\n    \
             requiredPeerCount: 2\n",
            "privateData.implicitCollectionDisseminationPolicy.requiredPeerCount: 2 is more \
             than its maxPeerCount 1",
        ),
        (
            "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
             mspConfigPath: msp\n  fileSystemPath: data\norderers: [\"127.0.0.1:1\"]\n\
             ordererChoice: nearest\n",
            "ordererChoice: unknown variant `nearest`",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["peer", "start", "--config", config.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{stderr}");
    }

    // Environment variables override keys of the file, as Fabric's
    // CORE_* variables do; a bad value still names the key.
    std::fs::write(
        &config,
        "peer:\n  id: p\n  listenAddress: 127.0.0.1:0\n  localMspId: Org1MSP\n  \
         mspConfigPath: msp\n  fileSystemPath: data\norderers: [\"127.0.0.1:1\"]\n\
         committer:\n  pipelineDepth: 4\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["peer", "start", "--config", config.to_str().unwrap()])
        .env("CORE_COMMITTER_PIPELINEDEPTH", "many")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("committer.pipelineDepth"), "{stderr}");
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["peer", "start", "--config", config.to_str().unwrap()])
        .env("CORE_COMMITTER_PIPELINEDEPTH", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("committer.pipelineDepth: must be at least 1"),
        "{stderr}"
    );
}

/// The workload, in order, and the codes the peer must give it.
fn expected_codes() -> Vec<TxValidationCode> {
    use TxValidationCode::*;
    vec![
        Valid,                    // first writes "counter"
        MvccReadConflict,         // read "counter" as never written
        Valid,                    // read "counter" at the version tx 0 wrote
        EndorsementPolicyFailure, // endorsed by org1 alone: MAJORITY needs both
        Valid,
    ]
}

/// A network made by `weft crypto generate` and `weft channel genesis`.
struct Network {
    dir: PathBuf,
    genesis: PathBuf,
    client: Signer,
    org1_peer: Signer,
    org2_peer: Signer,
    /// External chaincodes (name, address) the peers started from now on
    /// dial.
    external_chaincodes: Vec<(String, SocketAddr)>,
    /// The TLS files (CA, client certificate, client key) of those of them
    /// that serve TLS, by name.
    external_tls: Vec<(String, [PathBuf; 3])>,
    /// The validating peer that peers started from now on replicate, as
    /// endorser replicas; `None`: they validate blocks from the orderers.
    replica_of: Option<SocketAddr>,
    /// More keys of the `peer` and `gateway` sections of the peers
    /// started from now on, as YAML lines indented by two spaces.
    extra_peer_keys: String,
    extra_gateway_keys: String,
    /// More top-level sections of the peers' configs, as YAML.
    extra_sections: String,
    /// How long the peers started from now on wait for an external
    /// chaincode's answer.
    chaincode_execute_timeout: &'static str,
    /// Whether peers start with the test's channels in their
    /// configuration (`false`: with none).
    joins_channels: bool,
}

impl Network {
    fn create(dir: &Path) -> Self {
        Self::create_with(dir, |_| {})
    }

    /// A network whose crypto material `before_genesis` may change (given
    /// the `crypto` folder) before the channels' genesis blocks take it in.
    fn create_with(dir: &Path, before_genesis: impl FnOnce(&Path)) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(root.join("config/crypto.yaml"), dir.join("crypto.yaml")).unwrap();
        let channel_config = std::fs::read_to_string(root.join("config/channel.yaml")).unwrap();
        assert!(channel_config.contains("MaxMessageCount: 500"));
        let channel_config = channel_config.replace("MaxMessageCount: 500", "MaxMessageCount: 1");
        std::fs::write(dir.join("channel.yaml"), &channel_config).unwrap();
        // The second channel streams: its orderer signs a checkpoint every
        // 3 transactions or 20 ms.
        let commented =
            "  # StreamMode:\n  #   CheckpointTransactions: 100\n  #   CheckpointInterval: 2ms";
        assert!(channel_config.contains(commented));
        std::fs::write(
            dir.join("stream-channel.yaml"),
            channel_config.replace(
                commented,
                "  StreamMode:\n    CheckpointTransactions: 3\n    CheckpointInterval: 20ms",
            ),
        )
        .unwrap();
        weft(
            dir,
            &[
                "crypto",
                "generate",
                "--config",
                "crypto.yaml",
                "--output",
                "crypto",
            ],
        );
        before_genesis(&dir.join("crypto"));
        genesis_from(dir, "channel.yaml", CHANNEL, "ledger.block");
        genesis_from(dir, "stream-channel.yaml", SECOND_CHANNEL, "second.block");
        let users = dir.join("crypto/peerOrganizations/org1.example.com/users");
        Self {
            dir: dir.to_owned(),
            genesis: dir.join("ledger.block"),
            client: signer(&users.join("User1@org1.example.com/msp"), "Org1MSP"),
            org1_peer: signer(&dir.join(peer_msp_path("org1")), "Org1MSP"),
            org2_peer: signer(&dir.join(peer_msp_path("org2")), "Org2MSP"),
            external_chaincodes: Vec::new(),
            external_tls: Vec::new(),
            replica_of: None,
            extra_peer_keys: String::new(),
            joins_channels: true,
            extra_gateway_keys: String::new(),
            extra_sections: String::new(),
            chaincode_execute_timeout: "20s",
        }
    }

    fn orderer_msp(&self) -> PathBuf {
        self.dir
            .join("crypto/ordererOrganizations/example.com/orderers/orderer0.example.com/msp")
    }

    fn peer_msp(&self, org: &str) -> PathBuf {
        self.dir.join(peer_msp_path(org))
    }

    /// Org1's admin, who installs chaincode on its peers.
    fn org1_admin(&self) -> Signer {
        signer(
            &self
                .dir
                .join("crypto/peerOrganizations/org1.example.com/users/Admin@org1.example.com/msp"),
            "Org1MSP",
        )
    }

    /// The network's orderer: solo, ordering both channels.
    fn start_solo_orderer(&self) -> Node {
        self.start_solo_orderer_with("", &[])
    }

    /// [`Network::start_solo_orderer`] with `node_yaml` added to the
    /// `orderer` section of its config file (indented keys) and
    /// environment variables `env` overriding keys of it.
    fn start_solo_orderer_with(&self, node_yaml: &str, env: &[(&str, &str)]) -> Node {
        self.start_orderer_with(
            "orderer",
            &self.orderer_msp(),
            "OrdererMSP",
            &["ledger.block", "second.block"],
            (node_yaml, env),
        )
    }

    fn start_orderer(&self, name: &str, msp: &Path, msp_id: &str, blocks: &[&str]) -> Node {
        self.start_orderer_with(name, msp, msp_id, blocks, ("", &[]))
    }

    fn start_orderer_with(
        &self,
        name: &str,
        msp: &Path,
        msp_id: &str,
        blocks: &[&str],
        (node_yaml, env): (&str, &[(&str, &str)]),
    ) -> Node {
        let config = self.dir.join(format!("{name}.yaml"));
        let channels: String = blocks
            .iter()
            .map(|block| format!("  - genesisBlock: {block}\n"))
            .collect();
        std::fs::write(
            &config,
            format!(
                "orderer:\n  id: {name}\n  listenAddress: 127.0.0.1:0\n  localMspId: {msp_id}\n  \
                 mspConfigPath: {msp}\n  fileSystemPath: {name}\n{node_yaml}\
                 channels:\n{channels}\
                 consensus:\n  type: solo\n",
                msp = msp.display(),
            ),
        )
        .unwrap();
        Node::start_with_env(
            "orderer",
            &config,
            &self.dir.join(format!("{name}.log")),
            env,
        )
    }

    fn start_peer(&self, orderers: &[SocketAddr]) -> Node {
        self.start_peer_in(&self.dir.join("peer0"), orderers)
    }

    fn start_peer_in(&self, data: &Path, orderers: &[SocketAddr]) -> Node {
        self.start_org_peer("org1", data, orderers, &[])
    }

    /// A peer of each organisation, in `dir`/org1 and `dir`/org2, on
    /// `orderer`; org1's Gateway (and dissemination) knows org2's peer.
    fn start_two_orgs(&self, dir: &Path, orderer: SocketAddr) -> (Node, Node) {
        let org2 = self.start_org_peer("org2", &dir.join("org2"), &[orderer], &[]);
        let org1 = self.start_org_peer(
            "org1",
            &dir.join("org1"),
            &[orderer],
            &[("Org2MSP", org2.grpc)],
        );
        (org1, org2)
    }

    /// Starts peer0 of `org` with its ledgers in `data`, trying `orderers`
    /// in the order given; its Gateway asks `gateway_peers` (MSP ID,
    /// address) for endorsements.
    fn start_org_peer(
        &self,
        org: &str,
        data: &Path,
        orderers: &[SocketAddr],
        gateway_peers: &[(&str, SocketAddr)],
    ) -> Node {
        self.start_org_peer_at(org, data, "127.0.0.1:0", orderers, gateway_peers)
    }

    /// As [`Self::start_org_peer`], listening at `listen` (`host:port`).
    fn start_org_peer_at(
        &self,
        org: &str,
        data: &Path,
        listen: &str,
        orderers: &[SocketAddr],
        gateway_peers: &[(&str, SocketAddr)],
    ) -> Node {
        let gateway: String = gateway_peers
            .iter()
            .map(|(msp_id, address)| {
                format!("    - mspId: {msp_id}\n      address: \"{address}\"\n")
            })
            .collect();
        let gateway = if gateway.is_empty() {
            "  peers: []\n".to_owned()
        } else {
            format!("  peers:\n{gateway}")
        };
        let external: String = self
            .external_chaincodes
            .iter()
            .map(|(name, address)| {
                let tls = self
                    .external_tls
                    .iter()
                    .find(|(secured, _)| secured == name)
                    .map_or_else(String::new, |(_, [ca, cert, key])| {
                        format!(
                            "      tlsRootCert: {}\n      tlsClientCert: {}\n      tlsClientKey: {}\n",
                            ca.display(),
                            cert.display(),
                            key.display()
                        )
                    });
                format!("    - name: {name}\n      address: \"{address}\"\n{tls}")
            })
            .collect();
        let chaincode = if external.is_empty() {
            String::new()
        } else {
            format!(
                "chaincode:\n  executeTimeout: {}\n  external:\n{external}",
                self.chaincode_execute_timeout
            )
        };
        let replica = self.replica_of.map_or_else(String::new, |validating| {
            format!("  blockSource: peers\n  validatingPeers: [\"{validating}\"]\n")
        });
        // Named after the data directory: two peers of one org are apart.
        let name = format!(
            "peer-{org}-{}",
            data.file_name().unwrap_or_default().to_string_lossy()
        );
        let config = self.dir.join(format!("{name}.yaml"));
        let orderers: Vec<String> = orderers.iter().map(|a| format!("\"{a}\"")).collect();
        let channels = if self.joins_channels {
            format!(
                "channels:\n  - genesisBlock: {}\n  - genesisBlock: {}\n",
                self.genesis.display(),
                self.dir.join("second.block").display()
            )
        } else {
            "channels: []\n".to_owned()
        };
        let msp_id = if org == "org1" { "Org1MSP" } else { "Org2MSP" };
        std::fs::write(
            &config,
            format!(
                "peer:\n  id: peer0.{org}.example.com\n  listenAddress: {listen}\n  \
                 localMspId: {msp_id}\n  mspConfigPath: {msp}\n  fileSystemPath: {data}\n\
                 {extra_peer_keys}\
                 {channels}\
                 orderers: [{orderers}]\n\
                 ordererChoice: listed\n\
                 committer:\n  reconnectBackoffMax: 200ms\n{replica}\
                 {chaincode}\
                 gateway:\n{gateway}{extra_gateway_keys}\
                 {extra_sections}\
                 operations:\n  listenAddress: 127.0.0.1:0\n",
                msp = self.peer_msp(org).display(),
                data = data.display(),
                channels = channels,
                orderers = orderers.join(", "),
                extra_peer_keys = self.extra_peer_keys,
                extra_gateway_keys = self.extra_gateway_keys,
                extra_sections = self.extra_sections,
            ),
        )
        .unwrap();
        let mut node = Node::start("peer", &config, &self.dir.join(format!("{name}.log")));
        node.data = Some(data.to_owned());
        node
    }

    /// A proposal by the client to invoke `args[0]` with the rest of `args`.
    fn proposal(&self, channel: &str, args: &[&str]) -> Proposal {
        let arguments = args[1..]
            .iter()
            .map(|arg| Bytes::from(arg.to_string()))
            .collect();
        self.proposal_with(channel, args[0], arguments)
    }

    /// A proposal by the client to invoke `chaincode` with `args`.
    fn proposal_with(&self, channel: &str, chaincode: &str, args: Vec<Bytes>) -> Proposal {
        let invocation = Invocation {
            channel_id: channel,
            chaincode,
            args,
            nonce: self.client.new_nonce().unwrap(),
            timestamp_seconds: weft_msp::now(),
        };
        Proposal::new(&invocation, self.client.serialized_identity().clone())
    }

    /// The transactions of [`expected_codes`], in order.
    fn workload(&self) -> Vec<Envelope> {
        let both: &[&Signer] = &[&self.org1_peer, &self.org2_peer];
        vec![
            self.put("counter", None, both),
            self.put("counter", Some(None), both),
            self.put("counter", Some(Some((1, 0))), both),
            self.put("lonely", None, &[&self.org1_peer]),
            self.put("other", None, both),
        ]
    }

    /// A transaction writing `key`, having read it at `read` (`Some(None)`:
    /// read as absent), endorsed by `endorsers`.
    fn put(&self, key: &str, read: Option<Option<(u64, u64)>>, endorsers: &[&Signer]) -> Envelope {
        self.put_on(CHANNEL, key, read, endorsers)
    }

    fn put_on(
        &self,
        channel: &str,
        key: &str,
        read: Option<Option<(u64, u64)>>,
        endorsers: &[&Signer],
    ) -> Envelope {
        self.put_as(&self.client, channel, key, read, endorsers)
    }

    /// [`Network::put_on`] proposed and signed by `creator`.
    fn put_as(
        &self,
        creator: &Signer,
        channel: &str,
        key: &str,
        read: Option<Option<(u64, u64)>>,
        endorsers: &[&Signer],
    ) -> Envelope {
        let mut rwset = ReadWriteSetBuilder::new();
        if let Some(version) = read {
            rwset.read(CHAINCODE, key, version);
        }
        rwset.write(CHAINCODE, key, Bytes::from_static(b"value"));
        let args = vec![Bytes::from_static(b"put"), Bytes::from(key.to_owned())];
        let call = (channel, CHAINCODE, args);
        self.transaction_as(creator, call, &rwset, endorsers)
    }

    /// The transaction of `creator`'s call (channel, chaincode, arguments)
    /// whose simulation recorded `rwset`, endorsed by `endorsers`.
    fn transaction_as(
        &self,
        creator: &Signer,
        (channel, chaincode, args): (&str, &str, Vec<Bytes>),
        rwset: &ReadWriteSetBuilder,
        endorsers: &[&Signer],
    ) -> Envelope {
        let invocation = Invocation {
            channel_id: channel,
            chaincode,
            args,
            nonce: creator.new_nonce().unwrap(),
            timestamp_seconds: weft_msp::now(),
        };
        let proposal = Proposal::new(&invocation, creator.serialized_identity().clone());
        let simulation = SimulationResult {
            results: rwset.encode(),
            events: Bytes::new(),
            response: Response {
                status: 200,
                message: String::new(),
                payload: Bytes::new(),
            },
            chaincode_id: ChaincodeId {
                path: String::new(),
                name: chaincode.to_owned(),
                version: "1.0".to_owned(),
            },
        };
        let endorsements: Vec<_> = endorsers
            .iter()
            .map(|endorser| endorse(&proposal, &simulation, *endorser).unwrap())
            .collect();
        proposal.transaction(&endorsements, creator).unwrap()
    }
}

/// Assembles `proposal`'s transaction from `responses`, broadcasts it and
/// waits until every one of `peers` has committed it VALID in block
/// `height` (so that the next proposal reads its writes on any of them).
async fn submit(
    network: &Network,
    orderer: SocketAddr,
    peers: &[SocketAddr],
    proposal: &Proposal,
    responses: &[weft_protos::protos::ProposalResponse],
    height: u64,
) {
    let envelope = proposal.transaction(responses, &network.client).unwrap();
    assert_eq!(broadcast(orderer, &[envelope]).await, [Status::Success]);
    for peer in peers {
        let codes = committed_codes(*peer, &network.client, height).await;
        assert_eq!(
            codes.last(),
            Some(&TxValidationCode::Valid),
            "{}",
            proposal.tx_id
        );
    }
}

/// Sends `signed` to `peer`'s Endorser; the response it answers with.
async fn endorse_one(peer: SocketAddr, signed: &weft_protos::protos::SignedProposal) -> Response {
    endorse_all(&[peer], signed)
        .await
        .remove(0)
        .response
        .expect("a proposal response carries a response")
}

/// Sends `signed` to each peer's Endorser; their answers in order.
async fn endorse_all(
    peers: &[SocketAddr],
    signed: &weft_protos::protos::SignedProposal,
) -> Vec<weft_protos::protos::ProposalResponse> {
    let mut responses = Vec::new();
    for peer in peers {
        let mut client = EndorserClient::new(connect(*peer).await);
        responses.push(
            client
                .process_proposal(signed.clone())
                .await
                .unwrap()
                .into_inner(),
        );
    }
    responses
}

fn peer_msp_path(org: &str) -> String {
    format!("crypto/peerOrganizations/{org}.example.com/peers/peer0.{org}.example.com/msp")
}

fn signer(dir: &Path, msp_id: &str) -> Signer {
    weft_msp::folder::load_signer(dir, msp_id).unwrap().unwrap()
}

/// `weft channel genesis` of profile TwoOrgs in `dir` (from its
/// channel.yaml): the genesis block of `channel`, written to `output`.
fn genesis(dir: &Path, channel: &str, output: &str) {
    genesis_from(dir, "channel.yaml", channel, output);
}

fn genesis_from(dir: &Path, config: &str, channel: &str, output: &str) {
    weft(
        dir,
        &[
            "channel",
            "genesis",
            "--config",
            config,
            "--profile",
            "TwoOrgs",
            "--channel",
            channel,
            "--output",
            output,
        ],
    );
}

fn weft(dir: &Path, args: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "weft {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A `weft orderer start` or `weft peer start` child process, killed when
/// dropped.
struct Node {
    child: Child,
    grpc: SocketAddr,
    operations: Option<SocketAddr>,
    data: Option<PathBuf>,
}

impl Node {
    /// Starts the node and reads the addresses from its `ready` line.
    fn start(role: &str, config: &Path, log: &Path) -> Self {
        Self::start_with_env(role, config, log, &[])
    }

    /// Starts the node with environment variables `env` set (overrides
    /// of keys of its config file).
    fn start_with_env(role: &str, config: &Path, log: &Path, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args([role, "start", "--config"])
            .arg(config)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = |label: &str| -> Option<SocketAddr> {
            line.split(label)
                .nth(1)?
                .split([',', ' '])
                .next()?
                .parse()
                .ok()
        };
        let grpc = address("grpc ").unwrap_or_else(|| {
            panic!(
                "{role} did not start: {line:?}\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        });
        Self {
            grpc,
            operations: address("operations "),
            child,
            data: None,
        }
    }

    /// Stops the node with SIGTERM, checks it exited cleanly and returns
    /// its data directory.
    fn stop(mut self) -> PathBuf {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{status}");
                break;
            }
            assert!(started.elapsed() < PATIENCE, "the node ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.data.take().unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The chaincode event in an endorsement, if the chaincode set one.
fn event_of(
    response: &weft_protos::protos::ProposalResponse,
) -> Option<weft_protos::protos::ChaincodeEvent> {
    let payload =
        weft_protos::protos::ProposalResponsePayload::decode(response.payload.clone()).unwrap();
    let action = weft_protos::protos::ChaincodeAction::decode(payload.extension).unwrap();
    (!action.events.is_empty())
        .then(|| weft_protos::protos::ChaincodeEvent::decode(action.events).unwrap())
}

/// What the Gateway-client `script` in `tests/js` saw, driving `peer` on
/// `channel` as org1's User1 of `network`.
fn gateway_client(
    network: &Network,
    script: &str,
    peer: SocketAddr,
    channel: &str,
) -> serde_json::Value {
    gateway_client_as(network, "org1", script, peer, channel, &[])
}

/// [`gateway_client`] as User1 of organisation `org` (`org1`, `org2`),
/// with `env` in the script's environment.
fn gateway_client_as(
    network: &Network,
    org: &str,
    script: &str,
    peer: SocketAddr,
    channel: &str,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let user = network.dir.join(format!(
        "crypto/peerOrganizations/{org}.example.com/users/User1@{org}.example.com/msp"
    ));
    let msp_id = format!("O{}MSP", &org[1..]);
    let stdout = node::stdout_of(
        node::node()
            .arg(script)
            .arg(peer.to_string())
            .arg(msp_id)
            .arg(user.join(format!("signcerts/User1@{org}.example.com-cert.pem")))
            .arg(user.join("keystore/priv_sk"))
            .arg(channel)
            .envs(env.iter().copied()),
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

/// `tests/js/chaincode.js`: a chaincode written with Fabric's Node.js
/// shim, serving as chaincode-as-a-service. Killed when dropped.
struct ShimChaincode {
    child: Child,
    address: SocketAddr,
}

impl ShimChaincode {
    fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        Self::start_at(dir, port)
    }

    /// The contract in `tests/js/<module>` (written with Fabric's
    /// contract API), run by Fabric's `fabric-chaincode-node server` at a
    /// free port; returns once the port takes connections.
    fn contract(dir: &Path, module: &str) -> Self {
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let log = dir.join(format!("{module}-chaincode.log"));
        let mut child = node::node()
            .args(["node_modules/fabric-shim/cli.js", "server"])
            .arg("--chaincode-address")
            .arg(address.to_string())
            .args(["--chaincode-id", &format!("{module}_1.0:0123abcd")])
            .args(["--module-path", module])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node runs (CI installs it)");
        let started = Instant::now();
        while std::net::TcpStream::connect(address).is_err() {
            assert!(
                child.try_wait().unwrap().is_none() && started.elapsed() < PATIENCE,
                "the contract did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, address }
    }

    /// Starts the chaincode on `address` and waits until it listens.
    fn start_at(dir: &Path, address: SocketAddr) -> Self {
        Self::start_with(dir, address, &[])
    }

    /// The chaincode at a free port, serving TLS only (peer0.org2's TLS
    /// certificate and key) and only to clients with a certificate from
    /// org1's TLS CA; with the files a client needs, in PEM: the CA the
    /// server's certificate chains to, and a client certificate and key
    /// (peer0.org1's TLS pair).
    fn mutual_tls(network: &Network) -> (Self, [PathBuf; 3]) {
        let crypto = network.dir.join("crypto/peerOrganizations");
        let server = crypto.join("org2.example.com/peers/peer0.org2.example.com/tls");
        let client = crypto.join("org1.example.com/peers/peer0.org1.example.com/tls");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let chaincode = Self::start_with(
            &network.dir,
            port,
            &[
                &server.join("server.crt"),
                &server.join("server.key"),
                &client.join("ca.crt"),
            ],
        );
        let client_files = [
            server.join("ca.crt"),
            client.join("server.crt"),
            client.join("server.key"),
        ];
        (chaincode, client_files)
    }

    fn start_with(dir: &Path, address: SocketAddr, tls: &[&Path]) -> Self {
        let log = dir.join(format!("chaincode-{}.log", address.port()));
        let mut child = node::node()
            .arg("chaincode.js")
            .arg(address.to_string())
            .arg("notes_1.0:0123abcd")
            .args(tls)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("node runs (CI installs it)");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while stdout.read_line(&mut line).unwrap() > 0 && !line.contains("chaincode listening") {
            line.clear();
        }
        // The shim logs to stdout: keep draining it.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the chaincode did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Self { child, address }
    }

    /// Waits for the chaincode process to end by itself.
    fn wait_exit(&mut self) {
        let started = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(started.elapsed() < PATIENCE, "the chaincode did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ShimChaincode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(address: SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Broadcasts `envelopes` on one stream; the statuses in order.
async fn broadcast(orderer: SocketAddr, envelopes: &[Envelope]) -> Vec<Status> {
    let mut client = AtomicBroadcastClient::new(connect(orderer).await);
    let mut responses = client
        .broadcast(tokio_stream::iter(envelopes.to_vec()))
        .await
        .unwrap()
        .into_inner();
    let mut statuses = Vec::new();
    while let Some(response) = responses.message().await.unwrap() {
        statuses.push(Status::try_from(response.status).unwrap());
    }
    statuses
}

/// The next block a DeliverWithPrivateData stream sends: its number, and
/// the collections of private data sent with it, by transaction index.
async fn next_collections_read(
    stream: &mut tonic::Streaming<weft_protos::protos::DeliverResponse>,
) -> (u64, Vec<(u64, Vec<String>)>) {
    let response = tokio::time::timeout(PATIENCE, stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let Some(PeerResponse::BlockAndPrivateData(block)) = response.r#type else {
        panic!("peer answered {response:?}");
    };
    let number = block.block.unwrap().header.unwrap().number;
    let collections = block
        .private_data_map
        .into_iter()
        .map(|(tx, set)| {
            let collections = set
                .ns_pvt_rwset
                .iter()
                .flat_map(|ns| &ns.collection_pvt_rwset)
                .map(|collection| collection.collection_name.clone())
                .collect();
            (tx, collections)
        })
        .collect();
    (number, collections)
}

/// A request for blocks `start..=stop` of `channel`, waiting for those
/// not yet committed.
fn seek(channel: &str, client: &Signer, start: u64, stop: u64) -> Envelope {
    seek_with(client, channel, start, stop, SeekBehavior::BlockUntilReady)
}

/// A request for blocks `start..=stop` of `channel` by `signer`, with
/// `behavior` for blocks not yet committed.
fn seek_with(
    signer: &Signer,
    channel: &str,
    start: u64,
    stop: u64,
    behavior: SeekBehavior,
) -> Envelope {
    seek_made_at(signer, channel, [start, stop], behavior, weft_msp::now())
}

/// [`seek_with`] as if made at `timestamp` (seconds since the Unix epoch).
fn seek_made_at(
    signer: &Signer,
    channel: &str,
    [start, stop]: [u64; 2],
    behavior: SeekBehavior,
    timestamp: i64,
) -> Envelope {
    let info = SeekInfo {
        behavior: behavior as i32,
        ..seek_range(start, stop)
    };
    signed_envelope(
        HeaderType::DeliverSeekInfo,
        channel,
        info.encode_to_vec().into(),
        signer,
        signer.new_nonce().unwrap(),
        timestamp,
    )
    .unwrap()
}

/// Blocks 1..=`last` from an orderer's Deliver.
async fn orderer_blocks(orderer: SocketAddr, client: &Signer, last: u64) -> Vec<Block> {
    let mut stream = AtomicBroadcastClient::new(connect(orderer).await)
        .deliver(tokio_stream::iter([seek(CHANNEL, client, 1, last)]))
        .await
        .unwrap()
        .into_inner();
    let mut blocks = Vec::new();
    while blocks.len() < last as usize {
        let response = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .expect("the orderer cut every block")
            .unwrap()
            .unwrap();
        match response.r#type {
            Some(OrdererResponse::Block(block)) => blocks.push(block),
            other => panic!("orderer answered {other:?}"),
        }
    }
    blocks
}

/// Blocks 1..=`last` from the peer's Deliver.
async fn peer_blocks(peer: SocketAddr, client: &Signer, last: u64) -> Vec<Block> {
    let mut stream = DeliverClient::new(connect(peer).await)
        .deliver(tokio_stream::iter([seek(CHANNEL, client, 1, last)]))
        .await
        .unwrap()
        .into_inner();
    let mut blocks = Vec::new();
    while blocks.len() < last as usize {
        match stream.message().await.unwrap().unwrap().r#type {
            Some(PeerResponse::Block(block)) => blocks.push(block),
            other => panic!("peer answered {other:?}"),
        }
    }
    blocks
}

/// The validation codes of the transactions of blocks 1..=`last`, as a
/// client watching the peer's filtered blocks sees them; waits for the
/// peer to commit them.
async fn committed_codes(peer: SocketAddr, client: &Signer, last: u64) -> Vec<TxValidationCode> {
    committed_codes_on(CHANNEL, peer, client, last).await
}

async fn committed_codes_on(
    channel: &str,
    peer: SocketAddr,
    client: &Signer,
    last: u64,
) -> Vec<TxValidationCode> {
    let mut stream = DeliverClient::new(connect(peer).await)
        .deliver_filtered(tokio_stream::iter([seek(channel, client, 1, last)]))
        .await
        .unwrap()
        .into_inner();
    let mut codes = Vec::new();
    for number in 1..=last {
        let response = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .unwrap_or_else(|_| panic!("the peer did not commit block {number}"))
            .unwrap()
            .unwrap();
        let Some(PeerResponse::FilteredBlock(block)) = response.r#type else {
            panic!("peer answered {response:?}");
        };
        assert_eq!(block.number, number);
        codes.extend(
            block
                .filtered_transactions
                .iter()
                .map(|tx| TxValidationCode::try_from(tx.tx_validation_code).unwrap()),
        );
    }
    codes
}

fn header_of(block: &Block) -> &weft_protos::common::BlockHeader {
    block.header.as_ref().unwrap()
}

fn header_hashes(blocks: &[Block]) -> Vec<Vec<u8>> {
    blocks
        .iter()
        .map(|block| block_header_hash(header_of(block)).to_vec())
        .collect()
}

fn signatures_of(block: &Block) -> Bytes {
    block.metadata.as_ref().unwrap().metadata[BlockMetadataIndex::Signatures as usize].clone()
}

/// `GET path`: the status code and body.
fn http_get(address: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The value of the series `name` (with its labels, if it has any) in
/// Prometheus text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map(|value| value.trim().parse::<f64>().unwrap())
        .next()
        .unwrap_or_else(|| panic!("no series {name} in\n{text}"))
}
