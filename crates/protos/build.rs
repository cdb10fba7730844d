//! Compiles the Fabric wire schema in `../../proto` with prost and tonic.
//!
//! Every `.proto` file under the directory is compiled, so adding a file to
//! `proto/` is enough to get its types. Bytes fields become `bytes::Bytes`
//! (decoding slices the input instead of copying), and map fields become
//! `BTreeMap` so that our own encodings are deterministic: configuration
//! values are hashed and signed, so the same config must encode the same way
//! on every node.
//!
//! protoc and Protobuf's well-known types (`google/protobuf/*.proto`) come
//! from the `protoc-bin-vendored` crate, not from the system: a fresh machine
//! needs no Debian protobuf package to build weft, and every machine compiles
//! the schema with the same protoc.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let mut files = Vec::new();
    collect_protos(&proto_root, &mut files)?;
    files.sort();
    println!("cargo:rerun-if-changed={}", proto_root.display());
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }

    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let well_known_types = protoc_bin_vendored::include_path()?;

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        // The chaincode shim's `Connect` RPC would clash with tonic's
        // `connect` constructor; clients are built from a channel instead.
        .build_transport(false)
        .bytes(".")
        .btree_map(".")
        .file_descriptor_set_path(out_dir.join("fabric_descriptor.bin"))
        .compile_with_config(config, &files, &[proto_root, well_known_types])?;
    Ok(())
}

fn collect_protos(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, files)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            files.push(path);
        }
    }
    Ok(())
}
