use super::super::testkit::{cluster, registration, spec};
use super::*;
use crate::gpu::{parse_sim_spec, sim_instances};
use crate::job::{GpuRequest, JobSpec};
use crate::repartition::repartition_policy;

/// Node `n1` with an A100 laid out as seven 1g.5gb instances.
fn seven_small() -> Cluster {
    let mut c = cluster();
    let mut reg = registration("n1", &[], Vec::new());
    reg.instances = sim_instances("n1", &parse_sim_spec("1xA100-40GB:1g.5gb*7").unwrap());
    reg.reshape_gpus = vec![0];
    c.register_node(&reg, 0);
    let policy = repartition_policy("demand").unwrap().unwrap();
    c.set_repartition(Some(Box::new(policy)));
    c
}

fn isolated(profile: &str) -> JobSpec {
    JobSpec {
        isolated: true,
        gpu: GpuRequest {
            mig_profile: Some(profile.into()),
            ..GpuRequest::default()
        },
        ..spec("iso", false)
    }
}

fn orders(fx: &[Effect]) -> Vec<ReshapeOrder> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Reshape { order, .. } => Some(order.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_isolated_job_asking_for_a_profile_no_layout_has_makes_the_node_reshape() {
    let mut c = seven_small();
    let (id, _) = c.submit(isolated("3g.20gb"), 1).unwrap();
    let fx = c.schedule(2);
    let o = orders(&fx);
    assert_eq!(o.len(), 1, "{fx:?}");
    assert_eq!(o[0].gpu, 0);
    assert!(o[0].create.iter().any(|s| s.profile == "3g.20gb"), "{o:?}");
    // Its instances are retiring: nothing is launched onto them, and the
    // next pass does not plan over them again.
    let retiring: Vec<&String> = c
        .node("n1")
        .unwrap()
        .instances
        .iter()
        .filter(|s| s.retiring)
        .map(|s| &s.instance.uuid)
        .collect();
    assert_eq!(retiring, o[0].retire.iter().collect::<Vec<_>>());
    assert!(orders(&c.schedule(3)).is_empty(), "one order in flight");
    assert_eq!(
        c.job(id).unwrap().reason.as_deref(),
        Some("MigReconfiguring"),
        "it waits for the reshape"
    );
    assert_eq!(c.reshapes_on("n1").len(), 1);
    // The node reports it done: the new instance is there and the job
    // starts on it.
    let gpu = c.node("n1").unwrap().instances[0].instance.gpu_uuid.clone();
    let made: Vec<Instance> = o[0]
        .create
        .iter()
        .map(|s| Instance {
            mig_start: Some(s.start),
            ..Instance::mig(
                format!("MIG-new-{}", s.start),
                0,
                gpu.clone(),
                "A100-40GB",
                crate::gpu::model("A100-40GB")
                    .unwrap()
                    .profile(&s.profile)
                    .unwrap(),
            )
        })
        .collect();
    c.reshape_done("n1", o[0].seq, &o[0].retire, made).unwrap();
    assert!(c.reshapes_on("n1").is_empty());
    let insts = &c.node("n1").unwrap().instances;
    assert!(insts.iter().all(|s| !s.retiring));
    assert!(insts
        .iter()
        .all(|s| !o[0].retire.contains(&s.instance.uuid)));
    c.schedule(4);
    let job = c.job(id).unwrap();
    assert_eq!(job.state, crate::JobState::Running, "{:?}", job.reason);
    assert!(job.gpu_instances[0].starts_with("MIG-new-"));
}

#[test]
fn a_reshape_that_stopped_short_leaves_what_it_kept_in_use() {
    let mut c = seven_small();
    c.submit(isolated("3g.20gb"), 1).unwrap();
    let o = orders(&c.schedule(2)).remove(0);
    c.reshape_done("n1", o.seq, &[], Vec::new()).unwrap();
    let insts = &c.node("n1").unwrap().instances;
    assert_eq!(insts.len(), 7, "nothing removed");
    assert!(insts.iter().all(|s| !s.retiring), "in use again");
    // A report for an order that is settled changes nothing.
    assert!(c
        .reshape_done("n1", o.seq, &o.retire, Vec::new())
        .unwrap()
        .is_empty());
    assert_eq!(c.node("n1").unwrap().instances.len(), 7);
}

#[test]
fn a_node_that_registers_again_forgets_its_orders() {
    let mut c = seven_small();
    c.submit(isolated("3g.20gb"), 1).unwrap();
    let o = orders(&c.schedule(2)).remove(0);
    let mut reg = registration("n1", &[], Vec::new());
    reg.instances = sim_instances("n1", &parse_sim_spec("1xA100-40GB:1g.5gb*7").unwrap());
    c.register_node(&reg, 3);
    assert!(c.reshapes_on("n1").is_empty());
    assert!(c.node("n1").unwrap().instances.iter().all(|s| !s.retiring));
    assert!(c
        .reshape_done("n1", o.seq, &o.retire, Vec::new())
        .unwrap()
        .is_empty());
}

#[test]
fn without_a_policy_layouts_stay() {
    let mut c = seven_small();
    c.set_repartition(None);
    c.submit(isolated("3g.20gb"), 1).unwrap();
    assert!(orders(&c.schedule(2)).is_empty());
}

#[test]
fn a_profile_no_layout_has_is_refused_only_where_layouts_stay() {
    let mut c = seven_small();
    c.set_refuse_unsatisfiable(true);
    assert!(
        c.submit(isolated("3g.20gb"), 1).is_ok(),
        "a reshape can make it"
    );
    assert!(
        c.submit(isolated("7g.80gb"), 1).is_err(),
        "no A100-40GB layout has it"
    );
    c.set_repartition(None);
    assert!(c.submit(isolated("3g.20gb"), 1).is_err(), "layouts stay");
}
