//! Chapter 10's exercise checks, on the loopback lab's real rxe device (docs/exercises.md
//! describes the shape every chapter's `tests/exercises.rs` follows):
//!
//! - `cas_lock` checks exercise 10-cas-lock, the implementation `LAB_EXERCISE_IMPL` names
//!   (`starter` or `solution`): three clients, each with its own QP, add 1 to a counter 200
//!   times with an RDMA READ and WRITE under the lock; the counter must be exact, the lock
//!   word must hold the holder's token, and 2 CAS per increment must have swapped.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite) it runs the dev check instead: the starter
//!   fails naming the step still to write, planted wrong ones (an acquire without CAS; a
//!   release that leaves the word) fail with what they leave, the reference solution passes.
//!
//! - `tickets` checks exercise 10-tickets: three clients, each with its own QP, take 100
//!   tickets each (after one the check takes first) with FETCH_AND_ADD on a counter your
//!   code registers; the tickets must be exactly 0..=300, each once, and the counter 301.
//!   Its dev check plants a counter without `IBV_ACCESS_REMOTE_ATOMIC`, an address 4 bytes
//!   into it, and a ticket that is the new value instead of the old one.
//!
//! The count is of CAS completions (their old value equal to `compare`), not of packets on a
//! wire: the loopback lab records no trace.

use course::connected_pair;
use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::{
    AccessFlags, CompletionQueue, Context, Gid, MemoryRegion, ProtectionDomain, QueuePair,
    RemoteRegion, SendWr,
};
use std::cell::Cell;
use std::time::{Duration, Instant};

#[path = "../exercises/solutions/cas_lock.rs"]
mod solution;
#[path = "../exercises/cas_lock.rs"]
mod starter;
#[path = "../exercises/solutions/tickets.rs"]
mod tickets_solution;
#[path = "../exercises/tickets.rs"]
mod tickets_starter;

const CLIENTS: u64 = 3;
const ITERS: u64 = 200;
/// Offsets in the shared region: the lock word, the counter.
const LOCK: u64 = 0;
const COUNTER: u64 = 8;
/// A spin that has not got the lock by then is stuck.
const DEADLINE: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(10);

/// One client's handle on the shared lock word: its own QP, CQ and 8-byte staging region.
#[derive(Debug)]
pub struct Lock {
    qp: QueuePair,
    cq: CompletionQueue,
    _peer: (QueuePair, CompletionQueue),
    staging: MemoryRegion,
    shared: RemoteRegion,
    until: Instant,
    swapped: Cell<u64>,
}

impl Lock {
    /// One `IBV_WR_ATOMIC_CMP_AND_SWP` on the lock word: if it equals `compare` it becomes
    /// `swap`. Returns the old value (equal to `compare` iff the swap happened). Errors once
    /// the check's deadline has passed.
    pub fn compare_swap(&self, compare: u64, swap: u64) -> lab::Result<u64> {
        if Instant::now() > self.until {
            return Err(lab::Error::InvalidArgument(
                format!("the check's deadline ({DEADLINE:?}) passed: the lock never came free")
                    .into(),
            ));
        }
        let sge = self.staging.sge(0..8);
        self.qp.post_send_one(SendWr::compare_swap(
            1,
            &sge,
            self.shared.addr + LOCK,
            self.shared.rkey,
            compare,
            swap,
        ))?;
        self.cq.wait_one(WAIT)?.ok()?;
        let mut old = [0u8; 8];
        self.staging.read_into(0, &mut old)?;
        let old = u64::from_ne_bytes(old);
        if old == compare {
            self.swapped.set(self.swapped.get() + 1);
        }
        Ok(old)
    }

    /// The counter, incremented by a plain READ and WRITE: safe only under the lock.
    fn increment(&self) -> lab::Result<()> {
        let sge = self.staging.sge(0..8);
        let at = self.shared.addr + COUNTER;
        self.qp
            .post_send_one(SendWr::read(2, &[sge], at, self.shared.rkey))?;
        self.cq.wait_one(WAIT)?.ok()?;
        let mut v = [0u8; 8];
        self.staging.read_into(0, &mut v)?;
        self.staging.write_u64(0, u64::from_ne_bytes(v) + 1)?;
        self.qp
            .post_send_one(SendWr::write(3, &[sge], at, self.shared.rkey))?;
        self.cq.wait_one(WAIT)?.ok()?;
        Ok(())
    }
}

