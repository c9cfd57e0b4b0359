//! # Chapter 04: completion queues, polling and events
//!
//! Every work request you post finishes with a *work completion* (a CQE) in a completion queue
//! (CQ). There are two ways to find out that one arrived:
//!
//! * **busy polling**: call `ibv_poll_cq` in a loop. Lowest latency, and the thread never
//!   sleeps, so it keeps a core at 100 % even when nothing happens;
//! * **completion events**: arm the CQ (`ibv_req_notify_cq`), sleep in `poll(2)` on a
//!   *completion channel*'s file descriptor, take the event (`ibv_get_cq_event`), acknowledge
//!   it (`ibv_ack_cq_events`), re-arm, and only then drain the CQ with `ibv_poll_cq`. The
//!   thread sleeps while nothing happens, and each wake-up costs system calls.
//!
//! This chapter runs the same traffic (1000 RDMA WRITEs from QP A into QP B's memory, a few in
//! flight at a time) both ways and prints what each cost in CPU time. On the way it shows the
//! rules of events one at a time, each with a check that fails the program if rxe behaves
//! differently:
//!
//! * one event covers *any number* of completions: it means "at least one new CQE";
//! * the CQ disarms itself after each event: no re-arm, no next event;
//! * arming does not look at what is already in the CQ (the *lost wake-up*): arm, **then**
//!   drain;
//! * `solicited_only` arming wakes you only for a SEND that carries `IBV_SEND_SOLICITED`;
//! * every event taken must be acknowledged before its CQ is destroyed, or `ibv_destroy_cq`
//!   blocks forever.
//!
//! Verbs introduced (each maps to a `lab` call):
//!
//! | C verb | `lab` | what it does |
//! |---|---|---|
//! | `ibv_create_comp_channel` | [`lab::Context::create_comp_channel`] | a file descriptor events arrive on |
//! | `ibv_create_cq` | [`lab::Context::create_cq`] | a CQ, optionally tied to a channel |
//! | `ibv_poll_cq` | [`lab::CompletionQueue::poll_into`] | takes up to N completions, never waits |
//! | `ibv_req_notify_cq` | [`lab::CompletionQueue::req_notify`] | arms the CQ for one event |
//! | `ibv_get_cq_event` | [`lab::CompletionQueue::get_event`] | waits (with a deadline) for that event |
//! | `ibv_ack_cq_events` | [`lab::CqEvent::ack`] | acknowledges it |
//! | `ibv_destroy_cq`, `ibv_destroy_comp_channel` | `destroy()` | teardown |
//!
//! The QPs are brought up RESET -> INIT -> RTR -> RTS with `lab`'s typed transitions; chapter
//! 05 takes that state machine apart.
//!
//! Run it: `cargo lab run 04` (or `cargo lab exec -- target/debug/ch04-completion-queues`
//! with a lab up). Options: `-n N` WRITEs per way of waiting (default 1000), `-w W` at most W
//! in flight (default 16), `--counts` also prints the figures that vary from run to run
//! (polls, events, context switches).
//!
//! One file of a little over 800 lines, on purpose: the steps share one pair of QPs and build
//! on each other, and a learner reads them in order.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

// Every step returns `Result` (the course's `Outcome`): a value, or a `Failure` whose message
// `main` prints after `ch04-completion-queues: error: ` (lab's errors name the verb, the errno
// and, for classic mistakes, a hint).
use course::Outcome as Result;
use course::show;
use lab::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, CpuTime, Error, InitAttr,
    MemoryRegion, QpInitAttr, QueuePair, RecvWr, RtrAttr, RtsAttr, SendWr, WcOpcode, WcStatus,
    WorkCompletion,
};

/// The command line (clap: `--help` and a clear message with exit status 2 for a bad flag).
#[derive(Parser, Debug)]
#[command(
    name = "ch04-completion-queues",
    about = "Completion queues: busy polling vs completion events, and what each costs"
)]
struct Args {
    /// RDMA WRITEs per way of waiting
    #[arg(short = 'n', long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    iters: u64,
    /// At most W WRITEs in flight (up to the send queue's 64)
    #[arg(short = 'w', long, value_name = "W", default_value_t = 16,
          value_parser = window)]
    window: usize,
    /// Also print the figures that vary run to run (polls, events, switches)
    #[arg(long)]
    counts: bool,
}

