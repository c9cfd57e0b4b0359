//! Chapter 06 end to end, on a real rxe device (the loopback lab: both processes on `rxe0`,
//! the TCP exchange over 127.0.0.1).
//!
//! * `chapter`: the run `cargo lab run 06` does (our server, our client), busy polling and
//!   with `-e` (events);
//! * `with_ibv_rc_pingpong`: rdma-core's C tool as the client of our server and as the server
//!   of our client, with several sizes and iteration counts;
//! * `bad_flow_*`: a peer that speaks garbage, and no `-g` on RoCE: clear errors, non-zero
//!   exits, no hang;
//! * `bad_command_line`: refused before any device is touched (runs on the host).

use harness::Topology;
use harness::testing::{Role, Transcript, run_chapter, run_roles};
use harness::testing_cli::refuses_command_line;
use rstest::rstest;

const PKG: &str = "ch06-pingpong";
const EXE: &str = env!("CARGO_BIN_EXE_ch06-pingpong");
/// rdma-core's example, from the host's `ibverbs-utils` (the lab sees the host's /usr).
const C_TOOL: &str = "ibv_rc_pingpong";

/// The facts every successful ping-pong transcript must show, whoever the two ends are.
fn assert_pingpong(t: &Transcript, size: u32, iters: u32) {
    t.assert_success();
    let bytes = u64::from(size) * u64::from(iters) * 2;
    for s in &t.sections {
        for want in [
            "  local address:  LID 0x0000, QPN ".to_string(),
            "  remote address: LID 0x0000, QPN ".to_string(),
            format!("{bytes} bytes in "),
            format!("{iters} iters in "),
        ] {
            assert!(
                s.stdout.contains(&want),
                "{}: no {want:?} in\n{}",
                s.name,
                t.text()
            );
        }
        assert!(s.stdout.contains("GID ::ffff:10.99.0.1"), "{}", t.text());
    }
    // Each side's remote QPN is the other side's local QPN.
    let qpns = |s: &harness::testing::Section, side: &str| -> String {
        let line = s
            .stdout
            .lines()
            .find(|l| l.contains(side))
            .unwrap_or_else(|| panic!("no {side} line:\n{}", t.text()));
        line.split("QPN ").nth(1).unwrap_or("")[..8].to_string()
    };
    let (a, b) = (&t.sections[0], &t.sections[1]);
    assert_eq!(qpns(a, "local address"), qpns(b, "remote address"));
    assert_eq!(qpns(b, "local address"), qpns(a, "remote address"));
}

#[rstest]
#[case::busy_polling(&[])]
// Arguments replace the chapter's defaults (`-n 100`), as after `cargo lab run 06 --`.
#[case::events(&["-n", "100", "-e"])]
fn chapter(#[case] extra: &[&str]) {
    let t = run_chapter(PKG, EXE, extra);
    let suffix = if extra.is_empty() {
        "busy_polling"
    } else {
        "events"
    };
    insta::with_settings!({ snapshot_suffix => suffix }, {
        insta::assert_snapshot!("chapter", t.redacted());
    });
    assert_pingpong(&t, 4096, 100);
    for s in &t.sections {
        assert!(
            s.stdout
                .contains("100 sends and 100 receives completed, all IBV_WC_SUCCESS")
        );
        assert!(s.stderr.is_empty(), "{}", t.text());
    }
}

/// Who runs which end.
#[derive(Debug, Clone, Copy)]
enum Ends {
    /// Our server, `ibv_rc_pingpong` as the client.
    OursServesC,
    /// `ibv_rc_pingpong` as the server, our client.
    CServesOurs,
}

#[rstest]
#[case::ours_serves_c_4096x100(Ends::OursServesC, 4096, 100)]
#[case::ours_serves_c_1x500_inline(Ends::OursServesC, 1, 500)]
#[case::ours_serves_c_10000x20_events(Ends::OursServesC, 10000, 20)]
#[case::c_serves_ours_4096x100(Ends::CServesOurs, 4096, 100)]
#[case::c_serves_ours_1x500_inline(Ends::CServesOurs, 1, 500)]
#[case::c_serves_ours_10000x20_events(Ends::CServesOurs, 10000, 20)]
fn with_ibv_rc_pingpong(#[case] ends: Ends, #[case] size: u32, #[case] iters: u32) {
    let (s, n) = (size.to_string(), iters.to_string());
    let mut args = vec!["-g", "1", "-s", &s, "-n", &n];
    if size == 10000 {
        args.push("-e"); // the last case of each direction sleeps on events, on both ends
    }
    let ours = |host: Option<&str>| -> Vec<String> {
        std::iter::once(EXE)
            .chain(args.iter().copied())
            .chain(host)
            .map(String::from)
            .collect()
    };
    let c_tool = |host: Option<&str>| -> Vec<String> {
        // The C tool's stdout is a pipe here, so printf would buffer "local address:" until
        // exit; stdbuf makes it line-buffered so the readiness line arrives when printed.
        ["stdbuf", "-oL", C_TOOL]
            .into_iter()
            .chain(args.iter().copied())
            .chain(host)
            .map(String::from)
            .collect()
    };
    let roles = match ends {
        Ends::OursServesC => vec![
            Role::new("server (ch06-pingpong)", ours(None)).ready("local address:"),
            Role::new("client (ibv_rc_pingpong)", c_tool(Some("127.0.0.1"))),
        ],
        // The C server prints "local address:" *before* it listens: our client retries its
        // connect until its deadline, so starting it on that line is safe.
        Ends::CServesOurs => vec![
            Role::new("server (ibv_rc_pingpong)", c_tool(None)).ready("local address:"),
            Role::new("client (ch06-pingpong)", ours(Some("127.0.0.1"))),
        ],
    };
    let t = run_roles(Topology::Loopback, roles);
    let name = format!("{ends:?}_{size}x{iters}");
    insta::with_settings!({ snapshot_suffix => name }, {
        insta::assert_snapshot!("with_ibv_rc_pingpong", t.redacted());
    });
    assert_pingpong(&t, size, iters);
}

