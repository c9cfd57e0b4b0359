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
//!   timeout; a quiet channel is [`Error::EventTimeout`](crate::Error::EventTimeout), never a hang.
//! * **Events are copied, then acknowledged.** `rdma_get_cm_event` hands out an event that
//!   points into librdmacm's memory (its private data too) and must be given back with
//!   `rdma_ack_cm_event`; an unacknowledged event makes `rdma_destroy_id` wait forever. Here
//!   the raw event lives in a guard whose `Drop` acknowledges it, right after [`CmEvent`]
//!   copied out the type, the status and the private data: no path (error, panic) leaves one
//!   unacknowledged.
//! * **The QP belongs to the id.** [`CmId::create_qp`] is `rdma_create_qp` with lab's
//!   [`ProtectionDomain`](crate::ProtectionDomain) and [`CompletionQueue`](crate::CompletionQueue)s: librdmacm moves the QP to INIT at once,
//!   to RTR and RTS during `rdma_connect` / `rdma_accept`, and to ERR in `rdma_disconnect`
//!   (the `ibv_modify_qp` calls of chapter 05, made for you). The returned [`QueuePair`](crate::QueuePair) is a
//!   normal lab QP (post, poll, query); dropping it destroys the QP and clears `id->qp`.
//!   The PD and CQs must come from [`CmId::context`], librdmacm's own open device (a PD from
//!   another `ibv_open_device` is refused with EINVAL).
//!
//! Facts measured on rxe that these wrappers rely on are in `docs/rxe-observed.md` and
//! `docs/rdma-sys-notes.md` (note 11).

mod addr;
mod event;
mod id;
mod param;

pub use event::{CmEvent, CmEventType, ConnectRequest, RejectReason, event_str};
pub use id::CmId;
pub(crate) use id::IdInner;
pub use param::ConnParam;

use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::addr::{from_sockaddr, to_sockaddr};
    use super::id::{check_len, loopback_hint};
    use super::*;
    use crate::error::{Errno, Error, HintCode, Result, Verb};
    use rdma_sys::*;
    use std::mem::{align_of, offset_of, size_of};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

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
        assert_eq!(ev.hint().map(|h| h.code()), Some(HintCode::CmRejected));
        assert!(ev.hint().unwrap().text().contains("nobody listens"));
        let ev = CmEvent::decode(1, -110, &[], no_request).unwrap();
        assert!(matches!(ev, CmEvent::AddrError { status: -110 }));
        assert_eq!(
            ev.to_string(),
            "RDMA_CM_EVENT_ADDR_ERROR (1), status -110 (-ETIMEDOUT)"
        );
        let ev = CmEvent::decode(7, -110, &[], no_request).unwrap();
        assert_eq!(ev.hint().map(|h| h.code()), Some(HintCode::CmUnreachable));
        assert!(ev.hint().unwrap().text().contains("4.3 s per REQ try"));
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
            Err(Error::failed(Verb::MigrateId, Errno(libc::ENOMEM)))
        });
        let e = r.unwrap_err();
        assert_eq!(e.verb(), Some(Verb::MigrateId));
        assert_eq!(e.to_string(), "rdma_migrate_id failed: ENOMEM (12)");
    }

    #[test]
    fn oversized_private_data_is_refused_with_the_limit() {
        let e = check_len(Verb::Connect, &[0; 57], MAX_CONNECT_DATA).unwrap_err();
        assert_eq!(e.to_string(), "rdma_connect failed: EINVAL (22)");
        let h = e.hint().unwrap();
        assert_eq!(h.code(), HintCode::PrivateDataTooLong);
        assert!(h.text().contains("at most 56"), "{h}");
        assert!(check_len(Verb::Connect, &[0; 56], MAX_CONNECT_DATA).is_ok());
    }

    #[test]
    fn loopback_addresses_get_the_roce_hint() {
        let h = loopback_hint(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(h.code(), HintCode::LoopbackAddress);
        assert_eq!(
            loopback_hint(IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1))).code(),
            HintCode::NotRxeAddress
        );
        let s = SocketAddr::from(([10, 99, 0, 1], 7471));
        let ss = to_sockaddr(s);
        // SAFETY: `ss` holds a sockaddr_in written by to_sockaddr.
        let back = unsafe { from_sockaddr((&raw const ss).cast()) };
        assert_eq!(back, Some(s));
    }
}
