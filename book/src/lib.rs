//! # rxe-lab-book: the course as an mdBook, built from the course's own sources
//!
//! The pages under `book/pages/` hold the book's own prose and *directives*; nothing they show
//! of a chapter is a copy. [`generate`] expands the directives into a plain mdBook source tree
//! (under `target/`), and [`build`] renders it with the pinned `mdbook` ([`MDBOOK_VERSION`]).
//! A directive is a line of its own:
//!
//! | directive | becomes |
//! |---|---|
//! | `{{#readme PATH}}` | the Markdown file, its links rewritten to book pages (or to the file, copied beside the book) |
//! | `{{#readme PATH HEADING}}` | the same, up to that heading |
//! | `{{#section PATH HEADING}}` | one section of a Markdown file (up to the next heading of its level) |
//! | `{{#fn PATH NAME}}` | the Rust function `NAME` (with its doc comment) from `PATH`, as a listing |
//! | `{{#file PATH}}` | the whole source file, folded |
//! | `{{#snapshot PATH}}` | the insta snapshot's body: the output the test suite checks, redacted |
//! | `{{#diagram NAME}}` | a diagram generated from the project's data (see [`diagrams`]) |
//! | `{{#svg PATH}}` | an SVG file of the repository, inline |
//! | `{{#chapters}}` | the course table, from `chapters/course.toml` |
//!
//! Change a snapshot, a README or a function and the book changes with it; a directive whose
//! source is gone fails the build. mdBook's own preprocessors are not used, so the book does not
//! depend on mdBook's preprocessor API (which changed between 0.4 and 0.5); the version is
//! still pinned, because the theme and the HTML it writes are what the browser test checks.

pub mod diagrams;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use harness::host_tools::{captured, captured_within};
use regex::Regex;

/// The mdBook the book is built with (installed by `scripts/setup.sh --dev` from crates.io).
/// 0.4.52 is the last of the 0.4 line that most published Rust books build with.
pub const MDBOOK_VERSION: &str = "0.4.52";

/// Where `scripts/setup.sh --dev` installs the pinned mdbook, under the lab's cache dir.
pub fn pinned_mdbook_path() -> PathBuf {
    cache_dir()
        .join("tools")
        .join(format!("mdbook-{MDBOOK_VERSION}"))
        .join("bin/mdbook")
}

fn cache_dir() -> PathBuf {
    harness::initramfs::cache_dir()
}

/// The pinned mdbook: `$MDBOOK` if set, else the cache dir's, else `mdbook` on PATH, each only
/// if it reports [`MDBOOK_VERSION`]. The error names the command that installs it.
pub fn mdbook() -> Result<PathBuf> {
    let mut tried = vec![];
    let mut candidates: Vec<PathBuf> = vec![];
    if let Some(m) = std::env::var_os("MDBOOK") {
        candidates.push(m.into());
    }
    candidates.push(pinned_mdbook_path());
    candidates.push("mdbook".into());
    for c in candidates {
        match captured(duct::cmd(&c, ["--version"])) {
            Ok(o) if o.status.success() => {
                let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
                if v == format!("mdbook v{MDBOOK_VERSION}") {
                    return Ok(c);
                }
                tried.push(format!("{}: {v}", c.display()));
            }
            Ok(o) => tried.push(format!("{}: exit {}", c.display(), o.status)),
            Err(e) => tried.push(format!("{}: {e}", c.display())),
        }
    }
    bail!(
        "mdbook {MDBOOK_VERSION} not found (tried {}).\n  fix: bash scripts/setup.sh --book \
         (`cargo lab book` runs it when mdbook is missing), which runs: cargo install mdbook \
         --version {MDBOOK_VERSION} --locked --root {}",
        tried.join("; "),
        pinned_mdbook_path()
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."))
            .display()
    )
}

