//! RoCE v2 packets out of a pcap: one [`Packet`] per UDP 4791 datagram between the pair's
//! nodes.
//!
//! Hand-parsed, no crate: a classic pcap file is a 24-byte header and a 16-byte record header
//! per frame, and a RoCE v2 frame is Ethernet, IPv4, UDP, then the InfiniBand transport
//! headers (docs/wire.md has the layout). `harness/tests/wire_decode.rs` proves every field
//! against tshark's own dissector on committed captures.

use anyhow::{Result, bail};

/// The UDP port of RoCE v2.
pub const ROCE_PORT: u16 = 4791;

/// One frame of a pcap: its timestamp (microseconds since the epoch) and bytes.
#[derive(Debug, Clone)]
pub struct Frame {
    pub ts_us: u64,
    pub data: Vec<u8>,
}

/// Reads a classic pcap (either byte order, micro- or nanosecond timestamps, link type
/// Ethernet). A file cut short in the middle of a frame (a capture still being written) ends
/// at the last whole frame.
pub fn read_pcap(bytes: &[u8]) -> Result<Vec<Frame>> {
    Ok(read_pcap_from(bytes, 0)?.0)
}

/// [`read_pcap`] from byte `from` on (0, or an offset this returned: where a frame starts), and
/// the offset after the last whole frame: a capture being written is read as it grows.
pub fn read_pcap_from(bytes: &[u8], from: usize) -> Result<(Vec<Frame>, usize)> {
    if bytes.len() < 24 {
        bail!(
            "not a pcap file: {} bytes, shorter than its header",
            bytes.len()
        );
    }
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let (le, nanos) = match magic {
        0xa1b2_c3d4 => (true, false),
        0xa1b2_3c4d => (true, true),
        0xd4c3_b2a1 => (false, false),
        0x4d3c_b2a1 => (false, true),
        0x0a0d_0d0a => bail!("a pcapng file; write classic pcap (tshark -F pcap) to read it here"),
        _ => bail!("not a pcap file (magic {magic:#010x})"),
    };
    let u32_at = |b: &[u8], o: usize| {
        let a: [u8; 4] = b[o..o + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let link = u32_at(bytes, 20);
    if link != 1 {
        bail!("pcap link type {link}: only Ethernet (1) is decoded");
    }
    let mut out = vec![];
    let mut off = from.max(24);
    while off + 16 <= bytes.len() {
        let sec = u64::from(u32_at(bytes, off));
        let frac = u64::from(u32_at(bytes, off + 4));
        let incl = u32_at(bytes, off + 8) as usize;
        let start = off + 16;
        if start + incl > bytes.len() {
            break;
        }
        let ts_us = sec * 1_000_000 + if nanos { frac / 1000 } else { frac };
        out.push(Frame {
            ts_us,
            data: bytes[start..start + incl].to_vec(),
        });
        off = start + incl;
    }
    Ok((out, off))
}

/// Which way a packet went between the pair's nodes (from its source IP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// From node a (10.77.0.1) to node b.
    AtoB,
    /// From node b (10.77.0.2) to node a.
    BtoA,
    /// Some other pair of addresses.
    Other,
}

impl Dir {
    /// `a -> b`, `a <- b` or `? -> ?`.
    pub fn arrow(self) -> &'static str {
        match self {
            Dir::AtoB => "a -> b",
            Dir::BtoA => "a <- b",
            Dir::Other => "? -> ?",
        }
    }
}

/// The RDMA Extended Transport Header: where a WRITE or READ goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

/// What an ACK Extended Transport Header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckKind {
    /// A positive acknowledgement (with its credit count).
    Ack { credits: u8 },
    /// Receiver not ready: retry after the timer's delay (the 5-bit code).
    RnrNak { timer: u8 },
    /// A negative acknowledgement with its code.
    Nak { code: u8 },
    /// The reserved syndrome (0b010).
    Reserved(u8),
}

/// The ACK Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: u8,
    pub msn: u32,
}

impl Aeth {
    pub fn kind(&self) -> AckKind {
        let low = self.syndrome & 0x1f;
        match self.syndrome >> 5 {
            0b000 => AckKind::Ack { credits: low },
            0b001 => AckKind::RnrNak { timer: low },
            0b011 => AckKind::Nak { code: low },
            _ => AckKind::Reserved(self.syndrome),
        }
    }
}

/// The name of a NAK code (IBA 9.7.5.2.4).
pub fn nak_name(code: u8) -> &'static str {
    match code {
        0 => "psn-sequence-error",
        1 => "invalid-request",
        2 => "remote-access-error",
        3 => "remote-operational-error",
        4 => "invalid-rd-request",
        _ => "reserved",
    }
}

/// The RNR NAK timer's delay in microseconds (IBA table 45: code 0 is 655.36 ms).
pub fn rnr_timer_us(code: u8) -> f64 {
    const T: [f64; 32] = [
        655_360.0, 10.0, 20.0, 30.0, 40.0, 60.0, 80.0, 120.0, 160.0, 240.0, 320.0, 480.0, 640.0,
        960.0, 1280.0, 1920.0, 2560.0, 3840.0, 5120.0, 7680.0, 10240.0, 15360.0, 20480.0, 30720.0,
        40960.0, 61440.0, 81920.0, 122880.0, 163840.0, 245760.0, 327680.0, 491520.0,
    ];
    T[usize::from(code & 0x1f)]
}

