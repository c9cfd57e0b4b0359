//! The lab VMs from QEMU snapshots: a cold boot saves the VM just before init mounts the host's
//! root, and later labs load that state instead of booting the kernel again. The loopback VM
//! and each of the pair's two nodes have a file of their own.
//!
//! Why there: QEMU refuses to migrate a VM whose guest has mounted a 9p share (the blocker is
//! added when the guest attaches), so the state is saved after the kernel has booted and the
//! modules are loaded, and before the mount. Init waits there for the host's go-ahead on a
//! second virtio-serial port, `lab.gate` (only when the kernel command line has `LAB_GATE=1`;
//! the init script is in initramfs.rs). The go-ahead carries the host's time (init sets the
//! guest's clock from it, to the second) and 64 random bytes (written to /dev/urandom, so two
//! labs restored from one state do not share their entropy pool).
//!
//! - Save (the first boot, or after any key change): `stop`, `migrate` to `exec:cat > FILE`
//!   (QEMU 7.2 has no `file:` URI nor mapped-ram), `cont`, go-ahead.
//! - Restore: the same command line plus `-incoming exec:cat FILE`; wait for the incoming
//!   migration, `cont` (the source was stopped, so QEMU does not start it by itself), go-ahead.
//!   Anything wrong (QEMU exits, the migration fails, no agent within [`RESTORE_LIMIT`]):
//!   a warning on stderr, the file is removed and the lab boots cold, saving a new one.
//! - The file, `snapshot-loopback-<key>.qemu` in the cache dir, is keyed by the QEMU binary,
//!   the kernel image, the initramfs (its name carries the hash of its contents, the agent
//!   included), the kernel command line, memory, vCPUs and accelerator: any change makes a new
//!   one. The three newest of each kind are kept.
//! - The pair ([`boot_pair`]): `snapshot-pair-a-<key>.qemu` and `snapshot-pair-b-<key>.qemu`,
//!   whose keys add the node's NIC (its MAC) to the above; their command lines differ too
//!   (`LAB_NODE`), so the nodes never share a file. At the gate a pair node already has its
//!   address and rxe0 (init's `pairnet`), as the loopback VM has its veths and rxe0. The NIC's
//!   `-netdev stream` backend is not in the saved state: the restored QEMU connects to the new
//!   lab's cable, whose relay accepts it as it accepts a restarted node. Both nodes come up in
//!   parallel; a node whose restore fails boots cold alone.
//!
//! [`boot`] brings up a topology's VMs this way. This module starts each QEMU through vm.rs
//! (with a [`vm::Launch`]); vm.rs does not use this module.
//!
//! `LAB_SNAPSHOT=0` turns this off (the boot is the cold boot of before, without the gate);
//! `LAB_SNAPSHOT=require` makes a VM that cannot be restored an error instead of a cold boot.

use crate::conn::Conn;
use crate::initramfs;
use crate::qmp::{Qmp, json_str};
use crate::vm::{self, BootPlan, Vm, Wire};
use crate::vm_options::VmOptions;
use crate::wire::cable::Cable;
use crate::{Node, Topology};
use anyhow::{Context as _, Result, bail};
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The longest a restore may take, from QEMU's start to the agent's Ready, before the lab
/// falls back to a cold boot.
pub const RESTORE_LIMIT: Duration = Duration::from_secs(60);

/// The longest the save (stop, migrate, cont) may take.
const SAVE_LIMIT: Duration = Duration::from_secs(60);

/// Bumped when the layout of the saved state changes (the init script's gate, say).
const FORMAT: &[u8] = b"rxe-lab snapshot 1";

/// The `LAB_SNAPSHOT` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    On,
    Require,
}

pub fn mode() -> Mode {
    match std::env::var("LAB_SNAPSHOT").as_deref().map(str::trim) {
        Ok("0") | Ok("off") | Ok("no") => Mode::Off,
        Ok("require") => Mode::Require,
        _ => Mode::On,
    }
}

/// How a lab's VM came up, written to `boot-kind` in its state dir.
pub fn how(dir: &Path) -> String {
    std::fs::read_to_string(crate::StateDir::at(dir).boot_kind())
        .unwrap_or_else(|_| "booted".into())
}

fn record(dir: &Path, what: &str) {
    let _ = std::fs::write(crate::StateDir::at(dir).boot_kind(), what);
}

