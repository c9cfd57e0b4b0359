//! The completion-driven form of the pool client: each posted operation is a
//! [`std::future::Future`], and [`AsyncPool::block_on`] runs futures on one thread, sleeping in `poll(2)`
//! on the completion channel's fd when nothing is ready.
//!
//! Why this shape: a work request *is* already asynchronous (post now, completion later), so a
//! future per work request is the natural mapping, and a completion channel is exactly the
//! "wake me when something completed" primitive an executor needs. No runtime dependency
//! (tokio, async-std) is pulled in; the whole reactor is [`AsyncPool::block_on`]: poll the future; if it
//! is pending, arm the CQ (`ibv_req_notify_cq`), drain once more (a completion may have landed
//! before arming), then wait on the channel fd with a deadline, ack the event, repeat.
//! Several operations run concurrently with [`join_all`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use super::locate_in;
use crate::exchange::RemoteRegion;
use lab::{
    CompletionChannel, CompletionQueue, Error, MemoryRegion, QueuePair, Result, SendWr,
    WorkCompletion,
};

struct Shared {
    cq: CompletionQueue,
    done: HashMap<u64, WorkCompletion>,
    wakers: HashMap<u64, Waker>,
}

impl Shared {
    /// Moves every available completion into `done`, waking the future that waits for it.
    fn drain(&mut self) -> Result<usize> {
        let mut wcs = [WorkCompletion::default(); 16];
        let mut total = 0;
        loop {
            let n = self.cq.poll_into(&mut wcs)?;
            for wc in &wcs[..n] {
                if let Some(w) = self.wakers.remove(&wc.wr_id) {
                    w.wake();
                }
                self.done.insert(wc.wr_id, *wc);
            }
            total += n;
            if n < wcs.len() {
                return Ok(total);
            }
        }
    }
}

/// The pool client with futures: like [`super::RemotePool`]'s split-phase calls, but each
/// operation is a [`PoolOp`] future. Single-threaded (`Rc`), one per client thread.
pub struct AsyncPool {
    qp: QueuePair,
    channel: CompletionChannel,
    blocks: Vec<RemoteRegion>,
    shared: Rc<RefCell<Shared>>,
    next_wr_id: std::cell::Cell<u64>,
}

impl std::fmt::Debug for AsyncPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncPool")
            .field("qp", &self.qp)
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

/// One posted pool operation; resolves to its completion (`Err` for a non-success status).
pub struct PoolOp {
    id: u64,
    shared: Rc<RefCell<Shared>>,
}

impl std::fmt::Debug for PoolOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolOp").field("wr_id", &self.id).finish()
    }
}

