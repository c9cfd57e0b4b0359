//! Ctrl-C is clean at every stage of `run`, `tour`, `test` and `exec`.
//!
//! Each case starts `cargo-lab` in a process group of its own and, at a chosen stage, sends
//! SIGINT to the whole group, as a terminal does. Then it checks what is left:
//! - no QEMU the command started (a lab booted for it is gone);
//! - no private state dir of the command (`/tmp/rxe-lab.<pid>.*`, `/tmp/rxe-lab-test.<pid>`),
//!   and no kept logs (`/tmp/rxe-lab-logs.<pid>`: those are for failures, not for Ctrl-C);
//! - no lock: the shared lab's `run.lock` can be taken at once;
//! - no chapter (or other) process of the command left in the guest (`ps` in the lab);
//! - the shared lab itself still up (it belongs to whoever ran `cargo lab up`).
//!
//! Stages: boot (a lab booted for a `run`), build (the build step, with a stand-in cargo that
//! takes its time), a chapter running (`run`, and `tour`), a command running (`exec`), and
//! `test` while a chapter's end-to-end test runs and compares its snapshot.

use harness::Topology;
use harness::course::workspace_root;
use harness::runner::signal_group;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LAB: &str = env!("CARGO_BIN_EXE_cargo-lab");

/// QEMU processes, with their command lines.
fn qemus() -> Vec<(u32, String)> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(c) = std::fs::read(e.path().join("cmdline"))
            && let Some(argv0) = c.split(|b| *b == 0).next()
            && String::from_utf8_lossy(argv0).contains("qemu-system")
        {
            out.push((pid, String::from_utf8_lossy(&c).replace('\0', " ")));
        }
    }
    out
}

/// The QEMUs a `cargo-lab` process started: their files live in its private state dirs
/// (`/tmp/rxe-lab.<pid>.*`, or `/tmp/rxe-lab-test.<pid>/` for the labs `test` starts). Other
/// labs on this machine (`cargo lab up`, other suites) are not its.
fn qemus_of(pid: u32) -> Vec<u32> {
    let a = format!("rxe-lab.{pid}.");
    let b = format!("rxe-lab-test.{pid}/");
    qemus()
        .into_iter()
        .filter(|(_, c)| c.contains(&a) || c.contains(&b))
        .map(|(p, _)| p)
        .collect()
}

/// The labs the suite shares (`LAB_STATE_DIR`), or a loopback lab of this test's own.
struct Shared {
    dir: PathBuf,
    own: Option<tempfile::TempDir>,
}

impl Shared {
    fn get() -> Shared {
        if let Some(d) = std::env::var_os("LAB_STATE_DIR") {
            return Shared {
                dir: d.into(),
                own: None,
            };
        }
        let t = tempfile::Builder::new()
            .prefix("rxe-lab-ctrlc.")
            .tempdir()
            .unwrap();
        let st = Command::new(LAB)
            .args(["up", "-t", "all"])
            .env("LAB_STATE_DIR", t.path())
            .status()
            .unwrap();
        assert!(st.success(), "cargo lab up failed");
        Shared {
            dir: t.path().to_path_buf(),
            own: Some(t),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(t) = &self.own {
            let _ = Command::new(LAB)
                .arg("down")
                .env("LAB_STATE_DIR", t.path())
                .output();
        }
    }
}

/// A `cargo-lab` in its own process group; its output lines arrive on `lines`.
struct Started {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: String,
}

fn start(args: &[&str], state: &Path, env: &[(&str, &str)]) -> Started {
    use std::os::unix::process::CommandExt as _;
    let mut c = Command::new(LAB);
    c.args(args)
        .current_dir(workspace_root().unwrap())
        .env("LAB_STATE_DIR", state)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("starting cargo-lab");
    let (tx, lines) = mpsc::channel();
    for r in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(r).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
    }
    Started {
        child,
        lines,
        seen: String::new(),
    }
}