/// Size and modification time of a file, for a key.
fn identity(p: &Path) -> String {
    let m = std::fs::metadata(p);
    let len = m.as_ref().map(|m| m.len()).unwrap_or(0);
    let mtime = m
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}:{len}:{mtime}", p.display())
}

/// The snapshot file of the loopback VM booted by `plan` with this command line.
pub fn path(plan: &BootPlan, append: &str, smp: u32, mem_mb: u32) -> Result<PathBuf> {
    file_for(plan, None, append, smp, mem_mb)
}

/// The snapshot file of pair node `n` booted by `plan` (its command line has `LAB_NODE=<n>`;
/// its NIC's MAC is in the key too): `snapshot-pair-<n>-<key>.qemu`.
pub fn pair_path(plan: &BootPlan, n: Node, smp: u32, mem_mb: u32) -> Result<PathBuf> {
    file_for(
        plan,
        Some(n),
        &vm::append_for(plan, Some(n), true),
        smp,
        mem_mb,
    )
}

fn file_for(
    plan: &BootPlan,
    node: Option<Node>,
    append: &str,
    smp: u32,
    mem_mb: u32,
) -> Result<PathBuf> {
    let qemu = vm::qemu_binary()?;
    // The pair's nodes differ in their command line (LAB_NODE) and their NIC: both are in
    // the key, so the two nodes never share a file.
    let nic = node
        .map(|n| format!("virtio-net-pci mac={}", vm::mac_of(n)))
        .unwrap_or_default();
    let key = initramfs::fnv64(&[
        FORMAT,
        identity(&qemu).as_bytes(),
        identity(&plan.image).as_bytes(),
        identity(&plan.initrd).as_bytes(),
        append.as_bytes(),
        format!("{smp} {mem_mb} {}", plan.accel.name()).as_bytes(),
        nic.as_bytes(),
    ]);
    let kind = match node {
        None => "loopback".to_string(),
        Some(n) => format!("pair-{}", n.name()),
    };
    Ok(initramfs::cache_dir().join(format!("snapshot-{kind}-{key:016x}.qemu")))
}

/// One VM brought up through the gate: the loopback VM (`node` None) or a pair node.
struct Target<'a> {
    plan: &'a BootPlan,
    opts: &'a VmOptions,
    dir: &'a Path,
    node: Option<Node>,
    smp: u32,
    wire: Option<Wire>,
}

impl Target<'_> {
    fn start(&self, launch: Option<&vm::Launch>) -> Result<Vm> {
        vm::start_one_with(
            self.plan,
            self.dir,
            self.node,
            self.smp,
            self.opts.mem_mb,
            self.wire.clone(),
            launch,
        )
    }

    /// The node whose files (sockets, logs) the VM uses: the loopback VM's are node a's.
    fn files(&self) -> Node {
        self.node.unwrap_or(Node::A)
    }

    fn what(&self) -> String {
        match self.node {
            None => "the lab's snapshot".into(),
            Some(n) => format!("node {}'s snapshot", n.name()),
        }
    }
}

/// Boots the loopback VM: restored from its snapshot when there is one, else cold (saving one).
pub fn boot_loopback(plan: &BootPlan, opts: &VmOptions, dir: &Path) -> Result<(Vm, Conn)> {
    record(dir, "booted");
    let t = Target {
        plan,
        opts,
        dir,
        node: None,
        smp: opts.loopback_smp,
        wire: None,
    };
    let (vm, conn, how) = boot_target(&t, mode())?;
    record(dir, &how);
    Ok((vm, conn))
}

