#!/usr/bin/env bash
# Build rdma_rxe out of tree for the running kernel, install it and load it.
#
#   .github/scripts/build-rxe-module.sh [WORKDIR]
#
# For GitHub's hosted Ubuntu runners: their kernels (the Azure flavour) build ib_core, ib_uverbs
# and the UDP tunnel helpers but not rdma_rxe. Only drivers/infiniband/sw/rxe is fetched, at the
# kernel's version, and built with Kbuild against /lib/modules/$(uname -r)/build. The rxe link
# itself is then created by vagrant/rxe-up.sh, the same bring-up the Vagrant VMs run at boot.
#
# Where the source comes from (RXE_SRC=ubuntu|stable; default: ubuntu when dpkg knows the
# running kernel's linux-modules package, then stable if that fails; stable alone elsewhere):
#  ubuntu  The running kernel's own source package (the source of linux-modules-$(uname -r)),
#          with deb-src enabled on the fly: the exact tree the kernel was built from (Ubuntu's
#          patches included), but a ~250 MB download and a full unpack, of which only
#          drivers/infiniband/sw/rxe is built. The archive keeps only current versions: an
#          older runner image's kernel may be gone (then: stable).
#  stable  Ubuntu's /proc/version_signature ends with the upstream stable release the kernel is
#          built from ("Ubuntu 6.8.0-1017.20-azure 6.8.12"). A blobless, depth-1, sparse clone of
#          that tag from the stable tree fetches the tree objects and the ~40 files of rxe:
#          seconds, no deb-src, and tags never leave. Ubuntu's own patches do not touch rxe, and
#          the rdma headers it compiles against are the running kernel's (linux-headers-*).
#
# The module is installed as /lib/modules/$(uname -r)/updates/rxe-lab/rdma_rxe.ko, `depmod`
# indexes it, and `modprobe rdma_rxe rdma_ucm` loads it with its dependencies.
#
# Also: RXE_SRC=<dir> builds that rxe source directory (no fetch); KVER=<release> builds for
# another installed kernel than the running one; RXE_NO_LOAD=1 builds without installing.
#
# Loading an unsigned module needs a kernel without lockdown/enforced module signatures (true
# of the hosted runners so far); if modprobe says "Key was rejected by service", it is not.
set -euo pipefail

