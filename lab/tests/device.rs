//! Device tests: `lab` against a real rxe device, a self-connected RC QP pair on one device
//! (the loopback topology: `rxe0` on `veth0`, 10.99.0.1, GID[1] = ::ffff:10.99.0.1).
//!
//! Each test runs through `harness::testing::in_lab`: inside the lab (`LAB_GUEST=1`) the body
//! runs directly; on the host the harness re-runs the test inside the lab. Tests touching the
//! device are serialised by the harness; by hand use `--test-threads=1`.
//!
//! One file of about 1,000 lines on purpose: every test shares the `Pair` setup at the top,
//! and the file is the catalogue of what `lab` does on a real device, read in order.
//!
//! Modules (in file order):
//! - setup: `Pair`, two RC QPs A and B connected to each other, one MR each
//! - two-sided: send_recv, send_with_imm, batched_chain_only_last_signaled, inline_send
//! - one-sided: rdma_write, write_with_imm, rdma_read, atomics
//! - events: event_driven_completion
//! - bad flows (named `bad_flow_*`, asserting the exact status or errno)
//! - device queries: port_and_gid

use std::time::Duration;

use harness::Topology;
use harness::testing::in_lab;
use lab::*;

/// The codes of an error's hints, most likely first.
fn codes(e: &Error) -> Vec<HintCode> {
    e.hints().iter().map(Hint::code).collect()
}

const T: Duration = Duration::from_secs(10);
const PSN_A: u32 = 0x00a0a0;
const PSN_B: u32 = 0x00b0b0;

// ---------------------------------------------------------------------------------------------
// setup

/// Two RC QPs on one device, connected to each other, each with its own CQ and 4 KiB MR.
/// Field order is also drop order; `lab` keeps parents alive anyway.
struct Pair {
    a: QueuePair,
    b: QueuePair,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
    _pd: ProtectionDomain,
    _ctx: Context,
}

fn open() -> Context {
    Context::open_default().expect("open the rxe device")
}

fn connect(
    ctx: &Context,
    a: QueuePair<state::Reset>,
    b: QueuePair<state::Reset>,
) -> (QueuePair, QueuePair) {
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let (qa, qb) = (a.qp_num(), b.qp_num());
    let a = a
        .bring_up(
            &InitAttr::default(),
            &RtrAttr::new(qb, PSN_B, gid),
            &RtsAttr::new(PSN_A),
        )
        .expect("bring up A");
    let b = b
        .bring_up(
            &InitAttr::default(),
            &RtrAttr::new(qa, PSN_A, gid),
            &RtsAttr::new(PSN_B),
        )
        .expect("bring up B");
    (a, b)
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
        let a = pd.create_qp(&QpInitAttr::rc(&cq_a, &cq_a)).unwrap();
        let b = pd.create_qp(&QpInitAttr::rc(&cq_b, &cq_b)).unwrap();
        let (a, b) = connect(&ctx, a, b);
        let mr_a = pd.reg_mr(4096, AccessFlags::ALL_REMOTE).unwrap();
        let mr_b = pd.reg_mr(4096, AccessFlags::ALL_REMOTE).unwrap();
        Pair {
            a,
            b,
            cq_a,
            cq_b,
            mr_a,
            mr_b,
            _pd: pd,
            _ctx: ctx,
        }
    }

    /// Asserts nothing more arrives on `cq` within a short while.
    fn assert_quiet(cq: &CompletionQueue) {
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(cq.poll_one().unwrap(), None, "unexpected completion");
    }
}

// ---------------------------------------------------------------------------------------------
// two-sided

#[test]
fn send_recv() {
    in_lab(Topology::Loopback, "send_recv", || {
        let mut p = Pair::new();
        p.mr_a.as_mut_slice()[..5].copy_from_slice(b"hello");
        let dst = [p.mr_b.sge(0..256)];
        p.b.post_recv_one(RecvWr::new(7, &dst)).unwrap();
        let src = [p.mr_a.sge(0..5)];
        p.a.post_send_one(SendWr::send(1, &src)).unwrap();

        let s = p.cq_a.wait_one(T).unwrap().ok().unwrap();
        assert_eq!((s.wr_id, s.opcode), (1, WcOpcode::Send));
        let r = p.cq_b.wait_one(T).unwrap().ok().unwrap();
        assert_eq!((r.wr_id, r.opcode, r.byte_len), (7, WcOpcode::Recv, 5));
        assert_eq!(r.qp_num, p.b.qp_num());
        assert_eq!(r.imm(), None);
        assert_eq!(&p.mr_b.as_slice()[..5], b"hello");
    });
}

