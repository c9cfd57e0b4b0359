//! Ladder diagrams of a trace: one line per packet for the terminal and the snapshots,
//! and an SVG of the same lines for the docs.
//!
//! A line: `a -> b  RDMA_WRITE_ONLY  psn=0x3a1f2c len=83 qpn=0x000011 rkey=0x0000120a ...`.
//! Identifiers are printed from the labelled-output table (`contracts::labels`: `qpn=`, `psn=`,
//! `rkey=`, `addr=`), so [`crate::redact::redact`] numbers them like everything else in a
//! transcript.

use super::decode::{AckKind, Packet, nak_name, opcode_name, rnr_timer_us};
use contracts::labels;

/// The fields of one packet after its direction and opcode.
pub fn fields(p: &Packet) -> String {
    // UD sequences nothing: its PSN is a counter of the sending QP that the receiver ignores
    // (and, for QP1's MADs, depends on every MAD the node sent before). Left out.
    let ud = p.opcode >> 5 == 3;
    let mut f = if ud {
        vec![]
    } else {
        vec![labels::PSN.hex(p.psn.into()).to_string()]
    };
    if let Some(a) = p.aeth {
        f.push(match a.kind() {
            AckKind::Ack { .. } => "ACK".to_string(),
            AckKind::RnrNak { timer } => {
                format!("RNR_NAK timer={timer} ({})", fmt_us(rnr_timer_us(timer)))
            }
            AckKind::Nak { code } => format!("NAK {}", nak_name(code)),
            AckKind::Reserved(s) => format!("syndrome={s:#04x}"),
        });
        f.push(format!("msn={}", a.msn));
    }
    // Opcodes that carry data (SEND, WRITE, READ responses) show its length, even 0.
    let op = p.opcode & 0x1f;
    if p.payload_len > 0 || op <= 0x0b || (0x0d..=0x10).contains(&op) || op >= 0x16 {
        f.push(format!("len={}", p.payload_len));
    }
    f.push(labels::QPN.hex(p.dest_qp.into()).to_string());
    if p.ack_req {
        f.push("ackreq".into());
    }
    if let Some(m) = p.mad {
        if m.class == super::decode::MAD_CLASS_CM {
            f.push(format!("CM {}", super::decode::cm_attr_name(m.attr_id)));
        } else {
            f.push(format!(
                "MAD class={:#04x} attr={:#06x}",
                m.class, m.attr_id
            ));
        }
        if let (Some(q), Some(s)) = (m.qpn, m.start_psn) {
            f.push(format!(
                "local_{} start_{}",
                labels::QPN.hex(q.into()),
                labels::PSN.hex(s.into())
            ));
        }
    }
    if let Some(r) = p.reth {
        f.push(format!(
            "{} {} dmalen={}",
            labels::ADDR.hex(r.va),
            labels::RKEY.hex(r.rkey.into()),
            r.dma_len
        ));
    }
    if let Some(a) = p.atomic {
        f.push(format!(
            "{} {}",
            labels::ADDR.hex(a.va),
            labels::RKEY.hex(a.rkey.into())
        ));
        if p.opcode & 0x1f == 0x13 {
            f.push(format!("compare={} swap={}", a.compare, a.swap_add));
        } else {
            f.push(format!("add={}", a.swap_add));
        }
    }
    if let Some(o) = p.orig {
        f.push(format!("orig={o}"));
    }
    if let Some(i) = p.imm {
        f.push(format!("imm={i:#010x}"));
    }
    if let Some(k) = p.inv_rkey {
        f.push(format!("rkey={k:#010x}"));
    }
    f.join(" ")
}

fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{} ms", us / 1000.0)
    } else {
        format!("{us} us")
    }
}

/// The opcode names in wire order, with their direction (`a -> b RDMA_WRITE_ONLY`): what
/// tests compare a trace's shape with.
pub fn ops(packets: &[Packet]) -> Vec<String> {
    packets
        .iter()
        .map(|p| format!("{} {}", p.dir.arrow(), opcode_name(p.opcode)))
        .collect()
}

/// The ladder as text, one line per packet: direction, opcode (padded to the widest), fields.
pub fn text(packets: &[Packet]) -> String {
    let w = packets
        .iter()
        .map(|p| opcode_name(p.opcode).len())
        .max()
        .unwrap_or(0);
    let mut s = String::new();
    for p in packets {
        s.push_str(&format!(
            "{}  {:<w$}  {}\n",
            p.dir.arrow(),
            opcode_name(p.opcode),
            fields(p)
        ));
    }
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG sequence diagram of ladder lines (as [`text`] prints them, usually redacted): node a
/// on the left, node b on the right, one arrow per line with its opcode above and its fields
/// below. The same lines always give the same bytes.
pub fn svg(title: &str, lines: &str) -> String {
    let rows: Vec<(bool, String, String)> = lines
        .lines()
        .filter_map(|l| {
            let (dir, rest) = l.split_at_checked(6)?;
            let right = match dir {
                "a -> b" => true,
                "a <- b" => false,
                _ => return None,
            };
            let rest = rest.trim_start();
            let (op, fields) = rest.split_once("  ").unwrap_or((rest, ""));
            Some((right, op.to_string(), fields.trim().to_string()))
        })
        .collect();
    let (w, left, right, top, step) = (760, 90, 670, 70, 46);
    let h = top + step * rows.len() + 30;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"monospace\" font-size=\"12\">\n\
         <title>{}</title>\n\
         <defs><marker id=\"arrow\" markerWidth=\"10\" markerHeight=\"8\" refX=\"9\" refY=\"4\" \
         orient=\"auto\"><path d=\"M0,0 L10,4 L0,8 z\" fill=\"#333\"/></marker></defs>\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" \
         font-weight=\"bold\">{}</text>\n",
        esc(title),
        w / 2,
        esc(title)
    );
    for (x, label) in [(left, "node a (10.77.0.1)"), (right, "node b (10.77.0.2)")] {
        s.push_str(&format!(
            "<text x=\"{x}\" y=\"45\" text-anchor=\"middle\" font-weight=\"bold\">{label}</text>\n\
             <line x1=\"{x}\" y1=\"52\" x2=\"{x}\" y2=\"{}\" stroke=\"#888\" \
             stroke-dasharray=\"4 3\"/>\n",
            h - 10
        ));
    }
    for (i, (to_b, op, fields)) in rows.iter().enumerate() {
        let y = top + step * i + 18;
        let (x1, x2) = if *to_b { (left, right) } else { (right, left) };
        let color = if op.contains("NAK") || fields.contains("NAK") {
            "#b00020"
        } else if *to_b {
            "#1f4e9c"
        } else {
            "#2e7d32"
        };
        s.push_str(&format!(
            "<g class=\"row\"><line x1=\"{x1}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{}\" stroke=\"{color}\" \
             stroke-width=\"1.5\" marker-end=\"url(#arrow)\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{color}\" \
             font-weight=\"bold\">{}</text>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text></g>\n",
            y + 6,
            (left + right) / 2,
            y - 4,
            esc(op),
            (left + right) / 2,
            y + 18,
            esc(fields)
        ));
    }
    s.push_str("</svg>\n");
    s
}
