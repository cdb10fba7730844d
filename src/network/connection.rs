//! The client connection file `weft network up` writes: everything Fabric
//! client code needs to reach the network (the channel, each peer's and
//! orderer's endpoint, each organisation's MSP ID, a user's certificate and
//! key, the TLS CA certificates), in YAML. `weft bench --connect` reads it.
//!
//! `weft network up` writes absolute paths, so that the file works from any
//! directory; a relative path in a hand-written file is taken relative to
//! the file's folder.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use weft_msp::Signer;

use crate::client::Dialer;
use crate::settings::read_file;

/// The connection file, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConnectionFile {
    /// The channel the network's chaincodes are defined on (the first,
    /// if there are several).
    pub channel: String,
    /// Every channel the chaincodes are defined on, `channel` first;
    /// absent, `channel` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<String>,
    /// The chaincodes defined on the channel.
    pub chaincodes: Vec<String>,
    /// Their endorsement policy, in Fabric's policy language; absent, a
    /// client endorses with every organisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endorsement_policy: Option<String>,
    /// Whether the endpoints speak TLS; each endpoint's `tlsCaCert` is
    /// the CA its TLS certificate chains to.
    pub tls: bool,
    /// The TLS certificate and key clients present, for a network that
    /// asks for client certificates (mutual TLS); absent, none is
    /// presented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<ClientTls>,
    pub organizations: Vec<Organization>,
    pub orderers: Vec<Endpoint>,
}

/// A client's TLS certificate and PKCS#8 private key (PEM files), as
/// cryptogen issues them under `users/<user>/tls/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientTls {
    pub certificate: PathBuf,
    pub private_key: PathBuf,
}

/// One peer organisation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Organization {
    /// The short name (`org1`).
    pub name: String,
    pub msp_id: String,
    pub peers: Vec<Endpoint>,
    /// A client user of the organisation.
    pub user: User,
    /// The organisation's admin (signs chaincode approvals).
    pub admin: User,
}

/// A node clients connect to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Endpoint {
    pub name: String,
    /// `host:port` of its gRPC services.
    pub endpoint: String,
    /// `host:port` of its `/metrics` and `/healthz`.
    pub operations: String,
    pub tls_ca_cert: PathBuf,
}

/// A signing identity: certificate and PKCS#8 private key, in PEM files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct User {
    pub name: String,
    pub certificate: PathBuf,
    pub private_key: PathBuf,
}

impl ConnectionFile {
    /// Reads a connection file; errors name the file and the field.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut file: Self = serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(
            &text,
        ))
        .map_err(|error| anyhow!("{}: {}: {}", path.display(), error.path(), error.inner()))?;
        file.resolve_paths(path.parent().unwrap_or(Path::new(".")));
        if file.organizations.is_empty() || file.orderers.is_empty() {
            bail!("{}: names no organizations or no orderers", path.display());
        }
        if !file.channels.is_empty() && file.channels.first() != Some(&file.channel) {
            bail!(
                "{}: channels: must start with the channel {:?}",
                path.display(),
                file.channel
            );
        }
        for organization in &file.organizations {
            if organization.peers.is_empty() {
                bail!(
                    "{}: organization {} lists no peers",
                    path.display(),
                    organization.name
                );
            }
        }
        Ok(file)
    }

    fn resolve_paths(&mut self, folder: &Path) {
        let resolve = |path: &mut PathBuf| *path = crate::settings::resolve(folder, path);
        for organization in &mut self.organizations {
            for peer in &mut organization.peers {
                resolve(&mut peer.tls_ca_cert);
            }
            for user in [&mut organization.user, &mut organization.admin] {
                resolve(&mut user.certificate);
                resolve(&mut user.private_key);
            }
        }
        for orderer in &mut self.orderers {
            resolve(&mut orderer.tls_ca_cert);
        }
        if let Some(client) = &mut self.client_tls {
            resolve(&mut client.certificate);
            resolve(&mut client.private_key);
        }
    }

    /// Writes the file, with a comment saying what it is.
    pub fn save(&self, path: &Path) -> Result<()> {
        let body = serde_yaml::to_string(self)?;
        let text = format!(
            "# A weft network's client connection file, written by `weft network up`:\n\
             # the channels, every peer and orderer endpoint, each organisation's MSP ID,\n\
             # a user's and the admin's certificate and key, the TLS CA certificates.\n\
             {body}"
        );
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// Every channel the chaincodes are defined on, the first first.
    pub fn all_channels(&self) -> Vec<String> {
        if self.channels.is_empty() {
            vec![self.channel.clone()]
        } else {
            self.channels.clone()
        }
    }

    /// The orderers' gRPC addresses.
    pub fn orderer_addresses(&self) -> Result<Vec<SocketAddr>> {
        self.orderers.iter().map(Endpoint::address).collect()
    }

    /// How to reach the nodes: over TLS, trusting every TLS CA the file
    /// lists, when `tls` is true; in plaintext otherwise.
    pub fn dialer(&self) -> Result<Dialer> {
        if !self.tls {
            return Ok(Dialer::default());
        }
        let endpoints = self
            .organizations
            .iter()
            .flat_map(|organization| &organization.peers)
            .chain(&self.orderers);
        let mut roots: Vec<Vec<u8>> = Vec::new();
        for endpoint in endpoints {
            let key = format!("tlsCaCert of {}", endpoint.name);
            let pem = read_file(&key, &endpoint.tls_ca_cert)?;
            if !roots.contains(&pem) {
                roots.push(pem);
            }
        }
        let dialer = Dialer::tls(roots);
        match &self.client_tls {
            None => Ok(dialer),
            Some(client) => dialer.presenting(
                read_file("clientTls.certificate", &client.certificate)?,
                read_file("clientTls.privateKey", &client.private_key)?,
            ),
        }
    }
}

impl Endpoint {
    /// The gRPC endpoint as a socket address (resolving a host name).
    pub fn address(&self) -> Result<SocketAddr> {
        resolve(&self.endpoint).with_context(|| format!("the endpoint of {}", self.name))
    }

    /// The operations endpoint as a socket address.
    pub fn operations_address(&self) -> Result<SocketAddr> {
        resolve(&self.operations)
            .with_context(|| format!("the operations endpoint of {}", self.name))
    }
}

impl User {
    /// The user's signer, as a member of `msp_id`.
    pub fn signer(&self, msp_id: &str) -> Result<Signer> {
        let certificate = std::fs::read(&self.certificate)
            .with_context(|| format!("reading {}", self.certificate.display()))?;
        let key = std::fs::read(&self.private_key)
            .with_context(|| format!("reading {}", self.private_key.display()))?;
        Ok(Signer::from_pem(
            msp_id,
            &certificate,
            &key,
            &self.certificate.display().to_string(),
        )?)
    }
}

fn resolve(endpoint: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    endpoint
        .to_socket_addrs()
        .with_context(|| format!("{endpoint:?} is not host:port"))?
        .next()
        .ok_or_else(|| anyhow!("{endpoint:?} resolves to no address"))
}
