#!/bin/sh
# Chapter 06's benchmark: ibv_rc_pingpong's pair vs ch06-pingpong's pair, alternating, with the
# same flags in the same lab. Prints the client's usec/iter of each run. Run it in the lab:
#
#   cargo lab build
#   cargo lab exec -- env ROUNDS=8 sh chapters/06-pingpong/bench.sh
#
# Busy polling, loopback, 1000 round trips of 4096 bytes (FLAGS), on a port of its own. The
# client starts once the server listens: the C server prints its address before listening,
# and waits forever in accept() if its client came too early and gave up.
set -u
here=$(cd "$(dirname "$0")" && pwd)
RUST=${CH06:-$here/../../target/debug/ch06-pingpong}
ROUNDS=${ROUNDS:-8}
FLAGS=${FLAGS:--g 1 -n 1000 -s 4096 -p 18600}

listening() { # port 18600 = 0x48A8 in state 0A (LISTEN)
  grep -q ':48A8 00000000:0000 0A' /proc/net/tcp
}

one() { # $1 = server program, $2 = client program; prints the client's usec/iter
  # shellcheck disable=SC2086 # FLAGS is a list of words
  "$1" $FLAGS >/tmp/bench-server.out 2>&1 &
  n=0
  until listening || [ "$n" -gt 300 ]; do sleep 0.1; n=$((n + 1)); done
  # shellcheck disable=SC2086
  timeout 120 "$2" $FLAGS 127.0.0.1 >/tmp/bench-client.out 2>&1
  wait
  sed -n 's/.* = \([0-9.]*\) usec\/iter/\1/p' /tmp/bench-client.out
}

i=0
while [ "$i" -lt "$ROUNDS" ]; do
  echo "ibv_rc_pingpong $(one ibv_rc_pingpong ibv_rc_pingpong) ch06-pingpong $(one "$RUST" "$RUST")"
  i=$((i + 1))
done
