//! `weft chaos`: a fault-injection run. It starts a network of node
//! processes, puts Fabric-client load on it (Endorse, Submit, CommitStatus
//! through the Gateway), and round after round kills a node with SIGKILL or
//! stalls it with SIGSTOP and SIGCONT, chosen from a seed, while the
//! supervisor of `weft network up` starts killed nodes again. Each round
//! waits until the network commits again before the next fault, so that
//! faults never pile up beyond what the network is built to survive.
//!
//! Then it stops the load and the network and holds every node's chain
//! against what the clients were told ([`audit`]): every transaction a
//! client saw committed is on every peer's chain once, with its code; all
//! peers hold the same blocks and world state; all orderers hold the same
//! chain. It prints the rounds, the transactions, what was lost or
//! duplicated (both must be 0), the time to recover from a Raft leader's
//! death and the throughput dip, and fails unless the network kept its
//! promise and takes transactions again after the last fault.

mod audit;
pub mod schedule;
mod workload;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::bench::load::parse_duration;
use crate::bench::{WorkDir, http_get, quantile};
use crate::network::connection::ConnectionFile;
use crate::network::{Network, RestartPolicy, Role, StreamArgs, UpArgs};
use schedule::{Fault, FaultKind, Shape};
use workload::{Fate, Workload};

/// How often the run looks at the network: supervision, recovery, the
/// throughput timeline.
const TICK: Duration = Duration::from_millis(50);
/// How long the network may take to commit again after a fault.
const RECOVERY_WAIT_MAX: Duration = Duration::from_secs(120);
/// The fault-free stretch after the last round over which the network's
/// throughput is counted.
const QUIET_STRETCH: Duration = Duration::from_secs(3);
/// How long after the last round the network may take to confirm a new
/// transaction (a client's wait for a commit status).
const QUIET_CONFIRM_MAX: Duration = Duration::from_secs(30);

/// Options of `weft chaos`.
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// Rounds, one fault each.
    #[arg(long, default_value_t = 10)]
    pub rounds: u32,
    /// The seed the faults are drawn from [default: from the clock]. The
    /// run prints it; the same seed replays the same faults.
    #[arg(long)]
    pub seed: Option<u64>,
    /// The network's data directory [default: a temporary one, removed
    /// afterwards].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Orderers: a Raft cluster.
    #[arg(long, default_value_t = 3)]
    pub orderers: usize,
    /// Peer organisations.
    #[arg(long, default_value_t = 2)]
    pub orgs: usize,
    /// Peers of each organisation. Clients use the first as their Gateway;
    /// the others give the Gateways another peer to ask when one of an
    /// organisation's peers is down.
    #[arg(long, default_value_t = 1)]
    pub peers_per_org: usize,
    /// The chaincode's endorsement policy, as `weft network up --policy`
    /// takes it [default: any]; `all` makes every transaction need a peer
    /// of each organisation.
    #[arg(long)]
    pub policy: Option<String>,
    /// Clients submitting side by side, spread over the organisations.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// The longest wait between the network's recovery and the next fault.
    #[arg(long, default_value = "4s", value_parser = parse_duration)]
    pub wait_max: Duration,
    /// The longest stall of a paused node.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub pause_max: Duration,
    /// Kills among 100 faults; the others are stalls.
    #[arg(long, default_value_t = 70, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub kills_per_hundred: u64,
    /// How long a client waits for a transaction's commit status.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub tx_timeout: Duration,
    /// Run stream channels (docs/stream-mode.md) instead of block ones.
    #[arg(long)]
    pub stream: bool,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// What a run did and found.
#[derive(Debug, Serialize)]
struct Report {
    seed: u64,
    rounds: u32,
    kills: usize,
    leader_kills: usize,
    stalls: usize,
    submitted: usize,
    /// Transactions the Gateway refused, by the call that failed
    /// (endorse, submit).
    refused: BTreeMap<&'static str, usize>,
    unconfirmed: usize,
    verdict: audit::Verdict,
    /// Seconds from a Raft leader's kill to the next committed block.
    leader_recovery_seconds: Vec<f64>,
    /// Seconds from any fault to the next committed block.
    recovery_seconds: Vec<f64>,
    /// Confirmed transactions per second, the median second without a
    /// fault, and the worst second while one was being recovered from.
    throughput_without_faults: u64,
    throughput_worst_during_faults: u64,
    /// Transactions confirmed in the fault-free stretch after the last
    /// round, and its length: 3 s, or until the first was confirmed.
    confirmed_after_last_fault: u64,
    quiet_seconds: f64,
}

