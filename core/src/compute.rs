//! Compute demand: how much of a GPU's compute a shared task keeps busy, so
//! that placement can stop piling busy tasks onto one instance.
//!
//! A demand is a GPU share in thousandths of a whole GPU (1000: the task
//! keeps a whole GPU busy all the time). It is stated by the user
//! (`--gpu-share`), else learned from an earlier run of the same job (the
//! share of its placed time during which it had work in flight on the GPU,
//! as the interception library sampled it; else its GPU time over its
//! elapsed time, from the driver's per-process utilization), else the
//! node's default. An instance offers its part of its GPU
//! ([`instance_capacity`]: a whole GPU 1000, a 3g of 7 slices 428), and the
//! node's compute ceiling bounds what the tasks bound to it may demand
//! together, as a share of that capacity.
//!
//! A share counts time, not SMs: a process that always has a kernel in
//! flight counts as a whole GPU even when its kernels leave most SMs idle,
//! so tasks whose shares add up past the instance still gain from running
//! together. On an H100 the default ceiling of 3 (three times the
//! instance's time) gave the most throughput of 1, 1.5, 2 and 3 with
//! learned shares, and the lowest slowdown of memory-blind sharing's
//! (docs/benchmarks.md).

use crate::gpu::{model, Instance};

/// A whole GPU, in the thousandths demands are counted in.
pub const WHOLE_GPU: u32 = 1000;

/// The demand of a task nothing is known about, in thousandths of the
/// instance it runs on (not of a GPU: on a MIG slice as on a whole GPU):
/// three eighths, so that under the default ceiling (3) eight such tasks
/// share an instance, as memory-blind sharing with eight jobs per GPU
/// (`cg:8`) would run them.
pub const DEFAULT_TASK_SHARE: u32 = 375;

/// The default ceiling as a setting (`--compute-ceiling`): tasks bound to
/// an instance may together demand three times its time (see above).
pub const DEFAULT_COMPUTE_CEILING: &str = "3";

/// The default share as a setting (`--default-gpu-share`, a fraction of
/// the instance), as [`DEFAULT_TASK_SHARE`] says.
pub const DEFAULT_TASK_SHARE_SETTING: &str = "0.375";

/// A GPU share that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    #[error("GPU share '{0}' is not a number: give a fraction of a GPU such as 0.25, or a percentage such as 25%")]
    NotANumber(String),
    #[error("GPU share '{0}' is out of range: it must be above 0 and at most 1 (100%)")]
    OutOfRange(String),
    #[error("GPU share '{0}': one number is expected here (a request with a limit, REQ:LIMIT, is for a job's --gpu-share)")]
    LimitNotSupported(String),
}

/// Whether `thousandths` is a GPU share a task may state: above 0, at most
/// a whole GPU.
pub fn is_share(thousandths: u32) -> bool {
    (1..=WHOLE_GPU).contains(&thousandths)
}

/// Reads a GPU share: a fraction (`0.25`) or a percentage (`25%`) of one
/// GPU, above 0 and at most 1. Returns thousandths (at least 1).
pub fn parse_share(text: &str) -> Result<u32, ShareError> {
    let t = text.trim();
    if t.contains(':') {
        return Err(ShareError::LimitNotSupported(text.into()));
    }
    let (number, scale) = match t.strip_suffix('%') {
        Some(p) => (p.trim(), 100.0),
        None => (t, 1.0),
    };
    let v: f64 = number
        .parse()
        .map_err(|_| ShareError::NotANumber(text.into()))?;
    if !v.is_finite() {
        return Err(ShareError::NotANumber(text.into()));
    }
    let fraction = v / scale;
    if fraction <= 0.0 || fraction > 1.0 {
        return Err(ShareError::OutOfRange(text.into()));
    }
    Ok(((fraction * WHOLE_GPU as f64).round() as u32).clamp(1, WHOLE_GPU))
}

/// A compute ceiling that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CeilingError(pub String);

impl From<String> for CeilingError {
    fn from(why: String) -> Self {
        CeilingError(why)
    }
}

