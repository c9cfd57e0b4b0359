//! The scheduler behind [`run_roles`]: start every role in order (readiness by a line, never a
//! sleep), collect their output and exits, enforce the deadline, and notice a lab that dies or
//! hangs under a run.
//!
//! A role whose node is killed on purpose (`kill` through the lab's host: chapter 13's
//! killed-peer case) is not a failure: once the node has been restarted, the role starts
//! again on the fresh VM, with a line in its output that says so.

use super::{Role, Section, Transcript, cwd, lab, lock, passthrough_env, run_timeout};
use crate::conn::{Cmd, Event};
use crate::proto::ExitStatus;
use crate::testbed::{Heartbeat, Provider, Testbed, generation};
use crate::{Node, Topology};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Why a run ended before every role exited on its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stop {
    #[error("cannot start {role}: {error}")]
    CannotStart { role: String, error: String },
    #[error("cannot start {role} again: {error}")]
    CannotRestart { role: String, error: String },
    /// The lab died or hung under the run (its report: what broke, the next command).
    #[error("{0}")]
    LabBroke(String),
    #[error("{role} did not print {ready:?} within {secs} s (LAB_TIMEOUT_SECS); killed the roles")]
    NotReady {
        role: String,
        ready: String,
        secs: u64,
    },
    #[error("still running after {secs} s (LAB_TIMEOUT_SECS); killed the roles")]
    Deadline { secs: u64 },
}

/// A run that ended early: why ([`Stop`]), and the whole report (what ran, the output so far,
/// the consoles' tails), which is what it prints.
#[derive(Debug, thiserror::Error)]
#[error("{report}")]
pub struct ScheduleError {
    pub stop: Stop,
    pub report: String,
}

enum Next {
    Event((usize, Event)),
    /// Half a second without an event (the lab is healthy).
    Tick,
    Deadline,
    Dead(String),
}

/// What the event loop waits for.
#[derive(Clone, Copy)]
enum Until<'r> {
    /// Role `i` printed `line` (or exited without it).
    Ready { i: usize, line: &'r str },
    /// Every started role exited.
    AllExited,
}

#[derive(Default)]
struct RoleState {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<i32>,
    started: Option<u32>,
    note: Option<String>,
    /// Its node was killed on purpose: start it again once the node is back.
    revive: bool,
    /// The node's restart count when the role (last) started.
    generation: u64,
    /// What it runs (kept to start it again).
    cmd: Option<Cmd>,
}

impl RoleState {
    fn running(&self) -> bool {
        self.started.is_some() && self.exit.is_none()
    }
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
    Ok(Scheduler::new(lab, roles, limit).run()?)
}

/// One run of roles on a lab: their state, the events their commands send, the deadline.
struct Scheduler<'a> {
    lab: &'a Testbed,
    roles: &'a [Role],
    limit: Duration,
    deadline: Instant,
    tx: mpsc::Sender<(usize, Event)>,
    rx: mpsc::Receiver<(usize, Event)>,
    /// Checked after each half second without an event: connections, QEMU and daemon
    /// processes, a heartbeat; a lab that dies or hangs ends the run in seconds.
    hb: Heartbeat,
    st: Vec<RoleState>,
}

