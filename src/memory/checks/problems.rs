//! The problems of one write, and the bound on how many one answer names.
//!
//! A record can hold as many faults as it has values: `{"pwd": [0, 0, …]}` is one secret per
//! element, an object of unknown fields one problem per key. Naming each once cost a 300 KB
//! record a 15 MB answer. A write keeps the first `MAX_PROBLEMS` and counts the rest in a last
//! problem ("… and N more"): enough to fix a record in one go in every real case, and an answer
//! whose size does not grow with the input.

use serde::Serialize;

/// Problems one answer names; past this many the rest are counted.
pub const MAX_PROBLEMS: usize = 100;

/// One thing wrong with a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub path: String,
    pub kind: String,
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, kind: &str, message: impl Into<String>) -> Problem {
        Problem { path: path.into(), kind: kind.to_owned(), message: message.into() }
    }
}

/// The problems found so far: the first `MAX_PROBLEMS` kept, the rest counted.
#[derive(Debug, Default)]
pub struct Problems {
    kept: Vec<Problem>,
    more: usize,
}

impl Problems {
    pub fn push(&mut self, problem: Problem) {
        if self.kept.len() < MAX_PROBLEMS {
            self.kept.push(problem);
        } else {
            self.more += 1;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The kept problems, to rewrite in place (redacting secret keys from their paths).
    pub fn kept_mut(&mut self) -> &mut [Problem] {
        &mut self.kept
    }

    /// The kept problems, and a last one that counts the others when there were more.
    pub fn into_vec(self) -> Vec<Problem> {
        let mut list = self.kept;
        if self.more > 0 {
            list.push(Problem::new(
                "$",
                "too_many_problems",
                format!(
                    "… and {} more problems, not listed; fix the {MAX_PROBLEMS} above and write again to see the rest",
                    self.more
                ),
            ));
        }
        list
    }
}

impl Extend<Problem> for Problems {
    fn extend<I: IntoIterator<Item = Problem>>(&mut self, problems: I) {
        for problem in problems {
            self.push(problem);
        }
    }
}

impl FromIterator<Problem> for Problems {
    fn from_iter<I: IntoIterator<Item = Problem>>(problems: I) -> Problems {
        let mut all = Problems::default();
        all.extend(problems);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_problems_are_counted_not_kept() {
        let problems: Problems =
            (0..MAX_PROBLEMS + 7).map(|i| Problem::new(format!("$.a[{i}]"), "secret", "s")).collect();
        let list = problems.into_vec();
        assert_eq!(list.len(), MAX_PROBLEMS + 1);
        assert_eq!(list[MAX_PROBLEMS - 1].path, format!("$.a[{}]", MAX_PROBLEMS - 1));
        let last = &list[MAX_PROBLEMS];
        assert_eq!((last.path.as_str(), last.kind.as_str()), ("$", "too_many_problems"));
        assert!(last.message.contains("… and 7 more"), "{}", last.message);
    }

    #[test]
    fn up_to_the_bound_every_problem_is_named() {
        let problems: Problems = (0..MAX_PROBLEMS).map(|_| Problem::new("$", "k", "m")).collect();
        assert_eq!(problems.into_vec().len(), MAX_PROBLEMS);
    }
}
