//! `course::common`, re-exported at the crate's root (`course::OrFail`): the furniture every
//! chapter repeats, so that each chapter's `main.rs` holds its lesson and nothing else.
//!
//! Like the support crate of the Rust book, this module teaches nothing by itself: it is what
//! the chapters would otherwise copy from one another.
//!
//! - **One error style**: a step that fails becomes a [`Failure`], a one-line message that
//!   says what the program was doing and why it failed (`.or_fail("move the QP to RTR")?`,
//!   [`expect`] for an observation that is not the expected one; `?` on a `lab` error keeps
//!   lab's message); `main` prints it after `error: ` and exits 1 ([`exit_code`],
//!   [`exit_code_of`]).
//! - **The device**: [`open_device`] opens the device a `-d` flag named, else `$LAB_DEVICE`,
//!   else the first one; [`rxe_address`] is its IPv4 address (what rdma_cm needs).
//! - **A fresh starting PSN**: [`random_psn`], as rc_pingpong draws one.
//! - **A checksum both sides can compute**: [`fnv1a32`] and [`fnv1a64`], so that a server
//!   can show that the bytes a WRITE placed in its memory are the bytes the client sent.
//! - **Private data with its length**: [`framed`] and [`unframed`], because rdma_cm delivers
//!   a REQ's private data padded to a fixed size (chapters 09 and 12); **numbers in private
//!   data**, behind a tag: [`Tagged`] (a region's address, length and rkey in an accept).
//! - **Two QPs in RTS on one device**: [`connected_pair`], for the chapters that need a working
//!   connection before chapters 05 and 06 take the bring-up apart; [`wait_for_err`] for the
//!   moment after an error completion when rxe has not yet moved the QP to ERR.
//! - **Client fan-out**: [`client_role`] (built on [`spawn_copies`] and [`report_copies`])
//!   starts one copy of the program per client, prints what each one said, in order, then
//!   runs this process's own part.
//!   [`this_program_again`] is the command under them, also used by the chapters whose
//!   server runs as child processes so that one can be killed: [`run_copy`] runs one such
//!   copy to its end with a deadline, and the copy ends itself with [`crash`] (SIGKILL).
//! - **One RC connection over the lab's exchange**: [`accept_peer`] (server) and
//!   [`connect_peer`] (client), once chapter 07 has shown the steps; [`accept_clients`] for a
//!   server's several clients, printed in a stable order; [`serve_write_target`], a region a
//!   peer WRITEs into, and [`exchange_as_client`], the exchange without the bring-up, for the
//!   exercises' checks.
//! - [`done`]: the last line of a role.

use std::ffi::OsString;
use std::fmt::{self, Display};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::exchange::{Endpoint, Listener, OobStream};
use crate::process::{Running, wait_or_kill};
use lab::{
    AccessFlags, CompletionQueue, Context, Gid, InitAttr, ProtectionDomain, QpInitAttr, QpState,
    QpTypeState, QueuePair, RtrAttr, RtsAttr, state,
};

/// A chapter's failure: the message printed after `error: `, with exit status 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure(s)
    }
}

impl From<&str> for Failure {
    fn from(s: &str) -> Failure {
        Failure(s.to_string())
    }
}

/// `?` on a `lab` call: lab's message already names the verb and the errno, and its hints
/// follow on lines of their own ([`lab::Error::report`]).
impl From<lab::Error> for Failure {
    fn from(e: lab::Error) -> Failure {
        Failure(e.report().to_string())
    }
}

/// `?` on a failed state transition (the QP it hands back is dropped).
impl<S: QpTypeState> From<lab::TransitionError<S>> for Failure {
    fn from(e: lab::TransitionError<S>) -> Failure {
        Failure(e.error().report().to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure(e.to_string())
    }
}

impl From<crate::exchange::ExchangeError> for Failure {
    fn from(e: crate::exchange::ExchangeError) -> Failure {
        Failure(e.to_string())
    }
}

/// The other errors chapters turn into failures (`?`, [`OrFail`]): their message as it is.
/// `or_fail` takes only errors listed here, so that a `lab::Error` can never lose its hints
/// on the way to the user.
macro_rules! failure_from_message {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for Failure {
            fn from(e: $t) -> Failure {
                Failure(e.to_string())
            }
        })*
    };
}

