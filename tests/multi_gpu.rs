//! Jobs that hold several GPU instances (issue 18, item 1): `--gres=gpu:N`,
//! `--gpus-per-node`, `--gpus-per-task` with `srun`, MIG instances of one
//! GPU, and what can never be given.

mod common;

use std::time::Duration;

use common::slurm::Slurm;
use serde_json::Value;

const T: Duration = Duration::from_secs(30);

/// The node's instances as the REST API lists them: (uuid, gpu index,
/// profile).
fn instances(s: &Slurm) -> Vec<(String, u64, Option<String>)> {
    let all: Value = s.g.get("/api/v1/instances").unwrap();
    all["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["uuid"].as_str().unwrap().to_string(),
                i["gpu_index"].as_u64().unwrap(),
                i["profile"].as_str().map(String::from),
            )
        })
        .collect()
}

#[test]
fn several_gpus_are_given_whole_and_split_per_task() {
    // Two whole H100s, and an A100 split into three 1g.5gb instances.
    let s = Slurm::start_with(&["--sim-gpus", "2xH100-80GB+1xA100-40GB:1g.5gb*3"]);
    let g = &s.g;
    let inst = instances(&s);
    let whole: Vec<&String> = inst
        .iter()
        .filter(|i| i.2.is_none())
        .map(|i| &i.0)
        .collect();
    assert_eq!(whole.len(), 2, "{inst:?}");
    let both = format!("{},{}", whole[0], whole[1]);

    // --gres=gpu:h100:2: both H100s, named as Slurm names them.
    let id = s.sbatch(&[
        "--gres=gpu:h100:2",
        "-o",
        "two.out",
        "--wrap",
        "echo \"$CUDA_VISIBLE_DEVICES|$GPU_DEVICE_ORDINAL|$SLURM_JOB_GPUS|$SLURM_GPUS_ON_NODE\"",
    ]);
    g.wait_state(id, "COMPLETED", T);
    assert_eq!(s.file("two.out"), format!("{both}|{both}|0,1|2\n"));
    let o = s.ok(
        "squeue",
        &["-j", &id.to_string(), "-t", "all", "-h", "-o", "%b"],
    );
    assert_eq!(o.trim(), "gres/gpu:h100:2");

    // --gpus-per-task=1 with two tasks: each srun task sees its own GPU.
    let id = s.sbatch(&[
        "--gpus-per-task=1",
        "-n",
        "2",
        "-o",
        "tasks.out",
        "--wrap",
        "srun -l sh -c 'echo $SLURM_PROCID=$CUDA_VISIBLE_DEVICES' | sort",
    ]);
    g.wait_state(id, "COMPLETED", T);
    // (-l labels each line with its task: "0: 0=GPU-...".)
    let out = s.file("tasks.out");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let seen: Vec<&str> = lines.iter().map(|l| l.split_once('=').unwrap().1).collect();
    assert_ne!(seen[0], seen[1], "two tasks on one GPU: {out}");
    assert!(
        lines[0].starts_with("0: 0=") && lines[1].starts_with("1: 1="),
        "{out}"
    );

    // --gpus-per-node=3 of 1g.5gb: the three MIG instances of the A100,
    // which a CUDA process can use one at a time (one task per instance).
    let id = s.sbatch(&[
        "--gpus-per-node=1g.5gb:3",
        "-n",
        "3",
        "--gpu-bind=single:1",
        "-o",
        "mig.out",
        "--wrap",
        "srun sh -c 'echo $CUDA_VISIBLE_DEVICES' | sort",
    ]);
    g.wait_state(id, "COMPLETED", T);
    let mut mig: Vec<String> = inst
        .iter()
        .filter(|i| i.2.is_some())
        .map(|i| format!("{}\n", i.0))
        .collect();
    mig.sort();
    assert_eq!(s.file("mig.out"), mig.concat());

    // More than any node has: refused at submission, as Slurm does.
    let o = s.run("sbatch", &["--gres=gpu:h100:3", "--wrap", "true"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        common::stderr(&o).contains("Requested node configuration is not available (node1: 2 GPU instance(s) of type h100 of the 3 asked for)"),
        "{}",
        common::stderr(&o)
    );

    // Counts that disagree are refused at submission, naming both.
    let o = s.run(
        "sbatch",
        &[
            "--gres=gpu:2",
            "--gpus-per-task=1",
            "-n",
            "3",
            "--wrap",
            "true",
        ],
        None,
    );
    assert_ne!(o.status.code(), Some(0));
    assert!(
        common::stderr(&o).contains("--gres asks for 2 GPU instances but --gpus-per-task=1 for 3"),
        "{}",
        common::stderr(&o)
    );
}
