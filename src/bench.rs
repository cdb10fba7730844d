//! `weft bench`: measuring weft as a whole, process against process over
//! real gRPC, the way the papers measured Fabric.
//!
//! Each bench builds what it needs in a fresh directory (crypto material,
//! a channel), runs the nodes under test as separate `weft` processes, and
//! ends with one line scripts can read:
//! `<committed|ordered> <N> tx in <S> s: <X> tx/s, p50 <a> ms, p95 <b> ms,
//! p99 <c> ms`.

pub mod committer;
pub mod endorser;
mod feeder;
pub mod floor;
pub mod load;
pub mod orderer;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use prost::Message;
use weft_msp::Signer;
use weft_protos::common::{Block, Envelope};
use weft_protos::protos::{ChaincodeId, Response};
use weft_protos::tx::{Invocation, Proposal, ReadWriteSetBuilder, SimulationResult, endorse};

/// The crypto config and channel profile a bench network is built from:
/// the repository's defaults, so a bench runs the network a user gets.
const CRYPTO_CONFIG: &str = include_str!("../config/crypto.yaml");
const CHANNEL_CONFIG: &str = include_str!("../config/channel.yaml");
const CHANNEL_PROFILE: &str = "TwoOrgs";

/// A channel with generated identities, in a directory of its own.
pub struct BenchChannel {
    pub dir: PathBuf,
    pub channel_id: String,
    pub genesis: Block,
    pub genesis_path: PathBuf,
}

impl BenchChannel {
    /// Generates crypto material and the genesis block of `channel_id` in
    /// `dir` from the default configs, the channel profile changed by
    /// `adjust`.
    pub fn create(
        dir: &Path,
        channel_id: &str,
        adjust: impl FnOnce(&mut crate::channel::profile::Profile),
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let crypto_config = dir.join("crypto.yaml");
        let channel_config = dir.join("channel.yaml");
        std::fs::write(&crypto_config, CRYPTO_CONFIG)?;
        std::fs::write(&channel_config, CHANNEL_CONFIG)?;
        crate::cryptogen::generate(&crypto_config, &dir.join("crypto"))?;
        let genesis = crate::channel::genesis_block_with(
            &channel_config,
            Some(CHANNEL_PROFILE),
            channel_id,
            adjust,
        )?;
        let genesis_path = dir.join(format!("{channel_id}.block"));
        std::fs::write(&genesis_path, genesis.encode_to_vec())?;
        Ok(Self {
            dir: dir.to_owned(),
            channel_id: channel_id.to_owned(),
            genesis,
            genesis_path,
        })
    }

    /// The MSP folder of a peer of an org (`org1`, `peer0`).
    pub fn peer_msp(&self, org: &str, peer: &str) -> PathBuf {
        self.dir.join(format!(
            "crypto/peerOrganizations/{org}.example.com/peers/{peer}.{org}.example.com/msp"
        ))
    }

    /// The signer of a peer (`org1`, `peer0`).
    pub fn peer(&self, org: &str, peer: &str) -> Result<Signer> {
        load_signer(&self.peer_msp(org, peer), &org_msp_id(org))
    }

    /// The signer of a client user of an org (`org1`, `User1`).
    pub fn user(&self, org: &str, user: &str) -> Result<Signer> {
        load_signer(
            &self.dir.join(format!(
                "crypto/peerOrganizations/{org}.example.com/users/{user}@{org}.example.com/msp"
            )),
            &org_msp_id(org),
        )
    }

    /// The MSP folder of orderer `index`.
    pub fn orderer_msp(&self, index: usize) -> PathBuf {
        self.dir.join(format!(
            "crypto/ordererOrganizations/example.com/orderers/orderer{index}.example.com/msp"
        ))
    }

    /// The signer of orderer `index`.
    pub fn orderer(&self, index: usize) -> Result<Signer> {
        load_signer(&self.orderer_msp(index), "OrdererMSP")
    }
}

/// Sets the channel's default endorsement policy to the ImplicitMeta `rule`
/// (such as `ANY Endorsement`).
pub fn set_endorsement(profile: &mut crate::channel::profile::Profile, rule: &str) {
    if let Some(application) = &mut profile.application {
        application.policies.insert(
            "Endorsement".to_owned(),
            crate::channel::profile::PolicySpec {
                kind: "ImplicitMeta".to_owned(),
                rule: rule.to_owned(),
            },
        );
    }
}

/// The chaincode of the transfer workload.
pub const TRANSFER_CHAINCODE: &str = "transfer";
/// Every account's balance before the first transfer.
pub const INITIAL_BALANCE: i64 = 1_000_000;

