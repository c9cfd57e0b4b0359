//! End-to-end tests of chapter 08 on a real rxe device, through the harness.
//!
//! - `case`: every failure mode as its own process (one role `run`, argv [exe, case]) in the
//!   loopback lab, each with its own snapshot (`e2e__case@<name>.snap`) and explicit asserts
//!   on the statuses and errnos that matter;
//! - `all_cases_in_order`: the chapter as `chapters/course.toml` runs it (`all`); its summary
//!   table is snapshotted (the cases themselves are above);
//! - `mtu_too_large_between_two_nodes`: the pair half of case 9, server on node a, client on
//!   node b;
//! - `cli_*`: bad command lines, on the host (no device needed).

use std::process::Command;

use course::kernel::{KernelVersion, RxeChange};
use harness::testing::{Role, lab_kernel, run_chapter, run_roles, run_roles_in, run_timeout};
use harness::testing_cli::{prints_help, refuses_command_line};
use harness::{Node, Topology};
use rstest::rstest;

const EXE: &str = env!("CARGO_BIN_EXE_ch08-failure-modes");

#[rstest]
#[case::remote_access(
    "remote-access",
    &["A's completion: IBV_WC_REM_ACCESS_ERR (10)", "A's completion: IBV_WC_REM_INV_REQ_ERR (9)",
      "B's sentinel RECV (wr_id 100): IBV_WC_WR_FLUSH_ERR (5)"]
)]
#[case::bad_rkey("bad-rkey", &["A's completion: IBV_WC_REM_ACCESS_ERR (10)", "B's QP state: ERR"])]
#[case::out_of_bounds(
    "out-of-bounds",
    &["A's completion: IBV_WC_REM_ACCESS_ERR (10)", "(nothing was written): true"]
)]
#[case::unregistered_lkey(
    "unregistered-lkey",
    &["lkey 0 (an unregistered", "A's completion: IBV_WC_LOC_QP_OP_ERR (2)",
      "A's completion: IBV_WC_LOC_PROT_ERR (4)"]
)]
#[case::post_before_rts(
    "post-before-rts",
    &["ibv_post_send: returned EINVAL (22)", "B's RECV #1 (IBV_WC_SUCCESS (0)): \"posted in RESET\"",
      "B's RECV #3 (IBV_WC_SUCCESS (0)): \"posted in RTR\""]
)]
#[case::skip_rtr(
    "skip-rtr",
    &["ibv_modify_qp: returned EINVAL (22)", "QP state afterwards (ibv_query_qp): INIT"]
)]
#[case::rnr_retry_exceeded(
    "rnr-retry-exceeded",
    &["A's completion: IBV_WC_RNR_RETRY_EXC_ERR (13)",
      "no completion within 2.000s (rnr_retry=7 retries forever)",
      "A's completion: IBV_WC_RETRY_EXC_ERR (12)"]
)]
#[case::peer_gone(
    "peer-gone",
    &["A's completion wr_id=2: IBV_WC_RETRY_EXC_ERR (12)",
      "A's completion wr_id=3: IBV_WC_WR_FLUSH_ERR (5)",
      "no completion within 2.000s (rxe retries forever with retry_cnt=7)",
      "C received: recovered", "recovered: traffic resumes"]
)]
#[case::mtu_too_large(
    "mtu-too-large",
    &["A's path MTU (ibv_query_qp): 4096", "bytes received: 4096", "data intact: true"]
)]
#[case::wrong_gid_index(
    "wrong-gid-index",
    &["index 0  RoCE v2  gid=fe80::5054:ff:fe00:1", "ibv_modify_qp: returned EINVAL (22)",
      "B's completion: IBV_WC_RETRY_EXC_ERR (12)"]
)]
#[case::recv_queue_full(
    "recv-queue-full",
    &["RECVs accepted: 7", "ibv_post_recv #8: returned ENOMEM (12)"]
)]
#[case::flush_on_error(
    "flush-on-error",
    &["B's completion wr_id=103: IBV_WC_WR_FLUSH_ERR (5)",
      "A's completion wr_id=2: IBV_WC_WR_FLUSH_ERR (5)",
      "B's completion wr_id=104: IBV_WC_WR_FLUSH_ERR (5)"]
)]
#[case::deregistered_region(
    "deregistered-region",
    &["A's completion: IBV_WC_SUCCESS (0)", "A's completion: IBV_WC_REM_ACCESS_ERR (10)"]
)]
#[case::memlock(
    "memlock",
    &["child: uid 65534, RLIMIT_MEMLOCK 64 KiB", "child: ibv_reg_mr(1 MiB): returned ENOMEM (12)",
      "child: ibv_reg_mr(1 MiB) succeeded (CAP_IPC_LOCK ignores the limit): true"]
)]
#[case::cq_overflow(
    "cq-overflow",
    &["IBV_EVENT_CQ_ERR (0) events on A's CQ: 21", "completions kept (wr_id): 1 2 3 4 5 6 7",
      "A's completion wr_id=29: IBV_WC_SUCCESS (0)"]
)]
#[case::cross_pd(
    "cross-pd",
    &["A's completion: IBV_WC_LOC_QP_OP_ERR (2)", "A's completion: IBV_WC_REM_ACCESS_ERR (10)"]
)]
#[case::recv_cq_overflow(
    "recv-cq-overflow",
    &["A's completion wr_id=8: IBV_WC_RETRY_EXC_ERR (12)",
      "IBV_EVENT_CQ_ERR (0) events on B's CQ: 1", "B's QP state: ERR",
      "completions kept (wr_id): 101 102 103 104 105 106 107"]
)]
fn case(#[case] name: &str, #[case] facts: &[&str]) {
    let t = run_roles(Topology::Loopback, vec![Role::new("run", [EXE, name])]);
    // Four cases show where rxe changed after Linux 6.1 (course::kernel, docs/rxe-observed.md "On
    // later kernels"): on a kernel with the change their snapshot is
    // `e2e__case@<name>-linux-<release of the change>.snap`, and their facts are the later ones.
    let kernel = loopback_kernel();
    let (suffix, facts) = match later(name) {
        Some((change, later_facts)) if change.holds_on(kernel) => {
            (format!("{name}-linux-{}", change.since()), later_facts)
        }
        _ => (name.to_string(), facts),
    };
    insta::with_settings!({ snapshot_suffix => suffix }, {
        insta::assert_snapshot!("case", t.redacted());
    });
    t.assert_success();
    let out = &t.section("run").stdout;
    assert!(
        out.contains(&format!("result: {name}: as recorded for rxe")),
        "{out}"
    );
    assert!(!out.contains("MISMATCH"), "{out}");
    for fact in facts {
        assert!(out.contains(fact), "missing {fact:?} in:\n{out}");
    }
}

