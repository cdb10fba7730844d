//! The hostile-input catalogue (issue 21; docs/security.md): what a
//! careless or malicious client sends to every public endpoint of a peer
//! and an orderer, in one table. Each row names the endpoint, what is
//! wrong with the request, the answer expected (a Fabric status, a gRPC
//! code, an HTTP status) and words its message must hold, so that a client
//! learns what to fix. After the table: no block was cut or committed for
//! any of it, none of the keys tried is in the state, thousands of idle
//! streams neither stop the peer nor grow its memory without bound, and
//! both nodes still order and commit a good transaction, in the very next
//! block.

use std::future::Future;
use std::pin::Pin;

use weft_msp::NodeRole;
use weft_msp::testing::{IssueOptions, TestIdentity, TestOrg, high_s_twin};
use weft_protos::common::{ChannelHeader, Header, Payload};
use weft_protos::gateway::gateway_client::GatewayClient;
use weft_protos::gateway::{
    ChaincodeEventsRequest, CommitStatusRequest, EndorseRequest, EvaluateRequest,
    SignedChaincodeEventsRequest, SignedCommitStatusRequest, SubmitRequest,
};
use weft_protos::orderer::seek_position::Type as Position;
use weft_protos::orderer::{SeekPosition, SeekSpecified};
use weft_protos::protos::chaincode_message::Type as ShimMessage;
use weft_protos::protos::chaincode_server::{Chaincode, ChaincodeServer};
use weft_protos::protos::{
    ChaincodeInput, ChaincodeMessage, GetState, ProposalResponse, PutState, SignedProposal,
};

use super::*;

