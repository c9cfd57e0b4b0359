#!/usr/bin/env bash
# The first ten minutes, measured: what a new user meets, from a fresh clone, with each figure
# printed beside its goal at the end.
#
#   bash scripts/first-ten-minutes.sh [--suite | --no-tour] [--runs N]
#
# Run it in a fresh clone on a fresh machine, or in a fresh Debian 13 root:
#   sudo bash scripts/debian13-root.sh DIR bash scripts/first-ten-minutes.sh --suite
# It measures, in this order:
#   1. `cargo lab tour`, whole (its apt installs, the build, the boots, every chapter), and
#      how long until the first chapter's header came;
#   2. with --suite: .ci/run's two steps, each timed: `scripts/setup.sh --vm --dev`, then
#      `cargo lab test` (which lists its slowest ten tests at the end);
#   3. for each topology, `LAB_SNAPSHOT=0 cargo lab bench --runs 1` (a cold boot) and
#      `cargo lab bench --runs N` (default 10: restored from the snapshot the tour saved):
#      the lab up, the first command, the first `ibv_devices`, `exec true`;
#   4. the edit-run loop: with the loopback lab up, `cargo lab run 06` once (after the tour,
#      nothing to build), then one line of chapter 06 changed and `cargo lab run 06` again
#      (build included), then the file put back from a copy;
#   5. `cargo lab exec -- true`, median of 10, through cargo's alias and as the binary.
# --no-tour measures steps 3 to 5 only, on a machine where the tour has run (a lab's figures
# without the fresh machine's).
# Its labs use a state dir of its own (LAB_STATE_DIR), stopped and removed at the end: a lab
# you have up is left alone. Logs go to target/first-ten-minutes/. The exit status is the
# first failing step's.
set -euo pipefail
cd "$(dirname "$0")/.."

suite=0; tour=1; runs=10
while [ $# -gt 0 ]; do
  case "$1" in
    --suite) suite=1 ;;
    --no-tour) tour=0 ;;
    --runs) runs=${2:?--runs needs a number}; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "first-ten-minutes.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$suite$tour" != 10 ] || { echo "first-ten-minutes.sh: --suite runs after the tour: drop --no-tour" >&2; exit 2; }
case "$runs" in ''|*[!0-9]*|0) echo "first-ten-minutes.sh: --runs takes a positive number, not '$runs'" >&2; exit 2 ;; esac

logs=target/first-ten-minutes
mkdir -p "$logs"
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
mmss() { awk -v s="$1" 'BEGIN { printf "%d min %02d s", s / 60, s % 60 }'; }
rows=()
row() { rows+=("$1|$2|$3"); }

# The table of what was measured, then the exit status (a failed step still shows the figures
# taken before it).
finish() {
  local os r what got goal
  echo
  os=$(sed -n 's/^PRETTY_NAME="\(.*\)"/\1/p' /etc/os-release 2>/dev/null)
  echo "== the first ten minutes (${os:-?}, kernel $(uname -r), $(nproc) cores, $(git rev-parse --short HEAD))"
  printf '| %s | %s | %s |\n' "what" "measured" "goal"
  printf '|---|---|---|\n'
  for r in "${rows[@]}"; do
    IFS='|' read -r what got goal <<<"$r"
    printf '| %s | %s | %s |\n' "$what" "${got:-?}" "$goal"
  done
  exit "$1"
}

# The labs this script starts live in a state dir of its own: a lab the user already has up is
# neither used nor stopped, and the tour boots as on a fresh machine.
state=$(mktemp -d "${TMPDIR:-/tmp}/rxe-lab-ftm.XXXXXX")
export LAB_STATE_DIR="$state"
lab_down() { cargo lab down >/dev/null 2>&1 || true; rm -rf "$state"; }
# Chapter 06 is edited from a copy and put back from it, so the user's own edits survive.
edited=chapters/06-pingpong/src/main.rs
backup=
restore_edit() { if [ -n "$backup" ]; then cp "$backup" "$edited"; rm -f "$backup"; backup=; fi; }
trap 'restore_edit; lab_down' EXIT

