//! The RoCE v2 decoder (`harness::wire`) on captures of the pair's wire committed under
//! `fixtures/wire/` (recorded with `--trace`; docs/wire.md lists how), host only:
//!
//! * `matches_tshark`: every field of every packet equals what tshark's own InfiniBand
//!   dissector reads from the same file (opcode, dest QP, PSN, AckReq, SE, pad, RETH, AETH,
//!   AtomicETH, AtomicAckETH, ImmDt, payload length, and the MADs of rdma_cm on QP1: class,
//!   method, attribute, transaction id, and the QPN and starting PSN of REQ and REP), and
//!   both see the same packets;
//! * `ladder_text`: the redacted ladder of each capture (snapshots);
//! * `expected_sequences`: what each chapter's capture must show (message split by path MTU,
//!   READ responses carrying an AETH on FIRST and LAST, the NAK, the atomics' acknowledgements,
//!   the RNR NAKs and their timer);
//! * `docs_svgs_are_current`: docs/wire/*.svg are what the trace command's `--update-docs` writes.

use harness::wire::decode::{AckKind, Packet, decode_pcap, opcode_name};
use harness::wire::ladder::ops;
use harness::wire::{docs, ladder};
use rstest::rstest;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/wire")
        .join(name)
}

fn packets(name: &str) -> Vec<Packet> {
    let bytes = std::fs::read(fixture(name)).expect("fixture");
    decode_pcap(&bytes).expect("decode")
}

const FIELDS: &[&str] = &[
    "frame.number",
    "ip.src",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.bth.se",
    "infiniband.bth.padcnt",
    // tshark 4.0 shows the AtomicETH's address and key under the RETH's field names.
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
    "infiniband.deth.q_key",
    "infiniband.mad.mgmtclass",
    "infiniband.mad.method",
    "infiniband.mad.attributeid",
    "infiniband.mad.transactionid",
    "infiniband.cm.req.localqpn",
    "infiniband.cm.req.startpsn",
    "infiniband.cm.rep.localqpn",
    "infiniband.cm.rep.startpsn",
    // The bytes after the headers: payload and pad (the decoder counts the payload alone);
    // tshark 4.0 shows no data for some SEND payloads (a heuristic takes them), so the UDP
    // length checks the sum of the parts as well.
    "data.len",
    "udp.length",
];

