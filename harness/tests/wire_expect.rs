//! The wire assertions (`harness::wire::expect`) on the decoder's committed captures, host
//! only: opcode sequences, counts, NAKs and retransmitted PSNs, and the side-by-side failure.

use harness::wire::decode_pcap;
use harness::wire::expect::{Nak, Trace};
use std::path::Path;

fn trace(name: &str) -> Trace {
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/wire")
        .join(name);
    Trace::new(decode_pcap(&std::fs::read(f).expect("fixture")).expect("decode")).rc()
}

const SEND_4K: [&str; 5] = [
    "SEND_FIRST",
    "SEND_MIDDLE",
    "SEND_MIDDLE",
    "SEND_LAST",
    "ACKNOWLEDGE",
];

#[test]
fn a_4k_send_at_mtu_1024_is_first_two_middles_last_and_one_ack_each_way() {
    let t = trace("06-send-4k-mtu1024.pcap");
    let both: Vec<&str> = SEND_4K.iter().chain(SEND_4K.iter()).copied().collect();
    t.assert_opcodes(&both);
    t.assert_count("SEND_MIDDLE", 4);
    t.assert_count("ACKNOWLEDGE", 2);
    assert_eq!(t.counts()["SEND_FIRST"], 2);
    t.assert_no_naks();
    assert!(t.retransmitted_psns().is_empty());
}

#[test]
fn a_wrong_sequence_fails_with_the_first_difference_and_both_ladders() {
    let t = trace("06-send-4k-mtu1024.pcap");
    let want = ["SEND_ONLY", "ACKNOWLEDGE"];
    let text = t.check_opcodes(&want).expect("differs");
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        "the trace has 10 packets, 2 expected; the first difference is packet 1 \
         (expected SEND_ONLY, got SEND_FIRST)"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[1].starts_with("  expected") && lines[1].ends_with("| actual"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("! SEND_ONLY") && lines[2].contains("| a <- b  SEND_FIRST"),
        "{text}"
    );
    assert!(
        lines[3].starts_with("  ACKNOWLEDGE") || lines[3].starts_with("! ACKNOWLEDGE"),
        "{text}"
    );
    assert_eq!(lines.len(), 2 + 10, "{text}");
    let p = std::panic::catch_unwind(|| t.assert_opcodes(&want)).unwrap_err();
    assert_eq!(*p.downcast::<String>().unwrap(), text);
    assert!(std::panic::catch_unwind(|| t.assert_count("SEND_LAST", 1)).is_err());
}

#[test]
fn the_naks_of_a_bad_read_and_of_rnr() {
    let t = trace("09-read-and-nak.pcap");
    let naks = t.naks();
    assert_eq!(naks.len(), 1, "{}", t.ladder());
    assert_eq!(naks[0].name, "remote-access-error", "{}", t.ladder());
    assert!(std::panic::catch_unwind(|| t.assert_no_naks()).is_err());
    let t = trace("13-rnr.pcap");
    let rnr: Vec<Nak> = t.naks();
    assert!(
        !rnr.is_empty() && rnr.iter().all(|n| n.name == "rnr-nak"),
        "{rnr:?}"
    );
    // Each RNR NAK makes the requester send the refused SEND again, with its PSN.
    let again = t.retransmitted_psns();
    assert!(!again.is_empty(), "{}", t.ladder());
    for n in &rnr {
        assert!(
            again.contains(&n.psn),
            "{:#x} not resent\n{}",
            n.psn,
            t.ladder()
        );
    }
}
