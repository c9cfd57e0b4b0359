//! The reference tools, run in the same lab as the chapter's own measurements: qperf,
//! sockperf and perftest. Each has a server half (node a: the chapter's server role starts it
//! when the client asks, and says "ready" once its port listens) and a client half (node b:
//! started here). This file holds what the client needs: the command lines and the parsers of
//! each tool's output.

use std::time::{Duration, Instant};

use course::process::Running;

/// One figure a tool reported: a latency (one-way, in ns) or a rate (bytes per second).
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// What ran, as a short label: `qperf tcp_lat`, `ib_write_lat -I 0`.
    pub what: String,
    pub size: usize,
    /// Median (or the tool's one latency figure), ns, one way.
    pub median_ns: Option<f64>,
    pub p99_ns: Option<f64>,
    pub stdev_ns: Option<f64>,
    /// Bytes per second.
    pub rate: Option<f64>,
}

/// The TCP port a tool's server half listens on (its default), so the server role can tell
/// when it is ready.
pub fn listen_port(tool: &str) -> Option<u16> {
    match tool {
        "qperf" => Some(19765),
        "sockperf" => Some(11111),
        t if t.starts_with("ib_") => Some(18515),
        _ => None,
    }
}

/// Runs a tool's client half with a deadline; its stdout, or what went wrong.
pub fn run_client(argv: &[String], limit: Duration) -> Result<String, String> {
    let mut child = Running::start(duct::cmd(&argv[0], &argv[1..]))
        .map_err(|e| format!("cannot start {}: {e}", argv.join(" ")))?;
    let (code, out, err) = child.finish(Instant::now() + limit);
    if code != 0 {
        return Err(format!(
            "`{}` exited {code}: {}{}",
            argv.join(" "),
            out.lines().rev().take(3).collect::<Vec<_>>().join(" / "),
            err.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
        ));
    }
    Ok(out)
}

/// A number with a unit as qperf prints it ("444 us", "1.2 ms", "952 KB/sec"), in ns or
/// bytes per second. qperf's K, M and G are decimal.
fn qperf_value(v: &str, unit: &str) -> Option<f64> {
    let v: f64 = v.parse().ok()?;
    let f = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "sec" | "s" => 1e9,
        "bytes/sec" => 1.0,
        "KB/sec" => 1e3,
        "MB/sec" => 1e6,
        "GB/sec" => 1e9,
        _ => return None,
    };
    Some(v * f)
}

/// qperf's report: `test:` lines, then `latency = 444 us` or `bw = 952 KB/sec`.
pub fn parse_qperf(out: &str, size: usize) -> Vec<Figure> {
    let mut figs = vec![];
    let mut test = None;
    for line in out.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_suffix(':')
            && !name.contains(' ')
        {
            test = Some(name.to_string());
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        if let (Some(name), [key, "=", v, unit]) = (&test, words.as_slice()) {
            let Some(x) = qperf_value(v, unit) else {
                continue;
            };
            let mut f = Figure {
                what: format!("qperf {name}"),
                size,
                median_ns: None,
                p99_ns: None,
                stdev_ns: None,
                rate: None,
            };
            match *key {
                "latency" => f.median_ns = Some(x),
                "bw" => f.rate = Some(x),
                _ => continue,
            }
            figs.push(f);
        }
    }
    figs
}

/// sockperf's ping-pong summary: `percentile 50.000 = 371.703`, `std-dev=432.226` (usec,
/// one way: sockperf halves the round trip).
pub fn parse_sockperf(out: &str, size: usize) -> Option<Figure> {
    let pct = |p: &str| {
        out.lines().find_map(|l| {
            let (_, rest) = l.split_once(&format!("percentile {p} ="))?;
            rest.trim().parse::<f64>().ok().map(|us| us * 1e3)
        })
    };
    let stdev = out.lines().find_map(|l| {
        let (_, rest) = l.split_once("std-dev=")?;
        let num: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        num.parse::<f64>().ok().map(|us| us * 1e3)
    });
    Some(Figure {
        what: "sockperf ping-pong (TCP)".into(),
        size,
        median_ns: Some(pct("50.000")?),
        p99_ns: pct("99.000"),
        stdev_ns: stdev,
        rate: None,
    })
}