#[test]
fn send_with_imm() {
    in_lab(Topology::Loopback, "send_with_imm", || {
        let mut p = Pair::new();
        p.mr_a.as_mut_slice()[..3].copy_from_slice(b"imm");
        let dst = [p.mr_b.sge(..)];
        p.b.post_recv_one(RecvWr::new(8, &dst)).unwrap();
        let src = [p.mr_a.sge(0..3)];
        p.a.post_send_one(SendWr::send_with_imm(2, &src, 0xdead_beef))
            .unwrap();
        p.cq_a.wait_one(T).unwrap().ok().unwrap();
        let r = p.cq_b.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(r.opcode, WcOpcode::Recv);
        assert_eq!(r.byte_len, 3);
        assert_eq!(r.imm(), Some(0xdead_beef));
        assert!(r.flags.contains(WcFlags::WITH_IMM));
    });
}

#[test]
fn scatter_gather_two_sges() {
    in_lab(Topology::Loopback, "scatter_gather_two_sges", || {
        let mut p = Pair::new();
        p.mr_a.as_mut_slice()[..4].copy_from_slice(b"abcd");
        p.mr_a.as_mut_slice()[100..104].copy_from_slice(b"wxyz");
        let dst = [p.mr_b.sge(0..2), p.mr_b.sge(1000..1100)];
        p.b.post_recv_one(RecvWr::new(1, &dst)).unwrap();
        let src = [p.mr_a.sge(0..4), p.mr_a.sge(100..104)];
        p.a.post_send_one(SendWr::send(1, &src)).unwrap();
        p.cq_a.wait_one(T).unwrap().ok().unwrap();
        let r = p.cq_b.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(r.byte_len, 8);
        assert_eq!(&p.mr_b.as_slice()[0..2], b"ab");
        assert_eq!(&p.mr_b.as_slice()[1000..1006], b"cdwxyz");
    });
}

#[test]
fn batched_chain_only_last_signaled() {
    in_lab(
        Topology::Loopback,
        "batched_chain_only_last_signaled",
        || {
            let p = Pair::new();
            for i in 0..3u8 {
                p.mr_a.write_from(i as usize * 8, &[i + 1; 8]).unwrap();
            }
            let remote = p.mr_b.remote();
            let s: Vec<[Sge; 1]> = (0..3).map(|i| [p.mr_a.sge(i * 8..i * 8 + 8)]).collect();
            let mut chain = [
                SendWr::write(1, &s[0], remote.addr, remote.rkey).unsignaled(),
                SendWr::write(2, &s[1], remote.addr + 8, remote.rkey).unsignaled(),
                SendWr::write(3, &s[2], remote.addr + 16, remote.rkey),
            ];
            p.a.post_send(&mut chain).unwrap();
            let wc = p.cq_a.wait_one(T).unwrap().ok().unwrap();
            assert_eq!((wc.wr_id, wc.opcode), (3, WcOpcode::RdmaWrite));
            Pair::assert_quiet(&p.cq_a);
            Pair::assert_quiet(&p.cq_b); // a WRITE gives the target no completion
            let mut got = [0u8; 24];
            p.mr_b.read_into(0, &mut got).unwrap();
            assert_eq!(&got[..8], &[1; 8]);
            assert_eq!(&got[16..], &[3; 8]);
        },
    );
}

#[test]
fn inline_send_from_unregistered_memory() {
    in_lab(
        Topology::Loopback,
        "inline_send_from_unregistered_memory",
        || {
            let p = Pair::new();
            let dst = [p.mr_b.sge(..)];
            p.b.post_recv_one(RecvWr::new(1, &dst)).unwrap();
            let mut stack = *b"inline!";
            let data = [InlineSge::new(&stack)];
            p.a.post_send_one(SendWr::send_inline(5, &data)).unwrap();
            stack.copy_from_slice(b"changed"); // reusable right after the post
            p.cq_a.wait_one(T).unwrap().ok().unwrap();
            let r = p.cq_b.wait_one(T).unwrap().ok().unwrap();
            assert_eq!(r.byte_len, 7);
            assert_eq!(&p.mr_b.as_slice()[..7], b"inline!");
            assert_eq!(&stack, b"changed");
        },
    );
}

#[test]
fn inline_send_from_a_registered_region() {
    in_lab(
        Topology::Loopback,
        "inline_send_from_a_registered_region",
        || {
            let mut p = Pair::new();
            let dst = [p.mr_b.sge(..)];
            p.b.post_recv_one(RecvWr::new(1, &dst)).unwrap();
            p.mr_a.as_mut_slice()[..4].copy_from_slice(b"ping");
            {
                let data = [InlineSge::from_mr(&p.mr_a, 0..4)];
                p.a.post_send_one(SendWr::send_inline(6, &data)).unwrap();
            }
            p.mr_a.as_mut_slice()[..4].copy_from_slice(b"pong"); // copied at post: safe to reuse
            p.cq_a.wait_one(T).unwrap().ok().unwrap();
            p.cq_b.wait_one(T).unwrap().ok().unwrap();
            assert_eq!(&p.mr_b.as_slice()[..4], b"ping");
        },
    );
}

