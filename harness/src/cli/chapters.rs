//! The course: `list`, `build`, `run`, `tour`, and what they share (setup on a fresh machine,
//! the builds).

use crate::course::{Chapter, Course};
use crate::testbed::{Provider, Testbed};
use crate::testing::Transcript;
use crate::{Topology, testbed, testing, vm};
use anyhow::{Context as _, Result, bail};

use super::doctor::{Check, build_checks, checks, run_setup};
use super::root;
use super::wire::{finish_trace, start_trace};
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) fn list() -> Result<i32> {
    let (course, root) = Course::load()?;
    println!("{:<3} {:<24} {:<9} title", "#", "package", "topology");
    for ch in &course.chapters {
        let here = ch.dir(&root).join("Cargo.toml").is_file();
        println!(
            "{:<3} {:<24} {:<9} {}{}",
            ch.number,
            ch.package,
            ch.topology.name(),
            ch.title,
            if here { "" } else { "  (not written yet)" }
        );
        let pad = format!("{:<3} {:<24} {:<9}  ", "", "", "");
        if !ch.summary.is_empty() {
            println!("{pad} {}", ch.summary);
        }
        if !ch.defaults.is_empty() {
            println!("{pad} defaults: {}", ch.defaults.join(" "));
        }
        if let Some(t) = &ch.tour {
            println!(
                "{pad} the tour runs: cargo lab run {} -- {}",
                ch.number,
                t.join(" ")
            );
        }
        for e in &ch.examples {
            println!(
                "{pad} try: cargo lab run {} -- {}   ({})",
                ch.number,
                e.args.join(" "),
                e.what
            );
        }
    }
    println!(
        "\nrun one: `cargo lab run 06`; all in order: `cargo lab tour`; arguments after \
         `cargo lab run NN --` replace the chapter's defaults"
    );
    Ok(0)
}

pub(super) fn missing_chapter(ch: &Chapter, root: &Path) -> Option<String> {
    let dir = ch.dir(root);
    (!dir.join("Cargo.toml").is_file()).then(|| {
        format!(
            "chapter {} ({}) is listed in chapters/course.toml but {} does not exist yet",
            ch.number,
            ch.package,
            dir.display()
        )
    })
}

/// Before building chapters (rdma-sys needs libibverbs-dev, pkg-config and libclang) and
/// starting labs: on a fresh machine, run the embedded `scripts/setup.sh` for the chosen
/// provider (what `cargo lab setup` does) when `doctor` finds required pieces missing, then check
/// again. Errors name the next command.
pub(super) fn prepare(what: &str) -> Result<()> {
    let before = missing(checks());
    if before.is_empty() {
        return Ok(());
    }
    let flag = if testbed::chosen_provider()? == Provider::Native {
        "--native"
    } else {
        "--vm"
    };
    eprintln!(
        "cargo lab {what}: missing: {}; running `scripts/setup.sh {flag}` first (what `cargo lab \
         setup` does) ...",
        before.join(", ")
    );
    let code = run_setup(&[flag])?;
    if code != 0 {
        bail!(
            "setup failed (exit {code}; see above); next: `cargo lab setup --print` shows the \
             exact apt-get command (run it as root), then `cargo lab {what}` again"
        );
    }
    still_missing(what)
}

/// The lab's packages, being installed in the background while the tour builds (see
/// [`prepare_overlapped`]). Dropping it waits for the install (apt is never cut off half-way).
pub(super) struct BackgroundSetup {
    handle: Option<duct::Handle>,
    log: std::path::PathBuf,
    what: &'static str,
    started: Instant,
}

/// How long the background install may take before the tour gives up on it.
const SETUP_LIMIT: Duration = Duration::from_secs(30 * 60);