/// `-w`: a window in 1..=MAX_WINDOW.
fn window(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_WINDOW).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a window in 1..={MAX_WINDOW}")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    course::exit_code_of("ch04-completion-queues", run(&args))
}

/// The send queue's size, and so the largest window.
const MAX_WINDOW: usize = 64;
/// Bytes per WRITE / SEND.
const MSG: usize = 64;
/// Layout of the one registered buffer: A's source bytes, B's receive buffers, B's WRITE target.
const SRC: usize = 0;
const RECV_AREA: usize = 1024;
const TARGET: usize = 4096;
const BUF_LEN: usize = 8192;
/// The first PSNs of A and B (any 24-bit values; fixed so runs compare).
const PSN_A: u32 = 0x00a000;
const PSN_B: u32 = 0x00b000;
/// Deadline for anything that should happen (generous: the lab runs under emulation).
const WAIT: Duration = Duration::from_secs(10);
/// How long we watch a channel to show that an event does *not* come. Events come within
/// microseconds of their completion, so silence this long means "none".
const QUIET: Duration = Duration::from_millis(300);
/// What an `ibv_poll_cq` on an empty CQ may take here: it returns at once.
const EMPTY_POLL_LIMIT: Duration = Duration::from_millis(50);

/// The objects of this chapter. Field order is drop order: QPs, then CQs, then channels, the
/// MR, the PD and the device (lab's objects also keep their parents alive, so any order works).
struct Rig {
    qa: QueuePair,
    qb: QueuePair,
    /// A's CQ (sends and, if A received anything, receives): on channel `ch_send`.
    scq: CompletionQueue,
    /// B's CQ (its receives): on channel `ch_recv`.
    rcq: CompletionQueue,
    ch_send: CompletionChannel,
    ch_recv: CompletionChannel,
    mr: MemoryRegion,
}

