//! Simulated jobs: the papers' workload setups as seeded generators, and
//! traces read from JSON or CSV.
//!
//! A job is a sequence of phases: CPU phases (the GPU is idle), and GPU
//! tasks with a memory footprint, a parallelism and a duration when run
//! alone on one compute slice.

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

const GIB: f64 = 1024.0;

/// One phase of a simulated job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Phase {
    /// CPU work (data loading, pre/post-processing): seconds.
    Cpu { secs: f64 },
    /// A GPU task: its memory (MiB), its parallelism in compute slices
    /// (how much of a 1-slice instance it keeps busy alone; > 1 means it
    /// could use a bigger instance), and its duration alone on one slice.
    Gpu {
        mem_mib: u64,
        slices: f64,
        secs: f64,
    },
}

/// One simulated job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimJob {
    pub name: String,
    pub isolated: bool,
    /// The footprint an isolated job states (and Slurm sizes its instance
    /// by): its peak memory, MiB.
    pub footprint_mib: u64,
    /// Submission time, seconds.
    #[serde(default)]
    pub submit: f64,
    pub phases: Vec<Phase>,
    /// Its user (traces; `sim` when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its nice (traces; as `sbatch --nice`), under a priority policy
    /// that weighs it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nice: i64,
    /// The account it is charged to (`--account`), under a site's
    /// accounts ([`super::SimSite`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Its QOS (`--qos`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// Its time limit, seconds (`--time`): killed when it runs longer;
    /// what backfill plans with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<f64>,
    /// The nodes it runs on (`-N`; isolated jobs only): its phases run
    /// on each, in step, each node's share on its own instance.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub nodes: u32,
    /// It wants its node(s) alone (`--exclusive`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
    /// Instances on each of its nodes (`--gres=gpu:N`; isolated jobs
    /// only): its phases run on the first, the others are held with it.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub gpus: u32,
    /// CPUs on each of its nodes (`-c`; a simulated node has 1024).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub cpus: u32,
    /// Its GPU time quota (`--gpu-share=REQ[:LIMIT]`, of a whole GPU;
    /// shared jobs): its GPU tasks run only while it holds a token of its
    /// instance's token scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_share: Option<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl Default for SimJob {
    fn default() -> Self {
        SimJob {
            name: String::new(),
            isolated: false,
            footprint_mib: 0,
            submit: 0.0,
            phases: Vec::new(),
            user: None,
            nice: 0,
            account: None,
            qos: None,
            time_limit: None,
            nodes: 1,
            exclusive: false,
            gpus: 1,
            cpus: 1,
            gpu_share: None,
        }
    }
}

impl SimJob {
    /// The largest memory any of its GPU tasks uses.
    pub fn peak_mib(&self) -> u64 {
        self.phases
            .iter()
            .map(|p| match p {
                Phase::Gpu { mem_mib, .. } => *mem_mib,
                Phase::Cpu { .. } => 0,
            })
            .max()
            .unwrap_or(0)
            .max(self.footprint_mib)
    }

    /// Its run time alone on a 1-slice instance.
    pub fn alone_secs(&self) -> f64 {
        self.phases
            .iter()
            .map(|p| match p {
                Phase::Cpu { secs } | Phase::Gpu { secs, .. } => *secs,
            })
            .sum()
    }
}

/// Footprint ranges of the MIG paper's non-isolated (Rodinia) jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Footprints {
    /// 1 GB to 6 GB.
    OneToSix,
    /// 300 MB to 6 GB.
    ThreeHundredMbToSix,
    /// 1 GB to 10 GB: our pool for the A100 experiment (2x 2g.10gb +
    /// 3x 1g.5gb), where about half the shared jobs need a 10 GB slice.
    OneToTen,
}

impl Footprints {
    fn range_mib(self) -> (f64, f64) {
        match self {
            Footprints::OneToSix => (1.0 * GIB, 5.6 * GIB),
            Footprints::ThreeHundredMbToSix => (0.3 * GIB, 5.6 * GIB),
            Footprints::OneToTen => (1.0 * GIB, 9.5 * GIB),
        }
    }
}

/// The workload generator's knobs (see docs/simulator.md for why).
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    /// Isolated : non-isolated.
    pub isolated: u32,
    pub shared: u32,
    pub jobs: usize,
    pub footprints: Footprints,
    pub seed: u64,
    /// The share of a non-isolated job's alone time spent in GPU tasks:
    /// its CPU phases are scaled to give it (same draws otherwise). `None`
    /// keeps the drawn phases (about 0.74 on average).
    pub gpu_share: Option<f64>,
}