impl Started {
    /// Waits (up to `limit`) for an output line containing `what`.
    fn wait_for(&mut self, what: &str, limit: Duration) {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(l) => {
                    self.seen.push_str(&l);
                    self.seen.push('\n');
                    if l.contains(what) {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let _ = self.child.kill();
        panic!(
            "no line with {what:?} within {limit:?}; output so far:\n{}",
            self.seen
        );
    }

    /// SIGINT to the process group; waits (up to 30 s) for cargo-lab to end.
    fn interrupt(mut self) -> (std::process::ExitStatus, Duration) {
        let pid = self.child.id();
        assert!(signal_group(pid, "INT"), "kill -INT -{pid} failed");
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return (s, t0.elapsed());
            }
            if t0.elapsed() > Duration::from_secs(30) {
                signal_group(pid, "KILL");
                panic!("cargo-lab still running 30 s after SIGINT:\n{}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Nothing of process `pid` is left on the host: its QEMUs, its state dirs.
fn assert_host_clean(pid: u32) {
    let t0 = Instant::now();
    loop {
        let extra = qemus_of(pid);
        let dirs: Vec<String> = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.starts_with(&format!("rxe-lab.{pid}."))
                    || *n == format!("rxe-lab-test.{pid}")
                    || *n == format!("rxe-lab-logs.{pid}")
            })
            .collect();
        if extra.is_empty() && dirs.is_empty() {
            return;
        }
        // The reaper and QEMU's parent-death signal take a moment.
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "left behind by the interrupted cargo-lab (pid {pid}): qemu {extra:?}, dirs {dirs:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The processes in the shared lab's guest whose command line contains `pattern`.
fn in_guest(shared: &Shared, pattern: &str) -> Vec<String> {
    let out = Command::new(LAB)
        .args(["exec", "--", "ps", "-eo", "pid,args"])
        .env("LAB_STATE_DIR", &shared.dir)
        .stdin(Stdio::null())
        .output()
        .expect("cargo-lab exec -- ps");
    assert!(
        out.status.success(),
        "ps in the lab: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(pattern) && !l.contains("ps -eo"))
        .map(String::from)
        .collect()
}

/// Waits (up to `limit`) until a process matching `pattern` runs in the guest.
fn wait_in_guest(shared: &Shared, pattern: &str, limit: Duration, s: &Started) {
    let t0 = Instant::now();
    while in_guest(shared, pattern).is_empty() {
        assert!(
            t0.elapsed() < limit,
            "{pattern:?} never ran in the lab; output so far:\n{}",
            s.seen
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The shared lab's lock is free and nothing matching `pattern` runs in its guest.
fn assert_lab_clean(shared: &Shared, t: Topology, pattern: &str) {
    let lock = harness::StateDir::at(shared.dir.join(t.name())).run_lock();
    if lock.exists() {
        let st = Command::new("flock")
            .args(["-n", lock.to_str().unwrap(), "true"])
            .status()
            .unwrap();
        assert!(st.success(), "{} is still locked", lock.display());
    }
    let t0 = Instant::now();
    loop {
        let left = in_guest(shared, pattern);
        if left.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "still running in the lab after Ctrl-C: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The cases run one at a time (they share the labs and their guests' process lists).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: std::sync::Mutex<()> = std::sync::Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}

fn interrupted(st: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt as _;
    st.code() == Some(130) || st.signal() == Some(2)
}

#[test]
fn ctrl_c_while_a_lab_boots() {
    let _serial = serial();
    // No lab to attach to: `run` boots one for itself, and is interrupted while it boots.
    let empty = tempfile::tempdir().unwrap();
    let mut s = start(&["run", "01"], empty.path(), &[]);
    s.wait_for("building", Duration::from_secs(300));
    let t0 = Instant::now();
    while qemus_of(s.child.id()).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no QEMU started:\n{}",
            s.seen
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = s.child.id();
    let (st, took) = s.interrupt();
    assert!(interrupted(&st), "{st:?}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_host_clean(pid);
}

#[test]
fn ctrl_c_while_building() {
    let _serial = serial();
    // A stand-in for cargo that takes its time (the real one dies of the same SIGINT).
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("cargo");
    // Its sleep carries this test's pid, so the check below sees only this test's processes,
    // never another `sleep 120` of the machine.
    let marker = format!("sleep 120.{}", std::process::id());
    std::fs::write(
        &fake,
        format!("#!/bin/sh\necho '   Compiling stand-in (cargo)' >&2\nexec {marker}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let empty = tempfile::tempdir().unwrap();
    for cmd in [&["run", "06"][..], &["tour"], &["build"]] {
        let mut s = start(cmd, empty.path(), &[("CARGO", fake.to_str().unwrap())]);
        s.wait_for("Compiling stand-in", Duration::from_secs(60));
        let pid = s.child.id();
        let (st, took) = s.interrupt();
        assert!(!st.success(), "{cmd:?}: {st:?}");
        assert!(took < Duration::from_secs(10), "{cmd:?} took {took:?}");
        assert_host_clean(pid);
    }
    // No stand-in left either.
    let out = Command::new("pgrep")
        .args(["-f", &format!("^{marker}$")])
        .output()
        .unwrap();
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn ctrl_c_while_a_chapter_runs() {
    let _serial = serial();
    let shared = Shared::get();
    // `run`: a ping-pong long enough to be interrupted in the middle.
    let mut s = start(&["run", "06", "--", "-n", "10000000"], &shared.dir, &[]);
    s.wait_for("── 06", Duration::from_secs(300));
    wait_in_guest(&shared, "ch06-pingpong", Duration::from_secs(60), &s);
    let pid = s.child.id();
    let (st, _) = s.interrupt();
    assert!(interrupted(&st), "{st:?}");
    assert_host_clean(pid);
    assert_lab_clean(&shared, Topology::Loopback, "ch06-pingpong");
    // `tour`, interrupted in its first chapter.
    let mut s = start(&["tour"], &shared.dir, &[]);
    s.wait_for("── 01", Duration::from_secs(300));
    wait_in_guest(&shared, "target/debug/ch0", Duration::from_secs(60), &s);
    let pid = s.child.id();
    let (st, _) = s.interrupt();
    assert!(interrupted(&st), "{st:?}");
    assert_host_clean(pid);
    assert_lab_clean(&shared, Topology::Loopback, "target/debug/ch0");
}

#[test]
fn ctrl_c_while_exec_runs() {
    let _serial = serial();
    let shared = Shared::get();
    let mut s = start(
        &["exec", "--", "sh", "-c", "echo started; sleep 333"],
        &shared.dir,
        &[],
    );
    s.wait_for("started", Duration::from_secs(120));
    let pid = s.child.id();
    let (st, _) = s.interrupt();
    assert_eq!(st.code(), Some(130), "{st:?}");
    assert_host_clean(pid);
    assert_lab_clean(&shared, Topology::Loopback, "sleep 333");
}

#[test]
fn ctrl_c_while_tests_run() {
    let _serial = serial();
    let shared = Shared::get();
    // `cargo lab test` runs cargo test; interrupted while chapter 06's end-to-end tests run
    // (and compare their snapshots).
    let mut s = start(
        &["test", "--", "-p", "ch06-pingpong", "--test", "e2e"],
        &shared.dir,
        &[],
    );
    s.wait_for("Running tests/e2e.rs", Duration::from_secs(600));
    wait_in_guest(&shared, "ch06-pingpong", Duration::from_secs(120), &s);
    let pid = s.child.id();
    let (st, _) = s.interrupt();
    assert!(interrupted(&st), "{st:?}");
    assert_host_clean(pid);
    assert_lab_clean(&shared, Topology::Loopback, "ch06-pingpong");
    // The shared labs are still up: they are not the interrupted command's.
    assert!(
        in_guest(&shared, "lab-agent").len() == 1,
        "the shared lab went down with the interrupted test"
    );
}
