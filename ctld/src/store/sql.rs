//! One SQL text, two engines: the store's statements run on SQLite or on
//! PostgreSQL through these enums, which hand each bound value and each
//! column to that engine's own sqlx types (no value conversion between, as
//! `sqlx::Any` would do). The SQL itself is written in what both read
//! (numbered `$N` placeholders, `ON CONFLICT`, `CASE`); the few phrases
//! that differ are [`Engine`]'s methods.

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use sqlx::postgres::{PgArguments, PgConnection, PgRow, Postgres};
use sqlx::sqlite::{Sqlite, SqliteArguments, SqliteConnection, SqliteRow};
use sqlx::{Connection, Decode, Encode, QueryBuilder, Row, Type};

/// Which database engine holds the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    /// An expression for the number in the job's `spec` JSON at
    /// `array_task.array_job_id`.
    pub fn array_job_id(self) -> &'static str {
        match self {
            Engine::Sqlite => "json_extract(spec, '$.array_task.array_job_id')",
            Engine::Postgres => "(spec::jsonb #>> '{array_task,array_job_id}')::bigint",
        }
    }

    /// An expression for the database's clock, in unix milliseconds: the
    /// one clock every controller of a pair reads, so their hosts' clocks
    /// need not agree.
    pub fn now_ms(self) -> &'static str {
        match self {
            Engine::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
            Engine::Postgres => "CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)",
        }
    }
}

/// A value both engines bind.
pub trait Value<'q>:
    Encode<'q, Sqlite> + Type<Sqlite> + Encode<'q, Postgres> + Type<Postgres> + Send + 'q
{
}

impl<'q, T> Value<'q> for T where
    T: Encode<'q, Sqlite> + Type<Sqlite> + Encode<'q, Postgres> + Type<Postgres> + Send + 'q
{
}

/// A column type both engines decode.
pub trait Column<'r>:
    Decode<'r, Sqlite> + Type<Sqlite> + Decode<'r, Postgres> + Type<Postgres>
{
}

impl<'r, T> Column<'r> for T where
    T: Decode<'r, Sqlite> + Type<Sqlite> + Decode<'r, Postgres> + Type<Postgres>
{
}

/// An open connection to either engine.
pub enum Conn {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

/// A borrowed connection (or a transaction's) to run statements on.
pub enum ConnRef<'c> {
    Sqlite(&'c mut SqliteConnection),
    Postgres(&'c mut PgConnection),
}

/// An open transaction; rolled back when dropped uncommitted.
pub enum Tx<'c> {
    Sqlite(sqlx::Transaction<'c, Sqlite>),
    Postgres(sqlx::Transaction<'c, Postgres>),
}

impl Conn {
    pub fn engine(&self) -> Engine {
        match self {
            Conn::Sqlite(_) => Engine::Sqlite,
            Conn::Postgres(_) => Engine::Postgres,
        }
    }

    pub fn as_ref(&mut self) -> ConnRef<'_> {
        match self {
            Conn::Sqlite(c) => ConnRef::Sqlite(c),
            Conn::Postgres(c) => ConnRef::Postgres(c),
        }
    }

    pub async fn begin(&mut self) -> Result<Tx<'_>, sqlx::Error> {
        Ok(match self {
            Conn::Sqlite(c) => Tx::Sqlite(c.begin().await?),
            Conn::Postgres(c) => Tx::Postgres(c.begin().await?),
        })
    }

    /// Closes the connection politely (errors do not matter: it is going).
    pub async fn close(self) {
        let _ = match self {
            Conn::Sqlite(c) => c.close().await,
            Conn::Postgres(c) => c.close().await,
        };
    }
}

impl Tx<'_> {
    pub fn conn(&mut self) -> ConnRef<'_> {
        match self {
            Tx::Sqlite(t) => ConnRef::Sqlite(t),
            Tx::Postgres(t) => ConnRef::Postgres(t),
        }
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.commit().await,
            Tx::Postgres(t) => t.commit().await,
        }
    }
}

impl ConnRef<'_> {
    pub fn engine(&self) -> Engine {
        match self {
            ConnRef::Sqlite(_) => Engine::Sqlite,
            ConnRef::Postgres(_) => Engine::Postgres,
        }
    }

    /// The same connection, borrowed again for one statement.
    pub fn reborrow(&mut self) -> ConnRef<'_> {
        match self {
            ConnRef::Sqlite(c) => ConnRef::Sqlite(c),
            ConnRef::Postgres(c) => ConnRef::Postgres(c),
        }
    }

    /// A statement for this connection's engine.
    pub fn query<'q>(&self, sql: &'q str) -> Query<'q> {
        query(self.engine(), sql)
    }
}

