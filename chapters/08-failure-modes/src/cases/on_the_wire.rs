//! The pair halves of case 2 (`bad-rkey`) and case 7 (`rnr-retry-exceeded`): the same
//! mistakes between two nodes, so that the responder's answer crosses a wire and shows in a
//! trace (`cargo lab run NN --trace`, or this chapter's `tests/wire.rs`).
//!
//! On one device rxe hands packets from QP to QP inside the kernel, and the NAKs never leave
//! it. Between node a (the responder, `--serve`) and node b (the requester, `--connect`):
//!
//! * `bad-rkey`: b's RDMA WRITE names an rkey a never issued; a answers with a NAK whose
//!   syndrome is "remote access error", and both QPs go to ERR;
//! * `rnr-retry-exceeded`: a posts no RECV; each of b's SENDs is answered by an RNR NAK that
//!   carries a's `min_rnr_timer`, and after rnr_retry 2 tries more the SEND fails.
//!
//! Run it (two terminals, as the pair half of `mtu-too-large`):
//! `ch08-failure-modes bad-rkey --serve` on node a, `ch08-failure-modes bad-rkey --connect
//! 10.77.0.1` on node b; the same with `rnr-retry-exceeded`.

use std::time::{Duration, Instant};

use course::Outcome as Result;
use course::exchange::{Endpoint, Listener, OobStream};
use course::show;
use lab::*;

use super::region;
use crate::report::Report;
use crate::rig::{PSN_A, PSN_B, QUIET_WINDOW, Rig, SHOULD_COME, drain, must_wc, timed_wc};

/// How long either side waits for the other over TCP.
const OOB_DEADLINE: Duration = Duration::from_secs(60);
/// The responder's `min_rnr_timer` in the RNR case: code 1, 0.01 ms (as in the loopback half).
const MIN_RNR_TIMER: u8 = 1;

/// Which of the two cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireCase {
    BadRkey,
    Rnr,
}

impl WireCase {
    pub fn of(name: &str) -> Option<WireCase> {
        match name {
            "bad-rkey" => Some(WireCase::BadRkey),
            "rnr-retry-exceeded" => Some(WireCase::Rnr),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            WireCase::BadRkey => "bad-rkey",
            WireCase::Rnr => "rnr-retry-exceeded",
        }
    }
}

/// One RC QP in INIT, its CQ, and this node's endpoint for it.
struct Side {
    cq: CompletionQueue,
    qp: QueuePair<state::Init>,
}

fn side(rig: &Rig) -> Result<Side> {
    let cq = rig.ctx.create_cq(16, None)?;
    let qp = rig.pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    Ok(Side {
        qp: qp.to_init(&InitAttr::default())?,
        cq,
    })
}

fn endpoint(rig: &Rig, name: &str, qpn: u32, psn: u32, regions: Vec<RemoteRegion>) -> Endpoint {
    Endpoint {
        name: name.into(),
        qpn,
        psn,
        gid: rig.gid.gid.raw(),
        regions,
        ..Default::default()
    }
}

