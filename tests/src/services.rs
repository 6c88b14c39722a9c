//! Private instances of the services a fault test restarts: a Postgres cluster and a NATS
//! JetStream server of the test's own, on free ports in temp dirs, so that stopping them
//! never touches the shared ones (127.0.0.1:5432 and :4222) other tests use.
//!
//! Each is found on the machine (Debian's `/usr/lib/postgresql/*/bin` and
//! `/usr/sbin/nats-server`, or `TROUPE_TEST_PG_BIN` / `TROUPE_TEST_NATS_SERVER`). Without
//! them a test is skipped with a note, except under `CI=true`, where it fails. Dropping
//! one stops it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// How long a service may take to start or stop.
const DEADLINE: Duration = Duration::from_secs(60);

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A note outside CI; a panic in CI, where fault tests must run.
fn skip_or_fail(test: &str, what: &str) {
    if in_ci() {
        panic!("{test}: {what}, and CI=true: fault tests must run in CI");
    }
    eprintln!("note: {test} skipped: {what}");
}

/// A port nobody listens on now (the OS picks it; it is free again once the probe closes).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0 to find a free port")
}

#[cfg(unix)]
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(not(unix))]
fn is_root() -> bool {
    false
}

/// Runs `program args…` to completion (as the `postgres` user when we are root, since
/// Postgres refuses to run as root); panics with its output on failure.
async fn run(program: &Path, args: &[&str], as_postgres: bool) {
    let mut cmd = if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .env_remove("PGDATA")
        .kill_on_drop(true);
    let out = tokio::time::timeout(DEADLINE, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} took over {DEADLINE:?}", program.display()))
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    if !out.status.success() {
        panic!(
            "{} {args:?} failed with {}:\n{}\n{}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A Postgres cluster of the test's own: trust auth, user `postgres`, on a free port.
pub struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
}

impl PrivatePostgres {
    /// Where `initdb` and `pg_ctl` are: `TROUPE_TEST_PG_BIN`, else the newest
    /// `/usr/lib/postgresql/<version>/bin`.
    fn find_bin() -> Option<PathBuf> {
        if let Ok(dir) = std::env::var("TROUPE_TEST_PG_BIN")
            && !dir.is_empty()
        {
            return Some(PathBuf::from(dir));
        }
        let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .filter_map(|e| {
                let version = e.file_name().to_str()?.parse::<u32>().ok()?;
                let bin = e.path().join("bin");
                bin.join("pg_ctl").exists().then_some((version, bin))
            })
            .collect();
        found.sort();
        found.pop().map(|(_, bin)| bin)
    }

    /// A new cluster, started; `None` (with a note) when Postgres is not installed, outside
    /// CI.
    pub async fn start_or_skip(test: &str) -> Option<Self> {
        let Some(bin) = Self::find_bin() else {
            skip_or_fail(
                test,
                "no Postgres server binaries (/usr/lib/postgresql/*/bin or TROUPE_TEST_PG_BIN)",
            );
            return None;
        };
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("troupe-pg-")
            .tempdir()
            .expect("temp dir");
        if as_postgres {
            run(
                Path::new("chown"),
                &["postgres:postgres", &dir.path().display().to_string()],
                false,
            )
            .await;
        }
        let pg = PrivatePostgres {
            bin,
            port: free_port(),
            dir,
            as_postgres,
        };
        let data = pg.data().display().to_string();
        run(
            &pg.bin.join("initdb"),
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            pg.as_postgres,
        )
        .await;
        pg.start().await;
        Some(pg)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/<database>`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Starts the server and waits until it takes connections.
    pub async fn start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        run(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                &self.data().display().to_string(),
                "-l",
                &self.dir.path().join("log").display().to_string(),
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
            self.as_postgres,
        )
        .await;
    }

    /// Stops the server at once (`-m fast`: open connections are cut, as a crash or a
    /// failover would cut them) and waits until it is down.
    pub async fn stop(&self) {
        run(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                &self.data().display().to_string(),
                "-m",
                "fast",
                "-w",
                "-t",
                "60",
                "stop",
            ],
            self.as_postgres,
        )
        .await;
    }

    /// Creates `name` and returns its URL.
    pub async fn create_database(&self, name: &str) -> String {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&self.url("postgres"))
            .await
            .expect("connect to the private Postgres");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(r#"CREATE DATABASE "{name}""#)))
            .execute(&mut conn)
            .await
            .expect("CREATE DATABASE");
        let _ = conn.close().await;
        self.url(name)
    }

    /// The server's log, for a failing test.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // Immediate: the cluster is thrown away with its temp dir.
        let mut cmd = if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"));
            c
        } else {
            std::process::Command::new(self.bin.join("pg_ctl"))
        };
        let _ = cmd
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A NATS server with JetStream of the test's own, on a free port, its store in a temp dir
/// that survives a restart (as a real server's disk does).
pub struct PrivateNats {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl PrivateNats {
    fn find_bin() -> Option<PathBuf> {
        if let Ok(p) = std::env::var("TROUPE_TEST_NATS_SERVER")
            && !p.is_empty()
        {
            return Some(PathBuf::from(p));
        }
        [
            "/usr/sbin/nats-server",
            "/usr/bin/nats-server",
            "/usr/local/bin/nats-server",
        ]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
    }

    /// A new server, started; `None` (with a note) when nats-server is not installed,
    /// outside CI.
    pub async fn start_or_skip(test: &str) -> Option<Self> {
        let Some(bin) = Self::find_bin() else {
            skip_or_fail(
                test,
                "no nats-server (/usr/sbin/nats-server or TROUPE_TEST_NATS_SERVER)",
            );
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("troupe-nats-")
            .tempdir()
            .expect("temp dir");
        let mut nats = PrivateNats {
            bin,
            dir,
            port: free_port(),
            child: None,
        };
        nats.start().await;
        Some(nats)
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server and waits until its port takes connections.
    pub async fn start(&mut self) {
        assert!(self.child.is_none(), "nats-server is already running");
        let child = Command::new(&self.bin)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.path().join("store"))
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.bin.display()));
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + DEADLINE;
        // A poll of a port with a deadline: the server says nothing else when it is up.
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "nats-server did not listen on {} within {DEADLINE:?}:\n{}",
                self.port,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server (SIGTERM, as an orderly restart would) and waits for it to exit.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        #[cfg(unix)]
        if let Some(pid) = child.id() {
            // SAFETY: kill(2) on our own child, which has not been reaped yet.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(DEADLINE, child.wait()).await.is_err() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}