/// A statement with its bound values, for one engine.
pub enum Query<'q> {
    Sqlite(sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>),
    Postgres(sqlx::query::Query<'q, Postgres, PgArguments>),
}

/// A statement for `engine`.
pub fn query(engine: Engine, sql: &str) -> Query<'_> {
    match engine {
        Engine::Sqlite => Query::Sqlite(sqlx::query(sql)),
        Engine::Postgres => Query::Postgres(sqlx::query(sql)),
    }
}

/// A statement built for one engine run on the other's connection: a
/// mistake in the store, reported rather than panicked on.
fn crossed() -> sqlx::Error {
    sqlx::Error::Configuration(
        "a statement built for one database engine was run on the other".into(),
    )
}

impl<'q> Query<'q> {
    pub fn bind<T: Value<'q>>(self, value: T) -> Self {
        match self {
            Query::Sqlite(q) => Query::Sqlite(q.bind(value)),
            Query::Postgres(q) => Query::Postgres(q.bind(value)),
        }
    }

    /// Runs the statement; the number of rows it changed.
    pub async fn execute(self, conn: ConnRef<'_>) -> Result<u64, sqlx::Error> {
        match (self, conn) {
            (Query::Sqlite(q), ConnRef::Sqlite(c)) => Ok(q.execute(c).await?.rows_affected()),
            (Query::Postgres(q), ConnRef::Postgres(c)) => Ok(q.execute(c).await?.rows_affected()),
            _ => Err(crossed()),
        }
    }

    pub async fn fetch_all(self, conn: ConnRef<'_>) -> Result<Vec<Record>, sqlx::Error> {
        match (self, conn) {
            (Query::Sqlite(q), ConnRef::Sqlite(c)) => Ok(q
                .fetch_all(c)
                .await?
                .into_iter()
                .map(Record::Sqlite)
                .collect()),
            (Query::Postgres(q), ConnRef::Postgres(c)) => Ok(q
                .fetch_all(c)
                .await?
                .into_iter()
                .map(Record::Postgres)
                .collect()),
            _ => Err(crossed()),
        }
    }

    pub async fn fetch_optional(self, conn: ConnRef<'_>) -> Result<Option<Record>, sqlx::Error> {
        match (self, conn) {
            (Query::Sqlite(q), ConnRef::Sqlite(c)) => {
                Ok(q.fetch_optional(c).await?.map(Record::Sqlite))
            }
            (Query::Postgres(q), ConnRef::Postgres(c)) => {
                Ok(q.fetch_optional(c).await?.map(Record::Postgres))
            }
            _ => Err(crossed()),
        }
    }

    pub async fn fetch_one(self, conn: ConnRef<'_>) -> Result<Record, sqlx::Error> {
        self.fetch_optional(conn)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    /// The rows one by one, never all held at once.
    pub fn fetch<'c>(self, conn: ConnRef<'c>) -> BoxStream<'c, Result<Record, sqlx::Error>>
    where
        'q: 'c,
    {
        match (self, conn) {
            (Query::Sqlite(q), ConnRef::Sqlite(c)) => {
                q.fetch(c).map(|r| r.map(Record::Sqlite)).boxed()
            }
            (Query::Postgres(q), ConnRef::Postgres(c)) => {
                q.fetch(c).map(|r| r.map(Record::Postgres)).boxed()
            }
            _ => futures_util::stream::once(async { Err(crossed()) }).boxed(),
        }
    }
}

