//! The commands against the reference implementation's strings (the Python SDK's
//! `BetaLocalFilesystemMemoryTool`), on a tree held in memory. The expected strings are what that
//! class answers for the same commands on a real directory (anthropic 2.14.0), except where
//! docs/memory-tools.md says memgate differs (a directory's size, stricter paths).

use super::paths::resolve;
use super::tree::{Applied, Change, Command, File, MAX_FILE_CHARS, Tree, apply, file_size};
use super::{command, view_range};
use serde_json::json;

fn tree(files: &[(&str, &str)]) -> Tree {
    files
        .iter()
        .map(|(path, text)| ((*path).to_owned(), File { text: (*text).to_owned(), record: None }))
        .collect()
}

fn ok(tree: &Tree, command: Command) -> Applied {
    apply(tree, &command).unwrap_or_else(|err| panic!("{command:?}: {err}"))
}

fn err(tree: &Tree, command: Command) -> String {
    apply(tree, &command).expect_err("an error")
}

fn view(path: &str) -> Command {
    Command::View { path: path.to_owned(), view_range: None }
}

#[test]
fn paths_outside_memories_or_climbing_out_are_refused_in_the_references_words() {
    assert_eq!(resolve("/etc/passwd").unwrap_err(), "Path must start with /memories, got: /etc/passwd");
    assert_eq!(resolve("memories/a").unwrap_err(), "Path must start with /memories, got: memories/a");
    assert_eq!(resolve("/memoriesX/a").unwrap_err(), "Path must start with /memories, got: /memoriesX/a");
    assert_eq!(
        resolve("/memories/../etc/passwd").unwrap_err(),
        "Path /memories/../etc/passwd would escape /memories directory"
    );
    assert_eq!(
        resolve("/memories/a/../../b").unwrap_err(),
        "Path /memories/a/../../b would escape /memories directory"
    );
    assert!(resolve("/memories/a\u{0}b").is_err());
    assert!(resolve(&format!("/memories/{}", "x".repeat(300))).unwrap_err().contains("too long"));
    assert_eq!(resolve("/memories").unwrap(), "/memories");
    assert_eq!(resolve("/memories/").unwrap(), "/memories");
    assert_eq!(resolve("/memories//a/./b/../c.md").unwrap(), "/memories/a/c.md");
}

#[test]
fn bidirectional_and_zero_width_characters_are_refused_without_repeating_the_path() {
    // `/memories/\u{202E}dm.exe` shows as `/memories/exe.md`; `notes\u{200B}.md` looks like
    // `notes.md` and would be another file.
    for (path, code) in [
        ("/memories/\u{202E}dm.exe", "U+202E"),
        ("/memories/notes\u{200B}.md", "U+200B"),
        ("/memories/a\u{200D}b", "U+200D"),
        ("/memories/\u{2066}x\u{2069}", "U+2066"),
        ("/memories/x\u{200F}", "U+200F"),
        ("/memories/\u{FEFF}x", "U+FEFF"),
        ("/memories/x\u{2060}y", "U+2060"),
        ("/memories\u{202E}/x", "U+202E"),
        ("\u{202E}/etc/passwd", "U+202E"),
    ] {
        let said = resolve(path).unwrap_err();
        assert_eq!(
            said,
            format!("Path must not contain bidirectional or zero-width characters (found {code})"),
            "{path:?}"
        );
    }
    // A command on such a path is refused with the same words, and nothing is written.
    let said = err(
        &tree(&[]),
        Command::Create { path: "/memories/\u{202E}dm.exe".to_owned(), file_text: "x".to_owned() },
    );
    assert!(said.contains("bidirectional or zero-width"), "{said}");
    // Letters of other scripts, and marks that combine with them, are names.
    for path in ["/memories/заметки.md", "/memories/ملاحظات.md", "/memories/नोट्स.md", "/memories/下周发货.md"]
    {
        assert_eq!(resolve(path).unwrap(), path);
    }
}

