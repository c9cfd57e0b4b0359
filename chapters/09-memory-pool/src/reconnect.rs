//! `--case reconnect`: reconnect done right, by hand (chapter 12 shows the rdma_cm variant):
//! the server dies, the client's QP goes to ERR, RESET, a fresh exchange, INIT/RTR/RTS again.

use std::time::{Duration, Instant};

use crate::client::check_table;
use crate::{Args, CONNECT, OP, WORK, block_content, header_of};
use course::RemotePool;
use course::exchange::{Endpoint, Listener};
use course::show;
use course::{Failure, Outcome as Result, Peer, expect, fnv1a64, random_psn};
use lab::{AccessFlags, Error, QpInitAttr, QpState, QueuePair, WcStatus, state};

/// The server role of `--case reconnect`: each server is a process of its own, so the first
/// can be killed (SIGKILL, as a crash would) and a second one started in its place.
pub(crate) fn supervisor() -> Result<bool> {
    use std::os::unix::process::ExitStatusExt;
    for n in 1..=2u32 {
        println!(
            "supervisor: start server {n}, a process of its own{}",
            if n == 1 {
                " (so that it can crash)"
            } else {
                ""
            }
        );
        // stdout is inherited: the harness must see "listening on" while the server runs.
        let status = course::run_copy(
            ["--server-round", &n.to_string()],
            &format!("server {n}"),
            WORK + CONNECT,
        )?;
        match (n, status.signal(), status.code()) {
            (1, Some(9), _) => println!("supervisor: server 1 was killed by SIGKILL (9)"),
            (2, None, Some(0)) => println!("supervisor: server 2 exited with 0"),
            _ => return Err(format!("server {n} ended with {status}").into()),
        }
    }
    course::done(
        true,
        "server 1 crashed, server 2 took over and found the block",
    );
    Ok(true)
}

/// One server process of `--case reconnect`: a pool as in the course run, one client
/// connected by hand. Server 1 kills itself when the client asks; server 2 checks block 0.
pub(crate) fn reconnect_server(args: &Args, n: u32) -> Result<bool> {
    let (blocks, size) = (args.blocks as usize, args.block_size as usize);
    let ctx = course::open_device(None)?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let pd = ctx.alloc_pd()?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mut pool = pd.reg_mr(blocks * size, access)?;
    pool.as_mut_slice().fill(0);
    println!(
        "step 1: server {n}: open the device, register the pool ({blocks} blocks of {size} \
         bytes, one MR): {}",
        show::rkey(pool.rkey())
    );
    let table = course::pool::block_table(&pool, blocks, size);
    let cq = ctx.create_cq(16, None)?;
    let listener = Listener::bind(args.port)?;
    println!(
        "step 2: server {n}: listening on 0.0.0.0:{} for the reconnecting client",
        args.port
    );
    let me = Endpoint {
        name: "pool".into(),
        psn: random_psn(),
        gid: gid.gid.raw(),
        regions: table,
        ..Default::default()
    };
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    let mut peer = course::accept_peer(&listener, qp, &me, "the client", CONNECT)?;
    println!(
        "step 3: server {n}: connected by hand: our {} {}, the client's {} {}",
        show::qpn(peer.qp.qp_num()),
        show::psn(me.psn),
        show::qpn(peer.theirs.qpn),
        show::psn(peer.theirs.psn)
    );
    let line = peer.oob.recv_line(WORK)?;
    if n == 1 {
        expect(line == "crash", || {
            format!("expected the client's \"crash\", got {line:?}")
        })?;
        println!(
            "step 4: server {n}: the client asks for a crash: SIGKILL to this process (its QP, \
             MR and sockets go with it)"
        );
        // SIGKILL, as a crash would: no destructor runs, the kernel cleans up.
        return course::crash();
    }
    println!("step 4: server {n}: the client reported: {line}");
    let got = &pool.as_slice()[..size];
    let ok = got == block_content(0, args.roles.clients, size).as_slice();
    println!(
        "step 5: server {n}: block 0 holds \"{}\" checksum=0x{:016x} {}",
        header_of(got),
        fnv1a64(got),
        if ok { "ok" } else { "MISMATCH" }
    );
    Ok(ok)
}

