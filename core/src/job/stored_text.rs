//! A job's script and environment leave the controller's memory once its
//! submission is in the store: they are what a user chooses the size of,
//! and a controller holding thousands of pending jobs must not hold their
//! megabytes as well. What the scheduler decides from them stays as a
//! [`StoredText`] summary; the text comes back from the store when the
//! job is launched or its script is asked for.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Job;

/// A job's script and environment, as the store keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobText {
    pub script: String,
    pub environment: BTreeMap<String, String>,
}

/// What the controller keeps in memory of a job's text that lives in the
/// store only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredText {
    /// Bytes of script and environment, as [`super::JobSpec::held_bytes`]
    /// counted them.
    pub bytes: usize,
    /// A hash of the script, which footprint learning matches runs by.
    pub script_hash: u64,
    /// The environment turned the interception off (`GSCHED_INTERCEPT=0`).
    pub intercept_off: bool,
}

/// Whether a job's environment turns the interception off
/// (`GSCHED_INTERCEPT=0`).
pub fn intercept_off(env: &BTreeMap<String, String>) -> bool {
    env.get("GSCHED_INTERCEPT").is_some_and(|v| v == "0")
}

/// A hash of a script that is the same for the same text within one
/// process (footprints are matched in memory only, never by a stored hash).
pub fn script_hash(script: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    script.hash(&mut h);
    h.finish()
}

impl Job {
    /// Moves the job's script and environment out of it, leaving their
    /// summary; `None` when they already left.
    pub fn take_text(&mut self) -> Option<JobText> {
        if self.stored_text.is_some() {
            return None;
        }
        let bytes = self.spec.held_bytes() - self.spec.argument_bytes();
        let summary = StoredText {
            bytes,
            script_hash: script_hash(&self.spec.script),
            intercept_off: intercept_off(&self.spec.environment),
        };
        self.stored_text = Some(summary);
        Some(JobText {
            script: std::mem::take(&mut self.spec.script),
            environment: std::mem::take(&mut self.spec.environment),
        })
    }

    /// Gives the job its script and environment back (from the store).
    pub fn put_text(&mut self, text: JobText) {
        self.spec.script = text.script;
        self.spec.environment = text.environment;
        self.stored_text = None;
    }

    /// Whether the job's script and environment are in the store only.
    pub fn text_in_store(&self) -> bool {
        self.stored_text.is_some()
    }

    /// The bytes of script, environment and arguments the job came with
    /// (what the per-user byte cap counts), wherever its text is now.
    pub fn held_bytes(&self) -> usize {
        match &self.stored_text {
            Some(s) => s.bytes + self.spec.argument_bytes(),
            None => self.spec.held_bytes(),
        }
    }

    /// The hash of the job's script.
    pub fn script_hash(&self) -> u64 {
        match &self.stored_text {
            Some(s) => s.script_hash,
            None => script_hash(&self.spec.script),
        }
    }

    /// Whether the job's environment turns the interception off.
    pub fn intercept_off(&self) -> bool {
        match &self.stored_text {
            Some(s) => s.intercept_off,
            None => intercept_off(&self.spec.environment),
        }
    }

    /// Whether the two jobs have the same script: compared in full where
    /// both have it at hand, by hash otherwise.
    pub fn same_script(&self, other: &Job) -> bool {
        if self.text_in_store() || other.text_in_store() {
            self.script_hash() == other.script_hash()
        } else {
            self.spec.script == other.spec.script
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        let mut s = crate::job::tests::spec();
        s.environment.insert("GSCHED_INTERCEPT".into(), "0".into());
        s.environment.insert("HOME".into(), "/home/alice".into());
        s.argv = vec!["one".into()];
        Job::new(7, s, 0)
    }

    #[test]
    fn the_summary_answers_as_the_text_did_and_the_text_comes_back_whole() {
        let mut j = job();
        let before = (j.held_bytes(), j.script_hash(), j.intercept_off());
        assert!(before.2);
        let kept = j.clone();
        let text = j.take_text().expect("the text was in memory");
        assert!(j.spec.script.is_empty() && j.spec.environment.is_empty());
        assert!(j.text_in_store());
        assert_eq!((j.held_bytes(), j.script_hash(), j.intercept_off()), before);
        assert!(j.same_script(&kept) && kept.same_script(&j));
        assert_eq!(j.take_text(), None, "taken once");
        j.put_text(text);
        assert_eq!(j, kept);
    }

    #[test]
    fn different_scripts_differ_with_or_without_their_text() {
        let a = job();
        let mut b = job();
        b.spec.script.push_str("echo more\n");
        assert!(!a.same_script(&b));
        let mut shed = b.clone();
        shed.take_text();
        assert!(!a.same_script(&shed));
    }
}
