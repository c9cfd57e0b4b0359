//! A lab: where the rxe device(s) are, and a way to run commands there.
//!
//! Three ways to get one (see [`Testbed::acquire`]):
//! - `native`: this host has an RDMA device: commands run here;
//! - attach: a lab daemon (`cargo lab up`, or the labs `cargo lab test` exports through
//!   `LAB_STATE_DIR`) already runs the VMs: connect to its relay sockets;
//! - boot: start the VMs in this process (a test binary without a daemon).
//!
//! (Named `Testbed`, not `Lab`, so that it never reads like the `lab` crate of the verbs.)
//! `native.rs` brings up the native provider's device; `relay.rs` is the daemon's side of an
//! attached lab.

use crate::conn::{Cmd, Conn, Event, Output};
use crate::proto;
use crate::vm_options::{Accel, VmOptions};
use crate::{Node, StateDir, Topology};
use crate::{snapshot, vm};
use anyhow::{Context as _, Result, bail};
use contracts::HostRequest;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod native;
mod owner;
mod relay;
pub use native::{
    NATIVE_DEVICE, NATIVE_NETDEV, ensure_native_device, is_soft_device, native_available,
    native_device, native_loadable, native_setup_command, raise_memlock, rdma_devices,
    soft_devices,
};
use owner::Owner;
pub use owner::generation;
pub use relay::lost_in_relay;
use relay::relay;

/// Which provider a lab uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Native,
    Vm,
}

/// One node of a lab.
#[derive(Debug)]
pub struct LabNode {
    pub node: Node,
    pub conn: Conn,
    /// The guest console log (VM labs).
    pub console: Option<PathBuf>,
}

/// A running lab.
#[derive(Debug)]
pub struct Testbed {
    pub topology: Topology,
    pub provider: Provider,
    pub nodes: Vec<LabNode>,
    /// What this process holds of the lab: VMs it booted, a daemon's lab, or native rxe.
    held: Held,
    /// How the lab came to be, for messages ("booted in 7.9 s (tcg)", "attached to ...").
    pub origin: String,
}

/// The states a lab can be in, from this process's side.
#[derive(Debug)]
enum Held {
    /// VMs this process booted: their owner answers host requests and restarts a node. The
    /// state dir is removed on drop when `remove_dir` (a private lab; not the daemon's).
    Owned {
        owner: Arc<Owner>,
        dir: PathBuf,
        remove_dir: bool,
    },
    /// A lab a daemon serves (`cargo lab up`); `daemon_pid`: the daemon's pid when this process
    /// attached (None when its file was unreadable).
    Attached {
        dir: PathBuf,
        daemon_pid: Option<u32>,
    },
    /// rxe on this host: no VM, no state dir.
    Native,
}

/// Heartbeat: a node silent this long gets a ping ...
const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// ... which must be answered within this (a stuck daemon, relay, agent or VM).
const HEARTBEAT_LIMIT: Duration = Duration::from_secs(30);

/// A heartbeat over a lab's connections that never blocks: [`Heartbeat::check`] sends a ping
/// when due and fails when one goes unanswered for [`HEARTBEAT_LIMIT`].
#[derive(Debug)]
pub struct Heartbeat {
    /// Per node: (pongs seen, when the last pong was seen, outstanding ping sent at).
    nodes: Vec<(u64, Instant, Option<Instant>)>,
}

impl Heartbeat {
    pub fn new(lab: &Testbed) -> Heartbeat {
        let now = Instant::now();
        Heartbeat {
            nodes: lab
                .nodes
                .iter()
                .map(|n| (n.conn.pongs().0, now, None))
                .collect(),
        }
    }

