#!/usr/bin/env bash
# Runs the weft network of deploy/compose.yaml in real containers, end to
# end, and tears it down again:
#
#   1. installs Docker's engine, docker-compose and debootstrap from Debian
#      when they are missing;
#   2. starts a private dockerd (its own socket, data and exec roots, under
#      a temporary folder), leaving any system Docker alone;
#   3. builds the Debian bookworm base image with debootstrap (its root is
#      cached as a tarball, so later runs only import it) and the weft
#      image from a weft binary built outside the image;
#   4. brings the network up (init service, three Raft orderers, two peers
#      in each of two organisations, each with its CPU limit) and waits
#      until every node is healthy and the orderers agree on a leader;
#      with WEFT_CONSENSUS=kafka, the Kafka variant instead
#      (deploy/compose.kafka.yaml: a broker service built from Kafka's
#      jars on a Debian root with Java, the channel ordering TxIDs through
#      it), waiting until the broker and every node are healthy;
#   5. runs the transfer workload from the host against the published
#      ports (`weft bench --connect deploy/connection.yaml`, both organisations endorsing), then
#      checks that every node reached the same block height, and prints
#      the CPU each container spent during the workload;
#   6. tears everything down (compose down -v, dockerd stopped, its folders
#      removed), on success and on failure alike.
#
#   bash deploy/containers.sh [WEFT_BINARY]
#
# The weft binary: the first argument, else $WEFT_BIN, else
# `cargo build --release --bin weft` and $CARGO_TARGET_DIR/release/weft.
# It is also the client that runs the workload on the host.
#
# Environment:
#   WEFT_DURATION       how long the workload runs (default 8s)
#   WEFT_CLIENTS        clients transferring at once (default 500: a block
#                       of the channel's 500 transactions can fill before
#                       its 2 s batch timeout)
#   WEFT_ORDERER_CPUS   CPU limit of each orderer container (default 0.5)
#   WEFT_PEER_CPUS      CPU limit of each peer container (default 0.5)
#   WEFT_CONSENSUS      raft (default) or kafka: which variant runs
#   WEFT_KAFKA_CPUS     CPU limit of the Kafka broker container (default 0.5)
#   WEFT_CACHE          where the base image's root tarball is kept
#                       (default ${XDG_CACHE_HOME:-~/.cache}/weft)
#   WEFT_DEBIAN_MIRROR  debootstrap's mirror (default http://deb.debian.org/debian)
#   WEFT_DOCKER_POOL    address pool of the private dockerd's networks
#                       (default 10.213.0.0/16)
#   WEFT_KEEP=1         leave the network and dockerd running at the end
#                       (prints how to reach and stop them)
#
# Needs root (dockerd does). Client ports are published on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# ---------------------------------------------------------------- steps ----
now_ms() { date +%s%3N; }
seconds_since() { # start_ms: elapsed seconds, one decimal
  local ms=$(($(now_ms) - $1))
  printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}
started_at=$(now_ms)
step_name=
step_started=
timings=()
end_step() {
  if [[ -n $step_name ]]; then
    timings+=("$(printf '%7s s  %s' "$(seconds_since "$step_started")" "$step_name")")
  fi
  step_name=
}
step() {
  end_step
  step_name=$1
  step_started=$(now_ms)
  printf '\n== %s\n' "$1"
}
die() {
  echo "error: $*" >&2
  exit 1
}
# Without a terminal compose prints each action twice, started and done:
# the done lines are enough.
quiet() { tr -d '\r' | grep -v -- '\.\.\. *$' | sed 's/^/   /'; }

if [[ $(id -u) -ne 0 ]]; then
  die "run as root: the script installs packages and starts dockerd"
fi

duration=${WEFT_DURATION:-8s}
clients=${WEFT_CLIENTS:-500}
cache=${WEFT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}
mirror=${WEFT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
pool=${WEFT_DOCKER_POOL:-10.213.0.0/16}
base_image=weft/debian-base:bookworm
image=weft/weft:local
project=weft
compose_file=$repo/deploy/compose.yaml
orderers=(orderer0.example.com orderer1.example.com orderer2.example.com)
peers=(peer0.org1.example.com peer1.org1.example.com peer0.org2.example.com peer1.org2.example.com)
# Published operations ports, in the order of "${orderers[@]}" "${peers[@]}".
operations_ports=(8443 8444 8445 9443 9444 9445 9446)
case ${WEFT_CONSENSUS:-raft} in
  raft) kafka=false ;;
  kafka) kafka=true ;;
  *) echo "error: WEFT_CONSENSUS=${WEFT_CONSENSUS}: raft or kafka" >&2; exit 2 ;;
