//! One conformance suite for every engine, then what each engine promises
//! beyond it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use tempfile::TempDir;

use crate::memory::{MemoryOptions, MemoryState};
use crate::rocks::{RocksOptions, RocksState};
use crate::{Error, Height, StateReader, UpdateBatch, VersionedState, VersionedValue};

type Open = fn(&Path) -> crate::Result<Box<dyn VersionedState>>;

fn open_memory(dir: &Path) -> crate::Result<Box<dyn VersionedState>> {
    Ok(Box::new(MemoryState::open(dir, MemoryOptions::default())?))
}

fn open_rocks(dir: &Path) -> crate::Result<Box<dyn VersionedState>> {
    Ok(Box::new(RocksState::open(dir, RocksOptions::default())?))
}

/// Runs each case against each engine, as `<engine>::<case>`.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod memory_engine {
            $(#[test] fn $case() { super::$case(super::open_memory) })*
        }
        mod rocks_engine {
            $(#[test] fn $case() { super::$case(super::open_rocks) })*
        }
    };
}

conformance!(
    reads_see_puts_and_deletes_with_their_versions,
    get_many_answers_in_request_order,
    range_scans_respect_bounds_limit_and_namespaces,
    range_scans_order_odd_keys_by_bytes,
    readers_never_see_half_an_apply,
    snapshots_do_not_see_later_applies,
    heights_must_increase,
    checkpoint_then_reopen_recovers_the_state,
    checkpoint_without_updates_reports_the_height,
    corrupt_savepoint_is_an_error,
    a_value_does_not_keep_the_buffer_it_came_in,
);

fn h(block_num: u64, tx_num: u64) -> Height {
    Height::new(block_num, tx_num)
}

fn versioned(value: &str, version: Height) -> VersionedValue {
    VersionedValue {
        value: Bytes::copy_from_slice(value.as_bytes()),
        version,
    }
}

fn get(reader: &dyn StateReader, namespace: &str, key: &str) -> Option<VersionedValue> {
    reader.get(namespace, key).unwrap()
}

/// The live keys of a namespace with their values, as strings.
fn keys(
    reader: &dyn StateReader,
    namespace: &str,
    start: &str,
    end: &str,
    limit: usize,
) -> Vec<String> {
    reader
        .range(namespace, start, end, limit)
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .collect()
}

/// Applies puts of `value` to `keys` of namespace "cc", all at `height`.
fn put_all(state: &dyn VersionedState, keys: &[&str], value: &str, height: Height) {
    let mut batch = UpdateBatch::new();
    for key in keys {
        batch.put("cc", key, Bytes::copy_from_slice(value.as_bytes()), height);
    }
    state.apply(&batch, height).unwrap();
}

fn delete_all(state: &dyn VersionedState, keys: &[&str], height: Height) {
    let mut batch = UpdateBatch::new();
    for key in keys {
        batch.delete("cc", key, height);
    }
    state.apply(&batch, height).unwrap();
}

/// Everything readable in the given namespaces, for comparing whole states.
fn dump(reader: &dyn StateReader, namespaces: &[&str]) -> Vec<(String, String, VersionedValue)> {
    namespaces
        .iter()
        .flat_map(|namespace| {
            reader
                .range(namespace, "", "", usize::MAX)
                .unwrap()
                .into_iter()
                .map(|(key, value)| (namespace.to_string(), key, value))
        })
        .collect()
}

/// Goal: a value written from a block is held on its own: once the block is
/// gone, the buffer it arrived in is freed, even while the key lives on
/// (a peer that kept it would grow by its blocks' size).
fn a_value_does_not_keep_the_buffer_it_came_in(open: Open) {
    let dir = TempDir::new().unwrap();
    let state = open(dir.path()).unwrap();
    let block: Arc<[u8]> = Arc::from(&b"header|the value|the rest of the block"[..]);
    let buffer = Arc::downgrade(&block);
    let arrived = Bytes::from_owner(block);
    let mut batch = UpdateBatch::new();
    batch.put("cc", "k", arrived.slice(7..16), h(1, 0));
    drop(arrived);
    state.apply(&batch, h(1, 0)).unwrap();
    drop(batch);

    assert_eq!(buffer.strong_count(), 0, "the block's buffer is still held");
    assert_eq!(
        get(&*state, "cc", "k"),
        Some(versioned("the value", h(1, 0)))
    );
}

