//! A record's `trigger_conditions`: parsed once into a compiled form, evaluated against each
//! request's words and values.
//!
//! The list is an OR: the first condition that matches fires the record, and is reported. An
//! `{"all": [...]}` item is an AND of plain conditions (groups do not nest). The shapes, which
//! `docs/triggers.md` documents for record writers:
//!
//! - a string: a comparison `satisfaction_score < 2` (`<` `<=` `>` `>=` `==` `=` `!=`; a number,
//!   or for `==`/`!=` a word or "quoted text"), or `mentions lawyer or sue` (also `contains`,
//!   `says`, `提到`, `упоминает`; terms split at `or`, `или`, ` 或 `, `,`, `;`, `、`, quotes kept
//!   together), or else one phrase matched as written;
//! - `{"keywords": ["lawyer", "律师", "адвокат*"]}`: any one of them (`text`);
//! - `{"regex": "refund.{0,20}(now|today)"}`: RE2-class, case-insensitive, size-limited;
//! - `{"entity": "email" | "phone" | "order_number"}`;
//! - `{"field": "satisfaction", "op": "<", "value": 2}`: a value the client passed;
//! - any object may carry `"name"`, which reports call the condition by.
//!
//! Everything that can be wrong with a condition is found by `parse` at write time (a 422 names
//! it by JSON path), so evaluation cannot fail: it only matches or not.

use super::input::{TriggerInput, valid_field};
use super::text::{self, EntityKind, Keyword};
use regex::{Regex, RegexBuilder};
use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::LazyLock;

pub const MAX_CONDITIONS: usize = 20;
pub const MAX_GROUP_PARTS: usize = 10;
pub const MAX_KEYWORDS: usize = 50;
pub const MAX_KEYWORD_CHARS: usize = 100;
pub const MAX_CONDITION_CHARS: usize = 300;
pub const MAX_PATTERN_CHARS: usize = 512;
pub const MAX_NAME_CHARS: usize = 100;
/// Compiled-program limits for a record's regex: enough for any reasonable pattern (a 50-word
/// alternation compiles to ~40 KiB), small enough that a hostile one costs little memory.
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;
pub const REGEX_DFA_SIZE_LIMIT: usize = 1024 * 1024;
const REGEX_NEST_LIMIT: u32 = 32;

/// The kind of problem `check_conditions` reports (the 422's `kind`).
pub const PROBLEM_KIND: &str = "invalid_trigger";

/// One thing wrong with a record's triggers, named by JSON path (`$.content.trigger_conditions[1].regex`).
/// The same shape as the memory service's problems, so it can pass them on as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConditionProblem {
    pub path: String,
    pub kind: String,
    pub message: String,
}

impl ConditionProblem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> ConditionProblem {
        ConditionProblem { path: path.into(), kind: PROBLEM_KIND.to_owned(), message: message.into() }
    }
}

/// The condition that fired a record, for explain, traces and the webhook body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Matched {
    /// Its position in `trigger_conditions`.
    pub index: usize,
    /// `phrase`, `keywords`, `regex`, `entity`, `compare` or `all`.
    pub kind: &'static str,
    /// The condition as the record wrote it.
    pub condition: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What of the condition matched, in the record's words: the keyword (`lawyer`), the entity
    /// kind, the comparison with the value seen (`satisfaction_score = 1`).
    pub hit: String,
    /// The person's words that matched (at most 200 characters). They are the conversation:
    /// a webhook body carries them only for endpoints with `include_conversation`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
}

/// A record's conditions, compiled.
#[derive(Debug, Clone)]
pub struct Conditions {
    items: Vec<Item>,
}

#[derive(Debug, Clone)]
struct Item {
    source: Value,
    name: Option<String>,
    test: Test,
}

