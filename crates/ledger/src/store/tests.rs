use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use tempfile::TempDir;
use weft_protos::common::{Block, BlockMetadataIndex};
use weft_protos::hash::block_header_hash;

use super::*;
use crate::testing::{
    ch10_peer_chain, ch100_orderer_chain, config, fixture, header, synthetic_block, synthetic_chain,
};

const NO_TIMER: Durability = Durability::GroupCommit {
    blocks_max: 1_000,
    interval_ms: 3_600_000,
};

fn open(dir: &TempDir, durability: Durability) -> BlockStore {
    BlockStore::open(&config(dir, durability)).expect("store opens")
}

fn append_all(store: &BlockStore, blocks: &[Block]) {
    for block in blocks {
        store.append(block).expect("block appends");
    }
}

/// Polls `condition` until it holds or `timeout` passes.
fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    condition()
}

fn tx_ids(block: &Block) -> Vec<Option<String>> {
    block
        .data
        .as_ref()
        .map(|data| data.data.iter().map(tx_id_of).collect())
        .unwrap_or_default()
}

/// Checks that every block of `chain` reads back by number and each of its
/// transactions by TxID, and that the tail is the chain's.
fn assert_holds(store: &BlockStore, chain: &[Block]) {
    assert_eq!(store.height(), chain.len() as u64);
    assert_eq!(
        store.last_header_hash(),
        chain.last().map(|block| block_header_hash(header(block)))
    );
    for (number, block) in chain.iter().enumerate() {
        let number = number as u64;
        assert_eq!(store.block(number).unwrap().as_ref(), Some(block));
        let bytes = store.block_bytes(number).unwrap().unwrap();
        assert_eq!(bytes, block.encode_to_vec());
        let filter = &block.metadata.as_ref().unwrap().metadata
            [BlockMetadataIndex::TransactionsFilter as usize];
        for (index, tx_id) in tx_ids(block).iter().enumerate() {
            let Some(tx_id) = tx_id else { continue };
            let location = store.tx_location(tx_id).unwrap().unwrap();
            assert_eq!(location.block_number, number, "{tx_id}");
            assert_eq!(location.tx_index, index as u64, "{tx_id}");
            assert_eq!(location.validation_code, filter.get(index).copied());
            assert_eq!(
                store.tx_validation_code(tx_id).unwrap(),
                filter.get(index).copied()
            );
            assert!(store.contains_tx_id(tx_id).unwrap());
            assert_eq!(store.block_by_tx_id(tx_id).unwrap().as_ref(), Some(block));
        }
    }
    assert_eq!(store.block(chain.len() as u64).unwrap(), None);
    assert_eq!(store.block_bytes(u64::MAX).unwrap(), None);
}

#[test]
fn fabric_chains_append_and_read_back() {
    // Goal: real Fabric blocks pass the chain checks and read back whole,
    // by number and by TxID, with the peer's validation codes.
    for chain in [ch10_peer_chain(), ch100_orderer_chain()] {
        let dir = TempDir::new().unwrap();
        let store = open(&dir, Durability::EveryBlock);
        assert_eq!(store.height(), 0);
        assert_eq!(store.last_header_hash(), None);
        append_all(&store, &chain);
        assert_holds(&store, &chain);
    }
}

#[test]
fn fabric_blocks_are_stored_byte_for_byte() {
    // Goal: Deliver serves the stored bytes exactly as Fabric wrote them
    // (prost's encoding of a decoded block reproduces Go's).
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fabric-2.5");
    let chains: [&[&str]; 2] = [
        &[
            "ch10-block-0.block",
            "ch10-block-1.from-peer.block",
            "ch10-block-2.block",
            "extra/ch10-block-3.from-peer.block",
            "ch10-block-4.block",
        ],
        &[
            "ch100-block-0.block",
            "ch100-block-1.block",
            "ch100-block-2.block",
            "extra/ch100-block-3.block",
            "extra/ch100-block-4.block",
        ],
    ];
    for names in chains {
        let dir = TempDir::new().unwrap();
        let store = open(&dir, Durability::EveryBlock);
        for (number, name) in names.iter().enumerate() {
            let original = std::fs::read(fixtures.join(name)).unwrap();
            store.append(&fixture(name)).unwrap();
            let stored = store.block_bytes(number as u64).unwrap().unwrap();
            assert_eq!(stored, original, "{name}");
        }
    }
}

