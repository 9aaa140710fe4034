//! Who is looking, and with which Kubernetes identity the view acts for them.
//!
//! - `pallet ui` ([`Access::Local`]) serves one person: everything goes to the API server with
//!   their kubeconfig's credentials. The address is loopback only, and a login secret made at
//!   start (in the address the command prints) keeps other local users and web pages out: the
//!   first visit trades it for an `HttpOnly`, `SameSite=Strict` cookie.
//! - The agent's view ([`Access::Agent`]) authenticates each request with a Kubernetes bearer
//!   token (the `Authorization` header, or the cookie its login form sets), checked with a
//!   TokenReview. The overview and its live stream come from the agent's own watch, so they are
//!   authorised with a SubjectAccessReview of the user (`list bundledeployments`). Everything
//!   else (a bundle's page, its objects, Events, revisions, the resume preview, and every
//!   action) is sent to the API server as the user, by impersonation: the API server's RBAC and
//!   admission decide, its own message is shown when they refuse, and its audit log names the
//!   user. A SubjectAccessReview per action would be a second opinion that could disagree with
//!   the API server (admission policies, webhooks); impersonation asks the one that decides.
//!
//! Every action is a POST carrying a CSRF token derived from the credential (so it works across
//! agent replicas without shared state), from a page of the same origin.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use subtle::ConstantTimeEq as _;

/// The cookie that carries the credential.
pub const COOKIE: &str = "pallet-ui";
/// How long a TokenReview's answer is used.
const REVIEW_FOR: Duration = Duration::from_secs(60);
/// How long a SubjectAccessReview's answer is used.
const ACCESS_FOR: Duration = Duration::from_secs(30);
/// How long an impersonating client is kept for its user.
const CLIENT_FOR: Duration = Duration::from_secs(300);
/// Entries each cache holds at most (past it, expired ones go, then all).
const CACHE_ENTRIES: usize = 1024;
/// The longest token accepted (ServiceAccount tokens are about 1 KiB).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// A user the API server authenticated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

/// Why a request is not served.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No credential, or one that is not valid: the login page.
    Login(String),
    /// Authenticated, but not allowed: the message says what.
    Forbidden(String),
    /// The API server could not be asked.
    Unavailable(String),
}

/// The person behind one request, as the handlers see them.
#[derive(Clone)]
pub struct Viewer {
    /// The client acting for them.
    pub client: Client,
    /// Its configuration (for what builds clients of its own: the resume preview's render).
    pub config: Config,
    /// Who they are, in words.
    pub user: String,
    /// The CSRF token their forms carry.
    pub csrf: String,
    /// Whether the view offers actions.
    pub can_act: bool,
}

/// A small cache with expiry.
struct Expiring<K, V> {
    entries: HashMap<K, (V, Instant)>,
    ttl: Duration,
}

impl<K: std::hash::Hash + Eq, V: Clone> Expiring<K, V> {
    fn new(ttl: Duration) -> Self {
        Expiring {
            entries: HashMap::new(),
            ttl,
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(v, _)| v.clone())
    }

    fn put(&mut self, key: K, value: V) {
        if self.entries.len() >= CACHE_ENTRIES {
            let ttl = self.ttl;
            self.entries.retain(|_, (_, at)| at.elapsed() < ttl);
            if self.entries.len() >= CACHE_ENTRIES {
                self.entries.clear();
            }
        }
        self.entries.insert(key, (value, Instant::now()));
    }
}

/// SubjectAccessReview answers by user and verb: allowed, or why not.
type AccessAnswers = Expiring<(User, &'static str), Result<(), String>>;

/// How the agent's view authenticates and acts.
pub struct AgentAccess {
    client: Client,
    config: Config,
    actions: bool,
    reviews: Mutex<Expiring<String, User>>,
    allowed: Mutex<AccessAnswers>,
    clients: Mutex<Expiring<User, Client>>,
}

/// `pallet ui`'s one user.
pub struct LocalAccess {
    /// The login secret (also the cookie's value).
    pub secret: String,
    /// The kubeconfig's client.
    pub client: Client,
    /// The kubeconfig's configuration.
    pub config: Config,
    /// The kubeconfig's user and context, in words.
    pub who: String,
}

/// How requests are authenticated.
pub enum Access {
    /// `pallet ui`: one user with their kubeconfig.
    Local(Box<LocalAccess>),
    /// The agent's view.
    Agent(Box<AgentAccess>),
}

/// A new random secret: 32 bytes from the operating system, hex.
pub fn new_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("reading random bytes: {e}"))?;
    Ok(crate::source::hex(&bytes))
}

/// The CSRF token of `credential`: a hash of it, so only a page that has the credential can
/// know it, and every replica computes the same.
pub fn csrf_token(credential: &str) -> String {
    crate::source::sha256_hex(format!("pallet-ui csrf\0{credential}").as_bytes())
}

