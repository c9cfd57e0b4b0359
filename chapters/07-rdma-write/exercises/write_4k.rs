//! # Exercise 07-write-4k: one 4 KiB RDMA WRITE at path MTU 1024
//!
//! From chapter 07's README, "The verbs" (`IBV_WR_RDMA_WRITE`, `wr.rdma.remote_addr`,
//! `wr.rdma.rkey`), and chapter 06's 4 KiB message split by the path MTU.
//!
//! The check runs on the pair (two kernels and a wire between them): a server on node a
//! exposes 4 KiB and sends you its endpoint; your code on node b connects to it and writes.
//! The wire is recorded, and the check reads it: exactly `RDMA_WRITE_FIRST`, two
//! `RDMA_WRITE_MIDDLE`, `RDMA_WRITE_LAST`, then one `ACKNOWLEDGE` for the whole message.
//!
//! Steps:
//! 1. RTR toward the server (`RtrAttr::new` with its QP number, first PSN and GID), with a
//!    path MTU of 1024 bytes (`Mtu::Mtu1024`).
//! 2. Post one RDMA WRITE of the whole of `src` (4096 bytes) to `dst` (`SendWr::write`, one
//!    SGE from `src.sge(..)`), signaled, and wait for its completion on `cq`.
//!
//! Check it: `cargo lab exercise check <id>` with the id 07-write-4k, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use course::exchange::{Endpoint, RemoteRegion};
use lab::{CompletionQueue, Gid, MemoryRegion, Mtu, QueuePair, RtrAttr, SendWr};
use std::time::Duration;

/// The RTR attributes toward the server.
pub fn rtr_attr(server: &Endpoint) -> RtrAttr {
    let _ = (server, Gid, Mtu::Mtu1024, RtrAttr::new);
    todo!("step 1: RTR toward the server at path MTU 1024")
}

/// One RDMA WRITE of all of `src` to `dst`; returns once it completed.
pub fn write_all(
    qp: &QueuePair,
    cq: &CompletionQueue,
    src: &MemoryRegion,
    dst: &RemoteRegion,
) -> lab::Result<()> {
    let _ = (qp, cq, src, dst, SendWr::write, Duration::from_secs(10));
    todo!("step 2: post the WRITE and wait for its completion")
}
