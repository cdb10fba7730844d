//! Reading an MSP folder in Fabric's layout.
//!
//! ```text
//! msp/
//!   cacerts/              root CA certificates            → root_certs
//!   intermediatecerts/    intermediate CA certificates    → intermediate_certs
//!   admincerts/           admin certificates (pre-NodeOU) → admins
//!   crls/                 certificate revocation lists    → revocation_list
//!   tlscacerts/           TLS root CAs                    → tls_root_certs
//!   tlsintermediatecerts/ TLS intermediates               → tls_intermediate_certs
//!   signcerts/            this node's certificate         ┐ local signing
//!   keystore/             this node's PKCS#8 key          ┘ identity only
//!   config.yaml           NodeOUs and OU identifiers
//! ```
//!
//! The folder is turned into a `msp.FabricMSPConfig` (what a channel config
//! carries for an organisation) plus, when `signcerts` and `keystore` are
//! present, a [`Signer`]. Every error names the file and, for
//! `config.yaml`, the field.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::Deserialize;
use weft_protos::msp::{FabricCryptoConfig, FabricMspConfig, FabricNodeOUs, FabricOuIdentifier};

use crate::{Msp, MspError, Signer};

/// An MSP read from a folder: its configuration and, if the folder holds a
/// signing identity, the signer.
#[derive(Debug)]
pub struct LocalMsp {
    pub config: FabricMspConfig,
    pub signer: Option<Signer>,
}

impl LocalMsp {
    /// Builds the verifying [`Msp`] of this folder.
    pub fn msp(&self) -> Result<Msp, MspError> {
        Msp::from_config(self.config.clone())
    }
}

/// Reads the MSP folder `dir` for the MSP `msp_id`.
pub fn load(dir: &Path, msp_id: &str) -> Result<LocalMsp, MspError> {
    let config = load_config(dir, msp_id)?;
    // Building the MSP checks every certificate and the NodeOU settings now,
    // so that a bad folder is reported when it is loaded.
    Msp::from_config(config.clone())?;
    let signer = load_signer(dir, msp_id)?;
    Ok(LocalMsp { config, signer })
}

/// Reads the verifying part of an MSP folder (no private key).
pub fn load_config(dir: &Path, msp_id: &str) -> Result<FabricMspConfig, MspError> {
    if !dir.is_dir() {
        return Err(MspError::Io {
            path: dir.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "MSP folder not found"),
        });
    }
    let root_certs = read_pem_dir(&dir.join("cacerts"))?;
    if root_certs.is_empty() {
        return Err(MspError::Invalid {
            msp_id: msp_id.to_owned(),
            reason: format!("{} holds no certificate", dir.join("cacerts").display()),
        });
    }
    let (fabric_node_ous, organizational_unit_identifiers) = read_ou_config(dir)?;
    Ok(FabricMspConfig {
        name: msp_id.to_owned(),
        root_certs,
        intermediate_certs: read_pem_dir(&dir.join("intermediatecerts"))?,
        admins: read_pem_dir(&dir.join("admincerts"))?,
        revocation_list: read_pem_dir(&dir.join("crls"))?,
        signing_identity: None,
        organizational_unit_identifiers,
        crypto_config: Some(FabricCryptoConfig {
            signature_hash_family: "SHA2".to_owned(),
            identity_identifier_hash_function: "SHA256".to_owned(),
        }),
        tls_root_certs: read_pem_dir(&dir.join("tlscacerts"))?,
        tls_intermediate_certs: read_pem_dir(&dir.join("tlsintermediatecerts"))?,
        fabric_node_ous,
    })
}

/// Reads the signing identity from `signcerts/` and `keystore/`, if present.
/// The key is the one in `keystore/` whose public key matches the
/// certificate, whatever its file name.
pub fn load_signer(dir: &Path, msp_id: &str) -> Result<Option<Signer>, MspError> {
    let signcerts = read_pem_dir(&dir.join("signcerts"))?;
    let Some(certificate) = signcerts.first() else {
        return Ok(None);
    };
    let keystore = dir.join("keystore");
    let key_files = list_files(&keystore)?;
    if key_files.is_empty() {
        return Err(MspError::Key {
            origin: keystore.display().to_string(),
            reason: "signcerts holds a certificate but the keystore is empty".to_owned(),
        });
    }
    let mut last_error = None;
    for key_file in key_files {
        let key = read(&key_file)?;
        match Signer::from_pem(msp_id, certificate, &key, &key_file.display().to_string()) {
            Ok(signer) => return Ok(Some(signer)),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| MspError::Key {
        origin: keystore.display().to_string(),
        reason: "no key matches the certificate in signcerts".to_owned(),
    }))
}

