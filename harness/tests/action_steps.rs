//! `action.yml`'s composite steps, run as a GitHub runner runs them, on this machine: a small
//! runner of composite steps (below) with the `GITHUB_ENV`, `GITHUB_OUTPUT` and `GITHUB_PATH`
//! files in a temp dir, `runner.os` and `runner.arch` given, `${{ }}` expressions and `if:`
//! conditions evaluated, each step under a deadline.
//!
//! - macOS, Windows and arm64 runners are refused in the first step, with one line, and nothing
//!   after it runs but the failure steps;
//! - Linux x86_64: the cargo-lab build step builds from the action's directory with its own
//!   toolchain and flags, even for a caller whose workspace pins a toolchain that does not
//!   exist, sets `RUSTFLAGS` and `build.rustflags` that break any build and a target dir of its
//!   own; it is `cargo install --path harness` into a root under RUNNER_TEMP from a target dir
//!   it deletes afterwards (as `cargo install --git` does, the README's line for a crate of your
//!   own), and the installed binary boots the lab from the caller's workspace, outside the
//!   repository: nothing it needs lives in the build tree (the guest agent is embedded); then
//!   the fixture crate's device tests (the one it marks ignored too) pass through the action's
//!   `run` with `-- --include-ignored`, on rxe0, and the second job finds cargo-lab in the cache
//!   the first one saved;
//! - a failed boot (the kernel given an init that does not exist) makes the upload step's path
//!   resolve to the guest consoles' log files. That job is not about the build: its cache store
//!   is its own, holding this suite's cargo-lab under the action's key, so it skips the build.
//!
//! What this runner does not do, and why: the packages step (`apt-get update`, then
//! scripts/setup.sh --vm) needs root and the internet, and the KVM step rewrites this host's
//! udev rules; both are reported as not run. `actions/cache` is played by a directory of each
//! test's own, empty when it starts, as on a first GitHub run (restore on an exact key, save
//! after a successful job, paths under RUNNER_TEMP only), and `actions/upload-artifact` by
//! resolving its `path` globs to files (no upload). Any other `uses:` fails the run.

mod common;

use common::{Ran, run_with_deadline};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;
use yaml_rust2::{Yaml, YamlLoader};

// ---------------------------------------------------------------------------------------------
// Expressions: the part of GitHub's expression language action.yml uses (contexts, string
// literals, ==, !=, &&, ||, !, parentheses, success() failure() cancelled() always()).

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    Str(String),
}

