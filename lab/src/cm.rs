//! The RDMA connection manager (`librdmacm`, `rdma_cm(7)`): connect RC queue pairs by IP
//! address and port instead of exchanging QPN, PSN and GID by hand.
//!
//! Verbs: `rdma_create_event_channel`, `rdma_create_id`, `rdma_resolve_addr`,
//! `rdma_resolve_route`, `rdma_create_qp`, `rdma_connect`, `rdma_bind_addr`, `rdma_listen`,
//! `rdma_migrate_id`, `rdma_accept`, `rdma_reject`, `rdma_disconnect`, `rdma_get_cm_event`,
//! `rdma_ack_cm_event`, `rdma_destroy_id`, `rdma_destroy_event_channel`.
//!
//! ## The model
//!
//! * **One id per channel.** Every [`CmId`] owns its own event channel, so waiting on an id
//!   ([`CmId::get_event`]) sees only that id's events. A listener's CONNECT_REQUEST creates a
//!   new id on the *listener's* channel; [`CmId::get_event`] moves it to a channel of its own
//!   (`rdma_migrate_id`) before handing it out, so the listener's channel carries only
//!   requests and each connection's ESTABLISHED / DISCONNECTED arrive on its own id.
//! * **Every wait has a deadline.** The channel's fd is non-blocking and `poll(2)`ed with the
//!   timeout; a quiet channel is [`Error::EventTimeout`], never a hang.
//! * **Events are copied, then acknowledged.** `rdma_get_cm_event` hands out an event that
//!   points into librdmacm's memory (its private data too) and must be given back with
//!   `rdma_ack_cm_event`; an unacknowledged event makes `rdma_destroy_id` wait forever. Here
//!   the raw event lives in a guard whose `Drop` acknowledges it, right after [`CmEvent`]
//!   copied out the type, the status and the private data: no path (error, panic) leaves one
//!   unacknowledged.
//! * **The QP belongs to the id.** [`CmId::create_qp`] is `rdma_create_qp` with lab's
//!   [`ProtectionDomain`] and [`CompletionQueue`](crate::CompletionQueue)s: librdmacm moves the QP to INIT at once,
//!   to RTR and RTS during `rdma_connect` / `rdma_accept`, and to ERR in `rdma_disconnect`
//!   (the `ibv_modify_qp` calls of chapter 05, made for you). The returned [`QueuePair`] is a
//!   normal lab QP (post, poll, query); dropping it destroys the QP and clears `id->qp`.
//!   The PD and CQs must come from [`CmId::context`], librdmacm's own open device (a PD from
//!   another `ibv_open_device` is refused with EINVAL).
//!
//! Facts measured on rxe that these wrappers rely on are in `docs/rxe-observed.md` and
//! `docs/rdma-sys-notes.md` (note 11).

use std::ffi::CStr;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

