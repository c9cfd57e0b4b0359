//! # Chapter 01: devices, ports and the GID table
//!
//! Before any data moves, an RDMA program has to find a device, open it, and learn three
//! things about it: what it can do (its capabilities), whether its port is up and with which
//! MTU, and which entry of its GID table (its list of addresses) to use. This chapter does
//! exactly that, on the lab's SoftRoCE device `rxe0`, and explains every number it prints.
//!
//! Verbs introduced (each maps to a `lab` call of the same name):
//!
//! | C verb | `lab` | what it does |
//! |---|---|---|
//! | `ibv_get_device_list` | [`lab::devices`] | lists the RDMA devices of this machine |
//! | `ibv_open_device` | [`lab::Context::open`] | opens one: the context every later object hangs off |
//! | `ibv_query_device` | [`lab::Context::query_device`] | the device's limits and capabilities |
//! | `ibv_query_port` | [`lab::Context::query_port`] | a port's state, MTUs, link layer |
//! | `ibv_query_gid_ex` | [`lab::Context::query_gid`], [`lab::Context::gid_table`] | one GID table entry with its type |
//! | `ibv_close_device` | [`lab::Context::close`] | closes the device |
//!
//! Step 7 also borrows, ahead of their own chapters, `ibv_alloc_pd` (02), `ibv_create_cq` (04),
//! `ibv_create_qp` and `ibv_modify_qp` (05): just enough of a queue pair to show the kernel
//! refusing the wrong source GID.
//!
//! Run it: `cargo lab run 01` (or `cargo lab exec -- target/debug/ch01-devices` with a lab up).
//! Options: `-d DEVICE` picks a device by name (default: `$LAB_DEVICE`, else the first one);
//! `-i PORT` picks the port (default 1). The lab's network is pinned (veth0 has MAC
//! 52:54:00:00:00:01 and 10.99.0.1), so every GUID and GID below is the same on every run.

use std::process::ExitCode;

use clap::Parser;

// `say!` prints a line wrapped at 96 columns (continuation lines indented two more spaces).
// Every step returns `Result` (the course's `Outcome`): a value, or a `Failure` whose message
// `main` prints after `ch01-devices: error: ` (lab's errors name the verb, the errno and, for
// classic mistakes, a hint).
use course::Outcome as Result;
use course::kernel::{KernelVersion, RxeChange};
use course::say;
use course::show::{self, Align, Table};
use lab::{Context, GidEntry, GidType, InitAttr, LinkLayer, Mtu, PortState, QpInitAttr, RtrAttr};

/// The command line (clap: `--help` and a clear message with exit status 2 for a bad flag).
#[derive(Parser, Debug)]
#[command(
    name = "ch01-devices",
    about = "Devices, ports and the GID table: open a device, read its attributes, pick the \
             RoCE v2 GID"
)]
struct Args {
    /// The RDMA device to open (default: $LAB_DEVICE, else the first)
    #[arg(short = 'd', long, value_name = "DEVICE")]
    device: Option<String>,
    /// The port to query, from 1
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..))]
    port: u8,
}

fn main() -> ExitCode {
    let args = Args::parse();
    course::exit_code_of("ch01-devices", run(&args))
}

