//! The commands the repository's docs show, collected so a test can run every one of them
//! (`harness/tests/doc_commands.rs`), in the manner of trycmd.
//!
//! Where commands are found:
//! - in Markdown files, every line of a fenced code block that starts with "cargo lab " (or
//!   "$ cargo lab "), and every inline code span that starts with "cargo lab ";
//! - in Rust files, the same inside the `//!` header (the crate or module docs).
//!
//! A line of a code block that starts with a chapter binary (`ch06-pingpong ...`,
//! `target/debug/ch06-pingpong ...`) or a C tool (`ibv_rc_pingpong ...`) is an error: write it as
//! "cargo lab exec -- target/debug/ch06-pingpong ...", which the test can run where the device
//! is.
//!
//! What the text says about a command, in a trailing `# ...` comment:
//! - `# fails: <text>`: the command must exit non-zero and print `<text>` (a parenthesis after
//!   the text, `# fails: <text> (why)`, is free text); the same command shown elsewhere without
//!   a marker (in prose, say) is expected to fail the same way;
//! - `# terminal 1` / `# terminal 2`: two commands run at the same time (a server and its
//!   client, "in two terminals"); the first starts, then the second; both must succeed;
//! - `# tested as: <command>`: a long run; the test runs `<command>`, a shorter form of it,
//!   instead (the docs say so where the line is);
//! - any other comment is free text.
//!
//! A span or line with a placeholder (`<...>`, `[...]`, `a|b`, `NN`, `...`), or one that only
//! names a command that needs arguments ("cargo lab run"), or one that never returns by
//! itself (`cargo lab exercise watch`, until Ctrl-C), is a synopsis, not a command: the test
//! checks only that its subcommand exists.

use std::path::Path;

/// What the docs imply about a command's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expect {
    /// Exit status 0.
    Success,
    /// A non-zero exit status, and this text in the output.
    Fails(String),
}

/// How a command takes part in the run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Run it, wait for it.
    Run,
    /// `# terminal 1`: started in the background, waited for after its `# terminal 2`.
    Terminal1,
    /// `# terminal 2`: runs while the `# terminal 1` command before it runs.
    Terminal2,
    /// A synopsis with placeholders: only its subcommand is checked.
    Synopsis,
}

/// One documented command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocCommand {
    /// `path:line` where the docs show it.
    pub place: String,
    /// As written (without the comment).
    pub shown: String,
    /// What the test runs: `shown`, or the `# tested as:` form.
    pub run: String,
    pub expect: Expect,
    pub kind: Kind,
}

impl DocCommand {
    /// The words after `cargo lab`.
    pub fn lab_args(&self) -> Vec<String> {
        split_words(self.run.trim_start_matches("cargo lab").trim())
    }

    /// The subcommand (`run`, `exec` ...).
    pub fn subcommand(&self) -> String {
        split_words(self.shown.trim_start_matches("cargo lab").trim())
            .into_iter()
            .next()
            .unwrap_or_default()
    }
}

/// A problem in the docs themselves (not in running a command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocProblem {
    pub place: String,
    pub what: String,
}

/// Splits a command line into words: whitespace-separated, with '...' and "..." quoting.
pub fn split_words(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                any = true;
            }
            None if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            None => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn is_synopsis(cmd: &str) -> bool {
    // Placeholders count outside quotes only (`sh -c 'a | b'` is a command).
    let mut bare = String::new();
    let mut quote: Option<char> = None;
    for c in cmd.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None => bare.push(c),
        }
    }
    // `cargo lab run` or `cargo lab exec` alone names the command (it needs arguments to run).
    let words: Vec<&str> = bare.split_whitespace().collect();
    // `cargo lab exercise watch` runs until Ctrl-C: shown, never run (its test is a PTY's).
    matches!(words[..], ["cargo", "lab", "run" | "exec"])
        || matches!(words[..], ["cargo", "lab", "exercise", "watch", ..])
        || bare.contains('<')
        || bare.contains('[')
        || bare.contains('|')
        || bare.contains("...")
        || bare.contains('…')
        || bare
            .split_whitespace()
            .any(|w| matches!(w, "NN" | "ARGS" | "CMD" | "N" | "NAME"))
}

/// Splits `cmd  # comment` at the first ` # ` outside quotes.
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let mut quote: Option<char> = None;
    let b = line.as_bytes();
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' && i > 0 && (b[i - 1] == b' ' || b[i - 1] == b'\t') => {
                return (line[..i].trim_end(), Some(line[i + 1..].trim()));
            }
            None => {}
        }
    }
    (line.trim_end(), None)
}

