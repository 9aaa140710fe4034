//! The I/O side of `function` processors: a KRM function reached over HTTP(S) (the
//! ResourceList POSTed, one read back) or an executable the agent's operator allows (the
//! ResourceList on stdin, one on stdout). Both under a deadline and a size limit, and only where
//! the operator allows: hosts with `--allow-function-host`, executables with
//! `--allow-function-exec`, a `timeout` up to `--function-timeout-max`.
//!
//! What the function says is its business: an answer it gives (even with error results, a 4xx,
//! or an exit status with output) is returned for the pipeline to judge, so a refusal is a
//! lasting `FunctionFailed`. Only not getting an answer at all (connection refused, 5xx, the
//! deadline) is an `Err`, retried later like a source that is down. What reaches a condition
//! never quotes what the function sent besides its ResourceList's own results: an error
//! answer's status code and size, an executable's exit status.
//!
//! An executable runs in the function sandbox ([`crate::render_sandbox::exec`]): its own process
//! group with an empty environment, under memory and CPU limits, killed with everything it
//! started at its deadline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::api::{BundleDeployment, FunctionProcessor, ProcessorSpec};

/// The largest answer read from a function.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;
/// The longest `timeout` a function may ask for unless the operator says otherwise.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Memory an `exec` function may allocate unless the operator says otherwise (MiB).
pub const DEFAULT_EXEC_MEMORY_MIB: u64 = 256;
/// CPU time an `exec` function may use unless the operator says otherwise.
pub const DEFAULT_EXEC_CPU: Duration = Duration::from_secs(60);
/// Bytes of an `exec` function's standard error kept for the agent's log.
const STDERR_BYTES: u64 = 64 * 1024;

/// Where functions may run and for how long: the executables and hosts the operator allows,
/// the longest timeout, and the limits of an executable's process.
#[derive(Debug, Clone)]
pub struct FunctionPolicy {
    /// Absolute paths of executables a `function.exec` may name.
    pub allowed_exec: Vec<PathBuf>,
    /// Hosts a `function.url` may name: `host`, `host:port`, or `*.domain` (any name under it),
    /// compared without case.
    pub allowed_hosts: Vec<String>,
    /// The longest `timeout` a function may ask for; a longer one is refused.
    pub max_timeout: Duration,
    /// Memory an executable may allocate (RLIMIT_DATA).
    pub exec_memory_bytes: u64,
    /// CPU time an executable may use (RLIMIT_CPU).
    pub exec_cpu: Duration,
    /// The binary that runs an executable in its sandbox (`pallet function-sandbox`); None:
    /// this process's own.
    pub sandbox_program: Option<PathBuf>,
}

impl Default for FunctionPolicy {
    fn default() -> Self {
        FunctionPolicy {
            allowed_exec: Vec::new(),
            allowed_hosts: Vec::new(),
            max_timeout: DEFAULT_MAX_TIMEOUT,
            exec_memory_bytes: DEFAULT_EXEC_MEMORY_MIB << 20,
            exec_cpu: DEFAULT_EXEC_CPU,
            sandbox_program: None,
        }
    }
}

impl FunctionPolicy {
    /// Whether `path` is one of the allowed executables.
    pub fn allows(&self, path: &Path) -> bool {
        self.allowed_exec.iter().any(|allowed| allowed == path)
    }

    /// Whether `url`'s host (and port) is one the operator allows.
    pub fn allows_host(&self, url: &url::Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        let port = url.port_or_known_default();
        self.allowed_hosts.iter().any(|allowed| {
            let allowed = allowed.to_ascii_lowercase();
            let (name, wanted_port) = match allowed.rsplit_once(':') {
                Some((name, p)) if !name.ends_with(':') && p.parse::<u16>().is_ok() => {
                    (name.to_string(), p.parse::<u16>().ok())
                }
                _ => (allowed.clone(), None),
            };
            let port_ok = wanted_port.is_none() || wanted_port == port;
            let name_ok = match name.strip_prefix("*.") {
                Some(domain) => host.ends_with(&format!(".{domain}")),
                None => host == name,
            };
            name_ok && port_ok
        })
    }

