//! The microVM provider: QEMU booting an installed distro kernel that ships rdma_rxe.
//!
//! Recipe (measured on this project's machine; harness/README.md has the figures): `-kernel`
//! (the extracted vmlinux through its PVH entry when possible) + our initramfs; the host's root
//! read-only over 9p; the agent on a virtio-serial port whose host end is a unix socket in the
//! lab's state dir; the guest console in `console-<node>.log` there. Pair: two VMs whose NICs
//! are `-netdev stream` clients of the [`Cable`], a relay in the process that owns the lab
//! (lossless under load, and a node can be killed and restarted).
//!
//! Teardown: QEMU is started through `setpriv --pdeathsig KILL` from one thread that lives as
//! long as the process, so QEMU dies with the process that started it even when nobody drops
//! the lab (a static in a test binary). State dirs left by dead processes are removed by the
//! next user ([`reap_stale`]).

use crate::conn::Conn;
use crate::host_tools;
use crate::initramfs;
use crate::kernel::{self, Kernel};
use crate::userspace::{self, Userspace};
use crate::vm_options::{Accel, VmOptions};
use crate::wire::cable::Cable;
use crate::{Node, StateDir, Topology};
use anyhow::{Context as _, Result, bail};
use std::ffi::OsString;
use std::io::Read as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The guest agent, built by build.rs and embedded here: the binary needs nothing of its build
/// tree at run time (`cargo install` deletes its target dir; so does `cargo clean`).
pub const AGENT: &[u8] = include_bytes!(env!("LAB_AGENT_PATH"));

/// The embedded agent as an executable file (for `lab-agent --stdio` on the host, as the
/// agent tests run it): written once per process under the temp dir, removed at exit.
pub fn agent_file() -> Result<PathBuf> {
    static FILE: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = new_state_dir("agent").map_err(|e| format!("{e:#}"))?;
        let path = dir.join("lab-agent");
        let tmp = dir.join("lab-agent.tmp");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(&tmp, AGENT)
            .and_then(|()| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("writing the lab agent to {}: {e}", path.display()))?;
        Ok(path)
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// One running QEMU.
#[derive(Debug)]
pub struct Vm {
    pub node: Node,
    pub console: PathBuf,
    pub qemu_log: PathBuf,
    pub agent_sock: PathBuf,
    child: duct::Handle,
}

impl Vm {
    pub fn pid(&self) -> u32 {
        self.child.pids().first().copied().unwrap_or(0)
    }

    /// Has QEMU exited? (with its status)
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten().map(|o| o.status)
    }

    pub fn kill(&self) {
        host_tools::kill_and_reap(&self.child);
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.kill();
    }
}

type SpawnReq = (
    duct::Expression,
    mpsc::Sender<std::io::Result<duct::Handle>>,
);

/// Starts an expression from a thread that never exits, so `PR_SET_PDEATHSIG` (which fires
/// when the *thread* that forked the child exits) fires only when the whole process goes.
pub fn spawn_tied(cmd: duct::Expression) -> std::io::Result<duct::Handle> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnReq>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnReq>();
        std::thread::Builder::new()
            .name("lab-spawner".into())
            .spawn(move || {
                for (c, reply) in rx {
                    let _ = reply.send(c.start());
                }
            })
            .expect("spawn the lab-spawner thread");
        Mutex::new(tx)
    });
    let (rtx, rrx) = mpsc::channel();
    tx.lock()
        .unwrap()
        .send((cmd, rtx))
        .map_err(|_| std::io::Error::other("lab-spawner thread gone"))?;
    rrx.recv()
        .map_err(|_| std::io::Error::other("lab-spawner thread gone"))?
}

/// A command line being built, argument by argument (duct takes the arguments whole).
#[derive(Debug, Default)]
struct Args(Vec<OsString>);

impl Args {
    fn arg(&mut self, a: impl Into<OsString>) -> &mut Args {
        self.0.push(a.into());
        self
    }

    fn args<I>(&mut self, all: I) -> &mut Args
    where
        I: IntoIterator,
        I::Item: Into<OsString>,
    {
        self.0.extend(all.into_iter().map(Into::into));
        self
    }
}

