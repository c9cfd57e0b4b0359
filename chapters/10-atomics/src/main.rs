//! # Chapter 10: atomics on the pool: a remote counter and a compare-and-swap lock
//!
//! Chapter 09's clients wrote disjoint blocks. Here K client processes on node b share
//! memory on node a, and the question is what stays correct when they touch the same words
//! at the same time. RDMA has two atomic verbs, executed by the *responder's* device on an
//! 8-byte word of a registered region, indivisibly with respect to every other atomic on
//! that device:
//!
//! * `IBV_WR_ATOMIC_FETCH_AND_ADD`: add a value, get the old one back;
//! * `IBV_WR_ATOMIC_CMP_AND_SWP`: if the word equals `compare`, replace it with `swap`; get
//!   the old value back either way (equal to `compare` iff the swap happened).
//!
//! What it shows:
//! 1. **a counter**: K clients x M fetch-and-adds on one word: the total is exactly K x M, and
//!    the old values that came back are 0 .. K x M - 1, each exactly once;
//! 2. **a spinlock**: CAS(0 -> my id) until it succeeds, then RDMA READ a record, modify it,
//!    RDMA WRITE it back, then CAS(my id -> 0): no update is lost;
//! 3. **the same read-modify-write without the lock**: updates are lost. To make the race
//!    show up reliably (not just sometimes), each client sleeps `--delay-us` between its READ
//!    and its WRITE, a window in which another client reads the same old value. The sleep is
//!    deliberate and the same in step 2, where the lock makes it harmless;
//! 4. **alignment**: an atomic on an address that is not 8-byte aligned. rxe's provider
//!    refuses it in `ibv_post_send` itself (`EINVAL (22)`, nothing is sent, the QP stays RTS).
//!
//! Verbs: `IBV_WR_ATOMIC_FETCH_AND_ADD`, `IBV_WR_ATOMIC_CMP_AND_SWP`, `IBV_ACCESS_REMOTE_ATOMIC`,
//! `atomic_cap` of `ibv_query_device`, plus RDMA READ/WRITE from chapter 09.
//!
//! Run it (pair topology):
//!
//! ```text
//! cargo lab run 10
//! cargo lab run 10 -- --clients 3 --iters 50
//! cargo lab run 10 -- --delay-us 0        # does the race still lose updates without the nap?
//! ```
//!
//! Roles: `--server` (node a) and `--connect HOST` (node b) take the same flags (`cargo lab run`
//! passes them to both); `--clients` and `--iters` must agree, `--delay-us` matters to the
//! clients only. The client role starts `--clients` worker processes (itself with the hidden
//! flag `--client-index I`), prints their output in index order, then tries a misaligned
//! atomic itself.

use std::process::ExitCode;
use std::time::{Duration, Instant};

// Errors, one style for every chapter (the course crate): `.or_fail("what we were doing")` and
// `expect(condition, || message)` make a Failure; main prints it and exits 1.
use clap::Parser;
use course::RemotePool;
use course::exchange::{Endpoint, LAB_PORT, Listener, OobStream};
use course::show::{self, Align, Table};
use course::{Failure, OrFail, Outcome as Result, Peer, expect};
use lab::{AccessFlags, QpInitAttr, QpState, Verb};

const PSN: u32 = 0x000200;
const CONNECT: Duration = Duration::from_secs(60);
const WORK: Duration = Duration::from_secs(150);
const OP: Duration = Duration::from_secs(20);

/// The pool: four small blocks in one MR.
const BLOCK: usize = 256;
const COUNTER: usize = 0; // block 0: the counter at offset 0, the probe's word at offset 8
const LOCK: usize = 1; // block 1: the lock word at offset 0 (0 = free, else holder + 1)
const GUARDED: usize = 2; // block 2: a record updated under the lock
const UNGUARDED: usize = 3; // block 3: the same record, updated without it
const NAMES: [&str; 4] = ["counter", "lock", "guarded record", "unguarded record"];

