//! Chapter 09 end to end, in the pair topology: the pool server on node a, the client role
//! (its worker processes and the misbehaving client) on node b. Plus the command line's bad
//! input, which needs no device.

use harness::testing::{run_chapter, value_after};
use harness::testing_cli::refuses_command_line;
use rstest::rstest;

const EXE: &str = env!("CARGO_BIN_EXE_ch09-memory-pool");

/// The default run (2 clients, 8 blocks of 4 KiB) and two others; both are snapshots of the
/// redacted transcript, plus the facts the chapter is about, asserted one by one.
#[rstest]
#[case::default("default", &[], 8)]
#[case::three_clients("three_clients", &["--clients", "3", "--blocks", "7", "--block-size", "1024"], 7)]
// More blocks per worker (36) than it keeps in flight (32): the window must hold.
#[case::many_small_blocks("many_small_blocks", &["--blocks", "72", "--block-size", "64"], 72)]
fn pool_end_to_end(#[case] name: &str, #[case] args: &[&str], #[case] blocks: usize) {
    let t = run_chapter("ch09-memory-pool", EXE, args);
    insta::assert_snapshot!(name, t.redacted());
    t.assert_success();
    let server = &t.section("server").stdout;
    let client = &t.section("client").stdout;
    // Every block holds what its owner wrote, checked by the server in its own memory.
    assert!(
        server.contains(&format!(
            "{blocks} of {blocks} blocks hold exactly what their owner wrote"
        )),
        "{server}"
    );
    // The server's CQ stays empty: one-sided operations complete only at the requester.
    assert!(
        server.contains("our completion queue holds 0 completions"),
        "{server}"
    );
    assert!(
        server.contains("our completion queue still holds 0 completions"),
        "{server}"
    );
    // The forged rkey: the exact status, and both ends of that connection in ERR; the
    // well-behaved clients' connections are untouched.
    assert!(
        client.contains("completion status: IBV_WC_REM_ACCESS_ERR (10)"),
        "{client}"
    );
    assert!(client.contains("our QP is now ERR"), "{client}");
    assert!(server.contains("  misbehaving: ERR"), "{server}");
    assert!(server.contains("  client-0: RTS"), "{server}");
    // Out-of-range requests are refused before anything is posted.
    assert!(
        client.contains("work requests in flight: 0, completions on our CQ: 0"),
        "{client}"
    );
    assert_eq!(client.matches(": out of bounds: ").count(), 3, "{client}");
}

/// `--cm`: the same run with every connection made through rdma_cm. Its transcript must be
/// the default run's snapshot, line for line, apart from the lines that say how the
/// connection is made; those are listed here, each with the default line it replaces.
#[test]
fn pool_through_rdma_cm() {
    let t = run_chapter("ch09-memory-pool", EXE, &["--cm"]);
    t.assert_success();
    let cm = t.redacted();
    // The server listens on an rdma_cm port as well as on the TCP port of the go/done lines;
    // each worker's connection step says where its table came from. Nothing else differs:
    // QPNs, the table, every block's checksum, the forged rkey's status and every QP state
    // are the same.
    const DIFFERENT: [(&str, &str); 2] = [
        (
            "step 4: listening on rdma_cm port 18516 (the rxe netdev's address; the table goes \
             in the accept's private data) and TCP 0.0.0.0:18516 (the go/done lines) for 2 \
             clients, then 1 misbehaving client (one RC QP each)",
            "step 4: listening on 0.0.0.0:18516 for 2 clients, then 1 misbehaving client (one RC \
             QP each)",
        ),
        (
            "step 2: connect to the pool through rdma_cm; its block table comes in the accept's \
             private data",
            "step 2: connect to the pool and receive its block table",
        ),
    ];
    for (line, _) in DIFFERENT {
        assert!(cm.contains(line), "the --cm run lacks {line:?}:\n{cm}");
    }
    let as_default = DIFFERENT.iter().fold(cm.clone(), |text, (line, default)| {
        text.replace(line, default)
    });
    insta::assert_snapshot!("default", as_default);
}

