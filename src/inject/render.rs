//! Rendering the `<MEMORY_CONTEXT>` block from a release's template.
//!
//! Safety does not depend on the template author. Every record reaches the template as a finished
//! line of JSON from [`record_line`], with `<`, `>` and `&` already escaped, so a template has no
//! unescaped record text to print. Every rendered block is then checked (`check_block`): it must
//! open with exactly this release's tag, close with exactly one closing tag, and hold no other.
//! Templates are compiled once, with `UndefinedBehavior::Strict`, and each is rendered against a
//! sample at load, so a typo in a variable name stops startup instead of failing requests.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, UndefinedBehavior, Value as TemplateValue};
use serde::Serialize;
use serde_json::Value;

/// The file in `templates/<release>/` holding the block's template.
pub const TEMPLATE_FILE: &str = "memory.j2";
/// The file in `templates/<release>/` holding the contract placed in front of the records.
pub const CONTRACT_FILE: &str = "contract.txt";
/// The release used when configuration names none: v4 (compact lines, the standout cut,
/// neighbours), the one whose measured retrieval meets its goals (docs/benchmarks.md,
/// "Retrieval"). A store's default decides what every caller without a rollout gets.
pub const DEFAULT_RELEASE: &str = "v4";

const CLOSING_TAG: &str = "</MEMORY_CONTEXT>";

/// The variables a template may use, besides minijinja's own globals (`range`, `namespace`, …).
const CONTEXT_VARIABLES: &[&str] =
    &["release", "contract", "records", "compact_records", "count", "stub_count", "groups"];

/// One record to inject, already chosen and ordered by the funnel.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderItem<'a> {
    pub id: Cow<'a, str>,
    pub record_type: Cow<'a, str>,
    pub priority: u8,
    /// RFC 3339, as the store keeps it.
    pub updated_at: String,
    /// Borrowed from the record the funnel chose: a request's block is rendered from the bodies
    /// it read, not from copies of them.
    pub content: Cow<'a, Value>,
    /// `Some(summary)` for a one-line stub of a record that did not fit the budget; the line then
    /// carries `"stub"` instead of `"content"`.
    pub stub: Option<String>,
    /// Who said this, for a record an operator did not write (`written_by` on its line, after
    /// `type`): the model reads it as what someone said, not as operator policy.
    pub written_by: Option<&'static str>,
}

impl<'a> RenderItem<'a> {
    /// `record` injected in full (no stub), borrowing its strings and content.
    pub fn of(record: &'a crate::record::Record) -> RenderItem<'a> {
        RenderItem {
            id: Cow::Borrowed(&record.id),
            record_type: Cow::Borrowed(&record.record_type),
            priority: record.priority,
            updated_at: crate::clock::format_ms(record.updated_at_ms),
            content: Cow::Borrowed(&record.content),
            stub: None,
            written_by: None,
        }
    }

    /// The same item, with its line saying who wrote the record when an operator did not.
    pub fn framed(mut self, writer: crate::record::WriterKind) -> RenderItem<'a> {
        self.written_by = written_by(writer);
        self
    }

    /// The same item owning what it borrowed.
    pub fn into_owned(self) -> RenderItem<'static> {
        RenderItem {
            id: Cow::Owned(self.id.into_owned()),
            record_type: Cow::Owned(self.record_type.into_owned()),
            priority: self.priority,
            updated_at: self.updated_at,
            content: Cow::Owned(self.content.into_owned()),
            stub: self.stub,
            written_by: self.written_by,
        }
    }
}