work=${1:-$(mktemp -d /tmp/rxe-src.XXXXXX)}
mkdir -p "$work"
kver=${KVER:-$(uname -r)}
kbuild=/lib/modules/$kver/build
sudo_cmd=()
[ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
log() { echo "build-rxe-module: $*"; }

if [ ! -d "${RXE_SRC:-}" ] && [ -n "$(find "/lib/modules/$kver" -name 'rdma_rxe.ko*' -print -quit 2>/dev/null)" ]; then
  log "this kernel ships rdma_rxe: nothing to build"
  "${sudo_cmd[@]}" modprobe rdma_rxe
  exit 0
fi

# Build tools and the headers of the running kernel.
need=(make git gcc)
[ -d "$kbuild" ] || need+=("linux-headers-$kver")
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
# Build with the compiler the kernel was built with ("x86_64-linux-gnu-gcc-13" on Ubuntu,
# "gcc-12" on Debian): another version may reject the kernel's flags.
kcc=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\{0,1\}\([^ ]*\) .*/\1/p' "$kbuild/include/config/auto.conf" 2>/dev/null || true)
[[ $kcc =~ ^([a-z0-9_]+-linux-gnu-)?gcc-[0-9]+$ ]] || kcc=$(grep -oE '([a-z0-9_]+-linux-gnu-)?gcc-[0-9]+' /proc/version | head -1 || true)
if [ -n "$kcc" ] && ! command -v "$kcc" >/dev/null 2>&1; then
  pkg=gcc-${kcc##*gcc-}
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "$pkg" >/dev/null || log "no $pkg; building with gcc"
fi
make_cc=()
if [ -n "$kcc" ] && command -v "$kcc" >/dev/null 2>&1; then make_cc=("CC=$kcc"); fi
log "kernel $kver, headers $kbuild, compiler ${kcc:-gcc}"

# Functions below end each step with `|| return 1`: `set -e` is off inside a function that runs
# as part of an && / || list.
fetch_stable() {
  local upstream tag
  upstream=
  [ -r /proc/version_signature ] && upstream=$(awk '{print $NF}' /proc/version_signature)
  [[ $upstream =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] || upstream=${kver%%-*}
  if [[ $upstream =~ ^([0-9]+\.[0-9]+)\.0$ ]]; then tag=v${BASH_REMATCH[1]}; else tag=v$upstream; fi
  # The stable tree, then its GitHub mirror. A server without partial clone support makes git
  # warn and fetch the whole depth-1 tree instead (slower, same result).
  local url
  for url in https://git.kernel.org/pub/scm/linux/kernel/git/stable/linux.git \
             https://github.com/gregkh/linux.git; do
    log "fetching drivers/infiniband/sw/rxe at $tag from $url"
    rm -rf "$work/stable"
    if git -c advice.detachedHead=false clone --quiet --depth 1 --filter=blob:none --sparse \
         --branch "$tag" "$url" "$work/stable" \
       && git -C "$work/stable" sparse-checkout set drivers/infiniband/sw/rxe \
       && [ -f "$work/stable/drivers/infiniband/sw/rxe/Makefile" ]; then
      rxe_src=$work/stable/drivers/infiniband/sw/rxe
      return 0
    fi
  done
  return 1
}

fetch_ubuntu() {
  local src
  src=$(dpkg-query -W -f='${source:Package}=${source:Version}' "linux-modules-$kver") || return 1
  log "fetching $src (Ubuntu source package)"
  if [ -f /etc/apt/sources.list.d/ubuntu.sources ]; then
    "${sudo_cmd[@]}" sed -i 's/^Types: deb$/Types: deb deb-src/' /etc/apt/sources.list.d/ubuntu.sources
  else
    "${sudo_cmd[@]}" sed -i 's/^# *deb-src /deb-src /' /etc/apt/sources.list
  fi
  "${sudo_cmd[@]}" apt-get update -qq || return 1
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq dpkg-dev >/dev/null || return 1
  rm -rf "$work/ubuntu" && mkdir -p "$work/ubuntu" || return 1
  (cd "$work/ubuntu" && apt-get source -qq "$src" >/dev/null) || return 1
  rxe_src=$(find "$work/ubuntu" -maxdepth 5 -type d -path '*/drivers/infiniband/sw/rxe' -print -quit)
  [ -n "$rxe_src" ] || { echo "build-rxe-module: no drivers/infiniband/sw/rxe in $src" >&2; return 1; }
}

build() {
  log "building $rxe_src against $kbuild"
  make -C "$kbuild" M="$rxe_src" CONFIG_RDMA_RXE=m "${make_cc[@]}" -j"$(nproc)" modules || return 1
  [ -f "$rxe_src/rdma_rxe.ko" ]
}

case "${RXE_SRC:-auto}" in
  /*) rxe_src=$RXE_SRC && build ;;
  stable) fetch_stable && build ;;
  ubuntu) fetch_ubuntu && build ;;
  auto)
    if dpkg-query -W "linux-modules-$kver" >/dev/null 2>&1; then
      { fetch_ubuntu && build; } || { log "Ubuntu's source package failed; trying the upstream stable source"; fetch_stable && build; }
    else
      fetch_stable && build
    fi ;;
  *) echo "build-rxe-module: RXE_SRC must be stable, ubuntu or an absolute directory" >&2; exit 2 ;;
esac
log "built $rxe_src/rdma_rxe.ko ($(modinfo -F vermagic "$rxe_src/rdma_rxe.ko"))"
[ "${RXE_NO_LOAD:-0}" = 1 ] && exit 0

# Installed where modprobe finds it (updates/ wins over the kernel's own tree), indexed, loaded
# with its dependencies. Loading an unsigned module needs a kernel without enforced signatures.
dest=/lib/modules/$kver/updates/rxe-lab
"${sudo_cmd[@]}" install -D -m 0644 "$rxe_src/rdma_rxe.ko" "$dest/rdma_rxe.ko"
"${sudo_cmd[@]}" depmod -a "$kver"
if [ "$kver" != "$(uname -r)" ]; then log "installed in $dest (not the running kernel: not loaded)"; exit 0; fi
if ! "${sudo_cmd[@]}" modprobe rdma_rxe; then
  "${sudo_cmd[@]}" dmesg | tail -20 >&2
  exit 1
fi
"${sudo_cmd[@]}" modprobe rdma_ucm || log "modprobe rdma_ucm failed (built in, or missing)"
log "rdma_rxe loaded ($(modinfo -F filename rdma_rxe))"
