//! The two macros that map C types into `lab`, one for each kind of C enum. They live in the
//! `contracts` crate (its pure tables are made with them too); `lab` uses them for the values it
//! reads back from libibverbs, with the rdma-sys constants as C values:
//!
//! - [`flag_set!`] for bit sets (access flags, QP attribute masks, send flags, completion
//!   flags). Each set prints its members by their C names, so
//!   `AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE` shows as
//!   `IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE`.
//! - [`c_enum!`] for value enums (`ibv_qp_state`, `ibv_wc_status`, ...): one table of
//!   variant, C value and C name, from which `from_raw`, `raw`, `name` and `ALL` are made; a
//!   value the table does not know becomes `Unknown(v)` instead of a panic.

pub(crate) use contracts::{c_enum, flag_set};
