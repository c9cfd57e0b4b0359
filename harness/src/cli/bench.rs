//! `bench` (hidden): boot and exec latency, QEMU's CPU time and memory, for the README.

use crate::conn::Cmd;
use crate::proto::ExitStatus;
use crate::testbed::Testbed;
use crate::vm_options::VmOptions;
use crate::{Node, vm};
use anyhow::{Result, bail};

use super::TopoArg;
use std::time::{Duration, Instant};

pub(super) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub(super) fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// CPU seconds (user + system) a process has used.
pub(super) fn cpu_secs(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields after the command: state=0 ... utime=11 stime=12 (clock ticks, 100 per second).
    (ticks(11) + ticks(12)) / 100.0
}

pub(super) fn bench(runs: usize, t: TopoArg) -> Result<i32> {
    let t = match t {
        TopoArg::One(t) => t,
        TopoArg::All => bail!("pick one topology"),
    };
    let opts = VmOptions::from_env()?;
    // Build caches first (initramfs, vmlinux, accel probe) so runs measure boots only.
    let plan = vm::plan(t, &opts)?;
    println!(
        "kernel {}  image {}  accel {}",
        plan.kernel.version,
        plan.image.display(),
        plan.accel.name()
    );
    let mut boots = vec![];
    let mut ups = vec![];
    let mut ibvs = vec![];
    let mut execs = vec![];
    let mut cpus = vec![];
    for i in 0..runs {
        let t0 = Instant::now();
        let lab = Testbed::boot(t, &opts)?;
        let up = t0.elapsed().as_secs_f64();
        let out = lab.run(Node::A, &Cmd::new(["true"]), Duration::from_secs(30))?;
        let boot = t0.elapsed().as_secs_f64();
        // The first verbs program: ibv_devices and its libraries paged in over 9p.
        let t1 = Instant::now();
        let dev = lab.run(Node::A, &Cmd::new(["ibv_devices"]), Duration::from_secs(60))?;
        let first_ibv = t1.elapsed().as_secs_f64();
        if dev.status != ExitStatus::Code(0)
            || !String::from_utf8_lossy(&dev.stdout).contains("rxe")
        {
            bail!("`ibv_devices` in the lab: {:?}", dev.status);
        }
        let cpu: f64 = lab.vm_pids().iter().map(|p| cpu_secs(*p)).sum();
        if out.status != ExitStatus::Code(0) {
            bail!("`true` failed in the lab: {:?}", out.status);
        }
        let mut lat = vec![];
        for _ in 0..10 {
            let t1 = Instant::now();
            lab.run(Node::A, &Cmd::new(["true"]), Duration::from_secs(30))?;
            lat.push(t1.elapsed().as_secs_f64() * 1000.0);
        }
        let exec_ms = median(&mut lat);
        let rss: Vec<String> = lab
            .vm_pids()
            .iter()
            .map(|p| format!("{:.0}", rss_mb(*p)))
            .collect();
        println!(
            "run {}: up {up:.2} s, boot to first command {boot:.2} s (qemu CPU {cpu:.1} s), first `ibv_devices` {first_ibv:.2} s, exec `true` median {exec_ms:.0} ms, qemu RSS MiB {}; {}",
            i + 1,
            rss.join("+"),
            lab.origin
        );
        cpus.push(cpu);
        ups.push(up);
        ibvs.push(first_ibv);
        boots.push(boot);
        execs.push(exec_ms);
    }
    println!(
        "median over {runs}: up {:.2} s, boot to first command {:.2} s (qemu CPU {:.1} s), first `ibv_devices` {:.2} s, exec {:.0} ms",
        median(&mut ups),
        median(&mut boots),
        median(&mut cpus),
        median(&mut ibvs),
        median(&mut execs)
    );
    Ok(0)
}
