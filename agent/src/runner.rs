//! Runs commands for the protocol in contracts/src/proto.rs: the guest agent uses it inside the
//! VM, the harness's native provider on the host (through `harness::runner`). Std only.
//!
//! Each command gets its own process group (so a kill or a timeout takes its children too),
//! stdin closed (or, if its request asks, fed by [`Runner::stdin`] through a writer thread that
//! never blocks the caller), stdout and stderr forwarded in chunks as they come, then one Exit
//! reply, sent only after both pipes are drained.

use contracts::proto::{CHUNK, ExitStatus, Reply, RunRequest};
use std::collections::HashMap;
use std::io::Read as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Where replies go (the agent: a frame on the port; the host: a channel).
pub type Sink = Arc<dyn Fn(Reply) + Send + Sync>;

struct Proc {
    child: Mutex<Child>,
    pid: u32,
    /// Chunks for the command's stdin (empty = close it); `None` when it has none.
    input: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
}

impl Proc {
    fn kill(&self) {
        kill_group(self.pid);
        if let Ok(mut c) = self.child.lock() {
            let _ = c.kill();
        }
    }
}

/// Forwards the child's stdout and stderr to `sink` in chunks as they come, each pipe from a
/// thread of its own; the receiver gets one message per pipe at its end (or disconnects).
fn forward_output(sink: &Sink, id: u32, child: &mut Child) -> mpsc::Receiver<()> {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let out = child.stdout.take().expect("piped stdout");
    let err = child.stderr.take().expect("piped stderr");
    for (mut pipe, is_err) in [
        (Box::new(out) as Box<dyn std::io::Read + Send>, false),
        (Box::new(err) as Box<dyn std::io::Read + Send>, true),
    ] {
        let sink = sink.clone();
        let done = done_tx.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let data = buf[..n].to_vec();
                        sink(if is_err {
                            Reply::Stderr { id, data }
                        } else {
                            Reply::Stdout { id, data }
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = done.send(());
        });
    }
    done_rx
}

/// The command's stdin is written by a thread of its own: a command that does not read
/// blocks that thread, never the agent. An empty chunk closes it.
fn feed_stdin(mut w: std::process::ChildStdin) -> mpsc::Sender<Vec<u8>> {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        use std::io::Write as _;
        while let Ok(chunk) = rx.recv() {
            if chunk.is_empty() || w.write_all(&chunk).is_err() {
                break;
            }
        }
        // Dropping `w` closes the pipe: the command reads end of file.
    });
    tx
}

/// Waits for the command to end, killing its group once `deadline` passes; its status, and
/// whether it was killed for the deadline.
fn wait_exit(
    proc_: &Proc,
    deadline: Option<Instant>,
) -> (std::io::Result<std::process::ExitStatus>, bool) {
    let mut timed_out = false;
    let mut nap = Duration::from_millis(1);
    let status = loop {
        let r = proc_.child.lock().unwrap().try_wait();
        match r {
            Ok(Some(s)) => break Ok(s),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        if let Some(d) = deadline
            && !timed_out
            && Instant::now() >= d
        {
            timed_out = true;
            proc_.kill();
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(10));
    };
    (status, timed_out)
}

/// Drains both pipes. A leftover child of the command may hold them open: after 2 s, if a
/// process of the group still lives, kill the group and give up on the rest 1 s later. If none
/// does, nothing holds them but a reader not yet scheduled (a TCG guest beside other VMs on a
/// busy host can be that slow): wait for it up to 15 s, so that the output is never cut short
/// of the `Exit` that follows it.
fn drain(done_rx: &mpsc::Receiver<()>, pgid: u32) {
    let mut drained = 0;
    let mut grace = Instant::now() + Duration::from_secs(2);
    let mut looked = false;
    while drained < 2 {
        let left = grace.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok(()) => drained += 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) if !looked => {
                looked = true;
                if group_alive(pgid) {
                    kill_group(pgid);
                    grace = Instant::now() + Duration::from_secs(1);
                } else {
                    grace = Instant::now() + Duration::from_secs(15);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => break,
        }
    }
}

/// Whether a live (not zombie) process is in group `pgid`, from /proc/<pid>/stat (its state
/// and process group follow the command's name in parentheses).
fn group_alive(pgid: u32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    dir.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string()
    })
}

/// SIGKILL to a whole process group.
fn kill_group(pgid: u32) {
    signal_group(pgid, "KILL");
}

