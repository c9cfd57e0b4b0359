//! `exercise`: list, check, watch, reset and show the course's exercises
//! (`chapters/exercises.toml`; docs/exercises.md).
//!
//! `check` runs an exercise's `#[test]`s through cargo, with the lab machinery every test uses
//! (`harness::testing`: a running `cargo lab up` lab, or one booted for the run), and prints
//! the verdict: the first failing check's message (what is missing, expected, actual), the
//! hint and the README section. It records the state in `target/rxe-lab/exercises.json` and
//! the run in exercism's test-runner format (version 3) in `target/rxe-lab/results.json`
//! (`LAB_EXERCISE_STATE_DIR` moves both: the tests use it).

use crate::course::Course;
use crate::exercises::{Exercise, IMPL_VAR, Impl, Registry, panic_message};
use crate::host_tools;
use anyhow::{Context as _, Result, bail};
use clap::Subcommand;
use std::ffi::OsStr;
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Subcommand)]
pub(super) enum ExerciseCmd {
    /// Each exercise, its chapter and its state (not started, failing, done).
    List,
    /// Run one exercise's checks on the lab and print the verdict (exit 0 pass, 1 fail, 2
    /// error).
    Check {
        /// The exercise: its id (`03-remote-write`) or its chapter's number (`03`).
        id: String,
        /// Grade the reference solution instead of your starter.
        #[arg(long)]
        solution: bool,
        /// Also write the results (exercism test-runner v3 JSON) here.
        #[arg(long, value_name = "FILE.json")]
        results: Option<PathBuf>,
    },
    /// Check again on every save of an exercise file, clearing the screen; Ctrl-C ends it.
    Watch {
        /// The exercise to check first (default: the first one not done).
        id: Option<String>,
        /// Stop after this many seconds (default: run until Ctrl-C).
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
    },
    /// Restore an exercise's starter file from git (your changes to it are lost).
    Reset { id: String },
    /// Print the reference solution, after a y/N confirmation.
    Solution {
        id: String,
        /// Do not ask (needed without a terminal).
        #[arg(long)]
        yes: bool,
    },
}

pub(super) fn exercise(cmd: ExerciseCmd) -> Result<i32> {
    let (reg, root) = Registry::load()?;
    let (course, _) = Course::load()?;
    match cmd {
        ExerciseCmd::List => list(&reg, &course, &root),
        ExerciseCmd::Check {
            id,
            solution,
            results,
        } => {
            let imp = if solution {
                Impl::Solution
            } else {
                Impl::Starter
            };
            let ex = reg.find(&id)?;
            let v = check(&course, &root, ex, imp)?;
            if let Some(f) = results {
                std::fs::write(&f, v.results_json())
                    .with_context(|| format!("writing {}", f.display()))?;
            }
            Ok(v.exit_code())
        }
        ExerciseCmd::Watch { id, timeout } => watch(&reg, &course, &root, id.as_deref(), timeout),
        ExerciseCmd::Reset { id } => reset(&course, &root, reg.find(&id)?),
        ExerciseCmd::Solution { id, yes } => solution(&course, &root, reg.find(&id)?, yes),
    }
}

/// Paths of an exercise, relative to the workspace root.
fn files(course: &Course, ex: &Exercise) -> Result<(String, PathBuf, PathBuf)> {
    let ch = course.find(&ex.chapter).with_context(|| {
        format!(
            "exercise {}: chapter {} is not in chapters/course.toml",
            ex.id, ex.chapter
        )
    })?;
    let dir = ch.dir(Path::new(""));
    Ok((ch.package.clone(), ex.starter(&dir), ex.solution(&dir)))
}

/// Where the state and results files go: `$LAB_EXERCISE_STATE_DIR`, else
/// `<workspace>/target/rxe-lab` (untracked).
fn state_dir(root: &Path) -> PathBuf {
    match std::env::var_os("LAB_EXERCISE_STATE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => root.join("target/rxe-lab"),
    }
}

fn state_file(root: &Path) -> PathBuf {
    state_dir(root).join("exercises.json")
}

