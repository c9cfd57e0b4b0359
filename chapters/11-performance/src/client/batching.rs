//! Section 2: batching (a chain of WRs in one `ibv_post_send` against one call each, with the
//! doorbell system calls counted), selective signaling, inline data against an SGE.

use std::io::Read;
use std::time::{Duration, Instant};

use course::show::{self, Align, Table};
use course::{OrFail, Outcome as Result, expect};
use lab::{InlineSge, SendWr, WorkCompletion};

use super::{BatchRate, Doorbells, Lab, Plan, Results, lat_row, lat_table, write_syscalls};
use crate::shared::{Conn, Wait, wait_cq};
use crate::stats::Stats;
use crate::{MAX_INLINE, OP};

/// Posts `n` 64-byte WRITEs, chained (one call) or one call each; only the last signaled.
/// Returns the write(2) calls the posting made.
fn post_writes(lab: &Lab, c: &Conn, n: usize, chained: bool) -> Result<u64> {
    let sge = [lab.mr.sge(0..64)];
    let mk = |i: usize| {
        SendWr::write(i as u64, &sge, c.remote.addr + 64 * i as u64, c.remote.rkey)
            .signaled(i + 1 == n)
    };
    let before = write_syscalls()?;
    if chained {
        let mut wrs: Vec<SendWr> = (0..n).map(mk).collect();
        c.qp.post_send(&mut wrs)?;
    } else {
        for i in 0..n {
            c.qp.post_send_one(mk(i))?;
        }
    }
    Ok(write_syscalls()? - before)
}

/// Counts this process's write(2) calls while `f` runs with strace attached (`strace -c`).
fn strace_writes(f: impl FnOnce() -> Result<()>) -> Result<u64> {
    let pid = std::process::id();
    let out = format!("/tmp/ch11-strace.{pid}");
    let pid_arg = pid.to_string();
    let args = ["-c", "-e", "trace=write", "-o", &out, "-p", &pid_arg];
    // strace's stderr is read as it comes (its stdout has nothing: the summary goes to `out`).
    let strace = duct::cmd("strace", args)
        .stdin_null()
        .stderr_to_stdout()
        .unchecked()
        .reader()
        .or_fail("starting strace (is it installed?)")?;
    let strace = std::sync::Arc::new(strace);
    // strace says "Process N attached" on stderr once it traces us.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = strace.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let mut seen = String::new();
        while let Ok(n) = (&*reader).read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if seen.contains("attached") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(20)).is_err() {
        let _ = strace.kill();
        return Err("strace did not attach within 20s".into());
    }
    let r = f();
    // SIGINT makes strace detach and write its summary.
    let _ = duct::cmd("kill", ["-INT", &strace.pids()[0].to_string()])
        .unchecked()
        .run();
    let start = Instant::now();
    loop {
        if strace.try_wait().or_fail("waiting for strace")?.is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = strace.kill();
            return Err("strace did not exit within 20s of SIGINT".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    r?;
    let summary = std::fs::read_to_string(&out).or_fail_with(|| format!("reading {out}"))?;
    let _ = std::fs::remove_file(&out);
    // "% time  seconds  usecs/call  calls  errors syscall": the calls column of the write row.
    Ok(summary
        .lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.last() == Some(&"write") && w.len() >= 5)
                .then(|| w[3].parse().ok())
                .flatten()
        })
        .unwrap_or(0))
}

