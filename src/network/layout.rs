//! What a local network is made of, and the files that describe it.
//!
//! [`Plan`] is the network's shape (orderers, peers, ports, channels,
//! policy), saved as `network.yaml` in the data directory so that a later
//! `weft network up` resumes the same network. From it come the
//! cryptogen and configtx files, each node's configuration and the
//! client connection file, all written as plain files a user can read.
//!
//! Ports are fixed by the plan (the channel config names the Raft
//! consenters and the connection file the endpoints, so they must not
//! change between runs). From the base port B (7050 by default, Fabric's):
//! orderer i serves clients on B+10i, Raft on B+3+10i and operations on
//! B+5+10i; peer p of organisation k serves clients on B+1+2000(k-1)+100p
//! and operations one port above (peer0.org1 7051, peer0.org2 9051, as in
//! Fabric's test network; org3 11051, org4 13051).

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::connection::{ClientTls, ConnectionFile, Endpoint, Organization, User};

/// The chaincodes every peer has built in, defined on the channel at
/// creation.
pub const BUILTIN_CHAINCODES: [&str; 3] = ["kv", "transfer", "smallbank"];
/// The orderers' domain in the crypto material.
const ORDERER_DOMAIN: &str = "example.com";
/// The orderer organisation's TLS CA certificate, under `crypto/`.
const ORDERER_TLS_CA: &str = "ordererOrganizations/example.com/tlsca/tlsca.example.com-cert.pem";

/// The shape of a network, as saved in `network.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Plan {
    /// The first channel's name; more channels add 2, 3, ... to it.
    pub channel: String,
    /// How many channels, each with its own orderer chain (and Raft
    /// group), ledgers and chaincode definitions.
    #[serde(default = "one_channel")]
    pub channels: usize,
    /// 1 runs a solo orderer; more form a Raft cluster.
    pub orderers: usize,
    /// Peer organisations, `org1` to `orgN`.
    pub organisations: usize,
    pub peers_per_org: usize,
    pub base_port: u16,
    /// The built-in chaincodes' endorsement policy, in Fabric's language.
    pub policy: String,
    /// Orderer block cutting: the longest a transaction waits for its block.
    pub batch_timeout: String,
    /// Orderer block cutting: transactions per block at most.
    pub block_size: u32,
    /// Stream mode's checkpoints, for stream channels; `None`: block mode.
    #[serde(default)]
    pub stream: Option<StreamPlan>,
    /// The channels order through Kafka; `None`: solo or Raft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaPlan>,
    /// Every node serves TLS with its cryptogen TLS certificate, and
    /// dials the others over TLS.
    #[serde(default)]
    pub tls: bool,
    /// With `tls`: every node asks its clients for a certificate from one
    /// of the network's TLS CAs.
    #[serde(default)]
    pub mutual_tls: bool,
    /// The chaincodes whose definitions have been committed.
    #[serde(default)]
    pub deployed: Vec<String>,
}

/// When a stream network's orderers sign checkpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StreamPlan {
    pub checkpoint_transactions: u32,
    pub checkpoint_interval: String,
    /// The peers' Gateways report transactions once applied, before their
    /// checkpoint (`gateway.commitStatus: applied`), instead of durable.
    #[serde(default)]
    pub commit_status_applied: bool,
    /// How many channels stream, the first ones; `None`: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<usize>,
}

/// Kafka ordering (docs/kafka.md): the brokers, which the network does
/// not start (`deploy/kafka.sh start` runs one), and what goes through
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KafkaPlan {
    pub brokers: Vec<String>,
    /// Only transaction IDs through Kafka (FastFabric), or whole
    /// envelopes (Fabric 1.x).
    pub tx_ids_only: bool,
}

/// `channel.yaml`'s profile of block channels.
pub const BLOCK_PROFILE: &str = "Network";
/// `channel.yaml`'s profile of stream channels.
pub const STREAM_PROFILE: &str = "StreamNetwork";

fn one_channel() -> usize {
    1
}

/// Channels a network may have at most.
pub const CHANNELS_MAX: usize = 32;

/// The endorsement policy a `--policy` value names: a preset of Thakkar
/// et al.'s Table III over the peers of `organisations` organisations, or
/// else the value itself, in Fabric's policy language.
///
/// Presets, for k from 1 to the number of organisations: `any` (any one
/// organisation's peer), `all` (every organisation's), `outof-k`
/// (`OutOf(k, ...)`) and `and-or-k` (an OR of the ANDs of every k
/// organisations: the same rule written as the paper's AND/OR form).
pub fn expand_policy(policy: &str, organisations: usize) -> Result<String> {
    let peers: Vec<String> = (1..=organisations)
        .map(|org| format!("'Org{org}MSP.peer'"))
        .collect();
    let count = |text: &str, preset: &str| -> Result<usize> {
        let k: usize = text
            .parse()
            .with_context(|| format!("--policy {preset}-{text}: {text:?} is not a number"))?;
        if !(1..=organisations).contains(&k) {
            bail!(
                "--policy {preset}-{k}: k must be between 1 and {organisations}, the organisations"
            );
        }
        Ok(k)
    };
    let expanded = if policy == "any" {
        format!("OR({})", peers.join(","))
    } else if policy == "all" {
        format!("AND({})", peers.join(","))
    } else if let Some(k) = policy.strip_prefix("outof-") {
        format!("OutOf({}, {})", count(k, "outof")?, peers.join(","))
    } else if let Some(k) = policy.strip_prefix("and-or-") {
        let k = count(k, "and-or")?;
        let groups: Vec<String> = combinations(&peers, k)
            .into_iter()
            .map(|group| match group.as_slice() {
                [one] => one.clone(),
                _ => format!("AND({})", group.join(",")),
            })
            .collect();
        match groups.as_slice() {
            [all] if k > 1 => all.clone(),
            _ => format!("OR({})", groups.join(",")),
        }
    } else {
        policy.to_owned()
    };
    Ok(expanded)
}

