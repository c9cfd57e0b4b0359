#!/usr/bin/env bash
# A fresh Debian 13 (trixie) root, and the README's commands run inside it.
#
#   sudo bash scripts/debian13-root.sh DIR [COMMAND...]
#
# Makes DIR with debootstrap (once, with gcc: rustup's own prerequisite; an existing DIR/etc/debian_version is reused), copies the
# host's CA bundle in (cargo fetches crates.io over TLS), bind-mounts /proc, /sys, /dev and
# the host's Rust toolchain (~/.rustup, ~/.cargo) and a clean clone of this repository at
# DIR/src/rxe-lab (the commit checked out here), then runs COMMAND in the clone as root.
# Without COMMAND it runs the README's two commands: `cargo lab tour`, then `cargo lab test`.
# The mounts are undone on every exit. Debian 13 brings rdma-core 56, libclang 19,
# Python 3.13 and QEMU 10; setup.sh installs them inside the root, never on the host.
#
# Examples:
#   sudo bash scripts/debian13-root.sh /var/tmp/trixie                   # tour, then test
#   sudo bash scripts/debian13-root.sh /var/tmp/trixie cargo lab doctor
set -euo pipefail

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,17p' "$0"; exit 2
fi
dir=$(realpath -m "$1"); shift
[ "$(id -u)" = 0 ] || { echo "debian13-root.sh: debootstrap and chroot need root: sudo bash $0 $dir $*" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "debian13-root.sh: needs debootstrap: apt-get install -y debootstrap" >&2; exit 1; }
repo=$(cd "$(dirname "$0")/.." && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
rustup_dir=${RUSTUP_HOME:-$HOME/.rustup}
cargo_dir=${CARGO_HOME:-$HOME/.cargo}
[ -x "$cargo_dir/bin/cargo" ] || { echo "debian13-root.sh: no Rust toolchain at $cargo_dir (rustup)" >&2; exit 1; }

if [ ! -e "$dir/etc/debian_version" ]; then
  echo "debian13-root: debootstrap trixie $dir ($mirror)"
  debootstrap --variant=minbase --include=ca-certificates,git,sudo,apt-utils,gcc,libc6-dev \
    trixie "$dir" "$mirror"
fi
cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true

mounted=()
# shellcheck disable=SC2317 # called by the EXIT trap
undo() {
  local i
  for ((i=${#mounted[@]}-1; i>=0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap undo EXIT
bind() { mkdir -p "$dir$2"; mount --bind "$1" "$dir$2"; mounted+=("$dir$2"); }
bind /proc /proc
bind /sys /sys
bind /dev /dev
# A bind of /dev leaves out its own mounts: /dev/pts is one (a PTY for `script`, which the
# exercise watch test runs).
bind /dev/pts /dev/pts
bind "$rustup_dir" /root/.rustup
bind "$cargo_dir" /root/.cargo

# What a machine with rustup has: a C linker (rustup's own prerequisite).
if [ ! -x "$dir/usr/bin/cc" ]; then
  chroot "$dir" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev
fi

# A clean clone of the commit checked out here: the root sees what a new user's checkout has.
rm -rf "$dir/src/rxe-lab"
mkdir -p "$dir/src"
git clone -q "$repo" "$dir/src/rxe-lab"
git -C "$dir/src/rxe-lab" checkout -q "$(git -C "$repo" rev-parse HEAD)"
# Debian 13's default: home directories are 0700 (chapter 08's memlock case meets this).
chmod 0700 "$dir/root"

if [ $# -eq 0 ]; then
  set -- sh -c 'cargo lab tour && cargo lab test'
fi
echo "debian13-root: running in $dir/src/rxe-lab: $*"
start=$(date +%s)
set +e
# PATH as a root login has it on Debian (/usr/local/bin too: setup.sh links actionlint there).
chroot "$dir" /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  TERM=dumb CARGO_TERM_COLOR=never LANG=C.UTF-8 \
  sh -c 'cd /src/rxe-lab && exec "$@"' sh "$@"
rc=$?
set -e
echo "debian13-root: exit $rc after $(( $(date +%s) - start )) s"
exit "$rc"
