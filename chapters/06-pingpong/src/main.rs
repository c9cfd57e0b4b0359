//! # Chapter 06: ping-pong with SEND/RECV, compatible with `ibv_rc_pingpong`
//!
//! Two processes, two RC queue pairs, one message bouncing between them: the client SENDs
//! `size` bytes, the server's pre-posted RECV catches them, the server SENDs them back, and so
//! on `iters` times. This is rdma-core's `ibv_rc_pingpong` (libibverbs/examples/rc_pingpong.c)
//! rewritten on `lab`: the same flags and defaults, the same 52-byte TCP exchange and the same
//! output lines, so either end can be the C tool, in both directions:
//!
//! ```text
//! cargo lab run 06                                              # both ends ours, as the course runs it
//! cargo lab exec -- target/debug/ch06-pingpong -g 1             # terminal 1: our server ...
//! cargo lab exec -- ibv_rc_pingpong -g 1 127.0.0.1              # terminal 2: ... a C client
//! cargo lab exec -- ibv_rc_pingpong -g 1                        # terminal 1: a C server ...
//! cargo lab exec -- target/debug/ch06-pingpong -g 1 127.0.0.1   # terminal 2: ... our client
//! ```
//!
//! What it teaches:
//!
//! * **Two-sided operations.** A SEND consumes a RECV the *peer* posted beforehand; the
//!   receiver's CPU takes part (it posts receives and reaps their completions). That is the
//!   contrast with chapter 07's one-sided RDMA WRITE.
//! * **Pre-posting the receive queue.** All `rx_depth` receives are posted before the peer can
//!   send, and refilled in one chain when they run low: a SEND that finds no RECV is answered
//!   with an RNR NAK and retried (chapter 08 shows what happens when the retries run out).
//! * **The connection life cycle** as rc_pingpong names it: init (device, PD, MR, CQ, QP,
//!   INIT), exchange (QPN, PSN, GID over TCP), connect (RTR, RTS), the loop, close.
//! * **Busy polling vs events** (`-e`): spin on `ibv_poll_cq`, or sleep on the completion
//!   channel (`ibv_req_notify_cq`, `ibv_get_cq_event`, `ibv_ack_cq_events`), as in chapter 04.
//!
//! Verbs: `ibv_post_recv` (a chain of receives), `ibv_post_send` (`IBV_WR_SEND`, inline when
//! the message fits), `ibv_poll_cq`; and, put together for the first time, everything of
//! chapters 01-05.
//!
//! Run it: `cargo lab run 06` (both ends in the lab's loopback topology), or by hand in two
//! terminals as above (`cargo lab build` builds what `cargo lab run 06` runs). `--help`
//! lists the flags; they are ibv_rc_pingpong's, plus `--timeout`.
//!
//! Where it differs from the C tool, on purpose:
//!
//! * every wait has a deadline (`--timeout`, default 60 s): a lost peer ends in an error, not a
//!   hang; the C tool waits forever;
//! * the server listens *before* it prints "local address:" (that line is the readiness signal
//!   the harness waits for); the C server prints first and listens after;
//! * `retry_cnt` and `rnr_retry` are 6, not 7: `rnr_retry` 7 means "retry forever" on every
//!   device, and `retry_cnt` 7 does too on rxe, whose completer never counts 7 down
//!   (docs/rxe-observed.md, "where rxe differs", 1);
//! * `-m` above the port's active MTU is clamped to it, with a note (between two hosts a
//!   larger path MTU makes rxe drop the packets silently: chapter 08).

