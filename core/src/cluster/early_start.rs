//! Isolated jobs started early. A job whose instances are expected to be
//! free within the early-start window ([`crate::launch::EarlyStart`]) is
//! started at once: where another isolated job still holds an instance,
//! the new one waits for it (the instance is drained for it, so nothing
//! else takes it) and takes it over when that job ends
//! (`Cluster::release_on`); where only shared tasks are on it, it owns it
//! already and holds it once they have left ([`InstanceSlot::holder`]).
//! The node keeps the job's processes from the GPU until then.

use std::collections::BTreeMap;

use super::InstanceSlot;
use crate::job::{Job, JobId};

/// The reason a job started early shows while it waits for an instance
/// another job still holds: it runs (`R`), but its GPU work has not begun.
pub const WAITING_FOR_GPU: &str = "WaitingForGpu";

/// After a restart: each running job shows [`WAITING_FOR_GPU`] exactly
/// while an instance is drained for it (as the books were rebuilt), so a
/// reason whose change was not written before a crash is put right.
pub(super) fn reasons_as_booked(
    jobs: &mut BTreeMap<JobId, Job>,
    nodes: &BTreeMap<String, super::Node>,
) {
    let waiting: std::collections::BTreeSet<JobId> = nodes
        .values()
        .flat_map(|n| n.instances.iter().filter_map(|s| s.draining_for))
        .collect();
    for job in jobs.values_mut() {
        if job.state != crate::job::JobState::Running {
            continue;
        }
        let shows = job.reason.as_deref() == Some(WAITING_FOR_GPU);
        match (waiting.contains(&job.id), shows) {
            (true, false) => job.reason = Some(WAITING_FOR_GPU.into()),
            (false, true) => job.reason = None,
            _ => {}
        }
    }
}

