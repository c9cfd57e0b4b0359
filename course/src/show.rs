//! `course::show`: the one place that formats identifiers and figures for output.
//!
//! Every chapter prints QP numbers, PSNs, keys, addresses, GIDs, timings and rates through
//! this module, in the fixed labelled forms of `docs/conventions.md` §1. Each form is a row of
//! one table, `contracts::labels` (label, format, placeholder), from which the harness builds
//! its redaction too (`qpn=0x00001a` becomes `qpn=[QPN#1]`, `elapsed=1.234ms` becomes
//! `elapsed=[ELAPSED]`, ...). A value printed any other way would leak into a snapshot and make
//! it churn; a new form is a new row there and a function here.
//!
//! Each function returns a small value that implements [`Display`](fmt::Display), so it
//! composes with `println!` without allocating:
//!
//! ```
//! use course::show;
//! use std::time::Duration;
//!
//! let line = format!("local {} {} {}", show::qpn(0x1a), show::psn(0x1b2c3d), show::rkey(0x120a));
//! assert_eq!(line, "local qpn=0x00001a psn=0x1b2c3d rkey=0x0000120a");
//! assert_eq!(show::elapsed(Duration::from_micros(1234)).to_string(), "elapsed=1.234ms");
//! assert_eq!(show::errno(22).to_string(), "EINVAL (22)");
//! ```
//!
//! The `pingpong_*` functions print the exact lines of rdma-core's `ibv_rc_pingpong`, so
//! chapter 06's output can be compared with the C tool's line by line.

use std::fmt;
use std::time::Duration;

use contracts::labels::{self, Label};

// ---------------------------------------------------------------------------------------------
// Identifiers: fixed-width lowercase hex with a label, each a row of the labelled-output table
// (`contracts::labels`), which the harness's redaction reads too.
// ---------------------------------------------------------------------------------------------

/// A labelled hexadecimal identifier such as `qpn=0x00001a` or `QPN 0x00001a`.
pub use contracts::labels::Hexed as Labelled;

/// A QP number: `qpn=0x00001a` (6 hex digits; QPNs are 24 bits).
pub const fn qpn(qpn: u32) -> Labelled {
    labels::QPN.hex(qpn as u64)
}

/// A QP number in `ibv_rc_pingpong`'s style: `QPN 0x00001a`.
pub const fn qpn_upper(qpn: u32) -> Labelled {
    labels::QPN_UPPER.hex(qpn as u64)
}

/// A packet sequence number: `psn=0x1b2c3d` (6 hex digits; PSNs are 24 bits).
pub const fn psn(psn: u32) -> Labelled {
    labels::PSN.hex(psn as u64)
}

/// A PSN in `ibv_rc_pingpong`'s style: `PSN 0x1b2c3d`.
pub const fn psn_upper(psn: u32) -> Labelled {
    labels::PSN_UPPER.hex(psn as u64)
}

/// A local key (`ibv_mr.lkey`): `lkey=0x0000120a` (8 hex digits).
pub const fn lkey(lkey: u32) -> Labelled {
    labels::LKEY.hex(lkey as u64)
}

/// A remote key (`ibv_mr.rkey`, or a memory window's rkey): `rkey=0x0000120a`.
pub const fn rkey(rkey: u32) -> Labelled {
    labels::RKEY.hex(rkey as u64)
}

/// A virtual address: `addr=0x00007f12aabb0000` (16 hex digits).
pub const fn addr(addr: u64) -> Labelled {
    labels::ADDR.hex(addr)
}

// ---------------------------------------------------------------------------------------------
// GIDs
// ---------------------------------------------------------------------------------------------

/// A GID in IPv6 text form, as `inet_ntop(AF_INET6, ...)` prints it (which is what
/// `ibv_rc_pingpong` and `ibv_devinfo -v` show, and what [`crate::Gid`] prints).
pub use contracts::labels::GidText;

/// A GID with its label: `gid=::ffff:10.99.0.1`.
pub const fn gid(gid: &[u8; 16]) -> GidText {
    GidText::labelled(gid)
}

/// A GID without a label, for sentences and tables: `::ffff:10.99.0.1`.
pub const fn gid_bare(gid: &[u8; 16]) -> GidText {
    GidText::bare(gid)
}

// ---------------------------------------------------------------------------------------------
// Timings, rates, counts
// ---------------------------------------------------------------------------------------------

