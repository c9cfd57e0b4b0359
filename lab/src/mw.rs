//! Memory windows (`ibv_alloc_mw(3)`, `ibv_bind_mw(3)`, `IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`,
//! `ibv_dealloc_mw`).
//!
//! A memory window is a second, revocable rkey over part of a memory region: the region
//! (registered with `MW_BIND`) stays registered, while windows are bound to sub-ranges with
//! their own access rights and rkeys, handed to peers, and invalidated when the grant ends. An
//! rkey becomes a capability you can revoke without deregistering memory.
//!
//! * **Type 1**: bound with [`QueuePair::bind_mw`] (`ibv_bind_mw`); each bind gives a new
//!   rkey, and binding with length 0 unbinds.
//! * **Type 2** (what rxe offers besides type 1): bound by a work request
//!   ([`SendWr::bind_mw`], `IBV_WR_BIND_MW`) with an rkey you choose by bumping its low 8
//!   bits ([`MemoryWindow::next_rkey`], C's `ibv_inc_rkey`), and revoked by
//!   [`SendWr::local_inv`] (`IBV_WR_LOCAL_INV`) or by the peer with `SEND_WITH_INV`.

use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use rdma_sys::*;

use crate::error::{Errno, Error, Hint, HintCode, Result, Verb, rc, report_drop_failure};
use crate::flags::c_enum;
use crate::mr::{AccessFlags, MemoryRegion};
use crate::pd::{PdInner, ProtectionDomain};
use crate::qp::{QueuePair, state};
use crate::wr::{SendWr, Sge};

c_enum! {
    /// `enum ibv_mw_type`.
    pub enum MwType: u32, closed {
        /// Bound with `ibv_bind_mw`; rkey chosen by the library.
        Type1 = ibv_mw_type::IBV_MW_TYPE_1 => "IBV_MW_TYPE_1",
        /// Bound with an `IBV_WR_BIND_MW` work request; rkey chosen by the application.
        Type2 = ibv_mw_type::IBV_MW_TYPE_2 => "IBV_MW_TYPE_2",
    }
}

/// The rkey after `rkey`: the same index with the low 8 bits ("key") incremented, as C's
/// `ibv_inc_rkey` computes (without its overflow at `u32::MAX`).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// A memory window: `struct ibv_mw` (`ibv_alloc_mw(3)`). Keeps its PD alive; `Drop` calls
/// `ibv_dealloc_mw`.
pub struct MemoryWindow {
    mw: NonNull<ibv_mw>,
    kind: MwType,
    /// The rkey of the last bind posted through lab (type 2: chosen by the application).
    bound_rkey: AtomicU32,
    _pd: Arc<PdInner>,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for MemoryWindow {}
// SAFETY: as above; shared access reads plain fields or calls thread-safe verbs.
unsafe impl Sync for MemoryWindow {}

impl fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("type", &self.kind)
            .field("rkey", &format_args!("{:#010x}", self.rkey()))
            .finish()
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // SAFETY: the window is allocated and deallocated exactly once.
        let ret = unsafe { ibv_dealloc_mw(self.mw.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::failed(Verb::DeallocMw, errno)) {
            report_drop_failure("ibv_dealloc_mw", &e);
        }
    }
}

impl ProtectionDomain {
    /// Allocates a memory window (`ibv_alloc_mw(3)`).
    pub fn alloc_mw(&self, kind: MwType) -> Result<MemoryWindow> {
        // SAFETY: the PD is allocated. rdma-sys returns None when the provider lacks the op
        // and Some(NULL) when it fails (docs/rdma-sys-notes.md, note 7).
        let p = unsafe { ibv_alloc_mw(self.inner.pd.as_ptr(), kind.raw()) };
        let errno = Errno::last();
        let errno = if errno.0 != 0 {
            errno
        } else {
            Errno(libc::EOPNOTSUPP)
        };
        let mw = p.and_then(NonNull::new).ok_or_else(|| {
            Error::failed(Verb::AllocMw, errno).with_hint(Hint::new(HintCode::MwUnsupported))
        })?;
        // SAFETY: just allocated.
        let rkey = unsafe { (*mw.as_ptr()).rkey };
        Ok(MemoryWindow {
            mw,
            kind,
            bound_rkey: AtomicU32::new(rkey),
            _pd: self.inner.clone(),
        })
    }
}

impl MemoryWindow {
    /// The window's current rkey (`mw->rkey`; for type 2, the rkey of the last bind posted
    /// through [`SendWr::bind_mw`]).
    pub fn rkey(&self) -> u32 {
        match self.kind {
            // SAFETY: the window is allocated while `self` lives; libibverbs updates rkey on
            // a type-1 bind.
            MwType::Type1 => unsafe { std::ptr::read_volatile(&(*self.mw.as_ptr()).rkey) },
            MwType::Type2 => self.bound_rkey.load(Ordering::Acquire),
        }
    }

