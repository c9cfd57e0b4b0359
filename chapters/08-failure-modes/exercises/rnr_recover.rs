//! # Exercise 08-rnr-recover: a SEND nobody can receive, failed at once, then the QP back
//!
//! From chapter 08's README, "The cases": 7 `rnr-retry-exceeded`, and 12 `flush-on-error`
//! (what a QP in ERR does with every later work request).
//!
//! The check connects two RC QPs on the lab's rxe device. B posts no receive, and B's RTR
//! asks a sender to wait its longest RNR time between tries (`min_rnr_timer` 0: 655.36 ms).
//! A SENDs 64 bytes with the RTS attributes you choose: the SEND must fail with
//! `IBV_WC_RNR_RETRY_EXC_ERR (13)` at B's first RNR NAK, within 500 ms, leaving A in ERR and
//! B in RTS. Then your `recover` brings A back toward B; B posts a receive, A SENDs again:
//! `IBV_WC_SUCCESS (0)`, and the 64 bytes arrive.
//!
//! Steps:
//! 1. `sender_rts`: A's RTS attributes (`RtsAttr::new(psn)` and its setters): how many RNR
//!    NAKs may A retry before it gives up? (7 means forever.)
//! 2. `recover`: A is in ERR. Move it to RESET (`QueuePair::reset`), then bring it up again
//!    toward `peer` (`bring_up` with `InitAttr::default()`, `RtrAttr::new(...)` and
//!    `RtsAttr::new(...)`, the PSNs of [`RnrPeer`]).
//!
//! Check it: `cargo lab exercise check <id>` with the id 08-rnr-recover, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use crate::RnrPeer;
use lab::{QueuePair, RtsAttr};

/// A's RTS attributes, starting its send queue at `sq_psn`: the SEND must fail at B's first
/// RNR NAK.
pub fn sender_rts(sq_psn: u32) -> RtsAttr {
    let _ = sq_psn;
    todo!("step 1: RtsAttr::new(sq_psn) with an rnr_retry that gives up at the first RNR NAK")
}

/// Brings `a`, in ERR after the failed SEND, back to RTS toward `peer`.
pub fn recover(a: QueuePair, peer: RnrPeer) -> lab::Result<QueuePair> {
    let _ = (a, peer);
    todo!("step 2: reset the QP, then bring it up toward the peer again")
}