/// perftest's latency line: `#bytes #iterations t_min t_max t_typical t_avg t_stdev 99%
/// 99.9%` (usec). One way for `ib_send_lat` and `ib_write_lat`, the whole round trip for
/// `ib_read_lat` and `ib_atomic_lat`: `print_report_lat` (src/perftest_parameters.c) divides
/// by `rtt_factor`, 1 for READ and ATOMIC, 2 otherwise.
pub fn parse_perftest_lat(out: &str, what: &str, size: usize) -> Option<Figure> {
    out.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() < 9 || w[0] != size.to_string() {
            return None;
        }
        let us = |i: usize| w[i].parse::<f64>().ok().map(|v| v * 1e3);
        Some(Figure {
            what: what.into(),
            size,
            median_ns: Some(us(4)?),
            p99_ns: us(7),
            stdev_ns: us(6),
            rate: None,
        })
    })
}

/// perftest's bandwidth line: `#bytes #iterations BW peak BW average MsgRate` (MB/sec, which
/// perftest counts in units of 2^20 bytes).
pub fn parse_perftest_bw(out: &str, what: &str, size: usize) -> Option<Figure> {
    out.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() < 5 || w[0] != size.to_string() {
            return None;
        }
        let avg: f64 = w[3].parse().ok()?;
        Some(Figure {
            what: what.into(),
            size,
            median_ns: None,
            p99_ns: None,
            stdev_ns: None,
            rate: Some(avg * 1_048_576.0),
        })
    })
}

/// The "cpu MHz" of `/proc/cpuinfo` (the first CPU's), what perftest turns cycles into time
/// with.
pub fn cpuinfo_mhz() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    s.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "cpu MHz")
            .then(|| v.trim().parse().ok())
            .flatten()
    })
}

/// Whether something listens on TCP `port` (IPv4 or IPv6), from `/proc/net/tcp{,6}`.
pub fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|p| {
        std::fs::read_to_string(p).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3 && w[1].ends_with(&want) && w[3] == "0A"
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qperf_report() {
        let out = "tcp_lat:\n    latency   =  444 us\n    msg_size  =    8 bytes\nrc_bw:\n    \
                   bw        =  88.5 KB/sec\n    msg_size  =     8 bytes\n";
        let f = parse_qperf(out, 8);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].what, "qperf tcp_lat");
        assert_eq!(f[0].median_ns, Some(444_000.0));
        assert_eq!(f[1].rate, Some(88_500.0));
    }

    #[test]
    fn sockperf_report() {
        let out = "sockperf: ====> avg-latency=504.204 (std-dev=432.226)\n\
                   sockperf: ---> percentile 99.000 = 2578.670\n\
                   sockperf: ---> percentile 50.000 =  371.703\n";
        let f = parse_sockperf(out, 14).unwrap();
        assert!((f.median_ns.unwrap() - 371_703.0).abs() < 1e-3);
        assert!((f.p99_ns.unwrap() - 2_578_670.0).abs() < 1e-3);
        assert!((f.stdev_ns.unwrap() - 432_226.0).abs() < 1e-6);
    }

    #[test]
    fn perftest_reports() {
        let lat = " 8       200          296.81         4334.10      444.22   \t       1033.06     \
                   \t1015.76\t\t4159.60 \t\t4334.10\n";
        let f = parse_perftest_lat(lat, "ib_write_lat", 8).unwrap();
        assert!((f.median_ns.unwrap() - 444_220.0).abs() < 1e-3);
        assert!((f.p99_ns.unwrap() - 4_159_600.0).abs() < 1e-3);
        let bw = " 65536      200              20.29              16.93  \t\t   0.000271\n";
        let f = parse_perftest_bw(bw, "ib_write_bw", 65536).unwrap();
        assert!((f.rate.unwrap() - 16.93 * 1_048_576.0).abs() < 1e-3);
        assert_eq!(parse_perftest_lat("garbage", "x", 8), None);
    }
}
