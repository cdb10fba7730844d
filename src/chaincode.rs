//! `weft chaincode deploy`: agree a chaincode definition on a channel
//! through `_lifecycle`, as Fabric's `peer lifecycle chaincode
//! approveformyorg` and `commit` do, against running peers and an orderer.
//!
//! Each organisation's admin (from the cryptogen folder) proposes
//! `ApproveChaincodeDefinitionForMyOrg` to its organisation's peer, and
//! the approval is ordered and committed; then the first organisation's
//! admin proposes `CommitChaincodeDefinition` to every listed peer, and the
//! definition is ordered and committed. The command returns once every
//! listed peer has committed the definition, so the next transaction is
//! validated with its policy.
//!
//! With `--address`, the chaincode is a service at that address: a
//! chaincode-as-a-service package naming it (`connection.json`, as `peer
//! lifecycle chaincode package` builds one) is installed on each listed
//! peer first, as Fabric's `peer lifecycle chaincode install`, and each
//! organisation approves the definition with its package ID; once the
//! definition is committed, the peers dial the address (over TLS with
//! `--chaincode-tls-ca`, presenting `--chaincode-tls-cert` if the server
//! asks). No peer restarts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use prost::Message;
use weft_msp::Signer;
use weft_peer_endorser::ChaincodeTls;
use weft_peer_endorser::package::Package;
use weft_protos::common::{Envelope, Status};
use weft_protos::lifecycle::{
    ApproveChaincodeDefinitionForMyOrgArgs, ChaincodeSource, CommitChaincodeDefinitionArgs,
    InstallChaincodeArgs, InstallChaincodeResult, chaincode_source,
};
use weft_protos::protos::application_policy::Type as PolicyType;
use weft_protos::protos::endorser_client::EndorserClient;
use weft_protos::protos::{
    ApplicationPolicy, CollectionConfig, CollectionConfigPackage, CollectionPolicyConfig,
    ProposalResponse, StaticCollectionConfig, TxValidationCode, collection_config,
    collection_policy_config,
};
use weft_protos::tx::{Invocation, Proposal};

use crate::client::{Dialer, TlsArgs, broadcast_one, next_block, subscribe};
use crate::settings::read_file;

/// How long a peer may take to commit a lifecycle transaction.
const COMMIT_WAIT_MAX: Duration = Duration::from_secs(60);

/// Options of `weft chaincode deploy`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeployArgs {
    /// The channel to define the chaincode on.
    #[arg(long)]
    channel: String,
    /// The chaincode's name (what proposals invoke).
    #[arg(long)]
    name: String,
    /// The chaincode's version label.
    #[arg(long, default_value = "1.0")]
    version: String,
    /// The definition's sequence: 1 for a first definition, one more than
    /// the committed one for a change.
    #[arg(long, default_value_t = 1)]
    sequence: i64,
    /// The endorsement policy, in Fabric's policy language (such as
    /// "OR('Org1MSP.peer','Org2MSP.peer')"). Default: the channel's
    /// /Channel/Application/Endorsement policy.
    #[arg(long)]
    policy: Option<String>,
    /// One peer per organisation that approves, as org=host:port
    /// (comma-separated, such as org1=127.0.0.1:7051,org2=127.0.0.1:9051).
    #[arg(long, value_delimiter = ',', required = true)]
    peers: Vec<String>,
    /// The orderer to submit to.
    #[arg(long)]
    orderer: SocketAddr,
    /// The chaincode server's host:port, for chaincode run as a service:
    /// its package is installed on every listed peer and approved, and
    /// the peers dial it once the definition is committed.
    #[arg(long)]
    address: Option<String>,
    /// With --address: the package's label [default: <name>_<version>].
    #[arg(long, requires = "address")]
    label: Option<String>,
    /// With --address: the peers reach the chaincode server over TLS,
    /// its certificate chaining to this CA certificate (PEM), which the
    /// package's connection.json carries as `root_cert`.
    #[arg(long, requires = "address")]
    chaincode_tls_ca: Option<PathBuf>,
    /// With --chaincode-tls-ca: the client certificate (PEM) the peers
    /// present to a chaincode server that requires one, with
    /// --chaincode-tls-key. The package carries both, as Fabric's does.
    #[arg(long, requires_all = ["chaincode_tls_ca", "chaincode_tls_key"])]
    chaincode_tls_cert: Option<PathBuf>,
    /// The private key (PKCS#8 PEM) of --chaincode-tls-cert.
    #[arg(long, requires = "chaincode_tls_cert")]
    chaincode_tls_key: Option<PathBuf>,
    /// With --address: a folder of CouchDB index definitions (`*.json`,
    /// what Fabric chaincode keeps in META-INF/statedb/couchdb/indexes),
    /// packaged where Fabric packages them; the peers build the indexes
    /// for the chaincode's JSON queries once it is defined.
    #[arg(long, requires = "address")]
    indexes: Option<PathBuf>,
    /// With --address: a folder holding, for each collection, a folder
    /// `<collection>/indexes` of CouchDB index definitions (`*.json`, what
    /// Fabric chaincode keeps in META-INF/statedb/couchdb/collections);
    /// the member peers build them for JSON queries of the collection's
    /// private data.
    #[arg(long, requires = "address")]
    collection_indexes: Option<PathBuf>,
    /// The network's crypto folder (the output of `weft crypto generate`):
    /// each organisation's Admin signs its approval.
    #[arg(long)]
    crypto: PathBuf,
    /// Private data collections of the definition, in Fabric's JSON (what
    /// `peer lifecycle chaincode approveformyorg --collections-config`
    /// reads): name, policy, requiredPeerCount, maxPeerCount,
    /// blockToLive, memberOnlyRead, memberOnlyWrite, endorsementPolicy.
    /// They are part of the definition every organisation approves
    /// (docs/chaincode.md, "Private data").
    #[arg(long)]
    collections_config: Option<PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
}

