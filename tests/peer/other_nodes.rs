//! A Gateway's dealings with the other nodes: a peer of another
//! organisation behind the Gateway's own is told how far that one has
//! committed and endorses once it has caught up, so a client that reads
//! what it just saw committed gets endorsements that agree; one that does
//! not catch up in time refuses, and the organisation's next peer
//! endorses, or, with none, the late one where it is; an organisation
//! whose first peer is down endorses at its next, and a transaction an
//! orderer does not take goes to the next orderer; a peer or orderer that
//! did not answer is asked last from then on; an evaluation or an
//! endorsement this peer refuses goes to its organisation's next peer,
//! and an evaluation to the organisations the client names.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use weft_protos::gateway::gateway_client::GatewayClient;
use weft_protos::view::{Limits, TxBody, TxEnvelope};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_behind_the_gateways_endorses_once_it_has_caught_up() {
    // Goal: a client sees its transaction committed through org1's
    // Gateway, then has a proposal that reads what it wrote endorsed by
    // both organisations while org2's peer has not received that block
    // yet. Fabric's Gateway would collect org2's answer on the older state
    // and fail; weft's tells org2's peer the height org1's peer had
    // committed, and org2's peer answers once it has committed as far.
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    // Long enough that the wait below never runs out on a busy machine.
    network.extra_gateway_keys = "  catchUpTimeout: 60s\n".to_owned();
    let orderer = network.start_solo_orderer();
    // Org2's peer reaches the orderer through a link the test can hold.
    let link = HeldLink::start(orderer.grpc).await;
    let org2 = network.start_org_peer("org2", &dir.path().join("org2"), &[link.address], &[]);
    let org1 = network.start_org_peer(
        "org1",
        &dir.path().join("org1"),
        &[orderer.grpc],
        &[("Org2MSP", org2.grpc)],
    );
    let gateway = GatewayClient::new(connect(org1.grpc).await);

    write_while_held(&network, orderer.grpc, &gateway, &link).await;
    // Org2's peer is behind: asked directly, as Fabric's Gateway asks, it
    // does not know the key yet.
    let read = network.proposal(CHANNEL, &["kv", "get", "read-after-write"]);
    let behind = endorse_one(org2.grpc, &read.signed(&network.client).unwrap()).await;
    assert_eq!(behind.status, 500, "{behind:?}");
    assert!(behind.message.contains("not found"), "{behind:?}");

    let read = network.proposal(CHANNEL, &["kv", "get", "read-after-write"]);
    let request = endorse_by_both(&read, &network.client);
    let mut client = gateway.clone();
    let endorsing = tokio::spawn(async move { client.endorse(request).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !endorsing.is_finished(),
        "the Gateway answered while org2's peer was behind: {:?}",
        endorsing.await
    );
    link.release();
    let prepared = tokio::time::timeout(PATIENCE, endorsing)
        .await
        .expect("endorsed once org2's peer caught up")
        .unwrap()
        .expect("both organisations endorsed")
        .into_inner()
        .prepared_transaction
        .unwrap();
    let action = first_action(&prepared);
    assert_eq!(action.endorsements.len(), 2);
    let response = action.chaincode_action.response.as_ref().unwrap();
    assert_eq!(response.payload.as_ref(), b"value");

    // A height that is not a number is refused, not waited on.
    let mut garbled = tonic::Request::new(read.signed(&network.client).unwrap());
    garbled
        .metadata_mut()
        .insert("weft-committed-height", "tall".parse().unwrap());
    let refused = EndorserClient::new(connect(org2.grpc).await)
        .process_proposal(garbled)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().contains("weft-committed-height"),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_too_far_behind_refuses_and_the_organisations_next_peer_endorses() {
    // Goal: org2 has two peers, the first held behind. A client that saw
    // its write committed through org1's Gateway reads it back: the first
    // org2 peer cannot catch up within its catchUpTimeout and refuses, the
    // second endorses on current state, and the endorsements agree (the
    // late peer answering where it was would have read the key as absent,
    // and the Gateway would have refused the disagreement). With the
    // second down, the late peer refuses at once and is then asked
    // without the height: it endorses where it is, as Fabric's peers do.
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    network.extra_gateway_keys = "  catchUpTimeout: 1s\n".to_owned();
    let orderer = network.start_solo_orderer();
    let link = HeldLink::start(orderer.grpc).await;
    let late = network.start_org_peer("org2", &dir.path().join("late"), &[link.address], &[]);
    let current = network.start_org_peer("org2", &dir.path().join("current"), &[orderer.grpc], &[]);
    let org1 = network.start_org_peer(
        "org1",
        &dir.path().join("org1"),
        &[orderer.grpc],
        &[("Org2MSP", late.grpc), ("Org2MSP", current.grpc)],
    );
    let gateway = GatewayClient::new(connect(org1.grpc).await);

    write_while_held(&network, orderer.grpc, &gateway, &link).await;
    let endorsed_by_both = |args: &[&str]| {
        let request = endorse_by_both(&network.proposal(CHANNEL, args), &network.client);
        let mut client = gateway.clone();
        let args = args.join(" ");
        async move {
            let prepared = client
                .endorse(request)
                .await
                .unwrap_or_else(|status| panic!("{args}: {status:?}"))
                .into_inner()
                .prepared_transaction
                .unwrap();
            first_action(&prepared).endorsements.len()
        }
    };
    // `update` reads the key before it writes it.
    assert_eq!(
        endorsed_by_both(&["kv", "update", "v2", "read-after-write"]).await,
        2
    );

    drop(current);
    assert_eq!(endorsed_by_both(&["kv", "put", "fresh", "v"]).await, 2);
    let log = std::fs::read_to_string(dir.path().join("peer-org2-late.log")).unwrap();
    assert!(
        log.contains("refusing to endorse below the height"),
        "{log}"
    );
    link.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_gateways_peer_refuses_goes_to_the_next_peer_or_the_named_organisation() {
    // Goal: org1's Gateway peer is held behind while a key is written; a
    // client evaluates a read of it there. Its own answer (not found: a
    // 500 without payload, which Fabric's Gateway takes as a refusal and
    // retries elsewhere) is passed over for org1's second peer, which has
    // the key; a client naming org2 is answered by org2's peer; with the
    // second peer down and org1 named, the client hears of both failures.
    // An endorsement by org1 alone moves on to its second peer the same way.
    let dir = tempfile::tempdir().unwrap();
    let network = Network::create(dir.path());
    let orderer = network.start_solo_orderer();
    let link = HeldLink::start(orderer.grpc).await;
    let org2 = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    let second = network.start_org_peer("org1", &dir.path().join("second"), &[orderer.grpc], &[]);
    let org1 = network.start_org_peer(
        "org1",
        &dir.path().join("org1"),
        &[link.address],
        &[("Org2MSP", org2.grpc), ("Org1MSP", second.grpc)],
    );
    let gateway = GatewayClient::new(connect(org1.grpc).await);

    link.hold();
    let written = network.put(
        "read-after-write",
        None,
        &[&network.org1_peer, &network.org2_peer],
    );
    assert_eq!(
        broadcast(orderer.grpc, std::slice::from_ref(&written)).await,
        [Status::Success]
    );
    for peer in [second.grpc, org2.grpc] {
        let codes = committed_codes(peer, &network.client, 1).await;
        assert_eq!(codes, [TxValidationCode::Valid]);
    }
    let evaluate = |targets: &[&str]| {
        let proposal = network.proposal(CHANNEL, &["kv", "get", "read-after-write"]);
        let request = weft_protos::gateway::EvaluateRequest {
            transaction_id: proposal.tx_id.clone(),
            channel_id: CHANNEL.to_owned(),
            proposed_transaction: Some(proposal.signed(&network.client).unwrap()),
            target_organizations: targets.iter().map(|msp_id| (*msp_id).to_owned()).collect(),
        };
        let mut client = gateway.clone();
        async move { client.evaluate(request).await }
    };
    let value_of = |answer: Result<
        tonic::Response<weft_protos::gateway::EvaluateResponse>,
        tonic::Status,
    >| { answer.unwrap().into_inner().result.unwrap().payload };
    assert_eq!(value_of(evaluate(&[]).await), b"value"[..]);
    assert_eq!(value_of(evaluate(&["Org2MSP"]).await), b"value"[..]);
    // An endorsement by org1 alone goes the same way: org1's second peer
    // endorses what its Gateway peer refused.
    let proposal = network.proposal(CHANNEL, &["kv", "get", "read-after-write"]);
    let request = weft_protos::gateway::EndorseRequest {
        transaction_id: proposal.tx_id.clone(),
        channel_id: CHANNEL.to_owned(),
        proposed_transaction: Some(proposal.signed(&network.client).unwrap()),
        endorsing_organizations: vec!["Org1MSP".to_owned()],
    };
    let prepared = gateway
        .clone()
        .endorse(request)
        .await
        .unwrap()
        .into_inner()
        .prepared_transaction
        .unwrap();
    let action = first_action(&prepared);
    let response = action.chaincode_action.response.as_ref();
    assert_eq!(response.unwrap().payload.as_ref(), b"value");

    let second_address = second.grpc.to_string();
    drop(second);
    let refused = evaluate(&["Org1MSP"]).await.unwrap_err();
    let details = error_details(&refused);
    let named: Vec<(&str, &str)> = details
        .iter()
        .map(|detail| (detail.address.as_str(), detail.msp_id.as_str()))
        .collect();
    let own = org1.grpc.to_string();
    assert_eq!(
        named,
        [(&*own, "Org1MSP"), (&*second_address, "Org1MSP")],
        "{refused:?}"
    );
    assert!(details[0].message.contains("not found"), "{details:?}");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    link.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_passes_over_a_peer_or_orderer_that_hangs_and_asks_it_last_after() {
    // Goal: org1's Gateway knows two peers of org2 and two orderers, the
    // first of each a host that takes connections and never answers. The
    // Gateway waits its timeout for it, has the second endorse or order,
    // and from then on asks the second first. When no peer of org2
    // endorses, the client hears from each, as Fabric's Gateway reports
    // them.
    let dir = tempfile::tempdir().unwrap();
    let mut network = Network::create(dir.path());
    network.extra_gateway_keys = "  endorsementTimeout: 3s\n  broadcastTimeout: 3s\n".to_owned();
    let hanging_peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hanging_orderer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (hanging_peer, hanging_orderer) = (
        hanging_peer.local_addr().unwrap(),
        hanging_orderer.local_addr().unwrap(),
    );
    let orderer = network.start_solo_orderer();
    let org2 = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    // Org1's peer tries the orderers in the order listed (this test's
    // peers all do); it fetches its own blocks from the hanging one, so
    // commits are checked at org2's peer.
    let org1 = network.start_org_peer(
        "org1",
        &dir.path().join("org1"),
        &[hanging_orderer, orderer.grpc],
        &[("Org2MSP", hanging_peer), ("Org2MSP", org2.grpc)],
    );
    let gateway = GatewayClient::new(connect(org1.grpc).await);
    let endorse = |key: &str| {
        let proposal = network.proposal(CHANNEL, &["kv", "put", key, "v"]);
        let request = endorse_by_both(&proposal, &network.client);
        let mut client = gateway.clone();
        async move {
            let asked = Instant::now();
            let answer = client.endorse(request).await;
            (answer, asked.elapsed())
        }
    };
    let submit = |envelope: Envelope| {
        let mut client = gateway.clone();
        async move {
            let asked = Instant::now();
            client
                .submit(gateway_submit_request(&envelope))
                .await
                .unwrap();
            asked.elapsed()
        }
    };
    let endorsements = |prepared: Envelope| first_action(&prepared).endorsements.len();
    let endorsers = [&network.org1_peer, &network.org2_peer];
    let three_seconds = Duration::from_secs(3);

    let (first, took) = endorse("first").await;
    let prepared = first.unwrap().into_inner().prepared_transaction.unwrap();
    assert_eq!(endorsements(prepared), 2);
    assert!(
        took >= three_seconds,
        "the hanging peer was asked first: {took:?}"
    );
    let took = submit(network.put("first", None, &endorsers)).await;
    assert!(
        took >= three_seconds,
        "the hanging orderer was asked first: {took:?}"
    );

    let (second, took) = endorse("second").await;
    let prepared = second.unwrap().into_inner().prepared_transaction.unwrap();
    assert_eq!(endorsements(prepared), 2);
    assert!(
        took < three_seconds,
        "the hanging peer asked first again: {took:?}"
    );
    let took = submit(network.put("second", None, &endorsers)).await;
    assert!(
        took < three_seconds,
        "the hanging orderer asked first again: {took:?}"
    );
    let codes = committed_codes(org2.grpc, &network.client, 2).await;
    assert_eq!(codes, [TxValidationCode::Valid, TxValidationCode::Valid]);
    let metrics = http_get(org2.operations.unwrap(), "/metrics").1;
    assert_eq!(metric(&metrics, "endorser_proposals_received"), 2.0);

    // Org2's answering peer goes down too: the client is told of both.
    let org2_address = org2.grpc;
    drop(org2);
    let (failed, _) = endorse("third").await;
    let failed = failed.unwrap_err();
    assert_eq!(failed.code(), tonic::Code::Aborted, "{failed:?}");
    let details = error_details(&failed);
    let named: Vec<(&str, &str)> = details
        .iter()
        .map(|detail| (detail.address.as_str(), detail.msp_id.as_str()))
        .collect();
    let (down, hangs) = (org2_address.to_string(), hanging_peer.to_string());
    assert_eq!(
        named,
        [(&*down, "Org2MSP"), (&*hangs, "Org2MSP")],
        "{details:?}"
    );
    assert_eq!(details[1].message, "endorsement timeout expired after 3s");
}

/// The first action of the transaction a Gateway prepared.
fn first_action(prepared: &Envelope) -> weft_protos::view::EndorsedAction {
    let envelope = TxEnvelope::decode(prepared.encode_to_vec().into(), Limits::default()).unwrap();
    let TxBody::Endorser(transaction) = envelope.body else {
        panic!("not an endorser transaction: {:?}", envelope.body);
    };
    transaction.actions.into_iter().next().unwrap()
}

/// Holds `link`, then has `read-after-write` written and committed, as
/// `gateway`'s peer reports it: a peer behind `link` has not seen it.
async fn write_while_held(
    network: &Network,
    orderer: SocketAddr,
    gateway: &GatewayClient<Channel>,
    link: &HeldLink,
) {
    link.hold();
    let written = network.put(
        "read-after-write",
        None,
        &[&network.org1_peer, &network.org2_peer],
    );
    assert_eq!(
        broadcast(orderer, std::slice::from_ref(&written)).await,
        [Status::Success]
    );
    assert_eq!(
        commit_status(gateway, &network.client, &tx_id_of(&written)).await,
        TxValidationCode::Valid as i32
    );
}

/// A TCP link to one address that passes bytes both ways until held, and
/// passes what was held back once released: a network that stalls.
struct HeldLink {
    address: SocketAddr,
    held: watch::Sender<bool>,
}

impl HeldLink {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (held, watched) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(target).await else {
                    continue;
                };
                let (inbound_read, inbound_write) = inbound.into_split();
                let (outbound_read, outbound_write) = outbound.into_split();
                tokio::spawn(pass(inbound_read, outbound_write, watched.clone()));
                tokio::spawn(pass(outbound_read, inbound_write, watched.clone()));
            }
        });
        Self { address, held }
    }

    fn hold(&self) {
        self.held.send_replace(true);
    }

    fn release(&self) {
        self.held.send_replace(false);
    }
}

/// Copies `from` to `to`, holding each read back while the link is held.
async fn pass(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut held: watch::Receiver<bool>) {
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if held.wait_for(|held| !held).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
