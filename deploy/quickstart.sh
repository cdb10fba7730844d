#!/usr/bin/env bash
# The README's main job: build weft, start a local network as
# `weft network up` does (crypto material, channel `mychannel`, a 3-node
# Raft orderer cluster and one peer of each of two organisations, each a
# separate process on 127.0.0.1, the built-in chaincodes defined with a
# one-organisation endorsement policy), run the transfer workload through
# it as a Fabric client does (proposals endorsed, transactions broadcast,
# commit events awaited) and print what it measured: committed tx/s,
# latency percentiles, the per-phase breakdown and CPU per component.
#
#   bash deploy/quickstart.sh [extra `weft bench` options]
#
# The network lives in target/quickstart (replaced on each run; logs in
# target/quickstart/network/<node>/node.log) and stops when the workload
# ends. WEFT_DURATION sets how long the workload runs (default 20s).
#
# Needs Rust (rustup); the Debian packages the build needs besides
# (libclang-dev, g++, make: deploy/packages.sh) are installed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=deploy/packages.sh
. deploy/packages.sh
install_missing_packages "${WEFT_BUILD_PACKAGES[@]}"
command -v cargo >/dev/null || { echo "error: cargo is missing; install Rust with rustup" >&2; exit 1; }

cargo build --release --quiet --bin weft
weft=${CARGO_TARGET_DIR:-target}/release/weft
data=target/quickstart
rm -rf "$data"
mkdir -p "$data"
exec "$weft" bench --workload transfer --clients 64 \
  --duration "${WEFT_DURATION:-20s}" --dir "$data" --json "$data/results.json" "$@"
