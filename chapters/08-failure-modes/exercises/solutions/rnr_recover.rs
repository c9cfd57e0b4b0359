//! Reference solution of exercise 08-rnr-recover (see `../rnr_recover.rs` for the task).

use crate::RnrPeer;
use lab::{InitAttr, QueuePair, RtrAttr, RtsAttr};

/// rnr_retry 0: no retry after an RNR NAK. rxe's completer, on an RNR NAK, waits and tries
/// again only while `qp->comp.rnr_retry > 0`, and otherwise completes the WQE with
/// `IB_WC_RNR_RETRY_EXC_ERR` (the kernel's drivers/infiniband/sw/rxe/rxe_comp.c,
/// `rxe_completer`, its `COMPST_RNR_RETRY` state); 7 is never counted down.
pub fn sender_rts(sq_psn: u32) -> RtsAttr {
    RtsAttr::new(sq_psn).rnr_retry(0)
}

/// A QP in ERR flushes everything posted to it; only RESET empties it and lets it be brought
/// up again. B never accepted the failed SEND (an RNR NAK leaves its expected PSN where it
/// was), so A starts again at the same PSN.
pub fn recover(a: QueuePair, peer: RnrPeer) -> lab::Result<QueuePair> {
    a.reset()?.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(peer.qpn, peer.peer_psn, peer.gid),
        &RtsAttr::new(peer.my_psn),
    )
}
