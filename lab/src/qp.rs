//! Queue pairs: creation, the state machine, posting work.
//!
//! Verbs: `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_post_send`, `ibv_post_recv`,
//! `ibv_destroy_qp`.
//!
//! A reliable-connected (RC) QP must be walked through its states before it can send:
//!
//! ```text
//!   RESET --to_init--> INIT --to_rtr--> RTR --to_rts--> RTS
//!   (created)    (port, access)  (peer's QPN, PSN, GID,   (own PSN, timeout,
//!                                 path MTU, read credits)   retries, read credits)
//! ```
//!
//! [`QueuePair<S>`] carries its state in its type: only `QueuePair<Rts>` has `post_send`, and
//! each transition consumes the QP and returns it in the next state. For experiments that
//! break the rules on purpose (chapters 05 and 08), [`QueuePair::modify`] sends any attributes
//! with any mask in any state, and [`QueuePair::query`] reads back what the QP really is; the
//! typed handle does not change then ([`QueuePair::assume_state`] re-labels it).
//!
//! [`transition`] is the table of legal RC transitions with their required and optional
//! attribute masks (IBTA spec, `ibv_modify_qp(3)`); `lab` uses it to explain an EINVAL.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use crate::cq::{CompletionQueue, CqInner};
use crate::device::{Context, Gid, GidType, Mtu};
use crate::error::{Errno, Error, Hint, Result, ptr, rc, report_drop_failure};
use crate::flags::flag_set;
use crate::mr::AccessFlags;
use crate::pd::{PdInner, ProtectionDomain};
use crate::srq::{SharedReceiveQueue, SrqInner};
use crate::wr::{RecvWr, SendFlags, SendWr, WrOpcode};

/// Default `timeout` (4.096 us * 2^14 = 67 ms per try).
pub const DEFAULT_TIMEOUT: u8 = 14;
/// Default `retry_cnt`: 6. **Never 7 on rxe**, which treats 7 as "retry forever" (the spec says
/// 7 retries), so a dead peer would never produce `IBV_WC_RETRY_EXC_ERR`.
pub const DEFAULT_RETRY_CNT: u8 = 6;
/// Default `rnr_retry`: 6 retries. 7 means "retry forever" (spec and rxe): a SEND to a peer
/// that never posts a RECV would then never complete.
pub const DEFAULT_RNR_RETRY: u8 = 6;
/// Default `min_rnr_timer`: 12 (0.64 ms between RNR retries).
pub const DEFAULT_MIN_RNR_TIMER: u8 = 12;
/// Default `max_rd_atomic` / `max_dest_rd_atomic` (clamped to the device's limits). Leaving
/// them at 0 is a classic hang: a READ from a QP with `max_rd_atomic` 0 never completes on rxe.
pub const DEFAULT_RD_ATOMIC: u8 = 16;
/// Default GRH hop limit.
pub const DEFAULT_HOP_LIMIT: u8 = 64;

/// `enum ibv_qp_state` at run time (what `ibv_query_qp` reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
    Unknown(u32),
}

impl QpState {
    /// From the C value.
    pub fn from_raw(v: u32) -> QpState {
        use ibv_qp_state::*;
        match v {
            IBV_QPS_RESET => QpState::Reset,
            IBV_QPS_INIT => QpState::Init,
            IBV_QPS_RTR => QpState::Rtr,
            IBV_QPS_RTS => QpState::Rts,
            IBV_QPS_SQD => QpState::Sqd,
            IBV_QPS_SQE => QpState::Sqe,
            IBV_QPS_ERR => QpState::Err,
            v => QpState::Unknown(v),
        }
    }
    /// The C value.
    pub fn raw(self) -> u32 {
        use ibv_qp_state::*;
        match self {
            QpState::Reset => IBV_QPS_RESET,
            QpState::Init => IBV_QPS_INIT,
            QpState::Rtr => IBV_QPS_RTR,
            QpState::Rts => IBV_QPS_RTS,
            QpState::Sqd => IBV_QPS_SQD,
            QpState::Sqe => IBV_QPS_SQE,
            QpState::Err => IBV_QPS_ERR,
            QpState::Unknown(v) => v,
        }
    }
    /// The C name (`IBV_QPS_RTS`).
    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "IBV_QPS_RESET",
            QpState::Init => "IBV_QPS_INIT",
            QpState::Rtr => "IBV_QPS_RTR",
            QpState::Rts => "IBV_QPS_RTS",
            QpState::Sqd => "IBV_QPS_SQD",
            QpState::Sqe => "IBV_QPS_SQE",
            QpState::Err => "IBV_QPS_ERR",
            QpState::Unknown(_) => "IBV_QPS_UNKNOWN",
        }
    }
    /// The short name (`RTS`).
    pub fn short(self) -> &'static str {
        &self.name()[8..]
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

flag_set! {
    /// `enum ibv_qp_attr_mask`: which fields of the attributes `ibv_modify_qp` should apply.
    pub struct QpAttrMask;
    STATE = 1 => "IBV_QP_STATE";
    CUR_STATE = 2 => "IBV_QP_CUR_STATE";
    EN_SQD_ASYNC_NOTIFY = 4 => "IBV_QP_EN_SQD_ASYNC_NOTIFY";
    ACCESS_FLAGS = 8 => "IBV_QP_ACCESS_FLAGS";
    PKEY_INDEX = 16 => "IBV_QP_PKEY_INDEX";
    PORT = 32 => "IBV_QP_PORT";
    QKEY = 64 => "IBV_QP_QKEY";
    AV = 128 => "IBV_QP_AV";
    PATH_MTU = 256 => "IBV_QP_PATH_MTU";
    TIMEOUT = 512 => "IBV_QP_TIMEOUT";
    RETRY_CNT = 1024 => "IBV_QP_RETRY_CNT";
    RNR_RETRY = 2048 => "IBV_QP_RNR_RETRY";
    RQ_PSN = 4096 => "IBV_QP_RQ_PSN";
    MAX_QP_RD_ATOMIC = 8192 => "IBV_QP_MAX_QP_RD_ATOMIC";
    ALT_PATH = 16384 => "IBV_QP_ALT_PATH";
    MIN_RNR_TIMER = 32768 => "IBV_QP_MIN_RNR_TIMER";
    SQ_PSN = 65536 => "IBV_QP_SQ_PSN";
    MAX_DEST_RD_ATOMIC = 131072 => "IBV_QP_MAX_DEST_RD_ATOMIC";
    PATH_MIG_STATE = 262144 => "IBV_QP_PATH_MIG_STATE";
    CAP = 524288 => "IBV_QP_CAP";
    DEST_QPN = 1048576 => "IBV_QP_DEST_QPN";
    RATE_LIMIT = 33554432 => "IBV_QP_RATE_LIMIT";
}

/// One legal RC transition: the attributes it requires and those it also accepts (both
/// without `IBV_QP_STATE`, which every transition needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub from: QpState,
    pub to: QpState,
    pub required: QpAttrMask,
    pub optional: QpAttrMask,
}