/// `config.yaml` as Fabric writes it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ConfigYaml {
    #[serde(rename = "NodeOUs")]
    node_ous: Option<NodeOusYaml>,
    #[serde(default)]
    organizational_unit_identifiers: Vec<OuYaml>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct NodeOusYaml {
    #[serde(default)]
    enable: bool,
    #[serde(rename = "ClientOUIdentifier")]
    client: Option<OuYaml>,
    #[serde(rename = "PeerOUIdentifier")]
    peer: Option<OuYaml>,
    #[serde(rename = "AdminOUIdentifier")]
    admin: Option<OuYaml>,
    #[serde(rename = "OrdererOUIdentifier")]
    orderer: Option<OuYaml>,
}

#[derive(Debug, Deserialize)]
struct OuYaml {
    #[serde(rename = "Certificate", default)]
    certificate: Option<String>,
    #[serde(rename = "OrganizationalUnitIdentifier")]
    organizational_unit_identifier: String,
}

type OuConfig = (Option<FabricNodeOUs>, Vec<FabricOuIdentifier>);

fn read_ou_config(dir: &Path) -> Result<OuConfig, MspError> {
    let path = dir.join("config.yaml");
    if !path.exists() {
        return Ok((None, Vec::new()));
    }
    let text = read(&path)?;
    let config: ConfigYaml = serde_yaml::from_slice(&text).map_err(|e| MspError::Config {
        origin: path.display().to_string(),
        field: e.location().map_or_else(
            || "?".to_owned(),
            |l| format!("line {} column {}", l.line(), l.column()),
        ),
        reason: e.to_string(),
    })?;
    let ou = |field: &str, ou: &OuYaml| -> Result<FabricOuIdentifier, MspError> {
        let certificate = match &ou.certificate {
            Some(relative) if !relative.is_empty() => {
                let cert_path = dir.join(relative);
                if !cert_path.is_file() {
                    return Err(MspError::Config {
                        origin: path.display().to_string(),
                        field: format!("{field}.Certificate"),
                        reason: format!("{} does not exist", cert_path.display()),
                    });
                }
                read(&cert_path)?.into()
            }
            _ => Bytes::new(),
        };
        Ok(FabricOuIdentifier {
            certificate,
            organizational_unit_identifier: ou.organizational_unit_identifier.clone(),
        })
    };
    let node_ous = config
        .node_ous
        .map(|node_ous| -> Result<FabricNodeOUs, MspError> {
            let optional = |field: &str, value: &Option<OuYaml>| {
                value.as_ref().map(|v| ou(field, v)).transpose()
            };
            Ok(FabricNodeOUs {
                enable: node_ous.enable,
                client_ou_identifier: optional("NodeOUs.ClientOUIdentifier", &node_ous.client)?,
                peer_ou_identifier: optional("NodeOUs.PeerOUIdentifier", &node_ous.peer)?,
                admin_ou_identifier: optional("NodeOUs.AdminOUIdentifier", &node_ous.admin)?,
                orderer_ou_identifier: optional("NodeOUs.OrdererOUIdentifier", &node_ous.orderer)?,
            })
        })
        .transpose()?;
    let identifiers = config
        .organizational_unit_identifiers
        .iter()
        .enumerate()
        .map(|(index, entry)| ou(&format!("OrganizationalUnitIdentifiers[{index}]"), entry))
        .collect::<Result<_, _>>()?;
    Ok((node_ous, identifiers))
}

/// The content of every file in `dir`, one entry per file, as Fabric's
/// configtxgen reads MSP folders (so that the resulting MSP values are
/// byte-identical to Fabric's). A missing folder is empty; a file without a
/// valid PEM block is an error naming the file.
fn read_pem_dir(dir: &Path) -> Result<Vec<Bytes>, MspError> {
    let mut entries = Vec::new();
    for file in list_files(dir)? {
        let content = read(&file)?;
        if let Err(e) = x509_parser::pem::parse_x509_pem(&content) {
            return Err(MspError::Pem {
                path: file,
                reason: e.to_string(),
            });
        }
        entries.push(Bytes::from(content));
    }
    Ok(entries)
}

/// The regular, non-hidden files of `dir`, sorted by name; none if `dir`
/// does not exist.
fn list_files(dir: &Path) -> Result<Vec<PathBuf>, MspError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let io_error = |source| MspError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if path.is_file() && !hidden {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn read(path: &Path) -> Result<Vec<u8>, MspError> {
    std::fs::read(path).map_err(|source| MspError::Io {
        path: path.to_owned(),
        source,
    })
}
