//! Chaincode packages as Fabric's `peer lifecycle chaincode package` makes
//! them, and the packages a peer has installed.
//!
//! A package is a gzipped tar holding `metadata.json` (`{"type", "label"}`)
//! and `code.tar.gz`. weft runs chaincode as a service only, so it installs
//! packages of type `ccaas`, whose `code.tar.gz` holds `connection.json`:
//! the chaincode server's `address` and `dial_timeout`, and with
//! `tls_required` the PEM `root_cert` its certificate must chain to, with
//! `client_auth_required` the `client_cert` and `client_key` the peer
//! presents (Fabric's external builder reads the same file; the key
//! travels in the package, as in Fabric). `code.tar.gz` may also hold the
//! chaincode's JSON indexes, `META-INF/statedb/couchdb/indexes/*.json`
//! and `META-INF/statedb/couchdb/collections/<collection>/indexes/*.json`
//! (its collections' private data), as Fabric's packages do; they are
//! checked at install and built once the chaincode is defined
//! (`weft_statedb::json_index`). The package ID is
//! Fabric's: the label, a colon, and the hex SHA-256 of the package bytes.
//!
//! Installed packages live in `<dir>/<label>.<hash>.tar.gz`, Fabric's file
//! name, written to a temporary file and renamed, so a crash leaves either
//! the whole package or none.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::RwLock;
use serde::Deserialize;
use weft_statedb::json_index::JsonIndex;

use crate::external::ChaincodeTls;

/// The largest package weft installs (a ccaas package is a few hundred
/// bytes; Fabric's default gRPC limit is 100 MiB).
const PACKAGE_BYTES_MAX: usize = 100 * 1024 * 1024;
/// The largest file read out of a package.
const ENTRY_BYTES_MAX: u64 = 1024 * 1024;

/// Why a package cannot be installed or read.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("chaincode package is not a gzipped tar with {0}")]
    Malformed(String),
    #[error(
        "weft runs chaincode as a service: package type {0:?} is not \"ccaas\" (build the chaincode as a server and package its connection.json)"
    )]
    NotAService(String),
    #[error("chaincode package holds an invalid JSON index: {0}")]
    BadIndex(#[from] weft_statedb::json_index::IndexError),
    #[error("chaincode package {0} is not installed")]
    NotInstalled(String),
    #[error("chaincode package of {0} bytes is larger than {PACKAGE_BYTES_MAX}")]
    TooLarge(usize),
    #[error("installed packages at {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A chaincode-as-a-service package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    pub id: String,
    pub label: String,
    /// The chaincode server's `host:port`.
    pub address: String,
    /// How long dialling it may take (`dial_timeout`, default 10 s).
    pub dial_timeout: Duration,
    /// TLS to the server, when `connection.json` requires it.
    pub tls: Option<ChaincodeTls>,
    /// The JSON indexes of the chaincode's state it declares.
    pub indexes: Vec<JsonIndex>,
    /// The JSON indexes of its collections' private data it declares
    /// (`META-INF/statedb/couchdb/collections/<collection>/indexes`), by
    /// collection.
    pub collection_indexes: Vec<(String, JsonIndex)>,
    /// The package as installed.
    pub bytes: Bytes,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(rename = "type")]
    kind: String,
    label: String,
}

#[derive(Deserialize)]
struct Connection {
    address: String,
    #[serde(default)]
    dial_timeout: Option<String>,
    #[serde(default)]
    tls_required: bool,
    #[serde(default)]
    client_auth_required: bool,
    #[serde(default)]
    root_cert: String,
    #[serde(default)]
    client_cert: String,
    #[serde(default)]
    client_key: String,
}

