//! Which GPU devices a job may open, and how shared jobs' rules follow the
//! instances isolated jobs hold (the decisions are core's
//! `gsched_core::devices`).

use std::collections::{BTreeMap, BTreeSet};

use gsched_core::devices::{
    allowed_devices, parse_mig_minors, DeviceMajors, DeviceRule, GivenGpus,
};
use gsched_core::job::JobId;
use tracing::warn;

use super::ConfineError;
use super::{Confinement, GpuAccess};

/// Who may open which GPU: the instances isolated jobs hold, and the jobs
/// that may open every other one.
#[derive(Default)]
pub(super) struct GpuHolds {
    /// Jobs given [`GpuAccess::Shared`] that have not ended.
    pub(super) shared: BTreeSet<JobId>,
    /// Instances held by running isolated jobs (job → UUIDs).
    pub(super) held: BTreeMap<JobId, Vec<String>>,
    /// The rules shared jobs were last given.
    pub(super) shared_rules: Option<Vec<DeviceRule>>,
}

impl Confinement {
    pub(super) fn holds(&self) -> std::sync::MutexGuard<'_, GpuHolds> {
        self.holds.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn device_rules(
        &self,
        gpus: GpuAccess<'_>,
        holds: &GpuHolds,
    ) -> Result<Vec<DeviceRule>, ConfineError> {
        let (devices, mig_minors) = &self.device_files;
        let proc_devices = std::fs::read_to_string(devices).unwrap_or_default();
        let majors = DeviceMajors::parse(&proc_devices);
        let node = self.gpus.read().unwrap_or_else(|p| p.into_inner());
        let given = match (node.as_ref(), gpus) {
            (None, _) => GivenGpus::default(),
            (Some(n), GpuAccess::Instances(i)) => GivenGpus::of(i, &n.mig_ids),
            (Some(n), GpuAccess::Shared) => {
                let open = n
                    .instances
                    .iter()
                    .filter(|i| !holds.held.values().flatten().any(|u| *u == i.uuid));
                GivenGpus::of(open, &n.mig_ids)
            }
        };
        let minors = if given.mig.is_empty() {
            BTreeMap::new()
        } else {
            parse_mig_minors(&std::fs::read_to_string(mig_minors).unwrap_or_default())
        };
        allowed_devices(&majors, &minors, &given).map_err(|e| ConfineError(e.to_string()))
    }

    /// Isolated job `job` holds instances `uuids` from now on: no shared
    /// job may open them (a process that has one open already is the
    /// drain's to wait for). They are open to them again when `job` ends.
    pub fn isolate(&self, job: JobId, uuids: &[String]) {
        let mut holds = self.holds();
        holds.held.insert(job, uuids.to_vec());
        self.give_shared_jobs(&mut holds);
    }

