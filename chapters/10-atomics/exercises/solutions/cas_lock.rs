//! Reference solution of exercise 10-cas-lock (see `../cas_lock.rs` for the task).

use crate::Lock;

/// The CAS returns the old value: 0 means the word was free and now holds `me`.
pub fn acquire(lock: &Lock, me: u64) -> lab::Result<()> {
    while lock.compare_swap(0, me)? != 0 {
        std::hint::spin_loop();
    }
    Ok(())
}

/// A CAS (not a plain WRITE of 0) also checks that the lock was ours.
pub fn release(lock: &Lock, me: u64) -> lab::Result<()> {
    match lock.compare_swap(me, 0)? {
        old if old == me => Ok(()),
        old => Err(lab::Error::InvalidArgument(
            format!("release by {me}: the lock word held {old}").into(),
        )),
    }
}
