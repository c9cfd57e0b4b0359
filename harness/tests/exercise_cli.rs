//! `cargo lab exercise <command>`: `list`, `reset`, `solution` and bad ids on a copy of the
//! repository's registry (no device), `check` on the lab's real rxe device, and `watch` in a
//! terminal (a PTY through util-linux's `script`): saving a fixed starter turns the verdict
//! green.

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn lab_in(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("cargo-lab").unwrap();
    // The workspace is found from CARGO_MANIFEST_DIR first: point it at `dir`.
    c.current_dir(dir).env("CARGO_MANIFEST_DIR", dir);
    c
}

/// The two tests that build and run chapter 03's checks (one edits its starter) take turns.
static CH03: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A git repository holding the registry, the course and every exercise's files.
fn copy_of_the_registry() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = root();
    let mut files = vec![
        "chapters/course.toml".to_string(),
        "chapters/exercises.toml".into(),
    ];
    for e in std::fs::read_dir(r.join("chapters")).unwrap() {
        let dir = e.unwrap().path();
        for sub in ["exercises", "exercises/solutions"] {
            if let Ok(d) = std::fs::read_dir(dir.join(sub)) {
                for f in d {
                    let f = f.unwrap().path();
                    if f.is_file() {
                        files.push(f.strip_prefix(&r).unwrap().display().to_string());
                    }
                }
            }
        }
    }
    for f in &files {
        let to = t.path().join(f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(r.join(f), to).unwrap();
    }
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .current_dir(t.path())
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(ok.status.success(), "git {args:?}: {}", text(&ok.stderr));
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "x"]);
    t
}

