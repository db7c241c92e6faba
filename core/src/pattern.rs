//! Output file name patterns (`slurm-%j.out`), expanded as Slurm does.

/// What a pattern can refer to.
#[derive(Debug, Clone, Default)]
pub struct PatternContext<'a> {
    pub job_id: u64,
    /// Array master id (`%A`); the job id itself for a plain job.
    pub array_job_id: Option<u64>,
    /// Array task index (`%a`); `4294967294` for a plain job, as in Slurm.
    pub array_task_id: Option<u32>,
    pub user: &'a str,
    pub name: &'a str,
    pub node: &'a str,
    /// Task rank (`%t`); 0 for the batch step.
    pub task_rank: u32,
}

/// The default output pattern of a plain job.
pub const DEFAULT_OUTPUT: &str = "slurm-%j.out";
/// The default output pattern of an array task.
pub const DEFAULT_ARRAY_OUTPUT: &str = "slurm-%A_%a.out";

/// Expands `%j %J %A %a %u %x %N %t %%`, with an optional zero-padding
/// width (`%5j`). Unknown sequences are kept as written.
pub fn expand(pattern: &str, ctx: &PatternContext<'_>) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let w: usize = width.parse().unwrap_or(0).min(10);
        let pad = |v: String| format!("{v:0>w$}");
        match chars.next() {
            Some('%') => out.push('%'),
            Some('j') => out.push_str(&pad(ctx.job_id.to_string())),
            Some('J') => out.push_str(&pad(ctx.job_id.to_string())),
            Some('A') => out.push_str(&pad(ctx.array_job_id.unwrap_or(ctx.job_id).to_string())),
            Some('a') => out.push_str(&pad(ctx.array_task_id.unwrap_or(4294967294).to_string())),
            Some('u') => out.push_str(ctx.user),
            Some('x') => out.push_str(ctx.name),
            Some('N') => out.push_str(ctx.node),
            Some('t') => out.push_str(&pad(ctx.task_rank.to_string())),
            Some(other) => {
                out.push('%');
                out.push_str(&width);
                out.push(other);
            }
            None => {
                out.push('%');
                out.push_str(&width);
            }
        }
    }
    out
}

/// The resolved output and error paths of a job's batch step on `node`
/// (relative patterns are taken from the job's working directory).
pub fn job_output_paths(job: &crate::job::Job, node: &str) -> (String, String) {
    let s = &job.spec;
    let ctx = PatternContext {
        job_id: job.id,
        array_job_id: s.array_task.as_ref().map(|t| t.array_job_id),
        array_task_id: s.array_task.as_ref().map(|t| t.task_id),
        user: &s.user_name,
        name: &s.name,
        node,
        ..Default::default()
    };
    let resolve = |p: &str| {
        let e = expand(p, &ctx);
        if e.starts_with('/') {
            e
        } else {
            format!("{}/{}", s.working_dir.trim_end_matches('/'), e)
        }
    };
    let default = if s.array_task.is_some() {
        DEFAULT_ARRAY_OUTPUT
    } else {
        DEFAULT_OUTPUT
    };
    let out = resolve(s.stdout.as_deref().unwrap_or(default));
    let err = match &s.stderr {
        Some(p) => resolve(p),
        None => out.clone(),
    };
    (out, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_like_slurm() {
        let ctx = PatternContext {
            job_id: 42,
            user: "ana",
            name: "train",
            node: "gpu01",
            ..Default::default()
        };
        assert_eq!(expand(DEFAULT_OUTPUT, &ctx), "slurm-42.out");
        assert_eq!(expand("out-%j.txt", &ctx), "out-42.txt");
        assert_eq!(expand("%x-%u-%N-%%-%5j", &ctx), "train-ana-gpu01-%-00042");
        assert_eq!(expand("%A_%a", &ctx), "42_4294967294");
        let arr = PatternContext {
            array_job_id: Some(40),
            array_task_id: Some(2),
            ..ctx.clone()
        };
        assert_eq!(expand("slurm-%A_%a.out", &arr), "slurm-40_2.out");
        assert_eq!(expand("%q%", &ctx), "%q%");
    }
}
