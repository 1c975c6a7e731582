//! Rendering in linear time: a record's line escapes `<`, `>`, `&`, their compatibility forms and
//! the angle brackets that look like them character by character, and the block's frame check
//! reads the rendered block once, however many of those characters a record holds.

use super::{assert_linear, repeat_to};
use memgate::inject::{RenderItem, Templates, record_line};
use serde_json::{Map, Value, json};

/// A named shape and how to make it at a size.
type Shapes = Vec<(&'static str, fn(usize) -> Value)>;

fn item(content: Value) -> RenderItem<'static> {
    RenderItem {
        id: "mem-1".into(),
        record_type: "fact".into(),
        priority: 3,
        updated_at: "2024-06-15T09:00:00Z".into(),
        content: std::borrow::Cow::Owned(content),
        stub: None,
        written_by: None,
    }
}

fn templates() -> Templates {
    Templates::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates")).unwrap()
}

fn run(shapes: Shapes) {
    let templates = templates();
    for (shape, make) in shapes {
        assert_linear(shape, make, |content: &Value| {
            let items = [item(content.clone())];
            let _ = record_line(&items[0]);
            let _ = templates.render("v1", &items);
        });
    }
}

#[test]
fn look_alike_brackets_render_in_linear_time() {
    run(vec![
        ("look-alike angle brackets", |n| json!({"note": repeat_to("⟨‹〈〈˂≮≯❮ᐸ⟩›〉〉˃❯ᐳ", n)})),
        ("closing tags in look-alike brackets", |n| json!({"note": repeat_to("⟨/MEMORY_CONTEXT⟩", n)})),
        ("many keys of look-alike brackets", |n| {
            let keys: Map<String, Value> =
                (0..n / 40).map(|i| (format!("⟨{i:08}⟩‹›〈〉"), json!("˂˃"))).collect();
            Value::Object(keys)
        }),
    ]);
}

#[test]
fn tags_and_other_escapes_render_in_linear_time() {
    run(vec![
        ("closing tags", |n| json!({"note": repeat_to("</MEMORY_CONTEXT>", n)})),
        ("fullwidth and small forms", |n| json!({"note": repeat_to("＜＞＆﹤﹥﹠", n)})),
        (
            "control characters and line separators",
            |n| json!({"note": repeat_to("\u{0}\u{1f}\u{85}\u{2028}\n", n)}),
        ),
    ]);
}
