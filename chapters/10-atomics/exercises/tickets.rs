//! # Exercise 10-tickets: a ticket dispenser of RDMA fetch-and-add
//!
//! From chapter 10's README, "The verbs" (`IBV_WR_ATOMIC_FETCH_AND_ADD`,
//! `IBV_ACCESS_REMOTE_ATOMIC`) and "Common mistakes".
//!
//! The check opens the lab's rxe device and calls your [`register_counter`] for the shared
//! 8-byte counter. Three clients, each a thread with its own RC QP, then take 100 tickets
//! each through your [`take_ticket`]. Every ticket is the counter's value before the add, so
//! the 301 tickets (the check takes one first on its own) must be exactly 0..=300, each once,
//! each client's strictly increasing, and the counter must end at 301.
//!
//! Steps:
//! 1. `register_counter`: register 8 bytes in `pd` that a peer's atomics may update (which
//!    access flag allows them? chapter 08's `remote-access` case shows what is refused).
//! 2. `take_ticket`: post one `SendWr::fetch_add` that adds 1 to the counter at
//!    `d.counter` (address and rkey), with `d.staging.sge(0..8)` as the place the old value
//!    lands; wait for its completion (`d.cq.wait_one(d.wait)`, then `.ok()`), and return the
//!    old value (`d.staging.read_u64(0)`).
//!
//! Check it: `cargo lab exercise check <id>` with the id 10-tickets, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use crate::Dispenser;
use lab::{MemoryRegion, ProtectionDomain};

/// Registers the 8-byte counter in `pd`: the clients' FETCH_AND_ADDs must be allowed on it.
pub fn register_counter(pd: &ProtectionDomain) -> lab::Result<MemoryRegion> {
    let _ = pd;
    todo!("step 1: register 8 bytes with the access flags a peer's atomics need")
}

/// Takes the next ticket: adds 1 to the shared counter and returns its value before the add.
pub fn take_ticket(d: &Dispenser) -> lab::Result<u64> {
    let _ = d;
    todo!("step 2: one FETCH_AND_ADD of 1 on the counter; return the old value")
}