/// A duration with a label and a unit chosen for it: `elapsed=1.234ms`.
///
/// Below one microsecond it prints whole nanoseconds (`850ns`); otherwise three decimals in
/// `us`, `ms` or `s`, whichever keeps the number below 1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    label: Option<&'static Label>,
    d: Duration,
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(l) = self.label {
            f.write_str(l.text)?;
        }
        write_duration(f, self.d)
    }
}

fn write_duration(f: &mut fmt::Formatter<'_>, d: Duration) -> fmt::Result {
    let ns = d.as_nanos();
    if ns < 1_000 {
        return write!(f, "{ns}ns");
    }
    // Pick the unit after rounding to 3 decimals, so 999.9996us prints as 1.000ms.
    let nsf = ns as f64;
    let below_1000 = |v: f64| (v * 1000.0).round() / 1000.0 < 1000.0;
    let (v, unit) = if below_1000(nsf / 1e3) {
        (nsf / 1e3, "us")
    } else if below_1000(nsf / 1e6) {
        (nsf / 1e6, "ms")
    } else {
        (nsf / 1e9, "s")
    };
    write!(f, "{v:.3}{unit}")
}

/// Wall-clock time of a step: `elapsed=1.234ms`.
pub const fn elapsed(d: Duration) -> Timing {
    Timing {
        label: Some(&labels::ELAPSED),
        d,
    }
}

/// CPU time a process or step used: `cpu=0.345ms`.
pub const fn cpu(d: Duration) -> Timing {
    Timing {
        label: Some(&labels::CPU),
        d,
    }
}

/// A latency (one operation, a median, a p99): `lat=12.300us`.
pub const fn lat(d: Duration) -> Timing {
    Timing {
        label: Some(&labels::LAT),
        d,
    }
}

/// A duration with no label, e.g. for a table cell: `1.234ms`.
///
/// Careful: the harness redacts only labelled timings; use this only where the value is
/// not part of a snapshot, or label it yourself with a form the redaction table knows.
pub const fn duration_bare(d: Duration) -> Timing {
    Timing { label: None, d }
}

/// A byte rate: `rate=12.34MB/s` (decimal units: `B/s`, `KB/s`, `MB/s`, `GB/s`, 1 KB = 1000 B).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    per_sec: f64,
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [("B/s", 1.0), ("KB/s", 1e3), ("MB/s", 1e6), ("GB/s", 1e9)];
        let mut pick = units[0];
        for u in units {
            if self.per_sec >= u.1 {
                pick = u;
            }
        }
        write!(
            f,
            "{}{:.2}{}",
            labels::RATE.text,
            self.per_sec / pick.1,
            pick.0
        )
    }
}

/// Seconds as f64, never zero (a zero duration would make a rate infinite).
fn secs_nonzero(d: Duration) -> f64 {
    d.as_secs_f64().max(1e-9)
}

/// Bytes moved in a duration, as a rate: `rate=12.34MB/s`.
pub fn rate_bytes(bytes: u64, d: Duration) -> Rate {
    Rate {
        per_sec: bytes as f64 / secs_nonzero(d),
    }
}

/// An operation rate: `ops=1234/s` (whole numbers from 100/s up, two decimals below).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ops {
    per_sec: f64,
}

impl fmt::Display for Ops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.per_sec >= 100.0 {
            write!(f, "{}{:.0}/s", labels::OPS.text, self.per_sec)
        } else {
            write!(f, "{}{:.2}/s", labels::OPS.text, self.per_sec)
        }
    }
}

/// Operations completed in a duration, as a rate: `ops=1234/s`.
pub fn ops(count: u64, d: Duration) -> Ops {
    Ops {
        per_sec: count as f64 / secs_nonzero(d),
    }
}

/// A process id: `pid=1234`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pid(u32);

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", labels::PID.text, self.0)
    }
}

/// A process id: `pid=1234`.
pub const fn pid(pid: u32) -> Pid {
    Pid(pid)
}

/// A path MTU or port MTU in bytes: `mtu=1024`. Not redacted (it is part of what a chapter
/// teaches, and stable on the lab's network).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtuBytes(u32);

impl fmt::Display for MtuBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", labels::MTU.text, self.0)
    }
}

/// A path MTU or port MTU in bytes: `mtu=1024`.
pub const fn mtu(bytes: u32) -> MtuBytes {
    MtuBytes(bytes)
}

// ---------------------------------------------------------------------------------------------
// errno
// ---------------------------------------------------------------------------------------------

/// The workspace's one errno type and name table (`contracts::verbs::errno`), which
/// [`crate::Errno`] is too.
pub use contracts::verbs::{Errno, errno_name};

