//! How the lab's VMs are run ([`VmOptions`]), from the environment: memory, vCPUs (the
//! loopback VM's, and each pair node's: `LAB_PAIR_SMP`, `cargo lab up -t pair --cpus N`), the
//! accelerator, the boot deadline, the wire's pcap. Re-exported by [`crate::vm`].

use anyhow::{Context as _, Result, bail};
use std::path::PathBuf;
use std::time::Duration;

/// How the VMs are run. `from_env` reads LAB_VM_MEM_MB, LAB_VM_SMP, LAB_PAIR_SMP, LAB_ACCEL,
/// LAB_BOOT_TIMEOUT_SECS, LAB_PCAP.
#[derive(Debug, Clone)]
pub struct VmOptions {
    /// Memory per VM (MiB). Default 1024.
    pub mem_mb: u32,
    /// vCPUs of the loopback VM. Default 2.
    pub loopback_smp: u32,
    /// vCPUs of each pair VM (`LAB_PAIR_SMP`, `cargo lab up --cpus N`). Default 1.
    pub pair_smp: u32,
    /// `None`: probe KVM, fall back to TCG.
    pub accel: Option<Accel>,
    pub boot_timeout: Duration,
    /// Pair only: write a pcap of the wire here.
    pub pcap: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The most vCPUs a pair node may have (QEMU's `pc` machine takes more; a TCG guest with more
/// vCPUs than the host has cores only queues them behind each other).
pub const MAX_PAIR_SMP: u32 = 16;
/// The variable that sets the pair's vCPUs per node (`cargo lab up --cpus N` sets it too).
pub const PAIR_SMP_VAR: &str = "LAB_PAIR_SMP";

/// A vCPU count for each pair node, as `--cpus` or `LAB_PAIR_SMP` spells it: 1 to
/// [`MAX_PAIR_SMP`]; anything else is an error that says what is accepted.
pub fn parse_pair_smp(text: &str) -> Result<u32> {
    match text.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_PAIR_SMP).contains(&n) => Ok(n),
        _ => bail!(
            "{text:?} is not a vCPU count for the pair's nodes: give a whole number from 1 to \
             {MAX_PAIR_SMP} (`cargo lab up -t pair --cpus N`, or {PAIR_SMP_VAR}=N)"
        ),
    }
}

impl VmOptions {
    /// The options from the environment; an invalid `LAB_PAIR_SMP` is an error.
    pub fn from_env() -> Result<VmOptions> {
        let pair_smp = match std::env::var(PAIR_SMP_VAR) {
            Ok(v) => parse_pair_smp(&v).with_context(|| format!("{PAIR_SMP_VAR}={v}"))?,
            Err(_) => 1,
        };
        Ok(VmOptions {
            mem_mb: env_num("LAB_VM_MEM_MB").unwrap_or(1024) as u32,
            loopback_smp: env_num("LAB_VM_SMP").unwrap_or(2) as u32,
            pair_smp,
            accel: match std::env::var("LAB_ACCEL").as_deref() {
                Ok("kvm") => Some(Accel::Kvm),
                Ok("tcg") => Some(Accel::Tcg),
                _ => None,
            },
            boot_timeout: Duration::from_secs(env_num("LAB_BOOT_TIMEOUT_SECS").unwrap_or(180)),
            pcap: std::env::var_os("LAB_PCAP").map(PathBuf::from),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_vcpu_counts_are_1_to_16() {
        assert_eq!(parse_pair_smp("1").unwrap(), 1);
        assert_eq!(parse_pair_smp(" 2\n").unwrap(), 2);
        assert_eq!(parse_pair_smp("16").unwrap(), MAX_PAIR_SMP);
        for bad in ["0", "17", "-1", "two", "", "2.5"] {
            let e = format!("{:#}", parse_pair_smp(bad).unwrap_err());
            assert!(e.contains("a whole number from 1 to 16"), "{bad:?}: {e}");
        }
    }
}