impl Connection {
    /// The TLS settings `connection.json` asks for, checked for what they
    /// need.
    fn tls(&self) -> Result<Option<ChaincodeTls>, PackageError> {
        let malformed =
            |what: &str| PackageError::Malformed(format!("a connection.json whose {what}"));
        if !self.tls_required {
            if self.client_auth_required {
                return Err(malformed("client_auth_required comes with tls_required"));
            }
            return Ok(None);
        }
        if !self.root_cert.contains("-----BEGIN CERTIFICATE-----") {
            return Err(malformed("tls_required comes with a PEM root_cert"));
        }
        let client = if self.client_auth_required {
            if !self.client_cert.contains("-----BEGIN CERTIFICATE-----")
                || !self.client_key.contains("PRIVATE KEY-----")
            {
                return Err(malformed(
                    "client_auth_required comes with a PEM client_cert and client_key",
                ));
            }
            Some((self.client_cert.clone(), self.client_key.clone()))
        } else {
            None
        };
        Ok(Some(ChaincodeTls {
            root_cert: self.root_cert.clone(),
            client,
        }))
    }
}

impl Package {
    /// Reads a package as `peer lifecycle chaincode package` writes it.
    pub fn parse(bytes: Bytes) -> Result<Self, PackageError> {
        if bytes.len() > PACKAGE_BYTES_MAX {
            return Err(PackageError::TooLarge(bytes.len()));
        }
        let mut files = tar_files(&bytes, &["metadata.json", "code.tar.gz"])?;
        let metadata: Metadata =
            serde_json::from_slice(&files.remove("metadata.json").unwrap_or_default())
                .map_err(|e| PackageError::Malformed(format!("a readable metadata.json ({e})")))?;
        if metadata.kind != "ccaas" {
            return Err(PackageError::NotAService(metadata.kind));
        }
        if metadata.label.is_empty() || metadata.label.contains([':', '/']) {
            return Err(PackageError::Malformed(format!(
                "a label without ':' or '/' (found {:?})",
                metadata.label
            )));
        }
        let code = files.remove("code.tar.gz").unwrap_or_default();
        let mut code_files = tar_entries(&code, &["connection.json"], |name| {
            index_place(name).is_some()
        })?;
        let connection: Connection =
            serde_json::from_slice(&code_files.remove("connection.json").unwrap_or_default())
                .map_err(|e| {
                    PackageError::Malformed(format!(
                        "a readable connection.json in code.tar.gz ({e})"
                    ))
                })?;
        let dial_timeout = match connection.dial_timeout.as_deref() {
            None | Some("") => Duration::from_secs(10),
            Some(text) => weft_protos::duration::parse_go_duration(text).map_err(|e| {
                PackageError::Malformed(format!("a dial_timeout such as 10s ({e})"))
            })?,
        };
        let tls = connection.tls()?;
        let mut indexes = Vec::new();
        let mut collection_indexes = Vec::new();
        for (name, text) in &code_files {
            match index_place(name) {
                Some(IndexPlace::State) => indexes.push(JsonIndex::parse(name, text)?),
                Some(IndexPlace::Collection(collection)) => {
                    collection_indexes.push((collection.to_owned(), JsonIndex::parse(name, text)?));
                }
                None => {}
            }
        }
        let hash = hex::encode(weft_protos::hash::sha256(&bytes));
        Ok(Self {
            id: format!("{}:{hash}", metadata.label),
            label: metadata.label,
            address: connection.address,
            dial_timeout,
            tls,
            indexes,
            collection_indexes,
            bytes,
        })
    }

