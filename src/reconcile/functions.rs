//! The I/O side of `function` processors: a KRM function reached over HTTP(S) (the
//! ResourceList POSTed, one read back) or an executable the agent's operator allows (the
//! ResourceList on stdin, one on stdout). Both under a deadline and a size limit.
//!
//! What the function says is its business: an answer it gives (even with error results, a 4xx,
//! or an exit status with output) is returned for the pipeline to judge, so a refusal is a
//! lasting `FunctionFailed`. Only not getting an answer at all (connection refused, 5xx, the
//! deadline) is an `Err`, retried later like a source that is down.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::api::{BundleDeployment, FunctionProcessor};

/// The largest answer read from a function.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Where functions may run: the executables the operator allows (`--allow-function-exec`).
#[derive(Debug, Clone, Default)]
pub struct FunctionPolicy {
    /// Absolute paths of executables a `function.exec` may name.
    pub allowed_exec: Vec<PathBuf>,
}

impl FunctionPolicy {
    /// Whether `path` is one of the allowed executables.
    pub fn allows(&self, path: &Path) -> bool {
        self.allowed_exec.iter().any(|allowed| allowed == path)
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
            call_exec(path, spec.timeout(), body).await
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
    if let Err(refused) = caller.egress.check_url(&parsed) {
        return Ok(error_answer(refused.to_string()));
    }
    // The function answers itself; a redirect could send the objects elsewhere.
    let mut builder = caller
        .egress
        .http_client(crate::egress::Redirects::None)
        .connect_timeout(Duration::from_secs(10))
        .timeout(spec.timeout());
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
    let text = String::from_utf8_lossy(&answer).into_owned();
    if status.is_server_error() {
        return Err(format!("POST {url}: {status}"));
    }
    if !status.is_success() {
        let excerpt: String = text.chars().take(512).collect();
        return Ok(error_answer(format!("POST {url}: {status}: {excerpt}")));
    }
    Ok(text)
}

async fn call_exec(path: &Path, timeout: Duration, body: Vec<u8>) -> Result<String, String> {
    let mut child = tokio::process::Command::new(path)
        .env_clear()
        .current_dir("/")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("running {}: {e}", path.display()))?;
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
        let mut stderr = stderr.take(64 * 1024);
        let read_out = stdout.read_to_end(&mut out);
        let read_err = stderr.read_to_end(&mut err);
        let (_, read_out, _) = tokio::join!(write, read_out, read_err);
        read_out.map_err(|e| e.to_string())?;
        let status = child.wait().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, out, err))
    };
    let (status, out, err) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("{} did not answer within {timeout:?}", path.display()))??;
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
    // A failing function may still report why as a ResourceList; else its stderr says.
    if pallet_formats::processors::krm::parse_response(&text).is_ok_and(|o| !o.errors.is_empty()) {
        return Ok(text);
    }
    let stderr: String = String::from_utf8_lossy(&err).chars().take(512).collect();
    Ok(error_answer(format!(
        "{} exited with {status}: {}",
        path.display(),
        stderr.trim()
    )))
}
