//! The `tls` section of the peer's and the orderer's config files: the
//! certificate and key a node serves its gRPC endpoints with (and presents
//! when it dials), and the TLS CA certificates it trusts when it dials
//! other nodes (orderers, peers of other organisations, other consenters).
//! Fabric's `peer.tls.*` and `General.TLS.*` in one shape. An orderer's
//! cluster endpoint takes calls only from certificates of those CAs, as
//! Fabric's cluster runs mutual TLS.
//!
//! Files are read and checked when the node starts, so a missing file or a
//! PEM that holds no certificate is an error naming the key and the file,
//! never a failed handshake later.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
use weft_orderer::{ClusterDial, NodeTls};

use crate::settings::{read_file, resolve};

/// `<section>.tls`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsSection {
    /// Serve and dial over TLS. Default false: plaintext gRPC.
    #[serde(default)]
    pub enabled: bool,
    /// The node's TLS certificate (PEM); required when enabled.
    pub certificate: Option<PathBuf>,
    /// Its PKCS#8 private key (PEM); required when enabled.
    pub private_key: Option<PathBuf>,
    /// TLS CA certificates (PEM) of the nodes this node dials; required
    /// when enabled.
    #[serde(default, rename = "rootCAs")]
    pub root_cas: Vec<PathBuf>,
    /// Ask every client for a certificate issued by one of
    /// `clientRootCAs`, and require Deliver requests to name its hash.
    /// Default false.
    #[serde(default)]
    pub client_auth_required: bool,
    /// TLS CA certificates (PEM) of the clients; required when
    /// `clientAuthRequired`.
    #[serde(default, rename = "clientRootCAs")]
    pub client_root_cas: Vec<PathBuf>,
}

impl TlsSection {
    /// Reads the files, relative to `base`; `None` when TLS is off.
    /// `at(key)` names a key of the file for error messages.
    pub fn load(&self, base: &Path, at: impl Fn(&str) -> String) -> Result<Option<NodeTls>> {
        if !self.enabled {
            return Ok(None);
        }
        let read = |key: &str, path: Option<&PathBuf>| -> Result<Vec<u8>> {
            let path = path.ok_or_else(|| anyhow!("{}: required when TLS is enabled", at(key)))?;
            read_file(&at(key), &resolve(base, path))
        };
        let certificate = read("tls.certificate", self.certificate.as_ref())?;
        let private_key = read("tls.privateKey", self.private_key.as_ref())?;
        let certificate_der = weft_msp::certificate_der(&certificate)
            .map_err(|error| anyhow!("{}: {error}", at("tls.certificate")))?;
        pem_block(&private_key, "PRIVATE KEY").with_context(|| at("tls.privateKey"))?;
        if self.root_cas.is_empty() {
            bail!("{}: required when TLS is enabled", at("tls.rootCAs"));
        }
        let read_certificates = |key: &str, paths: &[PathBuf]| -> Result<Vec<Vec<u8>>> {
            let mut pems = Vec::with_capacity(paths.len());
            for (index, path) in paths.iter().enumerate() {
                let key = format!("{key}[{index}]");
                let pem = read(&key, Some(path))?;
                pem_block(&pem, "CERTIFICATE").with_context(|| at(&key))?;
                pems.push(pem);
            }
            Ok(pems)
        };
        let roots = read_certificates("tls.rootCAs", &self.root_cas)?;
        let cluster_dial = ClusterDial {
            root_cas: roots.clone(),
            certificate: certificate.clone(),
            private_key: private_key.clone(),
        };
        let identity = Identity::from_pem(certificate, private_key);
        // A client that does not finish its handshake in time is dropped,
        // as by Fabric's gRPC servers.
        let mut server = ServerTlsConfig::new()
            .identity(identity.clone())
            .timeout(weft_protos::serve::CONNECTION_ESTABLISH_MAX);
        if self.client_auth_required {
            if self.client_root_cas.is_empty() {
                bail!(
                    "{}: required when tls.clientAuthRequired is true",
                    at("tls.clientRootCAs")
                );
            }
            let client_roots = read_certificates("tls.clientRootCAs", &self.client_root_cas)?;
            server = server.client_ca_root(Certificate::from_pem(client_roots.concat()));
        }
        // rustls parses the certificate and key here: a key that does not
        // fit its certificate's algorithm fails now, not at the first
        // client.
        tonic::transport::Server::builder()
            .tls_config(server.clone())
            .map_err(|error| anyhow!("{}: {error}", at("tls.privateKey")))?;
        // The other consenters call with their certificates, issued by the
        // same TLS CAs this node trusts when it calls them.
        let cluster = server
            .clone()
            .client_ca_root(Certificate::from_pem(roots.concat()));
        Ok(Some(NodeTls {
            server,
            client: client_config(roots.into_iter().map(Certificate::from_pem)).identity(identity),
            cluster,
            client_auth_required: self.client_auth_required,
            cluster_dial,
            certificate_hash: weft_protos::hash::sha256(&certificate_der).to_vec().into(),
        }))
    }
}

/// A client TLS configuration trusting exactly `roots`.
pub fn client_config(roots: impl IntoIterator<Item = Certificate>) -> ClientTlsConfig {
    ClientTlsConfig::new().ca_certificates(roots)
}

/// Checks that `pem` holds a PEM block whose label ends with `label`
/// (`CERTIFICATE`; `PRIVATE KEY` also matches `EC PRIVATE KEY`).
fn pem_block(pem: &[u8], label: &str) -> Result<()> {
    let text = std::str::from_utf8(pem).map_err(|_| anyhow!("not a PEM file"))?;
    let found = text.lines().any(|line| {
        line.strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.strip_suffix("-----"))
            .is_some_and(|found| found.ends_with(label))
    });
    if found {
        Ok(())
    } else {
        bail!("no PEM block labelled {label}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_labels_are_recognised() {
        let cert = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(pem_block(cert, "CERTIFICATE").is_ok());
        assert!(pem_block(cert, "PRIVATE KEY").is_err());
        let key = b"-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
        assert!(pem_block(key, "PRIVATE KEY").is_ok());
        assert!(pem_block(b"\xff\xfe", "CERTIFICATE").is_err());
    }

    #[test]
    fn enabled_tls_names_the_missing_key() {
        let section = TlsSection {
            enabled: true,
            ..TlsSection::default()
        };
        let error = section
            .load(Path::new("."), |key| format!("peer.yaml: peer.{key}"))
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "peer.yaml: peer.tls.certificate: required when TLS is enabled"
        );
        assert!(
            TlsSection::default()
                .load(Path::new("."), |key| key.to_owned())
                .unwrap()
                .is_none()
        );
    }
}
