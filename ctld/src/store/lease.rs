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
/// one wins); the new term. Its epoch is the database's clock in
/// milliseconds, or the last epoch and one if that is higher: it goes up
/// at every takeover, and past any epoch a node may have followed even
/// when the database went back in time (a restored copy, a replica that
/// lagged), as long as the database's clock did not.
pub async fn take(
    mut c: ConnRef<'_>,
    seen: Option<&Lease>,
    holder: &str,
    address: &str,
    lease_ms: i64,
) -> Result<Option<Term>, sqlx::Error> {
    let now = c.engine().now_ms();
    let row = match seen {
        None => {
            let sql = format!(
                "INSERT INTO leadership (id, epoch, holder, address, expires_ms, written)
                 VALUES (1, {now}, $1, $2, {now} + $3, 0) ON CONFLICT (id) DO NOTHING
                 RETURNING epoch"
            );
            c.query(&sql)
                .bind(holder)
                .bind(address)
                .bind(lease_ms)
                .fetch_optional(c.reborrow())
                .await?
        }
        Some(lease) => {
            let sql = format!(
                "UPDATE leadership
                    SET epoch = CASE WHEN epoch + 1 > {now} THEN epoch + 1 ELSE {now} END,
                        holder = $1, address = $2, expires_ms = {now} + $3, written = 0
                  WHERE id = 1 AND epoch = $4 AND expires_ms = $5 AND holder = $6
                  RETURNING epoch"
            );
            c.query(&sql)
                .bind(holder)
                .bind(address)
                .bind(lease_ms)
                .bind(lease.epoch)
                .bind(lease.expires_ms)
                .bind(&lease.holder)
                .fetch_optional(c.reborrow())
                .await?
        }
    };
    row.map(|r| {
        Ok(Term {
            epoch: r.int("epoch")?,
            holder: holder.to_string(),
        })
    })
    .transpose()
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

/// Gives the lease up: it names no holder any more (so no renewal still
/// on its way can keep it) and runs out `grace_ms` from now, or when it
/// would have if sooner, so that a standby takes over then; the epoch is
/// raised to `epoch` if that is higher than the term's (a node followed a
/// later one: the next leader's must be above it). The grace is the
/// leader's step-down margin: a call to a node that passed its last check
/// before the step-down has that long to land before another leads. False
/// when the lease was no longer `term`'s.
pub async fn resign(
    mut c: ConnRef<'_>,
    term: &Term,
    epoch: i64,
    grace_ms: i64,
) -> Result<bool, sqlx::Error> {
    let now = c.engine().now_ms();
    let sql = format!(
        "UPDATE leadership
            SET holder = '', address = '', epoch = $3,
                expires_ms = CASE WHEN expires_ms < {now} + $4 THEN expires_ms ELSE {now} + $4 END
          WHERE id = 1 AND epoch = $1 AND holder = $2"
    );
    let n = c
        .query(&sql)
        .bind(term.epoch)
        .bind(&term.holder)
        .bind(epoch.max(term.epoch))
        .bind(grace_ms.max(0))
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