#[test]
fn peer_filters_give_validation_codes_and_orderer_blocks_none() {
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    let chain = ch10_peer_chain();
    append_all(&store, &chain);
    // Block 1 and 3 are the peer's copies: every transaction VALID (0).
    for number in [1, 3] {
        for tx_id in tx_ids(&chain[number]).into_iter().flatten() {
            assert_eq!(store.tx_validation_code(&tx_id).unwrap(), Some(0));
        }
    }
    assert_eq!(tx_ids(&chain[3]).len(), 10);
    // Blocks 2 and 4 are the orderer's copies: no filter, no code.
    for number in [2, 4] {
        for tx_id in tx_ids(&chain[number]).into_iter().flatten() {
            assert!(store.contains_tx_id(&tx_id).unwrap());
            assert_eq!(store.tx_validation_code(&tx_id).unwrap(), None);
        }
    }
    let unknown = "0".repeat(64);
    assert_eq!(store.tx_validation_code(&unknown).unwrap(), None);
    assert_eq!(store.tx_location(&unknown).unwrap(), None);
    assert_eq!(store.block_by_tx_id(&unknown).unwrap(), None);
    assert!(!store.contains_tx_id(&unknown).unwrap());
}

#[test]
fn broken_links_are_rejected_and_nothing_is_written() {
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    let chain = synthetic_chain("link", 3, 2);

    let error = store.append(&chain[1]).unwrap_err();
    assert!(
        matches!(
            error,
            Error::UnexpectedNumber {
                expected: 0,
                found: 1
            }
        ),
        "{error}"
    );
    store.append(&chain[0]).unwrap();

    // A previous hash that is not block 0's header hash.
    let mut wrong_previous = chain[1].clone();
    wrong_previous.header.as_mut().unwrap().previous_hash = Bytes::from_static(&[7; 32]);
    let error = store.append(&wrong_previous).unwrap_err();
    assert!(
        matches!(
            error,
            Error::PreviousHashMismatch {
                block_number: 1,
                ..
            }
        ),
        "{error}"
    );

    // Data that is not what the header's data hash covers.
    let mut wrong_data = chain[1].clone();
    wrong_data.data.as_mut().unwrap().data.pop();
    let error = store.append(&wrong_data).unwrap_err();
    assert!(
        matches!(
            error,
            Error::DataHashMismatch {
                block_number: 1,
                ..
            }
        ),
        "{error}"
    );

    // Skipping ahead and going back.
    let error = store.append(&chain[2]).unwrap_err();
    assert!(
        matches!(
            error,
            Error::UnexpectedNumber {
                expected: 1,
                found: 2
            }
        ),
        "{error}"
    );
    let error = store.append(&chain[0]).unwrap_err();
    assert!(
        matches!(
            error,
            Error::UnexpectedNumber {
                expected: 1,
                found: 0
            }
        ),
        "{error}"
    );

    let headless = Block {
        header: None,
        ..chain[1].clone()
    };
    let error = store.append(&headless).unwrap_err();
    assert!(
        matches!(error, Error::MissingHeader { expected_number: 1 }),
        "{error}"
    );

    // Nothing of the rejected blocks is visible, before or after reopening.
    let check = |store: &BlockStore| {
        assert_eq!(store.height(), 1);
        assert_eq!(
            store.last_header_hash(),
            Some(block_header_hash(header(&chain[0])))
        );
        assert_eq!(store.block(1).unwrap(), None);
        assert!(!store.contains_tx_id("link-1-0").unwrap());
        assert!(!store.contains_tx_id("link-2-0").unwrap());
    };
    check(&store);
    drop(store);
    let store = open(&dir, Durability::EveryBlock);
    check(&store);
    append_all(&store, &chain[1..]);
    assert_holds(&store, &chain);
}

#[test]
fn an_assembled_block_is_still_linked_to_the_chain() {
    // Goal: a block whose caller vouches for its data hash (the orderer
    // that assembled it) is still refused out of order or off the chain.
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    let chain = synthetic_chain("assembled", 3, 2);
    store.append(&chain[0]).unwrap();

    let error = store.append_assembled(&chain[2], false).unwrap_err();
    assert!(
        matches!(
            error,
            Error::UnexpectedNumber {
                expected: 1,
                found: 2
            }
        ),
        "{error}"
    );
    let mut wrong_previous = chain[1].clone();
    wrong_previous.header.as_mut().unwrap().previous_hash = Bytes::from_static(&[7; 32]);
    let error = store.append_assembled(&wrong_previous, true).unwrap_err();
    assert!(
        matches!(
            error,
            Error::PreviousHashMismatch {
                block_number: 1,
                ..
            }
        ),
        "{error}"
    );

    store.append_assembled(&chain[1], true).unwrap();
    store.append_assembled(&chain[2], false).unwrap();
    assert_eq!(store.height(), 3);
    assert_eq!(store.block(2).unwrap().as_ref(), Some(&chain[2]));
}

