//! The client: resolve the server's address and route, create the QP, connect with a hello
//! in the private data; then WRITE into the server's region and READ it back, and disconnect
//! (or, by case, see the server refuse or die).

use crate::cases::{localhost_case, reconnect_case, unreachable_case};
use crate::conn::{
    Conn, Region, complete, conn_on, drain, established, event_line, parse_region, post, post_recv,
    print_qp, timewait,
};
use crate::rping::rping_client;
use crate::{Case, HELLO, MSG, Opts, Proto, READ_BACK, REGION_LEN, REJECT, RESOLVE, timeout};
use course::show;
use course::{Failure, OrFail, Outcome as Result, expect, framed, unframed};
use lab::cm::{CmEvent, CmEventType, CmId, ConnParam, MAX_CONNECT_DATA};
use lab::{SendWr, state};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

pub(crate) fn client(o: &Opts, host: &str) -> Result {
    let given: IpAddr = host
        .parse()
        .map_err(|_| Failure(format!("{host:?} is not an IP address")))?;
    let ip = match o.case {
        Some(Case::Localhost) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(Case::Unreachable) => {
            let [a, b, c, _] = course::rxe_address()?.octets();
            IpAddr::V4(Ipv4Addr::new(a, b, c, 77))
        }
        // Printed the same either way, so the transcript is the same on every provider (the
        // native provider's pair hands the client 127.0.0.1: both nodes are one device).
        _ if given.is_loopback() => IpAddr::V4(course::rxe_address()?),
        _ => given,
    };
    if o.case.is_none() {
        println!(
            "client: rdma_cm needs the server's rxe netdev address (127.0.0.1 cannot be routed \
             on RoCE: a loopback address is replaced by this node's own, the server then shares \
             our device)"
        );
    }
    let port = if o.case == Some(Case::NoListener) {
        o.port + 1
    } else {
        o.port
    };
    let dst = SocketAddr::new(ip, port);
    match o.case {
        Some(Case::Unreachable) => return unreachable_case(dst),
        Some(Case::Localhost) => return localhost_case(dst),
        Some(Case::Reconnect) => return reconnect_case(o, dst),
        _ => {}
    }
    let Some((c, region)) = connect(o, "client", dst)? else {
        return Ok(()); // the refusal this case is about, printed
    };
    let mut c = established(c)?;
    print_qp("client", 6, &c.qp)?;
    match o.proto {
        Proto::Lab => lab_session(o, &mut c, region.expect("lab protocol"), 7),
        Proto::Rping => rping_client(o, c),
        Proto::Sendrecv => sendrecv_client(o, c),
        Proto::Ucmatose => {
            Err("--proto ucmatose is a server protocol (run ucmatose -s as the client)".into())
        }
    }
}