/// An errno as its symbolic name and number: `EINVAL (22)` (`errno 123` for a number the
/// table does not know). Not redacted: the errno is what a failure-mode chapter shows.
pub const fn errno(errno: i32) -> Errno {
    Errno(errno)
}

// ---------------------------------------------------------------------------------------------
// ibv_rc_pingpong's lines
// ---------------------------------------------------------------------------------------------

/// Which end an `ibv_rc_pingpong` address line describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `  local address:  LID ...` (two spaces after the colon, as the C tool prints it).
    Local,
    /// `  remote address: LID ...`.
    Remote,
}

/// `ibv_rc_pingpong`'s address line (see [`pingpong_address`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingpongAddress {
    side: Side,
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: [u8; 16],
}

impl fmt::Display for PingpongAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = match self.side {
            Side::Local => "  local address:  ",
            Side::Remote => "  remote address: ",
        };
        // The C tool: "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n"
        // with the GID from inet_ntop(AF_INET6, ...).
        write!(
            f,
            "{head}LID 0x{:04x}, {}, {}, GID {}",
            self.lid,
            qpn_upper(self.qpn),
            psn_upper(self.psn),
            gid_bare(&self.gid)
        )
    }
}

/// The address line `ibv_rc_pingpong` prints for each end, without the trailing newline:
/// `  local address:  LID 0x0000, QPN 0x000011, PSN 0x1b2c3d, GID ::ffff:10.99.0.1`.
pub const fn pingpong_address(
    side: Side,
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: &[u8; 16],
) -> PingpongAddress {
    PingpongAddress {
        side,
        lid,
        qpn,
        psn,
        gid: *gid,
    }
}

/// `ibv_rc_pingpong`'s throughput line (see [`pingpong_bandwidth`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingpongBandwidth {
    bytes: u64,
    usec: f64,
}

impl fmt::Display for PingpongBandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // "%lld bytes in %.2f seconds = %.2f Mbit/sec"
        let usec = self.usec.max(1e-3);
        write!(
            f,
            "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
            self.bytes,
            self.usec / 1e6,
            self.bytes as f64 * 8.0 / usec
        )
    }
}

/// The throughput line `ibv_rc_pingpong` prints at the end, without the newline:
/// `8192000 bytes in 0.25 seconds = 262.14 Mbit/sec`. As in the C tool, `bytes` is
/// `size * iters * 2` (both directions).
pub fn pingpong_bandwidth(bytes: u64, elapsed: Duration) -> PingpongBandwidth {
    PingpongBandwidth {
        bytes,
        usec: elapsed.as_secs_f64() * 1e6,
    }
}

/// `ibv_rc_pingpong`'s latency line (see [`pingpong_latency`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingpongLatency {
    iters: u64,
    usec: f64,
}

impl fmt::Display for PingpongLatency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // "%d iters in %.2f seconds = %.2f usec/iter"
        let iters = self.iters.max(1) as f64;
        write!(
            f,
            "{} iters in {:.2} seconds = {:.2} usec/iter",
            self.iters,
            self.usec / 1e6,
            self.usec / iters
        )
    }
}

/// The latency line `ibv_rc_pingpong` prints at the end, without the newline:
/// `1000 iters in 0.25 seconds = 250.00 usec/iter`.
pub fn pingpong_latency(iters: u64, elapsed: Duration) -> PingpongLatency {
    PingpongLatency {
        iters,
        usec: elapsed.as_secs_f64() * 1e6,
    }
}

// ---------------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------------

/// How a [`Table`] column is aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text columns.
    Left,
    /// Number columns.
    Right,
}

/// A small aligned-columns table for chapters that print one (device caps, the GID table,
/// a TCP vs RDMA comparison). Cells are plain strings: format identifiers and figures with
/// this module's functions first, so they stay redactable.
///
/// ```
/// use course::show::{Align, Table};
/// let mut t = Table::new([("index", Align::Right), ("type", Align::Left), ("gid", Align::Left)]);
/// t.row(["0", "RoCE v1", "fe80::5054:ff:fe00:1"]);
/// t.row(["1", "RoCE v2", "::ffff:10.99.0.1"]);
/// assert_eq!(
///     t.to_string(),
///     "index  type     gid\n\
///      \x20   0  RoCE v1  fe80::5054:ff:fe00:1\n\
///      \x20   1  RoCE v2  ::ffff:10.99.0.1\n"
/// );
/// ```
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
    indent: usize,
}

