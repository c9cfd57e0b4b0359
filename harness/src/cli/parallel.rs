//! `cargo lab test`'s runner when `LAB_TEST_JOBS` asks for more than one binary at a time: the
//! test binaries the build pass found ([`progress::plan`]), run N at a time, the longest first.
//!
//! - The labs allow it: each topology is its own VM, and a binary takes a lab's lock
//!   ([`crate::testing::lock`]) for each use, so two binaries on one lab take turns while a
//!   binary on the other lab, or on a VM of its own, runs beside them.
//! - It is not the default: the guests are TCG-emulated, so the suite is bound by the host's
//!   CPU. On a 2-core machine two at a time was no faster than one at a time, and starved
//!   guests broke timing-bound tests: an RC retry budget ran out, netem counts moved, the docs
//!   test took more than twice as long (harness/README.md has the run). Give it cores to spare.
//! - Each binary runs as cargo would run it (in its package's directory, with `CARGO`,
//!   `CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`), its output kept and shown whole when it ends, so
//!   two binaries' lines never interleave; the doc tests are one `cargo test --doc`.
//! - Every binary runs, even after a failure (cargo stops at the first failing binary); the
//!   failures are listed at the end, each with the command that runs it alone.
//! - Order: the last complete run's times (`target/rxe-lab/suite-times.tsv`), longest first,
//!   a binary with no time first of all.
//! - `LAB_TEST_JOBS` unset or 1 (the default), `--no-run` or `--message-format` leave the run
//!   to cargo, one binary after another, its output as it comes ([`super::suite`]).

use super::progress::{self, Plan, TestExe, clock};
use super::suite::{BinaryTime, CargoTest, binary_times};
use anyhow::{Context as _, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// How many binaries run at once: `LAB_TEST_JOBS`, else 1.
pub(super) fn jobs() -> Result<usize> {
    match std::env::var("LAB_TEST_JOBS") {
        Err(_) => Ok(1),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=16).contains(&n) => Ok(n),
            _ => bail!(
                "LAB_TEST_JOBS={v:?}: give how many test binaries run at once, 1 to 16 (1: one \
                 after another, as cargo runs them)"
            ),
        },
    }
}

/// Whether the run is one this runner takes: not a build-only run, not one with its own
/// message format.
pub(super) fn applies(args: &[String]) -> bool {
    let own = args.iter().position(|a| a == "--").unwrap_or(args.len());
    !args[..own]
        .iter()
        .any(|a| a == "--no-run" || a.starts_with("--message-format"))
}

/// One unit of work: a test executable, or the selection's doc tests.
#[derive(Debug, Clone)]
enum Job {
    Exe(TestExe),
    Doc,
}

impl Job {
    fn label(&self, root: &Path) -> String {
        match self {
            Job::Exe(e) => e.label(root),
            Job::Doc => "doc tests".into(),
        }
    }
}

/// What one job left: its output (cargo's `Running` line first, as cargo prints it), how it
/// ended, how long it took.
struct Done {
    label: String,
    /// Its time for the slowest list: the binary's, measured here (its output may hold other
    /// runs' `test result` lines: a test that runs `cargo lab test` itself); the doc tests',
    /// read from cargo's output.
    times: Vec<BinaryTime>,
    text: Vec<u8>,
    ok: bool,
    ended: String,
    secs: f64,
    rerun: String,
}

/// The jobs, longest first by `last` (label -> seconds); a job without a time comes first.
fn order(root: &Path, plan: &Plan, last: &BTreeMap<String, f64>) -> Vec<Job> {
    let mut jobs: Vec<Job> = plan.exes.iter().cloned().map(Job::Exe).collect();
    if plan.doc_tests {
        jobs.push(Job::Doc);
    }
    // A stable sort: equal times keep cargo's order.
    jobs.sort_by(|a, b| time(b, root, last).total_cmp(&time(a, root, last)));
    jobs
}

/// A job's time in the last run (the doc tests: every crate's together); infinite if unknown.
fn time(j: &Job, root: &Path, last: &BTreeMap<String, f64>) -> f64 {
    match j {
        Job::Exe(e) => last.get(&e.label(root)).copied().unwrap_or(f64::INFINITY),
        Job::Doc => {
            let docs: Vec<f64> = last
                .iter()
                .filter(|(l, _)| l.starts_with("Doc-tests "))
                .map(|(_, s)| *s)
                .collect();
            if docs.is_empty() {
                f64::INFINITY
            } else {
                docs.iter().sum()
            }
        }
    }
}