impl Value {
    fn truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Str(s) => !s.is_empty(),
        }
    }
    fn text(&self) -> String {
        match self {
            Value::Null => String::new(),
            Value::Bool(b) => b.to_string(),
            Value::Str(s) => s.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Op(&'static str),
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = vec![];
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '\'' {
            let mut v = String::new();
            i += 1;
            loop {
                match c.get(i) {
                    None => return Err(format!("unterminated string in {s:?}")),
                    Some('\'') if c.get(i + 1) == Some(&'\'') => {
                        v.push('\'');
                        i += 2;
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some(&x) => {
                        v.push(x);
                        i += 1;
                    }
                }
            }
            out.push(Tok::Str(v));
        } else if ch.is_alphanumeric() || ch == '_' {
            let st = i;
            while i < c.len() && (c[i].is_alphanumeric() || "_-.".contains(c[i])) {
                i += 1;
            }
            out.push(Tok::Ident(c[st..i].iter().collect()));
        } else {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            let op = match two.as_str() {
                "==" => "==",
                "!=" => "!=",
                "&&" => "&&",
                "||" => "||",
                _ => match ch {
                    '!' => "!",
                    '(' => "(",
                    ')' => ")",
                    _ => return Err(format!("unexpected {ch:?} in {s:?}")),
                },
            };
            i += op.len();
            out.push(Tok::Op(op));
        }
    }
    Ok(out)
}

/// What expressions can see.
struct Ctx<'a> {
    lookup: &'a dyn Fn(&str) -> Value,
    failed: bool,
}

struct Parser<'a, 'b> {
    toks: Vec<Tok>,
    at: usize,
    ctx: &'a Ctx<'b>,
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }
    fn eat(&mut self, op: &str) -> bool {
        if self.peek()
            == Some(&Tok::Op(match op {
                "==" => "==",
                "!=" => "!=",
                "&&" => "&&",
                "||" => "||",
                "!" => "!",
                "(" => "(",
                _ => ")",
            }))
        {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn or(&mut self) -> Result<Value, String> {
        let mut v = self.and()?;
        while self.eat("||") {
            let r = self.and()?;
            v = if v.truthy() { v } else { r };
        }
        Ok(v)
    }
    fn and(&mut self) -> Result<Value, String> {
        let mut v = self.eq()?;
        while self.eat("&&") {
            let r = self.eq()?;
            v = if v.truthy() { r } else { v };
        }
        Ok(v)
    }
    fn eq(&mut self) -> Result<Value, String> {
        let l = self.unary()?;
        for (op, want) in [("==", true), ("!=", false)] {
            if self.eat(op) {
                let r = self.unary()?;
                let same = l.text().eq_ignore_ascii_case(&r.text());
                return Ok(Value::Bool(same == want));
            }
        }
        Ok(l)
    }
    fn unary(&mut self) -> Result<Value, String> {
        if self.eat("!") {
            return Ok(Value::Bool(!self.unary()?.truthy()));
        }
        if self.eat("(") {
            let v = self.or()?;
            if !self.eat(")") {
                return Err("missing )".into());
            }
            return Ok(v);
        }
        match self.toks.get(self.at).cloned() {
            Some(Tok::Str(s)) => {
                self.at += 1;
                Ok(Value::Str(s))
            }
            Some(Tok::Ident(id)) => {
                self.at += 1;
                if self.eat("(") {
                    if !self.eat(")") {
                        return Err(format!("{id}(): arguments are not supported here"));
                    }
                    return match id.as_str() {
                        "success" => Ok(Value::Bool(!self.ctx.failed)),
                        "failure" => Ok(Value::Bool(self.ctx.failed)),
                        "cancelled" => Ok(Value::Bool(false)),
                        "always" => Ok(Value::Bool(true)),
                        _ => Err(format!("unknown function {id}()")),
                    };
                }
                match id.as_str() {
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    "null" => Ok(Value::Null),
                    _ => Ok((self.ctx.lookup)(&id)),
                }
            }
            other => Err(format!("expected a value, found {other:?}")),
        }
    }
}

fn eval(expr: &str, ctx: &Ctx) -> Result<Value, String> {
    let mut p = Parser {
        toks: lex(expr)?,
        at: 0,
        ctx,
    };
    let v = p.or()?;
    if p.at != p.toks.len() {
        return Err(format!("trailing tokens in {expr:?}"));
    }
    Ok(v)
}

/// `text` with every `${{ expr }}` replaced by its value.
fn interpolate(text: &str, ctx: &Ctx) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("${{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 3..];
        let j = after
            .find("}}")
            .ok_or_else(|| format!("unterminated ${{{{ in {text:?}"))?;
        out.push_str(&eval(&after[..j], ctx)?.text());
        rest = &after[j + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// An `if:`: an expression (with or without `${{ }}`); without a status function it means
/// `success() && (...)`.
fn condition(cond: Option<&str>, ctx: &Ctx) -> Result<bool, String> {
    let Some(c) = cond else {
        return Ok(!ctx.failed);
    };
    let c = c.trim();
    let c = c
        .strip_prefix("${{")
        .and_then(|c| c.strip_suffix("}}"))
        .unwrap_or(c);
    let status = ["success(", "failure(", "cancelled(", "always("]
        .iter()
        .any(|f| c.contains(f));
    let v = eval(c, ctx)?.truthy();
    Ok(if status { v } else { !ctx.failed && v })
}

// ---------------------------------------------------------------------------------------------
// The action and its steps.

#[derive(Debug, Clone)]
struct Step {
    name: String,
    id: Option<String>,
    cond: Option<String>,
    run: Option<String>,
    uses: Option<String>,
    with: Vec<(String, String)>,
    env: Vec<(String, String)>,
    working_directory: Option<String>,
}

#[derive(Debug)]
struct Action {
    defaults: HashMap<String, String>,
    steps: Vec<Step>,
}

fn scalar(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn pairs(y: &Yaml) -> Vec<(String, String)> {
    y.as_hash()
        .map(|h| {
            h.iter()
                .filter_map(|(k, v)| Some((scalar(k)?, scalar(v).unwrap_or_default())))
                .collect()
        })
        .unwrap_or_default()
}

fn load_action(path: &Path) -> Result<Action, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let docs = YamlLoader::load_from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc = docs.first().ok_or("action.yml is empty")?;
    if doc["runs"]["using"].as_str() != Some("composite") {
        return Err("action.yml is not a composite action".into());
    }
    let mut defaults = HashMap::new();
    if let Some(h) = doc["inputs"].as_hash() {
        for (k, v) in h {
            if let Some(k) = scalar(k) {
                defaults.insert(k, scalar(&v["default"]).unwrap_or_default());
            }
        }
    }
    let steps = doc["runs"]["steps"]
        .as_vec()
        .ok_or("runs.steps is not a list")?
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let get = |k: &str| scalar(&s[k]);
            Step {
                name: get("name")
                    .or_else(|| get("uses"))
                    .unwrap_or_else(|| format!("step {}", i + 1)),
                id: get("id"),
                cond: get("if"),
                run: get("run"),
                uses: get("uses"),
                with: pairs(&s["with"]),
                env: pairs(&s["env"]),
                working_directory: get("working-directory"),
            }
        })
        .collect();
    Ok(Action { defaults, steps })
}

// ---------------------------------------------------------------------------------------------
// The runner.

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Success,
    Failure,
    /// Its `if:` was false.
    Skipped,
    /// Left out by the test, with the reason.
    NotRun(String),
}

#[derive(Debug)]
struct StepReport {
    name: String,
    outcome: Outcome,
    output: String,
}

#[derive(Debug, Default)]
struct Report {
    steps: Vec<StepReport>,
    /// upload-artifact steps that ran: the artifact's name and the files its `path` resolved to.
    uploads: Vec<(String, Vec<PathBuf>)>,
}

impl Report {
    fn step(&self, prefix: &str) -> &StepReport {
        self.steps
            .iter()
            .find(|s| s.name.starts_with(prefix))
            .unwrap_or_else(|| panic!("no step {prefix:?} in\n{}", self.summary()))
    }
    fn summary(&self) -> String {
        let mut s = String::new();
        for st in &self.steps {
            s.push_str(&format!(
                "== {} ({:?})\n{}\n",
                st.name, st.outcome, st.output
            ));
        }
        for (n, f) in &self.uploads {
            s.push_str(&format!("== upload {n}: {f:?}\n"));
        }
        s
    }
    fn failed(&self) -> bool {
        self.steps.iter().any(|s| s.outcome == Outcome::Failure)
    }
}

struct Runner {
    action_dir: PathBuf,
    /// RUNNER_TEMP
    temp: PathBuf,
    workspace: PathBuf,
    os: String,
    arch: String,
    inputs: HashMap<String, String>,
    /// The environment the job starts with.
    env: Vec<(String, String)>,
    /// Step name prefixes left out, with why.
    not_run: Vec<(&'static str, &'static str)>,
    cache_store: PathBuf,
    /// Stop after this many steps have run (a refused platform's run is over after one).
    halt_after: Option<usize>,
}

/// Parses a GITHUB_ENV / GITHUB_OUTPUT file: `NAME=value` lines and `NAME<<DELIM` blocks.
fn file_commands(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = vec![];
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if let Some((k, delim)) = l.split_once("<<") {
            let mut v = vec![];
            for l in lines.by_ref() {
                if l == delim {
                    break;
                }
                v.push(l);
            }
            out.push((k.to_string(), v.join("\n")));
        } else if let Some((k, v)) = l.split_once('=') {
            out.push((k.to_string(), v.to_string()));
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &dest)?;
        } else {
            // Unlinked first, as an archive's extraction does: a running binary cannot be
            // written over (ETXTBSY), but it can be replaced.
            let _ = std::fs::remove_file(&dest);
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}

impl Runner {
    fn run(&self) -> Result<Report, String> {
        let action = load_action(&self.action_dir.join("action.yml"))?;
        let mut inputs = action.defaults.clone();
        for (k, v) in &self.inputs {
            if !inputs.contains_key(k) {
                return Err(format!("action.yml has no input {k}"));
            }
            inputs.insert(k.clone(), v.clone());
        }
        let files = self.temp.join("_runner_file_commands");
        std::fs::create_dir_all(&files).map_err(|e| e.to_string())?;
        let mut job_env: Vec<(String, String)> = vec![];
        let mut paths: Vec<String> = vec![];
        let mut outputs: HashMap<String, HashMap<String, String>> = HashMap::new();
        let mut report = Report::default();
        let mut failed = false;
        let mut to_save: Vec<(PathBuf, Vec<PathBuf>)> = vec![];
        for (n, step) in action.steps.iter().enumerate() {
            let ran = report
                .steps
                .iter()
                .filter(|s| matches!(s.outcome, Outcome::Success | Outcome::Failure))
                .count();
            if self.halt_after.is_some_and(|h| ran >= h) {
                break;
            }
            let lookup = |name: &str| -> Value {
                let parts: Vec<&str> = name.split('.').collect();
                let s = |v: &str| Value::Str(v.to_string());
                match parts.as_slice() {
                    ["inputs", k] => inputs.get(*k).map(|v| s(v)).unwrap_or(Value::Null),
                    ["steps", id, "outputs", k] => outputs
                        .get(*id)
                        .and_then(|o| o.get(*k))
                        .map(|v| s(v))
                        .unwrap_or(Value::Null),
                    ["runner", "os"] => s(&self.os),
                    ["runner", "arch"] => s(&self.arch),
                    ["runner", "temp"] => s(&self.temp.to_string_lossy()),
                    ["github", "job"] => s("action-steps"),
                    ["github", "action_path"] => s(&self.action_dir.to_string_lossy()),
                    ["github", "workspace"] => s(&self.workspace.to_string_lossy()),
                    ["github", "run_attempt"] => s("1"),
                    ["strategy", "job-index"] => s("0"),
                    ["env", k] => job_env
                        .iter()
                        .chain(self.env.iter())
                        .find(|(n, _)| n == k)
                        .map(|(_, v)| s(v))
                        .unwrap_or(Value::Null),
                    _ => Value::Null,
                }
            };
            let ctx = Ctx {
                lookup: &lookup,
                failed,
            };
            let name = interpolate(&step.name, &ctx)?;
            if let Some((_, why)) = self.not_run.iter().find(|(p, _)| name.starts_with(p)) {
                report.steps.push(StepReport {
                    name,
                    outcome: Outcome::NotRun(why.to_string()),
                    output: String::new(),
                });
                continue;
            }
            if !condition(step.cond.as_deref(), &ctx)? {
                report.steps.push(StepReport {
                    name,
                    outcome: Outcome::Skipped,
                    output: String::new(),
                });
                continue;
            }
            let with: Vec<(String, String)> = step
                .with
                .iter()
                .map(|(k, v)| Ok((k.clone(), interpolate(v, &ctx)?)))
                .collect::<Result<_, String>>()?;
            let with_of = |k: &str| {
                with.iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            let mut step_outputs = HashMap::new();
            let (ok, output) = if let Some(uses) = &step.uses {
                if uses.starts_with("actions/upload-artifact@") {
                    let mut found = vec![];
                    let mut excluded = vec![];
                    let mut rooted: Option<String> = None;
                    for line in with_of("path")
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                    {
                        let (neg, pat) = match line.strip_prefix('!') {
                            Some(p) => (true, p),
                            None => (false, line),
                        };
                        let pat = if Path::new(pat).is_absolute() {
                            pat.to_string()
                        } else {
                            self.workspace.join(pat).to_string_lossy().into_owned()
                        };
                        // The directory part before the first wildcard: a pattern rooted at `/`
                        // (an empty expression in front of `/**/*.log`) would walk the whole
                        // filesystem; this runner reports it instead.
                        let fixed: PathBuf = Path::new(&pat)
                            .components()
                            .take_while(|c| {
                                !c.as_os_str().to_string_lossy().contains(['*', '?', '['])
                            })
                            .collect();
                        if fixed.parent().is_none() {
                            rooted = Some(line.to_string());
                            break;
                        }
                        let hits: Vec<PathBuf> = glob::glob(&pat)
                            .map_err(|e| format!("upload path {pat:?}: {e}"))?
                            .flatten()
                            .filter(|p| p.is_file())
                            .collect();
                        if neg { &mut excluded } else { &mut found }.extend(hits);
                    }
                    found.retain(|f| !excluded.contains(f));
                    found.sort();
                    found.dedup();
                    let name = with_of("name");
                    if let Some(line) = rooted {
                        report.uploads.push((name, vec![]));
                        (
                            false,
                            format!(
                                "upload path {line:?} is rooted at / (an expression in it was empty)"
                            ),
                        )
                    } else {
                        let ok = !name.is_empty();
                        report.uploads.push((name.clone(), found.clone()));
                        (ok, format!("artifact {name:?}: {} files", found.len()))
                    }
                } else if uses.starts_with("actions/cache@") {
                    let key = with_of("key");
                    if key.is_empty() {
                        return Err(format!("{name}: actions/cache without a key"));
                    }
                    let cached: Vec<PathBuf> = with_of("path")
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(PathBuf::from)
                        .collect();
                    if let Some(p) = cached.iter().find(|p| !p.starts_with(&self.temp)) {
                        return Err(format!(
                            "{name}: this runner caches paths under RUNNER_TEMP only, not {}",
                            p.display()
                        ));
                    }
                    let store = self.cache_store.join(&key);
                    let hit = store.is_dir();
                    if hit {
                        for (i, p) in cached.iter().enumerate() {
                            copy_tree(&store.join(i.to_string()), p)
                                .map_err(|e| format!("{name}: restoring {}: {e}", p.display()))?;
                        }
                    } else {
                        to_save.push((store, cached));
                    }
                    step_outputs.insert("cache-hit".to_string(), hit.to_string());
                    (true, format!("cache {key}: hit {hit}"))
                } else {
                    (false, format!("this runner does not know {uses}"))
                }
            } else {
                let script = step
                    .run
                    .as_deref()
                    .ok_or(format!("{name}: no run, no uses"))?;
                let script = interpolate(script, &ctx)?;
                let mut env: Vec<(String, String)> = self.env.clone();
                let set = |env: &mut Vec<(String, String)>, k: &str, v: &str| {
                    env.retain(|(n, _)| n != k);
                    env.push((k.to_string(), v.to_string()));
                };
                for (k, v) in &job_env {
                    set(&mut env, k, v);
                }
                for (k, v) in &step.env {
                    set(&mut env, k, &interpolate(v, &ctx)?);
                }
                let file = |what: &str| files.join(format!("{what}_{n}"));
                for (var, what) in [
                    ("GITHUB_ENV", "set_env"),
                    ("GITHUB_OUTPUT", "set_output"),
                    ("GITHUB_PATH", "add_path"),
                ] {
                    std::fs::write(file(what), "").map_err(|e| e.to_string())?;
                    set(&mut env, var, &file(what).to_string_lossy());
                }
                let base_path = env
                    .iter()
                    .find(|(k, _)| k == "PATH")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                let mut path = paths.clone();
                path.push(base_path);
                set(&mut env, "PATH", &path.join(":"));
                for (k, v) in [
                    (
                        "GITHUB_ACTION_PATH",
                        self.action_dir.to_string_lossy().as_ref(),
                    ),
                    (
                        "GITHUB_WORKSPACE",
                        self.workspace.to_string_lossy().as_ref(),
                    ),
                    ("GITHUB_JOB", "action-steps"),
                    ("GITHUB_RUN_ATTEMPT", "1"),
                    ("GITHUB_ACTIONS", "true"),
                    ("CI", "true"),
                    ("RUNNER_OS", &self.os),
                    ("RUNNER_ARCH", &self.arch),
                    ("RUNNER_TEMP", self.temp.to_string_lossy().as_ref()),
                ] {
                    set(&mut env, k, v);
                }
                let script_file = files.join(format!("step_{n}.sh"));
                std::fs::write(&script_file, &script).map_err(|e| e.to_string())?;
                let cwd = match &step.working_directory {
                    Some(d) => self.workspace.join(interpolate(d, &ctx)?),
                    None => self.workspace.clone(),
                };
                let mut cmd = Command::new("bash");
                cmd.args(["--noprofile", "--norc", "-e", "-o", "pipefail"])
                    .arg(&script_file)
                    .current_dir(cwd)
                    .env_clear()
                    .envs(env.iter().map(|(k, v)| (k, v)));
                let limit = if name.starts_with("Build cargo-lab") {
                    Duration::from_secs(1800)
                } else {
                    Duration::from_secs(900)
                };
                let r: Ran = run_with_deadline(cmd, limit);
                for (k, v) in file_commands(&file("set_env")) {
                    job_env.retain(|(n, _)| *n != k);
                    job_env.push((k, v));
                }
                step_outputs.extend(file_commands(&file("set_output")));
                let added = std::fs::read_to_string(file("add_path")).unwrap_or_default();
                for p in added.lines().filter(|l| !l.is_empty()) {
                    paths.insert(0, p.to_string());
                }
                (r.ok(), r.text())
            };
            if let Some(id) = &step.id {
                outputs.insert(id.clone(), step_outputs);
            }
            failed |= !ok;
            report.steps.push(StepReport {
                name,
                outcome: if ok {
                    Outcome::Success
                } else {
                    Outcome::Failure
                },
                output,
            });
        }
        // actions/cache saves in the job's post steps, when the job succeeded.
        if !failed {
            for (store, cached) in to_save {
                for (i, p) in cached.iter().enumerate() {
                    if p.is_dir() {
                        copy_tree(p, &store.join(i.to_string())).map_err(|e| e.to_string())?;
                    }
                }
            }
        }
        Ok(report)
    }
}

// ---------------------------------------------------------------------------------------------
// The tests.

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository root")
        .to_path_buf()
}

/// This process's environment as a fresh job would have it: nothing of this suite's cargo run
/// or lab (its state dir, provider, device).
fn job_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            let suite = (k.starts_with("CARGO") && k != "CARGO_HOME")
                || matches!(
                    k.as_str(),
                    "RUSTUP_TOOLCHAIN"
                        | "RUSTFLAGS"
                        | "RUSTDOCFLAGS"
                        | "RUST_TEST_THREADS"
                        | "LAB_STATE_DIR"
                        | "LAB_PROVIDER"
                        | "LAB_DEVICE"
                        | "LAB_GUEST"
                        | "LAB_ACCEL"
                        | "LAB_PCAP"
                        | "GITHUB_ENV"
                        | "GITHUB_OUTPUT"
                        | "GITHUB_PATH"
                );
            !suite
        })
        .collect()
}

