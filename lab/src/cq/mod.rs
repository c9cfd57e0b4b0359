//! Completion queues, completion channels and work completions.
//!
//! Verbs: `ibv_create_comp_channel`, `ibv_create_cq`, `ibv_poll_cq`, `ibv_req_notify_cq`,
//! `ibv_get_cq_event`, `ibv_ack_cq_events`, `ibv_destroy_cq`, `ibv_destroy_comp_channel`.
//!
//! Two ways to learn that work finished (chapter 04):
//!
//! * **busy polling**: call [`CompletionQueue::poll_into`] in a loop (lowest latency, burns a
//!   core). [`CompletionQueue::poll_exact`] / [`CompletionQueue::wait_one`] do that with a
//!   deadline, because on rxe some mistakes produce *no* completion at all;
//! * **events**: arm the CQ ([`CompletionQueue::req_notify`]), sleep in `poll(2)` on the
//!   channel's fd until the next completion, take the event ([`CompletionChannel::get_cq_event`]),
//!   acknowledge it ([`CqEvent::ack`]), re-arm, then drain with `poll_into`. Re-arm *before*
//!   draining, or a completion that arrives in between raises no event.
//!
//! The work completion (`struct ibv_wc`, its status and opcode tables) is in `wc.rs`.

use std::borrow::Cow;
use std::fmt;
use std::os::raw::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rdma_sys::*;

use crate::device::{Context, poll_readable, set_nonblocking};
use crate::error::{Errno, Error, Hint, HintCode, Result, Verb, ptr, rc, report_drop_failure};

pub(crate) mod wc;

pub use wc::*;

pub(crate) struct ChannelInner {
    ch: NonNull<ibv_comp_channel>,
    _ctx: Context,
    destroyed: AtomicBool,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        if self.destroyed.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: every CQ using the channel holds an Arc to it, so none is left; destroyed once.
        let ret = unsafe { ibv_destroy_comp_channel(self.ch.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::failed(Verb::DestroyCompChannel, errno)) {
            report_drop_failure("ibv_destroy_comp_channel", &e);
        }
    }
}

/// A completion channel: `struct ibv_comp_channel` (`ibv_create_comp_channel(3)`), the file
/// descriptor completion events arrive on. Its fd is made non-blocking so every wait has a
/// deadline.
pub struct CompletionChannel {
    inner: Arc<ChannelInner>,
}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl Context {
    /// Creates a completion channel (`ibv_create_comp_channel(3)`).
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        // SAFETY: the context is open.
        let ch = ptr(unsafe { ibv_create_comp_channel(self.raw()) }, |errno| {
            Error::failed(Verb::CreateCompChannel, errno)
        })?;
        let inner = Arc::new(ChannelInner {
            ch,
            _ctx: self.clone(),
            destroyed: AtomicBool::new(false),
        });
        // SAFETY: the channel was just created; fd is its file descriptor.
        set_nonblocking(unsafe { (*ch.as_ptr()).fd })?;
        Ok(CompletionChannel { inner })
    }

    /// Creates a completion queue with room for at least `cqe` completions
    /// (`ibv_create_cq(3)`; the device may round up: rxe gives 255 for 128, 7 for 4).
    /// With a channel, the CQ can raise completion events on it.
    pub fn create_cq(
        &self,
        cqe: i32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue> {
        let ch = channel.map_or(std::ptr::null_mut(), |c| c.inner.ch.as_ptr());
        // SAFETY: the context is open; `ch` is null or a live channel of this context.
        let cq = unsafe { ibv_create_cq(self.raw(), cqe, std::ptr::null_mut(), ch, 0) };
        let cq = ptr(cq, |errno| {
            Error::failed(Verb::CreateCq, errno)
                .args(format!("cqe {cqe}"))
                .with_hint((errno.0 == libc::EINVAL).then_some(Hint::new(HintCode::CqeRange)))
        })?;
        let inner = Arc::new(CqInner {
            cq,
            channel: channel.map(|c| c.inner.clone()),
            ctx: self.clone(),
            unacked: AtomicUsize::new(0),
            destroyed: AtomicBool::new(false),
        });
        // `cq_context` is what ibv_get_cq_event hands back: point it at our inner so an event
        // can be matched to its CompletionQueue. The inner lives as long as the CQ.
        // SAFETY: the CQ was just created and nobody else uses it yet.
        unsafe { (*cq.as_ptr()).cq_context = Arc::as_ptr(&inner) as *mut c_void };
        Ok(CompletionQueue { inner })
    }
}

