//! The client role (node b): it drives the whole chapter, section by section, asking the
//! server role on node a for its half of each measurement over the TCP exchange.
//!
//! This file holds what every section shares (the plan, the results, the connection to the
//! server) and [`run`], which calls the sections in order; each section is a module:
//! [`latency`] (1, with [`reference`]: the reference tools), [`batching`] (2), [`waiting`]
//! (3), [`memory`] (4), [`affinity`] (5) and [`claims`] (6).

mod affinity;
mod batching;
mod claims;
mod latency;
mod memory;
mod reference;
mod waiting;

use std::time::Duration;

use course::exchange::OobStream;
use course::show::{self, Align, Table};
use course::{OrFail, Outcome as Result, expect};
use lab::{AccessFlags, Context, MemoryRegion, ProtectionDomain};

use crate::protocol::{Reply, Request};
use crate::shared::Wait;
use crate::shared::{connect_qp, mtu_of, netdev_of, node_cpu, softirq_threads};
use crate::stats::{Stats, ns};
use crate::tools::Figure;
use crate::{Args, BUF, CONNECT, MAX_MSG, OP, TOOL};

/// How much of everything to do: the full run, or `--quick` (the end-to-end test's form).
struct Plan {
    sizes: Vec<usize>,
    /// Timed iterations and warm-up iterations for a message of `size` bytes.
    iters: fn(usize) -> (u64, u64),
    bw_bytes: u64,
    bw_runs: usize,
    batches: Vec<usize>,
    batch_total: usize,
    small_iters: u64,
    big_iters: u64,
    /// 4c and 4d: samples per offset and per page size (enough for a median the band in
    /// section 6 can hold to, even in quick mode).
    align_iters: u64,
    huge_iters: u64,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                sizes: vec![8, 4096],
                iters: |_| (10, 3),
                bw_bytes: 1 << 20,
                bw_runs: 2,
                batches: vec![1, 16],
                batch_total: 64,
                small_iters: 10,
                big_iters: 3,
                align_iters: 9,
                huge_iters: 5,
            }
        } else {
            Plan {
                sizes: vec![8, 64, 1024, 4096, 65536, MAX_MSG],
                iters: |s| match s {
                    0..=4096 => (200, 20),
                    4097..=65536 => (50, 5),
                    _ => (15, 3),
                },
                bw_bytes: 8 << 20,
                bw_runs: 5,
                batches: vec![1, 2, 4, 8, 16, 32, 64],
                batch_total: 256,
                small_iters: 200,
                big_iters: 15,
                align_iters: 52,
                huge_iters: 15,
            }
        }
    }
}

/// What the sections measured, for the corrected table (section 6) and the plots.
#[derive(Default)]
pub struct Results {
    /// Section 1's one-way latencies.
    pub lat: Vec<Latency>,
    /// (what, bytes/s median)
    pub bw: Vec<(&'static str, f64)>,
    pub tools: Vec<Figure>,
    /// 2b: WRs per second against batch size.
    pub batch: Vec<BatchRate>,
    /// 2a: the doorbells (write(2) calls) of one chain against one call per WR.
    pub doorbells: Doorbells,
    /// (wait, median ns, client cpu per op ns)
    pub waits: Vec<(Wait, f64, f64)>,
    pub packets: Vec<(String, u64)>,
    pub mtu_lat: Vec<(u32, f64)>,
    pub huge: Option<(f64, f64)>,
    /// 4c: (offset, median ns) of the 64 KiB WRITE from each offset.
    pub align: Vec<(usize, f64)>,
    pub affinity: Vec<(bool, f64, f64)>,
    /// The CPUs node b's client may use in section 5 (its vCPUs).
    pub affinity_cpus: usize,
    pub clock_ratio: f64,
    /// Section 1's CPU per operation, one entry per op and size.
    pub cpu_op: Vec<CpuPerOp>,
    /// (what, round trips, the softirq threads over them, for ours the share of one-way times
    /// of at least 3/4 of a timer tick): the WRITE ping-pongs, ours and ib_write_lat's.
    pub softirq: Vec<(String, u64, Softirq, Option<f64>)>,
}

impl Results {
    /// The median one-way latency (ns) of `op` at `size` bytes, if section 1 measured it.
    pub fn lat_median(&self, op: &str, size: usize) -> Option<f64> {
        self.lat
            .iter()
            .find(|l| l.op == op && l.size == size)
            .map(|l| l.stats.median)
    }
}

/// One row of section 1: an operation at one message size.
pub struct Latency {
    pub op: &'static str,
    pub size: usize,
    /// One-way latency in ns.
    pub stats: Stats,
}

/// One batch size of 2b: WRs per second with one chained call, and with one call per WR.
pub struct BatchRate {
    pub size: usize,
    pub chained: f64,
    pub separate: f64,
}

/// 2a's count: write(2) calls to post `wrs` WRs as one chain, and one call each.
#[derive(Default)]
pub struct Doorbells {
    pub chained: u64,
    pub separate: u64,
    pub wrs: usize,
}

/// CPU time per operation (ns) of one section 1 row, each node as a whole (softirq included):
/// section 6 compares the target's with the initiator's.
pub struct CpuPerOp {
    pub op: &'static str,
    pub node_b: f64,
    pub node_a: f64,
}

/// The client's side of everything: device, buffer, the exchange stream, the connection.
struct Lab<'a> {
    ctx: &'a Context,
    pd: &'a ProtectionDomain,
    mr: MemoryRegion,
    oob: OobStream,
    host: String,
    data_port: u16,
}

