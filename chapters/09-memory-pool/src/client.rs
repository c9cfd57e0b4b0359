//! The client side (node b): connect one QP to the pool; a worker process writes its blocks
//! and reads them back (blocking, then async); the client role starts the workers, shows their
//! output, then misbehaves on purpose.

use std::time::{Duration, Instant};

use crate::cm::{client_device, parse_table_data, resolved};
use crate::{Args, CONNECT, OP, PSN, WINDOW, WORK, block_content, block_list, header_of, owner};
use course::exchange::{Endpoint, OobStream};
use course::show;
use course::{AsyncPool, PoolOp, RemotePool, join_all};
use course::{Failure, OrFail, Outcome as Result, expect, fnv1a64, framed};
use lab::cm::{CmEvent, CmId, ConnParam, MAX_CONNECT_DATA};
use lab::{
    AccessFlags, Context, Error, QpInitAttr, QpState, QueuePair, RemoteRegion, WcStatus, state,
};

/// A QP connected to the pool server, and what the server sent.
pub(crate) struct Connected {
    pub(crate) qp: QueuePair,
    pub(crate) oob: OobStream,
    pub(crate) table: Vec<RemoteRegion>,
    pub(crate) server_qpn: u32,
}

/// Creates a QP, exchanges endpoints with the server (our QPN/PSN/GID out, the pool's QPN and
/// block table in) and brings the QP to RTS. With --cm (`cm` is the id [`client_device`]
/// resolved): `rdma_create_qp`, `rdma_connect` with our name as private data, ESTABLISHED
/// with the table as the accept's private data; then the TCP stream of the go/done lines.
pub(crate) fn connect(
    ctx: &Context,
    pd: &lab::ProtectionDomain,
    cq: &lab::CompletionQueue,
    args: &Args,
    (host, cm): (&str, Option<CmId>),
    name: &str,
) -> Result<Connected> {
    let init = QpInitAttr::rc(cq, cq).max_send_wr(64);
    if let Some(mut id) = cm {
        // A REJECTED (nobody listens yet, or a freshly booted guest's CM still loading) is
        // tried again every 200 ms, up to the deadline, with a new id and QP each time (an id
        // carries one connection attempt). How many tries it took depends on timing, so it is
        // not printed.
        let deadline = Instant::now() + CONNECT;
        let (qp, table) = loop {
            let qp = id.create_qp(pd, &init)?;
            id.connect(&ConnParam::with_data(&framed(
                name.as_bytes(),
                MAX_CONNECT_DATA,
            )))?;
            match id.get_event(CONNECT).or_fail("rdma_connect")? {
                CmEvent::Established { private_data } => {
                    let table = parse_table_data(&private_data).ok_or_else(|| {
                        Failure("the server's private data holds no pool table".into())
                    })?;
                    break (qp, table);
                }
                CmEvent::Rejected { .. } if Instant::now() < deadline => {
                    let dst = id.peer_addr().ok_or("the id lost its peer address")?;
                    drop(qp);
                    std::thread::sleep(Duration::from_millis(200));
                    id = resolved(dst)?;
                }
                other => {
                    let hint = other.hint().map(|h| format!("\n  hint: {h}"));
                    return Err(format!(
                        "rdma_connect to the pool server: {other}{}",
                        hint.unwrap_or_default()
                    )
                    .into());
                }
            }
        };
        // librdmacm took the QP through RTR to RTS; the server's QPN is in its attributes.
        let qp = qp.assume_state::<state::Rts>();
        let server_qpn = qp.query()?.dest_qp_num;
        let mut oob = OobStream::connect(host, args.port, CONNECT)
            .or_fail("connecting the go/done stream")?;
        oob.send_line(name, OP)?;
        return Ok(Connected {
            qp,
            oob,
            server_qpn,
            table,
        });
    }
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let qp = pd.create_qp(&init)?;
    let mine = Endpoint::rc(name, PSN, gid.gid.raw());
    let p = course::connect_peer(host, args.port, qp, mine, "the pool server", CONNECT)?;
    Ok(Connected {
        qp: p.qp,
        oob: p.oob,
        server_qpn: p.theirs.qpn,
        table: p.theirs.regions,
    })
}