    /// What in `processors` this agent refuses before anything is fetched: a `timeout` over
    /// the maximum, a URL to a host not allowed. Each named with its processor.
    pub fn refusals(&self, processors: &[ProcessorSpec]) -> Vec<String> {
        let mut refusals = Vec::new();
        for (index, spec) in processors.iter().enumerate() {
            let Some(function) = &spec.function else {
                continue;
            };
            let name = format!("processors[{index}] ({})", spec.display_name(index));
            if let Some(text) = &function.timeout {
                if function.timeout() > self.max_timeout {
                    refusals.push(format!(
                        "{name}: timeout {text} is over this agent's maximum of {} (--function-timeout-max)",
                        go_duration(self.max_timeout)
                    ));
                }
            }
            if let Some(url) = &function.url {
                match url::Url::parse(url) {
                    Ok(parsed) if self.allows_host(&parsed) => {}
                    Ok(parsed) => refusals.push(format!(
                        "{name}: function host {} is not one this agent allows (its operator lists them with --allow-function-host)",
                        host_port(&parsed)
                    )),
                    Err(e) => refusals.push(format!("{name}: url is not valid: {e}")),
                }
            }
        }
        refusals
    }

    /// The deadline of a call to `spec`: its `timeout`, at most the maximum.
    pub fn timeout(&self, spec: &FunctionProcessor) -> Duration {
        spec.timeout().min(self.max_timeout)
    }
}

/// `d` as a Go duration (`5m`, `1m30s`, `500ms`), for messages.
pub fn go_duration(d: Duration) -> String {
    if d.subsec_millis() != 0 || d.as_secs() == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (h, m, s) = (d.as_secs() / 3600, d.as_secs() / 60 % 60, d.as_secs() % 60);
    let mut text = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if n > 0 {
            text.push_str(&format!("{n}{unit}"));
        }
    }
    text
}

/// `host:port` of `url`, for messages.
fn host_port(url: &url::Url) -> String {
    match (url.host_str(), url.port_or_known_default()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => "(none)".into(),
    }
}

/// A ResourceList that reports one error: how a function's failure that is not a ResourceList
/// (a 4xx, a crash) reaches the pipeline as the function's own verdict.
fn error_answer(message: String) -> String {
    json!({
        "apiVersion": pallet_formats::processors::krm::API_VERSION,
        "kind": "ResourceList",
        "items": [],
        "results": [{"severity": "error", "message": message}],
    })
    .to_string()
}

/// What a function call may use besides its spec: a client to read the Secret it names (under
/// the secret-namespace rule, as the BundleDeployment's ServiceAccount), and the executables
/// allowed.
pub struct FunctionCaller<'a> {
    /// The agent's (or the CLI's) client; `None` without a cluster.
    pub client: Option<&'a kube::Client>,
    /// Where Secrets may be read from.
    pub secret_policy: &'a super::fetch::SecretPolicy,
    /// The executables allowed.
    pub exec_policy: &'a FunctionPolicy,
    /// The addresses a function URL may reach (loopback and link-local refused by default, as
    /// for sources).
    pub egress: crate::egress::EgressPolicy,
}

/// Calls the function of `spec` with `request`, for `bd`.
pub async fn call(
    caller: &FunctionCaller<'_>,
    bd: &BundleDeployment,
    spec: &FunctionProcessor,
    request: &Value,
) -> Result<String, String> {
    let body = serde_json::to_vec(request).map_err(|e| e.to_string())?;
    match (&spec.url, &spec.exec) {
        (Some(url), _) => call_http(caller, bd, spec, url, body).await,
        (None, Some(path)) => {
            let path = Path::new(path);
            if !caller.exec_policy.allows(path) {
                return Ok(error_answer(format!(
                    "{} is not an executable this agent allows (its operator lists them with --allow-function-exec)",
                    path.display()
                )));
            }
            call_exec(
                caller.exec_policy,
                path,
                caller.exec_policy.timeout(spec),
                body,
            )
            .await
        }
        (None, None) => Ok(error_answer("the function has neither url nor exec".into())),
    }
}