impl BackgroundSetup {
    /// Waits for the install (up to [`SETUP_LIMIT`]), then checks that nothing required is
    /// missing. Errors name the log and the next command.
    pub(super) fn finish(mut self) -> Result<()> {
        let handle = self.handle.take().expect("waited once");
        let log = self.log.display();
        if matches!(handle.try_wait(), Ok(None)) {
            eprintln!(
                "built; waiting for the lab's packages ({:.0} s so far; log: {log}) ...",
                self.started.elapsed().as_secs_f64()
            );
        }
        let code = wait_within(&handle, SETUP_LIMIT);
        let what = self.what;
        match code {
            Some(0) => eprintln!(
                "the lab's packages are installed ({:.0} s; log: {log})",
                self.started.elapsed().as_secs_f64()
            ),
            Some(code) => {
                let text = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                eprintln!("{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
                bail!(
                    "setup failed (exit {code}; the end of {log} is above); next: `cargo lab \
                     setup --print` shows the exact apt-get command (run it as root), then \
                     `cargo lab {what}` again"
                )
            }
            None => bail!(
                "setup was still running after {} min (killed; log: {log}); next: `cargo lab \
                 setup`, then `cargo lab {what}` again",
                SETUP_LIMIT.as_secs() / 60
            ),
        }
        still_missing(what)
    }
}

impl Drop for BackgroundSetup {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            eprintln!(
                "waiting for the package install to end (log: {}) ...",
                self.log.display()
            );
            wait_within(&h, SETUP_LIMIT);
        }
    }
}

/// The child's exit code, or `None` (killed) past `limit`.
fn wait_within(h: &duct::Handle, limit: Duration) -> Option<i32> {
    let t0 = Instant::now();
    loop {
        match h.try_wait() {
            Ok(Some(out)) => return Some(out.status.code().unwrap_or(1)),
            Ok(None) if t0.elapsed() < limit => std::thread::sleep(Duration::from_millis(200)),
            Ok(None) => {
                let _ = h.kill();
                return None;
            }
            Err(_) => return Some(1),
        }
    }
}

/// The required pieces among `cs` that are missing.
fn missing(cs: Vec<Check>) -> Vec<String> {
    cs.into_iter()
        .filter(|c| c.required && !c.ok)
        .map(|c| c.what)
        .collect()
}

fn still_missing(what: &str) -> Result<()> {
    let after = missing(checks());
    if !after.is_empty() {
        bail!(
            "still missing after setup: {}; next: `cargo lab doctor` shows the fix for each, then \
             `cargo lab {what}` again",
            after.join(", ")
        );
    }
    Ok(())
}

/// [`prepare`] for a command that builds before it needs a lab (the tour): what the build needs
/// (`scripts/setup.sh --build`) is installed first, in the foreground; the rest (the lab's
/// packages: QEMU, the kernel, the reference tools) in the background while the chapters build,
/// its output in `target/rxe-lab/setup.log`. On a fresh machine the two overlap instead of
/// following each other. `None`: nothing was missing.
pub(super) fn prepare_overlapped(what: &'static str) -> Result<Option<BackgroundSetup>> {
    let before = missing(checks());
    if before.is_empty() {
        return Ok(None);
    }
    let mut updated = false;
    let build = missing(build_checks());
    if !build.is_empty() {
        eprintln!(
            "cargo lab {what}: missing: {}; running `scripts/setup.sh --build` first (what the \
             build needs; the lab's packages follow while it builds) ...",
            build.join(", ")
        );
        let code = run_setup(&["--build"])?;
        if code != 0 {
            bail!(
                "setup failed (exit {code}; see above); next: `cargo lab setup --print` shows the \
                 exact apt-get command (run it as root), then `cargo lab {what}` again"
            );
        }
        updated = true;
    }
    let rest = missing(checks());
    if rest.is_empty() {
        return Ok(None);
    }
    let flag = if testbed::chosen_provider()? == Provider::Native {
        "--native"
    } else {
        "--vm"
    };
    let dir = root()?.join("target").join("rxe-lab");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log = dir.join("setup.log");
    eprintln!(
        "cargo lab {what}: missing: {}; `scripts/setup.sh {flag}` installs them in the \
         background while the chapters build (log: {}) ...",
        rest.join(", "),
        log.display()
    );
    let handle = duct::cmd("bash", ["-c", super::SETUP_SH, "scripts/setup.sh", flag])
        .env("SETUP_APT_UPDATED", if updated { "1" } else { "0" })
        .stdin_null()
        .stderr_to_stdout()
        .stdout_path(&log)
        .unchecked()
        .start()
        .context("running bash (scripts/setup.sh)")?;
    Ok(Some(BackgroundSetup {
        handle: Some(handle),
        log,
        what,
        started: Instant::now(),
    }))
}

