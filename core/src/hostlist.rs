//! Slurm hostlists: `n1,n2`, `n[1-4]`, `gpu[01-16]` (widths kept),
//! `rack[1-2]-n[1,3]` (each bracket group expands in turn); [`expand`]
//! reads one, [`compress`] writes one.

/// The most names one hostlist may expand to (a typo such as `n[1-99999999]`
/// is refused instead of filling memory).
pub const MAX_HOSTS: usize = 65_536;

/// A hostlist that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("hostlist '{0}': unbalanced brackets")]
    Brackets(String),
    #[error("hostlist '{list}': '{range}' is not a number or a range LO-HI")]
    Range { list: String, range: String },
    #[error("hostlist '{0}' names more than {MAX_HOSTS} hosts")]
    TooMany(String),
    #[error("hostlist '{0}' has an empty name")]
    Empty(String),
}

/// Every host name `list` names, in order, without repeats.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<String> = Vec::new();
    for item in items(list)? {
        for name in expand_item(list, item)? {
            if seen.insert(name.clone()) {
                out.push(name);
            }
            if out.len() > MAX_HOSTS {
                return Err(HostlistError::TooMany(list.into()));
            }
        }
    }
    Ok(out)
}

/// A hostlist read but not expanded: it answers whether it names a host
/// without building the names (`-x n[1-60000]` costs its text, not
/// sixty thousand strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostlist {
    /// Per comma-separated item, its literal text and its bracket groups
    /// in turn.
    items: Vec<Vec<Part>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    /// (low, high, width): numbers written zero-padded to width.
    Numbers(Vec<(u64, u64, usize)>),
}

impl Hostlist {
    /// Reads `list`, with the same checks as [`expand`].
    pub fn parse(list: &str) -> Result<Hostlist, HostlistError> {
        let parsed = items(list)?
            .into_iter()
            .map(|item| parse_item(list, item))
            .collect::<Result<Vec<_>, _>>()?;
        let h = Hostlist { items: parsed };
        if h.len() > MAX_HOSTS {
            return Err(HostlistError::TooMany(list.into()));
        }
        Ok(h)
    }

