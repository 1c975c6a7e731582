//! The words a condition is matched against, and the matchers that need more than a substring
//! search: keywords with word boundaries, and the bounded entity finders (email, phone, order
//! number).
//!
//! Folding: NFKC (fullwidth `ＬＡＷＹＥＲ` and halfwidth katakana become their ordinary forms,
//! ligatures and compatibility digits too), then lower case, then every run of whitespace as one
//! space. A keyword is folded the same way, so `Lawyer`, `LAWYER` and `ｌａｗｙｅｒ` are one word.
//!
//! Word boundaries: scripts written with spaces (Latin, Cyrillic, Greek, …) match whole words
//! only, so `sue` does not fire on "pursue" nor `иск` on "поиск". Scripts written without spaces
//! (Chinese, Japanese, Korean with its attached particles, Thai, Lao, Khmer, Myanmar) have no
//! word boundary to find: a keyword in them matches anywhere (`律师` in "我要找律师"). The rule is
//! decided at each end of the keyword by the character there.

use regex::Regex;
use std::sync::LazyLock;
use unicode_normalization::UnicodeNormalization;

/// The most characters of a request's words a condition reads; the query itself is shorter
/// (`crate::query::MAX_QUERY_CHARS`), this bounds anything else a caller might pass.
pub const MAX_INPUT_CHARS: usize = 8_000;

/// The longest excerpt of the person's words kept for a match.
pub const MAX_EXCERPT_CHARS: usize = 200;

/// NFKC of `text` (at most `MAX_INPUT_CHARS` characters), case kept: what regexes and entity
/// finders read.
pub fn normalized(text: &str) -> String {
    text.chars().take(MAX_INPUT_CHARS).nfkc().collect()
}

/// NFKC, lower case, whitespace runs as one space, trimmed: what keywords are compared with.
pub fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.chars().take(MAX_INPUT_CHARS).nfkc().flat_map(char::to_lowercase) {
        if c.is_whitespace() {
            space = !out.is_empty();
        } else {
            if space {
                out.push(' ');
                space = false;
            }
            out.push(c);
        }
    }
    out
}

/// A script written without spaces between words: a keyword ending in it needs no boundary.
fn unspaced(c: char) -> bool {
    matches!(u32::from(c),
        0x0E00..=0x0EFF      // Thai, Lao
        | 0x1000..=0x109F    // Myanmar
        | 0x1100..=0x11FF    // Hangul Jamo
        | 0x1780..=0x17FF    // Khmer
        | 0x2E80..=0x2FDF    // CJK radicals
        | 0x3040..=0x30FF    // Hiragana, Katakana
        | 0x3100..=0x31FF    // Bopomofo, Hangul compatibility Jamo, Katakana extensions
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x3134F  // CJK extensions B–G
    )
}

/// A character that continues a word: letters and digits of any script, and `_`.
fn word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A character that would glue itself to a word of a spaced script: a letter, digit or `_` of a
/// spaced script. A Chinese character beside `VIP` is no part of the word `vip`.
fn joins(c: char) -> bool {
    word_char(c) && !unspaced(c)
}

/// One keyword or phrase, folded, with the boundaries its ends need.
#[derive(Debug, Clone)]
pub struct Keyword {
    /// As the record wrote it (for reports).
    pub written: String,
    folded: String,
    /// Written with a trailing `*`: any ending matches.
    prefix: bool,
    bound_start: bool,
    bound_end: bool,
}

impl Keyword {
    /// `None` when nothing is left to match once folded (an empty string, or `*` alone).
    pub fn new(written: &str) -> Option<Keyword> {
        let trimmed = written.trim();
        let (body, prefix) = match trimmed.strip_suffix('*') {
            Some(body) => (body, true),
            None => (trimmed, false),
        };
        let folded = fold(body);
        let first = folded.chars().next()?;
        let last = folded.chars().next_back()?;
        Some(Keyword {
            written: trimmed.to_owned(),
            bound_start: word_char(first) && !unspaced(first),
            bound_end: !prefix && word_char(last) && !unspaced(last),
            folded,
            prefix,
        })
    }

