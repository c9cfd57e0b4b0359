//! Labs: `up`, `status`, `down`, and the daemon `up` starts (its relay sockets, its logs).

use super::interrupted;
use crate::course::workspace_root;
use crate::host_tools;
use crate::testbed::{Provider, Testbed};
use crate::vm_options::{self, VmOptions};
use crate::{Node, StateDir, Topology, testbed, vm};
use anyhow::{Context as _, Result, bail};
use std::ffi::OsStr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where `up` keeps labs and `exec` finds them: `LAB_STATE_DIR`, else this workspace's. Outside
/// any rxe-lab workspace (cargo's runner in another project, an installed `cargo-lab`): one
/// set of labs per user, keyed on `$HOME`.
pub(super) fn home() -> Result<PathBuf> {
    let ws = workspace_root()
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into())));
    Ok(testbed::daemon_home(&ws))
}

/// Is the daemon in `dir` answering?
pub(super) fn daemon_alive(dir: &Path) -> bool {
    let Ok(s) = UnixStream::connect(StateDir::at(dir).node_sock(Node::A)) else {
        return false;
    };
    let Ok(c) = crate::conn::Conn::new(s, "probe") else {
        return false;
    };
    c.wait_ready(Duration::from_secs(3)).is_ok()
}

pub(super) fn daemon_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(StateDir::at(dir).daemon_pid())
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Starts (or finds) the daemon of a topology under [`home`]. Returns true if it started one.
/// `cpus`: the pair's vCPUs per node (`--cpus`; else `LAB_PAIR_SMP`, else 1).
pub(super) fn up(t: Topology, verbose: bool, cpus: Option<u32>) -> Result<bool> {
    let dir = home()?.join(t.name());
    up_in(t, &dir, verbose, cpus)
}

pub(super) fn up_in(t: Topology, dir: &Path, verbose: bool, cpus: Option<u32>) -> Result<bool> {
    if testbed::chosen_provider()? == Provider::Native {
        if verbose {
            println!("{}: native rxe on this host: nothing to start", t.name());
        }
        return Ok(false);
    }
    // Asked for by `--cpus` or LAB_PAIR_SMP (checked here, before anything boots).
    let cpus = match cpus {
        Some(n) => Some(n),
        None => match std::env::var(vm_options::PAIR_SMP_VAR) {
            Ok(v) => Some(
                vm_options::parse_pair_smp(&v)
                    .with_context(|| format!("{}={v}", vm_options::PAIR_SMP_VAR))?,
            ),
            Err(_) => None,
        },
    };
    if daemon_alive(dir) {
        same_userspace(t, dir)?;
        same_cpus(t, dir, cpus)?;
        if verbose {
            eprintln!("{} lab already up ({})", t.name(), dir.display());
        }
        return Ok(false);
    }
    let child = start_daemon(t, dir, cpus)?;
    wait_daemon(t, dir, child, verbose)?;
    Ok(true)
}

