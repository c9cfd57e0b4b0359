//! Chapter 12 end to end, on real rxe devices:
//!
//! * `chapter`: the run `cargo lab run 12` does, on the pair (the client on node b resolves
//!   node a's 10.77.0.1); `chapter_on_loopback`: the same on one device (10.99.0.1);
//! * `case`: every failure of the README's table, on the loopback lab, each a snapshot;
//! * `interop`: rping, ucmatose, rdma_client and rdma_server against our server or client
//!   (the loopback lab; the tools come from rdmacm-utils, which the guest sees on the host);
//! * `bad_command_line`: refused before any device is touched (runs on the host).

use course::kernel::{KernelVersion, RxeChange};
use harness::Topology;
use harness::testing::{Role, lab_kernel, run_chapter, run_roles, value_after};
use harness::testing_cli::refuses_command_line;
use rstest::rstest;

/// A snapshot, with `suffix` when there is one.
macro_rules! snap {
    ($name:expr, $suffix:expr, $value:expr) => {
        match $suffix {
            Some(s) => insta::with_settings!({ snapshot_suffix => s }, {
                insta::assert_snapshot!($name, $value);
            }),
            None => insta::assert_snapshot!($name, $value),
        }
    };
}

/// What rdma_cm sets on a QP changed with the kernel (course::kernel: its RoCE packet lifetime,
/// and the FLUSH rights, both from Linux 6.2 on): a transcript that shows it (`what rdma_cm
/// set`) has its own snapshot there, `base` followed by `-linux-6.2` (or `linux-6.2` alone).
fn cm_suffix(base: Option<&str>, text: &str, topology: Topology) -> Option<String> {
    let release = lab_kernel(topology);
    let k = KernelVersion::parse(&release).unwrap_or_else(|| panic!("kernel {release:?}"));
    let changes = [RxeChange::CmaPacketLifetime16, RxeChange::CmFlushAccess];
    match (base, RxeChange::newest_on(&changes, k)) {
        (b, Some(v)) if text.contains("what rdma_cm set") => Some(match b {
            Some(b) => format!("{b}-linux-{v}"),
            None => format!("linux-{v}"),
        }),
        (b, _) => b.map(str::to_string),
    }
}

const PKG: &str = "ch12-connection-manager";
const EXE: &str = env!("CARGO_BIN_EXE_ch12-connection-manager");
/// The loopback lab's rxe netdev address (docs/conventions.md).
const ADDR: &str = "10.99.0.1";

#[test]
fn chapter() {
    let t = run_chapter(PKG, EXE, &[]);
    // On the pair each node numbers its own QPs, so the server's and the client's QPN are
    // equal or not depending on what ran before on the lab: the snapshot shows `[QPN]`, and
    // the match across the two nodes is asserted on the raw text instead.
    let suffix = cm_suffix(None, &t.text(), Topology::Pair);
    insta::with_settings!({ filters => vec![(r"\[QPN#\d+\]", "[QPN]")] }, {
        snap!("chapter", suffix, t.redacted());
    });
    t.assert_success();
    check_clean_run(&t);
    let (s, c) = (&t.section("server").stdout, &t.section("client").stdout);
    assert_eq!(
        value_after(s, "-> qpn="),
        value_after(c, "dest_qp_num qpn=")
    );
    assert_eq!(
        value_after(c, "-> qpn="),
        value_after(s, "dest_qp_num qpn=")
    );
}

#[test]
fn chapter_on_loopback() {
    let t = run_roles(
        Topology::Loopback,
        vec![
            Role::new("server", [EXE, "--server"]).ready("listening on"),
            Role::new("client", [EXE, "--connect", ADDR]),
        ],
    );
    let suffix = cm_suffix(None, &t.text(), Topology::Loopback);
    snap!("chapter_on_loopback", suffix, t.redacted());
    t.assert_success();
    check_clean_run(&t);
}

