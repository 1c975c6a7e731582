//! Passwords in free text: `password: hunter2`, `the wifi password is Guest2024`,
//! `{"bot_token": "…"}` written into a string.
//!
//! The text is read with every run of blanks (spaces, tabs, the other Unicode spaces, but not line
//! breaks) as one space, so no run of blanks, however long, separates a credential's name from
//! its value; the value itself is read at most `MAX_VALUE_BYTES` past the name.

use super::bytes::{is_token_byte, mix, positions, run_len};
use super::names::token_name_at;
use super::placeholders::{is_placeholder, is_reference};
use std::borrow::Cow;

/// Names after which `:` or `=` introduces a credential. ASCII ones are matched case-insensitively
/// and may end a longer name (`DB_PASSWORD=…`, `spring.datasource.password=…`).
const PASSWORD_WORDS: &[&[u8]] = &[
    b"password",
    b"passwd",
    b"pwd",
    b"passphrase",
    b"secret",
    b"api_key",
    b"api-key",
    b"apikey",
    b"access_token",
    b"auth_token",
    b"refresh_token",
];

/// The same in other languages support bots meet; matched as written.
const PASSWORD_WORDS_INTL: &[&str] = &["密码", "口令", "пароль", "Пароль", "ПАРОЛЬ"];

/// Words that follow `password:` in forms and policies rather than being the password.
const NOT_PASSWORDS: &[&str] = &[
    "required",
    "optional",
    "unknown",
    "hidden",
    "masked",
    "redacted",
    "removed",
    "reset",
    "expired",
    "changed",
    "updated",
    "unchanged",
    "same",
    "provided",
    "needed",
    "missing",
    "sent",
    "invalid",
    "incorrect",
    "wrong",
    "weak",
    "strong",
    "forgotten",
    "locked",
    "disabled",
    "enabled",
    "pending",
    "true",
    "false",
    "none",
    "null",
];

/// `password: hunter2`, `pwd=S3cr3t!`, `"password": "…"`, `DB_PASSWORD=…`, `密码：abc123`,
/// `"bot_token": "…"` and `the password is Summer2024`, but not `reset your password in
/// settings`, `the password policy requires 12 characters` or `Password: must be 12 characters
/// long`. `lower` is `text` in ASCII lower case.
pub(super) fn has_password_assignment(text: &str, lower: &[u8]) -> bool {
    let text = collapse_blanks(text);
    let lowered;
    let lower = match &text {
        Cow::Borrowed(_) => lower,
        Cow::Owned(collapsed) => {
            lowered = collapsed.to_ascii_lowercase();
            lowered.as_bytes()
        }
    };
    let bytes = text.as_bytes();
    let after_ok = |end: usize| lower.get(end).is_none_or(|b| !is_token_byte(*b));
    let ascii = PASSWORD_WORDS.iter().any(|word| {
        positions(lower, word).any(|start| {
            let end = start + word.len();
            let before_ok = start == 0 || !lower[start - 1].is_ascii_alphanumeric();
            before_ok && after_ok(end) && value_after_name(bytes, lower, end)
        })
    });
    let token = || {
        positions(lower, b"token").any(|start| {
            let end = start + b"token".len();
            after_ok(end) && token_name_at(bytes, start) && value_after_name(bytes, lower, end)
        })
    };
    ascii
        || token()
        || PASSWORD_WORDS_INTL.iter().any(|word| {
            text.match_indices(word).any(|(start, _)| {
                // Chinese runs words together; Russian separates them.
                let before_ok = word.starts_with(is_cjk)
                    || text[..start].chars().next_back().is_none_or(|c| !c.is_alphabetic());
                before_ok && value_after_name(bytes, lower, start + word.len())
            })
        })
}

/// `text` with every run of blanks as one space; borrowed when it has no run to collapse.
fn collapse_blanks(text: &str) -> Cow<'_, str> {
    let mut previous_blank = false;
    let collapsed_already = text.chars().all(|c| {
        let blank = is_blank(c);
        let fine = !blank || (c == ' ' && !previous_blank);
        previous_blank = blank;
        fine
    });
    if collapsed_already {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut previous_blank = false;
    for c in text.chars() {
        let blank = is_blank(c);
        if !blank {
            out.push(c);
        } else if !previous_blank {
            out.push(' ');
        }
        previous_blank = blank;
    }
    Cow::Owned(out)
}

/// Whitespace within a line. Line breaks end a value (`PASSWORD=\nPORT=5432` assigns nothing),
/// so they stay.
fn is_blank(c: char) -> bool {
    c.is_whitespace() && !matches!(c, '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}')
}