/// id -> "done" | "failing", from the state file (absent or unreadable: nothing recorded).
fn load_state(root: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(state_file(root)).unwrap_or_default();
    let re = regex::Regex::new(r#""([0-9a-z-]+)"\s*:\s*"(done|failing)""#).expect("regex");
    re.captures_iter(&text)
        .map(|c| (c[1].to_string(), c[2].to_string()))
        .collect()
}

fn save_state(root: &Path, id: &str, state: &str) -> Result<()> {
    let mut all = load_state(root);
    all.retain(|(i, _)| i != id);
    all.push((id.into(), state.into()));
    all.sort();
    let body: Vec<String> = all
        .iter()
        .map(|(i, s)| format!("  {}: {}", json_str(i), json_str(s)))
        .collect();
    let f = state_file(root);
    std::fs::create_dir_all(f.parent().expect("parent"))?;
    std::fs::write(&f, format!("{{\n{}\n}}\n", body.join(",\n")))
        .with_context(|| format!("writing {}", f.display()))
}

fn state_of(state: &[(String, String)], id: &str) -> &'static str {
    match state.iter().find(|(i, _)| i == id).map(|(_, s)| s.as_str()) {
        Some("done") => "done",
        Some(_) => "failing",
        None => "not started",
    }
}

fn list(reg: &Registry, course: &Course, root: &Path) -> Result<i32> {
    let state = load_state(root);
    println!("{:<18} {:<3} {:<12} title", "id", "ch", "state");
    for ex in &reg.exercises {
        files(course, ex)?;
        println!(
            "{:<18} {:<3} {:<12} {}",
            ex.id,
            ex.chapter,
            state_of(&state, &ex.id),
            ex.title
        );
    }
    println!(
        "\ncheck one: `cargo lab exercise check <id>`; re-check on save: `cargo lab exercise watch`"
    );
    Ok(0)
}

/// One check's outcome.
#[derive(Debug, Clone)]
struct TestResult {
    name: String,
    /// "pass", "fail" or "error" (did not run).
    status: &'static str,
    message: Option<String>,
}

/// The verdict of `check`.
#[derive(Debug, Clone)]
struct Verdict {
    status: &'static str,
    message: Option<String>,
    tests: Vec<TestResult>,
}

impl Verdict {
    fn exit_code(&self) -> i32 {
        match self.status {
            "pass" => 0,
            "fail" => 1,
            _ => 2,
        }
    }

    /// exercism's test-runner `results.json`, version 3 (docs/exercises.md).
    fn results_json(&self) -> String {
        let opt = |m: &Option<String>| m.as_deref().map_or("null".into(), json_str);
        let tests: Vec<String> = self
            .tests
            .iter()
            .map(|t| {
                format!(
                    "    {{\"name\": {}, \"status\": {}, \"message\": {}}}",
                    json_str(&t.name),
                    json_str(t.status),
                    opt(&t.message)
                )
            })
            .collect();
        format!(
            "{{\n  \"version\": 3,\n  \"status\": {},\n  \"message\": {},\n  \"tests\": [\n{}\n  ]\n}}\n",
            json_str(self.status),
            opt(&self.message),
            tests.join(",\n")
        )
    }
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Runs the exercise's checks, prints the verdict, records state and results.
fn check(course: &Course, root: &Path, ex: &Exercise, imp: Impl) -> Result<Verdict> {
    let (package, starter, _) = files(course, ex)?;
    let file = match imp {
        Impl::Starter => starter.display().to_string(),
        Impl::Solution => format!("the reference solution of {}", ex.id),
    };
    println!("checking {} ({file}) on the lab ...", ex.id);
    let t0 = Instant::now();
    let (out, err) = run_cargo(root, &package, &ex.checks, imp)?;
    let v = verdict(&ex.checks, &out, &err);
    let dir = starter
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new(""));
    print_verdict(ex, dir, &v, t0.elapsed());
    if imp == Impl::Starter && v.status != "error" {
        save_state(
            root,
            &ex.id,
            if v.status == "pass" {
                "done"
            } else {
                "failing"
            },
        )?;
    }
    let rf = state_dir(root).join("results.json");
    std::fs::create_dir_all(rf.parent().expect("parent"))?;
    std::fs::write(&rf, v.results_json()).with_context(|| format!("writing {}", rf.display()))?;
    Ok(v)
}

/// The deadline of one `check`: the build, then each check's run deadline.
fn check_deadline(checks: usize) -> Duration {
    Duration::from_secs(600) + crate::testing::run_timeout() * checks as u32
}

