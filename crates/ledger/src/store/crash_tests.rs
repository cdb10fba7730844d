//! A real process crash: a child process appends blocks with no syncs at
//! all and is killed with SIGKILL mid-stream; the reopened store must hold
//! every block the child reported appended, whole and chained.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use weft_protos::hash::block_header_hash;

use super::*;
use crate::testing::{header, synthetic_block};

/// Set in the child's environment to the store directory: the test then
/// runs as the writer instead of the checker.
const WRITER_ENV: &str = "WEFT_LEDGER_CRASH_WRITER";
/// The parent kills the writer after this many reported appends.
const APPENDS_BEFORE_KILL: u64 = 40;
/// Bounds on the writer, in case nobody kills it.
const WRITER_BLOCKS_MAX: u64 = 20_000;
const WRITER_TIME_MAX: Duration = Duration::from_secs(20);
const TXS_PER_BLOCK: usize = 4;

fn tx_id(number: u64, tx: usize) -> String {
    format!("crash-{number}-{tx}")
}

/// The child: appends chained blocks until killed (or the bounds), printing
/// each number once `append` has returned for it.
fn run_writer(dir: &Path) {
    let config = StoreConfig::new(dir).with_durability(Durability::None);
    let store = BlockStore::open(&config).expect("writer opens the store");
    let started = Instant::now();
    let mut previous: Option<Block> = None;
    let mut stdout = std::io::stdout().lock();
    for number in 0..WRITER_BLOCKS_MAX {
        if started.elapsed() > WRITER_TIME_MAX {
            break;
        }
        let ids: Vec<String> = (0..TXS_PER_BLOCK).map(|tx| tx_id(number, tx)).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let block = synthetic_block(number, previous.as_ref(), &ids, None);
        store.append(&block).expect("writer appends");
        writeln!(stdout, "appended {number}").expect("writer reports");
        stdout.flush().expect("writer flushes its report");
        previous = Some(block);
    }
}

#[test]
fn process_kill_loses_no_appended_block() {
    if let Some(dir) = std::env::var_os(WRITER_ENV) {
        run_writer(Path::new(&dir));
        return;
    }

    let dir = tempfile::TempDir::new().unwrap();
    let store_dir = dir.path().join("ledger");
    let test_name = format!(
        "{}::process_kill_loses_no_appended_block",
        module_path!()
            .split_once("::")
            .map_or(module_path!(), |(_, path)| path)
    );
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_name, "--nocapture", "--test-threads=1"])
        .env(WRITER_ENV, &store_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    // Read the reports on a thread, so waiting for them can time out.
    let stdout = child.stdout.take().unwrap();
    let (reports, reported) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(number) = line.strip_prefix("appended ")
                && reports.send(number.parse::<u64>().unwrap()).is_err()
            {
                break;
            }
        }
    });

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_reported = None;
    while last_reported.is_none_or(|last| last + 1 < APPENDS_BEFORE_KILL) {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match reported.recv_timeout(remaining) {
            Ok(number) => last_reported = Some(number),
            Err(error) => {
                let _ = child.kill();
                panic!("writer stopped reporting after {last_reported:?}: {error}");
            }
        }
    }
    // SIGKILL, most likely in the middle of the next append.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the writer was killed, not finished");
    // Reports already in the pipe were appended before the kill too.
    reader.join().unwrap();
    let last_reported = reported.try_iter().last().or(last_reported).unwrap();

    let store = BlockStore::open(&StoreConfig::new(&store_dir)).expect("reopens after the kill");
    let height = store.height();
    println!("writer killed after reporting block {last_reported}; recovered height {height}");
    assert!(
        height > last_reported,
        "height {height} lost block {last_reported}, which append had returned for"
    );
    // At most the one append in flight may have landed beyond the reports.
    assert!(
        height <= last_reported + 2,
        "height {height} after {last_reported}"
    );
    assert_eq!(store.durable_height(), height);

    // Every block is whole, chained, and indexed; nothing lies beyond.
    let mut previous: Option<Block> = None;
    for number in 0..height {
        let block = store
            .block(number)
            .unwrap()
            .expect("block below the height");
        let this = header(&block);
        assert_eq!(this.number, number);
        let expected = synthetic_block(
            number,
            previous.as_ref(),
            &(0..TXS_PER_BLOCK)
                .map(|tx| tx_id(number, tx))
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            None,
        );
        assert_eq!(
            block, expected,
            "block {number} is what the writer appended"
        );
        for tx in 0..TXS_PER_BLOCK {
            let location = store.tx_location(&tx_id(number, tx)).unwrap().unwrap();
            assert_eq!(location.block_number, number);
        }
        previous = Some(block);
    }
    assert_eq!(
        store.last_header_hash(),
        previous
            .as_ref()
            .map(|block| block_header_hash(header(block)))
    );
    assert_eq!(store.block(height).unwrap(), None);
    assert!(!store.contains_tx_id(&tx_id(height, 0)).unwrap());

    // The chain goes on from the recovered tail.
    let next = synthetic_block(height, previous.as_ref(), &["after-crash"], None);
    store.append(&next).unwrap();
}