#[derive(Debug, Clone)]
enum Test {
    /// A plain string that was neither a comparison nor a `mentions` list.
    Phrase(Keyword),
    Keywords(Vec<Keyword>),
    Regex(Regex),
    Entity(EntityKind),
    Compare {
        field: String,
        op: Op,
        operand: Operand,
    },
    All(Vec<Item>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Op {
    pub fn parse(text: &str) -> Option<Op> {
        Some(match text {
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            ">=" => Op::Ge,
            "==" | "=" => Op::Eq,
            "!=" => Op::Ne,
            _ => return None,
        })
    }

    fn orders(self) -> bool {
        matches!(self, Op::Lt | Op::Le | Op::Gt | Op::Ge)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Number(f64),
    /// Folded (compared case- and width-insensitively).
    Text(String),
}

/// `name <op> value` in a plain-string condition.
static COMPARISON: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^\s*([A-Za-z_][A-Za-z0-9_.\-]{0,63})\s*(<=|>=|==|!=|=|<|>)\s*(.+?)\s*$").ok()
});
/// `mentions …` (and its kin in the languages memgate's users write) in a plain-string condition.
static MENTIONS: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?is)^\s*(?:(?:mentions?|contains|says|упоминает|содержит)(?:\s*:\s*|\s+)|(?:提到|提及|包含)[:：]?\s*)(.+)$")
        .ok()
});
/// Where a `mentions` list splits: `or` and `или` as words, `或`/`或者` anywhere, punctuation.
static TERM_SEPARATOR: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)\s+(?:or|или)\s+|\s*或者?\s*|\s*[,;，；、]\s*").ok());

impl Conditions {
    /// Parses `trigger_conditions` (the array at `path`); every problem, by path, or the compiled
    /// conditions.
    pub fn parse(value: &Value, path: &str) -> Result<Conditions, Vec<ConditionProblem>> {
        let mut problems = Vec::new();
        let Value::Array(list) = value else {
            return Err(vec![ConditionProblem::new(path, "trigger_conditions is a list of conditions")]);
        };
        if list.is_empty() || list.len() > MAX_CONDITIONS {
            problems.push(ConditionProblem::new(
                path,
                format!("trigger_conditions holds 1 to {MAX_CONDITIONS} conditions (got {})", list.len()),
            ));
        }
        // Past the limit the list is refused anyway: what follows it is not compiled (a record
        // of thousands of regexes would cost seconds and hundreds of MiB to say no).
        let mut items = Vec::with_capacity(list.len().min(MAX_CONDITIONS));
        for (i, item) in list.iter().enumerate().take(MAX_CONDITIONS) {
            if let Some(item) = parse_item(item, &format!("{path}[{i}]"), true, &mut problems) {
                items.push(item);
            }
        }
        if problems.is_empty() { Ok(Conditions { items }) } else { Err(problems) }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The first condition that matches `input`, if any.
    pub fn evaluate(&self, input: &TriggerInput<'_>) -> Option<Matched> {
        self.items.iter().enumerate().find_map(|(index, item)| {
            let (hit, excerpt) = item.test.check(input)?;
            Some(Matched {
                index,
                kind: item.test.kind(),
                condition: item.source.clone(),
                name: item.name.clone(),
                hit,
                excerpt: excerpt.map(|e| text::excerpt(&e)),
            })
        })
    }
}

impl Test {
    fn kind(&self) -> &'static str {
        match self {
            Test::Phrase(_) => "phrase",
            Test::Keywords(_) => "keywords",
            Test::Regex(_) => "regex",
            Test::Entity(_) => "entity",
            Test::Compare { .. } => "compare",
            Test::All(_) => "all",
        }
    }

    /// `(hit, excerpt of the words)` when the test passes.
    fn check(&self, input: &TriggerInput<'_>) -> Option<(String, Option<String>)> {
        match self {
            Test::Phrase(keyword) => {
                let found = keyword.find(&input.prepared().folded)?;
                Some((keyword.written.clone(), Some(found.to_owned())))
            }
            Test::Keywords(keywords) => keywords.iter().find_map(|keyword| {
                let found = keyword.find(&input.prepared().folded)?;
                Some((keyword.written.clone(), Some(found.to_owned())))
            }),
            Test::Regex(regex) => {
                let found = regex.find(&input.prepared().normalized)?;
                Some((format!("/{}/", regex.as_str()), Some(found.as_str().to_owned())))
            }
            Test::Entity(kind) => {
                let found = kind.find(&input.prepared().normalized)?;
                Some((kind.as_str().to_owned(), Some(found.to_owned())))
            }
            Test::Compare { field, op, operand } => {
                let seen = input.values.get(field)?;
                compare(seen, *op, operand).then(|| (format!("{field} = {}", shown(seen)), None))
            }
            Test::All(parts) => {
                let mut hits = Vec::with_capacity(parts.len());
                let mut excerpts = Vec::new();
                for part in parts {
                    let (hit, excerpt) = part.test.check(input)?;
                    hits.push(hit);
                    excerpts.extend(excerpt);
                }
                let excerpt = (!excerpts.is_empty()).then(|| excerpts.join(" … "));
                Some((hits.join(" and "), excerpt))
            }
        }
    }
}

