//! Leading the database (see `gsched_core::leadership`): a controller
//! waits as a standby until it wins the lease, keeps it renewed while it
//! leads, and steps down (says so and stops) once it cannot be sure it
//! still holds it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gsched_core::leadership::{self, Holder, Lease, Outranked, Timings};
use gsched_daemon::clock::boottime;
use tracing::{info, warn};

use crate::store::{Opened, Renewer, StepDown, Store, StoreError, Term};

/// This controller process as the lease names it.
pub fn this_holder() -> Holder {
    let pid = std::process::id();
    Holder {
        host: gsched_daemon::advertise::host_name().unwrap_or_default(),
        machine: gsched_daemon::process::machine_id(),
        boot: gsched_daemon::process::boot_id(),
        pid_namespace: gsched_daemon::process::pid_namespace(),
        pid,
        started: gsched_daemon::process::process_starttime(pid as i32).unwrap_or(0),
    }
}

/// What a controller serves about leadership: while a standby, the lease
/// it last saw (whose holder it names to clients and nodes); once leading,
/// its tenure.
#[derive(Default)]
pub struct Role {
    seen: Mutex<Option<Lease>>,
    tenure: std::sync::OnceLock<Arc<Tenure>>,
}

impl Role {
    /// The leader's address as last seen (`None`: unknown, or this one).
    pub fn leader_address(&self) -> Option<String> {
        if self.tenure.get().is_some() {
            return None;
        }
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|l| l.address.clone())
            .filter(|a| !a.is_empty())
    }

    /// The epoch this controller leads in, or the last one it saw.
    pub fn epoch(&self) -> i64 {
        match self.tenure.get() {
            Some(t) => t.epoch,
            None => self
                .seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map_or(0, |l| l.epoch),
        }
    }

    pub fn tenure(&self) -> Option<&Arc<Tenure>> {
        self.tenure.get()
    }

    pub(crate) fn saw(&self, lease: Option<Lease>) {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = lease;
    }
}

/// A leader's term as it keeps it: the epoch, when its lease was last
/// renewed (`CLOCK_BOOTTIME` at the renewal's sending, which counts a
/// suspended machine's sleep too), the step-down signal, and the highest
/// epoch a node has followed if that is above this one's.
pub struct Tenure {
    pub epoch: i64,
    renewed: Mutex<Duration>,
    step_down_after: Duration,
    /// How long the lease still runs once given up
    /// (`Timings::handover_grace`).
    handover_grace: Duration,
    pub step_down: StepDown,
    outranked_by: AtomicI64,
}

impl Tenure {
    /// A tenure that is never lost (a controller alone on its store: tests).
    pub fn alone(epoch: i64) -> Arc<Tenure> {
        Arc::new(Tenure {
            epoch,
            renewed: Mutex::new(boottime()),
            step_down_after: Duration::MAX,
            handover_grace: Duration::ZERO,
            step_down: StepDown::default(),
            outranked_by: AtomicI64::new(0),
        })
    }

    /// Whether this controller may still act as the leader: not told to
    /// step down, and its lease renewed recently enough that no other can
    /// have taken it. Checked before every call to a node; a controller
    /// that finds it may not steps down.
    pub fn acting(&self) -> bool {
        if self.step_down.said() {
            return false;
        }
        let since = self.since_renewed();
        if since >= self.step_down_after {
            self.step_down.now(format!(
                "the lease was last renewed {since:?} ago, so another controller may lead now"
            ));
            return false;
        }
        true
    }