fn tshark_rows(file: &Path) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(file)
        .args(["-Y", "infiniband", "-T", "fields", "-E", "separator=|"])
        .args(["-E", "occurrence=f"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap_or_else(|e| {
        panic!(
            "running tshark: {e}; install it: `cargo lab setup` (scripts/setup.sh installs tshark)"
        )
    });
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

fn num(s: &str) -> Option<u64> {
    if s.is_empty() {
        None
    } else if let Some(h) = s.strip_prefix("0x") {
        Some(u64::from_str_radix(h, 16).unwrap())
    } else {
        Some(s.parse().unwrap())
    }
}

fn flag(s: &str) -> bool {
    matches!(s, "1" | "True" | "true")
}

#[rstest]
#[case("06-send-4k-mtu1024.pcap")]
#[case("07-write-imm.pcap")]
#[case("09-read-and-nak.pcap")]
#[case("10-atomics.pcap")]
#[case("12-cm.pcap")]
#[case("13-rnr.pcap")]
fn matches_tshark(#[case] name: &str) {
    let ours = packets(name);
    let theirs = tshark_rows(&fixture(name));
    assert_eq!(ours.len(), theirs.len(), "packet count, {name}");
    assert!(!ours.is_empty());
    for (p, r) in ours.iter().zip(&theirs) {
        let f = |field: &str| r[FIELDS.iter().position(|x| *x == field).unwrap()].as_str();
        let at = format!(
            "{name} frame {} ({})",
            f("frame.number"),
            opcode_name(p.opcode)
        );
        assert_eq!(p.frame as u64 + 1, num(f("frame.number")).unwrap(), "{at}");
        let src = match p.dir {
            harness::wire::Dir::AtoB => "10.77.0.1",
            harness::wire::Dir::BtoA => "10.77.0.2",
            harness::wire::Dir::Other => "?",
        };
        assert_eq!(src, f("ip.src"), "{at}: direction");
        assert_eq!(
            Some(u64::from(p.opcode)),
            num(f("infiniband.bth.opcode")),
            "{at}"
        );
        assert_eq!(
            Some(u64::from(p.dest_qp)),
            num(f("infiniband.bth.destqp")),
            "{at}"
        );
        assert_eq!(Some(u64::from(p.psn)), num(f("infiniband.bth.psn")), "{at}");
        assert_eq!(p.ack_req, flag(f("infiniband.bth.a")), "{at}: AckReq");
        assert_eq!(p.solicited, flag(f("infiniband.bth.se")), "{at}: SE");
        assert_eq!(
            Some(u64::from(p.pad)),
            num(f("infiniband.bth.padcnt")),
            "{at}"
        );
        let (va, rkey) = match (p.reth, p.atomic) {
            (Some(r), _) => (Some(r.va), Some(u64::from(r.rkey))),
            (_, Some(a)) => (Some(a.va), Some(u64::from(a.rkey))),
            _ => (None, None),
        };
        assert_eq!(va, num(f("infiniband.reth.va")), "{at}: va");
        assert_eq!(rkey, num(f("infiniband.reth.r_key")), "{at}: rkey");
        assert_eq!(
            p.reth.map(|r| u64::from(r.dma_len)),
            num(f("infiniband.reth.dmalen")),
            "{at}: dma length"
        );
        assert_eq!(
            p.aeth.map(|a| u64::from(a.syndrome)),
            num(f("infiniband.aeth.syndrome")),
            "{at}: syndrome"
        );
        assert_eq!(
            p.aeth.map(|a| u64::from(a.msn)),
            num(f("infiniband.aeth.msn")),
            "{at}: msn"
        );
        assert_eq!(
            p.atomic.map(|a| a.swap_add),
            num(f("infiniband.atomiceth.swapdt")),
            "{at}: swap/add"
        );
        assert_eq!(
            p.atomic.map(|a| a.compare),
            num(f("infiniband.atomiceth.cmpdt")),
            "{at}: compare"
        );
        assert_eq!(
            p.orig,
            num(f("infiniband.atomicacketh.origremdt")),
            "{at}: orig"
        );
        assert_eq!(
            p.imm.map(|i| format!("{i:08x}")).unwrap_or_default(),
            f("infiniband.immdt"),
            "{at}: immediate"
        );
        let mad = p.mad;
        assert_eq!(
            mad.map(|m| u64::from(m.class)),
            num(f("infiniband.mad.mgmtclass")),
            "{at}: MAD class"
        );
        assert_eq!(
            mad.map(|m| u64::from(m.method)),
            num(f("infiniband.mad.method")),
            "{at}: MAD method"
        );
        assert_eq!(
            mad.map(|m| u64::from(m.attr_id)),
            num(f("infiniband.mad.attributeid")),
            "{at}: MAD attribute"
        );
        assert_eq!(
            mad.map(|m| m.tid),
            num(f("infiniband.mad.transactionid")),
            "{at}: MAD transaction id"
        );
        let (qpn, psn) = match mad.map(|m| m.attr_id) {
            Some(0x0010) => ("infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn"),
            _ => ("infiniband.cm.rep.localqpn", "infiniband.cm.rep.startpsn"),
        };
        assert_eq!(
            mad.and_then(|m| m.qpn).map(u64::from),
            num(f(qpn)),
            "{at}: CM QPN"
        );
        assert_eq!(
            mad.and_then(|m| m.start_psn).map(u64::from),
            num(f(psn)),
            "{at}: CM starting PSN"
        );
        if let Some(data) = num(f("data.len")) {
            assert_eq!(
                p.payload_len as u64 + u64::from(p.pad),
                data,
                "{at}: payload + pad"
            );
        }
        // UDP length = UDP header + BTH + the extension headers tshark found + payload + pad
        // + ICRC.
        let ext: u64 = [
            (f("infiniband.reth.dmalen"), 16),
            (f("infiniband.atomiceth.swapdt"), 28),
            (f("infiniband.aeth.msn"), 4),
            (f("infiniband.atomicacketh.origremdt"), 8),
            (f("infiniband.immdt"), 4),
            (f("infiniband.deth.q_key"), 8),
        ]
        .iter()
        .filter(|(v, _)| !v.is_empty())
        .map(|(_, n)| *n)
        .sum();
        assert_eq!(
            num(f("udp.length")).unwrap(),
            8 + 12 + ext + p.payload_len as u64 + u64::from(p.pad) + 4,
            "{at}: the UDP length"
        );
    }
}

#[rstest]
#[case("06-send-4k-mtu1024.pcap")]
#[case("07-write-imm.pcap")]
#[case("09-read-and-nak.pcap")]
#[case("10-atomics.pcap")]
#[case("12-cm.pcap")]
#[case("13-rnr.pcap")]
fn ladder_text(#[case] name: &str) {
    let text = harness::redact::redact(&ladder::text(&packets(name)));
    insta::with_settings!({ snapshot_suffix => name.trim_end_matches(".pcap") }, {
        insta::assert_snapshot!("ladder", text);
    });
}

#[test]
fn expected_sequences() {
    // 06: 4096 bytes at path MTU 1024 is FIRST, MIDDLE, MIDDLE, LAST (AckReq on the LAST
    // only), then a single ACK for the whole message, each way.
    let p = packets("06-send-4k-mtu1024.pcap");
    let one_way = [
        "SEND_FIRST",
        "SEND_MIDDLE",
        "SEND_MIDDLE",
        "SEND_LAST",
        "ACKNOWLEDGE",
    ];
    let got = ops(&p);
    for (i, want) in one_way.iter().enumerate() {
        assert!(got[i].ends_with(want), "{got:?}");
        assert!(got[i + 5].ends_with(want), "{got:?}");
    }
    assert!(p[..4].iter().all(|x| x.payload_len == 1024));
    assert_eq!(
        p.iter()
            .filter(|x| x.ack_req)
            .map(|x| x.opcode)
            .collect::<Vec<_>>(),
        [0x02, 0x02]
    );
    assert_eq!(p[4].psn, p[3].psn, "the ACK acknowledges the LAST's PSN");

    // 07: WRITE_ONLY, ACK, WRITE_ONLY_WITH_IMMEDIATE (with its immediate), ACK.
    let p = packets("07-write-imm.pcap");
    assert_eq!(
        ops(&p),
        [
            "a <- b RDMA_WRITE_ONLY",
            "a -> b ACKNOWLEDGE",
            "a <- b RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            "a -> b ACKNOWLEDGE"
        ]
    );
    assert_eq!(p[2].imm, Some(0xc0ff_ee07));
    assert_eq!(p[0].reth.unwrap().dma_len as usize, p[0].payload_len);

    // 09: a 4 KiB READ comes back as RESPONSE_FIRST, MIDDLE, MIDDLE, LAST; FIRST and LAST
    // carry an AETH, MIDDLE none; the forged rkey gets a NAK (remote access error).
    let p = packets("09-read-and-nak.pcap");
    let i = p
        .iter()
        .position(|x| x.opcode == 0x0c)
        .expect("a READ_REQUEST");
    let resp: Vec<&Packet> = p[i + 1..i + 5].iter().collect();
    assert_eq!(
        resp.iter().map(|x| x.opcode).collect::<Vec<_>>(),
        [0x0d, 0x0e, 0x0e, 0x0f]
    );
    assert!(resp[0].aeth.is_some() && resp[3].aeth.is_some());
    assert!(resp[1].aeth.is_none() && resp[2].aeth.is_none());
    assert_eq!(
        resp[0].psn, p[i].psn,
        "the response starts at the request's PSN"
    );
    let nak = p
        .iter()
        .find_map(|x| x.aeth.filter(|a| matches!(a.kind(), AckKind::Nak { .. })));
    assert_eq!(nak.map(|a| a.kind()), Some(AckKind::Nak { code: 2 }));

    // 10: each FETCH_ADD and CMP_SWAP is answered by an ATOMIC_ACKNOWLEDGE with the old value.
    let p = packets("10-atomics.pcap");
    let counter = p
        .iter()
        .find(|x| x.opcode == 0x14)
        .unwrap()
        .atomic
        .unwrap()
        .va;
    let mut fa = vec![];
    for (i, x) in p.iter().enumerate() {
        if x.opcode == 0x13 || x.opcode == 0x14 {
            let ack = p[i + 1..]
                .iter()
                .find(|y| y.psn == x.psn && y.dir != x.dir)
                .expect("an answer");
            assert_eq!(ack.opcode, 0x12, "{}", opcode_name(ack.opcode));
            if x.opcode == 0x14 && x.atomic.unwrap().va == counter {
                fa.push(ack.orig.unwrap());
            }
        }
    }
    assert!(p.iter().any(|x| x.opcode == 0x13), "a CMP_SWAP");
    // 13: the same SEND_ONLY (one PSN) answered by RNR NAKs with the receiver's timer (20:
    // 10.24 ms), until the receive is posted and an ACK ends it.
    let p13 = packets("13-rnr.pcap");
    let psn = p13[0].psn;
    assert!(p13.iter().all(|x| x.psn == psn), "one PSN throughout");
    let acks: Vec<AckKind> = p13
        .iter()
        .filter_map(|x| x.aeth.map(|a| a.kind()))
        .collect();
    assert!(acks.len() >= 3, "{acks:?}");
    assert!(
        acks[..acks.len() - 1]
            .iter()
            .all(|k| *k == AckKind::RnrNak { timer: 20 })
    );
    assert!(matches!(acks.last(), Some(AckKind::Ack { .. })));
    assert_eq!(harness::wire::decode::rnr_timer_us(20), 10_240.0);
    assert_eq!(fa, [0, 1], "the counter's old values");

    // 12: rdma_cm's connection is three MADs to QP1 (REQ from the client b, REP, RTU), its
    // end two more (DREQ, DREP). The QPN and starting PSN in the REP are what b's first
    // request then carries.
    let p12 = packets("12-cm.pcap");
    let cm: Vec<(harness::wire::Dir, &str)> = p12
        .iter()
        .filter_map(|x| {
            x.mad
                .map(|m| (x.dir, harness::wire::decode::cm_attr_name(m.attr_id)))
        })
        .collect();
    use harness::wire::Dir::{AtoB, BtoA};
    assert_eq!(
        cm,
        [
            (BtoA, "ConnectRequest"),
            (AtoB, "ConnectReply"),
            (BtoA, "ReadyToUse"),
            (BtoA, "DisconnectRequest"),
            (AtoB, "DisconnectReply"),
        ]
    );
    assert!(
        p12.iter()
            .filter(|x| x.mad.is_some())
            .all(|x| x.dest_qp == 1 && x.opcode == 0x64)
    );
    let rep = p12[1].mad.unwrap();
    let first = p12.iter().find(|x| x.mad.is_none()).unwrap();
    assert_eq!(
        Some(first.dest_qp),
        rep.qpn,
        "b sends to the QPN of a's REP"
    );
    assert_eq!(
        Some(first.psn),
        rep.start_psn,
        "... starting at the REP's PSN"
    );
    let req = p12[0].mad.unwrap();
    let back = p12
        .iter()
        .find(|x| x.dir == AtoB && x.mad.is_none())
        .unwrap();
    assert_eq!(Some(back.dest_qp), req.qpn, "a answers the QPN of b's REQ");
}

#[test]
fn docs_svgs_are_current() {
    let root = root();
    for (fixture, svg, title) in docs::DOC_TRACES {
        let want = docs::render(&root, fixture, title).unwrap();
        let path = root.join("docs/wire").join(svg);
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is not what {fixture} renders; run `cargo lab trace --update-docs`",
            path.display()
        );
        assert!(have.starts_with("<svg ") && have.trim_end().ends_with("</svg>"));
        assert!(have.contains("<g class=\"row\">"));
    }
}

#[test]
fn not_a_pcap_is_a_clear_error() {
    let e = decode_pcap(b"hello, this is text, not a capture").unwrap_err();
    assert!(e.to_string().contains("not a pcap file"), "{e}");
    let e = decode_pcap(b"short").unwrap_err();
    assert!(e.to_string().contains("shorter than its header"), "{e}");
}
