//! The hot path allocates nothing: posting work requests (`ibv_post_send`, `ibv_post_recv`)
//! and polling completions (`ibv_poll_cq`) through `lab` make no heap allocation.
//!
//! A counting global allocator (one per test binary, hence this separate binary) counts
//! allocations made by this thread while a loop of ping-pong-like traffic runs: SEND + RECV,
//! a chain of RDMA WRITEs with selective signaling, an RDMA READ and an atomic, each polled
//! to completion. The count must be zero.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use harness::Topology;
use harness::testing::in_lab;
use lab::*;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn count_allocs(f: impl FnOnce()) -> u64 {
    ALLOCS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(Cell::get)
}

const T: Duration = Duration::from_secs(10);

#[test]
fn post_and_poll_allocate_nothing() {
    in_lab(Topology::Loopback, "post_and_poll_allocate_nothing", || {
        let ctx = Context::open_default().unwrap();
        let gid = ctx.roce_v2_ipv4_gid(1).unwrap().gid;
        let pd = ctx.alloc_pd().unwrap();
        let cq_a = ctx.create_cq(64, None).unwrap();
        let cq_b = ctx.create_cq(64, None).unwrap();
        let a = pd.create_qp(&QpInitAttr::rc(&cq_a, &cq_a)).unwrap();
        let b = pd.create_qp(&QpInitAttr::rc(&cq_b, &cq_b)).unwrap();
        let (qa, qb) = (a.qp_num(), b.qp_num());
        let a = a
            .bring_up(
                &InitAttr::default(),
                &RtrAttr::new(qb, 2, gid),
                &RtsAttr::new(1),
            )
            .unwrap();
        let b = b
            .bring_up(
                &InitAttr::default(),
                &RtrAttr::new(qa, 1, gid),
                &RtsAttr::new(2),
            )
            .unwrap();
        let mr_a = pd.reg_mr(4096, AccessFlags::ALL_REMOTE).unwrap();
        let mr_b = pd.reg_mr(4096, AccessFlags::ALL_REMOTE).unwrap();
        let r = mr_b.remote();
        let send = [mr_a.sge(0..64)];
        let recv = [mr_b.sge(0..64)];
        let w = [mr_a.sge(64..128)];
        let rd = [mr_a.sge(1024..2048)];
        let at = mr_a.sge(2048..2056);
        let mut wcs = [WorkCompletion::default(); 4];

        // One warm-up round outside the count (lazy statics, first-use paths in libibverbs
        // are not ours to judge).
        let round = |i: u64, wcs: &mut [WorkCompletion; 4]| {
            b.post_recv(&mut [RecvWr::new(i, &recv)]).unwrap();
            a.post_send(&mut [SendWr::send(i, &send)]).unwrap();
            cq_b.poll_exact(&mut wcs[..1], T).unwrap();
            cq_a.poll_exact(&mut wcs[..1], T).unwrap();
            a.post_send(&mut [
                SendWr::write(i, &w, r.addr, r.rkey).unsignaled(),
                SendWr::write(i, &w, r.addr + 64, r.rkey).unsignaled(),
                SendWr::read(i, &rd, r.addr, r.rkey),
                SendWr::fetch_add(i, &at, r.addr + 2048, r.rkey, 1),
            ])
            .unwrap();
            cq_a.poll_exact(&mut wcs[..2], T).unwrap();
            for wc in wcs.iter() {
                assert!(wc.is_success());
            }
        };
        round(0, &mut wcs);
        let n = count_allocs(|| {
            for i in 1..=50 {
                round(i, &mut wcs);
            }
        });
        assert_eq!(n, 0, "the hot path allocated {n} times");
        assert_eq!(mr_b.read_u64(2048).unwrap(), 51);
    });
}