const ENDORSER: &str = "/protos.Endorser/ProcessProposal";
const PEER_DELIVER: &str = "/protos.Deliver/Deliver";
const BROADCAST: &str = "/orderer.AtomicBroadcast/Broadcast";
const ORDERER_DELIVER: &str = "/orderer.AtomicBroadcast/Deliver";
/// A block number no test network reaches.
const FAR_FUTURE: u64 = 1 << 40;
/// Idle Deliver streams held open on the peer at once.
const IDLE_STREAMS: usize = 2_000;
/// How much the peer's resident memory may grow while they are open.
const IDLE_STREAMS_RSS_MAX: u64 = 256 << 20;
/// Bytes that are no protobuf message: field 1 with wire type 7.
const NOT_PROTOBUF: &[u8] = &[0x0f, 0xff, 0xff];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_at_every_endpoint_is_refused_with_its_reason_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    // Org1's own CA issues a client certificate that a CRL in the channel
    // config revokes; the rest of the odd identities come after.
    let mut revoked = None;
    let mut network = Network::create_with(dir.path(), |crypto| {
        let org1 = org1_ca(crypto, 1_000_000);
        let identity = org1.identity(NodeRole::Client);
        let crls = crypto.join("peerOrganizations/org1.example.com/msp/crls");
        std::fs::create_dir_all(&crls).unwrap();
        std::fs::write(crls.join("crl.pem"), org1.crl(&[identity.serial])).unwrap();
        revoked = Some(identity);
    });
    let org1 = org1_ca(&dir.path().join("crypto"), 2_000_000);
    let client = &network.client;
    let who = Identities {
        revoked: revoked.unwrap().signer(),
        foreign_ca: TestOrg::new("Org1MSP").signer(NodeRole::Client),
        unknown_msp: TestOrg::new("Org9MSP").signer(NodeRole::Client),
        expired: issue(&org1, (2020, 2021)),
        not_yet_valid: issue(&org1, (2090, 2099)),
    };

    // A chaincode server that breaks the shim protocol, each transaction
    // as its function name says.
    network.external_chaincodes = vec![("hostile".to_owned(), HostileChaincode::serve().await)];
    network.chaincode_execute_timeout = "2s";

    let orderer = network.start_solo_orderer();
    let org2 = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    let org1_peer = network.start_org_peer(
        "org1",
        &dir.path().join("org1"),
        &[orderer.grpc],
        &[("Org2MSP", org2.grpc)],
    );
    let (peer, orderer_address) = (org1_peer.grpc, orderer.grpc);
    let peers = [org1_peer.grpc, org2.grpc];

    // One transaction committed, to replay.
    let committed = proposal_by(client, CHANNEL, "kv", &[b"put", b"committed", b"v"]);
    let committed_signed = committed.signed(client).unwrap();
    let responses = endorse_all(&peers, &committed_signed).await;
    let committed_envelope = committed.transaction(&responses, client).unwrap();
    submit(&network, orderer.grpc, &peers, &committed, &responses, 1).await;
    let height = 2;

    let good = proposal_by(client, CHANNEL, "kv", &[b"put", b"hostile-good", b"v"]);
    let other = proposal_by(client, CHANNEL, "kv", &[b"put", b"hostile-other", b"v"]);
    let signed_by = |signer: &Signer| {
        proposal_by(signer, CHANNEL, "kv", &[b"put", b"hostile-key", b"v"])
            .signed(signer)
            .unwrap()
    };
    let over_other_bytes = SignedProposal {
        proposal_bytes: good.bytes.clone(),
        signature: client.sign(&other.bytes).unwrap().into(),
    };
    let high_s = SignedProposal {
        proposal_bytes: good.bytes.clone(),
        signature: high_s_twin(&client.sign(&good.bytes).unwrap()).into(),
    };
    let malformed_der = SignedProposal {
        proposal_bytes: good.bytes.clone(),
        signature: Bytes::from_static(b"\x30\x03\x02\x01"),
    };
    let invoke = |channel: &str, chaincode: &str, args: &[&[u8]]| {
        proposal_by(client, channel, chaincode, args)
            .signed(client)
            .unwrap()
    };
    let put = |key: &[u8]| invoke(CHANNEL, "kv", &[b"put", key, b"v"]);
    let envelope_by = |signer: &Signer, channel: &str, key: &str| {
        network.put_as(
            signer,
            channel,
            key,
            None,
            &[&network.org1_peer, &network.org2_peer],
        )
    };
    let good_envelope = envelope_by(client, CHANNEL, "hostile-envelope");
    let envelope_over_other_bytes = Envelope {
        payload: good_envelope.payload.clone(),
        signature: client
            .sign(&envelope_by(client, CHANNEL, "hostile-other").payload)
            .unwrap()
            .into(),
    };
    let seek_as = |signer: &Signer, channel: &str, start: u64, stop: u64, behavior| {
        seek_with(signer, channel, start, stop, behavior)
    };
    let wait = SeekBehavior::BlockUntilReady;
    let no_wait = SeekBehavior::FailIfNotReady;
    let sixteen_minutes_old =
        |signer: &Signer| seek_made_at(signer, CHANNEL, [0, 0], wait, weft_msp::now() - 960);
    let operations = org1_peer.operations.unwrap();

    let cases: Vec<Case> = vec![
        // The peer's Endorser.
        case(
            "Endorser",
            "bytes that are not a SignedProposal",
            "Internal",
            "failed to decode Protobuf message",
            endorser_raw(peer, NOT_PROTOBUF.into()),
        ),
        case(
            "Endorser",
            "proposal bytes that are not a Proposal",
            "500",
            "malformed proposal",
            endorser(
                peer,
                SignedProposal {
                    proposal_bytes: NOT_PROTOBUF.into(),
                    signature: Bytes::new(),
                },
            ),
        ),
        case(
            "Endorser",
            "a truncated proposal",
            "500",
            "malformed proposal",
            endorser(
                peer,
                SignedProposal {
                    proposal_bytes: good.bytes.slice(..good.bytes.len() / 2),
                    signature: client.sign(&good.bytes).unwrap().into(),
                },
            ),
        ),
        case(
            "Endorser",
            "an Envelope where the Proposal belongs",
            "500",
            "malformed proposal",
            endorser(
                peer,
                SignedProposal {
                    proposal_bytes: good_envelope.encode_to_vec().into(),
                    signature: Bytes::new(),
                },
            ),
        ),
        case(
            "Endorser",
            "a message over the size limit",
            "ResourceExhausted",
            "the request is too large",
            endorser_raw(peer, vec![0u8; (100 << 20) + 1024].into()),
        ),
        case(
            "Endorser",
            "a high-S signature",
            "500",
            "signature has a high S value",
            endorser(peer, high_s.clone()),
        ),
        case(
            "Endorser",
            "a signature that is not DER",
            "500",
            "signature is not a DER ECDSA signature",
            endorser(peer, malformed_der.clone()),
        ),
        case(
            "Endorser",
            "a signature over other bytes",
            "500",
            "the creator's signature does not verify",
            endorser(peer, over_other_bytes.clone()),
        ),
        case(
            "Endorser",
            "a certificate another CA issued under Org1MSP",
            "500",
            "certificate does not chain to a CA of MSP Org1MSP",
            endorser(peer, signed_by(&who.foreign_ca)),
        ),
        case(
            "Endorser",
            "an MSP the channel does not know",
            "500",
            "unknown MSP \"Org9MSP\"",
            endorser(peer, signed_by(&who.unknown_msp)),
        ),
        case(
            "Endorser",
            "an expired certificate",
            "500",
            "certificate expired at",
            endorser(peer, signed_by(&who.expired)),
        ),
        case(
            "Endorser",
            "a certificate not valid yet",
            "500",
            "certificate is not valid before",
            endorser(peer, signed_by(&who.not_yet_valid)),
        ),
        case(
            "Endorser",
            "a revoked certificate",
            "500",
            "is revoked",
            endorser(peer, signed_by(&who.revoked)),
        ),
        case(
            "Endorser",
            "a TxID already committed",
            "500",
            "duplicate transaction found",
            endorser(peer, committed_signed.clone()),
        ),
        case(
            "Endorser",
            "a TxID that is not the hash of nonce and creator",
            "500",
            "invalid txID",
            endorser(peer, forged_tx_id_proposal(&good, client)),
        ),
        case(
            "Endorser",
            "an unknown channel",
            "500",
            "channel \"nochannel\" not found",
            endorser(peer, invoke("nochannel", "kv", &[b"get", b"k"])),
        ),
        case(
            "Endorser",
            "an unknown chaincode",
            "500",
            "\"nosuch\" not found",
            endorser(peer, invoke(CHANNEL, "nosuch", &[b"f"])),
        ),
        case(
            "Endorser",
            "a chaincode name with a path",
            "500",
            "\"../kv\" not found",
            endorser(peer, invoke(CHANNEL, "../kv", &[b"get", b"k"])),
        ),
        case(
            "Endorser",
            "a chaincode name with a control character",
            "500",
            "\"kv\\u{7}\" not found",
            endorser(peer, invoke(CHANNEL, "kv\u{7}", &[b"get", b"k"])),
        ),
        case(
            "Endorser",
            "a key that is not UTF-8",
            "500",
            "a key is not UTF-8 text",
            endorser(peer, put(b"hostile-\xff\xfe")),
        ),
        // The peer's Gateway.
        case(
            "Gateway.Endorse",
            "no proposal",
            "InvalidArgument",
            "a proposed transaction is required",
            gateway_endorse(peer, None),
        ),
        case(
            "Gateway.Endorse",
            "proposal bytes that are not a Proposal",
            "InvalidArgument",
            "malformed proposal",
            gateway_endorse(
                peer,
                Some(SignedProposal {
                    proposal_bytes: NOT_PROTOBUF.into(),
                    signature: Bytes::new(),
                }),
            ),
        ),
        case(
            "Gateway.Endorse",
            "a signature over other bytes",
            "Aborted",
            "the creator's signature does not verify",
            gateway_endorse(peer, Some(over_other_bytes.clone())),
        ),
        case(
            "Gateway.Endorse",
            "a certificate another CA issued under Org1MSP",
            "Aborted",
            "certificate does not chain to a CA of MSP Org1MSP",
            gateway_endorse(peer, Some(signed_by(&who.foreign_ca))),
        ),
        case(
            "Gateway.Evaluate",
            "an unknown chaincode",
            "Aborted",
            "chaincode definition for \"nosuch\" not found",
            gateway_evaluate(peer, invoke(CHANNEL, "nosuch", &[b"f"])),
        ),
        case(
            "Gateway.Evaluate",
            "an expired certificate",
            "Aborted",
            "certificate expired at",
            gateway_evaluate(peer, signed_by(&who.expired)),
        ),
        case(
            "Gateway.Submit",
            "no envelope",
            "InvalidArgument",
            "a prepared transaction is required",
            gateway_submit(peer, CHANNEL, None),
        ),
        case(
            "Gateway.Submit",
            "an envelope that is not a transaction",
            "InvalidArgument",
            "has no readable channel header",
            gateway_submit(
                peer,
                CHANNEL,
                Some(Envelope {
                    payload: NOT_PROTOBUF.into(),
                    signature: client.sign(NOT_PROTOBUF).unwrap().into(),
                }),
            ),
        ),
        case(
            "Gateway.Submit",
            "a signature over other bytes",
            "Aborted",
            "status=FORBIDDEN, info=the creator's signature is not valid",
            gateway_submit(peer, CHANNEL, Some(envelope_over_other_bytes.clone())),
        ),
        case(
            "Gateway.Submit",
            "a channel ID that is not the envelope's",
            "InvalidArgument",
            "is for channel \"ledger\", not the requested \"second\"",
            gateway_submit(peer, SECOND_CHANNEL, Some(good_envelope.clone())),
        ),
        case(
            "Gateway.CommitStatus",
            "a request that is not a CommitStatusRequest",
            "InvalidArgument",
            "malformed request",
            gateway_commit_status(
                peer,
                SignedCommitStatusRequest {
                    request: NOT_PROTOBUF.into(),
                    signature: Bytes::new(),
                },
            ),
        ),
        case(
            "Gateway.CommitStatus",
            "a signature over other bytes",
            "PermissionDenied",
            "access denied",
            gateway_commit_status(
                peer,
                commit_status_request(client, CHANNEL, &committed.tx_id, true),
            ),
        ),
        case(
            "Gateway.CommitStatus",
            "an unknown channel",
            "NotFound",
            "\"nochannel\" not found",
            gateway_commit_status(
                peer,
                commit_status_request(client, "nochannel", &committed.tx_id, false),
            ),
        ),
        case(
            "Gateway.CommitStatus",
            "a certificate another CA issued under Org1MSP",
            "PermissionDenied",
            "access denied",
            gateway_commit_status(
                peer,
                commit_status_request(&who.foreign_ca, CHANNEL, &committed.tx_id, false),
            ),
        ),
        case(
            "Gateway.ChaincodeEvents",
            "an unknown channel",
            "NotFound",
            "\"nochannel\" not found",
            gateway_events(peer, events_request(client, "nochannel", 0, false)),
        ),
        case(
            "Gateway.ChaincodeEvents",
            "a signature over other bytes",
            "PermissionDenied",
            "access denied",
            gateway_events(peer, events_request(client, CHANNEL, 0, true)),
        ),
        case(
            "Gateway.ChaincodeEvents",
            "a start block far in the future",
            "WAITING",
            "",
            gateway_events(peer, events_request(client, CHANNEL, FAR_FUTURE, false)),
        ),
        // The peer's Deliver and DeliverFiltered.
        case(
            "Deliver (peer)",
            "bytes that are not an Envelope",
            "Internal",
            "not an Envelope",
            deliver_raw(peer, PEER_DELIVER, NOT_PROTOBUF.into()),
        ),
        case(
            "Deliver (peer)",
            "an unknown channel",
            "NotFound",
            "",
            peer_deliver(peer, seek_as(client, "nochannel", 0, 0, wait), false),
        ),
        case(
            "Deliver (peer)",
            "a certificate another CA issued under Org1MSP",
            "Forbidden",
            "",
            peer_deliver(peer, seek_as(&who.foreign_ca, CHANNEL, 0, 0, wait), false),
        ),
        case(
            "Deliver (peer)",
            "an expired certificate",
            "Forbidden",
            "",
            peer_deliver(peer, seek_as(&who.expired, CHANNEL, 0, 0, wait), false),
        ),
        case(
            "Deliver (peer)",
            "a revoked certificate",
            "Forbidden",
            "",
            peer_deliver(peer, seek_as(&who.revoked, CHANNEL, 0, 0, wait), false),
        ),
        case(
            "Deliver (peer)",
            "a signature over other bytes",
            "Forbidden",
            "",
            peer_deliver(
                peer,
                resigned(seek_as(client, CHANNEL, 0, 0, wait), client),
                false,
            ),
        ),
        case(
            "Deliver (peer)",
            "a block far in the future, without waiting",
            "NotFound",
            "",
            peer_deliver(
                peer,
                seek_as(client, CHANNEL, FAR_FUTURE, FAR_FUTURE, no_wait),
                false,
            ),
        ),
        // As Fabric's: a start beyond the height is NOT_FOUND even when the
        // client would wait; only the next block is waited for.
        case(
            "Deliver (peer)",
            "the next block, waiting",
            "WAITING",
            "",
            peer_deliver(peer, seek_as(client, CHANNEL, height, height, wait), false),
        ),
        case(
            "Deliver (peer)",
            "a block far in the future, waiting",
            "NotFound",
            "",
            peer_deliver(
                peer,
                seek_as(client, CHANNEL, FAR_FUTURE, FAR_FUTURE, wait),
                false,
            ),
        ),
        case(
            "Deliver (peer)",
            "every block there will ever be",
            "BLOCK",
            "0",
            peer_deliver(peer, seek_as(client, CHANNEL, 0, u64::MAX, wait), false),
        ),
        case(
            "Deliver (peer)",
            "a stop before the start",
            "BadRequest",
            "",
            peer_deliver(peer, seek_as(client, CHANNEL, 2, 1, wait), false),
        ),
        case(
            "Deliver (peer)",
            "a request made 16 minutes ago (Fabric's window is 15)",
            "BadRequest",
            "",
            peer_deliver(peer, sixteen_minutes_old(client), false),
        ),
        case(
            "DeliverFiltered (peer)",
            "a request made 16 minutes ago",
            "BadRequest",
            "",
            peer_deliver(peer, sixteen_minutes_old(client), true),
        ),
        case(
            "DeliverFiltered (peer)",
            "an unknown channel",
            "NotFound",
            "",
            peer_deliver(peer, seek_as(client, "nochannel", 0, 0, wait), true),
        ),
        case(
            "DeliverFiltered (peer)",
            "a revoked certificate",
            "Forbidden",
            "",
            peer_deliver(peer, seek_as(&who.revoked, CHANNEL, 0, 0, wait), true),
        ),
        case(
            "DeliverFiltered (peer)",
            "a request that is not a seek",
            "BadRequest",
            "",
            peer_deliver(
                peer,
                Envelope {
                    payload: Bytes::from_static(b"\x0a\x03abc"),
                    signature: Bytes::new(),
                },
                true,
            ),
        ),
        // The orderer's Broadcast and Deliver.
        case(
            "Broadcast",
            "bytes that are not an Envelope",
            "Internal",
            "not an Envelope",
            broadcast_raw(orderer_address, NOT_PROTOBUF.into()),
        ),
        case(
            "Broadcast",
            "a message over the size limit",
            "ResourceExhausted",
            "too large",
            broadcast_raw(orderer_address, vec![0u8; (100 << 20) + 1024].into()),
        ),
        case(
            "Broadcast",
            "a signature over other bytes",
            "Forbidden",
            "the creator's signature is not valid",
            orderer_broadcast(orderer_address, envelope_over_other_bytes.clone()),
        ),
        case(
            "Broadcast",
            "a certificate another CA issued under Org1MSP",
            "Forbidden",
            "certificate does not chain to a CA of MSP Org1MSP",
            orderer_broadcast(
                orderer_address,
                envelope_by(&who.foreign_ca, CHANNEL, "hostile-foreign"),
            ),
        ),
        case(
            "Broadcast",
            "an expired certificate",
            "Forbidden",
            "certificate expired at",
            orderer_broadcast(
                orderer_address,
                envelope_by(&who.expired, CHANNEL, "hostile-expired"),
            ),
        ),
        case(
            "Broadcast",
            "a revoked certificate",
            "Forbidden",
            "is revoked",
            orderer_broadcast(
                orderer_address,
                envelope_by(&who.revoked, CHANNEL, "hostile-revoked"),
            ),
        ),
        case(
            "Broadcast",
            "an unknown channel",
            "NotFound",
            "channel \"nochannel\" does not exist on this orderer",
            orderer_broadcast(
                orderer_address,
                envelope_by(client, "nochannel", "hostile-nochannel"),
            ),
        ),
        case(
            "Broadcast",
            "a TxID that is not the hash of nonce and creator",
            "BadRequest",
            "is not the hash of the transaction's nonce and creator",
            orderer_broadcast(
                orderer_address,
                forged_tx_id_envelope(&good_envelope, client),
            ),
        ),
        case(
            "Broadcast",
            "a transaction already ordered",
            "Success",
            "",
            orderer_broadcast(orderer_address, committed_envelope.clone()),
        ),
        case(
            "Deliver (orderer)",
            "bytes that are not an Envelope",
            "Internal",
            "not an Envelope",
            deliver_raw(orderer_address, ORDERER_DELIVER, NOT_PROTOBUF.into()),
        ),
        case(
            "Deliver (orderer)",
            "a revoked certificate",
            "Forbidden",
            "",
            orderer_deliver(orderer_address, seek_as(&who.revoked, CHANNEL, 0, 0, wait)),
        ),
        case(
            "Deliver (orderer)",
            "a request made 16 minutes ago",
            "BadRequest",
            "",
            orderer_deliver(orderer_address, sixteen_minutes_old(client)),
        ),
        case(
            "Deliver (orderer)",
            "a block far in the future, without waiting",
            "NotFound",
            "",
            orderer_deliver(
                orderer_address,
                seek_as(client, CHANNEL, FAR_FUTURE, FAR_FUTURE, no_wait),
            ),
        ),
        // The stream of a chaincode server the peer dials: what the server
        // sends for a transaction is refused, the transaction fails with
        // the reason, and the peer dials again for the next.
        case(
            "chaincode stream",
            "COMPLETED carrying no Response",
            "500",
            "COMPLETED does not carry a Response",
            endorser(peer, invoke(CHANNEL, "hostile", &[b"not-a-response"])),
        ),
        case(
            "chaincode stream",
            "a request whose payload is not its message",
            "500",
            "malformed GET_STATE payload",
            endorser(peer, invoke(CHANNEL, "hostile", &[b"malformed-request"])),
        ),
        case(
            "chaincode stream",
            "a message of an unknown type",
            "500",
            "unknown message type 999",
            endorser(peer, invoke(CHANNEL, "hostile", &[b"unknown-type"])),
        ),
        case(
            "chaincode stream",
            "a write of an empty key",
            "500",
            "a key must not be empty",
            endorser(peer, invoke(CHANNEL, "hostile", &[b"empty-key"])),
        ),
        case(
            "chaincode stream",
            "a flood of requests sent without waiting for answers",
            "500",
            "without waiting for answers",
            endorser(peer, invoke(CHANNEL, "hostile", &[b"flood"])),
        ),
        case(
            "chaincode stream",
            "the stream closed during the transaction",
            "500",
            "disconnected during the transaction",
            endorser(peer, invoke(CHANNEL, "hostile", &[b"disconnect"])),
        ),
        case(
            "chaincode stream",
            "no answer",
            "500",
            "did not complete within 2s",
            endorser(peer, invoke(CHANNEL, "hostile", &[b"silent"])),
        ),
        // The peer's operations endpoint (plain HTTP).
        case(
            "operations",
            "bytes that are not HTTP",
            "HTTP 400",
            "",
            http(operations, b"\x16\x03\x01\x02\x00hello\r\n\r\n".to_vec()),
        ),
        case(
            "operations",
            "a path that climbs out",
            "HTTP 404",
            "",
            http(
                operations,
                b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            ),
        ),
        case(
            "operations",
            "a method it does not serve",
            "HTTP 405",
            "",
            http(
                operations,
                b"DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            ),
        ),
        case(
            "operations",
            "a megabyte of headers",
            "HTTP 431",
            "",
            http(operations, huge_headers()),
        ),
    ];

    let mut wrong = Vec::new();
    let total = cases.len();
    for case in cases {
        let answer = tokio::time::timeout(PATIENCE, case.call)
            .await
            .unwrap_or_else(|_| Answer::new("NO ANSWER", ""));
        let expected_code = case.code.is_empty() || answer.code == case.code;
        if !expected_code || !answer.message.contains(case.message) {
            wrong.push(format!(
                "{}: {}: expected {:?} with {:?}, answered {:?} with {:?}",
                case.endpoint, case.what, case.code, case.message, answer.code, answer.message
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {total} answers were not as expected:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    // Thousands of idle streams: each a Deliver waiting for a block that
    // never comes, over connections of 500 streams each (a connection may
    // hold at most 1,024).
    let peer_pid = org1_peer.child.id();
    let rss_before = resident_bytes(peer_pid);
    let mut idle = Vec::new();
    for _ in 0..IDLE_STREAMS.div_ceil(500) {
        let channel = connect(peer).await;
        for _ in 0..500 {
            // The stream channel's next block: nothing is ordered there.
            let request = seek_as(client, SECOND_CHANNEL, 1, 1, wait);
            let requests = tokio_stream::StreamExt::chain(
                tokio_stream::iter([request]),
                tokio_stream::pending(),
            );
            let stream = DeliverClient::new(channel.clone())
                .deliver(requests)
                .await
                .unwrap()
                .into_inner();
            idle.push(stream);
        }
    }
    let rss_with_idle_streams = resident_bytes(peer_pid);
    eprintln!(
        "peer RSS: {} MiB before, {} MiB with {} idle Deliver streams",
        rss_before >> 20,
        rss_with_idle_streams >> 20,
        idle.len()
    );
    assert!(
        rss_with_idle_streams < rss_before + IDLE_STREAMS_RSS_MAX,
        "{rss_before} → {rss_with_idle_streams} bytes"
    );

    // A reader whose certificate expires while it waits for the next block
    // is not sent that block: its request ends FORBIDDEN, as Fabric's
    // Deliver ends a session whose identity expired.
    let expires_at = weft_msp::now() + 4;
    let short_lived = org1
        .issue(
            "short-lived",
            &["client"],
            IssueOptions {
                not_after: Some(expires_at),
                ..IssueOptions::default()
            },
        )
        .signer();
    let mut expiring = DeliverClient::new(connect(peer).await)
        .deliver(tokio_stream::iter([seek_as(
            &short_lived,
            CHANNEL,
            height - 1,
            u64::MAX,
            wait,
        )]))
        .await
        .unwrap()
        .into_inner();
    // The last block is sent while the certificate is valid: the reader
    // was admitted.
    let admitted = expiring.message().await.unwrap().unwrap();
    assert!(
        matches!(&admitted.r#type, Some(PeerResponse::Block(block)) if header_of(block).number == height - 1),
        "{admitted:?}"
    );
    while weft_msp::now() <= expires_at {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Nothing of the table was ordered or committed: a good transaction
    // lands in the next block on the orderer and both peers, none after it,
    // and none of the keys tried is in the state.
    let last = proposal_by(client, CHANNEL, "kv", &[b"put", b"after-the-table", b"v"]);
    let responses = endorse_all(&peers, &last.signed(client).unwrap()).await;
    submit(&network, orderer.grpc, &peers, &last, &responses, height).await;
    let first = tokio::time::timeout(Duration::from_secs(30), expiring.message())
        .await
        .expect("the expired reader's request ends")
        .unwrap()
        .unwrap();
    assert_eq!(
        first.r#type,
        Some(PeerResponse::Status(Status::Forbidden as i32)),
        "the expired reader"
    );
    drop(idle);
    let beyond = || seek_as(client, CHANNEL, height + 1, height + 1, no_wait);
    let answers = [
        orderer_deliver(orderer.grpc, beyond()).await,
        peer_deliver(peers[0], beyond(), false).await,
        peer_deliver(peers[1], beyond(), false).await,
    ];
    for answer in answers {
        assert_eq!(
            answer.code, "NotFound",
            "a block after {height}: {answer:?}"
        );
    }
    for key in [
        "hostile-good",
        "hostile-key",
        "hostile-envelope",
        "hostile-other",
    ] {
        let response = endorse_all(
            &peers[..1],
            &invoke(CHANNEL, "kv", &[b"get", key.as_bytes()]),
        )
        .await;
        let answer = response[0].response.clone().unwrap();
        assert!(answer.message.contains("not found"), "{key}: {answer:?}");
    }
}

/// One row of the catalogue.
struct Case {
    endpoint: &'static str,
    what: &'static str,
    /// The status or code expected (empty: any), and words its message
    /// must hold (empty: any).
    code: &'static str,
    message: &'static str,
    call: Pin<Box<dyn Future<Output = Answer> + Send>>,
}

fn case(
    endpoint: &'static str,
    what: &'static str,
    code: &'static str,
    message: &'static str,
    call: impl Future<Output = Answer> + Send + 'static,
) -> Case {
    Case {
        endpoint,
        what,
        code,
        message,
        call: Box::pin(call),
    }
}

/// What a node answered: a status or code, and the message with it.
#[derive(Debug, Clone)]
struct Answer {
    code: String,
    message: String,
}

impl Answer {
    fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }

    fn grpc(status: &tonic::Status) -> Self {
        Self::new(format!("{:?}", status.code()), status.message())
    }

    fn fabric(status: i32, message: impl Into<String>) -> Self {
        let name =
            Status::try_from(status).map_or_else(|_| status.to_string(), |s| format!("{s:?}"));
        Self::new(name, message)
    }

    fn unary<T>(
        result: Result<tonic::Response<T>, tonic::Status>,
        ok: impl FnOnce(T) -> Self,
    ) -> Self {
        match result {
            Ok(response) => ok(response.into_inner()),
            Err(status) => Self::grpc(&status),
        }
    }

    /// A ProposalResponse: its status and message; an endorsement given to
    /// a hostile proposal is an answer of its own.
    fn proposal_response(response: ProposalResponse) -> Self {
        let answer = response.response.unwrap_or_default();
        if response.endorsement.is_some() {
            return Self::new("ENDORSED", answer.message);
        }
        Self::new(answer.status.to_string(), answer.message)
    }
}

/// Odd identities, each refused for its own reason.
struct Identities {
    revoked: Signer,
    foreign_ca: Signer,
    unknown_msp: Signer,
    expired: Signer,
    not_yet_valid: Signer,
}

/// Org1's CA of the network in `crypto`, issuing from `first_serial` on.
fn org1_ca(crypto: &Path, first_serial: u64) -> TestOrg {
    let ca = crypto.join("peerOrganizations/org1.example.com/ca");
    TestOrg::from_ca(
        "Org1MSP",
        &std::fs::read_to_string(ca.join("ca.org1.example.com-cert.pem")).unwrap(),
        &std::fs::read_to_string(ca.join("priv_sk")).unwrap(),
        first_serial,
    )
}

/// A client of Org1MSP whose certificate is valid only in `years`.
fn issue(org: &TestOrg, years: (i32, i32)) -> Signer {
    let identity: TestIdentity = org.issue(
        &format!("client-{}-{}", years.0, years.1),
        &["client"],
        IssueOptions {
            validity_years: Some(years),
            ..IssueOptions::default()
        },
    );
    identity.signer()
}

fn proposal_by(signer: &Signer, channel: &str, chaincode: &str, args: &[&[u8]]) -> Proposal {
    let invocation = Invocation {
        channel_id: channel,
        chaincode,
        args: args.iter().map(|arg| Bytes::copy_from_slice(arg)).collect(),
        nonce: signer.new_nonce().unwrap(),
        timestamp_seconds: weft_msp::now(),
    };
    Proposal::new(&invocation, signer.serialized_identity().clone())
}

/// `proposal` with a transaction ID that is not the hash of its nonce and
/// creator, signed by `signer`.
fn forged_tx_id_proposal(proposal: &Proposal, signer: &Signer) -> SignedProposal {
    let mut decoded = weft_protos::protos::Proposal::decode(proposal.bytes.clone()).unwrap();
    decoded.header = forged_tx_id_header(&decoded.header);
    let bytes = decoded.encode_to_vec();
    SignedProposal {
        signature: signer.sign(&bytes).unwrap().into(),
        proposal_bytes: bytes.into(),
    }
}

/// `envelope` with a transaction ID that is not the hash of its nonce and
/// creator, signed by `signer`.
fn forged_tx_id_envelope(envelope: &Envelope, signer: &Signer) -> Envelope {
    let mut payload = Payload::decode(envelope.payload.clone()).unwrap();
    let header = payload.header.as_ref().unwrap().encode_to_vec();
    payload.header = Some(Header::decode(forged_tx_id_header(&header.into())).unwrap());
    let bytes = payload.encode_to_vec();
    Envelope {
        signature: signer.sign(&bytes).unwrap().into(),
        payload: bytes.into(),
    }
}

fn forged_tx_id_header(header: &Bytes) -> Bytes {
    let mut header = Header::decode(header.clone()).unwrap();
    let mut channel_header = ChannelHeader::decode(header.channel_header.clone()).unwrap();
    channel_header.tx_id = "0".repeat(64);
    header.channel_header = channel_header.encode_to_vec().into();
    header.encode_to_vec().into()
}

/// `envelope` with its signature made over other bytes by `signer`.
pub(super) fn resigned(envelope: Envelope, signer: &Signer) -> Envelope {
    Envelope {
        signature: signer.sign(b"other bytes").unwrap().into(),
        ..envelope
    }
}

/// A `CommitStatus` request for `tx_id` on `channel`, signed by `signer`
/// (over other bytes when `sign_other_bytes`).
pub(super) fn commit_status_request(
    signer: &Signer,
    channel: &str,
    tx_id: &str,
    sign_other_bytes: bool,
) -> SignedCommitStatusRequest {
    let request = CommitStatusRequest {
        transaction_id: tx_id.to_owned(),
        channel_id: channel.to_owned(),
        identity: signer.serialized_identity().clone(),
    };
    let (request, signature) = signed(signer, &request, sign_other_bytes);
    SignedCommitStatusRequest { request, signature }
}

fn events_request(
    signer: &Signer,
    channel: &str,
    start: u64,
    sign_other_bytes: bool,
) -> SignedChaincodeEventsRequest {
    let request = ChaincodeEventsRequest {
        channel_id: channel.to_owned(),
        chaincode_id: "kv".to_owned(),
        identity: signer.serialized_identity().clone(),
        start_position: Some(SeekPosition {
            r#type: Some(Position::Specified(SeekSpecified { number: start })),
        }),
        after_transaction_id: String::new(),
    };
    let (request, signature) = signed(signer, &request, sign_other_bytes);
    SignedChaincodeEventsRequest { request, signature }
}

/// A Gateway request's bytes and `signer`'s signature over them, or over
/// other bytes.
fn signed(signer: &Signer, request: &impl Message, sign_other_bytes: bool) -> (Bytes, Bytes) {
    let request = request.encode_to_vec();
    let over = if sign_other_bytes {
        &b"other bytes"[..]
    } else {
        &request
    };
    let signature = signer.sign(over).unwrap().into();
    (request.into(), signature)
}

async fn endorser(peer: SocketAddr, signed: SignedProposal) -> Answer {
    let result = EndorserClient::new(connect(peer).await)
        .process_proposal(signed)
        .await;
    Answer::unary(result, Answer::proposal_response)
}

async fn endorser_raw(peer: SocketAddr, request: Bytes) -> Answer {
    match raw::unary(connect(peer).await, ENDORSER, request).await {
        Ok(bytes) => Answer::proposal_response(ProposalResponse::decode(bytes).unwrap()),
        Err(status) => Answer::grpc(&status),
    }
}

async fn gateway_endorse(peer: SocketAddr, proposal: Option<SignedProposal>) -> Answer {
    let request = EndorseRequest {
        channel_id: CHANNEL.to_owned(),
        proposed_transaction: proposal,
        ..EndorseRequest::default()
    };
    let result = GatewayClient::new(connect(peer).await)
        .endorse(request)
        .await;
    Answer::unary(result, |_| Answer::new("ENDORSED", ""))
}

async fn gateway_evaluate(peer: SocketAddr, proposal: SignedProposal) -> Answer {
    let request = EvaluateRequest {
        channel_id: CHANNEL.to_owned(),
        proposed_transaction: Some(proposal),
        ..EvaluateRequest::default()
    };
    let result = GatewayClient::new(connect(peer).await)
        .evaluate(request)
        .await;
    Answer::unary(result, |response| {
        let result = response.result.unwrap_or_default();
        Answer::new(result.status.to_string(), result.message)
    })
}

async fn gateway_submit(peer: SocketAddr, channel: &str, envelope: Option<Envelope>) -> Answer {
    let request = SubmitRequest {
        channel_id: channel.to_owned(),
        prepared_transaction: envelope,
        ..SubmitRequest::default()
    };
    let result = GatewayClient::new(connect(peer).await)
        .submit(request)
        .await;
    Answer::unary(result, |_| Answer::new("SUBMITTED", ""))
}

async fn gateway_commit_status(peer: SocketAddr, request: SignedCommitStatusRequest) -> Answer {
    let result = GatewayClient::new(connect(peer).await)
        .commit_status(request)
        .await;
    Answer::unary(result, |status| {
        Answer::new(
            "OK",
            format!("{:?} in block {}", status.result, status.block_number),
        )
    })
}

/// The first answer of a ChaincodeEvents stream; WAITING while none comes.
async fn gateway_events(peer: SocketAddr, request: SignedChaincodeEventsRequest) -> Answer {
    let result = GatewayClient::new(connect(peer).await)
        .chaincode_events(request)
        .await;
    first_answer(result, Some(QUIET), |events| {
        Answer::new("EVENTS", events.block_number.to_string())
    })
    .await
}

/// How long a stream that should wait is watched for an answer.
const QUIET: Duration = Duration::from_millis(500);

/// The first message of a server stream as `answer` reads it; ENDED if
/// the stream ends without one, WAITING if none comes within `wait`.
async fn first_answer<T>(
    call: Result<tonic::Response<tonic::Streaming<T>>, tonic::Status>,
    wait: Option<Duration>,
    answer: impl FnOnce(T) -> Answer,
) -> Answer {
    let mut stream = match call {
        Ok(response) => response.into_inner(),
        Err(status) => return Answer::grpc(&status),
    };
    let first = match wait {
        Some(wait) => match tokio::time::timeout(wait, stream.message()).await {
            Ok(first) => first,
            Err(_) => return Answer::new("WAITING", ""),
        },
        None => stream.message().await,
    };
    match first {
        Ok(Some(message)) => answer(message),
        Ok(None) => Answer::new("ENDED", ""),
        Err(status) => Answer::grpc(&status),
    }
}

/// The first answer of a peer's Deliver (or DeliverFiltered) stream:
/// BLOCK with its number, a status, or WAITING while none comes.
async fn peer_deliver(peer: SocketAddr, request: Envelope, filtered: bool) -> Answer {
    let mut client = DeliverClient::new(connect(peer).await);
    let requests = tokio_stream::iter([request]);
    let result = if filtered {
        client.deliver_filtered(requests).await
    } else {
        client.deliver(requests).await
    };
    first_answer(result, Some(QUIET), |response| match response.r#type {
        Some(PeerResponse::Block(block)) => {
            Answer::new("BLOCK", header_of(&block).number.to_string())
        }
        Some(PeerResponse::FilteredBlock(block)) => Answer::new("BLOCK", block.number.to_string()),
        Some(PeerResponse::Status(status)) => Answer::fabric(status, ""),
        other => Answer::new(format!("{other:?}"), ""),
    })
    .await
}

/// The first answer of an orderer's Deliver stream.
async fn orderer_deliver(orderer: SocketAddr, request: Envelope) -> Answer {
    let result = AtomicBroadcastClient::new(connect(orderer).await)
        .deliver(tokio_stream::iter([request]))
        .await;
    first_answer(result, Some(QUIET), |response| match response.r#type {
        Some(OrdererResponse::Block(block)) => {
            Answer::new("BLOCK", header_of(&block).number.to_string())
        }
        Some(OrdererResponse::Status(status)) => Answer::fabric(status, ""),
        None => Answer::new("EMPTY", ""),
    })
    .await
}

/// Raw bytes on a Deliver stream: the status it ended with.
async fn deliver_raw(node: SocketAddr, method: &'static str, request: Bytes) -> Answer {
    match raw::streaming(connect(node).await, method, vec![request]).await {
        (_, Some(status)) => Answer::grpc(&status),
        (answers, None) => Answer::new("ENDED", format!("{} answers", answers.len())),
    }
}

async fn orderer_broadcast(orderer: SocketAddr, envelope: Envelope) -> Answer {
    let result = AtomicBroadcastClient::new(connect(orderer).await)
        .broadcast(tokio_stream::iter([envelope]))
        .await;
    first_answer(result, None, |response| {
        Answer::fabric(response.status, response.info)
    })
    .await
}

async fn broadcast_raw(orderer: SocketAddr, request: Bytes) -> Answer {
    match raw::streaming(connect(orderer).await, BROADCAST, vec![request]).await {
        (_, Some(status)) => Answer::grpc(&status),
        (answers, None) => match answers.first() {
            Some(answer) => {
                let response =
                    weft_protos::orderer::BroadcastResponse::decode(answer.clone()).unwrap();
                Answer::fabric(response.status, response.info)
            }
            None => Answer::new("ENDED", ""),
        },
    }
}

/// Sends `request` to an HTTP endpoint as it is: HTTP and the status code,
/// and the body; CLOSED if the connection closed without an answer.
async fn http(address: SocketAddr, request: Vec<u8>) -> Answer {
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        // The server may answer and close before reading everything.
        let _ = stream.write_all(&request);
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        let response = String::from_utf8_lossy(&response);
        let Some((head, body)) = response.split_once("\r\n\r\n") else {
            return Answer::new("CLOSED", response.to_string());
        };
        let code = head.split(' ').nth(1).unwrap_or_default();
        Answer::new(format!("HTTP {code}"), body)
    })
    .await
    .unwrap()
}

fn huge_headers() -> Vec<u8> {
    let mut request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".to_vec();
    for line in 0..1024 {
        request.extend(format!("X-Filler-{line}: {}\r\n", "a".repeat(1000)).bytes());
    }
    request.extend(b"\r\n");
    request
}

/// The resident memory of process `pid`, from /proc.
fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib << 10
}