    /// Is the lab alive? Cheap checks ([`Testbed::check`]) each call, plus the heartbeat.
    pub fn check(&mut self, lab: &Testbed) -> Result<()> {
        lab.check()?;
        let now = Instant::now();
        for (n, hb) in lab.nodes.iter().zip(self.nodes.iter_mut()) {
            if lab.killed_on_purpose(n.node) {
                *hb = (n.conn.pongs().0, now, None);
                continue;
            }
            let (count, err) = n.conn.pongs();
            // A restarted node's connection counts from zero again.
            if count < hb.0 {
                *hb = (count, now, None);
            }
            if count > hb.0 {
                hb.0 = count;
                hb.1 = now;
                hb.2 = None;
                if !err.is_empty() {
                    bail!("node {}: {err}", n.node.name());
                }
            }
            match hb.2 {
                Some(sent) if now.duration_since(sent) > HEARTBEAT_LIMIT => {
                    bail!(
                        "node {}: no answer to a heartbeat for {} s: the lab (daemon, agent or \
                         VM) is stuck",
                        n.node.name(),
                        HEARTBEAT_LIMIT.as_secs()
                    );
                }
                Some(_) => {}
                None if now.duration_since(hb.1) >= HEARTBEAT_EVERY => {
                    n.conn.send_ping()?;
                    hb.2 = Some(now);
                }
                None => {}
            }
        }
        Ok(())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Held::Owned {
            owner,
            dir,
            remove_dir,
        } = &self.held
        {
            for v in owner.vms.lock().unwrap().iter() {
                v.kill();
            }
            if *remove_dir {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// Where `cargo lab up` keeps this workspace's labs: `$LAB_STATE_DIR` if set, else
/// [`up_home`]. One subdir per topology.
pub fn daemon_home(workspace: &Path) -> PathBuf {
    match std::env::var_os("LAB_STATE_DIR") {
        Some(d) => PathBuf::from(d),
        None => up_home(workspace),
    }
}

/// `<tmp>/rxe-lab-up.<hash of the workspace path and user>`.
pub fn up_home(workspace: &Path) -> PathBuf {
    let uid = std::fs::read_to_string("/proc/self/loginuid")
        .ok()
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let key = crate::initramfs::fnv64(&[workspace.to_string_lossy().as_bytes(), uid.as_bytes()]);
    std::env::temp_dir().join(format!("rxe-lab-up.{:08x}", key as u32))
}

/// `LAB_PROVIDER=vm|native`, else native when an RDMA device exists (or rdma_rxe can be loaded
/// here as root), else vm.
pub fn chosen_provider() -> Result<Provider> {
    match std::env::var("LAB_PROVIDER").as_deref() {
        Ok("native") => {
            if !native_available() && !native_loadable() {
                bail!(
                    "LAB_PROVIDER=native but this host has no RDMA device; fix: {} (or \
                     `bash scripts/setup.sh --native`), or unset LAB_PROVIDER to use the microVM",
                    native_setup_command()
                );
            }
            Ok(Provider::Native)
        }
        Ok("vm") => Ok(Provider::Vm),
        Ok("") | Err(_) => Ok(if native_available() || native_loadable() {
            Provider::Native
        } else {
            Provider::Vm
        }),
        Ok(other) => bail!("LAB_PROVIDER={other}: expected `vm` or `native`"),
    }
}

/// The userspace a daemon's guests run, as its file `userspace` says: a root, or `host`.
pub fn daemon_userspace(dir: &Path) -> String {
    std::fs::read_to_string(StateDir::at(dir).userspace())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "host".into())
}

/// How [`daemon_userspace`] names a userspace: its root, or `host`.
pub fn userspace_name(u: &Option<crate::userspace::Userspace>) -> String {
    match u {
        Some(u) => u.root.display().to_string(),
        None => "host".into(),
    }
}

/// A pid file's pid.
fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl Testbed {
    /// Runs commands on this host (an RDMA device exists here). Both topologies are served by
    /// the one device: in `pair`, nodes a and b are this host (roles keep their node, and the
    /// server's address is 127.0.0.1). What needs a real wire between two kernels (a packet
    /// larger than the link's MTU being dropped) cannot happen on one device: see
    /// [`Testbed::single_device`].
    pub fn native(topology: Topology) -> Testbed {
        // What runs here opens the provider's device, not the host's first one (a runner's MANA
        // or mlx5 device sorts before rxe0). When it is the host's only RDMA device, the first
        // one is it: nothing is passed, and the programs print what they print in the microVM
        // lab ("open the first device"), so the two providers share one set of snapshots.
        let only = |d: &String| {
            std::fs::read_dir("/sys/class/infiniband")
                .map(|es| {
                    let names: Vec<String> = es
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect();
                    names.len() == 1 && names[0] == *d
                })
                .unwrap_or(false)
        };
        let extra: Vec<(String, String)> = native_device()
            .filter(|d| !only(d))
            .map(|d| ("LAB_DEVICE".to_string(), d))
            .into_iter()
            .collect();
        let nodes = topology
            .nodes()
            .iter()
            .map(|&n| LabNode {
                node: n,
                conn: Conn::local_with(&format!("native {}", n.name()), &extra),
                console: None,
            })
            .collect();
        Testbed {
            topology,
            provider: Provider::Native,
            nodes,
            held: Held::Native,
            origin: "native rxe on this host".into(),
        }
    }

    /// Boots the topology's VMs in this process, in a fresh private state dir.
    pub fn boot(topology: Topology, opts: &VmOptions) -> Result<Testbed> {
        let dir = vm::new_state_dir(topology.name())?;
        Self::boot_in(topology, opts, dir, true)
    }

    /// Boots into a given state dir.
    pub fn boot_in(
        topology: Topology,
        opts: &VmOptions,
        dir: PathBuf,
        owned: bool,
    ) -> Result<Testbed> {
        let t0 = Instant::now();
        let plan = vm::plan(topology, opts)?;
        // One retry: under TCG on a loaded host an early kernel check can still fail now and
        // then; a second boot usually succeeds. The first attempt's logs are kept.
        let keep = std::env::temp_dir().join(format!(
            "rxe-lab-failed-boot.{}.{}",
            std::process::id(),
            topology.name()
        ));
        let save_logs = || {
            let _ = std::fs::create_dir_all(&keep);
            let state = StateDir::at(&dir);
            for n in Node::ALL {
                for f in [state.console_log(n), state.qemu_log(n)] {
                    if let Some(name) = f.file_name() {
                        let _ = std::fs::copy(&f, keep.join(name));
                    }
                }
            }
        };
        let booted = match snapshot::boot(topology, opts, &plan, &dir) {
            Ok(b) => b,
            Err(first) => {
                save_logs();
                eprintln!(
                    "harness: the {} lab failed to boot ({}); retrying once (logs in {})",
                    topology.name(),
                    first.to_string().lines().next().unwrap_or(""),
                    keep.display()
                );
                match snapshot::boot(topology, opts, &plan, &dir) {
                    Ok(b) => b,
                    Err(e) => {
                        save_logs();
                        if owned {
                            let _ = std::fs::remove_dir_all(&dir);
                        }
                        return Err(e.context(format!(
                            "two boots failed; logs kept in {}",
                            keep.display()
                        )));
                    }
                }
            }
        };
        let (booted, cable) = booted;
        let how = snapshot::how(&dir);
        let mut nodes = vec![];
        let mut vms = vec![];
        for (v, c) in booted {
            nodes.push(LabNode {
                node: v.node,
                conn: c,
                console: Some(v.console.clone()),
            });
            vms.push(v);
        }
        let owner = Arc::new(Owner {
            dir: dir.clone(),
            topology,
            plan: plan.clone(),
            opts: opts.clone(),
            vms: Mutex::new(vms),
            cable,
            conns: nodes.iter().map(|n| (n.node, n.conn.clone())).collect(),
            busy: Mutex::new(()),
        });
        // The agents pass their guest programs' requests here ("freeze a", "kill b" ...).
        for n in &nodes {
            let w = Arc::downgrade(&owner);
            n.conn
                .serve_host(Arc::new(move |line: &str| match w.upgrade() {
                    Some(o) => o.handle(line),
                    None => Err("the lab is shutting down".into()),
                }));
        }
        Ok(Testbed {
            topology,
            provider: Provider::Vm,
            nodes,
            held: Held::Owned {
                owner,
                dir,
                remove_dir: owned,
            },
            origin: format!(
                "{} in {:.1} s ({}, kernel {}{})",
                how,
                t0.elapsed().as_secs_f64(),
                plan.accel.name(),
                plan.kernel.version,
                match &plan.userspace {
                    Some(u) => format!(", userspace {}", u.root.display()),
                    None => String::new(),
                }
            ),
        })
    }

    /// Connects to a running daemon's lab in `dir` (`<home>/<topology>`).
    pub fn attach(topology: Topology, dir: &Path) -> Result<Testbed> {
        let state = StateDir::at(dir);
        let daemon_pid = read_pid(&state.daemon_pid());
        let mut nodes = vec![];
        for &n in topology.nodes() {
            let sock = state.node_sock(n);
            let s = UnixStream::connect(&sock)
                .with_context(|| format!("connecting to {}", sock.display()))?;
            let conn = Conn::new(s, &format!("node {}", n.name()))?;
            conn.wait_ready(Duration::from_secs(10))
                .map_err(|e| anyhow::anyhow!(e))?;
            nodes.push(LabNode {
                node: n,
                conn,
                console: Some(state.console_log(n)),
            });
        }
        Ok(Testbed {
            topology,
            provider: Provider::Vm,
            nodes,
            held: Held::Attached {
                dir: dir.to_path_buf(),
                daemon_pid,
            },
            origin: format!("attached to the lab in {}", dir.display()),
        })
    }

    /// A lab for `topology`: native if chosen; else a running daemon's (in `LAB_STATE_DIR` or
    /// this workspace's `cargo lab up`); else boots VMs here.
    pub fn acquire(topology: Topology, workspace: Option<&Path>) -> Result<Testbed> {
        if chosen_provider()? == Provider::Native {
            ensure_native_device()?;
            return Ok(Testbed::native(topology));
        }
        // The labs `cargo lab up` keeps: in `LAB_STATE_DIR` when it is set (it replaces the
        // workspace's dir, as for `up` itself: `cargo lab test` links the labs it reuses there),
        // else in this workspace's dir.
        let homes: Vec<PathBuf> = match (std::env::var_os("LAB_STATE_DIR"), workspace) {
            (Some(d), _) => vec![PathBuf::from(d)],
            (None, Some(ws)) => vec![up_home(ws)],
            (None, None) => vec![],
        };
        // A daemon whose guests run another userspace than this process asks for is not
        // this process's lab: it boots its own.
        let want = userspace_name(&crate::userspace::chosen()?);
        for h in homes {
            let dir = h.join(topology.name());
            if StateDir::at(&dir).node_sock(Node::A).exists()
                && daemon_userspace(&dir) == want
                && let Ok(lab) = Testbed::attach(topology, &dir)
            {
                return Ok(lab);
            }
        }
        Testbed::boot(topology, &VmOptions::from_env()?)
    }

    /// The connection to a node (loopback has one node: every role runs on it).
    pub fn conn(&self, node: Node) -> &Conn {
        self.nodes
            .iter()
            .find(|n| n.node == node)
            .map(|n| &n.conn)
            .unwrap_or(&self.nodes[0].conn)
    }

    /// Do both nodes share one rxe device (the native provider's pair)? Then packets between
    /// them loop back inside rxe and never cross a netdev: nothing enforces an MTU.
    pub fn single_device(&self) -> bool {
        self.provider == Provider::Native
    }

    /// A pair whose nodes are two kernels on a wire, for what one device cannot show (a
    /// packet larger than the link's MTU is dropped): the microVM pair, booted in this process,
    /// when KVM is usable here (a native host with QEMU and KVM, e.g. a CI runner). Without KVM
    /// it is not attempted (under TCG inside a VM it would take far too long): the error says
    /// why and which command runs the case instead.
    pub fn boot_wire_pair() -> Result<Testbed> {
        let instead = "run it where the pair is two VMs: `LAB_PROVIDER=vm cargo lab test` (needs \
                       QEMU: `cargo lab setup --vm`)";
        if std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_err()
        {
            bail!(
                "this case needs two nodes on a wire; the native provider serves the pair on one \
                 device, and without a usable /dev/kvm no microVM pair is booted for it here; \
                 {instead}"
            );
        }
        let mut opts = VmOptions::from_env()?;
        let plan = vm::plan(Topology::Pair, &opts)
            .with_context(|| format!("booting a microVM pair for a wire; {instead}"))?;
        if plan.accel != Accel::Kvm {
            bail!(
                "this case needs two nodes on a wire, and KVM does not run guests here (the probe \
                 fell back to TCG); {instead}"
            );
        }
        opts.accel = Some(Accel::Kvm);
        Testbed::boot(Topology::Pair, &opts)
    }

    /// The server address chapters' clients use (docs/conventions.md §2).
    pub fn server_addr(&self) -> &'static str {
        match (self.provider, self.topology) {
            (Provider::Vm, Topology::Pair) => "10.77.0.1",
            _ => "127.0.0.1",
        }
    }

    /// The tail of every node's console log (for errors).
    pub fn console_tail(&self, lines: usize) -> String {
        let mut s = String::new();
        for n in &self.nodes {
            if let Some(c) = &n.console {
                s.push_str(&format!(
                    "--- last lines of {} (node {}) ---\n{}\n",
                    c.display(),
                    n.node.name(),
                    vm::tail(c, lines)
                ));
            }
        }
        s
    }

    /// Are all nodes reachable?
    pub fn is_alive(&self) -> bool {
        self.check().is_ok()
    }

    /// Cheap liveness checks (no round trip): every connection open, every QEMU this process
    /// started still running, the daemon of an attached lab still the same live process.
    pub fn check(&self) -> Result<()> {
        for n in &self.nodes {
            if self.killed_on_purpose(n.node) {
                continue;
            }
            if let Some(why) = n.conn.closed_why() {
                bail!("node {}: {why}", n.node.name());
            }
        }
        let vms = match &self.held {
            Held::Owned { owner, .. } => owner.vms.lock().unwrap(),
            Held::Attached { dir, daemon_pid } => return check_daemon(dir, *daemon_pid),
            Held::Native => return Ok(()),
        };
        for v in vms.iter() {
            if self.killed_on_purpose(v.node) {
                continue;
            }
            if let Some(st) = v.exited() {
                bail!(
                    "qemu of node {} (pid {}) exited: {st}",
                    v.node.name(),
                    v.pid()
                );
            }
        }
        Ok(())
    }

    /// Is node `n` down because someone asked (`kill`, until its `restart`)?
    pub fn killed_on_purpose(&self, n: Node) -> bool {
        self.dir()
            .is_some_and(|d| StateDir::at(d).killed(n).exists())
    }

    /// The lab's state dir (sockets, console logs): none for native rxe.
    pub fn dir(&self) -> Option<&Path> {
        match &self.held {
            Held::Owned { dir, .. } | Held::Attached { dir, .. } => Some(dir),
            Held::Native => None,
        }
    }

    /// Is this a lab a daemon serves (not one this process booted, not native)?
    pub fn is_attached(&self) -> bool {
        matches!(self.held, Held::Attached { .. })
    }

    /// A request to the lab's owner (freeze, kill or restart a node, its status): served here
    /// when this process runs the VMs, else by the daemon that does.
    pub fn host(&self, request: HostRequest) -> Result<String> {
        match &self.held {
            Held::Owned { owner, .. } => owner.carry_out(request).map_err(anyhow::Error::msg),
            Held::Attached { .. } => self.nodes[0]
                .conn
                .host_request(&request.to_string(), Duration::from_secs(180)),
            Held::Native => bail!(
                "{:?} needs the microVM lab: a native lab has no VM to freeze, kill or \
                 restart (`LAB_PROVIDER=vm`)",
                request.to_string()
            ),
        }
    }

    /// What to say when the lab died under a run: why, the consoles' tails, the next command.
    pub fn dead_report(&self, why: &dyn std::fmt::Display) -> String {
        let next = if self.is_attached() {
            "next: `cargo lab status` shows the shared lab; `cargo lab down && cargo lab up` \
             restarts it (or unset LAB_STATE_DIR to let the test boot its own)"
        } else {
            "next: run it again; if the VM keeps dying, `cargo lab doctor` and the console log \
             above say why"
        };
        format!(
            "the lab died under the run: {why}\n{}{next}",
            self.console_tail(20)
        )
    }

    /// Runs one command to completion on a node; the command is killed when `limit` passes
    /// (status `TimedOut`); a lab that dies meanwhile (daemon, VM or connection gone, or a
    /// heartbeat unanswered) ends the wait at once with an error.
    pub fn run(&self, node: Node, cmd: &Cmd, limit: Duration) -> Result<Output> {
        let (tx, rx) = std::sync::mpsc::channel();
        let conn = self.conn(node);
        let id = conn
            .spawn(cmd, move |e| {
                let _ = tx.send(e);
            })
            .map_err(|e| anyhow::anyhow!("{}", self.dead_report(&e)))?;
        let deadline = Instant::now() + limit;
        let mut hb = Heartbeat::new(self);
        let mut out = Output {
            status: proto::ExitStatus::Code(-1),
            stdout: vec![],
            stderr: vec![],
        };
        let mut killed_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if killed_at.is_none() && now >= deadline {
                conn.kill(id);
                killed_at = Some(now);
            }
            if let Some(k) = killed_at
                && now.duration_since(k) > Duration::from_secs(10)
            {
                bail!(
                    "{}: the command did not end within 10 s of its kill\n{}",
                    conn.name(),
                    self.console_tail(20)
                );
            }
            let wait = deadline
                .saturating_duration_since(now)
                .clamp(Duration::from_millis(50), Duration::from_millis(500));
            match rx.recv_timeout(wait) {
                Ok(Event::Stdout(d)) => out.stdout.extend(d),
                Ok(Event::Stderr(d)) => out.stderr.extend(d),
                Ok(Event::Exit(s)) => {
                    out.status = if killed_at.is_some() {
                        proto::ExitStatus::TimedOut
                    } else {
                        s
                    };
                    return Ok(out);
                }
                Ok(Event::Lost(why)) => bail!("{}", self.dead_report(&why)),
                Err(_) => {
                    if let Err(why) = hb.check(self) {
                        conn.kill(id);
                        bail!("{}", self.dead_report(&why));
                    }
                }
            }
        }
    }

    /// The QEMU processes (pids) this lab owns.
    pub fn vm_pids(&self) -> Vec<u32> {
        match &self.held {
            Held::Owned { owner, .. } => {
                owner.vms.lock().unwrap().iter().map(|v| v.pid()).collect()
            }
            Held::Attached { .. } | Held::Native => vec![],
        }
    }

    /// Serves this lab to other processes: a relay socket per node (`node-<x>.sock` in the
    /// state dir) speaking the agent protocol. Returns when a client asks for Shutdown or a VM
    /// dies. Used by the `cargo lab up` daemon.
    pub fn serve(self, term: Arc<std::sync::atomic::AtomicBool>) -> Result<()> {
        let dir = self
            .dir()
            .context("a daemon needs a state dir")?
            .to_path_buf();
        let stop = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let lab = Arc::new(self);
        for n in &lab.nodes {
            let sock = StateDir::at(&dir).node_sock(n.node);
            let _ = std::fs::remove_file(&sock);
            let listener =
                UnixListener::bind(&sock).with_context(|| format!("binding {}", sock.display()))?;
            let conn = n.conn.clone();
            let stop = stop.clone();
            let killed = StateDir::at(&dir).killed(n.node);
            std::thread::spawn(move || {
                for s in listener.incoming().flatten() {
                    let conn = conn.clone();
                    let stop = stop.clone();
                    let killed = killed.clone();
                    std::thread::spawn(move || relay(s, conn, stop, killed));
                }
            });
        }
        std::fs::write(StateDir::at(&dir).ready(), "")?;
        let (m, cv) = &*stop;
        let mut g = m.lock().unwrap();
        while !*g {
            let (g2, _) = cv.wait_timeout(g, Duration::from_millis(500)).unwrap();
            g = g2;
            if !lab.is_alive() {
                eprintln!("lab daemon: a VM stopped; shutting down");
                break;
            }
            if term.load(std::sync::atomic::Ordering::SeqCst) {
                eprintln!("lab daemon: signalled; shutting down");
                break;
            }
        }
        drop(g);
        for n in &lab.nodes {
            let _ = std::fs::remove_file(StateDir::at(&dir).node_sock(n.node));
        }
        let _ = std::fs::remove_file(StateDir::at(&dir).ready());
        Ok(())
    }
}

/// An attached lab's daemon: still the same live process?
fn check_daemon(dir: &Path, daemon_pid: Option<u32>) -> Result<()> {
    if let Some(pid) = daemon_pid {
        if !vm::pid_alive(pid) {
            bail!("the lab daemon (pid {pid}) is gone");
        }
        match read_pid(&StateDir::at(dir).daemon_pid()) {
            Some(now) if now != pid => {
                bail!(
                    "the lab in {} was restarted (daemon pid {pid}, now {now})",
                    dir.display()
                );
            }
            None => {
                bail!(
                    "the lab in {} was stopped (`cargo lab down`?)",
                    dir.display()
                );
            }
            _ => {}
        }
    }
    Ok(())
}