    /// The first place `self` occurs in `folded` (text folded by `fold`) as a whole word where
    /// its script has words: the matched text (a prefix keyword's match runs to the word's end).
    pub fn find<'t>(&self, folded: &'t str) -> Option<&'t str> {
        let mut from = 0;
        while let Some(at) = folded[from..].find(&self.folded) {
            let start = from + at;
            let end = start + self.folded.len();
            let before_ok =
                !self.bound_start || folded[..start].chars().next_back().is_none_or(|c| !joins(c));
            let after_ok = !self.bound_end || folded[end..].chars().next().is_none_or(|c| !joins(c));
            if before_ok && after_ok {
                let end = if self.prefix {
                    end + folded[end..].find(|c: char| !joins(c)).unwrap_or(folded.len() - end)
                } else {
                    end
                };
                return Some(&folded[start..end]);
            }
            // Past this occurrence's first character: the next may overlap it.
            from = start + folded[start..].chars().next().map_or(1, char::len_utf8);
        }
        None
    }
}

/// `text` cut to `MAX_EXCERPT_CHARS` characters.
pub fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Entity finders. Each regex is bounded (fixed repetition counts) and checked at its ends by
/// hand, since `\b` would see no boundary between a Chinese character and a Latin letter.
static EMAIL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?){0,8}\.[A-Za-z]{2,24}").ok()
});
/// Digits with the separators phone numbers are written with: `+7 912 345-67-89`,
/// `(415) 555-0134`, `13800138000`.
static PHONE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\+?\(?[0-9](?:[ .()\-]{0,2}[0-9]){6,16}").ok());
/// A date at the start of a digit run (`2024-06-15`, `2024/6/15`): not a phone number.
static DATE_LIKE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[0-9]{4}[-./][0-9]{1,2}[-./][0-9]{1,2}").ok());
/// Order numbers as memgate's users write them: `ORD-2024-0615`, `ORD-4410-K`, `ORDER #10442`.
static ORDER_NUMBER: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:ORD|ORDER)[-_ ]?#?[0-9][0-9A-Za-z]{0,19}(?:-[0-9A-Za-z]{1,20}){0,4}").ok()
});

/// The entity kinds a condition can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    Email,
    Phone,
    OrderNumber,
}

