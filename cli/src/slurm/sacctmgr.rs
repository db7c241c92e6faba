//! `sacctmgr`: accounts, users' associations and QOS, as Slurm's
//! (`add|create`, `delete|remove`, `modify|update`, `show|list` of
//! `account`, `user`, `association`, `qos`). Changes are made at once (as
//! with `-i`); only administrators may make them.

use anyhow::{anyhow, bail, Context, Result};
use gsched_core::assoc_limits::AssocLimits;
use gsched_core::fairshare::AccountChange;
use gsched_core::qos::{Qos, QosChange, Tres};
use serde_json::Value;

use crate::client::Client;

/// What the words after the verb and entity say: the names given, the
/// `where` conditions and the `set` values (keys lower-cased).
#[derive(Debug, Default, PartialEq)]
struct Words {
    names: Vec<String>,
    cond: Vec<(String, String)>,
    set: Vec<(String, String)>,
}

fn read_words(words: &[String]) -> Result<Words> {
    let mut w = Words::default();
    let mut setting = false;
    for word in words {
        match word.to_ascii_lowercase().as_str() {
            "where" => {
                setting = false;
                continue;
            }
            "set" => {
                setting = true;
                continue;
            }
            _ => {}
        }
        match word.split_once('=') {
            Some((k, v)) => {
                let k = k.to_ascii_lowercase();
                if k == "name" || k == "names" {
                    w.names.extend(v.split(',').map(String::from));
                } else if setting {
                    w.set.push((k, v.to_string()));
                } else {
                    w.cond.push((k, v.to_string()));
                }
            }
            None => w
                .names
                .extend(word.split(',').filter(|n| !n.is_empty()).map(String::from)),
        }
    }
    Ok(w)
}

impl Words {
    /// Account names in lower case, as Slurm keeps them (and as sbatch
    /// sends them): the values of `account`, `accounts`, `parent` and
    /// `defaultaccount`, and the names when the entity is an account.
    fn lowercase_accounts(&mut self, entity_is_account: bool) {
        const KEYS: &[&str] = &["account", "accounts", "parent", "defaultaccount"];
        if entity_is_account {
            for n in &mut self.names {
                *n = n.to_lowercase();
            }
        }
        for (k, v) in self.cond.iter_mut().chain(self.set.iter_mut()) {
            if KEYS.contains(&k.as_str()) {
                *v = v.to_lowercase();
            }
        }
    }

    fn get(&self, keys: &[&str]) -> Option<&str> {
        self.cond
            .iter()
            .chain(self.set.iter())
            .find(|(k, _)| keys.contains(&k.as_str()))
            .map(|(_, v)| v.as_str())
    }

    fn shares(&self) -> Result<Option<u32>> {
        self.get(&["fairshare", "share", "shares"])
            .map(|v| {
                v.parse::<u32>()
                    .map_err(|_| anyhow!("Fairshare={v}: expected a whole number of shares"))
            })
            .transpose()
    }

    fn names(&self, what: &str) -> Result<&[String]> {
        if self.names.is_empty() {
            bail!("no {what} name given");
        }
        Ok(&self.names)
    }
}

/// The limit keys of an account or association (`GrpJobs`, `GrpTRES`,
/// `MaxJobs`, `MaxSubmitJobs`); `-1` clears one.
const LIMIT_KEYS: &[&str] = &[
    "grpjobs",
    "grptres",
    "maxjobs",
    "maxsubmitjobs",
    "maxsubmit",
    "grpsubmitjobs",
    "grpsubmit",
    "maxtres",
    "maxtresperjob",
    "maxwall",
    "maxwalldurationperjob",
    "qos",
    "qos+",
    "qos-",
    "defaultqos",
    "defqos",
];

impl Words {
    fn has_limits(&self) -> bool {
        self.set
            .iter()
            .chain(self.cond.iter())
            .any(|(k, _)| LIMIT_KEYS.contains(&k.as_str()))
    }
}

