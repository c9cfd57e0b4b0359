//! The lab VM's initramfs, built in Rust (cpio "newc") and cached per kernel and agent.
//!
//! Contents: a static busybox (for the init script), the kernel modules in load order
//! (decompressed), the init script, the agent and the kernel's build configuration when one is
//! found beside it (programs in the guest read it at `/run/lab-kernel-config`: the host's
//! `/boot/config-<release>` exists only for the host's own kernels). Init mounts the host's root
//! read-only over 9p with a tmpfs overlay on top (or another userspace root inside it, with the
//! host's own directories on top: see `userspace.rs`), chroots into it and execs the agent.

use crate::kernel::{self, Kernel};
use anyhow::{Context as _, Result, bail};
use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};

/// The init script (busybox sh). `/mods/order` lists the modules in load order.
pub const INIT: &str = r#"#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sys /sys
$bb mount -t devtmpfs dev /dev
fail() { echo "lab-init: $*"; $bb poweroff -f; }
for m in $($bb cat /mods/order); do $bb insmod /mods/$m || echo "lab-init: insmod $m failed"; done
# LAB_GATE: the host saves (or has restored) the VM here, before the 9p mount that would block
# it (harness/src/snapshot.rs); its go-ahead carries its time and random bytes.
# The lab's network and rxe0 (docs/conventions.md §2) are set up here too, so that the saved
# state has them: busybox's ip and the host's rdma (in /rdma); busybox names a veth's peer
# itself. The agent finds rxe0 and only waits for its GID; on a failure here it sets it up.
# up GID: rxe0's port ACTIVE with the RoCE v2 GID of our address, within 10 s.
up() {
  g=/sys/class/infiniband/rxe0/ports/1; i=0
  while [ $i -lt 1000 ]; do
    $bb grep -q ACTIVE $g/state 2>/dev/null && $bb grep -qx 0000:0000:0000:0000:0000:ffff:$1 $g/gids/* 2>/dev/null && return 0
    $bb usleep 10000; i=$((i+1))
  done
  return 1
}
# A pair node: its NIC (found by its MAC), its address, rxe0 on the NIC.
pairnet() {
  case "$LAB_NODE" in
    a) mac=52:54:00:00:00:0a; ip=10.77.0.1; gid=0a4d:0001;;
    b) mac=52:54:00:00:00:0b; ip=10.77.0.2; gid=0a4d:0002;;
    *) return 1;;
  esac
  dev=
  for n in /sys/class/net/*; do [ "$($bb cat $n/address 2>/dev/null)" = $mac ] && dev=${n##*/}; done
  [ -n "$dev" ] || return 1
  # On a failure before rxe0 exists, the address goes too: the agent then starts from scratch.
  { $bb ip link set lo up && $bb ip addr add $ip/24 dev $dev && $bb ip link set $dev up &&
    /rdma/ld.so --library-path /rdma /rdma/rdma link add rxe0 type rxe netdev $dev; } ||
    { $bb ip addr flush dev $dev; return 1; }
  up $gid
}
# The loopback VM: a veth pair, rxe0 on veth0.
net() {
  $bb ip link set lo up && $bb ip link add labtmp0 type veth || return 1
  pi=$($bb cat /sys/class/net/labtmp0/iflink); peer=
  for n in /sys/class/net/*; do [ "$($bb cat $n/ifindex)" = "$pi" ] && peer=${n##*/}; done
  [ -n "$peer" ] || return 1
  [ "$peer" = veth1 ] || $bb ip link set $peer name veth1 || return 1
  $bb ip link set labtmp0 name veth0 && $bb ip link set veth0 address 52:54:00:00:00:01 || return 1
  $bb ip addr add 10.99.0.1/24 dev veth0 && $bb ip link set veth0 up && $bb ip link set veth1 up || return 1
  /rdma/ld.so --library-path /rdma /rdma/rdma link add rxe0 type rxe netdev veth0 || return 1
  up 0a63:0001
}
# What needs no host share is done before the gate, so that a restored VM has it already (each
# busybox step after the go-ahead costs a restore tens of ms under TCG): the tmpfs for the
# overlay's upper layer, /run's tmpfs with the agent, busybox and the kernel config in it
# (moved under the new root later), and /dev's shm and pts (they move with /dev).
$bb mount -t tmpfs -o mode=0755 tmpfs /rw || fail "tmpfs"
$bb mkdir -p /rw/up /rw/work /rw/run
$bb mount -t tmpfs tmpfs /rw/run || fail "tmpfs for /run"
$bb cp /lab-agent $bb /rw/run/ || fail "copying the agent"
[ -f /kernel-config ] && $bb cp /kernel-config /rw/run/lab-kernel-config
$bb mkdir -p /dev/shm /dev/pts
$bb mount -t tmpfs tmpfs /dev/shm
$bb mount -t devpts devpts /dev/pts
if [ -n "$LAB_GATE" ]; then
  if [ -x /rdma/ld.so ]; then
    if [ -z "$LAB_NODE" ]; then net; else pairnet; fi || echo "lab-init: the network before the gate failed"
  fi
  gp=; i=0
  while [ -z "$gp" ] && [ $i -lt 500 ]; do
    for p in /sys/class/virtio-ports/*; do [ "$($bb cat $p/name 2>/dev/null)" = lab.gate ] && [ -e /dev/${p##*/} ] && gp=/dev/${p##*/}; done
    [ -z "$gp" ] && $bb usleep 10000; i=$((i+1))
  done
  echo "lab-init: at the gate"
  i=0
  while [ -n "$gp" ] && [ $i -lt 3000 ]; do
    set -- $($bb head -c 160 $gp 2>/dev/null)
    [ "$1" = go ] && break
    $bb usleep 10000; i=$((i+1))
  done
  if [ "$1" = go ]; then $bb date -s @$2 >/dev/null; echo "$3" > /dev/urandom; else echo "lab-init: no go-ahead from the host; going on"; fi
fi
$bb mount -t 9p -o trans=virtio,version=9p2000.L,ro,${LAB_9P:-msize=262144} hostroot /host || fail "mounting the host's root over 9p failed"
# LAB_ROOT: another userspace root inside the host's share (`--userspace`) is the lower layer.
lower=/host$LAB_ROOT
[ -d "$lower/usr" ] || fail "the userspace root $LAB_ROOT has no usr/"
$bb mount -t overlay overlay -o lowerdir=$lower,upperdir=/rw/up,workdir=/rw/work /newroot || fail "overlay mount failed"
# With another root, the host's own directories (LAB_HOSTDIRS, colon-separated: /root, /tmp,
# the workspace ...) each get an overlay of their own, as writable as the host's root is.
i=0
for d in $(echo "$LAB_HOSTDIRS" | $bb tr : ' '); do
  i=$((i+1))
  $bb mkdir -p /rw/h$i/up /rw/h$i/work /newroot$d
  $bb mount -t overlay overlay -o lowerdir=/host$d,upperdir=/rw/h$i/up,workdir=/rw/h$i/work /newroot$d || echo "lab-init: the host's $d failed"
done
$bb mount --move /proc /newroot/proc
$bb mount --move /sys /newroot/sys
$bb mount --move /dev /newroot/dev
$bb mount --move /rw/run /newroot/run
if [ -n "$LAB_MODDIR" ]; then
  v=$($bb uname -r)
  $bb mkdir -p /newroot/lib/modules/$v && $bb mount --bind /host$LAB_MODDIR /newroot/lib/modules/$v || echo "lab-init: binding the module tree $LAB_MODDIR failed"
fi
exec $bb chroot /newroot /run/lab-agent --guest
"#;

/// One file in the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Dir(String),
    File {
        path: String,
        mode: u32,
        data: Vec<u8>,
    },
    Symlink {
        path: String,
        target: String,
    },
}

