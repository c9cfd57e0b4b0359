//! Chapter 12 on the wire: its default run recorded on the microVM pair (server on node a,
//! client on node b). rdma_cm connects with three MADs to QP1, ConnectRequest from the
//! client, ConnectReply, ReadyToUse; the WRITE and the READ go to the QPN the reply carried;
//! DisconnectRequest and DisconnectReply end it. No TCP side channel carries a QPN or a PSN:
//! the CM messages do.

use course::kernel::{KernelVersion, RxeChange};
use harness::Topology;
use harness::testing::{lab_kernel, run_chapter_traced};
use harness::wire::Dir;
use harness::wire::decode::cm_attr_name;

const PKG: &str = "ch12-connection-manager";
const EXE: &str = env!("CARGO_BIN_EXE_ch12-connection-manager");

#[test]
fn traced() {
    let t = run_chapter_traced(PKG, EXE, &[]);
    t.transcript.assert_success();
    // What rdma_cm sets on the QPs changed in Linux 6.2 (course::kernel; tests/e2e.rs has the
    // same rule): from 6.2 on this run has its own snapshot, `wire__traced@linux-6.2.snap`.
    let release = lab_kernel(Topology::Pair);
    let k = KernelVersion::parse(&release).unwrap_or_else(|| panic!("kernel {release:?}"));
    let changes = [RxeChange::CmaPacketLifetime16, RxeChange::CmFlushAccess];
    match RxeChange::newest_on(&changes, k) {
        Some(v) => insta::with_settings!({ snapshot_suffix => format!("linux-{v}") }, {
            insta::assert_snapshot!("traced", t.redacted());
        }),
        None => insta::assert_snapshot!("traced", t.redacted()),
    }
    let ladder = t.ladder();
    let cm: Vec<(Dir, &str)> = t
        .packets
        .iter()
        .filter_map(|p| p.mad.map(|m| (p.dir, cm_attr_name(m.attr_id))))
        .collect();
    assert_eq!(
        cm,
        [
            (Dir::BtoA, "ConnectRequest"),
            (Dir::AtoB, "ConnectReply"),
            (Dir::BtoA, "ReadyToUse"),
            (Dir::BtoA, "DisconnectRequest"),
            (Dir::AtoB, "DisconnectReply"),
        ],
        "{ladder}"
    );
    let rep = t.packets[1].mad.expect("the reply");
    let data: Vec<_> = t.packets.iter().filter(|p| p.mad.is_none()).collect();
    assert!(!data.is_empty(), "{ladder}");
    // The client's requests go to the QP the reply named; the server's answers to the one
    // the request named.
    let req = t.packets[0].mad.expect("the request");
    for p in &data {
        let want = if p.dir == Dir::BtoA { rep.qpn } else { req.qpn };
        assert_eq!(Some(p.dest_qp), want, "{ladder}");
    }
    assert_eq!(Some(data[0].psn), rep.start_psn, "{ladder}");
}
