//! What an errno from `ibv_modify_qp`, `ibv_post_recv` or `ibv_post_send` most likely means,
//! as the hints of `lab`'s error (codes of the catalogue, `contracts::hints`, with this
//! failure's values): the transition table names a missing attribute, the queue sizes explain
//! an ENOMEM, the QP's state explains a post that is refused.

use rdma_sys::*;

use super::state_machine::{MaskProblem, QpAttrMask, QpState, check_transition_for};
use super::{QpAttr, QpInner, QpTypeState, QueuePair};
use crate::device::{Gid, GidType, Mtu};
use crate::error::{Errno, Hint, HintCode};
use crate::mr::AccessFlags;
use crate::wr::{RecvWr, SendFlags, SendWr, WrOpcode};

impl<S: QpTypeState> QueuePair<S> {
    /// The hints of a failed `ibv_modify_qp`, most likely first: an EINVAL can have several
    /// causes at once (a missing attribute and a wrong GID index).
    pub(super) fn modify_hints(
        &self,
        from: QpState,
        to: QpState,
        attr: &QpAttr,
        errno: Errno,
    ) -> Vec<Hint> {
        let mut notes: Vec<Hint> = Vec::new();
        if errno.0 != libc::EINVAL {
            return notes;
        }
        if let Err(p) = check_transition_for(self.inner.qp_type, from, to, attr.mask) {
            let code = match p {
                MaskProblem::Illegal {
                    from: QpState::Init,
                    to: QpState::Rts,
                } => HintCode::SkippedRtr,
                MaskProblem::Illegal { .. } => HintCode::IllegalTransition,
                MaskProblem::Mask { .. } => HintCode::TransitionAttributes,
            };
            notes.push(Hint::detailed(code, p.to_string()));
        }
        let m = attr.mask;
        if m.contains(QpAttrMask::AV) {
            self.av_hints(&attr.attr.ah_attr, &mut notes);
        }
        if m.contains(QpAttrMask::PATH_MTU)
            && let Ok(p) = self.inner.ctx.query_port(self.inner.port)
            && attr.attr.path_mtu > p.active_mtu.raw()
        {
            notes.push(Hint::detailed(
                HintCode::PathMtu,
                format!(
                    "path MTU {} is above the port's active MTU {}",
                    Mtu::from_raw(attr.attr.path_mtu).map_or(0, |m| m.bytes()),
                    p.active_mtu
                ),
            ));
        }
        let rd_mask = QpAttrMask::MAX_QP_RD_ATOMIC | QpAttrMask::MAX_DEST_RD_ATOMIC;
        if !(m & rd_mask).is_empty()
            && let Ok(d) = self.inner.ctx.query_device()
        {
            if m.contains(QpAttrMask::MAX_QP_RD_ATOMIC)
                && attr.attr.max_rd_atomic as i32 > d.max_qp_init_rd_atom
            {
                notes.push(Hint::detailed(
                    HintCode::RdAtomicLimit,
                    format!(
                        "max_rd_atomic {} is above the device's max_qp_init_rd_atom {}",
                        attr.attr.max_rd_atomic, d.max_qp_init_rd_atom
                    ),
                ));
            }
            if m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC)
                && attr.attr.max_dest_rd_atomic as i32 > d.max_qp_rd_atom
            {
                notes.push(Hint::detailed(
                    HintCode::RdAtomicLimit,
                    format!(
                        "max_dest_rd_atomic {} is above the device's max_qp_rd_atom {}",
                        attr.attr.max_dest_rd_atomic, d.max_qp_rd_atom
                    ),
                ));
            }
        }
        if m.contains(QpAttrMask::ACCESS_FLAGS) {
            let acc = AccessFlags::from_bits(attr.attr.qp_access_flags);
            if acc.unknown_bits() != 0 {
                notes.push(Hint::detailed(
                    HintCode::UnknownAccessBits,
                    format!("unknown access flag bits {:#x}", acc.unknown_bits()),
                ));
            }
        }
        notes
    }

    /// The hints for an address vector an `ibv_modify_qp` to RTR refused: no GRH (RoCE needs
    /// one), an empty or out-of-range source GID slot, GIDs of different kinds at the two ends.
    fn av_hints(&self, a: &ibv_ah_attr, notes: &mut Vec<Hint>) {
        // SAFETY: reading the bytes of a plain-data union.
        let dgid = Gid(unsafe { a.grh.dgid.raw });
        if a.is_global == 0 {
            notes.push(Hint::new(HintCode::AvWithoutGrh));
        }
        let port = if a.port_num == 0 {
            self.inner.port
        } else {
            a.port_num
        };
        match self.inner.ctx.query_gid(port, a.grh.sgid_index as u32) {
            Ok(e) => {
                if e.gid.is_zero() {
                    notes.push(Hint::detailed(
                        HintCode::EmptyGidSlot,
                        format!("sgid_index {} is an empty GID slot", e.index),
                    ));
                } else if e.gid.to_ipv4().is_some() != dgid.to_ipv4().is_some() {
                    notes.push(Hint::detailed(
                        HintCode::GidIndex,
                        format!(
                            "GID index: sgid_index {} is {} ({}) but the destination GID is \
                             {}: both ends must use the same kind of GID; for RoCE v2 over \
                             IPv4 pick the ::ffff:a.b.c.d entry by content \
                             (Context::roce_v2_ipv4_gid)",
                            e.index, e.gid, e.gid_type, dgid
                        ),
                    ));
                } else if e.gid_type != GidType::RoceV2 {
                    notes.push(Hint::detailed(
                        HintCode::GidNotRoceV2,
                        format!(
                            "sgid_index {} is a {} GID; rxe speaks RoCE v2",
                            e.index, e.gid_type
                        ),
                    ));
                }
            }
            Err(_) => notes.push(Hint::detailed(
                HintCode::SgidIndexRange,
                format!(
                    "sgid_index {} is not in the GID table of port {port}",
                    a.grh.sgid_index
                ),
            )),
        }
    }

    pub(super) fn post_recv_hint(&self, errno: Errno, wr: &RecvWr<'_>) -> Option<Hint> {
        match errno.0 {
            libc::ENOMEM => Some(Hint::detailed(
                HintCode::RecvQueueFull,
                format!(
                    "the receive queue is full (max_recv_wr {}; rxe rounds it up to 2^k-1): wait \
                     for receive completions before posting more",
                    self.inner.cap.max_recv_wr
                ),
            )),
            libc::EINVAL if wr.wr.num_sge as u32 > self.inner.cap.max_recv_sge => {
                Some(Hint::detailed(
                    HintCode::TooManySges,
                    format!(
                        "{} SGEs but max_recv_sge is {}",
                        wr.wr.num_sge, self.inner.cap.max_recv_sge
                    ),
                ))
            }
            libc::EINVAL => match self.state() {
                Ok(QpState::Reset) => Some(Hint::new(HintCode::RecvInReset)),
                _ => None,
            },
            _ => None,
        }
    }
}

