//! The client's failure cases that take their own path: an address nobody has, 127.0.0.1,
//! and a peer that dies and comes back (reset the QP, or better, connect with new ones).

use crate::client::{connect, peer_killed, write_read};
use crate::conn::{Conn, Region, established, parse_region, print_qp};
use crate::{HELLO, Opts, REGION_LEN, RESOLVE, timeout};
use course::show;
use course::{Failure, OrFail, Outcome as Result, expect, framed};
use lab::cm::{CmEvent, CmEventType, CmId, ConnParam, MAX_CONNECT_DATA};
use lab::{AccessFlags, QpAttr, QpInitAttr, QpState};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub(crate) fn unreachable_case(dst: SocketAddr) -> Result {
    let role = "client";
    let id = CmId::new().or_fail("rdma_create_id")?;
    println!(
        "step 1: {role}: rdma_resolve_addr({}, timeout {} ms): an address of our subnet that \
         nobody has",
        dst.ip(),
        RESOLVE.as_millis()
    );
    let start = Instant::now();
    id.resolve_addr(None, dst, RESOLVE)
        .or_fail("rdma_resolve_addr")?;
    let deadline = RESOLVE + Duration::from_secs(2);
    let ev = id
        .get_event(deadline)
        .or_fail("waiting for address resolution")?;
    let took = start.elapsed();
    println!(
        "step 2: {role}: {ev} after {} (our deadline: {} s)",
        show::elapsed(took),
        deadline.as_secs()
    );
    match ev.hint() {
        Some(h) => println!("  hint: {h}"),
        None => println!("  hint: none"),
    }
    expect(
        matches!(ev, CmEvent::AddrError { .. } | CmEvent::Unreachable { .. }),
        || format!("expected ADDR_ERROR or UNREACHABLE, got {ev}"),
    )?;
    expect(took <= deadline, || {
        format!("took {took:?}, beyond the deadline")
    })?;
    course::done(true, "the address error came within the deadline");
    Ok(())
}

pub(crate) fn localhost_case(dst: SocketAddr) -> Result {
    let role = "client";
    let id = CmId::new().or_fail("rdma_create_id")?;
    id.resolve_addr(None, dst, RESOLVE)
        .or_fail("rdma_resolve_addr")?;
    let ev = id
        .get_event(RESOLVE * 2)
        .or_fail("waiting for address resolution")?;
    println!("step 1: {role}: rdma_resolve_addr({}) -> {ev}", dst.ip());
    match id.resolve_route(RESOLVE) {
        Ok(()) => {
            let ev = id
                .get_event(RESOLVE * 2)
                .or_fail("waiting for route resolution")?;
            println!("step 2: {role}: rdma_resolve_route -> {ev}");
            expect(ev.event_type() != CmEventType::RouteResolved, || {
                "127.0.0.1 was routed".into()
            })?;
        }
        Err(e) => {
            println!("step 2: {role}: {}", e.report());
            expect(e.errno() == Some(lab::Errno(19)), || {
                format!("expected ENODEV, got {}", e.report())
            })?;
        }
    }
    course::done(true, "127.0.0.1 is not routable on RoCE, as expected");
    Ok(())
}

/// A peer that really dies (server worker 1, SIGKILL), then comes back (worker 2).
pub(crate) fn reconnect_case(o: &Opts, dst: SocketAddr) -> Result {
    let t = timeout(o);
    let role = "client";
    let Some((c, region)) = connect(o, role, dst)? else {
        return Err("the first connection was refused".into());
    };
    let mut c = established(c)?;
    let first = print_qp(role, 6, &c.qp)?;
    write_read(role, 7, &mut c, region.expect("lab protocol"), t)?;
    peer_killed(o, &c, 8)?;
    let qp = c.qp;
    println!("step 11: {role}: tutorials say \"modify the QP back to INIT and connect again\":");
    match qp.modify(&QpAttr::new().state(QpState::Init)) {
        Ok(()) => return Err("ERR -> INIT was accepted".into()),
        Err(e) => println!(
            "  ibv_modify_qp(ERR -> INIT) is refused: {}",
            e.errno().map_or(e.report().to_string(), |x| x.to_string())
        ),
    }
    let qp = qp.reset().map_err(|e| Failure(e.to_string()))?;
    println!(
        "  ibv_modify_qp(ERR -> RESET): ok, the QP is {}: RESET is the only way out of ERR",
        qp.state().or_fail("ibv_query_qp")?
    );
    println!(
        "  with rdma_cm the id is spent too (one connection per id): destroy QP and id, connect \
         with new ones"
    );
    drop(qp);
    drop(c.id);
    let start = Instant::now();
    let deadline = start + t;
    let (c, region) = loop {
        match try_connect(dst, t) {
            Ok(x) => break x,
            // How many attempts it takes is timing-dependent, so it is not printed.
            Err(e) if e.0.contains("status 8") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    };
    println!(
        "step 12: {role}: connected again after {} (a REJECTED 8 while the server restarts is \
         retried every 200 ms, up to the deadline)",
        show::elapsed(start.elapsed())
    );
    let mut c = established(c)?;
    let second = print_qp(role, 13, &c.qp)?;
    expect(second.sq_psn != first.sq_psn, || {
        "the PSN did not change".into()
    })?;
    println!(
        "  fresh PSNs: sq_psn {} now, {} on the first connection",
        show::psn(second.sq_psn),
        show::psn(first.sq_psn)
    );
    write_read(role, 14, &mut c, region.ok_or("no region")?, t)?;
    c.id.disconnect().or_fail("rdma_disconnect")?;
    c.id.expect_event(CmEventType::Disconnected, t)
        .or_fail("waiting for DISCONNECTED")?;
    println!("step 15: {role}: disconnected cleanly");
    course::done(true, "reset, reconnected through rdma_cm and carried on");
    Ok(())
}

/// One quiet connection attempt (the reconnect loop).
pub(crate) fn try_connect(dst: SocketAddr, t: Duration) -> Result<(Conn, Option<Region>)> {
    let id = CmId::new().or_fail("rdma_create_id")?;
    id.resolve_addr(None, dst, RESOLVE)
        .or_fail("rdma_resolve_addr")?;
    id.expect_event(CmEventType::AddrResolved, t)
        .or_fail("rdma_resolve_addr")?;
    id.resolve_route(RESOLVE).or_fail("rdma_resolve_route")?;
    id.expect_event(CmEventType::RouteResolved, t)
        .or_fail("rdma_resolve_route")?;
    let ctx = id.context().or_fail("id->verbs")?;
    let pd = ctx.alloc_pd().or_fail("PD")?;
    let cq = ctx.create_cq(32, None).or_fail("CQ")?;
    let mr = pd
        .reg_mr(REGION_LEN, AccessFlags::ALL_REMOTE)
        .or_fail("MR")?;
    let qp = id
        .create_qp(&pd, &QpInitAttr::rc(&cq, &cq))
        .or_fail("rdma_create_qp")?;
    id.connect(&ConnParam::with_data(&framed(
        HELLO.as_bytes(),
        MAX_CONNECT_DATA,
    )))
    .or_fail("rdma_connect")?;
    match id.get_event(t).or_fail("waiting for the connection")? {
        CmEvent::Established { private_data } => Ok((
            Conn {
                qp,
                cq,
                mr,
                _pd: pd,
                id,
            },
            parse_region(&private_data),
        )),
        other => Err(format!("{other}").into()),
    }
}
