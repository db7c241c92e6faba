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
    c.set_repartition(Some(policy));
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
    // The same report again changes nothing.
    assert!(c
        .reshape_done("n1", o.seq, &[], Vec::new())
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
    // The node finished the reshape after registering (the controller
    // restarted mid-reshape): its report still updates the books, once.
    let gpu = c.node("n1").unwrap().instances[0].instance.gpu_uuid.clone();
    let made = Instance {
        mig_start: Some(4),
        ..Instance::mig(
            "MIG-new".into(),
            0,
            gpu,
            "A100-40GB",
            crate::gpu::model("A100-40GB")
                .unwrap()
                .profile("3g.20gb")
                .unwrap(),
        )
    };
    let fx = c
        .reshape_done("n1", o.seq, &o.retire, vec![made.clone()])
        .unwrap();
    assert!(!fx.is_empty());
    let insts = &c.node("n1").unwrap().instances;
    assert_eq!(insts.len(), 7 - o.retire.len() + 1);
    assert!(insts.iter().any(|s| s.instance.uuid == "MIG-new"));
    assert!(c
        .reshape_done("n1", o.seq, &o.retire, vec![made])
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

#[test]
fn a_frozen_gpu_is_left_alone_by_the_policy() {
    let mut c = seven_small();
    c.set_mig_frozen("n1", 0, true).unwrap();
    c.submit(isolated("3g.20gb"), 1).unwrap();
    assert!(orders(&c.schedule(2)).is_empty());
    assert!(
        c.set_mig_frozen("n1", 0, true).unwrap().is_empty(),
        "no change"
    );
    assert!(c.set_mig_frozen("n1", 7, true).is_err(), "no such GPU");
    c.set_mig_frozen("n1", 0, false).unwrap();
    assert_eq!(orders(&c.schedule(3)).len(), 1);
}

#[test]
fn an_administrators_layout_keeps_what_it_can_and_makes_the_rest() {
    let mut c = seven_small();
    let fx = c.order_layout("n1", 0, "3g.20gb,1g.5gb*4").unwrap();
    let o = orders(&fx);
    assert_eq!(o.len(), 1);
    // The four 1g.5gb at slices 0-3 stay; those at 4, 5 and 6 make room
    // for the 3g.20gb at 4.
    assert_eq!(o[0].retire.len(), 3, "{o:?}");
    assert_eq!(
        o[0].create,
        vec![MigSlot {
            profile: "3g.20gb".into(),
            start: 4
        }]
    );
    assert!(
        c.order_layout("n1", 0, "7g.40gb").is_err(),
        "one reshape of a GPU at a time"
    );
    c.reshape_done("n1", o[0].seq, &[], Vec::new()).unwrap();
    assert!(
        c.order_layout("n1", 0, "1g.5gb*7").unwrap().is_empty(),
        "nothing to do"
    );
    assert!(
        c.order_layout("n1", 0, "3g.20gb,3g.20gb,1g.5gb").is_err(),
        "impossible"
    );
    assert!(
        c.order_layout("n1", 0, "9g.1gb").is_err(),
        "unknown profile"
    );
    assert!(
        c.order_layout("n1", 1, "7g.40gb").is_err(),
        "no such GPU offered"
    );
}

#[test]
fn an_instance_held_for_an_isolated_job_is_never_ordered_away() {
    let mut c = seven_small();
    let (id, _) = c.submit(isolated("1g.5gb"), 1).unwrap();
    c.schedule(2);
    let held = c.job(id).unwrap().gpu_instances[0].clone();
    let err = c.order_layout("n1", 0, "7g.40gb").unwrap_err();
    assert!(err.to_string().contains(&held), "{err}");
    assert!(c.reshapes_on("n1").is_empty());
    assert!(c.node("n1").unwrap().instances.iter().all(|s| !s.retiring));
}

#[test]
fn a_job_naming_a_profile_gets_that_profile_made() {
    // A 3g.20gb and four 1g.5gb; a job asks for a 2g.10gb by name: the
    // GPU is re-made with a 2g.10gb (a 1g.10gb holds as much memory but
    // is not what it asked for).
    let mut c = cluster();
    let mut reg = registration("n1", &[], Vec::new());
    reg.instances = sim_instances(
        "n1",
        &parse_sim_spec("1xA100-40GB:3g.20gb,1g.5gb*4").unwrap(),
    );
    reg.reshape_gpus = vec![0];
    c.register_node(&reg, 0);
    let policy = repartition_policy("demand").unwrap().unwrap();
    c.set_repartition(Some(policy));
    c.submit(isolated("2g.10gb"), 1).unwrap();
    let o = orders(&c.schedule(2));
    assert_eq!(o.len(), 1, "{o:?}");
    assert!(o[0].create.iter().any(|s| s.profile == "2g.10gb"), "{o:?}");
}

#[test]
fn a_nodes_bounds_reach_the_policy() {
    // Keep all seven 1g.5gb: the 3g.20gb job cannot be made; without the
    // bound it is (see above).
    let mut c = cluster();
    let mut reg = registration("n1", &[], Vec::new());
    reg.instances = sim_instances("n1", &parse_sim_spec("1xA100-40GB:1g.5gb*7").unwrap());
    reg.reshape_gpus = vec![0];
    reg.reshape_keep = [(0, vec![("1g.5gb".to_string(), 7)])].into();
    c.register_node(&reg, 0);
    let policy = repartition_policy("demand").unwrap().unwrap();
    c.set_repartition(Some(policy));
    c.submit(isolated("3g.20gb"), 1).unwrap();
    assert!(orders(&c.schedule(2)).is_empty());
    reg.reshape_keep = [(0, vec![("1g.5gb".to_string(), 3)])].into();
    c.register_node(&reg, 3);
    assert_eq!(orders(&c.schedule(4)).len(), 1, "three 1g.5gb are left");
}
