//! Exact terms: the words that make a record pass the semantic layer without a score. A record's
//! terms are its `key`, its aliases and the identifiers in its content (emails, order and SKU
//! numbers, ids like `u-789`, numbers written `#4000123`); a query's are its identifiers and its
//! short phrases, so a query that names `ORD-2024-0615`, `alice@example.com`, order `#4000123` or
//! the alias `下周发货` finds the record exactly.
//!
//! A route that skips the score is only as good as what it is keyed by, so two rules keep it to
//! what names one thing:
//! - an alias must be specific (`alias_specificity`), for every writer: not only stop words (an
//!   alias `the` put its record into every question), and not a letter or two. Identifiers are
//!   specific by their shape (`is_identifier`);
//! - only an operator's key and aliases are routes (`exact_route_trusted`). An agent's or the
//!   observer's are what a conversation made them say: they stay words of the record (its lexical
//!   terms and its embedded text), found by meaning and words with a score like any other, but
//!   they never name the record into a request past the semantic layer. Identifiers in any
//!   record's content stay routes: a question names them only when it is about that order or
//!   that person.

/// Whether the key and aliases of a record whose live version `writer` wrote are exact routes:
/// an operator's or an import's (`Record::writer`, which reads a record without provenance by its
/// author: `admin:…`, `console:…` or none). Agents, the memory tool, the observer and any author
/// memgate does not know are not: deny by default.
pub fn exact_route_trusted(writer: crate::record::WriterKind) -> bool {
    writer.is_operator()
}

/// Why an alias cannot name a record (`alias_specificity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unspecific {
    /// Only stop words of the analyzer's lists (English, Russian) and single letters: words
    /// nearly every question holds.
    StopWords,
    /// Fewer than `MIN_ALIAS_WEIGHT` letters and digits.
    TooShort,
}

/// The least an alias weighs: its letters and digits, a CJK character counting two (one names
/// about as much as a short word: `退款` is "refund"). Two Latin letters (`ab`, `ok`) match too
/// many questions' phrases.
pub const MIN_ALIAS_WEIGHT: usize = 3;

/// Whether `alias` names something: at least `MIN_ALIAS_WEIGHT`, and one word the analyzer
/// keeps (not a stop word of its lists, not a single letter).
pub fn alias_specificity(alias: &str) -> Result<(), Unspecific> {
    let weight: usize =
        alias.chars().filter(|c| c.is_alphanumeric()).map(|c| if is_cjk(c) { 2 } else { 1 }).sum();
    if crate::lexical::analyzer().terms(alias).is_empty() {
        return Err(Unspecific::StopWords);
    }
    if weight < MIN_ALIAS_WEIGHT {
        return Err(Unspecific::TooShort);
    }
    Ok(())
}

/// Normalizes a term for lookup: lower case, inner white space collapsed to one space.
pub fn normalize(term: &str) -> String {
    term.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// Characters that keep an identifier in one piece (`ORD-2024-0615`, `a.b@c.io`, `customer:u-1`).
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | ':' | '.' | '@' | '/' | '#' | '+')
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
}

/// Words of a text, trailing punctuation trimmed (`ORD-1.` → `ORD-1`).
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !is_word_char(c))
        .map(|w| w.trim_matches(|c: char| matches!(c, '.' | ':' | '/' | '-' | '_' | '#' | '+')))
        .filter(|w| !w.is_empty())
        .collect()
}

/// An identifier worth matching exactly: an email, or a token of 4+ characters mixing digits with
/// letters or separators (`ORD-2024-0615`, `SKU88421`, `u-789`). Plain words and plain numbers
/// (years, quantities) are not identifiers.
pub fn is_identifier(word: &str) -> bool {
    if word.contains('@') {
        let mut parts = word.splitn(2, '@');
        let (local, domain) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        return !local.is_empty() && domain.contains('.');
    }
    let chars = word.chars().count();
    let digits = word.chars().filter(char::is_ascii_digit).count();
    let letters = word.chars().filter(|c| c.is_alphabetic()).count();
    let separators = word.chars().filter(|c| matches!(c, '-' | '_' | ':' | '#')).count();
    chars >= 4 && digits > 0 && (letters > 0 || separators > 0) && digits < chars
}

/// Digits fewer than this after a `#` are a count or a year (`#1`, `#2024`), not a number that
/// names one thing.
const NUMBERED_MIN_DIGITS: usize = 5;

/// Numbers written as references, `order #4000123` or `ticket #10442`, as their digits: the `#`
/// marks a plain number as the name of one order or ticket, and customers quote it with or
/// without the `#` (`words` trims it from a query's phrases).
fn numbered(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_word_char(c)).filter_map(|raw| {
        let digits = raw.trim_end_matches(|c: char| !c.is_ascii_digit()).strip_prefix('#')?;
        (digits.len() >= NUMBERED_MIN_DIGITS && digits.bytes().all(|b| b.is_ascii_digit())).then_some(digits)
    })
}

/// Identifiers found in any string of a JSON value.
pub fn identifiers_in(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => {
            out.extend(words(s).into_iter().filter(|w| is_identifier(w)).map(normalize));
            out.extend(numbered(s).map(str::to_owned));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| identifiers_in(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| identifiers_in(v, out)),
        _ => {}
    }
}

