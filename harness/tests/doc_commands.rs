//! Every command the repository's docs show is run, and does what the text says.
//!
//! `harness::doc_commands` collects every `cargo lab ...` line of a code block and every inline
//! `cargo lab ...` span, in the tracked Markdown files and the `//!` headers of Rust files. This
//! test runs each (once per distinct command, in file order) with the `cargo-lab` binary this
//! suite built, from the repository root, and checks the exit status the text implies: 0, or
//! non-zero with the given text for a line marked `# fails: <text>`. Lines marked `# terminal 1`
//! and `# terminal 2` run at the same time. A wrong command added to a README turns this red.
//!
//! Files the commands write under /tmp (`--trace /tmp/13.pcap`) and that were not there before
//! are removed at the end.
//!
//! Where they run: `up`, `down` and `status` act on labs of their own (a temporary
//! `LAB_STATE_DIR`, torn down at the end), so they never stop the labs the rest of the suite
//! uses; every other command runs against the suite's labs (`cargo lab test` passes them in
//! `LAB_STATE_DIR`), or against the temporary labs when there are none.
//!
//! Shorter forms (documented here and in the README's "The docs are tested"):
//! - `cargo lab test` runs as `cargo lab test -- --no-run`: this test runs inside `cargo lab
//!   test` and cannot run the whole suite again; the short form still sets up, finds the labs
//!   and builds exactly what the suite built.
//! - `cargo lab bench --runs N ...` (the boot figures) runs with `--runs 1`;
//! - a line marked `# tested as: <command>` runs `<command>` (the text says why where it is).
//!
//! One output is checked beyond its exit status: the tour's names the full run of each chapter
//! it runs in a shorter form (chapter 11's `--quick`), and that command is itself documented.
//!
//! Checked once: the tour runs first, and a `cargo lab run NN [-- ARGS]` it already ran in this
//! test (the same chapter with the same arguments, on the same labs) and passed is checked by
//! the tour's closing table instead of a second run.

use harness::course::{Course, workspace_root};
use harness::doc_commands::{DocCommand, Expect, Kind, collect, collect_repo};
use std::collections::HashSet;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LAB: &str = env!("CARGO_BIN_EXE_cargo-lab");

/// The short form of a command that cannot run at full length here.
fn short_form(cmd: &str) -> Option<String> {
    if cmd == "cargo lab test" {
        return Some("cargo lab test -- --no-run".into());
    }
    // The boot benchmark behind the docs' figures (`--runs 5`, `--runs 10 --topology ...`):
    // one run of each, the same steps; the figures themselves come from full runs.
    let words: Vec<&str> = cmd.split_whitespace().collect();
    if words.get(..3) == Some(&["cargo", "lab", "bench"]) {
        let at = words.iter().position(|w| *w == "--runs")?;
        if words.get(at + 1).is_some_and(|n| *n != "1") {
            let mut short: Vec<&str> = words.clone();
            short[at + 1] = "1";
            return Some(short.join(" "));
        }
    }
    None
}

/// Subcommands that `--help` does not list but the docs may show.
const HIDDEN: &[&str] = &["bench"];

fn root() -> PathBuf {
    workspace_root().expect("the rxe-lab workspace")
}

/// Where commands run: the suite's labs, and labs of this test's own for up/down/status.
struct Labs {
    own: tempfile::TempDir,
    suite: Option<PathBuf>,
}

impl Labs {
    fn new() -> Labs {
        Labs {
            own: tempfile::Builder::new()
                .prefix("rxe-lab-doc.")
                .tempdir()
                .expect("a temp dir"),
            suite: std::env::var_os("LAB_STATE_DIR").map(PathBuf::from),
        }
    }

    fn state_dir(&self, c: &DocCommand) -> &Path {
        let lifecycle = matches!(c.subcommand().as_str(), "up" | "down" | "status");
        match &self.suite {
            Some(s) if !lifecycle => s,
            _ => self.own.path(),
        }
    }
}

impl Drop for Labs {
    fn drop(&mut self) {
        // Teardown always runs: whatever `up` started here stops.
        let _ = Command::new(LAB)
            .arg("down")
            .env("LAB_STATE_DIR", self.own.path())
            .current_dir(root())
            .stdin(Stdio::null())
            .output();
    }
}

fn limit(c: &DocCommand) -> Duration {
    match c.subcommand().as_str() {
        "tour" | "test" => Duration::from_secs(900),
        _ => Duration::from_secs(300),
    }
}