use crate::device::{Context, set_nonblocking};
use crate::error::{Errno, Error, Hint, Result, ptr, rc, report_drop_failure};
use crate::flags::c_enum;
use crate::pd::ProtectionDomain;
use crate::qp::{QpInitAttr, QueuePair, state};

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH` (rdma_cma.h): "as many as the device allows";
/// librdmacm replaces 0xff by the device's limit.
pub const MAX_RD_ATOMIC: u8 = 0xff;
/// The most private data a CONNECT_REQUEST (`rdma_connect`) carries over IB/RoCE: 56 bytes
/// (the IB CM REQ has 92, rdma_cm keeps 36 for its own header).
pub const MAX_CONNECT_DATA: usize = 56;
/// The most private data `rdma_accept` carries (the IB CM REP): 196 bytes.
pub const MAX_ACCEPT_DATA: usize = 196;
/// The most private data `rdma_reject` carries (the IB CM REJ): 148 bytes.
pub const MAX_REJECT_DATA: usize = 148;
/// The kernel CM's response timeout on an outgoing REQ: 4.096 us * 2^20 = 4.3 s, plus twice
/// the packet lifetime, per try, retried up to 15 times (`CMA_CM_RESPONSE_TIMEOUT`,
/// `CMA_MAX_CM_RETRIES`; `cm.c` `ib_send_cm_req` rounds each to 2^(t - 8) ms: on 6.1's
/// RoCE, lifetime 18, 2 x 1024 + 4096 = 6144 ms a try, 98.3 s for 16 tries).
pub const CM_RESPONSE_TIMEOUT: Duration = Duration::from_micros(4_295_000);
/// How long a connect to an address that answers ARP but runs no rdma_cm peer took before
/// UNREACHABLE on rxe here (measured with `rping -c`: 107 s).
pub const NO_CM_PEER_WAIT: Duration = Duration::from_secs(107);

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
    /// The requester's private data. Always [`MAX_CONNECT_DATA`] bytes, on IB and RoCE alike,
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
    pub fn hint(&self) -> Hint {
        match self {
            CmEvent::Rejected { reason, .. } => Hint::new(reason.explanation()),
            CmEvent::AddrError { .. } => Hint::new(
                "no device route or no ARP reply for that address: is it the peer's rxe netdev \
                 address (`ip -4 addr`, `rdma link`), and is the peer up?",
            ),
            CmEvent::Unreachable { .. } => Hint::new(format!(
                "the peer's CM never answered: a host with no rdma_cm peer costs at least {:.1} \
                 s per REQ try, up to 16 tries ({} s in all on rxe); is rdma_rxe loaded on the \
                 peer and the address right?",
                CM_RESPONSE_TIMEOUT.as_secs_f64(),
                NO_CM_PEER_WAIT.as_secs()
            )),
            CmEvent::Disconnected => {
                Hint::new("the peer disconnected (or its process died): reconnect from RESET")
            }
            _ => Hint::none(),
        }
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

/// Connection parameters (`struct rdma_conn_param`) for [`CmId::connect`] and
/// [`CmId::accept`]. The defaults never hang on rxe: `retry_count` and `rnr_retry_count` 6
/// (7 means "forever"), READ credits as many as the device allows.
#[derive(Debug, Clone)]
pub struct ConnParam {
    pub private_data: Vec<u8>,
    /// READs/atomics the peer may have outstanding at us (becomes `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// READs/atomics we may have outstanding at the peer (becomes `max_rd_atomic`).
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: MAX_RD_ATOMIC,
            initiator_depth: MAX_RD_ATOMIC,
            retry_count: crate::qp::DEFAULT_RETRY_CNT,
            rnr_retry_count: crate::qp::DEFAULT_RNR_RETRY,
        }
    }
}

impl ConnParam {
    /// The defaults, carrying `data` as private data.
    pub fn with_data(data: &[u8]) -> ConnParam {
        ConnParam {
            private_data: data.to_vec(),
            ..ConnParam::default()
        }
    }

    fn raw(&self) -> rdma_conn_param {
        rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                std::ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            private_data_len: self.private_data.len().min(255) as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count.min(7),
            rnr_retry_count: self.rnr_retry_count.min(7),
            srq: 0,
            qp_num: 0,
        }
    }
}

struct ChannelInner {
    ch: NonNull<rdma_event_channel>,
}

// SAFETY: librdmacm's calls are thread-safe; the channel is a file descriptor.
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl ChannelInner {
    fn new() -> Result<ChannelInner> {
        // SAFETY: no arguments; the result is checked for NULL.
        let ch = ptr(unsafe { rdma_create_event_channel() }, |errno| Error::Cm {
            call: "rdma_create_event_channel",
            errno,
            hint: Hint::new(
                "is the rdma_ucm module loaded and /dev/infiniband/rdma_cm readable? \
                 (run inside the lab: `cargo lab ...`)",
            ),
        })?;
        // The fd is polled with a deadline; non-blocking so a read never waits past it.
        // SAFETY: the channel is alive; `fd` is a plain field.
        set_nonblocking(unsafe { (*ch.as_ptr()).fd })?;
        Ok(ChannelInner { ch })
    }

    fn fd(&self) -> c_int {
        // SAFETY: the channel is alive while `self` is.
        unsafe { (*self.ch.as_ptr()).fd }
    }
}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: every id on this channel holds an Arc to it, so none is left; destroyed once.
        unsafe { rdma_destroy_event_channel(self.ch.as_ptr()) };
    }
}

