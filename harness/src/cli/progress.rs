//! `cargo lab test`'s progress through the suite: binary N of M, the time so far, and a guess
//! at the rest.
//!
//! - M comes from a build-only pass before the run (`cargo test --no-run
//!   --message-format=json-render-diagnostics`): the test executables cargo built, plus one
//!   doc-test run per workspace library with doc tests when no target is selected. The build
//!   happens in that pass, with cargo's own progress on stderr.
//! - N counts cargo's `Running ...` and `Doc-tests ...` lines as they come.
//! - The guess: in a run of the whole suite, the times the binaries took in the last complete
//!   run of the whole suite (`target/rxe-lab/suite-times.tsv`); otherwise, or without one, the
//!   mean of the binaries done so far.
//! - On a terminal the line is an indicatif bar under the output; otherwise (CI, a pipe) it is
//!   a plain line before each binary's output.

use super::suite::CargoTest;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, HashSet};
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the build-only pass found.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Plan {
    /// Test binaries the run will start, doc-test runs included.
    pub binaries: usize,
    /// The whole workspace, every target: the run whose times make the next run's guess.
    pub whole_suite: bool,
    /// The test executables, in the order cargo built them.
    pub exes: Vec<TestExe>,
    /// Whether the run includes doc tests (one `cargo test --doc` for the selection).
    pub doc_tests: bool,
}

/// One test executable cargo built, and where cargo would run it from.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TestExe {
    pub exe: PathBuf,
    /// The package's Cargo.toml: cargo runs a test binary in its directory.
    pub manifest: PathBuf,
    /// The package's name.
    pub package: String,
    /// The target's name and kind (`lib`, `bin`, `test`, ...), and its crate root.
    pub target: String,
    pub kind: String,
    pub src: PathBuf,
}

impl TestExe {
    /// The package's directory (the binary's working directory).
    pub fn dir(&self) -> &Path {
        self.manifest.parent().unwrap_or(Path::new("."))
    }

    /// The label the slowest list and the times file use (`harness/tests/cli.rs`,
    /// `lab/src/lib.rs (unit tests)`), relative to `root`.
    pub fn label(&self, root: &Path) -> String {
        let src = self.src.strip_prefix(root).unwrap_or(&self.src).display();
        match self.kind.as_str() {
            "lib" | "bin" | "rlib" | "proc-macro" => format!("{src} (unit tests)"),
            _ => src.to_string(),
        }
    }

    /// What cargo prints after `Running` for it: `tests/e2e.rs (target/debug/deps/e2e-1)`,
    /// `unittests src/lib.rs (...)`.
    pub fn running(&self, root: &Path) -> String {
        let src = self
            .src
            .strip_prefix(self.dir())
            .unwrap_or(&self.src)
            .display();
        let exe = self.exe.strip_prefix(root).unwrap_or(&self.exe).display();
        match self.kind.as_str() {
            "lib" | "bin" | "rlib" | "proc-macro" => format!("unittests {src} ({exe})"),
            _ => format!("{src} ({exe})"),
        }
    }

    /// The `cargo lab test` arguments that run this binary alone.
    pub fn rerun(&self) -> String {
        let which = match self.kind.as_str() {
            "lib" | "rlib" | "proc-macro" => "--lib".to_string(),
            "bin" => format!("--bin {}", self.target),
            k => format!("--{k} {}", self.target),
        };
        format!("cargo lab test -- -p {} {which}", self.package)
    }
}

/// Flags that select targets: with one of them, cargo runs no doc tests unless `--doc`.
const TARGET_FLAGS: &[&str] = &[
    "--lib",
    "--bin",
    "--bins",
    "--test",
    "--tests",
    "--example",
    "--examples",
    "--bench",
    "--benches",
    "--all-targets",
];

