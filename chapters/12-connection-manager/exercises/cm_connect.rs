//! # Exercise 12-cm-connect: the client's rdma_cm connect sequence
//!
//! From chapter 12's README, "The verbs" (the event-to-verb map).
//!
//! The check runs on the pair: a server on node a listens on rdma_cm and accepts; your code on
//! node b connects `id` to it. Each call completes with an event, which you wait for (with
//! `id.expect_event(type, t)`) before the next call; the check then expects your QP in RTS,
//! moved there by rdma_cm alone, and the server's id ESTABLISHED.
//!
//! Steps:
//! 1. `id.resolve_addr(None, dst, t)`, then wait for `CmEventType::AddrResolved`: the id now
//!    has a device (`id.context()`).
//! 2. `id.resolve_route(t)`, then wait for `CmEventType::RouteResolved`.
//! 3. A PD and a CQ on the id's own device (`id.context()`), then `id.create_qp(&pd,
//!    &QpInitAttr::rc(&cq, &cq))`: rdma_cm makes the QP and moves it to INIT.
//! 4. `id.connect(&ConnParam::default())`, then wait for `CmEventType::Established`.
//!
//! Check it: `cargo lab exercise check <id>` with the id 12-cm-connect, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use lab::cm::{CmEventType, CmId, ConnParam};
use lab::{QpInitAttr, QueuePair, state};
use std::net::SocketAddr;
use std::time::Duration;

/// Connects `id` to the server at `dst`; returns the id's QP once the connection is
/// ESTABLISHED. Every wait takes at most `t`.
pub fn connect(id: &CmId, dst: SocketAddr, t: Duration) -> lab::Result<QueuePair<state::Init>> {
    let _ = (
        id,
        dst,
        t,
        CmEventType::AddrResolved,
        QpInitAttr::rc,
        ConnParam::default,
    );
    todo!("step 1: resolve the address and wait for ADDR_RESOLVED")
}
