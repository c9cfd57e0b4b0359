//! Case 11, `recv-queue-full`: posting more receives than the receive queue holds.
//!
//! `max_recv_wr` sizes the receive queue at `ibv_create_qp`. Posting into a full queue fails
//! at once, in `ibv_post_recv`, with ENOMEM (returned, not in `errno`). The queue is a ring
//! that rxe rounds up to 2^k - 1 entries, so "full" comes later than you asked for.

use course::Outcome as Result;
use course::kernel::RxeChange;
use course::show;
use lab::*;

use crate::report::Report;
use crate::rig::{ENOMEM, Rig};

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let cq = rig.ctx.create_cq(16, None)?;
    let qp = rig.pd.create_qp(&QpInitAttr::rc(&cq, &cq).max_recv_wr(4))?;
    let qpn = qp.qp_num();
    let qp = qp.to_init(&InitAttr::default())?;
    r.step(format!(
        "create QP {} with max_recv_wr=4 and move it to INIT (receives may be posted from INIT)",
        show::qpn(qpn)
    ));
    // What ibv_create_qp reports back changed (course::kernel::RxeChange): the size asked for on
    // Linux 6.1, the size rxe really gives from 6.6 on.
    let rounded = r.record(RxeChange::QueueCapRounded)?;
    r.check(
        "cap.max_recv_wr reported by ibv_create_qp",
        qp.cap().max_recv_wr,
        if rounded { 7 } else { 4 },
    );
    let mr = rig.pd.reg_mr(16 * 64, AccessFlags::LOCAL_WRITE)?;
    r.step("post RECVs of 64 bytes one at a time until one is refused (at most 16)");
    let mut accepted = 0;
    let mut refused = None;
    for i in 0..16 {
        let dst = [mr.sge(i * 64..(i + 1) * 64)];
        match qp.post_recv_one(RecvWr::new(i as u64 + 1, &dst)) {
            Ok(()) => accepted += 1,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    r.check("RECVs accepted", accepted, 7);
    match &refused {
        Some(e) => r.error(&format!("ibv_post_recv #{}", accepted + 1), e, ENOMEM),
        None => r.mismatch("all 16 RECVs were accepted".into()),
    }
    r.say("4 asked, 7 held: rxe's ring has 2^3 slots and keeps one empty");
    r.fix(
        "size max_recv_wr for the receives you keep posted (it is the receive credit you give \
         the peer); repost a RECV after each receive completion instead of posting ahead",
    );
    r.hardware(
        "a NIC also rounds queue sizes up (to its own granularity) and returns ENOMEM on a full \
         queue; it may report the rounded size in cap, as rxe does from Linux 6.6 on (before, \
         it reported the size asked for).",
    );
    Ok(())
}
