//! Case 12, `flush-on-error`: what happens to outstanding work when a QP goes to ERR.
//!
//! In ERR a QP executes nothing: every work request still queued, and every one posted later,
//! completes with IBV_WC_WR_FLUSH_ERR, in order, *signaled or not*. That is how you get your
//! buffers back after an error, and how a clean shutdown drains a QP.

use std::time::Duration;

use course::Outcome as Result;
use lab::*;

use crate::report::Report;
use crate::rig::{PSN_A, Pair, PairCfg, QUIET_WINDOW, Rig, drain, must_wc};

pub fn run(r: &mut Report) -> Result<()> {
    // (a) Receives outstanding at B.
    let rig = Rig::open()?;
    let cfg = PairCfg {
        a_rts: RtsAttr::new(PSN_A).rnr_retry(7).retry_cnt(7),
        ..PairCfg::default()
    };
    let p = Pair::connect(&rig, cfg)?;
    r.step(format!("connect {}; B posts 3 RECVs", p.describe()));
    let mr_b = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let dsts: Vec<[Sge; 1]> = (0..4).map(|i| [mr_b.sge(i * 64..(i + 1) * 64)]).collect();
    p.b.post_recv(&mut [
        RecvWr::new(101, &dsts[0]),
        RecvWr::new(102, &dsts[1]),
        RecvWr::new(103, &dsts[2]),
    ])?;
    let Pair {
        a,
        b,
        cq_a,
        cq_b,
        mr_a,
    } = p;
    r.step("B is moved to ERR (ibv_modify_qp)");
    let b = b.to_error()?;
    for id in 101..=103u64 {
        let wc = must_wc(&cq_b, "B's flushed RECVs")?;
        r.completion("B's completion", &wc, id, WcStatus::WrFlushErr);
    }

    // (b) Sends outstanding at A, signaled and unsignaled. B no longer answers, and A (retry
    // counts 7) would retry forever: the work stays outstanding until A goes to ERR.
    r.step(
        "A (rnr_retry=7 retry_cnt=7) posts 4 SENDs to B, which in ERR drops them silently \
         (wr_id 1 and 3 signaled, 2 and 4 unsignaled); they stay outstanding",
    );
    let src = [mr_a.sge(0..64)];
    a.post_send(&mut [
        SendWr::send(1, &src),
        SendWr::send(2, &src).unsignaled(),
        SendWr::send(3, &src),
        SendWr::send(4, &src).unsignaled(),
    ])?;
    r.check(
        "completions before ERR",
        drain(&cq_a, QUIET_WINDOW)?.len(),
        0,
    );
    r.step("A is moved to ERR");
    let a = a.to_error()?;
    for id in 1..=4u64 {
        let wc = must_wc(&cq_a, "A's flushed SENDs")?;
        r.completion("A's completion", &wc, id, WcStatus::WrFlushErr);
    }
    r.say("the unsignaled WRs were flushed with a completion too");

    // (c) Posting in ERR.
    r.step("A posts one more SEND while in ERR");
    let res = a.post_send_any_state(&mut [SendWr::send(5, &src)]);
    r.check(
        "ibv_post_send returned",
        posted(&res),
        "0 (accepted)".into(),
    );
    let wc = must_wc(&cq_a, "the SEND posted in ERR")?;
    r.completion("A's completion", &wc, 5, WcStatus::WrFlushErr);

    r.step("B posts one more RECV while in ERR");
    let res = b.post_recv_one(RecvWr::new(104, &dsts[3]));
    r.check(
        "ibv_post_recv returned",
        posted(&res),
        "0 (accepted)".into(),
    );
    let quiet = Duration::from_millis(500);
    r.check("completions within 0.500s", drain(&cq_b, quiet)?.len(), 0);
    r.say("rxe flushes receives only when the QP is moved to ERR: do it again");
    b.modify(&QpAttr::new().state(QpState::Err))?;
    let wc = must_wc(&cq_b, "the RECV posted in ERR")?;
    r.completion("B's completion", &wc, 104, WcStatus::WrFlushErr);
    r.fix(
        "after the first error completion, drain the CQ until every posted WR has come back \
         (flushed), then reset or destroy the QP; look at the first non-flush status for the \
         cause",
    );
    r.hardware(
        "the flushes of queued and newly posted work are the same on a NIC. The RECV posted in \
         ERR that waits for another modify is rxe's (its userspace has no receive doorbell); \
         the verbs spec has it flushed like a send.",
    );
    Ok(())
}

/// What a post returned, as text: "0 (accepted)" or the error.
fn posted(res: &lab::Result<()>) -> String {
    match res {
        Ok(()) => "0 (accepted)".into(),
        Err(e) => e.report().to_string(),
    }
}
