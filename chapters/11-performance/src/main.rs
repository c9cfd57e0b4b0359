//! # Chapter 11: performance, measured honestly
//!
//! Every earlier chapter teaches a verb; this one measures what the verbs cost on the lab's
//! own wire, and compares the figures with the reference tools (qperf, sockperf, perftest)
//! run in the same lab, in the same run. The tables the tutorials copy come from hardware
//! RDMA NICs; on SoftRoCE (rxe) the transport is software in the kernel, so several pieces
//! of their advice do not carry over, and one or two turn upside down. The chapter says
//! which, with the numbers.
//!
//! What it teaches, one section each:
//! 1. TCP (`std::net`, `TCP_NODELAY`) against RC SEND/RECV, RDMA WRITE and RDMA READ on the
//!    same wire, 8 B to 1 MiB, latency and bandwidth, next to the reference tools; and a WRITE
//!    ping-pong measured the way perftest's `ib_write_lat` measures it (both sides spin on the
//!    last byte of their buffer), which is what its figure is compared with;
//! 2. batching: a chain of N work requests in one `ibv_post_send` against N calls (rxe rings
//!    its doorbell with one `write(2)` per call: counted), selective signaling (CQEs polled),
//!    inline data against an SGE;
//! 3. waiting: busy polling against completion events against a `usleep(10)` poll loop;
//! 4. memory: the packets of one 1 MiB WRITE (path MTU, not SGE count, decides them, counted
//!    by rxe's `hw_counters/sent_pkts`), path MTU 1024 against 4096 on MTU-9000 netdevs,
//!    64-byte alignment and huge pages;
//! 5. affinity: one QP and CQ per thread, with and without `sched_setaffinity`;
//! 6. the tutorials' table, corrected with this run's figures;
//! 7. with `--plots DIR`, SVG plots of latency against size and throughput against batch size.
//!
//! Verbs: `ibv_post_send` with chains, `IBV_SEND_SIGNALED` (selective signaling),
//! `IBV_SEND_INLINE`, several SGEs per WR, `IBV_WR_RDMA_READ`; `ibv_req_notify_cq` and
//! `ibv_get_cq_event` against busy `ibv_poll_cq`; the path MTU of `ibv_modify_qp` (RTR).
//!
//! Run it (pair topology: node a serves, node b measures and drives both):
//!
//! ```text
//! cargo lab run 11                        # tested as: cargo lab run 11 -- --quick
//! cargo lab run 11 -- --quick              # a few iterations and sizes (what the test runs)
//! cargo lab run 11 -- --plots chapters/11-performance/plots   # tested as: cargo lab run 11 -- --quick --plots chapters/11-performance/plots
//! ```
//!
//! Roles: `--server` (node a) and `--connect HOST` (node b). The client drives: over the TCP
//! exchange it asks the server for each step (echo N messages, bring up a QP, start a tool's
//! server half, set the netdev's MTU, report its CPU time), so one program on each node runs
//! the whole chapter. Both roles need root in the lab (they change the netdev's MTU, reserve
//! huge pages and attach strace), which the lab's guests give them.
//!
//! The code is longer than most chapters and split in five files: this one (the flags, the
//! connection and the server role), `client.rs` (the sections, in order), `tools.rs` (the
//! reference tools' command lines and output parsers), `stats.rs` (median, p99, stdev) and
//! `plots.rs` (the SVG plots).

mod client;
mod plots;
mod stats;
mod tools;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use lab::course::{OrFail, Outcome as Result, expect};
use lab::exchange::{Endpoint, LAB_PORT, Listener, OobStream};
use lab::{
    AccessFlags, CompletionQueue, Context, Gid, InitAttr, MemoryRegion, Mtu, ProtectionDomain,
    QpInitAttr, QueuePair, RecvWr, RemoteRegion, RtrAttr, RtsAttr, SendWr, WorkCompletion,
};

