//! The Raft log of one channel on disk: raft-rs's [`Storage`] backed by a
//! RocksDB database of its own (`<data dir>/raft/<channel>/`).
//!
//! Keys: `e` + the big-endian index for each entry, `hs` for the hard
//! state (term, vote, commit), `cs` for the conf state (the voters), and
//! `snap` for the last snapshot (its metadata and our `SnapshotData`).
//! Everything a `Ready` asks to persist is written in one synced batch,
//! before the messages that depend on it are sent.
//!
//! Compaction replaces the entries up to an applied index by a snapshot
//! at that index; the snapshot's data says how many blocks the chain has
//! there, which is all a lagging node needs to pull the blocks themselves
//! from another orderer.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

const HARD_STATE_KEY: &[u8] = b"hs";
const CONF_STATE_KEY: &[u8] = b"cs";
const SNAPSHOT_KEY: &[u8] = b"snap";
const ENTRY_PREFIX: u8 = b'e';
/// The raft log's memtable: entries are read back soon after they are
/// written (to send them to followers) and dropped at the next snapshot.
const RAFT_LOG_MEMTABLE_BYTES: u64 = 4 << 20;
/// The last entries written are also kept in memory, at most this many
/// and this many bytes of data (an entry holds a whole batch of
/// envelopes): raft-rs reads each entry back soon after it is written, to
/// apply it, and a read from RocksDB copies and decodes the batch again.
/// Kept small: every Raft channel of a node holds its own, idle or not.
const RECENT_ENTRIES_MAX: usize = 64;
const RECENT_BYTES_MAX: usize = 4 << 20;

/// A failure of the log store, as text for the orderer's errors.
pub(crate) type StoreResult<T> = std::result::Result<T, String>;

fn entry_key(index: u64) -> [u8; 9] {
    let mut key = [0u8; 9];
    key[0] = ENTRY_PREFIX;
    key[1..].copy_from_slice(&index.to_be_bytes());
    key
}

/// The in-memory view of what is on disk.
#[derive(Debug, Default)]
struct State {
    hard_state: HardState,
    conf_state: ConfState,
    snapshot: Snapshot,
    /// The first index held as an entry (snapshot index + 1).
    first_index: u64,
    /// The last index held (the snapshot's if no entry follows it).
    last_index: u64,
    /// The term of each entry held, from `first_index` on: raft-rs asks
    /// for terms often, and an entry holds a whole block.
    terms: VecDeque<u64>,
    /// The last entries written, consecutive and ending at `last_index`
    /// (within [`RECENT_ENTRIES_MAX`] and [`RECENT_BYTES_MAX`]).
    recent: VecDeque<Entry>,
    /// The data bytes of `recent`.
    recent_bytes: usize,
}

impl State {
    /// The term of entry `index`, if held.
    fn term_of(&self, index: u64) -> Option<u64> {
        let offset = usize::try_from(index.checked_sub(self.first_index)?).ok()?;
        self.terms.get(offset).copied()
    }

    /// Keeps `entries`, just written, as the most recent: those they
    /// replace are dropped first, and all are dropped if the new ones do
    /// not follow on (the log was replaced).
    fn remember(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        while self
            .recent
            .back()
            .is_some_and(|kept| kept.index >= first.index)
        {
            self.drop_recent_back();
        }
        if self
            .recent
            .back()
            .is_some_and(|kept| kept.index + 1 != first.index)
        {
            self.forget_recent();
        }
        for entry in entries {
            self.recent_bytes += entry.data.len();
            self.recent.push_back(entry.clone());
        }
        while self.recent.len() > RECENT_ENTRIES_MAX
            || (self.recent_bytes > RECENT_BYTES_MAX && !self.recent.is_empty())
        {
            self.drop_recent_front();
        }
    }

    /// Drops the recent entries up to `index` (compacted).
    fn forget_recent_through(&mut self, index: u64) {
        while self.recent.front().is_some_and(|kept| kept.index <= index) {
            self.drop_recent_front();
        }
    }

    fn forget_recent(&mut self) {
        self.recent.clear();
        self.recent_bytes = 0;
    }

    fn drop_recent_front(&mut self) {
        if let Some(entry) = self.recent.pop_front() {
            self.recent_bytes -= entry.data.len();
        }
    }

