//! The OpenAPI document held against the server: every documented
//! operation is called on a controller with a node and jobs (in one
//! process, fake nodes), and each request and answer is checked against
//! the schema the document gives for it. A field sent but not documented,
//! a required field missing, or a value of another type fails the test,
//! naming where.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use axum::{Extension, Router};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{document, router};
use crate::auth::{Caller, Via};
use crate::controller::tests::{running_job, spec};
use crate::controller::Controller;

/// The schema `$ref` names in `doc`.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("unexpected reference {r}"));
            let target = &doc["components"]["schemas"][name];
            assert!(!target.is_null(), "{r} is referenced but not defined");
            resolve(doc, target)
        }
        None => schema,
    }
}

/// The properties an object schema documents, through `allOf` (serde's
/// flatten), and the ones it requires.
fn properties<'a>(
    doc: &'a Value,
    schema: &'a Value,
    props: &mut BTreeMap<String, &'a Value>,
    required: &mut BTreeSet<String>,
) {
    let schema = resolve(doc, schema);
    if let Some(p) = schema.get("properties").and_then(Value::as_object) {
        props.extend(p.iter().map(|(k, v)| (k.clone(), v)));
    }
    if let Some(r) = schema.get("required").and_then(Value::as_array) {
        required.extend(r.iter().filter_map(Value::as_str).map(String::from));
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        properties(doc, part, props, required);
    }
}

fn type_matches(t: &str, value: &Value) -> bool {
    match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => false,
    }
}

/// Where `value` departs from `schema`, one line per problem.
fn check(doc: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    if let Some(branches) = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)
    {
        let fits = branches.iter().any(|b| {
            let mut problems = Vec::new();
            check(doc, b, value, at, &mut problems);
            problems.is_empty()
        });
        if !fits {
            out.push(format!(
                "{at}: {value} fits none of {}",
                Value::from(branches.clone())
            ));
        }
        return;
    }
    match &schema["type"] {
        Value::String(t) if !type_matches(t, value) => {
            out.push(format!("{at}: {value} is not of type {t}"));
            return;
        }
        Value::Array(ts)
            if !ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_matches(t, value)) =>
        {
            out.push(format!("{at}: {value} is not of type {}", schema["type"]));
            return;
        }
        _ => {}
    }
    // A schema made of parts (serde's flatten) describes an object.
    if schema.get("allOf").is_some() && schema.get("type").is_none() && !value.is_object() {
        out.push(format!("{at}: {value} is not an object"));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            out.push(format!("{at}: {value} is not one of {}", schema["enum"]));
        }
    }
    match value {
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    check(doc, item, v, &format!("{at}[{i}]"), out);
                }
            }
        }
        Value::Object(fields) => {
            let mut props = BTreeMap::new();
            let mut required = BTreeSet::new();
            properties(doc, schema, &mut props, &mut required);
            for r in &required {
                if !fields.contains_key(r) {
                    out.push(format!("{at}: required field {r} is missing"));
                }
            }
            let map_values = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in fields {
                let here = format!("{at}.{k}");
                match (props.get(k), map_values) {
                    (Some(s), _) => check(doc, s, v, &here, out),
                    (None, Some(s)) => check(doc, s, v, &here, out),
                    // A free-form object (no properties documented).
                    (None, None) if props.is_empty() => {}
                    (None, None) => out.push(format!("{here} is sent but not documented")),
                }
            }
        }
        _ => {}
    }
}

/// Matches `/api/v1/jobs/{id}` to `/api/v1/jobs/7`.
fn matches_template(template: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}')))
}

struct Conformance {
    doc: Value,
    app: Router,
    /// (method, template) of each documented operation called.
    called: BTreeSet<(String, String)>,
    problems: Vec<String>,
}

impl Conformance {
    fn new(ctl: Arc<Controller>) -> Conformance {
        let admin = Caller {
            user: "root".into(),
            uid: Some(0),
            gid: Some(0),
            admin: true,
            via: Via::Socket,
            expires: None,
            job: None,
        };
        Conformance {
            doc: document(),
            app: router(ctl).layer(Extension(admin)),
            called: BTreeSet::new(),
            problems: Vec::new(),
        }
    }