/// Runs the plan's binaries `n` at a time. Returns the exit code (0, or 101 as cargo's when a
/// binary failed) and each binary's time.
pub(super) fn run(
    root: &Path,
    run: &CargoTest,
    plan: &Plan,
    n: usize,
    interrupted: &'static AtomicBool,
) -> Result<(i32, Vec<BinaryTime>)> {
    let last = progress::read_times(&progress::times_file(root));
    let jobs = order(root, plan, &last);
    // The guess counts this run's binaries only, each at its last time.
    let expected: BTreeMap<String, f64> = jobs
        .iter()
        .map(|j| (j.label(root), time(j, root, &last)))
        .filter(|(_, s)| s.is_finite())
        .collect();
    let queue = Arc::new(Mutex::new(jobs));
    let total = queue.lock().unwrap().len();
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let own = run.args.iter().position(|a| a == "--");
    let libtest: Vec<String> = own.map_or(vec![], |i| run.args[i + 1..].to_vec());
    let cargo_args: Vec<String> = run.args[..own.unwrap_or(run.args.len())].to_vec();
    println!(
        "cargo lab test: {total} test binaries, {n} at a time (LAB_TEST_JOBS), the longest \
         first; each one's output is shown when it ends"
    );
    let board = Arc::new(Mutex::new(Board::new(total, n, terminal, expected)));
    let running: Arc<Mutex<BTreeMap<u32, String>>> = Arc::default();
    let (tx, rx) = mpsc::channel::<Done>();
    let mut workers = vec![];
    for _ in 0..n.min(total.max(1)) {
        let (queue, tx, board, running) =
            (queue.clone(), tx.clone(), board.clone(), running.clone());
        let (run, root, libtest, cargo_args) = (
            run.clone(),
            root.to_path_buf(),
            libtest.clone(),
            cargo_args.clone(),
        );
        workers.push(std::thread::spawn(move || {
            loop {
                if interrupted.load(Ordering::SeqCst) {
                    break;
                }
                let Some(job) = ({
                    let mut q = queue.lock().unwrap();
                    (!q.is_empty()).then(|| q.remove(0))
                }) else {
                    break;
                };
                let label = job.label(&root);
                board.lock().unwrap().started(&label);
                let done = run_job(&root, &run, &job, &cargo_args, &libtest, &running);
                board.lock().unwrap().ended(&label);
                if tx.send(done).is_err() {
                    break;
                }
            }
        }));
    }
    drop(tx);
    let mut times = vec![];
    let mut failed: Vec<(String, String, String)> = vec![];
    let mut forwarded = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(d) => {
                times.extend(d.times.iter().cloned());
                if !d.ok {
                    failed.push((d.label.clone(), d.ended.clone(), d.rerun.clone()));
                }
                board.lock().unwrap().show(&d);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        // Ctrl-C reaches the binaries with us (one process group); a SIGTERM sent to us alone
        // is passed on, so that they stop and take their labs' teardown with them.
        if interrupted.load(Ordering::SeqCst) && !forwarded {
            forwarded = true;
            for pid in running.lock().unwrap().keys() {
                let _ = duct::cmd("kill", ["-TERM", &pid.to_string()])
                    .stderr_null()
                    .unchecked()
                    .run();
            }
        }
    }
    for w in workers {
        let _ = w.join();
    }
    board.lock().unwrap().finish();
    if failed.is_empty() {
        return Ok((0, times));
    }
    println!(
        "\ncargo lab test: {} of {total} test binaries failed (their output is above):",
        failed.len()
    );
    for (label, ended, rerun) in &failed {
        println!("  {label}: {ended}\n    alone: {rerun}");
    }
    Ok((101, times))
}