// Errors, one style for every chapter: `.or_fail("Failed to modify QP to RTR")` turns lab's
// error (the verb, the errno and a hint) into a Failure that starts with rc_pingpong's message
// for the step; main prints it after `error: ` and exits 1.
use clap::Parser;
use course::exchange::{PINGPONG_PORT, PingpongDest, PingpongListener, pingpong_client_exchange};
use course::show::{self, Side};
use course::{Failure, OrFail, Outcome as Result};
use lab::{
    AccessFlags, AddressVector, CompletionChannel, CompletionQueue, Context, Gid, InitAttr,
    InlineSge, LinkLayer, MemoryRegion, Mtu, ProtectionDomain, QpAttr, QpInitAttr, QpState,
    QueuePair, RecvWr, RtsAttr, SendWr, WorkCompletion, state,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// rc_pingpong tells its two kinds of completion apart by `wr_id`; the values double as the
/// bits of `pending` (what the current round still waits for).
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// The command line: ibv_rc_pingpong's flags and defaults (`ibv_rc_pingpong --help`).
#[derive(Parser, Debug)]
#[command(
    name = "ch06-pingpong",
    about = "RC SEND/RECV ping-pong, wire- and flag-compatible with ibv_rc_pingpong",
    override_usage = "ch06-pingpong [OPTIONS]          start a server and wait for connection\n       \
                      ch06-pingpong [OPTIONS] <host>   connect to server at <host>",
    after_help = "Numbers may be decimal or 0x-prefixed hex, as with the C tool.\n\
                  Example (in the lab): ch06-pingpong -g 1   and   ch06-pingpong -g 1 127.0.0.1"
)]
struct Opts {
    /// Listen on/connect to port <port>
    #[arg(short = 'p', long = "port", value_name = "port", default_value_t = PINGPONG_PORT,
          value_parser = parse_port)]
    port: u16,
    /// Use IB device <dev> (default: $LAB_DEVICE, else the first device found)
    #[arg(short = 'd', long = "ib-dev", value_name = "dev")]
    ib_dev: Option<String>,
    /// Use port <port> of the IB device
    #[arg(short = 'i', long = "ib-port", value_name = "port", default_value_t = 1,
          value_parser = parse_ib_port)]
    ib_port: u8,
    /// Size of message to exchange, in bytes
    #[arg(short = 's', long = "size", value_name = "size", default_value_t = 4096,
          value_parser = parse_size)]
    size: u32,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096
    #[arg(short = 'm', long = "mtu", value_name = "size", default_value = "1024",
          value_parser = parse_mtu)]
    mtu: Mtu,
    /// Number of receives to post at a time
    #[arg(short = 'r', long = "rx-depth", value_name = "dep", default_value_t = 500,
          value_parser = parse_rx_depth)]
    rx_depth: u32,
    /// Number of exchanges
    #[arg(short = 'n', long = "iters", value_name = "iters", default_value_t = 1000,
          value_parser = parse_iters)]
    iters: u32,
    /// Service level value
    #[arg(short = 'l', long = "sl", value_name = "sl", default_value_t = 0,
          value_parser = parse_sl)]
    sl: u8,
    /// Sleep on CQ events (default: busy polling)
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// Local port GID index; none by default (-1), which fails on RoCE: use -g 1 in the lab
    #[arg(short = 'g', long = "gid-idx", value_name = "gid index", allow_negative_numbers = true,
          value_parser = parse_gid_idx)]
    gid_idx: Option<GidIdx>,
    /// Give up on any wait (accept, connect, a completion) after this many seconds [not in the C tool]
    #[arg(long = "timeout", value_name = "secs", default_value = "60", value_parser = parse_timeout)]
    timeout: Duration,
    /// Server to connect to; without it, run as the server
    #[arg(value_name = "host")]
    host: Option<String>,
}

fn main() -> ExitCode {
    // clap prints a usage message and exits with status 2 on bad input (never a panic).
    let opts = Opts::parse();
    course::exit_code(run(&opts))
}

/// What a process needs for the ping-pong besides its QP: rc_pingpong's
/// `struct pingpong_context`. The QP is kept apart because each state transition consumes the
/// typed handle and returns a new one. Fields are in the order they must be destroyed (Rust
/// drops them top to bottom), but [`close`] destroys them explicitly so that a failure is
/// reported and changes the exit status.
struct Pingpong {
    mr: MemoryRegion,
    cq: CompletionQueue,
    channel: Option<CompletionChannel>,
    pd: ProtectionDomain,
    ctx: Context,
    /// Whether sends are inline (the message fits the QP's `max_inline_data`).
    inline: bool,
}