    fn since_renewed(&self) -> Duration {
        boottime().saturating_sub(*self.renewed.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn renewed_at(&self, sent: Duration) {
        *self.renewed.lock().unwrap_or_else(|p| p.into_inner()) = sent;
    }

    /// A node has followed a later epoch than this one (the database went
    /// back in time): steps down, and [`resign`] raises the epoch past it.
    pub fn outranked(&self, by: &Outranked) {
        self.outranked_by.fetch_max(by.followed, Ordering::SeqCst);
        self.step_down.now(by.to_string());
    }

    /// The epoch the lease must be raised to when it is given up (this
    /// one's, unless a node has followed a later one).
    pub(crate) fn resign_at(&self) -> i64 {
        self.outranked_by.load(Ordering::SeqCst).max(self.epoch)
    }
}

/// Waits as a standby until this controller wins the lease; serves `role`
/// meanwhile. Errors reaching the database are retried (a standby waits
/// out a database restart); only a refusal of the database itself (a newer
/// release's schema) ends the wait.
pub async fn campaign(
    opened: &mut Opened,
    me: &Holder,
    address: &str,
    timings: Timings,
    role: &Role,
) -> Result<(Term, Duration), StoreError> {
    let holder = me.to_stored();
    let lease_ms = timings.lease.as_millis() as i64;
    let mut told = None::<String>;
    loop {
        let sent = boottime();
        let attempt = async {
            let (lease, now_ms) = opened.lease().await?;
            let claim = leadership::claim(lease.as_ref(), now_ms, me, gsched_daemon::process::runs);
            if !claim.may_take() {
                return Ok((None, lease));
            }
            let term = opened
                .take(lease.as_ref(), &holder, address, lease_ms)
                .await?;
            if let Some(t) = &term {
                info!(epoch = t.epoch, ?claim, "this controller leads");
            }
            Ok::<_, StoreError>((term, lease))
        };
        match attempt.await {
            Ok((Some(term), _)) => return Ok((term, sent)),
            Ok((None, lease)) => {
                let leader = lease
                    .as_ref()
                    .map(|l| l.address.clone())
                    .unwrap_or_default();
                if told.as_ref() != Some(&leader) {
                    info!(leader = %leader, epoch = lease.as_ref().map_or(0, |l| l.epoch), "standby: another controller leads");
                    told = Some(leader);
                }
                role.saw(lease);
            }
            Err(e @ StoreError::Newer { .. }) => return Err(e),
            Err(e) => {
                warn!(error = %e, "standby: cannot read the lease; trying again");
                if let Ok(fresh) = Store::connect(opened.database(), opened.durability()).await {
                    *opened = fresh;
                }
            }
        }
        tokio::time::sleep(timings.poll()).await;
    }
}

/// Starts leading in `term` (won at `taken`): the tenure `role` serves, and
/// the task that keeps the lease renewed.
pub fn lead(
    role: &Role,
    term: Term,
    taken: Duration,
    timings: Timings,
    mut renewer: Renewer,
) -> Arc<Tenure> {
    let tenure = Arc::new(Tenure {
        epoch: term.epoch,
        renewed: Mutex::new(taken),
        step_down_after: timings.step_down_after(),
        handover_grace: timings.handover_grace(),
        step_down: StepDown::default(),
        outranked_by: AtomicI64::new(0),
    });
    let _ = role.tenure.set(Arc::clone(&tenure));
    let kept = Arc::clone(&tenure);
    let lease_ms = timings.lease.as_millis() as i64;
    tokio::spawn(async move {
        loop {
            // Never past the moment it must step down: a renewal that
            // comes back after it would be too late to keep it leading.
            let left = timings
                .step_down_after()
                .saturating_sub(kept.since_renewed());
            tokio::time::sleep(timings.renew_every().min(left)).await;
            if !kept.acting() {
                return;
            }
            let sent = boottime();
            let wait = timings
                .step_down_after()
                .saturating_sub(kept.since_renewed());
            match tokio::time::timeout(wait, renewer.renew(&term, lease_ms)).await {
                Ok(Ok(true)) => kept.renewed_at(sent),
                Ok(Ok(false)) => {
                    kept.step_down.now(format!(
                        "another controller has taken the lease (this one's epoch {} is over)",
                        term.epoch
                    ));
                    return;
                }
                Ok(Err(e)) => warn!(epoch = term.epoch, error = %e, "cannot renew the lease"),
                Err(_) => warn!(epoch = term.epoch, "renewing the lease takes too long"),
            }
        }
    });
    tenure
}

/// Gives the lease up, at a clean stop or a step-down, so that a standby
/// takes over after the handover grace rather than the whole lease (a
/// failure only means it waits the lease out); if a node has followed a
/// later epoch, the epoch is raised to it, so the next leader's is above
/// what every node has seen. Bounded in time: a database that does not
/// answer is not waited for.
pub async fn resign(mut renewer: Renewer, term: &Term, tenure: &Tenure) {
    let at = tenure.resign_at();
    let give_up = renewer.resign(term, at, tenure.handover_grace);
    match tokio::time::timeout(Duration::from_secs(5), give_up).await {
        Ok(Ok(true)) => info!(epoch = term.epoch, raised_to = at, "lease given up"),
        Ok(Ok(false)) => info!(
            epoch = term.epoch,
            "the lease was no longer this controller's"
        ),
        Ok(Err(e)) => {
            warn!(epoch = term.epoch, error = %e, "cannot give the lease up; a standby waits it out")
        }
        Err(_) => warn!(
            epoch = term.epoch,
            "giving the lease up takes too long; a standby waits it out"
        ),
    }
}
