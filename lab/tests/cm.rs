//! Device tests of `lab::cm` (librdmacm) on the loopback lab's rxe device: a listener and a
//! client in one process, on `rxe0`'s netdev address (10.99.0.1; 127.0.0.1 cannot be routed on
//! RoCE, `cm_loopback_address_is_a_route_error` shows it).
//!
//! Each test runs through `harness::testing::in_lab`, like `device.rs`: connect + accept with
//! private data both ways, a SEND over the connected QPs and the QP states rdma_cm set;
//! disconnect (DISCONNECTED on both sides, QPs in ERR, a posted receive flushed,
//! TIMEWAIT_EXIT); reject with private data (REJECTED 28); no listener (REJECTED 8).

use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use harness::Topology;
use harness::testing::in_lab;
use lab::cm::{CmEvent, CmEventType, CmId, ConnParam, RejectReason};
use lab::*;

const T: Duration = Duration::from_secs(10);

/// The rxe netdev's IPv4 address, read from the RoCE v2 GID (`::ffff:10.99.0.1`).
fn rxe_ip() -> IpAddr {
    let ctx = Context::open_default().expect("open the rxe device");
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    IpAddr::V4(gid.to_ipv4().expect("an IPv4-mapped GID"))
}

/// A client id with its route resolved to `dst`.
fn resolved(dst: SocketAddr) -> CmId {
    let id = CmId::new().expect("rdma_create_id");
    id.resolve_addr(None, dst, Duration::from_secs(2)).unwrap();
    id.expect_event(CmEventType::AddrResolved, T).unwrap();
    id.resolve_route(Duration::from_secs(2)).unwrap();
    id.expect_event(CmEventType::RouteResolved, T).unwrap();
    id
}

/// What one side of a connection owns (field order is drop order: QP before CQ, PD, id).
struct Side {
    qp: QueuePair<state::Init>,
    cq: CompletionQueue,
    mr: MemoryRegion,
    _pd: ProtectionDomain,
    id: CmId,
}

fn side(id: CmId) -> Side {
    let ctx = id.context().expect("id->verbs");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let mr = pd.reg_mr(4096, AccessFlags::ALL_REMOTE).unwrap();
    let qp = id.create_qp(&pd, &QpInitAttr::rc(&cq, &cq)).unwrap();
    Side {
        qp,
        cq,
        mr,
        _pd: pd,
        id,
    }
}

#[test]
fn cm_connect_accept_send_disconnect() {
    in_lab(
        Topology::Loopback,
        "cm_connect_accept_send_disconnect",
        || {
            let addr = SocketAddr::new(rxe_ip(), 20886);
            let listener = CmId::new().unwrap();
            listener.listen(addr, 4).unwrap();
            let server = thread::spawn(move || {
                let req = listener.get_request(T).unwrap();
                // A REQ always reports 56 bytes of private data (the IB CM REQ's 92 less
                // rdma_cm's 36-byte header): the payload says its length.
                assert_eq!(req.private_data.len(), lab::cm::MAX_CONNECT_DATA);
                assert_eq!(&req.private_data[..6], b"\x05hello");
                let s = side(req.id);
                // rdma_create_qp left the QP in INIT.
                assert_eq!(s.qp.state().unwrap(), QpState::Init);
                let dst = s.mr.sge(0..64);
                s.qp.post_recv_one(RecvWr::new(1, std::slice::from_ref(&dst)))
                    .unwrap();
                s.id.accept(&ConnParam::with_data(b"\x03yes")).unwrap();
                s.id.expect_event(CmEventType::Established, T).unwrap();
                assert_eq!(s.qp.state().unwrap(), QpState::Rts);
                let mut wc = [WorkCompletion::default()];
                s.cq.poll_exact(&mut wc, T).unwrap();
                wc[0].ok().unwrap();
                assert_eq!(&s.mr.as_slice()[..4], b"ping");
                // The client disconnects: we see DISCONNECTED, answer with rdma_disconnect, and
                // librdmacm moves our QP to ERR.
                s.qp.post_recv_one(RecvWr::new(2, std::slice::from_ref(&dst)))
                    .unwrap();
                s.id.expect_event(CmEventType::Disconnected, T).unwrap();
                s.id.disconnect().unwrap();
                assert_eq!(s.qp.state().unwrap(), QpState::Err);
                s.cq.poll_exact(&mut wc, T).unwrap();
                assert_eq!(wc[0].status, WcStatus::WrFlushErr);
                assert_eq!(wc[0].wr_id, 2);
                s.id.expect_event(CmEventType::TimewaitExit, Duration::from_secs(30))
                    .unwrap();
            });
            let mut c = side(resolved(addr));
            c.id.connect(&ConnParam::with_data(b"\x05hello")).unwrap();
            match c.id.get_event(T).unwrap() {
                CmEvent::Established { private_data } => assert_eq!(&private_data[..4], b"\x03yes"),
                other => panic!("expected ESTABLISHED, got {other}"),
            }
            let qp = c.qp.assume_state::<state::Rts>();
            let info = qp.query().unwrap();
            assert_eq!(info.state, QpState::Rts);
            c.mr.as_mut_slice()[..4].copy_from_slice(b"ping");
            let src = c.mr.sge(0..4);
            qp.post_send_one(SendWr::send(3, std::slice::from_ref(&src)))
                .unwrap();
            let mut wc = [WorkCompletion::default()];
            c.cq.poll_exact(&mut wc, T).unwrap();
            wc[0].ok().unwrap();
            c.id.disconnect().unwrap();
            assert_eq!(qp.state().unwrap(), QpState::Err);
            c.id.expect_event(CmEventType::Disconnected, T).unwrap();
            c.id.expect_event(CmEventType::TimewaitExit, Duration::from_secs(30))
                .unwrap();
            server.join().unwrap();
        },
    );
}