fn run(args: &Args) -> Result<()> {
    println!("ch04-completion-queues: busy polling vs completion events");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 1: open the device, a protection domain and one registered buffer");
    let ctx = Context::open_default()?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let pd = ctx.alloc_pd()?;
    let mut mr = pd.reg_mr(BUF_LEN, AccessFlags::ALL_REMOTE)?;
    // A's source bytes: a recognisable pattern, checked where it lands.
    for (i, b) in mr.as_mut_slice()[SRC..SRC + MSG].iter_mut().enumerate() {
        *b = b'a' + (i % 26) as u8;
    }
    println!(
        "  {} port 1, {} (GID[{}]); buffer of {BUF_LEN} bytes: {} {}",
        ctx.name(),
        show::gid(&gid.gid.raw()),
        gid.index,
        show::lkey(mr.lkey()),
        show::rkey(mr.rkey())
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 2: two completion channels and two completion queues");
    println!("  (ibv_create_comp_channel, ibv_create_cq)");
    // A completion channel is just a file descriptor the kernel writes an event to when an
    // *armed* CQ gets a completion. A CQ tied to a channel can still be polled like any other:
    // nothing happens on the channel until you arm the CQ.
    //
    // One channel per CQ keeps this chapter's checks exact. Several CQs may share one channel
    // (an event loop then waits on one fd); `CqEvent::is_for(&cq)` tells which CQ woke you.
    let ch_send = ctx.create_comp_channel()?;
    let ch_recv = ctx.create_comp_channel()?;
    let scq = ctx.create_cq(128, Some(&ch_send))?;
    let rcq = ctx.create_cq(16, Some(&ch_recv))?;
    println!(
        "  send CQ (A): asked for cqe=128, got {}; receive CQ (B): asked for 16, got {}",
        scq.cqe(),
        rcq.cqe()
    );
    // rxe keeps the CQ in a ring of 2^k slots and leaves one slot empty to tell "full" from
    // "empty", so cqe = N becomes the next 2^k - 1 >= N. Other devices round differently; a
    // program must size by what it asked for and never assume the extra room.
    if scq.cqe() < 128 || rcq.cqe() < 16 {
        return Err("the device gave a CQ smaller than asked".into());
    }
    println!("  rxe rounds up to the next 2^k - 1 (a ring of 2^k slots, one always left empty)");
    println!("  a completion that finds the CQ full is lost (chapter 08): size it for the");
    println!("  most completions that can be outstanding at once");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 3: a self-connected RC pair: QP A sends, QP B is the target");
    // A's completions (its WRITEs and SENDs) go to the send CQ; B only receives, so its
    // receive completions go to the receive CQ. A QP needs both a send and a receive CQ; a QP
    // that uses only one side can give the same CQ twice.
    let qa = pd.create_qp(&QpInitAttr::rc(&scq, &scq).max_send_wr(MAX_WINDOW as u32))?;
    let qb = pd.create_qp(&QpInitAttr::rc(&rcq, &rcq))?;
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    // RESET -> INIT -> RTR -> RTS, each pointing at the other (chapter 05 explains the steps).
    let qa = qa.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(nb, PSN_B, gid.gid),
        &RtsAttr::new(PSN_A),
    )?;
    let qb = qb.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(na, PSN_A, gid.gid),
        &RtsAttr::new(PSN_B),
    )?;
    println!(
        "  A {} {} -> B; B {} {} -> A; both RTS",
        show::qpn(na),
        show::psn(PSN_A),
        show::qpn(nb),
        show::psn(PSN_B)
    );
    println!();
    let rig = Rig {
        qa,
        qb,
        scq,
        rcq,
        ch_send,
        ch_recv,
        mr,
    };

    // -----------------------------------------------------------------------------------------
    println!(
        "step 4: busy polling: {} RDMA WRITEs of {MSG} bytes, at most {} in flight",
        args.iters, args.window
    );
    println!("  (ibv_post_send, then ibv_poll_cq in a loop until every completion is in)");
    let polled = busy_poll_writes(&rig, args)?;
    println!(
        "  {} completions: all {}, opcode {}, wr_ids 0..{} in order",
        args.iters,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        args.iters - 1
    );
    check_target(&rig.mr)?;
    // ibv_poll_cq never waits: on an empty CQ it returns 0 at once. On rxe a poll reads the
    // CQ's ring, which the kernel maps into the process (providers/rxe/rxe.c, rxe_poll_cq): no
    // system call. Some tutorials call it blocking.
    let mut room = [WorkCompletion::default(); 16];
    let t_poll = Instant::now();
    let got = rig.rcq.poll_into(&mut room)?;
    let took = t_poll.elapsed();
    if got != 0 {
        return Err("a completion on B's CQ: an RDMA WRITE should produce none there".into());
    }
    // A read of the ring takes microseconds, even under emulation; the limit leaves room for
    // a busy host preempting us, and is far below any wait for a completion.
    if took >= EMPTY_POLL_LIMIT {
        return Err(format!("ibv_poll_cq on an empty CQ took {took:?}: it should not wait").into());
    }
    println!("  the data landed in B's buffer; B posted nothing and got no completion (one-sided)");
    println!(
        "  ibv_poll_cq on B's empty CQ, room for 16: returned 0 in under {} ms (it never waits)",
        EMPTY_POLL_LIMIT.as_millis()
    );
    expect_no_event(&rig.scq, "the send CQ, never armed")?;
    println!(
        "  the channel stayed silent ({} ms): a CQ raises events only when armed",
        QUIET.as_millis()
    );
    println!("  {}", cost_line(&polled));
    if args.counts {
        println!(
            "  counts (vary run to run): ibv_poll_cq loops={} of which empty={}, voluntary \
             context switches={}",
            polled.polls, polled.empty_polls, polled.cpu.voluntary_switches
        );
    }
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 5: one event, many completions: arm once, post 8 WRITEs, do not re-arm");
    // ibv_req_notify_cq(cq, 0): "raise one event at the next completion". After that event
    // the CQ is disarmed until you arm it again.
    rig.scq.req_notify(false)?;
    post_writes(&rig, 0..8)?;
    let ev = rig.scq.get_event(WAIT)?;
    // Acknowledge every event you take. Acks may be batched (ibv_ack_cq_events(cq, n)), but
    // each one must be acked before the CQ is destroyed (step 10).
    ev.ack();
    println!(
        "  event 1 on the send CQ's channel (ibv_get_cq_event), acknowledged (ibv_ack_cq_events)"
    );
    let mut wcs = [WorkCompletion::default(); 8];
    rig.scq
        .poll_exact_for(&mut wcs, WAIT, "the 8 WRITEs' completions")?;
    check_in_order(&wcs, 0, WcOpcode::RdmaWrite)?;
    println!("  then ibv_poll_cq drained 8 completions: the event meant \"at least one new CQE\"");
    expect_no_event(&rig.scq, "the send CQ, not re-armed")?;
    println!(
        "  no second event ({} ms): the CQ disarmed itself when it raised the first",
        QUIET.as_millis()
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 6: the lost wake-up: arming ignores completions already in the CQ");
    lost_wakeup(&rig)?;
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 7: solicited-only: wake the receiver only for the message that matters");
    solicited_only(&rig)?;
    println!();

    // -----------------------------------------------------------------------------------------
    println!(
        "step 8: the event loop: the same {} WRITEs, at most {} in flight, completed by events",
        args.iters, args.window
    );
    println!("  (arm; post; then: wait for an event, ack it, re-arm, drain with ibv_poll_cq)");
    let evented = event_loop_writes(&rig, args)?;
    println!(
        "  {} completions: all {}, opcode {}, wr_ids 0..{} in order",
        args.iters,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        args.iters - 1
    );
    check_target(&rig.mr)?;
    // The exact number of events depends on timing: while we drain, more WRITEs complete and
    // are drained in the same pass, so one event often covers several completions. Only the
    // bounds are certain, and they are checked.
    println!(
        "  events: at least 1, at most one per completion (the exact number varies: --counts)"
    );
    println!("  every event taken was acknowledged");
    println!("  {}", cost_line(&evented));
    if args.counts {
        println!(
            "  counts (vary run to run): events={} of which found the CQ already drained={}, \
             voluntary context switches={}",
            evented.events, evented.empty_events, evented.cpu.voluntary_switches
        );
    }
    println!();

    // -----------------------------------------------------------------------------------------
    println!(
        "step 9: what each way of waiting cost for the same {} WRITEs",
        args.iters
    );
    println!("  busy polling: {}", cost_line(&polled));
    println!("  events:       {}", cost_line(&evented));
    // Which one costs less CPU depends on where you run: see the README. With busy polling the
    // process never sleeps, so its CPU time tracks its wall time; with events it sleeps in
    // poll(2) between completions and pays a few system calls per wake-up instead.
    //
    // rxe adds a twist: it does the transport's work (requester, responder, completer) in the
    // system call of the process that posts, ibv_post_send's doorbell. In loopback that is
    // both ends, so a WRITE is often complete before ibv_post_send returns, the event loop
    // seldom has to sleep, and most of both figures is system time spent running RoCE. The
    // lab runs under emulation (TCG), where every figure is slow and noisy, so this chapter
    // prints both and draws no conclusion for you: run it a few times with --counts.
    println!("  (compare cpu with elapsed: a busy poller burns CPU for all of its elapsed time,");
    println!("  an event loop only while it works; rxe also runs the transport itself inside");
    println!("  ibv_post_send's system call, which is the system time here: see the README)");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 10: tear down: every event acknowledged before its CQ is destroyed");
    teardown(rig)?;
    println!();
    println!("done: polling and events both completed every work request; every event acked");
    Ok(())
}