#[test]
fn a_store_without_the_tx_index_keeps_blocks_and_refuses_lookups() {
    // Goal: an orderer's store (no TxID index) holds and serves the same
    // blocks, writes no index entries, and a lookup by TxID is a clear
    // error rather than a silent "unknown transaction".
    let dir = TempDir::new().unwrap();
    let chain = synthetic_chain("unindexed", 3, 4);
    let store = BlockStore::open(&config(&dir, Durability::EveryBlock).without_tx_index()).unwrap();
    append_all(&store, &chain);
    for (number, block) in chain.iter().enumerate() {
        assert_eq!(store.block(number as u64).unwrap().as_ref(), Some(block));
    }
    let tx_id = tx_ids(&chain[1])[0].clone().unwrap();
    assert!(matches!(
        store.tx_location(&tx_id),
        Err(Error::NotIndexed { .. })
    ));
    assert!(matches!(
        store.contains_tx_id(&tx_id),
        Err(Error::NotIndexed { .. })
    ));
    let tx_ids_family = store.shared.cf(CF_TX_IDS).unwrap();
    let indexed = store
        .shared
        .db
        .iterator_cf(tx_ids_family, rocksdb::IteratorMode::Start)
        .count();
    assert_eq!(indexed, 0);
}

#[test]
fn only_the_first_occurrence_of_a_tx_id_is_indexed() {
    // Goal: the index keeps answering with the original transaction when a
    // replay (DUPLICATE_TXID, code 10) appears later in the same block or
    // in a later block.
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    let block0 = synthetic_block(0, None, &["a", "b", "a"], Some(&[0, 11, 10]));
    let block1 = synthetic_block(1, Some(&block0), &["b", "c", "a"], Some(&[10, 0, 10]));
    store.append(&block0).unwrap();
    store.append(&block1).unwrap();

    let location = |tx_id| store.tx_location(tx_id).unwrap().unwrap();
    assert_eq!(
        location("a"),
        TxLocation {
            block_number: 0,
            tx_index: 0,
            validation_code: Some(0)
        }
    );
    assert_eq!(
        location("b"),
        TxLocation {
            block_number: 0,
            tx_index: 1,
            validation_code: Some(11)
        }
    );
    assert_eq!(
        location("c"),
        TxLocation {
            block_number: 1,
            tx_index: 1,
            validation_code: Some(0)
        }
    );
    assert_eq!(store.block_by_tx_id("b").unwrap(), Some(block0.clone()));
    // The duplicates are still stored in their blocks.
    assert_eq!(store.block(1).unwrap(), Some(block1));
}

#[test]
fn reopening_recovers_height_tail_and_index() {
    let dir = TempDir::new().unwrap();
    let chain = ch10_peer_chain();
    let store = open(&dir, Durability::EveryBlock);
    append_all(&store, &chain);
    drop(store);

    for durability in [Durability::EveryBlock, NO_TIMER, Durability::None] {
        let store = open(&dir, durability);
        assert_holds(&store, &chain);
        assert_eq!(store.durable_height(), 5);
    }

    // The reopened store continues the chain.
    let store = open(&dir, Durability::EveryBlock);
    let next = synthetic_block(5, chain.last(), &["after-reopen"], None);
    store.append(&next).unwrap();
    assert_eq!(store.height(), 6);
    assert_eq!(
        store
            .tx_location("after-reopen")
            .unwrap()
            .unwrap()
            .block_number,
        5
    );
}

#[test]
fn every_block_is_durable_when_append_returns() {
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    for (number, block) in synthetic_chain("every", 3, 1).iter().enumerate() {
        store.append(block).unwrap();
        assert_eq!(store.durable_height(), number as u64 + 1);
    }
}

#[test]
fn group_commit_syncs_when_blocks_max_are_pending() {
    let dir = TempDir::new().unwrap();
    let store = open(
        &dir,
        Durability::GroupCommit {
            blocks_max: 3,
            interval_ms: 3_600_000,
        },
    );
    let chain = synthetic_chain("max", 3, 1);
    append_all(&store, &chain[..2]);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(store.durable_height(), 0, "2 of 3 pending: no sync yet");
    store.append(&chain[2]).unwrap();
    assert!(eventually(Duration::from_secs(10), || store
        .durable_height()
        == 3));
}

#[test]
fn group_commit_syncs_after_the_interval() {
    let dir = TempDir::new().unwrap();
    let store = open(
        &dir,
        Durability::GroupCommit {
            blocks_max: 1_000,
            interval_ms: 20,
        },
    );
    let started = Instant::now();
    store.append(&synthetic_chain("timer", 1, 1)[0]).unwrap();
    assert!(eventually(Duration::from_secs(10), || store
        .durable_height()
        == 1));
    // The sync waited for the interval, counted from the append.
    assert!(started.elapsed() >= Duration::from_millis(20));
}

