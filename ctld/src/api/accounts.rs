//! Accounts and fair share: `sacctmgr` changes them (administrators only),
//! `sshare` reads them (anyone authenticated).

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use gsched_core::fairshare::{AccountChange, ShareRow, StoredFairShare};
use gsched_daemon::http::{ApiError, Body};
use serde::Serialize;

use super::{Ctl, Who};
use crate::controller::unix_now;

/// The accounts, associations and `sshare`'s lines.
#[derive(Debug, Serialize)]
pub struct AccountsView {
    #[serde(flatten)]
    pub stored: StoredFairShare,
    pub shares: Vec<ShareRow>,
    pub half_life_secs: i64,
}

pub async fn list(State(ctl): Ctl) -> Json<AccountsView> {
    let c = ctl.lock();
    Json(AccountsView {
        stored: c.stored_accounts(),
        shares: c.share_rows(unix_now()),
        half_life_secs: c.accounting().half_life_secs,
    })
}

pub async fn change(
    State(ctl): Ctl,
    Extension(caller): Who,
    Body(change): Body<AccountChange>,
) -> Result<Json<AccountsView>, ApiError> {
    if !caller.admin {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            format!(
                "Access/permission denied: only an administrator may change accounts ({} is not one)",
                caller.user
            ),
        ));
    }
    tracing::info!(?change, by = caller.user, "accounts changed");
    ctl.operate(|c, _| c.change_accounts(&change)).await?;
    Ok(list(State(ctl)).await)
}
