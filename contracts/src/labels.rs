//! The labelled-output contract: every labelled form a chapter prints, with its format and the
//! placeholder a snapshot shows instead of its value (docs/conventions.md §1).
//!
//! One table, two readers: the course's `show` module prints each form from its row (so a QPN
//! is always `qpn=0x00001a`), and the harness's redaction builds its patterns from the same
//! rows (so `qpn=0x00001a` becomes `qpn=[QPN#1]` in a snapshot). A form printed any other way
//! would leak its value into a snapshot and make it churn; a new form is one new row here.
//!
//! ```
//! use contracts::labels::{self, Redaction, Shape};
//!
//! assert_eq!(labels::QPN.hex(0x1a).to_string(), "qpn=0x00001a");
//! assert_eq!(labels::RKEY.hex(0x120a).to_string(), "rkey=0x0000120a");
//! assert_eq!(labels::QPN.redaction, Redaction::Numbered("QPN"));
//! assert!(matches!(labels::ELAPSED.shape, Shape::Duration));
//! assert!(labels::LABELS.iter().any(|l| l.text == "lat="));
//! ```

use std::fmt;

/// What follows a label, as printed and as the redaction matches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `0x` and this many lowercase hex digits, zero-padded (`0x00001a`).
    Hex { width: usize },
    /// A duration with its unit (`850ns`, `1.234ms`), as the course's `show` writes one.
    Duration,
    /// A figure with an optional unit (`12.34MB/s`, `1234/s`, `1e-3s`).
    Figure,
    /// A whole number (`1234`).
    Integer,
    /// A figure or word that varies between runs (`0.93`, `3`, `yes`): chapter 11's counts and
    /// ratios, asserted by its test rather than shown in the snapshot.
    Word,
}

/// What a snapshot shows instead of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redaction {
    /// `[KIND#n]`, numbered by value in order of first appearance over the whole transcript,
    /// so an identifier printed by two processes (a client's remote QPN is the server's local
    /// QPN) visibly matches. Rows with the same kind share the numbering (`qpn=` and `QPN `).
    Numbered(&'static str),
    /// Always this text (`[ELAPSED]`).
    Fixed(&'static str),
    /// Kept as printed: the value is what the chapter teaches and is the same on every run
    /// (`mtu=1024` on the lab's network).
    Kept,
}

/// One labelled form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label {
    /// The label with its separator, exactly as printed: `qpn=`, or `QPN ` (rdma-core's
    /// `ibv_rc_pingpong` style).
    pub text: &'static str,
    /// What follows the label.
    pub shape: Shape,
    /// What a snapshot shows instead of the value.
    pub redaction: Redaction,
}

impl Label {
    /// The form with a hex value: `qpn=0x00001a`. Only meaningful for [`Shape::Hex`] rows
    /// (other shapes print the value in plain hex, unpadded).
    pub const fn hex(&'static self, value: u64) -> Hexed {
        Hexed { label: self, value }
    }

    /// The placeholder text for a numbered row's `n`th value, or the fixed placeholder.
    pub fn placeholder(&self, n: usize) -> String {
        match self.redaction {
            Redaction::Numbered(kind) => format!("[{kind}#{n}]"),
            Redaction::Fixed(p) => p.to_string(),
            Redaction::Kept => String::new(),
        }
    }
}

/// A labelled hex identifier ([`Label::hex`]), printed without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hexed {
    label: &'static Label,
    value: u64,
}

impl fmt::Display for Hexed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = match self.label.shape {
            Shape::Hex { width } => width,
            _ => 0,
        };
        write!(f, "{}0x{:0width$x}", self.label.text, self.value)
    }
}

const fn numbered(text: &'static str, width: usize, kind: &'static str) -> Label {
    Label {
        text,
        shape: Shape::Hex { width },
        redaction: Redaction::Numbered(kind),
    }
}

const fn fixed(text: &'static str, shape: Shape, placeholder: &'static str) -> Label {
    Label {
        text,
        shape,
        redaction: Redaction::Fixed(placeholder),
    }
}

/// A QP number: `qpn=0x00001a` (6 hex digits; QPNs are 24 bits).
pub const QPN: Label = numbered("qpn=", 6, "QPN");
/// A QP number in `ibv_rc_pingpong`'s style: `QPN 0x00001a`.
pub const QPN_UPPER: Label = numbered("QPN ", 6, "QPN");
/// A packet sequence number: `psn=0x1b2c3d` (6 hex digits; PSNs are 24 bits).
pub const PSN: Label = numbered("psn=", 6, "PSN");
/// A PSN in `ibv_rc_pingpong`'s style: `PSN 0x1b2c3d`.
pub const PSN_UPPER: Label = numbered("PSN ", 6, "PSN");
/// A local key: `lkey=0x0000120a` (8 hex digits).
pub const LKEY: Label = numbered("lkey=", 8, "LKEY");
/// A remote key (an MR's or a memory window's): `rkey=0x0000120a`.
pub const RKEY: Label = numbered("rkey=", 8, "RKEY");
/// A virtual address: `addr=0x00007f12aabb0000` (16 hex digits).
pub const ADDR: Label = numbered("addr=", 16, "ADDR");
/// Wall-clock time of a step: `elapsed=1.234ms`.
pub const ELAPSED: Label = fixed("elapsed=", Shape::Duration, "[ELAPSED]");
/// CPU time a process or step used: `cpu=0.345ms`.
pub const CPU: Label = fixed("cpu=", Shape::Duration, "[CPU]");
/// A latency (one operation, a median, a p99): `lat=12.300us`.
pub const LAT: Label = fixed("lat=", Shape::Duration, "[LAT]");
/// A byte rate: `rate=12.34MB/s`.
pub const RATE: Label = fixed("rate=", Shape::Figure, "[RATE]");
/// An operation rate: `ops=1234/s`.
pub const OPS: Label = fixed("ops=", Shape::Figure, "[RATE]");
/// A process id: `pid=1234`.
pub const PID: Label = fixed("pid=", Shape::Integer, "[PID]");
/// A path or port MTU in bytes: `mtu=1024`, kept (the lab's network pins it).
pub const MTU: Label = Label {
    text: "mtu=",
    shape: Shape::Integer,
    redaction: Redaction::Kept,
};

