//! `exec` and `shell`: a command where the rxe device is, as a runner (environment, stdin,
//! exit status), and `exec --cargo`.

use super::labs::{daemon_alive, home, same_userspace, up_in};
use super::wire::{finish_trace, start_trace};
use super::{TopoArg, interrupted};
use crate::conn::{Cmd, Event};
use crate::proto::ExitStatus;
use crate::testbed::{Provider, Testbed};
use crate::{Node, Topology, testbed};
use anyhow::{Context as _, Result, bail};
use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

pub(super) fn pick_topology(node: Option<Node>, t: Option<TopoArg>) -> Result<Topology> {
    Ok(match (t, node) {
        (Some(TopoArg::One(t)), _) => t,
        (Some(TopoArg::All), _) => bail!("--topology all: pick one (loopback or pair)"),
        // Nodes are the pair's: naming one picks the pair topology.
        (None, Some(_)) => Topology::Pair,
        (None, None) => Topology::Loopback,
    })
}

/// The lab for exec/shell: native, or this workspace's daemon (started if needed).
pub(super) fn lab_for_exec(t: Topology) -> Result<Testbed> {
    if testbed::chosen_provider()? == Provider::Native {
        testbed::ensure_native_device()?;
        return Ok(Testbed::native(t));
    }
    let dir = home()?.join(t.name());
    if daemon_alive(&dir) {
        same_userspace(t, &dir)?;
    } else if up_in(t, &dir, true, None)? {
        eprintln!(
            "(the {} lab keeps running for the next commands; `cargo lab down` stops it)",
            t.name()
        );
    }
    Testbed::attach(t, &dir)
}

/// Variables that pass from here to a command in the lab without `-e`.
pub fn passes_by_default(k: &str) -> bool {
    const PREFIXES: &[&str] = &["RUST_", "CARGO_", "LAB_", "IBVERBS_", "RDMAV_", "INSTA_"];
    (PREFIXES.iter().any(|p| k.starts_with(p)) && k != "LAB_STATE_DIR")
        // CARGO: the cargo that runs a test; insta, for one, asks it for the workspace root.
        || matches!(k, "CARGO" | "TERM" | "NO_COLOR" | "CLICOLOR")
}

/// `-e VAR=VALUE` / `-e VAR` into (VAR, VALUE).
pub(super) fn parse_env_flags(flags: &[String]) -> Result<Vec<(String, String)>> {
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

pub(super) fn lab_env(lab: &Testbed, node: Node) -> Vec<(String, String)> {
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

pub(super) fn cwd() -> String {
    std::env::current_dir()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/".into())
}

/// Runs a command on a node, streaming its output here (and our stdin there, when it is a
/// pipe or a file); returns its exit code.
pub(super) fn stream(
    lab: &Testbed,
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
    let id = conn.spawn(&cmd, move |e| {
        let _ = tx.send(e);
    })?;
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
    let mut hb = testbed::Heartbeat::new(lab);
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

pub(super) fn exec(
    node: Option<Node>,
    t: Option<TopoArg>,
    env: &[String],
    cmd: Vec<String>,
) -> Result<i32> {
    let env = parse_env_flags(env)?;
    let t = pick_topology(node, t)?;
    let lab = lab_for_exec(t)?;
    // A terminal is not forwarded (there is no pty in the lab): the command reads end of file.
    let forward = !std::io::IsTerminal::is_terminal(&std::io::stdin());
    stream(&lab, node.unwrap_or(Node::A), cmd, &env, forward)
}

/// `cargo lab exec --trace FILE -- CMD`: `exec` on the pair with the wire recorded.
pub(super) fn exec_traced(
    node: Option<Node>,
    t: Option<TopoArg>,
    env: &[String],
    cmd: Vec<String>,
    file: &Path,
) -> Result<i32> {
    let env = parse_env_flags(env)?;
    if matches!(t, Some(TopoArg::One(Topology::Loopback))) {
        bail!("--trace needs the pair (the loopback lab has no wire): drop `-t loopback`");
    }
    let lab = lab_for_exec(Topology::Pair)?;
    let forward = !std::io::IsTerminal::is_terminal(&std::io::stdin());
    let cap = start_trace(&lab, file)?;
    let code = stream(&lab, node.unwrap_or(Node::A), cmd, &env, forward);
    let ladder = finish_trace(cap)?;
    eprint!("{ladder}");
    code
}

/// `cargo lab exec --cargo ARGS`: `cargo ARGS` here, with cargo's runner for this host's target
/// set to this very `exec` (same node, topology and `-e` flags): every binary cargo runs (tests,
/// benches, `cargo run`) runs in the lab. The target's triple comes from `rustc -vV`.
pub(super) fn exec_cargo(
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
    if let Some((_, root)) = crate::userspace::child_env() {
        runner.extend(["--userspace".into(), root.display().to_string()]);
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
    // cargo's output streams to ours; its exit code is ours.
    let out = duct::cmd(cargo, &args)
        .env(&var, runner.join(" "))
        .unchecked()
        .run()
        .context("running cargo")?;
    Ok(out.status.code().unwrap_or(130))
}

pub(super) fn host_triple() -> Result<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out =
        crate::host_tools::captured(duct::cmd(rustc, ["-vV"])).context("running rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .context("rustc -vV printed no host triple")
}

pub(super) fn shell(node: Option<Node>, t: Option<TopoArg>) -> Result<i32> {
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
