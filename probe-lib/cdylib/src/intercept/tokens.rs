//! GPU time quotas, the process's side (`gsched_core::time_quota`): a
//! process of a job with a quota launches kernels only while it holds a
//! token from gnoded.
//!
//! A thread of the library's own ("gprobe-token") owns the token
//! connection. Kernel launches call [`before_launch`]: while the process
//! holds a token that costs two atomic operations; without one, the
//! launching thread asks the token thread for one and waits. The token
//! thread:
//! - asks gnoded when a launch waits, and marks the token held when
//!   granted;
//! - when the quota ends, asks to renew it (the process keeps launching
//!   meanwhile); when told to give it back (revoked, or the renewal
//!   refused), stops launches and gives it back once the process's work in
//!   flight is done, so that the time counted is the time the instance
//!   spent on it;
//! - gives it back early when the process has had nothing in flight and
//!   launched nothing for [`IDLE`] (a CPU phase), so the others need not
//!   wait for its quota to end. The time counts from when its work was
//!   seen done, not from its last launch: a loop that waits for each step
//!   launches its next one soon after, however long the step ran.
//!
//! A latency-critical process (its QOS's flag) is granted a token at once
//! unless it is over its limit, so its launches do not wait for the
//! answer: they ask and go on ([`OPTIMISTIC`]), and wait only after an ask
//! was not granted within [`LC_GRANT_WITHIN`]. It gives its token back
//! after a shorter idle time ([`LC_IDLE`]): while it holds one, the
//! ordinary processes of its instance wait.
//!
//! If the connection breaks (gnoded restarts), launches go on unheld
//! (gnoded's restart must not stop the job's GPU work) while the thread
//! opens a new one, every [`RECONNECT_EVERY`] for [`RECONNECT_FOR`]: the
//! restarted gnoded, which restores the placements of the processes still
//! running, holds them to their quota again.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use gsched_core::probe::{encode, frame_len, TokenReply, TokenRequest};

use super::{busy, GENERATION};

/// Launches are held to tokens.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The process generation (`GENERATION`) the token thread serves: a
/// forked child inherits these statics but not the thread, and is not
/// held by its parent's tokens (it places itself anew).
static ACTIVE_GENERATION: AtomicU64 = AtomicU64::new(0);
/// The process holds a token.
static HELD: AtomicBool = AtomicBool::new(false);
/// When the process last launched (microseconds since `epoch()`).
static LAST_LAUNCH: AtomicU64 = AtomicU64::new(0);
/// The eventfd that wakes the token thread.
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// Launches ask for a token without waiting for it (a latency-critical
/// process whose asks are granted at once).
static OPTIMISTIC: AtomicBool = AtomicBool::new(false);
/// Set by a launch waiting for a token; the condition variable wakes it.
static WANT: Mutex<bool> = Mutex::new(false);
static GRANTED: Condvar = Condvar::new();

/// Nothing launched and nothing in flight for this long: the token goes
/// back before its quota ends.
const IDLE: Duration = Duration::from_millis(2);
/// The same for a latency-critical process, and how often its held token
/// is looked at.
const LC_IDLE: Duration = Duration::from_micros(500);
const LC_HOLD_POLL: Duration = Duration::from_micros(250);
/// A latency-critical ask not granted within this long (its limit is
/// spent) makes its launches wait for grants again.
const LC_GRANT_WITHIN: Duration = Duration::from_millis(2);
/// How often the token thread looks at a held token, and at work in
/// flight while giving one back.
const HOLD_POLL: Duration = Duration::from_micros(500);
const DRAIN_POLL: Duration = Duration::from_micros(200);
/// How often, and for how long, a broken token connection is opened again.
const RECONNECT_EVERY: Duration = Duration::from_secs(1);
const RECONNECT_FOR: Duration = Duration::from_secs(120);
/// Work in flight that does not finish in this long is not waited for
/// (gnoded counts the token as given back anyway, later).
const DRAIN_MOST: Duration = Duration::from_secs(1);

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_us() -> u64 {
    epoch().elapsed().as_micros() as u64
}

/// Opens a token connection (again).
pub(super) type Opener = Box<dyn Fn() -> std::io::Result<UnixStream> + Send>;

