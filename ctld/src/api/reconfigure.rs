//! `scontrol reconfigure`: gctld reads the site file again (its
//! `[controller]` section; settings given as flags stay as given) and says
//! which settings differ from those it runs with. It applies none of
//! them while running (its scheduler, store and listeners are built from
//! them at start): a restart applies them, and running jobs keep running
//! across one. Started without a file, it has nothing to read again.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gsched_core::wire::ErrorBody;
use gsched_daemon::http::ApiError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{admin_only, Ctl, Who};
use crate::config::CtldConfig;

/// What reading the configuration file again found.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Reconfigured {
    /// The file read, or none when gctld was started without one.
    pub config_file: Option<String>,
    /// What was done, in words.
    pub message: String,
}

/// Reads the configuration file again (`scontrol reconfigure`;
/// administrators).
#[utoipa::path(post, path = "/api/v1/reconfigure", tag = "meta",
    responses(
        (status = 200, description = "The file says what gctld runs with (or there is none)", body = Reconfigured),
        (status = 403, description = "Not an administrator", body = ErrorBody),
        (status = 409, description = "Settings in the file differ from those gctld runs with: a restart applies them", body = ErrorBody),
        (status = 422, description = "The file cannot be read or holds a bad setting", body = ErrorBody)))]
pub(super) async fn reconfigure(
    State(ctl): Ctl,
    Extension(caller): Who,
) -> Result<Json<Reconfigured>, ApiError> {
    admin_only(&caller, "reconfigure the controller")?;
    let Some(path) = ctl.config.config_file.clone() else {
        return Ok(Json(Reconfigured {
            config_file: None,
            message: "gctld was started without a configuration file (its settings come from its command line): nothing to read again".into(),
        }));
    };
    let file = path.display().to_string();
    let read: CtldConfig = gsched_daemon::settings::reread(
        &path,
        crate::command::CLUSTER_DEFAULTS,
        &[crate::command::SECTION.to_string()],
        &CtldConfig::default(),
        &ctl.config,
        &ctl.config.fixed_settings,
    )
    .and_then(|c| crate::command::check(&c).map(|()| c))
    .map_err(|e| ApiError(StatusCode::UNPROCESSABLE_ENTITY, format!("{e:#}")))?;
    let changed = ctl.config.changed_settings(&read);
    if changed.is_empty() {
        return Ok(Json(Reconfigured {
            config_file: Some(file.clone()),
            message: format!("{file} read again: every setting is as gctld runs it"),
        }));
    }
    Err(ApiError(
        StatusCode::CONFLICT,
        format!(
            "{file} read again: {} differ from what gctld runs with; gctld applies settings at start, so restart it to apply them (running jobs keep running across a restart)",
            changed.join(", ")
        ),
    ))
}
