//! `weft bench` as a user runs it: each bench builds its own network, runs
//! the nodes as processes, and reports what it measured. Small runs here;
//! the figures themselves are in docs/benchmarks.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

/// Runs `weft bench <args>` with `--json` and `--dir` in `dir`; returns the
/// last line printed and the JSON results.
fn bench(dir: &Path, args: &[&str]) -> (String, serde_json::Value) {
    let json = dir.join("results.json");
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir.join("work"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (stdout.lines().last().unwrap().to_owned(), results)
}

#[test]
fn weft_bench_committer_reports_every_transaction_committed() {
    // Goal: the FastFabric peer experiment runs end to end (generated
    // blocks fed to a peer process) and reports what it measured; the bench
    // itself fails if the peer marks any of its valid transactions invalid.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("results.json");
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "bench",
            "committer",
            "--transactions",
            "1000",
            "--block-size",
            "50",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir.path().join("work"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .starts_with("committed 1000 tx in "),
        "{stdout}"
    );
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let run = &results[0];
    assert_eq!(run["transactions"], 1000);
    assert_eq!(run["valid"], 1000);
    assert_eq!(run["block_size"], 50);
    assert!(run["tx_per_second"].as_f64().unwrap() > 0.0);
    assert!(run["cpu_us_per_tx"].as_f64().unwrap() > 0.0);
}

#[test]
fn weft_bench_orderer_reports_every_envelope_ordered() {
    // Goal: the FastFabric orderer experiment runs end to end (signed
    // envelopes broadcast to an orderer process, blocks watched on Deliver)
    // for each envelope size asked for; the bench fails if an envelope is
    // refused or never delivered.
    let dir = tempfile::tempdir().unwrap();
    let (summary, results) = bench(
        dir.path(),
        &[
            "orderer",
            "--transactions",
            "600",
            "--envelope-bytes",
            "2048,4096",
            "--clients",
            "3",
        ],
    );
    assert!(summary.starts_with("ordered 600 tx in "), "{summary}");
    for (run, size) in results.as_array().unwrap().iter().zip([2048, 4096]) {
        assert_eq!(run["envelope_bytes"], size);
        assert_eq!(run["transactions"], 600);
        assert!(run["blocks"].as_u64().unwrap() >= 2, "{run}");
        assert!(run["tx_per_second"].as_f64().unwrap() > 0.0);
        assert!(run["cpu_us_per_envelope"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn weft_bench_orderer_runs_a_raft_cluster() {
    // Goal: the same experiment against three Raft orderer processes, the
    // streams spread over all of them (followers forward to the leader);
    // every envelope is answered SUCCESS and delivered, and the CPU of all
    // three nodes is counted.
    let dir = tempfile::tempdir().unwrap();
    let (summary, results) = bench(
        dir.path(),
        &[
            "orderer",
            "--consensus",
            "raft",
            "--nodes",
            "3",
            "--transactions",
            "600",
            "--envelope-bytes",
            "2048",
            "--clients",
            "3",
        ],
    );
    assert!(summary.starts_with("ordered 600 tx in "), "{summary}");
    let run = &results[0];
    assert_eq!(run["consensus"], "raft");
    assert_eq!(run["nodes"], 3);
    assert_eq!(run["send_to"], "all");
    assert_eq!(run["transactions"], 600);
    let by_node = run["cpu_seconds_by_node"].as_array().unwrap();
    assert_eq!(by_node.len(), 3);
    assert!(
        by_node.iter().all(|cpu| cpu.as_f64().unwrap() > 0.0),
        "{run}"
    );
    assert!(run["cpu_us_per_envelope"].as_f64().unwrap() > 0.0);
}

#[test]
fn weft_bench_endorser_gets_every_proposal_endorsed_native_and_through_the_shim() {
    // Goal: the endorser bench runs each workload (built-in kv and
    // transfer on created accounts, and kv through a chaincode written with
    // Fabric's Node.js shim) with one and several clients; the bench fails
    // if any proposal is not endorsed.
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let mut chaincode = Command::new("node")
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/js"))
        .args(["chaincode.js", &address, "kvshim:1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("node runs (CI installs it)");
    let mut stdout = std::io::BufReader::new(chaincode.stdout.take().unwrap());
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0
        && !line.contains("chaincode listening")
    {
        line.clear();
    }
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let (summary, results) = bench(
        dir.path(),
        &[
            "endorser",
            "--proposals",
            "300",
            "--clients",
            "1,6",
            "--workloads",
            "kv,transfer,shim",
            "--external",
            &address,
        ],
    );
    let _ = chaincode.kill();
    let _ = chaincode.wait();
    assert!(summary.starts_with("endorsed 300 tx in "), "{summary}");
    let runs: Vec<(String, u64)> = results
        .as_array()
        .unwrap()
        .iter()
        .map(|run| {
            assert_eq!(run["proposals"], 300, "{run}");
            assert!(run["cpu_us_per_proposal"].as_f64().unwrap() > 0.0, "{run}");
            assert!(run["sign_us_per_proposal"].as_f64().unwrap() > 0.0, "{run}");
            (
                run["workload"].as_str().unwrap().to_owned(),
                run["clients"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = ["kv", "transfer", "shim"]
        .iter()
        .flat_map(|w| [(w.to_string(), 1), (w.to_string(), 6)])
        .collect();
    assert_eq!(runs, expected);
}

#[test]
fn an_envelope_size_too_small_for_a_signed_transaction_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "orderer", "--envelope-bytes", "512", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--envelope-bytes 512"), "{stderr}");
}
