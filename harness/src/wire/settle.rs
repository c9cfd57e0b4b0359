//! When a recording of the wire is whole: no RC request still waits for its answer.
//!
//! A trace is stopped once a run's programs are done, but the wire may still carry the end of
//! what they did: the responder's ACK of the last SEND leaves its kernel after the program that
//! received the SEND has its completion (rxe completes, then acknowledges). So both recorders
//! (the capture, [`super::capture`], and the cable's tap, which `trace stop` reads) follow
//! their recording with a [`Settle`] and stop once no request waits ([`until_answered`]).
//!
//! A request waits when it is an RC request that asks for an acknowledgement (the BTH's AckReq
//! bit: rxe sets it on a message's last packet), an RDMA READ request or an atomic. Its answer
//! goes the other way: an ACK or a NAK (an RNR NAK too), a READ response, an atomic ACK. An
//! answer names the requester's QP and a request the responder's, so the pair is learnt from
//! an answer that repeats a waiting request's PSN (rxe acknowledges a request with its own
//! PSN); from then on an answer to that QP at or beyond a request's PSN answers it (an ACK
//! covers the requests before it). A READ waits for its last response, or a NAK.
//!
//! A request that is never answered is not a harness error: a dead, frozen or partitioned
//! peer, or a packet lost or damaged on purpose, is what a fault case records. So the deadline
//! ends the wait, not the recording, and the unanswered request stays in it for the ladder to
//! show.

use super::decode::{Dir, Packet};
use anyhow::Result;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long a recorder waits for the answers still due once a run is over. A live responder
/// answers within milliseconds even under TCG on a busy host; the whole wait is spent only
/// when a request will never be answered (a fault case), so it stays short.
pub const ANSWER_WAIT: Duration = Duration::from_millis(500);

/// Between two looks at the recording while answers are due (the poll interval of
/// [`until_answered`]'s deadline loop, not a wait for anything).
const POLL: Duration = Duration::from_millis(5);

/// One request that waits for its answer.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    dir: Dir,
    /// The responder's QP (the request's destination QP).
    qp: u32,
    psn: u32,
    /// An RDMA READ request: answered by its last response (or a NAK), not its first.
    read: bool,
}

/// The requests of a recording still waiting for their answers, packet by packet.
#[derive(Debug, Default)]
pub struct Settle {
    waiting: Vec<Waiting>,
    /// The QP pairs seen: (direction of the requests, responder's QP, requester's QP).
    pairs: HashSet<(Dir, u32, u32)>,
}

impl Settle {
    /// The next packet of the recording, in the order it was recorded.
    pub fn add(&mut self, p: &Packet) {
        // RC only (the opcode's transport bits are 000): UC, UD and the CM's MADs are not
        // acknowledged.
        if p.dir == Dir::Other || p.opcode >> 5 != 0 {
            return;
        }
        match p.opcode {
            // READ responses, ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE.
            0x0d..=0x12 => self.answer(p),
            // RDMA_READ_REQUEST, CMP_SWAP, FETCH_ADD: always answered.
            0x0c | 0x13 | 0x14 => self.wait(p),
            _ if p.ack_req => self.wait(p),
            _ => {}
        }
    }

    /// How many requests wait for their answer.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn wait(&mut self, p: &Packet) {
        self.waiting.push(Waiting {
            dir: p.dir,
            qp: p.dest_qp,
            psn: p.psn,
            read: p.opcode == 0x0c,
        });
    }

    fn answer(&mut self, p: &Packet) {
        let asked = reverse(p.dir);
        // Learn the pair from the one request this answer repeats the PSN of (two waiting
        // requests with that PSN on different QPs: no guess). A responder's QP may have more
        // than one requester over a recording (a node restarted as a fresh VM numbers its QPs
        // from the start again).
        let mut same = self
            .waiting
            .iter()
            .filter(|w| w.dir == asked && w.psn == p.psn);
        if let (Some(w), None) = (same.next(), same.next()) {
            self.pairs.insert((w.dir, w.qp, p.dest_qp));
        }
        // The last packets of an answer: READ_RESPONSE_LAST and _ONLY, (N)ACKs, atomic ACKs.
        let last = matches!(p.opcode, 0x0f..=0x12);
        let pairs = &self.pairs;
        self.waiting.retain(|w| {
            let answered = w.dir == asked
                && pairs.contains(&(w.dir, w.qp, p.dest_qp))
                && at_or_after(p.psn, w.psn)
                && (last || !w.read);
            !answered
        });
    }
}

fn reverse(d: Dir) -> Dir {
    match d {
        Dir::AtoB => Dir::BtoA,
        Dir::BtoA => Dir::AtoB,
        Dir::Other => Dir::Other,
    }
}

