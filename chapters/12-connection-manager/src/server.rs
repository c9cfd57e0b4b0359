//! The server: listen, take the CONNECT_REQUEST, accept with the region in the private data
//! (or reject, by case), then serve the protocol `--proto` names. `--case peer-killed` and
//! `--case reconnect` run it as workers under a supervisor, so that one can die.

use crate::conn::{
    Conn, complete, conn_on, drain, established, post, post_recv, print_qp, region_data, timewait,
};
use crate::rping::serve_rping;
use crate::{Case, MSG, Opts, Proto, REGION_LEN, REJECT, timeout};
use lab::cm::{CmEventType, CmId, ConnParam, MAX_REJECT_DATA};
use lab::course::{OrFail, Outcome as Result, expect, framed, unframed};
use lab::show;
use lab::{RecvWr, SendWr, state};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

/// `--case peer-killed` and `--case reconnect`: the server runs as workers, each one process,
/// so that one can be killed (SIGKILL, as a crash would) and another started.
pub(crate) fn supervisor(o: &Opts) -> Result {
    let rounds = if o.case == Some(Case::Reconnect) {
        2
    } else {
        1
    };
    for n in 1..=rounds {
        println!("supervisor: starting server worker {n}");
        let child = lab::course::this_program_again(["--worker", &n.to_string()])
            .or_fail("cannot find our own executable")?
            .start()
            .or_fail("cannot start a worker")?;
        // Every wait of a worker ends within --timeout, and a run takes seconds; a worker
        // still running after ten of those is stuck, and the supervisor gives up on it.
        let limit = 10 * timeout(o);
        let Some(status) = lab::process::wait_or_kill(&child, limit)
            .or_fail("waiting for a worker")?
            .map(|out| out.status)
        else {
            return Err(lab::course::Failure(format!(
                "worker {n} did not end within {} s: killed",
                limit.as_secs()
            )));
        };
        match status.signal() {
            Some(9) => println!("supervisor: worker {n} was killed by SIGKILL (9)"),
            _ => {
                println!(
                    "supervisor: worker {n} exited with {}",
                    status.code().unwrap_or(-1)
                );
                expect(status.success(), || format!("worker {n} failed"))?;
            }
        }
    }
    lab::course::done(true, "the server side behaved as expected");
    Ok(())
}

pub(crate) fn server(o: &Opts, worker: u32) -> Result {
    let t = timeout(o);
    let role = if worker > 0 {
        format!("server {worker}")
    } else {
        "server".to_string()
    };
    let role = role.as_str();
    let ip = lab::course::rxe_address()?;
    let listener = CmId::new().or_fail("rdma_create_id")?;
    listener
        .listen(SocketAddr::new(IpAddr::V4(ip), o.port), 8)
        .or_fail("cannot listen")?;
    println!(
        "step 1: {role}: rdma_create_event_channel, rdma_create_id(RDMA_PS_TCP), rdma_bind_addr, rdma_listen"
    );
    println!("  replaces: the TCP listener of the lab's exchange");
    println!(
        "{role}: listening on rdma_cm port {} (the rxe netdev's address)",
        o.port
    );
    if matches!(
        o.case,
        Some(Case::NoListener | Case::Unreachable | Case::Localhost)
    ) {
        println!("{role}: this case concerns the client only; nothing to serve");
        lab::course::done(true, "the server side behaved as expected");
        return Ok(());
    }
    let req = listener
        .get_request(t)
        .or_fail("waiting for a connection request")?;
    println!(
        "step 2: {role}: rdma_get_cm_event -> RDMA_CM_EVENT_CONNECT_REQUEST (4), initiator_depth {}, responder_resources {}",
        req.initiator_depth, req.responder_resources
    );
    println!(
        "  private data: {} bytes (every REQ's: the IB CM REQ's 92, less rdma_cm's 36-byte \
         header), payload {:?}",
        req.private_data.len(),
        unframed(&req.private_data)
            .map(String::from_utf8_lossy)
            .unwrap_or_default()
    );
    println!("  replaces: accept() on the TCP listener and reading the peer's QPN, PSN and GID");
    if o.case == Some(Case::Reject) {
        req.id
            .reject(&framed(REJECT.as_bytes(), MAX_REJECT_DATA))
            .or_fail("rdma_reject")?;
        println!("step 3: {role}: rdma_reject with private data {REJECT:?}");
        lab::course::done(true, "the server side behaved as expected");
        return Ok(());
    }
    match o.proto {
        Proto::Lab => serve_lab(o, role, worker, req.id),
        Proto::Rping => serve_rping(o, role, req.id),
        Proto::Sendrecv | Proto::Ucmatose => serve_sendrecv(o, role, req.id),
    }
}

pub(crate) fn accept(role: &str, step: u32, c: &Conn, data: &[u8], t: Duration) -> Result<()> {
    c.id.accept(&ConnParam::with_data(data))
        .or_fail("rdma_accept")?;
    let st = c.qp.state().or_fail("ibv_query_qp")?;
    println!(
        "step {step}: {role}: rdma_accept ({} bytes of private data) -> our QP is {st} already",
        data.len()
    );
    println!(
        "  replaces: sending our QPN and PSN + ibv_modify_qp(INIT -> RTR) + ibv_modify_qp(RTR -> RTS)"
    );
    let ev =
        c.id.expect_event(CmEventType::Established, t)
            .or_fail("waiting for ESTABLISHED")?;
    println!(
        "step {}: {role}: rdma_get_cm_event -> {ev} (the client's RTU arrived)",
        step + 1
    );
    Ok(())
}

