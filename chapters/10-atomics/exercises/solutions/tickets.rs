//! Reference solution of exercise 10-tickets (see `../tickets.rs` for the task).

use crate::Dispenser;
use lab::{AccessFlags, MemoryRegion, ProtectionDomain, SendWr};

/// REMOTE_ATOMIC lets a peer's atomics at the region: rxe's responder looks its rkey up with
/// the access the operation needs and refuses a region without it (the kernel's
/// drivers/infiniband/sw/rxe/rxe_resp.c, `check_rkey`, through rxe_mr.c `lookup_mr`).
/// LOCAL_WRITE: the kernel refuses REMOTE_WRITE or REMOTE_ATOMIC without it, EINVAL
/// (`ib_check_mr_access` in include/rdma/ib_verbs.h).
pub fn register_counter(pd: &ProtectionDomain) -> lab::Result<MemoryRegion> {
    pd.reg_mr(8, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC)
}

/// The device adds 1 and returns the old value, indivisibly with respect to every other
/// atomic through it: no two clients can get the same ticket.
pub fn take_ticket(d: &Dispenser) -> lab::Result<u64> {
    let sge = d.staging.sge(0..8);
    d.qp.post_send_one(SendWr::fetch_add(
        1,
        &sge,
        d.counter.addr,
        d.counter.rkey,
        1,
    ))?;
    d.cq.wait_one(d.wait)?.ok()?;
    d.staging.read_u64(0)
}