fn check_clean_run(t: &harness::testing::Transcript) {
    let (s, c) = (&t.section("server").stdout, &t.section("client").stdout);
    // The event sequence, each side.
    for ev in [
        "RDMA_CM_EVENT_ADDR_RESOLVED (0)",
        "RDMA_CM_EVENT_ROUTE_RESOLVED (2)",
        "RDMA_CM_EVENT_ESTABLISHED (9)",
        "RDMA_CM_EVENT_DISCONNECTED (10)",
        "RDMA_CM_EVENT_TIMEWAIT_EXIT (15)",
    ] {
        assert!(c.contains(ev), "client lacks {ev}:\n{}", t.text());
    }
    for ev in [
        "RDMA_CM_EVENT_CONNECT_REQUEST (4)",
        "RDMA_CM_EVENT_ESTABLISHED (9)",
        "RDMA_CM_EVENT_DISCONNECTED (10)",
        "RDMA_CM_EVENT_TIMEWAIT_EXIT (15)",
    ] {
        assert!(s.contains(ev), "server lacks {ev}:\n{}", t.text());
    }
    // rdma_cm's QP states: INIT at creation, RTS at accept, ERR after rdma_disconnect.
    assert!(s.contains("state INIT") && s.contains("our QP is RTS already"));
    assert!(c.contains("our QP is now ERR") && s.contains("our QP is now ERR"));
    // The region came in the private data, and the bytes landed.
    assert!(c.contains("the server's private data (196 bytes): region addr="));
    assert!(s.contains("our region holds \"Hello through rdma_cm"));
    assert!(s.contains("flushed: wr_id 9 IBV_WC_WR_FLUSH_ERR (5)"));
    assert!(s.contains("private data: 56 bytes"));
}

/// The failures, on the loopback lab: both roles get `--case NAME`, as `cargo lab run 12 --
/// --case NAME` does.
#[rstest]
#[case::no_listener("no-listener", "status 8 (IB_CM_REJ_INVALID_SERVICE_ID)")]
#[case::reject("reject", "status 28 (IB_CM_REJ_CONSUMER_DEFINED)")]
#[case::unreachable(
    "unreachable",
    "RDMA_CM_EVENT_ADDR_ERROR (1), status -110 (-ETIMEDOUT)"
)]
#[case::localhost("localhost", "rdma_resolve_route failed: ENODEV (19)")]
#[case::peer_killed("peer-killed", "flushed: wr_id 11 IBV_WC_WR_FLUSH_ERR (5)")]
#[case::reconnect("reconnect", "ibv_modify_qp(ERR -> INIT) is refused: EINVAL (22)")]
fn case(#[case] name: &str, #[case] evidence: &str) {
    let t = run_roles(
        Topology::Loopback,
        vec![
            Role::new("server", [EXE, "--server", "--case", name]).ready("listening on"),
            Role::new("client", [EXE, "--connect", ADDR, "--case", name]),
        ],
    );
    let suffix = cm_suffix(Some(name), &t.text(), Topology::Loopback);
    snap!("case", suffix, t.redacted());
    t.assert_success();
    let c = &t.section("client").stdout;
    assert!(c.contains(evidence), "{}", t.text());
    if name == "reconnect" {
        assert!(c.contains("fresh PSNs"), "{}", t.text());
        let s = &t.section("server").stdout;
        assert!(
            s.contains("worker 1 was killed by SIGKILL (9)"),
            "{}",
            t.text()
        );
        assert!(s.contains("worker 2 exited with 0"), "{}", t.text());
    }
}

/// A tool's server, started in the background; the role is ready once `rdma res` lists its
/// listening id (the tools print nothing when they listen).
fn tool_server(cmd: &str, port: u16) -> Vec<String> {
    let script = format!(
        "{cmd} & i=0; until rdma res show cm_id | grep -q 'LISTEN.*src-addr [0-9.]*:{port} '; do \
         i=$((i+1)); [ $i -gt 300 ] && echo 'no listener after 30 s' && exit 1; sleep 0.1; done; \
         echo 'tool: listening on {port}'; wait $!"
    );
    vec!["sh".into(), "-c".into(), script]
}

