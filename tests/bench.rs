//! `weft bench` and `weft network up` as a user runs them: each bench
//! builds its own network, runs the nodes as processes, and reports what it
//! measured. Small runs here; the figures themselves are in
//! docs/benchmarks.md. Fabric's own load clients run here too, against
//! `weft network up` configured from its connection file: Hyperledger
//! Caliper through the Gateway, and a raw-protocol client
//! (tests/js/raw.js) that talks to the Endorser, Broadcast and Deliver
//! services directly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/kafka.rs"]
mod kafka_broker;
#[path = "support/node.rs"]
mod node;

use std::path::Path;
use std::process::Command;

/// Runs `weft bench` with `args`, requiring success and a last line in
/// the format scripts read; returns that line and the JSON results.
fn bench(dir: &Path, args: &[&str]) -> (String, serde_json::Value) {
    let run = bench_printing(dir, args);
    run.summary();
    (run.last_line().to_owned(), run.results)
}

/// Checks `--transactions`: a header, then one line per committed
/// transaction, in the order their proposals started, each VALID, whose
/// phases add up to its latency.
fn assert_transactions_file(path: &Path, committed: u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            "run,started_s,endorse_ms,broadcast_ms,ordering_ms,commit_ms,latency_ms,channel,\
             block,code"
        )
    );
    let rows: Vec<Vec<&str>> = lines.map(|line| line.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, committed, "{text}");
    let number = |field: &str| field.parse::<f64>().unwrap();
    let mut started = 0.0;
    for row in &rows {
        assert_eq!(row.len(), 10, "{row:?}");
        assert_eq!(
            (row[0], row[7], row[9]),
            ("0", "mychannel", "VALID"),
            "{row:?}"
        );
        assert!(number(row[1]) >= started, "out of order: {row:?}");
        started = number(row[1]);
        let phases: f64 = row[2..6].iter().map(|field| number(field)).sum();
        assert!((phases - number(row[6])).abs() < 0.01, "{row:?}");
    }
}

/// Checks that a bench run committed transactions, all VALID, with no
/// failure of any kind.
fn assert_all_committed_valid(results: &serde_json::Value) {
    assert!(results["committed"].as_u64().unwrap() > 0, "{results}");
    assert_eq!(results["valid"], results["committed"], "{results}");
    assert_eq!(results["failures"], serde_json::json!({}), "{results}");
}

/// What one `weft bench` run printed and wrote.
struct BenchRun {
    stdout: String,
    /// The progress lines and logs.
    stderr: String,
    /// Its `--json` file.
    results: serde_json::Value,
}

impl BenchRun {
    /// The last line, which scripts read.
    fn last_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }

    /// The figures of the last line; a panic if it has another format.
    fn summary(&self) -> Summary {
        Summary::parse(self.last_line())
    }
}

/// Runs `weft bench` with `args` (and a network directory under `dir`
/// unless it connects to one), requiring success.
fn bench_printing(dir: &Path, args: &[&str]) -> BenchRun {
    let work = dir.join("work");
    let mut args = args.to_vec();
    if !args.contains(&"--connect") {
        args.extend(["--dir", work.to_str().unwrap()]);
    }
    bench_with_json(&args, &dir.join("results.json"))
}

/// Runs `weft bench <args> --json <json>`, requiring success.
fn bench_with_json(args: &[&str], json: &Path) -> BenchRun {
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stdout}{stderr}");
    let results = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    BenchRun {
        stdout,
        stderr,
        results,
    }
}

/// The last line every bench prints: `<verb> <N> tx in <S> s: <X> tx/s,
/// p50 <a> ms, p95 <b> ms, p99 <c> ms`.
#[derive(Debug)]
struct Summary {
    verb: String,
    transactions: u64,
    seconds: f64,
    per_second: f64,
    p50_ms: f64,
}

impl Summary {
    /// The figures of `line`; a panic naming the line if it has another
    /// format.
    fn parse(line: &str) -> Self {
        let parsed = (|| {
            let (verb, rest) = line.split_once(' ')?;
            let (transactions, rest) = rest.split_once(" tx in ")?;
            let (seconds, rest) = rest.split_once(" s: ")?;
            let (per_second, rest) = rest.split_once(" tx/s, p50 ")?;
            let (p50, rest) = rest.split_once(" ms, p95 ")?;
            let (p95, p99) = rest.split_once(" ms, p99 ")?;
            let p99 = p99.strip_suffix(" ms")?;
            let number = |text: &str| text.parse::<f64>().ok().filter(|n| *n >= 0.0);
            let (p50_ms, p95_ms, p99_ms) = (number(p50)?, number(p95)?, number(p99)?);
            (p50_ms <= p95_ms && p95_ms <= p99_ms).then_some(())?;
            Some(Self {
                verb: verb.to_owned(),
                transactions: transactions.parse().ok()?,
                seconds: number(seconds)?,
                per_second: number(per_second)?,
                p50_ms,
            })
        })();
        parsed.unwrap_or_else(|| panic!("not a bench's last line: {line:?}"))
    }
}

#[test]
fn weft_bench_committer_reports_every_transaction_committed() {
    // Goal: the FastFabric peer experiment runs end to end (generated
    // blocks fed to a peer process) and reports what it measured; the bench
    // itself fails if the peer marks any of its valid transactions invalid.
    let dir = tempfile::tempdir().unwrap();
    let run = bench_printing(
        dir.path(),
        &["committer", "--transactions", "1000", "--block-size", "50"],
    );
    assert!(
        run.last_line().starts_with("committed 1000 tx in "),
        "{}",
        run.stdout
    );
    let results = run.results;
    let run = &results[0];
    assert_eq!(run["transactions"], 1000);
    assert_eq!(run["valid"], 1000);
    assert_eq!(run["block_size"], 50);
    assert!(run["tx_per_second"].as_f64().unwrap() > 0.0);
    assert!(run["cpu_us_per_tx"].as_f64().unwrap() > 0.0);
}

