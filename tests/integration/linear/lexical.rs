//! The lexical index in linear time: taking records out costs the same per record however many
//! other records share their words. Every customer profile of a tenant holds the same few common
//! words, so each of those words' posting lists holds every profile; a removal that searched the
//! list for its record cost the tenant's size, and removing many (undoing an import, purging a
//! tenant, updating every profile) cost its square.

use super::{SMALL_SIZES, assert_linear_at};
use memgate::lexical::bm25::LexicalIndex;

/// About `n / 64` records (64 bytes each), every one with the same common words and a name and
/// order number of its own.
fn profiles(n: usize) -> Vec<String> {
    (0..n / 64).map(|i| format!("customer {i} order #{} shipped to the city", 4_000_000 + i)).collect()
}

#[test]
fn removing_every_record_costs_linear_time_in_the_records() {
    assert_linear_at(&SMALL_SIZES, "records sharing their common words, all removed", profiles, |texts| {
        let mut index = LexicalIndex::default();
        for (slot, text) in texts.iter().enumerate() {
            index.upsert(slot as u32, text);
        }
        // Oldest first: a search from the front of each list walks past every posting moved
        // into the holes of the removals before it.
        for slot in 0..texts.len() as u32 {
            index.remove(slot);
        }
        assert_eq!(index.len(), 0);
    });
}