/// Goal: the basic contract: a read returns the value and the version of
/// the transaction that wrote it, deletes hide keys, and a key can come back.
fn reads_see_puts_and_deletes_with_their_versions(open: Open) {
    let dir = TempDir::new().unwrap();
    let state = open(dir.path()).unwrap();
    assert_eq!(state.height(), None);
    assert_eq!(get(&*state, "cc", "a"), None);

    let mut batch = UpdateBatch::new();
    batch.put("cc", "a", Bytes::from_static(b"1"), h(1, 0));
    batch.put("cc", "b", Bytes::from_static(b"2"), h(1, 1));
    batch.put("cc", "a", Bytes::from_static(b"1'"), h(1, 2));
    state.apply(&batch, h(1, 2)).unwrap();
    assert_eq!(state.height(), Some(h(1, 2)));
    assert_eq!(get(&*state, "cc", "a"), Some(versioned("1'", h(1, 2))));
    assert_eq!(get(&*state, "cc", "b"), Some(versioned("2", h(1, 1))));
    assert_eq!(get(&*state, "other", "a"), None);

    let mut batch = UpdateBatch::new();
    batch.delete("cc", "a", h(2, 0));
    batch.put("cc", "b", Bytes::from_static(b"3"), h(2, 1));
    state.apply(&batch, h(2, 1)).unwrap();
    assert_eq!(get(&*state, "cc", "a"), None);
    assert_eq!(get(&*state, "cc", "b"), Some(versioned("3", h(2, 1))));

    put_all(&*state, &["a"], "4", h(3, 0));
    assert_eq!(get(&*state, "cc", "a"), Some(versioned("4", h(3, 0))));

    // An empty value is a value, not a delete.
    put_all(&*state, &["empty"], "", h(4, 0));
    assert_eq!(get(&*state, "cc", "empty"), Some(versioned("", h(4, 0))));
}

/// Goal: the bulk read MVCC uses answers each key in place, including
/// missing and repeated keys, on the latest state and on a snapshot.
fn get_many_answers_in_request_order(open: Open) {
    let dir = TempDir::new().unwrap();
    let state = open(dir.path()).unwrap();
    put_all(&*state, &["a", "b", "c"], "v", h(1, 0));
    let mut batch = UpdateBatch::new();
    batch.put("other", "a", Bytes::from_static(b"w"), h(2, 0));
    state.apply(&batch, h(2, 0)).unwrap();

    let request = [
        ("cc", "c"),
        ("cc", "missing"),
        ("other", "a"),
        ("cc", "a"),
        ("cc", "c"),
    ];
    let expected = vec![
        Some(versioned("v", h(1, 0))),
        None,
        Some(versioned("w", h(2, 0))),
        Some(versioned("v", h(1, 0))),
        Some(versioned("v", h(1, 0))),
    ];
    assert_eq!(state.get_many(&request).unwrap(), expected);
    assert_eq!(state.snapshot().get_many(&request).unwrap(), expected);
    assert_eq!(state.get_many(&[]).unwrap(), vec![]);
}