/// Why templates could not be loaded or a block could not be rendered. Load errors name the file.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "no memory releases under {dir}: add a folder {dir}/<release>/ with {TEMPLATE_FILE} and {CONTRACT_FILE}"
    )]
    NoReleases { dir: PathBuf },
    #[error(
        "release name `{name}` ({path}): use letters, digits, '.', '_' and '-', starting with a letter or digit"
    )]
    BadReleaseName { name: String, path: PathBuf },
    #[error("{path} is empty: write the contract that goes in front of the records")]
    EmptyContract { path: PathBuf },
    #[error("template {path} does not compile: {message}")]
    Compile { path: PathBuf, message: String },
    #[error("template {path} uses undefined variable(s) {names}; a template may use {allowed}")]
    UndefinedVariables { path: PathBuf, names: String, allowed: String },
    #[error("template {path} fails on a sample render: {message}")]
    Sample { path: PathBuf, message: String },
    #[error("unknown memory release `{release}` (known: {known})")]
    UnknownRelease { release: String, known: String },
    #[error("rendering release `{release}` failed: {message}")]
    Render { release: String, message: String },
    #[error("release `{release}` rendered an unsafe block: {reason}; fix its template or contract")]
    UnsafeBlock { release: String, reason: String },
}

/// Every release's template and contract, compiled once at startup.
#[derive(Debug, Clone)]
pub struct Templates {
    env: Environment<'static>,
    /// Release name → its contract and what its template reads. Also the list of releases, sorted.
    releases: BTreeMap<String, Release>,
}

#[derive(Debug, Clone)]
struct Release {
    /// The contract text placed in front of the records.
    contract: String,
    forms: Forms,
}

/// Which forms of the records a template reads: a render builds only those. v4's template reads
/// the compact lines alone; building the full lines and the groups beside them too was two
/// thirds of a request's rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Forms {
    records: bool,
    compact_records: bool,
    groups: bool,
}

impl Forms {
    const ALL: Forms = Forms { records: true, compact_records: true, groups: true };
}

/// A release given as text rather than files (for releases kept in the store, and for tests).
#[derive(Debug, Clone)]
pub struct ReleaseSource {
    pub name: String,
    pub template: String,
    pub contract: String,
}

/// The releases built into the binary (`templates/` of the source), so that it runs anywhere.
const BUILTIN: [(&str, &str, &str); 4] = [
    ("v1", include_str!("../../templates/v1/memory.j2"), include_str!("../../templates/v1/contract.txt")),
    ("v2", include_str!("../../templates/v2/memory.j2"), include_str!("../../templates/v2/contract.txt")),
    ("v3", include_str!("../../templates/v3/memory.j2"), include_str!("../../templates/v3/contract.txt")),
    ("v4", include_str!("../../templates/v4/memory.j2"), include_str!("../../templates/v4/contract.txt")),
];

impl Templates {
    /// The built-in releases, with those of `dir` (when given) added or replacing them by name:
    /// a folder `dir/<name>/` with `memory.j2` and `contract.txt` per release.
    pub fn builtin_with(dir: Option<&Path>) -> Result<Templates, RenderError> {
        let mut sources: BTreeMap<String, (ReleaseSource, PathBuf, PathBuf)> = BUILTIN
            .iter()
            .map(|(name, template, contract)| {
                let folder = PathBuf::from("(built in)").join(name);
                let source = ReleaseSource {
                    name: (*name).to_owned(),
                    template: (*template).to_owned(),
                    contract: (*contract).to_owned(),
                };
                ((*name).to_owned(), (source, folder.join(TEMPLATE_FILE), folder.join(CONTRACT_FILE)))
            })
            .collect();
        if let Some(dir) = dir {
            for (source, template_path, contract_path) in read_sources(dir)? {
                sources.insert(source.name.clone(), (source, template_path, contract_path));
            }
        }
        Templates::build(sources.into_values().collect())
    }

    /// Loads every `templates/<name>/memory.j2` (+ contract.txt) under `dir`; a template that fails
    /// to compile, uses an unknown variable or renders an unsafe sample is an error naming the file.
    pub fn load(dir: &Path) -> Result<Templates, RenderError> {
        let sources = read_sources(dir)?;
        if sources.is_empty() {
            return Err(RenderError::NoReleases { dir: dir.to_path_buf() });
        }
        Templates::build(sources)
    }