failure_from_message!(
    std::num::ParseIntError,
    contracts::ParseRequestError,
    crate::host::HostError,
);

/// What a chapter's step returns: a value, or a [`Failure`]. Every chapter imports it as its
/// `Result` (`use course::Outcome as Result;`); the error type is a parameter with `Failure`
/// as its default, so `Result<T, clap::Error>` in the same file is still std's two-parameter
/// `Result`.
pub type Outcome<T = (), E = Failure> = std::result::Result<T, E>;

/// `.or_fail(what)`: turns any error a [`Failure`] can be made from into one that reads
/// `"{what}: {error}"`, where `what` says what the program was doing and the error (a
/// `lab::Error`) names the verb and the errno, its hints on lines of their own.
pub trait OrFail<T> {
    fn or_fail(self, what: impl Display) -> Outcome<T>;
    /// [`or_fail`](OrFail::or_fail) with the message built only on failure.
    fn or_fail_with<D: Display>(self, what: impl FnOnce() -> D) -> Outcome<T>;
}

impl<T, E> OrFail<T> for std::result::Result<T, E>
where
    Failure: From<E>,
{
    fn or_fail(self, what: impl Display) -> Outcome<T> {
        self.map_err(|e| Failure(format!("{what}: {}", Failure::from(e))))
    }
    fn or_fail_with<D: Display>(self, what: impl FnOnce() -> D) -> Outcome<T> {
        self.map_err(|e| Failure(format!("{}: {}", what(), Failure::from(e))))
    }
}

/// Fails the step with the message `what()` when an observation is not the expected one.
pub fn expect(ok: bool, what: impl FnOnce() -> String) -> Outcome {
    if ok { Ok(()) } else { Err(Failure(what())) }
}

/// The end of a chapter's `main`: success is exit status 0; a failure is printed on stderr
/// as `error: <message>` (the form `ibv_rc_pingpong` uses) and is exit status 1.
pub fn exit_code(result: Outcome) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// [`exit_code`] for a program that names itself: `<program>: error: <message>`.
pub fn exit_code_of(program: &str, result: Outcome) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("{program}: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// The device a chapter opens: `name` (its `-d` flag) if given, else `$LAB_DEVICE` if set and
/// not empty, else the first device (`ibv_open_device(3)`).
pub fn open_device(name: Option<&str>) -> lab::Result<Context> {
    match name {
        Some(n) => Context::open(Some(n)),
        None => Context::open_default(),
    }
}

/// The IPv4 address of this node's rxe netdev, read from its RoCE v2 GID (`::ffff:a.b.c.d`,
/// GID index 1 on rxe): the address rdma_cm resolves to this device (chapters 09 and 12).
pub fn rxe_address() -> Outcome<std::net::Ipv4Addr> {
    let ctx = open_device(None).or_fail("cannot open the device")?;
    let gid = ctx
        .roce_v2_ipv4_gid(1)
        .or_fail("cannot find the RoCE v2 GID")?;
    gid.gid
        .to_ipv4()
        .ok_or_else(|| Failure("the RoCE v2 GID is not IPv4-mapped".into()))
}

/// A random 24-bit starting PSN, like rc_pingpong's `lrand48() & 0xffffff` (the harness
/// redacts it as `[PSN#n]`). `RandomState` draws fresh random keys from the OS in every
/// process, so two runs, and two processes, start from different PSNs.
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() & 0xff_ffff) as u32
}

