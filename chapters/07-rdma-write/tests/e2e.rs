//! Chapter 07 end to end, on a real rxe device (the loopback lab: server and client on `rxe0`,
//! the exchange over 127.0.0.1).
//!
//! * `chapter`: the run `cargo lab run 07` does: a plain RDMA WRITE that leaves the server's CQ
//!   empty, then a WRITE_WITH_IMM that completes there with the immediate;
//! * `mistake`: the common mistakes reproduced with `--mistake` (appended to both roles, as
//!   `cargo lab run 07 -- --mistake lkey0` does), each with the exact status or errno;
//! * `bad_flow_garbage_from_server`: a peer that does not speak the lab's exchange;
//! * `bad_command_line`: refused before any device is touched (runs on the host).

use course::kernel::{KernelVersion, RxeChange};
use harness::Topology;
use harness::testing::{Role, lab_kernel, run_chapter, run_roles};
use harness::testing_cli::refuses_command_line;
use rstest::rstest;

const PKG: &str = "ch07-rdma-write";
const EXE: &str = env!("CARGO_BIN_EXE_ch07-rdma-write");

#[test]
fn chapter() {
    let t = run_chapter(PKG, EXE, &[]);
    insta::assert_snapshot!("chapter", t.redacted());
    t.assert_success();
    let (s, c) = (t.section("server"), t.section("client"));
    // The one-sided write left the target's CQ empty ...
    assert!(
        s.stdout
            .contains("0 completions, and our receive is still posted"),
        "{}",
        t.text()
    );
    // ... yet the bytes landed, and WRITE_WITH_IMM produced exactly the expected completion.
    assert!(
        s.stdout
            .contains("\"Hello from the client! RDMA WRITE put these bytes")
    );
    assert!(s.stdout.contains(
        "a completion: IBV_WC_RECV_RDMA_WITH_IMM (129), IBV_WC_SUCCESS (0), imm=0xc0ffee07, byte_len=74"
    ));
    assert!(c.stdout.contains("the server's checksums match ours"));
    assert!(s.stderr.is_empty() && c.stderr.is_empty(), "{}", t.text());
}

#[rstest]
#[case::lkey0("lkey0", "client", "IBV_WC_LOC_QP_OP_ERR (2)")]
#[case::skip_rtr("skip-rtr", "client", "EINVAL (22)")]
#[case::wait_target_cq(
    "wait-target-cq",
    "server",
    "no completion for the client's RDMA WRITE within 2s (got 0 of 1)"
)]
fn mistake(#[case] name: &str, #[case] culprit: &str, #[case] evidence: &str) {
    let t = run_chapter(PKG, EXE, &["--mistake", name]);
    // lkey0's status depends on the lab's kernel (course::kernel): from Linux 6.4 on it is a
    // flush, with its own snapshot (`e2e__mistake@lkey0-linux-6.4.snap`).
    let change = RxeChange::LocalErrorFlushed;
    let release = lab_kernel(Topology::Loopback);
    let kernel = KernelVersion::parse(&release).unwrap_or_else(|| panic!("kernel {release:?}"));
    let (suffix, evidence) = if name == "lkey0" && change.holds_on(kernel) {
        (
            format!("{name}-linux-{}", change.since()),
            "IBV_WC_WR_FLUSH_ERR (5)",
        )
    } else {
        (name.to_string(), evidence)
    };
    insta::with_settings!({ snapshot_suffix => suffix }, {
        insta::assert_snapshot!("mistake", t.redacted());
    });
    // The role that made the mistake fails with the exact status or errno; its peer notices
    // (a closed connection) and fails too: nobody hangs, nobody exits 0.
    let (s, c) = (t.section("server"), t.section("client"));
    assert_eq!((s.exit_code, c.exit_code), (1, 1), "{}", t.text());
    assert!(
        t.section(culprit).stderr.contains(evidence),
        "{culprit} should report {evidence:?}:\n{}",
        t.text()
    );
}

#[test]
fn bad_flow_garbage_from_server() {
    // A fake server: busybox nc answers with text where the lab's binary message belongs.
    let fake = "echo 'fake server: listening on 18516'; \
                printf 'HTTP/1.1 400 Bad Request\\r\\n\\r\\n' | busybox nc -l -p 18516 >/dev/null";
    let t = run_roles(
        Topology::Loopback,
        vec![
            Role::new("fake server", ["sh", "-c", fake]).ready("listening on"),
            Role::new("client", [EXE, "--connect", "127.0.0.1", "--timeout", "20"]),
        ],
    );
    insta::assert_snapshot!("bad_flow_garbage_from_server", t.redacted());
    let c = t.section("client");
    assert_eq!(c.exit_code, 1, "{}", t.text());
    assert!(
        c.stderr.contains("not a lab exchange message"),
        "{}",
        t.text()
    );
}

#[rstest]
#[case::no_role(&[], "--server")]
#[case::both_roles(&["--server", "--connect", "127.0.0.1"], "cannot be used with")]
#[case::unknown_mistake(&["--server", "--mistake", "typo"], "invalid value 'typo'")]
#[case::zero_timeout(&["--server", "--timeout", "0"], "invalid value '0'")]
#[case::bad_port(&["--server", "--port", "http"], "invalid value 'http'")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    refuses_command_line(EXE, args, message);
}
