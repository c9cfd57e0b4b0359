//! Chapter 13: when the wire misbehaves.
//!
//! What it teaches: a Reliable Connection is reliable *because* the NIC repairs the wire. Every
//! packet carries a PSN; the responder acknowledges in order and answers a gap with a NAK
//! (PSN sequence error), after which the requester goes back to the first missing PSN and
//! sends everything again from there (go-back-N); a packet that simply vanishes is resent when
//! the ack timeout fires, at most `retry_cnt` times; a receiver without a posted receive
//! answers RNR NAK, and the sender waits the receiver's `min_rnr_timer` and tries again, at
//! most `rnr_retry` times. Network jitter does not break a QP; only a budget that runs out
//! does, and then the work request completes with an error and the QP is in ERR.
//!
//! Verbs and attributes introduced: `ibv_modify_qp` to RTS with `timeout`, `retry_cnt` and
//! `rnr_retry`, to RTR with `min_rnr_timer`; `IBV_WC_RETRY_EXC_ERR`,
//! `IBV_WC_RNR_RETRY_EXC_ERR`; rxe's counters in
//! `/sys/class/infiniband/rxe0/ports/1/hw_counters`. Not a verb: `tc netem`, which this
//! chapter's client puts on the RoCE packets it sends (UDP port 4791 only; see `netem.rs`).
//!
//! Cases (`--case NAME`, default `all`), each with a fresh pair of QPs and a deadline:
//! `loss` (5%: every message still arrives), `duplicate` (20%), `reorder` (10%), `corrupt`
//! (5%: the ICRC drops the damaged packet, a resend repairs it), `total-loss` (100%: the
//! retry budget runs out: RETRY_EXC_ERR, computed budget and measured time), `retry-forever`
//! (retry_cnt 7 on rxe never gives up: shown with a deadline, then the wire heals),
//! `rnr` (a slow receiver against min_rnr_timer), `rnr-exceeded` (rnr_retry 1),
//! `frozen-peer` (node a's VM stopped, then resumed within the retry budget: the connection
//! survives; resumed too late: it does not, though the message still arrives) and
//! `killed-peer` (node a's VM killed: the survivor's error, then, once the node is back, the
//! reconnect: ERR -> RESET -> INIT -> RTR -> RTS with a fresh exchange).
//!
//! Each case also shows its wire: the client asks the lab's host (`lab::host`) to record the
//! cable between the two VMs, and prints what the recording proves (a NAK, a resend, an RNR
//! NAK with its timer) or, where it is short and the same every run, the packets themselves.
//! The host also freezes, kills and restarts node a for the last two cases.
//!
//! Run it: `cargo lab run 13` (the pair: server on node a, client on node b; it needs two
//! kernels on a wire: in one VM rxe loops its packets back without ever reaching a qdisc).
//! The wire of a run: `cargo lab run 13 --trace /tmp/13.pcap` prints every packet;
//! `--counts` prints the counters' raw changes (they vary run to run).

use clap::{Parser, ValueEnum};
use lab::course::{Failure, OrFail, Outcome as Result, expect};
use lab::exchange::{Endpoint, LAB_PORT, Listener, OobStream};
use lab::show;
use lab::{
    AccessFlags, CompletionQueue, Context, Gid, InitAttr, MemoryRegion, ProtectionDomain,
    QpInitAttr, QueuePair, RecvWr, RtrAttr, RtsAttr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod netem;
mod wire;
use netem::Netem;
use wire::host;

/// Round trips of the impaired ping-pong cases, and the size of each message: 4096 bytes at
/// path MTU 1024 is four packets, so a lost packet is often in the middle of a message.
const ROUNDS: u32 = 100;
const MSG: usize = 4096;
/// How long any completion that should come may take (a resend after a timeout included).
const SHOULD_COME: Duration = Duration::from_secs(30);

#[derive(Parser, Debug)]
#[command(
    name = "ch13-unreliable-wire",
    about = "A reliable connection over a wire that loses, duplicates, reorders and corrupts"
)]
struct Opts {
    /// Serve (node a).
    #[arg(long, conflicts_with = "connect", required_unless_present = "connect")]
    server: bool,
    /// Connect to the server at this address (node b) and run the cases.
    #[arg(long, value_name = "HOST")]
    connect: Option<String>,
    /// Which case (default: all, in order).
    #[arg(long, value_enum, default_value = "all")]
    case: CaseArg,
    /// Also print how much each rxe counter rose (varies run to run).
    #[arg(long)]
    counts: bool,
    #[arg(long, default_value_t = LAB_PORT)]
    port: u16,
    /// Deadline of the whole run, in seconds.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CaseArg {
    All,
    Loss,
    Duplicate,
    Reorder,
    Corrupt,
    TotalLoss,
    RetryForever,
    Rnr,
    RnrExceeded,
    FrozenPeer,
    KilledPeer,
    /// Not a case of its own: what the client asks a restarted server for after killed-peer.
    #[value(skip)]
    Reconnect,
}

