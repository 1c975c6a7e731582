//! Slots listed under a text: a tenant's records by scope (`TenantIndex::by_scope`) and by exact
//! term (`by_term`: keys, aliases, identifiers, what lets a query that names an order number, an
//! email or a key find its record without a score).
//!
//! Most of those texts belong to one record: a customer profile brings its `user:` scope, its
//! key, its email and its order number. As maps from a `Box<str>` or `Arc<str>` per text to a
//! `SmallVec` of slots, with each record holding its terms' `Arc`s, that cost an allocation per
//! text, a 40-byte entry with the map's spare room, and the record's list of pointers. Here the
//! texts are `TextIds` (one buffer, 4-byte ids), a text's one slot is held as itself in a
//! `u32`, only texts of several slots have a list, and a record keeps its terms' ids (4 bytes
//! each) for its removal.

use crate::texts::TextIds;

/// `SlotLists::slots` holds an id's one slot as itself, a list of several as `MANY | k` (the list
/// is `many[k]`), and a free id as `FREE`. Slots stay below `MANY`: a tenant of 2³¹ records does
/// not fit in memory.
const MANY: u32 = 1 << 31;
const FREE: u32 = u32::MAX;

#[derive(Default)]
pub struct SlotLists {
    texts: TextIds,
    /// Text id → its slot, or where its slots are (`MANY`), or `FREE`.
    slots: Vec<u32>,
    /// The lists of texts with more than one slot; an empty one is free for reuse.
    many: Vec<Vec<u32>>,
    free_many: Vec<u32>,
}

impl SlotLists {
    /// The slots listed under `text` (an exact term normalized as `terms::normalize` gives it).
    pub fn get(&self, text: &str) -> Option<&[u32]> {
        self.texts.get(text).map(|id| self.listed(id))
    }

    /// Every listed text with its slots, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u32])> {
        self.texts.iter().map(|(id, text)| (text, self.listed(id)))
    }

    /// How many distinct texts are listed.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    fn listed(&self, id: u32) -> &[u32] {
        match self.slots[id as usize] {
            FREE => &[],
            many if many & MANY != 0 => &self.many[(many & !MANY) as usize],
            _ => std::slice::from_ref(&self.slots[id as usize]),
        }
    }

    /// Lists `slot` under `text` and gives the text's id, for `unlist`. `None` (not listed) for a
    /// slot of `MANY` or more, or when `TextIds` can take no more text.
    pub fn list(&mut self, text: &str, slot: u32) -> Option<u32> {
        if slot >= MANY {
            return None;
        }
        let id = self.texts.intern(text)?;
        if id as usize == self.slots.len() {
            self.slots.push(FREE);
        }
        if self.slots[id as usize] == FREE {
            self.slots[id as usize] = slot;
            return Some(id);
        }
        self.add(id, slot).then_some(id)
    }

    /// Adds `slot` to the listed id's slots: a second slot makes them a list.
    fn add(&mut self, id: u32, slot: u32) -> bool {
        let held = self.slots[id as usize];
        if held & MANY != 0 {
            self.many[(held & !MANY) as usize].push(slot);
            return true;
        }
        let k = match self.free_many.pop() {
            Some(k) => {
                self.many[k as usize] = vec![held, slot];
                k
            }
            None if self.many.len() < (FREE & !MANY) as usize => {
                self.many.push(vec![held, slot]);
                (self.many.len() - 1) as u32
            }
            None => return false,
        };
        self.slots[id as usize] = MANY | k;
        true
    }

    /// Takes `slot` off the slots of `text`.
    pub fn unlist_text(&mut self, text: &str, slot: u32) {
        if let Some(id) = self.texts.get(text) {
            self.unlist(id, slot);
        }
    }

    /// Takes `slot` off the slots of `id`; the text goes with its last slot.
    pub fn unlist(&mut self, id: u32, slot: u32) {
        let Some(held) = self.slots.get(id as usize).copied() else { return };
        match held {
            FREE => return,
            many if many & MANY != 0 => {
                let k = (many & !MANY) as usize;
                let list = &mut self.many[k];
                list.retain(|s| *s != slot);
                if list.len() > 1 {
                    return;
                }
                let last = list.first().copied();
                self.many[k] = Vec::new();
                self.free_many.push(k as u32);
                if let Some(last) = last {
                    self.slots[id as usize] = last;
                    return;
                }
            }
            one if one != slot => return,
            _ => {}
        }
        self.slots[id as usize] = FREE;
        self.texts.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    proptest! {
        /// Any sequence of listings and removals leaves each text with the slots a plain map
        /// would hold, through one slot becoming several and back, and ids freed and reused.
        #[test]
        fn lists_hold_what_a_map_holds(ops in proptest::collection::vec((any::<bool>(), 0u8..6, 0u32..5), 1..200)) {
            let mut lists = SlotLists::default();
            let mut ids: BTreeMap<String, u32> = BTreeMap::new();
            let mut model: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
            for (add, text, slot) in ops {
                let text = format!("term-{text}");
                let held = model.entry(text.clone()).or_default();
                if add && !held.contains(&slot) {
                    let id = lists.list(&text, slot).expect("listed");
                    prop_assert!(ids.insert(text.clone(), id).is_none_or(|before| before == id || held.is_empty()));
                    held.insert(slot);
                } else if !add && held.remove(&slot) {
                    lists.unlist(ids[&text], slot);
                }
                for (text, held) in &model {
                    prop_assert_eq!(&listed(&lists, text), held, "{}", text);
                }
                let live: BTreeSet<&str> = model.iter().filter(|(_, h)| !h.is_empty()).map(|(t, _)| t.as_str()).collect();
                prop_assert_eq!(lists.iter().map(|(text, _)| text).collect::<BTreeSet<_>>(), live.clone());
                prop_assert_eq!(lists.len(), live.len());
            }
        }
    }

    fn listed(terms: &SlotLists, term: &str) -> BTreeSet<u32> {
        terms.get(term).map(|slots| slots.iter().copied().collect()).unwrap_or_default()
    }

    #[test]
    fn terms_are_found_by_their_text_and_go_with_their_last_slot() {
        let mut terms = SlotLists::default();
        let a = terms.list("ord-1", 1).expect("listed");
        assert_eq!(terms.list("ord-1", 2), Some(a), "one id a term");
        let b = terms.list("bob@example.com", 2).expect("listed");
        assert_eq!(listed(&terms, "ord-1"), BTreeSet::from([1, 2]));
        assert_eq!(terms.len(), 2);
        terms.unlist(a, 1);
        assert_eq!(listed(&terms, "ord-1"), BTreeSet::from([2]));
        terms.unlist(a, 2);
        assert!(terms.get("ord-1").is_none());
        assert_eq!(terms.len(), 1);
        // The freed id serves the next new term, and the old text does not find it.
        assert_eq!(terms.list("sku-9", 3), Some(a));
        assert!(terms.get("ord-1").is_none());
        assert_eq!(listed(&terms, "sku-9"), BTreeSet::from([3]));
        assert_eq!(listed(&terms, "bob@example.com"), BTreeSet::from([2]));
        terms.unlist(b, 2);
        assert_eq!(terms.len(), 1);
    }
}
