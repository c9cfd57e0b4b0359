//! Devices, the device context, device/port attributes and the GID table.
//!
//! Verbs: `ibv_get_device_list`, `ibv_open_device`, `ibv_query_device`, `ibv_query_port`,
//! `ibv_query_gid_ex`, `ibv_get_async_event`, `ibv_close_device`.
//!
//! Layout: here the device list and the context (open, query, the GID table, async
//! events); `attr.rs` the device and port attributes (`ibv_device_attr`, `ibv_port_attr`,
//! MTUs, states); `gid.rs` GIDs and their types; `event.rs` the async event types.

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdma_sys::*;

use crate::error::{Errno, Error, Hint, HintCode, Result, Verb, ptr, rc, report_drop_failure};

mod attr;
mod event;
mod gid;

pub use attr::*;
pub use event::*;
pub use gid::*;

// libibverbs exports these (IBVERBS_1.11) but rdma-sys's allowlist skips names starting with
// `_`, so declare them here (docs/rdma-sys-notes.md, note 3). `ibv_query_gid_ex`
// in C is a static inline around `_ibv_query_gid_ex`.
unsafe extern "C" {
    fn _ibv_query_gid_ex(
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> c_int;
}

/// One RDMA device as listed by `ibv_get_device_list(3)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// `ibv_get_device_name(3)`, e.g. `rxe0`.
    pub name: String,
    /// `ibv_get_device_guid(3)`, in host order.
    pub guid: u64,
    /// `ibv_node_type_str(device->node_type)`, e.g. `InfiniBand channel adapter`.
    pub node_type: String,
}

