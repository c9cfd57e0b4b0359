//! # Chapter 12: the RDMA connection manager (rdma_cm)
//!
//! Every chapter so far connected its QPs by hand: a TCP exchange of QPN, PSN and GID, then
//! `ibv_modify_qp` three times. Real programs (rping, most libraries) let librdmacm do it: the
//! client names the server by IP address and port, the server listens on a port, and the
//! connection manager resolves the device, the GIDs and the path, exchanges the QPNs and PSNs
//! in IB CM messages (REQ, REP, RTU) and walks the QP through INIT, RTR and RTS. Events on an
//! event channel tell each side how far it got. This chapter prints that event sequence step by
//! step, next to the verbs each step replaces, then queries the QP to show what rdma_cm set.
//!
//! The server's region travels in the private data of its `rdma_accept`: `(addr, len, rkey)`,
//! so the client's RDMA WRITE and READ follow with no side channel at all. The end is a clean
//! disconnect: `rdma_disconnect` (librdmacm moves the QP to ERR, posted work flushes and is
//! drained), DISCONNECTED on both sides, then TIMEWAIT_EXIT.
//!
//! Verbs: `rdma_create_event_channel`, `rdma_create_id`, `rdma_resolve_addr`,
//! `rdma_resolve_route`, `rdma_create_qp`, `rdma_connect`, `rdma_bind_addr`, `rdma_listen`,
//! `rdma_accept`, `rdma_reject`, `rdma_disconnect`, `rdma_get_cm_event`, `rdma_ack_cm_event`;
//! `ibv_query_qp` after ESTABLISHED.
//!
//! Run it: `cargo lab run 12`, or in the lab: `ch12-connection-manager --server` in one shell
//! and `ch12-connection-manager --connect 10.99.0.1` in another. (127.0.0.1 cannot be routed on
//! RoCE: a loopback address given to `--connect` is replaced by the rxe netdev's address, and
//! `--case localhost` shows what happens without that.)
//!
//! `--proto rping` speaks rping's protocol (interoperates with `rping -s` and `rping -c`),
//! `--proto sendrecv` the SEND/RECV exchange of `ucmatose`, `rdma_client` and `rdma_server`.
//! `--case NAME` reproduces a failure: `no-listener`, `reject`, `unreachable`, `localhost`,
//! `peer-killed`, `reconnect`.

use clap::{Parser, ValueEnum};
use lab::cm::{CmEvent, CmEventType, CmId, ConnParam};
use lab::course::{Failure, OrFail, Outcome as Result, expect};
use lab::kernel::RxeChange;
use lab::show;
use lab::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpAttr, QpInfo, QpInitAttr,
    QpState, QpTypeState, QueuePair, RecvWr, SendWr, WcStatus, WorkCompletion, state,
};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// The port: 7471, the port librdmacm's own examples (`rdma_server`, `ucmatose`) use.
const PORT: u16 = 7471;
/// How long address and route resolution may take (`rdma_resolve_addr`'s `timeout_ms`).
const RESOLVE: Duration = Duration::from_secs(2);
/// The server's region.
const REGION_LEN: usize = 4096;
/// Where the client's READ lands in its own region.
const READ_BACK: usize = 2048;
const MSG: &str = "Hello through rdma_cm: the region's address and rkey came in the REP.";
/// The private data of the client's REQ (length-prefixed: a CONNECT_REQUEST always reports
/// MAX_CONNECT_DATA, 56 bytes, the IB CM REQ's 92 less rdma_cm's 36-byte header).
const HELLO: &str = "ch12 client, protocol lab";
/// The private data of the server's reject in `--case reject`.
const REJECT: &str = "server full: try again later";
/// The tag of the region in the server's private data.
const TAG: &[u8; 4] = b"RGN1";

