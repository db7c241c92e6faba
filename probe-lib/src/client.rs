//! The Rust client of the probe protocol (`gsched_core::probe`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use gsched_core::job::JobId;
use gsched_core::placement::TaskId;
use gsched_core::probe::{
    code, encode, frame_len, ProbeReply, ProbeRequest, JOB_ID_ENV, JOB_KEY_ENV, PROBE_SOCK_ENV,
    TASK_SHARE_ENV,
};
use gsched_core::sm::KernelShape;

/// An error from the probe: a negative code (see `gsched_core::probe::code`)
/// and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeError {
    pub code: i32,
    pub message: String,
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProbeError {}

fn err(code: i32, message: impl Into<String>) -> ProbeError {
    ProbeError {
        code,
        message: message.into(),
    }
}

/// How many times (a second apart) a process waiting for its instances
/// tries gnoded again when its connection breaks.
pub const GATE_RECONNECT_TRIES: u32 = 120;

/// Where a task was placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub task: TaskId,
    pub instance: String,
    pub mps_pipe_dir: Option<String>,
    pub bytes: u64,
}

/// A connection to the node's probe server, for one job.
pub struct ProbeClient {
    stream: UnixStream,
    sock: String,
    job: JobId,
    key: String,
    /// The compute demand its tasks state (`GSCHED_TASK_SHARE`).
    share: Option<u32>,
}

impl ProbeClient {
    /// Connects with the job's environment (`GSCHED_PROBE_SOCK`,
    /// `GSCHED_JOB_ID`, `GSCHED_JOB_KEY`).
    pub fn from_env() -> Result<ProbeClient, ProbeError> {
        let var = |name: &str| {
            std::env::var(name).map_err(|_| {
                err(
                    code::UNAVAILABLE,
                    format!("not inside a gsched job: {name} is not set"),
                )
            })
        };
        let sock = var(PROBE_SOCK_ENV)?;
        let job: JobId = var(JOB_ID_ENV)?
            .parse()
            .map_err(|_| err(code::PROTOCOL, format!("{JOB_ID_ENV} is not a job id")))?;
        let key = var(JOB_KEY_ENV)?;
        let share = match std::env::var(TASK_SHARE_ENV) {
            Ok(v) => Some(
                v.parse::<u32>()
                    .ok()
                    .filter(|s| gsched_core::compute::is_share(*s))
                    .ok_or_else(|| {
                        err(
                            code::PROTOCOL,
                            format!("{TASK_SHARE_ENV}='{v}' is not a GPU share in thousandths of a GPU (1 to 1000)"),
                        )
                    })?,
            ),
            Err(_) => None,
        };
        Ok(ProbeClient::connect(&sock, job, key)?.with_share(share))
    }

    /// States the compute demand of the tasks this client begins
    /// (thousandths of a whole GPU); `None` leaves it to the node.
    pub fn with_share(mut self, share: Option<u32>) -> ProbeClient {
        self.share = share;
        self
    }

    pub fn connect(sock: &str, job: JobId, key: String) -> Result<ProbeClient, ProbeError> {
        let stream = UnixStream::connect(sock).map_err(|e| {
            err(
                code::UNAVAILABLE,
                format!("cannot reach gnoded's probe socket {sock}: {e}"),
            )
        })?;
        Ok(ProbeClient {
            stream,
            sock: sock.to_string(),
            job,
            key,
            share: None,
        })
    }

    /// One exchange; if the connection broke (gnoded restarted), connects
    /// again and retries once: gnoded restores the job's reservations.
    fn call(&mut self, req: &ProbeRequest) -> Result<ProbeReply, ProbeError> {
        match self.exchange(req) {
            Err(e) if e.code == code::UNAVAILABLE && e.message.starts_with("probe socket:") => {
                let fresh = ProbeClient::connect(&self.sock, self.job, self.key.clone())?;
                self.stream = fresh.stream;
                self.exchange(req)
            }
            other => other,
        }
    }