const NOT_RUN: &[(&str, &str)] = &[
    (
        "rxe-lab packages",
        "needs root and the internet (apt-get update); it installs what `cargo-lab setup --vm` does",
    ),
    ("KVM, when", "rewrites this host's udev rules for /dev/kvm"),
];

fn runner(temp: &Path, workspace: &Path, os: &str, arch: &str) -> Runner {
    Runner {
        action_dir: repo(),
        temp: temp.to_path_buf(),
        workspace: workspace.to_path_buf(),
        os: os.into(),
        arch: arch.into(),
        inputs: HashMap::new(),
        env: job_env(),
        not_run: NOT_RUN.to_vec(),
        // Each test's jobs share one store, empty when the test starts: a first run on GitHub.
        cache_store: temp.join("_actions_cache"),
        halt_after: None,
    }
}

/// Stops a lab the action booted (its state dir under RUNNER_TEMP), whatever the test did.
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let bin = self.0.join("rxe-lab/bin/cargo-lab");
        if bin.exists() {
            let mut c = Command::new(bin);
            c.arg("down")
                .current_dir(&self.0)
                .env("LAB_STATE_DIR", self.0.join("rxe-lab/labs"));
            let _ = run_with_deadline(c, Duration::from_secs(120));
        }
    }
}

fn tempdir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("temp dir")
}

