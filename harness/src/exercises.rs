//! `chapters/exercises.toml`: the exercises, and what their checks share.
//!
//! An exercise lives next to its chapter (docs/exercises.md has the whole protocol):
//!
//! ```text
//! chapters/NN-slug/exercises/<name>.rs            the learner's starter (todo!("step N: ..."))
//! chapters/NN-slug/exercises/solutions/<name>.rs  the reference solution
//! chapters/NN-slug/tests/exercises.rs             the checks, one #[test] each
//! ```
//!
//! Both files are compiled into the chapter's `exercises` test binary (as `#[path]` modules);
//! [`Impl::from_env`] (`LAB_EXERCISE_IMPL=starter|solution`) says which one the checks call,
//! so grading either needs one build; unset (the test suite), a check runs its dev check. A failing check panics through
//! [`fail`]: a first line naming what is missing or wrong, then the expected and the actual.

use crate::Node;
use crate::course::workspace_root;
use crate::testing::{Role, Transcript};
use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The variable that selects the implementation the checks call.
pub const IMPL_VAR: &str = "LAB_EXERCISE_IMPL";

/// Which implementation of an exercise a check calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    /// `exercises/<name>.rs`: what the learner edits.
    Starter,
    /// `exercises/solutions/<name>.rs`: the reference.
    Solution,
}

impl Impl {
    /// `$LAB_EXERCISE_IMPL`: `starter` or `solution`; `None` when it is unset or empty: then a
    /// check's `#[test]` runs its dev check (every implementation: the starter and planted
    /// mistakes fail with their messages, the solution passes), which is what the test suite
    /// runs. Any other value panics with the accepted ones (a typo must not grade anything).
    pub fn from_env() -> Option<Impl> {
        match std::env::var(IMPL_VAR).unwrap_or_default().as_str() {
            "" => None,
            "starter" => Some(Impl::Starter),
            "solution" => Some(Impl::Solution),
            v => panic!(
                "{IMPL_VAR}={v:?}: expected \"starter\" or \"solution\" (or unset: the dev check)"
            ),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Impl::Starter => "starter",
            Impl::Solution => "solution",
        }
    }
}

/// Fails a check: panics with `what` (one line: what is missing or wrong) as the first line,
/// then `expected:` and `actual:` (each may span lines: a status, a packet ladder).
#[track_caller]
pub fn fail(what: &str, expected: &str, actual: &str) -> ! {
    panic!("{}", failure_text(what, expected, actual))
}

/// The text [`fail`] panics with.
pub fn failure_text(what: &str, expected: &str, actual: &str) -> String {
    let block = |label: &str, s: &str| {
        if s.contains('\n') {
            format!("{label}:\n{}", indent(s.trim_end()))
        } else {
            format!("{label}: {s}")
        }
    };
    format!(
        "{what}\n{}\n{}",
        block("expected", expected),
        block("actual", actual)
    )
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs a step of the learner's code, turning a `todo!("step N: ...")` it still holds into a
/// check failure that names the step ("step 2 is not done yet: ...") instead of a bare panic.
#[track_caller]
pub fn step<T>(what: &str, f: impl FnOnce() -> T) -> T {
    // The learner's `todo!` is reported by the failure below, not by the default hook too
    // (a checker reads the first panic of the output): silence the hook while the step runs.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    match r {
        Ok(v) => v,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            let first = msg.lines().next().unwrap_or("").to_string();
            if let Some(rest) = first.strip_prefix("not yet implemented: ") {
                fail(
                    &format!("{what}: not written yet ({rest})"),
                    "the step filled in",
                    &first,
                )
            }
            std::panic::resume_unwind(p)
        }
    }
}

/// For the dev check (each starter fails, each solution passes): runs a check that must fail
/// and returns the first line of its message; panics if the check passed.
#[track_caller]
pub fn failure_of(check: impl FnOnce()) -> String {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
        Ok(()) => panic!("the check passed; it should have failed"),
        Err(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or("")
            .to_string(),
    }
}

