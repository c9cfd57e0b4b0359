//! The events of an id: their types, the IB CM's reject reasons, [`CmEvent`] as copied out of
//! librdmacm's `struct rdma_cm_event`, and the guard that acknowledges the raw event.

use std::ffi::CStr;
use std::fmt;
use std::ptr::NonNull;

use rdma_sys::*;

use crate::error::{Errno, Error, Hint, HintCode, Result, Verb, rc, report_drop_failure};
use crate::flags::c_enum;

use super::{CM_RESPONSE_TIMEOUT, CmId, NO_CM_PEER_WAIT};

c_enum! {
    /// `enum rdma_cm_event_type`: what a connection-manager event reports.
    pub enum CmEventType: u32, unknown "RDMA_CM_EVENT_?" {
        AddrResolved = 0 => "RDMA_CM_EVENT_ADDR_RESOLVED",
        AddrError = 1 => "RDMA_CM_EVENT_ADDR_ERROR",
        RouteResolved = 2 => "RDMA_CM_EVENT_ROUTE_RESOLVED",
        RouteError = 3 => "RDMA_CM_EVENT_ROUTE_ERROR",
        ConnectRequest = 4 => "RDMA_CM_EVENT_CONNECT_REQUEST",
        ConnectResponse = 5 => "RDMA_CM_EVENT_CONNECT_RESPONSE",
        ConnectError = 6 => "RDMA_CM_EVENT_CONNECT_ERROR",
        Unreachable = 7 => "RDMA_CM_EVENT_UNREACHABLE",
        Rejected = 8 => "RDMA_CM_EVENT_REJECTED",
        Established = 9 => "RDMA_CM_EVENT_ESTABLISHED",
        Disconnected = 10 => "RDMA_CM_EVENT_DISCONNECTED",
        DeviceRemoval = 11 => "RDMA_CM_EVENT_DEVICE_REMOVAL",
        MulticastJoin = 12 => "RDMA_CM_EVENT_MULTICAST_JOIN",
        MulticastError = 13 => "RDMA_CM_EVENT_MULTICAST_ERROR",
        AddrChange = 14 => "RDMA_CM_EVENT_ADDR_CHANGE",
        TimewaitExit = 15 => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    }
}

c_enum! {
    /// `enum ib_cm_rej_reason` (the IB CM's REJ reason, IBTA 12.6.7.2), the `status` of an
    /// `RDMA_CM_EVENT_REJECTED` on IB and RoCE. The ones a learner meets are explained.
    pub enum RejectReason: i32, unknown "IB_CM_REJ_?", explained "see the IB spec, table 112" {
        NoQp = 1 => "IB_CM_REJ_NO_QP", "the responder has no QP for the request";
        NoResources = 3 => "IB_CM_REJ_NO_RESOURCES", "the responder ran out of resources";
        Timeout = 4 => "IB_CM_REJ_TIMEOUT", "the exchange timed out";
        Unsupported = 5 => "IB_CM_REJ_UNSUPPORTED", "a requested feature is not supported";
        InvalidServiceId = 8 => "IB_CM_REJ_INVALID_SERVICE_ID",
            "nobody listens on that address and port (start the server first)";
        StaleConn = 10 => "IB_CM_REJ_STALE_CONN",
            "the responder still holds an old connection from this QP (wait for TIMEWAIT)";
        InvalidMtu = 26 => "IB_CM_REJ_INVALID_MTU", "the two ends disagree on the path MTU";
        InsufficientRespResources = 27 => "IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES",
            "responder_resources larger than the peer's initiator_depth allows";
        ConsumerDefined = 28 => "IB_CM_REJ_CONSUMER_DEFINED",
            "the peer's program called rdma_reject: its reason is in the private data";
        InvalidRnrRetry = 29 => "IB_CM_REJ_INVALID_RNR_RETRY", "rnr_retry_count not accepted";
    }
}

