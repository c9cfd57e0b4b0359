//! `tidy`: checks on the repository's own text and shape. Pure file checks, no device, no VM.
//!
//! In the spirit of rustlings' `dev check`: what a reviewer would otherwise have to remember.
//!
//! - **Text stands on its own**: no tracked file points at documents outside the repository
//!   (a path into a sibling of the checkout), at the starting documents of the project, or at
//!   numbered issues ([`reference_patterns`]). Facts belong in `docs/`, in the project's words.
//! - **The course is consistent**: every entry of `chapters/course.toml` has its directory
//!   `chapters/NN-slug`, a `Cargo.toml` whose package is the entry's `package`, a `README.md`,
//!   a `src/main.rs`, a `tests/e2e.rs` and committed snapshots; every chapter directory is in
//!   course.toml, in order.
//! - **One shape for every chapter README**: the same `##` headings, in the same order
//!   ([`README_HEADINGS`]); anything else is a `###` under one of them. A chapter with
//!   exercises (an `exercises/` directory) ends with one more, [`EXERCISES_HEADING`], and only
//!   such a chapter has it.
//! - **The top README's course table** lists every chapter.
//! - **`unsafe` stays in `lab`**: no other crate's Rust source uses it.
//!
//! Every checker takes a root directory and the files to look at, and returns its findings, so
//! `planted_violations_are_reported` runs the same checkers on a synthetic tree with one
//! violation of each kind and asserts each is reported.

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::course::Course;
use regex::Regex;

/// The `##` headings of every chapter README, in this order.
const README_HEADINGS: &[&str] = &[
    "What it teaches",
    "Run it",
    "The verbs",
    "What to look at in the output",
    "Common mistakes",
    "Try this",
    "Next",
];

/// The last `##` heading of a chapter README whose chapter has exercises (`exercises/`):
/// each of its exercises, from chapters/exercises.toml.
const EXERCISES_HEADING: &str = "Exercises";

/// Files that may still hold an out-of-repo reference, each with the reason. Keep it empty:
/// an entry is a debt, not a licence.
const PENDING_REFERENCES: &[(&str, &str)] = &[];

/// The forbidden patterns, built at run time so this file does not match itself.
fn reference_patterns() -> Vec<(Regex, &'static str)> {
    let outside = format!(r"\.\./{}", "sha\x72ed");
    let starting = format!(r"(?i)\b{}{}", "se", "ed");
    let numbered = format!(r"(?i)\b{}\s*#?[0-9]", "issue");
    vec![
        (
            Regex::new(&outside).unwrap(),
            "a path outside the repository (copy the facts into docs/)",
        ),
        (
            Regex::new(&starting).unwrap(),
            "a starting document the reader does not have (say \"a common claim\")",
        ),
        (
            Regex::new(&numbered).unwrap(),
            "an issue number (say what the change is, not where it was asked for)",
        ),
    ]
}

/// Words that put the starting-document word in its random-generator sense on a line.
fn random_sense() -> Regex {
    Regex::new(r"(?i)netem|prng|random|without_se").unwrap()
}

/// Text files among `files` (relative to `root`): skips what is not UTF-8 and the lock file.
fn text_files<'a>(root: &Path, files: &'a [PathBuf]) -> Vec<(&'a Path, String)> {
    files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "Cargo.lock"))
        .filter_map(|f| {
            let text = std::fs::read_to_string(root.join(f)).ok()?;
            Some((f.as_path(), text))
        })
        .collect()
}

