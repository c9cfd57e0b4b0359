//! # Exercise 02-same-pd: a queue pair and the memory it sends from, in one protection domain
//!
//! From chapter 02's README, "Common mistakes" (memory of another PD in a work request) and
//! "The verbs" (`ibv_alloc_pd`).
//!
//! The check calls your `build` on the lab's rxe device, connects your queue pair to a peer,
//! and SENDs "hello" from your memory region through it. The device checks the SGE's lkey
//! against the QP's PD when it fetches the data: the SEND must complete with
//! `IBV_WC_SUCCESS (0)` and the peer must receive the bytes.
//!
//! Steps:
//! 1. A protection domain (`Context::alloc_pd`) and a CQ of 16 entries (`Context::create_cq`).
//! 2. An RC queue pair in that PD, completing into that CQ (`QpInitAttr::rc`).
//! 3. A 4 KiB memory region (`reg_mr`, `LOCAL_WRITE`) that the QP may send from.
//!
//! Check it: `cargo lab exercise check <id>` with the id 02-same-pd, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

// `Objects` (what `build` hands back) is the check's: tests/exercises.rs.
use crate::Objects;
use lab::{AccessFlags, Context, QpInitAttr};

/// The objects the check sends through.
pub fn build(ctx: &Context) -> lab::Result<Objects> {
    let _ = (ctx, AccessFlags::LOCAL_WRITE, QpInitAttr::rc);
    todo!("step 1: the PD and the CQ (then step 2: the QP, step 3: the MR)")
}