type Acquire = fn(&Lock, u64) -> lab::Result<()>;
type Impls = (Acquire, Acquire);

fn chosen(imp: Impl) -> Impls {
    match imp {
        Impl::Starter => (starter::acquire, starter::release),
        Impl::Solution => (solution::acquire, solution::release),
    }
}

fn client(ctx: &Context, pd: &ProtectionDomain, shared: RemoteRegion, gid: Gid) -> Lock {
    let cq = ctx.create_cq(16, None).expect("ibv_create_cq");
    let cq_b = ctx.create_cq(16, None).expect("ibv_create_cq");
    let (qp, b) = connected_pair(pd, &cq, &cq_b, gid).expect("connect two QPs");
    let staging = pd.reg_mr(8, AccessFlags::LOCAL_WRITE).expect("ibv_reg_mr");
    Lock {
        qp,
        cq,
        _peer: (b, cq_b),
        staging,
        shared,
        until: Instant::now() + DEADLINE,
        swapped: Cell::new(0),
    }
}

fn word(mr: &MemoryRegion, at: u64) -> u64 {
    let mut b = [0u8; 8];
    mr.read_into(at as usize, &mut b).expect("read the region");
    u64::from_ne_bytes(b)
}

/// One locked increment, checking the lock word on each side of it. `named`: run the
/// learner's code through `step` (on the check's own thread only: `step` swaps the panic hook).
fn locked_increment(lock: &Lock, shared: &MemoryRegion, me: u64, imp: Impls, named: bool) {
    let run = |what: &str, f: Acquire| {
        if named {
            step(what, || f(lock, me))
        } else {
            f(lock, me)
        }
    };
    if let Err(e) = run("acquire", imp.0) {
        fail("acquire failed", "the lock taken", &e.report().to_string());
    }
    let held = word(shared, LOCK);
    if held != me {
        fail(
            &format!("after acquire, the lock word holds {held}, not this client's token {me}"),
            &format!("{me} (the CAS from 0 to {me} swapped)"),
            &held.to_string(),
        );
    }
    lock.increment().expect("the READ and WRITE of the counter");
    if let Err(e) = run("release", imp.1) {
        fail(
            "release failed",
            "the lock given back",
            &e.report().to_string(),
        );
    }
}

