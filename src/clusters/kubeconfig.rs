//! A remote cluster's kubeconfig, read from a Secret: untrusted bytes (whoever may write the
//! Secret chooses them), so they are read under a size bound and only what needs no local file
//! and runs no program is accepted. Pure: no I/O.
//!
//! Refused, as Flux's kustomize-controller refuses them by default:
//! - an `exec` credential plugin or an `auth-provider` (they run a program, or reach a token
//!   endpoint, chosen by the Secret's author, inside the agent);
//! - file paths (`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`):
//!   they would read the agent's own files (its ServiceAccount token among them);
//! - `proxy-url` (the agent connects to the API server it names, and to nothing else).
//!
//! Accepted: inline CA data, a bearer token, a client certificate and key, a username and
//! password; `insecure-skip-tls-verify`, `tls-server-name` and impersonation (`as`) as written.

use kube::config::{KubeConfigOptions, Kubeconfig};

/// The largest kubeconfig read (a Secret holds at most 1 MiB; a kubeconfig with a CA bundle and
/// a client certificate is a few KiB).
pub const MAX_KUBECONFIG_BYTES: usize = 256 * 1024;

/// Why a kubeconfig cannot be used. The message says what and where, never a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KubeconfigRefused(pub String);

/// A kubeconfig checked and resolved to one context: what the client is built from.
pub struct RemoteConfig {
    /// The client configuration (timeouts are set by the caller).
    pub config: kube::Config,
    /// The API server's host (an IP literal or a name), for the egress check.
    pub host: String,
    /// The API server's port.
    pub port: u16,
}

/// Reads `bytes` as a kubeconfig and resolves `context` (None: its current context), refusing
/// what [`super::kubeconfig`]'s module doc lists.
pub async fn remote_config(
    bytes: &[u8],
    context: Option<&str>,
) -> Result<RemoteConfig, KubeconfigRefused> {
    let kubeconfig = parse(bytes)?;
    let context_name = match context {
        Some(context) => context.to_string(),
        None => kubeconfig.current_context.clone().ok_or_else(|| {
            KubeconfigRefused(
                "the kubeconfig has no current-context; name one in spec.kubeConfig.context".into(),
            )
        })?,
    };
    check(&kubeconfig, &context_name)?;
    let options = KubeConfigOptions {
        context: Some(context_name.clone()),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| KubeconfigRefused(format!("context {context_name:?} cannot be used: {e}")))?;
    let host = config
        .cluster_url
        .host()
        .map(str::to_string)
        .ok_or_else(|| KubeconfigRefused("the cluster's server URL has no host".into()))?;
    let port = config
        .cluster_url
        .port_u16()
        .unwrap_or(match config.cluster_url.scheme_str() {
            Some("http") => 80,
            _ => 443,
        });
    Ok(RemoteConfig { config, host, port })
}

/// Parses the bytes (UTF-8 YAML or JSON, at most [`MAX_KUBECONFIG_BYTES`]).
pub fn parse(bytes: &[u8]) -> Result<Kubeconfig, KubeconfigRefused> {
    if bytes.len() > MAX_KUBECONFIG_BYTES {
        return Err(KubeconfigRefused(format!(
            "the kubeconfig is {} bytes, over the {} bytes read",
            bytes.len(),
            MAX_KUBECONFIG_BYTES
        )));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|_| KubeconfigRefused("the kubeconfig is not UTF-8 text".into()))?;
    if text.trim().is_empty() {
        return Err(KubeconfigRefused("the kubeconfig is empty".into()));
    }
    Kubeconfig::from_yaml(text).map_err(|e| {
        // The parser's message may quote the text: keep only its first line, which names
        // the place, not the value.
        let message = e.to_string();
        let first = message.lines().next().unwrap_or("").chars().take(200);
        KubeconfigRefused(format!(
            "the kubeconfig is not valid: {}",
            first.collect::<String>()
        ))
    })
}

