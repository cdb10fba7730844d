#!/usr/bin/env bash
# The README's main job, as far as weft goes today: build weft, generate the
# crypto material of the default network (config/crypto.yaml), write the
# genesis block of channel `mychannel` (config/channel.yaml), and show what
# the block holds. Starting orderers and peers and running a workload on
# them arrives with the orderer, committer and endorser work.
#
#   bash deploy/quickstart.sh [DATA_DIR]
#
# Without DATA_DIR, the run goes to target/quickstart, replaced on each run.
# A DATA_DIR you name must not exist yet: keys are never overwritten.
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
weft=target/release/weft
mkdir -p "$data"

echo "== crypto material (like cryptogen)"
"$weft" crypto generate --config config/crypto.yaml --output "$data/crypto"

echo "== genesis block of channel mychannel (like configtxgen)"
cp config/channel.yaml "$data/channel.yaml"
"$weft" channel genesis --config "$data/channel.yaml" --profile TwoOrgs \
  --channel mychannel --output "$data/mychannel.block"

echo "== what the block says"
"$weft" block inspect "$data/mychannel.block" > "$data/mychannel.json"
node -e '
const block = require(process.argv[1]);
const env = block.data.data[0].payload;
const root = env.data.config.channel_group;
const orderer = root.groups.Orderer.values;
const batch = orderer.BatchSize.value;
console.log(`channel        ${env.header.channel_header.channel_id}`);
console.log(`consensus      ${orderer.ConsensusType.value.type}, ${orderer.ConsensusType.value.metadata.consenters.length} consenters`);
console.log(`batch          ${batch.max_message_count} tx, ${batch.preferred_max_bytes} bytes preferred, timeout ${orderer.BatchTimeout.value.timeout}`);
for (const [group, orgs] of [["Orderer", root.groups.Orderer.groups], ["Application", root.groups.Application.groups]]) {
  for (const [name, org] of Object.entries(orgs)) {
    const msp = org.values.MSP.value.config;
    console.log(`${group.padEnd(12)}   ${name}: MSP ${msp.name}, NodeOUs ${msp.fabric_node_ous ? "on" : "off"}, policies ${Object.keys(org.policies).join(", ")}`);
  }
}
' "$(realpath "$data/mychannel.json")"
echo
echo "crypto in $data/crypto, genesis block in $data/mychannel.block (JSON beside it)"