/// The check: one probe increment on this thread (where a `todo!` becomes a named step),
/// then three clients on threads, ITERS increments each.
fn check_cas_lock(imp: Impls) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_ATOMIC;
    let shared = pd.reg_mr(16, access).expect("ibv_reg_mr");
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let probe = client(&ctx, &pd, shared.remote(), gid);
    locked_increment(&probe, &shared, CLIENTS + 1, imp, true);
    let after = word(&shared, LOCK);
    if after != 0 {
        fail(
            &format!("after release, the lock word still holds {after}: the lock stays taken"),
            "0 (the CAS from the token back to 0 swapped)",
            &after.to_string(),
        );
    }
    let swapped_probe = probe.swapped.get();
    let (ctx, pd, shared_ref) = (&ctx, &pd, &shared);
    let results: Vec<std::thread::Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..=CLIENTS)
            .map(|me| {
                s.spawn(move || {
                    let lock = client(ctx, pd, shared_ref.remote(), gid);
                    for _ in 0..ITERS {
                        locked_increment(&lock, shared_ref, me, imp, false);
                    }
                    lock.swapped.get()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut swapped = swapped_probe;
    for r in results {
        match r {
            Ok(n) => swapped += n,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into());
                panic!("{msg}");
            }
        }
    }
    let total = word(&shared, COUNTER);
    let want = CLIENTS * ITERS + 1;
    if total != want {
        fail(
            &format!(
                "the counter lost {} increments: the lock let two clients in",
                want - total
            ),
            &format!("{want} ({CLIENTS} clients x {ITERS}, and the probe's 1)"),
            &total.to_string(),
        );
    }
    if swapped != 2 * want {
        fail(
            "the CAS completions that swapped are not 2 per increment (one to take, one to give back)",
            &format!("{} swaps", 2 * want),
            &format!("{swapped} swaps"),
        );
    }
    eprintln!(
        "cas_lock: counter {total}; {swapped} CAS completions swapped ({CLIENTS} clients x {ITERS})"
    );
}

#[test]
fn cas_lock() {
    in_lab(Topology::Loopback, "cas_lock", || match Impl::from_env() {
        Some(imp) => check_cas_lock(chosen(imp)),
        None => dev_check(),
    });
}

/// Every implementation: the starter fails naming its first step, planted mistakes fail with
/// their messages, the reference solution passes.
fn dev_check() {
    assert_fails_with("acquire: not written yet (step 1:", || {
        check_cas_lock((starter::acquire, starter::release))
    });
    assert_fails_with("release: not written yet (step 2:", || {
        check_cas_lock((solution::acquire, starter::release))
    });
    assert_fails_with(
        "after acquire, the lock word holds 0, not this client's token 4",
        || check_cas_lock((|_, _| Ok(()), solution::release)),
    );
    assert_fails_with("after release, the lock word still holds 4", || {
        check_cas_lock((solution::acquire, |_, _| Ok(())))
    });
    check_cas_lock((solution::acquire, solution::release));
}

/// One client of the ticket dispenser: its own QP (and the peer QP the check keeps), its CQ,
/// an 8-byte staging region (LOCAL_WRITE) where a FETCH_AND_ADD's old value lands, and the
/// shared counter's address and rkey.
#[derive(Debug)]
pub struct Dispenser {
    pub qp: QueuePair,
    pub cq: CompletionQueue,
    pub staging: MemoryRegion,
    pub counter: RemoteRegion,
    /// How long to wait for one completion.
    pub wait: Duration,
    _peer: (QueuePair, CompletionQueue),
}

type Register = fn(&ProtectionDomain) -> lab::Result<MemoryRegion>;
type Take = fn(&Dispenser) -> lab::Result<u64>;

fn tickets_chosen(imp: Impl) -> (Register, Take) {
    match imp {
        Impl::Starter => (
            tickets_starter::register_counter,
            tickets_starter::take_ticket,
        ),
        Impl::Solution => (
            tickets_solution::register_counter,
            tickets_solution::take_ticket,
        ),
    }
}

const TICKETS: u64 = 100;

fn dispenser(ctx: &Context, pd: &ProtectionDomain, counter: RemoteRegion, gid: Gid) -> Dispenser {
    let cq = ctx.create_cq(16, None).expect("ibv_create_cq");
    let cq_b = ctx.create_cq(16, None).expect("ibv_create_cq");
    let (qp, b) = connected_pair(pd, &cq, &cq_b, gid).expect("connect two QPs");
    let staging = pd.reg_mr(8, AccessFlags::LOCAL_WRITE).expect("ibv_reg_mr");
    Dispenser {
        qp,
        cq,
        staging,
        counter,
        wait: WAIT,
        _peer: (b, cq_b),
    }
}

/// A failed take, told by what rxe did: refused at post time, or a completion's status.
fn take_failed(e: &lab::Error, counter: &MemoryRegion) -> ! {
    let access = format!("the counter's access: {:?}", counter.access());
    if let Some(wc) = e.completion() {
        fail(
            &format!(
                "the FETCH_AND_ADD completed with {}: rxe's responder refused it",
                wc.status
            ),
            "IBV_WC_SUCCESS (0) and the old value",
            &format!("{} ({access})", wc.status),
        );
    }
    if let lab::Error::Verb {
        verb: lab::Verb::PostSend,
        errno,
        ..
    } = e
    {
        fail(
            &format!("ibv_post_send refused the FETCH_AND_ADD: {errno}"),
            "the work request posted",
            &e.report().to_string(),
        );
    }
    fail("take_ticket failed", "a ticket", &e.report().to_string())
}

/// The check: the counter through your `register_counter`, one ticket on this thread (where
/// a `todo!` becomes a named step), then three clients on threads, TICKETS each.
fn check_tickets((register, take): (Register, Take)) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let counter = match step("register_counter", || register(&pd)) {
        Ok(mr) => mr,
        Err(e) => fail(
            "ibv_reg_mr refused the counter",
            "a region",
            &e.report().to_string(),
        ),
    };
    if counter.len() < 8 {
        fail(
            &format!("the counter region holds {} bytes", counter.len()),
            "8 bytes (one u64)",
            &counter.len().to_string(),
        );
    }
    let first = dispenser(&ctx, &pd, counter.remote(), gid);
    let t0 = step("take_ticket", || take(&first)).unwrap_or_else(|e| take_failed(&e, &counter));
    if t0 != 0 {
        fail(
            &format!("the first ticket is {t0}: a ticket is the counter's value before the add"),
            "0 (the counter started at 0)",
            &t0.to_string(),
        );
    }
    let (ctx_ref, pd_ref, remote) = (&ctx, &pd, counter.remote());
    let per_client: Vec<lab::Result<Vec<u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|_| {
                s.spawn(move || {
                    let d = dispenser(ctx_ref, pd_ref, remote, gid);
                    (0..TICKETS).map(|_| take(&d)).collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a client thread panicked"))
            .collect()
    });
    let mut all = vec![t0];
    for (i, r) in per_client.into_iter().enumerate() {
        let mine = r.unwrap_or_else(|e| take_failed(&e, &counter));
        if let Some(w) = mine.windows(2).find(|w| w[1] <= w[0]) {
            fail(
                &format!("client {i}'s tickets went from {} to {}", w[0], w[1]),
                "each client's tickets strictly increasing",
                &format!("{mine:?}"),
            );
        }
        all.extend(mine);
    }
    all.sort_unstable();
    let n = CLIENTS * TICKETS + 1;
    let want: Vec<u64> = (0..n).collect();
    if all != want {
        let missing: Vec<u64> = want.iter().filter(|t| !all.contains(t)).copied().collect();
        let twice = all.windows(2).filter(|w| w[0] == w[1]).count();
        fail(
            &format!(
                "the tickets are not 0..={} each once: {} missing, {twice} handed out twice",
                n - 1,
                missing.len()
            ),
            &format!("0..={}", n - 1),
            &format!("missing {:?}", &missing[..missing.len().min(8)]),
        );
    }
    let end = word(&counter, 0);
    if end != n {
        fail(
            "the counter does not hold the number of tickets taken",
            &n.to_string(),
            &end.to_string(),
        );
    }
    eprintln!(
        "tickets: {n} tickets 0..={}, each once; counter {end}",
        n - 1
    );
}

#[test]
fn tickets() {
    in_lab(Topology::Loopback, "tickets", || match Impl::from_env() {
        Some(imp) => check_tickets(tickets_chosen(imp)),
        None => tickets_dev_check(),
    });
}

/// The starter fails naming its first step, planted mistakes fail with what rxe did, the
/// reference solution passes.
fn tickets_dev_check() {
    use tickets_solution::{register_counter, take_ticket};
    assert_fails_with("register_counter: not written yet (step 1:", || {
        check_tickets((
            tickets_starter::register_counter,
            tickets_starter::take_ticket,
        ))
    });
    assert_fails_with("take_ticket: not written yet (step 2:", || {
        check_tickets((register_counter, tickets_starter::take_ticket))
    });
    assert_fails_with(
        "the FETCH_AND_ADD completed with IBV_WC_REM_ACCESS_ERR (10): rxe's responder refused it",
        || {
            check_tickets((
                |pd| {
                    pd.reg_mr(
                        8,
                        AccessFlags::LOCAL_WRITE
                            | AccessFlags::REMOTE_READ
                            | AccessFlags::REMOTE_WRITE,
                    )
                },
                take_ticket,
            ))
        },
    );
    assert_fails_with(
        "ibv_post_send refused the FETCH_AND_ADD: EINVAL (22)",
        || {
            check_tickets((register_counter, |d| {
                let sge = d.staging.sge(0..8);
                let at = d.counter.addr + 4;
                d.qp.post_send_one(SendWr::fetch_add(1, &sge, at, d.counter.rkey, 1))?;
                d.cq.wait_one(d.wait)?.ok()?;
                d.staging.read_u64(0)
            }))
        },
    );
    assert_fails_with(
        "the first ticket is 1: a ticket is the counter's value before the add",
        || check_tickets((register_counter, |d| take_ticket(d).map(|old| old + 1))),
    );
    check_tickets((register_counter, take_ticket));
}
