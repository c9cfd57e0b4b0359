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
//! The count is of CAS completions (their old value equal to `compare`), not of packets on a
//! wire: the loopback lab records no trace.

use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::course::connected_pair;
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
        fail("acquire failed", "the lock taken", &e.to_string());
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
        fail("release failed", "the lock given back", &e.to_string());
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
