//! # Chapter 07: one-sided RDMA WRITE, and WRITE_WITH_IMM
//!
//! The server registers a region with `IBV_ACCESS_REMOTE_WRITE` and tells the client where it
//! is: `(addr, len, rkey)`. The client then writes into that memory with `IBV_WR_RDMA_WRITE`.
//! The server program takes no part: no receive is consumed, **no completion appears on the
//! server's CQ**, and the server only learns that something happened because the client says
//! so over TCP. (On rxe the server's *kernel* does the work, in software: it receives the
//! packets, checks the rkey and copies the bytes; on a hardware NIC the adapter does it.)
//! The chapter shows it: the server polls its CQ after the client's "written" and finds 0
//! completions, yet the bytes are in its memory.
//!
//! Then `IBV_WR_RDMA_WRITE_WITH_IMM`: the same one-sided write, plus a 32-bit immediate value
//! that *does* consume a receive the server posted and gives it a completion,
//! `IBV_WC_RECV_RDMA_WITH_IMM`, carrying the immediate and the number of bytes written. That is
//! how a writer wakes the target when it must.
//!
//! Verbs: `ibv_reg_mr` with `IBV_ACCESS_REMOTE_WRITE`; `ibv_post_send` with
//! `IBV_WR_RDMA_WRITE` and `IBV_WR_RDMA_WRITE_WITH_IMM` (`wr.rdma.remote_addr`, `wr.rdma.rkey`,
//! `imm_data`); `ibv_post_recv` with no scatter/gather entry at all.
//!
//! Run it: `cargo lab run 07`, or in the lab: `ch07-rdma-write --server` in one shell and
//! `ch07-rdma-write --connect 127.0.0.1` in another.
//!
//! ## Common claims about one-sided operations, and what really happens on rxe
//!
//! Tutorials often get one-sided operations wrong in four classic ways. `--mistake NAME` reproduces
//! each one (both roles accept the flag; the role it concerns acts on it):
//!
//! * **`lkey0`**: posting the WRITE from a buffer that was never registered, with `lkey = 0`
//!   ("the NIC only needs the address"). The local NIC cannot translate the address: the WRITE
//!   fails, the QP goes to ERR and nothing goes on the wire. Its status depends on the kernel:
//!   `IBV_WC_LOC_QP_OP_ERR (2)` before Linux 6.4 (not LOC_PROT_ERR), `IBV_WC_WR_FLUSH_ERR (5)`
//!   from 6.4 on (`course::kernel`).
//! * **reading `byte_len` of the WRITE's completion**: it is only defined for receive-side
//!   completions (and READ/atomics). On rxe it happens to be filled, but nothing promises it:
//!   the byte count the *target* can trust is in its `IBV_WC_RECV_RDMA_WITH_IMM` completion.
//!   This program never prints the requester's `byte_len`.
//! * **`skip-rtr`**: INIT -> RTS directly. `ibv_modify_qp` refuses with `EINVAL (22)`: a QP
//!   must learn its peer (RTR) before it may send (RTS).
//! * **`wait-target-cq`**: the server waiting for a completion after a plain WRITE. None ever
//!   comes (a server written that way hangs forever); here the wait has a 2 s deadline and
//!   fails.

