//! The solo orderer over real gRPC on 127.0.0.1, with RocksDB block stores
//! in temporary directories and real certificates and ECDSA signatures
//! (`weft_msp::testing::TestOrg`): a channel of two organisations and an
//! orderer organisation, hundreds of endorsed transactions broadcast by
//! clients of both organisations on concurrent streams, interleaved with
//! every kind of bad input, delivered back, checked link by link and
//! committed by the peer's committer (which verifies the orderer's
//! signatures against `/Channel/Orderer/BlockValidation`); then Deliver's
//! refusals, and a restart on the same data directory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tonic::transport::Channel;
use weft_ledger::{BlockStore, Durability, StoreConfig};
use weft_msp::testing::TestOrg;
use weft_msp::{NodeRole, Signer};
use weft_orderer::{BlockContent, BlockWriter, NodeConfig, Orderer, Seal};
use weft_peer_committer::{ChannelCommitter, TxValidationCode};
use weft_protos::common::implicit_meta_policy::Rule;
use weft_protos::common::policy::PolicyType;
use weft_protos::common::{
    Block, BlockMetadataIndex, ChannelHeader, Config, ConfigEnvelope, ConfigGroup, ConfigPolicy,
    ConfigSignature, ConfigUpdate, ConfigUpdateEnvelope, ConfigValue, Envelope, HashingAlgorithm,
    Header, HeaderType, ImplicitMetaPolicy, LastConfig, Metadata, OrdererBlockMetadata, Payload,
    Policy, SignatureHeader, Status,
};
use weft_protos::hash::{block_data_hash, block_header_hash};
use weft_protos::kvrwset::{KvWrite, KvrwSet};
use weft_protos::msp::MspConfig;
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;
use weft_protos::orderer::deliver_response::Type as Delivered;
use weft_protos::orderer::seek_info::SeekBehavior;
use weft_protos::orderer::seek_position::Type as Position;
use weft_protos::orderer::{
    BatchSize, BatchTimeout, BroadcastResponse, ConsensusType, SeekInfo, SeekNewest, SeekOldest,
    SeekPosition, SeekSpecified,
};
use weft_protos::protos::deliver_client::DeliverClient;
use weft_protos::protos::deliver_response::Type as PeerDelivered;
use weft_protos::protos::deliver_server::DeliverServer;
use weft_protos::protos::{ChaincodeId, Response};
use weft_protos::rwset::{NsReadWriteSet, TxReadWriteSet, tx_read_write_set::DataModel};
use weft_protos::stream::StreamMode;
use weft_protos::tx::{Invocation, Proposal, SimulationResult, endorse};
use weft_protos::view::{Limits, TxEnvelope};
use weft_statedb::memory::{MemoryOptions, MemoryState};

#[path = "support/busy.rs"]
mod busy;
#[path = "support/disk.rs"]
mod failing_disk;
#[path = "orderer/kafka.rs"]
mod kafka;
#[path = "support/kafka.rs"]
mod kafka_broker;
#[path = "orderer/keepalive.rs"]
mod keepalive;
#[path = "orderer/membership.rs"]
mod membership;
#[path = "support/raw.rs"]
mod raw;

const CHANNEL: &str = "orders";
const CHAINCODE: &str = "kv";
const MAX_MESSAGE_COUNT: u32 = 10;
const PREFERRED_MAX_BYTES: u32 = 128 * 1024;
const ABSOLUTE_MAX_BYTES: u32 = 256 * 1024;
/// Good transactions broadcast by Org1's client and Org2's client, each
/// on its own stream, concurrently.
const ORG1_TXS: usize = 250;
const ORG2_TXS: usize = 100;
/// No test run should come near this; it only turns a hang into a failure.
const DELIVER_TIME_MAX: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_broadcasts_into_signed_blocks_and_survives_a_restart() {
    // Goal: every envelope a client was told SUCCESS for is delivered
    // exactly once, in a chain of blocks whose links, data hashes and
    // orderer signatures a Fabric peer accepts (the committer commits them
    // all, every transaction VALID); every bad envelope gets Fabric's
    // status and is never ordered; after a restart on the same data
    // directory the chain continues from where it stopped.
    let network = Network::new();
    let data = tempfile::tempdir().unwrap();
    let orderer = start(&network, data.path(), vec![network.genesis.clone()]).await;
    let mut client = connect(&orderer).await;

    // Two concurrent streams. Org1's stream interleaves bad envelopes with
    // its good ones, so the test also sees that responses come back in
    // request order.
    let mut org1_stream: Vec<(Envelope, Expected)> = Vec::new();
    let bad = network.bad_envelopes();
    let mut bad = bad.into_iter();
    for index in 0..ORG1_TXS {
        // Two transactions over PreferredMaxBytes: each must be alone in
        // its block.
        let padding = if index == 40 || index == 41 {
            PREFERRED_MAX_BYTES as usize + 1024
        } else {
            0
        };
        let (tx_id, envelope) =
            network.transaction(CHANNEL, &network.client1, &format!("org1-{index}"), padding);
        org1_stream.push((envelope, Expected::ordered(tx_id, padding > 0)));
        if index % 20 == 7
            && let Some(bad) = bad.next()
        {
            org1_stream.push(bad);
        }
    }
    org1_stream.extend(bad);
    let org2_stream: Vec<(Envelope, Expected)> = (0..ORG2_TXS)
        .map(|index| {
            let (tx_id, envelope) =
                network.transaction(CHANNEL, &network.client2, &format!("org2-{index}"), 0);
            (envelope, Expected::ordered(tx_id, false))
        })
        .collect();

    let mut client2 = client.clone();
    let (org1_responses, org2_responses) = tokio::join!(
        broadcast(&mut client, &org1_stream),
        broadcast(&mut client2, &org2_stream)
    );
    let mut ordered: HashMap<String, bool> = HashMap::new();
    let mut refused: Vec<String> = Vec::new();
    for (stream, responses) in [
        (&org1_stream, org1_responses),
        (&org2_stream, org2_responses),
    ] {
        assert_eq!(responses.len(), stream.len());
        for ((_, expected), (status, info)) in stream.iter().zip(responses) {
            assert_eq!(
                status, expected.status,
                "{}: got {status:?} ({info})",
                expected.what
            );
            if status == Status::Success {
                assert!(info.is_empty());
                let tx_id = expected.tx_id.clone().unwrap();
                assert!(ordered.insert(tx_id, expected.alone).is_none());
            } else {
                assert!(!info.is_empty(), "{}: no info", expected.what);
                refused.extend(expected.tx_id.clone());
            }
        }
    }
    assert_eq!(ordered.len(), ORG1_TXS + ORG2_TXS);
    assert!(refused.len() >= 8, "{refused:?}");

    // Deliver everything back, until every SUCCESS transaction was seen.
    let blocks = deliver_until(&mut client, &network.org1_peer, 0, ordered.len()).await;
    check_chain(&network.genesis, &blocks);
    let mut seen = HashSet::new();
    for block in &blocks[1..] {
        let data = &block.data.as_ref().unwrap().data;
        assert!(!data.is_empty() && data.len() <= MAX_MESSAGE_COUNT as usize);
        for raw in data {
            let tx_id = tx_id_of(raw);
            assert!(seen.insert(tx_id.clone()), "{tx_id} delivered twice");
            let alone = *ordered
                .get(&tx_id)
                .unwrap_or_else(|| panic!("{tx_id} was ordered but never accepted"));
            if alone {
                assert_eq!(
                    data.len(),
                    1,
                    "a transaction over PreferredMaxBytes has company"
                );
            }
        }
    }
    assert_eq!(seen.len(), ordered.len());
    for tx_id in &refused {
        assert!(!seen.contains(tx_id), "refused {tx_id} was ordered");
    }
    // Batches were cut by count, by size and by time, not one per
    // transaction.
    assert!(
        blocks.len() - 1 < ordered.len() / 2,
        "{} blocks",
        blocks.len()
    );

    // A Fabric peer's checks: the committer verifies each block's chain
    // link, data hash and orderer signatures against BlockValidation, and
    // finds every transaction valid.
    let peer_dir = tempfile::tempdir().unwrap();
    let mut committer = committer(&network, peer_dir.path());
    for block in &blocks[1..] {
        let committed = committer.commit(block.clone(), weft_msp::now()).unwrap();
        assert!(
            committed
                .codes
                .iter()
                .all(|code| *code == TxValidationCode::Valid),
            "block {}: {:?}",
            committed.number,
            committed.codes
        );
    }

    check_deliver_refusals(&mut client, &network, blocks.len() as u64).await;

    // Restart on the same data directory, without the genesis block: the
    // channel is reopened from its store and its chain continues.
    let height = orderer.height(CHANNEL).unwrap();
    assert_eq!(height, blocks.len() as u64);
    drop(client);
    orderer.shutdown().await.unwrap();
    let orderer = start(&network, data.path(), Vec::new()).await;
    assert_eq!(orderer.channel_ids(), [CHANNEL]);
    assert_eq!(orderer.height(CHANNEL), Some(height));
    let mut client = connect(&orderer).await;
    let more: Vec<(Envelope, Expected)> = (0..5)
        .map(|index| {
            let (tx_id, envelope) =
                network.transaction(CHANNEL, &network.client2, &format!("after-{index}"), 0);
            (envelope, Expected::ordered(tx_id, false))
        })
        .collect();
    // Copies sent again, as a Gateway does when an orderer fell silent: one
    // ordered before the restart (the window is read back from the store)
    // and one of this stream. They are answered SUCCESS, their TxIDs being
    // ordered, and never reach a block a second time.
    let mut with_replays = more.clone();
    with_replays.insert(2, org2_stream[0].clone());
    with_replays.push(more[0].clone());
    let responses = broadcast(&mut client, &with_replays).await;
    assert!(
        responses
            .iter()
            .all(|(status, _)| *status == Status::Success),
        "{responses:?}"
    );
    let after = deliver_until(&mut client, &network.org2_peer, height, more.len()).await;
    let mut chain = blocks.clone();
    chain.extend(after.iter().cloned());
    check_chain(&network.genesis, &chain);
    for block in &after {
        let committed = committer.commit(block.clone(), weft_msp::now()).unwrap();
        assert!(
            committed
                .codes
                .iter()
                .all(|code| *code == TxValidationCode::Valid)
        );
    }
    let after_ids: HashSet<String> = after
        .iter()
        .flat_map(|block| block.data.as_ref().unwrap().data.iter().map(tx_id_of))
        .collect();
    let more_ids: HashSet<String> = more
        .iter()
        .map(|(_, expected)| expected.tx_id.clone().unwrap())
        .collect();
    assert_eq!(after_ids, more_ids);
    check_unreadable_broadcasts(&orderer, &network).await;
    drop(client);
    orderer.shutdown().await.unwrap();

    // The same data directory refuses another channel's genesis block of
    // the same name.
    let other = Network::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let error = Orderer::start(
        node_config(data.path()),
        other.orderer.clone_signer(),
        vec![other.genesis.clone()],
        listener,
    )
    .await
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("differs from the bootstrap block"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_has_at_most_1024_requests_under_way_and_more_wait() {
    // Goal: the limit every node's gRPC server holds each connection to:
    // with 1,024 Broadcast streams open on one connection, the next waits
    // (HTTP/2 flow control, not an error) until one of them ends, so a
    // flood on one connection slows its sender instead of growing the
    // node; the node serves other connections meanwhile.
    let network = Network::new();
    let data = tempfile::tempdir().unwrap();
    let orderer = start(&network, data.path(), vec![network.genesis.clone()]).await;
    let client = connect(&orderer).await;
    let limit = weft_protos::serve::STREAMS_PER_CONNECTION_MAX as usize;
    // Each stream sends an empty envelope (refused, the stream stays
    // open), so that none is ended for never sending a request.
    let idle_stream = || {
        let (keep_open, requests) = tokio::sync::mpsc::channel::<Envelope>(1);
        keep_open.try_send(Envelope::default()).unwrap();
        (
            keep_open,
            tokio_stream::wrappers::ReceiverStream::new(requests),
        )
    };
    let mut open = Vec::with_capacity(limit);
    for _ in 0..limit {
        let (keep_open, requests) = idle_stream();
        let responses = client.clone().broadcast(requests).await.unwrap();
        open.push((keep_open, responses));
    }
    let (_keep_open, requests) = idle_stream();
    let mut waiting = client.clone();
    let beyond = tokio::spawn(async move { waiting.broadcast(requests).await.map(drop) });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !beyond.is_finished(),
        "a request beyond the limit was taken at once"
    );

    // Another connection is served meanwhile.
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "meanwhile", 0);
    let answers = broadcast(
        &mut connect(&orderer).await,
        &[(envelope, Expected::ordered(tx_id, false))],
    )
    .await;
    assert_eq!(answers[0].0, Status::Success, "{answers:?}");

    // One stream ends: the waiting request goes through.
    drop(open.pop());
    tokio::time::timeout(Duration::from_secs(30), beyond)
        .await
        .expect("the waiting request went through once a stream ended")
        .unwrap()
        .unwrap();
    drop(open);
    orderer.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_configured_limits_are_refused_and_silent_ones_ended() {
    // Goal: `orderer.limits.concurrency`: Broadcast and Deliver streams
    // open at once, across all connections, are bounded; the next is
    // refused with a reason and a code to retry on, and a stream's place
    // frees when it ends. A stream whose client never sends a request is
    // ended instead of holding its place.
    let network = Network::new();
    let data = tempfile::tempdir().unwrap();
    let mut config = node_config(data.path());
    config.limits.broadcast_streams = 1;
    config.limits.deliver_streams = 1;
    let orderer = start_with(&network, config, vec![network.genesis.clone()]).await;
    let (keep_open, requests) = tokio::sync::mpsc::channel::<Envelope>(1);
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "first", 0);
    keep_open.send(envelope).await.unwrap();
    let mut open = connect(&orderer)
        .await
        .broadcast(tokio_stream::wrappers::ReceiverStream::new(requests))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        open.message().await.unwrap().unwrap().status,
        Status::Success as i32,
        "{tx_id}"
    );
    // From another connection: the second Broadcast stream is refused.
    let (_, envelope) = network.transaction(CHANNEL, &network.client1, "second", 0);
    let refused = first_broadcast_answer(&orderer, &envelope)
        .await
        .unwrap_err();
    busy::assert_over_limit(&refused, "/orderer.AtomicBroadcast/Broadcast", 1);
    // The first ends; the second goes through.
    drop((keep_open, open));
    let patience = Duration::from_secs(30);
    let answer = busy::once_a_place_frees(patience, || first_broadcast_answer(&orderer, &envelope))
        .await
        .expect("the ended stream kept its place")
        .unwrap();
    assert_eq!(answer.status, Status::Success as i32, "{answer:?}");

    // Deliver: a stream that never sends its seek holds the one place
    // until it is ended; meanwhile another is refused.
    let mut silent = connect(&orderer)
        .await
        .deliver(tokio_stream::pending::<Envelope>())
        .await
        .unwrap()
        .into_inner();
    let seek = seek_envelope(
        CHANNEL,
        &network.client1,
        Position::Specified(SeekSpecified { number: 0 }),
        Position::Specified(SeekSpecified { number: 0 }),
        SeekBehavior::FailIfNotReady,
    );
    let refused = first_deliver_answer(&orderer, &seek).await.unwrap_err();
    busy::assert_over_limit(&refused, "/orderer.AtomicBroadcast/Deliver", 1);
    let ended = silent.message().await.unwrap_err();
    assert_eq!(ended.code(), tonic::Code::DeadlineExceeded, "{ended:?}");
    assert!(
        ended.message().contains("no request arrived within 10s"),
        "{ended:?}"
    );
    drop(silent);
    let answer = busy::once_a_place_frees(patience, || first_deliver_answer(&orderer, &seek))
        .await
        .expect("the ended stream kept its place")
        .unwrap();
    assert!(
        matches!(answer.r#type, Some(Delivered::Block(_))),
        "{answer:?}"
    );
    orderer.shutdown().await.unwrap();
}

