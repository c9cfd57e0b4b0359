//! errno values by name: the one errno type and table of the workspace.
//!
//! An errno prints as its symbolic name and number, `EINVAL (22)` (docs/conventions.md), and
//! a number this table does not know (or 0, no error) as `errno 123`. The values are Linux's (the generic ones,
//! which x86_64 and arm64 share); `lab`'s unit tests check every row against the libc crate.

use std::fmt;

/// An errno value, printed as `EINVAL (22)`, or `errno 123` for a number [`ERRNOS`] does not
/// hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current `errno`.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// The symbolic name (`"EINVAL"`), `"0"` for no error, or `"E?"` for a number the table
    /// ([`errno_name`]) does not know.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "0",
            n => errno_name(n).unwrap_or("E?"),
        }
    }

    /// `strerror(3)`'s text ("Invalid argument").
    pub fn description(self) -> String {
        let s = std::io::Error::from_raw_os_error(self.0).to_string();
        // std appends " (os error N)": the number is printed by Display already.
        match s.rfind(" (os error") {
            Some(i) => s[..i].to_string(),
            None => s,
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match errno_name(self.0) {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "errno {}", self.0),
        }
    }
}

/// The errno values verbs, the CM and the socket calls produce, with their names (EWOULDBLOCK
/// == EAGAIN, ENOTSUP == EOPNOTSUPP and EDEADLOCK == EDEADLK on Linux: listed once).
pub const ERRNOS: &[(i32, &str)] = &[
    (1, "EPERM"),
    (2, "ENOENT"),
    (3, "ESRCH"),
    (4, "EINTR"),
    (5, "EIO"),
    (6, "ENXIO"),
    (7, "E2BIG"),
    (8, "ENOEXEC"),
    (9, "EBADF"),
    (10, "ECHILD"),
    (11, "EAGAIN"),
    (12, "ENOMEM"),
    (13, "EACCES"),
    (14, "EFAULT"),
    (16, "EBUSY"),
    (17, "EEXIST"),
    (18, "EXDEV"),
    (19, "ENODEV"),
    (20, "ENOTDIR"),
    (21, "EISDIR"),
    (22, "EINVAL"),
    (23, "ENFILE"),
    (24, "EMFILE"),
    (25, "ENOTTY"),
    (27, "EFBIG"),
    (28, "ENOSPC"),
    (29, "ESPIPE"),
    (30, "EROFS"),
    (31, "EMLINK"),
    (32, "EPIPE"),
    (33, "EDOM"),
    (34, "ERANGE"),
    (35, "EDEADLK"),
    (36, "ENAMETOOLONG"),
    (37, "ENOLCK"),
    (38, "ENOSYS"),
    (39, "ENOTEMPTY"),
    (40, "ELOOP"),
    (42, "ENOMSG"),
    (43, "EIDRM"),
    (61, "ENODATA"),
    (62, "ETIME"),
    (71, "EPROTO"),
    (74, "EBADMSG"),
    (75, "EOVERFLOW"),
    (84, "EILSEQ"),
    (88, "ENOTSOCK"),
    (89, "EDESTADDRREQ"),
    (90, "EMSGSIZE"),
    (91, "EPROTOTYPE"),
    (92, "ENOPROTOOPT"),
    (93, "EPROTONOSUPPORT"),
    (95, "EOPNOTSUPP"),
    (97, "EAFNOSUPPORT"),
    (98, "EADDRINUSE"),
    (99, "EADDRNOTAVAIL"),
    (100, "ENETDOWN"),
    (101, "ENETUNREACH"),
    (102, "ENETRESET"),
    (103, "ECONNABORTED"),
    (104, "ECONNRESET"),
    (105, "ENOBUFS"),
    (106, "EISCONN"),
    (107, "ENOTCONN"),
    (110, "ETIMEDOUT"),
    (111, "ECONNREFUSED"),
    (112, "EHOSTDOWN"),
    (113, "EHOSTUNREACH"),
    (114, "EALREADY"),
    (115, "EINPROGRESS"),
    (116, "ESTALE"),
    (122, "EDQUOT"),
    (125, "ECANCELED"),
    (130, "EOWNERDEAD"),
    (131, "ENOTRECOVERABLE"),
];

/// The symbolic name of an errno (`22` -> `"EINVAL"`); `None` for a value [`ERRNOS`] does not
/// hold (and for negative values).
pub fn errno_name(errno: i32) -> Option<&'static str> {
    ERRNOS
        .iter()
        .find(|(n, _)| *n == errno)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_prints_name_and_number() {
        assert_eq!(Errno(22).to_string(), "EINVAL (22)");
        assert_eq!(Errno(16).to_string(), "EBUSY (16)");
        assert_eq!(Errno(12).name(), "ENOMEM");
        assert_eq!(Errno(22).description(), "Invalid argument");
        assert_eq!(Errno(0).to_string(), "errno 0");
        assert_eq!(Errno(4242).to_string(), "errno 4242");
        assert_eq!(Errno(4242).name(), "E?");
        assert_eq!(errno_name(-22), None);
    }

    #[test]
    fn each_value_and_name_once() {
        for (i, (n, name)) in ERRNOS.iter().enumerate() {
            assert!(
                ERRNOS[i + 1..].iter().all(|(m, nm)| m != n && nm != name),
                "{name}"
            );
        }
    }
}