// Errors, one style for every chapter: `.or_fail("cannot move the QP to RTR")` turns lab's
// error (the verb, the errno and a hint) into a Failure; main prints it after `error: `.
use clap::{Parser, ValueEnum};
use course::exchange::{Endpoint, ExchangeError, LAB_PORT, Listener, OobStream, RemoteRegion};
use course::show;
use course::{Failure, OrFail, Outcome as Result, fnv1a32};
use lab::{
    AccessFlags, CompletionQueue, Context, Gid, HintCode, InitAttr, MemoryRegion, QpAttr,
    QpInitAttr, QpState, QueuePair, RecvWr, RtrAttr, RtsAttr, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion, state,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Size of the server's region. The plain WRITE lands at offset 0, the WRITE_WITH_IMM at
/// [`IMM_OFFSET`].
const REGION_LEN: usize = 4096;
const IMM_OFFSET: usize = 2048;
/// The two messages the client writes into the server's memory.
const MSG_WRITE: &str =
    "Hello from the client! RDMA WRITE put these bytes here while your CPU looked away.";
const MSG_IMM: &str = "And these came with RDMA WRITE_WITH_IMM, which also consumed your receive.";
/// The immediate value the client sends with the second write ("0x07": chapter 07).
const IMM: u32 = 0xc0ff_ee07;
/// How long the server polls its CQ to show that the plain WRITE produced nothing there.
const QUIET_POLL: Duration = Duration::from_millis(200);

#[derive(Parser, Debug)]
#[command(
    name = "ch07-rdma-write",
    about = "One-sided RDMA WRITE into a remote region, then WRITE_WITH_IMM",
    after_help = "Example (in the lab): ch07-rdma-write --server   and   \
                  ch07-rdma-write --connect 127.0.0.1"
)]
struct Opts {
    /// Run the server: expose a region and wait for a client
    #[arg(long, conflicts_with = "connect", required_unless_present = "connect")]
    server: bool,
    /// Run the client: connect to the server at <host> and write into its region
    #[arg(long, value_name = "host")]
    connect: Option<String>,
    /// TCP port of the exchange
    #[arg(short = 'p', long, value_name = "port", default_value_t = LAB_PORT)]
    port: u16,
    /// RDMA device (default: $LAB_DEVICE, else the first device)
    #[arg(short = 'd', long = "ib-dev", value_name = "dev")]
    ib_dev: Option<String>,
    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", value_name = "port", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..))]
    ib_port: u8,
    /// Our GID index (default: the RoCE v2 IPv4 entry, found by content)
    #[arg(short = 'g', long = "gid-idx", value_name = "index")]
    gid_idx: Option<u8>,
    /// Give up on any wait (accept, connect, a completion, a line) after this many seconds
    #[arg(long, value_name = "secs", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    timeout: u64,
    /// Reproduce a common mistake about one-sided operations (see the README)
    #[arg(long, value_enum, value_name = "name")]
    mistake: Option<Mistake>,
}

/// The common mistakes this chapter can reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mistake {
    /// Client: WRITE from an unregistered buffer with lkey 0
    Lkey0,
    /// Client: INIT -> RTS without RTR
    SkipRtr,
    /// Server: wait for a completion of the client's plain WRITE
    WaitTargetCq,
}

fn main() -> ExitCode {
    let o = Opts::parse();
    course::exit_code(match &o.connect {
        Some(host) => client(&o, host),
        None => server(&o),
    })
}

/// What both roles set up the same way: device, GID, PD, CQ, and an RC QP in INIT.
struct Setup {
    qp: QueuePair<state::Init>,
    cq: CompletionQueue,
    pd: lab::ProtectionDomain,
    ctx: Context,
    gid: Gid,
    psn: u32,
}

fn open(o: &Opts, role: &str, qp_access: AccessFlags) -> Result<Setup> {
    let ctx = course::open_device(o.ib_dev.as_deref()).or_fail("cannot open the device")?;
    let gid = match o.gid_idx {
        Some(i) => ctx.query_gid(o.ib_port, u32::from(i)),
        None => ctx.roce_v2_ipv4_gid(o.ib_port),
    }
    .or_fail("cannot find our GID")?;
    println!(
        "step 1: {role}: open {} port {}, GID index {} ({})",
        ctx.name(),
        o.ib_port,
        gid.index,
        show::gid(&gid.gid.raw())
    );
    let pd = ctx.alloc_pd().or_fail("cannot allocate a PD")?;
    let cq = ctx.create_cq(16, None).or_fail("cannot create a CQ")?;
    let qp = pd
        .create_qp(&QpInitAttr::rc(&cq, &cq))
        .or_fail("cannot create the QP")?
        .to_init(&InitAttr {
            port: o.ib_port,
            pkey_index: 0,
            access: qp_access,
        })
        .or_fail("cannot move the QP to INIT")?;
    Ok(Setup {
        qp,
        cq,
        pd,
        ctx,
        gid: gid.gid,
        // A random 24-bit starting PSN, as rc_pingpong draws one (`lrand48() & 0xffffff`).
        psn: course::random_psn(),
    })
}

