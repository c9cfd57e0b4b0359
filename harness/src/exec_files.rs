//! When a guest must drop its caches before a command: a fingerprint of the host files the
//! command may execute.
//!
//! A guest reads the host's files over 9p under an overlay that keeps dentries and pages. A
//! file rebuilt on the host while the guest holds pages of its old version would run as a mix
//! of old and new pages, so the agent can drop every cache before a command (`drop_caches`
//! 3, about 0.2 s under TCG, and the command's files then page in cold). The host skips it when
//! the command's [`fingerprint`] is the one the last drop was made for (the same files, none
//! changed); any other command asks again. The fingerprint hashes the identity (device,
//! inode, size, mtime, ctime) of:
//! - every path in the command line, the words of a `sh -c` string included, resolved against
//!   the command's working directory, and `argv[0]` found on `PATH`;
//! - the working directory;
//! - the cargo target directories next to any of those (`target/{debug,release}` and their
//!   `deps` and `examples`): cargo re-links a binary by replacing a directory entry;
//! - the system's program and library directories (a package upgrade replaces entries there).
//!
//! A file replaced by another changes its directory's mtime and its own inode; a file
//! rewritten in place changes its own mtime and ctime. `LAB_DROP_CACHES=always` (on the host,
//! or passed to the command) asks for a drop before every command.

use std::collections::BTreeSet;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// Where programs and their libraries come from when a command names none by path.
const SYSTEM_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/local/bin",
    "/usr/local/lib",
];

/// The `PATH` a command gets when its environment sets none (the agent's).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The fingerprint of what `argv` may execute, run in `cwd` with `env` added.
pub fn fingerprint(argv: &[String], cwd: &str, env: &[(String, String)]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in watched(argv, cwd, env) {
        p.hash(&mut h);
        match std::fs::metadata(&p) {
            Ok(m) => (
                m.dev(),
                m.ino(),
                m.size(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
                .hash(&mut h),
            Err(_) => "missing".hash(&mut h),
        }
    }
    h.finish()
}

/// Whether `LAB_DROP_CACHES=always` is set here or in the command's environment.
pub fn always(env: &[(String, String)]) -> bool {
    let is_always = |v: &str| v == "always";
    env.iter()
        .any(|(k, v)| k == "LAB_DROP_CACHES" && is_always(v))
        || std::env::var("LAB_DROP_CACHES").is_ok_and(|v| is_always(&v))
}

/// The paths [`fingerprint`] looks at, sorted.
fn watched(argv: &[String], cwd: &str, env: &[(String, String)]) -> BTreeSet<PathBuf> {
    let base = if cwd.is_empty() {
        Path::new("/")
    } else {
        Path::new(cwd)
    };
    let mut files: BTreeSet<PathBuf> = argv
        .iter()
        .flat_map(|a| words(a))
        .filter(|w| w.contains('/'))
        .map(|w| base.join(w))
        .collect();
    if let Some(cmd) = argv.first().filter(|c| !c.contains('/') && !c.is_empty()) {
        let path = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
        if let Some(found) = std::env::split_paths(path)
            .map(|d| d.join(cmd))
            .find(|f| f.is_file())
        {
            files.insert(found);
        }
    }
    files.insert(base.to_path_buf());
    let mut out = files.clone();
    for f in &files {
        // A file's directory: a replaced entry shows there.
        if let Some(d) = f.parent() {
            out.insert(d.to_path_buf());
        }
        for t in f
            .ancestors()
            .map(|a| a.join("target"))
            .filter(|t| t.is_dir())
        {
            for profile in ["debug", "release"] {
                for sub in ["", "deps", "examples"] {
                    out.insert(t.join(profile).join(sub));
                }
            }
        }
    }
    let target_dir = env
        .iter()
        .rev()
        .find(|(k, _)| k == "CARGO_TARGET_DIR")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("CARGO_TARGET_DIR").ok());
    if let Some(t) = target_dir {
        for profile in ["debug", "release"] {
            for sub in ["", "deps", "examples"] {
                out.insert(base.join(&t).join(profile).join(sub));
            }
        }
    }
    out.extend(SYSTEM_DIRS.iter().map(PathBuf::from));
    out
}

/// The words of one argument, split at white space and at the shell's operators and quotes
/// (so `sh -c "./a.out && echo ok"` yields `./a.out`).
fn words(arg: &str) -> impl Iterator<Item = &str> {
    arg.split(|c: char| c.is_whitespace() || ";&|()<>'\"`=$".contains(c))
        .filter(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn words_of_a_shell_string() {
        let w: Vec<&str> = words("./a.out && echo 'x' >/tmp/o; FOO=bar/b ls").collect();
        assert_eq!(w, ["./a.out", "echo", "x", "/tmp/o", "FOO", "bar/b", "ls"]);
    }

    #[test]
    fn watches_paths_their_dirs_targets_and_the_system() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("target/debug")).unwrap();
        let cwd = dir.path().to_str().unwrap();
        let w = watched(&s(&["sh", "-c", "target/debug/x && echo ok"]), cwd, &[]);
        for p in [
            dir.path().join("target/debug/x"),
            dir.path().join("target/debug"),
            dir.path().join("target/debug/deps"),
            dir.path().join("target/release/examples"),
            dir.path().to_path_buf(),
            PathBuf::from("/usr/bin"),
        ] {
            assert!(w.contains(&p), "{p:?} not in {w:?}");
        }
        // `sh` itself, found on PATH.
        assert!(w.iter().any(|p| p.ends_with("bin/sh")), "{w:?}");
    }

    #[test]
    fn changes_when_a_program_is_replaced_or_rewritten_and_not_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let debug = dir.path().join("target/debug");
        std::fs::create_dir_all(debug.join("deps")).unwrap();
        let cwd = dir.path().to_str().unwrap();
        let argv = s(&["target/debug/prog"]);
        std::fs::write(debug.join("deps/prog-1"), "one").unwrap();
        std::fs::hard_link(debug.join("deps/prog-1"), debug.join("prog")).unwrap();
        let f0 = fingerprint(&argv, cwd, &[]);
        assert_eq!(f0, fingerprint(&argv, cwd, &[]), "nothing changed");

        // cargo's re-link: the entry now names another artifact (an older file, too).
        std::fs::write(debug.join("deps/prog-2"), "two").unwrap();
        std::fs::remove_file(debug.join("prog")).unwrap();
        std::fs::hard_link(debug.join("deps/prog-2"), debug.join("prog")).unwrap();
        let f1 = fingerprint(&argv, cwd, &[]);
        assert_ne!(f0, f1, "a re-linked program");

        // A program run through a shell, rewritten in place (same inode, same size).
        let f2 = fingerprint(&s(&["sh", "-c", "./target/debug/prog"]), cwd, &[]);
        // Past the file system's timestamp granularity (the kernel's coarse clock, a tick).
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(debug.join("prog"), "TWO").unwrap();
        assert_ne!(
            f2,
            fingerprint(&s(&["sh", "-c", "./target/debug/prog"]), cwd, &[]),
            "rewritten in place"
        );
    }

    #[test]
    fn always_from_the_command_env() {
        assert!(always(&[("LAB_DROP_CACHES".into(), "always".into())]));
    }
}