/// True when `given` is `expected` (in constant time).
pub fn same_secret(given: &str, expected: &str) -> bool {
    !given.is_empty() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// The value of cookie `name` in `headers`.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

/// The bearer token of the `Authorization` header.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

/// The credential of a request: the `Authorization` bearer token, else the cookie.
pub fn credential(headers: &HeaderMap) -> Option<String> {
    bearer(headers)
        .or_else(|| cookie(headers, COOKIE))
        .filter(|c| !c.is_empty() && c.len() <= MAX_TOKEN_BYTES)
}

/// The `Set-Cookie` value that stores `credential` (`secure` over HTTPS), or clears it when
/// empty.
pub fn set_cookie(credential: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    if credential.is_empty() {
        return format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}");
    }
    format!("{COOKIE}={credential}; Path=/; HttpOnly; SameSite=Strict; Max-Age=28800{secure}")
}

/// True when a state-changing request comes from a page of this server: its `Origin` (sent by
/// browsers on every POST) names the host it was sent to, and `Sec-Fetch-Site`, where sent, says
/// same-origin.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        if site != "same-origin" && site != "none" {
            return false;
        }
    }
    match (text("origin"), text("host")) {
        (Some(origin), Some(host)) => {
            let authority = origin
                .split_once("://")
                .map(|(_, rest)| rest)
                .unwrap_or(origin);
            authority.eq_ignore_ascii_case(host)
        }
        (Some(_), None) => false,
        // Clients that send no Origin (not browsers) have no ambient credential to abuse.
        (None, _) => true,
    }
}

impl Access {
    /// The agent's view, acting with `config`'s identity and impersonating its users.
    pub fn agent(client: Client, config: Config, actions: bool) -> Access {
        Access::Agent(Box::new(AgentAccess {
            client,
            config,
            actions,
            reviews: Mutex::new(Expiring::new(REVIEW_FOR)),
            allowed: Mutex::new(Expiring::new(ACCESS_FOR)),
            clients: Mutex::new(Expiring::new(CLIENT_FOR)),
        }))
    }

    /// True for the agent's view.
    pub fn is_agent(&self) -> bool {
        matches!(self, Access::Agent(_))
    }

    /// The viewer of a request with `headers`. With `list_access`, the user must also be allowed
    /// to list BundleDeployments (pages served from the shared index).
    pub async fn viewer(&self, headers: &HeaderMap, list_access: bool) -> Result<Viewer, Refusal> {
        let credential = credential(headers);
        match self {
            Access::Local(local) => match credential {
                Some(given) if same_secret(&given, &local.secret) => Ok(Viewer {
                    client: local.client.clone(),
                    config: local.config.clone(),
                    user: local.who.clone(),
                    csrf: csrf_token(&local.secret),
                    can_act: true,
                }),
                _ => Err(Refusal::Login(
                    "open the address `pallet ui` printed: it carries the login secret".into(),
                )),
            },
            Access::Agent(agent) => {
                let Some(token) = credential else {
                    return Err(Refusal::Login("sign in with a Kubernetes token".into()));
                };
                let user = agent.review(&token).await?;
                if list_access {
                    agent.allowed(&user, "list").await?;
                }
                Ok(Viewer {
                    client: agent.client_for(&user)?,
                    config: impersonating(&agent.config, &user),
                    user: user.name.clone(),
                    csrf: csrf_token(&token),
                    can_act: agent.actions,
                })
            }
        }
    }
}