/// The runs that boot labs take turns.
static BOOTS: Mutex<()> = Mutex::new(());

#[test]
fn expressions_evaluate_as_on_github() {
    let vals: HashMap<&str, &str> = [("inputs.run", ""), ("inputs.x", "kvm")].into();
    let lookup = |n: &str| {
        vals.get(n)
            .map(|v| Value::Str(v.to_string()))
            .unwrap_or(Value::Null)
    };
    for (failed, cond, want) in [
        (false, None, true),
        (true, None, false),
        (false, Some("inputs.run != ''"), false),
        (true, Some("always() && inputs.run != ''"), false),
        (true, Some("failure() || cancelled()"), true),
        (false, Some("failure() || cancelled()"), false),
        (false, Some("${{ inputs.x == 'KVM' }}"), true),
        (
            false,
            Some("!(inputs.x == 'tcg') && inputs.missing != 'true'"),
            true,
        ),
    ] {
        let ctx = Ctx {
            lookup: &lookup,
            failed,
        };
        assert_eq!(
            condition(cond, &ctx),
            Ok(want),
            "{cond:?} (failed: {failed})"
        );
    }
    let ctx = Ctx {
        lookup: &lookup,
        failed: false,
    };
    assert_eq!(
        interpolate("a ${{ inputs.x }} b ${{inputs.none}}c", &ctx).as_deref(),
        Ok("a kvm b c")
    );
    // Bad input is an error, not a panic.
    for bad in [
        "inputs.x ==",
        "'open",
        "inputs.x = 'y'",
        "f(1)",
        "(inputs.x",
    ] {
        assert!(eval(bad, &ctx).is_err(), "{bad:?}");
    }
    assert!(interpolate("${{ inputs.x", &ctx).is_err());
    let files = tempdir("gh-files.");
    let f = files.path().join("out");
    std::fs::write(&f, "a=1\nb<<EOF\nx\ny\nEOF\nc=2=3\n").unwrap();
    assert_eq!(
        file_commands(&f),
        [("a", "1"), ("b", "x\ny"), ("c", "2=3")].map(|(k, v)| (k.to_string(), v.to_string()))
    );
}

