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
//! The code is longer than most chapters and split by role: this file (the flags and the
//! chapter's numbers), `shared.rs` (what both roles use: the connection, the ways to wait, the
//! WRITE ping-pong), `protocol.rs` (the requests and replies of the TCP exchange, one type used
//! at both ends), `server.rs` (node a), `client/` (node b: `mod.rs` runs the sections, one
//! module each, in order), `tools.rs` (the reference tools' command lines and output
//! parsers), `stats.rs` (median, p99, stdev) and `plots.rs` (the SVG plots).

mod client;
mod plots;
mod protocol;
mod server;
mod shared;
mod stats;
mod tools;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use course::exchange::LAB_PORT;

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
        None => server::run(&args),
        Some(host) => client::run(&args, host),
    };
    // A count that is not as predicted is a failure (exit status 1), not only a line.
    course::exit_code(result.and_then(|ok| {
        course::expect(ok, || {
            "a count was not as predicted (the lines marked \"not as predicted\" above)".into()
        })
    }))
}