/// The Atomic Extended Transport Header: target, key and operands of FETCH_ADD / CMP_SWAP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicEth {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

/// A management datagram (IBA 13.4): a UD SEND to QP1, the General Services QP. rdma_cm's
/// connection messages are MADs of the Communication Management class (0x07).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mad {
    pub class: u8,
    pub method: u8,
    pub attr_id: u16,
    pub tid: u64,
    /// CM REQ and REP: the sender's QP number and its starting PSN.
    pub qpn: Option<u32>,
    pub start_psn: Option<u32>,
}

/// The CM class of MADs.
pub const MAD_CLASS_CM: u8 = 0x07;

/// The name of a CM MAD's attribute (IBA 16.7.2, table 223 of the CM messages).
pub fn cm_attr_name(id: u16) -> &'static str {
    match id {
        0x0010 => "ConnectRequest",
        0x0011 => "MsgRcptAck",
        0x0012 => "ConnectReject",
        0x0013 => "ConnectReply",
        0x0014 => "ReadyToUse",
        0x0015 => "DisconnectRequest",
        0x0016 => "DisconnectReply",
        0x0017 => "ServiceIDResReq",
        0x0018 => "ServiceIDResReqResp",
        0x0019 => "LoadAlternatePath",
        0x001a => "AlternatePathResponse",
        _ => "unknown",
    }
}

/// Reads the MAD in a QP1 payload: its 24-byte common header, and for a CM REQ or REP the
/// QPN and starting PSN (REQ: bytes 32 and 44 of the message data; REP: bytes 12 and 20).
fn parse_mad(b: &[u8]) -> Option<Mad> {
    let h = b.get(..24)?;
    let class = h[1];
    let attr_id = be(&h[16..18]) as u16;
    let data = &b[24..];
    let at24 = |o: usize| data.get(o..o + 3).map(|x| be(x) as u32);
    let (qpn, start_psn) = match (class, attr_id) {
        (MAD_CLASS_CM, 0x0010) => (at24(32), at24(44)),
        (MAD_CLASS_CM, 0x0013) => (at24(12), at24(20)),
        _ => (None, None),
    };
    Some(Mad {
        class,
        method: h[3] & 0x7f,
        attr_id,
        tid: be(&h[8..16]),
        qpn,
        start_psn,
    })
}

/// One RoCE v2 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Index of its frame in the pcap (0-based).
    pub frame: usize,
    pub ts_us: u64,
    pub dir: Dir,
    pub opcode: u8,
    pub dest_qp: u32,
    pub psn: u32,
    pub ack_req: bool,
    pub solicited: bool,
    pub pad: u8,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub atomic: Option<AtomicEth>,
    /// AtomicAckETH: the value the target held before the atomic.
    pub orig: Option<u64>,
    pub imm: Option<u32>,
    /// IETH: the rkey a SEND_WITH_INVALIDATE invalidates.
    pub inv_rkey: Option<u32>,
    /// Payload bytes (without pad and ICRC).
    pub payload_len: usize,
    /// The MAD of a UD SEND to QP1 (rdma_cm's REQ, REP, RTU, DREQ ...).
    pub mad: Option<Mad>,
}

/// Which extension headers an opcode carries, in order.
#[derive(Debug, Clone, Copy, Default)]
struct Exts {
    deth: bool,
    reth: bool,
    atomic: bool,
    aeth: bool,
    atomic_ack: bool,
    imm: bool,
    ieth: bool,
}

/// The name of a BTH opcode (IBA 9.2, table 38): `RDMA_WRITE_ONLY`; for UC, RD and UD the
/// transport is a prefix (`UD_SEND_ONLY`).
pub fn opcode_name(op: u8) -> String {
    let base = match op & 0x1f {
        0x00 => "SEND_FIRST",
        0x01 => "SEND_MIDDLE",
        0x02 => "SEND_LAST",
        0x03 => "SEND_LAST_WITH_IMMEDIATE",
        0x04 => "SEND_ONLY",
        0x05 => "SEND_ONLY_WITH_IMMEDIATE",
        0x06 => "RDMA_WRITE_FIRST",
        0x07 => "RDMA_WRITE_MIDDLE",
        0x08 => "RDMA_WRITE_LAST",
        0x09 => "RDMA_WRITE_LAST_WITH_IMMEDIATE",
        0x0a => "RDMA_WRITE_ONLY",
        0x0b => "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        0x0c => "RDMA_READ_REQUEST",
        0x0d => "RDMA_READ_RESPONSE_FIRST",
        0x0e => "RDMA_READ_RESPONSE_MIDDLE",
        0x0f => "RDMA_READ_RESPONSE_LAST",
        0x10 => "RDMA_READ_RESPONSE_ONLY",
        0x11 => "ACKNOWLEDGE",
        0x12 => "ATOMIC_ACKNOWLEDGE",
        0x13 => "CMP_SWAP",
        0x14 => "FETCH_ADD",
        0x16 => "SEND_LAST_WITH_INVALIDATE",
        0x17 => "SEND_ONLY_WITH_INVALIDATE",
        _ => return format!("OPCODE_{op:#04x}"),
    };
    match op >> 5 {
        0 => base.to_string(),
        1 => format!("UC_{base}"),
        2 => format!("RD_{base}"),
        3 => format!("UD_{base}"),
        _ => format!("OPCODE_{op:#04x}"),
    }
}

