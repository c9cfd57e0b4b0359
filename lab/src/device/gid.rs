//! GIDs (`union ibv_gid`), their types (RoCE v1, RoCE v2, IB) and the GID table's entries
//! (`struct ibv_gid_entry`).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use rdma_sys::*;

use crate::flags::c_enum;

/// A 128-bit GID (`union ibv_gid`), in network byte order. On RoCE it is an IPv6 address, so
/// it prints as one: `fe80::5054:ff:fe00:1`, `::ffff:10.99.0.1`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The raw bytes (network order), as `ibv_rc_pingpong` sends them.
    pub fn raw(&self) -> [u8; 16] {
        self.0
    }
    /// True for the all-zero GID (an empty table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), else `None`.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }
    /// The IPv4-mapped GID of an IPv4 address (what rxe puts in the table for it).
    pub fn from_ipv4(ip: Ipv4Addr) -> Gid {
        Gid(ip.to_ipv6_mapped().octets())
    }
    /// The GID as an IPv6 address.
    pub fn to_ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }
    /// True for a link-local `fe80::/10` GID.
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && (self.0[1] & 0xc0) == 0x80
    }
    pub(crate) fn to_ibv(self) -> ibv_gid {
        ibv_gid { raw: self.0 }
    }
}

impl fmt::Display for Gid {
    /// The IPv6 text form as glibc's `inet_ntop` writes it, like the C tools and
    /// [`crate::show::gid_bare`] (one formatter: `contracts::labels::GidText`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&contracts::labels::GidText::bare(&self.0), f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl std::str::FromStr for Gid {
    type Err = std::net::AddrParseError;
    /// Parses an IPv6 form (`::ffff:10.99.0.1`) or a bare IPv4 address (mapped).
    fn from_str(s: &str) -> std::result::Result<Gid, Self::Err> {
        if let Ok(v4) = s.parse::<Ipv4Addr>() {
            return Ok(Gid::from_ipv4(v4));
        }
        s.parse::<Ipv6Addr>().map(|a| Gid(a.octets()))
    }
}

c_enum! {
    /// The GID types (`IBV_GID_TYPE_*`).
    pub enum GidType: u32, unknown "IBV_GID_TYPE_?" {
        /// `IBV_GID_TYPE_IB`: native InfiniBand.
        Ib = IBV_GID_TYPE_IB => "IBV_GID_TYPE_IB",
        /// `IBV_GID_TYPE_ROCE_V1`: RoCE over raw Ethernet (ethertype 0x8915), not routable.
        RoceV1 = IBV_GID_TYPE_ROCE_V1 => "IBV_GID_TYPE_ROCE_V1",
        /// `IBV_GID_TYPE_ROCE_V2`: RoCE over UDP/IP (port 4791), routable. What rxe speaks.
        RoceV2 = IBV_GID_TYPE_ROCE_V2 => "IBV_GID_TYPE_ROCE_V2",
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The spelling of /sys/class/infiniband/*/ports/*/gid_attrs/types/*.
        match self {
            GidType::Ib => f.write_str("IB"),
            GidType::RoceV1 => f.write_str("RoCE v1"),
            GidType::RoceV2 => f.write_str("RoCE v2"),
            GidType::Unknown(v) => write!(f, "unknown({v})"),
        }
    }
}

/// One GID table entry (`struct ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The index to pass as `sgid_index`.
    pub index: u32,
    pub port: u8,
    pub gid: Gid,
    pub gid_type: GidType,
    /// The netdev's ifindex (`ip link` number).
    pub ndev_ifindex: u32,
}