const ALL: [CaseArg; 10] = [
    CaseArg::Loss,
    CaseArg::Duplicate,
    CaseArg::Reorder,
    CaseArg::Corrupt,
    CaseArg::TotalLoss,
    CaseArg::RetryForever,
    CaseArg::Rnr,
    CaseArg::RnrExceeded,
    CaseArg::FrozenPeer,
    CaseArg::KilledPeer,
];

impl CaseArg {
    fn name(self) -> &'static str {
        match self {
            CaseArg::All => "all",
            CaseArg::Loss => "loss",
            CaseArg::Duplicate => "duplicate",
            CaseArg::Reorder => "reorder",
            CaseArg::Corrupt => "corrupt",
            CaseArg::TotalLoss => "total-loss",
            CaseArg::RetryForever => "retry-forever",
            CaseArg::Rnr => "rnr",
            CaseArg::RnrExceeded => "rnr-exceeded",
            CaseArg::FrozenPeer => "frozen-peer",
            CaseArg::KilledPeer => "killed-peer",
            CaseArg::Reconnect => "reconnect",
        }
    }

    fn from_name(s: &str) -> Option<CaseArg> {
        ALL.into_iter()
            .chain([CaseArg::Reconnect])
            .find(|c| c.name() == s)
    }

    /// The netem parameters of the ping-pong cases.
    fn netem(self) -> Option<&'static str> {
        match self {
            CaseArg::Loss => Some("loss 5%"),
            CaseArg::Duplicate => Some("duplicate 20%"),
            // netem reorders only against delayed packets: 10% go at once, the rest 10 ms late.
            // (More is not "more of the same": in rxe every NAK a reordering causes costs one of
            // the message's retry_cnt tries, and at 25% a message now and then runs out.)
            CaseArg::Reorder => Some("delay 10ms reorder 10%"),
            CaseArg::Corrupt => Some("corrupt 5%"),
            _ => None,
        }
    }

    /// The client's RTS attributes and the server's min_rnr_timer for this case.
    fn attrs(self, psn: u32) -> (RtsAttr, u8) {
        let rts = RtsAttr::new(psn);
        match self {
            // timeout 12: 4.096 us x 2^12 = 16.8 ms per try; 3 retries after the first send.
            CaseArg::TotalLoss => (rts.timeout(12).retry_cnt(3), lab::qp::DEFAULT_MIN_RNR_TIMER),
            CaseArg::RetryForever => (rts.timeout(12).retry_cnt(7), lab::qp::DEFAULT_MIN_RNR_TIMER),
            // min_rnr_timer 20: 10.24 ms between a sender's tries; rnr_retry 7 = forever.
            CaseArg::Rnr => (rts.rnr_retry(7), 20),
            CaseArg::RnrExceeded => (rts.rnr_retry(1), 20),
            // timeout 16: 4.096 us x 2^16 = 268 ms per try, 4 tries: about 1.07 s in all, long
            // enough to freeze a VM and resume it well within.
            CaseArg::FrozenPeer => (rts.timeout(16).retry_cnt(3), lab::qp::DEFAULT_MIN_RNR_TIMER),
            CaseArg::KilledPeer => (rts.timeout(12).retry_cnt(3), lab::qp::DEFAULT_MIN_RNR_TIMER),
            // The impaired ping-pongs: with a finite retry_cnt every retry a NAK or a timeout
            // starts costs one of a message's tries; with the default 6 a message now and then
            // ran out on a loaded host (an emulated CPU under load is slow to ACK). rxe never
            // counts 7 down (rxe_comp.c rxe_completer: `if (qp->comp.retry_cnt != 7)
            // qp->comp.retry_cnt--`), so with 7 these cases cannot run out: they show the
            // repair, total-loss shows the budget.
            CaseArg::Loss | CaseArg::Duplicate | CaseArg::Reorder | CaseArg::Corrupt => {
                (rts.retry_cnt(7), lab::qp::DEFAULT_MIN_RNR_TIMER)
            }
            _ => (rts, lab::qp::DEFAULT_MIN_RNR_TIMER),
        }
    }
}

