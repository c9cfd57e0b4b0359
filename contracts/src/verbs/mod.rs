//! The verbs' pure tables: what the C API's enums and flags mean, with no call into
//! libibverbs, so that the book and the harness can read them without linking it. `lab`
//! re-exports each one where a learner looks for it (`lab::QpState`, `lab::AccessFlags`,
//! `lab::WcStatus`, `lab::Errno`) and checks every C value against the rdma-sys bindings.
//!
//! | module | what |
//! |---|---|
//! | [`qp_state`] | `enum ibv_qp_state`, `enum ibv_qp_attr_mask`, the legal transitions and the check that explains an EINVAL |
//! | [`access`] | `enum ibv_access_flags` |
//! | [`wc`] | `enum ibv_wc_status` with what causes each on rxe, `enum ibv_wc_opcode`, `enum ibv_wc_flags` |
//! | [`errno`] | errno names and numbers (`EINVAL (22)`) |
//! | [`tree`] | the object tree: which object is created from which, and the teardown order |

pub mod access;
pub mod errno;
pub mod qp_state;
pub mod tree;
pub mod wc;

pub use access::AccessFlags;
pub use errno::{Errno, errno_name};
pub use qp_state::{
    MaskProblem, QpAttrMask, QpState, QpType, Transition, check_transition, check_transition_for,
    transition, transition_for,
};
pub use wc::{WcFlags, WcOpcode, WcStatus};
