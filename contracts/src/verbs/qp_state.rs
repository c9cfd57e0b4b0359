//! The RC and UD state machines as data: the states (`enum ibv_qp_state`), the attribute mask
//! (`enum ibv_qp_attr_mask`), the legal transitions with the masks each requires and accepts
//! (IBTA spec 11.2.5, `ibv_modify_qp(3)`), and the check that explains an EINVAL. Pure: no
//! verb is called here, so the property tests run on any host, and the book draws the state
//! machine from this table without linking libibverbs. The C values are rdma-core's `verbs.h`;
//! `lab`'s unit tests check each against the rdma-sys bindings.

use std::fmt;

use crate::{c_enum, flag_set};

c_enum! {
    /// `enum ibv_qp_state` at run time (what `ibv_query_qp` reports).
    pub enum QpState: u32, unknown "IBV_QPS_UNKNOWN" {
        Reset = 0 => "IBV_QPS_RESET",
        Init = 1 => "IBV_QPS_INIT",
        Rtr = 2 => "IBV_QPS_RTR",
        Rts = 3 => "IBV_QPS_RTS",
        Sqd = 4 => "IBV_QPS_SQD",
        Sqe = 5 => "IBV_QPS_SQE",
        Err = 6 => "IBV_QPS_ERR",
    }
}

impl QpState {
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

c_enum! {
    /// The QP transport types `lab` creates (`enum ibv_qp_type`).
    pub enum QpType: u32, closed {
        /// `IBV_QPT_RC`: reliable connected, one peer, every operation.
        Rc = 2 => "IBV_QPT_RC",
        /// `IBV_QPT_UD`: unreliable datagram, any peer per message (via an address handle),
        /// SEND/RECV only, one MTU per message, 40-byte GRH in front of received data.
        Ud = 4 => "IBV_QPT_UD",
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
