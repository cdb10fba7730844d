//! Reading node configuration files: YAML into typed settings, with errors
//! that name the file and the key at fault, and durations written as Go
//! writes them (`250ms`, `2s`, `1m30s`), as in Fabric's `core.yaml` and
//! `orderer.yaml`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// Reads `path` as YAML into `T`, after applying environment overrides:
/// a variable `<prefix><KEY>_<KEY>…` (such as `CORE_PEER_LISTENADDRESS`
/// for `peer.listenAddress`, as Fabric's `core.yaml` overrides read)
/// replaces the value of that key; its text is read as YAML, so numbers,
/// booleans and lists keep their types. Keys match case-insensitively and
/// must be in the file. An error names the file (or the variable) and the
/// dotted key path (`committer.pipelineDepth: invalid type ...`).
pub fn load_yaml<T: DeserializeOwned>(path: &Path, env_prefix: &str) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut document: serde_yaml::Value = serde_yaml::from_str(&text)
        .with_context(|| format!("{}: not valid YAML", path.display()))?;
    override_from_environment(&mut document, env_prefix, path)?;
    serde_path_to_error::deserialize(document).map_err(|error| {
        let key = error.path().to_string();
        if key == "." {
            anyhow!("{}: {}", path.display(), error.inner())
        } else {
            anyhow!("{}: {key}: {}", path.display(), error.inner())
        }
    })
}

/// Applies the environment's `<prefix>SECTION_KEY` variables to
/// `document`, read from the file `path`, as [`load_yaml`] does.
pub fn override_from_environment(
    document: &mut serde_yaml::Value,
    env_prefix: &str,
    path: &Path,
) -> Result<()> {
    // Variables that are not UTF-8 cannot name a key; they are skipped.
    let overrides = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, _)| name.starts_with(env_prefix));
    apply_overrides(document, env_prefix, overrides)
        .with_context(|| format!("overriding {}", path.display()))
}

/// Applies `<prefix>SECTION_KEY=value` overrides to `document`. A variable
/// naming no key of the file is logged and left alone (the prefix is
/// shared with Fabric's, and other tools may set such variables); a value
/// that is not YAML is an error naming the variable.
fn apply_overrides(
    document: &mut serde_yaml::Value,
    prefix: &str,
    overrides: impl Iterator<Item = (String, String)>,
) -> Result<()> {
    for (name, text) in overrides {
        match override_slot(document, prefix, &name) {
            Ok((node, dotted)) => {
                *node = serde_yaml::from_str(&text)
                    .with_context(|| format!("{name}: {text:?} is not a YAML value"))?;
                tracing::info!(variable = %name, key = %dotted, "configuration overridden");
            }
            Err(reason) => {
                tracing::warn!(variable = %name, %reason, "environment variable ignored");
            }
        }
    }
    Ok(())
}

/// The node of `document` the variable `name` names, and its dotted key.
fn override_slot<'a>(
    document: &'a mut serde_yaml::Value,
    prefix: &str,
    name: &str,
) -> Result<(&'a mut serde_yaml::Value, String)> {
    let path = name.strip_prefix(prefix).unwrap_or_default();
    let mut node = &mut *document;
    let mut dotted = Vec::new();
    for segment in path.split('_') {
        let mapping = node
            .as_mapping_mut()
            .ok_or_else(|| anyhow!("{name}: {} is not a section", dotted.join(".")))?;
        let key = mapping
            .keys()
            .find(|key| {
                key.as_str()
                    .is_some_and(|k| k.eq_ignore_ascii_case(segment))
            })
            .cloned()
            .ok_or_else(|| {
                anyhow!(
                    "{name}: no key {segment:?} under {:?} in the file (only keys the \
                     file has can be overridden)",
                    dotted.join(".")
                )
            })?;
        dotted.push(key.as_str().unwrap_or_default().to_owned());
        node = mapping
            .get_mut(&key)
            .ok_or_else(|| anyhow!("{name}: {} vanished", dotted.join(".")))?;
    }
    Ok((node, dotted.join(".")))
}

/// The bytes of the file at `path`; an error names `key`, the config key
/// or command-line option that gave the path, and the file.
pub fn read_file(key: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("{key}: reading {}", path.display()))
}

/// `path` as written in a config file: relative paths are relative to the
/// directory of the file (`config_dir`), so a config works from any
/// working directory.
pub fn resolve(config_dir: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        config_dir.join(path)
    }
}

/// A duration in Go's notation: a sequence of decimal numbers with units
/// `ns`, `us`, `ms`, `s`, `m`, `h` (`1m30s`, `0.5s`, `250ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        weft_protos::duration::parse_go_duration(&text)
            .map(GoDuration)
            .map_err(serde::de::Error::custom)
    }
}

/// How a node checks who asks (`peer.authentication`,
/// `orderer.authentication`; Fabric's `peer.authentication` and the
/// orderer's `General.Authentication`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct AuthenticationSection {
    /// How far a Deliver request's timestamp may be from the clock.
    pub time_window: GoDuration,
}

impl Default for AuthenticationSection {
    fn default() -> Self {
        Self {
            time_window: GoDuration(weft_ledger::deliver::TIME_WINDOW_DEFAULT),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn document() -> serde_yaml::Value {
        serde_yaml::from_str(
            "peer:\n  listenAddress: 127.0.0.1:7051\nledger:\n  groupCommitBlocks: 16\norderers: [a]\n",
        )
        .unwrap()
    }

    fn overridden(pairs: &[(&str, &str)]) -> Result<serde_yaml::Value> {
        let mut document = document();
        let pairs = pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()));
        apply_overrides(&mut document, "CORE_", pairs)?;
        Ok(document)
    }

    #[test]
    fn environment_variables_override_keys_the_file_has() {
        let document = overridden(&[
            ("CORE_PEER_LISTENADDRESS", "0.0.0.0:9999"),
            ("CORE_LEDGER_GROUPCOMMITBLOCKS", "64"),
            ("CORE_ORDERERS", "[x, y]"),
        ])
        .unwrap();
        assert_eq!(
            document["peer"]["listenAddress"].as_str(),
            Some("0.0.0.0:9999")
        );
        assert_eq!(document["ledger"]["groupCommitBlocks"].as_u64(), Some(64));
        assert_eq!(document["orderers"][1].as_str(), Some("y"));
    }

    #[test]
    fn variables_naming_no_key_are_left_alone_and_bad_values_are_errors() {
        let document = overridden(&[
            ("CORE_PEER_NOSUCH", "1"),
            ("CORE_PEER_LISTENADDRESS_DEEPER", "1"),
        ])
        .unwrap();
        assert_eq!(document, super::tests::document());
        let error = overridden(&[("CORE_LEDGER_GROUPCOMMITBLOCKS", "[unclosed")]).unwrap_err();
        assert!(
            error.to_string().contains("CORE_LEDGER_GROUPCOMMITBLOCKS"),
            "{error}"
        );
    }
}