// ---------------------------------------------------------------------------------------------
// one-sided

#[test]
fn rdma_write() {
    in_lab(Topology::Loopback, "rdma_write", || {
        let mut p = Pair::new();
        p.mr_a.as_mut_slice()[..6].copy_from_slice(b"write!");
        let r = p.mr_b.remote();
        let src = [p.mr_a.sge(0..6)];
        p.a.post_send_one(SendWr::write(1, &src, r.addr + 64, r.rkey))
            .unwrap();
        let wc = p.cq_a.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(wc.opcode, WcOpcode::RdmaWrite);
        Pair::assert_quiet(&p.cq_b);
        let mut got = [0u8; 6];
        p.mr_b.read_into(64, &mut got).unwrap();
        assert_eq!(&got, b"write!");
    });
}

#[test]
fn write_with_imm() {
    in_lab(Topology::Loopback, "write_with_imm", || {
        let mut p = Pair::new();
        p.mr_a.as_mut_slice()[..256].fill(0x5a);
        // A zero-SGE receive is enough: the data goes where the WRITE says.
        p.b.post_recv_one(RecvWr::new(9, &[])).unwrap();
        let r = p.mr_b.remote();
        let src = [p.mr_a.sge(0..256)];
        p.a.post_send_one(SendWr::write_with_imm(1, &src, r.addr, r.rkey, 0xcafe_f00d))
            .unwrap();
        let wc = p.cq_a.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(wc.opcode, WcOpcode::RdmaWrite); // rxe: the requester sees RDMA_WRITE
        let rc = p.cq_b.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(rc.wr_id, 9);
        assert_eq!(rc.opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!(rc.byte_len, 256);
        assert_eq!(rc.imm(), Some(0xcafe_f00d));
        assert!(p.mr_b.as_slice()[..256].iter().all(|&b| b == 0x5a));
    });
}

#[test]
fn rdma_read() {
    in_lab(Topology::Loopback, "rdma_read", || {
        let mut p = Pair::new();
        for (i, b) in p.mr_b.as_mut_slice().iter_mut().enumerate() {
            *b = i as u8;
        }
        let r = p.mr_b.remote();
        let dst = [p.mr_a.sge(..)];
        p.a.post_send_one(SendWr::read(4, &dst, r.addr, r.rkey))
            .unwrap();
        let wc = p.cq_a.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len),
            (4, WcOpcode::RdmaRead, 4096)
        );
        assert_eq!(p.mr_a.as_slice(), p.mr_b.as_slice());
        Pair::assert_quiet(&p.cq_b);
    });
}

#[test]
fn atomics() {
    in_lab(Topology::Loopback, "atomics", || {
        let p = Pair::new();
        p.mr_b.write_u64(0, 100).unwrap();
        let r = p.mr_b.remote();
        let local = p.mr_a.sge(0..8);

        p.a.post_send_one(SendWr::fetch_add(1, &local, r.addr, r.rkey, 5))
            .unwrap();
        let wc = p.cq_a.wait_one(T).unwrap().ok().unwrap();
        assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::FetchAdd, 8));
        assert_eq!(p.mr_a.read_u64(0).unwrap(), 100, "old value, host order");
        assert_eq!(p.mr_b.read_u64(0).unwrap(), 105);

        p.a.post_send_one(SendWr::compare_swap(2, &local, r.addr, r.rkey, 105, 777))
            .unwrap();
        let wc = p.cq_a.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(wc.opcode, WcOpcode::CompSwap);
        assert_eq!(p.mr_a.read_u64(0).unwrap(), 105);
        assert_eq!(p.mr_b.read_u64(0).unwrap(), 777, "matched: swapped");

        p.a.post_send_one(SendWr::compare_swap(3, &local, r.addr, r.rkey, 1, 2))
            .unwrap();
        p.cq_a.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(p.mr_a.read_u64(0).unwrap(), 777);
        assert_eq!(p.mr_b.read_u64(0).unwrap(), 777, "not matched: unchanged");
    });
}

// ---------------------------------------------------------------------------------------------
// events

