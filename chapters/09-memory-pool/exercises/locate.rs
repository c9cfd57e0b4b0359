//! # Exercise 09-locate: the bounds check that turns `write(block, offset, data)` into one WRITE
//!
//! From chapter 09's README, "The verbs": the block table (`(addr, len, rkey)` per block) and
//! bounds checked before posting.
//!
//! The pool is one MR cut into equal blocks, so its rkey opens all of them: the device checks
//! a WRITE against the MR, never against a block. A WRITE that runs past its block's end lands
//! in the next block and completes with `IBV_WC_SUCCESS`. Your check is the only guard.
//!
//! The check calls `locate` for good and bad requests against a real pool on the lab's rxe
//! device, posts one RDMA WRITE for each `Some`, and then looks at every byte of the pool.
//!
//! Steps:
//! 1. The block's entry in `table`; `None` when there is no block `block`.
//! 2. `None` unless `offset + len` fits in the block's `len` (careful: `offset` may be huge,
//!    and `offset + len` must not overflow; a request ending exactly at the end fits).
//! 3. The remote address (`addr + offset`) and the rkey of the WRITE.
//!
//! Check it: `cargo lab exercise check <id>` with the id 09-locate, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use course::exchange::RemoteRegion;

/// Where `len` bytes at `offset` in block `block` are: `(remote address, rkey)`, or `None`
/// when they are not all inside that block.
pub fn locate(table: &[RemoteRegion], block: usize, offset: u64, len: u64) -> Option<(u64, u32)> {
    let _ = (table, block, offset, len);
    todo!("step 1: the block's entry in the table")
}
