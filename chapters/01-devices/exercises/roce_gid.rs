//! # Exercise 01-roce-gid: pick the GID for RoCE v2 over IPv4
//!
//! From chapter 01's README, "The verbs" (`ibv_query_gid_ex`: the GID table, each entry with
//! its type) and its step 7 (the wrong GID refused at RTR).
//!
//! The check reads port 1's GID table on the lab's rxe device (`Context::gid_table(1)`), asks
//! your `pick_gid` for the entry a RoCE v2 connection over IPv4 must use, then brings two
//! queue pairs up through it (RTR takes the GID as its address) and moves a WRITE between them.
//!
//! Steps:
//! 1. Keep the entries whose type (`gid_type`) is RoCE v2 (`GidType::RoceV2`).
//! 2. Of those, return the first whose GID is an IPv4-mapped address (`gid.to_ipv4()`): choose
//!    by content, never by index.
//!
//! Check it: `cargo lab exercise check <id>` with the id 01-roce-gid, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

use lab::{GidEntry, GidType};

/// The entry of `table` to use for RoCE v2 over IPv4, if there is one.
pub fn pick_gid(table: &[GidEntry]) -> Option<GidEntry> {
    let _ = (table, GidType::RoceV2);
    todo!("step 1: keep the RoCE v2 entries (then step 2: the first IPv4-mapped one)")
}