/// Out-of-repo references: `path:line: what`.
fn check_references(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let patterns = reference_patterns();
    let mut found = vec![];
    for (path, text) in text_files(root, files) {
        if PENDING_REFERENCES.iter().any(|(p, _)| Path::new(p) == path) {
            continue;
        }
        // vendor/ holds another project's sources as published (its comments cite its own
        // issues); only our README there is ours.
        if path.starts_with("vendor") && path.file_name().is_none_or(|n| n != "README.md") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            for (re, why) in &patterns {
                if let Some(m) = re.find(line) {
                    // The word also names a random generator's starting value (netem's loss
                    // generator prints one): that sense is fine where the line says so.
                    if m.as_str()
                        .eq_ignore_ascii_case(&format!("{}{}", "se", "ed"))
                        && random_sense().is_match(line)
                    {
                        continue;
                    }
                    found.push(format!(
                        "{}:{}: {:?}: {why}",
                        path.display(),
                        n + 1,
                        m.as_str()
                    ));
                }
            }
        }
    }
    found
}

/// `unsafe` in Rust code outside `lab/` (comments may mention the word).
fn check_unsafe(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let re = Regex::new(r"\bunsafe\s*(\{|fn\b|impl\b|extern\b|trait\b)").unwrap();
    let mut found = vec![];
    for (path, text) in text_files(root, files) {
        // harness/tests/fixtures/ holds stand-ins for *other* projects (a crate with its own
        // minimal libibverbs FFI that the runner-hook test builds outside this workspace): not
        // this project's code.
        // vendor/rdma-sys is the FFI crate itself (rdma-sys 0.3.0, patched): the layer lab wraps.
        if path.starts_with("lab")
            || path.starts_with("harness/tests/fixtures")
            || path.starts_with("vendor")
            || path.extension().is_none_or(|e| e != "rs")
        {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if re.is_match(code) {
                found.push(format!(
                    "{}:{}: `unsafe` outside lab/ (put the FFI in lab and call its safe API)",
                    path.display(),
                    n + 1
                ));
            }
        }
    }
    found
}

/// The `##` headings of a markdown text, outside code blocks.
fn headings(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = vec![];
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if let Some(h) = line.strip_prefix("## ").filter(|_| !in_code) {
            out.push(h.trim().to_string());
        }
    }
    out
}

/// course.toml against the chapter directories, and every chapter README's headings.
fn check_course(root: &Path) -> Vec<String> {
    let mut found = vec![];
    let toml = root.join("chapters/course.toml");
    let course = match std::fs::read_to_string(&toml)
        .map_err(anyhow::Error::from)
        .and_then(|t| Course::parse(&t))
    {
        Ok(c) => c,
        Err(e) => return vec![format!("chapters/course.toml: {e:#}")],
    };
    let mut listed = vec![];
    for (i, ch) in course.chapters.iter().enumerate() {
        let want = format!("{:02}", i + 1);
        if ch.number != want {
            found.push(format!(
                "chapters/course.toml: entry {} is numbered {:?}, expected {want:?}",
                i + 1,
                ch.number
            ));
        }
        if !ch.package.starts_with(&format!("ch{}-", ch.number)) {
            found.push(format!(
                "chapters/course.toml: chapter {}: package {:?} should be ch{}-<slug>",
                ch.number, ch.package, ch.number
            ));
        }
        let dir = ch.dir(root);
        let rel = dir.strip_prefix(root).unwrap_or(&dir).to_path_buf();
        listed.push(rel.clone());
        if !dir.is_dir() {
            found.push(format!(
                "chapters/course.toml: chapter {}: no directory {}",
                ch.number,
                rel.display()
            ));
            continue;
        }
        for need in ["README.md", "src/main.rs", "tests/e2e.rs"] {
            if !dir.join(need).is_file() {
                found.push(format!("{}: missing {need}", rel.display()));
            }
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        let name_line = format!("name = \"{}\"", ch.package);
        if !manifest.lines().any(|l| l.trim() == name_line) {
            found.push(format!(
                "{}/Cargo.toml: the package is not named {:?} (course.toml says so)",
                rel.display(),
                ch.package
            ));
        }
        let snaps = std::fs::read_dir(dir.join("tests/snapshots"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.path().extension().is_some_and(|x| x == "snap"))
                    .count()
            })
            .unwrap_or(0);
        if snaps == 0 {
            found.push(format!(
                "{}: no committed snapshots in tests/snapshots",
                rel.display()
            ));
        }
        if let Ok(readme) = std::fs::read_to_string(dir.join("README.md")) {
            let got = headings(&readme);
            let mut want: Vec<&str> = README_HEADINGS.to_vec();
            let exercises = dir.join("exercises").is_dir();
            if exercises {
                want.push(EXERCISES_HEADING);
            }
            if got != want {
                found.push(format!(
                    "{}/README.md: the ## headings are {got:?}; every chapter README has \
                     exactly {README_HEADINGS:?}, in that order (other sections are ###), \
                     then {EXERCISES_HEADING:?} when the chapter has exercises/ ({})",
                    rel.display(),
                    if exercises { "it has" } else { "it has none" }
                ));
            }
        }
    }
    // Every chapter directory is in the course.
    if let Ok(entries) = std::fs::read_dir(root.join("chapters")) {
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| PathBuf::from("chapters").join(e.file_name()))
            .collect();
        dirs.sort();
        for d in dirs {
            if !listed.contains(&d) {
                found.push(format!(
                    "{}: a chapter directory that chapters/course.toml does not list",
                    d.display()
                ));
            }
        }
    }
    // The top README's course table: a row `| NN | `package` | ...` per chapter.
    let top = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    for ch in &course.chapters {
        let row = format!("| {} | `{}` |", ch.number, ch.package);
        if !top.lines().any(|l| l.starts_with(&row)) {
            found.push(format!(
                "README.md: the course table has no row for chapter {} (`{row} ...`)",
                ch.number
            ));
        }
    }
    found
}