/// Starts holding launches to tokens on `stream` (a token connection
/// gnoded accepted; `latency_critical` as the job's quota says; `reopen`
/// opens another when it breaks). Called once, after placement.
pub(super) fn start(stream: UnixStream, reopen: Opener, latency_critical: bool) {
    // SAFETY: a plain eventfd, owned by this module for the process's life.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return;
    }
    WAKE.store(fd, Ordering::Relaxed);
    epoch();
    let spawned = std::thread::Builder::new()
        .name("gprobe-token".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut stream = stream;
            loop {
                run(stream, latency_critical);
                // The connection broke: launches go on unheld meanwhile.
                HELD.store(false, Ordering::Release);
                ACTIVE.store(false, Ordering::Release);
                GRANTED.notify_all();
                let since = Instant::now();
                let reopened = loop {
                    std::thread::sleep(RECONNECT_EVERY);
                    match reopen() {
                        Ok(s) => break Some(s),
                        Err(_) if since.elapsed() < RECONNECT_FOR => continue,
                        Err(_) => break None,
                    }
                };
                let Some(s) = reopened else { return };
                stream = s;
                *WANT.lock().unwrap_or_else(|e| e.into_inner()) = false;
                ACTIVE.store(true, Ordering::Release);
            }
        });
    if spawned.is_ok() {
        ACTIVE_GENERATION.store(GENERATION.load(Ordering::Relaxed), Ordering::Relaxed);
        OPTIMISTIC.store(latency_critical, Ordering::Release);
        ACTIVE.store(true, Ordering::Release);
    }
}

/// A kernel launch is about to be made: returns once the process holds a
/// token (at once when quotas do not apply).
pub(super) fn before_launch() {
    if !ACTIVE.load(Ordering::Acquire)
        || ACTIVE_GENERATION.load(Ordering::Relaxed) != GENERATION.load(Ordering::Relaxed)
    {
        return;
    }
    LAST_LAUNCH.store(now_us(), Ordering::Relaxed);
    if HELD.load(Ordering::Acquire) {
        return;
    }
    let mut want = WANT.lock().unwrap_or_else(|e| e.into_inner());
    if OPTIMISTIC.load(Ordering::Acquire) {
        if !*want {
            *want = true;
            wake();
        }
        return;
    }
    while ACTIVE.load(Ordering::Acquire) && !HELD.load(Ordering::Acquire) {
        if !*want {
            *want = true;
            wake();
        }
        want = GRANTED
            .wait_timeout(want, Duration::from_millis(100))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    LAST_LAUNCH.store(now_us(), Ordering::Relaxed);
}

fn wake() {
    let fd = WAKE.load(Ordering::Relaxed);
    let one: u64 = 1;
    // SAFETY: writing 8 bytes to our eventfd.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Token {
    Idle,
    Asked {
        since: Instant,
    },
    Held {
        deadline: u64,
        renewing: bool,
        /// When its streams were first seen with nothing pending and no
        /// launch since (microseconds), if they are so now.
        quiet_since: Option<u64>,
    },
    /// Giving it back once the work in flight is done.
    Draining {
        since: Instant,
    },
}

fn send(stream: &mut UnixStream, req: TokenRequest) -> std::io::Result<()> {
    stream.write_all(&encode(&req))
}

fn read(stream: &mut UnixStream) -> std::io::Result<TokenReply> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header)?;
    let n = frame_len(header).map_err(std::io::Error::other)?;
    let mut body = vec![0u8; n];
    stream.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

/// Waits until the socket or the eventfd is readable, or `timeout`.
fn wait(stream: &UnixStream, timeout: Option<Duration>) -> std::io::Result<bool> {
    let wake = WAKE.load(Ordering::Relaxed);
    let mut fds = [
        libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.map_or(-1, |t| t.as_micros().div_ceil(1000).max(1) as i32);
    // SAFETY: two valid pollfds.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == std::io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    if fds[1].revents & libc::POLLIN != 0 {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes from our eventfd.
        unsafe { libc::read(wake, (&mut v as *mut u64).cast(), 8) };
    }
    if fds[0].revents & (libc::POLLHUP | libc::POLLERR) != 0 && fds[0].revents & libc::POLLIN == 0 {
        return Err(std::io::ErrorKind::BrokenPipe.into());
    }
    Ok(fds[0].revents & libc::POLLIN != 0)
}