#[test]
fn view_of_a_directory_lists_two_levels_with_sizes_and_no_hidden_items() {
    let files = tree(&[
        ("/memories/notes.md", "hello"),
        ("/memories/.secret", "x"),
        ("/memories/projects/a.md", &"a".repeat(1536)),
        ("/memories/projects/deep/b.md", "bb"),
        ("/memories/projects/deep/c/d.md", "ddd"),
    ]);
    let listed = ok(&files, view("/memories"));
    assert_eq!(
        listed.answer,
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:\n\
         1.5K\t/memories\n\
         5B\t/memories/notes.md\n\
         1.5K\t/memories/projects/\n\
         1.5K\t/memories/projects/a.md\n\
         5B\t/memories/projects/deep/"
    );
    assert!(listed.changes.is_empty());
    let empty = ok(&Tree::new(), view("/memories"));
    assert_eq!(
        empty.answer,
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:\n0B\t/memories"
    );
    assert_eq!(
        err(&files, view("/memories/nope")),
        "The path /memories/nope does not exist. Please provide a valid path."
    );
}

#[test]
fn sizes_are_written_as_the_reference_writes_them() {
    assert_eq!(file_size(0), "0B");
    assert_eq!(file_size(1023), "1023B");
    assert_eq!(file_size(1024), "1K");
    assert_eq!(file_size(1536), "1.5K");
    assert_eq!(file_size(3 * 1024 * 1024), "3M");
}

#[test]
fn view_of_a_file_numbers_its_lines_and_honours_the_range() {
    let files = tree(&[("/memories/a.md", "one\ntwo\nthree\n")]);
    assert_eq!(
        ok(&files, view("/memories/a.md")).answer,
        "Here's the content of /memories/a.md with line numbers:\n     1\tone\n     2\ttwo\n     3\tthree\n     4\t"
    );
    let ranged = Command::View { path: "/memories/a.md".into(), view_range: Some((2, -1)) };
    assert_eq!(
        ok(&files, ranged).answer,
        "Here's the content of /memories/a.md with line numbers:\n     2\ttwo\n     3\tthree\n     4\t"
    );
    let ranged = Command::View { path: "/memories/a.md".into(), view_range: Some((0, 1)) };
    assert_eq!(
        ok(&files, ranged).answer,
        "Here's the content of /memories/a.md with line numbers:\n     1\tone"
    );
    assert_eq!(view_range(Some(&json!([1, 2, 3]))), None);
}

#[test]
fn create_answers_as_the_reference_and_refuses_what_it_cannot_keep() {
    let files = tree(&[("/memories/a.md", "x")]);
    let created = ok(&files, Command::Create { path: "/memories/b/c.md".into(), file_text: "hi".into() });
    assert_eq!(created.answer, "File created successfully at: /memories/b/c.md");
    assert_eq!(created.changes, vec![Change::Create { path: "/memories/b/c.md".into(), text: "hi".into() }]);
    assert_eq!(
        err(&files, Command::Create { path: "/memories/a.md".into(), file_text: "y".into() }),
        "File /memories/a.md already exists"
    );
    let huge = err(
        &files,
        Command::Create { path: "/memories/h.md".into(), file_text: "x".repeat(MAX_FILE_CHARS + 1) },
    );
    assert!(huge.contains("at most 2000 characters") && huge.contains("Nothing was written"), "{huge}");
    assert!(
        err(&files, Command::Create { path: "/memories/a.md/x".into(), file_text: "y".into() })
            .contains("is a file")
    );
}

#[test]
fn str_replace_says_no_match_and_multiple_matches_as_the_reference() {
    let files = tree(&[("/memories/a.md", "l1\nl2 cat\nl3\nl4\nl5 cat\nl6\nl7\n")]);
    let replace = |old: &str, new: &str| Command::StrReplace {
        path: "/memories/a.md".into(),
        old_str: old.into(),
        new_str: new.into(),
    };
    assert_eq!(
        err(&files, replace("dog", "x")),
        "No replacement was performed, old_str `dog` did not appear verbatim in /memories/a.md."
    );
    assert_eq!(
        err(&files, replace("cat", "x")),
        "No replacement was performed. Multiple occurrences of old_str `cat` in lines: 2, 5. Please ensure it is unique"
    );
    let edited = ok(&files, replace("l5 cat", "l5 dog"));
    assert_eq!(
        edited.answer,
        "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n     3\tl3\n     4\tl4\n     5\tl5 dog\n     6\tl6\n     7\tl7"
    );
    assert_eq!(
        edited.changes,
        vec![Change::Write {
            path: "/memories/a.md".into(),
            text: "l1\nl2 cat\nl3\nl4\nl5 dog\nl6\nl7\n".into()
        }]
    );
    let overlapping = tree(&[("/memories/o.md", "aaa")]);
    let replace =
        Command::StrReplace { path: "/memories/o.md".into(), old_str: "aa".into(), new_str: "b".into() };
    // `count` finds one (non-overlapping), so the reference replaces it.
    assert_eq!(
        ok(&overlapping, replace).changes,
        vec![Change::Write { path: "/memories/o.md".into(), text: "ba".into() }]
    );
    let dir = tree(&[("/memories/d/x.md", "x")]);
    assert_eq!(
        err(
            &dir,
            Command::StrReplace { path: "/memories/d".into(), old_str: "x".into(), new_str: "y".into() }
        ),
        "The path /memories/d is not a file."
    );
}

