//! The typed transitions of an unreliable-datagram (UD) queue pair: no peer, a `qkey` at INIT,
//! nothing at RTR but the state, the send PSN at RTS.

use super::state_machine::QpState;
use super::{QpAttr, QueuePair, TransitionError, state};
use crate::error::Result;

impl QueuePair<state::Reset> {
    /// UD: RESET -> INIT (`ibv_modify_qp(3)` with `IBV_QP_STATE | IBV_QP_PKEY_INDEX |
    /// IBV_QP_PORT | IBV_QP_QKEY`). Senders must address this QP with the same `qkey`.
    pub fn to_init_ud(
        mut self,
        port: u8,
        qkey: u32,
    ) -> std::result::Result<QueuePair<state::Init>, TransitionError<state::Reset>> {
        self.inner.port = port;
        self.transition_to(
            QpAttr::new()
                .state(QpState::Init)
                .pkey_index(0)
                .port_num(port)
                .qkey(qkey),
        )
    }

    /// UD: RESET -> INIT -> RTR -> RTS in one call.
    pub fn bring_up_ud(self, port: u8, qkey: u32, sq_psn: u32) -> Result<QueuePair<state::Rts>> {
        Ok(self
            .to_init_ud(port, qkey)?
            .to_rtr_ud()?
            .to_rts_ud(sq_psn)?)
    }
}

impl QueuePair<state::Init> {
    /// UD: INIT -> RTR (`IBV_QP_STATE` only: a UD QP has no peer).
    pub fn to_rtr_ud(
        self,
    ) -> std::result::Result<QueuePair<state::Rtr>, TransitionError<state::Init>> {
        self.transition_to(QpAttr::new().state(QpState::Rtr))
    }
}

impl QueuePair<state::Rtr> {
    /// UD: RTR -> RTS (`IBV_QP_STATE | IBV_QP_SQ_PSN`).
    pub fn to_rts_ud(
        self,
        sq_psn: u32,
    ) -> std::result::Result<QueuePair<state::Rts>, TransitionError<state::Rtr>> {
        self.transition_to(QpAttr::new().state(QpState::Rts).sq_psn(sq_psn))
    }
}