/// Goal: a range returns the live keys in `[start, end)` of one namespace,
/// in order, at most `limit` of them, with deleted keys skipped rather than
/// counted.
fn range_scans_respect_bounds_limit_and_namespaces(open: Open) {
    let dir = TempDir::new().unwrap();
    let state = open(dir.path()).unwrap();
    put_all(&*state, &["a", "b", "c", "d", "e"], "v", h(1, 0));
    // Neighbouring namespaces, including ones the encoding could confuse
    // with "cc" if it were a plain prefix.
    let mut batch = UpdateBatch::new();
    for namespace in ["c", "cc2", "cd", ""] {
        batch.put(namespace, "b", Bytes::from_static(b"x"), h(2, 0));
        batch.put(namespace, "cz", Bytes::from_static(b"x"), h(2, 0));
    }
    state.apply(&batch, h(2, 0)).unwrap();

    let all = keys(&*state, "cc", "", "", 100);
    assert_eq!(all, ["a", "b", "c", "d", "e"]);
    assert_eq!(keys(&*state, "cc", "b", "d", 100), ["b", "c"]);
    assert_eq!(keys(&*state, "cc", "bb", "", 100), ["c", "d", "e"]);
    assert_eq!(keys(&*state, "cc", "", "c", 100), ["a", "b"]);
    assert_eq!(keys(&*state, "cc", "", "", 2), ["a", "b"]);
    assert_eq!(keys(&*state, "cc", "a", "", 1), ["a"]);
    assert!(keys(&*state, "cc", "", "", 0).is_empty());
    assert!(keys(&*state, "cc", "d", "b", 100).is_empty());
    assert!(keys(&*state, "cc", "c", "c", 100).is_empty());
    assert!(keys(&*state, "cc", "f", "", 100).is_empty());
    assert!(keys(&*state, "nothing", "", "", 100).is_empty());
    assert_eq!(keys(&*state, "c", "", "", 100), ["b", "cz"]);
    assert_eq!(keys(&*state, "", "", "", 100), ["b", "cz"]);

    let values = state.range("cc", "d", "", 100).unwrap();
    assert_eq!(
        values,
        [
            ("d".to_owned(), versioned("v", h(1, 0))),
            ("e".to_owned(), versioned("v", h(1, 0)))
        ]
    );

    delete_all(&*state, &["b", "c"], h(3, 0));
    assert_eq!(keys(&*state, "cc", "", "", 100), ["a", "d", "e"]);
    assert_eq!(keys(&*state, "cc", "", "", 2), ["a", "d"]);
    assert_eq!(keys(&*state, "cc", "b", "d", 100), Vec::<String>::new());
    assert_eq!(keys(&*state.snapshot(), "cc", "a", "e", 100), ["a", "d"]);
}

/// Goal: keys with NUL and non-ASCII characters are stored and ordered by
/// their bytes, like Go strings in Fabric.
fn range_scans_order_odd_keys_by_bytes(open: Open) {
    let dir = TempDir::new().unwrap();
    let state = open(dir.path()).unwrap();
    let odd = ["a", "a\u{0}", "a\u{0}b", "a\u{1}", "b", "é", "\u{10ffff}"];
    put_all(&*state, &odd, "v", h(1, 0));
    let mut batch = UpdateBatch::new();
    batch.put("cc\u{0}", "a", Bytes::from_static(b"ns"), h(2, 0));
    state.apply(&batch, h(2, 0)).unwrap();

    assert_eq!(keys(&*state, "cc", "", "", 100), odd);
    assert_eq!(
        keys(&*state, "cc", "a\u{0}", "a\u{1}", 100),
        ["a\u{0}", "a\u{0}b"]
    );
    assert_eq!(keys(&*state, "cc", "", "a\u{0}b", 100), ["a", "a\u{0}"]);
    assert_eq!(get(&*state, "cc", "a\u{0}b"), Some(versioned("v", h(1, 0))));
    assert_eq!(get(&*state, "cc\u{0}", "a"), Some(versioned("ns", h(2, 0))));
    assert_eq!(keys(&*state, "cc\u{0}", "", "", 100), ["a"]);
}

/// Goal: apply is atomic for readers. A writer sets every key to the same
/// version in each batch; concurrent readers, through snapshots and through
/// the latest state, must only ever see all keys at one version, and a
/// snapshot's version must be its height.
fn readers_never_see_half_an_apply(open: Open) {
    const KEYS: usize = 40;
    const APPLIES: u64 = 150;
    let dir = TempDir::new().unwrap();
    let state = open(dir.path()).unwrap();
    let names: Vec<String> = (0..KEYS).map(|i| format!("k{i:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let request: Vec<(&str, &str)> = names.iter().map(|name| ("cc", *name)).collect();
    put_all(&*state, &names, "0", h(0, 0));

    let writer_done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for block in 1..=APPLIES {
                put_all(&*state, &names, &block.to_string(), h(block, 0));
            }
            writer_done.store(true, Ordering::Release);
        });
        scope.spawn(|| {
            loop {
                let writer_was_done = writer_done.load(Ordering::Acquire);
                let snapshot = state.snapshot();
                let height = snapshot.height().unwrap();
                let values = snapshot.get_many(&request).unwrap();
                assert!(
                    values
                        .iter()
                        .all(|value| value.as_ref().unwrap().version == height)
                );
                let ranged = snapshot.range("cc", "", "", usize::MAX).unwrap();
                assert_eq!(ranged.len(), KEYS);
                assert!(ranged.iter().all(|(_, value)| value.version == height));

                let latest = state.get_many(&request).unwrap();
                let version = latest[0].as_ref().unwrap().version;
                assert!(
                    latest
                        .iter()
                        .all(|value| value.as_ref().unwrap().version == version)
                );
                assert!(version >= height);
                let ranged = state.range("cc", "", "", usize::MAX).unwrap();
                let version = ranged[0].1.version;
                assert!(ranged.iter().all(|(_, value)| value.version == version));
                if writer_was_done {
                    break;
                }
            }
        });
    });
    assert_eq!(state.height(), Some(h(APPLIES, 0)));
}