/// A running pair serves a command that asks for a vCPU count (`--cpus`, LAB_PAIR_SMP) only if
/// its nodes have that many (the daemon writes its count in `cpus` when it boots).
fn same_cpus(t: Topology, dir: &Path, want: Option<u32>) -> Result<()> {
    let have = std::fs::read_to_string(dir.join("cpus"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    if let (Topology::Pair, Some(want), Some(have)) = (t, want, have)
        && want != have
    {
        bail!(
            "the running pair lab's nodes have {have} vCPU(s) each, and this command asks for \
             {want}; stop the lab first: `cargo lab down`"
        );
    }
    Ok(())
}

pub(super) fn start_daemon(t: Topology, dir: &Path, cpus: Option<u32>) -> Result<duct::Handle> {
    // A stale dir from a daemon that died: its qemu died with it (PDEATHSIG); clear the rest.
    if let Some(pid) = daemon_pid(dir)
        && vm::pid_alive(pid)
    {
        bail!(
            "a lab daemon (pid {pid}) owns {} but does not answer; run `cargo lab down` (or, if a \
             node was frozen with `cargo lab fault freeze`, `cargo lab fault clear`)",
            dir.display()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let log = std::fs::File::create(StateDir::at(dir).daemon_log())?;
    let exe = std::env::current_exe()?;
    let args = [
        OsStr::new("__daemon"),
        OsStr::new("--topology"),
        OsStr::new(t.name()),
        OsStr::new("--dir"),
        dir.as_os_str(),
    ];
    let mut cmd = duct::cmd(exe, args);
    if let Some((k, v)) = crate::kernel::child_env() {
        cmd = cmd.env(k, v);
    }
    if let Some((k, v)) = crate::userspace::child_env() {
        cmd = cmd.env(k, v);
    }
    if let Some(n) = cpus {
        cmd = cmd.env(vm_options::PAIR_SMP_VAR, n.to_string());
    }
    let child = cmd
        .stdin_null()
        .stdout_file(log.try_clone()?)
        .stderr_file(log)
        // How it ended is an answer of wait_daemon's, not an error.
        .unchecked()
        // Its own process group: a Ctrl-C in this terminal is for us, and we decide.
        .before_spawn(|c| {
            std::os::unix::process::CommandExt::process_group(c, 0);
            Ok(())
        })
        .start()
        .context("starting the lab daemon")?;
    Ok(child)
}

/// A running daemon serves this command only if its guests run the userspace it asks for
/// (`--userspace`, `LAB_USERSPACE`): the error says how to get the other one.
pub(super) fn same_userspace(t: Topology, dir: &Path) -> Result<()> {
    let want = testbed::userspace_name(&crate::userspace::chosen()?);
    let have = testbed::daemon_userspace(dir);
    if want != have {
        bail!(
            "the running {} lab's guests run userspace {have}, and this command asks for \
             {want}; stop the lab first: `cargo lab down`",
            t.name()
        );
    }
    Ok(())
}

/// Where logs of failed labs are kept: `/tmp/rxe-lab-logs.<pid>/` (CI uploads
/// `/tmp/rxe-lab*/**/*.log` on failure; not reaped: the name has no `rxe-lab.` prefix).
pub(super) fn failed_logs_dir() -> PathBuf {
    std::env::temp_dir().join(format!("rxe-lab-logs.{}", std::process::id()))
}

pub(super) fn wait_daemon(
    t: Topology,
    dir: &Path,
    child: duct::Handle,
    verbose: bool,
) -> Result<()> {
    let opts = VmOptions::from_env()?;
    let limit = opts.boot_timeout + Duration::from_secs(60);
    let t0 = Instant::now();
    let mut next_note = Duration::from_secs(10);
    if verbose {
        eprintln!("booting the {} lab ...", t.name());
    }
    let stop = interrupted();
    loop {
        if stop.load(Ordering::SeqCst) {
            host_tools::kill_and_reap(&child);
            let _ = std::fs::remove_dir_all(dir);
            if let Some(home) = dir.parent() {
                let _ = std::fs::remove_dir(home);
            }
            bail!("interrupted: the {} lab was torn down", t.name());
        }
        if StateDir::at(dir).ready().exists() {
            let info = std::fs::read_to_string(StateDir::at(dir).info()).unwrap_or_default();
            if verbose {
                eprintln!(
                    "{} lab up in {:.1} s: {}",
                    t.name(),
                    t0.elapsed().as_secs_f64(),
                    info.trim()
                );
            }
            return Ok(());
        }
        let exited = match child.try_wait() {
            Ok(o) => o.map(|o| o.status),
            Err(e) => {
                host_tools::kill_and_reap(&child);
                return Err(e).context("waiting for the lab daemon");
            }
        };
        if let Some(st) = exited {
            let log = vm::tail(&StateDir::at(dir).daemon_log(), 40);
            let keep = failed_logs_dir();
            if keep_logs(dir, &keep) > 0 {
                eprintln!("(the lab's logs are kept in {})", keep.display());
            }
            let _ = std::fs::remove_dir_all(dir);
            if let Some(home) = dir.parent() {
                let _ = std::fs::remove_dir(home);
            }
            bail!(
                "the {} lab did not start ({st}):\n{log}\nnext: `cargo lab doctor` shows what is \
                 missing",
                t.name()
            );
        }
        if t0.elapsed() > limit {
            host_tools::kill_and_reap(&child);
            let keep = failed_logs_dir();
            if keep_logs(dir, &keep) > 0 {
                eprintln!("(the lab's logs are kept in {})", keep.display());
            }
            bail!(
                "the {} lab did not start within {} s\n{}\n{}",
                t.name(),
                limit.as_secs(),
                vm::tail(&StateDir::at(dir).daemon_log(), 20),
                vm::tail(&StateDir::at(dir).console_log(Node::A), 20)
            );
        }
        if verbose && t0.elapsed() > next_note {
            next_note += Duration::from_secs(10);
            eprintln!("  ... {} s", t0.elapsed().as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Copies a lab dir's `*.log` files to `<dest>/<name of dir>/`; returns how many.
pub(super) fn keep_logs(dir: &Path, dest: &Path) -> usize {
    let Some(name) = dir.file_name() else {
        return 0;
    };
    let to = dest.join(name);
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "log")
            && std::fs::create_dir_all(&to).is_ok()
            && std::fs::copy(&p, to.join(e.file_name())).is_ok()
        {
            n += 1;
        }
    }
    n
}

pub(super) fn daemon(t: Topology, dir: &Path) -> Result<i32> {
    let term = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, term.clone())?;
    }
    std::fs::write(
        StateDir::at(dir).daemon_pid(),
        std::process::id().to_string(),
    )?;
    // Before the lab is ready: whoever attaches then finds the userspace it runs.
    std::fs::write(
        StateDir::at(dir).userspace(),
        testbed::userspace_name(&crate::userspace::chosen()?),
    )?;
    let opts = VmOptions::from_env()?;
    if t == Topology::Pair {
        std::fs::write(dir.join("cpus"), opts.pair_smp.to_string())?;
    }
    let lab = Testbed::boot_in(t, &opts, dir.to_path_buf(), false)?;
    std::fs::write(
        StateDir::at(dir).info(),
        format!(
            "pid {}, {}, qemu pids {:?}",
            std::process::id(),
            lab.origin,
            lab.vm_pids()
        ),
    )?;
    eprintln!("lab daemon: {} {}", t.name(), lab.origin);
    let r = lab.serve(term);
    let _ = std::fs::remove_dir_all(dir);
    r.map(|_| 0)
}

pub(super) fn status() -> Result<i32> {
    if testbed::chosen_provider()? == Provider::Native {
        println!("provider: native (this host has an RDMA device); no VM needed");
    }
    let home = home()?;
    for t in Topology::all() {
        let dir = home.join(t.name());
        if daemon_alive(&dir) {
            let info = std::fs::read_to_string(StateDir::at(&dir).info()).unwrap_or_default();
            println!("{:<9} up    {}", t.name(), info.trim());
            // `cargo lab fault kill|restart` changes a node's VM (the pids above are the
            // first boot's).
            for n in [crate::Node::A, crate::Node::B] {
                let restarts = testbed::generation(&dir, n);
                if StateDir::at(&dir).killed(n).exists() {
                    println!(
                        "          node {}: killed (`cargo lab fault restart {}`)",
                        n.name(),
                        n.name()
                    );
                } else if restarts > 0 {
                    println!("          node {}: restarted {restarts} time(s)", n.name());
                }
            }
            println!(
                "          console: {}",
                StateDir::at(&dir).console_log(Node::A).display()
            );
        } else if dir.exists() {
            println!(
                "{:<9} down  (stale state in {}; `cargo lab down` clears it)",
                t.name(),
                dir.display()
            );
        } else {
            println!("{:<9} down", t.name());
        }
    }
    Ok(0)
}

pub(super) fn stop_daemon(dir: &Path) -> bool {
    let mut was = false;
    if let Ok(s) = UnixStream::connect(StateDir::at(dir).node_sock(Node::A))
        && let Ok(c) = crate::conn::Conn::new(s, "down")
    {
        c.shutdown();
        was = true;
    }
    if let Some(pid) = daemon_pid(dir) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while vm::pid_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if vm::pid_alive(pid) {
            let _ = duct::cmd("kill", ["-s", "KILL", &pid.to_string()])
                .unchecked()
                .run();
        }
        was = true;
    }
    let _ = std::fs::remove_dir_all(dir);
    was
}

pub(super) fn down(ts: &[Topology]) -> Result<i32> {
    let home = home()?;
    for t in ts {
        let dir = home.join(t.name());
        if dir.exists() {
            if stop_daemon(&dir) {
                println!("{} lab stopped", t.name());
            } else {
                println!("{} lab: cleared stale state", t.name());
            }
        } else {
            println!("{} lab: not running", t.name());
        }
    }
    let _ = std::fs::remove_dir(&home);
    Ok(0)
}