    /// Compiles releases given as text; errors name `<release>/memory.j2`.
    pub fn from_sources(sources: Vec<ReleaseSource>) -> Result<Templates, RenderError> {
        let sources = sources
            .into_iter()
            .map(|source| {
                let folder = PathBuf::from(&source.name);
                (source, folder.join(TEMPLATE_FILE), folder.join(CONTRACT_FILE))
            })
            .collect();
        Templates::build(sources)
    }

    fn build(sources: Vec<(ReleaseSource, PathBuf, PathBuf)>) -> Result<Templates, RenderError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // Lines arrive escaped for JSON; HTML escaping on top would corrupt them (`"` → `&quot;`).
        env.set_auto_escape_callback(|_| AutoEscape::None);
        // Block tags on lines of their own leave no blank lines behind; the file's final newline
        // is dropped, so a block ends exactly with its closing tag.
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|err| RenderError::Compile { path: PathBuf::new(), message: err.to_string() })?;
        env.set_syntax(syntax);

        let mut checks = Vec::with_capacity(sources.len());
        for (source, template_path, contract_path) in sources {
            if !valid_release_name(&source.name) {
                return Err(RenderError::BadReleaseName { name: source.name, path: template_path });
            }
            let contract = source.contract.trim().to_owned();
            if contract.is_empty() {
                return Err(RenderError::EmptyContract { path: contract_path });
            }
            env.add_template_owned(template_name(&source.name), source.template).map_err(|err| {
                RenderError::Compile { path: template_path.clone(), message: err.to_string() }
            })?;
            checks.push((source.name, contract, template_path));
        }
        // Every template is compiled before any is checked: one may include another.
        let mut templates = Templates { env, releases: BTreeMap::new() };
        for (release, contract, path) in checks {
            let forms = templates.check_variables(&release, &path)?;
            templates.releases.insert(release.clone(), Release { contract, forms });
            templates.check_samples(&release, &path)?;
        }
        Ok(templates)
    }

    /// The releases, sorted by name.
    pub fn names(&self) -> Vec<String> {
        self.releases.keys().cloned().collect()
    }

    pub fn contains(&self, release: &str) -> bool {
        self.releases.contains_key(release)
    }

    /// The contract text of `release`, as placed in front of its records.
    pub fn contract(&self, release: &str) -> Option<&str> {
        self.releases.get(release).map(|r| r.contract.as_str())
    }

    /// Renders the block for `release`. `items` are the records to inject, already chosen and
    /// ordered. The same items always give the same bytes.
    pub fn render(&self, release: &str, items: &[RenderItem]) -> Result<String, RenderError> {
        let Release { contract, forms } = self.releases.get(release).ok_or_else(|| {
            RenderError::UnknownRelease { release: release.to_owned(), known: self.names().join(", ") }
        })?;
        let context = BlockContext::new(release, contract, items, *forms);
        let rendered = self
            .env
            .get_template(&template_name(release))
            .and_then(|template| template.render(TemplateValue::from(Serde(&context))))
            .map_err(|err| RenderError::Render { release: release.to_owned(), message: err.to_string() })?;
        check_block(release, &rendered)
            .map_err(|reason| RenderError::UnsafeBlock { release: release.to_owned(), reason })?;
        Ok(rendered)
    }

    /// Strict mode catches an undefined variable only on the path a render takes; this catches one
    /// in a branch the samples never reach. Returns the forms of the records the template reads.
    fn check_variables(&self, release: &str, path: &Path) -> Result<Forms, RenderError> {
        let template = self
            .env
            .get_template(&template_name(release))
            .map_err(|err| RenderError::Compile { path: path.to_path_buf(), message: err.to_string() })?;
        let mut allowed: Vec<&str> = CONTEXT_VARIABLES.to_vec();
        let globals: Vec<(&str, TemplateValue)> = self.env.globals().collect();
        allowed.extend(globals.iter().map(|(name, _)| *name));
        let used = template.undeclared_variables(false);
        let mut unknown: Vec<String> =
            used.iter().filter(|name| !allowed.contains(&name.as_str())).cloned().collect();
        if unknown.is_empty() {
            // A template that brings in another reads that one's variables too, which its own
            // list does not name: it gets every form.
            if reads_other_templates(template.source()) {
                return Ok(Forms::ALL);
            }
            return Ok(Forms {
                records: used.contains("records"),
                compact_records: used.contains("compact_records"),
                groups: used.contains("groups"),
            });
        }
        unknown.sort();
        Err(RenderError::UndefinedVariables {
            path: path.to_path_buf(),
            names: unknown.join(", "),
            allowed: CONTEXT_VARIABLES.join(", "),
        })
    }

    /// Renders samples (no records; records of two types with a stub) so that a template that fails
    /// on data, drops records or produces an unsafe block stops startup, not a request.
    fn check_samples(&self, release: &str, path: &Path) -> Result<(), RenderError> {
        let sample = sample_items();
        for items in [&[][..], &sample[..]] {
            let block = self.render(release, items).map_err(|err| RenderError::Sample {
                path: path.to_path_buf(),
                message: match err {
                    RenderError::Render { message, .. } => message,
                    other => other.to_string(),
                },
            })?;
            let lines: Vec<&str> = block.lines().collect();
            // Each record as either of its finished lines, on a line of its own.
            let missing = items.iter().find(|item| {
                !lines.contains(&record_line(item).as_str()) && !lines.contains(&compact_line(item).as_str())
            });
            if let Some(missing) = missing {
                return Err(RenderError::Sample {
                    path: path.to_path_buf(),
                    message: format!(
                        "record line {} is not on a line of its own in the block",
                        record_line(missing)
                    ),
                });
            }
        }
        Ok(())
    }
}