/// The loopback lab's kernel (the guest's, in the microVM lab).
fn loopback_kernel() -> KernelVersion {
    let release = lab_kernel(Topology::Loopback);
    KernelVersion::parse(&release).unwrap_or_else(|| panic!("the lab's kernel: {release:?}"))
}

/// The cases whose behaviour changed after Linux 6.1: the change, and the facts on a kernel
/// that has it (the `#[case]` facts above hold before it).
fn later(name: &str) -> Option<(RxeChange, &'static [&'static str])> {
    Some(match name {
        "unregistered-lkey" => (
            RxeChange::LocalErrorFlushed,
            &[
                "lkey 0 (an unregistered",
                "checked against: rxe from Linux 6.4 on (local-error-flushed)",
                "A's completion: IBV_WC_WR_FLUSH_ERR (5)",
                "A's QP state: ERR",
            ],
        ),
        "rnr-retry-exceeded" => (
            RxeChange::RnrForeverOutlastsRetryCnt,
            &[
                "A's completion: IBV_WC_RNR_RETRY_EXC_ERR (13)",
                "no completion within 2.000s (rnr_retry=7 retries forever)",
                "checked against: rxe from Linux 6.10 on (rnr-forever-outlasts-retry-cnt)",
                "no completion within 2.000s: rnr_retry=7 waits forever, whatever retry_cnt is",
            ],
        ),
        "recv-queue-full" => (
            RxeChange::QueueCapRounded,
            &[
                "cap.max_recv_wr reported by ibv_create_qp: 7",
                "RECVs accepted: 7",
                "ibv_post_recv #8: returned ENOMEM (12)",
            ],
        ),
        "cross-pd" => (
            RxeChange::LocalErrorFlushed,
            &[
                "A's completion: IBV_WC_WR_FLUSH_ERR (5)",
                "A's completion: IBV_WC_REM_ACCESS_ERR (10)",
            ],
        ),
        _ => return None,
    })
}

#[test]
fn all_cases_in_order() {
    let t = run_chapter("ch08-failure-modes", EXE, &[]);
    let out = &t.section("run").stdout;
    let summary = out
        .find("summary:")
        .map(|i| &out[i..])
        .unwrap_or_else(|| panic!("no summary in:\n{}", t.text()));
    // The summary's outcome column follows the kernel's changes: keyed by the newest one.
    let changes = [
        RxeChange::LocalErrorFlushed,
        RxeChange::QueueCapRounded,
        RxeChange::RnrForeverOutlastsRetryCnt,
        RxeChange::XmitErrorFailsWr,
    ];
    match RxeChange::newest_on(&changes, loopback_kernel()) {
        None => insta::assert_snapshot!("all_summary", summary),
        Some(v) => insta::with_settings!({ snapshot_suffix => format!("linux-{v}") }, {
            insta::assert_snapshot!("all_summary", summary);
        }),
    }
    t.assert_success();
    assert!(
        summary.contains("17 of 17 cases behaved as recorded"),
        "{summary}"
    );
}

