//! A lab that dies or hangs under a running command ends the run in seconds, with an error that
//! says so, not at `LAB_TIMEOUT_SECS` (the reported hang: a test stuck for 20+ minutes after the
//! shared lab was stopped and restarted under it). Each test uses a private lab.

use harness::conn::Cmd;
use harness::proto::ExitStatus;
use harness::testbed::Testbed;
use harness::testing::{Role, run_roles_in};
use harness::vm_options::VmOptions;
use harness::{Node, Topology};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Long enough that only the lab's death can end the run early.
const LIMIT: Duration = Duration::from_secs(600);

/// The file the sleeper creates in the guest's /run (a tmpfs of that VM) just before it
/// sleeps, named for this test process and the run: only this run's sleeper makes it.
fn mark(run: u32) -> String {
    format!("/run/rxe-lab-dead-lab.{}.{run}", std::process::id())
}

/// The command the lab dies under: its `sleep` is what the test needs (a command that only
/// the lab's death ends), not a wait.
fn sleeper(run: u32) -> Vec<Role> {
    vec![
        Role::new(
            "sleeper",
            [
                "sh",
                "-c",
                &format!("echo started; touch {}; exec sleep 1000", mark(run)),
            ],
        )
        .ready("started"),
    ]
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status();
}

/// Waits until this run's sleeper runs in the lab: its mark is in the guest's /run, as a
/// second command on the same lab sees it. The deadline covers a slow boot under TCG.
fn sleeper_runs(lab: &Testbed, run: u32) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let probe = Cmd::new(["test", "-e", &mark(run)]);
    let mut last = String::new();
    while Instant::now() < deadline {
        match lab.run(Node::A, &probe, Duration::from_secs(20)) {
            Ok(o) if o.status == ExitStatus::Code(0) => return Ok(()),
            Ok(o) => last = format!("test -e: {:?}", o.status),
            Err(e) => last = format!("{e:#}"),
        }
        // The poll interval of this deadline loop (each look is a command in the guest).
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "the sleeper's mark {} did not appear within 120 s ({last})",
        mark(run)
    ))
}

/// Runs the sleeper, sends `act` once it runs, returns the run's error and how long it took
/// from `act` on.
fn run_and_break(lab: &Testbed, act: impl FnOnce() + Send) -> (String, Duration) {
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::thread::scope(|s| {
        let breaker = s.spawn(|| {
            let seen = sleeper_runs(lab, run);
            // Act even if the sleeper was not seen: the run must end, and the test then fails
            // with the reason below, not after LIMIT.
            act();
            (seen, Instant::now())
        });
        let r = run_roles_in(lab, &sleeper(run), LIMIT);
        let ended = Instant::now();
        let (seen, acted) = breaker.join().unwrap();
        if let Err(why) = seen {
            panic!("{why}");
        }
        let err = r.expect_err("the run must fail when the lab dies");
        (format!("{err:#}"), ended.saturating_duration_since(acted))
    })
}

#[test]
fn a_qemu_killed_under_a_run_ends_it_in_seconds() {
    let lab = Testbed::boot(
        Topology::Loopback,
        &VmOptions::from_env().expect("LAB_* settings"),
    )
    .expect("boot");
    let pid = lab.vm_pids()[0];
    let (err, took) = run_and_break(&lab, move || signal(pid, "KILL"));
    assert!(took < Duration::from_secs(5), "took {took:?}: {err}");
    assert!(err.contains("the lab died under the run"), "{err}");
    assert!(err.contains("console"), "the console's tail: {err}");
}

struct Daemon {
    home: PathBuf,
}

impl Daemon {
    fn cli(home: &Path, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_cargo-lab"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("LAB_STATE_DIR", home)
            .env("LAB_PROVIDER", "vm")
            .output()
            .unwrap()
    }
    fn up() -> Daemon {
        let home = std::env::temp_dir().join(format!("rxe-lab-deadtest.{}", std::process::id()));
        let up = Self::cli(&home, &["up"]);
        assert!(
            up.status.success(),
            "{}",
            String::from_utf8_lossy(&up.stderr)
        );
        Daemon { home }
    }
    fn dir(&self) -> PathBuf {
        self.home.join("loopback")
    }
    fn pid(&self) -> u32 {
        std::fs::read_to_string(harness::StateDir::at(self.dir()).daemon_pid())
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(p) = std::fs::read_to_string(harness::StateDir::at(self.dir()).daemon_pid()) {
            signal(p.trim().parse().unwrap_or(0), "CONT");
        }
        let _ = Self::cli(&self.home, &["down"]);
    }
}

#[test]
fn a_stuck_then_a_killed_daemon_ends_an_attached_run_promptly() {
    let d = Daemon::up();
    // Half-dead: the daemon lives and its socket stays open, but nothing answers. Only the
    // heartbeat (30 s without an answer) can tell.
    let lab = Testbed::attach(Topology::Loopback, &d.dir()).expect("attach");
    let pid = d.pid();
    let (err, took) = run_and_break(&lab, move || signal(pid, "STOP"));
    assert!(took < Duration::from_secs(40), "took {took:?}: {err}");
    assert!(err.contains("heartbeat"), "{err}");
    assert!(err.contains("cargo lab down && cargo lab up"), "{err}");
    signal(pid, "CONT");
    drop(lab);

    // Dead: EOF on the relay socket, and the daemon's pid gone.
    let lab = Testbed::attach(Topology::Loopback, &d.dir()).expect("attach again");
    let (err, took) = run_and_break(&lab, move || signal(pid, "KILL"));
    assert!(took < Duration::from_secs(5), "took {took:?}: {err}");
    assert!(err.contains("the lab died under the run"), "{err}");
}
