//! Diagrams generated from the project's own data, never drawn by hand. Each is a Graphviz
//! graph (DOT) built here from the data, laid out by Graphviz's `dot` into SVG: Graphviz is the
//! standard graph layout tool and Debian/Ubuntu package it (`graphviz`, installed by
//! `scripts/setup.sh --dev`), so the book needs no JavaScript renderer and its SVG is in the
//! page when it loads.
//!
//! | name | drawn from |
//! |---|---|
//! | `qp-states` | [`lab::transition`]: every legal RC transition with the attributes it requires |
//! | `objects` | [`lab::tree::OBJECTS`]: the object tree, and [`lab::tree::teardown_order`] |
//! | `failures` | chapter 08's summary snapshot: each deliberate mistake and the status rxe gives |

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use harness::host_tools::captured_within;
use lab::{QpState, tree};

/// The names [`render`] knows.
pub const NAMES: &[&str] = &["qp-states", "objects", "failures"];

/// The SVG of diagram `name`.
pub fn render(repo: &Path, name: &str) -> Result<String> {
    let dot = match name {
        "qp-states" => qp_states(),
        "objects" => objects(),
        "failures" => failures(repo)?,
        other => bail!("unknown diagram {other:?} (known: {})", NAMES.join(", ")),
    };
    svg(&dot).with_context(|| format!("diagram {name}"))
}