#[test]
fn event_driven_completion() {
    in_lab(Topology::Loopback, "event_driven_completion", || {
        let ctx = open();
        let ch = ctx.create_comp_channel().unwrap();
        let p = Pair::on(ctx.clone(), Some(&ch));
        let src = [p.mr_a.sge(0..8)];
        let r = p.mr_b.remote();
        p.cq_a.req_notify(false).unwrap();
        for round in 0..3u64 {
            p.a.post_send_one(SendWr::write(round, &src, r.addr, r.rkey))
                .unwrap();
            let ev = ch.get_cq_event(T).unwrap();
            assert!(ev.is_for(&p.cq_a));
            assert_eq!(p.cq_a.unacked_events(), 1);
            ev.ack();
            assert_eq!(p.cq_a.unacked_events(), 0);
            // Re-arm before draining, so a completion arriving in between still raises an event.
            p.cq_a.req_notify(false).unwrap();
            let wc = p.cq_a.wait_one(T).unwrap().ok().unwrap();
            assert_eq!(wc.wr_id, round);
        }
        assert_eq!(p.cq_a.comp_events_completed(), 3);
        // Nothing more happened, so waiting again hits the deadline with a typed error.
        let e = ch.get_cq_event(Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, Error::EventTimeout { .. }), "{e}");
        drop(p);
        ch.destroy().unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// bad flows

#[test]
fn bad_flow_remote_access_error_then_flush() {
    in_lab(
        Topology::Loopback,
        "bad_flow_remote_access_error_then_flush",
        || {
            let p = Pair::new();
            let r = p.mr_b.remote();
            let src = [p.mr_a.sge(0..64)];
            p.a.post_send_one(SendWr::write(1, &src, r.addr, r.rkey + 1))
                .unwrap();
            let wc = p.cq_a.wait_one(T).unwrap();
            assert_eq!(wc.status, WcStatus::RemAccessErr);
            assert_eq!(wc.status.to_string(), "IBV_WC_REM_ACCESS_ERR (10)");
            let e = wc.ok().unwrap_err();
            assert!(e.to_string().contains("remote access error"), "{e}");
            // The requester is now in ERR: the next work request is flushed.
            p.a.post_send_one(SendWr::write(2, &src, r.addr, r.rkey))
                .unwrap();
            let wc = p.cq_a.wait_one(T).unwrap();
            assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushErr));
            assert_eq!(p.a.state().unwrap(), QpState::Err);
            // On rxe the responder goes to ERR too.
            assert_eq!(p.b.state().unwrap(), QpState::Err);
        },
    );
}

#[test]
fn bad_flow_skip_rtr_is_einval() {
    in_lab(Topology::Loopback, "bad_flow_skip_rtr_is_einval", || {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8, None).unwrap();
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
        let qp = qp.to_init(&InitAttr::default()).unwrap();
        let attr = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(6)
            .rnr_retry(6)
            .sq_psn(1)
            .max_rd_atomic(1);
        let e = qp.modify(&attr).unwrap_err();
        assert_eq!(e.errno(), Some(Errno(libc::EINVAL)));
        assert_eq!(e.verb(), Some(Verb::ModifyQp));
        assert!(e.to_string().contains("INIT -> RTS"), "{e}");
        assert_eq!(codes(&e), [HintCode::SkippedRtr], "{}", e.report());
        assert_eq!(qp.state().unwrap(), QpState::Init);
    });
}

#[test]
fn bad_flow_missing_rtr_attribute_is_named() {
    in_lab(
        Topology::Loopback,
        "bad_flow_missing_rtr_attribute_is_named",
        || {
            let ctx = open();
            let gid = ctx.roce_v2_ipv4_gid(1).unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(8, None).unwrap();
            let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
            let qpn = qp.qp_num();
            let qp = qp.to_init(&InitAttr::default()).unwrap();
            let attr = QpAttr::new()
                .state(QpState::Rtr)
                .av(&AddressVector::roce(gid.gid, gid.index as u8, 1))
                .path_mtu(Mtu::Mtu1024)
                .dest_qp_num(qpn)
                .rq_psn(0)
                .min_rnr_timer(12); // no max_dest_rd_atomic
            let e = qp.modify(&attr).unwrap_err();
            assert_eq!(e.errno(), Some(Errno(libc::EINVAL)));
            assert_eq!(
                codes(&e),
                [HintCode::TransitionAttributes],
                "{}",
                e.report()
            );
            let h = e.hint().unwrap();
            assert!(h.text().contains("IBV_QP_MAX_DEST_RD_ATOMIC"), "{h}");
        },
    );
}

