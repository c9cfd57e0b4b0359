//! Memory regions (`ibv_reg_mr(3)`, `ibv_dereg_mr(3)`) and their access flags.
//!
//! Registering memory pins its pages and gives two keys: the **lkey**, which local work
//! requests put in their scatter/gather entries, and the **rkey**, which a peer needs (with the
//! address) to read, write or do atomics on this memory. Pinned memory counts against
//! `RLIMIT_MEMLOCK` (`ulimit -l`); going over it makes `ibv_reg_mr` fail with ENOMEM.

use std::alloc::Layout;
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::os::raw::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use crate::error::{Errno, Error, Hint, HintCode, Result, Verb, ptr, rc, report_drop_failure};
use crate::pd::{PdInner, ProtectionDomain};
use crate::wr::Sge;

pub use contracts::verbs::AccessFlags;

/// The system page size (`sysconf(_SC_PAGESIZE)`).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// The `RLIMIT_MEMLOCK` limits (`getrlimit(2)`): (soft, hard) in bytes, `None` = unlimited.
/// Registered memory counts against the soft limit unless the process has CAP_IPC_LOCK.
pub fn memlock_limit() -> Result<(Option<u64>, Option<u64>)> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 {
        return Err(Error::Os {
            call: "getrlimit(RLIMIT_MEMLOCK)",
            errno: Errno::last(),
        });
    }
    let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Ok((f(rl.rlim_cur), f(rl.rlim_max)))
}

/// Sets the `RLIMIT_MEMLOCK` limits of this process (`setrlimit(2)`; `None` = unlimited), as
/// `ulimit -l` does. An unprivileged process may lower them, not raise the hard limit. Root
/// ignores the limit when registering (CAP_IPC_LOCK): to see ENOMEM from `ibv_reg_mr`, run as
/// an unprivileged user (e.g. a child started with `std::os::unix::process::CommandExt::uid`).
pub fn set_memlock_limit(soft: Option<u64>, hard: Option<u64>) -> Result<()> {
    let f = |v: Option<u64>| v.unwrap_or(libc::RLIM_INFINITY);
    let rl = libc::rlimit {
        rlim_cur: f(soft),
        rlim_max: f(hard),
    };
    // SAFETY: `rl` is a valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) } != 0 {
        return Err(Error::Os {
            call: "setrlimit(RLIMIT_MEMLOCK)",
            errno: Errno::last(),
        });
    }
    Ok(())
}

enum Buffer {
    /// Allocated by `lab`: page-aligned and zeroed.
    Aligned { ptr: NonNull<u8>, layout: Layout },
    /// A caller's buffer, moved in (`Box<[u8]>` from a `Vec`).
    Boxed { ptr: NonNull<u8>, len: usize },
    /// Anonymous huge pages from `mmap(2)` with `MAP_HUGETLB` ([`ProtectionDomain::reg_mr_huge`]).
    Mapped { ptr: NonNull<u8>, len: usize },
}

/// A registered memory region: `struct ibv_mr` (`ibv_reg_mr(3)`) plus the memory it covers,
/// which it owns (so the memory cannot be freed while the NIC may still use it).
///
/// The memory may be changed by the NIC at any time while registered with `LOCAL_WRITE` or
/// `REMOTE_WRITE` (a RECV landing, a peer's RDMA WRITE). Read it after the completion that
/// tells you it changed; [`MemoryRegion::read_u64`] / [`MemoryRegion::read_into`] use volatile
/// reads for memory a peer writes without telling you (chapter 07's server).
pub struct MemoryRegion {
    mr: NonNull<ibv_mr>,
    buf: Buffer,
    len: usize,
    access: AccessFlags,
    pd: Arc<PdInner>,
}

// SAFETY: the MR and its buffer are owned; verbs calls are thread-safe.
unsafe impl Send for MemoryRegion {}
// SAFETY: shared access only reads keys or the buffer through raw pointers.
unsafe impl Sync for MemoryRegion {}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#018x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#010x}", self.lkey()))
            .field("rkey", &format_args!("{:#010x}", self.rkey()))
            .field("access", &self.access)
            .finish()
    }
}

