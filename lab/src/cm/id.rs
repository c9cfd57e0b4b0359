//! [`CmId`] and its calls, on an event channel of its own.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

use crate::device::{Context, set_nonblocking};
use crate::error::{Errno, Error, Hint, HintCode, Result, Verb, ptr, rc, report_drop_failure};
use crate::pd::ProtectionDomain;
use crate::qp::{QpInitAttr, QueuePair, state};

use super::addr::{from_sockaddr, to_sockaddr};
use super::event::{CmEvent, CmEventType, ConnectRequest, RawEvent};
use super::param::ConnParam;
use super::{
    CM_RESPONSE_TIMEOUT, MAX_ACCEPT_DATA, MAX_CONNECT_DATA, MAX_REJECT_DATA, NO_CM_PEER_WAIT,
};

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
        let ch = ptr(unsafe { rdma_create_event_channel() }, |errno| {
            Error::failed(Verb::CreateEventChannel, errno).with_hint(Hint::new(HintCode::NoRdmaUcm))
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
        if let Err(e) = rc(ret, cm_err(Verb::DestroyId)) {
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

fn cm_err(verb: Verb) -> impl FnOnce(Errno) -> Error {
    move |errno| Error::failed(verb, errno)
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
        rc(ret, cm_err(Verb::CreateId))?;
        let id = ptr(id, cm_err(Verb::CreateId))?;
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
            None => Err(Error::failed(Verb::IdVerbs, Errno(libc::ENODEV))
                .with_hint(Hint::new(HintCode::CmIdWithoutDevice))),
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
                    hints: vec![Hint::detailed(
                        HintCode::CmNoEvent,
                        format!(
                            "is the peer running and reachable? (a connect to a host with no CM \
                             peer waits at least {:.1} s per REQ try, {} s in all before \
                             UNREACHABLE on rxe: give a connect a deadline beyond that, or \
                             expect this timeout)",
                            CM_RESPONSE_TIMEOUT.as_secs_f64(),
                            NO_CM_PEER_WAIT.as_secs()
                        ),
                    )],
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
                return Err(cm_err(Verb::GetCmEvent)(errno));
            }
            let guard = RawEvent(ptr(ev, cm_err(Verb::GetCmEvent))?);
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
            let id = NonNull::new(new_id).ok_or_else(|| {
                Error::failed(Verb::GetCmEvent, Errno(libc::EINVAL))
                    .with_hint(Hint::new(HintCode::RequestWithoutId))
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
            rc(ret, cm_err(Verb::MigrateId))?;
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
                hints: ev.hint().into_iter().collect(),
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
        rc(ret, |errno| {
            Error::failed(Verb::ResolveAddr, errno).with_hint(loopback_hint(dst.ip()))
        })
    }

    /// Starts route resolution (`rdma_resolve_route(3)`). Completes with ROUTE_RESOLVED or
    /// ROUTE_ERROR after at most `timeout`.
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        // SAFETY: the id is alive.
        let ret = unsafe { rdma_resolve_route(self.raw(), ms(timeout)) };
        let peer = self.peer_addr().map(|a| a.ip());
        rc(ret, |errno| {
            Error::failed(Verb::ResolveRoute, errno).with_hint(peer.map(loopback_hint))
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
        rc(ret, |errno| {
            Error::failed(Verb::CreateCmQp, errno)
                .with_hint((errno.0 == libc::EINVAL).then_some(Hint::new(HintCode::CmQpPd)))
        })?;
        // SAFETY: rdma_create_qp succeeded, so `id->qp` is the new QP.
        let qp = unsafe { (*self.raw()).qp };
        let qp = ptr(qp, cm_err(Verb::CreateCmQp))?;
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
        check_len(Verb::Connect, &param.private_data, MAX_CONNECT_DATA)?;
        let mut p = param.raw();
        // SAFETY: the id is alive and has its route; `p` and its private data are valid for
        // the call (librdmacm copies them).
        let ret = unsafe { rdma_connect(self.raw(), &mut p) };
        rc(ret, cm_err(Verb::Connect))
    }

    /// Binds to a local address and listens (`rdma_bind_addr(3)` + `rdma_listen(3)`).
    pub fn listen(&self, addr: SocketAddr, backlog: i32) -> Result<()> {
        let mut a = to_sockaddr(addr);
        // SAFETY: the id is alive; `a` is a valid sockaddr for the call.
        let ret = unsafe { rdma_bind_addr(self.raw(), (&raw mut a).cast::<libc::sockaddr>()) };
        rc(ret, |errno| {
            let hint = match errno.0 {
                libc::EADDRINUSE => Some(HintCode::CmPortInUse),
                libc::EADDRNOTAVAIL | libc::ENODEV => Some(HintCode::CmBindAddress),
                _ => None,
            };
            Error::failed(Verb::BindAddr, errno).with_hint(hint.map(Hint::new))
        })?;
        // SAFETY: the id is alive and bound.
        let ret = unsafe { rdma_listen(self.raw(), backlog) };
        rc(ret, cm_err(Verb::Listen))
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
        check_len(Verb::Accept, &param.private_data, MAX_ACCEPT_DATA)?;
        let mut p = param.raw();
        // SAFETY: the id is alive (a request's id); `p` is valid for the call.
        let ret = unsafe { rdma_accept(self.raw(), &mut p) };
        rc(ret, cm_err(Verb::Accept))
    }

    /// Refuses a connection request (`rdma_reject(3)`) with private data (at most
    /// [`MAX_REJECT_DATA`] bytes); the requester sees REJECTED with status 28
    /// (`IB_CM_REJ_CONSUMER_DEFINED`) and the data.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        check_len(Verb::Reject, private_data, MAX_REJECT_DATA)?;
        // SAFETY: the id is alive; the data is valid for the call (copied by librdmacm).
        let ret = unsafe {
            rdma_reject(
                self.raw(),
                private_data.as_ptr().cast(),
                private_data.len() as u8,
            )
        };
        rc(ret, cm_err(Verb::Reject))
    }

    /// Disconnects (`rdma_disconnect(3)`): librdmacm moves the id's QP to ERR (outstanding
    /// work flushes) and sends a DREQ; both sides then see DISCONNECTED. Call it on
    /// DISCONNECTED too, or the QP stays in RTS and the peer's TIMEWAIT is longer.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: the id is alive.
        let ret = unsafe { rdma_disconnect(self.raw()) };
        rc(ret, cm_err(Verb::Disconnect))
    }
}

pub(super) fn check_len(verb: Verb, data: &[u8], max: usize) -> Result<()> {
    if data.len() > max {
        return Err(
            Error::failed(verb, Errno(libc::EINVAL)).with_hint(Hint::detailed(
                HintCode::PrivateDataTooLong,
                format!(
                    "{} bytes of private data; at most {max} fit in this message on IB/RoCE",
                    data.len()
                ),
            )),
        );
    }
    Ok(())
}

pub(super) fn loopback_hint(ip: IpAddr) -> Hint {
    Hint::new(if ip.is_loopback() {
        HintCode::LoopbackAddress
    } else {
        HintCode::NotRxeAddress
    })
}