#[test]
fn cm_reject_with_private_data() {
    in_lab(Topology::Loopback, "cm_reject_with_private_data", || {
        let addr = SocketAddr::new(rxe_ip(), 20887);
        let listener = CmId::new().unwrap();
        listener.listen(addr, 4).unwrap();
        let server = thread::spawn(move || {
            let req = listener.get_request(T).unwrap();
            req.id.reject(b"\x04full").unwrap();
        });
        let c = side(resolved(addr));
        c.id.connect(&ConnParam::default()).unwrap();
        match c.id.get_event(T).unwrap() {
            CmEvent::Rejected {
                reason,
                private_data,
            } => {
                assert_eq!(reason, RejectReason::ConsumerDefined);
                assert_eq!(reason.raw(), 28);
                assert_eq!(&private_data[..5], b"\x04full");
            }
            other => panic!("expected REJECTED, got {other}"),
        }
        server.join().unwrap();
    });
}

#[test]
fn cm_no_listener_is_rejected_8() {
    in_lab(Topology::Loopback, "cm_no_listener_is_rejected_8", || {
        let c = side(resolved(SocketAddr::new(rxe_ip(), 20888)));
        c.id.connect(&ConnParam::default()).unwrap();
        let started = Instant::now();
        let e = c.id.expect_event(CmEventType::Established, T).unwrap_err();
        assert!(
            e.to_string()
                .contains("RDMA_CM_EVENT_REJECTED (8), status 8 (IB_CM_REJ_INVALID_SERVICE_ID)"),
            "{e}"
        );
        let h = e.hint().expect("a hint");
        assert_eq!(h.code(), HintCode::CmRejected, "{}", e.report());
        assert!(h.text().contains("nobody listens"), "{h}");
        assert!(started.elapsed() < Duration::from_secs(5));
    });
}

#[test]
fn cm_loopback_address_is_a_route_error() {
    in_lab(
        Topology::Loopback,
        "cm_loopback_address_is_a_route_error",
        || {
            let id = CmId::new().unwrap();
            let dst = SocketAddr::from(([127, 0, 0, 1], 20889));
            id.resolve_addr(None, dst, Duration::from_secs(2)).unwrap();
            id.expect_event(CmEventType::AddrResolved, T).unwrap();
            let e = id.resolve_route(Duration::from_secs(2)).unwrap_err();
            // ENODEV (19): no RDMA device on the route to `lo`.
            assert_eq!(e.errno(), Some(Errno(19)), "{e}");
            assert_eq!(e.verb(), Some(Verb::ResolveRoute), "{e}");
            assert_eq!(
                e.hint().map(|h| h.code()),
                Some(HintCode::LoopbackAddress),
                "{}",
                e.report()
            );
        },
    );
}

#[test]
fn cm_create_qp_refuses_a_pd_of_another_context() {
    in_lab(
        Topology::Loopback,
        "cm_create_qp_refuses_a_pd_of_another_context",
        || {
            let id = resolved(SocketAddr::new(rxe_ip(), 20890));
            // Our own ibv_open_device: the same device, but not librdmacm's context.
            let ctx = Context::open_default().unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(4, None).unwrap();
            let e = id.create_qp(&pd, &QpInitAttr::rc(&cq, &cq)).unwrap_err();
            assert_eq!(e.errno(), Some(Errno(22)), "{e}");
            assert_eq!(
                e.hint().map(|h| h.code()),
                Some(HintCode::CmQpPd),
                "{}",
                e.report()
            );
            // librdmacm's own context is not lab's to close.
            let e = id.context().unwrap().close().unwrap_err();
            assert!(e.to_string().contains("lab did not open it"), "{e}");
        },
    );
}
