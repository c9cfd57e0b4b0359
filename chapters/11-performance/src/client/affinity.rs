//! Section 5: affinity: one QP and CQ per thread, with and without `sched_setaffinity`.

use std::time::{Duration, Instant};

use course::Outcome as Result;
use course::show::{self, Align, Table};
use lab::{SendWr, WorkCompletion};

use super::{Lab, Plan, Results};
use crate::protocol::Request;
use crate::shared::{Conn, Wait, connect_qp, wait_cq};
use crate::stats::{Stats, ns};

pub(super) fn measure(lab: &mut Lab, plan: &Plan, res: &mut Results) -> Result<()> {
    let cpus = lab::perf::affinity()?;
    const THREADS: usize = 2;
    println!(
        "section 5: affinity: {THREADS} threads, one QP + CQ each, 8-byte WRITEs; node b's CPUs: \
         {cpus:?}"
    );
    let mut t = Table::new([
        ("threads", Align::Right),
        ("pinned", Align::Left),
        ("n", Align::Right),
        ("median", Align::Left),
        ("p99", Align::Left),
        ("stdev", Align::Left),
    ])
    .indent(4);
    for pinned in [false, true] {
        let conns: Vec<Conn> = (0..THREADS)
            .map(|i| connect_qp(lab.ctx, lab.pd, &mut lab.oob, 10 + i as u32, None))
            .collect::<Result<_>>()?;
        let iters = plan.small_iters;
        let mr = &lab.mr;
        let all: Vec<Vec<Duration>> = std::thread::scope(|sc| {
            let hs: Vec<_> = conns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let cpu = cpus[i % cpus.len()];
                    sc.spawn(move || -> std::result::Result<Vec<Duration>, String> {
                        if pinned {
                            lab::perf::set_affinity(cpu).map_err(|e| e.to_string())?;
                        }
                        let sge = [mr.sge(i * 64..i * 64 + 8)];
                        let mut wc = [WorkCompletion::default()];
                        let mut v = vec![];
                        for k in 0..iters + 5 {
                            let t0 = Instant::now();
                            c.qp.post_send_one(SendWr::write(
                                8,
                                &sge,
                                c.remote.addr + 64 * i as u64,
                                c.remote.rkey,
                            ))
                            .map_err(|e| e.report().to_string())?;
                            wait_cq(&c.scq, Wait::Busy, &mut wc).map_err(|e| e.to_string())?;
                            if k >= 5 {
                                v.push(t0.elapsed());
                            }
                        }
                        Ok(v)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().map_err(|_| "a thread panicked".to_string())?)
                .collect::<std::result::Result<Vec<_>, String>>()
        })?;
        let flat: Vec<Duration> = all.into_iter().flatten().collect();
        let s = Stats::of_durations(&flat).ok_or("no samples")?;
        t.row([
            THREADS.to_string(),
            (if pinned { "yes" } else { "no" }).to_string(),
            s.n.to_string(),
            show::lat(ns(s.median)).to_string(),
            show::lat(ns(s.p99)).to_string(),
            show::lat(ns(s.stdev)).to_string(),
        ]);
        res.affinity.push((pinned, s.median, s.p99));
        res.affinity_cpus = cpus.len();
        lab.ask_ok(Request::DropQps)?;
    }
    print!("{t}");
    println!(
        "    with {} vCPU(s), pinning can only {}",
        cpus.len(),
        if cpus.len() < THREADS {
            "put both threads on the one CPU they share anyway"
        } else {
            "keep each thread off the other's CPU; rxe's kernel work still runs on them too"
        }
    );
    Ok(())
}
