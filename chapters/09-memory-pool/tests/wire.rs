//! Chapter 09 on the wire (one client, one 4 KiB block): the client's WRITE of the block is
//! RDMA_WRITE_FIRST .. LAST and one ACK; its READ is one RDMA_READ_REQUEST answered by
//! RDMA_READ_RESPONSE_FIRST, MIDDLE, MIDDLE, LAST (FIRST and LAST carry an AETH); the
//! misbehaving client's forged rkey gets a NAK (remote access error) from the target's NIC.

use harness::testing::run_chapter_traced;
use harness::wire::decode::AckKind;

const PKG: &str = "ch09-memory-pool";
const EXE: &str = env!("CARGO_BIN_EXE_ch09-memory-pool");

#[test]
fn traced() {
    let t = run_chapter_traced(PKG, EXE, &["--clients", "1", "--blocks", "1"]);
    t.transcript.assert_success();
    insta::assert_snapshot!("traced", t.redacted());
    let ops = t.ops();
    let read = ops
        .iter()
        .position(|o| o.ends_with("RDMA_READ_REQUEST"))
        .expect("a READ");
    assert_eq!(
        ops[read..read + 5],
        [
            "a <- b RDMA_READ_REQUEST",
            "a -> b RDMA_READ_RESPONSE_FIRST",
            "a -> b RDMA_READ_RESPONSE_MIDDLE",
            "a -> b RDMA_READ_RESPONSE_MIDDLE",
            "a -> b RDMA_READ_RESPONSE_LAST"
        ],
        "{}",
        t.ladder()
    );
    let last = t.packets.last().unwrap();
    assert_eq!(
        last.aeth.map(|a| a.kind()),
        Some(AckKind::Nak { code: 2 }),
        "{}",
        t.ladder()
    );
}
