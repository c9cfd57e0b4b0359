//! Section 4: memory: the packets of one 1 MiB WRITE against the path MTU and the SGE count,
//! path MTU 1024 against 4096, 64-byte alignment, huge pages.

use std::time::Instant;

use course::show::{self, Align, Table};
use course::{OrFail, Outcome as Result};
use lab::{AccessFlags, MemoryRegion, Mtu, SendWr, Sge, WorkCompletion};

use super::{Lab, Plan, Results};
use crate::MAX_MSG;
use crate::protocol::{Reply, Request};
use crate::shared::{
    Conn, MtuGuard, Wait, connect_qp, hw_counter, mtu_of, netdev_of, set_mtu, wait_cq,
};
use crate::stats::{Stats, ns};

/// One WRITE of `len` bytes split into `sges` SGEs; the packets node b sent for it (rxe's counter).
fn write_packets(lab: &Lab, c: &Conn, len: usize, sges: usize) -> Result<u64> {
    let piece = len / sges;
    let list: Vec<Sge> = (0..sges)
        .map(|i| lab.mr.sge(i * piece..(i + 1) * piece))
        .collect();
    let mut wc = [WorkCompletion::default()];
    let before = hw_counter(lab.ctx, "sent_pkts")?;
    c.qp.post_send_one(SendWr::write(6, &list, c.remote.addr, c.remote.rkey))?;
    wait_cq(&c.scq, Wait::Busy, &mut wc)?;
    Ok(hw_counter(lab.ctx, "sent_pkts")? - before)
}

fn mib_write_lat(
    c: &Conn,
    src: &MemoryRegion,
    off: usize,
    len: usize,
    iters: u64,
) -> Result<Stats> {
    let sge = [src.sge(off..off + len)];
    let mut wc = [WorkCompletion::default()];
    let mut v = vec![];
    for i in 0..iters + 2 {
        let t0 = Instant::now();
        c.qp.post_send_one(SendWr::write(
            7,
            &sge,
            c.remote.addr + off as u64,
            c.remote.rkey,
        ))?;
        wait_cq(&c.scq, Wait::Busy, &mut wc)?;
        if i >= 2 {
            v.push(t0.elapsed());
        }
    }
    Stats::of_durations(&v).ok_or_else(|| "no samples".into())
}

fn server_counters(lab: &mut Lab) -> Result<(u64, u64)> {
    match lab.ask(Request::Counters)? {
        Reply::Counters { sent, rcvd } => Ok((sent, rcvd)),
        r => Err(format!("the server answered counters with {r:?}").into()),
    }
}

/// Asks the server to set its netdev's MTU; returns node a's active MTU after.
fn ask_mtu(lab: &mut Lab, mtu: u32) -> Result<u32> {
    match lab.ask(Request::Mtu(mtu))? {
        Reply::ActiveMtu(m) => Ok(m),
        r => Err(format!("the server answered mtu with {r:?}").into()),
    }
}

fn packet_table() -> Table {
    Table::new([
        ("path MTU", Align::Right),
        ("WRITE", Align::Right),
        ("SGEs", Align::Right),
        ("packets needed", Align::Right),
        ("sent by b", Align::Left),
        ("NAKs to b", Align::Left),
        ("timeouts", Align::Left),
        ("ACKs by a", Align::Left),
        ("median", Align::Left),
    ])
    .indent(4)
}

