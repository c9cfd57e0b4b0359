//! Reference solution of exercise 11-write-chain (see `../write_chain.rs` for the task).

use crate::{CHAIN, WR_BYTES};
use lab::{CompletionQueue, InlineSge, QpInitAttr, QueuePair, RemoteRegion, SendWr};

/// rxe rounds `max_send_wr` up to 2^k - 1 (128 gives 255), never down: asking for the chain's
/// length is enough.
pub fn qp_attr(cq: &CompletionQueue) -> QpInitAttr<'_> {
    QpInitAttr::rc(cq, cq)
        .max_send_wr(CHAIN as u32)
        .max_inline_data(WR_BYTES as u32)
        .sq_sig_all(false)
}

/// `SendWr` is signalled by default: clear it on all but the last.
pub fn chain<'a>(sges: &'a [InlineSge<'a>], target: RemoteRegion) -> Vec<SendWr<'a>> {
    let last = sges.len().saturating_sub(1);
    sges.iter()
        .enumerate()
        .map(|(i, sge)| {
            let at = target.addr + (i * WR_BYTES) as u64;
            SendWr::write_inline(i as u64, std::slice::from_ref(sge), at, target.rkey)
                .signaled(i == last)
        })
        .collect()
}

/// One call, one chain: the provider copies each WR's inline bytes into the send queue and
/// rings the doorbell once.
pub fn post_chain(qp: &QueuePair, data: &[u8], target: RemoteRegion) -> lab::Result<()> {
    let sges: Vec<InlineSge<'_>> = data.chunks(WR_BYTES).map(InlineSge::new).collect();
    qp.post_send(&mut chain(&sges, target))
}