impl CompletionChannel {
    /// The channel's file descriptor (non-blocking), for `poll(2)`/`epoll(7)` in an event loop.
    pub fn fd(&self) -> i32 {
        // SAFETY: the channel is alive while `self` is.
        unsafe { (*self.inner.ch.as_ptr()).fd }
    }

    /// Waits up to `timeout` for the next completion event (`poll(2)` on the fd, then
    /// `ibv_get_cq_event(3)`). The CQ must have been armed with
    /// [`CompletionQueue::req_notify`], or no event comes.
    ///
    /// The returned [`CqEvent`] must be acknowledged ([`CqEvent::ack`]); `ibv_destroy_cq` blocks
    /// forever on unacknowledged events, so `lab` acks it on drop if you forget.
    pub fn get_cq_event(&self, timeout: Duration) -> Result<CqEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if !poll_readable(self.fd(), left)? {
                return Err(Error::EventTimeout {
                    what: "completion event on the channel".into(),
                    timeout,
                    hints: vec![Hint::new(HintCode::CqNotArmed)],
                });
            }
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut cq_ctx: *mut c_void = std::ptr::null_mut();
            // SAFETY: the channel is alive; out-pointers are valid.
            let ret = unsafe { ibv_get_cq_event(self.inner.ch.as_ptr(), &mut cq, &mut cq_ctx) };
            if ret != 0 {
                let errno = Errno::last();
                if errno.0 == libc::EAGAIN || errno.0 == libc::EINTR {
                    continue; // spurious wake-up: wait again
                }
                return Err(Error::failed(Verb::GetCqEvent, errno));
            }
            let inner_ptr = cq_ctx as *const CqInner;
            // SAFETY: every CQ lab creates has cq_context = Arc::as_ptr of its inner, and the CQ
            // (hence the inner) cannot be destroyed while this event is unacknowledged: its
            // Drop acks all events first, and `destroy` refuses while events are pending. So
            // the pointer is live; we take one more strong count for the event.
            let inner = unsafe {
                Arc::increment_strong_count(inner_ptr);
                Arc::from_raw(inner_ptr)
            };
            inner.unacked.fetch_add(1, Ordering::AcqRel);
            return Ok(CqEvent {
                cq: Some(inner),
                raw_cq: cq,
            });
        }
    }

    /// Destroys the channel now (`ibv_destroy_comp_channel(3)`), reporting failure. The verb is
    /// really called even while a CQ uses the channel, so you see `EBUSY (16)`; the channel is
    /// then destroyed later, after its last CQ.
    pub fn destroy(self) -> Result<()> {
        let users = Arc::strong_count(&self.inner) - 1;
        // SAFETY: the channel is alive; on success `destroyed` stops Drop from repeating it.
        let ret = unsafe { ibv_destroy_comp_channel(self.inner.ch.as_ptr()) };
        rc(ret, |errno| {
            Error::failed(Verb::DestroyCompChannel, errno).with_hint((errno.0 == libc::EBUSY).then(
                || {
                    Hint::detailed(
                        HintCode::ChannelBusy,
                        format!(
                            "{users} completion queue(s) still use this channel: destroy them \
                             first"
                        ),
                    )
                },
            ))
        })?;
        self.inner.destroyed.store(true, Ordering::Release);
        Ok(())
    }
}

/// One completion event (from `ibv_get_cq_event(3)`), to be acknowledged with
/// [`CqEvent::ack`] (`ibv_ack_cq_events(3)`). Dropping it acks it too.
pub struct CqEvent {
    cq: Option<Arc<CqInner>>,
    raw_cq: *mut ibv_cq,
}

// SAFETY: the event only carries the CQ pointer, used for the thread-safe ack verb.
unsafe impl Send for CqEvent {}

impl fmt::Debug for CqEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqEvent")
            .field("acked", &self.cq.is_none())
            .finish()
    }
}

impl CqEvent {
    /// True if this event is about `cq`.
    pub fn is_for(&self, cq: &CompletionQueue) -> bool {
        self.raw_cq == cq.inner.cq.as_ptr()
    }

