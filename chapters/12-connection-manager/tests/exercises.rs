//! Chapter 12's exercise checks, on the microVM pair (the shape: docs/exercises.md):
//!
//! - `cm_connect` checks exercise 12-cm-connect (`LAB_EXERCISE_IMPL`: `starter` or
//!   `solution`). On the host it re-runs itself as two roles: `LAB_EXERCISE_ROLE=server` on
//!   node a (rdma_listen, take the CONNECT_REQUEST, a QP, rdma_accept, ESTABLISHED) and
//!   `client:<impl>` on node b, where the exercise's code connects a fresh id. The client then
//!   requires the returned QP in RTS, moved there by rdma_cm alone.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite), the dev check: the starter fails naming
//!   step 1, a planted connect without `rdma_resolve_route` fails with rdma_connect's EINVAL,
//!   the reference solution passes.
//! - `refused` checks exercise 12-refused on the loopback lab, in one process: a server thread
//!   listens on the rxe address; the learner's `connect_answer` must report an accept, a
//!   refusal with its status and reason text, and a port nobody listens on. The dev check
//!   plants a connect that waits for ESTABLISHED only, a reason that keeps the REJ's padding,
//!   and a connect without the hello.

use harness::Topology;
use harness::exercises::{
    Impl, Part, assert_fails_with, fail, fail_on_role_exit, pair_roles, server_addr, step,
};
use harness::testing::{lab, run_roles};
use lab::cm::{CmEvent, CmEventType, CmId, ConnParam};
use lab::{QpInitAttr, QpState, QueuePair, state};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

#[path = "../exercises/solutions/refused.rs"]
mod refused_solution;
#[path = "../exercises/refused.rs"]
mod refused_starter;
#[path = "../exercises/solutions/cm_connect.rs"]
mod solution;
#[path = "../exercises/cm_connect.rs"]
mod starter;

const TEST: &str = "cm_connect";
const PORT: u16 = 18612;
const T: Duration = Duration::from_secs(10);
const READY: &str = "exercise server: listening";

type Connect = fn(&CmId, SocketAddr, Duration) -> lab::Result<QueuePair<state::Init>>;

/// Which code the client role runs: an implementation, or (dev check) a planted mistake.
fn connect_of(which: &str) -> Connect {
    match which {
        "starter" => starter::connect,
        "solution" => solution::connect,
        // Address resolved, route not: rdma_connect on an id that is not ROUTE_RESOLVED.
        "planted-no-route" => |id, dst, t| {
            id.resolve_addr(None, dst, t)?;
            id.expect_event(CmEventType::AddrResolved, t)?;
            let ctx = id.context()?;
            let pd = ctx.alloc_pd()?;
            let cq = ctx.create_cq(16, None)?;
            let qp = id.create_qp(&pd, &QpInitAttr::rc(&cq, &cq))?;
            id.connect(&ConnParam::default())?;
            id.expect_event(CmEventType::Established, t)?;
            Ok(qp)
        },
        w => panic!("unknown implementation {w:?}"),
    }
}

/// This node's rxe address (rdma_cm routes by IP; a loopback address cannot be).
fn own_ip() -> IpAddr {
    IpAddr::V4(course::rxe_address().expect("this node's rxe address"))
}

