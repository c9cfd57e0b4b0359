//! Reference solution of exercise 04-next-completion (see `../next_completion.rs` for the
//! task).

use lab::{CompletionQueue, Error, WorkCompletion};
use std::time::Duration;

/// Arm first, then drain: a completion that lands between the two is found by the drain, and
/// one that lands after it raises the event the arming asked for. Draining before arming
/// would lose a completion landing in between (no event, and the sleep runs to its deadline).
pub fn next_completion(cq: &CompletionQueue, timeout: Duration) -> lab::Result<WorkCompletion> {
    cq.req_notify(false)?;
    if let Some(wc) = cq.poll_one()? {
        return Ok(wc);
    }
    cq.get_event(timeout)?.ack();
    cq.poll_one()?
        .ok_or_else(|| Error::InvalidArgument("an event came but the CQ held no completion".into()))
}
