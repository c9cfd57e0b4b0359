//! `course::show`: every labelled form, its exact text, and that the redaction table of
//! docs/conventions.md §1 recognises it.
//!
//! `redacted` below mirrors the harness's table (harness/src/redact.rs) for the forms this
//! module prints; if the two ever disagree, docs/conventions.md is the contract.

use course::show::{self, Align, Side, Table};
use regex::Regex;
use rstest::rstest;
use std::time::Duration;

/// A number-like value with an optional unit, as the harness matches it.
const VALUE: &str = r"[0-9][0-9.]*(?:[eE][+-]?[0-9]+)?[A-Za-zµ/]*";

/// Replaces every redactable form in `s` by its placeholder (without numbering).
fn redacted(s: &str) -> String {
    let rules: Vec<(String, &str)> = vec![
        (
            r"(\d+ bytes in )[0-9.]+( seconds = )[0-9.]+( Mbit/sec)".into(),
            "${1}[ELAPSED]${2}[RATE]${3}",
        ),
        (
            r"(\d+ iters in )[0-9.]+( seconds = )[0-9.]+( usec/iter)".into(),
            "${1}[ELAPSED]${2}[LAT]${3}",
        ),
        (r"\b(qpn=|QPN )0x[0-9a-f]{6}\b".into(), "${1}[QPN]"),
        (r"\b(psn=|PSN )0x[0-9a-f]{6}\b".into(), "${1}[PSN]"),
        (r"\blkey=0x[0-9a-f]{8}\b".into(), "lkey=[LKEY]"),
        (r"\brkey=0x[0-9a-f]{8}\b".into(), "rkey=[RKEY]"),
        (r"\baddr=0x[0-9a-f]{16}\b".into(), "addr=[ADDR]"),
        (format!(r"\belapsed={VALUE}"), "elapsed=[ELAPSED]"),
        (format!(r"\bcpu={VALUE}"), "cpu=[CPU]"),
        (format!(r"\blat={VALUE}"), "lat=[LAT]"),
        (format!(r"\brate={VALUE}"), "rate=[RATE]"),
        (format!(r"\bops={VALUE}"), "ops=[RATE]"),
        (r"\bpid=[0-9]+".into(), "pid=[PID]"),
        (
            r"::ffff:[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\b".into(),
            "[GID]",
        ),
    ];
    let mut out = s.to_string();
    for (re, rep) in rules {
        out = Regex::new(&re).unwrap().replace_all(&out, rep).into_owned();
    }
    out
}

const LOOPBACK_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 1];