    /// A ccaas package of the chaincode server at `address`, reached over
    /// `tls` if given, declaring the JSON `indexes` (each file's path under
    /// `META-INF/statedb/couchdb/`: `indexes/<file>.json`, or
    /// `collections/<collection>/indexes/<file>.json` for a collection's
    /// private data; and its definition), as `peer lifecycle chaincode
    /// package` builds one from a `connection.json` and a `META-INF`
    /// folder. Each index is checked as an install would check it.
    pub fn ccaas(
        label: &str,
        address: &str,
        tls: Option<&ChaincodeTls>,
        indexes: &[(String, Vec<u8>)],
    ) -> Result<Bytes, PackageError> {
        let (client_cert, client_key) = tls.and_then(|tls| tls.client.clone()).unwrap_or_default();
        let connection = serde_json::json!({
            "address": address,
            "dial_timeout": "10s",
            "tls_required": tls.is_some(),
            "client_auth_required": tls.is_some_and(|tls| tls.client.is_some()),
            "root_cert": tls.map(|tls| tls.root_cert.as_str()).unwrap_or_default(),
            "client_cert": client_cert,
            "client_key": client_key,
        });
        let mut code_files = vec![(
            "connection.json".to_owned(),
            connection.to_string().into_bytes(),
        )];
        for (name, definition) in indexes {
            let path = format!("{COUCHDB_DIR}{name}");
            if index_place(&path).is_none() {
                return Err(PackageError::Malformed(format!(
                    "index definitions under {COUCHDB_DIR}indexes/ or \
                     {COUCHDB_DIR}collections/<collection>/indexes/, not {path}"
                )));
            }
            JsonIndex::parse(&path, definition)?;
            code_files.push((path, definition.clone()));
        }
        let code = tar_gz(&code_files)?;
        let metadata = serde_json::json!({"type": "ccaas", "label": label});
        let package = tar_gz(&[
            ("metadata.json", metadata.to_string().into_bytes()),
            ("code.tar.gz", code),
        ])?;
        Ok(Bytes::from(package))
    }
}

/// Where a package's code holds its JSON index definitions.
const COUCHDB_DIR: &str = "META-INF/statedb/couchdb/";

/// What a JSON index definition in a package's code indexes.
#[derive(Debug, PartialEq, Eq)]
enum IndexPlace<'a> {
    /// The chaincode's state: `indexes/<file>.json`.
    State,
    /// A collection's private data:
    /// `collections/<collection>/indexes/<file>.json`.
    Collection(&'a str),
}

/// What the file at `path` of a package's code indexes, if it is an index
/// definition (a `.json` file directly in one of the two places).
fn index_place(path: &str) -> Option<IndexPlace<'_>> {
    let under = path.strip_prefix(COUCHDB_DIR)?;
    let parts: Vec<&str> = under.split('/').collect();
    let is_definition = |file: &str| file.len() > ".json".len() && file.ends_with(".json");
    match parts.as_slice() {
        ["indexes", file] if is_definition(file) => Some(IndexPlace::State),
        ["collections", collection, "indexes", file]
            if !collection.is_empty() && is_definition(file) =>
        {
            Some(IndexPlace::Collection(collection))
        }
        _ => None,
    }
}

/// The files `names` of a gzipped tar, each required.
fn tar_files(bytes: &[u8], names: &[&str]) -> Result<BTreeMap<String, Vec<u8>>, PackageError> {
    tar_entries(bytes, names, |_| false)
}

/// The files `names` of a gzipped tar, each required, and those others
/// `also` picks by name.
fn tar_entries(
    bytes: &[u8],
    names: &[&str],
    also: impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, Vec<u8>>, PackageError> {
    let malformed =
        |e: std::io::Error| PackageError::Malformed(format!("{} ({e})", names.join(" and ")));
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut found = BTreeMap::new();
    for entry in archive.entries().map_err(malformed)? {
        let entry = entry.map_err(malformed)?;
        let path = entry
            .path()
            .map_err(malformed)?
            .to_string_lossy()
            .into_owned();
        let name = path.trim_start_matches("./").to_owned();
        if names.contains(&name.as_str()) || also(&name) {
            let mut content = Vec::new();
            entry
                .take(ENTRY_BYTES_MAX)
                .read_to_end(&mut content)
                .map_err(malformed)?;
            found.insert(name, content);
        }
    }
    if let Some(missing) = names.iter().find(|name| !found.contains_key(**name)) {
        return Err(PackageError::Malformed((*missing).to_owned()));
    }
    Ok(found)
}

fn tar_gz<Name: AsRef<str>>(files: &[(Name, Vec<u8>)]) -> Result<Vec<u8>, PackageError> {
    let io = |source| PackageError::Io {
        path: PathBuf::from("<package>"),
        source,
    };
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (name, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, name.as_ref(), content.as_slice())
            .map_err(io)?;
    }
    builder.into_inner().map_err(io)?.finish().map_err(io)
}

