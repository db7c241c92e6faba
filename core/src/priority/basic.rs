//! `basic`: first come, first served. Each job's priority falls by one
//! with each later job (as Slurm's priority/basic shows it); nice is kept
//! but changes nothing.

use super::{Priority, PriorityContext, PriorityPolicy, TOP};
use crate::job::Job;

#[derive(Debug, Clone, Copy, Default)]
pub struct Basic;

impl PriorityPolicy for Basic {
    fn name(&self) -> &'static str {
        "basic"
    }

    fn orders(&self) -> bool {
        false
    }

    fn priority(&self, job: &Job, _: &PriorityContext<'_>) -> Priority {
        Priority {
            value: TOP.saturating_sub(job.id.saturating_sub(1)).max(1),
            ..Priority::default()
        }
    }
}