/// Writes a cpio "newc" archive.
pub fn write_cpio(entries: &[Entry]) -> Result<Vec<u8>> {
    let mut out: Vec<u8> = vec![];
    for (i, e) in entries.iter().enumerate() {
        let ino = i as u32 + 1;
        let (path, mode, data): (&str, u32, &[u8]) = match e {
            Entry::Dir(p) => (p, 0o040755, &[]),
            Entry::File { path, mode, data } => (path, 0o100000 | (mode & 0o7777), data),
            Entry::Symlink { path, target } => (path, 0o120777, target.as_bytes()),
        };
        let b = cpio::newc::Builder::new(path)
            .ino(ino)
            .mode(mode)
            .nlink(if matches!(e, Entry::Dir(_)) { 2 } else { 1 });
        let mut w = b.write(&mut out, data.len() as u32);
        w.write_all(data)?;
        w.finish()?;
    }
    cpio::newc::trailer(&mut out)?;
    Ok(out)
}

/// Reads a cpio "newc" archive back (for tests and `doctor`).
pub fn read_cpio(mut data: &[u8]) -> Result<Vec<Entry>> {
    let mut out = vec![];
    loop {
        let mut r = cpio::NewcReader::new(data)?;
        if r.entry().is_trailer() {
            break;
        }
        let name = r.entry().name().to_string();
        let mode = r.entry().mode();
        let mut body = vec![];
        r.read_to_end(&mut body)?;
        out.push(match mode & 0o170000 {
            0o040000 => Entry::Dir(name),
            0o120000 => Entry::Symlink {
                path: name,
                target: String::from_utf8(body)?,
            },
            _ => Entry::File {
                path: name,
                mode: mode & 0o7777,
                data: body,
            },
        });
        data = r.finish()?;
    }
    Ok(out)
}