/// Every choice of `k` of `items`, in order.
fn combinations(items: &[String], k: usize) -> Vec<Vec<String>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    let mut chosen = Vec::new();
    for (index, first) in items.iter().enumerate() {
        for mut rest in combinations(&items[index + 1..], k - 1) {
            rest.insert(0, first.clone());
            chosen.push(rest);
        }
    }
    chosen
}

/// An orderer of the plan.
#[derive(Debug, Clone)]
pub struct OrdererNode {
    pub name: String,
    pub grpc: SocketAddr,
    pub cluster: SocketAddr,
    pub operations: SocketAddr,
}

/// A peer of the plan.
#[derive(Debug, Clone)]
pub struct PeerNode {
    /// `org1`, `org2`.
    pub org: String,
    pub msp_id: String,
    pub name: String,
    pub grpc: SocketAddr,
    pub operations: SocketAddr,
    /// Its place among its organisation's peers: the first (0) approves
    /// chaincode definitions.
    pub index: usize,
}

impl PeerNode {
    pub fn is_first(&self) -> bool {
        self.index == 0
    }
}

fn loopback(port: u32) -> Result<SocketAddr> {
    let port =
        u16::try_from(port).context("the network's ports run past 65535: lower --base-port")?;
    Ok(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)))
}

impl Plan {
    /// Checks the plan's numbers: every port fits and none collide.
    pub fn check(&self) -> Result<()> {
        if !(1..=CHANNELS_MAX).contains(&self.channels) {
            bail!(
                "--channels: {} is not between 1 and {CHANNELS_MAX}",
                self.channels
            );
        }
        for channel in self.channel_names() {
            crate::channel::check_channel_name(&channel).context("--channel")?;
        }
        if !(1..=9).contains(&self.orderers) {
            bail!("--orderers: {} is not between 1 and 9", self.orderers);
        }
        if !(1..=8).contains(&self.organisations) {
            bail!("--orgs: {} is not between 1 and 8", self.organisations);
        }
        if !(1..=9).contains(&self.peers_per_org) {
            bail!(
                "--peers-per-org: {} is not between 1 and 9",
                self.peers_per_org
            );
        }
        if self.block_size == 0 {
            bail!("--block-size: must be at least 1");
        }
        weft_protos::duration::parse_go_duration(&self.batch_timeout)
            .map_err(|e| anyhow::anyhow!("--batch-timeout: {e}"))?;
        if let Some(kafka) = &self.kafka {
            if self.stream.is_some() {
                bail!("--stream: stream channels order with solo or Raft, not Kafka");
            }
            if kafka.brokers.is_empty() {
                bail!("--kafka-brokers: name at least one broker as host:port");
            }
            if let Some(bad) = kafka
                .brokers
                .iter()
                .find(|broker| !weft_orderer::config::is_host_port(broker))
            {
                bail!("--kafka-brokers: {bad:?} is not host:port");
            }
        }
        if let Some(stream) = &self.stream {
            if stream.checkpoint_transactions == 0 {
                bail!("--checkpoint-transactions: must be at least 1");
            }
            let interval = weft_protos::duration::parse_go_duration(&stream.checkpoint_interval)
                .map_err(|e| anyhow::anyhow!("--checkpoint-interval: {e}"))?;
            if interval.is_zero() {
                bail!("--checkpoint-interval: must be positive");
            }
            if let Some(count) = stream.channels
                && !(1..=self.channels).contains(&count)
            {
                bail!(
                    "--stream-channels: {count} is not between 1 and the {} channel(s)",
                    self.channels
                );
            }
        }
        weft_policy::dsl::parse(&self.policy).context("--policy")?;
        self.orderer_nodes()?;
        self.peer_nodes()?;
        Ok(())
    }

    /// The channels' names: the first as given, then the same name with
    /// 2, 3, ... appended (`mychannel`, `mychannel2`, ...).
    pub fn channel_names(&self) -> Vec<String> {
        (1..=self.channels)
            .map(|number| match number {
                1 => self.channel.clone(),
                _ => format!("{}{number}", self.channel),
            })
            .collect()
    }

    /// The `channels:` list of a node's configuration: one genesis block
    /// per channel, in the network's folder.
    fn channels_yaml(&self) -> String {
        let mut text = String::from("channels:\n");
        for channel in self.channel_names() {
            let _ = writeln!(text, "  - genesisBlock: ../{channel}.block");
        }
        text
    }

    pub fn orderer_nodes(&self) -> Result<Vec<OrdererNode>> {
        let base = u32::from(self.base_port);
        (0..self.orderers)
            .map(|index| {
                let offset = 10 * index as u32;
                Ok(OrdererNode {
                    name: format!("orderer{index}.{ORDERER_DOMAIN}"),
                    grpc: loopback(base + offset)?,
                    cluster: loopback(base + offset + 3)?,
                    operations: loopback(base + offset + 5)?,
                })
            })
            .collect()
    }