/// For the dev check: panics unless `check` fails with a first line starting with `first`.
#[track_caller]
pub fn assert_fails_with(first: &str, check: impl FnOnce()) {
    let got = failure_of(check);
    assert!(
        got.starts_with(first),
        "the check failed, but its first line is\n    {got}\nexpected it to start with\n    {first}"
    );
}

/// The message of the first panic in a test's output (libtest's `thread '...' panicked at
/// FILE:LINE:COL:` line, then the message up to the `note:` or backtrace that follows), for
/// a check whose code ran in another process (a role on the pair, a test re-run in the lab).
pub fn panic_message(output: &str) -> Option<String> {
    // `thread 'NAME' panicked at` (Rust < 1.89), `thread 'NAME' (TID) panicked at` (later).
    let re =
        regex::Regex::new(r"thread '[^'\n]*'(?: \([0-9]+\))? panicked at [^\n]*\n").expect("regex");
    let body = &output[re.find(output)?.end()..];
    let msg: Vec<&str> = body
        .lines()
        .take_while(|l| {
            !l.starts_with("note: ")
                && !l.starts_with("stack backtrace:")
                && !l.starts_with("thread '")
        })
        .collect();
    Some(msg.join("\n").trim_end().to_string())
}

/// The variable that tells a pair check's re-run which of its two roles it plays.
pub const ROLE_VAR: &str = "LAB_EXERCISE_ROLE";

/// The variable that gives the client role the server's address.
pub const SERVER_VAR: &str = "LAB_EXERCISE_SERVER";

/// What this process is, for a check that runs on the pair: the check itself, on the host,
/// or one of the two roles it re-runs its own test binary as ([`pair_roles`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// The check (`LAB_EXERCISE_ROLE` unset): it runs the roles and judges them.
    Check,
    /// `server`, on node a.
    Server,
    /// `client:<arg>`, on node b; the argument is what the check passed (an implementation's
    /// name, or the values the learner chose).
    Client(String),
}

impl Part {
    /// `$LAB_EXERCISE_ROLE`; any value other than `server` and `client:<arg>` panics with the
    /// accepted forms (a typo must not run the check itself in a role's place).
    pub fn from_env() -> Part {
        match std::env::var(ROLE_VAR) {
            Err(_) => Part::Check,
            Ok(v) if v == "server" => Part::Server,
            Ok(v) => match v.strip_prefix("client:") {
                Some(arg) => Part::Client(arg.to_string()),
                None => panic!("{ROLE_VAR}={v:?}: expected \"server\" or \"client:<arg>\""),
            },
        }
    }
}

/// The two roles of a check on the pair, both this test binary again running only `test`:
/// `server` on node a (the next role starts once it prints `ready`), then `client:<client>`
/// on node b, told the server's address (`server_addr`) in `LAB_EXERCISE_SERVER`.
pub fn pair_roles(test: &str, ready: &str, client: &str, server_addr: &str) -> Vec<Role> {
    let exe = std::env::current_exe().expect("current_exe");
    let exe = exe.to_string_lossy().into_owned();
    let argv = [
        exe.as_str(),
        test,
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ];
    vec![
        Role::new("server", argv)
            .env(ROLE_VAR, "server")
            .ready(ready),
        Role::new("client", argv)
            .on(Node::B)
            .env(ROLE_VAR, &format!("client:{client}"))
            .env(SERVER_VAR, server_addr),
    ]
}

/// In the client role: the server's address, from `LAB_EXERCISE_SERVER`.
pub fn server_addr() -> String {
    std::env::var(SERVER_VAR).unwrap_or_else(|_| panic!("{SERVER_VAR} is not set"))
}

/// Fails the check if a role exited non-zero, with that role's panic message (the whole
/// transcript when it has none). The last role is looked at first: the client, where the
/// learner's code runs; a server that stopped with it stopped because of it.
#[track_caller]
pub fn fail_on_role_exit(t: &Transcript) {
    if let Some(s) = t.sections.iter().rev().find(|s| s.exit_code != 0) {
        match panic_message(&format!("{}{}", s.stdout, s.stderr)) {
            Some(m) => panic!("{m}"),
            None => panic!("the {} role exited {}\n{t}", s.name, s.exit_code),
        }
    }
}

