//! # Exercise 11-write-chain: 128 RDMA WRITEs in one `ibv_post_send`, one of them signalled
//!
//! From chapter 11's README, "The verbs": a chain of WRs in one `ibv_post_send` (2a, 2b),
//! `IBV_SEND_SIGNALED` on one WR of the chain (2c), `IBV_SEND_INLINE` (2d).
//!
//! The check opens the lab's rxe device, creates an RC QP with your [`qp_attr`], connects it
//! to a second QP that owns a registered target region, and calls [`post_chain`] with
//! `CHAIN` x `WR_BYTES` bytes of plain, unregistered memory. Right after your post returns it
//! overwrites that memory. It expects: one `ibv_post_send` (one `write(2)` doorbell on its
//! thread), exactly one completion (`IBV_WC_SUCCESS`, the last WR's `wr_id`), and every byte
//! in the target as it was at the post.
//!
//! Steps:
//! 1. `qp_attr`: an RC QP (`QpInitAttr::rc`) whose send queue holds the whole chain
//!    (`max_send_wr`) and whose WRs may carry `WR_BYTES` inline (`max_inline_data`); the
//!    defaults (64 and 64) are too small for both. `sq_sig_all` stays off.
//! 2. `chain`: one inline RDMA WRITE per SGE (`SendWr::write_inline`), WR `i` with `wr_id`
//!    `i` at `target.addr + i * WR_BYTES`; every WR unsignalled but the last.
//! 3. `post_chain`: cut `data` into `WR_BYTES`-byte inline SGEs (`InlineSge::new`: the
//!    provider copies the bytes during the post, so they need no registration and may be
//!    reused as soon as it returns), build the chain and post it with one `QueuePair::post_send`.
//!
//! Check it: `cargo lab exercise check <id>` with the id 11-write-chain, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use crate::{CHAIN, WR_BYTES};
use lab::{CompletionQueue, InlineSge, QpInitAttr, QueuePair, RemoteRegion, SendWr};

/// The attributes of the QP the chain is posted on; `cq` is its send and receive CQ.
pub fn qp_attr(cq: &CompletionQueue) -> QpInitAttr<'_> {
    let _ = (cq, CHAIN, WR_BYTES);
    todo!("step 1: a send queue for CHAIN WRs and WR_BYTES of inline data")
}

/// One inline RDMA WRITE per SGE into `target`, only the last one signalled.
pub fn chain<'a>(sges: &'a [InlineSge<'a>], target: RemoteRegion) -> Vec<SendWr<'a>> {
    let _ = (sges, target);
    todo!("step 2: the chain of WRITEs, only the last signalled")
}

/// Writes `data` (CHAIN x WR_BYTES bytes) into `target` with one `ibv_post_send`.
pub fn post_chain(qp: &QueuePair, data: &[u8], target: RemoteRegion) -> lab::Result<()> {
    let _ = (qp, data, target);
    todo!("step 3: inline SGEs over data, the chain, one post_send")
}
