//! # Exercise 03-remote-write: register a buffer a peer may WRITE into
//!
//! From chapter 03's README, "The verbs" (`ibv_reg_mr` and its access flags).
//!
//! The check opens the lab's rxe device, calls [`register_target`] in a protection domain,
//! then makes a real remote RDMA WRITE into the region you registered, from a second queue
//! pair, through the rkey the region gives out. It expects `IBV_WC_SUCCESS` and the bytes in
//! your buffer.
//!
//! Steps:
//! 1. Choose the access flags: a peer may WRITE into this memory (and what does rxe require
//!    alongside that flag? chapter 03 shows `ibv_reg_mr` refusing it alone).
//! 2. Register `len` bytes in `pd` with those flags (`ProtectionDomain::reg_mr`).
//!
//! Check it: `cargo lab exercise check <id>` with the id 03-remote-write, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use lab::{AccessFlags, MemoryRegion, ProtectionDomain};

/// The access flags of a region a peer may RDMA WRITE into.
pub fn target_access() -> AccessFlags {
    todo!("step 1: the access flags a peer's WRITE needs")
}

/// Registers `len` bytes in `pd` that a peer may RDMA WRITE into.
pub fn register_target(pd: &ProtectionDomain, len: usize) -> lab::Result<MemoryRegion> {
    let access = target_access();
    let _ = (pd, len, access);
    todo!("step 2: register the region with those access flags")
}
