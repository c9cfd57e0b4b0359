//! Each fault of `harness::wire::fault` (what the `fault` command applies), on the microVM pair,
//! checked with plain traffic and then checked gone:
//!
//! * node a sends N numbered UDP datagrams to node b's port 4791 (the RoCE v2 port, which the
//!   impairments target) and, with each, one to port 9 (a control that must stay clean); the
//!   wire is recorded on node a's netdev, after a's qdiscs: what the capture holds is what
//!   crossed the wire;
//! * loss, duplicate, corrupt, reorder and delay each show in the RoCE datagrams alone;
//! * a partition stops ping one way or both, and `heal` restores it; a frozen node answers
//!   nothing until thawed;
//! * a killed node answers nothing and the lab stays up (node a still runs commands); once
//!   restarted it is a fresh VM that answers again; `clear` restarts a killed node too;
//! * after `clear` no qdisc and no frozen node is left, and all N datagrams cross again.

use contracts::HostRequest;
use harness::Node;
use harness::StateDir;
use harness::conn::Cmd;
use harness::proto::ExitStatus;
use harness::testbed::{Testbed, generation};
use harness::testing::{lock, wire_lab};
use harness::wire::Capture;
use harness::wire::decode::{Frame, read_pcap};
use harness::wire::fault::{self, ClearOnDrop, Impair};
use std::time::Duration;

const N: usize = 100;

/// Sends N pairs of datagrams (port 4791, port 9) from node a, 1 ms apart. The sleep paces
/// the traffic, it waits for nothing: spread over 100 ms, the stream outlasts netem's 10 ms
/// reorder delay many times, so a delayed datagram is overtaken by the next ones (in one burst
/// every delayed datagram would land after all the others: a single inversion).
const SENDER: &str = r#"
import socket, sys, time
n = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(n):
    for port in (4791, 9):
        s.sendto(b"lab%06d" % i + b"x" * 64, ("10.77.0.2", port))
    time.sleep(0.001)
"#;

/// A UDP datagram from a to b, as captured.
struct Dgram {
    dport: u16,
    seq: Option<usize>,
    ts_us: u64,
    valid: bool,
}

