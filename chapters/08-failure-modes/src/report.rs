//! How a case prints what it did and checks what it saw.
//!
//! Every observation goes through a `check`: it prints the observed value and, if it differs
//! from what `docs/rxe-observed.md` records, a `MISMATCH` line. A case
//! with any mismatch makes the program exit non-zero, so a change in rxe's behaviour fails
//! the chapter's test instead of slipping by.

use std::fmt::Display;

use contracts::failures::FailureCase;
use course::Outcome as Result;
use course::kernel::{KernelVersion, RxeChange};
use lab::{Errno, Error, HintCode, WcStatus, WorkCompletion};

/// "1 check", "5 checks".
pub fn checks(n: u32) -> String {
    format!("{n} check{}", if n == 1 { "" } else { "s" })
}

/// The running account of one case.
#[derive(Debug, Default)]
pub struct Report {
    step: u32,
    checks: u32,
    mismatches: Vec<String>,
    explained: Vec<WcStatus>,
    /// The hint the case's row of the table names (`contracts::failures`): a failed verb's
    /// error must carry it.
    hint: Option<HintCode>,
}

impl Report {
    /// An account that names no hint (the pair halves, which fail no verb).
    pub fn new() -> Report {
        Report::default()
    }

    /// The account of `case`, checked against its row of the table.
    pub fn for_case(case: &FailureCase) -> Report {
        Report {
            hint: case.hint,
            ..Report::default()
        }
    }

    /// `step N: ...`: what the case does next.
    pub fn step(&mut self, text: impl Display) {
        self.step += 1;
        println!("step {}: {text}", self.step);
    }

    /// Where rxe changed between kernels (course::kernel): does this kernel follow the later
    /// record for `change`? Prints which record the next checks hold against, so a reader of
    /// the output knows which kernel's behaviour it shows.
    pub fn record(&self, change: RxeChange) -> Result<bool> {
        let k = KernelVersion::running().map_err(|e| format!("which kernel rxe runs in: {e}"))?;
        println!(
            "  checked against: {} ({})",
            change.record(k),
            change.name()
        );
        Ok(change.holds_on(k))
    }

    /// An indented detail line under the current step.
    pub fn say(&self, text: impl Display) {
        println!("  {text}");
    }

    /// Checks a completion's status. Prints `who: STATUS (n) "ibv_wc_status_str"`, and the
    /// first time a status appears in this case, lab's explanation of it.
    pub fn status(&mut self, who: &str, wc: &WorkCompletion, want: WcStatus) {
        self.checks += 1;
        let got = wc.status;
        println!("  {who}: {got} \"{}\"", got.str());
        if got != WcStatus::Success && !self.explained.contains(&got) {
            self.explained.push(got);
            println!("    why: {}", got.explanation());
        }
        if got != want {
            self.mismatch(format!("{who}: got {got}, expected {want}"));
        }
    }

    /// Checks a completion's work request id and status on one line:
    /// `who wr_id=N: STATUS (n) "..."`.
    pub fn completion(&mut self, who: &str, wc: &WorkCompletion, wr_id: u64, want: WcStatus) {
        if wc.wr_id != wr_id {
            self.checks += 1;
            self.mismatch(format!("{who}: wr_id {}, expected {wr_id}", wc.wr_id));
        }
        self.status(&format!("{who} wr_id={}", wc.wr_id), wc, want);
    }

    /// Checks that a verb failed with the errno `want`. Prints lab's error message, which
    /// names the C call and, for classic mistakes, carries a hint.
    pub fn errno<T>(&mut self, who: &str, result: &Result<T, Error>, want: i32) {
        match result {
            Ok(_) => {
                self.checks += 1;
                println!("  {who}: returned 0 (success)");
                self.mismatch(format!("{who}: succeeded, expected {}", Errno(want)));
            }
            Err(e) => self.error(who, e, want),
        }
    }

    /// Checks that the error `e` of a failed verb carries the errno `want`, and the hint the
    /// case's row of the table names (one check: the errno and the hint lab draws from it).
    pub fn error(&mut self, who: &str, e: &Error, want: i32) {
        self.checks += 1;
        let got = e.errno();
        let shown = got.map_or_else(|| "no errno".to_string(), |e| e.to_string());
        println!("  {who}: returned {shown}");
        for line in e.report().to_string().lines() {
            println!("    lab: {}", line.trim_start());
        }
        if got != Some(Errno(want)) {
            self.mismatch(format!("{who}: got {shown}, expected {}", Errno(want)));
        }
        let hint = e.hint().map(|h| h.code());
        if hint != self.hint {
            let name = |h: Option<HintCode>| h.map_or("none".to_string(), |h| h.to_string());
            self.mismatch(format!(
                "{who}: lab's hint is {}, the table names {}",
                name(hint),
                name(self.hint)
            ));
        }
    }

    /// Checks any observed value: prints `what: got`, and a mismatch if `got != want`.
    pub fn check<T: PartialEq + Display>(&mut self, what: &str, got: T, want: T) {
        self.checks += 1;
        println!("  {what}: {got}");
        if got != want {
            self.mismatch(format!("{what}: got {got}, expected {want}"));
        }
    }

    /// Records a mismatch (printed at once, counted for the exit status).
    pub fn mismatch(&mut self, text: String) {
        println!("  MISMATCH: {text}");
        self.mismatches.push(text);
    }

    /// `fix: ...`: what to do instead.
    pub fn fix(&self, text: impl Display) {
        println!("fix: {text}");
    }

    /// `hardware: ...`: where a hardware NIC behaves differently from rxe.
    pub fn hardware(&self, text: impl Display) {
        println!("hardware: {text}");
    }

    pub fn checks(&self) -> u32 {
        self.checks
    }

    pub fn mismatches(&self) -> &[String] {
        &self.mismatches
    }
}