/// The 32-bit FNV-1a hash of `bytes`: start from the offset basis `0x811c9dc5`, then for each
/// byte XOR it in and multiply by the FNV prime `0x01000193` (wrapping). Not a cryptographic
/// hash: a short, well-known checksum that two processes, or two machines, compute alike from
/// the same bytes, which is all a chapter needs to show that a buffer arrived intact. The
/// constants, and the test vectors in this module's tests, are those of the FNV reference
/// (Fowler, Noll and Vo's FNV hash page and its test suite).
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The 64-bit FNV-1a hash of `bytes`: the same steps as [`fnv1a32`], with the 64-bit offset
/// basis `0xcbf29ce484222325` and prime `0x100000001b3`. Chapter 09 sums its pool's blocks
/// with it; chapter 07 uses the 32-bit one.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `bytes` as private data that says its own length: one length byte, then the bytes, at most
/// `room` bytes in all (so at most `room - 1`, and never more than 255, bytes of payload; the
/// rest is cut off).
///
/// Why the length byte: the receiver cannot tell how much the sender wrote. A REQ's private
/// data always reaches the server as [`lab::cm::MAX_CONNECT_DATA`] (56) bytes, the IB CM
/// REQ's 92 less rdma_cm's 36-byte header, on RoCE as on InfiniBand, however few the client
/// wrote; a REJ's arrives as [`lab::cm::MAX_REJECT_DATA`] (148) bytes (chapter 12's
/// `--case reject` shows it). Pass the limit of the message it travels in as `room`
/// (`MAX_CONNECT_DATA` for `rdma_connect`, `MAX_REJECT_DATA` for `rdma_reject`).
pub fn framed(bytes: &[u8], room: usize) -> Vec<u8> {
    let keep = bytes.len().min(room.saturating_sub(1)).min(255);
    let mut v = Vec::with_capacity(keep + 1);
    v.push(keep as u8);
    v.extend_from_slice(&bytes[..keep]);
    v
}

/// The payload of private data written by [`framed`], whatever padding followed it; `None`
/// when `data` is empty or shorter than its length byte says.
pub fn unframed(data: &[u8]) -> Option<&[u8]> {
    let n = usize::from(*data.first()?);
    data.get(1..1 + n)
}

/// Private data that carries numbers: a 4-byte tag that says what follows (`b"RGN1"`), then
/// each number in network byte order (big-endian). Chapters 09 and 12 send a region this way
/// in the accept's private data (`Tagged::new(b"RGN1").u64(addr).u32(len).u32(rkey)`), and
/// the client reads it back with [`Tagged::read`], whatever padding rdma_cm added after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tagged(Vec<u8>);

impl Tagged {
    /// The tag alone; each number follows it in the order it is added.
    pub fn new(tag: &[u8; 4]) -> Tagged {
        Tagged(tag.to_vec())
    }

    /// `v` next, in 4 bytes.
    pub fn u32(mut self, v: u32) -> Tagged {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// `v` next, in 8 bytes.
    pub fn u64(mut self, v: u64) -> Tagged {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// The private data: the tag, then the numbers.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// The numbers after `tag` in `data`, to read in the order they were added; `None` when
    /// `data` does not start with `tag`.
    pub fn read<'a>(data: &'a [u8], tag: &[u8; 4]) -> Option<TaggedReader<'a>> {
        data.strip_prefix(tag.as_slice()).map(TaggedReader)
    }
}

/// The numbers of [`Tagged`] private data, in order: each call takes the next one, `None`
/// once too few bytes are left for it.
#[derive(Debug, Clone)]
pub struct TaggedReader<'a>(&'a [u8]);

impl TaggedReader<'_> {
    /// The next number of 4 bytes.
    pub fn u32(&mut self) -> Option<u32> {
        let (n, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_be_bytes(*n))
    }

    /// The next number of 8 bytes.
    pub fn u64(&mut self) -> Option<u64> {
        let (n, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_be_bytes(*n))
    }
}

/// The device name [`open_device`] would ask for: `name`, else `$LAB_DEVICE`; `None` means
/// "the first device".
pub fn wanted_device(name: Option<&str>) -> Option<String> {
    name.map(str::to_string)
        .or_else(|| std::env::var("LAB_DEVICE").ok().filter(|s| !s.is_empty()))
}