/// The repository checks (`harness/tests/repo_checks.rs`) run actionlint, shellcheck and
/// vagrant, the wire decoder's test tshark, the book's tests Graphviz and the pinned mdbook:
/// install them (`scripts/setup.sh --dev`) when one is missing, so `cargo lab test` passes on a
/// fresh machine; if that fails, say the command.
pub(super) fn prepare_checkers() -> Result<()> {
    let mut missing: Vec<&str> = ["actionlint", "shellcheck", "vagrant", "dot", "tshark"]
        .into_iter()
        .filter(|t| vm::which(t).is_none())
        .collect();
    // The book's tests build it with the pinned mdbook.
    if super::book::pinned_mdbook().is_none() {
        missing.push("mdbook");
    }
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "cargo lab test: the repository checks need {}; running `scripts/setup.sh --dev` first ...",
        missing.join(", ")
    );
    let code = run_setup(&["--dev"])?;
    if code != 0 {
        bail!(
            "setup --dev failed (exit {code}; see above); next: `bash scripts/setup.sh --dev --print` \
             shows what to install, then `cargo lab test` again"
        );
    }
    Ok(())
}

/// The cargo command of a build, as its arguments. `Chapters` is the one build `run`, `build`
/// and `tour` share: `cargo build --package <chapter> ...` over every chapter, the chapters'
/// binaries and nothing else (not the test binaries and their dev-dependencies), so a fresh
/// machine's tour starts sooner and a `cargo lab run 06` after it compiles nothing. `Suite` is
/// `cargo test --workspace --no-run`, what `cargo lab test` builds. The two unify features
/// differently, so each has its own artifacts of the shared crates: once both exist, switching
/// between them compiles nothing and only points `target/debug/<chapter>` at the other
/// artifact, which the guest reads afresh (the agent drops its page cache before a run whose
/// files changed since the last drop;
/// `harness/tests/live_lab.rs` checks both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Build {
    Suite,
    Chapters,
}

pub(super) fn build_args(how: Build, pkgs: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = match how {
        Build::Suite => ["test", "--workspace", "--no-run"]
            .map(String::from)
            .to_vec(),
        Build::Chapters => {
            let mut a = vec!["build".to_string()];
            for p in pkgs {
                a.push("--package".into());
                a.push(p.to_string());
            }
            a
        }
    };
    a.push("--message-format=json-render-diagnostics".into());
    a
}

/// Builds with [`build_args`]; cargo's progress is shown. Returns package -> executable for
/// every chapter binary, from cargo's report of the artifacts it just built or found fresh:
/// what runs in the lab is exactly that file, whichever artifact `target/debug/<chapter>` was
/// before.
pub(super) fn build(how: Build, pkgs: &[&str]) -> Result<Vec<(String, String)>> {
    let root = root()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let args = build_args(how, pkgs);
    let shown = args[..args.len() - 1].join(" ");
    eprintln!("building (cargo {shown}) ...");
    // cargo's progress and errors go to our stderr; its JSON messages are read here.
    let out = duct::cmd(cargo, &args)
        .dir(&root)
        .stdin_null()
        .stdout_capture()
        .unchecked()
        .run()
        .with_context(|| format!("running cargo {shown}"))?;
    if !out.status.success() {
        bail!(
            "`cargo {shown}` failed (see the errors above); if rdma-sys failed to build, `cargo \
             lab doctor` checks libibverbs-dev, pkg-config and libclang (LIBCLANG_PATH)"
        );
    }
    let exes = chapter_executables(&String::from_utf8_lossy(&out.stdout));
    for p in pkgs {
        if !exes.iter().any(|(n, _)| n == p) {
            bail!("`cargo {shown}` reported no binary named {p}");
        }
    }
    Ok(exes)
}

