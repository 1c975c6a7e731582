//! The background: how similar to the question the records a caller may see are, on the whole.
//!
//! A similarity means little alone: 0.25 stands out among a support team's seven articles, most
//! of which score near zero, and is ordinary in a conversation of six hundred turns that all talk
//! about the same two people. So a release may let records pass on meaning only when they stand
//! out (`Lift::standout`): their similarity at least `z` standard deviations above the mean of
//! the caller's candidates. A clear answer then comes alone from a small, varied set, and a broad
//! question over a large, uniform one still gets the records the budget can hold.
//!
//! The mean and spread are estimated from up to `SAMPLE` candidates taken evenly through the
//! caller's candidate set: one int8 dot product each, the same whatever the tenant's size (256
//! give LoCoMo's figures to the third decimal, docs/benchmarks.md "Retrieval"). With fewer than
//! `MIN_SAMPLE` embedded candidates there is no background to stand out from, and the release's
//! similarity threshold alone decides; with one, the bar is the higher of the standout rule's and
//! its floor (`Standout::floor`), which may sit below the threshold.
//!
//! Only candidates are sampled: records the caller may not see never move its bar.

use crate::index::TenantIndex;
use crate::slots::SlotSet;

/// At most this many candidates are scored for the background.
pub const SAMPLE: usize = 256;
/// Fewer embedded candidates than this: no background (the threshold alone decides).
pub const MIN_SAMPLE: usize = 5;

/// Records of the caller's own subject (`user:<subject>`), and what their similarity gains: a
/// question from a customer is more often about their own order or profile than another record
/// that scores alike.
#[derive(Debug, Clone, Copy)]
pub struct Boost<'a> {
    /// The boosted slots, sorted.
    pub slots: &'a [u32],
    pub amount: f32,
}

impl Boost<'_> {
    pub const NONE: Boost<'static> = Boost { slots: &[], amount: 0.0 };

    /// What `slot`'s similarity gains.
    pub fn of(&self, slot: u32) -> f32 {
        if self.amount != 0.0 && self.slots.binary_search(&slot).is_ok() { self.amount } else { 0.0 }
    }
}

/// A release's standout rule (`cut_standout`, `standout_floor`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standout {
    /// Standard deviations above the mean of the caller's candidates.
    pub z: f32,
    /// The least similarity that may pass by standing out. Where there is no background (fewer
    /// than `MIN_SAMPLE` candidates) the release's threshold decides instead: standing out is
    /// itself evidence, so the floor can sit below the threshold a lone similarity needs.
    pub floor: f32,
}

/// The mean and standard deviation of the sampled candidates' (boosted) similarities.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Background {
    pub mean: f32,
    pub deviation: f32,
}

impl Background {
    /// The similarity a record must reach to stand out by `z` deviations.
    pub fn bar(&self, z: f32) -> f32 {
        self.mean + z * self.deviation
    }
}

/// The background of `candidates` for the query `vector`; `None` below `MIN_SAMPLE`.
pub fn sample(
    index: &TenantIndex,
    candidates: &SlotSet,
    vector: &[f32],
    boost: &Boost<'_>,
) -> Option<Background> {
    let step = (candidates.len() / SAMPLE).max(1);
    let (mut sum, mut squares, mut sampled) = (0.0f64, 0.0f64, 0usize);
    for slot in candidates.iter().step_by(step).take(SAMPLE) {
        let Some(similarity) = index.similarity(slot, vector) else { continue };
        let score = f64::from(similarity + boost.of(slot));
        sum += score;
        squares += score * score;
        sampled += 1;
    }
    if sampled < MIN_SAMPLE {
        return None;
    }
    let mean = sum / sampled as f64;
    let variance = (squares / sampled as f64 - mean * mean).max(0.0);
    Some(Background { mean: mean as f32, deviation: variance.sqrt() as f32 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boost_applies_to_its_slots_alone() {
        let boost = Boost { slots: &[3, 9], amount: 0.1 };
        assert_eq!(boost.of(3), 0.1);
        assert_eq!(boost.of(4), 0.0);
        assert_eq!(Boost::NONE.of(3), 0.0);
        assert_eq!(Boost { slots: &[3], amount: 0.0 }.of(3), 0.0);
    }

    #[test]
    fn the_bar_is_z_deviations_above_the_mean() {
        let bg = Background { mean: 0.1, deviation: 0.05 };
        assert!((bg.bar(1.0) - 0.15).abs() < 1e-6);
        assert!((bg.bar(0.0) - 0.1).abs() < 1e-6);
    }
}