/// Runs the build-only pass of `run` (a `cargo test ...` run). `Err(code)`: cargo failed
/// (the build's errors are on stderr already). A run that only builds (`--no-run`) or sets its
/// own message format has no pass: its binaries are counted as they come, with no total.
pub(super) fn plan(run: &CargoTest) -> Result<Plan, i32> {
    let args = &run.args;
    let own = args.iter().position(|a| a == "--").unwrap_or(args.len());
    if args[..own]
        .iter()
        .any(|a| a == "--no-run" || a.starts_with("--message-format"))
    {
        return Ok(Plan {
            binaries: 0,
            whole_suite: false,
            exes: vec![],
            doc_tests: false,
        });
    }
    let mut pass = args[..own].to_vec();
    pass.extend(["--no-run", "--message-format=json-render-diagnostics"].map(String::from));
    // cargo's progress and errors go to our stderr; its JSON messages are read here.
    let out = run
        .command(&pass)
        .stdin_null()
        .stdout_capture()
        .unchecked()
        .run()
        .map_err(|e| {
            eprintln!("cargo lab test: running cargo: {e}");
            101
        })?;
    if !out.status.success() {
        return Err(out.status.code().unwrap_or(101));
    }
    let selects_targets = args[..own]
        .iter()
        .any(|a| TARGET_FLAGS.contains(&a.split('=').next().unwrap_or(a)));
    let doc = args[..own].iter().any(|a| a == "--doc");
    let mut plan = count(
        &String::from_utf8_lossy(&out.stdout),
        !selects_targets || doc,
        doc,
    );
    plan.whole_suite = !selects_targets
        && !doc
        && args[..own].iter().any(|a| a == "--workspace")
        && !args[..own]
            .iter()
            .any(|a| a == "--exclude" || a.starts_with("--exclude="));
    Ok(plan)
}

/// Counts the binaries in cargo's JSON messages: each test executable (unless `doc_only`), and
/// with `doc_tests` each library with doc tests of a package under test (one that has a test
/// executable: cargo builds the other workspace libraries too, as dependencies).
fn count(json_lines: &str, doc_tests: bool, doc_only: bool) -> Plan {
    let mut exes = HashSet::new();
    let mut found = vec![];
    let mut tested = HashSet::new();
    let mut libs = HashSet::new();
    for line in json_lines.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        let local = v["package_id"]
            .as_str()
            .is_some_and(|p| p.starts_with("path+file://"));
        let package = v["package_id"].as_str().unwrap_or_default().to_string();
        if let Some(exe) = v["executable"].as_str()
            && v["profile"]["test"] == true
        {
            if exes.insert(exe.to_string()) {
                let kinds = v["target"]["kind"].as_array();
                found.push(TestExe {
                    exe: exe.into(),
                    manifest: v["manifest_path"].as_str().unwrap_or_default().into(),
                    package: package_name(&package, v["manifest_path"].as_str()),
                    target: v["target"]["name"].as_str().unwrap_or_default().into(),
                    kind: kinds
                        .and_then(|k| k.first())
                        .and_then(|k| k.as_str())
                        .unwrap_or_default()
                        .into(),
                    src: v["target"]["src_path"].as_str().unwrap_or_default().into(),
                });
            }
            tested.insert(package.clone());
        }
        let kinds = v["target"]["kind"].as_array().cloned().unwrap_or_default();
        if local
            && v["target"]["doctest"] == true
            && kinds.iter().any(|k| k == "lib" || k == "rlib")
        {
            libs.insert((package, v["target"]["name"].to_string()));
        }
    }
    let mut binaries = if doc_only { 0 } else { exes.len() };
    let docs = libs.iter().filter(|(p, _)| tested.contains(p)).count();
    if doc_tests {
        binaries += docs;
    }
    Plan {
        binaries,
        whole_suite: false,
        exes: if doc_only { vec![] } else { found },
        doc_tests: doc_tests && docs > 0,
    }
}