fn run(args: &Args) -> Result<()> {
    println!("ch01-devices: devices, ports and the GID table");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 1: list the RDMA devices (ibv_get_device_list)");
    // The list comes from /sys/class/infiniband: hardware NICs (mlx5_0, ...) and software
    // devices (rxe0 for SoftRoCE, siw0 for soft-iWARP) look the same from here.
    let list = lab::devices()?;
    if list.is_empty() {
        return Err(
            "no RDMA device: run inside the lab (`cargo lab run 01`) or create one \
                    with `rdma link add rxe0 type rxe netdev eth0`"
                .into(),
        );
    }
    let mut t = Table::new([
        ("name", Align::Left),
        ("node type", Align::Left),
        ("node GUID", Align::Left),
    ])
    .indent(2);
    for d in &list {
        t.row([d.name.clone(), d.node_type.clone(), guid(d.guid)]);
    }
    say!("  {} device(s):", list.len());
    print!("{t}");
    println!();

    // -----------------------------------------------------------------------------------------
    // `-d`, else $LAB_DEVICE, else the first device (course::open_device's rule).
    let wanted = course::wanted_device(args.device.as_deref());
    println!(
        "step 2: open {} (ibv_open_device)",
        wanted.as_deref().unwrap_or("the first device")
    );
    // The context is the root of everything: PDs, CQs, QPs and MRs are created from it and
    // keep it open (lab's objects hold a reference), so it is closed only after all of them.
    let ctx = Context::open(wanted.as_deref())?;
    say!(
        "  opened {}: the context every later object is created from",
        ctx.name()
    );
    explain_guid(&ctx, &list);
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 3: what the device can do (ibv_query_device)");
    let dev = ctx.query_device()?;
    let mut t = Table::new([
        ("capability", Align::Left),
        ("value", Align::Right),
        ("what it limits", Align::Left),
    ])
    .indent(2);
    t.row([
        "max_qp".to_string(),
        dev.max_qp.to_string(),
        "queue pairs (connections) at once".into(),
    ]);
    t.row([
        "max_qp_wr".to_string(),
        dev.max_qp_wr.to_string(),
        "work requests outstanding on one queue".into(),
    ]);
    t.row([
        "max_cq".to_string(),
        dev.max_cq.to_string(),
        "completion queues".into(),
    ]);
    t.row([
        "max_cqe".to_string(),
        dev.max_cqe.to_string(),
        "entries in one completion queue".into(),
    ]);
    t.row([
        "max_pd".to_string(),
        dev.max_pd.to_string(),
        "protection domains (chapter 02)".into(),
    ]);
    t.row([
        "max_mr".to_string(),
        dev.max_mr.to_string(),
        "registered memory regions (chapter 03)".into(),
    ]);
    t.row([
        "max_mr_size".to_string(),
        format!("{:#x}", dev.max_mr_size),
        "bytes in one memory region".into(),
    ]);
    t.row([
        "max_sge".to_string(),
        dev.max_sge.to_string(),
        "scatter/gather entries in one SEND/WRITE/RECV".into(),
    ]);
    t.row([
        "max_sge_rd".to_string(),
        dev.max_sge_rd.to_string(),
        "scatter/gather entries in one RDMA READ".into(),
    ]);
    t.row([
        "max_qp_rd_atom".to_string(),
        dev.max_qp_rd_atom.to_string(),
        "READs/atomics a QP serves at once (max_dest_rd_atomic)".into(),
    ]);
    t.row([
        "max_qp_init_rd_atom".to_string(),
        dev.max_qp_init_rd_atom.to_string(),
        "READs/atomics a QP issues at once (max_rd_atomic)".into(),
    ]);
    t.row([
        "max_srq".to_string(),
        dev.max_srq.to_string(),
        "shared receive queues".into(),
    ]);
    t.row([
        "max_mw".to_string(),
        dev.max_mw.to_string(),
        "memory windows (lab::mw; no chapter covers them)".into(),
    ]);
    print!("{t}");

    // Atomics: HCA means "atomic with respect to other atomics through this device", not with
    // respect to the CPU: don't mix CPU writes and RDMA atomics on the same word.
    say!(
        "  atomic_cap: {} ({}): {}",
        dev.atomic_cap.name(),
        atomic_cap_raw(dev.atomic_cap),
        match dev.atomic_cap {
            lab::AtomicCap::None => "no RDMA atomics on this device",
            lab::AtomicCap::Hca =>
                "compare-and-swap and fetch-and-add are atomic among RDMA atomics through this \
                 device, not against the CPU (chapter 10)",
            lab::AtomicCap::Glob => "atomic against the CPU too",
            lab::AtomicCap::Unknown(_) => "a value this chapter does not know",
        }
    );
    // Memory windows are advertised by device_cap_flags bits (verbs.h, enum ibv_device_cap_flags).
    let flag = |bit: u32| {
        if dev.device_cap_flags & bit != 0 {
            "yes"
        } else {
            "no"
        }
    };
    say!(
        "  memory windows: IBV_DEVICE_MEM_WINDOW {}, type 2A {}, type 2B {} \
         (a window re-grants part of an MR to a peer and can be revoked)",
        flag(IBV_DEVICE_MEM_WINDOW),
        flag(IBV_DEVICE_MEM_WINDOW_TYPE_2A),
        flag(IBV_DEVICE_MEM_WINDOW_TYPE_2B),
    );
    say!(
        "  RNR NAKs: IBV_DEVICE_RC_RNR_NAK_GEN {} (a receiver without a posted RECV asks the \
         sender to retry later)",
        flag(IBV_DEVICE_RC_RNR_NAK_GEN)
    );
    say!(
        "  ports: {} (phys_port_cnt); ports are numbered from 1",
        dev.phys_port_cnt
    );
    println!();

    // -----------------------------------------------------------------------------------------
    let port_num = args.port;
    println!("step 4: port {port_num} (ibv_query_port)");
    if port_num > dev.phys_port_cnt {
        return Err(format!(
            "{} has {} port(s); there is no port {port_num}",
            ctx.name(),
            dev.phys_port_cnt
        )
        .into());
    }
    let port = ctx.query_port(port_num)?;
    say!(
        "  state: {} ({}){}",
        port.state.name(),
        port.state,
        if port.state == PortState::Active {
            ": the port can carry traffic"
        } else {
            ": NOT active, QPs on it cannot connect (is the netdev up?)"
        }
    );
    say!(
        "  link_layer: {}{}",
        port.link_layer,
        match port.link_layer {
            LinkLayer::Ethernet => {
                ": this is RoCE (RDMA over Converged Ethernet): peers are addressed by GID \
                 (an IP address), there are no LIDs"
            }
            LinkLayer::InfiniBand => ": native InfiniBand: peers are addressed by LID",
            _ => "",
        }
    );
    say!("  lid: {} (0 on Ethernet)", port.lid);
    say!(
        "  max_msg_sz: {} bytes (the largest single message)",
        port.max_msg_sz
    );
    // rxe's reported value changed with the kernel (course::kernel::RxeChange); its limit on
    // posted work requests did not: 2 GiB on both.
    let fixed = RxeChange::PortMaxMsgSz2GiB;
    match KernelVersion::running() {
        Ok(k) if fixed.holds_on(k) => say!(
            "    (2 GiB: rxe's RXE_PORT_MAX_MSG_SZ since the fix {} in Linux {}, also in 6.6.76 \
             and 6.12.13; 8 MiB before)",
            fixed.commit(),
            fixed.since()
        ),
        Ok(_) => say!(
            "    (8 MiB: rxe's RXE_PORT_MAX_MSG_SZ before the fix {} in Linux {}, which makes it \
             2 GiB)",
            fixed.commit(),
            fixed.since()
        ),
        Err(e) => say!("    (which kernel rxe runs in: {e})"),
    }
    say!(
        "  max_mtu: {}, active_mtu: {}",
        port.max_mtu.bytes(),
        port.active_mtu.bytes()
    );
    // Why 1024: RoCE packets carry IP + UDP + the InfiniBand transport headers inside an
    // Ethernet frame, and IB MTUs come only in powers of two (256..4096). rxe subtracts its
    // worst-case header size (80 bytes) from the netdev's MTU and takes the largest IB MTU
    // that still fits. A path MTU above active_mtu is accepted by ibv_modify_qp, but between
    // two machines the larger packets are dropped silently (see chapter 08): lab clamps it.
    let entries = ctx.gid_table(port_num)?;
    let ndev = entries
        .first()
        .and_then(|e| netdev_name(ctx.name(), port_num, e.index));
    match ndev.as_deref().and_then(|n| netdev_mtu(n).map(|m| (n, m))) {
        Some((name, mtu)) => {
            let fits = mtu.checked_sub(RXE_MAX_HDR_LENGTH).and_then(largest_ib_mtu);
            say!(
                "  why {}: the port runs over netdev {name}, whose MTU is {mtu} bytes; minus \
                 {RXE_MAX_HDR_LENGTH} bytes of RoCE headers (rxe's worst case: IP, UDP, BTH and \
                 extension headers, ICRC) leaves {}; the largest IB MTU (256, 512, 1024, 2048, \
                 4096) that fits is {}",
                port.active_mtu.bytes(),
                mtu.saturating_sub(RXE_MAX_HDR_LENGTH),
                fits.map_or("none".to_string(), |m| m.bytes().to_string()),
            );
            if fits == Some(port.active_mtu) {
                let jumbo = if port.active_mtu < port.max_mtu {
                    format!(
                        " (max_mtu {} would need a jumbo-frame netdev)",
                        port.max_mtu.bytes()
                    )
                } else {
                    String::new()
                };
                say!(
                    "  so every QP here uses path_mtu <= {}{jumbo}",
                    port.active_mtu.bytes()
                );
            } else {
                say!("  (this device does not follow rxe's rule: it is probably a hardware NIC)");
            }
        }
        None => {
            say!("  (the netdev under this port is not visible in sysfs: cannot explain the MTU)")
        }
    }
    say!(
        "  gid_tbl_len: {} slots, {} in use",
        port.gid_tbl_len,
        entries.len()
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 5: the GID table of port {port_num} (ibv_query_gid_ex for each slot)");
    // A GID is the port's address for RDMA. On RoCE each entry is an IP address of the netdev,
    // written as IPv6 (an IPv4 address appears IPv4-mapped, ::ffff:a.b.c.d), plus a type:
    // RoCE v1 (raw Ethernet, not routable) or RoCE v2 (UDP/IP, port 4791, routable).
    let mut t = Table::new([
        ("index", Align::Right),
        ("gid", Align::Left),
        ("type", Align::Left),
        ("netdev", Align::Left),
        ("what it is", Align::Left),
    ])
    .indent(2);
    for e in &entries {
        t.row([
            e.index.to_string(),
            show::gid_bare(&e.gid.raw()).to_string(),
            e.gid_type.to_string(),
            netdev_name(ctx.name(), port_num, e.index).unwrap_or_else(|| "?".into()),
            describe(e),
        ]);
    }
    print!("{t}");
    let types: Vec<GidType> = entries.iter().map(|e| e.gid_type).collect();
    if !types.is_empty() && types.iter().all(|t| *t == GidType::RoceV2) {
        say!(
            "  every entry is RoCE v2: rxe speaks only RoCE v2 (a hardware RoCE NIC lists each \
             address twice, once per type, so the index of \"the\" address differs by machine)"
        );
    }
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 6: pick the GID for RoCE v2 over IPv4 (by content, not by number)");
    // Index 0 is the IPv6 link-local address (fe80::, derived from the MAC). It is valid only
    // on one link and cannot reach a peer addressed by IPv4: a QP whose sgid_index is 0 and
    // whose peer GID is ::ffff:a.b.c.d fails RTR with EINVAL. Index numbers also shift when
    // addresses are added or removed, and differ between machines: so search the table for a
    // RoCE v2 entry holding an IPv4-mapped address, as lab's roce_v2_ipv4_gid does.
    let chosen = ctx.roce_v2_ipv4_gid(port_num)?;
    say!(
        "  use sgid_index={} {} ({}, IPv4 {})",
        chosen.index,
        show::gid(&chosen.gid.raw()),
        chosen.gid_type,
        chosen
            .gid
            .to_ipv4()
            .map_or("?".to_string(), |v4| v4.to_string())
    );
    say!(
        "  this GID (with a QP number) is what a peer needs to reach this port: chapter 06 \
         exchanges it over TCP"
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 7: prove it: connect a QP with each source GID (ibv_modify_qp to RTR)");
    // Queue pairs are chapter 05's subject; here we only need one thing from them: moving a QP
    // to RTR ("ready to receive") names the peer (its GID) and the local source GID index, and
    // the kernel checks that the two can talk. The QP is connected to itself.
    let link_local = entries.iter().find(|e| e.gid.is_link_local());
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4, None)?;
    for candidate in link_local.into_iter().chain(std::iter::once(&chosen)) {
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
        let qpn = qp.qp_num();
        let qp = qp.to_init(&InitAttr::default())?;
        let rtr = RtrAttr::new(qpn, 0, chosen.gid).sgid_index(candidate.index as u8);
        let what = format!(
            "sgid_index={} ({}) toward {}:",
            candidate.index,
            show::gid_bare(&candidate.gid.raw()),
            show::gid(&chosen.gid.raw())
        );
        match qp.to_rtr(&rtr) {
            Ok(qp) => {
                say!("  {what} ok, the QP is in {}", qp.state()?.name());
                if candidate.gid.is_link_local() {
                    return Err("a link-local source GID toward an IPv4 peer was accepted: \
                                this kernel behaves differently from rxe on Linux 6.1"
                        .into());
                }
            }
            Err(e) => {
                let e = e.error();
                say!(
                    "  {what} ibv_modify_qp failed with {}",
                    e.errno().map_or("?".to_string(), |n| n.to_string())
                );
                for h in e.hints() {
                    say!("    lab's hint: {h}");
                }
                if !candidate.gid.is_link_local() {
                    return Err(format!("the RoCE v2 IPv4 GID was refused: {}", e.report()).into());
                }
            }
        }
    }
    say!(
        "  the link-local fe80:: entry is IPv6, valid on one link only, and cannot reach a peer \
         addressed by IPv4: pick the ::ffff:a.b.c.d entry, and find it by its content, because \
         the index differs between machines and changes when addresses come and go"
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 8: close the device (ibv_close_device)");
    // Explicit close returns the error instead of printing it from Drop; lab refuses while
    // child objects are alive, so the CQ and the PD go first (the QPs went at the end of each
    // loop iteration above).
    drop(cq);
    drop(pd);
    ctx.close()?;
    say!("  closed");
    println!();
    println!("done: next, chapter 02 allocates protection domains on this device");
    Ok(())
}

// verbs.h, enum ibv_device_cap_flags (chapters use no FFI types, so the bits are named here).
const IBV_DEVICE_RC_RNR_NAK_GEN: u32 = 1 << 12;
const IBV_DEVICE_MEM_WINDOW: u32 = 1 << 17;
const IBV_DEVICE_MEM_WINDOW_TYPE_2A: u32 = 1 << 23;
const IBV_DEVICE_MEM_WINDOW_TYPE_2B: u32 = 1 << 24;

/// rxe's worst-case header length (drivers/infiniband/sw/rxe/rxe_param.h, RXE_MAX_HDR_LENGTH):
/// what it subtracts from the netdev MTU before choosing the IB MTU.
const RXE_MAX_HDR_LENGTH: u32 = 80;

/// The largest IB MTU not above `bytes`.
fn largest_ib_mtu(bytes: u32) -> Option<Mtu> {
    [
        Mtu::Mtu4096,
        Mtu::Mtu2048,
        Mtu::Mtu1024,
        Mtu::Mtu512,
        Mtu::Mtu256,
    ]
    .into_iter()
    .find(|m| m.bytes() <= bytes)
}

/// `IBV_ATOMIC_*` as its C number.
fn atomic_cap_raw(c: lab::AtomicCap) -> u32 {
    match c {
        lab::AtomicCap::None => 0,
        lab::AtomicCap::Hca => 1,
        lab::AtomicCap::Glob => 2,
        lab::AtomicCap::Unknown(v) => v,
    }
}

/// A GUID as `ibv_devinfo` prints it: `5054:00ff:fe00:0001`.
fn guid(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// Explains where the node GUID comes from, when the device is a software device on a netdev
/// (`/sys/class/infiniband/<dev>/parent`) whose MAC gives that GUID by the EUI-64 rule.
fn explain_guid(ctx: &Context, list: &[lab::DeviceInfo]) {
    let Some(info) = list.iter().find(|d| d.name == ctx.name()) else {
        return;
    };
    let parent = std::fs::read_to_string(format!("/sys/class/infiniband/{}/parent", ctx.name()))
        .ok()
        .map(|s| s.trim().to_string());
    let Some(parent) = parent.filter(|p| !p.is_empty()) else {
        return;
    };
    let mac = std::fs::read_to_string(format!("/sys/class/net/{parent}/address"))
        .ok()
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    say!(
        "  {} is a software device on the netdev {parent} (MAC {mac})",
        ctx.name()
    );
    if eui64(&mac) == Some(info.guid) {
        say!(
            "  its node GUID {} is that MAC in EUI-64 form: ff:fe inserted in the middle and \
             the universal/local bit (0x02 of the first byte) flipped",
            guid(info.guid)
        );
    }
}

/// The EUI-64 identifier of a 48-bit MAC (`aa:bb:cc:dd:ee:ff` -> `(aa^02)bb:ccff:fedd:eeff`).
fn eui64(mac: &str) -> Option<u64> {
    let b: Vec<u8> = mac
        .split(':')
        .map(|x| u8::from_str_radix(x, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    let [b0, b1, b2, b3, b4, b5] = <[u8; 6]>::try_from(b).ok()?;
    Some(u64::from_be_bytes([
        b0 ^ 0x02,
        b1,
        b2,
        0xff,
        0xfe,
        b3,
        b4,
        b5,
    ]))
}

/// One line on what a GID entry is.
fn describe(e: &GidEntry) -> String {
    if let Some(v4) = e.gid.to_ipv4() {
        format!("IPv4 {v4}, IPv4-mapped: the kind RoCE v2 over IPv4 needs")
    } else if e.gid.is_link_local() {
        "IPv6 link-local, from the MAC: one link only".to_string()
    } else {
        "IPv6 address of the netdev".to_string()
    }
}

/// The netdev a GID entry belongs to, from sysfs
/// (`/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/ndevs/<index>`).
fn netdev_name(dev: &str, port: u8, index: u32) -> Option<String> {
    let p = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/ndevs/{index}");
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// A netdev's MTU (`/sys/class/net/<name>/mtu`).
fn netdev_mtu(name: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("ch01-devices").chain(v.iter().copied()))
    }

    #[test]
    fn args() {
        let a = parse(&["-d", "rxe0", "-i", "1"]).unwrap();
        assert_eq!(a.device.as_deref(), Some("rxe0"));
        assert_eq!(a.port, 1);
        assert_eq!(parse(&[]).unwrap().port, 1);
        assert_eq!(
            parse(&["--help"]).unwrap_err().kind(),
            clap::error::ErrorKind::DisplayHelp
        );
        for bad in [&["-i", "0"][..], &["-d"], &["x"]] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn mtu_rule() {
        assert_eq!(
            largest_ib_mtu(1500 - RXE_MAX_HDR_LENGTH),
            Some(Mtu::Mtu1024)
        );
        assert_eq!(
            largest_ib_mtu(9000 - RXE_MAX_HDR_LENGTH),
            Some(Mtu::Mtu4096)
        );
        assert_eq!(largest_ib_mtu(100), None);
        assert_eq!(guid(0x5054_00ff_fe00_0001), "5054:00ff:fe00:0001");
        assert_eq!(eui64("52:54:00:00:00:01"), Some(0x5054_00ff_fe00_0001));
        assert_eq!(eui64("nonsense"), None);
    }
}