#[test]
fn macos_windows_and_arm_runners_are_refused_in_the_first_step() {
    for (os, arch) in [
        ("macOS", "ARM64"),
        ("macOS", "X64"),
        ("Windows", "X64"),
        ("Linux", "ARM64"),
        ("Linux", "ARM"),
    ] {
        let temp = tempdir("runner-temp.");
        let ws = tempdir("workspace.");
        let mut r = runner(temp.path(), ws.path(), os, arch);
        // The refusal and the log upload; a third step would be one too many (and, past the
        // refusal, the build and a boot: minutes).
        r.halt_after = Some(2);
        let report = r.run().expect("the runner runs action.yml");
        let first = &report.steps[0];
        assert_eq!(
            first.outcome,
            Outcome::Failure,
            "{os} {arch}:\n{}",
            report.summary()
        );
        let errors: Vec<&str> = first
            .output
            .lines()
            .filter(|l| l.starts_with("::error::"))
            .collect();
        assert_eq!(errors.len(), 1, "{os} {arch}: one line:\n{}", first.output);
        assert!(
            errors[0].contains("Linux x86_64") && errors[0].contains(&format!("{os} {arch}")),
            "{os} {arch}: {}",
            errors[0]
        );
        // Nothing else ran but what runs on failure.
        for s in &report.steps[1..] {
            assert!(
                matches!(s.outcome, Outcome::Skipped | Outcome::NotRun(_))
                    || s.name.starts_with("Keep the lab's logs"),
                "{os} {arch}: step {:?} ran after the refusal:\n{}",
                s.name,
                report.summary()
            );
        }
    }
}

