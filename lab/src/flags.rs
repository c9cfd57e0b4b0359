//! A tiny typed flag-set macro (the verbs have several: access flags, QP attribute masks,
//! send flags, completion flags). Each set prints its members by their C names, so
//! `AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE` shows as
//! `IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE`.

/// Defines a `Copy` flag-set newtype over `u32` with `|`, `&`, `contains`, `iter_names`,
/// and Debug/Display by C names.
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

pub(crate) use flag_set;