#[rstest]
#[case::qpn(show::qpn(0x1a).to_string(), "qpn=0x00001a", "qpn=[QPN]")]
#[case::qpn_max(show::qpn(0xff_ffff).to_string(), "qpn=0xffffff", "qpn=[QPN]")]
#[case::qpn_upper(show::qpn_upper(0x11).to_string(), "QPN 0x000011", "QPN [QPN]")]
#[case::psn(show::psn(0x1b2c3d).to_string(), "psn=0x1b2c3d", "psn=[PSN]")]
#[case::psn_zero(show::psn(0).to_string(), "psn=0x000000", "psn=[PSN]")]
#[case::psn_upper(show::psn_upper(0x1b2c3d).to_string(), "PSN 0x1b2c3d", "PSN [PSN]")]
#[case::lkey(show::lkey(0x120a).to_string(), "lkey=0x0000120a", "lkey=[LKEY]")]
#[case::rkey(show::rkey(0xdead_beef).to_string(), "rkey=0xdeadbeef", "rkey=[RKEY]")]
#[case::addr(
    show::addr(0x7f12_aabb_0000).to_string(),
    "addr=0x00007f12aabb0000",
    "addr=[ADDR]"
)]
#[case::addr_max(show::addr(u64::MAX).to_string(), "addr=0xffffffffffffffff", "addr=[ADDR]")]
#[case::pid(show::pid(1234).to_string(), "pid=1234", "pid=[PID]")]
#[case::elapsed_ns(show::elapsed(Duration::from_nanos(850)).to_string(), "elapsed=850ns", "elapsed=[ELAPSED]")]
#[case::elapsed_zero(show::elapsed(Duration::ZERO).to_string(), "elapsed=0ns", "elapsed=[ELAPSED]")]
#[case::elapsed_us(show::elapsed(Duration::from_nanos(12_345)).to_string(), "elapsed=12.345us", "elapsed=[ELAPSED]")]
#[case::elapsed_ms(show::elapsed(Duration::from_micros(1234)).to_string(), "elapsed=1.234ms", "elapsed=[ELAPSED]")]
#[case::elapsed_s(show::elapsed(Duration::from_millis(2500)).to_string(), "elapsed=2.500s", "elapsed=[ELAPSED]")]
#[case::elapsed_long(show::elapsed(Duration::from_secs(5000)).to_string(), "elapsed=5000.000s", "elapsed=[ELAPSED]")]
#[case::elapsed_rounds_up_a_unit(
    show::elapsed(Duration::from_nanos(999_999_600)).to_string(),
    "elapsed=1.000s",
    "elapsed=[ELAPSED]"
)]
#[case::elapsed_us_boundary(show::elapsed(Duration::from_nanos(1000)).to_string(), "elapsed=1.000us", "elapsed=[ELAPSED]")]
#[case::cpu(show::cpu(Duration::from_micros(345)).to_string(), "cpu=345.000us", "cpu=[CPU]")]
#[case::lat(show::lat(Duration::from_nanos(12_300)).to_string(), "lat=12.300us", "lat=[LAT]")]
#[case::rate_mb(
    show::rate_bytes(12_340_000, Duration::from_secs(1)).to_string(),
    "rate=12.34MB/s",
    "rate=[RATE]"
)]
#[case::rate_b(show::rate_bytes(5, Duration::from_secs(1)).to_string(), "rate=5.00B/s", "rate=[RATE]")]
#[case::rate_kb(show::rate_bytes(1500, Duration::from_secs(1)).to_string(), "rate=1.50KB/s", "rate=[RATE]")]
#[case::rate_gb(show::rate_bytes(3_000_000_000, Duration::from_millis(500)).to_string(), "rate=6.00GB/s", "rate=[RATE]")]
#[case::rate_zero_time(show::rate_bytes(0, Duration::ZERO).to_string(), "rate=0.00B/s", "rate=[RATE]")]
#[case::ops(show::ops(1234, Duration::from_secs(1)).to_string(), "ops=1234/s", "ops=[RATE]")]
#[case::ops_slow(show::ops(1, Duration::from_secs(2)).to_string(), "ops=0.50/s", "ops=[RATE]")]
#[case::ops_zero_time(show::ops(10, Duration::ZERO).to_string(), "ops=10000000000/s", "ops=[RATE]")]
#[case::gid(show::gid(&LOOPBACK_GID).to_string(), "gid=::ffff:10.99.0.1", "gid=[GID]")]
#[case::gid_bare(show::gid_bare(&LOOPBACK_GID).to_string(), "::ffff:10.99.0.1", "[GID]")]
#[case::mtu(show::mtu(1024).to_string(), "mtu=1024", "mtu=1024")]
#[case::errno(show::errno(22).to_string(), "EINVAL (22)", "EINVAL (22)")]
#[case::pingpong_bw(
    show::pingpong_bandwidth(8_192_000, Duration::from_millis(250)).to_string(),
    "8192000 bytes in 0.25 seconds = 262.14 Mbit/sec",
    "8192000 bytes in [ELAPSED] seconds = [RATE] Mbit/sec"
)]
#[case::pingpong_lat(
    show::pingpong_latency(1000, Duration::from_millis(250)).to_string(),
    "1000 iters in 0.25 seconds = 250.00 usec/iter",
    "1000 iters in [ELAPSED] seconds = [LAT] usec/iter"
)]
#[case::pingpong_local(
    show::pingpong_address(Side::Local, 0, 0x11, 0x1b2c3d, &LOOPBACK_GID).to_string(),
    "  local address:  LID 0x0000, QPN 0x000011, PSN 0x1b2c3d, GID ::ffff:10.99.0.1",
    "  local address:  LID 0x0000, QPN [QPN], PSN [PSN], GID [GID]"
)]
#[case::pingpong_remote(
    show::pingpong_address(Side::Remote, 0x12, 0xabcdef, 0x000001, &[0; 16]).to_string(),
    "  remote address: LID 0x0012, QPN 0xabcdef, PSN 0x000001, GID ::",
    "  remote address: LID 0x0012, QPN [QPN], PSN [PSN], GID ::"
)]
fn form(#[case] shown: String, #[case] want: &str, #[case] want_redacted: &str) {
    assert_eq!(shown, want);
    assert_eq!(redacted(&shown), want_redacted);
}