/// `cargo test -p PACKAGE --test exercises -- --exact CHECKS`, with the implementation
/// selected; returns stdout and stderr. Ctrl-C or the deadline kill it. Not `--quiet`: that
/// also makes libtest print dots instead of the `test NAME ... ok` lines the verdict reads.
fn run_cargo(root: &Path, package: &str, checks: &[String], imp: Impl) -> Result<(String, String)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let args = [
        "test",
        "-p",
        package,
        "--test",
        "exercises",
        "--",
        "--exact",
    ]
    .into_iter()
    .chain(checks.iter().map(String::as_str))
    .chain(["--test-threads=1"]);
    let child = duct::cmd(cargo, args)
        .dir(root)
        .env(IMPL_VAR, imp.name())
        .stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .start()
        .context("running cargo test")?;
    let stop = interrupted();
    let deadline = Instant::now() + check_deadline(checks.len());
    loop {
        match child.try_wait() {
            Ok(Some(out)) => {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                return Ok((text(&out.stdout), text(&out.stderr)));
            }
            Ok(None) => {}
            Err(e) => {
                host_tools::kill_and_reap(&child);
                return Err(e).context("waiting for cargo test");
            }
        }
        if stop.load(Ordering::SeqCst) || Instant::now() > deadline {
            host_tools::kill_and_reap(&child);
            if stop.load(Ordering::SeqCst) {
                bail!("interrupted");
            }
            bail!(
                "the checks were still running after {} s; stopped them",
                check_deadline(checks.len()).as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The verdict from libtest's output: each check's `test NAME ... ok|FAILED` line, and the
/// first panic in a failed check's captured output.
fn verdict(checks: &[String], out: &str, err: &str) -> Verdict {
    let mut tests = vec![];
    for name in checks {
        let line = format!("test {name} ... ");
        let status = out
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .map(|s| if s.starts_with("ok") { "pass" } else { "fail" })
            .unwrap_or("error");
        let message = (status == "fail").then(|| {
            let head = format!("---- {name} stdout ----");
            let part = out.split_once(&head).map_or(out, |(_, p)| p);
            panic_message(part).unwrap_or_else(|| "the check failed (no message)".into())
        });
        tests.push(TestResult {
            name: name.clone(),
            status,
            message,
        });
    }
    let status = if tests.iter().any(|t| t.status == "error") {
        "error"
    } else if tests.iter().any(|t| t.status == "fail") {
        "fail"
    } else {
        "pass"
    };
    let message = (status == "error").then(|| {
        let tail: Vec<&str> = err.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "the checks did not run (a build error?):\n{}",
            tail.join("\n")
        )
    });
    Verdict {
        status,
        message,
        tests,
    }
}

fn print_verdict(ex: &Exercise, dir: &Path, v: &Verdict, took: Duration) {
    let secs = took.as_secs_f64();
    match v.status {
        "pass" => println!("PASS {}: {} [{secs:.1} s]", ex.id, ex.title),
        "fail" => {
            let t = v
                .tests
                .iter()
                .find(|t| t.status == "fail")
                .expect("a failed check");
            println!("FAIL {} (check `{}`) [{secs:.1} s]", ex.id, t.name);
            for l in t.message.as_deref().unwrap_or("").lines() {
                println!("  {l}");
            }
            println!("hint: {}", ex.hint);
            println!("read: {}", dir.join(&ex.section).display());
        }
        _ => {
            println!("ERROR {} [{secs:.1} s]", ex.id);
            println!("{}", v.message.as_deref().unwrap_or(""));
        }
    }
}

/// Set by Ctrl-C (SIGINT) or SIGTERM.
fn interrupted() -> &'static AtomicBool {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register(sig, f.clone());
        }
        f
    })
}

