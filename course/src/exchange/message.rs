//! The lab's own exchange message: versioned, length-checked, big-endian.
//!
//! ```text
//! header (12 bytes)
//!   0  magic        4 bytes  "RXEL"
//!   4  version      u16      1
//!   6  flags        u16      0 (reserved; must be zero in version 1)
//!   8  body length  u32      at most MAX_BODY_LEN
//! body (version 1)
//!   0  lid          u16
//!   2  qpn          u32      24 bits
//!   6  psn          u32      24 bits
//!  10  gid          16 bytes network order
//!  26  name length  u8       at most MAX_NAME_LEN
//!  27  name         UTF-8
//!   .  region count u32      at most MAX_REGIONS
//!   .  regions      count x (addr u64, len u64, rkey u32) = 20 bytes each
//! ```
//!
//! The body must end exactly after the last region. All integers are big-endian (network
//! order), so the format does not depend on either host.

use super::{ExchangeError, escape_bytes};

/// The first four bytes of every lab message.
pub const MAGIC: [u8; 4] = *b"RXEL";
/// The version this build writes and the only one it reads.
pub const VERSION: u16 = 1;
/// Size of the fixed header (magic, version, flags, body length).
pub const HEADER_LEN: usize = 12;
/// Largest body accepted (1 MiB); longer announced lengths are refused before allocating.
pub const MAX_BODY_LEN: usize = 1 << 20;
/// Longest `name` (bytes of UTF-8).
pub const MAX_NAME_LEN: usize = 255;
/// Bytes per region on the wire.
pub const REGION_WIRE_LEN: usize = 20;
/// Fixed part of the body: lid, qpn, psn, gid, name length, region count.
const BODY_FIXED: usize = 2 + 4 + 4 + 16 + 1 + 4;
/// Most regions one message can carry (52 427 with a 1 MiB body).
pub const MAX_REGIONS: usize = (MAX_BODY_LEN - BODY_FIXED - MAX_NAME_LEN) / REGION_WIRE_LEN;

const WHAT: &str = "lab message";
const MAX24: u32 = 0xff_ffff;

// The region itself is a verbs-layer type (it describes an MR); the exchange only carries it.
pub use lab::RemoteRegion;

/// What one side tells the other about itself: its QP, and the regions it exposes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Endpoint {
    /// A short role or name ("server", "client-2", "pool"), at most [`MAX_NAME_LEN`] bytes.
    pub name: String,
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Starting PSN (24 bits).
    pub psn: u32,
    /// GID to address this end with, raw bytes in network order.
    pub gid: [u8; 16],
    /// Regions the peer may access (none for a two-sided exchange).
    pub regions: Vec<RemoteRegion>,
}

/// A cursor over the body that reports which field ran out.
struct Reader<'a> {
    body: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], ExchangeError> {
        let rest = &self.body[self.pos..];
        if rest.len() < n {
            return Err(ExchangeError::Malformed {
                what: WHAT,
                field,
                detail: format!(
                    "needs {n} bytes at body offset {} but the body ends after {} bytes",
                    self.pos,
                    self.body.len()
                ),
                bytes: escape_bytes(rest),
            });
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ExchangeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N, field)?);
        Ok(out)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, ExchangeError> {
        Ok(self.array::<1>(field)?[0])
    }
    fn u16(&mut self, field: &'static str) -> Result<u16, ExchangeError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, ExchangeError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, ExchangeError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }
}

fn malformed(field: &'static str, detail: String, bytes: &[u8]) -> ExchangeError {
    ExchangeError::Malformed {
        what: WHAT,
        field,
        detail,
        bytes: escape_bytes(bytes),
    }
}

impl Endpoint {
    /// This end of an RC connection before its QP exists: a name, the first PSN and the GID
    /// (raw bytes). The QP number is filled in once the QP is created (an accept or connect
    /// helper does it); a memory server adds its `regions`.
    pub fn rc(name: impl Into<String>, psn: u32, gid: [u8; 16]) -> Endpoint {
        Endpoint {
            name: name.into(),
            psn,
            gid,
            ..Default::default()
        }
    }

    /// The whole message (header and body), ready to send.
    ///
    /// Fails if a field does not fit: QPN or PSN above 24 bits, a name longer than
    /// [`MAX_NAME_LEN`] bytes, more than [`MAX_REGIONS`] regions, or a region whose
    /// `addr + len` overflows.
    pub fn encode(&self) -> Result<Vec<u8>, ExchangeError> {
        for (field, v) in [("qpn", self.qpn), ("psn", self.psn)] {
            if v > MAX24 {
                return Err(ExchangeError::Invalid {
                    field,
                    value: u64::from(v),
                    detail: "must fit 24 bits (at most 0xffffff)".into(),
                });
            }
        }
        if self.name.len() > MAX_NAME_LEN {
            return Err(ExchangeError::Invalid {
                field: "name length",
                value: self.name.len() as u64,
                detail: format!("a name is at most {MAX_NAME_LEN} bytes"),
            });
        }
        if self.regions.len() > MAX_REGIONS {
            return Err(ExchangeError::Invalid {
                field: "region count",
                value: self.regions.len() as u64,
                detail: format!("one message carries at most {MAX_REGIONS} regions"),
            });
        }
        if let Some(r) = self.regions.iter().find(|r| r.end().is_none()) {
            return Err(ExchangeError::Invalid {
                field: "region addr + len",
                value: r.addr,
                detail: format!("addr + len ({:#x}) overflows 64 bits", r.len),
            });
        }
        let body_len = BODY_FIXED + self.name.len() + self.regions.len() * REGION_WIRE_LEN;
        let mut out = Vec::with_capacity(HEADER_LEN + body_len);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
        // body_len <= MAX_BODY_LEN (checked above through MAX_NAME_LEN and MAX_REGIONS).
        out.extend_from_slice(&(body_len as u32).to_be_bytes());
        out.extend_from_slice(&self.lid.to_be_bytes());
        out.extend_from_slice(&self.qpn.to_be_bytes());
        out.extend_from_slice(&self.psn.to_be_bytes());
        out.extend_from_slice(&self.gid);
        out.push(self.name.len() as u8);
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(&(self.regions.len() as u32).to_be_bytes());
        for r in &self.regions {
            out.extend_from_slice(&r.addr.to_be_bytes());
            out.extend_from_slice(&r.len.to_be_bytes());
            out.extend_from_slice(&r.rkey.to_be_bytes());
        }
        debug_assert_eq!(out.len(), HEADER_LEN + body_len);
        Ok(out)
    }

