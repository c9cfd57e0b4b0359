//! `--userspace`: the lab's guests run Debian 13's userspace (glibc 2.41, rdma-core 56) under
//! the host's kernel, from one host whose own rdma-core is another (Debian 12's is 44).
//!
//! `cargo lab userspace fetch trixie` builds the root in the lab's cache (a private apt, no
//! root; downloaded once from the archive). A loopback lab of this test's own (its own
//! `LAB_STATE_DIR`) boots with it, and then:
//! - the guest says it is Debian 13, and its libibverbs is rdma-core 56's;
//! - the host-built test binaries of chapters 01 and 04 run against it and match the same
//!   snapshots as on the host's userspace (their e2e tests attach to this lab: its userspace is
//!   the one they ask for);
//! - a command that asks for the host's userspace is refused by that lab, with the fix.
//!
//! The lab is stopped whatever happens.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common;
use common::{Ran, run_with_deadline};

struct Lab {
    state: tempfile::TempDir,
    root: PathBuf,
}

impl Lab {
    /// `cargo-lab ARGS` with this lab's state dir, the VM provider and `userspace` (`None`:
    /// LAB_USERSPACE unset, the host's).
    fn cli(&self, userspace: Option<&Path>, args: &[&str], limit: Duration) -> Ran {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cargo-lab"));
        c.args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("LAB_STATE_DIR", self.state.path())
            .env("LAB_PROVIDER", "vm")
            .env_remove("LAB_USERSPACE");
        if let Some(u) = userspace {
            c.env("LAB_USERSPACE", u);
        }
        run_with_deadline(c, limit)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.cli(None, &["down"], Duration::from_secs(60));
    }
}

fn fetch_trixie() -> PathBuf {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cargo-lab"));
    c.args(["userspace", "fetch", "trixie"]);
    let r = run_with_deadline(c, Duration::from_secs(600));
    assert!(
        r.ok(),
        "`cargo lab userspace fetch trixie` (needs the Debian archive: \
         deb.debian.org or the host's mirror) failed: {}",
        r.text()
    );
    PathBuf::from(r.stdout.trim())
}

#[test]
fn chapters_run_on_debian_13s_userspace_under_the_hosts_kernel() {
    let root = fetch_trixie();
    let lab = Lab {
        state: tempfile::tempdir().unwrap(),
        root,
    };
    let up = lab.cli(Some(&lab.root), &["up"], Duration::from_secs(300));
    assert!(up.ok(), "cargo lab up: {}", up.text());
    assert!(
        up.stderr
            .contains(&format!("userspace {}", lab.root.display())),
        "the lab says which userspace it booted: {}",
        up.text()
    );

    // The guest's own view: Debian 13, rdma-core 56's libibverbs, the rxe device.
    let probe = lab.cli(
        Some(&lab.root),
        &[
            "exec",
            "--",
            "sh",
            "-c",
            ". /etc/os-release; echo codename=$VERSION_CODENAME; \
             readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1; ibv_devices",
        ],
        Duration::from_secs(120),
    );
    assert!(probe.ok(), "{}", probe.text());
    assert!(probe.stdout.contains("codename=trixie"), "{}", probe.text());
    assert!(
        probe.stdout.contains("libibverbs.so.1.14.56"),
        "rdma-core 56's libibverbs: {}",
        probe.text()
    );
    assert!(probe.stdout.contains("rxe0"), "{}", probe.text());

    // The same test binaries, built here against the host's rdma-core, pass on it.
    for (pkg, exe) in harness::testing::e2e_binaries(&["ch01-devices", "ch04-completion-queues"]) {
        let mut c = Command::new(&exe);
        c.args(["--test-threads=1", "--nocapture"])
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .env("LAB_STATE_DIR", lab.state.path())
            .env("LAB_PROVIDER", "vm")
            .env("LAB_USERSPACE", &lab.root)
            .env("INSTA_UPDATE", "no")
            .env("INSTA_FORCE_PASS", "0");
        let r = run_with_deadline(c, Duration::from_secs(600));
        assert!(r.ok(), "{pkg} on Debian 13's userspace: {}", r.text());
        assert!(
            r.stderr.contains("attached to the lab in"),
            "{pkg} ran in this test's lab: {}",
            r.text()
        );
    }

    // Another crate's tests, through cargo's runner hook, as the README shows it.
    let probe_crate = common::rdma_probe_fixture();
    let mut c = Command::new(env!("CARGO_BIN_EXE_cargo-lab"));
    c.arg("exec")
        .arg("--cargo")
        .arg("--userspace")
        .arg(&lab.root)
        .args(["test", "--", "--include-ignored", "--nocapture"])
        .current_dir(probe_crate.path())
        .env("LAB_STATE_DIR", lab.state.path())
        .env("LAB_PROVIDER", "vm")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER")
        .env_remove("RUSTFLAGS");
    let r = run_with_deadline(c, Duration::from_secs(600));
    assert!(
        r.ok() && r.stdout.contains("rdma-probe: device rxe0 opened=true"),
        "the fixture crate's device test on Debian 13's userspace: {}",
        r.text()
    );

    // Asking that lab for the host's userspace is refused, and says what to do.
    let host = lab.cli(None, &["exec", "--", "true"], Duration::from_secs(60));
    assert!(!host.ok(), "{}", host.text());
    assert!(
        host.stderr.contains("this command asks for host")
            && host.stderr.contains("`cargo lab down`"),
        "{}",
        host.text()
    );
}

#[test]
fn a_directory_that_is_not_a_userspace_root_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_cargo-lab"));
    c.args(["exec", "--userspace"])
        .arg(dir.path())
        .args(["--", "true"]);
    let r = run_with_deadline(c, Duration::from_secs(60));
    assert_eq!(r.code, Some(1), "{}", r.text());
    assert!(
        r.stderr.contains("cannot be a lab userspace")
            && r.stderr.contains("cargo lab userspace fetch SUITE"),
        "{}",
        r.text()
    );
}
