//! The typed transitions of a reliable-connected (RC) queue pair: RESET -> INIT -> RTR -> RTS,
//! each consuming the QP and returning it in the next state, and `bring_up` for all three.

use super::state_machine::QpState;
use super::{
    AddressVector, DEFAULT_RD_ATOMIC, InitAttr, QpAttr, QueuePair, RtrAttr, RtsAttr,
    TransitionError, state,
};
use crate::error::Result;

impl QueuePair<state::Reset> {
    /// RESET -> INIT (`ibv_modify_qp(3)` with `IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
    /// IBV_QP_ACCESS_FLAGS`).
    pub fn to_init(
        mut self,
        a: &InitAttr,
    ) -> std::result::Result<QueuePair<state::Init>, TransitionError<state::Reset>> {
        self.inner.port = a.port;
        self.transition_to(
            QpAttr::new()
                .state(QpState::Init)
                .pkey_index(a.pkey_index)
                .port_num(a.port)
                .access_flags(a.access),
        )
    }

    /// RESET -> INIT -> RTR -> RTS in one call, with the given attributes.
    pub fn bring_up(
        self,
        init: &InitAttr,
        rtr: &RtrAttr,
        rts: &RtsAttr,
    ) -> Result<QueuePair<state::Rts>> {
        Ok(self.to_init(init)?.to_rtr(rtr)?.to_rts(rts)?)
    }
}

impl QueuePair<state::Init> {
    /// INIT -> RTR (`ibv_modify_qp(3)` with `IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
    /// IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER`).
    ///
    /// Defaults filled in here: the sgid is the RoCE v2 IPv4-mapped entry (by content), the
    /// path MTU is the port's active MTU (a larger one is clamped), and `max_dest_rd_atomic`
    /// is 16 clamped to the device (0 would make every incoming READ fail).
    pub fn to_rtr(
        self,
        a: &RtrAttr,
    ) -> std::result::Result<QueuePair<state::Rtr>, TransitionError<state::Init>> {
        match self.rtr_attr(a) {
            Ok(attr) => self.transition_to(attr),
            Err(error) => Err(TransitionError::new(self, error)),
        }
    }

    fn rtr_attr(&self, a: &RtrAttr) -> Result<QpAttr> {
        let ctx = &self.inner.ctx;
        let port = a.port.unwrap_or(self.inner.port);
        let sgid_index = match a.sgid_index {
            Some(i) => i,
            None => ctx.roce_v2_ipv4_gid(port)?.index as u8,
        };
        let active = ctx.query_port(port)?.active_mtu;
        let mtu = match a.path_mtu {
            None => active,
            Some(m) if a.allow_mtu_above_active => m,
            Some(m) => m.min(active),
        };
        let max_dest = match a.max_dest_rd_atomic {
            Some(n) => n,
            None => {
                let d = ctx.query_device()?;
                DEFAULT_RD_ATOMIC.min(d.max_qp_rd_atom.clamp(0, 255) as u8)
            }
        };
        let mut av = AddressVector::roce(a.dgid, sgid_index, port);
        av.hop_limit = a.hop_limit;
        av.traffic_class = a.traffic_class;
        av.sl = a.sl;
        Ok(QpAttr::new()
            .state(QpState::Rtr)
            .av(&av)
            .path_mtu(mtu)
            .dest_qp_num(a.dest_qp_num)
            .rq_psn(a.rq_psn)
            .max_dest_rd_atomic(max_dest)
            .min_rnr_timer(a.min_rnr_timer))
    }
}

impl QueuePair<state::Rtr> {
    /// RTR -> RTS (`ibv_modify_qp(3)` with `IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
    /// IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC`).
    ///
    /// `max_rd_atomic` defaults to 16 clamped to the device: left at 0, an RDMA READ never
    /// completes on rxe.
    pub fn to_rts(
        self,
        a: &RtsAttr,
    ) -> std::result::Result<QueuePair<state::Rts>, TransitionError<state::Rtr>> {
        let max_rd = match a.max_rd_atomic {
            Some(n) => n,
            None => match self.inner.ctx.query_device() {
                Ok(d) => DEFAULT_RD_ATOMIC.min(d.max_qp_init_rd_atom.clamp(0, 255) as u8),
                Err(error) => return Err(TransitionError::new(self, error)),
            },
        };
        self.transition_to(a.qp_attr(max_rd))
    }
}
