//! The controller's launch passes in the simulator: what the nodes report
//! first (as gnoded's heartbeats and task reports), then the launches,
//! kills and reshapes it decides, carried out on the nodes.

use super::engine::{Sim, Wake};
use super::Policy;
use crate::cluster::Effect;
use crate::job::JobId;

impl Sim<'_> {
    /// Tells the controller state what the nodes see, then launches,
    /// again while the pass killed runs (their room is free at once).
    pub fn schedule(&mut self) {
        for _ in 0..4 {
            if !self.schedule_once() {
                return;
            }
        }
    }

    fn schedule_once(&mut self) -> bool {
        self.finish_reshapes();
        let reported = self.report_tasks();
        let effects = self.cluster.schedule(self.now as i64);
        let mut launched = Vec::new();
        let mut reshapes = Vec::new();
        let mut rest = Vec::new();
        for e in effects {
            match e {
                Effect::Launch { job, .. } => {
                    // The simulated nodes have every launch at once.
                    let run = self.cluster.job(job).map_or(0, |j| j.run);
                    self.cluster.launch_confirmed(job, run);
                    if !launched.contains(&job) {
                        launched.push(job);
                    }
                }
                Effect::Reshape { order, .. } => reshapes.push(order),
                e => rest.push(e),
            }
        }
        let killed = self.carry_out_effects(rest);
        self.carry_out();
        let launched_none = launched.is_empty();
        for cid in launched {
            self.launched(cid);
        }
        for order in reshapes {
            self.reshape_ordered(order);
        }
        let waiting_changed = self.preempts
            && self.books.iter().zip(&reported).any(|(b, r)| {
                let now = b.tasks().waiting_tasks();
                !now.is_empty() && now != *r
            });
        // Jobs were launched and a node still has room (they took less
        // than the controller counted, their demand unknown to it): its
        // next report says so, and gctld runs a pass for a room that grew.
        let room_left = !launched_none
            && self.books.iter().any(|b| {
                b.tasks()
                    .room_for_newcomers()
                    .is_some_and(|r| r.compute >= r.default_demand)
            });
        killed || waiting_changed || room_left
    }

    /// Tells the controller what each node's shared tasks hold, which
    /// wait and how many more its instances would take, as gnoded reports
    /// them; returns the waiting tasks told.
    fn report_tasks(&mut self) -> Vec<Vec<crate::wire::WaitingTask>> {
        let mut reported = Vec::new();
        for n in 0..self.books.len() {
            let book = self.books[n].tasks();
            let uses = book.instance_uses();
            let waiting = book.waiting_tasks();
            let room = book.room_for_newcomers();
            let name = self.names[n].clone();
            self.cluster.update_instance_use(&name, &uses);
            // No host memory is simulated.
            self.cluster.set_host_room(&name, room, None);
            // Reasons are the controller's to record; nothing records here.
            let _ = self
                .cluster
                .set_waiting_tasks(&name, waiting.clone(), self.now as i64);
            reported.push(waiting);
        }
        reported
    }

    /// The controller launched job `cid`: on its batch node (and its
    /// share on the others), as gnoded does.
    fn launched(&mut self, cid: JobId) {
        let Some(&j) = self.by_cid.get(&cid) else {
            return;
        };
        let Some(job) = self.cluster.job(cid) else {
            return;
        };
        assert!(
            !self.state[j].running,
            "job {} launched while its run goes on",
            self.jobs[j].name
        );
        let insts = job.gpu_instances.clone();
        let mut nodes: Vec<String> = job.node.iter().cloned().collect();
        nodes.extend(job.sisters.iter().map(|s| s.node.clone()));
        let sister_insts: Vec<String> = job
            .sisters
            .iter()
            .flat_map(|s| s.instances.iter().cloned())
            .collect();
        let now = self.now_ms();
        let inst = insts.first().cloned();
        let index = inst.as_deref().map(|u| self.uuid_index(u));
        let mut busy = false;
        if let (Policy::Exclusive, Some(uuid)) = (self.policy, inst.as_deref()) {
            // Slurm: the job holds its instance for its whole life.
            let n = self.inst_node[self.uuid_index(uuid)];
            self.books[n].set_owner(uuid, Some(cid), now);
        } else {
            // As gnoded does: the instances are closed to shared tasks,
            // and the job starts once none is left there.
            for uuid in &insts {
                let n = self.inst_node[self.uuid_index(uuid)];
                busy |= self.books[n].hold(uuid, cid);
            }
        }
        // Its share on the other nodes is held for it alike.
        for uuid in &sister_insts {
            let n = self.inst_node[self.uuid_index(uuid)];
            busy |= self.books[n].hold(uuid, cid);
        }
        self.carry_out();
        self.decisions.push(format!(
            "launch {} {}",
            self.jobs[j].name,
            inst.as_deref().unwrap_or("-")
        ));
        let node_indices: Vec<usize> = nodes.iter().filter_map(|n| self.node_index(n)).collect();
        let limit = self.jobs[j].time_limit;
        let st = &mut self.state[j];
        st.instance = index;
        st.nodes = node_indices;
        st.running = true;
        st.run_start = self.now;
        st.start.get_or_insert(self.now);
        st.suspended_at = None;
        st.limit_due = limit.map(|l| self.now + l.ceil().max(1.0));
        if let Some(at) = st.limit_due {
            self.timer(at, j, Wake::TimeLimit);
        }
        if busy {
            self.starting.push(j);
        } else {
            self.advance(j);
        }
    }

    /// Starts the isolated jobs whose instances shared tasks have left.
    pub fn start_drained(&mut self) {
        let ready: Vec<usize> = self
            .starting
            .iter()
            .copied()
            .filter(|&j| {
                let cid = self.state[j].cid;
                self.cluster.job(cid).is_none_or(|x| {
                    x.gpu_instances.iter().all(|u| {
                        let n = self.inst_node[self.uuid_index(u)];
                        self.books[n].tasks().tasks_on(u) == 0
                    })
                })
            })
            .collect();
        self.starting.retain(|j| !ready.contains(j));
        for j in ready {
            self.advance(j);
        }
    }
}
