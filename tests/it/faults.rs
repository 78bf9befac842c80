//! Test kit: faults injected into the database (a trigger that refuses
//! chosen updates) and lock waits observed, so that failures and races are
//! produced on purpose instead of hoped for.

use sea_orm::{ConnectionTrait, DatabaseTransaction, TransactionTrait};

use crate::support::{Backend, TestDb};

impl TestDb {
    /// Makes the database refuse updates of `table` rows for which
    /// `condition` (over `NEW` and `OLD`, in this backend's SQL) holds,
    /// until [`TestDb::allow`] is called with the same `name`.
    pub async fn refuse(&self, name: &str, table: &str, condition: &str) {
        let message = format!("injected fault {name}");
        match self.backend {
            Backend::Postgres | Backend::Citus => {
                self.exec(
                    &format!(
                        "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                         IF {condition} THEN RAISE EXCEPTION '{message}'; END IF; RETURN NEW; END $$"
                    ),
                    vec![],
                )
                .await;
                self.triggers(&format!(
                    "CREATE TRIGGER {name} BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()"
                ))
                .await;
            }
            Backend::Mysql => {
                self.exec(
                    &format!(
                        "CREATE TRIGGER {name} BEFORE UPDATE ON {table} FOR EACH ROW BEGIN \
                         IF {condition} THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{message}'; END IF; END"
                    ),
                    vec![],
                )
                .await;
            }
            Backend::Sqlite => {
                self.exec(
                    &format!(
                        "CREATE TRIGGER {name} BEFORE UPDATE ON {table} FOR EACH ROW WHEN {condition} \
                         BEGIN SELECT RAISE(ABORT, '{message}'); END"
                    ),
                    vec![],
                )
                .await;
            }
        }
    }

    /// Removes the fault `name` on `table`.
    pub async fn allow(&self, name: &str, table: &str) {
        match self.backend {
            Backend::Postgres | Backend::Citus => {
                self.triggers(&format!("DROP TRIGGER {name} ON {table}"))
                    .await
            }
            _ => self.exec(&format!("DROP TRIGGER {name}"), vec![]).await,
        };
    }

    /// Creates or drops a trigger on PostgreSQL; on Citus, whose
    /// distributed tables take one only when told it is safe, on every
    /// shard of the table (the workers run it).
    async fn triggers(&self, sql: &str) -> u64 {
        let txn = self.store.connection().begin().await.unwrap();
        if self.backend == Backend::Citus {
            txn.execute_unprepared("SET LOCAL citus.enable_unsafe_triggers = on")
                .await
                .unwrap();
        }
        let n = txn.execute_unprepared(sql).await.unwrap().rows_affected();
        txn.commit().await.unwrap();
        n
    }

    /// A condition, in this backend's SQL, that the new `data` of an item
    /// contains `needle`.
    pub fn data_contains(&self, needle: &str) -> String {
        match self.backend {
            Backend::Postgres | Backend::Citus => {
                format!("position('{needle}'::bytea in NEW.data) > 0")
            }
            Backend::Mysql => format!("LOCATE('{needle}', NEW.data) > 0"),
            Backend::Sqlite => format!("instr(CAST(NEW.data AS TEXT), '{needle}') > 0"),
        }
    }

    /// Statements of this database waiting for a row lock right now whose
    /// text contains `pattern` (always 0 on SQLite, which has no row locks
    /// to observe). MariaDB does not always report such a wait as one, so
    /// there it is any such statement still running.
    pub async fn lock_waits(&self, pattern: &str) -> i64 {
        let sql = match self.backend {
            Backend::Postgres => {
                "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND datname = current_database() AND query LIKE ?"
            }
            // The wait is on the worker that holds the row; Citus's view of
            // waits across its nodes names the statement that waits.
            Backend::Citus => {
                "SELECT COUNT(*) AS n FROM citus_lock_waits WHERE blocked_statement LIKE ?"
            }
            Backend::Mysql => {
                "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND INFO LIKE ?"
            }
            Backend::Sqlite => return 0,
        };
        self.query(sql, vec![format!("%{pattern}%").into()]).await[0]
            .try_get("", "n")
            .unwrap()
    }

    /// A transaction of the test's that has run `sql` (no parameters), so
    /// that the row locks it took are held until the test commits it.
    pub async fn holding(&self, sql: &str) -> DatabaseTransaction {
        let txn = self.store.connection().begin().await.unwrap();
        txn.execute_raw(testkit::statement(self.store.driver(), sql, vec![]))
            .await
            .unwrap();
        txn
    }

    /// How a result write's lock on its partition row reads in the list of
    /// running statements (see [`TestDb::lock_waits`]).
    pub fn result_lock(&self) -> &'static str {
        if matches!(self.backend, Backend::Postgres | Backend::Citus) {
            "FOR SHARE"
        } else {
            "LOCK IN SHARE MODE"
        }
    }
}
