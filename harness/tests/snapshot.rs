//! The loopback lab restored from its QEMU snapshot (harness/src/snapshot.rs), on this
//! machine's QEMU:
//!
//! - a lab booted after a first one is restored, not booted, and its guest has rxe0 with the
//!   pinned GID and the host's time;
//! - chapters 01 and 06 pass their runs against their snapshot files (ch01's e2e tests whole,
//!   ch06's `chapter` cases) on labs that must come from the snapshot (`LAB_SNAPSHOT=require`: a
//!   cold boot would fail them);
//! - a second pair lab is restored, each node from its own file, with its own rxe0 GID; and
//!   chapter 09 (RDMA between the two nodes, over the cable's relay) passes its
//!   `pool_end_to_end` runs (against its snapshot files) on pairs that must be restored;
//! - a changed initramfs makes a new snapshot (a cold boot that saves one);
//! - a corrupt snapshot (truncated, as a full disk leaves it) costs a cold boot with a warning,
//!   not a hang nor an error, and is replaced.
//!
//! Each test boots VMs: they take one lock so that they run one after the other. The chapters'
//! other tests (bad command lines, interop with the C tools, rdma_cm) run in their own binaries
//! in the same suite; here only the runs a snapshot file checks.

use harness::state_dir::StateDir;
use harness::testbed::Testbed;
use harness::vm::{self, BootPlan};
use harness::vm_options::VmOptions;
use harness::{Topology, snapshot};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn opts() -> VmOptions {
    VmOptions::from_env().expect("the LAB_* options of the environment")
}

/// The snapshot file of `plan`'s loopback VM.
fn file_of(plan: &BootPlan) -> PathBuf {
    let o = opts();
    snapshot::path(
        plan,
        &vm::append_for(plan, None, true),
        o.loopback_smp,
        o.mem_mb,
    )
    .expect("snapshot path")
}

/// Boots the loopback VM of `plan` in a fresh state dir; returns how it came up and the
/// output of `ibv_devices` in it.
fn boot_with(plan: &BootPlan) -> (String, String, Duration) {
    let dir = vm::new_state_dir("snapshot-test").expect("state dir");
    let t0 = Instant::now();
    let (vms, _) = snapshot::boot(Topology::Loopback, &opts(), plan, &dir)
        .unwrap_or_else(|e| panic!("booting the loopback lab: {e:#}"));
    let took = t0.elapsed();
    let how = snapshot::how(&dir);
    let out = vms[0]
        .1
        .run(
            &harness::conn::Cmd::new(["ibv_devices"]),
            Duration::from_secs(60),
        )
        .expect("ibv_devices in the lab");
    drop(vms);
    let _ = std::fs::remove_dir_all(&dir);
    (how, String::from_utf8_lossy(&out.stdout).into_owned(), took)
}

/// A copy of the lab's initramfs in `dir`, so that the test's snapshots have keys of their own.
fn own_initrd(plan: &BootPlan, dir: &Path) -> BootPlan {
    let mut p = plan.clone();
    p.initrd = dir.join("initrd.cpio");
    std::fs::copy(&plan.initrd, &p.initrd).expect("copy the initramfs");
    p
}

#[test]
fn a_second_lab_is_restored_with_rxe0_its_gid_and_the_hosts_time() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    assert_ne!(
        snapshot::mode(),
        snapshot::Mode::Off,
        "this test needs snapshots on (LAB_SNAPSHOT is 0)"
    );
    // The first makes sure there is a snapshot (restored from one, or saving one).
    drop(Testbed::boot(Topology::Loopback, &opts()).expect("first lab"));
    let lab = Testbed::boot(Topology::Loopback, &opts()).expect("second lab");
    assert!(
        lab.origin.starts_with("restored from a snapshot"),
        "the second lab was not restored: {}",
        lab.origin
    );
    let run = |argv: &[&str]| -> String {
        let out = lab
            .conn(harness::Node::A)
            .run(
                &harness::conn::Cmd::new(argv.to_vec()),
                Duration::from_secs(60),
            )
            .expect("a command in the restored lab");
        assert_eq!(out.status.code(), 0, "{argv:?}: {:?}", out.status);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(run(&["ibv_devices"]).contains("rxe0"));
    let gid = run(&["cat", "/sys/class/infiniband/rxe0/ports/1/gids/1"]);
    assert_eq!(gid.trim(), "0000:0000:0000:0000:0000:ffff:0a63:0001");
    assert!(run(&["cat", "/sys/class/infiniband/rxe0/ports/1/state"]).contains("ACTIVE"));
    // The guest's clock was set from the go-ahead (to the second), not left at the save's time.
    let guest: u64 = run(&["date", "+%s"]).trim().parse().expect("date +%s");
    let host = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("time")
        .as_secs();
    assert!(
        guest.abs_diff(host) <= 3,
        "guest clock {guest}, host {host}: not re-synced after the restore"
    );
    println!("restored lab: {}", lab.origin);
}

