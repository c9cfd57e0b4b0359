//! Work completions: what `ibv_poll_cq` hands back (`struct ibv_wc`, copied out into
//! [`WorkCompletion`]), with the tables that name and explain its status ([`WcStatus`]) and
//! opcode ([`WcOpcode`]), and its flags ([`WcFlags`]).

use rdma_sys::*;

pub use contracts::verbs::wc::{WcFlags, WcOpcode, WcStatus};

use crate::error::{Error, Result};

/// A work completion: the fields of `struct ibv_wc` (`ibv_poll_cq(3)`), copied out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The `wr_id` of the work request this completes.
    pub wr_id: u64,
    pub status: WcStatus,
    /// What completed. Meaningless on error completions (rxe reports `IBV_WC_SEND` there).
    pub opcode: WcOpcode,
    pub vendor_err: u32,
    /// Bytes received (RECV, RECV_RDMA_WITH_IMM) or read (RDMA_READ, atomics). Do not read it
    /// for an RDMA WRITE's requester completion: it is not defined there.
    pub byte_len: u32,
    /// The immediate value in host order (valid when `flags` has WITH_IMM, on receives).
    pub imm_data: u32,
    /// The local QP number this completion belongs to.
    pub qp_num: u32,
    /// The remote QP number (UD only; 0 on RC with rxe).
    pub src_qp: u32,
    pub flags: WcFlags,
}

impl WorkCompletion {
    pub(super) fn from_raw(w: &ibv_wc) -> WorkCompletion {
        // SAFETY: both union members are u32; reading either is valid.
        let imm = unsafe { w.imm_data_invalidated_rkey_union.imm_data };
        WorkCompletion {
            wr_id: w.wr_id,
            status: WcStatus::from_raw(w.status),
            opcode: WcOpcode::from_raw(w.opcode),
            vendor_err: w.vendor_err,
            byte_len: w.byte_len,
            imm_data: u32::from_be(imm),
            qp_num: w.qp_num,
            src_qp: w.src_qp,
            flags: WcFlags::from_bits(w.wc_flags),
        }
    }

    /// True for `IBV_WC_SUCCESS`.
    pub fn is_success(&self) -> bool {
        self.status == WcStatus::Success
    }

    /// `Ok(self)` for a successful completion, else [`Error::Completion`] with the status,
    /// its `ibv_wc_status_str` text and the learner's explanation.
    pub fn ok(self) -> Result<WorkCompletion> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(Error::Completion { wc: self })
        }
    }

    /// The immediate data (host order) of a receive completion that carries one.
    pub fn imm(&self) -> Option<u32> {
        (self.flags.contains(WcFlags::WITH_IMM) && self.opcode.is_recv()).then_some(self.imm_data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn status_table_covers_every_ibv_wc_status() {
        use rdma_sys::ibv_wc_status as S;
        let all = [
            S::IBV_WC_SUCCESS,
            S::IBV_WC_LOC_LEN_ERR,
            S::IBV_WC_LOC_QP_OP_ERR,
            S::IBV_WC_LOC_EEC_OP_ERR,
            S::IBV_WC_LOC_PROT_ERR,
            S::IBV_WC_WR_FLUSH_ERR,
            S::IBV_WC_MW_BIND_ERR,
            S::IBV_WC_BAD_RESP_ERR,
            S::IBV_WC_LOC_ACCESS_ERR,
            S::IBV_WC_REM_INV_REQ_ERR,
            S::IBV_WC_REM_ACCESS_ERR,
            S::IBV_WC_REM_OP_ERR,
            S::IBV_WC_RETRY_EXC_ERR,
            S::IBV_WC_RNR_RETRY_EXC_ERR,
            S::IBV_WC_LOC_RDD_VIOL_ERR,
            S::IBV_WC_REM_INV_RD_REQ_ERR,
            S::IBV_WC_REM_ABORT_ERR,
            S::IBV_WC_INV_EECN_ERR,
            S::IBV_WC_INV_EEC_STATE_ERR,
            S::IBV_WC_FATAL_ERR,
            S::IBV_WC_RESP_TIMEOUT_ERR,
            S::IBV_WC_GENERAL_ERR,
            S::IBV_WC_TM_ERR,
            S::IBV_WC_TM_RNDV_INCOMPLETE,
        ];
        assert_eq!(all.len(), WcStatus::ALL.len());
        for (i, v) in all.iter().enumerate() {
            let s = WcStatus::from_raw(*v);
            assert_eq!(s, WcStatus::ALL[i]);
            assert_eq!(s.raw(), *v);
            assert!(!matches!(s, WcStatus::Unknown(_)));
            assert!(s.name().starts_with("IBV_WC_"));
            assert!(!s.explanation().is_empty());
            // The table's text is the installed libibverbs' own.
            // SAFETY: ibv_wc_status_str returns a pointer to a static string for any value.
            let c = unsafe { CStr::from_ptr(ibv_wc_status_str(s.raw())) };
            assert_eq!(s.str(), c.to_str().unwrap(), "{}", s.name());
        }
        assert_eq!(
            WcStatus::RemAccessErr.to_string(),
            "IBV_WC_REM_ACCESS_ERR (10)"
        );
        assert_eq!(WcStatus::RemAccessErr.str(), "remote access error");
        assert_eq!(WcStatus::from_raw(99), WcStatus::Unknown(99));
        assert!(WcStatus::LocQpOpErr.explanation().contains("lkey"));
    }

    #[test]
    fn opcodes_match_rdma_sys() {
        use rdma_sys::ibv_wc_opcode as O;
        assert_eq!(
            WcOpcode::from_raw(O::IBV_WC_RECV_RDMA_WITH_IMM),
            WcOpcode::RecvRdmaWithImm
        );
        assert_eq!(WcOpcode::FetchAdd.raw(), O::IBV_WC_FETCH_ADD);
        assert_eq!(WcOpcode::CompSwap.raw(), O::IBV_WC_COMP_SWAP);
        assert!(WcOpcode::Recv.is_recv());
        assert!(!WcOpcode::RdmaWrite.is_recv());
    }

    #[test]
    fn completion_error_explains() {
        let wc = WorkCompletion {
            wr_id: 7,
            status: WcStatus::RemAccessErr,
            ..Default::default()
        };
        let e = wc.ok().unwrap_err();
        let s = e.to_string();
        assert!(s.contains("IBV_WC_REM_ACCESS_ERR (10)"), "{s}");
        assert!(s.contains("remote access error"), "{s}");
        assert!(s.contains("rkey"), "{s}");
    }
}
