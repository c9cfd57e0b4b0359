//! The two macros that map C enums into Rust, one for each kind (used here for the pure tables
//! and by `lab` for the values it reads back from libibverbs):
//!
//! - [`flag_set!`](crate::flag_set) for bit sets (access flags, QP attribute masks, send
//!   flags, completion flags). Each set prints its members by their C names, so
//!   `AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE` shows as
//!   `IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE`.
//! - [`c_enum!`](crate::c_enum) for value enums (`ibv_qp_state`, `ibv_wc_status`, ...): one
//!   table of variant, C value and C name, from which `from_raw`, `raw`, `name` and `ALL` are
//!   made; a value the table does not know becomes `Unknown(v)` instead of a panic.

/// Defines a `Copy` flag-set newtype over `u32` with `|`, `&`, `contains`, `iter_names`,
/// and Debug/Display by C names.
#[macro_export]
macro_rules! flag_set {
    (
        $(#[$meta:meta])*
        pub struct $name:ident;
        $( $(#[$fmeta:meta])* $flag:ident = $value:expr => $cname:literal; )*
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            $( $(#[$fmeta])* pub const $flag: $name = $name($value); )*

            /// Every flag of this set with its C name, in bit order.
            pub const ALL_NAMED: &'static [($name, &'static str)] = &[$( ($name::$flag, $cname), )*];

            /// The empty set.
            pub const fn empty() -> Self { $name(0) }
            /// From raw bits, as the C API takes them (unknown bits are kept).
            pub const fn from_bits(bits: u32) -> Self { $name(bits) }
            /// The raw bits, as the C API takes them.
            pub const fn bits(self) -> u32 { self.0 }
            /// True if every bit of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }
            /// True if no bit is set.
            pub const fn is_empty(self) -> bool { self.0 == 0 }
            /// `self` without the bits of `other`.
            pub const fn without(self, other: Self) -> Self { $name(self.0 & !other.0) }
            /// The C names of the flags that are set (bits without a name are left out).
            pub fn iter_names(self) -> impl Iterator<Item = &'static str> {
                Self::ALL_NAMED.iter().filter(move |(f, _)| f.0 != 0 && self.contains(*f)).map(|(_, n)| *n)
            }
            /// Bits set that no named flag covers.
            pub fn unknown_bits(self) -> u32 {
                Self::ALL_NAMED.iter().fold(self.0, |acc, (f, _)| acc & !f.0)
            }
        }

        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name { $name(self.0 | rhs.0) }
        }
        impl std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: $name) { self.0 |= rhs.0; }
        }
        impl std::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, rhs: $name) -> $name { $name(self.0 & rhs.0) }
        }
        impl std::ops::Sub for $name {
            type Output = $name;
            fn sub(self, rhs: $name) -> $name { $name(self.0 & !rhs.0) }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                if self.0 == 0 {
                    return f.write_str("0");
                }
                let mut first = true;
                for n in self.iter_names() {
                    if !first { f.write_str(" | ")?; }
                    f.write_str(n)?;
                    first = false;
                }
                let rest = self.unknown_bits();
                if rest != 0 {
                    if !first { f.write_str(" | ")?; }
                    write!(f, "{rest:#x}")?;
                }
                Ok(())
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self)
            }
        }
    };
}

/// Defines a value enum from one table: `Variant = C value => "C_NAME",` per line. Generates
/// `ALL` (table order), `from_raw`, `raw` and `name` (the C name). Three forms:
///
/// - `pub enum X: u32, unknown "IBV_X_?" { ... }`: for values `lab` reads back from the
///   device; an `Unknown(raw)` variant holds a value the table does not know;
/// - the same with `explained "..."`: each line also carries a one-line explanation,
///   returned by `explanation()` (the status table);
/// - `pub enum X: u32, closed { ... }`: for values `lab` only passes in; `from_raw` returns
///   `None` for a value outside the table.
#[macro_export]
macro_rules! c_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $repr:ty, closed {
            $( $(#[$vmeta:meta])* $var:ident = $val:expr => $cname:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $var, )*
        }

        impl $name {
            /// Every value, in table order.
            pub const ALL: &'static [$name] = &[$( $name::$var, )*];

            /// From the C value (`None` for a value outside the table).
            pub fn from_raw(v: $repr) -> Option<$name> {
                $( if v == $val { return Some($name::$var); } )*
                None
            }
            /// The C value.
            pub fn raw(self) -> $repr {
                match self { $( $name::$var => $val, )* }
            }
            /// The C name.
            pub fn name(self) -> &'static str {
                match self { $( $name::$var => $cname, )* }
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $repr:ty, unknown $uname:literal {
            $( $(#[$vmeta:meta])* $var:ident = $val:expr => $cname:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $var, )*
            /// A value this table does not know.
            Unknown($repr),
        }

        impl $name {
            /// Every known value, in table order.
            pub const ALL: &'static [$name] = &[$( $name::$var, )*];

            /// From the C value (`Unknown` for a value the table does not know).
            pub fn from_raw(v: $repr) -> $name {
                $( if v == $val { return $name::$var; } )*
                $name::Unknown(v)
            }
            /// The C value.
            pub fn raw(self) -> $repr {
                match self { $( $name::$var => $val, )* $name::Unknown(v) => v }
            }
            /// The C name.
            pub fn name(self) -> &'static str {
                match self { $( $name::$var => $cname, )* $name::Unknown(_) => $uname }
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $repr:ty, unknown $uname:literal, explained $uwhy:literal {
            $( $(#[$vmeta:meta])* $var:ident = $val:expr => $cname:literal, $why:literal; )*
        }
    ) => {
        $crate::c_enum! {
            $(#[$meta])*
            pub enum $name: $repr, unknown $uname {
                $( $(#[$vmeta])* $var = $val => $cname, )*
            }
        }

        impl $name {
            /// One line for a learner: what usually causes this value.
            pub fn explanation(self) -> &'static str {
                match self { $( $name::$var => $why, )* $name::Unknown(_) => $uwhy }
            }
        }
    };
}