pub(crate) fn kill_myself(role: &str) -> Result {
    println!("{role}: killing this process with SIGKILL, as a crash would");
    let pid = std::process::id().to_string();
    duct::cmd("kill", ["-KILL", &pid])
        .unchecked()
        .run()
        .or_fail("kill(1)")?;
    std::thread::sleep(Duration::from_secs(5));
    Err("SIGKILL did not kill us".into())
}

pub(crate) fn serve_lab(o: &Opts, role: &str, worker: u32, id: CmId) -> Result {
    let t = timeout(o);
    let mut c = conn_on(id, REGION_LEN, role, 3)?;
    c.mr.as_mut_slice().fill(0);
    // One receive: the client's "done" SEND in the kill cases; otherwise never consumed, it
    // shows the flush at the end.
    let sink = c.mr.sge(REGION_LEN - 16..REGION_LEN);
    c.qp.post_recv_one(RecvWr::new(9, std::slice::from_ref(&sink)))
        .or_fail("ibv_post_recv")?;
    let data = region_data(&c.mr);
    println!(
        "  our region: {} len={REGION_LEN} {}: it goes in the private data of \
         rdma_accept",
        show::addr(c.mr.addr()),
        show::rkey(c.mr.rkey())
    );
    accept(role, 4, &c, &data, t)?;
    let c = established(c)?;
    print_qp(role, 6, &c.qp)?;
    let dies = o.case == Some(Case::PeerKilled) || (o.case == Some(Case::Reconnect) && worker == 1);
    if dies {
        complete(&c.cq, 1, t, "the client's \"done\"")?;
        let got = &c.mr.as_slice()[..MSG.len()];
        println!(
            "step 7: {role}: the client's \"done\" arrived; our region holds {:?}",
            String::from_utf8_lossy(got)
        );
        return kill_myself(role);
    }
    let ev =
        c.id.expect_event(CmEventType::Disconnected, t)
            .or_fail("waiting for the client to finish")?;
    let st = c.qp.state().or_fail("ibv_query_qp")?;
    println!(
        "step 7: {role}: rdma_get_cm_event -> {ev}: our QP is still {st} (librdmacm changes \
         nothing before we call rdma_disconnect)"
    );
    let got = &c.mr.as_slice()[..MSG.len()];
    println!(
        "  our region holds {:?}: written by the client, our CPU took no part",
        String::from_utf8_lossy(got)
    );
    expect(got == MSG.as_bytes(), || {
        "the region does not hold the client's message".into()
    })?;
    c.id.disconnect().or_fail("rdma_disconnect")?;
    drain(role, 8, &c, 1, t)?;
    timewait(role, 9, &c.id, t)?;
    lab::course::done(true, "the server side behaved as expected");
    Ok(())
}

pub(crate) fn receive_all(
    role: &str,
    step: u32,
    c: &Conn<state::Rts>,
    n: usize,
    t: Duration,
) -> Result {
    let wcs = complete(&c.cq, n, t, "the client's messages")?;
    let bytes: u32 = wcs.iter().map(|w| w.byte_len).sum();
    println!("step {step}: {role}: received {n} message(s), {bytes} bytes");
    Ok(())
}

/// The SEND/RECV exchange of rdma_client (`--proto sendrecv`: the client sends first, then
/// we answer, the client disconnects) and of ucmatose (`--proto ucmatose`: we send first, then
/// receive, then disconnect).
pub(crate) fn serve_sendrecv(o: &Opts, role: &str, id: CmId) -> Result {
    let t = timeout(o);
    let (n, size) = (o.count as usize, o.size as usize);
    let mut c = conn_on(id, 2 * n * size, role, 3)?;
    for i in 0..n {
        post_recv(&c, i as u64, i * size..(i + 1) * size)?;
    }
    for i in 0..n {
        let off = (n + i) * size;
        c.mr.as_mut_slice()[off..off + size].fill(b'a' + (i % 26) as u8);
    }
    accept(role, 4, &c, &[], t)?;
    let c = established(c)?;
    let ucmatose = o.proto == Proto::Ucmatose;
    let mut step = 6;
    if !ucmatose {
        receive_all(role, step, &c, n, t)?;
        step += 1;
    }
    for i in 0..n {
        let s = c.mr.sge((n + i) * size..(n + i + 1) * size);
        post(&c, SendWr::send(100 + i as u64, std::slice::from_ref(&s)))?;
    }
    complete(&c.cq, n, t, "our SENDs")?;
    println!("step {step}: {role}: sent {n} message(s) of {size} bytes");
    step += 1;
    if ucmatose {
        receive_all(role, step, &c, n, t)?;
        step += 1;
        // ucmatose's server disconnects first; so do we in its place.
        c.id.disconnect().or_fail("rdma_disconnect")?;
    }
    let ev =
        c.id.expect_event(CmEventType::Disconnected, t)
            .or_fail("waiting for the client's disconnect")?;
    println!("step {step}: {role}: {ev}");
    if !ucmatose {
        c.id.disconnect().or_fail("rdma_disconnect")?;
    }
    drain(role, step + 1, &c, 0, t)?;
    lab::course::done(true, "the server side behaved as expected");
    Ok(())
}