fn classify(place: String, text: &str, problems: &mut Vec<DocProblem>) -> DocCommand {
    let (cmd, comment) = split_comment(text);
    let shown = cmd.trim().to_string();
    let mut run = shown.clone();
    let mut expect = Expect::Success;
    let mut kind = if is_synopsis(&shown) {
        Kind::Synopsis
    } else {
        Kind::Run
    };
    if let Some(c) = comment {
        if let Some(t) = c.strip_prefix("fails:") {
            let t = t.split(" (").next().unwrap_or(t);
            expect = Expect::Fails(t.trim().to_string());
        } else if c.starts_with("terminal 1") {
            kind = Kind::Terminal1;
        } else if c.starts_with("terminal 2") {
            kind = Kind::Terminal2;
        } else if let Some(t) = c.strip_prefix("tested as:") {
            let t = t.trim();
            if !t.starts_with("cargo lab ") {
                problems.push(DocProblem {
                    place: place.clone(),
                    what: format!("`# tested as:` must give a `cargo lab` command, got {t:?}"),
                });
            }
            run = t.to_string();
        }
    }
    if chains_commands(&shown) {
        problems.push(DocProblem {
            place: place.clone(),
            what: format!(
                "`{shown}` chains commands (`&&`, `||` or `;`): the test runs each span as one \
                 `cargo lab` command, so show one command per span"
            ),
        });
    }
    DocCommand {
        place,
        shown,
        run,
        expect,
        kind,
    }
}

/// Whether `cmd` holds `&&`, `||` or `;` outside quotes: more than one command.
fn chains_commands(cmd: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for c in cmd.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == ';' || (c == '&' && prev == '&') || (c == '|' && prev == '|') => {
                return true;
            }
            None => {}
        }
        prev = c;
    }
    false
}

/// A line of a code block that runs a program the test could not place in the lab.
fn bare_invocation(line: &str) -> bool {
    let first = line.split_whitespace().next().unwrap_or("");
    let first = first.strip_prefix("target/debug/").unwrap_or(first);
    let chapter = first.len() > 5
        && first.starts_with("ch")
        && first[2..4].chars().all(|c| c.is_ascii_digit())
        && first.as_bytes()[4] == b'-';
    chapter || first.starts_with("ibv_") || first.starts_with("ib_")
}

/// The inline code spans of a line of prose.
fn inline_spans(line: &str) -> Vec<&str> {
    let mut out = vec![];
    let mut rest = line;
    while let Some(a) = rest.find('`') {
        let after = &rest[a + 1..];
        let Some(b) = after.find('`') else { break };
        out.push(&after[..b]);
        rest = &after[b + 1..];
    }
    out
}

/// Collects the commands of one document. `rust` selects the `//!` lines of a Rust file.
pub fn collect(
    path: &str,
    text: &str,
    rust: bool,
    out: &mut Vec<DocCommand>,
    problems: &mut Vec<DocProblem>,
) {
    let mut in_block = false;
    let mut block_is_code = false;
    for (i, raw) in text.lines().enumerate() {
        let line = if rust {
            match raw.trim_start().strip_prefix("//!") {
                Some(l) => l.strip_prefix(' ').unwrap_or(l),
                None => continue,
            }
        } else {
            raw
        };
        let place = format!("{path}:{}", i + 1);
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            if in_block {
                in_block = false;
            } else {
                in_block = true;
                let lang = lang.trim();
                // Shell-ish blocks hold commands; others (rust, toml, yaml ...) do not.
                block_is_code = matches!(lang, "" | "sh" | "bash" | "shell" | "console" | "text");
            }
            continue;
        }
        if in_block {
            if !block_is_code {
                continue;
            }
            let l = line.strip_prefix("$ ").unwrap_or(line);
            if l.starts_with("cargo lab ") || l == "cargo lab" {
                out.push(classify(place, l, problems));
            } else if bare_invocation(l) && !line.starts_with(' ') {
                problems.push(DocProblem {
                    place,
                    what: {
                        let cmd = split_comment(l).0.trim();
                        format!(
                            "{cmd:?} runs a program outside the lab: write it as `cargo lab exec \
                             -- {cmd}` (so the documented-commands test can run it)"
                        )
                    },
                });
            }
            continue;
        }
        for span in inline_spans(line) {
            if span.starts_with("cargo lab ") {
                out.push(classify(place.clone(), span, problems));
            }
        }
    }
}