#[derive(Parser, Debug)]
#[command(
    name = "ch12-connection-manager",
    about = "Connect RC QPs with rdma_cm: events, private data, WRITE/READ, disconnect",
    after_help = "Example (in the lab): ch12-connection-manager --server   and   \
                  ch12-connection-manager --connect 10.99.0.1"
)]
struct Opts {
    /// Run the server: listen for rdma_cm connections
    #[arg(long, conflicts_with = "connect", required_unless_present_any = ["connect", "worker"])]
    server: bool,
    /// Run the client: connect to the server at <host> (an IPv4 address)
    #[arg(long, value_name = "host")]
    connect: Option<String>,
    /// rdma_cm port (the TCP port space)
    #[arg(short = 'p', long, value_name = "port", default_value_t = PORT)]
    port: u16,
    /// What to speak once connected
    #[arg(long, value_enum, default_value_t = Proto::Lab)]
    proto: Proto,
    /// Messages (sendrecv) or pings (rping)
    #[arg(short = 'C', long, value_name = "n", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10000))]
    count: u32,
    /// Message size (sendrecv) or ping buffer size (rping), in bytes
    #[arg(short = 'S', long, value_name = "bytes", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(16..=65536))]
    size: u32,
    /// Reproduce a failure (see the README's failure table)
    #[arg(long, value_enum, value_name = "name")]
    case: Option<Case>,
    /// Give up on any wait after this many seconds
    #[arg(long, value_name = "secs", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    timeout: u64,
    /// (internal) a server worker started by the supervisor of --case peer-killed/reconnect
    #[arg(long, hide = true, value_name = "n")]
    worker: Option<u32>,
}

/// What the two ends speak once connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Proto {
    /// The region in the server's private data; the client WRITEs, then READs back
    Lab,
    /// rping's: the client SENDs {addr, rkey, size}, the server READs, WRITEs back
    Rping,
    /// SEND/RECV as rdma_client/rdma_server: the client sends --count messages of --size
    /// bytes, then the server sends as many; the client disconnects
    Sendrecv,
    /// SEND/RECV as ucmatose: the server sends first, then receives, then disconnects
    Ucmatose,
}

/// The failures this chapter reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Case {
    /// Client: connect to a port nobody listens on (REJECTED, status 8)
    NoListener,
    /// Server: rdma_reject with a reason in the private data (REJECTED, status 28)
    Reject,
    /// Client: an address nobody has (ADDR_ERROR within the resolve deadline)
    Unreachable,
    /// Client: 127.0.0.1 (rdma_resolve_route fails: no RDMA device on lo)
    Localhost,
    /// Server: the process is killed mid-session (the client sees DISCONNECTED, flushes)
    PeerKilled,
    /// Server killed, restarted; the client resets, reconnects with fresh PSNs
    Reconnect,
}

fn main() -> ExitCode {
    let o = Opts::parse();
    lab::course::exit_code(match (&o.connect, o.worker) {
        (Some(host), _) => client(&o, host),
        (None, Some(n)) => server(&o, n),
        (None, None) => match o.case {
            Some(Case::PeerKilled | Case::Reconnect) => supervisor(&o),
            _ => server(&o, 0),
        },
    })
}

fn timeout(o: &Opts) -> Duration {
    Duration::from_secs(o.timeout)
}

/// The IPv4 address of this node's rxe netdev, from its RoCE v2 GID (`::ffff:a.b.c.d`).
fn rxe_address() -> Result<Ipv4Addr> {
    let ctx = lab::course::open_device(None).or_fail("cannot open the device")?;
    let gid = ctx
        .roce_v2_ipv4_gid(1)
        .or_fail("cannot find the RoCE v2 GID")?;
    gid.gid
        .to_ipv4()
        .ok_or_else(|| Failure("the RoCE v2 GID is not IPv4-mapped".into()))
}

/// Length-prefixed private data: one length byte, then the bytes.
fn framed(s: &[u8]) -> Vec<u8> {
    let mut v = vec![s.len() as u8];
    v.extend_from_slice(s);
    v
}

fn unframed(d: &[u8]) -> Option<&[u8]> {
    let n = usize::from(*d.first()?);
    d.get(1..1 + n)
}

fn region_data(mr: &MemoryRegion) -> Vec<u8> {
    let mut v = TAG.to_vec();
    v.extend_from_slice(&mr.addr().to_be_bytes());
    v.extend_from_slice(&(REGION_LEN as u32).to_be_bytes());
    v.extend_from_slice(&mr.rkey().to_be_bytes());
    v
}