/// The client of `--case reconnect`: one QP for the whole run, through two servers.
pub(crate) fn reconnect_client(args: &Args, host: &str) -> Result<bool> {
    let size = args.block_size as usize;
    let data = block_content(0, args.roles.clients, size);
    let ctx = course::open_device(None)?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let staging = pd.reg_mr(size, AccessFlags::LOCAL_WRITE)?;
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    let our_qpn = qp.qp_num();
    println!(
        "step 1: open the device; one QP for both connections: {}",
        show::qpn(our_qpn)
    );

    // Steps 2 and 7: the by-hand connection. `qp` is in RESET; the exchange sends our QPN and
    // a fresh PSN, and connect_peer walks RESET -> INIT -> RTR -> RTS toward the server's. Any
    // PSN will do, but a new one for every connection, so that a late packet of the old
    // connection is very unlikely to fall in the new one's window.
    let connect_by_hand = |qp: QueuePair<state::Reset>| -> Result<(Peer, u32)> {
        let mine = Endpoint {
            name: "reconnecting".into(),
            psn: random_psn(),
            gid: gid.gid.raw(),
            ..Default::default()
        };
        let psn = mine.psn;
        let p = course::connect_peer(host, args.port, qp, mine, "the pool server", CONNECT)?;
        check_table(&p.theirs.regions, args)?;
        Ok((p, psn))
    };
    let (peer, psn1) = connect_by_hand(qp)?;
    println!(
        "step 2: connect by hand (the TCP exchange): our {}; the server's {} {}; RESET -> INIT \
         -> RTR -> RTS",
        show::psn(psn1),
        show::qpn(peer.theirs.qpn),
        show::psn(peer.theirs.psn)
    );
    let (server1, server1_psn) = (peer.theirs.qpn, peer.theirs.psn);
    let mut oob = peer.oob;
    let mut pool = RemotePool::new(peer.qp, cq, staging, peer.theirs.regions)?;
    pool.set_timeout(OP);
    pool.write(0, 0, &data)?;
    let back = pool.read_vec(0, 0, size)?;
    expect(back == data, || "block 0 did not read back".into())?;
    println!(
        "step 3: RDMA WRITE of block 0, RDMA READ back: \"{}\" matches",
        header_of(&back)
    );

    // The server dies. Its TCP stream closing is how we know when (a real client would not
    // know, and would learn it from its next completion, as in step 5).
    oob.send_line("crash", OP)?;
    let t = Instant::now();
    match oob.recv_line(OP) {
        Err(e) if !e.is_timeout() => {}
        other => {
            return Err(format!("expected the server's stream to close, got {other:?}").into());
        }
    }
    println!(
        "step 4: we asked the server to crash; its TCP stream closed after {}: the process is gone",
        show::elapsed(t.elapsed())
    );

    println!("step 5: RDMA WRITE of block 0 again, toward a QP that no longer exists");
    let t = Instant::now();
    let mut ok = true;
    // The server's process is gone, but its kernel may not have torn its QP down yet: in the
    // exit path the TCP socket can close before the RDMA device's file, and a WRITE that lands
    // in between is still acknowledged (seen with both roles on one device). So try again,
    // 100 ms apart, until one fails, within 10 s.
    let until = Instant::now() + Duration::from_secs(10);
    let outcome = loop {
        match pool.write(0, 0, &data) {
            Ok(()) if Instant::now() < until => std::thread::sleep(Duration::from_millis(100)),
            other => break other,
        }
    };
    match outcome {
        Err(Error::Completion { wc }) if wc.status == WcStatus::RetryExcErr => {
            println!(
                "  completion status: {} after {}",
                wc.status,
                show::elapsed(t.elapsed())
            );
            println!("  why: {}", wc.status.explanation());
        }
        other => {
            ok = false;
            println!("  UNEXPECTED: {other:?}");
        }
    }
    let (qp, cq, staging) = pool.into_parts();
    let st = course::wait_for_err(&qp, Duration::from_secs(2))?;
    println!("  our QP is now {st}: nothing more can be posted on this connection");
    ok &= st == QpState::Err;

    println!("step 6: back to a usable QP, the only way there is");
    match qp.modify(&lab::QpAttr::new().state(QpState::Init)) {
        Ok(()) => return Err("ibv_modify_qp(ERR -> INIT) was accepted".into()),
        Err(e) => {
            let errno = e.errno();
            println!(
                "  ibv_modify_qp(ERR -> INIT) is refused: {}: not a legal transition",
                errno.map_or(e.report().to_string(), |x| x.to_string())
            );
            ok &= errno == Some(lab::Errno(22)); // EINVAL
        }
    }
    let qp = qp.reset().map_err(|e| Failure(e.to_string()))?;
    println!(
        "  ibv_modify_qp(ERR -> RESET): ok, the QP is {} (its queues emptied, without \
         completions)",
        qp.state()?
    );

    let t = Instant::now();
    let (peer, psn2) = connect_by_hand(qp)?;
    println!(
        "step 7: a fresh TCP exchange with the new server (retried until it listens, up to {} \
         s), after {}",
        CONNECT.as_secs(),
        show::elapsed(t.elapsed())
    );
    println!(
        "  our {} (was {}); the server's {} {} (was {} {})",
        show::psn(psn2),
        show::psn(psn1),
        show::qpn(peer.theirs.qpn),
        show::psn(peer.theirs.psn),
        show::qpn(server1),
        show::psn(server1_psn)
    );
    println!(
        "  RESET -> INIT -> RTR -> RTS again, the same QP: {}",
        show::qpn(peer.qp.qp_num())
    );
    ok &= peer.qp.qp_num() == our_qpn && psn2 != psn1 && peer.theirs.psn != server1_psn;
    let mut oob = peer.oob;
    let mut pool = RemotePool::new(peer.qp, cq, staging, peer.theirs.regions)?;
    pool.set_timeout(OP);
    pool.write(0, 0, &data)?;
    let back = pool.read_vec(0, 0, size)?;
    let same = back == data;
    ok &= same;
    println!(
        "step 8: RDMA WRITE of block 0 to the new pool, READ back: \"{}\" {}",
        header_of(&back),
        if same { "matches" } else { "DIFFERS" }
    );
    oob.send_line("done: block 0 written again after the reconnect", OP)?;
    course::done(
        ok,
        "the server's death was seen, the QP reset and connected again by hand, the work \
         carried on",
    );
    Ok(ok)
}
