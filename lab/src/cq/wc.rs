//! Work completions: what `ibv_poll_cq` hands back (`struct ibv_wc`, copied out into
//! [`WorkCompletion`]), with the tables that name and explain its status ([`WcStatus`]) and
//! opcode ([`WcOpcode`]), and its flags ([`WcFlags`]).

use std::ffi::CStr;
use std::fmt;

use rdma_sys::*;

use crate::error::{Error, Result};
use crate::flags::{c_enum, flag_set};

flag_set! {
    /// `enum ibv_wc_flags`: what else a completion carries.
    pub struct WcFlags;
    /// A GRH precedes the data (always set for RoCE receives; 40 bytes in UD buffers).
    GRH = 1 => "IBV_WC_GRH";
    /// `imm_data` is valid (trust it on receive completions only; rxe also sets it, with 0,
    /// on the sender's completion).
    WITH_IMM = 2 => "IBV_WC_WITH_IMM";
    IP_CSUM_OK = 4 => "IBV_WC_IP_CSUM_OK";
    WITH_INV = 8 => "IBV_WC_WITH_INV";
    TM_SYNC_REQ = 16 => "IBV_WC_TM_SYNC_REQ";
    TM_MATCH = 32 => "IBV_WC_TM_MATCH";
    TM_DATA_VALID = 64 => "IBV_WC_TM_DATA_VALID";
}

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

c_enum! {
    /// `enum ibv_wc_status`: every status a completion can carry, with its C name and
    /// number, `ibv_wc_status_str(3)`'s text, and what usually causes it (observed on
    /// Linux 6.1's rxe where noted: see docs/rxe-observed.md).
    #[derive(Default)]
    pub enum WcStatus: u32, unknown "IBV_WC_?",
        explained "a status this version of lab does not know" {
        #[default]
        Success = 0 => "IBV_WC_SUCCESS",
            "the work request completed";
        LocLenErr = 1 => "IBV_WC_LOC_LEN_ERR",
            "a local length error: the message does not fit the local buffers (hardware reports an \
             incoming SEND larger than the posted RECV this way; rxe reports LOC_QP_OP_ERR instead)";
        LocQpOpErr = 2 => "IBV_WC_LOC_QP_OP_ERR",
            "a local QP operation error: on rxe, an SGE with an invalid lkey (lkey 0, an unregistered \
             buffer, or an MR of another PD), or a RECV too small for the incoming SEND; the QP goes \
             to ERR";
        LocEecOpErr = 3 => "IBV_WC_LOC_EEC_OP_ERR",
            "a local EE context error (reliable datagram only; not used on RC/UD)";
        LocProtErr = 4 => "IBV_WC_LOC_PROT_ERR",
            "a local protection error: a valid lkey but an address/length outside its MR, or an MR \
             without LOCAL_WRITE as the target of a RECV/READ";
        WrFlushErr = 5 => "IBV_WC_WR_FLUSH_ERR",
            "flushed: the QP was in (or went to) the ERR state, so this work request was not \
             executed; look at the first error completion before it, or at who moved the QP to ERR";
        MwBindErr = 6 => "IBV_WC_MW_BIND_ERR",
            "a memory window bind failed (wrong access rights, or the MR lacks MW_BIND)";
        BadRespErr = 7 => "IBV_WC_BAD_RESP_ERR",
            "the responder sent an unexpected transport response";
        LocAccessErr = 8 => "IBV_WC_LOC_ACCESS_ERR",
            "a local access error: the local MR does not allow the access (e.g. READ or atomic \
             results into memory without LOCAL_WRITE)";
        RemInvReqErr = 9 => "IBV_WC_REM_INV_REQ_ERR",
            "the responder rejected the request as invalid: on rxe, a READ/atomic to a QP whose \
             max_dest_rd_atomic is 0, or a QP whose access flags lack the REMOTE_* right \
             (an MR lacking it gives REM_ACCESS_ERR instead)";
        RemAccessErr = 10 => "IBV_WC_REM_ACCESS_ERR",
            "a remote access error: wrong rkey (typo, stale after deregistration, another PD), an \
             address range outside the remote MR, or an MR registered without REMOTE_WRITE/READ/\
             ATOMIC; both QPs go to ERR";
        RemOpErr = 11 => "IBV_WC_REM_OP_ERR",
            "the responder could not complete the operation: on rxe, its RECV was too small or had \
             a bad lkey";
        RetryExcErr = 12 => "IBV_WC_RETRY_EXC_ERR",
            "transport retries exhausted: the peer never acknowledged (QP destroyed, process gone, \
             QP in ERR/RESET, wrong GID/QPN, network down) after retry_cnt retries of `timeout` each; \
             on rxe retry_cnt 7 means retry forever, and a long RNR wait (peer without a RECV, \
             rnr_retry 7) also uses up retry_cnt";
        RnrRetryExcErr = 13 => "IBV_WC_RNR_RETRY_EXC_ERR",
            "receiver not ready too often: the peer had no RECV posted for a SEND/WRITE_WITH_IMM \
             after rnr_retry retries; post receives before the peer sends (rnr_retry 7 = forever)";
        LocRddViolErr = 14 => "IBV_WC_LOC_RDD_VIOL_ERR",
            "a reliable datagram domain violation (RD only)";
        RemInvRdReqErr = 15 => "IBV_WC_REM_INV_RD_REQ_ERR",
            "an invalid reliable datagram request (RD only)";
        RemAbortErr = 16 => "IBV_WC_REM_ABORT_ERR",
            "the responder aborted the operation";
        InvEecnErr = 17 => "IBV_WC_INV_EECN_ERR",
            "an invalid EE context number (RD only)";
        InvEecStateErr = 18 => "IBV_WC_INV_EEC_STATE_ERR",
            "an invalid EE context state (RD only)";
        FatalErr = 19 => "IBV_WC_FATAL_ERR",
            "a fatal device error";
        RespTimeoutErr = 20 => "IBV_WC_RESP_TIMEOUT_ERR",
            "the response timed out";
        GeneralErr = 21 => "IBV_WC_GENERAL_ERR",
            "a general error the device could not classify";
        TmErr = 22 => "IBV_WC_TM_ERR",
            "a tag-matching error (tag-matching SRQs only)";
        TmRndvIncomplete = 23 => "IBV_WC_TM_RNDV_INCOMPLETE",
            "a tag-matching rendezvous was not completed (tag-matching SRQs only)";
    }
}