/// FastFabric's workload: move money between two accounts. The transaction
/// reads both accounts (when they exist) and writes both balances.
#[derive(Debug, Clone)]
pub struct Transfer<'a> {
    pub channel_id: &'a str,
    pub from: String,
    pub to: String,
    /// Units moved from `from` to `to` since the accounts were created.
    pub moved: i64,
    /// The version both accounts were last written at; `None` creates them.
    pub read_at: Option<(u64, u64)>,
    /// An extra argument, to bring the transaction to a chosen size.
    pub padding: Bytes,
}

impl Transfer<'_> {
    /// The transaction as a Fabric client submits it: proposed by
    /// `client`, simulated here, endorsed by each of `endorsers`, signed.
    /// Returns its TxID and envelope.
    pub fn transaction(
        &self,
        client: &Signer,
        endorsers: &[&Signer],
    ) -> Result<(String, Envelope)> {
        let mut rwset = ReadWriteSetBuilder::new();
        if let Some(version) = self.read_at {
            rwset.read(TRANSFER_CHAINCODE, &self.from, Some(version));
            rwset.read(TRANSFER_CHAINCODE, &self.to, Some(version));
        }
        let balance = |change: i64| Bytes::from(INITIAL_BALANCE.saturating_add(change).to_string());
        rwset.write(TRANSFER_CHAINCODE, &self.from, balance(-self.moved));
        rwset.write(TRANSFER_CHAINCODE, &self.to, balance(self.moved));
        let invocation = Invocation {
            channel_id: self.channel_id,
            chaincode: TRANSFER_CHAINCODE,
            args: vec![
                Bytes::from_static(b"transfer"),
                Bytes::from(self.from.clone()),
                Bytes::from(self.to.clone()),
                Bytes::from_static(b"1"),
                self.padding.clone(),
            ],
            nonce: client.new_nonce()?,
            timestamp_seconds: weft_msp::now(),
        };
        let proposal = Proposal::new(&invocation, client.serialized_identity().clone());
        let simulation = SimulationResult {
            results: rwset.encode(),
            events: Bytes::new(),
            response: Response {
                status: 200,
                message: String::new(),
                payload: Bytes::new(),
            },
            chaincode_id: ChaincodeId {
                path: String::new(),
                name: TRANSFER_CHAINCODE.to_owned(),
                version: "1.0".to_owned(),
            },
        };
        let endorsements = endorsers
            .iter()
            .map(|endorser| endorse(&proposal, &simulation, *endorser))
            .collect::<Result<Vec<_>, _>>()?;
        let envelope = proposal.transaction(&endorsements, client)?;
        Ok((proposal.tx_id.clone(), envelope))
    }
}

/// `org1` → `Org1MSP`.
pub(crate) fn org_msp_id(org: &str) -> String {
    let mut chars = org.chars();
    let capitalised: String = chars
        .next()
        .map(|first| first.to_ascii_uppercase())
        .into_iter()
        .chain(chars)
        .collect();
    crate::cryptogen::msp_id(&capitalised)
}

/// The signing identity in an MSP folder.
pub(crate) fn load_signer(dir: &Path, msp_id: &str) -> Result<Signer> {
    weft_msp::folder::load_signer(dir, msp_id)?
        .ok_or_else(|| anyhow!("{} holds no signing identity", dir.display()))
}

/// Where a bench works: the directory the user named (kept), or a
/// temporary one (removed when dropped).
pub struct WorkDir {
    path: PathBuf,
    _temporary: Option<tempfile::TempDir>,
}

