//! A simulated job suspended and resumed by the controller
//! (`PreemptMode=SUSPEND`): while stopped its CPU phase and its time limit
//! stand still and its GPU tasks make no progress (others on the instance
//! get its compute); it keeps its instances and memory.

use super::engine::{Sim, Wake};

impl Sim<'_> {
    /// The node stops (`suspend`) or continues job `j`'s run. Its pending
    /// timers go stale (a new generation); they are set again, later by the
    /// time it was stopped, when it goes on.
    pub(super) fn set_suspended(&mut self, j: usize, suspend: bool) {
        let now = self.now;
        let st = &mut self.state[j];
        if !st.running || st.suspended_at.is_some() == suspend {
            return;
        }
        if suspend {
            st.suspended_at = Some(now);
            st.generation += 1;
            self.decisions
                .push(format!("suspend {}", self.jobs[j].name));
            return;
        }
        let shift = now - st.suspended_at.take().expect("checked");
        st.phase_due = st.phase_due.map(|d| d + shift);
        st.limit_due = st.limit_due.map(|d| d + shift);
        let (phase, limit) = (st.phase_due, st.limit_due);
        self.decisions.push(format!("resume {}", self.jobs[j].name));
        if let Some(at) = phase {
            self.timer(at, j, Wake::PhaseEnd);
        }
        if let Some(at) = limit {
            self.timer(at, j, Wake::TimeLimit);
        }
    }
}
