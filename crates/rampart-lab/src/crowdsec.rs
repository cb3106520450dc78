//! The lab's CrowdSec: the Debian `crowdsec` package's Local API, run
//! LAPI-only (`crowdsec -no-cs`: no log acquisition, no scenarios) and
//! offline (no central API, no hub download) from a private directory —
//! its own `config.yaml`, SQLite database, profiles and credentials —
//! listening on 127.0.0.1 (or an address of the caller's) at a free port,
//! so it never meets the host's own `/etc/crowdsec`. Bouncers, machines and decisions are added with
//! the package's `cscli` pointed at that config. Stopped and removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A running LAPI; stopped and its directory removed on drop.
#[derive(Debug)]
pub struct CrowdsecLab {
    dir: PathBuf,
    addr: std::net::Ipv4Addr,
    port: u16,
    child: Option<Child>,
}

fn free_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::io("finding a free port for the CrowdSec LAPI", e))
}

impl CrowdsecLab {
    /// Write the private config under `dir` (created; removed on drop),
    /// register the `cscli` machine, start the LAPI and wait until it
    /// answers (at most 60 s).
    ///
    /// # Errors
    /// `crowdsec`/`cscli` not installed, a failing `cscli`, or a LAPI
    /// that does not come up (its log's last lines are in the message).
    pub fn start(dir: &Path) -> Result<Self> {
        Self::start_on(dir, std::net::Ipv4Addr::LOCALHOST)
    }