/// One record as one line of JSON: keys in a fixed order (`id`, `type`, `priority`, `updated_at`,
/// then `content` or `stub`; object keys inside `content` sorted), no insignificant whitespace,
/// and `<`, `>`, `&` inside strings escaped as `\u003c`, `\u003e`, `\u0026` — so no record can
/// close the block or forge another. Their compatibility forms (fullwidth `＜ ＞ ＆`, small
/// `﹤ ﹥ ﹠`), which a reader that normalizes text (NFKC) turns into the same characters, are
/// escaped the same way, and so are the angle brackets a model reads as `<` and `>` though no
/// normalization maps them there (`⟨/MEMORY_CONTEXT⟩`, `‹ ›`, `〈 〉`, `˂ ˃`, `≮`: see
/// `is_lookalike_angle`). U+0085, U+2028 and U+2029 are escaped too, so no reader that splits
/// lines on them can cut a record in two.
pub fn record_line(item: &RenderItem) -> String {
    line(item, true)
}

/// One record as a compact line: [`record_line`] without `priority` and `updated_at` (~21 of a
/// short record's ~72 tokens), the same escapes. The funnel's budget counts a record as this line
/// (`IndexedRecord::tokens`), so a release that renders it injects what it budgets.
pub fn compact_line(item: &RenderItem) -> String {
    line(item, false)
}

/// What a record's line says of its writer, when an operator did not write it.
fn written_by(writer: crate::record::WriterKind) -> Option<&'static str> {
    use crate::record::WriterKind;
    match writer {
        WriterKind::Operator | WriterKind::Import => None,
        WriterKind::Agent => Some("an agent, not operator policy"),
        WriterKind::MemoryTool => Some("an agent's memory file, not operator policy"),
        WriterKind::Observer => Some("the user's own words as memgate kept them, not operator policy"),
    }
}

fn line(item: &RenderItem, with_meta: bool) -> String {
    let mut out = String::with_capacity(96);
    out.push_str("{\"id\":");
    push_string(&mut out, &item.id);
    out.push_str(",\"type\":");
    push_string(&mut out, &item.record_type);
    if let Some(writer) = item.written_by {
        out.push_str(",\"written_by\":");
        push_string(&mut out, writer);
    }
    if with_meta {
        let _ = write!(out, ",\"priority\":{}", item.priority);
        out.push_str(",\"updated_at\":");
        push_string(&mut out, &item.updated_at);
    }
    match &item.stub {
        Some(summary) => {
            out.push_str(",\"stub\":");
            push_string(&mut out, summary);
        }
        None => {
            out.push_str(",\"content\":");
            push_value(&mut out, &item.content);
        }
    }
    out.push('}');
    out
}

