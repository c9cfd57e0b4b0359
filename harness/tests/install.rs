//! `cargo install` as the README's "Test your own RDMA crate" line does it (`--git` builds the
//! same way): into a temporary root, from a temporary target dir that is deleted afterwards.
//! The installed `cargo-lab` must then boot a lab of its own, from a directory outside any
//! checkout, and run `ibv_devices` in it: nothing it needs may live in the build tree (the guest
//! agent is embedded in the binary). The build is `--debug`, to keep the suite short (a
//! release build took 456 s on a 2-core machine): what the test guards is where the build's
//! files live and that they are gone, which is the same in either profile.

mod common;

use common::run_with_deadline;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository root")
        .to_path_buf()
}

/// Stops the installed binary's lab, whatever the test did.
struct Down {
    bin: PathBuf,
    state: PathBuf,
    cwd: PathBuf,
}

impl Drop for Down {
    fn drop(&mut self) {
        if self.bin.exists() {
            let mut c = Command::new(&self.bin);
            c.arg("down")
                .current_dir(&self.cwd)
                .env("LAB_STATE_DIR", &self.state);
            let r = run_with_deadline(c, Duration::from_secs(120));
            if !r.ok() {
                eprintln!("cargo-lab down after the install test:\n{}", r.text());
            }
        }
    }
}

#[test]
fn an_installed_cargo_lab_boots_a_lab_after_its_target_dir_is_gone() {
    let tmp = tempfile::Builder::new()
        .prefix("rxe-lab-install.")
        .tempdir()
        .expect("temp dir");
    let root = tmp.path().join("root");
    let target = tmp.path().join("target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.args(["install", "--debug", "--locked", "--quiet", "--path"])
        .arg(repo().join("harness"))
        .arg("--root")
        .arg(&root)
        .env("CARGO_TARGET_DIR", &target)
        // Nothing of this suite's build leaks in: the install builds as a user's would.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_INCREMENTAL");
    let r = run_with_deadline(c, Duration::from_secs(1800));
    assert!(r.ok(), "cargo install --path harness:\n{}", r.text());
    let bin = root.join("bin/cargo-lab");
    assert!(bin.is_file(), "no {} after cargo install", bin.display());
    // What `cargo install --git` does when it is done (and `cargo clean` does too).
    std::fs::remove_dir_all(&target).expect("delete the install's target dir");

    // A lab of the installed binary's own (its own state dir), booted from outside the
    // repository: the microVM provider, whatever this suite uses, since only a boot needs the
    // agent.
    let state = tmp.path().join("labs");
    let cwd = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&cwd).expect("a working directory");
    let _down = Down {
        bin: bin.clone(),
        state: state.clone(),
        cwd: cwd.clone(),
    };
    let mut c = Command::new(&bin);
    c.args(["exec", "--", "ibv_devices"])
        .current_dir(&cwd)
        .env("LAB_STATE_DIR", &state)
        .env("LAB_PROVIDER", "vm")
        .env_remove("LAB_DEVICE");
    let r = run_with_deadline(c, Duration::from_secs(600));
    assert!(
        r.ok(),
        "the installed cargo-lab could not boot a lab and run ibv_devices (fix: `cargo lab \
         setup --vm` if QEMU or the kernel is missing):\n{}",
        r.text()
    );
    assert!(
        r.stdout
            .lines()
            .any(|l| l.split_whitespace().next() == Some("rxe0")),
        "ibv_devices in the installed binary's lab lists no rxe0:\n{}",
        r.text()
    );
}