/// Goal: a snapshot keeps reading the state it was taken at, for gets,
/// bulk gets and ranges, while the latest state moves on.
fn snapshots_do_not_see_later_applies(open: Open) {
    let dir = TempDir::new().unwrap();
    let state = open(dir.path()).unwrap();
    let empty = state.snapshot();
    put_all(&*state, &["a", "c"], "old", h(1, 0));
    let before = state.snapshot();

    let mut batch = UpdateBatch::new();
    batch.put("cc", "a", Bytes::from_static(b"new"), h(2, 0));
    batch.put("cc", "b", Bytes::from_static(b"new"), h(2, 0));
    batch.delete("cc", "c", h(2, 0));
    state.apply(&batch, h(2, 0)).unwrap();

    assert_eq!(empty.height(), None);
    assert_eq!(get(&*empty, "cc", "a"), None);
    assert!(keys(&*empty, "cc", "", "", 100).is_empty());

    assert_eq!(before.height(), Some(h(1, 0)));
    assert_eq!(get(&*before, "cc", "a"), Some(versioned("old", h(1, 0))));
    assert_eq!(get(&*before, "cc", "b"), None);
    assert_eq!(get(&*before, "cc", "c"), Some(versioned("old", h(1, 0))));
    assert_eq!(keys(&*before, "cc", "", "", 100), ["a", "c"]);

    assert_eq!(state.height(), Some(h(2, 0)));
    assert_eq!(get(&*state, "cc", "a"), Some(versioned("new", h(2, 0))));
    assert_eq!(keys(&*state, "cc", "", "", 100), ["a", "b"]);
    let after = state.snapshot();
    assert_eq!(keys(&*after, "cc", "", "", 100), ["a", "b"]);
}

/// Goal: an apply at a height not above the current one is refused and
/// leaves the state as it was.
fn heights_must_increase(open: Open) {
    let dir = TempDir::new().unwrap();
    let state = open(dir.path()).unwrap();
    put_all(&*state, &["a"], "1", h(2, 3));

    for stale in [h(2, 3), h(2, 2), h(1, 9)] {
        let mut batch = UpdateBatch::new();
        batch.put("cc", "a", Bytes::from_static(b"stale"), stale);
        batch.put("cc", "b", Bytes::from_static(b"stale"), stale);
        let error = state.apply(&batch, stale).unwrap_err();
        assert!(
            matches!(error, Error::HeightNotIncreasing { current, new } if current == h(2, 3) && new == stale),
            "{error}"
        );
    }
    assert_eq!(state.height(), Some(h(2, 3)));
    assert_eq!(get(&*state, "cc", "a"), Some(versioned("1", h(2, 3))));
    assert_eq!(get(&*state, "cc", "b"), None);

    put_all(&*state, &["a"], "2", h(2, 4));
    assert_eq!(get(&*state, "cc", "a"), Some(versioned("2", h(2, 4))));
}