/// Deadlines: the lab runs under emulation (TCG), so be generous, but never wait forever.
pub const CONNECT: Duration = Duration::from_secs(60);
/// One operation or one exchange line.
pub const OP: Duration = Duration::from_secs(30);
/// A reference tool's run.
pub const TOOL: Duration = Duration::from_secs(90);
/// The biggest message (1 MiB) and the size of each side's registered buffer (room for
/// alignment offsets past one message).
pub const MAX_MSG: usize = 1 << 20;
pub const BUF: usize = 2 * MAX_MSG;
/// Capacities of every QP: deep enough for the batching section's chains.
pub const SQ_DEPTH: u32 = 256;
pub const RQ_DEPTH: u32 = 16;
pub const MAX_SGE: u32 = 16;
pub const MAX_INLINE: u32 = 64;
const PSN: u32 = 0x000100;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "ch11-performance",
    about = "Chapter 11: what the verbs cost on the lab's wire, TCP against RDMA, batching, \
             waiting, memory and affinity, next to qperf, sockperf and perftest",
    after_help = "Both roles take the same flags (cargo lab run passes them to both).\n\
                  Examples:\n  ch11-performance --server\n  \
                  ch11-performance --connect 10.77.0.1 --quick"
)]
pub struct Args {
    /// Serve (node a): answer the client's requests.
    #[arg(long, conflicts_with = "connect")]
    pub server: bool,
    /// Measure against the server at HOST (node b).
    #[arg(long, value_name = "HOST", required_unless_present = "server")]
    pub connect: Option<String>,
    /// A short run: few iterations, few sizes (the end-to-end test's form).
    #[arg(long)]
    pub quick: bool,
    /// Also write the SVG plots into DIR (created if missing), on the client's node.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<std::path::PathBuf>,
    /// TCP port of the exchange; the TCP measurements use the next one.
    #[arg(long, default_value_t = LAB_PORT)]
    pub port: u16,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.port == u16::MAX {
        eprintln!(
            "error: --port {} leaves no room for the data port\n\nFor more information, try '--help'.",
            args.port
        );
        return ExitCode::from(2);
    }
    let result = match &args.connect {
        None => server(&args),
        Some(host) => client::run(&args, host),
    };
    lab::course::exit_code(result.map(|ok| {
        if !ok {
            println!("FAILED: see above");
        }
    }))
}

// ---------------------------------------------------------------------------------------------
// What both roles share: a connected QP with its own send and receive CQs

/// How a program waits for its completions (section 3 compares them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `ibv_poll_cq` in a loop: the lowest latency on hardware, one core burnt.
    Busy,
    /// Arm the CQ (`ibv_req_notify_cq`), sleep in `ibv_get_cq_event`, ack, poll.
    Events,
    /// `ibv_poll_cq`, and `usleep(10)` between empty polls: the tutorials' compromise.
    Sleep10,
}

impl Wait {
    pub const ALL: [Wait; 3] = [Wait::Busy, Wait::Events, Wait::Sleep10];
    pub fn name(self) -> &'static str {
        match self {
            Wait::Busy => "busy-poll",
            Wait::Events => "events",
            Wait::Sleep10 => "usleep(10)",
        }
    }
    fn parse(s: &str) -> Option<Wait> {
        Wait::ALL.into_iter().find(|w| w.name() == s)
    }
}

/// One end of an RC connection: the QP, a CQ for its sends and one for its receives (each
/// with its own completion channel, so either can be waited on with events), and the peer's
/// buffer.
#[derive(Debug)]
pub struct Conn {
    pub qp: QueuePair,
    pub scq: CompletionQueue,
    pub rcq: CompletionQueue,
    pub remote: RemoteRegion,
}

/// Creates a QP with the chapter's capacities and its two CQs.
fn new_qp(
    ctx: &Context,
    pd: &ProtectionDomain,
) -> Result<(
    QueuePair<lab::state::Reset>,
    CompletionQueue,
    CompletionQueue,
)> {
    let scq = ctx.create_cq(SQ_DEPTH as i32, Some(&ctx.create_comp_channel()?))?;
    let rcq = ctx.create_cq(RQ_DEPTH as i32, Some(&ctx.create_comp_channel()?))?;
    let qp = pd.create_qp(
        &QpInitAttr::rc(&scq, &rcq)
            .max_send_wr(SQ_DEPTH)
            .max_recv_wr(RQ_DEPTH)
            .max_send_sge(MAX_SGE)
            .max_inline_data(MAX_INLINE),
    )?;
    Ok((qp, scq, rcq))
}