/// From cargo's JSON messages: (target name, executable) of every `bin` target built as a
/// program (not as a unit-test harness, whose profile has `"test":true`).
pub(super) fn chapter_executables(json_lines: &str) -> Vec<(String, String)> {
    let re = regex::Regex::new(r#""executable":"([^"]+)""#).unwrap();
    let name_re =
        regex::Regex::new(r#""target":\{[^}]*"kind":\["bin"\][^}]*"name":"([^"]+)""#).unwrap();
    let profile_re = regex::Regex::new(r#""profile":\{[^}]*"test":false"#).unwrap();
    let mut exes = vec![];
    for line in json_lines.lines() {
        if !line.contains("\"reason\":\"compiler-artifact\"") || !profile_re.is_match(line) {
            continue;
        }
        if let (Some(e), Some(n)) = (re.captures(line), name_re.captures(line)) {
            exes.push((n[1].to_string(), e[1].to_string()));
        }
    }
    exes
}

/// Runs a built chapter in a lab; prints its transcript.
pub(super) fn run_built(
    lab: &Testbed,
    ch: &Chapter,
    exe: &str,
    extra: &[&str],
) -> Result<Transcript> {
    let roles = testing::chapter_roles(lab, &ch.package, exe, extra)?;
    let _g = testing::lock(lab);
    let t = testing::run_roles_in(lab, &roles, testing::run_timeout())?;
    print!("{}", t.text());
    Ok(t)
}

pub(super) fn get_lab(t: Topology) -> Result<Testbed> {
    let root = root()?;
    let t0 = Instant::now();
    // A restore takes about a second, a cold boot under TCG ten or more: say what is under
    // way first (a spinner with the time so far on a terminal, one plain line otherwise).
    let what = format!("lab: getting the {} lab", t.name());
    let spinner = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let s = indicatif::ProgressBar::new_spinner().with_message(what.clone());
        s.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        s.enable_steady_tick(Duration::from_millis(200));
        s
    });
    if spinner.is_none() {
        eprintln!("{what} ...");
    }
    let lab = Testbed::acquire(t, Some(&root));
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    let lab =
        lab.with_context(|| format!("getting a {} lab; next: `cargo lab doctor`", t.name()))?;
    eprintln!("lab: {} [{:.1} s]", lab.origin, t0.elapsed().as_secs_f64());
    Ok(lab)
}

pub(super) fn run(key: &str, extra: &[String], trace: Option<&Path>) -> Result<i32> {
    let (course, root) = Course::load()?;
    let ch = course.find(key).with_context(|| {
        format!("no chapter {key:?} in chapters/course.toml; `cargo lab list` shows them")
    })?;
    if let Some(m) = missing_chapter(ch, &root) {
        bail!("{m}");
    }
    prepare("run")?;
    let exes = build(Build::Chapters, &present_packages(&course, &root))?;
    let exe = &exes.iter().find(|(n, _)| *n == ch.package).unwrap().1;
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    if let Some(file) = trace {
        // The wire exists only on the pair: a loopback chapter runs there, its server on node a
        // and its client on node b, exactly as its roles say.
        let lab = get_lab(Topology::Pair)?;
        println!("── {} {} (traced on the pair)", ch.number, ch.title);
        let roles = ch.roles(exe, &extra, lab.server_addr());
        let _g = testing::lock(&lab);
        let cap = start_trace(&lab, file)?;
        let t = testing::run_roles_in(&lab, &roles, testing::run_timeout());
        let ladder = finish_trace(cap)?;
        let t = t?;
        print!("{}{ladder}", t.text());
        return Ok(if t.success() { 0 } else { 1 });
    }
    let lab = get_lab(ch.topology)?;
    println!("── {} {} ({})", ch.number, ch.title, ch.topology);
    let t = run_built(&lab, ch, exe, &extra)?;
    Ok(if t.success() { 0 } else { 1 })
}

pub(super) fn build_cmd() -> Result<i32> {
    let (course, root) = Course::load()?;
    prepare("build")?;
    let exes = build(Build::Chapters, &present_packages(&course, &root))?;
    for ch in &course.chapters {
        if let Some((_, exe)) = exes.iter().find(|(n, _)| *n == ch.package) {
            let shown = Path::new(exe).strip_prefix(&root).unwrap_or(Path::new(exe));
            println!("{:<3} {}", ch.number, shown.display());
        }
    }
    Ok(0)
}

/// The packages of the chapters that exist: what `run`, `build` and `tour` build, all of them
/// every time, so that the three share one set of artifacts.
fn present_packages<'c>(course: &'c Course, root: &Path) -> Vec<&'c str> {
    course
        .chapters
        .iter()
        .filter(|c| missing_chapter(c, root).is_none())
        .map(|c| c.package.as_str())
        .collect()
}

