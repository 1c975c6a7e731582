//! Reading a tool call's `input` as the model sent it: a JSON object whose fields are checked one
//! by one, each problem said in words the model can act on. The model's input is untrusted: any
//! shape may come, and none may panic or echo back more than a field name.

use super::ToolResult;
use serde_json::{Map, Value};

/// The longest id, query or key memgate reads from a tool call.
const MAX_TEXT: usize = 2000;

pub(super) struct Input<'a> {
    map: &'a Map<String, Value>,
    tool: &'static str,
}

impl<'a> Input<'a> {
    /// The input object, with no fields but `allowed`.
    pub(super) fn new(
        tool: &'static str,
        input: &'a Value,
        allowed: &[&str],
    ) -> Result<Input<'a>, ToolResult> {
        let Value::Object(map) = input else {
            return Err(ToolResult::error(format!("{tool}: the input must be a JSON object")));
        };
        if let Some(unknown) = map.keys().find(|key| !allowed.contains(&key.as_str())) {
            let unknown: String = unknown.chars().take(40).collect();
            return Err(ToolResult::error(format!(
                "{tool}: unknown field {unknown:?}; the fields are {}",
                allowed.join(", ")
            )));
        }
        Ok(Input { map, tool })
    }

    pub(super) fn get(&self, field: &str) -> Option<&'a Value> {
        self.map.get(field).filter(|value| !value.is_null())
    }

    /// A required non-empty string of at most `MAX_TEXT` characters.
    pub(super) fn text(&self, field: &str) -> Result<&'a str, ToolResult> {
        self.optional_text(field)?
            .ok_or_else(|| ToolResult::error(format!("{}: {field} is required (a string)", self.tool)))
    }

    pub(super) fn optional_text(&self, field: &str) -> Result<Option<&'a str>, ToolResult> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(text)) if !text.trim().is_empty() && text.chars().count() <= MAX_TEXT => {
                Ok(Some(text.as_str()))
            }
            Some(Value::String(_)) => {
                Err(ToolResult::error(format!("{}: {field} must be 1 to {MAX_TEXT} characters", self.tool)))
            }
            Some(_) => Err(ToolResult::error(format!("{}: {field} must be a string", self.tool))),
        }
    }

    /// An optional integer in `min..=max`.
    pub(super) fn integer(&self, field: &str, min: u64, max: u64) -> Result<Option<u64>, ToolResult> {
        match self.get(field) {
            None => Ok(None),
            Some(value) => match value.as_u64() {
                Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
                _ => Err(ToolResult::error(format!(
                    "{}: {field} must be a whole number from {min} to {max}",
                    self.tool
                ))),
            },
        }
    }

    pub(super) fn boolean(&self, field: &str) -> Result<bool, ToolResult> {
        match self.get(field) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ToolResult::error(format!("{}: {field} must be true or false", self.tool))),
        }
    }

    /// A required JSON object.
    pub(super) fn object(&self, field: &str) -> Result<&'a Value, ToolResult> {
        match self.get(field) {
            Some(value @ Value::Object(_)) => Ok(value),
            None => Err(ToolResult::error(format!("{}: {field} is required (a JSON object)", self.tool))),
            Some(_) => Err(ToolResult::error(format!("{}: {field} must be a JSON object", self.tool))),
        }
    }
}