/// One WRITE of `len` bytes in `sges` SGEs: the packets node b sent for it, against what the
/// path MTU needs; with `timed`, that many more WRITEs for the latency. Returns `None` when the
/// count is as predicted (exactly `len / path MTU`, with no NAK and no ACK timeout, and node
/// a's ACKs are [`acks_for`] that many packets), else the line that says what differed.
///
/// rxe keeps up to 128 packets unacknowledged: 128 KiB in flight at path MTU 1024, 512 KiB
/// at 4096. The lab's wire is a lossless relay (each QEMU's NIC streams its frames to the
/// process that owns the lab, which holds a slow receiver's frames instead of dropping them),
/// so both bursts arrive whole. On a wire that drops packets, each drop would show here as a
/// NAK (a later packet arrived out of sequence) or a timeout, then a go-back-N resend, and
/// the count would exceed what the MTU needs.
fn packet_row(
    lab: &mut Lab,
    c: &Conn,
    t: &mut Table,
    len: usize,
    sges: usize,
    res: &mut Results,
    timed: Option<u64>,
) -> Result<Option<String>> {
    let mtu = c.qp.query()?.path_mtu.map_or(1024, |m| m.bytes()) as u64;
    let (a0, _) = server_counters(lab)?;
    let naks0 = hw_counter(lab.ctx, "rcvd_seq_err")?;
    let retries0 = hw_counter(lab.ctx, "completer_retry_err")?;
    let sent = write_packets(lab, c, len, sges)?;
    let naks = hw_counter(lab.ctx, "rcvd_seq_err")? - naks0;
    let retries = hw_counter(lab.ctx, "completer_retry_err")? - retries0;
    let (a1, _) = server_counters(lab)?;
    let needed = (len as u64).div_ceil(mtu);
    let median = match timed {
        Some(n) => {
            let s = mib_write_lat(c, &lab.mr, 0, len, n)?;
            if len == MAX_MSG {
                res.mtu_lat.push((mtu as u32, s.median));
            }
            show::lat(ns(s.median)).to_string()
        }
        None => "-".to_string(),
    };
    t.row([
        mtu.to_string(),
        len.to_string(),
        sges.to_string(),
        needed.to_string(),
        format!("sent={sent}"),
        format!("naks={naks}"),
        format!("retries={retries}"),
        format!("acks={}", a1 - a0),
        median,
    ]);
    res.packets
        .push((format!("{len} B, path MTU {mtu}, {sges} SGEs"), sent));
    let acks = a1 - a0;
    if sent == needed && naks == 0 && retries == 0 && acks == acks_for(needed) {
        Ok(None)
    } else {
        // The table's counts are figures the end-to-end test hides; this line is not.
        Ok(Some(format!(
            "    not as predicted: {len} B at path MTU {mtu} in {sges} SGE(s): sent {sent} \
             (needed {needed}), {naks} NAK(s), {retries} timeout(s), {acks} ACK(s) (predicted {})",
            acks_for(needed)
        )))
    }
}

/// How many ACKs rxe's responder sends for one message of `packets` packets: one per packet
/// with the AckReq bit, which rxe's requester sets on the message's last packet and on every
/// 66th before it (`rxe_req.c` `init_req_packet`: `ack_req = END || noack_pkts++ >
/// RXE_MAX_PKT_PER_ACK`, 64, and `noack_pkts = 0` when it asks; `rxe_resp.c` `acknowledge`
/// answers each). 1024 packets: 16; 256: 4; 128: 2; 32: 1.
fn acks_for(packets: u64) -> u64 {
    packets.saturating_sub(1) / 66 + 1
}

