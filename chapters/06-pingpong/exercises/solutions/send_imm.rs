//! Reference solution of exercise 06-send-imm (see `../send_imm.rs` for the task).

use lab::{CompletionQueue, MemoryRegion, QueuePair, SendWr};
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(5);

/// `send_with_imm` takes the tag in host order and stores it in network order, as the verbs
/// want it (`imm_data` is a `__be32`).
pub fn send_tagged(
    qp: &QueuePair,
    cq: &CompletionQueue,
    buf: &MemoryRegion,
    len: usize,
    tag: u32,
) -> lab::Result<()> {
    let sge = [buf.sge(..len)];
    qp.post_send_one(SendWr::send_with_imm(2, &sge, tag))?;
    cq.wait_one(WAIT)?.ok()?;
    Ok(())
}

/// `imm()` is the immediate only when the completion's flags have IBV_WC_WITH_IMM.
pub fn receive_tagged(cq: &CompletionQueue) -> lab::Result<(Option<u32>, u32)> {
    let wc = cq.wait_one(WAIT)?.ok()?;
    Ok((wc.imm(), wc.byte_len))
}