/// Two RC QPs in `pd`, the first completing on `cq_a` and the second on `cq_b` (send and
/// receive alike), connected to each other through `gid` and in RTS with `lab`'s default
/// attributes. Chapter 05 walks through these transitions one by one.
pub fn connected_pair(
    pd: &ProtectionDomain,
    cq_a: &CompletionQueue,
    cq_b: &CompletionQueue,
    gid: Gid,
) -> lab::Result<(QueuePair, QueuePair)> {
    const PSN_A: u32 = 0x000100;
    const PSN_B: u32 = 0x000200;
    let a = pd.create_qp(&QpInitAttr::rc(cq_a, cq_a))?;
    let b = pd.create_qp(&QpInitAttr::rc(cq_b, cq_b))?;
    let (qa, qb) = (a.qp_num(), b.qp_num());
    let a = a.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(qb, PSN_B, gid),
        &RtsAttr::new(PSN_A),
    )?;
    let b = b.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(qa, PSN_A, gid),
        &RtsAttr::new(PSN_B),
    )?;
    Ok((a, b))
}

/// The state of a QP that should be in ERR. rxe moves a QP to ERR just *after* it queues the
/// error completion (and a responder on its own, after sending the NAK), so a program that
/// queries right after polling can still see RTS for an instant: this asks again until the
/// QP is in ERR or `limit` has passed, then returns the state it is in.
pub fn wait_for_err<S: QpTypeState>(qp: &QueuePair<S>, limit: Duration) -> lab::Result<QpState> {
    let start = Instant::now();
    loop {
        let s = qp.state()?;
        if s == QpState::Err || start.elapsed() > limit {
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One RC queue pair connected to a peer through the lab's TCP exchange: the QP in RTS, the
/// stream it was set up over (for the chapter's text lines), and what the peer sent.
#[derive(Debug)]
pub struct Peer {
    pub qp: QueuePair,
    pub oob: OobStream,
    pub theirs: Endpoint,
}

/// The server side of a connection (chapter 07 does it by hand): accept one client on
/// `listener`, read its endpoint, bring `qp` up toward it with `mine.psn`, and only then send
/// `mine` (its `qpn` set to `qp`'s), so our QP is in RTS before the client learns its number.
/// Each wait ends after `timeout`; a failure to accept says "waiting for `what`".
pub fn accept_peer(
    listener: &Listener,
    qp: QueuePair<state::Reset>,
    mine: &Endpoint,
    what: &str,
    timeout: Duration,
) -> Outcome<Peer> {
    let mut oob = listener
        .accept(timeout)
        .or_fail_with(|| format!("waiting for {what}"))?;
    let theirs = oob.recv_msg(timeout)?;
    let qp = qp.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(theirs.qpn, theirs.psn, Gid(theirs.gid)),
        &RtsAttr::new(mine.psn),
    )?;
    let mine = Endpoint {
        qpn: qp.qp_num(),
        ..mine.clone()
    };
    oob.send_msg(&mine, timeout)?;
    Ok(Peer { qp, oob, theirs })
}

/// A server's `count` clients, one connection each: `accept` takes the next one and is told
/// which it waits for (`"client 2 of 3"`). They come in a racy order, so they are printed
/// sorted by name, each with our QP number (`  client-1 connected: our qpn=...`), and
/// returned in that order: the output is the same every run (chapters 09 and 10).
pub fn accept_clients(
    count: usize,
    mut accept: impl FnMut(&str) -> Outcome<Peer>,
) -> Outcome<Vec<Peer>> {
    let mut conns: Vec<Peer> = (0..count)
        .map(|i| accept(&format!("client {} of {count}", i + 1)))
        .collect::<Outcome<_>>()?;
    conns.sort_by(|a, b| a.theirs.name.cmp(&b.theirs.name));
    for c in &conns {
        println!(
            "  {} connected: our {}",
            c.theirs.name,
            crate::show::qpn(c.qp.qp_num())
        );
    }
    Ok(conns)
}

/// The target of a peer's WRITEs, served once (what the WRITE exercises' checks run on node
/// a): a region of `len` bytes registered with `IBV_ACCESS_REMOTE_WRITE`, on an RC QP that
/// [`accept_peer`] connects through the exchange on `port`. `ready` is printed once the
/// listener is bound (the line a role runner waits for). Returns the region's bytes once the
/// client sends `done` within `done_within`, `None` when it closed the stream first (its code
/// failed, which the client's own output says).
pub fn serve_write_target(
    port: u16,
    len: usize,
    ready: &str,
    timeout: Duration,
    done_within: Duration,
) -> Outcome<Option<Vec<u8>>> {
    let ctx = open_device(None)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let mr = pd.reg_mr(len, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    let listener = Listener::bind(port).or_fail("listen for the client")?;
    println!("{ready}");
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let mine = Endpoint {
        regions: vec![mr.remote()],
        ..Endpoint::rc("write-target", random_psn(), gid.gid.raw())
    };
    let mut peer = accept_peer(&listener, qp, &mine, "the client", timeout)?;
    let done = peer.oob.recv_line(done_within).ok().as_deref() == Some("done");
    Ok(done.then(|| mr.as_slice().to_vec()))
}

/// The client side: send `mine` (its `qpn` set to `qp`'s) to the server at `host:port`,
/// receive the server's endpoint, and bring `qp` up toward it with `mine.psn`. A failed
/// exchange says "exchanging endpoints with `what` at `host`".
pub fn connect_peer(
    host: &str,
    port: u16,
    qp: QueuePair<state::Reset>,
    mut mine: Endpoint,
    what: &str,
    timeout: Duration,
) -> Outcome<Peer> {
    mine.qpn = qp.qp_num();
    let (oob, theirs) = OobStream::connect_exchange(host, port, &mine, timeout)
        .or_fail_with(|| format!("exchanging endpoints with {what} at {host}"))?;
    let qp = qp.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(theirs.qpn, theirs.psn, Gid(theirs.gid)),
        &RtsAttr::new(mine.psn),
    )?;
    Ok(Peer { qp, oob, theirs })
}

/// The client side's exchange alone, for a caller that brings its QP up with attributes of
/// its own (an exercise's check, where the learner writes them): sends this end (`name`,
/// `qp`'s number, `psn`, port 1's RoCE v2 IPv4 GID) to the server at `host:port` and returns
/// the stream and the server's endpoint; `qp` stays in RESET.
pub fn exchange_as_client(
    ctx: &Context,
    qp: &QueuePair<state::Reset>,
    name: &str,
    psn: u32,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Outcome<(OobStream, Endpoint)> {
    let gid = ctx.roce_v2_ipv4_gid(1)?;
    let mine = Endpoint {
        qpn: qp.qp_num(),
        ..Endpoint::rc(name, psn, gid.gid.raw())
    };
    OobStream::connect_exchange(host, port, &mine, timeout)
        .or_fail_with(|| format!("exchanging endpoints with the server at {host}"))
}

/// Starts `count` copies of this program, each with this process's arguments plus
/// `index_flag i` (for example `--client-index 3`), stdin closed, stdout and stderr
/// collected: one process per client.
pub fn spawn_copies(count: u32, index_flag: &str) -> std::io::Result<Vec<Running>> {
    (0..count)
        .map(|i| Running::start(this_program_again([index_flag, &i.to_string()])?))
        .collect()
}

/// This program again, as a child process to be: the same executable
/// ([`std::env::current_exe`]) with the same arguments, then `extra`, which tells the copy
/// which part it plays (`--index 2`, `--worker 1`). A chapter that must show a process
/// dying (SIGKILL, as a crash would) without dying itself runs that part this way: the
/// parent stays, sees how the child ended (`ExitStatusExt::signal`), and can start another.
/// The command is [`unchecked`](duct::Expression::unchecked): how the copy ended is the
/// caller's to judge. The caller sets stdin and the pipes, then starts it and waits with a
/// deadline ([`crate::process::wait_or_kill`]).
pub fn this_program_again<I, S>(extra: I) -> std::io::Result<duct::Expression>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let (exe, args) = again_argv(extra)?;
    Ok(duct::cmd(exe, args).unchecked())
}

/// The program and the arguments of [`this_program_again`].
fn again_argv<I, S>(extra: I) -> std::io::Result<(PathBuf, Vec<OsString>)>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let args = std::env::args_os()
        .skip(1)
        .chain(extra.into_iter().map(|a| a.as_ref().to_os_string()))
        .collect();
    Ok((std::env::current_exe()?, args))
}

/// A supervisor's copy of this program, run to its end: [`this_program_again`] with `extra`
/// (the part it plays: `--worker 2`), stdin closed, stdout and stderr inherited (the harness
/// reads its lines as they come), waited for at most `limit` ([`wait_or_kill`]). `who` names
/// the copy in the failures: it could not start, or it was still running at `limit` and was
/// killed. How it ended (an exit code, or the signal that killed it) is the caller's to judge.
pub fn run_copy<I, S>(extra: I, who: &str, limit: Duration) -> Outcome<std::process::ExitStatus>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let child = this_program_again(extra)
        .or_fail("cannot find our own executable")?
        .stdin_null()
        .start()
        .or_fail_with(|| format!("starting {who}"))?;
    match wait_or_kill(&child, limit).or_fail_with(|| format!("waiting for {who}"))? {
        Some(out) => Ok(out.status),
        None => Err(Failure(format!(
            "{who} did not end within {} s: killed",
            limit.as_secs()
        ))),
    }
}