/// Steps 1 to 5: id, address, route, QP, connect. `Some` once ESTABLISHED; `None` when the
/// server refused as the case expects (printed); any other outcome is an error.
pub(crate) fn connect(
    o: &Opts,
    role: &str,
    dst: SocketAddr,
) -> Result<Option<(Conn, Option<Region>)>> {
    let t = timeout(o);
    let id = CmId::new().or_fail("rdma_create_id")?;
    println!("step 1: {role}: rdma_create_event_channel, rdma_create_id(RDMA_PS_TCP)");
    println!("  replaces: the TCP socket of the lab's exchange");
    id.resolve_addr(None, dst, RESOLVE)
        .or_fail("rdma_resolve_addr")?;
    let ev = id
        .expect_event(CmEventType::AddrResolved, t)
        .or_fail("rdma_resolve_addr")?;
    let ctx = id.context().or_fail("id->verbs")?;
    event_line(
        role,
        2,
        &format!("rdma_resolve_addr({} ms)", RESOLVE.as_millis()),
        &ev,
    );
    println!(
        "  the id is bound to {} port {}: replaces picking the device and the GID index \
         (chapter 01)",
        ctx.name(),
        id.port_num()
    );
    id.resolve_route(RESOLVE).or_fail("rdma_resolve_route")?;
    let ev = id
        .expect_event(CmEventType::RouteResolved, t)
        .or_fail("rdma_resolve_route")?;
    event_line(role, 3, "rdma_resolve_route", &ev);
    println!("  replaces: learning the peer's GID and MAC, and the path MTU");
    let len = match o.proto {
        Proto::Lab => REGION_LEN,
        Proto::Rping => 2 * o.size as usize + 64,
        Proto::Sendrecv | Proto::Ucmatose => 2 * (o.count * o.size) as usize,
    };
    let c = conn_on(id, len, role, 4)?;
    let posted = match o.proto {
        Proto::Lab => 0,
        Proto::Rping => {
            post_recv(&c, 1, 0..16)?;
            1
        }
        Proto::Sendrecv | Proto::Ucmatose => {
            let (n, size) = (o.count as usize, o.size as usize);
            for i in 0..n {
                post_recv(&c, i as u64, (n + i) * size..(n + i + 1) * size)?;
            }
            n
        }
    };
    let hello = framed(HELLO.as_bytes(), MAX_CONNECT_DATA);
    let start = Instant::now();
    c.id.connect(&ConnParam::with_data(&hello))
        .or_fail("rdma_connect")?;
    let ev = c.id.get_event(t).or_fail("waiting for the connection")?;
    println!(
        "step 5: {role}: rdma_connect ({} bytes of private data{}) -> {ev}",
        hello.len(),
        if posted > 0 {
            format!(", {posted} receive(s) posted first")
        } else {
            String::new()
        }
    );
    match ev {
        CmEvent::Established { private_data } => {
            println!(
                "  replaces: the TCP exchange of QPN, PSN and GID + ibv_modify_qp(INIT -> RTR) \
                 + ibv_modify_qp(RTR -> RTS)"
            );
            let region = (o.proto == Proto::Lab).then(|| parse_region(&private_data));
            let region = match region {
                None => None,
                Some(None) => return Err("the server's private data holds no region".into()),
                Some(Some(r)) => {
                    println!(
                        "  the server's private data ({} bytes): region {} len={} {}",
                        private_data.len(),
                        show::addr(r.0),
                        r.1,
                        show::rkey(r.2)
                    );
                    Some(r)
                }
            };
            Ok(Some((c, region)))
        }
        CmEvent::Rejected {
            reason,
            private_data,
        } => {
            let waited = start.elapsed();
            println!("  {}", reason.explanation());
            match o.case {
                Some(Case::NoListener) if reason.raw() == 8 => {
                    println!(
                        "  answered after {}: the peer's kernel CM answers at once, no retries",
                        show::elapsed(waited)
                    );
                }
                Some(Case::Reject) if reason.raw() == 28 => {
                    let why = unframed(&private_data)
                        .map(String::from_utf8_lossy)
                        .unwrap_or_default();
                    println!(
                        "  the server's private data ({} bytes on the wire): {why:?}",
                        private_data.len()
                    );
                    expect(why == REJECT, || "the reject carried no reason".into())?;
                }
                _ => return Err(format!("rejected: {}", reason.name()).into()),
            }
            course::done(true, "the connection was refused exactly as expected");
            Ok(None)
        }
        other => {
            let hint = other.hint().map(|h| format!("\n  hint: {h}"));
            Err(format!("rdma_connect: {other}{}", hint.unwrap_or_default()).into())
        }
    }
}

/// The lab protocol: WRITE into the server's region, READ it back; then, by case, a clean
/// disconnect, or a "done" SEND to a server that dies.
pub(crate) fn lab_session(o: &Opts, c: &mut Conn<state::Rts>, region: Region, step: u32) -> Result {
    let t = timeout(o);
    let role = "client";
    write_read(role, step, c, region, t)?;
    if o.case == Some(Case::PeerKilled) {
        return peer_killed(o, c, step + 1).map(|_| {
            course::done(true, "the peer's death was seen and our work flushed");
        });
    }
    c.id.disconnect().or_fail("rdma_disconnect")?;
    drain(role, step + 1, c, 0, t)?;
    let ev =
        c.id.expect_event(CmEventType::Disconnected, t)
            .or_fail("waiting for DISCONNECTED")?;
    println!("step {}: {role}: rdma_get_cm_event -> {ev}", step + 2);
    timewait(role, step + 3, &c.id, t)?;
    course::done(
        true,
        "connected, wrote and read through rdma_cm, and disconnected cleanly",
    );
    Ok(())
}

