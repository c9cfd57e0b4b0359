//! harness: placeholder API (see docs/conventions.md); the harness issue replaces the bodies.

/// Where the rxe device(s) live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    /// One rxe device; every process runs on it.
    Loopback,
    /// Two nodes, `a` and `b`, each with its own rxe, joined by a virtual wire.
    Pair,
}

/// A node of the pair topology (loopback has only `A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    A,
    B,
}

pub mod testing {
    //! The API tests use.
    use super::{Node, Topology};

    /// Runs `body` where the rxe device is. Inside the lab (`LAB_GUEST=1`) it runs `body`
    /// directly; elsewhere it re-runs this test (`test_name`, as libtest names it) inside the
    /// lab and fails unless it passes there.
    pub fn in_lab<F: FnOnce()>(topology: Topology, test_name: &str, body: F) {
        if std::env::var_os("LAB_GUEST").is_some() {
            body();
        } else {
            let _ = (topology, test_name);
            panic!("harness: no lab environment yet (placeholder harness)");
        }
    }

    /// One process to run in the lab.
    #[derive(Debug, Clone)]
    pub struct Role {
        /// Section name in the transcript ("server", "client", "run", ...).
        pub name: String,
        pub node: Node,
        pub argv: Vec<String>,
        pub env: Vec<(String, String)>,
        /// The next role starts only once this role printed a stdout line containing this.
        pub ready: Option<String>,
    }

    /// One role's result.
    #[derive(Debug, Clone)]
    pub struct Section {
        pub name: String,
        pub exit_code: i32,
        pub stdout: String,
        pub stderr: String,
    }

    /// Every role's result, in role order.
    #[derive(Debug, Clone)]
    pub struct Transcript {
        pub sections: Vec<Section>,
    }

    /// Runs roles in order (each waits for the previous one's `ready` line), then waits for all.
    pub fn run_roles(topology: Topology, roles: Vec<Role>) -> Transcript {
        let _ = (topology, roles);
        panic!("harness: no lab environment yet (placeholder harness)");
    }

    /// Runs a chapter as `chapters/course.toml` describes it; `exe` is the chapter binary.
    pub fn run_chapter(package: &str, exe: &str, extra_args: &[&str]) -> Transcript {
        let _ = (package, exe, extra_args);
        panic!("harness: no lab environment yet (placeholder harness)");
    }

    /// The one redaction table (docs/conventions.md §1).
    pub fn redact(text: &str) -> String {
        text.to_string()
    }
}
