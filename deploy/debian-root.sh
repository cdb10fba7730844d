# shellcheck shell=bash
# Sourced by deploy/containers.sh and .ci/clean-root: a minimal Debian
# bookworm root (debootstrap --variant=minbase), made once and cached as a
# tarball. containers.sh imports it as the base of the weft image; the CI's
# clean-root check unpacks it to prove that the project's scripts install
# everything a build needs on a machine that has nothing else.
#
#   . deploy/debian-root.sh
#   tarball=$(debian_root_tarball "$cache_dir" "$mirror" "$scratch_dir" [packages])
#
# packages (comma-separated, optional) are installed into the root with
# their dependencies (debootstrap --include), and the root is cached under
# a name of its own: the Kafka broker's image needs Java
# (default-jre-headless, about a minute more).
#
# Needs root and debootstrap (deploy/packages.sh installs it). Progress goes
# to stderr; the tarball's path is the only line on stdout.

debian_root_tarball() {
  local cache=$1 mirror=$2 scratch=$3 packages=${4:-}
  local tarball=$cache/debian-base-bookworm${packages:+-${packages//,/-}}.tar
  local include=()
  [[ -n $packages ]] && include=("--include=$packages")
  if [[ -s $tarball ]]; then
    echo "cached root: $tarball" >&2
    echo "$tarball"
    return 0
  fi
  echo "no $tarball yet: debootstrap --variant=minbase ${include[*]} bookworm (a minute or two)" >&2
  mkdir -p "$cache"
  local rootfs=$scratch/rootfs
  rm -rf "$rootfs"
  if ! debootstrap --variant=minbase "${include[@]}" bookworm "$rootfs" "$mirror" >"$scratch/debootstrap.log" 2>&1; then
    tail -n 30 "$scratch/debootstrap.log" >&2
    echo "error: debootstrap failed" >&2
    return 1
  fi
  # What a runtime image never reads: documentation, manuals, translations,
  # package caches and lists.
  rm -rf "$rootfs"/usr/share/{doc,man,info,locale}/* "$rootfs"/var/cache/apt/* \
    "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log "$rootfs"/var/cache/debconf/*-old
  tar --numeric-owner -C "$rootfs" -cf "$tarball.$$.partial" .
  mv "$tarball.$$.partial" "$tarball"
  rm -rf "$rootfs"
  echo "cached root: $tarball" >&2
  echo "$tarball"
}
