# shellcheck shell=bash
# Sourced by the repository's scripts (quickstart, CI, containers): installs
# the Debian packages a script needs and the machine lacks, so that nothing
# has to be installed by hand on a fresh Debian machine.
#
#   . deploy/packages.sh
#   install_missing_packages g++:g++ libclang-dev
#
# Each argument is `COMMAND:PACKAGE` (the package is wanted when the command
# is not on PATH, so a tool installed some other way is left alone) or a
# bare `PACKAGE` (wanted when dpkg does not list it as installed: libraries).
# Installing needs root; otherwise sudo is used when present, and failing
# that the script stops with the apt-get command to run.

# The packages building weft needs besides Rust: libclang generates RocksDB's
# bindings, g++ and make build RocksDB. protoc and Protobuf's well-known types
# are not among them: the build takes both from the protoc-bin-vendored crate.
# shellcheck disable=SC2034 # used by the scripts that source this file
WEFT_BUILD_PACKAGES=(libclang-dev g++:g++ make:make)
# What the tests need besides: Node.js with npm for Fabric's own JavaScript
# clients (the tests install their npm packages themselves), openssl, and
# Java with Maven for the Kafka broker the Kafka tests start through
# deploy/kafka.sh (which fetches Kafka's jars from Maven Central itself),
# and e2fsprogs with mount's losetup for the disk-fault test's ext4 image.
# shellcheck disable=SC2034
WEFT_TEST_PACKAGES=(node:nodejs npm:npm openssl:openssl java:default-jre-headless mvn:maven
  mkfs.ext4:e2fsprogs e2fsck:e2fsprogs losetup:mount)

install_missing_packages() {
  local wanted missing=()
  for wanted in "$@"; do
    if [[ $wanted == *:* ]]; then
      command -v "${wanted%%:*}" >/dev/null || missing+=("${wanted#*:}")
    else
      dpkg-query -W -f='${Status}' "$wanted" 2>/dev/null | grep -q 'ok installed' || missing+=("$wanted")
    fi
  done
  ((${#missing[@]})) || return 0

  local as_root=()
  if ((EUID != 0)); then
    if command -v sudo >/dev/null; then
      as_root=(sudo)
    else
      echo "error: missing Debian packages; as root, run:" >&2
      echo "  apt-get install ${missing[*]}" >&2
      return 1
    fi
  fi
  echo "installing Debian packages: ${missing[*]}"
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