/// Every finding of every checker.
fn tidy(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut found = check_references(root, files);
    found.extend(check_unsafe(root, files));
    found.extend(check_course(root));
    found
}

/// The files git tracks (the repository as a reader gets it).
fn tracked_files(root: &Path) -> Vec<PathBuf> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .unwrap_or_else(|e| panic!("running `git ls-files` in {}: {e}", root.display()));
    assert!(
        out.status.success(),
        "`git ls-files` failed in {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .collect()
}

#[test]
fn repository_is_tidy() {
    let root =
        harness::course::workspace_root().expect("the workspace root (chapters/course.toml)");
    let files = tracked_files(&root);
    assert!(
        files.len() > 50,
        "git ls-files listed only {} files in {}",
        files.len(),
        root.display()
    );
    let found = tidy(&root, &files);
    assert!(
        found.is_empty(),
        "tidy found {} problem(s):\n  {}",
        found.len(),
        found.join("\n  ")
    );
}

/// A minimal tidy tree: one chapter that satisfies every check.
fn write_clean_tree(root: &Path) -> Vec<PathBuf> {
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "chapters/course.toml",
        "[[chapter]]\nnumber = \"01\"\npackage = \"ch01-devices\"\ntitle = \"t\"\n\
         topology = \"loopback\"\n[chapter.single]\nargs = []\n",
    );
    write(
        "chapters/01-devices/Cargo.toml",
        "[package]\nname = \"ch01-devices\"\n",
    );
    let readme: String = README_HEADINGS
        .iter()
        .map(|h| format!("## {h}\n\ntext\n\n"))
        .collect();
    write(
        "chapters/01-devices/README.md",
        &format!("# Chapter 01\n\n{readme}"),
    );
    // The word in its random-generator sense is not a reference.
    let random = format!("// netem's loss generator takes a {}{}\n", "se", "ed");
    write(
        "chapters/01-devices/src/main.rs",
        &format!("{random}fn main() {{}}\n"),
    );
    write("chapters/01-devices/tests/e2e.rs", "\n");
    write(
        "chapters/01-devices/tests/snapshots/e2e__default.snap",
        "x\n",
    );
    write(
        "README.md",
        "| # | chapter |\n|---|---|\n| 01 | `ch01-devices` | devices |\n",
    );
    // The keyword is assembled so that this file does not use it itself.
    let code = format!("pub fn f() {{ {} {{ g() }} }}\n", concat!("un", "safe"));
    write("lab/src/lib.rs", &code);
    [
        "chapters/course.toml",
        "chapters/01-devices/Cargo.toml",
        "chapters/01-devices/README.md",
        "chapters/01-devices/src/main.rs",
        "chapters/01-devices/tests/e2e.rs",
        "README.md",
        "lab/src/lib.rs",
    ]
    .iter()
    .map(PathBuf::from)
    .collect()
}