fn run(o: &Opts) -> Result<()> {
    let role = if o.host.is_some() { "client" } else { "server" };
    let gid_idx: Option<u8> = o.gid_idx.and_then(|g| g.0);

    // ---- init: rc_pingpong's pp_init_ctx --------------------------------------------------
    let ctx = course::open_device(o.ib_dev.as_deref()).or_fail("Couldn't get context")?;
    let port = ctx
        .query_port(o.ib_port)
        .or_fail("Couldn't get port info")?;
    println!(
        "step 1: {role}: open {} port {} (link layer {}, active {})",
        ctx.name(),
        o.ib_port,
        port.link_layer,
        show::mtu(port.active_mtu.bytes())
    );
    if port.link_layer == LinkLayer::Ethernet && gid_idx.is_none() {
        // Keep the C semantics (no -g: no GID, LID addressing), but say what will happen.
        let which = match ctx.roce_v2_ipv4_gid(o.ib_port) {
            Ok(e) => format!(
                "-g {} ({}, chapter 01)",
                e.index,
                show::gid_bare(&e.gid.raw())
            ),
            Err(_) => "-g with the RoCE v2 IPv4 entry of the GID table (chapter 01)".into(),
        };
        eprintln!(
            "note: no GID index (-g): this is RoCE (link layer Ethernet), which has no LIDs and \
             addresses every packet by GID, so connecting the QP will fail at RTR, as it does \
             for ibv_rc_pingpong. Use {which}."
        );
    }

    let pd = ctx.alloc_pd().or_fail("Couldn't allocate PD")?;
    // One buffer serves every send *and* every receive, as in rc_pingpong: the protocol
    // guarantees a message is never being sent from it while another lands in it (each side
    // sends only after the previous round's receive completed). LOCAL_WRITE lets the NIC write
    // received messages into it; no remote access is needed for two-sided operations.
    let mut mr = pd
        .reg_mr(o.size as usize, AccessFlags::LOCAL_WRITE)
        .or_fail("Couldn't register MR")?;
    mr.as_mut_slice().fill(0x7b); // rc_pingpong's filler byte
    let channel = if o.events {
        Some(
            ctx.create_comp_channel()
                .or_fail("Couldn't create completion channel")?,
        )
    } else {
        None
    };
    // One CQ for both queues, with room for every receive plus the one send in flight.
    let cq = ctx
        .create_cq(o.rx_depth as i32 + 1, channel.as_ref())
        .or_fail("Couldn't create CQ")?;
    println!(
        "step 2: register a {}-byte buffer (IBV_ACCESS_LOCAL_WRITE) and create a CQ for {} \
         completions ({})",
        o.size,
        o.rx_depth + 1,
        if o.events {
            "with a completion channel: sleep on events, -e"
        } else {
            "busy polling"
        }
    );

    // An RC QP with one send slot (ping-pong never has two sends in flight) and rx_depth
    // receive slots. Its access flags stay 0: SEND/RECV need no remote rights.
    let qp = pd
        .create_qp(
            &QpInitAttr::rc(&cq, &cq)
                .max_send_wr(1)
                .max_recv_wr(o.rx_depth)
                .max_send_sge(1)
                .max_recv_sge(1)
                .max_inline_data(0),
        )
        .or_fail("Couldn't create QP")?;
    // Like rc_pingpong, ask the QP how much it can send inline: a small message is then copied
    // into the send queue by ibv_post_send itself, saving a hardware NIC a DMA read of the
    // buffer (rxe copies every payload in the kernel anyway). rxe reports max(max_send_sge x
    // 16, max_inline_data) here (rxe_qp.c rxe_qp_init_req): 16 bytes for 1 SGE.
    let max_inline = qp.query().or_fail("Couldn't query QP")?.cap.max_inline_data;
    let inline = max_inline >= o.size;
    let qp = qp
        .to_init(&InitAttr {
            port: o.ib_port,
            pkey_index: 0,
            access: AccessFlags::empty(),
        })
        .or_fail("Failed to modify QP to INIT")?;
    println!(
        "step 3: create an RC QP (max_send_wr 1, max_recv_wr {}; inline up to {max_inline} \
         bytes, so sends of {} {}) and move it to INIT",
        o.rx_depth,
        plural(o.size, "byte"),
        if inline { "are inline" } else { "are not" }
    );
    let pp = Pingpong {
        mr,
        cq,
        channel,
        pd,
        ctx,
        inline,
    };

    // ---- pre-post every receive, before the peer can possibly send ------------------------
    let sge = [pp.mr.sge(..)];
    let mut recvs: Vec<RecvWr<'_>> = (0..o.rx_depth)
        .map(|_| RecvWr::new(RECV_WRID, &sge))
        .collect();
    // One ibv_post_recv call with a chain of rx_depth work requests.
    qp.post_recv(&mut recvs)
        .or_fail(format!("Couldn't post receive ({})", o.rx_depth))?;
    if o.events {
        // Arm before anything can complete, so the first completion raises an event.
        pp.cq
            .req_notify(false)
            .or_fail("Couldn't request CQ notification")?;
    }
    println!(
        "step 4: pre-post {} receives, all into the one buffer (a SEND that found none would \
         be answered with an RNR NAK)",
        o.rx_depth
    );

    // ---- exchange: QPN, PSN and GID over TCP, in ibv_rc_pingpong's format ------------------
    let my_gid = match gid_idx {
        Some(i) => pp
            .ctx
            .query_gid(o.ib_port, u32::from(i))
            .or_fail(format!("can't read sgid of index {i}"))?
            .gid
            .raw(),
        None => [0; 16],
    };
    let me = PingpongDest {
        lid: port.lid,
        qpn: qp.qp_num(),
        // A random 24-bit starting PSN, as rc_pingpong draws one (`lrand48() & 0xffffff`).
        psn: course::random_psn(),
        gid: my_gid,
    };
    let connect = |qp: QueuePair<state::Init>, remote: &PingpongDest| {
        connect_qp(qp, o, port.active_mtu, gid_idx, me.psn, remote)
    };
    let (qp, remote) = match &o.host {
        Some(host) => {
            println!(
                "step 5: exchange addresses with {host}:{} over TCP (ibv_rc_pingpong's 52-byte \
                 message)",
                o.port
            );
            println!("{}", me.address_line(Side::Local));
            // Connect (retrying until the deadline: the server may not listen yet), send ours,
            // read the server's, send "done".
            let remote = pingpong_client_exchange(host, o.port, &me, o.timeout)
                .or_fail("Couldn't read/write remote address")?;
            println!("{}", remote.address_line(Side::Remote));
            (connect(qp, &remote)?, remote)
        }
        None => {
            println!(
                "step 5: listen on TCP port {} and wait for a client (ibv_rc_pingpong's 52-byte \
                 message)",
                o.port
            );
            let listener = PingpongListener::bind(o.port)
                .or_fail(format!("Couldn't listen to port {}", o.port))?;
            // Listening now: this line tells whoever waits for us (the harness) to start the
            // client.
            println!("{}", me.address_line(Side::Local));
            let conn = listener
                .accept(o.timeout)
                .or_fail("Couldn't read remote address")?;
            let remote = conn.remote();
            println!("{}", remote.address_line(Side::Remote));
            // The server connects its QP *before* answering: once the client has our address
            // it may send at once, and a SEND to a QP not yet in RTR is dropped.
            let qp = connect(qp, &remote)
                .map_err(|e| Failure(format!("Couldn't connect to remote QP: {}", e.0)))?;
            conn.finish(&me, o.timeout)
                .or_fail("Couldn't send/recv local address")?;
            (qp, remote)
        }
    };
    println!(
        "step 6: connect the QP: INIT -> RTR (dest {}, rq {}, path {}) -> RTS ({})",
        show::qpn(remote.qpn),
        show::psn(remote.psn),
        show::mtu(o.mtu.min(port.active_mtu).bytes()),
        show::psn(me.psn)
    );

    // ---- the ping-pong ---------------------------------------------------------------------
    println!(
        "step 7: ping-pong {} of {} ({})",
        plural(o.iters, "round trip"),
        plural(o.size, "byte"),
        if o.events { "events" } else { "busy polling" }
    );
    // Built once, posted every round. An inline send reads the buffer during ibv_post_send
    // itself (InlineSge borrows it for that); otherwise the NIC reads it through the lkey.
    let inline_sge = [InlineSge::from_mr(&pp.mr, 0..o.size as usize)];
    let mut send = [if pp.inline {
        SendWr::send_inline(SEND_WRID, &inline_sge)
    } else {
        SendWr::send(SEND_WRID, &sge)
    }];
    let client = o.host.is_some();
    let mut counts = Counts {
        routs: o.rx_depth,
        ..Counts::default()
    };
    // What this round still waits for: a receive always; our own send once posted.
    let mut pending = RECV_WRID;
    if client {
        qp.post_send(&mut send).or_fail("Couldn't post send")?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let mut watchdog = Watchdog::new(o.timeout);
    let mut wcs = [WorkCompletion::default(); 2];
    while counts.rcnt < o.iters || counts.scnt < o.iters {
        let n = if o.events {
            // Sleep until the CQ signals, re-arm, acknowledge, then drain it. Re-arming
            // *before* draining is what makes this race-free: a completion that lands after
            // the drain raises a new event.
            let ev = pp
                .cq
                .get_event(o.timeout)
                .or_fail("Failed to get cq_event")?;
            if !ev.is_for(&pp.cq) {
                return Err(Failure("CQ event for unknown CQ".into()));
            }
            pp.cq
                .req_notify(false)
                .or_fail("Couldn't request CQ notification")?;
            ev.ack();
            pp.cq.poll_into(&mut wcs).or_fail("poll CQ failed")?
        } else {
            let n = pp.cq.poll_into(&mut wcs).or_fail("poll CQ failed")?;
            if n == 0 {
                watchdog.idle().map_err(|waited| {
                    Failure(format!(
                        "no completion for {waited:?} ({} of {} sends and {} of {} receives \
                         completed): is the peer still there? (--timeout)",
                        counts.scnt, o.iters, counts.rcnt, o.iters
                    ))
                })?;
                continue;
            }
            watchdog.progress();
            n
        };
        for wc in &wcs[..n] {
            // rc_pingpong's parse_single_wc.
            if !wc.is_success() {
                return Err(Failure(format!(
                    "Failed status {} for wr_id {}: {}",
                    wc.status,
                    wc.wr_id,
                    wc.status.explanation()
                )));
            }
            match wc.wr_id {
                SEND_WRID => counts.scnt += 1,
                RECV_WRID => {
                    counts.routs -= 1;
                    if counts.routs <= 1 {
                        // Refill the receive queue in one chained post.
                        let refill = (o.rx_depth - counts.routs) as usize;
                        qp.post_recv(&mut recvs[..refill])
                            .or_fail(format!("Couldn't post receive ({})", counts.routs))?;
                        counts.routs += refill as u32;
                        counts.refills += 1;
                    }
                    counts.rcnt += 1;
                }
                other => {
                    return Err(Failure(format!("Completion for unknown wr_id {other}")));
                }
            }
            // A round ends when both our send and the peer's message completed: only then is
            // the buffer free to be sent again.
            pending &= !wc.wr_id;
            if counts.scnt < o.iters && pending == 0 {
                qp.post_send(&mut send).or_fail("Couldn't post send")?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let elapsed = start.elapsed();
    let bytes = u64::from(o.size) * u64::from(o.iters) * 2;
    println!("{}", show::pingpong_bandwidth(bytes, elapsed));
    println!("{}", show::pingpong_latency(u64::from(o.iters), elapsed));

    println!(
        "step 8: {} and {} completed, all IBV_WC_SUCCESS; the receive queue was refilled {} \
         and {} still posted",
        plural(counts.scnt, "send"),
        plural(counts.rcnt, "receive"),
        match counts.refills {
            0 => "0 times".to_string(),
            1 => "once".to_string(),
            n => format!("{n} times"),
        },
        if counts.routs == 1 {
            "1 receive is".to_string()
        } else {
            format!("{} receives are", counts.routs)
        }
    );
    drop((send, recvs));
    close(qp, pp)?;
    println!("step 9: close: destroy the QP, deregister the MR, destroy the CQ, free the PD");
    Ok(())
}

#[derive(Debug, Default)]
struct Counts {
    scnt: u32,
    rcnt: u32,
    /// Receives currently posted.
    routs: u32,
    refills: u32,
}

/// rc_pingpong's `pp_connect_ctx`: INIT -> RTR -> RTS toward the peer's address.
///
/// RTR is built field by field with the raw `QpAttr` builder, exactly as the C tool fills
/// `struct ibv_qp_attr`, so the same mistakes fail the same way (no `-g`: no GRH, which RoCE
/// refuses with EINVAL). RTS uses lab's typed transition with its finite retry defaults.
fn connect_qp(
    qp: QueuePair<state::Init>,
    o: &Opts,
    active_mtu: Mtu,
    gid_idx: Option<u8>,
    my_psn: u32,
    remote: &PingpongDest,
) -> Result<QueuePair<state::Rts>> {
    let mtu = if o.mtu > active_mtu {
        eprintln!(
            "note: -m {} is above the port's active MTU {}: using {} (a path MTU above the \
             link's makes rxe drop packets silently between two hosts; chapter 08)",
            o.mtu.bytes(),
            active_mtu.bytes(),
            active_mtu.bytes()
        );
        active_mtu
    } else {
        o.mtu
    };
    // The address vector: where the peer is. rc_pingpong adds a GRH (is_global) only when the
    // peer sent a GID, with our GID index -g (-1, i.e. 255 as a u8, when none was given).
    let mut av = AddressVector::roce(Gid(remote.gid), gid_idx.unwrap_or(u8::MAX), o.ib_port);
    av.hop_limit = 1;
    av.sl = o.sl;
    if remote.gid[8..] == [0; 8] {
        av.is_global = false;
        av.dlid = remote.lid;
    }
    let rtr = QpAttr::new()
        .state(QpState::Rtr)
        .av(&av)
        .path_mtu(mtu)
        .dest_qp_num(remote.qpn)
        .rq_psn(remote.psn) // the first PSN the peer will send
        .max_dest_rd_atomic(1)
        .min_rnr_timer(12);
    qp.modify(&rtr).or_fail("Failed to modify QP to RTR")?;
    let qp = qp.assume_state::<state::Rtr>();
    qp.to_rts(
        &RtsAttr::new(my_psn) // the first PSN we send: the peer's rq_psn
            .timeout(14)
            .max_rd_atomic(1),
    )
    .or_fail("Failed to modify QP to RTS")
}

/// rc_pingpong's `pp_close_ctx`: destroy everything, in order, reporting failures.
fn close(qp: QueuePair<state::Rts>, pp: Pingpong) -> Result<()> {
    let Pingpong {
        mr,
        cq,
        channel,
        pd,
        ctx,
        inline: _,
    } = pp;
    qp.destroy().or_fail("Couldn't destroy QP")?;
    mr.dereg().or_fail("Couldn't deregister MR")?;
    cq.destroy().or_fail("Couldn't destroy CQ")?;
    if let Some(ch) = channel {
        ch.destroy()
            .or_fail("Couldn't destroy completion channel")?;
    }
    pd.dealloc().or_fail("Couldn't deallocate PD")?;
    ctx.close().or_fail("Couldn't release context")?;
    Ok(())
}

/// `1 byte`, `2 bytes`.
fn plural(n: u32, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The deadline of the busy-poll loop: fails after `limit` without any completion. It reads
/// the clock only every 1024 empty polls, so it costs the hot loop almost nothing.
struct Watchdog {
    limit: Duration,
    last_progress: Instant,
    idle_polls: u32,
    moved: bool,
}

impl Watchdog {
    fn new(limit: Duration) -> Self {
        Watchdog {
            limit,
            last_progress: Instant::now(),
            idle_polls: 0,
            moved: false,
        }
    }
    fn progress(&mut self) {
        self.moved = true;
    }
    /// An empty poll; `Err(how long nothing came)` once that exceeds the limit.
    fn idle(&mut self) -> std::result::Result<(), Duration> {
        self.idle_polls = self.idle_polls.wrapping_add(1);
        if !self.idle_polls.is_multiple_of(1024) {
            std::hint::spin_loop();
            return Ok(());
        }
        let now = Instant::now();
        if std::mem::take(&mut self.moved) {
            self.last_progress = now;
            return Ok(());
        }
        let waited = now - self.last_progress;
        if waited > self.limit {
            Err(waited)
        } else {
            Ok(())
        }
    }
}

// ---- command-line values, parsed like the C tool's strtol(..., 0) ----------------------------

fn parse_num(s: &str) -> std::result::Result<i64, String> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16),
        None => t.parse::<i64>(),
    }
    .map_err(|_| format!("{s:?} is not a number"))?;
    Ok(if neg { -v } else { v })
}

fn in_range(s: &str, lo: i64, hi: i64, what: &str) -> std::result::Result<i64, String> {
    let v = parse_num(s)?;
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{what} must be between {lo} and {hi}, got {v}"))
    }
}

fn parse_port(s: &str) -> std::result::Result<u16, String> {
    Ok(in_range(s, 1, 65535, "the TCP port")? as u16)
}
fn parse_ib_port(s: &str) -> std::result::Result<u8, String> {
    Ok(in_range(s, 1, 255, "the IB port")? as u8)
}
fn parse_size(s: &str) -> std::result::Result<u32, String> {
    // The upper bound keeps the buffer (pinned memory) sane; rxe's max_msg_sz is 2 GiB.
    Ok(in_range(s, 1, 1 << 30, "the message size")? as u32)
}
fn parse_mtu(s: &str) -> std::result::Result<Mtu, String> {
    let v = parse_num(s)?;
    u32::try_from(v)
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("the MTU must be 256, 512, 1024, 2048 or 4096, got {v}"))
}
fn parse_rx_depth(s: &str) -> std::result::Result<u32, String> {
    Ok(in_range(s, 1, 1 << 20, "the receive depth")? as u32)
}
fn parse_iters(s: &str) -> std::result::Result<u32, String> {
    Ok(in_range(s, 1, i32::MAX as i64, "the number of iterations")? as u32)
}
fn parse_sl(s: &str) -> std::result::Result<u8, String> {
    Ok(in_range(s, 0, 15, "the service level")? as u8)
}
/// A `-g` value: an index, or none for a negative one.
#[derive(Debug, Clone, Copy)]
struct GidIdx(Option<u8>);

