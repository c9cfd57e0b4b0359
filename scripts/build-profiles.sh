#!/usr/bin/env bash
# The build profile's choices, measured: clean builds of what a fresh clone builds first (the
# harness, which the `cargo lab` alias builds, then the tour's chapters), once per profile
# variant, each in a target dir of its own (removed after).
#
#   bash scripts/build-profiles.sh [VARIANT...]
#
# Variants (default: all, in this order):
#   before      dependencies at opt-level 2 with full debuginfo (the profile until 2026-12)
#   deps-opt0   only the dependencies' opt-level at 0
#   nodebug     only the debuginfo: line tables for ours, none for the dependencies
#   cgu16       `before` with 16 codegen units instead of 256
#   all-opt0    deps-opt0 and nodebug together, every dependency at 0
#   workspace   the workspace's profile as committed (Cargo.toml): all-opt0 but the
#               decompressors and rdma-sys at 2
# Crates come from cargo's cache (`cargo fetch` first): downloads are not measured. Run it on a
# quiet machine: each variant takes one to five minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=()
for c in chapters/[0-9]*/Cargo.toml; do
  pkgs+=(--package "$(sed -n 's/^name = "\(.*\)"/\1/p' "$c" | head -1)")
done
# The profile of the workspace until 2026-12, spelled as overrides of the committed one.
before=(--config 'profile.dev.debug=true' --config 'profile.dev.package."*".opt-level=2'
        --config 'profile.dev.package."*".debug=true')
variant_args() {
  case "$1" in
    before) printf '%s\n' "${before[@]}" ;;
    deps-opt0) printf '%s\n' --config 'profile.dev.debug=true' --config 'profile.dev.package."*".debug=true' \
                 --config 'profile.dev.package."*".opt-level=0' --config 'profile.dev.package.lzma-rs.opt-level=0' \
                 --config 'profile.dev.package.ruzstd.opt-level=0' --config 'profile.dev.package.miniz_oxide.opt-level=0' \
                 --config 'profile.dev.package.rdma-sys.opt-level=0' ;;
    nodebug) printf '%s\n' --config 'profile.dev.package."*".opt-level=2' ;;
    cgu16) printf '%s\n' "${before[@]}" --config 'profile.dev.codegen-units=16' \
             --config 'profile.dev.package."*".codegen-units=16' ;;
    all-opt0) printf '%s\n' --config 'profile.dev.package.lzma-rs.opt-level=0' \
                --config 'profile.dev.package.ruzstd.opt-level=0' --config 'profile.dev.package.miniz_oxide.opt-level=0' \
                --config 'profile.dev.package.rdma-sys.opt-level=0' ;;
    workspace) ;;
    *) echo "build-profiles.sh: unknown variant '$1' (try --help)" >&2; exit 2 ;;
  esac
}
case "${1:-}" in -h|--help) sed -n '2,20p' "$0"; exit 0 ;; esac
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(before deps-opt0 nodebug cgu16 all-opt0 workspace)
for v in "${variants[@]}"; do variant_args "$v" >/dev/null; done

cargo fetch --quiet
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rxe-lab-profiles.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
printf '%-10s %9s %9s %9s %10s\n' variant harness chapters total target
for v in "${variants[@]}"; do
  mapfile -t args < <(variant_args "$v")
  t="$tmp/$v"
  t0=$(now)
  CARGO_TARGET_DIR=$t cargo build --quiet --package harness --bin cargo-lab "${args[@]}"
  t1=$(now)
  CARGO_TARGET_DIR=$t cargo build --quiet "${pkgs[@]}" "${args[@]}"
  t2=$(now)
  awk -v v="$v" -v a="$t0" -v b="$t1" -v c="$t2" -v m="$(du -sm "$t" | cut -f1)" \
    'BEGIN { printf "%-10s %8.1fs %8.1fs %8.1fs %6d MiB\n", v, b - a, c - b, c - a, m }'
  rm -rf "$t"
done