#[test]
fn group_commit_syncs_before_serving_a_block() {
    // Goal: nothing a reader was given can be lost in a machine crash.
    let dir = TempDir::new().unwrap();
    let store = open(&dir, NO_TIMER);
    let chain = synthetic_chain("read", 5, 1);
    append_all(&store, &chain[..2]);
    assert_eq!(store.durable_height(), 0);
    // One sync covers everything appended before it.
    store.block(1).unwrap().unwrap();
    assert_eq!(store.durable_height(), 2);

    store.append(&chain[2]).unwrap();
    assert!(store.read_syncs(2));
    assert!(!store.read_syncs(1), "block 1 is durable");
    assert!(!store.read_syncs(3), "block 3 is not stored");
    store.block_bytes(0).unwrap().unwrap();
    assert!(store.contains_tx_id("read-2-0").unwrap());
    let unsynced = store.tx_location_unsynced("read-2-0").unwrap().unwrap();
    assert_eq!(unsynced.block_number, 2);
    assert_eq!(
        store.durable_height(),
        2,
        "durable or internal reads don't sync"
    );
    assert_eq!(store.tx_validation_code("read-2-0").unwrap(), None);
    assert_eq!(store.durable_height(), 3);
    assert!(!store.read_syncs(2));

    store.append(&chain[3]).unwrap();
    store.block_by_tx_id("read-3-0").unwrap().unwrap();
    assert_eq!(store.durable_height(), 4);

    store.append(&chain[4]).unwrap();
    let served: Vec<u64> = store.blocks_from(3).map(|item| item.unwrap().0).collect();
    assert_eq!(served, [3, 4]);
    assert_eq!(store.durable_height(), 5);
}

#[tokio::test]
async fn a_task_reads_recent_blocks_from_memory_and_syncs_the_rest() {
    // Goal: an async reader (commit status, chaincode events) gets every
    // block it asks for, and under group commit never one that a machine
    // crash could still take back.
    let dir = TempDir::new().unwrap();
    let store = Arc::new(open(&dir, NO_TIMER));
    let chain = synthetic_chain("task", 2, 1);
    append_all(&store, &chain);
    assert_eq!(store.durable_height(), 0);
    let read = store.block_from_task(1).await.unwrap().unwrap();
    assert_eq!(read, chain[1]);
    assert_eq!(store.durable_height(), 2, "the read synced first");
    let bytes = store.block_bytes_from_task(0).await.unwrap().unwrap();
    assert_eq!(bytes, Bytes::from(chain[0].encode_to_vec()));
    assert_eq!(store.block_from_task(2).await.unwrap(), None);
}

#[test]
fn no_durability_syncs_only_when_asked() {
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::None);
    append_all(&store, &synthetic_chain("none", 3, 1));
    store.block(2).unwrap().unwrap();
    assert_eq!(store.durable_height(), 0);
    store.sync().unwrap();
    assert_eq!(store.durable_height(), 3);
}

#[test]
fn close_stops_the_flusher_and_syncs() {
    let dir = TempDir::new().unwrap();
    let store = open(&dir, NO_TIMER);
    let chain = synthetic_chain("close", 2, 1);
    append_all(&store, &chain);
    let mut durable = store.subscribe_durable();
    assert_eq!(*durable.borrow_and_update(), 0);
    let started = Instant::now();
    store.close().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    // The final sync was published before the store went away.
    assert_eq!(*durable.borrow(), 2);
    let store = open(&dir, NO_TIMER);
    assert_holds(&store, &chain);
}

#[test]
fn zero_blocks_max_is_rejected() {
    let dir = TempDir::new().unwrap();
    let config = config(
        &dir,
        Durability::GroupCommit {
            blocks_max: 0,
            interval_ms: 10,
        },
    );
    let error = BlockStore::open(&config).unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error}");
}

#[tokio::test]
async fn height_watch_wakes_a_waiting_deliver() {
    let dir = TempDir::new().unwrap();
    let store = Arc::new(open(&dir, NO_TIMER));
    let mut height = store.subscribe();
    let mut durable = store.subscribe_durable();
    assert_eq!(*height.borrow(), 0);

    let writer = Arc::clone(&store);
    let appender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        writer.append(&synthetic_chain("watch", 1, 1)[0]).unwrap();
    });
    let seen = tokio::time::timeout(Duration::from_secs(10), height.wait_for(|h| *h > 0))
        .await
        .expect("the append wakes the watcher")
        .map(|h| *h)
        .unwrap();
    assert_eq!(seen, 1);
    appender.join().unwrap();

    // Serving the block syncs it, which the durable watch reports.
    assert!(store.block(0).unwrap().is_some());
    let durable_now = tokio::time::timeout(Duration::from_secs(10), durable.wait_for(|h| *h > 0))
        .await
        .expect("the read's sync is published")
        .map(|h| *h)
        .unwrap();
    assert_eq!(durable_now, 1);
}