    /// Acknowledges the event (`ibv_ack_cq_events(cq, 1)`).
    pub fn ack(mut self) {
        self.ack_now();
    }

    fn ack_now(&mut self) {
        if let Some(inner) = self.cq.take() {
            // SAFETY: the CQ is alive (we hold its inner); this event is acked exactly once.
            unsafe { ibv_ack_cq_events(inner.cq.as_ptr(), 1) };
            inner.unacked.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for CqEvent {
    fn drop(&mut self) {
        self.ack_now();
    }
}

pub(crate) struct CqInner {
    pub(crate) cq: NonNull<ibv_cq>,
    channel: Option<Arc<ChannelInner>>,
    ctx: Context,
    unacked: AtomicUsize,
    destroyed: AtomicBool,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        if self.destroyed.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: QPs using this CQ and unacked events hold Arcs to it, so none is left; the CQ
        // is destroyed exactly once.
        let ret = unsafe { ibv_destroy_cq(self.cq.as_ptr()) };
        if let Err(e) = rc(ret, |errno| Error::failed(Verb::DestroyCq, errno)) {
            report_drop_failure("ibv_destroy_cq", &e);
        }
    }
}

/// A completion queue: `struct ibv_cq` (`ibv_create_cq(3)`).
///
/// Queue pairs using it keep it alive. Polling takes `&self`: a CQ may be shared by threads.
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("cqe", &self.cqe())
            .field("has_channel", &self.inner.channel.is_some())
            .finish()
    }
}

/// How many CQEs `poll_into` reads per `ibv_poll_cq` call (into a stack buffer).
const POLL_BATCH: usize = 16;

impl CompletionQueue {
    /// The actual capacity (`cq->cqe`), which the device may have rounded up.
    pub fn cqe(&self) -> i32 {
        // SAFETY: the CQ is alive while `self` is.
        unsafe { (*self.inner.cq.as_ptr()).cqe }
    }

    /// The device context this CQ belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Polls without waiting (`ibv_poll_cq(3)`): fills the front of `out` with up to
    /// `out.len()` completions and returns how many. Allocates nothing.
    ///
    /// Completions with an error status are returned like any other: check
    /// [`WorkCompletion::status`] (or use [`WorkCompletion::ok`]).
    pub fn poll_into(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        // Not zeroed: this runs in busy-poll loops, and ibv_poll_cq fills the entries it returns.
        let mut raw = std::mem::MaybeUninit::<[ibv_wc; POLL_BATCH]>::uninit();
        let raw = raw.as_mut_ptr() as *mut ibv_wc;
        let mut got = 0;
        while got < out.len() {
            let want = (out.len() - got).min(POLL_BATCH);
            // SAFETY: the CQ is alive; `raw` has room for `want` <= POLL_BATCH entries.
            let n = unsafe { ibv_poll_cq(self.inner.cq.as_ptr(), want as c_int, raw) };
            if n < 0 {
                return Err(Error::PollCq { rc: n });
            }
            let n = (n as usize).min(want);
            for (i, dst) in out[got..got + n].iter_mut().enumerate() {
                // SAFETY: ibv_poll_cq initialised the first `n` entries.
                *dst = WorkCompletion::from_raw(unsafe { &*raw.add(i) });
            }
            got += n;
            if n < want {
                break;
            }
        }
        Ok(got)
    }

    /// Polls once for one completion (`ibv_poll_cq(3)` with 1 entry).
    pub fn poll_one(&self) -> Result<Option<WorkCompletion>> {
        let mut wc = [WorkCompletion::default()];
        Ok((self.poll_into(&mut wc)? == 1).then_some(wc[0]))
    }

    /// Busy-polls until `out` is full or `timeout` passes; the deadline error says what was
    /// awaited and the usual reasons nothing came. Allocates nothing on success.
    pub fn poll_exact(&self, out: &mut [WorkCompletion], timeout: Duration) -> Result<()> {
        self.poll_exact_for(out, timeout, "the awaited work requests")
    }

