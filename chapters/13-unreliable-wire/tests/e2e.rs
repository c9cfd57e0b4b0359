//! Chapter 13 end to end, on the microVM pair (server on node a, client on node b, the client
//! impairing what it sends), with the wire recorded:
//!
//! * `case`: each case's transcript (snapshots) and, on the wire, the repair it claims: a NAK
//!   (PSN sequence error) and a resend under loss, the same PSN sent retry_cnt + 1 times
//!   under total loss, RNR NAKs carrying the server's timer;
//! * every case leaves nothing behind: no qdisc on either node, no frozen node;
//! * `peer`: the frozen and the killed peer (node a's VM stopped, or killed and restarted by
//!   the lab's host): their snapshots, the one SEND the wire shows four times, the late
//!   message that still arrives, and node a back as a fresh VM;
//! * `bad_command_line`: refused before any device is touched (runs on the host).

use harness::Node;
use harness::testbed::generation;
use harness::testing::{run_chapter, run_chapter_traced, wire_lab};
use harness::testing_cli::refuses_command_line;
use harness::wire::decode::AckKind;
use harness::wire::fault;
use rstest::rstest;

const PKG: &str = "ch13-unreliable-wire";
const EXE: &str = env!("CARGO_BIN_EXE_ch13-unreliable-wire");

#[rstest]
#[case::loss("loss")]
#[case::duplicate("duplicate")]
#[case::reorder("reorder")]
#[case::corrupt("corrupt")]
#[case::total_loss("total-loss")]
#[case::retry_forever("retry-forever")]
#[case::rnr("rnr")]
#[case::rnr_exceeded("rnr-exceeded")]
fn case(#[case] name: &str) {
    let t = run_chapter_traced(PKG, EXE, &["--case", name]);
    // Each node numbers its own QPs, so whether node a's and node b's QPN are equal depends on
    // how many QPs each node made before (which tests ran, in what order): the snapshot shows
    // `[QPN]` (chapter 12's test does the same).
    insta::with_settings!({ snapshot_suffix => name, filters => vec![(r"\[QPN#\d+\]", "[QPN]")] }, {
        insta::assert_snapshot!("case", t.transcript.redacted());
    });
    t.transcript.assert_success();
    let lab = wire_lab();
    assert!(
        !fault::any_active(&lab).unwrap(),
        "left active: {:?}",
        fault::status(&lab).unwrap()
    );
    let p = &t.packets;
    let naks = |want: fn(AckKind) -> bool| {
        p.iter()
            .filter(|x| x.aeth.map(|a| want(a.kind())).unwrap_or(false))
            .count()
    };
    // Sends from b (the client) of the same PSN more than once: resends.
    let resent = {
        let mut seen = std::collections::HashMap::new();
        for x in p
            .iter()
            .filter(|x| x.dir == harness::wire::Dir::BtoA && x.aeth.is_none())
        {
            *seen.entry(x.psn).or_insert(0) += 1;
        }
        seen.values().filter(|&&n| n > 1).count()
    };
    let ladder = t.ladder();
    match name {
        "loss" | "reorder" => {
            assert!(naks(|k| k == AckKind::Nak { code: 0 }) > 0, "{ladder}");
            assert!(resent > 0, "{ladder}");
        }
        "total-loss" => {
            // Node a's netdev sees nothing of b's lost packets; b sends retry_cnt + 1 = 4
            // copies, all lost before the wire: the capture must show none of them.
            assert!(
                p.iter()
                    .all(|x| x.dir != harness::wire::Dir::BtoA || x.opcode != 0x04),
                "{ladder}"
            );
        }
        "rnr" | "rnr-exceeded" => {
            assert!(
                naks(|k| k == AckKind::RnrNak { timer: 20 }) > 0,
                "an RNR NAK with the server's timer 20: {ladder}"
            );
        }
        _ => {}
    }
    println!("{ladder}");
}

#[rstest]
#[case::frozen_peer("frozen-peer")]
#[case::killed_peer("killed-peer")]
fn peer(#[case] name: &str) {
    let lab = wire_lab();
    let dir = fault::lab_dir(&lab).unwrap();
    let restarts = generation(&dir, Node::A);
    let t = run_chapter(PKG, EXE, &["--case", name]);
    insta::with_settings!({ snapshot_suffix => name }, {
        insta::assert_snapshot!("case", t.redacted());
    });
    t.assert_success();
    assert!(
        !fault::any_active(&lab).unwrap(),
        "left active: {:?}",
        fault::status(&lab).unwrap()
    );
    let client = &t.section("client").stdout;
    let server = &t.section("server").stdout;
    // The one SEND that was never answered: the first try and retry_cnt 3 resends.
    let sends = client
        .lines()
        .filter(|l| l.trim_start().starts_with("a <- b  SEND_ONLY"))
        .count();
    assert_eq!(sends, 4, "{client}");
    match name {
        "frozen-peer" => {
            assert!(
                server.contains("receive 2 completes with IBV_WC_SUCCESS"),
                "the late SEND arrives once node a is thawed: {server}"
            );
            assert_eq!(
                generation(&dir, Node::A),
                restarts,
                "a freeze restarts nothing"
            );
        }
        _ => {
            assert_eq!(
                generation(&dir, Node::A),
                restarts + 1,
                "node a restarted once"
            );
            assert!(
                server.contains("harness: node a was killed and restarted"),
                "{server}"
            );
            assert!(
                client.contains("a SEND on the reconnected QP completes with IBV_WC_SUCCESS"),
                "{client}"
            );
        }
    }
}

#[rstest]
#[case::no_role(&[], "--server")]
#[case::unknown_case(&["--server", "--case", "typo"], "invalid value 'typo'")]
#[case::zero_timeout(&["--server", "--timeout", "0"], "invalid value '0'")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    refuses_command_line(EXE, args, message);
}
