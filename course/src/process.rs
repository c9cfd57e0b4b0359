//! `course::process`: a child process run with a deadline.
//!
//! Some chapters start copies of themselves (one process per client, each with its own QP) and
//! then print what each one said ([`crate::spawn_copies`]). [`Running`] is the
//! plumbing for that, on [`duct`]: the child's stdout and stderr are captured by duct's reader
//! threads while it runs, so a chatty child never blocks on a full pipe, and
//! [`Running::finish`] waits with a deadline: a child still running then is killed, and so is
//! one whose [`Running`] is dropped unfinished.
//! Like every wait in `lab`, it never waits forever.
//!
//! ```
//! use std::process::{Command, Stdio};
//! use std::time::{Duration, Instant};
//!
//! let mut cmd = Command::new("sh");
//! cmd.args(["-c", "echo hello; echo oops >&2; exit 3"])
//!     .stdin(Stdio::null())
//!     .stdout(Stdio::piped())
//!     .stderr(Stdio::piped());
//! let mut child = course::process::Running::spawn(cmd)?;
//! let (code, out, err) = child.finish(Instant::now() + Duration::from_secs(10));
//! assert_eq!((code, out.as_str(), err.as_str()), (3, "hello\n", "oops\n"));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

/// A worker process whose stdout and stderr are captured (so a chatty child never blocks on a
/// full pipe) and which is killed if it outlives its deadline or its `Running` is dropped.
#[derive(Debug)]
pub struct Running {
    handle: duct::Handle,
}

impl Running {
    /// Starts `cmd` (its program, arguments, environment changes and directory) with stdin
    /// closed, and starts collecting its stdout and stderr.
    ///
    /// The callers build a [`Command`] with stdin null and stdout and stderr piped; `Running`
    /// gives the child exactly that, whatever `cmd` says about its stdio.
    pub fn spawn(cmd: Command) -> std::io::Result<Running> {
        let mut expr = duct::cmd(cmd.get_program(), cmd.get_args());
        for (key, value) in cmd.get_envs() {
            expr = match value {
                Some(value) => expr.env(key, value),
                None => expr.env_remove(key),
            };
        }
        if let Some(dir) = cmd.get_current_dir() {
            expr = expr.dir(dir);
        }
        let handle = expr
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
        // duct's `try_wait` answers once the child has exited and its output is all read.
        loop {
            match self.handle.try_wait() {
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(Some(_)) => break,
                _ => {
                    let _ = self.handle.kill();
                    break;
                }
            }
        }
        let Ok(output) = self.handle.wait() else {
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
    /// A child nobody waits for any more is killed (duct reaps it).
    fn drop(&mut self) {
        if let Ok(None) = self.handle.try_wait() {
            let _ = self.handle.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Running;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    #[test]
    fn collects_exit_code_and_both_streams() {
        let mut r = Running::spawn(sh("echo out; echo err >&2; exit 7")).unwrap();
        let (code, out, err) = r.finish(Instant::now() + Duration::from_secs(30));
        assert_eq!((code, out.as_str(), err.as_str()), (7, "out\n", "err\n"));
    }

    #[test]
    fn large_output_does_not_block() {
        // Far more than a pipe buffer (64 KiB) on each stream.
        let script =
            "i=0; while [ $i -lt 20000 ]; do echo 0123456789; echo x >&2; i=$((i+1)); done";
        let mut r = Running::spawn(sh(script)).unwrap();
        let (code, out, err) = r.finish(Instant::now() + Duration::from_secs(60));
        assert_eq!(code, 0);
        assert_eq!(out.len(), 20000 * 11);
        assert_eq!(err.len(), 20000 * 2);
    }

    #[test]
    fn killed_at_the_deadline() {
        let start = Instant::now();
        let mut r = Running::spawn(sh("echo started; exec sleep 30")).unwrap();
        let (code, out, err) = r.finish(Instant::now() + Duration::from_millis(300));
        assert!(start.elapsed() < Duration::from_secs(20));
        assert_eq!(code, -1);
        assert_eq!(out, "started\n");
        assert_eq!(err, "killed: still running at the deadline\n");
    }

    #[test]
    fn dropped_unfinished_is_killed() {
        let r = Running::spawn(sh("exec sleep 30")).unwrap();
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
}