/// Puts running isolated job `job` on `slot`'s books (after a restart, or
/// when its node registers): it holds the instance, unless the job already
/// there started before it; then it is the job started early for that one,
/// and waits for it (drained for it).
pub(super) fn book_running_on(slot: &mut InstanceSlot, job: &Job, jobs: &BTreeMap<JobId, Job>) {
    match slot.isolated_owner {
        Some(other) if other != job.id => {
            // The same second: the older job is taken to have started first
            // (the node, which holds them in order, knows for sure).
            let other_start = (jobs.get(&other).and_then(|j| j.start_time), other);
            if (job.start_time, job.id) < other_start {
                slot.isolated_owner = Some(job.id);
                slot.draining_for = Some(other);
            } else {
                slot.draining_for = Some(job.id);
            }
        }
        _ => slot.isolated_owner = Some(job.id),
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::testkit::{ended, registration, spec};
    use crate::cluster::{Cluster, Effect};
    use crate::gpu::{parse_sim_spec, sim_instances};
    use crate::job::{JobSpec, JobState};

    /// Node n1 with one whole GPU; early starts up to `window` seconds ahead.
    fn one_gpu(window: u64) -> Cluster {
        let mut c = Cluster::new(Box::new(crate::launch::CaseLaunch));
        c.set_early_start(Some(window));
        let mut reg = registration("n1", &[], vec![]);
        reg.instances = sim_instances("n1", &parse_sim_spec("1xH100-80GB").unwrap());
        c.register_node(&reg, 0);
        c
    }

    fn isolated(name: &str, limit: u64) -> JobSpec {
        JobSpec {
            isolated: true,
            time_limit: Some(limit),
            ..spec(name, false)
        }
    }

    fn launches(fx: &[Effect]) -> Vec<(u64, bool)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Launch { job, early, .. } => Some((*job, *early)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_next_isolated_job_starts_early_and_takes_the_instance_over() {
        let mut c = one_gpu(60);
        let (a, _) = c.submit(isolated("a", 100), 0).unwrap();
        let (s, _) = c.submit(spec("s", false), 0).unwrap();
        assert_eq!(launches(&c.schedule(0)), [(a, false), (s, false)]);
        let (b, _) = c.submit(isolated("b", 100), 1).unwrap();
        // A is expected to end at 100: too far ahead at 10, drained for b.
        assert!(launches(&c.schedule(10)).is_empty());
        assert_eq!(c.job(b).unwrap().state, JobState::Pending);
        let fx = c.schedule(50);
        assert_eq!(launches(&fx), [(b, true)], "{fx:?}");
        let uuid = c.job(b).unwrap().gpu_instances[0].clone();
        let slot = |c: &Cluster| {
            c.node("n1")
                .unwrap()
                .instances
                .iter()
                .find(|s| s.instance.uuid == uuid)
                .cloned()
                .unwrap()
        };
        assert_eq!(
            (slot(&c).isolated_owner, slot(&c).draining_for),
            (Some(a), Some(b))
        );
        // Running, and saying that its GPU work waits.
        let shown = c.job(b).unwrap();
        assert_eq!(
            (shown.state, shown.reason.as_deref()),
            (JobState::Running, Some(super::WAITING_FOR_GPU))
        );
        // Nothing else takes it meanwhile.
        let (x, _) = c.submit(isolated("x", 100), 51).unwrap();
        assert!(launches(&c.schedule(52)).is_empty());
        // A restarted controller keeps who holds it and who waits.
        let jobs: Vec<_> = c.jobs().cloned().collect();
        let nodes: Vec<_> = c.nodes().cloned().collect();
        let r = Cluster::restore(Box::new(crate::launch::CaseLaunch), jobs, nodes);
        let rs = r.node("n1").unwrap().instances[0].clone();
        assert_eq!((rs.isolated_owner, rs.draining_for), (Some(a), Some(b)));
        assert_eq!(
            r.job(b).unwrap().reason.as_deref(),
            Some(super::WAITING_FOR_GPU)
        );
        // A reason left behind (its change not written before a crash) is
        // put right from the books.
        let mut stale: Vec<_> = c.jobs().cloned().collect();
        stale.iter_mut().find(|j| j.id == b).unwrap().reason = None;
        stale.iter_mut().find(|j| j.id == a).unwrap().reason = Some(super::WAITING_FOR_GPU.into());
        let nodes: Vec<_> = c.nodes().cloned().collect();
        let r = Cluster::restore(Box::new(crate::launch::CaseLaunch), stale, nodes);
        assert_eq!(
            r.job(b).unwrap().reason.as_deref(),
            Some(super::WAITING_FOR_GPU)
        );
        assert_eq!(r.job(a).unwrap().reason, None);
        // A ends: b holds it; x may start early behind b (expected to end
        // at 150) once that is within the window.
        let run = c.job(a).unwrap().run;
        let fx_a_end = c.job_ended("n1", &ended(a, run, 0, 60)).unwrap();
        assert_eq!(
            (slot(&c).isolated_owner, slot(&c).draining_for),
            (Some(b), None)
        );
        assert_eq!(c.job(b).unwrap().reason, None, "no longer waits");
        assert!(
            fx_a_end
                .iter()
                .any(|e| matches!(e, Effect::Job { id, .. } if *id == b)),
            "written: {fx_a_end:?}"
        );
        assert!(launches(&c.schedule(61)).is_empty());
        assert_eq!(launches(&c.schedule(95)), [(x, true)]);
    }

    #[test]
    fn an_early_job_that_ends_first_leaves_the_holder_alone() {
        let mut c = one_gpu(200);
        let (a, _) = c.submit(isolated("a", 100), 0).unwrap();
        c.submit(spec("s", false), 0).unwrap();
        c.schedule(0);
        let (b, _) = c.submit(isolated("b", 100), 1).unwrap();
        assert_eq!(launches(&c.schedule(2)), [(b, true)]);
        let run = c.job(b).unwrap().run;
        c.job_ended("n1", &ended(b, run, 0, 3)).unwrap();
        let s = &c.node("n1").unwrap().instances[0];
        assert_eq!((s.isolated_owner, s.draining_for), (Some(a), None));
    }

    #[test]
    fn a_job_that_turned_the_interception_off_waits_for_its_instance() {
        let mut c = one_gpu(200);
        let (a, _) = c.submit(isolated("a", 100), 0).unwrap();
        c.submit(spec("s", false), 0).unwrap();
        c.schedule(0);
        let mut off = isolated("b", 100);
        off.environment
            .insert("GSCHED_INTERCEPT".into(), "0".into());
        let (b, _) = c.submit(off, 1).unwrap();
        assert!(launches(&c.schedule(2)).is_empty());
        let run = c.job(a).unwrap().run;
        c.job_ended("n1", &ended(a, run, 0, 3)).unwrap();
        assert_eq!(launches(&c.schedule(4)), [(b, false)]);
    }

    #[test]
    fn an_isolated_jobs_earlier_run_time_lets_the_next_job_start_early() {
        // No time limits: only the first run of "a" (10 s, no GPU peak:
        // isolated jobs report none) says when its second run will end.
        let mut c = one_gpu(30);
        let unlimited = |name: &str| JobSpec {
            isolated: true,
            ..spec(name, false)
        };
        c.submit(spec("s", false), 0).unwrap();
        let (a1, _) = c.submit(unlimited("a"), 0).unwrap();
        c.schedule(0);
        let run = c.job(a1).unwrap().run;
        c.job_ended("n1", &ended(a1, run, 0, 10)).unwrap();
        assert_eq!(c.learned(a1 + 10).runtime_secs, None, "no such job");
        let (a2, _) = c.submit(unlimited("a"), 11).unwrap();
        assert_eq!(c.learned(a2).runtime_secs, Some(10));
        assert_eq!(launches(&c.schedule(12)), [(a2, false)]);
        let (b, _) = c.submit(unlimited("b"), 12).unwrap();
        assert_eq!(launches(&c.schedule(13)), [(b, true)]);
    }
}