/// Canonical JSON: object keys sorted by their UTF-8 bytes, so the line does not depend on the
/// order in which a store handed the keys back (Postgres `jsonb` reorders them, SQLite does not).
fn push_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        Value::Number(number) => {
            let _ = write!(out, "{number}");
        }
        Value::String(text) => push_string(out, text),
        Value::Array(values) => {
            out.push('[');
            for (index, value) in values.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_value(out, value);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, value)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_string(out, key);
                out.push(':');
                push_value(out, value);
            }
            out.push('}');
        }
    }
}

/// A JSON string literal with the block-safe escapes described on [`record_line`].
fn push_string(out: &mut String, text: &str) {
    out.push('"');
    push_escaped(out, text);
    out.push('"');
}

fn push_escaped(out: &mut String, text: &str) {
    let mut rest = text;
    while !rest.is_empty() {
        // Runs of plain ASCII, most of most records, go over in one copy each rather than a
        // character at a time (escaping was 7 % of a request's CPU through the funnel).
        let plain = rest.bytes().position(|b| !is_plain_ascii(b)).unwrap_or(rest.len());
        out.push_str(&rest[..plain]);
        rest = &rest[plain..];
        let Some(ch) = rest.chars().next() else { break };
        push_escaped_char(out, ch);
        rest = &rest[ch.len_utf8()..];
    }
}

/// A byte that stands for itself inside a rendered JSON string.
fn is_plain_ascii(byte: u8) -> bool {
    matches!(byte, 0x20..=0x7e) && !matches!(byte, b'"' | b'\\' | b'<' | b'>' | b'&')
}

fn push_escaped_char(out: &mut String, ch: char) {
    match ch {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '<'
        | '>'
        | '&'
        | '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{2028}'
        | '\u{2029}'
        | '\u{ff1c}'
        | '\u{ff1e}'
        | '\u{ff06}'
        | '\u{fe64}'
        | '\u{fe65}'
        | '\u{fe60}' => {
            let _ = write!(out, "\\u{:04x}", u32::from(ch));
        }
        ch if is_lookalike_angle(ch) => {
            let _ = write!(out, "\\u{:04x}", u32::from(ch));
        }
        _ => out.push(ch),
    }
}

/// Characters drawn as `<` or `>` (or as those with a stroke through them) that no normalization
/// turns into them: a block that a model reads may be closed by `⟨/MEMORY_CONTEXT⟩` as well as by
/// the real tag. Chosen from the angle brackets of mathematics (`⟨ ⟩`, `≮ ≯`, `⋖ ⋗`), punctuation
/// (`‹ ›`, the deprecated `〈 〉`), CJK (`〈 〉`), modifier letters (`˂ ˃`), dingbats (`❬ ❭ ❮ ❯
/// ❰ ❱`, `⧼ ⧽`) and the Canadian syllabics that look like them (`ᐸ ᐳ`). Written as `\uXXXX`, they
/// still decode to themselves; the double brackets of CJK titles (`《 》`) and guillemets
/// (`« »`), common in prose and drawn unlike a tag's bracket, are left as they are.
fn is_lookalike_angle(ch: char) -> bool {
    matches!(
        ch,
        '\u{02c2}'
            | '\u{02c3}'
            | '\u{1433}'
            | '\u{1438}'
            | '\u{2039}'
            | '\u{203a}'
            | '\u{226e}'
            | '\u{226f}'
            | '\u{22d6}'
            | '\u{22d7}'
            | '\u{2329}'
            | '\u{232a}'
            | '\u{276c}'
            | '\u{276d}'
            | '\u{276e}'
            | '\u{276f}'
            | '\u{2770}'
            | '\u{2771}'
            | '\u{27e8}'
            | '\u{27e9}'
            | '\u{29fc}'
            | '\u{29fd}'
            | '\u{3008}'
            | '\u{3009}'
    )
}