/// Runs the chaos run `args` describes; an error if the network lost or
/// duplicated a transaction, its nodes disagree, or it stopped committing.
pub fn run(args: &ChaosArgs) -> Result<()> {
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    let seed = args.seed.unwrap_or_else(seed_from_clock);
    println!(
        "weft chaos: seed {seed}, {} rounds (`--seed {seed}` replays them)",
        args.rounds
    );
    let work_dir = WorkDir::new(args.dir.as_deref())?;
    let mut up = UpArgs {
        dir: work_dir.path().join("network"),
        orderers: Some(args.orderers),
        orgs: Some(args.orgs),
        peers_per_org: Some(args.peers_per_org),
        policy: args.policy.clone(),
        stream: StreamArgs {
            stream: args.stream,
            ..StreamArgs::default()
        },
        ..UpArgs::default()
    };
    if !up.dir.join("network.yaml").exists() {
        up.base_port = Some(crate::network::free_base_port(&up)?);
    }
    let mut network = Network::up(&up)?;
    // The faults are deliberate: a node is always started again, quickly.
    network.set_restart_policy(RestartPolicy {
        first_delay: Duration::from_millis(500),
        delay_max: Duration::from_secs(5),
        attempts_max: 1_000,
        healthy_after: Duration::from_secs(10),
    });
    let connection = ConnectionFile::load(&network.connection_file())?;
    let channel = connection
        .all_channels()
        .into_iter()
        .next()
        .context("the network has no channel")?;
    let nodes: Vec<Node> = network
        .nodes()
        .map(|(name, role, operations)| Node {
            name: name.to_owned(),
            role,
            operations,
        })
        .collect();
    let shape = Shape {
        wait_max: args.wait_max,
        pause_max: args.pause_max,
        kills_per_hundred: args.kills_per_hundred,
    };
    let faults = schedule::draw(seed, args.rounds, nodes.len(), shape);

    let workload = Workload::start(&connection, &channel, args.clients, args.tx_timeout)?;
    let mut run = Run {
        network,
        workload,
        timeline: Timeline::new(),
    };
    run.until("the workload's first commit", RECOVERY_WAIT_MAX, |run| {
        run.workload.highest_block() > 0
    })?;
    let mut rounds = Rounds::default();
    for (index, fault) in faults.iter().enumerate() {
        run.pass(fault.wait);
        run.inject(
            index,
            faults.len(),
            fault,
            &nodes[fault.node],
            &channel,
            &mut rounds,
        )?;
    }
    let before_quiet = run.workload.confirmed();
    let quiet_started = Instant::now();
    run.pass(QUIET_STRETCH);
    // A slow machine may still be electing a leader: the network must take
    // transactions again, if not within the stretch then before clients
    // give up waiting.
    run.until(
        "a transaction confirmed after the last fault",
        QUIET_CONFIRM_MAX,
        |run| run.workload.confirmed() > before_quiet,
    )?;
    let confirmed_after_last_fault = run.workload.confirmed() - before_quiet;
    let quiet_seconds = quiet_started.elapsed().as_secs_f64();

    let Run {
        mut network,
        workload,
        timeline,
    } = run;
    let outcomes = workload.finish()?;
    wait_for_peers_to_agree(&mut network, &nodes, &channel);
    network.stop()?;

    let mut confirmed = BTreeMap::new();
    let mut refused = BTreeMap::new();
    let mut unconfirmed = 0;
    for outcome in &outcomes {
        match outcome.fate {
            Fate::Confirmed { code, .. } => {
                confirmed.insert(outcome.tx_id.clone(), code);
            }
            Fate::Refused { stage } => *refused.entry(stage).or_default() += 1,
            Fate::Unconfirmed => unconfirmed += 1,
        }
    }
    let mut peers = Vec::new();
    let mut orderers = Vec::new();
    for node in &nodes {
        let data = network.dir.join(&node.name).join("data");
        match node.role {
            Role::Peer => peers.push(audit::read_peer(&node.name, &data, &channel)?),
            Role::Orderer => orderers.push(audit::read_orderer(&node.name, &data, &channel)?),
        }
    }
    let verdict = audit::judge(&confirmed, &peers, &orderers);
    let (throughput_without_faults, throughput_worst_during_faults) = timeline.throughput();
    let report = Report {
        seed,
        rounds: args.rounds,
        kills: rounds.kills,
        leader_kills: rounds.leader_recoveries.len(),
        stalls: rounds.stalls,
        submitted: outcomes.len(),
        refused,
        unconfirmed,
        verdict,
        leader_recovery_seconds: seconds(&rounds.leader_recoveries),
        recovery_seconds: seconds(&rounds.recoveries),
        throughput_without_faults,
        throughput_worst_during_faults,
        confirmed_after_last_fault,
        quiet_seconds,
    };
    print_report(&report, &rounds);
    crate::bench::write_json(args.json.as_deref(), &report)?;
    if !report.verdict.passed() {
        bail!("the network did not keep its promise (see above)");
    }
    Ok(())
}