/// An event of one [`CmId`], copied out of librdmacm's `struct rdma_cm_event` and already
/// acknowledged. Exhaustive over `enum rdma_cm_event_type`: a value this table does not know
/// is [`CmEvent::Other`]. `status` is 0 or a negative errno for most events, the IB CM reject
/// reason for `REJECTED`.
#[derive(Debug)]
pub enum CmEvent {
    /// `rdma_resolve_addr` found the local device for the destination.
    AddrResolved,
    /// `rdma_resolve_addr` failed (status: -ETIMEDOUT when nobody answers ARP).
    AddrError {
        status: i32,
    },
    /// `rdma_resolve_route` done: the id knows its path (on RoCE, GIDs and MAC).
    RouteResolved,
    /// `rdma_resolve_route` failed.
    RouteError {
        status: i32,
    },
    /// A peer called `rdma_connect` to our listener; the request carries its own new id.
    ConnectRequest(Box<ConnectRequest>),
    /// Only for ids without a QP (`rdma_establish` by hand); lab's ids never see it.
    ConnectResponse {
        private_data: Vec<u8>,
    },
    /// The connection could not be set up (status: a negative errno).
    ConnectError {
        status: i32,
    },
    /// The peer's CM never answered (status -ETIMEDOUT after the retries).
    Unreachable {
        status: i32,
    },
    /// The peer refused: `reason` is the IB CM reason, with the peer's private data.
    Rejected {
        reason: RejectReason,
        private_data: Vec<u8>,
    },
    /// Connected: the QP is in RTS. On the active side, the private data of `rdma_accept`.
    Established {
        private_data: Vec<u8>,
    },
    /// The peer called `rdma_disconnect` (or its side went away): call `rdma_disconnect` too.
    Disconnected,
    /// The RDMA device is going away.
    DeviceRemoval,
    /// Multicast events (UD): listed for exhaustiveness, not used by the course.
    MulticastJoin,
    MulticastError {
        status: i32,
    },
    /// The id's address moved to another device.
    AddrChange,
    /// The QP left TIMEWAIT: it may now be destroyed or reused.
    TimewaitExit,
    /// An event type the table does not know.
    Other {
        raw: u32,
        status: i32,
    },
}

/// A connection request (`RDMA_CM_EVENT_CONNECT_REQUEST`): the new id, already on its own
/// event channel, and what the requester sent.
#[derive(Debug)]
pub struct ConnectRequest {
    /// The new connection's id: create its QP, then [`CmId::accept`] or [`CmId::reject`].
    pub id: CmId,
    /// The requester's private data. Always [`MAX_CONNECT_DATA`](super::MAX_CONNECT_DATA) bytes, on IB and RoCE alike,
    /// zero-padded: the sender's length is not transmitted, so encode it in the payload.
    pub private_data: Vec<u8>,
    /// The requester's `initiator_depth` (the READs it wants outstanding at us).
    pub initiator_depth: u8,
    /// The requester's `responder_resources`.
    pub responder_resources: u8,
}

impl CmEvent {
    /// The event's type.
    pub fn event_type(&self) -> CmEventType {
        use CmEvent::*;
        match self {
            AddrResolved => CmEventType::AddrResolved,
            AddrError { .. } => CmEventType::AddrError,
            RouteResolved => CmEventType::RouteResolved,
            RouteError { .. } => CmEventType::RouteError,
            ConnectRequest(_) => CmEventType::ConnectRequest,
            ConnectResponse { .. } => CmEventType::ConnectResponse,
            ConnectError { .. } => CmEventType::ConnectError,
            Unreachable { .. } => CmEventType::Unreachable,
            Rejected { .. } => CmEventType::Rejected,
            Established { .. } => CmEventType::Established,
            Disconnected => CmEventType::Disconnected,
            DeviceRemoval => CmEventType::DeviceRemoval,
            MulticastJoin => CmEventType::MulticastJoin,
            MulticastError { .. } => CmEventType::MulticastError,
            AddrChange => CmEventType::AddrChange,
            TimewaitExit => CmEventType::TimewaitExit,
            Other { raw, .. } => CmEventType::Unknown(*raw),
        }
    }

    /// The event's `status` as librdmacm reported it.
    pub fn status(&self) -> i32 {
        use CmEvent::*;
        match self {
            AddrError { status }
            | RouteError { status }
            | ConnectError { status }
            | Unreachable { status }
            | MulticastError { status }
            | Other { status, .. } => *status,
            Rejected { reason, .. } => reason.raw(),
            _ => 0,
        }
    }

    /// The private data the event carried (empty for events without any).
    pub fn private_data(&self) -> &[u8] {
        match self {
            CmEvent::ConnectRequest(r) => &r.private_data,
            CmEvent::ConnectResponse { private_data }
            | CmEvent::Rejected { private_data, .. }
            | CmEvent::Established { private_data } => private_data,
            _ => &[],
        }
    }

