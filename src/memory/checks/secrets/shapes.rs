//! Credentials recognised by their shape: a known prefix and enough random-looking characters
//! after it, a decodable JWT header, a PEM body, a URL with a password in it. Each detector is a
//! linear scan over the bytes; none reads past the end of its input, whatever the input is.

use super::bytes::{is_base64url_byte, is_token_byte, mix, positions, run_len, token_starts_at};
use super::placeholders::is_placeholder;
use serde_json::Value;

/// `-----BEGIN … PRIVATE KEY-----` followed by a key body. A header alone (a runbook saying
/// what such a file starts with) is not a key.
pub(super) fn has_private_key(lower: &[u8]) -> bool {
    positions(lower, b"-----begin ").any(|start| {
        let label_start = start + b"-----begin ".len();
        let label_window = &lower[label_start..lower.len().min(label_start + 80)];
        let Some(label_len) = positions(label_window, b"-----").next() else {
            return false;
        };
        let label = &lower[label_start..label_start + label_len];
        if positions(label, b"private key").next().is_none() {
            return false;
        }
        // Key bodies come in 64-character lines; prose has no such runs. The first line follows
        // the header closely (after at most a few `Proc-Type:` lines).
        let body_start = label_start + label_len + 5;
        let body = &lower[body_start..lower.len().min(body_start + 512)];
        let body_end = positions(body, b"-----end").next().unwrap_or(body.len());
        body[..body_end]
            .split(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')))
            .any(|run| run.len() >= 24)
    })
}

/// Three base64url segments whose first decodes to a JSON object with `alg`.
pub(super) fn has_jwt(bytes: &[u8]) -> bool {
    positions(bytes, b"eyJ").any(|start| {
        if start > 0 && (is_base64url_byte(bytes[start - 1]) || bytes[start - 1] == b'.') {
            return false;
        }
        let header_len = run_len(bytes, start, is_base64url_byte);
        let payload_start = start + header_len + 1;
        if header_len < 10 || bytes.get(payload_start - 1) != Some(&b'.') {
            return false;
        }
        let payload_len = run_len(bytes, payload_start, is_base64url_byte);
        let signature_start = payload_start + payload_len + 1;
        if payload_len < 2 || bytes.get(signature_start - 1) != Some(&b'.') {
            return false;
        }
        if run_len(bytes, signature_start, is_base64url_byte) < 8 {
            return false;
        }
        base64url_decode(&bytes[start..start + header_len])
            .and_then(|header| serde_json::from_slice::<Value>(&header).ok())
            .is_some_and(|header| header.get("alg").is_some())
    })
}

fn base64url_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len() * 3 / 4);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &b in input {
        let sextet = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((buffer >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

/// `sk-ant-` and at least 20 more key characters, some of them digits.
pub(super) fn has_anthropic_key(bytes: &[u8]) -> bool {
    positions(bytes, b"sk-ant-").any(|start| {
        if !token_starts_at(bytes, start) {
            return false;
        }
        let body_start = start + b"sk-ant-".len();
        let body_len = run_len(bytes, body_start, is_token_byte);
        body_len >= 20 && mix(&bytes[body_start..body_start + body_len]).digit
    })
}

/// `sk-` (including `sk-proj-`, `sk-svcacct-`, …) followed by a long random-looking run: at least
/// 32 characters mixing upper case, lower case and digits. Slugs like `sk-ii-facial-essence` or
/// `sk-items` are words, not keys.
pub(super) fn has_openai_key(bytes: &[u8]) -> bool {
    positions(bytes, b"sk-").any(|start| {
        let body_start = start + 3;
        if !token_starts_at(bytes, start) || bytes[body_start..].starts_with(b"ant-") {
            return false;
        }
        let body_len = run_len(bytes, body_start, is_token_byte);
        let m = mix(&bytes[body_start..body_start + body_len]);
        body_len >= 32 && m.upper && m.lower && m.digit
    })
}

/// Classic tokens (`ghp_` and kin, 36 characters) and fine-grained `github_pat_` tokens.
pub(super) fn has_github_token(bytes: &[u8]) -> bool {
    let classic = [b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"].iter().any(|prefix| {
        positions(bytes, *prefix).any(|start| {
            token_starts_at(bytes, start) && run_len(bytes, start + 4, |b| b.is_ascii_alphanumeric()) >= 36
        })
    });
    classic
        || positions(bytes, b"github_pat_").any(|start| {
            token_starts_at(bytes, start)
                && run_len(bytes, start + 11, |b| b.is_ascii_alphanumeric() || b == b'_') >= 40
        })
}

/// `xoxb-` and kin with a numeric body, and incoming-webhook URLs.
pub(super) fn has_slack_token(bytes: &[u8], lower: &[u8]) -> bool {
    let token = [b"xoxb-", b"xoxp-", b"xoxa-", b"xoxr-", b"xoxs-", b"xoxe-"].iter().any(|prefix| {
        positions(bytes, *prefix).any(|start| {
            if !token_starts_at(bytes, start) {
                return false;
            }
            let body_start = start + 5;
            let body_len = run_len(bytes, body_start, |b| b.is_ascii_alphanumeric() || b == b'-');
            body_len >= 10 && mix(&bytes[body_start..body_start + body_len]).digit
        })
    });
    let marker = b"hooks.slack.com/services/";
    token
        || positions(lower, marker).any(|start| {
            run_len(bytes, start + marker.len(), |b| b.is_ascii_alphanumeric() || b == b'/' || b == b'_')
                >= 20
        })
}

/// `AKIA` or `ASIA` and 16 upper-case letters or digits, standing alone.
pub(super) fn has_aws_access_key(bytes: &[u8]) -> bool {
    [b"AKIA", b"ASIA"].iter().any(|prefix| {
        positions(bytes, *prefix).any(|start| {
            if start > 0 && bytes[start - 1].is_ascii_alphanumeric() {
                return false;
            }
            let body = run_len(bytes, start + 4, |b| b.is_ascii_uppercase() || b.is_ascii_digit());
            body == 16 && bytes.get(start + 20).is_none_or(|b| !b.is_ascii_alphanumeric())
        })
    })
}

/// A 40-character base64 run on the same line as a name like `aws_secret_access_key`. Without
/// the name a 40-character run is as likely a SHA-1 or a file digest.
pub(super) fn has_aws_secret_key(bytes: &[u8], lower: &[u8]) -> bool {
    let is_b64 = |b: u8| b.is_ascii_alphanumeric() || b == b'/' || b == b'+';
    let mut i = 0;
    while i < bytes.len() {
        if !is_b64(bytes[i]) {
            i += 1;
            continue;
        }
        let len = run_len(bytes, i, is_b64);
        let m = mix(&bytes[i..i + len]);
        if len == 40 && m.upper && m.lower {
            let line_start =
                lower[..i].iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1).max(i.saturating_sub(100));
            let context: Vec<u8> =
                lower[line_start..i].iter().copied().filter(u8::is_ascii_alphanumeric).collect();
            if positions(&context, b"secretaccesskey").next().is_some()
                || positions(&context, b"awssecret").next().is_some()
            {
                return true;
            }
        }
        i += len;
    }
    false
}

/// `scheme://user:password@host`: a URL whose authority carries a password.
pub(super) fn has_connection_string_credential(bytes: &[u8]) -> bool {
    positions(bytes, b"://").any(|sep| {
        let scheme_len = bytes[..sep]
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'))
            .count();
        if scheme_len == 0 || !bytes[sep - scheme_len].is_ascii_alphabetic() {
            return false;
        }
        let authority_start = sep + 3;
        let authority_len = run_len(bytes, authority_start, |b| {
            !b.is_ascii_whitespace() && !matches!(b, b'/' | b'?' | b'#' | b'"' | b'\'' | b'<' | b'>' | b'`')
        });
        let authority = &bytes[authority_start..authority_start + authority_len];
        let Some(at) = authority.iter().rposition(|b| *b == b'@') else {
            return false;
        };
        let userinfo = &authority[..at];
        let Some(colon) = userinfo.iter().position(|b| *b == b':') else {
            return false;
        };
        let password = String::from_utf8_lossy(&userinfo[colon + 1..]);
        !is_placeholder(&password)
    })
}

/// A prefix, then at least `min` characters of `allowed`, the token standing alone (not the tail
/// of a longer word), with letters and digits both in the body: what every vendor's random
/// token looks like and no slug or word does.
fn prefixed_token(bytes: &[u8], prefix: &[u8], min: usize, allowed: impl Fn(u8) -> bool + Copy) -> bool {
    positions(bytes, prefix).any(|start| {
        if !token_starts_at(bytes, start) {
            return false;
        }
        let body_start = start + prefix.len();
        let body_len = run_len(bytes, body_start, allowed);
        let m = mix(&bytes[body_start..body_start + body_len]);
        body_len >= min && m.digit && (m.upper || m.lower)
    })
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// GitLab personal, project and group access tokens: `glpat-` and 20 characters.
pub(super) fn has_gitlab_token(bytes: &[u8]) -> bool {
    prefixed_token(bytes, b"glpat-", 20, is_token_byte)
}

/// Stripe secret and restricted keys (`sk_live_`, `sk_test_`, `rk_live_`, `rk_test_`). The
/// publishable `pk_` keys are meant to be public.
pub(super) fn has_stripe_key(bytes: &[u8]) -> bool {
    [b"sk_live_", b"sk_test_", b"rk_live_", b"rk_test_"]
        .iter()
        .any(|prefix| prefixed_token(bytes, *prefix, 16, is_alnum))
}

/// Google API keys: `AIza` and 35 characters.
pub(super) fn has_google_api_key(bytes: &[u8]) -> bool {
    prefixed_token(bytes, b"AIza", 30, is_token_byte)
}

/// Hugging Face user access tokens: `hf_` and 30-odd letters (and digits).
pub(super) fn has_hugging_face_token(bytes: &[u8]) -> bool {
    positions(bytes, b"hf_").any(|start| {
        let body_len = run_len(bytes, start + 3, is_alnum);
        let m = mix(&bytes[start + 3..start + 3 + body_len]);
        // Real tokens mix cases; `hf_` + a snake_case word never reaches 30 letters in one run.
        token_starts_at(bytes, start) && body_len >= 30 && m.upper && m.lower
    })
}

/// npm access tokens: `npm_` and 36 letters and digits.
pub(super) fn has_npm_token(bytes: &[u8]) -> bool {
    prefixed_token(bytes, b"npm_", 36, is_alnum)
}

/// memgate's own gateway keys: `mgk_<16 hex>_<secret>`.
pub(super) fn has_memgate_key(bytes: &[u8]) -> bool {
    positions(bytes, b"mgk_").any(|start| {
        let id_len = run_len(bytes, start + 4, |b| b.is_ascii_hexdigit());
        let secret_start = start + 4 + id_len + 1;
        token_starts_at(bytes, start)
            && id_len == 16
            && bytes.get(secret_start - 1) == Some(&b'_')
            && run_len(bytes, secret_start, is_alnum) >= 32
    })
}

/// Webhook signing secrets as Standard Webhooks and Stripe write them: `whsec_` and base64.
pub(super) fn has_webhook_secret(bytes: &[u8]) -> bool {
    prefixed_token(bytes, b"whsec_", 24, |b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
}

/// `Authorization: Bearer <opaque token>`: `bearer` and one space, then a run of at least 16
/// token characters mixing letters and digits. `Bearer token` or `Bearer <your token>` in a runbook
/// is prose; a JWT after `Bearer` is reported as the JWT it is.
pub(super) fn has_bearer_token(bytes: &[u8], lower: &[u8]) -> bool {
    positions(lower, b"bearer ").any(|start| {
        if !token_starts_at(bytes, start) {
            return false;
        }
        let mut body_start = start + b"bearer ".len();
        body_start += run_len(bytes, body_start, |b| b == b' ');
        let body_len = run_len(bytes, body_start, |b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b));
        let body = &bytes[body_start..body_start + body_len];
        let m = mix(body);
        body_len >= 16 && m.digit && (m.upper || m.lower) && !is_placeholder(&String::from_utf8_lossy(body))
    })
}
