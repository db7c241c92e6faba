//! The OpenAPI document's frame: title, description, authentication and
//! tags. Its paths and schemas come from the handlers' `#[utoipa::path]`
//! and the `ToSchema` types, as the router registers them (`documented`).

use std::collections::BTreeMap;

use serde_json::Value;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::Modify;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "gsched REST API",
        description = "gsched's own API (/api/v1) and slurmrestd-compatible endpoints \
            (/slurm/{version}). Every path but /healthz, /metrics, /openapi.json and the \
            dashboard needs a token (gsched token), sent as Authorization: Bearer or as \
            X-SLURM-USER-TOKEN (optionally with X-SLURM-USER-NAME), not both; on the \
            controller host the same API is served without tokens on its unix socket. \
            Daemon-to-daemon /internal/v1 paths take the cluster key and are not described \
            here. Errors are {\"error\": \"...\"} naming the problem; slurmrestd's paths \
            answer in slurmrestd's shape, with errors[].",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    servers((url = "http://127.0.0.1:6817", description = "gctld's default address")),
    security(("bearerAuth" = []), ("token" = [], "user" = []), ("token" = [])),
    modifiers(&Authentication),
    // Referenced from query parameters, which utoipa does not collect.
    components(schemas(gsched_core::outcome::SignalScope)),
    tags(
        (name = "jobs", description = "Submit, list, change and cancel jobs"),
        (name = "steps", description = "Steps (srun) inside a running job"),
        (name = "nodes", description = "Nodes, GPU instances, MIG layouts and use"),
        (name = "accounts", description = "Accounts, fair share and QOS (sacctmgr, sshare)"),
        (name = "auth", description = "Tokens and the caller's identity"),
        (name = "meta", description = "Health, metrics and this document; no token"),
        (name = "slurmrestd", description = "slurmrestd's data parser v0.0.41 to v0.0.44")
    )
)]
pub struct ApiDoc;

/// The three ways to present a token.
struct Authentication;

impl Modify for Authentication {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearerAuth",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
        components.add_security_scheme(
            "token",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-SLURM-USER-TOKEN"))),
        );
        components.add_security_scheme(
            "user",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-SLURM-USER-NAME"))),
        );
    }
}

/// utoipa names a type alias by what it aliases: `JobId` (`u64`) becomes a
/// schema named `u64`, the job's limits (`ResourceLimits`) one named
/// `BTreeMap`. The first is inlined where it is referenced, the second
/// given its own name.
pub fn tidy(doc: &mut Value) {
    common_answers(doc);
    const PRIMITIVES: [&str; 2] = ["u64", "u32"];
    const RENAMED: [(&str, &str); 1] = [("BTreeMap", "ResourceLimits")];
    let schemas = doc["components"]["schemas"].as_object_mut();
    let Some(schemas) = schemas else { return };
    let inline: BTreeMap<String, Value> = PRIMITIVES
        .iter()
        .filter_map(|p| schemas.remove(*p).map(|s| (format!("{REFS}{p}"), s)))
        .collect();
    let mut renames = BTreeMap::new();
    for (from, to) in RENAMED {
        if let Some(s) = schemas.remove(from) {
            schemas.insert(to.to_string(), s);
            renames.insert(format!("{REFS}{from}"), Value::from(format!("{REFS}{to}")));
        }
    }
    rewrite(doc, &inline, &renames);
}

const REFS: &str = "#/components/schemas/";

/// The answers every operation shares, which no handler writes itself:
/// 401 from the authentication layer where a token is needed, and 503
/// where a write the store could not commit is refused.
fn common_answers(doc: &mut Value) {
    let error = |description: &str| {
        serde_json::json!({
            "description": description,
            "content": {"application/json": {"schema": {"$ref": format!("{REFS}ErrorBody")}}},
        })
    };
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            let open = op["security"].as_array().is_some_and(|s| {
                s.iter()
                    .all(|r| r.as_object().is_some_and(|o| o.is_empty()))
            });
            let Some(responses) = op["responses"].as_object_mut() else {
                continue;
            };
            if !open {
                responses.entry("401").or_insert_with(|| {
                    error("No valid token, or a user name that is not the token's: the error says why")
                });
            }
            if method != "get" && path.starts_with("/api/v1/") {
                responses.entry("503").or_insert_with(|| {
                    error("The store could not commit the change: nothing was changed, try again")
                });
            }
        }
    }
}

fn rewrite(v: &mut Value, inline: &BTreeMap<String, Value>, renames: &BTreeMap<String, Value>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref") {
                if let Some(schema) = inline.get(r) {
                    *v = schema.clone();
                    return;
                }
                if let Some(to) = renames.get(r) {
                    map.insert("$ref".into(), to.clone());
                }
            }
            map.values_mut().for_each(|x| rewrite(x, inline, renames));
        }
        Value::Array(items) => items.iter_mut().for_each(|x| rewrite(x, inline, renames)),
        _ => {}
    }
}