/// The registry: `chapters/exercises.toml`.
#[derive(Debug, Clone, Deserialize)]
pub struct Registry {
    #[serde(rename = "exercise")]
    pub exercises: Vec<Exercise>,
}

/// One exercise (fields documented in chapters/exercises.toml).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exercise {
    pub id: String,
    pub chapter: String,
    pub name: String,
    pub title: String,
    /// The checks: test names in the chapter's `tests/exercises.rs`, run with `--exact`.
    pub checks: Vec<String>,
    pub hint: String,
    /// The chapter README section it comes from: `README.md#anchor`.
    pub section: String,
}

impl Registry {
    pub fn parse(text: &str) -> Result<Registry> {
        let r: Registry = toml::from_str(text).context("parsing chapters/exercises.toml")?;
        let mut seen = std::collections::BTreeSet::new();
        for e in &r.exercises {
            let ok_id = e.id.len() > 3
                && e.id.starts_with(&format!("{}-", e.chapter))
                && e.id[3..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !ok_id {
                bail!(
                    "chapters/exercises.toml: id {:?}: expected the chapter number, a dash and a \
                     lowercase slug (e.g. \"{}-remote-write\")",
                    e.id,
                    e.chapter
                );
            }
            if !seen.insert(e.id.clone()) {
                bail!("chapters/exercises.toml: id {:?} appears twice", e.id);
            }
            if e.checks.is_empty() {
                bail!("chapters/exercises.toml: {}: no checks", e.id);
            }
            if !e.section.starts_with("README.md#") {
                bail!(
                    "chapters/exercises.toml: {}: section {:?} should be README.md#<anchor>",
                    e.id,
                    e.section
                );
            }
        }
        Ok(r)
    }

    /// Reads `<workspace>/chapters/exercises.toml`.
    pub fn load() -> Result<(Registry, PathBuf)> {
        let root = workspace_root().context(
            "cannot find chapters/course.toml (run this from inside the rxe-lab workspace)",
        )?;
        let path = root.join("chapters/exercises.toml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok((Registry::parse(&text)?, root))
    }

    /// An exercise by id (`03-remote-write`), or by chapter number (`03`, `3`) when that
    /// chapter has exactly one. The error lists the ids.
    pub fn find(&self, key: &str) -> Result<&Exercise> {
        if let Some(e) = self.exercises.iter().find(|e| e.id == key) {
            return Ok(e);
        }
        let num = key.trim_start_matches('0');
        let by_chapter: Vec<&Exercise> = self
            .exercises
            .iter()
            .filter(|e| !num.is_empty() && e.chapter.trim_start_matches('0') == num)
            .collect();
        match by_chapter.as_slice() {
            [one] => Ok(one),
            _ => {
                let ids: Vec<&str> = self.exercises.iter().map(|e| e.id.as_str()).collect();
                bail!(
                    "no exercise {key:?}{}; the exercises: {} (`cargo lab exercise list`)",
                    if by_chapter.len() > 1 {
                        " (that chapter has several: give the id)"
                    } else {
                        ""
                    },
                    ids.join(", ")
                )
            }
        }
    }
}

impl Exercise {
    /// The starter, relative to the workspace root.
    pub fn starter(&self, chapter_dir: &Path) -> PathBuf {
        chapter_dir
            .join("exercises")
            .join(format!("{}.rs", self.name))
    }

    /// The reference solution.
    pub fn solution(&self, chapter_dir: &Path) -> PathBuf {
        chapter_dir
            .join("exercises/solutions")
            .join(format!("{}.rs", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::course::Course;

    const TOML: &str = r#"
[[exercise]]
id = "03-remote-write"
chapter = "03"
name = "remote_write"
title = "t"
checks = ["remote_write"]
hint = "h"
section = "README.md#the-verbs"

[[exercise]]
id = "05-min-mask"
chapter = "05"
name = "min_mask"
title = "t"
checks = ["a", "b"]
hint = "h"
section = "README.md#x"

[[exercise]]
id = "05-other"
chapter = "05"
name = "other"
title = "t"
checks = ["c"]
hint = "h"
section = "README.md#x"
"#;

    #[test]
    fn finds_by_id_or_a_chapter_with_one_exercise() {
        let r = Registry::parse(TOML).unwrap();
        assert_eq!(r.find("03-remote-write").unwrap().name, "remote_write");
        assert_eq!(r.find("3").unwrap().id, "03-remote-write");
        assert_eq!(r.find("05-other").unwrap().checks, ["c"]);
        let e = format!("{:#}", r.find("05").unwrap_err());
        assert!(e.contains("several"), "{e}");
        let e = format!("{:#}", r.find("99").unwrap_err());
        assert!(e.contains("no exercise \"99\""), "{e}");
        assert!(e.contains("03-remote-write, 05-min-mask"), "{e}");
    }

    #[test]
    fn rejects_bad_entries() {
        for (from, to, says) in [
            (
                "id = \"03-remote-write\"",
                "id = \"3-x\"",
                "expected the chapter",
            ),
            ("id = \"05-other\"", "id = \"05-min-mask\"", "twice"),
            ("checks = [\"c\"]", "checks = []", "no checks"),
            ("README.md#the-verbs", "the-verbs", "README.md#<anchor>"),
            (
                "hint = \"h\"\nsection",
                "hints = \"h\"\nsection",
                "unknown field",
            ),
        ] {
            let e = format!(
                "{:#}",
                Registry::parse(&TOML.replacen(from, to, 1)).unwrap_err()
            );
            assert!(e.contains(says), "{from} -> {to}: {e}");
        }
    }

    #[test]
    fn the_real_registry_names_real_files_chapters_and_sections() {
        let (r, root) = Registry::load().unwrap();
        let (course, _) = Course::load().unwrap();
        assert!(!r.exercises.is_empty());
        for e in &r.exercises {
            let ch = course
                .find(&e.chapter)
                .unwrap_or_else(|| panic!("{}", e.id));
            let dir = ch.dir(&root);
            for f in [
                e.starter(&dir),
                e.solution(&dir),
                dir.join("tests/exercises.rs"),
            ] {
                assert!(f.is_file(), "{}: {} is missing", e.id, f.display());
            }
            let tests = std::fs::read_to_string(dir.join("tests/exercises.rs")).unwrap();
            for c in &e.checks {
                assert!(
                    tests.contains(&format!("fn {c}()")),
                    "{}: no check {c}",
                    e.id
                );
            }
            let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
            assert!(
                readme.contains(&format!("`{}`", e.id)),
                "{}: the chapter README's Exercises section does not list it",
                e.id
            );
        }
    }

    #[test]
    fn panic_message_is_the_first_panic_up_to_its_note() {
        let out = "running 1 test\nthread 'x' (12) panicked at a.rs:1:2:\nthe MR lacks X\nexpected: a\n\
                   note: run with `RUST_BACKTRACE=1`\nthread 'x' panicked at b.rs:3:4:\nlater\n";
        assert_eq!(
            panic_message(out).as_deref(),
            Some("the MR lacks X\nexpected: a")
        );
        assert_eq!(panic_message("test result: ok"), None);
    }

    #[test]
    fn failure_text_has_what_then_expected_and_actual() {
        assert_eq!(
            failure_text("the MR lacks X", "a", "b"),
            "the MR lacks X\nexpected: a\nactual: b"
        );
        assert_eq!(
            failure_text("w", "x\ny\n", "z"),
            "w\nexpected:\n    x\n    y\nactual: z"
        );
        let p = std::panic::catch_unwind(|| step("step 1", || -> u32 { todo!("step 1: open") }));
        let m = *p.unwrap_err().downcast::<String>().unwrap();
        assert!(
            m.starts_with("step 1: not written yet (step 1: open)"),
            "{m}"
        );
    }
}
