//! One connection's verbs objects and the steps every role shares: what rdma_cm creates
//! (`rdma_create_qp` on the id's device), what it set (`ibv_query_qp` after ESTABLISHED), the
//! private data's formats, completions with a deadline, and the end (`rdma_disconnect`, the
//! flush, TIMEWAIT_EXIT).

use crate::{REGION_LEN, TAG};
use course::kernel::RxeChange;
use course::show;
use course::{OrFail, Outcome as Result, Tagged, expect};
use lab::cm::{CmEvent, CmEventType, CmId};
use lab::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpInfo, QpInitAttr, QpState,
    QpTypeState, QueuePair, RecvWr, SendWr, WcStatus, WorkCompletion, state,
};
use std::time::{Duration, Instant};

pub(crate) fn region_data(mr: &MemoryRegion) -> Vec<u8> {
    Tagged::new(TAG)
        .u64(mr.addr())
        .u32(REGION_LEN as u32)
        .u32(mr.rkey())
        .into_bytes()
}

pub(crate) fn parse_region(d: &[u8]) -> Option<(u64, u32, u32)> {
    let mut n = Tagged::read(d, TAG)?;
    Some((n.u64()?, n.u32()?, n.u32()?))
}

/// The server's region, from the private data of its accept.
pub(crate) type Region = (u64, u32, u32);

/// The verbs objects of one connection, made on the id's device (`id->verbs`). Field order is
/// drop order: the QP first, the id last.
pub(crate) struct Conn<S: QpTypeState = state::Init> {
    pub(crate) qp: QueuePair<S>,
    pub(crate) cq: CompletionQueue,
    pub(crate) mr: MemoryRegion,
    pub(crate) _pd: ProtectionDomain,
    pub(crate) id: CmId,
}

pub(crate) fn conn_on(id: CmId, len: usize, role: &str, step: u32) -> Result<Conn> {
    let ctx = id.context().or_fail("the id has no device")?;
    let pd = ctx.alloc_pd().or_fail("cannot allocate a PD")?;
    let cq = ctx.create_cq(32, None).or_fail("cannot create a CQ")?;
    let mr = pd
        .reg_mr(len, AccessFlags::ALL_REMOTE)
        .or_fail("cannot register the region")?;
    let qp = id
        .create_qp(&pd, &QpInitAttr::rc(&cq, &cq))
        .or_fail("rdma_create_qp failed")?;
    let st = qp.state().or_fail("ibv_query_qp")?;
    println!(
        "step {step}: {role}: rdma_create_qp on {} port {} -> {}, state {st}",
        ctx.name(),
        id.port_num(),
        show::qpn(qp.qp_num())
    );
    println!(
        "  replaces: ibv_create_qp + ibv_modify_qp(RESET -> INIT: port, pkey index, access flags)"
    );
    Ok(Conn {
        qp,
        cq,
        mr,
        _pd: pd,
        id,
    })
}

pub(crate) fn print_qp(role: &str, step: u32, qp: &QueuePair<state::Rts>) -> Result<QpInfo> {
    let i = qp.query().or_fail("ibv_query_qp")?;
    println!("step {step}: {role}: ibv_query_qp after ESTABLISHED: what rdma_cm set");
    // The server's rq_psn moves as soon as the client's first request arrives, which may be
    // before this query: only the client, which has sent nothing yet, prints it.
    let rq = if role.starts_with("client") {
        format!(", rq_psn {}", show::psn(i.rq_psn))
    } else {
        String::new()
    };
    println!(
        "  state {}, path_mtu {}, dest_qp_num {}, sq_psn {}{rq}",
        i.state,
        i.path_mtu.map_or("?".to_string(), |m| m.to_string()),
        show::qpn(i.dest_qp_num),
        show::psn(i.sq_psn),
    );
    println!(
        "  max_rd_atomic {}, max_dest_rd_atomic {}, timeout {}, retry_cnt {}, rnr_retry {}, \
         min_rnr_timer {}",
        i.max_rd_atomic, i.max_dest_rd_atomic, i.timeout, i.retry_cnt, i.rnr_retry, i.min_rnr_timer
    );
    println!("  access {}", i.access);
    // Two of these come from the kernel's connection manager, and changed in Linux 6.2
    // (course::kernel::RxeChange): rdma_cm's RoCE packet lifetime, and the FLUSH rights.
    let life = RxeChange::CmaPacketLifetime16;
    println!(
        "  timeout {t} (4.096 us x 2^{t} a try): rdma_cm's RoCE packet lifetime + 1; the \
         lifetime is 16 from Linux {} on, 18 before",
        life.since(),
        t = i.timeout,
    );
    if i.access.contains(AccessFlags::FLUSH_GLOBAL) {
        println!(
            "  IBV_ACCESS_FLUSH_*: the kernel's CM adds them on a device that can execute RDMA \
             FLUSH, as rxe can from Linux {} on",
            RxeChange::CmFlushAccess.since()
        );
    }
    Ok(i)
}