    fn drop_recent_back(&mut self) {
        if let Some(entry) = self.recent.pop_back() {
            self.recent_bytes -= entry.data.len();
        }
    }
}

struct Inner {
    db: rocksdb::DB,
    state: RwLock<State>,
    /// Held by a compaction and a snapshot install, so that their writes
    /// to the snapshot and the entries are never interleaved.
    snapshotting: Mutex<()>,
}

/// A channel's Raft log store; clones share it.
#[derive(Clone)]
pub(crate) struct LogStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.read();
        f.debug_struct("LogStore")
            .field("first_index", &state.first_index)
            .field("last_index", &state.last_index)
            .finish_non_exhaustive()
    }
}

fn decode<M: protobuf::Message>(bytes: &[u8], what: &str) -> StoreResult<M> {
    M::parse_from_bytes(bytes).map_err(|e| format!("the stored {what} does not decode: {e}"))
}

fn encode(message: &impl protobuf::Message, what: &str) -> StoreResult<Vec<u8>> {
    message
        .write_to_bytes()
        .map_err(|e| format!("the {what} does not encode: {e}"))
}

impl LogStore {
    /// Opens the store at `path`, creating it with `voters` as the
    /// initial configuration when it is new.
    pub fn open(path: &Path, voters: &[u64]) -> StoreResult<Self> {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        // Every entry is synced. A write-ahead log that grows makes each
        // fdatasync write the file's inode too (its size changed): a second
        // synchronous disk write. A recycled log is overwritten in place,
        // within its size, so a sync writes the data alone; a small
        // memtable makes the log turn over (and recycle) every few
        // megabytes of entries, which compaction drops soon anyway. Its
        // size depends on the path, so that the orderers of one machine,
        // writing the same entries, flush apart.
        options.set_recycle_log_file_num(2);
        options
            .set_write_buffer_size(weft_ledger::staggered(RAFT_LOG_MEMTABLE_BYTES, path) as usize);
        // Its flushes must not hold up the synced writes of entries.
        weft_ledger::pace_background_writes(&mut options);
        let db = rocksdb::DB::open(&options, path)
            .map_err(|e| format!("opening the raft log at {}: {e}", path.display()))?;
        let read = |key: &[u8]| {
            db.get(key)
                .map_err(|e| format!("reading the raft log at {}: {e}", path.display()))
        };
        let mut state = State::default();
        match read(CONF_STATE_KEY)? {
            Some(bytes) => state.conf_state = decode(&bytes, "conf state")?,
            None => {
                state.conf_state.set_voters(voters.to_vec());
                db.put(CONF_STATE_KEY, encode(&state.conf_state, "conf state")?)
                    .map_err(|e| format!("initialising the raft log: {e}"))?;
            }
        }
        if let Some(bytes) = read(HARD_STATE_KEY)? {
            state.hard_state = decode(&bytes, "hard state")?;
        }
        if let Some(bytes) = read(SNAPSHOT_KEY)? {
            state.snapshot = decode(&bytes, "snapshot")?;
        }
        let snapshot_index = state.snapshot.get_metadata().index;
        state.first_index = snapshot_index + 1;
        state.last_index = snapshot_index;
        // The entries after the snapshot, contiguous; their terms.
        let entries = db.iterator(rocksdb::IteratorMode::From(
            &entry_key(state.first_index),
            rocksdb::Direction::Forward,
        ));
        for item in entries {
            let (key, value) = item.map_err(|e| format!("reading the raft log: {e}"))?;
            if key.len() != 9 || key[0] != ENTRY_PREFIX {
                break;
            }
            let entry: Entry = decode(&value, "entry")?;
            if entry.index != state.last_index + 1 {
                return Err(format!(
                    "the raft log at {} holds entry {} after {}",
                    path.display(),
                    entry.index,
                    state.last_index
                ));
            }
            state.last_index = entry.index;
            state.terms.push_back(entry.term);
        }
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                state: RwLock::new(state),
                snapshotting: Mutex::new(()),
            }),
        })
    }

    /// The last snapshot (empty metadata when none was taken).
    pub fn snapshot_now(&self) -> Snapshot {
        self.inner.state.read().snapshot.clone()
    }

    /// Appends `entries` (replacing any from their first index on) and
    /// records `hard_state`, in one batch, synced when `sync`. A hard state
    /// that changes only the commit index, with no entries, is kept in
    /// memory. Returns how long the write to the disk took, `None` if
    /// nothing was written.
    pub fn persist(
        &self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
        sync: bool,
    ) -> StoreResult<Option<Duration>> {
        if entries.is_empty() && hard_state.is_none() {
            return Ok(None);
        }
        let mut state = self.inner.state.write();
        // A commit index is learnt again from the leader, and one behind
        // the blocks written is raised on open (`commit_at_least`): a hard
        // state that moves only the commit index is kept in memory, and
        // reaches the disk with the next entries, term or vote. Writing it
        // would cost every node a log write per decided block.
        if entries.is_empty()
            && hard_state.is_some_and(|hard_state| {
                hard_state.term == state.hard_state.term && hard_state.vote == state.hard_state.vote
            })
        {
            if let Some(hard_state) = hard_state {
                state.hard_state = hard_state.clone();
            }
            return Ok(None);
        }
        let mut batch = rocksdb::WriteBatch::default();
        if let Some(first) = entries.first() {
            if first.index < state.first_index {
                return Err(format!(
                    "entry {} would overwrite the compacted log (first index {})",
                    first.index, state.first_index
                ));
            }
            if first.index > state.last_index + 1 {
                return Err(format!(
                    "entry {} would leave a gap after {}",
                    first.index, state.last_index
                ));
            }
            // A new leader's entries replace a conflicting tail.
            if first.index <= state.last_index {
                batch.delete_range(entry_key(first.index), entry_key(state.last_index + 1));
            }
            for entry in entries {
                batch.put(entry_key(entry.index), encode(entry, "entry")?);
            }
        }
        let recorded = encode(hard_state.unwrap_or(&state.hard_state), "hard state")?;
        batch.put(HARD_STATE_KEY, recorded);
        // Raft needs its entries, term and vote on disk before it answers.
        let writing = Instant::now();
        self.write(batch, sync)?;
        let took = writing.elapsed();
        if let Some(first) = entries.first() {
            let kept = usize::try_from(first.index - state.first_index).unwrap_or(usize::MAX);
            state.terms.truncate(kept);
            state.terms.extend(entries.iter().map(|entry| entry.term));
        }
        if let Some(last) = entries.last() {
            state.last_index = last.index;
        }
        state.remember(entries);
        debug_assert_eq!(
            state.terms.len() as u64,
            state.last_index + 1 - state.first_index
        );
        if let Some(hard_state) = hard_state {
            state.hard_state = hard_state.clone();
        }
        Ok(Some(took))
    }

    /// Records a new commit index (from a `LightReady`), in memory only
    /// until the next write ([`LogStore::persist`]): a commit index lost in
    /// a crash is learnt again from the leader, and one behind the blocks
    /// written is raised on open ([`LogStore::commit_at_least`]).
    pub fn set_commit(&self, commit: u64) {
        self.inner.state.write().hard_state.commit = commit;
    }

    /// Raises the commit index to `applied` (the last entry the block store
    /// holds a block of, which was committed): raft-rs refuses to start
    /// with entries applied beyond the commit index. In memory, as
    /// [`LogStore::set_commit`]: it is raised again on every open.
    pub fn commit_at_least(&self, applied: u64) {
        let hard_state = &mut self.inner.state.write().hard_state;
        hard_state.commit = hard_state.commit.max(applied);
    }

    /// Records the voters after a membership change, synced: applied
    /// before the change's block is written, so that a node restarting
    /// between the two finds the change done or applies it again.
    pub fn set_conf_state(&self, conf_state: &ConfState) -> StoreResult<()> {
        let mut batch = rocksdb::WriteBatch::default();
        batch.put(CONF_STATE_KEY, encode(conf_state, "conf state")?);
        self.write(batch, true)?;
        self.inner.state.write().conf_state = conf_state.clone();
        Ok(())
    }

    /// Whether the log holds nothing yet: no entry, no snapshot, no vote
    /// (a node that has just joined the channel).
    pub fn is_empty(&self) -> bool {
        let state = self.inner.state.read();
        state.last_index == 0 && state.hard_state.term == 0
    }

    /// Replaces the log by `snapshot` (received from the leader).
    pub fn apply_snapshot(&self, snapshot: &Snapshot) -> StoreResult<()> {
        let _snapshotting = self.inner.snapshotting.lock();
        let metadata = snapshot.get_metadata();
        let mut state = self.inner.state.write();
        if metadata.index < state.snapshot.get_metadata().index {
            return Err(format!(
                "snapshot {} is older than the one held ({})",
                metadata.index,
                state.snapshot.get_metadata().index
            ));
        }
        let mut hard_state = state.hard_state.clone();
        hard_state.term = hard_state.term.max(metadata.term);
        hard_state.commit = hard_state.commit.max(metadata.index);
        let conf_state = metadata.get_conf_state().clone();
        let mut batch = rocksdb::WriteBatch::default();
        batch.delete_range(entry_key(0), entry_key(u64::MAX));
        batch.put(SNAPSHOT_KEY, encode(snapshot, "snapshot")?);
        batch.put(HARD_STATE_KEY, encode(&hard_state, "hard state")?);
        batch.put(CONF_STATE_KEY, encode(&conf_state, "conf state")?);
        self.write(batch, true)?;
        state.snapshot = snapshot.clone();
        state.hard_state = hard_state;
        state.conf_state = conf_state;
        state.first_index = metadata.index + 1;
        state.last_index = metadata.index;
        state.terms.clear();
        state.forget_recent();
        Ok(())
    }

    /// Takes a snapshot at `applied` carrying `data`, and drops the
    /// entries up to it. Safe beside the thread that drives Raft: the
    /// entries are dropped from the view Raft reads (it answers
    /// `Compacted` for them, and a follower that needs them gets the
    /// snapshot) before they are deleted from the disk, and no lock Raft
    /// takes is held while the deletion is synced.
    pub fn compact(&self, applied: u64, data: Vec<u8>) -> StoreResult<()> {
        let _snapshotting = self.inner.snapshotting.lock();
        let snapshot = {
            let mut state = self.inner.state.write();
            if applied <= state.snapshot.get_metadata().index {
                // Already covered by the snapshot held.
                return Ok(());
            }
            let term = state.term_of(applied).ok_or_else(|| {
                format!(
                    "cannot compact to {applied}: the log holds {}..={}",
                    state.first_index, state.last_index
                )
            })?;
            let mut snapshot = Snapshot::default();
            snapshot.set_data(data.into());
            let metadata = snapshot.mut_metadata();
            metadata.index = applied;
            metadata.term = term;
            metadata.set_conf_state(state.conf_state.clone());
            state.snapshot = snapshot.clone();
            let dropped = usize::try_from(applied + 1 - state.first_index)
                .unwrap_or(usize::MAX)
                .min(state.terms.len());
            state.terms.drain(..dropped);
            state.forget_recent_through(applied);
            state.first_index = applied + 1;
            snapshot
        };
        let mut batch = rocksdb::WriteBatch::default();
        batch.put(SNAPSHOT_KEY, encode(&snapshot, "snapshot")?);
        batch.delete_range(entry_key(0), entry_key(applied + 1));
        self.write(batch, true)
    }

    fn write(&self, batch: rocksdb::WriteBatch, sync: bool) -> StoreResult<()> {
        let mut options = rocksdb::WriteOptions::default();
        options.set_sync(sync);
        self.inner
            .db
            .write_opt(batch, &options)
            .map_err(|e| format!("writing the raft log: {e}"))
    }

    fn read_entry(&self, index: u64) -> raft::Result<Entry> {
        match self.inner.db.get(entry_key(index)) {
            Ok(Some(bytes)) => decode(&bytes, "entry").map_err(store_error),
            Ok(None) => Err(raft::Error::Store(StorageError::Unavailable)),
            Err(e) => Err(store_error(e.to_string())),
        }
    }
}

