//! The analyzer: text → index terms, the same way for records and queries.
//!
//! One pipeline for every language a tenant may write in, since a record's language is not
//! declared and one record may mix several:
//! 1. NFKC, then lower case: fullwidth `ＳＫＵ１２` is `sku12`, `ﬁ` is `fi`, `Ё` is `ё`;
//! 2. split into runs: letters and digits (with `'` inside a word), CJK (Han, kana, Hangul), and
//!    separators. An identifier (`ORD-2024-0615`, `a.b@c.io`, `u-789`: pieces joined by
//!    `- _ . @ : / # +`, with a digit in it) is indexed whole as well as by its pieces;
//! 3. CJK runs become overlapping bigrams (`退款政策` → `退款 款政 政策`), a lone character a
//!    unigram: Lucene's CJK analyzer (`CJKBigramFilter`). Chinese has no spaces, and a bigram
//!    index finds two-character words without a dictionary; a dictionary segmenter (jieba's 5 MB
//!    of frequencies) was not needed by the sets measured in docs/hybrid-retrieval.md;
//! 4. a word in Latin letters is stemmed with the English Snowball stemmer (`shipped`, `shipping`
//!    → `ship`), one in Cyrillic with the Russian one (`доставки`, `доставка` → `доставк`; `ё`
//!    folded to `е` first); a word mixing letters and digits (`k9`, `sku88421`) is kept as it is;
//! 5. English and Russian stop words are dropped (before stemming), and so are single Latin
//!    letters (the `s` of `Caroline's`): they match every record and cost the longest posting
//!    lists at query time.
//!
//! Other scripts (Greek, Arabic, Devanagari…) are lower-cased and split on separators without
//! stemming. Thai and Lao, written without spaces, come out as one term per run.

use super::stopwords;
use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;

/// What the analyzer does besides splitting; `Default` is what memgate indexes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalyzerOptions {
    /// Stem English and Russian words (Snowball).
    pub stemming: bool,
    /// Drop English and Russian stop words.
    pub stop_words: bool,
    /// Also index each CJK character alone, besides the bigrams (Lucene's `outputUnigrams`).
    pub cjk_unigrams: bool,
}

impl Default for AnalyzerOptions {
    fn default() -> AnalyzerOptions {
        AnalyzerOptions { stemming: true, stop_words: true, cjk_unigrams: false }
    }
}

pub struct Analyzer {
    options: AnalyzerOptions,
    english: Stemmer,
    russian: Stemmer,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer").field("options", &self.options).finish()
    }
}

impl Default for Analyzer {
    fn default() -> Analyzer {
        Analyzer::new(AnalyzerOptions::default())
    }
}

/// Characters that join the pieces of an identifier.
fn is_joiner(c: char) -> bool {
    matches!(c, '-' | '_' | '.' | '@' | ':' | '/' | '#' | '+')
}

fn is_apostrophe(c: char) -> bool {
    matches!(c, '\'' | '\u{2019}')
}

/// Han (with extensions and compatibility ideographs), kana and Hangul: scripts written without
/// spaces between words, which get bigrams.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x31F0..=0x31FF    // katakana extensions
        | 0x3400..=0x4DBF    // Han extension A
        | 0x4E00..=0x9FFF    // Han
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // Han compatibility
        | 0x20000..=0x3134F) // Han extensions B–G
}

fn is_cyrillic(c: char) -> bool {
    matches!(c as u32, 0x0400..=0x052F)
}

fn is_latin_letter(c: char) -> bool {
    c.is_ascii_lowercase() || matches!(c as u32, 0x00C0..=0x024F) && c.is_alphabetic()
}

impl Analyzer {
    pub fn new(options: AnalyzerOptions) -> Analyzer {
        Analyzer {
            options,
            english: Stemmer::create(Algorithm::English),
            russian: Stemmer::create(Algorithm::Russian),
        }
    }

    pub fn options(&self) -> AnalyzerOptions {
        self.options
    }