/// A chaincode server, dialled by the peers as chaincode-as-a-service,
/// that breaks Fabric's shim protocol in the way each transaction's
/// function name (its first argument) says.
struct HostileChaincode;

/// Requests the flood sends for one transaction without waiting.
const FLOOD_REQUESTS: usize = 100_000;

impl HostileChaincode {
    /// Serves on a free port of 127.0.0.1; its address.
    async fn serve() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ChaincodeServer::new(Self))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        address
    }

    /// What the chaincode sends when asked to run `function` by `request`;
    /// `None` closes the stream.
    fn misbehave(function: &[u8], request: &ChaincodeMessage) -> Option<Vec<ChaincodeMessage>> {
        let send = |kind: i32, payload: Vec<u8>| ChaincodeMessage {
            r#type: kind,
            payload: payload.into(),
            txid: request.txid.clone(),
            channel_id: request.channel_id.clone(),
            ..ChaincodeMessage::default()
        };
        let get_state = || {
            GetState {
                key: "k".to_owned(),
                collection: String::new(),
            }
            .encode_to_vec()
        };
        Some(match function {
            b"not-a-response" => vec![send(ShimMessage::Completed as i32, NOT_PROTOBUF.to_vec())],
            b"malformed-request" => vec![send(ShimMessage::GetState as i32, NOT_PROTOBUF.to_vec())],
            b"unknown-type" => vec![send(999, get_state())],
            b"empty-key" => {
                let put = PutState {
                    key: String::new(),
                    value: Bytes::from_static(b"v"),
                    collection: String::new(),
                };
                vec![send(ShimMessage::PutState as i32, put.encode_to_vec())]
            }
            b"flood" => (0..FLOOD_REQUESTS)
                .map(|_| send(ShimMessage::GetState as i32, get_state()))
                .collect(),
            b"silent" => Vec::new(),
            _ => return None,
        })
    }
}