/// Runs one job to its end, its stdout and stderr in one pipe, kept. No deadline of our own:
/// every test has its own.
fn run_job(
    root: &Path,
    run: &CargoTest,
    job: &Job,
    cargo_args: &[String],
    libtest: &[String],
    running: &Mutex<BTreeMap<u32, String>>,
) -> Done {
    let t0 = Instant::now();
    let label = job.label(root);
    let (cmd, head, rerun) = match job {
        Job::Exe(e) => {
            let mut c = duct::cmd(&e.exe, libtest)
                .dir(e.dir())
                .env("CARGO", &run.cargo)
                .env("CARGO_MANIFEST_DIR", e.dir())
                .env("CARGO_MANIFEST_PATH", &e.manifest)
                .env("CARGO_PKG_NAME", &e.package);
            for (k, v) in &run.env {
                c = c.env(k, v);
            }
            (c, format!("     Running {}\n", e.running(root)), e.rerun())
        }
        Job::Doc => {
            let mut args = cargo_args.to_vec();
            args.push("--doc".into());
            if !libtest.is_empty() {
                args.push("--".into());
                args.extend(libtest.iter().cloned());
            }
            (
                run.command(&args),
                String::new(),
                "cargo lab test -- --workspace --doc".into(),
            )
        }
    };
    let mut text = head.into_bytes();
    let started = cmd
        .stdin_null()
        .stderr_to_stdout()
        .unchecked()
        .reader()
        .with_context(|| format!("starting {label}"));
    let reader = match started {
        Ok(r) => Arc::new(r),
        Err(e) => {
            text.extend_from_slice(format!("cargo lab test: {e:#}\n").as_bytes());
            return Done {
                label,
                times: vec![],
                text,
                ok: false,
                ended: "could not start".into(),
                secs: 0.0,
                rerun,
            };
        }
    };
    let pids = reader.pids();
    for p in &pids {
        running.lock().unwrap().insert(*p, label.clone());
    }
    let out = Arc::new(Mutex::new(Vec::<u8>::new()));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (r, o) = (reader.clone(), out.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 16384];
        while let Ok(n) = (&*r).read(&mut buf) {
            if n == 0 {
                break;
            }
            o.lock().unwrap().extend_from_slice(&buf[..n]);
        }
        let _ = done_tx.send(());
    });
    let status = loop {
        match reader.try_wait() {
            Ok(Some(o)) => break Ok(o.status),
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => break Err(e),
        }
    };
    // A process a test left running may hold the pipe open: what came within 2 s is all.
    let _ = done_rx.recv_timeout(Duration::from_secs(2));
    for p in &pids {
        running.lock().unwrap().remove(p);
    }
    text.extend_from_slice(&out.lock().unwrap());
    if !text.ends_with(b"\n") {
        text.push(b'\n');
    }
    let (ok, ended) = match status {
        Ok(s) if s.success() => (true, "ok".to_string()),
        Ok(s) => (
            false,
            match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                (Some(c), _) => format!("exit code {c}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => "failed".into(),
            },
        ),
        Err(e) => (false, format!("waiting for it: {e}")),
    };
    let secs = t0.elapsed().as_secs_f64();
    let times = match job {
        Job::Exe(e) => {
            // libtest's first line is `running N tests`.
            let shown = String::from_utf8_lossy(&text);
            let tests = shown
                .lines()
                .find_map(|l| l.strip_prefix("running ")?.split(' ').next()?.parse().ok())
                .unwrap_or(0);
            vec![BinaryTime {
                what: e.running(root),
                exe: Some(
                    e.exe
                        .strip_prefix(root)
                        .unwrap_or(&e.exe)
                        .display()
                        .to_string(),
                ),
                tests,
                secs,
            }]
        }
        Job::Doc => binary_times(&String::from_utf8_lossy(&text)),
    };
    Done {
        label,
        times,
        text,
        ok,
        ended,
        secs,
        rerun,
    }
}

/// What the run shows about itself: a bar on a terminal (done of total, what runs now), plain
/// lines otherwise (one when a binary starts, one when it ends).
struct Board {
    total: usize,
    done: usize,
    jobs: usize,
    start: Instant,
    now: BTreeMap<String, Instant>,
    last: BTreeMap<String, f64>,
    begun: Vec<String>,
    bar: Option<ProgressBar>,
}

