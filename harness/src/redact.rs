//! The redaction (docs/conventions.md §1). Every snapshot goes through [`redact`]. Its patterns
//! are built from the labelled-output table, `contracts::labels`, the same rows the course's
//! `show` prints from: a label, its format, its placeholder.
//!
//! Identifiers that must match across processes (a client's remote QPN is the server's local
//! QPN) become numbered placeholders, numbered by first appearance over the whole text, by
//! value: `qpn=0x000011` and `QPN 0x000011` are the same `[QPN#1]`. Timings and rates become
//! fixed placeholders. Completion statuses and errnos are left alone.
//!
//! IPv4-mapped GIDs (`::ffff:10.77.0.1`, the RoCE v2 GIDs every node uses) are node-specific:
//! they become `[GID#n]`, numbered by value like the identifiers, so a client's `server
//! gid=[GID#1]` still visibly matches the server's own `gid=[GID#1]`. This is what lets one
//! snapshot hold for every provider: the microVM pair (nodes a and b at 10.77.0.1/.2) and the
//! native provider, which serves both nodes on one device (one GID, in that order of first
//! appearance). The link-local `fe80::` GID stays: it comes from the pinned MAC, and only the
//! loopback device table of chapter 01 shows it.

use contracts::labels::{self, Label, Redaction, Shape};
use regex::{Captures, Regex};
use std::collections::HashMap;
use std::sync::OnceLock;

/// A number-like value with an optional unit: `1.234ms`, `12.34MB/s`, `1234/s`, `1e-3s`.
const VALUE: &str = r"[0-9][0-9.]*(?:[eE][+-]?[0-9]+)?[A-Za-zµ/]*";

/// The pattern of what follows a label, by its shape in the table.
fn value_pattern(shape: Shape) -> &'static str {
    match shape {
        Shape::Hex { .. } => r"0[xX](?P<hex>[0-9a-fA-F]+)\b",
        Shape::Duration | Shape::Figure => VALUE,
        Shape::Integer => "[0-9]+",
        Shape::Word => "[0-9A-Za-z.]+",
    }
}

/// The pattern of one or more rows: `pre` keeps what precedes a label (start of line or a
/// non-alphanumeric character), so `dest_qpn=` and `remote qpn=` are caught but `xqpn=` is not.
fn pattern(rows: &[&Label]) -> Regex {
    let alternatives: Vec<String> = rows.iter().map(|l| regex::escape(l.text)).collect();
    Regex::new(&format!(
        r"(?m)(?P<pre>^|[^A-Za-z0-9])(?P<label>{}){}",
        alternatives.join("|"),
        value_pattern(rows[0].shape)
    ))
    .expect("redaction regex")
}

struct Table {
    /// One pattern per numbered kind (`qpn=` and `QPN ` share `QPN`), in table order.
    numbered: Vec<(Regex, &'static str)>,
    gid: Regex,
    fixed: Vec<(Regex, String)>,
}

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        let mut kinds: Vec<&'static str> = Vec::new();
        let mut fixed = vec![
            // ibv_rc_pingpong's figures (the lines `show::pingpong_bandwidth` and
            // `show::pingpong_latency` print as rdma-core's tool does): not labelled forms.
            (
                Regex::new(r"(\d+ bytes in )[0-9.]+( seconds = )[0-9.]+( Mbit/sec)").unwrap(),
                "${1}[ELAPSED]${2}[RATE]${3}".to_string(),
            ),
            (
                Regex::new(r"(\d+ iters in )[0-9.]+( seconds = )[0-9.]+( usec/iter)").unwrap(),
                "${1}[ELAPSED]${2}[LAT]${3}".to_string(),
            ),
        ];
        for row in labels::all() {
            match row.redaction {
                Redaction::Numbered(kind) if !kinds.contains(&kind) => kinds.push(kind),
                Redaction::Fixed(placeholder) => {
                    fixed.push((pattern(&[row]), format!("${{pre}}${{label}}{placeholder}")))
                }
                Redaction::Numbered(_) | Redaction::Kept => {}
            }
        }
        let numbered = kinds
            .into_iter()
            .map(|kind| {
                let rows: Vec<&Label> = labels::all()
                    .filter(|l| l.redaction == Redaction::Numbered(kind))
                    .collect();
                (pattern(&rows), kind)
            })
            .collect();
        let gid = Regex::new(r"::ffff:(?P<v4>[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})\b")
            .expect("redaction regex");
        Table {
            numbered,
            gid,
            fixed,
        }
    })
}