impl WorkDir {
    pub fn new(named: Option<&Path>) -> Result<Self> {
        Ok(match named {
            Some(path) => Self {
                path: path.to_owned(),
                _temporary: None,
            },
            None => {
                let temporary = tempfile::tempdir().context("creating a temporary directory")?;
                Self {
                    path: temporary.path().to_owned(),
                    _temporary: Some(temporary),
                }
            }
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes a bench's results as JSON to `path`, if one was given.
pub fn write_json(path: Option<&Path>, results: &impl serde::Serialize) -> Result<()> {
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_vec_pretty(results)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// A `weft orderer start` or `weft peer start` child process.
pub struct NodeProcess {
    child: Child,
    /// The node's gRPC address.
    pub grpc: SocketAddr,
    operations: Option<SocketAddr>,
}

impl NodeProcess {
    /// Starts `weft <role> start --config <config>`, logging to `log`, and
    /// waits for its `ready` line.
    pub fn start(role: &str, config: &Path, log: &Path) -> Result<Self> {
        let executable = std::env::current_exe().context("locating the weft executable")?;
        let mut child = Command::new(executable)
            .args([role, "start", "--config"])
            .arg(config)
            .env("WEFT_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .with_context(|| format!("starting the {role}"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("the {role}'s stdout is not piped"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let address = |label: &str| -> Option<SocketAddr> {
            line.split(label)
                .nth(1)?
                .split([',', ' '])
                .next()?
                .trim()
                .parse()
                .ok()
        };
        let grpc = address("grpc ")
            .ok_or_else(|| anyhow!("the {role} did not start (see {}): {line:?}", log.display()))?;
        Ok(Self {
            grpc,
            operations: address("operations "),
            child,
        })
    }

    /// The node's operations endpoint (peers have one).
    pub fn operations(&self) -> Result<SocketAddr> {
        self.operations
            .ok_or_else(|| anyhow!("the node announced no operations endpoint"))
    }

    /// CPU seconds the process has used so far (user + system), to the
    /// clock tick.
    pub fn cpu_seconds(&self) -> Result<f64> {
        let pid = i32::try_from(self.child.id())?;
        let stat = procfs::process::Process::new(pid)?.stat()?;
        Ok(stat_cpu_seconds(&stat))
    }

    /// Asks the node to stop (SIGTERM) and waits for it.
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// `GET path` from a node's operations endpoint, as text.
pub fn http_get(address: SocketAddr, path: &str) -> Result<String> {
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .with_context(|| format!("connecting to {address}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("{address}{path}: not an HTTP response"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!(
            "{address}{path}: {}",
            head.lines().next().unwrap_or_default()
        );
    }
    Ok(body.to_owned())
}

/// The sum of every series of metric `name` in Prometheus text format.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    metric_values(text, name).sum()
}

/// The value of each series of metric `name` (one per label set) in a
/// Prometheus text exposition.
pub fn metric_values<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = f64> + 'a {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(move |line| {
            let rest = line.strip_prefix(name)?;
            let value = if rest.starts_with('{') {
                rest.rsplit_once(' ')?.1
            } else {
                rest.strip_prefix(' ')?
            };
            value.trim().parse::<f64>().ok()
        })
}

/// Has the kernel write out the page cache's dirty pages (`sync`) before a
/// measurement. What other programs wrote just before (a build of weft,
/// a copy of its binary) stays in memory until it is 30 s old
/// (`vm.dirty_expire_centisecs`); written back in the middle of a run, a
/// gigabyte of it held every node's synced writes behind it for half a
/// second (p99 209.7 ms against 13.3–19.3 ms after a `sync`:
/// docs/benchmarks.md, eighth slice). A failure is only a warning.
pub fn settle_page_cache() {
    match std::process::Command::new("sync").status() {
        Ok(status) if status.success() => {}
        Ok(status) => tracing::warn!(%status, "sync before the measurement failed"),
        Err(error) => tracing::warn!(%error, "cannot run sync before the measurement"),
    }
}

/// The `q`-quantile (0..=1) of sorted `values`, nearest rank.
/// The CPU seconds (user + system) a process's or thread's `/proc` stat
/// records, to the clock tick.
pub fn stat_cpu_seconds(stat: &procfs::process::Stat) -> f64 {
    (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64
}

pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The last line of every bench; `verb` says what happened to the
/// transactions (`committed`, `ordered`).
pub fn summary_line(
    verb: &str,
    transactions: u64,
    elapsed: Duration,
    latencies: &mut [Duration],
) -> String {
    latencies.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "{verb} {transactions} tx in {:.2} s: {:.0} tx/s, p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms",
        elapsed.as_secs_f64(),
        transactions as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
        ms(quantile(latencies, 0.50)),
        ms(quantile(latencies, 0.95)),
        ms(quantile(latencies, 0.99)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sums_add_up_every_series() {
        let text = "# HELP x\n# TYPE x counter\n\
            ledger_transaction_count{channel=\"a\",validation_code=\"VALID\"} 10\n\
            ledger_transaction_count{channel=\"b\",validation_code=\"VALID\"} 5\n\
            ledger_transaction_count_other 7\n\
            process_cpu_seconds_total 1.5\n";
        assert_eq!(metric_sum(text, "ledger_transaction_count"), 15.0);
        assert_eq!(metric_sum(text, "process_cpu_seconds_total"), 1.5);
        assert_eq!(metric_sum(text, "absent"), 0.0);
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let values: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&values, 0.5), Duration::from_millis(50));
        assert_eq!(quantile(&values, 0.99), Duration::from_millis(99));
        assert_eq!(quantile(&values, 1.0), Duration::from_millis(100));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn org_names_become_msp_ids() {
        assert_eq!(org_msp_id("org1"), "Org1MSP");
    }
}