/// Renders the book: [`generate`] into `<out>.src`, then `mdbook build` into `out`.
/// Returns the generated source dir.
pub fn build(repo: &Path, out: &Path) -> Result<PathBuf> {
    let src = out.with_extension("src");
    generate(repo, &src)?;
    let mdbook = mdbook()?;
    let out = absolute(out)?;
    let cmd = duct::cmd(
        &mdbook,
        [
            OsStr::new("build"),
            src.as_ref(),
            "-d".as_ref(),
            out.as_ref(),
        ],
    );
    // A render takes about a second here; one still running after 300 s is killed.
    let Some(done) = captured_within(cmd, Duration::from_secs(300))
        .with_context(|| format!("running {}", mdbook.display()))?
    else {
        bail!("mdbook build did not finish within 300 s: killed");
    };
    if !done.status.success() {
        bail!(
            "mdbook build failed ({}):\n{}{}",
            done.status,
            String::from_utf8_lossy(&done.stdout),
            String::from_utf8_lossy(&done.stderr)
        );
    }
    Ok(src)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    Ok(if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    })
}

/// One page of the book and the repository Markdown files it renders.
#[derive(Debug, Clone)]
pub struct Page {
    /// Path under `book/pages/` (`chapters/07-rdma-write.md`).
    pub path: PathBuf,
    pub text: String,
}

