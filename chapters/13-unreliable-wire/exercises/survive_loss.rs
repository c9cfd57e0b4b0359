//! # Exercise 13-survive-loss: keep a series of WRITEs alive through packet loss
//!
//! From chapter 13's README, "The verbs" (`timeout` and `retry_cnt` at RTS) and "Common
//! mistakes" (retry_cnt 7 on rxe).
//!
//! The check runs on the pair: node b loses 15% of the RoCE packets it sends (netem, as the
//! lab's fault command applies it), and your writer on node b posts 48 RDMA WRITEs to node a at
//! once. Every WRITE must complete with `IBV_WC_SUCCESS`; retries are expected (the check
//! counts the PSNs sent twice on the recorded wire), `IBV_WC_RETRY_EXC_ERR` is a failure.
//!
//! Steps:
//! 1. The ack timeout: each try waits 4.096 us x 2^timeout for its ACK before the requester
//!    sends again. 0 means "no timer at all"; an emulated CPU under load needs tens of
//!    milliseconds to answer; the check gives the whole series 60 seconds.
//! 2. The retry budget: how many times one message may be sent again (after a timeout or a
//!    NAK) before it fails with `IBV_WC_RETRY_EXC_ERR`. It has 3 bits. Below 7: on rxe 7
//!    never runs out (the README says why), and a QP toward a dead peer must end some day.
//!
//! Check it: `cargo lab exercise check <id>` with the id 13-survive-loss, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

/// The `timeout` RTS attribute of the writer's QP (5 bits).
pub fn ack_timeout() -> u8 {
    todo!("step 1: the ack timeout, 4.096 us x 2^timeout per try")
}

/// The `retry_cnt` RTS attribute of the writer's QP (3 bits).
pub fn retry_cnt() -> u8 {
    todo!("step 2: the retry budget, below 7")
}
