//! The native provider's device: is there one, can rdma_rxe be loaded here, and bringing up
//! `rxe0` on the lab's pinned loopback network when the harness may.

use crate::host_tools;
use crate::vm;
use anyhow::{Context as _, Result, bail};
use std::path::Path;
use std::time::{Duration, Instant};

/// The RDMA devices of this host (`/sys/class/infiniband`), sorted.
pub fn rdma_devices() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Is `dev` a software RDMA device (rdma_rxe, or siw) rather than a NIC's (mlx5, MANA, ...)?
/// rxe has a `parent` attribute (its netdev); a software device hangs off no bus device, while a
/// NIC's has a `device` link to its PCI (or VMBus) device.
pub fn is_soft_device(dev: &str) -> bool {
    let d = Path::new("/sys/class/infiniband").join(dev);
    d.join("parent").is_file() || !d.join("device").exists()
}

/// The software RDMA devices (rxe, siw) of this host: the only ones the native provider uses
/// unless `LAB_DEVICE` names another.
pub fn soft_devices() -> Vec<String> {
    rdma_devices()
        .into_iter()
        .filter(|d| is_soft_device(d))
        .collect()
}

/// Does this host have a device the native provider would use: one `LAB_DEVICE` names, or a
/// software (rxe, siw) device? A NIC's RDMA device (a cloud runner's MANA or mlx5) alone does
/// not count: tests would run on it, not on rxe.
pub fn native_available() -> bool {
    match std::env::var("LAB_DEVICE") {
        Ok(want) if !want.is_empty() => Path::new("/sys/class/infiniband").join(want).exists(),
        _ => !soft_devices().is_empty(),
    }
}

/// The device the native provider hands to what it runs (`LAB_DEVICE` in their environment),
/// without creating anything: `LAB_DEVICE` if set and present, else `rxe0` if it is a software
/// device, else the first software device.
pub fn native_device() -> Option<String> {
    if let Ok(want) = std::env::var("LAB_DEVICE")
        && !want.is_empty()
    {
        return Path::new("/sys/class/infiniband")
            .join(&want)
            .exists()
            .then_some(want);
    }
    let soft = soft_devices();
    if soft.iter().any(|d| d == NATIVE_DEVICE) {
        return Some(NATIVE_DEVICE.to_string());
    }
    soft.into_iter().next()
}

/// Verbs programs pin what they register (RLIMIT_MEMLOCK): Ubuntu's default of 8 MiB is too
/// little for some chapters and for many crates' tests. Raises this process's limit (inherited
/// by everything it runs) with `prlimit`: to unlimited as root, else the soft limit up to the
/// hard one. Says how to raise it when that is not enough.
pub fn raise_memlock() {
    const ENOUGH: u64 = 512 << 20;
    let limits = || -> Option<(Option<u64>, Option<u64>)> {
        let s = std::fs::read_to_string("/proc/self/limits").ok()?;
        let l = s.lines().find(|l| l.starts_with("Max locked memory"))?;
        let f: Vec<&str> = l.split_whitespace().collect();
        let v = |x: &str| x.parse::<u64>().ok();
        Some((v(f.get(3)?), v(f.get(4)?)))
    };
    let Some((soft, hard)) = limits() else {
        return;
    };
    if soft.is_none_or(|s| s >= ENOUGH) {
        return;
    }
    let pid = std::process::id().to_string();
    let want = if is_root() {
        "unlimited:unlimited".to_string()
    } else {
        match hard {
            None => "unlimited:".to_string(),
            Some(h) => format!("{h}:"),
        }
    };
    let _ = duct::cmd("prlimit", ["--pid", &pid, &format!("--memlock={want}")])
        .stdin_null()
        .stdout_null()
        .stderr_null()
        .unchecked()
        .run();
    if let Some((Some(s), _)) = limits()
        && s < ENOUGH
    {
        eprintln!(
            "harness: the memlock limit here is {} KiB: verbs programs that register more fail \
             with ENOMEM. Fix: `sudo prlimit --pid $$ --memlock=unlimited:unlimited` in the \
             shell that runs them, or a line `* - memlock unlimited` in \
             /etc/security/limits.d/rdma.conf (then log in again)",
            s >> 10
        );
    }
}