fn csum(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u32::from(u16::from_be_bytes([c[0], c[1]]))
        } else {
            u32::from(c[0]) << 8
        };
        sum += w;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn dgram(f: &Frame) -> Option<Dgram> {
    let d = &f.data;
    if d.len() < 42 || d[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &d[14..];
    let ihl = usize::from(ip[0] & 0xf) * 4;
    // From a (10.77.0.1 whatever the corruption did to the rest), UDP.
    if ip[9] != 17 || ip[12..16] != [10, 77, 0, 1] || ip.len() < ihl + 8 {
        return None;
    }
    let udp = &ip[ihl..];
    let len = usize::from(u16::from_be_bytes([udp[4], udp[5]])).min(udp.len());
    let ip_ok = csum(&ip[..ihl], 0) == 0;
    let mut pseudo = 0u32;
    for c in ip[12..20].chunks(2) {
        pseudo += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    pseudo += 17 + len as u32;
    let udp_ok = csum(&udp[..len], pseudo) == 0;
    let payload = &udp[8..len];
    let seq = std::str::from_utf8(payload.get(3..9)?)
        .ok()
        .and_then(|s| s.parse().ok());
    let body_ok = payload.len() == 73
        && payload.starts_with(b"lab")
        && payload[9..].iter().all(|&b| b == b'x');
    Some(Dgram {
        dport: u16::from_be_bytes([udp[2], udp[3]]),
        seq,
        ts_us: f.ts_us,
        valid: ip_ok && udp_ok && body_ok,
    })
}

/// Sends the datagrams with the wire recorded; returns (to 4791, to 9).
fn send(lab: &Testbed) -> (Vec<Dgram>, Vec<Dgram>) {
    let file = std::env::temp_dir().join(format!("rxe-lab-faults.{}.pcap", std::process::id()));
    let cap = Capture::start(lab, &file).expect("capture");
    let out = lab
        .run(
            Node::A,
            &Cmd::new(["python3", "-c", SENDER, &N.to_string()]),
            Duration::from_secs(60),
        )
        .expect("run the sender");
    assert_eq!(
        out.status,
        ExitStatus::Code(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Delayed and reordered datagrams leave a's qdisc up to ~100 ms late: wait until its
    // queues are empty.
    drained(lab, Node::A);
    let bytes = cap.stop().expect("stop the capture");
    let _ = std::fs::remove_file(&file);
    let all: Vec<Dgram> = read_pcap(&bytes)
        .unwrap()
        .iter()
        .filter_map(dgram)
        .collect();
    let (roce, rest): (Vec<Dgram>, Vec<Dgram>) = all.into_iter().partition(|d| d.dport == 4791);
    (roce, rest.into_iter().filter(|d| d.dport == 9).collect())
}

/// Waits until every qdisc on the node's wire interface holds nothing (`backlog 0b 0p` in
/// `tc -s qdisc`), within 10 s.
fn drained(lab: &Testbed, n: Node) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let show = Cmd::new(["tc", "-s", "qdisc", "show", "dev", fault::IFACE]);
    loop {
        let out = lab
            .run(n, &show, Duration::from_secs(20))
            .expect("tc -s qdisc");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let backlogs: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("backlog "))
            .collect();
        assert!(!backlogs.is_empty(), "no backlog in tc's output:\n{text}");
        if backlogs.iter().all(|b| b.starts_with("0b 0p")) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node {n}'s qdiscs still hold packets after 10 s:\n{text}"
        );
        // The poll interval of this deadline loop (each look is a command in the guest).
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ping(lab: &Testbed, from: Node, to: &str) -> bool {
    let out = lab
        .run(
            from,
            &Cmd::new(["busybox", "ping", "-c", "1", "-W", "2", to]),
            Duration::from_secs(20),
        )
        .expect("ping");
    out.status == ExitStatus::Code(0)
}

/// `cargo lab fault status`'s lines.
fn status_text(lab: &Testbed) -> String {
    let lines: Vec<String> = fault::status(lab)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    lines.join("\n")
}

fn assert_clean(lab: &Testbed) {
    fault::clear(lab).expect("clear");
    assert!(
        !fault::any_active(lab).unwrap(),
        "{:?}",
        fault::status(lab).unwrap()
    );
    let (roce, ctl) = send(lab);
    assert_eq!((roce.len(), ctl.len()), (N, N), "after clear");
    assert!(roce.iter().all(|d| d.valid));
}

fn in_range(what: &str, got: usize, lo: f64, hi: f64) {
    let (lo, hi) = ((N as f64 * lo) as usize, (N as f64 * hi) as usize);
    assert!(
        (lo..=hi).contains(&got),
        "{what}: {got} datagrams, expected {lo}..={hi}"
    );
}

#[test]
fn impairments_hit_roce_only_and_clear_removes_them() {
    let lab = wire_lab();
    let _g = lock(&lab);
    let _clear = ClearOnDrop(&lab);
    assert_clean(&lab);

    fault::impair(&lab, &[Node::A], Impair::Loss(50.0)).unwrap();
    let (roce, ctl) = send(&lab);
    in_range("loss 50%", roce.len(), 0.3, 0.7);
    assert_eq!(ctl.len(), N, "the control traffic is not impaired");
    let st = status_text(&lab);
    assert!(st.contains("loss 50% on RoCE only"), "{st}");
    fault::clear(&lab).unwrap();

    fault::impair(&lab, &[Node::A], Impair::Duplicate(50.0)).unwrap();
    let (roce, ctl) = send(&lab);
    in_range("duplicate 50%", roce.len(), 1.3, 1.7);
    assert_eq!(ctl.len(), N);
    fault::clear(&lab).unwrap();

    fault::impair(&lab, &[Node::A], Impair::Corrupt(50.0)).unwrap();
    let (roce, ctl) = send(&lab);
    let bad = roce.iter().filter(|d| !d.valid).count();
    // A flipped bit in the port field moves a datagram out of the 4791 set: a few fewer.
    in_range("corrupt 50%: invalid", bad, 0.25, 0.7);
    assert!(ctl.iter().all(|d| d.valid) && ctl.len() == N);
    fault::clear(&lab).unwrap();

    fault::impair(&lab, &[Node::A], Impair::Reorder(50.0)).unwrap();
    let (roce, ctl) = send(&lab);
    assert_eq!(roce.len(), N, "reordering loses nothing");
    let seqs: Vec<usize> = roce.iter().filter_map(|d| d.seq).collect();
    let inversions = seqs.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(inversions > 10, "reorder 50%: {inversions} inversions");
    let cseq: Vec<usize> = ctl.iter().filter_map(|d| d.seq).collect();
    assert!(
        cseq.windows(2).all(|w| w[0] < w[1]),
        "the control stays in order"
    );
    fault::clear(&lab).unwrap();

    fault::impair(
        &lab,
        &[Node::A],
        Impair::Delay {
            ms: 50.0,
            jitter_ms: 0.0,
        },
    )
    .unwrap();
    let (roce, ctl) = send(&lab);
    assert_eq!(roce.len(), N);
    let mut lag: Vec<i64> = roce
        .iter()
        .filter_map(|r| {
            let c = ctl.iter().find(|c| c.seq == r.seq)?;
            Some(r.ts_us as i64 - c.ts_us as i64)
        })
        .collect();
    lag.sort();
    let median = lag[lag.len() / 2];
    assert!(
        (45_000..150_000).contains(&median),
        "delay 50ms: the RoCE datagrams trail the control by {median} us (median)"
    );
    assert_clean(&lab);
}

#[test]
fn partition_heal_freeze_thaw() {
    let lab = wire_lab();
    let _g = lock(&lab);
    let _clear = ClearOnDrop(&lab);
    fault::clear(&lab).unwrap();
    assert!(ping(&lab, Node::A, "10.77.0.2"));

    // One direction: what a sends is lost; an echo needs both ways, so both pings fail, but
    // b's packets still reach a (the capture on a's netdev sees b's requests).
    fault::partition(&lab, &[Node::A]).unwrap();
    assert!(!ping(&lab, Node::A, "10.77.0.2"), "a -> b is cut");
    let st = status_text(&lab);
    assert!(
        st.contains("node a: running, netem loss 100% on everything"),
        "{st}"
    );
    assert!(st.contains("node b: running, no fault"), "{st}");
    fault::heal(&lab, &[Node::A]).unwrap();
    assert!(ping(&lab, Node::A, "10.77.0.2"), "healed");

    fault::partition(&lab, &[Node::A, Node::B]).unwrap();
    assert!(!ping(&lab, Node::B, "10.77.0.1"));
    fault::heal(&lab, &[Node::A, Node::B]).unwrap();
    assert!(ping(&lab, Node::B, "10.77.0.1"));

    let dir = fault::lab_dir(&lab).unwrap();
    harness::qmp::freeze(&dir, Node::B).unwrap();
    assert!(harness::qmp::frozen(&dir, Node::B).unwrap());
    assert!(
        !ping(&lab, Node::A, "10.77.0.2"),
        "a frozen node answers nothing"
    );
    harness::qmp::thaw(&dir, Node::B).unwrap();
    assert!(!harness::qmp::frozen(&dir, Node::B).unwrap());
    assert!(ping(&lab, Node::A, "10.77.0.2"), "thawed");

    // clear thaws too.
    harness::qmp::freeze(&dir, Node::A).unwrap();
    fault::clear(&lab).unwrap();
    assert!(!fault::any_active(&lab).unwrap());
    assert!(ping(&lab, Node::B, "10.77.0.1"));
}

/// The file that marks a node's running VM: /run is a tmpfs in the guest's memory, so only the
/// VM that wrote it has it (a restarted node is a new VM, cold-booted or restored from a
/// snapshot saved before anything was written).
const MARK: &str = "/run/rxe-lab-wire-faults-mark";

fn marked(lab: &Testbed, n: Node) -> bool {
    let out = lab
        .run(n, &Cmd::new(["test", "-e", MARK]), Duration::from_secs(20))
        .expect("test the mark");
    out.status == ExitStatus::Code(0)
}

#[test]
fn kill_restart_and_clear() {
    let lab = wire_lab();
    let _g = lock(&lab);
    let _clear = ClearOnDrop(&lab);
    fault::clear(&lab).unwrap();
    let dir = fault::lab_dir(&lab).unwrap();
    let g0 = generation(&dir, Node::B);
    assert!(ping(&lab, Node::A, "10.77.0.2"));
    let out = lab
        .run(Node::B, &Cmd::new(["touch", MARK]), Duration::from_secs(20))
        .expect("mark node b's VM");
    assert_eq!(out.status, ExitStatus::Code(0), "touch {MARK}");
    assert!(marked(&lab, Node::B), "the mark is there before the kill");

    let said = lab.host(HostRequest::Kill(Node::B)).unwrap();
    assert!(said.contains("node b killed"), "{said}");
    assert!(StateDir::at(&dir).killed(Node::B).exists());
    let st = status_text(&lab);
    assert!(st.contains("node b: killed"), "{st}");
    // The lab is up: node a still runs commands, and nothing answers it from b.
    assert!(
        !ping(&lab, Node::A, "10.77.0.2"),
        "a killed node answers nothing"
    );

    let said = lab.host(HostRequest::Restart(Node::B)).unwrap();
    assert!(said.contains("node b restarted"), "{said}");
    assert!(!StateDir::at(&dir).killed(Node::B).exists());
    assert_eq!(generation(&dir, Node::B), g0 + 1);
    assert!(
        ping(&lab, Node::A, "10.77.0.2"),
        "the restarted node answers"
    );
    assert!(
        !marked(&lab, Node::B),
        "a fresh VM: the old VM's {MARK} is gone"
    );

    // clear brings a killed node back.
    lab.host(HostRequest::Kill(Node::B)).unwrap();
    fault::clear(&lab).unwrap();
    assert_eq!(generation(&dir, Node::B), g0 + 2);
    assert!(!fault::any_active(&lab).unwrap());
    assert!(ping(&lab, Node::B, "10.77.0.1"));
    // A request the host does not know is refused with what it knows (the owner parses each
    // line it is sent with this parse).
    let e = "explode b".parse::<HostRequest>().unwrap_err().to_string();
    assert!(e.contains("freeze, thaw, kill or restart"), "{e}");
}
