//! Case 9, `mtu-too-large`: a path MTU above what the link carries.
//!
//! The port's `active_mtu` (1024 on rxe over a 1500-byte Ethernet link) is the largest RoCE
//! payload per packet. `ibv_modify_qp` accepts a larger `path_mtu` without complaint, and
//! what happens next depends on the path:
//!
//! * on one device (loopback) rxe hands packets from QP to QP without the IP stack, so
//!   nothing enforces the MTU: 4096-byte packets "work";
//! * between two nodes the oversized packets never reach the wire. Before Linux 6.10: no
//!   error, no completion, the QP stays in RTS and retransmits forever, even with a finite
//!   retry_cnt, a silent hang. From 6.10 on (course::kernel): the SEND completes with
//!   `IBV_WC_WR_FLUSH_ERR` at once and the QP goes to ERR, a status that names no cause.
//!
//! The first half runs in the loopback lab; the second needs the pair topology:
//! `mtu-too-large --serve` on node a, `mtu-too-large --connect 10.77.0.1` on node b.

use std::time::{Duration, Instant};

use course::Outcome as Result;
use course::exchange::{Endpoint, Listener, OobStream};
use course::kernel::RxeChange;
use course::show;
use lab::*;

use crate::report::Report;
use crate::rig::{
    FOREVER_WINDOW, PSN_A, PSN_B, Pair, PairCfg, QUIET_WINDOW, Rig, drain, must_wc, secs, timed_wc,
};

/// The TCP port of this chapter's exchange (`--port` changes it).
pub const DEFAULT_PORT: u16 = 18508;
/// How long either side waits for the other over TCP.
const OOB_DEADLINE: Duration = Duration::from_secs(60);

pub fn run_loopback(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let port = rig.ctx.query_port(1)?;
    r.step(format!(
        "{} port 1: active_mtu {} (the netdev's 1500 minus headers, rounded down), max_mtu {}",
        rig.ctx.name(),
        port.active_mtu.bytes(),
        port.max_mtu.bytes()
    ));
    let cfg = PairCfg {
        mtu_unclamped: Some(Mtu::Mtu4096),
        ..PairCfg::default()
    };
    let mut p = Pair::connect(&rig, cfg)?;
    r.step(format!(
        "connect {} with path_mtu=4096 on both (RTR accepts it)",
        p.describe()
    ));
    let mtu = p.a.query()?.path_mtu.map_or(0, |m| m.bytes());
    r.check("A's path MTU (ibv_query_qp)", mtu, 4096);
    let mr_b = rig.pd.reg_mr(8192, AccessFlags::LOCAL_WRITE)?;
    let dst = [mr_b.sge(..)];
    p.b.post_recv_one(RecvWr::new(100, &dst))?;
    for (i, b) in p.mr_a.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    r.step("A SENDs 4096 bytes: one packet of 4096 bytes, four times the link's MTU");
    let src = [p.mr_a.sge(..)];
    p.a.post_send_one(SendWr::send(1, &src))?;
    let wc = must_wc(&p.cq_a, "A's SEND")?;
    r.status("A's completion", &wc, WcStatus::Success);
    let wc = must_wc(&p.cq_b, "B's RECV")?;
    r.status("B's RECV", &wc, WcStatus::Success);
    r.check("bytes received", wc.byte_len, 4096);
    let intact = mr_b.as_slice()[..4096] == p.mr_a.as_slice()[..];
    r.check("data intact", intact, true);
    r.say(
        "on one device the MTU is never enforced; across a wire it is: run the pair half \
         (mtu-too-large --serve on node a, --connect 10.77.0.1 on node b)",
    );
    r.fix(
        "use the port's active_mtu as path_mtu (lab's RtrAttr does by default; ibv_rc_pingpong's \
         -m must not exceed it), and on both ends",
    );
    r.hardware(
        "a NIC enforces the path MTU in hardware; one above the port's MTU is refused at RTR or \
         the oversized packets are dropped by the network, which ends in IBV_WC_RETRY_EXC_ERR \
         with a finite retry_cnt. rxe hangs silently instead (see the pair half).",
    );
    Ok(())
}

/// The two QPs each side uses: one with path MTU 4096 (the mistake), one with the port's
/// active MTU (the fix).
struct Qps {
    cq: CompletionQueue,
    big: QueuePair<state::Init>,
    ok: QueuePair<state::Init>,
}

fn qps(rig: &Rig) -> Result<Qps> {
    let cq = rig.ctx.create_cq(16, None)?;
    let big = rig.pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    let ok = rig.pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    Ok(Qps {
        big: big.to_init(&InitAttr::default())?,
        ok: ok.to_init(&InitAttr::default())?,
        cq,
    })
}

