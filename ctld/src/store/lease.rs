//! The leadership row (`leadership`, one row): read on the database's
//! clock, taken by compare-and-set, renewed, given up, and checked by every
//! commit of the leader (the decisions are `gsched_core::leadership`'s).

use gsched_core::leadership::Lease;

use super::sql::ConnRef;

/// What the leader holds: its epoch and how the row names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub epoch: i64,
    pub holder: String,
}

/// The lease as stored (`None`: no controller ever led), and the
/// database's clock, unix milliseconds.
pub async fn read(mut c: ConnRef<'_>) -> Result<(Option<Lease>, i64), sqlx::Error> {
    let now = c.engine().now_ms();
    let sql = format!(
        "SELECT epoch, holder, address, expires_ms, {now} AS now_ms FROM leadership WHERE id = 1"
    );
    if let Some(row) = c.query(&sql).fetch_optional(c.reborrow()).await? {
        let lease = Lease {
            epoch: row.int("epoch")?,
            holder: row.get("holder")?,
            address: row.get("address")?,
            expires_ms: row.int("expires_ms")?,
        };
        return Ok((Some(lease), row.int("now_ms")?));
    }
    let sql = format!("SELECT {now} AS now_ms");
    let row = c.query(&sql).fetch_one(c.reborrow()).await?;
    Ok((None, row.int("now_ms")?))
}

/// Takes the lease for `holder` at `address` for `lease_ms`, if it is still
/// as `seen` (compare-and-set: of two controllers that saw the same lease,
/// one wins); the new term, with the epoch raised.
pub async fn take(
    mut c: ConnRef<'_>,
    seen: Option<&Lease>,
    holder: &str,
    address: &str,
    lease_ms: i64,
) -> Result<Option<Term>, sqlx::Error> {
    let now = c.engine().now_ms();
    let (taken, epoch) = match seen {
        None => {
            let sql = format!(
                "INSERT INTO leadership (id, epoch, holder, address, expires_ms, written)
                 VALUES (1, 1, $1, $2, {now} + $3, 0) ON CONFLICT (id) DO NOTHING"
            );
            let n = c
                .query(&sql)
                .bind(holder)
                .bind(address)
                .bind(lease_ms)
                .execute(c.reborrow())
                .await?;
            (n, 1)
        }
        Some(lease) => {
            let sql = format!(
                "UPDATE leadership SET epoch = epoch + 1, holder = $1, address = $2,
                   expires_ms = {now} + $3, written = 0
                 WHERE id = 1 AND epoch = $4 AND expires_ms = $5 AND holder = $6"
            );
            let n = c
                .query(&sql)
                .bind(holder)
                .bind(address)
                .bind(lease_ms)
                .bind(lease.epoch)
                .bind(lease.expires_ms)
                .bind(&lease.holder)
                .execute(c.reborrow())
                .await?;
            (n, lease.epoch + 1)
        }
    };
    Ok((taken == 1).then(|| Term {
        epoch,
        holder: holder.to_string(),
    }))
}

/// Renews `term`'s lease for `lease_ms` from now; false when another has
/// taken it.
pub async fn renew(mut c: ConnRef<'_>, term: &Term, lease_ms: i64) -> Result<bool, sqlx::Error> {
    let now = c.engine().now_ms();
    let sql = format!(
        "UPDATE leadership SET expires_ms = {now} + $1 WHERE id = 1 AND epoch = $2 AND holder = $3"
    );
    let n = c
        .query(&sql)
        .bind(lease_ms)
        .bind(term.epoch)
        .bind(&term.holder)
        .execute(c.reborrow())
        .await?;
    Ok(n == 1)
}

/// Gives the lease up, so a standby takes over at once, with the epoch
/// raised to `epoch` if that is higher than the term's (a node followed a
/// later one: the next leader's must be above it); false when the lease
/// was no longer `term`'s.
pub async fn resign(mut c: ConnRef<'_>, term: &Term, epoch: i64) -> Result<bool, sqlx::Error> {
    let n = c
        .query(
            "UPDATE leadership SET expires_ms = 0, epoch = $3
             WHERE id = 1 AND epoch = $1 AND holder = $2",
        )
        .bind(term.epoch)
        .bind(&term.holder)
        .bind(epoch.max(term.epoch))
        .execute(c.reborrow())
        .await?;
    Ok(n == 1)
}

/// Inside the writer's transaction, just before its commit: counts the
/// commit under `epoch`, or finds that another controller has taken over
/// (false: roll back). On PostgreSQL the row stays locked until the
/// commit, so a takeover waits for it, and then sees it.
pub async fn fence(mut c: ConnRef<'_>, epoch: i64) -> Result<bool, sqlx::Error> {
    let n = c
        .query("UPDATE leadership SET written = written + 1 WHERE id = 1 AND epoch = $1")
        .bind(epoch)
        .execute(c.reborrow())
        .await?;
    Ok(n == 1)
}
