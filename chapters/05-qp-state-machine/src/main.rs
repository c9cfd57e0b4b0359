//! # Chapter 05: the queue pair state machine
//!
//! A reliable-connected (RC) queue pair is born in RESET and must be walked, one
//! `ibv_modify_qp` at a time, through INIT and RTR (ready to receive) to RTS (ready to send).
//! Each transition requires a precise set of attributes, named by a bit mask:
//!
//! ```text
//!   RESET --INIT--> INIT --RTR--> RTR --RTS--> RTS        any state --> ERR, any state --> RESET
//!          port,          peer's QPN, PSN,       own PSN, timeout,
//!          pkey, access   GID (AV), path MTU,    retries, read credits
//!                         read credits, RNR timer
//! ```
//!
//! This chapter walks two QPs of one device (a self-connected pair: A points at B and B at A)
//! through every state, asking the QP itself (`ibv_query_qp`) where it is after each step,
//! and breaks the rules on purpose to show what each mistake really does on rxe:
//!
//! * the shortened masks some tutorials use: RESET -> INIT without `IBV_QP_ACCESS_FLAGS`, and
//!   RTR -> RTS with `IBV_QP_SQ_PSN` alone: `EINVAL (22)` each, the QP stays where it was;
//! * the INIT -> RTS shortcut some tutorials take: `EINVAL (22)`, the QP stays in INIT;
//! * INIT -> RTR without a required attribute (`IBV_QP_DEST_QPN`): `EINVAL (22)`, and
//!   `lab`'s transition table names the missing attribute (the kernel does not);
//! * a receive posted in RESET: `EINVAL (22)`;
//! * a SEND posted before RTS: `EINVAL (22)`, **yet rxe has queued it**: it goes out, and
//!   succeeds, with the next post after RTS (a "ghost send");
//! * moving to ERR flushes every outstanding work request with `IBV_WC_WR_FLUSH_ERR (5)`, and a
//!   SEND posted in ERR is accepted (returns 0) and flushed too;
//! * a responder in RTR serves SENDs, RDMA WRITEs and READs: RTS is what a QP needs to send;
//! * ERR -> RESET -> INIT -> RTR -> RTS: the same QP (same QP number) works again.
//!
//! Verbs introduced: `ibv_create_qp`, `ibv_modify_qp` ([`lab::QueuePair::modify`], and the
//! typed `to_init`/`to_rtr`/`to_rts`/`to_error`/`reset`), `ibv_query_qp`
//! ([`lab::QueuePair::query`]), `ibv_post_send`/`ibv_post_recv` in the wrong states
//! ([`lab::QueuePair::post_send_any_state`], lab's escape hatch for demonstrating mistakes:
//! its typed API only lets a `QueuePair<Rts>` send).
//!
//! Run it: `cargo lab run 05` (or `cargo lab exec -- target/debug/ch05-qp-state-machine` with a
//! lab up). No options.

use std::process::ExitCode;

use clap::Parser;
use std::time::{Duration, Instant};

// Every step returns `Result` (the course's `Outcome`): a value, or a `Failure` whose message
// `main` prints after `ch05-qp-state-machine: error: ` (lab's errors name the verb, the errno and,
// for classic mistakes, a hint).
use course::Outcome as Result;
use course::show;
use lab::{
    AccessFlags, AddressVector, CompletionQueue, Context, Error, InitAttr, QpAttr, QpInitAttr,
    QpState, QpTypeState, QueuePair, RecvWr, RtrAttr, RtsAttr, SendWr, WcOpcode, WcStatus,
    WorkCompletion, transition,
};

/// The command line: no options.
#[derive(Parser, Debug)]
#[command(
    name = "ch05-qp-state-machine",
    about = "Walks two RC queue pairs through RESET -> INIT -> RTR -> RTS -> ERR -> RESET -> ... \
             RTS and breaks the rules on purpose (no options)"
)]
struct Args {}

fn main() -> ExitCode {
    // clap: `--help`, and a clear message with exit status 2 for any argument.
    Args::parse();
    course::exit_code_of("ch05-qp-state-machine", run())
}