/// Ends this process with SIGKILL, as a crash would: no destructor runs and nothing is said
/// to the peer; the kernel closes its sockets and destroys its QPs, CQs and MRs. Through
/// `kill(1)`: std can SIGKILL a child, not its own process. Returns only if the signal did
/// not kill us, as a failure.
pub fn crash<T>() -> Outcome<T> {
    let pid = std::process::id().to_string();
    duct::cmd("kill", ["-KILL", &pid])
        .unchecked()
        .run()
        .or_fail("kill(1)")?;
    std::thread::sleep(Duration::from_secs(5));
    Err("SIGKILL did not kill us".into())
}

/// Waits for each copy (all share one `deadline`) and prints its output in order, each line
/// prefixed `  [client i]`, then its exit code. Returns whether every copy exited 0.
pub fn report_copies(children: &mut [Running], deadline: Instant) -> bool {
    let mut ok = true;
    for (i, child) in children.iter_mut().enumerate() {
        let (code, out, err) = child.finish(deadline);
        for line in out.lines() {
            println!("  [client {i}] {line}");
        }
        for line in err.lines() {
            println!("  [client {i}] stderr: {line}");
        }
        println!("  [client {i}] exit {code}");
        ok &= code == 0;
    }
    ok
}

/// The client role of a two-node chapter: step 1 starts `count` copies of this program (one
/// process per client, each told its index by `index_flag`), step 2 waits for them until
/// `deadline` and prints their output in order, step 3 runs `own_part` in this process (a
/// client that breaks a rule on purpose), then the `done:` line. Returns whether everything
/// behaved: every copy exited 0 and `own_part` returned true.
pub fn client_role(
    count: u32,
    index_flag: &str,
    deadline: Duration,
    step1: &str,
    step3: &str,
    own_part: impl FnOnce() -> Outcome<bool>,
) -> Outcome<bool> {
    println!("step 1: {step1}");
    let mut children = spawn_copies(count, index_flag).or_fail("starting the client processes")?;
    println!("step 2: wait for them; their output, in client order (they ran concurrently)");
    let mut ok = report_copies(&mut children, Instant::now() + deadline);
    println!("step 3: {step3}");
    ok &= own_part()?;
    done(ok, "every client behaved as expected");
    Ok(ok)
}

