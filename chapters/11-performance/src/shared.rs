//! What both roles share: a connected QP with its own send and receive CQs, the ways to wait
//! for completions, the WRITE ping-pong both sides run, and the node's own figures (CPU time,
//! softirq threads, the netdev and its MTU, rxe's packet counters).

use std::time::{Duration, Instant};

use course::exchange::{Endpoint, OobStream};
use course::{OrFail, Outcome as Result, expect};
use lab::{
    CompletionQueue, Context, Gid, InitAttr, MemoryRegion, Mtu, ProtectionDomain, QpInitAttr,
    QueuePair, RemoteRegion, RtrAttr, RtsAttr, SendWr, WorkCompletion,
};

use crate::protocol::Request;
use crate::{MAX_INLINE, MAX_MSG, MAX_SGE, OP, PSN, RQ_DEPTH, SQ_DEPTH};

/// How a program waits for its completions (section 3 compares them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `ibv_poll_cq` in a loop: the lowest latency on hardware, one core burnt.
    Busy,
    /// Arm the CQ (`ibv_req_notify_cq`), sleep in `ibv_get_cq_event`, ack, poll.
    Events,
    /// `ibv_poll_cq`, and `usleep(10)` between empty polls: the tutorials' compromise.
    Sleep10,
}

impl Wait {
    pub const ALL: [Wait; 3] = [Wait::Busy, Wait::Events, Wait::Sleep10];
    pub fn name(self) -> &'static str {
        match self {
            Wait::Busy => "busy-poll",
            Wait::Events => "events",
            Wait::Sleep10 => "usleep(10)",
        }
    }
    pub fn parse(s: &str) -> Option<Wait> {
        Wait::ALL.into_iter().find(|w| w.name() == s)
    }
}

/// One end of an RC connection: the QP, a CQ for its sends and one for its receives (each
/// with its own completion channel, so either can be waited on with events), and the peer's
/// buffer.
#[derive(Debug)]
pub struct Conn {
    pub qp: QueuePair,
    pub scq: CompletionQueue,
    pub rcq: CompletionQueue,
    pub remote: RemoteRegion,
}

/// Creates a QP with the chapter's capacities and its two CQs.
pub fn new_qp(
    ctx: &Context,
    pd: &ProtectionDomain,
) -> Result<(
    QueuePair<lab::state::Reset>,
    CompletionQueue,
    CompletionQueue,
)> {
    let scq = ctx.create_cq(SQ_DEPTH as i32, Some(&ctx.create_comp_channel()?))?;
    let rcq = ctx.create_cq(RQ_DEPTH as i32, Some(&ctx.create_comp_channel()?))?;
    let qp = pd.create_qp(
        &QpInitAttr::rc(&scq, &rcq)
            .max_send_wr(SQ_DEPTH)
            .max_recv_wr(RQ_DEPTH)
            .max_send_sge(MAX_SGE)
            .max_inline_data(MAX_INLINE),
    )?;
    Ok((qp, scq, rcq))
}

/// RTS with a much longer ACK timeout than lab's default (19: 4.096 us x 2^19 = 2.1 s per
/// try). The default's 67 ms lets a loaded one-vCPU guest's late ACK end a transfer with
/// `IBV_WC_RETRY_EXC_ERR (12)`. Even 268 ms (timeout 16) was too short for section 4's
/// packet counts: in 2 of 18 quick runs on this lab the 1 MiB WRITE at path MTU 4096 took
/// one ACK timeout, with no NAK (no packet arrived out of sequence), and resent its last 18
/// and 77 packets. The timer that fired is rxe's retransmit timer, re-armed whenever an ACK
/// is processed while packets are still outstanding (kernel 6.1's `rxe_comp.c`
/// `rxe_completer`, its `COMPST_EXIT` step); 2.1 s keeps a slow ACK from counting as a lost one, and a real loss
/// still shows, as a NAK or, 2.1 s later, as a timeout.
pub fn rts() -> RtsAttr {
    RtsAttr::new(PSN).timeout(19)
}

pub fn rtr(theirs: &Endpoint, mtu: Option<Mtu>) -> RtrAttr {
    let r = RtrAttr::new(theirs.qpn, theirs.psn, Gid(theirs.gid));
    match mtu {
        Some(m) => r.path_mtu(m),
        None => r,
    }
}

/// The client's half of a new connection: our endpoint out, the server's in, then RTS.
/// `path_mtu` None = the port's active MTU.
pub fn connect_qp(
    ctx: &Context,
    pd: &ProtectionDomain,
    oob: &mut OobStream,
    id: u32,
    path_mtu: Option<Mtu>,
) -> Result<Conn> {
    let (qp, scq, rcq) = new_qp(ctx, pd)?;
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let req = Request::Qp {
        id,
        path_mtu: path_mtu.map_or(0, |m| m.bytes()),
    };
    oob.send_line(&req.to_string(), OP)?;
    let mine = Endpoint {
        name: format!("client-{id}"),
        qpn: qp.qp_num(),
        psn: PSN,
        gid: gid.gid.raw(),
        ..Default::default()
    };
    oob.send_msg(&mine, OP)?;
    let theirs = oob.recv_msg(OP)?;
    let qp = qp.bring_up(&InitAttr::default(), &rtr(&theirs, path_mtu), &rts())?;
    let remote = *theirs.regions.first().ok_or("the server sent no region")?;
    Ok(Conn {
        qp,
        scq,
        rcq,
        remote,
    })
}