/// The pages of `book/pages/`, every `.md` file.
pub fn pages(repo: &Path) -> Result<Vec<Page>> {
    let root = repo.join("book/pages");
    let mut out = vec![];
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(Page {
                    path: p.strip_prefix(&root)?.to_path_buf(),
                    text: std::fs::read_to_string(&p)?,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

static DIRECTIVE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\{\{#(\w+)(?:\s+(.*?))?\}\}\s*$").unwrap());

/// Parses a directive line: `(name, args)`.
pub fn directive(line: &str) -> Option<(&str, Vec<&str>)> {
    let c = DIRECTIVE.captures(line)?;
    let name = c.get(1).unwrap().as_str();
    let args = c.get(2).map(|a| a.as_str()).unwrap_or("");
    // Arguments are words; a quoted argument may hold spaces (`"1. Labelled identifiers"`).
    let mut v = vec![];
    let mut rest = args.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('"') {
            let end = r.find('"').unwrap_or(r.len());
            v.push(&r[..end]);
            rest = r[(end + 1).min(r.len())..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            v.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
    }
    Some((name, v))
}

/// Which repository Markdown file is rendered on which book page (`{{#readme}}` directives):
/// links between them are rewritten page to page.
pub fn page_map(pages: &[Page]) -> BTreeMap<PathBuf, PathBuf> {
    let mut m = BTreeMap::new();
    for p in pages {
        for line in p.text.lines() {
            if let Some(("readme", args)) = directive(line)
                && let Some(a) = args.first()
            {
                m.insert(PathBuf::from(a), p.path.clone());
            }
        }
    }
    m
}

/// Generates the mdBook source tree into `dest` (`dest/book.toml`, `dest/src/...`).
pub fn generate(repo: &Path, dest: &Path) -> Result<()> {
    if dest.exists() {
        std::fs::remove_dir_all(dest).with_context(|| format!("clearing {}", dest.display()))?;
    }
    regenerate(repo, dest)
}

/// [`generate`] without clearing `dest` first: only files whose content changed are written,
/// so a running `mdbook serve` sees exactly what changed.
pub fn regenerate(repo: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest.join("src"))?;
    write_if_changed(
        &dest.join("book.toml"),
        &std::fs::read(repo.join("book/book.toml")).context("reading book/book.toml")?,
    )?;
    // The theme's additions (diagram styling), beside book.toml as book.toml names them.
    write_if_changed(
        &dest.join("lab.css"),
        &std::fs::read(repo.join("book/lab.css")).context("reading book/lab.css")?,
    )?;
    let pages = pages(repo)?;
    let map = page_map(&pages);
    let mut g = Gen {
        repo: repo.to_path_buf(),
        dest: dest.join("src"),
        map,
    };
    for p in &pages {
        let text = g
            .expand(p)
            .with_context(|| format!("book/pages/{}", p.path.display()))?;
        write_if_changed(&g.dest.join(&p.path), text.as_bytes())?;
    }
    // Any non-Markdown files of the pages (images of the book's own).
    copy_non_md(&repo.join("book/pages"), &g.dest)?;
    Ok(())
}

fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::create_dir_all(path.parent().unwrap())?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn copy_non_md(from: &Path, to: &Path) -> Result<()> {
    for e in std::fs::read_dir(from)? {
        let p = e?.path();
        let t = to.join(p.file_name().unwrap());
        if p.is_dir() {
            std::fs::create_dir_all(&t)?;
            copy_non_md(&p, &t)?;
        } else if p.extension().is_none_or(|e| e != "md") {
            write_if_changed(&t, &std::fs::read(&p)?)?;
        }
    }
    Ok(())
}

struct Gen {
    repo: PathBuf,
    dest: PathBuf,
    map: BTreeMap<PathBuf, PathBuf>,
}

impl Gen {
    fn read(&self, rel: &str) -> Result<String> {
        std::fs::read_to_string(self.repo.join(rel)).with_context(|| format!("reading {rel}"))
    }

    fn expand(&mut self, page: &Page) -> Result<String> {
        let mut out = String::new();
        for (i, line) in page.text.lines().enumerate() {
            let Some((name, args)) = directive(line) else {
                out.push_str(line);
                out.push('\n');
                continue;
            };
            let arg = |n: usize| -> Result<&str> {
                args.get(n)
                    .copied()
                    .with_context(|| format!("line {}: {{{{#{name}}}}} needs argument {n}", i + 1))
            };
            let text = match name {
                "readme" => {
                    let path = arg(0)?;
                    let mut md = self.read(path)?;
                    // `{{#readme PATH HEADING}}`: the file up to that heading (the rest can
                    // follow later through `{{#section PATH HEADING}}`).
                    if let Some(h) = args.get(1) {
                        md = before_section(&md, h)
                            .with_context(|| format!("{path} has no heading {h:?}"))?;
                    }
                    self.markdown(&page.path, path, &md)?
                }
                "section" => {
                    let path = arg(0)?;
                    let md = self.read(path)?;
                    let sec = section(&md, arg(1)?)
                        .with_context(|| format!("{path} has no heading {:?}", arg(1).unwrap()))?;
                    self.markdown(&page.path, path, &sec)?
                }
                "fn" => {
                    let (path, f) = (arg(0)?, arg(1)?);
                    let src = self.read(path)?;
                    let body =
                        function(&src, f).with_context(|| format!("{path} has no fn {f}"))?;
                    format!("```rust,ignore\n{body}```\n\n<small>from `{path}`</small>\n")
                }
                "file" => {
                    let path = arg(0)?;
                    let src = self.read(path)?;
                    let lang = if path.ends_with(".rs") {
                        "rust,ignore"
                    } else {
                        "text"
                    };
                    format!(
                        "<details><summary>The whole file: <code>{path}</code> ({} lines)</summary>\n\n```{lang}\n{src}```\n\n</details>\n",
                        src.lines().count()
                    )
                }
                "snapshot" => {
                    let path = arg(0)?;
                    let body = snapshot_body(&self.read(path)?)
                        .with_context(|| format!("{path} is not an insta snapshot"))?;
                    format!(
                        "```text\n{body}```\n\n<small>the output the test suite checks: `{path}` (redacted: see [Reading the output]({}))</small>\n",
                        rel_link(&page.path, Path::new("reading-output.md"))
                    )
                }
                "diagram" => {
                    let svg = diagrams::render(&self.repo, arg(0)?)?;
                    figure(arg(0)?, &svg)
                }
                "svg" => {
                    let path = arg(0)?;
                    let svg = self.read(path)?;
                    let id = Path::new(path)
                        .file_stem()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    figure(&id, &svg)
                }
                "chapters" => self.chapter_table(&page.path)?,
                other => bail!("line {}: unknown directive {{{{#{other}}}}}", i + 1),
            };
            out.push_str(&text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
        }
        Ok(out)
    }

    fn chapter_table(&self, page: &Path) -> Result<String> {
        let text = self.read("chapters/course.toml")?;
        let course = harness::course::Course::parse(&text)?;
        let mut s = String::from("| # | chapter | topology | what it shows |\n|---|---|---|---|\n");
        for ch in &course.chapters {
            let readme = ch
                .dir(Path::new(""))
                .join("README.md")
                .to_string_lossy()
                .into_owned();
            let title = match self.map.get(Path::new(&readme)) {
                Some(p) => format!("[{}]({})", ch.title, rel_link(page, p)),
                None => bail!("chapter {} ({readme}) has no book page", ch.number),
            };
            writeln!(
                s,
                "| {} | {title} | {} | {} |",
                ch.number, ch.topology, ch.summary
            )?;
        }
        Ok(s)
    }

    /// A Markdown file of the repository (`from`, repo-relative) as part of `page`: its links
    /// and images rewritten.
    fn markdown(&self, page: &Path, from: &str, md: &str) -> Result<String> {
        static LINK: LazyLock<Regex> =
            LazyLock::new(|| Regex::new(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)").unwrap());
        let base = Path::new(from).parent().unwrap_or(Path::new(""));
        let mut out = String::new();
        let mut fence = false;
        for line in md.lines() {
            if line.trim_start().starts_with("```") {
                fence = !fence;
            }
            if fence {
                out.push_str(line);
                out.push('\n');
                continue;
            }
            let mut err = None;
            let l = LINK.replace_all(line, |c: &regex::Captures| {
                let (bang, text, target) = (&c[1], &c[2], &c[3]);
                match self.link(page, base, target) {
                    Ok(Some(t)) => format!("{bang}[{text}]({t})"),
                    Ok(None) => format!("{text} (`{}` in the repository)", target),
                    Err(e) => {
                        err = Some(e);
                        String::new()
                    }
                }
            });
            if let Some(e) = err {
                return Err(e.context(format!("{from}: {line}")));
            }
            out.push_str(&l);
            out.push('\n');
        }
        Ok(out)
    }

    /// Where a link of a repository file (in dir `base`) points in the book: `None` when the
    /// target is a directory (no page to show).
    fn link(&self, page: &Path, base: &Path, target: &str) -> Result<Option<String>> {
        if target.contains("://") || target.starts_with("mailto:") || target.starts_with('#') {
            return Ok(Some(target.to_string()));
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, format!("#{a}")),
            None => (target, String::new()),
        };
        let rel = normalize(&base.join(path));
        let full = self.repo.join(&rel);
        if !full.exists() {
            bail!("link to {} ({target}): no such file", rel.display());
        }
        if let Some(p) = self.map.get(&rel) {
            return Ok(Some(format!("{}{anchor}", rel_link(page, p))));
        }
        if full.is_dir() {
            return Ok(None);
        }
        // Any other file: copied beside the book under repo/, so the link still works offline.
        let copy = Path::new("repo").join(&rel);
        let dest = self.dest.join(&copy);
        std::fs::create_dir_all(dest.parent().unwrap())?;
        if rel.extension().is_some_and(|e| e == "md") {
            // A Markdown file without a page: shipped as text (mdBook renders only SUMMARY's).
            let copy = copy.with_extension("md.txt");
            write_if_changed(&self.dest.join(&copy), &std::fs::read(&full)?)?;
            return Ok(Some(format!("{}{anchor}", rel_link(page, &copy))));
        }
        write_if_changed(&dest, &std::fs::read(&full)?)?;
        Ok(Some(format!("{}{anchor}", rel_link(page, &copy))))
    }
}

fn figure(id: &str, svg: &str) -> String {
    // Inline, so the page's DOM holds the <svg> (the browser test measures it); the XML prolog
    // and DOCTYPE are not allowed inside HTML.
    let start = svg.find("<svg").unwrap_or(0);
    let body = &svg[start..];
    // mdBook passes an HTML block through only while it has no blank line.
    let body: String = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    format!("<figure class=\"lab-diagram\" id=\"diagram-{id}\">\n{body}\n</figure>\n")
}

/// `a/b/../c` -> `a/c`.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The relative link from page `from` to page/file `to` (both under the book's src), with
/// `.md` kept: mdBook turns it into `.html`.
pub fn rel_link(from: &Path, to: &Path) -> String {
    let depth = from.parent().map(|p| p.components().count()).unwrap_or(0);
    let mut s = "../".repeat(depth);
    s.push_str(&to.to_string_lossy());
    s
}

/// The section of `md` under the heading whose text is `heading`, the heading included, up to
/// the next heading of the same or a higher level (outside code fences).
pub fn section(md: &str, heading: &str) -> Option<String> {
    let mut out = String::new();
    let mut level = None;
    let mut fence = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        let h = (!fence)
            .then(|| {
                let n = line.chars().take_while(|c| *c == '#').count();
                (n > 0 && line[n..].starts_with(' ')).then(|| (n, line[n..].trim()))
            })
            .flatten();
        match (level, h) {
            (None, Some((n, t))) if t == heading => {
                level = Some(n);
                out.push_str(line);
                out.push('\n');
            }
            (Some(l), Some((n, _))) if n <= l => break,
            (Some(_), _) => {
                out.push_str(line);
                out.push('\n');
            }
            _ => {}
        }
    }
    level.map(|_| out)
}

/// `md` up to (not including) the heading whose text is `heading` (outside code fences).
pub fn before_section(md: &str, heading: &str) -> Option<String> {
    let mut out = String::new();
    let mut fence = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        let n = line.chars().take_while(|c| *c == '#').count();
        if !fence && n > 0 && line[n..].starts_with(' ') && line[n..].trim() == heading {
            return Some(out);
        }
        out.push_str(line);
        out.push('\n');
    }
    None
}

/// The top-level `fn name` of a Rust source (with `pub`, attributes and its doc comment), up
/// to its closing brace at column 0.
pub fn function(src: &str, name: &str) -> Option<String> {
    let lines: Vec<&str> = src.lines().collect();
    let re = Regex::new(&format!(
        r"^(pub(\([a-z]+\))? )?(async )?fn {}\b",
        regex::escape(name)
    ))
    .unwrap();
    let start = lines.iter().position(|l| re.is_match(l))?;
    let mut first = start;
    while first > 0 {
        let prev = lines[first - 1];
        if prev.starts_with("///") || prev.starts_with("#[") {
            first -= 1;
        } else {
            break;
        }
    }
    let end = (start..lines.len()).find(|&i| lines[i] == "}")?;
    let mut s = String::new();
    for l in &lines[first..=end] {
        s.push_str(l);
        s.push('\n');
    }
    Some(s)
}

/// The body of an insta `.snap` file: what follows its `---` header.
pub fn snapshot_body(snap: &str) -> Option<String> {
    let rest = snap.strip_prefix("---\n")?;
    let end = rest.find("\n---\n")?;
    let mut body = rest[end + 5..].to_string();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_parse_with_quoted_arguments() {
        assert_eq!(
            directive("{{#section docs/conventions.md \"1. Labelled identifiers\"}}"),
            Some((
                "section",
                vec!["docs/conventions.md", "1. Labelled identifiers"]
            ))
        );
        assert_eq!(directive("{{#chapters}}"), Some(("chapters", vec![])));
        assert_eq!(directive("text {{#fn a b}}"), None);
    }

    #[test]
    fn sections_stop_at_the_next_heading_of_their_level() {
        let md = "# T\n## A\na\n```\n## not a heading\n```\n### A.1\nx\n## B\nb\n";
        assert_eq!(
            section(md, "A").unwrap(),
            "## A\na\n```\n## not a heading\n```\n### A.1\nx\n"
        );
        assert!(section(md, "C").is_none());
    }

    #[test]
    fn functions_come_with_their_doc_comment() {
        let src = "use x;\n\n/// Does it.\n#[inline]\nfn go(a: u8) {\n    if a {\n    }\n}\n\nfn other() {}\n";
        assert_eq!(
            function(src, "go").unwrap(),
            "/// Does it.\n#[inline]\nfn go(a: u8) {\n    if a {\n    }\n}\n"
        );
        assert!(function(src, "g").is_none());
    }

    #[test]
    fn snapshot_bodies_drop_the_insta_header() {
        let s = "---\nsource: x.rs\nexpression: t\n---\n== run (exit 0)\nstep 1\n";
        assert_eq!(snapshot_body(s).unwrap(), "== run (exit 0)\nstep 1\n");
        assert!(snapshot_body("no header").is_none());
    }

    #[test]
    fn links_are_relative_to_the_page() {
        assert_eq!(
            rel_link(Path::new("chapters/07.md"), Path::new("glossary.md")),
            "../glossary.md"
        );
        assert_eq!(
            rel_link(Path::new("intro.md"), Path::new("chapters/07.md")),
            "chapters/07.md"
        );
        assert_eq!(
            normalize(Path::new("chapters/07/../../docs/x.md")),
            Path::new("docs/x.md")
        );
    }
}
