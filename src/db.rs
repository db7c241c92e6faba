//! `gsched db backup FILE`: a consistent copy of the controller's database,
//! taken while gctld runs (SQLite's `VACUUM INTO`, read only). Restoring is
//! stopping gctld and putting the copy in place (docs/install.md).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Subcommand};

#[derive(Subcommand)]
pub enum DbCommand {
    /// Copy the database into FILE (a new file, 0600): consistent, while
    /// gctld runs. Needs the rights to read the state directory (root).
    Backup {
        /// The copy to write; must not exist.
        file: PathBuf,
        /// The controller's state directory. Default: GSCHED_STATE_DIR,
        /// else `state_dir` in the site file's [controller], else
        /// /var/lib/gsched.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
}

pub fn run(command: DbCommand) -> Result<()> {
    match command {
        DbCommand::Backup { file, state_dir } => {
            let state_dir = match state_dir {
                Some(d) => d,
                None => {
                    let (dir, database) = controller_store()?;
                    if let Some(url) = database {
                        anyhow::bail!(
                            "the controller's store is the PostgreSQL database {url}: back it up with PostgreSQL's pg_dump (docs/install.md); `gsched db backup` copies a SQLite store"
                        );
                    }
                    dir
                }
            };
            let db = state_dir.join("ctld.db");
            tokio::runtime::Runtime::new()?
                .block_on(gsched_ctld::store::schema::backup(&db, &file))
                .context("no backup taken")?;
            println!("{} copied into {}", db.display(), file.display());
            Ok(())
        }
    }
}

/// The state directory gctld uses and its `--database`, as it would read
/// its settings here.
fn controller_store() -> Result<(PathBuf, Option<String>)> {
    let command = gsched_ctld::command::GctldArgs::command();
    let matches = command.clone().try_get_matches_from(["gctld"])?;
    let args = gsched_ctld::command::GctldArgs::from_arg_matches(&matches)?;
    let file = gsched_daemon::settings::site_file(&args.daemon)?;
    let loaded = gsched_ctld::command::load(&command, &matches, args, file.as_ref())?;
    Ok((
        loaded.daemon.value.state_dir(),
        loaded.settings.value.database,
    ))
}