fn spawn(c: &DocCommand, labs: &Labs) -> Result<Running, String> {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new(LAB);
    cmd.args(c.lab_args())
        .current_dir(root())
        .env("LAB_STATE_DIR", labs.state_dir(c))
        .stdin(if c.subcommand() == "shell" {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: cannot start {LAB}: {e}", c.place))?;
    if let Some(mut i) = child.stdin.take() {
        // `cargo lab shell` reads lines until end of input.
        let _ = i.write_all(b"ibv_devinfo -l\n");
    }
    let out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let (tx, first_line) = std::sync::mpsc::channel();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let mut r = std::io::BufReader::new(out);
        let mut line = String::new();
        while matches!(std::io::BufRead::read_line(&mut r, &mut line), Ok(n) if n > 0) {
            let _ = tx.send(());
            s.push_str(&line);
            line.clear();
        }
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    Ok(Running {
        child,
        out,
        err,
        first_line,
    })
}

/// A running command: its readers collect stdout and stderr; `first_line` fires at the first
/// line of stdout.
struct Running {
    child: Child,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
    first_line: std::sync::mpsc::Receiver<()>,
}

fn wait_first_line(r: &mut Running, limit: Duration) {
    let _ = r.first_line.recv_timeout(limit);
}

/// Waits for the command up to `limit`; its exit code and output (stdout then stderr).
fn finish(r: Running, limit: Duration) -> (Option<i32>, String) {
    let Running {
        mut child,
        out: t_out,
        err: t_err,
        ..
    } = r;
    let t0 = Instant::now();
    let code = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st.code().or(Some(128 + 9)),
            Ok(None) if t0.elapsed() < limit => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                harness::runner::signal_group(child.id(), "KILL");
                let _ = child.wait();
                break None;
            }
        }
    };
    let text = format!(
        "{}\n--- stderr ---\n{}",
        t_out.join().unwrap_or_default(),
        t_err.join().unwrap_or_default()
    );
    (code, text)
}

fn judge(c: &DocCommand, code: Option<i32>, out: &str, took: Duration) -> Result<(), String> {
    let head = format!(
        "{}: `{}`{}",
        c.place,
        c.shown,
        if c.run != c.shown {
            format!(" (run as `{}`)", c.run)
        } else {
            String::new()
        }
    );
    match (code, &c.expect) {
        (None, _) => Err(format!(
            "{head}: still running after {} s (killed)\n{out}",
            took.as_secs()
        )),
        (Some(0), Expect::Success) => Ok(()),
        (Some(n), Expect::Success) => Err(format!("{head}: exit {n}, the text implies 0\n{out}")),
        (Some(0), Expect::Fails(t)) => Err(format!(
            "{head}: exit 0, but the text says it fails ({t:?})\n{out}"
        )),
        (Some(_), Expect::Fails(t)) if out.contains(t.as_str()) => Ok(()),
        (Some(n), Expect::Fails(t)) => Err(format!(
            "{head}: failed (exit {n}) but without {t:?} in its output\n{out}"
        )),
    }
}

/// The chapter runs the tour made and passed, each as (chapter number, the arguments it ran
/// with: its `tour` args, else its defaults), from the tour's closing table (`NN package
/// topology time ok`).
fn toured_ok(out: &str) -> Vec<(String, Vec<String>)> {
    let Ok((course, _)) = Course::load() else {
        return vec![];
    };
    out.lines()
        .skip_while(|l| !l.starts_with("#   package"))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let ch = course.find(w.first()?)?;
            (w.len() == 5 && w[4] == "ok")
                .then(|| (ch.number.clone(), effective_args(ch, ch.tour_args())))
        })
        .collect()
}

/// What a chapter runs with: the arguments given, else its defaults (`cargo lab run NN`).
fn effective_args(ch: &harness::course::Chapter, given: &[String]) -> Vec<String> {
    if given.is_empty() {
        ch.defaults.clone()
    } else {
        given.to_vec()
    }
}

