//! # Exercise 04-next-completion: wait for a completion by event, without a lost wake-up
//!
//! From chapter 04's README, "The verbs" and "Common mistakes" (arming, then sleeping,
//! without draining).
//!
//! The check opens the lab's rxe device, makes a CQ tied to a completion channel, and calls
//! [`next_completion`] twice: once with a WRITE's completion already in the CQ, once with an
//! empty CQ and a WRITE posted by another thread 200 ms later. Both calls must return that
//! WRITE's completion; the second must have slept on the channel (one event taken and
//! acknowledged), not busy-polled.
//!
//! Steps:
//! 1. Arm the CQ for the next completion (`CompletionQueue::req_notify`, every completion).
//! 2. Drain: a completion already in the CQ raises no event, so poll once
//!    (`CompletionQueue::poll_one`) and return it if there is one.
//! 3. Otherwise sleep for the event with the deadline `timeout` (`CompletionQueue::get_event`)
//!    and acknowledge it (`CqEvent::ack`).
//! 4. Poll the completion the event announced and return it.
//!
//! Check it: `cargo lab exercise check <id>` with the id 04-next-completion, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use lab::{CompletionQueue, WorkCompletion};
use std::time::Duration;

/// The next completion of `cq` (a CQ with a completion channel), sleeping on the channel
/// for at most `timeout` when the CQ is empty.
pub fn next_completion(cq: &CompletionQueue, timeout: Duration) -> lab::Result<WorkCompletion> {
    let _ = (cq, timeout);
    // step 1: arm. step 2: drain. step 3: sleep for the event, ack it. step 4: poll.
    todo!("step 1: arm the CQ for the next completion")
}
