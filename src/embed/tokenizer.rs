//! The compact tokenizer of memgate's int8 model: XLM-R's sentencepiece Unigram (the tokenizer of
//! multilingual-e5-small, 250,002 pieces) in about 10 MB instead of about 290 MB.
//!
//! Why: the `tokenizers` crate keeps a Unigram vocabulary as a byte trie with a hash map in every
//! node. For XLM-R's pieces that is ~290 MB resident, three times the int8 model itself, and
//! fastembed clones it once while loading. Nothing else in a memgate process is that large.
//!
//! How, in three steps that together give the ids `tokenizers` gives (the test
//! `compact_tokenizer_matches_tokenizers` compares them on thousands of texts):
//! 1. Words: `tokenizers` itself, with the model's own normalizer (sentencepiece's precompiled
//!    NFKC map, runs of spaces), special tokens and Metaspace pre-tokenizer, but a one-piece
//!    vocabulary. Every character is then unknown, unknowns are fused, so its "model" returns
//!    each pre-tokenized word whole. A special token written in the text comes back as itself.
//! 2. Pieces: the Viterbi search of `tokenizers`' `Unigram::encode_optimized` over each word,
//!    against [`Pieces`]: every piece in one byte buffer, found by an open-addressing hash of its
//!    bytes. Same candidates, same order, same tie-breaking, same fused unknowns.
//! 3. `<s>` … `</s>` from the template of `post_processor`, cut at `max_tokens` as fastembed's
//!    truncation does (the text's tokens are cut, the two markers kept).
//!
//! The ids reach the graph through fastembed as text: [`pairs_text`] writes each id as two
//! numbers (id / 512, id % 512), which a 512-word vocabulary ([`PAIRS_TOKENIZER`]) maps back and
//! the graph recombines (scripts/assets/quantize_e5.py, `"input": "id-pairs-512"`).
//!
//! fastembed does not re-export `tokenizers`, so step 1's tokenizer is reached through the type
//! of `TextEmbedding::tokenizer` ([`Words::parse_like`]) and kept behind a closure.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::EmbedError;

/// Ids travel to the graph as `(id / ID_BASE, id % ID_BASE)`.
pub(super) const ID_BASE: u32 = 512;
/// What `tokenizers` charges an unknown character, below the lowest piece score.
const UNK_PENALTY: f64 = 10.0;
/// The one piece of the word splitter's vocabulary (so that it never matches real text).
const WORD_PIECE: &str = "<memgate:whole-word>";

/// The fastembed-side tokenizer for `id-pairs-512` graphs: the words `0` … `511`, split on spaces.
pub(super) fn pairs_tokenizer_json() -> String {
    let vocab: Vec<String> = (0..ID_BASE).map(|i| format!("\"{i}\":{i}")).collect();
    format!(
        r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{{"type":"WhitespaceSplit"}},"post_processor":null,"decoder":null,"model":{{"type":"WordLevel","vocab":{{{}}},"unk_token":"0"}}}}"#,
        vocab.join(",")
    )
}

/// `ids` as the text fastembed hands to [`pairs_tokenizer_json`]'s tokenizer.
pub(super) fn pairs_text(ids: &[u32]) -> String {
    let mut text = String::with_capacity(ids.len() * 8);
    for id in ids {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&(id / ID_BASE).to_string());
        text.push(' ');
        text.push_str(&(id % ID_BASE).to_string());
    }
    text
}

/// The parts of a Unigram `tokenizer.json` this tokenizer reads; the 250k pieces are borrowed
/// from the file's bytes where they need no unescaping.
#[derive(Deserialize)]
struct TokenizerJson<'a> {
    #[serde(borrow)]
    added_tokens: &'a RawValue,
    #[serde(borrow)]
    normalizer: &'a RawValue,
    #[serde(borrow)]
    pre_tokenizer: &'a RawValue,
    #[serde(borrow)]
    post_processor: Template<'a>,
    #[serde(borrow)]
    model: UnigramJson<'a>,
}

#[derive(Deserialize)]
struct UnigramJson<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    unk_id: Option<u32>,
    #[serde(default)]
    byte_fallback: bool,
    #[serde(borrow)]
    vocab: Vec<(Cow<'a, str>, f64)>,
}

