//! harness: real SoftRoCE wherever the user is, and the `cargo lab` CLI.
//!
//! Most machines have no `rdma_rxe` (this one, GitHub's hosted runners, containers, WSL). The
//! harness gives every chapter and device test a real rxe device anyway:
//! - **native**: this host has an RDMA device: commands run here;
//! - **vm**: QEMU boots an installed distro kernel that ships rdma_rxe, with the host's root
//!   shared read-only over 9p (so `target/` binaries run unchanged) and a small agent inside
//!   that runs commands for the host ([`proto`], [`conn`]). Two topologies: [`Topology`].
//!
//! Layout: [`kernel`] finds the kernel and module order, [`kernel_fetch`] fetches other
//! kernels from the distribution's archive, [`initramfs`] builds the cached initramfs, [`vm`]
//! runs QEMU ([`snapshot`]: the loopback VM restored from a saved state), [`qmp`] speaks to
//! its monitor (freeze, thaw), [`state_dir`] names a lab's files, [`testbed`] hands out labs
//! (boot, attach to a daemon, native), [`testing`] is the API tests use, [`redact`] the one
//! redaction table, [`course`] reads `chapters/course.toml`, [`exercises`]
//! `chapters/exercises.toml`. The CLI lives in `src/main.rs` and [`cli`].
//!
//! Errors: one approach, `anyhow`, in the CLI, the providers and the test API (whose messages
//! are meant to be read whole: what ran, the output so far, the next command). The crates shared
//! with the guest agent ([`proto`], [`runner`]) are std-only and speak `io::Error` and protocol
//! statuses.
//!
//! This crate never links rdma-sys: it must build on a machine without RDMA packages, to run
//! `cargo lab doctor` and `cargo lab setup` there.

pub mod cli;
pub mod conn;
pub mod course;
pub mod doc_commands;
pub mod exec_files;
pub mod exercises;
pub mod host_tools;
pub mod initramfs;
pub mod kernel;
pub mod kernel_fetch;
pub mod qmp;
/// The host <-> agent wire protocol (std only; the guest agent is built with it too).
pub use contracts::proto;
pub mod redact;
/// Runs commands with the protocol's semantics: the guest agent's own runner (the `lab-agent`
/// crate), which the native provider uses on the host.
pub use lab_agent::runner;
pub mod snapshot;
pub mod state_dir;
pub mod testbed;
pub mod testing;
/// The command-line checks every chapter's e2e test repeats (usage errors, `--help`).
pub mod testing_cli;
pub mod userspace;
pub mod vm;
pub mod vm_options;
pub mod wire;

/// Where the rxe device(s) live, and the nodes of the pair: defined once, in `contracts`.
pub use contracts::{Node, Topology};
pub use state_dir::StateDir;