/// `seen <op> operand`. A number compares with a number, or a string that reads as one (a header
/// carries text); text compares folded. A value of another type never matches.
fn compare(seen: &Value, op: Op, operand: &Operand) -> bool {
    match operand {
        Operand::Number(want) => {
            let got = match seen {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => s.trim().parse::<f64>().ok().filter(|n| n.is_finite()),
                _ => None,
            };
            let Some(got) = got else { return false };
            match op {
                Op::Lt => got < *want,
                Op::Le => got <= *want,
                Op::Gt => got > *want,
                Op::Ge => got >= *want,
                Op::Eq => got == *want,
                Op::Ne => got != *want,
            }
        }
        Operand::Text(want) => {
            let got = match seen {
                Value::String(s) => text::fold(s),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return false,
            };
            match op {
                Op::Eq => got == *want,
                Op::Ne => got != *want,
                _ => false,
            }
        }
    }
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => text::excerpt(s),
        other => text::excerpt(&other.to_string()),
    }
}

fn parse_item(value: &Value, path: &str, top: bool, problems: &mut Vec<ConditionProblem>) -> Option<Item> {
    let before = problems.len();
    let (name, test) = match value {
        Value::String(written) => (None, parse_string(written, path, problems)),
        Value::Object(map) => parse_object(map, path, top, problems),
        _ => {
            problems.push(ConditionProblem::new(
                path,
                "a condition is a string (\"satisfaction_score < 2\", \"mentions lawyer or sue\") or an \
                 object ({\"keywords\": [...]}, {\"regex\": \"...\"}, {\"entity\": \"email\"}, \
                 {\"field\": ..., \"op\": ..., \"value\": ...}, {\"all\": [...]})",
            ));
            (None, None)
        }
    };
    let test = test.filter(|_| problems.len() == before)?;
    Some(Item { source: value.clone(), name, test })
}

fn parse_string(written: &str, path: &str, problems: &mut Vec<ConditionProblem>) -> Option<Test> {
    let chars = written.chars().count();
    if written.trim().is_empty() || chars > MAX_CONDITION_CHARS {
        problems.push(ConditionProblem::new(
            path,
            format!("a condition string has 1 to {MAX_CONDITION_CHARS} characters (got {chars})"),
        ));
        return None;
    }
    if let Some(caps) = COMPARISON.as_ref().and_then(|re| re.captures(written)) {
        let field = caps.get(1).map_or("", |m| m.as_str());
        let op_text = caps.get(2).map_or("", |m| m.as_str());
        let raw = caps.get(3).map_or("", |m| m.as_str());
        let op = Op::parse(op_text)?;
        let unquoted = unquote(raw);
        let operand = match (unquoted == raw).then(|| raw.parse::<f64>().ok()).flatten() {
            Some(n) if n.is_finite() => Operand::Number(n),
            _ => Operand::Text(text::fold(unquoted)),
        };
        return compare_test(field, op, operand, path, problems);
    }
    if let Some(caps) = MENTIONS.as_ref().and_then(|re| re.captures(written)) {
        let list = caps.get(1).map_or("", |m| m.as_str());
        let terms = split_terms(list);
        if terms.is_empty() {
            problems
                .push(ConditionProblem::new(path, "`mentions` needs at least one word or phrase after it"));
            return None;
        }
        let keywords = keywords_from(terms.iter().map(String::as_str), path, problems)?;
        return Some(Test::Keywords(keywords));
    }
    match Keyword::new(written) {
        Some(keyword) => Some(Test::Phrase(keyword)),
        None => {
            problems
                .push(ConditionProblem::new(path, "the phrase has nothing to match once `*` is taken off"));
            None
        }
    }
}