/// A CASE-paper batch: `jobs` jobs submitted at time 0, isolated and
/// non-isolated in the ratio of `mix`, in a seeded random order.
///
/// - Isolated jobs (NN training): footprint 1.8-2.2 GiB held for the whole
///   job; 1-3 s of setup on the CPU, then 20-40 steps, each 0.2-0.6 s of
///   data loading and 1.5-3 s of GPU work using 60-100% of a 1g slice.
/// - Non-isolated jobs (Rodinia-like): 2-4 rounds, each 1-8 s of CPU work
///   then a GPU task of 5-25 s using 20-80% of a 1g slice, with memory
///   drawn uniformly from the footprint range (the same for the job's
///   tasks: one process, one data set); 1-4 s of CPU at the end.
pub fn generate(mix: &Mix) -> Vec<SimJob> {
    let mut rng = ChaCha8Rng::seed_from_u64(mix.seed);
    let total = mix.isolated + mix.shared;
    let n_iso = if total == 0 {
        0
    } else {
        (mix.jobs as u64 * mix.isolated as u64).div_ceil(total as u64) as usize
    }
    .min(mix.jobs);
    let mut kinds: Vec<bool> = (0..mix.jobs).map(|i| i < n_iso).collect();
    // Fisher-Yates with the seeded generator.
    for i in (1..kinds.len()).rev() {
        let j = rng.gen_range(0..=i);
        kinds.swap(i, j);
    }
    let (lo, hi) = mix.footprints.range_mib();
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, isolated)| {
            if isolated {
                let footprint = rng.gen_range(1.8 * GIB..2.2 * GIB) as u64;
                let mut phases = vec![Phase::Cpu {
                    secs: rng.gen_range(1.0..3.0),
                }];
                for _ in 0..rng.gen_range(20..=40) {
                    phases.push(Phase::Cpu {
                        secs: rng.gen_range(0.2..0.6),
                    });
                    phases.push(Phase::Gpu {
                        mem_mib: footprint,
                        slices: rng.gen_range(0.6..1.0),
                        secs: rng.gen_range(1.5..3.0),
                    });
                }
                SimJob {
                    name: format!("train-{i}"),
                    isolated: true,
                    footprint_mib: footprint,
                    submit: 0.0,
                    phases,
                    ..SimJob::default()
                }
            } else {
                let mem = rng.gen_range(lo..hi) as u64;
                let mut phases = Vec::new();
                for _ in 0..rng.gen_range(2..=4) {
                    phases.push(Phase::Cpu {
                        secs: rng.gen_range(1.0..8.0),
                    });
                    phases.push(Phase::Gpu {
                        mem_mib: mem,
                        slices: rng.gen_range(0.2..0.8),
                        secs: rng.gen_range(5.0..25.0),
                    });
                }
                phases.push(Phase::Cpu {
                    secs: rng.gen_range(1.0..4.0),
                });
                if let Some(share) = mix.gpu_share {
                    scale_cpu_to_gpu_share(&mut phases, share);
                }
                SimJob {
                    name: format!("rodinia-{i}"),
                    isolated: false,
                    footprint_mib: mem,
                    submit: 0.0,
                    phases,
                    ..SimJob::default()
                }
            }
        })
        .collect()
}

/// Scales the CPU phases so that GPU tasks take `share` (0 < share <= 1)
/// of the phases' total time.
fn scale_cpu_to_gpu_share(phases: &mut [Phase], share: f64) {
    let (mut cpu, mut gpu) = (0.0, 0.0);
    for p in phases.iter() {
        match p {
            Phase::Cpu { secs } => cpu += secs,
            Phase::Gpu { secs, .. } => gpu += secs,
        }
    }
    if cpu <= 0.0 || !(share > 0.0 && share <= 1.0) {
        return;
    }
    let factor = gpu * (1.0 - share) / share / cpu;
    for p in phases.iter_mut() {
        if let Phase::Cpu { secs } = p {
            *secs *= factor;
        }
    }
}

/// A trace that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("invalid JSON trace: {0}")]
    Json(String),
    #[error("CSV trace line {line}: {why}")]
    Csv { line: usize, why: String },
    #[error("job '{0}' has no phases")]
    Empty(String),
}

/// Reads a trace: JSON (an array of [`SimJob`]) or CSV with the header
/// `job,isolated,submit,kind,secs,mem_mib,slices`, one phase per line, the
/// phases of a job in order (see docs/simulator.md).
pub fn parse_trace(text: &str) -> Result<Vec<SimJob>, TraceError> {
    let jobs = if text.trim_start().starts_with('[') {
        serde_json::from_str::<Vec<SimJob>>(text).map_err(|e| TraceError::Json(e.to_string()))?
    } else {
        parse_csv(text)?
    };
    for j in &jobs {
        if j.phases.is_empty() {
            return Err(TraceError::Empty(j.name.clone()));
        }
    }
    Ok(jobs)
}

