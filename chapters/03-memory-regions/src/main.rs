//! # Chapter 03: memory regions, access flags, keys and the memlock limit
//!
//! The device can only touch memory that was *registered* with it. `ibv_reg_mr` pins the pages
//! (so the kernel cannot move or swap them while the NIC may use them), records what the NIC
//! may do with them (the access flags), and returns two keys:
//!
//! * the **lkey**, which *this* process puts in its scatter/gather entries (the source of a
//!   SEND or WRITE, the target of a RECV or READ);
//! * the **rkey**, which this process hands to a *peer*, together with the address, so the
//!   peer's RDMA WRITE, READ or atomic can name this memory.
//!
//! This chapter registers buffers with different access flags and prints their keys. It uses
//! both keys in an RDMA READ, then shows the flags being enforced: a WRITE into a region that
//! allows only READ fails. It shows the two combinations `ibv_reg_mr` refuses with `EINVAL`,
//! and the `RLIMIT_MEMLOCK` limit that makes registration fail with `ENOMEM` for ordinary
//! users. That last part runs in a child process (this same binary, re-run with a hidden flag)
//! that lowers its limit to 64 KiB and runs as the unprivileged user 65534 (`nobody`), because
//! root, with `CAP_IPC_LOCK`, is exempt from the limit.
//!
//! Verbs introduced: `ibv_reg_mr` ([`lab::ProtectionDomain::reg_mr`]) and `ibv_dereg_mr`
//! ([`lab::MemoryRegion::dereg`]); `getrlimit`/`setrlimit(RLIMIT_MEMLOCK)`
//! ([`lab::memlock_limit`], [`lab::set_memlock_limit`]). Also used, ahead of their chapters:
//! CQs (04), QPs (05), RDMA READ and WRITE (07).
//!
//! Run it: `cargo lab run 03`. It takes no arguments (`--memlock-child` is the child's role,
//! used by the chapter itself).

use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;

// `say!` prints a line wrapped at 96 columns (continuation lines indented two more spaces).
// Two QPs in RTS, and waiting for rxe to move a QP to ERR: the plumbing of the course crate.
// `expect(ok, || message)` fails the chapter (exit status 1) when an observation is not the
// expected one.
// Every step returns `Result` (the course's `Outcome`): a value, or a `Failure` whose message
// `main` prints after `ch03-memory-regions: error: ` (lab's errors name the verb, the errno and,
// for classic mistakes, a hint).
use course::Outcome as Result;
use course::kernel::{KernelVersion, RxeChange};
use course::say;
use course::show::{self, Align, Table};
use course::{connected_pair, expect, wait_for_err};
use lab::{AccessFlags, Context, MemoryRegion, SendWr, WcStatus};

/// Every wait ends by this deadline (generous: the lab may run under TCG).
const DEADLINE: Duration = Duration::from_secs(10);
/// How long the memlock child may take, start to finish.
const CHILD_DEADLINE: Duration = Duration::from_secs(60);
/// The memlock limit the child sets for itself.
const CHILD_MEMLOCK: u64 = 64 * 1024;
/// What the child registers: too big for the limit, and small enough to fit.
const BIG: usize = 1024 * 1024;
const SMALL: usize = 32 * 1024;
/// The unprivileged user and group the child runs as when the chapter runs as root.
const NOBODY: u32 = 65534;
/// `CAP_IPC_LOCK`'s bit in /proc/self/status's CapEff (linux/capability.h).
const CAP_IPC_LOCK: u32 = 14;

/// The command line: no options; the device is $LAB_DEVICE, else the first one.
#[derive(Parser, Debug)]
#[command(
    name = "ch03-memory-regions",
    about = "Memory regions: access flags, lkey and rkey, the memlock limit (no options; the \
             device is $LAB_DEVICE, else the first one)"
)]
struct Args {
    /// The hidden role: the child process of step 5 (the chapter starts it itself).
    #[arg(long, hide = true)]
    memlock_child: bool,
}