    /// As [`CrowdsecLab::start`], listening on `addr` (an address of the
    /// root namespace, e.g. a veth into a lab namespace whose bouncer
    /// must reach it).
    ///
    /// # Errors
    /// As [`CrowdsecLab::start`].
    pub fn start_on(dir: &Path, addr: std::net::Ipv4Addr) -> Result<Self> {
        for t in ["crowdsec", "cscli"] {
            if !crate::web::have(t) {
                return Err(Error::InvalidSpec(format!(
                    "{t} is not installed: `./run deps` installs it (apt-get install crowdsec)"
                )));
            }
        }
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("data"))
            .and_then(|()| std::fs::create_dir_all(dir.join("hub")))
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let port = free_port()?;
        let mut me = Self {
            dir: dir.to_path_buf(),
            addr,
            port,
            child: None,
        };
        let d = dir.display();
        let files = [
            (
                "config.yaml",
                format!(
                    "common:\n  daemonize: false\n  log_media: file\n  log_level: info\n  log_dir: {d}\n  working_dir: {d}\n\
                     config_paths:\n  config_dir: {d}\n  data_dir: {d}/data\n  simulation_path: {d}/simulation.yaml\n  \
                     hub_dir: {d}/hub\n  index_path: {d}/hub/.index.json\n  notification_dir: {d}/notifications\n  \
                     plugin_dir: /usr/lib/crowdsec/plugins/\n\
                     crowdsec_service:\n  acquisition_path: {d}/acquis.yaml\n\
                     cscli:\n  output: human\n\
                     db_config:\n  log_level: info\n  type: sqlite\n  db_path: {d}/data/crowdsec.db\n  use_wal: true\n\
                     api:\n  client:\n    insecure_skip_verify: false\n    credentials_path: {d}/local_api_credentials.yaml\n  \
                     server:\n    log_level: info\n    listen_uri: {addr}:{port}\n    profiles_path: {d}/profiles.yaml\n    \
                     console_path: {d}/console.yaml\n    trusted_ips:\n      - 127.0.0.1\n\
                     prometheus:\n  enabled: false\n"
                ),
            ),
            // Alerts pushed without decisions get a 4 h ban (crowdsec's default profile).
            (
                "profiles.yaml",
                "name: default_ip_remediation\nfilters:\n - Alert.Remediation == true && Alert.GetScope() == \"Ip\"\n\
                 decisions:\n - type: ban\n   duration: 4h\non_success: break\n"
                    .to_string(),
            ),
            ("acquis.yaml", "filenames: []\n".to_string()),
            ("simulation.yaml", "simulation: false\nexclusions: []\n".to_string()),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text)
                .map_err(|e| Error::io(format!("writing {}/{name}", dir.display()), e))?;
        }
        let cred = dir.join("local_api_credentials.yaml");
        let cred = cred.to_string_lossy().into_owned();
        me.cscli(&["machines", "add", "cscli", "--auto", "-f", &cred])?;
        let log = std::fs::File::create(dir.join("crowdsec.out"))
            .map_err(|e| Error::io("creating the LAPI's output file", e))?;
        let child = Command::new("crowdsec")
            .args(["-c", &me.config(), "-no-cs"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| Error::io("LAPI output", e))?)
            .stderr(log)
            .spawn()
            .map_err(|e| Error::io("starting crowdsec", e))?;
        me.child = Some(child);
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if std::net::TcpStream::connect((addr, port)).is_ok() {
                return Ok(me);
            }
            let exited = me
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .is_some();
            if exited || Instant::now() > end {
                return Err(Error::InvalidSpec(format!(
                    "the CrowdSec LAPI did not come up on {addr}:{port}: {}",
                    me.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn config(&self) -> String {
        self.dir.join("config.yaml").to_string_lossy().into_owned()
    }

    /// The last lines of the LAPI's logs (for messages).
    #[must_use]
    pub fn log_tail(&self) -> String {
        let mut out = String::new();
        for f in ["crowdsec.out", "crowdsec_api.log", "crowdsec.log"] {
            if let Ok(t) = std::fs::read_to_string(self.dir.join(f)) {
                let lines: Vec<&str> = t.lines().collect();
                out.push_str(&lines[lines.len().saturating_sub(5)..].join(" | "));
                out.push(' ');
            }
        }
        out
    }

    /// The LAPI's URL (rampart's `crowdsec.lapi_url`).
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.addr, self.port)
    }

    /// The private directory (config, database, logs).
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Run `cscli -c <config> ARGS`; its standard output.
    ///
    /// # Errors
    /// A failing `cscli` (its message).
    pub fn cscli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("cscli")
            .arg("-c")
            .arg(self.config())
            .args(args)
            .output()
            .map_err(|e| Error::io("running cscli", e))?;
        if !out.status.success() {
            return Err(Error::InvalidSpec(format!(
                "cscli {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Register bouncer `name`; its API key.
    ///
    /// # Errors
    /// A failing `cscli`.
    pub fn add_bouncer(&self, name: &str) -> Result<String> {
        Ok(self
            .cscli(&["bouncers", "add", name, "-o", "raw"])?
            .trim()
            .to_string())
    }

    /// Register machine `name` with `password` (a watcher that pushes alerts).
    ///
    /// # Errors
    /// A failing `cscli`.
    pub fn add_machine(&self, name: &str, password: &str) -> Result<()> {
        self.cscli(&[
            "machines",
            "add",
            name,
            "--password",
            password,
            "-f",
            "/dev/null",
        ])?;
        Ok(())
    }

    /// Import ban decisions on `values` (addresses or, with scope `range`,
    /// prefixes) for `duration` ("4h") in one `cscli decisions import`.
    ///
    /// # Errors
    /// A failing `cscli`.
    pub fn import(&self, values: &[String], scope: &str, duration: &str) -> Result<()> {
        let mut csv = String::from("duration,scope,value\n");
        for v in values {
            csv.push_str(&format!("{duration},{scope},{v}\n"));
        }
        let f = self.dir.join("import.csv");
        std::fs::write(&f, csv).map_err(|e| Error::io("writing decisions", e))?;
        self.cscli(&["decisions", "import", "-i", &f.to_string_lossy()])?;
        Ok(())
    }

    /// Add one ban (`cscli decisions add`), e.g. `["-i", "192.0.2.7", "-d", "1h"]`.
    ///
    /// # Errors
    /// A failing `cscli`.
    pub fn add(&self, args: &[&str]) -> Result<()> {
        let mut a = vec!["decisions", "add"];
        a.extend_from_slice(args);
        self.cscli(&a)?;
        Ok(())
    }

    /// Delete the decisions on `ip` (`cscli decisions delete -i`).
    ///
    /// # Errors
    /// A failing `cscli`.
    pub fn delete_ip(&self, ip: &str) -> Result<()> {
        self.cscli(&["decisions", "delete", "-i", ip])?;
        Ok(())
    }

    /// The active decisions as `cscli decisions list -o json` prints them
    /// (`--origin` can be given in `extra`).
    ///
    /// # Errors
    /// A failing `cscli`.
    pub fn decisions_json(&self, extra: &[&str]) -> Result<String> {
        let mut a = vec!["decisions", "list", "-o", "json", "-a"];
        a.extend_from_slice(extra);
        self.cscli(&a)
    }

    /// Stop the LAPI and remove its directory.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: a signal to the process this lab started (its pid, still ours until waited).
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end {
                if c.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for CrowdsecLab {
    fn drop(&mut self) {
        self.stop();
    }
}