/// Every phrase of a query that could name a record exactly: single words, runs of up to four
/// words, and (for Chinese, Japanese and Korean, written without spaces) every substring of 2 to
/// 12 characters of each run of such characters.
pub fn query_phrases(query: &str) -> Vec<String> {
    let mut phrases = word_phrases(query);
    let chars: Vec<char> = query.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !is_cjk(chars[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_cjk(chars[i]) {
            i += 1;
        }
        let run = &chars[start..i];
        for a in 0..run.len() {
            for b in (a + 2)..=(a + 12).min(run.len()) {
                phrases.push(run[a..b].iter().collect::<String>().to_lowercase());
            }
        }
    }
    phrases.sort_unstable();
    phrases.dedup();
    phrases
}

/// Each run of one to four words of `query`, normalized. Words hold no white space, and lower
/// case never reaches across the space between two (not even a final sigma), so a phrase is its
/// words lowered once and joined: what `normalize` makes of the phrase, for one allocation a
/// phrase instead of four.
fn word_phrases(query: &str) -> Vec<String> {
    let words: Vec<String> = words(query).into_iter().map(str::to_lowercase).collect();
    let mut phrases = Vec::with_capacity(4 * words.len());
    for start in 0..words.len() {
        let mut phrase = String::new();
        for word in &words[start..(start + 4).min(words.len())] {
            if !phrase.is_empty() {
                phrase.push(' ');
            }
            phrase.push_str(word);
            phrases.push(phrase.clone());
        }
    }
    phrases
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The phrases as they were made before: each phrase's words joined, then normalized.
    fn phrases_normalized_one_by_one(query: &str) -> Vec<String> {
        let words = words(query);
        let mut phrases = Vec::new();
        for start in 0..words.len() {
            for len in 1..=4.min(words.len() - start) {
                phrases.push(normalize(&words[start..start + len].join(" ")));
            }
        }
        phrases
    }

    proptest! {
        #[test]
        fn a_querys_phrases_are_its_words_phrases_normalized(
            query in proptest::collection::vec(
                prop_oneof![
                    Just("Σ".to_owned()), Just("ΑΣ".to_owned()), Just("ὈΔΥΣΣΕΎΣ".to_owned()),
                    Just("İ".to_owned()), Just("ʰ".to_owned()),
                    Just("ORD-2024".to_owned()), Just("#4000123".to_owned()), Just("ß".to_owned()),
                    Just(" ".to_owned()), Just("\u{3000}".to_owned()), Just(".".to_owned()), Just("'".to_owned()),
                    Just("下周".to_owned()), "\\PC{0,6}",
                ],
                0..12,
            ).prop_map(|parts| parts.concat())
        ) {
            prop_assert_eq!(word_phrases(&query), phrases_normalized_one_by_one(&query));
        }
    }

    #[test]
    fn aliases_name_something_and_stop_words_letters_and_short_ones_do_not() {
        for alias in ["the", "my", "i", "what", "is", "What is", "the my", "I'm", "и не", "я", "x y"] {
            assert_eq!(alias_specificity(alias), Err(Unspecific::StopWords), "{alias}");
        }
        for alias in ["ab", "#1", "a-2", "退"] {
            assert_eq!(alias_specificity(alias), Err(Unspecific::TooShort), "{alias}");
        }
        for alias in
            ["next week delivery", "the Gold plan", "退款", "下周发货", "доставка", "SKU88421", "k9x", "2024"]
        {
            assert_eq!(alias_specificity(alias), Ok(()), "{alias}");
        }
    }

    #[test]
    fn only_operators_names_are_routes() {
        use crate::record::WriterKind;
        for author in [None, Some("admin:ops"), Some("console:ana")] {
            assert!(exact_route_trusted(WriterKind::of_author(author)), "{author:?}");
        }
        for author in [Some("agent:k-1"), Some("agent:jwt:alice"), Some("observer"), Some("someone")] {
            assert!(!exact_route_trusted(WriterKind::of_author(author)), "{author:?}");
        }
        assert!(exact_route_trusted(WriterKind::Import));
        assert!(!exact_route_trusted(WriterKind::MemoryTool));
    }

    #[test]
    fn identifiers_are_ids_and_emails_not_words_or_years() {
        for id in ["ORD-2024-0615", "SKU88421", "u-789", "alice@example.com", "INV#10023"] {
            assert!(is_identifier(id), "{id}");
        }
        for word in ["delivery", "2024", "12", "a-b", "hello.", "x@y"] {
            assert!(!is_identifier(word), "{word}");
        }
    }

    #[test]
    fn content_identifiers_are_found_and_normalized() {
        let mut out = Vec::new();
        identifiers_in(
            &json!({"orders": ["Order ORD-2024-0615 shipped."], "email": "Bob@Example.com"}),
            &mut out,
        );
        assert!(out.contains(&"ord-2024-0615".to_owned()), "{out:?}");
        assert!(out.contains(&"bob@example.com".to_owned()), "{out:?}");
    }

    #[test]
    fn numbers_written_with_a_hash_are_identifiers_and_a_query_names_them_with_or_without_it() {
        let mut out = Vec::new();
        identifiers_in(
            &json!({"notes": "Last order #4000123: the red kettle. Ticket #10442, step #3, since #2024."}),
            &mut out,
        );
        assert_eq!(out, ["4000123", "10442"]);
        for query in ["Hi, it's about my order #4000123, the red kettle.", "order 4000123?"] {
            assert!(query_phrases(query).contains(&"4000123".to_owned()), "{query}");
        }
    }

    #[test]
    fn query_phrases_cover_ids_multiword_aliases_and_cjk() {
        let phrases = query_phrases("Where is ORD-2024-0615? Next Week Delivery, 我想知道下周发货的情况");
        for expected in ["ord-2024-0615", "next week delivery", "下周发货"] {
            assert!(phrases.contains(&expected.to_owned()), "{expected}: {phrases:?}");
        }
    }
}