#[derive(Deserialize)]
struct AddedToken<'a> {
    id: u32,
    #[serde(borrow)]
    content: Cow<'a, str>,
}

/// A `TemplateProcessing` post-processor: its single-sequence template and the ids of its specials.
#[derive(Deserialize)]
struct Template<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    single: Vec<TemplatePart<'a>>,
    #[serde(borrow)]
    special_tokens: HashMap<Cow<'a, str>, TemplateSpecial>,
}

#[derive(Deserialize)]
enum TemplatePart<'a> {
    SpecialToken {
        #[serde(borrow)]
        id: Cow<'a, str>,
    },
    Sequence {},
}

#[derive(Deserialize)]
struct TemplateSpecial {
    ids: Vec<u32>,
}

/// A pre-tokenized piece of the text: a word for the Unigram search, or a special token.
pub(super) enum Word {
    Text(String),
    Special(u32),
}

/// Step 1: normalizes and pre-tokenizes a text into [`Word`]s.
pub(super) type WordSplitter = Box<dyn Fn(&str) -> Result<Vec<Word>, String> + Send + Sync>;

/// The compact Unigram tokenizer.
pub(super) struct Tokenizer {
    words: WordSplitter,
    pieces: Pieces,
    unk_id: u32,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
    max_tokens: usize,
}

/// What [`Tokenizer::parse`] hands back: the piece table and the JSON of the word splitter, which
/// the caller turns into a `tokenizers` tokenizer (see the module comment) for [`Tokenizer::new`].
pub(super) struct Parsed {
    pieces: Pieces,
    unk_id: u32,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
    /// Special tokens by their text, as the word splitter returns them.
    specials: HashMap<String, u32>,
    /// A tokenizer.json with the model's normalizer, specials and pre-tokenizer and one piece.
    pub(super) splitter_json: String,
}

impl Tokenizer {
    /// Reads a Unigram `tokenizer.json` (sentencepiece-style: precompiled normalizer, Metaspace,
    /// `TemplateProcessing`).
    pub(super) fn parse(tokenizer_json: &[u8]) -> Result<Parsed, EmbedError> {
        let bad = |why: String| EmbedError::Model(format!("tokenizer.json: {why}"));
        let json: TokenizerJson<'_> =
            serde_json::from_slice(tokenizer_json).map_err(|e| bad(e.to_string()))?;
        let model = json.model;
        if model.kind != "Unigram" || model.byte_fallback {
            return Err(bad(format!(
                "the compact tokenizer reads Unigram models without byte fallback, not {}{}",
                model.kind,
                if model.byte_fallback { " with byte fallback" } else { "" }
            )));
        }
        let unk_id = model.unk_id.ok_or_else(|| bad("the Unigram model has no unk_id".into()))?;
        if unk_id as usize >= model.vocab.len() {
            return Err(bad(format!("unk_id {unk_id} is outside the vocabulary")));
        }
        let pieces = Pieces::new(&model.vocab);
        drop(model.vocab);

        let template = json.post_processor;
        if template.kind != "TemplateProcessing" {
            return Err(bad(format!("post_processor {} (TemplateProcessing expected)", template.kind)));
        }
        let (mut prefix, mut suffix, mut seen_sequence) = (Vec::new(), Vec::new(), false);
        for part in &template.single {
            match part {
                TemplatePart::Sequence {} => seen_sequence = true,
                TemplatePart::SpecialToken { id } => {
                    let ids = &template
                        .special_tokens
                        .get(id)
                        .ok_or_else(|| bad(format!("special token {id} of the template has no ids")))?
                        .ids;
                    if seen_sequence { &mut suffix } else { &mut prefix }.extend(ids);
                }
            }
        }
        let added: Vec<AddedToken<'_>> =
            serde_json::from_str(json.added_tokens.get()).map_err(|e| bad(format!("added_tokens: {e}")))?;
        let specials = added.into_iter().map(|t| (t.content.into_owned(), t.id)).collect();
        let word_piece = serde_json::to_string(WORD_PIECE).map_err(|e| bad(e.to_string()))?;
        let splitter_json = format!(
            r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":{},"normalizer":{},"pre_tokenizer":{},"post_processor":null,"decoder":null,"model":{{"type":"Unigram","unk_id":0,"vocab":[[{},0.0]],"byte_fallback":false}}}}"#,
            json.added_tokens.get(),
            json.normalizer.get(),
            json.pre_tokenizer.get(),
            word_piece
        );
        Ok(Parsed { pieces, unk_id, prefix, suffix, specials, splitter_json })
    }

