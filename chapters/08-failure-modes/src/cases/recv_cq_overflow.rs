//! Case 17, `recv-cq-overflow`: more receive completions than the responder's CQ holds.
//!
//! Case 15 overruns a *send* CQ, and rxe carries on: its completer ignores what `rxe_cq_post`
//! returns (`rxe_comp.c`, `do_complete`). The receive side is another matter. When B's
//! responder cannot post a RECV's completion, `rxe_resp.c` `do_complete` returns
//! `RESPST_ERR_CQ_OVERFLOW` ("All - Class G"), `rxe_responder` turns that into `RESPST_ERROR`
//! and calls `rxe_qp_error`: B's QP goes to ERR, and the SEND whose completion was lost is
//! never acknowledged (the responder skips `RESPST_ACKNOWLEDGE`). A retransmits it into a
//! QP in ERR, which drops it, until A's `retry_cnt` runs out.

use course::Outcome as Result;
use lab::*;

use crate::report::Report;
use crate::rig::{PSN_A, Pair, PairCfg, Rig, must_wc};

/// SENDs from A, and RECVs posted by B: one more than B's CQ holds.
const SENDS: u64 = 8;

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let cfg = PairCfg {
        a_rts: RtsAttr::new(PSN_A).timeout(8).retry_cnt(2),
        b_cqe: 4,
        ..PairCfg::default()
    };
    let p = Pair::connect(&rig, cfg)?;
    r.step(format!(
        "connect {}: A timeout=8 retry_cnt=2; B's CQ is created with cqe=4",
        p.describe()
    ));
    r.check("B's CQ size (cq->cqe, rounded up by rxe)", p.cq_b.cqe(), 7);

    r.step(format!(
        "B posts {SENDS} RECVs (wr_id 101..{}) and does not poll its CQ",
        100 + SENDS
    ));
    let mr_b = rig
        .pd
        .reg_mr(64 * SENDS as usize, AccessFlags::LOCAL_WRITE)?;
    let sges: Vec<[Sge; 1]> = (0..SENDS as usize)
        .map(|i| [mr_b.sge(64 * i..64 * (i + 1))])
        .collect();
    let mut recvs: Vec<RecvWr> = sges
        .iter()
        .zip(101..)
        .map(|(sge, id)| RecvWr::new(id, sge))
        .collect();
    p.b.post_recv(&mut recvs)?;

    r.step(format!(
        "A posts {SENDS} signaled SENDs of 8 bytes (wr_id 1..{SENDS})"
    ));
    p.mr_a.write_from(0, b"8 bytes!")?;
    let src = [p.mr_a.sge(0..8)];
    let mut sends: Vec<SendWr> = (1..=SENDS).map(|i| SendWr::send(i, &src)).collect();
    p.a.post_send(&mut sends)?;
    let mut ok = Vec::new();
    for id in 1..SENDS {
        let wc = must_wc(&p.cq_a, "A's SENDs")?;
        if wc.wr_id == id && wc.is_success() {
            ok.push(id.to_string());
        } else {
            r.completion("A's completion", &wc, id, WcStatus::Success);
        }
    }
    r.check(
        "A's SENDs completed with IBV_WC_SUCCESS (wr_id)",
        ok.join(" "),
        "1 2 3 4 5 6 7".to_string(),
    );
    let wc = must_wc(&p.cq_a, "A's last SEND")?;
    r.completion("A's completion", &wc, SENDS, WcStatus::RetryExcErr);
    r.say(format!(
        "SEND {SENDS} went into B's RECV {}, whose completion did not fit: B never \
         acknowledged it",
        100 + SENDS
    ));

    r.step("collect B's async events until none comes for 1 s (ibv_get_async_event)");
    let mut cq_errs = 0;
    let mut others = Vec::new();
    while let Some(ev) = rig.ctx.get_async_event(std::time::Duration::from_secs(1))? {
        if ev.kind == AsyncEventType::CqErr && p.cq_b.is_async_element(&ev.element) {
            cq_errs += 1;
        } else {
            others.push(ev.kind.to_string());
        }
    }
    r.check("IBV_EVENT_CQ_ERR (0) events on B's CQ", cq_errs, 1);
    let others = if others.is_empty() {
        "none".to_string()
    } else {
        others.join(", ")
    };
    r.check("other async events", others, "none".to_string());
    r.check("B's QP state", p.b.state()?, QpState::Err);
    r.check("A's QP state", p.a.state()?, QpState::Err);

    r.step("now poll B's CQ");
    let mut wcs = [WorkCompletion::default(); 64];
    let n = p.cq_b.poll_into(&mut wcs)?;
    let ids: Vec<String> = wcs[..n].iter().map(|w| w.wr_id.to_string()).collect();
    r.check(
        "completions kept (wr_id)",
        ids.join(" "),
        "101 102 103 104 105 106 107".to_string(),
    );
    let all_ok = wcs[..n].iter().all(|w| w.is_success());
    r.check("all of them IBV_WC_SUCCESS", all_ok, true);
    let last = 64 * (SENDS as usize - 1);
    r.check(
        &format!("RECV {}'s buffer holds the SEND's bytes", 100 + SENDS),
        &mr_b.as_slice()[last..last + 8] == b"8 bytes!",
        true,
    );
    r.say(format!(
        "RECV {} was consumed and its completion is lost for good",
        100 + SENDS
    ));
    r.fix(
        "size the receive CQ for every RECV that can complete before you poll (the sum of \
         max_recv_wr of the QPs that share it); an overrun there costs the connection, not \
         just a completion",
    );
    r.hardware(
        "per the spec a CQ overrun is a CQ error: IBV_EVENT_CQ_ERR, and the QPs that complete \
         into the CQ go to ERR. On a receive CQ rxe comes close: the responder's QP goes to \
         ERR (rxe_qp_error) with one IBV_EVENT_CQ_ERR, and the CQ keeps the completions it \
         holds.",
    );
    Ok(())
}
