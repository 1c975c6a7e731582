//! The cut: where a ranking stops being worth injecting.
//!
//! A fixed item cap gives every question the same number of records: a question with one clear
//! answer gets four unrelated records with it, a broad one is cut short. The cut looks at the
//! scores instead: records are taken best first while their score stays close to the best one's,
//! and the first record that falls well below it ends the block. A clear answer far above the
//! rest comes alone; a question whose records score alike gets several, up to the budget.
//!
//! Three rules, each optional, calibrated per model on the project's data (docs/benchmarks.md,
//! "Retrieval"):
//! - `relative`: keep a record while its score is at least `relative × best` (scores are the
//!   similarity, or the fused score of a hybrid release; with language centering they sit
//!   between 0 and ~2);
//! - `gap`: keep a record while its score is at most `gap` below the best;
//! - `drop`: stop at the first record scoring more than `drop` below the record ranked just
//!   before it: a clear answer stands above the rest by a step, while the records of a broad
//!   question decline smoothly, so the step, not the distance to the best, marks the end.
//!
//! With several, a record must satisfy each. Exact matches (a key, alias or identifier the query
//! names) are always kept and do not count as the best: they carry no score to compare with.

/// A release's cut (`[releases.<name>] cut_relative`, `cut_gap`). `Cut::OFF` keeps every
/// record the gate passed, as releases before the cut did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cut {
    /// Keep records scoring at least this share of the best score (0 < relative ≤ 1).
    pub relative: Option<f32>,
    /// Keep records scoring at most this far below the best score.
    pub gap: Option<f32>,
    /// Stop at a record scoring more than this below the one before it.
    pub drop: Option<f32>,
}

impl Cut {
    pub const OFF: Cut = Cut { relative: None, gap: None, drop: None };

    pub fn is_off(&self) -> bool {
        self.relative.is_none() && self.gap.is_none() && self.drop.is_none()
    }

    /// Whether a record scoring `score` ends the block after one scoring `previous`.
    pub fn steps_down(&self, previous: f32, score: f32) -> bool {
        self.drop.is_some_and(|drop| previous - score > drop)
    }

    /// The lowest score still kept when the best record scores `best`. For a best score at or
    /// below zero (words alone passing a record of opposite meaning) the relative rule measures
    /// the share from the best's magnitude, so the floor stays at or below the best.
    pub fn floor(&self, best: f32) -> f32 {
        let mut floor = f32::NEG_INFINITY;
        if let Some(relative) = self.relative {
            floor = floor.max(best - (1.0 - relative) * best.abs());
        }
        if let Some(gap) = self.gap {
            floor = floor.max(best - gap);
        }
        floor
    }
}

impl Default for Cut {
    fn default() -> Cut {
        Cut::OFF
    }
}

#[cfg(test)]
mod tests {
    use super::Cut;

    #[test]
    fn off_keeps_everything() {
        assert_eq!(Cut::OFF.floor(0.9), f32::NEG_INFINITY);
        assert!(Cut::OFF.is_off());
    }

    #[test]
    fn relative_and_gap_floors_and_their_combination() {
        let relative = Cut { relative: Some(0.5), ..Cut::OFF };
        assert!((relative.floor(0.8) - 0.4).abs() < 1e-6);
        let gap = Cut { gap: Some(0.3), ..Cut::OFF };
        assert!((gap.floor(0.8) - 0.5).abs() < 1e-6);
        // Both: the stricter floor.
        let both = Cut { relative: Some(0.5), gap: Some(0.3), drop: None };
        assert!((both.floor(0.8) - 0.5).abs() < 1e-6);
        assert!((both.floor(2.0) - 1.7).abs() < 1e-6);
        // A best at or below zero: the floor stays below the best.
        assert!(relative.floor(-0.2) <= -0.2);
        assert!(relative.floor(0.0) <= 0.0);
    }

    #[test]
    fn a_step_down_ends_the_block() {
        let drop = Cut { drop: Some(0.1), ..Cut::OFF };
        assert!(drop.steps_down(0.6, 0.45));
        assert!(!drop.steps_down(0.6, 0.55));
        assert!(!Cut::OFF.steps_down(0.9, 0.1));
        assert_eq!(drop.floor(0.6), f32::NEG_INFINITY);
    }
}