async fn call_http(
    caller: &FunctionCaller<'_>,
    bd: &BundleDeployment,
    spec: &FunctionProcessor,
    url: &str,
    body: Vec<u8>,
) -> Result<String, String> {
    let mut token = None;
    let mut ca = None;
    if let Some(reference) = &spec.secret {
        let Some(client) = caller.client else {
            return Err(format!(
                "the function's Secret {} needs a cluster to be read",
                reference.name
            ));
        };
        let name = bd.metadata.name.as_deref().unwrap_or_default();
        let requester = caller.secret_policy.requester(name, &bd.spec);
        let (_, secret) =
            super::fetch::read_secret(client, caller.secret_policy, requester, reference)
                .await
                .map_err(|e| e.to_string())?;
        let data = super::fetch::secret_data(&secret);
        token = data
            .get("token")
            .map(|t| String::from_utf8_lossy(t).trim().to_string());
        ca = data.get("ca.crt").cloned();
    }
    let parsed = url::Url::parse(url).map_err(|e| format!("{url}: {e}"))?;
    if !caller.exec_policy.allows_host(&parsed) {
        return Ok(error_answer(format!(
            "function host {} is not one this agent allows (its operator lists them with --allow-function-host)",
            host_port(&parsed)
        )));
    }
    if let Err(refused) = caller.egress.check_url(&parsed) {
        return Ok(error_answer(refused.to_string()));
    }
    // The function answers itself; a redirect could send the objects elsewhere.
    let mut builder = caller
        .egress
        .http_client(crate::egress::Redirects::None)
        .connect_timeout(Duration::from_secs(10))
        .timeout(caller.exec_policy.timeout(spec));
    if let Some(pem) = &ca {
        let certificates = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|_| "the Secret's ca.crt is not valid PEM".to_string())?;
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
    }
    let client = builder.build().map_err(|e| e.to_string())?;
    let mut request = client
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, application/yaml")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = match request.send().await {
        Ok(response) => response,
        // An address the agent may not reach is a lasting refusal, not an outage.
        Err(error) => match crate::egress::refusal_in(&error) {
            Some(refused) => return Ok(error_answer(format!("POST {url}: {refused}"))),
            None => {
                return Err(format!(
                    "POST {url}: {}",
                    crate::source::http::describe(&error)
                ))
            }
        },
    };
    let status = response.status();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.chars()
                .filter(|c| c.is_ascii_graphic() || *c == ' ')
                .take(64)
                .collect::<String>()
        });
    // Counted as it arrives, whatever the answer declares.
    let limit = crate::bounded::Reader::FunctionAnswer.limit(MAX_ANSWER_BYTES as u64);
    let answer = match crate::bounded::read_to_vec(response, limit).await {
        Ok(answer) => answer,
        Err(crate::bounded::ReadError::TooLarge { .. }) => {
            return Ok(error_answer(format!(
                "the answer of {url} is over {} MiB",
                MAX_ANSWER_BYTES >> 20
            )))
        }
        Err(crate::bounded::ReadError::Transport(detail)) => {
            return Err(format!("reading the answer of {url}: {detail}"))
        }
    };
    if status.is_server_error() {
        return Err(format!("POST {url}: {status}"));
    }
    if !status.is_success() {
        // The body may echo what was sent (the objects, their Secrets' data): never quoted.
        return Ok(error_answer(format!(
            "POST {url}: {status} ({} bytes of {}, not shown)",
            answer.len(),
            content_type.as_deref().unwrap_or("unknown type")
        )));
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// Sends SIGTERM to the function sandbox `.0` when dropped, unless cleared: the sandbox then
/// ends the function and everything it started (see `render_sandbox::exec`).
struct EndOnDrop(Option<rustix::process::Pid>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if let Some(sandbox) = self.0 {
            let _ = rustix::process::kill_process(sandbox, rustix::process::Signal::TERM);
        }
    }
}