#[test]
fn blocks_from_follows_the_height() {
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::None);
    let chain = synthetic_chain("iter", 4, 1);
    append_all(&store, &chain[..3]);
    let mut blocks = store.blocks_from(1);
    let first: Vec<u64> = blocks.by_ref().map(|item| item.unwrap().0).collect();
    assert_eq!(first, [1, 2]);
    assert_eq!(blocks.next_number(), 3);
    store.append(&chain[3]).unwrap();
    let (number, bytes) = blocks.next().unwrap().unwrap();
    assert_eq!(number, 3);
    assert_eq!(Block::decode(bytes).unwrap(), chain[3]);
    assert!(blocks.next().is_none());
    assert!(store.blocks_from(9).next().is_none());
}

#[test]
fn store_is_shared_between_threads() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<BlockStore>();
}

/// Builds a 5-block store, closes it, changes its database with `tamper`
/// and reopens it, verifying `verify_tail_blocks` blocks.
fn reopen_tampered(
    verify_tail_blocks: u32,
    tamper: impl FnOnce(&DB, &[Block]),
) -> (TempDir, Result<BlockStore>) {
    let dir = TempDir::new().unwrap();
    let chain = synthetic_chain("tamper", 5, 2);
    let store = open(&dir, Durability::EveryBlock);
    append_all(&store, &chain);
    store.close().unwrap();
    let config = StoreConfig {
        verify_tail_blocks,
        ..config(&dir, Durability::EveryBlock)
    };
    {
        let db = open_db(&config.path).unwrap();
        tamper(&db, &chain);
    }
    let result = BlockStore::open(&config);
    (dir, result)
}

fn put_block(db: &DB, number: u64, bytes: &[u8]) {
    let blocks = db.cf_handle(CF_BLOCKS).unwrap();
    db.put_cf(blocks, block_key(number), bytes).unwrap();
}

fn corrupt_block_number((_dir, result): (TempDir, Result<BlockStore>)) -> (u64, String) {
    match result {
        Err(Error::Corrupt {
            block_number,
            reason,
            ..
        }) => (block_number, reason),
        other => panic!("expected a corrupt block, got {other:?}"),
    }
}

#[test]
fn open_names_the_corrupt_block() {
    // Goal: damage the atomic batches cannot cause is reported, naming the
    // block, instead of being served.
    let (number, reason) = corrupt_block_number(reopen_tampered(10, |db, _| {
        put_block(db, 2, b"\xff\xff not a block");
    }));
    assert_eq!(number, 2);
    assert!(reason.contains("does not decode"), "{reason}");

    let (number, reason) = corrupt_block_number(reopen_tampered(10, |db, _| {
        let blocks = db.cf_handle(CF_BLOCKS).unwrap();
        db.delete_cf(blocks, block_key(4)).unwrap();
    }));
    assert_eq!(number, 4);
    assert!(reason.contains("missing"), "{reason}");

    let (number, reason) = corrupt_block_number(reopen_tampered(10, |db, chain| {
        let extra = synthetic_block(5, chain.last(), &["extra"], None);
        put_block(db, 5, &extra.encode_to_vec());
    }));
    assert_eq!(number, 5);
    assert!(reason.contains("beyond the tail"), "{reason}");

    // A well-formed block 3 that is not the one block 4 links to.
    let (number, reason) = corrupt_block_number(reopen_tampered(10, |db, chain| {
        let forged = synthetic_block(3, Some(&chain[2]), &["forged"], None);
        put_block(db, 3, &forged.encode_to_vec());
    }));
    assert_eq!(number, 4);
    assert!(reason.contains("previous hash"), "{reason}");

    // A tail block whose data no longer matches its header.
    let (number, reason) = corrupt_block_number(reopen_tampered(10, |db, chain| {
        let mut changed = chain[4].clone();
        changed.data.as_mut().unwrap().data.pop();
        put_block(db, 4, &changed.encode_to_vec());
    }));
    assert_eq!(number, 4);
    assert!(reason.contains("data hash"), "{reason}");

    // A tail record that points at another block.
    let (number, reason) = corrupt_block_number(reopen_tampered(10, |db, chain| {
        let tail = TailRecord {
            height: 5,
            header_hash: block_header_hash(header(&chain[3])),
        };
        db.put(TAIL_KEY, encode_tail(&tail)).unwrap();
    }));
    assert_eq!(number, 4);
    assert!(reason.contains("tail record"), "{reason}");

    let (_dir, result) = reopen_tampered(10, |db, _| db.delete(TAIL_KEY).unwrap());
    assert!(
        matches!(result, Err(Error::CorruptTail { .. })),
        "{result:?}"
    );
}