/// Goal: what a checkpoint reports durable is exactly what a reopen finds,
/// with its height.
fn checkpoint_then_reopen_recovers_the_state(open: Open) {
    let dir = TempDir::new().unwrap();
    let namespaces = ["cc", "cc\u{0}", "other"];
    let expected = {
        let state = open(dir.path()).unwrap();
        assert_eq!(state.durable_height(), None);
        put_all(&*state, &["a", "b", "c", "a\u{0}b"], "1", h(1, 0));
        assert_eq!(state.checkpoint().unwrap(), Some(h(1, 0)));
        delete_all(&*state, &["b"], h(2, 0));
        let mut batch = UpdateBatch::new();
        batch.put(
            "cc\u{0}",
            "x",
            Bytes::from_static(b"\xff\x00binary"),
            h(3, 0),
        );
        batch.put("other", "a", Bytes::new(), h(3, 1));
        batch.put("cc", "c", Bytes::from_static(b"2"), h(3, 2));
        state.apply(&batch, h(3, 2)).unwrap();
        assert_eq!(state.checkpoint().unwrap(), Some(h(3, 2)));
        dump(&*state, &namespaces)
    };
    assert_eq!(expected.len(), 5);

    let state = open(dir.path()).unwrap();
    assert_eq!(state.durable_height(), Some(h(3, 2)));
    assert_eq!(state.height(), Some(h(3, 2)));
    assert_eq!(state.snapshot().height(), Some(h(3, 2)));
    assert_eq!(dump(&*state, &namespaces), expected);
    assert_eq!(get(&*state, "cc", "b"), None);

    // The reopened state carries on from where it was.
    let error = state.apply(&UpdateBatch::new(), h(3, 2)).unwrap_err();
    assert!(
        matches!(error, Error::HeightNotIncreasing { .. }),
        "{error}"
    );
    put_all(&*state, &["b"], "3", h(4, 0));
    assert_eq!(get(&*state, "cc", "b"), Some(versioned("3", h(4, 0))));
}

/// Goal: a checkpoint with nothing new reports the durable height and
/// changes nothing.
fn checkpoint_without_updates_reports_the_height(open: Open) {
    let dir = TempDir::new().unwrap();
    let state = open(dir.path()).unwrap();
    assert_eq!(state.checkpoint().unwrap(), None);
    put_all(&*state, &["a"], "1", h(1, 0));
    assert_eq!(state.checkpoint().unwrap(), Some(h(1, 0)));
    assert_eq!(state.checkpoint().unwrap(), Some(h(1, 0)));
    // An empty update still moves the height, durably.
    state.apply(&UpdateBatch::new(), h(2, 0)).unwrap();
    assert_eq!(state.checkpoint().unwrap(), Some(h(2, 0)));
    drop(state);
    assert_eq!(open(dir.path()).unwrap().durable_height(), Some(h(2, 0)));
}

/// Goal: damaged files are reported as corrupt, not read as some state.
fn corrupt_savepoint_is_an_error(open: Open) {
    let dir = TempDir::new().unwrap();
    {
        let state = open(dir.path()).unwrap();
        put_all(&*state, &["a"], "1", h(1, 0));
        state.checkpoint().unwrap();
    }
    {
        let disk = crate::disk::Disk::open(dir.path()).unwrap();
        disk.db.put(crate::codec::SAVEPOINT_KEY, b"\x01").unwrap();
    }
    let error = open(dir.path()).err();
    assert!(matches!(error, Some(Error::Corrupt { .. })), "{error:?}");
}

// What each engine promises about updates that were not checkpointed.

/// Goal: the memory engine loses what came after its last checkpoint (the
/// block store replays it) and reports the checkpoint's height.
#[test]
fn memory_reopen_recovers_the_last_checkpoint_only() {
    let dir = TempDir::new().unwrap();
    let checkpointed = {
        let state = open_memory(dir.path()).unwrap();
        put_all(&*state, &["a", "b"], "1", h(1, 0));
        state.checkpoint().unwrap();
        let checkpointed = dump(&*state, &["cc"]);
        put_all(&*state, &["a", "c"], "2", h(2, 0));
        delete_all(&*state, &["b"], h(3, 0));
        checkpointed
    };
    let state = open_memory(dir.path()).unwrap();
    assert_eq!(state.durable_height(), Some(h(1, 0)));
    assert_eq!(state.height(), Some(h(1, 0)));
    assert_eq!(dump(&*state, &["cc"]), checkpointed);
}

/// Goal: the RocksDB engine writes on every apply, so a reopen finds every
/// update, and reports the last one's height as durable.
#[test]
fn rocks_reopen_recovers_every_apply() {
    let dir = TempDir::new().unwrap();
    let applied = {
        let state = open_rocks(dir.path()).unwrap();
        put_all(&*state, &["a", "b"], "1", h(1, 0));
        state.checkpoint().unwrap();
        put_all(&*state, &["a", "c"], "2", h(2, 0));
        delete_all(&*state, &["b"], h(3, 0));
        dump(&*state, &["cc"])
    };
    let state = open_rocks(dir.path()).unwrap();
    assert_eq!(state.durable_height(), Some(h(3, 0)));
    assert_eq!(dump(&*state, &["cc"]), applied);
}