    /// Calls `method path` with `body`, checks request and answer against
    /// the document, and returns the status and answer.
    async fn call(&mut self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let lower = method.to_ascii_lowercase();
        let doc = self.doc.clone();
        let (template, operation) = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(t, item)| matches_template(t, path) && item.get(&lower).is_some())
            .map(|(t, item)| (t.clone(), &item[&lower]))
            .unwrap_or_else(|| panic!("the document has no {method} {path}"));
        self.called.insert((lower.clone(), template.clone()));
        if let Some(b) = &body {
            let schema = &operation["requestBody"]["content"]["application/json"]["schema"];
            assert!(
                !schema.is_null(),
                "{method} {template} documents no request body"
            );
            check(
                &doc,
                schema,
                b,
                &format!("{method} {path} request"),
                &mut self.problems,
            );
        }
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let answer = self.app.clone().oneshot(request).await.unwrap();
        let status = answer.status().as_u16();
        let bytes = axum::body::to_bytes(answer.into_body(), 1 << 24)
            .await
            .unwrap();
        let value: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{method} {path}: the answer is not JSON ({e})"));
        let responses = &operation["responses"];
        let documented = responses
            .get(status.to_string())
            .or_else(|| responses.get("default"))
            .unwrap_or_else(|| {
                panic!("{method} {template} does not document status {status}: {value}")
            });
        let schema = &documented["content"]["application/json"]["schema"];
        assert!(
            !schema.is_null(),
            "{method} {template} {status} documents no JSON body"
        );
        check(
            &doc,
            schema,
            &value,
            &format!("{method} {path} {status}"),
            &mut self.problems,
        );
        (status, value)
    }
}

#[tokio::test]
async fn every_answer_matches_the_openapi_document() {
    let (_dir, _nodes, ctl, running) = running_job(false).await;
    let mut c = Conformance::new(Arc::clone(&ctl));
    let job = |name: &str| {
        let mut s = spec(name, false);
        s.time_limit = Some(600);
        serde_json::to_value(s).unwrap()
    };
    let (s, sub) = c.call("POST", "/api/v1/jobs", Some(job("b"))).await;
    assert_eq!(s, 201, "{sub}");
    let pending = sub["job_id"].as_u64().unwrap();
    // (method, path, body, the status expected): errors are called on
    // purpose too, so their shape is checked as well.
    let calls: Vec<(&str, String, Option<Value>, u16)> = vec![
        ("GET", "/healthz".into(), None, 200),
        ("GET", "/api/v1/whoami".into(), None, 200),
        (
            "POST",
            "/api/v1/tokens".into(),
            Some(json!({"lifetime": 60})),
            200,
        ),
        ("GET", "/api/v1/jobs?state=all".into(), None, 200),
        ("GET", format!("/api/v1/jobs/{running}"), None, 200),
        ("GET", "/api/v1/jobs/999".into(), None, 404),
        ("GET", format!("/api/v1/jobs/{running}/script"), None, 200),
        ("GET", format!("/api/v1/jobs/{running}/events"), None, 200),
        ("POST", format!("/api/v1/jobs/{pending}/hold"), None, 200),
        (
            "PATCH",
            format!("/api/v1/jobs/{pending}"),
            Some(json!({"name": "c", "time_limit": 300})),
            200,
        ),
        (
            "PATCH",
            format!("/api/v1/jobs/{pending}"),
            Some(json!({"time_limit": null, "dependency": null})),
            200,
        ),
        ("POST", format!("/api/v1/jobs/{pending}/release"), None, 200),
        (
            "POST",
            format!("/api/v1/jobs/{running}/steps"),
            Some(json!({"name": "hostname", "ntasks": 1})),
            200,
        ),
        (
            "POST",
            format!("/api/v1/jobs/{running}/steps"),
            Some(json!({"name": "wide", "layout": {"nodes": 1}})),
            200,
        ),
        (
            "POST",
            format!("/api/v1/jobs/{running}/steps/1/end"),
            Some(json!({"exit_code": 0})),
            200,
        ),
        ("POST", format!("/api/v1/jobs/{running}/suspend"), None, 200),
        ("POST", format!("/api/v1/jobs/{running}/resume"), None, 200),
        // Started without a configuration file: nothing to read again.
        ("POST", "/api/v1/reconfigure".into(), None, 200),
        ("GET", "/api/v1/nodes".into(), None, 200),
        ("GET", "/api/v1/nodes/n1/mig".into(), None, 200),
        (
            "POST",
            "/api/v1/nodes/n1/mig".into(),
            Some(json!({"gpu": 0, "frozen": true})),
            200,
        ),
        ("GET", "/api/v1/instances".into(), None, 200),
        ("GET", "/api/v1/utilization".into(), None, 200),
        ("GET", "/api/v1/tasks".into(), None, 200),
        (
            "POST",
            "/api/v1/accounts".into(),
            Some(json!({"op": "add_account", "name": "physics", "shares": 2})),
            200,
        ),
        (
            "POST",
            "/api/v1/accounts".into(),
            Some(json!({"op": "add_user", "user": "root", "account": "physics"})),
            200,
        ),
        ("GET", "/api/v1/accounts".into(), None, 200),
        (
            "POST",
            "/api/v1/qos".into(),
            Some(json!({"op": "add", "qos": {"name": "high", "priority": 10}})),
            200,
        ),
        (
            "POST",
            "/api/v1/qos".into(),
            Some(json!({"op": "delete", "name": "nosuch"})),
            400,
        ),
        ("GET", "/slurm/v0.0.44/ping".into(), None, 200),
        ("GET", "/slurm/v0.0.41/jobs".into(), None, 200),
        ("GET", format!("/slurm/v0.0.44/job/{running}"), None, 200),
        ("GET", "/slurm/v0.0.44/job/999".into(), None, 404),
        ("GET", "/slurm/v0.0.44/nodes".into(), None, 200),
        ("GET", "/slurm/v0.0.44/node/n1".into(), None, 200),
        ("GET", "/slurm/v0.0.44/partitions".into(), None, 200),
        ("GET", "/slurm/v0.0.9/partitions".into(), None, 404),
        (
            "POST",
            "/slurm/v0.0.44/job/submit".into(),
            Some(json!({"script": "#!/bin/sh\ntrue\n",
            "job": {"current_working_directory": "/tmp", "environment": ["PATH=/bin"], "x_unknown": 1}})),
            200,
        ),
        (
            "DELETE",
            format!("/slurm/v0.0.44/job/{running}?signal=USR1"),
            None,
            200,
        ),
        (
            "DELETE",
            format!("/slurm/v0.0.44/job/{pending}?signal=USR1"),
            None,
            409,
        ),
        ("DELETE", format!("/api/v1/jobs/{pending}"), None, 200),
        ("POST", format!("/api/v1/jobs/{running}/requeue"), None, 200),
        (
            "POST",
            "/api/v1/nodes/n1/state".into(),
            Some(json!({"state": "drain", "reason": "test"})),
            200,
        ),
    ];
    for (method, path, body, expected) in calls {
        let (status, answer) = c.call(method, &path, body).await;
        assert_eq!(status, expected, "{method} {path}: {answer}");
    }
    // Without a token, on the TCP API: the authentication layer's answer.
    c.app = super::tcp_app(Arc::clone(&ctl));
    for path in ["/api/v1/jobs", "/slurm/v0.0.44/jobs"] {
        let (status, answer) = c.call("GET", path, None).await;
        assert_eq!(status, 401, "{path}: {answer}");
    }
    assert!(
        c.problems.is_empty(),
        "answers that depart from the document:\n{}",
        c.problems.join("\n")
    );
    // Every operation the document describes was called, but those whose
    // answer is not JSON.
    let not_json = [("get", "/metrics"), ("get", "/openapi.json")];
    let mut missed = Vec::new();
    for (template, item) in c.doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let op = (method.clone(), template.clone());
            if !c.called.contains(&op) && !not_json.contains(&(method.as_str(), template.as_str()))
            {
                missed.push(format!("{method} {template}"));
            }
        }
    }
    assert!(
        missed.is_empty(),
        "documented but never called here: {missed:?}"
    );
}

