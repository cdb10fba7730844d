//! `weft channel consenter add|remove`: changes a Raft channel's consenter
//! set by a config update, as a Fabric operator does with configtxlator,
//! `peer channel signconfigtx` and `peer channel update`, in one command.
//!
//! It reads the channel's current config from an orderer, rewrites the
//! etcdraft consenters in the Orderer group's `ConsensusType` (one added
//! or one removed: Fabric's rule), signs the update as the orderer
//! organisation's admin, submits it, and waits for the config block that
//! makes the change, which it can write to a file: the block a new
//! orderer joins the channel from (`channels[].genesisBlock` in its
//! orderer.yaml). Replacing an orderer whose disk failed is a removal,
//! then an addition at the same endpoint (docs/security.md).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use prost::Message;
use weft_msp::Signer;
use weft_protos::common::{Block, Config, ConfigGroup, ConfigUpdate, Status};
use weft_protos::etcdraft::{ConfigMetadata, Consenter};
use weft_protos::orderer::ConsensusType;

use crate::client::{Dialer, TlsArgs, broadcast_one, fetch_block};
use crate::settings::read_file;

/// How long the config block may take to appear after SUCCESS.
const CONFIG_BLOCK_WAIT_MAX: Duration = Duration::from_secs(30);

/// What `weft channel consenter add` and `remove` need.
#[derive(Debug, Clone, clap::Args)]
pub struct ConsenterArgs {
    /// The channel whose consenters change.
    #[arg(long)]
    channel: String,
    /// An orderer of the channel, to read the config from and submit to.
    #[arg(long)]
    orderer: SocketAddr,
    /// The consenter's cluster endpoint, host:port, as the channel config
    /// names consenters.
    #[arg(long)]
    endpoint: String,
    /// The MSP folder of an admin of the orderer organisation (its
    /// signcerts/ and keystore/), who signs the update.
    #[arg(long)]
    admin_msp: PathBuf,
    /// The orderer organisation's MSP ID.
    #[arg(long, default_value = "OrdererMSP")]
    msp_id: String,
    /// Where to write the config block that made the change (for a new
    /// orderer to join the channel from).
    #[arg(long)]
    output: Option<PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
}

/// The TLS certificates of a consenter being added.
#[derive(Debug, Clone, clap::Args)]
pub struct ConsenterTls {
    /// The TLS certificate (PEM) the consenter presents when it dials the
    /// others (etcdraft's `ClientTLSCert`); needed when the orderers run
    /// TLS.
    #[arg(long)]
    client_tls_cert: Option<PathBuf>,
    /// The TLS certificate (PEM) the consenter serves the cluster with
    /// (`ServerTLSCert`).
    #[arg(long)]
    server_tls_cert: Option<PathBuf>,
}

/// A change of the consenter set.
#[derive(Debug, Clone)]
pub enum Change {
    Add(ConsenterTls),
    Remove,
}

/// Makes `change` for `args.endpoint` and prints what happened.
pub fn run(args: &ConsenterArgs, change: &Change) -> Result<()> {
    let (host, port) = args
        .endpoint
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host, port.parse::<u32>().ok()?)))
        .filter(|(host, _)| !host.is_empty())
        .ok_or_else(|| anyhow!("--endpoint {:?}: not host:port", args.endpoint))?;
    let consenter = match change {
        Change::Add(tls) => Some(Consenter {
            host: host.to_owned(),
            port,
            client_tls_cert: optional_file("--client-tls-cert", tls.client_tls_cert.as_ref())?,
            server_tls_cert: optional_file("--server-tls-cert", tls.server_tls_cert.as_ref())?,
        }),
        Change::Remove => None,
    };
    let admin = weft_msp::folder::load_signer(&args.admin_msp, &args.msp_id)
        .with_context(|| format!("--admin-msp {}", args.admin_msp.display()))?
        .ok_or_else(|| {
            anyhow!(
                "--admin-msp {}: holds no signing identity (signcerts/ and keystore/)",
                args.admin_msp.display()
            )
        })?;
    let dialer = args.tls.dialer()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let block = runtime.block_on(change_consenters(
        args,
        &dialer,
        &admin,
        &args.endpoint,
        consenter,
    ))?;
    let number = block.header.as_ref().map_or(0, |header| header.number);
    let verb = match change {
        Change::Add(_) => "added",
        Change::Remove => "removed",
    };
    println!(
        "{verb} consenter {} on channel {}: config block {number}",
        args.endpoint, args.channel
    );
    if let Some(output) = &args.output {
        std::fs::write(output, block.encode_to_vec())
            .with_context(|| format!("--output: writing {}", output.display()))?;
        println!("wrote config block {number} to {}", output.display());
    }
    Ok(())
}

fn optional_file(flag: &str, path: Option<&PathBuf>) -> Result<Bytes> {
    path.map_or(Ok(Bytes::new()), |path| {
        read_file(flag, path).map(Bytes::from)
    })
}