fn parse_region(d: &[u8]) -> Option<(u64, u32, u32)> {
    if d.len() < 20 || &d[..4] != TAG {
        return None;
    }
    let addr = u64::from_be_bytes(d[4..12].try_into().ok()?);
    let len = u32::from_be_bytes(d[12..16].try_into().ok()?);
    let rkey = u32::from_be_bytes(d[16..20].try_into().ok()?);
    Some((addr, len, rkey))
}

/// The verbs objects of one connection, made on the id's device (`id->verbs`). Field order is
/// drop order: the QP first, the id last.
struct Conn<S: QpTypeState = state::Init> {
    qp: QueuePair<S>,
    cq: CompletionQueue,
    mr: MemoryRegion,
    _pd: ProtectionDomain,
    id: CmId,
}

fn conn_on(id: CmId, len: usize, role: &str, step: u32) -> Result<Conn> {
    let ctx = id.context().or_fail("the id has no device")?;
    let pd = ctx.alloc_pd().or_fail("cannot allocate a PD")?;
    let cq = ctx.create_cq(32, None).or_fail("cannot create a CQ")?;
    let mr = pd
        .reg_mr(len, AccessFlags::ALL_REMOTE)
        .or_fail("cannot register the region")?;
    let qp = id
        .create_qp(&pd, &QpInitAttr::rc(&cq, &cq))
        .or_fail("rdma_create_qp failed")?;
    let st = qp.state().or_fail("ibv_query_qp")?;
    println!(
        "step {step}: {role}: rdma_create_qp on {} port {} -> {}, state {st}",
        ctx.name(),
        id.port_num(),
        show::qpn(qp.qp_num())
    );
    println!(
        "  replaces: ibv_create_qp + ibv_modify_qp(RESET -> INIT: port, pkey index, access flags)"
    );
    Ok(Conn {
        qp,
        cq,
        mr,
        _pd: pd,
        id,
    })
}

fn print_qp(role: &str, step: u32, qp: &QueuePair<state::Rts>) -> Result<QpInfo> {
    let i = qp.query().or_fail("ibv_query_qp")?;
    println!("step {step}: {role}: ibv_query_qp after ESTABLISHED: what rdma_cm set");
    // The server's rq_psn moves as soon as the client's first request arrives, which may be
    // before this query: only the client, which has sent nothing yet, prints it.
    let rq = if role.starts_with("client") {
        format!(", rq_psn {}", show::psn(i.rq_psn))
    } else {
        String::new()
    };
    println!(
        "  state {}, path_mtu {}, dest_qp_num {}, sq_psn {}{rq}",
        i.state,
        i.path_mtu.map_or("?".to_string(), |m| m.to_string()),
        show::qpn(i.dest_qp_num),
        show::psn(i.sq_psn),
    );
    println!(
        "  max_rd_atomic {}, max_dest_rd_atomic {}, timeout {}, retry_cnt {}, rnr_retry {}, \
         min_rnr_timer {}",
        i.max_rd_atomic, i.max_dest_rd_atomic, i.timeout, i.retry_cnt, i.rnr_retry, i.min_rnr_timer
    );
    println!("  access {}", i.access);
    // Two of these come from the kernel's connection manager, and changed in Linux 6.2
    // (lab::kernel::RxeChange): rdma_cm's RoCE packet lifetime, and the FLUSH rights.
    let life = RxeChange::CmaPacketLifetime16;
    println!(
        "  timeout {t} (4.096 us x 2^{t} a try): rdma_cm's RoCE packet lifetime + 1; the \
         lifetime is 16 from Linux {} on, 18 before",
        life.since(),
        t = i.timeout,
    );
    if i.access.contains(AccessFlags::FLUSH_GLOBAL) {
        println!(
            "  IBV_ACCESS_FLUSH_*: the kernel's CM adds them on a device that can execute RDMA \
             FLUSH, as rxe can from Linux {} on",
            RxeChange::CmFlushAccess.since()
        );
    }
    Ok(i)
}

