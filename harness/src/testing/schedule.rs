//! The scheduler behind [`run_roles`]: start every role in order (readiness by a line, never a
//! sleep), collect their output and exits, enforce the deadline, and notice a lab that dies or
//! hangs under a run.
//!
//! A role whose node is killed on purpose (`kill` through the lab's host: chapter 13's
//! killed-peer case) is not a failure: once the node has been restarted, the role starts
//! again on the fresh VM, with a line in its output that says so.

use super::*;
use crate::testbed::generation;

pub(super) enum Next {
    Event((usize, Event)),
    /// Half a second without an event (the lab is healthy).
    Tick,
    Deadline,
    Dead(String),
}

pub(super) struct RoleState {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<i32>,
    started: Option<u32>,
    note: Option<String>,
    /// Its node was killed on purpose: start it again once the node is back.
    revive: bool,
    /// The node's restart count when the role (last) started.
    generation: u64,
}

/// Runs roles in order (each waits for the previous one's `ready` line), then waits for all.
/// Panics with both roles' output so far (and the guest console's tail) when a deadline passes
/// or the lab breaks.
pub fn run_roles(topology: Topology, roles: Vec<Role>) -> Transcript {
    let lab = lab(topology);
    let _g = lock(&lab);
    match run_roles_in(&lab, &roles, run_timeout()) {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

/// [`run_roles`] on a given lab, with a given deadline, without the panic or the lock (the CLI
/// uses it; take [`lock`] around it when others may share the lab).
pub fn run_roles_in(lab: &Testbed, roles: &[Role], limit: Duration) -> anyhow::Result<Transcript> {
    schedule(lab, roles, limit).map_err(anyhow::Error::msg)
}

/// [`run_roles_in`]'s body; its error is the whole report (what ran, the output so far, the
/// consoles' tails), built as text.
fn schedule(lab: &Testbed, roles: &[Role], limit: Duration) -> Result<Transcript, String> {
    let deadline = Instant::now() + limit;
    let (tx, rx) = mpsc::channel::<(usize, Event)>();
    // Waits for the next event until the overall deadline, in slices of half a second: after
    // each the lab's health is checked (connections, QEMU and daemon processes, a heartbeat), so a lab
    // that dies or hangs under the run ends it in seconds whatever the connection does.
    let mut hb = Heartbeat::new(lab);
    let next = |hb: &mut Heartbeat| -> Next {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Next::Deadline;
        }
        match rx.recv_timeout(left.min(Duration::from_millis(500))) {
            Ok(ev) => Next::Event(ev),
            Err(mpsc::RecvTimeoutError::Disconnected) => Next::Dead("event channel closed".into()),
            Err(mpsc::RecvTimeoutError::Timeout) => match hb.check(lab) {
                Err(why) => Next::Dead(format!("{why:#}")),
                // Half a second without an event: the callers look at revivable roles.
                Ok(()) => Next::Tick,
            },
        }
    };
    let mut st: Vec<RoleState> = roles
        .iter()
        .map(|_| RoleState {
            stdout: vec![],
            stderr: vec![],
            exit: None,
            started: None,
            note: None,
            revive: false,
            generation: 0,
        })
        .collect();
    let gen_of = |n: Node| lab.dir.as_ref().map(|d| generation(d, n)).unwrap_or(0);
    // Was this event the loss of a role whose node someone killed on purpose? (An attached
    // lab's relay reports a lost command as an exit: `lost_in_relay`.)
    let lost_on_purpose = |st: &[RoleState], i: usize, ev: &Event| -> bool {
        let lost = match ev {
            Event::Lost(_) => true,
            Event::Exit(s) => crate::testbed::lost_in_relay(s),
            _ => false,
        };
        let n = roles[i].node;
        lost && (lab.killed_on_purpose(n) || gen_of(n) != st[i].generation)
    };
    let apply = |st: &mut Vec<RoleState>, (i, ev): (usize, Event)| -> Result<(), String> {
        match ev {
            Event::Stdout(d) => st[i].stdout.extend(d),
            Event::Stderr(d) => st[i].stderr.extend(d),
            Event::Exit(s) => {
                if let ExitStatus::SpawnFailed(m) = &s {
                    st[i]
                        .stderr
                        .extend(format!("harness: could not start: {m}\n").bytes());
                }
                st[i].exit = Some(s.code());
            }
            Event::Lost(why) => return Err(why),
        }
        Ok(())
    };
    let to_transcript = |st: &[RoleState]| Transcript {
        sections: roles
            .iter()
            .zip(st)
            .map(|(r, s)| {
                let mut stderr = String::from_utf8_lossy(&s.stderr).into_owned();
                if let Some(n) = &s.note {
                    stderr.push_str(n);
                }
                Section {
                    name: r.name.clone(),
                    exit_code: s.exit.unwrap_or(-1),
                    stdout: String::from_utf8_lossy(&s.stdout).into_owned(),
                    stderr,
                }
            })
            .collect(),
    };
    let kill_all = |st: &[RoleState]| {
        for (r, s) in roles.iter().zip(st) {
            if let (Some(id), None) = (s.started, s.exit) {
                lab.conn(r.node).kill(id);
            }
        }
    };
    let fail = |st: &mut Vec<RoleState>, what: String| -> String {
        kill_all(st);
        // Collect what the kills produce, briefly (nothing will come from a dead lab).
        let until = Instant::now()
            + if lab.check().is_ok() {
                Duration::from_secs(5)
            } else {
                Duration::ZERO
            };
        while st.iter().any(|s| s.started.is_some() && s.exit.is_none()) {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(ev) => {
                    if apply(st, ev).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let running: Vec<String> = roles
            .iter()
            .zip(st.iter())
            .map(|(r, s)| {
                format!(
                    "{} ({})",
                    r.name,
                    match (s.started, s.exit) {
                        (None, _) => "not started".to_string(),
                        (Some(_), Some(c)) => format!("exited {c}"),
                        (Some(_), None) => "still running".to_string(),
                    }
                )
            })
            .collect();
        format!(
            "harness: {what}\nroles: {}\ncommands: {}\n{}{}",
            running.join(", "),
            roles
                .iter()
                .map(|r| format!("[{}] {}", r.name, r.argv.join(" ")))
                .collect::<Vec<_>>()
                .join("; "),
            to_transcript(st).text(),
            lab.console_tail(20)
        )
    };

    let base_env = passthrough_env();
    let mut stop_starting = None;
    let mut cmds: Vec<Option<Cmd>> = vec![None; roles.len()];
    // Starts again the roles whose node is back from an on-purpose kill.
    let revive = |st: &mut Vec<RoleState>, cmds: &[Option<Cmd>]| -> Result<(), String> {
        for i in 0..roles.len() {
            let n = roles[i].node;
            if !st[i].revive || lab.killed_on_purpose(n) {
                continue;
            }
            let Some(cmd) = &cmds[i] else { continue };
            st[i].revive = false;
            st[i].generation = gen_of(n);
            st[i].stdout.extend(
                format!(
                    "harness: node {} was killed and restarted (a fresh VM): {} starts again\n",
                    n.name(),
                    roles[i].name
                )
                .bytes(),
            );
            let tx = tx.clone();
            match lab.conn(n).spawn(cmd, move |ev| {
                let _ = tx.send((i, ev));
            }) {
                Ok(id) => st[i].started = Some(id),
                Err(e) => return Err(format!("cannot start {} again: {e}", roles[i].name)),
            }
        }
        Ok(())
    };
    for (i, role) in roles.iter().enumerate() {
        if let Some(why) = &stop_starting {
            st[i].note = Some(format!("harness: not started: {why}\n"));
            continue;
        }
        let mut env = base_env.clone();
        if lab.topology == Topology::Pair && lab.provider == Provider::Vm {
            env.push(("LAB_NODE".into(), role.node.name().into()));
        }
        env.extend(role.env.iter().cloned());
        let cmd = Cmd {
            argv: role.argv.clone(),
            env,
            cwd: cwd(),
            timeout: Some(limit + Duration::from_secs(10)),
            stdin: false,
        };
        cmds[i] = Some(cmd.clone());
        st[i].generation = gen_of(role.node);
        let tx = tx.clone();
        match lab.conn(role.node).spawn(&cmd, move |ev| {
            let _ = tx.send((i, ev));
        }) {
            Ok(id) => st[i].started = Some(id),
            Err(e) => return Err(fail(&mut st, format!("cannot start {}: {e}", role.name))),
        }
        if let Some(ready) = &role.ready {
            loop {
                if String::from_utf8_lossy(&st[i].stdout).contains(ready.as_str()) {
                    break;
                }
                if let Some(code) = st[i].exit {
                    stop_starting = Some(format!(
                        "{} exited ({code}) before printing {ready:?}",
                        role.name
                    ));
                    break;
                }
                match next(&mut hb) {
                    Next::Event((j, ev)) if lost_on_purpose(&st, j, &ev) => st[j].revive = true,
                    Next::Event(ev) => {
                        if let Err(why) = apply(&mut st, ev) {
                            return Err(fail(&mut st, lab.dead_report(&why)));
                        }
                    }
                    Next::Tick => {
                        if let Err(e) = revive(&mut st, &cmds) {
                            return Err(fail(&mut st, e));
                        }
                    }
                    Next::Dead(why) => return Err(fail(&mut st, lab.dead_report(&why))),
                    Next::Deadline => {
                        return Err(fail(
                            &mut st,
                            format!(
                                "{} did not print {ready:?} within {} s (LAB_TIMEOUT_SECS); killed the roles",
                                role.name,
                                limit.as_secs()
                            ),
                        ));
                    }
                }
            }
        }
    }
    while st.iter().any(|s| s.started.is_some() && s.exit.is_none()) {
        match next(&mut hb) {
            Next::Event((j, ev)) if lost_on_purpose(&st, j, &ev) => st[j].revive = true,
            Next::Event(ev) => {
                if let Err(why) = apply(&mut st, ev) {
                    return Err(fail(&mut st, lab.dead_report(&why)));
                }
            }
            Next::Tick => {
                if let Err(e) = revive(&mut st, &cmds) {
                    return Err(fail(&mut st, e));
                }
            }
            Next::Dead(why) => return Err(fail(&mut st, lab.dead_report(&why))),
            Next::Deadline => {
                return Err(fail(
                    &mut st,
                    format!(
                        "still running after {} s (LAB_TIMEOUT_SECS); killed the roles",
                        limit.as_secs()
                    ),
                ));
            }
        }
    }
    Ok(to_transcript(&st))
}