/// A caller's workspace that breaks any build that reads it: a toolchain pin that does not
/// exist, RUSTFLAGS and build.rustflags rustc rejects, a target dir of its own.
fn hostile_caller(ws: &Path, r: &mut Runner) {
    std::fs::write(
        ws.join("rust-toolchain.toml"),
        "[toolchain]\nchannel = \"rxe-lab-caller-pin\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.join(".cargo")).unwrap();
    std::fs::write(
        ws.join(".cargo/config.toml"),
        "[build]\nrustflags = [\"-Zrxe-lab-caller-flag\"]\n",
    )
    .unwrap();
    r.env
        .push(("RUSTFLAGS".into(), "-Zrxe-lab-caller-flag".into()));
    r.env.push((
        "CARGO_TARGET_DIR".into(),
        ws.join("caller-target").to_string_lossy().into_owned(),
    ));
}

/// A copy of the fixture crate (an outside crate with device tests) as the caller's workspace.
fn fixture_workspace() -> tempfile::TempDir {
    let src = repo().join("harness/tests/fixtures/rdma-probe");
    let dir = tempdir("rdma-probe.");
    for rel in ["Cargo.toml", "src/lib.rs", "tests/device.rs"] {
        let to = dir.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src.join(rel), &to).unwrap();
    }
    dir
}