    /// Gives every shared job the devices of the instances not held, if
    /// they changed.
    fn give_shared_jobs(&self, holds: &mut GpuHolds) {
        if !self.cgroups.enforced().devices {
            return;
        }
        let rules = match self.device_rules(GpuAccess::Shared, holds) {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %e, "cannot decide the shared jobs' GPU devices");
                return;
            }
        };
        if holds.shared_rules.as_ref() == Some(&rules) {
            return;
        }
        for &job in &holds.shared {
            if let Err(e) = self.cgroups.set_devices(job, &rules) {
                warn!(job, error = %e, "cannot change the job's GPU devices");
            }
        }
        holds.shared_rules = Some(rules);
    }

    /// Isolated job `job`, started early with no GPU device, may open its
    /// instances `uuids` now that they are its own; shared jobs may not.
    pub fn give_instances(&self, job: JobId, uuids: &[String]) {
        let mut holds = self.holds();
        if self.cgroups.enforced().devices {
            let instances: Vec<gsched_core::gpu::Instance> = {
                let node = self.gpus.read().unwrap_or_else(|p| p.into_inner());
                node.iter()
                    .flat_map(|n| &n.instances)
                    .filter(|i| uuids.contains(&i.uuid))
                    .cloned()
                    .collect()
            };
            match self.device_rules(GpuAccess::Instances(&instances), &holds) {
                Ok(rules) => {
                    if let Err(e) = self.cgroups.set_devices(job, &rules) {
                        warn!(job, error = %e, "cannot give the job its GPU devices");
                    }
                }
                Err(e) => warn!(job, error = %e, "cannot decide the job's GPU devices"),
            }
        }
        holds.held.insert(job, uuids.to_vec());
        self.give_shared_jobs(&mut holds);
    }

    /// The job's GPU access ends: an instance it held opens to shared jobs.
    pub(super) fn release(&self, job: JobId) {
        let mut holds = self.holds();
        holds.shared.remove(&job);
        if holds.held.remove(&job).is_some() {
            self.give_shared_jobs(&mut holds);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    use gsched_core::job::{Job, JobId, JobSpec};

    use super::super::{Confinement, GpuAccess, NodeGpus};
    use crate::cgroup::{CgroupConfig, Cgroups, Counters, Enforced, JobLimits, Scope};
    use gsched_core::devices::DeviceRule;

    /// Enforces devices and records the rules each job is given.
    #[derive(Default)]
    struct Recorder {
        given: Mutex<Vec<(JobId, Vec<String>)>>,
    }

    impl Recorder {
        fn last(&self, job: JobId) -> Option<Vec<String>> {
            let given = self.given.lock().unwrap();
            given
                .iter()
                .rev()
                .find(|(j, _)| *j == job)
                .map(|(_, r)| r.clone())
        }
        fn record(&self, job: JobId, rules: &[DeviceRule]) {
            let r = rules.iter().map(|r| r.to_string()).collect();
            self.given.lock().unwrap().push((job, r));
        }
    }

    impl Cgroups for Recorder {
        fn version(&self) -> &'static str {
            "recorder"
        }
        fn enforced(&self) -> Enforced {
            Enforced {
                devices: true,
                ..Enforced::default()
            }
        }
        fn create(&self, job: JobId, limits: &JobLimits) -> crate::cgroup::Result<Vec<PathBuf>> {
            self.record(job, limits.devices.as_deref().unwrap_or_default());
            Ok(Vec::new())
        }
        fn set_devices(&self, job: JobId, rules: &[DeviceRule]) -> crate::cgroup::Result<()> {
            self.record(job, rules);
            Ok(())
        }
        fn set_cpus(&self, _: JobId, _: &[u32]) -> crate::cgroup::Result<()> {
            Ok(())
        }
        fn freeze(&self, _: JobId, _: bool) -> bool {
            false
        }
        fn create_step(&self, _: JobId, _: u32) -> crate::cgroup::Result<()> {
            Ok(())
        }
        fn join(&self, _: JobId, _: Scope, _: i32) -> crate::cgroup::Result<()> {
            Ok(())
        }
        fn procs_files(&self, _: JobId, _: Scope) -> Vec<PathBuf> {
            Vec::new()
        }
        fn steps(&self, _: JobId) -> Vec<Scope> {
            Vec::new()
        }
        fn pids(&self, _: JobId, _: Scope) -> Vec<i32> {
            Vec::new()
        }
        fn kill(&self, _: JobId, _: Scope) {}
        fn counters(&self, _: JobId, _: Scope) -> Counters {
            Counters::default()
        }
        fn remove(&self, _: JobId, _: Scope) -> bool {
            true
        }
        fn remove_node_dir(&self) {}
    }

    fn has(rules: &Option<Vec<String>>, rule: &str) -> bool {
        rules.as_ref().is_some_and(|r| r.iter().any(|x| x == rule))
    }

    /// Two whole GPUs (`/dev/nvidia0`, `/dev/nvidia1`): while an isolated
    /// job holds the first, no shared job may open it, whether it was
    /// running already, started meanwhile or was adopted; then it opens.
    /// A confinement over two whole GPUs (`/dev/nvidia0`, `/dev/nvidia1`)
    /// whose device rules `Recorder` records; the directory holds the
    /// fake device list.
    fn two_gpus() -> (
        Confinement,
        Arc<Recorder>,
        Vec<gsched_core::gpu::Instance>,
        tempfile::TempDir,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let devices = dir.path().join("devices");
        std::fs::write(
            &devices,
            "Character devices:\n  1 mem\n195 nvidia-frontend\n235 nvidia-uvm\n\nBlock devices:\n",
        )
        .unwrap();
        let cg = Arc::new(Recorder::default());
        let mut confine = Confinement::new(
            Arc::clone(&cg) as Arc<dyn Cgroups>,
            CgroupConfig::default(),
            1024,
            BTreeSet::from([0]),
        );
        confine.device_files = (devices, dir.path().join("no-mig-minors"));
        let instances = gsched_core::gpu::sim_instances(
            "n",
            &gsched_core::gpu::parse_sim_spec("2xH100-80GB").unwrap(),
        );
        confine.set_gpus(Some(NodeGpus {
            instances: instances.clone(),
            mig_ids: Default::default(),
        }));
        (confine, cg, instances, dir)
    }

    #[test]
    fn shared_jobs_lose_an_instance_while_an_isolated_job_holds_it() {
        let (confine, cg, instances, _dir) = two_gpus();
        let (gpu0, gpu1) = (instances[0].uuid.clone(), instances[1].uuid.clone());
        let job = |id| Job::new(id, JobSpec::default(), 0);
        let (first, isolated, later, adopted) = (1, 2, 3, 4);
        confine.prepare(&job(first), GpuAccess::Shared).unwrap();
        let given = cg.last(first);
        assert!(
            has(&given, "c 195:0 rwm") && has(&given, "c 195:1 rwm"),
            "{given:?}"
        );

        confine
            .prepare(&job(isolated), GpuAccess::Instances(&instances[..1]))
            .unwrap();
        confine.isolate(isolated, std::slice::from_ref(&gpu0));
        let first_now = cg.last(first);
        assert!(!has(&first_now, "c 195:0 rwm"), "{first_now:?}");
        assert!(has(&first_now, "c 195:1 rwm") && has(&first_now, "c 195:255 rwm"));
        confine.prepare(&job(later), GpuAccess::Shared).unwrap();
        assert_eq!(cg.last(later), first_now, "a job started meanwhile");
        confine.adopt(adopted, &[], &[]);
        assert_eq!(cg.last(adopted), first_now, "a job adopted meanwhile");
        let isolated_own = cg.last(isolated);
        assert!(has(&isolated_own, "c 195:0 rwm") && !has(&isolated_own, "c 195:1 rwm"));

        // Nothing changes for the shared jobs when a shared job ends.
        let before = cg.given.lock().unwrap().len();
        confine.finish(later);
        assert_eq!(cg.given.lock().unwrap().len(), before);

        confine.finish(isolated);
        for j in [first, adopted] {
            let now = cg.last(j);
            assert!(
                has(&now, "c 195:0 rwm") && has(&now, "c 195:1 rwm"),
                "job {j}: {now:?}"
            );
        }
        assert_eq!(cg.last(later), first_now, "an ended job is left alone");

        // An isolated job adopted after a restart closes its instance too.
        confine.adopt(5, &[], std::slice::from_ref(&gpu1));
        assert!(!has(&cg.last(first), "c 195:1 rwm"));
        assert!(has(&cg.last(first), "c 195:0 rwm"));
    }

    /// An isolated job started early opens no GPU until its instance is
    /// given to it; then it opens that one, and shared jobs lose it.
    #[test]
    fn a_job_started_early_opens_its_instance_only_once_given() {
        let (confine, cg, instances, _dir) = two_gpus();
        let gpu0 = instances[0].uuid.clone();
        let job = |id| Job::new(id, JobSpec::default(), 0);
        confine.prepare(&job(1), GpuAccess::Shared).unwrap();
        confine.prepare(&job(2), GpuAccess::Instances(&[])).unwrap();
        let gated = cg.last(2);
        assert!(
            gated.as_ref().is_some_and(|r| !r
                .iter()
                .any(|x| x.starts_with("c 195:") || x.starts_with("c 235:"))),
            "no GPU device while it waits: {gated:?}"
        );
        confine.give_instances(2, std::slice::from_ref(&gpu0));
        let given = cg.last(2);
        assert!(
            has(&given, "c 195:0 rwm") && !has(&given, "c 195:1 rwm"),
            "{given:?}"
        );
        let shared = cg.last(1);
        assert!(
            !has(&shared, "c 195:0 rwm") && has(&shared, "c 195:1 rwm"),
            "{shared:?}"
        );
    }
}