/// 52 bytes (the size of a real address message) that are not one: no ':' separators.
const GARBAGE: &str = "this is not an ibv_rc_pingpong address, not at all!!";

#[test]
fn bad_flow_server_sends_garbage() {
    assert_eq!(GARBAGE.len(), 52);
    // A fake server: busybox nc answers our client's address with 52 bytes of garbage (what
    // it receives, our client's address with its random PSN, goes to /dev/null).
    let fake = format!(
        "echo 'fake server: listening'; printf '%s' '{GARBAGE}' | busybox nc -l -p 18515 >/dev/null"
    );
    let t = run_roles(
        Topology::Loopback,
        vec![
            Role::new("fake server", ["sh", "-c", &fake]).ready("listening"),
            Role::new(
                "client",
                [EXE, "-g", "1", "-n", "10", "--timeout", "20", "127.0.0.1"],
            ),
        ],
    );
    insta::assert_snapshot!("bad_flow_server_sends_garbage", t.redacted());
    let c = t.section("client");
    assert_eq!(c.exit_code, 1, "{}", t.text());
    assert!(
        c.stderr.contains(
            "error: Couldn't read/write remote address: malformed ibv_rc_pingpong address"
        ),
        "{}",
        t.text()
    );
}

#[test]
fn bad_flow_client_sends_garbage() {
    let fake = format!("printf '%s' '{GARBAGE}' | busybox nc 127.0.0.1 18515");
    let t = run_roles(
        Topology::Loopback,
        vec![
            Role::new("server", [EXE, "-g", "1", "-n", "10", "--timeout", "20"])
                .ready("local address:"),
            Role::new("fake client", ["sh", "-c", &fake]),
        ],
    );
    insta::assert_snapshot!("bad_flow_client_sends_garbage", t.redacted());
    let s = t.section("server");
    assert_eq!(s.exit_code, 1, "{}", t.text());
    assert!(
        s.stderr
            .contains("error: Couldn't read remote address: malformed ibv_rc_pingpong address"),
        "{}",
        t.text()
    );
}

/// No `-g` on RoCE: like the C tool, the QP cannot reach RTR (EINVAL). The server fails
/// before answering, so the client learns it from the closed connection; nobody hangs.
#[test]
fn bad_flow_no_gid_on_roce() {
    let t = run_roles(
        Topology::Loopback,
        vec![
            Role::new("server", [EXE, "-n", "10", "--timeout", "20"]).ready("local address:"),
            Role::new("client", [EXE, "-n", "10", "--timeout", "20", "127.0.0.1"]),
        ],
    );
    insta::assert_snapshot!("bad_flow_no_gid_on_roce", t.redacted());
    let (s, c) = (t.section("server"), t.section("client"));
    assert_eq!((s.exit_code, c.exit_code), (1, 1), "{}", t.text());
    assert!(s.stderr.contains("note: no GID index (-g)"), "{}", t.text());
    assert!(
        s.stderr.contains("Failed to modify QP to RTR") && s.stderr.contains("EINVAL (22)"),
        "{}",
        t.text()
    );
}

/// Bad flags are refused with a message and exit status 2 before any device is opened, so
/// this runs on the host, without a lab.
#[rstest]
#[case::mtu_not_a_size(&["-m", "1000"], "the MTU must be 256, 512, 1024, 2048 or 4096, got 1000")]
#[case::size_not_a_number(&["-s", "big"], "\"big\" is not a number")]
#[case::zero_iters(&["-n", "0"], "the number of iterations must be between 1")]
#[case::port_too_large(&["-p", "70000"], "the TCP port must be between 1 and 65535, got 70000")]
#[case::two_hosts(&["host-a", "host-b"], "unexpected argument 'host-b'")]
#[case::unknown_flag(&["-x"], "unexpected argument '-x'")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    let stderr = refuses_command_line(EXE, args, message);
    assert!(
        stderr.contains("Usage") || stderr.contains("--help"),
        "{stderr}"
    );
}
