//! `course::process`: child processes run with a deadline, on [`duct`].
//!
//! Some chapters start copies of themselves (one process per client, each with its own QP) and
//! then print what each one said ([`crate::spawn_copies`]). [`Running`] is the
//! plumbing for that: the child's stdout and stderr are captured by duct's reader threads
//! while it runs, so a chatty child never blocks on a full pipe, and [`Running::finish`] waits
//! with a deadline: a child still running then is killed, and so is one whose [`Running`] is
//! dropped unfinished. [`wait_or_kill`] is the same wait for a child whose output goes where
//! its [`duct::Expression`] says (a supervisor's workers print straight to our stdout).
//! Like every wait in the course, they never wait forever.
//!
//! The deadline is a poll of duct's `try_wait`: duct's own `wait_timeout` would install a
//! process-wide SIGCHLD handler in the chapter program.
//!
//! ```
//! use std::time::{Duration, Instant};
//!
//! let sh = duct::cmd("sh", ["-c", "echo hello; echo oops >&2; exit 3"]);
//! let mut child = course::process::Running::start(sh)?;
//! let (code, out, err) = child.finish(Instant::now() + Duration::from_secs(10));
//! assert_eq!((code, out.as_str(), err.as_str()), (3, "hello\n", "oops\n"));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::process::Output;
use std::time::{Duration, Instant};

/// How long a killed child may take to be reaped (and its output threads to end) before the
/// wait gives up on it: a grandchild that inherited the pipes could hold them open.
const REAP: Duration = Duration::from_secs(5);

/// Waits for `child` until `limit` has passed; past it, the child is killed and reaped, and
/// the result is `None`: a supervisor never waits forever on a copy that hangs. The child's
/// expression must be [`unchecked`](duct::Expression::unchecked) (its exit status, a signal
/// included, is the caller's to judge); otherwise duct reports a failed exit as an error.
pub fn wait_or_kill(child: &duct::Handle, limit: Duration) -> std::io::Result<Option<Output>> {
    if let Some(out) = poll_until(child, Instant::now() + limit)? {
        return Ok(Some(out));
    }
    kill(child);
    Ok(None)
}

/// Kills `child` and waits a little ([`REAP`]) for it to be reaped.
fn kill(child: &duct::Handle) {
    let _ = child.kill();
    let _ = poll_until(child, Instant::now() + REAP);
}

/// `child`'s output once it has exited and its output is all read, or `None` at `deadline`.
fn poll_until(child: &duct::Handle, deadline: Instant) -> std::io::Result<Option<Output>> {
    loop {
        if let Some(out) = child.try_wait()? {
            return Ok(Some(out.clone()));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A worker process whose stdout and stderr are captured (so a chatty child never blocks on a
/// full pipe) and which is killed if it outlives its deadline or its `Running` is dropped.
#[derive(Debug)]
pub struct Running {
    handle: duct::Handle,
}

impl Running {
    /// Starts `cmd` (its program, arguments, environment and directory) with stdin closed, and
    /// starts collecting its stdout and stderr; whatever `cmd` said about its stdio, the child
    /// gets exactly that. Its exit status is [`finish`](Running::finish)'s to report.
    pub fn start(cmd: duct::Expression) -> std::io::Result<Running> {
        let handle = cmd
            .stdin_null()
            .stdout_capture()
            .stderr_capture()
            .unchecked()
            .start()?;
        Ok(Running { handle })
    }

    /// Waits until the process exits or `deadline` passes (then kills it); returns the exit
    /// code (-1 if killed or ended by a signal), stdout and stderr. A killed process's stderr
    /// ends with the line `killed: still running at the deadline`.
    pub fn finish(&mut self, deadline: Instant) -> (i32, String, String) {
        let finished = match poll_until(&self.handle, deadline) {
            Ok(Some(out)) => Some(out),
            _ => {
                kill(&self.handle);
                // What it wrote before it was killed, if its output threads have ended.
                self.handle.try_wait().ok().flatten().cloned()
            }
        };
        let Some(output) = finished else {
            return (
                -1,
                String::new(),
                String::from("killed: still running at the deadline\n"),
            );
        };
        let code = output.status.code().unwrap_or(-1);
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut err = String::from_utf8_lossy(&output.stderr).into_owned();
        if code == -1 {
            err.push_str("killed: still running at the deadline\n");
        }
        (code, out, err)
    }
}

impl Drop for Running {
    /// A child nobody waits for any more is killed (and reaped, within [`REAP`]).
    fn drop(&mut self) {
        if let Ok(None) = self.handle.try_wait() {
            kill(&self.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Running, wait_or_kill};
    use std::time::{Duration, Instant};

    fn sh(script: &str) -> duct::Expression {
        duct::cmd("sh", ["-c", script])
    }

    #[test]
    fn collects_exit_code_and_both_streams() {
        let mut r = Running::start(sh("echo out; echo err >&2; exit 7")).unwrap();
        let (code, out, err) = r.finish(Instant::now() + Duration::from_secs(30));
        assert_eq!((code, out.as_str(), err.as_str()), (7, "out\n", "err\n"));
    }

    #[test]
    fn large_output_does_not_block() {
        // Far more than a pipe buffer (64 KiB) on each stream.
        let script =
            "i=0; while [ $i -lt 20000 ]; do echo 0123456789; echo x >&2; i=$((i+1)); done";
        let mut r = Running::start(sh(script)).unwrap();
        let (code, out, err) = r.finish(Instant::now() + Duration::from_secs(60));
        assert_eq!(code, 0);
        assert_eq!(out.len(), 20000 * 11);
        assert_eq!(err.len(), 20000 * 2);
    }

    #[test]
    fn killed_at_the_deadline() {
        let start = Instant::now();
        let mut r = Running::start(sh("echo started; exec sleep 30")).unwrap();
        let (code, out, err) = r.finish(Instant::now() + Duration::from_millis(300));
        assert!(start.elapsed() < Duration::from_secs(20));
        assert_eq!(code, -1);
        assert_eq!(out, "started\n");
        assert_eq!(err, "killed: still running at the deadline\n");
    }

    #[test]
    fn dropped_unfinished_is_killed() {
        let r = Running::start(sh("exec sleep 30")).unwrap();
        let pid = r.handle.pids()[0];
        drop(r);
        // Killed: gone, or a zombie until duct reaps it.
        let deadline = Instant::now() + Duration::from_secs(10);
        let dead = loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
            if matches!(state, None | Some('Z')) {
                break true;
            }
            if Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            dead,
            "pid {pid} still running after its Running was dropped"
        );
    }

    #[test]
    fn wait_or_kill_gives_the_status_or_kills() {
        use std::os::unix::process::ExitStatusExt as _;
        let done = sh("exit 4").unchecked().start().unwrap();
        let out = wait_or_kill(&done, Duration::from_secs(30))
            .unwrap()
            .unwrap();
        assert_eq!(out.status.code(), Some(4));
        let hung = sh("exec sleep 30").unchecked().start().unwrap();
        let start = Instant::now();
        assert!(
            wait_or_kill(&hung, Duration::from_millis(200))
                .unwrap()
                .is_none()
        );
        assert!(start.elapsed() < Duration::from_secs(20));
        // Killed and reaped: SIGKILL.
        let out = hung.try_wait().unwrap().expect("reaped");
        assert_eq!(out.status.signal(), Some(9));
    }
}