fn exts(op: u8) -> Exts {
    let mut e = Exts {
        deth: op >> 5 == 3,
        ..Exts::default()
    };
    match op & 0x1f {
        0x03 | 0x05 | 0x09 => e.imm = true,
        0x06 | 0x0a | 0x0c => e.reth = true,
        0x0b => {
            e.reth = true;
            e.imm = true;
        }
        0x0d | 0x0f | 0x10 | 0x11 => e.aeth = true,
        0x12 => {
            e.aeth = true;
            e.atomic_ack = true;
        }
        0x13 | 0x14 => e.atomic = true,
        0x16 | 0x17 => e.ieth = true,
        _ => {}
    }
    e
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

/// Decodes one Ethernet frame; `None` if it is not an IPv4 UDP datagram to or from port 4791
/// with a whole BTH.
pub fn decode_frame(frame: usize, f: &Frame) -> Option<Packet> {
    let d = &f.data;
    let mut off = 12;
    let mut ethertype = be(d.get(off..off + 2)?) as u16;
    off += 2;
    if ethertype == 0x8100 {
        ethertype = be(d.get(off + 2..off + 4)?) as u16;
        off += 4;
    }
    if ethertype != 0x0800 {
        return None;
    }
    let ip = d.get(off..)?;
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    if ip.len() < ihl + 8 || ip[9] != 17 {
        return None;
    }
    let src = [ip[12], ip[13], ip[14], ip[15]];
    let dst = [ip[16], ip[17], ip[18], ip[19]];
    let udp = &ip[ihl..];
    let (sport, dport) = (be(&udp[0..2]) as u16, be(&udp[2..4]) as u16);
    if dport != ROCE_PORT && sport != ROCE_PORT {
        return None;
    }
    let udp_len = (be(&udp[4..6]) as usize).min(udp.len());
    let ib = &udp[8..udp_len];
    if ib.len() < 12 {
        return None;
    }
    let dir = match (src, dst) {
        ([10, 77, 0, 1], [10, 77, 0, 2]) => Dir::AtoB,
        ([10, 77, 0, 2], [10, 77, 0, 1]) => Dir::BtoA,
        _ => Dir::Other,
    };
    let opcode = ib[0];
    let mut p = Packet {
        frame,
        ts_us: f.ts_us,
        dir,
        opcode,
        solicited: ib[1] & 0x80 != 0,
        pad: (ib[1] >> 4) & 0x3,
        dest_qp: be(&ib[5..8]) as u32,
        ack_req: ib[8] & 0x80 != 0,
        psn: be(&ib[9..12]) as u32,
        reth: None,
        aeth: None,
        atomic: None,
        orig: None,
        imm: None,
        inv_rkey: None,
        payload_len: 0,
        mad: None,
    };
    let e = exts(opcode);
    let mut o = 12;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = ib.get(o..o + n)?;
        o += n;
        Some(s)
    };
    if e.deth {
        take(8)?;
    }
    if e.reth {
        let r = take(16)?;
        p.reth = Some(Reth {
            va: be(&r[0..8]),
            rkey: be(&r[8..12]) as u32,
            dma_len: be(&r[12..16]) as u32,
        });
    }
    if e.atomic {
        let a = take(28)?;
        p.atomic = Some(AtomicEth {
            va: be(&a[0..8]),
            rkey: be(&a[8..12]) as u32,
            swap_add: be(&a[12..20]),
            compare: be(&a[20..28]),
        });
    }
    if e.aeth {
        let a = take(4)?;
        p.aeth = Some(Aeth {
            syndrome: a[0],
            msn: be(&a[1..4]) as u32,
        });
    }
    if e.atomic_ack {
        p.orig = Some(be(take(8)?));
    }
    if e.imm {
        p.imm = Some(be(take(4)?) as u32);
    }
    if e.ieth {
        p.inv_rkey = Some(be(take(4)?) as u32);
    }
    // What is left: payload, pad, ICRC (4 bytes).
    p.payload_len = ib.len().saturating_sub(o + usize::from(p.pad) + 4);
    if e.deth && p.dest_qp == 1 {
        p.mad = ib.get(o..o + p.payload_len).and_then(parse_mad);
    }
    Some(p)
}

/// Every RoCE v2 packet of a pcap, in capture order.
pub fn decode_pcap(bytes: &[u8]) -> Result<Vec<Packet>> {
    Ok(read_pcap(bytes)?
        .iter()
        .enumerate()
        .filter_map(|(i, f)| decode_frame(i, f))
        .collect())
}
