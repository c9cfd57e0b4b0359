//! # Exercise 06-pong: receive a SEND and send it back
//!
//! From chapter 06's README, "The verbs" (pre-posting the receive queue) and "Common
//! mistakes" (sending before the peer has posted its receives).
//!
//! The check connects two RC QPs on the lab's rxe device: its own (the ping side) and yours
//! (the pong side). Three times: it calls [`prepare`], SENDs a message to your QP and waits
//! for that SEND's completion, then calls [`answer`] and expects the same bytes back in its
//! own receive buffer. A SEND that finds no receive posted is answered with RNR NAKs, and
//! after `rnr_retry` (6) of them it completes with `IBV_WC_RNR_RETRY_EXC_ERR (13)`.
//!
//! Steps:
//! 1. `prepare`: post one receive (`QueuePair::post_recv_one`, `RecvWr::new`) with wr_id 1
//!    and one SGE covering the whole of `buf`.
//! 2. `answer`: wait for that receive's completion (`CompletionQueue::wait_one`, with a
//!    deadline: `std::time::Duration::from_secs(5)`); it must be a successful receive
//!    (`WorkCompletion::ok`), and its `byte_len` is the length of the message.
//! 3. `answer`: SEND those `byte_len` bytes of `buf` back (`SendWr::send`, wr_id 2), and wait
//!    for the SEND's completion.
//!
//! Check it: `cargo lab exercise check <id>` with the id 06-pong, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use lab::{CompletionQueue, MemoryRegion, QueuePair};

/// Makes `qp` ready for the next message: one receive into `buf`.
pub fn prepare(qp: &QueuePair, buf: &MemoryRegion) -> lab::Result<()> {
    let _ = (qp, buf);
    todo!("step 1: post one receive covering `buf`")
}

/// Takes the message the peer sent into `buf` (its completion on `cq`) and sends it back.
pub fn answer(qp: &QueuePair, cq: &CompletionQueue, buf: &MemoryRegion) -> lab::Result<()> {
    let _ = (qp, cq, buf);
    todo!("step 2: wait for the receive's completion")
}