#[test]
fn list_shows_each_exercise_with_its_chapter_and_state() {
    let t = copy_of_the_registry();
    let out = lab_in(t.path())
        .args(["exercise", "list"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = text(&out);
    for (id, ch) in [
        ("03-remote-write", "03"),
        ("05-bring-up", "05"),
        ("07-write-4k", "07"),
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} not listed:\n{out}"));
        assert!(line.contains(&format!(" {ch} ")), "{line}");
        assert!(line.contains("not started"), "{line}");
    }
    // The state file (target/rxe-lab/exercises.json, untracked) is what list reads.
    let state = t.path().join("target/rxe-lab");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("exercises.json"),
        "{\n  \"03-remote-write\": \"done\",\n  \"05-bring-up\": \"failing\"\n}\n",
    )
    .unwrap();
    let out = text(
        &lab_in(t.path())
            .args(["exercise", "list"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    let state_of = |id: &str| out.lines().find(|l| l.starts_with(id)).unwrap().to_string();
    assert!(state_of("03-remote-write").contains(" done "), "{out}");
    assert!(state_of("05-bring-up").contains(" failing "), "{out}");
}

#[test]
fn a_bad_id_is_refused_with_the_ids() {
    let t = copy_of_the_registry();
    for args in [
        &["exercise", "check", "99"][..],
        &["exercise", "reset", "nope"],
        &["exercise", "solution", "42", "--yes"],
    ] {
        let out = lab_in(t.path())
            .args(args)
            .assert()
            .failure()
            .get_output()
            .clone();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("no exercise"), "{args:?}: {err}");
        // Every id of the registry, in its order.
        let registry = std::fs::read_to_string(t.path().join("chapters/exercises.toml")).unwrap();
        let ids: Vec<&str> = registry
            .lines()
            .filter_map(|l| l.strip_prefix("id = \"")?.strip_suffix('"'))
            .collect();
        assert!(ids.len() >= 12, "{ids:?}");
        assert!(err.contains(&ids.join(", ")), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn reset_restores_the_starter_from_git() {
    let t = copy_of_the_registry();
    let f = t
        .path()
        .join("chapters/05-qp-state-machine/exercises/bring_up.rs");
    let original = std::fs::read_to_string(&f).unwrap();
    std::fs::write(&f, "// my attempt\n").unwrap();
    let out = lab_in(t.path())
        .args(["exercise", "reset", "05-bring-up"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(text(&out).contains("restored from git"), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), original);
}

#[test]
fn solution_asks_first_and_refuses_without_a_terminal() {
    let t = copy_of_the_registry();
    let out = lab_in(t.path())
        .args(["exercise", "solution", "03-remote-write"])
        .write_stdin("y\n")
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = text(&out.stderr);
    assert!(err.contains("stdin is not a terminal; add --yes"), "{err}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let out = lab_in(t.path())
        .args(["exercise", "solution", "03-remote-write", "--yes"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let sol = std::fs::read_to_string(
        root().join("chapters/03-memory-regions/exercises/solutions/remote_write.rs"),
    )
    .unwrap();
    assert!(text(&out).contains(&sol), "{}", text(&out));
}

/// `check` on the lab: the starter fails naming its first step, with the hint and the
/// section; the solution passes; the results file is exercism's v3.
#[test]
fn check_grades_the_starter_and_the_solution_on_the_lab() {
    let _turn = CH03.lock().unwrap_or_else(|p| p.into_inner());
    let r = root();
    let results = tempfile::tempdir().unwrap();
    let json = results.path().join("results.json");
    let t0 = Instant::now();
    let out = lab_in(&r)
        .env("LAB_EXERCISE_STATE_DIR", results.path())
        .args(["exercise", "check", "03-remote-write", "--results"])
        .arg(&json)
        .timeout(Duration::from_secs(900))
        .assert()
        .code(1)
        .get_output()
        .clone();
    let starter_secs = t0.elapsed().as_secs_f64();
    let out = text(&out.stdout);
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("FAIL 03-remote-write (check `remote_write`)"))
        .unwrap_or_else(|| panic!("no FAIL line:\n{out}"));
    assert!(
        lines[at + 1].starts_with("  register_target: not written yet (step 1:"),
        "{out}"
    );
    assert!(
        out.contains("\nhint: A peer's WRITE needs IBV_ACCESS_REMOTE_WRITE"),
        "{out}"
    );
    assert!(
        out.contains("read: chapters/03-memory-regions/README.md#the-verbs"),
        "{out}"
    );
    let j = std::fs::read_to_string(&json).unwrap();
    assert!(j.contains("\"version\": 3,\n  \"status\": \"fail\""), "{j}");
    assert!(
        j.contains("\"name\": \"remote_write\", \"status\": \"fail\""),
        "{j}"
    );
    let t0 = Instant::now();
    let state = std::fs::read_to_string(results.path().join("exercises.json")).unwrap();
    assert!(
        state.contains("\"03-remote-write\": \"failing\""),
        "{state}"
    );
    let out = lab_in(&r)
        .env("LAB_EXERCISE_STATE_DIR", results.path())
        .args(["exercise", "check", "03-remote-write", "--solution"])
        .timeout(Duration::from_secs(900))
        .assert()
        .success()
        .get_output()
        .clone();
    let out = text(&out.stdout);
    assert!(out.contains("PASS 03-remote-write"), "{out}");
    eprintln!(
        "check: starter {starter_secs:.1} s, solution {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Puts a file's text back when dropped (the watch test edits a starter of the workspace),
/// then rebuilds the suite's binaries, so that the build is left as the suite made it: the
/// chapter's `exercises` binary holds the starter again, and the next `cargo` command (the
/// suite's own, `live_lab`'s check that switching commands compiles nothing) has nothing to
/// compile.
struct Restore(PathBuf, String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, &self.1);
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let rebuilt = std::process::Command::new(cargo)
            .current_dir(root())
            .args(["test", "--workspace", "--no-run", "--quiet"])
            .stdin(std::process::Stdio::null())
            .output();
        match rebuilt {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "rebuilding after restoring {}: {}",
                self.0.display(),
                text(&o.stderr)
            ),
            Err(e) => eprintln!("rebuilding after restoring {}: {e}", self.0.display()),
        }
    }
}

/// Waits until `file` holds `what` after byte `from`; returns where it ends. Panics at the
/// deadline with the file's text, or at once if `writer` (the process writing the file) has
/// exited, with its status and its stderr (`errors`).
fn wait_for(
    file: &Path,
    what: &str,
    from: usize,
    limit: Duration,
    writer: &mut std::process::Child,
    errors: &Path,
) -> usize {
    let end = Instant::now() + limit;
    loop {
        let t = std::fs::read(file).map(|b| text(&b)).unwrap_or_default();
        if let Some(i) = t.get(from..).and_then(|s| s.find(what)) {
            return from + i + what.len();
        }
        if let Ok(Some(st)) = writer.try_wait() {
            let err = std::fs::read(errors).map(|b| text(&b)).unwrap_or_default();
            panic!(
                "no {what:?}: the terminal's process ended ({st}) first; its stderr:\n{err}\n\
                 (`script` needs a PTY: on a chroot, mount /dev/pts); the terminal showed:\n{t}"
            );
        }
        assert!(
            Instant::now() < end,
            "no {what:?} after {} s; the terminal showed:\n{t}",
            limit.as_secs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `watch` in a terminal (a PTY, through `script`): its first verdict on the starter fails;
/// saving the fixed file turns it green (the time it took is printed).
#[test]
fn watch_turns_green_when_the_fixed_starter_is_saved() {
    let _turn = CH03.lock().unwrap_or_else(|p| p.into_inner());
    let r = root();
    let starter = r.join("chapters/03-memory-regions/exercises/remote_write.rs");
    let original = std::fs::read_to_string(&starter).unwrap();
    let _restore = Restore(starter.clone(), original.clone());
    let fixed = std::fs::read_to_string(
        r.join("chapters/03-memory-regions/exercises/solutions/remote_write.rs"),
    )
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let tty = state.path().join("tty.log");
    let errors = state.path().join("script.err");
    let exe = assert_cmd::cargo::cargo_bin("cargo-lab");
    let cmd = format!(
        "{} exercise watch 03-remote-write --timeout 900",
        exe.display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-q", "-f", "-e", "-c", &cmd])
        .arg(&tty)
        .current_dir(&r)
        .env("CARGO_MANIFEST_DIR", &r)
        .env("LAB_EXERCISE_STATE_DIR", state.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&errors).expect("a file for script's stderr"))
        .spawn()
        .expect("util-linux script");
    let c = &mut child;
    let at = wait_for(
        &tty,
        "FAIL 03-remote-write",
        0,
        Duration::from_secs(600),
        c,
        &errors,
    );
    let wait = Duration::from_secs(30);
    wait_for(&tty, "watching the exercise files", at, wait, c, &errors);
    let saved = Instant::now();
    std::fs::write(&starter, &fixed).unwrap();
    let green = wait_for(
        &tty,
        "PASS 03-remote-write",
        at,
        Duration::from_secs(120),
        c,
        &errors,
    );
    let took = saved.elapsed();
    let screen = text(&std::fs::read(&tty).unwrap());
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        screen[at..green].contains("\x1b[2J"),
        "the screen was not cleared"
    );
    // A figure, not an assertion: docs/exercises.md gives the measured save-to-verdict times.
    eprintln!(
        "watch: save to green verdict in {:.1} s",
        took.as_secs_f64()
    );
}
