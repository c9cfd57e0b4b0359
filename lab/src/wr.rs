//! Work requests: scatter/gather entries, send-queue and receive-queue work requests.
//!
//! C types: `struct ibv_sge`, `struct ibv_send_wr`, `struct ibv_recv_wr` (`ibv_post_send(3)`,
//! `ibv_post_recv(3)`). The Rust types are the C structs themselves (`#[repr(transparent)]`), so
//! posting copies no payload and allocates nothing: the NIC reads/writes the registered memory
//! the SGEs point at.

use std::fmt;
use std::marker::PhantomData;

use rdma_sys::*;

use crate::flags::{c_enum, flag_set};

/// A scatter/gather entry: `struct ibv_sge` (address, length, lkey) of registered memory.
/// Get one from [`crate::MemoryRegion::sge`].
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Sge(ibv_sge);

impl Sge {
    /// An SGE with arbitrary values, for reproducing mistakes on purpose (lkey 0, an address
    /// outside any MR, an lkey of another PD). Memory-safe: the device validates the lkey and
    /// the range against its MR table and fails the work request (`IBV_WC_LOC_QP_OP_ERR`,
    /// `IBV_WC_LOC_PROT_ERR`) instead of touching the memory.
    pub fn raw(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge(ibv_sge { addr, length, lkey })
    }
    pub fn addr(&self) -> u64 {
        self.0.addr
    }
    pub fn length(&self) -> u32 {
        self.0.length
    }
    pub fn lkey(&self) -> u32 {
        self.0.lkey
    }
}

impl fmt::Debug for Sge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Sge {{ addr: {:#x}, length: {}, lkey: {:#x} }}",
            self.0.addr, self.0.length, self.0.lkey
        )
    }
}

/// An SGE over plain (unregistered) memory for an **inline** send: the provider copies the
/// bytes into the work queue during `ibv_post_send`, so the buffer needs no registration and is
/// reusable as soon as the post returns. Limited to the QP's `max_inline_data`.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct InlineSge<'a>(ibv_sge, PhantomData<&'a [u8]>);

impl<'a> InlineSge<'a> {
    /// Inline data from `data` (lkey 0: the NIC never looks at it, the provider copies it).
    pub fn new(data: &'a [u8]) -> InlineSge<'a> {
        InlineSge(
            ibv_sge {
                addr: data.as_ptr() as u64,
                length: data.len() as u32,
                lkey: 0,
            },
            PhantomData,
        )
    }
}

impl<'a> InlineSge<'a> {
    /// Inline data from bytes `range` of a registered region, as `ibv_rc_pingpong` sends a
    /// message that fits `max_inline_data`: the provider copies the bytes during
    /// `ibv_post_send`, so the region may be changed as soon as the post returns.
    ///
    /// (There is deliberately no `.inline()` switch on [`SendWr`]: an [`Sge`] does not borrow
    /// its memory, and an inline post reads that memory in this process, so it must be
    /// borrowed for the post: that is what this type does.)
    ///
    /// # Panics
    /// If the range is outside the region (like slice indexing).
    pub fn from_mr(mr: &'a crate::MemoryRegion, range: std::ops::Range<usize>) -> InlineSge<'a> {
        InlineSge::new(&mr.as_slice()[range])
    }
}

impl fmt::Debug for InlineSge<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InlineSge {{ length: {} }}", self.0.length)
    }
}

flag_set! {
    /// `enum ibv_send_flags`.
    pub struct SendFlags;
    /// Wait for previous RDMA READs/atomics to complete before this one starts.
    FENCE = 1 => "IBV_SEND_FENCE";
    /// Produce a completion for this work request (else only errors complete it).
    SIGNALED = 2 => "IBV_SEND_SIGNALED";
    /// Raise a completion event at a responder armed with `solicited_only`.
    SOLICITED = 4 => "IBV_SEND_SOLICITED";
    /// The data is copied during the post (see [`InlineSge`]).
    INLINE = 8 => "IBV_SEND_INLINE";
    IP_CSUM = 16 => "IBV_SEND_IP_CSUM";
}

