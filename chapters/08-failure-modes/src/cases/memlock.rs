//! Case 14, `memlock`: registering more memory than `RLIMIT_MEMLOCK` allows.
//!
//! `ibv_reg_mr` pins the pages so the NIC can reach them at any time; pinned memory is
//! counted against the process's `RLIMIT_MEMLOCK` (`ulimit -l`). Root (CAP_IPC_LOCK) is
//! exempt, which is why "it works as root" is a classic. To see the failure, this case
//! re-runs itself as a child with a hidden flag, as uid 65534 (nobody), lowers its own
//! limit to 64 KiB and registers 32 KiB, then 1 MiB; then once more as root.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::time::Duration;

use course::Outcome as Result;
use lab::*;

use crate::report::Report;
use crate::rig::ENOMEM;

/// The hidden flag that makes the program act as the child of this case.
pub const CHILD_FLAG: &str = "--memlock-child";
/// The limit the child sets for itself.
const LIMIT: u64 = 64 * 1024;
const NOBODY: u32 = 65534;

pub fn run(r: &mut Report) -> Result<()> {
    let uid = std::fs::metadata("/proc/self")?.uid();
    r.step(format!(
        "this process runs as uid {uid}{}",
        if uid == 0 { " (root)" } else { "" }
    ));
    let (nobody_args, as_root) = if uid == 0 {
        ("nobody", true)
    } else {
        r.say("not root: the child keeps this uid (the limit applies to it all the same)");
        ("self", false)
    };
    r.step(format!(
        "run this program again as a child, as {} with RLIMIT_MEMLOCK {} KiB",
        if as_root {
            "uid 65534 (nobody)"
        } else {
            "this user"
        },
        LIMIT / 1024
    ));
    let code = spawn_child(nobody_args, as_root)?;
    r.check("the child's exit status", code, 0);
    if as_root {
        r.step(format!(
            "the same child as root, with the same {} KiB limit",
            LIMIT / 1024
        ));
        let code = spawn_child("root", false)?;
        r.check("the child's exit status", code, 0);
    }
    r.fix(
        "raise the limit for RDMA users: `ulimit -l unlimited` in the shell, `memlock` in \
         /etc/security/limits.conf, LimitMEMLOCK=infinity for a systemd service, \
         --ulimit memlock=-1 for a container; or register less (reuse one large region)",
    );
    r.hardware("the same ENOMEM: pinning is the kernel's (ib_umem_get), not the device's.");
    Ok(())
}

/// Runs `<this program> --memlock-child <who>`, as uid/gid 65534 if `drop_to_nobody`, and
/// returns its exit code (killed after 60 s: every wait has a deadline).
fn spawn_child(who: &str, drop_to_nobody: bool) -> Result<i32> {
    let mut exe = std::env::current_exe()?;
    // Uid 65534 may not reach this program where it was built: a checkout under a home
    // directory of mode 0700 (Debian 13's default) gives EACCES at exec. Nobody runs a copy in
    // a directory of its own that everyone may read, removed afterwards.
    let copy = if drop_to_nobody {
        let dir = std::env::temp_dir().join(format!("ch08-memlock.{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let to = dir.join("ch08-failure-modes");
        std::fs::copy(&exe, &to)?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))?;
        exe = to;
        Some(dir)
    } else {
        None
    };
    // The child prints its own lines (indented) to our stdout; how it ended is ours to judge.
    let mut cmd = duct::cmd(&exe, [CHILD_FLAG, who]).unchecked();
    if drop_to_nobody {
        // std calls setgroups(0), setgid, setuid in the child before exec: no unsafe needed.
        cmd = cmd.dir("/").before_spawn(|c| {
            c.uid(NOBODY).gid(NOBODY);
            Ok(())
        });
    }
    let result = cmd.start().map_err(Into::into).and_then(wait_child);
    if let Some(dir) = copy {
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

fn wait_child(child: duct::Handle) -> Result<i32> {
    match course::process::wait_or_kill(&child, Duration::from_secs(60))? {
        Some(out) => Ok(out.status.code().unwrap_or(-1)),
        None => Err("the memlock child did not finish within 60 s; killed it".into()),
    }
}

/// The child: lower RLIMIT_MEMLOCK, register 32 KiB (fits) and 1 MiB (does not, unless root).
/// Its lines are indented under the parent's step. Exit status 0 = as recorded.
pub fn child(who: &str) -> bool {
    match child_body(who) {
        Ok(ok) => ok,
        Err(e) => {
            println!("  child: unexpected error: {e}");
            false
        }
    }
}

fn child_body(who: &str) -> Result<bool> {
    let case = contracts::failures::case("memlock").ok_or("memlock is not in the table")?;
    let mut r = Report::for_case(case);
    let uid = std::fs::metadata("/proc/self")?.uid();
    set_memlock_limit(Some(LIMIT), Some(LIMIT))?;
    let (soft, _) = memlock_limit()?;
    println!(
        "  child: uid {uid}, RLIMIT_MEMLOCK {} KiB",
        soft.unwrap_or(0) / 1024
    );
    let ctx = Context::open_default()?;
    let pd = ctx.alloc_pd()?;
    let small = pd.reg_mr(32 * 1024, AccessFlags::LOCAL_WRITE);
    r.check("child: ibv_reg_mr(32 KiB) succeeded", small.is_ok(), true);
    let big = pd.reg_mr(1024 * 1024, AccessFlags::LOCAL_WRITE);
    if who == "root" {
        r.check(
            "child: ibv_reg_mr(1 MiB) succeeded (CAP_IPC_LOCK ignores the limit)",
            big.is_ok(),
            true,
        );
    } else {
        r.errno("child: ibv_reg_mr(1 MiB)", &big, ENOMEM);
    }
    drop((small, big));
    Ok(r.mismatches().is_empty())
}