#[test]
fn weft_bench_floor_answers_every_transaction_and_counts_each_thread() {
    // Goal: the protocol's floor (a stream transaction's messages, synced
    // writes and signatures between six threads) runs every transaction to
    // its commit-status answer, each signature verified on the way, and
    // counts the CPU of every thread it names.
    let dir = tempfile::tempdir().unwrap();
    let run = bench_with_json(
        &["floor", "--rate", "200", "--duration", "4s"],
        &dir.path().join("floor.json"),
    );
    assert!(
        run.last_line().starts_with("committed 800 tx in "),
        "{}",
        run.stdout
    );
    let results = run.results;
    assert_eq!(results["committed"], 800);
    let threads = results["cpu_ms_per_tx"].as_object().unwrap();
    let mut servers = 0.0;
    for name in [
        "floor-orderer0",
        "floor-orderer1",
        "floor-orderer2",
        "floor-peer0",
        "floor-peer1",
    ] {
        let cpu = threads[name].as_f64().unwrap();
        assert!(cpu > 0.0, "{name}: {results}");
        servers += cpu;
    }
    assert!(threads["floor-client"].as_f64().unwrap() > 0.0, "{results}");
    let reported = results["servers_cpu_ms_per_tx"].as_f64().unwrap();
    assert!((reported - servers).abs() < 1e-9, "{results}");
    assert!(results["p50_ms"].as_f64().unwrap() > 0.0, "{results}");
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
fn weft_bench_orderer_measures_kafka_with_only_ids_and_with_whole_envelopes() {
    // Goal: FastFabric's orderer experiment on Kafka: two orderer
    // processes on a real broker, each envelope size measured with only
    // TxIDs through Kafka and with whole envelopes; every envelope is
    // answered SUCCESS and delivered, and the broker's CPU is reported
    // apart from the orderers'.
    let broker = kafka_broker::Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let pid = broker.pid().to_string();
    let address = broker.address();
    let (summary, results) = bench(
        dir.path(),
        &[
            "orderer",
            "--consensus",
            "kafka",
            "--nodes",
            "2",
            "--kafka-brokers",
            &address,
            "--kafka-pid",
            &pid,
            "--transactions",
            "600",
            "--envelope-bytes",
            "2048",
            "--clients",
            "3",
        ],
    );
    assert!(summary.starts_with("ordered 600 tx in "), "{summary}");
    let runs = results.as_array().unwrap();
    let modes: Vec<&str> = runs
        .iter()
        .map(|run| run["consensus"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["kafka-txid", "kafka-full"]);
    for run in runs {
        assert_eq!(run["transactions"], 600, "{run}");
        assert_eq!(run["nodes"], 2, "{run}");
        assert!(run["cpu_us_per_envelope"].as_f64().unwrap() > 0.0);
        assert!(
            run["broker_cpu_us_per_envelope"].as_f64().unwrap() > 0.0,
            "{run}"
        );
    }
    // Each run's topic, with every envelope it ordered, is deleted after
    // it: the broker renames the partition's directory at once and removes
    // it a minute later.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (deleted, kept): (Vec<String>, Vec<String>) = broker
            .partition_directories()
            .into_iter()
            .filter(|directory| directory.starts_with("bench-"))
            .partition(|directory| directory.ends_with("-delete"));
        if kept.is_empty() {
            assert!(!deleted.is_empty(), "the runs ordered on no topic");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the bench's topics stay on the broker: {kept:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn weft_bench_commits_on_a_network_ordering_through_kafka() {
    // Goal: `weft network up --consensus kafka` (through the bench's own
    // network) runs two orderers on a real broker, ordering TxIDs only,
    // and Fabric's client path commits every transaction VALID. Over
    // mutual TLS, so the orderers hand each other envelopes as the
    // channel's named consenters (an ID is published only once another
    // orderer took its envelope: refused shares would refuse every
    // transaction).
    let broker = kafka_broker::Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let address = broker.address();
    let (_, results) = bench(
        dir.path(),
        &[
            "--consensus",
            "kafka",
            "--kafka-brokers",
            &address,
            "--orderers",
            "2",
            "--orgs",
            "1",
            "--duration",
            "3s",
            "--clients",
            "8",
            "--workload",
            "1w",
            "--mutual-tls",
        ],
    );
    assert_all_committed_valid(&results);
    let channel = std::fs::read_to_string(dir.path().join("work/network/channel.yaml")).unwrap();
    assert!(channel.contains("OrdererType: kafka"), "{channel}");
    assert!(
        channel.contains(&format!(
            "Kafka: {{Brokers: [{address}], Payloads: TxId, Consenters: [{{Host: 127.0.0.1"
        )),
        "{channel}"
    );
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
    let mut chaincode = node::node()
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

/// A `weft network up` child process and what it printed.
struct NetworkUp {
    child: std::process::Child,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    printed: String,
}

impl NetworkUp {
    /// Starts `weft network up --dir dir <args>` and waits for `network ready`.
    fn start(dir: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["network", "up", "--dir"])
            .arg(dir)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut network = Self {
            child,
            stdout,
            printed: String::new(),
        };
        network.read_until("Ctrl-C stops the network");
        network
    }

    fn read_until(&mut self, wanted: &str) {
        use std::io::BufRead;
        loop {
            let mut line = String::new();
            let read = self.stdout.read_line(&mut line).unwrap();
            self.printed.push_str(&line);
            assert!(
                read > 0,
                "network up ended before {wanted:?}:\n{}",
                self.printed
            );
            if line.contains(wanted) {
                return;
            }
        }
    }

    /// Ctrl-C, as a user stops it; returns whether it exited cleanly.
    fn interrupt(mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        self.read_until("network stopped");
        self.child.wait().unwrap().success()
    }
}

impl Drop for NetworkUp {
    /// A failed test still stops the network (its nodes stop with it).
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            let _ = self.child.wait();
        }
    }
}

/// A base port for a test's network whose ports are free. A network
/// spans base..=base+25 and base+2001..=base+2002 (org2's peer); bases
/// stay within 10000..30000, below the kernel's ephemeral ports (32768 on
/// by default), so that while a test's network is stopped and resumed no
/// outgoing connection takes its ports. The networks that `weft bench`,
/// `weft chaos` and other tests start beside it take blocks of 1,000 ports
/// anywhere outside the ephemeral ports, each locked by its process
/// (`weft::reserve_ports`): the range is wide enough that a few of them
/// holding blocks leave room. `offset` keeps one process's tests apart,
/// the process ID concurrent test runs.
fn free_base_port(offset: u16) -> u16 {
    let start = 10_000 + (std::process::id() % 10) as u16 * 400 + offset;
    for candidate in (start..30_000).step_by(31) {
        let ports = [0, 2000]
            .into_iter()
            .flat_map(|span| (0..26).map(move |port| candidate + span + port));
        let free = ports
            .clone()
            .all(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        // Reserved, so that no bench run beside it takes them.
        if free && weft::reserve_ports(ports) {
            return candidate;
        }
    }
    panic!("no free ports");
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(name))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn http_get(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn weft_network_up_serves_fabric_clients_over_mutual_tls_stops_on_ctrl_c_and_resumes() {
    // Goal: one command gives a newcomer a Raft-ordered two-organisation
    // network with the built-in chaincodes defined, every endpoint (and
    // the Raft cluster) over mutual TLS with `--mutual-tls`, and a
    // connection file that Fabric's own Gateway client and `weft bench`
    // use as they are; Ctrl-C stops it and a second `network up` resumes
    // its ledger, still mutual TLS. (Server-only TLS runs in the
    // containers of deploy/containers.sh.)
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("net");
    let base = free_base_port(0);
    let network = NetworkUp::start(&data, &["--mutual-tls", "--base-port", &base.to_string()]);
    assert!(
        network.printed.contains("network ready"),
        "{}",
        network.printed
    );
    for chaincode in ["kv", "transfer", "smallbank"] {
        assert!(
            network.printed.contains(&format!(
                "chaincode {chaincode} version 1.0 sequence 1 committed"
            )),
            "{}",
            network.printed
        );
    }
    let connection_path = data.join("connection.yaml");
    assert!(
        network.printed.contains(
            &connection_path
                .canonicalize()
                .unwrap()
                .display()
                .to_string()
        )
    );
    let connection = connection_file(&data);
    assert_eq!(connection["channel"], "mychannel");
    assert_eq!(connection["tls"], true);
    assert_eq!(connection["orderers"].as_array().unwrap().len(), 3);
    let orgs = connection["organizations"].as_array().unwrap();
    assert_eq!(orgs.len(), 2);
    assert_eq!(orgs[1]["mspId"], "Org2MSP");
    assert_eq!(
        orgs[0]["peers"][0]["endpoint"],
        format!("127.0.0.1:{}", base + 1)
    );
    for path in [
        &orgs[0]["user"]["certificate"],
        &orgs[0]["user"]["privateKey"],
        &orgs[0]["peers"][0]["tlsCaCert"],
        &connection["orderers"][0]["tlsCaCert"],
    ] {
        assert!(Path::new(path.as_str().unwrap()).is_file(), "{path:?}");
    }

    // Fabric's Gateway client, given the connection file's endpoint, user,
    // TLS CA and client TLS certificate, submits and evaluates through
    // org1's peer over mutual TLS; the same client without its TLS
    // certificate, or in plaintext, is turned away.
    let gateway_args = [
        "gateway.js",
        orgs[0]["peers"][0]["endpoint"].as_str().unwrap(),
        orgs[0]["mspId"].as_str().unwrap(),
        orgs[0]["user"]["certificate"].as_str().unwrap(),
        orgs[0]["user"]["privateKey"].as_str().unwrap(),
        "mychannel",
    ];
    let tls_ca = orgs[0]["peers"][0]["tlsCaCert"].as_str().unwrap();
    let client_tls = &connection["clientTls"];
    run_node(gateway_args.iter().copied().chain([
        tls_ca,
        client_tls["certificate"].as_str().unwrap(),
        client_tls["privateKey"].as_str().unwrap(),
    ]));
    for (refused, extra) in [
        ("without a client certificate", vec![tls_ca]),
        ("in plaintext", vec![]),
    ] {
        let output = node::node()
            .args(gateway_args.iter().copied().chain(extra))
            .output()
            .unwrap();
        assert!(!output.status.success(), "a client {refused} got through");
    }

    // The Raft cluster port takes calls from the channel's consenters
    // only: not from a client without a certificate, nor from one whose
    // certificate the same TLS CA issued to someone else (the orderer
    // org's admin); another orderer is served.
    let orderers = data.join("crypto/ordererOrganizations/example.com");
    let cluster = format!("127.0.0.1:{}", base + 3);
    let pull = |certificate: Option<(&str, &str)>| {
        cluster_pull(
            &cluster,
            &orderers.join("tlsca/tlsca.example.com-cert.pem"),
            certificate.map(|(cert, key)| (orderers.join(cert), orderers.join(key))),
        )
    };
    assert!(pull(None).is_err());
    let admin = pull(Some((
        "users/Admin@example.com/tls/client.crt",
        "users/Admin@example.com/tls/client.key",
    )))
    .unwrap_err();
    assert_eq!(admin.code(), tonic::Code::PermissionDenied, "{admin}");
    assert!(admin.message().contains("mychannel"), "{admin}");
    let genesis = pull(Some((
        "orderers/orderer1.example.com/tls/server.crt",
        "orderers/orderer1.example.com/tls/server.key",
    )))
    .unwrap();
    assert!(!genesis.is_empty());

    // An operator redefines `kv` with `weft chaincode deploy`, which
    // presents the client TLS certificate it is given; without one, the
    // nodes turn it away before anything is approved.
    let crypto = data.join("crypto");
    let deploy = |client_certificate: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weft"));
        command
            .args([
                "chaincode",
                "deploy",
                "--channel",
                "mychannel",
                "--name",
                "kv",
            ])
            .args(["--sequence", "2", "--policy", "OR('Org1MSP.peer')"])
            .arg("--peers")
            .arg(format!(
                "org1={},org2={}",
                orgs[0]["peers"][0]["endpoint"].as_str().unwrap(),
                orgs[1]["peers"][0]["endpoint"].as_str().unwrap()
            ))
            .args([
                "--orderer",
                connection["orderers"][0]["endpoint"].as_str().unwrap(),
            ])
            .arg("--crypto")
            .arg(&crypto)
            .arg("--tls-ca")
            .arg(orderers.join("tlsca/tlsca.example.com-cert.pem"));
        for org in ["org1", "org2"] {
            command.arg("--tls-ca").arg(crypto.join(format!(
                "peerOrganizations/{org}.example.com/tlsca/tlsca.{org}.example.com-cert.pem"
            )));
        }
        if client_certificate {
            command
                .args(["--tls-cert", client_tls["certificate"].as_str().unwrap()])
                .args(["--tls-key", client_tls["privateKey"].as_str().unwrap()]);
        }
        command.output().unwrap()
    };
    let refused = deploy(false);
    assert!(!refused.status.success());
    assert!(!String::from_utf8_lossy(&refused.stdout).contains("approved"));
    let deployed = deploy(true);
    let stdout = String::from_utf8_lossy(&deployed.stdout);
    assert!(
        deployed.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&deployed.stderr)
    );
    assert!(
        stdout.contains("chaincode kv version 1.0 sequence 2 committed on channel mychannel"),
        "{stdout}"
    );

    // `weft bench --connect` drives the network with the transfer workload,
    // showing its progress every 2 s and ending with the line scripts read.
    let connect = ["--connect", connection_path.to_str().unwrap()];
    let transactions_path = dir.path().join("transactions.csv");
    let transactions_arg = ["--transactions", transactions_path.to_str().unwrap()];
    let run = bench_printing(
        dir.path(),
        &[
            &["--duration", "4s", "--clients", "8"],
            &connect[..],
            &transactions_arg[..],
        ]
        .concat(),
    );
    let results = &run.results;
    let summary = run.summary();
    assert_eq!(summary.verb, "committed");
    let committed = results["committed"].as_u64().unwrap();
    assert!(committed > 0, "{results}");
    assert_eq!(summary.transactions, committed);
    assert!(
        summary.seconds >= 4.0 && summary.p50_ms > 0.0,
        "{summary:?}"
    );
    let throughput = results["throughput"].as_f64().unwrap();
    assert!((summary.per_second - throughput).abs() < 1.0, "{summary:?}");
    // `  2.0 s: 1234 committed, 617 tx/s, 8 in flight`
    let progress = run.stderr.lines().any(|line| {
        line.contains(" s: ") && line.contains(" committed, ") && line.ends_with(" in flight")
    });
    assert!(progress, "no progress line in\n{}", run.stderr);
    assert_eq!(results["valid"].as_u64().unwrap(), committed, "{results}");
    assert_transactions_file(&transactions_path, committed);
    assert_eq!(results["orderers"], 3);
    // The peers' own figures, from their metrics.
    for figure in ["peer_validate_ms", "peer_mvcc_ms", "peer_ledger_ms"] {
        assert!(
            results[figure].as_f64().unwrap() > 0.0,
            "{figure}: {results}"
        );
    }
    for component in ["orderers", "peers", "bench client"] {
        let seconds = results["cpu_seconds"][component].as_f64().unwrap();
        assert!(seconds > 0.0, "{component}: {results}");
    }
    // A connection file makes the network: the options that would make
    // another are refused, naming themselves.
    for (option, value) in [("--orderers", "1"), ("--policy", "all"), ("--tls", "")] {
        let mut args = vec!["bench", option];
        args.extend((!value.is_empty()).then_some(value));
        let refused = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(args)
            .args(connect)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{option}: {stderr}");
        assert!(
            stderr.contains(option) && stderr.contains("--connect"),
            "{option}: {stderr}"
        );
    }

    let peer_ops = orgs[0]["peers"][0]["operations"]
        .as_str()
        .unwrap()
        .to_owned();
    let height = metric(&http_get(&peer_ops, "/metrics"), "ledger_blockchain_height");
    assert!(height > 10.0, "{height}");
    assert!(network.interrupt(), "network up did not stop cleanly");
    // Every node stopped: the ports are free again.
    for port in [base, base + 1, base + 2001] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} still taken"
        );
    }

    // The same directory resumes the same network and ledger; options that
    // contradict it are refused.
    let refused = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["network", "up", "--orderers", "1", "--dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--orderers"));
    let network = NetworkUp::start(&data, &[]);
    assert!(
        network.printed.contains("resuming the network"),
        "{}",
        network.printed
    );
    assert_eq!(connection_file(&data)["tls"], true);
    assert!(connection_file(&data)["clientTls"].is_object());
    assert!(!network.printed.contains("approved"), "{}", network.printed);
    let resumed = metric(&http_get(&peer_ops, "/metrics"), "ledger_blockchain_height");
    assert!(resumed >= height, "{resumed} < {height}");
    assert!(network.interrupt());
}