/// `limits` with what `w` sets changed; `granted`: the QOS granted there
/// now (its own list, else the inherited one), which `QOS+=`/`QOS-=`
/// change.
fn set_limits(mut limits: AssocLimits, granted: Vec<String>, w: &Words) -> Result<AssocLimits> {
    for (k, v) in w.set.iter().chain(w.cond.iter()) {
        match k.as_str() {
            "grpjobs" => limits.grp_jobs = limit(k, v)?,
            "maxjobs" => limits.max_jobs = limit(k, v)?,
            "maxsubmitjobs" | "maxsubmit" => limits.max_submit_jobs = limit(k, v)?,
            "grpsubmitjobs" | "grpsubmit" => limits.grp_submit_jobs = limit(k, v)?,
            "grptres" => limits.grp_tres = tres_limit(k, v)?,
            "maxtres" | "maxtresperjob" => limits.max_tres_per_job = tres_limit(k, v)?,
            "maxwall" | "maxwalldurationperjob" => limits.max_wall_minutes = wall_limit(v)?,
            "qos" | "qos+" | "qos-" => {
                let now = limits.qos.take().unwrap_or_else(|| granted.clone());
                limits.qos = qos_list(now, k, v)
            }
            "defaultqos" | "defqos" => {
                limits.default_qos = match v.trim() {
                    "" | "-1" | "''" => None,
                    q => Some(q.to_string()),
                }
            }
            _ => {}
        }
    }
    Ok(limits)
}

/// An association's QOS list after `QOS=` (replaces; `-1` or empty:
/// inherited again), `QOS+=` (adds) or `QOS-=` (removes), as Slurm's.
fn qos_list(now: Vec<String>, key: &str, v: &str) -> Option<Vec<String>> {
    let named = v
        .split(',')
        .map(str::trim)
        .filter(|q| !q.is_empty() && *q != "''")
        .map(String::from);
    match key {
        "qos" if matches!(v.trim(), "" | "-1" | "''") => None,
        "qos" => Some(named.collect()),
        "qos+" => {
            let mut list = now;
            for q in named {
                if !list.contains(&q) {
                    list.push(q);
                }
            }
            Some(list)
        }
        _ => {
            let gone: Vec<String> = named.collect();
            Some(now.into_iter().filter(|q| !gone.contains(q)).collect())
        }
    }
}

/// A `MaxWall` as `sacctmgr` sets it, in minutes (`MIN`, `[D-]HH:MM:SS`;
/// `-1`: none).
fn wall_limit(v: &str) -> Result<Option<u64>> {
    if v.trim() == "-1" {
        return Ok(None);
    }
    Ok(gsched_core::units::parse_time_limit(v)
        .map_err(|e| anyhow!("MaxWall={v}: {e}"))?
        .map(|secs| secs.div_ceil(60)))
}

/// A TRES limit as `sacctmgr` sets it (`-1`: none).
fn tres_limit(k: &str, v: &str) -> Result<Tres> {
    if v.trim() == "-1" {
        return Ok(Tres::default());
    }
    Tres::parse(v).map_err(|e| anyhow!("{k}={v}: {e}"))
}

/// The QOS granted now on `account` (with `user`, that association),
/// own or inherited, as the controller decides it (`qos_rights`), from
/// the accounts as gctld sends them.
fn granted_qos(current: &Value, account: &str, user: Option<&str>) -> Vec<String> {
    let stored: gsched_core::fairshare::StoredFairShare =
        serde_json::from_value(current.clone()).unwrap_or_default();
    gsched_core::fairshare::FairShare::from(stored).granted_qos(account, user)
}

