//! A submission no known node could ever run is refused at once, as
//! Slurm refuses it (`Requested node configuration is not available`),
//! instead of waiting forever with `ReqNodeNotAvail`. Known nodes are every
//! node that ever registered (down ones too). With none known yet (a
//! controller whose nodes have not registered), every job is accepted.
//! Off unless the controller turns it on (the simulator's re-partitioning
//! creates profiles no current layout has). Where the controller
//! re-partitions MIG GPUs (`reshapes.rs`), a MIG GPU its node re-partitions
//! counts for the most instances of the request any layout of its model
//! could give.

use super::{Cluster, ClusterError, Node};
use crate::job::JobSpec;

impl Cluster {
    /// Turns the check on or off (see the module).
    pub fn set_refuse_unsatisfiable(&mut self, on: bool) {
        self.refuse_unsatisfiable = on;
    }

    /// Refuses `spec` when no known node could ever run it.
    pub(super) fn check_satisfiable(&self, spec: &JobSpec) -> Result<(), ClusterError> {
        if !self.refuse_unsatisfiable || self.nodes.is_empty() {
            return Ok(());
        }
        // Validated already: the request reads.
        let resources = crate::resources::JobResources::of(&spec.slurm).unwrap_or(
            crate::resources::JobResources {
                cpus: 1,
                memory: crate::resources::MemoryRequest::Unspecified,
            },
        );
        let choice = crate::allocation::node_choice(&spec.slurm.other)
            .ok()
            .flatten();
        let width = crate::allocation::width_of(&spec.slurm) as usize;
        let mut why = Vec::new();
        let mut fit = 0;
        for n in self.nodes.values() {
            match unfit(n, spec, &resources, choice.as_ref(), self.repartitions()) {
                None => fit += 1,
                Some(reason) => why.push(format!("{}: {reason}", n.name)),
            }
            if fit >= width {
                return Ok(());
            }
        }
        if width > 1 {
            why.insert(
                0,
                format!("the job asks for {width} nodes and {fit} known could run it"),
            );
        }
        Err(ClusterError::Refused(format!(
            "Batch job submission failed: Requested node configuration is not available ({})",
            why.join("; ")
        )))
    }
}

/// Why `node` could never run the job, `None` when it could.
fn unfit(
    node: &Node,
    spec: &JobSpec,
    resources: &crate::resources::JobResources,
    choice: Option<&crate::allocation::NodeChoice>,
    repartitions: bool,
) -> Option<String> {
    if choice.is_some_and(|c| !c.allows(&node.name)) {
        return Some("not allowed by -w/-x".into());
    }
    if let Some(tmp) = crate::allocation::tmp_mib(&spec.slurm.other)
        .ok()
        .flatten()
        .filter(|t| *t > node.tmp_disk_mib)
    {
        return Some(format!(
            "has {} MiB of temporary disk, the job asks {tmp} (--tmp)",
            node.tmp_disk_mib
        ));
    }
    if !resources.could_fit(&node.total()) {
        return Some(format!(
            "has {} CPUs and {} MiB, the job asks {}",
            node.cpus,
            node.memory_mib,
            resources.describe()
        ));
    }
    if spec.isolated {
        let want = spec.gpu.instances();
        let have = if repartitions {
            could_make(node, &spec.gpu)
        } else {
            node.instances
                .iter()
                .filter(|s| s.instance.satisfies(&spec.gpu))
                .count()
        };
        if have < want {
            let kind = spec.gpu.kind().unwrap_or("any");
            return Some(format!(
                "{have} GPU instance(s) of type {kind} of the {want} asked for"
            ));
        }
    }
    None
}