pub(crate) fn write_read(
    role: &str,
    step: u32,
    c: &mut Conn<state::Rts>,
    (addr, len, rkey): Region,
    t: Duration,
) -> Result {
    expect(MSG.len() <= len as usize, || {
        "the server's region is too small".into()
    })?;
    c.mr.as_mut_slice()[..MSG.len()].copy_from_slice(MSG.as_bytes());
    let src = c.mr.sge(0..MSG.len());
    post(c, SendWr::write(1, std::slice::from_ref(&src), addr, rkey))?;
    complete(&c.cq, 1, t, "the RDMA WRITE")?;
    println!(
        "step {step}: {role}: RDMA WRITE of {} bytes to {} {}, known from the private \
         data alone",
        MSG.len(),
        show::addr(addr),
        show::rkey(rkey)
    );
    let dst = c.mr.sge(READ_BACK..READ_BACK + MSG.len());
    post(c, SendWr::read(2, std::slice::from_ref(&dst), addr, rkey))?;
    complete(&c.cq, 1, t, "the RDMA READ")?;
    let back = &c.mr.as_slice()[READ_BACK..READ_BACK + MSG.len()];
    println!("  RDMA READ back: {:?}", String::from_utf8_lossy(back));
    expect(back == MSG.as_bytes(), || {
        "the READ did not return what we wrote".into()
    })
}

/// Two receives posted, a "done" SEND, then the server process dies: DISCONNECTED, and our
/// receives come back flushed.
pub(crate) fn peer_killed(o: &Opts, c: &Conn<state::Rts>, step: u32) -> Result {
    let t = timeout(o);
    let role = "client";
    post_recv(c, 10, 3000..3016)?;
    post_recv(c, 11, 3016..3032)?;
    let done = c.mr.sge(0..4);
    post(c, SendWr::send(3, std::slice::from_ref(&done)))?;
    complete(&c.cq, 1, t, "our \"done\" SEND")?;
    println!("step {step}: {role}: 2 receives posted, \"done\" sent; the server dies now");
    let start = Instant::now();
    let ev =
        c.id.expect_event(CmEventType::Disconnected, t)
            .or_fail("waiting for the server to go")?;
    let st = c.qp.state().or_fail("ibv_query_qp")?;
    println!(
        "step {}: {role}: {ev} after {}: the dead process's kernel said goodbye (a DREQ); our QP \
         is still {st}",
        step + 1,
        show::elapsed(start.elapsed())
    );
    c.id.disconnect().or_fail("rdma_disconnect")?;
    drain(role, step + 2, c, 2, t)
}

/// The client side of ucmatose's / rdma_client's exchange: send first, then receive.
pub(crate) fn sendrecv_client(o: &Opts, mut c: Conn<state::Rts>) -> Result {
    let t = timeout(o);
    let role = "client";
    let (n, size) = (o.count as usize, o.size as usize);
    for i in 0..n {
        c.mr.as_mut_slice()[i * size..(i + 1) * size].fill(b'A' + (i % 26) as u8);
    }
    for i in 0..n {
        let s = c.mr.sge(i * size..(i + 1) * size);
        post(&c, SendWr::send(100 + i as u64, std::slice::from_ref(&s)))?;
    }
    let wcs = complete(&c.cq, 2 * n, t, "our SENDs and the server's messages")?;
    let got = wcs.iter().filter(|w| w.wr_id < 100).count();
    println!("step 7: {role}: sent {n} message(s) of {size} bytes, received {got}");
    expect(got == n, || format!("received {got} of {n}"))?;
    c.id.disconnect().or_fail("rdma_disconnect")?;
    let ev =
        c.id.expect_event(CmEventType::Disconnected, t)
            .or_fail("waiting for DISCONNECTED")?;
    println!("step 8: {role}: rdma_disconnect -> {ev}");
    course::done(true, "the messages went both ways");
    Ok(())
}