/// Waits for `out.len()` completions on `cq` the way `wait` says, and checks that each one
/// succeeded. Returns how many times the thread went to sleep (events) or napped (usleep).
pub fn wait_cq(cq: &CompletionQueue, wait: Wait, out: &mut [WorkCompletion]) -> Result<u64> {
    let start = Instant::now();
    let mut got = 0;
    let mut sleeps = 0;
    loop {
        got += cq.poll_into(&mut out[got..])?;
        if got == out.len() {
            break;
        }
        if start.elapsed() > OP {
            return Err(format!(
                "waited {OP:?} for {} completions ({}), got {got}",
                out.len(),
                wait.name()
            )
            .into());
        }
        match wait {
            Wait::Busy => std::hint::spin_loop(),
            Wait::Sleep10 => {
                std::thread::sleep(Duration::from_micros(10));
                sleeps += 1;
            }
            Wait::Events => {
                // Arm, then poll once more: a completion that arrived before the arm raises
                // no event, and waiting for one would sleep until the deadline.
                cq.req_notify(false)?;
                got += cq.poll_into(&mut out[got..])?;
                if got == out.len() {
                    break;
                }
                cq.get_event(OP)?.ack();
                sleeps += 1;
            }
        }
    }
    for wc in out.iter() {
        wc.ok()?;
    }
    Ok(sleeps)
}

/// The kernel's account of this node's CPU time, all CPUs: everything but idle and iowait in
/// `/proc/stat` (in USER_HZ ticks, 100 per second on x86-64 Linux). It includes what no
/// process's `getrusage` shows: softirq time, where rxe's transport does much of its work.
pub fn node_cpu() -> Result<Duration> {
    let s = std::fs::read_to_string("/proc/stat").or_fail("reading /proc/stat")?;
    let line = s.lines().next().unwrap_or_default();
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    expect(v.len() >= 8, || {
        format!("unexpected /proc/stat line: {line}")
    })?;
    let busy: u64 = v.iter().take(8).sum::<u64>() - v[3] - v[4];
    Ok(Duration::from_millis(busy * 10))
}

/// The kernel's softirq threads on this node (`ksoftirqd/N`, one per CPU), from
/// `/proc/<pid>/schedstat`: the time they ran, the time they waited runnable for a CPU (ns),
/// and how many times they were scheduled. Softirqs (where rxe receives packets and runs its
/// responder and completer) normally run on the way out of an interrupt, charged to nobody;
/// when they pile up, the kernel hands them to these threads, which then take turns on the
/// CPU with the programs that want it.
pub fn softirq_threads() -> Result<[u64; 3]> {
    let mut total = [0; 3];
    for e in std::fs::read_dir("/proc").or_fail("reading /proc")? {
        let Ok(e) = e else { continue };
        let dir = e.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("ksoftirqd/") {
            continue;
        }
        let st = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
        let v: Vec<u64> = st
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [run, wait, slices] = v[..] {
            total = [total[0] + run, total[1] + wait, total[2] + slices];
        }
    }
    Ok(total)
}

/// The rxe device's netdev (the interface its RoCE v2 GID lives on), from sysfs.
pub fn netdev_of(ctx: &Context) -> Result<String> {
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let p = format!(
        "/sys/class/infiniband/{}/ports/1/gid_attrs/ndevs/{}",
        ctx.name(),
        gid.index
    );
    Ok(std::fs::read_to_string(&p)
        .or_fail_with(|| format!("reading {p}"))?
        .trim()
        .to_string())
}

