//! # Chapter 12: the RDMA connection manager (rdma_cm)
//!
//! Every chapter so far connected its QPs by hand: a TCP exchange of QPN, PSN and GID, then
//! `ibv_modify_qp` three times. Real programs (rping, most libraries) let librdmacm do it: the
//! client names the server by IP address and port, the server listens on a port, and the
//! connection manager resolves the device, the GIDs and the path, exchanges the QPNs and PSNs
//! in IB CM messages (REQ, REP, RTU) and walks the QP through INIT, RTR and RTS. Events on an
//! event channel tell each side how far it got. This chapter prints that event sequence step by
//! step, next to the verbs each step replaces, then queries the QP to show what rdma_cm set.
//!
//! The server's region travels in the private data of its `rdma_accept`: `(addr, len, rkey)`,
//! so the client's RDMA WRITE and READ follow with no side channel at all. The end is a clean
//! disconnect: `rdma_disconnect` (librdmacm moves the QP to ERR, posted work flushes and is
//! drained), DISCONNECTED on both sides, then TIMEWAIT_EXIT.
//!
//! Verbs: `rdma_create_event_channel`, `rdma_create_id`, `rdma_resolve_addr`,
//! `rdma_resolve_route`, `rdma_create_qp`, `rdma_connect`, `rdma_bind_addr`, `rdma_listen`,
//! `rdma_accept`, `rdma_reject`, `rdma_disconnect`, `rdma_get_cm_event`, `rdma_ack_cm_event`;
//! `ibv_query_qp` after ESTABLISHED.
//!
//! Run it: `cargo lab run 12`, or in the lab: `ch12-connection-manager --server` in one shell
//! and `ch12-connection-manager --connect 10.99.0.1` in another. (127.0.0.1 cannot be routed on
//! RoCE: a loopback address given to `--connect` is replaced by the rxe netdev's address, and
//! `--case localhost` shows what happens without that.)
//!
//! `--proto rping` speaks rping's protocol (interoperates with `rping -s` and `rping -c`),
//! `--proto sendrecv` the SEND/RECV exchange of `ucmatose`, `rdma_client` and `rdma_server`.
//! `--case NAME` reproduces a failure: `no-listener`, `reject`, `unreachable`, `localhost`,
//! `peer-killed`, `reconnect`.
//!
//! Read it in this order: this file (the options and the roles), `conn.rs` (one connection's
//! objects and the steps both roles share), `server.rs`, `client.rs`, then `cases.rs` (the
//! failures that take their own path) and `rping.rs` (rping's protocol).

use clap::{Parser, ValueEnum};
use std::process::ExitCode;
use std::time::Duration;

mod cases;
mod client;
mod conn;
mod rping;
mod server;

/// The port: 7471, the port librdmacm's own examples (`rdma_server`, `ucmatose`) use.
const PORT: u16 = 7471;
/// How long address and route resolution may take (`rdma_resolve_addr`'s `timeout_ms`).
const RESOLVE: Duration = Duration::from_secs(2);
/// The server's region.
const REGION_LEN: usize = 4096;
/// Where the client's READ lands in its own region.
const READ_BACK: usize = 2048;
const MSG: &str = "Hello through rdma_cm: the region's address and rkey came in the REP.";
/// The private data of the client's REQ (length-prefixed: a CONNECT_REQUEST always reports
/// MAX_CONNECT_DATA, 56 bytes, the IB CM REQ's 92 less rdma_cm's 36-byte header).
const HELLO: &str = "ch12 client, protocol lab";
/// The private data of the server's reject in `--case reject`.
const REJECT: &str = "server full: try again later";
/// The tag of the region in the server's private data.
const TAG: &[u8; 4] = b"RGN1";

#[derive(Parser, Debug)]
#[command(
    name = "ch12-connection-manager",
    about = "Connect RC QPs with rdma_cm: events, private data, WRITE/READ, disconnect",
    after_help = "Example (in the lab): ch12-connection-manager --server   and   \
                  ch12-connection-manager --connect 10.99.0.1"
)]
struct Opts {
    /// Run the server: listen for rdma_cm connections
    #[arg(long, conflicts_with = "connect", required_unless_present_any = ["connect", "worker"])]
    server: bool,
    /// Run the client: connect to the server at <host> (an IPv4 address)
    #[arg(long, value_name = "host")]
    connect: Option<String>,
    /// rdma_cm port (the TCP port space)
    #[arg(short = 'p', long, value_name = "port", default_value_t = PORT)]
    port: u16,
    /// What to speak once connected
    #[arg(long, value_enum, default_value_t = Proto::Lab)]
    proto: Proto,
    /// Messages (sendrecv) or pings (rping)
    #[arg(short = 'C', long, value_name = "n", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10000))]
    count: u32,
    /// Message size (sendrecv) or ping buffer size (rping), in bytes
    #[arg(short = 'S', long, value_name = "bytes", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(16..=65536))]
    size: u32,
    /// Reproduce a failure (see the README's failure table)
    #[arg(long, value_enum, value_name = "name")]
    case: Option<Case>,
    /// Give up on any wait after this many seconds
    #[arg(long, value_name = "secs", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    timeout: u64,
    /// (internal) a server worker started by the supervisor of --case peer-killed/reconnect
    #[arg(long, hide = true, value_name = "n")]
    worker: Option<u32>,
}

/// What the two ends speak once connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Proto {
    /// The region in the server's private data; the client WRITEs, then READs back
    Lab,
    /// rping's: the client SENDs {addr, rkey, size}, the server READs, WRITEs back
    Rping,
    /// SEND/RECV as rdma_client/rdma_server: the client sends --count messages of --size
    /// bytes, then the server sends as many; the client disconnects
    Sendrecv,
    /// SEND/RECV as ucmatose: the server sends first, then receives, then disconnects
    Ucmatose,
}

/// The failures this chapter reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Case {
    /// Client: connect to a port nobody listens on (REJECTED, status 8)
    NoListener,
    /// Server: rdma_reject with a reason in the private data (REJECTED, status 28)
    Reject,
    /// Client: an address nobody has (ADDR_ERROR within the resolve deadline)
    Unreachable,
    /// Client: 127.0.0.1 (rdma_resolve_route fails: no RDMA device on lo)
    Localhost,
    /// Server: the process is killed mid-session (the client sees DISCONNECTED, flushes)
    PeerKilled,
    /// Server killed, restarted; the client resets, reconnects with fresh PSNs
    Reconnect,
}

fn main() -> ExitCode {
    let o = Opts::parse();
    course::exit_code(match (&o.connect, o.worker) {
        (Some(host), _) => client::client(&o, host),
        (None, Some(n)) => server::server(&o, n),
        (None, None) => match o.case {
            Some(Case::PeerKilled | Case::Reconnect) => server::supervisor(&o),
            _ => server::server(&o, 0),
        },
    })
}

fn timeout(o: &Opts) -> Duration {
    Duration::from_secs(o.timeout)
}
