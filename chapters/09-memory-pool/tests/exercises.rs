//! Chapter 09's exercise checks, on the loopback lab's real rxe device (the shape:
//! docs/exercises.md):
//!
//! - `locate` checks exercise 09-locate (`LAB_EXERCISE_IMPL`: `starter` or `solution`): a
//!   pool of 4 blocks of 256 bytes in one MR, its table, and requests the exercise's `locate`
//!   must let through (one ending exactly at its block's end) or refuse (no such block, past
//!   the block's end, an offset that overflows). Every `Some` is posted as a real RDMA WRITE
//!   from a second QP; then every byte of the pool must be as expected.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite), the dev check: the starter fails naming
//!   step 1, a planted check against the pool's end fails showing the bytes rxe wrote into the
//!   next block, a planted `<` that refuses an exact fit fails, the reference solution passes.

use course::connected_pair;
use course::exchange::RemoteRegion;
use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::{AccessFlags, Context, SendWr, WcStatus};
use std::time::Duration;

#[path = "../exercises/solutions/locate.rs"]
mod solution;
#[path = "../exercises/locate.rs"]
mod starter;

type Locate = fn(&[RemoteRegion], usize, u64, u64) -> Option<(u64, u32)>;

fn chosen(imp: Impl) -> Locate {
    match imp {
        Impl::Starter => starter::locate,
        Impl::Solution => solution::locate,
    }
}

const BLOCKS: usize = 4;
const BLOCK: u64 = 256;

/// (block, offset, len, fits): what each request asks and whether it is inside its block.
const REQUESTS: [(usize, u64, u64, bool); 6] = [
    (2, 10, 16, true),
    (3, 240, 16, true),      // ends exactly at the end of the pool's last block
    (4, 0, 1, false),        // no such block
    (0, 250, 16, false),     // 6 bytes past block 0: into block 1, inside the MR
    (1, u64::MAX, 2, false), // offset + len overflows
    (2, 0, 257, false),      // longer than a block
];

/// The check: the pool, its table, then each request through `locate` and the wire.
fn check_locate(locate: Locate) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let total = BLOCKS * BLOCK as usize;
    let pool = pd
        .reg_mr(total, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .expect("ibv_reg_mr of the pool");
    let r = pool.remote();
    let table: Vec<RemoteRegion> = (0..BLOCKS as u64)
        .map(|i| RemoteRegion {
            addr: r.addr + i * BLOCK,
            len: BLOCK,
            rkey: r.rkey,
        })
        .collect();
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let cq = ctx.create_cq(16, None).expect("ibv_create_cq");
    let cq_pool = ctx.create_cq(16, None).expect("ibv_create_cq");
    let (writer, _pool_qp) = connected_pair(&pd, &cq, &cq_pool, gid).expect("connect two QPs");
    let mut src = pd
        .reg_mr(total, AccessFlags::LOCAL_WRITE)
        .expect("ibv_reg_mr");
    src.as_mut_slice().fill(0xab);
    let mut want = vec![0u8; total];
    for (n, &(block, offset, len, fits)) in REQUESTS.iter().enumerate() {
        let req = format!("write(block {block}, offset {offset}, {len} bytes)");
        let got = step("locate", || locate(&table, block, offset, len));
        match (got, fits) {
            (None, false) => continue,
            (None, true) => fail(
                &format!("{req} was refused, but it fits: block {block} is {BLOCK} bytes"),
                &format!("Some(({:#x}, rkey))", table[block].addr + offset),
                "None",
            ),
            (Some(_), false) if block >= BLOCKS => fail(
                &format!("{req} was let through, but the pool has {BLOCKS} blocks"),
                "None",
                "Some(..)",
            ),
            (Some(_), false) if offset.checked_add(len).is_none() => fail(
                &format!("{req} was let through: offset + len overflows"),
                "None",
                "Some(..)",
            ),
            (Some((addr, rkey)), fits) => {
                let sge = [src.sge(0..len as usize)];
                writer
                    .post_send_one(SendWr::write(n as u64, &sge, addr, rkey))
                    .expect("ibv_post_send");
                let wc = cq
                    .wait_one(Duration::from_secs(10))
                    .expect("the WRITE's completion");
                if fits && wc.status == WcStatus::Success {
                    // Where the bytes belong, whatever address `locate` gave: a wrong one
                    // shows in the final comparison.
                    let start = (block as u64 * BLOCK + offset) as usize;
                    want[start..start + len as usize].fill(0xab);
                } else {
                    let mut now = vec![0u8; total];
                    pool.read_into(0, &mut now).expect("read the pool");
                    let spilled = now.iter().zip(&want).filter(|(a, b)| a != b).count();
                    fail(
                        &format!(
                            "{req} was let through and rxe completed it with {}: {spilled} \
                             bytes changed outside what the request may touch; the MR covers \
                             the whole pool, so only your check keeps a block's writes in it",
                            wc.status
                        ),
                        &format!("None (block {block} is {BLOCK} bytes)"),
                        &format!("Some(({addr:#x}, {rkey:#x}))"),
                    );
                }
            }
        }
    }
    let mut now = vec![0u8; total];
    pool.read_into(0, &mut now).expect("read the pool");
    if now != want {
        let at = now.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        fail(
            "the WRITEs completed, but the pool's bytes are not where the requests put them",
            &format!("byte {at} = {:#04x}", want[at]),
            &format!("byte {at} = {:#04x}", now[at]),
        );
    }
}

#[test]
fn locate() {
    in_lab(Topology::Loopback, "locate", || match Impl::from_env() {
        Some(imp) => check_locate(chosen(imp)),
        None => dev_check(),
    });
}

/// Every implementation: the starter fails naming step 1, planted mistakes fail with their
/// messages, the reference solution passes.
fn dev_check() {
    assert_fails_with("locate: not written yet (step 1:", || {
        check_locate(starter::locate)
    });
    // Checked against the end of the pool (the MR) instead of the block's.
    assert_fails_with(
        "write(block 0, offset 250, 16 bytes) was let through and rxe completed it with \
         IBV_WC_SUCCESS (0)",
        || {
            check_locate(|t, block, offset, len| {
                let b = t.get(block)?;
                let pool_end = t.last()?.addr + t.last()?.len;
                let end = (b.addr + offset).checked_add(len)?;
                (end <= pool_end).then_some((b.addr + offset, b.rkey))
            })
        },
    );
    // `<` where `<=` belongs: a request ending exactly at the block's end is refused.
    assert_fails_with(
        "write(block 3, offset 240, 16 bytes) was refused, but it fits",
        || {
            check_locate(|t, block, offset, len| {
                let b = t.get(block)?;
                (offset.checked_add(len)? < b.len).then_some((b.addr + offset, b.rkey))
            })
        },
    );
    check_locate(solution::locate);
}