/// RTS with a longer ACK timeout than lab's default (16: 4.096 us x 2^16 = 268 ms per try,
/// six tries): on a loaded host a one-vCPU guest can leave a packet unprocessed for longer
/// than the default's 67 ms x 6, and the sender would give up with
/// `IBV_WC_RETRY_EXC_ERR (12)`.
fn rts() -> RtsAttr {
    RtsAttr::new(PSN).timeout(16)
}

fn rtr(theirs: &Endpoint, mtu: Option<Mtu>) -> RtrAttr {
    let r = RtrAttr::new(theirs.qpn, theirs.psn, Gid(theirs.gid));
    match mtu {
        Some(m) => r.path_mtu(m),
        None => r,
    }
}

/// The client's half of a new connection: our endpoint out, the server's in, then RTS.
/// `path_mtu` None = the port's active MTU.
pub fn connect_qp(
    ctx: &Context,
    pd: &ProtectionDomain,
    oob: &mut OobStream,
    id: u32,
    path_mtu: Option<Mtu>,
) -> Result<Conn> {
    let (qp, scq, rcq) = new_qp(ctx, pd)?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    oob.send_line(
        &format!("qp {id} {}", path_mtu.map_or(0, |m| m.bytes())),
        OP,
    )?;
    let mine = Endpoint {
        name: format!("client-{id}"),
        qpn: qp.qp_num(),
        psn: PSN,
        gid: gid.gid.raw(),
        ..Default::default()
    };
    oob.send_msg(&mine, OP)?;
    let theirs = oob.recv_msg(OP)?;
    let qp = qp.bring_up(&InitAttr::default(), &rtr(&theirs, path_mtu), &rts())?;
    let remote = *theirs.regions.first().ok_or("the server sent no region")?;
    Ok(Conn {
        qp,
        scq,
        rcq,
        remote,
    })
}

/// Waits for `out.len()` completions on `cq` the way `wait` says, and checks that each one
/// succeeded. Returns how many times the thread went to sleep (events) or napped (usleep).
pub fn wait_cq(cq: &CompletionQueue, wait: Wait, out: &mut [WorkCompletion]) -> Result<u64> {
    let start = Instant::now();
    let mut got = 0;
    let mut sleeps = 0;
    loop {
        got += cq.poll_into(&mut out[got..])?;
        if got == out.len() {
            break;
        }
        if start.elapsed() > OP {
            return Err(format!(
                "waited {OP:?} for {} completions ({}), got {got}",
                out.len(),
                wait.name()
            )
            .into());
        }
        match wait {
            Wait::Busy => std::hint::spin_loop(),
            Wait::Sleep10 => {
                std::thread::sleep(Duration::from_micros(10));
                sleeps += 1;
            }
            Wait::Events => {
                // Arm, then poll once more: a completion that arrived before the arm raises
                // no event, and waiting for one would sleep until the deadline.
                cq.req_notify(false)?;
                got += cq.poll_into(&mut out[got..])?;
                if got == out.len() {
                    break;
                }
                cq.get_event(OP)?.ack();
                sleeps += 1;
            }
        }
    }
    for wc in out.iter() {
        wc.ok()?;
    }
    Ok(sleeps)
}

/// The kernel's account of this node's CPU time, all CPUs: everything but idle and iowait in
/// `/proc/stat` (in USER_HZ ticks, 100 per second on x86-64 Linux). It includes what no
/// process's `getrusage` shows: softirq time, where rxe's transport does much of its work.
pub fn node_cpu() -> Result<Duration> {
    let s = std::fs::read_to_string("/proc/stat").or_fail("reading /proc/stat")?;
    let line = s.lines().next().unwrap_or_default();
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    expect(v.len() >= 8, || {
        format!("unexpected /proc/stat line: {line}")
    })?;
    let busy: u64 = v.iter().take(8).sum::<u64>() - v[3] - v[4];
    Ok(Duration::from_millis(busy * 10))
}

