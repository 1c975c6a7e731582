//! The webhook body: rendered once, when the action is decided, from the endpoint's template (or
//! `DEFAULT_TEMPLATE`), and stored in the outbox, so every attempt and replay sends the same bytes
//! under the same `webhook-id`.
//!
//! What a template sees (`BodyContext`): the event id and when it was decided, the tenant, the
//! request id, the subject, the record (id, type, schema_version, revision, key, content), the
//! action (index, service, method, params) and the matched condition. The person's words — the
//! excerpt that matched and the text conditions read — are there only for an endpoint with
//! `include_conversation = true`; otherwise `matched.excerpt` is absent and `conversation` is none.
//! A template must render one JSON value; `| json` writes any variable as JSON.

use super::conditions::Matched;
use crate::config::triggers::{TriggersConfig, TriggersConfigError};
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;
use serde_json::{Map, Value};

/// A Standard Webhooks payload: `type`, `timestamp` (of the event), `data`.
pub const DEFAULT_TEMPLATE: &str = concat!(
    r#"{"type": "memgate.trigger.fired", "timestamp": {{ decided_at | json }}, "data": {"#,
    r#""event_id": {{ event_id | json }}, "tenant": {{ tenant | json }}, "#,
    r#""request_id": {{ request_id | json }}, "subject": {{ subject | json }}, "#,
    r#""service": {{ action.service | json }}, "method": {{ action.method | json }}, "#,
    r#""params": {{ action.params | json }}, "action_index": {{ action.index | json }}, "#,
    r#""record": {{ record | json }}, "matched": {{ matched | json }}"#,
    r#"{% if conversation is not none %}, "conversation": {{ conversation | json }}{% endif %}}}"#,
);

const DEFAULT_NAME: &str = "default";

/// The variables of a body template.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BodyContext {
    pub event_id: String,
    /// RFC 3339.
    pub decided_at: String,
    pub tenant: String,
    pub request_id: String,
    pub subject: Option<String>,
    pub record: RecordView,
    pub action: ActionView,
    pub matched: Matched,
    pub conversation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordView {
    pub id: String,
    #[serde(rename = "type")]
    pub record_type: String,
    pub schema_version: String,
    pub revision: i64,
    pub key: Option<String>,
    pub content: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionView {
    pub index: usize,
    pub service: String,
    pub method: String,
    pub params: Map<String, Value>,
}

impl BodyContext {
    /// Drops the person's words unless the endpoint opted in.
    pub fn for_endpoint(mut self, include_conversation: bool) -> BodyContext {
        if !include_conversation {
            self.matched.excerpt = None;
            self.conversation = None;
        }
        self
    }
}

/// Every endpoint's body template, compiled once.
pub struct BodyTemplates {
    env: Environment<'static>,
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.add_filter("json", |value: minijinja::Value| {
        if value.is_undefined() {
            return Err(minijinja::Error::from(minijinja::ErrorKind::UndefinedError));
        }
        serde_json::to_string(&value).map_err(|err| {
            minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, format!("not JSON: {err}"))
        })
    });
    env
}

impl BodyTemplates {
    /// Compiles the default template and each endpoint's own, once, and checks that each renders
    /// JSON for a sample, with and without the conversation. `[triggers]` is otherwise validated
    /// with the config; what a template sees is known here. Every bad template, by its key.
    pub fn new(config: &TriggersConfig) -> Result<BodyTemplates, Vec<TriggersConfigError>> {
        let mut env = environment();
        env.add_template_owned(DEFAULT_NAME.to_owned(), DEFAULT_TEMPLATE.to_owned()).map_err(|err| {
            vec![TriggersConfigError {
                key: "triggers.endpoints".into(),
                message: format!("the default body template: {err}"),
            }]
        })?;
        let mut errors = Vec::new();
        for (name, endpoint) in &config.endpoints {
            let Some(template) = &endpoint.template else { continue };
            let own = format!("endpoint:{name}");
            let checked = env
                .add_template_owned(own.clone(), template.clone())
                .and_then(|()| env.get_template(&own))
                .map_err(|err| err.to_string())
                .and_then(|compiled| renders_json_for_samples(&compiled));
            if let Err(message) = checked {
                errors.push(TriggersConfigError {
                    key: format!("triggers.endpoints.{name}.template"),
                    message,
                });
            }
        }
        if errors.is_empty() { Ok(BodyTemplates { env }) } else { Err(errors) }
    }

    /// The body for `endpoint` (its own template, or the default when it has none or is not
    /// configured), checked to be JSON.
    pub fn render(&self, endpoint: &str, context: &BodyContext) -> Result<String, String> {
        let own = format!("endpoint:{endpoint}");
        let template = match self.env.get_template(&own) {
            Ok(template) => template,
            Err(_) => self.env.get_template(DEFAULT_NAME).map_err(|err| err.to_string())?,
        };
        let body = template
            .render(minijinja::Value::from(Serde(context)))
            .map_err(|err| format!("the body template failed: {err}"))?;
        serde_json::from_str::<serde::de::IgnoredAny>(&body)
            .map_err(|err| format!("the body template did not render JSON ({err})"))?;
        Ok(body)
    }
}