    pub fn peer_nodes(&self) -> Result<Vec<PeerNode>> {
        let base = u32::from(self.base_port);
        let mut peers = Vec::new();
        for org_number in 1..=self.organisations {
            let org = format!("org{org_number}");
            for index in 0..self.peers_per_org {
                let grpc = base + 1 + 2000 * (org_number as u32 - 1) + 100 * index as u32;
                peers.push(PeerNode {
                    msp_id: crate::bench::org_msp_id(&org),
                    name: format!("peer{index}.{org}.example.com"),
                    grpc: loopback(grpc)?,
                    operations: loopback(grpc + 1)?,
                    index,
                    org: org.clone(),
                });
            }
        }
        Ok(peers)
    }

    /// Every address the network's nodes listen on.
    pub fn ports(&self) -> Result<Vec<SocketAddr>> {
        let mut ports: Vec<SocketAddr> = self
            .orderer_nodes()?
            .iter()
            .flat_map(|o| [o.grpc, o.cluster, o.operations])
            .collect();
        ports.extend(
            self.peer_nodes()?
                .iter()
                .flat_map(|p| [p.grpc, p.operations]),
        );
        Ok(ports)
    }

    /// `crypto.yaml`: the orderer organisation and both peer organisations,
    /// in cryptogen's format.
    pub fn crypto_yaml(&self) -> String {
        let mut text = format!(
            "# Crypto material of this network, in cryptogen's crypto-config.yaml format\n\
             # (written by `weft network up`; see config/crypto.yaml for every key).\n\
             OrdererOrgs:\n  - Name: Orderer\n    Domain: {ORDERER_DOMAIN}\n    EnableNodeOUs: true\n\
             \x20   Template:\n      Count: {}\n      SANS: [localhost, 127.0.0.1]\n\
             PeerOrgs:\n",
            self.orderers
        );
        for org_number in 1..=self.organisations {
            let _ = write!(
                text,
                "  - Name: Org{org_number}\n    Domain: org{org_number}.example.com\n    EnableNodeOUs: true\n\
                 \x20   Template:\n      Count: {}\n      SANS: [localhost, 127.0.0.1]\n\
                 \x20   Users:\n      Count: 1\n",
                self.peers_per_org
            );
        }
        text
    }

    /// `channel.yaml`: the channels' configuration in configtx.yaml's
    /// format: profile `Network` for block channels, `StreamNetwork` for
    /// stream channels.
    pub fn channel_yaml(&self) -> Result<String> {
        let orderers = self.orderer_nodes()?;
        let peers = self.peer_nodes()?;
        let addresses: Vec<String> = orderers.iter().map(|o| o.grpc.to_string()).collect();
        let mut text = String::from(
            "# The configuration of this network's channels (block channels made from\n\
             # profile Network, stream channels from StreamNetwork), in configtx.yaml's\n\
             # format, written by `weft network up` (config/channel.yaml explains\n\
             # every key). Paths are relative to this file.\n\
             Organizations:\n  - &OrdererOrg\n    Name: OrdererOrg\n    ID: OrdererMSP\n\
             \x20   MSPDir: crypto/ordererOrganizations/example.com/msp\n    Policies:\n\
             \x20     Readers: {Type: Signature, Rule: \"OR('OrdererMSP.member')\"}\n\
             \x20     Writers: {Type: Signature, Rule: \"OR('OrdererMSP.member')\"}\n\
             \x20     Admins: {Type: Signature, Rule: \"OR('OrdererMSP.admin')\"}\n",
        );
        let _ = writeln!(text, "    OrdererEndpoints: [{}]", addresses.join(", "));
        for org_number in 1..=self.organisations {
            let msp = format!("Org{org_number}MSP");
            let anchor = peers
                .iter()
                .find(|peer| peer.msp_id == msp)
                .map(|peer| peer.grpc)
                .context("an organisation without peers")?;
            let _ = write!(
                text,
                "  - &Org{org_number}\n    Name: {msp}\n    ID: {msp}\n\
                 \x20   MSPDir: crypto/peerOrganizations/org{org_number}.example.com/msp\n    Policies:\n\
                 \x20     Readers: {{Type: Signature, Rule: \"OR('{msp}.admin', '{msp}.peer', '{msp}.client')\"}}\n\
                 \x20     Writers: {{Type: Signature, Rule: \"OR('{msp}.admin', '{msp}.client')\"}}\n\
                 \x20     Admins: {{Type: Signature, Rule: \"OR('{msp}.admin')\"}}\n\
                 \x20     Endorsement: {{Type: Signature, Rule: \"OR('{msp}.peer')\"}}\n\
                 \x20   AnchorPeers: [{{Host: {}, Port: {}}}]\n",
                anchor.ip(),
                anchor.port()
            );
        }
        text.push_str("Profiles:\n");
        self.write_profile(&mut text, BLOCK_PROFILE, None, &addresses, &orderers);
        if let Some(stream) = &self.stream {
            self.write_profile(
                &mut text,
                STREAM_PROFILE,
                Some(stream),
                &addresses,
                &orderers,
            );
        }
        Ok(text)
    }