/// What both nodes' softirq threads did over one measurement: ns run, ns waited runnable,
/// times scheduled.
#[derive(Debug, Clone, Copy, Default)]
pub struct Softirq {
    pub b: [u64; 3],
    pub a: [u64; 3],
}

/// CPU used by both sides over one measurement: this process, the server's process, and
/// each node as a whole (softirq included).
#[derive(Debug, Clone, Copy)]
struct CpuSpan {
    mine: lab::CpuTime,
    theirs: Duration,
    node_b: Duration,
    node_a: Duration,
}

impl Lab<'_> {
    /// Sends a request and does not wait: its `ready` and `done` come later.
    fn send(&mut self, req: &Request) -> Result<()> {
        Ok(self.oob.send_line(&req.to_string(), OP)?)
    }

    /// The server's next reply; an error reply is this side's error too.
    fn reply(&mut self, within: Duration) -> Result<Reply> {
        let line = self.oob.recv_line(within)?;
        match line.parse::<Reply>()? {
            Reply::Error(e) => Err(format!("the server: error {e}").into()),
            r => Ok(r),
        }
    }

    /// Sends a request and returns its reply (a tool's start may take [`TOOL`]).
    fn ask(&mut self, req: Request) -> Result<Reply> {
        self.send(&req)?;
        self.reply(TOOL)
    }

    /// Waits for the reply `want` (`ready` or `done`), and nothing else.
    fn expect_reply(&mut self, want: Reply) -> Result<()> {
        let got = self.reply(OP)?;
        expect(got == want, || {
            format!("the server replied {got:?}, expected {want:?}")
        })
    }

    /// Sends a request whose only reply is `ok`.
    fn ask_ok(&mut self, req: Request) -> Result<()> {
        self.send(&req)?;
        self.expect_reply(Reply::Ok)
    }

    fn server_cpu(&mut self) -> Result<(Duration, Duration)> {
        match self.ask(Request::Cpu)? {
            Reply::Cpu {
                process_ns,
                node_ns,
            } => Ok((
                Duration::from_nanos(process_ns),
                Duration::from_nanos(node_ns),
            )),
            r => Err(format!("the server answered cpu with {r:?}").into()),
        }
    }

    /// The server node's softirq threads (see [`crate::shared::softirq_threads`]).
    fn server_softirq(&mut self) -> Result<[u64; 3]> {
        match self.ask(Request::Softirqd)? {
            Reply::Softirqd(v) => Ok(v),
            r => Err(format!("the server answered softirqd with {r:?}").into()),
        }
    }

    /// Runs `f` between two readings of both nodes' softirq threads.
    fn with_softirq<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<(T, Softirq)> {
        let (a0, b0) = (self.server_softirq()?, softirq_threads()?);
        let out = f(self)?;
        let (b1, a1) = (softirq_threads()?, self.server_softirq()?);
        let d = |x: [u64; 3], y: [u64; 3]| [0, 1, 2].map(|i| y[i].saturating_sub(x[i]));
        Ok((
            out,
            Softirq {
                b: d(b0, b1),
                a: d(a0, a1),
            },
        ))
    }

    /// Runs `f` between two CPU readings of both sides.
    fn with_cpu<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<(T, CpuSpan)> {
        let (s0, a0) = self.server_cpu()?;
        let (m0, b0) = (lab::cpu_time()?, node_cpu()?);
        let out = f(self)?;
        let (m1, b1) = (lab::cpu_time()?, node_cpu()?);
        let (s1, a1) = self.server_cpu()?;
        Ok((
            out,
            CpuSpan {
                mine: m1.since(&m0),
                theirs: s1.saturating_sub(s0),
                node_b: b1.saturating_sub(b0),
                node_a: a1.saturating_sub(a0),
            },
        ))
    }
}