fn main() -> ExitCode {
    // clap: `--help`, and a clear message with exit status 2 for any other argument.
    let args = Args::parse();
    let result = if args.memlock_child {
        memlock_child()
    } else {
        run()
    };
    course::exit_code_of("ch03-memory-regions", result)
}

/// Prints a failed verb's errno and lab's hint, and checks the errno is the expected one.
fn report_refusal(e: &lab::Error, expected: i32) -> Result<()> {
    let errno = e.errno();
    say!(
        "    refused: {}",
        errno.map_or_else(|| e.report().to_string(), |n| n.to_string())
    );
    for h in e.hints() {
        say!("    lab's hint: {h}");
    }
    expect(errno.map(|n| n.0) == Some(expected), || {
        format!("expected {}, got: {}", show::errno(expected), e.report())
    })
}

fn run() -> Result<()> {
    println!("ch03-memory-regions: registering memory, access flags, lkey and rkey, memlock");
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 1: open the device and allocate a protection domain (chapters 01, 02)");
    let ctx = Context::open_default()?;
    let pd = ctx.alloc_pd()?;
    say!(
        "  opened {}; every region below is registered in this PD",
        ctx.name()
    );
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 2: register 4 KiB buffers with different access flags (ibv_reg_mr)");
    // Local READ is always allowed (a SEND or WRITE source only needs to be read by the NIC).
    // LOCAL_WRITE lets the NIC write it for local work (a RECV landing, READ results). The
    // REMOTE_* flags let a peer's one-sided operations in.
    let variants: [(&str, AccessFlags); 5] = [
        ("send buffer", AccessFlags::empty()),
        ("recv buffer", AccessFlags::LOCAL_WRITE),
        ("read-only export", AccessFlags::REMOTE_READ),
        (
            "write target",
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ),
        ("everything", AccessFlags::ALL_REMOTE),
    ];
    let mut mrs: Vec<(&str, MemoryRegion)> = Vec::new();
    let mut t = Table::new([
        ("role", Align::Left),
        ("access flags (IBV_ACCESS_...)", Align::Left),
        ("lkey", Align::Left),
        ("rkey", Align::Left),
    ])
    .indent(2);
    for (role, access) in variants {
        let mr = pd.reg_mr(4096, access)?;
        t.row([
            role.to_string(),
            short_flags(access),
            show::lkey(mr.lkey()).to_string(),
            rkey_cell(&mr),
        ]);
        mrs.push((role, mr));
    }
    print!("{t}");
    // Which regions carry an rkey depends on the kernel rxe is part of (course::kernel): from
    // Linux 6.5 on every MR gets one, equal to its lkey; before, only MRs with a REMOTE_* flag.
    // Either way the access flags decide what a peer may do through it.
    let change = RxeChange::RkeyIsLkey;
    let kernel = KernelVersion::running().map_err(|e| format!("which kernel rxe runs in: {e}"))?;
    if change.holds_on(kernel) {
        say!(
            "  every region has an lkey and an rkey, the same number ({}: {}); without a \
             REMOTE_* flag the rkey is there but useless: the peer's device checks the region's \
             flags and refuses a READ, WRITE or atomic through it",
            change.record(kernel),
            change.commit()
        );
        let same = mrs.iter().all(|(_, mr)| mr.rkey() == mr.lkey());
        say!(
            "  rkey equals lkey for every region: {}",
            if same { "yes" } else { "NO" }
        );
        expect(same, || {
            "rxe from Linux 6.5 on gives every MR rkey == lkey".into()
        })?;
    } else {
        say!(
            "  every region has an lkey; rxe issues an rkey only when a REMOTE_* flag is set \
             (\"none\": the rkey is 0, and no peer can name this memory at all; {})",
            change.record(kernel)
        );
    }
    let no_remote: Vec<&str> = mrs
        .iter()
        .filter(|(_, mr)| {
            let a = mr.access();
            !(a.contains(AccessFlags::REMOTE_READ)
                || a.contains(AccessFlags::REMOTE_WRITE)
                || a.contains(AccessFlags::REMOTE_ATOMIC))
        })
        .map(|(r, _)| *r)
        .collect();
    if change.holds_on(kernel) {
        say!(
            "  regions a peer cannot reach (no REMOTE_* flag): {}",
            no_remote.join(", ")
        );
    } else {
        let no_rkey: Vec<&str> = mrs
            .iter()
            .filter(|(_, mr)| mr.rkey() == 0)
            .map(|(r, _)| *r)
            .collect();
        say!("  regions without an rkey: {}", no_rkey.join(", "));
        expect(no_rkey == no_remote, || {
            format!("regions without an rkey {no_rkey:?}, without a REMOTE_* flag {no_remote:?}")
        })?;
    }
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 3: lkey vs rkey: an RDMA READ uses both, and the flags are enforced");
    // Two QPs of this PD connected to each other play "us" (the requester) and "the peer"
    // (the responder). The peer's memory is the read-only export; ours is the recv buffer.
    let export = &mrs[2].1;
    let local = &mrs[1].1;
    let text = b"exported, read-only";
    export.write_from(0, text)?;
    let cq = ctx.create_cq(16, None)?;
    let (requester, responder) = connected_pair(&pd, &cq, &cq, ctx.roce_v2_ipv4_gid(1)?.gid)?;
    let dst = local.sge(0..text.len());
    say!(
        "  READ: our SGE is {} {} (the lkey: our memory, our key); the remote side is {} {} \
         (the rkey: the peer's memory, the key the peer gave us)",
        show::addr(dst.addr()),
        show::lkey(dst.lkey()),
        show::addr(export.addr()),
        show::rkey(export.rkey())
    );
    requester.post_send_one(SendWr::read(
        1,
        std::slice::from_ref(&dst),
        export.addr(),
        export.rkey(),
    ))?;
    let wc = cq.wait_one(DEADLINE)?;
    let got = &local.as_slice()[..text.len()];
    say!(
        "    {}, {} bytes: {:?}",
        wc.status,
        wc.byte_len,
        String::from_utf8_lossy(got)
    );
    expect(wc.is_success() && got == text, || {
        format!(
            "the READ should succeed and copy the text, got {}",
            wc.status
        )
    })?;
    // The same region, the same rkey, but a WRITE: the export allows REMOTE_READ only.
    let src = mrs[0].1.sge(0..8);
    requester.post_send_one(SendWr::write(
        2,
        std::slice::from_ref(&src),
        export.addr(),
        export.rkey(),
    ))?;
    let wc = cq.wait_one(DEADLINE)?;
    say!(
        "  WRITE to the same {} (REMOTE_READ only): {} \"{}\"",
        show::rkey(export.rkey()),
        wc.status,
        wc.status.str()
    );
    expect(wc.status == WcStatus::RemAccessErr, || {
        format!("expected {}, got {}", WcStatus::RemAccessErr, wc.status)
    })?;
    let intact = &export.as_slice()[..text.len()] == text;
    say!(
        "    the peer's device checked the access flags behind the rkey and refused; the export \
         is intact: {}",
        if intact { "yes" } else { "NO" },
    );
    say!(
        "    requester QP: {}, responder QP: {} (a remote access error ends the connection; \
         chapter 08 has more of these)",
        wait_for_err(&requester, DEADLINE)?.name(),
        wait_for_err(&responder, DEADLINE)?.name()
    );
    expect(intact, || "the read-only export was written".into())?;
    requester.destroy()?;
    responder.destroy()?;
    cq.destroy()?;
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 4: combinations ibv_reg_mr refuses");
    // A peer's WRITE or atomic makes the NIC write this memory, and the verbs spec requires
    // local write permission for that: REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is
    // invalid. REMOTE_READ alone is fine (step 2 registered one): the NIC only reads.
    for access in [AccessFlags::REMOTE_WRITE, AccessFlags::REMOTE_ATOMIC] {
        say!("  {access} (without IBV_ACCESS_LOCAL_WRITE):");
        match pd.reg_mr(4096, access) {
            Ok(_) => return Err(format!("ibv_reg_mr accepted {access}").into()),
            Err(e) => report_refusal(&e, 22)?,
        }
    }
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 5: the memlock limit (RLIMIT_MEMLOCK, `ulimit -l`), in a child process");
    // Registering pins pages, and pinned memory is charged to RLIMIT_MEMLOCK, unless the
    // process has CAP_IPC_LOCK, as root does. Debian's default limit is 8 MiB: a program that
    // registers a big pool fails with ENOMEM for an ordinary user while it works for root,
    // one of the most common "works on my machine" RDMA problems. The child lowers its own
    // limit (anyone may lower it) and runs unprivileged, so the limit applies.
    // The contrast first: the same registration in this process.
    let big = pd.reg_mr(BIG, AccessFlags::LOCAL_WRITE)?;
    say!(
        "  in this process (default limit, or root): ibv_reg_mr of {} KiB: ok",
        BIG / 1024
    );
    big.dereg()?;
    let as_root = effective_uid()? == 0;
    say!(
        "  running the child: this binary with --memlock-child{}",
        if as_root {
            ", as uid/gid 65534 (nobody): root has CAP_IPC_LOCK and ignores the limit"
        } else {
            " (we are not root: it runs as our own user)"
        }
    );
    run_child(as_root)?;
    println!();

    // -----------------------------------------------------------------------------------------
    println!("step 6: deregister (ibv_dereg_mr)");
    // dereg() returns the verb's result; Drop would do the same and report a failure on
    // stderr. After deregistration the keys are dead: a peer still using the rkey gets
    // IBV_WC_REM_ACCESS_ERR (chapter 08), and the memory is unpinned and freed.
    for (role, mr) in mrs {
        mr.dereg()?;
        say!("  {role}: ok");
    }
    drop(pd);
    ctx.close()?;
    println!();
    println!("done: next, chapter 04 completes work through completion queues");
    Ok(())
}