/// Refuses what the module doc lists, in the context used (its cluster and user).
pub fn check(kubeconfig: &Kubeconfig, context_name: &str) -> Result<(), KubeconfigRefused> {
    let refused = |what: String| Err(KubeconfigRefused(what));
    let Some(context) = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
    else {
        let known: Vec<&str> = kubeconfig
            .contexts
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        return refused(format!(
            "the kubeconfig has no context {context_name:?} (it has: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ));
    };
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref());
    let Some(cluster) = cluster else {
        return refused(format!(
            "context {context_name:?} names cluster {:?}, which the kubeconfig does not have",
            context.cluster
        ));
    };
    let where_ = format!("cluster {:?} of the kubeconfig", context.cluster);
    if cluster.certificate_authority.is_some() {
        return refused(format!(
            "{where_} names a certificate-authority file; give certificate-authority-data instead (files of the agent are never read)"
        ));
    }
    if cluster.proxy_url.is_some() {
        return refused(format!("{where_} sets proxy-url, which is not supported"));
    }
    match cluster.server.as_deref() {
        None | Some("") => return refused(format!("{where_} has no server")),
        Some(server) if !server.starts_with("https://") && !server.starts_with("http://") => {
            return refused(format!(
                "{where_} has server {server:?}, not an http(s) URL"
            ))
        }
        Some(_) => {}
    }
    let Some(user_name) = context.user.as_deref() else {
        return Ok(()); // anonymous
    };
    let Some(user) = kubeconfig
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .and_then(|u| u.auth_info.as_ref())
    else {
        return refused(format!(
            "context {context_name:?} names user {user_name:?}, which the kubeconfig does not have"
        ));
    };
    let where_ = format!("user {user_name:?} of the kubeconfig");
    if user.exec.is_some() {
        return refused(format!(
            "{where_} uses an exec credential plugin, which would run a program inside the agent; give a token or a client certificate instead"
        ));
    }
    if user.auth_provider.is_some() {
        return refused(format!(
            "{where_} uses an auth-provider; give a token or a client certificate instead"
        ));
    }
    for (set, field) in [
        (user.token_file.is_some(), "tokenFile"),
        (user.client_certificate.is_some(), "client-certificate"),
        (user.client_key.is_some(), "client-key"),
    ] {
        if set {
            return refused(format!(
                "{where_} names a {field} file; give the data inline instead (files of the agent are never read)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA certificate, base64 as a kubeconfig holds it.
    fn ca_data() -> String {
        use base64::Engine;
        let ca = rcgen::generate_simple_self_signed(vec!["ca.example".to_string()]).unwrap();
        base64::engine::general_purpose::STANDARD.encode(ca.cert.pem())
    }

    fn kubeconfig(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: main\nclusters:\n- name: c\n  cluster:\n{cluster}contexts:\n- name: main\n  context: {{cluster: c, user: u}}\n- name: other\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user:\n{user}"
        )
    }

    fn server() -> String {
        "    server: https://127.0.0.1:6443\n".into()
    }

    fn refusal(text: &str, context: Option<&str>) -> String {
        let kubeconfig = parse(text.as_bytes()).unwrap();
        check(&kubeconfig, context.unwrap_or("main"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_program_or_a_file_of_the_agent_is_refused() {
        let exec = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: sh\n      args: [-c, id]\n";
        assert!(refusal(&kubeconfig(&server(), exec), None).contains("exec credential plugin"));
        let provider = "    auth-provider:\n      name: oidc\n      config: {}\n";
        assert!(refusal(&kubeconfig(&server(), provider), None).contains("auth-provider"));
        let token_file = "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n";
        assert!(refusal(&kubeconfig(&server(), token_file), None).contains("tokenFile file"));
        let cert_file = "    client-certificate: /etc/pki/cert.pem\n    client-key-data: eA==\n";
        assert!(refusal(&kubeconfig(&server(), cert_file), None).contains("client-certificate"));
        let ca_file = format!("{}    certificate-authority: /etc/ca.pem\n", server());
        let token = "    token: abc\n";
        assert!(refusal(&kubeconfig(&ca_file, token), None).contains("certificate-authority file"));
        let proxy = format!("{}    proxy-url: http://10.0.0.1:3128\n", server());
        assert!(refusal(&kubeconfig(&proxy, token), None).contains("proxy-url"));
    }

    #[test]
    fn missing_pieces_are_named() {
        let token = "    token: abc\n";
        let text = kubeconfig(&server(), token);
        assert!(refusal(&text, Some("elsewhere"))
            .contains("no context \"elsewhere\" (it has: main, other)"));
        let no_server = kubeconfig("    insecure-skip-tls-verify: true\n", token);
        assert!(refusal(&no_server, None).contains("has no server"));
        let file_url = kubeconfig("    server: file:///etc/passwd\n", token);
        assert!(refusal(&file_url, None).contains("not an http(s) URL"));
        assert!(parse(b"").unwrap_err().to_string().contains("empty"));
        assert!(parse(&[0xff, 0xfe])
            .unwrap_err()
            .to_string()
            .contains("UTF-8"));
        let big = vec![b'#'; MAX_KUBECONFIG_BYTES + 1];
        assert!(parse(&big).unwrap_err().to_string().contains("over the"));
    }

    #[tokio::test]
    async fn inline_credentials_resolve_to_a_client_configuration() {
        let cluster = format!(
            "{}    certificate-authority-data: {}\n",
            server(),
            ca_data()
        );
        let text = kubeconfig(&cluster, "    token: abc\n");
        let remote = remote_config(text.as_bytes(), Some("other")).await.unwrap();
        assert_eq!(remote.host, "127.0.0.1");
        assert_eq!(remote.port, 6443);
        assert!(remote.config.root_cert.is_some());
        // Without a context: the current one.
        let remote = remote_config(text.as_bytes(), None).await.unwrap();
        assert_eq!(
            remote.config.cluster_url.to_string(),
            "https://127.0.0.1:6443/"
        );
        // A refusal never quotes a credential.
        let exec = "    token: s3cr3t\n    exec:\n      command: sh\n";
        let Err(error) = remote_config(kubeconfig(&server(), exec).as_bytes(), None).await else {
            panic!("an exec plugin was accepted");
        };
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever the bytes, reading them ends with a kubeconfig or a refusal, never a panic.
        #[test]
        fn any_bytes_are_read_or_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
            if let Ok(kubeconfig) = parse(&bytes) {
                let _ = check(&kubeconfig, "main");
            }
        }

        /// YAML-shaped text around the real keys, likewise.
        #[test]
        fn kubeconfig_shaped_text_is_read_or_refused(
            server in "(https?://)?[a-z0-9.:\\[\\]]{0,30}",
            user in "(token|tokenFile|exec|client-key-data|username): [a-z/{}]{0,12}",
        ) {
            let text = format!(
                "current-context: main\nclusters:\n- name: c\n  cluster:\n    server: {server}\ncontexts:\n- name: main\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user:\n    {user}\n"
            );
            if let Ok(kubeconfig) = parse(text.as_bytes()) {
                let _ = check(&kubeconfig, "main");
            }
        }
    }
}
