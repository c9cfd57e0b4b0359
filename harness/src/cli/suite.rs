//! `test`: set up, start both labs (or reuse `up`'s), `cargo test --workspace`, keep the logs
//! of a failure, tear down.

use super::*;

pub(super) fn test(args: &[String]) -> Result<i32> {
    let root = root()?;
    // Ctrl-C goes to cargo and the tests too; we stay to tear the labs down.
    let interrupted = interrupted();
    let provider = testbed::chosen_provider()?;
    prepare("test")?;
    prepare_checkers()?;
    let home = std::env::temp_dir().join(format!("rxe-lab-test.{}", std::process::id()));
    let mut started: Vec<PathBuf> = vec![];
    let result = (|| -> Result<i32> {
        if provider == Provider::Vm {
            // Start both topologies at once (a running `cargo lab up` lab is reused).
            let mut pending = vec![];
            for t in Topology::all() {
                // A lab `cargo lab up` runs (in `LAB_STATE_DIR` when set, else this
                // workspace's) is reused: the tests find it through a link in `home`.
                let up = testbed::daemon_home(&root).join(t.name());
                // With --kernel or --userspace, the suite boots its own labs.
                if crate::kernel::child_env().is_none()
                    && crate::userspace::child_env().is_none()
                    && daemon_alive(&up)
                {
                    eprintln!("using the running {} lab (`cargo lab up`)", t.name());
                    std::fs::create_dir_all(&home)?;
                    std::os::unix::fs::symlink(&up, home.join(t.name())).with_context(|| {
                        format!("linking {} into {}", up.display(), home.display())
                    })?;
                    continue;
                }
                let dir = home.join(t.name());
                let child = start_daemon(t, &dir)?;
                started.push(dir.clone());
                pending.push((t, dir, child));
            }
            for (t, dir, child) in pending {
                wait_daemon(t, &dir, child, true)?;
                if interrupted.load(Ordering::SeqCst) {
                    bail!("interrupted");
                }
            }
        }
        if provider == Provider::Native {
            // One device for the whole run (test binaries would otherwise each make their own).
            testbed::ensure_native_device()?;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        let cargo_args = cargo_test_args(args);
        cmd.current_dir(&root).args(&cargo_args);
        if provider == Provider::Vm {
            cmd.env("LAB_STATE_DIR", &home);
        }
        for (k, v) in [crate::kernel::child_env(), crate::userspace::child_env()]
            .into_iter()
            .flatten()
        {
            cmd.env(k, v);
        }
        eprintln!("running: cargo {}", cargo_args.join(" "));
        let st = cmd.status().context("running cargo test")?;
        Ok(st.code().unwrap_or(130))
    })();
    // Logs are kept for a failure, not for a run the user stopped (Ctrl-C).
    let failed = !matches!(result, Ok(0)) && !interrupted.load(Ordering::SeqCst);
    if failed && provider == Provider::Vm {
        // Keep the guest consoles, QEMU's and the daemons' logs before the daemons remove their
        // dirs: under /tmp/rxe-lab-logs.<pid>/, which CI's failure upload
        // (`/tmp/rxe-lab*/**/*.log`) collects.
        let keep = failed_logs_dir();
        let mut dirs = started.clone();
        for t in Topology::all() {
            let up = testbed::daemon_home(&root).join(t.name());
            if !started.contains(&up) && up.exists() {
                dirs.push(up);
            }
        }
        let n: usize = dirs.iter().map(|d| keep_logs(d, &keep)).sum();
        if n > 0 {
            eprintln!(
                "cargo lab test: failed; the labs' logs (console-<node>.log: the guest console) \
                 are kept in {}",
                keep.display()
            );
        }
    }
    for dir in &started {
        stop_daemon(dir);
    }
    let _ = std::fs::remove_dir_all(&home);
    if interrupted.load(Ordering::SeqCst) {
        eprintln!("cargo lab test: interrupted; labs torn down");
        return Ok(130);
    }
    result
}

/// `cargo test` and its arguments: the whole workspace, unless the arguments before `--`
/// select packages themselves (`-p X`, `--package X`, `--workspace`).
pub(super) fn cargo_test_args(args: &[String]) -> Vec<String> {
    let own = args.iter().position(|a| a == "--").unwrap_or(args.len());
    // `--exclude` works only with `--workspace`, which is then added.
    let selects = args[..own].iter().any(|a| {
        a == "--workspace" || a == "--package" || a.starts_with("-p") || a.starts_with("--package=")
    });
    let mut out = vec!["test".to_string()];
    if !selects {
        out.push("--workspace".into());
    }
    out.extend(args.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::cargo_test_args;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_package_selection_passes_through_and_otherwise_the_workspace_is_tested() {
        assert_eq!(cargo_test_args(&[]), args(&["test", "--workspace"]));
        assert_eq!(
            cargo_test_args(&args(&["-p", "lab"])),
            args(&["test", "-p", "lab"])
        );
        assert_eq!(
            cargo_test_args(&args(&["--package=lab", "--test", "device"])),
            args(&["test", "--package=lab", "--test", "device"])
        );
        // `--exclude` needs `--workspace`; a `-p` after `--` is the test binary's.
        assert_eq!(
            cargo_test_args(&args(&["--exclude", "book"])),
            args(&["test", "--workspace", "--exclude", "book"])
        );
        assert_eq!(
            cargo_test_args(&args(&["--", "-p"])),
            args(&["test", "--workspace", "--", "-p"])
        );
    }
}
