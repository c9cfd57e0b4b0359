//! `test`: set up, start both labs (or reuse `up`'s), `cargo test --workspace`, keep the logs
//! of a failure, tear down.

use super::chapters::{prepare, prepare_checkers};
use super::labs::{
    daemon_alive, failed_logs_dir, keep_logs, start_daemon, stop_daemon, wait_daemon,
};
use super::parallel;
use super::progress::{self, Progress};
use super::{interrupted, root};
use crate::testbed::Provider;
use crate::{Topology, testbed};
use anyhow::{Context as _, Result, bail};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::Duration;

pub(super) fn test(args: &[String]) -> Result<i32> {
    let root = root()?;
    // Ctrl-C goes to cargo and the tests too; we stay to tear the labs down.
    let interrupted = interrupted();
    let provider = testbed::chosen_provider()?;
    let jobs = parallel::jobs()?;
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
                let up = testbed::daemon_home(&root).join(t.name());
                // With --kernel or --userspace, the suite boots its own labs.
                if crate::kernel::child_env().is_none()
                    && crate::userspace::child_env().is_none()
                    && daemon_alive(&up)
                {
                    eprintln!("using the running {} lab (`cargo lab up`)", t.name());
                    std::fs::create_dir_all(&home)?;
                    std::os::unix::fs::symlink(&up, home.join(t.name())).with_context(|| {
                        format!("linking {} into {}", up.display(), home.display())
                    })?;
                    continue;
                }
                let dir = home.join(t.name());
                let child = start_daemon(t, &dir, None)?;
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
            testbed::ensure_native_device()?;
        }
        let mut run = CargoTest {
            cargo: std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()),
            dir: root.clone(),
            args: cargo_test_args(args),
            env: vec![],
        };
        if provider == Provider::Vm {
            run.env.push(("LAB_STATE_DIR", home.clone().into()));
        }
        for (k, v) in [crate::kernel::child_env(), crate::userspace::child_env()]
            .into_iter()
            .flatten()
        {
            run.env.push((k, v.into()));
        }
        eprintln!("running: cargo {}", run.args.join(" "));
        let (code, times, whole_suite) = if jobs > 1 && parallel::applies(&run.args) {
            match progress::plan(&run) {
                Err(code) => (code, vec![], false),
                Ok(plan) => {
                    let (code, times) = parallel::run(&root, &run, &plan, jobs, interrupted)?;
                    (code, times, plan.whole_suite)
                }
            }
        } else {
            let (code, text, whole_suite) = run_teed(&root, &run)?;
            (code, binary_times(&text), whole_suite)
        };
        if !interrupted.load(Ordering::SeqCst) {
            print_slowest(&root, &times, 10);
            if code == 0 && whole_suite {
                let labelled: Vec<(String, f64)> = times
                    .iter()
                    .map(|b| (binary_label(&root, b), b.secs))
                    .collect();
                progress::write_times(&progress::times_file(&root), &labelled);
            }
        }
        Ok(code)
    })();
    // Logs are kept for a failure, not for a run the user stopped (Ctrl-C).
    let failed = !matches!(result, Ok(0)) && !interrupted.load(Ordering::SeqCst);
    if failed && provider == Provider::Vm {
        // Keep the guest consoles, QEMU's and the daemons' logs before the daemons remove their
        // dirs: under /tmp/rxe-lab-logs.<pid>/, which CI's failure upload
        // (`/tmp/rxe-lab*/**/*.log`) collects.
        let keep = failed_logs_dir();
        let mut dirs = started.clone();
        for t in Topology::all() {
            let up = testbed::daemon_home(&root).join(t.name());
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

/// The `cargo test` run, as data: cargo, its arguments, what it adds to the environment, in
/// the workspace. The progress pass ([`progress::plan`]) and the run are two commands made
/// from it.
#[derive(Debug, Clone)]
pub(super) struct CargoTest {
    pub cargo: String,
    pub dir: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(&'static str, OsString)>,
}

impl CargoTest {
    /// cargo with `args` (the run's own, or the pass's), in the run's dir and environment.
    pub fn command(&self, args: &[String]) -> duct::Expression {
        let mut e = duct::cmd(&self.cargo, args).dir(&self.dir);
        for (k, v) in &self.env {
            e = e.env(k, v);
        }
        e
    }
}

/// Runs cargo (`run`) with its stdout and stderr merged into one pipe, so that cargo's
/// `Running ...` lines and the test binaries' output stay in the order they were written;
/// everything is copied to our stdout line by line, with the suite's progress ([`progress`]:
/// binary N of M) before each binary or in a bar under the output. The build runs first,
/// alone (the progress pass, with cargo's own progress). Returns cargo's exit code and the
/// text, and whether it was the whole suite. Cargo keeps its colours when our stdout is a
/// terminal.
fn run_teed(root: &Path, run: &CargoTest) -> Result<(i32, String, bool)> {
    use std::io::Read as _;
    use std::sync::Mutex;
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut cmd = run.command(&run.args);
    if terminal && std::env::var_os("CARGO_TERM_COLOR").is_none() {
        cmd = cmd.env("CARGO_TERM_COLOR", "always");
    }
    let plan = match progress::plan(run) {
        Ok(p) => p,
        Err(code) => return Ok((code, String::new(), false)),
    };
    let progress = Arc::new(Mutex::new(Progress::new(root, &plan, terminal)));
    // One pipe for both streams (duct's stderr_to_stdout), read as it comes; how cargo ended
    // is an answer (`unchecked`).
    let cargo = Arc::new(
        cmd.stderr_to_stdout()
            .unchecked()
            .reader()
            .context("running cargo test")?,
    );
    let out = cargo.clone();
    let text = Arc::new(Mutex::new(Vec::<u8>::new()));
    let (done_tx, done) = mpsc::channel::<()>();
    let (seen, shown, root) = (text.clone(), progress.clone(), root.to_path_buf());
    std::thread::spawn(move || {
        let mut buf = [0u8; 16384];
        let mut line = Vec::<u8>::new();
        let mut stdout = std::io::stdout();
        // A closed stdout (`| head`) must not stop cargo: keep reading, writes just fail.
        let emit = |l: &[u8], stdout: &mut std::io::Stdout| {
            let label = binary_starting(&root, &String::from_utf8_lossy(l));
            shown.lock().unwrap().line(stdout, l, label.as_deref());
        };
        while let Ok(n) = (&*out).read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.lock().unwrap().extend_from_slice(&buf[..n]);
            line.extend_from_slice(&buf[..n]);
            while let Some(i) = line.iter().position(|b| *b == b'\n') {
                let rest = line.split_off(i + 1);
                emit(&line, &mut stdout);
                line = rest;
            }
        }
        if !line.is_empty() {
            emit(&line, &mut stdout);
        }
        let _ = done_tx.send(());
    });
    // No deadline of our own: each test has its own, and Ctrl-C reaches cargo too.
    let st = loop {
        if let Some(o) = cargo.try_wait().context("waiting for cargo test")? {
            break o.status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // A process a test left running may hold the pipe open: what came within 2 s is all.
    let _ = done.recv_timeout(Duration::from_secs(2));
    progress.lock().unwrap().finish();
    let text = String::from_utf8_lossy(&text.lock().unwrap()).into_owned();
    Ok((st.code().unwrap_or(130), text, plan.whole_suite))
}

/// The label of the binary a line of cargo's output starts (`Running ...`, `Doc-tests ...`),
/// the one [`binary_label`] gives it in the list of the slowest; None for any other line.
fn binary_starting(root: &Path, line: &str) -> Option<String> {
    let b = binary_times(&format!("{line}\ntest result: ok. finished in 0s\n")).pop()?;
    Some(binary_label(root, &b))
}

/// One test binary's run, read from cargo test's output.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BinaryTime {
    /// What cargo said it runs: `unittests src/lib.rs (target/debug/deps/lab-...)`,
    /// `tests/e2e.rs (target/debug/deps/e2e-...)`, or `Doc-tests lab`.
    pub what: String,
    /// The executable, as cargo printed it (relative to the workspace); none for doc tests.
    pub exe: Option<String>,
    /// The tests libtest ran (its `running N tests`).
    pub tests: usize,
    /// libtest's `finished in N s`: the whole binary, all its tests.
    pub secs: f64,
}

/// Every test binary of a `cargo test` run with its time: cargo prints `Running <what>
/// (<executable>)` or `Doc-tests <crate>` before each binary, and libtest ends each with `test
/// result: ... finished in 1.23s` (merged doc tests then say `all doctests ran in 1.5s`,
/// their compilation included: that is their time). libtest on stable Rust times nothing finer
/// than the binary.
/// Colour codes and progress lines (`\r`) are ignored; a binary that ended without its result
/// line (killed, crashed) is left out.
pub(super) fn binary_times(text: &str) -> Vec<BinaryTime> {
    let ansi = regex::Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").unwrap();
    let finished = regex::Regex::new(r"finished in ([0-9]+(?:\.[0-9]+)?)s").unwrap();
    let running_n = regex::Regex::new(r"^running ([0-9]+) tests?$").unwrap();
    let all_doctests = regex::Regex::new(r"^all doctests ran in ([0-9]+(?:\.[0-9]+)?)s").unwrap();
    let mut out = vec![];
    let mut current: Option<BinaryTime> = None;
    for raw in text.lines() {
        let raw = raw.rsplit('\r').next().unwrap_or(raw);
        let line = ansi.replace_all(raw, "");
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Running ") {
            let rest = rest.trim_matches('`');
            let exe = rest
                .rfind(" (")
                .filter(|_| rest.ends_with(')'))
                .map(|i| rest[i + 2..rest.len() - 1].to_string());
            current = Some(BinaryTime {
                what: rest.to_string(),
                exe,
                tests: 0,
                secs: 0.0,
            });
        } else if line.starts_with("Doc-tests ") {
            current = Some(BinaryTime {
                what: line.to_string(),
                exe: None,
                tests: 0,
                secs: 0.0,
            });
        } else if let Some(c) = running_n.captures(line) {
            if let Some(b) = current.as_mut() {
                b.tests = c[1].parse().unwrap_or(0);
            }
        } else if line.starts_with("test result: ")
            && let Some(c) = finished.captures(line)
            && let Some(mut b) = current.take()
        {
            b.secs = c[1].parse().unwrap_or(0.0);
            out.push(b);
        } else if let Some(c) = all_doctests.captures(line)
            && let Some(b) = out.last_mut()
            && b.exe.is_none()
        {
            // Merged doc tests (edition 2024): their compilation counts too.
            b.secs = c[1].parse().unwrap_or(b.secs);
        }
    }
    out
}

/// The name a binary is listed by: its crate root relative to the workspace
/// (`chapters/06-pingpong/tests/e2e.rs`: every chapter has a `tests/e2e.rs`), from the first
/// source in cargo's dep-info file next to the executable; else what cargo printed.
fn binary_label(root: &Path, b: &BinaryTime) -> String {
    let source = b.exe.as_ref().and_then(|exe| {
        let d = root.join(format!("{exe}.d"));
        let text = std::fs::read_to_string(d).ok()?;
        let first = text.lines().next()?;
        let (_, deps) = first.split_once(": ")?;
        let src = Path::new(deps.split_whitespace().next()?);
        Some(src.strip_prefix(root).unwrap_or(src).display().to_string())
    });
    match source {
        Some(s) if b.what.starts_with("unittests ") => format!("{s} (unit tests)"),
        Some(s) => s,
        None => b.what.clone(),
    }
}

/// The `n` slowest binaries, slowest first, as lines (no terminal control).
pub(super) fn slowest_lines(root: &Path, times: &[BinaryTime], n: usize) -> Vec<String> {
    if times.is_empty() {
        return vec![];
    }
    let mut sorted: Vec<&BinaryTime> = times.iter().collect();
    sorted.sort_by(|a, b| b.secs.total_cmp(&a.secs));
    let shown = sorted.len().min(n);
    let mut lines = vec![format!(
        "slowest test binaries ({shown} of {}; libtest times each binary as a whole, its tests \
         together):",
        times.len()
    )];
    for b in sorted.into_iter().take(n) {
        lines.push(format!(
            "{:>8.1} s  {:>4} test{}  {}",
            b.secs,
            b.tests,
            if b.tests == 1 { " " } else { "s" },
            binary_label(root, b)
        ));
    }
    lines
}

/// Prints [`slowest_lines`] after the run; the heading in bold only on a terminal.
fn print_slowest(root: &Path, times: &[BinaryTime], n: usize) {
    let lines = slowest_lines(root, times, n);
    let Some((head, rest)) = lines.split_first() else {
        return;
    };
    let bold = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::env::var_os("NO_COLOR").is_none();
    if bold {
        println!("\n\x1b[1m{head}\x1b[0m");
    } else {
        println!("\n{head}");
    }
    for l in rest {
        println!("{l}");
    }
}

/// `cargo test` and its arguments: the whole workspace, unless the arguments before `--`
/// select packages themselves (`-p X`, `--package X`, `--workspace`).
pub(super) fn cargo_test_args(args: &[String]) -> Vec<String> {
    let own = args.iter().position(|a| a == "--").unwrap_or(args.len());
    // `--exclude` works only with `--workspace`, which is then added.
    let selects = args[..own].iter().any(|a| {
        a == "--workspace" || a == "--package" || a.starts_with("-p") || a.starts_with("--package=")
    });
    let mut out = vec!["test".to_string()];
    if !selects {
        out.push("--workspace".into());
    }
    out.extend(args.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::{BinaryTime, binary_times, cargo_test_args, slowest_lines};
    use std::path::Path;

    /// `cargo test` output as `cargo lab test` reads it (stdout and stderr in one pipe), in the
    /// form cargo 1.95 and its libtest print it (captured with `CARGO_TERM_COLOR=always`), cut
    /// down and renamed: cargo's statuses in colour (our stdout was a terminal), a binary with
    /// a test libtest warned about, a failed binary, one killed before its result line, merged
    /// doc tests.
    const SAMPLE: &str = "\x1b[1m\x1b[92m   Compiling\x1b[0m lab v0.1.0 (/work/rxe-lab/lab)
\x1b[1m\x1b[92m    Finished\x1b[0m `test` profile [optimized + debuginfo] target(s) in 41.07s
\x1b[1m\x1b[92m     Running\x1b[0m unittests src/lib.rs (target/debug/deps/harness-3f1c0a9b7d2e4c11)

running 2 tests
test course::tests::parse ... ok
test suite::tests::times ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.52s

\x1b[1m\x1b[92m     Running\x1b[0m tests/e2e.rs (target/debug/deps/e2e-9a8b7c6d5e4f3a21)

running 1 test
test e2e has been running for over 60 seconds
test e2e ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 83.20s

     Running tests/wire.rs (target/debug/deps/wire-0011223344556677)

running 3 tests
test a ... ok
test b ... FAILED
test c ... ok

failures:
    b

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 12.5s

     Running tests/killed.rs (target/debug/deps/killed-8899aabbccddeeff)

running 1 test
error: test failed, to rerun pass `-p lab --test killed`

Caused by:
  process didn't exit successfully: `target/debug/deps/killed-8899aabbccddeeff` (signal: 9, SIGKILL: kill)
   Doc-tests lab

running 4 tests
test lab/src/lib.rs - (line 12) ... ok
\rtest result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s

all doctests ran in 1.00s; merged doctests compilation took 0.98s
";

    #[test]
    fn every_binary_with_a_result_line_has_its_time() {
        let t = binary_times(SAMPLE);
        let row = |what: &str, exe: Option<&str>, tests, secs| BinaryTime {
            what: what.into(),
            exe: exe.map(String::from),
            tests,
            secs,
        };
        assert_eq!(
            t,
            vec![
                row(
                    "unittests src/lib.rs (target/debug/deps/harness-3f1c0a9b7d2e4c11)",
                    Some("target/debug/deps/harness-3f1c0a9b7d2e4c11"),
                    2,
                    0.52
                ),
                row(
                    "tests/e2e.rs (target/debug/deps/e2e-9a8b7c6d5e4f3a21)",
                    Some("target/debug/deps/e2e-9a8b7c6d5e4f3a21"),
                    1,
                    83.2
                ),
                row(
                    "tests/wire.rs (target/debug/deps/wire-0011223344556677)",
                    Some("target/debug/deps/wire-0011223344556677"),
                    3,
                    12.5
                ),
                row("Doc-tests lab", None, 4, 1.0),
            ]
        );
        assert_eq!(binary_times("running 1 test\ntest a ... ok\n"), vec![]);
    }

    #[test]
    fn the_slowest_come_first_in_plain_lines() {
        // No dep-info file here: each binary is named by what cargo printed.
        let lines = slowest_lines(Path::new("/nonexistent"), &binary_times(SAMPLE), 2);
        assert_eq!(
            lines,
            vec![
                "slowest test binaries (2 of 4; libtest times each binary as a whole, its tests \
                 together):",
                "    83.2 s     1 test   tests/e2e.rs (target/debug/deps/e2e-9a8b7c6d5e4f3a21)",
                "    12.5 s     3 tests  tests/wire.rs (target/debug/deps/wire-0011223344556677)",
            ]
        );
        assert!(lines.iter().all(|l| !l.contains('\x1b')));
        assert!(slowest_lines(Path::new("/"), &[], 10).is_empty());
    }

    #[test]
    fn a_binary_is_named_by_its_crate_root_from_the_dep_info_file() {
        let dir = tempfile::tempdir().unwrap();
        let deps = dir.path().join("target/debug/deps");
        std::fs::create_dir_all(&deps).unwrap();
        let root = dir.path().display().to_string();
        std::fs::write(
            deps.join("e2e-9a8b7c6d5e4f3a21.d"),
            // As cargo writes it for a workspace member: sources relative to the workspace.
            format!(
                "{root}/target/debug/deps/e2e-9a8b7c6d5e4f3a21.d: \
                 chapters/06-pingpong/tests/e2e.rs chapters/06-pingpong/tests/x.rs\n\n\
                 {root}/target/debug/deps/e2e-9a8b7c6d5e4f3a21: \
                 chapters/06-pingpong/tests/e2e.rs chapters/06-pingpong/tests/x.rs\n"
            ),
        )
        .unwrap();
        std::fs::write(
            deps.join("harness-3f1c0a9b7d2e4c11.d"),
            format!(
                "{root}/target/debug/deps/harness-3f1c0a9b7d2e4c11: {root}/harness/src/lib.rs\n"
            ),
        )
        .unwrap();
        let lines = slowest_lines(dir.path(), &binary_times(SAMPLE), 10);
        assert!(
            lines
                .contains(&"    83.2 s     1 test   chapters/06-pingpong/tests/e2e.rs".to_string()),
            "{lines:#?}"
        );
        assert!(
            lines.contains(&"     0.5 s     2 tests  harness/src/lib.rs (unit tests)".to_string()),
            "{lines:#?}"
        );
        assert!(lines.contains(&"     1.0 s     4 tests  Doc-tests lab".to_string()));
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_package_selection_passes_through_and_otherwise_the_workspace_is_tested() {
        assert_eq!(cargo_test_args(&[]), args(&["test", "--workspace"]));
        assert_eq!(
            cargo_test_args(&args(&["-p", "lab"])),
            args(&["test", "-p", "lab"])
        );
        assert_eq!(
            cargo_test_args(&args(&["--package=lab", "--test", "device"])),
            args(&["test", "--package=lab", "--test", "device"])
        );
        // `--exclude` needs `--workspace`; a `-p` after `--` is the test binary's.
        assert_eq!(
            cargo_test_args(&args(&["--exclude", "book"])),
            args(&["test", "--workspace", "--exclude", "book"])
        );
        assert_eq!(
            cargo_test_args(&args(&["--", "-p"])),
            args(&["test", "--workspace", "--", "-p"])
        );
    }
}