/// The chapter run this command is, when it is exactly one the tour already ran and passed in
/// this suite (`cargo lab run NN [-- ARGS]`, no other flag, expected to succeed): the same
/// chapter, the same arguments, on the same labs. Such a command is checked once, by the tour's
/// transcript, not run again.
fn already_toured(c: &DocCommand, toured: &[(String, Vec<String>)]) -> Option<String> {
    let words = c.lab_args();
    if words.first().map(String::as_str) != Some("run") || c.expect != Expect::Success {
        return None;
    }
    let dash = words.iter().position(|w| w == "--").unwrap_or(words.len());
    if dash != 2 {
        return None; // a flag of `run` itself (--trace ...), or no chapter
    }
    let (course, _) = Course::load().ok()?;
    let ch = course.find(&words[1])?;
    let given = words.get(dash + 1..).unwrap_or_default();
    let args = effective_args(ch, given);
    toured
        .iter()
        .any(|(n, a)| *n == ch.number && *a == args)
        .then(|| ch.number.clone())
}

/// Runs the commands in order; returns one line (or paragraph) per failure. A chapter run the
/// tour made and passed in the same list is not run again ([`already_toured`]).
fn run_all(cmds: &[DocCommand], labs: &Labs) -> Vec<String> {
    let mut failures = vec![];
    let mut toured = vec![];
    let mut i = 0;
    while i < cmds.len() {
        let c = &cmds[i];
        let t0 = Instant::now();
        if c.kind == Kind::Terminal1 {
            let Some(second) = cmds.get(i + 1).filter(|n| n.kind == Kind::Terminal2) else {
                failures.push(format!(
                    "{}: `# terminal 1` without a `# terminal 2` line after it",
                    c.place
                ));
                i += 1;
                continue;
            };
            eprintln!("doc: {} | {}", c.run, second.run);
            let first = spawn(c, labs);
            // The second terminal starts once the first has printed a line (our servers print
            // theirs once they listen), or after 5 s for a server that says nothing before a
            // client comes (the C tools); our clients retry their connection anyway.
            let res = first.and_then(|mut a| {
                wait_first_line(&mut a, Duration::from_secs(5));
                Ok((a, spawn(second, labs)?))
            });
            match res {
                Ok((a, b)) => {
                    let (cb, ob) = finish(b, limit(second));
                    let (ca, oa) = finish(a, limit(c));
                    for r in [
                        judge(c, ca, &oa, t0.elapsed()),
                        judge(second, cb, &ob, t0.elapsed()),
                    ] {
                        if let Err(e) = r {
                            failures.push(e);
                        }
                    }
                }
                Err(e) => failures.push(e),
            }
            i += 2;
            continue;
        }
        if c.kind == Kind::Terminal2 {
            failures.push(format!(
                "{}: `# terminal 2` without a `# terminal 1` line before it",
                c.place
            ));
            i += 1;
            continue;
        }
        if let Some(n) = already_toured(c, &toured) {
            eprintln!(
                "doc: {} [the tour above ran chapter {n} so, and it passed]",
                c.run
            );
            i += 1;
            continue;
        }
        eprintln!("doc: {}", c.run);
        match spawn(c, labs) {
            Ok(child) => {
                let (code, out) = finish(child, limit(c));
                if let Err(e) = judge(c, code, &out, t0.elapsed()) {
                    failures.push(e);
                } else if c.subcommand() == "tour" {
                    if let Err(e) = tour_names_the_full_runs(&out) {
                        failures.push(format!("{}: `{}`: {e}", c.place, c.shown));
                    }
                    toured = toured_ok(&out);
                }
            }
            Err(e) => failures.push(e),
        }
        eprintln!("doc:   [{:.1} s]", t0.elapsed().as_secs_f64());
        i += 1;
    }
    failures
}

/// The tour runs some chapters in a shorter form (chapter 11: `--quick`, its `tour` in
/// course.toml) and then names the full run: its output holds each such chapter's note.
fn tour_names_the_full_runs(out: &str) -> Result<(), String> {
    let (course, _) = Course::load().map_err(|e| format!("{e:#}"))?;
    let missing: Vec<String> = course
        .chapters
        .iter()
        .filter_map(|ch| ch.tour_note())
        .filter(|n| !out.contains(n.as_str()))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("the tour's output lacks {missing:?}\n{out}"))
    }
}