/// The packages a peer has installed, kept in a directory.
#[derive(Debug)]
pub struct InstalledPackages {
    dir: PathBuf,
    packages: RwLock<BTreeMap<String, Package>>,
    /// How many packages were installed since the peer started.
    installs: AtomicU64,
}

impl InstalledPackages {
    /// The packages installed in `dir` (created if missing). A file there
    /// that is not a package is skipped with a warning.
    pub fn open(dir: &Path) -> Result<Self, PackageError> {
        let io = |source| PackageError::Io {
            path: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut packages = BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if !path.to_string_lossy().ends_with(".tar.gz") {
                continue;
            }
            let bytes = std::fs::read(&path).map_err(io)?;
            match Package::parse(Bytes::from(bytes)) {
                Ok(package) => {
                    packages.insert(package.id.clone(), package);
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "not an installable package; skipped");
                }
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
            packages: RwLock::new(packages),
            installs: AtomicU64::new(0),
        })
    }

    /// Installs `bytes`; installing the same package again is allowed and
    /// changes nothing.
    pub fn install(&self, bytes: Bytes) -> Result<Package, PackageError> {
        let package = Package::parse(bytes)?;
        if let Some(installed) = self.packages.read().get(&package.id) {
            return Ok(installed.clone());
        }
        let hash = package.id.rsplit(':').next().unwrap_or_default();
        let path = self.dir.join(format!("{}.{hash}.tar.gz", package.label));
        let partial = path.with_extension("partial");
        let io = |source| PackageError::Io {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::File::create(&partial).map_err(io)?;
        file.write_all(&package.bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&partial, &path).map_err(io)?;
        self.packages
            .write()
            .insert(package.id.clone(), package.clone());
        self.installs.fetch_add(1, Ordering::Release);
        tracing::info!(package_id = %package.id, address = %package.address, "chaincode package installed");
        Ok(package)
    }

    pub fn get(&self, id: &str) -> Option<Package> {
        self.packages.read().get(id).cloned()
    }

    /// Every installed package, by ID.
    pub fn all(&self) -> Vec<Package> {
        self.packages.read().values().cloned().collect()
    }

    /// A count that grows with every package installed: what a reader of
    /// [`all`](Self::all) compares to know the list changed.
    pub fn installs(&self) -> u64 {
        self.installs.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_package_carries_its_json_indexes_and_a_bad_one_is_refused() {
        let definition =
            br#"{"index":{"fields":["color"]},"ddoc":"byColor","name":"color","type":"json"}"#;
        let bytes = Package::ccaas(
            "notes_1.0",
            "127.0.0.1:9999",
            None,
            &[
                ("indexes/color.json".to_owned(), definition.to_vec()),
                (
                    "collections/assetCollection/indexes/color.json".to_owned(),
                    definition.to_vec(),
                ),
            ],
        )
        .unwrap();
        let package = Package::parse(bytes).unwrap();
        let ids: Vec<String> = package.indexes.iter().map(JsonIndex::id).collect();
        assert_eq!(ids, ["byColor/color"]);
        let collection_ids: Vec<(&str, String)> = package
            .collection_indexes
            .iter()
            .map(|(collection, index)| (collection.as_str(), index.id()))
            .collect();
        assert_eq!(
            collection_ids,
            [("assetCollection", "byColor/color".to_owned())]
        );
        assert!(
            Package::ccaas(
                "notes_1.0",
                "127.0.0.1:9999",
                None,
                &[(
                    "collections/indexes/color.json".to_owned(),
                    definition.to_vec()
                )],
            )
            .is_err(),
            "a collection index needs its collection's folder"
        );

        // What a hand-made package holds is checked at install.
        let code = tar_gz(&[
            (
                "connection.json",
                br#"{"address": "127.0.0.1:9999"}"#.to_vec(),
            ),
            (
                "META-INF/statedb/couchdb/indexes/bad.json",
                br#"{"index":{"fields":["a"]},"type":"text"}"#.to_vec(),
            ),
        ])
        .unwrap();
        let bytes = tar_gz(&[
            (
                "metadata.json",
                br#"{"type":"ccaas","label":"notes_1.0"}"#.to_vec(),
            ),
            ("code.tar.gz", code),
        ])
        .unwrap();
        let refused = Package::parse(Bytes::from(bytes)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "chaincode package holds an invalid JSON index: index definition META-INF/statedb/couchdb/indexes/bad.json: the index type must be \"json\""
        );
    }

    #[test]
    fn a_ccaas_package_round_trips_and_installs_once() {
        let bytes = Package::ccaas("notes_1.0", "127.0.0.1:9999", None, &[]).unwrap();
        let package = Package::parse(bytes.clone()).unwrap();
        assert_eq!(package.label, "notes_1.0");
        assert_eq!(package.address, "127.0.0.1:9999");
        assert_eq!(package.tls, None);
        assert_eq!(
            package.id,
            format!(
                "notes_1.0:{}",
                hex::encode(weft_protos::hash::sha256(&bytes))
            )
        );

        let dir = tempfile::tempdir().unwrap();
        let installed = InstalledPackages::open(dir.path()).unwrap();
        installed.install(bytes.clone()).unwrap();
        installed.install(bytes).unwrap();
        assert_eq!(installed.all().len(), 1);
        // Found again after a restart.
        let reopened = InstalledPackages::open(dir.path()).unwrap();
        assert_eq!(reopened.get(&package.id).unwrap().address, "127.0.0.1:9999");
    }

    #[test]
    fn a_package_names_the_tls_its_server_requires() {
        let certificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let key = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";
        for client in [None, Some((certificate.to_owned(), key.to_owned()))] {
            let tls = ChaincodeTls {
                root_cert: certificate.to_owned(),
                client,
            };
            let bytes = Package::ccaas("notes_1.0", "127.0.0.1:9999", Some(&tls), &[]).unwrap();
            assert_eq!(Package::parse(bytes).unwrap().tls, Some(tls));
        }
        let package = |connection: &str| {
            let code = tar_gz(&[("connection.json", connection.as_bytes().to_vec())]).unwrap();
            let bytes = tar_gz(&[
                ("metadata.json", br#"{"type":"ccaas","label":"x"}"#.to_vec()),
                ("code.tar.gz", code),
            ])
            .unwrap();
            Package::parse(Bytes::from(bytes))
        };
        for (connection, reason) in [
            (
                r#"{"address":"a:1","tls_required":true}"#,
                "tls_required comes with a PEM root_cert",
            ),
            (
                r#"{"address":"a:1","client_auth_required":true}"#,
                "client_auth_required comes with tls_required",
            ),
        ] {
            let refused = package(connection).unwrap_err().to_string();
            assert!(refused.contains(reason), "{refused}");
        }
        let missing_key = format!(
            r#"{{"address":"a:1","tls_required":true,"root_cert":{c:?},"client_auth_required":true,"client_cert":{c:?}}}"#,
            c = certificate
        );
        let refused = package(&missing_key).unwrap_err().to_string();
        assert!(refused.contains("client_cert and client_key"), "{refused}");
    }

    #[test]
    fn packages_weft_cannot_run_are_refused_with_the_reason() {
        let golang = tar_gz(&[
            (
                "metadata.json",
                br#"{"type":"golang","label":"x"}"#.to_vec(),
            ),
            ("code.tar.gz", tar_gz::<&str>(&[]).unwrap()),
        ])
        .unwrap();
        let refused = Package::parse(Bytes::from(golang)).unwrap_err();
        assert!(refused.to_string().contains("\"golang\""), "{refused}");
        let refused = Package::parse(Bytes::from_static(b"not a package")).unwrap_err();
        assert!(refused.to_string().contains("gzipped tar"), "{refused}");
        let no_connection = tar_gz(&[
            ("metadata.json", br#"{"type":"ccaas","label":"x"}"#.to_vec()),
            ("code.tar.gz", tar_gz::<&str>(&[]).unwrap()),
        ])
        .unwrap();
        let refused = Package::parse(Bytes::from(no_connection)).unwrap_err();
        assert!(refused.to_string().contains("connection.json"), "{refused}");
    }
}