/// Sends `signal` (a name: "INT", "KILL" ...) to a whole process group, as a terminal does,
/// through kill(1) (std has no killpg; this stays safe code). True if kill(1) succeeded.
pub fn signal_group(pgid: u32, signal: &str) -> bool {
    // std, not duct: the guest agent builds this file with `$RUSTC` alone, without crates.
    Command::new("kill")
        .args(["-s", signal, "--", &format!("-{pgid}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs commands concurrently and reports on them through a sink.
#[derive(Clone)]
pub struct Runner {
    sink: Sink,
    base_env: Vec<(String, String)>,
    procs: Arc<Mutex<HashMap<u32, Arc<Proc>>>>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("base_env", &self.base_env)
            .finish()
    }
}

impl Runner {
    /// `base_env`: the whole environment every command starts from (plus the request's env);
    /// `None` keeps the caller's environment.
    pub fn new(sink: Sink, base_env: Option<Vec<(String, String)>>) -> Runner {
        let base = base_env.unwrap_or_else(|| std::env::vars().collect());
        Runner {
            sink,
            base_env: base,
            procs: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Starts a command; returns at once. Exactly one `Exit` reply follows, whatever happens.
    pub fn run(&self, req: RunRequest) {
        let id = req.id;
        let mut child = match self.spawn(&req) {
            Ok(c) => c,
            Err(why) => {
                (self.sink)(Reply::Exit {
                    id,
                    status: ExitStatus::SpawnFailed(why),
                });
                return;
            }
        };
        let done_rx = forward_output(&self.sink, id, &mut child);
        let input = child.stdin.take().map(feed_stdin);
        let pid = child.id();
        let proc_ = Arc::new(Proc {
            child: Mutex::new(child),
            pid,
            input: Mutex::new(input),
        });
        self.procs.lock().unwrap().insert(id, proc_.clone());
        let procs = self.procs.clone();
        let sink = self.sink.clone();
        let deadline =
            (req.timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(req.timeout_ms));
        std::thread::spawn(move || {
            let (status, timed_out) = wait_exit(&proc_, deadline);
            drain(&done_rx, proc_.pid);
            procs.lock().unwrap().remove(&id);
            let status = match status {
                _ if timed_out => ExitStatus::TimedOut,
                Ok(s) => match (s.code(), s.signal()) {
                    (Some(c), _) => ExitStatus::Code(c),
                    (None, Some(sig)) => ExitStatus::Signal(sig),
                    _ => ExitStatus::Code(-1),
                },
                Err(e) => ExitStatus::SpawnFailed(format!("wait: {e}")),
            };
            sink(Reply::Exit { id, status });
        });
    }

    /// Starts the request's command in a process group of its own, its stdout and stderr
    /// piped (and its stdin, if the request asks); the reason it could not, as the message of
    /// its `SpawnFailed` exit.
    fn spawn(&self, req: &RunRequest) -> Result<Child, String> {
        let Some(prog) = req.argv.first() else {
            return Err("empty command".into());
        };
        let mut cmd = Command::new(prog);
        cmd.args(&req.argv[1..])
            .env_clear()
            .envs(self.base_env.iter().map(|(k, v)| (k, v)))
            .envs(req.env.iter().map(|(k, v)| (k, v)))
            .stdin(if req.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if !req.cwd.is_empty() {
            if !std::path::Path::new(&req.cwd).is_dir() {
                return Err(format!("working directory {} does not exist here", req.cwd));
            }
            cmd.current_dir(&req.cwd);
        }
        cmd.spawn().map_err(|e| format!("{prog}: {e}"))
    }

    /// Kills a running command (its whole process group). Unknown ids are ignored.
    pub fn kill(&self, id: u32) {
        let p = self.procs.lock().unwrap().get(&id).cloned();
        if let Some(p) = p {
            p.kill();
        }
    }

    /// Feeds a running command's stdin; empty `data` closes it. Unknown ids, and commands
    /// started without stdin, are ignored.
    pub fn stdin(&self, id: u32, data: Vec<u8>) {
        let p = self.procs.lock().unwrap().get(&id).cloned();
        if let Some(p) = p {
            let mut g = p.input.lock().unwrap();
            let close = data.is_empty();
            if let Some(tx) = g.as_ref() {
                let _ = tx.send(data);
            }
            if close {
                *g = None;
            }
        }
    }

    /// Kills every running command.
    pub fn kill_all(&self) {
        let all: Vec<_> = self.procs.lock().unwrap().values().cloned().collect();
        for p in all {
            p.kill();
        }
    }

    /// Ids of the commands still running.
    pub fn running(&self) -> Vec<u32> {
        self.procs.lock().unwrap().keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use contracts::proto::RunRequest;

    /// A runner whose replies come back on a channel.
    fn runner() -> (Runner, mpsc::Receiver<Reply>) {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let sink: Sink = Arc::new(move |r| {
            let _ = tx.lock().unwrap().send(r);
        });
        (Runner::new(sink, None), rx)
    }

    fn req(id: u32, argv: &[&str]) -> RunRequest {
        RunRequest {
            id,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            ..RunRequest::default()
        }
    }

    /// Its stdout, its stderr and its exit status, once the Exit reply came.
    fn outcome(rx: &mpsc::Receiver<Reply>, id: u32) -> (String, String, ExitStatus) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        loop {
            match rx.recv_timeout(Duration::from_secs(30)).expect("a reply") {
                Reply::Stdout { id: i, data } if i == id => out.extend(data),
                Reply::Stderr { id: i, data } if i == id => err.extend(data),
                Reply::Exit { id: i, status } if i == id => {
                    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
                    return (text(out), text(err), status);
                }
                other => panic!("unexpected reply {other:?}"),
            }
        }
    }

    #[test]
    fn output_then_one_exit_with_the_code() {
        let (r, rx) = runner();
        r.run(req(1, &["sh", "-c", "echo out; echo err >&2; exit 3"]));
        assert_eq!(
            outcome(&rx, 1),
            ("out\n".into(), "err\n".into(), ExitStatus::Code(3))
        );
        assert!(r.running().is_empty());
    }

    #[test]
    fn what_cannot_start_is_a_spawn_failure() {
        let (r, rx) = runner();
        r.run(req(1, &[]));
        assert_eq!(
            outcome(&rx, 1).2,
            ExitStatus::SpawnFailed("empty command".into())
        );
        r.run(RunRequest {
            cwd: "/no/such/dir".into(),
            ..req(2, &["true"])
        });
        assert_eq!(
            outcome(&rx, 2).2,
            ExitStatus::SpawnFailed("working directory /no/such/dir does not exist here".into())
        );
        r.run(req(3, &["/no/such/program"]));
        assert!(
            matches!(outcome(&rx, 3).2, ExitStatus::SpawnFailed(m) if m.starts_with("/no/such/program: "))
        );
    }

    #[test]
    fn the_deadline_kills_the_whole_group() {
        let (r, rx) = runner();
        // The shell's child holds the pipes too: it must die with the group, or the Exit
        // would wait for it.
        r.run(RunRequest {
            timeout_ms: 200,
            ..req(1, &["sh", "-c", "sleep 60 & wait"])
        });
        assert_eq!(outcome(&rx, 1).2, ExitStatus::TimedOut);
    }

    #[test]
    fn a_group_is_alive_while_a_member_lives() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let ours: u32 = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .nth(2)
            .unwrap()
            .parse()
            .unwrap();
        assert!(super::group_alive(ours));
        // A child in a group of its own, reaped: its group is empty.
        let mut c = std::process::Command::new("true");
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        let mut child = c.spawn().unwrap();
        let pgid = child.id();
        child.wait().unwrap();
        assert!(!super::group_alive(pgid));
    }

    #[test]
    fn a_leftover_child_holding_the_pipes_is_killed_and_the_output_kept() {
        let (r, rx) = runner();
        let t0 = std::time::Instant::now();
        r.run(req(1, &["sh", "-c", "echo before; sleep 60 &"]));
        assert_eq!(
            outcome(&rx, 1),
            ("before\n".into(), String::new(), ExitStatus::Code(0))
        );
        // 2 s of grace, then the group is killed: well before the sleep's 60 s.
        assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn stdin_is_fed_then_closed_and_kill_ends_a_command() {
        let (r, rx) = runner();
        r.run(RunRequest {
            stdin: true,
            ..req(1, &["cat"])
        });
        r.stdin(1, b"hello".to_vec());
        r.stdin(1, Vec::new());
        assert_eq!(
            outcome(&rx, 1),
            ("hello".into(), String::new(), ExitStatus::Code(0))
        );
        r.run(req(2, &["sleep", "60"]));
        r.kill(2);
        assert_eq!(outcome(&rx, 2).2, ExitStatus::Signal(9));
    }
}