/// Forms side by side on one line, as chapters print them, all redact independently.
#[test]
fn forms_compose_on_one_line() {
    let line = format!(
        "step 4: remote {} {} {} {} {} {}",
        show::qpn(0x11),
        show::psn(0x42),
        show::gid(&LOOPBACK_GID),
        show::addr(0x1000),
        show::rkey(7),
        show::elapsed(Duration::from_micros(3)),
    );
    assert_eq!(
        line,
        "step 4: remote qpn=0x000011 psn=0x000042 gid=::ffff:10.99.0.1 \
         addr=0x0000000000001000 rkey=0x00000007 elapsed=3.000us"
    );
    assert_eq!(
        redacted(&line),
        "step 4: remote qpn=[QPN] psn=[PSN] gid=[GID] addr=[ADDR] rkey=[RKEY] \
         elapsed=[ELAPSED]"
    );
}

/// Every duration, from 0 to centuries, prints in a redactable form with a known unit and
/// at most 3 decimals.
#[test]
fn every_duration_is_redactable() {
    let re = Regex::new(r"^elapsed=(?:[0-9]+ns|[0-9]+\.[0-9]{3}(?:us|ms|s))$").unwrap();
    let mut ns: u64 = 0;
    while ns < u64::MAX / 3 {
        for d in [ns, ns + 1, ns.saturating_mul(999) / 1000] {
            let s = show::elapsed(Duration::from_nanos(d)).to_string();
            assert!(re.is_match(&s), "{s}");
            assert_eq!(redacted(&s), "elapsed=[ELAPSED]");
        }
        ns = ns * 3 + 1;
    }
    let s = show::elapsed(Duration::MAX).to_string();
    assert!(re.is_match(&s), "{s}");
}

/// The GID text is glibc's `inet_ntop(AF_INET6, ...)`, which is what `ibv_rc_pingpong`
/// prints.
#[rstest]
#[case::zero([0; 16], "::")]
#[case::loopback_v6([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], "::1")]
#[case::v4_mapped(LOOPBACK_GID, "::ffff:10.99.0.1")]
#[case::pair_b([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 2], "::ffff:10.77.0.2")]
#[case::link_local(
    [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0, 0, 0x01],
    "fe80::5054:ff:fe00:1"
)]
#[case::v4_compatible([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 99, 0, 1], "::10.99.0.1")]
#[case::no_single_zero_compression(
    [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1],
    "2001:db8:0:1:1:1:1:1"
)]
#[case::first_longest_run(
    [0x20, 0x01, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1],
    "2001::1:0:0:1:1"
)]
fn gid_text_matches_inet_ntop(#[case] raw: [u8; 16], #[case] want: &str) {
    assert_eq!(show::gid_bare(&raw).to_string(), want);
    assert_eq!(show::gid(&raw).to_string(), format!("gid={want}"));
}

#[rstest]
#[case(1, "EPERM (1)")]
#[case(2, "ENOENT (2)")]
#[case(11, "EAGAIN (11)")]
#[case(12, "ENOMEM (12)")]
#[case(13, "EACCES (13)")]
#[case(14, "EFAULT (14)")]
#[case(16, "EBUSY (16)")]
#[case(22, "EINVAL (22)")]
#[case(38, "ENOSYS (38)")]
#[case(95, "EOPNOTSUPP (95)")]
#[case(110, "ETIMEDOUT (110)")]
#[case(111, "ECONNREFUSED (111)")]
#[case(0, "errno 0")]
#[case(4095, "errno 4095")]
#[case(-22, "errno -22")]
fn errno_names(#[case] errno: i32, #[case] want: &str) {
    assert_eq!(show::errno(errno).to_string(), want);
}

#[test]
fn errno_names_match_the_c_library() {
    for (n, name) in [
        (libc::EINVAL, "EINVAL"),
        (libc::ENOMEM, "ENOMEM"),
        (libc::EWOULDBLOCK, "EAGAIN"),
        (libc::ENOTSUP, "EOPNOTSUPP"),
        (libc::ECONNRESET, "ECONNRESET"),
    ] {
        assert_eq!(show::errno_name(n), Some(name));
    }
    // Every named errno is unique.
    let mut names: Vec<&str> = (0..200).filter_map(show::errno_name).collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n);
    assert!(n >= 60, "only {n} names");
}

/// The pingpong figures use the C tool's arithmetic: Mbit/sec = bytes * 8 / usec and
/// usec/iter = usec / iters, with `%.2f`.
#[test]
fn pingpong_figures() {
    assert_eq!(
        show::pingpong_bandwidth(4096 * 1000 * 2, Duration::from_micros(281_000)).to_string(),
        "8192000 bytes in 0.28 seconds = 233.22 Mbit/sec"
    );
    assert_eq!(
        show::pingpong_latency(1000, Duration::from_micros(281_000)).to_string(),
        "1000 iters in 0.28 seconds = 281.00 usec/iter"
    );
    // Degenerate inputs still print numbers (no inf/NaN), in the redactable form.
    for s in [
        show::pingpong_bandwidth(0, Duration::ZERO).to_string(),
        show::pingpong_bandwidth(10, Duration::ZERO).to_string(),
        show::pingpong_latency(0, Duration::ZERO).to_string(),
    ] {
        assert!(!s.contains("inf") && !s.contains("NaN"), "{s}");
        assert!(redacted(&s).contains("[ELAPSED]"), "{s}");
    }
}