/// What one way of waiting cost.
struct Cost {
    elapsed: Duration,
    cpu: CpuTime,
    polls: u64,
    empty_polls: u64,
    events: u64,
    empty_events: u64,
}

fn cost_line(c: &Cost) -> String {
    format!(
        "{} {} (user {} + system {})",
        show::elapsed(c.elapsed),
        show::cpu(c.cpu.total()),
        show::cpu(c.cpu.user),
        show::cpu(c.cpu.system)
    )
}

/// Posts one signaled RDMA WRITE per id in `ids` (as one chain: one `ibv_post_send`), from A's
/// source bytes into B's target area (slot `id % 16`).
fn post_writes(rig: &Rig, ids: std::ops::Range<u64>) -> Result<()> {
    let src = [rig.mr.sge(SRC..SRC + MSG)];
    let target = rig.mr.addr() + TARGET as u64;
    let mut wrs: Vec<SendWr<'_>> = ids
        .map(|id| {
            let off = (id % 16) * MSG as u64;
            SendWr::write(id, &src, target + off, rig.mr.rkey())
        })
        .collect();
    rig.qa.post_send(&mut wrs)?;
    Ok(())
}

/// Checks one completion of A's traffic: success, the right opcode, the expected wr_id.
fn check_wc(wc: &WorkCompletion, want_id: u64, op: WcOpcode) -> Result<()> {
    if wc.status != WcStatus::Success {
        // WorkCompletion::ok turns it into an error that explains the status.
        wc.ok()?;
    }
    if wc.opcode != op || wc.wr_id != want_id {
        return Err(format!(
            "unexpected completion: wr_id {} {} (expected wr_id {want_id} {op})",
            wc.wr_id, wc.opcode
        )
        .into());
    }
    Ok(())
}