#[test]
fn bad_flow_wrong_gid_index_hint() {
    in_lab(Topology::Loopback, "bad_flow_wrong_gid_index_hint", || {
        let ctx = open();
        let v4 = ctx.roce_v2_ipv4_gid(1).unwrap();
        let ll = ctx
            .gid_table(1)
            .unwrap()
            .into_iter()
            .find(|e| e.gid.is_link_local())
            .expect("a link-local GID");
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8, None).unwrap();
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
        let qpn = qp.qp_num();
        let qp = qp.to_init(&InitAttr::default()).unwrap();
        let err = qp
            .to_rtr(&RtrAttr::new(qpn, 0, v4.gid).sgid_index(ll.index as u8))
            .unwrap_err();
        let e = err.error();
        assert_eq!(e.errno(), Some(Errno(libc::EINVAL)));
        assert_eq!(codes(e), [HintCode::GidIndex], "{}", e.report());
        // The QP comes back in INIT and can still be brought up properly.
        let (qp, _) = err.into_parts();
        let qp = qp.to_rtr(&RtrAttr::new(qpn, 0, v4.gid)).unwrap();
        assert_eq!(qp.state().unwrap(), QpState::Rtr);
    });
}

#[test]
fn bad_flow_teardown_errors() {
    in_lab(Topology::Loopback, "bad_flow_teardown_errors", || {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        // REMOTE_WRITE without LOCAL_WRITE: EINVAL with a hint.
        let e = pd.reg_mr(4096, AccessFlags::REMOTE_WRITE).unwrap_err();
        assert_eq!(e.errno(), Some(Errno(libc::EINVAL)));
        assert_eq!(codes(&e), [HintCode::RemoteWithoutLocalWrite], "{e}");
        // Deallocating a PD whose MR is alive: EBUSY, and the PD lives on.
        let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let e = pd.dealloc().unwrap_err();
        assert_eq!(e.errno(), Some(Errno(libc::EBUSY)));
        assert!(e.to_string().contains("EBUSY (16)"), "{e}");
        assert_eq!(codes(&e), [HintCode::PdBusy], "{}", e.report());
        // Destroying a CQ a QP uses: EBUSY.
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8, None).unwrap();
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
        let e = cq.destroy().unwrap_err();
        assert_eq!(e.errno(), Some(Errno(libc::EBUSY)));
        assert_eq!(codes(&e), [HintCode::CqBusy], "{}", e.report());
        // Closing the device while children live is refused by lab.
        assert!(matches!(ctx.clone().close(), Err(Error::InUse { .. })));
        // The right order works, and reports success.
        qp.destroy().unwrap();
        mr.dereg().unwrap();
        pd.dealloc().unwrap();
        ctx.close().unwrap();
    });
}

#[test]
fn bad_flow_post_send_before_rts() {
    in_lab(Topology::Loopback, "bad_flow_post_send_before_rts", || {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8, None).unwrap();
        let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
        let qp = qp.to_init(&InitAttr::default()).unwrap();
        let src = [mr.sge(0..8)];
        let e = qp
            .post_send_any_state(&mut [SendWr::send(1, &src)])
            .unwrap_err();
        assert_eq!(e.errno(), Some(Errno(libc::EINVAL)));
        assert_eq!(e.wr_index(), Some(0));
        assert_eq!(codes(&e), [HintCode::SendBeforeRts], "{}", e.report());
        assert!(
            e.hint().unwrap().text().contains("the QP is in INIT"),
            "{}",
            e.report()
        );
        // Destroying the QP discards the queued "ghost" WR.
    });
}

#[test]
fn bad_flow_completion_deadline() {
    in_lab(Topology::Loopback, "bad_flow_completion_deadline", || {
        let p = Pair::new();
        // A SEND with no receive posted at B; rnr_retry 6 gives up eventually, but well after
        // this deadline: the wait must end with a typed error, not hang.
        let src = [p.mr_a.sge(0..8)];
        p.a.post_send_one(SendWr::send(1, &src)).unwrap();
        let e = p.cq_b.wait_one(Duration::from_millis(300)).unwrap_err();
        assert!(matches!(e, Error::CompletionTimeout { .. }), "{e}");
        assert!(e.to_string().contains("rnr_retry"), "{e}");
    });
}

// ---------------------------------------------------------------------------------------------
// device queries

