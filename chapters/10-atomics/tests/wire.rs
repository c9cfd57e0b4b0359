//! Chapter 10 on the wire (one client, two iterations of each phase): every FETCH_ADD and
//! CMP_SWAP is one packet answered by one ATOMIC_ACKNOWLEDGE carrying the value the target
//! held before (`orig=`): the counter's 0, then 1; the lock's CAS 0 -> 1 finds 0 (taken),
//! the unlock's 1 -> 0 finds 1.

use harness::testing::run_chapter_traced;

const PKG: &str = "ch10-atomics";
const EXE: &str = env!("CARGO_BIN_EXE_ch10-atomics");

#[test]
fn traced() {
    let t = run_chapter_traced(PKG, EXE, &["--clients", "1", "--iters", "2"]);
    t.transcript.assert_success();
    insta::assert_snapshot!("traced", t.redacted());
    let p = &t.packets;
    for (i, x) in p.iter().enumerate() {
        if x.opcode == 0x13 || x.opcode == 0x14 {
            let ack = &p[i + 1];
            assert_eq!(ack.opcode, 0x12, "{}", t.ladder());
            assert_eq!(ack.psn, x.psn, "{}", t.ladder());
        }
    }
    let orig: Vec<u64> = p
        .windows(2)
        .filter(|w| w[0].opcode == 0x14)
        .map(|w| w[1].orig.unwrap())
        .collect();
    // The client's two increments, then the misaligned client's one (on its own word).
    assert_eq!(orig, [0, 1, 0], "{}", t.ladder());
    assert!(p.iter().any(|x| x.opcode == 0x13), "{}", t.ladder());
}