#[test]
fn damage_below_the_verified_depth_is_caught_on_read() {
    let (_dir, result) = reopen_tampered(2, |db, _| put_block(db, 1, b"\xff\xff not a block"));
    let store = result.expect("only blocks 3 and 4 are verified on open");
    let error = store.block(1).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Corrupt {
                block_number: 1,
                ..
            }
        ),
        "{error}"
    );
    // A block stored under the wrong number is caught too.
    let (_dir, result) =
        reopen_tampered(1, |db, chain| put_block(db, 0, &chain[1].encode_to_vec()));
    let store = result.expect("only block 4 is verified on open");
    let error = store.block(0).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Corrupt {
                block_number: 0,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn one_batch_holds_the_block_its_index_entries_and_the_tail() {
    // Goal: everything an append writes is in the one atomic batch.
    let dir = TempDir::new().unwrap();
    let chain = synthetic_chain("atomic", 2, 3);
    let store = open(&dir, Durability::EveryBlock);
    store.append(&chain[0]).unwrap();
    let batch = store
        .shared
        .batch_for(
            &chain[1],
            &chain[1].encode_to_vec(),
            1,
            block_header_hash(header(&chain[1])),
            None,
        )
        .unwrap();
    assert_eq!(batch.len(), 1 + 3 + 1);
}

#[test]
fn unsynced_blocks_wait_for_a_sync_and_truncation_removes_them_with_their_index() {
    // Goal: a stream channel's staged blocks are appended without a sync
    // even under EveryBlock; truncating removes them and only the TxIDs
    // they indexed (a TxID first seen earlier keeps its entry), survives a
    // reopen, and the chain then continues from the new tail with other
    // blocks at the same numbers.
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    let chain = synthetic_chain("kept", 3, 2);
    append_all(&store, &chain);
    let staged = [synthetic_block(
        3,
        chain.last(),
        &["staged-a", "kept-1-0"],
        None,
    )];
    let staged_next = synthetic_block(4, Some(&staged[0]), &["staged-b"], None);
    store.append_assembled(&staged[0], true).unwrap();
    store.append_assembled(&staged_next, true).unwrap();
    assert_eq!((store.height(), store.durable_height()), (5, 3));
    assert_eq!(
        store.tx_location("staged-b").unwrap().unwrap().block_number,
        4
    );

    assert!(matches!(store.truncate(0), Err(Error::TruncateGenesis)));
    store.truncate(3).unwrap();
    assert_holds(&store, &chain);
    assert_eq!(store.durable_height(), 3);
    assert_eq!(store.tx_location("staged-a").unwrap(), None);
    assert_eq!(store.tx_location("staged-b").unwrap(), None);
    assert_eq!(
        store.tx_location("kept-1-0").unwrap().unwrap().block_number,
        1
    );
    store.truncate(7).unwrap();
    assert_eq!(store.height(), 3);
    drop(store);

    let store = open(&dir, Durability::EveryBlock);
    assert_holds(&store, &chain);
    let other = synthetic_block(3, chain.last(), &["other", "staged-a"], None);
    store.append(&other).unwrap();
    assert_eq!(
        store.tx_location("staged-a").unwrap().unwrap().block_number,
        3
    );
    assert_eq!(store.durable_height(), 4);
}

#[test]
fn settling_unsynced_blocks_gives_them_the_stores_durability() {
    // Goal: a block appended unsynced and then settled ends as durable as
    // one appended with the store's durability: synced at once under
    // EveryBlock, by the flusher under group commit.
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    let chain = synthetic_chain("settle", 3, 1);
    store.append(&chain[0]).unwrap();
    store.append_assembled(&chain[1], true).unwrap();
    store.append_assembled(&chain[2], true).unwrap();
    assert_eq!(store.durable_height(), 1);
    store.settle_unsynced().unwrap();
    assert_eq!(store.durable_height(), 3);

    let dir = TempDir::new().unwrap();
    let store = open(
        &dir,
        Durability::GroupCommit {
            blocks_max: 1_000,
            interval_ms: 20,
        },
    );
    // Once the flusher has synced a block it sleeps until told of another;
    // an unsynced append tells it nothing, settling does. (A flusher not
    // yet back asleep when the unsynced block comes would sync it as it
    // syncs whatever is pending: harmless, and not what this checks, so
    // it is given time to sleep first.)
    store.append(&chain[0]).unwrap();
    assert!(eventually(Duration::from_secs(10), || store
        .durable_height()
        == 1));
    std::thread::sleep(Duration::from_millis(100));
    store.append_assembled(&chain[1], true).unwrap();
    store.settle_unsynced().unwrap();
    assert!(eventually(Duration::from_secs(10), || store
        .durable_height()
        == 2));
}

#[test]
fn the_last_blocks_are_served_from_memory_as_stored_and_only_once_readable() {
    // Goal: Deliver at the tip sends a block without a disk read, and what
    // it sends is exactly what a read from disk gives: only below the
    // height, under group commit only once durable, never a truncated
    // block, and only the last few blocks.
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    let chain = synthetic_chain("recent", RECENT_BLOCKS as u64 + 4, 2);
    append_all(&store, &chain);
    let tip = chain.len() as u64 - 1;
    assert_eq!(store.recent_block_bytes(tip + 1), None);
    for number in tip + 1 - RECENT_BLOCKS as u64..=tip {
        assert_eq!(
            store.recent_block_bytes(number),
            store.block_bytes(number).unwrap(),
            "block {number}"
        );
    }
    assert_eq!(store.recent_block_bytes(tip - RECENT_BLOCKS as u64), None);

    // A staged block truncated away is never served; its replacement is.
    let staged = synthetic_block(tip + 1, chain.last(), &["staged"], None);
    store.append_assembled(&staged, true).unwrap();
    assert_eq!(
        store.recent_block_bytes(tip + 1),
        Some(Bytes::from(staged.encode_to_vec()))
    );
    store.truncate(tip + 1).unwrap();
    assert_eq!(store.recent_block_bytes(tip + 1), None);
    let other = synthetic_block(tip + 1, chain.last(), &["other"], None);
    store.append(&other).unwrap();
    assert_eq!(
        store.recent_block_bytes(tip + 1),
        Some(Bytes::from(other.encode_to_vec()))
    );
    drop(store);

    // Under group commit a block not yet durable is left to `block_bytes`,
    // which syncs before serving it.
    let dir = TempDir::new().unwrap();
    let store = open(&dir, NO_TIMER);
    let chain = synthetic_chain("pending", 2, 1);
    append_all(&store, &chain);
    assert_eq!(store.recent_block_bytes(1), None);
    store.block_bytes(1).unwrap().unwrap();
    assert_eq!(
        store.recent_block_bytes(1),
        Some(Bytes::from(chain[1].encode_to_vec()))
    );
}

/// The key and value the first public write of transaction `index` of
/// `block` sets, and its TxID, decoded independently of the index.
fn first_write(block: &Block, index: usize) -> (String, Bytes, String) {
    use weft_protos::view::{Limits, TxBody, TxEnvelope};
    let raw = block.data.as_ref().unwrap().data[index].clone();
    let transaction = TxEnvelope::decode(raw, Limits::default()).unwrap();
    let TxBody::Endorser(endorser) = &transaction.body else {
        panic!("an endorser transaction");
    };
    let write = endorser.actions[0]
        .namespaces
        .iter()
        .find(|namespace| namespace.namespace == "kv")
        .unwrap()
        .kv
        .writes[0]
        .clone();
    (write.key, write.value, transaction.channel_header.tx_id)
}

#[test]
fn history_lists_the_valid_writes_of_a_key_and_follows_truncation() {
    let dir = TempDir::new().unwrap();
    let chain = ch10_peer_chain();
    let (key, value, tx_id) = first_write(&chain[3], 0);

    // Appended without the index: no history to ask for.
    let store = open(&dir, Durability::None);
    append_all(&store, &chain[..4]);
    assert!(matches!(
        store.history("kv", &key, 10),
        Err(Error::NoHistory { .. })
    ));
    store.close().unwrap();

    // Opened with it, the store indexes the blocks it holds.
    let store = BlockStore::open(&config(&dir, Durability::None).with_history(true)).unwrap();
    let found = store.history("kv", &key, 10).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(
        (&found[0].tx_id, &found[0].value, found[0].is_delete),
        (&tx_id, &value, false)
    );
    assert!(found[0].timestamp.is_some());
    assert!(store.history("kv", &key, 0).unwrap().is_empty());
    assert!(store.history("other", &key, 10).unwrap().is_empty());

    // Block 4 with its second transaction marked invalid (MVCC_READ_CONFLICT):
    // only the valid writes are indexed.
    let mut block = chain[4].clone();
    let mut filter = vec![0u8; block.data.as_ref().unwrap().data.len()];
    filter[1] = 11;
    block.metadata.as_mut().unwrap().metadata[BlockMetadataIndex::TransactionsFilter as usize] =
        Bytes::from(filter.clone());
    // As the committer appends it: with the writes of its own decoded
    // copy, which are the writes the store would decode itself.
    let decoded = weft_protos::view::DecodedBlock::from_block(
        block.clone(),
        weft_protos::view::Limits::default(),
    )
    .unwrap();
    let given = crate::history_writes(&decoded, |index| filter[index] == 0);
    assert_eq!(given, crate::history::indexed_writes(&block));
    assert!(!given.0.is_empty());
    store
        .append_with_history(&block, || given, &BlockPrivateData::default(), false)
        .unwrap();
    let (valid_key, _, valid_tx) = first_write(&block, 0);
    let (invalid_key, _, _) = first_write(&block, 1);
    let found = store.history("kv", &valid_key, 10).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].tx_id, valid_tx);
    assert!(store.history("kv", &invalid_key, 10).unwrap().is_empty());

    // A truncated block takes its entries with it.
    store.truncate(4).unwrap();
    assert!(store.history("kv", &valid_key, 10).unwrap().is_empty());
    assert_eq!(store.history("kv", &key, 10).unwrap().len(), 1);
}