impl Future for PoolOp {
    type Output = Result<WorkCompletion>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut s = self.shared.borrow_mut();
        if let Some(wc) = s.done.remove(&self.id) {
            return Poll::Ready(wc.ok());
        }
        if let Err(e) = s.drain() {
            return Poll::Ready(Err(e));
        }
        match s.done.remove(&self.id) {
            Some(wc) => Poll::Ready(wc.ok()),
            None => {
                s.wakers.insert(self.id, cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl AsyncPool {
    /// A pool client over `qp` (in RTS) whose send CQ `cq` was created with `channel`.
    pub fn new(
        qp: QueuePair,
        cq: CompletionQueue,
        channel: CompletionChannel,
        blocks: Vec<RemoteRegion>,
    ) -> AsyncPool {
        AsyncPool {
            qp,
            channel,
            blocks,
            shared: Rc::new(RefCell::new(Shared {
                cq,
                done: HashMap::new(),
                wakers: HashMap::new(),
            })),
            next_wr_id: std::cell::Cell::new(1),
        }
    }

    /// The block table.
    pub fn blocks(&self) -> &[RemoteRegion] {
        &self.blocks
    }

    fn post(&self, wr: impl FnOnce(u64) -> Result<()>) -> Result<PoolOp> {
        let id = self.next_wr_id.get();
        self.next_wr_id.set(id + 1);
        wr(id)?;
        Ok(PoolOp {
            id,
            shared: self.shared.clone(),
        })
    }

    /// Posts an RDMA WRITE of `src[range]` to `offset` in `block` (bounds checked first) and
    /// returns its future. Keep `src` alive and unchanged until it resolves.
    pub fn write(
        &self,
        block: usize,
        offset: u64,
        src: &MemoryRegion,
        range: Range<usize>,
    ) -> Result<PoolOp> {
        let len = range.end.saturating_sub(range.start) as u64;
        let (addr, rkey) = locate_in(&self.blocks, block, offset, len)?;
        let sge = [src.try_sge(range).ok_or_else(|| {
            Error::OutOfBounds("the local range is outside the source region".into())
        })?];
        self.post(|id| self.qp.post_send_one(SendWr::write(id, &sge, addr, rkey)))
    }

    /// Posts an RDMA READ of `offset..` in `block` into `dst[range]` and returns its future.
    pub fn read(
        &self,
        block: usize,
        offset: u64,
        dst: &MemoryRegion,
        range: Range<usize>,
    ) -> Result<PoolOp> {
        let len = range.end.saturating_sub(range.start) as u64;
        let (addr, rkey) = locate_in(&self.blocks, block, offset, len)?;
        let sge = [dst.try_sge(range).ok_or_else(|| {
            Error::OutOfBounds("the local range is outside the destination region".into())
        })?];
        self.post(|id| self.qp.post_send_one(SendWr::read(id, &sge, addr, rkey)))
    }

    /// Posts an atomic FETCH_AND_ADD on the u64 at `offset` in `block`; the old value lands in
    /// `result[at..at+8]` when the future resolves.
    pub fn fetch_add(
        &self,
        block: usize,
        offset: u64,
        add: u64,
        result: &MemoryRegion,
        at: usize,
    ) -> Result<PoolOp> {
        let (addr, rkey) = locate_in(&self.blocks, block, offset, 8)?;
        let sge = result.try_sge(at..at + 8).ok_or_else(|| {
            Error::OutOfBounds("the result slot is outside the result region".into())
        })?;
        self.post(|id| {
            self.qp
                .post_send_one(SendWr::fetch_add(id, &sge, addr, rkey, add))
        })
    }

    /// Runs `fut` on this thread until it resolves or `timeout` passes, sleeping on the
    /// completion channel's fd whenever nothing is ready (see the module docs).
    pub fn block_on<F: Future>(&self, fut: F, timeout: Duration) -> Result<F::Output> {
        block_on(&self.shared, &self.channel, fut, timeout)
    }
}

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs `fut` on this thread until it resolves or `timeout` passes. When the future is
/// pending and no completion is ready, sleeps on the completion channel's fd (after arming the
/// CQ and draining once more, so a completion that raced the arming is not missed).
fn block_on<F: Future>(
    shared: &Rc<RefCell<Shared>>,
    channel: &CompletionChannel,
    fut: F,
    timeout: Duration,
) -> Result<F::Output> {
    let deadline = Instant::now() + timeout;
    let flag = Arc::new(Flag(AtomicBool::new(true)));
    let waker = Waker::from(flag.clone());
    let mut cx = TaskContext::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        flag.0.store(false, Ordering::Release);
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Ok(v);
        }
        if flag.0.load(Ordering::Acquire) {
            continue; // woken during the poll: something completed, poll again
        }
        {
            let mut s = shared.borrow_mut();
            s.cq.req_notify(false)?;
            if s.drain()? > 0 {
                continue;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match channel.get_cq_event(left) {
            Ok(ev) => ev.ack(),
            Err(Error::EventTimeout { .. }) => {
                return Err(Error::CompletionTimeout {
                    what: "pool operations (block_on)".into(),
                    timeout,
                    got: 0,
                    expected: 1,
                });
            }
            Err(e) => return Err(e),
        }
        shared.borrow_mut().drain()?;
    }
}

/// A future that resolves when every future in it has, with their outputs in order.
pub struct JoinAll<F: Future> {
    futs: Vec<Option<Pin<Box<F>>>>,
    out: Vec<Option<F::Output>>,
}

impl<F: Future> std::fmt::Debug for JoinAll<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = self.futs.iter().filter(|f| f.is_some()).count();
        f.debug_struct("JoinAll")
            .field("pending", &pending)
            .finish()
    }
}

/// Runs several futures concurrently (`std` has no `join_all`).
pub fn join_all<F: Future>(futs: impl IntoIterator<Item = F>) -> JoinAll<F> {
    let futs: Vec<_> = futs.into_iter().map(|f| Some(Box::pin(f))).collect();
    let out = futs.iter().map(|_| None).collect();
    JoinAll { futs, out }
}

impl<F: Future> Future for JoinAll<F>
where
    F::Output: Unpin,
{
    type Output = Vec<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut pending = false;
        for (slot, out) in this.futs.iter_mut().zip(this.out.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(
                this.out
                    .iter_mut()
                    .map(|o| o.take().expect("ready"))
                    .collect(),
            )
        }
    }
}
