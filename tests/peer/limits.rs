//! The limits of docs/security.md, enforced on a peer process as an
//! operator sets them in `peer.yaml`: the connections it keeps open, the
//! calls a service runs at once, the wait for a call's first request, and
//! the Gateway's wait for another organisation's peer.

use weft_protos::gateway::ErrorDetail;
use weft_protos::gateway::gateway_client::GatewayClient;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_bounds_its_connections_calls_and_waits_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    network.extra_peer_keys =
        "  limits:\n    connections: 4\n    concurrency:\n      deliverService: 2\n".to_owned();
    network.extra_gateway_keys = "  endorsementTimeout: 1s\n".to_owned();
    // Org2's "peer" takes connections and never answers.
    let silent_peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_address = silent_peer.local_addr().unwrap();
    let orderer = network.start_solo_orderer();
    let peer = network.start_org_peer(
        "org1",
        &dir.path().join("org1"),
        &[orderer.grpc],
        &[("Org2MSP", silent_address)],
    );
    let client = &network.client;
    // The first of the peer's four connections.
    let connection = connect(peer.grpc).await;

    // deliverService: 2. Two streams waiting for a block that is never
    // ordered hold both places; the third call is refused with Fabric's
    // words, and a code that tells the client to retry.
    let waiting_for = |number| seek(SECOND_CHANNEL, client, number, number);
    let first = open_deliver(&connection, Some(waiting_for(1))).await;
    let _second = open_deliver(&connection, Some(waiting_for(1))).await;
    let refused = first_block(&connection, waiting_for(0)).await.unwrap_err();
    busy::assert_over_limit(&refused, "/protos.Deliver", 2);
    // A stream's place frees when it ends.
    drop(first);
    let genesis = seek_with(client, CHANNEL, 0, 0, SeekBehavior::FailIfNotReady);
    let number = busy::once_a_place_frees(PATIENCE, || first_block(&connection, genesis.clone()))
        .await
        .expect("the ended stream kept its place");
    assert_eq!(number, 0);

    // A call whose client never sends its request is ended, freeing its
    // place, instead of holding it for nothing.
    let mut never_asked = open_deliver(&connection, None).await;
    let ended = never_asked.answers.message().await.unwrap_err();
    assert_eq!(ended.code(), tonic::Code::DeadlineExceeded, "{ended:?}");
    assert!(
        ended.message().contains("no request arrived within 10s"),
        "{ended:?}"
    );

    // The Gateway waits endorsementTimeout (1s) for Org2's peer, then
    // reports it in the error's details, naming the peer.
    let proposal = network.proposal(CHANNEL, &["kv", "put", "limits", "v"]);
    let failed = GatewayClient::new(connection.clone())
        .endorse(endorse_by_both(&proposal, client))
        .await
        .unwrap_err();
    assert_eq!(failed.code(), tonic::Code::Aborted, "{failed:?}");
    assert_eq!(
        error_details(&failed),
        [ErrorDetail {
            address: silent_address.to_string(),
            msp_id: "Org2MSP".to_owned(),
            message: "endorsement timeout expired after 1s".to_owned(),
        }]
    );

    // connections: 4. Three clients that connect and send nothing fill the
    // other places: a fifth connection waits to be accepted...
    let silent_clients: Vec<std::net::TcpStream> = (0..3)
        .map(|_| std::net::TcpStream::connect(peer.grpc).unwrap())
        .collect();
    let address = peer.grpc;
    let waiting = tokio::spawn(async move {
        let connection = connect(address).await;
        first_block(&connection, genesis).await
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !waiting.is_finished(),
        "a fifth connection was served while four were open"
    );
    // ...until the peer closes those that said nothing in 5 s.
    let answer = tokio::time::timeout(PATIENCE, waiting).await.unwrap();
    assert_eq!(answer.unwrap().unwrap(), 0);
    for mut silent in silent_clients {
        silent
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // The peer's HTTP/2 settings, then the end of the connection.
        match silent.read_to_end(&mut Vec::new()) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(error) => panic!("a silent connection was not closed: {error}"),
        }
    }
    drop(connection);
    let log = std::fs::read_to_string(dir.path().join("peer-org1-org1.log")).unwrap();
    assert!(
        log.contains("all connections in use: new connections wait until one closes"),
        "{log}"
    );
}

/// A Deliver call on `connection` that sends `request` (or nothing) and
/// then stays open. Dropping it cancels the call, as a client's cancel
/// does: the request stream ends and the answers are dropped.
async fn open_deliver(connection: &Channel, request: Option<Envelope>) -> OpenCall {
    let (requests, request_stream) = tokio::sync::mpsc::channel(1);
    if let Some(request) = request {
        requests.send(request).await.unwrap();
    }
    let answers = DeliverClient::new(connection.clone())
        .deliver(tokio_stream::wrappers::ReceiverStream::new(request_stream))
        .await
        .unwrap()
        .into_inner();
    OpenCall {
        _requests: requests,
        answers,
    }
}

struct OpenCall {
    _requests: tokio::sync::mpsc::Sender<Envelope>,
    answers: tonic::Streaming<weft_protos::protos::DeliverResponse>,
}

/// The number of the first block a Deliver call of `request` answers, or
/// the status it ends with.
async fn first_block(connection: &Channel, request: Envelope) -> Result<u64, tonic::Status> {
    let mut answers = DeliverClient::new(connection.clone())
        .deliver(tokio_stream::iter([request]))
        .await?
        .into_inner();
    loop {
        match answers.message().await?.and_then(|answer| answer.r#type) {
            Some(PeerResponse::Block(block)) => {
                return Ok(block.header.map_or(u64::MAX, |header| header.number));
            }
            Some(PeerResponse::Status(status)) => {
                return Err(tonic::Status::unknown(format!(
                    "the stream ended with {status} before a block"
                )));
            }
            Some(_) => {}
            None => return Err(tonic::Status::unknown("the stream ended without a block")),
        }
    }
}
