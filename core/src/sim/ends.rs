//! How a simulated job's run ends: by itself, killed by its node (a
//! cancel, a preemption, its time limit), and what the controller makes of
//! it (the job's end, or its next run); and the controller's other effects
//! on the nodes, carried out as gnoded would.

use super::engine::{Sim, Wake};
use super::{Policy, SimOutcome};
use crate::cluster::Effect;
use crate::job::JobState;
use crate::outcome::{EndCause, ProcessOutcome};
use crate::wire::JobEnded;

impl Sim<'_> {
    /// Takes job `j`'s run off its nodes' books (its tasks, holds and
    /// owned instances).
    fn leave_nodes(&mut self, j: usize) {
        let cid = self.state[j].cid;
        let now = self.now_ms();
        for n in self.state[j].nodes.clone() {
            self.books[n].job_ended(cid, now);
        }
        if let (Policy::Exclusive, Some(i)) = (self.policy, self.state[j].instance) {
            let uuid = self.inst[i].uuid.clone();
            self.books[self.inst_node[i]].set_owner(&uuid, None, now);
        }
        self.starting.retain(|s| *s != j);
        let now = self.now_us();
        self.tokens.leave(j as u64, now);
        self.carry_out();
    }

    /// Job `j`'s script ended by itself (its phases done, or a crash).
    pub(super) fn complete(&mut self, j: usize, oom: bool) {
        if oom {
            self.oom += 1;
        }
        self.report_end(
            j,
            ProcessOutcome {
                exit_code: Some(if oom { 1 } else { 0 }),
                signal: None,
                cause: EndCause::Exited,
            },
        );
    }

    /// The node kills job `j`'s run (cancelled or preempted, or at its
    /// time limit): its GPU tasks stop where they are.
    fn kill(&mut self, j: usize, cause: EndCause) {
        if !self.state[j].running {
            return;
        }
        self.running.retain(|r| r.job != j);
        self.deferred.retain(|d| *d != j);
        self.report_end(
            j,
            ProcessOutcome {
                exit_code: None,
                signal: Some(15),
                cause,
            },
        );
    }

    /// Reports the end of job `j`'s run to the controller and follows
    /// what it made of it: the job ended, or it is queued again.
    fn report_end(&mut self, j: usize, outcome: ProcessOutcome) {
        self.leave_nodes(j);
        let cid = self.state[j].cid;
        let run = self.cluster.job(cid).map_or(0, |x| x.run);
        let node = self.names[self.state[j].node()].clone();
        let effects = self
            .cluster
            .job_ended(
                &node,
                &JobEnded {
                    job_id: cid,
                    run,
                    outcome,
                    end_time: self.now as i64,
                    usage: None,
                    steps: Default::default(),
                },
            )
            .unwrap_or_default();
        let st = &mut self.state[j];
        st.running = false;
        st.suspended_at = None;
        st.node_secs += (self.now - st.run_start) * st.nodes.len().max(1) as f64;
        self.settle(j);
        self.carry_out_effects(effects);
    }

    /// After a run ended: the job's final outcome, or a fresh start for
    /// its next run (requeued).
    fn settle(&mut self, j: usize) {
        let cid = self.state[j].cid;
        let Some(job) = self.cluster.job(cid) else {
            return;
        };
        let outcome = match job.state {
            JobState::Pending | JobState::Requeued => {
                let st = &mut self.state[j];
                st.preempted += 1;
                st.phase = 0;
                st.instance = None;
                st.held = None;
                st.generation += 1;
                return;
            }
            JobState::Completed => SimOutcome::Completed,
            JobState::Timeout => SimOutcome::TimedOut,
            JobState::Preempted | JobState::Cancelled => {
                self.state[j].preempted += 1;
                SimOutcome::Preempted
            }
            _ => SimOutcome::OutOfMemory,
        };
        let st = &mut self.state[j];
        st.end = Some(self.now);
        st.outcome = Some(outcome);
    }

    /// A due time limit or pass of job `j`'s run `generation` (phase
    /// ends are the caller's).
    pub fn wake(&mut self, j: usize, generation: u32, wake: Wake) {
        let st = &self.state[j];
        if st.generation != generation || !st.running {
            return;
        }
        match wake {
            Wake::TimeLimit => self.kill(j, EndCause::TimeLimit),
            Wake::Measure => self.report_busy(j),
            Wake::KeepEnd { node, seq } => {
                let (cid, now) = (self.state[j].cid, self.now_ms());
                self.books[node].end_keep(cid, seq, now);
                self.carry_out();
            }
            Wake::PhaseEnd | Wake::Pass => {}
        }
    }

    /// Job `j`'s process reports its busy time as the interception
    /// library would: since its task was placed, all of it at its
    /// parallelism's part of its instance (`TaskShares::Measured`).
    fn report_busy(&mut self, j: usize) {
        let Some(r) = self.running.iter().find(|r| r.job == j) else {
            return;
        };
        let (i, slices) = (r.inst, r.slices);
        let node = self.inst_node[i];
        let uuid = &self.inst[i].uuid;
        let capacity = self.books[node]
            .tasks()
            .instances()
            .iter()
            .find(|x| &x.uuid == uuid)
            .map_or(crate::compute::WHOLE_GPU, |x| x.capacity);
        let placed_usec = crate::compute::MEASURE_WINDOW_USEC;
        let of_instance = (self.share_of(slices) as f64 / capacity.max(1) as f64).min(1.0);
        let busy = crate::probe::BusyTime {
            busy_usec: (placed_usec as f64 * of_instance).round() as u64,
            placed_usec,
        };
        let (cid, now) = (self.state[j].cid, self.now_ms());
        self.books[node].busy_report(cid, 1, busy, now);
        self.carry_out();
    }

    /// Carries out what the controller asked of the nodes, beyond
    /// launches: kills (cancel, requeue, preemption), signals (a grace
    /// time: the simulated job takes no notice), suspensions, drains.
    /// True where a job left or stopped or went on (another pass is due).
    pub(super) fn carry_out_effects(&mut self, effects: Vec<Effect>) -> bool {
        let mut killed = false;
        for e in effects {
            match e {
                Effect::Signal {
                    job, cancel: true, ..
                } => {
                    if let Some(&j) = self.by_cid.get(&job) {
                        self.decisions.push(format!("kill {}", self.jobs[j].name));
                        self.kill(j, EndCause::Cancelled);
                        killed = true;
                    }
                }
                Effect::Signal {
                    job, cancel: false, ..
                } => {
                    if let Some(&j) = self.by_cid.get(&job) {
                        self.timer(self.now + self.grace_secs, j, Wake::Pass);
                    }
                }
                Effect::Suspend { job, suspend, .. } => {
                    if let Some(&j) = self.by_cid.get(&job) {
                        self.set_suspended(j, suspend);
                        // Its CPUs changed hands: another pass, as
                        // gctld's next one.
                        killed = true;
                    }
                }
                // Under exclusive every job owns its instance; nothing is
                // drained for isolated jobs.
                Effect::Drain {
                    node,
                    instances,
                    open_to,
                    seq,
                } if self.policy != Policy::Exclusive => {
                    let now = self.now_ms();
                    if let Some(n) = self.node_index(&node) {
                        self.books[n].set_drained(&instances, &open_to, seq, now);
                    }
                }
                Effect::Drain { .. } => {}
                // What gctld persists: the simulator keeps its state in
                // memory only.
                Effect::Submitted { .. }
                | Effect::Job { .. }
                | Effect::Accounts
                | Effect::Node { .. }
                | Effect::JobSpec { .. } => {}
                // The launch pass carries these out itself (`passes.rs`);
                // an end or a kill returns none.
                Effect::Launch { .. } | Effect::Reshape { .. } => {}
                // Every simulated run is the controller's own.
                Effect::StopRun { .. } => {}
            }
        }
        killed
    }
}
