//! Chapter 08's wire cases: the pair halves of `bad-rkey` and `rnr-retry-exceeded`, recorded
//! on the microVM pair (responder on node a, requester on node b). On one device the
//! responder's answers never leave rxe; here they cross the wire:
//!
//! * `bad-rkey`: one RDMA_WRITE_ONLY, answered by an ACKNOWLEDGE whose AETH says NAK
//!   remote-access-error, and nothing after it;
//! * `rnr-retry-exceeded`: the same SEND three times (the first try and rnr_retry 2), each
//!   answered by an RNR NAK carrying the responder's min_rnr_timer (1: 0.01 ms).

use harness::Node;
use harness::testing::{Role, run_roles_traced, wire_lab};
use harness::wire::Dir;
use harness::wire::decode::AckKind;

const EXE: &str = env!("CARGO_BIN_EXE_ch08-failure-modes");

fn roles(case: &str) -> Vec<Role> {
    let server = wire_lab().server_addr().to_string();
    vec![
        Role::new("server", [EXE, case, "--serve"]).ready("listening on"),
        Role::new("client", [EXE, case, "--connect", &server]).on(Node::B),
    ]
}

#[test]
fn bad_rkey_on_the_wire() {
    let t = run_roles_traced(roles("bad-rkey"));
    t.transcript.assert_success();
    insta::assert_snapshot!("bad_rkey", t.redacted());
    let ladder = t.ladder();
    assert_eq!(
        t.ops(),
        ["a <- b RDMA_WRITE_ONLY", "a -> b ACKNOWLEDGE"],
        "{ladder}"
    );
    let nak = t.packets[1].aeth.expect("an AETH").kind();
    assert_eq!(
        nak,
        AckKind::Nak { code: 2 },
        "remote access error: {ladder}"
    );
    assert_eq!(
        t.packets[1].psn, t.packets[0].psn,
        "it answers the WRITE's PSN"
    );
}

#[test]
fn rnr_on_the_wire() {
    let t = run_roles_traced(roles("rnr-retry-exceeded"));
    t.transcript.assert_success();
    insta::assert_snapshot!("rnr", t.redacted());
    let ladder = t.ladder();
    let sends: Vec<_> = t.packets.iter().filter(|p| p.dir == Dir::BtoA).collect();
    let naks: Vec<_> = t
        .packets
        .iter()
        .filter(|p| p.dir == Dir::AtoB)
        .map(|p| p.aeth.map(|a| a.kind()))
        .collect();
    assert_eq!(sends.len(), 3, "1 try + rnr_retry 2: {ladder}");
    assert!(
        sends.iter().all(|p| p.psn == sends[0].psn),
        "one PSN: {ladder}"
    );
    assert_eq!(
        naks,
        vec![Some(AckKind::RnrNak { timer: 1 }); 3],
        "each try answered by an RNR NAK with the server's timer: {ladder}"
    );
}