    /// Decodes an event from its parts (type, status, private data). `request` makes the new
    /// id of a CONNECT_REQUEST; it is called only for that type.
    pub fn decode(
        raw: u32,
        status: i32,
        private_data: &[u8],
        request: impl FnOnce() -> Result<(CmId, u8, u8)>,
    ) -> Result<CmEvent> {
        use CmEventType as T;
        let data = private_data.to_vec();
        Ok(match CmEventType::from_raw(raw) {
            T::AddrResolved => CmEvent::AddrResolved,
            T::AddrError => CmEvent::AddrError { status },
            T::RouteResolved => CmEvent::RouteResolved,
            T::RouteError => CmEvent::RouteError { status },
            T::ConnectRequest => {
                let (id, initiator_depth, responder_resources) = request()?;
                CmEvent::ConnectRequest(Box::new(ConnectRequest {
                    id,
                    private_data: data,
                    initiator_depth,
                    responder_resources,
                }))
            }
            T::ConnectResponse => CmEvent::ConnectResponse { private_data: data },
            T::ConnectError => CmEvent::ConnectError { status },
            T::Unreachable => CmEvent::Unreachable { status },
            T::Rejected => CmEvent::Rejected {
                reason: RejectReason::from_raw(status),
                private_data: data,
            },
            T::Established => CmEvent::Established { private_data: data },
            T::Disconnected => CmEvent::Disconnected,
            T::DeviceRemoval => CmEvent::DeviceRemoval,
            T::MulticastJoin => CmEvent::MulticastJoin,
            T::MulticastError => CmEvent::MulticastError { status },
            T::AddrChange => CmEvent::AddrChange,
            T::TimewaitExit => CmEvent::TimewaitExit,
            T::Unknown(raw) => CmEvent::Other { raw, status },
        })
    }

    /// What a learner should do about this event when it was not the one wanted.
    pub fn hint(&self) -> Option<Hint> {
        Some(match self {
            CmEvent::Rejected { reason, .. } => {
                Hint::detailed(HintCode::CmRejected, reason.explanation())
            }
            CmEvent::AddrError { .. } => Hint::new(HintCode::CmAddrError),
            CmEvent::Unreachable { .. } => Hint::detailed(
                HintCode::CmUnreachable,
                format!(
                    "the peer's CM never answered: a host with no rdma_cm peer costs at least \
                     {:.1} s per REQ try, up to 16 tries ({} s in all on rxe); is rdma_rxe \
                     loaded on the peer and the address right?",
                    CM_RESPONSE_TIMEOUT.as_secs_f64(),
                    NO_CM_PEER_WAIT.as_secs()
                ),
            ),
            CmEvent::Disconnected => Hint::new(HintCode::CmDisconnected),
            _ => return None,
        })
    }
}

/// Prints `RDMA_CM_EVENT_REJECTED (8), status 28 (IB_CM_REJ_CONSUMER_DEFINED)`: the C name
/// and value of the type, then the status by name (an errno, or the reject reason).
impl fmt::Display for CmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.event_type();
        write!(f, "{} ({})", t.name(), t.raw())?;
        match self {
            CmEvent::Rejected { reason, .. } => {
                write!(f, ", status {} ({})", reason.raw(), reason.name())
            }
            _ => match self.status() {
                0 => Ok(()),
                s if s < 0 => write!(f, ", status {s} (-{})", Errno(-s).name()),
                s => write!(f, ", status {s}"),
            },
        }
    }
}

/// The event, until acknowledged: `Drop` calls `rdma_ack_cm_event`.
pub(super) struct RawEvent(pub(super) NonNull<rdma_cm_event>);

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: the event came from rdma_get_cm_event and is acknowledged exactly once, here;
        // nothing reads it afterwards (what was needed is copied).
        let ret = unsafe { rdma_ack_cm_event(self.0.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::failed(Verb::AckCmEvent, errno)) {
            report_drop_failure("rdma_ack_cm_event", &e);
        }
    }
}

/// The C name of an rdma_cm event type as librdmacm prints it (`rdma_event_str(3)`).
pub fn event_str(t: CmEventType) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    unsafe { CStr::from_ptr(rdma_event_str(t.raw())) }
        .to_string_lossy()
        .into_owned()
}
