//! # Exercise 06-send-imm: a SEND that carries a tag, and the receiver that reads it
//!
//! From chapter 06's README, "The verbs" (two-sided operations: what a receive's completion
//! tells its owner).
//!
//! `IBV_WR_SEND_WITH_IMM` is a SEND that also delivers a 32-bit immediate value: the receiver
//! finds it in the receive's completion, with `IBV_WC_WITH_IMM` in the completion's flags,
//! before it looks at the bytes. The check connects two RC QPs on the lab's rxe device and
//! posts every receive itself. Round 1: it calls [`send_tagged`] and reads the completion of
//! the receive your SEND consumed (its flags, its immediate, its bytes). Rounds 2 and 3: it
//! SENDs a tagged message, then a plain one, and calls [`receive_tagged`] after each: the
//! tagged one must give its tag, the plain one none.
//!
//! Steps:
//! 1. `send_tagged`: post one SEND of the first `len` bytes of `buf` carrying `tag`
//!    (`SendWr::send_with_imm`, wr_id 2). The verbs carry the immediate in network byte order
//!    (`imm_data` is a `__be32`); `lab` takes it in host order and converts it for you.
//! 2. `send_tagged`: wait for the SEND's completion on `cq` (`CompletionQueue::wait_one`, with
//!    a deadline: `std::time::Duration::from_secs(5)`); it must be successful
//!    (`WorkCompletion::ok`).
//! 3. `receive_tagged`: wait for the next completion on `cq` the same way; it is a receive.
//! 4. `receive_tagged`: its tag is valid only when its flags have `WcFlags::WITH_IMM`
//!    (`WorkCompletion::imm` tests it); return that tag, or `None`, and its `byte_len`.
//!
//! Check it: `cargo lab exercise check <id>` with the id 06-send-imm, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use lab::{CompletionQueue, MemoryRegion, QueuePair};

/// SENDs the first `len` bytes of `buf` on `qp` with `tag` as the immediate, and waits for the
/// SEND's completion on `cq`.
pub fn send_tagged(
    qp: &QueuePair,
    cq: &CompletionQueue,
    buf: &MemoryRegion,
    len: usize,
    tag: u32,
) -> lab::Result<()> {
    let _ = (qp, cq, buf, len, tag);
    todo!("step 1: post a SEND_WITH_IMM of `len` bytes of `buf` carrying `tag`")
}

/// Takes the next receive completion from `cq`: the message's tag (`None` when it came
/// without an immediate) and its length in bytes.
pub fn receive_tagged(cq: &CompletionQueue) -> lab::Result<(Option<u32>, u32)> {
    let _ = cq;
    todo!("step 3: wait for the receive's completion")
}
