//! Credentials the fetchers take, and the pure parsing of Kubernetes Secret data into them.
//!
//! Reading the Secret itself (namespace defaulting, the SubjectAccessReview check for other
//! namespaces, the allow-list) belongs to the reconciler and is not here yet; it will call
//! [`Credentials::from_secret_data`] with what it read. Secret values never appear in `Debug`
//! output or errors: only [`Credentials::origin`] (e.g. `secret pallet-system/regcred`) does.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;

use super::SourceError;

/// Credentials for one source, with a label saying where they came from.
#[derive(Clone)]
pub struct Credentials {
    /// Where the credentials came from, e.g. `secret pallet-system/regcred`. Safe to show.
    pub origin: String,
    /// The secret material.
    pub kind: CredentialKind,
}

/// The kinds of secret material a source may use.
#[derive(Clone)]
pub enum CredentialKind {
    /// HTTP basic auth (registries, git over HTTPS, web servers).
    Basic {
        /// User name.
        username: String,
        /// Password or token.
        password: String,
    },
    /// A bearer token (web servers, registries); for git over HTTPS it is sent as the password.
    Token(String),
    /// A docker config (`.dockerconfigjson`): credentials per registry host.
    DockerConfig(DockerConfig),
    /// An SSH private key for git, with the known_hosts lines the server key must match.
    SshKey {
        /// PEM/OpenSSH private key.
        private_key: String,
        /// Passphrase of the key, if any.
        passphrase: Option<String>,
        /// known_hosts content (plain host patterns; hashed entries are not supported yet).
        known_hosts: String,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            CredentialKind::Basic { .. } => "basic",
            CredentialKind::Token(_) => "token",
            CredentialKind::DockerConfig(_) => "dockerconfigjson",
            CredentialKind::SshKey { .. } => "ssh-key",
        };
        f.debug_struct("Credentials")
            .field("origin", &self.origin)
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

/// Registry credentials from a docker config, by registry host.
#[derive(Clone, Default)]
pub struct DockerConfig {
    entries: BTreeMap<String, (String, String)>,
}

impl DockerConfig {
    /// Parses `.dockerconfigjson` (`{"auths": {...}}`) or the legacy `.dockercfg` (the map itself).
    pub fn parse(json: &[u8]) -> Result<Self, String> {
        let value: serde_json::Value =
            serde_json::from_slice(json).map_err(|_| "not valid JSON".to_string())?;
        let auths = value
            .get("auths")
            .unwrap_or(&value)
            .as_object()
            .ok_or("no \"auths\" object")?;
        let mut entries = BTreeMap::new();
        for (server, entry) in auths {
            let user = entry.get("username").and_then(|v| v.as_str());
            let pass = entry.get("password").and_then(|v| v.as_str());
            let pair = match (user, pass) {
                (Some(u), Some(p)) => (u.to_string(), p.to_string()),
                _ => {
                    let Some(auth) = entry.get("auth").and_then(|v| v.as_str()) else {
                        continue;
                    };
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth)
                        .map_err(|_| format!("entry for {server}: \"auth\" is not base64"))?;
                    let text = String::from_utf8(decoded)
                        .map_err(|_| format!("entry for {server}: \"auth\" is not UTF-8"))?;
                    let (u, p) = text.split_once(':').ok_or_else(|| {
                        format!("entry for {server}: \"auth\" is not user:password")
                    })?;
                    (u.to_string(), p.to_string())
                }
            };
            entries.insert(normalize_registry(server), pair);
        }
        Ok(DockerConfig { entries })
    }

    /// The username and password for a registry host (with port), if the config has one.
    pub fn for_registry(&self, registry: &str) -> Option<(&str, &str)> {
        let key = normalize_registry(registry);
        self.entries
            .get(&key)
            .map(|(u, p)| (u.as_str(), p.as_str()))
    }
}

/// `https://index.docker.io/v1/` → `docker.io`; `https://reg:5000/path` → `reg:5000`.
fn normalize_registry(server: &str) -> String {
    let s = server
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = s.split('/').next().unwrap_or(s).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_string()
        }
        _ => host,
    }
}

