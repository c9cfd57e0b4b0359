//! Asynchronous events (`ibv_get_async_event(3)`): what happened, and to which object.

use super::*;

/// `enum ibv_event_type`: what an asynchronous event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEventType {
    CqErr,
    QpFatal,
    QpReqErr,
    QpAccessErr,
    CommEst,
    SqDrained,
    PathMig,
    PathMigErr,
    DeviceFatal,
    PortActive,
    PortErr,
    LidChange,
    PkeyChange,
    SmChange,
    SrqErr,
    SrqLimitReached,
    QpLastWqeReached,
    ClientReregister,
    GidChange,
    WqFatal,
    Unknown(u32),
}

pub(super) enum ElementKind {
    Cq,
    Qp,
    Srq,
    Port,
    Device,
}

impl AsyncEventType {
    const NAMES: [&'static str; 20] = [
        "IBV_EVENT_CQ_ERR",
        "IBV_EVENT_QP_FATAL",
        "IBV_EVENT_QP_REQ_ERR",
        "IBV_EVENT_QP_ACCESS_ERR",
        "IBV_EVENT_COMM_EST",
        "IBV_EVENT_SQ_DRAINED",
        "IBV_EVENT_PATH_MIG",
        "IBV_EVENT_PATH_MIG_ERR",
        "IBV_EVENT_DEVICE_FATAL",
        "IBV_EVENT_PORT_ACTIVE",
        "IBV_EVENT_PORT_ERR",
        "IBV_EVENT_LID_CHANGE",
        "IBV_EVENT_PKEY_CHANGE",
        "IBV_EVENT_SM_CHANGE",
        "IBV_EVENT_SRQ_ERR",
        "IBV_EVENT_SRQ_LIMIT_REACHED",
        "IBV_EVENT_QP_LAST_WQE_REACHED",
        "IBV_EVENT_CLIENT_REREGISTER",
        "IBV_EVENT_GID_CHANGE",
        "IBV_EVENT_WQ_FATAL",
    ];

    /// From the C value.
    pub fn from_raw(v: u32) -> Self {
        use AsyncEventType::*;
        const ALL: [AsyncEventType; 20] = [
            CqErr,
            QpFatal,
            QpReqErr,
            QpAccessErr,
            CommEst,
            SqDrained,
            PathMig,
            PathMigErr,
            DeviceFatal,
            PortActive,
            PortErr,
            LidChange,
            PkeyChange,
            SmChange,
            SrqErr,
            SrqLimitReached,
            QpLastWqeReached,
            ClientReregister,
            GidChange,
            WqFatal,
        ];
        ALL.get(v as usize).copied().unwrap_or(Unknown(v))
    }

    /// The C value.
    pub fn raw(self) -> u32 {
        match self {
            AsyncEventType::Unknown(v) => v,
            other => (0..20u32)
                .find(|&i| AsyncEventType::from_raw(i) == other)
                .unwrap_or(u32::MAX),
        }
    }

    /// The C name (`IBV_EVENT_CQ_ERR`).
    pub fn name(self) -> &'static str {
        Self::NAMES
            .get(self.raw() as usize)
            .copied()
            .unwrap_or("IBV_EVENT_?")
    }

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
