//! A client of a remote memory pool: one-sided RDMA WRITE/READ and atomics on a peer's
//! blocks, addressed by block index (chapters 09 and 10).
//!
//! The pool server registers memory and sends its block table ((addr, len, rkey) per block,
//! [`RemoteRegion`]) through [`crate::exchange`]. A [`RemotePool`] owns a connected QP, its
//! send CQ and a local staging region, and turns `write(block, offset, data)` into one
//! `IBV_WR_RDMA_WRITE` to `block.addr + offset` with `block.rkey`, after checking the range
//! **before** anything is posted. The server's CPU takes no part.
//!
//! Two forms:
//! * **blocking**: [`RemotePool::write`], [`RemotePool::read`], [`RemotePool::fetch_add`],
//!   [`RemotePool::compare_swap`] post one work request and busy-poll its completion with a
//!   deadline;
//! * **split-phase**: [`RemotePool::post_write`] / [`RemotePool::post_read`] post from a
//!   caller's registered region and return a [`Ticket`] at once; many can be in flight;
//!   [`RemotePool::wait`] (or [`RemotePool::poll`]) collects their completions. This is the
//!   base any completion-driven async form builds on;
//! * **futures**: [`AsyncPool`] makes each operation a [`std::future::Future`] ([`PoolOp`]),
//!   run by [`AsyncPool::block_on`], which sleeps on the completion channel's fd between
//!   completions; [`join_all`] runs several at once.

use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

use lab::{
    CompletionQueue, Error, MemoryRegion, QueuePair, RemoteRegion, Result, SendWr, WcOpcode,
    WorkCompletion,
};

mod future;
pub use future::{AsyncPool, JoinAll, PoolOp, join_all};

/// The block table of a pool that is one region cut into `count` blocks of `size` bytes, back
/// to back: block `i` is `(mr.addr() + i * size, size, mr.rkey())`. What a pool server sends
/// its clients (chapters 09 and 10), and what a [`RemotePool`] addresses by block index.
pub fn block_table(mr: &MemoryRegion, count: usize, size: usize) -> Vec<RemoteRegion> {
    (0..count)
        .map(|i| RemoteRegion {
            addr: mr.addr() + (i * size) as u64,
            len: size as u64,
            rkey: mr.rkey(),
        })
        .collect()
}

/// Bounds-checks `offset..offset+len` in `blocks[block]`: its remote address and rkey.
pub fn locate_in(
    blocks: &[RemoteRegion],
    block: usize,
    offset: u64,
    len: u64,
) -> Result<(u64, u32)> {
    let b = blocks.get(block).ok_or_else(|| {
        Error::OutOfBounds(
            format!(
                "block {block} does not exist (the pool has {} blocks)",
                blocks.len()
            )
            .into(),
        )
    })?;
    let addr = b.addr_of(offset, len).ok_or_else(|| {
        Error::OutOfBounds(
            format!(
                "bytes {offset}..{} are outside block {block} ({} bytes)",
                offset as u128 + len as u128,
                b.len
            )
            .into(),
        )
    })?;
    Ok((addr, b.rkey))
}

/// Default deadline for one blocking operation.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// A posted, not yet collected split-phase operation (its `wr_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// The client side of a remote memory pool. See the module docs.
#[derive(Debug)]
pub struct RemotePool {
    qp: QueuePair,
    cq: CompletionQueue,
    staging: MemoryRegion,
    blocks: Vec<RemoteRegion>,
    timeout: Duration,
    next_wr_id: u64,
    in_flight: usize,
    /// Completions collected while waiting for another ticket.
    done: HashMap<u64, WorkCompletion>,
}

impl RemotePool {
    /// A pool client over `qp` (connected to the pool server, in RTS), whose send CQ is `cq`,
    /// with `staging` (registered with LOCAL_WRITE, at least 8 bytes) as the bounce buffer of
    /// the blocking calls, and the server's block table.
    pub fn new(
        qp: QueuePair,
        cq: CompletionQueue,
        staging: MemoryRegion,
        blocks: Vec<RemoteRegion>,
    ) -> Result<RemotePool> {
        if staging.len() < 8 {
            return Err(Error::InvalidArgument(
                "the staging region must hold at least 8 bytes (one atomic result)".into(),
            ));
        }
        Ok(RemotePool {
            qp,
            cq,
            staging,
            blocks,
            timeout: DEFAULT_OP_TIMEOUT,
            next_wr_id: 1,
            in_flight: 0,
            done: HashMap::new(),
        })
    }