/// Chapter 11's figures that vary between runs: its test asserts each one (packet and ACK
/// counts exactly, ratios within their bands), and its snapshot shows `[N]`.
pub const FIGURES: &[Label] = &[
    fixed("mhz=", Shape::Word, "[N]"),
    fixed("ratio=", Shape::Word, "[N]"),
    fixed("within=", Shape::Word, "[N]"),
    fixed("switches=", Shape::Word, "[N]"),
    fixed("sent=", Shape::Word, "[N]"),
    fixed("naks=", Shape::Word, "[N]"),
    fixed("retries=", Shape::Word, "[N]"),
    fixed("acks=", Shape::Word, "[N]"),
    fixed("tries=", Shape::Word, "[N]"),
    fixed("tick=", Shape::Word, "[N]"),
    fixed("hz=", Shape::Word, "[N]"),
    fixed("slow=", Shape::Word, "[N]"),
];

/// Every labelled form but chapter 11's [`FIGURES`], numbered rows first.
pub const LABELS: &[Label] = &[
    QPN, QPN_UPPER, PSN, PSN_UPPER, LKEY, RKEY, ADDR, ELAPSED, CPU, LAT, RATE, OPS, PID, MTU,
];

/// Every row: [`LABELS`], then [`FIGURES`].
pub fn all() -> impl Iterator<Item = &'static Label> {
    LABELS.iter().chain(FIGURES)
}

/// A GID in IPv6 text form, as glibc's `inet_ntop(AF_INET6, ...)` prints it (which is what
/// `ibv_rc_pingpong` and `ibv_devinfo -v` show); labelled, `gid=::ffff:10.99.0.1`, or bare.
///
/// GIDs are not a row of the table: a RoCE v2 GID (`::ffff:a.b.c.d`) is redacted wherever it
/// appears, labelled or not, as `[GID#n]` numbered by value (it is node-specific); the
/// link-local `fe80::` GID comes from the lab's pinned MAC and is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidText {
    raw: [u8; 16],
    labelled: bool,
}

impl GidText {
    /// `gid=::ffff:10.99.0.1`.
    pub const fn labelled(raw: &[u8; 16]) -> GidText {
        GidText {
            raw: *raw,
            labelled: true,
        }
    }

    /// `::ffff:10.99.0.1`.
    pub const fn bare(raw: &[u8; 16]) -> GidText {
        GidText {
            raw: *raw,
            labelled: false,
        }
    }
}

impl fmt::Display for GidText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.labelled {
            f.write_str("gid=")?;
        }
        let b = &self.raw;
        // glibc's inet_ntop also prints the deprecated "IPv4-compatible" form ::a.b.c.d with a
        // dotted quad, where Rust's Ipv6Addr prints hex words; match glibc so the Rust and C
        // tools print the same text for the same GID.
        let compat_v4 = b[..12].iter().all(|&x| x == 0) && (b[12] != 0 || b[13] != 0);
        if compat_v4 {
            write!(f, "::{}.{}.{}.{}", b[12], b[13], b[14], b[15])
        } else {
            write!(f, "{}", std::net::Ipv6Addr::from(*b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_forms_are_zero_padded_to_their_width() {
        assert_eq!(QPN.hex(0x1a).to_string(), "qpn=0x00001a");
        assert_eq!(QPN_UPPER.hex(0x1a).to_string(), "QPN 0x00001a");
        assert_eq!(PSN.hex(0x1b2c3d).to_string(), "psn=0x1b2c3d");
        assert_eq!(LKEY.hex(0x120a).to_string(), "lkey=0x0000120a");
        assert_eq!(
            ADDR.hex(0x7f12_aabb_0000).to_string(),
            "addr=0x00007f12aabb0000"
        );
    }

    #[test]
    fn every_label_once_and_ending_in_its_separator() {
        let all: Vec<&Label> = all().collect();
        for (i, l) in all.iter().enumerate() {
            assert!(l.text.ends_with('=') || l.text.ends_with(' '), "{l:?}");
            assert!(all[i + 1..].iter().all(|m| m.text != l.text), "{l:?}");
        }
    }

    #[test]
    fn gids_print_as_inet_ntop() {
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[10, 99, 0, 1]);
        assert_eq!(
            GidText::labelled(&mapped).to_string(),
            "gid=::ffff:10.99.0.1"
        );
        let mut compat = [0u8; 16];
        compat[12..].copy_from_slice(&[10, 99, 0, 1]);
        assert_eq!(GidText::bare(&compat).to_string(), "::10.99.0.1");
    }

    #[test]
    fn placeholders() {
        assert_eq!(QPN.placeholder(2), "[QPN#2]");
        assert_eq!(OPS.placeholder(1), "[RATE]");
    }
}