/// A static busybox on this host (`busybox-static` on Debian/Ubuntu).
pub fn find_busybox() -> Result<PathBuf> {
    for p in [
        "/bin/busybox",
        "/usr/bin/busybox",
        "/usr/lib/initramfs-tools/bin/busybox",
    ] {
        let p = Path::new(p);
        if let Ok(data) = std::fs::read(p) {
            // A dynamic ELF names its interpreter (ld-linux) near its start.
            let head = &data[..data.len().min(8192)];
            if !head.windows(8).any(|w| w == b"ld-linux") {
                return Ok(p.to_path_buf());
            }
        }
    }
    bail!("no static busybox found; fix: run `cargo lab setup` (installs busybox-static)")
}

/// The archive's entries for a kernel: busybox, modules in order, init, agent.
pub fn entries(
    kernel: &Kernel,
    wanted: &[&str],
    busybox: &[u8],
    agent: &[u8],
) -> Result<Vec<Entry>> {
    let deps = kernel::ModuleDeps::load(&kernel.modules)?;
    let order = deps.load_order(wanted)?;
    let mut e = vec![];
    for d in ["bin", "dev", "proc", "sys", "host", "newroot", "rw", "mods"] {
        e.push(Entry::Dir(d.into()));
    }
    e.push(Entry::File {
        path: "bin/busybox".into(),
        mode: 0o755,
        data: busybox.to_vec(),
    });
    e.push(Entry::Symlink {
        path: "bin/sh".into(),
        target: "busybox".into(),
    });
    let mut names = String::new();
    for rel in &order {
        let data = kernel::strip_signature(kernel::read_module(&kernel.modules.join(rel))?);
        let name = kernel::plain_name(rel);
        names.push_str(&name);
        names.push('\n');
        e.push(Entry::File {
            path: format!("mods/{name}"),
            mode: 0o644,
            data,
        });
    }
    e.push(Entry::File {
        path: "mods/order".into(),
        mode: 0o644,
        data: names.into_bytes(),
    });
    e.push(Entry::File {
        path: "init".into(),
        mode: 0o755,
        data: INIT.as_bytes().to_vec(),
    });
    e.push(Entry::File {
        path: "lab-agent".into(),
        mode: 0o755,
        data: agent.to_vec(),
    });
    // The host's rdma, for init to add rxe0 before the snapshot's gate.
    e.extend(crate::snapshot::rdma_entries());
    if let Some(config) = kernel_config(kernel) {
        let data =
            std::fs::read(&config).with_context(|| format!("reading {}", config.display()))?;
        e.push(Entry::File {
            path: "kernel-config".into(),
            mode: 0o644,
            data,
        });
    }
    Ok(e)
}