    /// Sets the deadline of each blocking operation and of [`RemotePool::wait`].
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// The block table.
    pub fn blocks(&self) -> &[RemoteRegion] {
        &self.blocks
    }

    /// The QP (to query it, or print its number).
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// The send CQ.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// The staging region used by the blocking calls.
    pub fn staging(&self) -> &MemoryRegion {
        &self.staging
    }

    /// Takes the pool apart (QP, CQ, staging region).
    pub fn into_parts(self) -> (QueuePair, CompletionQueue, MemoryRegion) {
        (self.qp, self.cq, self.staging)
    }

    /// The remote address and rkey of `offset..offset+len` in `block`, or an error naming what
    /// is out of range. Nothing is posted when this fails.
    pub fn locate(&self, block: usize, offset: u64, len: u64) -> Result<(u64, u32)> {
        locate_in(&self.blocks, block, offset, len)
    }

    fn wr_id(&mut self) -> u64 {
        let id = self.next_wr_id;
        self.next_wr_id += 1;
        id
    }

    fn staging_fits(&self, len: usize) -> Result<()> {
        if len > self.staging.len() {
            return Err(Error::InvalidArgument(
                format!(
                    "{len} bytes do not fit the staging region ({} bytes); use post_write/\
                     post_read with your own region for large transfers",
                    self.staging.len()
                )
                .into(),
            ));
        }
        Ok(())
    }

    /// Runs one signaled work request and waits for its completion.
    fn run(&mut self, wr: SendWr<'_>, what: &'static str) -> Result<WorkCompletion> {
        let id = wr.wr_id();
        self.qp.post_send_one(wr)?;
        self.in_flight += 1;
        self.wait_id(id, what)
    }

    fn wait_id(&mut self, id: u64, what: &'static str) -> Result<WorkCompletion> {
        let start = Instant::now();
        loop {
            if let Some(wc) = self.done.remove(&id) {
                return wc.ok();
            }
            let left = self.timeout.saturating_sub(start.elapsed());
            let wc = match self.cq.wait_one(left) {
                Ok(wc) => wc,
                Err(Error::CompletionTimeout { got, .. }) => {
                    return Err(Error::CompletionTimeout {
                        what: what.into(),
                        timeout: self.timeout,
                        got,
                        expected: 1,
                    });
                }
                Err(e) => return Err(e),
            };
            self.in_flight = self.in_flight.saturating_sub(1);
            if wc.wr_id == id {
                return wc.ok();
            }
            self.done.insert(wc.wr_id, wc);
        }
    }

    /// RDMA WRITE of `data` at `offset` in `block` (through the staging region).
    pub fn write(&mut self, block: usize, offset: u64, data: &[u8]) -> Result<()> {
        let (addr, rkey) = self.locate(block, offset, data.len() as u64)?;
        self.staging_fits(data.len())?;
        self.staging.write_from(0, data)?;
        let sge = [self.staging.sge(0..data.len())];
        let id = self.wr_id();
        let wr = SendWr::write(id, &sge, addr, rkey);
        self.run(wr, "an RDMA WRITE to the pool").map(|_| ())
    }

    /// RDMA READ of `out.len()` bytes at `offset` in `block` (through the staging region).
    pub fn read(&mut self, block: usize, offset: u64, out: &mut [u8]) -> Result<()> {
        let (addr, rkey) = self.locate(block, offset, out.len() as u64)?;
        self.staging_fits(out.len())?;
        let sge = [self.staging.sge(0..out.len())];
        let id = self.wr_id();
        let wr = SendWr::read(id, &sge, addr, rkey);
        self.run(wr, "an RDMA READ from the pool")?;
        self.staging.read_into(0, out)
    }

