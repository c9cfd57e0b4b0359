//! The attributes of a queue pair: the address vector, `ibv_modify_qp`'s attributes
//! ([`QpAttr`], each setter sets a field and its mask bit), the creation attributes
//! ([`QpInitAttr`], [`QpCap`]), the per-transition bundles ([`InitAttr`], [`RtrAttr`],
//! [`RtsAttr`]) and what `ibv_query_qp` reports ([`QpInfo`]).

use std::fmt;

use rdma_sys::*;

use super::state_machine::{QpAttrMask, QpState, QpType};
use super::{
    DEFAULT_HOP_LIMIT, DEFAULT_MIN_RNR_TIMER, DEFAULT_RETRY_CNT, DEFAULT_RNR_RETRY, DEFAULT_TIMEOUT,
};
use crate::cq::CompletionQueue;
use crate::device::{Gid, Mtu};
use crate::mr::AccessFlags;
use crate::srq::SharedReceiveQueue;

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
    pub(super) attr: ibv_qp_attr,
    pub(super) mask: QpAttrMask,
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

/// INIT attributes for [`QueuePair::to_init`](super::QueuePair::to_init).
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

/// RTR attributes for [`QueuePair::to_rtr`](super::QueuePair::to_rtr): the peer's QPN, PSN
/// and GID, plus defaults that do not hang on rxe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    pub dest_qp_num: u32,
    /// The peer's first PSN (its `sq_psn`).
    pub rq_psn: u32,
    pub dgid: Gid,
    /// Our GID index; `None` = chosen by content
    /// ([`Context::roce_v2_ipv4_gid`](crate::device::Context::roce_v2_ipv4_gid)).
    pub sgid_index: Option<u8>,
    /// Path MTU; `None` = the port's active MTU. A larger value is clamped to the active MTU
    /// unless `allow_mtu_above_active` (chapter 08 shows why: a silent hang between nodes).
    pub path_mtu: Option<Mtu>,
    pub allow_mtu_above_active: bool,
    /// Default [`DEFAULT_RD_ATOMIC`](super::DEFAULT_RD_ATOMIC), clamped to the device's
    /// `max_qp_rd_atom`.
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
    /// Send from this GID table entry (e.g.
    /// [`Context::roce_v2_ipv4_gid`](crate::device::Context::roce_v2_ipv4_gid)'s).
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

/// RTS attributes for [`QueuePair::to_rts`](super::QueuePair::to_rts): our PSN and finite
/// retry defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    pub sq_psn: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// Default [`DEFAULT_RD_ATOMIC`](super::DEFAULT_RD_ATOMIC), clamped to the device's
    /// `max_qp_init_rd_atom`.
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

    /// The raw attributes of the RTR -> RTS call, with `max_rd_atomic` (what
    /// [`QueuePair::to_rts`](super::QueuePair::to_rts) sends, the default already resolved):
    /// state RTS, timeout, retry_cnt, rnr_retry, sq_psn and max_rd_atomic, each with its mask
    /// bit. For [`QueuePair::modify`](super::QueuePair::modify), to send them from a state
    /// the typed path does not allow (chapter 08 sends them from INIT).
    pub fn qp_attr(&self, max_rd_atomic: u8) -> QpAttr {
        QpAttr::new()
            .state(QpState::Rts)
            .timeout(self.timeout)
            .retry_cnt(self.retry_cnt)
            .rnr_retry(self.rnr_retry)
            .sq_psn(self.sq_psn)
            .max_rd_atomic(max_rd_atomic)
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
