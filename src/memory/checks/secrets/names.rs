//! Names that say a credential follows: object keys (`db_password`, `botToken`) whose values are
//! credentials whatever they look like, and the `*_token` names that free text assigns a value to
//! (`"bot_token": "…"` inside a string). Both the key walk and the free-text password detector
//! read these lists, so a name caught as a key is caught the same inside text.

use super::SecretKind;

/// Key names whose values are credentials, compared after lower-casing and dropping everything
/// but letters and digits, as suffixes: `db_password`, `Client-Secret` and `openaiApiKey` match;
/// `password_hint`, `password_policy` and `secret_santa` do not.
const SENSITIVE_KEY_SUFFIXES: &[&str] = &[
    "password",
    "passwords",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "secrets",
    "apikey",
    "apikeys",
    "accesstoken",
    "refreshtoken",
    "authtoken",
    "sessiontoken",
    "bearertoken",
    "apitoken",
    "privatekey",
    "secretkey",
    "credentials",
];

/// Short names that are credentials only as the whole key (`pin`, but not `spin` or `pinned`;
/// `pass`, but not `bypass` or `compass`).
const SENSITIVE_WHOLE_KEYS: &[&str] = &["token", "pass", "pin", "pincode", "credential", "creds"];

/// `*_token` names that hold a cursor, a count or a tokenizer's special token (`"eos_token":
/// "</s>"` in a model's config) rather than a credential.
const NOT_SECRET_TOKENS: &[&str] = &[
    "pagetoken",
    "nextpagetoken",
    "continuationtoken",
    "paginationtoken",
    "cancellationtoken",
    "maxtoken",
    "padtoken",
    "unktoken",
    "bostoken",
    "eostoken",
    "septoken",
    "clstoken",
    "masktoken",
];

pub(super) fn sensitive_key(key: &str) -> Option<SecretKind> {
    let normalized: String =
        key.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect();
    let aws_secret = normalized.contains("secretaccesskey")
        || (normalized.contains("aws")
            && (normalized.ends_with("secret") || normalized.ends_with("secretkey")));
    let lower = key.to_lowercase();
    if aws_secret {
        Some(SecretKind::AwsSecretKey)
    } else if SENSITIVE_KEY_SUFFIXES.iter().any(|suffix| normalized.ends_with(suffix))
        || SENSITIVE_WHOLE_KEYS.contains(&normalized.as_str())
        || (ends_with_token_word(key) && !NOT_SECRET_TOKENS.contains(&normalized.as_str()))
        || ["密码", "口令", "пароль"].iter().any(|word| lower.ends_with(word))
    {
        Some(SecretKind::Password)
    } else {
        None
    }
}

/// `github_token`, `slack-token`, `botToken`, `X.Token`: a name whose last word is `token`
/// (`token_count` and `tokens` are not).
fn ends_with_token_word(key: &str) -> bool {
    let Some(stem) =
        key.strip_suffix("token").or_else(|| key.strip_suffix("Token")).or_else(|| key.strip_suffix("TOKEN"))
    else {
        return false;
    };
    let camel = key.ends_with("Token")
        && stem.chars().next_back().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    stem.ends_with(['_', '-', '.', ' ']) || camel
}

/// How far back from a `token` word the free-text check reads its name: far enough for every
/// name in `NOT_SECRET_TOKENS`, and a bound, so text of many `.token` words stays linear.
const NAME_WINDOW: usize = 32;

/// Whether the `token` at `start` in `text` is the last word of a credential's name in free text
/// (`"bot_token": "…"`, `slack-token=…`, `botToken: …`), by the rule for keys: joined to a word
/// before it by `_`, `-` or `.`, or camel case, and no cursor or count (`next_page_token`).
/// Prose's `token` alone, and `token_count` or `tokens`, are not.
pub(super) fn token_name_at(text: &[u8], start: usize) -> bool {
    let Some(&before) = start.checked_sub(1).and_then(|i| text.get(i)) else {
        return false;
    };
    let separated = matches!(before, b'_' | b'-' | b'.');
    let camel = text.get(start) == Some(&b'T') && (before.is_ascii_lowercase() || before.is_ascii_digit());
    if !(separated || camel) {
        return false;
    }
    let end = (start + "token".len()).min(text.len());
    let name_start = text[start.saturating_sub(NAME_WINDOW)..start]
        .iter()
        .rposition(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')))
        .map_or(start.saturating_sub(NAME_WINDOW), |p| start.saturating_sub(NAME_WINDOW) + p + 1);
    let normalized: String = text[name_start..end]
        .iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .map(|b| char::from(b.to_ascii_lowercase()))
        .collect();
    !NOT_SECRET_TOKENS.contains(&normalized.as_str())
}