#[test]
fn mtu_too_large_between_two_nodes() {
    // Two kernels on a wire: the oversized packet is dropped by the sending node's netdev. The
    // native provider serves the pair on one device, where packets loop back inside rxe and no
    // MTU applies: there the case runs on a microVM pair booted for it (with KVM), or fails
    // saying why and where it runs.
    let shared = harness::testing::lab(Topology::Pair);
    let own;
    let lab: &harness::testbed::Testbed = if shared.single_device() {
        own = harness::testbed::Testbed::boot_wire_pair().unwrap_or_else(|e| {
            panic!(
                "mtu_too_large_between_two_nodes: this lab ({}) cannot run it: {e:#}",
                shared.origin
            )
        });
        &own
    } else {
        &shared
    };
    let server = lab.server_addr().to_string();
    let roles = [
        Role::new("server", [EXE, "mtu-too-large", "--serve"]).ready("listening on"),
        Role::new("client", [EXE, "mtu-too-large", "--connect", &server]).on(Node::B),
    ];
    let t = {
        let _g = harness::testing::lock(lab);
        run_roles_in(lab, &roles, run_timeout()).unwrap_or_else(|e| panic!("{e}"))
    };
    // Before Linux 6.10 the oversized SEND hangs; from 6.10 on it fails (course::kernel).
    let release = lab_kernel(Topology::Pair);
    let kernel = KernelVersion::parse(&release).unwrap_or_else(|| panic!("kernel {release:?}"));
    let change = RxeChange::XmitErrorFailsWr;
    let fails = change.holds_on(kernel);
    if fails {
        insta::with_settings!({ snapshot_suffix => format!("linux-{}", change.since()) }, {
            insta::assert_snapshot!("mtu_pair", t.redacted());
        });
    } else {
        insta::assert_snapshot!("mtu_pair", t.redacted());
    }
    t.assert_success();
    let client = &t.section("client").stdout;
    let facts: &[&str] = if fails {
        &["completion: IBV_WC_WR_FLUSH_ERR (5)", "QP big state: ERR"]
    } else {
        &[
            "no completion within 2.000s (the packet is dropped",
            "QP big state: RTS",
        ]
    };
    for fact in facts {
        assert!(client.contains(fact), "missing {fact:?} in:\n{client}");
    }
    let server = &t.section("server").stdout;
    assert!(
        server.contains("wr_id=100 IBV_WC_SUCCESS (0) byte_len=1024, wr_id=200"),
        "{server}"
    );
}

/// Runs the binary on the host (no device is touched for these command lines).
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(EXE)
        .args(args)
        .output()
        .expect("run the chapter");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_list() {
    let (code, out, err) = cli(&["--list"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 17, "{out}");
    insta::assert_snapshot!("list", out);
}

#[rstest]
#[case::no_arguments(&[], "the following required arguments were not provided")]
#[case::unknown_case(&["nope"], "unknown case \"nope\"; `ch08-failure-modes --list` shows the cases")]
#[case::option_on_other_case(&["peer-gone", "--serve"], "case peer-gone takes no options")]
#[case::connect_without_address(&["mtu-too-large", "--connect"], "a value is required for '--connect <addr>'")]
#[case::serve_and_connect(&["mtu-too-large", "--serve", "--connect", "x"], "cannot be used with")]
#[case::bad_port(&["mtu-too-large", "--serve", "--port", "http"], "invalid value 'http' for '--port <N>'")]
#[case::unknown_option(&["mtu-too-large", "--fast"], "unexpected argument '--fast'")]
#[case::all_with_extra(&["all", "more"], "unexpected argument 'more'")]
#[case::port_alone(&["mtu-too-large", "--port", "5"], "--port needs --serve or --connect")]
fn cli_bad_input(#[case] args: &[&str], #[case] message: &str) {
    let stderr = refuses_command_line(EXE, args, message);
    // clap's form: the message, then a pointer to --help.
    assert!(stderr.contains("try '--help'"), "{stderr}");
}

#[test]
fn cli_help() {
    let out = prints_help(EXE, "--help");
    assert!(out.contains("Usage: ch08-failure-modes"), "{out}");
    assert!(out.contains("mtu-too-large --connect <addr>"), "{out}");
}
