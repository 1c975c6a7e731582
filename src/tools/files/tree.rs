//! The memory tool's six commands on a subject's tree held in memory: what each answers, in the
//! reference implementation's words, and which files it changes. Nothing here touches the store:
//! `files::run` loads the tree, applies a command here and writes the changes it returns.
//!
//! A directory is not stored: it exists while a file lies beneath it (and `/memories` always
//! does), as in a tree of object-store keys. A directory's size in a listing is the bytes of the
//! files beneath it, where the reference shows the file system's own figure for a directory.

use super::paths::{self, ROOT, is_within, parent};
use std::collections::BTreeMap;

/// The most characters one file keeps: the record's `content.statement` holds the text.
pub const MAX_FILE_CHARS: usize = 2000;
/// The most files one subject's tree keeps.
pub const MAX_FILES: usize = 1000;
/// The reference's line limit for a file it shows.
const MAX_LINES: usize = 999_999;
/// Line numbers are right-aligned to the width of `MAX_LINES`.
const LINE_NUMBER_WIDTH: usize = 6;

/// One file: its text, and the record that holds it (`None` in tests).
#[derive(Debug, Clone, PartialEq)]
pub struct File {
    pub text: String,
    pub record: Option<(String, i64)>,
}

/// A subject's files by normal path.
pub type Tree = BTreeMap<String, File>;

/// One command as the model sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    View { path: String, view_range: Option<(i64, i64)> },
    Create { path: String, file_text: String },
    StrReplace { path: String, old_str: String, new_str: String },
    Insert { path: String, insert_line: i64, insert_text: String },
    Delete { path: String },
    Rename { old_path: String, new_path: String },
}

/// A change a command makes to the stored files (normal paths).
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Create { path: String, text: String },
    Write { path: String, text: String },
    Delete { path: String },
    Move { from: String, to: String },
}

/// What a command answers, and the changes to make before the answer holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub answer: String,
    pub changes: Vec<Change>,
}

fn answer(answer: String) -> Result<Applied, String> {
    Ok(Applied { answer, changes: Vec::new() })
}

fn is_dir(tree: &Tree, path: &str) -> bool {
    path == ROOT || tree.keys().any(|key| key != path && is_within(key, path))
}

fn exists(tree: &Tree, path: &str) -> bool {
    tree.contains_key(path) || is_dir(tree, path)
}

fn not_found(shown: &str) -> String {
    format!("The path {shown} does not exist. Please provide a valid path.")
}

/// The file at `path`, or the reference's error for a missing path or a directory.
fn file<'a>(tree: &'a Tree, path: &str, shown: &str) -> Result<&'a File, String> {
    match tree.get(path) {
        Some(file) => Ok(file),
        None if is_dir(tree, path) => Err(format!("The path {shown} is not a file.")),
        None => Err(not_found(shown)),
    }
}

/// Text memgate can keep as a file, or why not (nothing is written then).
fn keepable(text: &str, shown: &str) -> Result<(), String> {
    let chars = text.chars().count();
    if chars > MAX_FILE_CHARS {
        return Err(format!(
            "File {shown} would be {chars} characters long; memgate keeps memory files of at most {MAX_FILE_CHARS} characters. Nothing was written: keep it shorter, or split it into several files."
        ));
    }
    if text.is_empty() {
        return Err(format!("memgate keeps no empty files; nothing was written. Give {shown} some text."));
    }
    Ok(())
}

/// Runs `command` on `tree`: the answer, or the error text the model reads (nothing changed).
pub fn apply(tree: &Tree, command: &Command) -> Result<Applied, String> {
    match command {
        Command::View { path, view_range } => view(tree, path, *view_range),
        Command::Create { path, file_text } => create(tree, path, file_text),
        Command::StrReplace { path, old_str, new_str } => str_replace(tree, path, old_str, new_str),
        Command::Insert { path, insert_line, insert_text } => insert(tree, path, *insert_line, insert_text),
        Command::Delete { path } => delete(tree, path),
        Command::Rename { old_path, new_path } => rename(tree, old_path, new_path),
    }
}

fn view(tree: &Tree, shown: &str, view_range: Option<(i64, i64)>) -> Result<Applied, String> {
    let path = paths::resolve(shown)?;
    if let Some(file) = tree.get(&path) {
        return answer(numbered(&file.text, shown, view_range)?);
    }
    if !is_dir(tree, &path) {
        return Err(not_found(shown));
    }
    answer(listing(tree, &path, shown))
}