/// One collection of a `--collections-config` file, as Fabric writes it.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CollectionEntry {
    name: String,
    /// Which organisations' peers hold the data, in Fabric's policy
    /// language.
    policy: String,
    #[serde(default)]
    required_peer_count: i32,
    #[serde(default)]
    max_peer_count: i32,
    #[serde(default)]
    block_to_live: u64,
    #[serde(default)]
    member_only_read: bool,
    #[serde(default)]
    member_only_write: bool,
    #[serde(default)]
    endorsement_policy: Option<CollectionEndorsement>,
}

/// A collection's own endorsement policy: a signature policy, or a
/// reference to a channel config policy.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CollectionEndorsement {
    #[serde(default)]
    signature_policy: Option<String>,
    #[serde(default)]
    channel_config_policy: Option<String>,
}

/// The collections of a `--collections-config` file (Fabric's JSON), as
/// the definition carries them; an error naming the file, the collection
/// and the field for anything Fabric would refuse.
pub(crate) fn read_collections(path: &Path) -> Result<CollectionConfigPackage> {
    let bytes = read_file("--collections-config", path)?;
    let at = || format!("--collections-config {}", path.display());
    let entries: Vec<CollectionEntry> = serde_json::from_slice(&bytes).with_context(at)?;
    let mut names = std::collections::BTreeSet::new();
    let mut config = Vec::with_capacity(entries.len());
    for entry in entries {
        let name = entry.name.clone();
        let bad = |reason: String| anyhow!("{}: collection {name:?}: {reason}", at());
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            return Err(bad("name: use letters, digits, '_' and '-'".to_owned()));
        }
        if !names.insert(name.clone()) {
            return Err(bad("name: defined twice".to_owned()));
        }
        let members = weft_policy::dsl::parse(&entry.policy)
            .map_err(|e| bad(format!("policy {:?}: {e}", entry.policy)))?;
        if entry.required_peer_count < 0 || entry.max_peer_count < 0 {
            return Err(bad(
                "requiredPeerCount and maxPeerCount must not be negative".to_owned(),
            ));
        }
        if entry.required_peer_count > entry.max_peer_count {
            return Err(bad(format!(
                "requiredPeerCount ({}) is above maxPeerCount ({})",
                entry.required_peer_count, entry.max_peer_count
            )));
        }
        let endorsement_policy = match entry.endorsement_policy {
            None => None,
            Some(CollectionEndorsement {
                signature_policy: Some(expression),
                channel_config_policy: None,
            }) => Some(ApplicationPolicy {
                r#type: Some(PolicyType::SignaturePolicy(
                    weft_policy::dsl::parse(&expression).map_err(|e| {
                        bad(format!(
                            "endorsementPolicy.signaturePolicy {expression:?}: {e}"
                        ))
                    })?,
                )),
            }),
            Some(CollectionEndorsement {
                signature_policy: None,
                channel_config_policy: Some(reference),
            }) => Some(ApplicationPolicy {
                r#type: Some(PolicyType::ChannelConfigPolicyReference(reference)),
            }),
            Some(_) => {
                return Err(bad(
                    "endorsementPolicy: give exactly one of signaturePolicy and channelConfigPolicy"
                        .to_owned(),
                ));
            }
        };
        config.push(CollectionConfig {
            payload: Some(collection_config::Payload::StaticCollectionConfig(
                StaticCollectionConfig {
                    name,
                    member_orgs_policy: Some(CollectionPolicyConfig {
                        payload: Some(collection_policy_config::Payload::SignaturePolicy(members)),
                    }),
                    required_peer_count: entry.required_peer_count,
                    maximum_peer_count: entry.max_peer_count,
                    block_to_live: entry.block_to_live,
                    member_only_read: entry.member_only_read,
                    member_only_write: entry.member_only_write,
                    endorsement_policy,
                },
            )),
        });
    }
    Ok(CollectionConfigPackage { config })
}

