//! Device tests of `course::pool`, the remote block pool chapters 09 and 10 use, on the
//! loopback lab's rxe device: a pool client on QP A writes, reads and updates blocks of B's
//! region, blocking, split-phase and as futures.
//!
//! Each test runs through `harness::testing::in_lab`, as `lab`'s device tests do (inside the
//! lab the body runs directly; on the host the harness re-runs the test inside the lab).

use std::time::Duration;

use course::{AsyncPool, PoolOp, RemotePool, Ticket, join_all};
use harness::Topology;
use harness::testing::in_lab;
use lab::*;

const T: Duration = Duration::from_secs(10);

/// Two RC QPs on one device, connected to each other (`course::connected_pair`), each with
/// its own CQ and 4 KiB MR. Field order is also drop order; `lab` keeps parents alive anyway.
struct Pair {
    a: QueuePair,
    b: QueuePair,
    cq_a: CompletionQueue,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
    _pd: ProtectionDomain,
}

fn open() -> Context {
    Context::open_default().expect("open the rxe device")
}

impl Pair {
    fn new() -> Pair {
        Pair::on(open(), None)
    }

    /// A pair on `ctx`; A's CQ reports events on `ch` (a channel of the same context).
    fn on(ctx: Context, ch: Option<&CompletionChannel>) -> Pair {
        let pd = ctx.alloc_pd().unwrap();
        let cq_a = ctx.create_cq(64, ch).unwrap();
        let cq_b = ctx.create_cq(64, None).unwrap();
        let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
        let (a, b) = course::connected_pair(&pd, &cq_a, &cq_b, gid).expect("connect A and B");
        let mr_a = pd.reg_mr(4096, AccessFlags::ALL_REMOTE).unwrap();
        let mr_b = pd.reg_mr(4096, AccessFlags::ALL_REMOTE).unwrap();
        Pair {
            a,
            b,
            cq_a,
            mr_a,
            mr_b,
            _pd: pd,
        }
    }
}

#[test]
fn pool_write_read_atomics_and_bounds() {
    in_lab(
        Topology::Loopback,
        "pool_write_read_atomics_and_bounds",
        || {
            let Pair {
                a,
                b: _b,
                cq_a,
                mr_a,
                mr_b,
                _pd: pd,
                ..
            } = Pair::new();
            let whole = mr_b.remote();
            let blocks: Vec<RemoteRegion> = (0..4)
                .map(|i| RemoteRegion {
                    addr: whole.addr + i * 1024,
                    len: 1024,
                    rkey: whole.rkey,
                })
                .collect();
            let staging = pd.reg_mr(1024, AccessFlags::LOCAL_WRITE).unwrap();
            let mut pool = RemotePool::new(a, cq_a, staging, blocks).unwrap();

            pool.write(2, 10, b"block two").unwrap();
            assert_eq!(&mr_b.as_slice()[2048 + 10..2048 + 19], b"block two");
            assert_eq!(pool.read_vec(2, 10, 9).unwrap(), b"block two");

            // Out of range: refused before anything is posted.
            let e = pool.write(4, 0, b"x").unwrap_err();
            assert!(matches!(e, Error::OutOfBounds(_)), "{e}");
            let e = pool.read_vec(1, 1020, 8).unwrap_err();
            assert!(e.to_string().contains("outside block 1"), "{e}");
            assert_eq!(pool.cq().poll_one().unwrap(), None);

            for i in 0..3 {
                assert_eq!(pool.fetch_add(0, 0, 1).unwrap(), i);
            }
            assert_eq!(mr_b.read_u64(0).unwrap(), 3);
            assert_eq!(pool.compare_swap(0, 0, 3, 100).unwrap(), 3);
            assert_eq!(pool.compare_swap(0, 0, 3, 200).unwrap(), 100);
            assert_eq!(mr_b.read_u64(0).unwrap(), 100);

            // A misaligned atomic: rxe refuses it at post time (EINVAL); the QP stays usable.
            let e = pool.fetch_add(0, 4, 1).unwrap_err();
            assert_eq!(e.errno(), Some(Errno(libc::EINVAL)));
            let codes: Vec<HintCode> = e.hints().iter().map(Hint::code).collect();
            assert_eq!(codes, [HintCode::AtomicAlignment], "{}", e.report());
            assert_eq!(pool.qp().state().unwrap(), QpState::Rts);

            // Split-phase: three writes in flight, collected in reverse order.
            mr_a.write_from(0, &[7u8; 300]).unwrap();
            let t: Vec<Ticket> = (0..3)
                .map(|i| pool.post_write(3, i * 100, &mr_a, 0..100).unwrap())
                .collect();
            assert_eq!(pool.in_flight(), 3);
            for t in t.iter().rev() {
                pool.wait(*t).unwrap();
            }
            assert_eq!(pool.in_flight(), 0);
            assert!(mr_b.as_slice()[3072..3372].iter().all(|&b| b == 7));
        },
    );
}

#[test]
fn pool_futures_on_the_completion_channel() {
    in_lab(
        Topology::Loopback,
        "pool_futures_on_the_completion_channel",
        || {
            let ctx = open();
            let ch = ctx.create_comp_channel().unwrap();
            let Pair {
                a,
                b: _b,
                cq_a,
                mr_a,
                mr_b,
                ..
            } = Pair::on(ctx.clone(), Some(&ch));
            let whole = mr_b.remote();
            let blocks: Vec<RemoteRegion> = (0..8)
                .map(|i| RemoteRegion {
                    addr: whole.addr + i * 512,
                    len: 512,
                    rkey: whole.rkey,
                })
                .collect();
            let pool = AsyncPool::new(a, cq_a, ch, blocks);
            for i in 0..8usize {
                mr_a.write_from(i * 64, &[i as u8 + 1; 64]).unwrap();
            }
            let ops: Vec<PoolOp> = (0..8usize)
                .map(|i| pool.write(i, 0, &mr_a, i * 64..i * 64 + 64).unwrap())
                .collect();
            let results = pool.block_on(join_all(ops), T).unwrap();
            assert_eq!(results.len(), 8);
            for r in results {
                assert_eq!(r.unwrap().opcode, WcOpcode::RdmaWrite);
            }
            for i in 0..8usize {
                assert!(
                    mr_b.as_slice()[i * 512..i * 512 + 64]
                        .iter()
                        .all(|&b| b == i as u8 + 1)
                );
            }
            // Atomics through futures: 8 concurrent increments of one counter.
            let ops: Vec<PoolOp> = (0..8usize)
                .map(|i| pool.fetch_add(7, 504, 1, &mr_a, 1024 + i * 8).unwrap())
                .collect();
            for r in pool.block_on(join_all(ops), T).unwrap() {
                r.unwrap();
            }
            let mut olds: Vec<u64> = (0..8)
                .map(|i| mr_a.read_u64(1024 + i * 8).unwrap())
                .collect();
            olds.sort();
            assert_eq!(olds, (0..8).collect::<Vec<u64>>());
            assert_eq!(mr_b.read_u64(7 * 512 + 504).unwrap(), 8);
            // An out-of-range operation is refused before posting.
            assert!(matches!(
                pool.write(8, 0, &mr_a, 0..1),
                Err(Error::OutOfBounds(_))
            ));
        },
    );
}
