//! Texts by id: each text kept once, back to back in one buffer, and found by a table of ids.
//! What a tenant's index names by text (its scopes, exact terms and lexical words) sits here.
//!
//! At a million customer profiles, most of those texts belong to one record each (its `user:`
//! scope, key, email, order number, name). Kept as a `Box<str>` or `Arc<str>` per text, with a
//! map entry holding it, each cost an allocation of its own beside the entry; here a text costs
//! its bytes, an 8-byte span and the table's 4-byte id. Text that a removed id leaves behind is
//! reclaimed by compacting the buffer once it is at least half waste, so the buffer stays within
//! twice what the live texts need. Ids are reused; an id's owner keeps what it lists by id in
//! its own arrays (`Vec`s indexed by id).

use std::hash::{BuildHasher, RandomState};

/// Waste below this many bytes is not worth a compaction.
const COMPACT_AT_LEAST: usize = 64 * 1024;

/// Where an id's text sits in `TextIds::text`; `start == FREE` for a free id.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
}

const FREE: u32 = u32::MAX;

#[derive(Default)]
pub struct TextIds {
    /// Ids, hashed (with `hasher`) by their text.
    ids: hashbrown::HashTable<u32>,
    hasher: RandomState,
    /// Every live id's text, back to back, with the waste of removed ones until compacted.
    text: String,
    /// Id → its text in `text`.
    spans: Vec<Span>,
    /// Ids whose text went, for reuse.
    free: Vec<u32>,
    /// Bytes of `text` that no live id uses.
    waste: usize,
}

fn text_of<'a>(text: &'a str, spans: &[Span], id: u32) -> &'a str {
    match spans.get(id as usize) {
        Some(span) if span.start != FREE => &text[span.start as usize..(span.start + span.len) as usize],
        _ => "",
    }
}

impl TextIds {
    /// The id of `text`, if it has one.
    pub fn get(&self, text: &str) -> Option<u32> {
        self.find(self.hasher.hash_one(text), text)
    }

    fn find(&self, hash: u64, text: &str) -> Option<u32> {
        let (all, spans) = (&self.text, &self.spans);
        self.ids.find(hash, |id| text_of(all, spans, *id) == text).copied()
    }

    /// The text of `id` (empty for a free one).
    pub fn text(&self, id: u32) -> &str {
        text_of(&self.text, &self.spans, id)
    }

    /// How many ids are live.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// One past the largest id ever given: the length an owner's arrays by id need.
    pub fn bound(&self) -> usize {
        self.spans.len()
    }

    /// Every live id with its text, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> {
        (0..self.spans.len() as u32)
            .filter(|id| self.spans[*id as usize].start != FREE)
            .map(|id| (id, self.text(id)))
    }

    /// The id of `text`, given one if it has none: a free id (its owner resets what it keeps for
    /// it) or `bound()` (its owner grows its arrays). `None` when the buffer cannot address more
    /// text (4 GiB) or ids run out.
    pub fn intern(&mut self, text: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(text);
        if let Some(id) = self.find(hash, text) {
            return Some(id);
        }
        if u32::try_from(self.text.len() + text.len()).is_err() {
            self.compact();
        }
        let start = u32::try_from(self.text.len()).ok().filter(|start| *start != FREE)?;
        let len = u32::try_from(text.len()).ok().filter(|len| start.checked_add(*len).is_some())?;
        let span = Span { start, len };
        let id = match self.free.pop() {
            Some(id) => {
                self.spans[id as usize] = span;
                id
            }
            None => {
                let id = u32::try_from(self.spans.len()).ok()?;
                self.spans.push(span);
                id
            }
        };
        self.text.push_str(text);
        let (hasher, all, spans) = (&self.hasher, &self.text, &self.spans);
        self.ids.insert_unique(hash, id, |id| hasher.hash_one(text_of(all, spans, *id)));
        Some(id)
    }

    /// Frees `id`: its text is no longer found, and the id goes to the next new text.
    pub fn remove(&mut self, id: u32) {
        let Some(span) = self.spans.get(id as usize).copied().filter(|span| span.start != FREE) else {
            return;
        };
        let hash = self.hasher.hash_one(self.text(id));
        if let Ok(entry) = self.ids.find_entry(hash, |other| *other == id) {
            entry.remove();
        }
        self.waste += span.len as usize;
        self.spans[id as usize] = Span { start: FREE, len: 0 };
        self.free.push(id);
        if self.waste >= COMPACT_AT_LEAST && 2 * self.waste >= self.text.len() {
            self.compact();
        }
    }

    /// Rewrites `text` with the live ids' texts only. The ids, and so the table's hashes and
    /// whatever owners keep by id, stay as they are.
    fn compact(&mut self) {
        let mut text = String::with_capacity(self.text.len() - self.waste);
        for span in self.spans.iter_mut().filter(|span| span.start != FREE) {
            let start = text.len() as u32;
            text.push_str(&self.text[span.start as usize..(span.start + span.len) as usize]);
            span.start = start;
        }
        self.text = text;
        self.waste = 0;
    }

    /// Bytes held (capacities).
    pub fn heap_bytes(&self) -> usize {
        self.ids.capacity() * (4 + 1)
            + self.text.capacity()
            + self.spans.capacity() * 8
            + self.free.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Any sequence of interning and removal keeps one id a live text, finds each live text
        /// by it and no removed one, and reuses freed ids.
        #[test]
        fn ids_find_their_texts_through_removals_and_reuse(ops in proptest::collection::vec((any::<bool>(), 0u8..8), 1..200)) {
            let mut texts = TextIds::default();
            let mut model: BTreeMap<String, u32> = BTreeMap::new();
            for (add, n) in ops {
                let text = format!("text-{n}");
                if add {
                    let id = texts.intern(&text).expect("interned");
                    prop_assert_eq!(*model.entry(text.clone()).or_insert(id), id);
                } else if let Some(id) = model.remove(&text) {
                    texts.remove(id);
                }
                for n in 0..8u8 {
                    let text = format!("text-{n}");
                    prop_assert_eq!(texts.get(&text), model.get(&text).copied());
                }
                for (text, id) in &model {
                    prop_assert_eq!(texts.text(*id), text.as_str());
                }
                prop_assert_eq!(texts.len(), model.len());
                prop_assert!(texts.bound() <= 8, "freed ids are reused: {}", texts.bound());
                prop_assert_eq!(texts.iter().count(), model.len());
            }
        }
    }

    #[test]
    fn the_text_of_removed_ids_is_reclaimed_and_the_rest_still_found() {
        let mut texts = TextIds::default();
        let all: Vec<(String, u32)> = (0..20_000)
            .map(|i| {
                let text = format!("customer:u-{i}:profile");
                let id = texts.intern(&text).expect("interned");
                (text, id)
            })
            .collect();
        let full = texts.text.len();
        for (i, (_, id)) in all.iter().enumerate() {
            if i % 10 != 0 {
                texts.remove(*id);
            }
        }
        assert!(texts.text.len() < full / 2, "compacted: {} of {full} bytes", texts.text.len());
        for (i, (text, id)) in all.iter().enumerate() {
            let expected = (i % 10 == 0).then_some(*id);
            assert_eq!(texts.get(text), expected, "{text}");
            if i % 10 == 0 {
                assert_eq!(texts.text(*id), text.as_str());
            }
        }
        assert_eq!(texts.len(), 2_000);
    }
}
