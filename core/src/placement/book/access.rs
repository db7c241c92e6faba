//! Who may use an instance: one job alone (Slurm's exclusive use), nobody
//! new while it is re-partitioned, its MPS server is down or a process
//! bypassed the interception there, nobody while an isolated job holds it
//! or it is drained for one, save the jobs a drain still lets in.

use super::{InstanceLoad, Placed, TaskBook};
use crate::job::JobId;

impl TaskBook {
    /// Gives the instance `uuid` to `job` alone (Slurm's exclusive use), or
    /// back to everyone with `None`. Returns the waiting tasks this placed.
    pub fn set_owner(&mut self, uuid: &str, owner: Option<JobId>) -> Vec<Placed> {
        let Some(i) = self.index(uuid) else {
            return Vec::new();
        };
        self.instances[i].owner = owner;
        if owner.is_some() {
            self.discard_keeps_on(i, owner);
        }
        self.retry()
    }

    /// Marks an instance as being re-partitioned (no new processes bound
    /// to it) or back in use. Returns the waiting tasks this placed.
    pub fn set_retiring(&mut self, uuid: &str, retiring: bool) -> Vec<Placed> {
        self.restrict(uuid, retiring, |i| &mut i.retiring)
    }

    /// Sets one of an instance's restrictions; lifting it may place
    /// waiting tasks, which are returned.
    fn restrict(
        &mut self,
        uuid: &str,
        on: bool,
        flag: impl FnOnce(&mut InstanceLoad) -> &mut bool,
    ) -> Vec<Placed> {
        let Some(i) = self.index(uuid) else {
            return Vec::new();
        };
        *flag(&mut self.instances[i]) = on;
        if on {
            self.discard_keeps_on(i, None);
            Vec::new()
        } else {
            self.retry()
        }
    }

    /// Says whether the instance's MPS server is down: while it is, no new
    /// process is bound there. Returns the waiting tasks its return placed.
    pub fn set_mps_down(&mut self, uuid: &str, down: bool) -> Vec<Placed> {
        self.restrict(uuid, down, |i| &mut i.mps_down)
    }

    /// Says whether a process without a placement uses the instance (see
    /// [`TaskBook::unplaced_on`]): while one does, no new process is bound
    /// there. Returns the waiting tasks its end placed.
    pub fn set_bypassed(&mut self, uuid: &str, bypassed: bool) -> Vec<Placed> {
        self.restrict(uuid, bypassed, |i| &mut i.bypassed)
    }

    /// Opens or closes an instance to shared tasks (closed while held or
    /// drained for an isolated job). Opening may place waiting tasks.
    pub fn set_closed(&mut self, uuid: &str, closed: bool) -> Vec<Placed> {
        self.restrict(uuid, closed, |i| &mut i.closed)
    }

    /// The jobs whose tasks a closed instance still takes (see
    /// [`InstanceLoad::open_to`]); none when empty. Returns the waiting
    /// tasks this placed.
    pub fn set_open_to(&mut self, uuid: &str, jobs: Vec<JobId>) -> Vec<Placed> {
        let Some(i) = self.index(uuid) else {
            return Vec::new();
        };
        if self.instances[i].open_to == jobs {
            return Vec::new();
        }
        self.instances[i].open_to = jobs;
        self.retry()
    }
}