#[test]
fn port_and_gid() {
    in_lab(Topology::Loopback, "port_and_gid", || {
        let list = devices().unwrap();
        assert!(!list.is_empty());
        let ctx = open();
        assert!(list.iter().any(|d| d.name == ctx.name()));
        let dev = ctx.query_device().unwrap();
        assert!(dev.max_qp > 0 && dev.max_mr > 0 && dev.max_cqe > 0);
        assert!(dev.max_sge >= 1);
        assert_ne!(dev.atomic_cap, AtomicCap::None);
        let port = ctx.query_port(1).unwrap();
        assert_eq!(port.state, PortState::Active);
        assert_eq!(port.link_layer, LinkLayer::Ethernet);
        assert!(port.active_mtu <= port.max_mtu);
        let table = ctx.gid_table(1).unwrap();
        assert!(table.iter().any(|e| e.gid.is_link_local()));
        let v4 = ctx.roce_v2_ipv4_gid(1).unwrap();
        assert_eq!(v4.gid_type, GidType::RoceV2);
        assert_eq!(v4.gid.to_string(), "::ffff:10.99.0.1");
        assert_eq!(ctx.query_gid(1, v4.index).unwrap(), v4);
        // Path MTU is clamped to the port's active MTU by default.
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8, None).unwrap();
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
        let qpn = qp.qp_num();
        let qp = qp
            .to_init(&InitAttr::default())
            .unwrap()
            .to_rtr(&RtrAttr::new(qpn, 0, v4.gid).path_mtu(Mtu::Mtu4096))
            .unwrap();
        let info = qp.query().unwrap();
        assert_eq!(info.path_mtu, Some(port.active_mtu));
        assert_eq!(info.av.sgid_index as u32, v4.index);
        assert!(info.max_dest_rd_atomic >= 1);
        // No async event is pending.
        assert_eq!(
            ctx.get_async_event(Duration::from_millis(50)).unwrap(),
            None
        );
    });
}

// ---------------------------------------------------------------------------------------------
// recovery, retries and async events

#[test]
fn bad_flow_recover_after_error_by_reset() {
    in_lab(
        Topology::Loopback,
        "bad_flow_recover_after_error_by_reset",
        || {
            let mut p = Pair::new();
            let r = p.mr_b.remote();
            let src = [p.mr_a.sge(0..8)];
            p.a.post_send_one(SendWr::write(1, &src, r.addr, r.rkey ^ 0x80))
                .unwrap();
            assert_eq!(p.cq_a.wait_one(T).unwrap().status, WcStatus::RemAccessErr);
            // Both QPs are in ERR now. Reset both and bring them up again toward each other.
            let ctx = p.a.context().clone();
            let gid = ctx.roce_v2_ipv4_gid(1).unwrap().gid;
            let (qa, qb) = (p.a.qp_num(), p.b.qp_num());
            let a = p.a.reset().unwrap();
            let b = p.b.reset().unwrap();
            p.a = a
                .bring_up(
                    &InitAttr::default(),
                    &RtrAttr::new(qb, 7, gid),
                    &RtsAttr::new(9),
                )
                .unwrap();
            p.b = b
                .bring_up(
                    &InitAttr::default(),
                    &RtrAttr::new(qa, 9, gid),
                    &RtsAttr::new(7),
                )
                .unwrap();
            assert_eq!(p.a.qp_num(), qa, "same QP number after reset");
            while p.cq_b.poll_one().unwrap().is_some() {} // drop B's flushed receives, if any
            p.mr_a.as_mut_slice()[..9].copy_from_slice(b"recovered");
            let dst = [p.mr_b.sge(..)];
            p.b.post_recv_one(RecvWr::new(2, &dst)).unwrap();
            let src = [p.mr_a.sge(0..9)];
            p.a.post_send_one(SendWr::send(3, &src)).unwrap();
            p.cq_a.wait_one(T).unwrap().ok().unwrap();
            let wc = p.cq_b.wait_one(T).unwrap().ok().unwrap();
            assert_eq!(wc.byte_len, 9);
            assert_eq!(&p.mr_b.as_slice()[..9], b"recovered");
        },
    );
}

#[test]
fn bad_flow_peer_gone_retry_exceeded_with_defaults() {
    in_lab(
        Topology::Loopback,
        "bad_flow_peer_gone_retry_exceeded_with_defaults",
        || {
            let p = Pair::new();
            let Pair {
                a, b, cq_a, mr_a, ..
            } = p;
            b.destroy().unwrap();
            let src = [mr_a.sge(0..8)];
            let start = std::time::Instant::now();
            a.post_send_one(SendWr::send(1, &src)).unwrap();
            // retry_cnt 6, timeout 14: 7 tries of ~67 ms. With retry_cnt 7 rxe would retry forever.
            let wc = cq_a.wait_one(T).unwrap();
            assert_eq!(wc.status, WcStatus::RetryExcErr);
            assert!(
                start.elapsed() >= Duration::from_millis(300),
                "{:?}",
                start.elapsed()
            );
            assert_eq!(a.state().unwrap(), QpState::Err);
        },
    );
}

