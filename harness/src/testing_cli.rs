//! The command-line checks every chapter's end-to-end test repeats: a bad command line is
//! refused cleanly, and `--help` prints the usage. They run the chapter's binary on the host,
//! without a lab: a chapter checks its arguments before it opens a device.
//!
//! ```no_run
//! use harness::testing_cli::{prints_help, refuses_command_line};
//! const EXE: &str = "target/debug/ch01-devices";
//! let stderr = refuses_command_line(EXE, &["--bogus"], "unexpected argument");
//! assert!(stderr.contains("usage: ch01-devices"));
//! assert!(prints_help(EXE, "--help").starts_with("usage: ch01-devices"));
//! ```

use crate::host_tools::captured_within;
use std::process::Output;
use std::time::Duration;

/// Runs a chapter's command line on the host (not as a guest: `LAB_GUEST` removed) with
/// stdin closed and both outputs captured. A chapter checks its arguments before it opens a
/// device, so it answers at once: one still running after a minute is killed, and the test
/// fails saying so.
fn outside_the_lab(cmd: duct::Expression, exe: &str) -> Output {
    captured_within(cmd.env_remove("LAB_GUEST"), Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("running {exe}: {e}"))
        .unwrap_or_else(|| panic!("{exe} was still running after 60 s (killed)"))
}

/// Runs `exe args` outside the lab and asserts that it refuses them the way every chapter
/// must: exit status 2, `message` on stderr, no panic, and nothing on stdout (no step ran).
/// Returns stderr, for the chapter's own further checks.
///
/// # Panics
///
/// When the program cannot be run or any of the above does not hold (this is a test helper).
pub fn refuses_command_line(exe: &str, args: &[&str], message: &str) -> String {
    let out = outside_the_lab(duct::cmd(exe, args), exe);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{exe} {args:?}: expected exit status 2; stderr:\n{stderr}"
    );
    assert!(
        stderr.contains(message),
        "{exe} {args:?}: expected {message:?} in stderr:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{exe} {args:?}: {stderr}");
    assert!(
        stdout.is_empty(),
        "{exe} {args:?}: nothing may be printed on stdout (no step ran), got:\n{stdout}"
    );
    stderr
}

/// Runs `exe flag` (`-h` or `--help`) outside the lab, asserts exit status 0 and a non-empty
/// stdout, and returns stdout.
///
/// # Panics
///
/// When the program cannot be run, fails, or prints nothing (this is a test helper).
pub fn prints_help(exe: &str, flag: &str) -> String {
    let out = outside_the_lab(duct::cmd(exe, [flag]), exe);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{exe} {flag}: expected success; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.trim().is_empty(), "{exe} {flag}: no usage printed");
    stdout
}