/// The first answer to `envelope` on a Broadcast stream of its own, or the
/// status the call ended with.
async fn first_broadcast_answer(
    orderer: &Orderer,
    envelope: &Envelope,
) -> Result<Option<BroadcastResponse>, tonic::Status> {
    connect(orderer)
        .await
        .broadcast(tokio_stream::iter([envelope.clone()]))
        .await?
        .into_inner()
        .message()
        .await
}

/// The first answer to `seek` on a Deliver stream of its own, or the
/// status the call ended with.
async fn first_deliver_answer(
    orderer: &Orderer,
    seek: &Envelope,
) -> Result<Option<weft_protos::orderer::DeliverResponse>, tonic::Status> {
    connect(orderer)
        .await
        .deliver(tokio_stream::iter([seek.clone()]))
        .await?
        .into_inner()
        .message()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_orders_the_pending_batch() {
    // Goal: transactions a client was told SUCCESS for, still waiting for
    // the batch timeout when the orderer stops, are in a block after the
    // restart.
    let network = Network::with_batch_timeout("1h");
    let data = tempfile::tempdir().unwrap();
    let orderer = start(&network, data.path(), vec![network.genesis.clone()]).await;
    let mut client = connect(&orderer).await;
    let txs: Vec<(Envelope, Expected)> = (0..3)
        .map(|index| {
            let (tx_id, envelope) =
                network.transaction(CHANNEL, &network.client1, &format!("pending-{index}"), 0);
            (envelope, Expected::ordered(tx_id, false))
        })
        .collect();
    let responses = broadcast(&mut client, &txs).await;
    assert!(
        responses
            .iter()
            .all(|(status, _)| *status == Status::Success)
    );
    drop(client);
    orderer.shutdown().await.unwrap();

    let orderer = start(&network, data.path(), Vec::new()).await;
    assert_eq!(orderer.height(CHANNEL), Some(2));
    let mut client = connect(&orderer).await;
    let blocks = deliver_until(&mut client, &network.org1_peer, 1, txs.len()).await;
    assert_eq!(blocks.len(), 1);
    drop(client);
    orderer.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_channel_cuts_at_once_and_signs_checkpoints() {
    // Goal: a solo stream channel (checkpoint every 3 transactions or 1 h;
    // batch timeout 1 h) delivers each transaction in a block of its own
    // when they come one at a time, and signs each of those blocks (it
    // goes idle after each: no transaction waits for a checkpoint); groups
    // a burst into blocks no larger than MaxMessageCount, whose unsigned
    // stretches stay under the count; and stops on a signed block. Every
    // block links to the one before and records the last config.
    let network = Network::streaming(3, "1h");
    let mut stream = StreamOrderer::start(&network).await;
    let mut chain = vec![network.genesis.clone()];

    for index in 0..4 {
        let (tx_id, block) = stream.order_one(&network, &format!("one-{index}")).await;
        assert_eq!(tx_ids_of(&block), [tx_id], "block {}", chain.len());
        assert_eq!(
            weft_protos::block::signature_count(&block),
            1,
            "transaction {index}: the orderer idles after it"
        );
        chain.push(block);
    }

    // A burst on one stream: blocks of up to MaxMessageCount, and no
    // stretch of unsigned blocks holds 3 transactions or more.
    let burst: Vec<(Envelope, Expected)> = (0..45)
        .map(|index| {
            let (tx_id, envelope) =
                network.transaction(CHANNEL, &network.client1, &format!("burst-{index}"), 0);
            (envelope, Expected::ordered(tx_id, false))
        })
        .collect();
    let answers = broadcast(&mut stream.client, &burst).await;
    assert!(answers.iter().all(|(status, _)| *status == Status::Success));
    let mut ordered = Vec::new();
    while ordered.len() < burst.len() {
        let block = stream.blocks.next().await;
        let tx_ids = tx_ids_of(&block);
        assert!(tx_ids.len() <= MAX_MESSAGE_COUNT as usize);
        ordered.extend(tx_ids);
        chain.push(block);
    }
    let sent: Vec<String> = burst
        .iter()
        .map(|(_, expected)| expected.tx_id.clone().unwrap())
        .collect();
    assert_eq!(ordered, sent, "the burst is ordered as sent, each once");
    let mut unsigned = 0;
    for block in &chain[1..] {
        if weft_protos::block::signature_count(block) == 0 {
            unsigned += tx_ids_of(block).len();
            assert!(
                unsigned < 3,
                "block {} should have been a checkpoint",
                block.header.as_ref().unwrap().number
            );
        } else {
            unsigned = 0;
        }
    }

    let data = stream.stop().await;
    let store =
        BlockStore::open(&StoreConfig::new(data.path().join("ledgers").join(CHANNEL))).unwrap();
    let height = store.height();
    let stored: Vec<Block> = (0..height)
        .map(|n| store.block(n).unwrap().unwrap())
        .collect();
    assert!(stored.len() >= chain.len());
    assert_eq!(stored[..chain.len()], chain[..], "delivered as stored");
    check_links(&stored);
    let tip = stored.last().unwrap();
    assert_eq!(
        weft_protos::block::signature_count(tip),
        1,
        "a clean stop ends on a checkpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_stages_stream_blocks_until_a_checkpoint_and_rolls_back_a_forged_one() {
    // Goal: the peer's committer applies a stream channel's unsigned
    // blocks at once (their writes are in the state endorsers read) but
    // commits them to readers only with the checkpoint that covers them.
    // A checkpoint whose signature was forged rolls back the blocks staged
    // before it (state and block store), and the honest chain then
    // commits over the same heights. So does an unsigned block where the
    // checkpoint count requires a signature. A restart drops staged blocks
    // no checkpoint confirmed.
    let network = Network::streaming(3, "1h");
    let keys: Vec<String> = (0..6).map(|index| format!("staged-{index}")).collect();
    let (open, checkpoint) = (Seal::Unsigned, Seal::Signed);
    let chain = stream_chain(
        &network,
        &keys,
        &[open, open, checkpoint, open, open, checkpoint],
    );
    let signed: Vec<bool> = chain
        .iter()
        .map(|block| weft_protos::block::signature_count(block) > 0)
        .collect();
    assert_eq!(signed, [false, false, true, false, false, true]);
    let visible = |committer: &ChannelCommitter, key: &str| {
        committer
            .handle()
            .state
            .get(CHAINCODE, key)
            .unwrap()
            .is_some()
    };

    // Honest: staged, then committed with the checkpoint.
    let peer_dir = tempfile::tempdir().unwrap();
    let mut honest = committer(&network, peer_dir.path());
    let committed_height = |committer: &ChannelCommitter| *committer.handle().committed.borrow();
    for (index, block) in chain.iter().enumerate() {
        let outcome = honest.commit(block.clone(), weft_msp::now()).unwrap();
        assert!(
            outcome
                .codes
                .iter()
                .all(|code| *code == TxValidationCode::Valid)
        );
        assert_eq!(outcome.staged, !signed[index], "block {}", index + 1);
        assert!(visible(&honest, &keys[index]), "staged writes are readable");
        let expected = if index < 2 {
            1
        } else if index < 5 {
            4
        } else {
            7
        };
        assert_eq!(
            committed_height(&honest),
            expected,
            "after block {}",
            index + 1
        );
        let applied = *honest.handle().applied.borrow();
        assert_eq!(
            applied,
            index as u64 + 2,
            "applied after block {}",
            index + 1
        );
    }
    assert_eq!(honest.handle().ledger.height(), 7);

    // Forged: the first checkpoint's signature does not verify.
    let forged_dir = tempfile::tempdir().unwrap();
    let mut forged_peer = committer(&network, forged_dir.path());
    let mut forged = chain[2].clone();
    let slot = BlockMetadataIndex::Signatures as usize;
    let mut signatures =
        Metadata::decode(forged.metadata.as_ref().unwrap().metadata[slot].clone()).unwrap();
    let mut signature = signatures.signatures[0].signature.to_vec();
    let last = signature.len() - 1;
    signature[last] ^= 1;
    signatures.signatures[0].signature = signature.into();
    weft_protos::block::set_metadata_slot(
        &mut forged,
        BlockMetadataIndex::Signatures,
        signatures.encode_to_vec().into(),
    );
    stage_then_roll_back(&mut forged_peer, &chain[..2], forged);
    assert_eq!(forged_peer.handle().ledger.height(), 1);
    assert_eq!(*forged_peer.handle().applied.borrow(), 1);
    assert_eq!(committed_height(&forged_peer), 1);
    assert!(!visible(&forged_peer, &keys[0]) && !visible(&forged_peer, &keys[1]));
    for block in &chain {
        forged_peer.commit(block.clone(), weft_msp::now()).unwrap();
    }
    assert_eq!(committed_height(&forged_peer), 7);
    assert!(keys.iter().all(|key| visible(&forged_peer, key)));
    for number in 1..7 {
        let ours = forged_peer.handle().ledger.block(number).unwrap().unwrap();
        let theirs = honest.handle().ledger.block(number).unwrap().unwrap();
        assert_eq!(ours.header, theirs.header);
    }

    // The count's checkpoint sent without its signature: at 3 unsigned
    // transactions the orderers must sign, so the peer refuses it too.
    let stripped_dir = tempfile::tempdir().unwrap();
    let mut stripped_peer = committer(&network, stripped_dir.path());
    let mut stripped = chain[2].clone();
    weft_protos::block::seal_block_unsigned(&mut stripped, 0, Bytes::new());
    stage_then_roll_back(&mut stripped_peer, &chain[..2], stripped);

    // A restart with staged blocks: they are dropped and fetched again.
    let restart_dir = tempfile::tempdir().unwrap();
    let mut restarted = committer(&network, restart_dir.path());
    for block in &chain[..5] {
        restarted.commit(block.clone(), weft_msp::now()).unwrap();
    }
    assert_eq!(restarted.handle().ledger.height(), 6);
    drop(restarted);
    let mut restarted = reopen_committer(restart_dir.path());
    assert_eq!(restarted.handle().ledger.height(), 4);
    assert!(visible(&restarted, &keys[2]) && !visible(&restarted, &keys[3]));
    for block in &chain[3..] {
        restarted.commit(block.clone(), weft_msp::now()).unwrap();
    }
    assert_eq!(committed_height(&restarted), 7);
}

/// Commits `staged` (blocks 1 and 2, unsigned: staged), then `refused` as
/// block 3, which must roll both back to block 1.
fn stage_then_roll_back(peer: &mut ChannelCommitter, staged: &[Block], refused: Block) {
    for block in staged {
        assert!(peer.commit(block.clone(), weft_msp::now()).unwrap().staged);
    }
    let error = peer.commit(refused, weft_msp::now()).unwrap_err();
    assert!(
        matches!(
            error,
            weft_peer_committer::Error::RolledBack {
                block: 3,
                to: 1,
                ..
            }
        ),
        "{error}"
    );
}

/// The TxIDs of a block's transactions, in order.
fn tx_ids_of(block: &Block) -> Vec<String> {
    block
        .data
        .as_ref()
        .unwrap()
        .data
        .iter()
        .map(tx_id_of)
        .collect()
}

/// Each block links to the one before, hashes its data and records the
/// last config block (0); signatures aside.
fn check_links(blocks: &[Block]) {
    for pair in blocks.windows(2) {
        let (previous, block) = (&pair[0], &pair[1]);
        let header = block.header.as_ref().unwrap();
        assert_eq!(header.number, previous.header.as_ref().unwrap().number + 1);
        assert_eq!(
            header.previous_hash.as_ref(),
            block_header_hash(previous.header.as_ref().unwrap())
        );
        assert_eq!(
            header.data_hash.as_ref(),
            block_data_hash(block.data.as_ref().unwrap())
        );
        assert_eq!(weft_protos::block::last_config_index(block), Some(0));
    }
}

/// A solo orderer of `network`'s channel on a fresh data directory, with a
/// Broadcast client and a Deliver stream open from block 1.
struct StreamOrderer {
    data: tempfile::TempDir,
    orderer: Orderer,
    client: AtomicBroadcastClient<Channel>,
    blocks: BlockReader,
}

impl StreamOrderer {
    async fn start(network: &Network) -> Self {
        let data = tempfile::tempdir().unwrap();
        let orderer = start(network, data.path(), vec![network.genesis.clone()]).await;
        let mut client = connect(&orderer).await;
        let blocks = BlockReader::open(&mut client, &network.org1_peer, 1).await;
        Self {
            data,
            orderer,
            client,
            blocks,
        }
    }

    /// Broadcasts one transaction writing `key`, requires SUCCESS, and
    /// reads the next block: its TxID and the block.
    async fn order_one(&mut self, network: &Network, key: &str) -> (String, Block) {
        let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, key, 0);
        let expected = Expected::ordered(tx_id.clone(), false);
        let answers = broadcast(&mut self.client, &[(envelope, expected)]).await;
        assert_eq!(answers[0].0, Status::Success, "{answers:?}");
        (tx_id, self.blocks.next().await)
    }

    /// Stops the orderer cleanly; its data directory stays.
    async fn stop(self) -> tempfile::TempDir {
        drop(self.blocks);
        drop(self.client);
        self.orderer.shutdown().await.unwrap();
        self.data
    }
}

/// A stream channel's blocks as its orderer writes them (the orderer's
/// `BlockWriter`, signing as the network's orderer), one transaction
/// writing each of `keys` per block, sealed as `seals` say: a feeder for
/// a peer, with the checkpoints where a test needs them (a real orderer
/// signs every block it cuts while idle).
fn stream_chain(network: &Network, keys: &[String], seals: &[Seal]) -> Vec<Block> {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(BlockStore::open(&StoreConfig::new(dir.path().join(CHANNEL))).unwrap());
    store.append(&network.genesis).unwrap();
    let signer = Arc::new(network.orderer.clone_signer());
    let mut writer = BlockWriter::new(CHANNEL, store, signer, 0).unwrap();
    keys.iter()
        .zip(seals)
        .map(|(key, seal)| {
            let (_, envelope) = network.transaction(CHANNEL, &network.client1, key, 0);
            let content = BlockContent::Transactions(vec![envelope.encode_to_vec().into()]);
            writer.write(&content, *seal).unwrap()
        })
        .collect()
}

/// One Deliver stream read a block at a time.
struct BlockReader {
    stream: tonic::Streaming<weft_protos::orderer::DeliverResponse>,
}

impl BlockReader {
    async fn open(
        client: &mut AtomicBroadcastClient<Channel>,
        reader: &Signer,
        start: u64,
    ) -> Self {
        let request = seek_envelope(
            CHANNEL,
            reader,
            Position::Specified(SeekSpecified { number: start }),
            Position::Specified(SeekSpecified { number: u64::MAX }),
            SeekBehavior::BlockUntilReady,
        );
        let stream = client
            .deliver(tokio_stream::iter(vec![request]))
            .await
            .unwrap()
            .into_inner();
        Self { stream }
    }

    async fn next(&mut self) -> Block {
        let message = tokio::time::timeout(DELIVER_TIME_MAX, self.stream.message())
            .await
            .expect("the orderer delivers the next block");
        match message.unwrap().unwrap().r#type.unwrap() {
            Delivered::Block(block) => block,
            Delivered::Status(status) => panic!("deliver ended early with {status}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcdraft_channel_needs_cluster_settings_unless_the_node_orders_it_alone() {
    // Goal: a node without cluster settings refuses a channel whose config
    // names etcdraft, saying what is missing; the node's consensus
    // override runs it solo.
    let mut network = Network::with_batch_timeout("100ms");
    network.genesis = network.genesis_with_consensus("etcdraft");
    let data = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let error = Orderer::start(
        node_config(data.path()),
        network.orderer.clone_signer(),
        vec![network.genesis.clone()],
        listener,
    )
    .await
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("this node has no cluster settings"),
        "{error}"
    );

    let mut config = node_config(data.path());
    config.consensus = weft_orderer::ConsensusMode::Solo;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let orderer = Orderer::start(
        config,
        network.orderer.clone_signer(),
        vec![network.genesis.clone()],
        listener,
    )
    .await
    .unwrap();
    let mut client = connect(&orderer).await;
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "raft", 0);
    let responses = broadcast(
        &mut client,
        &[(envelope, Expected::ordered(tx_id.clone(), false))],
    )
    .await;
    assert_eq!(responses[0].0, Status::Success);
    let blocks = deliver_until(&mut client, &network.org1_peer, 1, 1).await;
    assert_eq!(tx_id_of(&blocks[0].data.as_ref().unwrap().data[0]), tx_id);
    drop(client);

    orderer.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_orderer_start_serves_until_terminated() {
    // Goal: `weft orderer start` with a config file bootstraps the channel
    // from its genesis block, orders a broadcast transaction, and on
    // SIGTERM stops cleanly with the block on disk.
    let network = Network::new();
    let dir = tempfile::tempdir().unwrap();
    let msp = dir.path().join("msp");
    for (folder, file, pem) in [
        ("signcerts", "cert.pem", &network.orderer.0.certificate_pem),
        ("keystore", "key_sk", &network.orderer.0.key_pem),
    ] {
        std::fs::create_dir_all(msp.join(folder)).unwrap();
        std::fs::write(msp.join(folder).join(file), pem).unwrap();
    }
    std::fs::write(
        dir.path().join("orders.block"),
        network.genesis.encode_to_vec(),
    )
    .unwrap();
    let config = dir.path().join("orderer.yaml");
    std::fs::write(
        &config,
        "orderer:\n  id: orderer0\n  listenAddress: 127.0.0.1:0\n  localMspId: OrdererMSP\n  \
         mspConfigPath: msp\n  fileSystemPath: data\n  authentication:\n    timeWindow: 30s\n\
         channels:\n  - genesisBlock: orders.block\nledger:\n  durability: group-commit\n",
    )
    .unwrap();

    let mut process = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["orderer", "start", "--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = process.stdout.take().unwrap();
    let ready = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        line
    })
    .await
    .unwrap();
    assert!(ready.contains("channels [orders]"), "{ready}");
    let address = ready
        .split("grpc ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = AtomicBroadcastClient::new(channel);
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "binary", 0);
    let responses = broadcast(
        &mut client,
        &[(envelope, Expected::ordered(tx_id.clone(), false))],
    )
    .await;
    assert_eq!(responses[0].0, Status::Success, "{responses:?}");
    let blocks = deliver_until(&mut client, &network.org1_peer, 1, 1).await;
    assert_eq!(tx_id_of(&blocks[0].data.as_ref().unwrap().data[0]), tx_id);
    // The configured time window (30 s) is the one applied: a request made
    // a minute ago, within Fabric's default 15 minutes, is refused.
    let oldest = || Position::Oldest(SeekOldest {});
    let minute_old = seek_envelope_at(
        CHANNEL,
        &network.org1_peer,
        [oldest(), oldest()],
        SeekBehavior::BlockUntilReady,
        Some(weft_msp::now() - 60),
    );
    assert_eq!(
        deliver_requests(&mut client, vec![minute_old]).await,
        [Delivered::Status(Status::BadRequest as i32)]
    );
    drop(client);

    // The operations endpoint: the broadcast, the block the batch timeout
    // cut, the height and the process's CPU time are in /metrics.
    let operations = address_in(&ready, "operations ");
    let (status, health) = http_get(&operations, "/healthz").await;
    assert_eq!(status, 200, "{health}");
    assert!(health.contains(r#""status":"OK""#), "{health}");
    let (status, metrics) = http_get(&operations, "/metrics").await;
    assert_eq!(status, 200);
    for line in [
        r#"broadcast_processed_seconds_count{channel="orders",status="SUCCESS"} 1"#,
        r#"blockcutter_blocks_cut_total{channel="orders",reason="timeout"} 1"#,
        r#"ledger_blockchain_height{channel="orders"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    assert!(
        metric_value(&metrics, "process_cpu_seconds_total").is_some_and(|cpu| cpu > 0.0),
        "{metrics}"
    );

    let killed = std::process::Command::new("kill")
        .args(["-TERM", &process.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // A clean stop closes (and syncs) the block store itself rather than
    // leaving it to a held handle after a grace period.
    let output = process.wait_with_output().unwrap();
    assert!(output.status.success());
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("orderer stopped"), "{log}");
    assert!(!log.contains("still in use"), "{log}");
    let store =
        BlockStore::open(&StoreConfig::new(dir.path().join("data/ledgers/orders"))).unwrap();
    assert_eq!(store.height(), 2);
}

/// The `host:port` after `label` in a node's ready line.
fn address_in(ready: &str, label: &str) -> String {
    ready
        .split(label)
        .nth(1)
        .unwrap_or_else(|| panic!("no {label:?} in {ready:?}"))
        .split([',', ' '])
        .next()
        .unwrap()
        .trim()
        .to_owned()
}

/// `GET path` from an operations endpoint: the status code and the body.
async fn http_get(address: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("the operations endpoint answers")
    .unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The body of `/healthz` at `operations` once it answers `expected`;
/// fails saying `otherwise`, with the last answer, after `within`.
async fn health_once(operations: &str, expected: u16, within: Duration, otherwise: &str) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (status, health) = http_get(operations, "/healthz").await;
        if status == expected {
            return health;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{otherwise}: {status} {health}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the series `series` (name and labels, exactly) in
/// Prometheus text.
fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// One `weft orderer start` process (of a Raft cluster, or on Kafka).
struct OrdererNode {
    config: std::path::PathBuf,
    grpc: String,
    process: Option<std::process::Child>,
    /// The node's log lines (standard error), read by a thread.
    log: Arc<std::sync::Mutex<Vec<String>>>,
    /// The ready line of the running process (standard output).
    ready: Arc<std::sync::Mutex<Option<String>>>,
}

impl OrdererNode {
    fn spawn(&mut self) {
        let mut process = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
            .args([
                "orderer",
                "start",
                "--config",
                self.config.to_str().unwrap(),
            ])
            .env("NO_COLOR", "1")
            .env("WEFT_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        *self.ready.lock().unwrap() = None;
        let stdout = process.stdout.take().unwrap();
        let ready = self.ready.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            if std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
                .is_ok_and(|read| read > 0)
            {
                *ready.lock().unwrap() = Some(line);
            }
        });
        let stderr = process.stderr.take().unwrap();
        let log = self.log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
                let Ok(line) = line else { return };
                log.lock().unwrap().push(line);
            }
        });
        self.process = Some(process);
    }

    /// The highest term in which this node said it leads, since `from`
    /// log lines.
    fn led_in_term(&self) -> Option<u64> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.contains("this node leads"))
            .filter_map(|line| {
                let term = line.split("term=").nth(1)?;
                term.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .max()
    }

    fn lost_leadership_after(&self, term: u64) -> bool {
        let log = self.log.lock().unwrap();
        let led = log.iter().rposition(|line| {
            line.contains("this node leads") && line.contains(&format!("term={term}"))
        });
        led.is_some_and(|at| {
            log[at..]
                .iter()
                .any(|line| line.contains("no longer leads"))
        })
    }

    /// The node's operations endpoint, once it announced it.
    async fn operations(&self) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let ready = loop {
            if let Some(ready) = self.ready.lock().unwrap().clone() {
                break ready;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the node at {} never got ready",
                self.grpc
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        address_in(&ready, "operations ")
    }

    /// The node's `/metrics`, once it announced its operations endpoint.
    async fn metrics(&self) -> String {
        let (status, metrics) = http_get(&self.operations().await, "/metrics").await;
        assert_eq!(status, 200);
        metrics
    }

    async fn client(&self) -> AtomicBroadcastClient<Channel> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        AtomicBroadcastClient::new(channel)
    }

    /// The node's answer to `envelope`, sent on a Broadcast stream of its
    /// own.
    async fn broadcast_one(&self, envelope: Envelope) -> BroadcastResponse {
        self.client()
            .await
            .broadcast(tokio_stream::iter([envelope]))
            .await
            .unwrap()
            .into_inner()
            .message()
            .await
            .unwrap()
            .expect("the node answers the envelope")
    }

    fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill().unwrap(); // SIGKILL
            process.wait().unwrap();
        }
    }
}

impl Drop for OrdererNode {
    fn drop(&mut self) {
        self.kill();
        // A failed test shows what the node said.
        if std::thread::panicking() {
            let log = self
                .log
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            eprintln!("---- log of the orderer at {} ----", self.grpc);
            for line in log.iter().rev().take(80).rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// A port for a node to bind later: outside the ephemeral range, where
/// any outgoing connection could take it first.
fn free_port() -> u16 {
    weft::free_port().unwrap()
}

/// Broadcasts transactions to `node` on one stream, a window at a time,
/// until `stop`; returns the TxIDs answered SUCCESS and the number
/// refused (no leader while one is elected, or the node died).
async fn broadcast_load(
    transactor: Arc<Transactor>,
    client: AtomicBroadcastClient<Channel>,
    name: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (Vec<String>, usize) {
    const WINDOW: usize = 20;
    let mut client = client;
    let mut succeeded = Vec::new();
    let mut refused = 0;
    let mut round = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let transactions: Vec<(String, Envelope)> = (0..WINDOW)
            .map(|i| transactor.transaction(&format!("{name}-{round}-{i}")))
            .collect();
        round += 1;
        let requests: Vec<Envelope> = transactions.iter().map(|(_, e)| e.clone()).collect();
        let Ok(responses) = client.broadcast(tokio_stream::iter(requests)).await else {
            return (succeeded, refused + WINDOW);
        };
        let mut responses = responses.into_inner();
        let mut answered = 0;
        // The stream ends early when the node dies: the rest got no answer.
        while let Ok(Some(response)) = responses.message().await {
            if response.status == Status::Success as i32 {
                succeeded.push(transactions[answered].0.clone());
            } else {
                refused += 1;
            }
            answered += 1;
        }
        if answered < WINDOW {
            refused += WINDOW - answered;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    (succeeded, refused)
}

/// A steady Broadcast load, one stream on each of some nodes, until
/// stopped.
struct Loads {
    stop: Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<(Vec<String>, usize)>>,
}

impl Loads {
    /// Starts a load on each of `nodes`, its transactions named after
    /// `name` and the node.
    async fn start(transactor: &Arc<Transactor>, nodes: &[OrdererNode], name: &str) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            tasks.push(tokio::spawn(broadcast_load(
                transactor.clone(),
                client_when_serving(node).await,
                format!("{name}{index}"),
                stop.clone(),
            )));
        }
        Self { stop, tasks }
    }

    /// Stops the load; returns the TxIDs answered SUCCESS, which must be
    /// more than a hundred.
    async fn stop(self) -> Vec<String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut succeeded = Vec::new();
        for task in self.tasks {
            let (ok, _refused) = task.await.unwrap();
            succeeded.extend(ok);
        }
        assert!(
            succeeded.len() > 100,
            "only {} transactions ordered",
            succeeded.len()
        );
        succeeded
    }
}

/// A Broadcast client of `node` once it serves.
async fn client_when_serving(node: &OrdererNode) -> AtomicBroadcastClient<Channel> {
    for _ in 0..100 {
        if let Ok(channel) =
            tonic::transport::Endpoint::from_shared(format!("http://{}", node.grpc))
                .unwrap()
                .connect()
                .await
        {
            return AtomicBroadcastClient::new(channel);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the orderer at {} never served", node.grpc)
}

/// Sends `signal` (`-STOP`, `-CONT`) to `node`'s process.
fn signal(node: &OrdererNode, signal: &str) {
    let pid = node.process.as_ref().unwrap().id().to_string();
    let status = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Broadcasts `envelope` to the nodes `alive` in turn until one answers
/// SUCCESS (a Raft cluster may be electing a leader).
async fn ordered_by_any(nodes: &[OrdererNode], alive: &[usize], envelope: Envelope) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        for &index in alive {
            let mut client = client_when_serving(&nodes[index]).await;
            let answer = client
                .broadcast(tokio_stream::iter([envelope.clone()]))
                .await
                .ok()
                .map(tonic::Response::into_inner);
            if let Some(mut answers) = answer
                && let Ok(Some(answer)) = answers.message().await
                && answer.status == Status::Success as i32
            {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no orderer of {alive:?} took the envelope"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The blocks 0..height of the channel on `node`.
async fn blocks_of(node: &OrdererNode, reader: &Signer, height: u64) -> Vec<Block> {
    let mut client = node.client().await;
    let request = seek_envelope(
        CHANNEL,
        reader,
        Position::Specified(SeekSpecified { number: 0 }),
        Position::Specified(SeekSpecified { number: height - 1 }),
        SeekBehavior::BlockUntilReady,
    );
    let mut stream = client
        .deliver(tokio_stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner();
    let mut blocks = Vec::new();
    let read = async {
        while (blocks.len() as u64) < height {
            match stream.message().await.unwrap().unwrap().r#type.unwrap() {
                Delivered::Block(block) => blocks.push(block),
                Delivered::Status(status) => panic!("deliver ended early with {status}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the node delivers every block up to the height");
    blocks
}

/// The header hash of each of `blocks`.
fn hashes(blocks: &[Block]) -> Vec<Vec<u8>> {
    blocks
        .iter()
        .map(|block| block_header_hash(block.header.as_ref().unwrap()).to_vec())
        .collect()
}

/// Checks that two orderers' `chains` have the same headers from
/// `genesis` on, and that every TxID of `succeeded` (answered SUCCESS) is
/// in exactly one block, and no transaction in two. Returns how many
/// transactions the chain holds.
fn check_same_chain(chains: &[Vec<Block>; 2], genesis: &Block, succeeded: &[String]) -> usize {
    assert_eq!(hashes(&chains[0]), hashes(&chains[1]));
    assert_eq!(&chains[0][0], genesis);
    let mut ordered: HashMap<String, usize> = HashMap::new();
    for block in &chains[0][1..] {
        for envelope in &block.data.as_ref().unwrap().data {
            *ordered.entry(tx_id_of(envelope)).or_default() += 1;
        }
    }
    for tx_id in succeeded {
        assert_eq!(ordered.get(tx_id), Some(&1), "{tx_id} answered SUCCESS");
    }
    assert!(
        ordered.values().all(|&count| count == 1),
        "a transaction ordered twice"
    );
    ordered.len()
}

/// The height of the channel on `node` (Deliver of the newest block).
async fn height_of(node: &OrdererNode, reader: &Signer) -> u64 {
    try_height_of(node, reader)
        .await
        .expect("the node serves Deliver")
}

/// The height of the channel on `node`, or `None` while it does not
/// serve (starting, catching up).
async fn try_height_of(node: &OrdererNode, reader: &Signer) -> Option<u64> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.grpc))
        .unwrap()
        .connect()
        .await
        .ok()?;
    let mut client = AtomicBroadcastClient::new(channel);
    let request = seek_envelope(
        CHANNEL,
        reader,
        Position::Newest(SeekNewest {}),
        Position::Newest(SeekNewest {}),
        SeekBehavior::BlockUntilReady,
    );
    let mut stream = client
        .deliver(tokio_stream::iter(vec![request]))
        .await
        .ok()?
        .into_inner();
    match stream.message().await.ok()??.r#type? {
        Delivered::Block(block) => Some(block.header?.number + 1),
        Delivered::Status(status) => panic!("no newest block: {status}"),
    }
}

/// Three Raft nodes of the channel (configs written in `dir`, not
/// started yet), ticking every 50 ms and compacting their logs every
/// 64 KB, and the channel's genesis block. Node `i` has Raft ID `i + 1`.
fn raft_cluster(network: &Network, dir: &std::path::Path) -> (Vec<OrdererNode>, Block) {
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let metadata = weft_protos::etcdraft::ConfigMetadata {
        consenters: ports
            .iter()
            .map(|(_, cluster)| weft_protos::etcdraft::Consenter {
                host: "127.0.0.1".to_owned(),
                port: u32::from(*cluster),
                ..Default::default()
            })
            .collect(),
        options: Some(weft_protos::etcdraft::Options {
            tick_interval: "50ms".to_owned(),
            election_tick: 10,
            heartbeat_tick: 1,
            max_inflight_blocks: 5,
            // Small, so that logs are compacted during the test.
            snapshot_interval_size: 64 * 1024,
        }),
    };
    let genesis = network.genesis_with_raft(&metadata);
    (orderer_processes(network, dir, &genesis, &ports), genesis)
}

/// Orderer processes of the channel starting from `genesis` (configs
/// written in `dir`, not started yet), serving on each pair of `ports`
/// (Broadcast and Deliver, cluster), each with a data directory of its
/// own. Every other node has one async worker, as `weft network up` gives
/// nodes sharing a small machine, so that a cluster runs its Raft loops
/// both ways: as a task of the node's only worker, and on a thread of its
/// own beside two workers.
fn orderer_processes(
    network: &Network,
    dir: &std::path::Path,
    genesis: &Block,
    ports: &[(u16, u16)],
) -> Vec<OrdererNode> {
    let msp = dir.join("msp");
    for (folder, file, pem) in [
        ("signcerts", "cert.pem", &network.orderer.0.certificate_pem),
        ("keystore", "key_sk", &network.orderer.0.key_pem),
    ] {
        std::fs::create_dir_all(msp.join(folder)).unwrap();
        std::fs::write(msp.join(folder).join(file), pem).unwrap();
    }
    std::fs::write(dir.join("orders.block"), genesis.encode_to_vec()).unwrap();
    ports
        .iter()
        .enumerate()
        .map(|(index, ports)| {
            let name = format!("orderer{index}");
            let workers = if index % 2 == 0 { 1 } else { 2 };
            let data = format!("data{index}");
            orderer_node(dir, &name, &data, "orders.block", *ports, workers)
        })
        .collect()
}

/// An orderer process (not started) named `name`, its config written in
/// `dir` (`<name>.yaml`, beside the `msp` folder), keeping its data in
/// `dir/<data>`, bootstrapping the channel from `dir/<block>`, serving on
/// `grpc` (Broadcast and Deliver) and `cluster` with `workers` async
/// worker threads.
fn orderer_node(
    dir: &std::path::Path,
    name: &str,
    data: &str,
    block: &str,
    (grpc, cluster): (u16, u16),
    workers: usize,
) -> OrdererNode {
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &config,
        format!(
            "orderer:\n  id: {name}\n  listenAddress: 127.0.0.1:{grpc}\n  \
             localMspId: OrdererMSP\n  mspConfigPath: msp\n  fileSystemPath: {data}\n  \
             workerThreads: {workers}\n\
             channels:\n  - genesisBlock: {block}\n\
             consensus:\n  type: channel\n\
             cluster:\n  listenAddress: 127.0.0.1:{cluster}\n"
        ),
    )
    .unwrap();
    OrdererNode {
        config,
        grpc: format!("127.0.0.1:{grpc}"),
        process: None,
        log: Arc::default(),
        ready: Arc::default(),
    }
}

async fn wait_for_leader(nodes: &[OrdererNode], alive: &[usize], after_term: u64) -> (usize, u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leader = alive
            .iter()
            .filter_map(|&index| nodes[index].led_in_term().map(|term| (index, term)))
            .filter(|(index, term)| {
                *term > after_term && !nodes[*index].lost_leadership_after(*term)
            })
            .max_by_key(|(_, term)| *term);
        if let Some(leader) = leader {
            return leader;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no raft leader elected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_raft_cluster_survives_a_killed_leader_and_the_node_catches_up() {
    // Goal: three `weft orderer start` processes order an etcdraft
    // channel. Under a steady broadcast load on every node (followers
    // forward to the leader), the leader is killed with SIGKILL; another
    // takes over, every transaction answered SUCCESS is in the chain
    // exactly once, and the survivors' blocks have the same header
    // hashes. Restarted, the killed node catches up (its log was
    // compacted past on the others: it pulls blocks for a snapshot) to
    // the same hashes, and orders again.
    survive_a_killed_leader(Network::with_batch_timeout("100ms")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_raft_node_whose_disk_turns_read_only_stops_while_the_others_order_on() {
    // Goal (issue 21, a disk fault on the ordering side): one of three
    // Raft orderers keeps its data on a disk that turns read-only under
    // load. That node stops its channel, says why on /healthz naming the
    // path, and refuses Broadcast as SERVICE_UNAVAILABLE; the two others
    // go on ordering; every transaction any node answered SUCCESS is in
    // their chain exactly once. Once the disk is checked and mounted
    // again, the restarted node catches up to the same chain.
    const FAULTED: usize = 2;
    let network = Network::with_batch_timeout("100ms");
    let transactor = Arc::new(network.transactor());
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, genesis) = raft_cluster(&network, dir.path());
    let data = dir.path().join(format!("data{FAULTED}"));
    let disk = failing_disk::Ext4Disk::create(&dir.path().join("disk.img"), &data);
    for node in &mut nodes {
        node.spawn();
    }
    wait_for_leader(&nodes, &[0, 1, 2], 0).await;
    let loads = Loads::start(&transactor, &nodes, "node").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    disk.fail();

    let operations = nodes[FAULTED].operations().await;
    let health = health_once(
        &operations,
        503,
        Duration::from_secs(30),
        "the node stayed healthy on a read-only disk",
    )
    .await;
    // The first write to fail meets a read-only filesystem, or a sync
    // an I/O error.
    assert!(
        health.contains("consenter/orders")
            && (health.contains("Read-only file system") || health.contains("Input/output error"))
            && health.contains(&disk.path().display().to_string()),
        "/healthz does not say why and where: {health}"
    );
    let (_, envelope) = transactor.transaction("after-the-fault");
    let answer = nodes[FAULTED].broadcast_one(envelope).await;
    assert_eq!(
        answer.status,
        Status::ServiceUnavailable as i32,
        "{answer:?}"
    );

    // The two others order on.
    let (leader, _) = wait_for_leader(&nodes, &[0, 1], 0).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let succeeded = loads.stop().await;
    let reader = &network.orderer.clone_signer();
    let height = height_of(&nodes[leader], reader).await;
    let chains = [
        blocks_of(&nodes[0], reader, height).await,
        blocks_of(&nodes[1], reader, height).await,
    ];
    check_same_chain(&chains, &genesis, &succeeded);

    // Checked and mounted again, the disk holds what the node needs to
    // catch up to the same chain. Unless the filesystem lost writes the
    // node had synced (ext4 can drop the last of them when its journal
    // aborts): then the node finds its log lacks entries it acknowledged,
    // says so, and orders nothing, rather than vote on that log.
    nodes[FAULTED].kill();
    disk.repair();
    nodes[FAULTED].spawn();
    let operations = nodes[FAULTED].operations().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let caught_up = tokio::time::timeout(
            Duration::from_secs(2),
            try_height_of(&nodes[FAULTED], reader),
        )
        .await
        .is_ok_and(|caught_up| caught_up.is_some_and(|caught_up| caught_up >= height));
        if caught_up {
            let repaired = blocks_of(&nodes[FAULTED], reader, height).await;
            assert_eq!(hashes(&repaired), hashes(&chains[0]));
            break;
        }
        let (status, health) = http_get(&operations, "/healthz").await;
        if status == 503 {
            assert!(
                health.contains("this node's raft log lost entries it had acknowledged"),
                "the repaired node stopped for another reason: {health}"
            );
            let (_, envelope) = transactor.transaction("on-a-lost-log");
            let answer = nodes[FAULTED].broadcast_one(envelope).await;
            assert_eq!(
                answer.status,
                Status::ServiceUnavailable as i32,
                "{answer:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the repaired node neither caught up nor said why not: {health}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_raft_stream_channel_survives_a_killed_leader_with_the_same_checkpoints() {
    // Goal: the same under stream mode (a checkpoint every 50
    // transactions or 100 ms): nothing answered SUCCESS is lost or
    // ordered twice, and every node's chain has its checkpoints (signed
    // blocks) at the same block numbers.
    survive_a_killed_leader(Network::streaming(50, "100ms")).await;
}

async fn survive_a_killed_leader(network: Network) {
    let streams = network.stream.is_some();
    let transactor = Arc::new(network.transactor());
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, genesis) = raft_cluster(&network, dir.path());
    for node in &mut nodes {
        node.spawn();
    }
    let (leader, term) = wait_for_leader(&nodes, &[0, 1, 2], 0).await;

    // A steady load on every node, the leader included.
    let loads = Loads::start(&transactor, &nodes, "node").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    nodes[leader].kill();
    let survivors: Vec<usize> = (0..3).filter(|&index| index != leader).collect();
    let (new_leader, _) = wait_for_leader(&nodes, &survivors, term).await;
    assert_ne!(new_leader, leader);
    // Keep the load on under the new leader for a while.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let succeeded = loads.stop().await;

    // The survivors agree on every block.
    let reader = &network.orderer.clone_signer();
    let height = height_of(&nodes[new_leader], reader).await;
    let chains = [
        blocks_of(&nodes[survivors[0]], reader, height).await,
        blocks_of(&nodes[survivors[1]], reader, height).await,
    ];
    check_same_chain(&chains, &genesis, &succeeded);

    // Their metrics say who leads, and that both answered broadcasts (the
    // follower by forwarding to the leader).
    for &index in &survivors {
        let metrics = nodes[index].metrics().await;
        let value = |series: &str| {
            metric_value(&metrics, series).unwrap_or_else(|| panic!("{series} in\n{metrics}"))
        };
        let leads = if index == new_leader { 1.0 } else { 0.0 };
        assert_eq!(
            value(r#"consensus_etcdraft_is_leader{channel="orders"}"#),
            leads
        );
        assert_eq!(
            value(r#"consensus_etcdraft_leader_id{channel="orders"}"#),
            (new_leader + 1) as f64
        );
        assert!(value(r#"consensus_etcdraft_term{channel="orders"}"#) > term as f64);
        assert!(value(r#"consensus_etcdraft_commit_index{channel="orders"}"#) >= height as f64);
        assert!(value(r#"ledger_blockchain_height{channel="orders"}"#) >= height as f64);
        assert!(
            value(r#"broadcast_processed_seconds_count{channel="orders",status="SUCCESS"}"#) > 0.0
        );
    }

    // The killed node comes back and catches up.
    nodes[leader].spawn();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if tokio::time::timeout(
            Duration::from_secs(2),
            try_height_of(&nodes[leader], reader),
        )
        .await
        .is_ok_and(|caught_up| caught_up.is_some_and(|caught_up| caught_up >= height))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restarted node did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let restarted = blocks_of(&nodes[leader], reader, height).await;
    assert_eq!(hashes(&restarted), hashes(&chains[0]));
    let pulled = nodes[leader]
        .log
        .lock()
        .unwrap()
        .iter()
        .any(|line| line.contains("pulled blocks to catch up with a snapshot"));
    assert!(pulled, "the restarted node caught up from a snapshot");

    // It orders again: a transaction sent to it (forwarded to the
    // leader) reaches every node.
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "after", 0);
    let mut client = nodes[leader].client().await;
    let mut answer = Vec::new();
    for _ in 0..50 {
        answer = broadcast(
            &mut client,
            &[(envelope.clone(), Expected::ordered(tx_id.clone(), false))],
        )
        .await;
        if answer[0].0 == Status::Success {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(answer[0].0, Status::Success, "{answer:?}");
    let (leader_now, _) = wait_for_leader(&nodes, &[0, 1, 2], 0).await;
    let height = height_of(&nodes[leader_now], reader).await;
    let chains = [
        blocks_of(&nodes[0], reader, height).await,
        blocks_of(&nodes[1], reader, height).await,
        blocks_of(&nodes[2], reader, height).await,
    ];
    assert_eq!(hashes(&chains[0]), hashes(&chains[1]));
    assert_eq!(hashes(&chains[0]), hashes(&chains[2]));
    let checkpoints = |blocks: &[Block]| -> Vec<u64> {
        blocks
            .iter()
            .filter(|block| weft_protos::block::signature_count(block) > 0)
            .map(|block| block.header.as_ref().unwrap().number)
            .collect()
    };
    assert_eq!(checkpoints(&chains[0]), checkpoints(&chains[1]));
    assert_eq!(checkpoints(&chains[0]), checkpoints(&chains[2]));
    if streams {
        assert!(
            checkpoints(&chains[0]).len() < chains[0].len() - 1,
            "a stream channel leaves blocks between checkpoints unsigned"
        );
    } else {
        assert_eq!(checkpoints(&chains[0]).len(), chains[0].len() - 1);
    }
    let found = chains[0]
        .iter()
        .skip(1)
        .flat_map(|block| block.data.as_ref().unwrap().data.iter())
        .filter(|envelope| tx_id_of(envelope) == tx_id)
        .count();
    assert_eq!(found, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_leader_broadcast_is_unavailable_and_followers_forward_to_the_leader() {
    // Goal: one node of three cannot elect a leader, so it answers
    // SERVICE_UNAVAILABLE and orders nothing (it stays healthy: waiting
    // for peers is not a failure). Once a second node runs, a leader is
    // elected; a transaction sent to the follower is forwarded, answered
    // SUCCESS and written by both nodes in the same block.
    let mut network = Network::with_batch_timeout("100ms");
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, genesis) = raft_cluster(&network, dir.path());
    network.genesis = genesis;
    nodes[0].spawn();
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "alone", 0);
    let mut client = None;
    for _ in 0..100 {
        if let Ok(channel) =
            tonic::transport::Endpoint::from_shared(format!("http://{}", nodes[0].grpc))
                .unwrap()
                .connect()
                .await
        {
            client = Some(AtomicBroadcastClient::new(channel));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut client = client.expect("the node serves");
    // Several election timeouts (10 ticks of 50 ms) pass without a leader.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answer = broadcast(
        &mut client,
        &[(
            envelope,
            Expected::refused(
                "an envelope with no leader",
                Status::ServiceUnavailable,
                Some(tx_id),
            ),
        )],
    )
    .await;
    assert_eq!(answer[0].0, Status::ServiceUnavailable, "{answer:?}");
    assert!(answer[0].1.contains("no Raft leader"), "{answer:?}");
    let reader = &network.orderer.clone_signer();
    assert_eq!(height_of(&nodes[0], reader).await, 1);
    let ready = nodes[0].ready.lock().unwrap().clone().unwrap();
    let (status, health) = http_get(&address_in(&ready, "operations "), "/healthz").await;
    assert_eq!(status, 200, "{health}");
    let metrics = nodes[0].metrics().await;
    assert_eq!(
        metric_value(
            &metrics,
            r#"consensus_etcdraft_leader_id{channel="orders"}"#
        ),
        Some(0.0),
        "{metrics}"
    );

    nodes[1].spawn();
    let (leader, _) = wait_for_leader(&nodes, &[0, 1], 0).await;
    let follower = 1 - leader;
    let mut client = nodes[follower].client().await;
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "forwarded", 0);
    let mut answer = Vec::new();
    // The follower may not know the new leader yet for a moment.
    for _ in 0..50 {
        answer = broadcast(
            &mut client,
            &[(envelope.clone(), Expected::ordered(tx_id.clone(), false))],
        )
        .await;
        if answer[0].0 != Status::ServiceUnavailable {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answer[0].0, Status::Success, "{answer:?}");
    let chains = [
        blocks_of(&nodes[0], reader, 2).await,
        blocks_of(&nodes[1], reader, 2).await,
    ];
    assert_eq!(chains[0][1].header, chains[1][1].header);
    assert_eq!(chains[0][1].data, chains[1][1].data);
    let data = &chains[0][1].data.as_ref().unwrap().data;
    assert_eq!(data.len(), 1);
    assert_eq!(tx_id_of(&data[0]), tx_id);
    // Each orderer signed its own copy.
    assert_ne!(chains[0][1].metadata, chains[1][1].metadata);

    // A config update sent to the follower is ordered alone, and both
    // nodes cut the next blocks by the new MaxMessageCount.
    batch_size_3_then_7_transactions(&network, &mut client).await;
    let height = height_of(&nodes[leader], reader).await;
    let chains = [
        blocks_of(&nodes[0], reader, height).await,
        blocks_of(&nodes[1], reader, height).await,
    ];
    let headers =
        |blocks: &[Block]| -> Vec<_> { blocks.iter().map(|block| block.header.clone()).collect() };
    assert_eq!(headers(&chains[0]), headers(&chains[1]));
    let config_block = &chains[0][2];
    assert_eq!(config_block.data.as_ref().unwrap().data.len(), 1);
    assert!(weft_protos::block::config_of_block(config_block).is_some());
    let after: Vec<usize> = chains[0][3..]
        .iter()
        .map(|block| block.data.as_ref().unwrap().data.len())
        .collect();
    assert_eq!(after.iter().sum::<usize>(), 7, "{after:?}");
    assert!(after.iter().all(|&count| count <= 3), "{after:?}");
}

#[test]
fn a_bad_orderer_config_names_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("orderer.yaml");
    let good = "orderer:\n  id: o\n  listenAddress: 127.0.0.1:0\n  localMspId: OrdererMSP\n  \
                mspConfigPath: msp\n  fileSystemPath: data\n";
    let cases = [
        (format!("{good}colour: blue\n"), "unknown field `colour`"),
        (good.replace("  id: o\n", ""), "orderer: missing field `id`"),
        (
            good.replace("127.0.0.1:0", "nowhere"),
            "orderer.listenAddress",
        ),
        (
            format!("{good}ledger:\n  durability: sometimes\n"),
            "ledger.durability: unknown variant `sometimes`",
        ),
        (
            format!("{good}ledger:\n  groupCommitInterval: soon\n"),
            "ledger.groupCommitInterval",
        ),
        (
            format!("{good}consensus:\n  type: kafka\n"),
            "consensus.type: unknown variant `kafka`",
        ),
        (good.to_owned(), "orderer.mspConfigPath"),
        (
            format!("{good}channels:\n  - genesisBlock: missing.block\n"),
            "channels[0].genesisBlock",
        ),
        // Past the MSP check from here on.
        (
            format!("{good}  keepalive:\n    timeout: 0s\n"),
            "orderer.keepalive.timeout: must be more than zero",
        ),
        (
            format!("{good}  limits:\n    broadcastIdleTimeout: soon\n"),
            "orderer.limits.broadcastIdleTimeout",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(&config, &text).unwrap();
        if expected == "channels[0].genesisBlock" {
            // Past the MSP check, to reach the channel list.
            let org = TestOrg::new("OrdererMSP");
            let identity = org.identity(NodeRole::Orderer);
            for (folder, file, pem) in [
                ("signcerts", "cert.pem", &identity.certificate_pem),
                ("keystore", "key_sk", &identity.key_pem),
            ] {
                std::fs::create_dir_all(dir.path().join("msp").join(folder)).unwrap();
                std::fs::write(dir.path().join("msp").join(folder).join(file), pem).unwrap();
            }
        }
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["orderer", "start", "--config", config.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{expected}: started");
        assert!(stderr.contains("orderer.yaml"), "file not named: {stderr}");
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_updates_change_the_batch_size_and_add_an_organisation() {
    // Goal: CONFIG_UPDATE envelopes signed as the mod policies require
    // become config blocks of their own; the new batch size applies to the
    // blocks after it, a new organisation's clients may write, a peer
    // commits the config blocks, and a restart keeps the new config.
    // Updates that are unsigned or stale are refused.
    let network = Network::new();
    let org3 = TestOrg::new("Org3MSP");
    let client3 = org3.signer(NodeRole::Client);
    let orderer_admin = network.orderer_org.signer(NodeRole::Admin);
    let admins = [
        network.org1.signer(NodeRole::Admin),
        network.org2.signer(NodeRole::Admin),
    ];
    let data = tempfile::tempdir().unwrap();
    let orderer = start(&network, data.path(), vec![network.genesis.clone()]).await;
    let mut client = connect(&orderer).await;

    let (tx_id, early) = network.transaction(CHANNEL, &client3, "org3-early", 0);
    let responses = broadcast(
        &mut client,
        &[(
            early,
            Expected::refused("org3 before", Status::Forbidden, Some(tx_id)),
        )],
    )
    .await;
    assert_eq!(responses[0].0, Status::Forbidden);

    let current = network.config();
    let batch_update = batch_size_update(&current, 3);
    let add_org3 = add_organisation_update(
        &current,
        org_group(
            &org3,
            &[
                ("Readers", "OR('Org3MSP.member')".to_owned()),
                ("Writers", "OR('Org3MSP.client')".to_owned()),
                ("Admins", "OR('Org3MSP.admin')".to_owned()),
                ("Endorsement", "OR('Org3MSP.peer')".to_owned()),
            ],
        ),
    );
    let refused = [
        (
            config_update_envelope(&batch_update, &[], &orderer_admin),
            Expected::refused("an unsigned batch size update", Status::Forbidden, None),
        ),
        (
            config_update_envelope(&batch_update, &[&admins[0]], &orderer_admin),
            Expected::refused(
                "a batch size update signed by the wrong admin",
                Status::Forbidden,
                None,
            ),
        ),
        (
            config_update_envelope(&add_org3, &[&admins[0]], &admins[0]),
            Expected::refused(
                "an organisation added by one of two admins",
                Status::Forbidden,
                None,
            ),
        ),
    ];
    for (envelope, expected) in refused {
        let responses = broadcast(&mut client, &[(envelope, expected.clone())]).await;
        assert_eq!(
            responses[0].0, expected.status,
            "{}: {}",
            expected.what, responses[0].1
        );
    }
    // Both valid updates on one stream: both are checked against the
    // genesis config, so the second is processed again once the first is
    // ordered (its read set still holds).
    let accepted = [
        (
            config_update_envelope(&batch_update, &[&orderer_admin], &orderer_admin),
            Expected::ordered("batch size".to_owned(), false),
        ),
        (
            config_update_envelope(&add_org3, &[&admins[0], &admins[1]], &admins[0]),
            Expected::ordered("Org3MSP".to_owned(), false),
        ),
    ];
    let responses = broadcast(&mut client, &accepted).await;
    assert!(
        responses
            .iter()
            .all(|(status, _)| *status == Status::Success),
        "{responses:?}"
    );
    // The same batch size update again, once both config blocks are
    // written: its read set is stale against the config in force. (Sent
    // before then, it would pass the broadcast check and be dropped only
    // when re-validated at ordering, as in Fabric.)
    deliver_until(&mut client, &network.org1_peer, 1, 2).await;
    let stale = config_update_envelope(&batch_update, &[&orderer_admin], &orderer_admin);
    let responses = broadcast(
        &mut client,
        &[(stale, Expected::refused("stale", Status::BadRequest, None))],
    )
    .await;
    assert_eq!(responses[0].0, Status::BadRequest, "{}", responses[0].1);

    // Org3's members may transact once its config block is written (a
    // Broadcast is checked against the configuration in force, as in
    // Fabric).
    let mut txs: Vec<(Envelope, Expected)> = (0..7)
        .map(|index| {
            let (tx_id, envelope) =
                network.transaction(CHANNEL, &network.client1, &format!("small-{index}"), 0);
            (envelope, Expected::ordered(tx_id, false))
        })
        .collect();
    let (tx_id, envelope) = network.transaction(CHANNEL, &client3, "org3", 0);
    txs.push((envelope, Expected::ordered(tx_id, false)));
    let responses = broadcast(&mut client, &txs).await;
    assert!(
        responses
            .iter()
            .all(|(status, _)| *status == Status::Success),
        "{responses:?}"
    );

    // Blocks 1 and 2 are the config blocks, alone; then blocks of at most 3.
    let blocks = deliver_until(&mut client, &network.org1_peer, 1, 2 + txs.len()).await;
    let counts: Vec<usize> = blocks
        .iter()
        .map(|block| block.data.as_ref().unwrap().data.len())
        .collect();
    assert_eq!(counts[..2], [1, 1]);
    assert!(counts[2..].iter().all(|count| *count <= 3), "{counts:?}");
    let last_configs: Vec<Option<u64>> = blocks
        .iter()
        .map(weft_protos::block::last_config_index)
        .collect();
    assert_eq!(last_configs[..2], [Some(1), Some(2)]);
    assert!(last_configs[2..].iter().all(|index| *index == Some(2)));

    let peer_dir = tempfile::tempdir().unwrap();
    let mut committer = committer(&network, peer_dir.path());
    for block in &blocks {
        let committed = committer.commit(block.clone(), weft_msp::now()).unwrap();
        assert!(
            committed
                .codes
                .iter()
                .all(|code| *code == TxValidationCode::Valid),
            "block {}: {:?}",
            committed.number,
            committed.codes
        );
        assert_eq!(committed.reconfigured, committed.number <= 2);
    }

    // After a restart the channel runs with the last config.
    drop(client);
    orderer.shutdown().await.unwrap();
    let orderer = start(&network, data.path(), Vec::new()).await;
    let mut client = connect(&orderer).await;
    let height = orderer.height(CHANNEL).unwrap();
    let txs: Vec<(Envelope, Expected)> = (0..4)
        .map(|index| {
            let (tx_id, envelope) =
                network.transaction(CHANNEL, &client3, &format!("org3-after-{index}"), 0);
            (envelope, Expected::ordered(tx_id, false))
        })
        .collect();
    let responses = broadcast(&mut client, &txs).await;
    assert!(
        responses
            .iter()
            .all(|(status, _)| *status == Status::Success),
        "{responses:?}"
    );
    let after = deliver_until(&mut client, &network.org1_peer, height, txs.len()).await;
    assert!(
        after
            .iter()
            .all(|block| block.data.as_ref().unwrap().data.len() <= 3)
    );
    assert!(
        after
            .iter()
            .all(|block| weft_protos::block::last_config_index(block) == Some(2))
    );
    drop(client);
    orderer.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deliver_request_ends_forbidden_once_its_reader_expires_or_loses_access() {
    // Goal: as Fabric's Deliver does, the orderer checks a waiting
    // reader's access again before each block: a reader whose certificate
    // has expired since it asked, and one that a config update took the
    // right to read from, get FORBIDDEN instead of the next block, while a
    // reader that may still read gets every block.
    let network = Network::new();
    let data = tempfile::tempdir().unwrap();
    let orderer = start(&network, data.path(), vec![network.genesis.clone()]).await;
    let mut client = connect(&orderer).await;
    let height = orderer.height(CHANNEL).unwrap();

    let expires_at = weft_msp::now() + 4;
    let short_lived = network
        .org2
        .issue(
            "short-lived",
            &["client"],
            weft_msp::testing::IssueOptions {
                not_after: Some(expires_at),
                ..Default::default()
            },
        )
        .signer();
    let from_next = |reader: &Signer| from_block(reader, height);
    let open = |request: Envelope| {
        let mut client = client.clone();
        async move {
            client
                .deliver(tokio_stream::iter(vec![request]))
                .await
                .unwrap()
                .into_inner()
        }
    };
    // The expiring reader asks from the last block, which it is sent
    // while its certificate is valid: it was admitted.
    let mut expiring = open(from_block(&short_lived, height - 1)).await;
    let mut revoked = open(from_next(&network.client2)).await;
    let mut kept = open(from_next(&network.client1)).await;
    let first = tokio::time::timeout(DELIVER_TIME_MAX, expiring.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(&first.r#type, Some(Delivered::Block(block)) if block.header.as_ref().unwrap().number == height - 1),
        "{first:?}"
    );

    // Past the certificate's expiry, a transaction makes the next block.
    while weft_msp::now() <= expires_at {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "after-expiry", 0);
    let responses = broadcast(&mut client, &[(envelope, Expected::ordered(tx_id, false))]).await;
    assert_eq!(responses[0].0, Status::Success, "{}", responses[0].1);
    let (blocks, status) = until_status(&mut expiring).await;
    assert_eq!(status, Some(Status::Forbidden), "the expired reader");
    assert!(
        blocks.is_empty(),
        "the expired reader got blocks {blocks:?}"
    );

    // Org2's Readers policy now names Org1's members only: Org2's client
    // reads nothing after the config block that says so.
    let org2_admin = network.org2.signer(NodeRole::Admin);
    let update = org_readers_update(&network.config(), "Org2MSP", "OR('Org1MSP.member')");
    let responses = broadcast(
        &mut client,
        &[(
            config_update_envelope(&update, &[&org2_admin], &org2_admin),
            Expected::ordered("Org2MSP readers".to_owned(), false),
        )],
    )
    .await;
    assert_eq!(responses[0].0, Status::Success, "{}", responses[0].1);
    let (tx_id, envelope) = network.transaction(CHANNEL, &network.client1, "after-update", 0);
    let responses = broadcast(&mut client, &[(envelope, Expected::ordered(tx_id, false))]).await;
    assert_eq!(responses[0].0, Status::Success, "{}", responses[0].1);
    let (blocks, status) = until_status(&mut revoked).await;
    assert_eq!(status, Some(Status::Forbidden), "the revoked reader");
    // The block before the update, and not the config block: as on
    // Fabric, a config is in force before its block can be read.
    assert_eq!(blocks, [height], "the revoked reader's blocks");

    // Org1's client reads all three blocks and waits for more.
    let read_three = async {
        let mut blocks = Vec::new();
        while blocks.len() < 3 {
            match kept.message().await.unwrap().unwrap().r#type.unwrap() {
                Delivered::Block(block) => blocks.push(block),
                Delivered::Status(status) => panic!("the kept reader's request ended: {status}"),
            }
        }
        blocks
    };
    let blocks = tokio::time::timeout(DELIVER_TIME_MAX, read_three)
        .await
        .unwrap();
    let numbers: Vec<u64> = blocks
        .iter()
        .map(|b| b.header.as_ref().unwrap().number)
        .collect();
    assert_eq!(numbers, [height, height + 1, height + 2]);
    drop(client);
    orderer.shutdown().await.unwrap();

    // A peer's Deliver does the same when it commits the config block:
    // Org2's client, waiting there from block 1, gets FORBIDDEN.
    let peer_dir = tempfile::tempdir().unwrap();
    let mut peer = committer(&network, peer_dir.path());
    let channels = weft_peer_committer::Channels::default();
    channels.insert(CHANNEL, peer.handle());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(DeliverServer::new(
                weft_peer_committer::DeliverService::new(channels),
            ))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let connection = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut at_peer = DeliverClient::new(connection)
        .deliver(tokio_stream::iter(vec![from_block(&network.client2, 1)]))
        .await
        .unwrap()
        .into_inner();
    // Block 1 is committed and read before the config block commits, so
    // the request was admitted under the old config.
    let mut blocks = blocks.into_iter();
    peer.commit(blocks.next().unwrap(), weft_msp::now())
        .unwrap();
    let first = tokio::time::timeout(DELIVER_TIME_MAX, at_peer.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(&first.r#type, Some(PeerDelivered::Block(block)) if block.header.as_ref().unwrap().number == 1),
        "{first:?}"
    );
    for block in blocks {
        peer.commit(block, weft_msp::now()).unwrap();
    }
    let read = async {
        let mut numbers = vec![1];
        while let Some(response) = at_peer.message().await.unwrap() {
            match response.r#type.unwrap() {
                PeerDelivered::Block(block) => numbers.push(block.header.unwrap().number),
                PeerDelivered::Status(status) => {
                    return (numbers, Status::try_from(status).unwrap());
                }
                other => panic!("{other:?}"),
            }
        }
        panic!("the peer ended the stream without a status")
    };
    let (numbers, status) = tokio::time::timeout(DELIVER_TIME_MAX, read).await.unwrap();
    assert_eq!(status, Status::Forbidden, "the revoked reader at the peer");
    assert_eq!(numbers, [1], "the revoked reader's blocks from the peer");
}

/// A request by `reader` for every block from `start` on, waiting for them.
fn from_block(reader: &Signer, start: u64) -> Envelope {
    seek_envelope(
        CHANNEL,
        reader,
        Position::Specified(SeekSpecified { number: start }),
        Position::Specified(SeekSpecified { number: u64::MAX }),
        SeekBehavior::BlockUntilReady,
    )
}

/// The numbers of the blocks a Deliver stream sends until its status (or
/// its end: `None`).
async fn until_status(
    stream: &mut tonic::Streaming<weft_protos::orderer::DeliverResponse>,
) -> (Vec<u64>, Option<Status>) {
    let read = async {
        let mut numbers = Vec::new();
        while let Some(response) = stream.message().await.unwrap() {
            match response.r#type.unwrap() {
                Delivered::Block(block) => numbers.push(block.header.unwrap().number),
                Delivered::Status(status) => {
                    return (numbers, Some(Status::try_from(status).unwrap()));
                }
            }
        }
        (numbers, None)
    };
    tokio::time::timeout(DELIVER_TIME_MAX, read).await.unwrap()
}

/// A config update setting MaxMessageCount, computed as configtxlator
/// computes it: the orderer group read at its version, BatchSize written
/// at the next.
/// Sends `client`'s orderer a config update that sets MaxMessageCount to
/// 3, signed by the orderer organisation's admin, then 7 transactions;
/// every one must be answered SUCCESS.
async fn batch_size_3_then_7_transactions(
    network: &Network,
    client: &mut AtomicBroadcastClient<Channel>,
) {
    let orderer_admin = network.orderer_org.signer(NodeRole::Admin);
    let update = config_update_envelope(
        &batch_size_update(&network.config(), 3),
        &[&orderer_admin],
        &orderer_admin,
    );
    let expected = Expected::ordered("batch size".to_owned(), false);
    let answer = broadcast(client, &[(update, expected)]).await;
    assert_eq!(answer[0].0, Status::Success, "{answer:?}");
    let transactions: Vec<(Envelope, Expected)> = (0..7)
        .map(|i| {
            let (tx_id, envelope) =
                network.transaction(CHANNEL, &network.client1, &format!("after-{i}"), 0);
            (envelope, Expected::ordered(tx_id, false))
        })
        .collect();
    let answers = broadcast(client, &transactions).await;
    assert!(
        answers.iter().all(|(status, _)| *status == Status::Success),
        "{answers:?}"
    );
}

fn batch_size_update(current: &Config, count: u32) -> ConfigUpdate {
    let root = current.channel_group.as_ref().unwrap();
    let orderer = &root.groups["Orderer"];
    let mut batch_size = orderer.values["BatchSize"].clone();
    let mut value = BatchSize::decode(batch_size.value.clone()).unwrap();
    value.max_message_count = count;
    batch_size.value = value.encode_to_vec().into();
    batch_size.version += 1;
    let stub = |group: &ConfigGroup| ConfigGroup {
        version: group.version,
        ..ConfigGroup::default()
    };
    let mut read_orderer = stub(orderer);
    read_orderer.version = orderer.version;
    let mut write_orderer = stub(orderer);
    write_orderer
        .values
        .insert("BatchSize".to_owned(), batch_size);
    ConfigUpdate {
        channel_id: CHANNEL.to_owned(),
        read_set: Some(ConfigGroup {
            groups: BTreeMap::from([("Orderer".to_owned(), read_orderer)]),
            ..stub(root)
        }),
        write_set: Some(ConfigGroup {
            groups: BTreeMap::from([("Orderer".to_owned(), write_orderer)]),
            ..stub(root)
        }),
        isolated_data: BTreeMap::new(),
    }
}

/// A config update adding `organisation` to the Application group: the
/// group's members read at their versions, the group written at its next
/// version with the new organisation.
fn add_organisation_update(current: &Config, organisation: ConfigGroup) -> ConfigUpdate {
    let root = current.channel_group.as_ref().unwrap();
    let application = root.groups["Application"].clone();
    let mut written = application.clone();
    written.version += 1;
    written.groups.insert("Org3MSP".to_owned(), organisation);
    let stub = ConfigGroup {
        version: root.version,
        ..ConfigGroup::default()
    };
    ConfigUpdate {
        channel_id: CHANNEL.to_owned(),
        read_set: Some(ConfigGroup {
            groups: BTreeMap::from([("Application".to_owned(), application)]),
            ..stub.clone()
        }),
        write_set: Some(ConfigGroup {
            groups: BTreeMap::from([("Application".to_owned(), written)]),
            ..stub
        }),
        isolated_data: BTreeMap::new(),
    }
}

/// A config update setting organisation `org`'s Readers policy to `rule`:
/// the Application group and the organisation read at their versions, the
/// policy written at its next.
fn org_readers_update(current: &Config, org: &str, rule: &str) -> ConfigUpdate {
    let root = current.channel_group.as_ref().unwrap();
    let application = &root.groups["Application"];
    let group = &application.groups[org];
    let mut readers = group.policies["Readers"].clone();
    readers.version += 1;
    readers.policy = Some(Policy {
        r#type: PolicyType::Signature as i32,
        value: weft_policy::dsl::parse(rule)
            .unwrap()
            .encode_to_vec()
            .into(),
    });
    let stub = |group: &ConfigGroup| ConfigGroup {
        version: group.version,
        ..ConfigGroup::default()
    };
    let nest = |org_group: ConfigGroup| ConfigGroup {
        groups: BTreeMap::from([(
            "Application".to_owned(),
            ConfigGroup {
                groups: BTreeMap::from([(org.to_owned(), org_group)]),
                ..stub(application)
            },
        )]),
        ..stub(root)
    };
    let mut written = stub(group);
    written.policies.insert("Readers".to_owned(), readers);
    ConfigUpdate {
        channel_id: CHANNEL.to_owned(),
        read_set: Some(nest(stub(group))),
        write_set: Some(nest(written)),
        isolated_data: BTreeMap::new(),
    }
}

/// A CONFIG_UPDATE envelope carrying `update` with the signatures of
/// `signers`, submitted by `submitter`.
fn config_update_envelope(
    update: &ConfigUpdate,
    signers: &[&Signer],
    submitter: &Signer,
) -> Envelope {
    let config_update: Bytes = update.encode_to_vec().into();
    let signatures = signers
        .iter()
        .map(|signer| {
            let signature_header: Bytes = SignatureHeader {
                creator: signer.serialized_identity().clone(),
                nonce: Bytes::from(fresh_nonce()),
            }
            .encode_to_vec()
            .into();
            let mut signed = signature_header.to_vec();
            signed.extend_from_slice(&config_update);
            ConfigSignature {
                signature: Signer::sign(signer, &signed).unwrap().into(),
                signature_header,
            }
        })
        .collect();
    let envelope = ConfigUpdateEnvelope {
        config_update,
        signatures,
    };
    signed_envelope(
        CHANNEL,
        HeaderType::ConfigUpdate,
        envelope.encode_to_vec().into(),
        submitter,
    )
}

// ---------------------------------------------------------------------------
// Broadcast and Deliver clients.
// ---------------------------------------------------------------------------

/// What the orderer must answer to an envelope.
#[derive(Debug, Clone)]
struct Expected {
    what: String,
    status: Status,
    tx_id: Option<String>,
    /// Over PreferredMaxBytes: must be alone in its block.
    alone: bool,
}

impl Expected {
    fn ordered(tx_id: String, alone: bool) -> Self {
        Self {
            what: format!("good transaction {tx_id}"),
            status: Status::Success,
            tx_id: Some(tx_id),
            alone,
        }
    }

    fn refused(what: &str, status: Status, tx_id: Option<String>) -> Self {
        Self {
            what: what.to_owned(),
            status,
            tx_id,
            alone: false,
        }
    }
}

fn node_config(dir: &std::path::Path) -> NodeConfig {
    let mut config = NodeConfig::new(dir);
    config.durability = Durability::None;
    config
}

async fn start(network: &Network, dir: &std::path::Path, genesis: Vec<Block>) -> Orderer {
    start_with(network, node_config(dir), genesis).await
}

/// An orderer of `network` with `config`, on a free loopback port.
async fn start_with(network: &Network, config: NodeConfig, genesis: Vec<Block>) -> Orderer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    Orderer::start(config, network.orderer.clone_signer(), genesis, listener)
        .await
        .unwrap()
}

/// A connection to `orderer`'s gRPC endpoint.
async fn channel_to(orderer: &Orderer) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", orderer.local_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn connect(orderer: &Orderer) -> AtomicBroadcastClient<Channel> {
    AtomicBroadcastClient::new(channel_to(orderer).await)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20)
}

/// Requests the orderer cannot read end a Broadcast or Deliver stream with a gRPC
/// status saying why, after the answers to the envelopes before them (as
/// Fabric's gRPC server does): bytes that are not an `Envelope` get
/// INTERNAL, a request over the size limit RESOURCE_EXHAUSTED. Nothing of
/// them is ordered.
async fn check_unreadable_broadcasts(orderer: &Orderer, network: &Network) {
    let height = orderer.height(CHANNEL).unwrap();
    let (_, good) = network.transaction(CHANNEL, &network.client1, "before-garbage", 0);
    // Field 1 with wire type 7, which no protobuf message has.
    let garbage = Bytes::from_static(&[0x0f, 0xff, 0xff]);
    let (answers, end) = raw_call(
        orderer,
        BROADCAST,
        vec![good.encode_to_vec().into(), garbage.clone()],
    )
    .await;
    let statuses: Vec<i32> = answers
        .into_iter()
        .map(|answer| BroadcastResponse::decode(answer).unwrap().status)
        .collect();
    assert_eq!(statuses, [Status::Success as i32]);
    let end = end.expect("the stream ends with a status");
    assert_eq!(end.code(), tonic::Code::Internal, "{end:?}");
    assert!(end.message().contains("not an Envelope"), "{end:?}");

    let oversized = Bytes::from(vec![0u8; (100 << 20) + 1024]);
    let (answers, end) = raw_call(orderer, BROADCAST, vec![oversized]).await;
    assert!(answers.is_empty());
    let end = end.expect("the stream ends with a status");
    assert_eq!(end.code(), tonic::Code::ResourceExhausted, "{end:?}");
    assert!(end.message().contains("too large"), "{end:?}");
    // Deliver likewise.
    let (answers, end) = raw_call(orderer, DELIVER, vec![garbage]).await;
    assert!(answers.is_empty());
    let end = end.expect("the stream ends with a status");
    assert_eq!(end.code(), tonic::Code::Internal, "{end:?}");
    assert!(end.message().contains("not an Envelope"), "{end:?}");
    // Only the good envelope was ordered.
    assert!(orderer.height(CHANNEL).unwrap() <= height + 1);
}

const BROADCAST: &str = "/orderer.AtomicBroadcast/Broadcast";
const DELIVER: &str = "/orderer.AtomicBroadcast/Deliver";

/// Sends `requests` as they are, bytes on the wire, on one call of the
/// streaming `method` of `orderer`.
async fn raw_call(
    orderer: &Orderer,
    method: &'static str,
    requests: Vec<Bytes>,
) -> (Vec<Bytes>, Option<tonic::Status>) {
    raw::streaming(channel_to(orderer).await, method, requests).await
}

/// Sends the envelopes on one stream; returns each response's status and
/// info, in order.
async fn broadcast(
    client: &mut AtomicBroadcastClient<Channel>,
    envelopes: &[(Envelope, Expected)],
) -> Vec<(Status, String)> {
    let requests: Vec<Envelope> = envelopes
        .iter()
        .map(|(envelope, _)| envelope.clone())
        .collect();
    let mut responses = client
        .broadcast(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut answers = Vec::new();
    while let Some(response) = responses.message().await.unwrap() {
        answers.push((Status::try_from(response.status).unwrap(), response.info));
    }
    answers
}

/// Reads blocks from `start` on until they carry `transactions`
/// transactions in all.
async fn deliver_until(
    client: &mut AtomicBroadcastClient<Channel>,
    reader: &Signer,
    start: u64,
    transactions: usize,
) -> Vec<Block> {
    let request = seek_envelope(
        CHANNEL,
        reader,
        Position::Specified(SeekSpecified { number: start }),
        Position::Specified(SeekSpecified { number: u64::MAX }),
        SeekBehavior::BlockUntilReady,
    );
    let mut stream = client
        .deliver(tokio_stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner();
    let mut blocks = Vec::new();
    let mut count = 0;
    let read = async {
        while count < transactions {
            match stream.message().await.unwrap().unwrap().r#type.unwrap() {
                Delivered::Block(block) => {
                    if block.header.as_ref().unwrap().number > 0 {
                        count += block.data.as_ref().unwrap().data.len();
                    }
                    blocks.push(block);
                }
                Delivered::Status(status) => panic!("deliver ended early with {status}"),
            }
        }
    };
    tokio::time::timeout(DELIVER_TIME_MAX, read)
        .await
        .expect("the orderer delivers every ordered transaction");
    assert_eq!(count, transactions, "more transactions than were sent");
    blocks
}

/// Sends the requests on one Deliver stream and collects the responses
/// up to as many statuses as requests.
async fn deliver_requests(
    client: &mut AtomicBroadcastClient<Channel>,
    requests: Vec<Envelope>,
) -> Vec<Delivered> {
    let expected_statuses = requests.len();
    let mut stream = client
        .deliver(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut responses = Vec::new();
    let mut statuses = 0;
    while statuses < expected_statuses {
        let response = stream.message().await.unwrap().unwrap().r#type.unwrap();
        if matches!(response, Delivered::Status(_)) {
            statuses += 1;
        }
        responses.push(response);
    }
    responses
}

async fn check_deliver_refusals(
    client: &mut AtomicBroadcastClient<Channel>,
    network: &Network,
    height: u64,
) {
    let status = |status: Status| Delivered::Status(status as i32);
    let oldest = || Position::Oldest(SeekOldest {});
    let specified = |number| Position::Specified(SeekSpecified { number });
    let wait = SeekBehavior::BlockUntilReady;

    // Several requests on one stream, each answered in turn: block 1 and 2,
    // then the newest block alone.
    let responses = deliver_requests(
        client,
        vec![
            seek_envelope(
                CHANNEL,
                &network.org1_peer,
                specified(1),
                specified(2),
                wait,
            ),
            seek_envelope(
                CHANNEL,
                &network.client2,
                Position::Newest(SeekNewest {}),
                Position::Newest(SeekNewest {}),
                wait,
            ),
        ],
    )
    .await;
    let numbers: Vec<Option<u64>> = responses
        .iter()
        .map(|response| match response {
            Delivered::Block(block) => Some(block.header.as_ref().unwrap().number),
            Delivered::Status(_) => None,
        })
        .collect();
    assert_eq!(numbers, [Some(1), Some(2), None, Some(height - 1), None]);
    assert_eq!(responses[2], status(Status::Success));
    assert_eq!(responses[4], status(Status::Success));

    let cases = [
        (
            "an unknown channel",
            seek_envelope("nochannel", &network.org1_peer, oldest(), oldest(), wait),
            Status::NotFound,
        ),
        (
            "a reader of an MSP the channel does not know",
            seek_envelope(CHANNEL, &network.stranger, oldest(), oldest(), wait),
            Status::Forbidden,
        ),
        (
            "a reader whose certificate another CA issued under Org1MSP",
            seek_envelope(CHANNEL, &network.impostor, oldest(), oldest(), wait),
            Status::Forbidden,
        ),
        (
            "a block that does not exist yet, without waiting",
            seek_envelope(
                CHANNEL,
                &network.org1_peer,
                specified(height + 5),
                specified(height + 5),
                SeekBehavior::FailIfNotReady,
            ),
            Status::NotFound,
        ),
        (
            "a stop before the start",
            seek_envelope(
                CHANNEL,
                &network.org1_peer,
                specified(3),
                specified(1),
                wait,
            ),
            Status::BadRequest,
        ),
        (
            "a request made 16 minutes ago (Fabric's window is 15)",
            seek_envelope_at(
                CHANNEL,
                &network.org1_peer,
                [oldest(), oldest()],
                wait,
                Some(weft_msp::now() - 960),
            ),
            Status::BadRequest,
        ),
        (
            "a request without a timestamp",
            seek_envelope_at(
                CHANNEL,
                &network.org1_peer,
                [oldest(), oldest()],
                wait,
                None,
            ),
            Status::BadRequest,
        ),
        (
            "a request that is not a seek",
            Envelope {
                payload: Bytes::from_static(b"\x0a\x03abc"),
                signature: Bytes::new(),
            },
            Status::BadRequest,
        ),
    ];
    for (what, request, expected) in cases {
        let responses = deliver_requests(client, vec![request]).await;
        assert_eq!(responses, [status(expected)], "{what}");
    }

    // As Fabric's handler: a refused request ends its stream, and a request
    // sent after it on the same stream is not answered.
    let refused_then_valid = vec![
        seek_envelope("nochannel", &network.org1_peer, oldest(), oldest(), wait),
        seek_envelope(CHANNEL, &network.org1_peer, oldest(), oldest(), wait),
    ];
    let mut stream = client
        .deliver(tokio_stream::iter(refused_then_valid))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap().r#type.unwrap();
    assert_eq!(first, status(Status::NotFound));
    let after = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("the stream ends after a refusal");
    assert!(
        matches!(after, Ok(None)),
        "nothing follows a refusal on its stream: {after:?}"
    );
}

fn seek_envelope(
    channel: &str,
    signer: &Signer,
    start: Position,
    stop: Position,
    behavior: SeekBehavior,
) -> Envelope {
    seek_envelope_at(
        channel,
        signer,
        [start, stop],
        behavior,
        Some(weft_msp::now()),
    )
}

/// A seek request whose channel header carries `timestamp` (seconds since
/// the Unix epoch; `None`: no timestamp).
fn seek_envelope_at(
    channel: &str,
    signer: &Signer,
    [start, stop]: [Position; 2],
    behavior: SeekBehavior,
    timestamp: Option<i64>,
) -> Envelope {
    let seek = SeekInfo {
        start: Some(SeekPosition {
            r#type: Some(start),
        }),
        stop: Some(SeekPosition { r#type: Some(stop) }),
        behavior: behavior as i32,
        ..SeekInfo::default()
    };
    signed_envelope_at(
        channel,
        HeaderType::DeliverSeekInfo,
        seek.encode_to_vec().into(),
        signer,
        timestamp,
    )
}

/// An envelope of any header type with `data`, signed by `signer`.
fn signed_envelope(channel: &str, kind: HeaderType, data: Bytes, signer: &Signer) -> Envelope {
    signed_envelope_at(channel, kind, data, signer, Some(weft_msp::now()))
}

/// [`signed_envelope`] whose channel header carries `timestamp`.
fn signed_envelope_at(
    channel: &str,
    kind: HeaderType,
    data: Bytes,
    signer: &Signer,
    timestamp: Option<i64>,
) -> Envelope {
    let nonce = Bytes::from(fresh_nonce());
    let creator = signer.serialized_identity().clone();
    let payload = Payload {
        header: Some(Header {
            channel_header: ChannelHeader {
                r#type: kind as i32,
                channel_id: channel.to_owned(),
                tx_id: weft_protos::hash::compute_tx_id(&nonce, &creator),
                timestamp: timestamp.map(|seconds| prost_types::Timestamp { seconds, nanos: 0 }),
                ..ChannelHeader::default()
            }
            .encode_to_vec()
            .into(),
            signature_header: SignatureHeader { creator, nonce }.encode_to_vec().into(),
        }),
        data,
    }
    .encode_to_vec();
    Envelope {
        signature: Signer::sign(signer, &payload).unwrap().into(),
        payload: payload.into(),
    }
}

/// The TxID in an envelope's channel header.
fn tx_id_of(raw: &Bytes) -> String {
    TxEnvelope::decode(raw.clone(), Limits::default())
        .unwrap()
        .tx_id()
        .to_owned()
}

/// Checks that `blocks` start with `genesis` and chain: consecutive
/// numbers, each previous hash the header hash of the block before, each
/// data hash the hash of the data, and an orderer signature naming the
/// last config block (0: the channel was never reconfigured).
fn check_chain(genesis: &Block, blocks: &[Block]) {
    assert_eq!(blocks[0], *genesis, "block 0 is the genesis block as given");
    for (number, pair) in blocks.windows(2).enumerate() {
        let (previous, block) = (&pair[0], &pair[1]);
        let header = block.header.as_ref().unwrap();
        assert_eq!(header.number, number as u64 + 1);
        assert_eq!(
            header.previous_hash.as_ref(),
            block_header_hash(previous.header.as_ref().unwrap())
        );
        assert_eq!(
            header.data_hash.as_ref(),
            block_data_hash(block.data.as_ref().unwrap())
        );
        assert_eq!(weft_protos::block::last_config_index(block), Some(0));
        let metadata = &block.metadata.as_ref().unwrap().metadata;
        let signatures =
            Metadata::decode(metadata[BlockMetadataIndex::Signatures as usize].clone()).unwrap();
        assert_eq!(signatures.signatures.len(), 1);
        // As Fabric 2.5's orderers: the LAST_CONFIG slot stays empty.
        assert!(metadata[BlockMetadataIndex::LastConfig as usize].is_empty());
    }
}

fn committer(network: &Network, dir: &std::path::Path) -> ChannelCommitter {
    let options = MemoryOptions {
        keep_versions_since_checkpoint: true,
    };
    let state = Arc::new(MemoryState::open(&dir.join("state"), options).unwrap());
    let ledger = Arc::new(
        BlockStore::open(&StoreConfig::new(dir.join("ledger")).with_durability(Durability::None))
            .unwrap(),
    );
    ChannelCommitter::create(network.genesis.clone(), state, ledger).unwrap()
}

/// The committer of `dir` (made by [`committer`]) opened again, as after a
/// restart.
fn reopen_committer(dir: &std::path::Path) -> ChannelCommitter {
    let options = MemoryOptions {
        keep_versions_since_checkpoint: true,
    };
    let state = Arc::new(MemoryState::open(&dir.join("state"), options).unwrap());
    let ledger = Arc::new(
        BlockStore::open(&StoreConfig::new(dir.join("ledger")).with_durability(Durability::None))
            .unwrap(),
    );
    ChannelCommitter::open(CHANNEL, state, ledger).unwrap()
}

fn fresh_nonce() -> Vec<u8> {
    use ring::rand::SecureRandom;
    let mut nonce = vec![0u8; 24];
    ring::rand::SystemRandom::new().fill(&mut nonce).unwrap();
    nonce
}

// ---------------------------------------------------------------------------
// The channel: organisations, genesis block, transactions.
// ---------------------------------------------------------------------------

struct Network {
    orderer: TestSigner,
    org1: TestOrg,
    org2: TestOrg,
    client1: Arc<Signer>,
    client2: Signer,
    org1_peer: Arc<Signer>,
    org2_peer: Arc<Signer>,
    /// An identity of an MSP the channel does not know.
    stranger: Signer,
    /// An identity that claims Org1MSP but was issued by another CA.
    impostor: Signer,
    orderer_org: TestOrg,
    batch_timeout: String,
    /// Set for a stream channel: its checkpoint settings.
    stream: Option<StreamMode>,
    genesis: Block,
}

/// The orderer's identity, reloadable for each start.
struct TestSigner(weft_msp::testing::TestIdentity);

impl TestSigner {
    fn clone_signer(&self) -> Signer {
        self.0.signer()
    }
}

impl Network {
    fn new() -> Self {
        Self::with_batch_timeout("100ms")
    }

    fn with_batch_timeout(batch_timeout: &str) -> Self {
        let orderer_org = TestOrg::new("OrdererMSP");
        let org1 = TestOrg::new("Org1MSP");
        let org2 = TestOrg::new("Org2MSP");
        let mut network = Self {
            orderer: TestSigner(orderer_org.identity(NodeRole::Orderer)),
            client1: Arc::new(org1.signer(NodeRole::Client)),
            client2: org2.signer(NodeRole::Client),
            org1_peer: Arc::new(org1.signer(NodeRole::Peer)),
            org2_peer: Arc::new(org2.signer(NodeRole::Peer)),
            stranger: TestOrg::new("Org9MSP").signer(NodeRole::Client),
            impostor: TestOrg::new("Org1MSP").signer(NodeRole::Client),
            org1,
            org2,
            orderer_org,
            batch_timeout: batch_timeout.to_owned(),
            stream: None,
            genesis: Block::default(),
        };
        network.genesis = network.genesis_with_consensus("solo");
        network
    }

    /// A solo stream channel whose batch timeout never passes in a test:
    /// any block it cuts, it cut because it streams.
    fn streaming(checkpoint_transactions: u32, checkpoint_interval: &str) -> Self {
        let mut network = Self::with_batch_timeout("1h");
        network.stream = Some(StreamMode {
            checkpoint_transactions,
            checkpoint_interval: checkpoint_interval.to_owned(),
        });
        network.genesis = network.genesis_with_consensus("solo");
        network
    }

    /// The configuration in the genesis block.
    fn config(&self) -> Config {
        let raw = self.genesis.data.as_ref().unwrap().data[0].clone();
        let envelope = TxEnvelope::decode(raw, Limits::default()).unwrap();
        let weft_protos::view::TxBody::Config(config) = envelope.body else {
            panic!("the genesis block holds a config")
        };
        config.config.unwrap()
    }

    /// The channel's genesis block, laid out as configtxgen lays it out.
    fn genesis_with_consensus(&self, consensus: &str) -> Block {
        let metadata = if consensus == "etcdraft" {
            weft_protos::etcdraft::ConfigMetadata {
                consenters: vec![weft_protos::etcdraft::Consenter {
                    host: "127.0.0.1".to_owned(),
                    port: 7050,
                    ..Default::default()
                }],
                options: None,
            }
            .encode_to_vec()
            .into()
        } else {
            Bytes::new()
        };
        self.genesis_with(consensus, metadata)
    }

    /// The channel's genesis block for a Raft cluster with `metadata`.
    fn genesis_with_raft(&self, metadata: &weft_protos::etcdraft::ConfigMetadata) -> Block {
        self.genesis_with("etcdraft", metadata.encode_to_vec().into())
    }

    /// The channel's genesis block for Kafka ordering through `brokers`,
    /// with weft's `options`.
    fn genesis_with_kafka(
        &self,
        brokers: &[String],
        options: &weft_protos::kafka::KafkaOptions,
    ) -> Block {
        self.genesis_with_values(
            "kafka",
            options.encode_to_vec().into(),
            vec![(
                "KafkaBrokers".to_owned(),
                value(&weft_protos::orderer::KafkaBrokers {
                    brokers: brokers.to_vec(),
                }),
            )],
        )
    }

    fn genesis_with(&self, consensus: &str, metadata: Bytes) -> Block {
        self.genesis_with_values(consensus, metadata, Vec::new())
    }

    /// The genesis block, with `orderer_values` added to the orderer group.
    fn genesis_with_values(
        &self,
        consensus: &str,
        metadata: Bytes,
        orderer_values: Vec<(String, ConfigValue)>,
    ) -> Block {
        let member = |org: &TestOrg| format!("OR('{}.member')", org.msp_id());
        let orderer_org = org_group(
            &self.orderer_org,
            &[
                ("Readers", member(&self.orderer_org)),
                ("Writers", member(&self.orderer_org)),
                ("Admins", "OR('OrdererMSP.admin')".to_owned()),
            ],
        );
        let application_org = |org: &TestOrg| {
            let id = org.msp_id();
            org_group(
                org,
                &[
                    (
                        "Readers",
                        format!("OR('{id}.admin', '{id}.peer', '{id}.client')"),
                    ),
                    ("Writers", format!("OR('{id}.admin', '{id}.client')")),
                    ("Admins", format!("OR('{id}.admin')")),
                    ("Endorsement", format!("OR('{id}.peer')")),
                ],
            )
        };
        let orderer = ConfigGroup {
            groups: BTreeMap::from([("OrdererOrg".to_owned(), orderer_org)]),
            values: BTreeMap::from([
                (
                    "ConsensusType".to_owned(),
                    value(&ConsensusType {
                        r#type: consensus.to_owned(),
                        metadata,
                        state: 0,
                    }),
                ),
                (
                    "BatchSize".to_owned(),
                    value(&BatchSize {
                        max_message_count: MAX_MESSAGE_COUNT,
                        absolute_max_bytes: ABSOLUTE_MAX_BYTES,
                        preferred_max_bytes: PREFERRED_MAX_BYTES,
                    }),
                ),
                (
                    "BatchTimeout".to_owned(),
                    value(&BatchTimeout {
                        timeout: self.batch_timeout.clone(),
                    }),
                ),
            ]),
            policies: BTreeMap::from([
                implicit("Readers", Rule::Any, "Readers"),
                implicit("Writers", Rule::Any, "Writers"),
                implicit("Admins", Rule::Majority, "Admins"),
                implicit("BlockValidation", Rule::Any, "Writers"),
            ]),
            version: 0,
            mod_policy: "Admins".to_owned(),
        };
        let mut orderer = orderer;
        orderer.values.extend(orderer_values);
        if let Some(stream) = &self.stream {
            orderer
                .values
                .insert(weft_protos::STREAM_MODE_KEY.to_owned(), value(stream));
        }
        let application = ConfigGroup {
            groups: BTreeMap::from([
                ("Org1MSP".to_owned(), application_org(&self.org1)),
                ("Org2MSP".to_owned(), application_org(&self.org2)),
            ]),
            values: BTreeMap::new(),
            policies: BTreeMap::from([
                implicit("Readers", Rule::Any, "Readers"),
                implicit("Writers", Rule::Any, "Writers"),
                implicit("Admins", Rule::Majority, "Admins"),
                implicit("Endorsement", Rule::Majority, "Endorsement"),
                implicit("LifecycleEndorsement", Rule::Majority, "Endorsement"),
            ]),
            version: 0,
            mod_policy: "Admins".to_owned(),
        };
        let root = ConfigGroup {
            groups: BTreeMap::from([
                ("Orderer".to_owned(), orderer),
                ("Application".to_owned(), application),
            ]),
            values: BTreeMap::from([(
                "HashingAlgorithm".to_owned(),
                value(&HashingAlgorithm {
                    name: "SHA256".to_owned(),
                }),
            )]),
            policies: BTreeMap::from([
                implicit("Readers", Rule::Any, "Readers"),
                implicit("Writers", Rule::Any, "Writers"),
                implicit("Admins", Rule::Majority, "Admins"),
            ]),
            version: 0,
            mod_policy: "Admins".to_owned(),
        };
        genesis_block(root)
    }

    /// A transaction writing `key`, endorsed by both organisations' peers
    /// and signed by `client`, with `padding` extra bytes in its
    /// arguments.
    fn transaction(
        &self,
        channel: &str,
        client: &Signer,
        key: &str,
        padding: usize,
    ) -> (String, Envelope) {
        endorsed_transaction(
            [&*self.org1_peer, &*self.org2_peer],
            channel,
            client,
            key,
            padding,
        )
    }

    /// What a load generator needs to make transactions: the client and
    /// both endorsing peers (shareable across threads, unlike `Network`).
    fn transactor(&self) -> Transactor {
        Transactor {
            client: self.client1.clone(),
            peers: [self.org1_peer.clone(), self.org2_peer.clone()],
        }
    }

    /// Envelopes the orderer must refuse, each with the status it must get.
    fn bad_envelopes(&self) -> Vec<(Envelope, Expected)> {
        let mut bad = Vec::new();
        let mut push = |what: &str, status: Status, tx: (String, Envelope)| {
            bad.push((tx.1, Expected::refused(what, status, Some(tx.0))));
        };

        let (tx_id, mut unsigned) = self.transaction(CHANNEL, &self.client1, "unsigned", 0);
        unsigned.signature = Bytes::new();
        push("an unsigned envelope", Status::Forbidden, (tx_id, unsigned));

        let (tx_id, mut wrongly_signed) = self.transaction(CHANNEL, &self.client1, "wrong-key", 0);
        wrongly_signed.signature = Signer::sign(&self.client2, &wrongly_signed.payload)
            .unwrap()
            .into();
        push(
            "an envelope signed by someone else",
            Status::Forbidden,
            (tx_id, wrongly_signed),
        );

        let (tx_id, mut tampered) = self.transaction(CHANNEL, &self.client1, "tampered", 0);
        let mut payload = tampered.payload.to_vec();
        let last = payload.len() - 1;
        payload[last] ^= 1;
        tampered.payload = payload.into();
        push(
            "an envelope changed after signing",
            Status::Forbidden,
            (tx_id, tampered),
        );

        // A TxID that is not the hash of the nonce and creator, signed as
        // its creator: it could claim another client's TxID.
        let (_, honest) = self.transaction(CHANNEL, &self.client1, "claimed-txid", 0);
        let mut payload = Payload::decode(honest.payload).unwrap();
        let mut header = payload.header.take().unwrap();
        let mut channel_header = ChannelHeader::decode(header.channel_header).unwrap();
        channel_header.tx_id = "ab".repeat(32);
        header.channel_header = channel_header.encode_to_vec().into();
        payload.header = Some(header);
        let payload = payload.encode_to_vec();
        let claimed = Envelope {
            signature: Signer::sign(&self.client1, &payload).unwrap().into(),
            payload: payload.into(),
        };
        push(
            "a TxID that is not the hash of its nonce and creator",
            Status::BadRequest,
            ("ab".repeat(32), claimed),
        );

        push(
            "a creator of an unknown MSP",
            Status::Forbidden,
            self.transaction(CHANNEL, &self.stranger, "stranger", 0),
        );
        push(
            "a creator claiming Org1MSP with another CA's certificate",
            Status::Forbidden,
            self.transaction(CHANNEL, &self.impostor, "impostor", 0),
        );
        push(
            "a peer, which is not a writer",
            Status::Forbidden,
            self.transaction(CHANNEL, &self.org1_peer, "peer", 0),
        );
        push(
            "an envelope over AbsoluteMaxBytes",
            Status::BadRequest,
            self.transaction(
                CHANNEL,
                &self.client1,
                "huge",
                ABSOLUTE_MAX_BYTES as usize + 1,
            ),
        );
        push(
            "a transaction for an unknown channel",
            Status::NotFound,
            self.transaction("nochannel", &self.client1, "elsewhere", 0),
        );

        let message = signed_envelope(
            CHANNEL,
            HeaderType::Message,
            Bytes::from_static(b"hello"),
            &self.client1,
        );
        bad.push((
            message,
            Expected::refused("a MESSAGE envelope", Status::BadRequest, None),
        ));
        let config = signed_envelope(
            CHANNEL,
            HeaderType::Config,
            ConfigEnvelope {
                config: Some(Config::default()),
                last_update: None,
            }
            .encode_to_vec()
            .into(),
            &self.client1,
        );
        bad.push((
            config,
            Expected::refused("a CONFIG envelope", Status::BadRequest, None),
        ));
        let config_update = signed_envelope(
            CHANNEL,
            HeaderType::ConfigUpdate,
            ConfigUpdateEnvelope {
                config_update: Bytes::from_static(b"\x0a\x06orders"),
                signatures: Vec::new(),
            }
            .encode_to_vec()
            .into(),
            &self.client1,
        );
        bad.push((
            config_update,
            Expected::refused("a CONFIG_UPDATE envelope", Status::BadRequest, None),
        ));
        bad.push((
            Envelope {
                payload: Bytes::from_static(b"\xff\xff\xff not a payload"),
                signature: Bytes::from_static(b"x"),
            },
            Expected::refused("malformed bytes", Status::BadRequest, None),
        ));
        bad.push((
            Envelope::default(),
            Expected::refused("an empty envelope", Status::BadRequest, None),
        ));
        bad
    }
}

/// A transaction writing `key`, endorsed by `peers` and signed by
/// `client`, with `padding` extra bytes in its arguments.
fn endorsed_transaction(
    peers: [&Signer; 2],
    channel: &str,
    client: &Signer,
    key: &str,
    padding: usize,
) -> (String, Envelope) {
    let invocation = Invocation {
        channel_id: channel,
        chaincode: CHAINCODE,
        args: vec![
            Bytes::from_static(b"put"),
            Bytes::from(key.to_owned()),
            Bytes::from(vec![b'x'; padding]),
        ],
        nonce: Bytes::from(fresh_nonce()),
        timestamp_seconds: weft_msp::now(),
    };
    let proposal = Proposal::new(&invocation, client.serialized_identity().clone());
    let kv = KvrwSet {
        writes: vec![KvWrite {
            key: key.to_owned(),
            is_delete: false,
            value: Bytes::from_static(b"value"),
        }],
        ..KvrwSet::default()
    };
    let results = TxReadWriteSet {
        data_model: DataModel::Kv as i32,
        ns_rwset: vec![NsReadWriteSet {
            namespace: CHAINCODE.to_owned(),
            rwset: kv.encode_to_vec().into(),
            collection_hashed_rwset: Vec::new(),
        }],
    };
    let simulation = SimulationResult {
        results: results.encode_to_vec().into(),
        events: Bytes::new(),
        response: Response {
            status: 200,
            message: String::new(),
            payload: Bytes::new(),
        },
        chaincode_id: ChaincodeId {
            path: String::new(),
            name: CHAINCODE.to_owned(),
            version: "1.0".to_owned(),
        },
    };
    let responses = [
        endorse(&proposal, &simulation, peers[0]).unwrap(),
        endorse(&proposal, &simulation, peers[1]).unwrap(),
    ];
    let envelope = proposal.transaction(&responses, client).unwrap();
    (proposal.tx_id, envelope)
}

/// Makes transactions of `Network`'s first client from any thread.
struct Transactor {
    client: Arc<Signer>,
    peers: [Arc<Signer>; 2],
}

impl Transactor {
    fn transaction(&self, key: &str) -> (String, Envelope) {
        let [org1, org2] = &self.peers;
        endorsed_transaction([&**org1, &**org2], CHANNEL, &self.client, key, 0)
    }
}

fn value(message: &impl Message) -> ConfigValue {
    ConfigValue {
        version: 0,
        value: message.encode_to_vec().into(),
        mod_policy: "Admins".to_owned(),
    }
}

fn implicit(name: &str, rule: Rule, sub_policy: &str) -> (String, ConfigPolicy) {
    (
        name.to_owned(),
        ConfigPolicy {
            version: 0,
            policy: Some(Policy {
                r#type: PolicyType::ImplicitMeta as i32,
                value: ImplicitMetaPolicy {
                    sub_policy: sub_policy.to_owned(),
                    rule: rule as i32,
                }
                .encode_to_vec()
                .into(),
            }),
            mod_policy: "Admins".to_owned(),
        },
    )
}

/// An organisation's group: its MSP and signature policies.
fn org_group(org: &TestOrg, policies: &[(&str, String)]) -> ConfigGroup {
    ConfigGroup {
        version: 0,
        groups: BTreeMap::new(),
        values: BTreeMap::from([(
            "MSP".to_owned(),
            value(&MspConfig {
                r#type: 0,
                config: org.msp_config().encode_to_vec().into(),
            }),
        )]),
        policies: policies
            .iter()
            .map(|(name, rule)| {
                (
                    (*name).to_owned(),
                    ConfigPolicy {
                        version: 0,
                        policy: Some(Policy {
                            r#type: PolicyType::Signature as i32,
                            value: weft_policy::dsl::parse(rule)
                                .unwrap()
                                .encode_to_vec()
                                .into(),
                        }),
                        mod_policy: "Admins".to_owned(),
                    },
                )
            })
            .collect(),
        mod_policy: "Admins".to_owned(),
    }
}

/// An unsigned genesis block of one CONFIG envelope, as configtxgen
/// writes it.
fn genesis_block(root: ConfigGroup) -> Block {
    let config = ConfigEnvelope {
        config: Some(Config {
            sequence: 0,
            channel_group: Some(root),
        }),
        last_update: None,
    };
    let nonce = fresh_nonce();
    let payload = Payload {
        header: Some(Header {
            channel_header: ChannelHeader {
                r#type: HeaderType::Config as i32,
                version: 1,
                channel_id: CHANNEL.to_owned(),
                tx_id: weft_protos::hash::compute_tx_id(&nonce, &[]),
                ..ChannelHeader::default()
            }
            .encode_to_vec()
            .into(),
            signature_header: SignatureHeader {
                creator: Bytes::new(),
                nonce: nonce.into(),
            }
            .encode_to_vec()
            .into(),
        }),
        data: config.encode_to_vec().into(),
    };
    let envelope = Envelope {
        payload: payload.encode_to_vec().into(),
        signature: Bytes::new(),
    };
    let mut block = weft_protos::block::new_block(0, &[], vec![envelope.encode_to_vec().into()]);
    let signatures = Metadata {
        value: OrdererBlockMetadata {
            last_config: Some(LastConfig { index: 0 }),
            consenter_metadata: Bytes::new(),
        }
        .encode_to_vec()
        .into(),
        signatures: Vec::new(),
    };
    weft_protos::block::set_metadata_slot(
        &mut block,
        BlockMetadataIndex::Signatures,
        signatures.encode_to_vec().into(),
    );
    block
}