/// A file's lines, numbered as the reference numbers them.
fn numbered(text: &str, shown: &str, view_range: Option<(i64, i64)>) -> Result<String, String> {
    let lines: Vec<&str> = text.split('\n').collect();
    if lines.len() > MAX_LINES {
        return Err(format!("File {shown} exceeds maximum line limit of 999,999 lines."));
    }
    let (start, shown_lines) = match view_range {
        Some((first, last)) => {
            let start = (first.max(1) - 1) as usize;
            let end = if last == -1 { lines.len() as i64 } else { last };
            // A Python slice: a negative end counts from the end; both ends clamp.
            let end = if end < 0 { (lines.len() as i64 + end).max(0) } else { end } as usize;
            let end = end.min(lines.len());
            (start, if start < end { &lines[start..end] } else { &[][..] })
        }
        None => (0, &lines[..]),
    };
    let numbered: Vec<String> = shown_lines
        .iter()
        .enumerate()
        .map(|(i, line)| format!("{:>LINE_NUMBER_WIDTH$}\t{line}", i + start + 1))
        .collect();
    Ok(format!("Here's the content of {shown} with line numbers:\n{}", numbered.join("\n")))
}

/// What lies up to two levels below `dir`, hidden items left out, each with its size.
fn listing(tree: &Tree, dir: &str, shown: &str) -> String {
    #[derive(Default)]
    struct Entry<'a> {
        bytes: usize,
        is_dir: bool,
        children: BTreeMap<&'a str, (usize, bool)>,
    }
    let mut total = 0;
    let mut entries: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
    for (path, file) in tree.iter().filter(|(path, _)| *path != dir && is_within(path, dir)) {
        let bytes = file.text.len();
        total += bytes;
        let mut parts = path[dir.len() + 1..].split('/');
        let Some(first) = parts.next() else { continue };
        let entry = entries.entry(first).or_default();
        entry.bytes += bytes;
        if let Some(second) = parts.next() {
            entry.is_dir = true;
            let child = entry.children.entry(second).or_default();
            child.0 += bytes;
            child.1 |= parts.next().is_some();
        }
    }
    let mut lines = vec![format!("{}\t{shown}", file_size(total))];
    for (name, entry) in entries.iter().filter(|(name, _)| !name.starts_with('.')) {
        if !entry.is_dir {
            lines.push(format!("{}\t{shown}/{name}", file_size(entry.bytes)));
            continue;
        }
        lines.push(format!("{}\t{shown}/{name}/", file_size(entry.bytes)));
        for (child, (bytes, is_dir)) in entry.children.iter().filter(|(child, _)| !child.starts_with('.')) {
            let slash = if *is_dir { "/" } else { "" };
            lines.push(format!("{}\t{shown}/{name}/{child}{slash}", file_size(*bytes)));
        }
    }
    format!(
        "Here're the files and directories up to 2 levels deep in {shown}, excluding hidden items:\n{}",
        lines.join("\n")
    )
}

/// A size as the reference writes it: `0B`, `512B`, `1.5K`, `2M`.
pub fn file_size(bytes: usize) -> String {
    if bytes == 0 {
        return "0B".to_owned();
    }
    const UNITS: [&str; 4] = ["B", "K", "M", "G"];
    let exponent = ((usize::BITS - bytes.leading_zeros() - 1) / 10).min(3) as i32;
    let size = bytes as f64 / 1024f64.powi(exponent);
    let unit = UNITS[exponent as usize];
    if size.fract() == 0.0 { format!("{}{unit}", size as u64) } else { format!("{size:.1}{unit}") }
}

fn create(tree: &Tree, shown: &str, text: &str) -> Result<Applied, String> {
    let path = paths::resolve(shown)?;
    if exists(tree, &path) {
        return Err(format!("File {shown} already exists"));
    }
    // A parent that is a file: the reference's mkdir fails there too.
    let mut up = parent(&path);
    while let Some(dir) = up {
        if tree.contains_key(dir) {
            return Err(format!(
                "The path {dir} is a file, not a directory: {shown} cannot be created in it."
            ));
        }
        up = parent(dir);
    }
    if tree.len() >= MAX_FILES {
        return Err(format!(
            "{ROOT} holds {MAX_FILES} files, the most memgate keeps for one user; delete or merge files before creating more."
        ));
    }
    keepable(text, shown)?;
    Ok(Applied {
        answer: format!("File created successfully at: {shown}"),
        changes: vec![Change::Create { path, text: text.to_owned() }],
    })
}

fn line_of(content: &str, at: usize) -> usize {
    content[..at].matches('\n').count()
}

