//! The nodes of a lab and its topologies, with the names every process uses for them.

use std::fmt;
use std::str::FromStr;

/// Where the rxe device(s) live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    /// One rxe device; every process runs on it.
    Loopback,
    /// Two nodes, `a` and `b`, each with its own rxe, joined by a virtual wire.
    Pair,
}

impl Topology {
    /// `loopback` or `pair`, as in chapters/course.toml.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Loopback => "loopback",
            Topology::Pair => "pair",
        }
    }

    /// Every topology, loopback first.
    pub fn all() -> [Topology; 2] {
        [Topology::Loopback, Topology::Pair]
    }

    /// The nodes of this topology: loopback has only `A`.
    pub fn nodes(self) -> &'static [Node] {
        match self {
            Topology::Loopback => &[Node::A],
            Topology::Pair => &[Node::A, Node::B],
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A topology name that is neither `loopback` nor `pair`; holds the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseTopologyError(pub String);

impl fmt::Display for ParseTopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown topology {:?} (loopback or pair)", self.0)
    }
}

impl std::error::Error for ParseTopologyError {}

impl FromStr for Topology {
    type Err = ParseTopologyError;
    fn from_str(s: &str) -> Result<Self, ParseTopologyError> {
        match s {
            "loopback" => Ok(Topology::Loopback),
            "pair" => Ok(Topology::Pair),
            _ => Err(ParseTopologyError(s.to_string())),
        }
    }
}

/// A node of the pair topology (loopback has only `A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    A,
    B,
}

impl Node {
    /// Both nodes, `A` first.
    pub const ALL: [Node; 2] = [Node::A, Node::B];

    /// `a` or `b`: the node's name in requests, file names and `LAB_NODE`.
    pub fn name(self) -> &'static str {
        match self {
            Node::A => "a",
            Node::B => "b",
        }
    }

    /// The node named exactly `a` or `b` (what [`Node::name`] prints), else None. The
    /// [`FromStr`] parse also takes `A` and `B`, for people typing on a command line.
    pub fn from_name(s: &str) -> Option<Node> {
        Node::ALL.into_iter().find(|n| n.name() == s)
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A node name that is not `a` or `b` (in either case); holds the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseNodeError(pub String);

impl fmt::Display for ParseNodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown node {:?} (a or b)", self.0)
    }
}

impl std::error::Error for ParseNodeError {}

impl FromStr for Node {
    type Err = ParseNodeError;
    fn from_str(s: &str) -> Result<Self, ParseNodeError> {
        Node::from_name(&s.to_ascii_lowercase()).ok_or_else(|| ParseNodeError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_round_trip_through_their_names() {
        for n in Node::ALL {
            assert_eq!(n.name().parse::<Node>(), Ok(n));
            assert_eq!(Node::from_name(n.name()), Some(n));
            assert_eq!(n.to_string(), n.name());
        }
        assert_eq!("B".parse::<Node>(), Ok(Node::B));
        assert_eq!(Node::from_name("B"), None);
        let e = "c".parse::<Node>().unwrap_err();
        assert_eq!(e, ParseNodeError("c".into()));
        assert_eq!(e.to_string(), "unknown node \"c\" (a or b)");
        assert!("".parse::<Node>().is_err());
        assert!("ab".parse::<Node>().is_err());
    }

    #[test]
    fn topologies_round_trip_and_list_their_nodes() {
        for t in Topology::all() {
            assert_eq!(t.name().parse::<Topology>(), Ok(t));
            assert_eq!(t.to_string(), t.name());
        }
        assert_eq!(Topology::Loopback.nodes(), &[Node::A]);
        assert_eq!(Topology::Pair.nodes(), &Node::ALL);
        let e = "ring".parse::<Topology>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown topology \"ring\" (loopback or pair)"
        );
    }
}
