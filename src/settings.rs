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
        parse_duration(&text)
            .map(GoDuration)
            .map_err(serde::de::Error::custom)
    }
}

/// Parses a duration in Go's notation (see [`GoDuration`]).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration like 250ms, 2s or 1m30s");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..number_end].parse().map_err(|_| bad())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += number * seconds_per_unit;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "2", "s", "2 s", "2sec", "-1s", "1.2.3s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
