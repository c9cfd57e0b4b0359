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

use harness::exercises::{Impl, assert_fails_with, fail, panic_message, step};
use harness::testing::{Role, lab, run_roles};
use harness::{Node, Topology};
use lab::cm::{CmEventType, CmId, ConnParam};
use lab::{QpInitAttr, QpState, QueuePair, state};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

#[path = "../exercises/solutions/cm_connect.rs"]
mod solution;
#[path = "../exercises/cm_connect.rs"]
mod starter;

const TEST: &str = "cm_connect";
const ROLE_VAR: &str = "LAB_EXERCISE_ROLE";
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
    IpAddr::V4(lab::course::rxe_address().expect("this node's rxe address"))
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
    let host = std::env::var("LAB_EXERCISE_SERVER").expect("LAB_EXERCISE_SERVER");
    let ip: IpAddr = host.parse().expect("LAB_EXERCISE_SERVER is an IP address");
    let ip = if ip.is_loopback() { own_ip() } else { ip };
    let dst = SocketAddr::new(ip, PORT);
    let id = CmId::new().expect("rdma_create_id");
    let qp = match step("connect", || connect_of(which)(&id, dst, T)) {
        Ok(qp) => qp,
        Err(e) => fail(
            &format!("your connect returned an error: {e}"),
            "ADDR_RESOLVED, ROUTE_RESOLVED, a QP, then ESTABLISHED",
            &e.to_string(),
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
    let exe = std::env::current_exe().expect("current_exe");
    let exe = exe.to_string_lossy();
    let argv = [&*exe, TEST, "--exact", "--nocapture", "--test-threads=1"];
    let addr = lab(Topology::Pair).server_addr();
    let roles = vec![
        Role::new("server", argv)
            .env(ROLE_VAR, "server")
            .ready(READY),
        Role::new("client", argv)
            .on(Node::B)
            .env(ROLE_VAR, &format!("client:{which}"))
            .env("LAB_EXERCISE_SERVER", addr),
    ];
    let t = run_roles(Topology::Pair, roles);
    for s in t.sections.iter().rev() {
        if s.exit_code != 0 {
            match panic_message(&format!("{}{}", s.stdout, s.stderr)) {
                Some(m) => panic!("{m}"),
                None => panic!("the {} role exited {}\n{t}", s.name, s.exit_code),
            }
        }
    }
    let server = &t.section("server").stdout;
    assert!(
        server.contains("exercise server: ESTABLISHED"),
        "the server never saw ESTABLISHED\n{t}"
    );
}

#[test]
fn cm_connect() {
    match std::env::var(ROLE_VAR).ok().as_deref() {
        Some("server") => server(),
        Some(c) if c.starts_with("client:") => client(&c["client:".len()..]),
        Some(r) => panic!("{ROLE_VAR}={r:?}: expected server or client:<impl>"),
        None => match Impl::from_env() {
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
