//! Case 7, `rnr-retry-exceeded`: a SEND to a peer that has no RECV posted.
//!
//! A SEND (or WRITE_WITH_IMM) consumes one RECV at the responder. With none posted, the
//! responder answers "receiver not ready" (an RNR NAK) and asks the sender to wait
//! `min_rnr_timer`; the sender tries again, at most `rnr_retry` times. 7 means forever.

use std::time::Instant;

use course::Outcome as Result;
use course::kernel::RxeChange;
use course::show;
use lab::*;

use crate::report::Report;
use crate::rig::{
    FOREVER_WINDOW, PSN_A, Pair, PairCfg, QUIET_WINDOW, Rig, SHOULD_COME, drain, must_wc, secs,
    timed_wc,
};

pub fn run(r: &mut Report) -> Result<()> {
    // (a) A finite rnr_retry.
    let rig = Rig::open()?;
    let cfg = PairCfg {
        a_rts: RtsAttr::new(PSN_A).rnr_retry(2),
        b_min_rnr_timer: 1,
        ..PairCfg::default()
    };
    let p = Pair::connect(&rig, cfg)?;
    r.step(format!(
        "connect {}: A rnr_retry=2 (timeout=14 retry_cnt=6), B min_rnr_timer=1 (0.01 ms); B \
         posts no RECV",
        p.describe()
    ));
    r.step("A SENDs 64 bytes");
    let src = [p.mr_a.sge(0..64)];
    let t0 = Instant::now();
    p.a.post_send_one(SendWr::send(1, &src))?;
    match timed_wc(&p.cq_a, t0, SHOULD_COME)? {
        Some((wc, took)) => {
            r.status("A's completion", &wc, WcStatus::RnrRetryExcErr);
            r.say(format!(
                "after 3 RNR NAKs (1 try + rnr_retry 2), {}",
                show::elapsed(took)
            ));
        }
        None => r.mismatch("no completion at A".into()),
    }
    r.check("A's QP state", p.a.state()?, QpState::Err);
    r.check("B's QP state", p.b.state()?, QpState::Rts);
    r.check("completions at B", drain(&p.cq_b, QUIET_WINDOW)?.len(), 0);

    // (b) rnr_retry 7: wait forever (retry_cnt 7 too, see (c)).
    let rig = Rig::open()?;
    let cfg = PairCfg {
        a_rts: RtsAttr::new(PSN_A).rnr_retry(7).retry_cnt(7),
        b_min_rnr_timer: 1,
        ..PairCfg::default()
    };
    let p = Pair::connect(&rig, cfg)?;
    r.step(format!(
        "fresh {}: A rnr_retry=7 (forever) and retry_cnt=7; B posts no RECV; A SENDs",
        p.describe()
    ));
    let src = [p.mr_a.sge(0..64)];
    p.a.post_send_one(SendWr::send(1, &src))?;
    match timed_wc(&p.cq_a, Instant::now(), FOREVER_WINDOW)? {
        None => r.say(format!(
            "no completion within {} (rnr_retry=7 retries forever)",
            secs(FOREVER_WINDOW)
        )),
        Some((wc, _)) => r.mismatch(format!("a completion arrived: {}", wc.status)),
    }
    r.check("A's QP state", p.a.state()?, QpState::Rts);
    r.step("B posts a RECV at last: the waiting SEND goes through");
    let mr_b = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let dst = [mr_b.sge(..)];
    let t0 = Instant::now();
    p.b.post_recv_one(RecvWr::new(100, &dst))?;
    let wc = must_wc(&p.cq_a, "A's SEND")?;
    r.status("A's completion", &wc, WcStatus::Success);
    r.say(format!(
        "{} after the RECV was posted",
        show::elapsed(t0.elapsed())
    ));
    let wc = must_wc(&p.cq_b, "B's RECV")?;
    r.status("B's RECV", &wc, WcStatus::Success);

    // (c) rnr_retry 7 with a small retry_cnt: does the RNR wait use up the transport retry
    // count? On rxe in Linux 6.1 it did (an rxe deviation); from 6.10 on it does not, as the
    // spec asks (course::kernel::RxeChange).
    let rig = Rig::open()?;
    let cfg = PairCfg {
        a_rts: RtsAttr::new(PSN_A).rnr_retry(7).retry_cnt(1),
        b_min_rnr_timer: 1,
        ..PairCfg::default()
    };
    let p = Pair::connect(&rig, cfg)?;
    r.step(format!(
        "fresh {}: A rnr_retry=7 but retry_cnt=1 (timeout=14, 67 ms); B posts no RECV; A SENDs",
        p.describe()
    ));
    let forever = r.record(RxeChange::RnrForeverOutlastsRetryCnt)?;
    let src = [p.mr_a.sge(0..64)];
    let t0 = Instant::now();
    p.a.post_send_one(SendWr::send(1, &src))?;
    if forever {
        match timed_wc(&p.cq_a, t0, FOREVER_WINDOW)? {
            None => r.say(format!(
                "no completion within {}: rnr_retry=7 waits forever, whatever retry_cnt is",
                secs(FOREVER_WINDOW)
            )),
            Some((wc, _)) => r.mismatch(format!("a completion arrived: {}", wc.status)),
        }
        r.check("A's QP state", p.a.state()?, QpState::Rts);
    } else {
        match timed_wc(&p.cq_a, t0, SHOULD_COME)? {
            Some((wc, took)) => {
                r.status("A's completion", &wc, WcStatus::RetryExcErr);
                r.say(format!(
                    "{}: rxe's ack timer kept running during the RNR waits and used up retry_cnt",
                    show::elapsed(took)
                ));
            }
            None => r.mismatch("no completion at A".into()),
        }
        r.check("A's QP state", p.a.state()?, QpState::Err);
    }
    r.fix(
        "post RECVs before the peer can send (before the exchange that tells it your QPN), keep \
         enough posted (credit-based flow control), and use a finite rnr_retry (lab's default \
         6) so a missing RECV becomes an error instead of a hang",
    );
    r.hardware(
        "steps 1-4 are the same on a NIC. Step 5 before Linux 6.10 is an rxe deviation: per the \
         spec an RNR NAK is a valid response, so rnr_retry=7 waits forever whatever retry_cnt \
         is, as a NIC does and as rxe does from 6.10 on.",
    );
    Ok(())
}
