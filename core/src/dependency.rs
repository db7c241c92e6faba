//! Job dependencies (`--dependency=afterok:12:13,afterany:14`, `singleton`):
//! parsing Slurm's syntax and deciding, from the jobs they name, whether a
//! job may start, must wait, or never can.

use serde::{Deserialize, Serialize};

use crate::job_state::{JobId, JobState};

/// What a dependency waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Condition {
    /// The other job has started (or ended).
    After,
    /// The other job ended, in any state.
    AfterAny,
    /// The other job completed successfully.
    AfterOk,
    /// The other job ended unsuccessfully.
    AfterNotOk,
}

/// One term: a condition on some jobs (an id may be an array's: all its tasks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Term {
    pub condition: Condition,
    pub jobs: Vec<JobId>,
}

/// A job's dependency: all terms (`,`) or any of them (`?`), and/or
/// `singleton` (no earlier job of the same user and name still active).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Dependency {
    pub terms: Vec<Term>,
    #[serde(default)]
    pub any: bool,
    #[serde(default)]
    pub singleton: bool,
}

/// Whether a job's dependency lets it start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ready,
    Wait,
    /// It can never be met: the job stays pending (`DependencyNeverSatisfied`).
    Never,
}

/// A malformed `--dependency` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid dependency specification '{0}': expected TYPE:JOBID[:JOBID...] with TYPE after, afterany, afterok or afternotok, joined by ',' (all) or '?' (any), or singleton")]
pub struct DependencyError(pub String);

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::After => "after",
            Condition::AfterAny => "afterany",
            Condition::AfterOk => "afterok",
            Condition::AfterNotOk => "afternotok",
        }
    }
}

/// Slurm's text form, as `--dependency` takes it.
impl std::fmt::Display for Dependency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = self
            .terms
            .iter()
            .map(|t| {
                let ids: Vec<String> = t.jobs.iter().map(|j| j.to_string()).collect();
                format!("{}:{}", t.condition.as_str(), ids.join(":"))
            })
            .collect();
        if self.singleton {
            parts.push("singleton".into());
        }
        f.write_str(&parts.join(if self.any { "?" } else { "," }))
    }
}

impl Dependency {
    pub fn parse(spec: &str) -> Result<Dependency, DependencyError> {
        let bad = || DependencyError(spec.to_string());
        let spec_t = spec.trim();
        if spec_t.is_empty() {
            return Err(bad());
        }
        let any = spec_t.contains('?');
        if any && spec_t.contains(',') {
            return Err(bad());
        }
        let mut d = Dependency {
            terms: Vec::new(),
            any,
            singleton: false,
        };
        for part in spec_t.split([',', '?']) {
            let mut fields = part.split(':');
            let kind = fields.next().unwrap_or("");
            if kind == "singleton" {
                if fields.next().is_some() {
                    return Err(bad());
                }
                d.singleton = true;
                continue;
            }
            let condition = match kind {
                "after" => Condition::After,
                "afterany" => Condition::AfterAny,
                "afterok" => Condition::AfterOk,
                "afternotok" => Condition::AfterNotOk,
                _ => return Err(bad()),
            };
            let jobs: Vec<JobId> = fields
                .map(|f| {
                    // `ID+TIME` (after with a delay) is not supported.
                    f.split('_')
                        .next()
                        .unwrap_or("")
                        .parse::<JobId>()
                        .map_err(|_| bad())
                })
                .collect::<Result<_, _>>()?;
            if jobs.is_empty() {
                return Err(bad());
            }
            d.terms.push(Term { condition, jobs });
        }
        Ok(d)
    }

