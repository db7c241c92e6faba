//! `sshare`: each account and user's shares, decayed usage and fair-share
//! factor, as Slurm's (`-a`, `-A`, `-u`, `-P`, `-p`, `-n`, `-l`).

use anyhow::Result;
use clap::Parser;
use gsched_core::fairshare::ShareRow;

use crate::client::Client;

#[derive(Parser, Debug)]
#[command(
    name = "sshare",
    about = "Shares and usage of gsched's accounts (Slurm's sshare)",
    disable_help_flag = true
)]
pub struct Args {
    /// Print this help (`-h` is `--noheader`, as in Slurm).
    #[arg(long, visible_alias = "usage", action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// Every user's line (they are all shown).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Only these accounts (comma list).
    #[arg(short = 'A', long = "accounts")]
    pub accounts: Option<String>,
    /// Only these users (comma list).
    #[arg(short = 'u', long = "users")]
    pub users: Option<String>,
    #[arg(short = 'P', long = "parsable2")]
    pub parsable2: bool,
    #[arg(short = 'p', long = "parsable")]
    pub parsable: bool,
    /// No header line (`-h` as well, as Slurm's sshare takes it).
    #[arg(short = 'n', short_alias = 'h', long = "noheader")]
    pub noheader: bool,
    /// Accepted (the long form adds columns gsched does not have).
    #[arg(short = 'l', long = "long")]
    pub long: bool,
    /// The shares as Slurm's data_parser prints them.
    #[arg(long)]
    pub json: bool,
}

/// `sshare --json`: data_parser's `shares` shape.
fn print_json(rows: &[ShareRow], client: &Client, command: &[String]) -> Result<i32> {
    use super::data_parser::number;
    let shares: Vec<serde_json::Value> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let user = !r.user.is_empty();
            serde_json::json!({
                "id": i,
                "cluster": "",
                "name": if user { &r.user } else { &r.account },
                "parent": if user { r.account.as_str() } else { "" },
                "partition": "",
                "shares_normalized": number(Some(r.norm_shares)),
                "shares": number(Some(r.raw_shares)),
                "effective_usage": number(Some(r.effective_usage)),
                "usage": r.raw_usage.round() as u64,
                "fairshare": {
                    "factor": number(Some(r.fair_share.unwrap_or(0.0))),
                    "level": number(Some(r.fair_share.unwrap_or(0.0))),
                },
                "type": [if user { "USER" } else { "ASSOCIATION" }],
            })
        })
        .collect();
    let total: u64 = rows
        .iter()
        .filter(|r| r.user.is_empty())
        .map(|r| u64::from(r.raw_shares))
        .sum();
    let out = serde_json::json!({
        "shares": { "shares": shares, "total_shares": total },
        "meta": super::scontrol_data::meta(client, command)?,
        "errors": [],
        "warnings": [],
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(0)
}

pub fn main_with(args: Vec<String>) -> Result<i32> {
    let command = super::data_parser::command_line("sshare", &args);
    let a: Args = super::parse("sshare", args)?;
    let client = Client::from_env();
    let v = client.accounts()?;
    let rows: Vec<ShareRow> = serde_json::from_value(v["shares"].clone())?;
    if a.json {
        if a.accounts.is_some() || a.users.is_some() {
            anyhow::bail!(
                "--json lists every association: -A and -u are not applied to it; leave them out"
            );
        }
        return print_json(&rows, &client, &command);
    }
    let list = |o: &Option<String>| -> Option<Vec<String>> {
        o.as_ref().map(|s| s.split(',').map(String::from).collect())
    };
    let (accounts, users) = (list(&a.accounts), list(&a.users));
    let titles: Vec<String> = [
        "Account",
        "User",
        "RawShares",
        "NormShares",
        "RawUsage",
        "EffectvUsage",
        "FairShare",
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    let lines: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| accounts.as_ref().is_none_or(|a| a.contains(&r.account)))
        .filter(|r| {
            users
                .as_ref()
                .is_none_or(|u| r.user.is_empty() || u.contains(&r.user))
        })
        .map(|r| {
            vec![
                r.account.clone(),
                r.user.clone(),
                r.raw_shares.to_string(),
                format!("{:.6}", r.norm_shares),
                format!("{:.0}", r.raw_usage),
                format!("{:.6}", r.effective_usage),
                r.fair_share.map(|f| format!("{f:.6}")).unwrap_or_default(),
            ]
        })
        .collect();
    super::sacctmgr::print_table(&titles, &lines, a.parsable || a.parsable2, !a.noheader);
    Ok(0)
}