/// Checks that the table the server sent is what our flags say.
pub(crate) fn check_table(table: &[RemoteRegion], args: &Args) -> Result<()> {
    expect(
        table.len() == args.blocks as usize
            && table.iter().all(|b| b.len == args.block_size as u64),
        || {
            format!(
                "the server's table has {} blocks of {} bytes, but this client was started with \
         --blocks {} --block-size {}: give both roles the same flags",
                table.len(),
                table.first().map_or(0, |b| b.len),
                args.blocks,
                args.block_size
            )
        },
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Worker (one client process on node b): writes its blocks, reads them back

pub(crate) fn worker(args: &Args, host: &str, index: u32) -> Result<bool> {
    let size = args.block_size as usize;
    let mine: Vec<u32> = (0..args.blocks)
        .filter(|&b| owner(b, args.roles.clients) == index)
        .collect();
    let list = block_list(&mine);

    println!("step 1: open the device; a CQ with a completion channel (for the async form)");
    let (ctx, cm) = client_device(args, host)?;
    let pd = ctx.alloc_pd()?;
    let channel = ctx.create_comp_channel()?;
    let cq = ctx.create_cq(64, Some(&channel))?;
    // Our own buffer: one slot per block we own. LOCAL_WRITE because READs land in it.
    let mut local = pd.reg_mr(mine.len() * size, AccessFlags::LOCAL_WRITE)?;

    if args.cm {
        println!(
            "step 2: connect to the pool through rdma_cm; its block table comes in the accept's \
             private data"
        );
    } else {
        println!("step 2: connect to the pool and receive its block table");
    }
    let c = connect(&ctx, &pd, &cq, args, (host, cm), &format!("client-{index}"))?;
    check_table(&c.table, args)?;
    println!(
        "  pool: {} blocks of {} bytes, {}, block 0 at {}; server {}",
        c.table.len(),
        size,
        show::rkey(c.table[0].rkey),
        show::addr(c.table[0].addr),
        show::qpn(c.server_qpn)
    );
    let mut oob = c.oob;
    let pool = AsyncPool::new(c.qp, cq, channel, c.table);

    println!("step 3: wait for the server's \"go\" (so all clients run at the same time)");
    oob.expect_line("go", CONNECT)?;

    // How many operations may be in flight: every one of them needs a slot in the send queue
    // and, once complete, in the CQ (64 each here). A send CQ that overflows loses completions
    // on rxe, with one IBV_EVENT_CQ_ERR async event for each (chapter 08, case 15), and a
    // future waiting for a lost completion never resolves.
    let window = WINDOW.min(mine.len());
    println!(
        "step 4: write my blocks {list}: one RDMA WRITE each, {}",
        if window == mine.len() {
            format!("all {window} in flight at once")
        } else {
            format!("{window} in flight at a time")
        }
    );
    for (slot, &b) in mine.iter().enumerate() {
        local.as_mut_slice()[slot * size..(slot + 1) * size].copy_from_slice(&block_content(
            b,
            args.roles.clients,
            size,
        ));
    }
    let slots: Vec<(usize, u32)> = mine.iter().copied().enumerate().collect();
    let mut completions = 0;
    for chunk in slots.chunks(window) {
        // Each write() checks the range, posts one work request and returns a future;
        // join_all polls them together; block_on sleeps on the completion channel's fd until
        // completions arrive, and wakes the futures they belong to.
        let ops: Vec<PoolOp> = chunk
            .iter()
            .map(|&(slot, b)| pool.write(b as usize, 0, &local, slot * size..(slot + 1) * size))
            .collect::<lab::Result<_>>()?;
        let results = pool.block_on(join_all(ops), OP)?;
        completions += results.into_iter().collect::<lab::Result<Vec<_>>>()?.len();
    }
    println!(
        "  {} WRITEs posted, {completions} completions, all IBV_WC_SUCCESS",
        mine.len()
    );

    println!("step 5: forget them locally, read them back with RDMA READ (the same way)");
    local.as_mut_slice().fill(0);
    for chunk in slots.chunks(window) {
        let ops: Vec<PoolOp> = chunk
            .iter()
            .map(|&(slot, b)| pool.read(b as usize, 0, &local, slot * size..(slot + 1) * size))
            .collect::<lab::Result<_>>()?;
        let results = pool.block_on(join_all(ops), OP)?;
        results.into_iter().collect::<lab::Result<Vec<_>>>()?;
    }
    let mut ok = true;
    for (slot, &b) in mine.iter().enumerate() {
        let got = &local.as_slice()[slot * size..(slot + 1) * size];
        let same = got == block_content(b, args.roles.clients, size).as_slice();
        ok &= same;
        let sum = fnv1a64(got);
        println!(
            "  block {b:>3}: \"{}\" checksum=0x{sum:016x} {}",
            header_of(got),
            if same { "matches" } else { "DIFFERS" }
        );
    }

    println!("step 6: tell the server we are done");
    oob.send_line(
        &format!(
            "done: {} blocks written and read back {}",
            mine.len(),
            if ok { "intact" } else { "DAMAGED" }
        ),
        OP,
    )?;
    Ok(ok)
}

// ---------------------------------------------------------------------------------------------
// The client role: start the workers, show their output, then misbehave on purpose

pub(crate) fn clients(args: &Args, host: &str) -> Result<bool> {
    let k = args.roles.clients;
    // One process per client: copies of this program with `--client-index i`, each with its
    // own QP and its own blocks; then this process misbehaves on purpose.
    course::client_role(
        k,
        "--client-index",
        WORK + CONNECT,
        &format!(
            "start {k} client processes (each its own QP and its own blocks: client i owns \
             blocks i, i+{k}, ...)"
        ),
        "a misbehaving client (this process, its own QP: \"misbehaving\")",
        || misbehave(args, host),
    )
}

/// Out-of-range requests are refused before posting; a forged rkey is refused by the server's
/// device, after the round trip.
pub(crate) fn misbehave(args: &Args, host: &str) -> Result<bool> {
    let (n, size) = (args.blocks as usize, args.block_size as u64);
    let (ctx, cm) = client_device(args, host)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let c = connect(&ctx, &pd, &cq, args, (host, cm), "misbehaving")?;
    check_table(&c.table, args)?;
    let mut oob = c.oob;
    oob.expect_line("go", CONNECT)?;
    let staging = pd.reg_mr(size as usize, AccessFlags::LOCAL_WRITE)?;
    // The blocking form this time: each call posts one work request and waits for it.
    let mut pool = RemotePool::new(c.qp, cq, staging, c.table.clone())?;
    pool.set_timeout(OP);
    let mut ok = true;

    println!("  3a: requests outside the table, refused by the client API (nothing posted)");
    let attempts: [(String, lab::Result<()>); 3] = [
        (
            format!("write(block {n}, offset 0, 8 bytes)"),
            pool.write(n, 0, b"12345678"),
        ),
        (
            format!("read(block 0, offset {}, 8 bytes)", size - 4),
            pool.read(0, size - 4, &mut [0; 8]),
        ),
        (
            "write(block 1, offset 2^64-1, 2 bytes)".to_string(),
            pool.write(1, u64::MAX, b"xy"),
        ),
    ];
    for (what, r) in attempts {
        match r {
            Err(e @ Error::OutOfBounds(_)) => println!("    {what}: {e}"),
            other => {
                ok = false;
                println!("    {what}: UNEXPECTED {other:?}");
            }
        }
    }
    let nothing = pool.in_flight() == 0 && pool.cq().poll_one()?.is_none();
    ok &= nothing;
    println!(
        "    work requests in flight: {}, completions on our CQ: {}",
        pool.in_flight(),
        if nothing { 0 } else { 1 }
    );

    println!("  3b: a correct READ of block 0 with the blocking form");
    let head = pool.read_vec(0, 0, 32)?;
    println!("    block 0 starts with \"{}\"", header_of(&head));
    ok &= header_of(&head) == header_of(&block_content(0, args.roles.clients, 32));

    println!("  3c: the same WRITE with a forged rkey (the real one + 1): only the server's");
    println!("      device can tell, so the error comes back as a completion");
    let (qp, cq, staging) = pool.into_parts();
    let real = c.table[0].rkey;
    let forged: Vec<RemoteRegion> = c
        .table
        .iter()
        .map(|b| RemoteRegion {
            rkey: real.wrapping_add(1),
            ..*b
        })
        .collect();
    println!(
        "    real {}, forged {}",
        show::rkey(real),
        show::rkey(real.wrapping_add(1))
    );
    let mut pool = RemotePool::new(qp, cq, staging, forged)?;
    pool.set_timeout(OP);
    match pool.write(0, 0, b"FORGED!!") {
        Err(Error::Completion { wc }) if wc.status == WcStatus::RemAccessErr => {
            println!("    completion status: {}", wc.status);
            println!("    why: {}", wc.status.explanation());
        }
        other => {
            ok = false;
            println!("    UNEXPECTED: {other:?}");
        }
    }
    let st = pool.qp().state()?;
    println!("    our QP is now {st}: an RC connection does not survive a remote access error");
    ok &= st == QpState::Err;
    println!(
        "    we stop here (exit cleanly); to go on, a client creates a new QP and connects again"
    );
    oob.send_line(
        "done: forged rkey refused with IBV_WC_REM_ACCESS_ERR (10)",
        OP,
    )?;
    Ok(ok)
}