/// Boots the pair's two nodes in parallel, each restored from its own snapshot when it can
/// be, else cold (saving one); `wires`: node a's and node b's NIC on the cable. Each node's
/// "how" goes to its own `boot-kind-<n>`, both to `boot-kind`.
pub fn boot_pair(
    plan: &BootPlan,
    opts: &VmOptions,
    dir: &Path,
    wires: [Wire; 2],
) -> Result<Vec<(Vm, Conn)>> {
    record(dir, "booted");
    let m = mode();
    let [wa, wb] = wires;
    let target = |n: Node, w: Wire| Target {
        plan,
        opts,
        dir,
        node: Some(n),
        smp: opts.pair_smp,
        wire: Some(w),
    };
    let one = |t: Target| -> Result<(Vm, Conn, String)> {
        let n = t.files();
        let r = boot_target(&t, m).with_context(|| format!("node {}", n.name()))?;
        let _ = std::fs::write(crate::StateDir::at(dir).boot_kind_of(n), &r.2);
        Ok(r)
    };
    let (a, b) = std::thread::scope(|s| {
        let b = s.spawn(|| one(target(Node::B, wb)));
        let a = one(target(Node::A, wa));
        let b = b
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("node b's boot thread panicked")));
        (a, b)
    });
    let ((va, ca, ha), (vb, cb, hb)) = (a?, b?);
    // The cold boot's "..., saved a snapshot in 0.30 s," ends in a comma meant for the
    // origin's " in N s" that follows.
    let (ha2, hb2) = (ha.trim_end_matches(','), hb.trim_end_matches(','));
    let restored = "restored from a snapshot ";
    let how = match (ha2.strip_prefix(restored), hb2.strip_prefix(restored)) {
        (Some(x), Some(y)) => format!("{restored}each node (a {x}, b {y}),"),
        _ => format!("node a {ha2}; node b {hb2};"),
    };
    record(dir, &how);
    Ok(vec![(va, ca), (vb, cb)])
}

/// How a pair node came up (`boot-kind-<n>` in its lab's state dir).
pub fn how_of(dir: &Path, n: Node) -> String {
    std::fs::read_to_string(crate::StateDir::at(dir).boot_kind_of(n))
        .unwrap_or_else(|_| "booted".into())
}

/// One VM, restored or booted as `m` says; returns it, its agent and how it came up.
fn boot_target(t: &Target, m: Mode) -> Result<(Vm, Conn, String)> {
    if m == Mode::Off {
        let vm = t.start(None)?;
        let conn = vm::connect(&vm, Instant::now() + t.opts.boot_timeout)?;
        return Ok((vm, conn, "booted".into()));
    }
    let file = file_for(
        t.plan,
        t.node,
        &vm::append_for(t.plan, t.node, true),
        t.smp,
        t.opts.mem_mb,
    )?;
    if file.is_file() {
        match restore(t, &file) {
            Ok(r) => return Ok(r),
            Err(e) if m == Mode::Require => {
                return Err(e.context(format!(
                    "LAB_SNAPSHOT=require: the snapshot {} did not restore",
                    file.display()
                )));
            }
            Err(e) => {
                let why = format!("{e:#}").lines().next().unwrap_or("").to_string();
                eprintln!(
                    "harness: warning: {} {} did not restore ({why}); removing it and booting \
                     cold (LAB_SNAPSHOT=0 turns snapshots off)",
                    t.what(),
                    file.display()
                );
                let _ = std::fs::remove_file(&file);
                let how = format!("booted cold after a failed restore ({why})");
                return cold_and_save(t, &file, &how);
            }
        }
    } else if m == Mode::Require {
        bail!(
            "LAB_SNAPSHOT=require, but there is no snapshot {} (a lab booted with snapshots on \
             saves it)",
            file.display()
        );
    }
    cold_and_save(t, &file, "booted cold")
}

/// Loads `file` into a new VM and lets it go on; every step has a deadline.
fn restore(t: &Target, file: &Path) -> Result<(Vm, Conn, String)> {
    let deadline = Instant::now() + RESTORE_LIMIT;
    let launch = vm::Launch {
        incoming: Some(file.to_path_buf()),
    };
    let t0 = Instant::now();
    let vm = t.start(Some(&launch))?;
    let state = crate::StateDir::at(t.dir);
    let mut gate = connect_sock(&state.gate_sock(t.files()), &vm, deadline)?;
    let mut q = qmp(&state.qmp_sock(t.files()), &vm, deadline)?;
    loop {
        let r = match q.execute("query-migrate", "") {
            Ok(r) => r,
            Err(e) => {
                // The monitor goes with QEMU: say why QEMU exited, when it did.
                let t = Instant::now();
                while vm.exited().is_none() && t.elapsed() < Duration::from_secs(2) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                check(&vm, deadline, "loading the snapshot")?;
                return Err(e);
            }
        };
        if r.contains("\"completed\"") {
            break;
        }
        if r.contains("\"failed\"") {
            bail!("QEMU could not load it ({})", vm::tail(&vm.qemu_log, 3));
        }
        check(&vm, deadline, "loading the snapshot")?;
        std::thread::sleep(Duration::from_millis(5));
    }
    q.execute("cont", "")?;
    let loaded = t0.elapsed().as_secs_f64();
    go_ahead(&mut gate)?;
    let conn = vm::connect(&vm, deadline)?;
    drop(gate);
    let how = format!(
        "restored from a snapshot (loaded in {loaded:.2} s, agent ready {:.2} s later)",
        t0.elapsed().as_secs_f64() - loaded
    );
    Ok((vm, conn, how))
}