/// Access flags without the `IBV_ACCESS_` prefix, to keep the table narrow.
fn short_flags(a: AccessFlags) -> String {
    if a.is_empty() {
        "0 (local read only)".to_string()
    } else {
        a.to_string().replace("IBV_ACCESS_", "")
    }
}

/// The rkey column: the labelled key, or "none" when rxe issued none (0).
fn rkey_cell(mr: &MemoryRegion) -> String {
    if mr.rkey() == 0 {
        "none".to_string()
    } else {
        show::rkey(mr.rkey()).to_string()
    }
}

/// The child's role (`--memlock-child`): lower RLIMIT_MEMLOCK, then register too much and a
/// little. Its output goes to the parent, which prints it indented.
fn memlock_child() -> Result<()> {
    // Who are we? The parent started us as nobody if it was root; without CAP_IPC_LOCK the
    // kernel charges pinned pages to our limit.
    let has_ipc_lock = effective_caps()? & (1 << CAP_IPC_LOCK) != 0;
    say!(
        "child: CAP_IPC_LOCK: {}",
        if has_ipc_lock { "yes" } else { "no" }
    );
    expect(!has_ipc_lock, || {
        "the child still has CAP_IPC_LOCK, so the memlock limit would not apply".into()
    })?;
    lab::set_memlock_limit(Some(CHILD_MEMLOCK), Some(CHILD_MEMLOCK))?;
    let (soft, hard) = lab::memlock_limit()?;
    let kib = |v: Option<u64>| v.map_or("unlimited".to_string(), |b| format!("{} KiB", b / 1024));
    say!(
        "child: setrlimit(RLIMIT_MEMLOCK): soft {}, hard {}",
        kib(soft),
        kib(hard)
    );
    let ctx = Context::open_default()?;
    let pd = ctx.alloc_pd()?;
    say!("child: ibv_reg_mr of {} KiB:", BIG / 1024);
    match pd.reg_mr(BIG, AccessFlags::LOCAL_WRITE) {
        Ok(_) => return Err("a 1 MiB registration fit under a 64 KiB memlock limit".into()),
        Err(e) => report_refusal(&e, 12)?,
    }
    let small = pd.reg_mr(SMALL, AccessFlags::LOCAL_WRITE)?;
    say!(
        "child: ibv_reg_mr of {} KiB: ok ({}): it fits under the limit",
        SMALL / 1024,
        show::lkey(small.lkey())
    );
    small.dereg()?;
    Ok(())
}