pub(super) fn post_send_hint(inner: &QpInner, errno: Errno, wr: &SendWr<'_>) -> Option<Hint> {
    let cap = inner.cap;
    match errno.0 {
        libc::ENOMEM => {
            return Some(Hint::detailed(
                HintCode::SendQueueFull,
                format!(
                    "the send queue is full (max_send_wr {}; rxe rounds it up to 2^k-1): poll \
                     completions to free slots; with unsignaled WRs, signal at least one in \
                     every max_send_wr",
                    cap.max_send_wr
                ),
            ));
        }
        libc::EINVAL => {}
        _ => return None,
    }
    // SAFETY: plain data; all-zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    // SAFETY: plain data; all-zero is valid.
    let mut ia: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the QP is alive; out-pointers valid.
    let q = unsafe {
        ibv_query_qp(
            inner.qp.as_ptr(),
            &mut a,
            QpAttrMask::STATE.bits() as i32,
            &mut ia,
        )
    };
    let state = QpState::from_raw(a.qp_state);
    if q == 0 && state != QpState::Rts && state != QpState::Sqd {
        return Some(Hint::detailed(
            HintCode::SendBeforeRts,
            format!(
                "the QP is in {state}: sends need RTS. Beware: rxe has queued this work request \
                 anyway; it goes out with the next successful post after RTS"
            ),
        ));
    }
    let flags = wr.flags();
    let sg_len: u64 = (0..wr.wr.num_sge.max(0) as usize)
        // SAFETY: sg_list has num_sge entries borrowed for the SendWr's lifetime.
        .map(|i| unsafe { (*wr.wr.sg_list.add(i)).length as u64 })
        .sum();
    if flags.contains(SendFlags::INLINE) && sg_len > cap.max_inline_data as u64 {
        return Some(Hint::detailed(
            HintCode::InlineTooLarge,
            format!(
                "{sg_len} bytes inline but max_inline_data is {}",
                cap.max_inline_data
            ),
        ));
    }
    if wr.wr.num_sge as u32 > cap.max_send_sge {
        return Some(Hint::detailed(
            HintCode::TooManySges,
            format!(
                "{} SGEs but max_send_sge is {}",
                wr.wr.num_sge, cap.max_send_sge
            ),
        ));
    }
    if matches!(
        wr.opcode(),
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
    ) {
        // SAFETY: atomics were built with the atomic union member.
        let raddr = unsafe { wr.wr.wr.atomic.remote_addr };
        if raddr & 7 != 0 {
            return Some(Hint::detailed(
                HintCode::AtomicAlignment,
                format!("atomics need an 8-byte aligned remote address; {raddr:#x} is not"),
            ));
        }
        if sg_len != 8 {
            return Some(Hint::new(HintCode::AtomicSgeSize));
        }
    }
    None
}
