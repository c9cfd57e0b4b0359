//! Requests to the lab's host and its replies.
//!
//! A program inside a lab VM asks the process that runs the VMs for what it cannot do itself
//! (freeze, kill or restart a node, record the wire). It connects to the unix socket in
//! `LAB_HOST`, writes one [`HostRequest`] as a line of text, and reads one [`HostReply`]:
//! `ok N` or `err N` (the [`ReplyHead`]), a newline, then N bytes of text.
//! `cargo lab fault <action>` sends the same requests to a lab daemon.
//!
//! | request | what happens |
//! |---|---|
//! | `freeze N` / `thaw N` | QEMU `stop` / `cont` on node N: it goes silent and keeps its state |
//! | `kill N` | node N's QEMU is killed: the VM and everything in it are gone |
//! | `restart N` | a fresh VM for node N (killed first if it runs), on the same cable |
//! | `status` | each node: running, frozen or killed |
//! | `trace start` / `trace stop` | record the pair's wire (the cable); `stop` answers the ladder |

use crate::node::Node;
use std::fmt;
use std::str::FromStr;

/// One request to the lab's host. [`fmt::Display`] writes its line (without the newline);
/// [`FromStr`] reads it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostRequest {
    /// `freeze N`: stop the node's vCPUs.
    Freeze(Node),
    /// `thaw N`: let a frozen node run again.
    Thaw(Node),
    /// `kill N`: kill the node's VM.
    Kill(Node),
    /// `restart N`: boot a fresh VM for the node.
    Restart(Node),
    /// `status`: the state of each node.
    Status,
    /// `trace start`: start recording the pair's wire.
    TraceStart,
    /// `trace stop`: stop recording; the reply is the recorded ladder.
    TraceStop,
}

impl HostRequest {
    /// Every request, each node's once (the table the tests walk).
    pub fn all() -> Vec<HostRequest> {
        let mut out = vec![];
        for n in Node::ALL {
            out.extend([
                HostRequest::Freeze(n),
                HostRequest::Thaw(n),
                HostRequest::Kill(n),
                HostRequest::Restart(n),
            ]);
        }
        out.extend([
            HostRequest::Status,
            HostRequest::TraceStart,
            HostRequest::TraceStop,
        ]);
        out
    }

    /// The node the request is about, if it is about one.
    pub fn node(self) -> Option<Node> {
        match self {
            HostRequest::Freeze(n)
            | HostRequest::Thaw(n)
            | HostRequest::Kill(n)
            | HostRequest::Restart(n) => Some(n),
            HostRequest::Status | HostRequest::TraceStart | HostRequest::TraceStop => None,
        }
    }
}

impl fmt::Display for HostRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostRequest::Freeze(n) => write!(f, "freeze {}", n.name()),
            HostRequest::Thaw(n) => write!(f, "thaw {}", n.name()),
            HostRequest::Kill(n) => write!(f, "kill {}", n.name()),
            HostRequest::Restart(n) => write!(f, "restart {}", n.name()),
            HostRequest::Status => f.write_str("status"),
            HostRequest::TraceStart => f.write_str("trace start"),
            HostRequest::TraceStop => f.write_str("trace stop"),
        }
    }
}

/// Why a line is not a [`HostRequest`]; each variant holds the words it could not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseRequestError {
    /// The first word is no request (an empty line has the empty word).
    UnknownVerb(String),
    /// `freeze`, `thaw`, `kill` or `restart` without a node.
    MissingNode(String),
    /// A node name other than `a` or `b`.
    UnknownNode(String),
    /// `trace` followed by something other than `start` or `stop` (or by nothing: empty).
    UnknownTrace(String),
    /// A whole request followed by more words: the request and the rest.
    TrailingWords { request: String, rest: String },
}

impl fmt::Display for ParseRequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseRequestError::UnknownVerb(v) => write!(
                f,
                "unknown request {v:?}: freeze, thaw, kill or restart a node, or status"
            ),
            ParseRequestError::MissingNode(v) => write!(f, "{v:?}: which node? (a or b)"),
            ParseRequestError::UnknownNode(n) => {
                write!(f, "no node {n:?} (the pair's nodes are a and b)")
            }
            ParseRequestError::UnknownTrace(w) => {
                write!(f, "\"trace {w}\": trace start or trace stop")
            }
            ParseRequestError::TrailingWords { request, rest } => {
                write!(f, "{request:?} takes nothing after it, not {rest:?}")
            }
        }
    }
}

impl std::error::Error for ParseRequestError {}

impl FromStr for HostRequest {
    type Err = ParseRequestError;

