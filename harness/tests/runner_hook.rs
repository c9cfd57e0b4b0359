//! rxe-lab as the test bed of another RDMA crate: the exec command as a proper runner, and
//! cargo's runner hook.
//!
//! - `exec` keeps the working directory, passes `-e VAR=VALUE` / `-e VAR` and a default set of
//!   variables, forwards a piped stdin, and passes the exit status through (128 + N for a
//!   signal);
//! - `harness/tests/fixtures/rdma-probe`, a crate outside the workspace with its own minimal
//!   libibverbs FFI and a device test, copied to a temp dir (so its target dir is outside the
//!   repository too): its `cargo test` passes through the hook, on the lab's rxe0, both with the
//!   one-line `.cargo/config.toml` the README gives and with `cargo-lab exec --cargo test`; and
//!   without the hook it fails, on this host without a device, with the hint to use rxe-lab.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const LAB: &str = env!("CARGO_BIN_EXE_cargo-lab");

fn lab() -> Command {
    let mut c = Command::new(LAB);
    c.stdin(Stdio::null());
    c
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn exec_passes_environment_with_e_and_by_default() {
    let o = lab()
        .args([
            "exec",
            "-e",
            "FOO=bar baz",
            "-e",
            "FROM_HERE",
            "-e",
            "EMPTY=",
        ])
        .args(["--", "sh", "-c"])
        .arg("echo \"[$FOO] [$FROM_HERE] [${EMPTY-unset}] [$RUST_LOG] [${NOT_PASSED-unset}]\"")
        .env("FROM_HERE", "mine")
        .env("RUST_LOG", "debug")
        .env("NOT_PASSED", "x")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        stdout(&o).trim(),
        "[bar baz] [mine] [] [debug] [unset]",
        "{}",
        text(&o)
    );
    // `-e VAR` for a variable that is not set here is an error, not a silent empty value.
    let o = lab()
        .args(["exec", "-e", "SURELY_NOT_SET_42", "--", "true"])
        .env_remove("SURELY_NOT_SET_42")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("SURELY_NOT_SET_42 is not set here"),
        "{}",
        text(&o)
    );
}

#[test]
fn exec_forwards_stdin_keeps_cwd_and_passes_status_through() {
    // 1 MiB through stdin, counted and summed in the lab.
    let input: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let mut child = lab()
        .args(["exec", "--", "sh", "-c", "wc -c; echo done"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        w.write_all(&input).unwrap();
    });
    let o = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        stdout(&o).split_whitespace().collect::<Vec<_>>(),
        ["1048576", "done"]
    );
    // The working directory is kept (one outside the repository here).
    let dir = tempfile::tempdir().unwrap();
    let o = lab()
        .args(["exec", "--", "pwd"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        stdout(&o).trim(),
        dir.path().to_str().unwrap(),
        "{}",
        text(&o)
    );
    // Exit codes, and signals as a shell reports them.
    for (script, code) in [("exit 7", 7), ("kill -TERM $$", 128 + 15), ("true", 0)] {
        let o = lab()
            .args(["exec", "--", "sh", "-c", script])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{script}: {}", text(&o));
    }
}

#[allow(dead_code)] // the deadline helpers: this test uses only the fixture
mod common;
use common::rdma_probe_fixture as fixture;

fn cargo_in(dir: &Path) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(dir)
        .stdin(Stdio::null())
        // The fixture is its own project: nothing of this suite's cargo environment leaks in.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER")
        .env_remove("RUSTFLAGS");
    c
}

/// PATH with this suite's `cargo-lab` first, as `cargo install` would put it.
fn path_with_cargo_lab() -> String {
    let bin: PathBuf = Path::new(LAB).parent().unwrap().to_path_buf();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn assert_ran_on_rxe(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
    assert!(
        stdout(o).contains("rdma-probe: device rxe0 opened=true"),
        "the device test did not run on the lab's rxe0:\n{}",
        text(o)
    );
}

#[test]
fn the_runner_hook_runs_another_crates_device_test_on_rxe() {
    let dir = fixture();
    // The one line the README gives for another project's .cargo/config.toml.
    std::fs::create_dir(dir.path().join(".cargo")).unwrap();
    std::fs::write(
        dir.path().join(".cargo/config.toml"),
        "target.x86_64-unknown-linux-gnu.runner = \"cargo-lab exec --\"\n",
    )
    .unwrap();
    let o = cargo_in(dir.path())
        .args(["test", "--", "--nocapture"])
        .env("PATH", path_with_cargo_lab())
        .output()
        .unwrap();
    assert_ran_on_rxe(&o);
    std::fs::remove_dir_all(dir.path().join(".cargo")).unwrap();
    // The shorthand: `cargo lab exec --cargo test`.
    let o = cargo_in(dir.path())
        .env("PATH", path_with_cargo_lab())
        .arg("--version")
        .output()
        .unwrap();
    assert!(o.status.success());
    let mut c = lab();
    c.current_dir(dir.path())
        .args(["exec", "--cargo", "test", "--", "--nocapture"])
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS");
    let o = c.output().unwrap();
    assert_ran_on_rxe(&o);
}

#[test]
fn without_the_hook_the_device_test_fails_with_the_hint() {
    let dir = fixture();
    let here_has_a_device = std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if here_has_a_device {
        // A host with its own RDMA device (a runner with rxe loaded): there the crate's test
        // passes without any hook, on that device.
        let o = cargo_in(dir.path())
            .args(["test", "--", "--nocapture"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        assert!(stdout(&o).contains("rdma-probe: device "), "{}", text(&o));
        return;
    }
    let o = cargo_in(dir.path()).arg("test").output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let all = text(&o);
    assert!(all.contains("no RDMA device on this host"), "{all}");
    assert!(all.contains("cargo lab exec --cargo test"), "{all}");
}