#[test]
fn weft_bench_runs_the_papers_workloads_with_no_failures() {
    // Goal: every workload of the papers, closed and open loop, commits
    // with the outcome it should have: all VALID where transactions do not
    // contend, some MVCC conflicts where 100 keys are shared.
    let dir = tempfile::tempdir().unwrap();
    let (network, data) = solo_network(dir.path(), 100, &[]);
    let connection = data.join("connection.yaml");
    let run = |workload: &str, extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["--workload", workload, "--duration", "2s"];
        args.extend_from_slice(extra);
        args.extend(["--connect", connection.to_str().unwrap()]);
        let (_, results) = bench(dir.path(), &args);
        assert!(
            results["committed"].as_u64().unwrap() > 0,
            "{workload}: {results}"
        );
        assert_eq!(
            results["failures"],
            serde_json::json!({}),
            "{workload}: {results}"
        );
        results
    };
    for workload in ["1w", "3w", "5w", "3rw", "5rw", "read-insert", "smallbank"] {
        let results = run(workload, &["--clients", "4"]);
        assert_eq!(
            results["valid"], results["committed"],
            "{workload}: {results}"
        );
    }
    let open = run("1rw", &["--rate", "40", "--clients", "4"]);
    assert_eq!(open["loop_kind"], "open");
    assert_eq!(open["valid"], open["committed"], "{open}");
    // 100 shared keys, half of the transactions updates: goodput below
    // throughput, and the difference is MVCC conflicts.
    let contended = run("read-update", &["--keys", "100", "--clients", "16"]);
    let conflicts = contended["codes"]["MVCC_READ_CONFLICT"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(
        contended["valid"].as_u64().unwrap() + conflicts,
        contended["committed"].as_u64().unwrap(),
        "{contended}"
    );
    assert!(network.interrupt());
}