/// After ESTABLISHED: librdmacm moved the QP to RTS; check it, and let the type say so.
fn established(c: Conn) -> Result<Conn<state::Rts>> {
    let st = c.qp.state().or_fail("ibv_query_qp")?;
    expect(st == QpState::Rts, || {
        format!("after ESTABLISHED the QP is in {st}, not RTS")
    })?;
    Ok(Conn {
        qp: c.qp.assume_state::<state::Rts>(),
        cq: c.cq,
        mr: c.mr,
        _pd: c._pd,
        id: c.id,
    })
}

/// Polls exactly `n` completions, every one successful.
fn complete(
    cq: &CompletionQueue,
    n: usize,
    t: Duration,
    what: &str,
) -> Result<Vec<WorkCompletion>> {
    let mut wcs = vec![WorkCompletion::default(); n];
    cq.poll_exact(&mut wcs, t)
        .or_fail_with(|| format!("waiting for {what}"))?;
    for wc in &wcs {
        wc.ok().or_fail_with(|| format!("{what} failed"))?;
    }
    Ok(wcs)
}

/// After `rdma_disconnect`: the QP is in ERR and every posted request comes back flushed.
fn drain<S: QpTypeState>(
    role: &str,
    step: u32,
    c: &Conn<S>,
    posted: usize,
    t: Duration,
) -> Result<()> {
    let st = c.qp.state().or_fail("ibv_query_qp")?;
    println!(
        "step {step}: {role}: rdma_disconnect -> our QP is now {st} (librdmacm's ibv_modify_qp to ERR)"
    );
    let mut wcs = vec![WorkCompletion::default(); posted];
    if posted > 0 {
        c.cq.poll_exact(&mut wcs, t)
            .or_fail("draining the flushed requests")?;
    }
    for wc in &wcs {
        println!("  flushed: wr_id {} {}", wc.wr_id, wc.status);
        expect(wc.status == WcStatus::WrFlushErr, || {
            format!("expected IBV_WC_WR_FLUSH_ERR, got {}", wc.status)
        })?;
    }
    expect(c.cq.poll_one().or_fail("poll")?.is_none(), || {
        "a completion left after the drain".into()
    })?;
    println!("  {posted} posted request(s) drained; the CQ is empty");
    Ok(())
}

fn event_line(role: &str, step: u32, call: &str, ev: &CmEvent) {
    println!("step {step}: {role}: {call} -> {ev}");
}