/// A ceiling as a setting: a ratio of an instance's compute (`1`, `1.5`),
/// or a percentage (`150%`), above 0 and at most 8; or `off` (memory alone
/// decides). Returns thousandths.
pub fn parse_ceiling(text: &str) -> Result<Option<u32>, CeilingError> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let (number, scale) = match t.strip_suffix('%') {
        Some(p) => (p.trim(), 100.0),
        None => (t, 1.0),
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v / scale > 0.0 && v / scale <= 8.0 => {
            Ok(Some(((v / scale) * WHOLE_GPU as f64).round().max(1.0) as u32))
        }
        _ => Err(CeilingError(format!(
            "compute ceiling '{text}' must be a ratio above 0 and at most 8 (such as 1, 1.5 or 150%), or off"
        ))),
    }
}

/// The share a finished run kept a GPU busy: its GPU time over its elapsed
/// time, in thousandths, at most a whole GPU. `None` when nothing was
/// measured (no GPU time: MIG instances, simulated GPUs; or a run of no
/// length).
pub fn share_of_run(gpu_time_usec: Option<u64>, elapsed_secs: i64) -> Option<u32> {
    let busy = gpu_time_usec.filter(|&t| t > 0)?;
    if elapsed_secs <= 0 {
        return None;
    }
    let elapsed_usec = elapsed_secs as u128 * 1_000_000;
    let share = (busy as u128 * WHOLE_GPU as u128).div_ceil(elapsed_usec);
    Some(share.clamp(1, WHOLE_GPU as u128) as u32)
}

/// The share of a GPU processes kept busy while placed: `busy` (in
/// microseconds of a whole GPU) over `placed`, in thousandths, at most a
/// whole GPU. `None` when not measured. A process that never had work in
/// flight learns the least demand there is (1), not none.
pub fn share_of_busy(busy: Option<u64>, placed: Option<u64>) -> Option<u32> {
    let placed = placed.filter(|&p| p > 0)?;
    let share = (busy? as u128 * WHOLE_GPU as u128).div_ceil(placed as u128);
    Some(share.clamp(1, WHOLE_GPU as u128) as u32)
}

/// Microseconds of a whole GPU that `usec` busy on an instance offering
/// `capacity` thousandths of its GPU come to.
pub fn whole_gpu_usec(usec: u64, capacity: u32) -> u64 {
    (usec as u128 * capacity.min(WHOLE_GPU) as u128 / WHOLE_GPU as u128) as u64
}

/// The part of its GPU an instance offers, in thousandths of the GPU: a
/// whole GPU 1000, a MIG instance its compute slices over the model's
/// (a model gsched has no table for counts as whole).
pub fn instance_capacity(i: &Instance) -> u32 {
    if i.profile.is_none() {
        return WHOLE_GPU;
    }
    match model(&i.model) {
        Some(m) if m.compute_slices > 0 => {
            (i.compute_slices.min(m.compute_slices) * WHOLE_GPU / m.compute_slices).max(1)
        }
        _ => WHOLE_GPU,
    }
}

/// What a task takes of an instance offering `capacity` (thousandths of a
/// GPU): its stated or learned `share` of a GPU, but no more than the whole
/// instance; a task that states none counts `default` thousandths of the
/// instance. At least 1.
pub fn demand_on(share: Option<u32>, capacity: u32, default: u32) -> u32 {
    match share {
        Some(s) => s.min(capacity),
        None => (capacity as u64 * default as u64 / WHOLE_GPU as u64) as u32,
    }
    .max(1)
}

/// How often the interception library reports how long its process has
/// kept its instance busy so far, while it runs (ms).
pub const BUSY_REPORT_EVERY_MS: u64 = 1_000;

/// The least placed time a measurement covers before a process's demand
/// is taken from it (microseconds): shorter windows say more about when
/// the sampler ran than about the program.
pub const MEASURE_WINDOW_USEC: u64 = 1_000_000;