    /// How many names it lists, repeats counted (at most [`MAX_HOSTS`]).
    pub fn len(&self) -> usize {
        self.items
            .iter()
            .map(|parts| {
                parts.iter().fold(1usize, |n, p| match p {
                    Part::Text(_) => n,
                    Part::Numbers(r) => {
                        n.saturating_mul(r.iter().map(|(a, b, _)| (b - a + 1) as usize).sum())
                    }
                })
            })
            .fold(0usize, usize::saturating_add)
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether it names `host`.
    pub fn contains(&self, host: &str) -> bool {
        self.items.iter().any(|parts| matches(parts, host))
    }
}

fn matches(parts: &[Part], s: &str) -> bool {
    match parts.split_first() {
        None => s.is_empty(),
        Some((Part::Text(t), rest)) => s.strip_prefix(t.as_str()).is_some_and(|r| matches(rest, r)),
        Some((Part::Numbers(ranges), rest)) => {
            let digits = s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            (1..=digits.min(20)).any(|k| {
                let (d, r) = s.split_at(k);
                d.parse::<u64>().is_ok_and(|n| {
                    ranges
                        .iter()
                        .any(|&(a, b, w)| (a..=b).contains(&n) && format!("{n:0w$}") == d)
                }) && matches(rest, r)
            })
        }
    }
}

/// The comma-separated items of `list`, trimmed, none empty.
fn items(list: &str) -> Result<Vec<&str>, HostlistError> {
    let parts = split_top(list).map_err(|_| HostlistError::Brackets(list.into()))?;
    parts
        .into_iter()
        .map(|i| {
            let i = i.trim();
            if i.is_empty() {
                Err(HostlistError::Empty(list.into()))
            } else {
                Ok(i)
            }
        })
        .collect()
}

/// The hostlist naming `names`: names that differ only in a trailing
/// number are written as one range (`n1,n2,n3,m` → `n[1-3],m`); zero-padded
/// numbers keep their width (`gpu[01-02]`). Prefixes keep the order they
/// first appear in; the numbers under one prefix are sorted.
pub fn compress<S: AsRef<str>>(names: &[S]) -> String {
    // (prefix, padded width or 0) -> numbers, in first-seen order.
    let mut groups: Vec<((String, usize), Vec<u64>)> = Vec::new();
    let mut plain: Vec<(usize, String)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let name = name.as_ref();
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, number) = name.split_at(name.len() - digits);
        match number.parse::<u64>() {
            Ok(n) if !number.is_empty() => {
                let width = if number.len() > 1 && number.starts_with('0') {
                    number.len()
                } else {
                    0
                };
                let key = (prefix.to_string(), width);
                match groups.iter_mut().find(|g| g.0 == key) {
                    Some(g) => g.1.push(n),
                    None => {
                        plain.push((i, String::new()));
                        groups.push((key, vec![n]));
                    }
                }
            }
            _ => plain.push((i, name.to_string())),
        }
    }
    let mut written = groups.into_iter().map(|((prefix, width), mut nums)| {
        nums.sort_unstable();
        nums.dedup();
        let num = |n: u64| format!("{n:0width$}");
        if nums.len() == 1 {
            return format!("{prefix}{}", num(nums[0]));
        }
        let mut ranges: Vec<String> = Vec::new();
        let mut start = nums[0];
        for w in nums.windows(2) {
            if w[1] != w[0] + 1 {
                ranges.push(range(start, w[0], &num));
                start = w[1];
            }
        }
        ranges.push(range(start, *nums.last().expect("not empty"), &num));
        format!("{prefix}[{}]", ranges.join(","))
    });
    // Groups take the place of their first member.
    plain
        .into_iter()
        .map(|(_, name)| {
            if name.is_empty() {
                written.next().unwrap_or_default()
            } else {
                name
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn range(a: u64, b: u64, num: &dyn Fn(u64) -> String) -> String {
    if a == b {
        num(a)
    } else {
        format!("{}-{}", num(a), num(b))
    }
}

/// Splits at commas outside brackets.
fn split_top(list: &str) -> Result<Vec<&str>, ()> {
    let (mut depth, mut start, mut parts) = (0i32, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(());
        }
    }
    if depth != 0 {
        return Err(());
    }
    parts.push(&list[start..]);
    Ok(parts)
}

/// One item: literal text and `[ranges]` groups, in turn.
fn parse_item(list: &str, item: &str) -> Result<Vec<Part>, HostlistError> {
    let mut parts = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| HostlistError::Brackets(list.into()))?;
        if open > 0 {
            parts.push(Part::Text(rest[..open].to_string()));
        }
        let mut ranges = Vec::new();
        for range in rest[open + 1..close].split(',') {
            let bad = || HostlistError::Range {
                list: list.into(),
                range: range.into(),
            };
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            if lo.is_empty() || !lo.bytes().chain(hi.bytes()).all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let (a, b): (u64, u64) = (
                lo.parse().map_err(|_| bad())?,
                hi.parse().map_err(|_| bad())?,
            );
            if b < a {
                return Err(bad());
            }
            if (b - a) as usize >= MAX_HOSTS {
                return Err(HostlistError::TooMany(list.into()));
            }
            ranges.push((a, b, lo.len()));
        }
        parts.push(Part::Numbers(ranges));
        rest = &rest[close + 1..];
    }
    if rest.contains(']') {
        return Err(HostlistError::Brackets(list.into()));
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_string()));
    }
    Ok(parts)
}