esac
broker=kafka.example.com
jre_image=weft/debian-base:bookworm-jre
kafka_image=weft/kafka:local

# ------------------------------------------------------------- packages ----
step "packages (docker.io, docker-compose, debootstrap from Debian)"
# shellcheck source=deploy/packages.sh
. deploy/packages.sh
install_missing_packages dockerd:docker.io docker-compose:docker-compose debootstrap:debootstrap
command -v docker >/dev/null || die "docker.io is installed but no docker client is on PATH"
echo "dockerd: $(dockerd --version)"
echo "docker-compose: $(docker-compose version --short)"

# ---------------------------------------------------------- weft binary ----
step "weft binary"
weft=${1:-${WEFT_BIN:-}}
if [[ -z $weft ]]; then
  cargo build --release --quiet --bin weft
  weft=${CARGO_TARGET_DIR:-target}/release/weft
fi
[[ -x $weft ]] || die "$weft is not an executable weft binary"
weft=$(realpath "$weft")
echo "$weft ($("$weft" --version))"

# -------------------------------------------------------------- dockerd ----
work=$(mktemp -d /tmp/weft-containers.XXXXXX)
export DOCKER_HOST=unix://$work/docker.sock
compose=(docker-compose --project-name "$project" --file "$compose_file")
if $kafka; then
  compose+=(--file "$repo/deploy/compose.kafka.yaml")
fi
# What the compose file reads: where the init service writes the material,
# owned by whoever runs this script (root here, but the owner is explicit).
export WEFT_MATERIAL=$work/material
WEFT_MATERIAL_OWNER="$(id -u):$(id -g)"
export WEFT_MATERIAL_OWNER
export WEFT_IMAGE=$image
network_started=false

teardown() {
  local status=$?
  end_step
  set +e
  if [[ ${WEFT_KEEP:-} == 1 && -f $work/dockerd.pid ]]; then
    printf '\n== left running (WEFT_KEEP=1)\n'
    echo "export DOCKER_HOST=$DOCKER_HOST WEFT_MATERIAL=$WEFT_MATERIAL WEFT_IMAGE=$image"
    echo "${compose[*]} ps"
    echo "stop: ${compose[*]} down -v; kill \$(cat $work/dockerd.pid); rm -rf $work"
    return
  fi
  step "teardown"
  if $network_started; then
    if [[ $status -ne 0 ]]; then
      echo "-- the nodes' last log lines"
      "${compose[@]}" logs --no-color --tail 30 2>&1 | sed 's/^/   /'
    fi
    "${compose[@]}" down --volumes --timeout 20 2>&1 | quiet
  fi
  local pid=${dockerd_pid:-}
  [[ -f $work/dockerd.pid ]] && pid=$(cat "$work/dockerd.pid")
  if [[ -n $pid ]]; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 150); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "dockerd did not stop in 30 s; killing it"
      kill -KILL "$pid" 2>/dev/null
      sleep 1
    fi
    if [[ $status -ne 0 ]] && ! $network_started; then
      echo "-- dockerd's last log lines"
      tail -n 20 "$work/dockerd.log" | sed 's/^/   /'
    fi
  fi
  # Anything dockerd left mounted under its roots would make rm fail.
  grep -o " $work/[^ ]*" /proc/mounts | sort -r | while read -r mount; do umount -l "$mount"; done
  rm -rf "$work"
  echo "removed $work"
  end_step
  if [[ $status -eq 0 ]]; then
    printf '\n== done in %s s\n' "$(seconds_since "$started_at")"
    printf '%s\n' "${timings[@]}"
  else
    printf '\n== FAILED (exit %s)\n' "$status"
  fi
}
trap teardown EXIT
trap 'exit 130' INT TERM

step "dockerd on $DOCKER_HOST"
mkdir -p "$work/data" "$work/exec" "$work/material" "$work/context"
# --bridge=none: no default bridge, so no clash with a system dockerd's
# docker0; compose creates its own network from $pool. Separate containerd
# namespaces keep this daemon's containers apart should it share a system
# containerd.
dockerd \
  --data-root "$work/data" \
  --exec-root "$work/exec" \
  --pidfile "$work/dockerd.pid" \
  --host "$DOCKER_HOST" \
  --bridge none \
  --default-address-pool "base=$pool,size=24" \
  --containerd-namespace weft-containers \
  --containerd-plugins-namespace weft-containers-plugins \
  >"$work/dockerd.log" 2>&1 &