impl DeployArgs {
    /// How the peers reach the chaincode server: over TLS with
    /// --chaincode-tls-ca, presenting --chaincode-tls-cert if given.
    fn chaincode_tls(&self) -> Result<Option<ChaincodeTls>> {
        let Some(root) = &self.chaincode_tls_ca else {
            return Ok(None);
        };
        let text = |flag: &str, path: &PathBuf| -> Result<String> {
            String::from_utf8(read_file(flag, path)?)
                .map_err(|_| anyhow!("{flag}: {} is not PEM text", path.display()))
        };
        let client = match (&self.chaincode_tls_cert, &self.chaincode_tls_key) {
            (Some(certificate), Some(key)) => Some((
                text("--chaincode-tls-cert", certificate)?,
                text("--chaincode-tls-key", key)?,
            )),
            _ => None,
        };
        Ok(Some(ChaincodeTls {
            root_cert: text("--chaincode-tls-ca", root)?,
            client,
        }))
    }

    /// The index definitions of --indexes and --collection-indexes, each
    /// named by its path in the package under META-INF/statedb/couchdb/,
    /// in path order.
    fn index_files(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let mut files = Vec::new();
        if let Some(dir) = &self.indexes {
            for (name, definition) in json_files("--indexes", dir)? {
                files.push((format!("indexes/{name}"), definition));
            }
        }
        if let Some(dir) = &self.collection_indexes {
            let option = "--collection-indexes";
            let entries = std::fs::read_dir(dir)
                .with_context(|| format!("{option}: reading {}", dir.display()))?;
            for entry in entries {
                let path = entry
                    .with_context(|| format!("{option}: reading {}", dir.display()))?
                    .path();
                let Some(collection) = path.file_name().and_then(|name| name.to_str()) else {
                    continue;
                };
                let indexes = path.join("indexes");
                if !indexes.is_dir() {
                    continue;
                }
                for (name, definition) in json_files(option, &indexes)? {
                    files.push((
                        format!("collections/{collection}/indexes/{name}"),
                        definition,
                    ));
                }
            }
        }
        files.sort();
        Ok(files)
    }
}

/// The `*.json` files of `dir`, by file name, for `option`'s errors.
fn json_files(option: &str, dir: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("{option}: reading {}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("{option}: reading {}", dir.display()))?
            .path();
        let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        if name.ends_with(".json") {
            files.push((name.to_owned(), read_file(option, &path)?));
        }
    }
    Ok(files)
}

/// An organisation that approves: its admin, and its peer.
pub(crate) struct Approver {
    name: String,
    admin: Signer,
    peer: SocketAddr,
}

impl Approver {
    /// Organisation `org` (`org1`) of a cryptogen folder, approving through
    /// `peer`; its `Admin@` user signs.
    pub(crate) fn from_crypto(crypto: &Path, org: &str, peer: SocketAddr) -> Result<Self> {
        let msp_id = crate::bench::org_msp_id(org);
        let admin_msp = crypto.join(format!(
            "peerOrganizations/{org}.example.com/users/Admin@{org}.example.com/msp"
        ));
        let admin = crate::bench::load_signer(&admin_msp, &msp_id)
            .with_context(|| format!("the admin of {org}"))?;
        Ok(Self {
            name: org.to_owned(),
            admin,
            peer,
        })
    }
}