/// One item's names, each bracket group expanded in turn.
fn expand_item(list: &str, item: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = vec![String::new()];
    for part in parse_item(list, item)? {
        out = match part {
            Part::Text(t) => out.into_iter().map(|o| o + &t).collect(),
            Part::Numbers(ranges) => {
                let mut next = Vec::new();
                for o in &out {
                    for &(a, b, w) in &ranges {
                        for n in a..=b {
                            next.push(format!("{o}{n:0w$}"));
                            if next.len() > MAX_HOSTS {
                                return Err(HostlistError::TooMany(list.into()));
                            }
                        }
                    }
                }
                next
            }
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand_as_slurm_writes_them() {
        assert_eq!(expand("n1").unwrap(), ["n1"]);
        assert_eq!(expand("n1,n2").unwrap(), ["n1", "n2"]);
        assert_eq!(expand("n[1-3]").unwrap(), ["n1", "n2", "n3"]);
        assert_eq!(expand("gpu[09-11]").unwrap(), ["gpu09", "gpu10", "gpu11"]);
        assert_eq!(expand("n[1,3-4],m").unwrap(), ["n1", "n3", "n4", "m"]);
        assert_eq!(
            expand("r[1-2]-n[1,3]").unwrap(),
            ["r1-n1", "r1-n3", "r2-n1", "r2-n3"]
        );
        assert_eq!(expand("n1,n1").unwrap(), ["n1"], "no repeats");
    }

    #[test]
    fn hostlists_are_written_compressed_and_read_back() {
        assert_eq!(compress(&["n1", "n2", "n3", "m"]), "n[1-3],m");
        assert_eq!(compress(&["gpu01", "gpu02", "gpu04"]), "gpu[01-02,04]");
        assert_eq!(compress(&["n9", "n10"]), "n[9-10]");
        assert_eq!(compress(&["n3", "n1"]), "n[1,3]");
        assert_eq!(compress(&["login", "n1"]), "login,n1");
        assert_eq!(compress::<&str>(&[]), "");
        for list in ["n[1-3],m", "gpu[01-02,04]", "a,b[7-9]"] {
            assert_eq!(compress(&expand(list).unwrap()), list);
        }
    }

    #[test]
    fn a_read_hostlist_names_what_it_would_expand_to() {
        for list in ["n[1-3],m", "gpu[09-11]", "r[1-2]-n[1,3]", "n[9-10]", "a1b"] {
            let h = Hostlist::parse(list).unwrap();
            for name in expand(list).unwrap() {
                assert!(h.contains(&name), "{list}: {name}");
            }
        }
        let h = Hostlist::parse("gpu[09-11],n[1-60000]").unwrap();
        assert!(h.contains("gpu10") && h.contains("n59999"));
        assert!(!h.contains("gpu9") && !h.contains("gpu12") && !h.contains("n0"));
        assert!(!h.contains("n60001") && !h.contains("n1x") && !h.contains("m"));
        assert_eq!(
            Hostlist::parse("n[1-40000],m[1-40000]"),
            Err(HostlistError::TooMany("n[1-40000],m[1-40000]".into()))
        );
        assert!(Hostlist::parse("n[1-3").is_err() && Hostlist::parse("n1,,m").is_err());
    }

    #[test]
    fn bad_hostlists_are_refused_with_the_reason() {
        assert_eq!(
            expand("n[1-3"),
            Err(HostlistError::Brackets("n[1-3".into()))
        );
        assert_eq!(expand("n]1["), Err(HostlistError::Brackets("n]1[".into())));
        assert!(matches!(expand("n[3-1]"), Err(HostlistError::Range { .. })));
        assert!(matches!(expand("n[a]"), Err(HostlistError::Range { .. })));
        assert!(matches!(expand("n[]"), Err(HostlistError::Range { .. })));
        assert_eq!(expand("n1,,n2"), Err(HostlistError::Empty("n1,,n2".into())));
        assert_eq!(
            expand("n[1-99999999]"),
            Err(HostlistError::TooMany("n[1-99999999]".into()))
        );
        assert!(matches!(
            expand("a[1-300]b[1-300]"),
            Err(HostlistError::TooMany(_))
        ));
    }
}
