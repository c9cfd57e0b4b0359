//! The native provider's device: is there one, can rdma_rxe be loaded here, and bringing up
//! `rxe0` on the lab's pinned loopback network when the harness may.

use super::*;

/// Does this host have an RDMA device of its own (the native provider)?
pub fn native_available() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
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

/// The native provider's device: an existing one (`LAB_DEVICE` when set), else `rxe0` created
/// on the lab's pinned loopback network (`veth0`/`veth1`, 52:54:00:00:00:01, 10.99.0.1/24, as in
/// the loopback microVM), which loads rdma_rxe. What this creates is deleted when this process
/// exits (a reaper child, as for state dirs).
pub fn ensure_native_device() -> Result<()> {
    if let Ok(want) = std::env::var("LAB_DEVICE")
        && !want.is_empty()
    {
        if Path::new("/sys/class/infiniband").join(&want).exists() {
            return Ok(());
        }
        let have: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        bail!(
            "LAB_DEVICE={want}, but this host's RDMA devices are {have:?}; fix: unset LAB_DEVICE, \
             or create it: {}",
            native_setup_command()
        );
    }
    if native_available() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "the native provider needs an rxe device and this host has none (creating one needs \
             root); fix: {} (or `bash scripts/setup.sh --native`), or unset LAB_PROVIDER to use \
             the microVM",
            native_setup_command()
        );
    }
    let run = |args: &[&str]| -> Result<()> {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
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
    use std::os::unix::process::CommandExt as _;
    let undo = if exists {
        format!("rdma link delete {NATIVE_DEVICE}")
    } else {
        format!("rdma link delete {NATIVE_DEVICE}; ip link delete {NATIVE_NETDEV}")
    };
    if let Ok(mut c) = std::process::Command::new("sh")
        .args(["-c", &format!("read -r _; {undo}"), "lab-reaper"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
    {
        std::mem::forget(c.stdin.take());
    }
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
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{NATIVE_DEVICE} on {NATIVE_NETDEV} did not become ACTIVE with its IPv4 GID within 10 s")
}
