//! The work completion's tables: its status ([`WcStatus`], with rdma-core's C name, the number
//! and what usually causes it on rxe), its opcode ([`WcOpcode`]) and its flags ([`WcFlags`]).
//! The C values are rdma-core's `verbs.h`; `lab`'s unit tests check each against the rdma-sys
//! bindings, and `lab` adds what needs libibverbs (`ibv_wc_status_str(3)`'s text).

use std::fmt;

use crate::{c_enum, flag_set};

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
    /// `ibv_wc_status_str(3)`'s text (`"remote access error"`), as rdma-core's
    /// `libibverbs/enum_strs.c` spells it; `"unknown"` for a value it does not know, as there.
    /// `lab`'s unit tests compare every row with the installed libibverbs.
    pub fn str(self) -> &'static str {
        const TEXT: [&str; 24] = [
            "success",
            "local length error",
            "local QP operation error",
            "local EE context operation error",
            "local protection error",
            "Work Request Flushed Error",
            "memory management operation error",
            "bad response error",
            "local access error",
            "remote invalid request error",
            "remote access error",
            "remote operation error",
            "transport retry counter exceeded",
            "RNR retry counter exceeded",
            "local RDD violation error",
            "remote invalid RD request",
            "aborted error",
            "invalid EE context number",
            "invalid EE context state",
            "fatal error",
            "response timeout error",
            "general error",
            "TM error",
            "TM software rendezvous",
        ];
        TEXT.get(self.raw() as usize).copied().unwrap_or("unknown")
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