    /// One profile of `channel.yaml`: a block channel's, or a stream
    /// channel's with its `StreamMode`.
    fn write_profile(
        &self,
        text: &mut String,
        name: &str,
        stream: Option<&StreamPlan>,
        addresses: &[String],
        orderers: &[OrdererNode],
    ) {
        let orderer_type = if self.kafka.is_some() {
            "kafka"
        } else if self.orderers == 1 {
            "solo"
        } else {
            "etcdraft"
        };
        // The first profile defines the policies' anchor, later ones use it.
        let policies = if name == BLOCK_PROFILE {
            "&ImplicitPolicies\n\
             \x20     Readers: {Type: ImplicitMeta, Rule: \"ANY Readers\"}\n\
             \x20     Writers: {Type: ImplicitMeta, Rule: \"ANY Writers\"}\n\
             \x20     Admins: {Type: ImplicitMeta, Rule: \"MAJORITY Admins\"}"
        } else {
            "*ImplicitPolicies"
        };
        let _ = write!(
            text,
            "  {name}:\n    Policies: {policies}\n\
             \x20   Capabilities: {{V2_0: true}}\n\
             \x20   Orderer:\n      OrdererType: {orderer_type}\n      Addresses: [{}]\n\
             \x20     BatchTimeout: {}\n      BatchSize: {{MaxMessageCount: {}, AbsoluteMaxBytes: 10 MB, PreferredMaxBytes: 2 MB}}\n",
            addresses.join(", "),
            self.batch_timeout,
            self.block_size
        );
        if let Some(stream) = stream {
            let _ = writeln!(
                text,
                "      StreamMode: {{CheckpointTransactions: {}, CheckpointInterval: {}}}",
                stream.checkpoint_transactions, stream.checkpoint_interval
            );
        }
        let consenter = |orderer: &OrdererNode| {
            let tls = format!(
                "crypto/ordererOrganizations/{ORDERER_DOMAIN}/orderers/{}/tls/server.crt",
                orderer.name
            );
            format!(
                "{{Host: {}, Port: {}, ClientTLSCert: {tls}, ServerTLSCert: {tls}}}",
                orderer.cluster.ip(),
                orderer.cluster.port()
            )
        };
        if let Some(kafka) = &self.kafka {
            // Over TLS the cluster authenticates each orderer by the
            // certificate the channel names for it.
            let sharing = if self.tls {
                let consenters: Vec<String> = orderers.iter().map(consenter).collect();
                format!("Consenters: [{}]", consenters.join(", "))
            } else {
                let cluster: Vec<String> = orderers
                    .iter()
                    .map(|orderer| orderer.cluster.to_string())
                    .collect();
                format!("Orderers: [{}]", cluster.join(", "))
            };
            let _ = writeln!(
                text,
                "      Kafka: {{Brokers: [{}], Payloads: {}, {sharing}}}",
                kafka.brokers.join(", "),
                if kafka.tx_ids_only { "TxId" } else { "Full" },
            );
        } else if self.orderers > 1 {
            text.push_str("      EtcdRaft:\n        Consenters:\n");
            for orderer in orderers {
                let _ = writeln!(text, "          - {}", consenter(orderer));
            }
        }
        text.push_str(
            "      Organizations: [*OrdererOrg]\n      Policies:\n        <<: *ImplicitPolicies\n\
             \x20       BlockValidation: {Type: ImplicitMeta, Rule: \"ANY Writers\"}\n\
             \x20     Capabilities: {V2_0: true}\n\
             \x20   Application:\n      Organizations: [",
        );
        let orgs: Vec<String> = (1..=self.organisations)
            .map(|n| format!("*Org{n}"))
            .collect();
        text.push_str(&orgs.join(", "));
        text.push_str(
            "]\n      Policies:\n        <<: *ImplicitPolicies\n\
             \x20       LifecycleEndorsement: {Type: ImplicitMeta, Rule: \"MAJORITY Endorsement\"}\n\
             \x20       Endorsement: {Type: ImplicitMeta, Rule: \"MAJORITY Endorsement\"}\n\
             \x20     Capabilities: {V2_5: true}\n",
        );
    }

    /// Whether the channel of position `index` (0: the first) streams.
    pub fn streams(&self, index: usize) -> bool {
        self.stream
            .as_ref()
            .is_some_and(|stream| stream.channels.is_none_or(|count| index < count))
    }

