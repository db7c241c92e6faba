//! Job arrays (`--array=0-9:2%4`): parsing the request, the task a job
//! of an array is, and Slurm's ways of printing array ids.

use serde::{Deserialize, Serialize};

use crate::job_state::JobId;

/// Largest array index plus one by default, as Slurm's default
/// `MaxArraySize` (gctld's `--max-array-size`).
pub const DEFAULT_MAX_ARRAY_SIZE: u32 = 1001;

/// The most `MaxArraySize` may be, as in Slurm.
pub const MOST_MAX_ARRAY_SIZE: u32 = 4_000_001;

/// An `--array` request: the indices, and how many may run at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArrayRequest {
    /// Sorted, without repeats.
    pub indices: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
}

/// A malformed `--array` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    #[error(
        "invalid array specification '{0}': expected indices like 0-15, 1,3,5, 0-15:4 or 0-15%4"
    )]
    Syntax(String),
    #[error("invalid array specification '{spec}': index {index} is above MaxArraySize-1 ({max})", max = max_size - 1)]
    TooLarge {
        spec: String,
        index: u64,
        max_size: u32,
    },
    #[error("invalid array specification '{0}': the %limit must be at least 1")]
    ZeroLimit(String),
    #[error("invalid array specification '{spec}': its ranges give more than MaxArraySize ({max_size}) indices")]
    TooMany { spec: String, max_size: u32 },
    #[error("invalid array: it has no index")]
    NoIndex,
    #[error("invalid array: its indices must be given in increasing order, each once")]
    Unordered,
}

impl ArrayRequest {
    /// Parses Slurm's syntax: comma-separated indices and ranges
    /// `A-B[:STEP]`, then an optional `%MAX` running at once, with indices
    /// up to the largest `MaxArraySize` allows (the controller holds a
    /// submission to its own, [`Self::check`]).
    pub fn parse(spec: &str) -> Result<ArrayRequest, ArrayError> {
        Self::parse_within(spec, MOST_MAX_ARRAY_SIZE)
    }

    /// [`Self::parse`] with indices below `max_size` (`MaxArraySize`):
    /// nothing larger is made.
    pub fn parse_within(spec: &str, max_size: u32) -> Result<ArrayRequest, ArrayError> {
        let syntax = || ArrayError::Syntax(spec.to_string());
        let (list, limit) = match spec.split_once('%') {
            Some((l, m)) => (l, Some(m)),
            None => (spec, None),
        };
        let max_running = match limit {
            Some(m) => {
                let n: u32 = m.trim().parse().map_err(|_| syntax())?;
                if n == 0 {
                    return Err(ArrayError::ZeroLimit(spec.into()));
                }
                Some(n)
            }
            None => None,
        };
        let number = |s: &str| -> Result<u64, ArrayError> {
            let s = s.trim();
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            let n: u64 = s.parse().map_err(|_| syntax())?;
            if n >= u64::from(max_size) {
                return Err(ArrayError::TooLarge {
                    spec: spec.into(),
                    index: n,
                    max_size,
                });
            }
            Ok(n)
        };
        let mut indices = Vec::new();
        for part in list.split(',') {
            let (range, step) = match part.split_once(':') {
                Some((r, s)) => (r, number(s)?),
                None => (part, 1),
            };
            if step == 0 {
                return Err(syntax());
            }
            match range.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (number(a)?, number(b)?);
                    if a > b {
                        return Err(syntax());
                    }
                    // Counted before it is made: repeated ranges cannot
                    // make more than MaxArraySize indices to sort.
                    let count = (b - a) / step + 1;
                    if indices.len() as u64 + count > u64::from(max_size) {
                        return Err(ArrayError::TooMany {
                            spec: spec.into(),
                            max_size,
                        });
                    }
                    indices.extend((a..=b).step_by(step as usize).map(|i| i as u32));
                }
                None => {
                    if part.contains(':') {
                        return Err(syntax());
                    }
                    if indices.len() as u64 >= u64::from(max_size) {
                        return Err(ArrayError::TooMany {
                            spec: spec.into(),
                            max_size,
                        });
                    }
                    indices.push(number(range)? as u32);
                }
            }
        }
        indices.sort_unstable();
        indices.dedup();
        Ok(ArrayRequest {
            indices,
            max_running,
        })
    }

    /// Whether a request (as a client sent it) is one the controller
    /// takes: some indices, in increasing order, each below `max_size`
    /// (`MaxArraySize`), and a `%limit` of at least 1.
    pub fn check(&self, max_size: u32) -> Result<(), ArrayError> {
        let Some(&last) = self.indices.last() else {
            return Err(ArrayError::NoIndex);
        };
        if self.indices.windows(2).any(|w| w[0] >= w[1]) {
            return Err(ArrayError::Unordered);
        }
        if last >= max_size {
            return Err(ArrayError::TooLarge {
                spec: format!("{}-{last}", self.indices[0]),
                index: u64::from(last),
                max_size,
            });
        }
        if self.max_running == Some(0) {
            return Err(ArrayError::ZeroLimit("%0".into()));
        }
        Ok(())
    }

    /// The step between indices when they form one progression, else 1
    /// (`SLURM_ARRAY_TASK_STEP`).
    pub fn step(&self) -> u32 {
        match self.indices.as_slice() {
            [a, b, rest @ ..] => {
                let d = b - a;
                let mut prev = *b;
                for &x in rest {
                    if x - prev != d {
                        return 1;
                    }
                    prev = x;
                }
                d
            }
            _ => 1,
        }
    }
}

