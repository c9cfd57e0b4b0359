//! Chapter 13 end to end, on the microVM pair (server on node a, client on node b, the client
//! impairing what it sends), with the wire recorded:
//!
//! * `case`: each case's transcript (snapshots) and, on the wire, the repair it claims: a NAK
//!   (PSN sequence error) and a resend under loss, the same PSN sent retry_cnt + 1 times
//!   under total loss, RNR NAKs carrying the server's timer;
//! * every case leaves nothing behind: no qdisc on either node, no frozen node;
//! * `bad_command_line`: refused before any device is touched (runs on the host).

use harness::testing::{run_chapter_traced, wire_lab};
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
    insta::with_settings!({ snapshot_suffix => name }, {
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
#[case::no_role(&[], "--server")]
#[case::unknown_case(&["--server", "--case", "typo"], "invalid value 'typo'")]
#[case::zero_timeout(&["--server", "--timeout", "0"], "invalid value '0'")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    refuses_command_line(EXE, args, message);
}
