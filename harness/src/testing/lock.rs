//! Cross-process use of one lab: a mutex within this process and an exclusive `flock` on the
//! daemon's `<state dir>/run.lock` across processes, with its holder written in it.

use super::run_timeout;
use crate::testbed::Testbed;
use std::sync::{Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

pub(super) static LAB_LOCK: Mutex<()> = Mutex::new(());

/// Serializes use of a lab: within this process (a mutex), and across processes that share a
/// daemon's lab (`cargo lab up` / `cargo lab test`: an exclusive lock on `<state dir>/run.lock`),
/// since chapters listen on fixed ports and share the rxe device.
pub struct LabGuard {
    _process: MutexGuard<'static, ()>,
    _file: Option<std::fs::File>,
}

impl std::fmt::Debug for LabGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LabGuard")
    }
}

/// Takes the lab's lock (see [`LabGuard`]); held until the guard drops.
///
/// Across processes: waits (blocked in `flock`, woken when the holder releases it; a holder
/// that dies releases it with its last descriptor) up to 2 x `LAB_TIMEOUT_SECS` + 30 s, the
/// holder's runs having deadlines too. Past that it panics naming the holder (pid, command,
/// test) and the command that frees the lab, rather than run unlocked next to it. A lab that
/// dies while we wait ends the wait at once.
pub fn lock(lab: &Testbed) -> LabGuard {
    let process = LAB_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let file = match lab.dir() {
        Some(d) => lock_file(lab, d).unwrap_or_else(|e| panic!("{e}")),
        None => None,
    };
    LabGuard {
        _process: process,
        _file: file,
    }
}

/// `<dir>/run.lock`, locked, with who holds it written in it.
pub(super) fn lock_file(
    lab: &Testbed,
    d: &std::path::Path,
) -> Result<Option<std::fs::File>, String> {
    use std::io::Write as _;
    use std::os::unix::fs::MetadataExt as _;
    let path = crate::StateDir::at(d).run_lock();
    let limit = run_timeout() * 2 + Duration::from_secs(30);
    let t0 = Instant::now();
    let mut said = false;
    loop {
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
        };
        // No state dir any more: the lab was stopped; the run will say so.
        let Ok(f) = open() else { return Ok(None) };
        let mut f = if f.try_lock().is_ok() {
            f
        } else {
            if !said {
                said = true;
                eprintln!(
                    "harness: waiting for another process using the lab in {} (holder: {})",
                    d.display(),
                    holder(&path)
                );
            }
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                if f.lock().is_ok() {
                    // If the waiter gave up, dropping the file releases the lock at once.
                    let _ = tx.send(f);
                }
            });
            loop {
                match rx.recv_timeout(Duration::from_millis(500)) {
                    Ok(f) => break f,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        return Err(format!("harness: cannot lock {}", path.display()));
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                if let Err(why) = lab.check() {
                    return Err(format!("harness: {}", lab.dead_report(&why)));
                }
                if t0.elapsed() > limit {
                    let h = holder(&path);
                    return Err(format!(
                        "harness: the lab in {} has been busy for {} s (2 x LAB_TIMEOUT_SECS + \
                         30 s): held by {h}\nnext: if that process is stuck, end it (`kill \
                         <pid>` as named above; its lock goes with it), then run the tests again",
                        d.display(),
                        t0.elapsed().as_secs()
                    ));
                }
            }
        };
        // `cargo lab down` + `up` recreate the dir: a lock on the old, unlinked file guards
        // nothing; take the new one.
        let same = match (f.metadata(), std::fs::metadata(&path)) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
            _ => false,
        };
        if !same {
            continue;
        }
        let me = format!(
            "pid {} ({}), test {:?}, since {}",
            std::process::id(),
            std::fs::read("/proc/self/cmdline")
                .map(|c| String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .trim()
                    .to_string())
                .unwrap_or_default(),
            std::thread::current().name().unwrap_or("?"),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        );
        let _ = f.set_len(0);
        let _ = f.write_all(me.as_bytes());
        return Ok(Some(f));
    }
}

/// Who holds a run.lock, as its holder wrote it (and whether that pid still lives).
pub(super) fn holder(path: &std::path::Path) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let s = s.trim();
    if s.is_empty() {
        return "unknown (an older harness)".into();
    }
    let pid = s
        .strip_prefix("pid ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse::<u32>().ok());
    match pid {
        Some(p) if !crate::vm::pid_alive(p) => format!("{s} [gone]"),
        _ => s.to_string(),
    }
}
