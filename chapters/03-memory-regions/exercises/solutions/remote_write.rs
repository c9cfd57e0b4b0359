//! Reference solution of exercise 03-remote-write (see `../remote_write.rs` for the task).

use lab::{AccessFlags, MemoryRegion, ProtectionDomain};

/// REMOTE_WRITE lets a peer write; rxe (like every provider) also requires LOCAL_WRITE with
/// it, or `ibv_reg_mr` fails with EINVAL.
pub fn target_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
}

pub fn register_target(pd: &ProtectionDomain, len: usize) -> lab::Result<MemoryRegion> {
    pd.reg_mr(len, target_access())
}
