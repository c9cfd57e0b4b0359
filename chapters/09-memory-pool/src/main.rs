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
//!   (`lab::RemotePool` / `lab::AsyncPool`);
//! * several client processes writing disjoint blocks at the same time, then reading them back;
//! * the completion-driven async form: every block's WRITE is in flight at once, each a future
//!   that the completion channel wakes (`lab::AsyncPool`, `lab::join_all`);
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
//! This file is longer than most chapters because it holds every role, in
//! the order they run: the server, a worker, the misbehaving client, the benchmark client,
//! then `--cm`'s connection helpers and `--case reconnect`'s server and client. Each role
//! reads top to bottom on its own; splitting them across files would hide the exchange that
//! ties them together.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

// Errors, one style for every chapter (lab::course): `.or_fail("what we were doing")` and
// `expect(condition, || message)` make a Failure; main prints it and exits 1.
use clap::{Parser, ValueEnum};
use lab::cm::{CmEvent, CmEventType, CmId, ConnParam, MAX_CONNECT_DATA};
use lab::course::{Failure, OrFail, Outcome as Result, Peer, expect};
use lab::exchange::{Endpoint, LAB_PORT, Listener, OobStream};
use lab::show::{self, Align, Table};
use lab::{
    AccessFlags, AsyncPool, Context, Error, MemoryRegion, PoolOp, QpInitAttr, QpState, QueuePair,
    RemotePool, RemoteRegion, WcStatus, join_all, state,
};

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
    /// Serve the pool (node a).
    #[arg(long, conflicts_with = "connect")]
    server: bool,
    /// Use the pool served at HOST (node b).
    #[arg(long, value_name = "HOST", required_unless_present = "server")]
    connect: Option<String>,
    /// Worker processes writing the pool at the same time.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    clients: u32,
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
    /// (internal) run as worker I of the client role.
    #[arg(long, hide = true, value_name = "I")]
    client_index: Option<u32>,
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
        if self.bench.is_none() && self.blocks < self.clients {
            return Err(format!(
                "--blocks {} is less than --clients {}: every client needs at least one block",
                self.blocks, self.clients
            ));
        }
        if let Some(host) = &self.connect
            && self.cm
            && host.parse::<IpAddr>().is_err()
        {
            return Err(format!(
                "--cm needs the server's IP address, not {host:?} (rdma_cm resolves addresses)"
            ));
        }
        if let Some(i) = self.client_index
            && i >= self.clients
        {
            return Err(format!(
                "--client-index {i} is out of range for --clients {}",
                self.clients
            ));
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(msg) = args.check() {
        eprintln!("error: {msg}\n\nFor more information, try '--help'.");
        return ExitCode::from(2);
    }
    let result = match (&args.connect, args.client_index, args.bench) {
        (None, _, _) if args.case == Some(Case::Reconnect) => match args.server_round {
            Some(n) => reconnect_server(&args, n),
            None => supervisor(),
        },
        (Some(host), _, _) if args.case == Some(Case::Reconnect) => reconnect_client(&args, host),
        (None, _, _) => server(&args),
        (Some(host), _, Some(iters)) => bench_client(&args, host, iters),
        (Some(host), Some(i), None) => worker(&args, host, i),
        (Some(host), None, None) => clients(&args, host),
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

/// FNV-1a, 64 bits: a small, well-known checksum (not a cryptographic one).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

// ---------------------------------------------------------------------------------------------
// Server (node a)

fn server(args: &Args) -> Result<bool> {
    let (n, size) = (args.blocks as usize, args.block_size as usize);
    let bench = args.bench.is_some();
    let workers = if bench { 1 } else { args.clients as usize };

    println!("step 1: open the device, find the RoCE v2 GID, allocate a protection domain");
    // With --cm the QPs are created by rdma_create_qp, which takes only a PD of librdmacm's
    // own open device: so the listener is made first (bound to the rxe netdev's address, it
    // has a device), and the PD, the CQ and the pool's MR are made on its context.
    let cm_listener = if args.cm {
        let ip = lab::course::rxe_address()?;
        let id = CmId::new()?;
        id.listen(SocketAddr::new(IpAddr::V4(ip), args.port), 32)
            .or_fail("rdma_cm listen")?;
        Some(id)
    } else {
        None
    };
    let ctx = match &cm_listener {
        Some(id) => id.context()?,
        None => lab::course::open_device(None)?,
    };
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let pd = ctx.alloc_pd()?;
    let dev = ctx.query_device()?;
    println!(
        "  device {} port 1 gid[{}] {}; the device allows max_mr={} memory regions",
        ctx.name(),
        gid.index,
        show::gid(&gid.gid.raw()),
        dev.max_mr
    );

    // The clients need REMOTE_WRITE and REMOTE_READ; LOCAL_WRITE is required with
    // REMOTE_WRITE. No REMOTE_ATOMIC: this pool takes no atomics (chapter 10 registers its
    // own region with it, and an atomic on this one would fail with IBV_WC_REM_ACCESS_ERR).
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;

    println!("step 2: two ways to register {n} blocks of {size} bytes");
    // (a) One MR per block: N ibv_reg_mr calls, N rkeys the table must carry, N MRs the
    //     device must track (max_mr above). Each can be deregistered on its own.
    let t = Instant::now();
    let per_block: Vec<MemoryRegion> = (0..n)
        .map(|_| pd.reg_mr(size, access))
        .collect::<lab::Result<_>>()?;
    let per_block_time = t.elapsed();
    let keys: BTreeSet<u32> = per_block.iter().map(|m| m.rkey()).collect();
    println!(
        "  one MR per block:    {n} ibv_reg_mr calls, {} distinct rkeys, {}",
        keys.len(),
        show::elapsed(per_block_time)
    );
    drop(per_block); // ibv_dereg_mr x N
    // (b) One MR for the whole pool: 1 call, 1 rkey; a block is an offset into it.
    let t = Instant::now();
    let mut pool = pd.reg_mr(n * size, access)?;
    let one_time = t.elapsed();
    println!(
        "  one MR for the pool: 1 ibv_reg_mr call, 1 rkey, {}",
        show::elapsed(one_time)
    );
    println!(
        "  this pool uses the single MR: {} bytes, {}",
        n * size,
        show::rkey(pool.rkey())
    );

    println!("step 3: the block table the clients get: (addr, len, rkey) per block");
    let table: Vec<RemoteRegion> = (0..n)
        .map(|i| RemoteRegion {
            addr: pool.addr() + (i * size) as u64,
            len: size as u64,
            rkey: pool.rkey(),
        })
        .collect();
    print_table(&table);
    pool.as_mut_slice().fill(0);

    let listener = Listener::bind(args.port)?;
    let how = if args.cm {
        format!(
            "rdma_cm port {0} (the rxe netdev's address; the table goes in the accept's private \
             data) and TCP 0.0.0.0:{0} (the go/done lines)",
            args.port
        )
    } else {
        format!("0.0.0.0:{}", args.port)
    };
    println!(
        "step 4: listening on {how} for {} (one RC QP each)",
        if bench {
            "1 benchmark client".to_string()
        } else {
            format!("{workers} clients, then 1 misbehaving client")
        }
    );
    // One CQ for every connection's QP: it will stay empty (nobody posts anything here).
    let cq = ctx.create_cq(64, None)?;
    // What every client receives: our QP (its number is filled in per connection), the table.
    let me = Endpoint {
        name: "pool".into(),
        psn: PSN,
        gid: gid.gid.raw(),
        regions: table.clone(),
        ..Default::default()
    };

    // Accept one connection: receive the client's endpoint, bring a QP up toward it, send
    // ours with the block table. Our QP is in RTS before the client learns its number.
    let accept = |what: &str| -> Result<Peer> {
        match &cm_listener {
            Some(id) => cm_accept(id, &pd, &cq, &listener, &table_data(&table), what),
            None => {
                let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
                lab::course::accept_peer(&listener, qp, &me, what, CONNECT)
            }
        }
    };

    println!("step 5: accept the clients, in whatever order they come");
    let mut conns: Vec<Peer> = (0..workers)
        .map(|i| accept(&format!("client {} of {workers}", i + 1)))
        .collect::<Result<_>>()?;
    // They connect in a racy order: print them sorted, so the output is the same every run.
    conns.sort_by(|a, b| a.theirs.name.cmp(&b.theirs.name));
    for c in &conns {
        println!(
            "  {} connected: our {}",
            c.theirs.name,
            show::qpn(c.qp.qp_num())
        );
    }

    println!("step 6: tell every client \"go\", then wait for each one's \"done\"");
    // From here the clients write and read the pool with one-sided operations. This process
    // only waits in a socket read: watch its CPU time and its completion queue.
    let cpu0 = lab::cpu_time()?;
    let t = Instant::now();
    for c in &mut conns {
        c.oob.send_line("go", OP)?;
    }
    let mut reported: Vec<(String, String)> = vec![];
    for c in &mut conns {
        let line = c
            .oob
            .recv_line(WORK)
            .or_fail_with(|| format!("waiting for {}'s \"done\"", c.theirs.name))?;
        reported.push((c.theirs.name.clone(), line));
    }
    let cpu = lab::cpu_time()?.since(&cpu0);
    let mut wcs = [lab::WorkCompletion::default(); 16];
    let n_wc = cq.poll_into(&mut wcs)?;
    println!(
        "  all {workers} done after {}; this process used {} meanwhile",
        show::elapsed(t.elapsed()),
        show::cpu(cpu.total())
    );
    println!(
        "  our completion queue holds {n_wc} completions: one-sided WRITE/READ complete only at \
         the side that posts them"
    );
    for (name, line) in &reported {
        println!("  {name} reported: {line}");
    }
    let mut ok = n_wc == 0;

    if bench {
        println!("done: benchmark served");
        return Ok(ok);
    }

    println!("step 7: the misbehaving client");
    let mut probe = accept("the misbehaving client")?;
    println!(
        "  {} connected: our {}",
        probe.theirs.name,
        show::qpn(probe.qp.qp_num())
    );
    probe.oob.send_line("go", OP)?;
    let line = probe.oob.recv_line(WORK)?;
    println!("  {} reported: {line}", probe.theirs.name);

    println!("step 8: check every block (the server reads its own memory, sorted by block)");
    let mut good = 0;
    for b in 0..n {
        let bytes = &pool.as_slice()[b * size..(b + 1) * size];
        let want = block_content(b as u32, args.clients, size);
        let sum = fnv1a(bytes);
        let verdict = if bytes == want.as_slice() {
            good += 1;
            "ok"
        } else {
            ok = false;
            "MISMATCH"
        };
        println!(
            "  block {b:>3}: \"{}\" checksum=0x{sum:016x} {verdict}",
            header_of(bytes)
        );
    }
    println!("  {good} of {n} blocks hold exactly what their owner wrote");

    println!("step 9: the state of each connection's QP on this side (ibv_query_qp)");
    conns.push(probe);
    for c in &conns {
        let st = c.qp.state()?;
        println!("  {}: {st}", c.theirs.name);
        let expect = if c.theirs.name == "misbehaving" {
            QpState::Err
        } else {
            QpState::Rts
        };
        ok &= st == expect;
    }
    let n_wc = cq.poll_into(&mut wcs)?;
    println!("  our completion queue still holds {n_wc} completions");
    ok &= n_wc == 0;
    lab::course::done(
        ok,
        "every block verified; no work request or completion here: this node's kernel (rxe) \
         served the transfers",
    );
    Ok(ok)
}

// ---------------------------------------------------------------------------------------------
// --cm: the same connections through rdma_cm (chapter 12 walks through every event)

/// The table as the accept's private data: tag, base address, block length, block count,
/// rkey (24 bytes; a REP carries at most 196). The table is regular (one MR, equal blocks
/// back to back), so these numbers give every `(addr, len, rkey)` entry. A table of unrelated
/// entries would need 16 bytes each: 11 of them would fit, which is why a bigger pool
/// description would travel in a SEND or an RDMA READ after the connection.
fn table_data(table: &[RemoteRegion]) -> Vec<u8> {
    let mut v = TABLE_TAG.to_vec();
    let first = table.first().copied().unwrap_or_default();
    v.extend_from_slice(&first.addr.to_be_bytes());
    v.extend_from_slice(&(first.len as u32).to_be_bytes());
    v.extend_from_slice(&(table.len() as u32).to_be_bytes());
    v.extend_from_slice(&first.rkey.to_be_bytes());
    v
}

/// The table back from the private data (`None` if it holds none).
fn parse_table_data(d: &[u8]) -> Option<Vec<RemoteRegion>> {
    if d.len() < 24 || &d[..4] != TABLE_TAG {
        return None;
    }
    let addr = u64::from_be_bytes(d[4..12].try_into().ok()?);
    let len = u32::from_be_bytes(d[12..16].try_into().ok()?) as u64;
    let blocks = u32::from_be_bytes(d[16..20].try_into().ok()?) as u64;
    let rkey = u32::from_be_bytes(d[20..24].try_into().ok()?);
    if blocks > 4096 {
        return None;
    }
    Some(
        (0..blocks)
            .map(|i| RemoteRegion {
                addr: addr + i * len,
                len,
                rkey,
            })
            .collect(),
    )
}

/// A name as a REQ's private data: one length byte, then the bytes (the server always reads
/// 56 bytes, the IB CM REQ's 92 less rdma_cm's 36-byte header, on RoCE as on InfiniBand: the
/// length must travel in the payload).
fn framed(name: &str) -> Vec<u8> {
    let b = &name.as_bytes()[..name.len().min(MAX_CONNECT_DATA - 1)];
    let mut v = vec![b.len() as u8];
    v.extend_from_slice(b);
    v
}

fn unframed(d: &[u8]) -> Option<String> {
    let n = usize::from(*d.first()?);
    d.get(1..1 + n)
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// The server side with --cm: take the next CONNECT_REQUEST (the client's name in its private
/// data), create the QP on its id (INIT), accept with the table as private data (librdmacm
/// moves our QP to RTR and RTS before the REP leaves), wait for ESTABLISHED. Then the client's
/// go/done stream: requests are accepted one at a time and a client opens its stream only
/// once ESTABLISHED, so the next stream is this client's (its first line, its name, says so).
fn cm_accept(
    listener: &CmId,
    pd: &lab::ProtectionDomain,
    cq: &lab::CompletionQueue,
    lines: &Listener,
    table: &[u8],
    what: &str,
) -> Result<Peer> {
    let req = listener
        .get_request(CONNECT)
        .or_fail_with(|| format!("waiting for {what} (rdma_cm)"))?;
    let name = unframed(&req.private_data)
        .ok_or_else(|| Failure("a connection request without a name".into()))?;
    let qp = req.id.create_qp(pd, &QpInitAttr::rc(cq, cq))?;
    req.id.accept(&ConnParam::with_data(table))?;
    req.id
        .expect_event(CmEventType::Established, CONNECT)
        .or_fail_with(|| format!("waiting for {name}'s ESTABLISHED"))?;
    let qp = qp.assume_state::<state::Rts>();
    let dest = qp.query()?.dest_qp_num;
    let mut oob = lines
        .accept(CONNECT)
        .or_fail_with(|| format!("waiting for {name}'s go/done stream"))?;
    let hello = oob.recv_line(CONNECT)?;
    expect(hello == name, || {
        format!("the go/done stream says it is {hello:?}, expected {name:?}")
    })?;
    Ok(Peer {
        qp,
        oob,
        theirs: Endpoint {
            name,
            qpn: dest,
            ..Default::default()
        },
    })
}

/// The device a client works on: its own `ibv_open_device`, or with --cm librdmacm's, from a
/// new id resolved toward the server (address, then route), which [`connect`] then uses.
fn client_device(args: &Args, host: &str) -> Result<(Context, Option<CmId>)> {
    if !args.cm {
        return Ok((lab::course::open_device(None)?, None));
    }
    let given: IpAddr = host
        .parse()
        .map_err(|_| Failure(format!("{host:?} is not an IP address")))?;
    // 127.0.0.1 cannot be routed on RoCE (no RDMA device on `lo`): the server then shares our
    // device, so use our own rxe netdev's address (chapter 12 shows the error otherwise).
    let ip = if given.is_loopback() {
        IpAddr::V4(lab::course::rxe_address()?)
    } else {
        given
    };
    let id = resolved(SocketAddr::new(ip, args.port))?;
    Ok((id.context()?, Some(id)))
}

/// A new id with its address and route resolved toward `dst`.
fn resolved(dst: SocketAddr) -> Result<CmId> {
    let id = CmId::new()?;
    id.resolve_addr(None, dst, RESOLVE)?;
    id.expect_event(CmEventType::AddrResolved, CONNECT)
        .or_fail("rdma_resolve_addr")?;
    id.resolve_route(RESOLVE)?;
    id.expect_event(CmEventType::RouteResolved, CONNECT)
        .or_fail("rdma_resolve_route")?;
    Ok(id)
}

fn print_table(table: &[RemoteRegion]) {
    let mut t = Table::new([
        ("block", Align::Right),
        ("len", Align::Right),
        ("rkey", Align::Left),
        ("addr", Align::Left),
    ])
    .indent(2);
    const SHOWN: usize = 16;
    for (i, b) in table.iter().enumerate().take(SHOWN) {
        t.row([
            i.to_string(),
            b.len.to_string(),
            show::rkey(b.rkey).to_string(),
            show::addr(b.addr).to_string(),
        ]);
    }
    print!("{t}");
    if table.len() > SHOWN {
        println!(
            "  ... ({} more blocks, same rkey, addresses every {} bytes)",
            table.len() - SHOWN,
            table[0].len
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Client side (node b): connecting one QP to the pool

/// A QP connected to the pool server, and what the server sent.
struct Connected {
    qp: QueuePair,
    oob: OobStream,
    table: Vec<RemoteRegion>,
    server_qpn: u32,
}

/// Creates a QP, exchanges endpoints with the server (our QPN/PSN/GID out, the pool's QPN and
/// block table in) and brings the QP to RTS. With --cm (`cm` is the id [`client_device`]
/// resolved): `rdma_create_qp`, `rdma_connect` with our name as private data, ESTABLISHED
/// with the table as the accept's private data; then the TCP stream of the go/done lines.
fn connect(
    ctx: &Context,
    pd: &lab::ProtectionDomain,
    cq: &lab::CompletionQueue,
    args: &Args,
    (host, cm): (&str, Option<CmId>),
    name: &str,
) -> Result<Connected> {
    let init = QpInitAttr::rc(cq, cq).max_send_wr(64);
    if let Some(mut id) = cm {
        // A REJECTED (nobody listens yet, or a freshly booted guest's CM still loading) is
        // tried again every 200 ms, up to the deadline, with a new id and QP each time (an id
        // carries one connection attempt). How many tries it took depends on timing, so it is
        // not printed.
        let deadline = Instant::now() + CONNECT;
        let (qp, table) = loop {
            let qp = id.create_qp(pd, &init)?;
            id.connect(&ConnParam::with_data(&framed(name)))?;
            match id.get_event(CONNECT).or_fail("rdma_connect")? {
                CmEvent::Established { private_data } => {
                    let table = parse_table_data(&private_data).ok_or_else(|| {
                        Failure("the server's private data holds no pool table".into())
                    })?;
                    break (qp, table);
                }
                CmEvent::Rejected { .. } if Instant::now() < deadline => {
                    let dst = id.peer_addr().ok_or("the id lost its peer address")?;
                    drop(qp);
                    std::thread::sleep(Duration::from_millis(200));
                    id = resolved(dst)?;
                }
                other => {
                    return Err(format!(
                        "rdma_connect to the pool server: {other}{}",
                        other.hint()
                    )
                    .into());
                }
            }
        };
        // librdmacm took the QP through RTR to RTS; the server's QPN is in its attributes.
        let qp = qp.assume_state::<state::Rts>();
        let server_qpn = qp.query()?.dest_qp_num;
        let mut oob = OobStream::connect(host, args.port, CONNECT)
            .or_fail("connecting the go/done stream")?;
        oob.send_line(name, OP)?;
        return Ok(Connected {
            qp,
            oob,
            server_qpn,
            table,
        });
    }
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let qp = pd.create_qp(&init)?;
    let mine = Endpoint {
        name: name.into(),
        psn: PSN,
        gid: gid.gid.raw(),
        ..Default::default()
    };
    let p = lab::course::connect_peer(host, args.port, qp, mine, "the pool server", CONNECT)?;
    Ok(Connected {
        qp: p.qp,
        oob: p.oob,
        server_qpn: p.theirs.qpn,
        table: p.theirs.regions,
    })
}

/// Checks that the table the server sent is what our flags say.
fn check_table(table: &[RemoteRegion], args: &Args) -> Result<()> {
    expect(
        table.len() == args.blocks as usize
            && table.iter().all(|b| b.len == args.block_size as u64),
        || {
            format!(
                "the server's table has {} blocks of {} bytes, but this client was started with \
         --blocks {} --block-size {}: give both roles the same flags",
                table.len(),
                table.first().map_or(0, |b| b.len),
                args.blocks,
                args.block_size
            )
        },
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Worker (one client process on node b): writes its blocks, reads them back

fn worker(args: &Args, host: &str, index: u32) -> Result<bool> {
    let size = args.block_size as usize;
    let mine: Vec<u32> = (0..args.blocks)
        .filter(|&b| owner(b, args.clients) == index)
        .collect();
    let list = block_list(&mine);

    println!("step 1: open the device; a CQ with a completion channel (for the async form)");
    let (ctx, cm) = client_device(args, host)?;
    let pd = ctx.alloc_pd()?;
    let channel = ctx.create_comp_channel()?;
    let cq = ctx.create_cq(64, Some(&channel))?;
    // Our own buffer: one slot per block we own. LOCAL_WRITE because READs land in it.
    let mut local = pd.reg_mr(mine.len() * size, AccessFlags::LOCAL_WRITE)?;

    if args.cm {
        println!(
            "step 2: connect to the pool through rdma_cm; its block table comes in the accept's \
             private data"
        );
    } else {
        println!("step 2: connect to the pool and receive its block table");
    }
    let c = connect(&ctx, &pd, &cq, args, (host, cm), &format!("client-{index}"))?;
    check_table(&c.table, args)?;
    println!(
        "  pool: {} blocks of {} bytes, {}, block 0 at {}; server {}",
        c.table.len(),
        size,
        show::rkey(c.table[0].rkey),
        show::addr(c.table[0].addr),
        show::qpn(c.server_qpn)
    );
    let mut oob = c.oob;
    let pool = AsyncPool::new(c.qp, cq, channel, c.table);

    println!("step 3: wait for the server's \"go\" (so all clients run at the same time)");
    oob.expect_line("go", CONNECT)?;

    // How many operations may be in flight: every one of them needs a slot in the send queue
    // and, once complete, in the CQ (64 each here). A send CQ that overflows loses completions
    // on rxe, with one IBV_EVENT_CQ_ERR async event for each (chapter 08, case 15), and a
    // future waiting for a lost completion never resolves.
    let window = WINDOW.min(mine.len());
    println!(
        "step 4: write my blocks {list}: one RDMA WRITE each, {}",
        if window == mine.len() {
            format!("all {window} in flight at once")
        } else {
            format!("{window} in flight at a time")
        }
    );
    for (slot, &b) in mine.iter().enumerate() {
        local.as_mut_slice()[slot * size..(slot + 1) * size].copy_from_slice(&block_content(
            b,
            args.clients,
            size,
        ));
    }
    let slots: Vec<(usize, u32)> = mine.iter().copied().enumerate().collect();
    let mut completions = 0;
    for chunk in slots.chunks(window) {
        // Each write() checks the range, posts one work request and returns a future;
        // join_all polls them together; block_on sleeps on the completion channel's fd until
        // completions arrive, and wakes the futures they belong to.
        let ops: Vec<PoolOp> = chunk
            .iter()
            .map(|&(slot, b)| pool.write(b as usize, 0, &local, slot * size..(slot + 1) * size))
            .collect::<lab::Result<_>>()?;
        let results = pool.block_on(join_all(ops), OP)?;
        completions += results.into_iter().collect::<lab::Result<Vec<_>>>()?.len();
    }
    println!(
        "  {} WRITEs posted, {completions} completions, all IBV_WC_SUCCESS",
        mine.len()
    );

    println!("step 5: forget them locally, read them back with RDMA READ (the same way)");
    local.as_mut_slice().fill(0);
    for chunk in slots.chunks(window) {
        let ops: Vec<PoolOp> = chunk
            .iter()
            .map(|&(slot, b)| pool.read(b as usize, 0, &local, slot * size..(slot + 1) * size))
            .collect::<lab::Result<_>>()?;
        let results = pool.block_on(join_all(ops), OP)?;
        results.into_iter().collect::<lab::Result<Vec<_>>>()?;
    }
    let mut ok = true;
    for (slot, &b) in mine.iter().enumerate() {
        let got = &local.as_slice()[slot * size..(slot + 1) * size];
        let same = got == block_content(b, args.clients, size).as_slice();
        ok &= same;
        let sum = fnv1a(got);
        println!(
            "  block {b:>3}: \"{}\" checksum=0x{sum:016x} {}",
            header_of(got),
            if same { "matches" } else { "DIFFERS" }
        );
    }

    println!("step 6: tell the server we are done");
    oob.send_line(
        &format!(
            "done: {} blocks written and read back {}",
            mine.len(),
            if ok { "intact" } else { "DAMAGED" }
        ),
        OP,
    )?;
    Ok(ok)
}

// ---------------------------------------------------------------------------------------------
// The client role: start the workers, show their output, then misbehave on purpose

fn clients(args: &Args, host: &str) -> Result<bool> {
    let k = args.clients;
    // One process per client: copies of this program with `--client-index i`, each with its
    // own QP and its own blocks; then this process misbehaves on purpose.
    lab::course::client_role(
        k,
        "--client-index",
        WORK + CONNECT,
        &format!(
            "start {k} client processes (each its own QP and its own blocks: client i owns \
             blocks i, i+{k}, ...)"
        ),
        "a misbehaving client (this process, its own QP: \"misbehaving\")",
        || misbehave(args, host),
    )
}

/// Out-of-range requests are refused before posting; a forged rkey is refused by the server's
/// device, after the round trip.
fn misbehave(args: &Args, host: &str) -> Result<bool> {
    let (n, size) = (args.blocks as usize, args.block_size as u64);
    let (ctx, cm) = client_device(args, host)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let c = connect(&ctx, &pd, &cq, args, (host, cm), "misbehaving")?;
    check_table(&c.table, args)?;
    let mut oob = c.oob;
    oob.expect_line("go", CONNECT)?;
    let staging = pd.reg_mr(size as usize, AccessFlags::LOCAL_WRITE)?;
    // The blocking form this time: each call posts one work request and waits for it.
    let mut pool = RemotePool::new(c.qp, cq, staging, c.table.clone())?;
    pool.set_timeout(OP);
    let mut ok = true;

    println!("  3a: requests outside the table, refused by the client API (nothing posted)");
    let attempts: [(String, lab::Result<()>); 3] = [
        (
            format!("write(block {n}, offset 0, 8 bytes)"),
            pool.write(n, 0, b"12345678"),
        ),
        (
            format!("read(block 0, offset {}, 8 bytes)", size - 4),
            pool.read(0, size - 4, &mut [0; 8]),
        ),
        (
            "write(block 1, offset 2^64-1, 2 bytes)".to_string(),
            pool.write(1, u64::MAX, b"xy"),
        ),
    ];
    for (what, r) in attempts {
        match r {
            Err(e @ Error::OutOfBounds(_)) => println!("    {what}: {e}"),
            other => {
                ok = false;
                println!("    {what}: UNEXPECTED {other:?}");
            }
        }
    }
    let nothing = pool.in_flight() == 0 && pool.cq().poll_one()?.is_none();
    ok &= nothing;
    println!(
        "    work requests in flight: {}, completions on our CQ: {}",
        pool.in_flight(),
        if nothing { 0 } else { 1 }
    );

    println!("  3b: a correct READ of block 0 with the blocking form");
    let head = pool.read_vec(0, 0, 32)?;
    println!("    block 0 starts with \"{}\"", header_of(&head));
    ok &= header_of(&head) == header_of(&block_content(0, args.clients, 32));

    println!("  3c: the same WRITE with a forged rkey (the real one + 1): only the server's");
    println!("      device can tell, so the error comes back as a completion");
    let (qp, cq, staging) = pool.into_parts();
    let real = c.table[0].rkey;
    let forged: Vec<RemoteRegion> = c
        .table
        .iter()
        .map(|b| RemoteRegion {
            rkey: real.wrapping_add(1),
            ..*b
        })
        .collect();
    println!(
        "    real {}, forged {}",
        show::rkey(real),
        show::rkey(real.wrapping_add(1))
    );
    let mut pool = RemotePool::new(qp, cq, staging, forged)?;
    pool.set_timeout(OP);
    match pool.write(0, 0, b"FORGED!!") {
        Err(Error::Completion { wc }) if wc.status == WcStatus::RemAccessErr => {
            println!("    completion status: {}", wc.status);
            println!("    why: {}", wc.status.explanation());
        }
        other => {
            ok = false;
            println!("    UNEXPECTED: {other:?}");
        }
    }
    let st = pool.qp().state()?;
    println!("    our QP is now {st}: an RC connection does not survive a remote access error");
    ok &= st == QpState::Err;
    println!(
        "    we stop here (exit cleanly); to go on, a client creates a new QP and connects again"
    );
    oob.send_line(
        "done: forged rkey refused with IBV_WC_REM_ACCESS_ERR (10)",
        OP,
    )?;
    Ok(ok)
}

// ---------------------------------------------------------------------------------------------
// Benchmark: the pool API's blocking WRITE and READ, one at a time, like perftest's *_lat

fn bench_client(args: &Args, host: &str, iters: u32) -> Result<bool> {
    let size = args.block_size as usize;
    let (ctx, cm) = client_device(args, host)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let c = connect(&ctx, &pd, &cq, args, (host, cm), "bench")?;
    check_table(&c.table, args)?;
    let mut oob = c.oob;
    oob.expect_line("go", CONNECT)?;
    let staging = pd.reg_mr(size, AccessFlags::LOCAL_WRITE)?;
    let mut pool = RemotePool::new(c.qp, cq, staging, c.table)?;
    pool.set_timeout(OP);
    let data = block_content(0, 1, size);
    let mut buf = vec![0u8; size];
    println!("bench: {iters} x {size}-byte WRITE, then {iters} x READ, one at a time, block 0");
    let mut run = |name: &str, write: bool, pool: &mut RemotePool| -> Result<()> {
        for _ in 0..iters.min(100) {
            if write {
                pool.write(0, 0, &data)?;
            } else {
                pool.read(0, 0, &mut buf)?;
            }
        }
        let mut lat = Vec::with_capacity(iters as usize);
        let t0 = Instant::now();
        for _ in 0..iters {
            let t = Instant::now();
            if write {
                pool.write(0, 0, &data)?;
            } else {
                pool.read(0, 0, &mut buf)?;
            }
            lat.push(t.elapsed());
        }
        let total = t0.elapsed();
        lat.sort();
        let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];
        println!(
            "  {name:<5} median {} p99 {} min {} max {} {}",
            show::lat(pct(0.5)),
            show::lat(pct(0.99)),
            show::lat(lat[0]),
            show::lat(lat[lat.len() - 1]),
            show::ops(iters as u64, total)
        );
        Ok(())
    };
    run("WRITE", true, &mut pool)?;
    run("READ", false, &mut pool)?;
    if buf != data {
        return Err("the READs did not return what was written".into());
    }
    oob.send_line("done: benchmark finished", OP)?;
    Ok(true)
}

// ---------------------------------------------------------------------------------------------
// --case reconnect: reconnect done right, by hand (chapter 12 shows the rdma_cm variant)

/// A fresh 24-bit PSN: any value will do, but a new one for every connection, so that a late
/// packet of the old connection is very unlikely to fall in the new one's window (an FNV-1a
/// hash of the clock and the process id; not a cryptographic choice).
fn fresh_psn() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut bytes = nanos.to_le_bytes().to_vec();
    bytes.extend_from_slice(&std::process::id().to_le_bytes());
    (fnv1a(&bytes) & 0xff_ffff) as u32
}

/// The server role of `--case reconnect`: each server is a process of its own, so the first
/// can be killed (SIGKILL, as a crash would) and a second one started in its place.
fn supervisor() -> Result<bool> {
    use std::os::unix::process::ExitStatusExt;
    let exe = std::env::current_exe().or_fail("cannot find our own executable")?;
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
        let mut child = std::process::Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .args(["--server-round", &n.to_string()])
            .stdin(std::process::Stdio::null())
            .spawn()
            .or_fail("starting a server process")?;
        let deadline = Instant::now() + WORK + CONNECT;
        let status = loop {
            if let Some(st) = child.try_wait().or_fail("waiting for a server process")? {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "server {n} did not end within {} s: killed",
                    (WORK + CONNECT).as_secs()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        match (n, status.signal(), status.code()) {
            (1, Some(9), _) => println!("supervisor: server 1 was killed by SIGKILL (9)"),
            (2, None, Some(0)) => println!("supervisor: server 2 exited with 0"),
            _ => return Err(format!("server {n} ended with {status}").into()),
        }
    }
    lab::course::done(
        true,
        "server 1 crashed, server 2 took over and found the block",
    );
    Ok(true)
}

/// One server process of `--case reconnect`: a pool as in the course run, one client
/// connected by hand. Server 1 kills itself when the client asks; server 2 checks block 0.
fn reconnect_server(args: &Args, n: u32) -> Result<bool> {
    let (blocks, size) = (args.blocks as usize, args.block_size as usize);
    let ctx = lab::course::open_device(None)?;
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
    let table: Vec<RemoteRegion> = (0..blocks)
        .map(|i| RemoteRegion {
            addr: pool.addr() + (i * size) as u64,
            len: size as u64,
            rkey: pool.rkey(),
        })
        .collect();
    let cq = ctx.create_cq(16, None)?;
    let listener = Listener::bind(args.port)?;
    println!(
        "step 2: server {n}: listening on 0.0.0.0:{} for the reconnecting client",
        args.port
    );
    let me = Endpoint {
        name: "pool".into(),
        psn: fresh_psn(),
        gid: gid.gid.raw(),
        regions: table,
        ..Default::default()
    };
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    let mut peer = lab::course::accept_peer(&listener, qp, &me, "the client", CONNECT)?;
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
        let pid = std::process::id().to_string();
        std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .or_fail("kill(1)")?;
        std::thread::sleep(Duration::from_secs(5));
        return Err("SIGKILL did not kill us".into());
    }
    println!("step 4: server {n}: the client reported: {line}");
    let got = &pool.as_slice()[..size];
    let ok = got == block_content(0, args.clients, size).as_slice();
    println!(
        "step 5: server {n}: block 0 holds \"{}\" checksum=0x{:016x} {}",
        header_of(got),
        fnv1a(got),
        if ok { "ok" } else { "MISMATCH" }
    );
    Ok(ok)
}

/// The client of `--case reconnect`: one QP for the whole run, through two servers.
fn reconnect_client(args: &Args, host: &str) -> Result<bool> {
    let size = args.block_size as usize;
    let data = block_content(0, args.clients, size);
    let ctx = lab::course::open_device(None)?;
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
    // a fresh PSN, and connect_peer walks RESET -> INIT -> RTR -> RTS toward the server's.
    let connect_by_hand = |qp: QueuePair<state::Reset>| -> Result<(Peer, u32)> {
        let mine = Endpoint {
            name: "reconnecting".into(),
            psn: fresh_psn(),
            gid: gid.gid.raw(),
            ..Default::default()
        };
        let psn = mine.psn;
        let p = lab::course::connect_peer(host, args.port, qp, mine, "the pool server", CONNECT)?;
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
    let st = lab::course::wait_for_err(&qp, Duration::from_secs(2))?;
    println!("  our QP is now {st}: nothing more can be posted on this connection");
    ok &= st == QpState::Err;

    println!("step 6: back to a usable QP, the only way there is");
    match qp.modify(&lab::QpAttr::new().state(QpState::Init)) {
        Ok(()) => return Err("ibv_modify_qp(ERR -> INIT) was accepted".into()),
        Err(e) => {
            let errno = e.errno();
            println!(
                "  ibv_modify_qp(ERR -> INIT) is refused: {}: not a legal transition",
                errno.map_or(e.to_string(), |x| x.to_string())
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
    lab::course::done(
        ok,
        "the server's death was seen, the QP reset and connected again by hand, the work \
         carried on",
    );
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab::cm::MAX_ACCEPT_DATA;

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

    #[test]
    fn the_table_fits_the_accept_and_comes_back_whole() {
        let table: Vec<RemoteRegion> = (0..4096u64)
            .map(|i| RemoteRegion {
                addr: 0x7f00_0000_0000 + i * 64,
                len: 64,
                rkey: 0x1234,
            })
            .collect();
        let d = table_data(&table);
        assert!(d.len() <= MAX_ACCEPT_DATA);
        // The REP's private data arrives padded to 196 bytes.
        let mut padded = d.clone();
        padded.resize(MAX_ACCEPT_DATA, 0);
        assert_eq!(parse_table_data(&padded).unwrap(), table);
        assert!(parse_table_data(b"RGN1").is_none());
        assert_eq!(unframed(&framed("client-3")).unwrap(), "client-3");
    }

    #[test]
    fn fnv1a_known_values() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}