/// What a window measured: the process had work in flight `busy_usec` of
/// the `placed_usec` it was placed, on an instance offering `capacity`
/// thousandths of its GPU. Returns its demand in thousandths of a GPU (at
/// least 1, at most the instance); `None` for a window shorter than
/// [`MEASURE_WINDOW_USEC`].
pub fn window_demand(busy_usec: u64, placed_usec: u64, capacity: u32) -> Option<u32> {
    if placed_usec < MEASURE_WINDOW_USEC {
        return None;
    }
    let of_instance = busy_usec.min(placed_usec) as u128 * capacity.min(WHOLE_GPU) as u128;
    let demand = of_instance.div_ceil(placed_usec as u128);
    Some((demand as u32).clamp(1, capacity.clamp(1, WHOLE_GPU)))
}

/// A process's demand after a window measured `window`, from `previous`
/// (`None`: the first measurement, which replaces the first guess
/// outright). A rise is taken at once, so that placement backs off as
/// soon as an instance fills; a fall halfway, so that one quiet window
/// (a copy, a checkpoint) does not open the instance to a crowd.
pub fn next_demand(previous: Option<u32>, window: u32) -> u32 {
    match previous {
        Some(p) if window < p => p - (p - window) / 2,
        _ => window,
    }
}

/// Whether a process taking `demand` may be bound to an instance of
/// `capacity` whose bound tasks already take `load`, under `ceiling`
/// (thousandths of capacity). An instance with nothing on it takes any one
/// task, so a demand above the ceiling still runs (alone).
pub fn fits_under(load: u32, demand: u32, capacity: u32, ceiling: u32) -> bool {
    if load == 0 {
        return true;
    }
    let limit = capacity as u64 * ceiling as u64 / WHOLE_GPU as u64;
    (load as u64 + demand as u64) <= limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_read_as_fractions_or_percentages() {
        assert_eq!(parse_share("0.25"), Ok(250));
        assert_eq!(parse_share("25%"), Ok(250));
        assert_eq!(parse_share(" 1 "), Ok(1000));
        assert_eq!(parse_share("100%"), Ok(1000));
        assert_eq!(parse_share("0.0001"), Ok(1), "at least one thousandth");
        assert!(is_share(1) && is_share(1000) && !is_share(0) && !is_share(1001));
        assert!(matches!(parse_share("0"), Err(ShareError::OutOfRange(_))));
        assert!(matches!(parse_share("1.5"), Err(ShareError::OutOfRange(_))));
        assert!(matches!(
            parse_share("-0.1"),
            Err(ShareError::OutOfRange(_))
        ));
        assert!(matches!(
            parse_share("half"),
            Err(ShareError::NotANumber(_))
        ));
        assert!(matches!(parse_share("NaN"), Err(ShareError::NotANumber(_))));
        assert!(matches!(
            parse_share("0.2:0.5"),
            Err(ShareError::LimitNotSupported(_))
        ));
        let msg = parse_share("2").unwrap_err().to_string();
        assert!(msg.contains("'2'") && msg.contains("at most 1"), "{msg}");
    }

    #[test]
    fn ceilings_are_ratios() {
        assert_eq!(parse_ceiling("1"), Ok(Some(1000)));
        assert_eq!(parse_ceiling("1.5"), Ok(Some(1500)));
        assert_eq!(parse_ceiling("150%"), Ok(Some(1500)));
        assert_eq!(parse_ceiling("off"), Ok(None));
        assert!(parse_ceiling("0").is_err());
        assert!(parse_ceiling("9").is_err());
        assert!(parse_ceiling("x").unwrap_err().to_string().contains("'x'"));
    }

    #[test]
    fn a_run_share_is_its_gpu_time_over_its_elapsed_time() {
        assert_eq!(share_of_run(Some(5_000_000), 10), Some(500));
        assert_eq!(share_of_run(Some(1), 10), Some(1), "rounded up, not 0");
        assert_eq!(share_of_run(Some(30_000_000), 10), Some(1000), "capped");
        assert_eq!(share_of_run(None, 10), None, "nothing measured");
        assert_eq!(share_of_run(Some(0), 10), None, "no sample is no share");
        assert_eq!(share_of_run(Some(5), 0), None);
    }

    #[test]
    fn a_window_measures_busy_time_as_part_of_the_instance() {
        // Busy half of two seconds on a whole GPU: half a GPU.
        assert_eq!(window_demand(1_000_000, 2_000_000, 1000), Some(500));
        // Busy all the time on a 3g of 7: the instance, no more.
        assert_eq!(window_demand(2_000_000, 2_000_000, 428), Some(428));
        assert_eq!(
            window_demand(9_000_000, 2_000_000, 1000),
            Some(1000),
            "busy past placed is capped"
        );
        assert_eq!(
            window_demand(0, 2_000_000, 1000),
            Some(1),
            "idle: the least demand"
        );
        assert_eq!(
            window_demand(500_000, 999_999, 1000),
            None,
            "too short to say"
        );
    }

    #[test]
    fn a_demand_rises_at_once_and_falls_halfway() {
        assert_eq!(
            next_demand(None, 120),
            120,
            "the first measure replaces the guess"
        );
        assert_eq!(next_demand(Some(200), 900), 900);
        assert_eq!(next_demand(Some(900), 100), 500);
        assert_eq!(next_demand(Some(500), 100), 300);
        assert_eq!(next_demand(Some(300), 300), 300);
    }

    #[test]
    fn a_busy_share_is_busy_time_over_placed_time() {
        assert_eq!(share_of_busy(Some(500), Some(1000)), Some(500));
        assert_eq!(share_of_busy(Some(0), Some(1000)), Some(1), "idle: least");
        assert_eq!(share_of_busy(Some(5000), Some(1000)), Some(1000), "capped");
        assert_eq!(share_of_busy(None, Some(1000)), None);
        assert_eq!(share_of_busy(Some(5), Some(0)), None, "never placed");
        // Busy all the time on a seventh of a GPU: a seventh of its time.
        assert_eq!(whole_gpu_usec(7_000, 142), 994);
        assert_eq!(whole_gpu_usec(7_000, 1000), 7_000);
    }

    #[test]
    fn the_interception_s_measure_comes_before_the_driver_s() {
        let u = |time, busy, placed| crate::job::ResourceUsage {
            gpu_time_usec: time,
            gpu_busy_usec: busy,
            gpu_placed_usec: placed,
            ..Default::default()
        };
        // Busy half the time it was placed, whatever its elapsed time.
        assert_eq!(
            u(Some(1_000_000), Some(2_000_000), Some(4_000_000)).gpu_share(10),
            Some(500)
        );
        // Only the driver's: over the elapsed time.
        assert_eq!(u(Some(1_000_000), None, None).gpu_share(10), Some(100));
        assert_eq!(u(None, None, None).gpu_share(10), None);
    }

    #[test]
    fn instances_offer_their_part_of_the_gpu() {
        let a100 = model("A100-40GB").expect("the A100 table");
        let whole = Instance::whole_gpu(0, "GPU-x".into(), a100);
        assert_eq!(instance_capacity(&whole), 1000);
        let mut mig = whole.clone();
        mig.profile = Some("3g.20gb".into());
        mig.compute_slices = 3;
        assert_eq!(instance_capacity(&mig), 428);
        mig.model = "B200".into();
        assert_eq!(instance_capacity(&mig), 1000, "no table: whole");
    }

    #[test]
    fn the_ceiling_bounds_what_bound_tasks_demand_together() {
        // An empty instance takes anything, even above the ceiling.
        assert!(fits_under(0, 1000, 428, 500));
        assert!(fits_under(500, 500, 1000, 1000));
        assert!(!fits_under(501, 500, 1000, 1000));
        assert!(fits_under(900, 500, 1000, 1500));
        // A demand counts at most the whole instance.
        assert_eq!(demand_on(Some(1000), 428, 125), 428);
        assert_eq!(demand_on(Some(100), 428, 125), 100);
        // No stated demand: a part of the instance, whatever its size.
        assert_eq!(demand_on(None, 1000, 125), 125);
        assert_eq!(demand_on(None, 142, 125), 17);
        assert_eq!(demand_on(None, 4, 125), 1, "at least 1");
    }
}