/// Runs `dot -Tsvg` on a graph (given on its stdin), with a deadline.
pub fn svg(dot: &str) -> Result<String> {
    let cmd = duct::cmd("dot", ["-Tsvg"]).stdin_bytes(dot);
    let done = captured_within(cmd, Duration::from_secs(60)).context(
        "running Graphviz's dot (not installed?)\n  fix: scripts/setup.sh --book \
         (installs the graphviz package)",
    )?;
    let Some(done) = done else {
        bail!("dot did not finish within 60 s: killed");
    };
    if !done.status.success() {
        bail!(
            "dot failed ({}): {}",
            done.status,
            String::from_utf8_lossy(&done.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&done.stdout).into_owned())
}

const STATES: &[QpState] = QpState::ALL;

fn short_mask(m: lab::QpAttrMask) -> String {
    m.iter_names()
        .map(|n| n.trim_start_matches("IBV_QP_"))
        .collect::<Vec<_>>()
        .join("\\n")
}

/// The RC state machine: the forward path with the attributes each step requires, the
/// optional-only self loops, and "any state -> RESET / ERR" drawn once per state, dashed.
pub fn qp_states() -> String {
    let mut s = String::from(
        "digraph qp_states {\n  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", \
         fillcolor=\"#eef3fb\", fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\", \
         fontsize=9];\n",
    );
    for &st in STATES {
        let _ = writeln!(s, "  {} [label=\"{}\"];", st.short(), st.short());
    }
    for &from in STATES {
        for &to in STATES {
            let Some(t) = lab::transition(from, to) else {
                continue;
            };
            let (f, d) = (from.short(), to.short());
            if matches!(to, QpState::Reset | QpState::Err) {
                if from != to {
                    let _ = writeln!(s, "  {f} -> {d} [style=dashed, color=\"#999999\"];");
                }
                continue;
            }
            let label = if from == to {
                "optional attributes only".to_string()
            } else if t.required.is_empty() {
                "(nothing required)".to_string()
            } else {
                short_mask(t.required)
            };
            let _ = writeln!(s, "  {f} -> {d} [label=\"{label}\"];");
        }
    }
    s.push_str("  { rank=same; SQD; SQE; }\n}\n");
    s
}

/// The object tree: an arrow from each object to the objects it is created from, labelled with
/// the creating verb; a note gives the teardown order.
pub fn objects() -> String {
    let mut s = String::from(
        "digraph objects {\n  rankdir=BT;\n  node [shape=box, style=\"rounded,filled\", \
         fillcolor=\"#f4f1e8\", fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\", \
         fontsize=9];\n",
    );
    for o in tree::OBJECTS {
        let _ = writeln!(
            s,
            "  \"{}\" [label=\"{}\\n{}\\n{} / {}\"];",
            o.name, o.name, o.lab_type, o.create, o.destroy
        );
    }
    for o in tree::OBJECTS {
        for p in o.parents {
            let _ = writeln!(s, "  \"{}\" -> \"{p}\";", o.name);
        }
        for p in o.optional_parents {
            let _ = writeln!(
                s,
                "  \"{}\" -> \"{p}\" [style=dashed, label=\"optional\"];",
                o.name
            );
        }
    }
    let order = tree::teardown_order().join(" → ");
    let _ = writeln!(
        s,
        "  label=\"teardown order: {order}\";\n  labelloc=b;\n  fontname=\"Helvetica\";\n}}"
    );
    s
}

/// Chapter 08's deliberate mistakes grouped by what rxe produced, from the summary snapshot
/// the chapter's test checks.
pub fn failures(repo: &Path) -> Result<String> {
    let path = "chapters/08-failure-modes/tests/snapshots/e2e__all_summary.snap";
    let snap =
        std::fs::read_to_string(repo.join(path)).with_context(|| format!("reading {path}"))?;
    let body = crate::snapshot_body(&snap).context("not a snapshot")?;
    let status = regex::Regex::new(r"\b(IBV_[A-Z_]+|E[A-Z]+) \((\d+)\)").unwrap();
    let mut s = String::from(
        "digraph failures {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n  \
         edge [color=\"#777777\", fontname=\"Helvetica\"];\n",
    );
    let mut seen: Vec<String> = vec![];
    let mut cases = 0;
    // Columns from the header line: "case", "what rxe produces", "result".
    let mut lines = body
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("case "));
    let header = lines
        .next()
        .context("no header line (case / what rxe produces)")?;
    let what_at = header
        .find("what rxe produces")
        .context("no 'what' column")?;
    let result_at = header.find("result").context("no 'result' column")?;
    for line in lines {
        if line.len() < result_at || line.contains("cases behaved") {
            continue;
        }
        let case = line[..what_at].trim();
        let what = line[what_at..result_at].trim();
        cases += 1;
        let _ = writeln!(
            s,
            "  \"{case}\" [shape=box, style=\"rounded,filled\", fillcolor=\"#fbeeee\"];"
        );
        // What the status does not say ("at RTR", "on one device / ..."), on the edge.
        let rest = status.replace_all(what, "");
        let rest = rest.trim_matches(|c: char| c == ',' || c == '/' || c.is_whitespace());
        let label = rest.replace('"', "'");
        let mut any = false;
        for c in status.captures_iter(what) {
            let st = format!("{} ({})", &c[1], &c[2]);
            if !seen.contains(&st) {
                let _ = writeln!(s, "  \"{st}\" [shape=note];");
                seen.push(st.clone());
            }
            let _ = writeln!(
                s,
                "  \"{case}\" -> \"{st}\" [label=\"{label}\", fontsize=9];"
            );
            any = true;
        }
        if !any {
            let _ = writeln!(s, "  \"{what}\" [shape=note];");
            let _ = writeln!(s, "  \"{case}\" -> \"{what}\";");
        }
    }
    if cases == 0 {
        bail!("{path}: no cases found");
    }
    s.push_str("}\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_machine_has_the_forward_path_with_its_required_attributes() {
        let d = qp_states();
        assert!(
            d.contains("RESET -> INIT [label=\"ACCESS_FLAGS\\nPKEY_INDEX\\nPORT\"]"),
            "{d}"
        );
        assert!(d.contains("INIT -> RTR [label=\"AV\\n"), "{d}");
        assert!(d.contains("RTR -> RTS [label=\"TIMEOUT"), "{d}");
        assert!(d.contains("RTS -> ERR [style=dashed"), "{d}");
        // Illegal shortcuts are not drawn.
        assert!(!d.contains("INIT -> RTS"), "{d}");
        assert!(!d.contains("ERR -> INIT"), "{d}");
    }

    #[test]
    fn the_object_tree_points_children_at_parents() {
        let d = objects();
        assert!(d.contains("\"QP\" -> \"PD\""), "{d}");
        assert!(d.contains("\"MR\" -> \"PD\""), "{d}");
        assert!(d.contains("\"CQ\" -> \"channel\" [style=dashed"), "{d}");
        assert!(d.contains("teardown order: QP"), "{d}");
    }

    #[test]
    fn every_case_of_chapter_08_is_drawn_with_its_status() {
        let repo = harness::course::workspace_root().unwrap();
        let d = failures(&repo).unwrap();
        // A case without a hyphen, a status with a qualifier, and one that is no status.
        assert!(
            d.contains("\"memlock\" -> \"ENOMEM (12)\" [label=\"from ibv_reg_mr\""),
            "{d}"
        );
        assert!(
            d.contains("\"skip-rtr\" -> \"EINVAL (22)\" [label=\"\""),
            "{d}"
        );
        assert!(
            d.contains("\"cq-overflow\" -> \"IBV_EVENT_CQ_ERR per lost completion\""),
            "{d}"
        );
        assert!(
            d.contains("\"recv-cq-overflow\" -> \"IBV_EVENT_CQ_ERR; the responder's QP to ERR\""),
            "{d}"
        );
        assert_eq!(d.matches("fillcolor=\"#fbeeee\"").count(), 17, "{d}");
    }
}
