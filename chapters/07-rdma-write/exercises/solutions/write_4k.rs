//! Reference solution of exercise 07-write-4k (see `../write_4k.rs` for the task).

use course::exchange::{Endpoint, RemoteRegion};
use lab::{CompletionQueue, Gid, MemoryRegion, Mtu, QueuePair, RtrAttr, SendWr};
use std::time::Duration;

pub fn rtr_attr(server: &Endpoint) -> RtrAttr {
    RtrAttr::new(server.qpn, server.psn, Gid(server.gid)).path_mtu(Mtu::Mtu1024)
}

pub fn write_all(
    qp: &QueuePair,
    cq: &CompletionQueue,
    src: &MemoryRegion,
    dst: &RemoteRegion,
) -> lab::Result<()> {
    let sge = [src.sge(0..src.len())];
    qp.post_send_one(SendWr::write(1, &sge, dst.addr, dst.rkey))?;
    cq.wait_one(Duration::from_secs(10))?.ok()?;
    Ok(())
}