impl EntityKind {
    pub const ALL: [EntityKind; 3] = [EntityKind::Email, EntityKind::Phone, EntityKind::OrderNumber];

    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Email => "email",
            EntityKind::Phone => "phone",
            EntityKind::OrderNumber => "order_number",
        }
    }

    pub fn parse(name: &str) -> Option<EntityKind> {
        EntityKind::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// The first entity of this kind in `text` (NFKC-normalized), if any.
    pub fn find(self, text: &str) -> Option<&str> {
        match self {
            EntityKind::Email => {
                let email = EMAIL.as_ref()?;
                email.find_iter(text).find_map(|m| {
                    let before = text[..m.start()].chars().next_back();
                    // A leading letter glued to the address would have been taken by the match.
                    let free = before.is_none_or(|c| !(c.is_ascii_alphanumeric() || "._%+-".contains(c)));
                    free.then_some(m.as_str())
                })
            }
            EntityKind::Phone => {
                let phone = PHONE.as_ref()?;
                let dates = DATE_LIKE.as_ref()?;
                phone.find_iter(text).map(|m| (m.start(), m.end())).find_map(|(start, end)| {
                    let found = &text[start..end];
                    let before = text[..start].chars().next_back();
                    let after = text[end..].chars().next();
                    // Part of a longer code (`ORD-2024-0615`, `A1234567`) or of a decimal.
                    let glued = |c: char| joins(c) || "-_/.,".contains(c);
                    if before.is_some_and(glued) || after.is_some_and(|c| joins(c) || c == '-') {
                        return None;
                    }
                    let digits = found.chars().filter(char::is_ascii_digit).count();
                    let international = found.starts_with('+');
                    let enough =
                        if international { (7..=15).contains(&digits) } else { (10..=15).contains(&digits) };
                    (enough && !dates.is_match(found)).then_some(found)
                })
            }
            EntityKind::OrderNumber => {
                let order = ORDER_NUMBER.as_ref()?;
                order.find_iter(text).map(|m| (m.start(), m.end())).find_map(|(start, end)| {
                    let before = text[..start].chars().next_back();
                    let after = text[end..].chars().next();
                    let free = |c: Option<char>| c.is_none_or(|c| !joins(c));
                    (free(before) && free(after)).then_some(&text[start..end])
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn finds(keyword: &str, text: &str) -> Option<String> {
        Keyword::new(keyword).unwrap().find(&fold(text)).map(str::to_owned)
    }

    #[test]
    fn the_entity_finders_compile() {
        assert!(EMAIL.is_some() && PHONE.is_some() && DATE_LIKE.is_some() && ORDER_NUMBER.is_some());
    }

    #[test]
    fn folding_ignores_case_width_and_spacing() {
        assert_eq!(fold("  Talk to  my\tＬＡＷＹＥＲ！ "), "talk to my lawyer!");
        assert_eq!(fold("ＡＤＶＯＫＡＴ Адвокат"), "advokat адвокат");
        assert_eq!(fold("ﾃｽﾄ"), "テスト");
    }

    #[test]
    fn latin_and_cyrillic_keywords_match_whole_words() {
        assert_eq!(finds("lawyer", "I'm going to talk to my lawyer"), Some("lawyer".into()));
        assert_eq!(finds("lawyer", "my LAWYER's number"), Some("lawyer".into()));
        assert_eq!(finds("sue", "I will pursue this"), None);
        assert_eq!(finds("sue", "I will sue you"), Some("sue".into()));
        assert_eq!(finds("иск", "поиск по сайту"), None);
        assert_eq!(finds("суд", "Подам в СУД!"), Some("суд".into()));
        assert_eq!(
            finds("talk to my lawyer", "I'll TALK   to my\nlawyer."),
            Some("talk to my lawyer".into())
        );
    }

    #[test]
    fn a_trailing_star_matches_any_ending() {
        assert_eq!(finds("sue*", "they sued us"), Some("sued".into()));
        assert_eq!(finds("адвокат*", "поговорю с адвокатом"), Some("адвокатом".into()));
        assert_eq!(finds("sue*", "pursued"), None, "the start is still a word boundary");
        assert!(Keyword::new("*").is_none());
        assert!(Keyword::new("  ").is_none());
    }

    #[test]
    fn unspaced_scripts_match_anywhere() {
        assert_eq!(finds("律师", "我要找律师谈谈"), Some("律师".into()));
        assert_eq!(finds("起诉", "我会起诉你们"), Some("起诉".into()));
        assert_eq!(finds("弁護士", "弁護士に相談します"), Some("弁護士".into()));
        assert_eq!(finds("변호사", "변호사에게 연락하겠습니다"), Some("변호사".into()));
        // A Latin keyword beside Chinese text: the Chinese characters are not part of the word.
        assert_eq!(finds("vip", "我是VIP客户"), Some("vip".into()));
        assert_eq!(finds("vip", "我是VIPS客户"), None);
        assert_eq!(finds("律师", "找律"), None);
    }

    #[test]
    fn overlapping_occurrences_are_all_tried() {
        // The first `ab` is glued to a letter; the one that follows is free.
        assert_eq!(finds("ab", "xab ab"), Some("ab".into()));
    }

    #[test]
    fn emails() {
        let find = |t: &str| EntityKind::Email.find(t).map(str::to_owned);
        assert_eq!(find("write to li.wei@example.com please"), Some("li.wei@example.com".into()));
        assert_eq!(find("我的邮箱是zhang.wei@example.cn。"), Some("zhang.wei@example.cn".into()));
        assert_eq!(find("no address here @ all"), None);
        assert_eq!(find(&normalized("ｌｉ＠ｅｘａｍｐｌｅ．ｃｏｍ")), Some("li@example.com".into()));
    }

    #[test]
    fn phones() {
        let find = |t: &str| EntityKind::Phone.find(t).map(str::to_owned);
        assert_eq!(find("call +7 912 345-67-89 today"), Some("+7 912 345-67-89".into()));
        assert_eq!(find("电话13800138000。"), Some("13800138000".into()));
        assert_eq!(find("电话 13800138000"), Some("13800138000".into()));
        assert_eq!(find("(415) 555-0134"), Some("(415) 555-0134".into()));
        assert_eq!(find("order ORD-2024-0615 arrived"), None);
        assert_eq!(find("on 2024-06-15 14:30"), None);
        assert_eq!(find("it costs 1234567 rubles"), None, "seven digits without + are not a phone");
        assert_eq!(find(&normalized("＋８６ １３８ ００１３ ８０００")), Some("+86 138 0013 8000".into()));
    }

    #[test]
    fn order_numbers() {
        let find = |t: &str| EntityKind::OrderNumber.find(t).map(str::to_owned);
        assert_eq!(find("where is ORD-2024-0615?"), Some("ORD-2024-0615".into()));
        assert_eq!(find("订单ORD-2024-0615还没到"), Some("ORD-2024-0615".into()));
        assert_eq!(find("order ord-4410-k"), Some("ord-4410-k".into()));
        assert_eq!(find("ORDER #10442"), Some("ORDER #10442".into()));
        assert_eq!(find("RECORD-2024"), None);
        assert_eq!(find("the order arrived"), None);
    }
}