/// `-g -1` (or any negative index) means "no GID", as in the C tool.
fn parse_gid_idx(s: &str) -> std::result::Result<GidIdx, String> {
    let v = in_range(s, i64::from(i32::MIN), 255, "the GID index")?;
    Ok(GidIdx(u8::try_from(v).ok()))
}
fn parse_timeout(s: &str) -> std::result::Result<Duration, String> {
    Ok(Duration::from_secs(
        in_range(s, 1, 24 * 3600, "the timeout")? as u64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_like_strtol_base_0() {
        assert_eq!(parse_num("18515"), Ok(18515));
        assert_eq!(parse_num("0x4853"), Ok(0x4853));
        assert_eq!(parse_num("-1"), Ok(-1));
        assert!(parse_num("12abc").is_err());
    }

    #[test]
    fn a_negative_gid_index_means_none_as_in_the_c_tool() {
        assert_eq!(parse_gid_idx("-1").map(|g| g.0), Ok(None));
        assert_eq!(parse_gid_idx("1").map(|g| g.0), Ok(Some(1)));
        assert!(parse_gid_idx("256").is_err());
    }

    #[test]
    fn the_c_tools_flags_are_accepted_anywhere_and_attached() {
        let o = Opts::try_parse_from([
            "ch06-pingpong",
            "127.0.0.1",
            "-g1",
            "--iters=10",
            "-s",
            "0x100",
            "-e",
        ])
        .expect("parses");
        assert_eq!(o.host.as_deref(), Some("127.0.0.1"));
        assert_eq!((o.iters, o.size, o.events), (10, 256, true));
        assert_eq!(o.gid_idx.and_then(|g| g.0), Some(1));
        let d = Opts::try_parse_from(["ch06-pingpong"]).expect("defaults");
        assert_eq!(
            (d.port, d.ib_port, d.size, d.mtu, d.rx_depth, d.iters, d.sl),
            (18515, 1, 4096, Mtu::Mtu1024, 500, 1000, 0)
        );
        assert!(d.gid_idx.is_none() && !d.events && d.host.is_none());
    }

    #[test]
    fn plural_reads_well() {
        assert_eq!(plural(1, "byte"), "1 byte");
        assert_eq!(plural(4096, "byte"), "4096 bytes");
    }
}