/// A table of latency rows, all with the same columns.
fn lat_table(first: &str) -> Table {
    Table::new([
        (first, Align::Left),
        ("size", Align::Right),
        ("n", Align::Right),
        ("median", Align::Left),
        ("p99", Align::Left),
        ("stdev", Align::Left),
        ("cpu/op b (proc)", Align::Left),
        ("cpu/op a (proc)", Align::Left),
        ("cpu/op b (node)", Align::Left),
        ("cpu/op a (node)", Align::Left),
    ])
    .indent(4)
}

fn per_op(d: Duration, n: u64) -> Duration {
    d / (n.max(1) as u32)
}

fn lat_row(t: &mut Table, what: &str, size: usize, s: &Stats, cpu: &CpuSpan) {
    let n = s.n as u64;
    t.row([
        what.to_string(),
        size.to_string(),
        s.n.to_string(),
        show::lat(ns(s.median)).to_string(),
        show::lat(ns(s.p99)).to_string(),
        show::lat(ns(s.stdev)).to_string(),
        show::cpu(per_op(cpu.mine.total(), n)).to_string(),
        show::cpu(per_op(cpu.theirs, n)).to_string(),
        show::cpu(per_op(cpu.node_b, n)).to_string(),
        show::cpu(per_op(cpu.node_a, n)).to_string(),
    ]);
}

/// A rate in bytes per second, as the tables print it.
fn rate(bytes_per_sec: f64) -> String {
    show::rate_bytes(bytes_per_sec.max(0.0) as u64, Duration::from_secs(1)).to_string()
}

/// This process's write-family system calls so far (`syscw` in `/proc/self/io`).
fn write_syscalls() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/io").or_fail("reading /proc/self/io")?;
    s.lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no syscw in /proc/self/io".into())
}

pub fn run(args: &Args, host: &str) -> Result<bool> {
    let plan = Plan::new(args.quick);
    let mut res = Results::default();
    println!("step 1: open the device, register a {BUF}-byte buffer, connect to the server");
    let ctx = course::open_device(None)?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.reg_mr(
        BUF,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )?;
    let oob = OobStream::connect(host, args.port, CONNECT)
        .or_fail_with(|| format!("connecting to the server at {host}:{}", args.port))?;
    let mut lab = Lab {
        ctx: &ctx,
        pd: &pd,
        mr,
        oob,
        host: host.to_string(),
        data_port: args.port + 1,
    };
    let mut c = connect_qp(&ctx, &pd, &mut lab.oob, 0, None)?;
    let port = ctx.query_port(1)?;
    let dev = netdev_of(&ctx)?;
    println!(
        "  connected: one RC QP each side, path MTU {} (the port's active MTU on {dev}, MTU {})",
        port.active_mtu.bytes(),
        mtu_of(&dev)?
    );
    println!(
        "  this node has {} vCPU(s) this program may use; {} mode",
        lab::perf::affinity()?.len(),
        if args.quick { "quick" } else { "full" }
    );

    let mut ok = true;
    latency::measure(&mut lab, &mut c, &plan, &mut res)?;
    ok &= batching::measure(&mut lab, &c, &plan, &mut res)?;
    waiting::measure(&mut lab, &c, &plan, &mut res)?;
    drop(c);
    ok &= memory::measure(&mut lab, &plan, &mut res)?;
    affinity::measure(&mut lab, &plan, &mut res)?;
    claims::print(&res);
    if let Some(dir) = &args.plots {
        println!("section 7: plots");
        for (name, series) in crate::plots::write_all(dir, &res)? {
            println!("  wrote {name}: {}", series.join(", "));
        }
    }
    lab.ask_ok(Request::DropQps)?;
    lab.send(&Request::Bye)?;
    course::done(ok, "every section measured; the counts are as predicted");
    Ok(ok)
}
