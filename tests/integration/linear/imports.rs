//! Import line parsing in linear time: each line of a body is measured, parsed if it is within
//! the line limit, checked as a record, and counted in the report, whose list of invalid lines
//! stops growing at its bound. What the store does with valid lines is the store's (a query per
//! line, tested there).

use super::{SIZES, SMALL_SIZES, assert_linear_at, repeat_to};
use memgate::memory::checks::envelope::{Rules, check};
use memgate::memory::checks::schemas::SchemaSet;
use memgate::memory::transfer::{LineOutcome, ReportLines, max_line_bytes, parse_line};

const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// A named shape and how to make it at a size.
type Shapes = Vec<(&'static str, fn(usize) -> String)>;

/// Each line as `import` reads it, minus the store: measured, parsed within the limit, checked,
/// counted in the report.
fn read_lines(body: &str, max_line: usize, rules: &Rules<'_>) -> ReportLines {
    let mut report = ReportLines::default();
    for (index, text) in body.lines().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        let outcome = match parse_line(text, max_line) {
            Err(problem) => LineOutcome::Invalid { problems: vec![problem] },
            Ok(value) => match check(&value, rules) {
                Err(problems) => LineOutcome::Invalid { problems },
                Ok(_) => LineOutcome::New { id: "new".into() },
            },
        };
        report.push(index + 1, outcome);
    }
    report
}

fn run(sizes: &[usize], shapes: Shapes) {
    let schemas = SchemaSet::load(None).unwrap();
    let rules = Rules { schemas: &schemas, max_content_bytes: MAX_CONTENT_BYTES, now_ms: 1_767_225_600_000 };
    let max_line = max_line_bytes(MAX_CONTENT_BYTES);
    for (shape, make) in shapes {
        assert_linear_at(sizes, shape, make, |body: &String| {
            let _ = read_lines(body, max_line, &rules);
        });
    }
}

/// Lines of a megabyte and more: past the line limit (1 MiB here) nothing is parsed.
#[test]
fn long_import_lines_are_read_in_linear_time() {
    run(
        &SIZES,
        vec![
            ("one huge line", |n| {
                format!("{{\"type\": \"fact\", \"content\": {{\"statement\": \"{}\"}}}}", "x".repeat(n))
            }),
            ("one huge line of nested arrays", |n| "[".repeat(n)),
            ("lines just under the limit", |n| {
                let line = format!("\"{}\"\n", "x".repeat(1024 * 1024 - 3));
                repeat_to(&line, n)
            }),
        ],
    );
}

/// Many short lines, each checked as a record (at `SMALL_SIZES`: the checks scan for secrets at
/// about a megabyte a second in a debug build).
#[test]
fn many_short_import_lines_are_read_in_linear_time() {
    run(
        &SMALL_SIZES,
        vec![
            ("many short lines that are not JSON", |n| repeat_to("x\n", n)),
            ("many lines of broken JSON", |n| repeat_to("{\"type\":\n", n)),
            ("many empty records", |n| repeat_to("{}\n", n)),
            ("many records of several problems", |n| {
                repeat_to("{\"type\": \"nope\", \"scope\": [\"User U1\"], \"priority\": 9, \"pwd\": 1}\n", n)
            }),
            ("many valid records", |n| {
                repeat_to(
                    "{\"type\": \"fact\", \"scope\": [\"public\"], \"content\": {\"statement\": \"ok\"}}\n",
                    n,
                )
            }),
            ("blank lines", |n| repeat_to(" \t\n\n", n)),
        ],
    );
}
