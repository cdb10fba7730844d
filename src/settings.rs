//! Reading node configuration files: YAML into typed settings, with errors
//! that name the file and the key at fault, and durations written as Go
//! writes them (`250ms`, `2s`, `1m30s`), as in Fabric's `core.yaml` and
//! `orderer.yaml`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// Reads `path` as YAML into `T`. An error names the file and the dotted
/// key path (`committer.pipelineDepth: invalid type ...`).
pub fn load_yaml<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let document: serde_yaml::Value = serde_yaml::from_str(&text)
        .with_context(|| format!("{}: not valid YAML", path.display()))?;
    serde_path_to_error::deserialize(document).map_err(|error| {
        let key = error.path().to_string();
        if key == "." {
            anyhow!("{}: {}", path.display(), error.inner())
        } else {
            anyhow!("{}: {key}: {}", path.display(), error.inner())
        }
    })
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