pub(crate) struct IdInner {
    id: NonNull<rdma_cm_id>,
    // The id's channel; dropped (destroyed) after the id (fields drop after Drop::drop).
    channel: Arc<ChannelInner>,
}

// SAFETY: librdmacm ids may be used from any thread (the library locks internally).
unsafe impl Send for IdInner {}
// SAFETY: as above.
unsafe impl Sync for IdInner {}

impl IdInner {
    /// Called by the QP's destroy: the id no longer has a QP (what `rdma_destroy_qp` does after
    /// `ibv_destroy_qp`), so `rdma_disconnect` will not touch a freed QP.
    pub(crate) fn forget_qp(&self) {
        // SAFETY: the id is alive (the QP holds an Arc to it); `qp` is a plain field that
        // librdmacm reads only in calls made through this id.
        unsafe { (*self.id.as_ptr()).qp = std::ptr::null_mut() };
    }
}

impl Drop for IdInner {
    fn drop(&mut self) {
        // SAFETY: the id is alive and destroyed once; its QP (which holds an Arc to this
        // inner) is gone, and every event was acknowledged inside `get_event`, so
        // rdma_destroy_id does not wait.
        let ret = unsafe { rdma_destroy_id(self.id.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::Cm {
            call: "rdma_destroy_id",
            errno,
            hint: Hint::none(),
        }) {
            report_drop_failure("rdma_destroy_id", &e);
        }
    }
}

/// An `rdma_cm_id` (`rdma_create_id(3)`, port space `RDMA_PS_TCP`: reliable connected), with
/// its own event channel.
pub struct CmId {
    inner: Arc<IdInner>,
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .finish()
    }
}

/// The event, until acknowledged: `Drop` calls `rdma_ack_cm_event`.
struct RawEvent(NonNull<rdma_cm_event>);

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: the event came from rdma_get_cm_event and is acknowledged exactly once, here;
        // nothing reads it afterwards (what was needed is copied).
        let ret = unsafe { rdma_ack_cm_event(self.0.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::Cm {
            call: "rdma_ack_cm_event",
            errno,
            hint: Hint::none(),
        }) {
            report_drop_failure("rdma_ack_cm_event", &e);
        }
    }
}

fn cm_err(call: &'static str) -> impl FnOnce(Errno) -> Error {
    move |errno| Error::Cm {
        call,
        errno,
        hint: Hint::none(),
    }
}

fn to_sockaddr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid (unspecified) value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in>(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in6>(), sin6) };
        }
    }
    ss
}

/// Reads a `struct sockaddr` of family AF_INET or AF_INET6 (None for anything else).
///
/// # Safety
/// `sa` must point to a sockaddr at least as large as its family says.
unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: the caller guarantees a valid sockaddr; the family says which struct it is.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*sa.cast::<libc::sockaddr_in>();
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

fn ms(d: Duration) -> c_int {
    d.as_millis().clamp(1, c_int::MAX as u128) as c_int
}