/// A chaincode definition to agree on a channel, and who agrees to it.
pub(crate) struct Deployment {
    pub channel: String,
    pub name: String,
    pub version: String,
    pub sequence: i64,
    /// A serialized `ApplicationPolicy`; empty for the channel's
    /// /Channel/Application/Endorsement policy.
    pub validation_parameter: Bytes,
    /// Private data collections of the definition (`None`: none).
    pub collections: Option<CollectionConfigPackage>,
    pub approvers: Vec<Approver>,
    pub orderer: SocketAddr,
    pub dialer: Dialer,
    /// A chaincode-as-a-service package to install on the approvers'
    /// peers and approve; `None`: the peers run the chaincode already.
    pub package: Option<Bytes>,
}

/// The serialized `ApplicationPolicy` of a policy expression in Fabric's
/// language; empty (the channel's default) for `None`.
pub(crate) fn validation_parameter(policy: Option<&str>) -> Result<Bytes> {
    Ok(match policy {
        Some(expression) => {
            let envelope = weft_policy::dsl::parse(expression)?;
            ApplicationPolicy {
                r#type: Some(PolicyType::SignaturePolicy(envelope)),
            }
            .encode_to_vec()
            .into()
        }
        None => Bytes::new(),
    })
}

/// Runs the deployment and prints where the definition was committed.
pub fn deploy(args: &DeployArgs) -> Result<()> {
    let validation_parameter = validation_parameter(args.policy.as_deref()).context("--policy")?;
    let approvers = args
        .peers
        .iter()
        .map(|entry| {
            let (org, address) = entry
                .split_once('=')
                .ok_or_else(|| anyhow!("--peers: {entry:?} is not org=host:port"))?;
            let peer = address
                .parse()
                .with_context(|| format!("--peers: {address:?} is not host:port"))?;
            Approver::from_crypto(&args.crypto, org, peer).context("--crypto")
        })
        .collect::<Result<Vec<_>>>()?;
    let deployment = Deployment {
        channel: args.channel.clone(),
        name: args.name.clone(),
        version: args.version.clone(),
        sequence: args.sequence,
        validation_parameter,
        collections: args
            .collections_config
            .as_deref()
            .map(read_collections)
            .transpose()?,
        approvers,
        orderer: args.orderer,
        dialer: args.tls.dialer()?,
        package: match &args.address {
            Some(address) => {
                let label = args
                    .label
                    .clone()
                    .unwrap_or_else(|| format!("{}_{}", args.name, args.version));
                let tls = args.chaincode_tls()?;
                let indexes = args.index_files()?;
                Some(Package::ccaas(&label, address, tls.as_ref(), &indexes).context("--address")?)
            }
            None => None,
        },
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(deployment.run())
}

impl Deployment {
    /// Each organisation's approval, then the commit, each waited for;
    /// prints a line per step.
    pub(crate) async fn run(&self) -> Result<()> {
        let peers: Vec<SocketAddr> = self.approvers.iter().map(|o| o.peer).collect();
        for approver in &self.approvers {
            let source = match &self.package {
                Some(package) => {
                    let package_id = self.install(approver, package.clone()).await?;
                    println!(
                        "{} installed {package_id} on {}",
                        approver.name, approver.peer
                    );
                    Some(ChaincodeSource {
                        r#type: Some(chaincode_source::Type::LocalPackage(
                            chaincode_source::Local { package_id },
                        )),
                    })
                }
                None => None,
            };
            let approve = ApproveChaincodeDefinitionForMyOrgArgs {
                sequence: self.sequence,
                name: self.name.clone(),
                version: self.version.clone(),
                validation_parameter: self.validation_parameter.clone(),
                collections: self.collections.clone(),
                source,
                ..ApproveChaincodeDefinitionForMyOrgArgs::default()
            };
            let block = self
                .transact(
                    &approver.admin,
                    "ApproveChaincodeDefinitionForMyOrg",
                    approve.encode_to_vec().into(),
                    &[approver.peer],
                    // Every peer must hold the approval before the commit
                    // is endorsed, or their endorsements read different
                    // approvals and disagree.
                    &peers,
                )
                .await
                .with_context(|| format!("approving {} for {}", self.name, approver.name))?;
            println!("{} approved {} in block {block}", approver.name, self.name);
        }
        let commit = CommitChaincodeDefinitionArgs {
            sequence: self.sequence,
            name: self.name.clone(),
            version: self.version.clone(),
            validation_parameter: self.validation_parameter.clone(),
            collections: self.collections.clone(),
            ..CommitChaincodeDefinitionArgs::default()
        };
        let first = self
            .approvers
            .first()
            .ok_or_else(|| anyhow!("--peers: name at least one organisation's peer"))?;
        let block = self
            .transact(
                &first.admin,
                "CommitChaincodeDefinition",
                commit.encode_to_vec().into(),
                &peers,
                &peers,
            )
            .await
            .with_context(|| format!("committing the definition of {}", self.name))?;
        println!(
            "chaincode {} version {} sequence {} committed on channel {} in block {block}",
            self.name, self.version, self.sequence, self.channel
        );
        Ok(())
    }

    /// Installs `package` on `approver`'s peer as its admin (a proposal
    /// to `_lifecycle` outside any channel, as `peer lifecycle chaincode
    /// install` sends); returns the package ID.
    async fn install(&self, approver: &Approver, package: Bytes) -> Result<String> {
        let signer = &approver.admin;
        let argument = InstallChaincodeArgs {
            chaincode_install_package: package,
        };
        let invocation = Invocation {
            channel_id: "",
            chaincode: "_lifecycle",
            args: vec![
                Bytes::from_static(b"InstallChaincode"),
                argument.encode_to_vec().into(),
            ],
            nonce: signer.new_nonce()?,
            timestamp_seconds: weft_msp::now(),
        };
        let proposal = Proposal::new(&invocation, signer.serialized_identity().clone());
        let response = EndorserClient::new(self.dialer.connect(approver.peer).await?)
            .process_proposal(proposal.signed(signer)?)
            .await
            .with_context(|| format!("installing on {}", approver.peer))?
            .into_inner()
            .response
            .unwrap_or_default();
        if response.status != 200 {
            bail!(
                "{} refused to install the package: {}",
                approver.peer,
                response.message
            );
        }
        let result = InstallChaincodeResult::decode(response.payload)
            .with_context(|| format!("{} answered the install with", approver.peer))?;
        Ok(result.package_id)
    }

    /// Proposes `function(argument)` to `_lifecycle` on `endorsers` as
    /// `signer`, submits the endorsed transaction and waits until every
    /// peer of `watchers` committed it VALID; returns its block number.
    async fn transact(
        &self,
        signer: &Signer,
        function: &str,
        argument: Bytes,
        endorsers: &[SocketAddr],
        watchers: &[SocketAddr],
    ) -> Result<u64> {
        let mut events = Vec::new();
        for peer in watchers {
            events.push(subscribe(&self.dialer, *peer, &self.channel, signer).await?);
        }
        let invocation = Invocation {
            channel_id: &self.channel,
            chaincode: "_lifecycle",
            args: vec![Bytes::from(function.to_owned()), argument],
            nonce: signer.new_nonce()?,
            timestamp_seconds: weft_msp::now(),
        };
        let proposal = Proposal::new(&invocation, signer.serialized_identity().clone());
        let signed = proposal.signed(signer)?;
        let mut responses: Vec<ProposalResponse> = Vec::new();
        for peer in endorsers {
            let response = EndorserClient::new(self.dialer.connect(*peer).await?)
                .process_proposal(signed.clone())
                .await
                .with_context(|| format!("proposing to {peer}"))?
                .into_inner();
            let answer = response.response.clone().unwrap_or_default();
            if answer.status != 200 || response.endorsement.is_none() {
                bail!(
                    "{peer} refused: status {}: {}",
                    answer.status,
                    answer.message
                );
            }
            responses.push(response);
        }
        let envelope: Envelope = proposal.transaction(&responses, signer)?;
        let answer = broadcast_one(&self.dialer, self.orderer, envelope).await?;
        if answer.status != Status::Success as i32 {
            bail!("the orderer answered {}: {}", answer.status, answer.info);
        }
        let mut committed_in = 0;
        for (peer, stream) in watchers.iter().zip(&mut events) {
            let found = tokio::time::timeout(COMMIT_WAIT_MAX, async {
                loop {
                    let block = next_block(stream).await?;
                    if let Some(tx) = block
                        .filtered_transactions
                        .iter()
                        .find(|tx| tx.txid == proposal.tx_id)
                    {
                        return Ok::<_, anyhow::Error>((block.number, tx.tx_validation_code));
                    }
                }
            })
            .await
            .map_err(|_| {
                anyhow!(
                    "{peer} did not commit {} within {COMMIT_WAIT_MAX:?}",
                    proposal.tx_id
                )
            })??;
            let (number, code) = found;
            if code != TxValidationCode::Valid as i32 {
                let name = TxValidationCode::try_from(code).map_or("UNKNOWN", |c| c.as_str_name());
                bail!("{peer} committed {} as {name}", proposal.tx_id);
            }
            committed_in = number;
        }
        Ok(committed_in)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn collections(text: &str) -> Result<CollectionConfigPackage> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collections.json");
        std::fs::write(&path, text).unwrap();
        read_collections(&path)
    }

    #[test]
    fn collections_are_read_from_fabrics_json_and_checked() {
        // Fabric's asset-transfer-private-data sample, two collections.
        let package = collections(
            r#"[
              {"name": "assetCollection", "policy": "OR('Org1MSP.member', 'Org2MSP.member')",
               "requiredPeerCount": 1, "maxPeerCount": 1, "blockToLive": 1000000,
               "memberOnlyRead": true, "memberOnlyWrite": true},
              {"name": "Org1MSPPrivateCollection", "policy": "OR('Org1MSP.member')",
               "requiredPeerCount": 0, "maxPeerCount": 1, "blockToLive": 3,
               "memberOnlyRead": true, "memberOnlyWrite": false,
               "endorsementPolicy": {"signaturePolicy": "OR('Org1MSP.member')"}}
            ]"#,
        )
        .unwrap();
        let configs: Vec<StaticCollectionConfig> = package
            .config
            .into_iter()
            .map(|config| match config.payload {
                Some(collection_config::Payload::StaticCollectionConfig(config)) => config,
                None => panic!("no payload"),
            })
            .collect();
        assert_eq!(configs.len(), 2);
        assert_eq!(configs[0].name, "assetCollection");
        assert_eq!(
            (
                configs[0].required_peer_count,
                configs[0].maximum_peer_count
            ),
            (1, 1)
        );
        assert!(configs[0].endorsement_policy.is_none());
        let Some(collection_policy_config::Payload::SignaturePolicy(members)) = configs[1]
            .member_orgs_policy
            .clone()
            .and_then(|policy| policy.payload)
        else {
            panic!("no member policy")
        };
        assert_eq!(
            weft_policy::dsl::print(&members).unwrap(),
            "OR('Org1MSP.member')"
        );
        assert_eq!(configs[1].block_to_live, 3);
        assert!(!configs[1].member_only_write);
        assert!(configs[1].endorsement_policy.is_some());

        for (text, expected) in [
            (
                r#"[{"name": "a", "policy": "OR('Org1MSP.member')"}, {"name": "a", "policy": "OR('Org1MSP.member')"}]"#,
                "defined twice",
            ),
            (
                r#"[{"name": "a b", "policy": "OR('Org1MSP.member')"}]"#,
                "name: use letters",
            ),
            (
                r#"[{"name": "a", "policy": "ANY('Org1MSP.member'"}]"#,
                "policy",
            ),
            (
                r#"[{"name": "a", "policy": "OR('Org1MSP.member')", "requiredPeerCount": 2, "maxPeerCount": 1}]"#,
                "requiredPeerCount (2) is above maxPeerCount (1)",
            ),
            (
                r#"[{"name": "a", "policy": "OR('Org1MSP.member')", "endorsementPolicy": {}}]"#,
                "exactly one of",
            ),
            (
                r#"[{"name": "a", "policy": "OR('Org1MSP.member')", "colour": "blue"}]"#,
                "unknown field `colour`",
            ),
        ] {
            let error = format!("{:#}", collections(text).unwrap_err());
            assert!(error.contains(expected), "{expected:?} not in {error}");
            assert!(error.contains("--collections-config"), "{error}");
        }
    }
}