impl ProtectionDomain {
    /// Registers `len` bytes of fresh, zeroed, page-aligned memory (`ibv_reg_mr(3)`).
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        let layout = Layout::from_size_align(len.max(1), page_size())
            .map_err(|e| Error::InvalidArgument(format!("buffer of {len} bytes: {e}").into()))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(p) = NonNull::new(p) else {
            std::alloc::handle_alloc_error(layout)
        };
        let buf = Buffer::Aligned { ptr: p, layout };
        self.register(buf, p, len, access)
    }

    /// Registers a caller's buffer, which the region takes ownership of (`ibv_reg_mr(3)`); get
    /// it back with [`MemoryRegion::dereg_into_vec`].
    pub fn reg_mr_vec(&self, buf: Vec<u8>, access: AccessFlags) -> Result<MemoryRegion> {
        let len = buf.len();
        let b = Box::into_raw(buf.into_boxed_slice()) as *mut u8;
        // SAFETY: Box::into_raw never returns null (a zero-length box gives a dangling, non-null
        // pointer).
        let p = unsafe { NonNull::new_unchecked(b) };
        self.register(Buffer::Boxed { ptr: p, len }, p, len, access)
    }

    /// Registers `len` bytes of fresh memory backed by huge pages (2 MiB on x86-64): an
    /// anonymous `mmap(2)` with `MAP_HUGETLB`, zeroed by the kernel, then `ibv_reg_mr(3)`.
    /// The kernel must have huge pages reserved (`/proc/sys/vm/nr_hugepages`); without them
    /// the mapping fails with `ENOMEM (12)`.
    pub fn reg_mr_huge(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        const HUGE: usize = 2 << 20;
        let map_len = len.max(1).div_ceil(HUGE) * HUGE;
        // SAFETY: an anonymous private mapping at an address the kernel picks; no file, no
        // existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::Os {
                call: "mmap(MAP_HUGETLB) (are huge pages reserved in /proc/sys/vm/nr_hugepages?)",
                errno: Errno::last(),
            });
        }
        let Some(p) = NonNull::new(p as *mut u8) else {
            return Err(Error::InvalidArgument(
                "mmap returned a null mapping".into(),
            ));
        };
        self.register(
            Buffer::Mapped {
                ptr: p,
                len: map_len,
            },
            p,
            len,
            access,
        )
    }

    fn register(
        &self,
        buf: Buffer,
        p: NonNull<u8>,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        // SAFETY: `p..p+len` is memory we own for the lifetime of the MR (it is freed only
        // after ibv_dereg_mr); the PD is allocated.
        let mr = unsafe {
            ibv_reg_mr(
                self.inner.pd.as_ptr(),
                p.as_ptr() as *mut c_void,
                len,
                access.bits() as i32,
            )
        };
        match ptr(mr, |errno| {
            Error::failed(Verb::RegMr, errno)
                .args(format!("len {len}, access {access}"))
                .with_hint(reg_mr_hint(errno, len, access))
        }) {
            Ok(mr) => Ok(MemoryRegion {
                mr,
                buf,
                len,
                access,
                pd: self.inner.clone(),
            }),
            Err(e) => {
                free_buffer(&buf);
                Err(e)
            }
        }
    }
}

fn reg_mr_hint(errno: Errno, len: usize, access: AccessFlags) -> Option<Hint> {
    let needs_lw = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    if errno.0 == libc::EINVAL
        && !(access & needs_lw).is_empty()
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Some(Hint::new(HintCode::RemoteWithoutLocalWrite));
    }
    if errno.0 == libc::ENOMEM {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `rl` is a valid out-pointer.
        let limit = if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } == 0 {
            if rl.rlim_cur == libc::RLIM_INFINITY {
                "unlimited".to_string()
            } else {
                format!("{} KiB", rl.rlim_cur / 1024)
            }
        } else {
            "unknown".to_string()
        };
        return Some(Hint::detailed(
            HintCode::MemlockLimit,
            format!(
                "registering pins memory, which counts against RLIMIT_MEMLOCK (`ulimit -l`, now \
                 {limit}); {len} bytes did not fit. Raise it (`ulimit -l unlimited`, \
                 /etc/security/limits.conf `memlock`) or run with CAP_IPC_LOCK"
            ),
        ));
    }
    None
}

fn free_buffer(buf: &Buffer) {
    match *buf {
        // SAFETY: allocated in `reg_mr` with exactly this layout, freed once.
        Buffer::Aligned { ptr, layout } => unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) },
        // SAFETY: came from Box::into_raw of a boxed slice of `len` bytes, freed once.
        Buffer::Boxed { ptr, len } => unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                ptr.as_ptr(),
                len,
            )));
        },
        // SAFETY: mapped in `reg_mr_huge` with exactly this length, unmapped once.
        Buffer::Mapped { ptr, len } => unsafe {
            libc::munmap(ptr.as_ptr() as *mut c_void, len);
        },
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.len == usize::MAX {
            return; // already deregistered by `dereg`
        }
        // SAFETY: the MR is registered and deregistered exactly once.
        let ret = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        match rc(ret, |errno| Error::failed(Verb::DeregMr, errno)) {
            Ok(()) => free_buffer(&self.buf),
            Err(e) => {
                // The NIC may still write the memory: leak it rather than free it.
                report_drop_failure("ibv_dereg_mr (the buffer is leaked)", &e);
            }
        }
    }
}