#[test]
fn weft_bench_starts_a_network_of_its_own() {
    // Goal: with no connection file, `weft bench` builds, runs and stops a
    // network itself (the README's main job, shortened), here one that
    // requires mutual TLS of its clients; a sweep of block sizes gets a
    // network for each and measures every rate on each.
    let dir = tempfile::tempdir().unwrap();
    let run = bench_printing(
        dir.path(),
        &[
            "--orderers",
            "1",
            "--mutual-tls",
            "--duration",
            "2s",
            "--clients",
            "4",
            // Shaped as Fabric's load tools are: a connection and a
            // Broadcast stream per pair of clients.
            "--connections",
            "2",
        ],
    );
    let (printed, results) = (&run.stdout, &run.results);
    assert_eq!(
        results["client_shape"], "2 connections to each peer with a Broadcast stream each",
        "{results}"
    );
    assert_eq!(
        run.summary().transactions,
        results["committed"].as_u64().unwrap()
    );
    // The Markdown report names every phase and component.
    for row in [
        "| throughput (tx/s) |",
        "| latency p50 / p95 / p99 (ms) |",
        "| endorsement (ms) |",
        "| broadcast (ms) |",
        "| ordering (ms) |",
        "| commit (ms) |",
        "| peer VSCC / MVCC / ledger per tx (ms) |",
        "| server CPU per tx (ms) |",
        "| blocks (tx per block) |",
        "| CPU per tx / per block by node (ms) |",
    ] {
        assert!(printed.contains(row), "{row} missing from\n{printed}");
    }
    // Every node's CPU is reported per transaction and per block, and a
    // block holds at least one transaction.
    assert!(results["blocks"].as_u64().unwrap() > 0, "{results}");
    assert!(
        results["transactions_per_block"].as_f64().unwrap() >= 1.0,
        "{results}"
    );
    for per in ["node_cpu_ms_per_tx", "node_cpu_ms_per_block"] {
        let nodes: Vec<&String> = results[per].as_object().unwrap().keys().collect();
        assert_eq!(
            nodes,
            [
                "orderer0.example.com",
                "peer0.org1.example.com",
                "peer0.org2.example.com"
            ],
            "{results}"
        );
    }
    assert!(
        printed.contains("| CPU seconds | bench client "),
        "{printed}"
    );
    // Each phase is timed at the client; commit starts when the block
    // leaves the orderer, which the bench follows.
    let phase = |name: &str, quantile: &str| results[name][quantile].as_f64().unwrap();
    assert!(phase("commit_ms", "p50") > 0.0, "{results}");
    for name in ["endorse_ms", "broadcast_ms", "ordering_ms", "commit_ms"] {
        assert!(
            phase(name, "p50") <= phase("latency_ms", "p99"),
            "{name}: {results}"
        );
    }
    let network = connection_file(&dir.path().join("work/network"));
    assert_eq!(network["tls"], true, "{network}");
    assert!(network["clientTls"].is_object(), "{network}");
    assert_eq!(results["workload"], "transfer");
    assert!(results["valid"].as_u64().unwrap() > 0, "{results}");
    assert!(
        results["transaction_bytes"].as_f64().unwrap() > 2_000.0,
        "{results}"
    );

    let sweep_dir = tempfile::tempdir().unwrap();
    let (last, sweep) = bench(
        sweep_dir.path(),
        &[
            "--orderers",
            "1",
            "--block-size",
            "5,50",
            "--rate",
            "20,40",
            "--duration",
            "1s",
            "--clients",
            "8",
        ],
    );
    assert!(last.starts_with("committed "), "{last}");
    let grid: Vec<(u64, f64)> = sweep
        .as_array()
        .unwrap()
        .iter()
        .map(|run| {
            assert!(run["valid"].as_u64().unwrap() > 0, "{run}");
            (
                run["block_size"].as_u64().unwrap(),
                run["offered_rate"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(grid, [(5, 20.0), (5, 40.0), (50, 20.0), (50, 40.0)]);
}

#[test]
fn weft_bench_streams_on_a_raft_network() {
    // Goal: `weft bench --stream` starts a Raft network whose channel
    // streams (checkpoint every 10 transactions or 1 s) and whose peers
    // report commit status at applied; its 8 clients see every
    // transaction committed VALID, with no failures, and the bench reports
    // the Gateway's CommitStatus latency (applied) beside the commit
    // events' (durable), having checked both agree. With at most 8
    // transactions in flight no block reaches the count alone, so the
    // peers' chain has unsigned blocks between the checkpoints they
    // verified. A second channel beside it cuts blocks, every one signed.
    // The clients endorse and submit through their peer's Gateway, as
    // Fabric's Gateway client libraries do, many at once over its shared
    // Broadcast streams.
    let dir = tempfile::tempdir().unwrap();
    let (_, results) = bench(
        dir.path(),
        &[
            "--api",
            "gateway",
            "--stream",
            "--channels",
            "2",
            "--stream-channels",
            "1",
            "--checkpoint-transactions",
            "10",
            "--checkpoint-interval",
            "1s",
            "--commit-status",
            "applied",
            "--duration",
            "3s",
            "--clients",
            "8",
            "--workload",
            "1w",
        ],
    );
    assert_all_committed_valid(&results);
    assert!(
        results["client_shape"].as_str().is_some_and(
            |shape| shape.contains("through the creator's peer's Gateway (Endorse, Submit)")
        ),
        "{results}"
    );
    let applied = &results["commit_status_latency_ms"];
    assert!(
        applied["p50"].as_f64().is_some_and(|ms| ms > 0.0),
        "{results}"
    );
    let network = dir.path().join("work/network");
    let channel = std::fs::read_to_string(network.join("channel.yaml")).unwrap();
    assert!(
        channel.contains("StreamMode: {CheckpointTransactions: 10, CheckpointInterval: 1s}"),
        "{channel}"
    );
    let peer = std::fs::read_to_string(network.join("peer0.org1.example.com/peer.yaml")).unwrap();
    assert!(peer.contains("commitStatus: applied"), "{peer}");
    // The peer's chain: blocks between checkpoints carry no signature.
    let signed = |channel: &str| -> Vec<bool> {
        let store = weft_ledger::BlockStore::open(&weft_ledger::StoreConfig::new(network.join(
            format!("peer0.org1.example.com/data/ledgers/{channel}/blocks"),
        )))
        .unwrap();
        (1..store.height())
            .map(|number| {
                let block = store.block(number).unwrap().unwrap();
                weft_protos::block::signature_count(&block) > 0
            })
            .collect()
    };
    let streamed = signed("mychannel");
    assert!(
        streamed.contains(&true) && streamed.contains(&false),
        "{streamed:?}"
    );
    // The block channel: transactions committed, every block signed.
    let by_channel = &results["committed_by_channel"];
    assert!(by_channel["mychannel2"].as_u64().unwrap() > 0, "{results}");
    let blocks = signed("mychannel2");
    assert!(!blocks.is_empty() && !blocks.contains(&false), "{blocks:?}");
}

#[test]
fn weft_bench_spreads_clients_over_channels_under_a_table_iii_policy() {
    // Goal: a Raft network of 4 organisations and 3 channels, whose
    // chaincodes need any 2 organisations (Thakkar's AND/OR policy 2),
    // commits every transaction VALID on all channels: each channel has
    // its own Raft group and ledgers, and the bench endorses with 2 orgs.
    let dir = tempfile::tempdir().unwrap();
    let (last, results) = bench(
        dir.path(),
        &[
            "--orgs",
            "4",
            "--policy",
            "and-or-2",
            "--channels",
            "3",
            "--duration",
            "2s",
            "--clients",
            "6",
        ],
    );
    assert!(last.starts_with("committed "), "{last}");
    assert_eq!(results["channels"], 3, "{results}");
    assert_eq!(results["organisations"], 4, "{results}");
    assert_eq!(results["orderers"], 3, "{results}");
    let policy = results["endorsement_policy"].as_str().unwrap();
    assert!(
        policy.starts_with("OR(AND('Org1MSP.peer','Org2MSP.peer'),"),
        "{policy}"
    );
    let committed = results["committed"].as_u64().unwrap();
    assert!(committed > 0, "{results}");
    assert_eq!(results["valid"].as_u64().unwrap(), committed, "{results}");
    for channel in ["mychannel", "mychannel2", "mychannel3"] {
        let on_channel = results["committed_by_channel"][channel].as_u64().unwrap();
        assert!(on_channel > 0, "nothing on {channel}: {results}");
    }
}

#[test]
fn ctrl_c_stops_weft_bench_and_the_network_it_started() {
    // Goal: interrupting a bench mid-measurement stops the nodes it
    // started (they run in process groups of their own, so the terminal's
    // Ctrl-C does not reach them) and frees their ports.
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "--orderers", "1", "--duration", "5m", "--dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        printed.push_str(&line);
        printed.push('\n');
        if line.starts_with("weft bench: workload") {
            break;
        }
    }
    assert!(printed.contains("weft bench: workload"), "{printed}");
    interrupt_expecting_failure(child);
    let plan = std::fs::read_to_string(dir.path().join("network/network.yaml")).unwrap();
    let base: u16 = plan
        .lines()
        .find_map(|line| line.strip_prefix("basePort: "))
        .unwrap()
        .parse()
        .unwrap();
    for port in [base, base + 1, base + 2001] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} still taken"
        );
    }
}

