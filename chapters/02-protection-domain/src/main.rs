//! # Chapter 02: protection domains
//!
//! A protection domain (PD) is an isolation boundary. Every memory region (MR) and every queue
//! pair (QP) is created *in* a PD, and the device lets a QP touch only memory registered in its
//! own PD. This holds both ways: the QP's own scatter/gather entries (lkeys), and a peer's
//! one-sided operations aimed at it (rkeys). Two tenants of one process, or two libraries, can
//! each get their own PD, and a key leaked from one cannot be used through the other's QPs.
//!
//! This chapter shows the boundary by breaking it on purpose, on the lab's rxe device:
//!
//! * a SEND whose SGE uses the lkey of an MR in another PD fails: nothing is sent, and the
//!   sending QP goes to the ERR state. Its status depends on the kernel (rxe is part of it):
//!   `IBV_WC_LOC_QP_OP_ERR (2)` on Linux 6.1 (not `LOC_PROT_ERR`, which the man page
//!   suggests), `IBV_WC_WR_FLUSH_ERR (5)` from Linux 6.4 on (measured on 6.12 and 7.3);
//! * an RDMA WRITE aimed at an MR of another PD (by its rkey) completes with
//!   `IBV_WC_REM_ACCESS_ERR (10)`, and the responder QP goes to ERR too;
//! * `ibv_dealloc_pd` on a PD that still has an MR fails with `EBUSY (16)`;
//! * and it tears everything down in an order that works: QP -> CQ -> MR -> PD -> device.
//!
//! Verbs introduced: `ibv_alloc_pd`, `ibv_dealloc_pd` ([`lab::Context::alloc_pd`],
//! [`lab::ProtectionDomain::dealloc`]). Also used, ahead of their own chapters: `ibv_reg_mr`
//! (03), `ibv_create_cq` / `ibv_poll_cq` (04), `ibv_create_qp` / `ibv_modify_qp` (05),
//! `ibv_post_send` / `ibv_post_recv` (06, 07).
//!
//! Run it: `cargo lab run 02`. It takes no arguments.

use std::process::ExitCode;

use clap::Parser;
use std::time::{Duration, Instant};

// `say!` prints a line wrapped at 96 columns (continuation lines indented two more spaces).
// Two QPs in RTS, and waiting for rxe to move a QP to ERR: the plumbing of the course crate.
// `expect(ok, || message)` fails the chapter (exit status 1) when an observation is not the
// expected one.
// Every step returns `Result` (the course's `Outcome`): a value, or a `Failure` whose message
// `main` prints after `ch02-protection-domain: error: ` (lab's errors name the verb, the errno
// and, for classic mistakes, a hint).
use course::Outcome as Result;
use course::kernel::{KernelVersion, RxeChange};
use course::say;
use course::show;
use course::{connected_pair, expect, wait_for_err};
use lab::{
    AccessFlags, CompletionQueue, Context, QpState, RecvWr, SendWr, WcStatus, WorkCompletion,
};

/// Every wait for a completion ends by this deadline (generous: the lab may run under TCG).
const DEADLINE: Duration = Duration::from_secs(10);
/// How long "nothing arrives" is watched for.
const QUIET: Duration = Duration::from_millis(300);
const MR_LEN: usize = 4096;
const MESSAGE: &[u8] = b"hello from PD A";

/// The command line: no options; the device is $LAB_DEVICE, else the first one.
#[derive(Parser, Debug)]
#[command(
    name = "ch02-protection-domain",
    about = "Protection domains as isolation boundaries (no options; the device is \
             $LAB_DEVICE, else the first one)"
)]
struct Args {}

fn main() -> ExitCode {
    // clap: `--help`, and a clear message with exit status 2 for any argument.
    Args::parse();
    course::exit_code_of("ch02-protection-domain", run())
}

