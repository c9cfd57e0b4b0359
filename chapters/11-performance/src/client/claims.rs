//! Section 6: the tutorials' table, corrected with this run's figures.

use course::show::{self, Align, Table};

use super::{Results, rate};
use crate::MAX_MSG;
use crate::shared::Wait;
use crate::stats::ns;

pub(super) fn print(res: &Results) {
    println!("section 6: what the tutorials claim (vendor hardware figures) against this run");
    let lat = |op: &str, size: usize| res.lat_median(op, size).unwrap_or(0.0);
    let bw = |op: &str| {
        res.bw
            .iter()
            .find(|(o, _)| *o == op)
            .map_or(0.0, |(_, r)| *r)
    };
    let wait = |w: Wait| {
        res.waits
            .iter()
            .find(|(x, _, _)| *x == w)
            .map_or(0.0, |(_, m, _)| *m)
    };
    let div = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let (tcp, send) = (lat("TCP", 8), lat("SEND", 8));
    let mut t = Table::new([
        ("claim (vendor hardware)", Align::Left),
        ("this run", Align::Left),
        ("ratio", Align::Left),
        ("why", Align::Left),
    ])
    .indent(4);
    t.row([
        "RDMA RC 8 B: 0.8-1.5 us".to_string(),
        format!("SEND {}", show::lat(ns(send))),
        format!("ratio={:.0}", div(send, 1_000.0)),
        "emulated CPUs; rxe is software in the kernel".to_string(),
    ]);
    t.row([
        "TCP 8 B: 10-50 us, 10-40x RDMA".to_string(),
        format!("TCP {}", show::lat(ns(tcp))),
        format!("ratio={:.2}", div(send, tcp)),
        "RDMA/TCP here: same kernel path, no NIC offload".to_string(),
    ]);
    t.row([
        "RDMA 100-200 Gbit/s".to_string(),
        format!("WRITE {}", rate(bw("WRITE"))),
        format!("ratio={:.5}", div(bw("WRITE") * 8.0, 150e9)),
        "software ICRC and copies, MTU-sized packets".to_string(),
    ]);
    t.row([
        "TCP 10-40 Gbit/s, below RDMA".to_string(),
        format!("TCP {}", rate(bw("TCP"))),
        format!("ratio={:.2}", div(bw("WRITE"), bw("TCP"))),
        "TCP sends 64 KiB segments (GSO), rxe 1 KiB packets".to_string(),
    ]);
    let write = res.cpu_op.iter().find(|r| r.op == "WRITE");
    t.row([
        "RDMA CPU: very low, target idle".to_string(),
        write.map_or("-".into(), |w| {
            format!("WRITE target node {}/op", show::cpu(ns(w.node_a)))
        }),
        write.map_or("-".into(), |w| {
            format!("ratio={:.2}", div(w.node_a, w.node_b.max(1.0)))
        }),
        "node a's kernel runs the responder".to_string(),
    ]);
    t.row([
        "kernel bypass, zero copy".to_string(),
        format!("{} write() per ibv_post_send", res.doorbells.chained),
        "-".to_string(),
        "rxe's doorbell is a system call; it copies".to_string(),
    ]);
    t.row([
        "batch WRs to cut syscalls".to_string(),
        format!(
            "{} WRs: {} vs {} write()",
            res.doorbells.wrs, res.doorbells.chained, res.doorbells.separate
        ),
        res.batch.last().map_or("-".into(), |b| {
            format!("ratio={:.2}", div(b.chained, b.separate))
        }),
        "true on rxe (syscalls); on hardware a doorbell is an MMIO write".to_string(),
    ]);
    t.row([
        "usleep(10) poll: cheap".to_string(),
        format!("{}", show::lat(ns(wait(Wait::Sleep10)))),
        format!("ratio={:.2}", div(wait(Wait::Sleep10), wait(Wait::Busy))),
        "timer slack and wake-ups; vs busy poll".to_string(),
    ]);
    if let Some((h, n)) = res.huge {
        t.row([
            "huge pages, 64 B alignment help".to_string(),
            format!("1 MiB huge {}", show::lat(ns(h))),
            format!("ratio={:.2}", div(h, n)),
            "rxe copies with the CPU; no IOMMU/NIC TLB".to_string(),
        ]);
    }
    if let [(_, _, p_no), (_, _, p_yes)] = res.affinity[..] {
        t.row([
            "pinning: p99 ms -> 100s of us".to_string(),
            format!("p99 pinned {}", show::lat(ns(p_yes))),
            format!("ratio={:.2}", div(p_yes, p_no)),
            if res.affinity_cpus < 2 {
                "too few vCPUs to separate threads".to_string()
            } else {
                "vCPUs are host threads under TCG, 2 host cores".to_string()
            },
        ]);
    }
    let pk = |m: u32| {
        res.packets
            .iter()
            .find(|(w, _)| w.starts_with(&format!("{MAX_MSG} B, path MTU {m}, 1 SGEs")))
            .map_or(0, |(_, p)| *p)
    };
    t.row([
        "1 MB needs max_send_sge > 1".to_string(),
        format!("1 SGE: sent={} packets", pk(1024)),
        "-".to_string(),
        "packets come from the path MTU".to_string(),
    ]);
    t.row([
        "MTU 4096: no fragmentation".to_string(),
        format!("sent={} vs sent={}", pk(1024), pk(4096)),
        format!(
            "ratio={:.2}",
            match &res.mtu_lat[..] {
                [(_, a), (_, b)] => div(*b, *a),
                _ => 0.0,
            }
        ),
        "packets per message, not fragments".to_string(),
    ]);
    // Asked of the libibverbs this program runs (dlsym), with a verb every rdma-core exports
    // beside it, so an absent answer is the library's and not the lookup's.
    let exports = |sym: &str| match lab::libibverbs_exports(sym) {
        Some(true) => "exported",
        Some(false) => "absent",
        None => "unknown (libibverbs.so.1 did not open)",
    };
    t.row([
        "ibv_flush_cache after post".to_string(),
        format!(
            "dlsym: ibv_flush_cache {}, ibv_modify_qp {}",
            exports("ibv_flush_cache"),
            exports("ibv_modify_qp")
        ),
        "-".to_string(),
        "no such verb: the completion is the ordering point".to_string(),
    ]);
    print!("{t}");
}
