//! Reference solution of exercise 12-cm-connect (see `../cm_connect.rs` for the task).

use lab::cm::{CmEventType, CmId, ConnParam};
use lab::{QpInitAttr, QueuePair, state};
use std::net::SocketAddr;
use std::time::Duration;

pub fn connect(id: &CmId, dst: SocketAddr, t: Duration) -> lab::Result<QueuePair<state::Init>> {
    id.resolve_addr(None, dst, t)?;
    id.expect_event(CmEventType::AddrResolved, t)?;
    id.resolve_route(t)?;
    id.expect_event(CmEventType::RouteResolved, t)?;
    let ctx = id.context()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let qp = id.create_qp(&pd, &QpInitAttr::rc(&cq, &cq))?;
    id.connect(&ConnParam::default())?;
    id.expect_event(CmEventType::Established, t)?;
    Ok(qp)
}