impl Board {
    fn new(total: usize, jobs: usize, terminal: bool, last: BTreeMap<String, f64>) -> Board {
        let bar = terminal.then(|| {
            let b = ProgressBar::new(total as u64);
            b.set_style(
                ProgressStyle::with_template(
                    "cargo lab test: {pos} of {len} done {wide_bar} {elapsed} so far{msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.enable_steady_tick(Duration::from_millis(500));
            b
        });
        Board {
            total,
            done: 0,
            jobs,
            start: Instant::now(),
            now: BTreeMap::new(),
            last,
            begun: vec![],
            bar,
        }
    }

    fn started(&mut self, label: &str) {
        self.now.insert(label.to_string(), Instant::now());
        self.begun.push(label.to_string());
        match &self.bar {
            Some(b) => b.set_message(self.message()),
            None => println!(
                "cargo lab test: started {label} ({} of {} done, {} so far{})",
                self.done,
                self.total,
                clock(self.start.elapsed()),
                self.guess()
            ),
        }
    }

    fn ended(&mut self, label: &str) {
        self.now.remove(label);
    }

    /// Prints a finished binary's output and the line that counts it.
    fn show(&mut self, d: &Done) {
        self.done += 1;
        let line = format!(
            "cargo lab test: {} {} in {:.1} s ({} of {} done, {} so far{})",
            if d.ok { "ok" } else { "FAILED" },
            d.label,
            d.secs,
            self.done,
            self.total,
            clock(self.start.elapsed()),
            self.guess()
        );
        let mut out = std::io::stdout();
        let write = |out: &mut std::io::Stdout| {
            let _ = out.write_all(&d.text);
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        };
        match &self.bar {
            Some(b) => {
                b.suspend(|| write(&mut out));
                b.set_position(self.done as u64);
                b.set_message(self.message());
            }
            None => write(&mut out),
        }
    }

    /// "; running: a (1m 02s), b (5s); about 3m left".
    fn message(&self) -> String {
        let now: Vec<String> = self
            .now
            .iter()
            .map(|(l, t)| format!("{l} ({})", clock(t.elapsed())))
            .collect();
        format!("; running: {}{}", now.join(", "), self.guess())
    }

    /// "; about 9m 10s left": the last run's times of this run's binaries that have not ended,
    /// less what the running ones have done, over the jobs; nothing without a last run.
    fn guess(&self) -> String {
        if self.last.is_empty() {
            return String::new();
        }
        let running: f64 = self
            .now
            .iter()
            .map(|(l, t)| {
                let had = self.last.get(l).copied().unwrap_or(0.0);
                (had - t.elapsed().as_secs_f64()).max(0.0)
            })
            .sum();
        let waiting: f64 = self
            .last
            .iter()
            .filter(|(l, _)| !self.begun.contains(l))
            .map(|(_, s)| s)
            .sum();
        let secs = (running + waiting) / self.jobs.max(1) as f64;
        format!("; about {} left", clock(Duration::from_secs_f64(secs)))
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Job, applies, order};
    use crate::cli::progress::{Plan, TestExe};
    use std::collections::BTreeMap;
    use std::path::Path;

    fn exe(name: &str) -> TestExe {
        TestExe {
            exe: format!("/w/target/debug/deps/{name}-1").into(),
            manifest: "/w/harness/Cargo.toml".into(),
            package: "harness".into(),
            target: name.into(),
            kind: "test".into(),
            src: format!("/w/harness/tests/{name}.rs").into(),
        }
    }

    #[test]
    fn the_longest_run_first_and_an_unknown_one_before_them() {
        let plan = Plan {
            binaries: 4,
            whole_suite: true,
            exes: vec![exe("a"), exe("b"), exe("new")],
            doc_tests: true,
        };
        let last: BTreeMap<String, f64> = [
            ("harness/tests/a.rs", 1.0),
            ("harness/tests/b.rs", 50.0),
            ("Doc-tests harness", 2.0),
            ("Doc-tests lab", 3.0),
        ]
        .into_iter()
        .map(|(l, s)| (l.to_string(), s))
        .collect();
        let got: Vec<String> = order(Path::new("/w"), &plan, &last)
            .iter()
            .map(|j| match j {
                Job::Exe(e) => e.target.clone(),
                Job::Doc => "doc".into(),
            })
            .collect();
        assert_eq!(got, ["new", "b", "doc", "a"]);
        assert_eq!(exe("a").rerun(), "cargo lab test -- -p harness --test a");
        assert_eq!(
            exe("a").running(Path::new("/w")),
            "tests/a.rs (target/debug/deps/a-1)"
        );
    }

    #[test]
    fn build_only_runs_stay_with_cargo() {
        let a = |s: &[&str]| applies(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert!(a(&["test", "--workspace"]));
        assert!(a(&["test", "-p", "x", "--", "--no-run"]));
        assert!(!a(&["test", "--workspace", "--no-run"]));
        assert!(!a(&["test", "--message-format=json"]));
    }
}