/// The terms of a `mentions` list. A quoted term ("lawyer, or else") is kept whole.
fn split_terms(list: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut rest = list.trim();
    while !rest.is_empty() {
        if let Some((open, close)) = QUOTES.iter().find(|(open, _)| rest.starts_with(*open)) {
            let inner = &rest[open.len_utf8()..];
            if let Some(end) = inner.find(*close) {
                terms.push(inner[..end].trim().to_owned());
                rest = inner[end + close.len_utf8()..].trim_start();
                // Past the separator that follows, if any.
                if let Some(m) =
                    TERM_SEPARATOR.as_ref().and_then(|re| re.find(rest)).filter(|m| m.start() == 0)
                {
                    rest = rest[m.end()..].trim_start();
                } else if let Some(after) = rest.strip_prefix(|c: char| c.is_whitespace()) {
                    rest = after.trim_start();
                }
                continue;
            }
        }
        let cut = TERM_SEPARATOR.as_ref().and_then(|re| re.find(rest));
        let (term, next) = match cut {
            Some(m) => (&rest[..m.start()], &rest[m.end()..]),
            None => (rest, ""),
        };
        terms.push(term.trim().to_owned());
        rest = next.trim_start();
    }
    terms.retain(|t| !t.is_empty());
    terms
}

const QUOTES: [(char, char); 6] =
    [('"', '"'), ('\'', '\''), ('“', '”'), ('‘', '’'), ('«', '»'), ('「', '」')];

fn unquote(raw: &str) -> &str {
    for (open, close) in QUOTES {
        if let Some(inner) = raw.strip_prefix(open).and_then(|r| r.strip_suffix(close)) {
            return inner;
        }
    }
    raw
}

fn compare_test(
    field: &str,
    op: Op,
    operand: Operand,
    path: &str,
    problems: &mut Vec<ConditionProblem>,
) -> Option<Test> {
    if op.orders() && !matches!(operand, Operand::Number(_)) {
        problems.push(ConditionProblem::new(
            path,
            "<, <=, > and >= compare numbers: write a number after the operator (satisfaction_score < 2)",
        ));
        return None;
    }
    Some(Test::Compare { field: field.to_owned(), op, operand })
}

fn keywords_from<'k>(
    terms: impl Iterator<Item = &'k str>,
    path: &str,
    problems: &mut Vec<ConditionProblem>,
) -> Option<Vec<Keyword>> {
    let before = problems.len();
    let mut keywords = Vec::new();
    for (i, term) in terms.enumerate() {
        let chars = term.chars().count();
        if chars > MAX_KEYWORD_CHARS {
            problems.push(ConditionProblem::new(
                format!("{path}[{i}]"),
                format!("a keyword has at most {MAX_KEYWORD_CHARS} characters (got {chars})"),
            ));
            continue;
        }
        match Keyword::new(term) {
            Some(keyword) => keywords.push(keyword),
            None => problems.push(ConditionProblem::new(
                format!("{path}[{i}]"),
                "a keyword needs at least one character besides spaces and a trailing `*`",
            )),
        }
    }
    if keywords.len() > MAX_KEYWORDS {
        problems.push(ConditionProblem::new(
            path,
            format!("at most {MAX_KEYWORDS} keywords (got {})", keywords.len()),
        ));
    }
    (problems.len() == before).then_some(keywords)
}

const OBJECT_KEYS: [&str; 8] = ["name", "keywords", "regex", "entity", "field", "op", "value", "all"];

fn parse_object(
    map: &Map<String, Value>,
    path: &str,
    top: bool,
    problems: &mut Vec<ConditionProblem>,
) -> (Option<String>, Option<Test>) {
    let unknown = |key: &str| !OBJECT_KEYS.contains(&key) || (key == "all" && !top);
    unknown_fields(map, path, unknown, problems, |key| {
        if key == "all" {
            "groups do not nest: the parts of an `all` group are plain conditions".to_owned()
        } else {
            format!(
                "`{}` is not a condition field; a condition has one of keywords, regex, entity, \
                 field (with op and value) or all, and may have a name",
                key.chars().take(40).collect::<String>()
            )
        }
    });
    let name = match map.get("name") {
        None => None,
        Some(Value::String(name)) if !name.trim().is_empty() && name.chars().count() <= MAX_NAME_CHARS => {
            Some(name.clone())
        }
        Some(_) => {
            problems.push(ConditionProblem::new(
                format!("{path}.name"),
                format!("a condition's name is a string of 1 to {MAX_NAME_CHARS} characters"),
            ));
            None
        }
    };
    let kinds: Vec<&str> = ["keywords", "regex", "entity", "field", "all"]
        .into_iter()
        .filter(|k| map.contains_key(*k) && (top || *k != "all"))
        .collect();
    if kinds.len() != 1 {
        problems.push(ConditionProblem::new(
            path,
            if kinds.is_empty() {
                "a condition object needs one of keywords, regex, entity, field (with op and value) or all"
                    .to_owned()
            } else {
                format!(
                    "a condition object has exactly one of keywords, regex, entity, field or all (got {})",
                    kinds.join(", ")
                )
            },
        ));
        return (name, None);
    }
    if kinds[0] != "field" {
        for key in ["op", "value"] {
            if map.contains_key(key) {
                problems.push(ConditionProblem::new(
                    format!("{path}.{key}"),
                    format!("`{key}` belongs to a comparison ({{\"field\", \"op\", \"value\"}})"),
                ));
            }
        }
    }
    let test = match kinds[0] {
        "keywords" => parse_keywords(&map["keywords"], &format!("{path}.keywords"), problems),
        "regex" => parse_regex(&map["regex"], &format!("{path}.regex"), problems),
        "entity" => parse_entity(&map["entity"], &format!("{path}.entity"), problems),
        "field" => parse_comparison(map, path, problems),
        _ => parse_group(&map["all"], &format!("{path}.all"), problems),
    };
    (name, test)
}