/// A statement assembled piece by piece (lists of bound values).
pub enum Builder<'a> {
    Sqlite(QueryBuilder<'a, Sqlite>),
    Postgres(QueryBuilder<'a, Postgres>),
}

impl<'a> Builder<'a> {
    pub fn new(engine: Engine, start: &str) -> Self {
        match engine {
            Engine::Sqlite => Builder::Sqlite(QueryBuilder::new(start)),
            Engine::Postgres => Builder::Postgres(QueryBuilder::new(start)),
        }
    }

    pub fn engine(&self) -> Engine {
        match self {
            Builder::Sqlite(_) => Engine::Sqlite,
            Builder::Postgres(_) => Engine::Postgres,
        }
    }

    pub fn push(&mut self, sql: &str) -> &mut Self {
        match self {
            Builder::Sqlite(b) => {
                b.push(sql);
            }
            Builder::Postgres(b) => {
                b.push(sql);
            }
        }
        self
    }

    pub fn push_bind<T: Value<'a>>(&mut self, value: T) -> &mut Self {
        match self {
            Builder::Sqlite(b) => {
                b.push_bind(value);
            }
            Builder::Postgres(b) => {
                b.push_bind(value);
            }
        }
        self
    }

    /// `(a, b, ...)` of bound values; `(NULL)`, which matches nothing, when
    /// there are none.
    pub fn push_list<T>(&mut self, items: impl IntoIterator<Item = T>) -> &mut Self
    where
        T: Value<'a>,
    {
        self.push("(");
        let mut first = true;
        for item in items {
            if !first {
                self.push(", ");
            }
            first = false;
            self.push_bind(item);
        }
        if first {
            self.push("NULL");
        }
        self.push(")")
    }

    pub fn build(&mut self) -> Query<'_> {
        match self {
            Builder::Sqlite(b) => Query::Sqlite(b.build()),
            Builder::Postgres(b) => Query::Postgres(b.build()),
        }
    }
}

/// One row, from either engine.
pub enum Record {
    Sqlite(SqliteRow),
    Postgres(PgRow),
}

impl Record {
    /// The column `name`, decoded by the engine's own type for `T`.
    pub fn get<'r, T: Column<'r>>(&'r self, name: &str) -> Result<T, sqlx::Error> {
        match self {
            Record::Sqlite(r) => r.try_get(name),
            Record::Postgres(r) => r.try_get(name),
        }
    }

    /// The column `name`, a 64-bit integer (every integer column of both
    /// engines' migrations is one).
    pub fn int(&self, name: &str) -> Result<i64, sqlx::Error> {
        self.get::<i64>(name)
    }

    /// A nullable integer column as i64.
    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, sqlx::Error> {
        self.get::<Option<i64>>(name)
    }

    /// A nullable integer column narrowed to i32 (exit codes, signals): a
    /// stored value out of range reads as a decode error.
    pub fn opt_i32(&self, name: &str) -> Result<Option<i32>, sqlx::Error> {
        self.opt_int(name)?
            .map(|v| {
                i32::try_from(v).map_err(|e| sqlx::Error::ColumnDecode {
                    index: name.to_string(),
                    source: Box::new(e),
                })
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn statements_bind_read_and_refuse_the_other_engine() {
        let mut conn = Conn::Sqlite(SqliteConnection::connect("sqlite::memory:").await.unwrap());
        let mut c = conn.as_ref();
        c.query("CREATE TABLE t (a INTEGER, b TEXT, f INTEGER)")
            .execute(c.reborrow())
            .await
            .unwrap();
        let changed = c
            .query("INSERT INTO t VALUES ($1, $2, $3), ($4, NULL, $5)")
            .bind(5_i64)
            .bind("x")
            .bind(true)
            .bind(7_i64)
            .bind(false)
            .execute(c.reborrow())
            .await
            .unwrap();
        assert_eq!(changed, 2);
        let mut b = Builder::new(Engine::Sqlite, "SELECT a, b, f FROM t WHERE a IN ");
        b.push_list([7_i64, 9]).push(" ORDER BY a");
        let rows = b.build().fetch_all(c.reborrow()).await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].int("a").unwrap(), 7);
        assert_eq!(rows[0].get::<Option<String>>("b").unwrap(), None);
        assert!(!rows[0].get::<bool>("f").unwrap());
        let mut none = Builder::new(Engine::Sqlite, "SELECT a FROM t WHERE a IN ");
        none.push_list(Vec::<i64>::new());
        assert!(none
            .build()
            .fetch_all(c.reborrow())
            .await
            .unwrap()
            .is_empty());
        let big = c
            .query("SELECT 4294967296 AS v")
            .fetch_one(c.reborrow())
            .await
            .unwrap();
        assert!(big.opt_i32("v").is_err(), "out of i32's range");
        let crossed = query(Engine::Postgres, "SELECT 1")
            .execute(c.reborrow())
            .await
            .unwrap_err();
        assert!(crossed.to_string().contains("other"), "{crossed}");
    }
}
