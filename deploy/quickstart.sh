#!/usr/bin/env bash
# The README's main job: build weft, generate the crypto material of the
# default network (config/crypto.yaml) and the genesis block of channel
# `mychannel` (config/channel.yaml), start an orderer and the peers of both
# organisations as separate processes on 127.0.0.1, run the transfer
# workload through them as a Fabric client does (proposals endorsed by both
# peers, transactions broadcast to the orderer, commit events from the
# peers) and print what it measured.
# The nodes stop when the workload ends (or on Ctrl-C); their ledgers stay.
#
#   bash deploy/quickstart.sh [DATA_DIR]
#
# Without DATA_DIR, the run goes to target/quickstart, replaced on each run.
# A DATA_DIR you name must not exist yet: keys are never overwritten.
# WEFT_TRANSACTIONS sets the number of transfers (default 20000).
#
# Today the network has one orderer (solo); Raft arrives with `weft network up`.
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

start_node() { # role name: starts $data/name.yaml and waits for its ready line
  local role=$1 name=$2
  "$weft" "$role" start --config "$data/$name.yaml" >"$data/$name.out" 2>"$data/$name.log" &
  nodes+=("$!")
  for _ in $(seq 200); do
    if grep -q ready "$data/$name.out"; then
      head -n1 "$data/$name.out"
      return
    fi
    if ! kill -0 "${nodes[-1]}" 2>/dev/null; then
      break
    fi
    sleep 0.1
  done
  echo "error: $name did not start; its log:" >&2
  cat "$data/$name.log" >&2
  exit 1
}

grpc_address() { # name: the gRPC address from its ready line
  sed -nE 's/.* grpc ([0-9.]+:[0-9]+).*/\1/p' "$data/$1.out" | head -n1
}

echo "== orderer and peers"
cat >"$data/orderer0.yaml" <<YAML
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
start_node orderer orderer0
orderer=$(grpc_address orderer0)

peers=()
for org in org1 org2; do
  msp_id="$(tr '[:lower:]' '[:upper:]' <<< "${org:0:1}")${org:1}MSP"
  cat >"$data/peer0.$org.yaml" <<YAML
peer:
  id: peer0.$org.example.com
  listenAddress: 127.0.0.1:0
  localMspId: $msp_id
  mspConfigPath: crypto/peerOrganizations/$org.example.com/peers/peer0.$org.example.com/msp
  fileSystemPath: peer0.$org
channels:
  - genesisBlock: mychannel.block
orderers: ["$orderer"]
operations:
  listenAddress: 127.0.0.1:0
YAML
  start_node peer "peer0.$org"
  peers+=("$(grpc_address "peer0.$org")")
done

echo "== workload: transfers between account pairs, endorsed by org1 and org2"
"$weft" bench network --orderer "$orderer" --peers "${peers[0]},${peers[1]}" \
  --crypto "$data/crypto" --channel mychannel --transactions "${WEFT_TRANSACTIONS:-20000}"
echo
echo "crypto in $data/crypto, ledgers in $data/orderer0 and $data/peer0.org{1,2}, logs beside them"