fn str_replace(tree: &Tree, shown: &str, old: &str, new: &str) -> Result<Applied, String> {
    let path = paths::resolve(shown)?;
    let content = &file(tree, &path, shown)?.text;
    let count = content.matches(old).count();
    if count == 0 {
        return Err(format!(
            "No replacement was performed, old_str `{old}` did not appear verbatim in {shown}."
        ));
    }
    if count > 1 {
        // Every start, overlapping ones too, as the reference's `find` loop finds them.
        let mut lines = Vec::new();
        let mut start = 0;
        while start <= content.len() {
            let Some(found) = content[start..].find(old) else { break };
            let at = start + found;
            lines.push((line_of(content, at) + 1).to_string());
            start = at + content[at..].chars().next().map_or(1, char::len_utf8);
        }
        return Err(format!(
            "No replacement was performed. Multiple occurrences of old_str `{old}` in lines: {}. Please ensure it is unique",
            lines.join(", ")
        ));
    }
    let at = content.find(old).unwrap_or_default();
    let changed = line_of(content, at);
    let text = content.replacen(old, new, 1);
    keepable(&text, shown)?;
    let new_lines: Vec<&str> = text.split('\n').collect();
    let first = changed.saturating_sub(2);
    let last = new_lines.len().min(changed + 3);
    let snippet: Vec<String> =
        (first + 1..=last).map(|n| format!("{n:>LINE_NUMBER_WIDTH$}\t{}", new_lines[n - 1])).collect();
    let answer = format!(
        "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n{}",
        snippet.join("\n")
    );
    Ok(Applied { answer, changes: vec![Change::Write { path, text }] })
}

/// Python's `str.splitlines()`: every line boundary it knows, no empty last line.
fn split_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let end = match c {
            '\r' if chars.peek().is_some_and(|(_, next)| *next == '\n') => {
                chars.next();
                at + 2
            }
            '\n' | '\r' | '\u{0b}' | '\u{0c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}'
            | '\u{2029}' => at + c.len_utf8(),
            _ => continue,
        };
        lines.push(&text[start..at]);
        start = end;
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

fn insert(tree: &Tree, shown: &str, insert_line: i64, insert_text: &str) -> Result<Applied, String> {
    let path = paths::resolve(shown)?;
    let content = &file(tree, &path, shown)?.text;
    let mut lines = split_lines(content);
    if insert_line < 0 || insert_line as usize > lines.len() {
        return Err(format!(
            "Invalid `insert_line` parameter: {insert_line}. It should be within the range [0, {}].",
            lines.len()
        ));
    }
    lines.insert(insert_line as usize, insert_text.trim_end_matches('\n'));
    let mut text = lines.join("\n");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    keepable(&text, shown)?;
    Ok(Applied {
        answer: format!("The file {shown} has been edited."),
        changes: vec![Change::Write { path, text }],
    })
}

/// Every file at or beneath `path`.
fn files_within<'a>(tree: &'a Tree, path: &'a str) -> impl Iterator<Item = &'a String> + 'a {
    tree.keys().filter(move |key| is_within(key, path))
}

fn delete(tree: &Tree, shown: &str) -> Result<Applied, String> {
    let path = paths::resolve(shown)?;
    if path == ROOT {
        return Err(format!("Cannot delete the {ROOT} directory itself"));
    }
    let changes: Vec<Change> =
        files_within(tree, &path).map(|key| Change::Delete { path: key.clone() }).collect();
    if changes.is_empty() {
        return Err(format!("The path {shown} does not exist"));
    }
    Ok(Applied { answer: format!("Successfully deleted {shown}"), changes })
}

fn rename(tree: &Tree, old_shown: &str, new_shown: &str) -> Result<Applied, String> {
    let from = paths::resolve(old_shown)?;
    let to = paths::resolve(new_shown)?;
    if exists(tree, &to) {
        return Err(format!("The destination {new_shown} already exists"));
    }
    if from == ROOT {
        return Err(format!("Cannot rename the {ROOT} directory itself"));
    }
    if is_within(&to, &from) {
        return Err(format!("Cannot move {old_shown} into itself ({new_shown})"));
    }
    let mut up = parent(&to);
    while let Some(dir) = up {
        if tree.contains_key(dir) {
            return Err(format!(
                "The path {dir} is a file, not a directory: {new_shown} cannot be created in it."
            ));
        }
        up = parent(dir);
    }
    let changes: Vec<Change> = files_within(tree, &from)
        .map(|key| Change::Move { from: key.clone(), to: format!("{to}{}", &key[from.len()..]) })
        .collect();
    if changes.is_empty() {
        return Err(format!("The path {old_shown} does not exist"));
    }
    if let Some(Change::Move { to, .. }) = changes
        .iter()
        .find(|c| matches!(c, Change::Move { to, .. } if to.chars().count() > paths::MAX_PATH_CHARS))
    {
        return Err(format!(
            "Path {to} is too long: memgate keeps paths of at most {} characters",
            paths::MAX_PATH_CHARS
        ));
    }
    Ok(Applied { answer: format!("Successfully renamed {old_shown} to {new_shown}"), changes })
}