/// Unknown fields reported by path, at most; past them one problem says how many more.
const MAX_FIELD_PROBLEMS: usize = 10;
/// The longest field name a path quotes whole; a longer one is cut (`["aaaa…"]`).
const MAX_PATH_KEY_CHARS: usize = 100;

/// Reports the fields of `map` that `unknown` picks, each by path with `message` (at most
/// `MAX_FIELD_PROBLEMS` of them, then how many more): an object of thousands of made-up fields
/// gets a short answer, cheaply.
pub(super) fn unknown_fields(
    map: &Map<String, Value>,
    path: &str,
    unknown: impl Fn(&str) -> bool,
    problems: &mut Vec<ConditionProblem>,
    message: impl Fn(&str) -> String,
) {
    let mut more = 0usize;
    let mut reported = 0;
    for key in map.keys().filter(|key| unknown(key)) {
        if reported == MAX_FIELD_PROBLEMS {
            more += 1;
            continue;
        }
        reported += 1;
        problems.push(ConditionProblem::new(format!("{path}.{}", path_key(key)), message(key)));
    }
    if more > 0 {
        problems.push(ConditionProblem::new(path, format!("and {more} more fields that do not belong here")));
    }
}

fn path_key(key: &str) -> String {
    if !key.is_empty()
        && key.len() <= MAX_PATH_KEY_CHARS
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit())
    {
        key.to_owned()
    } else if key.chars().nth(MAX_PATH_KEY_CHARS).is_some() {
        let cut: String = key.chars().take(MAX_PATH_KEY_CHARS).collect();
        format!("[{}]", Value::String(cut + "…"))
    } else {
        format!("[{}]", Value::String(key.to_owned()))
    }
}

fn parse_keywords(value: &Value, path: &str, problems: &mut Vec<ConditionProblem>) -> Option<Test> {
    let Value::Array(list) = value else {
        problems.push(ConditionProblem::new(path, "keywords is a list of words or phrases"));
        return None;
    };
    if list.is_empty() || list.len() > MAX_KEYWORDS {
        problems.push(ConditionProblem::new(
            path,
            format!("keywords holds 1 to {MAX_KEYWORDS} words or phrases (got {})", list.len()),
        ));
        return None;
    }
    let before = problems.len();
    // A non-string keeps its place, so the problems of the strings after it keep their index.
    let terms = list.iter().map(|item| item.as_str().unwrap_or(""));
    let keywords = keywords_from(terms, path, problems);
    for (i, item) in list.iter().enumerate() {
        if !item.is_string()
            && let Some(p) = problems[before..].iter_mut().find(|p| p.path == format!("{path}[{i}]"))
        {
            p.message = "a keyword is a string".to_owned();
        }
    }
    keywords.map(Test::Keywords)
}