/// How far past a credential's name a value is read. Passwords are shorter; the bound keeps a
/// string made of many `password="` from costing quadratic time.
const MAX_VALUE_BYTES: usize = 512;

/// Whether what follows a credential's name at `i` assigns it a value that looks like one.
fn value_after_name(bytes: &[u8], lower: &[u8], mut i: usize) -> bool {
    // `bytes` and `lower` are cut at the same place: every index below is valid in both, and no
    // slice can start past the end (a long run of blanks once pushed one there).
    let end = bytes.len().min(i.saturating_add(MAX_VALUE_BYTES));
    let (bytes, lower) = (&bytes[..end], &lower[..end]);
    if i > end {
        return false;
    }
    let skip_blanks = |mut i: usize| {
        while matches!(bytes.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        i
    };
    i = skip_blanks(i);
    if matches!(bytes.get(i), Some(b'"' | b'\'')) {
        i = skip_blanks(i + 1);
    }
    let assigned = if bytes[i..].starts_with(":=".as_bytes()) || bytes[i..].starts_with(b"=>") {
        i += 2;
        true
    } else if matches!(bytes.get(i), Some(b':' | b'=')) {
        i += 1;
        true
    } else if bytes[i..].starts_with("：".as_bytes()) {
        i += "：".len();
        true
    } else {
        false
    };
    if !assigned {
        // `the password is Summer2024`: only a value mixing letters and digits counts here.
        if !lower[i..].starts_with(b"is ") {
            return false;
        }
        let start = skip_blanks(i + 3);
        let len = run_len(bytes, start, is_value_byte);
        let value = trim_trailing_punctuation(bytes.get(start..start + len).unwrap_or_default());
        let m = mix(value);
        return value.len() >= 6 && m.digit && (m.upper || m.lower);
    }
    i = skip_blanks(i);
    if let Some(quote @ (b'"' | b'\'')) = bytes.get(i).copied() {
        let start = i + 1;
        let len = run_len(bytes, start, |b| b != quote && b != b'\n');
        let value = String::from_utf8_lossy(&bytes[start..start + len]);
        return value.chars().count() >= 4 && !is_placeholder(&value) && !is_reference(&value);
    }
    let len = run_len(bytes, i, is_value_byte);
    let whole = &bytes[i..i + len];
    // `${DB_PASSWORD}` is judged whole: trimmed of its closing brace it would be no template.
    if is_placeholder(&String::from_utf8_lossy(whole)) {
        return false;
    }
    let value = trim_trailing_punctuation(whole);
    let rest = &bytes[i + len..];
    looks_like_password(value, prose_continues(rest))
}

/// Password characters in free text: printable ASCII but quotes. Stops at spaces and at any
/// non-ASCII character (`密码：abc123，请保管` ends at `，`).
fn is_value_byte(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'`')
}

fn trim_trailing_punctuation(value: &[u8]) -> &[u8] {
    let keep = value.len()
        - value
            .iter()
            .rev()
            .take_while(|b| matches!(b, b'.' | b',' | b';' | b':' | b'!' | b'?' | b')' | b']' | b'}'))
            .count();
    &value[..keep]
}

/// True when the sentence goes on with another word on the same line.
fn prose_continues(rest: &[u8]) -> bool {
    let blanks = rest.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
    // One character is at most four bytes.
    let next = String::from_utf8_lossy(&rest[blanks..rest.len().min(blanks + 4)]);
    next.chars().next().is_some_and(char::is_alphabetic)
}

fn looks_like_password(value: &[u8], sentence_goes_on: bool) -> bool {
    let text = String::from_utf8_lossy(value);
    if value.len() < 4 || is_placeholder(&text) || is_reference(&text) {
        return false;
    }
    let m = mix(value);
    let letters = m.upper || m.lower;
    let symbols = value.iter().any(|b| !b.is_ascii_alphanumeric());
    match (letters, m.digit, symbols) {
        // A PIN: digits alone. `12 characters` and `8-16 chars` are quantities, `2024-06-15` a date.
        (false, _, symbols) => !sentence_goes_on && !symbols,
        // A plain word: the password only if the sentence ends with it.
        (true, false, false) => {
            !sentence_goes_on && !NOT_PASSWORDS.contains(&text.to_ascii_lowercase().as_str())
        }
        // `case-sensitive`, `one-time` in a sentence; `Pa$$word` alone.
        (true, false, true) => !sentence_goes_on,
        (true, true, _) => true,
    }
}