pub(super) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Could the native provider create an rxe device here? (root, and the running kernel ships
/// rdma_rxe: `/lib/modules/$(uname -r)` lists it).
pub fn native_loadable() -> bool {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    is_root()
        && crate::kernel::has_rxe(&Path::new("/lib/modules").join(rel.trim()))
        && vm::which("rdma").is_some()
        && vm::which("modprobe").is_some()
}

/// The lab's pinned loopback network (docs/conventions.md §2), which the native provider builds
/// when it creates its own device: the same netdev, MAC and address as the loopback microVM, so
/// GUIDs, GIDs and the device table are the same as there (and in the snapshots).
pub const NATIVE_NETDEV: &str = "veth0";
pub(super) const NATIVE_PEER: &str = "veth1";
pub(super) const NATIVE_MAC: &str = "52:54:00:00:00:01";
pub(super) const NATIVE_ADDR: &str = "10.99.0.1/24";
/// The device the native provider creates.
pub const NATIVE_DEVICE: &str = "rxe0";

/// The command that builds the native provider's device by hand (as root), for messages.
pub fn native_setup_command() -> String {
    format!(
        "sudo env RXE_VETH_PEER={NATIVE_PEER} RXE_MAC={NATIVE_MAC} RXE_ADDR={NATIVE_ADDR} \
         bash vagrant/rxe-up.sh {NATIVE_NETDEV} {NATIVE_DEVICE}"
    )
}

/// The native provider's device: the one `LAB_DEVICE` names, else an existing software device
/// (rxe, siw; `rxe0` first), else `rxe0` created on the lab's pinned loopback network
/// (`veth0`/`veth1`, 52:54:00:00:00:01, 10.99.0.1/24, as in the loopback microVM), which loads
/// rdma_rxe. A NIC's RDMA device (mlx5, MANA) is never picked unless `LAB_DEVICE` names it.
/// What this creates is deleted when this process exits (a reaper child, as for state dirs).
/// Also raises the memlock limit ([`raise_memlock`]). Returns the device's name, which the
/// native lab passes on as `LAB_DEVICE`.
pub fn ensure_native_device() -> Result<String> {
    raise_memlock();
    if let Ok(want) = std::env::var("LAB_DEVICE")
        && !want.is_empty()
    {
        if Path::new("/sys/class/infiniband").join(&want).exists() {
            return Ok(want);
        }
        bail!(
            "LAB_DEVICE={want}, but this host's RDMA devices are {:?}; fix: unset LAB_DEVICE, \
             or create it: {}",
            rdma_devices(),
            native_setup_command()
        );
    }
    if let Some(d) = native_device() {
        return Ok(d);
    }
    let others = rdma_devices();
    if !others.is_empty() {
        eprintln!(
            "harness: RDMA devices here, not used (not rxe or siw; LAB_DEVICE=<name> would use \
             one): {others:?}"
        );
    }
    if !is_root() {
        bail!(
            "the native provider needs an rxe device and this host has none (creating one needs \
             root; a NIC's RDMA device is not used unless LAB_DEVICE names it); fix: {} (or `bash scripts/setup.sh --native`), or unset LAB_PROVIDER to use \
             the microVM",
            native_setup_command()
        );
    }
    let run = |args: &[&str]| -> Result<()> {
        let out = host_tools::captured(duct::cmd(args[0], &args[1..]))
            .with_context(|| format!("running {}", args[0]))?;
        if !out.status.success() {
            bail!(
                "`{}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    };
    run(&["modprobe", "rdma_rxe"]).context(
        "cannot load rdma_rxe here (this kernel lacks it); fix: unset LAB_PROVIDER (the microVM \
         boots a kernel that has it)",
    )?;
    let exists = Path::new("/sys/class/net").join(NATIVE_NETDEV).exists();
    if !exists {
        run(&[
            "ip",
            "link",
            "add",
            NATIVE_NETDEV,
            "address",
            NATIVE_MAC,
            "type",
            "veth",
            "peer",
            "name",
            NATIVE_PEER,
        ])?;
        run(&["ip", "addr", "add", NATIVE_ADDR, "dev", NATIVE_NETDEV])?;
        run(&["ip", "link", "set", NATIVE_PEER, "up"])?;
        run(&["ip", "link", "set", NATIVE_NETDEV, "up"])?;
    }
    run(&[
        "rdma",
        "link",
        "add",
        NATIVE_DEVICE,
        "type",
        "rxe",
        "netdev",
        NATIVE_NETDEV,
    ])?;
    let undo = if exists {
        format!("rdma link delete {NATIVE_DEVICE}")
    } else {
        format!("rdma link delete {NATIVE_DEVICE}; ip link delete {NATIVE_NETDEV}")
    };
    host_tools::at_exit::<&str>(&format!("read -r _; {undo}"), &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = Path::new("/sys/class/infiniband")
        .join(NATIVE_DEVICE)
        .join("ports/1");
    while Instant::now() < deadline {
        let st = std::fs::read_to_string(port.join("state")).unwrap_or_default();
        let gid1 = std::fs::read_to_string(port.join("gids/1")).unwrap_or_default();
        if st.contains("ACTIVE") && gid1.starts_with("0000:0000:0000:0000:0000:ffff:") {
            eprintln!(
                "harness: created {NATIVE_DEVICE} on {NATIVE_NETDEV} ({NATIVE_MAC}, {NATIVE_ADDR}; \
                 deleted when this process exits)"
            );
            return Ok(NATIVE_DEVICE.to_string());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{NATIVE_DEVICE} on {NATIVE_NETDEV} did not become ACTIVE with its IPv4 GID within 10 s")
}
