//! The server (node a): one MR for the whole pool against one per block, the block table,
//! and the wait while the clients' one-sided WRITEs and READs land; then every block checked.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use crate::cm::{cm_accept, print_table, table_data};
use crate::{Args, CONNECT, OP, PSN, WORK, block_content, header_of};
use lab::cm::CmId;
// Errors, one style for every chapter (the course crate): `.or_fail("what we were doing")` and
// `expect(condition, || message)` make a Failure; main prints it and exits 1.
use course::exchange::{Endpoint, Listener};
use course::show;
use course::{OrFail, Outcome as Result, Peer, fnv1a64};
use lab::{AccessFlags, MemoryRegion, QpInitAttr, QpState};

pub(crate) fn server(args: &Args) -> Result<bool> {
    let (n, size) = (args.blocks as usize, args.block_size as usize);
    let bench = args.bench.is_some();
    let workers = if bench {
        1
    } else {
        args.roles.clients as usize
    };

    println!("step 1: open the device, find the RoCE v2 GID, allocate a protection domain");
    // With --cm the QPs are created by rdma_create_qp, which takes only a PD of librdmacm's
    // own open device: so the listener is made first (bound to the rxe netdev's address, it
    // has a device), and the PD, the CQ and the pool's MR are made on its context.
    let cm_listener = if args.cm {
        let ip = course::rxe_address()?;
        let id = CmId::new()?;
        id.listen(SocketAddr::new(IpAddr::V4(ip), args.port), 32)
            .or_fail("rdma_cm listen")?;
        Some(id)
    } else {
        None
    };
    let ctx = match &cm_listener {
        Some(id) => id.context()?,
        None => course::open_device(None)?,
    };
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let pd = ctx.alloc_pd()?;
    let dev = ctx.query_device()?;
    println!(
        "  device {} port 1 gid[{}] {}; the device allows max_mr={} memory regions",
        ctx.name(),
        gid.index,
        show::gid(&gid.gid.raw()),
        dev.max_mr
    );

    // The clients need REMOTE_WRITE and REMOTE_READ; LOCAL_WRITE is required with
    // REMOTE_WRITE. No REMOTE_ATOMIC: this pool takes no atomics (chapter 10 registers its
    // own region with it, and an atomic on this one would fail with IBV_WC_REM_ACCESS_ERR).
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;

    println!("step 2: two ways to register {n} blocks of {size} bytes");
    // (a) One MR per block: N ibv_reg_mr calls, N rkeys the table must carry, N MRs the
    //     device must track (max_mr above). Each can be deregistered on its own.
    let t = Instant::now();
    let per_block: Vec<MemoryRegion> = (0..n)
        .map(|_| pd.reg_mr(size, access))
        .collect::<lab::Result<_>>()?;
    let per_block_time = t.elapsed();
    let keys: BTreeSet<u32> = per_block.iter().map(|m| m.rkey()).collect();
    println!(
        "  one MR per block:    {n} ibv_reg_mr calls, {} distinct rkeys, {}",
        keys.len(),
        show::elapsed(per_block_time)
    );
    drop(per_block); // ibv_dereg_mr x N
    // (b) One MR for the whole pool: 1 call, 1 rkey; a block is an offset into it.
    let t = Instant::now();
    let mut pool = pd.reg_mr(n * size, access)?;
    let one_time = t.elapsed();
    println!(
        "  one MR for the pool: 1 ibv_reg_mr call, 1 rkey, {}",
        show::elapsed(one_time)
    );
    println!(
        "  this pool uses the single MR: {} bytes, {}",
        n * size,
        show::rkey(pool.rkey())
    );

    println!("step 3: the block table the clients get: (addr, len, rkey) per block");
    let table = course::pool::block_table(&pool, n, size);
    print_table(&table);
    pool.as_mut_slice().fill(0);

    let listener = Listener::bind(args.port)?;
    let how = if args.cm {
        format!(
            "rdma_cm port {0} (the rxe netdev's address; the table goes in the accept's private \
             data) and TCP 0.0.0.0:{0} (the go/done lines)",
            args.port
        )
    } else {
        format!("0.0.0.0:{}", args.port)
    };
    println!(
        "step 4: listening on {how} for {} (one RC QP each)",
        if bench {
            "1 benchmark client".to_string()
        } else {
            format!("{workers} clients, then 1 misbehaving client")
        }
    );
    // One CQ for every connection's QP: it will stay empty (nobody posts anything here).
    let cq = ctx.create_cq(64, None)?;
    // What every client receives: our QP (its number is filled in per connection), the table.
    let me = Endpoint {
        regions: table.clone(),
        ..Endpoint::rc("pool", PSN, gid.gid.raw())
    };

    // Accept one connection: receive the client's endpoint, bring a QP up toward it, send
    // ours with the block table. Our QP is in RTS before the client learns its number.
    let accept = |what: &str| -> Result<Peer> {
        match &cm_listener {
            Some(id) => cm_accept(id, &pd, &cq, &listener, &table_data(&table), what),
            None => {
                let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
                course::accept_peer(&listener, qp, &me, what, CONNECT)
            }
        }
    };

    println!("step 5: accept the clients, in whatever order they come");
    // They connect in a racy order: printed sorted, so the output is the same every run.
    let mut conns = course::accept_clients(workers, accept)?;

    println!("step 6: tell every client \"go\", then wait for each one's \"done\"");
    // From here the clients write and read the pool with one-sided operations. This process
    // only waits in a socket read: watch its CPU time and its completion queue.
    let cpu0 = lab::cpu_time()?;
    let t = Instant::now();
    for c in &mut conns {
        c.oob.send_line("go", OP)?;
    }
    let mut reported: Vec<(String, String)> = vec![];
    for c in &mut conns {
        let line = c
            .oob
            .recv_line(WORK)
            .or_fail_with(|| format!("waiting for {}'s \"done\"", c.theirs.name))?;
        reported.push((c.theirs.name.clone(), line));
    }
    let cpu = lab::cpu_time()?.since(&cpu0);
    let mut wcs = [lab::WorkCompletion::default(); 16];
    let n_wc = cq.poll_into(&mut wcs)?;
    println!(
        "  all {workers} done after {}; this process used {} meanwhile",
        show::elapsed(t.elapsed()),
        show::cpu(cpu.total())
    );
    println!(
        "  our completion queue holds {n_wc} completions: one-sided WRITE/READ complete only at \
         the side that posts them"
    );
    for (name, line) in &reported {
        println!("  {name} reported: {line}");
    }
    let mut ok = n_wc == 0;

    if bench {
        println!("done: benchmark served");
        return Ok(ok);
    }

    println!("step 7: the misbehaving client");
    let mut probe = accept("the misbehaving client")?;
    println!(
        "  {} connected: our {}",
        probe.theirs.name,
        show::qpn(probe.qp.qp_num())
    );
    probe.oob.send_line("go", OP)?;
    let line = probe.oob.recv_line(WORK)?;
    println!("  {} reported: {line}", probe.theirs.name);

    println!("step 8: check every block (the server reads its own memory, sorted by block)");
    let mut good = 0;
    for b in 0..n {
        let bytes = &pool.as_slice()[b * size..(b + 1) * size];
        let want = block_content(b as u32, args.roles.clients, size);
        let sum = fnv1a64(bytes);
        let verdict = if bytes == want.as_slice() {
            good += 1;
            "ok"
        } else {
            ok = false;
            "MISMATCH"
        };
        println!(
            "  block {b:>3}: \"{}\" checksum=0x{sum:016x} {verdict}",
            header_of(bytes)
        );
    }
    println!("  {good} of {n} blocks hold exactly what their owner wrote");

    println!("step 9: the state of each connection's QP on this side (ibv_query_qp)");
    conns.push(probe);
    for c in &conns {
        let st = c.qp.state()?;
        println!("  {}: {st}", c.theirs.name);
        let expect = if c.theirs.name == "misbehaving" {
            QpState::Err
        } else {
            QpState::Rts
        };
        ok &= st == expect;
    }
    let n_wc = cq.poll_into(&mut wcs)?;
    println!("  our completion queue still holds {n_wc} completions");
    ok &= n_wc == 0;
    course::done(
        ok,
        "every block verified; no work request or completion here: this node's kernel (rxe) \
         served the transfers",
    );
    Ok(ok)
}