    /// `split` is the word splitter built from `parsed.splitter_json`: it gives the text of every
    /// token with its id in that splitter, where 0 is a word and anything else a special token.
    pub(super) fn new(
        parsed: Parsed,
        split: impl Fn(&str) -> Result<Vec<(u32, String)>, String> + Send + Sync + 'static,
        max_tokens: usize,
    ) -> Result<Tokenizer, EmbedError> {
        let Parsed { pieces, unk_id, prefix, suffix, specials, .. } = parsed;
        if max_tokens <= prefix.len() + suffix.len() {
            return Err(EmbedError::InvalidConfig(format!(
                "max_tokens {max_tokens} leaves no room for text"
            )));
        }
        let words: WordSplitter = Box::new(move |text| {
            let tokens = split(text)?;
            Ok(tokens
                .into_iter()
                .map(|(id, token)| match specials.get(&token) {
                    Some(special) if id != 0 => Word::Special(*special),
                    _ => Word::Text(token),
                })
                .collect())
        });
        Ok(Tokenizer { words, pieces, unk_id, prefix, suffix, max_tokens })
    }

    /// The token ids of `text`, markers included, at most `max_tokens`.
    pub(super) fn encode(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let room = self.max_tokens - self.prefix.len() - self.suffix.len();
        let mut ids = Vec::with_capacity(self.prefix.len() + 16);
        ids.extend(&self.prefix);
        for word in (self.words)(text).map_err(EmbedError::Model)? {
            match word {
                Word::Special(id) => ids.push(id),
                Word::Text(word) => self.pieces.encode_word(&word, self.unk_id, &mut ids),
            }
            if ids.len() >= self.prefix.len() + room {
                break;
            }
        }
        ids.truncate(self.prefix.len() + room);
        ids.extend(&self.suffix);
        Ok(ids)
    }
}

/// Every piece of the vocabulary in one buffer, with its score, found by its bytes.
struct Pieces {
    bytes: Vec<u8>,
    /// Piece `i` is `bytes[ends[i - 1]..ends[i]]` (`ends[-1]` = 0).
    ends: Vec<u32>,
    scores: Vec<f64>,
    /// Open addressing over the FNV-1a hash of a piece: `id + 1`, 0 for empty. A text that
    /// appears twice keeps its last id, as `tokenizers`' map does.
    slots: Vec<u32>,
    /// The longest piece, in bytes: no match can be longer.
    longest: usize,
    min_score: f64,
}