pub(super) fn measure(lab: &mut Lab, c: &Conn, plan: &Plan, res: &mut Results) -> Result<bool> {
    let mut ok = true;
    let mut wc = [WorkCompletion::default()];
    println!("section 2: batching, selective signaling, inline data");
    const N: usize = 16;
    println!(
        "  2a: doorbells: {N} RDMA WRITEs of 64 B (write(2) calls from /proc/self/io's syscw, \
         and strace -c)"
    );
    let chained = post_writes(lab, c, N, true)?;
    wait_cq(&c.scq, Wait::Busy, &mut wc)?;
    let separate = post_writes(lab, c, N, false)?;
    wait_cq(&c.scq, Wait::Busy, &mut wc)?;
    let mut traced = [0u64; 2];
    for (i, chain) in [true, false].into_iter().enumerate() {
        traced[i] = strace_writes(|| {
            post_writes(lab, c, N, chain)?;
            Ok(())
        })?;
        wait_cq(&c.scq, Wait::Busy, &mut wc)?;
    }
    println!(
        "    one ibv_post_send with a chain of {N} WRs: {chained} write() calls; strace -c counted {}",
        traced[0]
    );
    println!(
        "    {N} ibv_post_send calls of 1 WR each:     {separate} write() calls; strace -c counted {}",
        traced[1]
    );
    ok &= chained == 1 && separate == N as u64 && traced == [1, N as u64];
    res.doorbells = Doorbells {
        chained,
        separate,
        wrs: N,
    };

    println!(
        "  2b: time per WR against batch size: {} WRITEs of 64 B in batches of B, the last WR of \
         each batch signaled",
        plan.batch_total
    );
    let mut t = Table::new([
        ("batch", Align::Right),
        ("doorbells chained", Align::Right),
        ("doorbells 1 per WR", Align::Right),
        ("time/WR chained", Align::Left),
        ("time/WR 1 call each", Align::Left),
        ("WRs/s chained", Align::Left),
        ("WRs/s 1 call each", Align::Left),
    ])
    .indent(4);
    for &b in &plan.batches {
        let mut rates = [0.0f64; 2];
        let mut bells = [0u64; 2];
        let mut per = [Duration::ZERO; 2];
        for (k, chain) in [true, false].into_iter().enumerate() {
            let t0 = Instant::now();
            for _ in 0..plan.batch_total / b {
                bells[k] += post_writes(lab, c, b, chain)?;
                wait_cq(&c.scq, Wait::Busy, &mut wc)?;
            }
            let d = t0.elapsed();
            per[k] = d / plan.batch_total as u32;
            rates[k] = plan.batch_total as f64 / d.as_secs_f64().max(1e-9);
        }
        t.row([
            b.to_string(),
            bells[0].to_string(),
            bells[1].to_string(),
            show::lat(per[0]).to_string(),
            show::lat(per[1]).to_string(),
            show::ops(plan.batch_total as u64, per[0] * plan.batch_total as u32).to_string(),
            show::ops(plan.batch_total as u64, per[1] * plan.batch_total as u32).to_string(),
        ]);
        ok &= bells == [(plan.batch_total / b) as u64, plan.batch_total as u64];
        res.batch.push(BatchRate {
            size: b,
            chained: rates[0],
            separate: rates[1],
        });
    }
    print!("{t}");

    const SIG_N: usize = 64;
    println!(
        "  2c: selective signaling: {SIG_N} WRITEs of 64 B in one chain, one WR in K signaled"
    );
    let mut t = Table::new([
        ("K", Align::Right),
        ("signaled WRs", Align::Right),
        ("CQEs polled", Align::Right),
        ("time/WR", Align::Left),
    ])
    .indent(4);
    let sge = [lab.mr.sge(0..64)];
    for k in [1usize, 4, 16, 64] {
        let t0 = Instant::now();
        let mut wrs: Vec<SendWr> = (0..SIG_N)
            .map(|i| {
                SendWr::write(i as u64, &sge, c.remote.addr + 64 * i as u64, c.remote.rkey)
                    .signaled((i + 1) % k == 0)
            })
            .collect();
        c.qp.post_send(&mut wrs)?;
        // Poll until the last WR (always signaled) completes; count every CQE on the way.
        let mut cqes = 0usize;
        let mut buf = [WorkCompletion::default(); 16];
        loop {
            let n = c.scq.poll_into(&mut buf)?;
            for w in &buf[..n] {
                w.ok()?;
            }
            cqes += n;
            if buf[..n].iter().any(|w| w.wr_id == SIG_N as u64 - 1) {
                break;
            }
            expect(t0.elapsed() < OP, || {
                format!("K={k}: the last WRITE never completed")
            })?;
        }
        let d = t0.elapsed();
        t.row([
            k.to_string(),
            (SIG_N / k).to_string(),
            cqes.to_string(),
            show::lat(d / SIG_N as u32).to_string(),
        ]);
        ok &= cqes == SIG_N / k;
    }
    print!("{t}");

    let max_inline = c.qp.cap().max_inline_data;
    println!(
        "  2d: inline against an SGE: RDMA WRITE post -> completion (this QP's max_inline_data \
         is {max_inline}, asked {MAX_INLINE})"
    );
    let mut t = lat_table("how");
    for size in [8usize, 64] {
        for inline in [false, true] {
            let (v, cpu) = lab.with_cpu(|lab| {
                let mut v = vec![];
                let sge = [lab.mr.sge(0..size)];
                let isge = [InlineSge::from_mr(&lab.mr, 0..size)];
                for i in 0..plan.small_iters + 5 {
                    let t0 = Instant::now();
                    let wr = if inline {
                        SendWr::write_inline(5, &isge, c.remote.addr, c.remote.rkey)
                    } else {
                        SendWr::write(5, &sge, c.remote.addr, c.remote.rkey)
                    };
                    c.qp.post_send_one(wr)?;
                    wait_cq(&c.scq, Wait::Busy, &mut wc)?;
                    if i >= 5 {
                        v.push(t0.elapsed());
                    }
                }
                Ok(v)
            })?;
            let s = Stats::of_durations(&v).ok_or("no samples")?;
            lat_row(
                &mut t,
                if inline { "inline" } else { "SGE" },
                size,
                &s,
                &cpu,
            );
        }
    }
    print!("{t}");
    Ok(ok)
}