impl CmId {
    /// A new id for a reliable connection (`rdma_create_event_channel(3)` +
    /// `rdma_create_id(3)` with `RDMA_PS_TCP`), on its own event channel.
    pub fn new() -> Result<CmId> {
        let channel = Arc::new(ChannelInner::new()?);
        let mut id: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: the channel is alive; `id` is a valid out-pointer; no context pointer.
        let ret = unsafe {
            rdma_create_id(
                channel.ch.as_ptr(),
                &mut id,
                std::ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        rc(ret, cm_err("rdma_create_id"))?;
        let id = ptr(id, cm_err("rdma_create_id"))?;
        Ok(CmId {
            inner: Arc::new(IdInner { id, channel }),
        })
    }

    fn raw(&self) -> *mut rdma_cm_id {
        self.inner.id.as_ptr()
    }

    /// The local address (`rdma_get_local_addr(3)`), once bound or resolved.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is alive; the route's source address is a sockaddr_storage-sized
        // union, valid for its family.
        unsafe { from_sockaddr(rdma_get_local_addr(&*self.raw())) }
    }

    /// The peer's address (`rdma_get_peer_addr(3)`), once resolved or connected.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as for `local_addr`.
        unsafe { from_sockaddr(rdma_get_peer_addr(&*self.raw())) }
    }

    /// The device port the id is bound to (`id->port_num`; 0 before resolution).
    pub fn port_num(&self) -> u8 {
        // SAFETY: the id is alive; a plain field.
        unsafe { (*self.raw()).port_num }
    }

    /// librdmacm's open device for this id (`id->verbs`), once the address is resolved (active
    /// side) or the request arrived (passive side). Allocate the PD and CQs for
    /// [`CmId::create_qp`] from it. librdmacm opens each device once per process and keeps it
    /// open; lab never closes it.
    pub fn context(&self) -> Result<Context> {
        // SAFETY: the id is alive; `verbs` is a plain field (NULL before resolution).
        let verbs = unsafe { (*self.raw()).verbs };
        match NonNull::new(verbs) {
            Some(v) => Ok(Context::borrowed(v)),
            None => Err(Error::Cm {
                call: "rdma_cm_id.verbs",
                errno: Errno(libc::ENODEV),
                hint: Hint::new(
                    "the id has no device yet: resolve the address (active side) or use the id \
                     of a CONNECT_REQUEST (passive side); a listener bound to 0.0.0.0 has none",
                ),
            }),
        }
    }