pub(super) fn tour() -> Result<i32> {
    let (course, root) = Course::load()?;
    let pkgs = present_packages(&course, &root);
    let installing = prepare_overlapped("tour")?;
    let exes = if pkgs.is_empty() {
        vec![]
    } else {
        build(Build::Chapters, &pkgs)?
    };
    if let Some(setup) = installing {
        setup.finish()?;
    }
    let mut labs: Vec<(Topology, Testbed)> = vec![];
    let mut rows = vec![];
    for ch in &course.chapters {
        println!(
            "\n── {} {} ({})\n   {}",
            ch.number, ch.title, ch.topology, ch.summary
        );
        if let Some(m) = missing_chapter(ch, &root) {
            println!("   MISSING: {m}");
            rows.push((ch, "missing".to_string(), Duration::ZERO));
            continue;
        }
        let t = ch.topology;
        if !labs.iter().any(|(lt, _)| *lt == t) {
            labs.push((t, get_lab(t)?));
        }
        let lab = &labs.iter().find(|(lt, _)| *lt == t).unwrap().1;
        let exe = &exes.iter().find(|(n, _)| *n == ch.package).unwrap().1;
        let t0 = Instant::now();
        let args: Vec<&str> = ch.tour_args().iter().map(String::as_str).collect();
        let verdict = match run_built(lab, ch, exe, &args) {
            Ok(tr) if tr.success() => "ok".to_string(),
            Ok(tr) => format!(
                "FAILED ({})",
                tr.sections
                    .iter()
                    .map(|s| format!("{} exit {}", s.name, s.exit_code))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => {
                println!("{e:#}");
                "FAILED (harness error)".to_string()
            }
        };
        rows.push((ch, verdict, t0.elapsed()));
        if let Some(note) = ch.tour_note() {
            println!("   {note}");
        }
    }
    println!(
        "\n{:<3} {:<24} {:<9} {:>7}  result",
        "#", "package", "topology", "time"
    );
    let mut bad = 0;
    for (ch, v, d) in &rows {
        if v != "ok" {
            bad += 1;
        }
        println!(
            "{:<3} {:<24} {:<9} {:>6.1}s  {}",
            ch.number,
            ch.package,
            ch.topology.name(),
            d.as_secs_f64(),
            v
        );
    }
    println!("\n{} of {} chapters ok", rows.len() - bad, rows.len());
    Ok(if bad == 0 { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::{Build, build_args};

    #[test]
    fn run_build_and_tour_build_the_chapters_alone_and_test_the_suite() {
        assert_eq!(
            build_args(Build::Suite, &["ch06-pingpong"]),
            [
                "test",
                "--workspace",
                "--no-run",
                "--message-format=json-render-diagnostics"
            ]
        );
        assert_eq!(
            build_args(Build::Chapters, &["ch01-devices", "ch06-pingpong"]),
            [
                "build",
                "--package",
                "ch01-devices",
                "--package",
                "ch06-pingpong",
                "--message-format=json-render-diagnostics"
            ]
        );
    }
}