/// The kernel's build configuration: `config-<version>` beside the image (Debian's /boot
/// layout, and 6.x packages unpacked by `cargo lab kernel fetch`), or `config` in the module
/// tree (Debian's 7.x packages); `None` when there is neither.
pub fn kernel_config(kernel: &Kernel) -> Option<PathBuf> {
    let beside = kernel
        .image
        .parent()
        .map(|d| d.join(format!("config-{}", kernel.version)));
    [beside, Some(kernel.modules.join("config"))]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
}

/// FNV-1a, 64 bit: a stable hash for cache keys.
pub fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.iter().chain(&[0xffu8]) {
            h ^= *b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// Where built artefacts are cached: `$LAB_CACHE_DIR`, else `$XDG_CACHE_HOME/rxe-lab`, else
/// `~/.cache/rxe-lab`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LAB_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("rxe-lab");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache/rxe-lab");
    }
    std::env::temp_dir().join("rxe-lab-cache")
}

/// Writes `data` to `path` atomically (temp file + rename), so parallel users never see a
/// half-written file.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().context("no parent dir")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, data).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// The cached initramfs for this kernel, module set and agent; built if missing.
pub fn cached(kernel: &Kernel, wanted: &[&str], agent: &[u8]) -> Result<PathBuf> {
    let busybox_path = find_busybox()?;
    let busybox = std::fs::read(&busybox_path)?;
    let deps = kernel::ModuleDeps::load(&kernel.modules)?;
    let order = deps.load_order(wanted)?;
    let mut sizes = String::new();
    for rel in &order {
        let len = std::fs::metadata(kernel.modules.join(rel))
            .map(|m| m.len())
            .unwrap_or(0);
        sizes.push_str(&format!("{rel}:{len}\n"));
    }
    let key = fnv64(&[
        kernel.version.as_bytes(),
        sizes.as_bytes(),
        INIT.as_bytes(),
        b"strip-signatures",
        kernel_config(kernel)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
            .as_bytes(),
        agent,
        &busybox,
        crate::snapshot::rdma_identity().as_bytes(),
    ]);
    let path = cache_dir().join(format!("initramfs-{}-{key:016x}.cpio", kernel.version));
    if path.is_file() {
        return Ok(path);
    }
    let archive = write_cpio(&entries(kernel, wanted, &busybox, agent)?)?;
    write_atomic(&path, &archive)?;
    Ok(path)
}

/// The uncompressed kernel (ELF, PVH entry) extracted from the image, cached; `None` if the
/// image holds no extractable ELF (then QEMU boots the bzImage itself).
pub fn cached_vmlinux(kernel: &Kernel) -> Option<PathBuf> {
    let meta = std::fs::metadata(&kernel.image).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    let key = fnv64(&[
        kernel.image.to_string_lossy().as_bytes(),
        &meta.len().to_le_bytes(),
        &mtime.to_le_bytes(),
    ]);
    let path = cache_dir().join(format!("vmlinux-{}-{key:016x}", kernel.version));
    let no = cache_dir().join(format!("vmlinux-{}-{key:016x}.none", kernel.version));
    if path.is_file() {
        return Some(path);
    }
    if no.is_file() {
        return None;
    }
    let mut img = vec![];
    std::fs::File::open(&kernel.image)
        .ok()?
        .read_to_end(&mut img)
        .ok()?;
    match kernel::extract_vmlinux(&img) {
        Ok(elf) if has_pvh_note(&elf) => {
            write_atomic(&path, &elf).ok()?;
            Some(path)
        }
        _ => {
            let _ = write_atomic(&no, b"");
            None
        }
    }
}

/// Does the ELF carry the Xen PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY = 18) QEMU needs?
fn has_pvh_note(elf: &[u8]) -> bool {
    // Cheap check: the note's owner "Xen" followed by type 18 appears in a PT_NOTE segment.
    // Layout: namesz=4, descsz, type=18, "Xen\0".
    elf.windows(16).any(|w| {
        w[0..4] == 4u32.to_le_bytes() && w[8..12] == 18u32.to_le_bytes() && &w[12..16] == b"Xen\0"
    })
}