/// Runs this binary with `--memlock-child` (as nobody when `drop_to_nobody`), waits for it with
/// a deadline, prints its output indented, and fails unless it exited 0.
fn run_child(drop_to_nobody: bool) -> Result<()> {
    let exe = std::env::current_exe()?;
    // The child's stdout and stderr are collected while it runs (duct's reader threads), so
    // it never blocks on a full pipe; its exit status is ours to judge (`unchecked`).
    let child_of = |program: &std::path::Path| {
        let cmd = duct::cmd(program, ["--memlock-child"])
            .dir("/")
            .stdin_null()
            .stdout_capture()
            .stderr_capture()
            .unchecked();
        if !drop_to_nobody {
            return cmd;
        }
        // std's spawn calls setgroups([]), setgid, setuid in the child before exec: no unsafe
        // code of ours is involved, and the order (group first) is the one that works.
        cmd.before_spawn(|c| {
            use std::os::unix::process::CommandExt;
            c.uid(NOBODY).gid(NOBODY);
            Ok(())
        })
    };
    let child = match child_of(&exe).start() {
        Ok(c) => c,
        // As nobody, every directory above the binary must be searchable by others; a checkout
        // under a private home directory is not. Run a copy from the temporary directory then.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && drop_to_nobody => {
            let copy =
                std::env::temp_dir().join(format!("ch03-memlock-child.{}", std::process::id()));
            std::fs::copy(&exe, &copy)?;
            std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            let spawned = child_of(&copy).start();
            // Once running, the copy is no longer needed on disk.
            let _ = std::fs::remove_file(&copy);
            spawned.map_err(|e2| {
                format!(
                    "cannot run {} as nobody ({e}), nor a copy of it ({e2})",
                    exe.display()
                )
            })?
        }
        Err(e) => return Err(format!("cannot run {} as the child: {e}", exe.display()).into()),
    };
    let Some(output) = course::process::wait_or_kill(&child, CHILD_DEADLINE)? else {
        return Err(format!(
            "the memlock child did not finish within {} s: killed it",
            CHILD_DEADLINE.as_secs()
        )
        .into());
    };
    let status = output.status;
    let out = String::from_utf8_lossy(&output.stdout);
    let err = String::from_utf8_lossy(&output.stderr);
    for line in out.lines() {
        println!("  | {line}");
    }
    for line in err.lines() {
        println!("  | stderr: {line}");
    }
    expect(status.success(), || {
        format!("the memlock child failed ({status})")
    })?;
    say!("  the child exited 0: 1 MiB was refused with ENOMEM, 32 KiB fit");
    say!(
        "  fix it for real programs by raising the limit (`ulimit -l unlimited`, `memlock` in \
         /etc/security/limits.conf, LimitMEMLOCK= in a systemd unit), not by running as root"
    );
    Ok(())
}

/// The effective uid, from /proc/self/status (`Uid: real effective saved fs`).
fn effective_uid() -> Result<u32> {
    status_field("Uid:")?
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "cannot parse Uid: in /proc/self/status".into())
}

/// The effective capability set, from /proc/self/status (`CapEff: 000001ffffffffff`).
fn effective_caps() -> Result<u64> {
    let v = status_field("CapEff:")?;
    u64::from_str_radix(v.trim(), 16).map_err(|e| format!("CapEff: {e}").into())
}

fn status_field(name: &str) -> Result<String> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix(name).map(str::to_string))
        .ok_or_else(|| format!("no {name} in /proc/self/status").into())
}