fn set_held(held: bool) {
    HELD.store(held, Ordering::Release);
    if held {
        let _guard = WANT.lock().unwrap_or_else(|e| e.into_inner());
        GRANTED.notify_all();
    }
}

fn run(mut stream: UnixStream, latency_critical: bool) {
    let mut token = Token::Idle;
    let mut current = 0usize;
    let mut forgets = 0u64;
    let (idle_after, hold_poll) = if latency_critical {
        (LC_IDLE, LC_HOLD_POLL)
    } else {
        (IDLE, HOLD_POLL)
    };
    loop {
        let timeout = match token {
            Token::Held { .. } => Some(hold_poll),
            Token::Draining { .. } => Some(DRAIN_POLL),
            Token::Asked { .. } if latency_critical => Some(LC_GRANT_WITHIN),
            Token::Idle | Token::Asked { .. } => None,
        };
        let Ok(readable) = wait(&stream, timeout) else {
            return;
        };
        if readable {
            match read(&mut stream) {
                Ok(TokenReply::Grant { quota_us }) => {
                    if latency_critical {
                        OPTIMISTIC.store(true, Ordering::Release);
                    }
                    token = Token::Held {
                        deadline: now_us() + quota_us,
                        renewing: false,
                        quiet_since: None,
                    };
                    set_held(true);
                }
                Ok(TokenReply::Revoke) => {
                    if let Token::Held { .. } = token {
                        set_held(false);
                        token = Token::Draining {
                            since: Instant::now(),
                        };
                    }
                }
                Err(_) => return,
            }
        }
        let now = now_us();
        token = match token {
            Token::Held {
                deadline,
                renewing,
                quiet_since,
            } => {
                let idle_us = idle_after.as_micros() as u64;
                let last = LAST_LAUNCH.load(Ordering::Relaxed);
                // Looked at only once nothing was launched for a while.
                let quiet_since = if now.saturating_sub(last) <= idle_us
                    || busy::pending(&mut current, &mut forgets)
                {
                    None
                } else {
                    Some(quiet_since.filter(|&q| q >= last).unwrap_or(now))
                };
                let idle = quiet_since.is_some_and(|q| now.saturating_sub(q) >= idle_us);
                // (Not while a renewal is asked: its answer comes first.)
                if idle && !renewing {
                    set_held(false);
                    Token::Draining {
                        since: Instant::now(),
                    }
                } else if now >= deadline && !renewing {
                    if send(&mut stream, TokenRequest::Renew).is_err() {
                        return;
                    }
                    Token::Held {
                        deadline,
                        renewing: true,
                        quiet_since,
                    }
                } else {
                    Token::Held {
                        deadline,
                        renewing,
                        quiet_since,
                    }
                }
            }
            other => other,
        };
        if let Token::Draining { since } = token {
            if since.elapsed() >= DRAIN_MOST || !busy::pending(&mut current, &mut forgets) {
                // A launch already waiting asks with the give-back, so
                // that its turn is not lost to the order of the two.
                let wanted = *WANT.lock().unwrap_or_else(|e| e.into_inner());
                let (req, next) = if wanted {
                    (
                        TokenRequest::GiveBackAndAsk,
                        Token::Asked {
                            since: Instant::now(),
                        },
                    )
                } else {
                    (TokenRequest::GiveBack, Token::Idle)
                };
                if send(&mut stream, req).is_err() {
                    return;
                }
                token = next;
            }
        }
        if token == Token::Idle && *WANT.lock().unwrap_or_else(|e| e.into_inner()) {
            if send(&mut stream, TokenRequest::Ask).is_err() {
                return;
            }
            token = Token::Asked {
                since: Instant::now(),
            };
        }
        if let Token::Asked { since } = token {
            if latency_critical && since.elapsed() >= LC_GRANT_WITHIN {
                // Over its limit: its launches wait for grants now.
                OPTIMISTIC.store(false, Ordering::Release);
            }
        }
        if matches!(token, Token::Asked { .. } | Token::Held { .. }) {
            // A grant satisfies the launches waiting for it.
            if HELD.load(Ordering::Acquire) {
                *WANT.lock().unwrap_or_else(|e| e.into_inner()) = false;
            }
        }
    }
}
