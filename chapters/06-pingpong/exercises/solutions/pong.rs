//! Reference solution of exercise 06-pong (see `../pong.rs` for the task).

use lab::{CompletionQueue, MemoryRegion, QueuePair, RecvWr, SendWr};
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(5);

/// The receive must be posted before the SEND arrives: the responder has nowhere to put it
/// otherwise, and answers with an RNR NAK.
pub fn prepare(qp: &QueuePair, buf: &MemoryRegion) -> lab::Result<()> {
    let sge = [buf.sge(..)];
    qp.post_recv_one(RecvWr::new(1, &sge))
}

pub fn answer(qp: &QueuePair, cq: &CompletionQueue, buf: &MemoryRegion) -> lab::Result<()> {
    let got = cq.wait_one(WAIT)?.ok()?;
    let sge = [buf.sge(..got.byte_len as usize)];
    qp.post_send_one(SendWr::send(2, &sge))?;
    cq.wait_one(WAIT)?.ok()?;
    Ok(())
}
