//! Case 5, `post-before-rts`: posting a send before the QP is in RTS, and the "ghost sends"
//! rxe leaves behind.
//!
//! Only a QP in RTS may send, and `ibv_post_send` in RESET, INIT or RTR fails with EINVAL.
//! On rxe the provider has *already written the work request into the send queue* when it
//! notices the state, and it does not take it back: the "rejected" work request sits there,
//! and the next successful post after RTS rings the doorbell for it too. A program that
//! retries after the EINVAL sends the message twice.

use std::time::Duration;

use course::Outcome as Result;
use course::show;
use lab::*;

use crate::report::Report;
use crate::rig::{EINVAL, PSN_A, PSN_B, Rig, drain, must_wc};

const MESSAGES: [&str; 4] = [
    "posted in RESET",
    "posted in INIT",
    "posted in RTR",
    "posted in RTS",
];
const SLOT: usize = 64;

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let gid = rig.gid.gid;
    let cq_a = rig.ctx.create_cq(16, None)?;
    let cq_b = rig.ctx.create_cq(16, None)?;
    let a = rig.pd.create_qp(&QpInitAttr::rc(&cq_a, &cq_a))?;
    let b = rig.pd.create_qp(&QpInitAttr::rc(&cq_b, &cq_b))?;
    let (qa, qb) = (a.qp_num(), b.qp_num());
    let mut mr_a = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    for (i, m) in MESSAGES.iter().enumerate() {
        mr_a.as_mut_slice()[i * SLOT..i * SLOT + m.len()].copy_from_slice(m.as_bytes());
    }
    let mr_b = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;

    // B is ready (RTS) and has a RECV for each of the four messages.
    let b = b.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(qa, PSN_A, gid),
        &RtsAttr::new(PSN_B),
    )?;
    let dsts: Vec<[Sge; 1]> = (0..4)
        .map(|i| [mr_b.sge(i * SLOT..(i + 1) * SLOT)])
        .collect();
    let mut recvs: Vec<RecvWr> = dsts
        .iter()
        .enumerate()
        .map(|(i, d)| RecvWr::new(100 + i as u64, d))
        .collect();
    b.post_recv(&mut recvs)?;
    r.step(format!(
        "B {} is in RTS with 4 RECVs posted; A {} was just created (RESET)",
        show::qpn(qb),
        show::qpn(qa)
    ));

    let srcs: Vec<[Sge; 1]> = MESSAGES
        .iter()
        .enumerate()
        .map(|(i, m)| [mr_a.sge(i * SLOT..i * SLOT + m.len())])
        .collect();
    let post = |qp_post: &dyn Fn(&mut [SendWr]) -> lab::Result<()>, i: usize| {
        qp_post(&mut [SendWr::send(i as u64 + 1, &srcs[i])])
    };

    r.step("A posts SEND wr_id 1 while in RESET");
    let res = post(&|w| a.post_send_any_state(w), 0);
    r.errno("ibv_post_send", &res, EINVAL);
    let a = a.to_init(&InitAttr::default())?;
    r.step("A moves to INIT and posts SEND wr_id 2");
    let res = post(&|w| a.post_send_any_state(w), 1);
    r.errno("ibv_post_send", &res, EINVAL);
    let a = a.to_rtr(&RtrAttr::new(qb, PSN_B, gid))?;
    r.step("A moves to RTR and posts SEND wr_id 3");
    let res = post(&|w| a.post_send_any_state(w), 2);
    r.errno("ibv_post_send", &res, EINVAL);
    let a = a.to_rts(&RtsAttr::new(PSN_A))?;

    let quiet = Duration::from_millis(500);
    r.step(format!(
        "A moves to RTS; watch both CQs for {:.3}s",
        quiet.as_secs_f64()
    ));
    let early = drain(&cq_a, quiet)?.len() + drain(&cq_b, Duration::ZERO)?.len();
    r.check("completions (the rejected WRs look gone)", early, 0);

    r.step("A posts SEND wr_id 4 in RTS: its doorbell also starts whatever sits in the queue");
    post(&|w| a.post_send(w), 3)?;
    for want_id in 1..=4u64 {
        let wc = must_wc(&cq_a, "A's sends")?;
        r.completion("A's completion", &wc, want_id, WcStatus::Success);
    }
    for (i, m) in MESSAGES.iter().enumerate() {
        let wc = must_wc(&cq_b, "B's receives")?;
        let at = (wc.wr_id.saturating_sub(100) as usize).min(3) * SLOT;
        let got = String::from_utf8_lossy(&mr_b.as_slice()[at..at + wc.byte_len as usize]);
        r.check(
            &format!("B's RECV #{} ({})", i + 1, wc.status),
            format!("{got:?}"),
            format!("{m:?}"),
        );
    }
    r.say("three sends that \"failed\" with EINVAL were delivered after all: ghost sends");
    r.fix(
        "never post sends before RTS (lab's QueuePair<Rts> is the only type with post_send); \
         if a post fails, treat the QP as broken: move it to ERR or RESET (which discards the \
         queue) before reusing it, never simply retry",
    );
    r.hardware(
        "providers differ here: some reject the post and keep nothing, some accept it without \
         looking at the state and the device flushes or drops it; rxe says EINVAL and \
         sends it anyway. The contract is the same everywhere: post sends in RTS only.",
    );
    Ok(())
}
