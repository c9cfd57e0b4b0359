//! The book builds, every chapter of the course has its page, every page shows what the tested
//! sources hold (README, functions, snapshots), and every internal link and anchor resolves.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;

fn repo() -> PathBuf {
    harness::course::workspace_root().expect("workspace root")
}

/// One rendering per test binary: (generated sources, HTML), under `target/book-test/` (a
/// fixed place, replaced at each run: nothing is left in /tmp).
fn built() -> &'static (PathBuf, PathBuf) {
    static B: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    B.get_or_init(|| {
        let out = repo().join("target/book-test/book");
        let src = rxe_lab_book::build(&repo(), &out).unwrap_or_else(|e| panic!("{e:#}"));
        (src.join("src"), out)
    })
}

#[test]
fn every_chapter_of_the_course_has_a_page_listed_in_the_summary() {
    let repo = repo();
    let course = harness::course::Course::load().unwrap().0;
    let pages = rxe_lab_book::pages(&repo).unwrap();
    let map = rxe_lab_book::page_map(&pages);
    let summary = std::fs::read_to_string(repo.join("book/pages/SUMMARY.md")).unwrap();
    for ch in &course.chapters {
        let readme = ch.dir(Path::new("")).join("README.md");
        let page = map.get(&readme).unwrap_or_else(|| {
            panic!(
                "chapter {} is in chapters/course.toml but no page of book/pages renders {}: add \
                 book/pages/chapters/{}.md (copy another chapter's page) and list it in SUMMARY.md",
                ch.number,
                readme.display(),
                ch.dir(Path::new("")).file_name().unwrap().to_string_lossy()
            )
        });
        assert!(
            summary.contains(&format!("({})", page.display())),
            "book/pages/SUMMARY.md does not list {}",
            page.display()
        );
    }
}

#[test]
fn chapter_pages_show_the_tested_sources_verbatim() {
    let (src, _) = built();
    let repo = repo();
    let mut checked = 0;
    for page in rxe_lab_book::pages(&repo).unwrap() {
        let generated = std::fs::read_to_string(src.join(&page.path)).unwrap();
        for line in page.text.lines() {
            let Some((name, args)) = rxe_lab_book::directive(line) else {
                continue;
            };
            match name {
                "snapshot" => {
                    let snap = std::fs::read_to_string(repo.join(args[0])).unwrap();
                    let body = rxe_lab_book::snapshot_body(&snap).unwrap();
                    assert!(
                        generated.contains(&body),
                        "{}: the output of {} is not on the page",
                        page.path.display(),
                        args[0]
                    );
                    checked += 1;
                }
                "fn" => {
                    let code = std::fs::read_to_string(repo.join(args[0])).unwrap();
                    let f = rxe_lab_book::function(&code, args[1]).unwrap();
                    assert!(
                        generated.contains(&f),
                        "{}: fn {}",
                        page.path.display(),
                        args[1]
                    );
                    checked += 1;
                }
                _ => {}
            }
        }
        assert!(
            !generated.contains("{{#"),
            "{}: a directive was left unexpanded",
            page.path.display()
        );
    }
    assert!(checked >= 20, "only {checked} listings and outputs checked");
}

#[test]
fn every_internal_link_and_anchor_resolves() {
    let (_, html) = built();
    let attr = Regex::new(r#"(?:href|src)="([^"]*)""#).unwrap();
    let id = Regex::new(r#"\bid="([^"]+)""#).unwrap();
    let mut files = vec![];
    let mut stack = vec![html.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "html") {
                files.push(p);
            }
        }
    }
    assert!(files.len() > 20, "{} pages", files.len());
    let ids_of = |p: &Path| -> BTreeSet<String> {
        let t = std::fs::read_to_string(p).unwrap_or_default();
        id.captures_iter(&t).map(|c| c[1].to_string()).collect()
    };
    let mut broken = vec![];
    let mut links = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for c in attr.captures_iter(&text) {
            let t = &c[1];
            if t.is_empty()
                || t.contains("://")
                || t.starts_with("mailto:")
                || t.starts_with("javascript:")
                || t.starts_with("data:")
            {
                continue;
            }
            links += 1;
            let (path, anchor) = t.split_once('#').unwrap_or((t, ""));
            let target = if path.is_empty() {
                f.clone()
            } else {
                f.parent().unwrap().join(path)
            };
            if !target.exists() {
                broken.push(format!("{}: {t} (no such file)", f.display()));
                continue;
            }
            // print.html concatenates every page; mdBook rewrites its anchors itself.
            if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "html")
                && !f.ends_with("print.html")
                && !ids_of(&target).contains(anchor)
            {
                broken.push(format!("{}: {t} (no id {anchor:?})", f.display()));
            }
        }
    }
    assert!(links > 200, "only {links} links checked");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn diagrams_are_inline_svg_drawn_from_the_data() {
    let (_, html) = built();
    for (page, id, must) in [
        ("qp-states.html", "diagram-qp-states", "INIT"),
        ("objects.html", "diagram-objects", "ProtectionDomain"),
        (
            "failures.html",
            "diagram-failures",
            "IBV_WC_REM_ACCESS_ERR (10)",
        ),
    ] {
        let t = std::fs::read_to_string(html.join(page)).unwrap();
        let at = t
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("{page}: no figure {id}"));
        let fig = &t[at..at + t[at..].find("</figure>").unwrap()];
        assert!(fig.contains("<svg"), "{page}: {id} holds no <svg>");
        assert!(fig.contains(must), "{page}: {id} lacks {must:?}");
    }
}

#[test]
fn the_mdbook_pin_is_the_same_everywhere() {
    let repo = repo();
    let v = rxe_lab_book::MDBOOK_VERSION;
    let setup = std::fs::read_to_string(repo.join("scripts/setup.sh")).unwrap();
    assert!(
        setup.contains(&format!("mdbook_version={v}\n")),
        "scripts/setup.sh installs another mdbook than {v}"
    );
    let cli = std::fs::read_to_string(repo.join("harness/src/cli/book.rs")).unwrap();
    assert!(
        cli.contains(&format!("const MDBOOK_VERSION: &str = \"{v}\";")),
        "harness/src/cli/book.rs checks another mdbook than {v}"
    );
    let in_vm = std::fs::read_to_string(repo.join("harness/tests/native_in_vm.rs")).unwrap();
    assert!(
        in_vm.contains(&format!("tools/mdbook-{v}/bin/mdbook")),
        "harness/tests/native_in_vm.rs hands the guest another mdbook than {v}"
    );
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("mdBook {v}")),
        "README.md names another mdBook"
    );
}