/// A cold boot with the gate: at the gate, save the VM to `file`, then let it go on. A save
/// that fails costs a warning, not the lab.
fn cold_and_save(t: &Target, file: &Path, how: &str) -> Result<(Vm, Conn, String)> {
    let deadline = Instant::now() + t.opts.boot_timeout;
    let vm = t.start(Some(&vm::Launch { incoming: None }))?;
    let state = crate::StateDir::at(t.dir);
    let mut gate = connect_sock(&state.gate_sock(t.files()), &vm, deadline)?;
    // Init says so on the console once it reads the gate.
    loop {
        let text = std::fs::read(&vm.console).unwrap_or_default();
        if String::from_utf8_lossy(&text).contains("lab-init: at the gate") {
            break;
        }
        if let Err(e) = check(&vm, deadline, "booting to the gate") {
            bail!(
                "{e:#}\n--- last lines of {} ---\n{}",
                vm.console.display(),
                vm::tail(&vm.console, 30)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    let how = match save(&state.qmp_sock(t.files()), &vm, file) {
        Ok(()) => format!(
            "{how}, saved a snapshot in {:.2} s,",
            t0.elapsed().as_secs_f64()
        ),
        Err(e) => {
            eprintln!("harness: warning: saving {} failed: {e:#}", t.what());
            format!("{how} (saving the snapshot failed)")
        }
    };
    go_ahead(&mut gate)?;
    let conn = vm::connect(&vm, deadline)?;
    drop(gate);
    Ok((vm, conn, how))
}

/// `stop`, `migrate` into a temporary file, rename it to `file`, and `cont` whatever happened.
fn save(qmp_sock: &Path, vm: &Vm, file: &Path) -> Result<()> {
    let deadline = Instant::now() + SAVE_LIMIT;
    let mut q = qmp(qmp_sock, vm, deadline)?;
    let tmp = file.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::create_dir_all(file.parent().context("no cache dir")?)?;
    let r = (|| -> Result<()> {
        q.execute("stop", "")?;
        // QEMU 7.2 limits a migration to 128 MiB/s by default.
        q.execute("migrate-set-parameters", "{\"max-bandwidth\":107374182400}")?;
        let uri = format!("exec:cat > {}", vm::shell_quote(&tmp));
        q.execute("migrate", &format!("{{\"uri\":{}}}", json_str(&uri)))?;
        loop {
            let r = q.execute("query-migrate", "")?;
            if r.contains("\"completed\"") {
                break;
            }
            if r.contains("\"failed\"") {
                bail!("the migration failed: {}", r.trim());
            }
            check(vm, deadline, "saving the snapshot")?;
            std::thread::sleep(Duration::from_millis(5));
        }
        std::fs::rename(&tmp, file).with_context(|| format!("renaming to {}", file.display()))?;
        Ok(())
    })();
    let cont = q.execute("cont", "");
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r?;
    cont?;
    prune(file);
    Ok(())
}

/// The host's `rdma` (iproute2).
fn rdma_binary() -> Option<PathBuf> {
    ["/usr/bin/rdma", "/usr/sbin/rdma", "/sbin/rdma", "/bin/rdma"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// What the initramfs's key takes from `rdma`: its path, size and time.
pub fn rdma_identity() -> String {
    rdma_binary().map(|p| identity(&p)).unwrap_or_default()
}

/// `rdma/rdma`, the shared objects `ldd` names for it and `rdma/ld.so` (its interpreter), for
/// the initramfs: init runs `/rdma/ld.so --library-path /rdma /rdma/rdma`. Empty when there is
/// no `rdma` or `ldd` (then the agent adds rxe0 after the gate, as without snapshots).
pub fn rdma_entries() -> Vec<initramfs::Entry> {
    let Some(bin) = rdma_binary() else {
        return vec![];
    };
    let Ok(out) = crate::host_tools::captured(duct::cmd!("ldd", &bin)) else {
        return vec![];
    };
    let mut files = vec![("rdma".to_string(), bin)];
    let mut interp = false;
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let l = l.trim();
        if let Some((name, rest)) = l.split_once(" => ") {
            let lib = rest.split(" (").next().unwrap_or("").trim();
            if lib.starts_with('/') {
                files.push((name.to_string(), PathBuf::from(lib)));
            }
        } else if l.starts_with('/') && l.contains("ld-linux") {
            interp = true;
            let p = l.split(" (").next().unwrap_or("").trim();
            files.push(("ld.so".to_string(), PathBuf::from(p)));
        }
    }
    if !out.status.success() || !interp {
        return vec![];
    }
    let mut e = vec![initramfs::Entry::Dir("rdma".into())];
    for (name, p) in files {
        let Ok(data) = std::fs::read(&p) else {
            return vec![];
        };
        e.push(initramfs::Entry::File {
            path: format!("rdma/{name}"),
            mode: 0o755,
            data,
        });
    }
    e
}

/// Keeps the three newest snapshots of each kind (`loopback`, `pair-a`, `pair-b`) in the cache
/// dir (each is about 100 MB).
fn prune(keep: &Path) {
    let Some(dir) = keep.parent() else { return };
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    // `snapshot-<kind>-<key>.qemu` -> `snapshot-<kind>`.
    let kind = |p: &Path| -> Option<String> {
        let n = p.file_name()?.to_str()?;
        if !(n.starts_with("snapshot-") && n.ends_with(".qemu")) {
            return None;
        }
        Some(n.rsplit_once('-')?.0.to_string())
    };
    let Some(mine) = kind(keep) else { return };
    let mut all: Vec<(SystemTime, PathBuf)> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| kind(p).as_deref() == Some(mine.as_str()))
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    all.sort();
    all.reverse();
    for (_, p) in all.into_iter().skip(3) {
        if p != keep {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// An error if QEMU exited or the deadline passed.
fn check(vm: &Vm, deadline: Instant, what: &str) -> Result<()> {
    if let Some(st) = vm.exited() {
        bail!(
            "QEMU exited while {what} ({st}): {}",
            vm::tail(&vm.qemu_log, 3).replace('\n', " / ")
        );
    }
    if Instant::now() > deadline {
        bail!("{what} took too long");
    }
    Ok(())
}

fn connect_sock(sock: &Path, vm: &Vm, deadline: Instant) -> Result<UnixStream> {
    loop {
        match UnixStream::connect(sock) {
            Ok(s) => return Ok(s),
            Err(e) => {
                check(
                    vm,
                    deadline,
                    &format!("connecting to {} ({e})", sock.display()),
                )?;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

fn qmp(sock: &Path, vm: &Vm, deadline: Instant) -> Result<Qmp> {
    connect_sock(sock, vm, deadline)?;
    Qmp::connect(sock)
}

/// The go-ahead: `go <unix seconds> <128 hex digits of host randomness>`, padded to the 160
/// bytes init reads. The caller keeps the socket open until the agent is ready: a closed host
/// end reads as end of file in the guest.
fn go_ahead(gate: &mut UnixStream) -> Result<()> {
    let mut rnd = [0u8; 64];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut rnd))
        .context("reading /dev/urandom")?;
    let hex: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let msg = format!("{:<160}", format!("go {now} {hex}"));
    gate.write_all(msg.as_bytes())
        .context("sending the go-ahead to the VM")?;
    Ok(())
}

/// What [`boot`] brings up: each VM with its agent's connection, and the pair's cable.
pub type Booted = (Vec<(Vm, Conn)>, Option<Cable>);

/// Boots the VMs of a topology in `dir` and connects to their agents: each restored from its
/// snapshot when it can be, else booted cold (snapshot.rs).
pub fn boot(topology: Topology, opts: &VmOptions, plan: &BootPlan, dir: &Path) -> Result<Booted> {
    match topology {
        Topology::Loopback => Ok((vec![boot_loopback(plan, opts, dir)?], None)),
        Topology::Pair => {
            let c = Cable::start(dir)?;
            let wires = [
                Wire::of(&c, Node::A, opts.pcap.clone()),
                Wire::of(&c, Node::B, None),
            ];
            let out = boot_pair(plan, opts, dir, wires).with_context(|| {
                format!(
                    "booting the pair lab ({}) within {} s (LAB_BOOT_TIMEOUT_SECS)",
                    plan.accel.name(),
                    opts.boot_timeout.as_secs()
                )
            })?;
            Ok((out, Some(c)))
        }
    }
}
