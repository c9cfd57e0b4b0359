//! End-to-end tests of chapter 04 on a real rxe device (the loopback lab), through the harness:
//! the transcript is redacted by the harness's one table (QPNs, keys, elapsed and CPU times)
//! and compared with the snapshots in `tests/snapshots/`.
//!
//! - `chapter`: the chapter as `cargo lab run 04` runs it, and with a smaller run and a window
//!   of 1 (one WRITE in flight): the event rules must hold the same way.
//! - `counts`: `--counts` adds the run-dependent figures (asserted, not snapshotted).
//! - `bad_command_line`: runs the binary on the host; no device needed.

use harness::testing::run_chapter;
use harness::testing_cli::{prints_help, refuses_command_line};
use rstest::rstest;

const EXE: &str = env!("CARGO_BIN_EXE_ch04-completion-queues");

#[rstest]
#[case::default("default", &[])]
#[case::window_of_one("window_of_one", &["-n", "100", "-w", "1"])]
fn chapter(#[case] name: &str, #[case] args: &[&str]) {
    let t = run_chapter("ch04-completion-queues", EXE, args);
    insta::assert_snapshot!(name, t.redacted());
    t.assert_success();
    let out = &t.sections[0].stdout;
    let n = if args.is_empty() { "1000" } else { "100" };
    // The facts the chapter teaches, asserted one by one (the snapshot has the rest).
    for fact in [
        // rxe's CQ size rounding.
        "asked for cqe=128, got 255; receive CQ (B): asked for 16, got 31".to_string(),
        // Both ways complete everything, in order.
        format!("{n} completions: all IBV_WC_SUCCESS (0), opcode IBV_WC_RDMA_WRITE (1)"),
        "the channel stayed silent (300 ms): a CQ raises events only when armed".into(),
        // One event, many completions; no re-arm, no event.
        "then ibv_poll_cq drained 8 completions".into(),
        "no second event (300 ms): the CQ disarmed itself".into(),
        // The lost wake-up.
        "armed B's CQ, then waited: no event (300 ms)".into(),
        "ibv_poll_cq finds it anyway: 1 completion, wr_id 100, IBV_WC_RECV (128), 64 bytes".into(),
        // Solicited-only.
        "A sent 2 SENDs without IBV_SEND_SOLICITED: both received, no event (300 ms)".into(),
        "A sent a 3rd SEND with IBV_SEND_SOLICITED: one event, acked".into(),
        "an unsolicited SEND still\n  woke B (one event, acked)".into(),
        // Acks before destroy.
        "unacknowledged events = 1".into(),
        "1 completion event(s) not acknowledged: ibv_destroy_cq would block forever".into(),
        "destroyed both channels (ibv_destroy_comp_channel): ok".into(),
    ] {
        assert!(out.contains(&fact), "missing {fact:?} in\n{t}");
    }
    // CPU times and timings are printed only in the redacted forms.
    let red = t.redacted();
    assert!(red.contains("elapsed=[ELAPSED] cpu=[CPU] (user cpu=[CPU] + system cpu=[CPU])"));
    for (label, placeholder) in [("cpu=", "[CPU]"), ("elapsed=", "[ELAPSED]")] {
        for (i, _) in red.match_indices(label) {
            let rest = &red[i + label.len()..];
            assert!(
                rest.starts_with(placeholder),
                "unredacted {label} in\n{red}"
            );
        }
    }
}

/// `--counts` prints figures that vary run to run: no snapshot, but they must be there (and
/// the run must still pass every check).
#[test]
fn counts() {
    let t = run_chapter("ch04-completion-queues", EXE, &["--counts", "-n", "200"]);
    t.assert_success();
    let out = &t.sections[0].stdout;
    for fact in [
        "counts (vary run to run): ibv_poll_cq loops=",
        "counts (vary run to run): events=",
    ] {
        assert!(out.contains(fact), "missing {fact:?} in\n{t}");
    }
}

#[rstest]
#[case::unknown_flag(&["--bogus"], "unexpected argument '--bogus'")]
#[case::missing_value(&["-n"], "a value is required for '--iters <N>'")]
#[case::zero_iters(&["-n", "0"], "invalid value '0' for '--iters <N>': 0 is not in 1..=1000000")]
#[case::iters_not_a_number(&["--iters", "many"], "invalid value 'many' for '--iters <N>'")]
#[case::window_too_big(&["-w", "65"], "\"65\" is not a window in 1..=64")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    let stderr = refuses_command_line(EXE, args, message);
    // clap names the flag and points at --help.
    assert!(stderr.contains("try '--help'"), "{stderr}");
}

#[test]
fn help_prints_usage() {
    assert!(prints_help(EXE, "--help").contains("Usage: ch04-completion-queues"));
}
