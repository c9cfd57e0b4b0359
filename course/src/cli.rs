//! `course::cli`: the flags the chapters whose client role fans out to several processes
//! share (chapters 09 and 10), flattened into each chapter's own `clap` parser
//! (`#[command(flatten)] roles: course::cli::FanOut`), so both spell the roles, the client
//! count and the worker index the same way and check them the same way.

/// `--server` (node a) or `--connect HOST` (node b), `--clients K`, and the hidden
/// `--client-index I` each worker copy of the client role is started with
/// ([`spawn_copies`](crate::spawn_copies)).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct FanOut {
    /// Run the server role (node a).
    #[arg(long, conflicts_with = "connect")]
    pub server: bool,
    /// Run the client role against the server at HOST (node b).
    #[arg(long, value_name = "HOST", required_unless_present = "server")]
    pub connect: Option<String>,
    /// Client processes working at the same time.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub clients: u32,
    /// (internal) run as worker I of the client role.
    #[arg(long, hide = true, value_name = "I")]
    pub client_index: Option<u32>,
}

impl FanOut {
    /// What clap cannot check by itself: a worker's index is below `--clients`. The message
    /// is the line after `error: `, in clap's words.
    pub fn check(&self) -> Result<(), String> {
        match self.client_index {
            Some(i) if i >= self.clients => Err(format!(
                "--client-index {i} is out of range for --clients {}",
                self.clients
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        roles: FanOut,
    }

    fn parse(args: &[&str]) -> Result<FanOut, String> {
        let cli = Cli::try_parse_from(std::iter::once("ch").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.roles.check()?;
        Ok(cli.roles)
    }

    #[test]
    fn roles_parse_and_are_checked() {
        let s = parse(&["--server"]).unwrap();
        assert!(s.server && s.connect.is_none() && s.clients == 2);
        let c = parse(&[
            "--connect",
            "10.77.0.1",
            "--clients",
            "3",
            "--client-index",
            "2",
        ])
        .unwrap();
        assert_eq!(c.connect.as_deref(), Some("10.77.0.1"));
        assert_eq!(c.client_index, Some(2));
        let e = parse(&["--connect", "h", "--client-index", "2"]).unwrap_err();
        assert_eq!(e, "--client-index 2 is out of range for --clients 2");
        assert!(parse(&[]).unwrap_err().contains("--connect <HOST>"));
        assert!(
            parse(&["--server", "--connect", "h"])
                .unwrap_err()
                .contains("cannot be used with")
        );
        assert!(
            parse(&["--server", "--clients", "0"])
                .unwrap_err()
                .contains("--clients <CLIENTS>")
        );
    }
}