/// The legal transitions of an RC QP with their attribute masks (IBTA spec 11.2.5,
/// `ibv_modify_qp(3)`, the kernel's `ib_modify_qp_is_ok`). `None` if `from -> to` is illegal.
pub fn transition(from: QpState, to: QpState) -> Option<Transition> {
    use QpAttrMask as M;
    use QpState::*;
    let none = M::empty();
    let (required, optional) = match (from, to) {
        (f, Reset) | (f, Err) if !matches!(f, Unknown(_)) => (none, none),
        (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, none),
        (Init, Init) => (none, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        (Init, Rtr) => (
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ),
        (Rtr, Rts) => (
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
        ),
        (Rts, Rts) | (Sqd, Rts) => (
            none,
            M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
        ),
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            none,
            M::AV
                | M::ALT_PATH
                | M::ACCESS_FLAGS
                | M::PKEY_INDEX
                | M::MIN_RNR_TIMER
                | M::PATH_MIG_STATE
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC,
        ),
        _ => return None,
    };
    Some(Transition {
        from,
        to,
        required,
        optional,
    })
}

/// The QP transport types `lab` creates (`enum ibv_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// `IBV_QPT_RC`: reliable connected, one peer, every operation.
    Rc,
    /// `IBV_QPT_UD`: unreliable datagram, any peer per message (via an address handle),
    /// SEND/RECV only, one MTU per message, 40-byte GRH in front of received data.
    Ud,
}

impl QpType {
    fn raw(self) -> u32 {
        match self {
            QpType::Rc => ibv_qp_type::IBV_QPT_RC,
            QpType::Ud => ibv_qp_type::IBV_QPT_UD,
        }
    }
}

/// The legal transitions of a QP of type `qp_type` with their attribute masks: RC as in
/// [`transition`]; UD needs a Q_Key at INIT and only a PSN at RTS (no peer, no access flags,
/// no retries).
pub fn transition_for(qp_type: QpType, from: QpState, to: QpState) -> Option<Transition> {
    if qp_type == QpType::Rc {
        return transition(from, to);
    }
    use QpAttrMask as M;
    use QpState::*;
    let none = M::empty();
    let (required, optional) = match (from, to) {
        (f, Reset) | (f, Err) if !matches!(f, Unknown(_)) => (none, none),
        (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::QKEY, none),
        (Init, Init) => (none, M::PKEY_INDEX | M::PORT | M::QKEY),
        (Init, Rtr) => (none, M::PKEY_INDEX | M::QKEY),
        (Rtr, Rts) => (M::SQ_PSN, M::CUR_STATE | M::QKEY),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (none, M::CUR_STATE | M::QKEY),
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (none, M::PKEY_INDEX | M::QKEY),
        _ => return None,
    };
    Some(Transition {
        from,
        to,
        required,
        optional,
    })
}

/// What is wrong with a mask for a transition, per [`transition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaskProblem {
    /// `from -> to` is not a legal transition.
    Illegal { from: QpState, to: QpState },
    /// Required attributes are missing and/or attributes not accepted are present.
    Mask {
        missing: QpAttrMask,
        not_allowed: QpAttrMask,
    },
}

impl fmt::Display for MaskProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaskProblem::Illegal { from, to } => {
                write!(f, "{from} -> {to} is not a legal transition")?;
                let legal: Vec<&str> = [
                    QpState::Reset,
                    QpState::Init,
                    QpState::Rtr,
                    QpState::Rts,
                    QpState::Sqd,
                    QpState::Err,
                ]
                .into_iter()
                .filter(|t| transition(*from, *t).is_some())
                .map(|t| t.short())
                .collect();
                write!(
                    f,
                    " (from {from} the legal targets are {})",
                    legal.join(", ")
                )?;
                if *from == QpState::Init && *to == QpState::Rts {
                    write!(f, "; INIT -> RTS skips RTR: go through RTR first")?;
                }
                Ok(())
            }
            MaskProblem::Mask {
                missing,
                not_allowed,
            } => {
                if !missing.is_empty() {
                    write!(f, "missing required attribute(s): {missing}")?;
                }
                if !not_allowed.is_empty() {
                    if !missing.is_empty() {
                        f.write_str("; ")?;
                    }
                    write!(
                        f,
                        "attribute(s) not accepted in this transition: {not_allowed}"
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// Checks `mask` for `from -> to` against the table ([`transition`]). A mask without
/// `IBV_QP_STATE` modifies attributes within `from`.
pub fn check_transition(
    from: QpState,
    to: QpState,
    mask: QpAttrMask,
) -> std::result::Result<Transition, MaskProblem> {
    check_transition_for(QpType::Rc, from, to, mask)
}

/// [`check_transition`] for a QP of type `qp_type` ([`transition_for`]).
pub fn check_transition_for(
    qp_type: QpType,
    from: QpState,
    to: QpState,
    mask: QpAttrMask,
) -> std::result::Result<Transition, MaskProblem> {
    let to = if mask.contains(QpAttrMask::STATE) {
        to
    } else {
        from
    };
    let t = transition_for(qp_type, from, to).ok_or(MaskProblem::Illegal { from, to })?;
    let attrs = mask - QpAttrMask::STATE;
    let missing = t.required - attrs;
    let not_allowed = attrs - t.required - t.optional;
    if missing.is_empty() && not_allowed.is_empty() {
        Ok(t)
    } else {
        Err(MaskProblem::Mask {
            missing,
            not_allowed,
        })
    }
}

/// The address vector of an RC QP on RoCE (`struct ibv_ah_attr` with its GRH): where the peer
/// is. RoCE has no LIDs, so the GRH (`is_global = 1`) with the peer's GID is mandatory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressVector {
    /// The peer's GID.
    pub dgid: Gid,
    /// The index of *our* GID to send from (pick it by content: `Context::roce_v2_ipv4_gid`).
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    /// Service level.
    pub sl: u8,
    /// Our port.
    pub port_num: u8,
    /// The peer's LID (0 on RoCE).
    pub dlid: u16,
    /// Whether a GRH is used (must be true on RoCE).
    pub is_global: bool,
}

impl AddressVector {
    /// A RoCE address vector: GRH with `dgid`, from our GID `sgid_index`, on `port`.
    pub fn roce(dgid: Gid, sgid_index: u8, port_num: u8) -> AddressVector {
        AddressVector {
            dgid,
            sgid_index,
            hop_limit: DEFAULT_HOP_LIMIT,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            port_num,
            dlid: 0,
            is_global: true,
        }
    }
}

/// Attributes for `ibv_modify_qp(3)` (`struct ibv_qp_attr` plus its mask): each setter sets a
/// field **and** its mask bit, so they cannot disagree. [`QpAttr::with_mask`] overrides the
/// mask for deliberate mistakes.
pub struct QpAttr {
    attr: ibv_qp_attr,
    mask: QpAttrMask,
}

impl Clone for QpAttr {
    fn clone(&self) -> Self {
        QpAttr {
            // SAFETY: ibv_qp_attr is plain data (ints and unions of ints); a bitwise copy is a
            // valid copy (rdma-sys only lacks the Clone derive).
            attr: unsafe { std::ptr::read(&self.attr) },
            mask: self.mask,
        }
    }
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr::new()
    }
}

impl fmt::Debug for QpAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QpAttr")
            .field("state", &QpState::from_raw(self.attr.qp_state))
            .field("mask", &self.mask)
            .finish_non_exhaustive()
    }
}