impl<'a> Scheduler<'a> {
    fn new(lab: &'a Testbed, roles: &'a [Role], limit: Duration) -> Scheduler<'a> {
        let (tx, rx) = mpsc::channel();
        Scheduler {
            lab,
            roles,
            limit,
            deadline: Instant::now() + limit,
            tx,
            rx,
            hb: Heartbeat::new(lab),
            st: roles.iter().map(|_| RoleState::default()).collect(),
        }
    }

    /// Starts the roles in order, each after the previous one's ready line, then waits for all.
    fn run(mut self) -> Result<Transcript, ScheduleError> {
        let mut stop_starting: Option<String> = None;
        for i in 0..self.roles.len() {
            if let Some(why) = &stop_starting {
                self.st[i].note = Some(format!("harness: not started: {why}\n"));
                continue;
            }
            if let Err(stop) = self.start(i) {
                return Err(self.fail(stop));
            }
            if let Some(line) = &self.roles[i].ready {
                match self.wait(Until::Ready { i, line }) {
                    Ok(exited) => stop_starting = exited,
                    Err(stop) => return Err(self.fail(stop)),
                }
            }
        }
        if let Err(stop) = self.wait(Until::AllExited) {
            return Err(self.fail(stop));
        }
        Ok(self.transcript())
    }

    fn generation(&self, n: Node) -> u64 {
        self.lab.dir().map(|d| generation(d, n)).unwrap_or(0)
    }

    /// Starts role `i` for the first time.
    fn start(&mut self, i: usize) -> Result<(), Stop> {
        let role = &self.roles[i];
        let mut env = passthrough_env();
        if self.lab.topology == Topology::Pair && self.lab.provider == Provider::Vm {
            env.push(("LAB_NODE".into(), role.node.name().into()));
        }
        env.extend(role.env.iter().cloned());
        let cmd = Cmd {
            argv: role.argv.clone(),
            env,
            cwd: cwd(),
            timeout: Some(self.limit + Duration::from_secs(10)),
            stdin: false,
        };
        self.st[i].generation = self.generation(role.node);
        self.spawn(i, &cmd).map_err(|error| Stop::CannotStart {
            role: role.name.clone(),
            error,
        })?;
        self.st[i].cmd = Some(cmd);
        Ok(())
    }

    fn spawn(&mut self, i: usize, cmd: &Cmd) -> Result<(), String> {
        let tx = self.tx.clone();
        let id = self
            .lab
            .conn(self.roles[i].node)
            .spawn(cmd, move |ev| {
                let _ = tx.send((i, ev));
            })
            .map_err(|e| e.to_string())?;
        self.st[i].started = Some(id);
        Ok(())
    }

    /// The one event loop: applies events until `until` holds. `Ok(Some(why))`: the role
    /// awaited exited before its ready line (the roles after it are not started).
    fn wait(&mut self, until: Until) -> Result<Option<String>, Stop> {
        loop {
            match until {
                Until::Ready { i, line } => {
                    if String::from_utf8_lossy(&self.st[i].stdout).contains(line) {
                        return Ok(None);
                    }
                    if let Some(code) = self.st[i].exit {
                        let name = &self.roles[i].name;
                        return Ok(Some(format!(
                            "{name} exited ({code}) before printing {line:?}"
                        )));
                    }
                }
                Until::AllExited if !self.st.iter().any(RoleState::running) => return Ok(None),
                Until::AllExited => {}
            }
            match self.next() {
                Next::Event((j, ev)) if self.lost_on_purpose(j, &ev) => self.st[j].revive = true,
                Next::Event(ev) => self
                    .apply(ev)
                    .map_err(|why| Stop::LabBroke(self.lab.dead_report(&why)))?,
                Next::Tick => self.revive()?,
                Next::Dead(why) => return Err(Stop::LabBroke(self.lab.dead_report(&why))),
                Next::Deadline => {
                    let secs = self.limit.as_secs();
                    return Err(match until {
                        Until::Ready { i, line } => Stop::NotReady {
                            role: self.roles[i].name.clone(),
                            ready: line.to_string(),
                            secs,
                        },
                        Until::AllExited => Stop::Deadline { secs },
                    });
                }
            }
        }
    }

    /// The next event, until the overall deadline, in slices of half a second: after each the
    /// lab's health is checked.
    fn next(&mut self) -> Next {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Next::Deadline;
        }
        match self.rx.recv_timeout(left.min(Duration::from_millis(500))) {
            Ok(ev) => Next::Event(ev),
            Err(mpsc::RecvTimeoutError::Disconnected) => Next::Dead("event channel closed".into()),
            Err(mpsc::RecvTimeoutError::Timeout) => match self.hb.check(self.lab) {
                Err(why) => Next::Dead(format!("{why:#}")),
                // Half a second without an event: time to look at revivable roles.
                Ok(()) => Next::Tick,
            },
        }
    }

    /// Was this event the loss of a role whose node someone killed on purpose? (An attached
    /// lab's relay reports a lost command as an exit: `lost_in_relay`.)
    fn lost_on_purpose(&self, i: usize, ev: &Event) -> bool {
        let lost = match ev {
            Event::Lost(_) => true,
            Event::Exit(s) => crate::testbed::lost_in_relay(s),
            _ => false,
        };
        let n = self.roles[i].node;
        lost && (self.lab.killed_on_purpose(n) || self.generation(n) != self.st[i].generation)
    }

    /// Records one event; `Err`: the connection was lost.
    fn apply(&mut self, (i, ev): (usize, Event)) -> Result<(), String> {
        let st = &mut self.st[i];
        match ev {
            Event::Stdout(d) => st.stdout.extend(d),
            Event::Stderr(d) => st.stderr.extend(d),
            Event::Exit(s) => {
                if let ExitStatus::SpawnFailed(m) = &s {
                    st.stderr
                        .extend(format!("harness: could not start: {m}\n").bytes());
                }
                st.exit = Some(s.code());
            }
            Event::Lost(why) => return Err(why),
        }
        Ok(())
    }

    /// Starts again the roles whose node is back from an on-purpose kill.
    fn revive(&mut self) -> Result<(), Stop> {
        for i in 0..self.roles.len() {
            let n = self.roles[i].node;
            if !self.st[i].revive || self.lab.killed_on_purpose(n) {
                continue;
            }
            let Some(cmd) = self.st[i].cmd.clone() else {
                continue;
            };
            let name = self.roles[i].name.clone();
            self.st[i].revive = false;
            self.st[i].generation = self.generation(n);
            let line = format!(
                "harness: node {n} was killed and restarted (a fresh VM): {name} starts again\n"
            );
            self.st[i].stdout.extend(line.bytes());
            self.spawn(i, &cmd)
                .map_err(|error| Stop::CannotRestart { role: name, error })?;
        }
        Ok(())
    }

    /// Kills what still runs, collects what the kills produce (briefly: nothing comes from a
    /// dead lab), and writes the report.
    fn fail(mut self, stop: Stop) -> ScheduleError {
        for (r, s) in self.roles.iter().zip(&self.st) {
            if let (Some(id), None) = (s.started, s.exit) {
                self.lab.conn(r.node).kill(id);
            }
        }
        let grace = if self.lab.check().is_ok() {
            Duration::from_secs(5)
        } else {
            Duration::ZERO
        };
        let until = Instant::now() + grace;
        while self.st.iter().any(RoleState::running) {
            match self
                .rx
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(ev) => {
                    if self.apply(ev).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let states: Vec<String> = (self.roles.iter().zip(&self.st))
            .map(|(r, s)| {
                let state = match (s.started, s.exit) {
                    (None, _) => "not started".to_string(),
                    (Some(_), Some(c)) => format!("exited {c}"),
                    (Some(_), None) => "still running".to_string(),
                };
                format!("{} ({state})", r.name)
            })
            .collect();
        let commands: Vec<String> = (self.roles.iter())
            .map(|r| format!("[{}] {}", r.name, r.argv.join(" ")))
            .collect();
        let report = format!(
            "harness: {stop}\nroles: {}\ncommands: {}\n{}{}",
            states.join(", "),
            commands.join("; "),
            self.transcript().text(),
            self.lab.console_tail(20)
        );
        ScheduleError { stop, report }
    }

    fn transcript(&self) -> Transcript {
        let sections = (self.roles.iter().zip(&self.st))
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
            .collect();
        Transcript { sections }
    }
}
