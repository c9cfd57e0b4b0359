//! What `ibv_query_device(3)` and `ibv_query_port(3)` report: the device's limits and
//! capabilities, the port's state, link layer and MTUs.

use std::ffi::CStr;
use std::fmt;

use rdma_sys::*;

use crate::flags::c_enum;

/// `IBV_LINK_LAYER_*` are an anonymous enum in verbs.h that rdma-sys does not export.
const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
const IBV_LINK_LAYER_ETHERNET: u8 = 2;

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

c_enum! {
    /// `enum ibv_atomic_cap`.
    pub enum AtomicCap: u32, unknown "IBV_ATOMIC_?" {
        /// `IBV_ATOMIC_NONE`: no atomics.
        None = ibv_atomic_cap::IBV_ATOMIC_NONE => "IBV_ATOMIC_NONE",
        /// `IBV_ATOMIC_HCA`: atomic with respect to this device only (rxe).
        Hca = ibv_atomic_cap::IBV_ATOMIC_HCA => "IBV_ATOMIC_HCA",
        /// `IBV_ATOMIC_GLOB`: atomic with respect to the CPU too.
        Glob = ibv_atomic_cap::IBV_ATOMIC_GLOB => "IBV_ATOMIC_GLOB",
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

c_enum! {
    /// `enum ibv_port_state`.
    pub enum PortState: u32, unknown "IBV_PORT_?" {
        Nop = ibv_port_state::IBV_PORT_NOP => "IBV_PORT_NOP",
        Down = ibv_port_state::IBV_PORT_DOWN => "IBV_PORT_DOWN",
        Init = ibv_port_state::IBV_PORT_INIT => "IBV_PORT_INIT",
        Armed = ibv_port_state::IBV_PORT_ARMED => "IBV_PORT_ARMED",
        Active = ibv_port_state::IBV_PORT_ACTIVE => "IBV_PORT_ACTIVE",
        ActiveDefer = ibv_port_state::IBV_PORT_ACTIVE_DEFER => "IBV_PORT_ACTIVE_DEFER",
    }
}

impl PortState {
    /// `ibv_port_state_str(3)`'s text (`active`).
    pub fn str(self) -> &'static str {
        let raw = self.raw();
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

c_enum! {
    /// The port's link layer (`IBV_LINK_LAYER_*`): RoCE ports are Ethernet.
    pub enum LinkLayer: u8, unknown "IBV_LINK_LAYER_?" {
        Unspecified = 0 => "IBV_LINK_LAYER_UNSPECIFIED",
        InfiniBand = IBV_LINK_LAYER_INFINIBAND => "IBV_LINK_LAYER_INFINIBAND",
        Ethernet = IBV_LINK_LAYER_ETHERNET => "IBV_LINK_LAYER_ETHERNET",
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

c_enum! {
    /// `enum ibv_mtu`: a path MTU. Ordered, so `min` clamps.
    #[derive(PartialOrd, Ord)]
    pub enum Mtu: u32, closed {
        Mtu256 = ibv_mtu::IBV_MTU_256 => "IBV_MTU_256",
        Mtu512 = ibv_mtu::IBV_MTU_512 => "IBV_MTU_512",
        Mtu1024 = ibv_mtu::IBV_MTU_1024 => "IBV_MTU_1024",
        Mtu2048 = ibv_mtu::IBV_MTU_2048 => "IBV_MTU_2048",
        Mtu4096 = ibv_mtu::IBV_MTU_4096 => "IBV_MTU_4096",
    }
}

impl Mtu {
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
    /// The size in bytes (`IBV_MTU_256` = 1 is 256 bytes, each next value doubles it).
    pub fn bytes(self) -> u32 {
        128 << self.raw()
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}