#[test]
fn the_checker_finds_undocumented_missing_and_mistyped_fields() {
    let doc = json!({"components": {"schemas": {
        "A": {"type": "object", "required": ["n"], "properties": {
            "n": {"type": "integer"}, "s": {"type": ["string", "null"]}}},
        "B": {"allOf": [{"$ref": "#/components/schemas/A"},
            {"type": "object", "properties": {"extra": {"type": "boolean"}}}]}}}});
    let a = json!({"$ref": "#/components/schemas/A"});
    let b = json!({"$ref": "#/components/schemas/B"});
    let problems = |schema: &Value, v: Value| {
        let mut out = Vec::new();
        check(&doc, schema, &v, "x", &mut out);
        out
    };
    assert!(problems(&a, json!({"n": 1, "s": null})).is_empty());
    assert!(problems(&b, json!({"n": 1, "extra": true})).is_empty());
    assert_eq!(
        problems(&a, json!({"n": 1, "z": 2})),
        ["x.z is sent but not documented"]
    );
    assert_eq!(problems(&a, json!({})), ["x: required field n is missing"]);
    assert_eq!(
        problems(&a, json!({"n": "1"})),
        ["x.n: \"1\" is not of type integer"]
    );
    assert_eq!(
        problems(&b, json!({"n": 1, "extra": 1})),
        ["x.extra: 1 is not of type boolean"]
    );
    assert_eq!(problems(&b, json!([1])), ["x: [1] is not an object"]);
}

#[test]
fn every_reference_resolves_and_no_schema_is_named_after_a_rust_type() {
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let doc = document();
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(all.len() > 50, "{all:?}");
    for r in &all {
        let name = r.strip_prefix("#/components/schemas/").unwrap();
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "{r} is not defined"
        );
    }
    let rust = [
        "u8", "u16", "u32", "u64", "i32", "i64", "usize", "String", "BTreeMap", "HashMap", "Vec",
        "Option", "Value",
    ];
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(!rust.contains(&name.as_str()), "a schema is named {name}");
    }
    let ids: Vec<&str> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .filter_map(|op| op["operationId"].as_str())
        .collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "operation ids repeat: {ids:?}");
}