    /// Waits up to `timeout` for this id's next event (`poll(2)` on the channel fd, then
    /// `rdma_get_cm_event(3)`), copies it and acknowledges it (`rdma_ack_cm_event(3)`).
    /// A CONNECT_REQUEST's new id is moved to its own channel (`rdma_migrate_id(3)`).
    pub fn get_event(&self, timeout: Duration) -> Result<CmEvent> {
        let deadline = Instant::now() + timeout;
        let fd = self.inner.channel.fd();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n =
                unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            if n < 0 {
                let errno = Errno::last();
                if errno.0 == libc::EINTR {
                    continue;
                }
                return Err(Error::Os {
                    call: "poll(rdma_cm channel)",
                    errno,
                });
            }
            if n == 0 {
                return Err(Error::EventTimeout {
                    what: "rdma_cm event".into(),
                    timeout,
                    hint: Hint::new(format!(
                        "is the peer running and reachable? (a connect to a host with no CM \
                         peer waits at least {:.1} s per REQ try, {} s in all before \
                         UNREACHABLE on rxe: give a connect a deadline beyond that, or expect \
                         this timeout)",
                        CM_RESPONSE_TIMEOUT.as_secs_f64(),
                        NO_CM_PEER_WAIT.as_secs()
                    )),
                });
            }
            let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
            // SAFETY: the channel is alive; `ev` is a valid out-pointer.
            let ret = unsafe { rdma_get_cm_event(self.inner.channel.ch.as_ptr(), &mut ev) };
            if ret != 0 {
                let errno = Errno::last();
                if errno.0 == libc::EAGAIN || errno.0 == libc::EINTR {
                    continue;
                }
                return Err(cm_err("rdma_get_cm_event")(errno));
            }
            let guard = RawEvent(ptr(ev, cm_err("rdma_get_cm_event"))?);
            return self.decode(guard);
        }
    }

    fn decode(&self, guard: RawEvent) -> Result<CmEvent> {
        let e = guard.0.as_ptr();
        // SAFETY: the event is valid until acknowledged (the guard's Drop, at the end of this
        // function); `param.conn` is the union member for connected ids (RDMA_PS_TCP), and its
        // private data points into the event, `private_data_len` bytes long.
        let (raw, status, data, new_id, ird, ord) = unsafe {
            let conn = &(*e).param.conn;
            let data = if conn.private_data.is_null() || conn.private_data_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            };
            (
                (*e).event,
                (*e).status,
                data,
                (*e).id,
                conn.initiator_depth,
                conn.responder_resources,
            )
        };
        drop(guard); // acknowledged: nothing above points into the event any more
        CmEvent::decode(raw, status, &data, || {
            let id = NonNull::new(new_id).ok_or(Error::Cm {
                call: "rdma_get_cm_event",
                errno: Errno(libc::EINVAL),
                hint: Hint::new("a CONNECT_REQUEST without an id"),
            })?;
            let channel = Arc::new(ChannelInner::new()?);
            // The new id is ours from here: destroy it on any failure below.
            let req = CmId {
                inner: Arc::new(IdInner {
                    id,
                    channel: channel.clone(),
                }),
            };
            // SAFETY: both the id and the new channel are alive; the id's only event (the
            // request) is acknowledged, so rdma_migrate_id does not wait.
            let ret = unsafe { rdma_migrate_id(id.as_ptr(), channel.ch.as_ptr()) };
            // On failure `req` is dropped here: rdma_destroy_id, while the listener's channel
            // (which the id then still uses) is alive.
            rc(ret, cm_err("rdma_migrate_id"))?;
            Ok((req, ird, ord))
        })
    }

    /// Waits for an event of type `want`; any other event is an error that names it, its status
    /// and what it usually means.
    pub fn expect_event(&self, want: CmEventType, timeout: Duration) -> Result<CmEvent> {
        let ev = self.get_event(timeout)?;
        if ev.event_type() == want {
            Ok(ev)
        } else {
            Err(Error::CmEvent {
                want: want.name(),
                got: ev.to_string(),
                hint: ev.hint(),
            })
        }
    }

    /// Starts address resolution (`rdma_resolve_addr(3)`): which local device and port reach
    /// `dst`. Completes with ADDR_RESOLVED or ADDR_ERROR after at most `timeout`.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let mut d = to_sockaddr(dst);
        let mut s = src.map(to_sockaddr);
        let sp = s.as_mut().map_or(std::ptr::null_mut(), |s| {
            (s as *mut libc::sockaddr_storage).cast()
        });
        // SAFETY: the id is alive; both addresses are valid sockaddrs for the call's duration.
        let ret = unsafe {
            rdma_resolve_addr(
                self.raw(),
                sp,
                (&raw mut d).cast::<libc::sockaddr>(),
                ms(timeout),
            )
        };
        rc(ret, |errno| Error::Cm {
            call: "rdma_resolve_addr",
            errno,
            hint: loopback_hint(dst.ip()),
        })
    }

    /// Starts route resolution (`rdma_resolve_route(3)`). Completes with ROUTE_RESOLVED or
    /// ROUTE_ERROR after at most `timeout`.
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        // SAFETY: the id is alive.
        let ret = unsafe { rdma_resolve_route(self.raw(), ms(timeout)) };
        let peer = self.peer_addr().map(|a| a.ip());
        rc(ret, |errno| Error::Cm {
            call: "rdma_resolve_route",
            errno,
            hint: peer.map_or(Hint::none(), loopback_hint),
        })
    }

    /// Creates the id's RC QP (`rdma_create_qp(3)`) on `pd`, with lab's CQs. librdmacm moves it
    /// to INIT at once (`rdma_init_qp_attr` + `ibv_modify_qp`); connect/accept take it to RTR
    /// and RTS. `pd` must come from [`CmId::context`].
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        init: &QpInitAttr<'_>,
    ) -> Result<QueuePair<state::Init>> {
        let mut ia = init.raw();
        // SAFETY: the id, the PD and the CQs are alive; `ia` is a valid in/out pointer.
        let ret = unsafe { rdma_create_qp(self.raw(), pd.raw(), &mut ia) };
        rc(ret, |errno| Error::Cm {
            call: "rdma_create_qp",
            errno,
            hint: if errno.0 == libc::EINVAL {
                Hint::new(
                    "the PD must be allocated on the id's own device context (CmId::context), \
                     not on a Context opened separately",
                )
            } else {
                Hint::none()
            },
        })?;
        // SAFETY: rdma_create_qp succeeded, so `id->qp` is the new QP.
        let qp = unsafe { (*self.raw()).qp };
        let qp = ptr(qp, cm_err("rdma_create_qp"))?;
        Ok(QueuePair::from_cm(
            qp,
            pd,
            init,
            ia.cap,
            self.port_num(),
            self.inner.clone(),
        ))
    }

    /// Connects (`rdma_connect(3)`) with `param`'s private data (at most
    /// [`MAX_CONNECT_DATA`] bytes). Completes with ESTABLISHED, REJECTED, UNREACHABLE or
    /// CONNECT_ERROR.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        check_len("rdma_connect", &param.private_data, MAX_CONNECT_DATA)?;
        let mut p = param.raw();
        // SAFETY: the id is alive and has its route; `p` and its private data are valid for
        // the call (librdmacm copies them).
        let ret = unsafe { rdma_connect(self.raw(), &mut p) };
        rc(ret, cm_err("rdma_connect"))
    }

    /// Binds to a local address and listens (`rdma_bind_addr(3)` + `rdma_listen(3)`).
    pub fn listen(&self, addr: SocketAddr, backlog: i32) -> Result<()> {
        let mut a = to_sockaddr(addr);
        // SAFETY: the id is alive; `a` is a valid sockaddr for the call.
        let ret = unsafe { rdma_bind_addr(self.raw(), (&raw mut a).cast::<libc::sockaddr>()) };
        rc(ret, |errno| Error::Cm {
            call: "rdma_bind_addr",
            errno,
            hint: if errno.0 == libc::EADDRINUSE {
                Hint::new(
                    "another rdma_cm listener has this port (an earlier server still running?)",
                )
            } else if errno.0 == libc::EADDRNOTAVAIL || errno.0 == libc::ENODEV {
                Hint::new("bind to the rxe netdev's address (or 0.0.0.0)")
            } else {
                Hint::none()
            },
        })?;
        // SAFETY: the id is alive and bound.
        let ret = unsafe { rdma_listen(self.raw(), backlog) };
        rc(ret, cm_err("rdma_listen"))
    }

    /// Waits for a CONNECT_REQUEST on a listening id.
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectRequest> {
        match self.expect_event(CmEventType::ConnectRequest, timeout)? {
            CmEvent::ConnectRequest(r) => Ok(*r),
            _ => unreachable!("expect_event checked the type"),
        }
    }

    /// Accepts a connection request (`rdma_accept(3)`): librdmacm moves the QP to RTR and RTS,
    /// then answers with a REP carrying `param`'s private data (at most [`MAX_ACCEPT_DATA`]
    /// bytes). ESTABLISHED follows when the requester's RTU arrives.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        check_len("rdma_accept", &param.private_data, MAX_ACCEPT_DATA)?;
        let mut p = param.raw();
        // SAFETY: the id is alive (a request's id); `p` is valid for the call.
        let ret = unsafe { rdma_accept(self.raw(), &mut p) };
        rc(ret, cm_err("rdma_accept"))
    }

    /// Refuses a connection request (`rdma_reject(3)`) with private data (at most
    /// [`MAX_REJECT_DATA`] bytes); the requester sees REJECTED with status 28
    /// (`IB_CM_REJ_CONSUMER_DEFINED`) and the data.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        check_len("rdma_reject", private_data, MAX_REJECT_DATA)?;
        // SAFETY: the id is alive; the data is valid for the call (copied by librdmacm).
        let ret = unsafe {
            rdma_reject(
                self.raw(),
                private_data.as_ptr().cast(),
                private_data.len() as u8,
            )
        };
        rc(ret, cm_err("rdma_reject"))
    }

    /// Disconnects (`rdma_disconnect(3)`): librdmacm moves the id's QP to ERR (outstanding
    /// work flushes) and sends a DREQ; both sides then see DISCONNECTED. Call it on
    /// DISCONNECTED too, or the QP stays in RTS and the peer's TIMEWAIT is longer.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: the id is alive.
        let ret = unsafe { rdma_disconnect(self.raw()) };
        rc(ret, cm_err("rdma_disconnect"))
    }
}