if [ "$tour" = 1 ]; then
  # 1. The tour, its output timestamped as it comes (the first chapter's header: when the
  #    learner first sees the course run).
  echo "== 1. cargo lab tour"
  t0=$(now)
  set +e
  cargo lab tour 2>&1 | while IFS= read -r line; do printf '%s %s\n' "$(now)" "$line"; done \
    | tee "$logs/tour.log" | cut -d' ' -f2-
  tour_rc=${PIPESTATUS[0]}
  set -e
  t1=$(now)
  first=$(awk '/ ── 01 /{ print $1; exit }' "$logs/tour.log")
  row "\`cargo lab tour\`, whole (exit $tour_rc)" "$(mmss "$(secs "$t0" "$t1")")" "<= 5 min"
  row "- the first chapter's header" "${first:+$(mmss "$(secs "$t0" "$first")")}" "<= 3 min"
  [ "$tour_rc" = 0 ] || { echo "first-ten-minutes: the tour failed (exit $tour_rc); see $logs/tour.log" >&2; finish "$tour_rc"; }

  # 2. The suite, as .ci/run runs it.
  if [ "$suite" = 1 ]; then
    echo "== 2. .ci/run: scripts/setup.sh --vm --dev, then cargo lab test"
    t0=$(now); bash scripts/setup.sh --vm --dev >"$logs/setup.log" 2>&1; t1=$(now)
    row "\`scripts/setup.sh --vm --dev\` after the tour" "$(mmss "$(secs "$t0" "$t1")")" ""
    t0=$(now)
    set +e
    cargo lab test 2>&1 | tee "$logs/suite.log"
    suite_rc=${PIPESTATUS[0]}
    set -e
    t1=$(now)
    row "\`cargo lab test\` after the tour (exit $suite_rc)" "$(mmss "$(secs "$t0" "$t1")")" "<= 15 min"
    [ "$suite_rc" = 0 ] || { echo "first-ten-minutes: the suite failed (exit $suite_rc); see $logs/suite.log" >&2; finish "$suite_rc"; }
  fi
fi

# 3. Boots: cold, then restored. bench prints a `median over N: up X s, boot to first command
#    Y s (...), first `ibv_devices` Z s, exec W ms` line.
median_field() { sed -n "s/.*median over .*$1 \([0-9.]*\) \(s\|ms\).*/\1 \2/p" "$2"; }
for topo in loopback pair; do
  echo "== 3. $topo: a cold boot, then $runs restored"
  LAB_SNAPSHOT=0 cargo lab bench --runs 1 -t "$topo" 2>&1 | tee "$logs/cold-$topo.log"
  cargo lab bench --runs "$runs" -t "$topo" 2>&1 | tee "$logs/restore-$topo.log"
  row "$topo: cold boot to the first command" "$(median_field 'boot to first command' "$logs/cold-$topo.log")" ""
  row "$topo: restored, lab up (p50 of $runs)" "$(median_field 'up' "$logs/restore-$topo.log")" "<= 1 s"
  row "$topo: restored, first \`ibv_devices\`" "$(median_field "first \`ibv_devices\`" "$logs/restore-$topo.log")" ""
  row "$topo: \`exec true\` in the harness (p50)" "$(median_field 'exec' "$logs/restore-$topo.log")" ""
done

# 4. The edit-run loop on a lab that is up.
echo "== 4. the edit-run loop: chapter 06"
cargo lab up -t loopback
t0=$(now); cargo lab run 06 >"$logs/run06-first.log" 2>&1; t1=$(now)
row "the first \`cargo lab run 06\` (after the tour: its build is the tour's)" "$(secs "$t0" "$t1") s" ""
backup=$(mktemp)
cp "$edited" "$backup"
sed -i '0,/^\/\/!/s//\/\/! (edited by first-ten-minutes.sh)\n\/\/!/' "$edited"
t0=$(now); cargo lab run 06 >"$logs/run06-edited.log" 2>&1; t1=$(now)
restore_edit
row "edit one line of chapter 06, \`cargo lab run 06\`" "$(secs "$t0" "$t1") s" "<= 10 s"

# 5. exec into the running lab, through cargo's alias and as the binary cargo built.
echo "== 5. cargo lab exec -- true"
p50() {
  local t0 t1 v=()
  for _ in $(seq 10); do
    t0=$(now); "$@" >/dev/null; t1=$(now)
    v+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", (b - a) * 1000 }')")
  done
  printf '%s\n' "${v[@]}" | sort -n | sed -n 6p
}
row "\`cargo lab exec -- true\` (p50 of 10)" "$(p50 cargo lab exec -- true) ms" "<= 100 ms"
row "\`target/debug/cargo-lab exec -- true\` (p50 of 10)" "$(p50 target/debug/cargo-lab exec -- true) ms" "<= 100 ms"
lab_down

finish 0