/// The limits now on `account` (with `user`, that association's), from
/// the accounts as gctld sends them.
fn current_limits(current: &Value, account: &str, user: Option<&str>) -> AssocLimits {
    if user.is_none() && account == gsched_core::fairshare::ROOT {
        // Root's (QOS rights only) are kept bare, not in an account.
        return serde_json::from_value(current["root_limits"].clone()).unwrap_or_default();
    }
    let empty = Vec::new();
    let found = match user {
        None => current["accounts"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .find(|a| a["name"] == account),
        Some(u) => current["associations"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .find(|a| a["account"] == account && a["user"] == u),
    };
    found
        .and_then(|a| serde_json::from_value(a["limits"].clone()).ok())
        .unwrap_or_default()
}

/// The changes `verb entity words` asks for; `current`: the accounts now
/// (for the limits a change keeps).
fn changes(verb: &str, entity: &str, w: &Words, current: &Value) -> Result<Vec<AccountChange>> {
    let mut out = Vec::new();
    match (verb, entity) {
        ("add", "account") => {
            for name in w.names("account")? {
                out.push(AccountChange::AddAccount {
                    name: name.clone(),
                    parent: w.get(&["parent"]).map(String::from),
                    shares: w.shares()?,
                    description: w.get(&["description", "descr"]).map(String::from),
                });
            }
        }
        ("add", "user") => {
            let accounts = w
                .get(&["account", "accounts"])
                .or(w.get(&["defaultaccount", "defaccount"]))
                .ok_or_else(|| anyhow!("add user needs Account=NAME"))?;
            let default = w.get(&["defaultaccount", "defaccount"]);
            for user in w.names("user")? {
                for account in accounts.split(',') {
                    out.push(AccountChange::AddUser {
                        user: user.clone(),
                        account: account.to_string(),
                        shares: w.shares()?,
                        default: default == Some(account),
                    });
                }
            }
        }
        ("delete", "account") => {
            for name in w.names("account")? {
                out.push(AccountChange::DeleteAccount { name: name.clone() });
            }
        }
        ("delete", "user") => {
            for user in w.names("user")? {
                out.push(AccountChange::DeleteUser {
                    user: user.clone(),
                    account: w.get(&["account"]).map(String::from),
                });
            }
        }
        ("modify", "account") => {
            let (shares, parent) = (w.shares()?, w.get(&["parent"]));
            for name in w.names("account")? {
                // The root account itself cannot change; it takes QOS
                // rights only (below).
                if name == gsched_core::fairshare::ROOT && w.has_limits() && shares.is_none() && parent.is_none() {
                    continue;
                }
                out.push(AccountChange::ModifyAccount {
                    name: name.clone(),
                    shares,
                    parent: parent.map(String::from),
                });
            }
        }
        ("modify", "user") => {
            for user in w.names("user")? {
                out.push(AccountChange::ModifyUser {
                    user: user.clone(),
                    account: w.cond.iter().find(|(k, _)| k == "account").map(|(_, v)| v.clone()),
                    shares: w.shares()?,
                    default_account: w.get(&["defaultaccount", "defaccount"]).map(String::from),
                });
            }
        }
        _ => bail!("{verb} {entity}: gsched's sacctmgr manages accounts and users (add, delete, modify, show)"),
    }
    if w.has_limits() && verb != "delete" {
        out.extend(limit_changes(entity, w, current)?);
    }
    Ok(out)
}

/// The limits `w` sets on accounts (`entity` account) or on users'
/// associations (with `Account=` or `where Account=`: that one; else
/// every association of the user).
fn limit_changes(entity: &str, w: &Words, current: &Value) -> Result<Vec<AccountChange>> {
    let mut out = Vec::new();
    if entity == "account" {
        for name in w.names("account")? {
            out.push(AccountChange::SetLimits {
                account: name.clone(),
                user: None,
                limits: set_limits(
                    current_limits(current, name, None),
                    granted_qos(current, name, None),
                    w,
                )?,
            });
        }
        return Ok(out);
    }
    let empty = Vec::new();
    let named = w.get(&["account", "accounts"]);
    for user in w.names("user")? {
        let accounts: Vec<String> = match named {
            Some(a) => a.split(',').map(String::from).collect(),
            None => current["associations"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .filter(|a| a["user"] == user.as_str())
                .filter_map(|a| a["account"].as_str().map(String::from))
                .collect(),
        };
        for account in accounts {
            out.push(AccountChange::SetLimits {
                limits: set_limits(
                    current_limits(current, &account, Some(user)),
                    granted_qos(current, &account, Some(user)),
                    w,
                )?,
                account,
                user: Some(user.clone()),
            });
        }
    }
    Ok(out)
}

/// A word of `table` that `word` names: the word itself, or (as Slurm's
/// sacctmgr reads them) a prefix of at least three letters that names one
/// meaning only (`mod`, `del`, `lis`, `acc`, `assoc`).
fn by_prefix(word: &str, table: &[(&str, &'static str)]) -> Option<&'static str> {
    let w = word.to_ascii_lowercase();
    if let Some((_, m)) = table.iter().find(|(n, _)| *n == w) {
        return Some(m);
    }
    if w.len() < 3 {
        return None;
    }
    let mut meanings = table
        .iter()
        .filter(|(n, _)| n.starts_with(&w))
        .map(|(_, m)| *m);
    let first = meanings.next()?;
    meanings.all(|m| m == first).then_some(first)
}

fn verb_of(v: &str) -> Option<&'static str> {
    const VERBS: &[(&str, &str)] = &[
        ("add", "add"),
        ("create", "add"),
        ("delete", "delete"),
        ("remove", "delete"),
        ("modify", "modify"),
        ("update", "modify"),
        ("show", "show"),
        ("list", "show"),
    ];
    by_prefix(v, VERBS)
}

fn entity_of(e: &str) -> Option<&'static str> {
    const ENTITIES: &[(&str, &str)] = &[
        ("account", "account"),
        ("accounts", "account"),
        ("user", "user"),
        ("users", "user"),
        ("association", "association"),
        ("associations", "association"),
        ("assoc", "association"),
        ("qos", "qos"),
    ];
    by_prefix(e, ENTITIES)
}

/// A limit's value: a count, or `-1` for none (as Slurm clears one).
fn limit(key: &str, v: &str) -> Result<Option<u32>> {
    if v.trim() == "-1" {
        return Ok(None);
    }
    v.trim()
        .parse()
        .map(Some)
        .with_context(|| format!("{key}={v}: expected a whole number, or -1 for none"))
}

/// `qos` with the settings `w` gives.
fn set_qos(mut qos: Qos, w: &Words) -> Result<Qos> {
    for (k, v) in w.cond.iter().chain(w.set.iter()) {
        match k.as_str() {
            "priority" => qos.priority = limit(k, v)?.unwrap_or(0),
            "maxjobsperuser" | "maxjobspu" => qos.max_jobs_per_user = limit(k, v)?,
            "maxsubmitjobsperuser" | "maxsubmitjobspu" | "maxsubmitpu" => {
                qos.max_submit_jobs_per_user = limit(k, v)?
            }
            "grpjobs" => qos.grp_jobs = limit(k, v)?,
            "maxwall" | "maxwalldurationperjob" => qos.max_wall_minutes = wall_limit(v)?,
            "maxtresperuser" | "maxtrespu" => {
                qos.max_tres_per_user = Tres::parse(v).map_err(|e| anyhow!("{k}={v}: {e}"))?
            }
            "grptres" => qos.grp_tres = Tres::parse(v).map_err(|e| anyhow!("{k}={v}: {e}"))?,
            "preempt" => {
                qos.preempt = v
                    .split(',')
                    .map(str::trim)
                    .filter(|q| !q.is_empty() && *q != "''")
                    .map(String::from)
                    .collect()
            }
            "gpushare" => {
                qos.gpu_share = if v.trim() == "-1" {
                    None
                } else {
                    Some(
                        gsched_core::time_quota::TimeQuota::parse(v)
                            .map_err(|e| anyhow!("GpuShare={v}: {e}"))?,
                    )
                }
            }
            "flags" => {
                qos.latency_critical = false;
                for flag in v.split(',').map(str::trim).filter(|f| !f.is_empty()) {
                    match flag.to_ascii_lowercase().as_str() {
                        "latencycritical" => qos.latency_critical = true,
                        "-1" | "none" => {}
                        _ => bail!("Flags={flag}: gsched's QOS know the flag LatencyCritical only (Slurm's other QOS flags are not supported)"),
                    }
                }
            }
            "gracetime" => {
                qos.grace_time_secs = if v.trim() == "-1" {
                    None
                } else {
                    Some(v.trim().parse().with_context(|| {
                        format!("GraceTime={v}: expected seconds, or -1 for none")
                    })?)
                }
            }
            "preemptmode" => {
                qos.preempt_mode = match v.trim().to_ascii_lowercase().as_str() {
                    "cluster" | "-1" | "" => None,
                    m => Some(gsched_core::preempt::PreemptMode::parse(m).map_err(|e| {
                        anyhow!("PreemptMode={v}: {e}, or cluster (gctld's --preempt-mode)")
                    })?),
                }
            }
            "description" | "descr" => {
                bail!("{k}: gsched's QOS have Priority, Preempt, PreemptMode, GraceTime, MaxJobsPerUser, MaxSubmitJobsPerUser, MaxWall, GrpJobs, MaxTRESPerUser, GrpTRES, GpuShare and Flags=LatencyCritical")
            }
            other => bail!("{other}: not a QOS setting gsched knows"),
        }
    }
    Ok(qos)
}

/// `add|modify|delete qos ...`.
fn qos_changes(verb: &str, w: &Words, current: &Value) -> Result<Vec<QosChange>> {
    let mut out = Vec::new();
    for name in w.names("QOS")? {
        out.push(match verb {
            "add" => QosChange::Add {
                qos: set_qos(
                    Qos {
                        name: name.clone(),
                        ..Default::default()
                    },
                    w,
                )?,
            },
            "modify" => {
                let now: Qos = current["qos"]
                    .as_array()
                    .and_then(|all| all.iter().find(|q| q["name"] == name.as_str()))
                    .map(|q| serde_json::from_value(q.clone()))
                    .transpose()?
                    .ok_or_else(|| anyhow!("QOS {name} does not exist"))?;
                QosChange::Modify {
                    qos: set_qos(now, w)?,
                }
            }
            _ => QosChange::Delete { name: name.clone() },
        });
    }
    Ok(out)
}

/// What sacctmgr does, for `--help`.
const USAGE: &str = "Usage: sacctmgr [-i] [-n] [-P|-p] COMMAND ENTITY [SPECS]
  add|modify|delete|show  account|user|association|qos  [name=..] [where ..] [set ..]
gsched's sacctmgr; see docs/slurm.md (sacctmgr) for what each takes.";

pub fn main_with(args: Vec<String>) -> Result<i32> {
    if matches!(
        args.first().map(String::as_str),
        Some("--help" | "-h" | "help")
    ) {
        println!("{USAGE}");
        return Ok(0);
    }
    let mut parsable = false;
    let mut header = true;
    let mut rest = Vec::new();
    for a in args {
        match a.as_str() {
            "-i" | "--immediate" => {}
            "-P" | "--parsable2" | "-p" | "--parsable" => parsable = true,
            "-n" | "--noheader" => header = false,
            // An option it does not take is named, not read as a name.
            o if o.starts_with('-') && o.len() > 1 => {
                bail!("unrecognized option '{o}' (sacctmgr takes -i, -n, -p, -P here)")
            }
            _ => rest.push(a),
        }
    }
    let (Some(verb), Some(entity)) = (
        rest.first().and_then(|v| verb_of(v)),
        rest.get(1).and_then(|e| entity_of(e)),
    ) else {
        bail!("usage: sacctmgr [-i] [-P] add|delete|modify|show account|user|association ...");
    };
    let mut w = read_words(&rest[2..])?;
    w.lowercase_accounts(entity == "account");
    let client = Client::from_env();
    if verb == "show" {
        return show(&client.accounts()?, entity, &w, parsable, header);
    }
    if entity == "qos" {
        let current = if verb == "modify" {
            client.accounts()?
        } else {
            Value::Null
        };
        for change in qos_changes(verb, &w, &current)? {
            client.change_qos(&change)?;
        }
        return Ok(0);
    }
    let entity = if entity == "association" {
        "user"
    } else {
        entity
    };
    let current = if w.has_limits() {
        client.accounts()?
    } else {
        Value::Null
    };
    for change in changes(verb, entity, &w, &current)? {
        client.change_accounts(&change)?;
    }
    Ok(0)
}

/// `show account|user|association [format=...]`.
fn show(v: &Value, entity: &str, w: &Words, parsable: bool, header: bool) -> Result<i32> {
    if entity == "qos" {
        return show_qos(v, parsable, header);
    }
    let default_fmt = match entity {
        "account" => "Account,Descr,ParentName,Share",
        "user" => "User,DefaultAccount",
        _ => "Cluster,Account,User,Share,ParentName,GrpJobs,GrpSubmit,GrpTRES,MaxJobs,MaxSubmit,MaxTRES,MaxWall,QOS,DefaultQOS",
    };
    let fmt = w.get(&["format"]).unwrap_or(default_fmt);
    let cols: Vec<String> = fmt
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    let empty = Vec::new();
    let accounts = v["accounts"].as_array().unwrap_or(&empty);
    let assocs = v["associations"].as_array().unwrap_or(&empty);
    let s = |x: &Value| x.as_str().unwrap_or("").to_string();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let field = |col: &str, account: &Value, assoc: Option<&Value>| -> Result<String> {
        Ok(match col {
            "cluster" => "gsched".into(),
            "account" => match assoc {
                Some(a) => s(&a["account"]),
                None => s(&account["name"]),
            },
            "user" => assoc.map(|a| s(&a["user"])).unwrap_or_default(),
            "share" | "fairshare" | "shares" => match assoc {
                Some(a) => a["shares"].to_string(),
                None => account["shares"].to_string(),
            },
            "parentname" | "parent" => assoc.map_or_else(|| s(&account["parent"]), |_| String::new()),
            "descr" | "description" => s(&account["description"]),
            "defaultaccount" | "defacct" | "def acct" => match assoc {
                Some(a) => s(&a["account"]),
                None => String::new(),
            },
            "grpjobs" | "grptres" | "maxjobs" | "maxsubmit" | "maxsubmitjobs" | "grpsubmit"
            | "grpsubmitjobs" | "maxtres" | "maxtresperjob" | "maxwall"
            | "maxwalldurationperjob" | "qos" | "defaultqos" | "defqos" | "def qos" => {
                let limits: AssocLimits = serde_json::from_value(
                    assoc.unwrap_or(account)["limits"].clone(),
                )
                .unwrap_or_default();
                let n = |o: Option<u32>| o.map(|n| n.to_string()).unwrap_or_default();
                match col {
                    "grpjobs" => n(limits.grp_jobs),
                    "grptres" => limits.grp_tres.to_setting(),
                    "maxjobs" => n(limits.max_jobs),
                    "grpsubmit" | "grpsubmitjobs" => n(limits.grp_submit_jobs),
                    "maxtres" | "maxtresperjob" => limits.max_tres_per_job.to_setting(),
                    "maxwall" | "maxwalldurationperjob" => limits
                        .max_wall_minutes
                        .map(|m| super::format::elapsed_long(m as i64 * 60))
                        .unwrap_or_default(),
                    // Its own rights; blank: inherited (root's, or normal only).
                    "qos" => limits.qos.map(|q| q.join(",")).unwrap_or_default(),
                    "defaultqos" | "defqos" | "def qos" => limits.default_qos.unwrap_or_default(),
                    _ => n(limits.max_submit_jobs),
                }
            }
            other => bail!("format={other}: gsched shows Cluster, Account, User, Share, ParentName, Descr, DefaultAccount, GrpJobs, GrpSubmit, GrpTRES, MaxJobs, MaxSubmit, MaxTRES, MaxWall, QOS, DefaultQOS"),
        })
    };
    match entity {
        "account" => {
            for a in accounts {
                rows.push(
                    cols.iter()
                        .map(|c| field(c, a, None))
                        .collect::<Result<_>>()?,
                );
            }
        }
        "user" => {
            for a in assocs.iter().filter(|a| a["default"] == true) {
                rows.push(
                    cols.iter()
                        .map(|c| field(c, &Value::Null, Some(a)))
                        .collect::<Result<_>>()?,
                );
            }
        }
        _ => {
            for acc in accounts {
                rows.push(
                    cols.iter()
                        .map(|c| field(c, acc, None))
                        .collect::<Result<_>>()?,
                );
                for a in assocs.iter().filter(|a| a["account"] == acc["name"]) {
                    rows.push(
                        cols.iter()
                            .map(|c| field(c, acc, Some(a)))
                            .collect::<Result<_>>()?,
                    );
                }
            }
        }
    }
    let titles: Vec<String> = fmt.split(',').map(|c| c.trim().to_string()).collect();
    print_table(&titles, &rows, parsable, header);
    Ok(0)
}

/// `show qos`: each QOS and its limits (blank: none).
fn show_qos(v: &Value, parsable: bool, header: bool) -> Result<i32> {
    let all: Vec<Qos> = serde_json::from_value(v["qos"].clone()).unwrap_or_default();
    let titles: Vec<String> = [
        "Name",
        "Priority",
        "MaxWall",
        "MaxJobsPU",
        "MaxSubmitPU",
        "GrpJobs",
        "MaxTRESPU",
        "GrpTRES",
        "Preempt",
        "PreemptMode",
        "GpuShare",
        "Flags",
        "GraceTime",
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    let opt = |o: Option<u32>| o.map(|n| n.to_string()).unwrap_or_default();
    let tres = |t: &Tres| t.to_setting();
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|q| {
            vec![
                q.name.clone(),
                q.priority.to_string(),
                q.max_wall_minutes
                    .map(|m| super::format::elapsed_long(m as i64 * 60))
                    .unwrap_or_default(),
                opt(q.max_jobs_per_user),
                opt(q.max_submit_jobs_per_user),
                opt(q.grp_jobs),
                tres(&q.max_tres_per_user),
                tres(&q.grp_tres),
                q.preempt.join(","),
                q.preempt_mode
                    .map_or("cluster".into(), |m| format!("{m:?}").to_ascii_uppercase()),
                q.gpu_share.map(|g| g.to_setting()).unwrap_or_default(),
                if q.latency_critical {
                    "LatencyCritical".into()
                } else {
                    String::new()
                },
                q.grace_time_secs
                    .map(|g| super::format::elapsed_long(g as i64))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    print_table(&titles, &rows, parsable, header);
    Ok(0)
}

/// Prints rows as Slurm's tools do: `|`-separated under `-P`, else
/// right-aligned columns of 10 (wider where a value needs it).
pub(super) fn print_table(titles: &[String], rows: &[Vec<String>], parsable: bool, header: bool) {
    if parsable {
        if header {
            println!("{}", titles.join("|"));
        }
        for r in rows {
            println!("{}", r.join("|"));
        }
        return;
    }
    let widths: Vec<usize> = (0..titles.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([titles[i].len(), 10])
                .max()
                .unwrap_or(10)
        })
        .collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if header {
        println!("{}", line(titles));
        println!(
            "{}",
            widths
                .iter()
                .map(|w| "-".repeat(*w))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    for r in rows {
        println!("{}", line(r));
    }
}

#[cfg(test)]
mod abbreviation_tests {
    use super::*;

    #[test]
    fn commands_and_entities_read_from_unique_prefixes() {
        assert_eq!(verb_of("mod"), Some("modify"));
        assert_eq!(verb_of("del"), Some("delete"));
        assert_eq!(verb_of("lis"), Some("show"));
        assert_eq!(verb_of("MODIFY"), Some("modify"));
        assert_eq!(verb_of("mo"), None, "too short");
        assert_eq!(entity_of("acc"), Some("account"));
        assert_eq!(entity_of("assoc"), Some("association"));
        assert_eq!(entity_of("us"), None);
        assert_eq!(entity_of("use"), Some("user"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Words {
        read_words(&s.split_whitespace().map(String::from).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn qos_rights_are_set_added_and_removed_as_slurms() {
        let current = serde_json::json!({
            "root_limits": {"qos": ["normal"]},
            "accounts": [{"name": "physics", "limits": {"qos": ["normal", "high"]}}],
            "associations": [{"user": "ann", "account": "physics"}]
        });
        let c = changes("modify", "account", &words("root set qos+=high"), &current).unwrap();
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(
            matches!(&c[0], AccountChange::SetLimits { account, user: None, limits } if account == "root" && limits.qos == Some(vec!["normal".into(), "high".into()]))
        );
        let c = changes(
            "modify",
            "account",
            &words("physics set qos-=high defaultqos=normal"),
            &current,
        )
        .unwrap();
        assert!(
            matches!(&c[1], AccountChange::SetLimits { limits, .. } if limits.qos == Some(vec!["normal".into()]) && limits.default_qos.as_deref() == Some("normal"))
        );
        let c = changes("modify", "user", &words("ann set qos=low,high"), &current).unwrap();
        assert!(
            matches!(&c[1], AccountChange::SetLimits { user: Some(u), limits, .. } if u == "ann" && limits.qos == Some(vec!["low".into(), "high".into()]))
        );
        // -1: inherited again.
        assert_eq!(qos_list(vec!["a".into()], "qos", "-1"), None);
        // += on an association that inherits its list starts from it.
        let inherits = serde_json::json!({
            "root_limits": {"qos": ["normal"]},
            "accounts": [{"name": "physics", "parent": "root", "shares": 1}],
            "associations": [{"user": "ann", "account": "physics", "shares": 1, "default": true}]
        });
        let c = changes("modify", "user", &words("ann set qos+=high"), &inherits).unwrap();
        assert!(
            matches!(&c[1], AccountChange::SetLimits { limits, .. } if limits.qos == Some(vec!["normal".into(), "high".into()])),
            "{c:?}"
        );
    }

    #[test]
    fn slurms_forms_read_as_changes() {
        let c = changes(
            "add",
            "account",
            &words("physics,bio Parent=science Fairshare=3"),
            &Value::Null,
        )
        .unwrap();
        assert_eq!(c.len(), 2);
        assert!(
            matches!(&c[0], AccountChange::AddAccount { name, parent: Some(p), shares: Some(3), .. } if name == "physics" && p == "science")
        );
        let c = changes(
            "add",
            "user",
            &words("ann Account=physics,bio DefaultAccount=bio"),
            &Value::Null,
        )
        .unwrap();
        assert!(
            matches!(&c[1], AccountChange::AddUser { account, default: true, .. } if account == "bio")
        );
        assert!(matches!(
            &c[0],
            AccountChange::AddUser { default: false, .. }
        ));
        let c = changes(
            "modify",
            "user",
            &words("where name=ann account=bio set fairshare=5"),
            &Value::Null,
        )
        .unwrap();
        assert!(
            matches!(&c[0], AccountChange::ModifyUser { user, account: Some(a), shares: Some(5), .. } if user == "ann" && a == "bio")
        );
        let c = changes("delete", "user", &words("ann account=bio"), &Value::Null).unwrap();
        assert!(matches!(&c[0], AccountChange::DeleteUser { account: Some(a), .. } if a == "bio"));
        assert!(changes("add", "user", &words("ann"), &Value::Null)
            .unwrap_err()
            .to_string()
            .contains("Account="));
        assert!(changes("add", "account", &words("x Fairshare=lots"), &Value::Null).is_err());
        assert!(changes("add", "account", &words(""), &Value::Null).is_err());
        // Limits: merged into what is set now; -1 clears one.
        let current = serde_json::json!({
            "accounts": [{"name": "physics", "limits": {"grp_jobs": 9, "max_jobs": 2}}],
            "associations": [{"user": "ann", "account": "physics"}, {"user": "ann", "account": "bio"}]
        });
        let c = changes(
            "modify",
            "account",
            &words("physics set GrpTRES=gres/gpu=8 MaxJobs=-1"),
            &current,
        )
        .unwrap();
        assert!(
            matches!(&c[1], AccountChange::SetLimits { user: None, limits, .. }
            if limits.grp_jobs == Some(9) && limits.max_jobs.is_none() && limits.grp_tres.gpu == Some(8))
        );
        // A user's limits go to each of its associations, or the one named.
        let c = changes("modify", "user", &words("ann set MaxJobs=1"), &current).unwrap();
        assert_eq!(c.len(), 3, "{c:?}");
        let c = changes(
            "modify",
            "user",
            &words("ann where account=bio set MaxSubmitJobs=3"),
            &current,
        )
        .unwrap();
        assert!(
            matches!(&c[1], AccountChange::SetLimits { user: Some(u), account, limits }
            if u == "ann" && account == "bio" && limits.max_submit_jobs == Some(3))
        );
        assert!(changes(
            "modify",
            "account",
            &words("physics set GrpTRES=mem=1"),
            &current
        )
        .is_err());
    }
}
