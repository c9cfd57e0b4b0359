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

/// The sleeper's `sleep` argument: a number nothing else in the lab sleeps for, so that
/// `pgrep` finds this process and no other.
const NAP: &str = "1000.25";

fn sleeper() -> Vec<Role> {
    vec![
        Role::new(
            "sleeper",
            ["sh", "-c", &format!("echo started; exec sleep {NAP}")],
        )
        .ready("started"),
    ]
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status();
}

/// Waits until the sleeper runs in the lab: its `sleep` is in the guest's process table, as a
/// second command on the same lab sees it. The deadline covers a slow boot under TCG.
fn sleeper_runs(lab: &Testbed) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let probe = Cmd::new(["pgrep", "-f", &format!("^sleep {NAP}$")]);
    let mut last = String::new();
    while Instant::now() < deadline {
        match lab.run(Node::A, &probe, Duration::from_secs(20)) {
            Ok(o) if o.status == ExitStatus::Code(0) => return Ok(()),
            Ok(o) => {
                last = format!(
                    "pgrep: {:?} {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                )
            }
            Err(e) => last = format!("{e:#}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "the sleeper did not show in the lab's process table within 120 s ({last})"
    ))
}

/// Runs the sleeper, sends `act` once it runs, returns the run's error and how long it took
/// from `act` on.
fn run_and_break(lab: &Testbed, act: impl FnOnce() + Send) -> (String, Duration) {
    std::thread::scope(|s| {
        let breaker = s.spawn(|| {
            let seen = sleeper_runs(lab);
            // Act even if the sleeper was not seen: the run must end, and the test then fails
            // with the reason below, not after LIMIT.
            act();
            (seen, Instant::now())
        });
        let r = run_roles_in(lab, &sleeper(), LIMIT);
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
