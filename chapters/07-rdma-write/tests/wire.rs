//! Chapter 07 on the wire: the run that `--trace` records, on the microVM
//! pair (server on node a, client on node b). The plain WRITE is one RDMA_WRITE_ONLY and its
//! ACK, and nothing else reaches the target's CPU; WRITE_WITH_IMM is one
//! RDMA_WRITE_ONLY_WITH_IMMEDIATE carrying the immediate, then its ACK.

use harness::testing::run_chapter_traced;

const PKG: &str = "ch07-rdma-write";
const EXE: &str = env!("CARGO_BIN_EXE_ch07-rdma-write");

#[test]
fn traced() {
    let t = run_chapter_traced(PKG, EXE, &[]);
    t.transcript.assert_success();
    insta::assert_snapshot!("traced", t.redacted());
    assert_eq!(
        t.ops(),
        [
            "a <- b RDMA_WRITE_ONLY",
            "a -> b ACKNOWLEDGE",
            "a <- b RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            "a -> b ACKNOWLEDGE"
        ],
        "{}",
        t.ladder()
    );
    assert_eq!(t.packets[2].imm, Some(0xc0ff_ee07));
    assert_eq!(t.packets[0].payload_len, 82);
}
