//! `chapters/course.toml`: the order of the course and how each chapter runs.

use crate::testing::Role;
use crate::{Node, Topology};
use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
pub struct Course {
    #[serde(rename = "chapter")]
    pub chapters: Vec<Chapter>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chapter {
    pub number: String,
    pub package: String,
    pub title: String,
    /// `loopback` or `pair`; any other name fails the parse, naming itself and those two.
    #[serde(deserialize_with = "topology_name")]
    pub topology: Topology,
    #[serde(default)]
    pub summary: String,
    /// The arguments every role gets when the user gives none (`cargo lab run NN`); arguments
    /// after `cargo lab run NN -- ...` replace them.
    #[serde(default)]
    pub defaults: Vec<String>,
    /// The runs the chapter's docs suggest (`cargo lab run NN -- <args>`).
    #[serde(default, rename = "example")]
    pub examples: Vec<Example>,
    /// What `cargo lab tour` runs instead of the defaults: the args of one of the `examples`
    /// (chapter 11's `--quick`); after it the tour names the full run, `cargo lab run NN`.
    #[serde(default)]
    pub tour: Option<Vec<String>>,
    pub single: Option<RoleSpec>,
    pub server: Option<RoleSpec>,
    pub client: Option<RoleSpec>,
}

/// A chapter's `topology`, parsed by [`Topology`]'s own parser: an unknown name is an error
/// that names it and the known ones (`unknown topology "ring" (loopback or pair)`).
fn topology_name<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Topology, D::Error> {
    let name = String::deserialize(d)?;
    name.parse().map_err(serde::de::Error::custom)
}

/// A documented run of a chapter: `cargo lab run NN -- <args>`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    pub args: Vec<String>,
    /// One line: what to look at.
    pub what: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    #[serde(default)]
    pub args: Vec<String>,
    pub ready: Option<String>,
}

/// The workspace root: the nearest directory holding `chapters/course.toml`, looking up from
/// `$CARGO_MANIFEST_DIR` (set by cargo for tests and `cargo run`), then the current dir, then
/// this crate's own source location.
pub fn workspace_root() -> Option<PathBuf> {
    let mut starts: Vec<PathBuf> = vec![];
    if let Some(d) = std::env::var_os("CARGO_MANIFEST_DIR") {
        starts.push(d.into());
    }
    if let Ok(d) = std::env::current_dir() {
        starts.push(d);
    }
    starts.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    for s in starts {
        let mut d: Option<&Path> = Some(&s);
        while let Some(dir) = d {
            if dir.join("chapters/course.toml").is_file() {
                return Some(dir.to_path_buf());
            }
            d = dir.parent();
        }
    }
    None
}

impl Course {
    pub fn parse(text: &str) -> Result<Course> {
        let c: Course = toml::from_str(text).context("parsing chapters/course.toml")?;
        for ch in &c.chapters {
            match (&ch.single, &ch.server, &ch.client) {
                (Some(_), None, None) | (None, Some(_), Some(_)) => {}
                _ => bail!(
                    "chapters/course.toml: chapter {} needs either [chapter.single] or both \
                     [chapter.server] and [chapter.client]",
                    ch.number
                ),
            }
            if let Some(t) = &ch.tour
                && !ch.examples.iter().any(|e| e.args == *t)
            {
                bail!(
                    "chapters/course.toml: chapter {}: tour = {t:?} is none of its examples' \
                     args (the tour runs a documented form)",
                    ch.number
                );
            }
        }
        Ok(c)
    }

    /// Reads `<workspace>/chapters/course.toml`.
    pub fn load() -> Result<(Course, PathBuf)> {
        let root = workspace_root().context(
            "cannot find chapters/course.toml (run this from inside the rxe-lab workspace)",
        )?;
        let path = root.join("chapters/course.toml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok((Course::parse(&text)?, root))
    }

    /// A chapter by number (`06`, `6`) or package name (`ch06-pingpong`).
    pub fn find(&self, key: &str) -> Option<&Chapter> {
        let num = key.trim_start_matches('0');
        self.chapters.iter().find(|c| {
            c.package == key
                || c.number == key
                || (!num.is_empty() && c.number.trim_start_matches('0') == num)
        })
    }
}

impl Chapter {
    /// The arguments `cargo lab tour` gives the chapter: its `tour` args, else none (the
    /// defaults).
    pub fn tour_args(&self) -> &[String] {
        self.tour.as_deref().unwrap_or(&[])
    }

