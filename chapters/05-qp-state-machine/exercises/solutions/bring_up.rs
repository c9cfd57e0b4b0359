//! Reference solution of exercise 05-bring-up (see `../bring_up.rs` for the task).

// `Link` (what the peer told you, and your own first PSN) is the check's: tests/exercises.rs.
use crate::Link;
use lab::{AccessFlags, AddressVector, QpAttr, QpState};

pub fn bring_up(link: &Link) -> Vec<QpAttr> {
    vec![to_init(), to_rtr(link), to_rts(link)]
}

fn to_init() -> QpAttr {
    QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port_num(1)
        .access_flags(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ)
}

fn to_rtr(link: &Link) -> QpAttr {
    QpAttr::new()
        .state(QpState::Rtr)
        .av(&AddressVector::roce(link.gid, link.sgid_index, 1))
        .path_mtu(link.mtu)
        .dest_qp_num(link.peer_qpn)
        .rq_psn(link.peer_psn)
        .max_dest_rd_atomic(1)
        .min_rnr_timer(12)
}

fn to_rts(link: &Link) -> QpAttr {
    QpAttr::new()
        .state(QpState::Rts)
        .sq_psn(link.my_psn)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .max_rd_atomic(1)
}