impl WcStatus {
    /// `ibv_wc_status_str(3)`'s text (`"remote access error"`).
    pub fn str(self) -> &'static str {
        // SAFETY: ibv_wc_status_str returns a pointer to a static string for any value.
        unsafe { CStr::from_ptr(ibv_wc_status_str(self.raw())) }
            .to_str()
            .unwrap_or("?")
    }
}

impl fmt::Display for WcStatus {
    /// `IBV_WC_REM_ACCESS_ERR (10)` (docs/conventions.md).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.raw())
    }
}

c_enum! {
    /// `enum ibv_wc_opcode`: what a completion completes.
    #[derive(Default)]
    pub enum WcOpcode: u32, unknown "IBV_WC_?" {
        #[default]
        Send = 0 => "IBV_WC_SEND",
        RdmaWrite = 1 => "IBV_WC_RDMA_WRITE",
        RdmaRead = 2 => "IBV_WC_RDMA_READ",
        CompSwap = 3 => "IBV_WC_COMP_SWAP",
        FetchAdd = 4 => "IBV_WC_FETCH_ADD",
        BindMw = 5 => "IBV_WC_BIND_MW",
        LocalInv = 6 => "IBV_WC_LOCAL_INV",
        Tso = 7 => "IBV_WC_TSO",
        AtomicWrite = 9 => "IBV_WC_ATOMIC_WRITE",
        Recv = 128 => "IBV_WC_RECV",
        RecvRdmaWithImm = 129 => "IBV_WC_RECV_RDMA_WITH_IMM",
        TmAdd = 130 => "IBV_WC_TM_ADD",
        TmDel = 131 => "IBV_WC_TM_DEL",
        TmSync = 132 => "IBV_WC_TM_SYNC",
        TmRecv = 133 => "IBV_WC_TM_RECV",
        TmNoTag = 134 => "IBV_WC_TM_NO_TAG",
    }
}

impl WcOpcode {
    /// True for receive-side completions (`opcode & IBV_WC_RECV`).
    pub fn is_recv(self) -> bool {
        self.raw() & 128 != 0
    }
}

impl fmt::Display for WcOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.raw())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_ne!(s.str(), "unknown", "{}", s.name());
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