#[rstest]
#[case::rping_client("rping_client", "our server, rping -c")]
#[case::rping_server("rping_server", "our client, rping -s")]
#[case::ucmatose("ucmatose", "our server, ucmatose -s")]
#[case::rdma_client("rdma_client", "our server, rdma_client")]
#[case::rdma_server("rdma_server", "our client, rdma_server")]
fn interop(#[case] name: &str, #[case] what: &str) {
    let ours = |args: &[&str]| -> Vec<String> {
        let mut v = vec![EXE.to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        v
    };
    let t30 = |c: &str| format!("timeout 30 {c}");
    let roles = match name {
        "rping_client" => vec![
            Role::new(
                "server",
                ours(&["--server", "-p", "7174", "--proto", "rping"]),
            )
            .ready("listening on"),
            Role::new(
                "rping -c",
                [
                    "sh",
                    "-c",
                    &t30(&format!("rping -c -a {ADDR} -p 7174 -C 3 -S 64 -v")),
                ],
            ),
        ],
        "rping_server" => vec![
            Role::new(
                "rping -s",
                tool_server(&t30(&format!("rping -s -a {ADDR} -p 7174 -C 3 -v")), 7174),
            )
            .ready("listening on"),
            Role::new(
                "client",
                ours(&[
                    "--connect",
                    ADDR,
                    "-p",
                    "7174",
                    "--proto",
                    "rping",
                    "-C",
                    "3",
                ]),
            ),
        ],
        "ucmatose" => vec![
            Role::new(
                "server",
                ours(&["--server", "--proto", "ucmatose", "-C", "10", "-S", "100"]),
            )
            .ready("listening on"),
            Role::new(
                "ucmatose",
                ["sh", "-c", &t30(&format!("ucmatose -s {ADDR} -p 7471"))],
            ),
        ],
        "rdma_client" => vec![
            Role::new(
                "server",
                ours(&["--server", "--proto", "sendrecv", "-C", "1", "-S", "16"]),
            )
            .ready("listening on"),
            Role::new(
                "rdma_client",
                ["sh", "-c", &t30(&format!("rdma_client -s {ADDR} -p 7471"))],
            ),
        ],
        "rdma_server" => vec![
            Role::new(
                "rdma_server",
                tool_server(&t30("rdma_server -p 7471"), 7471),
            )
            .ready("listening on"),
            Role::new(
                "client",
                ours(&[
                    "--connect",
                    ADDR,
                    "--proto",
                    "sendrecv",
                    "-C",
                    "1",
                    "-S",
                    "16",
                ]),
            ),
        ],
        _ => unreachable!(),
    };
    let t = run_roles(Topology::Loopback, roles);
    let suffix = cm_suffix(Some(name), &t.text(), Topology::Loopback);
    insta::with_settings!({ description => what }, {
        snap!("interop", suffix, t.redacted());
    });
    t.assert_success();
}

#[rstest]
#[case::no_role(&[], "--server")]
#[case::both_roles(&["--server", "--connect", "10.99.0.1"], "cannot be used with")]
#[case::unknown_case(&["--server", "--case", "typo"], "invalid value 'typo'")]
#[case::zero_timeout(&["--server", "--timeout", "0"], "invalid value '0'")]
#[case::tiny_size(&["--server", "-S", "8"], "invalid value '8'")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    refuses_command_line(EXE, args, message);
}

#[test]
fn not_an_address() {
    // Parsed before any device is opened: a clear message, exit status 1.
    let out = std::process::Command::new(EXE)
        .args(["--connect", "node-a"])
        .output()
        .expect("run the chapter");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"node-a\" is not an IP address"));
}
