//! `--bench N`: the pool API's blocking WRITE and READ, one at a time, like perftest's `*_lat`.

use std::time::Instant;

use crate::client::{check_table, connect};
use crate::cm::client_device;
use crate::{Args, CONNECT, OP, block_content};
use course::Outcome as Result;
use course::RemotePool;
use course::show;
use lab::AccessFlags;

pub(crate) fn bench_client(args: &Args, host: &str, iters: u32) -> Result<bool> {
    let size = args.block_size as usize;
    let (ctx, cm) = client_device(args, host)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let c = connect(&ctx, &pd, &cq, args, (host, cm), "bench")?;
    check_table(&c.table, args)?;
    let mut oob = c.oob;
    oob.expect_line("go", CONNECT)?;
    let staging = pd.reg_mr(size, AccessFlags::LOCAL_WRITE)?;
    let mut pool = RemotePool::new(c.qp, cq, staging, c.table)?;
    pool.set_timeout(OP);
    let data = block_content(0, 1, size);
    let mut buf = vec![0u8; size];
    println!("bench: {iters} x {size}-byte WRITE, then {iters} x READ, one at a time, block 0");
    let mut run = |name: &str, write: bool, pool: &mut RemotePool| -> Result<()> {
        for _ in 0..iters.min(100) {
            if write {
                pool.write(0, 0, &data)?;
            } else {
                pool.read(0, 0, &mut buf)?;
            }
        }
        let mut lat = Vec::with_capacity(iters as usize);
        let t0 = Instant::now();
        for _ in 0..iters {
            let t = Instant::now();
            if write {
                pool.write(0, 0, &data)?;
            } else {
                pool.read(0, 0, &mut buf)?;
            }
            lat.push(t.elapsed());
        }
        let total = t0.elapsed();
        lat.sort();
        let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];
        println!(
            "  {name:<5} median {} p99 {} min {} max {} {}",
            show::lat(pct(0.5)),
            show::lat(pct(0.99)),
            show::lat(lat[0]),
            show::lat(lat[lat.len() - 1]),
            show::ops(iters as u64, total)
        );
        Ok(())
    };
    run("WRITE", true, &mut pool)?;
    run("READ", false, &mut pool)?;
    if buf != data {
        return Err("the READs did not return what was written".into());
    }
    oob.send_line("done: benchmark finished", OP)?;
    Ok(true)
}
