//! # Exercise 10-cas-lock: a spinlock made of RDMA compare-and-swap
//!
//! From chapter 10's README, "The verbs" (`IBV_WR_ATOMIC_CMP_AND_SWP`) and "Common mistakes".
//!
//! The check opens the lab's rxe device and registers two 8-byte words: a lock (0: free) and
//! a counter. Three clients, each a thread with its own RC QP, each add 1 to the counter 200
//! times with a plain RDMA READ and WRITE, between your [`acquire`] and [`release`]. The
//! counter must end at exactly 600, the lock word must hold the client's token while it is
//! held and 0 after, and the check counts the CAS completions that swapped.
//!
//! Steps:
//! 1. `acquire`: CAS the lock word from 0 (free) to `me` (`Lock::compare_swap` returns the old
//!    value: the swap happened iff it equals `compare`); try again until it does.
//! 2. `release`: CAS it from `me` back to 0; an old value other than `me` means the lock was
//!    not yours: return an error (`lab::Error::InvalidArgument`).
//!
//! `Lock::compare_swap` posts one `IBV_WR_ATOMIC_CMP_AND_SWP` and waits for its completion;
//! it gives up with an error once the check's deadline has passed, so a spin always ends.
//!
//! Check it: `cargo lab exercise check <id>` with the id 10-cas-lock, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use crate::Lock;

/// Takes the lock for the client whose token is `me` (never 0), spinning until it is free.
pub fn acquire(lock: &Lock, me: u64) -> lab::Result<()> {
    let _ = (lock, me);
    todo!("step 1: CAS the lock word from 0 to `me` until the swap happens")
}

/// Gives the lock back; an error if `me` did not hold it.
pub fn release(lock: &Lock, me: u64) -> lab::Result<()> {
    let _ = (lock, me);
    todo!("step 2: CAS the lock word from `me` back to 0")
}
