//! Protection domains (`ibv_alloc_pd(3)`, `ibv_dealloc_pd(3)`).
//!
//! A PD is an isolation boundary: a QP may only use memory regions of its own PD. Local keys
//! of another PD fail with `IBV_WC_LOC_QP_OP_ERR` on rxe, remote keys with
//! `IBV_WC_REM_ACCESS_ERR` (chapter 02).

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rdma_sys::*;

use crate::device::Context;
use crate::error::{Error, Hint, HintCode, Result, Verb, ptr, rc, report_drop_failure};

pub(crate) struct PdInner {
    pub(crate) pd: NonNull<ibv_pd>,
    pub(crate) ctx: Context,
    freed: AtomicBool,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        if self.freed.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: every child (MR, QP) holds an Arc to this inner, so none is alive now; the PD
        // is deallocated exactly once (here, or in `dealloc` which sets `freed`).
        let ret = unsafe { ibv_dealloc_pd(self.pd.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::failed(Verb::DeallocPd, errno)) {
            report_drop_failure("ibv_dealloc_pd", &e);
        }
    }
}

/// A protection domain: `struct ibv_pd` (`ibv_alloc_pd(3)`).
///
/// Memory regions and queue pairs created in it keep it alive; it is deallocated when the
/// last of them (and this handle) is gone, or explicitly with [`ProtectionDomain::dealloc`].
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("handle", &self.handle())
            .field("children", &self.children())
            .finish()
    }
}

impl Context {
    /// Allocates a protection domain (`ibv_alloc_pd(3)`).
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        // SAFETY: the context is open (this handle keeps it alive).
        let pd = ptr(unsafe { ibv_alloc_pd(self.raw()) }, |errno| {
            Error::failed(Verb::AllocPd, errno)
        })?;
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                pd,
                ctx: self.clone(),
                freed: AtomicBool::new(false),
            }),
        })
    }
}

impl ProtectionDomain {
    pub(crate) fn raw(&self) -> *mut ibv_pd {
        self.inner.pd.as_ptr()
    }

    /// The device context this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The kernel handle of the PD (`pd->handle`), useful only to tell PDs apart in output.
    pub fn handle(&self) -> u32 {
        // SAFETY: the PD is allocated while `self` lives.
        unsafe { (*self.inner.pd.as_ptr()).handle }
    }

    /// How many objects (MRs, QPs) still hold this PD.
    pub fn children(&self) -> usize {
        Arc::strong_count(&self.inner) - 1
    }

    /// Deallocates the PD now (`ibv_dealloc_pd(3)`), reporting failure.
    ///
    /// This really calls the verb even while MRs or QPs of this PD are alive, so you can see
    /// what the kernel says: `EBUSY (16)`. In that case the PD stays allocated (the children
    /// keep it) and is freed after the last child is dropped.
    pub fn dealloc(self) -> Result<()> {
        let children = self.children();
        // SAFETY: the PD is allocated; if the kernel refuses (EBUSY) nothing changes, if it
        // succeeds `freed` stops Drop from freeing it a second time.
        let ret = unsafe { ibv_dealloc_pd(self.inner.pd.as_ptr()) };
        rc(ret, |errno| {
            Error::failed(Verb::DeallocPd, errno).with_hint((errno.0 == libc::EBUSY).then(|| {
                Hint::detailed(
                    HintCode::PdBusy,
                    format!(
                        "{children} object(s) of this PD (memory regions, queue pairs, ...) are \
                         still alive: destroy QPs and deregister MRs before deallocating their PD"
                    ),
                )
            }))
        })?;
        self.inner.freed.store(true, Ordering::Release);
        Ok(())
    }
}