/// `prog ARGS`, getting SIGKILL when the thread that starts it exits (`setpriv --pdeathsig
/// KILL`, util-linux); start it with [`spawn_tied`]. Its exit status is an answer of
/// [`Vm::exited`], not an error (`unchecked`).
pub fn tied_command(prog: &Path, args: Vec<OsString>) -> duct::Expression {
    match which("setpriv") {
        Some(sp) => {
            let mut argv: Vec<OsString> = ["--pdeathsig", "KILL", "--"].map(Into::into).into();
            argv.push(prog.into());
            argv.extend(args);
            duct::cmd(sp, argv)
        }
        None => duct::cmd(prog, args),
    }
    .unchecked()
}

/// Finds a program on PATH.
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// QEMU for x86_64.
pub fn qemu_binary() -> Result<PathBuf> {
    which("qemu-system-x86_64").context(
        "qemu-system-x86_64 not found; fix: run `cargo lab setup` (installs qemu-system-x86)",
    )
}

/// The QEMU release the pair's wire needs: `-netdev stream` (a NIC as a client of the cable's
/// unix socket) arrived in QEMU 7.2.
pub const QEMU_FOR_STREAM: (u32, u32) = (7, 2);

/// `(major, minor, micro)` from `qemu-system-x86_64 --version`'s first line ("QEMU emulator
/// version 6.2.0 (Debian 1:6.2+dfsg-2ubuntu6.22)"); `None` for anything else.
pub fn parse_qemu_version(text: &str) -> Option<(u32, u32, u32)> {
    let line = text.lines().next()?;
    let v = line.split("version ").nth(1)?.split_whitespace().next()?;
    let mut parts = v.split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .ok()
    });
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let micro = parts.next().flatten().unwrap_or(0);
    Some((major, minor, micro))
}