    fn exchange(&mut self, req: &ProbeRequest) -> Result<ProbeReply, ProbeError> {
        let broken = |e: std::io::Error| err(code::UNAVAILABLE, format!("probe socket: {e}"));
        self.stream.write_all(&encode(req)).map_err(broken)?;
        let mut header = [0u8; 4];
        self.stream.read_exact(&mut header).map_err(broken)?;
        let n = frame_len(header).map_err(|e| err(code::PROTOCOL, e.to_string()))?;
        let mut body = vec![0u8; n];
        self.stream.read_exact(&mut body).map_err(broken)?;
        match serde_json::from_slice(&body) {
            Ok(ProbeReply::Error { code, message }) => Err(err(code, message)),
            Ok(r) => Ok(r),
            Err(e) => Err(err(
                code::PROTOCOL,
                format!("malformed reply from gnoded: {e}"),
            )),
        }
    }

    fn ok(&mut self, req: ProbeRequest) -> Result<(), ProbeError> {
        match self.call(&req)? {
            ProbeReply::Ok => Ok(()),
            other => Err(err(code::PROTOCOL, format!("unexpected reply {other:?}"))),
        }
    }

    /// Asks for a place for a task; blocks until it is placed.
    pub fn begin(&mut self, bytes: u64, warps: u64) -> Result<Placement, ProbeError> {
        self.begin_kernel(bytes, warps, None)
    }

    /// [`ProbeClient::begin`] with the launch shape of the task's kernel,
    /// for placement policies that emulate SM slots.
    pub fn begin_kernel(
        &mut self,
        bytes: u64,
        warps: u64,
        shape: Option<KernelShape>,
    ) -> Result<Placement, ProbeError> {
        let req = ProbeRequest::Begin {
            job: self.job,
            key: self.key.clone(),
            bytes,
            warps,
            shape,
            share: self.share,
        };
        match self.call(&req)? {
            ProbeReply::Placed {
                task,
                instance,
                mps_pipe_dir,
                bytes,
            } => Ok(Placement {
                task,
                instance,
                mps_pipe_dir,
                bytes,
            }),
            other => Err(err(code::PROTOCOL, format!("unexpected reply {other:?}"))),
        }
    }

    pub fn end(&mut self, task: TaskId) -> Result<(), ProbeError> {
        self.ok(ProbeRequest::End {
            job: self.job,
            key: self.key.clone(),
            task,
        })
    }

    /// Grows a task's reservation on its instance (fails with `code::FULL`).
    /// Grows the task's reservation by `bytes`, or by `at_least` if only
    /// that fits; waits for room when neither fits now. Returns by how
    /// much it grew.
    pub fn grow(&mut self, task: TaskId, bytes: u64, at_least: u64) -> Result<u64, ProbeError> {
        match self.call(&ProbeRequest::Grow {
            job: self.job,
            key: self.key.clone(),
            task,
            bytes,
            at_least: Some(at_least),
        })? {
            ProbeReply::Grown { bytes } => Ok(bytes),
            other => Err(err(code::PROTOCOL, format!("unexpected reply {other:?}"))),
        }
    }

    pub fn warps(&mut self, task: TaskId, warps: u64) -> Result<(), ProbeError> {
        self.ok(ProbeRequest::Warps {
            job: self.job,
            key: self.key.clone(),
            task,
            warps,
        })
    }

    /// Moves this process into a cgroup of its own for `srun` step `step`
    /// (the tasks it starts next are the step's).
    pub fn step_begin(&mut self, step: u32) -> Result<(), ProbeError> {
        self.ok(ProbeRequest::StepBegin {
            job: self.job,
            key: self.key.clone(),
            step,
        })
    }

    /// Ends step `step`: this process goes back where it came from, what
    /// the step left running is killed and its use is counted.
    pub fn step_end(&mut self, step: u32) -> Result<(), ProbeError> {
        self.ok(ProbeRequest::StepEnd {
            job: self.job,
            key: self.key.clone(),
            step,
        })
    }

