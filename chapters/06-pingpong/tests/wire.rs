//! Chapter 06 on the wire, on the microVM pair (server on node a, client on node b): one
//! round trip of 4096 bytes at path MTU 1024. Each SEND is split by the path MTU into
//! SEND_FIRST, SEND_MIDDLE, SEND_MIDDLE, SEND_LAST (one buffer, one SGE: the split is the
//! MTU's), the LAST asks for an acknowledgement, and one ACK answers the whole message.

use harness::testing::run_chapter_traced;

const PKG: &str = "ch06-pingpong";
const EXE: &str = env!("CARGO_BIN_EXE_ch06-pingpong");

#[test]
fn traced() {
    let t = run_chapter_traced(PKG, EXE, &["-n", "1"]);
    t.transcript.assert_success();
    insta::assert_snapshot!("traced", t.redacted());
    let one_way = [
        "SEND_FIRST",
        "SEND_MIDDLE",
        "SEND_MIDDLE",
        "SEND_LAST",
        "ACKNOWLEDGE",
    ];
    let ops = t.ops();
    assert_eq!(ops.len(), 10, "{}", t.ladder());
    for (i, want) in one_way.iter().enumerate() {
        assert!(
            ops[i].ends_with(want) && ops[i + 5].ends_with(want),
            "{}",
            t.ladder()
        );
    }
    assert!(
        t.packets
            .iter()
            .filter(|p| p.opcode != 0x11)
            .all(|p| p.payload_len == 1024)
    );
}