/// A sample context, for checking templates at startup.
pub fn sample_context() -> BodyContext {
    BodyContext {
        event_id: "evt_00000000000000000000000000000000".to_owned(),
        decided_at: "2024-06-15T09:00:00Z".to_owned(),
        tenant: "default".to_owned(),
        request_id: "req_sample".to_owned(),
        subject: Some("u-789".to_owned()),
        record: RecordView {
            id: "sop-escalation".to_owned(),
            record_type: "internal_sop".to_owned(),
            schema_version: "v1".to_owned(),
            revision: 1,
            key: None,
            content: serde_json::json!({"process_name": "customer complaint escalation"}),
        },
        action: ActionView {
            index: 0,
            service: "ticketing".to_owned(),
            method: "create_ticket".to_owned(),
            params: Map::new(),
        },
        matched: Matched {
            index: 1,
            kind: "keywords",
            condition: Value::String("mentions lawyer or sue".to_owned()),
            name: None,
            hit: "lawyer".to_owned(),
            excerpt: Some("lawyer".to_owned()),
        },
        conversation: Some("I'm going to talk to my lawyer".to_owned()),
    }
}

/// Compiles `template` and renders JSON for a sample, with and without the conversation.
pub fn check_template(template: &str) -> Result<(), String> {
    let mut env = environment();
    env.add_template_owned("t".to_owned(), template.to_owned()).map_err(|err| err.to_string())?;
    let compiled = env.get_template("t").map_err(|err| err.to_string())?;
    renders_json_for_samples(&compiled)
}

fn renders_json_for_samples(compiled: &minijinja::Template<'_, '_>) -> Result<(), String> {
    for include in [true, false] {
        let context = sample_context().for_endpoint(include);
        let body = compiled.render(minijinja::Value::from(Serde(&context))).map_err(|err| err.to_string())?;
        serde_json::from_str::<serde::de::IgnoredAny>(&body)
            .map_err(|err| format!("the template does not render JSON for a sample ({err})"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::triggers::{EndpointConfig, EndpointUrl};

    fn config(template: Option<&str>) -> TriggersConfig {
        let mut config = TriggersConfig::default();
        config.endpoints.insert(
            "chat".to_owned(),
            EndpointConfig {
                url: EndpointUrl::parse("https://chat.example.com/hook").unwrap(),
                secrets: vec![],
                timeout_ms: 5_000,
                include_conversation: false,
                allow_private: false,
                max_per_minute: 60,
                template: template.map(str::to_owned),
            },
        );
        config
    }

    #[test]
    fn the_default_body_is_a_standard_webhooks_payload_without_the_conversation() {
        let templates = BodyTemplates::new(&config(None)).unwrap();
        let body = templates.render("ticketing", &sample_context().for_endpoint(false)).unwrap();
        let json: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["type"], "memgate.trigger.fired");
        assert_eq!(json["timestamp"], "2024-06-15T09:00:00Z");
        let data = &json["data"];
        assert_eq!(data["event_id"], "evt_00000000000000000000000000000000");
        assert_eq!(data["subject"], "u-789");
        assert_eq!(data["service"], "ticketing");
        assert_eq!(data["record"]["type"], "internal_sop");
        assert_eq!(data["matched"]["hit"], "lawyer");
        assert!(data["matched"].get("excerpt").is_none());
        assert!(data.get("conversation").is_none());
        assert!(!body.contains("talk to my lawyer"), "{body}");

        let with = templates.render("ticketing", &sample_context().for_endpoint(true)).unwrap();
        let json: Value = serde_json::from_str(&with).unwrap();
        assert_eq!(json["data"]["conversation"], "I'm going to talk to my lawyer");
        assert_eq!(json["data"]["matched"]["excerpt"], "lawyer");
    }

    #[test]
    fn an_endpoint_template_renders_its_own_json() {
        let template =
            r#"{"text": {{ ("Escalation for " ~ (subject or "someone") ~ ": " ~ matched.hit) | json }}}"#;
        let templates = BodyTemplates::new(&config(Some(template))).unwrap();
        let body = templates.render("chat", &sample_context()).unwrap();
        assert_eq!(body, r#"{"text": "Escalation for u-789: lawyer"}"#);
        assert!(check_template(template).is_ok());
        assert!(check_template("not json {{ tenant }}").unwrap_err().contains("JSON"));
        assert!(check_template("{{ undefined_thing | json }}").is_err(), "strict undefined");
        assert!(check_template("{% if %}").is_err());
    }

    #[test]
    fn a_bad_template_is_refused_by_its_key() {
        for template in ["{{ nope", "not json {{ tenant }}"] {
            let errors = BodyTemplates::new(&config(Some(template))).err().unwrap();
            let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
            assert_eq!(keys, ["triggers.endpoints.chat.template"], "{template}");
        }
    }

    #[test]
    fn values_are_escaped_as_json() {
        let mut context = sample_context();
        context.subject = Some("a\"b</x>\n".to_owned());
        let templates = BodyTemplates::new(&config(None)).unwrap();
        let body = templates.render("x", &context).unwrap();
        let json: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["data"]["subject"], "a\"b</x>\n");
    }
}