fn timewait(role: &str, step: u32, id: &CmId, t: Duration) -> Result<()> {
    let start = Instant::now();
    let ev = id
        .expect_event(CmEventType::TimewaitExit, t)
        .or_fail("waiting for TIMEWAIT_EXIT")?;
    println!(
        "step {step}: {role}: {ev} after {}: the QP may now be destroyed or reused",
        show::elapsed(start.elapsed())
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// server

/// `--case peer-killed` and `--case reconnect`: the server runs as workers, each one process,
/// so that one can be killed (SIGKILL, as a crash would) and another started.
fn supervisor(o: &Opts) -> Result {
    let exe = std::env::current_exe().or_fail("cannot find our own executable")?;
    let rounds = if o.case == Some(Case::Reconnect) {
        2
    } else {
        1
    };
    for n in 1..=rounds {
        println!("supervisor: starting server worker {n}");
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        args.extend(["--worker".into(), n.to_string()]);
        let status = Command::new(&exe)
            .args(&args)
            .status()
            .or_fail("cannot start a worker")?;
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

fn server(o: &Opts, worker: u32) -> Result {
    let t = timeout(o);
    let role = if worker > 0 {
        format!("server {worker}")
    } else {
        "server".to_string()
    };
    let role = role.as_str();
    let ip = rxe_address()?;
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
            .reject(&framed(REJECT.as_bytes()))
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

fn accept(role: &str, step: u32, c: &Conn, data: &[u8], t: Duration) -> Result<()> {
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

fn kill_myself(role: &str) -> Result {
    println!("{role}: killing this process with SIGKILL, as a crash would");
    let pid = std::process::id().to_string();
    Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .or_fail("kill(1)")?;
    std::thread::sleep(Duration::from_secs(5));
    Err("SIGKILL did not kill us".into())
}

fn serve_lab(o: &Opts, role: &str, worker: u32, id: CmId) -> Result {
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

/// rping's `struct rping_rdma_info`: buf, rkey, size, in network byte order (16 bytes).
fn rping_info(addr: u64, rkey: u32, size: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&addr.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..].copy_from_slice(&size.to_be_bytes());
    b
}

fn parse_rping_info(b: &[u8]) -> (u64, u32, u32) {
    let addr = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
    let rkey = u32::from_be_bytes(b[8..12].try_into().expect("4 bytes"));
    let size = u32::from_be_bytes(b[12..16].try_into().expect("4 bytes"));
    (addr, rkey, size)
}

/// Waits for one completion; meanwhile a DISCONNECTED on the id ends the wait (`None`).
fn wc_or_disconnect<S: QpTypeState>(c: &Conn<S>, t: Duration) -> Result<Option<WorkCompletion>> {
    let deadline = Instant::now() + t;
    loop {
        if let Some(wc) = c.cq.poll_one().or_fail("ibv_poll_cq")? {
            wc.ok().or_fail("a work request failed")?;
            return Ok(Some(wc));
        }
        match c.id.get_event(Duration::from_millis(1)) {
            Ok(CmEvent::Disconnected) => return Ok(None),
            Ok(ev) => return Err(format!("unexpected event {ev}").into()),
            Err(lab::Error::EventTimeout { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        expect(Instant::now() < deadline, || {
            format!("no completion within {t:?}")
        })?;
    }
}

fn post_recv<S: QpTypeState>(c: &Conn<S>, wr_id: u64, range: std::ops::Range<usize>) -> Result {
    let s = c.mr.sge(range);
    c.qp.post_recv_one(RecvWr::new(wr_id, std::slice::from_ref(&s)))
        .or_fail("ibv_post_recv")
}

fn post(c: &Conn<state::Rts>, wr: SendWr<'_>) -> Result {
    c.qp.post_send_one(wr).or_fail("ibv_post_send")
}

/// rping's server: for each ping, the client's SEND of {addr, rkey, size} of its start buffer;
/// we READ it, SEND a go-ahead; its SEND of {addr, rkey, size} of its rdma buffer; we WRITE
/// back, SEND a go-ahead. The client disconnects after its last ping.
fn serve_rping(o: &Opts, role: &str, id: CmId) -> Result {
    let t = timeout(o);
    let size = o.size as usize;
    // Our region: [0..16) the receive buffer, [16..32) the go-ahead, [64..) the data.
    let c = conn_on(id, 64 + size, role, 3)?;
    post_recv(&c, 1, 0..16)?;
    accept(role, 4, &c, &[], t)?;
    let c = established(c)?;
    print_qp(role, 6, &c.qp)?;
    let mut pings = 0;
    // The client's start buffer, or its disconnect after the last ping.
    while wc_or_disconnect(&c, t)?.is_some() {
        let (addr, rkey, len) = parse_rping_info(&c.mr.as_slice()[..16]);
        expect(len as usize <= size, || {
            format!("the client's buffer ({len} bytes) is larger than ours (-S {size})")
        })?;
        let data = c.mr.sge(64..64 + len as usize);
        post(&c, SendWr::read(2, std::slice::from_ref(&data), addr, rkey))?;
        complete(&c.cq, 1, t, "the RDMA READ")?;
        let bytes = &c.mr.as_slice()[64..64 + len as usize];
        let text = bytes.split(|b| *b == 0).next().unwrap_or(&[]);
        let n = text.len() + 1;
        println!(
            "{role}: ping {pings}: RDMA READ of the client's buffer: {:?}",
            String::from_utf8_lossy(text)
        );
        post_recv(&c, 1, 0..16)?;
        let go = c.mr.sge(16..32);
        post(&c, SendWr::send(3, std::slice::from_ref(&go)))?;
        complete(&c.cq, 1, t, "the go-ahead SEND")?;
        expect(wc_or_disconnect(&c, t)?.is_some(), || {
            "the client left in the middle of a ping".into()
        })?;
        let (addr, rkey, _) = parse_rping_info(&c.mr.as_slice()[..16]);
        let data = c.mr.sge(64..64 + n);
        post(
            &c,
            SendWr::write(4, std::slice::from_ref(&data), addr, rkey),
        )?;
        complete(&c.cq, 1, t, "the RDMA WRITE")?;
        println!("{role}: ping {pings}: RDMA WRITE of {n} bytes back into the client's buffer");
        post_recv(&c, 1, 0..16)?;
        post(&c, SendWr::send(3, std::slice::from_ref(&go)))?;
        complete(&c.cq, 1, t, "the go-ahead SEND")?;
        pings += 1;
    }
    println!("step 7: {role}: RDMA_CM_EVENT_DISCONNECTED (10) after {pings} ping(s)");
    c.id.disconnect().or_fail("rdma_disconnect")?;
    drain(role, 8, &c, 1, t)?;
    expect(pings > 0, || "no ping arrived".into())?;
    lab::course::done(true, "the server side behaved as expected");
    Ok(())
}

fn receive_all(role: &str, step: u32, c: &Conn<state::Rts>, n: usize, t: Duration) -> Result {
    let wcs = complete(&c.cq, n, t, "the client's messages")?;
    let bytes: u32 = wcs.iter().map(|w| w.byte_len).sum();
    println!("step {step}: {role}: received {n} message(s), {bytes} bytes");
    Ok(())
}

/// The SEND/RECV exchange of rdma_client (`--proto sendrecv`: the client sends first, then
/// we answer, the client disconnects) and of ucmatose (`--proto ucmatose`: we send first, then
/// receive, then disconnect).
fn serve_sendrecv(o: &Opts, role: &str, id: CmId) -> Result {
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

// ---------------------------------------------------------------------------------------------
// client

/// The server's region, from the private data of its accept.
type Region = (u64, u32, u32);

fn client(o: &Opts, host: &str) -> Result {
    let given: IpAddr = host
        .parse()
        .map_err(|_| Failure(format!("{host:?} is not an IP address")))?;
    let ip = match o.case {
        Some(Case::Localhost) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(Case::Unreachable) => {
            let [a, b, c, _] = rxe_address()?.octets();
            IpAddr::V4(Ipv4Addr::new(a, b, c, 77))
        }
        // Printed the same either way, so the transcript is the same on every provider (the
        // native provider's pair hands the client 127.0.0.1: both nodes are one device).
        _ if given.is_loopback() => IpAddr::V4(rxe_address()?),
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
fn connect(o: &Opts, role: &str, dst: SocketAddr) -> Result<Option<(Conn, Option<Region>)>> {
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
    let hello = framed(HELLO.as_bytes());
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
            lab::course::done(true, "the connection was refused exactly as expected");
            Ok(None)
        }
        other => Err(format!("rdma_connect: {other}{}", other.hint()).into()),
    }
}

/// The lab protocol: WRITE into the server's region, READ it back; then, by case, a clean
/// disconnect, or a "done" SEND to a server that dies.
fn lab_session(o: &Opts, c: &mut Conn<state::Rts>, region: Region, step: u32) -> Result {
    let t = timeout(o);
    let role = "client";
    write_read(role, step, c, region, t)?;
    if o.case == Some(Case::PeerKilled) {
        return peer_killed(o, c, step + 1).map(|_| {
            lab::course::done(true, "the peer's death was seen and our work flushed");
        });
    }
    c.id.disconnect().or_fail("rdma_disconnect")?;
    drain(role, step + 1, c, 0, t)?;
    let ev =
        c.id.expect_event(CmEventType::Disconnected, t)
            .or_fail("waiting for DISCONNECTED")?;
    println!("step {}: {role}: rdma_get_cm_event -> {ev}", step + 2);
    timewait(role, step + 3, &c.id, t)?;
    lab::course::done(
        true,
        "connected, wrote and read through rdma_cm, and disconnected cleanly",
    );
    Ok(())
}

fn write_read(
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
fn peer_killed(o: &Opts, c: &Conn<state::Rts>, step: u32) -> Result {
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

fn unreachable_case(dst: SocketAddr) -> Result {
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
    println!("  hint: {}", ev.hint().text().unwrap_or("none"));
    expect(
        matches!(ev, CmEvent::AddrError { .. } | CmEvent::Unreachable { .. }),
        || format!("expected ADDR_ERROR or UNREACHABLE, got {ev}"),
    )?;
    expect(took <= deadline, || {
        format!("took {took:?}, beyond the deadline")
    })?;
    lab::course::done(true, "the address error came within the deadline");
    Ok(())
}

fn localhost_case(dst: SocketAddr) -> Result {
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
            println!("step 2: {role}: {e}");
            expect(e.errno() == Some(lab::Errno(19)), || {
                format!("expected ENODEV, got {e}")
            })?;
        }
    }
    lab::course::done(true, "127.0.0.1 is not routable on RoCE, as expected");
    Ok(())
}

/// A peer that really dies (server worker 1, SIGKILL), then comes back (worker 2).
fn reconnect_case(o: &Opts, dst: SocketAddr) -> Result {
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
            e.errno().map_or(e.to_string(), |x| x.to_string())
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
    lab::course::done(true, "reset, reconnected through rdma_cm and carried on");
    Ok(())
}

/// One quiet connection attempt (the reconnect loop).
fn try_connect(dst: SocketAddr, t: Duration) -> Result<(Conn, Option<Region>)> {
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
    id.connect(&ConnParam::with_data(&framed(HELLO.as_bytes())))
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

/// rping's client: for each ping, fill the start buffer with rping's pattern, SEND its
/// {addr, rkey, size}, wait for the go-ahead; SEND the rdma buffer's, wait; compare.
fn rping_client(o: &Opts, mut c: Conn<state::Rts>) -> Result {
    let t = timeout(o);
    let role = "client";
    let size = o.size as usize;
    // Our region: [0..16) receive, [16..32) our SEND, [64..64+size) start, then rdma buffer.
    let (start_off, rdma_off) = (64, 64 + size);
    let mut first = 65u8;
    for ping in 0..o.count {
        let buf = &mut c.mr.as_mut_slice()[start_off..start_off + size];
        let head = format!("rdma-ping-{ping}: ");
        buf[..head.len()].copy_from_slice(head.as_bytes());
        let mut ch = first;
        for b in &mut buf[head.len()..] {
            *b = ch;
            ch = if ch >= 122 { 65 } else { ch + 1 };
        }
        buf[size - 1] = 0;
        first = if first >= 122 { 65 } else { first + 1 };
        c.mr.as_mut_slice()[rdma_off..rdma_off + size].fill(0);
        for (off, what) in [(start_off, "start"), (rdma_off, "rdma")] {
            let info = rping_info(c.mr.addr() + off as u64, c.mr.rkey(), size as u32);
            c.mr.as_mut_slice()[16..32].copy_from_slice(&info);
            let s = c.mr.sge(16..32);
            post(&c, SendWr::send(2, std::slice::from_ref(&s)))?;
            let wcs = complete(
                &c.cq,
                2,
                t,
                &format!("the SEND of our {what} buffer and the go-ahead"),
            )?;
            let recv = wcs
                .iter()
                .find(|w| w.wr_id == 1)
                .ok_or_else(|| Failure("no go-ahead".into()))?;
            expect(recv.byte_len == 16, || {
                format!("a go-ahead of {} bytes, rping sends 16", recv.byte_len)
            })?;
            post_recv(&c, 1, 0..16)?;
        }
        let a = &c.mr.as_slice()[start_off..start_off + size];
        let b = &c.mr.as_slice()[rdma_off..rdma_off + size];
        expect(a == b, || "the server wrote back something else".into())?;
        println!(
            "{role}: ping {ping}: {:?} came back",
            String::from_utf8_lossy(&a[..size - 1])
        );
    }
    c.id.disconnect().or_fail("rdma_disconnect")?;
    drain(role, 7, &c, 1, t)?;
    lab::course::done(true, "every ping came back");
    Ok(())
}

/// The client side of ucmatose's / rdma_client's exchange: send first, then receive.
fn sendrecv_client(o: &Opts, mut c: Conn<state::Rts>) -> Result {
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
    lab::course::done(true, "the messages went both ways");
    Ok(())
}