    /// Reads one request line; surrounding white space and the newline are ignored, and words
    /// may be separated by any white space.
    fn from_str(line: &str) -> Result<Self, ParseRequestError> {
        let mut words = line.split_whitespace();
        let verb = words.next().unwrap_or("");
        let request = match verb {
            "status" => HostRequest::Status,
            "trace" => match words.next().unwrap_or("") {
                "start" => HostRequest::TraceStart,
                "stop" => HostRequest::TraceStop,
                other => return Err(ParseRequestError::UnknownTrace(other.to_string())),
            },
            "freeze" | "thaw" | "kill" | "restart" => {
                let name = words
                    .next()
                    .ok_or_else(|| ParseRequestError::MissingNode(verb.to_string()))?;
                let n = Node::from_name(name)
                    .ok_or_else(|| ParseRequestError::UnknownNode(name.to_string()))?;
                match verb {
                    "freeze" => HostRequest::Freeze(n),
                    "thaw" => HostRequest::Thaw(n),
                    "kill" => HostRequest::Kill(n),
                    _ => HostRequest::Restart(n),
                }
            }
            other => return Err(ParseRequestError::UnknownVerb(other.to_string())),
        };
        let rest: Vec<&str> = words.collect();
        if !rest.is_empty() {
            return Err(ParseRequestError::TrailingWords {
                request: request.to_string(),
                rest: rest.join(" "),
            });
        }
        Ok(request)
    }
}

/// The first line of a reply: did the host do it, and how many bytes of text follow.
/// [`fmt::Display`] writes `ok N` or `err N` (without the newline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHead {
    /// `ok` (done) or `err` (refused).
    pub ok: bool,
    /// The length of the text after the head's newline, in bytes.
    pub len: usize,
}

impl fmt::Display for ReplyHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = if self.ok { "ok" } else { "err" };
        write!(f, "{word} {}", self.len)
    }
}

/// Why text is not a [`ReplyHead`] or a [`HostReply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseReplyError {
    /// The head is not `ok N` or `err N`: holds the head.
    BadHead(String),
    /// The reply has no newline after its head: holds the reply.
    NoNewline(String),
    /// The text after the head is not as long as the head says.
    WrongLength { said: usize, got: usize },
}

impl fmt::Display for ParseReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseReplyError::BadHead(h) => write!(f, "bad answer {h:?} (ok N or err N)"),
            ParseReplyError::NoNewline(r) => write!(f, "an answer without its head line: {r:?}"),
            ParseReplyError::WrongLength { said, got } => {
                write!(
                    f,
                    "the answer's head says {said} bytes of text, {got} follow"
                )
            }
        }
    }
}

impl std::error::Error for ParseReplyError {}

impl FromStr for ReplyHead {
    type Err = ParseReplyError;

    /// `ok 12` -> done, 12 bytes; `err 3` -> refused, 3 bytes.
    fn from_str(head: &str) -> Result<Self, ParseReplyError> {
        let bad = || ParseReplyError::BadHead(head.to_string());
        let (word, n) = head.split_once(' ').ok_or_else(bad)?;
        let ok = match word {
            "ok" => true,
            "err" => false,
            _ => return Err(bad()),
        };
        let len = n.trim().parse().map_err(|_| bad())?;
        Ok(ReplyHead { ok, len })
    }
}

/// The host's answer to one request. [`fmt::Display`] writes it whole, as it goes on the
/// socket: the [`ReplyHead`], a newline, the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostReply {
    /// Done; the text says what was done (or, for `trace stop`, the recorded ladder).
    Done(String),
    /// Refused; the text says why.
    Refused(String),
}

impl HostReply {
    /// The reply of a handler: `Ok` is done, `Err` refused.
    pub fn of(result: Result<String, String>) -> HostReply {
        match result {
            Ok(t) => HostReply::Done(t),
            Err(t) => HostReply::Refused(t),
        }
    }

    /// The head line that goes before the text.
    pub fn head(&self) -> ReplyHead {
        ReplyHead {
            ok: matches!(self, HostReply::Done(_)),
            len: self.text().len(),
        }
    }

    /// The reply whose head was `head` and whose text is `text` (read separately, as a client
    /// reading a socket does).
    pub fn from_parts(head: ReplyHead, text: String) -> HostReply {
        if head.ok {
            HostReply::Done(text)
        } else {
            HostReply::Refused(text)
        }
    }

    /// The text after the head.
    pub fn text(&self) -> &str {
        match self {
            HostReply::Done(t) | HostReply::Refused(t) => t,
        }
    }

    /// `Ok(text)` when done, `Err(text)` when refused.
    pub fn into_result(self) -> Result<String, String> {
        match self {
            HostReply::Done(t) => Ok(t),
            HostReply::Refused(t) => Err(t),
        }
    }
}

impl fmt::Display for HostReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n{}", self.head(), self.text())
    }
}

impl FromStr for HostReply {
    type Err = ParseReplyError;

