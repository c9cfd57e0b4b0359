//! # Chapter 09: a cross-node memory pool
//!
//! Node a lends memory; node b uses it without node a's program taking part. The pool server
//! registers **one large memory region**, cuts it into N fixed-size blocks and hands every
//! client the **block table**: `(addr, len, rkey)` per block, over the lab's TCP exchange.
//! From then on the clients read and write blocks with one-sided **RDMA WRITE** and **RDMA
//! READ**; the server program sleeps in a socket read until they say "done", and its
//! completion queue stays empty: a one-sided operation completes only at the side that posted
//! it. (On rxe the transfers do cost the target CPU time: node a's kernel runs the software
//! transport that copies the data; but no work request and no completion appear there. On a
//! hardware NIC the target's CPU does nothing at all.)
//!
//! What it teaches:
//! * one MR for the whole pool vs one MR per block: what each costs in keys, in registrations
//!   and in registration time (step 2 of the server);
//! * the block table as the pool's "address space", and a client API that turns
//!   `write(block, offset, data)` into one work request after a bounds check
//!   (`course::RemotePool` / `course::AsyncPool`);
//! * several client processes writing disjoint blocks at the same time, then reading them back;
//! * the completion-driven async form: every block's WRITE is in flight at once, each a future
//!   that the completion channel wakes (`course::AsyncPool`, `course::join_all`);
//! * what the API refuses before anything reaches the wire (a block or byte range outside the
//!   table: a typed error, no work request posted), and what only the remote side can refuse
//!   (a forged rkey: `IBV_WC_REM_ACCESS_ERR (10)`, our QP and the server's QP go to ERR, the
//!   other clients and the pool's memory are untouched).
//!
//! Verbs: `ibv_reg_mr` (one vs many), `IBV_WR_RDMA_WRITE`, `IBV_WR_RDMA_READ`,
//! `ibv_req_notify_cq` + `ibv_get_cq_event` (the async form), `ibv_query_qp`.
//!
//! Run it (pair topology: node a serves, node b runs the clients):
//!
//! ```text
//! cargo lab run 09
//! cargo lab run 09 -- --clients 3 --blocks 12 --block-size 8192
//! cargo lab run 09 -- --bench 1000          # 4 KiB WRITE/READ latency of the pool API
//! cargo lab run 09 -- --cm                  # the same run, connected through rdma_cm
//! cargo lab run 09 -- --case reconnect      # the server dies and comes back; reconnect by hand
//! ```
//!
//! Roles: `--server` (node a) and `--connect HOST` (node b). `cargo lab run` passes the
//! arguments after `--` to both roles, so both accept the same flags; `--clients`, `--blocks`,
//! `--block-size` and `--bench` must agree on both sides (the server checks what arrives).
//! The client role starts `--clients` worker processes (copies of itself with the hidden flag
//! `--client-index I`), prints their output in index order, then plays a misbehaving client
//! itself.
//!
//! `--cm` (both roles) connects every QP through rdma_cm (`lab::cm`, chapter 12) instead of
//! the TCP exchange: the server listens on `--port` with `rdma_listen`, each client resolves
//! node a's address and calls `rdma_connect` with its name as private data, and the server's
//! `rdma_accept` carries the table (base address, block length, block count, rkey: 24 of the
//! REP's 196 bytes). The "go" and "done" lines stay on a TCP stream: they are the chapter's
//! choreography, not the connection, and the misbehaving client reports after its QP is in
//! ERR, when it could not SEND any more. Everything after the connection is the same code,
//! and the transcript is the default run's but for the lines that say how it connected.
//!
//! `--case reconnect` (both roles) is reconnect done right, by hand: the server runs as a
//! supervisor of server processes; server 1 is killed (SIGKILL) mid-session, the client's next
//! WRITE completes with `IBV_WC_RETRY_EXC_ERR (12)` and its QP is in ERR; `ERR -> INIT` is
//! refused (EINVAL), `ERR -> RESET` works, and a fresh TCP exchange with server 2 (fresh PSNs
//! on both sides) takes the same QP through INIT, RTR and RTS again. Chapter 12's
//! `--case reconnect` is the rdma_cm variant.
//!
//! Read it in this order: this file (the flags, the roles, and what the clients write into
//! the blocks), `server.rs` (node a), `client.rs` (node b: connecting a QP to the pool, a
//! worker, the misbehaving client), `bench.rs` (`--bench`), `cm.rs` (`--cm`'s connection
//! helpers) and `reconnect.rs` (`--case reconnect`'s server and client). Each role reads top
//! to bottom in its file; the "go" and "done" lines on the TCP stream tie them together.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use course::exchange::LAB_PORT;

mod bench;
mod client;
mod cm;
mod reconnect;
mod server;