    /// Like [`RemotePool::read`], into a new `Vec`.
    pub fn read_vec(&mut self, block: usize, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read(block, offset, &mut v)?;
        Ok(v)
    }

    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` on the u64 at `offset` in `block`: returns the old value.
    /// The address must be 8-byte aligned: a misaligned one is refused by `ibv_post_send`
    /// (EINVAL on rxe), which this passes on, so you see it.
    pub fn fetch_add(&mut self, block: usize, offset: u64, add: u64) -> Result<u64> {
        let (addr, rkey) = self.locate(block, offset, 8)?;
        let sge = self.staging.sge(0..8);
        let id = self.wr_id();
        let wr = SendWr::fetch_add(id, &sge, addr, rkey, add);
        self.run(wr, "an atomic FETCH_AND_ADD on the pool")?;
        self.staging.read_u64(0)
    }

    /// `IBV_WR_ATOMIC_CMP_AND_SWP` on the u64 at `offset` in `block`: if it equals `compare`
    /// it becomes `swap`. Returns the old value (equal to `compare` iff the swap happened).
    pub fn compare_swap(
        &mut self,
        block: usize,
        offset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64> {
        let (addr, rkey) = self.locate(block, offset, 8)?;
        let sge = self.staging.sge(0..8);
        let id = self.wr_id();
        let wr = SendWr::compare_swap(id, &sge, addr, rkey, compare, swap);
        self.run(wr, "an atomic CMP_AND_SWP on the pool")?;
        self.staging.read_u64(0)
    }

    /// Posts an RDMA WRITE of `src[range]` (a caller's registered region: no copy) to `offset`
    /// in `block`, without waiting. Collect it with [`RemotePool::wait`] or
    /// [`RemotePool::poll`]; keep `src` alive and unchanged until then.
    pub fn post_write(
        &mut self,
        block: usize,
        offset: u64,
        src: &MemoryRegion,
        range: Range<usize>,
    ) -> Result<Ticket> {
        let len = range.end.saturating_sub(range.start) as u64;
        let (addr, rkey) = self.locate(block, offset, len)?;
        let sge = [src.try_sge(range).ok_or_else(|| {
            Error::OutOfBounds("the local range is outside the source region".into())
        })?];
        let id = self.wr_id();
        self.qp.post_send_one(SendWr::write(id, &sge, addr, rkey))?;
        self.in_flight += 1;
        Ok(Ticket(id))
    }

    /// Posts an RDMA READ of `len(range)` bytes at `offset` in `block` into `dst[range]`
    /// (registered with LOCAL_WRITE), without waiting.
    pub fn post_read(
        &mut self,
        block: usize,
        offset: u64,
        dst: &MemoryRegion,
        range: Range<usize>,
    ) -> Result<Ticket> {
        let len = range.end.saturating_sub(range.start) as u64;
        let (addr, rkey) = self.locate(block, offset, len)?;
        let sge = [dst.try_sge(range).ok_or_else(|| {
            Error::OutOfBounds("the local range is outside the destination region".into())
        })?];
        let id = self.wr_id();
        self.qp.post_send_one(SendWr::read(id, &sge, addr, rkey))?;
        self.in_flight += 1;
        Ok(Ticket(id))
    }

    /// Split-phase operations posted and not yet collected.
    pub fn in_flight(&self) -> usize {
        self.in_flight + self.done.len()
    }

    /// Waits (busy-polling, with the pool's deadline) for `ticket`'s completion; `Ok` if it
    /// succeeded. Completions of other tickets that arrive meanwhile are kept for later.
    pub fn wait(&mut self, ticket: Ticket) -> Result<()> {
        self.wait_id(ticket.0, "a posted pool operation")
            .map(|_| ())
    }

    /// Collects one finished operation without waiting, if any: its ticket and its result.
    pub fn poll(&mut self) -> Result<Option<(Ticket, Result<WcOpcode>)>> {
        if let Some(&id) = self.done.keys().next() {
            let wc = self.done.remove(&id).expect("key just seen");
            return Ok(Some((Ticket(id), wc.ok().map(|w| w.opcode))));
        }
        match self.cq.poll_one()? {
            None => Ok(None),
            Some(wc) => {
                self.in_flight = self.in_flight.saturating_sub(1);
                Ok(Some((Ticket(wc.wr_id), wc.ok().map(|w| w.opcode))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Vec<RemoteRegion> {
        (0..4)
            .map(|i| RemoteRegion {
                addr: 0x10000 + i * 4096,
                len: 4096,
                rkey: 0x1234,
            })
            .collect()
    }

    #[test]
    fn locate_checks_block_and_range() {
        let t = table();
        assert_eq!(
            locate_in(&t, 2, 8, 8).unwrap(),
            (0x10000 + 2 * 4096 + 8, 0x1234)
        );
        assert_eq!(locate_in(&t, 3, 0, 4096).unwrap().0, 0x10000 + 3 * 4096);
        let e = locate_in(&t, 4, 0, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "out of bounds: block 4 does not exist (the pool has 4 blocks)"
        );
        let e = locate_in(&t, 0, 4090, 8).unwrap_err();
        assert_eq!(
            e.to_string(),
            "out of bounds: bytes 4090..4098 are outside block 0 (4096 bytes)"
        );
        assert!(locate_in(&t, 0, u64::MAX, 2).is_err());
        assert!(locate_in(&[], 0, 0, 0).is_err());
    }
}