/// First PSNs of A and B (any 24-bit values), and the new ones after the reset in step 10.
const PSN_A: u32 = 0x00a000;
const PSN_B: u32 = 0x00b000;
const PSN_A2: u32 = 0x00a100;
const PSN_B2: u32 = 0x00b100;
/// Layout of the one registered buffer: A's messages, then B's receive buffers, 64 bytes each.
const MSG: usize = 64;
const A_MSGS: usize = 0;
const B_RECV: usize = 1024;
const A_RECV: usize = 2048;
/// Where step 8's RDMA WRITE lands in B's region (and its READ reads back, to 64 bytes on).
const ONE_SIDED: usize = 3072;
/// Deadline for anything that should happen (generous: the lab runs under emulation).
const WAIT: Duration = Duration::from_secs(10);
/// How long we watch to show that nothing happens. A loopback SEND completes in about a
/// millisecond here, so silence this long means "it did not go out".
const QUIET: Duration = Duration::from_millis(300);

fn run() -> Result<()> {
    println!("ch05-qp-state-machine: RESET -> INIT -> RTR -> RTS, and what breaks it");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 1: create two RC queue pairs, A and B (ibv_create_qp)");
    let ctx = Context::open_default()?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let pd = ctx.alloc_pd()?;
    let mut mr = pd.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
    for (i, text) in [&b"ghost"[..], b"hello", b"recovered"].iter().enumerate() {
        let off = A_MSGS + i * MSG;
        mr.as_mut_slice()[off..off + text.len()].copy_from_slice(text);
    }
    // One CQ per QP, so every completion says by where it lands whose it is.
    let cq_a = ctx.create_cq(16, None)?;
    let cq_b = ctx.create_cq(16, None)?;
    let qa = pd.create_qp(&QpInitAttr::rc(&cq_a, &cq_a))?;
    let qb = pd.create_qp(&QpInitAttr::rc(&cq_b, &cq_b))?;
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    println!("  A {}, B {}", show::qpn(na), show::qpn(nb));
    print_state("A", &qa)?;
    // A QP in RESET has queues but refuses work: not even a receive can be posted yet.
    let r = [mr.sge(B_RECV..B_RECV + MSG)];
    match qb.post_recv_one(RecvWr::new(100, &r)) {
        Err(e) if e.errno().map(|e| e.0) == Some(22) => {
            println!(
                "  B posts a RECV in RESET: ibv_post_recv failed: {}",
                errno(&e)
            );
        }
        Err(e) => return Err(e.into()),
        Ok(()) => return Err("ibv_post_recv in RESET succeeded".into()),
    }
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 2: what each transition requires (lab::transition, from ibv_modify_qp(3))");
    // Every ibv_modify_qp call carries a mask saying which attributes it sets. Each legal
    // transition has attributes it *requires* and some it also *accepts*; anything missing or
    // extra makes the call fail with EINVAL. lab's typed transitions always send the right
    // mask; the table below is what they follow.
    for (from, to) in [
        (QpState::Reset, QpState::Init),
        (QpState::Init, QpState::Rtr),
        (QpState::Rtr, QpState::Rts),
    ] {
        let t = transition(from, to).ok_or("the transition table lacks a bring-up step")?;
        println!("  {from} -> {to}: IBV_QP_STATE | {}", t.required);
        if !t.optional.is_empty() {
            println!("      also accepted: {}", t.optional);
        }
    }
    let t = transition(QpState::Rts, QpState::Err).ok_or("no RTS -> ERR in the table")?;
    if !t.required.is_empty() {
        return Err("the table says -> ERR requires attributes".into());
    }
    println!("  any state -> ERR, any state -> RESET: IBV_QP_STATE alone");
    println!(
        "  INIT -> RTS is not in the table: {}",
        if transition(QpState::Init, QpState::Rts).is_none() {
            "illegal"
        } else {
            "legal?!"
        }
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 3: RESET -> INIT (port 1, pkey index 0, access flags)");
    // INIT binds the QP to a port and says which remote operations it accepts. Some tutorials
    // send only the port and the pkey index: for an RC QP the access flags are required too
    // (the kernel's ib_modify_qp_is_ok, drivers/infiniband/core/verbs.c, which rxe calls when
    // it checks a modify: rxe_qp.c), so that mask is refused and the QP stays in RESET.
    let no_access = QpAttr::new().state(QpState::Init).pkey_index(0).port_num(1);
    expect_einval("A", &qa, &no_access)?;
    print_state("A", &qa)?;
    // Now with the access flags. From INIT on, receives may be posted (a good habit: post them
    // before the peer can send).
    let qa = qa.to_init(&InitAttr::default())?;
    let qb = qb.to_init(&InitAttr::default())?;
    print_state("A", &qa)?;
    print_state("B", &qb)?;
    let recv_sges: Vec<[lab::Sge; 1]> = (0..4)
        .map(|i| {
            let off = B_RECV + i * MSG;
            [mr.sge(off..off + MSG)]
        })
        .collect();
    let mut recvs: Vec<RecvWr<'_>> = recv_sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(100 + i as u64, s))
        .collect();
    qb.post_recv(&mut recvs)?;
    println!("  B posts 4 RECVs (wr_ids 100..103): accepted in INIT");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 4: the shortcut some tutorials take: INIT -> RTS, skipping RTR");
    // The RTS attributes alone, sent from INIT. RTR is where the QP learns who its peer is;
    // there is no way around it.
    let shortcut = QpAttr::new()
        .state(QpState::Rts)
        .timeout(14)
        .retry_cnt(6)
        .rnr_retry(6)
        .sq_psn(PSN_A)
        .max_rd_atomic(1);
    expect_einval("A", &qa, &shortcut)?;
    print_state("A", &qa)?;
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 5: INIT -> RTR with a required attribute missing (no IBV_QP_DEST_QPN)");
    // Everything RTR needs except the peer's QP number: a classic copy-paste slip.
    let port = ctx.query_port(1)?;
    let rd = ctx.query_device()?.max_qp_rd_atom.clamp(1, 16) as u8;
    let no_dest = QpAttr::new()
        .state(QpState::Rtr)
        .av(&AddressVector::roce(gid.gid, gid.index as u8, 1))
        .path_mtu(port.active_mtu)
        .rq_psn(PSN_B)
        .max_dest_rd_atomic(rd)
        .min_rnr_timer(12);
    expect_einval("A", &qa, &no_dest)?;
    print_state("A", &qa)?;
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 6: INIT -> RTR, properly: the peer's QPN, its first PSN, its GID, the path MTU");
    let qa = qa.to_rtr(&RtrAttr::new(nb, PSN_B, gid.gid))?;
    let qb = qb.to_rtr(&RtrAttr::new(na, PSN_A, gid.gid))?;
    print_rtr("A", &qa)?;
    print_rtr("B", &qb)?;
    // B stays in RTR: it is only the responder here, and an RC responder needs no more than
    // RTR (RTS only adds what a requester needs). Step 8 shows it serving in RTR.
    println!("  B stays in RTR (a responder needs no more); A stays in RTR for the next step");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 7: post a SEND before RTS (A is in RTR)");
    // lab's typed API only lets a QueuePair<Rts> send; post_send_any_state is the escape
    // hatch for showing what the C API lets you do.
    let ghost_sge = [mr.sge(A_MSGS..A_MSGS + 5)];
    // lab's error carries a hint for this EINVAL; we keep it for after the surprise.
    let ghost_hint = match qa.post_send_any_state(&mut [SendWr::send(1, &ghost_sge)]) {
        Err(e) if e.errno().map(|e| e.0) == Some(22) => {
            println!("  ibv_post_send(\"ghost\", wr_id 1) failed: {}", errno(&e));
            e.hint().map_or("(none)".to_string(), |h| h.to_string())
        }
        Err(e) => return Err(e.into()),
        Ok(()) => return Err("ibv_post_send in RTR succeeded".into()),
    };
    expect_quiet(&cq_a, &cq_b)?;
    println!(
        "  nothing completes on A, nothing arrives at B ({} ms): it looks refused",
        QUIET.as_millis()
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!(
        "step 8: RTR -> RTS, then post the next SEND; then WRITE and READ into B, still in RTR"
    );
    // Some tutorials move to RTS with the send PSN alone. RTS also needs the requester's
    // timers and credits (the ACK timeout, the two retry counts, the READ/atomic credits): that
    // mask is refused too, and A stays in RTR.
    let psn_only = QpAttr::new().state(QpState::Rts).sq_psn(PSN_A);
    expect_einval("A", &qa, &psn_only)?;
    print_state("A", &qa)?;
    let qa = qa.to_rts(&RtsAttr::new(PSN_A))?;
    print_rts("A", &qa)?;
    expect_quiet(&cq_a, &cq_b)?;
    println!(
        "  still nothing ({} ms): reaching RTS does not send anything by itself",
        QUIET.as_millis()
    );
    let hello_sge = [mr.sge(A_MSGS + MSG..A_MSGS + MSG + 5)];
    qa.post_send_one(SendWr::send(2, &hello_sge))?;
    println!("  ibv_post_send(\"hello\", wr_id 2): ok");
    let mut wa = [WorkCompletion::default(); 2];
    cq_a.poll_exact_for(&mut wa, WAIT, "A's SEND completions")?;
    for wc in &wa {
        println!(
            "  A completion: wr_id {}, {}, {}",
            wc.wr_id, wc.opcode, wc.status
        );
    }
    let mut wb = [WorkCompletion::default(); 2];
    cq_b.poll_exact_for(&mut wb, WAIT, "B's receive completions")?;
    let mut got = Vec::new();
    for wc in &wb {
        wc.ok()?;
        let off = B_RECV + (wc.wr_id - 100) as usize * MSG;
        let text = String::from_utf8_lossy(&mr.as_slice()[off..off + wc.byte_len as usize]);
        println!(
            "  B completion: wr_id {}, {}, {} bytes {text:?}",
            wc.wr_id, wc.opcode, wc.byte_len
        );
        got.push(text.into_owned());
    }
    let ids: Vec<u64> = wa.iter().map(|w| w.wr_id).collect();
    if ids != [1, 2] || wa.iter().any(|w| !w.is_success()) || got != ["ghost", "hello"] {
        return Err("expected the ghost SEND then hello, both successful".into());
    }
    println!("  the \"failed\" SEND went out: rxe had queued it and the next doorbell sent both");
    println!("  (EINVAL from ibv_post_send did not mean \"nothing was queued\": never post");
    println!("  before RTS, and treat any post error as fatal for the QP)");
    println!("  lab's hint for that EINVAL (held back until now):");
    println!("    {ghost_hint}");
    // One-sided operations into a responder that is still in RTR: some tutorials blame access
    // errors on "a server QP not yet in RTS". RTR is enough to serve WRITE and READ (and the
    // SENDs above); a responder in RESET or INIT would not answer at all, and the requester
    // would time out (RETRY_EXC_ERR), not see an access error.
    print_state("B", &qb)?;
    let remote = mr.remote();
    let w_sge = [mr.sge(A_MSGS + MSG..A_MSGS + MSG + 5)];
    qa.post_send_one(SendWr::write(
        5,
        &w_sge,
        remote.addr + ONE_SIDED as u64,
        remote.rkey,
    ))?;
    let r_sge = [mr.sge(ONE_SIDED + MSG..ONE_SIDED + MSG + 5)];
    qa.post_send_one(SendWr::read(
        6,
        &r_sge,
        remote.addr + ONE_SIDED as u64,
        remote.rkey,
    ))?;
    let mut wr = [WorkCompletion::default(); 2];
    cq_a.poll_exact_for(&mut wr, WAIT, "A's WRITE and READ completions")?;
    for wc in &wr {
        println!(
            "  A completion: wr_id {}, {}, {}",
            wc.wr_id, wc.opcode, wc.status
        );
    }
    let back = &mr.as_slice()[ONE_SIDED + MSG..ONE_SIDED + MSG + 5];
    if wr.iter().any(|w| !w.is_success()) || back != b"hello" {
        return Err("the WRITE and READ into B in RTR should both succeed".into());
    }
    println!(
        "  B served A's RDMA WRITE and RDMA READ while in RTR: {:?} written, read back",
        String::from_utf8_lossy(back)
    );
    let qb = qb.to_rts(&RtsAttr::new(PSN_B))?;
    println!("  B -> RTS (not needed to serve; a QP needs it only to send)");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 9: RTS -> ERR flushes outstanding work requests");
    let a_recv_sges: Vec<[lab::Sge; 1]> = (0..3)
        .map(|i| {
            let off = A_RECV + i * MSG;
            [mr.sge(off..off + MSG)]
        })
        .collect();
    let mut a_recvs: Vec<RecvWr<'_>> = a_recv_sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(200 + i as u64, s))
        .collect();
    qa.post_recv(&mut a_recvs)?;
    println!("  A posts 3 RECVs (wr_ids 200..202); nobody will send to A");
    let qa = qa.to_error()?;
    print_state("A", &qa)?;
    let mut flushed = [WorkCompletion::default(); 3];
    cq_a.poll_exact_for(&mut flushed, WAIT, "A's flushed RECVs")?;
    for wc in &flushed {
        println!("  A completion: wr_id {}, {}", wc.wr_id, wc.status);
    }
    let ids: Vec<u64> = flushed.iter().map(|w| w.wr_id).collect();
    if ids != [200, 201, 202] || flushed.iter().any(|w| w.status != WcStatus::WrFlushErr) {
        return Err("expected 3 flushed RECVs, in order".into());
    }
    println!("  3 of 3 flushed, in order: ERR completes everything outstanding, unexecuted");
    // In ERR, the C API still accepts sends: they are flushed at once.
    let again = [mr.sge(A_MSGS + MSG..A_MSGS + MSG + 5)];
    qa.post_send_any_state(&mut [SendWr::send(3, &again)])?;
    println!("  A posts a SEND in ERR (wr_id 3): ibv_post_send returns 0 (accepted!)");
    let wc = cq_a.wait_one(WAIT)?;
    println!("  A completion: wr_id {}, {}", wc.wr_id, wc.status);
    if wc.wr_id != 3 || wc.status != WcStatus::WrFlushErr {
        return Err("expected the SEND posted in ERR to be flushed".into());
    }
    if cq_b.poll_one()?.is_some() {
        return Err("B received something from a QP in ERR".into());
    }
    println!(
        "  B got nothing; B itself is unaffected: {}",
        state_of(&qb)?
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 10: recover: ERR -> RESET -> INIT -> RTR -> RTS, and send again");
    // RESET empties the queues without completions. The PSNs start over too, so the peer must
    // be told: here B is reset as well and both get new PSNs, as a reconnection would do.
    let qa = qa.reset()?;
    print_state("A", &qa)?;
    let qb = qb.reset()?;
    print_state("B", &qb)?;
    // B still had 2 RECVs posted (102, 103). RESET discards them: no completion, ever.
    expect_quiet(&cq_a, &cq_b)?;
    println!(
        "  no completion on either CQ ({} ms): B's 2 unused RECVs (wr_ids 102, 103) were",
        QUIET.as_millis()
    );
    println!("  discarded silently (ERR flushes work requests with a completion, RESET does not)");
    let qa = qa.to_init(&InitAttr::default())?;
    let qb = qb.to_init(&InitAttr::default())?;
    let r = [mr.sge(B_RECV..B_RECV + MSG)];
    qb.post_recv_one(RecvWr::new(110, &r))?;
    let qa = qa
        .to_rtr(&RtrAttr::new(nb, PSN_B2, gid.gid))?
        .to_rts(&RtsAttr::new(PSN_A2))?;
    let qb = qb
        .to_rtr(&RtrAttr::new(na, PSN_A2, gid.gid))?
        .to_rts(&RtsAttr::new(PSN_B2))?;
    println!(
        "  A {} {}, B {} {}: the same QP numbers, new PSNs",
        show::qpn(qa.qp_num()),
        show::psn(PSN_A2),
        show::qpn(qb.qp_num()),
        show::psn(PSN_B2)
    );
    print_state("A", &qa)?;
    let rec_sge = [mr.sge(A_MSGS + 2 * MSG..A_MSGS + 2 * MSG + 9)];
    qa.post_send_one(SendWr::send(4, &rec_sge))?;
    let wc = cq_a.wait_one(WAIT)?.ok()?;
    let wr = cq_b.wait_one(WAIT)?.ok()?;
    let text = String::from_utf8_lossy(&mr.as_slice()[B_RECV..B_RECV + wr.byte_len as usize]);
    println!(
        "  A completion: wr_id {}, {}, {}; B received {text:?} (wr_id {})",
        wc.wr_id, wc.opcode, wc.status, wr.wr_id
    );
    if text != "recovered" || wc.opcode != WcOpcode::Send || wr.wr_id != 110 {
        return Err("the recovered QP did not deliver the message".into());
    }
    println!("  (it landed in the RECV posted after the reset, 110, not in the discarded 102)");
    println!("  recovered: an errored QP is reset and reused; no need to destroy it");
    println!();

    qa.destroy()?;
    qb.destroy()?;
    println!("done: every transition and every mistake behaved as shown");
    Ok(())
}

/// `EINVAL (22)` from a lab error.
fn errno(e: &Error) -> String {
    e.errno()
        .map_or_else(|| e.report().to_string(), |n| show::errno(n.0).to_string())
}

/// The state `ibv_query_qp` reports.
fn state_of<S: QpTypeState>(qp: &QueuePair<S>) -> Result<QpState> {
    Ok(qp.query()?.state)
}

/// "ibv_query_qp: A is INIT", checking that the QP is where its type says.
fn print_state<S: QpTypeState>(name: &str, qp: &QueuePair<S>) -> Result<()> {
    let s = state_of(qp)?;
    println!("  ibv_query_qp: {name} is {s}");
    if s != qp.typestate() {
        return Err(format!("{name} is {s}, expected {}", qp.typestate()).into());
    }
    Ok(())
}

/// The state, and what RTR set, read back with `ibv_query_qp`.
fn print_rtr<S: QpTypeState>(name: &str, qp: &QueuePair<S>) -> Result<()> {
    print_state(name, qp)?;
    let i = qp.query()?;
    println!(
        "    dest {} rq {} {} max_dest_rd_atomic={} min_rnr_timer={}",
        show::qpn(i.dest_qp_num),
        show::psn(i.rq_psn),
        show::mtu(i.path_mtu.map_or(0, |m| m.bytes())),
        i.max_dest_rd_atomic,
        i.min_rnr_timer
    );
    Ok(())
}

/// The state, and what RTS set, read back with `ibv_query_qp`.
fn print_rts<S: QpTypeState>(name: &str, qp: &QueuePair<S>) -> Result<()> {
    print_state(name, qp)?;
    let i = qp.query()?;
    println!(
        "    sq {} timeout={} retry_cnt={} rnr_retry={} max_rd_atomic={}",
        show::psn(i.sq_psn),
        i.timeout,
        i.retry_cnt,
        i.rnr_retry,
        i.max_rd_atomic
    );
    Ok(())
}

/// Sends `attr` with the raw `ibv_modify_qp` and expects `EINVAL (22)`; prints the call, its
/// errno and lab's explanation (from its transition table).
fn expect_einval<S: QpTypeState>(name: &str, qp: &QueuePair<S>, attr: &QpAttr) -> Result<()> {
    let to = attr.target_state().unwrap_or(QpState::Reset);
    println!(
        "  ibv_modify_qp({name}, {} -> {to}, mask {})",
        qp.typestate(),
        attr.mask()
    );
    match qp.modify(attr) {
        Ok(()) => Err(format!("{} -> {to} was accepted", qp.typestate()).into()),
        Err(e) if e.errno().map(|e| e.0) == Some(22) => {
            println!("  failed: {}", errno(&e));
            // lab checks the mask against its table and says what is wrong: the kernel only
            // returns EINVAL, without saying why.
            if lab::check_transition(qp.typestate(), to, attr.mask()).is_ok() {
                return Err("lab's table accepts a mask the device refused".into());
            }
            if e.hints().is_empty() {
                println!("  lab explains: (no explanation)");
            }
            for hint in e.hints() {
                println!("  lab explains: {hint}");
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Watches both CQs for [`QUIET`]: nothing may complete.
fn expect_quiet(cq_a: &CompletionQueue, cq_b: &CompletionQueue) -> Result<()> {
    let until = Instant::now() + QUIET;
    while Instant::now() < until {
        if let Some(wc) = cq_a.poll_one()? {
            return Err(format!(
                "unexpected completion on A: wr_id {} {}",
                wc.wr_id, wc.status
            )
            .into());
        }
        if let Some(wc) = cq_b.poll_one()? {
            return Err(format!(
                "unexpected completion on B: wr_id {} {}",
                wc.wr_id, wc.status
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