fn run() -> Result<()> {
    println!("ch02-protection-domain: protection domains as isolation boundaries");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 1: open the device and find its RoCE v2 GID (chapter 01)");
    let ctx = Context::open_default()?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    say!(
        "  opened {}, sgid_index={} {}",
        ctx.name(),
        gid.index,
        show::gid(&gid.gid.raw())
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 2: allocate two protection domains, A and B (ibv_alloc_pd)");
    // A PD has no attributes and no visible identity worth printing: it is only a boundary.
    // Everything created "in" it (MRs, QPs, and later memory windows, SRQs, AHs) can only be
    // used together with objects of the same PD.
    let pd_a = ctx.alloc_pd()?;
    let pd_b = ctx.alloc_pd()?;
    say!("  PD A and PD B allocated: two separate boundaries on one device");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 3: register one memory region in each PD (ibv_reg_mr, chapter 03)");
    // Both allow every kind of access, so that the only thing wrong below is the PD.
    let mut mr_a = pd_a.reg_mr(MR_LEN, AccessFlags::ALL_REMOTE)?;
    let mr_b = pd_b.reg_mr(MR_LEN, AccessFlags::ALL_REMOTE)?;
    for (name, mr) in [("MR a in PD A", &mr_a), ("MR b in PD B", &mr_b)] {
        say!(
            "  {name}: {} bytes {} {} {}",
            mr.len(),
            show::addr(mr.addr()),
            show::lkey(mr.lkey()),
            show::rkey(mr.rkey())
        );
    }
    say!(
        "  each MR holds a reference to its PD: PD A has {} child, PD B has {} child",
        pd_a.children(),
        pd_b.children()
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 4: create two RC queue pairs in PD A and connect them to each other");
    // Chapter 05 explains QPs and their states; here they are plumbing. Both QPs live in PD A,
    // on the same device, connected to each other (the loopback topology).
    let cq_s = ctx.create_cq(16, None)?;
    let cq_r = ctx.create_cq(16, None)?;
    let (sender, receiver) = connected_pair(&pd_a, &cq_s, &cq_r, gid.gid)?;
    say!(
        "  sender {} and receiver {}: both in PD A, both {}",
        show::qpn(sender.qp_num()),
        show::qpn(receiver.qp_num()),
        sender.state()?.name()
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 5: the control experiment: SEND from MR a (PD A) to a RECV in MR a");
    mr_a.as_mut_slice()[..MESSAGE.len()].copy_from_slice(MESSAGE);
    // The receive buffer is the second half of MR a; the message is in the first half.
    let recv_sge = mr_a.sge(MR_LEN / 2..MR_LEN);
    receiver.post_recv_one(RecvWr::new(1, std::slice::from_ref(&recv_sge)))?;
    let send_sge = mr_a.sge(0..MESSAGE.len());
    sender.post_send_one(SendWr::send(2, std::slice::from_ref(&send_sge)))?;
    let s = cq_s.wait_one(DEADLINE)?;
    let r = cq_r.wait_one(DEADLINE)?;
    report("sender", &s);
    report("receiver", &r);
    expect(s.is_success() && r.is_success(), || {
        "the control SEND did not succeed".into()
    })?;
    let got = &mr_a.as_slice()[MR_LEN / 2..MR_LEN / 2 + r.byte_len as usize];
    say!(
        "  the receiver got {} bytes: {:?}",
        r.byte_len,
        String::from_utf8_lossy(got)
    );
    expect(got == MESSAGE, || "the received bytes differ".into())?;
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 6: the same SEND, but its SGE names MR b (PD B) by its lkey");
    // The receiver posts a fresh RECV (in PD A, valid) so we can see whether anything arrives.
    receiver.post_recv_one(RecvWr::new(3, std::slice::from_ref(&recv_sge)))?;
    // The SGE is perfectly valid for MR b: right address, right length, right lkey. What is
    // wrong is that the QP posting it is in PD A. The device checks the lkey against the QP's
    // PD when it fetches the data, so ibv_post_send itself succeeds and the error comes back
    // as a completion.
    let foreign_sge = mr_b.sge(0..MESSAGE.len());
    sender.post_send_one(SendWr::send(4, std::slice::from_ref(&foreign_sge)))?;
    let s = cq_s.wait_one(DEADLINE)?;
    report("sender", &s);
    // The status depends on the kernel: rxe is part of it, and it changed (course::kernel). On
    // Linux 6.1 the requester's own verdict reaches the CQ; from 6.4 on the QP is moved to
    // ERR first, and the failed WR is flushed like any other.
    let change = RxeChange::LocalErrorFlushed;
    let kernel = KernelVersion::running().map_err(|e| format!("which kernel rxe runs in: {e}"))?;
    let want = if change.holds_on(kernel) {
        WcStatus::WrFlushErr
    } else {
        WcStatus::LocQpOpErr
    };
    say!("  expected: {want} ({})", change.record(kernel));
    expect(s.status == want, || {
        format!(
            "expected {want} for an lkey of another PD ({}), got {}",
            change.record(kernel),
            s.status
        )
    })?;
    say!("    why (lab's status table): {}", s.status.explanation());
    if change.holds_on(kernel) {
        say!(
            "  note: the status names no cause: rxe moves the QP to ERR on the bad key and then \
             flushes the WR that had it, so the completion looks like any flushed one; that it \
             is the first error completion after a good SEND is what says this WR failed"
        );
    } else {
        say!(
            "  note: not IBV_WC_LOC_PROT_ERR (4), which ibv_poll_cq(3) suggests for protection \
             errors: rxe reports a key it cannot use in this PD exactly like a key that does \
             not exist (lkey 0 gives the same status); LOC_PROT_ERR is for a valid key with an \
             address outside its MR"
        );
    }
    let sender_state = wait_for_err(&sender, DEADLINE)?;
    say!(
        "  sender QP is now {}: one error completion takes the whole QP down",
        sender_state.name()
    );
    expect(sender_state == QpState::Err, || {
        format!("expected the sender in IBV_QPS_ERR, it is {sender_state}")
    })?;
    let quiet = nothing_arrives(&cq_r, QUIET)?;
    let receiver_state = receiver.state()?;
    say!(
        "  receiver QP is still {} and its RECV is still posted (no completion within {} ms): \
         nothing went on the wire",
        receiver_state.name(),
        QUIET.as_millis()
    );
    expect(quiet && receiver_state == QpState::Rts, || {
        "the receiver was affected by the sender's local error".into()
    })?;
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 7: the remote side: an RDMA WRITE with MR b's rkey, into a QP in PD A");
    // A fresh pair (the first sender is in ERR). The responder QP is in PD A; the requester
    // aims at MR b (PD B) with MR b's correct address and rkey. The responder's device checks
    // the rkey against the responder QP's PD and refuses.
    let (writer, target) = connected_pair(&pd_a, &cq_s, &cq_r, gid.gid)?;
    say!(
        "  requester {} and responder {}, both in PD A",
        show::qpn(writer.qp_num()),
        show::qpn(target.qp_num())
    );
    let src = mr_a.sge(0..MESSAGE.len());
    // First the control: the same WRITE into MR a (PD A) by MR a's rkey.
    writer.post_send_one(SendWr::write(
        5,
        std::slice::from_ref(&src),
        mr_a.addr() + (MR_LEN / 2) as u64,
        mr_a.rkey(),
    ))?;
    let w = cq_s.wait_one(DEADLINE)?;
    say!(
        "  control: WRITE to MR a ({}): {}",
        show::rkey(mr_a.rkey()),
        w.status
    );
    expect(w.is_success(), || {
        "the control WRITE did not succeed".into()
    })?;
    writer.post_send_one(SendWr::write(
        6,
        std::slice::from_ref(&src),
        mr_b.addr(),
        mr_b.rkey(),
    ))?;
    let w = cq_s.wait_one(DEADLINE)?;
    say!(
        "  cross-PD: WRITE to MR b ({} {}): {} \"{}\"",
        show::addr(mr_b.addr()),
        show::rkey(mr_b.rkey()),
        w.status,
        w.status.str()
    );
    expect(w.status == WcStatus::RemAccessErr, || {
        format!(
            "expected {} for an rkey of another PD, got {}",
            WcStatus::RemAccessErr,
            w.status
        )
    })?;
    say!("    why (lab's status table): {}", w.status.explanation());
    let untouched = mr_b.as_slice()[..MESSAGE.len()].iter().all(|&b| b == 0);
    say!(
        "  MR b is untouched (still all zeros): {}",
        if untouched { "yes" } else { "NO" }
    );
    expect(untouched, || "MR b was written through a QP of PD A".into())?;
    let (ws, ts) = (
        wait_for_err(&writer, DEADLINE)?,
        wait_for_err(&target, DEADLINE)?,
    );
    say!(
        "  requester QP: {}, responder QP: {} (a remote access error breaks the connection at \
         both ends; rxe raises no async event for it, only the state shows it)",
        ws.name(),
        ts.name()
    );
    expect(ws == QpState::Err && ts == QpState::Err, || {
        "expected both QPs in IBV_QPS_ERR after the remote access error".into()
    })?;
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 8: free PD B while MR b still lives in it (ibv_dealloc_pd)");
    // In Rust this mistake is hard to make: MR b holds a reference to PD B, so dropping `pd_b`
    // would not call ibv_dealloc_pd at all until MR b is gone too. lab's explicit `dealloc()`
    // is the escape hatch that calls the verb right now, to show what the kernel says. It
    // consumes the handle; on failure the PD stays allocated (MR b keeps it) and is freed by
    // lab when its last child goes.
    say!("  PD B has {} child (MR b)", pd_b.children());
    match pd_b.dealloc() {
        Ok(()) => return Err("ibv_dealloc_pd succeeded on a PD with a live MR".into()),
        Err(e) => {
            let errno = e.errno();
            say!(
                "  ibv_dealloc_pd failed: {}",
                errno.map_or("?".to_string(), |n| n.to_string())
            );
            for h in e.hints() {
                say!("    lab's hint: {h}");
            }
            expect(errno.map(|n| n.0) == Some(16), || {
                format!("expected EBUSY (16), got {}", e.report())
            })?;
        }
    }
    say!(
        "  in C nothing stops that call, and a program that ignores its EBUSY just leaks the PD; \
         with lab the ordinary path cannot even get there: dropping `pd_b` would only release \
         one reference, and PD B would be freed after MR b"
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 9: tear down in an order that works: QP -> CQ -> MR -> PD -> device");
    // Children before parents: a QP uses CQs and a PD, an MR uses a PD, everything uses the
    // device. In lab each object keeps its parents alive, so plain Drop at the end of `run`
    // would also do it in a working order (locals drop in reverse order of declaration). The
    // explicit calls below return each verb's result instead of reporting failures on stderr.
    for (name, qp) in [
        ("sender", sender),
        ("receiver", receiver),
        ("requester", writer),
        ("responder", target),
    ] {
        qp.destroy()?;
        say!("  ibv_destroy_qp({name}): ok");
    }
    cq_s.destroy()?;
    cq_r.destroy()?;
    say!("  ibv_destroy_cq (x2): ok, no QP uses them any more");
    mr_a.dereg()?;
    say!("  ibv_dereg_mr(MR a): ok");
    mr_b.dereg()?;
    say!(
        "  ibv_dereg_mr(MR b): ok; it was PD B's last holder, so lab's Drop now runs \
         ibv_dealloc_pd(PD B) (a failure would be printed on stderr)"
    );
    pd_a.dealloc()?;
    say!("  ibv_dealloc_pd(PD A): ok, it has no children left");
    ctx.close()?;
    say!("  ibv_close_device: ok");
    println!();
    println!("done: next, chapter 03 looks inside memory regions: access flags, keys, memlock");
    Ok(())
}

/// Prints one completion: who, wr_id, status by name and number, `ibv_wc_status_str`.
fn report(who: &str, wc: &WorkCompletion) {
    say!(
        "  {who}: wr_id={} {} \"{}\"",
        wc.wr_id,
        wc.status,
        wc.status.str()
    );
}

/// True if no completion arrives on `cq` within `quiet`.
fn nothing_arrives(cq: &CompletionQueue, quiet: Duration) -> Result<bool> {
    let start = Instant::now();
    while start.elapsed() < quiet {
        if let Some(wc) = cq.poll_one()? {
            report("unexpected", &wc);
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(true)
}