/// Our first packet sequence number (any 24-bit value; both sides just have to agree).
const PSN: u32 = 0x000100;
/// Deadlines: the lab runs under emulation (TCG), so be generous, but never wait forever.
const CONNECT: Duration = Duration::from_secs(60);
const WORK: Duration = Duration::from_secs(120);
const OP: Duration = Duration::from_secs(20);
/// Most pool operations a worker keeps in flight at once (its CQ and send queue hold 64).
const WINDOW: usize = 32;
/// `--cm`: how long `rdma_resolve_addr` and `rdma_resolve_route` may take.
const RESOLVE: Duration = Duration::from_secs(2);
/// `--cm`: the tag in front of the table in the accept's private data.
const TABLE_TAG: &[u8; 4] = b"POOL";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "ch09-memory-pool",
    about = "Chapter 09: a memory pool on node a, read and written with one-sided RDMA by \
             several client processes on node b",
    after_help = "Both roles take the same flags (cargo lab run passes them to both).\n\
                  Examples:\n  ch09-memory-pool --server --clients 2\n  \
                  ch09-memory-pool --connect 10.77.0.1 --clients 2"
)]
struct Args {
    /// `--server` (serve the pool), `--connect HOST` (use it), `--clients K` worker processes
    /// writing it at the same time.
    #[command(flatten)]
    roles: course::cli::FanOut,
    /// Blocks in the pool (at least --clients: each client owns blocks i, i+K, i+2K, ...).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    blocks: u32,
    /// Bytes per block (a multiple of 64, 64 B ..= 1 MiB).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(64..=1 << 20))]
    block_size: u32,
    /// Benchmark instead: ITERS blocking WRITEs and READs of one block, latency median/p99.
    #[arg(long, value_name = "ITERS", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    bench: Option<u32>,
    /// TCP port of the exchange (with --cm: the rdma_cm port, and the TCP port of the go/done
    /// lines).
    #[arg(long, default_value_t = LAB_PORT)]
    port: u16,
    /// Connect through rdma_cm instead of the TCP exchange (both roles): the server listens
    /// with rdma_cm, each client resolves its address; the table comes in the accept's
    /// private data. The go/done lines still travel over TCP.
    #[arg(long, conflicts_with = "case")]
    cm: bool,
    /// Instead of the course run, a scenario (both roles): `reconnect`, the server dies and
    /// comes back; the client resets its QP and connects it again by hand.
    #[arg(long, value_enum, value_name = "NAME", conflicts_with = "bench")]
    case: Option<Case>,
    /// (internal) run as server process N of --case reconnect.
    #[arg(long, hide = true, value_name = "N", requires = "case")]
    server_round: Option<u32>,
}

/// The scenarios of `--case`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Case {
    /// The server is killed mid-session and started again: the client sees its WRITE fail,
    /// resets its QP (ERR -> RESET) and connects it again with a fresh exchange and PSNs
    Reconnect,
}

impl Args {
    fn check(&self) -> std::result::Result<(), String> {
        if self.block_size & 63 != 0 {
            return Err(format!(
                "--block-size {} is not a multiple of 64",
                self.block_size
            ));
        }
        let total = self.blocks as u64 * self.block_size as u64;
        if total > 64 << 20 {
            return Err(format!(
                "--blocks {} x --block-size {} = {total} bytes: the pool is limited to 64 MiB",
                self.blocks, self.block_size
            ));
        }
        if self.bench.is_none() && self.blocks < self.roles.clients {
            return Err(format!(
                "--blocks {} is less than --clients {}: every client needs at least one block",
                self.blocks, self.roles.clients
            ));
        }
        if let Some(host) = &self.roles.connect
            && self.cm
            && host.parse::<IpAddr>().is_err()
        {
            return Err(format!(
                "--cm needs the server's IP address, not {host:?} (rdma_cm resolves addresses)"
            ));
        }
        self.roles.check()
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(msg) = args.check() {
        eprintln!("error: {msg}\n\nFor more information, try '--help'.");
        return ExitCode::from(2);
    }
    let result = match (&args.roles.connect, args.roles.client_index, args.bench) {
        (None, _, _) if args.case == Some(Case::Reconnect) => match args.server_round {
            Some(n) => reconnect::reconnect_server(&args, n),
            None => reconnect::supervisor(),
        },
        (Some(host), _, _) if args.case == Some(Case::Reconnect) => {
            reconnect::reconnect_client(&args, host)
        }
        (None, _, _) => server::server(&args),
        (Some(host), _, Some(iters)) => bench::bench_client(&args, host, iters),
        (Some(host), Some(i), None) => client::worker(&args, host, i),
        (Some(host), None, None) => client::clients(&args, host),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            println!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What the clients write: a readable header, then a pattern. Deterministic, so the server can
// check every block by itself at the end.

/// Which worker owns (writes) `block`: blocks are dealt round-robin.
fn owner(block: u32, clients: u32) -> u32 {
    block % clients
}

/// The content worker `owner(block)` writes into `block`.
fn block_content(block: u32, clients: u32, size: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..size)
        .map(|j| (block as usize * 37 + j * 13 + 5) as u8)
        .collect();
    let header = format!("block {block} by client {}\n", owner(block, clients));
    v[..header.len()].copy_from_slice(header.as_bytes());
    v
}

/// The header line at the start of a block's bytes ("block 3 by client 1"), for printing.
fn header_of(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == b'\n').unwrap_or(0).min(40);
    String::from_utf8_lossy(&bytes[..end])
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '.'
            }
        })
        .collect()
}

/// "0, 2, 4, 6", or "0, 2, 4, ..., 254 (128 blocks)" for long lists.
fn block_list(blocks: &[u32]) -> String {
    let s = |bs: &[u32]| {
        bs.iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if blocks.len() <= 8 {
        s(blocks)
    } else {
        format!(
            "{}, ..., {} ({} blocks)",
            s(&blocks[..3]),
            blocks[blocks.len() - 1],
            blocks.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_dealt_round_robin_and_disjoint() {
        let owners: Vec<u32> = (0..8).map(|b| owner(b, 3)).collect();
        assert_eq!(owners, [0, 1, 2, 0, 1, 2, 0, 1]);
    }

    #[test]
    fn content_has_a_readable_header() {
        let c = block_content(5, 2, 64);
        assert_eq!(header_of(&c), "block 5 by client 1");
        assert_ne!(block_content(4, 2, 64), block_content(5, 2, 64));
    }

    #[test]
    fn long_block_lists_are_shortened() {
        assert_eq!(block_list(&[0, 2, 4]), "0, 2, 4");
        let many: Vec<u32> = (0..128).map(|i| i * 2).collect();
        assert_eq!(block_list(&many), "0, 2, 4, ..., 254 (128 blocks)");
    }
}
