//! Asynchronous events (`ibv_get_async_event(3)`): what happened, and to which object.

use std::fmt;

use crate::flags::c_enum;

c_enum! {
    /// `enum ibv_event_type`: what an asynchronous event reports.
    pub enum AsyncEventType: u32, unknown "IBV_EVENT_?" {
        CqErr = 0 => "IBV_EVENT_CQ_ERR",
        QpFatal = 1 => "IBV_EVENT_QP_FATAL",
        QpReqErr = 2 => "IBV_EVENT_QP_REQ_ERR",
        QpAccessErr = 3 => "IBV_EVENT_QP_ACCESS_ERR",
        CommEst = 4 => "IBV_EVENT_COMM_EST",
        SqDrained = 5 => "IBV_EVENT_SQ_DRAINED",
        PathMig = 6 => "IBV_EVENT_PATH_MIG",
        PathMigErr = 7 => "IBV_EVENT_PATH_MIG_ERR",
        DeviceFatal = 8 => "IBV_EVENT_DEVICE_FATAL",
        PortActive = 9 => "IBV_EVENT_PORT_ACTIVE",
        PortErr = 10 => "IBV_EVENT_PORT_ERR",
        LidChange = 11 => "IBV_EVENT_LID_CHANGE",
        PkeyChange = 12 => "IBV_EVENT_PKEY_CHANGE",
        SmChange = 13 => "IBV_EVENT_SM_CHANGE",
        SrqErr = 14 => "IBV_EVENT_SRQ_ERR",
        SrqLimitReached = 15 => "IBV_EVENT_SRQ_LIMIT_REACHED",
        QpLastWqeReached = 16 => "IBV_EVENT_QP_LAST_WQE_REACHED",
        ClientReregister = 17 => "IBV_EVENT_CLIENT_REREGISTER",
        GidChange = 18 => "IBV_EVENT_GID_CHANGE",
        WqFatal = 19 => "IBV_EVENT_WQ_FATAL",
    }
}

pub(super) enum ElementKind {
    Cq,
    Qp,
    Srq,
    Port,
    Device,
}

impl AsyncEventType {
    pub(super) fn element_kind(self) -> ElementKind {
        use AsyncEventType::*;
        match self {
            CqErr => ElementKind::Cq,
            QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | PathMig | PathMigErr
            | QpLastWqeReached => ElementKind::Qp,
            SrqErr | SrqLimitReached => ElementKind::Srq,
            PortActive | PortErr | LidChange | PkeyChange | SmChange | ClientReregister
            | GidChange => ElementKind::Port,
            DeviceFatal | WqFatal | Unknown(_) => ElementKind::Device,
        }
    }
}

impl fmt::Display for AsyncEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.raw())
    }
}

/// What an async event is about (`ibv_async_event.element`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncElement {
    /// A CQ; compare with [`crate::CompletionQueue::is_async_element`].
    Cq(usize),
    /// A QP, by its QP number.
    Qp(u32),
    /// An SRQ (opaque identity).
    Srq(usize),
    /// A port number.
    Port(u8),
    /// The device as a whole.
    Device,
}

/// An asynchronous event, already acknowledged (`ibv_get_async_event(3)` +
/// `ibv_ack_async_event(3)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    pub kind: AsyncEventType,
    pub element: AsyncElement,
}
