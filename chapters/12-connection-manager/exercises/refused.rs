//! # Exercise 12-refused: connect, and tell an accept from a refusal and its reason
//!
//! From chapter 12's README, "Common mistakes" (a connect answered with REJECTED: who refused,
//! and the reason in the private data).
//!
//! The check runs a server on the loopback lab's rxe address and hands you an id whose address
//! and route are resolved and whose QP exists (exercise 12-cm-connect wrote that part). Three
//! rounds, a fresh id each: the server accepts a request whose private data begins with the
//! hello; then it refuses with `rdma_reject` and a reason text; then the id connects to a
//! port nobody listens on. Your [`connect_answer`] must say which it was.
//!
//! Steps:
//! 1. `id.connect(&ConnParam::with_data(hello))`: the REQ carries `hello` as its private data.
//! 2. Wait for the id's next event (`id.get_event(t)`), whatever it is: a refused connect ends
//!    with `CmEventType::Rejected`, never with ESTABLISHED. ESTABLISHED is
//!    [`Answer::Accepted`].
//! 3. REJECTED is [`Answer::Refused`]: `status` is the event's status (the IB CM reject
//!    reason, `CmEvent::status`: 28 when the peer's program refused, 8 when nobody listens),
//!    and `reason` the event's private data (`CmEvent::private_data`) as text, up to its first
//!    NUL byte: the REJ always delivers all of its 148 bytes of private data, zero-padded.
//!    Any other event is [`Answer::Other`] with the event as text (`to_string()`).
//!
//! Check it: `cargo lab exercise check <id>` with the id 12-refused, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use crate::Answer;
use lab::cm::{CmEventType, CmId, ConnParam};
use std::time::Duration;

/// Connects `id` (address and route resolved, QP created) with `hello` as private data and
/// returns how the server answered. Every wait takes at most `t`.
pub fn connect_answer(id: &CmId, hello: &[u8], t: Duration) -> lab::Result<Answer> {
    let _ = (id, hello, t, CmEventType::Rejected, ConnParam::with_data);
    todo!("step 1: connect with `hello` as the private data")
}