    /// The line `cargo lab tour` prints after a chapter it ran in a shorter form than `cargo lab
    /// run NN` (chapter 11: `--quick`): the command of the full run. None for the others.
    pub fn tour_note(&self) -> Option<String> {
        let t = self.tour.as_ref()?;
        Some(format!(
            "the tour ran `cargo lab run {n} -- {}`; the full run: `cargo lab run {n}`",
            t.join(" "),
            n = self.number
        ))
    }

    /// The chapter's directory (`chapters/<number>-<slug>`), derived from the package name.
    pub fn dir(&self, root: &Path) -> PathBuf {
        let slug = self
            .package
            .split_once('-')
            .map(|(_, s)| s)
            .unwrap_or(&self.package);
        root.join("chapters")
            .join(format!("{}-{slug}", self.number))
    }

    /// The roles that run this chapter: `single` -> "run" on node a; `server`/`client` ->
    /// "server" on node a and "client" on node b (pair; loopback puts both on the one VM).
    /// `{server}` becomes `server_addr`. Each role gets its own `args`, then `user` (the
    /// arguments after `cargo lab run NN --`) or, when `user` is empty, the chapter's `defaults`:
    /// the user's arguments replace the defaults, they never add to them.
    pub fn roles(&self, exe: &str, user: &[&str], server_addr: &str) -> Vec<Role> {
        let tail: Vec<String> = if user.is_empty() {
            self.defaults.clone()
        } else {
            user.iter().map(|s| s.to_string()).collect()
        };
        let mk = |name: &str, node: Node, spec: &RoleSpec| {
            let mut argv = vec![exe.to_string()];
            argv.extend(spec.args.iter().map(|a| a.replace("{server}", server_addr)));
            argv.extend(tail.iter().cloned());
            Role {
                name: name.into(),
                node,
                argv,
                env: vec![],
                ready: spec.ready.clone(),
            }
        };
        let mut roles = vec![];
        if let Some(s) = &self.single {
            roles.push(mk("run", Node::A, s));
        }
        if let (Some(s), Some(c)) = (&self.server, &self.client) {
            roles.push(mk("server", Node::A, s));
            roles.push(mk("client", Node::B, c));
        }
        roles
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
[[chapter]]
number = "01"
package = "ch01-devices"
title = "Devices"
topology = "loopback"
summary = "s"
[chapter.single]
args = []

[[chapter]]
number = "06"
package = "ch06-pingpong"
title = "Ping-pong"
topology = "pair"
defaults = ["-n", "100"]
[[chapter.example]]
args = ["-e"]
what = "events"
[chapter.server]
args = ["-g", "1"]
ready = "local address:"
[chapter.client]
args = ["-g", "1", "{server}"]
"#;

    #[test]
    fn finds_by_number_and_package() {
        let c = Course::parse(TOML).unwrap();
        assert_eq!(c.find("06").unwrap().package, "ch06-pingpong");
        assert_eq!(c.find("6").unwrap().package, "ch06-pingpong");
        assert_eq!(c.find("ch01-devices").unwrap().number, "01");
        assert!(c.find("99").is_none());
    }

    #[test]
    fn builds_roles() {
        let c = Course::parse(TOML).unwrap();
        let r = c
            .find("06")
            .unwrap()
            .roles("/x/ch06", &["-n", "5"], "10.77.0.1");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].name, "server");
        assert_eq!(r[0].node, Node::A);
        assert_eq!(r[0].ready.as_deref(), Some("local address:"));
        assert_eq!(r[0].argv, ["/x/ch06", "-g", "1", "-n", "5"]);
        assert_eq!(r[1].name, "client");
        assert_eq!(r[1].node, Node::B);
        assert_eq!(r[1].argv, ["/x/ch06", "-g", "1", "10.77.0.1", "-n", "5"]);
        // No user arguments: the defaults; user arguments replace them.
        let r = c.find("06").unwrap().roles("/x/ch06", &[], "10.77.0.1");
        assert_eq!(r[0].argv, ["/x/ch06", "-g", "1", "-n", "100"]);
        let r = c.find("06").unwrap().roles("/x/ch06", &["-e"], "10.77.0.1");
        assert_eq!(r[0].argv, ["/x/ch06", "-g", "1", "-e"]);
        assert_eq!(c.find("06").unwrap().examples[0].args, ["-e"]);
        let r = c.find("01").unwrap().roles("/x/ch01", &[], "127.0.0.1");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].name, "run");
        assert_eq!(r[0].argv, ["/x/ch01"]);
        assert_eq!(
            c.find("06").unwrap().dir(Path::new("/w")),
            Path::new("/w/chapters/06-pingpong")
        );
    }

    #[test]
    fn the_real_course_parses() {
        let (c, _) = Course::load().unwrap();
        assert!(!c.chapters.is_empty());
        for ch in &c.chapters {
            assert_eq!(ch.number.len(), 2, "{}", ch.package);
            assert!(ch.package.starts_with(&format!("ch{}-", ch.number)));
        }
    }

    #[test]
    fn the_tour_runs_one_of_the_examples_and_names_the_full_run() {
        let c = Course::parse(&TOML.replace(
            "defaults = [\"-n\", \"100\"]",
            "defaults = [\"-n\", \"100\"]\ntour = [\"-e\"]",
        ))
        .unwrap();
        let ch = c.find("06").unwrap();
        assert_eq!(ch.tour_args(), ["-e"]);
        assert_eq!(
            ch.tour_note().unwrap(),
            "the tour ran `cargo lab run 06 -- -e`; the full run: `cargo lab run 06`"
        );
        assert!(c.find("01").unwrap().tour_args().is_empty());
        assert_eq!(c.find("01").unwrap().tour_note(), None);
        let bad = TOML.replace(
            "defaults = [\"-n\", \"100\"]",
            "defaults = [\"-n\", \"100\"]\ntour = [\"--quick\"]",
        );
        let e = format!("{:#}", Course::parse(&bad).unwrap_err());
        assert!(e.contains("none of its examples"), "{e}");
        // The real course: chapter 11's tour is its quick form.
        let (real, _) = Course::load().unwrap();
        assert_eq!(real.find("11").unwrap().tour_args(), ["--quick"]);
    }

    #[test]
    fn parses_the_topology() {
        let c = Course::parse(TOML).unwrap();
        assert_eq!(c.find("01").unwrap().topology, Topology::Loopback);
        assert_eq!(c.find("06").unwrap().topology, Topology::Pair);
    }

    #[test]
    fn rejects_an_unknown_topology_naming_it_and_the_known_ones() {
        let bad = TOML.replace("topology = \"pair\"", "topology = \"ring\"");
        let e = format!("{:#}", Course::parse(&bad).unwrap_err());
        assert!(e.contains("parsing chapters/course.toml"), "{e}");
        assert!(
            e.contains("unknown topology \"ring\" (loopback or pair)"),
            "{e}"
        );
        // Where: the line of the bad value.
        assert!(e.contains("line 15"), "{e}");
    }

    #[test]
    fn rejects_an_unknown_field() {
        let bad = TOML.replace("defaults =", "default =");
        let e = format!("{:#}", Course::parse(&bad).unwrap_err());
        assert!(e.contains("unknown field `default`"), "{e}");
    }

    #[test]
    fn rejects_a_chapter_without_roles() {
        let bad =
            "[[chapter]]\nnumber=\"01\"\npackage=\"ch01-x\"\ntitle=\"t\"\ntopology=\"loopback\"\n";
        assert!(Course::parse(bad).is_err());
    }
}
