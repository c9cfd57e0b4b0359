//! Case 15, `cq-overflow`: more completions than the completion queue holds.
//!
//! A CQ is a ring of `cqe` entries that the application empties by polling. If work
//! completes faster than it is polled, the ring fills up and the device has nowhere to put
//! the next completion: a CQ overrun. The device reports it as an *asynchronous* event,
//! IBV_EVENT_CQ_ERR, on the context's async event fd, not in the CQ.

use std::time::{Duration, Instant};

use course::Outcome as Result;
use lab::*;

use crate::report::Report;
use crate::rig::{Pair, PairCfg, Rig, must_wc};

const WRITES: u64 = 28;

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let cfg = PairCfg {
        a_cqe: 4,
        ..PairCfg::default()
    };
    let p = Pair::connect(&rig, cfg)?;
    r.step(format!(
        "connect {}; A's CQ is created with cqe=4",
        p.describe()
    ));
    r.check("A's CQ size (cq->cqe, rounded up by rxe)", p.cq_a.cqe(), 7);
    let target = rig.pd.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
    let t = target.remote();
    r.step(format!(
        "A posts {WRITES} signaled RDMA WRITEs of 8 bytes (wr_id 1..{WRITES}) and does not poll"
    ));
    let src = [p.mr_a.sge(0..8)];
    let mut wrs: Vec<SendWr> = (1..=WRITES)
        .map(|i| SendWr::write(i, &src, t.addr + 8 * i, t.rkey))
        .collect();
    p.a.post_send(&mut wrs)?;

    r.step("collect async events until none comes for 1 s (ibv_get_async_event)");
    let mut cq_errs = 0;
    let mut others = Vec::new();
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        // The first event may take a while on a loaded machine; after it, 1 s of silence
        // means the device is done.
        let wait = if cq_errs == 0 && others.is_empty() {
            10
        } else {
            1
        };
        match rig.ctx.get_async_event(Duration::from_secs(wait))? {
            Some(ev)
                if ev.kind == AsyncEventType::CqErr && p.cq_a.is_async_element(&ev.element) =>
            {
                cq_errs += 1
            }
            Some(ev) => others.push(ev.kind.to_string()),
            None => break,
        }
    }
    r.check("IBV_EVENT_CQ_ERR (0) events on A's CQ", cq_errs, WRITES - 7);
    let others = if others.is_empty() {
        "none".to_string()
    } else {
        others.join(", ")
    };
    r.check("other async events", others, "none".to_string());

    r.step("now poll A's CQ");
    let mut wcs = [WorkCompletion::default(); 64];
    let n = p.cq_a.poll_into(&mut wcs)?;
    let ids: Vec<String> = wcs[..n].iter().map(|w| w.wr_id.to_string()).collect();
    r.check(
        "completions kept (wr_id)",
        ids.join(" "),
        "1 2 3 4 5 6 7".to_string(),
    );
    let all_ok = wcs[..n].iter().all(|w| w.is_success());
    r.check("all of them IBV_WC_SUCCESS", all_ok, true);
    r.say(format!(
        "completions {}..{WRITES} are lost for good: one IBV_EVENT_CQ_ERR for each",
        n + 1
    ));
    r.check("A's QP state", p.a.state()?, QpState::Rts);
    r.check("B's QP state", p.b.state()?, QpState::Rts);

    r.step("A posts one more WRITE: the CQ still works");
    p.a.post_send_one(SendWr::write(WRITES + 1, &src, t.addr, t.rkey))?;
    let wc = must_wc(&p.cq_a, "the WRITE after the overrun")?;
    r.completion("A's completion", &wc, WRITES + 1, WcStatus::Success);
    r.fix(
        "size every CQ for the most completions that can be outstanding at once (the sum of \
         max_send_wr and max_recv_wr of its QPs), poll it promptly, and watch the async event \
         fd for IBV_EVENT_CQ_ERR",
    );
    r.hardware(
        "per the spec a CQ overrun is a CQ error: a NIC raises IBV_EVENT_CQ_ERR once, the CQ \
         stops working and the QPs that complete into it go to ERR. rxe drops the completions \
         that do not fit, raises one event for each, and carries on.",
    );
    Ok(())
}