#[test]
fn on_linux_x64_the_fixture_crates_device_tests_pass_through_the_action() {
    let _turn = BOOTS.lock().unwrap_or_else(|e| e.into_inner());
    let temp = tempdir("runner-temp.");
    let _down = Down(temp.path().to_path_buf());
    let accel = std::env::var("LAB_ACCEL").unwrap_or_default();

    // 1. A caller whose workspace would break the build: the action builds cargo-lab (unless
    // the cache has it for these sources) and boots the lab. No `run`.
    let ws = tempdir("caller.");
    let mut r = runner(temp.path(), ws.path(), "Linux", "X64");
    hostile_caller(ws.path(), &mut r);
    r.inputs.insert("accel".into(), accel.clone());
    let report = r.run().expect("the runner runs action.yml");
    assert!(!report.failed(), "{}", report.summary());
    let build = report.step("Build cargo-lab");
    assert_eq!(
        build.outcome,
        Outcome::Success,
        "the first job builds cargo-lab (an empty cache):\n{}",
        report.summary()
    );
    assert!(
        !ws.path().join("caller-target").exists(),
        "the build used the caller's CARGO_TARGET_DIR"
    );
    // Installed, and its target dir gone before the boot below: what `cargo install` leaves.
    let home = temp.path().join("rxe-lab");
    assert!(
        home.join("bin/cargo-lab").is_file(),
        "no cargo-lab installed in {}",
        home.join("bin").display()
    );
    assert!(
        !home.join("build").exists(),
        "the build step left its target dir {}",
        home.join("build").display()
    );
    let boot = report.step("Boot the lab");
    assert!(boot.output.contains("rxe0"), "{}", boot.output);
    // The lab's artefacts were built where the cache step keeps them (LAB_CACHE_DIR).
    let lab_cache = temp.path().join("rxe-lab/cache");
    let built: Vec<String> = std::fs::read_dir(&lab_cache)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        built.iter().any(|f| f.starts_with("initramfs-")),
        "no initramfs in {}: {built:?}",
        lab_cache.display()
    );
    for step in ["rxe-lab packages", "KVM, when"] {
        eprintln!("not run here: {step}: {:?}", report.step(step).outcome);
    }

    // 2. The fixture crate as the caller, with `run`: its device tests, the ignored one too,
    // through cargo's runner, on the lab booted above (the cache holds cargo-lab now).
    let ws = fixture_workspace();
    let mut r = runner(temp.path(), ws.path(), "Linux", "X64");
    r.inputs.insert("accel".into(), accel);
    r.inputs.insert(
        "run".into(),
        "cargo test -- --include-ignored --nocapture 2>&1 | tee \"$RUNNER_TEMP/probe.log\"".into(),
    );
    let report = r.run().expect("the runner runs action.yml");
    assert!(!report.failed(), "{}", report.summary());
    assert_eq!(
        report.step("Build cargo-lab").outcome,
        Outcome::Skipped,
        "the second run should find cargo-lab in the cache:\n{}",
        report.summary()
    );
    let restored = report.step("lab artefacts from the cache");
    assert!(
        restored.output.contains("hit true"),
        "the second run should find the lab's artefacts in the cache:\n{}",
        report.summary()
    );
    let log = std::fs::read_to_string(temp.path().join("probe.log")).unwrap_or_default();
    for line in [
        "rdma-probe: device rxe0 opened=true",
        "rdma-probe: ignored test ran on rxe0",
    ] {
        assert!(
            log.contains(line),
            "no {line:?} in the run's output:\n{log}"
        );
    }
    assert_eq!(report.step("Stop the lab").outcome, Outcome::Success);
}