fn parse_csv(text: &str) -> Result<Vec<SimJob>, TraceError> {
    let mut jobs: Vec<SimJob> = Vec::new();
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let header = lines.next().map(|(_, l)| l.trim()).unwrap_or("");
    if header != "job,isolated,submit,kind,secs,mem_mib,slices" {
        return Err(TraceError::Csv {
            line: 1,
            why: "the header must be job,isolated,submit,kind,secs,mem_mib,slices".into(),
        });
    }
    for (n, l) in lines {
        let line = n + 1;
        let bad = |why: &str| TraceError::Csv {
            line,
            why: why.into(),
        };
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        if f.len() != 7 {
            return Err(bad("expected 7 fields"));
        }
        let num = |s: &str, what: &str| {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(&format!("{what} '{s}' is not a non-negative number")))
        };
        let isolated = match f[1] {
            "1" | "true" => true,
            "0" | "false" => false,
            other => return Err(bad(&format!("isolated must be 0 or 1, not '{other}'"))),
        };
        let submit = num(f[2], "submit")?;
        let secs = num(f[4], "secs")?;
        let phase = match f[3] {
            "cpu" => Phase::Cpu { secs },
            "gpu" => Phase::Gpu {
                mem_mib: num(f[5], "mem_mib")? as u64,
                slices: num(f[6], "slices")?.max(0.01),
                secs,
            },
            other => return Err(bad(&format!("kind must be cpu or gpu, not '{other}'"))),
        };
        match jobs.last_mut() {
            Some(j) if j.name == f[0] => j.phases.push(phase),
            _ => jobs.push(SimJob {
                name: f[0].to_string(),
                isolated,
                footprint_mib: 0,
                submit,
                phases: vec![phase],
                ..SimJob::default()
            }),
        }
    }
    for j in &mut jobs {
        j.footprint_mib = j.peak_mib();
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_seeded_and_follows_the_mix() {
        let mix = Mix {
            isolated: 1,
            shared: 4,
            jobs: 128,
            footprints: Footprints::OneToSix,
            seed: 1,
            gpu_share: None,
        };
        let a = generate(&mix);
        assert_eq!(a, generate(&mix));
        assert_ne!(a, generate(&Mix { seed: 2, ..mix }));
        assert_eq!(a.iter().filter(|j| j.isolated).count(), 26);
        for j in &a {
            assert!(j.peak_mib() <= 5952, "fits a 1g.6gb instance");
            assert!(j.alone_secs() > 0.0);
        }
        let all_iso = generate(&Mix {
            isolated: 1,
            shared: 0,
            ..mix
        });
        assert!(all_iso.iter().all(|j| j.isolated));
    }

    #[test]
    fn gpu_share_scales_only_the_cpu_phases_of_shared_jobs() {
        let mix = Mix {
            isolated: 1,
            shared: 1,
            jobs: 20,
            footprints: Footprints::OneToSix,
            seed: 3,
            gpu_share: None,
        };
        let drawn = generate(&mix);
        let scaled = generate(&Mix {
            gpu_share: Some(0.3),
            ..mix
        });
        let gpu_secs = |j: &SimJob| -> f64 {
            j.phases
                .iter()
                .map(|p| match p {
                    Phase::Gpu { secs, .. } => *secs,
                    Phase::Cpu { .. } => 0.0,
                })
                .sum()
        };
        for (a, b) in drawn.iter().zip(&scaled) {
            assert_eq!(gpu_secs(a), gpu_secs(b), "GPU tasks are unchanged");
            if a.isolated {
                assert_eq!(a, b);
            } else {
                assert!((gpu_secs(b) / b.alone_secs() - 0.3).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn traces_in_json_and_csv() {
        let csv = "job,isolated,submit,kind,secs,mem_mib,slices\na,0,0,cpu,2,0,0\na,0,0,gpu,5,3000,0.5\nb,1,1.5,gpu,3,2000,1\n";
        let jobs = parse_trace(csv).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].phases.len(), 2);
        assert_eq!(jobs[0].footprint_mib, 3000);
        assert!(jobs[1].isolated);
        assert_eq!(jobs[1].submit, 1.5);
        let json = serde_json::to_string(&jobs).unwrap();
        assert_eq!(parse_trace(&json).unwrap(), jobs);
        for (bad, what) in [
            ("job,x\n", "header"),
            (
                "job,isolated,submit,kind,secs,mem_mib,slices\na,0,0,tpu,1,0,0\n",
                "kind",
            ),
            (
                "job,isolated,submit,kind,secs,mem_mib,slices\na,0,0,gpu,-1,0,0\n",
                "secs",
            ),
            (
                "job,isolated,submit,kind,secs,mem_mib,slices\na,2,0,gpu,1,0,0\n",
                "isolated",
            ),
            (
                "[{\"name\":\"x\",\"isolated\":false,\"footprint_mib\":0,\"phases\":[]}]",
                "phases",
            ),
        ] {
            let e = parse_trace(bad).unwrap_err().to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
    }
}
