//! The RC and UD state machines as data (`contracts::verbs::qp_state`: the states, the attribute
//! mask, the legal transitions with the masks each requires and accepts, and the check that
//! explains an EINVAL). The table is pure and lives in the `contracts` crate so the book can
//! draw it without linking libibverbs; this module re-exports it and checks its C values
//! against the rdma-sys bindings.

pub use contracts::verbs::qp_state::*;

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_sys::{ibv_qp_state as S, ibv_qp_type as T};

    #[test]
    fn states_and_types_match_rdma_sys() {
        let states = [
            (QpState::Reset, S::IBV_QPS_RESET),
            (QpState::Init, S::IBV_QPS_INIT),
            (QpState::Rtr, S::IBV_QPS_RTR),
            (QpState::Rts, S::IBV_QPS_RTS),
            (QpState::Sqd, S::IBV_QPS_SQD),
            (QpState::Sqe, S::IBV_QPS_SQE),
            (QpState::Err, S::IBV_QPS_ERR),
        ];
        assert_eq!(states.len(), QpState::ALL.len());
        for (s, raw) in states {
            assert_eq!(s.raw(), raw, "{s}");
        }
        assert_eq!(QpType::Rc.raw(), T::IBV_QPT_RC);
        assert_eq!(QpType::Ud.raw(), T::IBV_QPT_UD);
    }
}