/// How many instances satisfying `req` the node could offer once its MIG
/// GPUs are re-partitioned: for each GPU the node re-partitions, the most
/// of one profile that serves the request; other GPUs as they are.
fn could_make(node: &Node, req: &crate::job::GpuRequest) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    let mut have = 0;
    for s in &node.instances {
        let i = &s.instance;
        let table = crate::gpu::model(&i.model)
            .filter(|_| i.profile.is_some() && node.reshape_gpus.contains(&i.gpu_index));
        let Some(model) = table else {
            have += usize::from(i.satisfies(req));
            continue;
        };
        if !seen.insert(i.gpu_uuid.clone()) {
            continue;
        }
        have += model
            .profiles
            .iter()
            .filter(|p| !p.name.contains('+'))
            .filter(|p| {
                let as_instance = crate::gpu::Instance::mig(
                    String::new(),
                    i.gpu_index,
                    i.gpu_uuid.clone(),
                    &i.model,
                    p,
                );
                as_instance.satisfies(req)
            })
            .map(|p| p.max_count as usize)
            .max()
            .unwrap_or(0);
    }
    have
}

#[cfg(test)]
mod tests {
    use crate::cluster::testkit::{cluster, spec};
    use crate::cluster::ClusterError;
    use crate::job::{GpuRequest, JobSpec};

    fn gpus(count: u32, kind: Option<&str>) -> JobSpec {
        JobSpec {
            isolated: true,
            gpu: GpuRequest {
                count: Some(count),
                model: kind.map(String::from),
                ..GpuRequest::default()
            },
            ..spec("g", false)
        }
    }

    #[test]
    fn what_no_known_node_could_run_is_refused_at_submission() {
        let mut c = cluster();
        // Off: accepted (to wait).
        c.submit(gpus(3, None), 0).unwrap();
        c.set_refuse_unsatisfiable(true);
        // n1 has two 1g.5gb instances of an A100.
        c.submit(gpus(2, None), 0).unwrap();
        c.submit(gpus(1, Some("a100")), 0).unwrap();
        for bad in [gpus(3, None), gpus(1, Some("h100"))] {
            match c.submit(bad, 0) {
                Err(ClusterError::Refused(m)) => {
                    assert!(
                        m.starts_with("Batch job submission failed: Requested node configuration is not available (n1: "),
                        "{m}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        let mut far = spec("w", false);
        far.slurm.other.insert("nodelist".into(), "n9".into());
        assert!(c.submit(far, 0).is_err());
        let mut big = spec("cpus", false);
        big.slurm.ntasks = Some(1000);
        let e = c.submit(big, 0).unwrap_err().to_string();
        assert!(e.contains("64 CPUs"), "{e}");
    }

    #[test]
    fn tmp_asks_for_a_node_with_that_much_temporary_disk() {
        let mut c = crate::cluster::Cluster::new(Box::new(crate::launch::CaseLaunch));
        c.set_refuse_unsatisfiable(true);
        let small = crate::wire::NodeRegistration {
            tmp_disk_mib: 100,
            ..crate::cluster::testkit::registration("a-small", &[], vec![])
        };
        let big = crate::wire::NodeRegistration {
            tmp_disk_mib: 1000,
            ..crate::cluster::testkit::registration("b-big", &[], vec![])
        };
        c.register_node(&small, 0);
        c.register_node(&big, 0);
        let with_tmp = |v: &str| {
            let mut s = spec("t", false);
            s.slurm.other.insert("tmp".into(), v.into());
            s
        };
        let e = c.submit(with_tmp("2000"), 0).unwrap_err().to_string();
        assert!(e.contains("the job asks 2000 (--tmp)"), "{e}");
        // 500 MB fits only the big node: it runs there.
        let (id, _) = c.submit(with_tmp("500"), 0).unwrap();
        crate::cluster::testkit::launch(&mut c, 1);
        assert_eq!(c.job(id).unwrap().node.as_deref(), Some("b-big"));
    }

    #[test]
    fn with_no_node_known_everything_is_accepted() {
        let mut c = crate::cluster::Cluster::new(Box::new(crate::launch::CaseLaunch));
        c.set_refuse_unsatisfiable(true);
        c.submit(gpus(64, Some("h100")), 0).unwrap();
    }
}