    /// Every job id the terms name.
    pub fn job_ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.terms.iter().flat_map(|t| t.jobs.iter().copied())
    }

    /// The verdict, given the states of the jobs each id stands for
    /// (`states(id)`: empty when unknown) and whether an earlier job of the
    /// same user and name is still active (for `singleton`).
    pub fn verdict(
        &self,
        states: impl Fn(JobId) -> Vec<JobState>,
        earlier_active: bool,
    ) -> Verdict {
        let term = |t: &Term| -> Verdict {
            let mut v = Verdict::Ready;
            for &id in &t.jobs {
                let st = states(id);
                if st.is_empty() {
                    // A job that left the controller's memory: treated as
                    // ended (after, afterany) or unknown (never).
                    match t.condition {
                        Condition::After | Condition::AfterAny => continue,
                        _ => return Verdict::Never,
                    }
                }
                for s in st {
                    let r = match t.condition {
                        Condition::After => {
                            if s == JobState::Pending || s == JobState::Requeued {
                                Verdict::Wait
                            } else {
                                Verdict::Ready
                            }
                        }
                        Condition::AfterAny => {
                            if s.is_final() {
                                Verdict::Ready
                            } else {
                                Verdict::Wait
                            }
                        }
                        Condition::AfterOk => match s {
                            JobState::Completed => Verdict::Ready,
                            s if s.is_final() => Verdict::Never,
                            _ => Verdict::Wait,
                        },
                        Condition::AfterNotOk => match s {
                            JobState::Completed => Verdict::Never,
                            s if s.is_final() => Verdict::Ready,
                            _ => Verdict::Wait,
                        },
                    };
                    match r {
                        Verdict::Never => return Verdict::Never,
                        Verdict::Wait => v = Verdict::Wait,
                        Verdict::Ready => {}
                    }
                }
            }
            v
        };
        let terms: Vec<Verdict> = self.terms.iter().map(term).collect();
        let combined = if terms.is_empty() {
            Verdict::Ready
        } else if self.any {
            if terms.contains(&Verdict::Ready) {
                Verdict::Ready
            } else if terms.contains(&Verdict::Wait) {
                Verdict::Wait
            } else {
                Verdict::Never
            }
        } else if terms.contains(&Verdict::Never) {
            Verdict::Never
        } else if terms.contains(&Verdict::Wait) {
            Verdict::Wait
        } else {
            Verdict::Ready
        };
        match combined {
            Verdict::Ready if self.singleton && earlier_active => Verdict::Wait,
            v => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    #[test]
    fn slurm_syntax() {
        let d = Dependency::parse("afterok:12:13,afterany:14").unwrap();
        assert_eq!(d.terms.len(), 2);
        assert_eq!(d.terms[0].jobs, vec![12, 13]);
        assert!(!d.any);
        assert!(Dependency::parse("afterok:1?afternotok:2").unwrap().any);
        assert!(Dependency::parse("singleton").unwrap().singleton);
        // Written back as Slurm writes it, and read again the same.
        for text in [
            "afterok:12:13,afterany:14",
            "afterok:1?afternotok:2",
            "singleton",
        ] {
            let d = Dependency::parse(text).unwrap();
            assert_eq!(d.to_string(), text);
            assert_eq!(Dependency::parse(&d.to_string()).unwrap(), d);
        }
        assert_eq!(
            Dependency::parse("afterok:7_3").unwrap().terms[0].jobs,
            vec![7]
        );
        for bad in [
            "",
            "afterok",
            "afterok:",
            "afterok:x",
            "before:1",
            "singleton:1",
            "afterok:1,after:2?after:3",
        ] {
            assert!(Dependency::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn verdicts() {
        let d = |s: &str| Dependency::parse(s).unwrap();
        let one = |st: JobState| move |_| vec![st];
        assert_eq!(d("afterok:1").verdict(one(Running), false), Verdict::Wait);
        assert_eq!(
            d("afterok:1").verdict(one(Completed), false),
            Verdict::Ready
        );
        assert_eq!(d("afterok:1").verdict(one(Failed), false), Verdict::Never);
        assert_eq!(
            d("afternotok:1").verdict(one(Completed), false),
            Verdict::Never
        );
        assert_eq!(
            d("afternotok:1").verdict(one(Cancelled), false),
            Verdict::Ready
        );
        assert_eq!(d("afterany:1").verdict(one(Timeout), false), Verdict::Ready);
        assert_eq!(d("after:1").verdict(one(Running), false), Verdict::Ready);
        assert_eq!(d("after:1").verdict(one(Pending), false), Verdict::Wait);
        // An array id stands for all its tasks.
        let mixed = |_| vec![Completed, Running];
        assert_eq!(d("afterok:1").verdict(mixed, false), Verdict::Wait);
        // Any of the terms.
        let states = |id| vec![if id == 1 { Failed } else { Running }];
        assert_eq!(
            d("afterok:1?afterok:2").verdict(states, false),
            Verdict::Wait
        );
        assert_eq!(
            d("afterok:1,afterok:2").verdict(states, false),
            Verdict::Never
        );
        assert_eq!(d("singleton").verdict(one(Running), true), Verdict::Wait);
        assert_eq!(d("singleton").verdict(one(Running), false), Verdict::Ready);
    }
}