/// Goal: `sync` changes durability, not behaviour.
#[test]
fn rocks_with_sync_applies_and_recovers() {
    let dir = TempDir::new().unwrap();
    let options = RocksOptions { sync: true };
    {
        let state = RocksState::open(dir.path(), options).unwrap();
        put_all(&state, &["a"], "1", h(1, 0));
    }
    let state = RocksState::open(dir.path(), options).unwrap();
    assert_eq!(get(&state, "cc", "a"), Some(versioned("1", h(1, 0))));
}

// The memory engine's version chains.

fn memory(dir: &TempDir, keep_versions_since_checkpoint: bool) -> MemoryState {
    let options = MemoryOptions {
        keep_versions_since_checkpoint,
    };
    MemoryState::open(dir.path(), options).unwrap()
}

/// Goal: with no snapshot alive, a key keeps one version however often it
/// is written, and a deleted key leaves memory.
#[test]
fn memory_pruning_bounds_version_chains() {
    let dir = TempDir::new().unwrap();
    let state = memory(&dir, false);
    for block in 1..=500 {
        put_all(&state, &["hot"], &block.to_string(), h(block, 0));
        assert_eq!(state.versions_kept("cc", "hot"), 1);
    }
    assert_eq!(get(&state, "cc", "hot"), Some(versioned("500", h(500, 0))));

    delete_all(&state, &["hot"], h(501, 0));
    assert_eq!(state.versions_kept("cc", "hot"), 0);
    assert!(keys(&state, "cc", "", "", 100).is_empty());
    put_all(&state, &["hot"], "back", h(502, 0));
    assert_eq!(keys(&state, "cc", "", "", 100), ["hot"]);
}

/// Goal: snapshots alive across many applies keep reading their versions,
/// while a chain holds only the versions some reader sees: one per live
/// snapshot height plus the newest. Once they are gone the next apply
/// prunes the chain back to one.
#[test]
fn memory_long_lived_snapshots_keep_their_versions() {
    let dir = TempDir::new().unwrap();
    let state = memory(&dir, false);
    let empty = state.snapshot();
    put_all(&state, &["a", "gone"], "first", h(1, 0));
    let first = state.snapshot();
    delete_all(&state, &["gone"], h(2, 0));
    let mut middle = None;
    for block in 3..=300 {
        put_all(&state, &["a", "new"], &block.to_string(), h(block, 0));
        if block == 150 {
            middle = Some(state.snapshot());
        }
        assert!(state.versions_kept("cc", "a") <= 3);
    }
    let middle = middle.unwrap();
    assert_eq!(state.versions_kept("cc", "a"), 3);
    assert_eq!(get(&*first, "cc", "a"), Some(versioned("first", h(1, 0))));
    assert_eq!(
        get(&*first, "cc", "gone"),
        Some(versioned("first", h(1, 0)))
    );
    assert_eq!(keys(&*first, "cc", "", "", 100), ["a", "gone"]);
    assert_eq!(get(&*middle, "cc", "a"), Some(versioned("150", h(150, 0))));
    assert_eq!(keys(&*middle, "cc", "", "", 100), ["a", "new"]);
    assert_eq!(keys(&state, "cc", "", "", 100), ["a", "new"]);
    assert!(keys(&*empty, "cc", "", "", 100).is_empty());

    drop((empty, first, middle));
    put_all(&state, &["a", "gone"], "last", h(301, 0));
    assert_eq!(state.versions_kept("cc", "a"), 1);
    assert_eq!(state.versions_kept("cc", "gone"), 1);
}