#[test]
fn a_clean_tree_passes() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_clean_tree(dir.path());
    assert_eq!(tidy(dir.path(), &files), Vec::<String>::new());
}

#[test]
fn planted_violations_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut files = write_clean_tree(root);
    // One violation of each kind.
    let outside = format!("see ../{}/notes.md\n", "sha\x72ed");
    let starting = format!("as the {}{} says\n", "se", "ed");
    let numbered = format!("fixed for {} 12\n", "Issue");
    std::fs::write(
        root.join("chapters/01-devices/src/main.rs"),
        format!("// {outside}// {starting}// {numbered}fn main() {{}}\n"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("harness/src")).unwrap();
    std::fs::write(
        root.join("harness/src/ffi.rs"),
        format!(
            "// {kw} in a comment is fine\npub fn f() {{ {kw} {{ g() }} }}\n",
            kw = concat!("un", "safe")
        ),
    )
    .unwrap();
    files.push("harness/src/ffi.rs".into());
    // The course crate sits beside lab (course/, not lab/...): its code is checked too.
    std::fs::create_dir_all(root.join("course/src")).unwrap();
    std::fs::write(
        root.join("course/src/lib.rs"),
        format!("pub fn f() {{ {} {{ g() }} }}\n", concat!("un", "safe")),
    )
    .unwrap();
    files.push("course/src/lib.rs".into());
    std::fs::write(
        root.join("chapters/01-devices/README.md"),
        "# Chapter 01\n\n## Verbs introduced\n\n## Run it\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("chapters/02-stray")).unwrap();
    std::fs::write(root.join("README.md"), "no course table\n").unwrap();

    let found = tidy(root, &files);
    let found_outside = format!("chapters/01-devices/src/main.rs:1: \"../{}\"", "sha\x72ed");
    let found_numbered = format!("chapters/01-devices/src/main.rs:3: \"{} 1\"", "Issue");
    let found_starting = format!("chapters/01-devices/src/main.rs:2: \"{}{}\"", "se", "ed");
    let expect = [
        found_outside.as_str(),
        found_starting.as_str(),
        found_numbered.as_str(),
        "harness/src/ffi.rs:2: `unsafe` outside lab/",
        "course/src/lib.rs:1: `unsafe` outside lab/",
        "chapters/01-devices/README.md: the ## headings are [\"Verbs introduced\", \"Run it\"]",
        "chapters/02-stray: a chapter directory that chapters/course.toml does not list",
        "README.md: the course table has no row for chapter 01",
    ];
    for e in expect {
        assert!(
            found.iter().any(|f| f.starts_with(e)),
            "planted violation not reported: {e}\nfound:\n  {}",
            found.join("\n  ")
        );
    }
    assert_eq!(
        found.len(),
        expect.len(),
        "unexpected findings:\n  {}",
        found.join("\n  ")
    );

    // course.toml against the tree: a package that is not the directory's, a missing
    // snapshot directory.
    let dir2 = tempfile::tempdir().unwrap();
    let files2 = write_clean_tree(dir2.path());
    std::fs::write(
        dir2.path().join("chapters/01-devices/Cargo.toml"),
        "[package]\nname = \"ch01-other\"\n",
    )
    .unwrap();
    std::fs::remove_dir_all(dir2.path().join("chapters/01-devices/tests/snapshots")).unwrap();
    let found = tidy(dir2.path(), &files2);
    assert!(
        found.iter().any(|f| f.starts_with(
            "chapters/01-devices/Cargo.toml: the package is not named \"ch01-devices\""
        )),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("chapters/01-devices: no committed snapshots")),
        "{found:?}"
    );
}
