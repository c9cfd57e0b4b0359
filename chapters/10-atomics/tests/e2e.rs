//! Chapter 10 end to end, in the pair topology (pool server on node a, the clients on node
//! b), plus the command line's bad input, which needs no device.

use harness::testing::run_chapter;
use harness::testing_cli::refuses_command_line;
use rstest::rstest;

const EXE: &str = env!("CARGO_BIN_EXE_ch10-atomics");

/// The runs: the default (2 clients x 20) and 3 clients x 10. The snapshot is the redacted
/// transcript; the facts are asserted one by one.
///
/// One number is not reproducible by nature: how many unguarded updates were lost (it depends
/// on how the clients' READs and WRITEs interleave). The snapshot masks exactly that line's
/// two numbers (`observed [N] (lost [N] updates)`); the test asserts that the number is > 0.
#[rstest]
#[case::default("default", &[], 2, 20)]
#[case::three_clients("three_clients", &["--clients", "3", "--iters", "10"], 3, 10)]
fn atomics_end_to_end(#[case] name: &str, #[case] args: &[&str], #[case] k: u64, #[case] m: u64) {
    let t = run_chapter("ch10-atomics", EXE, args);
    insta::with_settings!({filters => vec![
        (r"observed \d+ \(lost \d+ updates\)", "observed [N] (lost [N] updates)"),
    ]}, {
        insta::assert_snapshot!(name, t.redacted());
    });
    t.assert_success();
    let server = &t.section("server").stdout;
    let client = &t.section("client").stdout;
    let total = k * m;
    // The counter is exact, and every old value came back exactly once.
    assert!(
        server.contains(&format!(
            "expected {k} x {m} = {total}, observed {total}: exact"
        )),
        "{server}"
    );
    assert!(
        server.contains(&format!("each of 0..{} exactly once: yes", total - 1)),
        "{server}"
    );
    // The lock: nothing lost, and it is free at the end.
    assert!(
        server.contains(&format!(
            "total expected {total}, observed {total}; per client"
        )),
        "{server}"
    );
    assert!(server.contains("no update lost"), "{server}");
    assert!(
        server.contains("lock word:                  0 (free)"),
        "{server}"
    );
    // Without the lock, updates are lost: parse the number.
    let line = server
        .lines()
        .find(|l| l.contains("unguarded record (no lock)"))
        .expect("the unguarded line");
    let observed: u64 = line
        .split("observed ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no observed total in {line:?}"));
    assert!(observed < total, "no update was lost: {line}");
    assert!(observed >= 1, "nothing survived: {line}");
    // Alignment: the exact errno, at post time, and the QP unharmed.
    assert_eq!(
        client
            .matches("ibv_post_send failed at work request #0: EINVAL (22)")
            .count(),
        2,
        "{client}"
    );
    assert!(
        client.contains("our QP is still RTS, our CQ is empty"),
        "{client}"
    );
}

/// Bad command lines: a clear message and exit status 2, never a panic. Runs on the host.
#[rstest]
#[case::no_role(&[], "--connect <HOST>")]
#[case::zero_clients(&["--server", "--clients", "0"], "--clients <CLIENTS>")]
#[case::zero_iters(&["--server", "--iters", "0"], "--iters <ITERS>")]
#[case::too_many_clients(&["--server", "--clients", "17"], "17 is not in 1..=16")]
#[case::both_roles(&["--server", "--connect", "10.77.0.1"], "cannot be used with")]
#[case::bad_index(&["--connect", "10.77.0.1", "--client-index", "2"], "--client-index 2 is out of range")]
#[case::negative_delay(&["--server", "--delay-us=-1"], "invalid value '-1' for '--delay-us <DELAY_US>'")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    refuses_command_line(EXE, args, message);
}
