//! # Exercise 08-break-write: make a working RDMA WRITE fail, the way the case names
//!
//! From chapter 08's README, "The cases": 2 `bad-rkey` and 3 `out-of-bounds`.
//!
//! The check connects two RC QPs on the lab's rxe device and registers a 4096-byte target
//! region with `LOCAL_WRITE | REMOTE_WRITE`. A WRITE of 128 bytes to the address and rkey of
//! [`RemoteRegion`] works. Your functions return the address and rkey of a WRITE that must
//! fail instead; the check posts it and expects `IBV_WC_REM_ACCESS_ERR (10)` and the target
//! untouched, not even the bytes inside the region.
//!
//! Steps:
//! 1. `bad_rkey`: the region's start, with a key that is not its rkey (case 2).
//! 2. `out_of_bounds`: the region's rkey, with an address where a `len`-byte WRITE starts
//!    inside the region but runs past its end (case 3: 64 bytes before the end).
//!
//! Check it: `cargo lab exercise check <id>` with the id 08-break-write, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use lab::RemoteRegion;

/// The remote address and rkey of a WRITE into `target` that rxe refuses: a wrong key.
pub fn bad_rkey(target: RemoteRegion) -> (u64, u32) {
    let _ = target;
    todo!("step 1: the region's address with a key that is not its rkey")
}

/// The remote address and rkey of a `len`-byte WRITE that starts inside `target` and runs
/// past its end.
pub fn out_of_bounds(target: RemoteRegion, len: u64) -> (u64, u32) {
    let _ = (target, len);
    todo!("step 2: an address 64 bytes before the region's end")
}