/// A node as the faults pick it.
struct Node {
    name: String,
    role: Role,
    operations: SocketAddr,
}

/// The network under load, watched every [`TICK`].
struct Run {
    network: Network,
    workload: Workload,
    timeline: Timeline,
}

/// What the rounds did.
#[derive(Default)]
struct Rounds {
    kills: usize,
    stalls: usize,
    recoveries: Vec<Duration>,
    leader_recoveries: Vec<Duration>,
}

impl Run {
    /// Supervises the network and samples the load for `duration`.
    fn pass(&mut self, duration: Duration) {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            self.tick();
        }
    }

    fn tick(&mut self) {
        for event in self.network.supervise(Instant::now()) {
            println!("  {event}");
        }
        self.timeline.sample(self.workload.confirmed());
        std::thread::sleep(TICK);
    }

    /// Ticks until `done` holds; an error naming `what` after `limit`.
    fn until(&mut self, what: &str, limit: Duration, done: impl Fn(&Self) -> bool) -> Result<()> {
        let deadline = Instant::now() + limit;
        while !done(self) {
            if Instant::now() > deadline {
                bail!("{what} did not happen within {limit:?}");
            }
            crate::network::check_not_interrupted()?;
            self.tick();
        }
        Ok(())
    }

    /// Sends `signal` to `node`'s process; an error if it has none (every
    /// round starts with all nodes running, so that is a bug of the run).
    fn signal(&self, node: &Node, signal: &str) -> Result<()> {
        if self.network.signal(&node.name, signal) {
            Ok(())
        } else {
            bail!(
                "SIG{signal} could not be sent to {}: it is not running",
                node.name
            )
        }
    }

    /// Round `index`: `fault` to `node`, then the wait for the network to
    /// commit again with the node back.
    fn inject(
        &mut self,
        index: usize,
        rounds: usize,
        fault: &Fault,
        node: &Node,
        channel: &str,
        record: &mut Rounds,
    ) -> Result<()> {
        let leader = node.role == Role::Orderer && leads(node.operations, channel);
        let height = self.workload.highest_block();
        let started = Instant::now();
        self.timeline.fault_active = true;
        let what = match fault.kind {
            FaultKind::Kill => {
                self.signal(node, "KILL")?;
                record.kills += 1;
                "killed"
            }
            FaultKind::Pause(pause) => {
                self.signal(node, "STOP")?;
                self.pass(pause);
                self.signal(node, "CONT")?;
                record.stalls += 1;
                "stalled"
            }
        };
        let description = format!(
            "round {}/{rounds}: {what} {}{}",
            index + 1,
            node.name,
            if leader { " (the Raft leader)" } else { "" }
        );
        self.until(
            &format!("{description}: recovery"),
            RECOVERY_WAIT_MAX,
            |run| {
                run.workload.highest_block() > height
                    && run.network.is_running(&node.name)
                    && http_get(node.operations, "/healthz").is_ok()
            },
        )?;
        let recovered = started.elapsed();
        self.timeline.fault_active = false;
        println!("{description}; committing again after {recovered:.1?}");
        record.recoveries.push(recovered);
        if leader && fault.kind == FaultKind::Kill {
            record.leader_recoveries.push(recovered);
        }
        Ok(())
    }
}

/// Confirmed transactions per second, each second marked by whether a
/// fault was being recovered from.
struct Timeline {
    second_started: Instant,
    confirmed_at_second_start: u64,
    faulty_second: bool,
    seconds: Vec<(u64, bool)>,
    fault_active: bool,
}

impl Timeline {
    fn new() -> Self {
        Self {
            second_started: Instant::now(),
            confirmed_at_second_start: 0,
            faulty_second: false,
            seconds: Vec::new(),
            fault_active: false,
        }
    }

    fn sample(&mut self, confirmed: u64) {
        self.faulty_second |= self.fault_active;
        if self.second_started.elapsed() >= Duration::from_secs(1) {
            self.seconds.push((
                confirmed - self.confirmed_at_second_start,
                self.faulty_second,
            ));
            self.second_started = Instant::now();
            self.confirmed_at_second_start = confirmed;
            self.faulty_second = self.fault_active;
        }
    }