#[test]
fn private_data_is_stored_with_its_block_settles_transient_entries_and_leaves_with_truncation() {
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    let chain = synthetic_chain("private", 4, 2);
    append_all(&store, &chain[..2]);

    store.keep_transient("tx-a", 2, b"writes of a").unwrap();
    store.keep_transient("tx-b", 2, b"writes of b").unwrap();
    assert_eq!(
        store.transient("tx-a").unwrap().as_deref(),
        Some(&b"writes of a"[..])
    );
    assert_eq!(store.transient("nope").unwrap(), None);

    let missing = crate::MissingPrivateData {
        block: 2,
        tx_index: 0,
        tx_id: "tx-lost".to_owned(),
        namespace: "cc".to_owned(),
        collection: "c".to_owned(),
    };
    let private = BlockPrivateData {
        committed: vec![(1, Bytes::from_static(b"committed of a"))],
        settled: vec!["tx-a".to_owned()],
        missing: vec![missing.clone()],
        ..BlockPrivateData::default()
    };
    store
        .append_with_history(&chain[2], HistoryWrites::default, &private, false)
        .unwrap();
    assert_eq!(
        store.private_data(2).unwrap(),
        vec![(1, Bytes::from_static(b"committed of a"))]
    );
    assert_eq!(
        store.private_data_of(2, 1).unwrap().as_deref(),
        Some(&b"committed of a"[..])
    );
    assert_eq!(store.private_data_of(2, 0).unwrap(), None);
    assert!(store.private_data(1).unwrap().is_empty());
    assert!(store.private_data(3).unwrap().is_empty());
    assert_eq!(
        store.transient("tx-a").unwrap(),
        None,
        "settled by its block"
    );
    assert!(
        store.transient("tx-b").unwrap().is_some(),
        "not in the block"
    );

    assert_eq!(
        store.missing_private_data(None, 10).unwrap(),
        std::slice::from_ref(&missing)
    );

    // A later block rewrites an earlier block's entry (some of it
    // expired), and completes the missing one, settling it.
    let expiring = BlockPrivateData {
        rewritten: vec![(2, 1, Some(Bytes::from_static(b"what is left")))],
        reconciled: vec![missing],
        ..BlockPrivateData::default()
    };
    store
        .append_with_history(&chain[3], HistoryWrites::default, &expiring, false)
        .unwrap();
    assert_eq!(
        store.private_data(2).unwrap(),
        vec![(1, Bytes::from_static(b"what is left"))]
    );
    assert!(store.missing_private_data(None, 10).unwrap().is_empty());
    assert_eq!(store.reconciled_with(3).unwrap(), [(2, 0)]);
    assert!(store.reconciled_with(2).unwrap().is_empty());

    // Reopened, the private data is there; truncated, it is gone.
    drop(store);
    let store = open(&dir, Durability::EveryBlock);
    assert_eq!(store.private_data(2).unwrap().len(), 1);
    store.truncate(2).unwrap();
    assert!(store.private_data(2).unwrap().is_empty());
    assert!(
        store.reconciled_with(3).unwrap().is_empty(),
        "truncated with its block"
    );
    let gone = BlockPrivateData {
        committed: vec![(0, Bytes::from_static(b"x"))],
        ..BlockPrivateData::default()
    };
    store
        .append_with_history(&chain[2], HistoryWrites::default, &gone, false)
        .unwrap();
    let removing = BlockPrivateData {
        rewritten: vec![(2, 0, None)],
        ..BlockPrivateData::default()
    };
    store
        .append_with_history(&chain[3], HistoryWrites::default, &removing, false)
        .unwrap();
    assert!(store.private_data(2).unwrap().is_empty());
}

#[test]
fn the_store_paces_its_background_writes() {
    // Goal: a memtable flush hands its table file to the disk a MiB at a
    // time, as `pacing` explains; RocksDB records the options it runs
    // with in the store's OPTIONS file, which an operator can read too.
    let dir = TempDir::new().unwrap();
    let store = open(&dir, Durability::EveryBlock);
    append_all(&store, &synthetic_chain("paced", 2, 1));
    let options = std::fs::read_dir(dir.path().join("ledger"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("OPTIONS-"))
        })
        .map(|path| std::fs::read_to_string(path).unwrap())
        .last()
        .expect("RocksDB wrote its OPTIONS file");
    let expected = format!(
        "bytes_per_sync={}",
        crate::pacing::BACKGROUND_BYTES_PER_SYNC
    );
    assert!(
        options.lines().any(|line| line.trim() == expected),
        "{expected} missing from the store's OPTIONS file"
    );
}
