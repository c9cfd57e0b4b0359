//! Case 8, `peer-gone`: the peer's QP disappears mid-conversation (its process crashed, it
//! was destroyed, the node rebooted).
//!
//! Nothing tells the requester. It sends, waits `timeout` (4.096 us x 2^timeout) for an
//! acknowledgement, retransmits, and gives up after `retry_cnt` retries with
//! IBV_WC_RETRY_EXC_ERR. Then the QP is in ERR, and it can be reset and reused.

use std::time::Instant;

use course::Outcome as Result;
use course::show;
use lab::*;

use crate::report::Report;
use crate::rig::{
    FOREVER_WINDOW, PSN_A, PSN_B, Pair, PairCfg, Rig, SHOULD_COME, must_wc, secs, timed_wc,
};

/// One good SEND from A to B, to show the connection worked before the peer went away.
fn one_good_send(r: &mut Report, rig: &Rig, p: &Pair) -> Result<()> {
    let mr_b = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let dst = [mr_b.sge(..)];
    p.b.post_recv_one(RecvWr::new(100, &dst))?;
    let src = [p.mr_a.sge(0..64)];
    p.a.post_send_one(SendWr::send(1, &src))?;
    let wc = must_wc(&p.cq_a, "the first SEND")?;
    r.status("A's first SEND", &wc, WcStatus::Success);
    Ok(())
}

pub fn run(r: &mut Report) -> Result<()> {
    // (a) A finite retry budget.
    let rig = Rig::open()?;
    let cfg = PairCfg {
        a_rts: RtsAttr::new(PSN_A).timeout(8).retry_cnt(6),
        ..PairCfg::default()
    };
    let p = Pair::connect(&rig, cfg)?;
    r.step(format!(
        "connect {}: A timeout=8 (1.05 ms nominal) retry_cnt=6",
        p.describe()
    ));
    one_good_send(r, &rig, &p)?;
    let Pair {
        a,
        b,
        cq_a,
        cq_b: _cq_b,
        mr_a,
    } = p;
    r.step("B's QP is destroyed (ibv_destroy_qp): the peer is gone, and nobody tells A");
    b.destroy()?;
    r.step("A posts 3 SENDs");
    let src = [mr_a.sge(0..64)];
    let t0 = Instant::now();
    a.post_send(&mut [
        SendWr::send(2, &src),
        SendWr::send(3, &src),
        SendWr::send(4, &src),
    ])?;
    match timed_wc(&cq_a, t0, SHOULD_COME)? {
        Some((wc, took)) => {
            r.completion("A's completion", &wc, 2, WcStatus::RetryExcErr);
            r.say(format!(
                "after 7 transmissions (1 + retry_cnt 6), {}",
                show::elapsed(took)
            ));
            r.say(course::kernel::AckTimer::explain(8, 7));
        }
        None => r.mismatch("no completion at A".into()),
    }
    for id in [3u64, 4] {
        let wc = must_wc(&cq_a, "the queued SENDs")?;
        r.completion("A's completion", &wc, id, WcStatus::WrFlushErr);
    }
    r.check("A's QP state", a.state()?, QpState::Err);

    // (b) retry_cnt 7: rxe retries forever.
    let rig7 = Rig::open()?;
    let cfg = PairCfg {
        a_rts: RtsAttr::new(PSN_A).timeout(8).retry_cnt(7),
        ..PairCfg::default()
    };
    let p = Pair::connect(&rig7, cfg)?;
    r.step(format!(
        "fresh {}: A timeout=8 retry_cnt=7 (what many examples use)",
        p.describe()
    ));
    one_good_send(r, &rig7, &p)?;
    let Pair {
        a: a7,
        b,
        cq_a: cq_a7,
        mr_a: mr_a7,
        ..
    } = p;
    b.destroy()?;
    r.step("B's QP is destroyed; A SENDs");
    let src7 = [mr_a7.sge(0..64)];
    a7.post_send_one(SendWr::send(2, &src7))?;
    match timed_wc(&cq_a7, Instant::now(), FOREVER_WINDOW)? {
        None => r.say(format!(
            "no completion within {} (rxe retries forever with retry_cnt=7)",
            secs(FOREVER_WINDOW)
        )),
        Some((wc, _)) => r.mismatch(format!("a completion arrived: {}", wc.status)),
    }
    r.check("A's QP state", a7.state()?, QpState::Rts);
    r.step("stop it: move A to ERR (ibv_modify_qp); the stuck SEND is flushed");
    let a7 = a7.to_error()?;
    let wc = must_wc(&cq_a7, "the stuck SEND")?;
    r.status("A's completion", &wc, WcStatus::WrFlushErr);
    a7.destroy()?;

    // (c) Recovery: the errored QP of (a) is reset and connected to a new peer.
    r.step(
        "recover the first A (in ERR since step 3): RESET -> INIT -> RTR toward a new QP C -> RTS",
    );
    let cq_c = rig.ctx.create_cq(8, None)?;
    let c = rig.pd.create_qp(&QpInitAttr::rc(&cq_c, &cq_c))?;
    let (qa, qc) = (a.qp_num(), c.qp_num());
    let gid = rig.gid.gid;
    let a = a.reset()?.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(qc, PSN_B, gid),
        &RtsAttr::new(PSN_A).timeout(8).retry_cnt(6),
    )?;
    let c = c.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(qa, PSN_A, gid),
        &RtsAttr::new(PSN_B),
    )?;
    r.say(format!(
        "A {} (the same QP number) is now connected to C {}",
        show::qpn(a.qp_num()),
        show::qpn(qc)
    ));
    r.check("A's QP state", a.state()?, QpState::Rts);
    let mr_c = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let dst = [mr_c.sge(..)];
    c.post_recv_one(RecvWr::new(200, &dst))?;
    let mut mr_a = mr_a;
    mr_a.as_mut_slice()[..9].copy_from_slice(b"recovered");
    let src = [mr_a.sge(0..9)];
    a.post_send_one(SendWr::send(5, &src))?;
    let wc = must_wc(&cq_a, "the SEND after recovery")?;
    r.status("A's SEND to C", &wc, WcStatus::Success);
    let wc = must_wc(&cq_c, "C's RECV")?;
    r.status("C's RECV", &wc, WcStatus::Success);
    let got = String::from_utf8_lossy(&mr_c.as_slice()[..wc.byte_len as usize]).into_owned();
    r.check("C received", got.as_str(), "recovered");
    r.say("recovered: traffic resumes on the reset QP");
    r.fix(
        "use a finite retry_cnt (<= 6 on rxe; lab's default is 6) so a dead peer becomes \
         IBV_WC_RETRY_EXC_ERR; then reset the QP (or create a new one), exchange endpoints \
         again and reconnect",
    );
    r.hardware(
        "retry_cnt=7 means 7 retries on a NIC, then IBV_WC_RETRY_EXC_ERR; rxe retries \
         forever (rxe_comp.c decrements retry_cnt only when it is not 7).",
    );
    Ok(())
}
