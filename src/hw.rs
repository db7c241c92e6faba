//! `gsched hw`: this machine's GPUs as NVML sees them, checked against
//! gsched's MIG tables.

use gsched_noded::gpu::nvml::NvmlGpus;
use gsched_noded::gpu::{GpuBackend, GpuInfo, MigDevice, ProfileInfo};
use serde::Serialize;

#[derive(clap::Args)]
pub struct HwArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    nvml: bool,
    /// Why NVML could not be used, when it could not.
    reason: Option<String>,
    driver: Option<String>,
    gpus: Vec<GpuReport>,
    mps: Vec<Binary>,
}

#[derive(Serialize)]
struct GpuReport {
    #[serde(flatten)]
    gpu: GpuInfo,
    profiles: Vec<ProfileInfo>,
    instances: Vec<MigDevice>,
    processes: usize,
    /// Differences between NVML's profile table and gsched's; empty when
    /// they agree. `None` when gsched has no table for the model.
    table_differences: Option<Vec<String>>,
}

#[derive(Serialize)]
struct Binary {
    name: &'static str,
    path: Option<String>,
}

fn on_path(name: &str) -> Option<String> {
    gsched_noded::mps::find_on_path(name).map(|p| p.display().to_string())
}

/// Compares NVML's profiles with gsched's table for `model`.
fn table_differences(model: &str, nvml: &[ProfileInfo]) -> Option<Vec<String>> {
    let table = gsched_core::gpu::model(model)?;
    let mut diff = Vec::new();
    for t in table.profiles {
        let Some(n) = nvml.iter().find(|p| p.name == t.name) else {
            diff.push(format!(
                "{}: in gsched's table, not reported by NVML",
                t.name
            ));
            continue;
        };
        let mut field = |what: &str, ours: String, theirs: String| {
            if ours != theirs {
                diff.push(format!(
                    "{}: {what} is {theirs} in NVML, {ours} in gsched",
                    t.name
                ));
            }
        };
        field(
            "compute slices",
            t.compute_slices.to_string(),
            n.slices.to_string(),
        );
        field(
            "max count",
            t.max_count.to_string(),
            n.max_count.to_string(),
        );
        field("SMs", t.sms.to_string(), n.sms.to_string());
        field(
            "memory MiB",
            t.memory_mib.to_string(),
            n.memory_mib.to_string(),
        );
        if !n.starts.is_empty() {
            field(
                "placements",
                format!("{:?}", t.starts),
                format!("{:?}", n.starts),
            );
            field("size", t.memory_slices.to_string(), n.size.to_string());
        }
    }
    for n in nvml {
        if table.profile(&n.name).is_none() {
            diff.push(format!(
                "{}: reported by NVML, not in gsched's table",
                n.name
            ));
        }
    }
    Some(diff)
}

fn collect() -> Report {
    let mps = vec![
        Binary {
            name: "nvidia-cuda-mps-control",
            path: on_path("nvidia-cuda-mps-control"),
        },
        Binary {
            name: "nvidia-cuda-mps-server",
            path: on_path("nvidia-cuda-mps-server"),
        },
    ];
    let nvml = match NvmlGpus::open() {
        Ok(n) => n,
        Err(reason) => {
            return Report {
                nvml: false,
                reason: Some(reason.to_string()),
                driver: None,
                gpus: Vec::new(),
                mps,
            }
        }
    };
    let mut gpus = Vec::new();
    let mut reason = None;
    match nvml.gpus() {
        Ok(list) => {
            for g in list {
                let profiles = nvml.profiles(g.index).unwrap_or_default();
                let instances = nvml.mig_devices(g.index).unwrap_or_default();
                let processes = nvml.processes(g.index).map(|p| p.len()).unwrap_or(0);
                let table_differences = g
                    .model
                    .as_deref()
                    .and_then(|m| table_differences(m, &profiles));
                gpus.push(GpuReport {
                    gpu: g,
                    profiles,
                    instances,
                    processes,
                    table_differences,
                });
            }
        }
        Err(e) => reason = Some(e.to_string()),
    }
    Report {
        nvml: true,
        reason,
        driver: nvml.driver_version(),
        gpus,
        mps,
    }
}

fn text(r: &Report) -> String {
    let mut o = String::new();
    if !r.nvml {
        o.push_str(&format!(
            "No NVIDIA GPU to show: {}.\n",
            r.reason.as_deref().unwrap_or("NVML is not available")
        ));
    } else {
        o.push_str(&format!(
            "NVML: driver {}, {} GPU(s)\n",
            r.driver.as_deref().unwrap_or("unknown"),
            r.gpus.len()
        ));
        if let Some(why) = &r.reason {
            o.push_str(&format!("error: {why}\n"));
        }
    }
    for g in &r.gpus {
        let i = &g.gpu;
        o.push_str(&format!("\nGPU {}: {}  {}\n", i.index, i.name, i.uuid));
        o.push_str(&format!(
            "  model:     {}\n",
            i.model
                .as_deref()
                .map(|m| format!("{m} (gsched has its MIG table)"))
                .unwrap_or_else(|| "not in gsched's MIG tables".into())
        ));
        o.push_str(&format!(
            "  memory:    {} MiB total, {} MiB used; {} SMs; {} process(es)\n",
            i.memory_total_mib, i.memory_used_mib, i.sms, g.processes
        ));
        let onoff = |b: bool| if b { "enabled" } else { "disabled" };
        o.push_str(&format!(
            "  MIG:       {}\n",
            match i.mig {
                None => "not supported".to_string(),
                Some(m) => format!("{} (after reset: {})", onoff(m.current), onoff(m.pending)),
            }
        ));
        if !g.profiles.is_empty() {
            o.push_str("  GPU-instance profiles (NVML):\n");
            o.push_str("    PROFILE      ID  INDEX  SLICES  MAX  SMS  MEMORY_MIB  SIZE  STARTS\n");
            for p in &g.profiles {
                let starts = if p.starts.is_empty() {
                    "(not readable)".to_string()
                } else {
                    p.starts
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                };
                o.push_str(&format!(
                    "    {:<12} {:>3} {:>6} {:>7} {:>4} {:>4} {:>11} {:>5}  {}\n",
                    p.name,
                    p.id,
                    p.nvml_index,
                    p.slices,
                    p.max_count,
                    p.sms,
                    p.memory_mib,
                    p.size,
                    starts
                ));
            }
        }
        match &g.table_differences {
            None => {}
            Some(d) if d.is_empty() => o.push_str("  table:     agrees with gsched's MIG table\n"),
            Some(d) => {
                o.push_str("  table:     differs from gsched's MIG table:\n");
                for line in d {
                    o.push_str(&format!("    - {line}\n"));
                }
            }
        }
        if i.mig.is_some_and(|m| m.current) {
            o.push_str(&format!("  instances: {}\n", g.instances.len()));
            for d in &g.instances {
                o.push_str(&format!(
                    "    {}  {} gi={} ci={} start={} size={} {} MiB ({} used) {} SMs\n",
                    d.uuid,
                    d.profile,
                    d.gi_id,
                    d.ci_id,
                    d.start,
                    d.size,
                    d.memory_total_mib,
                    d.memory_used_mib,
                    d.sms
                ));
            }
        }
    }
    o.push('\n');
    for b in &r.mps {
        o.push_str(&format!(
            "{}: {}\n",
            b.name,
            b.path.as_deref().unwrap_or("not found on PATH")
        ));
    }
    o
}

pub fn run(args: HwArgs) -> anyhow::Result<()> {
    let report = collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(())
}
