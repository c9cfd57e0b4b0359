//! `--cm`: the same connections through rdma_cm (chapter 12 walks through every event): the
//! table travels in the accept's private data.

use std::net::{IpAddr, SocketAddr};

use crate::{Args, CONNECT, RESOLVE, TABLE_TAG};
use course::exchange::{Endpoint, Listener};
use course::show::{self, Align, Table};
use course::{Failure, OrFail, Outcome as Result, Peer, Tagged, expect, unframed};
use lab::cm::{CmEventType, CmId, ConnParam};
use lab::{Context, QpInitAttr, RemoteRegion, state};

/// The table as the accept's private data: tag, base address, block length, block count,
/// rkey (24 bytes; a REP carries at most 196). The table is regular (one MR, equal blocks
/// back to back), so these numbers give every `(addr, len, rkey)` entry. A table of unrelated
/// entries would need 16 bytes each: 11 of them would fit, which is why a bigger pool
/// description would travel in a SEND or an RDMA READ after the connection.
pub(crate) fn table_data(table: &[RemoteRegion]) -> Vec<u8> {
    let first = table.first().copied().unwrap_or_default();
    Tagged::new(TABLE_TAG)
        .u64(first.addr)
        .u32(first.len as u32)
        .u32(table.len() as u32)
        .u32(first.rkey)
        .into_bytes()
}

/// The table back from the private data (`None` if it holds none).
pub(crate) fn parse_table_data(d: &[u8]) -> Option<Vec<RemoteRegion>> {
    let mut n = Tagged::read(d, TABLE_TAG)?;
    let addr = n.u64()?;
    let len = u64::from(n.u32()?);
    let blocks = u64::from(n.u32()?);
    let rkey = n.u32()?;
    if blocks > 4096 {
        return None;
    }
    Some(
        (0..blocks)
            .map(|i| RemoteRegion {
                addr: addr + i * len,
                len,
                rkey,
            })
            .collect(),
    )
}

/// The server side with --cm: take the next CONNECT_REQUEST (the client's name in its private
/// data), create the QP on its id (INIT), accept with the table as private data (librdmacm
/// moves our QP to RTR and RTS before the REP leaves), wait for ESTABLISHED. Then the client's
/// go/done stream: requests are accepted one at a time and a client opens its stream only
/// once ESTABLISHED, so the next stream is this client's (its first line, its name, says so).
pub(crate) fn cm_accept(
    listener: &CmId,
    pd: &lab::ProtectionDomain,
    cq: &lab::CompletionQueue,
    lines: &Listener,
    table: &[u8],
    what: &str,
) -> Result<Peer> {
    let req = listener
        .get_request(CONNECT)
        .or_fail_with(|| format!("waiting for {what} (rdma_cm)"))?;
    // The client's name, framed (`course::framed`): the server always reads 56 bytes.
    let name = unframed(&req.private_data)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .ok_or_else(|| Failure("a connection request without a name".into()))?;
    let qp = req.id.create_qp(pd, &QpInitAttr::rc(cq, cq))?;
    req.id.accept(&ConnParam::with_data(table))?;
    req.id
        .expect_event(CmEventType::Established, CONNECT)
        .or_fail_with(|| format!("waiting for {name}'s ESTABLISHED"))?;
    let qp = qp.assume_state::<state::Rts>();
    let dest = qp.query()?.dest_qp_num;
    let mut oob = lines
        .accept(CONNECT)
        .or_fail_with(|| format!("waiting for {name}'s go/done stream"))?;
    let hello = oob.recv_line(CONNECT)?;
    expect(hello == name, || {
        format!("the go/done stream says it is {hello:?}, expected {name:?}")
    })?;
    Ok(Peer {
        qp,
        oob,
        theirs: Endpoint {
            name,
            qpn: dest,
            ..Default::default()
        },
    })
}

/// The device a client works on: its own `ibv_open_device`, or with --cm librdmacm's, from a
/// new id resolved toward the server (address, then route), which [`connect`] then uses.
pub(crate) fn client_device(args: &Args, host: &str) -> Result<(Context, Option<CmId>)> {
    if !args.cm {
        return Ok((course::open_device(None)?, None));
    }
    let given: IpAddr = host
        .parse()
        .map_err(|_| Failure(format!("{host:?} is not an IP address")))?;
    // 127.0.0.1 cannot be routed on RoCE (no RDMA device on `lo`): the server then shares our
    // device, so use our own rxe netdev's address (chapter 12 shows the error otherwise).
    let ip = if given.is_loopback() {
        IpAddr::V4(course::rxe_address()?)
    } else {
        given
    };
    let id = resolved(SocketAddr::new(ip, args.port))?;
    Ok((id.context()?, Some(id)))
}

/// A new id with its address and route resolved toward `dst`.
pub(crate) fn resolved(dst: SocketAddr) -> Result<CmId> {
    let id = CmId::new()?;
    id.resolve_addr(None, dst, RESOLVE)?;
    id.expect_event(CmEventType::AddrResolved, CONNECT)
        .or_fail("rdma_resolve_addr")?;
    id.resolve_route(RESOLVE)?;
    id.expect_event(CmEventType::RouteResolved, CONNECT)
        .or_fail("rdma_resolve_route")?;
    Ok(id)
}

pub(crate) fn print_table(table: &[RemoteRegion]) {
    let mut t = Table::new([
        ("block", Align::Right),
        ("len", Align::Right),
        ("rkey", Align::Left),
        ("addr", Align::Left),
    ])
    .indent(2);
    const SHOWN: usize = 16;
    for (i, b) in table.iter().enumerate().take(SHOWN) {
        t.row([
            i.to_string(),
            b.len.to_string(),
            show::rkey(b.rkey).to_string(),
            show::addr(b.addr).to_string(),
        ]);
    }
    print!("{t}");
    if table.len() > SHOWN {
        println!(
            "  ... ({} more blocks, same rkey, addresses every {} bytes)",
            table.len() - SHOWN,
            table[0].len
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab::cm::MAX_ACCEPT_DATA;

    #[test]
    fn the_table_fits_the_accept_and_comes_back_whole() {
        let table: Vec<RemoteRegion> = (0..4096u64)
            .map(|i| RemoteRegion {
                addr: 0x7f00_0000_0000 + i * 64,
                len: 64,
                rkey: 0x1234,
            })
            .collect();
        let d = table_data(&table);
        assert!(d.len() <= MAX_ACCEPT_DATA);
        // The REP's private data arrives padded to 196 bytes.
        let mut padded = d.clone();
        padded.resize(MAX_ACCEPT_DATA, 0);
        assert_eq!(parse_table_data(&padded).unwrap(), table);
        assert!(parse_table_data(b"RGN1").is_none());
    }
}
