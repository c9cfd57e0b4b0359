//! Host tools run to completion for their output (git, ldd, dpkg-query): stdin closed, stdout
//! and stderr captured, through duct. Commands whose output streams live, or that need a
//! process group of their own, use std::process where they are (README, "Crates").

use anyhow::{Result, bail};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;

/// Runs `e` with stdin closed and both outputs captured; its exit status is the caller's to
/// judge. An error means the tool could not be started.
pub fn captured(e: duct::Expression) -> std::io::Result<Output> {
    e.stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .run()
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
}