#[derive(Parser, Debug, Clone)]
#[command(
    name = "ch10-atomics",
    about = "Chapter 10: fetch-and-add counters and a compare-and-swap spinlock on a pool of \
             remote memory, shared by several client processes",
    after_help = "Both roles take the same flags (cargo lab run passes them to both).\n\
                  Examples:\n  ch10-atomics --server --clients 2 --iters 20\n  \
                  ch10-atomics --connect 10.77.0.1 --clients 2 --iters 20"
)]
struct Args {
    /// `--server` (serve the counter, the lock and the records), `--connect HOST` (work on
    /// them), `--clients K` client processes sharing them.
    #[command(flatten)]
    roles: course::cli::FanOut,
    /// Increments (and locked / unlocked updates) per client.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    iters: u32,
    /// Pause between a record's READ and its WRITE, in microseconds (the race window).
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    delay_us: u32,
    /// TCP port of the exchange.
    #[arg(long, default_value_t = LAB_PORT)]
    port: u16,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(msg) = args.roles.check() {
        eprintln!("error: {msg}\n\nFor more information, try '--help'.");
        return ExitCode::from(2);
    }
    let result = match (&args.roles.connect, args.roles.client_index) {
        (None, _) => server(&args),
        (Some(host), Some(i)) => worker(&args, host, i),
        (Some(host), None) => clients(&args, host),
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

/// The record in blocks 2 and 3: a total, then one count per client, as u64s.
fn record_len(clients: u32) -> usize {
    8 * (1 + clients as usize)
}

fn u64_at(bytes: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

fn set_u64_at(bytes: &mut [u8], i: usize, v: u64) {
    bytes[8 * i..8 * i + 8].copy_from_slice(&v.to_ne_bytes());
}

// ---------------------------------------------------------------------------------------------
// Server (node a)

fn server(args: &Args) -> Result<bool> {
    let (k, m) = (args.roles.clients as usize, args.iters as u64);

    println!("step 1: open the device; can it do atomics?");
    let ctx = course::open_device(None)?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let pd = ctx.alloc_pd()?;
    let dev = ctx.query_device()?;
    println!(
        "  device {} gid[{}] {}: atomic_cap={} (atomic with respect to other atomics on this \
         device, not to the CPU's own loads and stores)",
        ctx.name(),
        gid.index,
        show::gid(&gid.gid.raw()),
        dev.atomic_cap.name()
    );
    expect(dev.atomic_cap != lab::AtomicCap::None, || {
        "this device does not support atomics".to_string()
    })?;

    println!("step 2: one MR of 4 blocks x {BLOCK} bytes, with REMOTE_ATOMIC");
    // Without IBV_ACCESS_REMOTE_ATOMIC every atomic on this MR fails with
    // IBV_WC_REM_ACCESS_ERR (chapter 08).
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mut pool = pd.reg_mr(4 * BLOCK, access)?;
    pool.as_mut_slice().fill(0);
    let table = course::pool::block_table(&pool, 4, BLOCK);
    let mut t = Table::new([
        ("block", Align::Right),
        ("holds", Align::Left),
        ("rkey", Align::Left),
        ("addr", Align::Left),
    ])
    .indent(2);
    for (i, b) in table.iter().enumerate() {
        t.row([
            i.to_string(),
            NAMES[i].to_string(),
            show::rkey(b.rkey).to_string(),
            show::addr(b.addr).to_string(),
        ]);
    }
    print!("{t}");

    let listener = Listener::bind(args.port)?;
    println!(
        "step 3: listening on 0.0.0.0:{} for {k} clients, then 1 misaligned client",
        args.port
    );
    let cq = ctx.create_cq(64, None)?;
    // What every client receives: our QP (its number is filled in per connection), the table.
    let me = Endpoint {
        regions: table.clone(),
        ..Endpoint::rc("pool", PSN, gid.gid.raw())
    };
    let accept = |what: &str| -> Result<Peer> {
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
        course::accept_peer(&listener, qp, &me, what, CONNECT)
    };
    let mut conns = course::accept_clients(k, accept)?;

    println!("step 4: run the three phases; each starts when every client is ready for it");
    // The barriers are TCP lines: they only line the clients up so they really overlap.
    // Inside a phase this process does nothing; the device executes every atomic, READ and
    // WRITE by itself.
    let mut olds: Vec<u64> = vec![];
    for phase in ["counter", "lock", "race"] {
        for c in &mut conns {
            loop {
                let line = c.oob.recv_line(WORK).or_fail_with(|| {
                    format!("waiting for {} to be ready for {phase}", c.theirs.name)
                })?;
                if let Some(list) = line.strip_prefix("olds ") {
                    for v in list.split(',').filter(|s| !s.is_empty()) {
                        olds.push(
                            v.parse()
                                .or_fail_with(|| format!("{} sent {v:?}", c.theirs.name))?,
                        );
                    }
                    continue;
                }
                expect(line == format!("ready {phase}"), || {
                    format!(
                        "{} sent {line:?}, expected \"ready {phase}\"",
                        c.theirs.name
                    )
                })?;
                break;
            }
        }
        for c in &mut conns {
            c.oob.send_line(&format!("go {phase}"), OP)?;
        }
        println!("  phase {phase}: all {k} clients started");
    }
    for c in &mut conns {
        c.oob
            .expect_line("done", WORK)
            .or_fail_with(|| format!("waiting for {}'s \"done\"", c.theirs.name))?;
    }
    println!("  all {k} clients done");

    println!("step 5: the misaligned client");
    let mut probe = accept("the misaligned client")?;
    println!(
        "  {} connected: our {}",
        probe.theirs.name,
        show::qpn(probe.qp.qp_num())
    );
    probe.oob.send_line("go", OP)?;
    probe.oob.expect_line("done", WORK)?;
    println!(
        "  its connection on our side: {} (a refused post never reaches the wire)",
        probe.qp.state()?
    );

    println!("step 6: the results, read from this process's own memory");
    let mem = pool.as_slice();
    let expected = k as u64 * m;
    let mut ok = true;

    let counter = u64_at(&mem[COUNTER * BLOCK..], 0);
    ok &= counter == expected;
    println!(
        "  counter (fetch-and-add):    expected {k} x {m} = {expected}, observed {counter}: {}",
        if counter == expected {
            "exact"
        } else {
            "WRONG"
        }
    );
    olds.sort_unstable();
    let each_once = olds.iter().copied().eq(0..expected);
    ok &= each_once;
    println!(
        "  old values returned:        {} values; each of 0..{} exactly once: {}",
        olds.len(),
        expected.saturating_sub(1),
        if each_once { "yes" } else { "NO" }
    );

    let g = &mem[GUARDED * BLOCK..GUARDED * BLOCK + record_len(args.roles.clients)];
    let g_total = u64_at(g, 0);
    let g_each: Vec<u64> = (0..k).map(|i| u64_at(g, 1 + i)).collect();
    let g_ok = g_total == expected && g_each.iter().all(|&c| c == m);
    ok &= g_ok;
    println!(
        "  guarded record (CAS lock):  total expected {expected}, observed {g_total}; per client \
         [{}]: {}",
        g_each
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        if g_ok {
            "no update lost"
        } else {
            "UPDATES LOST"
        }
    );
    let lock = u64_at(&mem[LOCK * BLOCK..], 0);
    ok &= lock == 0;
    println!(
        "  lock word:                  {lock} ({})",
        if lock == 0 { "free" } else { "STILL HELD" }
    );

    let u = &mem[UNGUARDED * BLOCK..UNGUARDED * BLOCK + record_len(args.roles.clients)];
    let u_total = u64_at(u, 0);
    ok &= u_total <= expected;
    println!(
        "  unguarded record (no lock): total expected {expected}, observed {u_total} (lost {} \
         updates)",
        expected.saturating_sub(u_total)
    );
    println!(
        "  lost some updates without the lock: {}",
        match (u_total < expected, k) {
            (true, _) => "yes".to_string(),
            (false, 1) => "no (one client cannot race with itself)".to_string(),
            (false, _) => "no, not this time (try a longer --delay-us)".to_string(),
        }
    );

    let probe_word = u64_at(&mem[COUNTER * BLOCK..], 1);
    ok &= probe_word == 1;
    println!("  the misaligned client's aligned word: {probe_word} (one fetch-and-add)");

    let mut wcs = [lab::WorkCompletion::default(); 16];
    let n_wc = cq.poll_into(&mut wcs)?;
    ok &= n_wc == 0;
    println!("  our completion queue holds {n_wc} completions (the device did all the work)");
    course::done(ok, "the counter and the locked record are exact");
    Ok(ok)
}

// ---------------------------------------------------------------------------------------------
// Client side (node b)

/// A blocking pool client connected to the server (the chapter 09 connection, condensed).
fn connect(args: &Args, host: &str, name: &str) -> Result<(RemotePool, OobStream, u32)> {
    let ctx = course::open_device(None)?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    let mine = Endpoint::rc(name, PSN, gid.gid.raw());
    let p = course::connect_peer(host, args.port, qp, mine, "the pool server", CONNECT)?;
    let (qp, oob, srv) = (p.qp, p.oob, p.theirs);
    expect(
        srv.regions.len() == 4 && srv.regions.iter().all(|b| b.len == BLOCK as u64),
        || {
            format!(
                "the server sent {} blocks; expected 4 of {BLOCK} bytes (is it chapter 10's server?)",
                srv.regions.len()
            )
        },
    )?;
    // The staging region is where READ data and atomics' old values land.
    let staging = pd.reg_mr(BLOCK, AccessFlags::LOCAL_WRITE)?;
    let mut pool = RemotePool::new(qp, cq, staging, srv.regions)?;
    pool.set_timeout(OP);
    Ok((pool, oob, srv.qpn))
}

/// One read-modify-write of a record: READ it, add 1 to the total and to our count, pause
/// (the race window), WRITE it back.
fn read_modify_write(pool: &mut RemotePool, block: usize, args: &Args, me: usize) -> Result<()> {
    let mut rec = pool.read_vec(block, 0, record_len(args.roles.clients))?;
    let (total, mine) = (u64_at(&rec, 0), u64_at(&rec, 1 + me));
    set_u64_at(&mut rec, 0, total + 1);
    set_u64_at(&mut rec, 1 + me, mine + 1);
    std::thread::sleep(Duration::from_micros(args.delay_us as u64));
    pool.write(block, 0, &rec)?;
    Ok(())
}

fn worker(args: &Args, host: &str, index: u32) -> Result<bool> {
    let (m, me) = (args.iters, index as usize);
    let id = index as u64 + 1; // our lock value: never 0, which means "free"

    println!("step 1: connect to the pool");
    let (mut pool, mut oob, server_qpn) = connect(args, host, &format!("client-{index}"))?;
    println!(
        "  pool: 4 blocks, {}, counter at {}; server {}",
        show::rkey(pool.blocks()[COUNTER].rkey),
        show::addr(pool.blocks()[COUNTER].addr),
        show::qpn(server_qpn)
    );
    let mut ok = true;
    let barrier = |oob: &mut OobStream, phase: &str| -> Result<()> {
        oob.send_line(&format!("ready {phase}"), OP)?;
        oob.expect_line(&format!("go {phase}"), WORK)?;
        Ok(())
    };

    barrier(&mut oob, "counter")?;
    println!("step 2: {m} x FETCH_AND_ADD(+1) on the counter");
    let mut olds = Vec::with_capacity(m as usize);
    for _ in 0..m {
        olds.push(pool.fetch_add(COUNTER, 0, 1)?);
    }
    // Other clients increment in between, so our old values have gaps, but they only grow.
    let increasing = olds.windows(2).all(|w| w[0] < w[1]);
    ok &= increasing;
    println!(
        "  {m} old values came back, strictly increasing: {}",
        if increasing { "yes" } else { "NO" }
    );
    for chunk in olds.chunks(256) {
        let list: Vec<String> = chunk.iter().map(|v| v.to_string()).collect();
        oob.send_line(&format!("olds {}", list.join(",")), OP)?;
    }

    barrier(&mut oob, "lock")?;
    println!("step 3: {m} x (lock, READ-modify-WRITE the guarded record, unlock)");
    let mut still_ours = true;
    for _ in 0..m {
        // lock: CAS(0 -> id) until the old value is 0, i.e. our swap happened.
        let give_up = Instant::now() + WORK;
        while pool.compare_swap(LOCK, 0, 0, id)? != 0 {
            if Instant::now() > give_up {
                return Err(Failure(format!("could not take the lock within {WORK:?}")));
            }
        }
        read_modify_write(&mut pool, GUARDED, args, me)?;
        // unlock: CAS(id -> 0); the old value must be our id (nobody else held it meanwhile).
        // (A plain WRITE of 0 would do as well; CAS lets us check.)
        still_ours &= pool.compare_swap(LOCK, 0, id, 0)? == id;
    }
    ok &= still_ours;
    println!(
        "  every unlock found the lock still ours: {}",
        if still_ours { "yes" } else { "NO" }
    );

    barrier(&mut oob, "race")?;
    println!("step 4: {m} x READ-modify-WRITE of the unguarded record, no lock");
    for _ in 0..m {
        read_modify_write(&mut pool, UNGUARDED, args, me)?;
    }
    println!("  done (the server counts what survived)");
    oob.send_line("done", OP)?;
    Ok(ok)
}

fn clients(args: &Args, host: &str) -> Result<bool> {
    let k = args.roles.clients;
    // One process per client: copies of this program with `--client-index i`; then this
    // process posts a misaligned atomic on purpose.
    course::client_role(
        k,
        "--client-index",
        WORK + CONNECT,
        &format!("start {k} client processes, each with its own QP to the pool"),
        "a misaligned atomic (this process, its own QP: \"misaligned\")",
        || misaligned(args, host),
    )
}

/// An atomic must target an 8-byte aligned address. rxe's provider checks it when the work
/// request is posted: `ibv_post_send` returns EINVAL, nothing is sent, and the QP is fine.
fn misaligned(args: &Args, host: &str) -> Result<bool> {
    let (mut pool, mut oob, _) = connect(args, host, "misaligned")?;
    oob.expect_line("go", CONNECT)?;
    let mut ok = true;
    let base = pool.blocks()[COUNTER].addr;
    for (what, offset, r) in [
        (
            "FETCH_AND_ADD",
            12,
            pool.fetch_add(COUNTER, 12, 1).map(|_| ()),
        ),
        (
            "CMP_AND_SWP",
            4,
            pool.compare_swap(COUNTER, 4, 0, 1).map(|_| ()),
        ),
    ] {
        // The block starts on a page boundary, so the address is misaligned like the offset.
        println!(
            "  {what} on block 0 offset {offset} ({}: {offset} is not a multiple of 8):",
            show::addr(base + offset),
        );
        match r {
            Err(e) if e.verb() == Some(Verb::PostSend) && e.errno().map(|e| e.0) == Some(22) => {
                // The message names the verb and the errno (its hint, `atomic-alignment`,
                // repeats the address in raw hex, so it is not printed here).
                println!("    {e}");
            }
            other => {
                ok = false;
                println!("    UNEXPECTED: {other:?}");
            }
        }
    }
    let st = pool.qp().state()?;
    let empty = pool.cq().poll_one()?.is_none();
    println!(
        "  our QP is still {st}, our CQ is {}: the requests never left this host",
        if empty { "empty" } else { "NOT EMPTY" }
    );
    ok &= st == QpState::Rts && empty;
    let old = pool.fetch_add(COUNTER, 8, 1)?;
    println!("  FETCH_AND_ADD on block 0 offset 8 (aligned): returned {old}, the word is now 1");
    ok &= old == 0;
    oob.send_line("done", OP)?;
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout() {
        assert_eq!(record_len(2), 24);
        let mut r = vec![0u8; record_len(3)];
        set_u64_at(&mut r, 0, 7);
        set_u64_at(&mut r, 3, 9);
        assert_eq!((u64_at(&r, 0), u64_at(&r, 1), u64_at(&r, 3)), (7, 0, 9));
        // The largest record still fits a block.
        assert!(record_len(16) <= BLOCK);
    }
}
