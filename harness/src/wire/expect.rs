//! Assertions on a trace of the pair's wire, for any check or test: "the trace of this run
//! contains ...".
//!
//! ```no_run
//! use harness::wire::expect::Trace;
//! # let packets = vec![];
//! let t = Trace::new(packets).rc(); // RC packets only (no MADs of QP1)
//! t.assert_opcodes(&["RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_MIDDLE",
//!                    "RDMA_WRITE_LAST", "ACKNOWLEDGE"]);
//! assert_eq!(t.count("ACKNOWLEDGE"), 1);
//! assert!(t.naks().is_empty() && t.retransmitted_psns().is_empty());
//! ```
//!
//! A failed assertion panics with one line saying what differs, then the expected and the
//! actual ladder side by side (`!` marks the first line that differs), so a check can show
//! the learner what crossed the wire. The `check_*` forms return that text instead, for a
//! check that adds its own first line ([`crate::exercises::fail`]).

use super::decode::{AckKind, Packet, nak_name, opcode_name};
use super::ladder;
use std::collections::BTreeMap;

/// The packets of one run, in wire order.
#[derive(Debug, Clone)]
pub struct Trace {
    pub packets: Vec<Packet>,
}

/// A NAK seen on the wire: the PSN it names and its code's name as the ladder prints it
/// (`psn-sequence-error`, `remote-access-error`, ... from [`nak_name`]), or `rnr-nak` for
/// receiver-not-ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nak {
    pub psn: u32,
    pub name: String,
}

impl Trace {
    pub fn new(packets: Vec<Packet>) -> Trace {
        Trace { packets }
    }

    /// Only the reliable-connected packets (BTH opcode 0x00-0x1f): leaves out UD, among it
    /// rdma_cm's MADs on QP1.
    pub fn rc(self) -> Trace {
        Trace {
            packets: self
                .packets
                .into_iter()
                .filter(|p| p.opcode >> 5 == 0)
                .collect(),
        }
    }

    /// The opcode names in wire order (`RDMA_WRITE_FIRST`), without direction.
    pub fn ops(&self) -> Vec<String> {
        self.packets.iter().map(|p| opcode_name(p.opcode)).collect()
    }

    /// How many packets carry this opcode name.
    pub fn count(&self, opcode: &str) -> usize {
        self.ops().iter().filter(|o| *o == opcode).count()
    }

    /// Packets per opcode name.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for o in self.ops() {
            *m.entry(o).or_insert(0) += 1;
        }
        m
    }

    /// Every NAK and RNR NAK, in wire order.
    pub fn naks(&self) -> Vec<Nak> {
        self.packets
            .iter()
            .filter_map(|p| {
                let name = match p.aeth?.kind() {
                    AckKind::Nak { code } => nak_name(code).to_string(),
                    AckKind::RnrNak { .. } => "rnr-nak".to_string(),
                    _ => return None,
                };
                Some(Nak { psn: p.psn, name })
            })
            .collect()
    }

    /// The PSNs a requester sent more than once (the same direction, destination QP and PSN,
    /// acknowledgements and READ responses left out), each once, in the order first repeated.
    pub fn retransmitted_psns(&self) -> Vec<u32> {
        let mut seen = std::collections::HashSet::new();
        let mut again = vec![];
        for p in &self.packets {
            let op = p.opcode & 0x1f;
            let response = (0x0d..=0x12).contains(&op);
            if p.opcode >> 5 != 0 || response {
                continue;
            }
            let key = (p.dir.arrow(), p.dest_qp, p.psn);
            if !seen.insert(key) && !again.contains(&p.psn) {
                again.push(p.psn);
            }
        }
        again
    }

    /// The ladder, one line per packet ([`ladder::text`]).
    pub fn ladder(&self) -> String {
        ladder::text(&self.packets)
    }

    /// `None` when the opcodes are exactly `want`, in order; else the failure text: which
    /// packet differs, then expected and actual side by side.
    pub fn check_opcodes(&self, want: &[&str]) -> Option<String> {
        let got = self.ops();
        if got.iter().map(String::as_str).eq(want.iter().copied()) {
            return None;
        }
        let at = (0..got.len().max(want.len()))
            .find(|&i| got.get(i).map(String::as_str) != want.get(i).copied())
            .unwrap_or(0);
        let what = format!(
            "the trace has {} packets, {} expected; the first difference is packet {} \
             (expected {}, got {})",
            got.len(),
            want.len(),
            at + 1,
            want.get(at).copied().unwrap_or("nothing"),
            got.get(at).map(String::as_str).unwrap_or("nothing")
        );
        Some(format!("{what}\n{}", self.side_by_side(want)))
    }

    /// Panics with [`Trace::check_opcodes`]'s text unless the opcodes are exactly `want`.
    #[track_caller]
    pub fn assert_opcodes(&self, want: &[&str]) {
        if let Some(t) = self.check_opcodes(want) {
            panic!("{t}");
        }
    }

    /// Panics unless exactly `n` packets carry `opcode`.
    #[track_caller]
    pub fn assert_count(&self, opcode: &str, n: usize) {
        let got = self.count(opcode);
        if got != n {
            panic!(
                "the trace has {got} {opcode}, {n} expected\ncounts: {:?}\n{}",
                self.counts(),
                self.ladder()
            );
        }
    }

    /// Panics if any NAK or RNR NAK crossed the wire.
    #[track_caller]
    pub fn assert_no_naks(&self) {
        let n = self.naks();
        if !n.is_empty() {
            panic!("the trace has NAKs: {n:?}\n{}", self.ladder());
        }
    }

    /// Two columns: the expected opcodes on the left, the actual ladder on the right; `!`
    /// marks the lines that differ.
    pub fn side_by_side(&self, want: &[&str]) -> String {
        let got: Vec<String> = self.ladder().lines().map(str::to_string).collect();
        let ops = self.ops();
        let w = want.iter().map(|s| s.len()).max().unwrap_or(0).max(8);
        let mut s = format!("  {:<w$}  | actual\n", "expected");
        for i in 0..want.len().max(got.len()) {
            let e = want.get(i).copied().unwrap_or("");
            let a = got.get(i).map(String::as_str).unwrap_or("");
            let same = ops.get(i).map(String::as_str) == want.get(i).copied();
            let mark = if same { ' ' } else { '!' };
            s.push_str(format!("{mark} {e:<w$}  | {a}").trim_end());
            s.push('\n');
        }
        s
    }
}