    /// Checks a header and returns the body length it announces. Rejects a wrong magic,
    /// another version, nonzero flags, or a body longer than [`MAX_BODY_LEN`].
    pub fn decode_header(header: &[u8]) -> Result<usize, ExchangeError> {
        if header.len() < HEADER_LEN {
            return Err(ExchangeError::Truncated {
                what: WHAT,
                from: "input".into(),
                got: header.len(),
                expected: HEADER_LEN,
            });
        }
        if header[..4] != MAGIC {
            return Err(ExchangeError::BadMagic {
                found: escape_bytes(&header[..HEADER_LEN]),
            });
        }
        let version = u16::from_be_bytes([header[4], header[5]]);
        if version != VERSION {
            return Err(ExchangeError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let flags = u16::from_be_bytes([header[6], header[7]]);
        if flags != 0 {
            return Err(malformed(
                "flags",
                format!("must be zero in version {VERSION}, got {flags:#06x}"),
                &header[..HEADER_LEN],
            ));
        }
        let len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        if len as usize > MAX_BODY_LEN {
            return Err(ExchangeError::Oversized {
                what: WHAT,
                len: u64::from(len),
                max: MAX_BODY_LEN as u64,
            });
        }
        Ok(len as usize)
    }

    /// Parses a whole message (header and body; nothing may follow it).
    pub fn decode(bytes: &[u8]) -> Result<Self, ExchangeError> {
        let body_len = Self::decode_header(bytes)?;
        let total = HEADER_LEN + body_len;
        if bytes.len() < total {
            return Err(ExchangeError::Truncated {
                what: WHAT,
                from: "input".into(),
                got: bytes.len(),
                expected: total,
            });
        }
        if bytes.len() > total {
            return Err(malformed(
                "length",
                format!(
                    "the header announces {total} bytes but {} follow",
                    bytes.len()
                ),
                &bytes[total..],
            ));
        }
        Self::decode_body(&bytes[HEADER_LEN..])
    }

    /// Parses a version-1 body (what follows a header that [`decode_header`](Self::decode_header)
    /// accepted).
    pub fn decode_body(body: &[u8]) -> Result<Self, ExchangeError> {
        if body.len() > MAX_BODY_LEN {
            return Err(ExchangeError::Oversized {
                what: WHAT,
                len: body.len() as u64,
                max: MAX_BODY_LEN as u64,
            });
        }
        let mut r = Reader { body, pos: 0 };
        let lid = r.u16("lid")?;
        let qpn_at = r.pos;
        let qpn = r.u32("qpn")?;
        let psn = r.u32("psn")?;
        for (field, v, at) in [("qpn", qpn, qpn_at), ("psn", psn, qpn_at + 4)] {
            if v > MAX24 {
                return Err(malformed(
                    field,
                    format!("{v:#x} does not fit 24 bits"),
                    &body[at..at + 4],
                ));
            }
        }
        let gid = r.array::<16>("gid")?;
        let name_len = usize::from(r.u8("name length")?);
        let name_bytes = r.bytes(name_len, "name")?;
        let name = std::str::from_utf8(name_bytes)
            .map_err(|e| malformed("name", format!("is not UTF-8 ({e})"), name_bytes))?
            .to_owned();
        let count_at = r.pos;
        let count = r.u32("region count")? as usize;
        let left = body.len() - r.pos;
        // Check the count against the bytes actually present before allocating for it.
        if count.checked_mul(REGION_WIRE_LEN) != Some(left) {
            return Err(malformed(
                "region count",
                format!(
                    "says {count} regions ({} bytes) but {left} bytes follow",
                    count.saturating_mul(REGION_WIRE_LEN)
                ),
                &body[count_at..count_at + 4],
            ));
        }
        let mut regions = Vec::with_capacity(count);
        for _ in 0..count {
            let at = r.pos;
            let region = RemoteRegion {
                addr: r.u64("region addr")?,
                len: r.u64("region len")?,
                rkey: r.u32("region rkey")?,
            };
            if region.end().is_none() {
                return Err(malformed(
                    "region",
                    format!(
                        "{} has addr {:#x} + len {:#x} beyond 64 bits",
                        regions.len(),
                        region.addr,
                        region.len
                    ),
                    &body[at..at + REGION_WIRE_LEN],
                ));
            }
            regions.push(region);
        }
        Ok(Endpoint {
            name,
            lid,
            qpn,
            psn,
            gid,
            regions,
        })
    }
}