/// INIT -> RTR (toward the peer's QPN, PSN and GID) -> RTS (with our PSN).
fn connect(o: &Opts, s: Setup, peer: &Endpoint) -> Result<(QueuePair<state::Rts>, Setup2)> {
    let mut rtr = RtrAttr::new(peer.qpn, peer.psn, Gid(peer.gid)).port(o.ib_port);
    if let Some(i) = o.gid_idx {
        rtr = rtr.sgid_index(i);
    }
    let qp =
        s.qp.to_rtr(&rtr)
            .or_fail("cannot move the QP to RTR")?
            .to_rts(&RtsAttr::new(s.psn))
            .or_fail("cannot move the QP to RTS")?;
    Ok((
        qp,
        Setup2 {
            cq: s.cq,
            pd: s.pd,
            ctx: s.ctx,
        },
    ))
}

/// What is left of [`Setup`] once the QP is connected.
struct Setup2 {
    cq: CompletionQueue,
    pd: lab::ProtectionDomain,
    ctx: Context,
}

fn endpoint(name: &str, s: &Setup, regions: Vec<RemoteRegion>) -> Endpoint {
    Endpoint {
        name: name.into(),
        lid: 0,
        qpn: s.qp.qp_num(),
        psn: s.psn,
        gid: s.gid.raw(),
        regions,
    }
}

// =============================================================================================
// The server: expose memory, then watch it change without being told by the NIC
// =============================================================================================

