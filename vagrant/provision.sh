#!/usr/bin/env bash
# Vagrant provisioning for rxe-lab (run as root by the Vagrantfile, repo synced at $1).
#
#   provision.sh REPO_DIR [RXE_NETDEV_CIDR]
#
# 1. packages: scripts/setup.sh, the same script `cargo lab setup` runs (one source of truth);
#    the running kernel checked for rdma_rxe (the distribution's full kernel installed if not,
#    and provisioning fails asking for `vagrant reload`); the developer tools (setup.sh --dev)
#    linked into /usr/local/bin, the PATH `vagrant ssh -c` sees;
# 2. rustup + cargo for the vagrant user;
# 3. memlock limit for verbs programs;
# 4. rxe at every boot: vagrant/rxe-up.sh as /usr/local/sbin/rxe-lab-up, run by rxe-lab.service
#    (settings in /etc/default/rxe-lab), on the harness's pinned lab network (docs/conventions.md
#    §2) so GIDs match the snapshots:
#    - one VM (no RXE_NETDEV_CIDR): the loopback topology, rxe0 on veth0 (52:54:00:00:00:01,
#      10.99.0.1/24, peer veth1);
#    - two VMs: rxe0 on the netdev holding an address in RXE_NETDEV_CIDR (the private network,
#      whose MAC and address the Vagrantfile pins).
set -euo pipefail

repo=${1:?usage: provision.sh REPO_DIR [RXE_NETDEV_CIDR]}
cidr=${2:-}
user=vagrant

bash "$repo/scripts/setup.sh"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl ca-certificates >/dev/null

# The running kernel must ship rdma_rxe. Cloud-flavoured kernels (Debian's -cloud-amd64, some
# boxes' minimal images) leave it out: install the distribution's full kernel, and say that the
# VM must boot into it.
kernel_has_rxe() { [ -n "$(find "/lib/modules/$1" -name 'rdma_rxe.ko*' -print -quit 2>/dev/null)" ]; }
if ! kernel_has_rxe "$(uname -r)"; then
  # shellcheck source=/dev/null
  . /etc/os-release
  case "${ID:-debian}" in
    ubuntu) full=(linux-image-generic) ;;
    # Debian's full kernel is per architecture: linux-image-amd64, linux-image-arm64.
    *) full=("linux-image-$(dpkg --print-architecture)") ;;
  esac
  echo "provision: kernel $(uname -r) has no rdma_rxe; installing ${full[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${full[@]}" >/dev/null
  newest=$(find /lib/modules -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | while read -r v; do
    if kernel_has_rxe "$v"; then echo "$v"; fi; done | tail -1)
  [ -n "$newest" ] || { echo "provision: no installed kernel ships rdma_rxe even after installing ${full[*]}" >&2; exit 1; }
  reboot_needed=$newest
fi

# Rust for the vagrant user (the workspace needs a stable toolchain >= 1.85).
home=$(getent passwd "$user" | cut -d: -f6)
if [ ! -x "$home/.cargo/bin/rustup" ]; then
  sudo -u "$user" -H bash -c \
    "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy"
fi
# `vagrant ssh -c CMD` runs a non-interactive shell, which reads neither ~/.profile nor the end of
# Debian's ~/.bashrc: put the toolchain's proxies on the default PATH.
for tool in cargo rustc rustup rustfmt cargo-fmt cargo-clippy clippy-driver rustdoc; do
  if [ -e "$home/.cargo/bin/$tool" ]; then ln -sf "$home/.cargo/bin/$tool" "/usr/local/bin/$tool"; fi
done

# The repository checks `cargo lab test` runs (actionlint, shellcheck, vagrant), as the vagrant
# user: actionlint goes into its ~/.cache/rxe-lab/venv and is linked into /usr/local/bin, on the
# PATH of `vagrant ssh -c` (a non-interactive shell that reads no profile).
sudo -u "$user" -H env PATH="/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin" \
  bash "$repo/scripts/setup.sh" --dev

# Verbs programs pin their buffers (ibv_reg_mr): lift the memlock limit for everyone.
cat >/etc/security/limits.d/90-rxe-lab.conf <<'LIMITS'
*    soft memlock unlimited
*    hard memlock unlimited
LIMITS

if [ -n "$cidr" ]; then
  # Read whole, then searched: awk's early exit could fail the pipeline with SIGPIPE under
  # pipefail (rxe-up.sh says more).
  addrs=$(ip -o -4 addr show to "$cidr")
  netdev=$(awk '{print $2; exit}' <<<"$addrs")
  [ -n "$netdev" ] || { echo "provision: no netdev has an address in $cidr" >&2; exit 1; }
  printf 'RXE_NETDEV=%s\nRXE_NAME=rxe0\n' "$netdev" >/etc/default/rxe-lab
else
  printf '%s\n' RXE_NETDEV=veth0 RXE_NAME=rxe0 RXE_VETH_PEER=veth1 \
    RXE_MAC=52:54:00:00:00:01 RXE_ADDR=10.99.0.1/24 >/etc/default/rxe-lab
fi
install -m 0755 "$repo/vagrant/rxe-up.sh" /usr/local/sbin/rxe-lab-up
install -m 0644 "$repo/vagrant/rxe-lab.service" /etc/systemd/system/rxe-lab.service
systemctl daemon-reload
systemctl enable rxe-lab.service
if [ -z "${reboot_needed:-}" ]; then
  systemctl restart rxe-lab.service
  rdma link show
else
  echo "provision: installed kernel $reboot_needed (with rdma_rxe); the VM runs $(uname -r): reboot into it with \`vagrant reload\` (rxe-lab.service then creates rxe0 at boot)" >&2
  exit 1
fi