/// Applies the redaction table to a whole text (a transcript: all sections at once, so the
/// numbering is shared between server and client).
pub fn redact(text: &str) -> String {
    let t = table();
    let mut s = text.to_string();
    for (re, kind) in &t.numbered {
        let mut seen: HashMap<u128, usize> = HashMap::new();
        s = re
            .replace_all(&s, |c: &Captures| {
                let v = u128::from_str_radix(&c["hex"], 16).unwrap_or(u128::MAX);
                let next = seen.len() + 1;
                let n = *seen.entry(v).or_insert(next);
                format!("{}{}[{kind}#{n}]", &c["pre"], &c["label"])
            })
            .into_owned();
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    s = t
        .gid
        .replace_all(&s, |c: &Captures| {
            let next = seen.len() + 1;
            let n = *seen.entry(c["v4"].to_string()).or_insert(next);
            format!("[GID#{n}]")
        })
        .into_owned();
    for (re, rep) in &t.fixed {
        s = re.replace_all(&s, rep.as_str()).into_owned();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::redact;
    use rstest::rstest;

    #[rstest]
    #[case::qpn("qpn=0x00001a", "qpn=[QPN#1]")]
    #[case::qpn_pingpong_style("QPN 0x00001a", "QPN [QPN#1]")]
    #[case::psn("psn=0x1b2c3d PSN 0x1b2c3d", "psn=[PSN#1] PSN [PSN#1]")]
    #[case::lkey("lkey=0x0000120a", "lkey=[LKEY#1]")]
    #[case::rkey("rkey=0x0000120a", "rkey=[RKEY#1]")]
    #[case::addr("addr=0x00007f12aabb0000", "addr=[ADDR#1]")]
    #[case::elapsed_ms("elapsed=1.234ms", "elapsed=[ELAPSED]")]
    #[case::elapsed_units(
        "elapsed=12ns elapsed=3us elapsed=2s",
        "elapsed=[ELAPSED] elapsed=[ELAPSED] elapsed=[ELAPSED]"
    )]
    #[case::cpu("cpu=0.345ms", "cpu=[CPU]")]
    #[case::lat("lat=12.3us", "lat=[LAT]")]
    #[case::rate("rate=12.34MB/s", "rate=[RATE]")]
    #[case::ops("ops=1234/s", "ops=[RATE]")]
    #[case::pid("pid=1234", "pid=[PID]")]
    #[case::pingpong_bytes(
        "8192000 bytes in 0.23 seconds = 284.93 Mbit/sec",
        "8192000 bytes in [ELAPSED] seconds = [RATE] Mbit/sec"
    )]
    #[case::pingpong_iters(
        "1000 iters in 0.23 seconds = 230.00 usec/iter",
        "1000 iters in [ELAPSED] seconds = [LAT] usec/iter"
    )]
    #[case::status_untouched("IBV_WC_REM_ACCESS_ERR (10)", "IBV_WC_REM_ACCESS_ERR (10)")]
    #[case::errno_untouched("EINVAL (22)", "EINVAL (22)")]
    #[case::gid("gid=::ffff:10.99.0.1", "gid=[GID#1]")]
    #[case::gid_bare("GID ::ffff:10.77.0.2, PSN", "GID [GID#1], PSN")]
    #[case::gid_link_local_untouched("fe80::5054:ff:fe00:1", "fe80::5054:ff:fe00:1")]
    #[case::gid_placeholder_text_untouched("the ::ffff:a.b.c.d entry", "the ::ffff:a.b.c.d entry")]
    #[case::underscore_prefix("dest_qpn=0x000011", "dest_qpn=[QPN#1]")]
    #[case::not_inside_a_word("xqpn=0x000011 mypid=12", "xqpn=0x000011 mypid=12")]
    #[case::punctuation_after(
        "(rkey=0x00000001, addr=0x0000000000001000)",
        "(rkey=[RKEY#1], addr=[ADDR#1])"
    )]
    #[case::rate_then_comma("rate=1.5MB/s, lat=3us", "rate=[RATE], lat=[LAT]")]
    fn one_label(#[case] input: &str, #[case] want: &str) {
        assert_eq!(redact(input), want);
    }

    #[test]
    fn numbering_is_by_first_appearance_and_by_value() {
        let t = "server: local qpn=0x000011 psn=0x000001\n\
                 server: remote qpn=0x000012\n\
                 client: local qpn=0x000012\n\
                 client: remote qpn=0x11\n";
        assert_eq!(
            redact(t),
            "server: local qpn=[QPN#1] psn=[PSN#1]\n\
             server: remote qpn=[QPN#2]\n\
             client: local qpn=[QPN#2]\n\
             client: remote qpn=[QPN#1]\n"
        );
    }

    #[test]
    fn both_qpn_forms_share_the_numbering() {
        let t = "  local address:  LID 0x0000, QPN 0x000011, PSN 0x6e5f7c, GID ::ffff:10.99.0.1\n\
                 remote qpn=0x000011\nQPN 0x000013";
        assert_eq!(
            redact(t),
            "  local address:  LID 0x0000, QPN [QPN#1], PSN [PSN#1], GID [GID#1]\n\
             remote qpn=[QPN#1]\nQPN [QPN#2]"
        );
    }

    /// The microVM pair (two GIDs) and the native pair (both nodes on one device: one GID)
    /// agree wherever a transcript shows only the server's GID, and each run's own numbering
    /// shows which GIDs are the same.
    #[test]
    fn gids_are_numbered_by_value() {
        let vm =
            "server gid=::ffff:10.77.0.1\nclient gid=::ffff:10.77.0.2 server gid=::ffff:10.77.0.1";
        assert_eq!(
            redact(vm),
            "server gid=[GID#1]\nclient gid=[GID#2] server gid=[GID#1]"
        );
        let one_device = "server gid=::ffff:10.99.0.1\nclient gid=::ffff:10.99.0.1";
        assert_eq!(redact(one_device), "server gid=[GID#1]\nclient gid=[GID#1]");
        assert_eq!(
            redact("device rxe0 gid[1] gid=::ffff:10.77.0.1"),
            redact("device rxe0 gid[1] gid=::ffff:10.99.0.1")
        );
    }

    #[test]
    fn kinds_are_numbered_separately() {
        assert_eq!(
            redact("lkey=0x5 rkey=0x5 lkey=0x6 rkey=0x7 rkey=0x5"),
            "lkey=[LKEY#1] rkey=[RKEY#1] lkey=[LKEY#2] rkey=[RKEY#2] rkey=[RKEY#1]"
        );
    }

    #[test]
    fn start_of_line_and_case() {
        assert_eq!(
            redact("qpn=0xABCDEF\naddr=0X00007F00\nqpn=0xabcdef"),
            "qpn=[QPN#1]\naddr=[ADDR#1]\nqpn=[QPN#1]"
        );
    }

    #[test]
    fn idempotent() {
        let t =
            "qpn=0x000011 elapsed=1.2ms rate=3MB/s pid=77 10 iters in 0.1 seconds = 3.00 usec/iter";
        let once = redact(t);
        assert_eq!(redact(&once), once);
    }

    #[test]
    fn leaves_plain_text_alone() {
        let t = "step 3: move QP to RTR\nhello world 0x1234 qpn\n";
        assert_eq!(redact(t), t);
    }
}
