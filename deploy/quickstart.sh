#!/usr/bin/env bash
# The README's main job: build weft, generate the crypto material of the
# default network (config/crypto.yaml) and the genesis block of channel
# `mychannel` (config/channel.yaml), start an orderer and a peer as separate
# processes on 127.0.0.1, run the transfer workload through them (broadcast
# to the orderer, commits watched on the peer) and print what it measured.
# The nodes stop when the workload ends (or on Ctrl-C); their ledgers stay.
#
#   bash deploy/quickstart.sh [DATA_DIR]
#
# Without DATA_DIR, the run goes to target/quickstart, replaced on each run.
# A DATA_DIR you name must not exist yet: keys are never overwritten.
# WEFT_TRANSACTIONS sets the number of transfers (default 20000).
#
# Today the network has one orderer (solo) and one committing peer, and the
# workload endorses its transactions with the peers' keys, as the peers
# would, until weft's endorsers exist.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -ge 1 ]]; then
  data="$1"
  if [[ -e "$data" ]]; then
    echo "error: $data exists; remove it or name another directory" >&2
    exit 1
  fi
else
  data=target/quickstart
  rm -rf "$data"
fi

cargo build --release --quiet --bin weft
weft=$PWD/target/release/weft
mkdir -p "$data"

echo "== crypto material (like cryptogen)"
"$weft" crypto generate --config config/crypto.yaml --output "$data/crypto"

echo "== genesis block of channel mychannel (like configtxgen)"
cp config/channel.yaml "$data/channel.yaml"
"$weft" channel genesis --config "$data/channel.yaml" --profile TwoOrgs \
  --channel mychannel --output "$data/mychannel.block"

# Each node prints one "ready" line with the addresses it bound (port 0 in
# its config: any free port).
nodes=()
stop_nodes() {
  for pid in "${nodes[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${nodes[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_nodes EXIT

start_node() { # role: starts it and waits for its ready line
  local role=$1
  "$weft" "$role" start --config "$data/$role.yaml" >"$data/$role.out" 2>"$data/$role.log" &
  nodes+=("$!")
  for _ in $(seq 200); do
    if grep -q ready "$data/$role.out"; then
      return
    fi
    if ! kill -0 "${nodes[-1]}" 2>/dev/null; then
      break
    fi
    sleep 0.1
  done
  echo "error: the $role did not start; its log:" >&2
  cat "$data/$role.log" >&2
  exit 1
}

grpc_address() { # role: the gRPC address from its ready line
  sed -nE 's/.* grpc ([0-9.]+:[0-9]+).*/\1/p' "$data/$1.out" | head -n1
}

echo "== orderer and peer"
cat >"$data/orderer.yaml" <<YAML
orderer:
  id: orderer0.example.com
  listenAddress: 127.0.0.1:0
  localMspId: OrdererMSP
  mspConfigPath: crypto/ordererOrganizations/example.com/orderers/orderer0.example.com/msp
  fileSystemPath: orderer0
channels:
  - genesisBlock: mychannel.block
consensus:
  type: solo
YAML
start_node orderer
head -n1 "$data/orderer.out"
orderer=$(grpc_address orderer)

cat >"$data/peer.yaml" <<YAML
peer:
  id: peer0.org1.example.com
  listenAddress: 127.0.0.1:0
  localMspId: Org1MSP
  mspConfigPath: crypto/peerOrganizations/org1.example.com/peers/peer0.org1.example.com/msp
  fileSystemPath: peer0.org1
channels:
  - genesisBlock: mychannel.block
orderers: ["$orderer"]
operations:
  listenAddress: 127.0.0.1:0
YAML
start_node peer
head -n1 "$data/peer.out"
peer=$(grpc_address peer)

echo "== workload: transfers between account pairs, endorsed by org1 and org2"
"$weft" bench network --orderer "$orderer" --peer "$peer" --crypto "$data/crypto" \
  --channel mychannel --transactions "${WEFT_TRANSACTIONS:-20000}"
echo
echo "crypto in $data/crypto, ledgers in $data/orderer0 and $data/peer0.org1, logs beside them"