c_enum! {
    /// `enum ibv_wr_opcode`: the operations a send work request can carry.
    pub enum WrOpcode: u32, closed {
        RdmaWrite = ibv_wr_opcode::IBV_WR_RDMA_WRITE => "IBV_WR_RDMA_WRITE",
        RdmaWriteWithImm = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM => "IBV_WR_RDMA_WRITE_WITH_IMM",
        Send = ibv_wr_opcode::IBV_WR_SEND => "IBV_WR_SEND",
        SendWithImm = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM => "IBV_WR_SEND_WITH_IMM",
        RdmaRead = ibv_wr_opcode::IBV_WR_RDMA_READ => "IBV_WR_RDMA_READ",
        AtomicCmpAndSwp = ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP => "IBV_WR_ATOMIC_CMP_AND_SWP",
        AtomicFetchAndAdd = ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD => "IBV_WR_ATOMIC_FETCH_AND_ADD",
        /// `IBV_WR_LOCAL_INV` (memory windows).
        LocalInv = ibv_wr_opcode::IBV_WR_LOCAL_INV => "IBV_WR_LOCAL_INV",
        /// `IBV_WR_BIND_MW` (type 2 memory windows).
        BindMw = ibv_wr_opcode::IBV_WR_BIND_MW => "IBV_WR_BIND_MW",
        /// `IBV_WR_SEND_WITH_INV`.
        SendWithInv = ibv_wr_opcode::IBV_WR_SEND_WITH_INV => "IBV_WR_SEND_WITH_INV",
    }
}

/// A send-queue work request: `struct ibv_send_wr` for [`crate::QueuePair::post_send`].
///
/// Built by one constructor per operation; **signaled by default** (every WR produces a
/// completion) so nothing is silently missing while learning; call
/// [`SendWr::unsignaled`] for selective signaling. The lifetime ties it to the SGE slice it
/// points at. Several WRs in a `&mut [SendWr]` are posted as one chain (one `ibv_post_send`).
#[repr(transparent)]
pub struct SendWr<'a> {
    pub(crate) wr: ibv_send_wr,
    _sges: PhantomData<&'a [Sge]>,
}

// SAFETY: the WR only holds pointers to SGEs borrowed for 'a (plain data).
unsafe impl Send for SendWr<'_> {}

impl fmt::Debug for SendWr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = WrOpcode::from_raw(self.wr.opcode);
        f.debug_struct("SendWr")
            .field("wr_id", &self.wr.wr_id)
            .field("opcode", &op.map_or("?", |o| o.name()))
            .field("num_sge", &self.wr.num_sge)
            .field("flags", &SendFlags::from_bits(self.wr.send_flags))
            .finish()
    }
}

