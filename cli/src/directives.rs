//! `#SBATCH` and `#GSCHED` directives in batch scripts.
//!
//! As in sbatch: directives are read from the lines before the first command
//! (blank lines and other comments may come between them); each may carry
//! several options; single and double quotes and backslash escapes work as in
//! the shell; an unquoted `#` starts a comment.

/// A directive line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("script line {line}: {why}")]
pub struct DirectiveError {
    pub line: usize,
    pub why: String,
}

/// Options found in a script's directives, each with its 1-based line.
pub fn extract(script: &str) -> Result<Vec<(usize, Vec<String>)>, DirectiveError> {
    let mut out = Vec::new();
    for (i, line) in script.lines().enumerate() {
        let n = i + 1;
        if n == 1 && line.starts_with("#!") {
            continue;
        }
        let trimmed = line.trim();
        let rest = ["#SBATCH", "#SLURM", "#GSCHED"]
            .iter()
            .find_map(|p| line.strip_prefix(p));
        match rest {
            Some(r) if r.is_empty() || r.starts_with(char::is_whitespace) => {
                let words = split(r).map_err(|why| DirectiveError { line: n, why })?;
                if !words.is_empty() {
                    out.push((n, words));
                }
            }
            _ if trimmed.is_empty() || trimmed.starts_with('#') => continue,
            _ => break,
        }
    }
    Ok(out)
}

/// Splits a directive's text into words, shell-style.
pub fn split(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(e) => cur.push(e),
                    None => return Err("a backslash ends the line".into()),
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\' | '$' | '`')) => cur.push(x),
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(x) => cur.push(x),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn splits_like_sbatch() {
        assert_eq!(
            split(" -J x  -o out-%j.txt").unwrap(),
            w(&["-J", "x", "-o", "out-%j.txt"])
        );
        assert_eq!(
            split(" --job-name='a b' # comment").unwrap(),
            w(&["--job-name=a b"])
        );
        assert_eq!(
            split(r#" -J "q\"x" -o a\ b"#).unwrap(),
            w(&["-J", "q\"x", "-o", "a b"])
        );
        assert_eq!(split(" -J a#b").unwrap(), w(&["-J", "a#b"]));
        assert_eq!(split(" ''").unwrap(), w(&[""]));
        assert!(split(" -J 'open").is_err());
        assert!(split(" -J \"open").is_err());
    }

    #[test]
    fn stops_at_the_first_command() {
        let script = "#!/bin/bash\n#SBATCH -J x\n\n# note\n#SBATCH -o out-%j.txt # c\n#GSCHED --gpu-mem 4G\necho hi\n#SBATCH -J late\n";
        let d = extract(script).unwrap();
        assert_eq!(
            d,
            vec![
                (2, w(&["-J", "x"])),
                (5, w(&["-o", "out-%j.txt"])),
                (6, w(&["--gpu-mem", "4G"])),
            ]
        );
        assert_eq!(
            extract("#!/bin/sh\n#SBATCHX -J y\n#SBATCH\n").unwrap(),
            vec![]
        );
        let e = extract("#!/bin/sh\n#SBATCH -J 'x\n").unwrap_err();
        assert_eq!(e.to_string(), "script line 2: unterminated single quote");
    }
}