impl MemoryRegion {
    fn base(&self) -> *mut u8 {
        match self.buf {
            Buffer::Aligned { ptr, .. }
            | Buffer::Boxed { ptr, .. }
            | Buffer::Mapped { ptr, .. } => ptr.as_ptr(),
        }
    }

    pub(crate) fn raw(&self) -> *mut ibv_mr {
        self.mr.as_ptr()
    }

    /// The start address (`mr->addr`), what a peer puts in `remote_addr`.
    pub fn addr(&self) -> u64 {
        self.base() as u64
    }
    /// The length in bytes (`mr->length`).
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The local key (`mr->lkey`), for this side's scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is registered while `self` lives.
        unsafe { (*self.mr.as_ptr()).lkey }
    }
    /// The remote key (`mr->rkey`), for a peer's one-sided operations.
    pub fn rkey(&self) -> u32 {
        // SAFETY: the MR is registered while `self` lives.
        unsafe { (*self.mr.as_ptr()).rkey }
    }
    /// The access flags it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// The kernel handle of the PD this region belongs to (see [`ProtectionDomain::handle`]).
    pub fn pd_handle(&self) -> u32 {
        // SAFETY: the PD outlives this MR (we hold an Arc).
        unsafe { (*self.pd.pd.as_ptr()).handle }
    }
    /// What to send a peer for one-sided operations: address, length, rkey
    /// ([`RemoteRegion`], which the lab's exchange message carries).
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            addr: self.addr(),
            len: self.len as u64,
            rkey: self.rkey(),
        }
    }

    /// The memory as a slice. Valid to read once a completion says the NIC is done with it.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: base..base+len is owned memory, initialised (zeroed or from a Vec).
        unsafe { std::slice::from_raw_parts(self.base(), self.len) }
    }
    /// The memory as a mutable slice, to fill before posting.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access on the Rust side.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.len) }
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::InvalidArgument(
                format!(
                    "bytes {offset}..{offset}+{len} are outside the memory region of {} bytes",
                    self.len
                )
                .into(),
            )),
        }
    }

    /// Copies `out.len()` bytes at `offset` out with volatile reads (memory a peer may write
    /// with RDMA WRITE without any completion on this side).
    pub fn read_into(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: in bounds (checked above) of owned, initialised memory.
            *b = unsafe { std::ptr::read_volatile(self.base().add(offset + i)) };
        }
        Ok(())
    }

    /// Copies `data` in at `offset` (volatile writes, for memory a peer may read).
    pub fn write_from(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        for (i, b) in data.iter().enumerate() {
            // SAFETY: in bounds (checked above) of owned memory; only the NIC shares it.
            unsafe { std::ptr::write_volatile(self.base().add(offset + i), *b) };
        }
        Ok(())
    }

    /// Reads the host-order u64 at `offset` (volatile; 8-byte aligned offsets only), e.g. the
    /// old value an atomic wrote back, or a counter peers update with atomics.
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        self.check(offset, 8)?;
        let p = self.base().wrapping_add(offset);
        if (p as usize) & 7 != 0 {
            return Err(Error::InvalidArgument(
                format!("offset {offset} is not 8-byte aligned").into(),
            ));
        }
        // SAFETY: in bounds and 8-byte aligned (checked).
        Ok(unsafe { std::ptr::read_volatile(p as *const u64) })
    }

    /// Writes a host-order u64 at `offset` (volatile; 8-byte aligned offsets only).
    pub fn write_u64(&self, offset: usize, v: u64) -> Result<()> {
        self.check(offset, 8)?;
        let p = self.base().wrapping_add(offset);
        if (p as usize) & 7 != 0 {
            return Err(Error::InvalidArgument(
                format!("offset {offset} is not 8-byte aligned").into(),
            ));
        }
        // SAFETY: in bounds and 8-byte aligned (checked).
        unsafe { std::ptr::write_volatile(p as *mut u64, v) };
        Ok(())
    }

    /// A scatter/gather entry for bytes `range` of this region (addr, length, lkey).
    ///
    /// # Panics
    /// If the range is outside the region (like slice indexing); see [`MemoryRegion::try_sge`].
    pub fn sge(&self, range: impl RangeBounds<usize>) -> Sge {
        let (s, e) = self.bounds(range);
        self.try_sge(s..e).unwrap_or_else(|| {
            panic!(
                "sge {s}..{e} out of bounds of a memory region of {} bytes",
                self.len
            )
        })
    }

    /// Like [`MemoryRegion::sge`], `None` if out of bounds.
    pub fn try_sge(&self, range: impl RangeBounds<usize>) -> Option<Sge> {
        let (s, e) = self.bounds(range);
        if s > e || e > self.len || (e - s) > u32::MAX as usize {
            return None;
        }
        Some(Sge::raw(
            self.addr() + s as u64,
            (e - s) as u32,
            self.lkey(),
        ))
    }

    fn bounds(&self, range: impl RangeBounds<usize>) -> (usize, usize) {
        let s = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let e = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        (s, e)
    }

    /// Deregisters now (`ibv_dereg_mr(3)`), reporting failure. The memory is freed afterwards.
    pub fn dereg(mut self) -> Result<()> {
        // SAFETY: the MR is registered; marking len usize::MAX stops Drop from deregistering
        // it again.
        let ret = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        let r = rc(ret, |errno| Error::failed(Verb::DeregMr, errno));
        if r.is_ok() {
            free_buffer(&self.buf);
        }
        // On failure the buffer is leaked: the NIC may still use it.
        self.len = usize::MAX;
        r
    }

    /// Deregisters now and gives the memory back as a `Vec` (`ibv_dereg_mr(3)`).
    pub fn dereg_into_vec(mut self) -> Result<Vec<u8>> {
        // SAFETY: as in `dereg`.
        let ret = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        let len = self.len;
        self.len = usize::MAX;
        rc(ret, |errno| Error::failed(Verb::DeregMr, errno))?;
        // SAFETY: base..base+len is owned, initialised memory; copied before it is freed.
        let v = unsafe { std::slice::from_raw_parts(self.base(), len) }.to_vec();
        free_buffer(&self.buf);
        Ok(v)
    }
}