/// A cache store of the test's own that holds cargo-lab under the key the action computes for
/// these sources: this suite's build of the same sources (`CARGO_BIN_EXE_cargo-lab`), so that a
/// job which is not about the build step restores it instead of building it again (about a
/// minute on a 2-core machine). The x64 test's store holds only what the action's build made.
fn store_with_this_cargo_lab() -> tempfile::TempDir {
    let store = tempdir("action-cache.");
    let temp = tempdir("runner-temp.");
    let ws = tempdir("caller.");
    let mut r = runner(temp.path(), ws.path(), "Linux", "X64");
    r.cache_store = store.path().to_path_buf();
    // The steps that run up to the cache lookup: the platform check, LIBCLANG_PATH, the key and
    // the lookup itself (a miss, in an empty store).
    r.halt_after = Some(4);
    let report = r.run().expect("the runner runs action.yml");
    let lookup = &report.step("cargo-lab from the cache").output;
    let key = lookup
        .strip_prefix("cache ")
        .and_then(|rest| rest.strip_suffix(": hit false"))
        .unwrap_or_else(|| panic!("no cache miss reported:\n{}", report.summary()));
    // A halted run counts as a job that succeeded: it may have saved an empty entry.
    let entry = store.path().join(key);
    let _ = std::fs::remove_dir_all(&entry);
    // The cached path is the action's bin dir, restored as entry/0.
    std::fs::create_dir_all(entry.join("0")).expect("cache entry");
    std::fs::copy(env!("CARGO_BIN_EXE_cargo-lab"), entry.join("0/cargo-lab"))
        .expect("copying this suite's cargo-lab");
    store
}

#[test]
fn a_failed_boot_uploads_the_guest_console_logs() {
    let _turn = BOOTS.lock().unwrap_or_else(|e| e.into_inner());
    let temp = tempdir("runner-temp.");
    let _down = Down(temp.path().to_path_buf());
    let ws = tempdir("caller.");
    let store = store_with_this_cargo_lab();
    let mut r = runner(temp.path(), ws.path(), "Linux", "X64");
    r.cache_store = store.path().to_path_buf();
    // A kernel told to start an init that does not exist panics at once: the boot fails (both
    // tries), as a broken kernel or initramfs would make it.
    r.env.push((
        "LAB_VM_APPEND".into(),
        "rdinit=/rxe-lab-no-such-init".into(),
    ));
    r.env.push(("LAB_BOOT_TIMEOUT_SECS".into(), "90".into()));
    r.inputs.insert(
        "accel".into(),
        std::env::var("LAB_ACCEL").unwrap_or_default(),
    );
    let report = r.run().expect("the runner runs action.yml");
    assert_eq!(
        report.step("Build cargo-lab").outcome,
        Outcome::Skipped,
        "cargo-lab should come from the test's cache:\n{}",
        report.summary()
    );
    assert_eq!(
        report.step("Boot the lab").outcome,
        Outcome::Failure,
        "{}",
        report.summary()
    );
    assert_eq!(
        report.step("Keep the lab's logs").outcome,
        Outcome::Success,
        "{}",
        report.summary()
    );
    let (name, files) = report.uploads.first().expect("the upload step ran");
    assert!(name.starts_with("rxe-lab-logs-"), "artifact name {name:?}");
    let consoles: Vec<&PathBuf> = files
        .iter()
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("console-"))
        })
        .collect();
    assert!(
        !consoles.is_empty(),
        "the upload path resolves to no console log ({files:?}):\n{}",
        report.summary()
    );
    let text: String = consoles
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect();
    assert!(
        text.contains("rxe-lab-no-such-init") || text.contains("Kernel panic"),
        "the uploaded consoles do not show the failed boot:\n{text}"
    );
}