/// Lists the RDMA devices (`ibv_get_device_list(3)`, then `ibv_free_device_list(3)`).
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer; the returned list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    let list = ptr(list, |errno| {
        Error::failed(Verb::GetDeviceList, errno).with_hint(Hint::new(HintCode::NoUverbs))
    })?;
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` valid device pointers until ibv_free_device_list.
        let dev = unsafe { *list.as_ptr().add(i) };
        // SAFETY: `dev` is a valid device; the name is a NUL-terminated string owned by it.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: `dev` is a valid device.
        let guid = u64::from_be(unsafe { ibv_get_device_guid(dev) });
        // SAFETY: `dev` is valid; ibv_node_type_str returns a static string.
        let node_type = unsafe { CStr::from_ptr(ibv_node_type_str((*dev).node_type)) }
            .to_string_lossy()
            .into_owned();
        out.push(DeviceInfo {
            name,
            guid,
            node_type,
        });
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed exactly once.
    unsafe { ibv_free_device_list(list.as_ptr()) };
    Ok(out)
}

/// Whether the libibverbs this process runs exports a function named `symbol`: `dlsym(3)` on
/// `libibverbs.so.1`. `None` if the library cannot be opened at all.
///
/// A verb a tutorial names either exists here or it does not: chapter 11 asks for
/// `ibv_flush_cache`, which no rdma-core has, next to `ibv_modify_qp`, which every one
/// exports. Some verbs are not symbols at all: `ibv_post_send` and `ibv_poll_cq` are
/// `static inline` in `<infiniband/verbs.h>` and jump through the context's ops table, so
/// they are found in the header, not here.
pub fn libibverbs_exports(symbol: &str) -> Option<bool> {
    let name = std::ffi::CString::new(symbol).ok()?;
    // SAFETY: the file name is a NUL-terminated literal; RTLD_NOW resolves the library's
    // own symbols at once. The handle is closed below.
    let handle = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: `handle` came from dlopen above; `name` is NUL-terminated. The address is
    // only compared with null, never called.
    let found = !unsafe { libc::dlsym(handle, name.as_ptr()) }.is_null();
    // SAFETY: `handle` is a live handle from dlopen, closed once (the library stays loaded:
    // this process links it).
    unsafe { libc::dlclose(handle) };
    Some(found)
}

pub(crate) struct ContextInner {
    pub(crate) ctx: NonNull<ibv_context>,
    pub(crate) name: String,
    closed: AtomicBool,
}

// SAFETY: libibverbs objects may be used from any thread; the verbs are thread-safe.
unsafe impl Send for ContextInner {}
// SAFETY: as above; shared access only calls thread-safe verbs.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: the context is open, and every child holds an Arc to this inner, so none is
        // alive any more.
        let ret = unsafe { ibv_close_device(self.ctx.as_ptr()) };
        if let Err(e) = rc(ret, |errno| {
            Error::failed(Verb::CloseDevice, errno).args(self.name.clone())
        }) {
            report_drop_failure("ibv_close_device", &e);
        }
    }
}

/// An open device: `struct ibv_context` (`ibv_open_device(3)`).
///
/// Every object created from it (PD, CQ, channel, ...) keeps it alive, so the device is closed
/// (`ibv_close_device(3)`) only after the last of them is gone. `Clone` gives another handle to
/// the same open device.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.name)
            .finish()
    }
}

impl Context {
    /// Opens the device named by `$LAB_DEVICE` if set, else the first device
    /// (`ibv_get_device_list(3)` + `ibv_open_device(3)`).
    pub fn open_default() -> Result<Context> {
        match std::env::var("LAB_DEVICE") {
            Ok(name) if !name.is_empty() => Context::open(Some(&name)),
            _ => Context::open(None),
        }
    }

    /// Opens the device called `name` (`rxe0`), or the first device for `None`
    /// (`ibv_open_device(3)`).
    pub fn open(name: Option<&str>) -> Result<Context> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the list is freed before returning.
        let list = unsafe { ibv_get_device_list(&mut n) };
        let list = ptr(list, |errno| {
            Error::failed(Verb::GetDeviceList, errno).with_hint(Hint::new(HintCode::NoUverbs))
        })?;
        let mut found = None;
        let mut names = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: the list holds `n` valid device pointers.
            let dev = unsafe { *list.as_ptr().add(i) };
            // SAFETY: `dev` is valid; the name is a NUL-terminated string it owns.
            let dname = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if found.is_none() && name.is_none_or(|w| w == dname) {
                found = Some((dev, dname.clone()));
            }
            names.push(dname);
        }
        let result = match found {
            None => Err(Error::NoDevice {
                wanted: name.map(|n| format!("named {n:?} ")).unwrap_or_default(),
                available: names,
                hints: vec![Hint::new(HintCode::NoDevice)],
            }),
            Some((dev, dname)) => {
                // SAFETY: `dev` is a valid device from the list, which is still alive.
                let ctx = unsafe { ibv_open_device(dev) };
                ptr(ctx, |errno| {
                    Error::failed(Verb::OpenDevice, errno).args(dname.clone())
                })
                .map(|ctx| (ctx, dname))
            }
        };
        // SAFETY: freeing the list is allowed once the device is open (the context does not
        // depend on the list); it is freed exactly once.
        unsafe { ibv_free_device_list(list.as_ptr()) };
        let (ctx, dname) = result?;
        let inner = Arc::new(ContextInner {
            ctx,
            name: dname,
            closed: AtomicBool::new(false),
        });
        // The async event fd is made non-blocking so `get_async_event` can wait with a deadline.
        // SAFETY: `ctx` is an open context; async_fd is its event file descriptor.
        set_nonblocking(unsafe { (*ctx.as_ptr()).async_fd })?;
        Ok(Context { inner })
    }

    /// A context opened by someone else (librdmacm's `id->verbs`), which lab must never close:
    /// `closed` starts true, so `Drop` leaves it alone.
    pub(crate) fn borrowed(ctx: NonNull<ibv_context>) -> Context {
        // SAFETY: `ctx` is an open context whose device outlives it; the name is a
        // NUL-terminated string owned by the device.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name((*ctx.as_ptr()).device)) }
            .to_string_lossy()
            .into_owned();
        Context {
            inner: Arc::new(ContextInner {
                ctx,
                name,
                closed: AtomicBool::new(true),
            }),
        }
    }

    /// The device name (`ibv_get_device_name(3)`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub(crate) fn raw(&self) -> *mut ibv_context {
        self.inner.ctx.as_ptr()
    }

    /// The device's capabilities (`ibv_query_device(3)`).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: ibv_device_attr is plain data; all-zero is a valid value.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open and `a` is a valid out-pointer.
        rc(unsafe { ibv_query_device(self.raw(), &mut a) }, |errno| {
            Error::failed(Verb::QueryDevice, errno)
        })?;
        // SAFETY: fw_ver is a NUL-terminated array filled by the provider (zeroed before).
        let fw_ver = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(DeviceAttr {
            fw_ver,
            node_guid: u64::from_be(a.node_guid),
            sys_image_guid: u64::from_be(a.sys_image_guid),
            max_mr_size: a.max_mr_size,
            page_size_cap: a.page_size_cap,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            hw_ver: a.hw_ver,
            max_qp: a.max_qp,
            max_qp_wr: a.max_qp_wr,
            device_cap_flags: a.device_cap_flags,
            max_sge: a.max_sge,
            max_sge_rd: a.max_sge_rd,
            max_cq: a.max_cq,
            max_cqe: a.max_cqe,
            max_mr: a.max_mr,
            max_pd: a.max_pd,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_res_rd_atom: a.max_res_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            atomic_cap: AtomicCap::from_raw(a.atomic_cap),
            max_mw: a.max_mw,
            max_ah: a.max_ah,
            max_srq: a.max_srq,
            max_srq_wr: a.max_srq_wr,
            max_srq_sge: a.max_srq_sge,
            max_pkeys: a.max_pkeys,
            local_ca_ack_delay: a.local_ca_ack_delay,
            phys_port_cnt: a.phys_port_cnt,
        })
    }

    /// A port's attributes (`ibv_query_port(3)`; ports are numbered from 1).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: ibv_port_attr is plain data; zero it first, the compat path does not memset.
        let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
        // `___ibv_query_port` is what the C macro `ibv_query_port` expands to (docs/rdma-sys-notes.md, note 2).
        // SAFETY: the context is open and `pa` is a valid out-pointer of the full struct size.
        let ret = unsafe { ___ibv_query_port(self.raw(), port, &mut pa) };
        rc(ret, |errno| {
            Error::failed(Verb::QueryPort, errno).args(format!("port {port}"))
        })?;
        Ok(PortAttr {
            port,
            state: PortState::from_raw(pa.state),
            max_mtu: Mtu::from_raw(pa.max_mtu).unwrap_or(Mtu::Mtu256),
            active_mtu: Mtu::from_raw(pa.active_mtu).unwrap_or(Mtu::Mtu256),
            gid_tbl_len: pa.gid_tbl_len,
            port_cap_flags: pa.port_cap_flags,
            max_msg_sz: pa.max_msg_sz,
            lid: pa.lid,
            link_layer: LinkLayer::from_raw(pa.link_layer),
            active_width: pa.active_width,
            active_speed: pa.active_speed,
            phys_state: pa.phys_state,
        })
    }

    /// One GID table entry with its type (`ibv_query_gid_ex(3)`).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<GidEntry> {
        // SAFETY: ibv_gid_entry is plain data; all-zero is valid.
        let mut e: ibv_gid_entry = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open, `e` is a valid out-pointer and entry_size is its size.
        let ret = unsafe {
            _ibv_query_gid_ex(
                self.raw(),
                port as u32,
                index,
                &mut e,
                0,
                std::mem::size_of::<ibv_gid_entry>(),
            )
        };
        rc(ret, |errno| {
            Error::failed(Verb::QueryGidEx, errno).args(format!("port {port}, index {index}"))
        })?;
        // SAFETY: reading the raw bytes of a plain-data union is always valid.
        let raw = unsafe { e.gid.raw };
        Ok(GidEntry {
            index: e.gid_index,
            port,
            gid: Gid(raw),
            gid_type: GidType::from_raw(e.gid_type),
            ndev_ifindex: e.ndev_ifindex,
        })
    }

    /// The populated entries of a port's GID table (`ibv_query_gid_ex(3)` for each index up to
    /// `gid_tbl_len`; empty slots, which report ENODATA, are skipped).
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let pa = self.query_port(port)?;
        let mut out = Vec::new();
        for i in 0..pa.gid_tbl_len.max(0) as u32 {
            match self.query_gid(port, i) {
                Ok(e) if !e.gid.is_zero() => out.push(e),
                Ok(_) => {}
                Err(Error::Verb {
                    verb: Verb::QueryGidEx,
                    errno,
                    ..
                }) if errno.0 == libc::ENODATA || errno.0 == libc::EINVAL => {
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// The GID to use for RoCE v2 over IPv4: the first entry whose **type** is RoCE v2 and whose
    /// **content** is an IPv4-mapped address (`::ffff:a.b.c.d`). Chosen by content, not by
    /// index: index 0 is usually the link-local `fe80::` entry, which fails RTR (EINVAL) toward
    /// an IPv4 peer.
    pub fn roce_v2_ipv4_gid(&self, port: u8) -> Result<GidEntry> {
        self.gid_table(port)?
            .into_iter()
            .find(|e| e.gid_type == GidType::RoceV2 && e.gid.to_ipv4().is_some())
            .ok_or_else(|| Error::NoRoceV2Gid {
                device: self.inner.name.clone(),
                port,
                hints: vec![Hint::new(HintCode::NoIpv4Gid)],
            })
    }

    /// Waits up to `timeout` for an asynchronous event (`poll(2)` on the context's async fd,
    /// then `ibv_get_async_event(3)`), copies it out and acknowledges it
    /// (`ibv_ack_async_event(3)`). `Ok(None)` when none came within the deadline.
    ///
    /// Acknowledging at once matters: `ibv_destroy_cq`/`ibv_destroy_qp` wait until every async
    /// event about them has been acked.
    pub fn get_async_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        // SAFETY: the context is open; async_fd is its event fd (made non-blocking at open).
        let fd = unsafe { (*self.raw()).async_fd };
        if !poll_readable(fd, timeout)? {
            return Ok(None);
        }
        // SAFETY: ibv_async_event is plain data (a union of pointers/ints and an enum whose
        // zero value is valid).
        let mut ev: ibv_async_event = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open and `ev` a valid out-pointer.
        let ret = unsafe { ibv_get_async_event(self.raw(), &mut ev) };
        if ret != 0 {
            let errno = Errno::last();
            if errno.0 == libc::EAGAIN {
                return Ok(None);
            }
            return Err(Error::failed(Verb::GetAsyncEvent, errno));
        }
        // Read the event type as the u32 the C library wrote: rdma-sys models it as a Rust enum,
        // and an unknown value must not be materialised as that enum.
        // SAFETY: `event_type` is a 4-byte C enum field; reading it as u32 is always valid.
        let kind = unsafe { std::ptr::read(std::ptr::addr_of!(ev.event_type) as *const u32) };
        let kind = AsyncEventType::from_raw(kind);
        // SAFETY: the union member to read is determined by the event type (verbs.h docs). The
        // CQ/QP the event is about cannot be destroyed before the event is acked, so reading
        // qp_num through the pointer is valid here.
        let element = unsafe {
            match kind.element_kind() {
                ElementKind::Cq => AsyncElement::Cq(ev.element.cq as usize),
                ElementKind::Qp => {
                    let qp = ev.element.qp;
                    AsyncElement::Qp(if qp.is_null() { 0 } else { (*qp).qp_num })
                }
                ElementKind::Srq => AsyncElement::Srq(ev.element.srq as usize),
                ElementKind::Port => AsyncElement::Port(ev.element.port_num as u8),
                ElementKind::Device => AsyncElement::Device,
            }
        };
        // SAFETY: `ev` came from ibv_get_async_event and is acked exactly once.
        unsafe { ibv_ack_async_event(&mut ev) };
        Ok(Some(AsyncEvent { kind, element }))
    }

    /// Closes the device explicitly (`ibv_close_device(3)`) and reports a failure, instead of
    /// leaving it to `Drop`. Refused while other handles or child objects are still alive.
    pub fn close(self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::InUse {
                object: "librdmacm's device context",
                detail: "lab did not open it (cm::CmId::context), so it does not close it".into(),
            });
        }
        let inner = Arc::try_unwrap(self.inner).map_err(|arc| Error::InUse {
            object: "the device context",
            detail: format!(
                "{} other handle(s) or child object(s) (PD, CQ, channel, ...) are alive; \
                 drop them first",
                Arc::strong_count(&arc) - 1
            )
            .into(),
        })?;
        inner.closed.store(true, Ordering::Release);
        // SAFETY: we own the last reference, so no child uses the context; closed only here.
        let ret = unsafe { ibv_close_device(inner.ctx.as_ptr()) };
        rc(ret, |errno| {
            Error::failed(Verb::CloseDevice, errno).args(inner.name.clone())
        })
    }
}

/// Sets `O_NONBLOCK` on a verbs file descriptor (`fcntl(2)`).
pub(crate) fn set_nonblocking(fd: c_int) -> Result<()> {
    // SAFETY: fcntl on a file descriptor we own; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(Error::Os {
            call: "fcntl(F_GETFL)",
            errno: Errno::last(),
        });
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(Error::Os {
            call: "fcntl(F_SETFL, O_NONBLOCK)",
            errno: Errno::last(),
        });
    }
    Ok(())
}

/// Waits until `fd` is readable or `timeout` passes (`poll(2)`, retried on EINTR).
/// Returns `false` on timeout.
pub(crate) fn poll_readable(fd: c_int, timeout: Duration) -> Result<bool> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        // Round up so a sub-millisecond remainder still waits rather than spinning.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as c_int;
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid array of one pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Ok(true);
        }
        if n == 0 {
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            continue;
        }
        let errno = Errno::last();
        if errno.0 != libc::EINTR {
            return Err(Error::Os {
                call: "poll",
                errno,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn gid_prints_like_ipv6() {
        let g: Gid = "10.99.0.1".parse().unwrap();
        assert_eq!(g.to_string(), "::ffff:10.99.0.1");
        assert_eq!(g.to_ipv4(), Some(Ipv4Addr::new(10, 99, 0, 1)));
        let ll: Gid = "fe80::5054:ff:fe00:1".parse().unwrap();
        assert!(ll.is_link_local());
        assert_eq!(ll.to_ipv4(), None);
        assert_eq!(ll.to_string(), "fe80::5054:ff:fe00:1");
    }

    #[test]
    fn libibverbs_exports_what_it_links_and_not_what_tutorials_invent() {
        assert_eq!(libibverbs_exports("ibv_modify_qp"), Some(true));
        assert_eq!(libibverbs_exports("ibv_flush_cache"), Some(false));
        // Inline in verbs.h: a call through the context's ops, no symbol.
        assert_eq!(libibverbs_exports("ibv_post_send"), Some(false));
        assert_eq!(libibverbs_exports("ibv_poll_cq"), Some(false));
        assert_eq!(libibverbs_exports("no\0such"), None);
    }

    #[test]
    fn mtu_sizes_and_order() {
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        assert_eq!(Mtu::from_bytes(4096), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::Mtu4096.min(Mtu::Mtu1024), Mtu::Mtu1024);
        assert_eq!(Mtu::from_raw(3), Some(Mtu::Mtu1024));
    }

    #[test]
    fn async_event_names_round_trip() {
        for i in 0..20 {
            let t = AsyncEventType::from_raw(i);
            assert_eq!(t.raw(), i);
            assert!(t.name().starts_with("IBV_EVENT_"));
        }
        assert_eq!(AsyncEventType::CqErr.name(), "IBV_EVENT_CQ_ERR");
        assert_eq!(AsyncEventType::from_raw(99), AsyncEventType::Unknown(99));
    }

    #[test]
    fn port_state_str_matches_libibverbs() {
        assert_eq!(PortState::Active.str(), "active");
    }
}
