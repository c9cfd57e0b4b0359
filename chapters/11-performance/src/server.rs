//! The server role (node a): it answers the client's requests ([`crate::protocol::Request`]),
//! one line each, until the client says `bye`, and restores the netdev's MTU it found.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use course::exchange::{Endpoint, Listener, OobStream};
use course::{OrFail, Outcome as Result, expect};
use lab::{AccessFlags, InitAttr, MemoryRegion, Mtu, RecvWr, RemoteRegion, SendWr, WorkCompletion};

use crate::protocol::{Reply, Request};
use crate::shared::{
    Conn, MtuGuard, Wait, hw_counter, mtu_of, netdev_of, new_qp, node_cpu, rtr, rts, set_mtu,
    softirq_threads, wait_cq, write_pingpong,
};
use crate::{Args, BUF, CONNECT, MAX_MSG, OP, PSN, tools};

pub fn run(args: &Args) -> Result<bool> {
    println!("step 1: open the device, register a {BUF}-byte buffer the client may write and read");
    let ctx = course::open_device(None)?;
    let pd = ctx.alloc_pd()?;
    let mut mr = pd.reg_mr(
        BUF,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let dev = netdev_of(&ctx)?;
    let mtu0 = mtu_of(&dev)?;
    let mut guard = MtuGuard {
        ctx: &ctx,
        dev: dev.clone(),
        restore: mtu0,
        armed: false,
    };
    let listener = Listener::bind(args.port)?;
    let data = TcpListener::bind(("0.0.0.0", args.port + 1))
        .or_fail_with(|| format!("binding the TCP data port {}", args.port + 1))?;
    data.set_nonblocking(true)
        .or_fail("setting the data listener non-blocking")?;
    println!(
        "step 2: listening on 0.0.0.0:{} (requests) and 0.0.0.0:{} (TCP measurements)",
        args.port,
        args.port + 1
    );
    let mut oob = listener.accept(CONNECT).or_fail("waiting for the client")?;
    println!("step 3: serve the client's requests until it says \"bye\"");
    let mut conns: HashMap<u32, Conn> = HashMap::new();
    let mut tool: Option<course::process::Running> = None;
    let mut served: Vec<&'static str> = vec![];
    loop {
        let line = oob
            .recv_line(Duration::from_secs(300))
            .or_fail("waiting for a request")?;
        let req: Request = match line.parse() {
            Ok(r) => r,
            Err(e) => {
                oob.send_line(&Reply::Error(e.clone()).to_string(), OP)?;
                return Err(e.into());
            }
        };
        // Print each kind of request once, in the order they first come (the same every run).
        if !served.contains(&req.kind()) {
            println!("  serving: {}", req.kind());
            served.push(req.kind());
        }
        let reply = |oob: &mut OobStream, r: Reply| oob.send_line(&r.to_string(), OP);
        match req {
            Request::Bye => break,
            Request::Cpu => {
                let c = lab::cpu_time()?;
                let n = node_cpu()?;
                let r = Reply::Cpu {
                    process_ns: c.total().as_nanos() as u64,
                    node_ns: n.as_nanos() as u64,
                };
                reply(&mut oob, r)?;
            }
            Request::Softirqd => reply(&mut oob, Reply::Softirqd(softirq_threads()?))?,
            Request::Clock => {
                let r = Reply::Clock {
                    tsc_hz: lab::perf::tsc_hz(Duration::from_millis(200)).unwrap_or(0.0),
                    cpuinfo_mhz: tools::cpuinfo_mhz().unwrap_or(0.0),
                };
                reply(&mut oob, r)?;
            }
            Request::Qp { id, path_mtu } => {
                let (qp, scq, rcq) = new_qp(&ctx, &pd)?;
                let theirs = oob.recv_msg(OP)?;
                let path = if path_mtu == 0 {
                    None
                } else {
                    Mtu::from_bytes(path_mtu)
                };
                let qp = qp.bring_up(&InitAttr::default(), &rtr(&theirs, path), &rts())?;
                let mine = Endpoint {
                    name: "server".into(),
                    qpn: qp.qp_num(),
                    psn: PSN,
                    gid: gid.gid.raw(),
                    regions: vec![mr.remote()],
                    ..Default::default()
                };
                oob.send_msg(&mine, OP)?;
                conns.insert(
                    id,
                    Conn {
                        qp,
                        scq,
                        rcq,
                        remote: RemoteRegion::default(),
                    },
                );
            }
            Request::DropQps => {
                conns.clear();
                reply(&mut oob, Reply::Ok)?;
            }
            Request::SendEcho { size, iters, wait } => {
                let c = conns.get(&0).ok_or("send-echo before qp 0")?;
                send_echo(c, &mut mr, size, iters, wait, &mut oob)?;
            }
            Request::WritePong {
                size,
                rounds,
                addr,
                rkey,
            } => {
                // The answering side of the WRITE ping-pong: the client's buffer (address and
                // rkey) comes with the request, since this QP's peer sent none.
                let peer = RemoteRegion {
                    addr,
                    len: BUF as u64,
                    rkey,
                };
                let c = conns.get(&0).ok_or("write-pong before qp 0")?;
                // Clear the byte this side spins on before the client may write it.
                mr.write_from(MAX_MSG + size.max(1) - 1, &[0])?;
                reply(&mut oob, Reply::Ready)?;
                write_pingpong(c, &mr, peer, size, rounds, false)?;
                reply(&mut oob, Reply::Done)?;
            }
            Request::TcpEcho { size, iters } => {
                reply(&mut oob, Reply::Ready)?;
                let mut s = accept_data(&data)?;
                let mut buf = vec![0u8; size];
                for _ in 0..iters {
                    s.read_exact(&mut buf).or_fail("TCP echo: reading")?;
                    s.write_all(&buf).or_fail("TCP echo: writing")?;
                }
                reply(&mut oob, Reply::Done)?;
            }
            Request::TcpSink { total } => {
                reply(&mut oob, Reply::Ready)?;
                let mut s = accept_data(&data)?;
                let mut buf = vec![0u8; 64 << 10];
                let mut got = 0u64;
                while got < total {
                    let n = s.read(&mut buf).or_fail("TCP sink: reading")?;
                    expect(n > 0, || {
                        format!("TCP sink: the client closed after {got} bytes")
                    })?;
                    got += n as u64;
                }
                reply(&mut oob, Reply::Done)?;
            }
            Request::Mtu(m) => {
                guard.armed = m != mtu0;
                let active = set_mtu(&ctx, &dev, m)?;
                reply(&mut oob, Reply::ActiveMtu(active.bytes()))?;
            }
            Request::Counters => {
                let r = Reply::Counters {
                    sent: hw_counter(&ctx, "sent_pkts")?,
                    rcvd: hw_counter(&ctx, "rcvd_pkts")?,
                };
                reply(&mut oob, r)?;
            }
            Request::Tool(argv) => {
                tool = Some(start_tool(&argv)?);
                reply(&mut oob, Reply::Ready)?;
            }
            Request::ToolEnd { keep_secs } => {
                // perftest's server half ends with its client; qperf's and sockperf's serve
                // until stopped: give them `keep_secs` seconds, then stop them.
                let code = match tool.take() {
                    Some(mut t) => t.finish(Instant::now() + Duration::from_secs(keep_secs)).0,
                    None => 0,
                };
                reply(&mut oob, Reply::ToolDone(code))?;
            }
        }
    }
    drop(guard);
    let restored = mtu_of(&dev)?;
    println!("step 4: the client is done; {dev}'s MTU is {restored} again (as found)");
    let ok = restored == mtu0;
    course::done(ok, "served every request");
    Ok(ok)
}

/// Starts a reference tool's server half, ready when its port listens (never a sleep); a tool
/// that dies first is an error with its output.
fn start_tool(argv: &[String]) -> Result<course::process::Running> {
    let port = tools::listen_port(&argv[0]).ok_or_else(|| format!("unknown tool {:?}", argv[0]))?;
    expect(!tools::listening(port), || {
        format!("port {port} is busy before starting {}", argv[0])
    })?;
    let mut child = course::process::Running::start(duct::cmd(&argv[0], &argv[1..]))
        .or_fail_with(|| format!("starting {}", argv.join(" ")))?;
    let start = Instant::now();
    while !tools::listening(port) {
        if start.elapsed() > Duration::from_secs(30) {
            let (code, out, err) = child.finish(Instant::now());
            return Err(format!(
                "{} did not listen on port {port} within 30s (exit {code}): {out}{err}",
                argv[0]
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

/// Accepts the client's TCP measurement connection (within [`CONNECT`]).
fn accept_data(l: &TcpListener) -> Result<TcpStream> {
    let start = Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).or_fail("data socket")?;
                s.set_nodelay(true).or_fail("TCP_NODELAY")?;
                s.set_read_timeout(Some(OP))
                    .or_fail("data socket timeout")?;
                s.set_write_timeout(Some(OP))
                    .or_fail("data socket timeout")?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                expect(start.elapsed() < CONNECT, || {
                    "the client did not open the TCP data connection".to_string()
                })?;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(format!("accepting the data connection: {e}").into()),
        }
    }
}

/// The server's half of a SEND/RECV ping-pong: receive `size` bytes, send them back, `iters`
/// times, waiting the way `wait` says (the client waits the same way).
fn send_echo(
    c: &Conn,
    mr: &mut MemoryRegion,
    size: usize,
    iters: u64,
    wait: Wait,
    oob: &mut OobStream,
) -> Result<()> {
    let rsge = [mr.sge(MAX_MSG..MAX_MSG + size.max(1))];
    let ssge = [mr.sge(0..size.max(1))];
    let mut wc = [WorkCompletion::default()];
    // The first receive is posted before "ready": a SEND that finds no receive would wait
    // for the RNR timer.
    c.qp.post_recv_one(RecvWr::new(1, &rsge))?;
    oob.send_line(&Reply::Ready.to_string(), OP)?;
    for i in 0..iters {
        wait_cq(&c.rcq, wait, &mut wc)?;
        if i + 1 < iters {
            c.qp.post_recv_one(RecvWr::new(1, &rsge))?;
        }
        c.qp.post_send_one(SendWr::send(2, &ssge))?;
        wait_cq(&c.scq, wait, &mut wc)?;
    }
    oob.send_line(&Reply::Done.to_string(), OP)?;
    Ok(())
}
