#!/bin/sh
# The init service of deploy/compose.yaml: generates the network's crypto
# material (like cryptogen) and the genesis block of channel mychannel
# (like configtxgen) into /var/weft/material, which every node mounts.
#
# Material already there is reused, never overwritten: the nodes' ledgers
# (their volumes) belong to it. Remove the folder together with the volumes
# (`docker-compose down -v`) to start a new network.
#
# WEFT_CHANNEL_PROFILE picks the profile of deploy/config/channel.yaml
# (TwoOrgs, Raft, by default; TwoOrgsKafka in the Kafka variant).
#
# WEFT_MATERIAL_OWNER (uid:gid), when set, is given ownership of what is
# written, so that a client on the host need not be root to read its keys.
set -eu

out=/var/weft/material
block="$out/mychannel.block"

if [ -f "$block" ]; then
  echo "init: reusing the material in $out (crypto/, mychannel.block)"
  exit 0
fi
if [ -e "$out/crypto" ]; then
  echo "init: error: $out/crypto exists but $block does not; remove the folder to start again" >&2
  exit 1
fi

# Written beside the final place, then moved in: an interrupted run leaves
# no half-written material behind.
staging="$out/.init.$$"
rm -rf "$out"/.init.*
mkdir -p "$staging"
weft crypto generate --config /etc/weft/crypto.yaml --output "$staging/crypto"
# Paths in channel.yaml are relative to its folder: it sits beside crypto/.
cp /etc/weft/channel.yaml "$staging/channel.yaml"
weft channel genesis --config "$staging/channel.yaml" --profile "${WEFT_CHANNEL_PROFILE:-TwoOrgs}" \
  --channel mychannel --output "$staging/mychannel.block"
mv "$staging/crypto" "$out/crypto"
mv "$staging/channel.yaml" "$out/channel.yaml"
if [ -n "${WEFT_MATERIAL_OWNER:-}" ]; then
  chown -R "$WEFT_MATERIAL_OWNER" "$out/crypto" "$out/channel.yaml" "$staging"
fi
# The block last: its presence means the material is complete.
mv "$staging/mychannel.block" "$block"
rmdir "$staging"
echo "init: wrote $out/crypto and $block"