    /// [`CompletionQueue::poll_exact`] with a description of what is awaited, for the error.
    pub fn poll_exact_for(
        &self,
        out: &mut [WorkCompletion],
        timeout: Duration,
        what: &'static str,
    ) -> Result<()> {
        let start = Instant::now();
        let mut got = 0;
        let mut spins = 0u32;
        while got < out.len() {
            let n = self.poll_into(&mut out[got..])?;
            got += n;
            if n == 0 {
                spins = spins.wrapping_add(1);
                // Reading the clock costs little, but not nothing: look every 64 empty polls.
                if spins & 63 == 0 && start.elapsed() >= timeout {
                    return Err(Error::CompletionTimeout {
                        what: Cow::Borrowed(what),
                        timeout,
                        got,
                        expected: out.len(),
                    });
                }
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// Busy-polls for the next completion, whatever its status, for at most `timeout`.
    pub fn wait_one(&self, timeout: Duration) -> Result<WorkCompletion> {
        let mut wc = [WorkCompletion::default()];
        self.poll_exact_for(&mut wc, timeout, "one completion")?;
        Ok(wc[0])
    }

    /// Arms the CQ to raise one completion event on its channel for the next completion
    /// (`ibv_req_notify_cq(3)`); with `solicited_only`, only for solicited completions (a SEND
    /// with [`crate::SendWr::solicited`], or any error). Re-arm after every event.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: the CQ is alive.
        let ret = unsafe { ibv_req_notify_cq(self.inner.cq.as_ptr(), solicited_only as c_int) };
        rc(ret, |errno| Error::failed(Verb::ReqNotifyCq, errno))
    }

    /// Waits for the next completion event of this CQ's channel
    /// ([`CompletionChannel::get_cq_event`]). Errors if the CQ has no channel. If several CQs
    /// share the channel, the event may be another CQ's: check [`CqEvent::is_for`].
    pub fn get_event(&self, timeout: Duration) -> Result<CqEvent> {
        let ch = self.inner.channel.as_ref().ok_or_else(|| {
            Error::InvalidArgument(
                "this CQ was created without a completion channel: pass one to create_cq".into(),
            )
        })?;
        CompletionChannel { inner: ch.clone() }.get_cq_event(timeout)
    }

    /// Completion events taken but not yet acknowledged.
    pub fn unacked_events(&self) -> usize {
        self.inner.unacked.load(Ordering::Acquire)
    }

    /// How many completion events were acknowledged over the CQ's life
    /// (`cq->comp_events_completed`).
    pub fn comp_events_completed(&self) -> u32 {
        // SAFETY: the CQ is alive; the field is a plain counter libibverbs updates under its
        // mutex, read here for display only.
        unsafe { std::ptr::read_volatile(&(*self.inner.cq.as_ptr()).comp_events_completed) }
    }

    /// True if an async event's element ([`crate::AsyncElement::Cq`]) is this CQ.
    pub fn is_async_element(&self, element: &crate::device::AsyncElement) -> bool {
        matches!(element, crate::device::AsyncElement::Cq(p) if *p == self.inner.cq.as_ptr() as usize)
    }

    /// Destroys the CQ now (`ibv_destroy_cq(3)`), reporting failure. The verb is really called
    /// while a QP still uses the CQ, so you see `EBUSY (16)` (the CQ is then destroyed after its
    /// last QP). Refused without calling the verb while events are unacknowledged, because
    /// then `ibv_destroy_cq` would block forever.
    pub fn destroy(self) -> Result<()> {
        let unacked = self.unacked_events();
        if unacked > 0 {
            return Err(
                Error::failed(Verb::DestroyCq, Errno(libc::EBUSY)).with_hint(Hint::detailed(
                    HintCode::UnackedEvents,
                    format!(
                        "{unacked} completion event(s) not acknowledged: ibv_destroy_cq would \
                         block forever; ack every event (CqEvent::ack) first"
                    ),
                )),
            );
        }
        let users = Arc::strong_count(&self.inner) - 1;
        // SAFETY: the CQ is alive; on success `destroyed` stops Drop from repeating it.
        let ret = unsafe { ibv_destroy_cq(self.inner.cq.as_ptr()) };
        rc(ret, |errno| {
            Error::failed(Verb::DestroyCq, errno).with_hint((errno.0 == libc::EBUSY).then(|| {
                Hint::detailed(
                    HintCode::CqBusy,
                    format!("{users} queue pair(s) still use this CQ: destroy them first"),
                )
            }))
        })?;
        self.inner.destroyed.store(true, Ordering::Release);
        Ok(())
    }
}