fn check_len(call: &'static str, data: &[u8], max: usize) -> Result<()> {
    if data.len() > max {
        return Err(Error::Cm {
            call,
            errno: Errno(libc::EINVAL),
            hint: Hint::new(format!(
                "{} bytes of private data; at most {max} fit in this message on IB/RoCE",
                data.len()
            )),
        });
    }
    Ok(())
}

fn loopback_hint(ip: IpAddr) -> Hint {
    if ip.is_loopback() {
        Hint::new(
            "127.0.0.1 cannot be routed on RoCE (no RDMA device sits on `lo`): use the rxe \
             netdev's address (10.99.0.1 in the loopback lab; `rdma link` names the netdev)",
        )
    } else {
        Hint::new("is the address on an rxe netdev (`rdma link`, `ip -4 addr`)?")
    }
}

/// The C name of an rdma_cm event type as librdmacm prints it (`rdma_event_str(3)`).
pub fn event_str(t: CmEventType) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    unsafe { CStr::from_ptr(rdma_event_str(t.raw())) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    /// rdma-sys writes `rdma_cm_event`, its `param` union and `rdma_ud_param` by hand (its
    /// build blocks bindgen for them); these are gcc's offsets for rdma-core 44's
    /// `<rdma/rdma_cma.h>` on x86_64 (`offsetof`, measured with a C program).
    #[test]
    fn hand_written_cm_structs_match_gcc() {
        assert_eq!(size_of::<rdma_cm_event>(), 80);
        assert_eq!(align_of::<rdma_cm_event>(), 8);
        assert_eq!(offset_of!(rdma_cm_event, id), 0);
        assert_eq!(offset_of!(rdma_cm_event, listen_id), 8);
        assert_eq!(offset_of!(rdma_cm_event, event), 16);
        assert_eq!(offset_of!(rdma_cm_event, status), 20);
        assert_eq!(offset_of!(rdma_cm_event, param), 24);
        assert_eq!(size_of::<rdma_ud_param>(), 56);
        assert_eq!(offset_of!(rdma_ud_param, private_data_len), 8);
        assert_eq!(offset_of!(rdma_ud_param, ah_attr), 16);
        assert_eq!(offset_of!(rdma_ud_param, qp_num), 48);
        assert_eq!(offset_of!(rdma_ud_param, qkey), 52);
        assert_eq!(size_of::<ibv_ah_attr>(), 32);
        assert_eq!(size_of::<rdma_conn_param>(), 24);
        assert_eq!(offset_of!(rdma_conn_param, qp_num), 16);
        assert_eq!(size_of::<rdma_cm_id>(), 416);
        assert_eq!(offset_of!(rdma_cm_id, qp), 24);
        assert_eq!(offset_of!(rdma_cm_id, route), 32);
        assert_eq!(offset_of!(rdma_cm_id, port_num), 348);
        assert_eq!(offset_of!(rdma_event_channel, fd), 0);
    }

    #[test]
    fn event_types_match_rdma_sys_and_librdmacm() {
        use rdma_sys::rdma_cm_event_type as T;
        assert_eq!(
            CmEventType::AddrResolved.raw(),
            T::RDMA_CM_EVENT_ADDR_RESOLVED
        );
        assert_eq!(CmEventType::Rejected.raw(), T::RDMA_CM_EVENT_REJECTED);
        assert_eq!(
            CmEventType::TimewaitExit.raw(),
            T::RDMA_CM_EVENT_TIMEWAIT_EXIT
        );
        assert_eq!(CmEventType::ALL.len(), 16);
        for (i, t) in CmEventType::ALL.iter().enumerate() {
            assert_eq!(t.raw(), i as u32);
            // librdmacm's own names (rdma_event_str).
            assert_eq!(event_str(*t), t.name());
        }
    }

    fn no_request() -> Result<(CmId, u8, u8)> {
        panic!("only a CONNECT_REQUEST makes an id")
    }

    #[test]
    fn decoding_keeps_status_and_private_data() {
        let ev = CmEvent::decode(8, 28, b"busy", no_request).unwrap();
        assert!(matches!(
            &ev,
            CmEvent::Rejected { reason: RejectReason::ConsumerDefined, private_data } if private_data == b"busy"
        ));
        assert_eq!(ev.status(), 28);
        assert_eq!(ev.private_data(), b"busy");
        assert_eq!(
            ev.to_string(),
            "RDMA_CM_EVENT_REJECTED (8), status 28 (IB_CM_REJ_CONSUMER_DEFINED)"
        );
        let ev = CmEvent::decode(8, 8, &[], no_request).unwrap();
        assert!(ev.hint().text().unwrap().contains("nobody listens"));
        let ev = CmEvent::decode(1, -110, &[], no_request).unwrap();
        assert!(matches!(ev, CmEvent::AddrError { status: -110 }));
        assert_eq!(
            ev.to_string(),
            "RDMA_CM_EVENT_ADDR_ERROR (1), status -110 (-ETIMEDOUT)"
        );
        let ev = CmEvent::decode(7, -110, &[], no_request).unwrap();
        assert!(ev.hint().text().unwrap().contains("4.3 s per REQ try"));
        let ev = CmEvent::decode(9, 0, b"region", no_request).unwrap();
        assert_eq!(ev.to_string(), "RDMA_CM_EVENT_ESTABLISHED (9)");
        assert_eq!(ev.private_data(), b"region");
        let ev = CmEvent::decode(99, -5, &[], no_request).unwrap();
        assert!(matches!(
            ev,
            CmEvent::Other {
                raw: 99,
                status: -5
            }
        ));
        assert_eq!(ev.to_string(), "RDMA_CM_EVENT_? (99), status -5 (-EIO)");
    }

    #[test]
    fn every_type_decodes_to_its_own_variant() {
        for t in CmEventType::ALL {
            if *t == CmEventType::ConnectRequest {
                continue;
            }
            let ev = CmEvent::decode(t.raw(), 0, &[], no_request).unwrap();
            assert_eq!(ev.event_type(), *t);
        }
    }

    #[test]
    fn a_failing_request_id_is_an_error() {
        let r = CmEvent::decode(4, 0, &[0; 56], || {
            Err(Error::Cm {
                call: "rdma_migrate_id",
                errno: Errno(libc::ENOMEM),
                hint: Hint::none(),
            })
        });
        assert!(r.unwrap_err().to_string().contains("rdma_migrate_id"));
    }

    #[test]
    fn oversized_private_data_is_refused_with_the_limit() {
        let e = check_len("rdma_connect", &[0; 57], MAX_CONNECT_DATA).unwrap_err();
        assert!(e.to_string().contains("at most 56"), "{e}");
        assert!(check_len("rdma_connect", &[0; 56], MAX_CONNECT_DATA).is_ok());
    }

    #[test]
    fn loopback_addresses_get_the_roce_hint() {
        let h = loopback_hint(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert!(h.text().unwrap().contains("use the rxe netdev's address"));
        let s = SocketAddr::from(([10, 99, 0, 1], 7471));
        let ss = to_sockaddr(s);
        // SAFETY: `ss` holds a sockaddr_in written by to_sockaddr.
        let back = unsafe { from_sockaddr((&raw const ss).cast()) };
        assert_eq!(back, Some(s));
    }
}
