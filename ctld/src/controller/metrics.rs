//! Prometheus `/metrics`: the controller's own histograms (queue wait,
//! scheduler pass) and, read at scrape time, jobs by state and queue,
//! every GPU instance's memory and warps, OOM endings, and the probe
//! round-trip and placement-wait histograms each node reports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gsched_core::histogram::LatencyHistogram;
use gsched_core::JobState;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::Controller;

/// Histograms the controller observes as it works.
pub struct Metrics {
    /// Seconds from submission to start, per started job.
    pub queue_wait: Histogram,
    /// Seconds one launch pass takes.
    pub scheduler_pass: Histogram,
    /// The latest (probe round trip, placement wait) of each node.
    pub node_latency: Mutex<HashMap<String, (LatencyHistogram, LatencyHistogram)>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            // 1 s to about 4.5 days.
            queue_wait: Histogram::new(exponential_buckets(1.0, 4.0, 10)),
            // 10 µs to about 2.6 s.
            scheduler_pass: Histogram::new(exponential_buckets(1e-5, 4.0, 10)),
            node_latency: Mutex::new(HashMap::new()),
        }
    }
}

/// Reads the cluster at scrape time.
struct ClusterCollector(Arc<Controller>);

impl std::fmt::Debug for ClusterCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterCollector")
    }
}

type Labels = Vec<(&'static str, String)>;

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Labels, i64)],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Labels, &LatencyHistogram)],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in rows {
        m.encode_family(labels)?
            .encode_histogram::<Labels>(h.sum, h.count, &h.buckets(), None)?;
    }
    Ok(())
}

impl Collector for ClusterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let ctl = &self.0;
        let (jobs, instances, oom) = {
            let c = ctl.lock();
            let mut by: HashMap<(JobState, bool), i64> = HashMap::new();
            // Those that left memory count too: a counter never goes down.
            let mut oom = c.purged_count(JobState::OutOfMemory);
            for j in c.jobs() {
                *by.entry((j.state, j.spec.isolated)).or_default() += 1;
                if j.state == JobState::OutOfMemory {
                    oom += 1;
                }
            }
            let mut jobs = Vec::new();
            for s in JobState::ALL {
                for isolated in [true, false] {
                    let n = by.get(&(s, isolated)).copied().unwrap_or(0);
                    let queue = if isolated { "isolated" } else { "shared" };
                    jobs.push((
                        vec![
                            ("state", s.as_str().to_string()),
                            ("queue", queue.to_string()),
                        ],
                        n,
                    ));
                }
            }
            let instances: Vec<(Labels, [i64; 6])> = c
                .nodes()
                .flat_map(|n| {
                    n.instances.iter().map(move |s| {
                        let i = &s.instance;
                        let labels: Labels = vec![
                            ("node", n.name.clone()),
                            ("gpu", i.gpu_index.to_string()),
                            ("instance", i.uuid.clone()),
                            (
                                "profile",
                                i.profile.clone().unwrap_or_else(|| "whole".into()),
                            ),
                        ];
                        let total = (i.memory_mib * 1024 * 1024) as i64;
                        let reserved = s.held_bytes() as i64;
                        let used = s.used_bytes.map(|b| b as i64).unwrap_or(-1);
                        (
                            labels,
                            [
                                total,
                                reserved,
                                used,
                                s.warps as i64,
                                i64::from(s.isolated_owner.is_some()),
                                i64::from(s.active_tasks),
                            ],
                        )
                    })
                })
                .collect();
            (jobs, instances, oom)
        };
        gauge(
            &mut encoder,
            "gsched_jobs",
            "Jobs by state and queue (isolated or shared)",
            &jobs,
        )?;
        let col = |k: usize, skip_unknown: bool| -> Vec<(Labels, i64)> {
            instances
                .iter()
                .filter(|(_, v)| !skip_unknown || v[k] >= 0)
                .map(|(l, v)| (l.clone(), v[k]))
                .collect()
        };
        gauge(
            &mut encoder,
            "gsched_instance_memory_total_bytes",
            "GPU instance memory",
            &col(0, false),
        )?;
        gauge(
            &mut encoder,
            "gsched_instance_memory_reserved_bytes",
            "Memory held: the whole instance for an isolated job, else the shared tasks' reservations",
            &col(1, false),
        )?;
        gauge(
            &mut encoder,
            "gsched_instance_memory_used_bytes",
            "Memory in use as the GPU reports it (instances whose node can read it)",
            &col(2, true),
        )?;
        gauge(
            &mut encoder,
            "gsched_instance_warps_in_use",
            "Warps the active shared tasks declared",
            &col(3, false),
        )?;
        gauge(
            &mut encoder,
            "gsched_instance_isolated",
            "1 while an isolated job holds the instance",
            &col(4, false),
        )?;
        gauge(
            &mut encoder,
            "gsched_instance_active_tasks",
            "Shared tasks with reservations on the instance",
            &col(5, false),
        )?;
        leadership(&mut encoder, ctl)?;
        {
            let m = encoder.encode_descriptor(
                "gsched_oom_events",
                "Jobs that ended OUT_OF_MEMORY",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(oom).encode(m)?;
        }
        let lat = ctl
            .metrics
            .node_latency
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut nodes: Vec<&String> = lat.keys().collect();
        nodes.sort();
        let rows = |pick: fn(&(LatencyHistogram, LatencyHistogram)) -> &LatencyHistogram| {
            nodes
                .iter()
                .map(|n| (vec![("node", n.to_string())], pick(&lat[*n])))
                .collect::<Vec<_>>()
        };
        histogram(
            &mut encoder,
            "gsched_probe_round_trip_seconds",
            "Probe requests answered without waiting, read to answer written, as each node measures them",
            &rows(|l| &l.0),
        )?;
        histogram(
            &mut encoder,
            "gsched_placement_wait_seconds",
            "Task placements, asked to placed, as each node measures them",
            &rows(|l| &l.1),
        )?;
        Ok(())
    }
}

/// This controller's role and epoch (a standby serves its own: api/standby.rs).
fn leadership(encoder: &mut DescriptorEncoder, ctl: &Controller) -> Result<(), std::fmt::Error> {
    gauge(
        encoder,
        "gsched_controller_leader",
        "Whether this controller leads (1) or stands by (0)",
        &[(Vec::new(), i64::from(ctl.acting()))],
    )?;
    gauge(
        encoder,
        "gsched_controller_epoch",
        "The leadership epoch this controller leads in, or last saw",
        &[(Vec::new(), ctl.epoch())],
    )
}

/// The text exposition of every metric.
pub fn render(ctl: &Arc<Controller>) -> String {
    let mut registry = Registry::default();
    registry.register(
        "gsched_queue_wait_seconds",
        "Seconds from submission to start of started jobs",
        ctl.metrics.queue_wait.clone(),
    );
    registry.register(
        "gsched_scheduler_pass_seconds",
        "Seconds one launch pass of the scheduler takes",
        ctl.metrics.scheduler_pass.clone(),
    );
    registry.register_collector(Box::new(ClusterCollector(Arc::clone(ctl))));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::warn!(error = %e, "cannot encode metrics");
    }
    out
}