/// Sets `dev`'s MTU with `ip link set` (root in the lab) and waits until the rxe port's
/// active MTU follows.
pub fn set_mtu(ctx: &Context, dev: &str, mtu: u32) -> Result<Mtu> {
    let out = duct::cmd("ip", ["link", "set", "dev", dev, "mtu", &mtu.to_string()])
        .stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .run()
        .or_fail("running `ip link set` (is iproute2 installed?)")?;
    expect(out.status.success(), || {
        format!(
            "`ip link set dev {dev} mtu {mtu}` failed ({}): {}; the chapter needs root in the \
             lab to change the MTU",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let want = if mtu >= 4096 + 100 { 4096 } else { 1024 };
    let start = Instant::now();
    loop {
        let active = ctx.query_port(1)?.active_mtu;
        if active.bytes() == want {
            return Ok(active);
        }
        expect(start.elapsed() < Duration::from_secs(10), || {
            format!(
                "port 1's active MTU is {} after setting {dev} to {mtu}",
                active.bytes()
            )
        })?;
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Restores a netdev's MTU when dropped (also when a step fails half-way).
#[derive(Debug)]
pub struct MtuGuard<'a> {
    pub ctx: &'a Context,
    pub dev: String,
    pub restore: u32,
    pub armed: bool,
}

impl Drop for MtuGuard<'_> {
    fn drop(&mut self) {
        if self.armed
            && let Err(e) = set_mtu(self.ctx, &self.dev, self.restore)
        {
            eprintln!(
                "warning: could not restore {}'s MTU to {}: {e}",
                self.dev, self.restore
            );
        }
    }
}

/// A netdev's MTU now (sysfs).
pub fn mtu_of(dev: &str) -> Result<u32> {
    let p = format!("/sys/class/net/{dev}/mtu");
    std::fs::read_to_string(&p)
        .or_fail_with(|| format!("reading {p}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{p}: {e}").into())
}

/// One side of an RDMA WRITE ping-pong, measured the way perftest's `ib_write_lat` measures
/// it. Each side owns a buffer; the peer WRITEs `size` bytes into it at offset [`MAX_MSG`],
/// and this side spins on the *last* byte of those bytes (rxe, like a NIC, places a message's
/// packets in order, so when the last byte has changed the whole message has landed). There
/// is no completion on the target of a WRITE: the spin is the only way it learns.
///
/// Round `i` (1, 2, ...): the side that `starts` puts `i` in the last byte of its outgoing
/// bytes, posts the WRITE (signaled), busy-polls its send CQ for the WRITE's completion, then
/// spins until its own buffer's last byte is `i` (the peer's reply). The other side does the
/// same in the other order: spin for `i`, then write `i` back. So one round is one round trip;
/// the starter returns each round's time (the other side an empty list).
///
/// The spin is a plain loop on a volatile read, like perftest's `while (*poll_buf != rcnt)`;
/// it looks at the clock every [`SPIN_CHECK`] reads only, so that the deadline ([`OP`]) does
/// not make it a different loop from perftest's.
pub fn write_pingpong(
    c: &Conn,
    mr: &MemoryRegion,
    peer: RemoteRegion,
    size: usize,
    rounds: u64,
    starts: bool,
) -> Result<Vec<Duration>> {
    let size = size.max(1);
    let sge = [mr.sge(0..size)];
    let post_byte = size - 1;
    let poll_byte = MAX_MSG + size - 1;
    let mut wc = [WorkCompletion::default()];
    let mut rounds_ns = Vec::with_capacity(rounds as usize);
    let spin_for = |want: u8| -> Result<()> {
        let start = Instant::now();
        let mut b = [0u8];
        let mut spins = 0u32;
        loop {
            mr.read_into(poll_byte, &mut b)?;
            if b[0] == want {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(SPIN_CHECK) && start.elapsed() > OP {
                return Err(format!(
                    "WRITE ping-pong: waited {OP:?} for byte {want} at offset {poll_byte} (it \
                     holds {})",
                    b[0]
                )
                .into());
            }
        }
    };
    let post = |i: u8, wc: &mut [WorkCompletion]| -> Result<()> {
        mr.write_from(post_byte, &[i])?;
        c.qp.post_send_one(SendWr::write(
            5,
            &sge,
            peer.addr + MAX_MSG as u64,
            peer.rkey,
        ))?;
        // perftest's `do { ne = ibv_poll_cq(...) } while (ne == 0)`: no pause hint, the clock
        // only every SPIN_CHECK polls.
        let start = Instant::now();
        let mut polls = 0u32;
        while c.scq.poll_into(wc)? == 0 {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(SPIN_CHECK) && start.elapsed() > OP {
                return Err(format!("WRITE ping-pong: no completion within {OP:?}").into());
            }
        }
        wc[0].ok()?;
        Ok(())
    };
    for round in 1..=rounds {
        // The byte counts 1, 2, ... 255, 0, 1, ...: never the value the round before left.
        let i = round as u8;
        if starts {
            let t = Instant::now();
            post(i, &mut wc)?;
            spin_for(i)?;
            rounds_ns.push(t.elapsed());
        } else {
            spin_for(i)?;
            post(i, &mut wc)?;
        }
    }
    Ok(rounds_ns)
}

/// How many spins of [`write_pingpong`] between two looks at the clock.
const SPIN_CHECK: u32 = 4096;

/// rxe's hardware counter `name` of port 1 (`/sys/class/infiniband/<dev>/ports/1/hw_counters`).
///
/// The kernel caches these values for `hw_counters/lifespan` milliseconds (12 here): a read
/// sooner than that after the previous one returns the old value. So wait that long first.
pub fn hw_counter(ctx: &Context, name: &str) -> Result<u64> {
    let dir = format!("/sys/class/infiniband/{}/ports/1/hw_counters", ctx.name());
    let lifespan: u64 = std::fs::read_to_string(format!("{dir}/lifespan"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(20);
    std::thread::sleep(Duration::from_millis(lifespan + 5));
    let p = format!("{dir}/{name}");
    std::fs::read_to_string(&p)
        .or_fail_with(|| format!("reading {p}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{p}: {e}").into())
}