/// package -> its `e2e` test binary, built for these packages only (`cargo test -p ... --no-run`:
/// nothing else is built; under `cargo lab test` they are built already).
fn e2e_of(packages: &[&str]) -> Vec<(String, String)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace");
    let mut cmd = std::process::Command::new(&cargo);
    cmd.current_dir(root)
        .args(["test", "--no-run", "--message-format=json", "--quiet"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cargo}: {e}"));
    assert!(
        out.status.success(),
        "cargo test --no-run failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = String::from_utf8_lossy(&out.stdout);
    packages
        .iter()
        .map(|p| {
            let exe = json
                .lines()
                .filter(|l| {
                    l.contains(&format!("#{p}@"))
                        && l.contains("\"name\":\"e2e\"")
                        && l.contains("\"kind\":[\"test\"]")
                })
                .find_map(|l| {
                    let rest = &l[l.find("\"executable\":\"")? + 14..];
                    Some(rest[..rest.find('"')?].to_string())
                })
                .unwrap_or_else(|| panic!("no e2e test binary for {p} in cargo's output"));
            (p.to_string(), exe)
        })
        .collect()
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

/// Runs the e2e tests of `packages` (each with its libtest filter, "" for all) with
/// `LAB_SNAPSHOT=require`, each binary on a lab of its own (in an empty state dir: no daemon
/// there), after one lab of `topology` made sure the snapshot exists; each must pass, on a
/// restored lab.
fn chapters_pass_on_restored_labs(topology: Topology, packages: &[(&str, &str)]) {
    drop(Testbed::boot(topology, &opts()).expect("a lab"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf();
    let empty = tempfile::tempdir().expect("temp dir");
    let mut report = vec![];
    let names: Vec<&str> = packages.iter().map(|(p, _)| *p).collect();
    for ((pkg, exe), (_, filter)) in e2e_of(&names).into_iter().zip(packages) {
        let chapter = root.join("chapters").join(pkg.trim_start_matches("ch"));
        let out = std::process::Command::new(&exe)
            .args(["--test-threads=1", "--nocapture"])
            .args((!filter.is_empty()).then_some(filter))
            .current_dir(&chapter)
            .env("LAB_SNAPSHOT", "require")
            .env("LAB_PROVIDER", "vm")
            .env("LAB_STATE_DIR", empty.path())
            .output()
            .unwrap_or_else(|e| panic!("running {exe}: {e}"));
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        let text = format!("{pkg}:\n{stdout}\n{stderr}");
        let (passed, failed) = counts(&stdout).unwrap_or_else(|| panic!("no summary: {text}"));
        assert!(
            out.status.success() && failed == 0 && passed > 0,
            "{pkg} on a restored lab: {passed} passed, {failed} failed\n{text}"
        );
        assert!(
            stderr.contains(&format!(
                "{} lab ready: restored from a snapshot",
                topology.name()
            )),
            "{pkg} did not run on a restored lab:\n{text}"
        );
        report.push(format!("{pkg}: {passed} passed"));
    }
    println!("on restored labs: {}", report.join("; "));
}

#[test]
fn chapters_01_and_06_pass_on_restored_labs() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    chapters_pass_on_restored_labs(
        Topology::Loopback,
        &[("ch01-devices", ""), ("ch06-pingpong", "chapter::")],
    );
}

#[test]
fn chapter_09_passes_on_a_restored_pair() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    chapters_pass_on_restored_labs(Topology::Pair, &[("ch09-memory-pool", "pool_end_to_end")]);
}

#[test]
fn a_second_pair_is_restored_each_node_from_its_own_file() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    assert_ne!(
        snapshot::mode(),
        snapshot::Mode::Off,
        "this test needs snapshots on (LAB_SNAPSHOT is 0)"
    );
    let o = opts();
    let plan = vm::plan(Topology::Pair, &o).expect("plan");
    let files = [harness::Node::A, harness::Node::B]
        .map(|n| snapshot::pair_path(&plan, n, o.pair_smp, o.mem_mb).expect("path"));
    assert_ne!(files[0], files[1], "the two nodes share a snapshot file");
    // The first makes sure both files exist; the second, in a state dir of its own, is restored.
    for round in 0..2 {
        let dir = vm::new_state_dir("snapshot-pair-test").expect("state dir");
        let (vms, cable) = snapshot::boot(Topology::Pair, &o, &plan, &dir)
            .unwrap_or_else(|e| panic!("booting the pair lab: {e:#}"));
        assert!(cable.is_some(), "a pair without its cable");
        for (i, n) in [harness::Node::A, harness::Node::B].into_iter().enumerate() {
            let how = snapshot::how_of(&dir, n);
            assert!(files[i].is_file(), "no {}", files[i].display());
            if round == 0 {
                continue;
            }
            assert!(
                how.starts_with("restored from a snapshot"),
                "node {} was not restored: {how}",
                n.name()
            );
            // Its own identity after the restore: node a's GID is ::ffff:10.77.0.1, b's .2.
            let out = vms[i]
                .1
                .run(
                    &harness::conn::Cmd::new(["cat", "/sys/class/infiniband/rxe0/ports/1/gids/1"]),
                    Duration::from_secs(60),
                )
                .expect("reading rxe0's GID");
            let gid = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert_eq!(
                gid,
                format!("0000:0000:0000:0000:0000:ffff:0a4d:000{}", i + 1)
            );
            // Init set the node's address and rxe0 up before the save: the restored agent only
            // checked the GID (it logs `lab-agent: ip ... ms` when it sets the network up).
            let console = std::fs::read_to_string(StateDir::at(&dir).console_log(n))
                .expect("the node's console log");
            assert!(
                console.contains("lab-agent: setup done in")
                    && !console.contains("lab-agent: ip ")
                    && !console.contains("the network before the gate failed"),
                "node {}: the network was not in the saved state:\n{console}",
                n.name()
            );
            println!("node {}: {how}", n.name());
        }
        drop(vms);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_changed_initramfs_makes_a_new_snapshot_and_a_corrupt_one_a_cold_boot() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = tempfile::tempdir().expect("temp dir");
    let base = vm::plan(Topology::Loopback, &opts()).expect("plan");
    let plan = own_initrd(&base, tmp.path());
    let first = file_of(&plan);
    let _ = std::fs::remove_file(&first);

    let (how, devs, _) = boot_with(&plan);
    assert!(how.contains("saved a snapshot"), "{how}");
    assert!(devs.contains("rxe0"), "{devs}");
    assert!(first.is_file(), "no {}", first.display());
    let (how, devs, _) = boot_with(&plan);
    assert!(how.starts_with("restored from a snapshot"), "{how}");
    assert!(devs.contains("rxe0"), "{devs}");

    // Truncated to half: QEMU cannot load it; the lab boots cold, saves a good one.
    let len = std::fs::metadata(&first).expect("snapshot").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .and_then(|f| f.set_len(len / 2))
        .expect("truncate the snapshot");
    let limit = snapshot::RESTORE_LIMIT + opts().boot_timeout;
    let (how, devs, took) = boot_with(&plan);
    assert!(
        how.starts_with("booted cold after a failed restore"),
        "{how}"
    );
    assert!(how.contains("saved a snapshot"), "{how}");
    assert!(devs.contains("rxe0"), "{devs}");
    assert!(took < limit, "the fallback took {took:?}");
    let new_len = std::fs::metadata(&first).expect("a new snapshot").len();
    assert!(
        new_len > len / 2 + len / 4,
        "the corrupt snapshot ({} bytes) was not replaced by a whole one ({new_len} bytes)",
        len / 2
    );

    // The same initramfs file, changed (512 more bytes of padding): another key, a new save.
    let mut bytes = std::fs::read(&plan.initrd).expect("initrd");
    bytes.extend([0u8; 512]);
    std::fs::write(&plan.initrd, bytes).expect("change the initramfs");
    let second = file_of(&plan);
    assert_ne!(first, second, "a changed initramfs kept the snapshot's key");
    let (how, devs, _) = boot_with(&plan);
    assert!(how.contains("saved a snapshot"), "{how}");
    assert!(devs.contains("rxe0"), "{devs}");
    assert!(second.is_file(), "no {}", second.display());
    for f in [first, second] {
        let _ = std::fs::remove_file(f);
    }
}
