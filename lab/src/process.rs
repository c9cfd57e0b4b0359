//! `lab::process`: a child process run with a deadline.
//!
//! Some chapters start copies of themselves (one process per client, each with its own QP) and
//! then print what each one said ([`crate::course::spawn_copies`]). [`Running`] is the
//! plumbing for that: the child's stdout and
//! stderr are read by two threads while it runs, so a chatty child never blocks on a full
//! pipe, and [`Running::finish`] waits with a deadline: a child still running then is killed.
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
//! let mut child = lab::process::Running::spawn(cmd)?;
//! let (code, out, err) = child.finish(Instant::now() + Duration::from_secs(10));
//! assert_eq!((code, out.as_str(), err.as_str()), (3, "hello\n", "oops\n"));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::Read;
use std::process::{Child, Command};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A worker process whose stdout and stderr are collected by threads (so a chatty child never
/// blocks on a full pipe) and which is killed if it outlives its deadline.
#[derive(Debug)]
pub struct Running {
    child: Child,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
}

impl Running {
    /// Spawns `cmd` and starts collecting its output.
    ///
    /// # Panics
    ///
    /// If `cmd`'s stdout or stderr is not [`Stdio::piped`](std::process::Stdio::piped).
    pub fn spawn(mut cmd: Command) -> std::io::Result<Running> {
        let mut child = cmd.spawn()?;
        let reader = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = r.read_to_string(&mut s);
                s
            })
        };
        let out = reader(Box::new(child.stdout.take().expect("piped")));
        let err = reader(Box::new(child.stderr.take().expect("piped")));
        Ok(Running { child, out, err })
    }

    /// Waits until the process exits or `deadline` passes (then kills it); returns the exit
    /// code (-1 if killed or ended by a signal), stdout and stderr. A killed process's stderr
    /// ends with the line `killed: still running at the deadline`.
    pub fn finish(&mut self, deadline: Instant) -> (i32, String, String) {
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(st)) => break st.code().unwrap_or(-1),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break -1;
                }
            }
        };
        let take = |h: &mut JoinHandle<String>| {
            std::mem::replace(h, std::thread::spawn(String::new))
                .join()
                .unwrap_or_default()
        };
        let (out, mut err) = (take(&mut self.out), take(&mut self.err));
        if code == -1 {
            err.push_str("killed: still running at the deadline\n");
        }
        (code, out, err)
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
}