async fn call_exec(
    policy: &FunctionPolicy,
    path: &Path,
    timeout: Duration,
    body: Vec<u8>,
) -> Result<String, String> {
    use std::os::unix::process::ExitStatusExt as _;
    let program = policy
        .sandbox_program
        .clone()
        .unwrap_or_else(crate::render_sandbox::own_binary);
    // The sandbox ends the function at `timeout`; this bound is for the sandbox itself.
    let outer = timeout + Duration::from_secs(5);
    let mut child = tokio::process::Command::new(&program)
        .arg("function-sandbox")
        .arg("--memory-bytes")
        .arg(policy.exec_memory_bytes.to_string())
        .arg("--cpu-seconds")
        .arg(policy.exec_cpu.as_secs().max(1).to_string())
        .arg("--timeout-ms")
        .arg(timeout.as_millis().to_string())
        .arg(path)
        .env_clear()
        .current_dir("/")
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {} in the function sandbox: {e}", path.display()))?;
    let group = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(i32::try_from(id).ok()?));
    // A call dropped before it ends (its BundleDeployment deleted, its render abandoned) asks the
    // sandbox to end the function with everything it started; killing the sandbox alone would
    // leave them running.
    let mut end_early = EndOnDrop(group);
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(format!("running {}: no pipes", path.display()));
    };
    let exchange = async {
        let write = async move {
            // A function that exits without reading all of its input is its own business.
            let _ = stdin.write_all(&body).await;
            drop(stdin);
        };
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut stdout = stdout.take(MAX_ANSWER_BYTES as u64 + 1);
        let mut stderr = stderr.take(STDERR_BYTES);
        let read_out = stdout.read_to_end(&mut out);
        let read_err = stderr.read_to_end(&mut err);
        let (_, read_out, _) = tokio::join!(write, read_out, read_err);
        read_out.map_err(|e| e.to_string())?;
        let status = child.wait().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, out, err))
    };
    let ended = tokio::time::timeout(outer, exchange).await;
    // The sandbox has exited (and been waited for), or its group is killed below.
    end_early.0 = None;
    let Ok(ended) = ended else {
        // The sandbox itself hung: its whole group goes.
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        return Err(format!(
            "{} did not answer within {}",
            path.display(),
            go_duration(timeout)
        ));
    };
    let (status, out, err) = ended?;
    if !err.is_empty() {
        tracing::warn!(function = %path.display(), "function's standard error: {}", String::from_utf8_lossy(&err).trim());
    }
    if status.code() == Some(crate::render_sandbox::exec::EXIT_TIMED_OUT.into()) {
        return Err(format!(
            "{} did not answer within {}",
            path.display(),
            go_duration(timeout)
        ));
    }
    if out.len() > MAX_ANSWER_BYTES {
        return Ok(error_answer(format!(
            "the output of {} is over {} MiB",
            path.display(),
            MAX_ANSWER_BYTES >> 20
        )));
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    if status.success() {
        return Ok(text);
    }
    // A failing function may still report why as a ResourceList; else its exit status says
    // (its standard error, which may quote what it read, goes to the agent's log only).
    if pallet_formats::processors::krm::parse_response(&text).is_ok_and(|o| !o.errors.is_empty()) {
        return Ok(text);
    }
    let not_started = i32::from(crate::render_sandbox::exec::EXIT_NOT_STARTED);
    let how = match (status.code(), status.signal()) {
        (Some(code), _) if code == not_started => {
            "could not be started (see the agent's log)".to_string()
        }
        (Some(code), _) if code > 128 => format!("was killed by signal {}", code - 128),
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended".to_string(),
    };
    Ok(error_answer(format!(
        "{} {how}; its standard error is in the agent's log",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(hosts: &[&str]) -> FunctionPolicy {
        FunctionPolicy {
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..Default::default()
        }
    }

    fn allows(policy: &FunctionPolicy, url: &str) -> bool {
        policy.allows_host(&url::Url::parse(url).unwrap())
    }

    #[test]
    fn function_hosts_are_allowed_by_name_port_or_domain_and_none_by_default() {
        assert!(!allows(
            &FunctionPolicy::default(),
            "http://fn.example.com/"
        ));
        let policy = policy(&[
            "fn.example.com",
            "krm.tools:8443",
            "*.fns.svc.cluster.local",
        ]);
        assert!(allows(&policy, "http://fn.example.com/"));
        assert!(allows(&policy, "https://FN.example.com:9000/x"));
        assert!(allows(&policy, "https://krm.tools:8443/"));
        assert!(!allows(&policy, "https://krm.tools/"), "another port");
        assert!(allows(&policy, "http://set-team.fns.svc.cluster.local/"));
        assert!(!allows(&policy, "http://fns.svc.cluster.local/"));
        assert!(!allows(&policy, "http://kubernetes.default.svc/"));
        assert!(!allows(&policy, "http://evil-fn.example.com/"));
        assert!(allows(
            &self::policy(&["127.0.0.1:8080"]),
            "http://127.0.0.1:8080/"
        ));
        assert!(allows(&self::policy(&["[::1]:8080"]), "http://[::1]:8080/"));
    }

    #[test]
    fn a_timeout_over_the_maximum_and_a_host_not_allowed_are_refused_by_name() {
        let processors: Vec<ProcessorSpec> = serde_json::from_value(serde_json::json!([
            {"name": "slow", "function": {"url": "http://fn.example.com/", "timeout": "10000h"}},
            {"name": "elsewhere", "function": {"url": "http://10.0.0.1/", "timeout": "5m"}},
            {"function": {"exec": "/bin/fn", "timeout": "30s"}},
        ]))
        .unwrap();
        let refusals = policy(&["fn.example.com"]).refusals(&processors);
        assert_eq!(
            refusals,
            vec![
                "processors[0] (slow): timeout 10000h is over this agent's maximum of 5m (--function-timeout-max)",
                "processors[1] (elsewhere): function host 10.0.0.1:80 is not one this agent allows (its operator lists them with --allow-function-host)",
            ]
        );
        let spec: FunctionProcessor =
            serde_json::from_value(serde_json::json!({"exec": "/bin/fn", "timeout": "10000h"}))
                .unwrap();
        assert_eq!(
            FunctionPolicy::default().timeout(&spec),
            DEFAULT_MAX_TIMEOUT
        );
        assert_eq!(go_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
    }
}