#[tonic::async_trait]
impl Chaincode for HostileChaincode {
    type ConnectStream =
        tokio_stream::wrappers::UnboundedReceiverStream<Result<ChaincodeMessage, tonic::Status>>;

    async fn connect(
        &self,
        request: tonic::Request<tonic::Streaming<ChaincodeMessage>>,
    ) -> Result<tonic::Response<Self::ConnectStream>, tonic::Status> {
        let mut incoming = request.into_inner();
        let (outgoing, answers) = tokio::sync::mpsc::unbounded_channel();
        let register = ChaincodeMessage {
            r#type: ShimMessage::Register as i32,
            payload: ChaincodeId {
                name: "hostile:0".to_owned(),
                ..ChaincodeId::default()
            }
            .encode_to_vec()
            .into(),
            ..ChaincodeMessage::default()
        };
        outgoing.send(Ok(register)).unwrap();
        tokio::spawn(async move {
            while let Ok(Some(message)) = incoming.message().await {
                let reply = |kind: ShimMessage, payload: Bytes| ChaincodeMessage {
                    r#type: kind as i32,
                    payload,
                    txid: message.txid.clone(),
                    channel_id: message.channel_id.clone(),
                    ..ChaincodeMessage::default()
                };
                let answers = match ShimMessage::try_from(message.r#type) {
                    Ok(ShimMessage::Transaction) => {
                        let input = ChaincodeInput::decode(message.payload.clone()).unwrap();
                        let function = input.args.first().cloned().unwrap_or_default();
                        match Self::misbehave(&function, &message) {
                            Some(answers) => answers,
                            None => return,
                        }
                    }
                    // The peer refused a request: the chaincode fails with
                    // the peer's reason, as Fabric's shims do.
                    Ok(ShimMessage::Error) => {
                        vec![reply(ShimMessage::Error, message.payload.clone())]
                    }
                    _ => Vec::new(),
                };
                for answer in answers {
                    if outgoing.send(Ok(answer)).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(tonic::Response::new(
            tokio_stream::wrappers::UnboundedReceiverStream::new(answers),
        ))
    }
}