dockerd_pid=$!
for _ in $(seq 300); do
  docker version >/dev/null 2>&1 && break
  kill -0 "$dockerd_pid" 2>/dev/null || { tail -n 30 "$work/dockerd.log" >&2; die "dockerd exited"; }
  sleep 0.1
done
docker version --format 'engine {{.Server.Version}}, API {{.Server.APIVersion}}' ||
  { tail -n 30 "$work/dockerd.log" >&2; die "dockerd did not answer in 30 s"; }

# ----------------------------------------------------------- base image ----
step "base image $base_image"
# shellcheck source=deploy/debian-root.sh
. deploy/debian-root.sh
rootfs_tar=$(debian_root_tarball "$cache" "$mirror" "$work")
docker import --message "debootstrap --variant=minbase bookworm" "$rootfs_tar" "$base_image" >/dev/null
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$base_image"

# ----------------------------------------------------------- weft image ----
step "weft image $image"
# The image gets the binary without its debug information (the image
# needs none and it is most of a debug build's size).
strip --strip-debug -o "$work/context/weft" "$weft" 2>/dev/null || cp "$weft" "$work/context/weft"
# The legacy builder: a COPY needs no BuildKit (which Debian's docker.io
# packages separately).
DOCKER_BUILDKIT=0 docker build --file deploy/Dockerfile --tag "$image" \
  --build-arg "BASE=$base_image" "$work/context" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; die "docker build failed"; }
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$image"
docker run --rm --network none "$image" --version

if $kafka; then
  step "Kafka broker image $kafka_image"
  jre_tar=$(debian_root_tarball "$cache" "$mirror" "$work" default-jre-headless)
  docker import --message "debootstrap --variant=minbase --include=default-jre-headless bookworm" \
    "$jre_tar" "$jre_image" >/dev/null
  # The jars deploy/kafka.sh fetches for the tests, from Maven Central.
  jars=$(bash deploy/kafka.sh fetch | tail -n1)
  [[ -f $jars/.complete ]] || die "deploy/kafka.sh fetch left no complete jars in $jars"
  mkdir -p "$work/kafka-context"
  cp -r "$jars" "$work/kafka-context/libs"
  cp deploy/kafka.sh deploy/packages.sh "$work/kafka-context/"
  DOCKER_BUILDKIT=0 docker build --file deploy/Dockerfile.kafka --tag "$kafka_image" \
    --build-arg "BASE=$jre_image" "$work/kafka-context" >"$work/kafka-build.log" 2>&1 ||
    { cat "$work/kafka-build.log" >&2; die "docker build of the broker failed"; }
  docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$kafka_image"
  export WEFT_KAFKA_IMAGE=$kafka_image
fi

# -------------------------------------------------------------- network ----
if $kafka; then
  step "network up (init, a Kafka broker, 3 orderers on it, 2 x 2 peers)"
else
  step "network up (init, 3 Raft orderers, 2 x 2 peers)"
fi
network_started=true
"${compose[@]}" up --detach >"$work/up.log" 2>&1 ||
  { cat "$work/up.log" >&2; die "docker-compose up failed"; }
quiet <"$work/up.log"

# Waits until `container` (of `name`) is healthy, within 120 s.
wait_healthy() { # name container
  local attempt state
  for attempt in $(seq 240); do
    state=$(docker inspect --format '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "$2")
    case $state in
      "running healthy") return 0 ;;
      exited* | dead*) docker logs --tail 30 "$2" >&2; die "$1 stopped ($state)" ;;
    esac
    ((attempt < 240)) || die "$1 not healthy after 120 s ($state)"
    sleep 0.5
  done
}

if $kafka; then
  id=$("${compose[@]}" ps --quiet "$broker")
  [[ -n $id ]] || die "no container for $broker"
  wait_healthy "$broker" "$id"
  echo "   $(docker logs "$id" 2>&1 | grep -m1 '^kafka: Kafka ')"
fi

# Waits until every node's container is healthy (its /healthz answers 200)
# and prints its ready line.
nodes=("${orderers[@]}" "${peers[@]}")
declare -A container
for node in "${nodes[@]}"; do
  id=$("${compose[@]}" ps --quiet "$node")
  [[ -n $id ]] || die "no container for $node"
  container[$node]=$id
  wait_healthy "$node" "$id"
  ready=$(docker logs "$id" 2>/dev/null | grep -m1 ' ready: ') || die "$node is healthy but printed no ready line"
  echo "   $ready"
done

# GET of a published operations endpoint, with bash's /dev/tcp (no curl
# needed on the host).
http_get() { # port path
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  cat <&3
  exec 3<&-
}
metric() { # port name: the first value of the series
  http_get "$1" /metrics | awk -v name="$2" '$1 ~ "^"name"([{]|$)" { print $2; exit }'
}

