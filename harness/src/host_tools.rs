//! Host tools run through duct: to completion for their output (git, ldd, dpkg-query, apt,
//! mdbook, dot), with a deadline ([`captured_within`], [`finish_by`]), and the shell that
//! cleans up after this process ([`at_exit`]). The sites that stay on std::process say why
//! where they are (README, "Crates").
//!
//! Deadlines poll duct's `try_wait`: duct's `wait_timeout` would install a process-wide
//! SIGCHLD handler, whose signals would then interrupt this process's other waits.

use anyhow::{Result, bail};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// How long a killed child may take to be reaped (and its output read to the end) before we
/// give up on it: a grandchild that inherited its pipes could hold them open.
const REAP: Duration = Duration::from_secs(5);

/// Runs `e` with stdin closed and both outputs captured; its exit status is the caller's to
/// judge. An error means the tool could not be started.
pub fn captured(e: duct::Expression) -> std::io::Result<Output> {
    e.stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .run()
}

/// [`captured`], but waited for until `limit` has passed: then the tool is killed and the
/// answer is `Ok(None)`.
pub fn captured_within(e: duct::Expression, limit: Duration) -> std::io::Result<Option<Output>> {
    let h = e
        .stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .start()?;
    finish_by(&h, Instant::now() + limit)
}

/// Waits for `h` (an [`unchecked`](duct::Expression::unchecked) expression: a failed exit is
/// an answer, not an error) until `deadline`; past it, `h` is killed ([`kill_and_reap`]) and
/// the answer is `Ok(None)`.
pub fn finish_by(h: &duct::Handle, deadline: Instant) -> std::io::Result<Option<Output>> {
    if let Some(out) = poll_until(h, deadline)? {
        return Ok(Some(out));
    }
    kill_and_reap(h);
    Ok(None)
}

/// Kills `h`'s processes (SIGKILL) and waits up to 5 s for them to be reaped.
pub fn kill_and_reap(h: &duct::Handle) {
    let _ = h.kill();
    let _ = poll_until(h, Instant::now() + REAP);
}

/// `h`'s output once it has exited and its output is all read, or `None` at `deadline`.
fn poll_until(h: &duct::Handle, deadline: Instant) -> std::io::Result<Option<Output>> {
    loop {
        if let Some(out) = h.try_wait()? {
            return Ok(Some(out.clone()));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `sh -c SCRIPT lab-reaper ARGS...` once this process has exited, however it exits (a
/// lab in a `static` is never dropped). SCRIPT starts with `read -r _`: the shell blocks
/// reading its stdin, one end of a socket pair whose other end only this process holds; that
/// end closes at our exit, `read` returns and the shell runs the rest. Its own process group,
/// so a Ctrl-C aimed at us does not stop it early. Best effort: a failure to start is ignored.
pub fn at_exit<S: AsRef<OsStr>>(script: &str, args: &[S]) {
    let Ok((ours, theirs)) = std::os::unix::net::UnixStream::pair() else {
        return;
    };
    let mut argv: Vec<&OsStr> = vec![OsStr::new("-c"), OsStr::new(script), "lab-reaper".as_ref()];
    argv.extend(args.iter().map(AsRef::as_ref));
    let started = duct::cmd("sh", argv)
        .stdin_file(theirs)
        .stdout_null()
        .stderr_null()
        .unchecked()
        .before_spawn(|c| {
            std::os::unix::process::CommandExt::process_group(c, 0);
            Ok(())
        })
        .start();
    if started.is_ok() {
        // Our end stays open for the rest of the process's life.
        std::mem::forget(ours);
    }
}

/// `git ARGS` in `dir`: its stdout, or an error with the command line and git's own message.
pub fn git<S: AsRef<OsStr>>(dir: &Path, args: &[S]) -> Result<Vec<u8>> {
    let line = || {
        let a: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        format!("git {}", a.join(" "))
    };
    let out = captured(duct::cmd("git", args).dir(dir))
        .map_err(|e| anyhow::anyhow!("{}: cannot run git ({e}); is git installed?", line()))?;
    if !out.status.success() {
        bail!(
            "{} failed in {}: {}",
            line(),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_gives_stdout_or_its_own_message() {
        let dir = tempfile::tempdir().unwrap();
        let e = git(dir.path(), &["rev-parse", "HEAD"])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("git rev-parse HEAD failed in ") && e.contains("not a git repository"),
            "{e}"
        );
        git(dir.path(), &["init", "-q"]).unwrap();
        assert_eq!(git(dir.path(), &["ls-files"]).unwrap(), b"");
    }

    #[test]
    fn captured_within_answers_or_kills_at_the_limit() {
        let out = captured_within(
            duct::cmd("sh", ["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(30),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(
            (&out.stdout[..], &out.stderr[..]),
            (&b"out\n"[..], &b"err\n"[..])
        );
        let start = Instant::now();
        let killed = captured_within(
            duct::cmd("sh", ["-c", "exec sleep 30"]),
            Duration::from_millis(200),
        )
        .unwrap();
        assert!(killed.is_none());
        assert!(start.elapsed() < Duration::from_secs(20));
        let e = captured_within(
            duct::cmd("/nonexistent/tool", ["x"]),
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn at_exit_runs_once_its_process_is_gone() {
        const MARK: &str = "LAB_TEST_AT_EXIT_MARK";
        if let Some(mark) = std::env::var_os(MARK) {
            // The copy of this test run below: arrange the mark, see that it waits for us,
            // then end.
            at_exit("read -r _; : > \"$1\"", &[&mark]);
            std::thread::sleep(Duration::from_millis(300));
            assert!(
                !Path::new(&mark).exists(),
                "ran while its process was alive"
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("gone");
        let name = "host_tools::tests::at_exit_runs_once_its_process_is_gone";
        let copy = duct::cmd(std::env::current_exe().unwrap(), ["--exact", name]).env(MARK, &mark);
        let out = captured_within(copy, Duration::from_secs(60))
            .unwrap()
            .expect("the copy ends");
        assert!(out.status.success(), "{out:?}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !mark.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            mark.exists(),
            "the script did not run after its process ended"
        );
    }
}
