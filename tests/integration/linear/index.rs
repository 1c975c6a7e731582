//! The index's lookups in linear time: taking every record of one scope out (forgetting it,
//! undoing the import that brought it) costs the same per record however many records the
//! scope holds. `public` lists every knowledge-base article of a tenant, and an exact term
//! every record that names it; a removal that searched such a list for its record cost the
//! list's length, and removing them all its square.

use super::{SMALL_SIZES, assert_linear_at};
use memgate::index::lists::SlotLists;

#[test]
fn taking_every_slot_off_a_long_list_costs_linear_time() {
    // About `n / 64` records, each in `public` and naming one shared term.
    let slots = |n: usize| (0..(n / 64) as u32).collect::<Vec<u32>>();
    assert_linear_at(&SMALL_SIZES, "one scope's records, all taken off", slots, |slots| {
        let mut lists = SlotLists::default();
        for slot in slots {
            lists.list("public", *slot).expect("listed");
            lists.list("returns-policy", *slot).expect("listed");
        }
        // Newest first and oldest first: a search from either end walks the whole list.
        let (older, newer) = slots.split_at(slots.len() / 2);
        for slot in newer.iter().rev().chain(older) {
            lists.unlist_text("public", *slot);
            lists.unlist_text("returns-policy", *slot);
        }
        assert!(lists.is_empty());
    });
}
