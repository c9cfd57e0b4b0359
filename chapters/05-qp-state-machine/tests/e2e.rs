//! End-to-end tests of chapter 05 on a real rxe device (the loopback lab), through the harness:
//! the transcript is redacted by the harness's one table (QPNs, PSNs, keys) and compared with
//! the snapshot in `tests/snapshots/`.
//!
//! - `chapter`: the chapter as `cargo lab run 05` runs it; the facts it teaches (each errno,
//!   each state `ibv_query_qp` reports, the ghost send, the flushes, the recovery) are also
//!   asserted one by one.
//! - `bad_command_line`: runs the binary on the host; no device needed.

use harness::testing::run_chapter;
use harness::testing_cli::{prints_help, refuses_command_line};

const EXE: &str = env!("CARGO_BIN_EXE_ch05-qp-state-machine");

#[test]
fn chapter() {
    let t = run_chapter("ch05-qp-state-machine", EXE, &[]);
    insta::assert_snapshot!("default", t.redacted());
    t.assert_success();
    let out = &t.sections[0].stdout;
    for fact in [
        // Receives only from INIT on.
        "B posts a RECV in RESET: ibv_post_recv failed: EINVAL (22)",
        // The required masks, from lab's table.
        "INIT -> RTR: IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN | \
         IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN",
        // The INIT -> RTS shortcut: EINVAL, still INIT.
        "ibv_modify_qp(A, INIT -> RTS, mask IBV_QP_STATE | IBV_QP_TIMEOUT",
        "INIT -> RTS skips RTR: go through RTR first\n  ibv_query_qp: A is INIT",
        // A missing attribute: EINVAL, named, still INIT.
        "lab explains: missing required attribute(s): IBV_QP_DEST_QPN\n  ibv_query_qp: A is INIT",
        // The ghost send.
        "ibv_post_send(\"ghost\", wr_id 1) failed: EINVAL (22)",
        "A completion: wr_id 1, IBV_WC_SEND (0), IBV_WC_SUCCESS (0)",
        "B completion: wr_id 100, IBV_WC_RECV (128), 5 bytes \"ghost\"",
        "B completion: wr_id 101, IBV_WC_RECV (128), 5 bytes \"hello\"",
        // ERR flushes, exactly 3, in order; a SEND in ERR is accepted and flushed.
        "A completion: wr_id 200, IBV_WC_WR_FLUSH_ERR (5)",
        "A completion: wr_id 202, IBV_WC_WR_FLUSH_ERR (5)",
        "3 of 3 flushed, in order",
        "A completion: wr_id 3, IBV_WC_WR_FLUSH_ERR (5)",
        // Recovery.
        "B received \"recovered\" (wr_id 110)",
    ] {
        assert!(out.contains(fact), "missing {fact:?} in\n{t}");
    }
    // Errors go to stderr; a successful run has none.
    assert!(t.sections[0].stderr.is_empty(), "{t}");
    // The QP numbers after the reset are the ones from the start (same placeholders).
    let red = t.redacted();
    assert!(red.contains("A qpn=[QPN#1], B qpn=[QPN#2]"), "{red}");
    assert!(
        red.contains("A qpn=[QPN#1] psn=[PSN#3], B qpn=[QPN#2] psn=[PSN#4]: the same QP numbers"),
        "{red}"
    );
}

#[test]
fn bad_command_line() {
    let stderr = refuses_command_line(EXE, &["--bogus"], "unexpected argument '--bogus'");
    // clap names the flag and points at --help.
    assert!(stderr.contains("try '--help'"), "{stderr}");
}

#[test]
fn help_prints_usage() {
    assert!(prints_help(EXE, "-h").contains("Usage: ch05-qp-state-machine"));
}