/// The place of one job in its array.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArrayTask {
    /// The array's id (`%A`, `SLURM_ARRAY_JOB_ID`): the job id of its first task.
    pub array_job_id: JobId,
    /// This task's index (`%a`, `SLURM_ARRAY_TASK_ID`).
    pub task_id: u32,
    pub min: u32,
    pub max: u32,
    pub step: u32,
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
}

impl ArrayTask {
    /// `A_i`, as Slurm prints an array task.
    pub fn display_id(&self) -> String {
        format!("{}_{}", self.array_job_id, self.task_id)
    }
}

/// Slurm's collapsed form of pending array tasks: `A_[1-3,7%2]`.
pub fn collapsed(array_job_id: JobId, indices: &[u32], max_running: Option<u32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    let limit = max_running.map(|m| format!("%{m}")).unwrap_or_default();
    format!("{array_job_id}_[{}{limit}]", parts.join(","))
}

/// A job id as users write it: `N`, or `A_i` for one task of array A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRef {
    /// A job id, or an array id (which stands for every task).
    Id(JobId),
    Task(JobId, u32),
}

impl JobRef {
    /// Parses `N`, `A_i` (and `N.step`, whose step part is ignored).
    pub fn parse(s: &str) -> Option<JobRef> {
        let s = s.trim();
        let s = s.split_once('.').map(|(j, _)| j).unwrap_or(s);
        match s.split_once('_') {
            Some((a, i)) => Some(JobRef::Task(a.parse().ok()?, i.parse().ok()?)),
            None => s.parse().ok().map(JobRef::Id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_array_syntax() {
        let r = ArrayRequest::parse("0-4%2").unwrap();
        assert_eq!(r.indices, vec![0, 1, 2, 3, 4]);
        assert_eq!(r.max_running, Some(2));
        let r = ArrayRequest::parse("1,3,10-16:3").unwrap();
        assert_eq!(r.indices, vec![1, 3, 10, 13, 16]);
        assert_eq!(r.step(), 1);
        assert_eq!(ArrayRequest::parse("0-15:4").unwrap().step(), 4);
        assert_eq!(ArrayRequest::parse("7").unwrap().indices, vec![7]);
        assert_eq!(ArrayRequest::parse("3,1,3").unwrap().indices, vec![1, 3]);
        for bad in [
            "", "a", "1-", "5-2", "1:2", "0-4%", "0-4%x", "1,,2", "0-3:0", "-1",
        ] {
            assert!(ArrayRequest::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            ArrayRequest::parse("0-4%0").unwrap_err().to_string(),
            "invalid array specification '0-4%0': the %limit must be at least 1"
        );
        assert_eq!(
            ArrayRequest::parse_within("0-1001", DEFAULT_MAX_ARRAY_SIZE)
                .unwrap_err()
                .to_string(),
            "invalid array specification '0-1001': index 1001 is above MaxArraySize-1 (1000)"
        );
        assert!(ArrayRequest::parse("0-4000001").is_err());
        // Repeated ranges are refused before they are made.
        let repeated = ["0-9"; 3].join(",");
        assert!(matches!(
            ArrayRequest::parse_within(&repeated, 20),
            Err(ArrayError::TooMany { max_size: 20, .. })
        ));
        assert_eq!(
            ArrayRequest::parse_within("0-9,0-9", 20)
                .unwrap()
                .indices
                .len(),
            10
        );
        assert_eq!(ArrayRequest::parse("4000000").unwrap().indices, [4_000_000]);
    }

    #[test]
    fn what_a_client_sends_is_checked() {
        let req = |indices: Vec<u32>, max_running| ArrayRequest {
            indices,
            max_running,
        };
        assert_eq!(req(vec![0, 2, 5], None).check(1001), Ok(()));
        assert_eq!(req(vec![], None).check(1001), Err(ArrayError::NoIndex));
        assert_eq!(
            req(vec![2, 1], None).check(1001),
            Err(ArrayError::Unordered)
        );
        assert_eq!(
            req(vec![1, 1], None).check(1001),
            Err(ArrayError::Unordered)
        );
        assert!(matches!(
            req(vec![0, 1001], None).check(1001),
            Err(ArrayError::TooLarge { index: 1001, .. })
        ));
        assert_eq!(req(vec![0, 1001], None).check(1002), Ok(()));
        assert!(matches!(
            req(vec![0], Some(0)).check(1001),
            Err(ArrayError::ZeroLimit(_))
        ));
    }

    #[test]
    fn ids_as_slurm_prints_them() {
        assert_eq!(collapsed(12, &[3, 4, 5, 9], Some(4)), "12_[3-5,9%4]");
        assert_eq!(collapsed(12, &[2], None), "12_[2]");
        assert_eq!(JobRef::parse("12_3"), Some(JobRef::Task(12, 3)));
        assert_eq!(JobRef::parse("12"), Some(JobRef::Id(12)));
        assert_eq!(JobRef::parse("12.batch"), Some(JobRef::Id(12)));
        assert_eq!(JobRef::parse("x"), None);
        assert_eq!(JobRef::parse("12_x"), None);
    }
}