    /// The median second without a fault, and the worst second with one.
    fn throughput(&self) -> (u64, u64) {
        // The first second holds the start of the load.
        let seconds = self.seconds.get(1..).unwrap_or_default();
        let mut calm: Vec<u64> = seconds.iter().filter(|s| !s.1).map(|s| s.0).collect();
        calm.sort_unstable();
        let median = calm.get(calm.len() / 2).copied().unwrap_or(0);
        let worst = seconds.iter().filter(|s| s.1).map(|s| s.0).min();
        (median, worst.unwrap_or(median))
    }
}

/// Whether the orderer whose operations endpoint is `operations` leads
/// `channel`'s Raft cluster, as its metrics say.
fn leads(operations: SocketAddr, channel: &str) -> bool {
    let line = format!("consensus_etcdraft_is_leader{{channel=\"{channel}\"}} 1");
    http_get(operations, "/metrics").is_ok_and(|text| text.lines().any(|l| l == line))
}

/// Waits (up to a minute) until every peer reports the same height twice
/// in a row, so that the chains are compared once the last blocks have
/// reached every peer.
fn wait_for_peers_to_agree(network: &mut Network, nodes: &[Node], channel: &str) {
    let prefix = format!("ledger_blockchain_height{{channel=\"{channel}\"}} ");
    let heights = || -> Vec<Option<u64>> {
        nodes
            .iter()
            .filter(|node| node.role == Role::Peer)
            .map(|node| {
                let text = http_get(node.operations, "/metrics").ok()?;
                text.lines()
                    .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Vec::new();
    while Instant::now() < deadline {
        network.supervise(Instant::now());
        let now = heights();
        let agreed = now.iter().all(|h| h.is_some() && *h == now[0]);
        if agreed && now == last {
            return;
        }
        last = now;
        std::thread::sleep(Duration::from_millis(500));
    }
    println!("  the peers did not reach one height within a minute; the audit will say where");
}

fn print_report(report: &Report, rounds: &Rounds) {
    let verdict = &report.verdict;
    println!(
        "faults: {} rounds, {} kills ({} of the Raft leader), {} stalls",
        report.rounds, report.kills, report.leader_kills, report.stalls
    );
    println!(
        "transactions: {} submitted, {} confirmed ({} VALID), {} refused ({}), {} unconfirmed",
        report.submitted,
        verdict.confirmed,
        verdict.confirmed_valid,
        report.refused.values().sum::<usize>(),
        report
            .refused
            .iter()
            .map(|(stage, count)| format!("{count} at {stage}"))
            .collect::<Vec<_>>()
            .join(", "),
        report.unconfirmed
    );
    println!(
        "lost {}, duplicated {}, extra copies marked invalid {}",
        verdict.lost.len(),
        verdict.duplicated.len(),
        verdict.extra_copies
    );
    for line in verdict.lost.iter().chain(&verdict.duplicated).take(20) {
        println!("  {line}");
    }
    match verdict.height {
        Some(height) => println!(
            "chains: every node holds the same {height} blocks; the peers' world states are equal"
        ),
        None => println!("chains: the nodes disagree"),
    }
    for line in &verdict.disagreements {
        println!("  {line}");
    }
    let p = |durations: &[Duration]| {
        let mut sorted = durations.to_vec();
        sorted.sort();
        format!(
            "p50 {:.1?}, p99 {:.1?} ({} faults)",
            quantile(&sorted, 0.5),
            quantile(&sorted, 0.99),
            sorted.len()
        )
    };
    println!(
        "recovery: after a Raft leader's kill {}; after any fault {}",
        p(&rounds.leader_recoveries),
        p(&rounds.recoveries)
    );
    println!(
        "throughput: {} tx/s in the median second without a fault, {} tx/s in the worst second of one",
        report.throughput_without_faults, report.throughput_worst_during_faults
    );
    println!(
        "after the last fault: {} transactions confirmed in {:.1}s",
        report.confirmed_after_last_fault, report.quiet_seconds
    );
    println!(
        "chaos: {} lost, {} duplicated: {}",
        verdict.lost.len(),
        verdict.duplicated.len(),
        if verdict.passed() { "passed" } else { "FAILED" }
    );
}

fn seconds(durations: &[Duration]) -> Vec<f64> {
    durations.iter().map(Duration::as_secs_f64).collect()
}

fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}