/// `--case reconnect`: reconnect done right, by hand. Server 1 is killed (SIGKILL) mid-session;
/// the client's next WRITE completes in error and its QP is in ERR; ERR -> INIT is refused,
/// ERR -> RESET works; a fresh TCP exchange with server 2 (fresh PSNs on both sides) takes the
/// same QP through INIT, RTR and RTS again, and block 0 lands in server 2's pool.
#[test]
fn reconnect_by_hand() {
    let t = run_chapter("ch09-memory-pool", EXE, &["--case", "reconnect"]);
    // On the pair each node numbers its own QPs, so the client's QPN and a server's are equal
    // or not depending on what ran before on the lab: the snapshot shows `[QPN]`, and which
    // QPN is which is asserted on the raw text below.
    insta::with_settings!({ filters => vec![(r"\[QPN#\d+\]", "[QPN]")] }, {
        insta::assert_snapshot!("reconnect", t.redacted());
    });
    t.assert_success();
    let (s, c) = (&t.section("server").stdout, &t.section("client").stdout);
    assert!(
        s.contains("supervisor: server 1 was killed by SIGKILL (9)"),
        "{s}"
    );
    assert!(
        c.contains("completion status: IBV_WC_RETRY_EXC_ERR (12)"),
        "{c}"
    );
    assert!(c.contains("our QP is now ERR"), "{c}");
    assert!(
        c.contains("ibv_modify_qp(ERR -> INIT) is refused: EINVAL (22)"),
        "{c}"
    );
    assert!(
        c.contains("ibv_modify_qp(ERR -> RESET): ok, the QP is RESET"),
        "{c}"
    );
    let check = s
        .lines()
        .find(|l| l.starts_with("step 5: server 2: block 0 holds \"block 0 by client 0\""))
        .unwrap_or_else(|| panic!("server 2 did not check block 0:\n{s}"));
    assert!(check.ends_with(" ok"), "{s}");
    // The same client QP both times; a new server QP; fresh PSNs on both sides. Each
    // server's line: "our qpn=Q psn=P, the client's qpn=Q psn=P".
    let ours = value_after(c, "one QP for both connections: qpn=");
    assert_eq!(ours, value_after(c, "the same QP: qpn="), "{c}");
    let line = |n: &str| {
        s.lines()
            .find(|l| l.contains(&format!("server {n}: connected by hand")))
            .unwrap_or_else(|| panic!("no server {n} connection in\n{s}"))
    };
    let (l1, l2) = (line("1"), line("2"));
    assert_eq!(value_after(l1, "the client's qpn="), ours, "{s}");
    assert_eq!(value_after(l2, "the client's qpn="), ours, "{s}");
    assert_ne!(
        value_after(l1, "our qpn="),
        value_after(l2, "our qpn="),
        "{s}"
    );
    assert_ne!(value_after(l1, " psn="), value_after(l2, " psn="), "{s}");
    assert_ne!(l1.rsplit("psn=").next(), l2.rsplit("psn=").next(), "{s}");
}

/// Bad command lines: a clear message and exit status 2, never a panic. Runs on the host.
#[rstest]
#[case::no_role(&[], "--connect <HOST>")]
#[case::zero_clients(&["--server", "--clients", "0"], "--clients <CLIENTS>")]
#[case::too_few_blocks(&["--server", "--clients", "3", "--blocks", "2"], "every client needs at least one block")]
#[case::odd_block_size(&["--server", "--block-size", "100"], "is not a multiple of 64")]
#[case::too_big(&["--server", "--blocks", "4096", "--block-size", "1048576"], "the pool is limited to 64 MiB")]
#[case::both_roles(&["--server", "--connect", "10.77.0.1"], "cannot be used with")]
#[case::bad_index(&["--connect", "10.77.0.1", "--client-index", "5"], "--client-index 5 is out of range")]
#[case::not_a_number(&["--server", "--blocks", "many"], "invalid value 'many'")]
#[case::case_and_cm(&["--server", "--case", "reconnect", "--cm"], "cannot be used with")]
#[case::unknown_case(&["--server", "--case", "nope"], "invalid value 'nope'")]
#[case::cm_needs_an_address(&["--connect", "pool.example", "--cm"], "--cm needs the server's IP address")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    refuses_command_line(EXE, args, message);
}
