//! Reference solution of exercise 08-break-write (see `../break_write.rs` for the task).

use lab::RemoteRegion;

/// rkey + 1 is another key: rxe's responder finds no region under it (the kernel's
/// drivers/infiniband/sw/rxe/rxe_resp.c, `check_rkey`, through `lookup_mr`).
pub fn bad_rkey(target: RemoteRegion) -> (u64, u32) {
    (target.addr, target.rkey.wrapping_add(1))
}

/// `len` bytes starting `len / 2` before the end: half in, half out; rxe checks the whole
/// range against the region (rxe_mr.c, `mr_check_range`, from `check_rkey`) and writes none
/// of it.
pub fn out_of_bounds(target: RemoteRegion, len: u64) -> (u64, u32) {
    (target.addr + target.len - len / 2, target.rkey)
}
