//! Accounts, fair share and QOS: `sacctmgr` changes them (administrators
//! only), `sshare` and `sacctmgr show` read them (anyone authenticated).

use axum::extract::State;
use axum::{Extension, Json};
use gsched_core::cluster::StoredAccounting;
use gsched_core::fairshare::{AccountChange, ShareRow};
use gsched_core::qos::QosChange;
use gsched_core::wire::ErrorBody;
use gsched_daemon::http::{ApiError, Body};
use serde::Serialize;

use super::{Ctl, Who};
use crate::controller::unix_now;

/// The accounts, associations and `sshare`'s lines.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AccountsView {
    #[serde(flatten)]
    pub stored: StoredAccounting,
    pub shares: Vec<ShareRow>,
    pub half_life_secs: i64,
}

/// Accounts, associations, QOS and fair-share lines (`sacctmgr show`,
/// `sshare`).
#[utoipa::path(get, path = "/api/v1/accounts", tag = "accounts",
    responses((status = 200, description = "The accounting state", body = AccountsView)))]
pub async fn list(State(ctl): Ctl) -> Json<AccountsView> {
    let c = ctl.lock();
    Json(AccountsView {
        stored: c.stored_accounts(),
        shares: c.share_rows(unix_now()),
        half_life_secs: c.accounting().half_life_secs,
    })
}

/// Adds, changes or removes an account, a user's association or its
/// limits (`sacctmgr add|modify|delete`; administrators).
#[utoipa::path(post, path = "/api/v1/accounts", tag = "accounts",
    request_body = AccountChange,
    responses(
        (status = 200, description = "The accounting state after the change", body = AccountsView),
        (status = 400, description = "Bad request: the error names the problem", body = ErrorBody),
        (status = 403, description = "Not an administrator", body = ErrorBody),
        (status = 409, description = "The change conflicts with what exists", body = ErrorBody)))]
pub async fn change(
    State(ctl): Ctl,
    Extension(caller): Who,
    Body(change): Body<AccountChange>,
) -> Result<Json<AccountsView>, ApiError> {
    super::admin_only(&caller, "change accounts")?;
    tracing::info!(?change, by = caller.user, "accounts changed");
    ctl.operate(|c, _| c.change_accounts(&change)).await?;
    Ok(list(State(ctl)).await)
}

/// Adds, changes or removes a QOS (`sacctmgr ... qos`; administrators).
#[utoipa::path(post, path = "/api/v1/qos", tag = "accounts",
    request_body = QosChange,
    responses(
        (status = 200, description = "The accounting state after the change", body = AccountsView),
        (status = 400, description = "Bad request: the error names the problem", body = ErrorBody),
        (status = 403, description = "Not an administrator", body = ErrorBody),
        (status = 409, description = "The change conflicts with what exists", body = ErrorBody)))]
pub async fn change_qos(
    State(ctl): Ctl,
    Extension(caller): Who,
    Body(change): Body<QosChange>,
) -> Result<Json<AccountsView>, ApiError> {
    super::admin_only(&caller, "change QOS")?;
    tracing::info!(?change, by = caller.user, "QOS changed");
    ctl.operate(|c, _| c.change_qos(&change)).await?;
    Ok(list(State(ctl)).await)
}