impl AgentAccess {
    /// The user `token` belongs to (a TokenReview, remembered for a minute).
    async fn review(&self, token: &str) -> Result<User, Refusal> {
        let key = crate::source::sha256_hex(token.as_bytes());
        if let Some(user) = lock(&self.reviews).get(&key) {
            return Ok(user);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Refusal::Unavailable(format!("reviewing the token: {e}")))?;
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(info)) => User {
                name: info.username.unwrap_or_default(),
                groups: info.groups.unwrap_or_default(),
            },
            _ => {
                return Err(Refusal::Login(format!(
                    "the API server did not accept the token{}",
                    status.error.map(|e| format!(": {e}")).unwrap_or_default()
                )))
            }
        };
        lock(&self.reviews).put(key, user.clone());
        Ok(user)
    }

    /// Whether `user` may `verb` BundleDeployments (a SubjectAccessReview, remembered 30 s).
    async fn allowed(&self, user: &User, verb: &'static str) -> Result<(), Refusal> {
        let key = (user.clone(), verb);
        let cached = lock(&self.allowed).get(&key);
        let answer = match cached {
            Some(answer) => answer,
            None => {
                let answer = self.ask(user, verb).await?;
                lock(&self.allowed).put(key, answer.clone());
                answer
            }
        };
        answer.map_err(Refusal::Forbidden)
    }

    async fn ask(&self, user: &User, verb: &str) -> Result<Result<(), String>, Refusal> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(crate::api::GROUP.into()),
                    resource: Some("bundledeployments".into()),
                    verb: Some(verb.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Refusal::Unavailable(format!("asking the API server for access: {e}")))?;
        let status = answer.status.unwrap_or_default();
        if status.allowed {
            return Ok(Ok(()));
        }
        Ok(Err(format!(
            "User \"{}\" cannot {verb} resource \"bundledeployments\" in API group \"{}\" at the cluster scope{}",
            user.name,
            crate::api::GROUP,
            status
                .reason
                .filter(|r| !r.is_empty())
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        )))
    }

    /// A client that impersonates `user` (kept five minutes).
    fn client_for(&self, user: &User) -> Result<Client, Refusal> {
        if let Some(client) = lock(&self.clients).get(user) {
            return Ok(client);
        }
        let client = Client::try_from(impersonating(&self.config, user))
            .map_err(|e| Refusal::Unavailable(format!("building a client: {e}")))?;
        lock(&self.clients).put(user.clone(), client.clone());
        Ok(client)
    }
}

/// `config` impersonating `user` and their groups. RBAC decides by these; the user's extra
/// attributes and uid are not passed on (they matter to webhook authorizers only, and passing
/// them needs a grant per attribute).
pub fn impersonating(config: &Config, user: &User) -> Config {
    let mut config = config.clone();
    config.auth_info.impersonate = Some(user.name.clone());
    config.auth_info.impersonate_groups = Some(
        user.groups
            .iter()
            // The API server adds system:authenticated to every impersonated user itself.
            .filter(|g| g.as_str() != "system:authenticated")
            .cloned()
            .collect(),
    )
    .filter(|groups: &Vec<String>| !groups.is_empty());
    config
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn the_credential_is_the_bearer_token_or_the_cookie() {
        assert_eq!(
            credential(&headers(&[("authorization", "Bearer abc")])).as_deref(),
            Some("abc")
        );
        assert_eq!(
            credential(&headers(&[("cookie", "a=1; pallet-ui=xyz; b=2")])).as_deref(),
            Some("xyz")
        );
        assert_eq!(credential(&headers(&[("cookie", "pallet-ui=")])), None);
        let long = format!("Bearer {}", "x".repeat(MAX_TOKEN_BYTES + 1));
        assert_eq!(credential(&headers(&[("authorization", &long)])), None);
    }

    #[test]
    fn csrf_tokens_depend_on_the_credential_and_origins_are_checked() {
        assert_eq!(csrf_token("a"), csrf_token("a"));
        assert_ne!(csrf_token("a"), csrf_token("b"));
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("", ""));
        assert!(!same_secret("abd", "abc"));
        let same = headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080"),
        ]);
        assert!(same_origin(&same));
        let other = headers(&[
            ("origin", "https://evil.example"),
            ("host", "127.0.0.1:8080"),
        ]);
        assert!(!same_origin(&other));
        let cross = headers(&[("sec-fetch-site", "cross-site")]);
        assert!(!same_origin(&cross));
        assert!(same_origin(&headers(&[])));
    }

    #[test]
    fn cookies_are_http_only_and_same_site_strict() {
        let set = set_cookie("tok", false);
        assert!(set.starts_with("pallet-ui=tok;"));
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"));
        assert!(!set.contains("Secure"));
        assert!(set_cookie("tok", true).ends_with("; Secure"));
        assert!(set_cookie("", false).contains("Max-Age=0"));
    }

    #[test]
    fn impersonation_names_the_user_and_their_groups() {
        let config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        let user = User {
            name: "system:serviceaccount:team:viewer".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
        };
        let acting = impersonating(&config, &user);
        assert_eq!(
            acting.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:team:viewer")
        );
        assert_eq!(
            acting.auth_info.impersonate_groups,
            Some(vec!["system:serviceaccounts".to_string()])
        );
        let alone = impersonating(
            &config,
            &User {
                name: "alice".into(),
                groups: vec![],
            },
        );
        assert_eq!(alone.auth_info.impersonate_groups, None);
    }

    #[test]
    fn caches_expire_and_stay_bounded() {
        let mut cache = Expiring::new(Duration::from_secs(60));
        for i in 0..(CACHE_ENTRIES + 5) {
            cache.put(i, i);
        }
        assert!(cache.entries.len() <= CACHE_ENTRIES);
        let mut gone = Expiring::new(Duration::ZERO);
        gone.put(1, 1);
        assert_eq!(gone.get(&1), None);
    }
}