/// Node a: listen, take one request, accept it with a QP, wait for ESTABLISHED.
fn server() {
    let listener = CmId::new().expect("rdma_create_id");
    listener
        .listen(SocketAddr::new(own_ip(), PORT), 8)
        .expect("rdma_listen");
    println!("{READY}");
    let Ok(req) = listener.get_request(T) else {
        println!("exercise server: no connection request (the client's code stopped first)");
        return;
    };
    let ctx = req.id.context().expect("the request's device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let cq = ctx.create_cq(16, None).expect("ibv_create_cq");
    let _qp = req
        .id
        .create_qp(&pd, &QpInitAttr::rc(&cq, &cq))
        .expect("rdma_create_qp");
    req.id.accept(&ConnParam::default()).expect("rdma_accept");
    req.id
        .expect_event(CmEventType::Established, T)
        .expect("the server's ESTABLISHED");
    println!("exercise server: ESTABLISHED");
    // Stay until the client disconnects (or the deadline), so its QP is not torn down early.
    let _ = req.id.get_event(T);
}

/// Node b: the exercise's connect on a fresh id, then the QP's state.
fn client(which: &str) {
    let host = server_addr();
    let ip: IpAddr = host.parse().expect("LAB_EXERCISE_SERVER is an IP address");
    let ip = if ip.is_loopback() { own_ip() } else { ip };
    let dst = SocketAddr::new(ip, PORT);
    let id = CmId::new().expect("rdma_create_id");
    let qp = match step("connect", || connect_of(which)(&id, dst, T)) {
        Ok(qp) => qp,
        Err(e) => fail(
            &format!("your connect returned an error: {e}"),
            "ADDR_RESOLVED, ROUTE_RESOLVED, a QP, then ESTABLISHED",
            &e.report().to_string(),
        ),
    };
    let st = qp.state().expect("ibv_query_qp");
    if st != QpState::Rts {
        fail(
            "connect returned, but the id's QP is not in RTS: return once ESTABLISHED came",
            "RTS",
            &st.to_string(),
        );
    }
    println!("exercise client: ESTABLISHED, the QP in {st}");
    id.disconnect().expect("rdma_disconnect");
}

/// The check, on the host: both roles on the pair; the first failing role's message.
fn check_cm_connect(which: &str) {
    let addr = lab(Topology::Pair).server_addr();
    let roles = pair_roles(TEST, READY, which, addr);
    let t = run_roles(Topology::Pair, roles);
    fail_on_role_exit(&t);
    let server = &t.section("server").stdout;
    assert!(
        server.contains("exercise server: ESTABLISHED"),
        "the server never saw ESTABLISHED\n{t}"
    );
}

#[test]
fn cm_connect() {
    match Part::from_env() {
        Part::Server => server(),
        Part::Client(which) => client(&which),
        Part::Check => match Impl::from_env() {
            Some(imp) => check_cm_connect(imp.name()),
            None => dev_check(),
        },
    }
}

/// Every implementation: the starter fails naming step 1, a connect without the route fails
/// with rdma_connect's error, the reference solution passes.
fn dev_check() {
    assert_fails_with("connect: not written yet (step 1:", || {
        check_cm_connect("starter")
    });
    assert_fails_with(
        "your connect returned an error: rdma_connect failed: EINVAL (22)",
        || check_cm_connect("planted-no-route"),
    );
    check_cm_connect("solution");
}

/// How the server answered a connect (exercise 12-refused's result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// ESTABLISHED: the server accepted.
    Accepted,
    /// REJECTED: the IB CM reject reason (the event's status) and the reason text.
    Refused { status: i32, reason: String },
    /// Any other event, as text.
    Other(String),
}

type ConnectAnswer = fn(&CmId, &[u8], Duration) -> lab::Result<Answer>;

const HELLO: &[u8] = b"ch12 refused v1";
const FULL: &str = "server full: try again later";
const WHO: &str = "no hello: who are you?";
/// Each run of the check listens on a port of its own (a failed run's server thread may still
/// hold its listener for up to `T`).
static NEXT_PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(18700);

/// The refusing server: the first request is accepted when its private data begins with the
/// hello (refused with `WHO` otherwise), the second refused with `FULL`.
fn refusing_server(listener: CmId) {
    let Ok(req) = listener.get_request(T) else {
        return;
    };
    if req.private_data.starts_with(HELLO) {
        let ctx = req.id.context().expect("the request's device");
        let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
        let cq = ctx.create_cq(16, None).expect("ibv_create_cq");
        let _qp = req
            .id
            .create_qp(&pd, &QpInitAttr::rc(&cq, &cq))
            .expect("rdma_create_qp");
        req.id.accept(&ConnParam::default()).expect("rdma_accept");
        if req.id.expect_event(CmEventType::Established, T).is_ok() {
            let _ = req.id.expect_event(CmEventType::Disconnected, T);
            let _ = req.id.disconnect();
        }
    } else {
        req.id.reject(WHO.as_bytes()).expect("rdma_reject");
    }
    if let Ok(req) = listener.get_request(T) {
        req.id.reject(FULL.as_bytes()).expect("rdma_reject");
    }
}

/// A fresh id to `dst` with its address and route resolved and its QP created.
fn resolved_id(dst: SocketAddr) -> CmId {
    let id = CmId::new().expect("rdma_create_id");
    id.resolve_addr(None, dst, T).expect("rdma_resolve_addr");
    id.expect_event(CmEventType::AddrResolved, T)
        .expect("ADDR_RESOLVED");
    id.resolve_route(T).expect("rdma_resolve_route");
    id.expect_event(CmEventType::RouteResolved, T)
        .expect("ROUTE_RESOLVED");
    id
}

