//! Section 3: waiting for a completion: busy polling, completion events, a `usleep(10)` loop.

use std::time::{Duration, Instant};

use course::Outcome as Result;
use course::show::{self};

use super::latency::rdma_lat;
use super::{Lab, Plan, Results, lat_row, lat_table};
use crate::shared::{Conn, Wait};
use crate::stats::{Stats, ns};

pub(super) fn measure(lab: &mut Lab, c: &Conn, plan: &Plan, res: &mut Results) -> Result<()> {
    println!(
        "section 3: waiting for completions: SEND/RECV ping-pong of 8 B, both sides waiting the \
         same way"
    );
    let mut t = lat_table("wait");
    let mut wakeups = vec![];
    for w in Wait::ALL {
        let (v, cpu) =
            lab.with_cpu(|lab| rdma_lat(lab, c, "SEND", 8, (plan.small_iters, 10), w, w))?;
        let s = Stats::of_durations(&v).ok_or("no samples")?;
        lat_row(&mut t, w.name(), 8, &s, &cpu);
        let n = s.n as f64;
        wakeups.push((w, cpu.mine.voluntary_switches as f64 / n));
        res.waits
            .push((w, s.median, cpu.mine.total().as_nanos() as f64 / n));
    }
    print!("{t}");
    for (w, per) in wakeups {
        println!(
            "    {}: switches={per:.1} voluntary context switches per round trip on node b",
            w.name()
        )
    }
    // What usleep(10) really costs: the timer slack (50 us by default) and the wake-up.
    let mut v = vec![];
    for _ in 0..plan.small_iters {
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_micros(10));
        v.push(t0.elapsed());
    }
    let s = Stats::of_durations(&v).ok_or("no samples")?;
    println!(
        "    usleep(10) itself: median {}, p99 {} (asked for 10us)",
        show::lat(ns(s.median)),
        show::lat(ns(s.p99))
    );
    Ok(())
}