macro_rules! setters {
    ($( $(#[$m:meta])* $name:ident : $ty:ty => $field:ident, $bit:ident; )*) => {
        $(
            $(#[$m])*
            pub fn $name(mut self, v: $ty) -> Self {
                self.attr.$field = v as _;
                self.mask |= QpAttrMask::$bit;
                self
            }
        )*
    };
}

impl QpAttr {
    /// No attributes, empty mask.
    pub fn new() -> QpAttr {
        QpAttr {
            // SAFETY: ibv_qp_attr is plain data; all-zero is valid.
            attr: unsafe { std::mem::zeroed() },
            mask: QpAttrMask::empty(),
        }
    }

    /// The target state (`qp_state`, `IBV_QP_STATE`).
    pub fn state(mut self, s: QpState) -> Self {
        self.attr.qp_state = s.raw();
        self.mask |= QpAttrMask::STATE;
        self
    }
    /// The state the caller believes the QP is in (`cur_qp_state`, `IBV_QP_CUR_STATE`).
    pub fn cur_state(mut self, s: QpState) -> Self {
        self.attr.cur_qp_state = s.raw();
        self.mask |= QpAttrMask::CUR_STATE;
        self
    }
    /// `path_mtu` (`IBV_QP_PATH_MTU`), not clamped: this is the raw builder.
    pub fn path_mtu(mut self, m: Mtu) -> Self {
        self.attr.path_mtu = m.raw();
        self.mask |= QpAttrMask::PATH_MTU;
        self
    }
    /// `qp_access_flags` (`IBV_QP_ACCESS_FLAGS`): which remote operations the QP accepts.
    pub fn access_flags(mut self, a: AccessFlags) -> Self {
        self.attr.qp_access_flags = a.bits();
        self.mask |= QpAttrMask::ACCESS_FLAGS;
        self
    }
    /// `ah_attr` (`IBV_QP_AV`).
    pub fn av(mut self, av: &AddressVector) -> Self {
        self.attr.ah_attr.grh.dgid = av.dgid.to_ibv();
        self.attr.ah_attr.grh.sgid_index = av.sgid_index;
        self.attr.ah_attr.grh.hop_limit = av.hop_limit;
        self.attr.ah_attr.grh.traffic_class = av.traffic_class;
        self.attr.ah_attr.grh.flow_label = av.flow_label;
        self.attr.ah_attr.is_global = av.is_global as u8;
        self.attr.ah_attr.port_num = av.port_num;
        self.attr.ah_attr.sl = av.sl;
        self.attr.ah_attr.dlid = av.dlid;
        self.mask |= QpAttrMask::AV;
        self
    }

    setters! {
        /// `qkey` (`IBV_QP_QKEY`, UD only).
        qkey: u32 => qkey, QKEY;
        /// The first PSN expected from the peer (`rq_psn`, `IBV_QP_RQ_PSN`) = the peer's sq_psn.
        rq_psn: u32 => rq_psn, RQ_PSN;
        /// Our first PSN (`sq_psn`, `IBV_QP_SQ_PSN`).
        sq_psn: u32 => sq_psn, SQ_PSN;
        /// The peer's QP number (`dest_qp_num`, `IBV_QP_DEST_QPN`).
        dest_qp_num: u32 => dest_qp_num, DEST_QPN;
        /// `pkey_index` (`IBV_QP_PKEY_INDEX`).
        pkey_index: u16 => pkey_index, PKEY_INDEX;
        /// `port_num` (`IBV_QP_PORT`).
        port_num: u8 => port_num, PORT;
        /// Outstanding READs/atomics we may initiate (`max_rd_atomic`, `IBV_QP_MAX_QP_RD_ATOMIC`).
        max_rd_atomic: u8 => max_rd_atomic, MAX_QP_RD_ATOMIC;
        /// Outstanding READs/atomics we accept (`max_dest_rd_atomic`,
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`).
        max_dest_rd_atomic: u8 => max_dest_rd_atomic, MAX_DEST_RD_ATOMIC;
        /// RNR NAK delay we ask senders to wait (`min_rnr_timer`, `IBV_QP_MIN_RNR_TIMER`).
        min_rnr_timer: u8 => min_rnr_timer, MIN_RNR_TIMER;
        /// Ack timeout, 4.096 us * 2^timeout (`timeout`, `IBV_QP_TIMEOUT`).
        timeout: u8 => timeout, TIMEOUT;
        /// Transport retries (`retry_cnt`, `IBV_QP_RETRY_CNT`); 7 = forever on rxe.
        retry_cnt: u8 => retry_cnt, RETRY_CNT;
        /// RNR retries (`rnr_retry`, `IBV_QP_RNR_RETRY`); 7 = forever.
        rnr_retry: u8 => rnr_retry, RNR_RETRY;
    }

    /// Replaces the mask with `mask`, whatever the setters set: for sending a wrong mask on
    /// purpose.
    pub fn with_mask(mut self, mask: QpAttrMask) -> Self {
        self.mask = mask;
        self
    }

    /// The mask that will be sent.
    pub fn mask(&self) -> QpAttrMask {
        self.mask
    }

    /// The target state if `IBV_QP_STATE` is in the mask.
    pub fn target_state(&self) -> Option<QpState> {
        self.mask
            .contains(QpAttrMask::STATE)
            .then(|| QpState::from_raw(self.attr.qp_state))
    }
}

/// Queue capacities (`struct ibv_qp_cap`). rxe rounds queue sizes up to 2^k - 1 internally but
/// reports back what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    /// Largest inline send (rxe grants 64 when asked for 0).
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// What `ibv_create_qp(3)` needs (`struct ibv_qp_init_attr`): the CQs and the queue sizes.
#[derive(Debug, Clone, Copy)]
pub struct QpInitAttr<'a> {
    pub send_cq: &'a CompletionQueue,
    pub recv_cq: &'a CompletionQueue,
    pub cap: QpCap,
    /// Signal every send WR regardless of its flags (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// Take receives from this shared receive queue instead of an own receive queue.
    pub srq: Option<&'a SharedReceiveQueue>,
    /// RC (default) or UD.
    pub qp_type: QpType,
}

impl<'a> QpInitAttr<'a> {
    /// An RC QP (`IBV_QPT_RC`) with default capacities ([`QpCap::default`]).
    pub fn rc(send_cq: &'a CompletionQueue, recv_cq: &'a CompletionQueue) -> Self {
        QpInitAttr {
            send_cq,
            recv_cq,
            cap: QpCap::default(),
            sq_sig_all: false,
            srq: None,
            qp_type: QpType::Rc,
        }
    }
    /// A UD QP (`IBV_QPT_UD`) with default capacities.
    pub fn ud(send_cq: &'a CompletionQueue, recv_cq: &'a CompletionQueue) -> Self {
        QpInitAttr {
            qp_type: QpType::Ud,
            ..QpInitAttr::rc(send_cq, recv_cq)
        }
    }
    /// Attach to a shared receive queue (`qp_init_attr.srq`).
    pub fn srq(mut self, srq: &'a SharedReceiveQueue) -> Self {
        self.srq = Some(srq);
        self
    }
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.cap.max_send_wr = n;
        self
    }
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.cap.max_recv_wr = n;
        self
    }
    pub fn max_send_sge(mut self, n: u32) -> Self {
        self.cap.max_send_sge = n;
        self
    }
    pub fn max_recv_sge(mut self, n: u32) -> Self {
        self.cap.max_recv_sge = n;
        self
    }
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.cap.max_inline_data = n;
        self
    }
    pub fn sq_sig_all(mut self, on: bool) -> Self {
        self.sq_sig_all = on;
        self
    }
}

/// Typestate markers for [`QueuePair`].
pub mod state {
    /// Just created (`IBV_QPS_RESET`).
    #[derive(Debug)]
    pub struct Reset;
    /// Initialised (`IBV_QPS_INIT`): receives may be posted.
    #[derive(Debug)]
    pub struct Init;
    /// Ready to receive (`IBV_QPS_RTR`).
    #[derive(Debug)]
    pub struct Rtr;
    /// Ready to send (`IBV_QPS_RTS`): the only state with `post_send`.
    #[derive(Debug)]
    pub struct Rts;
    /// Error (`IBV_QPS_ERR`): outstanding work completes with `IBV_WC_WR_FLUSH_ERR`.
    #[derive(Debug)]
    pub struct Error;
}

/// The typestate marker trait (sealed).
pub trait QpTypeState: private::Sealed + Send + Sync + 'static {
    /// The run-time state this marker stands for.
    const STATE: QpState;
}
mod private {
    pub trait Sealed {}
}
macro_rules! typestate {
    ($($t:ident => $s:ident),*) => {$(
        impl private::Sealed for state::$t {}
        impl QpTypeState for state::$t { const STATE: QpState = QpState::$s; }
    )*};
}
typestate!(Reset => Reset, Init => Init, Rtr => Rtr, Rts => Rts, Error => Err);

struct QpInner {
    qp: NonNull<ibv_qp>,
    ctx: Context,
    cap: QpCap,
    /// The port set at INIT (used as the default for RTR).
    port: u8,
    qp_type: QpType,
    destroyed: bool,
    // Parents, kept alive until after ibv_destroy_qp (fields drop after Drop::drop).
    _pd: Arc<PdInner>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    _srq: Option<Arc<SrqInner>>,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for QpInner {}
// SAFETY: as above; post/poll verbs lock internally.
unsafe impl Sync for QpInner {}

impl Drop for QpInner {
    fn drop(&mut self) {
        if self.destroyed {
            return;
        }
        // SAFETY: the QP is alive and destroyed exactly once; its CQs and PD are still alive
        // (we hold Arcs, released after this).
        let ret = unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::DestroyQp { errno }) {
            report_drop_failure("ibv_destroy_qp", &e);
        }
    }
}

/// A queue pair (`struct ibv_qp`, `ibv_create_qp(3)`), RC, in typestate `S`.
pub struct QueuePair<S: QpTypeState = state::Rts> {
    inner: QpInner,
    _state: PhantomData<S>,
}

impl<S: QpTypeState> fmt::Debug for QueuePair<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &format_args!("{:#08x}", self.qp_num()))
            .field("typestate", &S::STATE)
            .finish()
    }
}

/// A failed typed transition: the error, and the QP back in the state it was in (as far as
/// the type knows; [`QueuePair::query`] tells the truth). Converts into [`enum@Error`] with `?`
/// (the QP is then dropped, i.e. destroyed).
pub struct TransitionError<S: QpTypeState> {
    inner: Box<(QueuePair<S>, Error)>,
}

impl<S: QpTypeState> TransitionError<S> {
    fn new(qp: QueuePair<S>, error: Error) -> Self {
        TransitionError {
            inner: Box::new((qp, error)),
        }
    }
    /// The error.
    pub fn error(&self) -> &Error {
        &self.inner.1
    }
    /// The QP, still usable (e.g. to try another transition or to query it).
    pub fn qp(&self) -> &QueuePair<S> {
        &self.inner.0
    }
    /// Takes the QP and the error apart.
    pub fn into_parts(self) -> (QueuePair<S>, Error) {
        *self.inner
    }
}

impl<S: QpTypeState> fmt::Debug for TransitionError<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitionError")
            .field("qp", &self.inner.0)
            .field("error", &self.inner.1)
            .finish()
    }
}

impl<S: QpTypeState> fmt::Display for TransitionError<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner.1, f)
    }
}

impl<S: QpTypeState> std::error::Error for TransitionError<S> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.1.source()
    }
}

impl<S: QpTypeState> From<TransitionError<S>> for Error {
    fn from(t: TransitionError<S>) -> Error {
        t.inner.1
    }
}

impl ProtectionDomain {
    /// Creates an RC queue pair in RESET (`ibv_create_qp(3)`).
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<QueuePair<state::Reset>> {
        let mut ia = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: init.send_cq.inner.cq.as_ptr(),
            recv_cq: init.recv_cq.inner.cq.as_ptr(),
            srq: init
                .srq
                .map_or(std::ptr::null_mut(), |s| s.inner.srq.as_ptr()),
            cap: ibv_qp_cap {
                max_send_wr: init.cap.max_send_wr,
                max_recv_wr: init.cap.max_recv_wr,
                max_send_sge: init.cap.max_send_sge,
                max_recv_sge: init.cap.max_recv_sge,
                max_inline_data: init.cap.max_inline_data,
            },
            qp_type: init.qp_type.raw(),
            sq_sig_all: init.sq_sig_all as i32,
        };
        // SAFETY: the PD and both CQs are alive; `ia` is a valid in/out pointer.
        let qp = unsafe { ibv_create_qp(self.inner.pd.as_ptr(), &mut ia) };
        let qp = ptr(qp, |errno| Error::CreateQp {
            errno,
            hint: if errno.0 == libc::EINVAL {
                Hint::new(
                    "a capacity above the device's limits? (query_device: max_qp_wr, max_sge; \
                     max_inline_data)",
                )
            } else {
                Hint::none()
            },
        })?;
        let c = ia.cap;
        Ok(QueuePair {
            inner: QpInner {
                qp,
                ctx: self.inner.ctx.clone(),
                cap: QpCap {
                    max_send_wr: c.max_send_wr,
                    max_recv_wr: c.max_recv_wr,
                    max_send_sge: c.max_send_sge,
                    max_recv_sge: c.max_recv_sge,
                    max_inline_data: c.max_inline_data,
                },
                port: 1,
                qp_type: init.qp_type,
                destroyed: false,
                _pd: self.inner.clone(),
                _send_cq: init.send_cq.inner.clone(),
                _recv_cq: init.recv_cq.inner.clone(),
                _srq: init.srq.map(|s| s.inner.clone()),
            },
            _state: PhantomData,
        })
    }
}

/// INIT attributes for [`QueuePair::to_init`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitAttr {
    pub port: u8,
    pub pkey_index: u16,
    /// Remote operations this QP accepts (`qp_access_flags`); default all of them.
    pub access: AccessFlags,
}

impl Default for InitAttr {
    fn default() -> Self {
        InitAttr {
            port: 1,
            pkey_index: 0,
            access: AccessFlags::ALL_REMOTE,
        }
    }
}

/// RTR attributes for [`QueuePair::to_rtr`]: the peer's QPN, PSN and GID, plus defaults that
/// do not hang on rxe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    pub dest_qp_num: u32,
    /// The peer's first PSN (its `sq_psn`).
    pub rq_psn: u32,
    pub dgid: Gid,
    /// Our GID index; `None` = chosen by content ([`Context::roce_v2_ipv4_gid`]).
    pub sgid_index: Option<u8>,
    /// Path MTU; `None` = the port's active MTU. A larger value is clamped to the active MTU
    /// unless `allow_mtu_above_active` (chapter 08 shows why: a silent hang between nodes).
    pub path_mtu: Option<Mtu>,
    pub allow_mtu_above_active: bool,
    /// Default [`DEFAULT_RD_ATOMIC`], clamped to the device's `max_qp_rd_atom`.
    pub max_dest_rd_atomic: Option<u8>,
    pub min_rnr_timer: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// Service level (`ah_attr.sl`; `ibv_rc_pingpong -l`).
    pub sl: u8,
    /// `None` = the port given at INIT.
    pub port: Option<u8>,
}

impl RtrAttr {
    /// RTR toward the peer `dest_qp_num`/`rq_psn`/`dgid`, with every other field defaulted.
    pub fn new(dest_qp_num: u32, rq_psn: u32, dgid: Gid) -> RtrAttr {
        RtrAttr {
            dest_qp_num,
            rq_psn,
            dgid,
            sgid_index: None,
            path_mtu: None,
            allow_mtu_above_active: false,
            max_dest_rd_atomic: None,
            min_rnr_timer: DEFAULT_MIN_RNR_TIMER,
            hop_limit: DEFAULT_HOP_LIMIT,
            traffic_class: 0,
            sl: 0,
            port: None,
        }
    }
    /// Service level (`ibv_rc_pingpong -l`).
    pub fn sl(mut self, sl: u8) -> Self {
        self.sl = sl;
        self
    }
    /// Send from this GID table entry (e.g. [`Context::roce_v2_ipv4_gid`]'s).
    pub fn sgid(mut self, entry: &crate::device::GidEntry) -> Self {
        self.sgid_index = Some(entry.index as u8);
        self
    }
    pub fn sgid_index(mut self, i: u8) -> Self {
        self.sgid_index = Some(i);
        self
    }
    /// Ask for this MTU (still clamped to the active MTU).
    pub fn path_mtu(mut self, m: Mtu) -> Self {
        self.path_mtu = Some(m);
        self
    }
    /// Use exactly this MTU even above the port's active MTU (a deliberate mistake).
    pub fn path_mtu_unclamped(mut self, m: Mtu) -> Self {
        self.path_mtu = Some(m);
        self.allow_mtu_above_active = true;
        self
    }
    pub fn max_dest_rd_atomic(mut self, n: u8) -> Self {
        self.max_dest_rd_atomic = Some(n);
        self
    }
    pub fn min_rnr_timer(mut self, t: u8) -> Self {
        self.min_rnr_timer = t;
        self
    }
    pub fn port(mut self, p: u8) -> Self {
        self.port = Some(p);
        self
    }
}

/// RTS attributes for [`QueuePair::to_rts`]: our PSN and finite retry defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    pub sq_psn: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// Default [`DEFAULT_RD_ATOMIC`], clamped to the device's `max_qp_init_rd_atom`.
    pub max_rd_atomic: Option<u8>,
}

impl RtsAttr {
    /// RTS with our first PSN and the defaults [`DEFAULT_TIMEOUT`], [`DEFAULT_RETRY_CNT`],
    /// [`DEFAULT_RNR_RETRY`].
    pub fn new(sq_psn: u32) -> RtsAttr {
        RtsAttr {
            sq_psn,
            timeout: DEFAULT_TIMEOUT,
            retry_cnt: DEFAULT_RETRY_CNT,
            rnr_retry: DEFAULT_RNR_RETRY,
            max_rd_atomic: None,
        }
    }
    pub fn timeout(mut self, t: u8) -> Self {
        self.timeout = t;
        self
    }
    pub fn retry_cnt(mut self, n: u8) -> Self {
        self.retry_cnt = n;
        self
    }
    pub fn rnr_retry(mut self, n: u8) -> Self {
        self.rnr_retry = n;
        self
    }
    pub fn max_rd_atomic(mut self, n: u8) -> Self {
        self.max_rd_atomic = Some(n);
        self
    }
}

/// What `ibv_query_qp(3)` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    pub state: QpState,
    pub path_mtu: Option<Mtu>,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub access: AccessFlags,
    pub pkey_index: u16,
    pub port_num: u8,
    pub av: AddressVector,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub cap: QpCap,
}

impl<S: QpTypeState> QueuePair<S> {
    fn relabel<T: QpTypeState>(self) -> QueuePair<T> {
        QueuePair {
            inner: self.inner,
            _state: PhantomData,
        }
    }

    pub(crate) fn raw(&self) -> *mut ibv_qp {
        self.inner.qp.as_ptr()
    }

    /// The QP number (`qp->qp_num`), what the peer needs as `dest_qp_num`.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is alive while `self` is.
        unsafe { (*self.inner.qp.as_ptr()).qp_num }
    }

    /// RC or UD.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The capacities granted at creation.
    pub fn cap(&self) -> QpCap {
        self.inner.cap
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The state the type says the QP is in.
    pub fn typestate(&self) -> QpState {
        S::STATE
    }

    /// Raw `ibv_modify_qp(3)` with any attributes and mask, in any state: the escape hatch for
    /// attempting illegal transitions on purpose. On failure the error names the transition,
    /// the mask, the errno and what the transition table says is wrong. The typed handle is
    /// not changed: use [`QueuePair::assume_state`] if you moved the QP yourself.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let mut a = attr.clone();
        // SAFETY: the QP is alive and `a.attr` is a valid attribute struct.
        let ret =
            unsafe { ibv_modify_qp(self.inner.qp.as_ptr(), &mut a.attr, a.mask.bits() as i32) };
        rc(ret, |errno| {
            // The state the QP is really in (the modify failed, so it did not change). Not
            // `qp->state`: libibverbs only updates that on a successful modify, so it misses
            // the device moving the QP to ERR on its own.
            let from = self.state().unwrap_or_else(|_| {
                // SAFETY: the QP is alive; `state` is a plain field.
                QpState::from_raw(unsafe { (*self.inner.qp.as_ptr()).state })
            });
            let to = attr.target_state().unwrap_or(from);
            Error::ModifyQp {
                from,
                to,
                mask: attr.mask,
                errno,
                hint: self.modify_hint(from, to, attr, errno),
            }
        })
    }

    fn modify_hint(&self, from: QpState, to: QpState, attr: &QpAttr, errno: Errno) -> Hint {
        if errno.0 != libc::EINVAL {
            return Hint::none();
        }
        let mut notes: Vec<String> = Vec::new();
        if let Err(p) = check_transition_for(self.inner.qp_type, from, to, attr.mask) {
            notes.push(p.to_string());
        }
        let m = attr.mask;
        if m.contains(QpAttrMask::AV) {
            let a = &attr.attr.ah_attr;
            // SAFETY: reading the bytes of a plain-data union.
            let dgid = Gid(unsafe { a.grh.dgid.raw });
            if a.is_global == 0 {
                notes.push(
                    "on RoCE the address vector needs a GRH (is_global = 1) with the peer's GID"
                        .into(),
                );
            }
            let port = if a.port_num == 0 {
                self.inner.port
            } else {
                a.port_num
            };
            match self.inner.ctx.query_gid(port, a.grh.sgid_index as u32) {
                Ok(e) => {
                    if e.gid.is_zero() {
                        notes.push(format!("sgid_index {} is an empty GID slot", e.index));
                    } else if e.gid.to_ipv4().is_some() != dgid.to_ipv4().is_some() {
                        notes.push(format!(
                            "GID index: sgid_index {} is {} ({}) but the destination GID is {}: \
                             both ends must use the same kind of GID; for RoCE v2 over IPv4 pick \
                             the ::ffff:a.b.c.d entry by content (Context::roce_v2_ipv4_gid)",
                            e.index, e.gid, e.gid_type, dgid
                        ));
                    } else if e.gid_type != GidType::RoceV2 {
                        notes.push(format!(
                            "sgid_index {} is a {} GID; rxe speaks RoCE v2",
                            e.index, e.gid_type
                        ));
                    }
                }
                Err(_) => notes.push(format!(
                    "sgid_index {} is not in the GID table of port {port}",
                    a.grh.sgid_index
                )),
            }
        }
        if m.contains(QpAttrMask::PATH_MTU)
            && let Ok(p) = self.inner.ctx.query_port(self.inner.port)
            && attr.attr.path_mtu > p.active_mtu.raw()
        {
            notes.push(format!(
                "path MTU {} is above the port's active MTU {}",
                Mtu::from_raw(attr.attr.path_mtu).map_or(0, |m| m.bytes()),
                p.active_mtu
            ));
        }
        let rd_mask = QpAttrMask::MAX_QP_RD_ATOMIC | QpAttrMask::MAX_DEST_RD_ATOMIC;
        if !(m & rd_mask).is_empty()
            && let Ok(d) = self.inner.ctx.query_device()
        {
            if m.contains(QpAttrMask::MAX_QP_RD_ATOMIC)
                && attr.attr.max_rd_atomic as i32 > d.max_qp_init_rd_atom
            {
                notes.push(format!(
                    "max_rd_atomic {} is above the device's max_qp_init_rd_atom {}",
                    attr.attr.max_rd_atomic, d.max_qp_init_rd_atom
                ));
            }
            if m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC)
                && attr.attr.max_dest_rd_atomic as i32 > d.max_qp_rd_atom
            {
                notes.push(format!(
                    "max_dest_rd_atomic {} is above the device's max_qp_rd_atom {}",
                    attr.attr.max_dest_rd_atomic, d.max_qp_rd_atom
                ));
            }
        }
        if m.contains(QpAttrMask::ACCESS_FLAGS) {
            let acc = AccessFlags::from_bits(attr.attr.qp_access_flags);
            if acc.unknown_bits() != 0 {
                notes.push(format!(
                    "unknown access flag bits {:#x}",
                    acc.unknown_bits()
                ));
            }
        }
        if notes.is_empty() {
            Hint::none()
        } else {
            Hint::new(notes.join("\n  hint: "))
        }
    }

    /// `ibv_query_qp(3)`: what the QP really is now.
    pub fn query(&self) -> Result<QpInfo> {
        // SAFETY: plain data; all-zero is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain data; all-zero is valid.
        let mut ia: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // Every attribute below IBV_QP_RATE_LIMIT: libibverbs refuses the mask with EOPNOTSUPP
        // if it has RATE_LIMIT or a higher bit.
        let all = QpAttrMask::RATE_LIMIT.bits() - 1;
        // SAFETY: the QP is alive; out-pointers are valid.
        let ret = unsafe { ibv_query_qp(self.inner.qp.as_ptr(), &mut a, all as i32, &mut ia) };
        rc(ret, |errno| Error::QueryQp { errno })?;
        let ah = a.ah_attr;
        Ok(QpInfo {
            state: QpState::from_raw(a.qp_state),
            path_mtu: Mtu::from_raw(a.path_mtu),
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            access: AccessFlags::from_bits(a.qp_access_flags),
            pkey_index: a.pkey_index,
            port_num: a.port_num,
            av: AddressVector {
                // SAFETY: reading the bytes of a plain-data union.
                dgid: Gid(unsafe { ah.grh.dgid.raw }),
                sgid_index: ah.grh.sgid_index,
                hop_limit: ah.grh.hop_limit,
                traffic_class: ah.grh.traffic_class,
                flow_label: ah.grh.flow_label,
                sl: ah.sl,
                port_num: ah.port_num,
                dlid: ah.dlid,
                is_global: ah.is_global != 0,
            },
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            cap: QpCap {
                max_send_wr: a.cap.max_send_wr,
                max_recv_wr: a.cap.max_recv_wr,
                max_send_sge: a.cap.max_send_sge,
                max_recv_sge: a.cap.max_recv_sge,
                max_inline_data: a.cap.max_inline_data,
            },
        })
    }

    /// The current state (`ibv_query_qp(3)` with `IBV_QP_STATE`).
    pub fn state(&self) -> Result<QpState> {
        Ok(self.query()?.state)
    }

    fn transition_to<T: QpTypeState>(
        self,
        attr: QpAttr,
    ) -> std::result::Result<QueuePair<T>, TransitionError<S>> {
        match self.modify(&attr) {
            Ok(()) => Ok(self.relabel()),
            Err(error) => Err(TransitionError::new(self, error)),
        }
    }

    /// Moves the QP to ERR (`ibv_modify_qp(3)`): outstanding and later work requests complete
    /// with `IBV_WC_WR_FLUSH_ERR`.
    pub fn to_error(self) -> std::result::Result<QueuePair<state::Error>, TransitionError<S>> {
        self.transition_to(QpAttr::new().state(QpState::Err))
    }

    /// Moves the QP back to RESET (`ibv_modify_qp(3)`), from any state: queues are emptied
    /// (without completions) and the QP can be brought up again, even toward a new peer.
    pub fn reset(self) -> std::result::Result<QueuePair<state::Reset>, TransitionError<S>> {
        self.transition_to(QpAttr::new().state(QpState::Reset))
    }

    /// Re-labels the typed handle after moving the QP with [`QueuePair::modify`]. No verb is
    /// called and nothing is checked: posting in the wrong state just fails with EINVAL.
    pub fn assume_state<T: QpTypeState>(self) -> QueuePair<T> {
        self.relabel()
    }

    /// `ibv_post_recv(3)`: posts the receive work requests as one chain. Allowed from INIT on
    /// (in RESET it fails with EINVAL). Allocates nothing.
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
        // SAFETY: the QP is alive; the chain links valid WRs living in `wrs`, whose SGEs are
        // borrowed for the call (the provider copies them into the queue).
        let ret = unsafe { ibv_post_recv(self.inner.qp.as_ptr(), first, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        let index = chain_index(first as usize, bad as usize, size_of::<ibv_recv_wr>(), n);
        rc(ret, |errno| Error::PostRecv {
            errno,
            index,
            hint: self.post_recv_hint(errno, &wrs[index.min(n - 1)]),
        })
    }

    /// Posts one receive work request (`ibv_post_recv(3)`).
    pub fn post_recv_one(&self, wr: RecvWr<'_>) -> Result<()> {
        self.post_recv(&mut [wr])
    }

    fn post_recv_hint(&self, errno: Errno, wr: &RecvWr<'_>) -> Hint {
        match errno.0 {
            libc::ENOMEM => Hint::new(format!(
                "the receive queue is full (max_recv_wr {}; rxe rounds it up to 2^k-1): wait for \
                 receive completions before posting more",
                self.inner.cap.max_recv_wr
            )),
            libc::EINVAL if wr.wr.num_sge as u32 > self.inner.cap.max_recv_sge => {
                Hint::new(format!(
                    "{} SGEs but max_recv_sge is {}",
                    wr.wr.num_sge, self.inner.cap.max_recv_sge
                ))
            }
            libc::EINVAL => match self.state() {
                Ok(QpState::Reset) => {
                    Hint::new("the QP is in RESET: receives can be posted from INIT on")
                }
                _ => Hint::none(),
            },
            _ => Hint::none(),
        }
    }

    /// `ibv_post_send(3)` in any state, bypassing the typestate: for showing what posting
    /// before RTS does. On rxe it returns EINVAL **but queues the work request anyway**; it
    /// goes out with the next successful post once the QP is in RTS (a "ghost send").
    pub fn post_send_any_state(&self, wrs: &mut [SendWr<'_>]) -> Result<()> {
        post_send_impl(&self.inner, wrs)
    }

    /// Destroys the QP now (`ibv_destroy_qp(3)`), reporting failure.
    pub fn destroy(mut self) -> Result<()> {
        self.inner.destroyed = true;
        // SAFETY: the QP is alive; `destroyed` stops Drop from destroying it again.
        let ret = unsafe { ibv_destroy_qp(self.inner.qp.as_ptr()) };
        rc(ret, |errno| Error::DestroyQp { errno })
    }
}

fn chain_index(first: usize, bad: usize, size: usize, n: usize) -> usize {
    if bad < first {
        return 0;
    }
    ((bad - first) / size).min(n.saturating_sub(1))
}

fn post_send_impl(inner: &QpInner, wrs: &mut [SendWr<'_>]) -> Result<()> {
    let n = wrs.len();
    if n == 0 {
        return Ok(());
    }
    for i in 0..n - 1 {
        let next: *mut ibv_send_wr = &mut wrs[i + 1].wr;
        wrs[i].wr.next = next;
    }
    wrs[n - 1].wr.next = std::ptr::null_mut();
    let first: *mut ibv_send_wr = &mut wrs[0].wr;
    let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
    // SAFETY: the QP is alive; the chain links valid WRs living in `wrs`. SGEs point at
    // registered memory (validated by the device through the lkey) or, for inline WRs, at
    // borrowed slices the provider copies during this call.
    let ret = unsafe { ibv_post_send(inner.qp.as_ptr(), first, &mut bad) };
    if ret == 0 {
        return Ok(());
    }
    let index = chain_index(first as usize, bad as usize, size_of::<ibv_send_wr>(), n);
    rc(ret, |errno| Error::PostSend {
        errno,
        index,
        hint: post_send_hint(inner, errno, &wrs[index]),
    })
}

fn post_send_hint(inner: &QpInner, errno: Errno, wr: &SendWr<'_>) -> Hint {
    let cap = inner.cap;
    match errno.0 {
        libc::ENOMEM => {
            return Hint::new(format!(
                "the send queue is full (max_send_wr {}; rxe rounds it up to 2^k-1): poll \
                 completions to free slots; with unsignaled WRs, signal at least one in every \
                 max_send_wr",
                cap.max_send_wr
            ));
        }
        libc::EINVAL => {}
        _ => return Hint::none(),
    }
    // SAFETY: plain data; all-zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    // SAFETY: plain data; all-zero is valid.
    let mut ia: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the QP is alive; out-pointers valid.
    let q = unsafe {
        ibv_query_qp(
            inner.qp.as_ptr(),
            &mut a,
            QpAttrMask::STATE.bits() as i32,
            &mut ia,
        )
    };
    let state = QpState::from_raw(a.qp_state);
    if q == 0 && state != QpState::Rts && state != QpState::Sqd {
        return Hint::new(format!(
            "the QP is in {state}: sends need RTS. Beware: rxe has queued this work request \
             anyway; it goes out with the next successful post after RTS"
        ));
    }
    let flags = wr.flags();
    let sg_len: u64 = (0..wr.wr.num_sge.max(0) as usize)
        // SAFETY: sg_list has num_sge entries borrowed for the SendWr's lifetime.
        .map(|i| unsafe { (*wr.wr.sg_list.add(i)).length as u64 })
        .sum();
    if flags.contains(SendFlags::INLINE) && sg_len > cap.max_inline_data as u64 {
        return Hint::new(format!(
            "{sg_len} bytes inline but max_inline_data is {}",
            cap.max_inline_data
        ));
    }
    if wr.wr.num_sge as u32 > cap.max_send_sge {
        return Hint::new(format!(
            "{} SGEs but max_send_sge is {}",
            wr.wr.num_sge, cap.max_send_sge
        ));
    }
    if matches!(
        wr.opcode(),
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
    ) {
        // SAFETY: atomics were built with the atomic union member.
        let raddr = unsafe { wr.wr.wr.atomic.remote_addr };
        if raddr & 7 != 0 {
            return Hint::new(format!(
                "atomics need an 8-byte aligned remote address; {raddr:#x} is not"
            ));
        }
        if sg_len != 8 {
            return Hint::new("an atomic's local SGE must be exactly 8 bytes");
        }
    }
    Hint::none()
}

impl QueuePair<state::Reset> {
    /// RESET -> INIT (`ibv_modify_qp(3)` with `IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
    /// IBV_QP_ACCESS_FLAGS`).
    pub fn to_init(
        mut self,
        a: &InitAttr,
    ) -> std::result::Result<QueuePair<state::Init>, TransitionError<state::Reset>> {
        self.inner.port = a.port;
        self.transition_to(
            QpAttr::new()
                .state(QpState::Init)
                .pkey_index(a.pkey_index)
                .port_num(a.port)
                .access_flags(a.access),
        )
    }

    /// RESET -> INIT -> RTR -> RTS in one call, with the given attributes.
    pub fn bring_up(
        self,
        init: &InitAttr,
        rtr: &RtrAttr,
        rts: &RtsAttr,
    ) -> Result<QueuePair<state::Rts>> {
        Ok(self.to_init(init)?.to_rtr(rtr)?.to_rts(rts)?)
    }
}

impl QueuePair<state::Reset> {
    /// UD: RESET -> INIT (`ibv_modify_qp(3)` with `IBV_QP_STATE | IBV_QP_PKEY_INDEX |
    /// IBV_QP_PORT | IBV_QP_QKEY`). Senders must address this QP with the same `qkey`.
    pub fn to_init_ud(
        mut self,
        port: u8,
        qkey: u32,
    ) -> std::result::Result<QueuePair<state::Init>, TransitionError<state::Reset>> {
        self.inner.port = port;
        self.transition_to(
            QpAttr::new()
                .state(QpState::Init)
                .pkey_index(0)
                .port_num(port)
                .qkey(qkey),
        )
    }

    /// UD: RESET -> INIT -> RTR -> RTS in one call.
    pub fn bring_up_ud(self, port: u8, qkey: u32, sq_psn: u32) -> Result<QueuePair<state::Rts>> {
        Ok(self
            .to_init_ud(port, qkey)?
            .to_rtr_ud()?
            .to_rts_ud(sq_psn)?)
    }
}

impl QueuePair<state::Init> {
    /// UD: INIT -> RTR (`IBV_QP_STATE` only: a UD QP has no peer).
    pub fn to_rtr_ud(
        self,
    ) -> std::result::Result<QueuePair<state::Rtr>, TransitionError<state::Init>> {
        self.transition_to(QpAttr::new().state(QpState::Rtr))
    }
}

impl QueuePair<state::Rtr> {
    /// UD: RTR -> RTS (`IBV_QP_STATE | IBV_QP_SQ_PSN`).
    pub fn to_rts_ud(
        self,
        sq_psn: u32,
    ) -> std::result::Result<QueuePair<state::Rts>, TransitionError<state::Rtr>> {
        self.transition_to(QpAttr::new().state(QpState::Rts).sq_psn(sq_psn))
    }
}

impl QueuePair<state::Init> {
    /// INIT -> RTR (`ibv_modify_qp(3)` with `IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
    /// IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER`).
    ///
    /// Defaults filled in here: the sgid is the RoCE v2 IPv4-mapped entry (by content), the
    /// path MTU is the port's active MTU (a larger one is clamped), and `max_dest_rd_atomic`
    /// is 16 clamped to the device (0 would make every incoming READ fail).
    pub fn to_rtr(
        self,
        a: &RtrAttr,
    ) -> std::result::Result<QueuePair<state::Rtr>, TransitionError<state::Init>> {
        match self.rtr_attr(a) {
            Ok(attr) => self.transition_to(attr),
            Err(error) => Err(TransitionError::new(self, error)),
        }
    }

    fn rtr_attr(&self, a: &RtrAttr) -> Result<QpAttr> {
        let ctx = &self.inner.ctx;
        let port = a.port.unwrap_or(self.inner.port);
        let sgid_index = match a.sgid_index {
            Some(i) => i,
            None => ctx.roce_v2_ipv4_gid(port)?.index as u8,
        };
        let active = ctx.query_port(port)?.active_mtu;
        let mtu = match a.path_mtu {
            None => active,
            Some(m) if a.allow_mtu_above_active => m,
            Some(m) => m.min(active),
        };
        let max_dest = match a.max_dest_rd_atomic {
            Some(n) => n,
            None => {
                let d = ctx.query_device()?;
                DEFAULT_RD_ATOMIC.min(d.max_qp_rd_atom.clamp(0, 255) as u8)
            }
        };
        let mut av = AddressVector::roce(a.dgid, sgid_index, port);
        av.hop_limit = a.hop_limit;
        av.traffic_class = a.traffic_class;
        av.sl = a.sl;
        Ok(QpAttr::new()
            .state(QpState::Rtr)
            .av(&av)
            .path_mtu(mtu)
            .dest_qp_num(a.dest_qp_num)
            .rq_psn(a.rq_psn)
            .max_dest_rd_atomic(max_dest)
            .min_rnr_timer(a.min_rnr_timer))
    }
}

impl QueuePair<state::Rtr> {
    /// RTR -> RTS (`ibv_modify_qp(3)` with `IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
    /// IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC`).
    ///
    /// `max_rd_atomic` defaults to 16 clamped to the device: left at 0, an RDMA READ never
    /// completes on rxe.
    pub fn to_rts(
        self,
        a: &RtsAttr,
    ) -> std::result::Result<QueuePair<state::Rts>, TransitionError<state::Rtr>> {
        let max_rd = match a.max_rd_atomic {
            Some(n) => n,
            None => match self.inner.ctx.query_device() {
                Ok(d) => DEFAULT_RD_ATOMIC.min(d.max_qp_init_rd_atom.clamp(0, 255) as u8),
                Err(error) => return Err(TransitionError::new(self, error)),
            },
        };
        self.transition_to(
            QpAttr::new()
                .state(QpState::Rts)
                .timeout(a.timeout)
                .retry_cnt(a.retry_cnt)
                .rnr_retry(a.rnr_retry)
                .sq_psn(a.sq_psn)
                .max_rd_atomic(max_rd),
        )
    }
}

impl QueuePair<state::Rts> {
    /// `ibv_post_send(3)`: posts the work requests as one chain (one call, one doorbell).
    /// Allocates nothing and copies no payload. On failure the error says which WR of the
    /// chain was refused (those before it were posted).
    pub fn post_send(&self, wrs: &mut [SendWr<'_>]) -> Result<()> {
        post_send_impl(&self.inner, wrs)
    }

    /// Posts one send work request (`ibv_post_send(3)`).
    pub fn post_send_one(&self, wr: SendWr<'_>) -> Result<()> {
        post_send_impl(&self.inner, &mut [wr])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpAttrMask as M;

    #[test]
    fn rc_bring_up_masks() {
        let t = transition(QpState::Reset, QpState::Init).unwrap();
        assert_eq!(t.required, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        let t = transition(QpState::Init, QpState::Rtr).unwrap();
        assert_eq!(
            t.required,
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        );
        let t = transition(QpState::Rtr, QpState::Rts).unwrap();
        assert_eq!(
            t.required,
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
        );
    }

    #[test]
    fn illegal_shortcuts_are_illegal() {
        assert!(transition(QpState::Init, QpState::Rts).is_none());
        assert!(transition(QpState::Reset, QpState::Rtr).is_none());
        assert!(transition(QpState::Reset, QpState::Rts).is_none());
        assert!(transition(QpState::Err, QpState::Init).is_none());
        let p = check_transition(QpState::Init, QpState::Rts, M::STATE).unwrap_err();
        let s = p.to_string();
        assert!(s.contains("INIT -> RTS is not a legal transition"), "{s}");
        assert!(s.contains("skips RTR"), "{s}");
    }

    #[test]
    fn any_state_can_reset_or_fail() {
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Err,
        ] {
            assert!(transition(s, QpState::Reset).is_some());
            assert!(transition(s, QpState::Err).is_some());
        }
    }

    #[test]
    fn ud_table_differs() {
        let t = transition_for(QpType::Ud, QpState::Reset, QpState::Init).unwrap();
        assert_eq!(t.required, M::PKEY_INDEX | M::PORT | M::QKEY);
        let t = transition_for(QpType::Ud, QpState::Rtr, QpState::Rts).unwrap();
        assert_eq!(t.required, M::SQ_PSN);
        let p = check_transition_for(
            QpType::Ud,
            QpState::Reset,
            QpState::Init,
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        )
        .unwrap_err();
        assert_eq!(
            p,
            MaskProblem::Mask {
                missing: M::QKEY,
                not_allowed: M::ACCESS_FLAGS
            }
        );
    }

    #[test]
    fn missing_attribute_is_named() {
        let mask = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MIN_RNR_TIMER;
        let p = check_transition(QpState::Init, QpState::Rtr, mask).unwrap_err();
        assert_eq!(
            p,
            MaskProblem::Mask {
                missing: M::MAX_DEST_RD_ATOMIC,
                not_allowed: M::empty()
            }
        );
        assert!(p.to_string().contains("IBV_QP_MAX_DEST_RD_ATOMIC"));
        let p = check_transition(
            QpState::Reset,
            QpState::Init,
            M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS | M::SQ_PSN,
        )
        .unwrap_err();
        assert!(p.to_string().contains("not accepted"), "{p}");
    }

    #[test]
    fn builder_sets_field_and_mask_together() {
        let a = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(6)
            .rnr_retry(6)
            .sq_psn(0x123)
            .max_rd_atomic(16);
        assert_eq!(
            a.mask(),
            M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
        );
        assert!(check_transition(QpState::Rtr, QpState::Rts, a.mask()).is_ok());
        assert_eq!(a.attr.sq_psn, 0x123);
        assert_eq!(a.target_state(), Some(QpState::Rts));
        let b = a.clone().with_mask(M::STATE);
        assert_eq!(b.mask(), M::STATE);
    }

    #[test]
    fn masks_match_rdma_sys() {
        use rdma_sys::ibv_qp_attr_mask as R;
        assert_eq!(M::STATE.bits(), R::IBV_QP_STATE.0);
        assert_eq!(M::AV.bits(), R::IBV_QP_AV.0);
        assert_eq!(M::MAX_DEST_RD_ATOMIC.bits(), R::IBV_QP_MAX_DEST_RD_ATOMIC.0);
        assert_eq!(M::DEST_QPN.bits(), R::IBV_QP_DEST_QPN.0);
        assert_eq!(M::RATE_LIMIT.bits(), R::IBV_QP_RATE_LIMIT.0);
        assert_eq!(M::SQ_PSN.bits(), R::IBV_QP_SQ_PSN.0);
    }

    #[test]
    fn defaults_never_hang_on_rxe() {
        let r = RtsAttr::new(1);
        assert!(r.retry_cnt <= 6);
        assert!(r.rnr_retry < 7);
        assert_eq!(r.timeout, 14);
        assert_eq!(RtrAttr::new(1, 2, Gid::default()).min_rnr_timer, 12);
        assert_eq!(QpState::Rts.to_string(), "RTS");
        assert_eq!(QpState::Err.name(), "IBV_QPS_ERR");
    }
}