/// The check: accepted, refused with a reason, nobody listening; one fresh id per round.
fn check_refused(connect_answer: ConnectAnswer) {
    let ip = own_ip();
    let port = NEXT_PORT.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
    let listener = CmId::new().expect("rdma_create_id");
    listener
        .listen(SocketAddr::new(ip, port), 8)
        .expect("rdma_listen");
    let server = std::thread::spawn(move || refusing_server(listener));
    let rounds = [
        (
            "round 1 (the server accepts a hello)",
            port,
            Answer::Accepted,
        ),
        (
            "round 2 (the server refuses)",
            port,
            Answer::Refused {
                status: 28,
                reason: FULL.into(),
            },
        ),
        (
            "round 3 (nobody listens on the port)",
            port + 1,
            Answer::Refused {
                status: 8,
                reason: String::new(),
            },
        ),
    ];
    for (round, p, want) in rounds {
        let id = resolved_id(SocketAddr::new(ip, p));
        let ctx = id.context().expect("the id's device");
        let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
        let cq = ctx.create_cq(16, None).expect("ibv_create_cq");
        let _qp = id
            .create_qp(&pd, &QpInitAttr::rc(&cq, &cq))
            .expect("rdma_create_qp");
        let got = match step("connect_answer", || connect_answer(&id, HELLO, T)) {
            Ok(got) => got,
            Err(e) => fail(
                &format!("{round}: connect_answer returned an error: {e}"),
                &format!("{want:?}"),
                &e.report().to_string(),
            ),
        };
        if got == Answer::Accepted {
            id.disconnect().expect("rdma_disconnect");
        }
        if got != want {
            fail(
                &refused_what(round, &got),
                &format!("{want:?}"),
                &format!("{got:?}"),
            );
        }
    }
    server.join().expect("the server thread");
}

/// The first line of a wrong answer: what the learner's code got wrong.
fn refused_what(round: &str, got: &Answer) -> String {
    match got {
        Answer::Refused { reason, .. } if reason.len() == lab::cm::MAX_REJECT_DATA => format!(
            "{round}: the reason is {} bytes long: a REJECTED event's private data is always \
             the REJ's {} bytes, zero-padded; the text ends at the first NUL",
            reason.len(),
            lab::cm::MAX_REJECT_DATA
        ),
        Answer::Refused { status, reason } => format!(
            "{round}: refused with status {status} ({}) and the reason {reason:?}",
            lab::cm::RejectReason::from_raw(*status).name()
        ),
        Answer::Accepted => format!("{round}: connect_answer says accepted"),
        Answer::Other(ev) => format!("{round}: connect_answer saw {ev}"),
    }
}

#[test]
fn refused() {
    harness::testing::in_lab(Topology::Loopback, "refused", || match Impl::from_env() {
        Some(Impl::Starter) => check_refused(refused_starter::connect_answer),
        Some(Impl::Solution) => check_refused(refused_solution::connect_answer),
        None => dev_check_refused(),
    });
}

/// Every implementation of 12-refused: the starter fails naming step 1, planted mistakes fail
/// with what rdma_cm delivered on rxe, the reference solution passes.
fn dev_check_refused() {
    assert_fails_with("connect_answer: not written yet (step 1:", || {
        check_refused(refused_starter::connect_answer)
    });
    assert_fails_with(
        "round 2 (the server refuses): connect_answer returned an error: expected \
         RDMA_CM_EVENT_ESTABLISHED, got RDMA_CM_EVENT_REJECTED (8), status 28 \
         (IB_CM_REJ_CONSUMER_DEFINED)",
        || {
            check_refused(|id, hello, t| {
                id.connect(&ConnParam::with_data(hello))?;
                id.expect_event(CmEventType::Established, t)?;
                Ok(Answer::Accepted)
            })
        },
    );
    assert_fails_with(
        "round 2 (the server refuses): the reason is 148 bytes long: a REJECTED event's \
         private data is always the REJ's 148 bytes, zero-padded",
        || {
            check_refused(|id, hello, t| {
                id.connect(&ConnParam::with_data(hello))?;
                let ev = id.get_event(t)?;
                Ok(match &ev {
                    CmEvent::Established { .. } => Answer::Accepted,
                    // The whole of the private data, its padding too.
                    CmEvent::Rejected { .. } => Answer::Refused {
                        status: ev.status(),
                        reason: String::from_utf8_lossy(ev.private_data()).into_owned(),
                    },
                    _ => Answer::Other(ev.to_string()),
                })
            })
        },
    );
    assert_fails_with(
        "round 1 (the server accepts a hello): refused with status 28 \
         (IB_CM_REJ_CONSUMER_DEFINED) and the reason \"no hello: who are you?\"",
        || check_refused(|id, _, t| refused_solution::connect_answer(id, b"", t)),
    );
    check_refused(refused_solution::connect_answer);
}