    /// The terms of `text`, in text order, repeats kept (a record's term frequencies).
    pub fn terms(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.terms_into(text, &mut out);
        out
    }

    /// Appends the terms of `text` to `out`.
    pub fn terms_into(&self, text: &str, out: &mut Vec<String>) {
        // NFKC leaves ASCII as it is: most records skip it.
        let folded: Vec<char> = if text.is_ascii() {
            text.chars().map(|c| c.to_ascii_lowercase()).collect()
        } else {
            text.nfkc().flat_map(char::to_lowercase).collect()
        };
        let mut i = 0;
        while i < folded.len() {
            let c = folded[i];
            if is_cjk(c) {
                let start = i;
                while i < folded.len() && is_cjk(folded[i]) {
                    i += 1;
                }
                self.cjk_run(&folded[start..i], out);
            } else if c.is_alphanumeric() {
                let start = i;
                // A compound: alphanumeric pieces joined by single joiners (`ord-2024-0615`).
                while i < folded.len() {
                    let c = folded[i];
                    let next_is_word = folded.get(i + 1).is_some_and(|n| n.is_alphanumeric() && !is_cjk(*n));
                    if (c.is_alphanumeric() && !is_cjk(c))
                        || ((is_joiner(c) || is_apostrophe(c)) && next_is_word)
                    {
                        i += 1;
                    } else {
                        break;
                    }
                }
                self.compound(&folded[start..i], out);
            } else {
                i += 1;
            }
        }
    }

    fn cjk_run(&self, run: &[char], out: &mut Vec<String>) {
        if run.len() == 1 {
            out.push(run[0].to_string());
            return;
        }
        for pair in run.windows(2) {
            out.push(pair.iter().collect());
        }
        if self.options.cjk_unigrams {
            out.extend(run.iter().map(char::to_string));
        }
    }

    /// A run of pieces joined by joiners: each piece as a word, and the whole when it looks like
    /// an identifier (4 characters or more, a joiner, and a digit or an `@`).
    fn compound(&self, run: &[char], out: &mut Vec<String>) {
        let has_joiner = run.iter().any(|c| is_joiner(*c));
        let marked = run.iter().any(|c| c.is_ascii_digit() || *c == '@');
        if has_joiner && run.len() >= 4 && marked {
            out.push(run.iter().collect());
        }
        for piece in run.split(|c| is_joiner(*c)) {
            self.word(piece, out);
        }
    }