#[test]
fn bad_flow_cq_overflow_raises_async_cq_err() {
    in_lab(
        Topology::Loopback,
        "bad_flow_cq_overflow_raises_async_cq_err",
        || {
            let ctx = open();
            let pd = ctx.alloc_pd().unwrap();
            let small = ctx.create_cq(4, None).unwrap();
            let cq_b = ctx.create_cq(8, None).unwrap();
            assert!(small.cqe() >= 4);
            let a = pd
                .create_qp(&QpInitAttr::rc(&small, &small).max_send_wr(64))
                .unwrap();
            let b = pd.create_qp(&QpInitAttr::rc(&cq_b, &cq_b)).unwrap();
            let (a, _b) = connect(&ctx, a, b);
            let mr = pd.reg_mr(4096, AccessFlags::ALL_REMOTE).unwrap();
            let r = mr.remote();
            let src = [mr.sge(0..8)];
            let n = small.cqe() as u64 + 8;
            for i in 0..n {
                a.post_send_one(SendWr::write(i, &src, r.addr + 8, r.rkey))
                    .unwrap();
            }
            let mut cq_errs = 0;
            while let Some(ev) = ctx.get_async_event(Duration::from_secs(2)).unwrap() {
                assert_eq!(ev.kind, AsyncEventType::CqErr, "{ev:?}");
                assert!(small.is_async_element(&ev.element));
                cq_errs += 1;
            }
            assert!(cq_errs >= 1, "no IBV_EVENT_CQ_ERR");
            let mut wcs = [WorkCompletion::default(); 64];
            let kept = small.poll_into(&mut wcs).unwrap();
            assert!(kept as i32 <= small.cqe(), "{kept} > {}", small.cqe());
            assert!((kept as u64) < n, "completions were lost");
        },
    );
}

// ---------------------------------------------------------------------------------------------
// memory windows

