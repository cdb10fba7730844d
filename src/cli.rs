//! Command-line interface: argument definitions and dispatch.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

mod block;

/// weft: a Hyperledger Fabric-compatible permissioned ledger.
#[derive(Debug, Parser)]
#[command(name = "weft", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate MSP folders and TLS material (like Fabric's cryptogen).
    #[command(subcommand)]
    Crypto(CryptoCommand),
    /// Create channel configuration (like Fabric's configtxgen).
    #[command(subcommand)]
    Channel(ChannelCommand),
    /// Read blocks.
    #[command(subcommand)]
    Block(BlockCommand),
    /// Run a peer.
    #[command(subcommand)]
    Peer(PeerCommand),
    /// Run an orderer.
    #[command(subcommand)]
    Orderer(OrdererCommand),
    /// Manage chaincode definitions on a channel.
    #[command(subcommand)]
    Chaincode(ChaincodeCommand),
    /// Run a local network: orderers and two organisations' peers.
    #[command(subcommand)]
    Network(NetworkCommand),
    /// Measure weft: a Fabric client's load against a network (its own,
    /// or --connect FILE), or one component (subcommands).
    Bench(Box<BenchArgs>),
    /// Fault injection: a network of node processes under Fabric-client
    /// load while nodes are killed and stalled, round by round from a
    /// seed; then every node's chain is audited against what the clients
    /// were told.
    Chaos(Box<crate::chaos::ChaosArgs>),
}

#[derive(Debug, Subcommand)]
enum ChaincodeCommand {
    /// Approve a chaincode definition for each organisation and commit it
    /// on the channel (Fabric's approveformyorg + commit).
    #[command(disable_version_flag = true)]
    Deploy(crate::chaincode::DeployArgs),
}

#[derive(Debug, Subcommand)]
enum NetworkCommand {
    /// Create (first run) or resume a network in a data directory, define
    /// the built-in chaincodes, write a client connection file, and run
    /// until Ctrl-C.
    Up(crate::network::UpArgs),
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchArgs {
    #[command(subcommand)]
    component: Option<BenchCommand>,
    #[command(flatten)]
    load: crate::bench::load::LoadArgs,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// FastFabric's peer experiment: a peer process commits signed blocks
    /// of transfer transactions fed over Deliver from this process.
    Committer(crate::bench::committer::CommitterBenchArgs),
    /// FastFabric's orderer experiment: concurrent clients broadcast
    /// pre-signed envelopes to an orderer process.
    Orderer(crate::bench::orderer::OrdererBenchArgs),
    /// Proposals per second: concurrent clients send pre-signed proposals
    /// to a peer process's endorser.
    Endorser(crate::bench::endorser::EndorserBenchArgs),
    /// What this machine charges for a stream transaction's messages,
    /// synced writes and signatures alone, between threads over loopback
    /// TCP: the floor under weft's own cost.
    Floor(crate::bench::floor::FloorBenchArgs),
}

#[derive(Debug, Subcommand)]
enum PeerCommand {
    /// Start a peer: commit the configured channels' blocks and serve them.
    Start {
        /// The peer's configuration (see config/peer.yaml).
        #[arg(long, default_value = "config/peer.yaml")]
        config: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum OrdererCommand {
    /// Start an orderer: order and serve the configured channels' blocks.
    Start {
        /// The orderer's configuration (see config/orderer.yaml).
        #[arg(long, default_value = "config/orderer.yaml")]
        config: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum CryptoCommand {
    /// Write organisations, nodes and users in Fabric's cryptogen layout.
    Generate {
        /// A cryptogen `crypto-config.yaml` (see config/crypto.yaml).
        #[arg(long, default_value = "config/crypto.yaml")]
        config: PathBuf,
        /// Directory to write `ordererOrganizations/` and `peerOrganizations/` into.
        #[arg(long)]
        output: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum ChannelCommand {
    /// Write a channel's genesis block (a Fabric config block).
    Genesis {
        /// A configtxgen-style `configtx.yaml` (see config/channel.yaml).
        #[arg(long, default_value = "config/channel.yaml")]
        config: PathBuf,
        /// The profile of the config file to use; may be omitted when the
        /// file has exactly one.
        #[arg(long)]
        profile: Option<String>,
        /// The channel name.
        #[arg(long)]
        channel: String,
        /// Where to write the block.
        #[arg(long)]
        output: PathBuf,
    },
    /// Change a Raft channel's consenters, one per config update.
    #[command(subcommand)]
    Consenter(ConsenterCommand),
}

#[derive(Debug, Subcommand)]
enum ConsenterCommand {
    /// Add a consenter; then start it from the config block this writes
    /// (--output), as its orderer.yaml's channels[].genesisBlock.
    Add {
        #[command(flatten)]
        args: crate::channel::consenter::ConsenterArgs,
        #[command(flatten)]
        tls: crate::channel::consenter::ConsenterTls,
    },
    /// Remove a consenter: it stops ordering the channel once the config
    /// block is written.
    Remove {
        #[command(flatten)]
        args: crate::channel::consenter::ConsenterArgs,
    },
}

#[derive(Debug, Subcommand)]
enum BlockCommand {
    /// Print a block as JSON, with nested messages decoded.
    Inspect {
        /// A file holding one serialized `common.Block`.
        file: PathBuf,
    },
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Crypto(CryptoCommand::Generate { config, output }) => {
            let summary = crate::cryptogen::generate(&config, &output)?;
            println!("{summary}");
            Ok(())
        }
        Command::Channel(ChannelCommand::Genesis {
            config,
            profile,
            channel,
            output,
        }) => {
            let block = crate::channel::genesis_block(&config, profile.as_deref(), &channel)?;
            let bytes = prost::Message::encode_to_vec(&block);
            std::fs::write(&output, &bytes)
                .with_context(|| format!("writing {}", output.display()))?;
            println!(
                "wrote genesis block of channel {channel} to {} ({} bytes)",
                output.display(),
                bytes.len()
            );
            Ok(())
        }
        Command::Channel(ChannelCommand::Consenter(ConsenterCommand::Add { args, tls })) => {
            use crate::channel::consenter::{Change, run};
            run(&args, &Change::Add(tls))
        }
        Command::Channel(ChannelCommand::Consenter(ConsenterCommand::Remove { args })) => {
            use crate::channel::consenter::{Change, run};
            run(&args, &Change::Remove)
        }
        Command::Block(BlockCommand::Inspect { file }) => block::inspect(&file),
        Command::Peer(PeerCommand::Start { config }) => crate::peer::start(&config),
        Command::Orderer(OrdererCommand::Start { config }) => crate::orderer::start(&config),
        Command::Network(NetworkCommand::Up(args)) => crate::network::up(&args),
        Command::Chaincode(ChaincodeCommand::Deploy(args)) => crate::chaincode::deploy(&args),
        Command::Bench(bench) => match &bench.component {
            Some(BenchCommand::Committer(args)) => crate::bench::committer::run(args),
            Some(BenchCommand::Orderer(args)) => crate::bench::orderer::run(args),
            Some(BenchCommand::Endorser(args)) => crate::bench::endorser::run(args),
            Some(BenchCommand::Floor(args)) => crate::bench::floor::run(args),
            None => crate::bench::load::run(&bench.load),
        },
        Command::Chaos(args) => crate::chaos::run(&args),
    }
}