    /// Reads a whole reply: the head, its newline, and exactly as many bytes as it says.
    fn from_str(s: &str) -> Result<Self, ParseReplyError> {
        let (head, text) = s
            .split_once('\n')
            .ok_or_else(|| ParseReplyError::NoNewline(s.to_string()))?;
        let head: ReplyHead = head.parse()?;
        if head.len != text.len() {
            return Err(ParseReplyError::WrongLength {
                said: head.len,
                got: text.len(),
            });
        }
        Ok(HostReply::from_parts(head, text.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_prints_its_wire_text_and_parses_back() {
        let expected = [
            "freeze a",
            "thaw a",
            "kill a",
            "restart a",
            "freeze b",
            "thaw b",
            "kill b",
            "restart b",
            "status",
            "trace start",
            "trace stop",
        ];
        let all = HostRequest::all();
        assert_eq!(all.len(), expected.len());
        for (r, text) in all.into_iter().zip(expected) {
            assert_eq!(r.to_string(), text);
            assert_eq!(text.parse::<HostRequest>(), Ok(r));
            // As a socket line: a newline, and stray white space.
            assert_eq!(format!("  {}\n", text.replace(' ', "\t")).parse(), Ok(r));
        }
        assert_eq!(HostRequest::Kill(Node::B).node(), Some(Node::B));
        assert_eq!(HostRequest::TraceStop.node(), None);
    }

    #[test]
    fn bad_requests_name_what_is_wrong() {
        let e = |s: &str| s.parse::<HostRequest>().unwrap_err();
        assert_eq!(
            e("explode b"),
            ParseRequestError::UnknownVerb("explode".into())
        );
        assert!(
            e("explode b")
                .to_string()
                .contains("freeze, thaw, kill or restart")
        );
        assert_eq!(e(""), ParseRequestError::UnknownVerb("".into()));
        assert_eq!(
            e("Freeze a"),
            ParseRequestError::UnknownVerb("Freeze".into())
        );
        assert_eq!(e("kill"), ParseRequestError::MissingNode("kill".into()));
        assert_eq!(e("kill").to_string(), "\"kill\": which node? (a or b)");
        assert_eq!(e("thaw c"), ParseRequestError::UnknownNode("c".into()));
        assert_eq!(
            e("thaw c").to_string(),
            "no node \"c\" (the pair's nodes are a and b)"
        );
        // On the wire a node is named as Node::name prints it.
        assert_eq!(e("restart A"), ParseRequestError::UnknownNode("A".into()));
        assert_eq!(e("trace"), ParseRequestError::UnknownTrace("".into()));
        assert_eq!(
            e("trace pause"),
            ParseRequestError::UnknownTrace("pause".into())
        );
        assert_eq!(
            e("trace pause").to_string(),
            "\"trace pause\": trace start or trace stop"
        );
        assert_eq!(
            e("freeze a b"),
            ParseRequestError::TrailingWords {
                request: "freeze a".into(),
                rest: "b".into()
            }
        );
        assert_eq!(
            e("status now please").to_string(),
            "\"status\" takes nothing after it, not \"now please\""
        );
    }

    #[test]
    fn replies_round_trip() {
        for r in [
            HostReply::Done("node a frozen".into()),
            HostReply::Done(String::new()),
            HostReply::Refused("no such node".into()),
            HostReply::Done("a -> b  SEND_ONLY\na <- b  ACKNOWLEDGE\n".into()),
            HostReply::Refused("née ünïcode".into()),
        ] {
            let wire = r.to_string();
            let (head, _) = wire.split_once('\n').unwrap();
            assert_eq!(head.parse::<ReplyHead>(), Ok(r.head()));
            assert_eq!(wire.parse::<HostReply>(), Ok(r.clone()));
            assert_eq!(
                HostReply::from_parts(r.head(), r.text().to_string()),
                r.clone()
            );
            assert_eq!(HostReply::of(r.clone().into_result()), r);
        }
        assert_eq!(HostReply::Done("did it".into()).to_string(), "ok 6\ndid it");
        assert_eq!(HostReply::Refused("no".into()).to_string(), "err 2\nno");
        // Lengths count bytes, as the socket does.
        assert_eq!(HostReply::Done("é".into()).head().len, 2);
    }

    #[test]
    fn bad_replies_name_what_is_wrong() {
        assert_eq!("ok 12".parse(), Ok(ReplyHead { ok: true, len: 12 }));
        assert_eq!("err 0".parse(), Ok(ReplyHead { ok: false, len: 0 }));
        for h in ["maybe 3", "ok many", "ok", "", "ok -1"] {
            assert_eq!(
                h.parse::<ReplyHead>(),
                Err(ParseReplyError::BadHead(h.into()))
            );
        }
        assert_eq!(
            "ok 3".parse::<HostReply>(),
            Err(ParseReplyError::NoNewline("ok 3".into()))
        );
        assert_eq!(
            "ok 3\nab".parse::<HostReply>(),
            Err(ParseReplyError::WrongLength { said: 3, got: 2 })
        );
        assert_eq!(
            "ok x\nab".parse::<HostReply>().unwrap_err().to_string(),
            "bad answer \"ok x\" (ok N or err N)"
        );
    }
}
