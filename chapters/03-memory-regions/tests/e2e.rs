//! End-to-end test of chapter 03 on a real rxe device (the loopback lab), through the harness;
//! the transcript, redacted by the harness's one table, is compared with
//! `tests/snapshots/e2e__chapter.snap`.
//!
//! - `chapter`: the chapter as `cargo lab run 03` runs it, with explicit asserts on the facts it
//!   teaches: READ through an rkey works, WRITE into a read-only region fails
//!   (IBV_WC_REM_ACCESS_ERR), REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE is EINVAL, and in
//!   the unprivileged child under a 64 KiB memlock limit 1 MiB is ENOMEM while 32 KiB fits.
//! - `bad_command_line`: runs the binary on the host; no device needed.

use course::kernel::{KernelVersion, RxeChange};
use harness::Topology;
use harness::testing::{lab_kernel, run_chapter};
use harness::testing_cli::{prints_help, refuses_command_line};
use rstest::rstest;

const EXE: &str = env!("CARGO_BIN_EXE_ch03-memory-regions");

#[test]
fn chapter() {
    let t = run_chapter("ch03-memory-regions", EXE, &[]);
    // Which regions carry an rkey depends on the lab's kernel (course::kernel): from Linux 6.5 on
    // every MR has one (`e2e__chapter@linux-6.5.snap`).
    let release = lab_kernel(Topology::Loopback);
    let kernel = KernelVersion::parse(&release).unwrap_or_else(|| panic!("kernel {release:?}"));
    let change = RxeChange::RkeyIsLkey;
    let keys = if change.holds_on(kernel) {
        insta::with_settings!({ snapshot_suffix => format!("linux-{}", change.since()) }, {
            insta::assert_snapshot!("chapter", t.redacted());
        });
        "regions a peer cannot reach (no REMOTE_* flag): send buffer, recv buffer"
    } else {
        insta::assert_snapshot!("chapter", t.redacted());
        "regions without an rkey: send buffer, recv buffer"
    };
    t.assert_success();
    let out = &t.sections[0].stdout;
    for fact in [
        keys,
        "IBV_WC_SUCCESS (0), 19 bytes: \"exported, read-only\"",
        "(REMOTE_READ only): IBV_WC_REM_ACCESS_ERR (10)",
        "intact: yes",
        "IBV_ACCESS_REMOTE_WRITE (without IBV_ACCESS_LOCAL_WRITE):\n    refused: EINVAL (22)",
        "IBV_ACCESS_REMOTE_ATOMIC (without IBV_ACCESS_LOCAL_WRITE):\n    refused: EINVAL (22)",
        "| child: CAP_IPC_LOCK: no",
        "| child: setrlimit(RLIMIT_MEMLOCK): soft 64 KiB, hard 64 KiB",
        "|     refused: ENOMEM (12)",
        "| child: ibv_reg_mr of 32 KiB: ok",
        "the child exited 0",
        "everything: ok",
    ] {
        assert!(out.contains(fact), "missing {fact:?} in\n{t}");
    }
    assert!(t.sections[0].stderr.is_empty(), "{t}");
}

#[rstest]
#[case::unknown_flag(&["--bogus"], "unexpected argument '--bogus'")]
#[case::child_flag_with_extra(&["--memlock-child", "x"], "unexpected argument 'x'")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    let stderr = refuses_command_line(EXE, args, message);
    // clap names the flag and points at --help.
    assert!(stderr.contains("try '--help'"), "{stderr}");
}

#[test]
fn help_prints_usage() {
    assert!(prints_help(EXE, "--help").contains("Usage: ch03-memory-regions"));
}