/// The commands to run: the repository's, each distinct one once (the first place it is
/// shown), synopses left out, short forms applied.
fn runnable(mut cmds: Vec<DocCommand>) -> Vec<DocCommand> {
    // A command marked `# fails:` somewhere fails the same way wherever it is shown.
    let failing: Vec<(String, Expect)> = cmds
        .iter()
        .filter(|c| matches!(c.expect, Expect::Fails(_)))
        .map(|c| (c.run.clone(), c.expect.clone()))
        .collect();
    for c in &mut cmds {
        if let Some((_, e)) = failing.iter().find(|(r, _)| *r == c.run) {
            c.expect = e.clone();
        }
    }
    let mut seen = HashSet::new();
    let mut out: Vec<DocCommand> = vec![];
    let mut it = cmds
        .into_iter()
        .filter(|c| c.kind != Kind::Synopsis)
        .peekable();
    while let Some(mut c) = it.next() {
        if let Some(s) = short_form(&c.run) {
            c.run = s;
        }
        if c.kind == Kind::Terminal1 && it.peek().is_some_and(|n| n.kind == Kind::Terminal2) {
            // A pair of terminals: once per distinct pair.
            let second = it.next().unwrap();
            let key = format!("{}\n{}", c.run, second.run);
            if seen.insert((key, Kind::Terminal1, c.expect.clone())) {
                out.push(c);
                out.push(second);
            }
            continue;
        }
        if seen.insert((c.run.clone(), c.kind.clone(), c.expect.clone())) {
            out.push(c);
        }
    }
    // The tour first: the chapter runs it makes are then not made again (see `already_toured`).
    if let Some(t) = out
        .iter()
        .position(|c| c.run == "cargo lab tour" && c.kind == Kind::Run)
    {
        let tour = out.remove(t);
        out.insert(0, tour);
    }
    out
}

fn subcommands() -> Vec<String> {
    let out = Command::new(LAB)
        .arg("--help")
        .output()
        .expect("cargo-lab --help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

#[test]
fn the_docs_are_well_formed() {
    let root = root();
    let (cmds, problems) = collect_repo(&root).expect("collecting the docs' commands");
    let mut bad: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.place, p.what))
        .collect();
    assert!(
        cmds.len() > 30,
        "only {} documented commands found",
        cmds.len()
    );
    // Every subcommand shown, synopses included, exists.
    let subs = subcommands();
    assert!(subs.iter().any(|s| s == "run"), "{subs:?}");
    for c in &cmds {
        let sub = c.subcommand();
        let word = sub.chars().all(|c| c.is_ascii_lowercase());
        if word && !subs.contains(&sub) && !HIDDEN.contains(&sub.as_str()) {
            bad.push(format!(
                "{}: `{}`: `cargo lab {}` is not a command ({})",
                c.place,
                c.shown,
                c.subcommand(),
                subs.join(", ")
            ));
        }
    }
    // `cargo lab run NN -- ARGS` in the docs is one of the chapter's examples in course.toml,
    // and every example is shown somewhere.
    let (course, _) = Course::load().expect("chapters/course.toml");
    let mut shown_examples = HashSet::new();
    for c in cmds.iter().filter(|c| c.kind != Kind::Synopsis) {
        let words = c.lab_args();
        if words.first().map(String::as_str) != Some("run") || words.len() < 2 {
            continue;
        }
        let Some(ch) = course.find(&words[1]) else {
            continue; // `# fails:` lines name chapters that do not exist
        };
        let Some(dash) = words.iter().position(|w| w == "--") else {
            continue;
        };
        let args = &words[dash + 1..];
        if ch.examples.iter().any(|e| e.args == args) {
            shown_examples.insert((ch.number.clone(), args.to_vec()));
        } else if c.expect == Expect::Success {
            bad.push(format!(
                "{}: `{}`: not among chapter {}'s examples in chapters/course.toml (add a \
                 [[chapter.example]] with args = {:?})",
                c.place, c.shown, ch.number, args
            ));
        }
    }
    // The full run the tour names after a chapter it ran in short (`cargo lab run 11`) is a
    // documented, tested command.
    for ch in &course.chapters {
        let Some(note) = ch.tour_note() else { continue };
        let full = format!("cargo lab run {}", ch.number);
        if !cmds
            .iter()
            .any(|c| c.kind != Kind::Synopsis && c.shown == full)
        {
            bad.push(format!(
                "chapters/course.toml: chapter {}: the tour prints {note:?}, but no README or //! \
                 header shows `{full}`",
                ch.number
            ));
        }
    }
    for ch in &course.chapters {
        for e in &ch.examples {
            if !shown_examples.contains(&(ch.number.clone(), e.args.clone())) {
                bad.push(format!(
                    "chapters/course.toml: chapter {} example `cargo lab run {} -- {}` is shown \
                     in no README or //! header",
                    ch.number,
                    ch.number,
                    e.args.join(" ")
                ));
            }
        }
    }
    assert!(bad.is_empty(), "the docs:\n{}", bad.join("\n"));
}