impl Credentials {
    /// Builds credentials from a Secret's `type` and decoded `data`, recognising
    /// `kubernetes.io/dockerconfigjson`, `kubernetes.io/dockercfg`, `kubernetes.io/basic-auth`,
    /// `kubernetes.io/ssh-auth`, and Opaque secrets holding the same keys (or `token`).
    /// Errors name the secret (`origin`) and the missing key, never a value.
    pub fn from_secret_data(
        origin: &str,
        secret_type: Option<&str>,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, SourceError> {
        let bad = |reason: String| SourceError::InvalidCredentials {
            origin: origin.to_string(),
            reason,
        };
        let text = |key: &str| -> Result<Option<String>, SourceError> {
            data.get(key)
                .map(|v| {
                    String::from_utf8(v.clone()).map_err(|_| bad(format!("key {key} is not UTF-8")))
                })
                .transpose()
        };
        let docker_key = match secret_type {
            Some("kubernetes.io/dockercfg") => Some(".dockercfg"),
            Some("kubernetes.io/dockerconfigjson") => Some(".dockerconfigjson"),
            _ if data.contains_key(".dockerconfigjson") => Some(".dockerconfigjson"),
            _ if data.contains_key(".dockercfg") => Some(".dockercfg"),
            _ => None,
        };
        let kind = if let Some(key) = docker_key {
            let raw = data
                .get(key)
                .ok_or_else(|| bad(format!("missing key {key}")))?;
            CredentialKind::DockerConfig(
                DockerConfig::parse(raw).map_err(|r| bad(format!("key {key}: {r}")))?,
            )
        } else if let Some(private_key) = text("ssh-privatekey")? {
            let known_hosts = text("known_hosts")?.ok_or_else(|| {
                bad("ssh-privatekey needs a known_hosts key to verify the server".into())
            })?;
            CredentialKind::SshKey {
                private_key,
                passphrase: text("passphrase")?,
                known_hosts,
            }
        } else if let Some(password) = text("password")? {
            let username = text("username")?.ok_or_else(|| bad("missing key username".into()))?;
            CredentialKind::Basic { username, password }
        } else if let Some(token) = text("token")? {
            CredentialKind::Token(token.trim().to_string())
        } else {
            return Err(bad(
                "no usable keys: expected .dockerconfigjson, username/password, token, or ssh-privatekey"
                    .into(),
            ));
        };
        Ok(Credentials {
            origin: origin.to_string(),
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn dockerconfigjson_matches_by_host() {
        let auth = base64::engine::general_purpose::STANDARD.encode("bob:hunter2");
        let json = format!(
            r#"{{"auths":{{"https://127.0.0.1:5000/v2/":{{"auth":"{auth}"}},"https://index.docker.io/v1/":{{"username":"u","password":"p"}}}}}}"#
        );
        let c = Credentials::from_secret_data(
            "secret ns/regcred",
            Some("kubernetes.io/dockerconfigjson"),
            &data(&[(".dockerconfigjson", &json)]),
        )
        .unwrap();
        let CredentialKind::DockerConfig(cfg) = &c.kind else {
            panic!("wrong kind")
        };
        assert_eq!(cfg.for_registry("127.0.0.1:5000"), Some(("bob", "hunter2")));
        assert_eq!(cfg.for_registry("docker.io"), Some(("u", "p")));
        assert_eq!(cfg.for_registry("other:5000"), None);
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("hunter2") && !dbg.contains(&auth), "{dbg}");
    }

    #[test]
    fn basic_token_and_ssh_secrets() {
        let c = Credentials::from_secret_data(
            "secret ns/b",
            Some("kubernetes.io/basic-auth"),
            &data(&[("username", "u"), ("password", "s3cret")]),
        )
        .unwrap();
        assert!(matches!(c.kind, CredentialKind::Basic { .. }));
        assert!(!format!("{c:?}").contains("s3cret"));
        let c = Credentials::from_secret_data("secret ns/t", None, &data(&[("token", "tok\n")]))
            .unwrap();
        assert!(matches!(c.kind, CredentialKind::Token(ref t) if t == "tok"));
        let err = Credentials::from_secret_data(
            "secret ns/s",
            Some("kubernetes.io/ssh-auth"),
            &data(&[("ssh-privatekey", "KEYMATERIAL")]),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("secret ns/s") && msg.contains("known_hosts"),
            "{msg}"
        );
        assert!(!msg.contains("KEYMATERIAL"));
    }
}
