//! `--proto rping`: rping's protocol, so this chapter interoperates with `rping -s` and
//! `rping -c`. Each ping is two SENDs of `{addr, rkey, size}` and one RDMA READ and one RDMA
//! WRITE by the server.

use crate::conn::{
    Conn, complete, conn_on, drain, established, post, post_recv, print_qp, wc_or_disconnect,
};
use crate::server::accept;
use crate::{Opts, timeout};
use course::{Failure, OrFail, Outcome as Result, expect};
use lab::cm::CmId;
use lab::{SendWr, state};

/// rping's `struct rping_rdma_info`: buf, rkey, size, in network byte order (16 bytes).
pub(crate) fn rping_info(addr: u64, rkey: u32, size: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&addr.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..].copy_from_slice(&size.to_be_bytes());
    b
}

pub(crate) fn parse_rping_info(b: &[u8]) -> (u64, u32, u32) {
    let addr = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
    let rkey = u32::from_be_bytes(b[8..12].try_into().expect("4 bytes"));
    let size = u32::from_be_bytes(b[12..16].try_into().expect("4 bytes"));
    (addr, rkey, size)
}

/// rping's server: for each ping, the client's SEND of {addr, rkey, size} of its start buffer;
/// we READ it, SEND a go-ahead; its SEND of {addr, rkey, size} of its rdma buffer; we WRITE
/// back, SEND a go-ahead. The client disconnects after its last ping.
pub(crate) fn serve_rping(o: &Opts, role: &str, id: CmId) -> Result {
    let t = timeout(o);
    let size = o.size as usize;
    // Our region: [0..16) the receive buffer, [16..32) the go-ahead, [64..) the data.
    let c = conn_on(id, 64 + size, role, 3)?;
    post_recv(&c, 1, 0..16)?;
    accept(role, 4, &c, &[], t)?;
    let c = established(c)?;
    print_qp(role, 6, &c.qp)?;
    let mut pings = 0;
    // The client's start buffer, or its disconnect after the last ping.
    while wc_or_disconnect(&c, t)?.is_some() {
        let (addr, rkey, len) = parse_rping_info(&c.mr.as_slice()[..16]);
        expect(len as usize <= size, || {
            format!("the client's buffer ({len} bytes) is larger than ours (-S {size})")
        })?;
        let data = c.mr.sge(64..64 + len as usize);
        post(&c, SendWr::read(2, std::slice::from_ref(&data), addr, rkey))?;
        complete(&c.cq, 1, t, "the RDMA READ")?;
        let bytes = &c.mr.as_slice()[64..64 + len as usize];
        let text = bytes.split(|b| *b == 0).next().unwrap_or(&[]);
        let n = text.len() + 1;
        println!(
            "{role}: ping {pings}: RDMA READ of the client's buffer: {:?}",
            String::from_utf8_lossy(text)
        );
        post_recv(&c, 1, 0..16)?;
        let go = c.mr.sge(16..32);
        post(&c, SendWr::send(3, std::slice::from_ref(&go)))?;
        complete(&c.cq, 1, t, "the go-ahead SEND")?;
        expect(wc_or_disconnect(&c, t)?.is_some(), || {
            "the client left in the middle of a ping".into()
        })?;
        let (addr, rkey, _) = parse_rping_info(&c.mr.as_slice()[..16]);
        let data = c.mr.sge(64..64 + n);
        post(
            &c,
            SendWr::write(4, std::slice::from_ref(&data), addr, rkey),
        )?;
        complete(&c.cq, 1, t, "the RDMA WRITE")?;
        println!("{role}: ping {pings}: RDMA WRITE of {n} bytes back into the client's buffer");
        post_recv(&c, 1, 0..16)?;
        post(&c, SendWr::send(3, std::slice::from_ref(&go)))?;
        complete(&c.cq, 1, t, "the go-ahead SEND")?;
        pings += 1;
    }
    println!("step 7: {role}: RDMA_CM_EVENT_DISCONNECTED (10) after {pings} ping(s)");
    c.id.disconnect().or_fail("rdma_disconnect")?;
    drain(role, 8, &c, 1, t)?;
    expect(pings > 0, || "no ping arrived".into())?;
    course::done(true, "the server side behaved as expected");
    Ok(())
}

/// rping's client: for each ping, fill the start buffer with rping's pattern, SEND its
/// {addr, rkey, size}, wait for the go-ahead; SEND the rdma buffer's, wait; compare.
pub(crate) fn rping_client(o: &Opts, mut c: Conn<state::Rts>) -> Result {
    let t = timeout(o);
    let role = "client";
    let size = o.size as usize;
    // Our region: [0..16) receive, [16..32) our SEND, [64..64+size) start, then rdma buffer.
    let (start_off, rdma_off) = (64, 64 + size);
    let mut first = 65u8;
    for ping in 0..o.count {
        let buf = &mut c.mr.as_mut_slice()[start_off..start_off + size];
        let head = format!("rdma-ping-{ping}: ");
        buf[..head.len()].copy_from_slice(head.as_bytes());
        let mut ch = first;
        for b in &mut buf[head.len()..] {
            *b = ch;
            ch = if ch >= 122 { 65 } else { ch + 1 };
        }
        buf[size - 1] = 0;
        first = if first >= 122 { 65 } else { first + 1 };
        c.mr.as_mut_slice()[rdma_off..rdma_off + size].fill(0);
        for (off, what) in [(start_off, "start"), (rdma_off, "rdma")] {
            let info = rping_info(c.mr.addr() + off as u64, c.mr.rkey(), size as u32);
            c.mr.as_mut_slice()[16..32].copy_from_slice(&info);
            let s = c.mr.sge(16..32);
            post(&c, SendWr::send(2, std::slice::from_ref(&s)))?;
            let wcs = complete(
                &c.cq,
                2,
                t,
                &format!("the SEND of our {what} buffer and the go-ahead"),
            )?;
            let recv = wcs
                .iter()
                .find(|w| w.wr_id == 1)
                .ok_or_else(|| Failure("no go-ahead".into()))?;
            expect(recv.byte_len == 16, || {
                format!("a go-ahead of {} bytes, rping sends 16", recv.byte_len)
            })?;
            post_recv(&c, 1, 0..16)?;
        }
        let a = &c.mr.as_slice()[start_off..start_off + size];
        let b = &c.mr.as_slice()[rdma_off..rdma_off + size];
        expect(a == b, || "the server wrote back something else".into())?;
        println!(
            "{role}: ping {ping}: {:?} came back",
            String::from_utf8_lossy(&a[..size - 1])
        );
    }
    c.id.disconnect().or_fail("rdma_disconnect")?;
    drain(role, 7, &c, 1, t)?;
    course::done(true, "every ping came back");
    Ok(())
}
