//! `enum ibv_access_flags`: what a memory region (or a queue pair) allows.

use crate::flag_set;

flag_set! {
    /// `enum ibv_access_flags`: what the memory (or a QP) allows (`ibv_reg_mr(3)`).
    ///
    /// `REMOTE_WRITE` and `REMOTE_ATOMIC` require `LOCAL_WRITE` too: without it `ibv_reg_mr`
    /// fails with EINVAL (the NIC must be allowed to write the memory locally to serve them).
    pub struct AccessFlags;
    /// The NIC may write this memory for local operations (RECV, READ responses, atomics).
    LOCAL_WRITE = 1 => "IBV_ACCESS_LOCAL_WRITE";
    /// A peer may RDMA WRITE into it (needs `LOCAL_WRITE`).
    REMOTE_WRITE = 2 => "IBV_ACCESS_REMOTE_WRITE";
    /// A peer may RDMA READ from it.
    REMOTE_READ = 4 => "IBV_ACCESS_REMOTE_READ";
    /// A peer may do atomics on it (needs `LOCAL_WRITE`).
    REMOTE_ATOMIC = 8 => "IBV_ACCESS_REMOTE_ATOMIC";
    /// Memory windows may be bound to it.
    MW_BIND = 16 => "IBV_ACCESS_MW_BIND";
    /// Remote addresses are offsets from the start of the region.
    ZERO_BASED = 32 => "IBV_ACCESS_ZERO_BASED";
    /// On-demand paging (not supported by rxe).
    ON_DEMAND = 64 => "IBV_ACCESS_ON_DEMAND";
    /// The memory is backed by huge pages.
    HUGETLB = 128 => "IBV_ACCESS_HUGETLB";
    /// A peer may FLUSH it to global visibility (`IBV_ACCESS_FLUSH_GLOBAL`, 1 << 8: named in
    /// rdma-core's verbs.h after 44, which rdma-sys is built from).
    FLUSH_GLOBAL = 256 => "IBV_ACCESS_FLUSH_GLOBAL";
    /// A peer may FLUSH it to persistence (`IBV_ACCESS_FLUSH_PERSISTENT`, 1 << 9).
    FLUSH_PERSISTENT = 512 => "IBV_ACCESS_FLUSH_PERSISTENT";
    /// Relaxed PCI ordering (accepted and ignored by rxe).
    RELAXED_ORDERING = 1048576 => "IBV_ACCESS_RELAXED_ORDERING";
}

impl AccessFlags {
    /// `LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC`: everything the course's
    /// one-sided chapters need.
    pub const ALL_REMOTE: AccessFlags = AccessFlags(1 | 2 | 4 | 8);
}