/// A package's name from its id: `path+file:///w/lab#0.1.0` (the directory's name) or
/// `path+file:///w/vendor/rdma-sys#rdma-sys@0.3.0` (the name before `@`).
fn package_name(id: &str, manifest: Option<&str>) -> String {
    let frag = id.rsplit_once('#').map(|(_, f)| f).unwrap_or_default();
    if let Some((name, _)) = frag.split_once('@') {
        return name.to_string();
    }
    let dir = manifest
        .and_then(|m| Path::new(m).parent())
        .or_else(|| Some(Path::new(id.split_once("://")?.1.split('#').next()?)));
    dir.and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The progress of one run, fed cargo's output line by line.
pub(super) struct Progress {
    total: usize,
    started: usize,
    start: Instant,
    /// The last complete run's time per binary label.
    last: BTreeMap<String, f64>,
    seen: HashSet<String>,
    bar: Option<ProgressBar>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Progress({} of {})", self.started, self.total)
    }
}

impl Progress {
    /// A bar on a terminal, plain lines otherwise.
    pub(super) fn new(root: &Path, plan: &Plan, terminal: bool) -> Progress {
        let bar = terminal.then(|| {
            let b = ProgressBar::new(plan.binaries as u64);
            let template = match plan.binaries {
                0 => "cargo lab test: binary {pos}, {elapsed} so far{msg}",
                _ => "cargo lab test: binary {pos} of {len} {wide_bar} {elapsed} so far{msg}",
            };
            b.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.enable_steady_tick(Duration::from_millis(500));
            b
        });
        Progress {
            total: plan.binaries,
            started: 0,
            start: Instant::now(),
            last: if plan.whole_suite {
                read_times(&times_file(root))
            } else {
                BTreeMap::new()
            },
            seen: HashSet::new(),
            bar,
        }
    }

    /// Writes one line of cargo's output (the bar steps aside for it), and moves the count when
    /// the line starts a binary: `label` is the binary's name when it does.
    pub(super) fn line(&mut self, out: &mut dyn std::io::Write, text: &[u8], label: Option<&str>) {
        if let Some(label) = label {
            self.started += 1;
            // The guess counts the binary starting now as still to run.
            let guess = self.guess();
            self.seen.insert(label.to_string());
            match &self.bar {
                Some(b) => {
                    b.set_position(self.started as u64);
                    b.set_message(guess);
                }
                None => {
                    let of = match self.total {
                        0 => String::new(),
                        n => format!(" of {n}"),
                    };
                    let _ = writeln!(
                        out,
                        "cargo lab test: binary {}{of}, {} so far{guess}",
                        self.started,
                        clock(self.start.elapsed())
                    );
                }
            }
        }
        match &self.bar {
            Some(b) => b.suspend(|| {
                let _ = out.write_all(text).and_then(|_| out.flush());
            }),
            None => {
                let _ = out.write_all(text).and_then(|_| out.flush());
            }
        }
    }

    /// "; about 9m 10s left", or nothing before there is anything to go by.
    fn guess(&self) -> String {
        let left_known: f64 = self
            .last
            .iter()
            .filter(|(l, _)| !self.seen.contains(*l))
            .map(|(_, s)| s)
            .sum();
        let left = if !self.last.is_empty() {
            Some(left_known)
        } else if self.started > 1 && self.total > 0 {
            let done = self.started - 1;
            let mean = self.start.elapsed().as_secs_f64() / done as f64;
            Some(mean * (self.total.saturating_sub(done)) as f64)
        } else {
            None
        };
        left.map_or(String::new(), |s| {
            format!("; about {} left", clock(Duration::from_secs_f64(s)))
        })
    }

    /// Clears the bar.
    pub(super) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// `1m 05s`, `42s`.
pub(super) fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Where the last complete run's times are kept (untracked, in the workspace's target dir).
pub(super) fn times_file(root: &Path) -> PathBuf {
    root.join("target/rxe-lab/suite-times.tsv")
}

/// `secs<TAB>label` per line; a missing or bad file is no history.
pub(super) fn read_times(path: &Path) -> BTreeMap<String, f64> {
    let Ok(f) = std::fs::File::open(path) else {
        return BTreeMap::new();
    };
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            let (s, label) = l.split_once('\t')?;
            Some((label.to_string(), s.parse().ok()?))
        })
        .collect()
}