/// After ESTABLISHED: librdmacm moved the QP to RTS; check it, and let the type say so.
pub(crate) fn established(c: Conn) -> Result<Conn<state::Rts>> {
    let st = c.qp.state().or_fail("ibv_query_qp")?;
    expect(st == QpState::Rts, || {
        format!("after ESTABLISHED the QP is in {st}, not RTS")
    })?;
    Ok(Conn {
        qp: c.qp.assume_state::<state::Rts>(),
        cq: c.cq,
        mr: c.mr,
        _pd: c._pd,
        id: c.id,
    })
}

/// Polls exactly `n` completions, every one successful.
pub(crate) fn complete(
    cq: &CompletionQueue,
    n: usize,
    t: Duration,
    what: &str,
) -> Result<Vec<WorkCompletion>> {
    let mut wcs = vec![WorkCompletion::default(); n];
    cq.poll_exact(&mut wcs, t)
        .or_fail_with(|| format!("waiting for {what}"))?;
    for wc in &wcs {
        wc.ok().or_fail_with(|| format!("{what} failed"))?;
    }
    Ok(wcs)
}

/// After `rdma_disconnect`: the QP is in ERR and every posted request comes back flushed.
pub(crate) fn drain<S: QpTypeState>(
    role: &str,
    step: u32,
    c: &Conn<S>,
    posted: usize,
    t: Duration,
) -> Result<()> {
    let st = c.qp.state().or_fail("ibv_query_qp")?;
    println!(
        "step {step}: {role}: rdma_disconnect -> our QP is now {st} (librdmacm's ibv_modify_qp to ERR)"
    );
    let mut wcs = vec![WorkCompletion::default(); posted];
    if posted > 0 {
        c.cq.poll_exact(&mut wcs, t)
            .or_fail("draining the flushed requests")?;
    }
    for wc in &wcs {
        println!("  flushed: wr_id {} {}", wc.wr_id, wc.status);
        expect(wc.status == WcStatus::WrFlushErr, || {
            format!("expected IBV_WC_WR_FLUSH_ERR, got {}", wc.status)
        })?;
    }
    expect(c.cq.poll_one().or_fail("poll")?.is_none(), || {
        "a completion left after the drain".into()
    })?;
    println!("  {posted} posted request(s) drained; the CQ is empty");
    Ok(())
}

pub(crate) fn event_line(role: &str, step: u32, call: &str, ev: &CmEvent) {
    println!("step {step}: {role}: {call} -> {ev}");
}

pub(crate) fn timewait(role: &str, step: u32, id: &CmId, t: Duration) -> Result<()> {
    let start = Instant::now();
    let ev = id
        .expect_event(CmEventType::TimewaitExit, t)
        .or_fail("waiting for TIMEWAIT_EXIT")?;
    println!(
        "step {step}: {role}: {ev} after {}: the QP may now be destroyed or reused",
        show::elapsed(start.elapsed())
    );
    Ok(())
}

/// Waits for one completion; meanwhile a DISCONNECTED on the id ends the wait (`None`).
pub(crate) fn wc_or_disconnect<S: QpTypeState>(
    c: &Conn<S>,
    t: Duration,
) -> Result<Option<WorkCompletion>> {
    let deadline = Instant::now() + t;
    loop {
        if let Some(wc) = c.cq.poll_one().or_fail("ibv_poll_cq")? {
            wc.ok().or_fail("a work request failed")?;
            return Ok(Some(wc));
        }
        match c.id.get_event(Duration::from_millis(1)) {
            Ok(CmEvent::Disconnected) => return Ok(None),
            Ok(ev) => return Err(format!("unexpected event {ev}").into()),
            Err(lab::Error::EventTimeout { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        expect(Instant::now() < deadline, || {
            format!("no completion within {t:?}")
        })?;
    }
}

pub(crate) fn post_recv<S: QpTypeState>(
    c: &Conn<S>,
    wr_id: u64,
    range: std::ops::Range<usize>,
) -> Result {
    let s = c.mr.sge(range);
    c.qp.post_recv_one(RecvWr::new(wr_id, std::slice::from_ref(&s)))
        .or_fail("ibv_post_recv")
}

pub(crate) fn post(c: &Conn<state::Rts>, wr: SendWr<'_>) -> Result {
    c.qp.post_send_one(wr).or_fail("ibv_post_send")
}