pub(super) fn measure(lab: &mut Lab, plan: &Plan, res: &mut Results) -> Result<bool> {
    let mut ok = true;
    println!("section 4: memory: SGEs and packets, path MTU, alignment, huge pages");
    let c = connect_qp(lab.ctx, lab.pd, &mut lab.oob, 1, None)?;
    let mtu = c.qp.query()?.path_mtu.map_or(0, |m| m.bytes());
    println!(
        "  4a: one 1 MiB RDMA WRITE at path MTU {mtu}; packets from rxe's hw_counters/sent_pkts \
         (node b sends the data, node a the ACKs)"
    );
    let mut t = packet_table();
    let mut misses = Vec::new();
    for sges in [1usize, 16] {
        misses.extend(packet_row(lab, &c, &mut t, MAX_MSG, sges, res, None)?);
    }
    print!("{t}");
    ok &= misses.is_empty();
    misses.drain(..).for_each(|m| println!("{m}"));
    drop(c);

    let dev = netdev_of(lab.ctx)?;
    let mtu0 = mtu_of(&dev)?;
    println!(
        "  4b: path MTU 1024 against 4096: {dev} to MTU 9000 on both nodes (then back to {mtu0})"
    );
    let active_a = ask_mtu(lab, 9000)?;
    let mut guard = MtuGuard {
        ctx: lab.ctx,
        dev: dev.clone(),
        restore: mtu0,
        armed: true,
    };
    let active = set_mtu(lab.ctx, &dev, 9000)?;
    println!(
        "    node a: active_mtu {active_a}; node b: active_mtu {}",
        active.bytes()
    );
    let mut t = packet_table();
    for (i, m) in [Mtu::from_bytes(1024), Mtu::from_bytes(4096)]
        .into_iter()
        .enumerate()
    {
        let m = m.ok_or("Mtu::from_bytes")?;
        let c = connect_qp(lab.ctx, lab.pd, &mut lab.oob, 2 + i as u32, Some(m))?;
        for len in [128usize << 10, MAX_MSG] {
            let iters = if len == MAX_MSG {
                plan.big_iters
            } else {
                plan.big_iters * 2
            };
            misses.extend(packet_row(lab, &c, &mut t, len, 1, res, Some(iters))?);
        }
    }
    print!("{t}");
    ok &= misses.is_empty();
    misses.drain(..).for_each(|m| println!("{m}"));
    lab.ask_ok(Request::DropQps)?;
    set_mtu(lab.ctx, &dev, mtu0)?;
    guard.armed = false;
    let active_a = ask_mtu(lab, mtu0)?;
    println!(
        "    restored: {dev} MTU {} on node b, active_mtu {active_a} on node a",
        mtu_of(&dev)?
    );

    let c = connect_qp(lab.ctx, lab.pd, &mut lab.oob, 4, None)?;
    println!("  4c: alignment: a 64 KiB WRITE from (and to) offsets 0, 64 and 1 of the buffers");
    let mut t = Table::new([
        ("offset", Align::Right),
        ("n", Align::Right),
        ("median", Align::Left),
        ("p99", Align::Left),
        ("stdev", Align::Left),
    ])
    .indent(4);
    for off in [0usize, 64, 1] {
        let s = mib_write_lat(&c, &lab.mr, off, 64 << 10, plan.align_iters)?;
        res.align.push((off, s.median));
        t.row([
            off.to_string(),
            s.n.to_string(),
            show::lat(ns(s.median)).to_string(),
            show::lat(ns(s.p99)).to_string(),
            show::lat(ns(s.stdev)).to_string(),
        ]);
    }
    print!("{t}");
    if let [(_, m0), (_, m64), (_, m1)] = res.align[..] {
        // A ratio near 1 is the finding: rxe copies with the CPU (memcpy handles any
        // alignment), and no NIC reads these bytes by DMA.
        println!(
            "    median against offset 0: offset 64 ratio={:.2}, offset 1 ratio={:.2}",
            m64 / m0.max(1.0),
            m1 / m0.max(1.0)
        );
    }

    println!("  4d: huge pages: a 1 MiB WRITE from a 2 MiB huge page against 4 KiB pages");
    let hp = "/proc/sys/vm/nr_hugepages";
    let before = std::fs::read_to_string(hp).or_fail_with(|| format!("reading {hp}"))?;
    std::fs::write(hp, "2")
        .or_fail_with(|| format!("writing {hp} (the chapter needs root in the lab)"))?;
    let huge = lab.pd.reg_mr_huge(MAX_MSG, AccessFlags::LOCAL_WRITE);
    let r = (|| -> Result<(Stats, Stats)> {
        let huge = huge?;
        let h = mib_write_lat(&c, &huge, 0, MAX_MSG, plan.huge_iters)?;
        let n = mib_write_lat(&c, &lab.mr, 0, MAX_MSG, plan.huge_iters)?;
        Ok((h, n))
    })();
    std::fs::write(hp, before.trim()).or_fail_with(|| format!("restoring {hp}"))?;
    let (h, n) = r?;
    let mut t = Table::new([
        ("pages", Align::Left),
        ("n", Align::Right),
        ("median", Align::Left),
        ("p99", Align::Left),
        ("stdev", Align::Left),
    ])
    .indent(4);
    for (name, s) in [("2 MiB (huge)", &h), ("4 KiB", &n)] {
        t.row([
            name.to_string(),
            s.n.to_string(),
            show::lat(ns(s.median)).to_string(),
            show::lat(ns(s.p99)).to_string(),
            show::lat(ns(s.stdev)).to_string(),
        ]);
    }
    print!("{t}");
    // Near 1 again: with no NIC there is no NIC translation table for huge pages to shrink.
    println!(
        "    median, huge pages against 4 KiB pages: ratio={:.2}",
        h.median / n.median.max(1.0)
    );
    res.huge = Some((h.median, n.median));
    Ok(ok)
}
