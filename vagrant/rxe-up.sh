#!/usr/bin/env bash
# rxe-up.sh: load rdma_rxe and create a SoftRoCE (rxe) link on a netdev. Idempotent.
#
#   rxe-up.sh [NETDEV [NAME]]
#
# NETDEV  the Ethernet device to put rxe on (default: $RXE_NETDEV, else the default-route netdev)
# NAME    the rxe device's name (default: $RXE_NAME, else rxe0)
#
# Optional, from the environment, to reproduce the harness's pinned lab network
# (docs/conventions.md §2: MACs and IPs pinned so GIDs and GUIDs match the snapshots):
#   RXE_VETH_PEER=veth1   create NETDEV as a veth pair with this peer if NETDEV does not exist
#   RXE_MAC=52:54:00:00:00:01   give NETDEV this MAC (before rxe is bound to it)
#   RXE_ADDR=10.99.0.1/24       give NETDEV this address
#   RXE_WAIT=30           seconds to wait for NETDEV to appear (boot)
# e.g. the loopback topology: RXE_VETH_PEER=veth1 RXE_MAC=52:54:00:00:00:01 RXE_ADDR=10.99.0.1/24
#      rxe-up.sh veth0 rxe0
#
# Run at every boot by rxe-lab.service (the Vagrant VMs install it as /usr/local/sbin/rxe-lab-up,
# with the variables above in /etc/default/rxe-lab). Safe to run again: an existing NAME on
# NETDEV, or any rxe device already bound to NETDEV, counts as done. Needs root (or CAP_NET_ADMIN
# and, when rdma_rxe is not loaded yet, CAP_SYS_MODULE).
set -euo pipefail

die() { echo "rxe-up: $*" >&2; exit 1; }

netdev=${1:-${RXE_NETDEV:-}}
name=${2:-${RXE_NAME:-rxe0}}

command -v rdma >/dev/null 2>&1 || die "the 'rdma' tool is missing (Debian/Ubuntu: apt-get install iproute2)"

if [ -z "$netdev" ]; then
  # Each listing is read whole before it is searched: under pipefail, a reader that stops
  # early (grep -q, awk's exit) can fail the pipeline with SIGPIPE when ip writes more lines
  # after it (an up netdev's inet6 line: 42-52 failures in 200 tries, iproute2 6.1 and 6.15).
  routes=$(ip -o route show default)
  netdev=$(awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}' <<<"$routes")
  [ -n "$netdev" ] || die "no NETDEV given and no default route to take one from"
fi

peer=${RXE_VETH_PEER:-}
mac=${RXE_MAC:-}
addr=${RXE_ADDR:-}

have_netdev() { ip link show dev "$netdev" >/dev/null 2>&1; }

if [ -n "$peer" ]; then
  have_netdev || ip link add "$netdev" type veth peer name "$peer"
  ip link set dev "$peer" up
fi

# At boot the netdev may appear a little after network-online: wait for it.
for _ in $(seq 1 "${RXE_WAIT:-30}"); do
  have_netdev && break
  sleep 1
done
have_netdev || die "netdev '$netdev' does not exist (ip -br link lists the netdevs)"

link=$(ip -o link show dev "$netdev")
cur_mac=$(awk '{for (i = 1; i < NF; i++) if ($i == "link/ether") { print $(i + 1); exit }}' <<<"$link")
if [ -n "$mac" ] && [ "$cur_mac" != "${mac,,}" ]; then
  ip link set dev "$netdev" down
  ip link set dev "$netdev" address "$mac"
fi
addrs=$(ip -o addr show dev "$netdev")
if [ -n "$addr" ] && ! grep -qF " $addr " <<<"$addrs"; then
  ip addr add "$addr" dev "$netdev"
fi

if [ ! -d /sys/module/rdma_rxe ]; then
  modprobe rdma_rxe || die "cannot load rdma_rxe: this kernel lacks it (Debian: linux-image-amd64; Ubuntu: linux-modules-extra-\$(uname -r))"
fi

# rxe reports its port ACTIVE only while the netdev is up.
ip link set dev "$netdev" up

# `rdma link show` lines look like: link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0
links=$(rdma link show)
existing_on_netdev=$(awk -v nd="$netdev" '{for (i = 1; i < NF; i++) if ($i == "netdev" && $(i + 1) == nd) { split($2, p, "/"); print p[1]; exit }}' <<<"$links")
existing_name_netdev=$(awk -v n="$name" '{split($2, p, "/"); if (p[1] == n) { for (i = 1; i < NF; i++) if ($i == "netdev") { print $(i + 1); exit } }}' <<<"$links")

if [ -n "$existing_name_netdev" ] && [ "$existing_name_netdev" != "$netdev" ]; then
  die "$name already exists on $existing_name_netdev, not on $netdev (remove it: rdma link delete $name)"
elif [ -n "$existing_on_netdev" ]; then
  echo "rxe-up: $existing_on_netdev already on $netdev"
  name=$existing_on_netdev
else
  rdma link add "$name" type rxe netdev "$netdev"
  echo "rxe-up: created $name on $netdev"
fi
rdma link show "$name/1"