#[test]
fn memory_windows_type1_and_type2() {
    in_lab(Topology::Loopback, "memory_windows_type1_and_type2", || {
        let ctx = open();
        let mut p = Pair::on(ctx.clone(), None);
        let pd = &p._pd;
        let mr = pd
            .reg_mr(4096, AccessFlags::ALL_REMOTE | AccessFlags::MW_BIND)
            .unwrap();
        p.mr_a.as_mut_slice()[..8].copy_from_slice(b"windowed");
        let src = [p.mr_a.sge(0..8)];

        // Type 2: bound by a work request on B (the owner of the memory), with our rkey.
        let mw2 = pd.alloc_mw(MwType::Type2).unwrap();
        let rkey2 = mw2.next_rkey();
        let bind = SendWr::bind_mw(
            10,
            &mw2,
            rkey2,
            &mr,
            2048..3072,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
        p.b.post_send_one(bind).unwrap();
        let wc = p.cq_b.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(wc.opcode, WcOpcode::BindMw);
        assert_eq!(mw2.rkey(), rkey2);
        p.a.post_send_one(SendWr::write(1, &src, mr.addr() + 2048, rkey2))
            .unwrap();
        p.cq_a.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(&mr.as_slice()[2048..2056], b"windowed");

        // Type 1: bound with ibv_bind_mw on B's QP.
        let mw1 = pd.alloc_mw(MwType::Type1).unwrap();
        let rkey1 =
            p.b.bind_mw(&mw1, &mr, 0..1024, AccessFlags::REMOTE_WRITE, 11, true)
                .unwrap();
        let wc = p.cq_b.wait_one(T).unwrap().ok().unwrap();
        assert_eq!((wc.wr_id, wc.opcode), (11, WcOpcode::BindMw));
        p.a.post_send_one(SendWr::write(2, &src, mr.addr() + 8, rkey1))
            .unwrap();
        p.cq_a.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(&mr.as_slice()[8..16], b"windowed");

        // Revoke the type 2 window: its rkey no longer works.
        p.b.post_send_one(SendWr::local_inv(12, rkey2)).unwrap();
        let wc = p.cq_b.wait_one(T).unwrap().ok().unwrap();
        assert_eq!(wc.opcode, WcOpcode::LocalInv);
        p.a.post_send_one(SendWr::write(3, &src, mr.addr() + 2048, rkey2))
            .unwrap();
        let wc = p.cq_a.wait_one(T).unwrap();
        assert_eq!(wc.status, WcStatus::RemAccessErr);
        p.mr_b = mr; // dropped with the pair, after the windows
    });
}

// ---------------------------------------------------------------------------------------------
// shared receive queue

#[test]
fn shared_receive_queue_and_limit_event() {
    in_lab(
        Topology::Loopback,
        "shared_receive_queue_and_limit_event",
        || {
            let ctx = open();
            let gid = ctx.roce_v2_ipv4_gid(1).unwrap().gid;
            let pd = ctx.alloc_pd().unwrap();
            let cq_a = ctx.create_cq(16, None).unwrap();
            let cq_b = ctx.create_cq(16, None).unwrap();
            let srq = pd.create_srq(16, 1).unwrap();
            let a = pd.create_qp(&QpInitAttr::rc(&cq_a, &cq_a)).unwrap();
            let b = pd
                .create_qp(&QpInitAttr::rc(&cq_b, &cq_b).srq(&srq))
                .unwrap();
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
            let mut mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
            mr.as_mut_slice()[..3].copy_from_slice(b"srq");
            let slots: Vec<[Sge; 1]> = (0..3)
                .map(|i| [mr.sge(1024 + i * 64..1088 + i * 64)])
                .collect();
            let mut recvs: Vec<RecvWr> = slots
                .iter()
                .enumerate()
                .map(|(i, s)| RecvWr::new(100 + i as u64, s))
                .collect();
            srq.post_recv(&mut recvs).unwrap();
            srq.arm_limit(2).unwrap();
            assert_eq!(srq.query().unwrap().srq_limit, 2);
            let src = [mr.sge(0..3)];
            for i in 0..2 {
                a.post_send_one(SendWr::send(i, &src)).unwrap();
                cq_a.wait_one(T).unwrap().ok().unwrap();
                let wc = cq_b.wait_one(T).unwrap().ok().unwrap();
                assert_eq!((wc.wr_id, wc.byte_len, wc.qp_num), (100 + i, 3, b.qp_num()));
            }
            let ev = ctx
                .get_async_event(Duration::from_secs(2))
                .unwrap()
                .expect("IBV_EVENT_SRQ_LIMIT_REACHED");
            assert_eq!(ev.kind, AsyncEventType::SrqLimitReached);
            assert!(srq.is_async_element(&ev.element));
            // The SRQ is in use by B: destroying it now is refused by the kernel.
            let e = srq.destroy().unwrap_err();
            assert_eq!(e.errno(), Some(Errno(libc::EBUSY)));
        },
    );
}

// ---------------------------------------------------------------------------------------------
// unreliable datagram

#[test]
fn ud_send_recv_with_address_handle() {
    in_lab(
        Topology::Loopback,
        "ud_send_recv_with_address_handle",
        || {
            const QKEY: u32 = 0x1111_1111;
            let ctx = open();
            let gid = ctx.roce_v2_ipv4_gid(1).unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cq_a = ctx.create_cq(16, None).unwrap();
            let cq_b = ctx.create_cq(16, None).unwrap();
            let a = pd.create_qp(&QpInitAttr::ud(&cq_a, &cq_a)).unwrap();
            let b = pd.create_qp(&QpInitAttr::ud(&cq_b, &cq_b)).unwrap();
            assert_eq!(a.qp_type(), QpType::Ud);
            let (qa, qb) = (a.qp_num(), b.qp_num());
            let a = a.bring_up_ud(1, QKEY, 1).unwrap();
            let b = b.bring_up_ud(1, QKEY, 2).unwrap();
            let mut mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
            mr.as_mut_slice()[..8].copy_from_slice(b"datagram");
            let dst = [mr.sge(1024..1024 + UD_GRH_BYTES + 64)];
            b.post_recv_one(RecvWr::new(5, &dst)).unwrap();
            let ah = pd
                .create_ah(&AddressVector::roce(gid.gid, gid.index as u8, 1))
                .unwrap();
            let src = [mr.sge(0..8)];
            a.post_send_one(SendWr::send_ud(1, &src, &ah, qb, QKEY))
                .unwrap();
            cq_a.wait_one(T).unwrap().ok().unwrap();
            let wc = cq_b.wait_one(T).unwrap().ok().unwrap();
            assert_eq!(wc.byte_len as usize, UD_GRH_BYTES + 8);
            assert_eq!(wc.src_qp, qa);
            assert!(wc.flags.contains(WcFlags::GRH));
            let at = 1024 + UD_GRH_BYTES;
            assert_eq!(&mr.as_slice()[at..at + 8], b"datagram");
            // A wrong Q_Key is dropped silently by the receiver: no completion at B.
            b.post_recv_one(RecvWr::new(6, &dst)).unwrap();
            a.post_send_one(SendWr::send_ud(2, &src, &ah, qb, QKEY + 1))
                .unwrap();
            cq_a.wait_one(T).unwrap().ok().unwrap(); // UD: the sender completes regardless
            assert!(matches!(
                cq_b.wait_one(Duration::from_millis(200)),
                Err(Error::CompletionTimeout { .. })
            ));
        },
    );
}
