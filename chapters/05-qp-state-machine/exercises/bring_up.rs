//! # Exercise 05-bring-up: drive a QP to RTS with the minimum attribute masks
//!
//! From chapter 05's README, "The verbs" (`ibv_modify_qp`, and the mask each transition needs).
//!
//! The check creates an RC queue pair in RESET and a peer already in RTS, then sends your
//! attributes, in order, with the raw `ibv_modify_qp` (`QueuePair::modify`). Each call must be
//! a legal transition, with every attribute it requires and nothing else (the minimum mask:
//! `IBV_QP_STATE` plus what chapter 05's step 2 prints). The QP must end in RTS.
//!
//! Steps (each setter of `QpAttr` sets its field and adds its bit to the mask):
//! 1. RESET -> INIT: pkey index 0, port 1, the QP's access flags.
//! 2. INIT -> RTR: the peer (address vector from `link.gid`/`link.sgid_index` on port 1, its QP
//!    number and first PSN), the path MTU, read credits (1) and the RNR timer (12).
//! 3. RTR -> RTS: your first PSN, timeout 14, retry count 7, RNR retry 7, read credits 1.
//!
//! Check it: `cargo lab exercise check <id>` with the id 05-bring-up, or keep
//! `cargo lab exercise watch` running (it checks again on every save).

// `Link` (what the peer told you, and your own first PSN) is the check's: tests/exercises.rs.
use crate::Link;
use lab::{AccessFlags, AddressVector, QpAttr, QpState};

/// The attributes of each `ibv_modify_qp`, in order, from RESET to RTS.
pub fn bring_up(link: &Link) -> Vec<QpAttr> {
    vec![to_init(), to_rtr(link), to_rts(link)]
}

fn to_init() -> QpAttr {
    let _ = (QpState::Init, AccessFlags::REMOTE_WRITE);
    todo!("step 1: RESET -> INIT")
}

fn to_rtr(link: &Link) -> QpAttr {
    let _ = (link, AddressVector::roce);
    todo!("step 2: INIT -> RTR")
}

fn to_rts(link: &Link) -> QpAttr {
    let _ = link;
    todo!("step 3: RTR -> RTS")
}