/// A remote memory region (or one block of it) that the peer may access with one-sided
/// operations: RDMA WRITE/READ at `addr..addr+len` with `rkey`, or atomics on 8-byte words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RemoteRegion {
    /// Start address in the peer's address space (what `ibv_reg_mr` returned as `addr`).
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The remote key the peer's MR (or memory window) grants.
    pub rkey: u32,
}

impl RemoteRegion {
    /// The address one past the end, or `None` if `addr + len` overflows.
    pub fn end(&self) -> Option<u64> {
        self.addr.checked_add(self.len)
    }

    /// The remote address of `offset`, if `offset..offset+len` lies inside the region.
    /// Use it to bounds-check a one-sided operation before posting it.
    pub fn addr_of(&self, offset: u64, len: u64) -> Option<u64> {
        let stop = offset.checked_add(len)?;
        if stop > self.len {
            return None;
        }
        self.addr.checked_add(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_print_by_c_name() {
        let a = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        assert_eq!(
            a.to_string(),
            "IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE"
        );
        assert_eq!(AccessFlags::empty().to_string(), "0");
        assert_eq!(
            AccessFlags::from_bits(1 | 0x4000).to_string(),
            "IBV_ACCESS_LOCAL_WRITE | 0x4000"
        );
        assert!(AccessFlags::ALL_REMOTE.contains(AccessFlags::REMOTE_ATOMIC));
        assert_eq!(
            (AccessFlags::ALL_REMOTE - AccessFlags::LOCAL_WRITE).bits(),
            14
        );
    }

    #[test]
    fn access_flags_match_rdma_sys() {
        use rdma_sys::ibv_access_flags as A;
        assert_eq!(AccessFlags::LOCAL_WRITE.bits(), A::IBV_ACCESS_LOCAL_WRITE.0);
        assert_eq!(
            AccessFlags::REMOTE_WRITE.bits(),
            A::IBV_ACCESS_REMOTE_WRITE.0
        );
        assert_eq!(AccessFlags::REMOTE_READ.bits(), A::IBV_ACCESS_REMOTE_READ.0);
        assert_eq!(
            AccessFlags::REMOTE_ATOMIC.bits(),
            A::IBV_ACCESS_REMOTE_ATOMIC.0
        );
        assert_eq!(AccessFlags::MW_BIND.bits(), A::IBV_ACCESS_MW_BIND.0);
        assert_eq!(
            AccessFlags::RELAXED_ORDERING.bits(),
            A::IBV_ACCESS_RELAXED_ORDERING.0
        );
    }

    #[test]
    fn reg_mr_hints() {
        let code = |errno, access| reg_mr_hint(Errno(errno), 4096, access).map(|h| h.code());
        assert_eq!(
            code(22, AccessFlags::REMOTE_WRITE),
            Some(HintCode::RemoteWithoutLocalWrite)
        );
        assert_eq!(
            code(12, AccessFlags::LOCAL_WRITE),
            Some(HintCode::MemlockLimit)
        );
        assert_eq!(code(22, AccessFlags::LOCAL_WRITE), None);
        // The detailed hint says how many bytes did not fit.
        let h = reg_mr_hint(Errno(12), 1 << 20, AccessFlags::LOCAL_WRITE).unwrap();
        assert!(h.text().contains("1048576 bytes did not fit"), "{h}");
    }
}
