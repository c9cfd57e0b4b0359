//! Shared receive queues (`ibv_create_srq(3)`, `ibv_post_srq_recv(3)`, `ibv_modify_srq(3)`,
//! `ibv_destroy_srq`).
//!
//! One pool of receive buffers shared by many QPs: a server with many clients posts receives
//! once, in one place, instead of per connection. A QP created with
//! [`crate::QpInitAttr::srq`] takes its receives from the SRQ (its own `post_recv` is then
//! refused). Arming a limit ([`SharedReceiveQueue::arm_limit`]) raises the async event
//! `IBV_EVENT_SRQ_LIMIT_REACHED` when fewer receives than that remain: time to refill.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rdma_sys::*;

use crate::device::AsyncElement;
use crate::error::{Error, Hint, HintCode, Result, Verb, ptr, rc, report_drop_failure};
use crate::pd::{PdInner, ProtectionDomain};
use crate::wr::RecvWr;

pub(crate) struct SrqInner {
    pub(crate) srq: NonNull<ibv_srq>,
    destroyed: AtomicBool,
    _pd: Arc<PdInner>,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if self.destroyed.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: QPs using the SRQ hold Arcs to it, so none is left; destroyed exactly once.
        let ret = unsafe { ibv_destroy_srq(self.srq.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::failed(Verb::DestroySrq, errno)) {
            report_drop_failure("ibv_destroy_srq", &e);
        }
    }
}

/// A shared receive queue: `struct ibv_srq` (`ibv_create_srq(3)`). QPs attached to it keep it
/// alive.
pub struct SharedReceiveQueue {
    pub(crate) inner: Arc<SrqInner>,
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("qps", &(Arc::strong_count(&self.inner) - 1))
            .finish()
    }
}

/// `struct ibv_srq_attr` (`ibv_query_srq(3)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    /// The armed limit (0 = not armed).
    pub srq_limit: u32,
}

impl ProtectionDomain {
    /// Creates a shared receive queue for up to `max_wr` receives of up to `max_sge` SGEs each
    /// (`ibv_create_srq(3)`).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        let mut ia = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: the PD is allocated; `ia` is a valid in/out pointer.
        let srq = unsafe { ibv_create_srq(self.inner.pd.as_ptr(), &mut ia) };
        let srq = ptr(srq, |errno| {
            Error::failed(Verb::CreateSrq, errno)
                .with_hint((errno.0 == libc::EINVAL).then_some(Hint::new(HintCode::SrqCapacity)))
        })?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                srq,
                destroyed: AtomicBool::new(false),
                _pd: self.inner.clone(),
            }),
        })
    }
}

impl SharedReceiveQueue {
    /// `ibv_post_srq_recv(3)`: posts the receives as one chain. Allocates nothing.
    pub fn post_recv(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        let n = wrs.len();
        if n == 0 {
            return Ok(());
        }
        for i in 0..n - 1 {
            let next: *mut ibv_recv_wr = &mut wrs[i + 1].wr;
            wrs[i].wr.next = next;
        }
        wrs[n - 1].wr.next = std::ptr::null_mut();
        let first: *mut ibv_recv_wr = &mut wrs[0].wr;
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the SRQ is alive; the chain links valid WRs in `wrs` whose SGEs are borrowed
        // for the call.
        let ret = unsafe { ibv_post_srq_recv(self.inner.srq.as_ptr(), first, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        let index = if bad.is_null() || (bad as usize) < (first as usize) {
            0
        } else {
            ((bad as usize - first as usize) / size_of::<ibv_recv_wr>()).min(n - 1)
        };
        rc(ret, |errno| {
            Error::failed(Verb::PostSrqRecv, errno)
                .at_wr(index)
                .with_hint((errno.0 == libc::ENOMEM).then_some(Hint::new(HintCode::SrqFull)))
        })
    }

    /// Posts one receive (`ibv_post_srq_recv(3)`).
    pub fn post_recv_one(&self, wr: RecvWr<'_>) -> Result<()> {
        self.post_recv(&mut [wr])
    }

    /// Arms the limit (`ibv_modify_srq(3)` with `IBV_SRQ_LIMIT`): when fewer than `limit`
    /// receives remain, the device raises one `IBV_EVENT_SRQ_LIMIT_REACHED` (then the limit
    /// is disarmed; arm it again after refilling).
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let mut a = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        // SAFETY: the SRQ is alive; `a` is a valid attribute struct.
        let ret = unsafe {
            ibv_modify_srq(
                self.inner.srq.as_ptr(),
                &mut a,
                ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32,
            )
        };
        rc(ret, |errno| Error::failed(Verb::ModifySrq, errno))
    }

    /// `ibv_query_srq(3)`.
    pub fn query(&self) -> Result<SrqAttr> {
        let mut a = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: 0,
        };
        // SAFETY: the SRQ is alive; `a` is a valid out-pointer.
        let ret = unsafe { ibv_query_srq(self.inner.srq.as_ptr(), &mut a) };
        rc(ret, |errno| Error::failed(Verb::QuerySrq, errno))?;
        Ok(SrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        })
    }

    /// True if an async event's element ([`AsyncElement::Srq`]) is this SRQ.
    pub fn is_async_element(&self, element: &AsyncElement) -> bool {
        matches!(element, AsyncElement::Srq(p) if *p == self.inner.srq.as_ptr() as usize)
    }

    /// Destroys the SRQ now (`ibv_destroy_srq(3)`), reporting failure; EBUSY while a QP
    /// uses it (it is then destroyed after its last QP).
    pub fn destroy(self) -> Result<()> {
        let users = Arc::strong_count(&self.inner) - 1;
        // SAFETY: the SRQ is alive; on success `destroyed` stops Drop from repeating it.
        let ret = unsafe { ibv_destroy_srq(self.inner.srq.as_ptr()) };
        rc(ret, |errno| {
            Error::failed(Verb::DestroySrq, errno).with_hint((errno.0 == libc::EBUSY).then(|| {
                Hint::detailed(
                    HintCode::SrqBusy,
                    format!("{users} queue pair(s) still use this SRQ"),
                )
            }))
        })?;
        self.inner.destroyed.store(true, Ordering::Release);
        Ok(())
    }
}