impl Pieces {
    fn new(vocab: &[(Cow<'_, str>, f64)]) -> Pieces {
        let total: usize = vocab.iter().map(|(p, _)| p.len()).sum();
        let mut pieces = Pieces {
            bytes: Vec::with_capacity(total),
            ends: Vec::with_capacity(vocab.len()),
            scores: Vec::with_capacity(vocab.len()),
            slots: vec![0; (vocab.len() * 2).next_power_of_two().max(2)],
            longest: 0,
            min_score: f64::INFINITY,
        };
        for (id, (piece, score)) in vocab.iter().enumerate() {
            pieces.bytes.extend_from_slice(piece.as_bytes());
            pieces.ends.push(pieces.bytes.len() as u32);
            pieces.scores.push(*score);
            pieces.longest = pieces.longest.max(piece.len());
            pieces.min_score = pieces.min_score.min(*score);
            let slot = pieces.slot_of(piece.as_bytes());
            pieces.slots[slot] = id as u32 + 1;
        }
        pieces
    }

    fn piece(&self, id: usize) -> &[u8] {
        let start = if id == 0 { 0 } else { self.ends[id - 1] as usize };
        &self.bytes[start..self.ends[id] as usize]
    }

    /// The slot that holds `bytes`, or the empty slot where it would go.
    fn slot_of(&self, bytes: &[u8]) -> usize {
        let mask = self.slots.len() - 1;
        let mut slot = fnv1a(bytes) as usize & mask;
        loop {
            match self.slots[slot] {
                0 => return slot,
                id if self.piece(id as usize - 1) == bytes => return slot,
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    fn id_of(&self, bytes: &[u8]) -> Option<u32> {
        match self.slots[self.slot_of(bytes)] {
            0 => None,
            id => Some(id - 1),
        }
    }

    /// The best segmentation of one word (sentencepiece's Viterbi, as `tokenizers` runs it),
    /// appended to `out`; runs of unknown characters become one `unk_id`.
    fn encode_word(&self, word: &str, unk_id: u32, out: &mut Vec<u32>) {
        const UNSET: usize = usize::MAX;
        #[derive(Clone, Copy)]
        struct Best {
            id: u32,
            score: f64,
            starts_at: usize,
        }
        let size = word.len();
        if size == 0 {
            return;
        }
        let bytes = word.as_bytes();
        let unk_score = self.min_score - UNK_PENALTY;
        let mut best = vec![Best { id: 0, score: 0.0, starts_at: UNSET }; size + 1];
        let offer = |best: &mut [Best], end: usize, id: u32, score: f64, start: usize| {
            let target = &mut best[end];
            if target.starts_at == UNSET || score > target.score {
                *target = Best { id, score, starts_at: start };
            }
        };
        for (start, first) in word.char_indices() {
            let here = best[start].score;
            let first_len = first.len_utf8();
            let mut has_single = false;
            let mut end = start;
            for c in word[start..].chars() {
                end += c.len_utf8();
                if end - start > self.longest {
                    break;
                }
                if let Some(id) = self.id_of(&bytes[start..end]) {
                    offer(&mut best, end, id, self.scores[id as usize] + here, start);
                    has_single |= end - start == first_len;
                }
            }
            if !has_single {
                offer(&mut best, start + first_len, unk_id, unk_score + here, start);
            }
        }
        // Back from the end; a run of unknowns is one token, looked up by its text like any other.
        let first_out = out.len();
        let mut end = size;
        let mut unknown_run_end = None;
        while end > 0 {
            let node = best[end];
            if node.id == unk_id {
                unknown_run_end.get_or_insert(end);
            } else {
                if let Some(run_end) = unknown_run_end.take() {
                    out.push(self.id_of(&bytes[end..run_end]).unwrap_or(unk_id));
                }
                out.push(node.id);
            }
            end = node.starts_at;
        }
        if let Some(run_end) = unknown_run_end {
            out.push(self.id_of(&bytes[..run_end]).unwrap_or(unk_id));
        }
        out[first_out..].reverse();
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pieces(vocab: &[(&str, f64)]) -> Pieces {
        let vocab: Vec<(Cow<'_, str>, f64)> = vocab.iter().map(|(p, s)| (Cow::Borrowed(*p), *s)).collect();
        Pieces::new(&vocab)
    }

    fn encode(p: &Pieces, word: &str) -> Vec<u32> {
        let mut out = Vec::new();
        p.encode_word(word, 0, &mut out);
        out
    }

    #[test]
    fn the_best_segmentation_wins_and_unknowns_are_fused() {
        // `tokenizers`' own doc example: "abcdacdxx" -> "abcd", "a", "cd", "xx".
        let p = pieces(&[
            ("<unk>", 0.0),
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("d", 0.0),
            ("cd", 1.0),
            ("ab", 2.0),
            ("abc", 5.0),
            ("abcd", 10.0),
        ]);
        assert_eq!(encode(&p, "abcdacdxx"), vec![8, 1, 5, 0]);
        assert_eq!(encode(&p, ""), Vec::<u32>::new());
        assert_eq!(encode(&p, "xyz"), vec![0], "one run of unknowns is one token");
        assert_eq!(encode(&p, "é"), vec![0], "a multi-byte unknown");
    }

    #[test]
    fn a_repeated_piece_keeps_its_last_id() {
        let p = pieces(&[("<unk>", 0.0), ("a", -1.0), ("a", -2.0)]);
        assert_eq!(p.id_of(b"a"), Some(2));
        assert_eq!(p.id_of(b"b"), None);
    }

    #[test]
    fn ids_travel_as_pairs() {
        assert_eq!(pairs_text(&[0, 6, 250_001, 2]), "0 0 0 6 488 145 0 2");
        let json: serde_json::Value = serde_json::from_str(&pairs_tokenizer_json()).unwrap();
        assert_eq!(json["model"]["vocab"]["511"], 511);
    }
}