/// The last line of a role: `done: <success>` when `ok`, else
/// `done: something unexpected happened (see above)`.
pub fn done(ok: bool, success: &str) {
    println!(
        "done: {}",
        if ok {
            success
        } else {
            "something unexpected happened (see above)"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_psns_are_24_bit_and_differ() {
        let psns: Vec<u32> = (0..8).map(|_| random_psn()).collect();
        assert!(psns.iter().all(|p| *p <= 0xff_ffff), "{psns:x?}");
        // Eight draws from fresh OS keys: all equal would mean the keys were not fresh.
        assert!(psns.iter().any(|p| *p != psns[0]), "{psns:x?}");
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        // From the FNV reference's test suite: the empty string is the offset basis.
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn framed_private_data_survives_padding() {
        let mut d = framed(b"client-3", lab::cm::MAX_CONNECT_DATA);
        assert_eq!(d, b"\x08client-3");
        // rdma_cm hands the server all 56 bytes of a REQ's private data.
        d.resize(lab::cm::MAX_CONNECT_DATA, 0);
        assert_eq!(unframed(&d), Some(&b"client-3"[..]));
        assert_eq!(unframed(&framed(b"", 56)), Some(&b""[..]));
        assert_eq!(unframed(b""), None);
        assert_eq!(unframed(b"\x05abc"), None);
    }

    #[test]
    fn framed_cuts_what_does_not_fit() {
        let long = [b'x'; 300];
        let d = framed(&long, lab::cm::MAX_CONNECT_DATA);
        assert_eq!(d.len(), lab::cm::MAX_CONNECT_DATA);
        assert_eq!(unframed(&d).map(<[u8]>::len), Some(55));
        // One length byte counts 255 at most, whatever the room.
        assert_eq!(unframed(&framed(&long, 1000)).map(<[u8]>::len), Some(255));
    }

    #[test]
    fn tagged_numbers_come_back_in_order_whatever_follows() {
        let d = Tagged::new(b"RGN1")
            .u64(0x1122_3344_5566_7788)
            .u32(4096)
            .u32(0x1234)
            .into_bytes();
        assert_eq!(d.len(), 20);
        assert_eq!(&d[..8], b"RGN1\x11\x22\x33\x44");
        // rdma_cm pads a REP's private data: what follows the numbers is not read.
        let mut padded = d.clone();
        padded.resize(196, 0);
        let mut r = Tagged::read(&padded, b"RGN1").unwrap();
        assert_eq!(r.u64(), Some(0x1122_3344_5566_7788));
        assert_eq!(r.u32(), Some(4096));
        assert_eq!(r.u32(), Some(0x1234));
        // Another tag, or too few bytes: no numbers.
        assert!(Tagged::read(&d, b"TBL1").is_none());
        let mut short = Tagged::read(&d[..14], b"RGN1").unwrap();
        assert_eq!(short.u64(), Some(0x1122_3344_5566_7788));
        assert_eq!(short.u32(), None);
    }

    #[test]
    fn this_program_again_keeps_our_arguments_then_adds() {
        let (exe, args) = again_argv(["--worker", "2"]).unwrap();
        assert_eq!(exe, std::env::current_exe().unwrap());
        let ours: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        assert_eq!(args.len(), ours.len() + 2);
        assert_eq!(
            args[..ours.len()],
            ours.iter().map(|a| a.as_os_str()).collect::<Vec<_>>()[..]
        );
        assert_eq!(args[ours.len()..], ["--worker", "2"]);
    }

    #[test]
    fn or_fail_says_what_and_why() {
        let r: Result<(), std::io::Error> = Err(std::io::Error::other("it broke"));
        assert_eq!(
            r.or_fail("open the device"),
            Err(Failure("open the device: it broke".into()))
        );
        assert_eq!(Ok::<u8, String>(3).or_fail("anything"), Ok(3));
    }

    #[test]
    fn wanted_device_prefers_the_flag() {
        assert_eq!(wanted_device(Some("rxe9")), Some("rxe9".to_string()));
    }
}