    /// For an isolated job started early: returns once its instances are
    /// its own (gnoded answers when they are free). Rides out a gnoded
    /// restart (it waits again after adopting the job) for up to
    /// [`GATE_RECONNECT_TRIES`] seconds.
    pub fn wait_gate(&mut self) -> Result<(), ProbeError> {
        let req = ProbeRequest::Gate {
            job: self.job,
            key: self.key.clone(),
        };
        let mut tries = 0;
        loop {
            match self.call(&req) {
                Ok(ProbeReply::Ok) => return Ok(()),
                Ok(other) => {
                    return Err(err(code::PROTOCOL, format!("unexpected reply {other:?}")))
                }
                Err(e) if e.code == code::UNAVAILABLE && tries < GATE_RECONNECT_TRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_secs(1));
                    if let Ok(fresh) = ProbeClient::connect(&self.sock, self.job, self.key.clone())
                    {
                        self.stream = fresh.stream;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Opens this (placed) process's token connection for its job's GPU
    /// time quota: a new connection, on which gnoded sends
    /// `TokenReply`s and takes `TokenRequest`s from here on.
    pub fn token_stream(&self) -> Result<UnixStream, ProbeError> {
        let mut fresh = ProbeClient::connect(&self.sock, self.job, self.key.clone())?;
        fresh.ok(ProbeRequest::Tokens {
            job: self.job,
            key: self.key.clone(),
        })?;
        Ok(fresh.stream)
    }

    /// What opens this process's token connection again (on a fresh
    /// connection to the same socket), for when the first one breaks.
    pub fn token_opener(&self) -> Box<dyn Fn() -> std::io::Result<UnixStream> + Send + 'static> {
        let (sock, job, key) = (self.sock.clone(), self.job, self.key.clone());
        Box::new(move || {
            ProbeClient::connect(&sock, job, key.clone())
                .and_then(|c| c.token_stream())
                .map_err(std::io::Error::other)
        })
    }

    /// Reports this process's peak GPU memory, and how long it kept its
    /// instance busy while placed where that was measured.
    pub fn peak(
        &mut self,
        bytes: u64,
        busy: Option<gsched_core::probe::BusyTime>,
    ) -> Result<(), ProbeError> {
        self.ok(ProbeRequest::Peak {
            job: self.job,
            key: self.key.clone(),
            bytes,
            busy,
        })
    }

    /// What opens a second connection for the same job when it is first
    /// needed, for a thread of its own (the interception library's busy
    /// reports, which must never wait on the first one). Opened later, not
    /// now: gnoded closes a connection that sends nothing for a while.
    pub fn opener(&self) -> ProbeOpener {
        let (sock, job, key) = (self.sock.clone(), self.job, self.key.clone());
        Box::new(move || ProbeClient::connect(&sock, job, key.clone()))
    }

    /// Reports how long this process has kept its instance busy since its
    /// sampler started, while it runs: gnoded corrects its compute demand.
    pub fn busy(&mut self, busy: gsched_core::probe::BusyTime) -> Result<(), ProbeError> {
        self.ok(ProbeRequest::Busy {
            job: self.job,
            key: self.key.clone(),
            busy,
        })
    }
}

/// Opens a fresh connection for a job ([`ProbeClient::opener`]).
pub type ProbeOpener = Box<dyn Fn() -> Result<ProbeClient, ProbeError> + Send + 'static>;

/// The environment a placed process (or its child) needs.
pub fn placement_env(p: &Placement) -> Vec<(&'static str, String)> {
    let mut v = vec![("CUDA_VISIBLE_DEVICES", p.instance.clone())];
    if let Some(d) = &p.mps_pipe_dir {
        v.push(("CUDA_MPS_PIPE_DIRECTORY", d.clone()));
    }
    v
}