    /// The profile of `channel.yaml` a channel's genesis block is made
    /// from.
    pub fn channel_profile(&self, index: usize) -> &'static str {
        if self.streams(index) {
            STREAM_PROFILE
        } else {
            BLOCK_PROFILE
        }
    }

    /// The async worker threads of each node (`workerThreads`): the nodes
    /// share the machine's cores, at least one each. A node of its own
    /// takes every core; five on two cores, each with a worker per core,
    /// spent 6–14% more CPU per transaction (docs/benchmarks.md).
    fn worker_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let nodes = self.orderers + self.organisations * self.peers_per_org;
        (cores / nodes.max(1)).max(1)
    }

    /// The configuration file of an orderer, for a file in `dir/<name>/`.
    pub fn orderer_yaml(&self, orderer: &OrdererNode) -> String {
        let consensus = if self.orderers == 1 && self.kafka.is_none() {
            "solo"
        } else {
            "channel"
        };
        let mut text = format!(
            "# Orderer {name} of this network (written by `weft network up`; see\n\
             # config/orderer.yaml for every key). Paths are relative to this file.\n\
             orderer:\n  id: {name}\n  listenAddress: {grpc}\n  localMspId: OrdererMSP\n\
             \x20 mspConfigPath: ../crypto/ordererOrganizations/{ORDERER_DOMAIN}/orderers/{name}/msp\n\
             \x20 fileSystemPath: data\n\
             \x20 workerThreads: {workers}\n\
             {tls}\
             {channels}\
             consensus:\n  type: {consensus}\n\
             operations:\n  listenAddress: {operations}\n",
            name = orderer.name,
            grpc = orderer.grpc,
            workers = self.worker_threads(),
            tls = self.tls_yaml(
                &format!(
                    "ordererOrganizations/{ORDERER_DOMAIN}/orderers/{}",
                    orderer.name
                ),
                &[ORDERER_TLS_CA.to_owned()],
            ),
            channels = self.channels_yaml(),
            operations = orderer.operations,
        );
        // Raft's traffic, or the envelopes Kafka orderers hand each other.
        if self.orderers > 1 {
            let _ = write!(
                text,
                "cluster:\n  listenAddress: {0}\n  endpoint: {0}\n",
                orderer.cluster
            );
        }
        text
    }

    /// The `tls` section of a node whose cryptogen folder is `node_dir`
    /// (under `crypto/`), trusting `roots`; nothing without TLS.
    fn tls_yaml(&self, node_dir: &str, roots: &[String]) -> String {
        if !self.tls {
            return String::new();
        }
        // A YAML list of files under `crypto/`, relative to the node's folder.
        let list = |files: &[String]| {
            let paths: Vec<String> = files
                .iter()
                .map(|file| format!("../crypto/{file}"))
                .collect();
            paths.join(", ")
        };
        let mut text = format!(
            "  tls:\n    enabled: true\n    certificate: ../crypto/{node_dir}/tls/server.crt\n\
             \x20   privateKey: ../crypto/{node_dir}/tls/server.key\n    rootCAs: [{}]\n",
            list(roots)
        );
        if self.mutual_tls {
            let _ = write!(
                text,
                "    clientAuthRequired: true\n    clientRootCAs: [{}]\n",
                list(&self.tls_cas())
            );
        }
        text
    }

    /// Every TLS CA certificate of the network, under `crypto/`: the
    /// orderers' and each organisation's.
    fn tls_cas(&self) -> Vec<String> {
        std::iter::once(ORDERER_TLS_CA.to_owned())
            .chain((1..=self.organisations).map(|org| {
                format!("peerOrganizations/org{org}.example.com/tlsca/tlsca.org{org}.example.com-cert.pem")
            }))
            .collect()
    }

    /// The configuration file of a peer, for a file in `dir/<name>/`.
    pub fn peer_yaml(&self, peer: &PeerNode) -> Result<String> {
        let orderers: Vec<String> = self
            .orderer_nodes()?
            .iter()
            .map(|o| o.grpc.to_string())
            .collect();
        let mut text = format!(
            "# Peer {name} of this network (written by `weft network up`; see\n\
             # config/peer.yaml for every key). Paths are relative to this file.\n\
             peer:\n  id: {name}\n  listenAddress: {grpc}\n  localMspId: {msp_id}\n\
             \x20 mspConfigPath: ../crypto/peerOrganizations/{org}.example.com/peers/{name}/msp\n\
             \x20 fileSystemPath: data\n\
             \x20 workerThreads: {workers}\n\
             {tls}\
             {channels}\
             orderers: [{orderers}]\n\
             ledger:\n  history:\n    enableHistoryDatabase: true\n\
             committer:\n  validationThreads: {workers}\n\
             operations:\n  listenAddress: {operations}\n\
             gateway:\n  peers:\n",
            name = peer.name,
            grpc = peer.grpc,
            workers = self.worker_threads(),
            msp_id = peer.msp_id,
            org = peer.org,
            tls = self.tls_yaml(
                &format!(
                    "peerOrganizations/{}.example.com/peers/{}",
                    peer.org, peer.name
                ),
                &self.tls_cas(),
            ),
            channels = self.channels_yaml(),
            orderers = orderers.join(", "),
            operations = peer.operations,
        );
        // The Gateway knows every peer of the other organisations, and
        // asks the one of its own place first (peer1 asks peer1, then the
        // rest in turn), so that the organisations' peers share the
        // endorsements and each is the others' stand-in. Its own
        // organisation's other peers follow, for private data, from the
        // next place on.
        let peers = self.peer_nodes()?;
        let (mut listed, mut own) = (Vec::new(), Vec::new());
        for organisation in peers.chunks(self.peers_per_org.max(1)) {
            let first = peer.index % organisation.len();
            let in_turn = organisation[first..].iter().chain(&organisation[..first]);
            if organisation[0].org == peer.org {
                own.extend(in_turn.filter(|other| other.name != peer.name));
            } else {
                listed.extend(in_turn);
            }
        }
        listed.append(&mut own);
        for other in listed {
            let _ = writeln!(
                text,
                "    - {{mspId: {}, address: {}}}",
                other.msp_id, other.grpc
            );
        }
        if self
            .stream
            .as_ref()
            .is_some_and(|stream| stream.commit_status_applied)
        {
            text.push_str("  commitStatus: applied\n");
        }
        Ok(text)
    }

    /// The client connection file of the network in `dir` (absolute).
    pub fn connection_file(&self, dir: &Path) -> Result<ConnectionFile> {
        let crypto = dir.join("crypto");
        let orderer_tls_ca = crypto.join(ORDERER_TLS_CA);
        let orderers = self
            .orderer_nodes()?
            .into_iter()
            .map(|orderer| Endpoint {
                name: orderer.name,
                endpoint: orderer.grpc.to_string(),
                operations: orderer.operations.to_string(),
                tls_ca_cert: orderer_tls_ca.clone(),
            })
            .collect();
        let peers = self.peer_nodes()?;
        let organizations = (1..=self.organisations)
            .map(|org_number| {
                let org = format!("org{org_number}");
                let org_dir = crypto.join(format!("peerOrganizations/{org}.example.com"));
                let tls_ca_cert = org_dir.join(format!("tlsca/tlsca.{org}.example.com-cert.pem"));
                let user = |name: &str| {
                    let msp = org_dir.join(format!("users/{name}@{org}.example.com/msp"));
                    User {
                        name: format!("{name}@{org}.example.com"),
                        certificate: msp
                            .join(format!("signcerts/{name}@{org}.example.com-cert.pem")),
                        private_key: msp.join("keystore/priv_sk"),
                    }
                };
                Organization {
                    name: org.clone(),
                    msp_id: crate::bench::org_msp_id(&org),
                    peers: peers
                        .iter()
                        .filter(|peer| peer.org == org)
                        .map(|peer| Endpoint {
                            name: peer.name.clone(),
                            endpoint: peer.grpc.to_string(),
                            operations: peer.operations.to_string(),
                            tls_ca_cert: tls_ca_cert.clone(),
                        })
                        .collect(),
                    user: user("User1"),
                    admin: user("Admin"),
                }
            })
            .collect();
        Ok(ConnectionFile {
            channel: self.channel.clone(),
            channels: self.channel_names(),
            chaincodes: self.deployed.clone(),
            endorsement_policy: Some(self.policy.clone()),
            tls: self.tls,
            client_tls: self.mutual_tls.then(|| {
                let user = crypto
                    .join("peerOrganizations/org1.example.com/users/User1@org1.example.com/tls");
                ClientTls {
                    certificate: user.join("client.crt"),
                    private_key: user.join("client.key"),
                }
            }),
            organizations,
            orderers,
        })
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let plan: Self =
            serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(&text))
                .map_err(|e| anyhow::anyhow!("{}: {}: {}", path.display(), e.path(), e.inner()))?;
        plan.check()
            .with_context(|| format!("{}: the saved plan", path.display()))?;
        Ok(plan)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let text = format!(
            "# The shape of this network, written by `weft network up` and read when it\n\
             # resumes. Edit with care: the crypto material and channel were made from it.\n{}",
            serde_yaml::to_string(self)?
        );
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn plan(orderers: usize) -> Plan {
        Plan {
            channel: "mychannel".to_owned(),
            channels: 1,
            orderers,
            organisations: 2,
            peers_per_org: 2,
            base_port: 7050,
            policy: "OR('Org1MSP.peer','Org2MSP.peer')".to_owned(),
            batch_timeout: "10ms".to_owned(),
            block_size: 500,
            stream: None,
            kafka: None,
            tls: false,
            mutual_tls: false,
            deployed: Vec::new(),
        }
    }

    #[test]
    fn a_kafka_network_names_its_brokers_and_the_orderers_that_share_envelopes() {
        let kafka = Plan {
            kafka: Some(KafkaPlan {
                brokers: vec!["127.0.0.1:9092".to_owned()],
                tx_ids_only: true,
            }),
            ..plan(2)
        };
        kafka.check().unwrap();
        let yaml: serde_yaml::Value = serde_yaml::from_str(&kafka.channel_yaml().unwrap()).unwrap();
        let orderer = &yaml["Profiles"][BLOCK_PROFILE]["Orderer"];
        assert_eq!(orderer["OrdererType"], "kafka");
        assert_eq!(orderer["Kafka"]["Brokers"][0], "127.0.0.1:9092");
        assert_eq!(orderer["Kafka"]["Payloads"], "TxId");
        assert_eq!(orderer["Kafka"]["Orderers"][1], "127.0.0.1:7063");
        assert!(orderer["EtcdRaft"].is_null());
        // Over TLS each orderer is named with its certificates.
        let secured = Plan {
            tls: true,
            mutual_tls: true,
            ..kafka.clone()
        };
        let yaml: serde_yaml::Value =
            serde_yaml::from_str(&secured.channel_yaml().unwrap()).unwrap();
        let sharing = &yaml["Profiles"][BLOCK_PROFILE]["Orderer"]["Kafka"];
        assert!(sharing["Orderers"].is_null());
        assert_eq!(sharing["Consenters"][1]["Port"], 7063);
        assert!(
            sharing["Consenters"][1]["ClientTLSCert"]
                .as_str()
                .unwrap()
                .ends_with("/tls/server.crt")
        );
        let one = Plan {
            orderers: 1,
            ..kafka.clone()
        };
        let node = &one.orderer_nodes().unwrap()[0];
        assert!(one.orderer_yaml(node).contains("type: channel"));
        for (bad, option) in [
            (
                Plan {
                    stream: Some(StreamPlan {
                        checkpoint_transactions: 10,
                        checkpoint_interval: "5ms".to_owned(),
                        commit_status_applied: false,
                        channels: None,
                    }),
                    ..kafka.clone()
                },
                "--stream",
            ),
            (
                Plan {
                    kafka: Some(KafkaPlan {
                        brokers: vec!["localhost".to_owned()],
                        tx_ids_only: false,
                    }),
                    ..plan(1)
                },
                "--kafka-brokers",
            ),
        ] {
            let error = format!("{:#}", bad.check().unwrap_err());
            assert!(error.contains(option), "{error}");
        }
    }

    #[test]
    fn the_first_stream_channels_stream_and_the_rest_cut_blocks() {
        let stream = |channels| StreamPlan {
            checkpoint_transactions: 10,
            checkpoint_interval: "5ms".to_owned(),
            commit_status_applied: false,
            channels,
        };
        let mixed = Plan {
            channels: 3,
            stream: Some(stream(Some(1))),
            ..plan(3)
        };
        mixed.check().unwrap();
        let profiles: Vec<&str> = (0..3).map(|index| mixed.channel_profile(index)).collect();
        assert_eq!(profiles, [STREAM_PROFILE, BLOCK_PROFILE, BLOCK_PROFILE]);
        let yaml: serde_yaml::Value = serde_yaml::from_str(&mixed.channel_yaml().unwrap()).unwrap();
        let orderer = |profile: &str| yaml["Profiles"][profile]["Orderer"].clone();
        assert!(orderer(BLOCK_PROFILE)["StreamMode"].is_null());
        assert_eq!(
            orderer(STREAM_PROFILE)["StreamMode"]["CheckpointTransactions"],
            10
        );
        let all = Plan {
            channels: 2,
            stream: Some(stream(None)),
            ..plan(3)
        };
        assert!((0..2).all(|index| all.streams(index)));
        assert!(!plan(3).streams(0));
        for count in [0, 4] {
            let bad = Plan {
                stream: Some(stream(Some(count))),
                ..mixed.clone()
            };
            let error = format!("{:#}", bad.check().unwrap_err());
            assert!(error.contains("--stream-channels"), "{error}");
        }
    }

    #[test]
    fn ports_follow_fabrics_test_network_and_never_collide() {
        let plan = plan(3);
        plan.check().unwrap();
        let orderers = plan.orderer_nodes().unwrap();
        let peers = plan.peer_nodes().unwrap();
        assert_eq!(orderers[0].grpc.port(), 7050);
        assert_eq!(orderers[2].cluster.port(), 7073);
        let peer = |name: &str| peers.iter().find(|p| p.name == name).unwrap().grpc.port();
        assert_eq!(peer("peer0.org1.example.com"), 7051);
        assert_eq!(peer("peer1.org1.example.com"), 7151);
        assert_eq!(peer("peer0.org2.example.com"), 9051);
        let mut ports: Vec<u16> = plan.ports().unwrap().iter().map(|a| a.port()).collect();
        let count = ports.len();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), count);
    }

    #[test]
    fn policy_presets_are_thakkars_table_iii() {
        let expand = |preset: &str| expand_policy(preset, 4).unwrap();
        assert_eq!(
            expand("any"),
            "OR('Org1MSP.peer','Org2MSP.peer','Org3MSP.peer','Org4MSP.peer')"
        );
        assert_eq!(expand("and-or-1"), expand("any"));
        assert_eq!(
            expand("and-or-4"),
            "AND('Org1MSP.peer','Org2MSP.peer','Org3MSP.peer','Org4MSP.peer')"
        );
        assert_eq!(expand("and-or-4"), expand("all"));
        assert_eq!(
            expand("outof-2"),
            "OutOf(2, 'Org1MSP.peer','Org2MSP.peer','Org3MSP.peer','Org4MSP.peer')"
        );
        let pairs = expand("and-or-2");
        assert_eq!(pairs.matches("AND(").count(), 6, "{pairs}");
        assert!(pairs.starts_with("OR(AND('Org1MSP.peer','Org2MSP.peer'),"));
        assert_eq!(expand("and-or-3").matches("AND(").count(), 4);
        // Each preset is a policy the peers accept, and k-of-4 in both
        // forms is satisfied by exactly the same sets of organisations.
        let satisfied_by = |policy: &str| -> Vec<usize> {
            let compiled = weft_policy::SignaturePolicy::compile(
                policy,
                &weft_policy::dsl::parse(policy).unwrap(),
            )
            .unwrap();
            (0u32..16)
                .filter(|set| {
                    let peers: Vec<weft_policy::PeerOf> = (0..4)
                        .filter(|org| set & (1 << org) != 0)
                        .map(|org| weft_policy::PeerOf(format!("Org{}MSP", org + 1)))
                        .collect();
                    compiled.is_satisfied_by(&peers)
                })
                .map(|set| set as usize)
                .collect()
        };
        for k in 1..=4 {
            assert_eq!(
                satisfied_by(&expand(&format!("and-or-{k}"))),
                satisfied_by(&expand(&format!("outof-{k}"))),
                "k = {k}"
            );
        }
        assert_eq!(expand("OR('Org1MSP.member')"), "OR('Org1MSP.member')");
        let refused = expand_policy("outof-5", 4).unwrap_err().to_string();
        assert!(refused.contains("--policy outof-5"), "{refused}");
        assert!(expand_policy("and-or-x", 4).is_err());
    }

    #[test]
    fn a_gateway_knows_every_other_peer_its_own_place_first_its_organisation_last() {
        let plan = plan(3);
        plan.check().unwrap();
        let peers = plan.peer_nodes().unwrap();
        let endorsers_of = |name: &str| -> Vec<String> {
            let peer = peers.iter().find(|peer| peer.name == name).unwrap();
            let yaml: serde_yaml::Value =
                serde_yaml::from_str(&plan.peer_yaml(peer).unwrap()).unwrap();
            yaml["gateway"]["peers"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|known| {
                    format!(
                        "{} {}",
                        known["mspId"].as_str().unwrap(),
                        known["address"].as_str().unwrap()
                    )
                })
                .collect()
        };
        let address_of = |name: &str| peers.iter().find(|peer| peer.name == name).unwrap().grpc;
        let (org1_first, org1_second) = (
            address_of("peer0.org1.example.com"),
            address_of("peer1.org1.example.com"),
        );
        let (org2_first, org2_second) = (
            address_of("peer0.org2.example.com"),
            address_of("peer1.org2.example.com"),
        );
        // Its organisation's other peer after the endorsers, for private
        // data; never itself.
        assert_eq!(
            endorsers_of("peer0.org1.example.com"),
            [
                format!("Org2MSP {org2_first}"),
                format!("Org2MSP {org2_second}"),
                format!("Org1MSP {org1_second}")
            ]
        );
        assert_eq!(
            endorsers_of("peer1.org1.example.com"),
            [
                format!("Org2MSP {org2_second}"),
                format!("Org2MSP {org2_first}"),
                format!("Org1MSP {org1_first}")
            ]
        );
        assert_eq!(
            endorsers_of("peer0.org2.example.com")[0],
            format!("Org1MSP {org1_first}")
        );
    }

    #[test]
    fn several_channels_are_numbered_and_every_node_joins_them() {
        let mut plan = plan(3);
        plan.channels = 3;
        plan.check().unwrap();
        assert_eq!(
            plan.channel_names(),
            ["mychannel", "mychannel2", "mychannel3"]
        );
        let orderer = &plan.orderer_nodes().unwrap()[0];
        assert_eq!(
            plan.orderer_yaml(orderer).matches("genesisBlock").count(),
            3
        );
        let peer = &plan.peer_nodes().unwrap()[0];
        assert!(
            plan.peer_yaml(peer)
                .unwrap()
                .contains("genesisBlock: ../mychannel3.block")
        );
        let connection = plan.connection_file(Path::new("/net")).unwrap();
        assert_eq!(connection.all_channels(), plan.channel_names());
        plan.channels = CHANNELS_MAX + 1;
        assert!(plan.check().unwrap_err().to_string().contains("--channels"));
    }

    #[test]
    fn bad_numbers_are_refused_naming_the_option() {
        let mut bad = plan(3);
        bad.base_port = 65_000;
        assert!(format!("{:#}", bad.check().unwrap_err()).contains("--base-port"));
        let mut bad = plan(0);
        bad.orderers = 0;
        assert!(bad.check().unwrap_err().to_string().contains("--orderers"));
        let mut bad = plan(1);
        bad.policy = "OR(".to_owned();
        assert!(format!("{:#}", bad.check().unwrap_err()).contains("--policy"));
    }

    #[test]
    fn the_generated_files_parse_as_the_nodes_read_them() {
        let dir = tempfile::tempdir().unwrap();
        for (orderers, tls) in [(1, false), (3, true)] {
            let plan = Plan {
                tls,
                ..plan(orderers)
            };
            let mut workers = Vec::new();
            let channel: serde_yaml::Value =
                serde_yaml::from_str(&plan.channel_yaml().unwrap()).unwrap();
            let kind = &channel["Profiles"]["Network"]["Orderer"]["OrdererType"];
            assert_eq!(
                kind.as_str(),
                Some(if orderers == 1 { "solo" } else { "etcdraft" })
            );
            let _: serde_yaml::Value = serde_yaml::from_str(&plan.crypto_yaml()).unwrap();
            for orderer in plan.orderer_nodes().unwrap() {
                let path = dir.path().join("orderer.yaml");
                std::fs::write(&path, plan.orderer_yaml(&orderer)).unwrap();
                let file: crate::orderer::OrdererFile =
                    crate::settings::load_yaml(&path, "X_").unwrap();
                assert_eq!(file.orderer.listen_address, orderer.grpc);
                workers.push(file.orderer.worker_threads);
                assert_eq!(file.cluster.is_some(), orderers > 1);
                assert_eq!(file.orderer.tls.enabled, tls);
                if tls {
                    let certificate = file.orderer.tls.certificate.unwrap();
                    assert!(certificate.ends_with(format!("{}/tls/server.crt", orderer.name)));
                    assert_eq!(file.orderer.tls.root_cas.len(), 1);
                }
            }
            for peer in plan.peer_nodes().unwrap() {
                let path = dir.path().join("peer.yaml");
                std::fs::write(&path, plan.peer_yaml(&peer).unwrap()).unwrap();
                // With TLS on, loading reads the certificates, which this
                // test has not generated: the file is parsed only.
                let file: crate::peer::PeerConfig = if tls {
                    crate::settings::load_yaml(&path, "X_").unwrap()
                } else {
                    crate::peer::PeerConfig::load(&path).unwrap()
                };
                assert_eq!(file.peer.listen_address, peer.grpc);
                workers.push(file.peer.worker_threads);
                // Validation keeps to the same share of the cores.
                assert_eq!(file.committer.validation_threads, file.peer.worker_threads);
                assert_eq!(file.orderers.len(), orderers);
                // Every other peer of the network.
                assert_eq!(
                    file.gateway.peers.len(),
                    plan.organisations * plan.peers_per_org - 1
                );
                assert_eq!(file.peer.tls.enabled, tls);
                if tls {
                    // The orderers' TLS CA and every organisation's.
                    assert_eq!(file.peer.tls.root_cas.len(), 1 + plan.organisations);
                }
            }
            assert_eq!(plan.connection_file(dir.path()).unwrap().tls, tls);
            // The nodes share the machine's cores: a worker each at least,
            // no more workers in all than cores (or nodes, if more).
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            assert!(workers.iter().all(|&threads| threads >= 1), "{workers:?}");
            assert!(
                workers.iter().sum::<usize>() <= cores.max(workers.len()),
                "{workers:?} on {cores} cores"
            );
        }
    }
}