/// Compiles a record's regex within the limits; every failure is a problem that says what to fix
/// without quoting the pattern back.
pub fn compile_regex(pattern: &str) -> Result<Regex, String> {
    let chars = pattern.chars().count();
    if pattern.is_empty() || chars > MAX_PATTERN_CHARS {
        return Err(format!("a regex has 1 to {MAX_PATTERN_CHARS} characters (got {chars})"));
    }
    let regex = RegexBuilder::new(pattern)
        .case_insensitive(true)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_SIZE_LIMIT)
        .nest_limit(REGEX_NEST_LIMIT)
        .build()
        .map_err(|err| match err {
            regex::Error::CompiledTooBig(limit) => format!(
                "the regex is too large once compiled (over {limit} bytes): use fewer or shorter \
                 alternatives, or bounded repetitions"
            ),
            regex::Error::Syntax(message) => {
                // The parser's message quotes the pattern; keep only its last line, the reason.
                let reason =
                    message.lines().rev().find(|l| l.starts_with("error:")).unwrap_or("syntax error");
                format!(
                    "the regex does not compile ({}); memgate uses RE2 syntax: no look-around, no \
                     back-references",
                    reason.trim_start_matches("error:").trim()
                )
            }
            _ => "the regex does not compile".to_owned(),
        })?;
    if regex.is_match("") {
        return Err("the regex matches empty text, so it would fire on every request".to_owned());
    }
    Ok(regex)
}

fn parse_regex(value: &Value, path: &str, problems: &mut Vec<ConditionProblem>) -> Option<Test> {
    let Value::String(pattern) = value else {
        problems.push(ConditionProblem::new(path, "regex is a string"));
        return None;
    };
    match compile_regex(pattern) {
        Ok(regex) => Some(Test::Regex(regex)),
        Err(message) => {
            problems.push(ConditionProblem::new(path, message));
            None
        }
    }
}

fn parse_entity(value: &Value, path: &str, problems: &mut Vec<ConditionProblem>) -> Option<Test> {
    match value.as_str().and_then(EntityKind::parse) {
        Some(kind) => Some(Test::Entity(kind)),
        None => {
            problems
                .push(ConditionProblem::new(path, "entity is one of \"email\", \"phone\", \"order_number\""));
            None
        }
    }
}

fn parse_comparison(
    map: &Map<String, Value>,
    path: &str,
    problems: &mut Vec<ConditionProblem>,
) -> Option<Test> {
    let before = problems.len();
    let field = match map.get("field") {
        Some(Value::String(field)) if valid_field(field) => Some(field.clone()),
        _ => {
            problems.push(ConditionProblem::new(
                format!("{path}.field"),
                "field names a value the client passes: a letter or `_`, then letters, digits, `_`, `.` \
                 or `-` (64 at most)",
            ));
            None
        }
    };
    let op = match map.get("op") {
        Some(Value::String(op)) if op != "=" => Op::parse(op),
        None => {
            problems.push(ConditionProblem::new(format!("{path}.op"), "a comparison needs `op`"));
            None
        }
        _ => None,
    };
    if map.get("op").is_some() && op.is_none() {
        problems.push(ConditionProblem::new(format!("{path}.op"), "op is one of <, <=, >, >=, ==, !="));
    }
    let operand = match map.get("value") {
        Some(Value::Number(n)) => n.as_f64().filter(|n| n.is_finite()).map(Operand::Number),
        Some(Value::String(s)) if s.chars().count() <= 200 => Some(Operand::Text(text::fold(s))),
        None => {
            problems.push(ConditionProblem::new(format!("{path}.value"), "a comparison needs `value`"));
            None
        }
        Some(_) => {
            problems.push(ConditionProblem::new(
                format!("{path}.value"),
                "value is a number, or for == and != a string of at most 200 characters",
            ));
            None
        }
    };
    let (Some(field), Some(op), Some(operand)) = (field, op, operand) else { return None };
    let test = compare_test(&field, op, operand, &format!("{path}.value"), problems);
    test.filter(|_| problems.len() == before)
}

fn parse_group(value: &Value, path: &str, problems: &mut Vec<ConditionProblem>) -> Option<Test> {
    let Value::Array(list) = value else {
        problems.push(ConditionProblem::new(path, "all is a list of conditions that must all match"));
        return None;
    };
    if list.is_empty() || list.len() > MAX_GROUP_PARTS {
        problems.push(ConditionProblem::new(
            path,
            format!("an `all` group holds 1 to {MAX_GROUP_PARTS} conditions (got {})", list.len()),
        ));
        return None;
    }
    let before = problems.len();
    let parts: Vec<Item> = list
        .iter()
        .enumerate()
        .filter_map(|(i, part)| parse_item(part, &format!("{path}[{i}]"), false, problems))
        .collect();
    (problems.len() == before).then_some(Test::All(parts))
}

#[cfg(test)]
#[path = "conditions_tests.rs"]
mod tests;
