//! The lab's agent: what runs commands for the host.
//!
//! The library holds the [`runner`], which both ends of the protocol use: the guest agent (this
//! package's binary, `lab-agent`) inside each VM, and the harness's native provider on the host.
//! Std only, and its one crate is the workspace's std-only `contracts`: harness/build.rs compiles
//! this package with `$RUSTC` alone into the static binary the harness embeds.

pub mod runner;