impl Table {
    /// A table with these column headers and alignments.
    pub fn new<I, S>(columns: I) -> Self
    where
        I: IntoIterator<Item = (S, Align)>,
        S: Into<String>,
    {
        Table {
            headers: columns.into_iter().map(|(h, a)| (h.into(), a)).collect(),
            rows: Vec::new(),
            indent: 0,
        }
    }

    /// Indents every line by `n` spaces.
    pub fn indent(mut self, n: usize) -> Self {
        self.indent = n;
        self
    }

    /// Adds a row. Missing cells print empty; extra cells are kept as extra columns.
    pub fn row<I, S>(&mut self, cells: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: fmt::Display,
    {
        self.rows
            .push(cells.into_iter().map(|c| c.to_string()).collect());
        self
    }

    /// Number of rows (without the header).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ncols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain(std::iter::once(self.headers.len()))
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; ncols];
        for (i, (h, _)) in self.headers.iter().enumerate() {
            widths[i] = h.chars().count();
        }
        for row in &self.rows {
            for (i, c) in row.iter().enumerate() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let align = |i: usize| self.headers.get(i).map_or(Align::Left, |h| h.1);
        let header: Vec<&str> = self.headers.iter().map(|(h, _)| h.as_str()).collect();
        let lines = std::iter::once(header).chain(
            self.rows
                .iter()
                .map(|r| r.iter().map(String::as_str).collect()),
        );
        for cells in lines {
            let mut line = " ".repeat(self.indent);
            for (i, width) in widths.iter().copied().enumerate() {
                let cell = cells.get(i).copied().unwrap_or("");
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = width - cell.chars().count();
                match align(i) {
                    Align::Left => {
                        line.push_str(cell);
                        line.push_str(&" ".repeat(pad));
                    }
                    Align::Right => {
                        line.push_str(&" ".repeat(pad));
                        line.push_str(cell);
                    }
                }
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Wrapped explanatory lines: `say!` and `wrap_print`

/// Output width of the chapters' explanatory lines (see [`wrap_print`] and [`say!`](crate::say)).
pub const WIDTH: usize = 96;

/// Splits `text` into lines of at most [`WIDTH`] columns at word boundaries (a single word
/// longer than that stays whole). The first line keeps `text`'s leading spaces; continuation
/// lines are indented two more spaces than the first. Runs of whitespace become one space.
pub fn wrap(text: &str) -> Vec<String> {
    let indent = text.len() - text.trim_start().len();
    let mut lines = Vec::new();
    let mut line = String::from(&text[..indent]);
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.len() + 1 + word.len() > WIDTH {
            lines.push(std::mem::replace(&mut line, " ".repeat(indent + 2)));
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    lines.push(line);
    lines
}

/// Prints `text` on stdout wrapped by [`wrap`]: at [`WIDTH`] columns, continuation lines
/// indented two more spaces than the first. The chapters call it through [`say!`](crate::say).
pub fn wrap_print(text: &str) {
    for line in wrap(text) {
        println!("{line}");
    }
}

/// Prints a line wrapped at [`show::WIDTH`](crate::show::WIDTH) columns; continuation lines
/// are indented two more spaces than the first. Takes `format!` arguments:
///
/// ```
/// course::say!("  the child exited {}: 1 MiB was refused with ENOMEM, 32 KiB fit", 0);
/// ```
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => { $crate::show::wrap_print(&format!($($arg)*)) };
}

#[cfg(test)]
mod wrap_tests {
    use super::{WIDTH, wrap};

    #[test]
    fn short_line_is_kept_with_its_indent() {
        assert_eq!(wrap("  a   short\tline"), ["  a short line"]);
        assert_eq!(wrap(""), [""]);
    }

    #[test]
    fn long_line_wraps_with_two_more_spaces() {
        let words = vec!["word"; 40].join(" ");
        let lines = wrap(&format!("    {words}"));
        assert!(lines.len() > 1);
        assert!(lines[0].starts_with("    word"));
        for l in &lines {
            assert!(l.len() <= WIDTH, "{l:?}");
        }
        for l in &lines[1..] {
            assert!(l.starts_with("      word"), "{l:?}");
            assert!(!l.starts_with("       "), "{l:?}");
        }
        assert_eq!(
            lines.join(" ").split_whitespace().count(),
            40,
            "no word lost"
        );
        // Exactly WIDTH columns fit; one more wraps.
        let exact = "x".repeat(WIDTH - 2);
        assert_eq!(wrap(&format!("a {exact}")).len(), 1);
        assert_eq!(wrap(&format!("ab {exact}")).len(), 2);
    }
}