/// Keeps a complete run's times for the next run's guess.
pub(super) fn write_times(path: &Path, times: &[(String, f64)]) {
    let text: String = times
        .iter()
        .map(|(l, s)| format!("{s:.1}\t{l}\n"))
        .collect();
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(path, text);
}

#[cfg(test)]
mod tests {
    use super::{Progress, clock, count, read_times, write_times};
    use std::collections::{BTreeMap, HashSet};
    use std::time::{Duration, Instant};

    /// cargo 1.95's JSON for a workspace library (its lib, its unit-test executable), an
    /// integration test, a dependency, a build script, and a workspace library built only as a
    /// dependency: two test executables, one doc-test library.
    const JSON: &str = r#"{"reason":"compiler-artifact","package_id":"registry+https://github.com/rust-lang/crates.io-index#libc@0.2.191","target":{"kind":["lib"],"name":"libc","doctest":true},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","package_id":"path+file:///w/lab#0.1.0","target":{"kind":["lib"],"name":"lab","doctest":true},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","package_id":"path+file:///w/lab#0.1.0","target":{"kind":["lib"],"name":"lab","doctest":true},"profile":{"test":true},"executable":"/w/target/debug/deps/lab-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/lab#0.1.0","target":{"kind":["test"],"name":"verbs","doctest":false},"profile":{"test":true},"executable":"/w/target/debug/deps/verbs-2"}
{"reason":"compiler-artifact","package_id":"path+file:///w/lab#0.1.0","target":{"kind":["custom-build"],"name":"build-script-build","doctest":false},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","package_id":"path+file:///w/harness#0.1.0","target":{"kind":["lib"],"name":"harness","doctest":true},"profile":{"test":false},"executable":null}
{"reason":"build-finished","success":true}"#;

    #[test]
    fn counts_test_executables_and_workspace_doc_tests() {
        let n = |doc, only| count(JSON, doc, only).binaries;
        assert_eq!(n(true, false), 3);
        assert_eq!(n(false, false), 2);
        assert_eq!(n(true, true), 1);
    }

    fn progress(total: usize, last: &[(&str, f64)]) -> Progress {
        Progress {
            total,
            started: 0,
            start: Instant::now(),
            last: last.iter().map(|(l, s)| (l.to_string(), *s)).collect(),
            seen: HashSet::new(),
            bar: None,
        }
    }

    #[test]
    fn plain_lines_count_binaries_and_guess_from_the_last_run() {
        let mut p = progress(3, &[("a", 60.0), ("b", 5.0), ("c", 1.5)]);
        let mut out = vec![];
        p.line(&mut out, b"   Compiling x\n", None);
        p.line(&mut out, b"     Running a\n", Some("a"));
        p.line(&mut out, b"test t ... ok\n", None);
        p.line(&mut out, b"     Running b\n", Some("b"));
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "   Compiling x");
        assert_eq!(
            lines[1],
            "cargo lab test: binary 1 of 3, 0s so far; about 1m 06s left"
        );
        assert_eq!(lines[2], "     Running a");
        assert_eq!(
            lines[4],
            "cargo lab test: binary 2 of 3, 0s so far; about 6s left"
        );
        assert_eq!(lines.len(), 6);
    }

    #[test]
    fn without_history_the_guess_is_the_mean_so_far() {
        let mut p = progress(4, &[]);
        assert_eq!(p.guess(), "");
        p.started = 3;
        p.start = Instant::now() - Duration::from_secs(20);
        // Two done in 20 s: 10 s each, two left to start plus the current one.
        assert_eq!(p.guess(), "; about 20s left");
    }

    #[test]
    fn times_round_trip_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t/suite-times.tsv");
        write_times(&f, &[("a b".into(), 1.24), ("c".into(), 300.0)]);
        let want: BTreeMap<String, f64> = [("a b".to_string(), 1.2), ("c".to_string(), 300.0)]
            .into_iter()
            .collect();
        assert_eq!(read_times(&f), want);
        assert!(read_times(&dir.path().join("none")).is_empty());
        assert_eq!(clock(Duration::from_secs(65)), "1m 05s");
    }
}