    /// The rkey a new type-2 bind should use: [`inc_rkey`] of the current one.
    pub fn next_rkey(&self) -> u32 {
        inc_rkey(self.rkey())
    }

    /// The window type.
    pub fn kind(&self) -> MwType {
        self.kind
    }
}

fn bind_info(
    mr: &MemoryRegion,
    range: &Range<usize>,
    access: AccessFlags,
) -> Result<ibv_mw_bind_info> {
    if range.start > range.end || range.end > mr.len() {
        return Err(Error::OutOfBounds(
            format!(
                "window {}..{} outside a memory region of {} bytes",
                range.start,
                range.end,
                mr.len()
            )
            .into(),
        ));
    }
    Ok(ibv_mw_bind_info {
        mr: mr.raw(),
        addr: mr.addr() + range.start as u64,
        length: (range.end - range.start) as u64,
        mw_access_flags: access.bits(),
    })
}

impl QueuePair<state::Rts> {
    /// Binds a **type 1** window to bytes `range` of `mr` (which needs `MW_BIND`) with
    /// `access` (`ibv_bind_mw(3)`); an empty range unbinds. The bind is a work request on this
    /// QP's send queue: if `signaled`, it completes with `IBV_WC_BIND_MW` and `wr_id`.
    /// Returns the window's new rkey.
    pub fn bind_mw(
        &self,
        mw: &MemoryWindow,
        mr: &MemoryRegion,
        range: Range<usize>,
        access: AccessFlags,
        wr_id: u64,
        signaled: bool,
    ) -> Result<u32> {
        if mw.kind != MwType::Type1 {
            return Err(Error::InvalidArgument(
                "ibv_bind_mw binds type 1 windows; bind a type 2 window with SendWr::bind_mw"
                    .into(),
            ));
        }
        let mut b = ibv_mw_bind {
            wr_id,
            send_flags: if signaled {
                crate::wr::SendFlags::SIGNALED.bits()
            } else {
                0
            },
            bind_info: bind_info(mr, &range, access)?,
        };
        // SAFETY: the QP, window and MR are alive for the call; `b` is a valid bind struct.
        let ret = unsafe { ibv_bind_mw(self.raw(), mw.mw.as_ptr(), &mut b) };
        rc(ret, |errno| {
            let no_bind = errno.0 == libc::EINVAL && !mr.access().contains(AccessFlags::MW_BIND);
            Error::failed(Verb::BindMw, errno)
                .with_hint(no_bind.then_some(Hint::new(HintCode::MrWithoutMwBind)))
        })?;
        let rkey = mw.rkey();
        mw.bound_rkey.store(rkey, Ordering::Release);
        Ok(rkey)
    }
}

impl<'a> SendWr<'a> {
    /// `IBV_WR_BIND_MW`: binds a **type 2** window to bytes `range` of `mr` (which needs
    /// `MW_BIND`) with `access` and the new rkey `rkey` (usually [`MemoryWindow::next_rkey`]).
    /// Completes with `IBV_WC_BIND_MW`. `mw.rkey()` reports `rkey` from the post on.
    pub fn bind_mw(
        wr_id: u64,
        mw: &'a MemoryWindow,
        rkey: u32,
        mr: &'a MemoryRegion,
        range: Range<usize>,
        access: AccessFlags,
    ) -> Result<SendWr<'a>> {
        let info = bind_info(mr, &range, access)?;
        let mut w = SendWr::with_opcode(wr_id, ibv_wr_opcode::IBV_WR_BIND_MW, &[]);
        w.wr.bind_mw_tso_union.bind_mw = bind_mw_t {
            mw: mw.mw.as_ptr(),
            rkey,
            bind_info: info,
        };
        mw.bound_rkey.store(rkey, Ordering::Release);
        Ok(w)
    }

    /// `IBV_WR_LOCAL_INV`: invalidates `rkey` (a type 2 window's): later remote accesses with
    /// it fail with `IBV_WC_REM_ACCESS_ERR`. Completes with `IBV_WC_LOCAL_INV`.
    pub fn local_inv(wr_id: u64, rkey: u32) -> SendWr<'a> {
        let mut w = SendWr::with_opcode(wr_id, ibv_wr_opcode::IBV_WR_LOCAL_INV, &[]);
        w.wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
        w
    }

    /// `IBV_WR_SEND_WITH_INV`: a SEND that also invalidates `rkey` (a type 2 window) at the
    /// responder.
    pub fn send_with_inv(wr_id: u64, sges: &'a [Sge], rkey: u32) -> SendWr<'a> {
        let mut w = SendWr::with_opcode(wr_id, ibv_wr_opcode::IBV_WR_SEND_WITH_INV, sges);
        w.wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_bumps_the_low_byte_only() {
        assert_eq!(inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(u32::MAX), 0xffff_ff00);
        // SAFETY: pure arithmetic on a value that does not overflow.
        assert_eq!(inc_rkey(0x0000_0a0b), unsafe { ibv_inc_rkey(0x0000_0a0b) });
    }
}