/// The kernel's softirq threads on this node (`ksoftirqd/N`, one per CPU), from
/// `/proc/<pid>/schedstat`: the time they ran, the time they waited runnable for a CPU (ns),
/// and how many times they were scheduled. Softirqs (where rxe receives packets and runs its
/// responder and completer) normally run on the way out of an interrupt, charged to nobody;
/// when they pile up, the kernel hands them to these threads, which then take turns on the
/// CPU with the programs that want it.
pub fn softirq_threads() -> Result<[u64; 3]> {
    let mut total = [0; 3];
    for e in std::fs::read_dir("/proc").or_fail("reading /proc")? {
        let Ok(e) = e else { continue };
        let dir = e.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("ksoftirqd/") {
            continue;
        }
        let st = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
        let v: Vec<u64> = st
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [run, wait, slices] = v[..] {
            total = [total[0] + run, total[1] + wait, total[2] + slices];
        }
    }
    Ok(total)
}

/// The rxe device's netdev (the interface its RoCE v2 GID lives on), from sysfs.
pub fn netdev_of(ctx: &Context) -> Result<String> {
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let p = format!(
        "/sys/class/infiniband/{}/ports/1/gid_attrs/ndevs/{}",
        ctx.name(),
        gid.index
    );
    Ok(std::fs::read_to_string(&p)
        .or_fail_with(|| format!("reading {p}"))?
        .trim()
        .to_string())
}

