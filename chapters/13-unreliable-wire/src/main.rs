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
//! Each case also shows its wire: the client asks the lab's host (`course::host`) to record the
//! cable between the two VMs, and prints what the recording proves (a NAK, a resend, an RNR
//! NAK with its timer) or, where it is short and the same every run, the packets themselves.
//! The host also freezes, kills and restarts node a for the last two cases.
//!
//! Run it: `cargo lab run 13` (the pair: server on node a, client on node b; it needs two
//! kernels on a wire: in one VM rxe loops its packets back without ever reaching a qdisc).
//! The wire of a run: `cargo lab run 13 --trace /tmp/13.pcap` prints every packet;
//! `--counts` prints the counters' raw changes (they vary run to run).
//!
//! The files: this one holds the flags, the case table and the client's loop over the cases;
//! `link.rs` the QP each case connects, `cases.rs` the client's half of each case, `server.rs`
//! the server's.

use clap::{Parser, ValueEnum};
use course::exchange::{LAB_PORT, OobStream};
use course::show;
use course::{OrFail, Outcome as Result};
use lab::RtsAttr;
use std::process::ExitCode;
use std::time::Duration;

mod cases;
mod link;
mod netem;
mod server;
mod wire;
use cases::{
    frozen_peer, killed_peer, pingpong_client, retry_forever, rnr_client, show_wire, total_loss,
};
use link::{link, open};
use server::server;

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
    course::exit_code(r)
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