fn main() -> ExitCode {
    let o = Opts::parse();
    let r = match &o.connect {
        Some(host) => client(&o, host),
        None => server(&o),
    };
    // Whatever happened, this node's link is left as it was.
    netem::remove_all();
    lab::course::exit_code(r)
}

/// The device, its RoCE v2 GID and a PD, shared by every case.
struct Node {
    ctx: Context,
    gid: Gid,
    pd: ProtectionDomain,
}

/// One case's QP, its CQ and a 4 KiB buffer.
struct Link {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn open() -> Result<Node> {
    let ctx = lab::course::open_device(None).or_fail("cannot open the device")?;
    let gid = ctx
        .roce_v2_ipv4_gid(1)
        .or_fail("cannot find our RoCE v2 GID")?;
    let pd = ctx.alloc_pd().or_fail("cannot allocate a PD")?;
    Ok(Node {
        gid: gid.gid,
        ctx,
        pd,
    })
}

/// A fresh QP for one case, connected to the peer's through the TCP stream: the client sends
/// its endpoint first, the server answers with its own.
fn link(n: &Node, oob: &mut OobStream, case: CaseArg, client: bool, t: Duration) -> Result<Link> {
    let cq = n
        .ctx
        .create_cq(2 * ROUNDS as i32 + 8, None)
        .or_fail("cannot create a CQ")?;
    let qp =
        n.pd.create_qp(
            &QpInitAttr::rc(&cq, &cq)
                .max_send_wr(4)
                .max_recv_wr(ROUNDS + 4)
                .max_inline_data(0),
        )
        .or_fail("cannot create the QP")?;
    let mr =
        n.pd.reg_mr(2 * MSG, AccessFlags::LOCAL_WRITE)
            .or_fail("cannot register the buffer")?;
    let psn = if client { 0x00c000 } else { 0x00a000 };
    let me = Endpoint {
        name: if client { "client" } else { "server" }.into(),
        lid: 0,
        qpn: qp.qp_num(),
        psn,
        gid: n.gid.raw(),
        regions: vec![],
    };
    let peer = if client {
        oob.send_msg(&me, t).or_fail("cannot send our endpoint")?;
        oob.recv_msg(t)
            .or_fail("cannot receive the server's endpoint")?
    } else {
        let p = oob
            .recv_msg(t)
            .or_fail("cannot receive the client's endpoint")?;
        oob.send_msg(&me, t).or_fail("cannot send our endpoint")?;
        p
    };
    expect(peer.gid != n.gid.raw(), || {
        "the peer has our own GID: both ends are on one device, and its packets never cross a \
         wire (nothing to impair). Run it on the microVM pair: LAB_PROVIDER=vm cargo lab run 13"
            .into()
    })?;
    let (rts, min_rnr) = case.attrs(psn);
    let rtr = RtrAttr::new(peer.qpn, peer.psn, Gid(peer.gid)).min_rnr_timer(min_rnr);
    let qp = qp
        .bring_up(&InitAttr::default(), &rtr, &rts)
        .or_fail("cannot connect the QP (INIT, RTR, RTS)")?;
    // The server says when its QP is up, and the client waits for it: a packet that reaches
    // a QP not yet in RTR is dropped, and the client's first SEND would become a retry.
    if client {
        oob.expect_line("up", t)
            .or_fail("the server did not bring its QP up")?;
    } else {
        oob.send_line("up", t).or_fail("cannot tell the client")?;
    }
    Ok(Link { qp, cq, mr })
}

fn wait(cq: &CompletionQueue, within: Duration, what: &str) -> Result<Option<WorkCompletion>> {
    match cq.wait_one(within) {
        Ok(wc) => Ok(Some(wc)),
        Err(lab::Error::CompletionTimeout { .. }) => Ok(None),
        Err(e) => Err(Failure(format!("waiting for {what}: {e}"))),
    }
}

fn must(cq: &CompletionQueue, what: &str) -> Result<WorkCompletion> {
    wait(cq, SHOULD_COME, what)?
        .ok_or_else(|| Failure(format!("no completion for {what} within {SHOULD_COME:?}")))
}

/// Message `round`: 4096 bytes that differ from every other round's.
fn pattern(round: u32) -> Vec<u8> {
    (0..MSG)
        .map(|i| (i as u32 ^ round.wrapping_mul(31)) as u8)
        .collect()
}

fn fill(mr: &MemoryRegion, round: u32) -> Result<()> {
    mr.write_from(0, &pattern(round))
        .or_fail("cannot fill the buffer")
}

/// Does the first half of the buffer hold message `round`?
fn intact(mr: &MemoryRegion, round: u32) -> bool {
    mr.as_slice()[..MSG] == pattern(round)[..]
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Prints what rose, as verdicts for the counters a case is about, and with `--counts`
/// the raw changes.
fn report(o: &Opts, who: &str, dev: &str, before: &netem::Counters, watch: &[&str]) {
    let after = netem::counters(dev);
    let d = netem::delta(before, &after);
    for w in watch {
        println!(
            "  {who}: hw_counters/{w} rose: {}",
            yes(d.iter().any(|(k, _)| k == w))
        );
    }
    if o.counts {
        let all: Vec<String> = d
            .iter()
            .filter(|(k, _)| k != "sent_pkts" && k != "rcvd_pkts")
            .map(|(k, v)| format!("{k} +{v}"))
            .collect();
        println!(
            "  {who}: counters that rose: {}",
            if all.is_empty() {
                "none".to_string()
            } else {
                all.join(", ")
            }
        );
    }
}

// ---------------------------------------------------------------------------------------
// The client (node b): it impairs what it sends, and runs every case.

fn client(o: &Opts, host: &str) -> Result<()> {
    let t = Duration::from_secs(o.timeout);
    // Whatever an earlier run that was killed left on this node's link goes first.
    netem::remove_all();
    let n = open()?;
    let dev = n.ctx.name().to_string();
    println!(
        "step 1: client: open {dev}, {}; connect to {host}:{} over TCP",
        show::gid(&n.gid.raw()),
        o.port
    );
    let mut oob = OobStream::connect(host, o.port, t).or_fail("cannot reach the server")?;
    let cases: Vec<CaseArg> = if o.case == CaseArg::All {
        ALL.to_vec()
    } else {
        vec![o.case]
    };
    for (i, case) in cases.iter().enumerate() {
        oob.send_line(&format!("case {}", case.name()), t)
            .or_fail("cannot tell the server the case")?;
        // The counters before the QP exists: nothing of this case can have moved them yet.
        let before = netem::counters(&dev);
        let l = link(&n, &mut oob, *case, true, t)?;
        println!("step {}: case {}", i + 2, case.name());
        match case {
            // These two record the wire themselves, around the moments that matter.
            CaseArg::FrozenPeer => frozen_peer(&l, &mut oob, t)?,
            CaseArg::KilledPeer => oob = killed_peer(&n, l, &mut oob, host, o.port, t)?,
            _ => {
                wire::start()?;
                match case {
                    CaseArg::TotalLoss => total_loss(&l)?,
                    CaseArg::RetryForever => retry_forever(&l)?,
                    CaseArg::Rnr | CaseArg::RnrExceeded => rnr_client(*case, &l)?,
                    _ => pingpong_client(*case, &l)?,
                }
                show_wire(*case, &wire::stop()?);
            }
        }
        let watch: &[&str] = match case {
            CaseArg::Loss | CaseArg::Reorder => &["rcvd_seq_err"],
            CaseArg::TotalLoss => &["retry_exceeded_err"],
            CaseArg::RetryForever => &["completer_retry_err"],
            CaseArg::Rnr => &["rcvd_rnr_err"],
            CaseArg::RnrExceeded => &["rcvd_rnr_err", "retry_rnr_exceeded_err"],
            _ => &[],
        };
        report(o, "client", &dev, &before, watch);
        oob.send_line("done", t)
            .or_fail("cannot tell the server we are done")?;
        oob.expect_line("ok", t)
            .or_fail("the server did not finish the case")?;
    }
    oob.send_line("bye", t).or_fail("cannot say bye")?;
    println!(
        "step {}: every case done; no impairment is left on this node's link",
        cases.len() + 2
    );
    Ok(())
}

/// What the recording of a case shows: verdicts where the packets vary from run to run (which
/// one was lost), the packets themselves where they are few and always the same.
fn show_wire(case: CaseArg, w: &wire::Ladder) {
    match case {
        CaseArg::Loss | CaseArg::Reorder => println!(
            "  on the wire: a NAK psn-sequence-error from node a: {}; a PSN node b sent again \
             (go-back-N): {}",
            yes(w.a_said("NAK psn-sequence-error") > 0),
            yes(w.resent_by_b() > 0)
        ),
        CaseArg::Duplicate => println!(
            "  on the wire: a PSN node b sent twice (netem's copies): {}",
            yes(w.resent_by_b() > 0)
        ),
        CaseArg::Corrupt => println!(
            "  on the wire: a PSN node b sent again (node a dropped the damaged copy and \
             answered nothing; the ack timeout resent it): {}",
            yes(w.resent_by_b() > 0)
        ),
        CaseArg::TotalLoss => println!(
            "  on the wire: {} packets from node b (netem drops them inside node b, before its \
             NIC: a lost packet is one that never arrives)",
            w.sent_by_b()
        ),
        CaseArg::RetryForever => w.print(
            "the loss took every try off the wire; once it healed, the next try and its ACK",
        ),
        CaseArg::Rnr => println!(
            "  on the wire: RNR NAKs from node a with its timer 20 (10.24 ms): {}; then an ACK: {}",
            yes(w.a_said("RNR_NAK timer=20") > 0),
            yes(w.a_said(" ACK ") > 0)
        ),
        CaseArg::RnrExceeded => w.print("the SEND, an RNR NAK, the one retry, another RNR NAK"),
        _ => {}
    }
}

/// Node a is frozen (its VM stopped) twice while our SEND waits for its ACK: thawed within
/// the retry budget, and thawed after it.
fn frozen_peer(l: &Link, oob: &mut OobStream, t: Duration) -> Result<()> {
    let per_try_ms = 4.096 * f64::from(1u32 << 16) / 1000.0;
    let budget_ms = per_try_ms * 4.0;
    println!(
        "  timeout 16, retry_cnt 3: each try waits 4.096 us x 2^16 = {per_try_ms:.1} ms; \
         budget {budget_ms:.1} ms"
    );
    oob.expect_line("posted", t)
        .or_fail("the server did not post its receives")?;
    // 1. Frozen for a quarter of the budget. A frozen VM runs nothing: its rxe neither
    // receives nor answers, and its clock stands still. What we send waits on the wire.
    host("freeze a")?;
    println!("  node a frozen: QEMU stopped its vCPUs (it hears nothing and says nothing)");
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the first SEND")?;
    std::thread::sleep(Duration::from_millis(300));
    host("thaw a")?;
    let wc = must(&l.cq, "the first SEND")?;
    println!(
        "  thawed after 300 ms, within the budget: the SEND completes with {}; the QP is {}",
        wc.status,
        l.qp.state().or_fail("cannot query the QP")?
    );
    expect(wc.is_success(), || {
        format!("expected success, got {}", wc.status)
    })?;
    // 2. Frozen until our budget has run out.
    wire::start()?;
    host("freeze a")?;
    println!("  node a frozen again, this time until our budget has run out");
    let t0 = Instant::now();
    l.qp.post_send_one(SendWr::send(2, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the second SEND")?;
    let wc = wait(&l.cq, Duration::from_secs(20), "the second SEND")?
        .ok_or_else(|| Failure("no completion for the second SEND within 20 s".into()))?;
    let took = t0.elapsed();
    let w = wire::stop()?;
    host("thaw a")?;
    println!(
        "  the SEND completes with {} after elapsed={:.1}ms, node a still frozen; the QP is {}",
        wc.status,
        took.as_secs_f64() * 1000.0,
        l.qp.state().or_fail("cannot query the QP")?
    );
    w.print("while node a was frozen: one SEND, sent retry_cnt + 1 = 4 times, never answered");
    println!("  node a thawed; the server reports what reached it");
    expect(wc.status == WcStatus::RetryExcErr, || {
        format!("expected IBV_WC_RETRY_EXC_ERR, got {}", wc.status)
    })
}

/// Node a is killed while our SEND waits; once the host has restarted it (and the harness the
/// server in it), we reconnect the same QP: ERR -> RESET -> INIT -> RTR -> RTS, with a fresh
/// exchange over a new TCP connection. Returns that connection.
fn killed_peer(
    n: &Node,
    l: Link,
    oob: &mut OobStream,
    server: &str,
    port: u16,
    t: Duration,
) -> Result<OobStream> {
    println!("  timeout 12, retry_cnt 3: budget 4 x 4.096 us x 2^12 = 67.1 ms");
    oob.expect_line("posted", t)
        .or_fail("the server did not post its receive")?;
    wire::start()?;
    host("kill a")?;
    println!("  node a killed: its VM is gone, with the server, its QP and its TCP socket");
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let wc = must(&l.cq, "the SEND to a dead node")?;
    let w = wire::stop()?;
    println!(
        "  the SEND completes with {}; the QP is {}",
        wc.status,
        l.qp.state().or_fail("cannot query the QP")?
    );
    expect(wc.status == WcStatus::RetryExcErr, || {
        format!("expected IBV_WC_RETRY_EXC_ERR, got {}", wc.status)
    })?;
    w.print("one SEND, sent retry_cnt + 1 = 4 times to a node that is not there");
    // The node comes back as a fresh VM: nothing of the old server survives, not its QP
    // number, not its PSNs. The harness starts the server role in it again.
    host("restart a")?;
    println!("  node a restarted (a fresh VM); the server starts again there");
    let mut fresh = OobStream::connect(server, port, t).or_fail("cannot reach the new server")?;
    println!("  connected again over TCP to the new server");
    fresh
        .send_line(&format!("case {}", CaseArg::Reconnect.name()), t)
        .or_fail("cannot tell the new server the case")?;
    // Our QP is in ERR: RESET empties it, and from there it can go to a new peer.
    let qp =
        l.qp.reset()
            .map_err(|e| Failure(format!("ERR -> RESET: {e}")))?;
    println!("  our QP: ERR -> RESET (its queues emptied)");
    let psn = 0x00c100;
    let me = Endpoint {
        name: "client".into(),
        lid: 0,
        qpn: qp.qp_num(),
        psn,
        gid: n.gid.raw(),
        regions: vec![],
    };
    fresh.send_msg(&me, t).or_fail("cannot send our endpoint")?;
    let peer = fresh
        .recv_msg(t)
        .or_fail("cannot receive the new server's endpoint")?;
    let rtr = RtrAttr::new(peer.qpn, peer.psn, Gid(peer.gid));
    let qp = qp
        .bring_up(&InitAttr::default(), &rtr, &RtsAttr::new(psn))
        .or_fail("cannot bring the QP up again")?;
    println!("  RESET -> INIT -> RTR -> RTS toward the new server's QP (a fresh exchange)");
    fresh
        .expect_line("up", t)
        .or_fail("the new server did not bring its QP up")?;
    fresh
        .expect_line("posted", t)
        .or_fail("the new server did not post its receive")?;
    qp.post_send_one(SendWr::send(2, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let wc = must(&l.cq, "the SEND on the reconnected QP")?;
    println!(
        "  a SEND on the reconnected QP completes with {}",
        wc.status
    );
    expect(wc.is_success(), || format!("{}", wc.status))?;
    Ok(fresh)
}

/// ROUNDS round trips of 4 KiB under netem: every message must come back intact, in order.
fn pingpong_client(case: CaseArg, l: &Link) -> Result<()> {
    let params = case.netem().unwrap_or("loss 0%");
    for r in 0..ROUNDS {
        l.qp.post_recv_one(RecvWr::new(u64::from(r), &[l.mr.sge(..MSG)]))
            .or_fail("cannot post a receive")?;
    }
    let fault = Netem::apply(params)?;
    println!("  tc netem {params} on the RoCE packets this node sends (UDP 4791 only)");
    println!(
        "  retry_cnt 7 on both QPs, which rxe never counts down: NAKs and timeouts cost resends, \
         never the message"
    );
    let mut good = 0;
    for r in 0..ROUNDS {
        fill(&l.mr, r)?;
        l.qp.post_send_one(SendWr::send(u64::from(r), &[l.mr.sge(..MSG)]).signaled(true))
            .or_fail("cannot post the SEND")?;
        // Two completions per round: our SEND (acknowledged) and the echo's receive.
        for _ in 0..2 {
            let wc = must(&l.cq, "a SEND or the echo")?;
            expect(wc.is_success(), || format!("round {r}: {}", wc.status))?;
            if wc.opcode == WcOpcode::Recv && intact(&l.mr, r) && wc.wr_id == u64::from(r) {
                good += 1;
            }
        }
    }
    fault.remove();
    println!(
        "  {ROUNDS} SENDs of {MSG} bytes and their echoes: {good} of {ROUNDS} came back intact \
         and in order; the QP is still {}",
        l.qp.state().or_fail("cannot query the QP")?
    );
    expect(good == ROUNDS, || {
        format!("only {good} of {ROUNDS} echoes were intact")
    })
}

/// 100% loss: the first send and retry_cnt resends, one ack timeout apart, then the error.
fn total_loss(l: &Link) -> Result<()> {
    let (timeout, retry) = (12u32, 3u32);
    let per_try_us = 4.096 * f64::from(1u32 << timeout);
    let budget = per_try_us * f64::from(retry + 1) / 1000.0;
    println!(
        "  timeout {timeout}, retry_cnt {retry}: budget (retry_cnt + 1) x 4.096 us x 2^{timeout} \
         = {budget:.1} ms"
    );
    println!(
        "  {}",
        lab::kernel::AckTimer::explain(timeout as u8, retry + 1)
    );
    let fault = Netem::apply("loss 100%")?;
    println!("  tc netem loss 100% on the RoCE packets this node sends");
    let t0 = Instant::now();
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let wc = must(&l.cq, "the SEND into the void")?;
    let took = t0.elapsed();
    fault.remove();
    println!("  the SEND completes with {}", wc.status);
    println!(
        "  measured elapsed={:.1}ms; within 0.5x to 20x of the budget (rxe's timer ticks in \
         jiffies, and this is an emulated CPU): {}",
        took.as_secs_f64() * 1000.0,
        yes((budget * 0.5..budget * 20.0).contains(&(took.as_secs_f64() * 1000.0)))
    );
    println!(
        "  the QP is now {}: it must go to RESET and be connected again",
        l.qp.state().or_fail("cannot query the QP")?
    );
    expect(wc.status == WcStatus::RetryExcErr, || {
        format!("expected IBV_WC_RETRY_EXC_ERR, got {}", wc.status)
    })
}

/// retry_cnt 7: rxe keeps resending; heal the wire after a deadline and the SEND completes.
fn retry_forever(l: &Link) -> Result<()> {
    let watch = Duration::from_secs(2);
    let fault = Netem::apply("loss 100%")?;
    println!(
        "  timeout 12, retry_cnt 7 (what ibv_rc_pingpong and rping ask for); tc netem loss 100%"
    );
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let early = wait(&l.cq, watch, "the SEND")?;
    println!(
        "  after {:.0} s (15x the 8-try budget of 134 ms): a completion? {}",
        watch.as_secs_f64(),
        yes(early.is_some())
    );
    expect(early.is_none(), || "rxe gave up on retry_cnt 7".into())?;
    // Heal in place (netem's loss to 0%), and remove the qdiscs only once the SEND is back:
    // see Netem::change.
    fault.change("loss 0%")?;
    println!("  the wire heals (netem's loss set to 0%)");
    let wc = must(&l.cq, "the SEND after the wire healed")?;
    fault.remove();
    println!("  the next resend gets through: {}", wc.status);
    expect(wc.is_success(), || format!("{}", wc.status))
}

/// The server posts its receive late (rnr) or never (rnr-exceeded).
fn rnr_client(case: CaseArg, l: &Link) -> Result<()> {
    let rnr_retry = if case == CaseArg::Rnr { 7 } else { 1 };
    println!(
        "  the server's min_rnr_timer is 20 (10.24 ms); our rnr_retry is {rnr_retry}{}",
        if rnr_retry == 7 { " (forever)" } else { "" }
    );
    let t0 = Instant::now();
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let wc = must(&l.cq, "the SEND")?;
    println!(
        "  the SEND completes with {} (elapsed={:.1}ms)",
        wc.status,
        t0.elapsed().as_secs_f64() * 1000.0
    );
    let want = if case == CaseArg::Rnr {
        WcStatus::Success
    } else {
        WcStatus::RnrRetryExcErr
    };
    expect(wc.status == want, || {
        format!("expected {want}, got {}", wc.status)
    })
}

// ---------------------------------------------------------------------------------------
// The server (node a): answers each case, and reports its own counters.

fn server(o: &Opts) -> Result<()> {
    let t = Duration::from_secs(o.timeout);
    let n = open()?;
    let dev = n.ctx.name().to_string();
    println!("step 1: server: open {dev}, {}", show::gid(&n.gid.raw()));
    let listener = Listener::bind(o.port).or_fail("cannot listen")?;
    println!("step 2: listening on TCP port {} for the client", o.port);
    let mut oob = listener.accept(t).or_fail("cannot accept the client")?;
    let mut step = 3;
    loop {
        let line = oob.recv_line(t).or_fail("cannot hear from the client")?;
        if line == "bye" {
            break;
        }
        let name = line.strip_prefix("case ").unwrap_or("");
        let case = CaseArg::from_name(name)
            .ok_or_else(|| Failure(format!("the client asked for an unknown case {line:?}")))?;
        // The counters before the QP exists: the client's first SEND may reach us (and be
        // answered with an RNR NAK) as soon as we have said our QP is up.
        let before = netem::counters(&dev);
        let l = link(&n, &mut oob, case, false, t)?;
        println!("step {step}: case {}", case.name());
        step += 1;
        match case {
            CaseArg::Loss | CaseArg::Duplicate | CaseArg::Reorder | CaseArg::Corrupt => echo(&l)?,
            CaseArg::Rnr => {
                // A slow receiver: the receive is posted 200 ms after the QP is up.
                std::thread::sleep(Duration::from_millis(200));
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post the late receive")?;
                let wc = must(&l.cq, "the late receive")?;
                println!(
                    "  posted our receive 200 ms late; it completes with {}",
                    wc.status
                );
            }
            CaseArg::RetryForever => {
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post a receive")?;
                let wc = must(&l.cq, "the SEND that got through")?;
                println!(
                    "  one receive posted; once the wire heals it completes with {}",
                    wc.status
                );
            }
            CaseArg::TotalLoss => {
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post a receive")?;
                println!("  one receive posted; nothing reaches it");
            }
            CaseArg::FrozenPeer => {
                for id in 1..=2 {
                    l.qp.post_recv_one(RecvWr::new(id, &[l.mr.sge(..MSG)]))
                        .or_fail("cannot post a receive")?;
                }
                println!("  two receives posted; this node will be frozen twice");
                oob.send_line("posted", t)
                    .or_fail("cannot tell the client")?;
                // Whatever was sent to us while we were frozen waited on the wire, and came in
                // when we were thawed: both SENDs, the second after the client gave up on it.
                for id in 1..=2 {
                    let wc = must(&l.cq, "a SEND sent while we were frozen")?;
                    println!("  receive {id} completes with {}", wc.status);
                }
                println!(
                    "  so the second SEND did arrive: the client's error said only that no ACK \
                     came in time"
                );
            }
            CaseArg::KilledPeer => {
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post a receive")?;
                println!("  one receive posted; this node is about to be killed");
                oob.send_line("posted", t)
                    .or_fail("cannot tell the client")?;
            }
            CaseArg::Reconnect => {
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post a receive")?;
                println!("  a fresh QP for the client that reconnected; one receive posted");
                oob.send_line("posted", t)
                    .or_fail("cannot tell the client")?;
                let wc = must(&l.cq, "the reconnected client's SEND")?;
                println!("  its SEND arrives: {}", wc.status);
            }
            _ => println!("  no receive posted: the client's SEND finds none"),
        }
        oob.expect_line("done", t)
            .or_fail("the client did not finish")?;
        let watch: &[&str] = match case {
            CaseArg::Loss | CaseArg::Reorder => &["out_of_seq_request"],
            CaseArg::Duplicate => &["duplicate_request"],
            CaseArg::Rnr | CaseArg::RnrExceeded => &["send_rnr_err"],
            _ => &[],
        };
        report(o, "server", &dev, &before, watch);
        oob.send_line("ok", t).or_fail("cannot answer the client")?;
    }
    println!("step {step}: the client is done");
    Ok(())
}

/// Echoes ROUNDS messages back to the client, in order. Receives land in the first half of
/// the buffer, echoes go from the second: a resend of echo N (its ACK lost) must not read
/// message N+1. Our echo's completion may come after the client's next message (the ACK
/// was lost and resent): every completion is taken as it comes.
fn echo(l: &Link) -> Result<()> {
    for r in 0..ROUNDS {
        l.qp.post_recv_one(RecvWr::new(u64::from(r), &[l.mr.sge(..MSG)]))
            .or_fail("cannot post a receive")?;
    }
    let (mut recvd, mut sent, mut good) = (0u32, 0u32, 0u32);
    while recvd < ROUNDS || sent < ROUNDS {
        let wc = must(&l.cq, "the client's SEND or our echo")?;
        expect(wc.is_success(), || {
            format!("after {recvd} messages: {}", wc.status)
        })?;
        if wc.opcode == WcOpcode::Recv {
            expect(wc.wr_id == u64::from(recvd), || {
                format!("message {recvd} arrived as wr_id {}", wc.wr_id)
            })?;
            if intact(&l.mr, recvd) {
                good += 1;
            }
            // A copy first: the echo goes from the second half.
            let msg = l.mr.as_slice()[..MSG].to_owned();
            l.mr.write_from(MSG, &msg)
                .or_fail("cannot copy the message")?;
            l.qp.post_send_one(SendWr::send(u64::from(recvd), &[l.mr.sge(MSG..)]).signaled(true))
                .or_fail("cannot post the echo")?;
            recvd += 1;
        } else {
            sent += 1;
        }
    }
    println!("  {ROUNDS} messages received in order, {good} intact, each echoed back");
    expect(good == ROUNDS, || format!("only {good} of {ROUNDS} intact"))
}