/// `a` is `b` or comes after it in PSN order (24-bit, modulo: within half the space).
fn at_or_after(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) & 0xff_ffff < 0x80_0000
}

/// Feeds `settle` from `more` (each call adds what was recorded since the last one) until no
/// request waits for its answer or `limit` has passed. Returns how many still wait (see the
/// module's text: that is no error); an error only if `more` cannot read the recording.
pub fn until_answered(
    settle: &mut Settle,
    limit: Duration,
    mut more: impl FnMut(&mut Settle) -> Result<()>,
) -> Result<usize> {
    let deadline = Instant::now() + limit;
    loop {
        more(settle)?;
        if settle.waiting() == 0 || Instant::now() >= deadline {
            return Ok(settle.waiting());
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(dir: Dir, opcode: u8, qp: u32, psn: u32, ack_req: bool) -> Packet {
        Packet {
            frame: 0,
            ts_us: 0,
            dir,
            opcode,
            dest_qp: qp,
            psn,
            ack_req,
            solicited: false,
            pad: 0,
            reth: None,
            aeth: None,
            atomic: None,
            orig: None,
            imm: None,
            inv_rkey: None,
            payload_len: 0,
            mad: None,
        }
    }

    const SEND_ONLY: u8 = 0x04;
    const ACK: u8 = 0x11;
    const B: Dir = Dir::BtoA;
    const A: Dir = Dir::AtoB;

    #[test]
    fn a_send_waits_for_its_ack_and_an_ack_covers_what_came_before() {
        let mut s = Settle::default();
        s.add(&pkt(B, SEND_ONLY, 0x11, 100, true));
        assert_eq!(s.waiting(), 1);
        s.add(&pkt(A, ACK, 0x12, 100, false));
        assert_eq!(s.waiting(), 0);
        // Two SENDs, one ACK for the second: both answered (the pair is known now).
        s.add(&pkt(B, SEND_ONLY, 0x11, 101, true));
        s.add(&pkt(B, SEND_ONLY, 0x11, 102, true));
        s.add(&pkt(A, ACK, 0x12, 102, false));
        assert_eq!(s.waiting(), 0);
        // An ACK to another QP answers nothing of this pair.
        s.add(&pkt(B, SEND_ONLY, 0x11, 103, true));
        s.add(&pkt(A, ACK, 0x99, 5000, false));
        assert_eq!(s.waiting(), 1);
    }

    #[test]
    fn what_needs_no_answer_waits_for_none() {
        let mut s = Settle::default();
        // A middle packet without AckReq, a UD SEND, an answer with nothing waiting.
        s.add(&pkt(B, 0x00, 0x11, 1, false));
        s.add(&pkt(B, 0x64, 0x11, 2, true));
        s.add(&pkt(A, ACK, 0x12, 3, false));
        assert_eq!(s.waiting(), 0);
    }

    #[test]
    fn a_read_waits_for_its_last_response_and_psns_wrap() {
        let mut s = Settle::default();
        s.add(&pkt(B, 0x0c, 0x11, 0xff_fffe, true));
        s.add(&pkt(A, 0x0d, 0x12, 0xff_fffe, false));
        s.add(&pkt(A, 0x0e, 0x12, 0xff_ffff, false));
        assert_eq!(s.waiting(), 1, "the READ is answered by its last response");
        s.add(&pkt(A, 0x0f, 0x12, 0, false));
        assert_eq!(s.waiting(), 0);
    }

    /// The committed recordings (tests/fixtures/wire: SEND, WRITE with immediate, READ and a
    /// NAK, atomics, the CM, RNR NAKs) each have requests that waited, and end answered.
    #[test]
    fn each_committed_recording_ends_answered() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wire");
        let mut seen = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let packets = crate::wire::decode_pcap(&std::fs::read(&path).unwrap()).unwrap();
            let mut s = Settle::default();
            let mut most = 0;
            for p in &packets {
                s.add(p);
                most = most.max(s.waiting());
            }
            assert!(most > 0, "{}: nothing waited", path.display());
            assert_eq!(s.waiting(), 0, "{}", path.display());
            seen += 1;
        }
        assert!(seen >= 6, "{seen} recordings");
    }

    #[test]
    fn an_unanswered_request_ends_the_wait_at_its_deadline_without_an_error() {
        let mut s = Settle::default();
        s.add(&pkt(B, SEND_ONLY, 0x11, 7, true));
        let t0 = Instant::now();
        let left = until_answered(&mut s, Duration::from_millis(50), |_| Ok(())).unwrap();
        assert_eq!(left, 1);
        assert!(t0.elapsed() >= Duration::from_millis(50));
    }
}