#[test]
fn ctrl_c_while_a_network_starts_stops_the_nodes_started_so_far() {
    // Goal: a Ctrl-C before `network up` is ready (here: once the first
    // orderer serves) leaves no node running: the command stops the nodes
    // it started, says it was interrupted and exits with failure.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("net");
    let base = free_base_port(400);
    let child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["network", "up", "--base-port", &base.to_string(), "--dir"])
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::net::TcpStream::connect(("127.0.0.1", base)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "orderer0 never served"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    interrupt_expecting_failure(child);
    // No process names the network's directory in its command line.
    let needle = data.to_str().unwrap().as_bytes();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let cmdline = std::fs::read(entry.ok()?.path().join("cmdline")).ok()?;
            cmdline
                .windows(needle.len())
                .any(|window| window == needle)
                .then(|| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect();
    assert!(left.is_empty(), "nodes left running: {left:?}");
    assert!(std::net::TcpListener::bind(("127.0.0.1", base)).is_ok());
}

#[test]
fn weft_network_up_starts_a_killed_node_again_and_the_bench_gives_up_on_a_stalled_one() {
    // Goal: under `weft network up`, a SIGKILL of one Raft orderer or of
    // the peer stops nothing else: the node is reported and started again,
    // and the network commits as before. A peer that stalls (SIGSTOP)
    // under `weft bench` makes its transactions unconfirmed after
    // --tx-timeout, and the bench still ends with its results.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("net");
    let base = free_base_port(500).to_string();
    let mut network = NetworkUp::start(&data, &["--orgs", "1", "--base-port", &base]);
    let connection = connection_file(&data);
    let connect = data.join("connection.yaml");
    let connect = connect.to_str().unwrap();
    let commits = |label: &str| {
        let (_, results) = bench(
            dir.path(),
            &[
                "--connect",
                connect,
                "--duration",
                "2s",
                "--clients",
                "4",
                "--workload",
                "1w",
            ],
        );
        assert!(
            results["committed"].as_u64().unwrap() > 0,
            "{label}: {results}"
        );
        assert_eq!(
            results["failures"],
            serde_json::json!({}),
            "{label}: {results}"
        );
    };
    commits("before any kill");
    for (node, operations) in [
        (
            "orderer1.example.com",
            &connection["orderers"][1]["operations"],
        ),
        (
            "peer0.org1.example.com",
            &connection["organizations"][0]["peers"][0]["operations"],
        ),
    ] {
        let pid = node_pid(&data, node);
        signal(pid, "-KILL");
        network.read_until(&format!("{node} stopped"));
        assert!(
            network.printed.contains("starting it again in"),
            "{}",
            network.printed
        );
        network.read_until(&format!("{node} started again"));
        let operations = operations.as_str().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !std::net::TcpStream::connect(operations).is_ok_and(|_| {
            http_get(operations, "/healthz")
                .lines()
                .next()
                .is_some_and(|status| status.contains(" 200"))
        }) {
            assert!(
                std::time::Instant::now() < deadline,
                "{node} never healthy again"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_ne!(node_pid(&data, node), pid);
        // A killed leader costs an election (5 to 10 s with Fabric's
        // ticks) before the cluster orders again.
        wait_for_one_raft_leader(&connection);
        commits(&format!("after {node} was killed"));
    }

    // A stalled peer: its transactions are given up on, not waited for.
    let peer = node_pid(&data, "peer0.org1.example.com");
    let json = dir.path().join("stalled.json");
    let mut bench = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "bench",
            "--connect",
            connect,
            "--duration",
            "4s",
            "--clients",
            "4",
        ])
        .args(["--workload", "1w", "--tx-timeout", "2s", "--json"])
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut progress = std::io::BufReader::new(bench.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains(" committed, ") {
        line.clear();
        let read = std::io::BufRead::read_line(&mut progress, &mut line).unwrap();
        assert!(read > 0, "the bench ended before measuring");
    }
    signal(peer, "-STOP");
    let output = bench.wait_with_output();
    signal(peer, "-CONT");
    let output = output.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.lines().last().unwrap().starts_with("committed "),
        "{stdout}"
    );
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(results["unconfirmed"].as_u64().unwrap() > 0, "{results}");
    assert!(
        stdout.contains("| unconfirmed (no commit event within --tx-timeout) |"),
        "{stdout}"
    );
    assert!(network.interrupt());
}

/// Waits until every orderer of the network of `connection` follows the
/// same Raft leader.
#[test]
fn weft_chaos_kills_and_stalls_nodes_under_load_and_the_audit_finds_nothing_lost() {
    // Goal: `weft chaos` as an operator runs it: a default network (3 Raft
    // orderers, 2 organisations) under Gateway load, six seeded faults
    // (this seed kills and stalls orderers, the Raft leader whenever it is
    // the one picked), then the audit of every node's chain against what
    // the clients were told. Nothing a client saw committed is lost or
    // duplicated, all nodes hold one chain, and the network commits after
    // the last fault.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("chaos.json");
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["chaos", "--rounds", "6", "--seed", "11", "--clients", "6"])
        .arg("--dir")
        .arg(dir.path().join("work"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert_eq!(
        stdout.lines().last(),
        Some("chaos: 0 lost, 0 duplicated: passed"),
        "{stdout}"
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["seed"], 11);
    assert_eq!(
        report["kills"].as_u64().unwrap() + report["stalls"].as_u64().unwrap(),
        6,
        "{report}"
    );
    assert!(report["kills"].as_u64().unwrap() > 0, "{report}");
    let verdict = &report["verdict"];
    assert!(verdict["confirmed_valid"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(verdict["lost"], serde_json::json!([]), "{report}");
    assert_eq!(verdict["duplicated"], serde_json::json!([]), "{report}");
    assert_eq!(verdict["disagreements"], serde_json::json!([]), "{report}");
    assert!(verdict["height"].as_u64().unwrap() > 9, "{report}");
    assert!(
        report["confirmed_after_last_fault"].as_u64().unwrap() > 0,
        "{report}"
    );
    // Every fault was recovered from, and timed.
    assert_eq!(report["recovery_seconds"].as_array().unwrap().len(), 6);
}

fn wait_for_one_raft_leader(connection: &serde_json::Value) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let leaders: Vec<f64> = connection["orderers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|orderer| {
                let metrics = http_get(orderer["operations"].as_str().unwrap(), "/metrics");
                metric(&metrics, "consensus_etcdraft_leader_id")
            })
            .collect();
        if leaders[0] > 0.0 && leaders.iter().all(|leader| *leader == leaders[0]) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no single Raft leader: {leaders:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The process ID of the node `name` of the network in `data`, found by
/// its config path on its command line.
fn node_pid(data: &Path, name: &str) -> u32 {
    let needle = data.join(name);
    let needle = needle.to_str().unwrap().as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            cmdline
                .windows(needle.len())
                .any(|window| window == needle)
                .then_some(pid)
        })
        .next()
        .unwrap_or_else(|| panic!("{name} is not running"))
}

/// Sends `signal` (as `kill` spells it) to process `pid`.
fn signal(pid: u32, signal: &str) {
    assert!(
        Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// Ctrl-C to a command still starting or measuring: it must exit with
/// failure, saying on standard error that it was interrupted.
fn interrupt_expecting_failure(child: std::process::Child) {
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
}

/// Pulls block 0 of mychannel from the Raft cluster endpoint at `address`
/// over TLS, trusting `ca` and presenting `certificate` (PEM certificate
/// and key files), if any; the block's bytes.
fn cluster_pull(
    address: &str,
    ca: &Path,
    certificate: Option<(std::path::PathBuf, std::path::PathBuf)>,
) -> Result<Vec<u8>, tonic::Status> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    use weft_protos::cluster::PullRequest;
    use weft_protos::cluster::cluster_client::ClusterClient;

    let mut tls =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()));
    if let Some((cert, key)) = certificate {
        tls = tls.identity(Identity::from_pem(
            std::fs::read(cert).unwrap(),
            std::fs::read(key).unwrap(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let channel = weft_protos::dial::endpoint(address, Some(&tls))
            .unwrap()
            .connect()
            .await
            .map_err(|error| tonic::Status::unavailable(error.to_string()))?;
        let mut blocks = ClusterClient::new(channel)
            .pull(PullRequest {
                channel: "mychannel".to_owned(),
                start: 0,
                end: 1,
            })
            .await?
            .into_inner();
        let block = blocks
            .message()
            .await?
            .ok_or_else(|| tonic::Status::not_found("no block"))?;
        Ok(block.block.to_vec())
    })
}

/// Runs `node <args>` in tests/js (Fabric's JavaScript clients); returns
/// its standard output once it exited successfully.
fn run_node<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    node::stdout_of(node::node().args(args))
}

/// `weft network up` with a solo orderer and `options` in `dir`/net, on
/// ports of its own (`port_offset` tells concurrent tests apart); returns
/// the network and its data directory.
fn solo_network(dir: &Path, port_offset: u16, options: &[&str]) -> (NetworkUp, std::path::PathBuf) {
    let data = dir.join("net");
    let base = free_base_port(port_offset).to_string();
    let mut args = vec!["--orderers", "1", "--base-port", &base];
    args.extend_from_slice(options);
    let network = NetworkUp::start(&data, &args);
    (network, data)
}

/// The connection file of a network `weft network up --dir dir` started.
fn connection_file(dir: &Path) -> serde_json::Value {
    serde_yaml::from_slice(&std::fs::read(dir.join("connection.yaml")).unwrap()).unwrap()
}

/// Writes Caliper's network config for the network of `connection`, and
/// the connection profile it names, into `dir`; returns the config's path.
/// Caliper submits as the first organisation's user, through the Gateway
/// of that organisation's first peer, which gathers the endorsements the
/// chaincodes' policy asks for.
fn caliper_network_config(connection: &serde_json::Value, dir: &Path) -> std::path::PathBuf {
    let org = &connection["organizations"][0];
    let peer = &org["peers"][0];
    let profile = dir.join("caliper-profile.yaml");
    let write = |path: &Path, value: serde_json::Value| {
        std::fs::write(path, serde_yaml::to_string(&value).unwrap()).unwrap();
    };
    write(
        &profile,
        serde_json::json!({
            "name": "weft",
            "version": "1.0.0",
            "client": {"organization": org["name"]},
            "organizations": {
                org["name"].as_str().unwrap(): {"mspid": org["mspId"], "peers": [peer["name"]]},
            },
            "peers": {
                peer["name"].as_str().unwrap(): {
                    "url": format!("grpc://{}", peer["endpoint"].as_str().unwrap()),
                },
            },
        }),
    );
    let network = dir.join("caliper-network.yaml");
    write(
        &network,
        serde_json::json!({
            "name": "weft",
            "version": "2.0.0",
            "caliper": {"blockchain": "fabric", "sutOptions": {"mutualTls": false}},
            "channels": [{
                "channelName": connection["channel"],
                "contracts": [{"id": "kv"}, {"id": "smallbank"}],
            }],
            "organizations": [{
                "mspid": org["mspId"],
                "identities": {"certificates": [{
                    "name": org["user"]["name"],
                    "clientPrivateKey": {"path": org["user"]["privateKey"]},
                    "clientSignedCert": {"path": org["user"]["certificate"]},
                }]},
                "connectionProfile": {"path": profile, "discover": false},
            }],
        }),
    );
    network
}

#[test]
fn hyperledger_caliper_runs_kv_and_smallbank_rounds_against_weft_network_up() {
    // Goal: the standard Fabric benchmark tool, Hyperledger Caliper 0.6
    // bound to fabric:2.5 (its Gateway connector, with the Gateway client
    // that binding installs: tests/js/caliper), drives a `weft network up`
    // network unchanged, configured from the connection file it writes:
    // rounds of kv puts, smallbank account creations and smallbank
    // operations, every transaction endorsed, ordered and committed: on a
    // block channel and on a stream channel.
    for (port_offset, options) in [(200, &[][..]), (215, &["--stream"][..])] {
        caliper_rounds_succeed(port_offset, options);
    }
}

/// Caliper's rounds against `weft network up --orderers 1` with `options`:
/// every transaction of every round succeeds.
fn caliper_rounds_succeed(port_offset: u16, options: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (network, data) = solo_network(dir.path(), port_offset, options);
    let connection = connection_file(&data);
    let network_config = caliper_network_config(&connection, dir.path());
    // (label, transactions, workload module, its arguments)
    let channel = &connection["channel"];
    let rounds = [
        (
            "kv-put",
            60,
            "kv-put.js",
            serde_json::json!({"channel": channel}),
        ),
        (
            "smallbank-create",
            40,
            "smallbank.js",
            serde_json::json!({"channel": channel, "create": true}),
        ),
        (
            "smallbank-operations",
            40,
            "smallbank.js",
            serde_json::json!({"channel": channel}),
        ),
    ];
    let bench_config = dir.path().join("caliper-bench.yaml");
    let round_configs: Vec<serde_json::Value> = rounds
        .iter()
        .map(|(label, count, module, arguments)| {
            serde_json::json!({
                "label": label,
                "txNumber": count,
                "rateControl": {"type": "fixed-rate", "opts": {"tps": 30}},
                "workload": {"module": module, "arguments": arguments},
            })
        })
        .collect();
    let bench = serde_json::json!({
        "test": {"name": "weft", "workers": {"number": 1}, "rounds": round_configs},
    });
    std::fs::write(&bench_config, serde_yaml::to_string(&bench).unwrap()).unwrap();

    let stdout = node::stdout_of(
        node::caliper_node()
            .args([
                "node_modules/@hyperledger/caliper-cli/caliper.js",
                "launch",
                "manager",
                "--caliper-flow-only-test",
                // The workload modules' folder, where node runs.
                "--caliper-workspace",
                ".",
            ])
            .arg("--caliper-networkconfig")
            .arg(&network_config)
            .arg("--caliper-benchconfig")
            .arg(&bench_config)
            .arg("--caliper-report-path")
            .arg(dir.path().join("report.html"))
            // Caliper waits this long after each round for its progress
            // report (5 s by default).
            .args(["--caliper-progress-reporting-interval", "1000"]),
    );
    // Caliper's report table: | Name | Succ | Fail | ...
    let results = stdout
        .split("### All test results ###")
        .nth(1)
        .unwrap_or_else(|| panic!("no Caliper report in\n{stdout}"));
    for (label, count, _, _) in rounds {
        let row: Vec<&str> = results
            .lines()
            .find(|line| line.starts_with(&format!("| {label} ")))
            .unwrap_or_else(|| panic!("no round {label} in\n{results}"))
            .split('|')
            .map(str::trim)
            .collect();
        assert_eq!(
            row[2..4],
            [count.to_string().as_str(), "0"],
            "{options:?} {label}: {results}"
        );
    }
    assert!(network.interrupt());
}

#[test]
fn raw_protocol_clients_endorse_broadcast_and_deliver_as_on_fabric() {
    // Goal: a client that bypasses the Gateway, as Fabric's load tools do
    // (tests/js/raw.js: Fabric's own JavaScript protobufs and gRPC service
    // stubs, its own signatures), gets Fabric's answers from every service:
    // endorsements from each organisation's peer, Broadcast answered per
    // envelope (FORBIDDEN for a forged signature, SUCCESS for the
    // transaction), a DeliverFiltered stream of filtered blocks only, in
    // which the transaction shows up VALID with its chaincode event, and a
    // seek to Newest answered at once by the newest block and SUCCESS, on
    // the peer and on the orderer. On a block channel and on a stream
    // channel; every node a thread of the one `network up` process
    // (--in-process).
    for (port_offset, options) in [
        (300, &["--in-process"][..]),
        (315, &["--in-process", "--stream"][..]),
    ] {
        raw_clients_get_fabric_answers(port_offset, options);
    }
}

/// tests/js/raw.js against `weft network up --orderers 1` with `options`.
fn raw_clients_get_fabric_answers(port_offset: u16, options: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (network, data) = solo_network(dir.path(), port_offset, options);
    let connection = connection_file(&data);
    let stdout = run_node(["raw.js".to_owned(), connection.to_string()]);
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();

    // Endorsed by both organisations' peers, with the same result.
    let endorsers: Vec<(&serde_json::Value, &serde_json::Value)> = seen["endorsements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (&e["status"], &e["endorser"]))
        .collect();
    assert_eq!(
        endorsers,
        [
            (&serde_json::json!(200), &serde_json::json!("Org1MSP")),
            (&serde_json::json!(200), &serde_json::json!("Org2MSP")),
        ],
        "{seen}"
    );
    assert_eq!(seen["samePayloads"], true, "{seen}");
    assert_eq!(
        seen["broadcast"],
        serde_json::json!(["FORBIDDEN", "SUCCESS"]),
        "{seen}"
    );

    // DeliverFiltered from the oldest block: filtered blocks only, in
    // order, up to the one holding the transaction.
    let filtered = &seen["filtered"];
    assert_eq!(filtered["timedOut"], false, "{seen}");
    let messages = filtered["messages"].as_array().unwrap();
    let numbers: Vec<u64> = messages
        .iter()
        .map(|m| {
            m["filteredBlock"]
                .as_u64()
                .unwrap_or_else(|| panic!("not a filtered block: {m}"))
        })
        .collect();
    let tx_block = seen["txBlock"].as_u64().unwrap();
    assert_eq!(numbers, (0..=tx_block).collect::<Vec<_>>(), "{seen}");
    // The genesis block's config transaction has no actions; the kv put
    // has its event, without the payload.
    let genesis = &messages[0]["transactions"][0];
    assert_eq!(
        (&genesis["type"], &genesis["events"]),
        (&serde_json::json!("CONFIG"), &serde_json::Value::Null),
        "{seen}"
    );
    let tx = messages[tx_block as usize]["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tx| tx["txId"] == seen["txId"])
        .unwrap();
    assert_eq!(tx["type"], "ENDORSER_TRANSACTION", "{seen}");
    assert_eq!(tx["code"], "VALID", "{seen}");
    assert_eq!(
        tx["events"],
        serde_json::json!([{
            "chaincodeId": "kv", "txId": seen["txId"], "name": "put", "payloadBytes": 0,
        }]),
        "{seen}"
    );

    // Newest: the newest block (the transaction's; nothing was sent
    // since), then SUCCESS, on the peer and on the orderer alike.
    for service in ["peerNewest", "ordererNewest"] {
        assert_eq!(
            seen[service]["messages"],
            serde_json::json!([{"block": tx_block}, {"status": "SUCCESS"}]),
            "{service}: {seen}"
        );
    }
    assert!(network.interrupt());
}
