#!/usr/bin/env bash
# Builds and runs weft's fuzz targets (cargo-fuzz, libFuzzer), from any
# directory:
#
#   bash fuzz/run.sh build             build every target
#   bash fuzz/run.sh replay            run every target over its corpus once
#   bash fuzz/run.sh fuzz SECONDS      fuzz every target for SECONDS each
#   bash fuzz/run.sh ci SECONDS        build, replay, fuzz (what .ci/run does)
#   bash fuzz/run.sh seeds             write each target's seeds (fuzz/seeds/)
#   bash fuzz/run.sh one TARGET [ARGS] fuzz one target, libFuzzer's ARGS
#
# The corpus of a target is fuzz/seeds/<target> (derived from the Fabric
# fixtures, see src/seeds.rs) plus fuzz/regressions/<target> (inputs that
# once failed, each kept for good). New inputs found while fuzzing go to
# the working corpus under the build directory, not into the repository.
#
# Installs what it needs: the nightly toolchain and cargo-fuzz. RocksDB's
# C++ library is taken from the workspace's own build when one exists
# (ROCKSDB_LIB_DIR), so the targets do not compile it a second time.
set -euo pipefail
cd "$(dirname "$0")"

TOOLCHAIN=nightly
CARGO_FUZZ_VERSION=0.13.2
export CARGO_TARGET_DIR="${WEFT_FUZZ_TARGET_DIR:-$HOME/.cache/weft/fuzz-target}"
WORK="$CARGO_TARGET_DIR/corpus"

targets() { sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^weft-fuzz$'; }

install_tools() {
  rustup toolchain list | grep -q "^$TOOLCHAIN" ||
    rustup toolchain install "$TOOLCHAIN" --profile minimal
  cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION" ||
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
}

# The newest librocksdb.a the workspace built (debug or release), if any.
reuse_rocksdb() {
  local workspace_target="${WEFT_WORKSPACE_TARGET_DIR:-$HOME/.cache/weft/target}" lib
  lib=$(ls -t "$workspace_target"/*/build/librocksdb-sys-*/out/librocksdb.a 2>/dev/null | head -n 1 || true)
  if [[ -n "$lib" ]]; then
    export ROCKSDB_LIB_DIR="${lib%/librocksdb.a}" ROCKSDB_STATIC=1
    echo "fuzz: linking RocksDB from $ROCKSDB_LIB_DIR"
  fi
}

build() {
  install_tools
  reuse_rocksdb
  cargo "+$TOOLCHAIN" fuzz build --sanitizer none --debug-assertions --release
}

binary() { echo "$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/$1"; }

# The directories libFuzzer reads a target's inputs from.
corpus_of() {
  local target=$1 dirs=()
  mkdir -p "$WORK/$target"
  dirs+=("$WORK/$target")
  for dir in "seeds/$target" "regressions/$target"; do
    [[ -d "$dir" ]] && dirs+=("$dir")
  done
  echo "${dirs[@]}"
}

replay() {
  local target
  for target in $(targets); do
    echo "fuzz: replaying the corpus of $target"
    # shellcheck disable=SC2046
    "$(binary "$target")" -runs=0 $(corpus_of "$target") 2>&1 | tail -n 2
  done
}

fuzz() {
  local seconds=$1 target
  for target in $(targets); do
    echo "fuzz: $target for ${seconds}s"
    # shellcheck disable=SC2046
    "$(binary "$target")" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
      -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$WORK/$target-" \
      $(corpus_of "$target") 2>&1 | grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|INFO: Done|==|SUMMARY|panicked|thread)' || true
    if compgen -G "$WORK/$target-crash-*" >/dev/null || compgen -G "$WORK/$target-timeout-*" >/dev/null; then
      echo "fuzz: $target failed; the input is in $WORK (move it to fuzz/regressions/$target/)" >&2
      return 1
    fi
  done
}

seeds() {
  local target
  for target in $(targets); do
    rm -rf "seeds/$target"
    WEFT_FUZZ_WRITE_SEEDS="seeds/$target" "$(binary "$target")" -runs=0 >/dev/null 2>&1
    echo "fuzz: $(ls "seeds/$target" | wc -l) seeds for $target"
  done
}

case "${1:-}" in
  build) build ;;
  replay) replay ;;
  fuzz) fuzz "${2:?seconds per target}" ;;
  ci) build && replay && fuzz "${2:?seconds per target}" ;;
  seeds) seeds ;;
  one) shift; target=${1:?target}; shift
       # shellcheck disable=SC2046
       "$(binary "$target")" "$@" $(corpus_of "$target") ;;
  *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
