//! Address handles (`ibv_create_ah(3)`, `ibv_destroy_ah(3)`): where a UD message goes.
//!
//! An RC QP knows its one peer from RTR on; a UD QP can talk to any peer, so each UD send
//! names its destination: an address handle (the peer's GID, our source GID index, the port)
//! plus the peer's QP number and Q_Key ([`crate::SendWr::send_ud`]).

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use crate::error::{Error, Hint, HintCode, Result, Verb, ptr, rc, report_drop_failure};
use crate::pd::{PdInner, ProtectionDomain};
use crate::qp::AddressVector;

/// Bytes of GRH a UD receive buffer holds in front of the payload (RoCE: always present).
pub const UD_GRH_BYTES: usize = 40;

/// An address handle: `struct ibv_ah` (`ibv_create_ah(3)`). Keeps its PD alive.
pub struct AddressHandle {
    pub(crate) ah: NonNull<ibv_ah>,
    _pd: Arc<PdInner>,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for AddressHandle {}
// SAFETY: as above; the handle is only passed to thread-safe verbs.
unsafe impl Sync for AddressHandle {}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AddressHandle").finish_non_exhaustive()
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: the AH is alive and destroyed exactly once.
        let ret = unsafe { ibv_destroy_ah(self.ah.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::failed(Verb::DestroyAh, errno)) {
            report_drop_failure("ibv_destroy_ah", &e);
        }
    }
}

impl ProtectionDomain {
    /// Creates an address handle for `av` (`ibv_create_ah(3)`); on RoCE `av` needs the GRH
    /// (`is_global`, as [`AddressVector::roce`] sets it).
    pub fn create_ah(&self, av: &AddressVector) -> Result<AddressHandle> {
        // SAFETY: ibv_ah_attr is plain data; all-zero is valid.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        a.grh.dgid = av.dgid.to_ibv();
        a.grh.sgid_index = av.sgid_index;
        a.grh.hop_limit = av.hop_limit;
        a.grh.traffic_class = av.traffic_class;
        a.grh.flow_label = av.flow_label;
        a.is_global = av.is_global as u8;
        a.port_num = av.port_num;
        a.sl = av.sl;
        a.dlid = av.dlid;
        // SAFETY: the PD is allocated; `a` is a valid attribute struct.
        let ah = unsafe { ibv_create_ah(self.inner.pd.as_ptr(), &mut a) };
        let ah = ptr(ah, |errno| {
            Error::failed(Verb::CreateAh, errno).with_hint(Hint::new(if av.is_global {
                HintCode::AhSgidIndex
            } else {
                HintCode::AhWithoutGrh
            }))
        })?;
        Ok(AddressHandle {
            ah,
            _pd: self.inner.clone(),
        })
    }
}