/// Node a: the responder. For bad-rkey it registers a region with every remote right and
/// posts a sentinel RECV; for the RNR case it posts no RECV at all.
pub fn serve(case: WireCase, port: u16) -> Result<bool> {
    let mut r = Report::new();
    let rig = Rig::open()?;
    let s = side(&rig)?;
    r.step(format!(
        "{} --serve on {} {}: QP {}",
        case.name(),
        rig.ctx.name(),
        show::gid(&rig.gid.gid.raw()),
        show::qpn(s.qp.qp_num())
    ));
    let target = rig.pd.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
    let sentinel = rig.pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    let regions = match case {
        WireCase::BadRkey => {
            let dst = [sentinel.sge(..)];
            s.qp.post_recv_one(RecvWr::new(100, &dst))?;
            r.step(format!(
                "register 4096 bytes with every remote right ({}) and post a sentinel RECV",
                region(&target.remote())
            ));
            vec![target.remote()]
        }
        WireCase::Rnr => {
            r.step(format!(
                "post no RECV; min_rnr_timer={MIN_RNR_TIMER} (0.01 ms) in our RNR NAKs"
            ));
            vec![]
        }
    };
    let listener = Listener::bind(port)?;
    println!("listening on port {port}");
    let mut oob = listener.accept(OOB_DEADLINE)?;
    let peer = oob.recv_msg(OOB_DEADLINE)?;
    let qp =
        s.qp.to_rtr(&RtrAttr::new(peer.qpn, peer.psn, Gid(peer.gid)).min_rnr_timer(MIN_RNR_TIMER))?
            .to_rts(&RtsAttr::new(PSN_A))?;
    oob.send_msg(
        &endpoint(&rig, "server", qp.qp_num(), PSN_A, regions),
        OOB_DEADLINE,
    )?;
    r.step("QP in RTS; endpoint sent; waiting for the client's \"done\"");
    oob.expect_line("done", OOB_DEADLINE)?;
    match case {
        WireCase::BadRkey => {
            // The access check failed here, at the responder: its QP went to ERR too, and the
            // sentinel RECV (which a WRITE never consumes) was flushed.
            r.check("our QP state", qp.state()?, QpState::Err);
            let wc = must_wc(&s.cq, "the sentinel RECV")?;
            r.status("the sentinel RECV (wr_id 100)", &wc, WcStatus::WrFlushErr);
            let untouched = target.as_slice().iter().all(|b| *b == 0);
            r.check("our region untouched", untouched, true);
        }
        WireCase::Rnr => {
            r.check("our QP state", qp.state()?, QpState::Rts);
            r.check("our completions", drain(&s.cq, QUIET_WINDOW)?.len(), 0);
            r.say("an RNR NAK is an answer, not an error: the responder stays in RTS");
        }
    }
    finish(&r, &format!("{} --serve", case.name()))
}

/// Node b: the requester: one RDMA WRITE with a wrong rkey, or one SEND with rnr_retry 2.
pub fn connect(case: WireCase, addr: &str, port: u16) -> Result<bool> {
    let mut r = Report::new();
    let rig = Rig::open()?;
    let s = side(&rig)?;
    r.step(format!(
        "{} --connect on {} {}",
        case.name(),
        rig.ctx.name(),
        show::gid(&rig.gid.gid.raw())
    ));
    let mut oob = OobStream::connect(addr, port, OOB_DEADLINE)?;
    oob.send_msg(
        &endpoint(&rig, "client", s.qp.qp_num(), PSN_B, vec![]),
        OOB_DEADLINE,
    )?;
    let peer = oob.recv_msg(OOB_DEADLINE)?;
    let rts = match case {
        WireCase::BadRkey => RtsAttr::new(PSN_B),
        WireCase::Rnr => RtsAttr::new(PSN_B).rnr_retry(2),
    };
    let qp =
        s.qp.to_rtr(&RtrAttr::new(peer.qpn, peer.psn, Gid(peer.gid)))?
            .to_rts(&rts)?;
    r.step(format!(
        "server {}: QP {}; ours in RTS",
        show::gid(&peer.gid),
        show::qpn(peer.qpn)
    ));
    let mr = rig.pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    let src = [mr.sge(..)];
    match case {
        WireCase::BadRkey => {
            let t = *peer.regions.first().ok_or("the server sent no region")?;
            let wrong = t.rkey.wrapping_add(1);
            r.step(format!(
                "WRITE 64 bytes to {} with {} (rkey + 1)",
                show::addr(t.addr),
                show::rkey(wrong)
            ));
            qp.post_send_one(SendWr::write(1, &src, t.addr, wrong))?;
            let wc = must_wc(&s.cq, "the RDMA WRITE")?;
            r.status("our completion", &wc, WcStatus::RemAccessErr);
            r.say("on the wire: one RDMA_WRITE_ONLY, answered by a NAK remote-access-error");
        }
        WireCase::Rnr => {
            r.step("SEND 64 bytes (rnr_retry=2) to a QP with no RECV posted");
            let t0 = Instant::now();
            qp.post_send_one(SendWr::send(1, &src))?;
            match timed_wc(&s.cq, t0, SHOULD_COME)? {
                Some((wc, _)) => r.status("our completion", &wc, WcStatus::RnrRetryExcErr),
                None => r.mismatch("no completion".into()),
            }
            r.say(
                "on the wire: the SEND three times (1 try + rnr_retry 2), each answered by an \
                 RNR NAK carrying the server's timer",
            );
        }
    }
    r.check("our QP state", qp.state()?, QpState::Err);
    oob.send_line("done", OOB_DEADLINE)?;
    finish(&r, &format!("{} --connect", case.name()))
}

fn finish(r: &Report, what: &str) -> Result<bool> {
    super::mtu_too_large::finish(r, what)
}