fn endpoint(rig: &Rig, name: &str, qpn: u32, psn: u32) -> Endpoint {
    Endpoint {
        name: name.into(),
        qpn,
        psn,
        gid: rig.gid.gid.raw(),
        ..Default::default()
    }
}

/// Brings both QPs up toward the peer's two endpoints (its "big" first, then its "ok").
fn bring_up(
    q: Qps,
    peer_big: &Endpoint,
    peer_ok: &Endpoint,
    my_psn: u32,
) -> Result<(CompletionQueue, QueuePair, QueuePair)> {
    let rts = RtsAttr::new(my_psn).timeout(8).retry_cnt(3);
    let big = q
        .big
        .to_rtr(
            &RtrAttr::new(peer_big.qpn, peer_big.psn, Gid(peer_big.gid))
                .path_mtu_unclamped(Mtu::Mtu4096),
        )?
        .to_rts(&rts)?;
    let ok =
        q.ok.to_rtr(&RtrAttr::new(peer_ok.qpn, peer_ok.psn, Gid(peer_ok.gid)))?
            .to_rts(&rts)?;
    Ok((q.cq, big, ok))
}

fn mtu_of(qp: &QueuePair) -> Result<u32> {
    Ok(qp.query()?.path_mtu.map_or(0, |m| m.bytes()))
}

/// Node a: the responder. Posts receives, answers the exchange, reports what arrived.
pub fn serve(port: u16) -> Result<bool> {
    let mut r = Report::new();
    let rig = Rig::open()?;
    let q = qps(&rig)?;
    r.step(format!(
        "server on {} {}: QP big {} (path_mtu 4096), QP ok {} (path_mtu = active_mtu)",
        rig.ctx.name(),
        show::gid(&rig.gid.gid.raw()),
        show::qpn(q.big.qp_num()),
        show::qpn(q.ok.qp_num())
    ));
    let mr = rig.pd.reg_mr(3 * 4096, AccessFlags::LOCAL_WRITE)?;
    let slots: Vec<[Sge; 1]> = (0..3).map(|i| [mr.sge(i * 4096..(i + 1) * 4096)]).collect();
    q.big
        .post_recv(&mut [RecvWr::new(100, &slots[0]), RecvWr::new(101, &slots[1])])?;
    q.ok.post_recv_one(RecvWr::new(200, &slots[2]))?;
    r.step("post 2 RECVs of 4096 bytes on QP big and 1 on QP ok");
    let mine_big = endpoint(&rig, "server big", q.big.qp_num(), PSN_A);
    let mine_ok = endpoint(&rig, "server ok", q.ok.qp_num(), PSN_A);
    let listener = Listener::bind(port)?;
    println!("listening on port {port}");
    let mut oob = listener.accept(OOB_DEADLINE)?;
    let peer_big = oob.recv_msg(OOB_DEADLINE)?;
    let peer_ok = oob.recv_msg(OOB_DEADLINE)?;
    // Only the server's QP numbers are printed (here, and by the client as "server ..."):
    // each node numbers its QPs on its own, so the client's may or may not equal ours.
    r.step(format!(
        "client {} sent the endpoints of its QP big and QP ok",
        show::gid(&peer_big.gid)
    ));
    let (cq, big, ok) = bring_up(q, &peer_big, &peer_ok, PSN_A)?;
    oob.send_msg(&mine_big, OOB_DEADLINE)?;
    oob.send_msg(&mine_ok, OOB_DEADLINE)?;
    r.step("both QPs in RTS; endpoints sent; waiting for the client's \"done\"");
    oob.expect_line("done", OOB_DEADLINE)?;
    r.step("what arrived");
    let got = drain(&cq, Duration::ZERO)?;
    let seen: Vec<String> = got
        .iter()
        .map(|wc| format!("wr_id={} {} byte_len={}", wc.wr_id, wc.status, wc.byte_len))
        .collect();
    r.check(
        "receive completions",
        seen.join(", "),
        "wr_id=100 IBV_WC_SUCCESS (0) byte_len=1024, wr_id=200 IBV_WC_SUCCESS (0) byte_len=4096"
            .to_string(),
    );
    r.say("the 4096-byte SEND on QP big never arrived: its RECV (wr_id 101) is still posted");
    let (_, _) = (big, ok);
    finish(&r, "mtu-too-large --serve")
}