fn check_in_order(wcs: &[WorkCompletion], first: u64, op: WcOpcode) -> Result<()> {
    for (i, wc) in wcs.iter().enumerate() {
        check_wc(wc, first + i as u64, op)?;
    }
    Ok(())
}

/// The WRITEs' bytes are in B's target area.
fn check_target(mr: &MemoryRegion) -> Result<()> {
    let mut got = [0u8; MSG];
    mr.read_into(TARGET, &mut got)?;
    if got[..] != mr.as_slice()[SRC..SRC + MSG] {
        return Err("the WRITEs' data is not in B's buffer".into());
    }
    Ok(())
}

/// Watches `cq`'s channel for [`QUIET`] and fails if an event comes.
fn expect_no_event(cq: &CompletionQueue, what: &str) -> Result<()> {
    match cq.get_event(QUIET) {
        Err(Error::EventTimeout { .. }) => Ok(()),
        Ok(ev) => {
            ev.ack();
            Err(format!("unexpected completion event for {what}").into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Step 4: post up to `window` WRITEs, then spin on `ibv_poll_cq`, topping the window up as
/// completions come in.
fn busy_poll_writes(rig: &Rig, args: &Args) -> Result<Cost> {
    let n = args.iters;
    let deadline = Instant::now() + WAIT + Duration::from_millis(20) * n as u32;
    let mut wcs = [WorkCompletion::default(); 16];
    let (mut posted, mut done) = (0u64, 0u64);
    let (mut polls, mut empty_polls) = (0u64, 0u64);

    let cpu0 = lab::cpu_time()?;
    let t0 = Instant::now();
    let first = (args.window as u64).min(n);
    post_writes(rig, 0..first)?;
    posted += first;
    while done < n {
        // ibv_poll_cq never waits: it returns what is there, possibly nothing.
        let got = rig.scq.poll_into(&mut wcs)?;
        polls += 1;
        if got == 0 {
            empty_polls += 1;
            // A completion that never comes would spin here forever: keep a deadline (look at
            // the clock only every 1024 empty polls, it is not free).
            if empty_polls % 1024 == 0 && Instant::now() > deadline {
                return Err(format!("busy polling: only {done} of {n} completions in time").into());
            }
            std::hint::spin_loop();
            continue;
        }
        for wc in &wcs[..got] {
            // RC completes a send queue's work requests in the order they were posted.
            check_wc(wc, done, WcOpcode::RdmaWrite)?;
            done += 1;
        }
        // Refill the window: as many new WRITEs as completions just freed, in one chain.
        let more = (got as u64).min(n - posted);
        if more > 0 {
            post_writes(rig, posted..posted + more)?;
            posted += more;
        }
    }
    let elapsed = t0.elapsed();
    let cpu = lab::cpu_time()?.since(&cpu0);
    Ok(Cost {
        elapsed,
        cpu,
        polls,
        empty_polls,
        events: 0,
        empty_events: 0,
    })
}

/// Step 8: the canonical event loop. The order matters:
///
/// 1. arm (`ibv_req_notify_cq`) *before* the first completion can arrive;
/// 2. wait for an event (`poll(2)` on the channel fd with a deadline, `ibv_get_cq_event`);
/// 3. acknowledge it (`ibv_ack_cq_events`);
/// 4. re-arm **before** draining: a completion that lands after the drain then raises a new
///    event; re-arming after the drain would leave a window in which it raises none (step 6);
/// 5. drain with `ibv_poll_cq` until it returns 0, handling every completion.
fn event_loop_writes(rig: &Rig, args: &Args) -> Result<Cost> {
    let n = args.iters;
    let deadline = Instant::now() + WAIT + Duration::from_millis(20) * n as u32;
    let mut wcs = [WorkCompletion::default(); 16];
    let (mut posted, mut done) = (0u64, 0u64);
    let (mut events, mut empty_events, mut polls) = (0u64, 0u64, 0u64);

    let cpu0 = lab::cpu_time()?;
    let t0 = Instant::now();
    rig.scq.req_notify(false)?; // 1. arm
    let first = (args.window as u64).min(n);
    post_writes(rig, 0..first)?;
    posted += first;
    while done < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = rig.scq.get_event(left.min(WAIT))?; // 2. sleep until an event (or the deadline)
        ev.ack(); // 3. acknowledge
        events += 1;
        rig.scq.req_notify(false)?; // 4. re-arm, then
        let mut found = 0;
        loop {
            // 5. drain: everything that is there now, including completions that arrived
            // after the event was raised.
            let got = rig.scq.poll_into(&mut wcs)?;
            polls += 1;
            if got == 0 {
                break;
            }
            found += got;
            for wc in &wcs[..got] {
                check_wc(wc, done, WcOpcode::RdmaWrite)?;
                done += 1;
            }
            let more = (got as u64).min(n - posted);
            if more > 0 {
                post_writes(rig, posted..posted + more)?;
                posted += more;
            }
        }
        if found == 0 {
            // Normal: a completion arrived between the re-arm and the end of the previous
            // drain, raised this event, and was drained already.
            empty_events += 1;
        }
    }
    let elapsed = t0.elapsed();
    let cpu = lab::cpu_time()?.since(&cpu0);
    // Each event was raised by at least one completion that arrived while the CQ was armed.
    if events == 0 || events > n {
        return Err(format!("{events} events for {n} completions: outside 1..={n}").into());
    }
    if rig.scq.unacked_events() != 0 {
        return Err("an event was left unacknowledged".into());
    }
    // The CQ is armed again now, and a completion drained in the last pass may already have
    // raised one more event. Nobody reads it, and that is fine: only events you *take* with
    // ibv_get_cq_event need an ack; unread ones vanish with the CQ.
    Ok(Cost {
        elapsed,
        cpu,
        polls,
        empty_polls: 0,
        events,
        empty_events,
    })
}

/// A posts one SEND of [`MSG`] bytes (`wr_id`, optionally solicited) and waits for its
/// completion by polling A's CQ (which is not armed at this point).
///
/// RC guarantees more than "A's SEND is done" here: rxe's responder writes B's receive
/// completion *before* it sends the ACK that completes A's SEND. So when A's completion is in,
/// B's receive completion is already in B's CQ.
fn send_and_wait(rig: &Rig, wr_id: u64, solicited: bool) -> Result<()> {
    let src = [rig.mr.sge(SRC..SRC + MSG)];
    let mut wr = SendWr::send(wr_id, &src);
    if solicited {
        wr = wr.solicited(); // IBV_SEND_SOLICITED: sets the SE bit in the packet's header
    }
    rig.qa.post_send_one(wr)?;
    let wc = rig.scq.wait_one(WAIT)?;
    check_wc(&wc, wr_id, WcOpcode::Send)?;
    Ok(())
}

/// B posts receive buffers for `ids` (slot `id % 16` of the receive area).
fn post_recvs(rig: &Rig, ids: std::ops::Range<u64>) -> Result<()> {
    let sges: Vec<[lab::Sge; 1]> = ids
        .clone()
        .map(|id| {
            let off = RECV_AREA + (id % 16) as usize * MSG;
            [rig.mr.sge(off..off + MSG)]
        })
        .collect();
    let mut wrs: Vec<RecvWr<'_>> = ids.zip(&sges).map(|(id, s)| RecvWr::new(id, s)).collect();
    rig.qb.post_recv(&mut wrs)?;
    Ok(())
}

/// Drains exactly `count` receive completions from B's CQ, checking them.
fn drain_recvs(rig: &Rig, first: u64, count: usize) -> Result<()> {
    let mut wcs = vec![WorkCompletion::default(); count];
    rig.rcq
        .poll_exact_for(&mut wcs, WAIT, "B's receive completions")?;
    for (i, wc) in wcs.iter().enumerate() {
        check_wc(wc, first + i as u64, WcOpcode::Recv)?;
        if wc.byte_len != MSG as u32 {
            return Err(format!("a receive of {} bytes, expected {MSG}", wc.byte_len).into());
        }
    }
    // Nothing more: the CQ is empty now.
    if rig.rcq.poll_one()?.is_some() {
        return Err("more receive completions than SENDs".into());
    }
    Ok(())
}

/// Step 6.
fn lost_wakeup(rig: &Rig) -> Result<()> {
    // B's receive CQ has never been armed. A SEND arrives and completes B's RECV: its CQE sits
    // in B's CQ, and no event is raised (nobody asked for one).
    post_recvs(rig, 100..101)?;
    send_and_wait(rig, 200, false)?;
    println!("  B posted a RECV; A's SEND completed, so B's receive completion is in B's CQ");
    // The classic bug: "arm, then sleep until the event". The completion is already there,
    // and arming does not look back: the event is raised only by the *next* completion.
    rig.rcq.req_notify(false)?;
    expect_no_event(&rig.rcq, "B's CQ armed after its completion arrived")?;
    println!(
        "  armed B's CQ, then waited: no event ({} ms); a program that sleeps here sleeps forever",
        QUIET.as_millis()
    );
    drain_recvs(rig, 100, 1)?;
    println!(
        "  ibv_poll_cq finds it anyway: 1 completion, wr_id 100, {}, {MSG} bytes",
        WcOpcode::Recv
    );
    println!("  the rule: arm, THEN drain with ibv_poll_cq, THEN sleep; never sleep on a CQ you");
    println!("  have not drained since arming it");

    // The fix, shown: the CQ is armed now (and drained), so the next completion wakes us.
    post_recvs(rig, 101..102)?;
    send_and_wait(rig, 201, false)?;
    let ev = rig.rcq.get_event(WAIT)?;
    if !ev.is_for(&rig.rcq) {
        return Err("an event for another CQ on B's channel".into());
    }
    ev.ack();
    drain_recvs(rig, 101, 1)?;
    println!(
        "  done right: B's CQ armed and drained, A sends again: one event, acked, 1 completion"
    );
    Ok(())
}

/// Step 7.
fn solicited_only(rig: &Rig) -> Result<()> {
    // B's CQ is disarmed now (the last event disarmed it). Arm it for solicited completions
    // only: ibv_req_notify_cq(cq, 1). (Only because it is disarmed: see the end of this step.)
    post_recvs(rig, 110..113)?;
    rig.rcq.req_notify(true)?;
    println!("  B posted 3 RECVs and armed its CQ with solicited_only=1");
    send_and_wait(rig, 210, false)?;
    send_and_wait(rig, 211, false)?;
    expect_no_event(
        &rig.rcq,
        "B's CQ armed solicited-only, after unsolicited SENDs",
    )?;
    println!(
        "  A sent 2 SENDs without IBV_SEND_SOLICITED: both received, no event ({} ms)",
        QUIET.as_millis()
    );
    send_and_wait(rig, 212, true)?;
    let ev = rig.rcq.get_event(WAIT)?;
    ev.ack();
    println!("  A sent a 3rd SEND with IBV_SEND_SOLICITED: one event, acked");
    drain_recvs(rig, 110, 3)?;
    println!(
        "  B drained 3 completions ({}, wr_ids 110, 111, 112): the solicited one woke B,",
        WcOpcode::Recv
    );
    println!("  the earlier ones were waiting in the CQ and came along");

    // Arming requests combine: a CQ armed for every completion stays armed that way when
    // asked for solicited completions only (the request cannot narrow an arming in place).
    post_recvs(rig, 113..114)?;
    rig.rcq.req_notify(false)?;
    rig.rcq.req_notify(true)?;
    send_and_wait(rig, 213, false)?;
    let ev = rig.rcq.get_event(WAIT)?;
    ev.ack();
    drain_recvs(rig, 113, 1)?;
    println!("  armed for every completion, then for solicited only: an unsolicited SEND still");
    println!(
        "  woke B (one event, acked): a solicited-only request cannot narrow an arming in place"
    );
    Ok(())
}

/// Step 10.
fn teardown(rig: Rig) -> Result<()> {
    let Rig {
        qa,
        qb,
        scq,
        rcq,
        ch_send,
        ch_recv,
        mr,
    } = rig;
    // Take one more event on B's CQ (disarmed since step 7) and do not acknowledge it yet.
    {
        let r = [mr.sge(RECV_AREA..RECV_AREA + MSG)];
        qb.post_recv_one(RecvWr::new(120, &r))?;
    }
    rcq.req_notify(false)?;
    {
        let src = [mr.sge(SRC..SRC + MSG)];
        qa.post_send_one(SendWr::send(220, &src))?;
    }
    check_wc(&scq.wait_one(WAIT)?, 220, WcOpcode::Send)?;
    let held = rcq.get_event(WAIT)?;
    check_wc(&rcq.wait_one(WAIT)?, 120, WcOpcode::Recv)?;
    println!(
        "  took one more event on B's CQ and kept it: unacknowledged events = {}",
        rcq.unacked_events()
    );

    qa.destroy()?;
    qb.destroy()?;
    println!("  destroyed both QPs (ibv_destroy_qp): ok");

    // libibverbs' ibv_destroy_cq waits until every event it handed out has been acknowledged:
    // with one unacknowledged, it would block forever. lab refuses instead of hanging (it
    // does not call the verb) and says why.
    match rcq.destroy() {
        Ok(()) => return Err("destroying a CQ with an unacknowledged event succeeded".into()),
        Err(e) => {
            println!("  destroy B's CQ now? lab refuses (the C call would block forever):");
            for line in e.report().to_string().lines() {
                println!("    {}", line.trim_start());
            }
        }
    }
    // The event still refers to the CQ (and keeps it alive). Acknowledging it releases the
    // last reference, and the CQ is destroyed right then.
    held.ack();
    println!("  acknowledged the event (ibv_ack_cq_events): B's CQ is destroyed with it");

    if scq.unacked_events() != 0 {
        return Err("A's CQ has unacknowledged events".into());
    }
    scq.destroy()?;
    println!("  destroyed A's CQ (ibv_destroy_cq): ok, all its events were acknowledged");
    // A channel can be destroyed only once no CQ uses it (EBUSY otherwise): B's channel going
    // away cleanly proves B's CQ is gone.
    ch_send.destroy()?;
    ch_recv.destroy()?;
    println!("  destroyed both channels (ibv_destroy_comp_channel): ok");
    mr.dereg()?;
    println!("  deregistered the buffer; the PD and the device close when dropped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::Parser;

    fn parse(v: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("ch04-completion-queues").chain(v.iter().copied()))
    }

    #[test]
    fn defaults_and_flags() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.iters, a.window, a.counts), (1000, 16, false));
        let a = parse(&["-n", "10", "--window", "4", "--counts"]).unwrap();
        assert_eq!((a.iters, a.window, a.counts), (10, 4, true));
        assert_eq!(
            parse(&["--help"]).unwrap_err().kind(),
            clap::error::ErrorKind::DisplayHelp
        );
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for bad in [
            &["-n"][..],
            &["-n", "0"],
            &["-n", "ten"],
            &["-w", "65"],
            &["--frobnicate"],
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }
}
