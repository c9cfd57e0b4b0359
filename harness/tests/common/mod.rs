//! Helpers shared by the install, action-steps, runner-hook and userspace tests: a command with
//! a deadline, and a copy of the fixture crate.

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a command did: its exit code (`None`: killed, or it overran its deadline) and its
/// stdout and stderr, interleaved in no particular order (stdout first).
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl Ran {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
    pub fn text(&self) -> String {
        format!(
            "exit {:?}{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code,
            if self.timed_out {
                " (deadline passed: killed)"
            } else {
                ""
            },
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `cmd` (stdin from /dev/null) in its own process group; past `limit` the whole group is
/// killed. Never panics: a command that cannot start is reported as exit `None` with the error.
pub fn run_with_deadline(mut cmd: Command, limit: Duration) -> Ran {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ran {
                code: None,
                stdout: String::new(),
                stderr: format!("cannot start {cmd:?}: {e}"),
                timed_out: false,
            };
        }
    };
    let pump = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut b = vec![];
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut b);
            }
            String::from_utf8_lossy(&b).into_owned()
        })
    };
    let out = pump(child.stdout.take().map(|s| Box::new(s) as _));
    let err = pump(child.stderr.take().map(|s| Box::new(s) as _));
    let deadline = Instant::now() + limit;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                // The whole group (the child is not reaped yet, so its id is still its group's).
                let _ = Command::new("kill")
                    .args(["-s", "KILL", "--"])
                    .arg(format!("-{}", child.id()))
                    .stderr(Stdio::null())
                    .status();
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(_) => break None,
        }
    };
    Ran {
        code: if timed_out {
            None
        } else {
            status.and_then(|s| s.code())
        },
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        timed_out,
    }
}

/// A copy of the fixture crate `tests/fixtures/rdma-probe` (a project outside this workspace,
/// with one device test) in a fresh temp dir; its target dir lands there too.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn rdma_probe_fixture() -> tempfile::TempDir {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rdma-probe");
    let dir = tempfile::Builder::new()
        .prefix("rdma-probe.")
        .tempdir()
        .unwrap();
    for rel in ["Cargo.toml", "src/lib.rs", "tests/device.rs"] {
        let to = dir.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src.join(rel), &to).unwrap();
    }
    dir
}