fn server(o: &Opts) -> Result<()> {
    let timeout = Duration::from_secs(o.timeout);
    // The QP must allow incoming RDMA WRITEs too (qp_access_flags): an MR that allows them is
    // not enough (a QP without REMOTE_WRITE answers with IBV_WC_REM_INV_REQ_ERR, chapter 08).
    let s = open(o, "server", AccessFlags::REMOTE_WRITE)?;

    // REMOTE_WRITE lets a peer holding the rkey write here; it requires LOCAL_WRITE too.
    let mr =
        s.pd.reg_mr(
            REGION_LEN,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .or_fail("cannot register the region")?;
    let region = mr.remote();
    println!(
        "step 2: register a {REGION_LEN}-byte region with IBV_ACCESS_LOCAL_WRITE | \
         IBV_ACCESS_REMOTE_WRITE: {} len={} {}",
        show::addr(region.addr),
        region.len,
        show::rkey(region.rkey)
    );

    // One receive, for the WRITE_WITH_IMM to come. It needs no buffer at all (0 SGEs): the
    // data goes where the writer says; the receive only provides the completion.
    s.qp.post_recv_one(RecvWr::new(1, &[]))
        .or_fail("cannot post a receive")?;
    println!(
        "step 3: create a CQ and an RC QP that accepts remote writes; post 1 receive with no \
         buffer (a plain WRITE consumes none; WRITE_WITH_IMM consumes one)"
    );

    let listener =
        Listener::bind(o.port).or_fail(format!("cannot listen on TCP port {}", o.port))?;
    println!("step 4: listening on TCP port {} for the client", o.port);
    let mut oob = listener
        .accept(timeout)
        .or_fail("cannot accept the client")?;
    let peer = from_client(oob.recv_msg(timeout), "receive the client's endpoint")?;
    println!(
        "  client: {} {} {}",
        show::qpn(peer.qpn),
        show::psn(peer.psn),
        show::gid(&peer.gid)
    );
    // Connect before answering: once the client has our endpoint it may write at once.
    let me = endpoint("server", &s, vec![region]);
    let (qp, rest) = connect(o, s, &peer)?;
    oob.send_msg(&me, timeout)
        .or_fail("cannot send our endpoint and region")?;
    println!(
        "step 5: QP connected (RTR, RTS); sent the client our {}, {} and the region ({}, len={}, \
         {})",
        show::qpn(me.qpn),
        show::psn(me.psn),
        show::addr(region.addr),
        region.len,
        show::rkey(region.rkey)
    );

    // ---- the plain RDMA WRITE: nothing on our side knows ------------------------------------
    from_client(
        oob.expect_line("written", timeout),
        "wait for the client's \"written\"",
    )?;
    println!("step 6: the client says \"written\" (over TCP: the NIC told us nothing)");
    if o.mistake == Some(Mistake::WaitTargetCq) {
        // A common claim: the server "waits for the write to complete". It would wait forever.
        let wait = Duration::from_secs(2);
        println!("mistake wait-target-cq: wait for a completion of the client's WRITE ...");
        let mut wc = [WorkCompletion::default()];
        return match rest
            .cq
            .poll_exact_for(&mut wc, wait, "the client's RDMA WRITE")
        {
            Ok(()) => Err(Failure(format!(
                "unexpected completion {} {}",
                wc[0].opcode, wc[0].status
            ))),
            // lab's catalogue has the hint (`write-completes-at-writer`); lab cannot know it
            // applies, so the program adds it.
            Err(e) => Err(Failure(format!(
                "{}\n  hint: {}",
                e.report(),
                HintCode::WriteCompletesAtWriter.text()
            ))),
        };
    }
    let n = quiet_poll(&rest.cq, QUIET_POLL)?;
    if n != 0 {
        return Err(Failure(format!(
            "{n} completion(s) on the server's CQ after a plain WRITE: expected none"
        )));
    }
    println!(
        "step 7: poll our CQ for {} ms: 0 completions, and our receive is still posted; yet \
         the bytes are in our memory:",
        QUIET_POLL.as_millis()
    );
    let written = read_cstr(&mr, 0)?;
    print_landed(&written);
    if written != MSG_WRITE.as_bytes() {
        return Err(Failure(
            "the region does not hold the client's message".into(),
        ));
    }
    oob.send_line("cq-checked", timeout)
        .or_fail("cannot tell the client to go on")?;

    // ---- WRITE_WITH_IMM: the same write, plus a completion for us ---------------------------
    let wc = rest
        .cq
        .wait_one(timeout)
        .or_fail("cannot wait for the WRITE_WITH_IMM's completion")?
        .ok()
        .or_fail("cannot complete the receive of the WRITE_WITH_IMM")?;
    let imm = wc.imm();
    println!(
        "step 8: a completion: {}, {}, imm=0x{:08x}, byte_len={}, flags {} (it consumed our \
         receive, wr_id {})",
        wc.opcode,
        wc.status,
        imm.unwrap_or(0),
        wc.byte_len,
        wc.flags,
        wc.wr_id
    );
    if wc.opcode != WcOpcode::RecvRdmaWithImm || imm != Some(IMM) {
        return Err(Failure(format!(
            "expected IBV_WC_RECV_RDMA_WITH_IMM with imm=0x{IMM:08x}"
        )));
    }
    // byte_len of a *receive-side* completion is defined: how many bytes were written.
    let mut landed = vec![0u8; wc.byte_len as usize];
    mr.read_into(IMM_OFFSET, &mut landed)
        .or_fail("cannot read the region")?;
    println!(
        "  at offset {IMM_OFFSET} ({} bytes, from byte_len):",
        wc.byte_len
    );
    print_landed(&landed);
    if landed != MSG_IMM.as_bytes() {
        return Err(Failure(
            "the region does not hold the client's second message".into(),
        ));
    }

    oob.send_line(
        &format!(
            "checksums {:08x} {:08x}",
            fnv1a32(&written),
            fnv1a32(&landed)
        ),
        timeout,
    )
    .or_fail("cannot send the checksums")?;
    from_client(
        oob.expect_line("done", timeout),
        "wait for the client's \"done\"",
    )?;
    println!("step 9: sent the client our checksums; it says \"done\"");

    qp.destroy().or_fail("cannot destroy the QP")?;
    mr.dereg().or_fail("cannot deregister the region")?;
    close(rest)?;
    println!("step 10: destroy the QP, deregister the region, destroy the CQ, free the PD");
    Ok(())
}

/// `.or_fail` for reads from the client: a client that gave up (a mistake, a crash) closes
/// the connection; say so without its ephemeral TCP port, which differs on every run.
fn from_client<T>(r: std::result::Result<T, ExchangeError>, what: &str) -> Result<T> {
    match r {
        Err(ExchangeError::PeerClosed { .. }) => Err(Failure(format!(
            "cannot {what}: the client closed the connection (did it fail? see its output)"
        ))),
        other => other.or_fail(format!("cannot {what}")),
    }
}

/// Polls the CQ for `d` without waiting for anything in particular; returns how many
/// completions arrived.
fn quiet_poll(cq: &CompletionQueue, d: Duration) -> Result<usize> {
    let start = Instant::now();
    let mut wcs = [WorkCompletion::default(); 4];
    let mut n = 0;
    while start.elapsed() < d {
        n += cq.poll_into(&mut wcs).or_fail("cannot poll the CQ")?;
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(n)
}

/// The bytes at `offset` up to the first zero byte (the region started zeroed, and a plain
/// WRITE tells the target nothing, not even a length).
fn read_cstr(mr: &MemoryRegion, offset: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; REGION_LEN - offset];
    // Volatile reads: the NIC changed this memory behind the compiler's back.
    mr.read_into(offset, &mut buf)
        .or_fail("cannot read the region")?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    buf.truncate(end);
    Ok(buf)
}

fn print_landed(bytes: &[u8]) {
    println!("  \"{}\"", String::from_utf8_lossy(bytes));
    println!("  ({} bytes, fnv1a=0x{:08x})", bytes.len(), fnv1a32(bytes));
}

// =============================================================================================
// The client: write into the server's memory
// =============================================================================================

fn client(o: &Opts, host: &str) -> Result<()> {
    let timeout = Duration::from_secs(o.timeout);
    // This side accepts no remote operation: its QP's access flags stay empty.
    let s = open(o, "client", AccessFlags::empty())?;

    // The source of a WRITE must be registered too (the NIC reads it through the lkey), but
    // it needs no access flag: local read access is implied.
    let mut src =
        s.pd.reg_mr(REGION_LEN, AccessFlags::empty())
            .or_fail("cannot register the source buffer")?;
    src.as_mut_slice()[..MSG_WRITE.len()].copy_from_slice(MSG_WRITE.as_bytes());
    src.as_mut_slice()[IMM_OFFSET..IMM_OFFSET + MSG_IMM.len()].copy_from_slice(MSG_IMM.as_bytes());
    println!(
        "step 2: register a {REGION_LEN}-byte source buffer (no access flags: the NIC only \
         reads it) {} and put our two messages in it",
        show::lkey(src.lkey())
    );

    let me = endpoint("client", &s, vec![]);
    let (mut oob, server) = OobStream::connect_exchange(host, o.port, &me, timeout)
        .or_fail(format!("cannot exchange endpoints with {host}:{}", o.port))?;
    let Some(&region) = server.regions.first() else {
        return Err(Failure("the server sent no region".into()));
    };
    println!(
        "step 3: exchange endpoints with {host}:{}: server {} {}, region {} len={} {}",
        o.port,
        show::qpn(server.qpn),
        show::psn(server.psn),
        show::addr(region.addr),
        region.len,
        show::rkey(region.rkey)
    );
    // Bounds-check before posting: a WRITE past the end of the region is refused by the
    // target as a whole (IBV_WC_REM_ACCESS_ERR) and kills both QPs.
    let (Some(dst_write), Some(dst_imm)) = (
        region.addr_of(0, MSG_WRITE.len() as u64),
        region.addr_of(IMM_OFFSET as u64, MSG_IMM.len() as u64),
    ) else {
        return Err(Failure(format!(
            "the server's region ({} bytes) is too small",
            region.len
        )));
    };

    if o.mistake == Some(Mistake::SkipRtr) {
        // A common claim: "INIT -> RTS, RTR is only for receiving". ibv_modify_qp says otherwise.
        println!("mistake skip-rtr: move the QP from INIT straight to RTS ...");
        let attr = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(6)
            .rnr_retry(6)
            .sq_psn(s.psn)
            .max_rd_atomic(1);
        return match s.qp.modify(&attr) {
            Ok(()) => Err(Failure("INIT -> RTS was accepted: unexpected".into())),
            // lab's own hint (`skipped-rtr`) says what is illegal; this one says why.
            Err(e) => Err(Failure(format!(
                "{}\n  hint: {}",
                e.report(),
                HintCode::RtrLearnsPeer.text()
            ))),
        };
    }
    let (qp, rest) = connect(o, s, &server)?;
    println!("step 4: QP connected (RTR, RTS)");

    // ---- RDMA WRITE ------------------------------------------------------------------------
    let unregistered = MSG_WRITE.as_bytes().to_vec();
    let sge = [if o.mistake == Some(Mistake::Lkey0) {
        // A common claim: "just pass the buffer's address; lkey 0 is fine for a local buffer".
        println!("mistake lkey0: post the WRITE from an unregistered buffer with lkey 0 ...");
        Sge::raw(unregistered.as_ptr() as u64, unregistered.len() as u32, 0)
    } else {
        src.sge(0..MSG_WRITE.len())
    }];
    qp.post_send_one(SendWr::write(1, &sge, dst_write, region.rkey))
        .or_fail("cannot post the RDMA WRITE")?;
    let wc = rest
        .cq
        .wait_one(timeout)
        .or_fail("cannot wait for the WRITE's completion")?;
    if o.mistake == Some(Mistake::Lkey0) {
        // The status depends on the kernel rxe is part of (course::kernel::RxeChange): the
        // requester's own LOC_QP_OP_ERR before Linux 6.4, a flush from 6.4 on.
        let flushed = if wc.status == WcStatus::WrFlushErr {
            "\n  note: from Linux 6.4 on, rxe moves the QP to ERR on a bad lkey and completes the \
             WR as flushed, so the status names no cause (before 6.4: IBV_WC_LOC_QP_OP_ERR (2))"
        } else {
            ""
        };
        return Err(Failure(format!(
            "the WRITE completed with {}: {}{flushed}\n  hint: {}",
            wc.status,
            wc.status.explanation(),
            HintCode::UnregisteredLkey.text()
        )));
    }
    let wc = wc.ok().or_fail("cannot complete the RDMA WRITE")?;
    // Note what is NOT printed: wc.byte_len. For an RDMA WRITE's requester completion it is
    // not defined (rxe happens to fill it; nothing promises that).
    println!(
        "step 5: RDMA WRITE of {} bytes to the server's {} with its {}: our completion is {}, {}",
        MSG_WRITE.len(),
        show::addr(dst_write),
        show::rkey(region.rkey),
        wc.opcode,
        wc.status
    );
    oob.send_line("written", timeout)
        .or_fail("cannot tell the server \"written\"")?;
    oob.expect_line("cq-checked", timeout)
        .or_fail("cannot wait for the server's \"cq-checked\"")?;
    println!("step 6: told the server \"written\" over TCP; it checked its CQ");

    // ---- RDMA WRITE_WITH_IMM -----------------------------------------------------------------
    let sge = [src.sge(IMM_OFFSET..IMM_OFFSET + MSG_IMM.len())];
    qp.post_send_one(SendWr::write_with_imm(2, &sge, dst_imm, region.rkey, IMM))
        .or_fail("cannot post the RDMA WRITE_WITH_IMM")?;
    let wc = rest
        .cq
        .wait_one(timeout)
        .or_fail("cannot wait for the WRITE_WITH_IMM's completion")?
        .ok()
        .or_fail("cannot complete the RDMA WRITE_WITH_IMM")?;
    println!(
        "step 7: RDMA WRITE_WITH_IMM of {} bytes to {} with imm=0x{IMM:08x}: our completion is \
         {}, {}",
        MSG_IMM.len(),
        show::addr(dst_imm),
        wc.opcode,
        wc.status
    );

    // ---- did the bytes arrive intact? -------------------------------------------------------
    let line = oob
        .recv_line(timeout)
        .or_fail("cannot receive the server's checksums")?;
    let want = format!(
        "checksums {:08x} {:08x}",
        fnv1a32(MSG_WRITE.as_bytes()),
        fnv1a32(MSG_IMM.as_bytes())
    );
    if line != want {
        return Err(Failure(format!(
            "the server's checksums {line:?} differ from ours {want:?}"
        )));
    }
    oob.send_line("done", timeout)
        .or_fail("cannot send \"done\"")?;
    println!(
        "step 8: the server's checksums match ours (fnv1a=0x{:08x}, fnv1a=0x{:08x}); sent \"done\"",
        fnv1a32(MSG_WRITE.as_bytes()),
        fnv1a32(MSG_IMM.as_bytes())
    );

    qp.destroy().or_fail("cannot destroy the QP")?;
    src.dereg().or_fail("cannot deregister the source buffer")?;
    close(rest)?;
    println!("step 9: destroy the QP, deregister the buffer, destroy the CQ, free the PD");
    Ok(())
}

fn close(rest: Setup2) -> Result<()> {
    rest.cq.destroy().or_fail("cannot destroy the CQ")?;
    rest.pd.dealloc().or_fail("cannot free the PD")?;
    rest.ctx.close().or_fail("cannot close the device")?;
    Ok(())
}