impl<'a> SendWr<'a> {
    fn base(wr_id: u64, opcode: WrOpcode, sges: *const ibv_sge, n: usize) -> SendWr<'a> {
        // SAFETY: ibv_send_wr is plain data (ints, pointers, unions of them); zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.opcode = opcode.raw();
        // The provider only reads the SGE list; the C prototype is just not const.
        wr.sg_list = sges as *mut ibv_sge;
        wr.num_sge = n as i32;
        wr.send_flags = SendFlags::SIGNALED.bits();
        SendWr {
            wr,
            _sges: PhantomData,
        }
    }

    /// A work request with a raw opcode (for modules that build the rest themselves).
    pub(crate) fn with_opcode(wr_id: u64, opcode: u32, sges: &'a [Sge]) -> SendWr<'a> {
        let mut w = Self::base(wr_id, WrOpcode::Send, sges.as_ptr() as _, sges.len());
        w.wr.opcode = opcode;
        w
    }

    /// `IBV_WR_SEND`: the peer's next RECV receives the gathered bytes.
    pub fn send(wr_id: u64, sges: &'a [Sge]) -> SendWr<'a> {
        Self::base(
            wr_id,
            WrOpcode::Send,
            sges.as_ptr() as *const ibv_sge,
            sges.len(),
        )
    }

    /// A UD `IBV_WR_SEND` to the QP `remote_qpn` (with Q_Key `remote_qkey`) at the address
    /// `ah`. At most one path MTU of data; the receiver's buffer needs
    /// [`crate::ah::UD_GRH_BYTES`] more.
    pub fn send_ud(
        wr_id: u64,
        sges: &'a [Sge],
        ah: &'a crate::ah::AddressHandle,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> SendWr<'a> {
        let mut w = Self::base(wr_id, WrOpcode::Send, sges.as_ptr() as _, sges.len());
        w.wr.wr.ud = ud_t {
            ah: ah.ah.as_ptr(),
            remote_qpn,
            remote_qkey,
        };
        w
    }

    /// `IBV_WR_SEND_WITH_IMM`: a SEND that also delivers a 32-bit immediate value (host order
    /// here; `lab` converts to the wire's network order).
    pub fn send_with_imm(wr_id: u64, sges: &'a [Sge], imm: u32) -> SendWr<'a> {
        let mut w = Self::base(wr_id, WrOpcode::SendWithImm, sges.as_ptr() as _, sges.len());
        w.wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        w
    }

    /// `IBV_WR_SEND` with `IBV_SEND_INLINE`: the data is copied during the post.
    pub fn send_inline(wr_id: u64, data: &'a [InlineSge<'a>]) -> SendWr<'a> {
        let mut w = Self::base(wr_id, WrOpcode::Send, data.as_ptr() as _, data.len());
        w.wr.send_flags |= SendFlags::INLINE.bits();
        w
    }

    /// `IBV_WR_RDMA_WRITE`: write the gathered bytes at `remote_addr` in the peer's MR with
    /// `rkey`. The peer's CPU is not involved and gets no completion.
    pub fn write(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> SendWr<'a> {
        let mut w = Self::base(wr_id, WrOpcode::RdmaWrite, sges.as_ptr() as _, sges.len());
        w.wr.wr.rdma = rdma_t { remote_addr, rkey };
        w
    }

    /// `IBV_WR_RDMA_WRITE` with `IBV_SEND_INLINE`.
    pub fn write_inline(
        wr_id: u64,
        data: &'a [InlineSge<'a>],
        remote_addr: u64,
        rkey: u32,
    ) -> SendWr<'a> {
        let mut w = Self::base(wr_id, WrOpcode::RdmaWrite, data.as_ptr() as _, data.len());
        w.wr.wr.rdma = rdma_t { remote_addr, rkey };
        w.wr.send_flags |= SendFlags::INLINE.bits();
        w
    }

    /// `IBV_WR_RDMA_WRITE_WITH_IMM`: an RDMA WRITE that also consumes one RECV at the peer,
    /// which gets an `IBV_WC_RECV_RDMA_WITH_IMM` completion carrying `imm`.
    pub fn write_with_imm(
        wr_id: u64,
        sges: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> SendWr<'a> {
        let mut w = Self::base(
            wr_id,
            WrOpcode::RdmaWriteWithImm,
            sges.as_ptr() as _,
            sges.len(),
        );
        w.wr.wr.rdma = rdma_t { remote_addr, rkey };
        w.wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        w
    }

    /// `IBV_WR_RDMA_READ`: read from `remote_addr` (peer MR with `rkey` and REMOTE_READ) into
    /// the local SGEs (which need LOCAL_WRITE). Needs `max_rd_atomic` >= 1 here and
    /// `max_dest_rd_atomic` >= 1 at the peer.
    pub fn read(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> SendWr<'a> {
        let mut w = Self::base(wr_id, WrOpcode::RdmaRead, sges.as_ptr() as _, sges.len());
        w.wr.wr.rdma = rdma_t { remote_addr, rkey };
        w
    }

    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: if the u64 at `remote_addr` equals `compare`, replace it
    /// with `swap`; the old value lands in `local` (8 bytes). Host byte order on rxe; both
    /// addresses must be 8-byte aligned (rxe refuses a misaligned one at post time, EINVAL).
    pub fn compare_swap(
        wr_id: u64,
        local: &'a Sge,
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> SendWr<'a> {
        let mut w = Self::base(
            wr_id,
            WrOpcode::AtomicCmpAndSwp,
            local as *const Sge as _,
            1,
        );
        w.wr.wr.atomic = atomic_t {
            remote_addr,
            compare_add: compare,
            swap,
            rkey,
        };
        w
    }

    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`: add `add` to the u64 at `remote_addr`; the old value
    /// lands in `local` (8 bytes). Same alignment and byte-order rules as `compare_swap`.
    pub fn fetch_add(
        wr_id: u64,
        local: &'a Sge,
        remote_addr: u64,
        rkey: u32,
        add: u64,
    ) -> SendWr<'a> {
        let mut w = Self::base(
            wr_id,
            WrOpcode::AtomicFetchAndAdd,
            local as *const Sge as _,
            1,
        );
        w.wr.wr.atomic = atomic_t {
            remote_addr,
            compare_add: add,
            swap: 0,
            rkey,
        };
        w
    }

    /// Produce no completion on success (selective signaling). Errors still complete. The send
    /// queue slot is only freed when a *later* signaled WR completes, so signal at least one
    /// WR every `max_send_wr`.
    pub fn unsignaled(mut self) -> Self {
        self.wr.send_flags &= !SendFlags::SIGNALED.bits();
        self
    }

    /// Set or clear `IBV_SEND_SIGNALED`.
    pub fn signaled(mut self, on: bool) -> Self {
        if on {
            self.wr.send_flags |= SendFlags::SIGNALED.bits();
        } else {
            self.wr.send_flags &= !SendFlags::SIGNALED.bits();
        }
        self
    }

    /// Set `IBV_SEND_SOLICITED` (wakes a responder armed with `solicited_only`).
    pub fn solicited(mut self) -> Self {
        self.wr.send_flags |= SendFlags::SOLICITED.bits();
        self
    }

    /// Set `IBV_SEND_FENCE`.
    pub fn fence(mut self) -> Self {
        self.wr.send_flags |= SendFlags::FENCE.bits();
        self
    }

    /// The work request id.
    pub fn wr_id(&self) -> u64 {
        self.wr.wr_id
    }

    /// The flags that will be posted.
    pub fn flags(&self) -> SendFlags {
        SendFlags::from_bits(self.wr.send_flags)
    }

    /// The operation.
    pub fn opcode(&self) -> WrOpcode {
        WrOpcode::from_raw(self.wr.opcode).unwrap_or(WrOpcode::Send)
    }
}

/// A receive-queue work request: `struct ibv_recv_wr` for [`crate::QueuePair::post_recv`]: one
/// receive buffer (scattered over the SGEs) for one incoming SEND or WRITE_WITH_IMM. Zero SGEs
/// are fine for a WRITE_WITH_IMM that only needs the completion.
#[repr(transparent)]
pub struct RecvWr<'a> {
    pub(crate) wr: ibv_recv_wr,
    _sges: PhantomData<&'a [Sge]>,
}

// SAFETY: the WR only holds pointers to SGEs borrowed for 'a (plain data).
unsafe impl Send for RecvWr<'_> {}

impl fmt::Debug for RecvWr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvWr")
            .field("wr_id", &self.wr.wr_id)
            .field("num_sge", &self.wr.num_sge)
            .finish()
    }
}

impl<'a> RecvWr<'a> {
    /// A receive of up to the SGEs' total length.
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> RecvWr<'a> {
        RecvWr {
            wr: ibv_recv_wr {
                wr_id,
                next: std::ptr::null_mut(),
                sg_list: sges.as_ptr() as *mut ibv_sge,
                num_sge: sges.len() as i32,
            },
            _sges: PhantomData,
        }
    }

    /// The work request id.
    pub fn wr_id(&self) -> u64 {
        self.wr.wr_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_wr_defaults_to_signaled() {
        let sges = [Sge::raw(0x1000, 8, 1)];
        let w = SendWr::send(1, &sges);
        assert!(w.flags().contains(SendFlags::SIGNALED));
        let w = w.unsignaled();
        assert!(!w.flags().contains(SendFlags::SIGNALED));
        assert_eq!(w.opcode(), WrOpcode::Send);
    }

    #[test]
    fn imm_is_network_order_on_the_wr() {
        let sges = [Sge::raw(0x1000, 8, 1)];
        let w = SendWr::send_with_imm(1, &sges, 0x0102_0304);
        // SAFETY: reading a u32 union member of a plain-data union.
        let raw = unsafe { w.wr.imm_data_invalidated_rkey_union.imm_data };
        assert_eq!(raw, 0x0102_0304u32.to_be());
    }

    #[test]
    fn atomics_fill_the_atomic_union() {
        let l = Sge::raw(0x2000, 8, 3);
        let w = SendWr::compare_swap(9, &l, 0x3000, 77, 5, 6);
        // SAFETY: the atomic member is the one written by compare_swap.
        let a = unsafe { w.wr.wr.atomic };
        assert_eq!(
            (a.remote_addr, a.rkey, a.compare_add, a.swap),
            (0x3000, 77, 5, 6)
        );
        assert_eq!(w.wr.num_sge, 1);
    }

    #[test]
    fn inline_sets_the_flag() {
        let data = *b"hello";
        let s = [InlineSge::new(&data)];
        let w = SendWr::send_inline(1, &s);
        assert!(w.flags().contains(SendFlags::INLINE | SendFlags::SIGNALED));
    }

    #[test]
    fn wr_types_are_the_c_structs() {
        assert_eq!(size_of::<SendWr<'_>>(), size_of::<ibv_send_wr>());
        assert_eq!(size_of::<RecvWr<'_>>(), size_of::<ibv_recv_wr>());
        assert_eq!(size_of::<Sge>(), size_of::<ibv_sge>());
    }
}