/// Refuses, at once and by name, a QEMU too old for the pair's wire (instead of a QEMU that
/// exits at start with "invalid netdev type" deep in a boot).
pub fn require_stream_netdev(qemu: &Path) -> Result<()> {
    let out = host_tools::captured(duct::cmd(qemu, ["--version"]))
        .with_context(|| format!("running {} --version", qemu.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(v) = parse_qemu_version(&text) else {
        bail!(
            "cannot tell the version of {} (its --version printed {:?}); the pair needs QEMU \
             {}.{} or newer",
            qemu.display(),
            text.trim(),
            QEMU_FOR_STREAM.0,
            QEMU_FOR_STREAM.1
        );
    };
    if (v.0, v.1) < QEMU_FOR_STREAM {
        bail!(
            "{} is QEMU {}.{}.{}; the pair's wire (`-netdev stream`) needs QEMU {}.{} or newer. \
             Fix: a newer QEMU (Debian 12 ships 7.2, Ubuntu 24.04 8.2), or use the loopback \
             topology",
            qemu.display(),
            v.0,
            v.1,
            v.2,
            QEMU_FOR_STREAM.0,
            QEMU_FOR_STREAM.1
        );
    }
    Ok(())
}

/// A fresh private state dir under the temp dir: `rxe-lab.<pid>.<n>.<what>`, with an
/// `owner.pid` so [`reap_stale`] can tell when it is abandoned.
pub fn new_state_dir(what: &str) -> Result<PathBuf> {
    static N: AtomicU32 = AtomicU32::new(0);
    reap_stale();
    let pid = std::process::id();
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rxe-lab.{pid}.{n}.{what}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(StateDir::at(&dir).owner_pid(), pid.to_string())?;
    spawn_reaper(&dir);
    Ok(dir)
}

/// Removes `dir` when this process exits, however it exits ([`host_tools::at_exit`]).
fn spawn_reaper(dir: &Path) {
    host_tools::at_exit("read -r _; rm -rf -- \"$1\"", &[dir]);
}

/// Is a process alive? (Linux: /proc/<pid>)
pub fn pid_alive(pid: u32) -> bool {
    // A zombie still has /proc/<pid>; treat it as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Removes state dirs whose owner process is gone.
pub fn reap_stale() {
    let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("rxe-lab.") {
            continue;
        }
        let owner = std::fs::read_to_string(StateDir::at(e.path()).owner_pid())
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        match owner {
            Some(pid) if pid_alive(pid) => {}
            Some(_) => {
                let _ = std::fs::remove_dir_all(e.path());
            }
            None => {
                // Being created right now, or broken: remove only if old.
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .map(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(600))
                    .unwrap_or(false);
                if old {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
}

/// The last `n` lines of a log file, without kernel timestamps noise removed (kept as is).
pub fn tail(path: &Path, n: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let mut b = vec![];
        let _ = f.read_to_end(&mut b);
        s = String::from_utf8_lossy(&b).into_owned();
    }
    let lines: Vec<&str> = s.lines().collect();
    let from = lines.len().saturating_sub(n);
    lines[from..].join("\n")
}

/// Is KVM usable? `/dev/kvm` must open, and a short KVM boot of the lab kernel must reach the
/// kernel's first console line (this host's kvm_pvm hangs instead). Cached per host kernel.
pub fn probe_accel(kernel: &Kernel, image: &Path) -> Accel {
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return Accel::Tcg;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let key = initramfs::fnv64(&[host.trim().as_bytes(), kernel.version.as_bytes()]);
    let cache = initramfs::cache_dir().join(format!("accel-{key:016x}"));
    match std::fs::read_to_string(&cache).as_deref() {
        Ok("kvm") => return Accel::Kvm,
        Ok("tcg") => return Accel::Tcg,
        _ => {}
    }
    let verdict = probe_kvm_boot(image).unwrap_or(false);
    let a = if verdict { Accel::Kvm } else { Accel::Tcg };
    let _ = initramfs::write_atomic(&cache, a.name().as_bytes());
    a
}

fn probe_kvm_boot(image: &Path) -> Result<bool> {
    let dir = new_state_dir("kvm-probe")?;
    let log = dir.join("console.log");
    let mut args = Args::default();
    args.args([
        "-no-user-config",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
    ])
    .args(["-machine", "pc,accel=kvm", "-cpu", "host", "-m", "256"])
    .arg("-kernel")
    .arg(image)
    .args(["-append", "console=ttyS0 panic=-1 root=/dev/lab-none"])
    .arg("-serial")
    .arg(format!("file:{}", log.display()));
    let cmd = tied_command(&qemu_binary()?, args.0)
        .stdin_null()
        .stdout_null()
        .stderr_null();
    let child = spawn_tied(cmd)?;
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut ok = false;
    while Instant::now() < deadline {
        if std::fs::read_to_string(&log)
            .map(|s| s.contains("Linux version"))
            .unwrap_or(false)
        {
            ok = true;
            break;
        }
        match child.try_wait() {
            Ok(None) => {}
            Ok(Some(_)) => break,
            Err(e) => {
                host_tools::kill_and_reap(&child);
                return Err(e.into());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    host_tools::kill_and_reap(&child);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ok)
}

/// What to boot, resolved once: kernel, image to pass to `-kernel`, initramfs, accelerator.
#[derive(Debug, Clone)]
pub struct BootPlan {
    pub kernel: Kernel,
    /// Another userspace root for the guests (`--userspace`); `None`: the host's.
    pub userspace: Option<Userspace>,
    pub image: PathBuf,
    pub initrd: PathBuf,
    pub accel: Accel,
}

/// Finds the kernel, builds (or reuses) the initramfs and the vmlinux, picks the accelerator.
pub fn plan(topology: Topology, opts: &VmOptions) -> Result<BootPlan> {
    if topology == Topology::Pair {
        require_stream_netdev(&qemu_binary()?)?;
    }
    let kernel = kernel::find_kernel()?;
    let userspace = userspace::chosen()?;
    let agent = AGENT;
    let wanted = match topology {
        Topology::Loopback => kernel::LOOPBACK_MODULES,
        Topology::Pair => kernel::PAIR_MODULES,
    };
    let initrd = initramfs::cached(&kernel, wanted, agent).context("building the lab initramfs")?;
    let image = if std::env::var_os("LAB_NO_PVH").is_some() {
        kernel.image.clone()
    } else {
        initramfs::cached_vmlinux(&kernel).unwrap_or_else(|| kernel.image.clone())
    };
    let accel = match opts.accel {
        // LAB_ACCEL=kvm is a demand, not a preference: a job that asked for KVM must not pass
        // slowly (or time out) under TCG because /dev/kvm is missing or unusable.
        Some(Accel::Kvm) => {
            if let Err(e) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/kvm")
            {
                bail!(
                    "LAB_ACCEL=kvm, but /dev/kvm cannot be opened ({e}): refusing to fall back to \
                     TCG. Fix: give this user access (`sudo usermod -aG kvm $USER`, or a udev rule \
                     making /dev/kvm 0666, then `sudo udevadm settle`), or unset LAB_ACCEL to let \
                     the harness probe and use TCG"
                );
            }
            if probe_accel(&kernel, &kernel.image) != Accel::Kvm {
                bail!(
                    "LAB_ACCEL=kvm, but a 6 s KVM boot of {} did not reach the kernel's first \
                     console line (verdict cached in {}): refusing to fall back to TCG. Fix: \
                     check the host's KVM (`dmesg | grep -i kvm`), or unset LAB_ACCEL to use TCG",
                    kernel.image.display(),
                    initramfs::cache_dir().display()
                );
            }
            Accel::Kvm
        }
        Some(a) => a,
        None => probe_accel(&kernel, &kernel.image),
    };
    Ok(BootPlan {
        kernel,
        userspace,
        image,
        initrd,
        accel,
    })
}

/// Per-VM network: the pair's wire.
#[derive(Debug, Clone)]
pub struct Wire {
    mac: &'static str,
    /// The [`Cable`]'s socket for this node.
    sock: PathBuf,
    pcap: Option<PathBuf>,
}

/// Node `n`'s MAC on the pair's wire (fixed: the guest's agent finds its netdev by it).
pub fn mac_of(n: Node) -> &'static str {
    match n {
        Node::A => "52:54:00:00:00:0a",
        Node::B => "52:54:00:00:00:0b",
    }
}

impl Wire {
    /// Node `n`'s NIC on `cable`.
    pub fn of(cable: &Cable, n: Node, pcap: Option<PathBuf>) -> Wire {
        Wire {
            mac: mac_of(n),
            sock: cable.sock(n).to_path_buf(),
            pcap,
        }
    }
}

/// The module tree init must bind at `/lib/modules/<ver>` in the guest: `None` when the host's
/// own tree is already there (the guest sees the host's root, not another userspace), or when the path has a space
/// (the kernel command line could not carry it; such a kernel's modules load only from the
/// initramfs).
pub fn guest_module_tree(k: &Kernel, userspace: Option<&Userspace>) -> Option<PathBuf> {
    // Another userspace root has no module tree of the host's kernels.
    let own = userspace.is_none()
        && kernel::MODULE_ROOTS
            .iter()
            .any(|r| k.modules == Path::new(r).join(&k.version));
    let printable = k
        .modules
        .to_str()
        .is_some_and(|s| !s.contains(char::is_whitespace));
    (!own && printable).then(|| k.modules.clone())
}

/// Starts one VM (no wait): `node` None is the loopback VM.
pub fn start_one(
    plan: &BootPlan,
    dir: &Path,
    node: Option<Node>,
    smp: u32,
    mem_mb: u32,
    wire: Option<Wire>,
) -> Result<Vm> {
    start_one_with(plan, dir, node, smp, mem_mb, wire, None)
}

/// The kernel command line of a VM; `gate`: init waits for the host's go-ahead before it
/// mounts the host's root (snapshot.rs).
pub fn append_for(plan: &BootPlan, node: Option<Node>, gate: bool) -> String {
    // no_timer_check: under TCG on a loaded host the kernel's IO-APIC timer check can miss its
    // window and panic ("IO-APIC + timer doesn't work!"), seen here at load 6+.
    // cryptomgr.notests + initcall_blacklist: builtin initcalls that only self-test crypto or
    // load keys nothing here uses; together ~0.8 s of a TCG boot (measured with initcall_debug).
    let mut append = String::from(
        "console=ttyS0 quiet panic=-1 tsc=reliable no_timer_check cryptomgr.notests \
         initcall_blacklist=crypto_kdf108_init,load_system_certificate_list,init_zswap,\
         init_encrypted",
    );
    if let Ok(extra) = std::env::var("LAB_VM_APPEND") {
        append.push(' ');
        append.push_str(&extra);
    }
    // A kernel whose module tree is not the host's /lib/modules/<ver> (one `cargo lab kernel
    // fetch` unpacked into the cache): init binds the tree there inside the guest, so that the
    // kernel's own module requests (a qdisc `tc` asks for, say) find their modules.
    if let Some(dir) = guest_module_tree(&plan.kernel, plan.userspace.as_ref()) {
        append.push_str(&format!(" LAB_MODDIR={}", dir.display()));
    }
    // Another userspace root (`--userspace`): init lays the overlay on it, and the host's own
    // directories on top (userspace.rs). check_root refused paths the command line cannot carry.
    if let Some(u) = &plan.userspace {
        append.push_str(&format!(
            " LAB_ROOT={} LAB_HOSTDIRS={}",
            u.root.display(),
            userspace::host_dirs().join(":")
        ));
    }
    if let Some(n) = node {
        append.push_str(&format!(" LAB_NODE={}", n.name()));
    }
    if gate {
        append.push_str(" LAB_GATE=1");
    }
    append
}

/// What a VM start adds for the snapshot: the gate port, and the state to load.
#[derive(Debug, Clone)]
pub struct Launch {
    /// `Some`: start with `-incoming exec:cat FILE`.
    pub incoming: Option<PathBuf>,
}

/// QEMU's arguments for a [`Launch`] (the append gets `LAB_GATE=1` in vm.rs).
fn qemu_args(launch: &Launch, gate: &Path) -> Vec<String> {
    let mut a = vec![
        "-chardev".to_string(),
        format!("socket,id=gate,path={},server=on,wait=off", gate.display()),
        "-device".into(),
        "virtserialport,chardev=gate,name=lab.gate".into(),
    ];
    if let Some(f) = &launch.incoming {
        a.push("-incoming".into());
        a.push(format!("exec:cat {}", shell_quote(f)));
    }
    a
}

/// A path as one word of `sh -c` (QEMU runs `exec:` URIs through the shell).
pub(crate) fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.to_string_lossy().replace('\'', r"'\''"))
}

/// [`start_one`], with what a snapshot's save or restore adds (snapshot.rs).
pub fn start_one_with(
    plan: &BootPlan,
    dir: &Path,
    node: Option<Node>,
    smp: u32,
    mem_mb: u32,
    wire: Option<Wire>,
    snap: Option<&Launch>,
) -> Result<Vm> {
    // The loopback VM's files are named as node a's.
    let node_files = node.unwrap_or(Node::A);
    let tag = node_files.name();
    let state = StateDir::at(dir);
    let console = state.console_log(node_files);
    let qemu_log = state.qemu_log(node_files);
    let agent_sock = state.agent_sock(node_files);
    let _ = std::fs::remove_file(&agent_sock);
    let qmp_sock = state.qmp_sock(node_files);
    let _ = std::fs::remove_file(&qmp_sock);
    let gate_sock = state.gate_sock(node_files);
    let _ = std::fs::remove_file(&gate_sock);
    let append = append_for(plan, node, snap.is_some());
    let mut a = Args::default();
    a.args([
        "-no-user-config",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
    ])
    // Named threads ("CPU 0/TCG", "worker" ...): the host's /proc/<pid>/task/*/comm tells
    // the vCPUs from the main loop (chapter 11 reads their schedstat).
    .arg("-name")
    .arg(format!("lab-{tag},debug-threads=on"))
    .arg("-machine")
    .arg(format!("pc,accel={}", plan.accel.name()))
    .args([
        "-cpu",
        if plan.accel == Accel::Kvm {
            "host"
        } else {
            "max"
        },
    ])
    .args(["-smp", &smp.to_string(), "-m", &mem_mb.to_string()])
    .arg("-kernel")
    .arg(&plan.image)
    .arg("-initrd")
    .arg(&plan.initrd)
    .args(["-append", &append])
    .arg("-serial")
    .arg(format!("file:{}", console.display()))
    // The 9p share and the agent's port are two functions of one PCI slot: they share one
    // interrupt link, which the guest's ACPI code (slow under TCG) then enables only once.
    .args([
        "-fsdev",
        "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device",
        "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,addr=0x3.0,multifunction=on",
    ])
    .arg("-chardev")
    .arg(format!(
        "socket,id=agent,path={},server=on,wait=off",
        agent_sock.display()
    ))
    .args(["-device", "virtio-serial-pci,id=vser,addr=0x3.1"])
    .args(["-device", "virtserialport,chardev=agent,name=lab.agent"])
    // The QEMU monitor (QMP) on a unix socket: `cargo lab trace` adds and removes a
    // filter-dump on the netdev through it, `cargo lab fault freeze/thaw` stops and continues
    // the VM.
    .arg("-qmp")
    .arg(format!("unix:{},server=on,wait=off", qmp_sock.display()));
    if let Some(l) = snap {
        a.args(qemu_args(l, &gate_sock));
    }
    if let Some(w) = &wire {
        // A stream, not a datagram socket: see wire/cable.rs for why (no loss under load).
        a.arg("-netdev").arg(format!(
            "stream,id=n0,server=off,addr.type=unix,addr.path={}",
            w.sock.display()
        ));
        a.arg("-device")
            .arg(format!("virtio-net-pci,netdev=n0,mac={}", w.mac));
        if let Some(p) = &w.pcap {
            a.arg("-object")
                .arg(format!("filter-dump,id=cap,netdev=n0,file={}", p.display()));
        }
    }
    let log = std::fs::File::create(&qemu_log)?;
    let cmd = tied_command(&qemu_binary()?, a.0)
        .stdin_null()
        .stdout_file(log.try_clone()?)
        .stderr_file(log);
    let child = spawn_tied(cmd).context("starting qemu-system-x86_64")?;
    Ok(Vm {
        node: node.unwrap_or(Node::A),
        console,
        qemu_log,
        agent_sock,
        child,
    })
}

/// Connects to a VM's agent and waits for its Ready, with a deadline; errors carry the tail of
/// the console and of QEMU's own log.
pub fn connect(vm: &Vm, deadline: Instant) -> Result<Conn> {
    let diag = |what: String| -> anyhow::Error {
        anyhow::anyhow!(
            "{what}\n--- last lines of {} ---\n{}\n--- {} ---\n{}",
            vm.console.display(),
            tail(&vm.console, 30),
            vm.qemu_log.display(),
            tail(&vm.qemu_log, 10)
        )
    };
    let stream = loop {
        if let Some(st) = vm.exited() {
            return Err(diag(format!("qemu exited early ({st})")));
        }
        match UnixStream::connect(&vm.agent_sock) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(diag(format!("cannot connect to the agent socket: {e}"))),
        }
    };
    let name = format!("node {}", vm.node.name());
    let conn = Conn::new(stream, &name)?;
    let left = deadline.saturating_duration_since(Instant::now());
    match conn.wait_ready(left) {
        Ok(()) => Ok(conn),
        Err(e) => {
            let st = vm.exited();
            vm.kill();
            Err(diag(match st {
                Some(st) => format!("the VM stopped during boot ({st}): {e}"),
                None => format!("the VM did not become ready: {e}"),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_versions_parse_and_old_ones_are_named() {
        for (text, want) in [
            (
                "QEMU emulator version 6.2.0 (Debian 1:6.2+dfsg-2ubuntu6.22)\nCopyright",
                Some((6, 2, 0)),
            ),
            (
                "QEMU emulator version 7.2.15 (Debian 1:7.2+dfsg-7+deb12u12)",
                Some((7, 2, 15)),
            ),
            (
                "QEMU emulator version 8.2.2 (Debian 1:8.2.2+ds-0ubuntu1.4)",
                Some((8, 2, 2)),
            ),
            ("QEMU emulator version 10.0.50", Some((10, 0, 50))),
            ("QEMU emulator version 9.1", Some((9, 1, 0))),
            ("", None),
            ("qemu-system-x86_64: something else", None),
            ("QEMU emulator version x.y", None),
        ] {
            assert_eq!(parse_qemu_version(text), want, "{text:?}");
        }
        assert!((6, 2) < QEMU_FOR_STREAM && (7, 2) >= QEMU_FOR_STREAM && (10, 0) > QEMU_FOR_STREAM);
    }

    /// A QEMU that reports 6.2 (a script standing in for the binary) is refused with both
    /// versions named.
    #[test]
    fn an_old_qemu_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("qemu-system-x86_64");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'QEMU emulator version 6.2.0 (Debian 1:6.2+dfsg-2ubuntu6.22)'\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = format!("{:#}", require_stream_netdev(&fake).unwrap_err());
        assert!(
            e.contains("QEMU 6.2.0") && e.contains("needs QEMU 7.2 or newer"),
            "{e}"
        );
        if let Some(q) = which("qemu-system-x86_64") {
            require_stream_netdev(&q).expect("this host's QEMU runs the pair");
        }
    }
}