/// Submits the change (adding `consenter`, or removing the one at
/// `endpoint` when `None`) and returns the config block that made it.
async fn change_consenters(
    args: &ConsenterArgs,
    dialer: &Dialer,
    admin: &Signer,
    endpoint: &str,
    consenter: Option<Consenter>,
) -> Result<Block> {
    let (number, config) = current_config(dialer, args.orderer, &args.channel, admin).await?;
    let update = consenters_update(&args.channel, &config, endpoint, consenter)?;
    let envelope = weft_protos::tx::config_update_envelope(
        &args.channel,
        &update,
        &[admin],
        admin,
        || {
            admin
                .new_nonce()
                .map_err(|e| weft_protos::tx::SignError(e.to_string()))
        },
        weft_msp::now(),
    )?;
    let answer = broadcast_one(dialer, args.orderer, envelope).await?;
    if answer.status != Status::Success as i32 {
        let status = Status::try_from(answer.status).map_or_else(
            |_| answer.status.to_string(),
            |s| s.as_str_name().to_owned(),
        );
        bail!(
            "the orderer refused the config update: {status}: {}",
            answer.info
        );
    }
    let deadline = tokio::time::Instant::now() + CONFIG_BLOCK_WAIT_MAX;
    loop {
        let tip = fetch_block(dialer, args.orderer, &args.channel, admin, None).await?;
        let last = weft_protos::block::last_config_index(&tip).unwrap_or(0);
        if last > number {
            return fetch_block(dialer, args.orderer, &args.channel, admin, Some(last)).await;
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the orderer answered SUCCESS, but no config block followed block {number} \
                 within {}s",
                CONFIG_BLOCK_WAIT_MAX.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The number of the channel's last config block and its config, read
/// from `orderer`.
async fn current_config(
    dialer: &Dialer,
    orderer: SocketAddr,
    channel: &str,
    reader: &Signer,
) -> Result<(u64, Config)> {
    let tip = fetch_block(dialer, orderer, channel, reader, None).await?;
    let number = weft_protos::block::last_config_index(&tip).unwrap_or(0);
    let block = fetch_block(dialer, orderer, channel, reader, Some(number)).await?;
    let (_, config) = weft_protos::block::config_of_block(&block)
        .ok_or_else(|| anyhow!("block {number} of {channel} holds no config"))?;
    Ok((number, config))
}

/// A config update of `channel` whose Orderer group's `ConsensusType`
/// adds `consenter` (or, with `None`, drops the one at `endpoint`): the
/// group read at its version, the value written at its next one.
fn consenters_update(
    channel: &str,
    current: &Config,
    endpoint: &str,
    consenter: Option<Consenter>,
) -> Result<ConfigUpdate> {
    let root = current
        .channel_group
        .as_ref()
        .ok_or_else(|| anyhow!("the channel config has no root group"))?;
    let orderer = root
        .groups
        .get("Orderer")
        .ok_or_else(|| anyhow!("the channel config has no Orderer group"))?;
    let mut consensus_type = orderer
        .values
        .get("ConsensusType")
        .cloned()
        .ok_or_else(|| anyhow!("the Orderer group has no ConsensusType"))?;
    let mut value = ConsensusType::decode(consensus_type.value.clone())
        .context("the ConsensusType value does not decode")?;
    if value.r#type != "etcdraft" {
        bail!(
            "the channel is ordered by {:?}; consenters change only on etcdraft",
            value.r#type
        );
    }
    let mut metadata = ConfigMetadata::decode(value.metadata.clone())
        .context("the etcdraft metadata does not decode")?;
    let at = |consenter: &Consenter| format!("{}:{}", consenter.host, consenter.port) == endpoint;
    let named = metadata.consenters.iter().any(at);
    match consenter {
        Some(consenter) => {
            if named {
                bail!("--endpoint {endpoint}: already a consenter of {channel}");
            }
            metadata.consenters.push(consenter);
        }
        None => {
            if !named {
                bail!("--endpoint {endpoint}: not a consenter of {channel}");
            }
            metadata.consenters.retain(|consenter| !at(consenter));
        }
    }
    value.metadata = metadata.encode_to_vec().into();
    consensus_type.value = value.encode_to_vec().into();
    consensus_type.version += 1;
    let stub = |group: &ConfigGroup| ConfigGroup {
        version: group.version,
        ..ConfigGroup::default()
    };
    let mut written = stub(orderer);
    written
        .values
        .insert("ConsensusType".to_owned(), consensus_type);
    Ok(ConfigUpdate {
        channel_id: channel.to_owned(),
        read_set: Some(ConfigGroup {
            groups: BTreeMap::from([("Orderer".to_owned(), stub(orderer))]),
            ..stub(root)
        }),
        write_set: Some(ConfigGroup {
            groups: BTreeMap::from([("Orderer".to_owned(), written)]),
            ..stub(root)
        }),
        isolated_data: BTreeMap::new(),
    })
}
