//! What `ibv_query_device(3)` and `ibv_query_port(3)` report: the device's limits and
//! capabilities, the port's state, link layer and MTUs.

use super::*;

/// The capabilities that matter, from `struct ibv_device_attr` (`ibv_query_device(3)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    pub fw_ver: String,
    /// Host order (the C field is big-endian).
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    /// `IBV_DEVICE_*` bits.
    pub device_cap_flags: u32,
    pub max_sge: i32,
    pub max_sge_rd: i32,
    pub max_cq: i32,
    pub max_cqe: i32,
    pub max_mr: i32,
    pub max_pd: i32,
    /// Max outstanding RDMA READ/atomic a QP can *receive* (bounds `max_dest_rd_atomic`).
    pub max_qp_rd_atom: i32,
    pub max_res_rd_atom: i32,
    /// Max outstanding RDMA READ/atomic a QP can *initiate* (bounds `max_rd_atomic`).
    pub max_qp_init_rd_atom: i32,
    pub atomic_cap: AtomicCap,
    pub max_mw: i32,
    pub max_ah: i32,
    pub max_srq: i32,
    pub max_srq_wr: i32,
    pub max_srq_sge: i32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `enum ibv_atomic_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicCap {
    /// `IBV_ATOMIC_NONE`: no atomics.
    None,
    /// `IBV_ATOMIC_HCA`: atomic with respect to this device only (rxe).
    Hca,
    /// `IBV_ATOMIC_GLOB`: atomic with respect to the CPU too.
    Glob,
    Unknown(u32),
}

impl AtomicCap {
    pub(super) fn from_raw(v: u32) -> Self {
        match v {
            ibv_atomic_cap::IBV_ATOMIC_NONE => AtomicCap::None,
            ibv_atomic_cap::IBV_ATOMIC_HCA => AtomicCap::Hca,
            ibv_atomic_cap::IBV_ATOMIC_GLOB => AtomicCap::Glob,
            v => AtomicCap::Unknown(v),
        }
    }
    /// The C name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicCap::None => "IBV_ATOMIC_NONE",
            AtomicCap::Hca => "IBV_ATOMIC_HCA",
            AtomicCap::Glob => "IBV_ATOMIC_GLOB",
            AtomicCap::Unknown(_) => "IBV_ATOMIC_?",
        }
    }
}

/// `struct ibv_port_attr`, the fields a learner needs (`ibv_query_port(3)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    pub port: u8,
    pub state: PortState,
    pub max_mtu: Mtu,
    /// The path MTU a QP may use on this port; `lab` clamps path_mtu to it by default.
    pub active_mtu: Mtu,
    pub gid_tbl_len: i32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    /// 0 on RoCE (Ethernet has no LIDs; addressing is by GID).
    pub lid: u16,
    pub link_layer: LinkLayer,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
}

/// `enum ibv_port_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    Nop,
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    Unknown(u32),
}

impl PortState {
    pub(super) fn from_raw(v: u32) -> Self {
        use ibv_port_state::*;
        match v {
            IBV_PORT_NOP => PortState::Nop,
            IBV_PORT_DOWN => PortState::Down,
            IBV_PORT_INIT => PortState::Init,
            IBV_PORT_ARMED => PortState::Armed,
            IBV_PORT_ACTIVE => PortState::Active,
            IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            v => PortState::Unknown(v),
        }
    }
    /// The C name (`IBV_PORT_ACTIVE`).
    pub fn name(self) -> &'static str {
        match self {
            PortState::Nop => "IBV_PORT_NOP",
            PortState::Down => "IBV_PORT_DOWN",
            PortState::Init => "IBV_PORT_INIT",
            PortState::Armed => "IBV_PORT_ARMED",
            PortState::Active => "IBV_PORT_ACTIVE",
            PortState::ActiveDefer => "IBV_PORT_ACTIVE_DEFER",
            PortState::Unknown(_) => "IBV_PORT_?",
        }
    }
    /// `ibv_port_state_str(3)`'s text (`active`).
    pub fn str(self) -> &'static str {
        let raw = match self {
            PortState::Nop => 0,
            PortState::Down => 1,
            PortState::Init => 2,
            PortState::Armed => 3,
            PortState::Active => 4,
            PortState::ActiveDefer => 5,
            PortState::Unknown(v) => v,
        };
        // SAFETY: ibv_port_state_str returns a pointer to a static string for any value.
        unsafe { CStr::from_ptr(ibv_port_state_str(raw)) }
            .to_str()
            .unwrap_or("?")
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.str())
    }
}

/// The port's link layer (`IBV_LINK_LAYER_*`): RoCE ports are Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    Unspecified,
    InfiniBand,
    Ethernet,
    Unknown(u8),
}

impl LinkLayer {
    pub(super) fn from_raw(v: u8) -> Self {
        match v {
            0 => LinkLayer::Unspecified,
            IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            v => LinkLayer::Unknown(v),
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkLayer::Unspecified => f.write_str("Unspecified"),
            LinkLayer::InfiniBand => f.write_str("InfiniBand"),
            LinkLayer::Ethernet => f.write_str("Ethernet"),
            LinkLayer::Unknown(v) => write!(f, "Unknown({v})"),
        }
    }
}

/// `enum ibv_mtu`: a path MTU. Ordered, so `min` clamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    /// From the C value (`IBV_MTU_1024` = 3).
    pub fn from_raw(v: u32) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// From a size in bytes (256, 512, 1024, 2048, 4096), as `ibv_rc_pingpong -m` takes it.
    pub fn from_bytes(b: u32) -> Option<Mtu> {
        Some(match b {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The C value.
    pub fn raw(self) -> u32 {
        self as u32
    }
    /// The size in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}