fn store_error(reason: String) -> raft::Error {
    raft::Error::Store(StorageError::Other(reason.into()))
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let state = self.inner.state.read();
        Ok(RaftState::new(
            state.hard_state.clone(),
            state.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        // The recent entries are the log's last ones, consecutive: those of
        // the range among them are taken from memory, the ones before them
        // from the disk.
        let (first, last, recent) = {
            let state = self.inner.state.read();
            let recent: Vec<Entry> = state
                .recent
                .iter()
                .skip_while(|entry| entry.index < low)
                .take_while(|entry| entry.index < high)
                .cloned()
                .collect();
            (state.first_index, state.last_index, recent)
        };
        if low < first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > last + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let from_memory = recent.first().map_or(high, |entry| entry.index);
        let from_disk = (low..from_memory).map(|index| self.read_entry(index));
        let max_size = max_size.into().unwrap_or(u64::MAX);
        let mut entries = Vec::new();
        let mut size = 0u64;
        for entry in from_disk.chain(recent.into_iter().map(Ok)) {
            let entry = entry?;
            size += u64::from(entry.compute_size());
            if !entries.is_empty() && size > max_size {
                break;
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        let (snapshot_index, snapshot_term, first, last) = {
            let state = self.inner.state.read();
            let metadata = state.snapshot.get_metadata();
            (
                metadata.index,
                metadata.term,
                state.first_index,
                state.last_index,
            )
        };
        if index == snapshot_index {
            return Ok(snapshot_term);
        }
        if index < first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if index > last {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        match self.inner.state.read().term_of(index) {
            Some(term) => Ok(term),
            // Compacted or replaced since the check above.
            None => Ok(self.read_entry(index)?.term),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.inner.state.read().first_index)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.inner.state.read().last_index)
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let state = self.inner.state.read();
        if state.snapshot.get_metadata().index >= request_index {
            Ok(state.snapshot.clone())
        } else {
            Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        let mut entry = Entry {
            index,
            term,
            ..Default::default()
        };
        entry.set_data(data.to_vec().into());
        entry
    }

    fn indexes(store: &LogStore, low: u64, high: u64) -> Vec<(u64, u64)> {
        store
            .entries(low, high, None, GetEntriesContext::empty(false))
            .unwrap()
            .iter()
            .map(|e| (e.index, e.term))
            .collect()
    }

    #[test]
    fn the_log_survives_a_reopen_truncates_conflicts_and_compacts() {
        // Goal: what a Ready persists is there after a reopen; entries
        // from a new leader replace the conflicting tail; a compaction
        // keeps the snapshot's term answerable and refuses older reads.
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path(), &[1, 2, 3]).unwrap();
        assert_eq!(store.first_index().unwrap(), 1);
        assert_eq!(store.last_index().unwrap(), 0);
        assert_eq!(store.term(0).unwrap(), 0);
        let entries: Vec<Entry> = (1..=5).map(|i| entry(i, 1, b"x")).collect();
        let hard_state = HardState {
            term: 1,
            commit: 3,
            ..Default::default()
        };
        store.persist(&entries, Some(&hard_state), true).unwrap();
        store.persist(&[entry(4, 2, b"y")], None, true).unwrap();
        assert_eq!(store.last_index().unwrap(), 4);
        drop(store);

        let store = LogStore::open(dir.path(), &[9]).unwrap();
        let state = store.initial_state().unwrap();
        assert_eq!(state.conf_state.get_voters(), &[1, 2, 3]);
        assert_eq!(state.hard_state.commit, 3);
        assert_eq!(indexes(&store, 1, 5), [(1, 1), (2, 1), (3, 1), (4, 2)]);
        // A size limit still returns at least one entry.
        assert_eq!(
            store
                .entries(1, 5, Some(1), GetEntriesContext::empty(false))
                .unwrap()
                .len(),
            1
        );

        store.compact(3, b"height".to_vec()).unwrap();
        assert_eq!(store.first_index().unwrap(), 4);
        assert_eq!(store.term(3).unwrap(), 1);
        assert!(store.term(2).is_err());
        assert!(
            store
                .entries(2, 4, None, GetEntriesContext::empty(false))
                .is_err()
        );
        assert_eq!(store.snapshot(3, 2).unwrap().get_data(), b"height");
        assert!(store.snapshot(4, 2).is_err());
        drop(store);

        let store = LogStore::open(dir.path(), &[]).unwrap();
        assert_eq!(store.first_index().unwrap(), 4);
        assert_eq!(store.last_index().unwrap(), 4);
        assert!(store.persist(&[entry(2, 2, b"z")], None, true).is_err());
        assert!(store.persist(&[entry(9, 2, b"z")], None, true).is_err());

        // A snapshot from a leader replaces the whole log.
        let mut snapshot = Snapshot::default();
        snapshot.mut_metadata().index = 10;
        snapshot.mut_metadata().term = 3;
        snapshot
            .mut_metadata()
            .mut_conf_state()
            .set_voters(vec![1, 2, 3]);
        store.apply_snapshot(&snapshot).unwrap();
        assert_eq!(store.first_index().unwrap(), 11);
        assert_eq!(store.last_index().unwrap(), 10);
        assert_eq!(store.term(10).unwrap(), 3);
        assert_eq!(store.initial_state().unwrap().hard_state.commit, 10);
    }

    #[test]
    fn entries_read_from_memory_are_those_the_disk_holds() {
        // Goal: the recent entries served from memory are exactly what a
        // reopened log reads from the disk, after a new leader replaced a
        // tail, past the memory's bound, and after a compaction.
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path(), &[1]).unwrap();
        let all = |store: &LogStore| {
            let (first, last) = (store.first_index().unwrap(), store.last_index().unwrap());
            store
                .entries(first, last + 1, None, GetEntriesContext::empty(false))
                .unwrap()
        };
        let written: Vec<Entry> = (1..=5)
            .map(|i| entry(i, 1, format!("first {i}").as_bytes()))
            .collect();
        store.persist(&written, None, true).unwrap();
        store
            .persist(&[entry(4, 2, b"replaced")], None, true)
            .unwrap();
        let from_memory = all(&store);
        assert_eq!(from_memory.len(), 4);
        assert_eq!(from_memory[3].get_data(), b"replaced");
        drop(store);
        let store = LogStore::open(dir.path(), &[]).unwrap();
        assert_eq!(all(&store), from_memory, "as the disk holds them");

        // More entries than memory keeps: the oldest come from the disk.
        let more = RECENT_ENTRIES_MAX as u64 + 40;
        let written: Vec<Entry> = (5..5 + more)
            .map(|i| entry(i, 2, format!("more {i}").as_bytes()))
            .collect();
        store.persist(&written, None, true).unwrap();
        assert_eq!(store.inner.state.read().recent.len(), RECENT_ENTRIES_MAX);
        let from_memory = all(&store);
        store.compact(100, b"height".to_vec()).unwrap();
        let compacted = all(&store);
        assert_eq!(compacted[..], from_memory[100..], "entries 101 on");
        drop(store);
        let store = LogStore::open(dir.path(), &[]).unwrap();
        assert_eq!(all(&store), compacted);
    }

    #[test]
    fn a_commit_index_alone_is_answered_at_once_and_raised_again_on_open() {
        // Goal: a commit index moved alone is what Raft reads back at
        // once; after a reopen it may be behind (it was not written), but
        // never ahead, term and vote are kept, and `commit_at_least` raises
        // it to the blocks written.
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path(), &[1, 2, 3]).unwrap();
        let entries: Vec<Entry> = (1..=5).map(|i| entry(i, 2, b"x")).collect();
        let mut hard_state = HardState {
            term: 2,
            vote: 1,
            commit: 2,
            ..Default::default()
        };
        let wrote = store.persist(&entries, Some(&hard_state), true).unwrap();
        assert!(wrote.is_some(), "entries are written, and the write timed");
        // A hard state that moves only the commit index is not written.
        hard_state.commit = 3;
        assert_eq!(store.persist(&[], Some(&hard_state), true).unwrap(), None);
        store.set_commit(5);
        assert_eq!(store.initial_state().unwrap().hard_state.commit, 5);
        drop(store);

        let store = LogStore::open(dir.path(), &[]).unwrap();
        let reopened = store.initial_state().unwrap().hard_state;
        assert!((2..=5).contains(&reopened.commit));
        assert_eq!((reopened.term, reopened.vote), (2, 1));
        store.commit_at_least(4);
        assert!(store.initial_state().unwrap().hard_state.commit >= 4);

        // A new vote is written, with the commit index held in memory.
        store.set_commit(5);
        hard_state.term = 3;
        hard_state.vote = 2;
        hard_state.commit = 5;
        let wrote = store.persist(&[], Some(&hard_state), true).unwrap();
        assert!(wrote.is_some(), "a new term and vote are written");
        drop(store);
        let store = LogStore::open(dir.path(), &[]).unwrap();
        let reopened = store.initial_state().unwrap().hard_state;
        assert_eq!((reopened.term, reopened.vote, reopened.commit), (3, 2, 5));
    }
}
