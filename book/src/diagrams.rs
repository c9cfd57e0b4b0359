//! Diagrams generated from the project's own data, never drawn by hand. Each is a Graphviz
//! graph (DOT) built here from the data, laid out by Graphviz's `dot` into SVG: Graphviz is the
//! standard graph layout tool and Debian/Ubuntu package it (`graphviz`, installed by
//! `scripts/setup.sh --dev`), so the book needs no JavaScript renderer and its SVG is in the
//! page when it loads.
//!
//! | name | drawn from |
//! |---|---|
//! | `qp-states` | `contracts::verbs::transition`: every legal RC transition with the attributes it requires |
//! | `objects` | `contracts::verbs::tree::OBJECTS`: the object tree, and `teardown_order` |
//! | `failures` | [`contracts::failures::CASES`]: chapter 08's deliberate mistakes and the status rxe gives |

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use contracts::failures;
use contracts::verbs::{QpState, tree};
use harness::host_tools::captured_within;

/// The names [`render`] knows.
pub const NAMES: &[&str] = &["qp-states", "objects", "failures"];

/// The SVG of diagram `name`. Every diagram is drawn from data compiled in; `_repo` (the
/// workspace root) is there for one drawn from the repository's files.
pub fn render(_repo: &Path, name: &str) -> Result<String> {
    let dot = match name {
        "qp-states" => qp_states(),
        "objects" => objects(),
        "failures" => failures(),
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

fn short_mask(m: contracts::verbs::QpAttrMask) -> String {
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
            let Some(t) = contracts::verbs::transition(from, to) else {
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

/// Chapter 08's deliberate mistakes grouped by what rxe (Linux 6.1) produces, from the
/// chapter's table of cases (`contracts::failures`), which the chapter checks on rxe and its
/// tests keep equal to its summary snapshot.
pub fn failures() -> String {
    let mut s = String::from(
        "digraph failures {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n  \
         edge [color=\"#777777\", fontname=\"Helvetica\"];\n",
    );
    let mut seen: Vec<String> = vec![];
    for c in failures::CASES {
        let case = c.name;
        let _ = writeln!(
            s,
            "  \"{case}\" [shape=box, style=\"rounded,filled\", fillcolor=\"#fbeeee\"];"
        );
        // What the status does not say ("at RTR", "on one device / ..."), on the edge.
        let words = c.outcome.words();
        let rest = words.trim_matches(|c: char| c == ',' || c == '/' || c.is_whitespace());
        let label = rest.replace('"', "'");
        let mut any = false;
        for (name, value) in c.outcome.statuses() {
            let st = format!("{name} ({value})");
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
            // No numbered status ("IBV_EVENT_CQ_ERR per lost completion"): the words are it.
            let _ = writeln!(s, "  \"{words}\" [shape=note];");
            let _ = writeln!(s, "  \"{case}\" -> \"{words}\";");
        }
    }
    s.push_str("}\n");
    s
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
        let d = failures();
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
