//! `scontrol update JobId=... TimeLimit=/Partition=/Name=/Dependency=` on
//! a pending job: the new spec is checked as a submission is, and a user
//! may lower a time limit but only an administrator may raise it (Slurm's
//! rule).

use serde::{Deserialize, Deserializer, Serialize};

use super::{Cluster, ClusterError, Effect};
use crate::dependency::Dependency;
use crate::job::{JobId, JobState};

/// The fields to change; `None` leaves one as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobUpdate {
    /// Seconds; `null` is UNLIMITED (absent: unchanged).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub time_limit: Option<Option<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// `null` removes the job's dependency (absent: unchanged).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub dependency: Option<Option<Dependency>>,
    /// Taken off the job's priority; negative only for administrators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nice: Option<i64>,
}

/// A field that is present: `null` is `Some(None)`, not "absent" as serde
/// reads an `Option<Option<_>>` by itself (absent is the `default`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl JobUpdate {
    pub fn is_empty(&self) -> bool {
        *self == JobUpdate::default()
    }
}

impl Cluster {
    /// Changes pending job `id` (an administrator's change when `admin`).
    /// The partition must be one the caller checked exists.
    pub fn update_pending(
        &mut self,
        id: JobId,
        update: &JobUpdate,
        admin: bool,
    ) -> Result<Vec<Effect>, ClusterError> {
        let job = self.jobs.get(&id).ok_or(ClusterError::UnknownJob(id))?;
        if job.state != JobState::Pending {
            return Err(ClusterError::NotPending(id));
        }
        if update.is_empty() {
            return Err(ClusterError::Refused(
                "nothing to change: give TimeLimit=, Name=, Partition=, Dependency= or Nice="
                    .into(),
            ));
        }
        let mut spec = job.spec.clone();
        let mut changed = Vec::new();
        if let Some(limit) = update.time_limit {
            let longer = match (spec.time_limit, limit) {
                (_, None) => spec.time_limit.is_some(),
                (None, Some(_)) => false,
                (Some(old), Some(new)) => new > old,
            };
            if longer && !admin {
                return Err(ClusterError::Refused(format!(
                    "Access/permission denied: only an administrator may raise job {id}'s time limit; you may lower it"
                )));
            }
            spec.time_limit = limit;
            changed.push("TimeLimit");
        }
        if let Some(name) = &update.name {
            spec.name = name.clone();
            changed.push("Name");
        }
        if let Some(p) = &update.partition {
            spec.partition = Some(p.clone());
            changed.push("Partition");
        }
        if let Some(d) = &update.dependency {
            if let Some(d) = d {
                self.check_dependency(spec.uid, d)?;
            }
            if d.iter().flat_map(|d| d.job_ids()).any(|j| j == id) {
                return Err(ClusterError::Refused(format!(
                    "Job dependency problem: job {id} cannot depend on itself"
                )));
            }
            spec.dependency = d.clone();
            changed.push("Dependency");
        }
        if let Some(nice) = update.nice {
            crate::priority::check_nice(nice, admin)
                .map_err(|e| ClusterError::Refused(e.to_string()))?;
            spec.nice = nice;
            changed.push("Nice");
        }
        spec.validate_without_script()?;
        let job = self.jobs.get_mut(&id).expect("checked above");
        job.spec = spec;
        // Looked at again on the next pass (a dependency may be met, or a
        // limit fit where it did not).
        self.unexamined.push(id);
        Ok(vec![
            Effect::JobSpec { id },
            Effect::Job {
                id,
                event: format!("updated: {}", changed.join(", ")),
            },
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testkit::{cluster, launch, spec};

    #[test]
    fn null_unlimits_or_removes_and_absent_leaves_as_is() {
        let u = JobUpdate {
            time_limit: Some(None),
            dependency: Some(None),
            ..JobUpdate::default()
        };
        let text = serde_json::to_string(&u).unwrap();
        assert_eq!(text, r#"{"time_limit":null,"dependency":null}"#);
        assert_eq!(serde_json::from_str::<JobUpdate>(&text).unwrap(), u);
        let absent: JobUpdate = serde_json::from_str(r#"{"name":"x"}"#).unwrap();
        assert_eq!((absent.time_limit, absent.dependency), (None, None));
        let set: JobUpdate = serde_json::from_str(r#"{"time_limit":60}"#).unwrap();
        assert_eq!(set.time_limit, Some(Some(60)));
    }

    fn limited(secs: u64) -> crate::job::JobSpec {
        crate::job::JobSpec {
            time_limit: Some(secs),
            ..spec("a", false)
        }
    }

    #[test]
    fn a_pending_job_is_changed_and_a_user_may_only_lower_its_limit() {
        let mut c = cluster();
        let (a, _) = c.submit(limited(600), 0).unwrap();
        c.set_held(a, true).unwrap();
        // As in the controller: the script is in the store only.
        assert!(c.take_text(a).is_some());
        let lower = JobUpdate {
            time_limit: Some(Some(60)),
            name: Some("renamed".into()),
            ..Default::default()
        };
        let fx = c.update_pending(a, &lower, false).unwrap();
        assert!(fx.contains(&Effect::JobSpec { id: a }));
        let j = c.job(a).unwrap();
        assert_eq!(
            (j.spec.time_limit, j.spec.name.as_str()),
            (Some(60), "renamed")
        );
        for raise in [Some(600), None] {
            let up = JobUpdate {
                time_limit: Some(raise),
                ..Default::default()
            };
            let e = c.update_pending(a, &up, false).unwrap_err().to_string();
            assert!(e.contains("only an administrator may raise"), "{e}");
            c.update_pending(a, &up, true).unwrap();
        }
        assert_eq!(c.job(a).unwrap().spec.time_limit, None);
    }

    #[test]
    fn bad_or_late_updates_are_refused_and_change_nothing() {
        let mut c = cluster();
        let (a, _) = c.submit(spec("a", false), 0).unwrap();
        let (b, _) = c.submit(spec("b", false), 0).unwrap();
        c.set_held(b, true).unwrap();
        let dep = |ids: &str| JobUpdate {
            dependency: Some(Some(Dependency::parse(&format!("afterok:{ids}")).unwrap())),
            ..Default::default()
        };
        assert!(matches!(
            c.update_pending(b, &dep("999"), false),
            Err(ClusterError::DependencyOnUnknownJob(999))
        ));
        assert!(c.update_pending(b, &dep(&b.to_string()), false).is_err());
        let bad_name = JobUpdate {
            name: Some("x\u{7}".into()),
            ..Default::default()
        };
        assert!(c.update_pending(b, &bad_name, false).is_err());
        assert_eq!(c.job(b).unwrap().spec.name, "b");
        assert!(c.update_pending(b, &JobUpdate::default(), false).is_err());
        c.update_pending(b, &dep(&a.to_string()), false).unwrap();
        assert!(c.job(b).unwrap().spec.dependency.is_some());
        // Once running, no more.
        launch(&mut c, 1);
        assert!(matches!(
            c.update_pending(a, &bad_name, false),
            Err(ClusterError::NotPending(_))
        ));
    }

    #[test]
    fn under_multifactor_the_job_with_the_lower_nice_goes_first() {
        let mut c = cluster();
        c.set_priority_policy(Box::new(crate::priority::Multifactor(
            crate::priority::PriorityConfig::default(),
        )));
        // The node takes one job at a time.
        let whole = |name: &str| crate::job::JobSpec {
            slurm: crate::job::SlurmOptions {
                cpus_per_task: Some(64),
                ..Default::default()
            },
            ..spec(name, false)
        };
        let (first, _) = c.submit(whole("first"), 0).unwrap();
        let (second, _) = c.submit(whole("second"), 0).unwrap();
        let (third, _) = c.submit(whole("third"), 0).unwrap();
        let nice = |n| JobUpdate {
            nice: Some(n),
            ..JobUpdate::default()
        };
        c.update_pending(first, &nice(500), false).unwrap();
        let e = c.update_pending(second, &nice(-10), false).unwrap_err();
        assert!(e.to_string().contains("administrator"), "{e}");
        c.update_pending(third, &nice(-10), true).unwrap();
        assert_eq!(c.job(third).unwrap().spec.nice, -10);
        let p = |c: &Cluster, id| c.priority_of(c.job(id).unwrap(), 0).value;
        assert!(p(&c, third) > p(&c, second) && p(&c, second) > p(&c, first));
        assert_eq!(launch(&mut c, 1), [third]);
        // First come, first served would have started the first.
        c.set_priority_policy(Box::new(crate::priority::Basic));
        assert!(p(&c, first) > p(&c, second));
    }
}