/// Goal: rollback restores any height since the last checkpoint, exactly,
/// and the state then carries on (and checkpoints) from there.
#[test]
fn memory_rollback_restores_staged_heights() {
    let dir = TempDir::new().unwrap();
    let state = memory(&dir, true);
    put_all(&state, &["a", "b"], "1", h(1, 0));
    assert_eq!(state.checkpoint().unwrap(), Some(h(1, 0)));
    let at_checkpoint = dump(&state, &["cc"]);

    put_all(&state, &["a", "c"], "2", h(1, 1));
    let at_1_1 = dump(&state, &["cc"]);
    delete_all(&state, &["b"], h(1, 2));
    put_all(&state, &["a", "d"], "3", h(1, 3));
    assert!(state.versions_kept("cc", "a") >= 3);

    state.rollback_to(h(1, 1)).unwrap();
    assert_eq!(state.height(), Some(h(1, 1)));
    assert_eq!(dump(&state, &["cc"]), at_1_1);
    assert_eq!(state.versions_kept("cc", "d"), 0);

    state.rollback_to(h(1, 0)).unwrap();
    assert_eq!(dump(&state, &["cc"]), at_checkpoint);
    assert_eq!(get(&*state.snapshot(), "cc", "c"), None);

    // Below the checkpoint the state is gone; nothing changes.
    let error = state.rollback_to(h(0, 5)).unwrap_err();
    assert!(
        matches!(error, Error::RollbackUnavailable { target, floor } if target == h(0, 5) && floor == h(1, 0)),
        "{error}"
    );
    assert_eq!(dump(&state, &["cc"]), at_checkpoint);
    // At or above the current height there is nothing to undo.
    state.rollback_to(h(1, 0)).unwrap();
    state.rollback_to(h(9, 0)).unwrap();
    assert_eq!(state.height(), Some(h(1, 0)));

    // The rolled-back heights can be applied again, with other writes.
    put_all(&state, &["e"], "again", h(1, 1));
    assert_eq!(keys(&state, "cc", "", "", 100), ["a", "b", "e"]);
    assert_eq!(state.checkpoint().unwrap(), Some(h(1, 1)));
    let expected = dump(&state, &["cc"]);
    drop(state);
    let state = memory(&dir, true);
    assert_eq!(dump(&state, &["cc"]), expected);
}

/// Goal: keeping versions for rollback costs memory only until the next
/// checkpoint.
#[test]
fn memory_checkpoint_releases_rollback_versions() {
    let dir = TempDir::new().unwrap();
    let state = memory(&dir, true);
    for block in 1..=50 {
        put_all(&state, &["hot"], &block.to_string(), h(block, 0));
    }
    assert_eq!(state.versions_kept("cc", "hot"), 50);
    state.checkpoint().unwrap();
    assert_eq!(state.versions_kept("cc", "hot"), 1);
    state.rollback_to(h(50, 0)).unwrap();
    assert_eq!(get(&state, "cc", "hot"), Some(versioned("50", h(50, 0))));
}

/// Goal: without versions kept for it, rollback refuses heights whose
/// versions pruning has dropped rather than restore a wrong state.
#[test]
fn memory_rollback_without_kept_versions_is_refused() {
    let dir = TempDir::new().unwrap();
    let state = memory(&dir, false);
    put_all(&state, &["a"], "1", h(1, 0));
    put_all(&state, &["a"], "2", h(2, 0));
    let error = state.rollback_to(h(1, 0)).unwrap_err();
    assert!(
        matches!(error, Error::RollbackUnavailable { .. }),
        "{error}"
    );
    assert_eq!(get(&state, "cc", "a"), Some(versioned("2", h(2, 0))));
}

/// Goal: a checkpoint taken while applies go on stores one consistent
/// height: after a reopen, every key holds the value of the same update.
#[test]
fn memory_checkpoint_during_applies_is_consistent() {
    let dir = TempDir::new().unwrap();
    let names: Vec<String> = (0..30).map(|i| format!("k{i:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    {
        let state = memory(&dir, false);
        put_all(&state, &names, "0", h(0, 0));
        let writer_done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for block in 1..=100 {
                    put_all(&state, &names, &block.to_string(), h(block, 0));
                }
                writer_done.store(true, Ordering::Release);
            });
            let mut last = None;
            loop {
                let writer_was_done = writer_done.load(Ordering::Acquire);
                let durable = state.checkpoint().unwrap();
                assert!(durable >= last);
                last = durable;
                if writer_was_done {
                    break;
                }
            }
        });
    }
    let state = memory(&dir, false);
    let height = state.durable_height().unwrap();
    let values = state.range("cc", "", "", usize::MAX).unwrap();
    assert_eq!(values.len(), names.len());
    assert!(values.iter().all(|(_, value)| value.version == height));
}