fn watch(
    reg: &Registry,
    course: &Course,
    root: &Path,
    first: Option<&str>,
    timeout: Option<u64>,
) -> Result<i32> {
    use notify::{RecursiveMode, Watcher as _};
    let state = load_state(root);
    let mut current = match first {
        Some(id) => reg.find(id)?,
        None => reg
            .exercises
            .iter()
            .find(|e| state_of(&state, &e.id) != "done")
            .unwrap_or(&reg.exercises[0]),
    };
    let starters: Vec<(PathBuf, &Exercise)> = reg
        .exercises
        .iter()
        .map(|e| Ok((root.join(files(course, e)?.1), e)))
        .collect::<Result<_>>()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let mut w = notify::recommended_watcher(tx).context("starting the file watcher")?;
    for (f, _) in &starters {
        let dir = f.parent().expect("exercises/");
        w.watch(dir, RecursiveMode::NonRecursive)
            .with_context(|| format!("watching {}", dir.display()))?;
    }
    let stop = interrupted();
    let end = timeout.map(|s| Instant::now() + Duration::from_secs(s));
    loop {
        print!("\x1b[2J\x1b[H");
        let _ = check(course, root, current, Impl::Starter);
        println!("\nwatching the exercise files: save one to check it again; Ctrl-C to stop");
        let _ = std::io::stdout().flush();
        // Wait for a save of a starter (events of other files are ignored).
        let changed = loop {
            if stop.load(Ordering::SeqCst) {
                return Ok(130);
            }
            if end.is_some_and(|e| Instant::now() > e) {
                println!("watch: --timeout reached");
                return Ok(0);
            }
            let ev = match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(Ok(ev)) => ev,
                Ok(Err(e)) => bail!("the file watcher failed: {e}"),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(e) => bail!("the file watcher stopped: {e}"),
            };
            if !(ev.kind.is_modify() || ev.kind.is_create()) {
                continue;
            }
            if let Some((_, e)) = starters.iter().find(|(f, _)| ev.paths.contains(f)) {
                break *e;
            }
        };
        // An editor's save is often several events: let them settle.
        std::thread::sleep(Duration::from_millis(150));
        while rx.try_recv().is_ok() {}
        current = changed;
    }
}

fn reset(course: &Course, root: &Path, ex: &Exercise) -> Result<i32> {
    let (_, starter, _) = files(course, ex)?;
    // reset restores the starter from git.
    let args = [
        OsStr::new("checkout"),
        OsStr::new("HEAD"),
        OsStr::new("--"),
        starter.as_os_str(),
    ];
    crate::host_tools::git(root, &args)?;
    println!("{}: {} restored from git", ex.id, starter.display());
    Ok(0)
}

fn solution(course: &Course, root: &Path, ex: &Exercise, yes: bool) -> Result<i32> {
    let (_, _, sol) = files(course, ex)?;
    if !yes {
        if !std::io::stdin().is_terminal() {
            bail!(
                "`cargo lab exercise solution {}` asks for a confirmation and stdin is not a \
                 terminal; add --yes to print it anyway",
                ex.id
            );
        }
        print!(
            "Show the reference solution of {} ({})? [y/N] ",
            ex.id, ex.title
        );
        std::io::stdout().flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        if !matches!(line.trim(), "y" | "Y" | "yes") {
            println!("not shown");
            return Ok(1);
        }
    }
    let path = root.join(&sol);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    println!("// {}\n{text}", sol.display());
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_names_the_first_failure_and_results_are_v3_json() {
        let checks = vec!["a".to_string(), "b".to_string()];
        let out = "running 2 tests\ntest a ... ok\ntest b ... FAILED\n\nfailures:\n\n\
                   ---- b stdout ----\nthread 'b' panicked at x.rs:1:1:\nthe MR lacks \"X\"\n\
                   expected: 1\nnote: run with\n";
        let v = verdict(&checks, out, "");
        assert_eq!(v.status, "fail");
        assert_eq!(v.exit_code(), 1);
        assert_eq!(
            v.tests[1].message.as_deref(),
            Some("the MR lacks \"X\"\nexpected: 1")
        );
        let j = v.results_json();
        assert!(
            j.starts_with("{\n  \"version\": 3,\n  \"status\": \"fail\",\n  \"message\": null,"),
            "{j}"
        );
        assert!(
            j.contains("{\"name\": \"a\", \"status\": \"pass\", \"message\": null}"),
            "{j}"
        );
        assert!(
            j.contains("\"message\": \"the MR lacks \\\"X\\\"\\nexpected: 1\"}"),
            "{j}"
        );
        let v = verdict(&checks, "", "error[E0308]: mismatched types\n");
        assert_eq!((v.status, v.exit_code()), ("error", 2));
        assert!(v.message.unwrap().contains("E0308"));
        let v = verdict(&checks, "test a ... ok\ntest b ... ok\n", "");
        assert_eq!((v.status, v.exit_code()), ("pass", 0));
    }
}