# A follower that knows no leader refuses broadcasts: wait until every
# orderer names the same leader. (A Kafka orderer is healthy only once
# its channel's partition takes its records.)
for attempt in $(seq 120); do
  $kafka && break
  leaders=()
  for index in 0 1 2; do
    leaders+=("$(metric "${operations_ports[$index]}" consensus_etcdraft_leader_id || true)")
  done
  if [[ ${leaders[0]} =~ ^[1-9] && ${leaders[0]} == "${leaders[1]}" && ${leaders[0]} == "${leaders[2]}" ]]; then
    echo "   Raft leader: orderer$((leaders[0] - 1)).example.com (Raft ID ${leaders[0]}), known to all three"
    break
  fi
  ((attempt < 120)) || die "the orderers agree on no leader after 60 s (leader IDs: ${leaders[*]})"
  sleep 0.5
done

if $kafka; then
  nodes+=("$broker")
  container[$broker]=$("${compose[@]}" ps --quiet "$broker")
fi

step "CPU limits (docker inspect: HostConfig.NanoCpus)"
for node in "${nodes[@]}"; do
  nano=$(docker inspect --format '{{.HostConfig.NanoCpus}}' "${container[$node]}")
  [[ $nano -gt 0 ]] || die "$node runs without a CPU limit (NanoCpus $nano)"
  printf '   %-24s %s CPUs\n' "$node" "$(awk -v n="$nano" 'BEGIN { print n / 1e9 }')"
done

# ------------------------------------------------------------- workload ----
step "workload: weft bench from the host (deploy/connection.yaml), org1 and org2 endorsing"
cp deploy/connection.yaml "$WEFT_MATERIAL/connection.yaml"
# Each container's CPU time (its main process: weft, or the broker's JVM,
# which kafka.sh execs), in clock ticks, from the host's /proc.
cpu_ticks() { # container
  local pid
  pid=$(docker inspect --format '{{.State.Pid}}' "$1")
  awk '{ print $14 + $15 }' "/proc/$pid/stat"
}
declare -A ticks_before
for node in "${nodes[@]}"; do
  ticks_before[$node]=$(cpu_ticks "${container[$node]}")
done
"$weft" bench --connect "$WEFT_MATERIAL/connection.yaml" --workload transfer \
  --duration "$duration" --clients "$clients" --json "$work/bench.json" | tee "$work/bench.out"
last=$(tail -n1 "$work/bench.out")
[[ $last == committed* ]] || die "the workload's last line is not its result: $last"
# Every transaction committed VALID, none failed on the way. The JSON of one
# measurement is an object pretty-printed by serde_json: each top-level
# field on a line of its own, two spaces in, followed by a comma (none of
# these three is the last field); a non-empty map spans lines and so reads
# as empty here.
json_field() { sed -n "s/^  \"$1\": \(.*\),\$/\1/p" "$work/bench.json"; }
committed=$(json_field committed)
[[ $committed =~ ^[0-9]+$ && $committed -gt 0 ]] || die "nothing committed: $last"
[[ $(json_field valid) == "$committed" ]] || die "not every transaction VALID: see $work/bench.json"
[[ $(json_field failures) == "{}" ]] || die "transactions failed: see $work/bench.json"

step "CPU per container during the workload (/proc/<pid>/stat)"
hz=$(getconf CLK_TCK)
for node in "${nodes[@]}"; do
  spent=$(($(cpu_ticks "${container[$node]}") - ticks_before[$node]))
  awk -v node="$node" -v t="$spent" -v hz="$hz" -v n="$committed" \
    'BEGIN { printf "   %-24s %6.2f s  %6.3f ms per transaction\n", node, t / hz, 1000 * t / hz / n }'
done

# Every node, endorsing or not, must have every block: the orderers'
# height is the chain's, the peers catch up to it.
step "every node at the same height"
for attempt in $(seq 60); do
  heights=()
  for port in "${operations_ports[@]}"; do
    heights+=("$(metric "$port" ledger_blockchain_height || true)")
  done
  if [[ ${heights[0]} =~ ^[0-9]+$ && ${heights[0]} -gt 1 ]] &&
    [[ $(printf '%s\n' "${heights[@]}" | sort -u | wc -l) -eq 1 ]]; then
    echo "   all 7 nodes at height ${heights[0]}"
    break
  fi
  ((attempt < 60)) || die "heights differ after 30 s (orderers, then peers): ${heights[*]}"
  sleep 0.5
done
echo
echo "result: $last"