/// Node b: the requester. Sends 1024 and 4096 bytes over path MTU 4096, then 4096 over the
/// active MTU.
pub fn connect(addr: &str, port: u16) -> Result<bool> {
    let mut r = Report::new();
    let rig = Rig::open()?;
    let q = qps(&rig)?;
    let active = rig.ctx.query_port(1)?.active_mtu.bytes();
    r.step(format!(
        "client on {} {} (active_mtu {}): QP big (path_mtu 4096) and QP ok (path_mtu = \
         active_mtu)",
        rig.ctx.name(),
        show::gid(&rig.gid.gid.raw()),
        active,
    ));
    let mine_big = endpoint(&rig, "client big", q.big.qp_num(), PSN_B);
    let mine_ok = endpoint(&rig, "client ok", q.ok.qp_num(), PSN_B);
    let mut oob = OobStream::connect(addr, port, OOB_DEADLINE)?;
    oob.send_msg(&mine_big, OOB_DEADLINE)?;
    oob.send_msg(&mine_ok, OOB_DEADLINE)?;
    let peer_big = oob.recv_msg(OOB_DEADLINE)?;
    let peer_ok = oob.recv_msg(OOB_DEADLINE)?;
    r.step(format!(
        "server {}: QP big {}, QP ok {}",
        show::gid(&peer_big.gid),
        show::qpn(peer_big.qpn),
        show::qpn(peer_ok.qpn)
    ));
    let (cq, big, ok) = bring_up(q, &peer_big, &peer_ok, PSN_B)?;
    r.step("bring both QPs up (timeout=8 retry_cnt=3, finite)");
    r.check("QP big path MTU", mtu_of(&big)?, 4096);
    r.check("QP ok path MTU", mtu_of(&ok)?, active);

    let mut mr = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    mr.as_mut_slice().fill(0x42);
    let small = [mr.sge(0..1024)];
    let full = [mr.sge(..)];

    r.step("QP big SENDs 1024 bytes (one 1024-byte packet: fits the 1500-byte link)");
    big.post_send_one(SendWr::send(1, &small))?;
    let wc = must_wc(&cq, "the 1024-byte SEND")?;
    r.status("completion", &wc, WcStatus::Success);

    r.step("QP big SENDs 4096 bytes (one 4096-byte packet: larger than the link)");
    // What rxe does with a packet the IP stack will not send changed (course::kernel::RxeChange):
    // a silent hang before Linux 6.10, a failed WR from 6.10 on.
    let fails = r.record(RxeChange::XmitErrorFailsWr)?;
    big.post_send_one(SendWr::send(2, &full))?;
    let big = if fails {
        let wc = must_wc(&cq, "the 4096-byte SEND")?;
        r.status("completion", &wc, WcStatus::WrFlushErr);
        r.check("QP big state", big.state()?, QpState::Err);
        r.step("QP big is in ERR already: the failed SEND was its only completion");
        r.check("more completions", drain(&cq, QUIET_WINDOW)?.len(), 0);
        // Nothing left to stop: the QP is destroyed here, in ERR.
        None
    } else {
        match timed_wc(&cq, Instant::now(), FOREVER_WINDOW)? {
            None => r.say(format!(
                "no completion within {} (the packet is dropped before the wire; rxe \
                 retransmits forever, whatever retry_cnt says)",
                secs(FOREVER_WINDOW)
            )),
            Some((wc, _)) => r.mismatch(format!("a completion arrived: {}", wc.status)),
        }
        r.check("QP big state", big.state()?, QpState::Rts);
        r.step("stop it: move QP big to ERR; the stuck SEND is flushed");
        let big = big.to_error()?;
        let wc = must_wc(&cq, "the stuck SEND")?;
        r.status("completion", &wc, WcStatus::WrFlushErr);
        r.check("more completions", drain(&cq, QUIET_WINDOW)?.len(), 0);
        Some(big)
    };

    r.step(format!(
        "the fix: QP ok (path_mtu {active}) SENDs the same 4096 bytes: 4 packets of {active}"
    ));
    ok.post_send_one(SendWr::send(3, &full))?;
    let wc = must_wc(&cq, "the SEND on QP ok")?;
    r.status("completion", &wc, WcStatus::Success);
    oob.send_line("done", OOB_DEADLINE)?;
    r.fix(
        "never set path_mtu above the port's active_mtu (lab clamps it unless you insist with \
         RtrAttr::path_mtu_unclamped)",
    );
    let _ = big;
    finish(&r, "mtu-too-large --connect")
}

pub(crate) fn finish(r: &Report, what: &str) -> Result<bool> {
    if r.mismatches().is_empty() {
        println!(
            "result: {what}: as recorded for rxe ({})",
            crate::report::checks(r.checks())
        );
        Ok(true)
    } else {
        println!(
            "result: {what}: MISMATCH in {} of {} checks",
            r.mismatches().len(),
            r.checks()
        );
        Ok(false)
    }
}