#[test]
fn insert_checks_its_line_range_as_the_reference() {
    let files = tree(&[("/memories/a.md", "one\ntwo")]);
    let insert = |line: i64| Command::Insert {
        path: "/memories/a.md".into(),
        insert_line: line,
        insert_text: "new\n".into(),
    };
    assert_eq!(
        err(&files, insert(3)),
        "Invalid `insert_line` parameter: 3. It should be within the range [0, 2]."
    );
    assert_eq!(
        err(&files, insert(-1)),
        "Invalid `insert_line` parameter: -1. It should be within the range [0, 2]."
    );
    let inserted = ok(&files, insert(1));
    assert_eq!(inserted.answer, "The file /memories/a.md has been edited.");
    assert_eq!(
        inserted.changes,
        vec![Change::Write { path: "/memories/a.md".into(), text: "one\nnew\ntwo\n".into() }]
    );
}

#[test]
fn delete_and_rename_answer_as_the_reference() {
    let files = tree(&[("/memories/a.md", "a"), ("/memories/d/x.md", "x"), ("/memories/d/e/y.md", "y")]);
    assert_eq!(
        err(&files, Command::Delete { path: "/memories".into() }),
        "Cannot delete the /memories directory itself"
    );
    assert_eq!(
        err(&files, Command::Delete { path: "/memories/zz".into() }),
        "The path /memories/zz does not exist"
    );
    let deleted = ok(&files, Command::Delete { path: "/memories/d".into() });
    assert_eq!(deleted.answer, "Successfully deleted /memories/d");
    assert_eq!(deleted.changes.len(), 2);
    let rename = |from: &str, to: &str| Command::Rename { old_path: from.into(), new_path: to.into() };
    assert_eq!(
        err(&files, rename("/memories/a.md", "/memories/d")),
        "The destination /memories/d already exists"
    );
    assert_eq!(err(&files, rename("/memories/zz", "/memories/b")), "The path /memories/zz does not exist");
    assert_eq!(
        err(&files, rename("/memories/a.md", "/tmp/a.md")),
        "Path must start with /memories, got: /tmp/a.md"
    );
    let renamed = ok(&files, rename("/memories/d", "/memories/archive/d"));
    assert_eq!(renamed.answer, "Successfully renamed /memories/d to /memories/archive/d");
    assert_eq!(
        renamed.changes,
        vec![
            Change::Move { from: "/memories/d/e/y.md".into(), to: "/memories/archive/d/e/y.md".into() },
            Change::Move { from: "/memories/d/x.md".into(), to: "/memories/archive/d/x.md".into() },
        ]
    );
}

#[test]
fn commands_are_read_from_the_models_input_and_bad_ones_said() {
    assert_eq!(
        command(&json!({"command": "view", "path": "/memories", "view_range": [1, 5]})).unwrap(),
        Command::View { path: "/memories".into(), view_range: Some((1, 5)) }
    );
    assert_eq!(command(&json!({"command": "format"})).unwrap_err(), "Unknown command: format");
    assert_eq!(
        command(&json!({"command": "create", "path": "/memories/a"})).unwrap_err(),
        "memory create: `file_text` is required (a string)"
    );
    assert!(command(&json!("view")).is_err());
    assert!(
        command(&json!({"command": "insert", "path": "/memories/a", "insert_line": "x", "insert_text": "t"}))
            .is_err()
    );
}