/// Every documented command of the repository at `root`: its tracked Markdown files and the
/// `//!` headers of its tracked Rust files, in path order (then line order).
pub fn collect_repo(root: &Path) -> anyhow::Result<(Vec<DocCommand>, Vec<DocProblem>)> {
    let out = crate::host_tools::git(root, &["ls-files", "-z", "*.md", "*.rs"])?;
    let mut files: Vec<String> = String::from_utf8_lossy(&out)
        .split('\0')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    files.sort();
    let mut cmds = vec![];
    let mut problems = vec![];
    for f in files {
        let Ok(text) = std::fs::read_to_string(root.join(&f)) else {
            continue;
        };
        collect(&f, &text, f.ends_with(".rs"), &mut cmds, &mut problems);
    }
    Ok((cmds, problems))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(path: &str, text: &str) -> (Vec<DocCommand>, Vec<DocProblem>) {
        let mut c = vec![];
        let mut p = vec![];
        collect(path, text, path.ends_with(".rs"), &mut c, &mut p);
        (c, p)
    }

    #[test]
    fn finds_block_lines_and_inline_spans() {
        let md = "Run `cargo lab run 06 -- -e` to see.\n\n```sh\ncargo lab run 01     # boots\n\
                  $ cargo lab list\nls -l\n```\n\n```rust\ncargo lab run 99\n```\n";
        let (c, p) = parse("README.md", md);
        assert!(p.is_empty(), "{p:?}");
        let shown: Vec<&str> = c.iter().map(|c| c.shown.as_str()).collect();
        assert_eq!(
            shown,
            [
                "cargo lab run 06 -- -e",
                "cargo lab run 01",
                "cargo lab list"
            ]
        );
        assert_eq!(c[1].place, "README.md:4");
        assert_eq!(c[0].lab_args(), ["run", "06", "--", "-e"]);
    }

    #[test]
    fn reads_the_markers() {
        let md = "```\ncargo lab run 99   # fails: no chapter \"99\"\n\
                  cargo lab exec -n a -- x --serve   # terminal 1\n\
                  cargo lab exec -n b -- x --connect 10.77.0.1   # terminal 2\n\
                  cargo lab tour   # tested as: cargo lab run 01\n\
                  cargo lab exec -- sh -c 'echo a # b'\n```\n";
        let (c, p) = parse("x.md", md);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(c[0].expect, Expect::Fails("no chapter \"99\"".into()));
        assert_eq!(c[1].kind, Kind::Terminal1);
        assert_eq!(c[2].kind, Kind::Terminal2);
        assert_eq!(c[3].run, "cargo lab run 01");
        assert_eq!(c[3].shown, "cargo lab tour");
        assert_eq!(c[4].lab_args(), ["exec", "--", "sh", "-c", "echo a # b"]);
    }

    #[test]
    fn a_parenthesis_after_the_failure_text_is_free_text() {
        let (c, _) = parse(
            "x.md",
            "```\ncargo lab run 07 -- -x   # fails: LOC_QP_OP_ERR (on purpose)\n```\n",
        );
        assert_eq!(c[0].expect, Expect::Fails("LOC_QP_OP_ERR".into()));
    }

    #[test]
    fn synopses_are_not_run() {
        let md = "`cargo lab run NN [-- ARGS]` and `cargo lab exec [-n a|b] -- CMD` and \
                  `cargo lab run 06`, as `cargo lab run` does\n";
        let (c, _) = parse("x.md", md);
        let kinds: Vec<&Kind> = c.iter().map(|c| &c.kind).collect();
        assert_eq!(
            kinds,
            [
                &Kind::Synopsis,
                &Kind::Synopsis,
                &Kind::Run,
                &Kind::Synopsis
            ]
        );
        assert_eq!(c[1].subcommand(), "exec");
        // `watch` never returns by itself: shown, not run; `exercise list` is run.
        let md = "`cargo lab exercise watch` then `cargo lab exercise list`\n";
        let (c, _) = parse("x.md", md);
        let kinds: Vec<&Kind> = c.iter().map(|c| &c.kind).collect();
        assert_eq!(kinds, [&Kind::Synopsis, &Kind::Run]);
        assert_eq!(c[0].subcommand(), "exercise");
    }

    #[test]
    fn chained_commands_are_a_problem() {
        let md = "`cargo lab tour && cargo lab test` and `cargo lab exec -- sh -c 'a; b && c'`\n";
        let (c, p) = parse("x.md", md);
        assert_eq!(c.len(), 2);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].place == "x.md:1" && p[0].what.contains("one command per span"));
    }

    #[test]
    fn rust_headers_only() {
        let rs = "//! ```text\n//! cargo lab run 08 -- bad-rkey   # one case\n//! ```\n\
                  // `cargo lab run 77` in a plain comment is not docs\nfn main() {}\n";
        let (c, _) = parse("chapters/x/src/main.rs", rs);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].shown, "cargo lab run 08 -- bad-rkey");
        assert_eq!(c[0].place, "chapters/x/src/main.rs:2");
    }

    #[test]
    fn a_bare_chapter_invocation_is_a_problem() {
        let md = "```sh\nch06-pingpong -g 1 127.0.0.1   # client\n  ibv_foo output line\n```\n";
        let (c, p) = parse("ch06/README.md", md);
        assert!(c.is_empty());
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].what.contains("cargo lab exec -- ch06-pingpong"),
            "{p:?}"
        );
    }
}
