//! Entry points for the fuzz targets (`fuzz/`, built with the `fuzzing`
//! feature): each reads one kind of configuration file exactly as the
//! `weft` command reads it, from a path, environment overrides included.
//!
//! A reader may refuse its input with an error naming the file and field;
//! it must never panic, whatever the bytes.

use std::path::Path;

/// Reads a peer's `core.yaml` (`weft peer start --config`).
pub fn read_peer_config(path: &Path) -> anyhow::Result<()> {
    crate::peer::config::PeerConfig::load(path).map(drop)
}

/// Reads an orderer's `orderer.yaml` (`weft orderer start --config`).
pub fn read_orderer_config(path: &Path) -> anyhow::Result<()> {
    crate::orderer::Settings::load(path).map(drop)
}

/// Reads a channel profile file (`weft channel genesis --config`), picking
/// its only profile.
pub fn read_channel_profile(path: &Path) -> anyhow::Result<()> {
    crate::channel::profile::load(path, None).map(drop)
}

/// Reads a `crypto-config.yaml` (`weft cryptogen generate --config`).
pub fn read_crypto_config(path: &Path) -> anyhow::Result<()> {
    crate::cryptogen::check_config(path)
}

/// Reads a saved network plan (`network.yaml`, which `weft network up`
/// resumes from).
pub fn read_network_plan(path: &Path) -> anyhow::Result<()> {
    crate::network::Plan::load(path).map(drop)
}

/// Reads a client connection file (`weft bench --connect`).
pub fn read_connection_file(path: &Path) -> anyhow::Result<()> {
    crate::network::connection::ConnectionFile::load(path).map(drop)
}