#[test]
fn a_wrong_command_in_the_docs_turns_the_suite_red() {
    // A README with a mistyped subcommand, a chapter that does not exist, and a failure the
    // text mis-describes: each is reported (none needs a lab, so this runs anywhere).
    let md = "```sh\ncargo lab lsit\ncargo lab run 99\n\
              cargo lab run 98   # fails: the wrong message\n\
              cargo lab run 97   # fails: no chapter \"97\"\n```\n";
    let mut cmds = vec![];
    let mut problems = vec![];
    collect("planted/README.md", md, false, &mut cmds, &mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    let labs = Labs::new();
    let failures = run_all(&runnable(cmds), &labs);
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(failures[0].contains("planted/README.md:2: `cargo lab lsit`: exit 2"));
    assert!(failures[1].contains("planted/README.md:3: `cargo lab run 99`: exit 1"));
    assert!(failures[2].contains("without \"the wrong message\""));
}

#[test]
fn the_boot_benchmark_runs_once_in_the_docs_test() {
    let short = |c: &str| short_form(c);
    assert_eq!(
        short("cargo lab bench --runs 10 --topology loopback").as_deref(),
        Some("cargo lab bench --runs 1 --topology loopback")
    );
    assert_eq!(
        short("cargo lab bench --runs 5").as_deref(),
        Some("cargo lab bench --runs 1")
    );
    assert_eq!(short("cargo lab bench --runs 1"), None);
    assert_eq!(short("cargo lab run 11 -- --runs 10"), None);
    assert_eq!(
        short("cargo lab test").as_deref(),
        Some("cargo lab test -- --no-run")
    );
}

#[test]
fn a_chapter_run_the_tour_passed_is_checked_once() {
    // The tour's closing table: chapter 06 passed (its defaults), 11 passed (its `--quick`),
    // 08 failed.
    let tour = "\n#   package                  topology     time  result\n\
                06  ch06-pingpong            loopback     3.1s  ok\n\
                08  ch08-failure-modes       loopback    12.0s  FAILED (single exit 1)\n\
                11  ch11-performance         pair        40.2s  ok\n";
    let toured = toured_ok(tour);
    assert_eq!(toured.len(), 2, "{toured:?}");
    let md = "```sh\ncargo lab run 06\ncargo lab run 06 -- -n 100\ncargo lab run 06 -- -e\n\
              cargo lab run 06 --trace /tmp/x.pcap\ncargo lab run 08\n\
              cargo lab run 11 -- --quick\ncargo lab run 11\n\
              cargo lab run 6   # fails: no such thing\n```\n";
    let mut cmds = vec![];
    let mut problems = vec![];
    collect("planted/README.md", md, false, &mut cmds, &mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    let once: Vec<bool> = cmds
        .iter()
        .map(|c| already_toured(c, &toured).is_some())
        .collect();
    // Run again: other arguments, a flag of `run` itself, a chapter the tour failed, the full
    // chapter 11, a line that expects a failure.
    assert_eq!(once, [true, true, false, false, false, true, false, false]);
}

/// The files under /tmp that the docs' commands name (`--trace /tmp/13.pcap`, `--svg ...`) and
/// that did not exist before the run: removed when dropped, whatever the run did. The commands
/// are the user's, written as the docs show them; what they leave behind is this test's.
struct TmpOutputs(Vec<PathBuf>);

impl TmpOutputs {
    fn of(cmds: &[DocCommand]) -> TmpOutputs {
        let mut new: Vec<PathBuf> = cmds
            .iter()
            .flat_map(|c| c.lab_args())
            .filter(|w| w.starts_with("/tmp/") && !w.contains(".."))
            .map(PathBuf::from)
            .filter(|p| !p.exists())
            .collect();
        new.sort();
        new.dedup();
        TmpOutputs(new)
    }
}

impl Drop for TmpOutputs {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn every_documented_command_runs() {
    let root = root();
    let (cmds, problems) = collect_repo(&root).expect("collecting the docs' commands");
    assert!(problems.is_empty(), "see the_docs_are_well_formed");
    let cmds = runnable(cmds);
    let _outputs = TmpOutputs::of(&cmds);
    let labs = Labs::new();
    let t0 = Instant::now();
    let failures = run_all(&cmds, &labs);
    eprintln!(
        "doc: {} commands in {:.0} s",
        cmds.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} documented commands did not do what the text says:\n\n{}",
        failures.len(),
        cmds.len(),
        failures.join("\n\n")
    );
}