#[test]
fn table_aligns_columns() {
    let mut t = Table::new([
        ("index", Align::Right),
        ("type", Align::Left),
        ("gid", Align::Left),
    ])
    .indent(2);
    t.row(["0", "RoCE v1", "fe80::5054:ff:fe00:1"]);
    t.row(["1", "RoCE v2", "::ffff:10.99.0.1"]);
    t.row(["12", "RoCE v2"]);
    assert_eq!(t.len(), 3);
    assert!(!t.is_empty());
    assert_eq!(
        t.to_string(),
        "  index  type     gid\n\
         \x20     0  RoCE v1  fe80::5054:ff:fe00:1\n\
         \x20     1  RoCE v2  ::ffff:10.99.0.1\n\
         \x20    12  RoCE v2\n"
    );
}

#[test]
fn table_cells_keep_redactable_forms() {
    let mut t = Table::new([("qp", Align::Left), ("time", Align::Left)]);
    t.row([
        show::qpn(0x11).to_string(),
        show::elapsed(Duration::from_micros(5)).to_string(),
    ]);
    let mut extra = Table::new([("a", Align::Left)]);
    extra.row(["x", "extra", "cells"]);
    assert_eq!(extra.to_string(), "a\nx  extra  cells\n");
    assert_eq!(
        redacted(&t.to_string()),
        "qp            time\nqpn=[QPN]  elapsed=[ELAPSED]\n"
    );
    assert!(Table::new(Vec::<(String, Align)>::new()).is_empty());
    assert_eq!(Table::new(Vec::<(String, Align)>::new()).to_string(), "\n");
}

/// The real redaction table (the harness's) turns every form this module prints into its
/// placeholder, with one numbering across `qpn=` and `QPN ` (docs/conventions.md §1).
#[test]
fn the_harness_redacts_every_form() {
    let ms = Duration::from_micros(1234);
    let text = [
        format!("server: local {} {}", show::qpn(0x11), show::psn(0x1b2c3d)),
        show::pingpong_address(Side::Local, 0, 0x11, 0x1b2c3d, &LOOPBACK_GID).to_string(),
        show::pingpong_address(Side::Remote, 0, 0x12, 0x000001, &LOOPBACK_GID).to_string(),
        format!(
            "client: remote {} {}",
            show::qpn(0x11),
            show::qpn_upper(0x12)
        ),
        format!(
            "{} {} {} {}",
            show::lkey(0x120a),
            show::rkey(0x120b),
            show::addr(0x7f12_aabb_0000),
            show::gid(&LOOPBACK_GID)
        ),
        format!(
            "{} {} {} {} {} {}",
            show::elapsed(ms),
            show::cpu(Duration::from_nanos(850)),
            show::lat(Duration::from_secs(2)),
            show::rate_bytes(12_340_000, ms),
            show::ops(1234, ms),
            show::pid(4321)
        ),
        show::pingpong_bandwidth(8_192_000, ms).to_string(),
        show::pingpong_latency(1000, ms).to_string(),
        format!("{} {}", show::errno(22), show::mtu(1024)),
    ]
    .join("\n");
    assert_eq!(
        harness::testing::redact(&text),
        "server: local qpn=[QPN#1] psn=[PSN#1]\n\
         \x20 local address:  LID 0x0000, QPN [QPN#1], PSN [PSN#1], GID [GID#1]\n\
         \x20 remote address: LID 0x0000, QPN [QPN#2], PSN [PSN#2], GID [GID#1]\n\
         client: remote qpn=[QPN#1] QPN [QPN#2]\n\
         lkey=[LKEY#1] rkey=[RKEY#1] addr=[ADDR#1] gid=[GID#1]\n\
         elapsed=[ELAPSED] cpu=[CPU] lat=[LAT] rate=[RATE] ops=[RATE] pid=[PID]\n\
         8192000 bytes in [ELAPSED] seconds = [RATE] Mbit/sec\n\
         1000 iters in [ELAPSED] seconds = [LAT] usec/iter\n\
         EINVAL (22) mtu=1024"
    );
}