    /// One word: possessive `'s` and other apostrophes out, stop words out, stemmed by script.
    fn word(&self, chars: &[char], out: &mut Vec<String>) {
        let mut chars = chars;
        if let [rest @ .., a, 's'] = chars
            && is_apostrophe(*a)
        {
            chars = rest;
        }
        let word: String = chars.iter().filter(|c| !is_apostrophe(**c)).collect();
        if word.is_empty() {
            return;
        }
        let letters = word.chars().filter(|c| c.is_alphabetic()).count();
        let total = word.chars().count();
        if letters == 0 {
            out.push(word); // a number
            return;
        }
        if letters < total {
            out.push(word); // letters and digits mixed: a model name, a code
            return;
        }
        if word.chars().all(is_latin_letter) {
            if total == 1
                || (self.options.stop_words && stopwords::ENGLISH.binary_search(&word.as_str()).is_ok())
            {
                return;
            }
            out.push(if self.options.stemming { self.english.stem(&word).into_owned() } else { word });
        } else if word.chars().all(is_cyrillic) {
            let word = word.replace('ё', "е");
            if self.options.stop_words && stopwords::RUSSIAN.binary_search(&word.as_str()).is_ok() {
                return;
            }
            out.push(if self.options.stemming { self.russian.stem(&word).into_owned() } else { word });
        } else {
            out.push(word);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<String> {
        Analyzer::default().terms(text)
    }

    fn shares_a_term(a: &str, b: &str) -> bool {
        let (a, b) = (terms(a), terms(b));
        a.iter().any(|t| b.contains(t))
    }

    #[test]
    fn chinese_becomes_bigrams_and_a_lone_character_a_unigram() {
        assert_eq!(terms("退款政策"), ["退款", "款政", "政策"]);
        assert_eq!(terms("桌"), ["桌"]);
        // Punctuation ends a run; the query's 退款 meets the record's 退款.
        assert_eq!(
            terms("我想退货，退款多久能到账？"),
            ["我想", "想退", "退货", "退款", "款多", "多久", "久能", "能到", "到账"]
        );
        assert!(shares_a_term("退款多久能到账", "客户申请退货退款时"));
        let with_unigrams = Analyzer::new(AnalyzerOptions { cjk_unigrams: true, ..Default::default() });
        assert_eq!(with_unigrams.terms("发货"), ["发货", "发", "货"]);
    }

    #[test]
    fn russian_words_are_stemmed_and_stop_words_dropped() {
        assert_eq!(terms("доставки"), terms("доставка"));
        assert_eq!(terms("доставки"), ["доставк"]);
        assert!(shares_a_term("Когда будет доставка?", "Срок доставки изменился"));
        assert!(shares_a_term("пароль", "пароля"));
        assert_eq!(terms("Ёлка"), terms("елка"));
        // "и", "не", "до", "его" are stop words.
        assert_eq!(terms("и не до его"), Vec::<String>::new());
    }

    #[test]
    fn english_words_are_stemmed_and_stop_words_dropped() {
        assert_eq!(terms("shipping"), terms("shipped"));
        assert_eq!(terms("shipping"), ["ship"]);
        assert!(shares_a_term("Where are my orders?", "It was ordered on Monday"));
        assert_eq!(terms("What is the refund policy?"), ["refund", "polici"]);
        assert_eq!(terms("Caroline's dog"), ["carolin", "dog"]);
        let plain =
            Analyzer::new(AnalyzerOptions { stemming: false, stop_words: false, cjk_unigrams: false });
        assert_eq!(plain.terms("The shipping"), ["the", "shipping"]);
    }

    #[test]
    fn mixed_text_keeps_each_script_its_own_treatment() {
        assert_eq!(
            terms("Li Wei wants 下周发货 and доставку on Tuesdays"),
            ["li", "wei", "want", "下周", "周发", "发货", "доставк", "tuesday"]
        );
    }

    #[test]
    fn fullwidth_and_case_fold_to_the_same_terms() {
        assert_eq!(terms("ＳＨＩＰＰＩＮＧ　ＳＫＵ８８４２１"), terms("shipping sku88421"));
        assert_eq!(terms("ＲＥＦＵＮＤ"), ["refund"]);
        assert_eq!(terms("ﬁle"), terms("file"));
        // Halfwidth katakana composes to the fullwidth form.
        assert_eq!(terms("ｶﾀｶﾅ"), terms("カタカナ"));
    }

    #[test]
    fn identifiers_are_kept_whole_and_by_piece() {
        assert_eq!(
            terms("Order ORD-2024-0615 shipped."),
            ["order", "ord-2024-0615", "ord", "2024", "0615", "ship"]
        );
        assert!(terms("Mail alice@example.com").contains(&"alice@example.com".to_owned()));
        assert!(terms("customer:u-789:profile").contains(&"customer:u-789:profile".to_owned()));
        // A hyphenated word without a digit is just its words.
        assert_eq!(terms("e-mail"), ["mail"]);
        // A sentence's full stop is not a joiner.
        assert_eq!(terms("K9. Then"), ["k9"]);
    }

    #[test]
    fn stop_word_lists_are_sorted_for_binary_search() {
        assert!(stopwords::ENGLISH.windows(2).all(|w| w[0] < w[1]));
        assert!(stopwords::RUSSIAN.windows(2).all(|w| w[0] < w[1]));
    }
}