/// What a template sees. Strings that come from records are escaped already. A form of the records
/// the template does not read (`Forms`) is left empty.
#[derive(Serialize)]
struct BlockContext<'a> {
    release: &'a str,
    contract: &'a str,
    /// One finished JSON line per record, in the funnel's order.
    records: Vec<String>,
    /// The same records as compact lines (no priority, no updated_at).
    compact_records: Vec<String>,
    count: usize,
    stub_count: usize,
    /// The same lines grouped by record type, groups in order of first appearance.
    groups: Vec<Group>,
}

#[derive(Serialize)]
struct Group {
    /// The type name escaped as inside a JSON string (without the quotes), so a header line
    /// cannot break the block either.
    record_type: String,
    count: usize,
    lines: Vec<String>,
}

impl<'a> BlockContext<'a> {
    fn new(release: &'a str, contract: &'a str, items: &[RenderItem], forms: Forms) -> BlockContext<'a> {
        let records: Vec<String> =
            if forms.records || forms.groups { items.iter().map(record_line).collect() } else { Vec::new() };
        let mut groups: Vec<(&str, Group)> = Vec::new();
        for (item, line) in items.iter().zip(if forms.groups { &records[..] } else { &[] }) {
            match groups.iter_mut().find(|(record_type, _)| *record_type == item.record_type) {
                Some((_, group)) => {
                    group.count += 1;
                    group.lines.push(line.clone());
                }
                None => {
                    let mut label = String::new();
                    push_escaped(&mut label, &item.record_type);
                    let group = Group { record_type: label, count: 1, lines: vec![line.clone()] };
                    groups.push((&item.record_type, group));
                }
            }
        }
        BlockContext {
            release,
            contract,
            compact_records: if forms.compact_records {
                items.iter().map(compact_line).collect()
            } else {
                Vec::new()
            },
            count: items.len(),
            stub_count: items.iter().filter(|item| item.stub.is_some()).count(),
            records: if forms.records { records } else { Vec::new() },
            groups: groups.into_iter().map(|(_, group)| group).collect(),
        }
    }
}

/// Whether a template's source has a tag that brings in another template (`include`, `import`,
/// `from … import`, `extends`). Read from the text, so a word that only looks like one (in a
/// comment, say) errs on the safe side.
fn reads_other_templates(source: &str) -> bool {
    source.split("{%").skip(1).any(|tag| {
        let tag = tag.trim_start_matches(['-', '+']).trim_start();
        let word = tag.split(|ch: char| !ch.is_ascii_alphanumeric() && ch != '_').next().unwrap_or("");
        matches!(word, "include" | "import" | "from" | "extends")
    })
}

/// Checks the block's frame: it starts with this release's opening tag, ends with the closing tag,
/// and holds no other tag of either kind (compared without case, as a model would read them).
fn check_block(release: &str, block: &str) -> Result<(), String> {
    let opening = format!("<MEMORY_CONTEXT version=\"{release}\">");
    if !block.starts_with(&opening) {
        return Err(format!("it must start with {opening}"));
    }
    if !block.ends_with(CLOSING_TAG) {
        return Err(format!("it must end with {CLOSING_TAG}"));
    }
    let lower = block.to_ascii_lowercase();
    let opened = lower.matches("<memory_context").count();
    let closed = lower.matches("</memory_context").count();
    if opened != 1 || closed != 1 {
        return Err(format!(
            "it must hold exactly one opening and one closing MEMORY_CONTEXT tag (found {opened} and {closed}); \
             is the tag written in the contract?"
        ));
    }
    Ok(())
}

