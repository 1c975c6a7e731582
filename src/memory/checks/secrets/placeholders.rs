//! Values that stand for a secret without being one: placeholders (masks, template slots,
//! environment references) and references (a link or a path saying where the secret is kept).
//! Both the credential-name checks and the shape detectors ask these before they speak.

use super::bytes::mix;

/// Values that say where something is rather than being a secret: a link (`https://vault…`; a URL
/// with a password in it is caught as a connection string) or a file path (`PWD=/srv/app`).
pub(super) fn is_reference(value: &str) -> bool {
    let path_like = ["/", "~/", "./", "../"].iter().any(|prefix| value.starts_with(prefix))
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-' | b'~'))
        && (value.matches('/').count() >= 2 || !value.bytes().any(|b| b.is_ascii_digit()));
    path_like || value.contains("://")
}

/// Values that stand for a secret without being one: masks (`********`), the words that say so
/// (`redacted`, `your_api_key_here`), environment references (`$DB_PASSWORD`, `%DB_PASSWORD%`),
/// and template slots with a template's whole shape: `${DB_PASSWORD}`, `{{ access_token }}`,
/// `{name}`, `%(name)s`, `<client secret>`, `[REDACTED]`. A value that merely starts with a bracket
/// is not one: `[Xk9#pL2qR]` and `{S3cretPw}` are passwords in brackets.
pub(super) fn is_placeholder(value: &str) -> bool {
    let t = value.trim().trim_matches(|c| c == '"' || c == '\'');
    if t.is_empty() || t.chars().all(|c| "*•●·xX#.-_?".contains(c)) {
        return true;
    }
    if is_template_slot(t) || t == "%s" {
        return true;
    }
    // `$DB_PASSWORD`, `%DB_PASSWORD%`: environment references.
    let env_name = |name: &str| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    if t.strip_prefix('$').is_some_and(env_name)
        || t.strip_prefix('%').and_then(|r| r.strip_suffix('%')).is_some_and(env_name)
    {
        return true;
    }
    let lower = t.to_lowercase();
    matches!(
        lower.as_str(),
        "redacted"
            | "hidden"
            | "masked"
            | "removed"
            | "none"
            | "null"
            | "nil"
            | "n/a"
            | "na"
            | "tbd"
            | "unknown"
            | "unset"
            | "not set"
            | "empty"
            | "placeholder"
            | "dummy"
            | "example"
    ) || lower.starts_with("your_")
        || lower.starts_with("your-")
        || lower.starts_with("your ")
}

/// A template slot, whole: an opening and its closing delimiter around a name. Variable slots
/// (`${…}`, `{{…}}`, `%(…)s`) hold an identifier, which may carry digits only in one letter case
/// (`${AWS_KEY_2}`, but not `${Xk9pL2}`); prose slots (`<…>`, `[…]`, `{…}`) hold words without
/// digits.
fn is_template_slot(t: &str) -> bool {
    let identifier = |name: &str| {
        let name = name.trim();
        let m = mix(name.as_bytes());
        name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
            && !(m.digit && m.upper && m.lower)
    };
    let words = |inner: &str| {
        !inner.trim().is_empty()
            && inner.len() <= 64
            && inner.chars().all(|c| c.is_alphabetic() || matches!(c, ' ' | '_' | '-' | '.'))
    };
    let between = |open: &str, close: &str| t.strip_prefix(open).and_then(|rest| rest.strip_suffix(close));
    between("${", "}").is_some_and(identifier)
        || between("{{", "}}").is_some_and(identifier)
        || between("%(", ")s").is_some_and(identifier)
        || between("<", ">").is_some_and(words)
        || between("[", "]").is_some_and(words)
        || between("{", "}").is_some_and(words)
}