/// Sets `dev`'s MTU with `ip link set` (root in the lab) and waits until the rxe port's
/// active MTU follows.
pub fn set_mtu(ctx: &Context, dev: &str, mtu: u32) -> Result<Mtu> {
    let out = Command::new("ip")
        .args(["link", "set", "dev", dev, "mtu", &mtu.to_string()])
        .stdin(Stdio::null())
        .output()
        .or_fail("running `ip link set` (is iproute2 installed?)")?;
    expect(out.status.success(), || {
        format!(
            "`ip link set dev {dev} mtu {mtu}` failed ({}): {}; the chapter needs root in the \
             lab to change the MTU",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let want = if mtu >= 4096 + 100 { 4096 } else { 1024 };
    let start = Instant::now();
    loop {
        let active = ctx.query_port(1)?.active_mtu;
        if active.bytes() == want {
            return Ok(active);
        }
        expect(start.elapsed() < Duration::from_secs(10), || {
            format!(
                "port 1's active MTU is {} after setting {dev} to {mtu}",
                active.bytes()
            )
        })?;
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Restores a netdev's MTU when dropped (also when a step fails half-way).
#[derive(Debug)]
pub struct MtuGuard<'a> {
    pub ctx: &'a Context,
    pub dev: String,
    pub restore: u32,
    pub armed: bool,
}

impl Drop for MtuGuard<'_> {
    fn drop(&mut self) {
        if self.armed
            && let Err(e) = set_mtu(self.ctx, &self.dev, self.restore)
        {
            eprintln!(
                "warning: could not restore {}'s MTU to {}: {e}",
                self.dev, self.restore
            );
        }
    }
}

/// A netdev's MTU now (sysfs).
pub fn mtu_of(dev: &str) -> Result<u32> {
    let p = format!("/sys/class/net/{dev}/mtu");
    std::fs::read_to_string(&p)
        .or_fail_with(|| format!("reading {p}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{p}: {e}").into())
}

// ---------------------------------------------------------------------------------------------
// Server (node a): answers the client's requests, one line each

fn server(args: &Args) -> Result<bool> {
    println!("step 1: open the device, register a {BUF}-byte buffer the client may write and read");
    let ctx = lab::course::open_device(None)?;
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
    let mut tool: Option<lab::process::Running> = None;
    let mut served: Vec<String> = vec![];
    loop {
        let line = oob
            .recv_line(Duration::from_secs(300))
            .or_fail("waiting for a request")?;
        let w: Vec<&str> = line.split_whitespace().collect();
        // Print each kind of request once, in the order they first come (the same every run).
        let kind = w.first().copied().unwrap_or("").to_string();
        if !served.contains(&kind) {
            println!("  serving: {kind}");
            served.push(kind);
        }
        let num = |i: usize| -> Result<u64> {
            w.get(i)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("bad request {line:?}").into())
        };
        match w.as_slice() {
            ["bye"] => break,
            ["cpu"] => {
                let c = lab::cpu_time()?;
                let n = node_cpu()?;
                oob.send_line(
                    &format!("cpu {} {}", c.total().as_nanos(), n.as_nanos()),
                    OP,
                )?;
            }
            ["softirqd"] => {
                let [run, wait, slices] = softirq_threads()?;
                oob.send_line(&format!("softirqd {run} {wait} {slices}"), OP)?;
            }
            ["clock"] => {
                let hz = lab::perf::tsc_hz(Duration::from_millis(200)).unwrap_or(0.0);
                let mhz = tools::cpuinfo_mhz().unwrap_or(0.0);
                oob.send_line(&format!("clock {hz} {mhz}"), OP)?;
            }
            ["qp", _, _] => {
                let (id, mtu) = (num(1)? as u32, num(2)? as u32);
                let (qp, scq, rcq) = new_qp(&ctx, &pd)?;
                let theirs = oob.recv_msg(OP)?;
                let path = if mtu == 0 { None } else { Mtu::from_bytes(mtu) };
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
            ["drop-qps"] => {
                conns.clear();
                oob.send_line("ok", OP)?;
            }
            ["send-echo", _, _, _] => {
                let (size, iters) = (num(1)? as usize, num(2)?);
                let wait = Wait::parse(w[3]).ok_or_else(|| format!("bad wait in {line:?}"))?;
                let c = conns.get(&0).ok_or("send-echo before qp 0")?;
                send_echo(c, &mut mr, size, iters, wait, &mut oob)?;
            }
            ["write-pong", _, _, _, _] => {
                // The answering side of the WRITE ping-pong: the client's buffer (address and
                // rkey) comes with the request, since this QP's peer sent none.
                let (size, rounds) = (num(1)? as usize, num(2)?);
                let peer = RemoteRegion {
                    addr: num(3)?,
                    len: BUF as u64,
                    rkey: num(4)? as u32,
                };
                let c = conns.get(&0).ok_or("write-pong before qp 0")?;
                // Clear the byte this side spins on before the client may write it.
                mr.write_from(MAX_MSG + size.max(1) - 1, &[0])?;
                oob.send_line("ready", OP)?;
                write_pingpong(c, &mr, peer, size, rounds, false)?;
                oob.send_line("done", OP)?;
            }
            ["tcp-echo", _, _] => {
                let (size, iters) = (num(1)? as usize, num(2)?);
                oob.send_line("ready", OP)?;
                let mut s = accept_data(&data)?;
                let mut buf = vec![0u8; size];
                for _ in 0..iters {
                    s.read_exact(&mut buf).or_fail("TCP echo: reading")?;
                    s.write_all(&buf).or_fail("TCP echo: writing")?;
                }
                oob.send_line("done", OP)?;
            }
            ["tcp-sink", _] => {
                let total = num(1)?;
                oob.send_line("ready", OP)?;
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
                oob.send_line("done", OP)?;
            }
            ["mtu", _] => {
                let m = num(1)? as u32;
                guard.armed = m != mtu0;
                let active = set_mtu(&ctx, &dev, m)?;
                oob.send_line(&format!("ok {}", active.bytes()), OP)?;
            }
            ["counters"] => {
                let sent = client::hw_counter(&ctx, "sent_pkts")?;
                let rcvd = client::hw_counter(&ctx, "rcvd_pkts")?;
                oob.send_line(&format!("counters {sent} {rcvd}"), OP)?;
            }
            ["tool", argv @ ..] => {
                let port = tools::listen_port(argv[0])
                    .ok_or_else(|| format!("unknown tool {:?}", argv[0]))?;
                expect(!tools::listening(port), || {
                    format!("port {port} is busy before starting {}", argv[0])
                })?;
                let mut cmd = Command::new(argv[0]);
                cmd.args(&argv[1..])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                let mut child = lab::process::Running::spawn(cmd)
                    .or_fail_with(|| format!("starting {}", argv.join(" ")))?;
                // Ready when its port listens (never a sleep); a tool that dies first is an
                // error with its output.
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
                tool = Some(child);
                oob.send_line("ready", OP)?;
            }
            ["tool-end", keep] => {
                // perftest's server half ends with its client; qperf's and sockperf's serve
                // until stopped: give them `keep` seconds, then stop them.
                let keep = keep.parse::<u64>().unwrap_or(0);
                let code = match tool.take() {
                    Some(mut t) => t.finish(Instant::now() + Duration::from_secs(keep)).0,
                    None => 0,
                };
                oob.send_line(&format!("done {code}"), OP)?;
            }
            _ => {
                oob.send_line(&format!("error unknown request {line:?}"), OP)?;
                return Err(format!("unknown request {line:?}").into());
            }
        }
    }
    drop(guard);
    let restored = mtu_of(&dev)?;
    println!("step 4: the client is done; {dev}'s MTU is {restored} again (as found)");
    let ok = restored == mtu0;
    lab::course::done(ok, "served every request");
    Ok(ok)
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
    oob.send_line("ready", OP)?;
    for i in 0..iters {
        wait_cq(&c.rcq, wait, &mut wc)?;
        if i + 1 < iters {
            c.qp.post_recv_one(RecvWr::new(1, &rsge))?;
        }
        c.qp.post_send_one(SendWr::send(2, &ssge))?;
        wait_cq(&c.scq, wait, &mut wc)?;
    }
    oob.send_line("done", OP)?;
    Ok(())
}

/// One side of an RDMA WRITE ping-pong, measured the way perftest's `ib_write_lat` measures
/// it. Each side owns a buffer; the peer WRITEs `size` bytes into it at offset [`MAX_MSG`],
/// and this side spins on the *last* byte of those bytes (rxe, like a NIC, places a message's
/// packets in order, so when the last byte has changed the whole message has landed). There
/// is no completion on the target of a WRITE: the spin is the only way it learns.
///
/// Round `i` (1, 2, ...): the side that `starts` puts `i` in the last byte of its outgoing
/// bytes, posts the WRITE (signaled), busy-polls its send CQ for the WRITE's completion, then
/// spins until its own buffer's last byte is `i` (the peer's reply). The other side does the
/// same in the other order: spin for `i`, then write `i` back. So one round is one round trip;
/// the starter returns each round's time (the other side an empty list).
///
/// The spin is a plain loop on a volatile read, like perftest's `while (*poll_buf != rcnt)`;
/// it looks at the clock every [`SPIN_CHECK`] reads only, so that the deadline ([`OP`]) does
/// not make it a different loop from perftest's.
pub fn write_pingpong(
    c: &Conn,
    mr: &MemoryRegion,
    peer: RemoteRegion,
    size: usize,
    rounds: u64,
    starts: bool,
) -> Result<Vec<Duration>> {
    let size = size.max(1);
    let sge = [mr.sge(0..size)];
    let post_byte = size - 1;
    let poll_byte = MAX_MSG + size - 1;
    let mut wc = [WorkCompletion::default()];
    let mut rounds_ns = Vec::with_capacity(rounds as usize);
    let spin_for = |want: u8| -> Result<()> {
        let start = Instant::now();
        let mut b = [0u8];
        let mut spins = 0u32;
        loop {
            mr.read_into(poll_byte, &mut b)?;
            if b[0] == want {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(SPIN_CHECK) && start.elapsed() > OP {
                return Err(format!(
                    "WRITE ping-pong: waited {OP:?} for byte {want} at offset {poll_byte} (it \
                     holds {})",
                    b[0]
                )
                .into());
            }
        }
    };
    let post = |i: u8, wc: &mut [WorkCompletion]| -> Result<()> {
        mr.write_from(post_byte, &[i])?;
        c.qp.post_send_one(SendWr::write(
            5,
            &sge,
            peer.addr + MAX_MSG as u64,
            peer.rkey,
        ))?;
        // perftest's `do { ne = ibv_poll_cq(...) } while (ne == 0)`: no pause hint, the clock
        // only every SPIN_CHECK polls.
        let start = Instant::now();
        let mut polls = 0u32;
        while c.scq.poll_into(wc)? == 0 {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(SPIN_CHECK) && start.elapsed() > OP {
                return Err(format!("WRITE ping-pong: no completion within {OP:?}").into());
            }
        }
        wc[0].ok()?;
        Ok(())
    };
    for round in 1..=rounds {
        // The byte counts 1, 2, ... 255, 0, 1, ...: never the value the round before left.
        let i = round as u8;
        if starts {
            let t = Instant::now();
            post(i, &mut wc)?;
            spin_for(i)?;
            rounds_ns.push(t.elapsed());
        } else {
            spin_for(i)?;
            post(i, &mut wc)?;
        }
    }
    Ok(rounds_ns)
}

/// How many spins of [`write_pingpong`] between two looks at the clock.
const SPIN_CHECK: u32 = 4096;
