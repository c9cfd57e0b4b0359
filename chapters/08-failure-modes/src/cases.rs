//! The cases, one file each, in the order of `--list`.

pub mod bad_rkey;
pub mod cq_overflow;
pub mod cross_pd;
pub mod deregistered_region;
pub mod flush_on_error;
pub mod memlock;
pub mod mtu_too_large;
pub mod on_the_wire;
pub mod out_of_bounds;
pub mod peer_gone;
pub mod post_before_rts;
pub mod recv_cq_overflow;
pub mod recv_queue_full;
pub mod remote_access;
pub mod rnr_retry;
pub mod skip_rtr;
pub mod unregistered_lkey;
pub mod wrong_gid_index;

use course::Outcome as Result;
use course::show;
use lab::*;

use crate::report::Report;
use crate::rig::{Pair, must_wc};

/// The remote-error cases share one shape: B posts a "sentinel" RECV (an RDMA WRITE never
/// consumes a RECV, so if it completes it was flushed: proof that B's QP went to ERR), A
/// posts one RDMA WRITE that must fail with `want`, then both QP states are checked.
pub(crate) fn write_must_fail(
    r: &mut Report,
    p: &Pair,
    sentinel: &MemoryRegion,
    write: SendWr<'_>,
    want: WcStatus,
) -> Result<()> {
    let dst = [sentinel.sge(0..64)];
    p.b.post_recv_one(RecvWr::new(100, &dst))?;
    p.a.post_send_one(write)?;
    let wc = must_wc(&p.cq_a, "A's RDMA WRITE")?;
    r.status("A's completion", &wc, want);
    r.check("A's QP state", p.a.state()?, QpState::Err);
    r.check("B's QP state", p.b.state()?, QpState::Err);
    let wc = must_wc(&p.cq_b, "B's sentinel RECV")?;
    r.status("B's sentinel RECV (wr_id 100)", &wc, WcStatus::WrFlushErr);
    Ok(())
}

/// `addr=... len=... rkey=...` of a remote region.
pub(crate) fn region(rr: &RemoteRegion) -> String {
    format!(
        "{} len={} {}",
        show::addr(rr.addr),
        rr.len,
        show::rkey(rr.rkey)
    )
}
