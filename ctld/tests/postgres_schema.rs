//! The PostgreSQL migrations (`migrations/postgres/`, issue 40) match
//! SQLite's (`migrations/`): the same versions and descriptions, and once
//! applied, the same tables with the same columns, each as nullable and
//! as defaulted on both. Run against a private PostgreSQL that the test
//! starts (`initdb` and `pg_ctl` in a temporary directory, a unix socket
//! only; Debian's `postgresql`, which `scripts/test` installs).

use std::collections::BTreeMap;
use std::path::Path;

use sqlx::{Connection, Row};

mod support;
use support::postgres::PrivatePostgres;

/// One column as both databases can be compared on it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    /// `integer` (SQLite INTEGER; PostgreSQL bigint or boolean) or `text`.
    kind: String,
    nullable: bool,
    /// The default, as text, without PostgreSQL's casts; booleans as 0/1.
    default: Option<String>,
    /// Numbered by the database when not given (SQLite's INTEGER PRIMARY
    /// KEY, PostgreSQL's identity).
    numbered: bool,
}

/// Each table's columns by name, and the indexes (table, name, unique).
#[derive(Debug, PartialEq, Eq)]
struct Schema {
    columns: BTreeMap<String, BTreeMap<String, Column>>,
    indexes: std::collections::BTreeSet<(String, String)>,
}

fn normalise_default(text: &str) -> String {
    let text = text.split("::").next().unwrap_or(text).trim();
    match text {
        "false" => "0".into(),
        "true" => "1".into(),
        other => other.to_string(),
    }
}

async fn sqlite_schema(path: &Path) -> Schema {
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&opts).await.unwrap();
    sqlx::migrate!("../migrations")
        .run(&mut conn)
        .await
        .unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx%'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut columns = BTreeMap::new();
    for t in tables {
        let rows = sqlx::query(&format!("PRAGMA table_info({t})"))
            .fetch_all(&mut conn)
            .await
            .unwrap();
        let primary_keys = rows.iter().filter(|r| r.get::<i64, _>("pk") > 0).count();
        let table = rows
            .iter()
            .map(|r| {
                let name: String = r.get("name");
                let kind: String = r.get("type");
                let not_null: i64 = r.get("notnull");
                let primary = r.get::<i64, _>("pk") > 0;
                let default: Option<String> = r.get("dflt_value");
                let integer = kind.eq_ignore_ascii_case("INTEGER");
                let column = Column {
                    kind: if integer { "integer" } else { "text" }.into(),
                    // A primary key is never null.
                    nullable: not_null == 0 && !primary,
                    default: default.as_deref().map(normalise_default),
                    // A lone INTEGER PRIMARY KEY is SQLite's row id.
                    numbered: primary && integer && primary_keys == 1,
                };
                (name, column)
            })
            .collect();
        columns.insert(t, table);
    }
    let indexes = sqlx::query(
        "SELECT tbl_name, name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex%'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get("tbl_name"), r.get("name")))
    .collect();
    Schema { columns, indexes }
}

async fn postgres_schema(options: &sqlx::postgres::PgConnectOptions) -> Schema {
    let mut conn = sqlx::PgConnection::connect_with(options).await.unwrap();
    sqlx::migrate!("../migrations/postgres")
        .run(&mut conn)
        .await
        .unwrap();
    let rows = sqlx::query(
        "SELECT table_name::text AS t, column_name::text AS c, is_nullable::text AS n,
                column_default::text AS d, data_type::text AS k, is_identity::text AS i
           FROM information_schema.columns
          WHERE table_schema = 'public' AND table_name NOT LIKE '\\_sqlx%'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut columns: BTreeMap<String, BTreeMap<String, Column>> = BTreeMap::new();
    for r in rows {
        let kind: String = r.get("k");
        let default: Option<String> = r.get("d");
        let column = Column {
            kind: match kind.as_str() {
                "bigint" | "boolean" => "integer".into(),
                "text" => "text".into(),
                other => format!("unexpected {other}"),
            },
            nullable: r.get::<String, _>("n") == "YES",
            default: default.as_deref().map(normalise_default),
            numbered: r.get::<String, _>("i") == "YES",
        };
        columns
            .entry(r.get("t"))
            .or_default()
            .insert(r.get("c"), column);
    }
    let indexes = sqlx::query(
        "SELECT tablename::text AS t, indexname::text AS i FROM pg_indexes
          WHERE schemaname = 'public' AND indexname NOT LIKE '%\\_pkey'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get("t"), r.get("i")))
    .collect();
    Schema { columns, indexes }
}

#[test]
fn the_postgres_migrations_are_sqlites_in_postgresql() {
    let sqlite = sqlx::migrate!("../migrations");
    let postgres = sqlx::migrate!("../migrations/postgres");
    let list = |m: &sqlx::migrate::Migrator| -> Vec<(i64, String)> {
        m.iter()
            .map(|m| (m.version, m.description.to_string()))
            .collect()
    };
    assert_eq!(
        list(&sqlite),
        list(&postgres),
        "the same versions and names"
    );

    let pg = PrivatePostgres::start();
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let lite = sqlite_schema(&dir.path().join("ctld.db")).await;
        let post = postgres_schema(&pg.options("postgres")).await;
        // The columns the store leaves to the database to number; other
        // integer keys (a job's id) are always given.
        const NUMBERED: [(&str, &str); 2] = [("task_reservations", "id"), ("events", "seq")];
        let numbered_only_where_relied_on = |mut s: Schema| {
            for (table, columns) in s.columns.iter_mut() {
                for (name, c) in columns.iter_mut() {
                    let relied_on = NUMBERED.contains(&(table.as_str(), name.as_str()));
                    assert!(!relied_on || c.numbered, "{table}.{name} is not numbered");
                    c.numbered = relied_on;
                }
            }
            s
        };
        let lite = numbered_only_where_relied_on(lite);
        let post = numbered_only_where_relied_on(post);
        assert_eq!(lite.columns, post.columns);
        assert_eq!(lite.indexes, post.indexes);

        // The event log stays append-only there too.
        let mut conn = sqlx::PgConnection::connect_with(&pg.options("postgres"))
            .await
            .unwrap();
        sqlx::query("INSERT INTO events (time, kind) VALUES ($1, $2)")
            .bind(1i64)
            .bind("test")
            .execute(&mut conn)
            .await
            .unwrap();
        for refused in [
            "DELETE FROM events",
            "UPDATE events SET kind = 'x'",
            "TRUNCATE events",
        ] {
            let e = sqlx::query(refused).execute(&mut conn).await.unwrap_err();
            assert!(
                e.to_string().contains("the event log is append-only"),
                "{refused}: {e}"
            );
        }
    });
}