/// The releases in `dir`, as sources with their file paths (for error messages).
fn read_sources(dir: &Path) -> Result<Vec<(ReleaseSource, PathBuf, PathBuf)>, RenderError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RenderError::Io { path, source }
    };
    let mut folders = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !entry.file_type().map_err(io(&entry.path()))?.is_dir() {
            continue;
        }
        folders.push((name, entry.path()));
    }
    folders.sort();
    let mut sources = Vec::with_capacity(folders.len());
    for (name, folder) in folders {
        let template_path = folder.join(TEMPLATE_FILE);
        let contract_path = folder.join(CONTRACT_FILE);
        let template = std::fs::read_to_string(&template_path).map_err(io(&template_path))?;
        let contract = std::fs::read_to_string(&contract_path).map_err(io(&contract_path))?;
        sources.push((ReleaseSource { name, template, contract }, template_path, contract_path));
    }
    Ok(sources)
}

fn template_name(release: &str) -> String {
    format!("{release}/{TEMPLATE_FILE}")
}

/// The name goes into the `version` attribute and the `X-Memory-Version` header, so it is kept
/// to characters that need no escaping in either.
fn valid_release_name(name: &str) -> bool {
    name.len() <= 64
        && name.chars().next().is_some_and(|first| first.is_ascii_alphanumeric())
        && name.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '.' | '_' | '-'))
}

fn sample_items() -> Vec<RenderItem<'static>> {
    let item = |id: &'static str, record_type: &'static str, stub: Option<&str>| RenderItem {
        id: Cow::Borrowed(id),
        record_type: Cow::Borrowed(record_type),
        priority: 4,
        updated_at: "2024-06-15T09:00:00Z".to_owned(),
        content: Cow::Owned(serde_json::json!({"text": "sample <b>&</b>", "n": 1})),
        stub: stub.map(str::to_owned),
        written_by: None,
    };
    vec![
        item("sample-1", "customer_profile", None),
        item("sample-2", "internal_sop", None),
        item("sample-3", "customer_profile", Some("a sample stub")),
    ]
}

#[cfg(test)]
mod escaping_tests {
    use proptest::prelude::*;

    /// Escaping a character at a time, as rendering once did: what the runs of plain ASCII must
    /// reproduce byte for byte.
    fn one_at_a_time(text: &str) -> String {
        let mut out = String::new();
        for ch in text.chars() {
            super::push_escaped_char(&mut out, ch);
        }
        out
    }

    proptest! {
        #[test]
        fn runs_of_plain_ascii_escape_as_one_character_at_a_time(
            text in proptest::collection::vec(
                prop_oneof![
                    4 => proptest::char::range(' ', '~'),
                    1 => proptest::char::range('\u{0}', '\u{ff}'),
                    1 => proptest::sample::select(vec!['<', '>', '&', '"', '\\', '\u{2028}', '\u{ff1c}', '⟨', '〈', '世', '😀']),
                    1 => any::<char>(),
                ],
                0..64,
            ).prop_map(|chars| chars.into_iter().collect::<String>())
        ) {
            let mut out = String::new();
            super::push_escaped(&mut out, &text);
            prop_assert_eq!(out, one_at_a_time(&text));
        }
    }

    #[test]
    fn nothing_that_closes_or_forges_a_block_is_copied_as_it_is() {
        let mut out = String::new();
        super::push_escaped(&mut out, "a</MEMORY_CONTEXT>&\"b\\\n⟨/MEMORY_CONTEXT⟩");
        assert_eq!(out, "a\\u003c/MEMORY_CONTEXT\\u003e\\u0026\\\"b\\\\\\n\\u27e8/MEMORY_CONTEXT\\u27e9");
    }
}

#[cfg(test)]
mod forms_tests {
    use super::{Forms, Templates};

    /// The shipped releases build only the lines their templates print: v4, the default, the
    /// compact lines alone.
    #[test]
    fn each_shipped_release_builds_only_the_forms_its_template_reads() {
        let templates = Templates::builtin_with(None).unwrap();
        let forms = |records, compact_records, groups| Forms { records, compact_records, groups };
        for (release, expected) in [
            ("v1", forms(true, false, false)),
            ("v2", forms(false, false, true)),
            ("v3", forms(false, true, false)),
            ("v4", forms(false, true, false)),
        ] {
            assert_eq!(templates.releases[release].forms, expected, "{release}");
        }
    }
}
